//! The 82599 driver's data path on the behavioural model, per packet, against a bare ring loop on the
//! same model, measured in the same run:
//!
//! * **RX**: the model's `Wire::Generator` fills every free descriptor of a 512-descriptor ring in
//!   `Model::service()` (outside the timed and counted region); then, timed, as many full bursts
//!   as [`RX_PER_CYCLE`] = 480 frames make (480 / burst: the ring holds 511, less up to 31 slots
//!   the driver re-armed and hands back with its next tail write). Three contenders: `anchor` (a bare ixy-style ring read over a ring
//!   this bench sets up itself on its own model: poll DD, read the length, take the buffer index,
//!   re-arm with a fresh buffer popped off a free stack, one RDT write per burst), `driver`
//!   (`IxgbeQueue::rx_burst` alone) and `channelizer` (`Channelizer::poll` over an `IxgbeQueue`: RX
//!   burst, classify, registry lookup with 10k signatures registered, push into one of 4 consumers'
//!   channels, quiescent state). Frames: 60-byte IPv4/TCP (64 bytes on the wire with the FCS) of
//!   256 registered flows, to the model's MAC.
//! * **TX**: pre-built packets (allocated and filled outside the timed region) handed to
//!   `IxgbeQueue::tx_burst`, 256 packets per cycle, then `Model::service()` (outside) drains the ring
//!   and writes DD back. Anchor: a bare TX ring write over a ring this bench sets up (clean completed
//!   descriptors 32 at a time by the DD of the last, one advanced data descriptor per packet, one
//!   TDT write per burst).
//! * **Flow Director migrate**: `FlowSteering::migrate` on a 4-queue driver, timed per call, with
//!   the register reads and writes it makes counted by an `Mmio` wrapper.
//!
//! `cargo bench -p netchannels-benches --bench ixgbe_datapath` prints the tables. Times are medians of paired samples (every
//! sample runs each contender of a burst size back to back, so load on the shared machine hits them
//! alike); each contender's burst is one call of an `#[inline(never)]` function (`bench_rx_anchor`,
//! `bench_rx_driver`, `bench_rx_channelizer`, `bench_tx_anchor`, `bench_tx_driver`), the same call
//! for all, as when the tables also had instruction columns.
//!
//! This bench only times. The instruction counts of the same contenders (same ring, frames,
//! signatures and consumers) are `benches/icount_driver.rs`, counted by gungraun and checked against
//! `benches/icount/baseline.tsv`: `scripts/icount.sh check`, tables by `scripts/icount.sh report`.

#[path = "common/flows.rs"]
mod flows;

use flows::{flow, tcp_frame};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

use ixgbe_vfio::driver::{Config, Ixgbe, IxgbeQueue};
use ixgbe_vfio::hw::{DmaMemory, DmaSpace, Mmio};
use ixgbe_vfio::regs::{self, rx, tx};
use ixgbe_vfio::sim::{Model, SimConfig, Wire};
use netchannel::channelizer::{Channelizer, ConsumerId, SignatureRegistry};
use netchannel::dev::{NetDevice, PacketBatch};
use netchannel::pool::{HugePages, PacketRx, Pool, PoolCache};
use netchannel::rcu::Qsbr;
use netchannel::registry::Registration;
use netchannel::signature::{FlowGroup, Proto, Signature};
use netchannel::steering::FlowSteering;

/// Burst sizes measured.
const BURSTS: [usize; 6] = [1, 4, 8, 16, 32, 64];
/// Frames taken per RX cycle: the 511 a filled ring holds, less the 31 slots at most that the driver
/// has re-armed and not handed back yet (it moves RDT once 32 wait), so that every cycle finds them.
const RX_PER_CYCLE: usize = RING - 32;
/// Descriptors per ring (the driver's default).
const RING: usize = 512;
/// Buffers of a bare ring (anchor): the ring's plus as many spare.
const ANCHOR_BUFFERS: usize = 2 * RING;
/// Bytes per anchor buffer (SRRCTL.BSIZEPKT = 2 KiB, as the driver's pool gives).
const ANCHOR_BUF: usize = 2048;
/// Signatures registered for the channelizer.
const SIGNATURES: u32 = 10_000;
/// Consumers the channelizer spreads flows over.
const CONSUMERS: u32 = 4;
/// TX packets per cycle (every burst size divides it).
const TX_CYCLE: usize = 256;
/// TX descriptors the driver (and the anchor) clean at once.
const TX_CLEAN: usize = 32;
/// 10 GbE line rate with 64-byte frames (84 bytes on the wire with preamble and gap), per second.
const LINE_RATE_PPS: f64 = 10e9 / (84.0 * 8.0);
/// The instruction ratio the issue asks for.
const TARGET_RATIO: f64 = 1.5;
/// Timed samples per contender and burst (plus one warm-up).
const SAMPLES: usize = 31;
/// Cycles (ring refills) per timed sample.
const CYCLES: usize = 48;
/// Migrations per timed sample.
const MIGRATIONS: usize = 256;

