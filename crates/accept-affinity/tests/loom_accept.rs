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
//!
//! The `poll_*` models do the same for readiness registration: thread A polls once
//! (`poll_accept` registers its waker and returns `Pending`, or returns `Ready`), the main thread
//! enqueues (or closes); afterwards A's poll was `Ready` or its waker was woken, and a poll then gets
//! the connection. A lost wakeup shows up as a `Pending` poll with an unwoken waker. Skipping
//! `poll_accept`'s locked re-check (returning `Pending` right after registering) fails `poll_local_wake`
//! and `poll_steal_wake`.
#![cfg(loom)]

use std::task::{Poll, Wake, Waker};

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
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

/// A waker that counts its wakes (a loom atomic, so the model tracks it).
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        // Release: pairs with the Acquire load in `woken`.
        self.0.fetch_add(1, Ordering::Release);
    }
}

fn counter() -> (std::sync::Arc<Counter>, Waker) {
    let c = std::sync::Arc::new(Counter(AtomicUsize::new(0)));
    let w = Waker::from(std::sync::Arc::clone(&c));
    (c, w)
}

fn woken(c: &Counter) -> bool {
    // Acquire: pairs with the Release in `wake_by_ref`.
    c.0.load(Ordering::Acquire) > 0
}

/// Thread A polls core 0 once while the main thread runs `event`; afterwards A's poll was `Ready` or its
/// waker was woken (and then polls until `Ready`, each `Pending` needing a wake). Returns A's result.
fn poll_races(
    q: Arc<AcceptQueue<u32>>,
    event: impl FnOnce(&AcceptQueue<u32>),
) -> Result<(u32, bool), AcceptError> {
    let (c, w) = counter();
    let q2 = Arc::clone(&q);
    let poller = thread::spawn(move || q2.poll_accept(0, &w).map(|r| r.map(|a| (a.conn, a.remote))));
    event(&q);
    if let Poll::Ready(r) = poller.join().unwrap() {
        return r;
    }
    assert!(woken(&c), "lost wakeup: Pending and never woken");
    let (c2, w2) = counter();
    match q.poll_accept(0, &w2) {
        Poll::Ready(r) => r.map(|a| (a.conn, a.remote)),
        Poll::Pending => panic!("woken, but the next poll found nothing (woken: {})", woken(&c2)),
    }
}

/// A waker registered on core 0 racing an enqueue on core 0.
#[test]
fn poll_local_wake() {
    loom::model(|| {
        let q = Arc::new(AcceptQueue::new(2, 4, Policy::affinity()).unwrap());
        let got = poll_races(q, |q| {
            q.enqueue(0, FlowGroup(0), 7u32).unwrap();
        });
        assert_eq!(got, Ok((7, false)));
    });
}

/// A waker registered on non-busy core 0 racing an enqueue that makes core 1 busy: it steals.
#[test]
fn poll_steal_wake() {
    loom::model(|| {
        let q = Arc::new(AcceptQueue::new(2, 4, eager()).unwrap());
        let got = poll_races(q, |q| {
            q.enqueue(1, FlowGroup(1), 9u32).unwrap();
        });
        assert_eq!(got, Ok((9, true)));
    });
}

/// A waker registered on core 0 racing `close`: woken, or its poll saw the close.
#[test]
fn poll_close_wake() {
    loom::model(|| {
        let q = Arc::new(AcceptQueue::new(2, 4, Policy::affinity()).unwrap());
        let got = poll_races(q, AcceptQueue::close);
        assert_eq!(got, Err(AcceptError::Closed));
    });
}

/// A waker registered on core 0 racing its retirement: woken, or its poll saw it.
#[test]
fn poll_retire_wake() {
    loom::model(|| {
        let q = Arc::new(AcceptQueue::new(2, 4, Policy::affinity()).unwrap());
        let got = poll_races(q, |q| {
            q.retire(0).unwrap();
        });
        assert_eq!(got, Err(AcceptError::Retired));
    });
}

/// Polls core `me` until `Ready`, waiting (yielding) for a wake after each `Pending`: a lost wakeup
/// spins until loom gives up on the execution.
fn poll_until_ready(q: &AcceptQueue<u32>, me: usize) -> Result<u32, AcceptError> {
    let (c, w) = counter();
    let mut seen = 0;
    loop {
        match q.poll_accept(me, &w) {
            Poll::Ready(r) => return r.map(|a| a.conn),
            Poll::Pending => loop {
                // Acquire: pairs with the Release in `wake_by_ref`.
                let now = c.0.load(Ordering::Acquire);
                if now != seen {
                    seen = now;
                    break;
                }
                thread::yield_now();
            },
        }
    }
}

/// Two connections on busy core 1; a polling task on core 0 and a blocking acceptor on core 1, each
/// accepting once: both get one, whichever takes which wake (the pass-on covers a waiter woken for a
/// connection another one took).
#[test]
fn poll_and_sleeper_two_connections() {
    loom::model(|| {
        let q = Arc::new(AcceptQueue::new(2, 4, eager()).unwrap());
        let q0 = Arc::clone(&q);
        let poller = thread::spawn(move || poll_until_ready(&q0, 0));
        let q1 = Arc::clone(&q);
        let sleeper = thread::spawn(move || q1.accept(1).map(|a| a.conn));
        q.enqueue(1, FlowGroup(1), 1u32).unwrap();
        q.enqueue(1, FlowGroup(1), 2u32).unwrap();
        let mut got = [poller.join().unwrap().unwrap(), sleeper.join().unwrap().unwrap()];
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
    });
}
