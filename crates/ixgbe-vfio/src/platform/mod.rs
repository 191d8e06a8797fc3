//! Opening a real 82599: [`open`] validates the PCI address, checks sysfs, and returns the register
//! window ([`Mmio`]) and the DMA space ([`DmaSpace`]) the driver runs on, through VFIO when the device is
//! bound to `vfio-pci` ([`vfio`]) and through the unsafe no-IOMMU sysfs fallback ([`sysfs`]) only
//! when the caller allows it.
//!
//! Every error says what is wrong and how to fix it: the bind commands, the other members of a
//! non-viable IOMMU group, how to reserve hugepages, who owns `/dev/vfio/N`.
//!
//! ```no_run
//! use ixgbe_vfio::platform::OpenOptions;
//! use ixgbe_vfio::platform::vfio::VfioContainer;
//! use netchannel::pool::{HugePages, Pool};
//!
//! // One device: `open` makes its own VFIO container.
//! let nic = ixgbe_vfio::platform::open("0000:03:00.0")?;
//! let (bar0, dma) = (nic.bar0(), nic.dma());
//! let ctrl = bar0.read32(0x0000); // CTRL
//! let ring = dma.alloc(512 * 16)?; // a descriptor ring
//! let pool = Pool::builder(4096).hugepages(HugePages::Require).build()?;
//! let pool_dma = nic.map_pool(&pool)?; // pool buffers are now reachable by the NIC
//! # let _ = (ctrl, ring, pool_dma);
//!
//! // Two ports in one process share one container (one IOMMU address space).
//! let container = VfioContainer::open()?;
//! let port0 = OpenOptions::new().container(container.clone()).open("0000:03:00.0")?;
//! let port1 = OpenOptions::new().container(container).open("0000:03:00.1")?;
//! # let _ = (port0, port1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use netchannel::pool::Pool;

use crate::hw::{DmaError, DmaMapping, DmaSpace, Mmio};

pub mod bar;
pub mod pagemap;
pub mod pci;
pub mod sysfs;
pub mod vfio;
use crate::platform::pagemap::PagemapError;
use crate::platform::pci::{IXGBE_82599_DEVICE_IDS, ParsePciAddressError, PciAddress};
use crate::platform::sysfs::{PciFunction, SysfsDevice, SysfsRoot};
use crate::platform::vfio::{IommuKind, VfioContainer, VfioDevice};

/// A member of an IOMMU group, as listed in an [`OpenError::GroupNotViable`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    /// Its name in `kernel/iommu_groups/N/devices` (a PCI address).
    pub address: String,
    /// The driver bound to it, `None` when unbound.
    pub driver: Option<String>,
    /// Whether it is a PCI bridge (bridges never block a group).
    pub bridge: bool,
}

impl GroupMember {
    /// Whether this member lets VFIO use the group: unbound, bound to a VFIO driver or `pci-stub`, or a
    /// bridge.
    #[must_use]
    pub fn allows_vfio(&self) -> bool {
        self.bridge
            || match self.driver.as_deref() {
                None => true,
                Some(d) => {
                    d == "pci-stub" || d == "pcieport" || d.ends_with("vfio-pci") || d.ends_with("vfio_pci")
                }
            }
    }
}

/// Renders group members one per line, marking those that block the group.
struct Members<'a>(&'a [GroupMember]);

impl fmt::Display for Members<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "    (none: the group holds only this device)");
        }
        for (i, m) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            let driver = m.driver.as_deref().unwrap_or("no driver");
            let verdict =
                if m.allows_vfio() { "ok" } else { "blocks the group: bind it to vfio-pci or unbind it" };
            write!(f, "    {} (driver: {driver}) {verdict}", m.address)?;
        }
        Ok(())
    }
}

fn driver_words(driver: Option<&String>) -> String {
    driver.map_or_else(|| "bound to no driver".to_owned(), |d| format!("bound to {d}"))
}

fn fallback_words(allowed: bool) -> &'static str {
    if allowed {
        ""
    } else {
        "\n(without an IOMMU, OpenOptions::allow_unsafe_fallback(true) drives an unbound device through sysfs \
         instead: unsafe for production)"
    }
}

