//! The channelizer: the driver loop of one RX queue (Van Jacobson & Felderman, "Speeding up
//! Networking", LCA 2006: "channelize the driver").
//!
//! Each [`Channelizer::poll`] receives a burst from its device queue (as buffer indices where the device
//! holds them, [`NetDevice::rx_burst_raw`], so no packet is built per frame, and the lengths it reads
//! are summed for the device's byte counter, [`NetDevice::count_raw_rx_bytes`]), classifies every frame
//! ([`classify`](crate::classify::classify)), looks its transport signature up in the [registry](crate::registry) (exact 5-tuple
//! first, then the listener), and pushes the packet into the channel of the consumer the registry
//! names, waking that consumer if it sleeps. Everything else (ARP, ICMP, fragments, signatures nobody
//! registered) goes to the queue's *default channel*, where the stack's slow path handles it. A full
//! channel means the packet is dropped, counted, and its buffer returned to the pool: the driver side
//! never blocks. Malformed frames are counted and dropped here rather than handed to anyone. After the
//! burst the channelizer announces a quiescent state to the registry's reclaimer, once per burst.
//!
//! In the other direction, each consumer's TX channel is drained into the device queue, oldest
//! first; what the device cannot take yet waits for the next poll (backpressure, no drops).
//!
//! Consumers are named by [`ConsumerId`]s: small indices into every channelizer's table of channels.
//! With several RX queues each consumer has one channel per queue (channels are single-producer), and
//! the registry stores the id, so re-pointing a signature to another consumer (a stolen connection)
//! moves its packets on every queue at once.
//!
//! ```
//! use std::net::SocketAddr;
//! use std::sync::Arc;
//!
//! use netchannel::channelizer::{Channelizer, ConsumerId, SignatureRegistry};
//! use netchannel::dev::{NetDevice, PacketBatch, Pair};
//! use netchannel::pool::{HugePages, Pool};
//! use netchannel::rcu::Qsbr;
//! use netchannel::signature::{Proto, Signature};
//!
//! let pool = Pool::builder(256).hugepages(HugePages::Never).build()?;
//! let (nic, mut wire) = Pair::new(&pool)?;
//! let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
//! let cache = pool.cache();
//! let (default_tx, mut default_rx) = pool.packet_channel(64)?;
//! let mut ch = Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx).burst(32).build()?;
//!
//! // Consumer 7 listens on UDP 10.0.0.1:53.
//! let (tx, mut rx) = pool.packet_channel(64)?;
//! ch.attach(ConsumerId(7), tx).expect("same pool");
//! let local: SocketAddr = "10.0.0.1:53".parse()?;
//! let _registration = registry.register(Signature::listener(Proto::Udp, local), ConsumerId(7))?;
//!
//! // A UDP datagram to that port arrives on the wire.
//! let frame = [
//!     &[0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00][..], // Ethernet
//!     &[0x45, 0, 0, 30, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1], // IPv4
//!     &[0x30, 0x39, 0, 53, 0, 10, 0, 0, b'h', b'i'], // UDP 12345 -> 53
//! ]
//! .concat();
//! let peer_cache = pool.cache();
//! let mut batch = PacketBatch::with_capacity(1);
//! let mut packet = peer_cache.alloc().expect("a free buffer");
//! packet.extend_from_slice(&frame)?;
//! batch.push(packet).expect("room");
//! wire.tx_burst(0, &mut batch)?;
//!
//! ch.poll()?;
//! let received = rx.pop(&cache).expect("delivered to consumer 7");
//! assert_eq!(received.data(), &frame[..]);
//! assert!(default_rx.pop(&cache).is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use crate::classify::{Classified, ClassifyStats, classify_fast, classify_general};
use crate::dev::{DevError, NetDevice, PacketBatch, RawBatch};
use crate::pool::{PacketRx, PacketTx, PoolCache};
use crate::rcu::{Qsbr, ReadSide, Reclaim};
use crate::registry::Registry;
use crate::signature::Signature;
use crate::sync::Arc;

