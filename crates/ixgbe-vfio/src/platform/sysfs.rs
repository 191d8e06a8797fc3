//! What sysfs says about a PCI function (which driver owns it, its IOMMU group and the other members of
//! that group, its vendor and device ids), and the no-IOMMU fallback built on sysfs: BAR0 through
//! `resource0`, bus mastering through `config`, DMA memory from 2 MiB hugepages with physical addresses
//! from `/proc/self/pagemap` ([`HugepageDma`]).
//!
//! The sysfs root is a parameter ([`SysfsRoot`], `/sys` by default), so tests build fake trees in a
//! temporary directory and run the same code. The layout used (Linux
//! `Documentation/ABI/testing/sysfs-bus-pci`, `sysfs-kernel-iommu_groups`):
//!
//! ```text
//! bus/pci/devices/0000:03:00.0/{vendor,device,class,config,resource0,driver_override}
//! bus/pci/devices/0000:03:00.0/driver        -> .../bus/pci/drivers/ixgbe      (absent when unbound)
//! bus/pci/devices/0000:03:00.0/iommu_group   -> .../kernel/iommu_groups/17     (absent without IOMMU)
//! bus/pci/devices/0000:03:00.0/net/<ifname>/ (while a kernel network driver owns it)
//! kernel/iommu_groups/17/devices/<address>   (one entry per member of the group)
//! kernel/mm/hugepages/hugepages-2048kB/{nr_hugepages,free_hugepages}
//! ```
//!
//! # The fallback is unsafe for production
//!
//! Without an IOMMU the NIC can read and write any physical memory: a wrong descriptor (a driver bug, a
//! stale address after the process died) corrupts whatever the kernel put there. It exists for
//! development machines without an IOMMU; [`crate::platform::OpenOptions::allow_unsafe_fallback`] must
//! ask for it, and it logs a warning every time it is used.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::hw::{DmaError, DmaGuard, DmaMapping, DmaMemory, DmaSpace, Iova, Mmio, Translation};
use crate::platform::bar::MappedBar;
use crate::platform::pagemap::{self, Pagemap, PagemapError};
use crate::platform::pci::{self, PCI_COMMAND, PCI_COMMAND_MASTER, PCI_COMMAND_MEMORY, PciAddress};
use crate::platform::{GroupMember, OpenError};

/// The size of the hugepages the fallback uses.
pub const HUGEPAGE_SIZE: usize = 2 << 20;
const HUGEPAGE_SHIFT: u32 = 21;

/// Where sysfs is mounted: `/sys`, or a fake tree in tests.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SysfsRoot(PathBuf);

impl Default for SysfsRoot {
    fn default() -> Self {
        Self(PathBuf::from("/sys"))
    }
}

impl SysfsRoot {
    /// A sysfs tree rooted at `path`.
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self(path.into())
    }

    /// The root directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `bus/pci/devices/<address>`.
    #[must_use]
    pub fn device_dir(&self, address: &PciAddress) -> PathBuf {
        self.0.join("bus/pci/devices").join(address.to_string())
    }

    /// `bus/pci/drivers/<driver>`.
    #[must_use]
    pub fn driver_dir(&self, driver: &str) -> PathBuf {
        self.0.join("bus/pci/drivers").join(driver)
    }

    /// `kernel/iommu_groups/<group>`.
    #[must_use]
    pub fn iommu_group_dir(&self, group: u32) -> PathBuf {
        self.0.join("kernel/iommu_groups").join(group.to_string())
    }

    /// `kernel/mm/hugepages/hugepages-2048kB`.
    #[must_use]
    pub fn hugepages_dir(&self) -> PathBuf {
        self.0.join("kernel/mm/hugepages/hugepages-2048kB")
    }

    /// Free 2 MiB hugepages, or `None` when the kernel has no such pool (the directory is missing).
    #[must_use]
    pub fn free_hugepages(&self) -> Option<u64> {
        read_trimmed(&self.hugepages_dir().join("free_hugepages")).ok()?.parse().ok()
    }

    /// The commands (as root) that hand `address`, now owned by `driver`, to `vfio-pci`, one per line.
    #[must_use]
    pub fn bind_commands(&self, address: &PciAddress, driver: Option<&str>) -> String {
        let dev = self.device_dir(address);
        let mut lines = vec!["    modprobe vfio-pci".to_owned()];
        if driver.is_some() {
            lines.push(format!("    echo {address} > {}", dev.join("driver/unbind").display()));
        }
        lines.push(format!("    echo vfio-pci > {}", dev.join("driver_override").display()));
        lines.push(format!("    echo {address} > {}", self.driver_dir("vfio-pci").join("bind").display()));
        lines.join("\n")
    }

    /// The command that reserves `n` hugepages of 2 MiB.
    #[must_use]
    pub fn reserve_hugepages_command(&self, n: u32) -> String {
        format!("echo {n} > {}", self.hugepages_dir().join("nr_hugepages").display())
    }
}

