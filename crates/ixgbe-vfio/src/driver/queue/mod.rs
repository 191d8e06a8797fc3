//! One RX + TX queue pair of the 82599, driven by one core: advanced descriptors, burst receive and
//! transmit, one TX tail write per burst and one RX tail write per 32 re-armed slots, TX cleanup
//! in batches.
//!
//! Ownership: every RX descriptor slot owns exactly one pool buffer at all times (its index sits in
//! `rx_ring`'s slots), so a descriptor the device wrote can only ever name a buffer this queue owns;
//! a slot is consumed only when a fresh buffer is at hand to replace it. TX slots between `tx_clean` and
//! `tx_tail` own the buffers of frames in flight. Ring positions come from the queue's own counters;
//! nothing the device writes (descriptor contents, RDH, TDH) is used as an index.
//!
//! The data path (the counts are in BENCHMARKS.md, "82599 driver data path"): RX scans the done
//! descriptors of a run no longer than the fresh buffers at hand and stopping at the ring's end,
//! making each good frame a packet in the caller's batch as it goes and re-arming its slot with a
//! fresh buffer: in the same loop, straight from the top of the caller's cache, under a linear
//! translation (VFIO, the model); in a second loop after the scan (as DPDK's vector receive and its
//! `rxq_rearm`), from a stash of checked buffers, under a page-wise one; anything else (a bad descriptor,
//! a chain, no fresh buffer, the rest of a burst after the ring's end) goes on in the slow path.
//! TX writes one descriptor per packet straight from the batch and takes the sent packets out
//! without dropping them. Both index the ring through views of a `RingStore` (`ring.rs`), whose
//! length was checked once, when the queue was built. In both directions a burst the fast path
//! finishes (the common one) runs no other loop: what is left of an unusual burst goes on in a
//! cold function (`rx_slow`, `tx_slow`), so a burst of a few frames pays only the fast path's
//! set-up.

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use netchannel::dev::{
    DevError, DeviceInfo, DeviceOffloads, DeviceStats, Link, MacAddr, NetDevice, PacketBatch, RawBatch,
    RawReceived,
};
use netchannel::pool::PoolCache;

use super::dma::BufferDma;
use super::link_state;
use super::ring::RingStore;
use crate::hw::{DmaMemory, Mmio};
use crate::regs::{self, DESC_LEN};

mod receive;
mod transmit;

use receive::{Stash, rx_write_batch};

/// How many fresh RX buffers a queue takes from the caller's cache at once under a page-wise
/// translation (the stash; a linear one takes them from the cache one per frame).
const STASH: usize = 64;

/// How long dropping a queue waits for the device to confirm that it stopped the queue.
const DISABLE_TIMEOUT: Duration = Duration::from_millis(200);

/// Counters a queue keeps beyond [`DeviceStats`]: why frames were dropped, and Flow Director hits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Descriptors the device completed without EOP (the driver never chains buffers: each frame
    /// must fit one). Also counted in [`DeviceStats::rx_errors`].
    pub rx_missing_eop: u64,
    /// Descriptors dropped because they continue a frame whose first descriptor had no EOP (the
    /// rest of the chain, through the descriptor with EOP). Also in `rx_errors`.
    pub rx_chained: u64,
    /// Completed descriptors found in the slots from the tail on, which the device did not own (it
    /// wrote past RDT); never delivered. Also in `rx_errors`.
    pub rx_past_tail: u64,
    /// Descriptors whose length was zero or larger than the receive buffer. Also in `rx_errors`.
    pub rx_bad_length: u64,
    /// Descriptors with frame error bits set (CRC, length, symbol, RXE, header overflow). Also in
    /// `rx_errors`.
    pub rx_error_bits: u64,
    /// Bursts that stopped early because the caller's cache had no fresh buffer to put in the ring.
    pub rx_no_buffer: u64,
    /// Frames received that matched a Flow Director filter (STAT_FLM).
    pub rx_fdir_matches: u64,
    /// Times `tx_burst` found the ring full with frames still waiting.
    pub tx_ring_full: u64,
    /// TX buffers returned after the device reported them sent.
    pub tx_cleaned: u64,
    /// Buffers the driver set aside because the device cannot address them contiguously (only with
    /// page-wise DMA translations, where a buffer straddles two pages).
    pub quarantined: u64,
}