/// Names a consumer (a core's stack, an application thread): the value the registry stores for each
/// signature, and the index of that consumer's channel in every channelizer (below
/// [`MAX_CONSUMERS`]: a channelizer's tables grow with the largest id attached).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConsumerId(pub u32);

/// The registry a channelizer reads: transport signatures to consumers.
pub type SignatureRegistry<R = Qsbr> = Registry<crate::signature::Signature, ConsumerId, R>;

/// What a channelizer has done since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelizerStats {
    /// Calls to [`Channelizer::poll`].
    pub polls: u64,
    /// Frames received from the device.
    pub rx: u64,
    /// Frames delivered to a registered consumer's channel.
    pub delivered: u64,
    /// Frames delivered to the default channel (no registered signature, or not a TCP/UDP flow).
    pub to_default: u64,
    /// Frames whose signature is registered to a consumer that has no channel attached here; they go
    /// to the default channel (and are also counted in `to_default`).
    pub unattached: u64,
    /// Frames dropped because their channel (a consumer's or the default) was full.
    pub dropped_full: u64,
    /// Malformed frames, dropped.
    pub dropped_malformed: u64,
    /// Frames taken from consumers' TX channels and accepted by the device.
    pub tx: u64,
    /// The classifier's verdicts.
    pub classify: ClassifyStats,
}

/// What one [`Channelizer::poll`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct PollStats {
    /// Frames received.
    pub rx: usize,
    /// Frames transmitted.
    pub tx: usize,
}

/// The burst a [`ChannelizerBuilder`] uses unless told otherwise: the most frames one poll receives.
pub const DEFAULT_BURST: usize = 32;

/// Why [`ChannelizerBuilder::build`] refused its parts (a set-up error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChannelizerError {
    /// The default channel carries packets of another pool than the cache's.
    #[error(
        "the default channel is of another pool (pool {default}) than the channelizer's cache (pool {cache})"
    )]
    WrongPool {
        /// The [id](crate::pool::Pool::id) of the default channel's pool.
        default: u64,
        /// The id of the cache's pool.
        cache: u64,
    },
}

/// Configures a [`Channelizer`] before it is built. See [`Channelizer::builder`].
#[must_use]
pub struct ChannelizerBuilder<'c, D: NetDevice, R: Reclaim = Qsbr> {
    device: D,
    queue: u16,
    cache: &'c PoolCache,
    registry: Arc<SignatureRegistry<R>>,
    default: PacketTx,
    burst: usize,
}

impl<D: NetDevice, R: Reclaim> fmt::Debug for ChannelizerBuilder<'_, D, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelizerBuilder")
            .field("queue", &self.queue)
            .field("burst", &self.burst)
            .field("default", &self.default)
            .finish_non_exhaustive()
    }
}

impl<'c, D: NetDevice, R: Reclaim> ChannelizerBuilder<'c, D, R> {
    /// The device queue to receive from and transmit on (0 by default).
    pub fn queue(mut self, queue: u16) -> Self {
        self.queue = queue;
        self
    }

    /// The most frames one poll receives ([`DEFAULT_BURST`] by default; 0 counts as 1).
    pub fn burst(mut self, frames: usize) -> Self {
        self.burst = frames;
        self
    }

    /// Checks the parts and builds the channelizer, which registers itself as a reader of the
    /// registry's reclaimer, on this thread: build it on the thread that will poll it.
    ///
    /// # Errors
    ///
    /// [`ChannelizerError::WrongPool`] if the default channel carries packets of another pool than
    /// the cache's.
    pub fn build(self) -> Result<Channelizer<'c, D, R>, ChannelizerError> {
        let Self { device, queue, cache, registry, default, burst } = self;
        if default.pool_id() != cache.pool().id() {
            return Err(ChannelizerError::WrongPool { default: default.pool_id(), cache: cache.pool().id() });
        }
        let reader = registry.reclaim().register();
        let burst = burst.max(1);
        Ok(Channelizer {
            device,
            queue,
            cache,
            registry,
            reader,
            staging: Staging {
                default: Lane::new(default, burst),
                lanes: Lanes::default(),
                dirty: vec![0; burst].into_boxed_slice(),
                malformed: vec![0; burst].into_boxed_slice(),
                burst,
                n_dirty: 0,
                n_malformed: 0,
                n_slow: 0,
                n_default: 0,
                raw_bytes: 0,
            },
            tx_channels: Vec::new(),
            rx_raw: RawBatch::with_capacity(burst),
            rx_batch: PacketBatch::with_capacity(burst),
            tx_batch: PacketBatch::with_capacity(burst),
            stats: ChannelizerStats::default(),
        })
    }
}

