//! Timers: [`Stack::poll_timeout`] and [`Stack::handle_timeout`] over the connections' timer heap,
//! TIME-WAIT expiry, ARP and Neighbor Discovery retries and fragment expiry.

use std::cmp::Reverse;
use std::time::Instant;

use super::Stack;
use crate::wire::{ArpOperation, EthernetAddress};

/// Timer-heap entries allowed beyond two per connection before the heap is rebuilt from the
/// live connections. Short connections leave stale entries behind (a reclaimed connection's,
/// a deadline moved later); a small slack keeps the heap small, so that rebuilding (a pass over
/// the connection slots, cheap when they are few) drops them in bulk where popping them one by
/// one as they come due would cost a sift-down each: at 1024 a transaction paid about 1,400
/// instructions of heap pops under callgrind.
const STALE_SLACK: usize = 64;

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
            self.time_wait.next_expiry(),
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
        self.time_wait.expire(now);
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
        if self.timers.len() > 2 * self.slots.len() + STALE_SLACK {
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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Instant;

    use netchannel::dev::PacketBatch;
    use netchannel::pool::{HugePages, Pool};

    use super::STALE_SLACK;
    use crate::stack::{Config, Stack};
    use crate::wire::{EthernetAddress, Ipv4Cidr};

    #[test]
    fn short_connections_leave_no_pile_of_stale_timer_entries() {
        let pool = Pool::builder(256).hugepages(HugePages::Never).build().unwrap();
        let cache = pool.cache();
        let ip = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24).unwrap();
        let now = Instant::now();
        let mut stack = Stack::new(Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]), ip), now);
        let mut batch = PacketBatch::with_capacity(64);
        for i in 0..500 {
            // Each connection arms its SYN's retransmission timer, then goes: its heap entry is
            // stale from then on.
            let s = stack.connect((Ipv4Addr::new(10, 0, 0, 2), 80)).unwrap();
            stack.transmit(now, &cache, &mut batch);
            batch.clear();
            stack.abort(s).unwrap();
            stack.transmit(now, &cache, &mut batch);
            batch.clear();
            // At most one connection at a time (when its timer was armed).
            let bound = 2 + STALE_SLACK;
            assert!(stack.timers.len() <= bound, "{} entries after {i} connections", stack.timers.len());
        }
        assert_eq!(stack.slots.len(), 0, "every connection was reclaimed");
    }
}
