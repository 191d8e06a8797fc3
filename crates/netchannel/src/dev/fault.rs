//! [`FaultInjector`]: a seeded middleware that drops, duplicates, reorders, corrupts, delays and
//! rate-limits the frames a device receives and transmits, so loss and reordering in tests are
//! seeded and repeatable, and need no netem.
//!
//! # Model
//!
//! Each direction (rx, tx) has its own [`DirectionConfig`], its own random stream and its own queue of
//! *held* frames. A frame entering the injector (received from the wrapped device, or handed to
//! `tx_burst` by the caller) meets the faults in a fixed order, each decided by one draw (only for
//! faults whose probability is above zero):
//!
//! 1. **drop** with probability `drop`: freed at once;
//! 2. **corrupt** with probability `corrupt`: one random bit of one random byte flipped in place,
//!    and the frame's offload metadata cleared (a receiver must not trust a checksum the device
//!    verified or left partial on a frame that was corrupted after);
//! 3. **duplicate** with probability `duplicate`: a copy in a fresh buffer follows it (a copy, since
//!    two packets may not share a buffer; no buffer free means no duplicate, counted), with the
//!    same offload metadata;
//! 4. **reorder** with probability `reorder`: the frame is held back until the frame `reorder_by`
//!    places behind it has gone out, then released right after it, or once `reorder_timeout` has
//!    passed, if that comes first;
//! 5. **delay**: every frame waits `delay` from when it entered (a fixed delay keeps order);
//! 6. **rate limit**: frames leave through a token bucket of `bytes_per_sec` with a depth of
//!    `burst_bytes` (a frame may leave while the bucket holds any token, driving it negative, so a
//!    frame larger than the bucket still passes). Frames waiting for tokens keep their order.
//!
//! Held frames are kept between calls as raw buffer indices ([`Packet::into_raw`]) and rebuilt with
//! [`PoolCache::packet_from_raw`] (a frame of a shared buffer, a send by reference, with
//! [`PoolCache::frame_from_raw`]); on rx with the cache the caller passes (after checking it belongs
//! to the injector's pool), on tx with the injector's own cache, since `tx_burst` gets none. Held
//! frames move on whenever the injector is called, in both directions: `rx_burst` hands the due
//! received frames to the caller *and* the due transmitted ones to the wrapped device, and
//! `tx_burst` (an empty batch is fine) does the latter. So a caller that keeps receiving, as a
//! stack's poll loop does, sees its delayed transmissions leave even when it has nothing more to
//! send (a connection whose tiny window is all in one held frame). Transmitted frames leave through
//! the queue of the last `tx_burst` (0 before the first). Frames still held when the injector is
//! dropped go back to the pool.
//!
//! On tx the injector accepts frames into its queue (up to [`FaultConfig::max_held`] per direction)
//! and hands due frames to the wrapped device; frames the device refuses stay at the head of the
//! queue. So the caller sees back-pressure only once the queue is full.
//!
//! # Determinism
//!
//! Randomness comes from a seeded `fastrand::Rng` (wyrand) per direction, seeded from
//! [`FaultConfig::seed`]. Time comes from a [`Clock`]: [`StdClock`] by default, or a
//! [`VirtualClock`] that a deterministic test advances by hand. With the same seed, configuration,
//! clock readings and input, the injector makes the same decisions.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{
    DevError, DeviceInfo, DeviceStats, Link, NetDevice, PacketBatch, packet_from_token, packet_in_pool,
    wrong_pool,
};
use crate::pool::{Offload, Packet, Pool, PoolCache};

/// Frames moved per internal burst.
const BURST: usize = 64;

/// A source of time for delays and rate limits: time since some fixed origin.
pub trait Clock {
    /// The current time, measured from the clock's origin; never decreases.
    fn now(&mut self) -> Duration;
}

/// The system's monotonic clock ([`Instant`]), with its origin at creation.
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    origin: Instant,
}

impl Default for StdClock {
    fn default() -> Self {
        Self { origin: Instant::now() }
    }
}

impl Clock for StdClock {
    fn now(&mut self) -> Duration {
        self.origin.elapsed()
    }
}

/// Virtual time for deterministic tests: starts at zero and moves only when told. Clones share the
/// same time, so a test keeps one clone and gives another to the injector.
#[derive(Clone, Debug, Default)]
pub struct VirtualClock(Arc<AtomicU64>);

impl VirtualClock {
    /// A clock at time zero.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves time forward by `by` (saturating at about 584 years).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // Relaxed: the value is the whole message; the test and the injector share no other memory
        // through it (a handoff between threads carries its own synchronisation).
        let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| Some(t.saturating_add(by)));
    }

    /// The current virtual time.
    #[must_use]
    pub fn get(&self) -> Duration {
        // Relaxed: as in `advance`.
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

impl Clock for VirtualClock {
    fn now(&mut self) -> Duration {
        self.get()
    }
}

impl<F: FnMut() -> Duration> Clock for F {
    fn now(&mut self) -> Duration {
        self()
    }
}

/// A token bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Sustained rate in bytes (of Ethernet frame) per second.
    pub bytes_per_sec: u64,
    /// Bucket depth: how many bytes may leave at once after a quiet period.
    pub burst_bytes: u64,
}

