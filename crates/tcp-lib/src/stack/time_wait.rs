//! The TIME-WAIT table: released connections in TIME-WAIT as compact records (the record itself
//! is [`TimeWait`]), found by 4-tuple, leaving in expiry order, bounded by
//! [`Config::max_time_wait`](super::Config::max_time_wait).
//!
//! A busy server holds thousands of records (4096 by default) and touches each twice: when it
//! comes in, and when it leaves (its 2·MSL ends, or the bound evicts it for a newer one). Between
//! the two it is cold. The layout makes those touches cheap:
//!
//! * the records live in slots of one array, and a slot freed by a record leaving is the next
//!   one taken (a free list, last in first out): at the bound the table evicts the oldest record
//!   and the new one is written over it, in the cache line the eviction just read (as Linux lets
//!   a TIME-WAIT bucket be recycled);
//! * the 4-tuple index maps to slot numbers (32-byte buckets, as the demultiplexing map's), and
//!   an eviction or expiry removes its record's key without first looking the record up to see
//!   whether its queue entry is still its own;
//! * the expiry order is a queue of `(deadline, slot, stamp)`: a slot carries the stamp of its
//!   live queue entry, so an entry left behind by a record that left or restarted its 2·MSL is
//!   recognised as stale from the slot alone, without a lookup by key. Deadlines are
//!   `now + 2·MSL` on a clock that does not go back, nearly always the latest: appended without a
//!   search.

use std::collections::VecDeque;
use std::time::Instant;

use super::Stack;
use super::flows::{FlowKey, FlowMap};
use super::hash::TableHash;
use crate::tcp::TimeWait;

/// One record and its key; `stamp` is its live expiry-queue entry's ([`FREE`]: no record).
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: FlowKey,
    record: TimeWait,
    stamp: u32,
}

/// The stamp of a free slot (no queue entry carries it).
const FREE: u32 = 0;

/// An expiry-queue entry: the record in `slot` leaves at `at` if the slot still carries `stamp`.
#[derive(Clone, Copy, Debug)]
struct Due {
    at: Instant,
    slot: u32,
    stamp: u32,
}

/// The TIME-WAIT table (see the [module documentation](self)).
#[derive(Debug)]
pub(super) struct TimeWaitTable {
    slots: Vec<Slot>,
    /// Free slot numbers, the latest freed last.
    free: Vec<u32>,
    /// Slot numbers by key.
    index: FlowMap<u32>,
    /// Expiry order, earliest first; its front is always live (see [`Self::trim`]).
    order: VecDeque<Due>,
    /// The stamp of the next queue entry (never [`FREE`]).
    stamp: u32,
}