fn id_list() -> String {
    IXGBE_82599_DEVICE_IDS.iter().map(|(id, _)| format!("{id:#06x}")).collect::<Vec<_>>().join(", ")
}

/// Why a device could not be opened, and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The PCI address is malformed.
    #[error(transparent)]
    InvalidAddress(#[from] ParsePciAddressError),
    /// Sysfs has no such device.
    #[error(
        "no PCI device {address}: {} does not exist; list the Intel NICs with `lspci -D -d 8086:` (the \
         first column is the address to use)",
        path.display()
    )]
    NoSuchDevice {
        /// The address asked for.
        address: PciAddress,
        /// The sysfs directory that is missing.
        path: PathBuf,
    },
    /// The device is not an 82599.
    #[error(
        "{address} is not an Intel 82599: sysfs says vendor {vendor:#06x}, device {device:#06x}; this driver \
         needs vendor 0x8086 and one of the 82599 device ids ({ids})",
        ids = id_list()
    )]
    NotAn82599 {
        /// The address.
        address: PciAddress,
        /// Its vendor id.
        vendor: u16,
        /// Its device id.
        device: u16,
    },
    /// A kernel driver owns the device, or it is unbound and the fallback is not allowed.
    #[error(
        "{address} is {}, not vfio-pci. Bind it to vfio-pci as root:\n{commands}\nor run: \
         scripts/vfio-bind.sh {address}{}",
        driver_words(driver.as_ref()),
        fallback_words(*fallback_allowed)
    )]
    NotBoundToVfio {
        /// The address.
        address: PciAddress,
        /// The driver that owns it (`None`: unbound).
        driver: Option<String>,
        /// The shell commands that bind it, one per line.
        commands: String,
        /// Whether the caller allowed the sysfs fallback (the message mentions it when not).
        fallback_allowed: bool,
    },
    /// Another device in the IOMMU group is owned by a kernel driver.
    #[error(
        "IOMMU group {group} of {address} is not viable: VFIO hands out a device only when every device \
         in its group is bound to vfio-pci (or to no driver). The other devices in {}:\n{}\nBind each \
         blocking device to vfio-pci as well (scripts/vfio-bind.sh ADDRESS), or move the NIC to a slot \
         with a group of its own",
        devices_dir.display(),
        Members(peers)
    )]
    GroupNotViable {
        /// The address.
        address: PciAddress,
        /// The group number.
        group: u32,
        /// `kernel/iommu_groups/N/devices`.
        devices_dir: PathBuf,
        /// The other members of the group.
        peers: Vec<GroupMember>,
    },
    /// The device has no IOMMU group: the IOMMU is off or absent.
    #[error(
        "{address} has no IOMMU group ({} is missing): the IOMMU is off. Turn it on with `intel_iommu=on \
         iommu=pt` (or `amd_iommu=on`) on the kernel command line and reboot; or, for development only, \
         use `modprobe vfio enable_unsafe_noiommu_mode=1` (scripts/vfio-bind.sh --noiommu), or the sysfs \
         fallback (OpenOptions::allow_unsafe_fallback)",
        path.display()
    )]
    NoIommuGroup {
        /// The address.
        address: PciAddress,
        /// The missing `iommu_group` link.
        path: PathBuf,
    },
    /// `/dev/vfio/vfio` or the group's device node is missing.
    #[error("VFIO is not available: {}: {source}; load it with `modprobe vfio-pci` (as root) and bind the NIC (scripts/vfio-bind.sh)", path.display())]
    VfioUnavailable {
        /// The missing node.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Opening a device node or sysfs file was refused.
    #[error(
        "permission denied opening {} ({owner}; this process runs as uid {euid}): run as root, or give \
         your user the file (`chown $USER {}`) and enough locked memory for DMA (`ulimit -l unlimited`, \
         or a memlock line in /etc/security/limits.conf)",
        path.display(),
        path.display()
    )]
    PermissionDenied {
        /// The file.
        path: PathBuf,
        /// Its owner and mode, as text.
        owner: String,
        /// The effective uid of this process.
        euid: u32,
        /// The OS error.
        source: io::Error,
    },
    /// A VFIO ioctl failed.
    #[error("{op} on {} failed: {source}{hint}", path.display())]
    Vfio {
        /// The ioctl.
        op: &'static str,
        /// The file it was issued on.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
        /// What to try, or empty.
        hint: &'static str,
    },
    /// The kernel's VFIO lacks something this driver needs.
    #[error("unsupported VFIO: {why}")]
    VfioUnsupported {
        /// What is missing.
        why: String,
    },
    /// BAR0 cannot be mapped.
    #[error("cannot map BAR0 of {address}: {why}")]
    Bar {
        /// The address.
        address: PciAddress,
        /// What went wrong.
        why: String,
    },
    /// No 2 MiB hugepages are free (the no-IOMMU paths need them).
    #[error(
        "no free 2 MiB hugepages ({free} free): without an IOMMU, DMA memory must be hugepages. Reserve \
         them as root: `{command}` (or scripts/vfio-bind.sh --hugepages 512)"
    )]
    NoHugepages {
        /// Free hugepages found.
        free: u64,
        /// The command that reserves 512 of them.
        command: String,
    },
    /// Physical addresses cannot be read (no-IOMMU paths).
    #[error(transparent)]
    Pagemap(#[from] PagemapError),
    /// Reading a sysfs file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// How a [`Device`] reaches the hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// VFIO with an IOMMU: DMA addresses are virtual addresses, checked by the IOMMU.
    Vfio,
    /// VFIO in `enable_unsafe_noiommu_mode`: DMA addresses are physical (hugepages). Unsafe.
    VfioNoIommu,
    /// sysfs `resource0` + physical addresses (hugepages). Unsafe.
    Sysfs,
}