/// One RX + TX queue pair of an [`Ixgbe`](super::Ixgbe): a [`NetDevice`] with one queue (`queue`
/// argument 0), for one core. Made by [`Ixgbe::init`](super::Ixgbe::init).
///
/// Dropping it disables both queues in the device and returns every buffer it holds to the pool.
pub struct IxgbeQueue {
    // --- RX, hot ---
    /// The RX descriptors and the buffer each slot owns.
    rx_ring: RingStore,
    /// The RX slots own their buffers (false only after [`IxgbeQueue::new`] gave them back).
    rx_owned: bool,
    rx_next: usize,
    /// The slot RDT names: the device fills the slots from `rx_next` up to, not including, it. The
    /// slots from it to `rx_next` are re-armed and wait to be handed back.
    rx_tail: usize,
    /// How many re-armed slots are handed back with one RDT write ([`rx_write_batch`]).
    rx_write_batch: usize,
    /// Inside a chain of descriptors (a frame without EOP) that is being dropped.
    rx_discard: bool,
    /// Flow Director is on: count the descriptors that report a filter match.
    rx_count_fdir: bool,
    /// Under a page-wise translation: fresh receive buffers with their device addresses, taken from
    /// the caller's cache [`STASH`] at a time; the first `stash_len` are ours. Unused (empty) under
    /// a linear one.
    stash: Box<Stash>,
    stash_len: usize,
    // --- TX, hot ---
    /// The TX descriptors and the buffer of the frame each slot holds (from `tx_clean` to
    /// `tx_tail`).
    tx_ring: RingStore,
    tx_tail: usize,
    tx_clean: usize,
    clean_batch: usize,
    // --- shared ---
    dma: BufferDma,
    mmio: Registers,
    rdt: u32,
    tdt: u32,
    pool_id: u64,
    stats: DeviceStats,
    extra: QueueStats,
    /// Buffers the device cannot address (see [`QueueStats::quarantined`]), returned on drop.
    quarantine: Vec<u32>,
    /// The queue's own cache: completed TX buffers go back through it.
    cache: PoolCache,
    index: u16,
    name: String,
    mac: MacAddr,
    rx_enabled: bool,
    tx_enabled: bool,
}

/// The queue's registers, resolved once. A call through `Arc<dyn Mmio>` finds the value behind the
/// reference counts at an offset that depends on its alignment, which only the vtable knows, so
/// every call computes it again (five instructions a tail write, one tail write a burst); `direct`
/// is the reference it computes, kept beside the `Arc` that keeps it valid.
struct Registers {
    direct: NonNull<dyn Mmio>,
    _shared: Arc<dyn Mmio>,
}

// SAFETY: `Registers` only hands out `&dyn Mmio`, and `dyn Mmio` is `Send + Sync` (the trait's
// bounds); the pointer is into the `Arc`'s allocation, which the `Arc` it travels with keeps alive.
unsafe impl Send for Registers {}
// SAFETY: as above.
unsafe impl Sync for Registers {}

impl Registers {
    fn new(shared: Arc<dyn Mmio>) -> Self {
        Self { direct: NonNull::from(&*shared), _shared: shared }
    }

    #[inline(always)]
    fn get(&self) -> &dyn Mmio {
        // SAFETY: `direct` points at the value of `_shared`'s allocation, which lives and does not
        // move while `self` holds the `Arc`; only shared references are made from it.
        unsafe { self.direct.as_ref() }
    }
}

impl std::fmt::Debug for IxgbeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IxgbeQueue")
            .field("name", &self.name)
            .field("index", &self.index)
            .field("rx_ring", &self.rx_ring.len())
            .field("tx_ring", &self.tx_ring.len())
            .field("stats", &self.stats)
            .field("extra", &self.extra)
            .finish_non_exhaustive()
    }
}

/// A ring position as a register value (ring positions are below the ring size, at most 4096).
#[inline]
#[allow(clippy::cast_possible_truncation, reason = "ring positions are < 4096")]
fn reg_pos(pos: usize) -> u32 {
    pos as u32
}

/// Everything [`IxgbeQueue::new`] needs that the init sequence computed.
pub(crate) struct QueueParts {
    pub(crate) index: u16,
    pub(crate) name: String,
    pub(crate) mac: MacAddr,
    pub(crate) mmio: Arc<dyn Mmio>,
    pub(crate) rx_ring: DmaMemory,
    pub(crate) tx_ring: DmaMemory,
    pub(crate) dma: BufferDma,
    pub(crate) cache: PoolCache,
    /// Whether Flow Director is on: only then can a descriptor report a filter match (FLM).
    pub(crate) fdir: bool,
}

