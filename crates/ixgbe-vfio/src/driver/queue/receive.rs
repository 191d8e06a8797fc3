//! The receive side of an [`IxgbeQueue`]: the fast path (each slot re-armed from the caller's cache
//! as its frame is taken, or from the stash after the scan), the slow path, and the tail handed back
//! every [`rx_write_batch`] slots. The ownership rules are the module's (see [`super`]).

use std::sync::atomic::{Ordering, fence};

use netchannel::dev::{DevError, RxFrame, RxSink};
use netchannel::pool::PoolCache;

use super::{IxgbeQueue, STASH, reg_pos};
use crate::hw::Descriptor;
use crate::regs::rx;

/// How many re-armed RX slots go back to the device with one RDT write on a ring of `len` slots:
/// 32, or a quarter of a smaller ring. A tail write is an uncached write across PCIe (and, on the
/// model, a call into it); deferring it as DPDK's `rx_free_thresh` (32) and Linux's
/// `IXGBE_RX_BUFFER_WRITE` (16) do takes it out of most small bursts, for a device that owns at
/// most this many slots fewer at a time.
pub(super) fn rx_write_batch(len: usize) -> usize {
    (len / 4).clamp(1, 32)
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

/// DD and EOP set, no frame error: the status bits of a descriptor the fast path takes.
const RX_FAST_MASK: u64 = rx::STAT_DD | rx::STAT_EOP | rx::ERR_FRAME_MASK;
const RX_FAST_OK: u64 = rx::STAT_DD | rx::STAT_EOP;

/// Fresh receive buffers and the device addresses of their data, checked when they left the cache
/// (under a page-wise translation, where some buffers cannot be used).
pub(super) struct Stash {
    pub(super) index: [u32; STASH],
    pub(super) addr: [u64; STASH],
}

/// The re-arm under a page-wise translation: the first `taken` slots of a run take the top `taken`
/// buffers of the stash (`stash_len` of them fresh), with the addresses stored beside them; returns
/// the stash's length after. Out of line: a linear translation (VFIO, the model) never comes here.
#[cold]
#[inline(never)]
fn rearm_from_stash(
    descriptors: &[Descriptor],
    slots: &mut [u32],
    stash: &Stash,
    stash_len: usize,
    taken: usize,
) -> usize {
    let stash_len = stash_len.min(STASH);
    let from = stash_len - taken.min(stash_len);
    let fresh = stash.index[from..stash_len].iter().zip(&stash.addr[from..stash_len]);
    for ((desc, slot), (&index, &addr)) in descriptors.iter().zip(slots.iter_mut()).zip(fresh) {
        *slot = index;
        arm(desc, addr);
    }
    from
}

impl IxgbeQueue {
    /// Writes slot `slot` of the RX ring in read format: buffer address, no header buffer (which also
    /// clears DD, the low bit of the second word).
    #[inline]
    pub(super) fn arm_rx(&self, slot: usize, addr: u64) {
        arm(self.rx_ring.descriptor(slot), addr);
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
    ///
    /// [`BufferDma::rx_linear`]: super::super::dma::BufferDma::rx_linear
    #[inline(always)]
    fn fresh(&self, cache: &PoolCache) -> usize {
        self.fresh_under(self.dma.rx_linear().is_some(), cache)
    }

    /// [`fresh`](Self::fresh) with the translation already read (`linear`).
    #[inline(always)]
    fn fresh_under(&self, linear: bool, cache: &PoolCache) -> usize {
        if linear { cache.len() } else { self.stash_len }
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
    /// The scan loads each status, checks it with one mask-and-compare and one length compare, and
    /// makes the slot's buffer a packet at once ([`PacketBatch::extend_received_with`]). With a
    /// linear translation (VFIO, the model) it re-arms the slot in the same pass: the new buffer is
    /// the next from the top of the caller's cache, newest first, read where the cache keeps it
    /// ([`PoolCache::take_top_with`], which then keeps as many as were taken), its address one
    /// multiply-add. One loop and no second one to set up: 2–17 instructions a packet fewer than
    /// scanning first and re-arming after (as DPDK's vector receive does, `ixgbe_rxq_rearm`), most
    /// at small bursts. With a page-wise translation (no IOMMU) the slots are re-armed after the
    /// scan, out of line, from the stash with the addresses `refill_stash` looked up. No bounds
    /// check (the [`RingStore`] checked the lengths when it was built) and no counter in memory
    /// (Flow Director matches are summed in a register and added once, and only when `FDIR`: the
    /// queue's Flow Director is on, without which no descriptor reports a match).
    ///
    /// [`PacketBatch::extend_received_with`]: netchannel::dev::PacketBatch::extend_received_with
    /// [`PoolCache::take_top_with`]: netchannel::pool::PoolCache::take_top_with
    /// [`RingStore`]: super::super::ring::RingStore
    #[inline(always)]
    fn rx_fast<'c, S: RxSink<'c>, const FDIR: bool>(
        &mut self,
        cache: &'c PoolCache,
        batch: &mut S,
        start: usize,
        run: usize,
        fresh: usize,
        linear: Option<(u64, u32)>,
    ) -> (usize, u64) {
        let buf_len = self.dma.rx_buf_len();
        let Self { rx_ring, stash, .. } = self;
        let mut ring = rx_ring.view();
        // The run stops at the ring's end (the caller goes on from slot 0): inside it, descriptors
        // and slots are plain slices, indexed without the mask.
        let (descriptors, slots) = ring.run(start, run.min(fresh));
        let mut fdir = 0;
        let n = descriptors.len();
        // The status check of a frame the fast path takes; `None` at the first that is not one.
        let mut frame = |desc: &Descriptor, index: u32| {
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
        };
        let (taken, bytes) = if let Some((base, stride)) = linear {
            // One pass: each slot whose frame is taken is re-armed at once with a fresh buffer
            // from the top of the cache, newest first (frame `i` takes `fresh[n - 1 - i]`).
            let scan = |fresh: &[u32]| {
                // SAFETY: each frame names the buffer its slot owned, a buffer of this pool (the
                // cache's, checked by the caller) that the queue allocated, that no packet exists
                // for, and that appears once (each slot is read once); the slot holds a fresh one
                // from then on. Its data starts at the pool's headroom, where the buffer's receive
                // address (`BufferDma::rx_addr`) points.
                let got = unsafe {
                    batch.extend_received_with(cache, n, |i| {
                        // `i < n`: the lookups succeed (and compile to nothing, `i` being below
                        // the batch's `n` slots and `fresh.len()` being `n`).
                        let (desc, slot) = (descriptors.get(i)?, slots.get_mut(i)?);
                        let &new = fresh.get(n.wrapping_sub(1).wrapping_sub(i))?;
                        let got = frame(desc, *slot)?;
                        *slot = new;
                        arm(desc, base.wrapping_add(u64::from(new) * u64::from(stride)));
                        Some(got)
                    })
                };
                (got.0, got)
            };
            // SAFETY: `n <= fresh`, and `fresh` is `cache.len()` (`fresh`), read by the caller
            // before the scan; `scan` keeps the last `taken` it is lent (frame `i` took
            // `fresh[n - 1 - i]`), says so, and `taken <= n`. Building packets does not reach the
            // cache's free list.
            unsafe { cache.take_top_with(n, scan) }
        } else {
            // SAFETY: as above, for each frame the scan returns; the slots give their buffers up
            // below, each taking a fresh one from the stash.
            let got = unsafe {
                batch.extend_received_with(cache, n, |i| {
                    // `i < n`: both lookups succeed.
                    let (desc, &index) = (descriptors.get(i)?, slots.get(i)?);
                    frame(desc, index)
                })
            };
            self.stash_len = rearm_from_stash(descriptors, slots, stash, self.stash_len, got.0);
            got
        };
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
    pub(super) fn rx_into<'c, S: RxSink<'c>>(
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
        // Read once, for the count of fresh buffers here and for the fast path's re-arm (`fresh`,
        // which reads it again, cost 5 instructions a call here: measured).
        let linear = self.dma.rx_linear();
        let mut fresh = self.fresh_under(linear.is_some(), cache);
        if fresh == 0 && linear.is_some() && self.rx_done(start) {
            // A frame waits and the cache is empty: its own refill from the depot, here rather than
            // through `rx_slow` (an idle queue's poll takes no lock). `cache.fill` and not
            // `refill_fresh`, which would also cover the stash (refilled in `rx_slow`): a call that
            // takes `&mut self` here costs the scan registers, 1–2 instructions a frame (measured).
            fresh = cache.fill();
        }
        // No frame wanted, no fresh buffer, or a chain being dropped: one test (`|`, not `||`: the
        // flag is read either way, and a branch fewer).
        let run = want.min(fresh);
        if (run == 0) | self.rx_discard {
            return Ok(self.rx_slow(cache, batch, 0, 0));
        }
        let (taken, bytes) = if self.rx_count_fdir {
            self.rx_fast::<S, true>(cache, batch, start, run, fresh, linear)
        } else {
            self.rx_fast::<S, false>(cache, batch, start, run, fresh, linear)
        };
        // It stopped short either at a descriptor, where the common stop is one the device has not
        // written yet, or with the fresh buffers used up. Anything else is the slow path's.
        if taken < want && (taken == fresh || self.rx_done(start + taken)) {
            return Ok(self.rx_slow(cache, batch, taken, bytes));
        }
        self.rx_finish(start, taken, taken, bytes);
        Ok(taken)
    }

    /// The rest of a receive the fast path did not finish: from `frames` frames (`bytes` bytes)
    /// taken from the cursor on (`rx_next`, which only `rx_finish` moves), takes frames while the
    /// batch has room and the device owns slots not yet consumed, bringing fresh buffers when a
    /// frame waits for one and dropping the descriptors that are not good frames (each keeps its
    /// buffer), then finishes the burst as [`rx_finish`](Self::rx_finish). Returns the frames taken
    /// in all. The cursor and the batch's room are read here, not passed: two values fewer for the
    /// fast path to keep across its scan (2 instructions a call, 2–5 a packet through the
    /// channelizer: measured).
    #[cold]
    #[inline(never)]
    fn rx_slow<'c, S: RxSink<'c>>(
        &mut self,
        cache: &'c PoolCache,
        batch: &mut S,
        frames: usize,
        bytes: u64,
    ) -> usize {
        // The batch has taken the `frames` of the fast path since the burst began.
        let (start, room) = (self.rx_next, frames + batch.remaining());
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
                    self.rx_fast::<S, true>(cache, batch, slot, run, fresh, self.dma.rx_linear())
                } else {
                    self.rx_fast::<S, false>(cache, batch, slot, run, fresh, self.dma.rx_linear())
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
}
