//! The packet buffer pool: fixed-size buffers in one contiguous (hugepage) region, named by `u32`
//! indices, allocated and freed through per-core caches without locks or atomic read-modify-writes.
//!
//! Sources: the per-CPU cache in front of a shared depot is Bonwick's magazine layer (Bonwick & Adams,
//! "Magazines and Vmem", USENIX 2001) as DPDK's `rte_mempool` implements it for packet buffers
//! (per-lcore cache, bulk refill and flush); the in-buffer metadata and headroom follow DPDK's
//! `rte_mbuf`. Van Jacobson's net channels need exactly this shape: a packet crosses cores
//! as a `u32` in a [`channel`](crate::channel), and is freed on the core that consumed it.
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
//! native-endian `u32`s; then 8 bytes of [`Offload`] metadata; then, read only by [shared
//! buffers](#shared-buffers), a 4-byte state word and the shared data's offset and length (8
//! bytes); the other 36 bytes are reserved. Metadata lives *in* the buffer, not in a side
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
//! # Shared buffers
//!
//! The zero-copy send of Sandstorm (Marinos, Watson and Handley, "Network stack specialization for
//! performance", SIGCOMM 2014): content that is sent again and again (a web server's pre-segmented
//! responses) is put into packet buffers once, and each send hands those buffers to the device with
//! only the per-connection headers written. [`Packet::into_shared`] turns a packet into a
//! [`SharedPacket`]: its data becomes read-only, `Clone` adds a reference, and the handle is
//! `Send + Sync`, so every core can hold the prepared content. [`SharedPacket::frame`] makes a
//! [`Packet`] for a device's `tx_burst` whose data is the headers, written into the headroom in front
//! of the shared data, followed by the shared data. The headroom holds one frame's headers, so one
//! frame of a buffer is in flight at a time: `frame` refuses a second one with
//! [`FrameError::InFlight`] and never waits (the caller copies the data into a fresh buffer for that
//! send; [`CacheStats::frames`] and [`CacheStats::frames_refused`] count both outcomes). The buffer returns to the pool when its last reference goes: the last handle dropped (into
//! the depot) or the last frame released (into the cache that releases it), whichever comes last, on
//! whatever thread. [`SharedPacket::try_into_packet`] takes a buffer with no other reference back
//! for writing. [`Pool::audit`] counts the buffers shared, and a leaked one is missing in
//! [`Pool::check_leaks`].
//!
//! **The state word.** One `AtomicU32` in the buffer's header: bit 0 is set while a frame is in
//! flight, the rest count references (handles, and the frame in flight). It is in the header, not a
//! side array, because a driver frees a frame by index alone.
//!
//! **How frames come back.** A frame's [`index`](Packet::index) is the buffer's with [`FRAME_TAG`]
//! (bit 31) set; pools hold at most [`MAX_BUFFERS`] (2^31 - 1) buffers, so no plain index has it. A
//! DMA driver puts that index in its ring as usual and hands it back to [`PoolCache::free_burst`] on
//! TX completion (the 82599 driver does, unchanged): the tagged index fails `free_burst`'s range check
//! and lands in its existing per-index loop, which releases the frame's reference. A frame dropped as
//! a packet (a TAP device drops it once written) borrows its cache's *frames cache*, a cache of size
//! zero, so its drop always takes the existing "cache full" branch, which releases the reference.
//! [`PoolCache::reclaim`] releases tokens sent back through a channel, and
//! [`PoolCache::frame_from_raw`] rebuilds a frame from its token. Packet channels carry frames as
//! their tokens and rebuild them as frames (a core's stack sends through one to the thread that owns
//! the device). A device that recomputes the index from a DMA address on completion (AF_XDP's
//! completion ring) loses the tag and would keep the reference forever: such a device must keep the
//! token, or copy the frame (AF_XDP does, and counts it).
//!
//! **What a frame may write.** Only the bytes in front of the shared data: on a frame,
//! [`Packet::data_mut`] covers the data's bytes in front of it (the headers) and
//! [`Packet::buffer_mut`] the headroom; [`Packet::extend_from_slice`] and a [`Packet::prepend`] once
//! the data starts inside the shared data are [`PacketError::SharedPayload`]. Safe code therefore
//! cannot write the shared data while other handles read it. A device (the `unsafe` side) must only
//! read a frame's buffer, never receive into it, and free each token once.
//!
//! **Cost for plain packets.** Nothing on allocation, drop, `free_burst` or receive (the frames cache
//! and the range check above are the branches those paths already take); the four writers above test
//! the tag (one compare and branch). `ICOUNT_BENCHES="icount_driver icount_channel" scripts/icount.sh
//! check` shows it, and `benches/icount_pool.rs` counts a send by reference against a send by copy.
//!
//! **Ordering.** (1) *The last reference frees once, after every read.* Dropping a handle
//! decrements the word with Release; releasing a frame clears the bit and its reference in one
//! Release read-modify-write. Whoever takes the count to zero, and only they (the decrements are
//! atomic), then loads the word with Acquire: it reads that last decrement, and every
//! read-modify-write of the word continues the release sequence of every earlier one, so the load
//! synchronises with all of them, and every other holder's reads of the data (and a device's reads
//! of a frame) happen before the buffer is freed and reused. This is `Arc`'s argument, with an
//! Acquire load where `Arc` has a fence (the same edge; ThreadSanitizer models loads, not fences,
//! as `Arc` itself does under it). (2) *One frame at a time, after the last one's device reads.*
//! `frame` takes the bit with a compare-exchange (Acquire) that fails while it is set; the release
//! above clears it (Release) only once the device is done with the frame. So the previous device's
//! reads of the headroom happen before the next frame's header writes. The device reads a frame's
//! headers after the sending core wrote them through the device's own publication (a channel's
//! Release/Acquire, or the 82599 driver's Release fence before its tail write). (3) *Clones are
//! Relaxed*: a reference is made from a live one, so the count cannot reach zero meanwhile, and the
//! handle reaches another core only through something that synchronises, which also publishes the
//! data written before [`Packet::into_shared`]. (4) *Taking the buffer back*
//! ([`SharedPacket::try_into_packet`]) is a compare-exchange from one reference to none with
//! Acquire, pairing with the others' Release decrements like (1). loom checks (1) and (2) in
//! `tests/loom_shared.rs` (each model fails with its Acquire, its Release or its in-flight check
//! removed); `tests/shared_stress.rs` runs cores sharing and dropping buffers under
//! ThreadSanitizer.
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

