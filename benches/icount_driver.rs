//! Instructions per packet of the 82599 driver's RX and TX, and of `Channelizer::poll` over its RX
//! queue, on the behavioural model (`ixgbe_vfio::sim`), beside a bare ixy-style ring loop (the anchor), counted by gungraun
//! (callgrind). `cargo bench -p netchannels-benches --bench icount_driver`; `scripts/icount.sh` divides each count by the
//! `_n<N>` suffix of the benchmark id.
//!
//! The set-up is `benches/ixgbe_datapath.rs`'s, reduced to what one measured pass needs:
//!
//! * **RX** (`rx_driver_*`, `rx_anchor_*`, `rx_lazy_tail_anchor_*`: the anchor with the tail
//!   written as the driver writes it, every 32 re-armed slots): in `setup` (not measured) the model's `Wire::Generator`
//!   fills 511 descriptors of a 512-descriptor ring in one `Model::service()`; the measured function
//!   then takes [`RX_N`] = 480 packets in bursts of 1, 4, 8, 16 or 32 (`IxgbeQueue::rx_burst` into
//!   pre-allocated batches, or the anchor's bare ring read into pre-allocated arrays). Returning the
//!   buffers to the pool happens after the measured function (the batches are returned and dropped
//!   outside it), as in ixgbe_datapath. Frames: 60-byte IPv4/TCP of 256 flows, Flow Director and RSS
//!   off.
//! * **RX through the channelizer** (`rx_driver_channelizer_*`, in the RX table beside the other two):
//!   the same ring and frames (256 flows, all registered), the queue inside a `Channelizer` with
//!   [`SIGNATURES`] = 10,000 signatures registered (fixed hash seed) over [`CONSUMERS`] = 4
//!   consumers' channels, all built in `setup`; the measured function calls `Channelizer::poll`
//!   RX_N / burst times (RX burst, classify, registry lookup, push into the consumer's channel,
//!   quiescent state), as `ixgbe_datapath`'s `channelizer` contender. The teardown (not measured)
//!   checks that every frame reached its consumer.
//! * **TX** (`tx_driver_*`, `tx_anchor_*`): `setup` runs two warm-up cycles (256 frames sent, the
//!   model's `service()` transmits them and writes DD back) and then pre-builds [`TX_N`] = 256
//!   frames; the measured function hands them to `IxgbeQueue::tx_burst` (or the anchor's bare TX ring
//!   write) in bursts of 1, 4, 8, 16, 32 or 64, so it includes cleaning the 256 descriptors of the previous cycle, as in
//!   steady state.
//!
//! The model's own work stays out of the counts: `Model::service()` only runs in `setup`; the one
//! register access of the data path per burst, the RDT/TDT write, goes through [`BenchBar`], which
//! during the measured function (only then: it is armed there) forwards it through
//! [`icount_model_bar_write`], and the callgrind option `--toggle-collect=*icount_model_bar_write*`
//! flips collection off inside it (the model's register emulation; on the card it is one store).
//! What is left of the write in the counts is the dynamic call and the armed check, a few
//! instructions per burst for the driver and the anchor alike.
//!
//! Every `setup` returns its rig boxed, and the measured function takes and returns the box: a rig
//! moved by value in and out of it (1.5 KiB for the driver's) was a `memcpy` counted with the
//! instructions measured.

#![allow(missing_docs, reason = "gungraun's macros generate undocumented modules, constants and functions")]

#[path = "common/flows.rs"]
mod flows;

use flows::{flow, tcp_frame};

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::time::Duration;

use gungraun::{Callgrind, LibraryBenchmarkConfig, library_benchmark, library_benchmark_group, main};
use ixgbe_vfio::driver::{Config, Ixgbe, IxgbeQueue};
use ixgbe_vfio::hw::{DmaMemory, DmaSpace, Mmio};
use ixgbe_vfio::regs::{self, rx, tx};
use ixgbe_vfio::sim::{Model, SimConfig, Wire};
use netchannel::channelizer::{Channelizer, ConsumerId, SignatureRegistry};
use netchannel::dev::{NetDevice, PacketBatch};
use netchannel::pool::{HugePages, PacketRx, Pool, PoolCache};
use netchannel::rcu::Qsbr;
use netchannel::registry::Registration;
use netchannel::signature::{Proto, Signature};