/// The faults of one direction. All probabilities are in `[0, 1]` (values outside are clamped);
/// the default injects nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DirectionConfig {
    /// Probability that a frame is dropped.
    pub drop: f64,
    /// Probability that one bit of a frame is flipped.
    pub corrupt: f64,
    /// Probability that a frame is duplicated.
    pub duplicate: f64,
    /// Probability that a frame is held back behind later ones.
    pub reorder: f64,
    /// How many later frames overtake a held-back frame (0 disables reordering).
    pub reorder_by: u32,
    /// The longest a held-back frame waits for the frames that overtake it (from when it would
    /// otherwise have left); `None` (the default): however long they take. Set it wherever
    /// time matters to a peer. Reordering on a real path lasts milliseconds, but a frame held
    /// until later ones pass waits as long as its sender is quiet, through a whole
    /// retransmission timeout, and a sender takes that wait for a round trip: Linux takes the
    /// RTT sample from the SACK that first covers the frame (seconds, or tens of them), and its
    /// RTO then grows to the 120 s maximum.
    pub reorder_timeout: Option<Duration>,
    /// How long every frame waits before it moves on.
    pub delay: Duration,
    /// A rate limit, if any.
    pub rate: Option<RateLimit>,
}

/// A fault injector's configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultConfig {
    /// Seeds both directions' random streams.
    pub seed: u64,
    /// Faults on frames received from the wrapped device.
    pub rx: DirectionConfig,
    /// Faults on frames transmitted through it.
    pub tx: DirectionConfig,
    /// The most frames held per direction (delayed, reordered, rate-limited or refused by the
    /// device); 1024 by default. A full queue stops the injector taking more frames.
    pub max_held: usize,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self { seed: 0, rx: DirectionConfig::default(), tx: DirectionConfig::default(), max_held: 1024 }
    }
}

/// What happened to the frames of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Frames that entered the injector.
    pub entered: u64,
    /// Frames dropped.
    pub dropped: u64,
    /// Frames corrupted.
    pub corrupted: u64,
    /// Duplicates made.
    pub duplicated: u64,
    /// Duplicates not made for want of a free buffer.
    pub duplicate_failed: u64,
    /// Frames held back for reordering.
    pub reordered: u64,
    /// Frames delayed.
    pub delayed: u64,
    /// Frames that had to wait for rate-limit tokens.
    pub rate_limited: u64,
    /// Frames that left the injector (to the caller on rx, accepted by the device on tx).
    pub released: u64,
}

/// The injector's counters, per direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Received frames.
    pub rx: DirectionStats,
    /// Transmitted frames.
    pub tx: DirectionStats,
    /// Received frames held right now.
    pub rx_held: usize,
    /// Transmitted frames held right now.
    pub tx_held: usize,
}

/// `true` with probability `p`; draws nothing when `p <= 0` (so a fault that is off leaves the
/// other faults' draws where they were).
fn chance(rng: &mut fastrand::Rng, p: f64) -> bool {
    if p.is_nan() || p <= 0.0 {
        return false;
    }
    rng.f64() < p
}

/// A held frame.
#[derive(Clone, Copy, Debug)]
struct Held {
    index: u32,
    len: usize,
    /// Admission order.
    seq: u64,
    /// Not before this time.
    due: Duration,
    /// Held back until the frame with this sequence number has left, or
    /// [`DirectionConfig::reorder_timeout`] after `due`.
    after: Option<u64>,
    /// Already counted in `rate_limited`.
    throttled: bool,
}

/// Token-bucket scale: tokens are byte-nanoseconds, so refills stay exact in integers.
const NANOS: i128 = 1_000_000_000;

#[derive(Debug)]
struct Direction {
    cfg: DirectionConfig,
    rng: fastrand::Rng,
    held: VecDeque<Held>,
    max_held: usize,
    next_seq: u64,
    /// The highest sequence number released so far.
    max_released: Option<u64>,
    tokens: i128,
    last_refill: Option<Duration>,
    stats: DirectionStats,
}

impl Direction {
    fn new(cfg: DirectionConfig, seed: u64, max_held: usize) -> Self {
        let tokens = cfg.rate.map_or(0, |r| i128::from(r.burst_bytes) * NANOS);
        Self {
            cfg,
            rng: fastrand::Rng::with_seed(seed),
            // Each admitted frame adds at most two entries (itself and a duplicate).
            held: VecDeque::with_capacity(max_held.saturating_mul(2)),
            max_held,
            next_seq: 0,
            max_released: None,
            tokens,
            last_refill: None,
            stats: DirectionStats::default(),
        }
    }

    /// Frames that may enter now.
    fn room(&self) -> usize {
        self.max_held.saturating_sub(self.held.len())
    }

    fn hold(&mut self, index: u32, len: usize, now: Duration, after: Option<u64>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let due = now.saturating_add(self.cfg.delay);
        self.held.push_back(Held { index, len, seq, due, after, throttled: false });
        seq
    }