// ---------------------------------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------------------------------

/// The generator's frames: 256 registered flows spread over the table.
fn rx_frames() -> Vec<Vec<u8>> {
    let step = SIGNATURES / 256;
    (0..256).map(|k| tcp_frame(k * step, 6)).collect()
}

/// A model whose wire replays `frames` into every free RX descriptor.
fn model(frames: Vec<Vec<u8>>) -> Model {
    Model::new(SimConfig { wire: Wire::Generator(frames), ..SimConfig::default() })
}

/// A pool with the default 2 KiB buffers, without hugepages (this machine has none; fixed for
/// repeatable counts).
fn pool(buffers: u32) -> Pool {
    Pool::builder(buffers).hugepages(HugePages::Never).build().expect("pool")
}

/// The driver on `model`, one queue pair of [`RING`] descriptors each. Flow Director and RSS are off,
/// so that the model writes the same descriptors for the driver as for the anchor (the driver's
/// per-packet code does not depend on them).
fn driver(model: &Model, pool: &Pool) -> (Ixgbe, IxgbeQueue) {
    let ring = u16::try_from(RING).expect("fits");
    let config = Config {
        queues: 1,
        rx_ring: ring,
        tx_ring: ring,
        fdir: false,
        rss: false,
        link_timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let (nic, mut queues) = Ixgbe::init("bench", model.mmio(), model.dma(), pool, config).expect("init");
    let queue = queues.pop().expect("one queue");
    (nic, queue)
}

/// A 32-bit register value of a ring position or length.
fn reg(value: usize) -> u32 {
    u32::try_from(value).expect("register value")
}

// ---------------------------------------------------------------------------------------------------
// The bare rings (anchors): this bench plays the driver on its own model, as the sim tests do
// ---------------------------------------------------------------------------------------------------

/// A model reset, with the link up, RX and TX enabled, CRC strip and padding on, broadcast accepted;
/// no RSS, no Flow Director.
fn bare_device(frames: Vec<Vec<u8>>) -> (Model, Arc<dyn Mmio>, Arc<dyn DmaSpace>) {
    let model = model(frames);
    let bar = model.mmio();
    let dma = model.dma();
    bar.write32(regs::CTRL, regs::CTRL_RST_MASK);
    wait_for(&*bar, regs::CTRL, regs::CTRL_RST_MASK, false);
    bar.write32(regs::AUTOC, regs::AUTOC_LMS_10G_SERIAL | regs::AUTOC_AN_RESTART);
    wait_for(&*bar, regs::LINKS, regs::LINKS_UP, true);
    bar.write32(regs::FCTRL, regs::FCTRL_BAM);
    bar.set_bits(regs::HLREG0, regs::HLREG0_RXCRCSTRP | regs::HLREG0_TXCRCEN | regs::HLREG0_TXPADEN);
    bar.set_bits(regs::RDRXCTL, regs::RDRXCTL_CRCSTRIP);
    bar.write32(regs::DMATXCTL, regs::DMATXCTL_TE);
    bar.write32(regs::RXCTRL, regs::RXCTRL_RXEN);
    (model, bar, dma)
}

/// Polls `reg` until `mask` is all set (`set`) or all clear.
fn wait_for(bar: &dyn Mmio, reg: u32, mask: u32, set: bool) {
    for _ in 0..10_000 {
        let v = bar.read32(reg) & mask;
        if (set && v == mask) || (!set && v == 0) {
            return;
        }
    }
    panic!("register {reg:#x} did not reach {mask:#x} = {set}");
}

/// The descriptor words of a ring, for the anchors' raw (ixy-style) accesses.
struct RawRing {
    words: *mut u64,
    /// Keeps the memory (and its IOMMU mapping in the model) alive.
    _mem: DmaMemory,
}

impl RawRing {
    fn new(mem: DmaMemory) -> Self {
        assert_eq!(mem.len(), RING * regs::DESC_LEN);
        Self { words: mem.as_ptr().cast(), _mem: mem }
    }

    /// The atomic word `word` (0 or 1) of descriptor `slot`.
    #[inline(always)]
    fn word(&self, slot: usize, word: usize) -> &AtomicU64 {
        let i = (slot & (RING - 1)) * 2 + (word & 1);
        // SAFETY: `i < 2 * RING` (masked above) and the ring holds `RING` descriptors of two 8-byte
        // words (checked in `new`), so the word is inside the allocation.
        let ptr = unsafe { self.words.add(i) };
        // SAFETY: in bounds (above) and 8-byte aligned (`DmaMemory` is); the memory lives as long as
        // `self`, and the model accesses it only through atomic operations too (hw.rs protocol).
        unsafe { AtomicU64::from_ptr(ptr) }
    }
}

/// The anchor's RX side: a ring, its buffers, the buffer of each slot, a free stack.
struct BareRx {
    ring: RawRing,
    bufs_iova: u64,
    slot_buf: Box<[u32; RING]>,
    free: Vec<u32>,
    next: usize,
    bar: Arc<dyn Mmio>,
    rdt: u32,
    _bufs: DmaMemory,
}

/// The RX anchor: a bare ring on its own model.
struct RxAnchor {
    model: Model,
    rx: BareRx,
    /// Buffer indices and lengths received, one burst per row.
    out: Vec<(Vec<u32>, Vec<u16>)>,
    burst: usize,
}

impl RxAnchor {
    fn new(burst: usize) -> Self {
        let (model, bar, dma) = bare_device(rx_frames());
        let ring = dma.alloc(RING * regs::DESC_LEN).expect("ring");
        let bufs = dma.alloc(ANCHOR_BUFFERS * ANCHOR_BUF).expect("buffers");
        let bufs_iova = bufs.iova(0).expect("iova").0;
        let base = ring.iova(0).expect("iova");
        let mut rx = BareRx {
            ring: RawRing::new(ring),
            bufs_iova,
            slot_buf: Box::new([0; RING]),
            free: (0..reg(ANCHOR_BUFFERS)).rev().collect(),
            next: 0,
            bar: Arc::clone(&bar),
            rdt: regs::rdt(0),
            _bufs: bufs,
        };
        for slot in 0..RING {
            let b = rx.free.pop().expect("buffer");
            rx.slot_buf[slot] = b;
            rx.ring.word(slot, 0).store(bufs_iova + u64::from(b) * ANCHOR_BUF as u64, Ordering::Relaxed);
            rx.ring.word(slot, 1).store(0, Ordering::Relaxed);
        }
        bar.write32(regs::rdbal(0), base.low());
        bar.write32(regs::rdbah(0), base.high());
        bar.write32(regs::rdlen(0), reg(RING * regs::DESC_LEN));
        let kib = reg(ANCHOR_BUF / 1024);
        bar.write32(regs::srrctl(0), regs::SRRCTL_DESCTYPE_ADV_ONEBUF | regs::SRRCTL_DROP_EN | kib);
        bar.write32(regs::rdh(0), 0);
        bar.write32(regs::rdt(0), 0);
        bar.set_bits(regs::rxdctl(0), regs::DCTL_ENABLE);
        wait_for(&*bar, regs::rxdctl(0), regs::DCTL_ENABLE, true);
        fence(Ordering::Release);
        bar.write32(regs::rdt(0), reg(RING - 1));
        let out = (0..RX_PER_CYCLE / burst).map(|_| (vec![0; burst], vec![0; burst])).collect();
        Self { model, rx, out, burst }
    }

    /// One ring refill (untimed), then every full burst the ring holds (timed); the received
    /// buffers go back to the free stack afterwards (untimed).
    fn cycle(&mut self) -> (Duration, usize) {
        self.model.service();
        let start = Instant::now();
        let mut n = 0;
        for (idx, len) in &mut self.out {
            n += bench_rx_anchor(&mut self.rx, idx, len);
        }
        let elapsed = start.elapsed();
        assert_eq!(n, self.out.len() * self.burst, "every burst is full");
        for (idx, len) in &self.out {
            assert!(len.iter().all(|&l| l == 60));
            self.rx.free.extend_from_slice(idx);
        }
        (elapsed, n)
    }
}

/// The bare RX loop (ixy's `ixgbe_rx_batch` reduced to its minimum): for each slot from the cursor,
/// load the write-back status, stop at the first without DD, take the length and the slot's buffer,
/// re-arm the slot with a fresh buffer's address; one RDT write for the burst.
#[inline(never)]
#[expect(clippy::cast_possible_truncation, reason = "the length field is 16 bits; ring positions are < 512")]
fn bench_rx_anchor(rx: &mut BareRx, idx: &mut [u32], len: &mut [u16]) -> usize {
    let mut n = 0;
    let mut slot = rx.next;
    while n < idx.len() && n < len.len() {
        // Acquire: pairs with the device's Release store of the write-back's second word.
        let status = rx.ring.word(slot, 1).load(Ordering::Acquire);
        if status & rx::STAT_DD == 0 {
            break;
        }
        let Some(fresh) = rx.free.pop() else { break };
        idx[n] = rx.slot_buf[slot & (RING - 1)];
        len[n] = (status >> rx::LEN_SHIFT) as u16;
        rx.slot_buf[slot & (RING - 1)] = fresh;
        // Relaxed: published by the Release fence before the RDT write.
        rx.ring.word(slot, 0).store(rx.bufs_iova + u64::from(fresh) * ANCHOR_BUF as u64, Ordering::Relaxed);
        // Relaxed: as above (clears DD).
        rx.ring.word(slot, 1).store(0, Ordering::Relaxed);
        slot = (slot + 1) & (RING - 1);
        n += 1;
    }
    if n > 0 {
        rx.next = slot;
        fence(Ordering::Release);
        rx.bar.write32(rx.rdt, (slot.wrapping_sub(1) & (RING - 1)) as u32);
    }
    n
}

/// The anchor's TX side.
struct BareTx {
    ring: RawRing,
    bufs_iova: u64,
    slot_buf: Box<[u32; RING]>,
    /// Buffers whose frames were sent (the anchor's pool).
    free: Vec<u32>,
    tail: usize,
    clean: usize,
    bar: Arc<dyn Mmio>,
    tdt: u32,
    _bufs: DmaMemory,
}

/// The TX anchor: a bare ring on its own model, every buffer holding a pre-built frame.
struct TxAnchor {
    model: Model,
    tx: BareTx,
    /// Per burst: the buffers to send and their lengths, built (untimed) before each cycle.
    input: Vec<Vec<(u32, u16)>>,
    burst: usize,
}

impl TxAnchor {
    fn new(burst: usize) -> Self {
        let (model, bar, dma) = bare_device(Vec::new());
        let ring = dma.alloc(RING * regs::DESC_LEN).expect("ring");
        let bufs = dma.alloc(ANCHOR_BUFFERS * ANCHOR_BUF).expect("buffers");
        let f = tcp_frame(0, 6);
        for b in 0..ANCHOR_BUFFERS {
            for (i, chunk) in f.chunks(8).enumerate() {
                let mut w = [0u8; 8];
                w[..chunk.len()].copy_from_slice(chunk);
                bufs.store_u64(b * ANCHOR_BUF + 8 * i, u64::from_le_bytes(w), Ordering::Relaxed);
            }
        }
        let base = ring.iova(0).expect("iova");
        bar.write32(regs::tdbal(0), base.low());
        bar.write32(regs::tdbah(0), base.high());
        bar.write32(regs::tdlen(0), reg(RING * regs::DESC_LEN));
        bar.write32(regs::tdh(0), 0);
        bar.write32(regs::tdt(0), 0);
        bar.set_bits(regs::txdctl(0), regs::DCTL_ENABLE);
        wait_for(&*bar, regs::txdctl(0), regs::DCTL_ENABLE, true);
        let tx = BareTx {
            ring: RawRing::new(ring),
            bufs_iova: bufs.iova(0).expect("iova").0,
            slot_buf: Box::new([0; RING]),
            free: (0..reg(ANCHOR_BUFFERS)).rev().collect(),
            tail: 0,
            clean: 0,
            bar,
            tdt: regs::tdt(0),
            _bufs: bufs,
        };
        let input = (0..TX_CYCLE / burst).map(|_| Vec::with_capacity(burst)).collect();
        Self { model, tx, input, burst }
    }

    /// Takes pre-built frames off the free stack (untimed), sends them in bursts (timed), and lets
    /// the model transmit them (untimed).
    fn cycle(&mut self) -> (Duration, usize) {
        for burst in &mut self.input {
            burst.clear();
            for _ in 0..self.burst {
                burst.push((self.tx.free.pop().expect("a free buffer"), 60));
            }
        }
        let start = Instant::now();
        let mut n = 0;
        for burst in &self.input {
            n += bench_tx_anchor(&mut self.tx, burst);
        }
        let elapsed = start.elapsed();
        assert_eq!(n, TX_CYCLE, "the ring took every frame");
        assert_eq!(self.model.service().tx, TX_CYCLE);
        (elapsed, n)
    }
}

/// The bare TX loop (ixy's `ixgbe_tx_batch` reduced to its minimum): clean completed descriptors 32
/// at a time (the DD of the batch's last one) back to the free stack, write one advanced data
/// descriptor per frame, one TDT write for the burst.
#[inline(never)]
#[expect(clippy::cast_possible_truncation, reason = "ring positions are < 512")]
fn bench_tx_anchor(t: &mut BareTx, frames: &[(u32, u16)]) -> usize {
    loop {
        let in_flight = t.tail.wrapping_sub(t.clean) & (RING - 1);
        if in_flight < TX_CLEAN {
            break;
        }
        let last = t.clean + TX_CLEAN - 1;
        // Acquire: pairs with the device's Release store of the write-back word.
        if t.ring.word(last, 1).load(Ordering::Acquire) & tx::STAT_DD == 0 {
            break;
        }
        for i in 0..TX_CLEAN {
            t.free.push(t.slot_buf[(t.clean + i) & (RING - 1)]);
        }
        t.clean = (t.clean + TX_CLEAN) & (RING - 1);
    }
    let room = (RING - 1) - (t.tail.wrapping_sub(t.clean) & (RING - 1));
    let take = frames.len().min(room);
    let mut slot = t.tail;
    for &(buf, len) in &frames[..take] {
        let len = u64::from(len);
        let cmd = tx::DCMD_EOP | tx::DCMD_RS | tx::DCMD_IFCS | tx::DCMD_DEXT | tx::DTYP_DATA;
        // Relaxed: published by the Release fence before the TDT write.
        t.ring.word(slot, 0).store(t.bufs_iova + u64::from(buf) * ANCHOR_BUF as u64, Ordering::Relaxed);
        // Relaxed: as above.
        t.ring.word(slot, 1).store(cmd | len | len << tx::PAYLEN_SHIFT, Ordering::Relaxed);
        t.slot_buf[slot & (RING - 1)] = buf;
        slot = (slot + 1) & (RING - 1);
    }
    if take > 0 {
        t.tail = slot;
        fence(Ordering::Release);
        t.bar.write32(t.tdt, slot as u32);
    }
    take
}

// ---------------------------------------------------------------------------------------------------
// The driver and the channelizer
// ---------------------------------------------------------------------------------------------------

/// `IxgbeQueue::rx_burst` alone.
struct RxDriver<'c> {
    model: Model,
    _nic: Ixgbe,
    queue: IxgbeQueue,
    cache: &'c PoolCache,
    batches: Vec<PacketBatch<'c>>,
    burst: usize,
}

