//! The TIME-WAIT table alone: eviction and expiry order, slot reuse, lookups, the queue's bound.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::TimeWaitTable;
use crate::stack::flows::FlowKey;
use crate::stack::hash::{Key, TableHash};
use crate::tcp::{TimeWait, TimeWaitParts};
use crate::wire::SeqNumber;

fn table() -> TimeWaitTable {
    TimeWaitTable::new(TableHash::new(&Key::from_seed(7)))
}

/// The IPv4 key of remote port `port`.
fn key(port: u16) -> FlowKey {
    FlowKey::new(
        SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 80)),
        SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), port)),
    )
}

fn key6(port: u16) -> FlowKey {
    FlowKey::new(
        SocketAddr::from((Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1), 80)),
        SocketAddr::from((Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2), port)),
    )
}

/// A record expiring at `at`, told apart by its RCV.NXT `tag`.
fn record(base: Instant, at: Instant, tag: u32) -> TimeWait {
    let parts = TimeWaitParts {
        expires: at,
        rcv_nxt: SeqNumber::new(tag),
        rcv_adv: SeqNumber::new(tag),
        rcv_wscale: 0,
        window: 0,
        snd_max: SeqNumber::new(0),
        snd_wl1: SeqNumber::new(0),
        snd_wscale: 0,
        max_snd_wnd: 0,
        ts_ok: false,
        ts_epoch: base,
        ts_offset: 0,
        ts_recent: 0,
        ts_recent_at: base,
        last_oow_ack: None,
        challenge_window: None,
    };
    TimeWait::new(&parts, base)
}

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn the_bound_evicts_the_earliest_expiry_and_the_new_record_takes_its_slot() {
    let base = Instant::now();
    let mut t = table();
    // Ports 1..=4 expire at 10, 20, 30, 40 s; port 5 is inserted last but expires first (an
    // application held it), so it is the first evicted.
    for p in 1..=4u16 {
        let at = base + secs(10 * u64::from(p));
        assert_eq!(t.insert(key(p), record(base, at, p.into()), at, 5), 0);
    }
    assert_eq!(t.insert(key(5), record(base, base + secs(5), 5), base + secs(5), 5), 0);
    assert_eq!(t.next_expiry(), Some(base + secs(5)), "sorted in, not appended");
    let slot5 = t.find(&key(5)).unwrap();
    // At the bound: each insert evicts exactly one record, the earliest to expire.
    let at = base + secs(50);
    assert_eq!(t.insert(key(6), record(base, at, 6), at, 5), 1);
    assert_eq!(t.find(&key(5)), None, "the earliest expiry went first");
    assert_eq!(t.find(&key(6)), Some(slot5), "and its slot holds the new record");
    assert_eq!(t.insert(key(7), record(base, at, 7), at, 5), 1);
    assert_eq!(t.find(&key(1)), None);
    for p in [2, 3, 4, 6, 7] {
        let slot = t.find(&key(p)).unwrap_or_else(|| panic!("port {p} kept"));
        let want = record(base, (base + secs(10 * u64::from(p))).min(at), p.into());
        assert_eq!(*t.record_mut(slot), want, "each key finds its own record");
    }
    assert_eq!(t.len(), 5);
    assert_eq!(t.slots.len(), 5, "no slot beyond the bound");
    assert_eq!(t.next_expiry(), Some(base + secs(20)));
    // A bound lowered below the table's size evicts down to it.
    assert_eq!(t.insert(key(8), record(base, at, 8), at, 2), 4);
    assert_eq!(t.len(), 2);
    assert!(t.contains(&key(7)) && t.contains(&key(8)));
    // A bound of zero keeps nothing: the new record counts as evicted.
    assert_eq!(t.insert(key(9), record(base, at, 9), at, 0), 3);
    assert_eq!((t.len(), t.next_expiry()), (0, None));
}

#[test]
fn a_restarted_record_leaves_after_the_others() {
    let base = Instant::now();
    let mut t = table();
    for p in 1..=3u16 {
        let at = base + secs(u64::from(p));
        t.insert(key(p), record(base, at, p.into()), at, 3);
    }
    // Port 1's 2·MSL restarts: its old entry at 1 s is stale, its record leaves at 10 s.
    let slot1 = t.find(&key(1)).unwrap();
    t.requeue(slot1, base + secs(10));
    assert_eq!(t.next_expiry(), Some(base + secs(2)), "the stale front entry was dropped");
    // Eviction takes port 2 (2 s), not port 1 by its stale entry.
    assert_eq!(t.insert(key(4), record(base, base + secs(4), 4), base + secs(4), 3), 1);
    assert!(t.contains(&key(1)) && !t.contains(&key(2)));
    // Expiry at 5 s drops ports 3 and 4 only; port 1 stays until 10 s.
    assert!(t.expire(base + secs(5)));
    assert_eq!(t.len(), 1);
    assert!(t.contains(&key(1)));
    assert_eq!(t.next_expiry(), Some(base + secs(10)));
    assert!(!t.expire(base + secs(9)), "nothing due");
    assert!(t.expire(base + secs(10)));
    assert_eq!((t.len(), t.next_expiry()), (0, None));
}

