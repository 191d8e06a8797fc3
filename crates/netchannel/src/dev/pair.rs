//! [`Pair`]: two in-memory Ethernet ends joined by a zero-copy wire, the link of deterministic tests.
//!
//! Both ends share one [`Pool`]. A frame crosses the wire as its buffer index through a net channel
//! ([`crate::channel`], one per direction): `tx_burst` on one end gives up each packet's handle
//! ([`Packet::into_raw`](crate::pool::Packet::into_raw)) and pushes the indices in one burst;
//! `rx_burst` on the other end pops them and rebuilds the packets with the caller's cache. Ownership
//! travels with the index, the metadata (data offset and length) travels in the buffer, and no byte is
//! copied: the receiver gets the very buffer the sender filled. `rx_burst_raw` skips the rebuilding:
//! it pops the indices straight into the caller's [`RawBatch`] (what a channelizer reads), and counts
//! their bytes when the caller, which reads every frame anyway, reports them
//! ([`NetDevice::count_raw_rx_bytes`]).
//!
//! Each channel is single-producer/single-consumer, so each end is driven by one thread at a time;
//! ends are `Send` and may live on different threads.
//!
//! # Contract details
//!
//! * **A full wire** is back-pressure, not loss: `tx_burst` accepts what fits and leaves the rest at
//!   the front of the batch (the [`NetDevice::tx_burst`] contract), and nothing is counted as dropped.
//!   The caller retries or drops. The capacity is set with [`PairBuilder::capacity`].
//! * **Pools**: `rx_burst` with a cache of another pool, and `tx_burst` whose first packet is of another
//!   pool, fail with [`DevError::WrongPool`]; nothing is received or sent. A batch whose
//!   packets are only partly of the pair's pool is sent up to the first foreign packet.
//! * **Dropping an end**: the other end's `rx_burst` still delivers the frames already in flight, then
//!   fails with [`DevError::Failed`] (`NotConnected`: the peer hung up); its [`NetDevice::link`] says
//!   [`Link::Down`]; its `tx_burst` accepts frames and drops them, counting them in
//!   [`DeviceStats::tx_dropped`] (not in `tx_packets`), like a cable with nobody at the other end.
//!   Buffers still in flight towards a dropped end go back to the pool when the second end is dropped,
//!   so [`Pool::check_leaks`] passes once both ends and every cache are gone.
//! * **Frames of shared buffers** ([`SharedPacket::frame`](crate::pool::SharedPacket::frame), a send
//!   by reference) cross as their token (the index with [`FRAME_TAG`]) and arrive as the frame they
//!   were ([`PoolCache::frame_from_raw`]): the receiver reads the headers and the shared payload, and
//!   dropping it releases the frame, so the sender's next frame of that buffer can go. A burst holding
//!   frames is bounds-checked in one pass like any other and rebuilt in one loop, a branch per
//!   token choosing plain packet or frame; only a token outside the pool (unreachable) sends a burst
//!   to the per-index path that counts and skips it.
//! * **MAC addresses**: locally administered unicast addresses `02:6e:63:NN:NN:0S` (`n c` for
//!   "net channel", a process-wide pair number, and the side 0 or 1), distinct between the two ends
//!   and between pairs.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{
    DevError, DeviceInfo, DeviceOffloads, DeviceStats, Link, MacAddr, NetDevice, PacketBatch, RawBatch,
    RawReceived, packet_from_token, packet_in_pool, wrong_pool,
};
use crate::channel::{BuildError, Channel, Consumer, Producer, Wait, WakeMode};
use crate::pool::{FRAME_TAG, Pool, PoolCache};

#[cfg(test)]
thread_local! {
    /// Bursts this thread received through the per-index path (`receive_checked`), for the tests
    /// that check which path a burst takes.
    static CHECKED_BURSTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The wire capacity (frames in flight per direction) unless [`PairBuilder::capacity`] says otherwise.
pub const DEFAULT_WIRE_CAPACITY: usize = 1024;

/// Frames moved per channel operation.
const BURST: usize = 64;

/// Numbers pairs for their names and MAC addresses.
static NEXT_PAIR: AtomicU16 = AtomicU16::new(0);

/// Configures a pair before it is built; see [`Pair::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct PairBuilder {
    pool: Pool,
    capacity: usize,
    wake: WakeMode,
    mtu: Option<usize>,
}

impl PairBuilder {
    /// Frames in flight per direction before `tx_burst` stops accepting ([`DEFAULT_WIRE_CAPACITY`] by
    /// default; rounded up to a power of two).
    pub fn capacity(mut self, frames: usize) -> Self {
        self.capacity = frames;
        self
    }

    /// How [`Pair::wait`] waits for frames ([`WakeMode::Park`] by default; [`WakeMode::Poll`] skips
    /// the wakeup check on every send, for busy-polling tests).
    pub fn wake(mut self, mode: WakeMode) -> Self {
        self.wake = mode;
        self
    }

