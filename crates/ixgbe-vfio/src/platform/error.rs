//! Why opening a device failed, and how to fix it: [`OpenError`] (every message names the fix: the
//! bind commands, the blocking members of an IOMMU group ([`GroupMember`]), how to reserve hugepages,
//! who owns a device node), and the helpers the platform layers share to turn an OS error on a file
//! into one.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::pagemap::PagemapError;
use super::pci::{IXGBE_82599_DEVICE_IDS, ParsePciAddressError, PciAddress};

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

/// Turns an I/O error on `path` into [`OpenError::Io`] (for `map_err`).
pub(super) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |source| OpenError::Io { path: path.to_owned(), source }
}

/// Opens `path` read-write, turning `EACCES`/`EPERM` into [`OpenError::PermissionDenied`] that names the
/// file's owner and mode.
pub(crate) fn open_rw(path: &Path) -> Result<File, OpenError> {
    OpenOptions::new().read(true).write(true).open(path).map_err(|source| classify_open_error(path, source))
}

/// Turns an `open(2)` failure into [`OpenError::PermissionDenied`] (with the owner) or
/// [`OpenError::Io`].
pub(crate) fn classify_open_error(path: &Path, source: io::Error) -> OpenError {
    if source.kind() == io::ErrorKind::PermissionDenied {
        let owner = fs::metadata(path)
            .map(|m| format!("owner uid {}, gid {}, mode {:o}", m.uid(), m.gid(), m.mode() & 0o7777))
            .unwrap_or_else(|_| "owner unknown".to_owned());
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        return OpenError::PermissionDenied { path: path.to_owned(), owner, euid, source };
    }
    OpenError::Io { path: path.to_owned(), source }
}
