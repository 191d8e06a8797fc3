//! The device side of the data path: the [`NetDevice`] trait that every backend implements (the 82599
//! driver and its model, TAP, the in-memory pair and later AF_XDP), and the
//! [`PacketBatch`] that bursts of packets travel in.
//!
//! A device moves packets in bursts and never allocates per packet: receive fills a caller's
//! [`PacketBatch`] with packets whose buffers come from the caller's [`PoolCache`]; transmit takes
//! packets from the front of a batch and frees (or, for DMA devices, later recycles) their buffers.
//!
//! A device that already holds its frames as buffer indices (the [`Pair`], the 82599 driver) can also
//! hand a burst over as indices ([`NetDevice::rx_burst_raw`] into a [`RawBatch`]): the channelizer
//! reads each frame from its buffer's header and never builds a [`Packet`] for it. A driver writes its
//! receive loop once over an [`RxSink`] and gets both paths.
//!
//! One `NetDevice` value is driven by one thread. A device with several queues that are served by
//! several cores hands each core its own value (the 82599 driver splits into per-queue devices); the
//! `queue` parameter addresses the queues a value owns, `0..info().queues`.
//!
//! # Software devices and middlewares
//!
//! * [`Pair`]: two in-memory ends joined by a zero-copy wire (net channels of buffer indices), the
//!   link of deterministic tests.
//! * [`Tap`]: a Linux TAP interface, so the kernel's own stack can be the peer; optionally with
//!   checksum and TCP segmentation offload both ways ([`TapOptions::offloads`]), the one device whose
//!   [`DeviceInfo::offloads`] is not [`DeviceOffloads::NONE`].
//! * [`PcapWriter`]: wraps any device and records every frame it receives and transmits in a pcap
//!   file.
//! * [`FaultInjector`]: wraps any device and drops, duplicates, reorders, corrupts, delays and
//!   rate-limits frames, reproducibly from a seed.

use std::fmt;
use std::time::Duration;

#[cfg(not(loom))]
use rustix::event::{PollFd, PollFlags};

pub use crate::pool::RxFrame;
use crate::pool::{FRAME_TAG, Packet, Pool, PoolCache};

#[cfg(not(loom))]
pub mod fault;
#[cfg(not(loom))]
pub mod pair;
#[cfg(not(loom))]
pub mod pcap;
mod raw;
#[cfg(not(loom))]
pub mod tap;
#[cfg(not(loom))]
pub mod xdp;

#[cfg(not(loom))]
pub use fault::{
    Clock, DirectionConfig, DirectionStats, FaultConfig, FaultInjector, FaultStats, RateLimit, StdClock,
    VirtualClock,
};
#[cfg(not(loom))]
pub use pair::{DEFAULT_WIRE_CAPACITY, Pair, PairBuilder};
#[cfg(not(loom))]
pub use pcap::{PcapStats, PcapWriter};
pub use raw::{RawBatch, RawReceived, RxSink};
#[cfg(not(loom))]
pub use tap::{OFFLOAD_DATA_ROOM, Tap, TapError, TapOptions, TapStats};
#[cfg(not(loom))]
pub use xdp::{AfXdp, AfXdpBuilder, XdpError, XdpMode, XdpQueue, XdpStats, ZeroCopy, rx_queues};

/// Whether `packet`'s buffer lives in `pool`'s region.
///
/// Exact, and safe to ask about a packet of any pool: a packet keeps its own pool alive, `pool` is
/// alive, and two live pools are two disjoint mappings, so the packet's buffer sits at
/// `region + buffer_offset` of `pool` only if that *is* its pool. (`Packet` does not expose its pool;
/// this is how devices check that the packets they are handed can be rebuilt from their own pool.)
#[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
pub(crate) fn packet_in_pool(packet: &Packet<'_>, pool: &Pool) -> bool {
    packet.pool_id() == pool.id()
}