    /// The MTU both ends report (by default 1500, or less when the pool's data room cannot hold a
    /// 1500-byte payload plus a 14-byte Ethernet header). Informative: the wire carries any frame
    /// that fits a buffer.
    pub fn mtu(mut self, mtu: usize) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Builds the two ends.
    ///
    /// # Errors
    ///
    /// [`BuildError`] for a zero or too large capacity, or an eventfd that cannot be created.
    pub fn build(self) -> Result<(Pair, Pair), BuildError> {
        let (tx0, rx1) = Channel::builder(self.capacity).wake(self.wake).build()?;
        let (tx1, rx0) = Channel::builder(self.capacity).wake(self.wake).build()?;
        let wire = Arc::new(Wire {
            pool: self.pool.clone(),
            gone: [AtomicBool::new(false), AtomicBool::new(false)],
            orphans: Mutex::new(Vec::with_capacity(2)),
        });
        // Relaxed: the number only has to be unique (modulo 2^16), which the RMW guarantees.
        let number = NEXT_PAIR.fetch_add(1, Ordering::Relaxed);
        let mtu = self.mtu.unwrap_or_else(|| self.pool.data_room().saturating_sub(14).min(1500));
        let end = |side: u8, tx, rx| {
            let [hi, lo] = number.to_be_bytes();
            Pair {
                tx,
                rx: Some(rx),
                wire: Arc::clone(&wire),
                side: usize::from(side),
                info: DeviceInfo {
                    name: format!("pair{number}.{side}"),
                    mac: MacAddr([0x02, 0x6e, 0x63, hi, lo, side]),
                    mtu,
                    queues: 1,
                    offloads: DeviceOffloads::NONE,
                },
                stats: DeviceStats::default(),
                scratch: [0; BURST],
            }
        };
        Ok((end(0, tx0, rx0), end(1, tx1, rx1)))
    }
}

/// What both ends share.
#[derive(Debug)]
struct Wire {
    pool: Pool,
    /// `gone[s]`: end `s` has been dropped.
    gone: [AtomicBool; 2],
    /// The receiving channels of dropped ends, kept alive so that frames sent to a dropped end are not
    /// lost in a freed ring but returned to the pool when the wire goes away.
    orphans: Mutex<Vec<Consumer>>,
}

impl Drop for Wire {
    fn drop(&mut self) {
        let orphans = std::mem::take(self.orphans.get_mut().unwrap_or_else(PoisonError::into_inner));
        if orphans.is_empty() {
            return;
        }
        // Both ends are gone (each held the wire), so no producer pushes any more.
        let cache = self.pool.cache();
        for mut rx in orphans {
            // SAFETY: only `Pair::tx_burst` pushes into these channels, and only indices of this pool
            // (checked with `packet_in_pool`) whose packet handles it gave up with `into_raw`: each
            // index is an owned buffer, sent once. Nobody else will pop them: their end is gone.
            unsafe { cache.reclaim(&mut rx) };
        }
        // Dropping the cache returns the buffers to the depot.
    }
}

/// One end of an in-memory Ethernet pair (see the [module documentation](self)).
///
/// ```
/// use netchannel::dev::{NetDevice, PacketBatch, Pair};
/// use netchannel::pool::{HugePages, Pool};
///
/// let pool = Pool::builder(256).hugepages(HugePages::Never).build()?;
/// let (mut a, mut b) = Pair::builder(&pool).capacity(64).build()?;
/// let cache = pool.cache();
///
/// let mut batch = PacketBatch::with_capacity(32);
/// let mut frame = cache.alloc().expect("a free buffer");
/// frame.extend_from_slice(&[0xab; 60])?;
/// batch.push(frame).expect("room");
/// assert_eq!(a.tx_burst(0, &mut batch)?, 1);
///
/// assert_eq!(b.rx_burst(0, &cache, &mut batch)?, 1);
/// assert_eq!(batch.as_slice()[0].data(), &[0xab; 60]);
/// drop(batch); // packets borrow the cache: drop them first
/// drop((a, b, cache));
/// pool.check_leaks()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Pair {
    // Field order matters: `tx` is dropped before `wire`, so when the last end releases the wire no
    // producer is left to push into the channels it drains.
    tx: Producer,
    /// `None` only while dropping.
    rx: Option<Consumer>,
    wire: Arc<Wire>,
    side: usize,
    info: DeviceInfo,
    stats: DeviceStats,
    scratch: [u32; BURST],
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair")
            .field("name", &self.info.name)
            .field("mac", &self.info.mac)
            .field("pool", &self.wire.pool.id())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Pair {
    /// Starts configuring a pair whose ends move buffers of `pool`.
    pub fn builder(pool: &Pool) -> PairBuilder {
        PairBuilder { pool: pool.clone(), capacity: DEFAULT_WIRE_CAPACITY, wake: WakeMode::Park, mtu: None }
    }

    /// A pair on `pool` with the default configuration.
    ///
    /// # Errors
    ///
    /// As [`PairBuilder::build`].
    pub fn new(pool: &Pool) -> Result<(Self, Self), BuildError> {
        Self::builder(pool).build()
    }

    /// The pool both ends move buffers of.
    #[must_use]
    pub fn pool(&self) -> &Pool {
        &self.wire.pool
    }

    /// Frames that can be in flight towards the other end.
    #[must_use]
    pub fn wire_capacity(&self) -> usize {
        self.tx.capacity()
    }

    /// Whether the other end has been dropped.
    #[must_use]
    pub fn is_peer_gone(&self) -> bool {
        // Acquire: pairs with the Release store in the peer's `Drop`.
        self.wire.gone[1 - self.side].load(Ordering::Acquire)
    }

    /// Blocks until a frame is ready to receive, the peer is gone and the wire drained, or `timeout`
    /// passes (`None`: no limit). Receives nothing; see [`Consumer::wait`]. With
    /// [`WakeMode::Poll`] it busy-polls.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Wait {
        match self.rx.as_mut() {
            Some(rx) => rx.wait(timeout),
            None => Wait::Closed,
        }
    }

    /// Frees raw indices this end owns but could not send (unreachable: see `tx_burst`).
    #[cold]
    fn free_unsent(&self, indices: &[u32]) {
        tracing::error!(
            count = indices.len(),
            "pair wire refused frames it had room for; returning them to the pool"
        );
        let cache = self.wire.pool.cache();
        // SAFETY: the caller owns these indices (their handles were given up with `into_raw`) and
        // they were not pushed, so nobody else has them.
        unsafe { cache.free_burst(indices) };
    }
}

