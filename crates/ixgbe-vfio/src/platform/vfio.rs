//! VFIO: the safe way to give a userspace driver a PCI device. The IOMMU confines the device's DMA to
//! memory this process mapped for it, so a driver bug cannot scribble over the kernel.
//!
//! The sequence (Linux `Documentation/driver-api/vfio.rst`; the same one ixy and DPDK follow):
//! 1. open the container `/dev/vfio/vfio`, check `VFIO_GET_API_VERSION`;
//! 2. open the device's group `/dev/vfio/N` (N from sysfs `iommu_group`), check with
//!    `VFIO_GROUP_GET_STATUS` that it is *viable* (every device of the group bound to vfio-pci), and
//!    add it to the container with `VFIO_GROUP_SET_CONTAINER`;
//! 3. once per container, after its first group, pick the IOMMU model with `VFIO_SET_IOMMU`
//!    (type1v2 when `VFIO_CHECK_EXTENSION` offers it, else type1);
//! 4. get a device fd with `VFIO_GROUP_GET_DEVICE_FD`; through `VFIO_DEVICE_GET_REGION_INFO` find the
//!    config-space region (set Bus Master, PCI 3.0 §6.2.2) and BAR0, which is `mmap`ped from the device
//!    fd at the region's offset;
//! 5. map DMA memory with `VFIO_IOMMU_MAP_DMA`, the IOVA being the virtual address (so
//!    [`Translation::Linear`] with `base` = the address), and unmap it with `VFIO_IOMMU_UNMAP_DMA` when
//!    the memory goes away;
//! 6. for interrupts instead of polling, `VFIO_DEVICE_GET_IRQ_INFO` says how many vectors an index
//!    (INTx, MSI, MSI-X) has, and `VFIO_DEVICE_SET_IRQS` with `DATA_EVENTFD | ACTION_TRIGGER` has the
//!    kernel signal one eventfd per vector ([`VfioDevice::enable_irqs`], [`IrqEventFd`]); the same
//!    ioctl with `DATA_NONE` and a count of 0 turns them off again (on drop).
//!
//! One container holds every device of a process (one IOMMU address space; a group can be in only
//! one container), so [`VfioContainer`] is an owned `Arc` that each [`VfioDevice`] and each DMA mapping
//! keeps alive; there is no global.
//!
//! With `enable_unsafe_noiommu_mode` the group node is `/dev/vfio/noiommu-N` and the container uses the
//! no-IOMMU model: there is no DMA mapping, so the device's DMA space is the hugepage/pagemap one of
//! [`HugepageDma`], with the same warning as the sysfs fallback.
//!
//! Its ioctls need a device bound to vfio-pci: `crates/ixgbe-vfio/tests/qemu_vfio.rs` runs this module
//! in a QEMU guest with an emulated Intel IOMMU (`scripts/qemu-vfio-guest.sh`, the
//! `examples/vfio_probe.rs` program: QEMU's `edu` device does DMA through the IOMMU and raises MSIs).
//! Each return value is checked and turned into an [`OpenError`] or [`DmaError`].
//!
//! ```no_run
//! use ixgbe_vfio::platform::pci::PciAddress;
//! use ixgbe_vfio::platform::vfio::VfioContainer;
//!
//! let container = VfioContainer::open()?;
//! let nic = container.open_device(&PciAddress::parse("0000:03:00.0")?)?;
//! let status = nic.bar0().read32(0x0008); // STATUS
//! let ring = nic.dma().alloc(4096)?;
//! assert_eq!(ring.iova(0).map(|a| a.0), Some(ring.as_ptr() as u64)); // IOVA = virtual address
//! # let _ = status;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::ffi::CString;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

use vfio_bindings::bindings::vfio::{
    VFIO_API_VERSION, VFIO_DEVICE_FLAGS_PCI, VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE,
    VFIO_GROUP_FLAGS_VIABLE, VFIO_NOIOMMU_IOMMU, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_BAR5_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE, VFIO_TYPE1_IOMMU, VFIO_TYPE1v2_IOMMU, vfio_device_info, vfio_group_status,
    vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap, vfio_region_info,
};

