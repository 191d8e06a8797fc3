//! The accept queue under each policy, single- and multi-threaded: the rules of `policy` as the
//! concurrent queue applies them, blocking and waking, retirement, closing, migration and counters.
#![cfg(not(loom))]

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use accept_affinity::{AcceptError, AcceptQueue, AffinityConfig, ConfigError, EnqueueError, Policy};
use netchannel::signature::FlowGroup;
use netchannel::steering::{FlowSteering, SoftwareSteering};

const G: FlowGroup = FlowGroup(0);

fn affinity(cfg: AffinityConfig) -> Policy {
    Policy::Affinity(cfg)
}

/// Affinity where any queued connection makes its core busy, for good (0% low-water mark).
fn eager() -> Policy {
    affinity(AffinityConfig { busy_high_percent: 0, busy_low_percent: 0, ..AffinityConfig::default() })
}

#[test]
fn config_errors() {
    assert_eq!(AcceptQueue::<u32>::new(0, 8, Policy::Fine).unwrap_err(), ConfigError::NoCores);
    assert_eq!(AcceptQueue::<u32>::new(2, 0, Policy::Fine).unwrap_err(), ConfigError::ZeroBacklog);
    assert_eq!(
        AcceptQueue::<u32>::new(513, 8, Policy::Fine).unwrap_err(),
        ConfigError::TooManyCores { cores: 513, max: 512 }
    );
    let bad = affinity(AffinityConfig { busy_low_percent: 90, ..AffinityConfig::default() });
    assert!(matches!(AcceptQueue::<u32>::new(2, 8, bad).unwrap_err(), ConfigError::BadThresholds { .. }));
    let q = AcceptQueue::<u32>::new(3, 10, Policy::affinity()).unwrap();
    assert_eq!(q.per_core_max(), 3);
    assert_eq!(q.enqueue(3, G, 1), Err(EnqueueError::NoSuchCore(1)));
    assert_eq!(q.try_accept(3).unwrap_err(), AcceptError::NoSuchCore);
}