impl NetDevice for Pair {
    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn link(&self) -> Link {
        if self.is_peer_gone() { Link::Down } else { Link::Up { speed_mbps: None } }
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }

    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        let (rx, buffers) = receiving(&mut self.rx, &self.wire, queue, cache)?;
        let mut received = 0;
        loop {
            let want = batch.remaining().min(BURST);
            if want == 0 {
                break;
            }
            let n = rx.pop_burst(&mut self.scratch[..want]);
            let popped = &self.scratch[..n];
            // Only the peer's `tx_burst` writes this wire, with checked indices, so an index out of
            // the pool is unreachable: one check for the whole burst (`classify`), and the exact
            // per-index path (which counts and skips bad indices) only when it fails.
            let (packets, bytes) = match classify(popped, buffers) {
                Burst::Indices => {
                    // SAFETY: every index is below `buffers` (checked above for the burst); the
                    // peer's `tx_burst` pushed it after checking that its packet is of this pool and
                    // giving up the handle (`into_raw`); popping it transferred ownership to us, and
                    // `cache` is of the same pool (checked above).
                    let (packets, bytes) = unsafe { batch.extend_from_raw(cache, popped) };
                    if packets < n {
                        // Unreachable: `n <= want <= batch.remaining()`.
                        self.stats.rx_dropped += drop_unreceived(cache, &popped[packets..]);
                    }
                    (packets, bytes)
                }
                Burst::Tokens => {
                    // SAFETY: as for `Burst::Indices`, for plain indices and frames' tokens (each
                    // one's buffer index below `buffers`, checked above for the burst).
                    let (packets, bytes) = unsafe { extend_from_tokens(batch, cache, popped) };
                    if packets < n {
                        // Unreachable: `n <= want <= batch.remaining()`.
                        self.stats.rx_dropped += drop_unreceived(cache, &popped[packets..]);
                    }
                    (packets, bytes)
                }
                Burst::Checked => {
                    let done = receive_checked(popped, buffers, cache, batch);
                    self.stats.rx_errors += done.errors;
                    self.stats.rx_dropped += done.dropped;
                    (done.packets, done.bytes)
                }
            };
            self.stats.rx_packets += packets as u64;
            self.stats.rx_bytes += bytes;
            received += packets;
            if n < want {
                break;
            }
        }
        if received == 0 && !batch.is_full() && rx.is_abandoned() && rx.is_empty() {
            return Err(hung_up(&self.info.name));
        }
        Ok(received)
    }

    /// The indices popped off the wire go to `raw` as they are, popped straight into its room: no
    /// packet is built, and no header read (the wire carries bare indices, so their bytes reach
    /// `rx_bytes` through [`count_raw_rx_bytes`](NetDevice::count_raw_rx_bytes), from the caller that
    /// reads them). A chunk that holds a frame of a shared buffer goes to `batch` as packets (frames and
    /// the plain buffers beside them), and the receive stops after it.
    fn rx_burst_raw<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        raw: &mut RawBatch,
        batch: &mut PacketBatch<'c>,
    ) -> Result<RawReceived, DevError> {
        let (rx, buffers) = receiving(&mut self.rx, &self.wire, queue, cache)?;
        let mut received = RawReceived::default();
        // The indices take no room in `batch`, but the receive is bounded by both.
        let limit = raw.remaining().min(batch.remaining());
        loop {
            let want = (limit - received.indices).min(BURST);
            if want == 0 {
                break;
            }
            let room = raw.room_mut();
            let Some(room) = room.get_mut(..want) else { break };
            let n = rx.pop_burst(room);
            let popped = &room[..n];
            // As in `rx_burst`: one check for the chunk, the per-index path only when it fails. A
            // chunk holding a frame goes to `batch` as packets (the raw batch takes plain buffers
            // only), and the receive stops after it.
            match classify(popped, buffers) {
                Burst::Indices => {}
                Burst::Tokens => {
                    // SAFETY: as in `rx_burst` for `Burst::Tokens`; the tokens sit in `raw`'s room,
                    // not committed to it, so the packets made of them are their only owners.
                    let (packets, bytes) = unsafe { extend_from_tokens(batch, cache, popped) };
                    if packets < n {
                        // Unreachable: `n <= want <= limit <= batch.remaining()`.
                        self.stats.rx_dropped += drop_unreceived(cache, &popped[packets..]);
                    }
                    self.stats.rx_packets += packets as u64;
                    self.stats.rx_bytes += bytes;
                    received.packets += packets;
                    break;
                }
                Burst::Checked => {
                    let done = receive_checked(popped, buffers, cache, batch);
                    self.stats.rx_errors += done.errors;
                    self.stats.rx_dropped += done.dropped;
                    self.stats.rx_packets += done.packets as u64;
                    self.stats.rx_bytes += done.bytes;
                    received.packets += done.packets;
                    break;
                }
            }
            self.stats.rx_packets += n as u64;
            // SAFETY: the `n` indices after the batch's are in its room now, each below `buffers`
            // (checked above), pushed by the peer's `tx_burst` after checking that its packet is of
            // this pool and giving up the handle; popping them made them ours, `cache` is of the same
            // pool (`receiving`), and they are handed over to the batch, each once.
            unsafe { raw.commit(n) };
            received.indices += n;
            if n < want || received.indices == limit {
                break;
            }
        }
        if received.indices + received.packets == 0 && !batch.is_full() && rx.is_abandoned() && rx.is_empty()
        {
            return Err(hung_up(&self.info.name));
        }
        Ok(received)
    }

    /// The bytes of the indices [`rx_burst_raw`](NetDevice::rx_burst_raw) handed over, as the
    /// caller read them from their headers (queue 0 is the only one).
    #[inline]
    fn count_raw_rx_bytes(&mut self, queue: u16, bytes: u64) {
        if queue == 0 {
            self.stats.rx_bytes += bytes;
        }
    }

    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        DevError::check_queue(queue, 1)?;
        if batch.is_empty() {
            return Ok(0);
        }
        let pool = &self.wire.pool;
        let ours = batch.as_slice().iter().take_while(|p| packet_in_pool(p, pool)).count();
        if ours == 0 {
            return Err(wrong_pool("the first packet handed to tx_burst", pool.id()));
        }
        if self.is_peer_gone() {
            for packet in batch.drain_front(ours) {
                self.stats.tx_dropped += 1;
                drop(packet);
            }
            return Ok(ours);
        }
        let mut sent = 0;
        while sent < ours {
            // One producer: the free space read here can only grow, so all `fits` frames fit. They
            // leave the batch in one drain (one move of the frames behind them, not one per chunk).
            let fits = (ours - sent).min(self.tx.free_space());
            if fits == 0 {
                break;
            }
            let mut frames = batch.drain_front(fits);
            let mut left = fits;
            while left > 0 {
                let n = left.min(BURST);
                let mut bytes = 0;
                // `zip` asks the scratch slots first, so it takes exactly `n` frames from the drain.
                for (slot, packet) in self.scratch[..n].iter_mut().zip(frames.by_ref()) {
                    bytes += packet.len() as u64;
                    *slot = packet.into_raw();
                }
                let pushed = self.tx.push_burst(&self.scratch[..n]);
                if pushed < n {
                    self.free_unsent(&self.scratch[pushed..n]);
                    self.stats.tx_dropped += (n - pushed) as u64;
                }
                self.stats.tx_packets += pushed as u64;
                self.stats.tx_bytes += bytes;
                left -= n;
            }
            sent += fits;
        }
        Ok(sent)
    }

    /// [`Pair::wait`] bounded by `timeout`: returns when a frame is ready, the timeout passed, or at
    /// once when the other end is gone and the wire drained (`rx_burst` then reports it).
    fn wait_rx(&mut self, queue: u16, timeout: Option<Duration>) -> Result<(), DevError> {
        DevError::check_queue(queue, 1)?;
        let _ = self.wait(timeout);
        Ok(())
    }
}

