//! The device behind the BAR: register side effects, reset, the receive and transmit data paths.
//!
//! Everything here runs under the model's lock. Registers live in the shared atomic array, which the
//! BAR reads and writes directly for registers without side effects (the tails, ring bases, RETA, ...);
//! the others come through [`Device::read`] and [`Device::write`].

use std::sync::atomic::{AtomicU32, Ordering};

use netchannel::classify::{Classified, classify};
use netchannel::dev::{Link, MacAddr, NetDevice, PacketBatch};
use netchannel::pool::PoolCache;
use netchannel::signature::Proto;

use super::fdir::{self, Masks, Tuple};
use super::hash::{ToeplitzTable, ethernet_fcs};
use super::iommu::Iommu;
use super::{Activity, SimFaults, SimStats, Wire};
use crate::regs::{self, rx, tx};

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
/// TX descriptors per queue per pass (a frame in progress is always finished).
const TX_BUDGET: usize = 512;
/// Frames per wire transmit burst.
const TX_BURST: usize = 64;
/// Bytes per descriptor, as a register-width integer.
const DESC_BYTES: u32 = 16;
const _: () = assert!(regs::DESC_LEN == DESC_BYTES as usize);
/// The RSS redirection table's size (§7.1.2.8.3).
const RETA_ENTRIES: u32 = 128;

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

/// The counter slot of a clear-on-read statistics register.
fn counter_slot(off: u32) -> Option<usize> {
    let idx = |base: u32, stride: u32| ((off - base) / stride) as usize;
    Some(match off {
        regs::CRCERRS => slot::CRCERRS,
        regs::ILLERRC => slot::ILLERRC,
        regs::ERRBC => slot::ERRBC,
        regs::RLEC => slot::RLEC,
        regs::GPRC => slot::GPRC,
        regs::BPRC => slot::BPRC,
        regs::MPRC => slot::MPRC,
        regs::GPTC => slot::GPTC,
        regs::RUC => slot::RUC,
        regs::ROC => slot::ROC,
        regs::TPR => slot::TPR,
        regs::TPT => slot::TPT,
        regs::FDIRMATCH => slot::FDIRMATCH,
        regs::FDIRMISS => slot::FDIRMISS,
        o if (regs::mpc(0)..regs::mpc(8)).contains(&o) && o % 4 == 0 => slot::MPC + idx(regs::mpc(0), 4),
        o if (regs::rnbc(0)..regs::rnbc(8)).contains(&o) && o % 4 == 0 => slot::RNBC + idx(regs::rnbc(0), 4),
        o if (regs::qprc(0)..regs::qprc(16)).contains(&o) && o % 0x40 == regs::qprc(0) % 0x40 => {
            slot::QPRC + idx(regs::qprc(0), 0x40)
        }
        o if (regs::qprdc(0)..regs::qprdc(16)).contains(&o) && o % 0x40 == regs::qprdc(0) % 0x40 => {
            slot::QPRDC + idx(regs::qprdc(0), 0x40)
        }
        o if (regs::qptc(0)..regs::qptc(16)).contains(&o) && o % 0x40 == regs::qptc(0) % 0x40 => {
            slot::QPTC + idx(regs::qptc(0), 0x40)
        }
        _ => return None,
    })
}

/// The queue of a per-queue control register `reg(q)` at `off`, for queues the model serves.
fn queue_of(off: u32, reg: fn(u32) -> u32) -> Option<usize> {
    let base = reg(0);
    let last = reg(regs::MAX_QUEUES.into());
    ((base..last).contains(&off) && (off - base).is_multiple_of(0x40)).then(|| ((off - base) / 0x40) as usize)
}

/// Whether reading `off` has a side effect (or a value computed by the model).
pub(super) fn has_read_effect(off: u32) -> bool {
    matches!(
        off,
        regs::CTRL
            | regs::EICR
            | regs::LINKS
            | regs::FDIRFREE
            | regs::FDIRUSTAT
            | regs::FDIRFSTAT
            | regs::GORCL
            | regs::GORCH
            | regs::GOTCL
            | regs::GOTCH
    ) || queue_of(off, regs::rxdctl).is_some()
        || queue_of(off, regs::txdctl).is_some()
        || counter_slot(off).is_some()
}

/// Whether writing `off` has a side effect (or is ignored).
pub(super) fn has_write_effect(off: u32) -> bool {
    matches!(
        off,
        regs::CTRL
            | regs::EICR
            | regs::EIMS
            | regs::EIMC
            | regs::EEC
            | regs::RDRXCTL
            | regs::AUTOC
            | regs::LINKS
            | regs::STATUS
            | regs::FDIRCTRL
            | regs::FDIRCMD
            | regs::FDIRFREE
            | regs::FDIRUSTAT
            | regs::FDIRFSTAT
            | regs::GORCL
            | regs::GORCH
            | regs::GOTCL
            | regs::GOTCH
    ) || (regs::ral(0)..regs::ral(128)).contains(&off)
        || queue_of(off, regs::rxdctl).is_some()
        || queue_of(off, regs::txdctl).is_some()
        || counter_slot(off).is_some()
}

