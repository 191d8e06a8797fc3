//! The device behind the BAR: its state ([`Device`]), construction, reset, and the service pass that
//! reads the per-pass configuration and dispatches to the receive and transmit paths.
//!
//! Everything here runs under the model's lock. Registers live in the shared atomic array, which the
//! BAR reads and writes directly for registers without side effects (the tails, ring bases, RETA, ...);
//! the others come through [`Device::read`] and [`Device::write`].
//!
//! The rooms: [`regfile`] (the register array and the side effects of reads and writes), [`stats`]
//! (the clear-on-read statistics counters), [`rx`] (the receive path and steering), [`tx`] (the
//! transmit path) and [`faults`] (the injected write-back faults).

use std::sync::atomic::{AtomicU32, Ordering};

use netchannel::dev::{Link, MacAddr, NetDevice, PacketBatch};
use netchannel::pool::PoolCache;

use super::fdir::{self, Masks};
use super::hash::ToeplitzTable;
use super::iommu::Iommu;
use super::{Activity, SimFaults, SimStats, Wire};
use crate::regs;

mod faults;
mod regfile;
mod rx;
mod stats;
mod tx;

use regfile::{get, set};
pub(super) use regfile::{has_read_effect, has_write_effect};
use tx::Sink;

/// Queues the model serves in each direction.
const QUEUES: usize = regs::MAX_QUEUES as usize;
/// The shortest frame on the wire without FCS: shorter frames from a software wire are padded, as the
/// sending MAC would have.
const MIN_FRAME: usize = 60;
/// Bytes of FCS every frame carries on the wire (counted in GORC/GOTC, §8.2.3.23).
const FCS_LEN: usize = 4;
/// The largest frame the transmit path gathers (the 82599's TX limit is 15.5 KiB without TSO).
const MAX_TX_FRAME: usize = 15872;
/// Frames per wire receive burst, and bursts per pass.
const RX_BURST: usize = 64;
/// Wire receive bursts per pass.
const RX_BURSTS: usize = 4;
/// Generator frames per pass at most.
const GEN_BUDGET: usize = 4096;
/// Bytes per descriptor, as a register-width integer.
const DESC_BYTES: u32 = 16;
const _: () = assert!(regs::DESC_LEN == DESC_BYTES as usize);

/// Clear-on-read statistics counters (§8.2.3.23): indices into [`Device::counters`].
mod slot {
    pub(super) const CRCERRS: usize = 0;
    pub(super) const ILLERRC: usize = 1;
    pub(super) const ERRBC: usize = 2;
    pub(super) const MPC: usize = 3;
    pub(super) const RNBC: usize = MPC + 8;
    pub(super) const RLEC: usize = RNBC + 8;
    pub(super) const GPRC: usize = RLEC + 1;
    pub(super) const BPRC: usize = GPRC + 1;
    pub(super) const MPRC: usize = BPRC + 1;
    pub(super) const GPTC: usize = MPRC + 1;
    pub(super) const RUC: usize = GPTC + 1;
    pub(super) const ROC: usize = RUC + 1;
    pub(super) const TPR: usize = ROC + 1;
    pub(super) const TPT: usize = TPR + 1;
    pub(super) const QPRC: usize = TPT + 1;
    pub(super) const QPRDC: usize = QPRC + 16;
    pub(super) const QPTC: usize = QPRDC + 16;
    pub(super) const FDIRMATCH: usize = QPTC + 16;
    pub(super) const FDIRMISS: usize = FDIRMATCH + 1;
    pub(super) const COUNT: usize = FDIRMISS + 1;
}

/// The wire side, behind the lock with the device.
pub(super) enum WireState {
    /// Nothing connected.
    None,
    /// A network device and a cache of its pool.
    Device {
        /// The device.
        dev: Box<dyn NetDevice + Send>,
        /// Buffers for frames the model transmits.
        cache: PoolCache,
    },
    /// Replayed frames.
    Generator {
        /// The frames.
        frames: Vec<Vec<u8>>,
        /// The next one to replay.
        next: usize,
    },
}

