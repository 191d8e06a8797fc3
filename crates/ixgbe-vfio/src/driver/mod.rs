//! The 82599 driver, written once against [`Mmio`] and [`DmaSpace`] so that it runs unchanged on a
//! real BAR ([`crate::platform::vfio`], [`crate::platform::noiommu`]) and on the behavioural model
//! ([`crate::sim`]).
//!
//! [`Ixgbe::init`] runs the datasheet's initialization sequence (82599 datasheet §4.6.3, in the
//! same order as ixy's and DPDK's drivers) and splits the device into
//!
//! * one [`Ixgbe`]: the control handle: MAC address, link, the clear-on-read statistics registers
//!   accumulated into 64-bit totals ([`NicStats`]), and the Flow Director flow-group table
//!   ([`FlowSteering`]: 4096 perfect filters keyed by the low 12 bits of the TCP source port, moved
//!   between queues with [`FlowSteering::migrate`]);
//! * one [`IxgbeQueue`] per core: an RX + TX queue pair that implements [`NetDevice`](netchannel::dev::NetDevice) with one queue.
//!
//! RSS (MRQC, RETA, RSSRK) spreads what no filter matches over the first 16 queues.
//!
//! # Trust
//!
//! Everything the device writes is untrusted: a descriptor with a length larger than the buffer, no
//! EOP or frame error bits is dropped and counted, never delivered; ring positions come from the
//! driver's own counters, never from descriptors or head registers. The driver never panics on a
//! register or descriptor value.
//!
//! # Example
//!
//! On the model (on real hardware, `mmio` and `dma` come from [`crate::platform`] instead, and no one
//! calls `service`):
//!
//! ```
//! use ixgbe_vfio::driver::{Config, Ixgbe};
//! use ixgbe_vfio::sim::{Model, SimConfig, Wire};
//! use netchannel::dev::{NetDevice, PacketBatch};
//! use netchannel::pool::{HugePages, Pool};
//! use netchannel::signature::FlowGroup;
//! use netchannel::steering::FlowSteering;
//!
//! // A device whose wire replays one frame (to its MAC) into every free RX descriptor.
//! let mut frame = vec![0u8; 60];
//! frame[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
//! let model = Model::new(SimConfig { wire: Wire::Generator(vec![frame]), ..SimConfig::default() });
//!
//! let pool = Pool::builder(4096).hugepages(HugePages::Never).build()?;
//! let config = Config { queues: 2, rx_ring: 256, tx_ring: 256, ..Config::default() };
//! let (mut nic, mut queues) = Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config)?;
//! assert_eq!(nic.queue_of(FlowGroup(7)), 1); // round-robin at first
//! nic.migrate(FlowGroup(7), 0)?; // new connections of group 7 now arrive on queue 0
//!
//! model.service(); // the device moves frames
//! let cache = pool.cache(); // one per core, with the queue
//! let mut batch = PacketBatch::with_capacity(32);
//! assert_eq!(queues[0].rx_burst(0, &cache, &mut batch)?, 32);
//! assert_eq!(queues[0].tx_burst(0, &mut batch)?, 32); // echo them
//! println!("{:?}", nic.stats());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use netchannel::dev::{Link, MacAddr};
use netchannel::pool::Pool;
use netchannel::signature::FlowGroup;
use netchannel::steering::{FlowSteering, SteeringError};

use crate::hw::{DmaError, DmaSpace, Mmio};
use crate::regs;

mod dma;
pub mod fdir;
mod queue;
mod ring;

pub use queue::{IxgbeQueue, QueueStats};

use dma::BufferDma;
use queue::{QueueError, QueueParts};

/// The MTU the driver configures (standard frames; no jumbo frames).
pub const MTU: usize = 1500;

/// The Toeplitz key the driver writes to RSSRK: the well-known key of Microsoft's RSS verification
/// suite (any key works; this one makes hashes comparable with published examples).
const RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0,
    0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42,
    0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// RETA entries (128 of 4 bits, four per register: §8.2.3.7.x) and the most queues RSS reaches.
const RETA_ENTRIES: u32 = 128;
/// The most RX queues RSS can spread over (RETA entries are 4 bits wide).
pub const MAX_RSS_QUEUES: u16 = 16;
/// Per-queue statistics registers exist for the first 16 queues.
const STAT_QUEUES: usize = 16;
/// The 82599's RX packet buffers (RXPBSIZE/TXPBSIZE/MPC/RNBC have 8 entries).
const PACKET_BUFFERS: u32 = 8;

