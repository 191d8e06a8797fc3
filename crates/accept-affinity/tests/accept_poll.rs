//! Readiness registration: `poll_accept` registers a waker for its core and returns `Pending`; the
//! waker is woken by the enqueues that would wake a sleeping acceptor of that core, by `close` and by
//! `retire`; a registration replaces the core's earlier one; `cancel_poll` withdraws it.
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use accept_affinity::{AcceptError, AcceptQueue, Accepted, AffinityConfig, Policy};
use netchannel::signature::FlowGroup;

const G: FlowGroup = FlowGroup(0);

/// Affinity where any queued connection makes its core busy, for good (0% low-water mark).
fn eager() -> Policy {
    Policy::Affinity(AffinityConfig {
        busy_high_percent: 0,
        busy_low_percent: 0,
        ..AffinityConfig::default()
    })
}

/// A waker that counts its wakes.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Relaxed: read by the same thread, or after a join.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn counter() -> (Arc<Counter>, Waker) {
    let c = Arc::new(Counter::default());
    let w = Waker::from(Arc::clone(&c));
    (c, w)
}

fn wakes(c: &Counter) -> usize {
    // Relaxed: see `wake_by_ref`.
    c.0.load(Ordering::Relaxed)
}

fn ready<C>(p: Poll<Result<Accepted<C>, AcceptError>>) -> Result<Accepted<C>, AcceptError> {
    match p {
        Poll::Ready(r) => r,
        Poll::Pending => panic!("expected Ready, got Pending"),
    }
}

/// Ready at once when there is something to take; Pending when not, then woken by a local enqueue; the
/// next poll takes it.
#[test]
fn pending_then_woken_by_local_enqueue() {
    let q = AcceptQueue::new(2, 8, Policy::affinity()).unwrap();
    let (c, w) = counter();
    q.enqueue(0, G, 1u32).unwrap();
    assert_eq!(ready(q.poll_accept(0, &w)).unwrap().conn, 1);
    assert!(q.poll_accept(0, &w).is_pending());
    assert_eq!(wakes(&c), 0);
    q.enqueue(0, G, 2).unwrap();
    assert_eq!(wakes(&c), 1);
    let a = ready(q.poll_accept(0, &w)).unwrap();
    assert_eq!((a.conn, a.remote), (2, false));
    // The wake took the registration: a second enqueue does not wake the waker again until it polls.
    q.enqueue(0, G, 3).unwrap();
    assert_eq!(wakes(&c), 1);
    assert_eq!(ready(q.poll_accept(0, &w)).unwrap().conn, 3);
    assert_eq!(q.poll_accept(7, &w), Poll::Ready(Err(AcceptError::NoSuchCore)));
}

/// Affinity: woken by a busy core's enqueue (and then steals), not by a non-busy core's.
#[test]
fn affinity_wakes_for_busy_cores_only() {
    let q = AcceptQueue::new(2, 8, eager()).unwrap();
    let (c, w) = counter();
    assert!(q.poll_accept(0, &w).is_pending());
    q.enqueue(1, G, 1u32).unwrap(); // core 1 becomes busy: core 0 may steal
    assert!(q.is_busy(1));
    assert_eq!(wakes(&c), 1);
    let a = ready(q.poll_accept(0, &w)).unwrap();
    assert_eq!((a.conn, a.arrived_on, a.remote), (1, 1, true));

    let q = AcceptQueue::new(2, 200, Policy::affinity()).unwrap();
    let (c, w) = counter();
    assert!(q.poll_accept(0, &w).is_pending());
    q.enqueue(1, G, 2u32).unwrap(); // core 1 is not busy: core 0 may not take it
    assert!(!q.is_busy(1));
    assert_eq!(wakes(&c), 0);
    assert!(q.poll_accept(0, &w).is_pending());
    // A waker on core 1 is woken by it, and takes it.
    let (c1, w1) = counter();
    assert_eq!(ready(q.poll_accept(1, &w1)).unwrap().conn, 2);
    assert!(q.poll_accept(1, &w1).is_pending());
    q.enqueue(1, G, 3).unwrap();
    assert_eq!((wakes(&c), wakes(&c1)), (0, 1));
}

/// Fine and Stock wake a registered waker on any core.
#[test]
fn fine_and_stock_wake_any_core() {
    for policy in [Policy::Fine, Policy::Stock] {
        let q = AcceptQueue::new(2, 8, policy).unwrap();
        let (c, w) = counter();
        assert!(q.poll_accept(0, &w).is_pending());
        q.enqueue(1, G, 5u32).unwrap();
        assert_eq!(wakes(&c), 1);
        assert_eq!(ready(q.poll_accept(0, &w)).unwrap().conn, 5);
    }
}

