//! The pool's memory: the [`Region`] mapping (2 MiB hugepages or normal pages), the slot geometry
//! and the metadata header at the start of every slot.

use std::fmt;
use std::io;
use std::ptr::NonNull;

use super::{HEADER_SIZE, Offload, PoolError};

/// The hugepage size the pool maps (`MAP_HUGE_2MB`).
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Whether the pool's region is backed by 2 MiB hugepages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HugePages {
    /// Use hugepages when the system has enough free; otherwise log a warning and use normal pages.
    #[default]
    Prefer,
    /// Use hugepages or fail with [`PoolError::HugePagesUnavailable`].
    Require,
    /// Always use normal pages.
    Never,
}

/// The pool's memory: one anonymous mapping, unmapped on drop.
///
/// Drivers hand `as_ptr() + offset` (or its IOVA, once the region is DMA-mapped) to the NIC, with the
/// offsets from [`Pool::buffer_offset`](super::Pool::buffer_offset) and [`Packet::dma_offset`](super::Packet::dma_offset).
pub struct Region {
    pub(super) base: NonNull<u8>,
    len: usize,
    page_size: usize,
    hugepages: bool,
}

// SAFETY: the region is an owned anonymous mapping with no thread affinity. `&Region` only hands out a
// raw pointer; every access to the memory goes through that pointer under the index-ownership rules
// of the pool (one owner per buffer at a time), never through a shared reference to the whole region.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("base", &self.base)
            .field("len", &self.len)
            .field("page_size", &self.page_size)
            .field("hugepages", &self.hugepages)
            .finish()
    }
}

impl Region {
    /// Maps `len` bytes (rounded up to the page size) as `mode` asks, normal pages made resident
    /// at once when `populate`.
    pub(super) fn map(len: usize, mode: HugePages, populate: bool) -> Result<Self, PoolError> {
        if mode != HugePages::Never {
            let huge_len = len.next_multiple_of(HUGE_PAGE_SIZE);
            match Self::map_anonymous(huge_len, libc::MAP_HUGETLB | libc::MAP_HUGE_2MB | libc::MAP_POPULATE) {
                Ok(base) => {
                    return Ok(Self { base, len: huge_len, page_size: HUGE_PAGE_SIZE, hugepages: true });
                }
                Err(e) if mode == HugePages::Require => {
                    return Err(PoolError::HugePagesUnavailable(e));
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    bytes = huge_len,
                    "no 2 MiB hugepages for the packet buffer pool, using normal pages (reserve hugepages with `sysctl vm.nr_hugepages=N` for fewer TLB misses)"
                ),
            }
        }
        // SAFETY: sysconf takes an integer and reads no memory.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page_size = usize::try_from(page).ok().filter(|p| p.is_power_of_two()).unwrap_or(4096);
        let len = len.next_multiple_of(page_size);
        let base = Self::map_anonymous(len, if populate { libc::MAP_POPULATE } else { 0 })
            .map_err(PoolError::Map)?;
        Ok(Self { base, len, page_size, hugepages: false })
    }

    fn map_anonymous(len: usize, extra_flags: libc::c_int) -> io::Result<NonNull<u8>> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
        // existing memory; failure is reported as MAP_FAILED.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned a null mapping"))
    }

    /// The first byte of the region (page-aligned).
    #[must_use]
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// The mapped length in bytes: the slots, rounded up to [`Region::page_size`].
    #[must_use]
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: a pool has at least one buffer.
    #[must_use]
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size of the pages backing the region: [`HUGE_PAGE_SIZE`] or the system page size.
    #[must_use]
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Whether the region is backed by 2 MiB hugepages.
    #[must_use]
    pub fn is_hugepage(&self) -> bool {
        self.hugepages
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping `map` created, and every handle that could
        // reach it (caches, packets) holds the pool, so nothing uses it after this.
        let r = unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
        if r != 0 {
            tracing::error!(error = %io::Error::last_os_error(), "munmap of the packet pool failed");
        }
    }
}

/// The fixed geometry of a pool's slots.
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    /// Bytes from one slot to the next (a multiple of [`SLOT_ALIGN`](super::SLOT_ALIGN), fits `u32`).
    pub(super) stride: usize,
    /// Headroom + data room: the bytes after the header.
    pub(super) buf_len: u32,
    /// The headroom of a freshly allocated buffer.
    pub(super) headroom: u32,
    /// Number of buffers; valid indices are `0..count`.
    pub(super) count: u32,
}