/// Options for [`OpenOptions::open`].
#[derive(Clone, Debug)]
pub struct OpenOptions {
    sysfs: SysfsRoot,
    dev_vfio: PathBuf,
    allow_unsafe_fallback: bool,
    container: Option<Arc<VfioContainer>>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// Defaults: `/sys`, `/dev/vfio`, no fallback, a new VFIO container.
    #[must_use]
    pub fn new() -> Self {
        Self {
            sysfs: SysfsRoot::default(),
            dev_vfio: PathBuf::from("/dev/vfio"),
            allow_unsafe_fallback: false,
            container: None,
        }
    }

    /// Where sysfs is (a fake tree in tests).
    #[must_use]
    pub fn sysfs_root(mut self, root: SysfsRoot) -> Self {
        self.sysfs = root;
        self
    }

    /// Where the VFIO device nodes are (`/dev/vfio`).
    #[must_use]
    pub fn dev_vfio(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dev_vfio = dir.into();
        self
    }

    /// Whether a device not bound to `vfio-pci` (unbound, or bound to `uio_pci_generic`) may be driven
    /// through sysfs without an IOMMU. Off by default: unsafe for production.
    #[must_use]
    pub fn allow_unsafe_fallback(mut self, allow: bool) -> Self {
        self.allow_unsafe_fallback = allow;
        self
    }

    /// The VFIO container to open the device in; share one across all devices of a process.
    #[must_use]
    pub fn container(mut self, container: Arc<VfioContainer>) -> Self {
        self.container = Some(container);
        self
    }

    /// Opens the 82599 at `pci_addr` (`0000:03:00.0`).
    ///
    /// Order of checks: the address's form; the device exists; it is an 82599 (`vendor`, `device`);
    /// bound to `vfio-pci` -> VFIO (its IOMMU group must be viable); otherwise, when allowed and no
    /// kernel network driver owns it, the sysfs fallback.
    ///
    /// # Errors
    ///
    /// [`OpenError`], whose message says how to fix the problem.
    pub fn open(&self, pci_addr: &str) -> Result<Device, OpenError> {
        let address = PciAddress::parse(pci_addr)?;
        let function = PciFunction::find(&self.sysfs, &address)?;
        let variant = function.check_82599()?;
        let driver = function.driver()?;
        if driver.as_deref() == Some("vfio-pci") {
            function.check_group_viable()?;
            let container = match &self.container {
                Some(c) => c.clone(),
                None => VfioContainer::open_in(&self.dev_vfio)?,
            };
            let device = container.open_device_in(&self.sysfs, &address)?;
            let backend = match device.iommu() {
                IommuKind::NoIommu => Backend::VfioNoIommu,
                IommuKind::Type1 | IommuKind::Type1v2 => Backend::Vfio,
            };
            let (bar0, dma) = (device.bar0(), device.dma());
            tracing::info!(pci = %address, variant, ?backend, "opened 82599");
            return Ok(Device { address, variant, backend, bar0, dma, _vfio: Some(device), _sysfs: None });
        }
        let fallback_ok = matches!(driver.as_deref(), None | Some("uio_pci_generic"));
        if !(self.allow_unsafe_fallback && fallback_ok) {
            return Err(OpenError::NotBoundToVfio {
                address,
                commands: self.sysfs.bind_commands(&address, driver.as_deref()),
                driver,
                fallback_allowed: self.allow_unsafe_fallback,
            });
        }
        let device = SysfsDevice::open(function)?;
        let (bar0, dma) = (device.bar0(), device.dma());
        tracing::info!(pci = %address, variant, backend = ?Backend::Sysfs, "opened 82599");
        Ok(Device { address, variant, backend: Backend::Sysfs, bar0, dma, _vfio: None, _sysfs: Some(device) })
    }
}