    /// Applies the entry faults to `packet` and queues what survives; `dup` provides duplicates.
    fn admit(&mut self, mut packet: Packet<'_>, now: Duration, dup: &PoolCache) {
        self.stats.entered += 1;
        if chance(&mut self.rng, self.cfg.drop) {
            self.stats.dropped += 1;
            return;
        }
        if chance(&mut self.rng, self.cfg.corrupt) && !packet.is_empty() {
            let byte = self.rng.usize(..packet.len());
            let bit = self.rng.u8(..8);
            if let Some(b) = packet.data_mut().get_mut(byte) {
                *b ^= 1 << bit;
            }
            // A flipped bit is what a receiver's checksum exists to catch: the frame no longer
            // says its checksum is verified or partial (to be trusted), so the receiver checks it
            // (a partial one then fails, as a corrupted frame should).
            packet.set_offload(Offload::NONE);
            self.stats.corrupted += 1;
        }
        let copy = if chance(&mut self.rng, self.cfg.duplicate) {
            let offload = packet.offload();
            let copy = dup.alloc().and_then(|mut c| {
                c.extend_from_slice(packet.data()).ok()?;
                // The copy is the same frame: what the device must finish, or reported, too.
                c.set_offload(offload);
                Some(c)
            });
            if copy.is_none() {
                self.stats.duplicate_failed += 1;
            }
            copy
        } else {
            None
        };
        let held_back = self.cfg.reorder_by > 0 && chance(&mut self.rng, self.cfg.reorder);
        let after = held_back.then(|| self.next_seq + u64::from(self.cfg.reorder_by));
        if held_back {
            self.stats.reordered += 1;
        }
        if !self.cfg.delay.is_zero() {
            self.stats.delayed += 1;
        }
        let len = packet.len();
        self.hold(packet.into_raw(), len, now, after);
        if let Some(copy) = copy {
            self.stats.duplicated += 1;
            let len = copy.len();
            self.hold(copy.into_raw(), len, now, None);
        }
    }

    fn refill(&mut self, now: Duration) {
        let Some(rate) = self.cfg.rate else { return };
        let last = self.last_refill.replace(now).unwrap_or(now);
        let elapsed = i128::try_from(now.saturating_sub(last).as_nanos()).unwrap_or(i128::MAX);
        let depth = i128::from(rate.burst_bytes) * NANOS;
        self.tokens =
            self.tokens.saturating_add(elapsed.saturating_mul(i128::from(rate.bytes_per_sec))).min(depth);
    }

    /// The earliest time after `now` at which a held frame may become free to leave: its delay
    /// ends, its hold for reordering times out, or, with a frame ready and the rate limit's
    /// bucket empty, the bucket has room again. `None` when no such time is ahead (nothing
    /// held, or only frames that are free now, or that wait for later frames to leave).
    fn next_event(&self, now: Duration) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        let mut at = |t: Duration| {
            if t > now {
                next = Some(next.map_or(t, |n: Duration| n.min(t)));
            }
        };
        let mut ready = false;
        for h in &self.held {
            at(h.due);
            if h.after.is_some()
                && let Some(timeout) = self.cfg.reorder_timeout
            {
                at(h.due.saturating_add(timeout));
            }
            ready |= h.due <= now;
        }
        if ready
            && let Some(rate) = self.cfg.rate
            && self.tokens <= 0
            && rate.bytes_per_sec > 0
        {
            // Tokens are byte-nanoseconds and refill at `bytes_per_sec` a nanosecond.
            let short = u128::try_from(1 - self.tokens).unwrap_or(u128::MAX);
            let nanos = short.div_ceil(u128::from(rate.bytes_per_sec));
            let wait = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
            at(self.last_refill.unwrap_or(now).saturating_add(wait));
        }
        next
    }

    /// Moves due frames, in order, into `out` (rebuilt with `cache`, which must be of the pool every
    /// held index belongs to); returns how many.
    fn release<'c>(&mut self, now: Duration, cache: &'c PoolCache, out: &mut PacketBatch<'c>) -> usize {
        self.refill(now);
        let buffers = cache.pool().buffers();
        let mut released = 0;
        // Each pass releases what is due; a held-back frame becomes due when a later frame leaves, so
        // passes repeat while they make progress.
        loop {
            let mut progress = false;
            let mut blocked = false;
            let mut i = 0;
            while i < self.held.len() && !out.is_full() && !blocked {
                let h = self.held[i];
                let overtaken = |a| self.max_released.is_some_and(|m| m >= a);
                let timed_out = self.cfg.reorder_timeout.is_some_and(|t| now >= h.due.saturating_add(t));
                let waiting = h.due > now || h.after.is_some_and(|a| !overtaken(a) && !timed_out);
                if waiting {
                    i += 1;
                    continue;
                }
                if self.cfg.rate.is_some() && self.tokens <= 0 {
                    if !h.throttled {
                        self.held[i].throttled = true;
                        self.stats.rate_limited += 1;
                    }
                    blocked = true;
                    continue;
                }
                let _ = self.held.remove(i);
                if self.cfg.rate.is_some() {
                    self.tokens -= i128::try_from(h.len).unwrap_or(i128::MAX) * NANOS;
                }
                self.max_released = Some(self.max_released.map_or(h.seq, |m| m.max(h.seq)));
                // SAFETY: `h.index` came from `Packet::into_raw` of a packet of `cache`'s pool (the
                // injector checks every cache and packet against its pool) and was removed from the
                // queue just above, so this is its only owner and no other packet for it exists. A
                // frame of a shared buffer (its token carries `FRAME_TAG`) comes back as that frame.
                let Some(packet) = (unsafe { packet_from_token(cache, buffers, h.index) }) else {
                    continue; // unreachable: tokens come from packets of this pool
                };
                if let Err(packet) = out.push(packet) {
                    // Unreachable (`!out.is_full()`): keep it rather than lose it.
                    self.held.insert(i, Held { index: packet.into_raw(), ..h });
                    break;
                }
                released += 1;
                progress = true;
            }
            if !progress || out.is_full() || blocked {
                return released;
            }
        }
    }

    /// Puts frames the device refused back at the head of the queue, in order, and refunds their
    /// tokens.
    fn refuse(&mut self, refused: &mut PacketBatch<'_>) {
        for (k, packet) in refused.drain().enumerate() {
            let len = packet.len();
            if self.cfg.rate.is_some() {
                self.tokens += i128::try_from(len).unwrap_or(0) * NANOS;
            }
            let entry = Held {
                index: packet.into_raw(),
                len,
                seq: 0,
                due: Duration::ZERO,
                after: None,
                throttled: true,
            };
            self.held.insert(k.min(self.held.len()), entry);
        }
    }

    /// Frees every held frame into `cache` (of their pool).
    fn free_all(&mut self, cache: &PoolCache) {
        let mut batch = [0u32; BURST];
        while !self.held.is_empty() {
            let n = self.held.len().min(BURST);
            for (slot, h) in batch.iter_mut().zip(self.held.drain(..n)) {
                *slot = h.index;
            }
            // SAFETY: the injector owns every held index (taken with `into_raw` and never handed
            // out again), each once, and all are of `cache`'s pool.
            unsafe { cache.free_burst(&batch[..n]) };
        }
    }
}

