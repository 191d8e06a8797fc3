//! The neighbour cache, one per address family: ARP's (RFC 826) for IPv4 and Neighbor
//! Discovery's (RFC 4861 §7.3) for IPv6, each with a bounded queue of packets waiting for each
//! unresolved next hop. The cache keeps no reachability states (RFC 4861's STALE, DELAY,
//! PROBE): an entry is used until it expires and is then resolved again.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
#[cfg(test)]
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::hash::TableHash;
use crate::wire::EthernetAddress;

/// Limits and timers of the neighbour caches: ARP's, and Neighbor Discovery's when IPv6 is on
/// (each cache has these limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpConfig {
    /// Most resolved entries; when full, the entry closest to expiry is evicted.
    pub max_entries: usize,
    /// How long a resolved entry is used before it is resolved again.
    pub entry_ttl: Duration,
    /// Most next hops being resolved at once; packets for another one are dropped.
    pub max_pending_hosts: usize,
    /// Most packets queued per unresolved next hop; more are dropped.
    pub max_pending_packets: usize,
    /// Time between requests (ARP requests, neighbour solicitations) for an unresolved next hop.
    pub retry_interval: Duration,
    /// Requests sent before the next hop is given up and its packets dropped.
    pub max_requests: u32,
}

impl Default for ArpConfig {
    fn default() -> Self {
        Self {
            max_entries: 1024,
            entry_ttl: Duration::from_secs(60),
            max_pending_hosts: 64,
            max_pending_packets: 16,
            retry_interval: Duration::from_secs(1),
            max_requests: 3,
        }
    }
}

#[derive(Debug)]
struct Pending {
    packets: VecDeque<Vec<u8>>,
    requests: u32,
    next_request: Instant,
}

/// What [`NeighborCache::enqueue`] did with a packet.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Enqueued {
    /// Queued, and the next hop is new: send a request now.
    RequestNow,
    /// Queued behind a request already sent.
    Queued,
    /// No room: dropped.
    Dropped,
}

/// The cache of one address family, keyed by its address type `A`.
#[derive(Debug)]
pub(crate) struct NeighborCache<A> {
    config: ArpConfig,
    entries: HashMap<A, (EthernetAddress, Instant), TableHash>,
    pending: HashMap<A, Pending, TableHash>,
    /// The entry found last, kept beside the table: every segment of a connection looks up the
    /// same next hop, and comparing one address is cheaper than hashing it. Always a copy of an
    /// entry of `entries` (updated or cleared wherever that entry changes).
    last: Option<(A, EthernetAddress, Instant)>,
}

impl<A: Copy + Eq + Hash> NeighborCache<A> {
    pub(crate) fn new(config: ArpConfig, hash: TableHash) -> Self {
        Self { config, entries: HashMap::with_hasher(hash), pending: HashMap::with_hasher(hash), last: None }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The hardware address of `ip`, if resolved and fresh. The check of the entry found last is
    /// inlined into the callers (every segment of a connection asks it); the table is not.
    #[inline]
    pub(crate) fn lookup(&mut self, ip: A, now: Instant) -> Option<EthernetAddress> {
        if let Some((last, mac, expires)) = self.last
            && last == ip
            && expires > now
        {
            return Some(mac);
        }
        self.lookup_table(ip, now)
    }

    #[inline(never)]
    fn lookup_table(&mut self, ip: A, now: Instant) -> Option<EthernetAddress> {
        match self.entries.get(&ip) {
            Some(&(mac, expires)) if expires > now => {
                self.last = Some((ip, mac, expires));
                Some(mac)
            }
            Some(_) => {
                self.entries.remove(&ip);
                self.forget_last(ip);
                None
            }
            None => None,
        }
    }

    fn forget_last(&mut self, ip: A) {
        if self.last.is_some_and(|(last, _, _)| last == ip) {
            self.last = None;
        }
    }

    /// Records `ip -> mac`; returns the packets that waited for it, in order.
    pub(crate) fn insert(&mut self, ip: A, mac: EthernetAddress, now: Instant) -> VecDeque<Vec<u8>> {
        if !self.entries.contains_key(&ip) && self.entries.len() >= self.config.max_entries {
            let victim = self.entries.iter().min_by_key(|(_, (_, exp))| *exp).map(|(ip, _)| *ip);
            if let Some(victim) = victim {
                self.entries.remove(&victim);
                self.forget_last(victim);
            }
        }
        self.forget_last(ip);
        if self.config.max_entries > 0 {
            self.entries.insert(ip, (mac, now + self.config.entry_ttl));
        }
        self.pending.remove(&ip).map(|p| p.packets).unwrap_or_default()
    }

    /// Whether `ip` is already in the cache (RFC 826 updates only known entries from requests not
    /// addressed to us).
    pub(crate) fn contains(&self, ip: A) -> bool {
        self.entries.contains_key(&ip)
    }

    /// Whether `ip` is in the cache or being resolved (RFC 4861 §7.2.5: an advertisement updates
    /// only such entries).
    pub(crate) fn knows(&self, ip: A) -> bool {
        self.entries.contains_key(&ip) || self.pending.contains_key(&ip)
    }

    /// Queues a packet for the unresolved next hop `ip`.
    pub(crate) fn enqueue(&mut self, ip: A, packet: Vec<u8>, now: Instant) -> Enqueued {
        let max = self.config.max_pending_packets;
        if let Some(p) = self.pending.get_mut(&ip) {
            if p.packets.len() >= max {
                return Enqueued::Dropped;
            }
            p.packets.push_back(packet);
            return Enqueued::Queued;
        }
        if self.pending.len() >= self.config.max_pending_hosts || max == 0 {
            return Enqueued::Dropped;
        }
        let mut packets = VecDeque::with_capacity(1);
        packets.push_back(packet);
        self.pending
            .insert(ip, Pending { packets, requests: 1, next_request: now + self.config.retry_interval });
        Enqueued::RequestNow
    }

    /// Runs the retry timers: pushes the next hops to ask again onto `requests` and returns how
    /// many packets were dropped for next hops given up.
    pub(crate) fn poll(&mut self, now: Instant, requests: &mut Vec<A>) -> usize {
        // The common case, nothing being resolved: `retain` would still scan every bucket the
        // table ever grew to.
        if self.pending.is_empty() {
            return 0;
        }
        let mut dropped = 0;
        let (interval, max) = (self.config.retry_interval, self.config.max_requests);
        self.pending.retain(|ip, p| {
            if p.next_request > now {
                return true;
            }
            if p.requests >= max {
                dropped += p.packets.len();
                return false;
            }
            p.requests += 1;
            p.next_request = now + interval;
            requests.push(*ip);
            true
        });
        dropped
    }

    /// Whether no address is being resolved: [`poll`](Self::poll) has nothing to do.
    pub(crate) fn idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// The next retry instant.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.next_request).min()
    }