/// Opens the 82599 at `pci_addr` through VFIO with default options (see [`OpenOptions::open`]); the
/// device gets a VFIO container of its own. To open several devices, share one container with
/// [`OpenOptions::container`].
///
/// # Errors
///
/// [`OpenError`], whose message says how to fix the problem.
pub fn open(pci_addr: &str) -> Result<Device, OpenError> {
    OpenOptions::new().open(pci_addr)
}

/// An opened 82599: its BAR0 and the DMA space to allocate rings from and map the pool into.
///
/// Dropping it closes the device; memory and mappings made from [`Device::dma`] keep what they need
/// (the container) alive on their own.
pub struct Device {
    address: PciAddress,
    variant: &'static str,
    backend: Backend,
    bar0: Arc<dyn Mmio>,
    dma: Arc<dyn DmaSpace>,
    _vfio: Option<VfioDevice>,
    _sysfs: Option<SysfsDevice>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("address", &self.address)
            .field("variant", &self.variant)
            .field("backend", &self.backend)
            .field("bar_len", &self.bar0.bar_len())
            .finish_non_exhaustive()
    }
}

impl Device {
    /// The PCI address.
    #[must_use]
    pub fn address(&self) -> &PciAddress {
        &self.address
    }

    /// The 82599 variant, e.g. `82599 SFP+ (82599ES)`.
    #[must_use]
    pub fn variant(&self) -> &'static str {
        self.variant
    }

    /// How the hardware is reached.
    #[must_use]
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// BAR0, the register window.
    #[must_use]
    pub fn bar0(&self) -> Arc<dyn Mmio> {
        self.bar0.clone()
    }

    /// Where DMA memory comes from.
    #[must_use]
    pub fn dma(&self) -> Arc<dyn DmaSpace> {
        self.dma.clone()
    }

    /// Makes `pool`'s buffers reachable by the device. Without an IOMMU the pool must be backed by
    /// hugepages (`HugePages::Require`); this is checked here before anything is mapped.
    ///
    /// # Errors
    ///
    /// [`DmaError::Map`] saying why.
    pub fn map_pool(&self, pool: &Pool) -> Result<DmaMapping, DmaError> {
        map_pool_region(&*self.dma, self.backend, pool)
    }
}

/// [`Device::map_pool`] for any DMA space: refuses a non-hugepage region up front on the no-IOMMU
/// backends, then maps the region.
///
/// # Errors
///
/// [`DmaError::Map`].
pub fn map_pool_region(dma: &dyn DmaSpace, backend: Backend, pool: &Pool) -> Result<DmaMapping, DmaError> {
    let region = pool.region();
    let start = region.as_ptr() as usize;
    if backend != Backend::Vfio && !region.is_hugepage() {
        return Err(DmaError::Map {
            start,
            len: region.len(),
            why: format!(
                "the pool is backed by {}-byte pages; without an IOMMU the device needs physically \
                 contiguous hugepages: build it with HugePages::Require after reserving them (`{}`)",
                region.page_size(),
                SysfsRoot::default().reserve_hugepages_command(512)
            ),
        });
    }
    dma.map(start, region.len())
}