fn read_trimmed(path: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim().to_owned())
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |source| OpenError::Io { path: path.to_owned(), source }
}

/// The last component of the target of the symlink at `path` (`driver` -> `.../drivers/ixgbe` gives
/// `ixgbe`), or `None` when there is no such link.
fn link_name(path: &Path) -> Result<Option<String>, OpenError> {
    match fs::read_link(path) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(OpenError::Io { path: path.to_owned(), source }),
    }
}

fn parse_hex_u16(text: &str) -> Option<u16> {
    u16::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
}

/// A PCI function as sysfs shows it.
#[derive(Clone, Debug)]
pub struct PciFunction {
    root: SysfsRoot,
    address: PciAddress,
    dir: PathBuf,
}

impl PciFunction {
    /// Looks `address` up under `root`.
    ///
    /// # Errors
    ///
    /// [`OpenError::NoSuchDevice`] when sysfs has no such device.
    pub fn find(root: &SysfsRoot, address: &PciAddress) -> Result<Self, OpenError> {
        let dir = root.device_dir(address);
        if !dir.is_dir() {
            return Err(OpenError::NoSuchDevice { address: *address, path: dir });
        }
        Ok(Self { root: root.clone(), address: *address, dir })
    }

    /// The function's address.
    #[must_use]
    pub fn address(&self) -> &PciAddress {
        &self.address
    }

    /// Its sysfs directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sysfs root it was found under.
    #[must_use]
    pub fn root(&self) -> &SysfsRoot {
        &self.root
    }