impl<'c> RxDriver<'c> {
    fn new(pool: &Pool, cache: &'c PoolCache, burst: usize) -> Self {
        let model = model(rx_frames());
        let (nic, queue) = driver(&model, pool);
        let batches = (0..RX_PER_CYCLE / burst).map(|_| PacketBatch::with_capacity(burst)).collect();
        Self { model, _nic: nic, queue, cache, batches, burst }
    }

    fn cycle(&mut self) -> (Duration, usize) {
        self.model.service();
        let start = Instant::now();
        let mut n = 0;
        for batch in &mut self.batches {
            n += bench_rx_driver(&mut self.queue, self.cache, batch);
        }
        let elapsed = start.elapsed();
        assert_eq!(n, self.batches.len() * self.burst, "every burst is full");
        for batch in &mut self.batches {
            batch.clear();
        }
        (elapsed, n)
    }
}

#[inline(never)]
fn bench_rx_driver<'c>(queue: &mut IxgbeQueue, cache: &'c PoolCache, batch: &mut PacketBatch<'c>) -> usize {
    queue.rx_burst(0, cache, batch).expect("rx_burst")
}

/// `Channelizer::poll` over an `IxgbeQueue`, 10k signatures, 4 consumers.
struct RxChannelizer<'c> {
    model: Model,
    _nic: Ixgbe,
    // Dropped before the channelizer (unregistering needs no grace period from its reader).
    _registrations: Vec<Registration<Signature, ConsumerId, Qsbr>>,
    ch: Channelizer<'c, IxgbeQueue>,
    consumers: Vec<PacketRx>,
    default_rx: PacketRx,
    cache: &'c PoolCache,
    polls: usize,
    burst: usize,
}

