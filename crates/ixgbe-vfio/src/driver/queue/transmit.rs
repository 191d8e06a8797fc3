//! The transmit side of an [`IxgbeQueue`]: one descriptor per packet straight from the batch, the
//! slow path for packets that cannot go as they are, and the cleaning of sent frames a batch at a
//! time.

use std::sync::atomic::{Ordering, fence};

use netchannel::dev::{DevError, PacketBatch};
use netchannel::pool::PoolCache;

use super::super::dma::BufferDma;
use super::{IxgbeQueue, reg_pos};
use crate::regs::tx;

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

/// Why a run of the TX fast path stopped short: the packet at the front of the batch.
enum TxStop {
    /// It is of another pool than the queue's.
    Foreign,
    /// The device cannot address it: empty, longer than a descriptor takes, or straddling two
    /// pages of a page-wise translation.
    Unaddressable,
}

impl IxgbeQueue {
    /// TX descriptors free for new frames (one is always left empty).
    #[inline(always)]
    fn tx_free(&self) -> usize {
        self.tx_ring.mask() - self.tx_in_flight()
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

    /// [`NetDevice::tx_burst`]: cleans the sent frames when a batch of them is done, writes a
    /// descriptor for each packet that fits, and moves TDT once.
    ///
    /// [`NetDevice::tx_burst`]: netchannel::dev::NetDevice::tx_burst
    pub(super) fn tx_into(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
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