mod cache;
mod channel;
mod error;
mod offload;
mod packet;
mod region;
mod shared;

use std::fmt;
use std::sync::PoisonError;

use crossbeam_utils::CachePadded;

use crate::channel::Channel;
use crate::sync::{Arc, AtomicU32, AtomicUsize, Mutex, MutexGuard, Ordering};

pub use cache::{CacheStats, PoolCache};
use cache::{Depot, Local};
pub use channel::{PacketPushError, PacketRx, PacketTx};
pub use error::{FrameError, LeakError, PacketError, PoolError};
pub use offload::{GsoKind, Offload};
pub use packet::{Packet, RxFrame};
pub use region::FRAME_TAG;
use region::Layout;
pub use region::{HUGE_PAGE_SIZE, HugePages, Region};
pub use shared::SharedPacket;

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

/// The most buffers a pool holds: indices stay below [`FRAME_TAG`], the bit that marks a frame of a
/// shared buffer, and one less, so that no index, tagged or not, is `u32::MAX`, which a net channel
/// reserves ([`channel::EMPTY`](crate::channel::EMPTY)).
pub const MAX_BUFFERS: u32 = FRAME_TAG - 1;

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
    /// Buffers shared by reference right now ([`SharedPacket`]; counted in `outstanding` too).
    pub shared: usize,
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
    /// Buffers shared right now, for [`Pool::audit`].
    shared_live: AtomicUsize,
    id: u64,
    layout: Layout,
    data_room: u32,
    batch: usize,
    cache_size: usize,
    depot: Mutex<Depot>,
    region: Region,
    #[cfg(loom)]
    tracks: Tracks,
    /// Under loom, one more tracked cell per buffer for the headroom a frame of a shared buffer
    /// writes (its other bytes are read by every handle at once).
    #[cfg(loom)]
    frame_tracks: Tracks,
    /// Under loom, the shared buffers' state words (loom's atomics cannot live in the region).
    #[cfg(loom)]
    states: Box<[AtomicU32]>,
}

impl Shared {
    fn lock_depot(&self) -> MutexGuard<'_, Depot> {
        // A panic while holding the lock cannot leave the depot inconsistent (every critical section
        // is a single Vec operation that does not panic), so poisoning is ignored.
        self.depot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records an access to buffer `index`'s memory for the model checker (for a frame's index,
    /// with [`FRAME_TAG`], to its headroom); nothing outside loom.
    #[inline(always)]
    fn track(&self, index: u32) {
        #[cfg(loom)]
        {
            let tracks = if index & FRAME_TAG == 0 { &self.tracks } else { &self.frame_tracks };
            if let Some(cell) = tracks.0.get((index & !FRAME_TAG) as usize) {
                cell.with_mut(|_| ());
            }
        }
        #[cfg(not(loom))]
        let _ = index;
    }

    /// Records a read of shared buffer `index`'s data for the model checker (any number of handles
    /// read at once); nothing outside loom.
    #[inline(always)]
    fn track_read(&self, index: u32) {
        #[cfg(loom)]
        if let Some(cell) = self.tracks.0.get(index as usize) {
            cell.with(|_| ());
        }
        #[cfg(not(loom))]
        let _ = index;
    }