/// A destination channel and the buffer indices staged for it during the current burst: each burst
/// reaches each channel with one `push_burst`, so one index publication and one wakeup check per
/// consumer per burst (VJ's publish-per-burst), not per packet. The default channel's lane.
struct Lane {
    tx: PacketTx,
    /// Room for one burst: a burst's indices, as many as `Staging::n_default` says.
    staged: Box<[u32]>,
}

impl Lane {
    fn new(tx: PacketTx, burst: usize) -> Self {
        Self { tx, staged: vec![0; burst].into_boxed_slice() }
    }
}

/// The consumers' lanes, indexed by consumer id: the registry's value indexes them directly, so the
/// per-packet dispatch is one bounds check, one load of the id's count and two stores into its block.
#[derive(Default)]
struct Lanes {
    /// Each id's channel on this queue, if one is attached (else its packets go to the default
    /// channel, counted as unattached).
    tx: Vec<Option<PacketTx>>,
    /// One block of `burst + 1` words per id (as many as `tx`): how many indices the id has staged in
    /// this burst, then room for a burst of them. Count and indices share a block, so that the hot
    /// loop keeps one base and one stride in registers.
    blocks: Vec<u32>,
}

/// The most consumer ids a channelizer takes ([`Channelizer::attach`] refuses ids from here on): the
/// tables above grow with the largest id, a burst of `u32`s per id.
pub const MAX_CONSUMERS: u32 = 1 << 16;

/// The id that stands for the default channel in the staging's `dirty` list.
const DEFAULT_DIRTY: u32 = u32::MAX;

/// The driver loop of one device queue. See the [module documentation](self).
pub struct Channelizer<'c, D: NetDevice, R: Reclaim = Qsbr> {
    device: D,
    queue: u16,
    cache: &'c PoolCache,
    registry: Arc<SignatureRegistry<R>>,
    reader: R::Reader,
    /// The lanes a burst is staged in, and its cursors.
    staging: Staging,
    tx_channels: Vec<PacketRx>,
    /// What the device hands over as buffer indices ([`NetDevice::rx_burst_raw`]): read in place, no
    /// packet built.
    rx_raw: RawBatch,
    /// What it hands over as packets (a device without indices, a frame of a shared buffer).
    rx_batch: PacketBatch<'c>,
    tx_batch: PacketBatch<'c>,
    stats: ChannelizerStats,
}