/// Rebuilds the packet a device holds as a raw token of `cache`'s pool, of `buffers` buffers: a
/// plain buffer index ([`PoolCache::packet_from_raw`]), or a frame of a shared buffer (the index
/// with [`FRAME_TAG`], [`PoolCache::frame_from_raw`]); `None` for a token out of the pool.
///
/// # Safety
///
/// `token` came from [`Packet::into_raw`] of a packet of `cache`'s pool and the caller owns it (no
/// other packet for it exists).
#[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
#[inline]
pub(crate) unsafe fn packet_from_token(cache: &PoolCache, buffers: u32, token: u32) -> Option<Packet<'_>> {
    if token < buffers {
        // SAFETY: the caller's contract, and the index is in range.
        Some(unsafe { cache.packet_from_raw(token) })
    } else if token & FRAME_TAG != 0 && token & !FRAME_TAG < buffers {
        // SAFETY: the caller's contract: a frame's token (it carries `FRAME_TAG`), index in range.
        Some(unsafe { cache.frame_from_raw(token) })
    } else {
        None
    }
}

/// Waits until `fd` is readable or `timeout` passes (`None`: no limit), to the nanosecond
/// (`ppoll(2)`, not `poll(2)`'s whole milliseconds: a paced connection's next departure is often
/// a fraction of a millisecond ahead, and a wait rounded up to one would cap its rate at a
/// packet a millisecond). Returns the events reported, empty when the timeout passed or a
/// signal interrupted the wait (`EINTR` counts as "not yet"). A timeout past `Timespec`'s range
/// (about 292 years) waits without one.
#[cfg(not(loom))]
pub(crate) fn wait_readable(
    fd: std::os::fd::BorrowedFd<'_>,
    timeout: Option<Duration>,
) -> std::io::Result<PollFlags> {
    let ts = timeout.and_then(|t| rustix::event::Timespec::try_from(t).ok());
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    match rustix::event::poll(&mut fds, ts.as_ref()) {
        Ok(_) => Ok(fds[0].revents()),
        Err(rustix::io::Errno::INTR) => Ok(PollFlags::empty()),
        Err(e) => Err(e.into()),
    }
}

/// The error a device returns when handed a cache or packet of another pool than its own.
#[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
pub(crate) fn wrong_pool(what: &'static str, expected: u64) -> DevError {
    DevError::WrongPool { what, expected }
}

/// A 48-bit Ethernet MAC address.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The broadcast address `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: Self = Self([0xff; 6]);

    /// Whether the group (multicast) bit is set; broadcast is a multicast address.
    #[must_use]
    #[inline]
    pub fn is_multicast(self) -> bool {
        self.0[0] & 1 == 1
    }

    /// Whether this is a locally administered address (as software devices use).
    #[must_use]
    #[inline]
    pub fn is_local(self) -> bool {
        self.0[0] & 2 == 2
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What a device is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// A name for logs: the interface name, the PCI address, `pair0`.
    pub name: String,
    /// The device's MAC address.
    pub mac: MacAddr,
    /// The largest IP packet it carries (the Ethernet payload), e.g. 1500.
    pub mtu: usize,
    /// How many RX/TX queue pairs this value serves: `queue` arguments are `0..queues`.
    pub queues: u16,
    /// What the device finishes on frames it sends and reports on frames it receives (the
    /// [`Offload`](crate::pool::Offload) metadata it honours); [`DeviceOffloads::NONE`] for most.
    pub offloads: DeviceOffloads,
}

/// The offloads a device offers: which [`Offload`](crate::pool::Offload) requests it honours on
/// transmit, and which metadata it may set on receive. Callers ask a device only for what it lists
/// here: a device without an offload does not finish what a frame asks for (a [`Tap`] refuses,
/// drops and counts it; the in-memory and AF_XDP devices and the 82599 driver send it as it is).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceOffloads {
    /// Transmit: finishes a partial TCP/UDP checksum
    /// ([`Offload::with_partial_checksum`](crate::pool::Offload::with_partial_checksum)).
    pub tx_checksum: bool,
    /// Transmit: the largest TCP super-segment it cuts, in IP packet bytes (IP header included),
    /// over IPv4 and IPv6 ([`Offload::with_segmentation`](crate::pool::Offload::with_segmentation));
    /// 0: none.
    pub tx_tso_max: u32,
    /// Receive: may hand up coalesced TCP frames larger than the MTU, marked with their
    /// segmentation; the receiving pool's data room must hold them.
    pub rx_coalesced: bool,
    /// Receive: may mark frames whose checksums need no check (verified by the device, or partial
    /// from a sender on the same machine: [`Offload::checksum_trusted`](crate::pool::Offload::checksum_trusted)).
    pub rx_checksum: bool,
}