impl<'c> RxChannelizer<'c> {
    fn new(pool: &Pool, cache: &'c PoolCache, burst: usize) -> Self {
        let model = model(rx_frames());
        let (nic, queue) = driver(&model, pool);
        // A fixed seed: the counts depend on chain lengths, which depend on the seed.
        let registry =
            Arc::new(SignatureRegistry::with_capacity_and_seed(Qsbr::new(), SIGNATURES as usize, 0x5eed));
        let registrations = (0..SIGNATURES)
            .map(|i| {
                let (local, remote) = flow(i);
                let sig =
                    Signature::new(Proto::Tcp, SocketAddr::V4(local), SocketAddr::V4(remote)).expect("v4");
                registry.register(sig, ConsumerId(i % CONSUMERS)).expect("distinct flows")
            })
            .collect();
        let (default_tx, default_rx) = pool.packet_channel(4096).expect("channel");
        let mut ch =
            Channelizer::builder(queue, cache, registry, default_tx).burst(burst).build().expect("same pool");
        let consumers = (0..CONSUMERS)
            .map(|id| {
                let (tx, rx) = pool.packet_channel(4096).expect("channel");
                ch.attach(ConsumerId(id), tx).expect("same pool");
                rx
            })
            .collect();
        Self {
            model,
            _nic: nic,
            _registrations: registrations,
            ch,
            consumers,
            default_rx,
            cache,
            polls: RX_PER_CYCLE / burst,
            burst,
        }
    }