/// `close` wakes every registered waker; polls then drain and return `Closed`.
#[test]
fn close_wakes() {
    let q = AcceptQueue::new(2, 8, Policy::affinity()).unwrap();
    let (c0, w0) = counter();
    let (c1, w1) = counter();
    assert!(q.poll_accept(0, &w0).is_pending());
    q.enqueue(1, G, 4u32).unwrap(); // not busy: no wake for core 0
    assert!(q.poll_accept(1, &w1).is_ready());
    assert!(q.poll_accept(1, &w1).is_pending());
    q.enqueue(1, G, 6u32).unwrap(); // wakes core 1's waker (taken)
    assert_eq!((wakes(&c0), wakes(&c1)), (0, 1));
    q.close();
    assert_eq!((wakes(&c0), wakes(&c1)), (1, 1));
    // Closed: core 0 drains core 1's queue, then `Closed`.
    assert_eq!(ready(q.poll_accept(0, &w0)).unwrap().conn, 6);
    assert_eq!(q.poll_accept(0, &w0), Poll::Ready(Err(AcceptError::Closed)));
    assert_eq!(q.poll_accept(1, &w1), Poll::Ready(Err(AcceptError::Closed)));
    assert_eq!((wakes(&c0), wakes(&c1)), (1, 1));
}

/// `retire` wakes the retiring core's waker (its poll returns `Retired`), and the heir's waker for the
/// connections handed over.
#[test]
fn retire_wakes() {
    let q = AcceptQueue::<u32>::new(2, 8, Policy::affinity()).unwrap();
    let (c0, w0) = counter();
    let (c1, w1) = counter();
    assert!(q.poll_accept(0, &w0).is_pending());
    assert!(q.poll_accept(1, &w1).is_pending());
    q.retire(0).unwrap();
    assert_eq!((wakes(&c0), wakes(&c1)), (1, 0));
    assert_eq!(q.poll_accept(0, &w0), Poll::Ready(Err(AcceptError::Retired)));

    let q = AcceptQueue::new(2, 200, Policy::affinity()).unwrap();
    let (c1, w1) = counter();
    assert!(q.poll_accept(1, &w1).is_pending());
    q.enqueue(0, G, 7u32).unwrap(); // core 0 not busy: core 1 not woken
    assert_eq!(wakes(&c1), 0);
    let r = q.retire(0).unwrap();
    assert_eq!((r.moved, r.heir), (1, Some(1)));
    assert_eq!(wakes(&c1), 1);
    let a = ready(q.poll_accept(1, &w1)).unwrap();
    assert_eq!((a.conn, a.arrived_on, a.queue), (7, 0, 1));
}

/// A registration replaces the core's earlier one: only the latest waker is woken.
#[test]
fn registration_replaces() {
    let q = AcceptQueue::new(2, 8, Policy::affinity()).unwrap();
    let (c1, w1) = counter();
    let (c2, w2) = counter();
    assert!(q.poll_accept(0, &w1).is_pending());
    assert!(q.poll_accept(0, &w2).is_pending());
    // Registering the same waker again keeps it.
    assert!(q.poll_accept(0, &w2.clone()).is_pending());
    q.enqueue(0, G, 1u32).unwrap();
    assert_eq!((wakes(&c1), wakes(&c2)), (0, 1));
    q.enqueue(0, G, 2).unwrap();
    assert_eq!((wakes(&c1), wakes(&c2)), (0, 1));
}

/// `cancel_poll` withdraws the registration; a wake it had been given passes on to another waiter.
#[test]
fn cancel_withdraws_and_passes_on() {
    let q = AcceptQueue::new(2, 8, Policy::affinity()).unwrap();
    let (c, w) = counter();
    assert!(q.poll_accept(0, &w).is_pending());
    q.cancel_poll(0);
    q.enqueue(0, G, 1u32).unwrap();
    assert_eq!(wakes(&c), 0);

    let q = AcceptQueue::new(2, 8, Policy::Fine).unwrap();
    let (c0, w0) = counter();
    let (c1, w1) = counter();
    assert!(q.poll_accept(0, &w0).is_pending());
    assert!(q.poll_accept(1, &w1).is_pending());
    q.enqueue(0, G, 2u32).unwrap(); // core 0's waker first
    assert_eq!((wakes(&c0), wakes(&c1)), (1, 0));
    q.cancel_poll(0); // core 0's task gives up: the wake goes to core 1
    assert_eq!((wakes(&c0), wakes(&c1)), (1, 1));
    assert_eq!(ready(q.poll_accept(1, &w1)).unwrap().conn, 2);
    q.cancel_poll(9); // out of range: nothing
}