/// Moves an empty batch's storage to a batch of another lifetime (no packet crosses: it is emptied
/// first). Collecting a `vec::IntoIter` through `filter_map` into a vector of a type with the same
/// layout reuses the allocation (std's in-place iteration), so this does not allocate.
fn retype<'b>(batch: PacketBatch<'_>) -> PacketBatch<'b> {
    let PacketBatch { packets, capacity } = batch;
    let packets = packets.into_iter().filter_map(|p| {
        drop(p);
        None
    });
    PacketBatch { packets: packets.collect(), capacity }
}

/// Wraps a device and injects faults into its traffic (see the [module documentation](self)).
///
/// ```
/// use netchannel::dev::{DirectionConfig, FaultConfig, FaultInjector, Pair, VirtualClock};
/// use netchannel::pool::{HugePages, Pool};
///
/// let pool = Pool::builder(1024).hugepages(HugePages::Never).build()?;
/// let (a, _b) = Pair::new(&pool)?;
/// let config = FaultConfig {
///     seed: 42,
///     tx: DirectionConfig { drop: 0.01, reorder: 0.05, reorder_by: 3, ..Default::default() },
///     ..Default::default()
/// };
/// let lossy = FaultInjector::with_clock(a, &pool, config, VirtualClock::new());
/// # drop(lossy);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FaultInjector<D, C: Clock = StdClock> {
    inner: D,
    clock: C,
    rx: Direction,
    tx: Direction,
    /// Rebuilds held tx frames and provides tx duplicates.
    cache: PoolCache,
    scratch: PacketBatch<'static>,
    /// The queue of the last `tx_burst`: where held transmitted frames leave.
    tx_queue: u16,
    rx_out: (u64, u64),
    tx_in: (u64, u64),
}

impl<D: std::fmt::Debug, C: Clock> std::fmt::Debug for FaultInjector<D, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultInjector")
            .field("inner", &self.inner)
            .field("rx", &self.rx.cfg)
            .field("tx", &self.tx.cfg)
            .field("stats", &self.fault_stats())
            .finish_non_exhaustive()
    }
}

impl<D> FaultInjector<D, StdClock> {
    /// Wraps `inner`, whose packets are buffers of `pool`, using the system clock.
    pub fn new(inner: D, pool: &Pool, config: FaultConfig) -> Self {
        Self::with_clock(inner, pool, config, StdClock::default())
    }
}

impl<D, C: Clock> FaultInjector<D, C> {
    /// Wraps `inner`, whose packets are buffers of `pool`, reading time from `clock`.
    pub fn with_clock(inner: D, pool: &Pool, config: FaultConfig, clock: C) -> Self {
        let max_held = config.max_held.max(1);
        Self {
            inner,
            clock,
            rx: Direction::new(config.rx, config.seed ^ 0x7278_5f72_6e67, max_held),
            tx: Direction::new(config.tx, config.seed ^ 0x7478_5f72_6e67, max_held),
            cache: pool.cache(),
            scratch: PacketBatch::with_capacity(BURST),
            tx_queue: 0,
            rx_out: (0, 0),
            tx_in: (0, 0),
        }
    }

    /// The wrapped device.
    #[must_use]
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, mutably (frames moved through it directly see no faults).
    #[must_use]
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// The fault counters.
    #[must_use]
    pub fn fault_stats(&self) -> FaultStats {
        FaultStats {
            rx: self.rx.stats,
            tx: self.tx.stats,
            rx_held: self.rx.held.len(),
            tx_held: self.tx.held.len(),
        }
    }

    fn take_scratch<'b>(&mut self) -> PacketBatch<'b> {
        retype(std::mem::replace(&mut self.scratch, PacketBatch::with_capacity(0)))
    }

    fn put_scratch(&mut self, batch: PacketBatch<'_>) {
        self.scratch = retype(batch);
    }

    /// Hands the held transmitted frames that are due at `now` to the wrapped device, through the
    /// queue of the last `tx_burst`; returns how many it accepted. Frames it refuses stay at the head
    /// of the queue, for the next call.
    fn flush_tx(&mut self, now: Duration) -> Result<usize, DevError>
    where
        D: NetDevice,
    {
        if self.tx.held.is_empty() {
            return Ok(0);
        }
        let mut out = self.take_scratch();
        let released = self.tx.release(now, &self.cache, &mut out);
        let result = if released > 0 { self.inner.tx_burst(self.tx_queue, &mut out) } else { Ok(0) };
        self.tx.stats.released += *result.as_ref().unwrap_or(&0) as u64;
        self.tx.refuse(&mut out);
        // A field assignment, not `put_scratch`: `out` borrows `self.cache`.
        self.scratch = retype(out);
        result
    }
}