    fn cycle(&mut self) -> (Duration, usize) {
        self.model.service();
        let start = Instant::now();
        let mut n = 0;
        for _ in 0..self.polls {
            n += bench_rx_channelizer(&mut self.ch);
        }
        let elapsed = start.elapsed();
        assert_eq!(n, self.polls * self.burst, "every burst is full");
        let mut delivered = 0;
        for rx in &mut self.consumers {
            while rx.pop(self.cache).is_some() {
                delivered += 1;
            }
        }
        assert_eq!(delivered, n, "every frame reached its consumer");
        assert!(self.default_rx.pop(self.cache).is_none());
        (elapsed, n)
    }
}

#[inline(never)]
fn bench_rx_channelizer(ch: &mut Channelizer<'_, IxgbeQueue>) -> usize {
    ch.poll().expect("poll").rx
}

/// `IxgbeQueue::tx_burst` of pre-built packets.
struct TxDriver<'c> {
    model: Model,
    _nic: Ixgbe,
    queue: IxgbeQueue,
    cache: &'c PoolCache,
    batches: Vec<PacketBatch<'c>>,
    frame: Vec<u8>,
    burst: usize,
}

impl<'c> TxDriver<'c> {
    fn new(pool: &Pool, cache: &'c PoolCache, burst: usize) -> Self {
        let model = model(Vec::new());
        let (nic, queue) = driver(&model, pool);
        let batches = (0..TX_CYCLE / burst).map(|_| PacketBatch::with_capacity(burst)).collect();
        Self { model, _nic: nic, queue, cache, batches, frame: tcp_frame(0, 6), burst }
    }