/// The checks both receive paths of a [`Pair`] start with: the queue, the cache's pool, the wire.
/// Returns the receiving channel and the pool's buffer count.
#[inline(always)]
fn receiving<'a>(
    rx: &'a mut Option<Consumer>,
    wire: &Wire,
    queue: u16,
    cache: &PoolCache,
) -> Result<(&'a mut Consumer, u32), DevError> {
    DevError::check_queue(queue, 1)?;
    let pool = &wire.pool;
    if cache.pool().id() != pool.id() {
        return Err(wrong_pool("the cache passed to rx_burst", pool.id()));
    }
    let Some(rx) = rx.as_mut() else {
        return Err(DevError::Failed(io::Error::from(io::ErrorKind::NotConnected)));
    };
    Ok((rx, pool.buffers()))
}

/// The error of a receive on pair end `name` that found the wire empty and the peer gone. (Acquire in
/// the caller's `is_abandoned` made every frame the peer sent before it left visible to its
/// emptiness check.)
#[cold]
fn hung_up(name: &str) -> DevError {
    DevError::Failed(io::Error::new(
        io::ErrorKind::NotConnected,
        format!("{name}: the other end of the pair was dropped"),
    ))
}

/// Returns to `cache` the buffers of `indices`, popped but not received (unreachable: see
/// `Pair::rx_burst`); returns how many.
#[cold]
#[inline(never)]
fn drop_unreceived(cache: &PoolCache, indices: &[u32]) -> u64 {
    // SAFETY: the caller popped these indices of `cache`'s pool (checked in range) from the wire, so
    // it owns them, and made no packet of them.
    unsafe { cache.free_burst(indices) };
    indices.len() as u64
}

/// What `receive_checked` did.
struct ReceivedChecked {
    /// Packets appended to the batch.
    packets: usize,
    /// Their bytes.
    bytes: u64,
    /// Indices outside the pool, skipped.
    errors: u64,
    /// Packets the batch had no room for (unreachable), returned to the cache.
    dropped: u64,
}

/// What a burst popped off the wire holds, as [`classify`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Burst {
    /// Plain buffer indices of the pool only.
    Indices,
    /// Plain indices and frames' tokens (a send by reference), every buffer index in the pool.
    Tokens,
    /// A token out of the pool (unreachable): the per-index path that counts and skips it.
    Checked,
}

/// Classifies `tokens` against a pool of `buffers` buffers in passes that vectorize: the OR of the
/// tokens bounds each of them, so a burst of plain indices costs one pass (pools hold at most
/// [`MAX_BUFFERS`](crate::pool::MAX_BUFFERS) < `FRAME_TAG` buffers, so any frame's token fails it);
/// the same OR without the tag bit bounds the buffer indices of a burst holding frames; only when
/// both fail (a bound that is not a power of two) is the exact maximum taken.
#[inline]
fn classify(tokens: &[u32], buffers: u32) -> Burst {
    let or = tokens.iter().fold(0, |acc, &t| acc | t);
    if or < buffers {
        return Burst::Indices;
    }
    let in_range =
        or & !FRAME_TAG < buffers || tokens.iter().fold(0, |acc, &t| acc.max(t & !FRAME_TAG)) < buffers;
    match (in_range, or & FRAME_TAG != 0) {
        (false, _) => Burst::Checked,
        (true, false) => Burst::Indices,
        (true, true) => Burst::Tokens,
    }
}