    /// Packets waiting for resolution, over all next hops.
    pub(crate) fn pending_packets(&self) -> usize {
        self.pending.values().map(|p| p.packets.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::hash::Key;
    use super::*;

    fn test_hash() -> TableHash {
        TableHash::new(&Key::from_seed(1))
    }

    #[test]
    fn pending_is_bounded_retried_and_expired() {
        let config = ArpConfig { max_pending_hosts: 2, max_pending_packets: 2, ..ArpConfig::default() };
        let mut arp = NeighborCache::<Ipv4Addr>::new(config, test_hash());
        let t0 = Instant::now();
        let (a, b, c) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 3), Ipv4Addr::new(10, 0, 0, 4));
        assert_eq!(arp.enqueue(a, vec![1], t0), Enqueued::RequestNow);
        assert_eq!(arp.enqueue(a, vec![2], t0), Enqueued::Queued);
        assert_eq!(arp.enqueue(a, vec![3], t0), Enqueued::Dropped);
        assert_eq!(arp.enqueue(b, vec![4], t0), Enqueued::RequestNow);
        assert_eq!(arp.enqueue(c, vec![5], t0), Enqueued::Dropped);
        assert_eq!(arp.pending_packets(), 3);
        let mut req = Vec::new();
        assert_eq!(arp.poll(t0, &mut req), 0);
        assert!(req.is_empty());
        assert_eq!(arp.next_deadline(), Some(t0 + Duration::from_secs(1)));
        let mac = EthernetAddress([2, 0, 0, 0, 0, 2]);
        assert_eq!(arp.insert(a, mac, t0), VecDeque::from([vec![1], vec![2]]));
        assert_eq!(arp.lookup(a, t0), Some(mac));
        assert_eq!(arp.lookup(a, t0 + Duration::from_secs(61)), None, "expired");
        for i in 1..=2 {
            assert_eq!(arp.poll(t0 + Duration::from_secs(i), &mut req), 0);
        }
        assert_eq!(req, vec![b, b]);
        assert_eq!(arp.poll(t0 + Duration::from_secs(3), &mut req), 1, "given up");
        assert_eq!(arp.pending_packets(), 0);
        assert_eq!(arp.next_deadline(), None);
    }

    #[test]
    fn entries_are_bounded() {
        let mut arp =
            NeighborCache::<Ipv4Addr>::new(ArpConfig { max_entries: 3, ..ArpConfig::default() }, test_hash());
        let t0 = Instant::now();
        for i in 0..10u8 {
            let _ = arp.insert(Ipv4Addr::new(10, 0, 0, i), EthernetAddress([2, 0, 0, 0, 0, i]), t0);
        }
        assert_eq!(arp.len(), 3);
        assert!(arp.contains(Ipv4Addr::new(10, 0, 0, 9)));
    }

    /// The last-hit copy never answers for an entry the table changed or dropped.
    #[test]
    fn the_last_hit_follows_the_table() {
        let mut arp =
            NeighborCache::<Ipv4Addr>::new(ArpConfig { max_entries: 2, ..ArpConfig::default() }, test_hash());
        let t0 = Instant::now();
        let (a, b, c) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 3));
        let mac = |i| EthernetAddress([2, 0, 0, 0, 0, i]);
        let _ = arp.insert(a, mac(1), t0);
        assert_eq!(arp.lookup(a, t0), Some(mac(1)));
        // Updated: the new address.
        let _ = arp.insert(a, mac(7), t0);
        assert_eq!(arp.lookup(a, t0), Some(mac(7)));
        // Evicted (the entry closest to expiry goes when the table is full): not found.
        let _ = arp.insert(b, mac(2), t0 + Duration::from_secs(1));
        let _ = arp.insert(c, mac(3), t0 + Duration::from_secs(2));
        assert!(!arp.contains(a));
        assert_eq!(arp.lookup(a, t0), None);
        // Expired: not found, from the copy either.
        assert_eq!(arp.lookup(c, t0), Some(mac(3)));
        assert_eq!(arp.lookup(c, t0 + Duration::from_secs(3600)), None);
        assert!(!arp.contains(c));
    }
}