/// How the driver sets the device up. Build it with struct update syntax from [`Config::default`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// RX/TX queue pairs (one per core), 1..=[`regs::MAX_QUEUES`].
    pub queues: u16,
    /// RX descriptors per queue: a power of two in 32..=4096.
    pub rx_ring: u16,
    /// TX descriptors per queue: a power of two in 32..=4096.
    pub tx_ring: u16,
    /// Program the 4096 flow-group perfect filters (Flow Director, PBALLOC 256 KiB).
    pub fdir: bool,
    /// Spread traffic that no filter matches over the queues with RSS (when `queues > 1`).
    pub rss: bool,
    /// How long [`Ixgbe::init`] waits for the link; [`Duration::ZERO`] skips the wait.
    pub link_timeout: Duration,
    /// Accept every unicast and multicast frame, not only those to our MAC and broadcast.
    pub promiscuous: bool,
    /// How long to wait for each step the device confirms (reset, EEPROM, DMA init, queue enable,
    /// Flow Director init).
    pub register_timeout: Duration,
}

impl Default for Config {
    /// One queue, 512-descriptor rings, Flow Director and RSS on, 10 s for the link, not
    /// promiscuous, 1 s per register wait.
    fn default() -> Self {
        Self {
            queues: 1,
            rx_ring: 512,
            tx_ring: 512,
            fdir: true,
            rss: true,
            link_timeout: Duration::from_secs(10),
            promiscuous: false,
            register_timeout: Duration::from_secs(1),
        }
    }
}

impl Config {
    fn validate(&self, pool: &Pool) -> Result<(), InitError> {
        if self.queues == 0 || self.queues > regs::MAX_QUEUES {
            return Err(InitError::BadConfig(format!(
                "queues = {}: the driver sets up 1 to {} queue pairs",
                self.queues,
                regs::MAX_QUEUES
            )));
        }
        for (what, n) in [("rx_ring", self.rx_ring), ("tx_ring", self.tx_ring)] {
            if !n.is_power_of_two() || !(32..=4096).contains(&n) {
                return Err(InitError::BadConfig(format!(
                    "{what} = {n}: descriptor rings are a power of two from 32 to 4096"
                )));
            }
        }
        if pool.data_room() < 1024 {
            return Err(InitError::BadConfig(format!(
                "the pool's data room is {} bytes; the 82599 receives into buffers of at least 1 KiB \
                 (build the pool with data_room(2048))",
                pool.data_room()
            )));
        }
        let needed = usize::from(self.queues) * (usize::from(self.rx_ring) + 64) + pool.cache_size();
        if (pool.buffers() as usize) < needed {
            return Err(InitError::BadConfig(format!(
                "a pool of {} buffers cannot fill {} RX rings of {} descriptors and keep buffers to \
                 refill them; build it with at least {} (more for frames in flight)",
                pool.buffers(),
                self.queues,
                self.rx_ring,
                needed * 2
            )));
        }
        Ok(())
    }
}

/// Why [`Ixgbe::init`] failed. Each message says what the device did not do and what to check.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// CTRL.RST did not self-clear.
    #[error(
        "the device did not finish its reset within {waited:?} (CTRL.RST stayed set): check that it is an \
         82599 bound to vfio-pci, powered (D0), and that BAR0 is the register BAR"
    )]
    ResetTimeout {
        /// How long the driver waited.
        waited: Duration,
    },
    /// EEC.ARD never set.
    #[error(
        "the EEPROM auto-read did not complete within {waited:?} (EEC.ARD clear): the NIC's EEPROM may be \
         blank or damaged; check it with the kernel driver (`ethtool -e`)"
    )]
    EepromTimeout {
        /// How long the driver waited.
        waited: Duration,
    },
    /// RDRXCTL.DMAIDONE never set.
    #[error(
        "DMA initialization did not complete within {waited:?} after reset (RDRXCTL.DMAIDONE clear): check \
         that bus mastering is enabled in the PCI command register"
    )]
    DmaInitTimeout {
        /// How long the driver waited.
        waited: Duration,
    },
    /// LINKS.UP never set.
    #[error(
        "no link after {waited:?}: check the cable or SFP+ module and that the peer is up; set \
         Config::link_timeout to Duration::ZERO to start without waiting"
    )]
    LinkTimeout {
        /// How long the driver waited.
        waited: Duration,
    },
    /// RXDCTL/TXDCTL.ENABLE did not read back as set.
    #[error(
        "{} queue {queue} did not report itself enabled within {waited:?} ({}DCTL.ENABLE clear): check the \
         ring registers (base address alignment, length a multiple of 128 bytes)",
        if *rx { "RX" } else { "TX" },
        if *rx { "RX" } else { "TX" }
    )]
    EnableTimeout {
        /// The queue.
        queue: u16,
        /// Whether it was the RX queue (else TX).
        rx: bool,
        /// How long the driver waited.
        waited: Duration,
    },
    /// FDIRCTRL.INIT_DONE never set.
    #[error(
        "Flow Director initialization did not complete within {waited:?} (FDIRCTRL.INIT_DONE clear): the \
         RX packet buffer may be too small for PBALLOC 256 KiB; disable Config::fdir to run without it"
    )]
    FdirInitTimeout {
        /// How long the driver waited.
        waited: Duration,
    },
    /// A flow group's perfect filter did not take.
    #[error(
        "the Flow Director filter of flow group {group} was not added: {why}; disable Config::fdir to run \
         with RSS only"
    )]
    FdirFilter {
        /// The flow group.
        group: u16,
        /// What the device did.
        why: String,
    },
    /// Descriptor ring or buffer memory could not be set up for DMA.
    #[error("DMA setup failed: {0}")]
    Dma(#[from] DmaError),
    /// The configuration or the pool cannot work.
    #[error("bad configuration: {0}")]
    BadConfig(String),
}

