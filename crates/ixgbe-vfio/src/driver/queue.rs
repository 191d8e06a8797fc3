//! One RX + TX queue pair of the 82599, driven by one core: advanced descriptors, burst receive and
//! transmit with one tail write per burst, TX cleanup in batches.
//!
//! Ownership: every RX descriptor slot owns exactly one pool buffer at all times (its index sits in
//! `rx_bufs`), so a descriptor the device wrote can only ever name a buffer this queue owns; a slot
//! is consumed only when a fresh buffer is at hand to replace it. TX slots between `tx_clean` and
//! `tx_tail` own the buffers of frames in flight. Ring positions come from the queue's own counters;
//! nothing the device writes (descriptor contents, RDH, TDH) is used as an index.

use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use netchannel::dev::{DevError, DeviceInfo, DeviceStats, Link, MacAddr, NetDevice, PacketBatch, RxFrame};
use netchannel::pool::PoolCache;

use super::dma::BufferDma;
use super::link_state;
use crate::hw::{Descriptor, DmaMemory, Mmio};
use crate::regs::{self, DESC_LEN, rx, tx};

/// How many fresh RX buffers a queue takes from the caller's cache at once.
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
    /// Completed descriptors found in the slot at the tail, which the device did not own (it wrote
    /// past RDT); never delivered. Also in `rx_errors`.
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
    rx_ring: DmaMemory,
    rx_bufs: Box<[u32]>,
    rx_next: usize,
    rx_mask: usize,
    /// Inside a chain of descriptors (a frame without EOP) that is being dropped.
    rx_discard: bool,
    /// The frames of the current burst, collected before they become packets (a ring's worth).
    rx_frames: Box<[RxFrame]>,
    stash: Box<[u32]>,
    stash_len: usize,
    // --- TX, hot ---
    tx_ring: DmaMemory,
    tx_bufs: Box<[u32]>,
    tx_tail: usize,
    tx_clean: usize,
    tx_mask: usize,
    clean_batch: usize,
    // --- shared ---
    dma: BufferDma,
    mmio: Arc<dyn Mmio>,
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

impl std::fmt::Debug for IxgbeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IxgbeQueue")
            .field("name", &self.name)
            .field("index", &self.index)
            .field("rx_ring", &self.rx_bufs.len())
            .field("tx_ring", &self.tx_bufs.len())
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
}

/// Why a queue could not be set up.
#[derive(Debug)]
pub(crate) enum QueueError {
    /// The pool ran out of buffers while filling the ring.
    PoolExhausted { needed: usize, got: usize },
}