/// Descriptors per ring (the driver's default).
const RING: usize = 512;
/// Packets per measured RX pass (one refill of the ring holds 511; every burst size divides it; 64
/// does not, and the 448 it would take would give the RX table a second N, so RX stops at 32).
const RX_N: usize = 480;
/// Packets per measured TX pass (half the ring; every burst size divides it).
const TX_N: usize = 256;
/// Buffers of a bare ring (anchor): the ring's plus as many spare.
const ANCHOR_BUFFERS: usize = 2 * RING;
/// Bytes per anchor buffer (SRRCTL.BSIZEPKT = 2 KiB, as the driver's pool gives).
const ANCHOR_BUF: usize = 2048;
/// TX descriptors the anchor cleans at once (as the driver).
const TX_CLEAN: usize = 32;
/// Flows the generator's frames spread over.
const FLOWS: u32 = 256;
/// Signatures registered for the channelizer (flows `0..SIGNATURES`; the frames' flows are among them).
const SIGNATURES: u32 = 10_000;
/// Consumers the channelizer spreads the flows over.
const CONSUMERS: u32 = 4;

// ---------------------------------------------------------------------------------------------------
// The model, its BAR, frames
// ---------------------------------------------------------------------------------------------------

/// The model's BAR with the data path's register writes excluded from the counts while armed.
struct BenchBar {
    inner: Arc<dyn Mmio>,
    armed: AtomicBool,
}

impl BenchBar {
    fn new(model: &Model) -> Arc<Self> {
        Arc::new(Self { inner: model.mmio(), armed: AtomicBool::new(false) })
    }

    /// Arms (at the start of a measured function) or disarms (at its end) the exclusion.
    fn arm(&self, on: bool) {
        // Relaxed: one thread.
        self.armed.store(on, Ordering::Relaxed);
    }
}

impl Mmio for BenchBar {
    fn bar_len(&self) -> usize {
        self.inner.bar_len()
    }

    fn read32(&self, offset: u32) -> u32 {
        self.inner.read32(offset)
    }

    fn write32(&self, offset: u32, value: u32) {
        // Relaxed: one thread.
        if self.armed.load(Ordering::Relaxed) {
            icount_model_bar_write(&*self.inner, offset, value);
        } else {
            self.inner.write32(offset, value);
        }
    }
}

/// The model's register write, with collection toggled off inside (the callgrind option in `main!`).
#[inline(never)]
fn icount_model_bar_write(bar: &dyn Mmio, offset: u32, value: u32) {
    bar.write32(offset, value);
}

/// The callgrind option that keeps [`icount_model_bar_write`] out of the counts.
const TOGGLE_MODEL_BAR_WRITE: &str = "--toggle-collect=*icount_model_bar_write*";

/// A model whose wire replays 256 flows' frames (spread over the [`SIGNATURES`] registered ones) into
/// every free RX descriptor.
fn model(generate: bool) -> Model {
    let step = SIGNATURES / FLOWS;
    let frames = if generate { (0..FLOWS).map(|k| tcp_frame(k * step, 6)).collect() } else { Vec::new() };
    Model::new(SimConfig { wire: Wire::Generator(frames), ..SimConfig::default() })
}

/// A 32-bit register value of a ring position or length.
fn reg(value: usize) -> u32 {
    u32::try_from(value).expect("register value")
}

/// A pool that lives as long as the process (a gungraun benchmark is one process per run), and a
/// cache of it, so that batches can borrow it from the set-up into the measured function.
fn leaked_cache() -> &'static PoolCache {
    let pool: &'static Pool =
        Box::leak(Box::new(Pool::builder(8192).hugepages(HugePages::Never).build().expect("pool")));
    Box::leak(Box::new(pool.cache()))
}