/// Reads a register from the array.
#[inline]
fn get(regs: &[AtomicU32], off: u32) -> u32 {
    // Acquire: pairs with the Release store of the driver's `write32` (and our own `set`), so that what
    // the driver wrote before a tail write (descriptors, behind its Release fence) is visible.
    regs.get(off as usize / 4).map_or(0, |r| r.load(Ordering::Acquire))
}

/// Writes a register in the array.
#[inline]
fn set(regs: &[AtomicU32], off: u32, value: u32) {
    if let Some(r) = regs.get(off as usize / 4) {
        // Release: pairs with the Acquire load of the driver's `read32` (RDH/TDH after write-back).
        r.store(value, Ordering::Release);
    }
}

/// Saturates a counter to a 32-bit register.
fn sat32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A queue index as a register argument (queues are below [`regs::MAX_QUEUES`]).
fn qreg(q: usize) -> u32 {
    u32::try_from(q).unwrap_or(u32::MAX)
}

/// Truncates to the low 16 bits (a register field).
#[expect(clippy::cast_possible_truncation, reason = "a 16-bit register field")]
fn low16(v: u32) -> u16 {
    v as u16
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

/// Where a frame goes.
struct Steer {
    /// The RX queue, `None` for a Flow Director drop filter.
    queue: Option<usize>,
    /// Write-back word 0.
    wb0: u64,
    /// Write-back word 1 status bits besides DD/EOP (FLM).
    status: u64,
    /// Flow Director looked the packet up: whether it matched.
    fdir: Option<bool>,
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

    fn count(&mut self, slot: usize) {
        if let Some(c) = self.counters.get_mut(slot) {
            *c = c.saturating_add(1);
        }
    }

    /// The statistics counter index of RX queue `q` (RQSMR) or TX queue `q` (TQSM).
    fn stat_index(regs: &[AtomicU32], map: fn(u32) -> u32, q: usize) -> usize {
        let q = qreg(q);
        ((get(regs, map(q / 4)) >> (8 * (q % 4))) & 0xF) as usize
    }

    // --- Registers -----------------------------------------------------------------------------------

    /// A read with a side effect ([`has_read_effect`]).
    pub(super) fn read(&mut self, regs: &[AtomicU32], wire: &WireState, off: u32) -> u32 {
        match off {
            regs::CTRL => {
                let v = get(regs, regs::CTRL);
                let Some(left) = self.reset_left else { return v };
                if self.faults.reset_never_clears {
                    return v;
                }
                if left > 0 {
                    self.reset_left = Some(left - 1);
                    return v;
                }
                // The reset is done (§4.6.3.2): RST self-clears, the EEPROM auto-read and the DMA init
                // complete.
                self.reset_left = None;
                let v = v & !regs::CTRL_RST_MASK;
                set(regs, regs::CTRL, v);
                set(regs, regs::EEC, get(regs, regs::EEC) | regs::EEC_ARD);
                set(regs, regs::RDRXCTL, get(regs, regs::RDRXCTL) | regs::RDRXCTL_DMAIDONE);
                v
            }
            regs::EICR => {
                let v = get(regs, regs::EICR);
                set(regs, regs::EICR, 0);
                v
            }
            regs::LINKS => {
                if let Some(left) = self.link.pending {
                    if left > 0 {
                        self.link.pending = Some(left - 1);
                    } else {
                        self.link.pending = None;
                        self.link.up = !self.faults.link_never_up;
                    }
                }
                if self.link.up && wire.carrier() { regs::LINKS_UP | regs::LINKS_SPEED_10G } else { 0 }
            }
            regs::FDIRFREE => u32::try_from(self.fdir.free()).unwrap_or(u32::MAX) & regs::FDIRFREE_FREE_MASK,
            regs::FDIRUSTAT => {
                let v = self.ustat_add.min(regs::FDIRUSTAT_ADD_MASK)
                    | self.ustat_remove.min(0xFFFF) << regs::FDIRUSTAT_REMOVE_SHIFT;
                self.ustat_add = 0;
                self.ustat_remove = 0;
                v
            }
            regs::FDIRFSTAT => {
                let v = self.fstat_add.min(regs::FDIRFSTAT_FADD_MASK)
                    | self.fstat_remove.min(regs::FDIRFSTAT_FIELD_MASK) << regs::FDIRFSTAT_FREMOVE_SHIFT;
                self.fstat_add = 0;
                self.fstat_remove = 0;
                v
            }
            // 36-bit octet counters: the low register reads bits 31:0, the high one bits 35:32 and
            // clears the counter (§8.2.3.23).
            regs::GORCL => sat32(self.gorc & 0xFFFF_FFFF),
            regs::GORCH => {
                let v = sat32((self.gorc >> 32) & 0xF);
                self.gorc = 0;
                v
            }
            regs::GOTCL => sat32(self.gotc & 0xFFFF_FFFF),
            regs::GOTCH => {
                let v = sat32((self.gotc >> 32) & 0xF);
                self.gotc = 0;
                v
            }
            _ => {
                if let Some(q) = queue_of(off, regs::rxdctl) {
                    return Self::read_dctl(regs, off, &mut self.rxq[q]);
                }
                if let Some(q) = queue_of(off, regs::txdctl) {
                    return Self::read_dctl(regs, off, &mut self.txq[q]);
                }
                if let Some(s) = counter_slot(off) {
                    let v = sat32(self.counters[s]);
                    self.counters[s] = 0;
                    return v;
                }
                get(regs, off)
            }
        }
    }

    fn read_dctl(regs: &[AtomicU32], off: u32, q: &mut Queue) -> u32 {
        if q.reads_left > 0 {
            q.reads_left -= 1;
        } else {
            q.shown = q.on;
        }
        let v = get(regs, off) & !regs::DCTL_ENABLE;
        if q.shown { v | regs::DCTL_ENABLE } else { v }
    }

    /// A write with a side effect ([`has_write_effect`]).
    pub(super) fn write(&mut self, regs: &[AtomicU32], off: u32, value: u32) {
        match off {
            regs::CTRL => {
                if value & regs::CTRL_RST != 0 {
                    self.reset(regs);
                    self.stats.resets += 1;
                    set(regs, regs::CTRL, value & regs::CTRL_RST_MASK);
                    set(regs, regs::EEC, get(regs, regs::EEC) & !regs::EEC_ARD);
                    set(regs, regs::RDRXCTL, get(regs, regs::RDRXCTL) & !regs::RDRXCTL_DMAIDONE);
                    self.reset_left = Some(self.reset_reads);
                } else if value & regs::CTRL_LNK_RST != 0 {
                    self.link = LinkState::default();
                    set(regs, regs::CTRL, value);
                    self.reset_left = Some(self.reset_reads);
                } else {
                    set(regs, regs::CTRL, value);
                }
            }
            // Write 1 to clear.
            regs::EICR => set(regs, regs::EICR, get(regs, regs::EICR) & !value),
            regs::EIMS => set(regs, regs::EIMS, get(regs, regs::EIMS) | value),
            regs::EIMC => set(regs, regs::EIMS, get(regs, regs::EIMS) & !value),
            // Read-only status bits keep their value.
            regs::EEC => {
                set(regs, regs::EEC, (value & !regs::EEC_ARD) | (get(regs, regs::EEC) & regs::EEC_ARD));
            }
            regs::RDRXCTL => {
                let done = get(regs, regs::RDRXCTL) & regs::RDRXCTL_DMAIDONE;
                set(regs, regs::RDRXCTL, (value & !regs::RDRXCTL_DMAIDONE) | done);
            }
            regs::AUTOC => {
                if value & regs::AUTOC_AN_RESTART != 0 {
                    // AN_RESTART self-clears; the link trains (§4.6.4).
                    self.link.up = false;
                    self.link.pending = Some(self.link_reads);
                }
                set(regs, regs::AUTOC, value & !regs::AUTOC_AN_RESTART);
            }
            regs::FDIRCTRL => {
                // Writing PBALLOC initializes the filter table (§7.1.2.7.x); INIT_DONE is read-only.
                let pballoc = value & 0x3;
                self.fdir.init(pballoc);
                let v = if pballoc != 0 {
                    value | regs::FDIRCTRL_INIT_DONE
                } else {
                    value & !regs::FDIRCTRL_INIT_DONE
                };
                set(regs, regs::FDIRCTRL, v);
            }
            regs::FDIRCMD => self.fdir_command(regs, value),
            o if (regs::ral(0)..regs::ral(128)).contains(&o) => {
                set(regs, o, value);
                self.update_unicast(regs);
            }
            _ => {
                if let Some(q) = queue_of(off, regs::rxdctl) {
                    Self::write_dctl(regs, off, value, &mut self.rxq[q], self.enable_reads);
                } else if let Some(q) = queue_of(off, regs::txdctl) {
                    Self::write_dctl(regs, off, value, &mut self.txq[q], self.enable_reads);
                } else {
                    // LINKS, STATUS, statistics: read-only.
                    self.stats.ignored_writes += 1;
                }
            }
        }
    }

    fn write_dctl(regs: &[AtomicU32], off: u32, value: u32, q: &mut Queue, reads: u32) {
        let want = value & regs::DCTL_ENABLE != 0;
        if want != q.on {
            q.on = want;
            q.reads_left = reads;
            q.ring_fault = false;
            q.frame.clear();
            q.frame_bad = false;
        }
        set(regs, off, value);
    }

    fn update_unicast(&mut self, regs: &[AtomicU32]) {
        self.unicast.clear();
        for i in 0..128 {
            let high = get(regs, regs::rah(i));
            if high & regs::RAH_AV != 0 {
                let [a, b, c, d] = get(regs, regs::ral(i)).to_le_bytes();
                let [e, f, _, _] = high.to_le_bytes();
                self.unicast.push([a, b, c, d, e, f]);
            }
        }
    }

    /// Executes an FDIRCMD command (§7.1.2.7.10); the command field self-clears.
    fn fdir_command(&mut self, regs: &[AtomicU32], value: u32) {
        if value & regs::FDIRCMD_CLEARHT != 0 {
            self.fdir.clear();
        }
        let mut done = value & !regs::FDIRCMD_CMD_MASK & !regs::FDIRCMD_FILTER_VALID;
        match value & regs::FDIRCMD_CMD_MASK {
            regs::FDIRCMD_ADD_FLOW => {
                let masks = Masks::from_regs(|r| get(regs, r));
                let port = get(regs, regs::FDIRPORT);
                let vlan = get(regs, regs::FDIRVLAN);
                let raw = Tuple {
                    src_ip: get(regs, regs::FDIRIPSA),
                    dst_ip: get(regs, regs::FDIRIPDA),
                    src_port: low16(port),
                    dst_port: low16(port >> 16),
                    flow_type: ((value >> regs::FDIRCMD_L4TYPE_SHIFT) & 0x7) as u8,
                    vlan: low16(vlan),
                    flex: low16(vlan >> 16),
                };
                let tuple = masks.apply(raw);
                let pool = masks.pool(((value >> regs::FDIRCMD_VT_POOL_SHIFT) & 0x3F) as u8);
                let queue = (value & regs::FDIRCMD_QUEUE_EN != 0)
                    .then_some(low16((value >> regs::FDIRCMD_RX_QUEUE_SHIFT) & 0x7F));
                let drop = value & regs::FDIRCMD_DROP != 0;
                let update = value & regs::FDIRCMD_FILTER_UPDATE != 0;
                let hash = get(regs, regs::FDIRHASH);
                let key = get(regs, regs::FDIRHKEY);
                match self.fdir.add(tuple, pool, hash, key, (queue, drop), update) {
                    Ok(fdir::Added::New) => {
                        self.ustat_add = self.ustat_add.saturating_add(1);
                        self.stats.fdir_adds += 1;
                    }
                    Ok(fdir::Added::Updated) => {
                        self.ustat_add = self.ustat_add.saturating_add(1);
                        self.stats.fdir_updates += 1;
                    }
                    Err(e) => {
                        self.fstat_add = self.fstat_add.saturating_add(1);
                        self.stats.fdir_failed_adds += 1;
                        if e == fdir::AddError::HashMismatch {
                            self.stats.fdir_hash_mismatches += 1;
                        }
                    }
                }
            }
            regs::FDIRCMD_REMOVE_FLOW => {
                if self.fdir.remove(get(regs, regs::FDIRHASH)) {
                    self.ustat_remove = self.ustat_remove.saturating_add(1);
                    self.stats.fdir_removes += 1;
                } else {
                    self.fstat_remove = self.fstat_remove.saturating_add(1);
                    self.stats.fdir_failed_removes += 1;
                }
            }
            regs::FDIRCMD_QUERY if self.fdir.query(get(regs, regs::FDIRHASH)).is_some() => {
                done |= regs::FDIRCMD_FILTER_VALID;
            }
            _ => {}
        }
        set(regs, regs::FDIRCMD, done);
    }

    // --- Data path -----------------------------------------------------------------------------------

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

    /// Receives one frame from the wire (without FCS).
    fn receive(&mut self, regs: &[AtomicU32], pass: &Pass, frame: &[u8], drop_when_full: bool) -> Outcome {
        if frame.len() >= MIN_FRAME && pass.crc_strip {
            return self.receive_frame(regs, pass, frame, frame.len() + FCS_LEN, drop_when_full);
        }
        // Pad as the sending MAC would have; keep the FCS when CRC stripping is off (HLREG0.RXCRCSTRP).
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend_from_slice(frame);
        if buf.len() < MIN_FRAME {
            buf.resize(MIN_FRAME, 0);
        }
        let wire_len = buf.len() + FCS_LEN;
        if !pass.crc_strip {
            let fcs = ethernet_fcs(&buf);
            buf.extend_from_slice(&fcs);
        }
        let out = self.receive_frame(regs, pass, &buf, wire_len, drop_when_full);
        self.scratch = buf;
        out
    }

    /// The destination address filter (§7.1.1.1).
    fn accepts(&self, pass: &Pass, frame: &[u8]) -> (bool, bool, bool) {
        let dst: [u8; 6] = frame.get(..6).and_then(|d| d.try_into().ok()).unwrap_or([0; 6]);
        let mac = MacAddr(dst);
        if mac == MacAddr::BROADCAST {
            (pass.fctrl & regs::FCTRL_BAM != 0 || pass.fctrl & regs::FCTRL_MPE != 0, true, false)
        } else if mac.is_multicast() {
            // The multicast table array is not modelled: multicast needs FCTRL.MPE.
            (pass.fctrl & regs::FCTRL_MPE != 0, false, true)
        } else {
            (pass.fctrl & regs::FCTRL_UPE != 0 || self.unicast.contains(&dst), false, false)
        }
    }

    fn receive_frame(
        &mut self,
        regs: &[AtomicU32],
        pass: &Pass,
        frame: &[u8],
        wire_len: usize,
        drop_when_full: bool,
    ) -> Outcome {
        let (accept, broadcast, multicast) = self.accepts(pass, frame);
        if !accept {
            self.stats.rx_wire += 1;
            self.stats.rx_dropped_filtered += 1;
            return Outcome::Dropped;
        }
        if wire_len > pass.max_frame {
            self.stats.rx_wire += 1;
            self.count(slot::TPR);
            self.count(slot::ROC);
            self.stats.rx_dropped_oversize += 1;
            return Outcome::Dropped;
        }
        let steer = self.steer(regs, pass, frame);
        let ring = match steer.queue {
            Some(q) if pass.rxen && self.rxq.get(q).is_some_and(|s| s.on) => self.rx_ring(regs, q),
            _ => None,
        };
        let bsize = steer.queue.map_or(0, |q| {
            let srrctl = get(regs, regs::srrctl(qreg(q)));
            if srrctl & regs::SRRCTL_DESCTYPE_MASK == regs::SRRCTL_DESCTYPE_ADV_ONEBUF {
                (srrctl & regs::SRRCTL_BSIZEPKT_MASK) as usize * 1024
            } else {
                0 // only advanced one-buffer descriptors are modelled
            }
        });
        let needed = frame.len().div_ceil(bsize.max(1)).max(1);
        if let (Some(r), Some(_)) = (ring, steer.queue)
            && bsize > 0
        {
            let free = (r.tail + r.n - r.head) % r.n;
            if (free as usize) < needed && !drop_when_full {
                return Outcome::NoDescriptor;
            }
        }
        // From here on the frame counts as received.
        self.stats.rx_wire += 1;
        self.count(slot::TPR);
        match steer.fdir {
            Some(true) => {
                self.count(slot::FDIRMATCH);
                self.stats.fdir_matches += 1;
            }
            Some(false) => {
                self.count(slot::FDIRMISS);
                self.stats.fdir_misses += 1;
            }
            None => {}
        }
        let Some(q) = steer.queue else {
            self.stats.rx_dropped_fdir += 1;
            return Outcome::Dropped;
        };
        let Some(ring) = ring.filter(|_| bsize > 0) else {
            if pass.rxen && self.rxq.get(q).is_some_and(|s| s.on) {
                self.rx_ring_fault(q);
            }
            self.count(slot::MPC);
            self.stats.rx_dropped_disabled += 1;
            return Outcome::Dropped;
        };
        let free = (ring.tail + ring.n - ring.head) % ring.n;
        if (free as usize) < needed {
            self.no_descriptor(regs, q, ring, frame.len());
            return Outcome::Dropped;
        }
        // Write the frame, one buffer per descriptor (§7.1.6), the status word last.
        let mut head = ring.head;
        let mut faulted = false;
        let chunks = frame.chunks(bsize);
        let last = needed - 1;
        for (i, chunk) in chunks.enumerate() {
            let desc = ring.base + u64::from(head) * regs::DESC_LEN as u64;
            // Relaxed: the Acquire load of RDT in `rx_ring` ordered the driver's descriptor writes.
            let Some(buf) = self.iommu.load(desc, Ordering::Relaxed) else {
                self.stats.dma_faults += 1;
                faulted = true;
                break;
            };
            head = (head + 1) % ring.n;
            if !self.iommu.write_bytes(buf, chunk) {
                // IOMMU fault: nothing written; the descriptor completes with an error (RXE).
                self.stats.dma_faults += 1;
                let wb1 = rx::STAT_DD | rx::STAT_EOP | rx::ERR_RXE;
                // Release: publishes the write-back; pairs with the driver's Acquire load of word 1.
                self.iommu.store(desc + 8, wb1, Ordering::Release);
                faulted = true;
                break;
            }
            let mut len = chunk.len() as u64;
            let mut status = rx::STAT_DD | steer.status;
            if i == last {
                status |= rx::STAT_EOP;
                self.seq += 1;
                self.inject(&mut status, &mut len, bsize);
            }
            // Relaxed: ordered before the Release store of word 1 below.
            self.iommu.store(desc, steer.wb0, Ordering::Relaxed);
            // Release: publishes the buffer and word 0; pairs with the driver's Acquire load of word 1.
            self.iommu.store(desc + 8, status | len << rx::LEN_SHIFT, Ordering::Release);
        }
        set(regs, regs::rdh(qreg(q)), head);
        if faulted {
            return Outcome::Dropped;
        }
        self.count(slot::GPRC);
        if broadcast {
            self.count(slot::BPRC);
        } else if multicast {
            self.count(slot::MPRC);
        }
        self.gorc = self.gorc.wrapping_add(wire_len as u64) & 0xF_FFFF_FFFF;
        let stat = Self::stat_index(regs, regs::rqsmr, q);
        self.count(slot::QPRC + stat);
        self.stats.rx_delivered += 1;
        self.stats.rx_bytes += frame.len() as u64;
        Outcome::Delivered
    }

    /// Counts an unusable RX ring, once per enable of its queue.
    fn rx_ring_fault(&mut self, q: usize) {
        if let Some(queue) = self.rxq.get_mut(q)
            && !queue.ring_fault
        {
            queue.ring_fault = true;
            self.stats.ring_faults += 1;
        }
    }

    /// The faults of [`SimFaults`] that change a frame's last write-back.
    fn inject(&mut self, status: &mut u64, len: &mut u64, bsize: usize) {
        let seq = self.seq;
        let hit = |every: Option<u32>| every.is_some_and(|e| e != 0 && seq.is_multiple_of(u64::from(e)));
        let f = self.faults;
        if hit(f.bad_length_every) {
            *len = (bsize as u64 + 1024).min(0xFFFF);
            self.stats.faults_injected += 1;
        }
        if hit(f.missing_eop_every) {
            *status &= !rx::STAT_EOP;
            self.stats.faults_injected += 1;
        }
        if hit(f.bogus_status_every) {
            *status |= 0x000F_FFF0 | 0xFFF << 20;
            self.stats.faults_injected += 1;
        }
        if hit(f.zero_length_every) {
            *len = 0;
            self.stats.faults_injected += 1;
        }
    }

    /// A frame for queue `q` found no free descriptor (§7.1.5: dropped and counted in QPRDC with
    /// SRRCTL.DROP_EN; otherwise the packet buffer overflows: RNBC and MPC).
    fn no_descriptor(&mut self, regs: &[AtomicU32], q: usize, ring: Ring, len: usize) {
        self.stats.rx_dropped_no_desc += 1;
        if get(regs, regs::srrctl(qreg(q))) & regs::SRRCTL_DROP_EN != 0 {
            let stat = Self::stat_index(regs, regs::rqsmr, q);
            self.count(slot::QPRDC + stat);
        } else {
            self.count(slot::RNBC);
            self.count(slot::MPC);
        }
        if self.faults.write_past_tail {
            // Fault: complete the descriptor at the tail, which the device does not own.
            let desc = ring.base + u64::from(ring.tail) * regs::DESC_LEN as u64;
            let wb1 = rx::STAT_DD | rx::STAT_EOP | (len as u64) << rx::LEN_SHIFT;
            self.iommu.store(desc, 0, Ordering::Relaxed);
            // Release: as a normal write-back.
            self.iommu.store(desc + 8, wb1, Ordering::Release);
            self.stats.faults_injected += 1;
        }
    }

    /// RX queue `q`'s ring, when its registers describe a usable one.
    fn rx_ring(&self, regs: &[AtomicU32], q: usize) -> Option<Ring> {
        let q = qreg(q);
        let ring =
            Self::ring(regs, regs::rdbal(q), regs::rdbah(q), regs::rdlen(q), regs::rdh(q), regs::rdt(q))?;
        self.iommu.check(ring.base, u64::from(ring.n) * regs::DESC_LEN as u64).then_some(ring)
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

    /// Flow Director, then RSS, then queue 0 (§7.1.2).
    fn steer(&self, regs: &[AtomicU32], pass: &Pass, frame: &[u8]) -> Steer {
        let parsed = Parsed::of(frame);
        let mut steer = Steer { queue: Some(0), wb0: parsed.pkt_type(), status: 0, fdir: None };
        if let Some(rss) = &pass.rss
            && let Some(table) = &self.rss_table
            && let Some((hash, ty)) = parsed.rss(rss, table)
        {
            let index = hash % RETA_ENTRIES;
            let entry = (get(regs, regs::reta(index / 4)) >> (8 * (index % 4))) & 0xF;
            steer.queue = Some(entry as usize);
            steer.wb0 |= ty;
            if pass.pcsd {
                steer.wb0 |= u64::from(hash) << rx::HASH_SHIFT;
            }
        }
        if let Some(masks) = &pass.fdir
            && let Some(tuple) = parsed.fdir_tuple(frame, masks)
        {
            match self.fdir.lookup(&masks.apply(tuple)) {
                Some(action) => {
                    steer.fdir = Some(true);
                    steer.status |= rx::STAT_FLM;
                    if pass.pcsd {
                        steer.wb0 = (steer.wb0 & 0xFFFF_FFFF)
                            | u64::from(action.bucket & 0x7FFF) << rx::HASH_SHIFT
                            | u64::from(action.soft_id) << rx::FDIR_ID_SHIFT;
                    }
                    if action.drop {
                        steer.queue = None;
                    } else if let Some(q) = action.queue {
                        steer.queue = Some(usize::from(q));
                    }
                }
                None => steer.fdir = Some(false),
            }
        }
        steer
    }

    /// Transmits from TX queue `q` (§7.2.2): descriptors from TDH up to TDT.
    fn transmit(&mut self, regs: &[AtomicU32], pass: &Pass, q: usize, sink: &mut Sink<'_>) -> usize {
        let qr = qreg(q);
        let ring =
            Self::ring(regs, regs::tdbal(qr), regs::tdbah(qr), regs::tdlen(qr), regs::tdh(qr), regs::tdt(qr))
                .filter(|r| self.iommu.check(r.base, u64::from(r.n) * regs::DESC_LEN as u64));
        let Some(ring) = ring else {
            let queue = &mut self.txq[q];
            // Count a bad ring once per enable, and only when the driver gave it work.
            if !queue.ring_fault && get(regs, regs::tdt(qr)) != get(regs, regs::tdh(qr)) {
                queue.ring_fault = true;
                self.stats.ring_faults += 1;
            }
            return 0;
        };
        let mut head = ring.head;
        let mut sent = 0;
        let mut budget = TX_BUDGET;
        while head != ring.tail && (budget > 0 || !self.txq[q].frame.is_empty()) {
            budget = budget.saturating_sub(1);
            let desc = ring.base + u64::from(head) * regs::DESC_LEN as u64;
            // Relaxed: the Acquire load of TDT ordered the driver's descriptor writes.
            let (Some(addr), Some(cmd)) =
                (self.iommu.load(desc, Ordering::Relaxed), self.iommu.load(desc + 8, Ordering::Relaxed))
            else {
                self.stats.dma_faults += 1;
                break;
            };
            head = (head + 1) % ring.n;
            let context = cmd & tx::DCMD_DEXT != 0 && cmd & tx::DTYP_MASK == tx::DTYP_CONTEXT;
            if !context {
                let len = (cmd & tx::DTALEN_MASK) as usize;
                let queue = &mut self.txq[q];
                if !queue.frame_bad {
                    if queue.frame.len() + len > MAX_TX_FRAME {
                        queue.frame_bad = true;
                    } else if !self.iommu.read_bytes(addr, len, &mut queue.frame) {
                        queue.frame_bad = true;
                        self.stats.dma_faults += 1;
                    }
                }
                if cmd & tx::DCMD_EOP != 0 {
                    let mut frame = std::mem::take(&mut self.txq[q].frame);
                    if self.txq[q].frame_bad || frame.is_empty() {
                        self.stats.tx_dropped += 1;
                    } else {
                        if pass.tx_pad && frame.len() < MIN_FRAME {
                            frame.resize(MIN_FRAME, 0);
                        }
                        self.count(slot::GPTC);
                        self.count(slot::TPT);
                        self.gotc = self.gotc.wrapping_add((frame.len() + FCS_LEN) as u64) & 0xF_FFFF_FFFF;
                        let stat = Self::stat_index(regs, regs::tqsm, q);
                        self.count(slot::QPTC + stat);
                        self.stats.tx_sent += 1;
                        self.stats.tx_bytes += frame.len() as u64;
                        sink.send(&frame, &mut self.stats);
                        sent += 1;
                    }
                    frame.clear();
                    self.txq[q].frame = frame;
                    self.txq[q].frame_bad = false;
                }
            }
            if cmd & tx::DCMD_RS != 0 {
                // Release: the write-back (§7.2.3.2.4); pairs with the driver's Acquire load of word 1.
                self.iommu.store(desc + 8, tx::STAT_DD, Ordering::Release);
            }
        }
        set(regs, regs::tdh(qr), head);
        sent
    }
}

/// Where transmitted frames go.
enum Sink<'w> {
    Discard,
    Device { dev: &'w mut (dyn NetDevice + Send), cache: &'w PoolCache, batch: Option<PacketBatch<'w>> },
}

impl<'w> Sink<'w> {
    fn new(wire: &'w mut WireState) -> Self {
        match wire {
            WireState::Device { dev, cache } => Self::Device { dev: dev.as_mut(), cache, batch: None },
            WireState::None | WireState::Generator { .. } => Self::Discard,
        }
    }

    fn send(&mut self, frame: &[u8], stats: &mut SimStats) {
        let Self::Device { cache, batch, .. } = self else { return };
        let Some(mut packet) = cache.alloc() else {
            stats.tx_dropped += 1;
            return;
        };
        if packet.extend_from_slice(frame).is_err() {
            stats.tx_dropped += 1;
            return;
        }
        let full = {
            let b = batch.get_or_insert_with(|| PacketBatch::with_capacity(TX_BURST));
            if let Err(p) = b.push(packet) {
                drop(p);
                stats.tx_dropped += 1;
            }
            b.is_full()
        };
        if full {
            self.flush(stats);
        }
    }

    fn flush(&mut self, stats: &mut SimStats) {
        let Self::Device { dev, batch: Some(batch), .. } = self else { return };
        if batch.is_empty() {
            return;
        }
        let _ = dev.tx_burst(0, batch);
        // A full wire loses what it did not take, like a cable with no room.
        stats.tx_dropped += batch.len() as u64;
        batch.clear();
    }
}

/// What the model parses of a received frame for steering.
struct Parsed {
    /// Source and destination addresses (IPv4 in the first 4 bytes), when the frame is IP.
    ip: Option<(bool, [u8; 16], [u8; 16])>,
    /// Transport protocol and ports of a TCP/UDP flow (not a fragment).
    l4: Option<(Proto, u16, u16)>,
    /// The 802.1Q tag control information.
    vlan: u16,
}

impl Parsed {
    fn of(frame: &[u8]) -> Self {
        let be16 = |at: usize| frame.get(at..at + 2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        let tagged = be16(12) == netchannel::classify::ETHERTYPE_VLAN;
        let vlan = if tagged { be16(14) } else { 0 };
        let l3 = if tagged { 18 } else { 14 };
        if let Classified::Flow { sig, .. } = classify(frame) {
            let (remote, local) = (sig.remote(), sig.local());
            let (v6, src, dst) = match (remote.ip(), local.ip()) {
                (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                    (false, pad16(&s.octets()), pad16(&d.octets()))
                }
                (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => (true, s.octets(), d.octets()),
                _ => return Self { ip: None, l4: None, vlan },
            };
            return Self {
                ip: Some((v6, src, dst)),
                l4: Some((sig.proto(), remote.port(), local.port())),
                vlan,
            };
        }
        // Not a flow: the addresses still feed the IP-only RSS hash.
        let ip = match be16(l3 - 2) {
            netchannel::classify::ETHERTYPE_IPV4 if frame.get(l3).is_some_and(|b| b >> 4 == 4) => {
                match (frame.get(l3 + 12..l3 + 16), frame.get(l3 + 16..l3 + 20)) {
                    (Some(s), Some(d)) => Some((false, pad16(s), pad16(d))),
                    _ => None,
                }
            }
            netchannel::classify::ETHERTYPE_IPV6 if frame.get(l3).is_some_and(|b| b >> 4 == 6) => {
                match (frame.get(l3 + 8..l3 + 24), frame.get(l3 + 24..l3 + 40)) {
                    (Some(s), Some(d)) => Some((true, pad16(s), pad16(d))),
                    _ => None,
                }
            }
            _ => None,
        };
        Self { ip, l4: None, vlan }
    }

    /// Packet type bits of write-back word 0 (§7.1.6.2).
    fn pkt_type(&self) -> u64 {
        let mut t = match self.ip {
            Some((false, ..)) => rx::PKT_TYPE_IPV4,
            Some((true, ..)) => rx::PKT_TYPE_IPV6,
            None => 0,
        };
        match self.l4 {
            Some((Proto::Tcp, ..)) => t |= rx::PKT_TYPE_TCP,
            Some((Proto::Udp, ..)) => t |= rx::PKT_TYPE_UDP,
            None => {}
        }
        t
    }

    /// The RSS hash and type (§7.1.2.8.1: the fields MRQC enables for the packet's type).
    fn rss(&self, rss: &Rss, table: &ToeplitzTable) -> Option<(u32, u64)> {
        let (v6, src, dst) = self.ip?;
        let alen = if v6 { 16 } else { 4 };
        let mut input = [0u8; 36];
        input[..alen].copy_from_slice(&src[..alen]);
        input[alen..2 * alen].copy_from_slice(&dst[..alen]);
        let f = rss.fields;
        let (l4_type, with_ports) = match (self.l4, v6) {
            (Some((Proto::Tcp, ..)), false) if f & regs::MRQC_RSS_FIELD_IPV4_TCP != 0 => {
                (rx::RSS_TYPE_TCP_IPV4, true)
            }
            (Some((Proto::Udp, ..)), false) if f & regs::MRQC_RSS_FIELD_IPV4_UDP != 0 => {
                (rx::RSS_TYPE_UDP_IPV4, true)
            }
            (Some((Proto::Tcp, ..)), true) if f & regs::MRQC_RSS_FIELD_IPV6_TCP != 0 => {
                (rx::RSS_TYPE_TCP_IPV6, true)
            }
            (Some((Proto::Udp, ..)), true) if f & regs::MRQC_RSS_FIELD_IPV6_UDP != 0 => {
                (rx::RSS_TYPE_UDP_IPV6, true)
            }
            (_, false) if f & regs::MRQC_RSS_FIELD_IPV4 != 0 => (rx::RSS_TYPE_IPV4, false),
            (_, true) if f & regs::MRQC_RSS_FIELD_IPV6 != 0 => (rx::RSS_TYPE_IPV6, false),
            _ => return None,
        };
        let mut n = 2 * alen;
        if with_ports && let Some((_, sport, dport)) = self.l4 {
            input[n..n + 2].copy_from_slice(&sport.to_be_bytes());
            input[n + 2..n + 4].copy_from_slice(&dport.to_be_bytes());
            n += 4;
        }
        Some((table.hash(&input[..n]), l4_type))
    }

    /// The Flow Director input of an IPv4 TCP/UDP packet (IPv6 filters are not modelled).
    fn fdir_tuple(&self, frame: &[u8], masks: &Masks) -> Option<Tuple> {
        let (false, src, dst) = self.ip? else { return None };
        let (proto, sport, dport) = self.l4?;
        let flow_type = match proto {
            Proto::Tcp => fdir::L4_TCP,
            Proto::Udp => fdir::L4_UDP,
        };
        let flex = frame
            .get(masks.flex_offset..masks.flex_offset + 2)
            .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
        Some(Tuple {
            src_ip: u32::from_le_bytes([src[0], src[1], src[2], src[3]]),
            dst_ip: u32::from_le_bytes([dst[0], dst[1], dst[2], dst[3]]),
            src_port: sport,
            dst_port: dport,
            flow_type,
            vlan: self.vlan,
            flex,
        })
    }
}

/// An address in a 16-byte array (IPv4 in the first 4 bytes).
fn pad16(b: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    let n = b.len().min(16);
    out[..n].copy_from_slice(&b[..n]);
    out
}
