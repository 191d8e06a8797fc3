//! Opening a real 82599: [`open`] validates the PCI address, checks sysfs, and returns the register
//! window ([`Mmio`]) and the DMA space ([`DmaSpace`]) the driver runs on, through VFIO when the device is
//! bound to `vfio-pci` ([`vfio`]) and through the unsafe no-IOMMU sysfs fallback ([`noiommu`]) only
//! when the caller allows it.
//!
//! Every error says what is wrong and how to fix it: the bind commands, the other members of a
//! non-viable IOMMU group, how to reserve hugepages, who owns `/dev/vfio/N`.
//!
//! The layers, each importing only those listed before it (and [`crate::hw`]):
//!
//! * [`pci`]: PCI addresses, the 82599 device ids, the Command register;
//! * [`pagemap`]: physical addresses of our own memory;
//! * [`bar`]: a mapped BAR, the [`Mmio`] of real hardware;
//! * [`error`]: [`OpenError`], what went wrong and how to fix it;
//! * [`sysfs`]: what sysfs says about a PCI function;
//! * [`noiommu`]: the no-IOMMU backend (sysfs BAR0, hugepage DMA with physical addresses);
//! * [`vfio`]: the VFIO backend;
//! * this module: [`open`] and [`OpenOptions`], which pick the backend.
//!
//! ```no_run
//! use ixgbe_vfio::platform::{OpenOptions, VfioContainer};
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
use std::path::PathBuf;
use std::sync::Arc;

use netchannel::pool::Pool;

use crate::hw::{DmaError, DmaMapping, DmaSpace, Mmio};

pub mod bar;
pub mod error;
pub mod noiommu;
pub mod pagemap;
pub mod pci;
pub mod sysfs;
pub mod vfio;

pub use error::{GroupMember, OpenError};
use noiommu::SysfsDevice;
pub use pci::PciAddress;
use sysfs::PciFunction;
pub use sysfs::SysfsRoot;
pub use vfio::VfioContainer;
use vfio::{IommuKind, VfioDevice};

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