/// Rebuilds the packets of `tokens` (plain buffer indices, [`PoolCache::packet_from_raw`], and
/// frames' tokens, [`PoolCache::frame_from_raw`]) into `batch`'s room, as many as it has room for,
/// and returns how many and the sum of their lengths: the receive path of a burst holding frames
/// of shared buffers, one branch per token and no per-packet room check.
///
/// # Safety
///
/// As [`packet_from_token`] for each token, every buffer index (the token without `FRAME_TAG`)
/// below the pool's count. The tokens past the returned count are left to the caller, who still
/// owns them.
#[inline]
unsafe fn extend_from_tokens<'c>(
    batch: &mut PacketBatch<'c>,
    cache: &'c PoolCache,
    tokens: &[u32],
) -> (usize, u64) {
    let n = tokens.len().min(batch.remaining());
    let len = batch.packets.len();
    // The storage was made with `capacity` slots and never holds more, so the spare capacity has room
    // for `remaining()` packets.
    let Some(slots) = batch.packets.spare_capacity_mut().get_mut(..n) else {
        return (0, 0);
    };
    let mut bytes = 0;
    for (slot, &token) in slots.iter_mut().zip(tokens) {
        let packet = if token & FRAME_TAG == 0 {
            // SAFETY: the caller's contract: a plain index of the pool, owned, no packet of it.
            unsafe { cache.packet_from_raw(token) }
        } else {
            // SAFETY: the caller's contract: a frame's token, its index in range, owned.
            unsafe { cache.frame_from_raw(token) }
        };
        bytes += packet.len() as u64;
        slot.write(packet);
    }
    // SAFETY: the loop initialized the `n` slots after the first `len` (`slots` has `n` of them and
    // `tokens` at least `n`).
    unsafe { batch.packets.set_len(len + n) };
    (n, bytes)
}