use super::bar::MappedBar;
use super::error::{OpenError, classify_open_error};
use super::noiommu::{self, HugepageDma};
use super::pagemap::system_page_size;
use super::pci::{PCI_COMMAND_MASTER, PCI_COMMAND_MEMORY, PciAddress, set_command_bits};
use super::sysfs::{PciFunction, SysfsRoot};
use crate::hw::{DmaError, DmaGuard, DmaMapping, DmaMemory, DmaSpace, Iova, Mmio, Translation};

mod irq;

pub use irq::{IrqEventFd, IrqInfo, IrqKind};

/// The VFIO ioctl request numbers: the one place they are defined.
///
/// `vfio-bindings` carries the ABI's structs and constants but not the request numbers, which
/// `<linux/vfio.h>` defines as `_IO(VFIO_TYPE, VFIO_BASE + n)` (every VFIO ioctl is `_IO`: the argument
/// size travels in its `argsz` field instead). They are derived here from the crate's `VFIO_TYPE` and
/// `VFIO_BASE` with libc's `_IO`, which knows each architecture's direction-bit encoding; each `n` is
/// the header's.
mod request {
    use vfio_bindings::bindings::vfio::{VFIO_BASE, VFIO_TYPE};

    const fn vfio(n: u32) -> libc::Ioctl {
        libc::_IO(VFIO_TYPE as u32, VFIO_BASE + n)
    }

    pub(super) const GET_API_VERSION: libc::Ioctl = vfio(0);
    pub(super) const CHECK_EXTENSION: libc::Ioctl = vfio(1);
    pub(super) const SET_IOMMU: libc::Ioctl = vfio(2);
    pub(super) const GROUP_GET_STATUS: libc::Ioctl = vfio(3);
    pub(super) const GROUP_SET_CONTAINER: libc::Ioctl = vfio(4);
    pub(super) const GROUP_GET_DEVICE_FD: libc::Ioctl = vfio(6);
    pub(super) const DEVICE_GET_INFO: libc::Ioctl = vfio(7);
    pub(super) const DEVICE_GET_REGION_INFO: libc::Ioctl = vfio(8);
    pub(super) const DEVICE_GET_IRQ_INFO: libc::Ioctl = vfio(9);
    pub(super) const DEVICE_SET_IRQS: libc::Ioctl = vfio(10);
    pub(super) const IOMMU_MAP_DMA: libc::Ioctl = vfio(13);
    pub(super) const IOMMU_UNMAP_DMA: libc::Ioctl = vfio(14);
}

/// The `argsz` of an ioctl argument struct.
#[expect(clippy::cast_possible_truncation, reason = "the VFIO structs are a few dozen bytes")]
const fn argsz<T>() -> u32 {
    let n = size_of::<T>();
    assert!(n <= u32::MAX as usize);
    n as u32
}

/// The IOMMU model of a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IommuKind {
    /// `VFIO_TYPE1v2_IOMMU` (preferred).
    Type1v2,
    /// `VFIO_TYPE1_IOMMU`.
    Type1,
    /// `VFIO_NOIOMMU_IOMMU`: `enable_unsafe_noiommu_mode`, no translation, no protection.
    NoIommu,
}

impl IommuKind {
    fn raw(self) -> u32 {
        match self {
            Self::Type1v2 => VFIO_TYPE1v2_IOMMU,
            Self::Type1 => VFIO_TYPE1_IOMMU,
            Self::NoIommu => VFIO_NOIOMMU_IOMMU,
        }
    }
}

/// Turns a `-1` ioctl return into [`OpenError::Vfio`].
fn check(
    ret: libc::c_int,
    op: &'static str,
    path: &Path,
    hint: &'static str,
) -> Result<libc::c_int, OpenError> {
    if ret < 0 {
        return Err(OpenError::Vfio { op, path: path.to_owned(), source: io::Error::last_os_error(), hint });
    }
    Ok(ret)
}

/// A VFIO group attached to a container.
#[derive(Debug)]
struct VfioGroup {
    file: File,
    id: u32,
    path: PathBuf,
}

