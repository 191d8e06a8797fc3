//! A behavioural model of the Intel 82599 10 GbE controller: the subset of the device that the driver
//! ([`crate::driver`]) uses, faithful to the datasheet (Intel 82599 10 GbE Controller Datasheet,
//! revision 3.x; sections cited where each behaviour is implemented), so that every line of the driver
//! runs in tests and demos without the card.
//!
//! No public emulator models the 82599 (QEMU emulates the 82576, 82574 and e1000, not ixgbe), so
//! this one is ours. Register and descriptor
//! facts come from the datasheet as the Linux and DPDK `ixgbe` drivers and ixy use it; the code is our
//! own.
//!
//! # What it models
//!
//! * **BAR0** ([`Model::mmio`]): reset values; CTRL.RST self-clearing after [`SimConfig::reset_reads`]
//!   reads, with EEC.ARD and RDRXCTL.DMAIDONE set once the reset is done (§4.6.3); link up
//!   [`SimConfig::link_reads`] reads of LINKS after AUTOC.AN_RESTART (§4.6.4); RXDCTL/TXDCTL.ENABLE
//!   reading back after [`SimConfig::enable_reads`] reads (§4.6.7.1, §4.6.8.1); clear-on-read
//!   statistics (§8.2.3.23) and Flow Director statistics; FDIRCMD commands that self-clear (§7.1.2.7.10).
//! * **DMA** ([`Model::dma`]): an IOMMU that remembers the ranges the driver allocated or mapped
//!   (IOVA = virtual address); a descriptor that points anywhere else is an IOMMU fault, counted in
//!   [`SimStats::dma_faults`], never a wild access.
//! * **Receive** (§7.1): the destination address filter (RAL/RAH, FCTRL.UPE/MPE/BAM), Flow Director
//!   perfect-match filters with the global masks (§7.1.2.7), RSS with the Toeplitz hash and the
//!   redirection table (§7.1.2.8), advanced one-buffer descriptors (§7.1.6) with the packet length, EOP,
//!   the RSS hash and type or the Flow Director soft id and bucket hash, frames spread over several
//!   descriptors when they do not fit one buffer (SRRCTL.BSIZEPKT), drops when the ring has no free
//!   descriptor (QPRDC with SRRCTL.DROP_EN, else RNBC and MPC). The model never passes the tail.
//! * **Transmit** (§7.2): legacy and advanced data descriptors (context descriptors are consumed),
//!   frames gathered up to EOP, padding (HLREG0.TXPADEN), DD written back when RS is set, TDH.
//! * **The wire** ([`Wire`]): any [`NetDevice`] (the in-memory [`Pair`](netchannel::dev::Pair), a
//!   TAP), or a generator that replays frames into every free descriptor, for benchmarks.
//! * **Faults** ([`SimFaults`]): a device that misbehaves, to test the driver's defences.
//!
//! Queue statistics (QPRC, QPTC, QPRDC) are mapped through RQSMR/TQSM as on the device (§8.2.3.23.x):
//! after reset every queue counts in entry 0, until the driver programs the mapping.
//!
//! Timing is counted in register reads, never in wall time, so tests are deterministic.
//!
//! # Not modelled
//!
//! Interrupts (EICR stays 0), VLAN
//! filtering and stripping, checksum offloads, header split and legacy RX descriptors (a queue whose
//! SRRCTL.DESCTYPE is not advanced one-buffer is an unusable ring), TSO, DCB and virtualization, IPv6
//! Flow Director filters, signature filters, the per-bucket filter chain limit, flow control. The
//! write-back word 0 carries the RSS hash or the Flow Director id only with RXCSUM.PCSD set, as on the
//! device (§7.1.6.2); without it those bits are zero.
//!
//! # Example
//!
//! The reset handshake and one received frame, with the test playing the driver:
//!
//! ```
//! use std::sync::atomic::{fence, Ordering};
//! use ixgbe_vfio::regs::{self, rx};
//! use ixgbe_vfio::sim::{Model, SimConfig, Wire};
//!
//! let mut frame = vec![0u8; 60];
//! frame[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]); // to the model's default MAC
//! let model = Model::new(SimConfig { wire: Wire::Generator(vec![frame]), ..SimConfig::default() });
//! let bar = model.mmio();
//!
//! // Reset: CTRL.RST reads back set for a few reads, then clears; EEC.ARD and DMAIDONE follow.
//! bar.write32(regs::CTRL, regs::CTRL_RST_MASK);
//! while bar.read32(regs::CTRL) & regs::CTRL_RST_MASK != 0 {}
//! assert_ne!(bar.read32(regs::EEC) & regs::EEC_ARD, 0);
//! assert_ne!(bar.read32(regs::RDRXCTL) & regs::RDRXCTL_DMAIDONE, 0);
//! // Link up after an auto-negotiation restart.
//! bar.write32(regs::AUTOC, regs::AUTOC_LMS_10G_SERIAL | regs::AUTOC_AN_RESTART);
//! while bar.read32(regs::LINKS) & regs::LINKS_UP == 0 {}
//!
//! // One RX queue of 8 descriptors, each with a 2 KiB buffer.
//! let dma = model.dma();
//! let ring = dma.alloc(8 * regs::DESC_LEN)?;
//! let bufs = dma.alloc(8 * 2048)?;
//! for i in 0..8 {
//!     let buf = bufs.iova(i * 2048).expect("in range");
//!     ring.store_u64(i * regs::DESC_LEN, buf.0, Ordering::Relaxed);
//!     ring.store_u64(i * regs::DESC_LEN + 8, 0, Ordering::Relaxed);
//! }
//! let base = ring.iova(0).expect("in range");
//! bar.write32(regs::rdbal(0), base.low());
//! bar.write32(regs::rdbah(0), base.high());
//! bar.write32(regs::rdlen(0), 8 * regs::DESC_LEN as u32);
//! bar.write32(regs::srrctl(0), regs::SRRCTL_DESCTYPE_ADV_ONEBUF | regs::SRRCTL_DROP_EN | 2);
//! bar.write32(regs::rxdctl(0), regs::DCTL_ENABLE);
//! while bar.read32(regs::rxdctl(0)) & regs::DCTL_ENABLE == 0 {}
//! bar.write32(regs::RXCTRL, regs::RXCTRL_RXEN);
//! fence(Ordering::Release); // descriptors before the tail
//! bar.write32(regs::rdt(0), 7);
//!
//! // The generator fills the 7 free descriptors (the model never passes the tail).
//! let moved = model.service();
//! assert_eq!(moved.rx, 7);
//! let status = ring.load_u64(8, Ordering::Acquire);
//! assert_ne!(status & rx::STAT_DD, 0);
//! assert_ne!(status & rx::STAT_EOP, 0);
//! assert_eq!(status >> rx::LEN_SHIFT & 0xFFFF, 60);
//! assert_eq!(bar.read32(regs::rdh(0)), 7);
//! assert_eq!(bar.read32(regs::GPRC), 7);
//! assert_eq!(bar.read32(regs::GPRC), 0); // clear on read
//! # Ok::<(), ixgbe_vfio::hw::DmaError>(())
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use netchannel::dev::{MacAddr, NetDevice};
use netchannel::pool::Pool;