impl WireState {
    /// The wire side of a configuration.
    pub(super) fn new(wire: Wire) -> Self {
        match wire {
            Wire::None => Self::None,
            Wire::Device(dev, pool) => Self::Device { dev, cache: pool.cache() },
            Wire::Generator(frames) => Self::Generator { frames, next: 0 },
        }
    }

    fn carrier(&self) -> bool {
        match self {
            Self::Device { dev, .. } => matches!(dev.link(), Link::Up { .. }),
            Self::None | Self::Generator { .. } => true,
        }
    }
}

/// The enable handshake of one queue (§4.6.7.1: software sets ENABLE and polls until it reads back).
#[derive(Debug, Default)]
struct Queue {
    /// What the driver asked for: the queue runs while this is set.
    on: bool,
    /// What RXDCTL/TXDCTL.ENABLE reads as.
    shown: bool,
    /// Reads left before `shown` follows `on`.
    reads_left: u32,
    /// A bad ring was already counted (TX: counted once per enable).
    ring_fault: bool,
    /// TX: the frame being gathered, across passes.
    frame: Vec<u8>,
    /// TX: the frame being gathered is lost (IOMMU fault, too long).
    frame_bad: bool,
}

/// Link training state (§4.6.4).
#[derive(Debug, Default)]
struct LinkState {
    up: bool,
    /// Reads of LINKS left before the link comes up after AN_RESTART.
    pending: Option<u32>,
}

/// The device state behind the lock.
pub(super) struct Device {
    mac: MacAddr,
    /// Faults to inject.
    pub(super) faults: SimFaults,
    reset_reads: u32,
    link_reads: u32,
    enable_reads: u32,
    /// The IOMMU.
    pub(super) iommu: Iommu,
    /// Flow Director filters.
    pub(super) fdir: fdir::Table,
    /// The model's own counters.
    pub(super) stats: SimStats,
    /// Reads of CTRL left while a reset is in progress.
    reset_left: Option<u32>,
    link: LinkState,
    rxq: Vec<Queue>,
    txq: Vec<Queue>,
    counters: [u64; slot::COUNT],
    gorc: u64,
    gotc: u64,
    ustat_add: u32,
    ustat_remove: u32,
    fstat_add: u32,
    fstat_remove: u32,
    /// Valid receive addresses (RAL/RAH with AV).
    unicast: Vec<[u8; 6]>,
    /// Frames written back, for the `every` faults.
    seq: u64,
    /// Receive scratch (padding, FCS).
    scratch: Vec<u8>,
    /// The Toeplitz tables of the last RSS key seen.
    rss_table: Option<ToeplitzTable>,
}

/// Per-pass configuration, read from the registers once.
struct Pass {
    rxen: bool,
    te: bool,
    fctrl: u32,
    /// MCSTCTRL.MFE: the multicast table array filters multicast.
    mta_filter: bool,
    crc_strip: bool,
    tx_pad: bool,
    max_frame: usize,
    /// RXCSUM.PCSD: the RSS hash / Flow Director id replaces the fragment checksum in word 0.
    pcsd: bool,
    rss: Option<Rss>,
    fdir: Option<Masks>,
}

/// RSS configuration (§7.1.2.8); the key's tables are [`Device::rss_table`].
struct Rss {
    fields: u32,
}

/// What became of a received frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Delivered,
    /// Its queue had no free descriptor and the caller asked not to drop (the generator): nothing was
    /// counted.
    NoDescriptor,
    Dropped,
}

/// A ring as its registers describe it.
#[derive(Clone, Copy, Debug)]
struct Ring {
    base: u64,
    n: u32,
    head: u32,
    tail: u32,
}