impl<D: NetDevice, R: Reclaim> fmt::Debug for Channelizer<'_, D, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channelizer")
            .field("queue", &self.queue)
            .field("consumers", &self.staging.lanes.tx.iter().flatten().count())
            .field("tx_channels", &self.tx_channels.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<'c, D: NetDevice, R: Reclaim> Channelizer<'c, D, R> {
    /// Starts configuring a channelizer of `device` that allocates receive buffers from `cache`, reads
    /// `registry` and sends what no consumer claims into `default`. It polls queue 0 with bursts of
    /// [`DEFAULT_BURST`] frames unless told otherwise; see [`ChannelizerBuilder`].
    pub fn builder(
        device: D,
        cache: &'c PoolCache,
        registry: Arc<SignatureRegistry<R>>,
        default: PacketTx,
    ) -> ChannelizerBuilder<'c, D, R> {
        ChannelizerBuilder { device, queue: 0, cache, registry, default, burst: DEFAULT_BURST }
    }

    /// Attaches consumer `id`'s channel for this queue; packets whose signature the registry maps to
    /// `id` go there. Returns the channel previously attached for `id`, if any.
    ///
    /// # Errors
    ///
    /// The channel comes back if it carries packets of another pool than this channelizer's cache,
    /// or if `id` is [`MAX_CONSUMERS`] or more.
    pub fn attach(&mut self, id: ConsumerId, channel: PacketTx) -> Result<Option<PacketTx>, PacketTx> {
        if channel.pool_id() != self.cache.pool().id() || id.0 >= MAX_CONSUMERS {
            return Err(channel);
        }
        let index = id.0 as usize;
        let lanes = &mut self.staging.lanes;
        if lanes.tx.len() <= index {
            let block = self.rx_batch.capacity() + 1;
            lanes.tx.resize_with(index + 1, || None);
            lanes.blocks.resize((index + 1) * block, 0);
        }
        Ok(lanes.tx.get_mut(index).and_then(|tx| tx.replace(channel)))
    }

    /// Detaches consumer `id`'s channel; its packets go to the default channel until the registry
    /// stops naming it.
    pub fn detach(&mut self, id: ConsumerId) -> Option<PacketTx> {
        self.staging.lanes.tx.get_mut(id.0 as usize)?.take()
    }

    /// Adds a TX channel (a consumer's outgoing packets) that every poll drains into the device queue.
    pub fn add_tx(&mut self, channel: PacketRx) {
        self.tx_channels.push(channel);
    }

    /// Whether every TX channel's producer is gone (the consumers have sent their last packet).
    #[must_use]
    pub fn tx_abandoned(&self) -> bool {
        self.tx_channels.iter().all(PacketRx::is_abandoned)
    }

    /// Whether every TX channel's producer is gone and everything they queued went to the device:
    /// a consumer that drops its TX channel once it is done sending lets the channelizer know when
    /// to stop without a flag of its own. Abandonment is checked before emptiness: a consumer side
    /// that sees the producer gone also sees every packet it pushed (the channel's close is a
    /// Release paired with this Acquire), so "abandoned, then empty" means nothing more can come.
    #[must_use]
    pub fn tx_finished(&mut self) -> bool {
        self.tx_batch.is_empty() && self.tx_channels.iter_mut().all(|c| c.is_abandoned() && c.is_empty())
    }

    /// The device.
    #[must_use]
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, mutably (for device-specific calls between polls).
    #[must_use]
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// Counters since creation.
    #[must_use]
    pub fn stats(&self) -> ChannelizerStats {
        self.stats
    }

    /// Receives and dispatches one burst, announces a quiescent state, then transmits what the
    /// consumers queued.
    ///
    /// # Errors
    ///
    /// The device's error; the frames already received in this poll have been dispatched.
    pub fn poll(&mut self) -> Result<PollStats, DevError> {
        self.stats.polls += 1;
        let rx = self.receive();
        // One quiescent state per burst: no reference into the registry survives this point.
        self.reader.quiescent();
        let rx = rx?;
        let tx = self.transmit()?;
        Ok(PollStats { rx, tx })
    }

    fn receive(&mut self) -> Result<usize, DevError> {
        let got = self.device.rx_burst_raw(self.queue, self.cache, &mut self.rx_raw, &mut self.rx_batch)?;
        let n = got.indices + got.packets;
        self.stats.rx += n as u64;
        let Self { device, queue, registry, reader, rx_raw, rx_batch, stats, staging, cache, .. } = self;
        let cache: &PoolCache = cache;
        let (indices, packets) = (rx_raw.as_slice(), rx_batch.as_slice());
        // One read-side section for the whole burst: the indices first (they arrived first), then
        // the packets. The staging lives in the channelizer, so the section's closure takes a few
        // pointers, not a burst's worth of fields copied in and out.
        let frames = cache.raw_frames();
        registry.read(reader, |view| {
            staging.dispatch::<_, _, true>(stats, view, indices, move |&index| {
                // SAFETY: the device handed each index over (`RawBatch`'s contract): a buffer of
                // `cache`'s pool that we own, with no packet; it stays ours until staged and
                // forgotten below.
                (index, unsafe { frames.data(index) })
            });
            if !packets.is_empty() {
                staging
                    .dispatch::<_, _, false>(stats, view, packets, |packet| (packet.index(), packet.data()));
            }
        });
        let Staging {
            default,
            lanes,
            dirty,
            malformed,
            burst,
            n_dirty,
            n_malformed,
            n_slow,
            n_default,
            raw_bytes,
        } = staging;
        let (n_dirty, n_malformed, n_default) =
            (std::mem::take(n_dirty), std::mem::take(n_malformed), std::mem::take(n_default));
        let (burst, block, ids) = (*burst, *burst + 1, lanes.tx.len());
        if got.indices > 0 {
            // The bytes of the indices, summed as they were read: the device's `rx_bytes`.
            device.count_raw_rx_bytes(*queue, std::mem::take(raw_bytes));
        }
        stats.classify.flows += (n - std::mem::take(n_slow)) as u64;
        // SAFETY: every index of the raw batch was staged in a lane or put in `malformed`, exactly
        // once (the cursors cannot run out: each holds a burst, and the device received at most one
        // burst in all).
        unsafe { rx_raw.forget_all() };
        // SAFETY: as above, for every packet of the batch, by its index.
        unsafe { rx_batch.forget_all() };
        if n_malformed > 0 {
            stats.dropped_malformed += n_malformed as u64;
            // SAFETY: the malformed indices came from packets received into `cache`, each once, with
            // no handle left: freeing them returns the buffers.
            unsafe { cache.free_burst(&malformed[..n_malformed]) };
        }
        let (blocks, tx) = (&mut lanes.blocks[..], &mut lanes.tx[..]);
        for &id in &dirty[..n_dirty] {
            let id = id as usize;
            if id >= ids {
                // `DEFAULT_DIRTY`, above every id a lane has (`ids <= MAX_CONSUMERS`): every other id
                // in `dirty` was staged by `Staging::dispatch`, which stages only ids below `ids`.
                debug_assert_eq!(id, DEFAULT_DIRTY as usize);
                let staged = default.staged.get(..n_default).unwrap_or_default();
                stats.to_default += flush(&mut default.tx, staged, cache, stats);
                continue;
            }
            let base = id * block;
            // SAFETY: `id < ids` (above), so `base < ids * block == blocks.len()`.
            let count = unsafe { blocks.get_unchecked_mut(base) };
            let n = std::mem::take(count) as usize;
            debug_assert!(n <= burst);
            // SAFETY: `n <= burst` (one burst staged at most), so `base + 1 + n <= base + block <=
            // blocks.len()`.
            let staged = unsafe { blocks.get_unchecked(base + 1..base + 1 + n) };
            // SAFETY: `id < ids == tx.len()`.
            match unsafe { tx.get_unchecked_mut(id) } {
                Some(tx) => stats.delivered += flush(tx, staged, cache, stats),
                None => {
                    // Attached once, detached since: the default channel, counted.
                    stats.unattached += n as u64;
                    stats.to_default += flush(&mut default.tx, staged, cache, stats);
                }
            }
        }
        Ok(n)
    }

    fn transmit(&mut self) -> Result<usize, DevError> {
        for channel in &mut self.tx_channels {
            while !self.tx_batch.is_full() {
                let Some(packet) = channel.pop(self.cache) else { break };
                // Cannot fail: the batch is not full.
                let _ = self.tx_batch.push(packet);
            }
        }
        if self.tx_batch.is_empty() {
            return Ok(0);
        }
        // What the device does not take stays in `tx_batch`, first in line for the next poll.
        let sent = self.device.tx_burst(self.queue, &mut self.tx_batch)?;
        self.stats.tx += sent as u64;
        Ok(sent)
    }
}

