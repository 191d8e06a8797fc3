//! Bounded byte storage of a connection: a ring buffer whose storage grows on demand up to its
//! capacity (so an idle or short connection does not pay for its whole buffers), and the
//! out-of-order [`Assembler`] that records which ranges past the in-order data of the receive ring
//! already hold bytes.
//!
//! Out-of-order bytes are written straight into the free part of the receive ring at their offset
//! from `RCV.NXT` (the advertised window never exceeds that free space, so they always fit); the
//! assembler only remembers the ranges. When the hole before them fills, the ranges become in-order
//! data without a copy.
//!
//! A ring attached to a [`BufferBudget`] charges every growth of its storage to it. When the
//! budget refuses growth, the ring is *clamped*: its capacity drops to the storage it has (which
//! moves no byte: storage that does not cover the whole capacity has never wrapped), so it goes on
//! as a smaller ring, and it takes its configured capacity back once it is empty
//! ([`unclamp`](RingBuffer::unclamp)).

use std::sync::Arc;

use super::budget::{BufferBudget, Side};

/// A bounded ring buffer of bytes whose storage is allocated on demand.
///
/// Besides queue operations it lets the sender read bytes at an offset without removing them
/// (data stays until acknowledged) and the receiver write bytes past the end without committing
/// them (out-of-order data).
///
/// `capacity` is a limit, not an allocation: the ring is laid out over `capacity` bytes (storage
/// index `i` of a full-size buffer), but the backing `Vec` only covers the indices written so far.
/// It starts empty and grows geometrically (at most to `capacity`) as writes reach further; bytes
/// appended at its end are written, not zeroed first, and only a gap left by a write past the end
/// (out-of-order data) is zero-filled. A short-lived connection that moves a few bytes so touches a
/// few hundred bytes of memory instead of its whole buffers, and so does a long one whose messages
/// are small: a ring that drains empty with nothing written past its end starts again at index 0
/// ([`rewind`](Self::rewind)), instead of sweeping its storage out to `capacity` one message after
/// another (growing it on the way, and touching a new cache line with each message).
/// [`release`](Self::release) frees the storage of an empty buffer that will not be written again.
#[derive(Debug)]
pub(crate) struct RingBuffer {
    /// The bytes written so far at storage indices `0..storage.len()` (`storage.len() <= cap`);
    /// every stored byte (and every out-of-order byte past them) lies below `storage.len()`.
    storage: Vec<u8>,
    /// The capacity now: `limit`, or less while the ring is clamped to its storage.
    cap: usize,
    /// The configured capacity.
    limit: usize,
    /// Index of the first byte.
    head: usize,
    /// Number of bytes stored.
    len: usize,
    /// The budget growth is charged to, and which ring this is, if attached.
    budget: Option<(Arc<BufferBudget>, Side)>,
    /// Bytes charged to `budget` (the storage's capacity when attached).
    charged: usize,
}

/// The first allocation of a buffer's storage, in bytes (less if the capacity is smaller).
const MIN_ALLOCATION: usize = 512;

/// The most storage [`RingBuffer::release`] keeps for reuse: a short connection's (a request and
/// a response), not a bulk transfer's.
pub(crate) const RETAINED_STORAGE: usize = 4096;

impl Drop for RingBuffer {
    fn drop(&mut self) {
        if let Some((budget, _)) = &self.budget {
            budget.refund(self.charged);
        }
    }
}