impl DeviceOffloads {
    /// No offload either way: what every device but an offloading TAP reports.
    pub const NONE: Self =
        Self { tx_checksum: false, tx_tso_max: 0, rx_coalesced: false, rx_checksum: false };
}

/// Whether the link is up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Carrier present; the speed where the device knows it.
    Up {
        /// Link speed in Mbit/s, if known.
        speed_mbps: Option<u32>,
    },
    /// No carrier.
    Down,
}

/// Counters every device keeps. Totals since the device was created, over all of this value's queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Frames received and handed to the caller.
    pub rx_packets: u64,
    /// Bytes in those frames.
    pub rx_bytes: u64,
    /// Frames the device had to drop: no buffer, no room in the caller's batch on a device that cannot
    /// hold them back, a frame larger than the data room.
    pub rx_dropped: u64,
    /// Frames that arrived damaged or that the device reported as bad (for the 82599 model: bogus
    /// descriptors).
    pub rx_errors: u64,
    /// Times the receive path wanted a fresh buffer and the pool had none: an RX ring left without
    /// a replacement (the 82599: the frame waits in the ring), a frame left in the kernel (TAP).
    /// With a pool sized for everything that can hold its buffers, it stays 0. (AF_XDP's fill ring
    /// running dry is the kernel's `rx_fill_ring_empty_descs` in `XdpStats`.)
    pub rx_no_buffer: u64,
    /// Frames handed to the device for transmission and accepted.
    pub tx_packets: u64,
    /// Bytes in those frames.
    pub tx_bytes: u64,
    /// Frames the device accepted but could not send (a closed peer, a write the OS refused). A full
    /// ring or wire is not a drop: those frames stay in the caller's batch.
    pub tx_dropped: u64,
}

/// Why a device operation failed. Transient conditions (no packet, a full TX ring) are not errors:
/// they show up as a count of zero.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// A cache or packet from another buffer pool than the device's was handed to it; nothing moved.
    #[error("{what} belongs to another buffer pool than this device's (pool {expected})")]
    WrongPool {
        /// What was wrong: "the cache passed to rx_burst", "the first packet handed to tx_burst".
        what: &'static str,
        /// The [id](crate::pool::Pool::id) of the device's pool.
        expected: u64,
    },
    /// `queue` is not one this value serves.
    #[error("queue {queue} does not exist (this device has {queues})")]
    NoSuchQueue {
        /// The queue asked for.
        queue: u16,
        /// How many queues there are.
        queues: u16,
    },
    /// The device failed in a way that will not go away by retrying (the TAP file descriptor closed,
    /// the peer of a pair hung up, the NIC stopped responding).
    #[error("device failed: {0}")]
    Failed(#[source] std::io::Error),
}

impl DevError {
    /// `Ok` when `queue` is one of a device's `queues`, else [`DevError::NoSuchQueue`].
    pub(crate) fn check_queue(queue: u16, queues: u16) -> Result<(), Self> {
        if queue < queues { Ok(()) } else { Err(Self::NoSuchQueue { queue, queues }) }
    }
}

/// A bounded batch of packets: what a burst travels in between a device and its caller.
///
/// Its capacity is fixed when it is made, so filling and draining it never allocates. Packets borrow
/// the [`PoolCache`] they belong to, so a batch lives on the thread that owns that cache.
///
/// ```
/// use netchannel::dev::PacketBatch;
/// use netchannel::pool::{HugePages, Pool};
///
/// let pool = Pool::builder(64).hugepages(HugePages::Never).build()?;
/// let cache = pool.cache();
/// let mut batch = PacketBatch::with_capacity(32);
/// while !batch.is_full() {
///     let Some(packet) = cache.alloc() else { break };
///     batch.push(packet).expect("not full");
/// }
/// assert_eq!(batch.len(), 32);
/// batch.clear(); // every buffer goes back to `cache`
/// assert_eq!(pool.audit().outstanding, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PacketBatch<'c> {
    packets: Vec<Packet<'c>>,
    capacity: usize,
}