/// Where [`Staging::dispatch`] puts each frame's index, and the cursors of the burst under way
/// (zero between bursts: `receive` takes them back). Part of the channelizer, so that a burst's
/// dispatch reaches it through one pointer.
struct Staging {
    /// The default channel's lane; `n_default` indices staged.
    default: Lane,
    /// The consumers' lanes, by id.
    lanes: Lanes,
    /// Ids with packets staged in this burst ([`DEFAULT_DIRTY`] for the default lane), in the
    /// order of their first packet, `n_dirty` of them; room for one burst.
    dirty: Box<[u32]>,
    /// Indices of malformed frames of this burst, `n_malformed` of them, freed after it; room for one
    /// burst.
    malformed: Box<[u32]>,
    /// The most frames a burst has (the batches' capacity): a consumer's block is `burst + 1` words.
    burst: usize,
    n_dirty: usize,
    n_malformed: usize,
    /// Frames that missed the classifier's fast path.
    n_slow: usize,
    n_default: usize,
    /// The data lengths of the frames that arrived as indices, summed (for
    /// [`NetDevice::count_raw_rx_bytes`]).
    raw_bytes: u64,
}

impl Staging {
    /// Classifies each frame of `frames` (its index and data as `frame` reads them), looks its
    /// signature up and stages its index for its consumer, the default lane, or the malformed list.
    /// Written once for the device's indices and its packets; inlined into each, so that the cursors
    /// live in registers through the loop. (A slice and a reader rather than an iterator of pairs: an
    /// `Option` of a pair would be tested for its data pointer on every frame.) With `RAW_BYTES` it
    /// sums the frames' lengths into `raw_bytes`.
    #[inline(always)]
    fn dispatch<'d, T, R: Reclaim, const RAW_BYTES: bool>(
        &mut self,
        counters: &mut ChannelizerStats,
        view: &crate::registry::View<'_, Signature, ConsumerId, R>,
        frames: &'d [T],
        frame: impl Fn(&'d T) -> (u32, &'d [u8]),
    ) {
        // Staged and malformed frames, and dirty lanes, are at most one burst each, so the cursors
        // below stay inside their boxes; the checked accesses turn a broken invariant into a lost
        // buffer instead of a panic between staging and `forget_all`.
        let (ids, burst) = (self.lanes.tx.len(), self.burst);
        let block = burst + 1;
        let (blocks, default_staged) = (&mut self.lanes.blocks[..], &mut self.default.staged[..]);
        debug_assert_eq!(blocks.len(), ids * block);
        let (dirty_run, malformed_run) = (&mut self.dirty[..], &mut self.malformed[..]);
        let (mut n_dirty, mut n_malformed, mut n_slow, mut n_default) =
            (self.n_dirty, self.n_malformed, self.n_slow, self.n_default);
        let mut raw_bytes = self.raw_bytes;
        'packets: for item in frames {
            let (index, data) = frame(item);
            if RAW_BYTES {
                raw_bytes += data.len() as u64;
            }
            let id = 'found: {
                // The common case inlined: IPv4 TCP/UDP, the signature in registers through the
                // lookup; the listener's lookup only on a miss, out of line.
                if let Some(sig) = classify_fast(data) {
                    if let Some(id) = view.lookup(&sig) {
                        break 'found id.0 as usize;
                    }
                    let (meta, a0) = sig.v4_words();
                    if let Some(id) = lookup_listener_v4(view, meta, a0) {
                        break 'found id.0 as usize;
                    }
                } else {
                    n_slow += 1;
                    let verdict = classify_general(data);
                    counters.classify.record(&verdict);
                    match verdict {
                        Classified::Flow { sig, .. } => {
                            if let Some(id) = view.lookup(&sig).or_else(|| view.lookup(&sig.to_listener())) {
                                break 'found id.0 as usize;
                            }
                        }
                        Classified::Other(_) => {}
                        Classified::Malformed(_) => {
                            if let Some(slot) = malformed_run.get_mut(n_malformed) {
                                *slot = index;
                                n_malformed += 1;
                            }
                            continue 'packets;
                        }
                    }
                }
                // No consumer: the default lane.
                stage_default(default_staged, &mut n_default, dirty_run, &mut n_dirty, index);
                continue 'packets;
            };
            if id >= ids {
                // An id no channel here was ever attached for: the default lane, counted.
                counters.unattached += 1;
                stage_default(default_staged, &mut n_default, dirty_run, &mut n_dirty, index);
                continue;
            }
            // The consumer's block: its count, then its staged indices.
            let base = id * block;
            // SAFETY: `id < ids` (above) and `blocks.len() == ids * block` (`attach` grows both
            // together), so `base < blocks.len()`.
            let at = unsafe { *blocks.get_unchecked(base) } as usize;
            if at == 0
                && let Some(d) = dirty_run.get_mut(n_dirty)
            {
                #[expect(clippy::cast_possible_truncation, reason = "ids are below MAX_CONSUMERS")]
                let id = id as u32;
                *d = id;
                n_dirty += 1;
            }
            debug_assert!(at < burst);
            // SAFETY: `at < burst`: the count is reset by the flush after each burst, and one burst
            // has at most `burst` packets (the batch's capacity), each staged once. So `base + 1 +
            // at < base + block <= blocks.len()`.
            unsafe { *blocks.get_unchecked_mut(base + 1 + at) = index };
            // SAFETY: `base < blocks.len()`, as above.
            #[expect(clippy::cast_possible_truncation, reason = "`at < burst`, the batch's capacity")]
            unsafe {
                *blocks.get_unchecked_mut(base) = (at + 1) as u32;
            }
        }
        (self.n_dirty, self.n_malformed, self.n_slow, self.n_default, self.raw_bytes) =
            (n_dirty, n_malformed, n_slow, n_default, raw_bytes);
    }
}