#[derive(Debug, Default)]
struct ContainerState {
    /// Groups attached so far, by number; they stay attached while the container lives.
    groups: HashMap<u32, Arc<VfioGroup>>,
    /// Set with the first group.
    iommu: Option<IommuKind>,
}

/// A VFIO container: one IOMMU address space, shared by all devices of a process.
#[derive(Debug)]
pub struct VfioContainer {
    // Declared first so that groups detach before the container fd closes.
    state: Mutex<ContainerState>,
    file: File,
    path: PathBuf,
    dev_dir: PathBuf,
}

impl VfioContainer {
    /// Opens `/dev/vfio/vfio`.
    ///
    /// # Errors
    ///
    /// [`OpenError::VfioUnavailable`] (vfio not loaded), [`OpenError::PermissionDenied`],
    /// [`OpenError::Vfio`], [`OpenError::VfioUnsupported`] (an unknown API version).
    pub fn open() -> Result<Arc<Self>, OpenError> {
        Self::open_in(Path::new("/dev/vfio"))
    }

    /// Opens `<dev_dir>/vfio`, with group nodes looked up in `dev_dir` too.
    ///
    /// # Errors
    ///
    /// As [`VfioContainer::open`].
    pub fn open_in(dev_dir: &Path) -> Result<Arc<Self>, OpenError> {
        let path = dev_dir.join("vfio");
        let file = open_node(&path)?;
        // SAFETY: VFIO_GET_API_VERSION takes no argument and touches no memory of ours.
        let version = unsafe { libc::ioctl(file.as_raw_fd(), request::GET_API_VERSION) };
        let version = check(version, "VFIO_GET_API_VERSION", &path, " (is this really /dev/vfio/vfio?)")?;
        if u32::try_from(version).ok() != Some(VFIO_API_VERSION) {
            return Err(OpenError::VfioUnsupported {
                why: format!("API version {version}, this driver speaks {VFIO_API_VERSION}"),
            });
        }
        Ok(Arc::new(Self { state: Mutex::default(), file, path, dev_dir: dev_dir.to_owned() }))
    }

