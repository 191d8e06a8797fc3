//! Physical addresses of our own memory, for the no-IOMMU fallback: `/proc/self/pagemap` for the
//! translation, `/proc/self/smaps` for the page size behind an address.
//!
//! Facts used (Linux `Documentation/admin-guide/mm/pagemap.rst`): `pagemap` holds one little-endian
//! 64-bit entry per virtual page of the system page size, at file offset `vaddr / page_size * 8`; bit 63
//! says the page is present in RAM, bit 62 that it is swapped, bits 0-54 are the page frame number.
//! Since Linux 4.0 the PFN reads as zero without `CAP_SYS_ADMIN`, which we detect and report rather
//! than hand a device address 0. A 2 MiB hugepage is physically contiguous, so the entry of its first
//! 4 KiB gives the whole page; ordinary 4 KiB pages are not contiguous with their neighbours, which is
//! why the fallback requires hugepages.
//!
//! A physical address is only stable while the page stays where it is: hugetlb pages are never
//! swapped, and anonymous memory the kernel could move (compaction, NUMA balancing) is exactly what
//! the fallback refuses. That is also why the fallback is unsafe for production: nothing but our own
//! discipline keeps the device inside our memory.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::hw::Iova;

/// A physical (bus) address: what a device without an IOMMU must be given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PhysAddr(pub u64);

impl From<PhysAddr> for Iova {
    /// Without an IOMMU the device sees physical addresses.
    fn from(p: PhysAddr) -> Self {
        Iova(p.0)
    }
}

impl fmt::Display for PhysAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Why a virtual address could not be translated.
#[derive(Debug, thiserror::Error)]
pub enum PagemapError {
    /// Reading `/proc/self/pagemap` or `/proc/self/smaps` failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The page is not in RAM (never touched, or swapped out).
    #[error(
        "the page at {vaddr:#x} is not present in RAM{}; touch (write) the memory first, or map it \
         with MAP_POPULATE",
        if *.swapped { " (it is swapped out)" } else { "" }
    )]
    NotPresent {
        /// The virtual address asked about.
        vaddr: usize,
        /// Whether the entry says the page is swapped.
        swapped: bool,
    },
    /// The entry is present but its page frame number reads as 0: the process lacks
    /// `CAP_SYS_ADMIN`.
    #[error(
        "/proc/self/pagemap shows page frame numbers as 0 (page at {vaddr:#x}): reading physical \
         addresses needs CAP_SYS_ADMIN; run as root (sudo), or bind the NIC to vfio-pci with an IOMMU \
         so that no physical addresses are needed (scripts/vfio-bind.sh)"
    )]
    NoPermission {
        /// The virtual address asked about.
        vaddr: usize,
    },
}

const PAGEMAP: &str = "/proc/self/pagemap";
const SMAPS: &str = "/proc/self/smaps";

/// Bit 63 of a pagemap entry: the page is present in RAM.
const PM_PRESENT: u64 = 1 << 63;
/// Bit 62: the page is swapped.
const PM_SWAPPED: u64 = 1 << 62;
/// Bits 0-54: the page frame number.
const PM_PFN_MASK: u64 = (1 << 55) - 1;

/// The system page size (the unit of pagemap entries and of page frame numbers).
#[must_use]
pub fn system_page_size() -> usize {
    // SAFETY: sysconf takes an integer and reads no memory.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).ok().filter(|p| p.is_power_of_two()).unwrap_or(4096)
}

/// Decodes the pagemap `entry` of the page holding `vaddr` into the physical address of `vaddr`.
///
/// # Errors
///
/// [`PagemapError::NotPresent`] when the page is not in RAM, [`PagemapError::NoPermission`] when
/// the PFN reads as zero.
pub fn decode_entry(entry: u64, vaddr: usize, page_size: usize) -> Result<PhysAddr, PagemapError> {
    if entry & PM_PRESENT == 0 {
        return Err(PagemapError::NotPresent { vaddr, swapped: entry & PM_SWAPPED != 0 });
    }
    let pfn = entry & PM_PFN_MASK;
    if pfn == 0 {
        return Err(PagemapError::NoPermission { vaddr });
    }
    let in_page = (vaddr & (page_size - 1)) as u64;
    Ok(PhysAddr(pfn * page_size as u64 + in_page))
}

/// An open `/proc/self/pagemap`, for translating many addresses with one open.
#[derive(Debug)]
pub struct Pagemap {
    file: File,
    page_size: usize,
}

impl Pagemap {
    /// Opens `/proc/self/pagemap`.
    ///
    /// # Errors
    ///
    /// [`PagemapError::Io`] when the file cannot be opened.
    pub fn open() -> Result<Self, PagemapError> {
        let file = File::open(PAGEMAP).map_err(|source| PagemapError::Io { path: PAGEMAP, source })?;
        Ok(Self { file, page_size: system_page_size() })
    }

    /// The physical address of the byte at virtual address `vaddr` of this process.
    ///
    /// The page must be present (written to, or mapped with `MAP_POPULATE`): a never-written anonymous
    /// page reads as the shared zero page or as not present.
    ///
    /// # Errors
    ///
    /// See [`decode_entry`]; [`PagemapError::Io`] when the entry cannot be read.
    pub fn translate(&self, vaddr: usize) -> Result<PhysAddr, PagemapError> {
        let index = (vaddr / self.page_size) as u64;
        let mut buf = [0u8; 8];
        self.file
            .read_exact_at(&mut buf, index * 8)
            .map_err(|source| PagemapError::Io { path: PAGEMAP, source })?;
        decode_entry(u64::from_le_bytes(buf), vaddr, self.page_size)
    }
}