impl<D: NetDevice, C: Clock> NetDevice for FaultInjector<D, C> {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn link(&self) -> Link {
        self.inner.link()
    }

    /// The wrapped device's counters, with the frames this injector passed to the caller (rx) and
    /// accepted from it (tx) in place of the device's own, and its drops added.
    fn stats(&self) -> DeviceStats {
        let inner = self.inner.stats();
        DeviceStats {
            rx_packets: self.rx_out.0,
            rx_bytes: self.rx_out.1,
            rx_dropped: inner.rx_dropped + self.rx.stats.dropped,
            rx_errors: inner.rx_errors,
            rx_no_buffer: inner.rx_no_buffer,
            tx_packets: self.tx_in.0,
            tx_bytes: self.tx_in.1,
            tx_dropped: inner.tx_dropped + self.tx.stats.dropped,
        }
    }

    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        let pool = self.cache.pool();
        if cache.pool().id() != pool.id() {
            return Err(wrong_pool("the cache passed to rx_burst", pool.id()));
        }
        let now = self.clock.now();
        // Due transmitted frames leave too (see the module documentation). A device that fails to
        // take them keeps them held; the next `tx_burst` reports its error.
        let _ = self.flush_tx(now);
        let mut scratch: PacketBatch<'c> = self.take_scratch();
        scratch.capacity = self.rx.room().min(scratch.packets.capacity()).min(BURST);
        let pulled =
            if scratch.capacity > 0 { self.inner.rx_burst(queue, cache, &mut scratch) } else { Ok(0) };
        for packet in scratch.drain() {
            self.rx.admit(packet, now, cache);
        }
        scratch.capacity = BURST;
        self.put_scratch(scratch);
        let released = self.rx.release(now, cache, batch);
        self.rx.stats.released += released as u64;
        if let Some(out) = batch.as_slice().get(batch.len() - released..) {
            self.rx_out.0 += released as u64;
            self.rx_out.1 += out.iter().map(|p| p.len() as u64).sum::<u64>();
        }
        match pulled {
            Err(e) if released == 0 => Err(e),
            _ => Ok(released),
        }
    }

    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        let pool = self.cache.pool();
        let ours = batch.as_slice().iter().take_while(|p| packet_in_pool(p, pool)).count();
        if ours == 0 && !batch.is_empty() {
            return Err(wrong_pool("the first packet handed to tx_burst", pool.id()));
        }
        let now = self.clock.now();
        let take = ours.min(self.tx.room());
        for packet in batch.drain_front(take) {
            self.tx_in.0 += 1;
            self.tx_in.1 += packet.len() as u64;
            self.tx.admit(packet, now, &self.cache);
        }
        self.tx_queue = queue;
        self.flush_tx(now).map(|_| take)
    }

    /// The wrapped device's wait, while the injector holds frames (they are released by time,
    /// on later `rx_burst`/`tx_burst` calls, not by the device) bounded to the next time one
    /// may leave (its delay ends, its reordering hold times out, the rate limit lets it go) and
    /// to 1 ms. (With the 1 ms bound alone, a frame delayed by 5 ms left up to 1 ms late.)
    fn wait_rx(&mut self, queue: u16, timeout: Option<Duration>) -> Result<(), DevError> {
        let timeout = if self.rx.held.is_empty() && self.tx.held.is_empty() {
            timeout
        } else {
            let now = self.clock.now();
            let next = self.rx.next_event(now).into_iter().chain(self.tx.next_event(now)).min();
            let bound = next.map_or(HELD_WAIT, |t| t.saturating_sub(now).min(HELD_WAIT));
            Some(timeout.map_or(bound, |t| t.min(bound)))
        };
        self.inner.wait_rx(queue, timeout)
    }
}

/// The longest [`FaultInjector::wait_rx`] sleeps while frames are held.
const HELD_WAIT: Duration = Duration::from_millis(1);