// ---------------------------------------------------------------------------------------------------
// The driver
// ---------------------------------------------------------------------------------------------------

/// The driver on `model`'s (wrapped) BAR, one queue pair of [`RING`] descriptors each, Flow Director
/// and RSS off.
struct Driver {
    model: Model,
    bar: Arc<BenchBar>,
    _nic: Ixgbe,
    queue: IxgbeQueue,
    cache: &'static PoolCache,
    batches: Vec<PacketBatch<'static>>,
}

/// The driver on `model`'s BAR wrapped in a [`BenchBar`]: the wrapper, the NIC and its one queue.
fn init(model: &Model, cache: &PoolCache) -> (Arc<BenchBar>, Ixgbe, IxgbeQueue) {
    let bar = BenchBar::new(model);
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
    let mmio: Arc<dyn Mmio> = Arc::clone(&bar) as Arc<dyn Mmio>;
    let (nic, mut queues) = Ixgbe::init("icount", mmio, model.dma(), cache.pool(), config).expect("init");
    let queue = queues.pop().expect("one queue");
    (bar, nic, queue)
}

impl Driver {
    fn new(generate: bool, burst: usize, packets: usize) -> Self {
        let model = model(generate);
        let cache = leaked_cache();
        let (bar, nic, queue) = init(&model, cache);
        let batches = (0..packets / burst).map(|_| PacketBatch::with_capacity(burst)).collect();
        Self { model, bar, _nic: nic, queue, cache, batches }
    }

    /// Fills every batch with pre-built copies of a frame (TX).
    fn fill(&mut self) {
        let f = tcp_frame(0, 6);
        for batch in &mut self.batches {
            while batch.len() < batch.capacity() {
                let mut p = self.cache.alloc().expect("a buffer");
                p.extend_from_slice(&f).expect("fits");
                batch.push(p).expect("room");
            }
        }
    }
}

fn setup_rx_driver(burst: usize) -> Box<Driver> {
    let d = Driver::new(true, burst, RX_N);
    assert_eq!(d.model.service().rx, RING - 1, "the model filled the ring");
    Box::new(d)
}

fn setup_tx_driver(burst: usize) -> Box<Driver> {
    let mut d = Driver::new(false, burst, TX_N);
    for _ in 0..2 {
        d.fill();
        for batch in &mut d.batches {
            assert_eq!(d.queue.tx_burst(0, batch).expect("tx_burst"), burst);
        }
        assert_eq!(d.model.service().tx, TX_N);
    }
    d.fill();
    Box::new(d)
}

#[library_benchmark]
#[bench::burst1_n480(args = (1), setup = setup_rx_driver)]
#[bench::burst4_n480(args = (4), setup = setup_rx_driver)]
#[bench::burst8_n480(args = (8), setup = setup_rx_driver)]
#[bench::burst16_n480(args = (16), setup = setup_rx_driver)]
#[bench::burst32_n480(args = (32), setup = setup_rx_driver)]
fn rx_driver(mut d: Box<Driver>) -> Box<Driver> {
    d.bar.arm(true);
    for batch in &mut d.batches {
        black_box(d.queue.rx_burst(0, d.cache, batch).expect("rx_burst"));
    }
    d.bar.arm(false);
    d
}

#[library_benchmark]
#[bench::burst1_n256(args = (1), setup = setup_tx_driver)]
#[bench::burst4_n256(args = (4), setup = setup_tx_driver)]
#[bench::burst8_n256(args = (8), setup = setup_tx_driver)]
#[bench::burst16_n256(args = (16), setup = setup_tx_driver)]
#[bench::burst32_n256(args = (32), setup = setup_tx_driver)]
#[bench::burst64_n256(args = (64), setup = setup_tx_driver)]
fn tx_driver(mut d: Box<Driver>) -> Box<Driver> {
    d.bar.arm(true);
    for batch in &mut d.batches {
        black_box(d.queue.tx_burst(0, batch).expect("tx_burst"));
    }
    d.bar.arm(false);
    d
}

