//! The packet buffer pool: fixed-size buffers in one contiguous (hugepage) region, named by `u32`
//! indices, allocated and freed through per-core caches without locks or atomic read-modify-writes.
//!
//! Sources: the per-CPU cache in front of a shared depot is Bonwick's magazine layer (Bonwick & Adams,
//! "Magazines and Vmem", USENIX 2001) as DPDK's `rte_mempool` implements it for packet buffers
//! (per-lcore cache, bulk refill and flush); the in-buffer metadata and headroom follow DPDK's
//! `rte_mbuf`. Van Jacobson's net channels (`seeds/004`) need exactly this shape: a packet crosses cores
//! as a `u32` in a [`channel`], and is freed on the core that consumed it.
//!
//! # Region and slot layout
//!
//! The pool is one anonymous mapping ([`Region`]): 2 MiB hugepages when available (`MAP_HUGETLB`,
//! populated up front so the NIC never DMAs into a page that is not there), otherwise normal pages with a
//! logged fallback; [`HugePages`] makes either choice mandatory. The mapping is unmapped when the last
//! handle on the pool goes away. Buffer `i` lives in slot `i`, at byte `i × stride`:
//!
//! ```text
//!  slot i: stride bytes, a multiple of 64
//!  ┌───────────────┬──────────────────┬────────────────────┬─────────┐
//!  │ header (64 B) │ headroom (128 B) │ data room (2048 B) │ padding │
//!  └───────────────┴──────────────────┴────────────────────┴─────────┘
//!                  └─── buffer: headroom + data room ────┘
//!  ^ i × stride    ^ i × stride + 64: Pool::buffer_offset(i), where Packet::buffer starts
//! ```
//!
//! The header is one cache line holding the packet's metadata: `data_off` (where the data starts,
//! measured from the buffer's start; a fresh buffer has `data_off = headroom`) and `data_len`, two
//! native-endian `u32`s; the other 56 bytes are reserved. Metadata lives *in* the buffer, not in a side
//! array, so it travels with the buffer when only the index crosses cores: the consumer's first touch of
//! the packet pulls the header line it needs anyway, and two cores owning adjacent indices never write
//! the same cache line (a side array of 8-byte entries would put eight buffers on one line). With the
//! defaults the stride is 64 + 128 + 2048 = 2240 bytes (35 lines, not a power of two, so consecutive
//! headers spread over cache sets) and the data room starts line-aligned.
//!
//! # Caches and the depot
//!
//! Free buffers live either in the shared *depot* (a mutex-protected stack of indices) or in a
//! [`PoolCache`]: a per-thread stack that is `Send` but not `Sync`. [`PoolCache::alloc`] pops and
//! dropping a [`Packet`] pushes with plain loads and stores (plus one relaxed store that mirrors the
//! cache's free count for [`Pool::audit`]: no lock, no read-modify-write, no fence); only an empty cache takes the depot's lock,
//! to refill `batch` buffers, and only a full one (`cache_size`, twice the batch by default) takes it to
//! spill its `batch` coldest buffers. A buffer is freed into the cache of whichever thread drops it, so
//! a consumer core frees what the driver core allocated, and the depot carries the buffers back in
//! batches. A driver that wants its buffers back directly can also have consumers return indices through
//! a net channel and drain it with [`PacketRx::reclaim`] or [`PoolCache::reclaim`].
//!
//! Like any magazine allocator, buffers sitting in one cache are invisible to the others: size the pool
//! for the buffers in flight plus `cache_size` per cache.
//!
//! # Ownership
//!
//! A [`Packet`] borrows its cache, so it cannot outlive it or leave its thread; to move a packet across
//! cores, push it into a [`PacketTx`] (safe) or turn it into its index with [`Packet::into_raw`] and
//! rebuild it on the other side with the `unsafe` [`PoolCache::packet_from_raw`]. Whoever holds an index
//! obtained this way owns the buffer. [`Pool::audit`] counts where buffers are, and
//! [`Pool::check_leaks`] verifies, once every cache is gone, that each buffer came back exactly once.
//!
//! # Example
//!
//! ```
//! use netchannel::pool::{HugePages, Pool};
//!
//! let pool = Pool::builder(1024).hugepages(HugePages::Never).build()?;
//! let (mut tx, mut rx) = pool.packet_channel(256)?;
//!
//! // The consumer core: frees every packet into its own cache.
//! let consumer = {
//!     let pool = pool.clone();
//!     std::thread::spawn(move || {
//!         let cache = pool.cache();
//!         let mut bytes = 0;
//!         loop {
//!             match rx.pop(&cache) {
//!                 Some(packet) => bytes += packet.len(), // dropped here: back to `cache`
//!                 None if rx.wait(None).is_closed() => return bytes,
//!                 None => {}
//!             }
//!         }
//!     })
//! };
//!
//! // The driver core: builds packets in place and sends them.
//! let cache = pool.cache();
//! for _ in 0..100 {
//!     let mut packet = cache.alloc().expect("the pool has room for 100 packets in flight");
//!     packet.extend_from_slice(b"payload")?;
//!     packet.prepend(14)?.fill(0xff); // an Ethernet header, written into the headroom
//!     while let Err(full) = tx.push(packet) {
//!         packet = full.into_inner();
//!         std::thread::yield_now();
//!     }
//! }
//! drop(tx); // closing the channel ends the consumer
//! assert_eq!(consumer.join().unwrap(), 100 * 21);
//! drop(cache);
//! pool.check_leaks()?; // every buffer came back exactly once
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::io;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::PoisonError;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::channel::{self, Channel, Consumer, Producer, Wait};
use crate::sync::{Arc, AtomicUsize, Mutex, MutexGuard, Ordering};

/// Bytes of metadata at the start of every slot (one cache line).
pub const HEADER_SIZE: usize = 64;

/// The alignment of every slot, and so the granularity of the stride.
pub const SLOT_ALIGN: usize = 64;

/// The data room a [`Builder`] uses unless told otherwise (a full Ethernet frame with room to spare).
pub const DEFAULT_DATA_ROOM: usize = 2048;

/// The headroom a [`Builder`] uses unless told otherwise (room to prepend encapsulation headers).
pub const DEFAULT_HEADROOM: usize = 128;

/// How many buffers a cache moves to or from the depot at once unless told otherwise.
pub const DEFAULT_BATCH: usize = 64;

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

/// Why a pool could not be built.
#[derive(Debug)]
pub enum PoolError {
    /// The pool must hold at least one buffer.
    ZeroBuffers,
    /// The data room must be at least one byte.
    ZeroDataRoom,
    /// The batch size must be at least one buffer.
    ZeroBatch,
    /// A cache must be able to hold at least one batch.
    CacheSmallerThanBatch {
        /// The requested cache size.
        cache_size: usize,
        /// The requested batch size.
        batch: usize,
    },
    /// Header, headroom and data room, rounded up to [`SLOT_ALIGN`], do not fit the `u32` offsets
    /// that buffer metadata is stored in.
    SlotTooLarge {
        /// The requested headroom.
        headroom: usize,
        /// The requested data room.
        data_room: usize,
    },
    /// `buffers × stride` does not fit the address space.
    RegionTooLarge {
        /// The requested number of buffers.
        buffers: u32,
        /// The stride those buffers would have.
        stride: usize,
    },
    /// [`HugePages::Require`] was set and the hugepage mapping failed (typically no free 2 MiB pages:
    /// see `/proc/sys/vm/nr_hugepages`).
    HugePagesUnavailable(io::Error),
    /// The region could not be mapped.
    Map(io::Error),
    /// The depot's index stack could not be allocated.
    OutOfMemory,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroBuffers => f.write_str("a buffer pool needs at least one buffer"),
            Self::ZeroDataRoom => f.write_str("a buffer pool needs a data room of at least one byte"),
            Self::ZeroBatch => f.write_str("a buffer pool's batch size must be at least 1"),
            Self::CacheSmallerThanBatch { cache_size, batch } => {
                write!(f, "cache size {cache_size} is smaller than the batch size {batch}")
            }
            Self::SlotTooLarge { headroom, data_room } => {
                write!(f, "a slot of {HEADER_SIZE} + {headroom} + {data_room} bytes does not fit u32 offsets")
            }
            Self::RegionTooLarge { buffers, stride } => {
                write!(f, "{buffers} buffers of {stride} bytes do not fit the address space")
            }
            Self::HugePagesUnavailable(e) => {
                write!(f, "cannot map the pool on 2 MiB hugepages: {e}")
            }
            Self::Map(e) => write!(f, "cannot map the pool's region: {e}"),
            Self::OutOfMemory => f.write_str("cannot allocate the pool's free-index stack"),
        }
    }
}

impl std::error::Error for PoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::HugePagesUnavailable(e) | Self::Map(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a [`Packet`] length operation was refused; the packet is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketError {
    /// The data would run past the end of the buffer.
    TooLong {
        /// The length asked for.
        requested: usize,
        /// The longest the data can be at its current start.
        max: usize,
    },
    /// Not enough headroom in front of the data.
    NoHeadroom {
        /// The bytes asked for.
        requested: usize,
        /// The headroom there is.
        available: usize,
    },
    /// The data is shorter than the bytes asked to strip.
    TooShort {
        /// The bytes asked for.
        requested: usize,
        /// The data's length.
        len: usize,
    },
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { requested, max } => {
                write!(f, "packet length {requested} exceeds the {max} bytes left in the buffer")
            }
            Self::NoHeadroom { requested, available } => {
                write!(f, "cannot prepend {requested} bytes with {available} bytes of headroom")
            }
            Self::TooShort { requested, len } => {
                write!(f, "cannot strip {requested} bytes from a {len}-byte packet")
            }
        }
    }
}