use crate::hw::{DmaSpace, Mmio, check_register};
use crate::regs;

mod device;
mod fdir;
mod hash;
mod iommu;

use device::{Device, WireState};

/// What a [`Model`] is built from.
pub struct SimConfig {
    /// The MAC address in the EEPROM: RAL(0)/RAH(0) after reset.
    pub mac: MacAddr,
    /// What the model's port is connected to.
    pub wire: Wire,
    /// Misbehaviour to inject.
    pub faults: SimFaults,
    /// Reads of CTRL that still show CTRL.RST (and LNK_RST) set after the driver wrote it; EEC.ARD and
    /// RDRXCTL.DMAIDONE read clear until then.
    pub reset_reads: u32,
    /// Reads of LINKS that still show the link down after AUTOC.AN_RESTART.
    pub link_reads: u32,
    /// Reads of RXDCTL/TXDCTL that still show the old ENABLE bit after the driver changed it.
    pub enable_reads: u32,
}

impl Default for SimConfig {
    /// MAC `02:00:00:00:00:01`, no wire, no faults, two reads for each handshake.
    fn default() -> Self {
        Self {
            mac: MacAddr([0x02, 0, 0, 0, 0, 0x01]),
            wire: Wire::None,
            faults: SimFaults::default(),
            reset_reads: 2,
            link_reads: 2,
            enable_reads: 2,
        }
    }
}

impl fmt::Debug for SimConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimConfig")
            .field("mac", &self.mac)
            .field("wire", &self.wire)
            .field("faults", &self.faults)
            .field("reset_reads", &self.reset_reads)
            .field("link_reads", &self.link_reads)
            .field("enable_reads", &self.enable_reads)
            .finish()
    }
}

