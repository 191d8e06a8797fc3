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
//! making each good frame a packet in the caller's batch as it goes, then re-arms the run's slots
//! with fresh buffers (two short loops over plain slices, as DPDK's vector receive and its
//! `rxq_rearm`): straight from the top of the caller's cache under a linear translation (VFIO, the
//! model), from a stash of checked buffers under a page-wise one; anything else (a bad descriptor,
//! a chain, no fresh buffer, the rest of a burst after the ring's end) goes on in the slow path.
//! TX writes one descriptor per packet straight from the batch and takes the sent packets out
//! without dropping them. Both index the ring through views of a `RingStore` (`ring.rs`), whose
//! length was checked once, when the queue was built. In both directions a burst the fast path
//! finishes (the common one) runs no other loop: what is left of an unusual burst goes on in a
//! cold function (`rx_slow`, `tx_slow`), so a burst of a few frames pays only the fast path's
//! set-up.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use netchannel::dev::{
    DevError, DeviceInfo, DeviceOffloads, DeviceStats, Link, MacAddr, NetDevice, PacketBatch, RawBatch,
    RawReceived, RxFrame, RxSink,
};
use netchannel::pool::PoolCache;

use super::dma::BufferDma;
use super::link_state;
use super::ring::RingStore;
use crate::hw::{Descriptor, DmaMemory, Mmio};
use crate::regs::{self, DESC_LEN, rx, tx};

/// How many fresh RX buffers a queue takes from the caller's cache at once under a page-wise
/// translation (the stash; a linear one takes them from the cache one per frame).
const STASH: usize = 64;

/// How many re-armed RX slots go back to the device with one RDT write on a ring of `len` slots:
/// 32, or a quarter of a smaller ring. A tail write is an uncached write across PCIe (and, on the
/// model, a call into it); deferring it as DPDK's `rx_free_thresh` (32) and Linux's
/// `IXGBE_RX_BUFFER_WRITE` (16) do takes it out of most small bursts, for a device that owns at
/// most this many slots fewer at a time.
fn rx_write_batch(len: usize) -> usize {
    (len / 4).clamp(1, 32)
}

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

/// The device address of a transmit buffer's `len` bytes at `offset` in the pool's region, or
/// `None` where the device cannot address them: empty, longer than a descriptor takes, or (without
/// a `linear` base, a page-wise translation) straddling two pages.
#[inline(always)]
fn tx_addr(dma: &BufferDma, linear: Option<u64>, offset: usize, len: usize) -> Option<u64> {
    if len == 0 || len as u64 > tx::DTALEN_MASK {
        return None;
    }
    match linear {
        Some(base) => Some(base.wrapping_add(offset as u64)),
        None => dma.addr(offset, len),
    }
}

/// Writes an RX descriptor in read format: buffer address, no header buffer (which also clears DD,
/// the low bit of the second word).
#[inline]
fn arm(desc: &Descriptor, addr: u64) {
    // Relaxed: published by the Release fence before the RDT write (hw.rs protocol).
    desc.store0(addr, Ordering::Relaxed);
    // Relaxed: as above.
    desc.store1(0, Ordering::Relaxed);
}

/// The packet length field of an RX write-back descriptor's second word.
#[inline]
#[allow(clippy::cast_possible_truncation, reason = "masked to 16 bits first")]
fn rx_len(status: u64) -> usize {
    ((status >> rx::LEN_SHIFT) & 0xFFFF) as usize
}

/// Fresh receive buffers and the device addresses of their data, checked when they left the cache
/// (under a page-wise translation, where some buffers cannot be used).
struct Stash {
    index: [u32; STASH],
    addr: [u64; STASH],
}

/// Why a run of the TX fast path stopped short: the packet at the front of the batch.
enum TxStop {
    /// It is of another pool than the queue's.
    Foreign,
    /// The device cannot address it: empty, longer than a descriptor takes, or straddling two
    /// pages of a page-wise translation.
    Unaddressable,
}