    /// The IOMMU model, once a device was opened.
    #[must_use]
    pub fn iommu(&self) -> Option<IommuKind> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).iommu
    }

    /// Opens the device at `address` (found under `/sys`) in this container.
    ///
    /// # Errors
    ///
    /// See [`VfioContainer::open_device_in`].
    pub fn open_device(self: &Arc<Self>, address: &PciAddress) -> Result<VfioDevice, OpenError> {
        self.open_device_in(&SysfsRoot::default(), address)
    }

    /// Opens the device at `address`, found under `root`, in this container: attaches its group (once),
    /// sets the IOMMU model (once), gets the device fd, enables bus mastering and maps BAR0.
    ///
    /// # Errors
    ///
    /// [`OpenError::NoSuchDevice`], [`OpenError::NoIommuGroup`], [`OpenError::GroupNotViable`],
    /// [`OpenError::VfioUnavailable`], [`OpenError::PermissionDenied`], [`OpenError::Vfio`],
    /// [`OpenError::VfioUnsupported`], [`OpenError::Bar`], and on the no-IOMMU model
    /// [`OpenError::NoHugepages`] and [`OpenError::Pagemap`].
    pub fn open_device_in(
        self: &Arc<Self>,
        root: &SysfsRoot,
        address: &PciAddress,
    ) -> Result<VfioDevice, OpenError> {
        let function = PciFunction::find(root, address)?;
        let Some(group_id) = function.iommu_group()? else {
            return Err(OpenError::NoIommuGroup {
                address: *address,
                path: function.dir().join("iommu_group"),
            });
        };
        // Without vfio-pci the group node may not exist at all (or belongs to other devices): say what
        // to bind rather than failing on a missing /dev/vfio/N.
        let driver = function.driver()?;
        if !driver.as_deref().is_some_and(is_vfio_driver) {
            return Err(OpenError::NotBoundToVfio {
                address: *address,
                commands: root.bind_commands(address, driver.as_deref()),
                driver,
                fallback_allowed: false,
            });
        }
        let (group, iommu) = self.attach_group(&function, group_id)?;

        let name = CString::new(address.to_string())
            .map_err(|_| OpenError::VfioUnsupported { why: "a PCI address with a NUL byte".to_owned() })?;
        // SAFETY: VFIO_GROUP_GET_DEVICE_FD reads the NUL-terminated name, which lives across the call.
        let fd = unsafe { libc::ioctl(group.file.as_raw_fd(), request::GROUP_GET_DEVICE_FD, name.as_ptr()) };
        let fd = check(
            fd,
            "VFIO_GROUP_GET_DEVICE_FD",
            &group.path,
            " (is the device bound to vfio-pci and not opened by another process?)",
        )?;
        // SAFETY: the ioctl succeeded, so `fd` is a new file descriptor that nothing else owns.
        let file = Arc::new(File::from(unsafe { OwnedFd::from_raw_fd(fd) }));
        let device_path = group.path.join(address.to_string());

        let mut info = vfio_device_info { argsz: argsz::<vfio_device_info>(), ..Default::default() };
        // SAFETY: VFIO_DEVICE_GET_INFO writes at most `argsz` bytes into `info`, which outlives the call.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), request::DEVICE_GET_INFO, &raw mut info) };
        check(r, "VFIO_DEVICE_GET_INFO", &device_path, "")?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0 || info.num_regions <= VFIO_PCI_CONFIG_REGION_INDEX {
            return Err(OpenError::VfioUnsupported {
                why: format!(
                    "{address} is not a vfio-pci device (flags {:#x}, {} regions)",
                    info.flags, info.num_regions
                ),
            });
        }

        let config = region_info(&file, VFIO_PCI_CONFIG_REGION_INDEX, &device_path)?;
        if config.flags & (VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE)
            != (VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE)
        {
            return Err(OpenError::VfioUnsupported {
                why: format!("the config space of {address} is not read-write (flags {:#x})", config.flags),
            });
        }
        let old = set_command_bits(&file, config.offset, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER)
            .map_err(|source| OpenError::Io { path: device_path.join("config"), source })?;
        tracing::debug!(pci = %address, command = format_args!("{old:#06x}"), "bus mastering enabled via VFIO");

        let bar0 = map_bar(&file, VFIO_PCI_BAR0_REGION_INDEX, &device_path, |why| OpenError::Bar {
            address: *address,
            why,
        })?;
        let len = bar0.bar_len();

        let dma: Arc<dyn DmaSpace> = if iommu == IommuKind::NoIommu {
            noiommu::check_physical_dma_ready(root)?;
            tracing::warn!(
                pci = %address,
                "VFIO no-IOMMU mode for {address}: DMA uses physical addresses of hugepages and nothing \
                 confines the NIC; unsafe for production"
            );
            Arc::new(HugepageDma::new())
        } else {
            Arc::new(VfioDma { container: self.clone() })
        };
        tracing::info!(pci = %address, group = group.id, ?iommu, bar0_len = len, "VFIO device open");
        Ok(VfioDevice {
            address: *address,
            file,
            path: device_path,
            config_offset: config.offset,
            config_size: config.size,
            _group: group,
            iommu,
            bar0: Arc::new(bar0),
            dma,
        })
    }

    /// Attaches group `id` (once) and sets the IOMMU model (once per container).
    fn attach_group(
        &self,
        function: &PciFunction,
        id: u32,
    ) -> Result<(Arc<VfioGroup>, IommuKind), OpenError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(group) = state.groups.get(&id) {
            let iommu = state.iommu.ok_or_else(|| OpenError::VfioUnsupported {
                why: "a group is attached but no IOMMU model is set".to_owned(),
            })?;
            return Ok((group.clone(), iommu));
        }
        let plain = self.dev_dir.join(id.to_string());
        let noiommu_path = self.dev_dir.join(format!("noiommu-{id}"));
        let (path, noiommu) =
            if !plain.exists() && noiommu_path.exists() { (noiommu_path, true) } else { (plain, false) };
        let file = open_node(&path)?;

        let mut status = vfio_group_status { argsz: argsz::<vfio_group_status>(), flags: 0 };
        // SAFETY: VFIO_GROUP_GET_STATUS writes at most `argsz` bytes into `status`, which outlives the call.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), request::GROUP_GET_STATUS, &raw mut status) };
        check(r, "VFIO_GROUP_GET_STATUS", &path, "")?;
        if status.flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(function.group_not_viable(id, function.group_peers(id)?));
        }

        let container_fd: libc::c_int = self.file.as_raw_fd();
        // SAFETY: VFIO_GROUP_SET_CONTAINER reads one int (the container fd) from a live local.
        let r =
            unsafe { libc::ioctl(file.as_raw_fd(), request::GROUP_SET_CONTAINER, &raw const container_fd) };
        check(r, "VFIO_GROUP_SET_CONTAINER", &path, " (is the group already in another container?)")?;

        let iommu = match state.iommu {
            Some(kind) => {
                if (kind == IommuKind::NoIommu) != noiommu {
                    return Err(OpenError::VfioUnsupported {
                        why: format!(
                            "group {id} is {}an IOMMU group but the container already uses {kind:?}: open \
                             no-IOMMU and IOMMU devices in separate containers",
                            if noiommu { "not " } else { "" }
                        ),
                    });
                }
                kind
            }
            None => {
                let candidates: &[IommuKind] =
                    if noiommu { &[IommuKind::NoIommu] } else { &[IommuKind::Type1v2, IommuKind::Type1] };
                let kind = candidates.iter().copied().find(|k| self.has_extension(k.raw())).ok_or_else(
                    || OpenError::VfioUnsupported {
                        why: format!(
                            "the container offers none of {candidates:?} (CONFIG_VFIO_IOMMU_TYPE1 missing?)"
                        ),
                    },
                )?;
                // SAFETY: VFIO_SET_IOMMU takes the model number by value and touches no memory of ours.
                let r = unsafe {
                    libc::ioctl(self.file.as_raw_fd(), request::SET_IOMMU, libc::c_ulong::from(kind.raw()))
                };
                check(r, "VFIO_SET_IOMMU", &self.path, "")?;
                state.iommu = Some(kind);
                kind
            }
        };
        let group = Arc::new(VfioGroup { file, id, path });
        state.groups.insert(id, group.clone());
        Ok((group, iommu))
    }

    fn has_extension(&self, ext: u32) -> bool {
        // SAFETY: VFIO_CHECK_EXTENSION takes the extension number by value and touches no memory of ours.
        let r =
            unsafe { libc::ioctl(self.file.as_raw_fd(), request::CHECK_EXTENSION, libc::c_ulong::from(ext)) };
        r > 0
    }

    /// `VFIO_IOMMU_MAP_DMA` of `vaddr..vaddr + len` at IOVA `vaddr`, readable and writable by the device.
    fn map_dma(&self, vaddr: usize, len: usize) -> Result<Iova, DmaError> {
        let map = vfio_iommu_type1_dma_map {
            argsz: argsz::<vfio_iommu_type1_dma_map>(),
            flags: VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
            vaddr: vaddr as u64,
            iova: vaddr as u64,
            size: len as u64,
        };
        // SAFETY: VFIO_IOMMU_MAP_DMA reads `map`, which outlives the call; the kernel pins the pages of
        // the range, which the caller keeps mapped until `unmap_dma`.
        let r = unsafe { libc::ioctl(self.file.as_raw_fd(), request::IOMMU_MAP_DMA, &raw const map) };
        if r < 0 {
            let e = io::Error::last_os_error();
            let hint = match e.raw_os_error() {
                Some(libc::ENOMEM | libc::EPERM) => {
                    "; pinning memory for DMA counts against RLIMIT_MEMLOCK: raise it (`ulimit -l unlimited`) or run as root"
                }
                Some(libc::EINVAL) => "; the range must be page-aligned and inside the IOMMU's address width",
                Some(libc::EEXIST) => "; part of the range is already mapped in this container",
                _ => "",
            };
            return Err(DmaError::Map { start: vaddr, len, why: format!("VFIO_IOMMU_MAP_DMA: {e}{hint}") });
        }
        Ok(Iova(vaddr as u64))
    }

    /// `VFIO_IOMMU_UNMAP_DMA` of what [`VfioContainer::map_dma`] mapped; logs failures (called from drops).
    fn unmap_dma(&self, iova: Iova, len: usize) {
        let mut unmap = vfio_iommu_type1_dma_unmap {
            argsz: argsz::<vfio_iommu_type1_dma_unmap>(),
            flags: 0,
            iova: iova.0,
            size: len as u64,
            ..Default::default()
        };
        // SAFETY: VFIO_IOMMU_UNMAP_DMA reads and updates `unmap` (the size unmapped), which outlives the
        // call; it touches no other memory of ours.
        let r = unsafe { libc::ioctl(self.file.as_raw_fd(), request::IOMMU_UNMAP_DMA, &raw mut unmap) };
        if r < 0 {
            tracing::error!(error = %io::Error::last_os_error(), iova = %iova, len, "VFIO_IOMMU_UNMAP_DMA failed");
        } else if unmap.size != len as u64 {
            tracing::error!(iova = %iova, len, unmapped = unmap.size, "VFIO_IOMMU_UNMAP_DMA unmapped a different size");
        }
    }
}