    /// `(vendor, device)` from the `vendor` and `device` files.
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] when a file is missing or unreadable or does not hold a hex id.
    pub fn ids(&self) -> Result<(u16, u16), OpenError> {
        let read = |name: &str| -> Result<u16, OpenError> {
            let path = self.dir.join(name);
            let text = read_trimmed(&path).map_err(io_error(&path))?;
            parse_hex_u16(&text).ok_or_else(|| OpenError::Io {
                path,
                source: io::Error::new(io::ErrorKind::InvalidData, format!("not a hex id: {text:?}")),
            })
        };
        Ok((read("vendor")?, read("device")?))
    }

    /// Checks that this is an Intel 82599 and returns the variant's name.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotAn82599`] naming the ids found; [`OpenError::Io`] as [`PciFunction::ids`].
    pub fn check_82599(&self) -> Result<&'static str, OpenError> {
        let (vendor, device) = self.ids()?;
        pci::ixgbe_82599_variant(vendor, device).ok_or(OpenError::NotAn82599 {
            address: self.address,
            vendor,
            device,
        })
    }

    /// The PCI class code (`0x020000` is an Ethernet controller, `0x0604xx` a PCI bridge), if readable.
    #[must_use]
    pub fn class(&self) -> Option<u32> {
        let text = read_trimmed(&self.dir.join("class")).ok()?;
        u32::from_str_radix(text.trim_start_matches("0x"), 16).ok()
    }

    /// The driver bound to the function (`ixgbe`, `vfio-pci`, `uio_pci_generic`), `None` when unbound.
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] when the `driver` link cannot be read for another reason than absence.
    pub fn driver(&self) -> Result<Option<String>, OpenError> {
        link_name(&self.dir.join("driver"))
    }

    /// The IOMMU group number, `None` when the function has none (no IOMMU, or it is off).
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] when the link cannot be read or does not end in a number.
    pub fn iommu_group(&self) -> Result<Option<u32>, OpenError> {
        let path = self.dir.join("iommu_group");
        let Some(name) = link_name(&path)? else { return Ok(None) };
        name.parse().map(Some).map_err(|_| OpenError::Io {
            path,
            source: io::Error::new(io::ErrorKind::InvalidData, format!("not a group number: {name:?}")),
        })
    }

    /// The network interfaces a kernel driver made for the function (`net/*`).
    #[must_use]
    pub fn net_interfaces(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.dir.join("net"))
            .map(|rd| {
                rd.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The other members of IOMMU group `group` and their drivers, in address order.
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] when the group's `devices` directory cannot be listed.
    pub fn group_peers(&self, group: u32) -> Result<Vec<GroupMember>, OpenError> {
        let dir = self.root.iommu_group_dir(group).join("devices");
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_error(&dir))? {
            let entry = entry.map_err(io_error(&dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == self.address.to_string() {
                continue;
            }
            let (driver, bridge) = match name.parse::<PciAddress>() {
                Ok(addr) => match Self::find(&self.root, &addr) {
                    Ok(peer) => (peer.driver()?, peer.class().is_some_and(|c| c >> 8 == 0x0604)),
                    Err(_) => (link_name(&entry.path().join("driver"))?, false),
                },
                Err(_) => (link_name(&entry.path().join("driver"))?, false),
            };
            out.push(GroupMember { address: name, driver, bridge });
        }
        out.sort_by(|a, b| a.address.cmp(&b.address));
        Ok(out)
    }

    /// Checks, from sysfs alone, what `VFIO_GROUP_GET_STATUS` will say: a group is viable only when
    /// every member is bound to a VFIO driver, to `pci-stub`, or to nothing (bridges are exempt).
    /// Returns the group number.
    ///
    /// # Errors
    ///
    /// [`OpenError::NoIommuGroup`] when the function has no group; [`OpenError::GroupNotViable`]
    /// listing the members that block the group.
    pub fn check_group_viable(&self) -> Result<u32, OpenError> {
        let Some(group) = self.iommu_group()? else {
            return Err(OpenError::NoIommuGroup {
                address: self.address,
                path: self.dir.join("iommu_group"),
            });
        };
        let peers = self.group_peers(group)?;
        if peers.iter().any(|p| !p.allows_vfio()) {
            return Err(self.group_not_viable(group, peers));
        }
        Ok(group)
    }

    /// The [`OpenError::GroupNotViable`] for `group` with its `peers`.
    pub(crate) fn group_not_viable(&self, group: u32, peers: Vec<GroupMember>) -> OpenError {
        OpenError::GroupNotViable {
            address: self.address,
            group,
            devices_dir: self.root.iommu_group_dir(group).join("devices"),
            peers,
        }
    }

    /// Sets Memory Space and Bus Master in the Command register through the sysfs `config` file, so
    /// that the device answers on BAR0 and may do DMA. Returns the register's old value.
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] (or [`OpenError::PermissionDenied`]) when `config` cannot be read or written.
    pub fn enable_bus_master(&self) -> Result<u16, OpenError> {
        let path = self.dir.join("config");
        let file = open_rw(&path)?;
        set_command_bits(&file, 0, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER).map_err(io_error(&path))
    }
}