impl IxgbeQueue {
    /// A queue over the given rings, with its RX ring filled with buffers from its own cache (the
    /// descriptors are written; the registers are the init sequence's business).
    pub(crate) fn new(parts: QueueParts) -> Result<Self, QueueError> {
        let QueueParts { index, name, mac, mmio, rx_ring, tx_ring, dma, cache } = parts;
        let rx_len = rx_ring.len() / DESC_LEN;
        let tx_len = tx_ring.len() / DESC_LEN;
        let pool_id = cache.pool().id();
        let mut queue = Self {
            rx_ring,
            rx_bufs: vec![0; rx_len].into_boxed_slice(),
            rx_next: 0,
            rx_mask: rx_len - 1,
            rx_discard: false,
            rx_frames: vec![RxFrame::default(); rx_len].into_boxed_slice(),
            stash: vec![0; STASH].into_boxed_slice(),
            stash_len: 0,
            tx_ring,
            tx_bufs: vec![0; tx_len].into_boxed_slice(),
            tx_tail: 0,
            tx_clean: 0,
            tx_mask: tx_len - 1,
            clean_batch: (tx_len / 4).min(32),
            dma,
            rdt: regs::rdt(u32::from(index)),
            tdt: regs::tdt(u32::from(index)),
            mmio,
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
                    unsafe { queue.cache.free_burst(&queue.rx_bufs[..filled]) };
                    queue.rx_bufs.fill(0);
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
                    queue.rx_bufs[filled] = index;
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
        self.rx_bufs = Box::new([]);
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
        self.rx_bufs.len()
    }

    /// TX descriptors in the ring.
    #[must_use]
    pub fn tx_ring_len(&self) -> usize {
        self.tx_bufs.len()
    }

    /// TX frames handed to the device whose buffers have not come back yet.
    #[must_use]
    pub fn tx_in_flight(&self) -> usize {
        self.tx_tail.wrapping_sub(self.tx_clean) & self.tx_mask
    }

    /// The RX ring's descriptors (for the init sequence's register writes).
    pub(crate) fn rx_ring(&self) -> &DmaMemory {
        &self.rx_ring
    }

    /// The TX ring's descriptors.
    pub(crate) fn tx_ring(&self) -> &DmaMemory {
        &self.tx_ring
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
        if let Some(desc) = self.rx_ring.descriptor(slot) {
            arm(desc, addr);
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

    /// Takes a fresh buffer that the device can address, refilling the stash from `cache` when it is
    /// empty; `None` when the cache has none.
    #[inline]
    fn fresh_rx_buffer(&mut self, cache: &PoolCache) -> Option<(u32, u64)> {
        loop {
            if self.stash_len == 0 {
                self.stash_len = cache.alloc_burst(&mut self.stash);
                if self.stash_len == 0 {
                    return None;
                }
            }
            self.stash_len -= 1;
            let index = self.stash[self.stash_len];
            match self.dma.rx_addr(index) {
                Some(addr) => return Some((index, addr)),
                None => self.set_aside(index),
            }
        }
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
        if let Some(addr) = self.rx_bufs.get(slot).and_then(|&index| self.dma.rx_addr(index)) {
            self.arm_rx(slot, addr);
        }
    }

    /// Before the tail moves past `slot` (the slot at the current RDT, which the device does not
    /// own): a completed descriptor there means the device wrote past the tail. Count it and re-arm
    /// the slot so that the stale write-back is never taken for a frame.
    #[inline]
    fn check_tail_slot(&mut self, slot: usize) {
        // Relaxed: only DD is looked at, and nothing the device wrote is read.
        let status = self.rx_ring.descriptor(slot).map_or(0, |d| d.load1(Ordering::Relaxed));
        if status & rx::STAT_DD != 0 {
            self.stats.rx_errors += 1;
            self.extra.rx_past_tail += 1;
            self.rearm_own(slot);
        }
    }

    /// Frees the buffers of sent frames, a batch at a time: a batch is done when the device has
    /// written DD into its last descriptor (every descriptor asks for a status write-back).
    fn clean_tx(&mut self) {
        let batch = self.clean_batch;
        loop {
            let in_flight = self.tx_tail.wrapping_sub(self.tx_clean) & self.tx_mask;
            if in_flight < batch {
                return;
            }
            let last = (self.tx_clean + batch - 1) & self.tx_mask;
            // Acquire: pairs with the device's Release store of the write-back word (hw.rs
            // protocol); after it the device is done with the batch's buffers.
            let status = self.tx_ring.descriptor(last).map_or(0, |d| d.load1(Ordering::Acquire));
            if status & tx::STAT_DD == 0 {
                return;
            }
            let start = self.tx_clean;
            let end = start + batch;
            let len = self.tx_bufs.len();
            if end <= len {
                // SAFETY: slots `start..end` hold the distinct buffers of frames this queue handed
                // to the device (`into_raw` in `tx_burst`), which the device has finished with; no
                // packet exists for them, and moving `tx_clean` past them gives them up.
                unsafe { self.cache.free_burst(&self.tx_bufs[start..end]) };
            } else {
                // SAFETY: as above, for the part before the ring's end.
                unsafe { self.cache.free_burst(&self.tx_bufs[start..]) };
                // SAFETY: as above, for the part after the wrap.
                unsafe { self.cache.free_burst(&self.tx_bufs[..end - len]) };
            }
            self.extra.tx_cleaned += batch as u64;
            self.tx_clean = end & self.tx_mask;
        }
    }

    /// Clears `reg`'s enable bit and waits until the device reports the queue stopped.
    fn disable(&self, reg: u32) -> bool {
        self.mmio.clear_bits(reg, regs::DCTL_ENABLE);
        let start = Instant::now();
        loop {
            if self.mmio.read32(reg) & regs::DCTL_ENABLE == 0 {
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
        DeviceInfo { name: self.name.clone(), mac: self.mac, mtu: super::MTU, queues: 1 }
    }

    fn link(&self) -> Link {
        link_state(self.mmio.read32(regs::LINKS))
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }

    /// Receives completed frames: polls DD in ring order from the queue's own cursor, validates each
    /// descriptor (EOP set, no frame error, length within the buffer), hands good frames over as
    /// packets of `cache`, puts a fresh buffer from `cache` in each consumed slot (a bad descriptor's
    /// buffer goes straight back into its slot), and moves RDT once per burst.
    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        if queue != 0 {
            return Err(DevError::NoSuchQueue { queue, queues: 1 });
        }
        if cache.pool().id() != self.pool_id {
            return Err(DevError::WrongPool { what: "the cache passed to rx_burst", expected: self.pool_id });
        }
        // Frames are collected as (buffer, length) pairs and turned into packets in one pass at the
        // end; at most a ring's worth, and at most what the batch has room for.
        let room = batch.remaining().min(self.rx_frames.len());
        let ring = self.rx_bufs.len();
        let buf_len = self.dma.rx_buf_len();
        let mut slot = self.rx_next;
        let mut frames = 0;
        let mut consumed = 0;
        // At most the `ring - 1` slots the device owns: the slot at the tail is never read here.
        while frames < room && consumed + 1 < ring {
            // `slot` is below the ring size (masked), so both lookups succeed.
            let (Some(desc), Some(&index)) = (self.rx_ring.descriptor(slot), self.rx_bufs.get(slot)) else {
                break;
            };
            // Acquire: pairs with the device's Release store of the write-back's second word (hw.rs
            // protocol): the first word and the frame's bytes are visible after it.
            let status = desc.load1(Ordering::Acquire);
            if status & rx::STAT_DD == 0 {
                break;
            }
            let len = rx_len(status);
            if status & (rx::STAT_EOP | rx::ERR_FRAME_MASK) == rx::STAT_EOP
                && len.wrapping_sub(1) < buf_len
                && !self.rx_discard
            {
                let Some((fresh, addr)) = self.fresh_rx_buffer(cache) else {
                    // No replacement: leave the frame in the ring for the next burst.
                    self.extra.rx_no_buffer += 1;
                    self.stats.rx_no_buffer += 1;
                    break;
                };
                // The slot takes `fresh`; its old buffer, holding the frame, moves to `rx_frames`.
                if let (Some(own), Some(frame)) = (self.rx_bufs.get_mut(slot), self.rx_frames.get_mut(frames))
                {
                    *own = fresh;
                    // `len < buf_len`, a 16-bit field.
                    *frame = RxFrame { index, len: u32::try_from(len).unwrap_or(0) };
                    frames += 1;
                }
                self.arm_rx(slot, addr);
                // Bit 2 (FLM) as a number: no branch.
                self.extra.rx_fdir_matches += (status & rx::STAT_FLM) >> 2;
            } else {
                // The slot keeps its buffer.
                self.drop_descriptor(slot, status);
            }
            slot = (slot + 1) & self.rx_mask;
            consumed += 1;
        }
        let received = &self.rx_frames[..frames];
        // SAFETY: each frame's buffer was taken out of its ring slot above (the slot holds a fresh
        // buffer now): a buffer of this pool (the cache's, checked above) that the queue owned, no
        // packet exists for, and that appears once. Its data starts at the pool's headroom, where
        // `alloc_burst` left it when it went into the ring.
        let (delivered, bytes) = unsafe { batch.extend_received(cache, received) };
        if delivered < frames {
            // Unreachable (`frames <= batch.remaining()`), but the buffers must not leak.
            self.stats.rx_dropped += (frames - delivered) as u64;
            for frame in &self.rx_frames[delivered..frames] {
                // SAFETY: as above; the packet is dropped at once, freeing the buffer.
                drop(unsafe { cache.packet_from_raw(frame.index) });
            }
        }
        if consumed > 0 {
            self.check_tail_slot(self.rx_next.wrapping_sub(1) & self.rx_mask);
            self.rx_next = slot;
            self.stats.rx_packets += delivered as u64;
            self.stats.rx_bytes += bytes;
            // Release: orders the descriptor stores above before the tail write that hands them to
            // the device; pairs with the device reading descriptors after it sees RDT.
            fence(Ordering::Release);
            // The device may fill up to, not including, the slot before our cursor.
            self.mmio.write32(self.rdt, reg_pos(slot.wrapping_sub(1) & self.rx_mask));
        }
        Ok(delivered)
    }

    /// Transmits frames from the front of `batch`: one advanced data descriptor per frame
    /// (EOP | RS | IFCS | DEXT | DTYP_DATA, PAYLEN = length), the buffer index kept beside the
    /// descriptor until the device reports it sent, one TDT write per burst. A full ring leaves frames
    /// in the batch. A frame the device cannot address (empty, or straddling two DMA pages) is
    /// dropped and counted.
    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        if queue != 0 {
            return Err(DevError::NoSuchQueue { queue, queues: 1 });
        }
        self.clean_tx();
        let free = self.tx_mask - (self.tx_tail.wrapping_sub(self.tx_clean) & self.tx_mask);
        let mut take = batch.len().min(free);
        if take < batch.len() {
            self.extra.tx_ring_full += 1;
        }
        if let Some(foreign) = batch.as_slice()[..take].iter().position(|p| p.pool_id() != self.pool_id) {
            if foreign == 0 {
                return Err(DevError::WrongPool {
                    what: "the first packet handed to tx_burst",
                    expected: self.pool_id,
                });
            }
            take = foreign;
        }
        if take == 0 {
            return Ok(0);
        }
        let mut slot = self.tx_tail;
        let mut sent = 0u64;
        let mut bytes = 0u64;
        for packet in batch.drain_front(take) {
            let len = packet.len();
            let addr = if len == 0 || len as u64 > tx::DTALEN_MASK {
                None
            } else {
                self.dma.addr(packet.dma_offset(), len)
            };
            let Some(addr) = addr else {
                self.stats.tx_dropped += 1;
                continue;
            };
            let len = len as u64;
            let cmd = tx::DCMD_EOP | tx::DCMD_RS | tx::DCMD_IFCS | tx::DCMD_DEXT | tx::DTYP_DATA;
            let (Some(desc), Some(own)) = (self.tx_ring.descriptor(slot), self.tx_bufs.get_mut(slot)) else {
                // Unreachable: `slot` is masked to the ring. Dropping the packet frees it.
                self.stats.tx_dropped += 1;
                continue;
            };
            // Relaxed: published by the Release fence before the TDT write.
            desc.store0(addr, Ordering::Relaxed);
            // Relaxed: as above.
            desc.store1(cmd | len | len << tx::PAYLEN_SHIFT, Ordering::Relaxed);
            *own = packet.into_raw();
            slot = (slot + 1) & self.tx_mask;
            sent += 1;
            bytes += len;
        }
        if slot != self.tx_tail {
            self.tx_tail = slot;
            // Release: orders the descriptor stores before the tail write; pairs with the device
            // fetching descriptors after it sees TDT.
            fence(Ordering::Release);
            self.mmio.write32(self.tdt, reg_pos(slot));
        }
        self.stats.tx_packets += sent;
        self.stats.tx_bytes += bytes;
        Ok(take)
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
        // SAFETY: every RX slot owns a distinct buffer of this pool that no packet exists for.
        unsafe { self.cache.free_burst(&self.rx_bufs) };
        // SAFETY: the first `stash_len` stash entries are distinct fresh buffers this queue allocated
        // and never handed on.
        unsafe { self.cache.free_burst(&self.stash[..self.stash_len]) };
        let (start, end, len) = (self.tx_clean, self.tx_tail, self.tx_bufs.len());
        if start <= end {
            // SAFETY: slots `tx_clean..tx_tail` own the buffers of frames in flight, now stopped.
            unsafe { self.cache.free_burst(&self.tx_bufs[start..end]) };
        } else {
            // SAFETY: as above, before the wrap.
            unsafe { self.cache.free_burst(&self.tx_bufs[start..len]) };
            // SAFETY: as above, after the wrap.
            unsafe { self.cache.free_burst(&self.tx_bufs[..end]) };
        }
        self.free_quarantine();
    }
}