/// Stock: one FIFO for all cores, bounded by the whole backlog.
#[test]
fn stock_is_one_fifo() {
    let q = AcceptQueue::new(3, 4, Policy::Stock).unwrap();
    for (i, core) in [2, 0, 1, 2].into_iter().enumerate() {
        assert_eq!(q.enqueue(core, G, i), Ok(0));
    }
    assert_eq!(q.enqueue(0, G, 99), Err(EnqueueError::Full(99)));
    let got: Vec<_> = [1, 1, 0, 2].into_iter().map(|c| q.try_accept(c).unwrap()).collect();
    assert_eq!(got.iter().map(|a| a.conn).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(got.iter().map(|a| a.remote).collect::<Vec<_>>(), [true, true, true, false]);
    assert_eq!(q.try_accept(0).unwrap_err(), AcceptError::WouldBlock);
    let s = q.stats();
    assert_eq!((s.enqueued(), s.rejected(), s.accepted(), s.queued()), (4, 1, 4, 0));
}

/// Fine: per-core queues with per-core bounds; an accept scans round-robin from one past its last.
#[test]
fn fine_round_robin_dequeue() {
    let q = AcceptQueue::new(3, 9, Policy::Fine).unwrap();
    for core in 0..3 {
        for k in 0..3 {
            q.enqueue(core, G, core * 10 + k).unwrap();
        }
    }
    assert_eq!(q.enqueue(1, G, 99), Err(EnqueueError::Full(99)));
    let order: Vec<_> = (0..9).map(|_| q.try_accept(1).unwrap().conn).collect();
    assert_eq!(order, [10, 20, 0, 11, 21, 1, 12, 22, 2]);
}

/// Affinity: a core takes its own connections, and leaves a non-busy core's connections alone.
#[test]
fn affinity_local_only_from_non_busy() {
    let q = AcceptQueue::new(2, 200, Policy::affinity()).unwrap();
    for i in 0..10 {
        q.enqueue(1, G, i).unwrap();
    }
    assert!(!q.is_busy(1));
    assert_eq!(q.try_accept(0).unwrap_err(), AcceptError::WouldBlock);
    let a = q.try_accept(1).unwrap();
    assert_eq!((a.conn, a.remote, a.queue), (0, false, 1));
}

/// A non-busy core with local connections takes 5 local, then 1 from a busy core.
#[test]
fn affinity_five_to_one_through_the_queue() {
    let q = AcceptQueue::new(2, 200, Policy::affinity()).unwrap();
    for i in 0..50 {
        q.enqueue(0, G, i).unwrap();
    }
    for i in 0..80 {
        q.enqueue(1, G, 1000 + i).unwrap();
    }
    assert!(!q.is_busy(0) && q.is_busy(1));
    let pattern: String = (0..18).map(|_| if q.try_accept(0).unwrap().remote { 'R' } else { 'L' }).collect();
    assert_eq!(pattern, "LLLLLRLLLLLRLLLLLR");
    let s = q.stats();
    assert_eq!((s.cores[0].local_accepts, s.cores[0].remote_accepts, s.cores[1].stolen_from), (15, 3, 3));
}

/// A busy core never steals, even from another busy core, even with an empty local queue.
#[test]
fn affinity_busy_core_never_steals() {
    let q = AcceptQueue::new(2, 200, Policy::affinity()).unwrap();
    for i in 0..80 {
        q.enqueue(0, G, i).unwrap();
        q.enqueue(1, G, 1000 + i).unwrap();
    }
    assert!(q.is_busy(0) && q.is_busy(1));
    for i in 0..80 {
        let a = q.try_accept(0).unwrap();
        assert_eq!((a.conn, a.remote), (i, false));
    }
    // Still busy (the average only moves on enqueue), local queue empty: nothing to take.
    assert!(q.is_busy(0));
    assert_eq!(q.try_accept(0).unwrap_err(), AcceptError::WouldBlock);
    assert_eq!(q.queue_len(1), 80);
}

/// A busy core recovers once the running average of its queue falls below 10%.
#[test]
fn affinity_busy_recovers_through_ewma() {
    let q = AcceptQueue::new(1, 100, Policy::affinity()).unwrap();
    for i in 0..80 {
        q.enqueue(0, G, i).unwrap();
    }
    assert!(q.is_busy(0));
    while q.try_accept(0).is_ok() {}
    let mut enqueues = 0;
    while q.is_busy(0) {
        q.enqueue(0, G, 0).unwrap();
        q.try_accept(0).unwrap();
        enqueues += 1;
        assert!(enqueues < 100);
    }
    // avg from ~58 down below 10 at 15/16 per enqueue of length 1.
    assert!((20..40).contains(&enqueues), "{enqueues}");
}

/// A full queue hands the connection back and counts it.
#[test]
fn full_queue_rejects_and_counts() {
    for policy in [Policy::Stock, Policy::Fine, Policy::affinity()] {
        let q = AcceptQueue::new(2, 4, policy.clone()).unwrap();
        let cap = if policy == Policy::Stock { 4 } else { 2 };
        for i in 0..cap {
            q.enqueue(1, G, i).unwrap();
        }
        match q.enqueue(1, G, 7) {
            Err(EnqueueError::Full(c)) => assert_eq!(c, 7),
            other => panic!("{}: {other:?}", policy.name()),
        }
        assert_eq!(q.stats().rejected(), 1);
    }
}

/// Retiring a core moves its connections, in order, to the live core with the shortest queue; later
/// enqueues naming it go there too; nothing is lost.
#[test]
fn retire_hands_connections_over_in_order() {
    for policy in [Policy::Fine, Policy::affinity()] {
        let q = AcceptQueue::new(3, 30, policy.clone()).unwrap();
        for i in 0..5 {
            q.enqueue(0, FlowGroup(i), u32::from(i)).unwrap();
        }
        q.enqueue(1, G, 100).unwrap();
        let r = q.retire(0).unwrap();
        assert_eq!((r.moved, r.heir), (5, Some(2)), "{}", policy.name());
        assert!(r.orphans.is_empty());
        assert_eq!(q.try_accept(0).unwrap_err(), AcceptError::Retired);
        assert_eq!(q.retire(0).unwrap_err(), AcceptError::Retired);
        assert_eq!(q.enqueue(0, G, 5), Ok(2));
        assert_eq!(q.try_accept(1).unwrap().conn, 100);
        let got: Vec<_> = (0..6).map(|_| q.try_accept(2).unwrap()).collect();
        assert_eq!(got.iter().map(|a| a.conn).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
        assert!(got.iter().all(|a| a.arrived_on == 0 && a.remote && a.queue == 2));
        assert_eq!(got[3].group, FlowGroup(3));
        let s = q.stats();
        assert_eq!((s.cores[0].handed_out, s.cores[2].handed_in, s.cores[0].retired), (5, 5, true));
        // The last cores retire: 2's connections go to 1, then 1's come back as orphans.
        q.enqueue(2, G, 200).unwrap();
        assert_eq!(q.retire(2).unwrap().heir, Some(1));
        let r = q.retire(1).unwrap();
        assert_eq!(r.heir, None);
        assert_eq!(r.orphans.iter().map(|o| (o.0, o.2)).collect::<Vec<_>>(), [(2, 200)]);
        assert_eq!(q.enqueue(1, G, 9), Err(EnqueueError::Closed(9)));
        let s = q.stats();
        assert_eq!(s.enqueued(), s.accepted() + s.taken + s.queued());
    }
}

/// Under Stock nothing moves on retirement (the queue is shared) until the last core leaves.
#[test]
fn retire_stock() {
    let q = AcceptQueue::new(2, 4, Policy::Stock).unwrap();
    q.enqueue(0, G, 1).unwrap();
    assert_eq!(q.retire(0).unwrap().heir, Some(1));
    q.enqueue(0, G, 2).unwrap();
    assert_eq!(q.try_accept(1).unwrap().conn, 1);
    let r = q.retire(1).unwrap();
    assert_eq!(r.orphans.iter().map(|o| o.2).collect::<Vec<_>>(), [2]);
    assert_eq!(q.enqueue(0, G, 3), Err(EnqueueError::Closed(3)));
}

/// A sleeping acceptor on a core that retires returns `Retired`.
#[test]
fn retire_wakes_sleepers() {
    let q = Arc::new(AcceptQueue::<u32>::new(2, 4, Policy::affinity()).unwrap());
    let q2 = Arc::clone(&q);
    let t = thread::spawn(move || q2.accept(0));
    thread::sleep(Duration::from_millis(50));
    q.retire(0).unwrap();
    assert_eq!(t.join().unwrap().unwrap_err(), AcceptError::Retired);
}

/// Blocking accept: woken by a local enqueue; under Affinity by a busy core's enqueue (steal), not by a
/// non-busy core's.
#[test]
fn blocking_accept_wakes() {
    let q = Arc::new(AcceptQueue::new(2, 8, eager()).unwrap());
    let q2 = Arc::clone(&q);
    let t = thread::spawn(move || q2.accept(0));
    thread::sleep(Duration::from_millis(30));
    q.enqueue(0, G, 1u32).unwrap();
    assert_eq!(t.join().unwrap().unwrap().conn, 1);

    // A fresh queue: with a 0% low-water mark core 0 stays busy once it had a connection.
    let q = Arc::new(AcceptQueue::new(2, 8, eager()).unwrap());
    let q2 = Arc::clone(&q);
    let t = thread::spawn(move || q2.accept(0));
    thread::sleep(Duration::from_millis(30));
    q.enqueue(1, G, 2).unwrap(); // core 1 becomes busy: core 0 steals
    let a = t.join().unwrap().unwrap();
    assert_eq!((a.conn, a.remote), (2, true));

    let q = Arc::new(AcceptQueue::new(2, 200, Policy::affinity()).unwrap());
    q.enqueue(1, G, 3u32).unwrap(); // not busy
    let q2 = Arc::clone(&q);
    let t = thread::spawn(move || q2.accept_timeout(0, Duration::from_millis(100)));
    thread::sleep(Duration::from_millis(20));
    q.enqueue(1, G, 4).unwrap();
    assert_eq!(t.join().unwrap().unwrap_err(), AcceptError::WouldBlock);
    assert_eq!(q.queue_len(1), 2);
}

/// Fine and Stock wake an acceptor on any core.
#[test]
fn blocking_accept_wakes_any_core_under_fine_and_stock() {
    for policy in [Policy::Fine, Policy::Stock] {
        let q = Arc::new(AcceptQueue::new(2, 8, policy).unwrap());
        let q2 = Arc::clone(&q);
        let t = thread::spawn(move || q2.accept(0));
        thread::sleep(Duration::from_millis(30));
        q.enqueue(1, G, 5u32).unwrap();
        assert_eq!(t.join().unwrap().unwrap().conn, 5);
    }
}

/// Close: enqueues are refused, accepts drain every queue whatever the policy, then `Closed`; sleepers
/// wake.
#[test]
fn close_drains_then_closed() {
    let q = Arc::new(AcceptQueue::new(2, 200, Policy::affinity()).unwrap());
    q.enqueue(1, G, 1u32).unwrap();
    let q2 = Arc::clone(&q);
    let sleeper = thread::spawn(move || q2.accept(0));
    thread::sleep(Duration::from_millis(30));
    q.close();
    assert!(q.is_closed());
    // The sleeper drains core 1's connection (or finds it gone and reports Closed).
    let first = sleeper.join().unwrap();
    let rest = q.try_accept(0);
    let mut got: Vec<u32> = [first, rest].into_iter().filter_map(Result::ok).map(|a| a.conn).collect();
    got.sort_unstable();
    assert_eq!(got, [1]);
    assert_eq!(q.try_accept(1).unwrap_err(), AcceptError::Closed);
    assert_eq!(q.accept(1).unwrap_err(), AcceptError::Closed);
    assert_eq!(q.enqueue(0, G, 2), Err(EnqueueError::Closed(2)));
}

#[test]
fn take_all_empties_queues() {
    let q = AcceptQueue::new(2, 8, Policy::Fine).unwrap();
    q.enqueue(0, G, 1).unwrap();
    q.enqueue(1, FlowGroup(3), 2).unwrap();
    assert_eq!(q.take_all(), [(0, G, 1), (1, FlowGroup(3), 2)]);
    assert_eq!(q.stats().taken, 2);
    assert_eq!(q.queue_len(0) + q.queue_len(1), 0);
}

/// The migration round through the queue: the stealer takes the stolen group from its top victim; a busy
/// stealer takes nothing; nothing at all under Fine.
#[test]
fn balance_migrates_stolen_groups() {
    let q = AcceptQueue::new(3, 12, eager()).unwrap();
    let mut steering = SoftwareSteering::new(3);
    // Group 5 is on queue 2, group 8 on queue 2, group 4 on queue 1.
    q.enqueue(2, FlowGroup(5), 1u32).unwrap();
    q.enqueue(2, FlowGroup(5), 2).unwrap();
    q.enqueue(1, FlowGroup(4), 3).unwrap();
    // Core 0 steals both of 2's (victims from 1: core 1 first, then 2 ...).
    let mut stolen = Vec::new();
    for _ in 0..3 {
        let a = q.try_accept(0).unwrap();
        stolen.push((a.queue, a.group));
    }
    assert_eq!(stolen, [(1, FlowGroup(4)), (2, FlowGroup(5)), (2, FlowGroup(5))]);
    assert!(q.balance_at(Duration::from_millis(99), &mut steering).is_none());
    let r = q.balance_at(Duration::from_millis(100), &mut steering).unwrap();
    assert_eq!(r.migrations.len(), 1);
    assert_eq!((r.migrations[0].group, r.migrations[0].from, r.migrations[0].to), (FlowGroup(5), 2, 0));
    assert_eq!(steering.queue_of(FlowGroup(5)), 0);
    assert_eq!(steering.queue_of(FlowGroup(4)), 1);
    let s = q.stats();
    assert_eq!((s.migrations(), s.migration_rounds), (1, 1));
    // Logs were cleared: the next round moves nothing.
    assert!(q.balance_at(Duration::from_millis(200), &mut steering).unwrap().migrations.is_empty());

    // A busy stealer... cannot steal, so make core 0 busy with its own and check it takes no group even
    // with an old log: steal first, then become busy, then run the round.
    let q = AcceptQueue::new(2, 8, eager()).unwrap();
    q.enqueue(1, FlowGroup(1), 1u32).unwrap();
    assert!(q.try_accept(0).unwrap().remote);
    q.enqueue(0, FlowGroup(0), 2).unwrap();
    assert!(q.is_busy(0));
    let r = q.balance_at(Duration::from_secs(1), &mut steering).unwrap();
    assert!(r.migrations.is_empty());

    let q = AcceptQueue::<u32>::new(2, 8, Policy::Fine).unwrap();
    assert!(q.balance_at(Duration::from_secs(1), &mut steering).is_none());
}