    fn cycle(&mut self) -> (Duration, usize) {
        for batch in &mut self.batches {
            for _ in 0..self.burst {
                let mut p = self.cache.alloc().expect("a buffer");
                p.extend_from_slice(&self.frame).expect("fits");
                batch.push(p).expect("room");
            }
        }
        let start = Instant::now();
        let mut n = 0;
        for batch in &mut self.batches {
            n += bench_tx_driver(&mut self.queue, batch);
        }
        let elapsed = start.elapsed();
        assert_eq!(n, TX_CYCLE, "the ring took every frame");
        assert_eq!(self.model.service().tx, TX_CYCLE);
        (elapsed, n)
    }
}

#[inline(never)]
fn bench_tx_driver(queue: &mut IxgbeQueue, batch: &mut PacketBatch<'_>) -> usize {
    queue.tx_burst(0, batch).expect("tx_burst")
}

// ---------------------------------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------------------------------

/// Register writes per timed sample of the model's BAR write.
const BAR_WRITES: usize = 100_000;

/// `n` writes of a tail register (of a queue that is off) through the model's BAR, timed.
fn bar_writes(bar: &dyn Mmio, n: usize) -> (Duration, usize) {
    let start = Instant::now();
    for i in 0..n {
        bench_bar_write(bar, reg(i & (RING - 1)));
    }
    (start.elapsed(), n)
}