/// Opens a VFIO device node read-write, with errors that say how to fix them.
fn open_node(path: &Path) -> Result<File, OpenError> {
    std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => OpenError::VfioUnavailable { path: path.to_owned(), source },
        _ if source.raw_os_error() == Some(libc::EBUSY) => OpenError::Vfio {
            op: "open",
            path: path.to_owned(),
            source,
            hint: " (another process, a VM or another driver instance, holds this group)",
        },
        _ => classify_open_error(path, source),
    })
}

/// Whether `driver` is vfio-pci (or a vendor variant of it, `mlx5_vfio_pci` and the like).
fn is_vfio_driver(driver: &str) -> bool {
    driver.ends_with("vfio-pci") || driver.ends_with("vfio_pci")
}

/// Maps the whole of BAR region `index` of a device fd; `bar_error` turns a reason into the error.
fn map_bar(
    file: &File,
    index: u32,
    path: &Path,
    bar_error: impl Fn(String) -> OpenError,
) -> Result<MappedBar, OpenError> {
    let bar = region_info(file, index, path)?;
    if bar.flags & VFIO_REGION_INFO_FLAG_MMAP == 0 {
        return Err(bar_error(format!(
            "VFIO does not allow mmap of the BAR (region flags {:#x})",
            bar.flags
        )));
    }
    let len = usize::try_from(bar.size)
        .ok()
        .filter(|&l| l >= 4)
        .ok_or_else(|| bar_error(format!("the BAR has size {:#x}", bar.size)))?;
    MappedBar::map_file(file, bar.offset, len).map_err(|e| bar_error(format!("mmap: {e}")))
}