impl RingBuffer {
    /// A buffer of at most `capacity` bytes; nothing is allocated until bytes are written.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            storage: Vec::new(),
            cap: capacity,
            limit: capacity,
            head: 0,
            len: 0,
            budget: None,
            charged: 0,
        }
    }

    /// Charges the storage's growth to `budget` from now on (moving what is held now from the
    /// budget it was charged to, if any).
    pub(crate) fn set_budget(&mut self, budget: &Arc<BufferBudget>, side: Side) {
        if let Some((old, _)) = &self.budget {
            old.refund(self.charged);
        }
        self.charged = self.storage.capacity();
        budget.charge(self.charged);
        self.budget = Some((Arc::clone(budget), side));
    }

    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes of storage allocated now (at most the capacity).
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> usize {
        self.storage.capacity()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Free bytes.
    pub(crate) fn free(&self) -> usize {
        self.cap - self.len
    }

    /// Whether the budget refused growth and the ring is held to its storage.
    pub(crate) fn is_clamped(&self) -> bool {
        self.cap < self.limit
    }

    /// Gives a clamped ring its configured capacity back, if it is empty and its budget has room
    /// for the growth to it now (so that the window does not open only to drop what comes).
    /// Only when nothing is written past its end (no out-of-order bytes): the next byte goes to
    /// the start of the storage. Its growth still asks the budget.
    pub(crate) fn unclamp(&mut self) {
        let room = self.budget.as_ref().is_none_or(|(b, _)| b.has_room(self.limit - self.storage.capacity()));
        if self.len == 0 && room {
            self.head = 0;
            self.cap = self.limit;
        }
    }

    /// Changes the capacity to `capacity` (at least the bytes stored), keeping the stored bytes in
    /// order. Only for a buffer with nothing written past its end (the send ring): out-of-order
    /// bytes are not kept. Copies the stored bytes once.
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        let cap = capacity.max(self.len);
        if cap == self.limit {
            return;
        }
        let mut bytes = vec![0; self.len];
        let n = self.read_allocated(0, &mut bytes);
        debug_assert_eq!(n, self.len, "every stored byte lies in allocated storage");
        let budget = self.budget.take();
        if let Some((b, _)) = &budget {
            b.refund(self.charged);
        }
        *self = Self::new(cap);
        // Without the budget while the bytes go back in: none of them may be refused (the storage
        // is charged again below, whatever the budget says: the bytes were held already).
        let stored = self.enqueue_slice(&bytes[..n]);
        debug_assert_eq!(stored, n, "the new capacity holds every stored byte");
        if let Some((b, side)) = &budget {
            self.set_budget(b, *side);
        }
    }

    /// The configured capacity (what a clamped ring takes back once empty).
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Raises the capacity to `capacity`, keeping every byte where its offset from the head says
    /// (the stored bytes and those written past them, out-of-order data, which lie within
    /// `extent` bytes of the head): the receive ring's growth under autotuning. Laid out over the
    /// old capacity, bytes that wrapped past its end to the front of the storage move to follow
    /// it, as far as the new capacity goes, and the rest to the front (as `VecDeque` grows):
    /// nothing moves when none wrapped. Returns false, changing nothing, for a clamped ring, a
    /// capacity not above the present one, or a budget without room for the storage the move
    /// needs (growth beyond that is charged as writes reach it, as always).
    pub(crate) fn raise_limit(&mut self, capacity: usize, extent: usize) -> bool {
        let old = self.cap;
        if capacity <= old || old < self.limit {
            return false;
        }
        let wrapped = (self.head + extent).saturating_sub(old);
        if wrapped > 0 {
            let moved = wrapped.min(capacity - old);
            if !self.reserve_charged(old + moved, false) {
                return false;
            }
            // Storage short of the old end holds no byte there (an out-of-order write can wrap
            // to the front over a gap never written): zero-filled, as any gap.
            self.storage.resize(old, 0);
            // The first `moved` bytes of the front follow the old end, the rest shift down to
            // index 0 (there when the new capacity is smaller than the old one plus the wrap).
            self.storage.extend_from_within(..moved);
            self.storage.copy_within(moved..wrapped, 0);
        }
        self.cap = capacity;
        self.limit = capacity;
        true
    }

    /// Makes the storage's capacity at least `want`, charging the growth to the budget (if
    /// attached): only when it has room, or whatever it says when `forced`. Returns whether it
    /// did (always, without a budget).
    fn reserve_charged(&mut self, want: usize, forced: bool) -> bool {
        let have = self.storage.capacity();
        if want <= have {
            return true;
        }
        if let Some((budget, _)) = &self.budget {
            if forced {
                budget.charge(want - have);
            } else if !budget.try_charge(want - have) {
                return false;
            }
        }
        self.storage.reserve_exact(want - self.storage.len());
        let capacity = self.storage.capacity();
        if let Some((budget, _)) = &self.budget {
            // Settle the charge with the capacity the allocator gave (at least what was asked).
            if capacity > want {
                budget.charge(capacity - want);
            }
            self.charged = capacity;
        }
        true
    }

    /// Starts an empty ring's next byte at index 0 of its storage (a no-op with bytes stored).
    /// Only when nothing is written past the end (no out-of-order bytes: they lie at offsets from
    /// the head).
    #[inline]
    pub(crate) fn rewind(&mut self) {
        if self.len == 0 {
            self.head = 0;
        }
    }

    /// Frees the storage of an empty buffer (a no-op with bytes stored). Only when nothing more
    /// will be written past the end: out-of-order bytes there are dropped too. Storage of at most
    /// [`RETAINED_STORAGE`] bytes is kept (emptied, still charged to the budget) for
    /// [`take_storage`](Self::take_storage) to hand to the next connection.
    pub(crate) fn release(&mut self) {
        if self.len == 0 && self.storage.capacity() <= RETAINED_STORAGE {
            self.storage.clear();
            self.head = 0;
            self.cap = self.limit;
        } else if self.len == 0 {
            self.storage = Vec::new();
            self.head = 0;
            self.cap = self.limit;
            if let Some((budget, _)) = &self.budget {
                budget.refund(self.charged);
            }
            self.charged = 0;
        }
    }

    /// Takes the storage out (emptied, its charge refunded), leaving the ring empty with none:
    /// for a ring no longer used, whose storage [`give_storage`](Self::give_storage) gives to
    /// another.
    pub(crate) fn take_storage(&mut self) -> Vec<u8> {
        if let Some((budget, _)) = &self.budget {
            budget.refund(self.charged);
        }
        self.charged = 0;
        self.head = 0;
        self.len = 0;
        self.cap = self.limit;
        let mut storage = std::mem::take(&mut self.storage);
        storage.clear();
        storage
    }

    /// Gives a ring that has no storage yet `storage`'s allocation (emptied first; charged to the
    /// ring's budget, if attached), which its writes use before they allocate. A ring that has
    /// storage keeps its own (`storage` is dropped).
    pub(crate) fn give_storage(&mut self, mut storage: Vec<u8>) {
        if self.storage.capacity() != 0 || self.len != 0 {
            return;
        }
        storage.clear();
        if let Some((budget, _)) = &self.budget {
            budget.charge(storage.capacity());
        }
        self.charged = if self.budget.is_some() { storage.capacity() } else { 0 };
        self.storage = storage;
    }

    /// The storage index of logical offset `off` (from the head), for `off < 2 * capacity`.
    fn index(&self, off: usize) -> usize {
        let cap = self.cap;
        let i = self.head + off;
        if i >= cap { i - cap } else { i }
    }

    /// Appends as much of `data` as fits; returns how much.
    pub(crate) fn enqueue_slice(&mut self, data: &[u8]) -> usize {
        let n = self.write_unallocated(0, data);
        self.len += n;
        n
    }

    /// Removes up to `buf.len()` bytes from the front into `buf`; returns how many.
    pub(crate) fn dequeue_slice(&mut self, buf: &mut [u8]) -> usize {
        let n = self.read_allocated(0, buf);
        self.dequeue_allocated(n);
        n
    }

    /// Drops up to `n` bytes from the front; returns how many.
    pub(crate) fn dequeue_allocated(&mut self, n: usize) -> usize {
        let n = n.min(self.len);
        if n > 0 {
            self.head = self.index(n);
            self.len -= n;
        }
        // The head is not reset when the buffer drains: out-of-order bytes may wait past the end,
        // at offsets relative to it.
        n
    }

    /// How many stored bytes from `offset` bytes after the front lie in one run of the storage
    /// (up to its end, or to the last stored byte): the most [`allocated_run`](Self::allocated_run)
    /// can return from there.
    pub(crate) fn run_from(&self, offset: usize) -> usize {
        if offset >= self.len {
            return 0;
        }
        (self.len - offset).min(self.storage.len().saturating_sub(self.index(offset)))
    }

    /// The `len` stored bytes starting `offset` bytes after the front, when they lie in one run of
    /// the storage (they do not wrap around its end); `None` otherwise, or when fewer are stored.
    pub(crate) fn allocated_run(&self, offset: usize, len: usize) -> Option<&[u8]> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        let start = self.index(offset);
        self.storage.get(start..start.checked_add(len)?)
    }

    /// Copies stored bytes starting `offset` bytes after the front into `buf` without removing
    /// them; returns how many (0 when `offset >= len`).
    pub(crate) fn read_allocated(&self, offset: usize, buf: &mut [u8]) -> usize {
        if offset >= self.len {
            return 0;
        }
        let n = buf.len().min(self.len - offset);
        self.copy_out(offset, &mut buf[..n]);
        n
    }

    fn copy_out(&self, offset: usize, buf: &mut [u8]) {
        let cap = self.cap;
        let start = self.index(offset);
        let first = buf.len().min(cap - start);
        buf[..first].copy_from_slice(&self.storage[start..start + first]);
        let rest = buf.len() - first;
        buf[first..].copy_from_slice(&self.storage[..rest]);
    }

    /// Makes the storage's capacity cover indices `..reach` (`reach <= cap`), charging the growth
    /// to the budget. When the budget refuses, grows to the guaranteed size at most, clamps the
    /// ring to its storage and returns false.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, reach: usize) -> bool {
        let have = self.storage.capacity();
        let target = reach.max(2 * have).max(MIN_ALLOCATION).min(self.cap);
        debug_assert!(
            self.budget.is_none() || self.charged == have,
            "an attached ring has its whole storage charged"
        );
        let floor = BufferBudget::GUARANTEED.min(self.cap);
        // The doubling, or at least what this write needs, within the budget; the guaranteed
        // storage whatever it says.
        if [target, reach].into_iter().any(|want| self.reserve_charged(want, want <= floor)) {
            return true;
        }
        self.hold();
        false
    }

    /// Clamps the ring now, before its free space is promised to the peer, when its budget has
    /// no room left for it to grow to its capacity (the window then offers what the ring can
    /// take); returns whether it did. Costs a compare for a ring whose storage covers its
    /// capacity, or a clamped one.
    #[inline]
    pub(crate) fn hold_if_pressed(&mut self) -> bool {
        let have = self.storage.capacity();
        let pressed = self.cap > have
            && self.budget.as_ref().is_some_and(|(budget, _)| !budget.has_room(self.cap - have));
        if pressed {
            self.hold();
        }
        pressed
    }

    #[cold]
    fn hold(&mut self) {
        let Some((budget, side)) = &self.budget else { return };
        let have = self.storage.capacity();
        let want = BufferBudget::GUARANTEED.min(self.cap).max(have);
        if want > have {
            self.storage.reserve_exact(want - self.storage.len());
        }
        let capacity = self.storage.capacity();
        budget.charge(capacity - have);
        self.charged = capacity;
        budget.clamped(*side);
        self.cap = capacity.min(self.cap);
    }

    /// Writes `data` at storage index `start` (`start + data.len() <= storage.capacity()`).
    #[inline]
    fn put(&mut self, start: usize, data: &[u8]) {
        let end = start + data.len();
        let have = self.storage.len();
        debug_assert!(end <= self.storage.capacity(), "grown first");
        if end <= have {
            self.storage[start..end].copy_from_slice(data);
        } else if start >= have {
            // A gap (free space skipped by an out-of-order write) is zero-filled.
            self.storage.resize(start, 0);
            self.storage.extend_from_slice(data);
        } else {
            let (inside, beyond) = data.split_at(have - start);
            self.storage[start..].copy_from_slice(inside);
            self.storage.extend_from_slice(beyond);
        }
    }

    /// How many of `len` bytes fit in the free space starting `offset` bytes after the stored
    /// bytes, with the storage grown to cover them first (or, when the budget refuses the growth,
    /// the ring clamped to its storage and the fit taken again within it: at most twice). A fit
    /// cut short only because the ring is clamped is counted in the budget.
    #[inline(always)]
    fn room(&mut self, offset: usize, len: usize) -> usize {
        let n = loop {
            let free = self.free();
            if offset >= free {
                break 0;
            }
            let n = len.min(free - offset);
            let start = self.index(self.len + offset);
            let reach = if n > self.cap - start { self.cap } else { start + n };
            if reach <= self.storage.capacity() || self.grow(reach) {
                break n;
            }
        };
        if n < len && self.cap < self.limit {
            self.count_refused(offset, len, n);
        }
        n
    }

    #[cold]
    fn count_refused(&self, offset: usize, len: usize, written: usize) {
        let would = len.min((self.limit - self.len).saturating_sub(offset));
        if would > written
            && let Some((budget, side)) = &self.budget
        {
            budget.refused(*side);
        }
    }

    /// Writes `data` into the free space starting `offset` bytes after the stored bytes, without
    /// committing it; returns how many bytes were written (those that fit in the free space).
    #[inline(always)]
    pub(crate) fn write_unallocated(&mut self, offset: usize, data: &[u8]) -> usize {
        let n = self.room(offset, data.len());
        if n > 0 {
            let start = self.index(self.len + offset);
            let first = n.min(self.cap - start);
            self.put(start, &data[..first]);
            if n > first {
                self.put(0, &data[first..n]);
            }
        }
        n
    }

    /// [`write_unallocated`](Self::write_unallocated) that leaves the bytes of `held` alone:
    /// sorted, disjoint ranges of offsets (from the end of the stored bytes, as `offset` is) that
    /// already hold bytes. Only the parts of `offset..offset + n` outside them are written; returns
    /// `n`, how many bytes of `data` fit in the free space, as `write_unallocated` does.
    #[inline]
    pub(crate) fn write_unallocated_around(
        &mut self,
        offset: usize,
        data: &[u8],
        held: impl Iterator<Item = (usize, usize)>,
    ) -> usize {
        // Nothing to write (a segment the application took whole in place): no room to find.
        if data.is_empty() {
            return 0;
        }
        self.write_around(offset, data, held)
    }

    /// [`write_unallocated_around`](Self::write_unallocated_around) of a non-empty `data`.
    fn write_around(
        &mut self,
        offset: usize,
        data: &[u8],
        held: impl Iterator<Item = (usize, usize)>,
    ) -> usize {
        let mut held = held.peekable();
        if held.peek().is_none() {
            return self.write_unallocated(offset, data);
        }
        // The storage covers the whole range (or the ring is clamped) before any piece is written,
        // so that every piece below fits whole.
        let n = self.room(offset, data.len());
        let end = offset + n;
        let mut at = offset;
        for (s, e) in held {
            if e <= at {
                continue;
            }
            if s >= end {
                break;
            }
            if s > at {
                self.write_unallocated(at, &data[at - offset..s - offset]);
            }
            at = e;
            if at >= end {
                return n;
            }
        }
        if at < end {
            self.write_unallocated(at, &data[at - offset..n]);
        }
        n
    }

    /// At most `max` bytes of the free space from the end of the stored bytes, as two slices for
    /// the caller to write in place (the second is empty unless the free space wraps past the end
    /// of the storage); [`enqueue_unallocated`](Self::enqueue_unallocated) commits what was
    /// written, from the front of the first. The storage grows to cover them first, as for a write
    /// of `max` bytes (so a budget that refuses the growth clamps the ring, and the slices are
    /// shorter); the part of it never written before is zeroed once, so the slices hold this
    /// ring's earlier bytes or zeros, never another's.
    pub(crate) fn free_slices(&mut self, max: usize) -> (&mut [u8], &mut [u8]) {
        let n = self.room(0, max);
        if n == 0 {
            return (&mut [], &mut []);
        }
        let start = self.index(self.len);
        let first = n.min(self.cap - start);
        if self.storage.len() < start + first {
            // Within the capacity `room` made sure of: no reallocation.
            self.storage.resize(start + first, 0);
        }
        // A wrapped run ends before the head, which lies inside the written storage.
        let (front, back) = self.storage.split_at_mut(start);
        (&mut back[..first], &mut front[..n - first])
    }

    /// Commits `n` bytes previously written with [`write_unallocated`](Self::write_unallocated)
    /// (or into [`free_slices`](Self::free_slices)) at the end (at most the free space).
    pub(crate) fn enqueue_unallocated(&mut self, n: usize) {
        self.len += n.min(self.free());
    }
}