impl Device {
    /// A device before power-on.
    pub(super) fn new(
        mac: MacAddr,
        faults: SimFaults,
        reset_reads: u32,
        link_reads: u32,
        enable_reads: u32,
    ) -> Self {
        Self {
            mac,
            faults,
            reset_reads,
            link_reads,
            enable_reads,
            iommu: Iommu::default(),
            fdir: fdir::Table::default(),
            stats: SimStats::default(),
            reset_left: None,
            link: LinkState::default(),
            rxq: (0..QUEUES).map(|_| Queue::default()).collect(),
            txq: (0..QUEUES).map(|_| Queue::default()).collect(),
            counters: [0; slot::COUNT],
            gorc: 0,
            gotc: 0,
            ustat_add: 0,
            ustat_remove: 0,
            fstat_add: 0,
            fstat_remove: 0,
            unicast: Vec::new(),
            seq: 0,
            scratch: Vec::with_capacity(MAX_TX_FRAME + FCS_LEN),
            rss_table: None,
        }
    }

    /// Power-on: the reset values.
    pub(super) fn power_on(&mut self, regs: &[AtomicU32]) {
        self.reset(regs);
    }

    /// A device reset (§4.2.1.6.1): registers to their reset values, queues off, statistics and
    /// Flow Director filters cleared, link down. The IOMMU is the host's and stays.
    fn reset(&mut self, regs: &[AtomicU32]) {
        for r in regs {
            // Relaxed: under the lock, and the driver polls CTRL (a locked read) before using anything.
            r.store(0, Ordering::Relaxed);
        }
        set(regs, regs::EEC, regs::EEC_ARD | regs::EEC_PRES);
        set(regs, regs::RDRXCTL, regs::RDRXCTL_DMAIDONE);
        set(regs, regs::HLREG0, regs::HLREG0_TXCRCEN | regs::HLREG0_RXCRCSTRP | regs::HLREG0_TXPADEN);
        set(regs, regs::MAXFRS, 1518 << regs::MAXFRS_MFS_SHIFT);
        for q in 0..u32::from(regs::MAX_QUEUES) {
            // SRRCTL reset value: BSIZEPKT 2 KiB, BSIZEHDR 256 bytes, legacy descriptors (§8.2.3.8.7).
            set(regs, regs::srrctl(q), 0x402);
        }
        let [a, b, c, d, e, f] = self.mac.0;
        set(regs, regs::ral(0), u32::from_le_bytes([a, b, c, d]));
        set(regs, regs::rah(0), u32::from_le_bytes([e, f, 0, 0]) | regs::RAH_AV);
        self.unicast.clear();
        self.unicast.push(self.mac.0);
        self.reset_left = None;
        self.link = LinkState::default();
        for q in self.rxq.iter_mut().chain(self.txq.iter_mut()) {
            *q = Queue { frame: std::mem::take(&mut q.frame), ..Queue::default() };
            q.frame.clear();
        }
        self.counters = [0; slot::COUNT];
        self.gorc = 0;
        self.gotc = 0;
        self.ustat_add = 0;
        self.ustat_remove = 0;
        self.fstat_add = 0;
        self.fstat_remove = 0;
        self.fdir.init(0);
    }

    fn pass(&mut self, regs: &[AtomicU32]) -> Pass {
        let hlreg0 = get(regs, regs::HLREG0);
        let max_frame = if hlreg0 & regs::HLREG0_JUMBOEN != 0 {
            (get(regs, regs::MAXFRS) >> regs::MAXFRS_MFS_SHIFT) as usize
        } else {
            1518
        };
        let mrqc = get(regs, regs::MRQC);
        let rss = (mrqc & 0xF == regs::MRQC_RSSEN).then(|| {
            let mut key = [0u8; 40];
            for (i, chunk) in (0..).zip(key.chunks_exact_mut(4)) {
                chunk.copy_from_slice(&get(regs, regs::rssrk(i)).to_le_bytes());
            }
            if !self.rss_table.as_ref().is_some_and(|t| t.is_for(&key)) {
                self.rss_table = Some(ToeplitzTable::new(&key));
            }
            Rss { fields: mrqc }
        });
        let fdirctrl = get(regs, regs::FDIRCTRL);
        let fdir = (fdirctrl & regs::FDIRCTRL_PERFECT_MATCH != 0 && self.fdir.is_enabled())
            .then(|| Masks::from_regs(|r| get(regs, r)));
        Pass {
            rxen: get(regs, regs::RXCTRL) & regs::RXCTRL_RXEN != 0,
            te: get(regs, regs::DMATXCTL) & regs::DMATXCTL_TE != 0,
            fctrl: get(regs, regs::FCTRL),
            mta_filter: get(regs, regs::MCSTCTRL) & regs::MCSTCTRL_MFE != 0,
            crc_strip: hlreg0 & regs::HLREG0_RXCRCSTRP != 0,
            tx_pad: hlreg0 & regs::HLREG0_TXPADEN != 0,
            max_frame,
            pcsd: get(regs, regs::RXCSUM) & regs::RXCSUM_PCSD != 0,
            rss,
            fdir,
        }
    }