impl TimeWaitTable {
    pub(super) fn new(hash: TableHash) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            index: FlowMap::new(hash),
            order: VecDeque::new(),
            stamp: FREE,
        }
    }

    /// Records held.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// The slot of `key`'s record.
    pub(super) fn find(&self, key: &FlowKey) -> Option<u32> {
        if self.index.is_empty() {
            // A client's table, nearly always: no hash to compute.
            return None;
        }
        self.index.get(key).copied()
    }

    pub(super) fn contains(&self, key: &FlowKey) -> bool {
        self.find(key).is_some()
    }

    /// The record in `slot` (from [`find`](Self::find)).
    pub(super) fn record_mut(&mut self, slot: u32) -> &mut TimeWait {
        &mut self.slots[slot as usize].record
    }

    /// The earliest deadline.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.order.front().map(|d| d.at)
    }

    /// Adds `record` for `key`, leaving at `at`, replacing a record of the same key. At `max`
    /// records, first evicts those that expire first, so that the new one reuses the slot of
    /// the last evicted; returns how many were evicted (`record` itself counts when `max` is 0).
    pub(super) fn insert(&mut self, key: FlowKey, record: TimeWait, at: Instant, max: usize) -> usize {
        let mut evicted = 0;
        while self.len() >= max {
            let Some(due) = self.order.pop_front() else { return evicted + 1 };
            if self.live(due) {
                self.release(due.slot);
                evicted += 1;
            }
        }
        let stamp = self.next_stamp();
        let new = Slot { key, record, stamp };
        let slot = if let Some(slot) = self.free.pop() {
            self.slots[slot as usize] = new;
            slot
        } else {
            let Ok(slot) = u32::try_from(self.slots.len()) else { return evicted + 1 };
            self.slots.push(new);
            slot
        };
        if let Some(old) = self.index.insert(key, slot) {
            // The key had a record (not expected: a 4-tuple in TIME-WAIT takes no new
            // connection). Found by the insert itself rather than a lookup before it, which every
            // record would pay; at the bound it cost one eviction too many.
            self.slots[old as usize].stamp = FREE;
            self.free.push(old);
        }
        self.queue(Due { at, slot, stamp });
        self.trim();
        evicted
    }

    /// Moves the record in `slot` to leave at `at` instead (2·MSL restarted).
    pub(super) fn requeue(&mut self, slot: u32, at: Instant) {
        let stamp = self.next_stamp();
        self.slots[slot as usize].stamp = stamp;
        self.queue(Due { at, slot, stamp });
        self.trim();
    }

    /// Drops the record in `slot`.
    pub(super) fn remove(&mut self, slot: u32) {
        self.release(slot);
        self.trim();
    }

    /// Drops the records due at `now`; whether any were.
    pub(super) fn expire(&mut self, now: Instant) -> bool {
        let mut expired = false;
        let mut popped = false;
        while let Some(&due) = self.order.front() {
            if due.at > now {
                break;
            }
            self.order.pop_front();
            popped = true;
            if self.live(due) {
                self.release(due.slot);
                expired = true;
            }
        }
        // The front was live before: only popping can have left a stale one there. Not looking
        // at it otherwise spares every poll a read of the oldest (cold) slot.
        if popped {
            self.trim();
        }
        expired
    }

    fn next_stamp(&mut self) -> u32 {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == FREE {
            self.stamp = 1;
        }
        self.stamp
    }

    /// Whether `due` is its record's live entry. A stamp is reused only after 2^32 entries; the
    /// queue is compacted long before it holds that many (see [`queue`](Self::queue)).
    fn live(&self, due: Due) -> bool {
        self.slots[due.slot as usize].stamp == due.stamp
    }

    /// Frees `slot`: out of the index, its queue entry stale, the slot next to be reused.
    fn release(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        s.stamp = FREE;
        self.index.remove(&s.key);
        self.free.push(slot);
    }

    /// Queues `due` in deadline order; drops the stale entries once they outnumber the records
    /// (a peer that keeps restarting 2·MSL cannot grow the queue).
    fn queue(&mut self, due: Due) {
        if self.order.back().is_none_or(|d| d.at <= due.at) {
            self.order.push_back(due);
        } else {
            // A deadline earlier than the latest: a connection the application held past its
            // TIME-WAIT entry, or one whose MSL is shorter.
            let i = self.order.partition_point(|d| d.at <= due.at);
            self.order.insert(i, due);
        }
        if self.order.len() > 2 * self.len() + 1024 {
            let slots = &self.slots;
            self.order.retain(|d| slots[d.slot as usize].stamp == d.stamp);
        }
    }

    /// Drops stale entries at the front of the queue, so that its front is the next expiry.
    fn trim(&mut self) {
        while let Some(&due) = self.order.front() {
            if self.live(due) {
                break;
            }
            self.order.pop_front();
        }
    }
}

impl Stack {
    /// Puts a record in the TIME-WAIT table, evicting the records that expire first beyond
    /// [`Config::max_time_wait`](super::Config::max_time_wait) (dropped without a segment, as
    /// Linux does when `tcp_max_tw_buckets` overflows; counted in
    /// [`StackStats::time_wait_evicted`](super::StackStats::time_wait_evicted)).
    pub(super) fn time_wait_insert(&mut self, key: FlowKey, record: TimeWait) {
        let at = record.expires(self.epoch);
        let evicted = self.time_wait.insert(key, record, at, self.config.max_time_wait);
        self.stats.time_wait_evicted += evicted as u64;
    }
}

#[cfg(test)]
mod tests;