/// The out-of-order ranges held past the in-order data, as offsets from `RCV.NXT`: sorted,
/// disjoint, non-adjacent, and at most `max_ranges` of them. Their bytes live in the receive
/// ring's free space, so their total is bounded by the receive buffer.
#[derive(Debug, Clone)]
pub(crate) struct Assembler {
    ranges: Vec<(usize, usize)>,
    max_ranges: usize,
}

impl Assembler {
    /// No ranges; nothing allocated until out-of-order data arrives.
    pub(crate) fn new(max_ranges: usize) -> Self {
        Self { ranges: Vec::new(), max_ranges }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The number of ranges held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    /// The bytes held out of order.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.ranges.iter().map(|&(s, e)| e - s).sum()
    }

    /// Records `start..end` (offsets from `RCV.NXT`, `start > 0`). Returns false, recording
    /// nothing, when that would take more than `max_ranges` ranges.
    pub(crate) fn add(&mut self, start: usize, end: usize) -> bool {
        if start >= end {
            return true;
        }
        // The ranges that touch or overlap start..end merge with it.
        let first = self.ranges.partition_point(|&(_, e)| e < start);
        let last = self.ranges.partition_point(|&(s, _)| s <= end);
        if first == last {
            if self.ranges.len() >= self.max_ranges {
                return false;
            }
            self.ranges.insert(first, (start, end));
            return true;
        }
        let merged = (start.min(self.ranges[first].0), end.max(self.ranges[last - 1].1));
        self.ranges[first] = merged;
        self.ranges.drain(first + 1..last);
        true
    }