impl std::error::Error for PacketError {}

/// The error [`PacketTx::push`] returns; the packet comes back to the caller, who still owns it.
#[derive(Debug)]
pub enum PacketPushError<'c> {
    /// The channel is full.
    Full(Packet<'c>),
    /// The packet belongs to a different pool than the channel.
    WrongPool(Packet<'c>),
}

impl<'c> PacketPushError<'c> {
    /// The packet that was not pushed.
    #[must_use]
    pub fn into_inner(self) -> Packet<'c> {
        match self {
            Self::Full(packet) | Self::WrongPool(packet) => packet,
        }
    }
}

impl fmt::Display for PacketPushError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(p) => write!(f, "packet channel full; buffer {} not pushed", p.index()),
            Self::WrongPool(p) => {
                write!(f, "buffer {} belongs to another pool than the channel", p.index())
            }
        }
    }
}

impl std::error::Error for PacketPushError<'_> {}

/// Where a pool's buffers are, from [`Pool::audit`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Buffers in the pool.
    pub total: usize,
    /// Free buffers in the shared depot.
    pub in_depot: usize,
    /// Free buffers held by live caches.
    pub in_caches: usize,
    /// Buffers allocated and not yet freed: in packets, in channels, or owned as raw indices.
    pub outstanding: usize,
    /// Caches currently alive.
    pub live_caches: usize,
}

/// What [`Pool::check_leaks`] found wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeakError {
    /// Caches are still alive, so their buffers cannot be inspected; drop them first.
    LiveCaches(usize),
    /// Not every buffer is back exactly once.
    Leaked {
        /// Buffers in the pool.
        total: usize,
        /// Buffers that are not back (allocated and never freed, or lost in a channel).
        missing: usize,
        /// Extra copies of buffers that were freed more than once.
        duplicated: usize,
        /// The lowest missing index, if any.
        first_missing: Option<u32>,
        /// The lowest index freed more than once, if any.
        first_duplicated: Option<u32>,
    },
}