impl<D, C: Clock> Drop for FaultInjector<D, C> {
    fn drop(&mut self) {
        self.rx.free_all(&self.cache);
        self.tx.free_all(&self.cache);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::Pair;
    use crate::pool::HugePages;

    #[test]
    fn retyping_a_batch_keeps_its_storage() {
        let batch: PacketBatch<'static> = PacketBatch::with_capacity(32);
        let ptr = batch.packets.as_ptr() as usize;
        let again: PacketBatch<'_> = retype(batch);
        assert_eq!(again.packets.as_ptr() as usize, ptr, "no reallocation");
        assert_eq!((again.capacity(), again.packets.capacity()), (32, 32));
    }

    struct Rig {
        pool: Pool,
    }

    impl Rig {
        fn new() -> Self {
            Self { pool: Pool::builder(4096).hugepages(HugePages::Never).build().unwrap() }
        }

        /// A pair whose first end delays what it transmits by `delay` (virtual time), its second
        /// end, and the clock.
        fn delaying_tx(&self, delay: Duration) -> (FaultInjector<Pair, VirtualClock>, Pair, VirtualClock) {
            let (a, b) = Pair::builder(&self.pool).capacity(64).build().unwrap();
            let clock = VirtualClock::new();
            let tx = DirectionConfig { delay, ..Default::default() };
            let cfg = FaultConfig { seed: 1, tx, ..FaultConfig::default() };
            (FaultInjector::with_clock(a, &self.pool, cfg, clock.clone()), b, clock)
        }
    }

    /// While a frame is held, the wait lasts until it may leave, not a flat millisecond: a frame
    /// delayed by 300 µs (virtual time standing still) bounds the wait to 300 µs. The shortest
    /// of 10 waits must be well under a millisecond (each took at least 1 ms with the flat
    /// bound).
    #[test]
    fn a_wait_ends_when_a_held_frame_may_leave() {
        let rig = Rig::new();
        let (mut inj, b, _clock) = rig.delaying_tx(Duration::from_micros(300));
        let cache = rig.pool.cache();
        let mut out = PacketBatch::with_capacity(1);
        let mut p = cache.alloc().unwrap();
        p.extend_from_slice(&[7; 60]).unwrap();
        out.push(p).unwrap();
        assert_eq!(inj.tx_burst(0, &mut out).unwrap(), 1);
        assert_eq!(inj.fault_stats().tx_held, 1);
        let mut shortest = Duration::MAX;
        for _ in 0..10 {
            let start = Instant::now();
            inj.wait_rx(0, Some(Duration::from_millis(10))).unwrap();
            shortest = shortest.min(start.elapsed());
        }
        assert!(shortest < Duration::from_micros(800), "the shortest wait took {shortest:?}");
        drop(out);
        drop((inj, b, cache));
        rig.pool.check_leaks().unwrap();
    }

    /// Sends `n` numbered frames through a tx-faulty end and returns the numbers (and first bytes)
    /// that arrive, with the injector's stats.
    fn run_tx(config: DirectionConfig, seed: u64, n: u32) -> (Vec<(u32, Vec<u8>)>, FaultStats) {
        let rig = Rig::new();
        let (a, mut b) = Pair::builder(&rig.pool).capacity(4096).build().unwrap();
        let clock = VirtualClock::new();
        let cfg = FaultConfig { seed, tx: config, max_held: 4096, ..FaultConfig::default() };
        let mut inj = FaultInjector::with_clock(a, &rig.pool, cfg, clock.clone());
        let cache = rig.pool.cache();
        let mut out = PacketBatch::with_capacity(32);
        let mut got = Vec::new();
        let mut rx = PacketBatch::with_capacity(64);
        for i in 0..n {
            let mut p = cache.alloc().unwrap();
            p.extend_from_slice(&i.to_le_bytes()).unwrap();
            p.extend_from_slice(&[0u8; 60]).unwrap();
            out.push(p).unwrap();
            if out.is_full() || i + 1 == n {
                while !out.is_empty() {
                    inj.tx_burst(0, &mut out).unwrap();
                }
            }
            clock.advance(Duration::from_micros(10));
            while b.rx_burst(0, &cache, &mut rx).unwrap() > 0 {
                for p in rx.drain() {
                    let d = p.data();
                    got.push((u32::from_le_bytes([d[0], d[1], d[2], d[3]]), d.to_vec()));
                }
            }
        }
        // Let everything held go out.
        for _ in 0..1000 {
            clock.advance(Duration::from_millis(10));
            inj.tx_burst(0, &mut out).unwrap();
            while b.rx_burst(0, &cache, &mut rx).unwrap() > 0 {
                for p in rx.drain() {
                    let d = p.data();
                    got.push((u32::from_le_bytes([d[0], d[1], d[2], d[3]]), d.to_vec()));
                }
            }
            if inj.fault_stats().tx_held == 0 {
                break;
            }
        }
        let stats = inj.fault_stats();
        drop((out, rx));
        drop((inj, b, cache));
        rig.pool.check_leaks().unwrap();
        (got, stats)
    }

    /// A frame of a shared buffer (a send by reference) held for a delay comes out as that frame,
    /// and the frame bit comes back once the receiver drops it. Rebuilt as a plain packet index
    /// (the range check before), it was skipped and its reference leaked.
    #[test]
    fn held_frames_of_shared_buffers_come_out_whole() {
        let rig = Rig::new();
        let (mut inj, mut b, clock) = rig.delaying_tx(Duration::from_millis(2));
        let cache = rig.pool.cache();
        let mut payload = cache.alloc().unwrap();
        payload.extend_from_slice(&[5u8; 100]).unwrap();
        let shared = payload.into_shared().unwrap();
        let mut out = PacketBatch::with_capacity(4);
        let mut frame = shared.frame(&cache, 14).unwrap();
        frame.data_mut().fill(3);
        out.push(frame).unwrap();
        inj.tx_burst(0, &mut out).unwrap();
        assert_eq!(inj.fault_stats().tx_held, 1);
        clock.advance(Duration::from_millis(3));
        inj.tx_burst(0, &mut out).unwrap();
        let mut rx = PacketBatch::with_capacity(4);
        assert_eq!(b.rx_burst(0, &cache, &mut rx).unwrap(), 1);
        let got = &rx.as_slice()[0];
        assert!(
            got.is_frame() && got.len() == 114 && got.data()[..14] == [3; 14] && got.data()[14..] == [5; 100]
        );
        rx.clear();
        assert!(!shared.frame_in_flight());
        drop((out, rx, shared, inj, b));
        drop(cache);
        rig.pool.check_leaks().unwrap();
    }

    /// A delayed transmitted frame leaves on a receive call once it is due: a sender with nothing
    /// more to send (its window all in that frame) does not stall behind it. Before, only
    /// `tx_burst` released held transmitted frames.
    #[test]
    fn due_transmitted_frames_leave_on_a_receive() {
        let rig = Rig::new();
        let (mut inj, mut b, clock) = rig.delaying_tx(Duration::from_millis(2));
        let cache = rig.pool.cache();
        let mut out = PacketBatch::with_capacity(4);
        let mut p = cache.alloc().unwrap();
        p.extend_from_slice(&[4u8; 60]).unwrap();
        out.push(p).unwrap();
        assert_eq!(inj.tx_burst(0, &mut out).unwrap(), 1);
        let mut rx = PacketBatch::with_capacity(4);
        assert_eq!(inj.rx_burst(0, &cache, &mut rx).unwrap(), 0);
        assert_eq!(inj.fault_stats().tx_held, 1, "not due yet");
        clock.advance(Duration::from_millis(3));
        assert_eq!(inj.rx_burst(0, &cache, &mut rx).unwrap(), 0, "nothing received");
        let stats = inj.fault_stats();
        assert_eq!((stats.tx_held, stats.tx.released), (0, 1), "{stats:?}");
        assert_eq!(b.rx_burst(0, &cache, &mut rx).unwrap(), 1);
        assert_eq!(rx.as_slice()[0].data(), &[4u8; 60]);
        drop((out, rx, inj, b));
        drop(cache);
        rig.pool.check_leaks().unwrap();
    }

    /// Frames held back for reordering with no later frames to overtake them (their sender gone
    /// quiet) leave, in order, once `reorder_timeout` has passed, and stay held without one.
    #[test]
    fn reordering_is_bounded_in_time_when_asked() {
        for timeout in [None, Some(Duration::from_millis(5))] {
            let rig = Rig::new();
            let (a, mut b) = Pair::builder(&rig.pool).capacity(64).build().unwrap();
            let clock = VirtualClock::new();
            // Every frame is held back behind the next two.
            let tx = DirectionConfig {
                reorder: 1.0,
                reorder_by: 2,
                reorder_timeout: timeout,
                ..Default::default()
            };
            let cfg = FaultConfig { seed: 4, tx, ..FaultConfig::default() };
            let mut inj = FaultInjector::with_clock(a, &rig.pool, cfg, clock.clone());
            let cache = rig.pool.cache();
            let mut out = PacketBatch::with_capacity(4);
            let mut rx = PacketBatch::with_capacity(4);
            for i in 0..3u8 {
                let mut p = cache.alloc().unwrap();
                p.extend_from_slice(&[i; 60]).unwrap();
                out.push(p).unwrap();
                assert_eq!(inj.tx_burst(0, &mut out).unwrap(), 1);
            }
            // Each waits for the frame two places behind it, which waits too: none leaves, and
            // none is due to before the bound.
            clock.advance(Duration::from_millis(4));
            inj.tx_burst(0, &mut out).unwrap();
            assert_eq!(b.rx_burst(0, &cache, &mut rx).unwrap(), 0, "none overtaken, the bound not passed");
            clock.advance(Duration::from_secs(30));
            inj.tx_burst(0, &mut out).unwrap();
            b.rx_burst(0, &cache, &mut rx).unwrap();
            let firsts: Vec<u8> = rx.as_slice().iter().map(|p| p.data()[0]).collect();
            match timeout {
                None => {
                    assert_eq!(inj.fault_stats().tx_held, 3, "without a bound, held for as long as it takes")
                }
                Some(_) => assert_eq!(firsts, [0, 1, 2], "all out once the bound passed, in order"),
            }
            rx.clear();
            drop((out, rx, inj, b));
            drop(cache);
            rig.pool.check_leaks().unwrap();
        }
    }

    fn near(actual: u64, n: u32, p: f64) {
        let expected = f64::from(n) * p;
        let sd = (expected * (1.0 - p)).sqrt();
        let a = actual as f64;
        assert!((a - expected).abs() <= 5.0 * sd + 1.0, "{actual} vs about {expected}");
    }

    #[test]
    fn drops_happen_at_the_configured_rate_and_the_seed_repeats() {
        let cfg = DirectionConfig { drop: 0.1, ..Default::default() };
        let (got, stats) = run_tx(cfg, 7, 5000);
        near(stats.tx.dropped, 5000, 0.1);
        assert_eq!(got.len() as u64, 5000 - stats.tx.dropped);
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "drops keep order");
        let (again, _) = run_tx(cfg, 7, 5000);
        assert_eq!(got, again, "same seed, same sequence");
        let (other, _) = run_tx(cfg, 8, 5000);
        assert_ne!(got, other, "another seed, another sequence");
    }