/// The device's statistics: the clear-on-read registers (§8.2.3.23) accumulated into 64-bit totals
/// since [`Ixgbe::init`], plus the driver's own Flow Director counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicStats {
    /// CRCERRS.
    pub crc_errors: u64,
    /// ILLERRC.
    pub illegal_bytes: u64,
    /// ERRBC.
    pub error_bytes: u64,
    /// Sum of MPC over the packet buffers: frames missed for lack of packet buffer space.
    pub missed_packets: u64,
    /// Sum of RNBC: frames that found no free descriptor.
    pub no_buffer: u64,
    /// RLEC.
    pub length_errors: u64,
    /// RUC.
    pub rx_undersize: u64,
    /// ROC.
    pub rx_oversize: u64,
    /// GPRC.
    pub rx_good_packets: u64,
    /// BPRC.
    pub rx_broadcast: u64,
    /// MPRC.
    pub rx_multicast: u64,
    /// GORCL/H.
    pub rx_good_bytes: u64,
    /// TPR.
    pub rx_total_packets: u64,
    /// GPTC.
    pub tx_good_packets: u64,
    /// GOTCL/H.
    pub tx_good_bytes: u64,
    /// TPT.
    pub tx_total_packets: u64,
    /// QPRC of the first 16 queues.
    pub queue_rx_packets: [u64; STAT_QUEUES],
    /// QPRDC of the first 16 queues: frames dropped for lack of descriptors (SRRCTL.DROP_EN).
    pub queue_rx_dropped: [u64; STAT_QUEUES],
    /// QPTC of the first 16 queues.
    pub queue_tx_packets: [u64; STAT_QUEUES],
    /// FDIRMATCH: frames that matched a filter.
    pub fdir_matches: u64,
    /// FDIRMISS: frames that matched none.
    pub fdir_misses: u64,
    /// FDIRUSTAT adds.
    pub fdir_adds: u64,
    /// FDIRUSTAT removes.
    pub fdir_removes: u64,
    /// FDIRFSTAT failed adds (a wrong bucket hash shows up here).
    pub fdir_failed_adds: u64,
    /// FDIRFSTAT failed removes.
    pub fdir_failed_removes: u64,
    /// Flow groups moved by [`FlowSteering::migrate`].
    pub migrations: u64,
    /// Filter commands whose FDIRCMD command field never cleared.
    pub fdir_cmd_timeouts: u64,
    /// FDIRCMD reads spent waiting for filter commands.
    pub fdir_cmd_polls: u64,
}

/// The control handle of an initialized 82599: MAC, link, statistics, flow-group steering.
pub struct Ixgbe {
    name: String,
    mmio: Arc<dyn Mmio>,
    mac: MacAddr,
    config: Config,
    fdir_key: u32,
    pballoc: u32,
    /// The RX queue of each flow group (as programmed in the device).
    groups: Box<[u16]>,
    totals: NicStats,
}

impl fmt::Debug for Ixgbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ixgbe")
            .field("name", &self.name)
            .field("mac", &self.mac)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The [`Link`] a LINKS register value says.
pub(crate) fn link_state(links: u32) -> Link {
    if links & regs::LINKS_UP == 0 {
        return Link::Down;
    }
    let speed_mbps = match links & regs::LINKS_SPEED_MASK {
        regs::LINKS_SPEED_10G => Some(10_000),
        regs::LINKS_SPEED_1G => Some(1_000),
        regs::LINKS_SPEED_100M => Some(100),
        _ => None,
    };
    Link::Up { speed_mbps }
}