/// The data window at the start of each slot: what a length change rewrites.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct Header {
    /// Offset of the first data byte from the buffer's start.
    pub(super) data_off: u32,
    /// Bytes of data.
    pub(super) data_len: u32,
}

/// The metadata at the start of each slot: the data window, then the frame's offload metadata.
/// A fresh buffer's (allocated or received) is written whole; a length change rewrites only the
/// window, so the offload metadata stays.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct FullHeader {
    pub(super) window: Header,
    pub(super) offload: Offload,
}

impl FullHeader {
    /// A fresh buffer's metadata: `data_len` bytes at `data_off`, nothing to offload.
    #[inline(always)]
    pub(super) const fn fresh(data_off: u32, data_len: u32) -> Self {
        Self { window: Header { data_off, data_len }, offload: Offload::NONE }
    }
}

/// Where [`FullHeader::offload`] lies in the slot.
pub(super) const OFFLOAD_OFFSET: usize = std::mem::offset_of!(FullHeader, offload);

const _: () = assert!(size_of::<FullHeader>() <= HEADER_SIZE);

/// The bit a frame's index carries: [`Packet::index`](super::Packet::index) and
/// [`Packet::into_raw`](super::Packet::into_raw) of a frame of a shared buffer return the buffer's index with this bit set (pools have at most
/// [`MAX_BUFFERS`](super::MAX_BUFFERS), so no plain index has it). It is the frame's token: a device
/// hands it back through [`PoolCache::free_burst`](super::PoolCache::free_burst) like any index it was given, which drops the
/// frame's reference instead of freeing the buffer.
pub const FRAME_TAG: u32 = 1 << 31;

/// What releasing a frame's token did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Release {
    /// Not the token of a frame in flight: nothing changed.
    Rejected,
    /// The frame's reference went; others remain.
    Released,
    /// The frame's was the last reference: the caller frees buffer `.0`.
    Freed(u32),
}

/// One reference in the state word.
pub(super) const REF: u32 = 2;

/// The in-flight frame bit of the state word.
pub(super) const FRAME: u32 = 1;

/// A state word past this aborts a clone or a frame, as `Arc` does on overflow: reachable only by
/// leaking about a billion handles (`mem::forget`).
pub(super) const MAX_STATE: u32 = u32::MAX / 2;

/// Where a shared buffer's state word (an `AtomicU32`: reference count and in-flight frame bit, see
/// `shared.rs`) lies in the slot: right after the [`FullHeader`], on the header's cache line. Only
/// shared buffers read or write it; a fresh buffer's header write leaves it alone.
pub(super) const SHARED_STATE_OFFSET: usize = size_of::<FullHeader>();

/// Where a shared buffer's payload window (two `u32`s: offset from the buffer's start, length) lies:
/// written once when the buffer becomes shared, immutable while it is; a frame of the buffer reads it
/// to know which bytes it must not write.
pub(super) const SHARED_PAYLOAD_OFFSET: usize = SHARED_STATE_OFFSET + size_of::<u32>();

const _: () = assert!(SHARED_PAYLOAD_OFFSET + size_of::<Header>() <= HEADER_SIZE);
const _: () = assert!(SHARED_STATE_OFFSET.is_multiple_of(align_of::<u32>()));

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::pool::{Pool, PoolError};

    #[test]
    fn hugepage_modes_are_consistent() {
        match Pool::builder(4).hugepages(HugePages::Require).build() {
            Ok(pool) => {
                assert!(pool.region().is_hugepage());
                assert_eq!(pool.region().page_size(), HUGE_PAGE_SIZE);
                assert_eq!(pool.region().len() % HUGE_PAGE_SIZE, 0);
            }
            Err(e) => assert!(matches!(e, PoolError::HugePagesUnavailable(_)), "{e}"),
        }
        let preferred = Pool::builder(4).build().unwrap();
        let page = preferred.region().page_size();
        assert_eq!(preferred.region().is_hugepage(), page == HUGE_PAGE_SIZE);
    }
}
