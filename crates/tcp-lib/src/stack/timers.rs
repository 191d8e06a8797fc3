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
    #[inline]
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
        // Every poll comes here, and nearly always nothing is due: the check is inlined, the
        // work is not (a poll used to pay the whole function's entry and exit, and its code's
        // cache lines, about 75 instructions, for nothing).
        if !self.timers_due() {
            return;
        }
        self.run_timers();
    }

    /// Whether a timer may be due at `self.now`: a connection's, a TIME-WAIT record's, or any
    /// while an address is being resolved or fragments are being reassembled.
    #[inline]
    fn timers_due(&self) -> bool {
        let now = self.now;
        self.timers.peek().is_some_and(|Reverse((t, _, _))| *t <= now)
            || self.time_wait.next_expiry().is_some_and(|t| t <= now)
            || !self.arp.idle()
            || !self.reassembler.is_empty()
            || self.v6.as_ref().is_some_and(|v6| !v6.ndp.idle() || !v6.reassembler.is_empty())
    }

    /// [`handle_timeout`](Self::handle_timeout)'s work.
    #[inline(never)]
    fn run_timers(&mut self) {
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
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::time::{Duration, Instant};

    use netchannel::dev::PacketBatch;
    use netchannel::pool::{HugePages, Pool};

    use super::STALE_SLACK;
    use crate::stack::{Config, Ipv6Config, Stack};
    use crate::wire::{EthernetAddress, Ipv4Cidr, Ipv6Cidr};

    /// An Ethernet frame from 02:..:02 to the stack's MAC carrying `ethertype` and `payload`.
    fn frame(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// The first 8 bytes of a UDP datagram from 10.0.0.2, more fragments to follow.
    fn ipv4_first_fragment() -> Vec<u8> {
        let mut ip = vec![0x45, 0, 0, 28, 0, 7, 0x20, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1];
        let sum = ip.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum::<u32>();
        let folded = (sum & 0xffff) + (sum >> 16);
        let checksum = !u16::try_from((folded & 0xffff) + (folded >> 16)).unwrap();
        ip[10..12].copy_from_slice(&checksum.to_be_bytes());
        ip.extend_from_slice(&[0, 9, 0, 9, 0, 16, 0, 0]);
        frame(0x0800, &ip)
    }

    /// The first 8 bytes of a UDP datagram from fd00::2 to fd00::1, more fragments to follow.
    fn ipv6_first_fragment() -> Vec<u8> {
        let mut ip = vec![0x60, 0, 0, 0, 0, 16, 44, 64];
        ip.extend_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).octets());
        ip.extend_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).octets());
        // Fragment header: UDP next, offset 0 with M set, identification 7.
        ip.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 7]);
        ip.extend_from_slice(&[0, 9, 0, 9, 0, 16, 0, 0]);
        frame(0x86dd, &ip)
    }

    fn dual_stack(now: Instant) -> Stack {
        let ip = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24).unwrap();
        let mut config = Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]), ip);
        let address = Ipv6Cidr::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1), 64).unwrap();
        config.ipv6 = Some(Ipv6Config { address: Some(address), ..Ipv6Config::default() });
        config.gratuitous_arp = false;
        Stack::new(config, now)
    }

    #[test]
    fn handle_timeout_expires_fragments_of_both_families() {
        let now = Instant::now();
        for v6 in [false, true] {
            let mut stack = dual_stack(now);
            stack.receive(now, &if v6 { ipv6_first_fragment() } else { ipv4_first_fragment() });
            let held = |s: &Stack| {
                if v6 { !s.v6.as_ref().unwrap().reassembler.is_empty() } else { !s.reassembler.is_empty() }
            };
            assert!(held(&stack), "the fragment waits for the rest (IPv6: {v6})");
            stack.handle_timeout(now + Duration::from_secs(20));
            assert!(held(&stack), "before the reassembly timeout");
            stack.handle_timeout(now + Duration::from_secs(61));
            assert!(!held(&stack), "dropped after the reassembly timeout (IPv6: {v6})");
        }
    }

    #[test]
    fn handle_timeout_retries_neighbour_solicitations_then_gives_up() {
        let pool = Pool::builder(64).hugepages(HugePages::Never).build().unwrap();
        let cache = pool.cache();
        let mut now = Instant::now();
        let mut stack = dual_stack(now);
        let mut batch = PacketBatch::with_capacity(64);
        let ghost = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 99);
        // A ping: no connection timer of its own that would run the others anyway.
        stack.ping(ghost, 1, 1, b"x").unwrap();
        let mut frames = 0;
        for _ in 0..100 {
            stack.handle_timeout(now);
            frames += stack.transmit(now, &cache, &mut batch);
            batch.clear();
            now += Duration::from_millis(100);
        }
        assert!(frames >= 3, "solicitations repeated: {frames} frames");
        assert_eq!(stack.stats().ndp_dropped, 1, "the waiting ping dropped at last");
        assert!(stack.v6.as_ref().unwrap().ndp.idle());
    }

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