    #[test]
    fn duplicates_corruption_and_reordering() {
        let (got, stats) = run_tx(DirectionConfig { duplicate: 0.05, ..Default::default() }, 1, 4000);
        near(stats.tx.duplicated, 4000, 0.05);
        assert_eq!(got.len() as u64, 4000 + stats.tx.duplicated);
        assert!(got.windows(2).any(|w| w[0] == w[1]), "a duplicate follows its original");

        let (got, stats) = run_tx(DirectionConfig { corrupt: 0.1, ..Default::default() }, 2, 4000);
        near(stats.tx.corrupted, 4000, 0.1);
        let mut flipped_bits = 0;
        for (i, (_, bytes)) in got.iter().enumerate() {
            let mut clean = u32::try_from(i).unwrap().to_le_bytes().to_vec();
            clean.extend_from_slice(&[0; 60]);
            flipped_bits += bytes.iter().zip(&clean).map(|(a, b)| (a ^ b).count_ones()).sum::<u32>();
        }
        assert_eq!(u64::from(flipped_bits), stats.tx.corrupted, "one bit per corrupted frame");

        let cfg = DirectionConfig { reorder: 0.05, reorder_by: 3, ..Default::default() };
        let (got, stats) = run_tx(cfg, 3, 4000);
        near(stats.tx.reordered, 4000, 0.05);
        let mut ids: Vec<u32> = got.iter().map(|g| g.0).collect();
        let out_of_order = ids.windows(2).filter(|w| w[0] > w[1]).count() as u64;
        assert!(out_of_order > 0 && out_of_order <= stats.tx.reordered);
        ids.sort_unstable();
        assert_eq!(ids, (0..4000).collect::<Vec<_>>(), "reordering loses nothing");
    }