    /// One service pass.
    pub(super) fn service(&mut self, regs: &[AtomicU32], wire: &mut WireState) -> Activity {
        let mut act = Activity::default();
        if !self.link.up || self.reset_left.is_some() {
            return act;
        }
        let pass = self.pass(regs);
        match wire {
            WireState::None => {}
            WireState::Device { dev, cache } => {
                let mut batch = PacketBatch::with_capacity(RX_BURST);
                for _ in 0..RX_BURSTS {
                    let n = dev.rx_burst(0, cache, &mut batch).unwrap_or(0);
                    for packet in batch.drain() {
                        if self.receive(regs, &pass, packet.data(), true) == Outcome::Delivered {
                            act.rx += 1;
                        }
                    }
                    if n < RX_BURST {
                        break;
                    }
                }
            }
            WireState::Generator { frames, next } => {
                let count = frames.len();
                let mut full_in_a_row = 0;
                // At most one frame per free descriptor: the generator fills rings, nothing more.
                let mut free = 0;
                if pass.rxen {
                    for q in 0..QUEUES {
                        if !self.rxq[q].on {
                            continue;
                        }
                        match self.rx_ring(regs, q) {
                            Some(r) => free += ((r.tail + r.n - r.head) % r.n) as usize,
                            None => self.rx_ring_fault(q),
                        }
                    }
                }
                for _ in 0..free.min(GEN_BUDGET) {
                    let Some(frame) = frames.get(*next % count.max(1)) else { break };
                    match self.receive(regs, &pass, frame, false) {
                        Outcome::Delivered => {
                            act.rx += 1;
                            full_in_a_row = 0;
                        }
                        Outcome::Dropped => full_in_a_row = 0,
                        Outcome::NoDescriptor => {
                            full_in_a_row += 1;
                            if full_in_a_row >= count {
                                break;
                            }
                        }
                    }
                    *next = (*next + 1) % count;
                }
            }
        }
        if pass.te {
            let mut sink = Sink::new(wire);
            for q in 0..QUEUES {
                if self.txq[q].on {
                    act.tx += self.transmit(regs, &pass, q, &mut sink);
                }
            }
            sink.flush(&mut self.stats);
        }
        act
    }

    /// A ring from its registers: base 128-byte aligned (the low 7 bits are ignored, §8.2.3.8.1), length
    /// a non-zero multiple of 128, head and tail inside.
    fn ring(regs: &[AtomicU32], bal: u32, bah: u32, len: u32, h: u32, t: u32) -> Option<Ring> {
        let bytes = get(regs, len);
        if bytes == 0 || !bytes.is_multiple_of(128) {
            return None;
        }
        let n = bytes / DESC_BYTES;
        let base = (u64::from(get(regs, bah)) << 32 | u64::from(get(regs, bal))) & !0x7F;
        // The tail: Acquire (in `get`) pairs with the driver's tail write, which follows its Release fence.
        let tail = get(regs, t);
        let head = get(regs, h);
        (head < n && tail < n).then_some(Ring { base, n, head, tail })
    }
}