/// DD and EOP set, no frame error: the status bits of a descriptor the fast path takes.
const RX_FAST_MASK: u64 = rx::STAT_DD | rx::STAT_EOP | rx::ERR_FRAME_MASK;
const RX_FAST_OK: u64 = rx::STAT_DD | rx::STAT_EOP;

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

    /// TX descriptors free for new frames (one is always left empty).
    #[inline(always)]
    fn tx_free(&self) -> usize {
        self.tx_ring.mask() - self.tx_in_flight()
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

    /// Writes slot `slot` of the RX ring in read format: buffer address, no header buffer (which also
    /// clears DD, the low bit of the second word).
    #[inline]
    fn arm_rx(&self, slot: usize, addr: u64) {
        arm(self.rx_ring.descriptor(slot), addr);
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

    /// Refills the empty stash from `cache` with buffers the device can address, each with its
    /// address (the others are set aside); returns how many it holds now, 0 when the cache has none.
    /// Only for a page-wise translation, where a buffer's receive area may straddle two pages that
    /// are not contiguous (with a linear one the fast path re-arms from the cache itself).
    #[cold]
    #[inline(never)]
    fn refill_stash(&mut self, cache: &PoolCache) -> usize {
        loop {
            let Stash { index, addr } = &mut *self.stash;
            let got = cache.alloc_burst_raw(index).min(STASH);
            if got == 0 {
                self.stash_len = 0;
                return 0;
            }
            let mut kept = 0;
            for i in 0..got {
                let idx = index[i];
                if let Some(a) = self.dma.rx_addr(idx) {
                    index[kept] = idx;
                    addr[kept] = a;
                    kept += 1;
                } else {
                    self.extra.quarantined += 1;
                    self.quarantine.push(idx);
                }
            }
            self.stash_len = kept;
            if kept > 0 {
                return kept;
            }
        }
    }

    /// How many fresh receive buffers are at hand: with a linear translation (every buffer of the
    /// pool addressable, [`BufferDma::rx_linear`]) the caller's cache's, else the stash's.
    #[inline(always)]
    fn fresh(&self, cache: &PoolCache) -> usize {
        if self.dma.rx_linear().is_some() { cache.len() } else { self.stash_len }
    }

    /// Brings fresh receive buffers when none are at hand ([`fresh`](Self::fresh)): a batch from
    /// the pool's depot into the cache, or a stash refill; returns how many are at hand then.
    #[cold]
    #[inline(never)]
    fn refill_fresh(&mut self, cache: &PoolCache) -> usize {
        if self.dma.rx_linear().is_some() { cache.fill() } else { self.refill_stash(cache) }
    }

    /// The slow step found a good frame and no fresh buffer at hand: the device completed the
    /// descriptor after the loop looked at it with none, so no refill was tried. Tries one; when the
    /// cache has no buffer either, counts `rx_no_buffer` (the frame stays in the ring for the next
    /// burst) and returns false.
    #[cold]
    #[inline(never)]
    fn rx_refill_late(&mut self, cache: &PoolCache) -> bool {
        if self.refill_fresh(cache) > 0 {
            return true;
        }
        self.extra.rx_no_buffer += 1;
        self.stats.rx_no_buffer += 1;
        false
    }

    /// Drops the descriptor in `slot` (status `status`): counts it, tracks chains of descriptors
    /// without EOP (the rest of such a frame is dropped too), and re-arms the slot with its own
    /// buffer.
    #[cold]
    fn drop_descriptor(&mut self, slot: usize, status: u64) {
        self.stats.rx_errors += 1;
        if self.rx_discard {
            self.extra.rx_chained += 1;
        } else if status & rx::STAT_EOP == 0 {
            self.extra.rx_missing_eop += 1;
        } else if status & rx::ERR_FRAME_MASK != 0 {
            self.extra.rx_error_bits += 1;
        } else {
            self.extra.rx_bad_length += 1;
        }
        self.rx_discard = status & rx::STAT_EOP == 0;
        self.rearm_own(slot);
    }

    /// Re-arms `slot` with the buffer it owns (every buffer in the ring was checked addressable when
    /// it went in, so the address exists).
    fn rearm_own(&self, slot: usize) {
        if let Some(addr) = self.rx_ring.slots().get(slot).and_then(|&index| self.dma.rx_addr(index)) {
            self.arm_rx(slot, addr);
        }
    }

    /// The device wrote past the tail: before the tail moves to `tail`, checks every slot from the
    /// current one on ([`check_tail_slot`](Self::check_tail_slot)), none of which it owned.
    #[cold]
    #[inline(never)]
    fn scrub_past_tail(&mut self, tail: usize) {
        let mut slot = self.rx_tail;
        while slot != tail {
            self.check_tail_slot(slot);
            slot = (slot + 1) & self.rx_ring.mask();
        }
    }

    /// Before the tail moves past `slot` (a slot from the current RDT on, which the device does not
    /// own): a completed descriptor there means the device wrote past the tail. Count it and re-arm
    /// the slot so that the stale write-back is never taken for a frame.
    #[inline]
    fn check_tail_slot(&mut self, slot: usize) {
        // Relaxed: only DD is looked at, and nothing the device wrote is read.
        let status = self.rx_ring.descriptor(slot).load1(Ordering::Relaxed);
        if status & rx::STAT_DD != 0 {
            self.stats.rx_errors += 1;
            self.extra.rx_past_tail += 1;
            self.rearm_own(slot);
        }
    }

    /// Whether the oldest batch of frames in flight is done: TX buffers come back a batch at a
    /// time, when the device has written DD into the batch's last descriptor (every descriptor
    /// asks for a status write-back).
    #[inline(always)]
    fn tx_batch_done(&self) -> bool {
        if self.tx_in_flight() < self.clean_batch {
            return false;
        }
        let last = self.tx_clean + self.clean_batch - 1;
        // Acquire: pairs with the device's Release store of the write-back word (hw.rs protocol);
        // after it the device is done with the batch's buffers.
        self.tx_ring.descriptor(last).load1(Ordering::Acquire) & tx::STAT_DD != 0
    }

    /// Frees the oldest batch of frames in flight, which is done ([`tx_batch_done`](Self::tx_batch_done)),
    /// and every one after it that is.
    #[inline(always)]
    fn clean_tx_batches(&mut self) {
        let batch = self.clean_batch;
        loop {
            let start = self.tx_clean;
            let end = start + batch;
            let len = self.tx_ring.len();
            if end <= len {
                // SAFETY: slots `start..end` hold the distinct buffers of frames this queue handed
                // to the device (`into_raw` in `tx_burst`), which the device has finished with; no
                // packet exists for them, and moving `tx_clean` past them gives them up.
                unsafe { self.cache.free_burst(&self.tx_ring.slots()[start..end]) };
            } else {
                // SAFETY: as above, for the part before the ring's end.
                unsafe { self.cache.free_burst(&self.tx_ring.slots()[start..]) };
                // SAFETY: as above, for the part after the wrap.
                unsafe { self.cache.free_burst(&self.tx_ring.slots()[..end - len]) };
            }
            self.extra.tx_cleaned += batch as u64;
            self.tx_clean = end & self.tx_ring.mask();
            if !self.tx_batch_done() {
                return;
            }
        }
    }

    /// Whether the device has written back the descriptor in `slot` (DD; taken modulo the ring size).
    #[inline]
    fn rx_done(&self, slot: usize) -> bool {
        // Relaxed: only DD is looked at; the fast path loads the status again with Acquire.
        self.rx_ring.descriptor(slot).load1(Ordering::Relaxed) & rx::STAT_DD != 0
    }

    /// Whether a done descriptor's status is a frame the fast path takes: EOP, no frame error, a
    /// length of 1 to `rx_buf_len` bytes.
    #[inline(always)]
    fn rx_good(status: u64, buf_len: usize) -> bool {
        status & RX_FAST_MASK == RX_FAST_OK && rx_len(status).wrapping_sub(1) < buf_len
    }

    /// The RX fast path: takes up to `run` good frames from slot `start` on into `batch` as packets of
    /// `cache` (`run` is cut to the `fresh` buffers at hand, [`fresh`](Self::fresh), and at the
    /// ring's end), and re-arms their slots with fresh buffers; returns how many it took and the sum
    /// of their lengths. It stops at the first descriptor that is not a good frame, which the caller
    /// looks at. The caller runs it only outside a chain being dropped (`rx_discard` clear).
    ///
    /// Two passes, as DPDK's vector receive does (`ixgbe_rxq_rearm` after the scan): the scan loads
    /// each status, checks it with one mask-and-compare and one length compare, and makes the slot's
    /// buffer a packet at once ([`PacketBatch::extend_received_with`]); the re-arm writes each slot's
    /// new buffer and its two descriptor words. With a linear translation the new buffers are the top
    /// of the caller's cache, read where the cache keeps them ([`PoolCache::take_raw_with`]), each
    /// address one multiply-add; with a page-wise one they come from the stash, with the addresses
    /// `refill_stash` looked up. Each loop keeps its few values in registers; no bounds check (the
    /// [`RingStore`] checked the lengths when it was built) and no counter in memory (Flow Director
    /// matches are summed in a register and added once, and only when `FDIR`: the queue's Flow
    /// Director is on, without which no descriptor reports a match).
    #[inline(always)]
    fn rx_fast<'c, S: RxSink<'c>, const FDIR: bool>(
        &mut self,
        cache: &'c PoolCache,
        batch: &mut S,
        start: usize,
        run: usize,
        fresh: usize,
    ) -> (usize, u64) {
        let buf_len = self.dma.rx_buf_len();
        let Self { rx_ring, stash, dma, .. } = self;
        let mut ring = rx_ring.view();
        // The run stops at the ring's end (the caller goes on from slot 0): inside it, descriptors
        // and slots are plain slices, indexed without the mask.
        let (descriptors, slots) = ring.run(start, run.min(fresh));
        let mut fdir = 0;
        let n = descriptors.len();
        // SAFETY: each frame names the buffer its slot owns, a buffer of this pool (the cache's,
        // checked by the caller) that the queue allocated, that no packet exists for, and that
        // appears once (each slot is read once); the slot gives it up below, taking a fresh one.
        // Its data starts at the pool's headroom, where the buffer's receive address
        // (`BufferDma::rx_addr`) points.
        let (taken, bytes) = unsafe {
            batch.extend_received_with(cache, n, |i| {
                // `i < n`: both lookups succeed (and compile to nothing, `i` being below the
                // batch's `n` slots).
                let (desc, &index) = (descriptors.get(i)?, slots.get(i)?);
                // Acquire: pairs with the device's Release store of the write-back's second word
                // (hw.rs protocol): the first word and the frame's bytes are visible after it.
                let status = desc.load1(Ordering::Acquire);
                if !Self::rx_good(status, buf_len) {
                    return None;
                }
                if FDIR {
                    // Bit 2 (FLM) as a number: no branch.
                    fdir += (status & rx::STAT_FLM) >> 2;
                }
                // `len <= buf_len`, a 16-bit field.
                Some(RxFrame { index, len: u32::try_from(rx_len(status)).unwrap_or(0) })
            })
        };
        // The slots' old buffers are packets now; each slot takes a fresh one, in order: a forward
        // loop, which compiles shorter than a reversed one. Read after the scan, which then has two
        // more registers for its own values.
        let run = descriptors.iter().zip(slots.iter_mut());
        if let Some((base, stride)) = dma.rx_linear() {
            // SAFETY: `taken <= n <= fresh`, and `fresh` is `cache.len()` (`fresh`), read by the
            // caller before the scan, which does not reach the cache's free list: the cache holds
            // `taken`. The closure writes the ring only.
            unsafe {
                cache.take_raw_with(
                    taken,
                    #[inline(always)]
                    |fresh| {
                        for ((desc, slot), &index) in run.zip(fresh) {
                            *slot = index;
                            arm(desc, base.wrapping_add(u64::from(index) * u64::from(stride)));
                        }
                    },
                );
            }
        } else {
            // From the top `taken` of the stash, with the addresses stored beside them.
            let stash_len = self.stash_len.min(STASH);
            let from = stash_len - taken.min(stash_len);
            let fresh = stash.index[from..stash_len].iter().zip(&stash.addr[from..stash_len]);
            for ((desc, slot), (&index, &addr)) in run.zip(fresh) {
                *slot = index;
                arm(desc, addr);
            }
            self.stash_len = from;
        }
        self.extra.rx_fdir_matches += fdir;
        (taken, bytes)
    }

    /// Receives completed frames: polls DD in ring order from the queue's own cursor over the slots
    /// the device owns, validates each descriptor (EOP set, no frame error, length within the
    /// buffer), hands good frames over (packets of `cache`, or their indices), puts a fresh buffer
    /// from `cache` in each consumed slot (a bad descriptor's buffer goes straight back into its
    /// slot), and moves RDT once [`rx_write_batch`] re-armed slots wait ([`rx_finish`](Self::rx_finish)).
    ///
    /// `rx_burst` and `rx_burst_raw`, written once over the [`RxSink`] the frames go to. The common
    /// call is one run of the fast path, with a fresh buffer at hand for every frame the batch has
    /// room for, that stops where the device has not written yet (or fills the batch); every other
    /// case (a bad descriptor, a chain being dropped, a stash to refill) goes on out of line in
    /// [`rx_slow`](Self::rx_slow), so that a small burst pays for none of it.
    #[inline(always)]
    fn rx_into<'c, S: RxSink<'c>>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut S,
    ) -> Result<usize, DevError> {
        if queue != 0 {
            return Err(DevError::NoSuchQueue { queue, queues: 1 });
        }
        if cache.pool().id() != self.pool_id {
            return Err(DevError::WrongPool { what: "the cache passed to rx_burst", expected: self.pool_id });
        }
        // At most what the batch has room for, and at most the slots the device owns: the slots from
        // the tail on, re-armed and not handed back yet, are never read here.
        let room = batch.remaining();
        let start = self.rx_next;
        let want = room.min(self.rx_owned_slots());
        let mut fresh = self.fresh(cache);
        if fresh == 0 && self.dma.rx_linear().is_some() && self.rx_done(start) {
            // A frame waits and the cache is empty: its own refill from the depot, here rather than
            // through `rx_slow` (an idle queue's poll takes no lock). `cache.fill` and not
            // `refill_fresh`, which would also cover the stash (refilled in `rx_slow`): a call that
            // takes `&mut self` here costs the scan registers, 1–2 instructions a frame (measured).
            fresh = cache.fill();
        }
        if want == 0 || fresh == 0 || self.rx_discard {
            return Ok(self.rx_slow(cache, batch, room, start, 0, 0));
        }
        let (taken, bytes) = if self.rx_count_fdir {
            self.rx_fast::<S, true>(cache, batch, start, want, fresh)
        } else {
            self.rx_fast::<S, false>(cache, batch, start, want, fresh)
        };
        // It stopped short either at a descriptor, where the common stop is one the device has not
        // written yet, or with the fresh buffers used up. Anything else is the slow path's.
        if taken < want && (taken == fresh || self.rx_done(start + taken)) {
            return Ok(self.rx_slow(cache, batch, room, start, taken, bytes));
        }
        self.rx_finish(start, taken, taken, bytes);
        Ok(taken)
    }

    /// The rest of a receive the fast path did not finish: from `frames` frames (`bytes` bytes)
    /// taken from slot `start` on, takes frames while the batch has room (`room` in all) and the
    /// device owns slots not yet consumed, bringing fresh buffers when a frame waits for one and
    /// dropping the descriptors that are not good frames (each keeps its buffer), then finishes the
    /// burst as [`rx_finish`](Self::rx_finish). Returns the frames taken in all.
    #[cold]
    #[inline(never)]
    fn rx_slow<'c, S: RxSink<'c>>(
        &mut self,
        cache: &'c PoolCache,
        batch: &mut S,
        room: usize,
        start: usize,
        frames: usize,
        bytes: u64,
    ) -> usize {
        let (mut frames, mut consumed, mut bytes) = (frames, frames, bytes);
        let mut slot = (start + frames) & self.rx_ring.mask();
        let limit = self.rx_owned_slots();
        let buf_len = self.dma.rx_buf_len();
        while frames < room && consumed < limit {
            // Fresh buffers are taken from the cache only when a frame waits for one: an idle queue
            // holds no more of a scarce pool than its ring.
            let mut fresh = if self.rx_discard { 0 } else { self.fresh(cache) };
            if !self.rx_discard && fresh == 0 && self.rx_done(slot) {
                fresh = self.refill_fresh(cache);
            }
            if fresh > 0 {
                let run = (room - frames).min(limit - consumed);
                let (taken, len) = if self.rx_count_fdir {
                    self.rx_fast::<S, true>(cache, batch, slot, run, fresh)
                } else {
                    self.rx_fast::<S, false>(cache, batch, slot, run, fresh)
                };
                frames += taken;
                consumed += taken;
                bytes += len;
                slot = (slot + taken) & self.rx_ring.mask();
                if taken == run.min(fresh) {
                    // It stopped for want of room or of fresh buffers, not at a descriptor.
                    continue;
                }
            }
            // A descriptor the fast path did not take: not done yet, inside a chain being dropped,
            // a bad one, or any when the cache has no fresh buffer.
            // Acquire: as in `rx_fast`.
            let status = self.rx_ring.descriptor(slot).load1(Ordering::Acquire);
            if status & rx::STAT_DD == 0 {
                break;
            }
            if !self.rx_discard && Self::rx_good(status, buf_len) {
                if self.fresh(cache) > 0 || self.rx_refill_late(cache) {
                    // The device completed it after the scan looked (it writes descriptors
                    // concurrently): the fast path takes it.
                    continue;
                }
                break;
            }
            // The slot keeps its buffer.
            self.drop_descriptor(slot, status);
            slot = (slot + 1) & self.rx_ring.mask();
            consumed += 1;
        }
        self.rx_finish(start, consumed, frames, bytes);
        frames
    }

    /// How many slots the device owns (at the cursor, before `rx_burst` consumes any): from
    /// `rx_next` up to the tail.
    #[inline(always)]
    fn rx_owned_slots(&self) -> usize {
        self.rx_tail.wrapping_sub(self.rx_next) & self.rx_ring.mask()
    }

    /// Ends a burst that consumed `consumed` descriptors from slot `start` on, `frames` of them
    /// frames handed over (`bytes` bytes): moves the cursor, counts, and once [`rx_write_batch`]
    /// re-armed slots wait, hands them back to the device. Nothing when nothing was consumed.
    #[inline(always)]
    fn rx_finish(&mut self, start: usize, consumed: usize, frames: usize, bytes: u64) {
        if consumed == 0 {
            return;
        }
        let slot = (start + consumed) & self.rx_ring.mask();
        self.rx_next = slot;
        self.stats.rx_packets += frames as u64;
        self.stats.rx_bytes += bytes;
        // The device may fill up to, not including, the slot before our cursor.
        let tail = slot.wrapping_sub(1) & self.rx_ring.mask();
        if tail.wrapping_sub(self.rx_tail) & self.rx_ring.mask() >= self.rx_write_batch {
            self.rx_hand_back(tail);
        }
    }

    /// Hands the re-armed slots from the tail up to `tail` back to the device: one RDT write.
    #[inline(never)]
    fn rx_hand_back(&mut self, tail: usize) {
        // The device stops at the tail and writes in ring order: the slot there, which it does not
        // own, is the first it would have written past it. Only then are the others looked at.
        if self.rx_done(self.rx_tail) {
            self.scrub_past_tail(tail);
        }
        self.rx_tail = tail;
        // Release: orders the descriptor stores of the re-arms before the tail write that hands
        // them to the device; pairs with the device reading descriptors after it sees RDT.
        fence(Ordering::Release);
        self.mmio.get().write32(self.rdt, reg_pos(tail));
    }

    /// The TX fast path: writes a descriptor for each of up to `run` packets from the front of `batch`
    /// into the ring from slot `start` on, and takes them out of the batch, their buffers owned by
    /// the ring now; returns how many and the sum of their lengths. It stops before a packet of
    /// another pool or one the device cannot address, which stays at the front of the batch
    /// ([`tx_stop`](Self::tx_stop) says which).
    ///
    /// A packet's pool is checked once per cache (the caches of the queue's pool seen before pass
    /// with one pointer compare), and with a linear translation of the whole pool its address is
    /// one add: its data lies inside its buffer, which lies inside the mapping.
    #[inline(always)]
    fn tx_fast(&mut self, batch: &mut PacketBatch<'_>, start: usize, run: usize) -> (usize, u64) {
        let Self { tx_ring, dma, pool_id, .. } = self;
        let mut ring = tx_ring.view();
        let linear = dma.tx_linear();
        let mut known: *const PoolCache = std::ptr::null();
        let mut bytes = 0u64;
        let mut taken = 0;
        let packets = batch.as_slice();
        for packet in &packets[..run.min(packets.len())] {
            let cache: *const PoolCache = packet.cache();
            if cache != known {
                if packet.pool_id() != *pool_id {
                    break;
                }
                known = cache;
            }
            let (offset, len) = packet.dma_window();
            let Some(addr) = tx_addr(dma, linear, offset, len) else {
                break;
            };
            let len = len as u64;
            let cmd = tx::DCMD_EOP | tx::DCMD_RS | tx::DCMD_IFCS | tx::DCMD_DEXT | tx::DTYP_DATA;
            let desc = ring.descriptor(start + taken);
            // Relaxed: published by the Release fence before the TDT write.
            desc.store0(addr, Ordering::Relaxed);
            // Relaxed: as above.
            desc.store1(cmd | len | len << tx::PAYLEN_SHIFT, Ordering::Relaxed);
            ring.replace(start + taken, packet.index());
            bytes += len;
            taken += 1;
        }
        // SAFETY: one packet of `packets` counted per iteration: `forget_front` needs no `min`.
        unsafe { std::hint::assert_unchecked(taken <= packets.len()) };
        // SAFETY: the first `taken` packets' buffers are in the ring now (`tx_ring`'s slots), each once; the
        // queue frees them into its own cache (of the same pool, checked above) when the device is
        // done with them.
        unsafe { batch.forget_front(taken) };
        (taken, bytes)
    }

    /// Why the fast path stopped before the packet at the front of `batch`.
    fn tx_stop(&self, batch: &PacketBatch<'_>) -> Option<TxStop> {
        let packet = batch.as_slice().first()?;
        if packet.pool_id() != self.pool_id {
            return Some(TxStop::Foreign);
        }
        let (offset, len) = packet.dma_window();
        tx_addr(&self.dma, self.dma.tx_linear(), offset, len).is_none().then_some(TxStop::Unaddressable)
    }

    /// The rest of a `tx_burst` whose fast path stopped before a packet it cannot send as it is,
    /// after `taken` of the `want` packets (`bytes` bytes) from slot `start` on: a packet of
    /// another pool ends the burst (an error when it is the first), one the device cannot address
    /// is dropped and counted, and the fast path goes on after it.
    #[cold]
    #[inline(never)]
    fn tx_slow(
        &mut self,
        batch: &mut PacketBatch<'_>,
        start: usize,
        want: usize,
        taken: usize,
        bytes: u64,
    ) -> Result<usize, DevError> {
        let (mut taken, mut bytes) = (taken, bytes);
        let mut slot = (start + taken) & self.tx_ring.mask();
        while taken < want {
            match self.tx_stop(batch) {
                // The fast path took every packet it was asked for (it stops for nothing else).
                None => break,
                Some(TxStop::Foreign) if taken == 0 => {
                    return Err(DevError::WrongPool {
                        what: "the first packet handed to tx_burst",
                        expected: self.pool_id,
                    });
                }
                Some(TxStop::Foreign) => break,
                Some(TxStop::Unaddressable) => {
                    // Dropping the packet frees it.
                    drop(batch.drain_front(1));
                    self.stats.tx_dropped += 1;
                    taken += 1;
                }
            }
            if taken >= want {
                break;
            }
            let (n, len) = self.tx_fast(batch, slot, want - taken);
            taken += n;
            bytes += len;
            slot = (slot + n) & self.tx_ring.mask();
        }
        let sent = slot.wrapping_sub(start) & self.tx_ring.mask();
        self.tx_finish(start, sent, bytes);
        Ok(taken)
    }

    /// Ends a burst that wrote `sent` descriptors from slot `start` on (`bytes` bytes): moves the
    /// tail, counts, and hands the descriptors to the device with one TDT write. Nothing to write
    /// when none was.
    #[inline(always)]
    fn tx_finish(&mut self, start: usize, sent: usize, bytes: u64) {
        if sent > 0 {
            let slot = (start + sent) & self.tx_ring.mask();
            self.tx_tail = slot;
            // Release: orders the descriptor stores before the tail write; pairs with the device
            // fetching descriptors after it sees TDT.
            fence(Ordering::Release);
            self.mmio.get().write32(self.tdt, reg_pos(slot));
        }
        self.stats.tx_packets += sent as u64;
        self.stats.tx_bytes += bytes;
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
        if queue != 0 {
            return Err(DevError::NoSuchQueue { queue, queues: 1 });
        }
        // Every burst asks whether a batch of sent frames is done, and nearly always none is: the
        // tail and the free count are taken before the question and recomputed only after a
        // cleanup (whose call into the pool would otherwise make them be loaded again on every
        // burst).
        let (tail, mut free) = (self.tx_tail, self.tx_free());
        if self.tx_batch_done() {
            self.clean_tx_batches();
            free = self.tx_free();
        }
        let want = batch.len().min(free);
        if want < batch.len() {
            self.extra.tx_ring_full += 1;
        }
        // Cleaning moves `tx_clean` only.
        let start = tail;
        let (taken, bytes) = self.tx_fast(batch, start, want);
        if taken == want {
            self.tx_finish(start, taken, bytes);
            return Ok(taken);
        }
        self.tx_slow(batch, start, want, taken, bytes)
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