/// Read-modify-writes the Command register of a configuration space that starts at `base` in `file`.
/// Returns the old value.
pub(crate) fn set_command_bits(file: &File, base: u64, bits: u16) -> io::Result<u16> {
    let mut buf = [0u8; 2];
    file.read_exact_at(&mut buf, base + PCI_COMMAND)?;
    let old = u16::from_le_bytes(buf);
    if old & bits != bits {
        file.write_all_at(&(old | bits).to_le_bytes(), base + PCI_COMMAND)?;
    }
    Ok(old)
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

/// A device driven without an IOMMU through sysfs: BAR0 from `resource0`, DMA from hugepages with
/// physical addresses. See the module docs for why this is unsafe for production.
#[derive(Debug)]
pub struct SysfsDevice {
    function: PciFunction,
    bar0: Arc<MappedBar>,
    dma: Arc<HugepageDma>,
}

impl SysfsDevice {
    /// Maps BAR0 of `function` and enables bus mastering, after checking that no kernel driver owns
    /// it (unbound, or `uio_pci_generic`), that 2 MiB hugepages are reserved, and that this process can
    /// read physical addresses.
    ///
    /// Logs a warning: without an IOMMU the device can write anywhere in memory.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotBoundToVfio`] when a kernel driver owns the device (with the commands that
    /// unbind it), [`OpenError::NoHugepages`], [`OpenError::Pagemap`], [`OpenError::PermissionDenied`],
    /// [`OpenError::Bar`], [`OpenError::Io`].
    pub fn open(function: PciFunction) -> Result<Self, OpenError> {
        let address = *function.address();
        let driver = function.driver()?;
        if let Some(d) = driver.as_deref().filter(|d| *d != "uio_pci_generic") {
            return Err(OpenError::NotBoundToVfio {
                address,
                driver: Some(d.to_owned()),
                commands: function.root().bind_commands(&address, Some(d)),
                fallback_allowed: true,
            });
        }
        check_physical_dma_ready(function.root())?;
        tracing::warn!(
            pci = %address,
            "opening {address} WITHOUT an IOMMU (sysfs resource0 + physical addresses): the NIC can \
             read and write any memory of this machine; unsafe for production, use vfio-pci with an \
             IOMMU (scripts/vfio-bind.sh)"
        );
        let path = function.dir().join("resource0");
        let file = open_rw(&path)?;
        let len = file.metadata().map_err(io_error(&path))?.len();
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l >= 4)
            .ok_or_else(|| OpenError::Bar { address, why: format!("{} has size {len}", path.display()) })?;
        let bar0 = MappedBar::map_file(&file, 0, len)
            .map_err(|e| OpenError::Bar { address, why: format!("mmap of {}: {e}", path.display()) })?;
        let old = function.enable_bus_master()?;
        tracing::debug!(pci = %address, command = format_args!("{old:#06x}"), "bus mastering enabled via sysfs config");
        Ok(Self { function, bar0: Arc::new(bar0), dma: Arc::new(HugepageDma::new()) })
    }

    /// The PCI function.
    #[must_use]
    pub fn function(&self) -> &PciFunction {
        &self.function
    }

    /// BAR0.
    #[must_use]
    pub fn bar0(&self) -> Arc<dyn Mmio> {
        self.bar0.clone()
    }

    /// DMA memory: hugepages with physical addresses.
    #[must_use]
    pub fn dma(&self) -> Arc<dyn DmaSpace> {
        self.dma.clone()
    }
}

/// Checks what DMA without an IOMMU needs: free 2 MiB hugepages under `root`, and real page frame
/// numbers in `/proc/self/pagemap`.
///
/// # Errors
///
/// [`OpenError::NoHugepages`] with the command that reserves them; [`OpenError::Pagemap`].
pub fn check_physical_dma_ready(root: &SysfsRoot) -> Result<(), OpenError> {
    match root.free_hugepages() {
        Some(n) if n > 0 => {}
        free => {
            return Err(OpenError::NoHugepages {
                free: free.unwrap_or(0),
                command: root.reserve_hugepages_command(512),
            });
        }
    }
    probe_pagemap()
}