    /// The state word of shared buffer `index` (`shared.rs`): in the buffer's header, or under loom
    /// in a side array.
    #[inline(always)]
    fn state(&self, index: u32) -> &AtomicU32 {
        debug_assert!(index < self.layout.count, "buffer index {index} out of range");
        #[cfg(loom)]
        return &self.states[index as usize];
        #[cfg(not(loom))]
        {
            let at = index as usize * self.layout.stride + region::SHARED_STATE_OFFSET;
            // SAFETY: `index < count` (every caller holds a reference to the buffer or checked), so
            // the word lies in the slot's header inside the mapping, 4-byte aligned (slots are
            // 64-byte aligned, the offset a multiple of 4). Only atomics access these bytes: the
            // header writes of fresh buffers stop before them.
            let word = self.region.base.as_ptr().wrapping_add(at).cast::<AtomicU32>();
            // SAFETY: as above: in the mapping, aligned, accessed only atomically while the pool lives.
            unsafe { &*word }
        }
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
    populate: bool,
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

    /// Whether every page of normal (not huge) pages is made resident when the pool is built
    /// (`true`, the default: a NIC may DMA into any buffer at once). `false` leaves pages to be
    /// touched as buffers are first used: for a pool only the CPU and the kernel's copies touch
    /// (a TAP's), whose large buffers (64 KiB for offloads) would otherwise make the whole pool
    /// resident although a few of them are in use at a time. Hugepages are always populated.
    #[inline]
    pub fn populate(mut self, populate: bool) -> Self {
        self.populate = populate;
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
        if self.buffers > MAX_BUFFERS {
            return Err(PoolError::TooManyBuffers { buffers: self.buffers });
        }
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
        let region = Region::map(len, self.hugepages, self.populate)?;
        let mut free = Vec::new();
        free.try_reserve_exact(self.buffers as usize).map_err(|_| PoolError::OutOfMemory)?;
        // Reversed, so the first allocations hand out 0, 1, 2, ...: adjacent, prefetch-friendly slots.
        free.extend((0..self.buffers).rev());

        let shared = Shared {
            shared_live: AtomicUsize::new(0),
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
            #[cfg(loom)]
            frame_tracks: Tracks((0..self.buffers).map(|_| crate::sync::UnsafeCell::new(())).collect()),
            #[cfg(loom)]
            states: (0..self.buffers).map(|_| AtomicU32::new(0)).collect(),
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
            populate: true,
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
        self.new_cache(self.shared.cache_size)
    }

    /// A fresh cache that holds up to `cache_size` free buffers (zero: the cache that frames of
    /// shared buffers borrow, `PoolCache::frames`).
    fn new_cache(&self, cache_size: usize) -> PoolCache {
        let shared = &*self.shared;
        let mirror = Arc::new(CachePadded::new(AtomicUsize::new(0)));
        shared.lock_depot().caches.push(Arc::clone(&mirror));
        PoolCache {
            local: std::cell::UnsafeCell::new(Local {
                // At least one: a push after a spill never reallocates.
                stack: Vec::with_capacity(cache_size.max(1)),
                stats: CacheStats::default(),
            }),
            base: shared.region.base,
            layout: shared.layout,
            batch: shared.batch,
            cache_size,
            mirror,
            frames: std::cell::OnceCell::new(),
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
            // Relaxed: a count, as above.
            shared: self.shared.shared_live.load(Ordering::Relaxed),
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
    /// As [`channel::Builder::build`](crate::channel::Builder::build).
    pub fn packet_channel(
        &self,
        capacity: usize,
    ) -> Result<(PacketTx, PacketRx), crate::channel::BuildError> {
        self.packet_channel_with(Channel::builder(capacity))
    }

    /// A net channel of packets of this pool, configured by `builder` (capacity, wake mode).
    ///
    /// # Errors
    ///
    /// As [`channel::Builder::build`](crate::channel::Builder::build).
    pub fn packet_channel_with(
        &self,
        builder: crate::channel::Builder,
    ) -> Result<(PacketTx, PacketRx), crate::channel::BuildError> {
        let (tx, rx) = builder.build()?;
        Ok((PacketTx { tx, pool_id: self.shared.id }, PacketRx { rx, pool: self.clone() }))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    pub(super) fn pool(buffers: u32, batch: usize, cache_size: usize) -> Pool {
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
        // Indices stay below the frame tag, and a tagged one below `u32::MAX`: 2^31 - 1 buffers of
        // 128 bytes fit the address space, one more does not fit the indices.
        assert!(Pool::builder(MAX_BUFFERS).headroom(0).data_room(1).validate().is_ok());
        assert_eq!((MAX_BUFFERS - 1) | FRAME_TAG, crate::channel::EMPTY - 1, "the largest token is sendable");
        let e = Pool::builder(MAX_BUFFERS + 1).headroom(0).data_room(1).validate().unwrap_err();
        assert!(matches!(e, PoolError::TooManyBuffers { buffers: 0x8000_0000 }));
        assert!(e.to_string().contains("use several pools"), "{e}");
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