/// Why a queue could not be set up.
#[derive(Debug)]
pub(crate) enum QueueError {
    /// The pool ran out of buffers while filling the ring.
    PoolExhausted { needed: usize, got: usize },
    /// A ring's memory does not hold a power of two of descriptors (the configuration allows only
    /// those).
    RingLength { descriptors: usize },
}

impl IxgbeQueue {
    /// A queue over the given rings, with its RX ring filled with buffers from its own cache (the
    /// descriptors are written; the registers are the init sequence's business).
    pub(crate) fn new(parts: QueueParts) -> Result<Self, QueueError> {
        let QueueParts { index, name, mac, mmio, rx_ring, tx_ring, dma, cache, fdir } = parts;
        let ring = |memory: DmaMemory| {
            let descriptors = memory.len() / DESC_LEN;
            RingStore::new(memory).ok_or(QueueError::RingLength { descriptors })
        };
        let (rx_ring, tx_ring) = (ring(rx_ring)?, ring(tx_ring)?);
        let (rx_len, tx_len) = (rx_ring.len(), tx_ring.len());
        let pool_id = cache.pool().id();
        let mut queue = Self {
            rx_ring,
            rx_owned: true,
            rx_next: 0,
            // Init hands the device every slot but the last (RDT = n - 1).
            rx_tail: rx_len - 1,
            rx_write_batch: rx_write_batch(rx_len),
            rx_discard: false,
            rx_count_fdir: fdir,
            stash: Box::new(Stash { index: [0; STASH], addr: [0; STASH] }),
            stash_len: 0,
            tx_ring,
            tx_tail: 0,
            tx_clean: 0,
            clean_batch: (tx_len / 4).min(32),
            dma,
            rdt: regs::rdt(u32::from(index)),
            tdt: regs::tdt(u32::from(index)),
            mmio: Registers::new(mmio),
            pool_id,
            stats: DeviceStats::default(),
            extra: QueueStats::default(),
            quarantine: Vec::new(),
            cache,
            index,
            name,
            mac,
            rx_enabled: false,
            tx_enabled: false,
        };
        // Fill every slot (§7.1.9: descriptors in read format, header address 0: one buffer).
        let mut filled = 0;
        let mut fresh = vec![0u32; rx_len];
        let mut have = 0;
        while filled < rx_len {
            if have == 0 {
                have = queue.cache.alloc_burst(&mut fresh[..rx_len - filled]);
                if have == 0 {
                    // Give back what the ring holds so far; the caller reports the shortage.
                    // SAFETY: the first `filled` slots hold buffers this queue allocated and owns,
                    // no packet exists for them, and they are distinct (one allocation each).
                    unsafe { queue.cache.free_burst(&queue.rx_ring.slots()[..filled]) };
                    queue.rx_ring.slots_mut().fill(0);
                    let got = filled;
                    queue.free_quarantine();
                    // Nothing is left in the ring: make Drop return nothing twice.
                    queue.rx_next = 0;
                    queue.forget_rx();
                    return Err(QueueError::PoolExhausted { needed: rx_len, got });
                }
            }
            have -= 1;
            let index = fresh[have];
            match queue.dma.rx_addr(index) {
                Some(addr) => {
                    queue.rx_ring.slots_mut()[filled] = index;
                    queue.arm_rx(filled, addr);
                    filled += 1;
                }
                None => queue.set_aside(index),
            }
        }
        Ok(queue)
    }

    /// Marks the RX ring as holding no buffers (after they were freed by an error path).
    fn forget_rx(&mut self) {
        self.rx_owned = false;
        self.stash_len = 0;
    }

    /// The number of this queue in the device (its RX and TX queue index).
    #[must_use]
    pub fn index(&self) -> u16 {
        self.index
    }

    /// The queue's extra counters.
    #[must_use]
    pub fn queue_stats(&self) -> QueueStats {
        self.extra
    }

    /// RX descriptors in the ring.
    #[must_use]
    pub fn rx_ring_len(&self) -> usize {
        self.rx_ring.len()
    }

    /// TX descriptors in the ring.
    #[must_use]
    pub fn tx_ring_len(&self) -> usize {
        self.tx_ring.len()
    }

    /// TX frames handed to the device whose buffers have not come back yet.
    #[must_use]
    #[inline]
    pub fn tx_in_flight(&self) -> usize {
        self.tx_tail.wrapping_sub(self.tx_clean) & self.tx_ring.mask()
    }

    /// The RX ring's descriptors (for the init sequence's register writes).
    pub(crate) fn rx_ring(&self) -> &DmaMemory {
        self.rx_ring.memory()
    }