impl fmt::Display for LeakError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::LiveCaches(n) => write!(f, "cannot check for leaks while {n} caches are alive"),
            Self::Leaked { total, missing, duplicated, first_missing, first_duplicated } => {
                write!(f, "{missing} of {total} buffers missing, {duplicated} freed twice")?;
                if let Some(i) = first_missing {
                    write!(f, "; first missing: {i}")?;
                }
                if let Some(i) = first_duplicated {
                    write!(f, "; first freed twice: {i}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LeakError {}

/// The pool's memory: one anonymous mapping, unmapped on drop.
///
/// Drivers hand `as_ptr() + offset` (or its IOVA, once the region is DMA-mapped) to the NIC, with the
/// offsets from [`Pool::buffer_offset`] and [`Packet::dma_offset`].
pub struct Region {
    base: NonNull<u8>,
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
    /// Maps `len` bytes (rounded up to the page size) as `mode` asks.
    fn map(len: usize, mode: HugePages) -> Result<Self, PoolError> {
        if mode != HugePages::Never {
            let huge_len = len.next_multiple_of(HUGE_PAGE_SIZE);
            match Self::map_anonymous(huge_len, libc::MAP_HUGETLB | libc::MAP_HUGE_2MB) {
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
        let base = Self::map_anonymous(len, 0).map_err(PoolError::Map)?;
        Ok(Self { base, len, page_size, hugepages: false })
    }

    fn map_anonymous(len: usize, extra_flags: libc::c_int) -> io::Result<NonNull<u8>> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE | extra_flags;
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
struct Layout {
    /// Bytes from one slot to the next (a multiple of [`SLOT_ALIGN`], fits `u32`).
    stride: usize,
    /// Headroom + data room: the bytes after the header.
    buf_len: u32,
    /// The headroom of a freshly allocated buffer.
    headroom: u32,
    /// Number of buffers; valid indices are `0..count`.
    count: u32,
}

/// The metadata at the start of each slot.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Header {
    /// Offset of the first data byte from the buffer's start.
    data_off: u32,
    /// Bytes of data.
    data_len: u32,
}

const _: () = assert!(size_of::<Header>() <= HEADER_SIZE);

/// The free buffers not held by any cache, and the registry of live caches.
#[derive(Debug)]
struct Depot {
    /// Free indices; caches take from and give back to the end.
    free: Vec<u32>,
    /// Each live cache's count of free buffers it holds.
    caches: Vec<Arc<CachePadded<AtomicUsize>>>,
}

/// Under loom, one tracked cell per buffer: every access to a buffer's memory touches its cell, so the
/// model checker reports two threads using the same buffer without a happens-before edge, which is
/// what a buffer owned twice looks like.
#[cfg(loom)]
#[derive(Debug)]
struct Tracks(Box<[crate::sync::UnsafeCell<()>]>);

// SAFETY: the cells hold `()`: they exist only for loom's access tracking, which itself reports any
// access not ordered by happens-before.
#[cfg(loom)]
unsafe impl Sync for Tracks {}

#[derive(Debug)]
struct Shared {
    id: u64,
    layout: Layout,
    data_room: u32,
    batch: usize,
    cache_size: usize,
    depot: Mutex<Depot>,
    region: Region,
    #[cfg(loom)]
    tracks: Tracks,
}

impl Shared {
    fn lock_depot(&self) -> MutexGuard<'_, Depot> {
        // A panic while holding the lock cannot leave the depot inconsistent (every critical section
        // is a single Vec operation that does not panic), so poisoning is ignored.
        self.depot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records an access to buffer `index`'s memory for the model checker; nothing outside loom.
    #[inline(always)]
    fn track(&self, index: u32) {
        #[cfg(loom)]
        if let Some(cell) = self.tracks.0.get(index as usize) {
            cell.with_mut(|_| ());
        }
        #[cfg(not(loom))]
        let _ = index;
    }
}

/// Unique pool ids, so channels and caches can tell pools apart.
static NEXT_POOL_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Configures a pool before it is built. See [`Pool::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct Builder {
    buffers: u32,
    data_room: usize,
    headroom: usize,
    hugepages: HugePages,
    batch: usize,
    cache_size: Option<usize>,
}

impl Builder {
    /// Bytes of packet data each buffer holds after its headroom ([`DEFAULT_DATA_ROOM`] by default).
    #[inline]
    pub fn data_room(mut self, bytes: usize) -> Self {
        self.data_room = bytes;
        self
    }

    /// Bytes kept free in front of the data of a fresh buffer, for [`Packet::prepend`]
    /// ([`DEFAULT_HEADROOM`] by default).
    #[inline]
    pub fn headroom(mut self, bytes: usize) -> Self {
        self.headroom = bytes;
        self
    }

    /// Whether to back the region with hugepages ([`HugePages::Prefer`] by default).
    pub fn hugepages(mut self, mode: HugePages) -> Self {
        self.hugepages = mode;
        self
    }

    /// How many buffers a cache moves to or from the depot at once ([`DEFAULT_BATCH`] by default;
    /// clamped to the number of buffers).
    pub fn batch(mut self, buffers: usize) -> Self {
        self.batch = buffers;
        self
    }

    /// How many free buffers a cache holds before it spills a batch to the depot (twice the batch by
    /// default; clamped to the number of buffers).
    pub fn cache_size(mut self, buffers: usize) -> Self {
        self.cache_size = Some(buffers);
        self
    }

    /// Checks the configuration and derives the slot layout, the region length, the batch and the
    /// cache size (both clamped to the number of buffers).
    fn validate(&self) -> Result<(Layout, u32, usize, usize, usize), PoolError> {
        if self.buffers == 0 {
            return Err(PoolError::ZeroBuffers);
        }
        if self.data_room == 0 {
            return Err(PoolError::ZeroDataRoom);
        }
        if self.batch == 0 {
            return Err(PoolError::ZeroBatch);
        }
        let cache_size = self.cache_size.unwrap_or(self.batch.saturating_mul(2));
        if cache_size < self.batch {
            return Err(PoolError::CacheSmallerThanBatch { cache_size, batch: self.batch });
        }
        let too_large = || PoolError::SlotTooLarge { headroom: self.headroom, data_room: self.data_room };
        let stride = HEADER_SIZE
            .checked_add(self.headroom)
            .and_then(|n| n.checked_add(self.data_room))
            .and_then(|n| n.checked_next_multiple_of(SLOT_ALIGN))
            .filter(|&n| u32::try_from(n).is_ok())
            .ok_or_else(too_large)?;
        // Both fit, since they sum to less than the stride, which fits u32; `else` is unreachable.
        let (Ok(headroom), Ok(data_room)) = (u32::try_from(self.headroom), u32::try_from(self.data_room))
        else {
            return Err(too_large());
        };
        // Leave room to round the length up to a hugepage without overflowing `isize`.
        let max_len = (isize::MAX as usize) - HUGE_PAGE_SIZE;
        let len = (self.buffers as usize)
            .checked_mul(stride)
            .filter(|&len| len <= max_len)
            .ok_or(PoolError::RegionTooLarge { buffers: self.buffers, stride })?;
        let layout = Layout { stride, buf_len: headroom + data_room, headroom, count: self.buffers };
        let count = self.buffers as usize;
        Ok((layout, data_room, len, self.batch.min(count), cache_size.min(count)))
    }

    /// Validates the configuration, maps the region and puts every buffer in the depot.
    ///
    /// # Errors
    ///
    /// [`PoolError`] for a configuration that cannot work (zero sizes, sizes that overflow, a cache
    /// smaller than a batch) or a region that cannot be mapped.
    pub fn build(self) -> Result<Pool, PoolError> {
        let (layout, data_room, len, batch, cache_size) = self.validate()?;
        let region = Region::map(len, self.hugepages)?;
        let mut free = Vec::new();
        free.try_reserve_exact(self.buffers as usize).map_err(|_| PoolError::OutOfMemory)?;
        // Reversed, so the first allocations hand out 0, 1, 2, ...: adjacent, prefetch-friendly slots.
        free.extend((0..self.buffers).rev());

        let shared = Shared {
            // Relaxed: the id only has to be unique, which the RMW's atomicity guarantees; it orders
            // no other memory.
            id: NEXT_POOL_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            layout,
            data_room,
            batch,
            cache_size,
            depot: Mutex::new(Depot { free, caches: Vec::new() }),
            region,
            #[cfg(loom)]
            tracks: Tracks((0..self.buffers).map(|_| crate::sync::UnsafeCell::new(())).collect()),
        };
        Ok(Pool { shared: Arc::new(shared) })
    }
}

/// A pool of fixed-size packet buffers in one contiguous region.
///
/// `Pool` is a cheap handle (`Clone`, `Send`, `Sync`) on the shared pool: clone it into each thread and
/// make that thread's [`PoolCache`] with [`Pool::cache`]. The region stays mapped until the last handle,
/// cache and packet channel are gone.
#[derive(Clone)]
pub struct Pool {
    shared: Arc<Shared>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("id", &self.shared.id)
            .field("buffers", &self.shared.layout.count)
            .field("stride", &self.shared.layout.stride)
            .field("headroom", &self.shared.layout.headroom)
            .field("data_room", &self.shared.data_room)
            .field("region", &self.shared.region)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// Starts configuring a pool of `buffers` buffers.
    pub fn builder(buffers: u32) -> Builder {
        Builder {
            buffers,
            data_room: DEFAULT_DATA_ROOM,
            headroom: DEFAULT_HEADROOM,
            hugepages: HugePages::default(),
            batch: DEFAULT_BATCH,
            cache_size: None,
        }
    }

    /// A pool of `buffers` buffers with the default sizes, preferring hugepages.
    ///
    /// # Errors
    ///
    /// As [`Builder::build`].
    pub fn new(buffers: u32) -> Result<Self, PoolError> {
        Self::builder(buffers).build()
    }

    /// A fresh per-thread cache on this pool, starting empty (its first allocation refills it).
    #[must_use]
    pub fn cache(&self) -> PoolCache {
        let shared = &*self.shared;
        let mirror = Arc::new(CachePadded::new(AtomicUsize::new(0)));
        shared.lock_depot().caches.push(Arc::clone(&mirror));
        PoolCache {
            local: std::cell::UnsafeCell::new(Local {
                stack: Vec::with_capacity(shared.cache_size),
                stats: CacheStats::default(),
            }),
            base: shared.region.base,
            layout: shared.layout,
            batch: shared.batch,
            cache_size: shared.cache_size,
            mirror,
            pool: self.clone(),
        }
    }

    /// This pool's id, unique in the process.
    #[must_use]
    #[inline]
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The number of buffers; valid indices are `0..buffers()`.
    #[must_use]
    #[inline]
    pub fn buffers(&self) -> u32 {
        self.shared.layout.count
    }

    /// Bytes from one slot to the next: header, headroom and data room rounded up to [`SLOT_ALIGN`].
    #[must_use]
    #[inline]
    pub fn stride(&self) -> usize {
        self.shared.layout.stride
    }

    /// The headroom of a freshly allocated buffer.
    #[must_use]
    #[inline]
    pub fn headroom(&self) -> usize {
        self.shared.layout.headroom as usize
    }

    /// The data room: bytes of packet data after the headroom.
    #[must_use]
    #[inline]
    pub fn data_room(&self) -> usize {
        self.shared.data_room as usize
    }

    /// The length of each buffer (headroom + data room), starting at [`Pool::buffer_offset`].
    #[must_use]
    #[inline]
    pub fn buffer_len(&self) -> usize {
        self.shared.layout.buf_len as usize
    }

    /// How many buffers a cache moves to or from the depot at once.
    #[must_use]
    pub fn batch(&self) -> usize {
        self.shared.batch
    }

    /// How many free buffers a cache holds before it spills.
    #[must_use]
    pub fn cache_size(&self) -> usize {
        self.shared.cache_size
    }

    /// The region the buffers live in.
    #[must_use]
    pub fn region(&self) -> &Region {
        &self.shared.region
    }

    /// The byte offset within the region of buffer `index` (its headroom's first byte), or `None` when
    /// `index` is out of range. Always a multiple of 64.
    #[must_use]
    #[inline]
    pub fn buffer_offset(&self, index: u32) -> Option<usize> {
        (index < self.shared.layout.count).then(|| index as usize * self.shared.layout.stride + HEADER_SIZE)
    }

    /// Counts where the buffers are.
    ///
    /// Exact when no cache is allocating or freeing concurrently; otherwise a snapshot in which each
    /// live cache's count may be one operation stale.
    #[must_use]
    pub fn audit(&self) -> Audit {
        let depot = self.shared.lock_depot();
        let total = self.shared.layout.count as usize;
        let in_depot = depot.free.len();
        // Relaxed: a count, not a synchronisation. A cache stores it under this lock on its slow paths
        // (ordered by the lock), and without the lock on its fast path (monitoring only).
        let in_caches: usize = depot.caches.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        Audit {
            total,
            in_depot,
            in_caches,
            outstanding: total.saturating_sub(in_depot + in_caches),
            live_caches: depot.caches.len(),
        }
    }

    /// Verifies that every buffer is back in the depot exactly once. Call it after every cache (which
    /// flushes to the depot when dropped) and every packet channel is gone.
    ///
    /// # Errors
    ///
    /// [`LeakError::LiveCaches`] while caches exist; [`LeakError::Leaked`] with the number of buffers
    /// missing (leaked packets or raw indices, indices left in a raw channel) and freed twice.
    pub fn check_leaks(&self) -> Result<(), LeakError> {
        let depot = self.shared.lock_depot();
        if !depot.caches.is_empty() {
            return Err(LeakError::LiveCaches(depot.caches.len()));
        }
        let total = self.shared.layout.count as usize;
        let mut seen = vec![0u64; total.div_ceil(64)];
        let (mut distinct, mut duplicated) = (0, 0);
        let mut first_duplicated: Option<u32> = None;
        for &index in &depot.free {
            // Every path into the depot range-checks, so `index < count`; `get_mut` keeps it so.
            let Some(word) = seen.get_mut(index as usize / 64) else {
                continue;
            };
            let bit = 1u64 << (index % 64);
            if *word & bit == 0 {
                *word |= bit;
                distinct += 1;
            } else {
                duplicated += 1;
                first_duplicated = Some(first_duplicated.map_or(index, |d| d.min(index)));
            }
        }
        let missing = total - distinct;
        if missing == 0 && duplicated == 0 {
            return Ok(());
        }
        let first_missing = (0..self.shared.layout.count)
            .find(|&i| seen.get(i as usize / 64).is_some_and(|w| w & (1 << (i % 64)) == 0));
        Err(LeakError::Leaked { total, missing, duplicated, first_missing, first_duplicated })
    }

    /// A net channel of packets of this pool with room for at least `capacity` packets, whose
    /// consumer sleeps on a futex.
    ///
    /// # Errors
    ///
    /// As [`channel::Builder::build`].
    pub fn packet_channel(&self, capacity: usize) -> Result<(PacketTx, PacketRx), channel::BuildError> {
        self.packet_channel_with(Channel::builder(capacity))
    }

    /// A net channel of packets of this pool, configured by `builder` (capacity, wake mode).
    ///
    /// # Errors
    ///
    /// As [`channel::Builder::build`].
    pub fn packet_channel_with(
        &self,
        builder: channel::Builder,
    ) -> Result<(PacketTx, PacketRx), channel::BuildError> {
        let (tx, rx) = builder.build()?;
        Ok((PacketTx { tx, pool_id: self.shared.id }, PacketRx { rx, pool: self.clone() }))
    }
}

/// A cache's counters: plain fields, read by its owner with [`PoolCache::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Buffers allocated.
    pub allocs: u64,
    /// Buffers freed into this cache (dropped packets, `free_burst`, `reclaim`).
    pub frees: u64,
    /// Allocations that found neither the cache nor the depot holding a buffer.
    pub alloc_failures: u64,
    /// Refills from the depot.
    pub refills: u64,
    /// Spills to the depot.
    pub spills: u64,
    /// Out-of-range indices passed to `free_burst` or found in a reclaimed channel, and ignored.
    pub rejected: u64,
}

/// The state only the owning thread touches.
#[derive(Debug)]
struct Local {
    /// Free indices; the top (end) is the most recently freed, hence the warmest.
    stack: Vec<u32>,
    stats: CacheStats,
}

/// A per-thread cache of free buffers: allocations and frees that hit it take no lock and perform no
/// atomic read-modify-write.
///
/// `Send` (move it to the thread that will use it) but not `Sync`, and packets borrow it, so they stay
/// on its thread. Dropping the cache returns its free buffers to the depot.
///
/// ```compile_fail,E0277
/// fn is_sync<T: Sync>() {}
/// is_sync::<netchannel::pool::PoolCache>();
/// ```
pub struct PoolCache {
    local: std::cell::UnsafeCell<Local>,
    /// The region's base and slot geometry, copied here so the fast path reads no shared line.
    base: NonNull<u8>,
    layout: Layout,
    batch: usize,
    cache_size: usize,
    /// `local.stack.len()`, mirrored for [`Pool::audit`] with a plain (non-RMW) relaxed store.
    mirror: Arc<CachePadded<AtomicUsize>>,
    pool: Pool,
}

// SAFETY: `base` points into the region that `pool` keeps mapped, and `local` is owned state with no
// thread affinity, so the cache may move to another thread. It stays `!Sync` (the cell), which is what
// makes the unsynchronised access to `local` sound.
unsafe impl Send for PoolCache {}

impl fmt::Debug for PoolCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolCache")
            .field("pool", &self.pool.id())
            .field("free", &self.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl PoolCache {
    /// Runs `f` on the thread-local state.
    #[inline(always)]
    fn with_local<R>(&self, f: impl FnOnce(&mut Local) -> R) -> R {
        // SAFETY: `PoolCache` is `!Sync`, so only the thread that owns it gets here; and no `f` passed
        // by this module calls `with_local` again (they touch `Local`, the depot and the mirror only),
        // so this is the only reference to `local` while it lives.
        f(unsafe { &mut *self.local.get() })
    }

    /// Mirrors the stack length for [`Pool::audit`].
    #[inline(always)]
    fn publish(&self, local: &Local) {
        // Relaxed: a count for `Pool::audit`, which reads it Relaxed; on slow paths this store happens
        // under the depot lock, which orders it with the depot change.
        self.mirror.store(local.stack.len(), Ordering::Relaxed);
    }

    /// Moves up to `batch` buffers from the depot to the local stack; returns how many.
    #[cold]
    fn refill(&self, local: &mut Local) -> usize {
        let mut depot = self.pool.shared.lock_depot();
        let n = self.batch.min(depot.free.len());
        let start = depot.free.len() - n;
        local.stack.extend(depot.free.drain(start..));
        local.stats.refills += 1;
        self.publish(local);
        n
    }

    /// Moves the `n` coldest buffers (the bottom of the stack) to the depot.
    #[cold]
    fn spill(&self, local: &mut Local, n: usize) {
        let n = n.min(local.stack.len());
        let mut depot = self.pool.shared.lock_depot();
        depot.free.extend(local.stack.drain(..n));
        local.stats.spills += 1;
        self.publish(local);
    }

    /// Pops a free index, refilling from the depot when the stack is empty.
    #[inline(always)]
    fn pop_free(&self, local: &mut Local) -> Option<u32> {
        if let Some(index) = local.stack.pop() {
            return Some(index);
        }
        self.refill(local);
        let index = local.stack.pop();
        if index.is_none() {
            local.stats.alloc_failures += 1;
        }
        index
    }

    /// Pushes a free index, spilling a batch first when the stack is full.
    #[inline(always)]
    fn push_free(&self, local: &mut Local, index: u32) {
        if local.stack.len() >= self.cache_size {
            self.spill(local, self.batch);
        }
        // Never reallocates: after the check the stack holds fewer than `cache_size` (its capacity).
        local.stack.push(index);
        local.stats.frees += 1;
    }

    /// The slot of buffer `index`.
    ///
    /// # Safety
    ///
    /// `index < self.layout.count`.
    #[inline(always)]
    unsafe fn slot(&self, index: u32) -> NonNull<u8> {
        // SAFETY: `index < count` (caller), and the build checked that `count × stride` bytes fit in the
        // region, so the slot's first byte is inside the mapping.
        unsafe { self.base.add(index as usize * self.layout.stride) }
    }

    /// Resets buffer `index`'s metadata to an empty packet at the default headroom.
    ///
    /// # Safety
    ///
    /// `index < self.layout.count`, and the caller owns buffer `index`.
    #[inline(always)]
    unsafe fn reset_header(&self, index: u32) {
        self.pool.shared.track(index);
        // SAFETY: forwarded from the caller.
        let slot = unsafe { self.slot(index) };
        let header = Header { data_off: self.layout.headroom, data_len: 0 };
        // SAFETY: the slot starts 64-byte aligned (page-aligned base, stride a multiple of 64) with a
        // header's worth of bytes, and the caller owns the buffer, so nothing else accesses it.
        unsafe { slot.cast::<Header>().write(header) };
    }

    /// The pool this cache belongs to.
    #[must_use]
    #[inline]
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Free buffers held by this cache.
    #[must_use]
    #[inline]
    pub fn len(&self) -> usize {
        self.with_local(|l| l.stack.len())
    }

    /// Whether this cache holds no free buffer (the next allocation goes to the depot).
    #[must_use]
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This cache's counters.
    #[must_use]
    pub fn stats(&self) -> CacheStats {
        self.with_local(|l| l.stats)
    }

    /// Allocates an empty packet (data starting after the default headroom), or `None` when neither
    /// this cache nor the depot has a free buffer.
    #[must_use]
    #[inline]
    pub fn alloc(&self) -> Option<Packet<'_>> {
        let index = self.with_local(|l| {
            let index = self.pop_free(l)?;
            l.stats.allocs += 1;
            self.publish(l);
            Some(index)
        })?;
        // SAFETY: indices only enter the stack in range (`Builder::build`, `free_burst` and `reclaim`
        // check), and popping it made us its only owner.
        unsafe { self.reset_header(index) };
        // SAFETY: as above.
        let slot = unsafe { self.slot(index) };
        Some(Packet { cache: self, slot, index })
    }

    /// Allocates up to `out.len()` buffers as raw indices, each reset to an empty packet; returns how
    /// many, written to the front of `out`. The caller owns them: each must eventually be freed
    /// (`free_burst`), turned into a packet (`packet_from_raw`) or sent to someone who does.
    #[must_use]
    pub fn alloc_burst(&self, out: &mut [u32]) -> usize {
        let n = self.with_local(|l| {
            let mut n = 0;
            while n < out.len() {
                if l.stack.is_empty() && self.refill(l) == 0 {
                    l.stats.alloc_failures += 1;
                    break;
                }
                let take = (out.len() - n).min(l.stack.len());
                let from = l.stack.len() - take;
                out[n..n + take].copy_from_slice(&l.stack[from..]);
                l.stack.truncate(from);
                n += take;
            }
            l.stats.allocs += n as u64;
            self.publish(l);
            n
        });
        for &index in &out[..n] {
            // SAFETY: each index was in range in the stack, and popping it made us its only owner.
            unsafe { self.reset_header(index) };
        }
        n
    }

    /// Frees buffers given as raw indices into this cache, spilling to the depot as needed.
    /// Out-of-range indices are ignored and counted in [`CacheStats::rejected`].
    ///
    /// # Safety
    ///
    /// The caller owns every buffer in `indices` (from `alloc_burst`, `into_raw`, or a channel it was
    /// sent through), no [`Packet`] for them exists, `indices` holds no index twice, and the caller
    /// gives them up: freeing a buffer twice lets two later allocations return it, and the two packets
    /// would alias each other's `&mut` data.
    pub unsafe fn free_burst(&self, indices: &[u32]) {
        self.with_local(|l| {
            for &index in indices {
                if index < self.layout.count {
                    self.pool.shared.track(index);
                    self.push_free(l, index);
                } else {
                    l.stats.rejected += 1;
                }
            }
            self.publish(l);
        });
    }

    /// Rebuilds the packet handle of buffer `index`, with the metadata (data offset and length) that
    /// travelled in the buffer. The inverse of [`Packet::into_raw`].
    ///
    /// # Safety
    ///
    /// `index` names a buffer of this cache's pool that the caller owns (it came from
    /// [`Packet::into_raw`] or [`PoolCache::alloc_burst`], possibly through a channel, and nobody
    /// else kept it), and no other packet for it exists. Two handles on one buffer would hand out
    /// aliasing `&mut` references to its bytes; an out-of-range index would point outside the region.
    #[must_use]
    #[inline]
    pub unsafe fn packet_from_raw(&self, index: u32) -> Packet<'_> {
        debug_assert!(index < self.layout.count, "buffer index {index} out of range");
        // SAFETY: `index` is in range (caller).
        let slot = unsafe { self.slot(index) };
        Packet { cache: self, slot, index }
    }

    /// Writes the packets of buffers `indices` into `slots` (as many as both hold) and returns the sum
    /// of their data lengths as their headers say (for device statistics only: nothing reads memory by
    /// that sum, so a scribbled header can only skew a counter). A device's receive loop: the region
    /// base and stride are read once, not per packet.
    ///
    /// # Safety
    ///
    /// As [`PoolCache::packet_from_raw`] for each index written.
    #[cfg_attr(loom, allow(dead_code))]
    #[inline(always)]
    pub(crate) unsafe fn packets_from_raw<'c>(
        &'c self,
        slots: &mut [std::mem::MaybeUninit<Packet<'c>>],
        indices: &[u32],
    ) -> u64 {
        let (base, stride) = (self.base, self.layout.stride);
        let mut bytes = 0u64;
        for (slot, &index) in slots.iter_mut().zip(indices) {
            debug_assert!(index < self.layout.count, "buffer index {index} out of range");
            self.pool.shared.track(index);
            // SAFETY: `index < count` (the caller's contract), and the build checked that `count ×
            // stride` bytes fit in the region, so the slot is inside the mapping.
            let at = unsafe { base.add(index as usize * stride) };
            // SAFETY: the slot starts with an aligned header, and the caller owns the buffer, so
            // nothing writes it concurrently.
            let header = unsafe { at.cast::<Header>().read() };
            bytes += u64::from(header.data_len);
            slot.write(Packet { cache: self, slot: at, index });
        }
        bytes
    }

    /// Writes the packets of the frames a device received (`frames`: buffer index and length) into
    /// `slots` (as many as both hold), each with its data at the pool's headroom and the given length
    /// (clamped to the data room), and returns the sum of the lengths written.
    ///
    /// # Safety
    ///
    /// As [`PoolCache::packet_from_raw`] for each index written.
    #[cfg_attr(loom, allow(dead_code))]
    #[inline(always)]
    pub(crate) unsafe fn packets_from_received<'c>(
        &'c self,
        slots: &mut [std::mem::MaybeUninit<Packet<'c>>],
        frames: &[crate::dev::RxFrame],
    ) -> u64 {
        let (base, stride) = (self.base, self.layout.stride);
        let headroom = self.layout.headroom;
        let room = self.layout.buf_len - headroom;
        let mut bytes = 0u64;
        for (slot, frame) in slots.iter_mut().zip(frames) {
            let index = frame.index;
            debug_assert!(index < self.layout.count, "buffer index {index} out of range");
            self.pool.shared.track(index);
            let data_len = frame.len.min(room);
            // SAFETY: `index < count` (the caller's contract), and the build checked that `count ×
            // stride` bytes fit in the region, so the slot is inside the mapping.
            let at = unsafe { base.add(index as usize * stride) };
            // SAFETY: the slot starts with an aligned header, and the caller owns the buffer, so
            // nothing reads or writes it concurrently; `headroom + data_len <= buf_len`.
            unsafe { at.cast::<Header>().write(Header { data_off: headroom, data_len }) };
            bytes += u64::from(data_len);
            slot.write(Packet { cache: self, slot: at, index });
        }
        bytes
    }

    /// Drains buffer indices that other threads send back through `rx` into this cache (spilling
    /// batches to the depot when it fills); returns how many buffers it took. Out-of-range indices are
    /// ignored and counted in [`CacheStats::rejected`].
    ///
    /// This is `unsafe` because a raw [`Consumer`] can carry any `u32`: [`PacketRx::reclaim`] is the
    /// safe version for channels that only carry packets.
    ///
    /// # Safety
    ///
    /// Every index the channel delivers names a buffer of this pool whose ownership its sender gave up
    /// by sending it, and no index is sent twice without being allocated again in between (the same
    /// contract as [`PoolCache::free_burst`]).
    pub unsafe fn reclaim(&self, rx: &mut Consumer) -> usize {
        self.with_local(|l| {
            let mut taken = 0;
            loop {
                if l.stack.len() >= self.cache_size {
                    // Spill only for buffers that are really there (an exact fill ends the last
                    // burst with `n == room` whether or not more are queued).
                    if rx.is_empty() {
                        break;
                    }
                    self.spill(l, self.batch);
                }
                let start = l.stack.len();
                let room = self.cache_size - start;
                // Pop straight into the stack's free tail (within its capacity: no reallocation).
                l.stack.resize(self.cache_size, 0);
                let n = rx.pop_burst(&mut l.stack[start..]);
                let mut kept = start;
                for i in start..start + n {
                    let index = l.stack[i];
                    if index < self.layout.count {
                        self.pool.shared.track(index);
                        l.stack[kept] = index;
                        kept += 1;
                    } else {
                        l.stats.rejected += 1;
                    }
                }
                l.stack.truncate(kept);
                l.stats.frees += (kept - start) as u64;
                taken += kept - start;
                if n < room {
                    break;
                }
            }
            self.publish(l);
            taken
        })
    }

    /// Returns every free buffer this cache holds to the depot (for a thread about to go idle, so
    /// others can use them).
    pub fn flush(&self) {
        self.with_local(|l| {
            if !l.stack.is_empty() {
                self.spill(l, l.stack.len());
            }
        });
    }
}

impl Drop for PoolCache {
    fn drop(&mut self) {
        let local = self.local.get_mut();
        let mut depot = self.pool.shared.lock_depot();
        depot.free.append(&mut local.stack);
        let mirror = &self.mirror;
        depot.caches.retain(|c| !Arc::ptr_eq(c, mirror));
    }
}

/// An owned packet buffer, borrowed from the [`PoolCache`] it returns to when dropped.
///
/// The buffer is `headroom + data room` bytes; the packet's data is a window into it that starts at
/// [`Packet::headroom`] and is [`Packet::len`] bytes long. Length changes that do not fit are errors,
/// never panics. The handle is neither `Send` nor `Sync`: to move a packet to another thread, push it
/// into a [`PacketTx`] or send [`Packet::into_raw`]'s index.
///
/// ```compile_fail,E0277
/// fn is_send<T: Send>() {}
/// is_send::<netchannel::pool::Packet<'static>>();
/// ```
///
/// ```compile_fail,E0597
/// # use netchannel::pool::{HugePages, Pool};
/// let pool = Pool::builder(4).hugepages(HugePages::Never).build().unwrap();
/// let packet = {
///     let cache = pool.cache();
///     cache.alloc().unwrap() // cannot outlive its cache
/// };
/// ```
pub struct Packet<'c> {
    cache: &'c PoolCache,
    slot: NonNull<u8>,
    index: u32,
}

impl fmt::Debug for Packet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packet")
            .field("index", &self.index)
            .field("headroom", &self.headroom())
            .field("len", &self.len())
            .finish()
    }
}

/// [`Packet::window`] of a header that does not fit its buffer (written through a raw pointer):
/// the start clamped to the buffer, the length to what is left after it.
#[cold]
#[inline(never)]
fn clamp_window(data_off: u32, data_len: u32, buf_len: u32) -> (usize, usize) {
    let off = data_off.min(buf_len);
    let len = data_len.min(buf_len - off);
    (off as usize, len as usize)
}

impl Packet<'_> {
    #[inline(always)]
    fn buf_len(&self) -> usize {
        self.cache.layout.buf_len as usize
    }

    #[inline(always)]
    fn header(&self) -> Header {
        self.cache.pool.shared.track(self.index);
        // SAFETY: the slot is aligned and in the region (`PoolCache::slot`), and this handle owns the
        // buffer, so nothing writes the header concurrently.
        unsafe { self.slot.cast::<Header>().read() }
    }

    #[inline(always)]
    fn set_header(&mut self, data_off: usize, data_len: usize) {
        debug_assert!(data_off + data_len <= self.buf_len());
        // Both fit: their sum is at most `buf_len`, a `u32`.
        let header = Header {
            data_off: u32::try_from(data_off).unwrap_or(u32::MAX),
            data_len: u32::try_from(data_len).unwrap_or(0),
        };
        self.cache.pool.shared.track(self.index);
        // SAFETY: as in `header`; `&mut self` makes this the only access through this handle.
        unsafe { self.slot.cast::<Header>().write(header) };
    }

    /// The data's start and length, clamped to the buffer so that no header contents (which raw
    /// pointers into the region could have scribbled on) can make an accessor reach outside it:
    /// `off = min(data_off, buf_len)`, `len = min(data_len, buf_len - off)`.
    ///
    /// Every header the pool writes has `data_off + data_len <= buf_len`, where clamping changes
    /// nothing: that case is one add, one compare and one predicted branch, and the clamp proper is
    /// out of line. The sum is taken in `u64`, so it cannot overflow on any target.
    #[inline(always)]
    fn window(&self) -> (usize, usize) {
        let Header { data_off, data_len } = self.header();
        let buf_len = self.cache.layout.buf_len;
        if u64::from(data_off) + u64::from(data_len) <= u64::from(buf_len) {
            (data_off as usize, data_len as usize)
        } else {
            clamp_window(data_off, data_len, buf_len)
        }
    }

    #[inline(always)]
    fn buffer_ptr(&self) -> NonNull<u8> {
        // SAFETY: every slot is `HEADER_SIZE + buf_len` bytes or more, so the buffer starts inside it.
        unsafe { self.slot.add(HEADER_SIZE) }
    }

    /// The buffer's index in its pool.
    #[must_use]
    #[inline]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The [id](Pool::id) of the pool the buffer belongs to.
    #[must_use]
    #[inline]
    pub fn pool_id(&self) -> u64 {
        self.cache.pool.id()
    }

    /// Bytes of packet data.
    #[must_use]
    #[inline]
    pub fn len(&self) -> usize {
        self.window().1
    }

    /// Whether the packet holds no data.
    #[must_use]
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Free bytes in front of the data (where [`Packet::prepend`] writes).
    #[must_use]
    #[inline]
    pub fn headroom(&self) -> usize {
        self.window().0
    }

    /// Free bytes after the data (how much [`Packet::set_len`] can grow it).
    #[must_use]
    #[inline]
    pub fn tailroom(&self) -> usize {
        let (off, len) = self.window();
        self.buf_len() - off - len
    }

    /// The packet's data.
    #[must_use]
    #[inline]
    pub fn data(&self) -> &[u8] {
        let (off, len) = self.window();
        // SAFETY: `off <= buf_len`, so the pointer stays inside the buffer, which starts `HEADER_SIZE`
        // bytes into the slot (`buffer_ptr`; one offset, so one address computation).
        let start = unsafe { self.slot.add(HEADER_SIZE + off) };
        // SAFETY: `off + len <= buf_len` bytes of the buffer this handle owns; the region is mapped
        // (and its bytes initialised, zero-filled by mmap) while the cache's pool lives.
        unsafe { std::slice::from_raw_parts(start.as_ptr(), len) }
    }

    /// The packet's data, writable.
    #[must_use]
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let (off, len) = self.window();
        // SAFETY: `off <= buf_len`, so the pointer stays inside the buffer.
        let start = unsafe { self.buffer_ptr().add(off) };
        // SAFETY: as in `data`, and `&mut self` makes this the only reference into the buffer.
        unsafe { std::slice::from_raw_parts_mut(start.as_ptr(), len) }
    }

    /// The whole buffer: headroom, data and tailroom.
    #[must_use]
    #[inline]
    pub fn buffer(&self) -> &[u8] {
        self.cache.pool.shared.track(self.index);
        // SAFETY: the buffer's `buf_len` bytes, owned by this handle, in the mapped region.
        unsafe { std::slice::from_raw_parts(self.buffer_ptr().as_ptr(), self.buf_len()) }
    }

    /// The whole buffer, writable (a NIC-style driver receives into it, then calls
    /// [`Packet::set_len`]).
    #[must_use]
    #[inline]
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.cache.pool.shared.track(self.index);
        // SAFETY: as in `buffer`, and `&mut self` makes this the only reference into the buffer.
        unsafe { std::slice::from_raw_parts_mut(self.buffer_ptr().as_ptr(), self.buf_len()) }
    }

    /// The byte offset of the buffer (its first headroom byte) within the pool's [`Region`].
    #[must_use]
    #[inline]
    pub fn buffer_offset(&self) -> usize {
        self.index as usize * self.cache.layout.stride + HEADER_SIZE
    }

    /// The byte offset of the first data byte within the pool's [`Region`]: add the region's DMA
    /// address to get a descriptor's buffer address.
    #[must_use]
    #[inline]
    pub fn dma_offset(&self) -> usize {
        self.buffer_offset() + self.headroom()
    }

    /// Sets the data's length, keeping its start; new bytes hold whatever the buffer held.
    ///
    /// # Errors
    ///
    /// [`PacketError::TooLong`] when the data would run past the buffer's end.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> Result<(), PacketError> {
        let (off, _) = self.window();
        let max = self.buf_len() - off;
        if len > max {
            return Err(PacketError::TooLong { requested: len, max });
        }
        self.set_header(off, len);
        Ok(())
    }

    /// Shortens the data to `len` bytes; does nothing when it is not longer than that.
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        let (off, cur) = self.window();
        if len < cur {
            self.set_header(off, len);
        }
    }

    /// Appends `bytes` after the data.
    ///
    /// # Errors
    ///
    /// [`PacketError::TooLong`] when they do not fit; the packet is unchanged.
    #[inline]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<(), PacketError> {
        let old = self.len();
        let new = old.saturating_add(bytes.len());
        self.set_len(new)?;
        self.data_mut()[old..].copy_from_slice(bytes);
        Ok(())
    }

    /// Grows the data by `n` bytes at the front, into the headroom, and returns those bytes for the
    /// caller to fill (an encapsulation header, say).
    ///
    /// # Errors
    ///
    /// [`PacketError::NoHeadroom`] when the headroom is smaller than `n`.
    #[inline]
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8], PacketError> {
        let (off, len) = self.window();
        if n > off {
            return Err(PacketError::NoHeadroom { requested: n, available: off });
        }
        self.set_header(off - n, len + n);
        Ok(&mut self.data_mut()[..n])
    }

    /// Removes `n` bytes from the front of the data (a parsed header), growing the headroom.
    ///
    /// # Errors
    ///
    /// [`PacketError::TooShort`] when the data is shorter than `n`.
    #[inline]
    pub fn strip_front(&mut self, n: usize) -> Result<(), PacketError> {
        let (off, len) = self.window();
        if n > len {
            return Err(PacketError::TooShort { requested: n, len });
        }
        self.set_header(off + n, len - n);
        Ok(())
    }

    /// Empties the packet and restores the pool's default headroom.
    #[inline]
    pub fn reset(&mut self) {
        self.set_header(self.cache.layout.headroom as usize, 0);
    }

    /// Gives up the handle without freeing the buffer and returns its index: ownership now travels
    /// as the index (through a channel, into a NIC descriptor). The metadata stays in the buffer;
    /// [`PoolCache::packet_from_raw`] rebuilds the packet, and [`PoolCache::free_burst`] frees it.
    #[must_use = "the buffer leaks unless the index is turned back into a packet or freed"]
    #[inline]
    pub fn into_raw(self) -> u32 {
        ManuallyDrop::new(self).index
    }
}