    #[test]
    fn corruption_drops_the_checksum_trust_and_duplicates_keep_the_metadata() {
        let rig = Rig::new();
        let (a, mut b) = Pair::builder(&rig.pool).capacity(64).build().unwrap();
        let cfg = FaultConfig {
            seed: 9,
            tx: DirectionConfig { corrupt: 0.5, duplicate: 0.5, ..Default::default() },
            ..FaultConfig::default()
        };
        let mut inj = FaultInjector::with_clock(a, &rig.pool, cfg, VirtualClock::new());
        let cache = rig.pool.cache();
        let trusted = Offload::NONE.with_partial_checksum(34, 16).with_checksum_verified();
        let mut out = PacketBatch::with_capacity(32);
        for i in 0..32u32 {
            let mut p = cache.alloc().unwrap();
            // The index twice: one flipped bit cannot leave a frame looking intact.
            p.extend_from_slice(&i.to_le_bytes()).unwrap();
            p.extend_from_slice(&i.to_le_bytes()).unwrap();
            p.extend_from_slice(&[0u8; 56]).unwrap();
            p.set_offload(trusted);
            out.push(p).unwrap();
        }
        inj.tx_burst(0, &mut out).unwrap();
        let mut rx = PacketBatch::with_capacity(128);
        b.rx_burst(0, &cache, &mut rx).unwrap();
        let stats = inj.fault_stats();
        assert!(stats.tx.corrupted > 0 && stats.tx.duplicated > 0, "{stats:?}");
        let mut untouched = 0;
        for p in rx.drain() {
            let d = p.data();
            let clean = d[..4] == d[4..8] && d[8..].iter().all(|&b| b == 0);
            if clean {
                assert_eq!(p.offload(), trusted, "an intact frame (or its duplicate) keeps its metadata");
                untouched += 1;
            } else {
                assert_eq!(p.offload(), Offload::NONE, "a corrupted frame is not to be trusted");
            }
        }
        assert!(untouched > 0);
    }

    #[test]
    fn delay_and_rate_limit_follow_the_clock() {
        let pool = Pool::builder(512).hugepages(HugePages::Never).build().unwrap();
        let (mut a, b) = Pair::new(&pool).unwrap();
        let clock = VirtualClock::new();
        let rate = RateLimit { bytes_per_sec: 1000 * 100, burst_bytes: 200 };
        let cfg = FaultConfig {
            seed: 9,
            rx: DirectionConfig { delay: Duration::from_millis(5), rate: Some(rate), ..Default::default() },
            ..FaultConfig::default()
        };
        let mut inj = FaultInjector::with_clock(b, &pool, cfg, clock.clone());
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(64);
        for _ in 0..20 {
            let mut p = cache.alloc().unwrap();
            p.set_len(100).unwrap();
            batch.push(p).unwrap();
        }
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 20);
        assert_eq!(inj.rx_burst(0, &cache, &mut batch).unwrap(), 0, "delayed");
        assert_eq!(inj.fault_stats().rx_held, 20);
        clock.advance(Duration::from_millis(5));
        // A bucket of 200 bytes: two frames leave (the second drives it to zero).
        assert_eq!(inj.rx_burst(0, &cache, &mut batch).unwrap(), 2);
        assert_eq!(inj.fault_stats().rx.rate_limited, 1);
        // 100 kB/s refills one 100-byte frame per millisecond.
        clock.advance(Duration::from_millis(1));
        assert_eq!(inj.rx_burst(0, &cache, &mut batch).unwrap(), 1);
        clock.advance(Duration::from_millis(10));
        assert_eq!(inj.rx_burst(0, &cache, &mut batch).unwrap(), 2, "capped by the bucket depth");
        assert_eq!(inj.stats().rx_packets, 5);
        assert_eq!(inj.fault_stats().rx.delayed, 20);
        batch.clear();
        drop(batch);
        drop((inj, a, cache)); // 15 frames still held: back to the pool
        pool.check_leaks().unwrap();
    }

    #[test]
    fn other_pools_are_refused() {
        let pool = Pool::builder(64).hugepages(HugePages::Never).build().unwrap();
        let other = Pool::builder(8).hugepages(HugePages::Never).build().unwrap();
        let (a, _b) = Pair::new(&pool).unwrap();
        let mut inj = FaultInjector::new(a, &pool, FaultConfig::default());
        let foreign = other.cache();
        let mut batch = PacketBatch::with_capacity(4);
        assert!(matches!(inj.rx_burst(0, &foreign, &mut batch), Err(DevError::WrongPool { .. })));
        batch.push(foreign.alloc().unwrap()).unwrap();
        assert!(matches!(inj.tx_burst(0, &mut batch), Err(DevError::WrongPool { .. })));
        assert_eq!(batch.len(), 1);
        drop(batch);
        drop((inj, foreign));
        other.check_leaks().unwrap();
    }
}