impl fmt::Debug for PacketBatch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketBatch")
            .field("len", &self.packets.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// The storage of an empty [`PacketBatch`], detached from any cache: a loop that builds a batch
/// per call (a stack's poll, which borrows the caller's cache only for the call) keeps one and
/// allocates once instead of once per call.
///
/// ```
/// use netchannel::dev::{BatchStorage, PacketBatch};
/// use netchannel::pool::{HugePages, Pool};
///
/// let pool = Pool::builder(64).hugepages(HugePages::Never).build()?;
/// let mut storage = BatchStorage::new(32);
/// for _ in 0..3 {
///     let cache = pool.cache();
///     let mut batch = PacketBatch::from_storage(std::mem::take(&mut storage));
///     batch.push(cache.alloc().expect("a free buffer")).expect("room");
///     assert_eq!((batch.len(), batch.capacity()), (1, 32));
///     storage = batch.into_storage(); // frees the packet; keeps the allocation
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct BatchStorage {
    /// Always empty: it holds an allocation, never a packet.
    packets: Vec<Packet<'static>>,
    capacity: usize,
}

// SAFETY: a `BatchStorage` holds no packet (its vector is empty whenever one exists: `new`
// allocates an empty one, `into_storage` empties the batch first), only an allocation, which any
// thread may free or reuse; what makes `Packet` neither `Send` nor `Sync` (its cache reference) is
// never present.
unsafe impl Send for BatchStorage {}
// SAFETY: as above: a shared `&BatchStorage` gives access to nothing but two lengths.
unsafe impl Sync for BatchStorage {}

impl BatchStorage {
    /// Storage for a batch of `capacity` packets.
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self { packets: Vec::with_capacity(capacity), capacity }
    }
}

impl Default for BatchStorage {
    /// No allocation (a batch of capacity 0 until replaced).
    fn default() -> Self {
        Self { packets: Vec::new(), capacity: 0 }
    }
}

impl fmt::Debug for BatchStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchStorage").field("capacity", &self.capacity).finish()
    }
}