/// A waker and a blocking sleeper on one core: both are served. (A sleeper registered by the time of
/// the first enqueue gets its token first and the waker stays registered for the second; if the sleeper
/// was slow to register, the first enqueue wakes the waker and the sleeper's own first try takes it.)
#[test]
fn sleeper_and_waker_share_a_core() {
    let q = Arc::new(AcceptQueue::new(2, 8, Policy::affinity()).unwrap());
    let (c, w) = counter();
    assert!(q.poll_accept(0, &w).is_pending());
    let q2 = Arc::clone(&q);
    let t = thread::spawn(move || q2.accept(0).map(|a| a.conn));
    thread::sleep(Duration::from_millis(50));
    q.enqueue(0, G, 1u32).unwrap();
    assert_eq!(t.join().unwrap(), Ok(1));
    let before = wakes(&c);
    q.enqueue(0, G, 2).unwrap();
    assert_eq!(wakes(&c), 1, "woken once, by the first enqueue ({before}) or the second");
    assert_eq!(ready(q.poll_accept(0, &w)).unwrap().conn, 2);
}

/// Wakes a parked thread (a minimal executor).
struct Unpark {
    thread: Thread,
    woken: AtomicBool,
}

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Release: pairs with the Acquire swap in `poll_loop`: what the waker saw happens-before the
        // repoll.
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// An event loop on core `me`: poll, park until woken. A park that ends without a wake after 5 s is a
/// lost wakeup.
fn poll_loop(q: &AcceptQueue<u32>, me: usize) -> Vec<u32> {
    let unpark = Arc::new(Unpark { thread: thread::current(), woken: AtomicBool::new(false) });
    let waker = Waker::from(Arc::clone(&unpark));
    let mut got = Vec::new();
    loop {
        match q.poll_accept(me, &waker) {
            Poll::Ready(Ok(a)) => got.push(a.conn),
            Poll::Ready(Err(AcceptError::Closed)) => return got,
            Poll::Ready(Err(e)) => panic!("{e}"),
            Poll::Pending => {
                let deadline = Instant::now() + Duration::from_secs(5);
                // Acquire: pairs with the Release store in `wake_by_ref`.
                while !unpark.woken.swap(false, Ordering::Acquire) {
                    let now = Instant::now();
                    assert!(now < deadline, "core {me}: lost wakeup");
                    thread::park_timeout(deadline - now);
                }
            }
        }
    }
}

/// Event loops on every core, connections from several enqueuers: every connection is accepted, no
/// loop waits for a wake that never comes.
#[test]
fn event_loops_lose_nothing() {
    for policy in [Policy::affinity(), eager(), Policy::Fine, Policy::Stock] {
        let cores = 3;
        let q = Arc::new(AcceptQueue::new(cores, 3000, policy).unwrap());
        let loops: Vec<_> = (0..cores)
            .map(|me| {
                let q = Arc::clone(&q);
                thread::spawn(move || poll_loop(&q, me))
            })
            .collect();
        let producers: Vec<_> = (0..2u32)
            .map(|p| {
                let q = Arc::clone(&q);
                thread::spawn(move || {
                    for i in 0..500u32 {
                        let conn = p * 1000 + i;
                        let mut c = conn;
                        while let Err(e) = q.enqueue((conn as usize) % cores, G, c) {
                            c = e.into_inner();
                            thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        // Everything queued is taken before close: a loop that missed a wake would leave it queued.
        let deadline = Instant::now() + Duration::from_secs(10);
        while q.stats().queued() > 0 {
            assert!(Instant::now() < deadline, "connections left queued: {:?}", q.stats());
            thread::sleep(Duration::from_millis(1));
        }
        q.close();
        let mut all: Vec<u32> = loops.into_iter().flat_map(|t| t.join().unwrap()).collect();
        all.sort_unstable();
        let want: Vec<u32> = (0..2u32).flat_map(|p| (0..500).map(move |i| p * 1000 + i)).collect();
        assert_eq!(all, want);
    }
}