/// Checks that this process reads real page frame numbers from `/proc/self/pagemap`.
///
/// # Errors
///
/// [`OpenError::Pagemap`], notably [`PagemapError::NoPermission`] when not root.
pub fn probe_pagemap() -> Result<(), OpenError> {
    let probe = Box::new(0x5Au64);
    let addr = std::ptr::from_ref::<u64>(&probe) as usize;
    // The heap word was just written, so its page is present.
    std::hint::black_box(&probe);
    Pagemap::open()?.translate(addr)?;
    Ok(())
}

/// DMA memory for a device without an IOMMU: 2 MiB hugepages, each physically contiguous, addressed
/// by their physical addresses from `/proc/self/pagemap` ([`Translation::Pages`]).
///
/// Refuses ranges that are not hugepage-backed: 4 KiB pages that are adjacent in virtual memory are
/// scattered in physical memory, so a packet buffer crossing a page boundary would be written partly
/// into someone else's memory.
#[derive(Debug, Default)]
pub struct HugepageDma {
    _private: (),
}

impl HugepageDma {
    /// A DMA space; logs nothing (the caller that chose the fallback warns).
    #[must_use]
    pub fn new() -> Self {
        Self { _private: () }
    }

    fn translate_pages(start: usize, len: usize) -> Result<Translation, PagemapError> {
        let pagemap = Pagemap::open()?;
        let pages = (start..start + len)
            .step_by(HUGEPAGE_SIZE)
            .map(|va| pagemap.translate(va).map(Iova::from))
            .collect::<Result<Box<[Iova]>, _>>()?;
        Ok(Translation::Pages { page_shift: HUGEPAGE_SHIFT, pages })
    }
}

/// How to fix a lack of hugepages, for error messages.
fn hugepage_hint() -> String {
    format!(
        "reserve 2 MiB hugepages as root: `{}` (or scripts/vfio-bind.sh --hugepages 512)",
        SysfsRoot::default().reserve_hugepages_command(512)
    )
}

/// Hugepages this process mapped; unmapped on drop.
#[derive(Debug)]
struct HugeAlloc {
    base: usize,
    len: usize,
}

impl DmaGuard for HugeAlloc {}

impl Drop for HugeAlloc {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping `HugepageDma::alloc` made; the `DmaMemory` that
        // owns this guard drops it last, after its last use of the memory.
        let r = unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        if r != 0 {
            tracing::error!(error = %io::Error::last_os_error(), "munmap of hugepage DMA memory failed");
        }
    }
}

/// Nothing to undo: the caller owns the memory and no IOMMU mapping exists.
#[derive(Debug)]
struct NoUnmap;

impl DmaGuard for NoUnmap {}