/// An empty vector of packets of one lifetime as one of another, keeping its allocation.
fn relabel<'a, 'b>(packets: Vec<Packet<'a>>) -> Vec<Packet<'b>> {
    debug_assert!(packets.is_empty());
    let mut packets = std::mem::ManuallyDrop::new(packets);
    let (ptr, capacity) = (packets.as_mut_ptr(), packets.capacity());
    // SAFETY: `Packet<'a>` and `Packet<'b>` differ only in a lifetime, so they have one layout and the
    // allocation (from `Vec<Packet<'a>>`, with this pointer and capacity) is one `Vec<Packet<'b>>`
    // may own; the length is 0, so no value of the old lifetime is reinterpreted (callers pass
    // empty vectors; one that is not leaks its packets' buffers, never aliases them).
    unsafe { Vec::from_raw_parts(ptr.cast::<Packet<'b>>(), 0, capacity) }
}

impl<'c> PacketBatch<'c> {
    /// An empty batch with room for `capacity` packets (the burst size; 32 is typical).
    #[must_use]
    #[inline]
    pub fn with_capacity(capacity: usize) -> Self {
        Self { packets: Vec::with_capacity(capacity), capacity }
    }

    /// An empty batch in `storage`'s allocation, with its capacity.
    #[must_use]
    #[inline]
    pub fn from_storage(storage: BatchStorage) -> Self {
        Self { packets: relabel(storage.packets), capacity: storage.capacity }
    }

    /// Frees the packets it holds and gives back its allocation, for
    /// [`from_storage`](Self::from_storage).
    #[must_use]
    #[inline]
    pub fn into_storage(mut self) -> BatchStorage {
        self.packets.clear();
        BatchStorage { packets: relabel(self.packets), capacity: self.capacity }
    }

    /// How many packets it holds at most.
    #[must_use]
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many packets it holds.
    #[must_use]
    #[inline]
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Whether it holds no packet.
    #[must_use]
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Whether it holds `capacity` packets.
    #[must_use]
    #[inline]
    pub fn is_full(&self) -> bool {
        self.packets.len() >= self.capacity
    }

    /// Room left.
    #[must_use]
    #[inline]
    pub fn remaining(&self) -> usize {
        self.capacity - self.packets.len()
    }

    /// Appends a packet.
    ///
    /// # Errors
    ///
    /// The packet comes back when the batch is full.
    #[inline]
    pub fn push(&mut self, packet: Packet<'c>) -> Result<(), Packet<'c>> {
        if self.is_full() {
            return Err(packet);
        }
        self.packets.push(packet);
        Ok(())
    }

    /// Appends the frames a device received into buffers of `cache`'s pool: each [`RxFrame`] names a
    /// buffer the device filled and the frame's length, whose data starts at the pool's headroom (where
    /// [`PoolCache::alloc_burst`] leaves a fresh buffer's data). As many as there is room for are
    /// appended (one capacity check for the run, the packets written straight into the storage);
    /// returns how many, and the sum of their lengths. A length past the data room is clamped to it.
    ///
    /// This is the receive path of a DMA driver: its loop over descriptors only collects `(index,
    /// length)` pairs, and the packets are built here in one pass.
    ///
    /// # Safety
    ///
    /// As [`PoolCache::packet_from_raw`] for each frame's index: it names a buffer of `cache`'s pool
    /// that the caller owns and no packet exists for, and no index appears twice. The frames past the
    /// returned count are left to the caller, who still owns their buffers.
    #[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
    #[inline]
    pub unsafe fn extend_received(&mut self, cache: &'c PoolCache, frames: &[RxFrame]) -> (usize, u64) {
        let n = frames.len().min(self.remaining());
        let len = self.packets.len();
        // The storage was made with `capacity` slots and never holds more, so the spare capacity has
        // room for `remaining()` packets.
        let Some(slots) = self.packets.spare_capacity_mut().get_mut(..n) else {
            return (0, 0);
        };
        // SAFETY: the caller's contract, for the first `n` frames.
        let bytes = unsafe { cache.packets_from_received(slots, &frames[..n]) };
        // SAFETY: `packets_from_received` initialized the `n` slots after the first `len` (nothing in
        // it panics in a release build; a debug assertion failing would only leak the packets written).
        unsafe { self.packets.set_len(len + n) };
        (n, bytes)
    }

    /// [`extend_received`](Self::extend_received) with the frames produced one at a time: `next(i)`
    /// gives the `i`th frame or `None` to stop, and each becomes a packet at once, for up to `max`
    /// frames (and no more than there is room for). A DMA driver runs its descriptor loop inside
    /// `next`, so that a frame goes from the descriptor's status straight into a packet, with no
    /// array of frames in between. Returns how many packets were appended and the sum of their
    /// lengths. Should `next` panic, the packets it produced so far are leaked, never dropped twice.
    ///
    /// Unlike `extend_received`, the lengths are taken as given: the driver keeps them within the
    /// pool's data room (its receive buffer size is at most that). A longer one cannot reach outside
    /// the buffer (every read clamps the header to it), but it counts in the returned sum.
    ///
    /// # Safety
    ///
    /// As [`extend_received`](Self::extend_received) for each frame `next` returns: it names a buffer
    /// of `cache`'s pool that the caller owns (and gives up) and no packet exists for, and no index
    /// is returned twice.
    #[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
    #[inline(always)]
    pub unsafe fn extend_received_with(
        &mut self,
        cache: &'c PoolCache,
        max: usize,
        next: impl FnMut(usize) -> Option<RxFrame>,
    ) -> (usize, u64) {
        let n = max.min(self.remaining());
        let len = self.packets.len();
        // As in `extend_received`: the spare capacity has room for `remaining()` packets.
        let Some(slots) = self.packets.spare_capacity_mut().get_mut(..n) else {
            return (0, 0);
        };
        // SAFETY: the caller's contract, for each frame `next` returns.
        let (written, bytes) = unsafe { cache.packets_from_received_with(slots, next) };
        // SAFETY: `packets_from_received_with` initialized the first `written` of the `n` slots after
        // the first `len`.
        unsafe { self.packets.set_len(len + written) };
        (written, bytes)
    }

    /// Rebuilds the packets of buffers `indices` with `cache` ([`PoolCache::packet_from_raw`]) and
    /// appends them, as many as there is room for; returns how many it appended and the sum of their
    /// lengths. A device's receive path: one capacity check for the run, and a loop that writes each
    /// packet straight into the storage.
    ///
    /// # Safety
    ///
    /// As [`PoolCache::packet_from_raw`] for each index: it names a buffer of `cache`'s pool that the
    /// caller owns and no packet exists for. The indices past the returned count are left to the caller,
    /// who still owns them.
    #[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
    #[inline]
    pub(crate) unsafe fn extend_from_raw(&mut self, cache: &'c PoolCache, indices: &[u32]) -> (usize, u64) {
        let n = indices.len().min(self.remaining());
        let len = self.packets.len();
        // The storage was made with `capacity` slots and never holds more, so the spare capacity has
        // room for `remaining()` packets.
        let Some(slots) = self.packets.spare_capacity_mut().get_mut(..n) else {
            return (0, 0);
        };
        // SAFETY: the caller's contract, for the first `n` indices.
        let bytes = unsafe { cache.packets_from_raw(slots, &indices[..n]) };
        // SAFETY: `packets_from_raw` initialized the `n` slots after the first `len` (nothing in it panics in a
        // release build; a debug assertion failing would only leak the packets written).
        unsafe { self.packets.set_len(len + n) };
        (n, bytes)
    }

    /// Empties the batch without dropping its packets: their buffers are not freed.
    ///
    /// # Safety
    ///
    /// The caller has taken over every packet's buffer by its [`Packet::index`] (staged it for a
    /// channel, or for [`PoolCache::free_burst`]), exactly once each: otherwise the buffers leak.
    #[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
    #[inline]
    pub(crate) unsafe fn forget_all(&mut self) {
        // SAFETY: zero is within capacity and no element needs dropping (the caller owns each
        // buffer by index now, and `Packet` holds nothing else that needs a destructor).
        unsafe { self.packets.set_len(0) };
    }

    /// Removes the first `n` packets (fewer if it holds fewer) without dropping them: their buffers
    /// are not freed. A DMA driver's transmit path: it has put each one's index in a descriptor and
    /// owns the buffer until the device is done with it. The rest move to the front.
    ///
    /// # Safety
    ///
    /// The caller has taken over the buffer of each of the first `n` packets by its
    /// [`Packet::index`] (the packets' cache frees it later), exactly once each: otherwise the
    /// buffers leak.
    #[inline]
    pub unsafe fn forget_front(&mut self, n: usize) {
        let len = self.packets.len();
        let n = n.min(len);
        if n < len {
            let base = self.packets.as_mut_ptr();
            // SAFETY: `n < len`, so the offset stays inside the storage.
            let rest = unsafe { base.add(n) };
            // SAFETY: the `len - n` packets after the first `n` are initialized; moving them to the
            // front (the ranges may overlap: `copy` allows it) leaves the first `len - n` slots
            // initialized. A device that took the whole batch (the common case) skips the call.
            unsafe { std::ptr::copy(rest, base, len - n) };
        }
        // SAFETY: the first `len - n` slots are initialized (above); the first `n` packets are
        // forgotten, their buffers the caller's now.
        unsafe { self.packets.set_len(len - n) };
    }

    /// Removes and returns every packet, front first (the batch keeps its storage).
    #[inline]
    pub fn drain(&mut self) -> std::vec::Drain<'_, Packet<'c>> {
        self.packets.drain(..)
    }

    /// Removes the first `n` packets (fewer if it holds fewer), front first.
    #[inline]
    pub fn drain_front(&mut self, n: usize) -> std::vec::Drain<'_, Packet<'c>> {
        let n = n.min(self.packets.len());
        self.packets.drain(..n)
    }

    /// Drops every packet, returning the buffers to their cache.
    #[inline]
    pub fn clear(&mut self) {
        self.packets.clear();
    }

    /// The packets, front first.
    #[must_use]
    #[inline]
    pub fn as_slice(&self) -> &[Packet<'c>] {
        &self.packets
    }

    /// The packets, front first, mutably.
    #[must_use]
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Packet<'c>] {
        &mut self.packets
    }
}

/// A network device: a source and sink of Ethernet frames in bursts.
///
/// Implementations never panic on what arrives from the device or the wire, never allocate per packet,
/// and count what they drop in [`DeviceStats`].
pub trait NetDevice {
    /// Name, MAC, MTU and queue count.
    fn info(&self) -> DeviceInfo;

    /// Carrier state.
    fn link(&self) -> Link;

    /// Counters since creation.
    fn stats(&self) -> DeviceStats;

    /// Receives up to `batch.remaining()` frames from `queue` into buffers allocated from `cache`,
    /// appending them to `batch`; returns how many were appended (zero when none is waiting). Each
    /// packet's data is exactly one Ethernet frame (no FCS), starting after the pool's headroom.
    ///
    /// # Errors
    ///
    /// [`DevError::NoSuchQueue`] for a bad queue, [`DevError::Failed`] when the device is gone.
    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError>;

    /// Transmits frames from the front of `batch` on `queue`, removing those it accepted, and returns
    /// how many. Frames it cannot accept now (a full ring, a wire that is rate-limited) stay in `batch`
    /// for the caller to retry or drop. Accepted packets' buffers go back to their cache when the device
    /// is done with them.
    ///
    /// # Errors
    ///
    /// [`DevError::NoSuchQueue`] for a bad queue, [`DevError::Failed`] when the device is gone.
    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError>;

    /// Receives as [`rx_burst`](Self::rx_burst) does, at most one burst in all (the caller passes
    /// `raw` and `batch` with the same room, the burst, as a channelizer does), but a device that
    /// holds its frames as buffer indices (the [`Pair`], the 82599 driver) appends them to `raw` as
    /// indices instead of building packets; what it cannot hand over as a plain index (a frame of a
    /// shared buffer) it appends to `batch` as a packet, after which it appends nothing more to `raw`,
    /// so that every index arrived before every packet. Returns how many went each way. What a
    /// channelizer calls: it reads each frame from its buffer's header and stages the index, so no
    /// packet is built and walked again. `rx_packets` counts every frame here; a device without
    /// lengths of its own may leave the indices' bytes to the caller, who reports them with
    /// [`count_raw_rx_bytes`](Self::count_raw_rx_bytes).
    ///
    /// The default receives everything as packets with `rx_burst`.
    ///
    /// # Errors
    ///
    /// As [`rx_burst`](Self::rx_burst).
    fn rx_burst_raw<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        raw: &mut RawBatch,
        batch: &mut PacketBatch<'c>,
    ) -> Result<RawReceived, DevError> {
        let _ = raw;
        Ok(RawReceived { indices: 0, packets: self.rx_burst(queue, cache, batch)? })
    }

    /// Takes the sum of the data lengths of the indices the last [`rx_burst_raw`](Self::rx_burst_raw)
    /// on `queue` appended to its [`RawBatch`], as the caller read them: the caller reads every
    /// frame's header anyway, so a device that has no lengths of its own (the [`Pair`], whose wire
    /// carries bare indices) adds them to its `rx_bytes` here instead of reading each header a second
    /// time. A [`Channelizer`](crate::channelizer::Channelizer) calls it after every receive that
    /// appended an index.
    ///
    /// The default ignores it: a device that counts its received bytes itself (the 82599 driver,
    /// from its descriptors) keeps its own count. A wrapper that forwards `rx_burst_raw` forwards this
    /// too.
    fn count_raw_rx_bytes(&mut self, queue: u16, bytes: u64) {
        let _ = (queue, bytes);
    }

    /// Blocks until a frame may be ready on `queue` or `timeout` passes (`None`: no limit). It may
    /// return early, spuriously or at once (callers re-check by polling [`rx_burst`](Self::rx_burst)):
    /// it is a hint for a thread that has nothing else to do, never a promise that a frame waits.
    ///
    /// The default yields the thread once and returns: busy polling, which is right for poll-mode
    /// drivers. Devices with something to sleep on (a file descriptor, a channel's wakeup) override
    /// it; a device whose peer is gone returns at once, and `rx_burst` then reports it.
    ///
    /// # Errors
    ///
    /// [`DevError::NoSuchQueue`] for a bad queue (where the device checks), [`DevError::Failed`]
    /// when waiting itself failed.
    fn wait_rx(&mut self, queue: u16, timeout: Option<Duration>) -> Result<(), DevError> {
        let _ = (queue, timeout);
        std::thread::yield_now();
        Ok(())
    }
}