// ---------------------------------------------------------------------------------------------------
// The channelizer over the driver
// ---------------------------------------------------------------------------------------------------

/// `Channelizer::poll` over the driver's queue, [`SIGNATURES`] registered, [`CONSUMERS`] consumers.
struct ChannelizerRig {
    _model: Model,
    bar: Arc<BenchBar>,
    _nic: Ixgbe,
    ch: Channelizer<'static, IxgbeQueue>,
    consumers: Vec<PacketRx>,
    default_rx: PacketRx,
    cache: &'static PoolCache,
    registrations: Vec<Registration<Signature, ConsumerId, Qsbr>>,
    polls: usize,
}

impl Drop for ChannelizerRig {
    fn drop(&mut self) {
        // The process ends right after the benchmark: skip unregistering 10k entries one by one.
        std::mem::forget(std::mem::take(&mut self.registrations));
    }
}

fn setup_rx_channelizer(burst: usize) -> Box<ChannelizerRig> {
    let model = model(true);
    let cache = leaked_cache();
    let (bar, nic, queue) = init(&model, cache);
    // A fixed seed: the counts depend on chain lengths, which depend on the seed.
    let registry =
        Arc::new(SignatureRegistry::with_capacity_and_seed(Qsbr::new(), SIGNATURES as usize, 0x5eed));
    let registrations = (0..SIGNATURES)
        .map(|i| {
            let (local, remote) = flow(i);
            let sig = Signature::new(Proto::Tcp, SocketAddr::V4(local), SocketAddr::V4(remote)).expect("v4");
            registry.register(sig, ConsumerId(i % CONSUMERS)).expect("distinct flows")
        })
        .collect();
    let pool = cache.pool();
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
    assert_eq!(model.service().rx, RING - 1, "the model filled the ring");
    Box::new(ChannelizerRig {
        _model: model,
        bar,
        _nic: nic,
        ch,
        consumers,
        default_rx,
        cache,
        registrations,
        polls: RX_N / burst,
    })
}

#[library_benchmark]
#[bench::burst1_n480(args = (1), setup = setup_rx_channelizer, teardown = check_rx_channelizer)]
#[bench::burst4_n480(args = (4), setup = setup_rx_channelizer, teardown = check_rx_channelizer)]
#[bench::burst8_n480(args = (8), setup = setup_rx_channelizer, teardown = check_rx_channelizer)]
#[bench::burst16_n480(args = (16), setup = setup_rx_channelizer, teardown = check_rx_channelizer)]
#[bench::burst32_n480(args = (32), setup = setup_rx_channelizer, teardown = check_rx_channelizer)]
fn rx_driver_channelizer(mut c: Box<ChannelizerRig>) -> Box<ChannelizerRig> {
    c.bar.arm(true);
    for _ in 0..c.polls {
        black_box(c.ch.poll().expect("poll").rx);
    }
    c.bar.arm(false);
    c
}

/// Not measured: every frame reached a consumer, none the default channel.
fn check_rx_channelizer(mut c: Box<ChannelizerRig>) {
    let stats = c.ch.stats();
    assert_eq!(stats.delivered, RX_N as u64, "every packet reaches its consumer: {stats:?}");
    let cache = c.cache;
    assert!(c.default_rx.pop(cache).is_none(), "nothing went to the default channel");
    let delivered: usize =
        c.consumers.iter_mut().map(|rx| std::iter::from_fn(|| rx.pop(cache)).count()).sum();
    assert_eq!(delivered, RX_N);
}

// ---------------------------------------------------------------------------------------------------
// The bare rings (anchors): this bench plays the driver on its own model, as ixgbe_datapath does
// ---------------------------------------------------------------------------------------------------