    /// The TX ring's descriptors.
    pub(crate) fn tx_ring(&self) -> &DmaMemory {
        self.tx_ring.memory()
    }

    /// Records that the init sequence enabled the RX (`rx`) or TX queue in the device.
    pub(crate) fn set_enabled(&mut self, rx: bool) {
        if rx {
            self.rx_enabled = true;
        } else {
            self.tx_enabled = true;
        }
    }

    /// Keeps a buffer the device cannot address out of the rings until the queue is dropped.
    #[cold]
    fn set_aside(&mut self, index: u32) {
        self.extra.quarantined += 1;
        self.quarantine.push(index);
    }

    /// Returns the set-aside buffers to the pool.
    fn free_quarantine(&mut self) {
        // SAFETY: the quarantine holds distinct buffers this queue allocated and never handed on.
        unsafe { self.cache.free_burst(&self.quarantine) };
        self.quarantine.clear();
    }

    /// Clears `reg`'s enable bit and waits until the device reports the queue stopped.
    fn disable(&self, reg: u32) -> bool {
        self.mmio.get().clear_bits(reg, regs::DCTL_ENABLE);
        let start = Instant::now();
        loop {
            if self.mmio.get().read32(reg) & regs::DCTL_ENABLE == 0 {
                return true;
            }
            if start.elapsed() >= DISABLE_TIMEOUT {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl NetDevice for IxgbeQueue {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: self.name.clone(),
            mac: self.mac,
            mtu: super::MTU,
            queues: 1,
            offloads: DeviceOffloads::NONE,
        }
    }

    fn link(&self) -> Link {
        link_state(self.mmio.get().read32(regs::LINKS))
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
        self.rx_into(queue, cache, batch)
    }

    /// As `rx_burst`, but the good frames go to `raw` as buffer indices (their headers written as
    /// for packets): no packet is built. Every frame is a plain buffer, so `batch` stays as it is.
    fn rx_burst_raw<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        raw: &mut RawBatch,
        batch: &mut PacketBatch<'c>,
    ) -> Result<RawReceived, DevError> {
        let _ = batch;
        Ok(RawReceived { indices: self.rx_into(queue, cache, raw)?, packets: 0 })
    }

    /// Transmits frames from the front of `batch`: one advanced data descriptor per frame
    /// (EOP | RS | IFCS | DEXT | DTYP_DATA, PAYLEN = length), the buffer index kept beside the
    /// descriptor until the device reports it sent, one TDT write per burst. A full ring leaves frames
    /// in the batch, and so does a packet of another pool (and everything after it). A frame the
    /// device cannot address (empty, or straddling two DMA pages) is dropped and counted.
    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        self.tx_into(queue, batch)
    }
}

impl Drop for IxgbeQueue {
    /// Disables the RX and TX queues (§4.6.7.1 and §4.6.8.1: clear ENABLE, wait until it reads back
    /// clear), then returns every buffer the queue holds. If the device does not confirm, the buffers
    /// are leaked rather than handed to someone the device might still write over.
    fn drop(&mut self) {
        let rx_stopped = !self.rx_enabled || self.disable(regs::rxdctl(u32::from(self.index)));
        let tx_stopped = !self.tx_enabled || self.disable(regs::txdctl(u32::from(self.index)));
        if !(rx_stopped && tx_stopped) {
            tracing::error!(
                queue = %self.name,
                rx_stopped,
                tx_stopped,
                "the device did not confirm stopping the queue; leaking its buffers instead of reusing memory it may still write"
            );
            return;
        }
        if self.rx_owned {
            // SAFETY: every RX slot owns a distinct buffer of this pool that no packet exists for.
            unsafe { self.cache.free_burst(self.rx_ring.slots()) };
        }
        // SAFETY: the first `stash_len` stash entries are distinct fresh buffers this queue allocated
        // and never handed on.
        unsafe { self.cache.free_burst(self.stash.index.get(..self.stash_len).unwrap_or_default()) };
        let (start, end, len) = (self.tx_clean, self.tx_tail, self.tx_ring.len());
        if start <= end {
            // SAFETY: slots `tx_clean..tx_tail` own the buffers of frames in flight, now stopped.
            unsafe { self.cache.free_burst(&self.tx_ring.slots()[start..end]) };
        } else {
            // SAFETY: as above, before the wrap.
            unsafe { self.cache.free_burst(&self.tx_ring.slots()[start..len]) };
            // SAFETY: as above, after the wrap.
            unsafe { self.cache.free_burst(&self.tx_ring.slots()[..end]) };
        }
        self.free_quarantine();
    }
}