fn region_info(device: &File, index: u32, path: &Path) -> Result<vfio_region_info, OpenError> {
    let mut info = vfio_region_info { argsz: argsz::<vfio_region_info>(), index, ..Default::default() };
    // SAFETY: VFIO_DEVICE_GET_REGION_INFO writes at most `argsz` bytes into `info`, which outlives the call.
    let r = unsafe { libc::ioctl(device.as_raw_fd(), request::DEVICE_GET_REGION_INFO, &raw mut info) };
    check(r, "VFIO_DEVICE_GET_REGION_INFO", path, "")?;
    Ok(info)
}

/// A PCI device opened through VFIO: its BAR0 and its DMA space. Closing it (drop) hands the device
/// back to vfio-pci, which resets it; mappings made from [`VfioDevice::dma`] stay valid until dropped.
pub struct VfioDevice {
    address: PciAddress,
    file: Arc<File>,
    /// `/dev/vfio/N/<address>`, for error messages.
    path: PathBuf,
    config_offset: u64,
    config_size: u64,
    _group: Arc<VfioGroup>,
    iommu: IommuKind,
    bar0: Arc<MappedBar>,
    dma: Arc<dyn DmaSpace>,
}

impl fmt::Debug for VfioDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VfioDevice")
            .field("address", &self.address)
            .field("fd", &self.file.as_raw_fd())
            .field("iommu", &self.iommu)
            .field("bar0", &self.bar0)
            .finish_non_exhaustive()
    }
}