impl Drop for Packet<'_> {
    #[inline]
    fn drop(&mut self) {
        let cache = self.cache;
        let index = self.index;
        cache.pool.shared.track(index);
        cache.with_local(|l| {
            cache.push_free(l, index);
            cache.publish(l);
        });
    }
}

/// The sending end of a channel of packets; see [`Pool::packet_channel`]. `Send`, not `Sync`.
pub struct PacketTx {
    tx: Producer,
    pool_id: u64,
}

impl fmt::Debug for PacketTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketTx").field("pool", &self.pool_id).field("channel", &self.tx).finish()
    }
}

impl PacketTx {
    /// The [id](Pool::id) of the pool whose packets this channel carries.
    #[must_use]
    #[inline]
    pub fn pool_id(&self) -> u64 {
        self.pool_id
    }

    /// Sends a burst of packets given as raw buffer indices, with one index publication and one wakeup
    /// check for the whole burst; returns how many were sent (from the front). The rest still belong to
    /// the caller, who frees or retries them.
    ///
    /// # Safety
    ///
    /// Every index names a buffer of this channel's pool ([`PacketTx::pool_id`]) that the caller owns
    /// (from [`Packet::into_raw`] or [`PoolCache::alloc_burst`]) with no [`Packet`] handle alive, and
    /// no index appears twice: the receiver rebuilds a packet from each one it pops.
    #[inline]
    pub unsafe fn push_raw_burst(&mut self, indices: &[u32]) -> usize {
        self.tx.push_burst(indices)
    }