/// What the model's port is connected to.
pub enum Wire {
    /// Nothing: no frame arrives, transmitted frames are counted and discarded (the link still comes
    /// up, as with a loopback plug).
    None,
    /// A network device, and the pool its packets come from (the model keeps a cache of it): frames it
    /// receives arrive at the model's port, frames the model transmits are sent on it (queue 0). The
    /// link is up only while the device's is.
    Device(Box<dyn NetDevice + Send>, Pool),
    /// Frames replayed cyclically into every free RX descriptor, never dropped for lack of one (the
    /// pre-filled rings of a benchmark); transmitted frames are counted and discarded.
    Generator(Vec<Vec<u8>>),
}

impl fmt::Debug for Wire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Device(dev, _) => write!(f, "Device({})", dev.info().name),
            Self::Generator(frames) => write!(f, "Generator({} frames)", frames.len()),
        }
    }
}

/// Misbehaviour the model injects, to test the driver's defences. `every: Some(n)` means every n-th
/// frame the model writes back (counting from 1; `Some(0)` is off). Faults are counted in
/// [`SimStats::faults_injected`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimFaults {
    /// CTRL.RST never self-clears (and EEC.ARD, RDRXCTL.DMAIDONE never come back).
    pub reset_never_clears: bool,
    /// LINKS never reports the link up.
    pub link_never_up: bool,
    /// Write back a length larger than the receive buffer.
    pub bad_length_every: Option<u32>,
    /// Write back a complete frame without EOP.
    pub missing_eop_every: Option<u32>,
    /// When a frame arrives and the ring is full, write a completed descriptor at the tail, which
    /// the model does not own, instead of dropping silently.
    pub write_past_tail: bool,
    /// Write back DD with nonsense in the other status and error bits.
    pub bogus_status_every: Option<u32>,
    /// Write back a zero length with DD and EOP.
    pub zero_length_every: Option<u32>,
}

/// The model's own counters: totals since [`Model::new`], independent of the clear-on-read registers
/// and of resets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Frames that arrived from the wire.
    pub rx_wire: u64,
    /// Frames written to RX rings.
    pub rx_delivered: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Frames dropped because their queue had no free descriptor.
    pub rx_dropped_no_desc: u64,
    /// Frames dropped because RXCTRL.RXEN was off or their queue was disabled or misconfigured.
    pub rx_dropped_disabled: u64,
    /// Frames dropped by the destination address filter.
    pub rx_dropped_filtered: u64,
    /// Frames dropped for being longer than the maximum frame size.
    pub rx_dropped_oversize: u64,
    /// Frames dropped by a Flow Director drop filter.
    pub rx_dropped_fdir: u64,
    /// Frames transmitted.
    pub tx_sent: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames the model could not transmit: an IOMMU fault in a buffer, an oversized gather, no pool
    /// buffer or a full wire.
    pub tx_dropped: u64,
    /// DMA accesses outside every mapped range (IOMMU faults).
    pub dma_faults: u64,
    /// Rings the model could not use: an unmapped ring, a length that is not a multiple of 128, a tail
    /// or head beyond the ring.
    pub ring_faults: u64,
    /// Flow Director filters added.
    pub fdir_adds: u64,
    /// Flow Director filters re-pointed (FILTER_UPDATE of an existing filter).
    pub fdir_updates: u64,
    /// Flow Director filters removed.
    pub fdir_removes: u64,
    /// Flow Director adds that failed (FDIRFSTAT), all causes.
    pub fdir_failed_adds: u64,
    /// Of those, adds whose FDIRHASH bucket hash differs from the one the model computes.
    pub fdir_hash_mismatches: u64,
    /// Flow Director removes of a filter that does not exist.
    pub fdir_failed_removes: u64,
    /// Received packets that matched a Flow Director filter.
    pub fdir_matches: u64,
    /// Received packets that Flow Director looked up and missed.
    pub fdir_misses: u64,
    /// Faults injected by [`SimFaults`].
    pub faults_injected: u64,
    /// Device resets (CTRL.RST).
    pub resets: u64,
    /// Register writes to read-only registers, ignored.
    pub ignored_writes: u64,
}

/// What one [`Model::service`] pass moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    /// Frames written to RX rings.
    pub rx: usize,
    /// Frames transmitted from TX rings.
    pub tx: usize,
}

impl Activity {
    /// Whether nothing moved.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.rx == 0 && self.tx == 0
    }
}

/// What the BAR, the DMA space and the service loop share.
pub(crate) struct Shared {
    /// The register file as the driver reads it; registers with side effects are also handled under
    /// `state`.
    regs: Box<[AtomicU32]>,
    state: Mutex<State>,
}

/// Everything behind the lock.
struct State {
    wire: WireState,
    dev: Device,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves registers as they were; keep going.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The 82599 model. Cheap to clone: clones share the device.
#[derive(Clone)]
pub struct Model {
    shared: Arc<Shared>,
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model").field("stats", &self.stats()).finish_non_exhaustive()
    }
}