impl DmaSpace for HugepageDma {
    fn alloc(&self, len: usize) -> Result<DmaMemory, DmaError> {
        let len = len.max(1).next_multiple_of(HUGEPAGE_SIZE);
        let flags = libc::MAP_PRIVATE
            | libc::MAP_ANONYMOUS
            | libc::MAP_HUGETLB
            | libc::MAP_HUGE_2MB
            | libc::MAP_POPULATE;
        // SAFETY: a new anonymous mapping at an address of the kernel's choosing touches no existing
        // memory; failure is MAP_FAILED (checked below).
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0)
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(DmaError::Alloc {
                len,
                source: io::Error::new(
                    e.kind(),
                    format!("2 MiB hugepage mmap failed ({e}); {}", hugepage_hint()),
                ),
            });
        }
        let guard = HugeAlloc { base: p as usize, len };
        let Some(ptr) = NonNull::new(p.cast::<u8>()) else {
            return Err(DmaError::Alloc { len, source: io::Error::other("mmap returned null") });
        };
        // The device's writes must not be copied into a child on fork (DPDK does the same).
        // SAFETY: madvise on a range this function just mapped; it changes no memory contents.
        if unsafe { libc::madvise(p, len, libc::MADV_DONTFORK) } != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "MADV_DONTFORK on DMA memory failed");
        }
        let translation = Self::translate_pages(guard.base, len).map_err(|e| DmaError::Map {
            start: guard.base,
            len,
            why: e.to_string(),
        })?;
        // SAFETY: the range is a fresh private anonymous mapping (zeroed, 2 MiB aligned), owned by the
        // guard that goes into the `DmaMemory`; only the device (through `translation`) shares it.
        Ok(unsafe { DmaMemory::from_raw_parts(ptr, len, translation, Box::new(guard)) })
    }

    fn map(&self, start: usize, len: usize) -> Result<DmaMapping, DmaError> {
        let refuse = |why: String| DmaError::Map { start, len, why };
        if len == 0 {
            return Err(refuse("empty range".to_owned()));
        }
        if !start.is_multiple_of(HUGEPAGE_SIZE) || !len.is_multiple_of(HUGEPAGE_SIZE) {
            return Err(refuse(format!(
                "the no-IOMMU fallback maps whole 2 MiB hugepages: start and length must be multiples of \
                 {HUGEPAGE_SIZE:#x} (build the pool with HugePages::Require; {})",
                hugepage_hint()
            )));
        }
        let vmas = pagemap::own_mappings().map_err(|e| refuse(e.to_string()))?;
        match pagemap::min_page_size(&vmas, start, len) {
            None => return Err(refuse("the range is not (entirely) mapped".to_owned())),
            Some(page) if page < HUGEPAGE_SIZE => {
                return Err(refuse(format!(
                    "the range is backed by {page}-byte pages, not hugepages: without an IOMMU the device \
                     needs physically contiguous memory and only a hugepage is; build the pool with \
                     HugePages::Require and {}",
                    hugepage_hint()
                )));
            }
            Some(_) => {}
        }
        let translation = Self::translate_pages(start, len).map_err(|e| refuse(e.to_string()))?;
        Ok(DmaMapping::new(start, len, translation, Box::new(NoUnmap)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_bind_commands_text() {
        let root = SysfsRoot::default();
        let a = PciAddress::parse("0000:03:00.0").unwrap();
        let text = root.bind_commands(&a, Some("ixgbe"));
        assert!(
            text.contains("echo 0000:03:00.0 > /sys/bus/pci/devices/0000:03:00.0/driver/unbind"),
            "{text}"
        );
        assert!(text.contains("echo vfio-pci > /sys/bus/pci/devices/0000:03:00.0/driver_override"), "{text}");
        assert!(text.contains("echo 0000:03:00.0 > /sys/bus/pci/drivers/vfio-pci/bind"), "{text}");
        assert!(!root.bind_commands(&a, None).contains("unbind"));
        assert_eq!(
            root.reserve_hugepages_command(512),
            "echo 512 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
        );
    }

    #[test]
    fn sysfs_command_register_read_modify_write() {
        let path = std::env::temp_dir().join(format!("ixgbe-vfio-config-{}", std::process::id()));
        let mut config = vec![0u8; 256];
        config[4] = 0x03; // memory + I/O space already on
        config[5] = 0x04; // interrupt disable
        fs::write(&path, &config).unwrap();
        let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let old = set_command_bits(&file, 0, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER).unwrap();
        assert_eq!(old, 0x0403);
        let after = fs::read(&path).unwrap();
        fs::remove_file(&path).unwrap();
        assert_eq!(u16::from_le_bytes([after[4], after[5]]), 0x0407);
        assert_eq!(after.iter().filter(|&&b| b != 0).count(), 2, "nothing else written");
    }
}