    /// Sends `packet` (its index; the metadata travels in the buffer). The receiver now owns it.
    ///
    /// # Errors
    ///
    /// The packet comes back in [`PacketPushError::Full`] when the channel is full and in
    /// [`PacketPushError::WrongPool`] when it is not from this channel's pool.
    #[inline]
    pub fn push<'c>(&mut self, packet: Packet<'c>) -> Result<(), PacketPushError<'c>> {
        if packet.cache.pool.shared.id != self.pool_id {
            return Err(PacketPushError::WrongPool(packet));
        }
        match self.tx.push(packet.index) {
            Ok(()) => {
                // Ownership moved into the channel with the index.
                let _ = packet.into_raw();
                Ok(())
            }
            Err(_) => Err(PacketPushError::Full(packet)),
        }
    }

    /// Whether the receiving end has been dropped (packets pushed after that are lost, and
    /// [`Pool::check_leaks`] reports them missing).
    #[must_use]
    #[inline]
    pub fn is_abandoned(&self) -> bool {
        self.tx.is_abandoned()
    }

    /// Free slots right now; see [`Producer::free_space`].
    #[must_use]
    #[inline]
    pub fn free_space(&mut self) -> usize {
        self.tx.free_space()
    }

    /// The underlying channel's counters.
    #[must_use]
    pub fn stats(&self) -> channel::ChannelStats {
        self.tx.stats()
    }
}