impl VfioDevice {
    /// The PCI address.
    #[must_use]
    pub fn address(&self) -> &PciAddress {
        &self.address
    }

    /// The container's IOMMU model.
    #[must_use]
    pub fn iommu(&self) -> IommuKind {
        self.iommu
    }

    /// BAR0.
    #[must_use]
    pub fn bar0(&self) -> Arc<dyn Mmio> {
        self.bar0.clone()
    }

    /// The DMA space: IOMMU mappings at IOVA = virtual address, or hugepages with physical addresses in
    /// no-IOMMU mode.
    #[must_use]
    pub fn dma(&self) -> Arc<dyn DmaSpace> {
        self.dma.clone()
    }

    /// Maps memory BAR `bar` (0 to 5) again, as a [`MappedBar`] of its own (which also offers 64-bit
    /// accesses); the mapping outlives the device.
    ///
    /// # Errors
    ///
    /// [`OpenError::Bar`] for BAR0, [`OpenError::VfioUnsupported`] for the others, when VFIO does not
    /// allow the BAR to be mapped (an I/O-port or absent BAR); [`OpenError::Vfio`] when the region
    /// cannot be queried.
    pub fn map_bar(&self, bar: u32) -> Result<MappedBar, OpenError> {
        let index = VFIO_PCI_BAR0_REGION_INDEX + bar;
        if index > VFIO_PCI_BAR5_REGION_INDEX {
            return Err(OpenError::VfioUnsupported {
                why: format!("there is no BAR{bar}: PCI has BAR0 to BAR5"),
            });
        }
        let address = self.address;
        map_bar(&self.file, index, &self.path, |why| {
            if bar == 0 {
                OpenError::Bar { address, why }
            } else {
                OpenError::VfioUnsupported { why: format!("cannot map BAR{bar} of {address}: {why}") }
            }
        })
    }

    /// Reads `buf.len()` bytes of the device's PCI configuration space from `offset`, through the VFIO
    /// config region (which virtualizes some registers, e.g. the MSI capability).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a range outside the config space, or the `pread(2)` error.
    pub fn read_config(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let at = self.config_range(offset, buf.len())?;
        self.file.read_exact_at(buf, at)
    }

    /// Writes `buf` to the device's PCI configuration space at `offset` (see
    /// [`VfioDevice::read_config`]).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a range outside the config space, or the `pwrite(2)` error.
    pub fn write_config(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let at = self.config_range(offset, buf.len())?;
        self.file.write_all_at(buf, at)
    }

    /// The file offset of config-space bytes `offset..offset + len`, when they are inside it.
    fn config_range(&self, offset: u64, len: usize) -> io::Result<u64> {
        let end = u64::try_from(len).ok().and_then(|l| offset.checked_add(l));
        if end.is_none_or(|end| end > self.config_size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "config bytes {offset:#x}+{len} are outside the {:#x}-byte config space",
                    self.config_size
                ),
            ));
        }
        Ok(self.config_offset + offset)
    }
}

/// DMA through the container's IOMMU: IOVA = virtual address.
#[derive(Debug)]
pub struct VfioDma {
    container: Arc<VfioContainer>,
}

/// Memory this module allocated and mapped: unmapped from the IOMMU, then freed.
#[derive(Debug)]
struct VfioAlloc {
    container: Arc<VfioContainer>,
    base: usize,
    len: usize,
    mapped: bool,
}

impl DmaGuard for VfioAlloc {}

impl Drop for VfioAlloc {
    fn drop(&mut self) {
        if self.mapped {
            self.container.unmap_dma(Iova(self.base as u64), self.len);
        }
        // SAFETY: `base`/`len` are exactly the mapping `VfioDma::alloc` made, no longer reachable by the
        // device (unmapped above) nor by us (the owning `DmaMemory` is being dropped).
        let r = unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        if r != 0 {
            tracing::error!(error = %io::Error::last_os_error(), "munmap of DMA memory failed");
        }
    }
}