    /// In-order data of `n` bytes arrived at offset 0: returns how far in-order data now reaches
    /// (`n` or more, when it joins held ranges), and rebases the remaining ranges on the new
    /// `RCV.NXT`.
    pub(crate) fn advance(&mut self, n: usize) -> usize {
        let mut reach = n;
        let mut consumed = 0;
        for &(s, e) in &self.ranges {
            if s <= reach {
                reach = reach.max(e);
                consumed += 1;
            } else {
                break;
            }
        }
        self.ranges.drain(..consumed);
        for r in &mut self.ranges {
            r.0 -= reach;
            r.1 -= reach;
        }
        reach
    }

    /// The ranges held, as offsets from `RCV.NXT`, lowest first.
    pub(crate) fn ranges(&self) -> impl Iterator<Item = (usize, usize)> + Clone + '_ {
        self.ranges.iter().copied()
    }

    /// The ranges that end past `offset`, lowest first: those a segment written at `offset` can
    /// meet (found by a binary search, so a segment far above many holes does not walk them all).
    pub(crate) fn ranges_past(&self, offset: usize) -> impl Iterator<Item = (usize, usize)> + Clone + '_ {
        let first = self.ranges.partition_point(|&(_, e)| e <= offset);
        self.ranges.get(first..).unwrap_or_default().iter().copied()
    }

    /// Forgets every range.
    pub(crate) fn clear(&mut self) {
        self.ranges.clear();
    }

    /// Forgets every range and frees the storage (a connection that receives no more data).
    /// Forgets every range (keeping the few bytes of their storage).
    pub(crate) fn release(&mut self) {
        self.ranges.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn set_capacity_keeps_the_bytes_in_order_and_never_drops_one() {
        let mut r = RingBuffer::new(8);
        assert_eq!(r.enqueue_slice(b"abcdef"), 6);
        let mut out = [0; 4];
        assert_eq!(r.dequeue_slice(&mut out), 4);
        assert_eq!(r.enqueue_slice(b"ghijkl"), 6, "wrapped: ef|ghijkl");
        r.set_capacity(20);
        assert_eq!((r.capacity(), r.len(), r.free()), (20, 8, 12));
        assert_eq!(r.enqueue_slice(b"mn"), 2);
        let mut out = [0; 10];
        assert_eq!(r.read_allocated(0, &mut out), 10);
        assert_eq!(&out, b"efghijklmn");
        r.set_capacity(4);
        assert_eq!((r.capacity(), r.len(), r.free()), (10, 10, 0), "not below what it holds");
        // Attached to a budget with no room at all: resizing keeps every byte all the same.
        let data: Vec<u8> = (0..6000u32).map(|i| i.to_le_bytes()[0]).collect();
        let mut big = RingBuffer::new(8000);
        assert_eq!(big.enqueue_slice(&data), 6000);
        let budget = Arc::new(BufferBudget::new(0));
        big.set_budget(&budget, Side::Tx);
        big.set_capacity(100_000);
        assert_eq!((big.len(), budget.stats().used), (6000, big.allocated()));
        let mut out = vec![0; 6000];
        assert_eq!(big.dequeue_slice(&mut out), 6000);
        assert_eq!(out, data);
        let mut out = [0; 10];
        assert_eq!(r.dequeue_slice(&mut out), 10);
        assert_eq!(&out, b"efghijklmn");
    }

    #[test]
    fn ring_wraps() {
        let mut r = RingBuffer::new(8);
        assert_eq!(r.enqueue_slice(b"abcdef"), 6);
        let mut out = [0; 4];
        assert_eq!(r.dequeue_slice(&mut out), 4);
        assert_eq!(&out, b"abcd");
        assert_eq!(r.enqueue_slice(b"ghijklmn"), 6, "only the free space");
        assert_eq!(r.len(), 8);
        let mut out = [0; 8];
        assert_eq!(r.read_allocated(1, &mut out), 7);
        assert_eq!(&out[..7], b"fghijkl");
        assert_eq!(r.dequeue_allocated(3), 3);
        assert_eq!(r.write_unallocated(1, b"XY"), 2);
        assert_eq!(r.write_unallocated(2, b"ZZZ"), 1, "bounded by free space");
        assert_eq!(r.write_unallocated(3, b"Q"), 0);
        assert_eq!(r.write_unallocated(0, b"W"), 1);
        r.enqueue_unallocated(3);
        let mut out = [0; 8];
        assert_eq!(r.dequeue_slice(&mut out), 8);
        assert_eq!(&out, b"hijklWXZ");
        assert!(r.is_empty());
        // Bytes written past the end survive the buffer draining.
        assert_eq!(r.write_unallocated(2, b"late"), 4);
        assert_eq!(r.enqueue_slice(b"ab"), 2);
        r.enqueue_unallocated(4);
        let mut out = [0; 6];
        assert_eq!(r.dequeue_slice(&mut out), 6);
        assert_eq!(&out, b"ablate");
    }

    #[test]
    fn free_slices_are_written_in_place_and_wrap() {
        let mut r = RingBuffer::new(8);
        let (a, b) = r.free_slices(5);
        assert_eq!((a.len(), b.len()), (5, 0), "at most what was asked");
        assert!(a.iter().all(|&x| x == 0), "storage never written is zeroed");
        a[..3].copy_from_slice(b"abc");
        r.enqueue_unallocated(3);
        assert_eq!(r.allocated(), MIN_ALLOCATION.min(8), "grown as a write of 5 would grow it");
        assert_eq!(r.dequeue_allocated(2), 2);
        // Free: storage 3..8, then 0..2 (wrapped).
        let (a, b) = r.free_slices(100);
        assert_eq!((a.len(), b.len()), (5, 2));
        a.copy_from_slice(b"defgh");
        b.copy_from_slice(b"ij");
        r.enqueue_unallocated(7);
        assert_eq!(r.free(), 0);
        let (a, b) = r.free_slices(100);
        assert!(a.is_empty() && b.is_empty(), "full");
        let mut out = [0; 8];
        assert_eq!(r.dequeue_slice(&mut out), 8);
        assert_eq!(&out, b"cdefghij");
        // The model: one enqueue_slice of the same bytes leaves the same ring.
        let mut m = RingBuffer::new(8);
        m.enqueue_slice(b"abc");
        m.dequeue_allocated(2);
        m.enqueue_slice(b"defghij");
        let mut out2 = [0; 8];
        assert_eq!(m.dequeue_slice(&mut out2), 8);
        assert_eq!(out, out2);
    }

    #[test]
    fn free_slices_of_a_refused_ring_are_its_storage() {
        let budget = Arc::new(BufferBudget::new(0));
        let mut r = RingBuffer::new(64 * 1024);
        r.set_budget(&budget, Side::Tx);
        let (a, b) = r.free_slices(10_000);
        assert_eq!((a.len(), b.len()), (BufferBudget::GUARANTEED, 0), "clamped to the guaranteed storage");
        r.enqueue_unallocated(BufferBudget::GUARANTEED);
        assert!(r.is_clamped());
        assert_eq!((budget.stats().tx_clamps, budget.stats().tx_refused), (1, 1));
        assert_eq!(r.allocated(), BufferBudget::GUARANTEED);
    }

    #[test]
    fn writes_around_held_ranges_keep_the_first_bytes() {
        let mut r = RingBuffer::new(16);
        // Wrap the free space: 10 bytes in, 10 out.
        r.enqueue_slice(&[0; 10]);
        r.dequeue_allocated(10);
        assert_eq!(r.write_unallocated(2, b"AA"), 2);
        assert_eq!(r.write_unallocated(8, b"BBB"), 3);
        let held = [(2, 4), (8, 11)];
        assert_eq!(r.write_unallocated_around(0, b"xxxxxxxxxxxxxxxxxxxx", held.iter().copied()), 16);
        r.enqueue_unallocated(16);
        let mut out = [0; 16];
        assert_eq!(r.dequeue_slice(&mut out), 16);
        assert_eq!(&out, b"xxAAxxxxBBBxxxxx");
        // A write inside one held range writes nothing but still says what fit.
        assert_eq!(r.write_unallocated(4, b"CCCC"), 4);
        assert_eq!(r.write_unallocated_around(5, b"zz", [(4, 8)].into_iter()), 2);
        assert_eq!(r.write_unallocated_around(3, b"zzzzzzz", [(4, 8)].into_iter()), 7);
        r.enqueue_unallocated(10);
        let mut out = [0; 10];
        assert_eq!(r.dequeue_slice(&mut out), 10);
        assert_eq!(&out[3..], b"zCCCCzz");
    }

    #[test]
    fn assembler_merges() {
        let mut a = Assembler::new(2);
        assert!(a.add(10, 20));
        assert!(a.add(30, 40));
        assert!(!a.add(24, 26), "third disjoint range refused");
        assert!(a.add(20, 30), "joins both");
        assert_eq!(a.len(), 1);
        assert_eq!(a.bytes(), 30);
        assert!(a.add(50, 60));
        assert_eq!(a.advance(5), 5, "does not reach the first range");
        assert_eq!(a.advance(5), 35, "reaches 5..35 after rebasing");
        assert_eq!(a.len(), 1);
        assert_eq!(a.advance(10), 20, "50..60, rebased to 10..20, joins");
        assert!(a.is_empty());
    }

    #[test]
    fn a_ring_refused_growth_clamps_to_its_storage_and_keeps_every_byte() {
        let budget = Arc::new(BufferBudget::new(6000));
        let mut r = RingBuffer::new(64 * 1024);
        r.set_budget(&budget, Side::Rx);
        let data: Vec<u8> = (0..20_000u32).map(|i| i.to_le_bytes()[0]).collect();
        // Within the budget: the ring grows to what the write needs.
        assert_eq!(r.enqueue_slice(&data[..5000]), 5000);
        assert_eq!((r.allocated(), budget.stats().used), (5000, 5000));
        // A second ring takes its guaranteed storage whatever the budget says...
        let mut other = RingBuffer::new(64 * 1024);
        other.set_budget(&budget, Side::Tx);
        assert_eq!(other.enqueue_slice(&data[..4096]), 4096);
        assert_eq!(budget.stats().used, 5000 + 4096);
        // ... and no more: it is clamped to it and the write is cut short, and counted.
        assert_eq!(other.enqueue_slice(&data[..100]), 0);
        assert!(other.is_clamped());
        assert_eq!((other.capacity(), other.free()), (4096, 0));
        // The first ring is refused growth too: it goes on as a 5000-byte ring, wrapping.
        assert_eq!(r.enqueue_slice(&data[5000..]), 0);
        assert!(r.is_clamped());
        let stats = budget.stats();
        assert_eq!((stats.rx_clamps, stats.tx_clamps, stats.rx_dropped, stats.tx_refused), (1, 1, 1, 1));
        let mut out = vec![0; 3000];
        assert_eq!(r.dequeue_slice(&mut out), 3000);
        assert_eq!(out, data[..3000]);
        assert_eq!(r.enqueue_slice(&data[5000..9000]), 3000, "wrapped within the storage");
        let mut out = vec![0; 8000];
        assert_eq!(r.dequeue_slice(&mut out), 5000);
        assert_eq!(out[..5000], data[3000..8000]);
        assert_eq!(budget.stats().used, 5000 + 4096, "no storage beyond the two");
        // Empty, but the budget still has no room for 64 KiB: it stays clamped.
        r.unclamp();
        assert!(r.is_clamped());
        drop(other);
        assert_eq!(budget.stats().used, 5000, "a dropped ring gives its storage back");
        let big = Arc::new(BufferBudget::new(1 << 20));
        r.set_budget(&big, Side::Rx);
        assert_eq!((budget.stats().used, big.stats().used), (0, 5000), "moved to the new budget");
        r.unclamp();
        assert!(!r.is_clamped(), "room again: the configured capacity is back");
        assert_eq!(r.enqueue_slice(&data), 20_000);
        let mut out = vec![0; 20_000];
        assert_eq!(r.dequeue_slice(&mut out), 20_000);
        assert_eq!(out, data);
        r.release();
        assert_eq!((big.stats().used, big.stats().peak), (0, 20_000));
    }

    #[test]
    fn a_write_around_held_bytes_says_what_a_clamped_ring_took() {
        let budget = Arc::new(BufferBudget::new(0));
        let mut r = RingBuffer::new(64 * 1024);
        r.set_budget(&budget, Side::Rx);
        assert_eq!(r.write_unallocated(100, &[7; 100]), 100, "out of order, within the guaranteed 4 KiB");
        let data = vec![1; 8000];
        // The in-order segment that fills the hole reaches past what the budget allows: the ring is
        // clamped to its 4 KiB and the write says so, never the 8000 the free space promised.
        assert_eq!(r.write_unallocated_around(0, &data, [(100, 200)].into_iter()), 4096);
        assert!(r.is_clamped());
        r.enqueue_unallocated(4096);
        let mut out = vec![0; 8000];
        assert_eq!(r.dequeue_slice(&mut out), 4096);
        assert!(out[..100].iter().chain(&out[200..4096]).all(|&b| b == 1));
        assert!(out[100..200].iter().all(|&b| b == 7), "the bytes held first stay");
        assert_eq!(budget.stats().rx_dropped, 1);
    }

    #[test]
    fn a_pressed_ring_is_held_before_its_window_is_promised() {
        let budget = Arc::new(BufferBudget::new(15_000));
        let mut r = RingBuffer::new(64 * 1024);
        r.set_budget(&budget, Side::Rx);
        assert!(r.hold_if_pressed());
        assert!(r.is_clamped(), "no room for 64 KiB");
        assert_eq!(budget.stats().rx_clamps, 1);
        assert_eq!((r.free(), r.allocated()), (4096, 4096), "the guaranteed storage, all of it offered");
        assert_eq!(r.write_unallocated(4000, &[1; 96]), 96, "out of order at the far end");
        let mut small = RingBuffer::new(8000);
        small.set_budget(&budget, Side::Rx);
        assert!(!small.hold_if_pressed());
        assert!(!small.is_clamped(), "room for 8000 more");
        let mut third = RingBuffer::new(8000);
        third.set_budget(&budget, Side::Rx);
        assert_eq!(third.enqueue_slice(&[2; 7000]), 7000);
        assert!(small.hold_if_pressed());
        assert!(small.is_clamped(), "4096 + 7000 held: no room for 8000 more");
        assert_eq!(small.free(), 4096);
    }

    #[test]
    fn ring_allocates_on_demand() {
        let mut r = RingBuffer::new(256 * 1024);
        assert_eq!(r.allocated(), 0, "nothing before the first write");
        assert_eq!(r.free(), 256 * 1024, "the window follows the limit, not the allocation");
        assert_eq!(r.enqueue_slice(&[7; 64]), 64);
        assert!(r.allocated() <= MIN_ALLOCATION);
        let mut out = [0; 64];
        assert_eq!(r.dequeue_slice(&mut out), 64);
        assert_eq!(out, [7; 64]);
        // Out of order, far past the end: the gap is filled, the bytes land at their offset.
        assert_eq!(r.write_unallocated(100_000, b"late"), 4);
        assert!(r.allocated() >= 100_068 && r.allocated() <= 256 * 1024);
        assert_eq!(r.write_unallocated(0, &[1; 100_000]), 100_000);
        r.enqueue_unallocated(100_004);
        let mut out = vec![0; 100_004];
        assert_eq!(r.dequeue_slice(&mut out), 100_004);
        assert!(out[..100_000].iter().all(|&b| b == 1));
        assert_eq!(&out[100_000..], b"late");
        r.release();
        assert_eq!(r.allocated(), 0);
        assert_eq!(r.enqueue_slice(b"again"), 5, "usable after a release");
        let mut out = [0; 5];
        assert_eq!(r.dequeue_slice(&mut out), 5);
        assert_eq!(&out, b"again");
    }

    /// The ring with its storage allocated up front, as it was: the model for the lazy one.
    struct Eager {
        storage: Vec<u8>,
        head: usize,
        len: usize,
    }

    impl Eager {
        fn write(&mut self, offset: usize, data: &[u8]) -> usize {
            let cap = self.storage.len();
            let free = cap - self.len;
            if offset >= free {
                return 0;
            }
            let n = data.len().min(free - offset);
            for (k, &b) in data[..n].iter().enumerate() {
                self.storage[(self.head + self.len + offset + k) % cap] = b;
            }
            n
        }

        fn read(&self, offset: usize, n: usize) -> Vec<u8> {
            let cap = self.storage.len();
            (offset..self.len.min(offset + n)).map(|k| self.storage[(self.head + k) % cap]).collect()
        }
    }

    proptest! {
        /// The lazily allocated ring against the eager model: appends, in-order and out-of-order
        /// writes past the end, reads at offsets, drops from the front.
        #[test]
        fn ring_model(ops in proptest::collection::vec((0u8..4, 0usize..300, 1usize..200, any::<u8>()), 1..60)) {
            let cap = 700;
            let mut r = RingBuffer::new(cap);
            let mut m = Eager { storage: vec![0; cap], head: 0, len: 0 };
            // The bytes past the end already written, as offsets from the end (in-order commits
            // only cover bytes written).
            let mut written = vec![false; cap];
            for (op, a, b, fill) in ops {
                match op {
                    0 => {
                        let data = vec![fill; b];
                        let n = r.enqueue_slice(&data);
                        prop_assert_eq!(n, m.write(0, &data));
                        m.len += n;
                        written.drain(..n);
                        written.resize(cap, false);
                    }
                    1 => {
                        let data = vec![fill; b];
                        let n = r.write_unallocated(a, &data);
                        prop_assert_eq!(n, m.write(a, &data));
                        for w in &mut written[a.min(cap)..(a + n).min(cap)] { *w = true; }
                        // Commit the written run at the end, if there is one.
                        let run = written.iter().take_while(|&&w| w).count().min(cap - m.len);
                        r.enqueue_unallocated(run);
                        m.len += run;
                        written.drain(..run);
                        written.resize(cap, false);
                    }
                    2 => {
                        let mut out = vec![0; b];
                        let n = r.read_allocated(a, &mut out);
                        prop_assert_eq!(&out[..n], &m.read(a, b)[..]);
                    }
                    _ => {
                        let n = r.dequeue_allocated(b);
                        prop_assert_eq!(n, b.min(m.len));
                        m.head = (m.head + n) % cap;
                        m.len -= n;
                    }
                }
                prop_assert_eq!(r.len(), m.len);
                prop_assert!(r.allocated() <= cap);
            }
            let mut out = vec![0; cap];
            let n = r.dequeue_slice(&mut out);
            prop_assert_eq!(&out[..n], &m.read(0, cap)[..]);
        }

        /// A ring whose capacity is raised (`raise_limit`) keeps every byte at its offset, the
        /// in-order bytes and those written past them, against a model of offsets: appends,
        /// writes past the end (committed when they join the end), drops from the front, and
        /// raises to any capacity, with the ring wrapped or not.
        #[test]
        fn ring_raised_keeps_its_bytes(
            ops in proptest::collection::vec((0u8..5, 0usize..300, 1usize..200, any::<u8>()), 1..80),
        ) {
            let mut r = RingBuffer::new(500);
            // The in-order bytes, and what is written past them (offsets from their end).
            let mut stored: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
            let mut past: Vec<Option<u8>> = vec![None; 500];
            let mut salt = 0u8;
            for (op, a, b, fill) in ops {
                salt = salt.wrapping_add(1);
                let data: Vec<u8> = (0..b).map(|i| fill.wrapping_add(i.to_le_bytes()[0]).wrapping_mul(salt)).collect();
                match op {
                    0 | 1 => {
                        let at = if op == 0 { 0 } else { a };
                        let n = r.write_unallocated(at, &data);
                        prop_assert_eq!(n, data.len().min(past.len().saturating_sub(at)));
                        for (k, &byte) in data[..n].iter().enumerate() {
                            past[at + k] = Some(byte);
                        }
                        let run = past.iter().take_while(|b| b.is_some()).count();
                        r.enqueue_unallocated(run);
                        stored.extend(past.drain(..run).map(Option::unwrap));
                        past.resize(r.capacity() - stored.len(), None);
                    }
                    2 => {
                        let n = r.dequeue_allocated(b);
                        prop_assert_eq!(n, b.min(stored.len()));
                        stored.drain(..n);
                        past.resize(r.capacity() - stored.len(), None);
                    }
                    3 => {
                        let extent = stored.len() + past.iter().rposition(Option::is_some).map_or(0, |p| p + 1);
                        let raised = r.raise_limit(r.capacity() + a + 1, extent);
                        prop_assert!(raised);
                        past.resize(r.capacity() - stored.len(), None);
                    }
                    _ => {
                        let mut out = vec![0; b];
                        let n = r.read_allocated(a, &mut out);
                        let want: Vec<u8> = stored.iter().skip(a).take(b).copied().collect();
                        prop_assert_eq!(&out[..n], &want[..]);
                    }
                }
                prop_assert_eq!(r.len(), stored.len());
                // Every byte written past the end is still where its offset says.
                for (k, byte) in past.iter().enumerate() {
                    if let Some(byte) = byte {
                        prop_assert_eq!(r.storage[r.index(r.len + k)], *byte, "offset {} past the end", k);
                    }
                }
            }
            let mut out = vec![0; r.capacity()];
            let n = r.dequeue_slice(&mut out);
            prop_assert_eq!(&out[..n], &stored.iter().copied().collect::<Vec<_>>()[..]);
        }

        /// The assembler against a bitmap model.
        #[test]
        fn assembler_model(ops in proptest::collection::vec((0usize..64, 1usize..16, any::<bool>()), 1..40)) {
            let mut a = Assembler::new(4);
            let mut model = vec![false; 2048];
            let mut base = 0usize;
            for (start, len, in_order) in ops {
                if in_order {
                    let reach = a.advance(len);
                    let mut m = base + len;
                    while model[m] { m += 1; }
                    prop_assert_eq!(reach, m - base);
                    base = m;
                } else {
                    let s = start + 1;
                    if a.add(s, s + len) {
                        for b in &mut model[base + s..base + s + len] { *b = true; }
                    }
                }
                for b in &mut model[..base] { *b = false; }
                prop_assert!(a.len() <= 4);
                prop_assert_eq!(a.bytes(), model.iter().filter(|&&b| b).count());
            }
        }
    }
}