/// The receiving end of a channel of packets; see [`Pool::packet_channel`]. `Send`, not `Sync`.
///
/// Dropping it returns the packets still queued to the depot.
pub struct PacketRx {
    rx: Consumer,
    pool: Pool,
}

impl fmt::Debug for PacketRx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketRx").field("pool", &self.pool.id()).field("channel", &self.rx).finish()
    }
}

impl PacketRx {
    /// Receives a packet, owned by `cache` from now on (it returns there when dropped). `None` when
    /// the channel is empty, or when `cache` belongs to another pool than the channel.
    #[must_use = "a popped packet that is dropped at once is freed unread"]
    #[inline]
    pub fn pop<'c>(&mut self, cache: &'c PoolCache) -> Option<Packet<'c>> {
        if cache.pool.shared.id != self.pool.shared.id {
            return None;
        }
        let index = self.rx.pop()?;
        // SAFETY: only `PacketTx::push` feeds this channel, with indices of live packets of this pool
        // (checked) whose handles it gave up; popping transfers that ownership to us.
        Some(unsafe { cache.packet_from_raw(index) })
    }

    /// Frees every queued packet into `cache` without building packet handles (a return path: other
    /// threads send buffers back, the allocating thread reclaims them); returns how many. Returns 0
    /// when `cache` belongs to another pool than the channel.
    pub fn reclaim(&mut self, cache: &PoolCache) -> usize {
        if cache.pool.shared.id != self.pool.shared.id {
            return 0;
        }
        // SAFETY: as in `pop`: every index in the channel is an owned buffer of this pool.
        unsafe { cache.reclaim(&mut self.rx) }
    }

    /// Blocks until a packet is ready, the sender is gone and the channel drained, or `timeout`
    /// passes; see [`Consumer::wait`].
    #[inline]
    pub fn wait(&mut self, timeout: Option<Duration>) -> Wait {
        self.rx.wait(timeout)
    }

    /// Whether the sending end has been dropped (packets it pushed may still be queued).
    #[must_use]
    #[inline]
    pub fn is_abandoned(&self) -> bool {
        self.rx.is_abandoned()
    }

    /// Packets ready right now; see [`Consumer::len`].
    #[must_use]
    #[inline]
    pub fn len(&mut self) -> usize {
        self.rx.len()
    }

    /// Whether no packet is ready right now.
    #[must_use]
    #[inline]
    pub fn is_empty(&mut self) -> bool {
        self.rx.is_empty()
    }

    /// The underlying channel's counters.
    #[must_use]
    pub fn stats(&self) -> channel::ChannelStats {
        self.rx.stats()
    }
}