/// A caller-owned range mapped into the IOMMU: unmapped on drop.
#[derive(Debug)]
struct VfioMap {
    container: Arc<VfioContainer>,
    iova: Iova,
    len: usize,
}

impl DmaGuard for VfioMap {}

impl Drop for VfioMap {
    fn drop(&mut self) {
        self.container.unmap_dma(self.iova, self.len);
    }
}

impl DmaSpace for VfioDma {
    fn alloc(&self, len: usize) -> Result<DmaMemory, DmaError> {
        let len = len.max(1).next_multiple_of(system_page_size());
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        // SAFETY: a new anonymous mapping at an address of the kernel's choosing touches no existing
        // memory; failure is MAP_FAILED (checked below).
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(DmaError::Alloc { len, source: io::Error::last_os_error() });
        }
        let mut guard = VfioAlloc { container: self.container.clone(), base: p as usize, len, mapped: false };
        let Some(ptr) = NonNull::new(p.cast::<u8>()) else {
            return Err(DmaError::Alloc { len, source: io::Error::other("mmap returned null") });
        };
        // The pinned pages must stay this process's own across fork (DPDK does the same).
        // SAFETY: madvise on a range this function just mapped; it changes no memory contents.
        if unsafe { libc::madvise(p, len, libc::MADV_DONTFORK) } != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "MADV_DONTFORK on DMA memory failed");
        }
        let base = self.container.map_dma(guard.base, len)?;
        guard.mapped = true;
        // SAFETY: the range is a fresh private anonymous mapping (zeroed, page-aligned), owned by the
        // guard that goes into the `DmaMemory`; only the device (through the IOMMU at IOVA = address)
        // shares it.
        Ok(unsafe { DmaMemory::from_raw_parts(ptr, len, Translation::Linear { base }, Box::new(guard)) })
    }

    fn map(&self, start: usize, len: usize) -> Result<DmaMapping, DmaError> {
        let page = system_page_size();
        if len == 0 || !start.is_multiple_of(page) || !len.is_multiple_of(page) {
            return Err(DmaError::Map {
                start,
                len,
                why: format!("VFIO maps whole pages: start and length must be non-zero multiples of {page}"),
            });
        }
        let base = self.container.map_dma(start, len)?;
        let guard = VfioMap { container: self.container.clone(), iova: base, len };
        Ok(DmaMapping::new(start, len, Translation::Linear { base }, Box::new(guard)))
    }
}

#[cfg(test)]
mod tests {
    use vfio_bindings::bindings::vfio::{vfio_irq_info, vfio_irq_set};

    use super::*;

    /// The request numbers match `<linux/vfio.h>` on the generic ioctl encoding (x86, arm, riscv).
    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn vfio_request_numbers() {
        assert_eq!(request::GET_API_VERSION, 0x3B64);
        assert_eq!(request::SET_IOMMU, 0x3B66);
        assert_eq!(request::GROUP_GET_DEVICE_FD, 0x3B6A);
        assert_eq!(request::DEVICE_GET_REGION_INFO, 0x3B6C);
        assert_eq!(request::DEVICE_GET_IRQ_INFO, 0x3B6D);
        assert_eq!(request::DEVICE_SET_IRQS, 0x3B6E);
        assert_eq!(request::IOMMU_MAP_DMA, 0x3B71);
        assert_eq!(request::IOMMU_UNMAP_DMA, 0x3B72);
    }

    #[test]
    fn vfio_argsz_matches_the_abi() {
        assert_eq!(argsz::<vfio_group_status>(), 8);
        assert_eq!(argsz::<vfio_region_info>(), 32);
        assert_eq!(argsz::<vfio_iommu_type1_dma_map>(), 32);
        assert_eq!(argsz::<vfio_iommu_type1_dma_unmap>(), 24);
        assert_eq!(argsz::<vfio_irq_info>(), 16);
        assert_eq!(argsz::<vfio_irq_set>(), 20);
    }
}
