//! Timers: [`Stack::poll_timeout`] and [`Stack::handle_timeout`] over the connections' timer heap,
//! TIME-WAIT expiry, ARP and Neighbor Discovery retries and fragment expiry.

use std::cmp::Reverse;
use std::time::Instant;

use super::Stack;
use crate::wire::{ArpOperation, EthernetAddress};

impl Stack {
    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) has work (`now`
    /// itself when frames wait for [`transmit`](Self::transmit)).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.frames.is_empty() || !self.ready.is_empty() {
            return Some(self.now);
        }
        [
            self.timers.peek().map(|Reverse((t, _, _))| *t),
            self.time_wait_order.front().map(|&(t, _)| t),
            self.arp.next_deadline(),
            self.reassembler.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .chain(
            self.v6
                .as_ref()
                .map_or([None, None], |v6| [v6.ndp.next_deadline(), v6.reassembler.next_deadline()])
                .into_iter()
                .flatten(),
        )
        .min()
    }

    /// Runs the timers due at `now`: connection timers, ARP and neighbour solicitation retries,
    /// fragment expiry.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
        let now = self.now;
        while let Some(&Reverse((at, index, generation))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(e) = self.slots.get_checked_mut(index, generation) else { continue };
            if e.timer_at != Some(at) {
                continue;
            }
            e.timer_at = None;
            if e.conn.poll_timeout().is_some_and(|t| t <= now) {
                e.conn.handle_timeout(now);
            }
            self.settle(index);
            self.mark_ready(index);
        }
        while let Some(&(at, key)) = self.time_wait_order.front() {
            if at > now {
                break;
            }
            self.time_wait_order.pop_front();
            if self.time_wait_live(at, key) {
                self.time_wait.remove(&key);
            }
        }
        self.time_wait_trim();
        let mut requests = Vec::new();
        self.stats.arp_dropped += u64::try_from(self.arp.poll(now, &mut requests)).unwrap_or(u64::MAX);
        for ip in requests {
            self.queue_arp(ArpOperation::Request, EthernetAddress::BROADCAST, EthernetAddress([0; 6]), ip);
        }
        if !self.reassembler.is_empty() {
            self.reassembler.expire(now);
        }
        if let Some(v6) = self.v6.as_mut() {
            let mut solicit = Vec::new();
            let dropped = v6.ndp.poll(now, &mut solicit);
            if !v6.reassembler.is_empty() {
                v6.reassembler.expire(now);
            }
            self.stats.ndp_dropped += u64::try_from(dropped).unwrap_or(u64::MAX);
            for target in solicit {
                self.send_solicit(target, None);
            }
        }
    }

    pub(super) fn arm_timer(&mut self, index: u32) {
        let Some((generation, e)) = self.slots.get_mut_with_generation(index) else { return };
        let Some(t) = e.conn.poll_timeout() else { return };
        if e.timer_at.is_none_or(|cur| t < cur) {
            e.timer_at = Some(t);
            self.timers.push(Reverse((t, index, generation)));
        }
        if self.timers.len() > 2 * self.slots.len() + 1024 {
            self.rebuild_timers();
        }
    }

    fn rebuild_timers(&mut self) {
        self.timers.clear();
        for (i, generation, e) in self.slots.iter_mut() {
            e.timer_at = e.conn.poll_timeout();
            if let (Some(t), Ok(i)) = (e.timer_at, u32::try_from(i)) {
                self.timers.push(Reverse((t, i, generation)));
            }
        }
    }
}