#[test]
fn a_removed_record_is_gone_and_its_entry_stale() {
    let base = Instant::now();
    let mut t = table();
    for p in 1..=3u16 {
        let at = base + secs(u64::from(p));
        t.insert(key(p), record(base, at, p.into()), at, 10);
    }
    t.remove(t.find(&key(1)).unwrap());
    t.remove(t.find(&key(2)).unwrap());
    assert_eq!(t.next_expiry(), Some(base + secs(3)), "the front is the next live expiry");
    // A new record takes the latest freed slot, and the stale entries of the old ones never
    // expire it.
    let at = base + secs(30);
    t.insert(key(4), record(base, at, 4), at, 10);
    assert!(!t.expire(base + secs(2)), "stale entries expire nothing");
    assert!(t.contains(&key(4)) && t.contains(&key(3)));
    assert_eq!(t.slots.len(), 3);
    // The same key again replaces its record (leaving later), and the old one's slot is free.
    let later = at + secs(5);
    t.insert(key(4), record(base, later, 44), later, 10);
    assert_eq!(t.len(), 2);
    let slot = t.find(&key(4)).unwrap();
    assert_eq!(*t.record_mut(slot), record(base, later, 44));
    assert!(t.expire(at), "port 3 left");
    assert!(t.contains(&key(4)), "the replaced record's entry did not take the new one");
    assert_eq!(t.slots.len(), 3);
    t.insert(key(5), record(base, later, 5), later, 10);
    assert_eq!(t.slots.len(), 3);
    t.insert(key(5), record(base, later, 55), later, 10);
    t.insert(key(6), record(base, later, 6), later, 10);
    assert_eq!((t.len(), t.slots.len()), (3, 3), "a replaced record's slot is taken again");
}

#[test]
fn families_key_apart() {
    let base = Instant::now();
    let mut t = table();
    let at = base + secs(1);
    t.insert(key(1), record(base, at, 1), at, 10);
    t.insert(key6(1), record(base, at, 2), at, 10);
    assert_eq!(t.len(), 2);
    let (a, b) = (t.find(&key(1)).unwrap(), t.find(&key6(1)).unwrap());
    assert_ne!(a, b);
    assert_eq!(*t.record_mut(b), record(base, at, 2));
    assert_eq!(t.find(&key6(2)), None);
    t.remove(a);
    assert!(!t.contains(&key(1)) && t.contains(&key6(1)));
}

#[test]
fn restarts_cannot_grow_the_queue() {
    let base = Instant::now();
    let mut t = table();
    // Port 0 expires first and stays: the restarted record's stale entries pile up behind it.
    let first = base + Duration::from_millis(1);
    t.insert(key(0), record(base, first, 0), first, 10);
    t.insert(key(1), record(base, first, 1), first, 10);
    let slot = t.find(&key(1)).unwrap();
    for i in 2..10_000u64 {
        t.requeue(slot, base + Duration::from_millis(i));
        assert!(t.order.len() <= 2 * t.len() + 1024 + 1, "{} entries after {i} restarts", t.order.len());
    }
    // The earlier entries are stale, dropped as they come up; the record leaves at its last.
    assert!(t.expire(base + Duration::from_millis(9_998)), "port 0 left");
    assert!(t.contains(&key(1)));
    assert!(t.expire(base + Duration::from_millis(9_999)));
    assert_eq!(t.len(), 0);
}

#[test]
fn after_an_expiry_the_next_expiry_is_a_live_record() {
    let base = Instant::now();
    let mut t = table();
    for p in 1..=3u16 {
        let at = base + secs(u64::from(p));
        t.insert(key(p), record(base, at, p.into()), at, 10);
    }
    // Port 2 restarts: its entry at 2 s is stale behind port 1's.
    t.requeue(t.find(&key(2)).unwrap(), base + secs(10));
    assert_eq!(t.next_expiry(), Some(base + secs(1)));
    assert!(t.expire(base + secs(1)));
    assert_eq!(t.next_expiry(), Some(base + secs(3)), "the stale entry at 2 s is not the next expiry");
}

#[test]
fn lookups_find_each_key_exactly_among_many() {
    let base = Instant::now();
    let mut t = table();
    let at = base + secs(1);
    // Enough keys that lookups of absent ones probe buckets that hold present ones.
    for p in 0..2_000u16 {
        t.insert(key(2 * p), record(base, at, p.into()), at, 4096);
    }
    for p in 0..2_000u16 {
        let slot = t.find(&key(2 * p)).unwrap_or_else(|| panic!("port {} present", 2 * p));
        assert_eq!(*t.record_mut(slot), record(base, at, p.into()));
        assert_eq!(t.find(&key(2 * p + 1)), None, "port {} absent", 2 * p + 1);
        assert_eq!(t.find(&key6(2 * p)), None, "the IPv6 twin absent");
    }
}