impl Model {
    /// A powered-on device with its registers at their reset values and the link down.
    #[must_use]
    pub fn new(config: SimConfig) -> Self {
        let regs: Box<[AtomicU32]> = (0..regs::BAR0_LEN / 4).map(|_| AtomicU32::new(0)).collect();
        let wire = WireState::new(config.wire);
        let dev = Device::new(
            config.mac,
            config.faults,
            config.reset_reads,
            config.link_reads,
            config.enable_reads,
        );
        let shared = Arc::new(Shared { regs, state: Mutex::new(State { wire, dev }) });
        {
            let mut st = shared.lock();
            st.dev.power_on(&shared.regs);
        }
        Self { shared }
    }

    /// The BAR: [`crate::regs::BAR0_LEN`] bytes of registers whose writes take effect as on the device.
    #[must_use]
    pub fn mmio(&self) -> Arc<dyn Mmio> {
        Arc::new(SimBar(Arc::clone(&self.shared)))
    }

    /// The DMA space: allocations and mappings the model's IOMMU lets the device reach.
    #[must_use]
    pub fn dma(&self) -> Arc<dyn DmaSpace> {
        Arc::new(iommu::SimDma(Arc::clone(&self.shared)))
    }

    /// One pass of the device: frames from the wire into the RX rings (address filter, Flow Director,
    /// RSS, DMA, write-back, RDH), then the TX rings onto the wire (TDH, DD when RS is set). Bounded
    /// work per pass (a few hundred frames per direction).
    pub fn service(&self) -> Activity {
        let mut st = self.shared.lock();
        let State { wire, dev } = &mut *st;
        dev.service(&self.shared.regs, wire)
    }

    /// The model's own counters.
    #[must_use]
    pub fn stats(&self) -> SimStats {
        self.shared.lock().dev.stats
    }

    /// Changes the injected faults from now on.
    pub fn set_faults(&self, faults: SimFaults) {
        self.shared.lock().dev.faults = faults;
    }

    /// How many Flow Director filters are programmed.
    #[must_use]
    pub fn fdir_filters(&self) -> usize {
        self.shared.lock().dev.fdir.len()
    }

    /// How many DMA ranges the IOMMU holds (ring allocations and mappings that are still alive).
    #[must_use]
    pub fn dma_ranges(&self) -> usize {
        self.shared.lock().dev.iommu.len()
    }

    /// A thread that calls [`Model::service`] in a loop, yielding and then sleeping briefly when idle,
    /// until the returned handle is stopped or dropped.
    #[must_use]
    pub fn spawn(&self) -> SimThread {
        let stop = Arc::new(AtomicBool::new(false));
        let model = self.clone();
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("ixgbe-sim".into())
            .spawn(move || {
                let mut idle = 0u32;
                // Relaxed: a stop request, no data travels with it (join() orders the rest).
                while !flag.load(Ordering::Relaxed) {
                    if model.service().is_idle() {
                        idle = idle.saturating_add(1);
                        if idle < 64 {
                            std::thread::yield_now();
                        } else {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                    } else {
                        idle = 0;
                    }
                }
            })
            .ok();
        SimThread { stop, handle }
    }
}

/// The thread of [`Model::spawn`]; stops and joins it when dropped.
#[derive(Debug)]
pub struct SimThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl SimThread {
    /// Whether the thread was started (spawning can fail when the process is out of threads).
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        // Relaxed: see the loop in `Model::spawn`.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for SimThread {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The model's BAR.
struct SimBar(Arc<Shared>);

impl Mmio for SimBar {
    fn bar_len(&self) -> usize {
        regs::BAR0_LEN
    }

    fn read32(&self, offset: u32) -> u32 {
        let index = check_register(offset, regs::BAR0_LEN) / 4;
        if device::has_read_effect(offset) {
            let mut st = self.0.lock();
            let State { wire, dev } = &mut *st;
            dev.read(&self.0.regs, wire, offset)
        } else {
            // Acquire: pairs with the Release store of the register's last write (the driver's, or the
            // model's RDH/TDH), so what the writer did before is visible.
            self.0.regs[index].load(Ordering::Acquire)
        }
    }

    fn write32(&self, offset: u32, value: u32) {
        let index = check_register(offset, regs::BAR0_LEN) / 4;
        if device::has_write_effect(offset) {
            let mut st = self.0.lock();
            st.dev.write(&self.0.regs, offset, value);
        } else {
            // Release: publishes what the driver wrote before (descriptors, behind its Release fence);
            // pairs with the Acquire load of RDT/TDT in the model's service pass.
            self.0.regs[index].store(value, Ordering::Release);
        }
    }
}