impl Drop for PacketRx {
    fn drop(&mut self) {
        let shared = &*self.pool.shared;
        let mut buf = [0u32; 64];
        let mut depot = shared.lock_depot();
        loop {
            let n = self.rx.pop_burst(&mut buf);
            if n == 0 {
                break;
            }
            for &index in &buf[..n] {
                shared.track(index);
            }
            depot.free.extend_from_slice(&buf[..n]);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn pool(buffers: u32, batch: usize, cache_size: usize) -> Pool {
        Pool::builder(buffers)
            .hugepages(HugePages::Never)
            .batch(batch)
            .cache_size(cache_size)
            .build()
            .unwrap()
    }

    #[test]
    fn handles_have_the_documented_auto_traits() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Pool>();
        send::<PoolCache>();
        send::<PacketTx>();
        send::<PacketRx>();
    }

    #[test]
    fn bad_configurations_are_errors() {
        let never = |b: Builder| b.hugepages(HugePages::Never).build();
        assert!(matches!(never(Pool::builder(0)), Err(PoolError::ZeroBuffers)));
        assert!(matches!(never(Pool::builder(4).data_room(0)), Err(PoolError::ZeroDataRoom)));
        assert!(matches!(never(Pool::builder(4).batch(0)), Err(PoolError::ZeroBatch)));
        assert!(matches!(
            never(Pool::builder(4).batch(8).cache_size(4)),
            Err(PoolError::CacheSmallerThanBatch { cache_size: 4, batch: 8 })
        ));
        assert!(matches!(never(Pool::builder(4).data_room(usize::MAX)), Err(PoolError::SlotTooLarge { .. })));
        assert!(matches!(
            never(Pool::builder(4).headroom(usize::MAX - 10)),
            Err(PoolError::SlotTooLarge { .. })
        ));
        // The largest slot whose stride fits u32 offsets, and one byte more.
        let largest = u32::MAX as usize + 1 - SLOT_ALIGN - HEADER_SIZE;
        let (layout, ..) = Pool::builder(1).headroom(0).data_room(largest).validate().unwrap();
        assert_eq!(layout.stride, u32::MAX as usize + 1 - SLOT_ALIGN);
        assert!(matches!(
            Pool::builder(1).headroom(0).data_room(largest + 1).validate(),
            Err(PoolError::SlotTooLarge { .. })
        ));
        assert!(matches!(
            Pool::builder(1).headroom(1).data_room(largest).validate(),
            Err(PoolError::SlotTooLarge { .. })
        ));
        // Regions past `isize::MAX` bytes: 2^32 - 1 slots of 2^31 + 64 bytes, and of ~4 GiB.
        assert!(matches!(
            Pool::builder(u32::MAX).headroom(0).data_room(1 << 31).validate(),
            Err(PoolError::RegionTooLarge { buffers: u32::MAX, stride: 0x8000_0040 })
        ));
        assert!(matches!(
            Pool::builder(u32::MAX).headroom(0).data_room(largest).validate(),
            Err(PoolError::RegionTooLarge { .. })
        ));
        let (layout, _, len, batch, cache) = Pool::builder(1 << 20).validate().unwrap();
        assert_eq!((layout.stride, len, batch, cache), (2240, 2240 << 20, 64, 128));
        let e = never(Pool::builder(0)).unwrap_err();
        assert_eq!(e.to_string(), "a buffer pool needs at least one buffer");
    }

    #[test]
    fn slot_layout_matches_the_documentation() {
        let pool = Pool::builder(3).hugepages(HugePages::Never).build().unwrap();
        assert_eq!(pool.stride(), 2240);
        assert_eq!(pool.stride() % SLOT_ALIGN, 0);
        assert_eq!((pool.headroom(), pool.data_room(), pool.buffer_len()), (128, 2048, 2176));
        assert_eq!(pool.buffer_offset(0), Some(64));
        assert_eq!(pool.buffer_offset(2), Some(2 * 2240 + 64));
        assert_eq!(pool.buffer_offset(3), None);
        let region = pool.region();
        assert!(!region.is_hugepage());
        assert!(!region.is_empty());
        assert!(region.len() >= 3 * 2240);
        assert_eq!(region.len() % region.page_size(), 0);
        assert_eq!(region.as_ptr() as usize % region.page_size(), 0);

        // Odd sizes still give 64-byte strides.
        let odd = Pool::builder(2).hugepages(HugePages::Never).headroom(3).data_room(5).build().unwrap();
        assert_eq!(odd.stride(), 128);
        assert_eq!(odd.buffer_len(), 8);
    }

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

    #[test]
    fn scribbled_headers_are_clamped_to_the_buffer() {
        let pool = pool(4, 1, 2);
        let cache = pool.cache();
        let buf_len = pool.buffer_len();
        let bad = [
            (u32::MAX, u32::MAX),
            (0, u32::MAX),
            (u32::MAX, 0),
            (2000, 2000),
            (0, u32::try_from(buf_len).unwrap() + 1),
            (u32::try_from(buf_len).unwrap(), 1),
            (u32::try_from(buf_len).unwrap() - 1, 2),
        ];
        for (off, len) in bad {
            let p = cache.alloc().unwrap();
            let header =
                pool.region().as_ptr().wrapping_add(p.index() as usize * pool.stride()).cast::<Header>();
            // SAFETY: the header of a buffer we own, at the start of its slot inside the region (what a
            // raw-pointer user such as a NIC could scribble on).
            unsafe { header.write(Header { data_off: off, data_len: len }) };
            let (start, n) = (p.headroom(), p.len());
            assert!(start <= buf_len && start + n <= buf_len, "({off}, {len}) -> ({start}, {n})");
            assert_eq!(p.data().len(), n);
            let end = p.buffer().as_ptr() as usize + buf_len;
            assert!(p.data().as_ptr() as usize + n <= end);
        }
    }

    #[test]
    fn packet_accessors_stay_inside_the_buffer() {
        let pool = pool(4, 1, 2);
        let cache = pool.cache();
        let mut p = cache.alloc().unwrap();
        assert_eq!((p.index(), p.len(), p.headroom(), p.tailroom()), (0, 0, 128, 2048));
        assert!(p.is_empty());
        assert_eq!(p.buffer_offset(), 64);
        assert_eq!(p.dma_offset(), 64 + 128);

        p.extend_from_slice(b"hello").unwrap();
        assert_eq!(p.data(), b"hello");
        assert_eq!(p.set_len(2049), Err(PacketError::TooLong { requested: 2049, max: 2048 }));
        assert_eq!(p.len(), 5);
        p.set_len(2048).unwrap();
        assert_eq!(p.tailroom(), 0);
        assert_eq!(p.extend_from_slice(b"x"), Err(PacketError::TooLong { requested: 2049, max: 2048 }));
        p.truncate(4);
        assert_eq!(p.data(), b"hell");
        p.truncate(100);
        assert_eq!(p.len(), 4);

        p.prepend(2).unwrap().copy_from_slice(b"<<");
        assert_eq!(p.data(), b"<<hell");
        assert_eq!((p.headroom(), p.dma_offset()), (126, 64 + 126));
        assert_eq!(p.prepend(127), Err(PacketError::NoHeadroom { requested: 127, available: 126 }));
        p.strip_front(3).unwrap();
        assert_eq!(p.data(), b"ell");
        assert_eq!(p.strip_front(4), Err(PacketError::TooShort { requested: 4, len: 3 }));
        // Past the data room a prepend still fits the headroom, and set_len counts from the data start.
        assert_eq!(p.headroom(), 129);
        assert_eq!(p.set_len(2048), Err(PacketError::TooLong { requested: 2048, max: 2047 }));

        // Scribbling over the whole buffer leaves the header (outside it) intact.
        p.buffer_mut().fill(0xAB);
        assert_eq!(p.buffer().len(), 2176);
        assert_eq!((p.headroom(), p.len()), (129, 3));
        assert_eq!(p.data(), &[0xAB; 3]);
        p.reset();
        assert_eq!((p.headroom(), p.len()), (128, 0));
    }

    #[test]
    fn metadata_travels_in_the_buffer() {
        let pool = pool(8, 2, 4);
        let a = pool.cache();
        let b = pool.cache();
        let mut p = a.alloc().unwrap();
        p.extend_from_slice(b"payload").unwrap();
        p.prepend(4).unwrap().copy_from_slice(b"head");
        let index = p.into_raw();
        // SAFETY: `index` came from `into_raw` above and nothing else holds it.
        let q = unsafe { b.packet_from_raw(index) };
        assert_eq!(q.data(), b"headpayload");
        assert_eq!(q.headroom(), 124);
        drop(q);
        assert_eq!(b.len(), 1, "freed into the cache that dropped it");
        assert_eq!(b.stats().frees, 1);
        assert_eq!(a.stats().allocs, 1);
    }

    #[test]
    fn metadata_of_adjacent_buffers_is_on_separate_lines() {
        let pool = pool(4, 4, 4);
        let cache = pool.cache();
        let p = cache.alloc().unwrap();
        let q = cache.alloc().unwrap();
        let line = |pkt: &Packet<'_>| (pkt.slot.as_ptr() as usize) / 64;
        assert_ne!(line(&p), line(&q));
        assert_eq!(p.slot.as_ptr() as usize % 64, 0);
        assert_eq!(q.slot.as_ptr() as usize % 64, 0);
    }

    #[test]
    fn exhaustion_refill_and_spill() {
        let pool = pool(10, 2, 4);
        let a = pool.cache();
        let mut held = Vec::new();
        while let Some(p) = a.alloc() {
            held.push(p);
        }
        assert_eq!(held.len(), 10);
        let mut seen: Vec<u32> = held.iter().map(Packet::index).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(a.stats().alloc_failures, 1);
        assert_eq!(a.stats().refills, 6, "5 refills of 2, then 1 empty one");
        assert_eq!(pool.audit(), Audit { total: 10, outstanding: 10, live_caches: 1, ..Audit::default() });

        drop(held);
        // Frees 1..=4 fill the cache, each later one spills the 2 coldest first.
        assert_eq!(a.len(), 4);
        assert_eq!(a.stats().spills, 3);
        assert_eq!(
            pool.audit(),
            Audit { total: 10, in_depot: 6, in_caches: 4, outstanding: 0, live_caches: 1 }
        );
        a.flush();
        assert_eq!(pool.audit().in_depot, 10);
        drop(a);
        assert_eq!(pool.audit(), Audit { total: 10, in_depot: 10, ..Audit::default() });
        pool.check_leaks().unwrap();
    }

    #[test]
    fn bursts_of_raw_indices() {
        let pool = pool(16, 4, 8);
        let cache = pool.cache();
        let mut idx = [0u32; 20];
        assert_eq!(cache.alloc_burst(&mut idx), 16);
        let mut sorted = idx[..16].to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..16).collect::<Vec<_>>());
        assert_eq!(cache.alloc_burst(&mut idx[16..]), 0);
        // Headers were reset: a rebuilt packet is empty at the default headroom.
        // SAFETY: idx[3] came from `alloc_burst` and is owned here; the handle goes back into raw form.
        let p = unsafe { cache.packet_from_raw(idx[3]) };
        assert_eq!((p.len(), p.headroom()), (0, 128));
        let _ = p.into_raw();
        // SAFETY: these 16 indices are owned here (alloc_burst above) and listed once each; 999 and
        // u32::MAX are out of range and must be rejected.
        unsafe { cache.free_burst(&[999, u32::MAX]) };
        // SAFETY: as above.
        unsafe { cache.free_burst(&idx[..16]) };
        assert_eq!(cache.stats().rejected, 2);
        assert_eq!(cache.stats().frees, 16);
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn check_leaks_counts_missing_and_duplicated() {
        let pool = pool(8, 2, 4);
        let cache = pool.cache();
        assert_eq!(pool.check_leaks(), Err(LeakError::LiveCaches(1)));
        let leaked = cache.alloc().unwrap().into_raw();
        let twice = cache.alloc().unwrap().into_raw();
        // SAFETY: a deliberate contract violation to exercise the detector: `twice` is freed twice but
        // never allocated again, so no two packets ever alias it.
        unsafe { cache.free_burst(&[twice, twice]) };
        drop(cache);
        let err = pool.check_leaks().unwrap_err();
        assert_eq!(
            err,
            LeakError::Leaked {
                total: 8,
                missing: 1,
                duplicated: 1,
                first_missing: Some(leaked),
                first_duplicated: Some(twice),
            }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "1 of 8 buffers missing, 1 freed twice; first missing: {leaked}; first freed twice: {twice}"
            )
        );
    }

    #[test]
    fn packet_channel_moves_packets_and_hands_them_back() {
        let pool = pool(8, 2, 4);
        let other = pool_for_other();
        let (mut tx, mut rx) = pool.packet_channel(2).unwrap();
        let a = pool.cache();
        let b = pool.cache();
        let foreign_cache = other.cache();

        let foreign = foreign_cache.alloc().unwrap();
        let foreign = match tx.push(foreign) {
            Err(PacketPushError::WrongPool(p)) => p,
            r => panic!("foreign packet accepted: {r:?}"),
        };
        drop(foreign);

        for byte in 1..=2u8 {
            let mut p = a.alloc().unwrap();
            p.extend_from_slice(&[byte; 3]).unwrap();
            tx.push(p).unwrap();
        }
        let third = a.alloc().unwrap();
        let index = third.index();
        let back = tx.push(third).unwrap_err();
        assert!(matches!(back, PacketPushError::Full(_)));
        assert!(back.to_string().contains("full"));
        assert_eq!(back.into_inner().index(), index);

        assert!(rx.pop(&foreign_cache).is_none(), "a cache of another pool gets nothing");
        let p = rx.pop(&b).unwrap();
        assert_eq!(p.data(), &[1; 3]);
        drop(p);
        assert_eq!(b.len(), 1);
        assert_eq!(rx.reclaim(&b), 1);
        assert_eq!(b.len(), 2);
        assert_eq!(rx.reclaim(&foreign_cache), 0);
        assert!(rx.pop(&b).is_none());
        drop((a, b, foreign_cache));
        pool.check_leaks().unwrap();
        other.check_leaks().unwrap();
    }

    fn pool_for_other() -> Pool {
        pool(4, 1, 2)
    }

    #[test]
    fn dropping_the_receiver_returns_queued_packets() {
        let pool = pool(8, 2, 4);
        let (mut tx, rx) = pool.packet_channel(8).unwrap();
        let cache = pool.cache();
        for _ in 0..5 {
            tx.push(cache.alloc().unwrap()).unwrap();
        }
        assert_eq!(pool.audit().outstanding, 5);
        drop(rx);
        assert!(tx.is_abandoned());
        assert_eq!(pool.audit().outstanding, 0);
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn reclaim_drains_a_raw_return_channel_and_spills() {
        let pool = pool(32, 4, 8);
        let (mut tx, mut rx) = Channel::with_capacity(64);
        let a = pool.cache();
        let b = pool.cache();
        let mut idx = [0u32; 20];
        assert_eq!(b.alloc_burst(&mut idx), 20);
        assert_eq!(tx.push_burst(&idx), 20);
        tx.push(12345).unwrap();
        // SAFETY: the channel carries the 20 indices `b` allocated and gave up, each once, plus one
        // out-of-range index that must be rejected.
        let taken = unsafe { a.reclaim(&mut rx) };
        assert_eq!(taken, 20);
        assert_eq!(a.stats().rejected, 1);
        assert!(a.len() <= 8);
        assert_eq!(pool.audit().in_depot + a.len() + b.len(), 32);
        assert!(a.stats().spills >= 3);
        drop((a, b));
        pool.check_leaks().unwrap();
    }

    #[test]
    fn small_pools_clamp_batch_and_cache() {
        let pool = Pool::builder(3).hugepages(HugePages::Never).build().unwrap();
        assert_eq!((pool.batch(), pool.cache_size()), (3, 3));
        let c = pool.cache();
        let all: Vec<_> = std::iter::from_fn(|| c.alloc()).collect();
        assert_eq!(all.len(), 3);
        drop(all);
        assert_eq!(c.len(), 3);
    }
}