/// The physical address of the byte at `vaddr` (one-shot; see [`Pagemap::translate`]).
///
/// # Errors
///
/// As [`Pagemap::translate`].
pub fn virt_to_phys(vaddr: usize) -> Result<PhysAddr, PagemapError> {
    Pagemap::open()?.translate(vaddr)
}

/// One mapping of `/proc/self/smaps`: its address range and the size of the pages backing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vma {
    /// First address.
    pub start: usize,
    /// One past the last address.
    pub end: usize,
    /// `KernelPageSize` in bytes (2 MiB for a hugetlb mapping of 2 MiB pages).
    pub page_size: usize,
}

/// Parses the text of `/proc/PID/smaps` into its mappings (those with a `KernelPageSize` line).
#[must_use]
pub fn parse_smaps(text: &str) -> Vec<Vma> {
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            current = Some((start, end));
            continue;
        }
        if let Some(rest) = line.strip_prefix("KernelPageSize:") {
            let kib = rest.trim().strip_suffix("kB").map(str::trim).and_then(|v| v.parse::<usize>().ok());
            if let (Some((start, end)), Some(kib)) = (current.take(), kib) {
                out.push(Vma { start, end, page_size: kib * 1024 });
            }
        }
    }
    out
}

/// The mappings of this process, from `/proc/self/smaps`.
///
/// # Errors
///
/// [`PagemapError::Io`] when the file cannot be read.
pub fn own_mappings() -> Result<Vec<Vma>, PagemapError> {
    read_smaps(Path::new(SMAPS))
}

fn read_smaps(path: &Path) -> Result<Vec<Vma>, PagemapError> {
    let text = std::fs::read_to_string(path).map_err(|source| PagemapError::Io { path: SMAPS, source })?;
    Ok(parse_smaps(&text))
}

/// The smallest page size backing any byte of `start..start + len`, or `None` when part of the range
/// is not mapped at all.
#[must_use]
pub fn min_page_size(vmas: &[Vma], start: usize, len: usize) -> Option<usize> {
    let end = start.checked_add(len)?;
    let mut at = start;
    let mut min = usize::MAX;
    while at < end {
        let vma = vmas.iter().find(|v| v.start <= at && at < v.end)?;
        min = min.min(vma.page_size);
        at = vma.end;
    }
    (min != usize::MAX).then_some(min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pagemap_decode() {
        let page = 4096;
        let e = PM_PRESENT | 0x1234;
        assert_eq!(decode_entry(e, 0x7f00_0000_0abc, page).unwrap(), PhysAddr(0x0123_4abc));
        assert!(matches!(decode_entry(PM_PRESENT, 0x1000, page), Err(PagemapError::NoPermission { .. })));
        assert!(matches!(
            decode_entry(PM_SWAPPED | 7, 0x1000, page),
            Err(PagemapError::NotPresent { swapped: true, .. })
        ));
        assert!(matches!(
            decode_entry(0, 0x1000, page),
            Err(PagemapError::NotPresent { swapped: false, .. })
        ));
        // Bits 55-61 (soft-dirty, exclusive, file/shared flags) are not part of the PFN.
        assert_eq!(decode_entry(PM_PRESENT | (1 << 55) | (1 << 61) | 2, 0, page).unwrap(), PhysAddr(0x2000));
        let msg = decode_entry(PM_PRESENT, 0x1000, page).unwrap_err().to_string();
        assert!(msg.contains("CAP_SYS_ADMIN") && msg.contains("root"), "{msg}");
    }

    #[test]
    fn smaps_parse() {
        let text = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon
Size:                328 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
7f0000000000-7f0000400000 rw-p 00000000 00:0f 1234     /anon_hugepage (deleted)
Size:               4096 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
VmFlags: rd wr sh mr mw me ms de ht
7f0000400000-7f0000401000 rw-p 00000000 00:00 0
Size:                  4 kB
KernelPageSize:        4 kB
";
        let vmas = parse_smaps(text);
        assert_eq!(vmas.len(), 3);
        assert_eq!(vmas[1], Vma { start: 0x7f00_0000_0000, end: 0x7f00_0040_0000, page_size: 2 << 20 });
        assert_eq!(min_page_size(&vmas, 0x7f00_0000_0000, 4 << 20), Some(2 << 20));
        assert_eq!(
            min_page_size(&vmas, 0x7f00_0020_0000, (2 << 20) + 0x1000),
            Some(4096),
            "runs into a 4 KiB VMA"
        );
        assert_eq!(min_page_size(&vmas, 0x10_0000, 4096), None, "unmapped");
        assert_eq!(min_page_size(&vmas, 0x7f00_0040_0000, 0x2000), None, "runs past the last VMA");
    }

    #[test]
    fn smaps_of_this_process_know_the_stack() {
        let local = 0u64;
        let addr = std::ptr::from_ref(&local) as usize;
        let vmas = own_mappings().unwrap();
        assert_eq!(min_page_size(&vmas, addr, 8), Some(system_page_size()));
    }
}