/// One write of queue 7's RDT: what the data path's one register access per burst costs on the
/// model.
#[inline(never)]
fn bench_bar_write(bar: &dyn Mmio, value: u32) {
    bar.write32(regs::rdt(7), value);
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Timed samples of one burst size: each sample runs every contender for [`CYCLES`] cycles, back to
/// back; returns the ns per packet of each contender per sample.
fn time_group(contenders: &mut [&mut dyn FnMut() -> (Duration, usize)]) -> Vec<Vec<f64>> {
    let mut ns = vec![Vec::with_capacity(SAMPLES); contenders.len()];
    for sample in 0..=SAMPLES {
        for (i, c) in contenders.iter_mut().enumerate() {
            let (mut t, mut n) = (Duration::ZERO, 0);
            for _ in 0..CYCLES {
                let (dt, dn) = c();
                t += dt;
                n += dn;
            }
            if sample > 0 {
                ns[i].push(t.as_nanos() as f64 / n as f64);
            }
        }
    }
    ns
}

/// Median of the per-sample ratios `a[i] / b[i]`.
fn paired(a: &[f64], b: &[f64]) -> f64 {
    let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    median(&mut r)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|s| s.trim().to_owned()).unwrap_or_default()
}

/// What one tail write costs on the model (in the ns figures, once per burst; not in the counts).
fn bar_write_line() {
    let bar = model(Vec::new()).mmio();
    let mut ns: Vec<f64> = (0..=SAMPLES)
        .map(|_| {
            let (t, n) = bar_writes(&*bar, BAR_WRITES);
            t.as_nanos() as f64 / n as f64
        })
        .collect();
    println!(
        "\nmodel BAR write (a tail write: the anchors' one a burst, the driver's one a TX burst and \
         one per 32 re-armed RX slots): {:.1} ns (in the ns columns below; icount_driver keeps it \
         out of its counts)",
        median(&mut ns[1..])
    );
}

/// RX: anchor, driver, channelizer per burst.
fn rx_tables() {
    let (pd, pc) = (pool(8192), pool(8192));
    let (cd, cc) = (pd.cache(), pc.cache());
    println!(
        "\n### RX per packet (ring {RING}, 60-byte IPv4/TCP frames, {SIGNATURES} signatures, {CONSUMERS} consumers)\n"
    );
    println!(
        "| burst | anchor ns | driver ns | channelizer ns | driver Mpps | channelizer Mpps | driver/anchor ns | channelizer/anchor ns |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for burst in BURSTS {
        let mut anchor = RxAnchor::new(burst);
        let mut drv = RxDriver::new(&pd, &cd, burst);
        let mut chz = RxChannelizer::new(&pc, &cc, burst);
        let ns = time_group(&mut [&mut || anchor.cycle(), &mut || drv.cycle(), &mut || chz.cycle()]);
        drop((anchor, drv, chz));
        let (a, d, c) = (median(&mut ns[0].clone()), median(&mut ns[1].clone()), median(&mut ns[2].clone()));
        let (rd, rc) = (paired(&ns[1], &ns[0]), paired(&ns[2], &ns[0]));
        println!(
            "| {burst} | {a:.1} | {d:.1} | {c:.1} | {:.1} | {:.1} | {rd:.2}x | {rc:.2}x |",
            1e3 / d,
            1e3 / c
        );
    }
}

/// TX: anchor, driver per burst.
fn tx_tables() {
    let pd = pool(8192);
    let cd = pd.cache();
    println!("\n### TX per packet (ring {RING}, 60-byte frames, {TX_CYCLE} packets per model pass)\n");
    println!("| burst | anchor ns | driver ns | driver Mpps | driver/anchor ns |");
    println!("|---:|---:|---:|---:|---:|");
    for burst in BURSTS {
        let mut anchor = TxAnchor::new(burst);
        let mut drv = TxDriver::new(&pd, &cd, burst);
        let ns = time_group(&mut [&mut || anchor.cycle(), &mut || drv.cycle()]);
        drop((anchor, drv));
        let (a, d) = (median(&mut ns[0].clone()), median(&mut ns[1].clone()));
        let rd = paired(&ns[1], &ns[0]);
        println!("| {burst} | {a:.1} | {d:.1} | {:.1} | {rd:.2}x |", 1e3 / d);
    }
}