/// The listener's lookup after the exact signature missed: out of line, so that the hit path keeps
/// the signature in registers.
#[cold]
#[inline(never)]
fn lookup_listener_v4<R: Reclaim>(
    view: &crate::registry::View<'_, Signature, ConsumerId, R>,
    meta: u64,
    a0: u64,
) -> Option<ConsumerId> {
    view.lookup(&Signature::from_v4_words(meta, a0).to_listener())
}

/// Stages `index` in the default lane (its first packet of the burst marks the lane dirty).
#[inline(always)]
fn stage_default(staged: &mut [u32], len: &mut usize, dirty: &mut [u32], n_dirty: &mut usize, index: u32) {
    let Some(slot) = staged.get_mut(*len) else { return };
    if *len == 0
        && let Some(d) = dirty.get_mut(*n_dirty)
    {
        *d = DEFAULT_DIRTY;
        *n_dirty += 1;
    }
    *slot = index;
    *len += 1;
}

/// Sends `staged` with one `push_burst` into `tx`, frees what does not fit (a full channel: drop and
/// count), and returns how many were sent. Only dirty lanes are flushed, so `staged` is never empty
/// (an empty one would be a `push_burst` of nothing).
#[inline(always)]
fn flush(tx: &mut PacketTx, staged: &[u32], cache: &PoolCache, stats: &mut ChannelizerStats) -> u64 {
    // SAFETY: every staged index came from a packet received into `cache`, whose pool is the
    // channel's (checked in `build` and `attach`); each was staged once and has no handle.
    let sent = unsafe { tx.push_raw_burst(staged) };
    let refused = &staged[sent..];
    if !refused.is_empty() {
        stats.dropped_full += refused.len() as u64;
        // SAFETY: the refused indices are still ours (the channel did not take them), of `cache`'s
        // pool, distinct, with no handle: freeing them returns the buffers.
        unsafe { cache.free_burst(refused) };
    }
    sent as u64
}

impl<D: NetDevice, R: Reclaim> Drop for Channelizer<'_, D, R> {
    fn drop(&mut self) {
        // A reader that stops reading must not hold up the registry's grace periods.
        self.reader.offline();
    }
}