/// The per-index path of `Pair::rx_burst` for a burst holding a token outside the pool
/// (unreachable: see there): rebuilds the packets of the valid tokens into `batch` and skips the
/// others.
#[cold]
#[inline(never)]
fn receive_checked<'c>(
    indices: &[u32],
    buffers: u32,
    cache: &'c PoolCache,
    batch: &mut PacketBatch<'c>,
) -> ReceivedChecked {
    #[cfg(test)]
    CHECKED_BURSTS.with(|c| c.set(c.get() + 1));
    let (mut packets, mut bytes, mut errors, mut dropped) = (0, 0, 0, 0);
    for &index in indices {
        // SAFETY: as in `Pair::rx_burst`; a frame of a shared buffer (a send by reference) arrives
        // as the frame it was, its token handed over by the peer's `into_raw`.
        let Some(packet) = (unsafe { packet_from_token(cache, buffers, index) }) else {
            errors += 1;
            continue;
        };
        let len = packet.len() as u64;
        // Unreachable: the caller popped no more indices than the batch has room for. A packet
        // refused goes back to `cache` and counts as dropped.
        if batch.push(packet).is_ok() {
            packets += 1;
            bytes += len;
        } else {
            dropped += 1;
        }
    }
    ReceivedChecked { packets, bytes, errors, dropped }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load in the peer's `is_peer_gone`.
        self.wire.gone[self.side].store(true, Ordering::Release);
        if let Some(rx) = self.rx.take() {
            self.wire.orphans.lock().unwrap_or_else(PoisonError::into_inner).push(rx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{HugePages, Packet, SharedPacket};

    fn pool(buffers: u32) -> Pool {
        Pool::builder(buffers).hugepages(HugePages::Never).batch(8).cache_size(16).build().unwrap()
    }

    fn frame<'c>(cache: &'c PoolCache, tag: u8, len: usize) -> crate::pool::Packet<'c> {
        let mut p = cache.alloc().expect("pool has room");
        p.set_len(len).unwrap();
        p.data_mut().fill(tag);
        p
    }

    #[test]
    fn ends_are_send_and_distinct() {
        fn send<T: Send>() {}
        send::<Pair>();
        let pool = pool(16);
        let (a, b) = Pair::builder(&pool).mtu(9000).build().unwrap();
        let (ia, ib) = (a.info(), b.info());
        assert_ne!(ia.mac, ib.mac);
        assert_ne!(ia.name, ib.name);
        for mac in [ia.mac, ib.mac] {
            assert!(mac.is_local() && !mac.is_multicast(), "{mac}");
        }
        assert_eq!((ia.mtu, ia.queues), (9000, 1));
        let (c, _d) = Pair::new(&pool).unwrap();
        assert_ne!(c.info().mac, ia.mac);
        assert_eq!(c.info().mtu, 1500);
        assert_eq!(a.link(), Link::Up { speed_mbps: None });
    }

    /// A frame of a shared buffer (a send by reference) arrives whole, mixed with plain packets,
    /// and the frame bit comes back when the receiver drops it; one left on the wire when both ends
    /// go is released too. Without the rebuild in `receive_checked` the frame was counted as an
    /// error and its reference leaked.
    #[test]
    fn frames_of_shared_buffers_arrive_and_are_released() {
        let pool = pool(64);
        let (mut a, mut b) = Pair::builder(&pool).capacity(16).build().unwrap();
        let cache = pool.cache();
        let mut payload = cache.alloc().unwrap();
        payload.extend_from_slice(&[7u8; 300]).unwrap();
        let shared = payload.into_shared().unwrap();
        let mut batch = PacketBatch::with_capacity(8);
        batch.push(frame(&cache, 1, 60)).unwrap();
        let mut f = shared.frame(&cache, 54).unwrap();
        f.data_mut().fill(9);
        batch.push(f).unwrap();
        batch.push(frame(&cache, 2, 61)).unwrap();
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 3);
        assert!(shared.frame_in_flight());
        assert_eq!(b.rx_burst(0, &cache, &mut batch).unwrap(), 3);
        assert_eq!(b.stats().rx_errors, 0);
        let got: Vec<(bool, usize)> = batch.as_slice().iter().map(|p| (p.is_frame(), p.len())).collect();
        assert_eq!(got, [(false, 60), (true, 354), (false, 61)]);
        let f = &batch.as_slice()[1];
        assert!(f.data()[..54].iter().all(|&x| x == 9) && f.data()[54..].iter().all(|&x| x == 7));
        batch.clear();
        assert!(!shared.frame_in_flight(), "dropping the received frame releases it");
        // A frame still on the wire when both ends go.
        batch.push(shared.frame(&cache, 54).unwrap()).unwrap();
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 1);
        drop((a, b, shared, batch));
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn bursts_are_classified_by_their_tokens() {
        let tag = FRAME_TAG;
        assert_eq!(classify(&[], 4), Burst::Indices);
        assert_eq!(classify(&[1, 2, 3], 4), Burst::Indices);
        // The OR (7) fails a bound that is not a power of two; the maximum passes it.
        assert_eq!(classify(&[3, 4], 6), Burst::Indices);
        assert_eq!(classify(&[1 | tag, 2], 4), Burst::Tokens);
        assert_eq!(classify(&[3 | tag, 4], 6), Burst::Tokens);
        assert_eq!(classify(&[6], 6), Burst::Checked);
        assert_eq!(classify(&[1, 6 | tag], 6), Burst::Checked);
        assert_eq!(classify(&[u32::MAX], 6), Burst::Checked);
    }

    /// Bursts holding frames of shared buffers (a send by reference) are received in one pass, by
    /// `rx_burst` and `rx_burst_raw`, and never through the per-index path, which only a token
    /// outside the pool still takes (counted in `rx_errors`). Before, every burst holding a frame
    /// took the per-index path.
    #[test]
    fn bursts_of_frames_skip_the_per_index_path() {
        // 48 buffers: a bound that is not a power of two, so both bounds checks are exercised.
        let pool = pool(48);
        let (mut a, mut b) = Pair::builder(&pool).capacity(64).build().unwrap();
        let cache = pool.cache();
        let checked = || CHECKED_BURSTS.with(std::cell::Cell::get);
        let before = checked();
        let shared: Vec<SharedPacket> = (0..4u8)
            .map(|i| {
                let mut p = cache.alloc().unwrap();
                p.extend_from_slice(&[i; 100]).unwrap();
                p.into_shared().unwrap()
            })
            .collect();
        let send = |a: &mut Pair, with_plain: bool| {
            let mut batch = PacketBatch::with_capacity(16);
            for (s, tag) in shared.iter().zip(10u8..) {
                if with_plain {
                    batch.push(frame(&cache, tag, 60)).unwrap();
                }
                let mut f = s.frame(&cache, 14).unwrap();
                f.data_mut()[..14].fill(tag);
                batch.push(f).unwrap();
            }
            let n = batch.len();
            assert_eq!(a.tx_burst(0, &mut batch).unwrap(), n);
        };
        send(&mut a, true);
        let mut batch = PacketBatch::with_capacity(16);
        assert_eq!(b.rx_burst(0, &cache, &mut batch).unwrap(), 8);
        let got: Vec<(bool, usize, u8)> =
            batch.as_slice().iter().map(|p| (p.is_frame(), p.len(), p.data()[0])).collect();
        let want: Vec<(bool, usize, u8)> =
            (10..14).flat_map(|tag| [(false, 60, tag), (true, 114, tag)]).collect();
        assert_eq!(got, want);
        for (f, i) in batch.as_slice().iter().filter(|p| p.is_frame()).zip(0u8..) {
            assert!(f.data()[14..].iter().all(|&x| x == i), "the shared payload behind the headers");
        }
        assert_eq!((b.stats().rx_packets, b.stats().rx_bytes, b.stats().rx_errors), (8, 4 * 174, 0));
        assert_eq!(checked(), before, "no burst took the per-index path");
        batch.clear();
        assert!(shared.iter().all(|s| !s.frame_in_flight()), "dropping the frames released them");

        // Frames alone, through the raw receive: packets in `batch`, nothing in `raw`.
        send(&mut a, false);
        let mut raw = RawBatch::with_capacity(16);
        let got = b.rx_burst_raw(0, &cache, &mut raw, &mut batch).unwrap();
        assert_eq!((got, raw.len()), (RawReceived { indices: 0, packets: 4 }, 0));
        assert!(batch.as_slice().iter().all(|p| p.is_frame() && p.len() == 114));
        assert_eq!(checked(), before, "no burst took the per-index path");
        batch.clear();

        // A token outside the pool (only a broken peer could push one) takes the per-index path.
        assert_eq!(a.tx.push_burst(&[1000, 1000 | FRAME_TAG]), 2);
        assert_eq!(b.rx_burst(0, &cache, &mut batch).unwrap(), 0);
        assert_eq!((b.stats().rx_errors, checked()), (2, before + 1));
        drop((a, b, shared, batch, raw));
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn rx_burst_raw_hands_over_indices_and_frames_of_shared_buffers_as_packets_after_them() {
        let pool = pool(64);
        let (mut a, mut b) = Pair::builder(&pool).capacity(64).build().unwrap();
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(8);
        let mut raw = RawBatch::with_capacity(8);
        // Plain buffers cross as indices: no packet is built and no header read; their bytes reach
        // the counters from the caller, who reads the frames.
        for (tag, len) in [(1, 60), (2, 70), (3, 80)] {
            batch.push(frame(&cache, tag, len)).unwrap();
        }
        let sent: Vec<u32> = batch.as_slice().iter().map(Packet::index).collect();
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 3);
        let got = b.rx_burst_raw(0, &cache, &mut raw, &mut batch).unwrap();
        assert_eq!(got, RawReceived { indices: 3, packets: 0 });
        assert_eq!((raw.as_slice(), batch.len()), (&sent[..], 0));
        assert_eq!((b.stats().rx_packets, b.stats().rx_bytes), (3, 0));
        let frames = cache.raw_frames();
        let mut bytes = 0;
        for (&index, tag) in raw.as_slice().iter().zip(1u8..) {
            // SAFETY: received above, ours, no packet made of it.
            let data = unsafe { frames.data(index) };
            assert!(data.iter().all(|&x| x == tag));
            bytes += data.len() as u64;
        }
        b.count_raw_rx_bytes(1, bytes);
        assert_eq!(b.stats().rx_bytes, 0, "a pair has one queue");
        b.count_raw_rx_bytes(0, bytes);
        assert_eq!((b.stats().rx_packets, b.stats().rx_bytes), (3, 210));
        let free = |raw: &mut RawBatch| {
            // SAFETY: the indices are ours (received), freed once here...
            unsafe { cache.free_burst(raw.as_slice()) };
            // SAFETY: ...and forgotten by the batch.
            unsafe { raw.forget_all() };
        };
        free(&mut raw);
        // A chunk holding a frame of a shared buffer arrives as packets, in order, and nothing more
        // goes to the raw batch after it.
        let mut payload = cache.alloc().unwrap();
        payload.extend_from_slice(&[7u8; 300]).unwrap();
        let shared = payload.into_shared().unwrap();
        batch.push(frame(&cache, 4, 60)).unwrap();
        batch.push(shared.frame(&cache, 54).unwrap()).unwrap();
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 2);
        let got = b.rx_burst_raw(0, &cache, &mut raw, &mut batch).unwrap();
        assert_eq!(got, RawReceived { indices: 0, packets: 2 });
        assert!(raw.is_empty());
        let kinds: Vec<(bool, usize)> = batch.as_slice().iter().map(|p| (p.is_frame(), p.len())).collect();
        assert_eq!(kinds, [(false, 60), (true, 354)]);
        assert_eq!((b.stats().rx_packets, b.stats().rx_bytes, b.stats().rx_errors), (5, 624, 0));
        batch.clear();
        // The room of the smaller batch bounds the receive.
        let mut small = PacketBatch::with_capacity(1);
        let mut sent = PacketBatch::with_capacity(8);
        sent.push(frame(&cache, 5, 60)).unwrap();
        sent.push(frame(&cache, 6, 60)).unwrap();
        assert_eq!(a.tx_burst(0, &mut sent).unwrap(), 2);
        assert_eq!(b.rx_burst_raw(0, &cache, &mut raw, &mut small).unwrap().indices, 1);
        free(&mut raw);
        assert_eq!(b.rx_burst(0, &cache, &mut batch).unwrap(), 1);
        drop((a, b, shared, batch, small, sent));
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn frames_cross_both_ways_without_copies() {
        let pool = pool(64);
        let (mut a, mut b) = Pair::builder(&pool).capacity(16).build().unwrap();
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(8);
        let mut sent = Vec::new();
        for i in 0..5u8 {
            let p = frame(&cache, i, 60 + usize::from(i));
            sent.push(p.index());
            batch.push(p).unwrap();
        }
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 5);
        assert!(batch.is_empty());
        assert_eq!(b.rx_burst(0, &cache, &mut batch).unwrap(), 5);
        for (i, p) in batch.as_slice().iter().enumerate() {
            assert_eq!(p.index(), sent[i], "the same buffer crossed");
            assert_eq!(p.len(), 60 + i);
            assert!(p.data().iter().all(|&x| usize::from(x) == i));
        }
        // And back.
        assert_eq!(b.tx_burst(0, &mut batch).unwrap(), 5);
        assert_eq!(a.rx_burst(0, &cache, &mut batch).unwrap(), 5);
        assert_eq!(a.rx_burst(0, &cache, &mut batch).unwrap(), 0);
        drop(batch);
        let sa = a.stats();
        assert_eq!((sa.tx_packets, sa.rx_packets, sa.tx_bytes), (5, 5, 5 * 60 + 10));
        assert_eq!(sa.tx_bytes, sa.rx_bytes);
        assert_eq!(b.stats().rx_bytes, sa.tx_bytes);
        drop((a, b, cache));
        pool.check_leaks().unwrap();
    }

    #[test]
    fn a_full_wire_leaves_frames_in_the_batch() {
        let pool = pool(64);
        let (mut a, mut b) = Pair::builder(&pool).capacity(4).build().unwrap();
        assert_eq!(a.wire_capacity(), 4);
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(8);
        for i in 0..6 {
            batch.push(frame(&cache, i, 20)).unwrap();
        }
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 4);
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.as_slice()[0].data()[0], 4, "the unsent ones stay, in order");
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 0);
        assert_eq!(a.stats().tx_dropped, 0);
        let mut rx = PacketBatch::with_capacity(3);
        assert_eq!(b.rx_burst(0, &cache, &mut rx).unwrap(), 3, "limited by the batch");
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 2);
        rx.clear();
        assert_eq!(b.rx_burst(0, &cache, &mut rx).unwrap(), 3);
        assert_eq!(rx.as_slice().iter().map(|p| p.data()[0]).collect::<Vec<_>>(), [3, 4, 5]);
        drop((rx, batch));
        drop((a, b, cache));
        pool.check_leaks().unwrap();
    }

    #[test]
    fn other_pools_and_queues_are_refused() {
        let pool = pool(16);
        let other = self::pool(8);
        let (mut a, mut b) = Pair::new(&pool).unwrap();
        let cache = pool.cache();
        let foreign = other.cache();
        let mut fb = PacketBatch::with_capacity(4);
        assert!(matches!(b.rx_burst(0, &foreign, &mut fb), Err(DevError::WrongPool { .. })));
        let e = b.rx_burst(0, &foreign, &mut fb).unwrap_err();
        assert!(e.to_string().contains("another buffer pool"), "{e}");

        fb.push(frame(&foreign, 1, 10)).unwrap();
        assert!(matches!(a.tx_burst(0, &mut fb), Err(DevError::WrongPool { .. })));
        assert_eq!(fb.len(), 1, "the foreign packet stays with the caller");
        fb.clear();

        // A mixed batch is sent up to the first foreign packet.
        let mut batch = PacketBatch::with_capacity(4);
        batch.push(frame(&cache, 1, 10)).unwrap();
        batch.push(frame(&foreign, 2, 10)).unwrap();
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 1);
        assert_eq!(batch.len(), 1);
        batch.clear();

        assert!(matches!(a.tx_burst(1, &mut batch), Err(DevError::NoSuchQueue { queue: 1, queues: 1 })));
        assert!(matches!(a.rx_burst(7, &cache, &mut batch), Err(DevError::NoSuchQueue { queue: 7, .. })));
        assert_eq!(b.rx_burst(0, &cache, &mut batch).unwrap(), 1);
        drop((batch, fb));
        drop((a, b, cache, foreign));
        pool.check_leaks().unwrap();
        other.check_leaks().unwrap();
    }

    #[test]
    fn dropping_an_end_delivers_in_flight_frames_then_fails_and_leaks_nothing() {
        let pool = pool(64);
        let (mut a, mut b) = Pair::builder(&pool).capacity(8).build().unwrap();
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(8);
        for i in 0..3 {
            batch.push(frame(&cache, i, 30)).unwrap();
        }
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 3);
        // Frames in flight towards `a` when it is dropped.
        for i in 0..2 {
            batch.push(frame(&cache, 10 + i, 30)).unwrap();
        }
        assert_eq!(b.tx_burst(0, &mut batch).unwrap(), 2);
        drop(a);
        assert!(b.is_peer_gone());
        assert_eq!(b.link(), Link::Down);
        assert_eq!(b.rx_burst(0, &cache, &mut batch).unwrap(), 3);
        batch.clear();
        let e = b.rx_burst(0, &cache, &mut batch).unwrap_err();
        assert!(e.to_string().contains("dropped"), "{e}");
        assert!(b.wait(Some(Duration::from_millis(10))).is_closed());
        // Sending to nobody: accepted, dropped, counted.
        batch.push(frame(&cache, 20, 30)).unwrap();
        assert_eq!(b.tx_burst(0, &mut batch).unwrap(), 1);
        assert_eq!(b.stats().tx_dropped, 1);
        assert_eq!(b.stats().tx_packets, 2);
        assert!(pool.audit().outstanding >= 2, "the two frames in flight to `a` are not lost yet");
        drop(batch);
        drop((b, cache));
        pool.check_leaks().unwrap();
    }

    #[test]
    fn wait_rx_sleeps_until_a_frame_or_the_timeout_and_not_on_a_closed_wire() {
        let pool = pool(16);
        let (mut a, mut b) = Pair::new(&pool).unwrap();
        let cache = pool.cache();
        assert!(matches!(b.wait_rx(1, None), Err(DevError::NoSuchQueue { queue: 1, queues: 1 })));
        let start = std::time::Instant::now();
        b.wait_rx(0, Some(Duration::from_millis(30))).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(30), "nothing came: it waited");
        let mut batch = PacketBatch::with_capacity(4);
        batch.push(frame(&cache, 1, 60)).unwrap();
        a.tx_burst(0, &mut batch).unwrap();
        let start = std::time::Instant::now();
        b.wait_rx(0, Some(Duration::from_secs(10))).unwrap();
        assert!(start.elapsed() < Duration::from_secs(5), "a frame is ready: at once");
        assert_eq!(b.rx_burst(0, &cache, &mut batch).unwrap(), 1);
        batch.clear();
        drop(a);
        let start = std::time::Instant::now();
        b.wait_rx(0, None).unwrap();
        assert!(start.elapsed() < Duration::from_secs(5), "a closed wire: at once");
        drop(batch);
        drop((b, cache));
        pool.check_leaks().unwrap();
    }

    #[test]
    fn ends_work_from_two_threads() {
        const FRAMES: u32 = 20_000;
        let pool = pool(512);
        let (mut a, mut b) = Pair::builder(&pool).capacity(64).build().unwrap();
        let echo = std::thread::spawn(move || {
            let cache = b.pool().cache();
            let mut batch = PacketBatch::with_capacity(32);
            let mut echoed = 0;
            while echoed < FRAMES {
                if batch.is_empty() {
                    let _ = b.wait(Some(Duration::from_secs(5)));
                    b.rx_burst(0, &cache, &mut batch).unwrap();
                }
                echoed += u32::try_from(b.tx_burst(0, &mut batch).unwrap()).unwrap();
            }
            b
        });
        let cache = pool.cache();
        let mut out = PacketBatch::with_capacity(32);
        let mut back = PacketBatch::with_capacity(32);
        let (mut sent, mut seen) = (0u32, 0u32);
        while seen < FRAMES {
            while sent < FRAMES && !out.is_full() {
                let mut p = cache.alloc().unwrap();
                p.extend_from_slice(&sent.to_le_bytes()).unwrap();
                out.push(p).unwrap();
                sent += 1;
            }
            a.tx_burst(0, &mut out).unwrap();
            a.rx_burst(0, &cache, &mut back).unwrap();
            for p in back.drain() {
                assert_eq!(p.data(), seen.to_le_bytes(), "in order, intact");
                seen += 1;
            }
        }
        let b = echo.join().unwrap();
        assert_eq!(b.stats().rx_packets, u64::from(FRAMES));
        drop((out, back));
        drop((a, b, cache));
        pool.check_leaks().unwrap();
    }
}