/// An `Mmio` that counts the accesses it forwards.
struct CountingMmio {
    inner: Arc<dyn Mmio>,
    reads: AtomicU64,
    writes: AtomicU64,
}

impl Mmio for CountingMmio {
    fn bar_len(&self) -> usize {
        self.inner.bar_len()
    }

    fn read32(&self, offset: u32) -> u32 {
        // Relaxed: a counter read by the same thread.
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read32(offset)
    }

    fn write32(&self, offset: u32, value: u32) {
        // Relaxed: as above.
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.write32(offset, value);
    }
}

/// Flow Director migrate: time per call and register accesses per call.
fn migrate_table() {
    const QUEUES: u16 = 4;
    let model = model(Vec::new());
    let counting =
        Arc::new(CountingMmio { inner: model.mmio(), reads: AtomicU64::new(0), writes: AtomicU64::new(0) });
    let pool = pool(8192);
    let config = Config {
        queues: QUEUES,
        rx_ring: 128,
        tx_ring: 128,
        link_timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let mmio: Arc<dyn Mmio> = Arc::clone(&counting) as Arc<dyn Mmio>;
    let (mut nic, queues) = Ixgbe::init("bench-fdir", mmio, model.dma(), &pool, config).expect("init");
    let updates_before = model.stats().fdir_updates;
    let before = nic.stats();
    // Relaxed: single thread.
    let (r0, w0) = (counting.reads.load(Ordering::Relaxed), counting.writes.load(Ordering::Relaxed));
    let mut ns = Vec::with_capacity(SAMPLES);
    let mut calls = 0u64;
    let mut group = 0u16;
    for sample in 0..=SAMPLES {
        let start = Instant::now();
        for _ in 0..MIGRATIONS {
            let g = FlowGroup(group);
            let to = (nic.queue_of(g) + 1) % QUEUES;
            bench_migrate(&mut nic, g, to);
            group = (group + 1) & 0x0FFF;
        }
        let elapsed = start.elapsed();
        calls += MIGRATIONS as u64;
        if sample > 0 {
            ns.push(elapsed.as_nanos() as f64 / MIGRATIONS as f64);
        }
    }
    // Relaxed: single thread.
    let (r1, w1) = (counting.reads.load(Ordering::Relaxed), counting.writes.load(Ordering::Relaxed));
    let (reads, writes) = ((r1 - r0) as f64 / calls as f64, (w1 - w0) as f64 / calls as f64);
    let after = nic.stats();
    assert_eq!(after.migrations - before.migrations, calls);
    assert_eq!(model.stats().fdir_updates - updates_before, calls, "the model re-pointed every filter");
    let polls = (after.fdir_cmd_polls - before.fdir_cmd_polls) as f64 / calls as f64;
    let mut sorted = ns.clone();
    let med = median(&mut sorted);
    println!("\n### Flow Director migrate (4 queues, 4096 flow-group filters)\n");
    println!(
        "| ns per migrate (median) | min | max | MMIO reads | MMIO writes | of the reads, FDIRCMD polls |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {med:.0} | {:.0} | {:.0} | {reads:.2} | {writes:.2} | {polls:.2} |",
        sorted[0],
        sorted[sorted.len() - 1]
    );
    drop(queues);
}

#[inline(never)]
fn bench_migrate(nic: &mut Ixgbe, group: FlowGroup, queue: u16) {
    nic.migrate(group, queue).expect("migrate");
}

fn main() {
    println!("82599 driver data path on the model; load before: {}", loadavg());
    println!(
        "target: >= {:.2} Mpps per core (<= {:.1} ns/packet), <= {TARGET_RATIO}x the anchor's instructions per packet \
         (instructions: scripts/icount.sh report, icount_driver)",
        LINE_RATE_PPS / 1e6,
        1e9 / LINE_RATE_PPS
    );
    let t = Instant::now();
    bar_write_line();
    rx_tables();
    tx_tables();
    migrate_table();
    println!("\nload after: {}; took {:.0} s", loadavg(), t.elapsed().as_secs_f64());
}
