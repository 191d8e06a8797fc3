//! The TIME-WAIT table: released connections in TIME-WAIT as compact records (the record itself
//! is [`TimeWait`]), keyed by 4-tuple, with an expiry-ordered queue and a bound.

use std::time::Instant;

use super::Stack;
use super::flows::FlowKey;
use crate::tcp::TimeWait;

impl Stack {
    /// Puts a record in the TIME-WAIT table, evicting the records that expire first beyond
    /// [`Config::max_time_wait`] (dropped without a segment, as Linux does when
    /// `tcp_max_tw_buckets` overflows).
    pub(super) fn time_wait_insert(&mut self, key: FlowKey, record: TimeWait) {
        let at = record.expires(self.epoch);
        self.time_wait.insert(key, record);
        self.time_wait_queue(at, key);
        while self.time_wait.len() > self.config.max_time_wait {
            let Some((at, key)) = self.time_wait_order.pop_front() else { break };
            if self.time_wait_expire(at, key) {
                self.stats.time_wait_evicted += 1;
            }
        }
        self.time_wait_trim();
    }

    /// Drops the record of the order entry `(at, key)` just taken off the queue if the entry is
    /// its record's, in one table lookup; whether it was.
    pub(super) fn time_wait_expire(&mut self, at: Instant, key: FlowKey) -> bool {
        let epoch = self.epoch;
        self.time_wait.remove_if(key, |r| r.expires(epoch) == at)
    }

    /// Whether the order entry `(at, key)` is its record's (not stale).
    pub(super) fn time_wait_live(&self, at: Instant, key: FlowKey) -> bool {
        self.time_wait.get(&key).is_some_and(|r| r.expires(self.epoch) == at)
    }

    /// Queues the record of `key` expiring `at` in expiry order; drops the stale entries once
    /// they outnumber the records (a peer that keeps restarting 2·MSL cannot grow the queue).
    pub(super) fn time_wait_queue(&mut self, at: Instant, key: FlowKey) {
        // Deadlines are `now + 2·MSL` on a clock that does not go back: nearly always the
        // latest, appended without a search (a binary search over thousands of entries missed
        // the cache at every probe).
        if self.time_wait_order.back().is_none_or(|&(t, _)| t <= at) {
            self.time_wait_order.push_back((at, key));
        } else {
            let i = self.time_wait_order.partition_point(|&(t, _)| t <= at);
            self.time_wait_order.insert(i, (at, key));
        }
        if self.time_wait_order.len() > 2 * self.time_wait.len() + 1024 {
            let (epoch, table) = (self.epoch, &self.time_wait);
            self.time_wait_order.retain(|&(t, k)| table.get(&k).is_some_and(|r| r.expires(epoch) == t));
        }
    }

    /// Drops stale entries at the front of the expiry order, so that its front is the next
    /// expiry.
    pub(super) fn time_wait_trim(&mut self) {
        while let Some(&(at, key)) = self.time_wait_order.front() {
            if self.time_wait_live(at, key) {
                break;
            }
            self.time_wait_order.pop_front();
        }
    }
}