/// Polls `reg` until all of `mask` is set (`set`) or clear (`!set`), for at most `timeout`: back to
/// back at first, then with sleeps growing to 1 ms. Returns whether the condition was met.
fn wait_bits(mmio: &dyn Mmio, reg: u32, mask: u32, set: bool, timeout: Duration) -> bool {
    let start = Instant::now();
    let mut pause = Duration::from_micros(5);
    loop {
        let value = mmio.read32(reg) & mask;
        if (set && value == mask) || (!set && value == 0) {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// A 32-bit register value from a small count (queue index, ring byte length).
fn reg_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

impl Ixgbe {
    /// Initializes the device behind `mmio`/`dma` and returns its control handle and one queue pair
    /// per `config.queues`. Maps `pool`'s region for DMA once (every queue's buffers come from it),
    /// allocates the rings and fills the RX rings from per-queue caches of `pool`.
    ///
    /// # Errors
    ///
    /// [`InitError`]: a bad configuration, or a step the device did not confirm in time (each error
    /// names the step and what to check).
    pub fn init(
        name: &str,
        mmio: Arc<dyn Mmio>,
        dma: Arc<dyn DmaSpace>,
        pool: &Pool,
        config: Config,
    ) -> Result<(Self, Vec<IxgbeQueue>), InitError> {
        config.validate(pool)?;
        if mmio.bar_len() < regs::BAR0_LEN {
            return Err(InitError::BadConfig(format!(
                "BAR0 is {:#x} bytes; the 82599's is {:#x}: is this the right BAR of the right device?",
                mmio.bar_len(),
                regs::BAR0_LEN
            )));
        }
        let wait = config.register_timeout;
        let m = &*mmio;

        // §4.6.3.1: disable interrupts (the driver polls).
        m.write32(regs::EIMC, regs::EIMC_ALL);
        // §4.6.3.2: global reset (device + link), wait for it to clear, then 10 ms before touching
        // the device again.
        m.set_bits(regs::CTRL, regs::CTRL_RST_MASK);
        if !wait_bits(m, regs::CTRL, regs::CTRL_RST_MASK, false, wait) {
            return Err(InitError::ResetTimeout { waited: wait });
        }
        std::thread::sleep(Duration::from_millis(10));
        // §4.6.3.1: interrupts again, the reset re-enabled them.
        m.write32(regs::EIMC, regs::EIMC_ALL);
        // §4.6.3: wait for the EEPROM auto-read (EEC.ARD, §8.2.3.2.1).
        if !wait_bits(m, regs::EEC, regs::EEC_ARD, true, wait) {
            return Err(InitError::EepromTimeout { waited: wait });
        }
        // §4.6.3: wait for DMA initialization (RDRXCTL.DMAIDONE, §8.2.3.8.8).
        if !wait_bits(m, regs::RDRXCTL, regs::RDRXCTL_DMAIDONE, true, wait) {
            return Err(InitError::DmaInitTimeout { waited: wait });
        }
        // The MAC address the EEPROM loaded into receive address 0 (§8.2.3.7.9/10).
        let (ral, rah) = (m.read32(regs::ral(0)), m.read32(regs::rah(0)));
        let [a, b, c, d] = ral.to_le_bytes();
        let [e, f, _, _] = rah.to_le_bytes();
        let mac = MacAddr([a, b, c, d, e, f]);

        // §4.6.4: link setup: 10G serial, XAUI PMA/PMD (what the EEPROM normally loads), then restart
        // auto-negotiation; the wait for the link comes last.
        let autoc = m.read32(regs::AUTOC);
        let autoc = (autoc & !regs::AUTOC_LMS_MASK) | regs::AUTOC_LMS_10G_SERIAL;
        let autoc = (autoc & !regs::AUTOC_10G_PMA_PMD_MASK) | regs::AUTOC_10G_XAUI;
        m.write32(regs::AUTOC, autoc);
        m.write32(regs::AUTOC, autoc | regs::AUTOC_AN_RESTART);

        let pballoc = regs::FDIRCTRL_PBALLOC_256K;
        let queues = config.queues;
        let mut nic = Self {
            name: name.to_owned(),
            mmio: Arc::clone(&mmio),
            mac,
            fdir_key: regs::ATR_BUCKET_HASH_KEY,
            pballoc,
            groups: (0..fdir::GROUPS).map(|g| u16::try_from(g % usize::from(queues)).unwrap_or(0)).collect(),
            totals: NicStats::default(),
            config,
        };
        // §4.6.5: the statistics registers are clear-on-read: read them once to start from zero.
        // The per-queue counters are mapped through RQSMR/TQSM (§8.2.3.23): after reset every queue
        // counts in counter 0; map queue q to counter q for the first 16 queues.
        let stat_queues = usize::from(queues).min(STAT_QUEUES);
        for reg in 0..stat_queues.div_ceil(4) {
            let value = (0..4)
                .filter(|lane| reg * 4 + lane < stat_queues)
                .fold(0u32, |v, lane| v | reg_u32(reg * 4 + lane) << (8 * lane));
            m.write32(regs::rqsmr(reg_u32(reg)), value);
            m.write32(regs::tqsm(reg_u32(reg)), value);
        }
        nic.read_counters();
        nic.totals = NicStats::default();

        // The pool's buffers become reachable by the device (one mapping for every queue).
        let region = pool.region();
        let mapping = Arc::new(dma.map(region.as_ptr() as usize, region.len())?);
        let bsize_kb = (pool.data_room() / 1024).min(16);
        let Some(buffers) = BufferDma::new(pool, mapping, bsize_kb * 1024) else {
            return Err(InitError::BadConfig("the pool has no buffers".into()));
        };

        // §4.6.7: receive initialization. RX stays off while it is configured.
        m.clear_bits(regs::RXCTRL, regs::RXCTRL_RXEN);
        // One packet buffer (no DCB/VT): 128 KiB for PB0, as ixy does; with Flow Director's 256 KiB
        // the 512 KiB RX buffer still has room (§7.1.2.7: the filter table lives in RX buffer space).
        m.write32(regs::rxpbsize(0), regs::RXPBSIZE_128KB);
        for i in 1..PACKET_BUFFERS {
            m.write32(regs::rxpbsize(i), 0);
        }
        // CRC strip in both places that must agree (§8.2.3.22.8, §8.2.3.8.8).
        m.set_bits(regs::HLREG0, regs::HLREG0_RXCRCSTRP);
        m.set_bits(regs::RDRXCTL, regs::RDRXCTL_CRCSTRIP);
        // Accept broadcast; unicast/multicast promiscuous on request (§8.2.3.7.1).
        let mut fctrl = m.read32(regs::FCTRL) | regs::FCTRL_BAM;
        if nic.config.promiscuous {
            fctrl |= regs::FCTRL_UPE | regs::FCTRL_MPE;
        }
        m.write32(regs::FCTRL, fctrl);
        // The multicast table array starts empty (its contents survive a reset, §8.2.3.7.3) and
        // filters nothing until [`Ixgbe::join_multicast`] enables it.
        for n in 0..regs::MTA_REGS {
            m.write32(regs::mta(n), 0);
        }
        m.clear_bits(regs::MCSTCTRL, regs::MCSTCTRL_MFE);
        // RSS (§7.1.2.8): key, redirection table, then MRQC. The write-back descriptor carries the
        // hash or the filter id instead of the fragment checksum (RXCSUM.PCSD).
        nic.setup_rss();
        // Flow Director (§7.1.2.7): perfect filters keyed by flow group, routed round-robin.
        if nic.config.fdir {
            nic.setup_fdir()?;
        }

        // Rings, and buffers for every RX descriptor.
        let mut queue_pairs = Vec::with_capacity(usize::from(queues));
        for q in 0..queues {
            let rx_ring = dma.alloc(usize::from(nic.config.rx_ring) * regs::DESC_LEN)?;
            let tx_ring = dma.alloc(usize::from(nic.config.tx_ring) * regs::DESC_LEN)?;
            let parts = QueueParts {
                index: q,
                name: format!("{name}/q{q}"),
                mac,
                mmio: Arc::clone(&mmio),
                rx_ring,
                tx_ring,
                dma: buffers.clone(),
                cache: pool.cache(),
                fdir: nic.config.fdir,
            };
            let queue = IxgbeQueue::new(parts).map_err(|e| match e {
                QueueError::PoolExhausted { needed, got } => InitError::BadConfig(format!(
                    "the pool ran out of buffers filling RX queue {q} ({got} of {needed}); build it with more \
                     buffers"
                )),
                QueueError::RingLength { descriptors } => InitError::BadConfig(format!(
                    "queue {q}'s ring memory holds {descriptors} descriptors, not a power of two; the DMA space \
                     must allocate exactly the length asked for"
                )),
            })?;
            queue_pairs.push(queue);
        }
        for queue in &queue_pairs {
            let q = u32::from(queue.index());
            let ring = queue.rx_ring();
            let base = ring.iova(0).ok_or_else(|| no_iova(ring.len()))?;
            // §4.6.7 / §7.1.9: advanced one-buffer descriptors, buffer size in KiB, drop when the
            // ring is full rather than stalling the packet buffer (SRRCTL.DROP_EN).
            let srrctl =
                (m.read32(regs::srrctl(q)) & !regs::SRRCTL_DESCTYPE_MASK & !regs::SRRCTL_BSIZEPKT_MASK)
                    | regs::SRRCTL_DESCTYPE_ADV_ONEBUF
                    | regs::SRRCTL_DROP_EN
                    | reg_u32(bsize_kb);
            m.write32(regs::srrctl(q), srrctl);
            m.write32(regs::rdbal(q), base.low());
            m.write32(regs::rdbah(q), base.high());
            m.write32(regs::rdlen(q), reg_u32(ring.len()));
            // The ring starts empty for the device; RDT moves when the queue is enabled.
            m.write32(regs::rdh(q), 0);
            m.write32(regs::rdt(q), 0);
        }
        // §4.6.7: "no snoop disable" (CTRL_EXT.NS_DIS, §8.2.3.1.3), then enable RX.
        m.set_bits(regs::CTRL_EXT, regs::CTRL_EXT_NS_DIS);
        m.set_bits(regs::RXCTRL, regs::RXCTRL_RXEN);

        // §4.6.8: transmit initialization: CRC insertion and padding of short frames, one 40 KiB TX
        // packet buffer (§7.2.1.1), no DCB rate limits, arbiter on.
        m.set_bits(regs::HLREG0, regs::HLREG0_TXCRCEN | regs::HLREG0_TXPADEN);
        m.write32(regs::txpbsize(0), regs::TXPBSIZE_40KB);
        for i in 1..PACKET_BUFFERS {
            m.write32(regs::txpbsize(i), 0);
        }
        m.write32(regs::DTXMXSZRQ, regs::DTXMXSZRQ_NO_LIMIT);
        m.clear_bits(regs::RTTDCS, regs::RTTDCS_ARBDIS);
        for queue in &queue_pairs {
            let q = u32::from(queue.index());
            let ring = queue.tx_ring();
            let base = ring.iova(0).ok_or_else(|| no_iova(ring.len()))?;
            m.write32(regs::tdbal(q), base.low());
            m.write32(regs::tdbah(q), base.high());
            m.write32(regs::tdlen(q), reg_u32(ring.len()));
            // §7.2.3.4.1/§7.2.3.5: prefetch, host and write-back thresholds (DPDK's defaults).
            let thresh = (regs::TXDCTL_THRESH_MASK << regs::TXDCTL_PTHRESH_SHIFT)
                | (regs::TXDCTL_THRESH_MASK << regs::TXDCTL_HTHRESH_SHIFT)
                | (regs::TXDCTL_THRESH_MASK << regs::TXDCTL_WTHRESH_SHIFT);
            let txdctl = (m.read32(regs::txdctl(q)) & !thresh)
                | 36 << regs::TXDCTL_PTHRESH_SHIFT
                | 8 << regs::TXDCTL_HTHRESH_SHIFT
                | 4 << regs::TXDCTL_WTHRESH_SHIFT;
            m.write32(regs::txdctl(q), txdctl);
        }
        // §4.6.8: enable the TX DMA.
        m.write32(regs::DMATXCTL, regs::DMATXCTL_TE);

        // §4.6.7 (last steps) and §4.6.8: enable each queue, wait for the device to confirm, then
        // hand the RX ring to the device (RDT = n - 1) and start the TX ring empty.
        for queue in &mut queue_pairs {
            let q = u32::from(queue.index());
            m.set_bits(regs::rxdctl(q), regs::DCTL_ENABLE);
            queue.set_enabled(true);
            if !wait_bits(m, regs::rxdctl(q), regs::DCTL_ENABLE, true, wait) {
                return Err(InitError::EnableTimeout { queue: queue.index(), rx: true, waited: wait });
            }
            m.write32(regs::rdh(q), 0);
            m.write32(regs::rdt(q), reg_u32(queue.rx_ring_len() - 1));
            m.write32(regs::tdh(q), 0);
            m.write32(regs::tdt(q), 0);
            m.set_bits(regs::txdctl(q), regs::DCTL_ENABLE);
            queue.set_enabled(false);
            if !wait_bits(m, regs::txdctl(q), regs::DCTL_ENABLE, true, wait) {
                return Err(InitError::EnableTimeout { queue: queue.index(), rx: false, waited: wait });
            }
        }

        // §4.6.4 / §4.6.3 (end): wait for the link.
        let link_timeout = nic.config.link_timeout;
        if !link_timeout.is_zero() && !nic.wait_for_link(link_timeout) {
            return Err(InitError::LinkTimeout { waited: link_timeout });
        }
        tracing::info!(device = %nic.name, mac = %mac, queues, link = ?nic.link(), "82599 initialized");
        Ok((nic, queue_pairs))
    }

    /// RSS (§7.1.2.8, registers §8.2.3.7.x): RSSRK, RETA round-robin over the first
    /// `min(queues, 16)` queues, MRQC with the TCP/IPv4/IPv6 hash fields; MRQC 0 when off.
    fn setup_rss(&self) {
        let m = &*self.mmio;
        let rss_queues = self.config.queues.min(MAX_RSS_QUEUES);
        if !self.config.rss || rss_queues < 2 {
            m.write32(regs::MRQC, 0);
            // The filter id still needs the descriptor field when Flow Director reports matches.
            if self.config.fdir {
                m.set_bits(regs::RXCSUM, regs::RXCSUM_PCSD);
            }
            return;
        }
        for (i, word) in RSS_KEY.chunks_exact(4).enumerate() {
            let value = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            m.write32(regs::rssrk(reg_u32(i)), value);
        }
        for reg in 0..RETA_ENTRIES / 4 {
            let mut value = 0u32;
            for lane in 0..4 {
                let entry = reg * 4 + lane;
                value |= (entry % u32::from(rss_queues)) << (8 * lane);
            }
            m.write32(regs::reta(reg), value);
        }
        m.set_bits(regs::RXCSUM, regs::RXCSUM_PCSD);
        m.write32(
            regs::MRQC,
            regs::MRQC_RSSEN
                | regs::MRQC_RSS_FIELD_IPV4
                | regs::MRQC_RSS_FIELD_IPV4_TCP
                | regs::MRQC_RSS_FIELD_IPV6
                | regs::MRQC_RSS_FIELD_IPV6_TCP,
        );
    }

    /// Flow Director init (§7.1.2.7) and one perfect filter per flow group, group `g` on queue
    /// `g % queues`.
    fn setup_fdir(&mut self) -> Result<(), InitError> {
        let wait = self.config.register_timeout;
        if !fdir::init_perfect(&*self.mmio, self.fdir_key, self.pballoc, wait) {
            return Err(InitError::FdirInitTimeout { waited: wait });
        }
        for group in 0..fdir::GROUPS {
            let group = u16::try_from(group).unwrap_or(0);
            let queue = self.groups[usize::from(group)];
            self.write_filter(group, queue, false).map_err(|e| InitError::FdirFilter {
                group,
                why: match e {
                    fdir::CmdError::Timeout => {
                        format!("FDIRCMD did not clear after {} polls", fdir::CMD_POLLS)
                    }
                    fdir::CmdError::Rejected { failed } => format!(
                        "the device counted {failed} failed add(s) in FDIRFSTAT (the bucket hash in FDIRHASH \
                         does not match the device's)"
                    ),
                },
            })?;
        }
        Ok(())
    }

    /// Writes one flow-group filter and adds what the command's counters said to the totals.
    fn write_filter(&mut self, group: u16, queue: u16, update: bool) -> Result<(), fdir::CmdError> {
        let (result, counters) =
            fdir::write_group_filter(&*self.mmio, group, queue, self.fdir_key, self.pballoc, update);
        let t = &mut self.totals;
        t.fdir_adds += counters.adds;
        t.fdir_removes += counters.removes;
        t.fdir_failed_adds += counters.failed_adds;
        t.fdir_failed_removes += counters.failed_removes;
        t.fdir_cmd_polls += counters.polls;
        if result == Err(fdir::CmdError::Timeout) {
            t.fdir_cmd_timeouts += 1;
        }
        result
    }

    /// The device name given to [`Ixgbe::init`].
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The MAC address from the EEPROM.
    #[must_use]
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// Accepts frames to the multicast MACs `groups` besides our own and broadcast: their bits in
    /// the multicast table array (§7.1.1.1.2; MCSTCTRL.MO = 00, address bits 47:36), and the
    /// table's filter on. What IPv6 needs: the all-nodes group (`33:33:00:00:00:01`) and the
    /// solicited-node group of each address (`33:33:ff:..`), where Neighbor Discovery reaches the
    /// stack. The table is a 4096-bit hash, so a frame to another group whose bits collide passes
    /// too (the stack drops it: it is not for a group it joined). Unicast MACs are ignored.
    pub fn join_multicast(&mut self, groups: &[MacAddr]) {
        let m = &*self.mmio;
        for group in groups.iter().filter(|g| g.is_multicast()) {
            let bit = regs::mta_bit(group.0);
            m.set_bits(regs::mta(bit >> 5), 1 << (bit & 31));
        }
        m.set_bits(regs::MCSTCTRL, regs::MCSTCTRL_MFE);
    }

    /// The configuration the device was set up with.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The link state now (LINKS, §8.2.3.22.20).
    #[must_use]
    pub fn link(&self) -> Link {
        link_state(self.mmio.read32(regs::LINKS))
    }

    /// Waits up to `timeout` for the link to come up; returns whether it did.
    pub fn wait_for_link(&self, timeout: Duration) -> bool {
        wait_bits(&*self.mmio, regs::LINKS, regs::LINKS_UP, true, timeout)
    }

    /// Reads every clear-on-read statistics register (§8.2.3.23) and returns the totals since init.
    pub fn stats(&mut self) -> NicStats {
        self.read_counters();
        self.totals
    }

    fn read_counters(&mut self) {
        let m = &*self.mmio;
        let r = |reg| u64::from(m.read32(reg));
        let t = &mut self.totals;
        t.crc_errors += r(regs::CRCERRS);
        t.illegal_bytes += r(regs::ILLERRC);
        t.error_bytes += r(regs::ERRBC);
        for i in 0..PACKET_BUFFERS {
            t.missed_packets += r(regs::mpc(i));
            t.no_buffer += r(regs::rnbc(i));
        }
        t.length_errors += r(regs::RLEC);
        t.rx_undersize += r(regs::RUC);
        t.rx_oversize += r(regs::ROC);
        t.rx_good_packets += r(regs::GPRC);
        t.rx_broadcast += r(regs::BPRC);
        t.rx_multicast += r(regs::MPRC);
        // The low register first: reading the high one clears the pair.
        let lo = r(regs::GORCL);
        t.rx_good_bytes += lo | r(regs::GORCH) << 32;
        t.rx_total_packets += r(regs::TPR);
        t.tx_good_packets += r(regs::GPTC);
        let lo = r(regs::GOTCL);
        t.tx_good_bytes += lo | r(regs::GOTCH) << 32;
        t.tx_total_packets += r(regs::TPT);
        let queues = usize::from(self.config.queues).min(STAT_QUEUES);
        for q in 0..queues {
            let qr = reg_u32(q);
            t.queue_rx_packets[q] += r(regs::qprc(qr));
            t.queue_rx_dropped[q] += r(regs::qprdc(qr));
            t.queue_tx_packets[q] += r(regs::qptc(qr));
        }
        if self.config.fdir {
            t.fdir_matches += r(regs::FDIRMATCH);
            t.fdir_misses += r(regs::FDIRMISS);
            let ustat = m.read32(regs::FDIRUSTAT);
            t.fdir_adds += u64::from(ustat & regs::FDIRUSTAT_ADD_MASK);
            t.fdir_removes += u64::from(ustat >> regs::FDIRUSTAT_REMOVE_SHIFT);
            let fstat = m.read32(regs::FDIRFSTAT);
            t.fdir_failed_adds += u64::from(fstat & regs::FDIRFSTAT_FADD_MASK);
            t.fdir_failed_removes +=
                u64::from((fstat >> regs::FDIRFSTAT_FREMOVE_SHIFT) & regs::FDIRFSTAT_FIELD_MASK);
        }
    }
}

/// The error for a ring whose memory has no device address.
fn no_iova(len: usize) -> InitError {
    InitError::Dma(DmaError::Map {
        start: 0,
        len,
        why: "the DMA space gave a ring without a device address".into(),
    })
}

impl FlowSteering for Ixgbe {
    fn queues(&self) -> u16 {
        self.config.queues
    }

    fn queue_of(&self, group: FlowGroup) -> u16 {
        self.groups.get(group.index() & (fdir::GROUPS - 1)).copied().unwrap_or(0)
    }

    /// Rewrites the group's perfect filter with FDIRCMD.FILTER_UPDATE and the new queue, and polls
    /// until the device has executed the command (bounded; counted in [`NicStats`]).
    fn migrate(&mut self, group: FlowGroup, queue: u16) -> Result<(), SteeringError> {
        let queues = self.config.queues;
        if queue >= queues {
            return Err(SteeringError::NoSuchQueue { queue, queues });
        }
        if !self.config.fdir {
            return Err(SteeringError::Failed(
                "Flow Director is disabled (Config::fdir = false): flow groups cannot be steered".into(),
            ));
        }
        let g = group.0 & fdir::GROUP_PORT_MASK;
        match self.write_filter(g, queue, true) {
            Ok(()) => {
                self.groups[usize::from(g)] = queue;
                self.totals.migrations += 1;
                Ok(())
            }
            Err(fdir::CmdError::Timeout) => Err(SteeringError::Timeout { group }),
            Err(fdir::CmdError::Rejected { failed }) => Err(SteeringError::Failed(format!(
                "the device counted {failed} failed filter add(s) moving flow group {g}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
