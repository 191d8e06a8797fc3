//! loom models of the accept queue's waiting protocol: an acceptor registers as a sleeper, re-checks
//! every queue under its lock, then sleeps; an enqueue wakes a local sleeper first, else one on a core
//! that may take the connection. A lost wakeup shows up as a loom deadlock (the acceptor blocked forever
//! with the enqueuer finished).
//!
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=3 cargo test
//! --release -p accept-affinity --test loom_accept`.
//!
//! The models bite: skipping the locked re-check (sleeping right after registering) deadlocks
//! `local_wake`, and waking only local sleepers deadlocks `steal_wake`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use accept_affinity::{AcceptError, AcceptQueue, AffinityConfig, Policy};
use netchannel::signature::FlowGroup;

/// Affinity where one queued connection makes its core busy.
fn eager() -> Policy {
    Policy::Affinity(AffinityConfig {
        busy_high_percent: 0,
        busy_low_percent: 0,
        ..AffinityConfig::default()
    })
}

/// An acceptor sleeping on core 0 gets the connection enqueued on core 0.
#[test]
fn local_wake() {
    loom::model(|| {
        let q = Arc::new(AcceptQueue::new(2, 4, Policy::affinity()).unwrap());
        let q2 = Arc::clone(&q);
        let acceptor = thread::spawn(move || q2.accept(0).map(|a| a.conn));
        q.enqueue(0, FlowGroup(0), 7u32).unwrap();
        assert_eq!(acceptor.join().unwrap(), Ok(7));
    });
}

/// An acceptor sleeping on non-busy core 0 is woken by a connection that makes core 1 busy, and steals
/// it (core 1 has no acceptor at all).
#[test]
fn steal_wake() {
    loom::model(|| {
        let q = Arc::new(AcceptQueue::new(2, 4, eager()).unwrap());
        let q2 = Arc::clone(&q);
        let acceptor = thread::spawn(move || q2.accept(0).map(|a| (a.conn, a.remote)));
        q.enqueue(1, FlowGroup(1), 9u32).unwrap();
        assert_eq!(acceptor.join().unwrap(), Ok((9, true)));
    });
}

/// Fine-Accept: an enqueue on core 1 wakes the acceptor sleeping on core 0.
#[test]
fn fine_remote_wake() {
    loom::model(|| {
        let q = Arc::new(AcceptQueue::new(2, 4, Policy::Fine).unwrap());
        let q2 = Arc::clone(&q);
        let acceptor = thread::spawn(move || q2.accept(0).map(|a| a.conn));
        q.enqueue(1, FlowGroup(1), 3u32).unwrap();
        assert_eq!(acceptor.join().unwrap(), Ok(3));
    });
}

/// Two connections on busy core 1, an acceptor on each core accepting once: both get one. The first
/// enqueue's token may go to core 1's acceptor, which then takes the second connection; core 0's
/// acceptor must still be woken for the one left (the second enqueue's token, or the pass-on).
#[test]
fn two_acceptors_two_connections() {
    loom::model(|| {
        let q = Arc::new(AcceptQueue::new(2, 4, eager()).unwrap());
        let acceptors: Vec<_> = (0..2)
            .map(|core| {
                let q = Arc::clone(&q);
                thread::spawn(move || q.accept(core).map(|a| a.conn))
            })
            .collect();
        q.enqueue(1, FlowGroup(1), 1u32).unwrap();
        q.enqueue(1, FlowGroup(1), 2u32).unwrap();
        let mut got: Vec<u32> = acceptors.into_iter().map(|t| t.join().unwrap().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
    });
}

/// Retiring a core wakes its sleeping acceptor with `Retired`; a connection queued there moves to core 1.
#[test]
fn retire_wakes_and_hands_over() {
    loom::model(|| {
        let q = Arc::new(AcceptQueue::new(2, 4, Policy::affinity()).unwrap());
        let q2 = Arc::clone(&q);
        let acceptor = thread::spawn(move || q2.accept(0).map(|a| a.conn));
        let _ = q.enqueue(0, FlowGroup(0), 5u32);
        q.retire(0).unwrap();
        match acceptor.join().unwrap() {
            Ok(5) => assert_eq!(q.queue_len(1), 0),
            Err(AcceptError::Retired) => assert_eq!(q.try_accept(1).unwrap().conn, 5),
            other => panic!("{other:?}"),
        }
    });
}