/// A model reset, with the link up, RX and TX enabled, CRC strip and padding on, broadcast accepted;
/// no RSS, no Flow Director. The set-up's register writes go to the model directly.
fn bare_device(generate: bool) -> (Model, Arc<BenchBar>, Arc<dyn DmaSpace>) {
    let model = model(generate);
    let bench_bar = BenchBar::new(&model);
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
    (model, bench_bar, dma)
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

/// The RX anchor: a bare ring on its own model, its buffers, the buffer of each slot, a free stack,
/// and the arrays the bursts land in.
struct RxAnchor {
    _model: Model,
    ring: RawRing,
    bufs_iova: u64,
    slot_buf: Box<[u32; RING]>,
    free: Vec<u32>,
    next: usize,
    /// The slot RDT names (for the anchor that writes it every [`LAZY_TAIL`] slots).
    tail: usize,
    bar: Arc<BenchBar>,
    /// Buffer indices and lengths received, one burst per row.
    out: Vec<(Vec<u32>, Vec<u16>)>,
    _bufs: DmaMemory,
}

fn setup_rx_anchor(burst: usize) -> Box<RxAnchor> {
    let (model, bar, dma) = bare_device(true);
    let ring = dma.alloc(RING * regs::DESC_LEN).expect("ring");
    let bufs = dma.alloc(ANCHOR_BUFFERS * ANCHOR_BUF).expect("buffers");
    let bufs_iova = bufs.iova(0).expect("iova").0;
    let base = ring.iova(0).expect("iova");
    let mut a = RxAnchor {
        _model: model,
        ring: RawRing::new(ring),
        bufs_iova,
        slot_buf: Box::new([0; RING]),
        free: (0..reg(ANCHOR_BUFFERS)).rev().collect(),
        next: 0,
        tail: RING - 1,
        bar,
        out: (0..RX_N / burst).map(|_| (vec![0; burst], vec![0; burst])).collect(),
        _bufs: bufs,
    };
    for slot in 0..RING {
        let b = a.free.pop().expect("buffer");
        a.slot_buf[slot] = b;
        a.ring.word(slot, 0).store(bufs_iova + u64::from(b) * ANCHOR_BUF as u64, Ordering::Relaxed);
        a.ring.word(slot, 1).store(0, Ordering::Relaxed);
    }
    let bar = &*a.bar.inner;
    bar.write32(regs::rdbal(0), base.low());
    bar.write32(regs::rdbah(0), base.high());
    bar.write32(regs::rdlen(0), reg(RING * regs::DESC_LEN));
    let kib = reg(ANCHOR_BUF / 1024);
    bar.write32(regs::srrctl(0), regs::SRRCTL_DESCTYPE_ADV_ONEBUF | regs::SRRCTL_DROP_EN | kib);
    bar.write32(regs::rdh(0), 0);
    bar.write32(regs::rdt(0), 0);
    bar.set_bits(regs::rxdctl(0), regs::DCTL_ENABLE);
    wait_for(bar, regs::rxdctl(0), regs::DCTL_ENABLE, true);
    fence(Ordering::Release);
    bar.write32(regs::rdt(0), reg(RING - 1));
    assert_eq!(a._model.service().rx, RING - 1, "the model filled the ring");
    Box::new(a)
}

/// Re-armed slots the lazy-tail anchor hands back with one RDT write: the driver's batch on this
/// ring (a quarter of it, at most 32).
const LAZY_TAIL: usize = 32;

/// The bare RX loop (ixy's `ixgbe_rx_batch` reduced to its minimum, as ixgbe_datapath): for each
/// slot from the cursor, load the write-back status, stop at the first without DD, take the length
/// and the slot's buffer, re-arm the slot with a fresh buffer's address; one RDT write per burst.
///
/// With `LAZY_TAIL_WRITE` it writes the tail as the driver does: once [`LAZY_TAIL`] re-armed slots
/// wait (DPDK's `rx_free_thresh`), not every burst, and it reads only up to the tail: the fair
/// floor for a driver that defers its tail write.
///
/// Out of line, as the driver's `rx_burst` is a call per burst: inlined into the measured loop, the
/// burst's call and its register saves would not be counted (14 instructions a burst less).
#[expect(clippy::cast_possible_truncation, reason = "the length field is 16 bits; ring positions are < 512")]
#[inline(never)]
fn rx_anchor_burst<const LAZY_TAIL_WRITE: bool>(a: &mut RxAnchor, row: usize) -> usize {
    let (idx, len) = &mut a.out[row];
    let mut slot = a.next;
    // The lazy loop reads at most the slots the device owns, up to the tail (the eager loop's tail
    // is the slot before the cursor, which the ring's length already keeps it from).
    let max = if LAZY_TAIL_WRITE { a.tail.wrapping_sub(slot) & (RING - 1) } else { usize::MAX };
    let (n_idx, n_len) = (max.min(idx.len()), max.min(len.len()));
    // Reborrowed as plain slices: through the `&mut Vec`s the loop reloaded each length and
    // bounds-checked each store (11 instructions a packet more, counted).
    let (idx, len) = (&mut idx[..n_idx], &mut len[..n_len]);
    let mut n = 0;
    while n < idx.len() && n < len.len() {
        // Acquire: pairs with the device's Release store of the write-back's second word.
        let status = a.ring.word(slot, 1).load(Ordering::Acquire);
        if status & rx::STAT_DD == 0 {
            break;
        }
        let Some(fresh) = a.free.pop() else { break };
        idx[n] = a.slot_buf[slot & (RING - 1)];
        len[n] = (status >> rx::LEN_SHIFT) as u16;
        a.slot_buf[slot & (RING - 1)] = fresh;
        // Relaxed: published by the Release fence before the RDT write.
        a.ring.word(slot, 0).store(a.bufs_iova + u64::from(fresh) * ANCHOR_BUF as u64, Ordering::Relaxed);
        // Relaxed: as above (clears DD).
        a.ring.word(slot, 1).store(0, Ordering::Relaxed);
        slot = (slot + 1) & (RING - 1);
        n += 1;
    }
    let tail = slot.wrapping_sub(1) & (RING - 1);
    if LAZY_TAIL_WRITE {
        a.next = slot;
        if tail.wrapping_sub(a.tail) & (RING - 1) >= LAZY_TAIL {
            a.tail = tail;
            fence(Ordering::Release);
            a.bar.write32(regs::rdt(0), tail as u32);
        }
    } else if n > 0 {
        a.next = slot;
        fence(Ordering::Release);
        a.bar.write32(regs::rdt(0), tail as u32);
    }
    n
}

/// The measured pass of either RX anchor: its bursts, with the model's register emulation armed.
fn rx_anchor_bursts<const LAZY_TAIL_WRITE: bool>(mut a: Box<RxAnchor>) -> Box<RxAnchor> {
    a.bar.arm(true);
    for row in 0..a.out.len() {
        black_box(rx_anchor_burst::<LAZY_TAIL_WRITE>(&mut a, row));
    }
    a.bar.arm(false);
    a
}

#[library_benchmark]
#[bench::burst1_n480(args = (1), setup = setup_rx_anchor)]
#[bench::burst4_n480(args = (4), setup = setup_rx_anchor)]
#[bench::burst8_n480(args = (8), setup = setup_rx_anchor)]
#[bench::burst16_n480(args = (16), setup = setup_rx_anchor)]
#[bench::burst32_n480(args = (32), setup = setup_rx_anchor)]
fn rx_lazy_tail_anchor(a: Box<RxAnchor>) -> Box<RxAnchor> {
    rx_anchor_bursts::<true>(a)
}

#[library_benchmark]
#[bench::burst1_n480(args = (1), setup = setup_rx_anchor)]
#[bench::burst4_n480(args = (4), setup = setup_rx_anchor)]
#[bench::burst8_n480(args = (8), setup = setup_rx_anchor)]
#[bench::burst16_n480(args = (16), setup = setup_rx_anchor)]
#[bench::burst32_n480(args = (32), setup = setup_rx_anchor)]
fn rx_anchor(a: Box<RxAnchor>) -> Box<RxAnchor> {
    rx_anchor_bursts::<false>(a)
}

/// The TX anchor: a bare ring on its own model, every buffer holding a pre-built frame.
struct TxAnchor {
    model: Model,
    ring: RawRing,
    bufs_iova: u64,
    slot_buf: Box<[u32; RING]>,
    /// Buffers whose frames were sent (the anchor's pool).
    free: Vec<u32>,
    tail: usize,
    clean: usize,
    bar: Arc<BenchBar>,
    /// Per burst: the buffers to send and their lengths, built before the measured function.
    input: Vec<Vec<(u32, u16)>>,
    _bufs: DmaMemory,
}

impl TxAnchor {
    /// Takes pre-built frames off the free stack (not measured).
    fn fill(&mut self) {
        for burst in &mut self.input {
            for slot in burst.iter_mut() {
                *slot = (self.free.pop().expect("a free buffer"), 60);
            }
        }
    }
}

fn setup_tx_anchor(burst: usize) -> Box<TxAnchor> {
    let (model, bar, dma) = bare_device(false);
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
    let raw = &*bar.inner;
    raw.write32(regs::tdbal(0), base.low());
    raw.write32(regs::tdbah(0), base.high());
    raw.write32(regs::tdlen(0), reg(RING * regs::DESC_LEN));
    raw.write32(regs::tdh(0), 0);
    raw.write32(regs::tdt(0), 0);
    raw.set_bits(regs::txdctl(0), regs::DCTL_ENABLE);
    wait_for(raw, regs::txdctl(0), regs::DCTL_ENABLE, true);
    let mut t = TxAnchor {
        model,
        ring: RawRing::new(ring),
        bufs_iova: bufs.iova(0).expect("iova").0,
        slot_buf: Box::new([0; RING]),
        free: (0..reg(ANCHOR_BUFFERS)).rev().collect(),
        tail: 0,
        clean: 0,
        bar,
        input: (0..TX_N / burst).map(|_| vec![(0, 0); burst]).collect(),
        _bufs: bufs,
    };
    for _ in 0..2 {
        t.fill();
        for row in 0..t.input.len() {
            assert_eq!(tx_anchor_burst(&mut t, row), burst);
        }
        assert_eq!(t.model.service().tx, TX_N);
    }
    t.fill();
    Box::new(t)
}

/// The bare TX loop (ixy's `ixgbe_tx_batch` reduced to its minimum, as ixgbe_datapath): clean
/// completed descriptors 32 at a time (the DD of the batch's last one) back to the free stack, write
/// one advanced data descriptor per frame, one TDT write for the burst.
#[expect(clippy::cast_possible_truncation, reason = "ring positions are < 512")]
fn tx_anchor_burst(t: &mut TxAnchor, row: usize) -> usize {
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
    let frames = &t.input[row];
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
        t.bar.write32(regs::tdt(0), slot as u32);
    }
    take
}

#[library_benchmark]
#[bench::burst1_n256(args = (1), setup = setup_tx_anchor)]
#[bench::burst4_n256(args = (4), setup = setup_tx_anchor)]
#[bench::burst8_n256(args = (8), setup = setup_tx_anchor)]
#[bench::burst16_n256(args = (16), setup = setup_tx_anchor)]
#[bench::burst32_n256(args = (32), setup = setup_tx_anchor)]
#[bench::burst64_n256(args = (64), setup = setup_tx_anchor)]
fn tx_anchor(mut t: Box<TxAnchor>) -> Box<TxAnchor> {
    t.bar.arm(true);
    for row in 0..t.input.len() {
        black_box(tx_anchor_burst(&mut t, row));
    }
    t.bar.arm(false);
    t
}

library_benchmark_group!(
    name = rx_group,
    benchmarks = [rx_anchor, rx_lazy_tail_anchor, rx_driver, rx_driver_channelizer]
);
library_benchmark_group!(name = tx_group, benchmarks = [tx_anchor, tx_driver]);

main!(
    config = LibraryBenchmarkConfig::default().tool(Callgrind::with_args([TOGGLE_MODEL_BAR_WRITE])),
    library_benchmark_groups = [rx_group, tx_group]
);
