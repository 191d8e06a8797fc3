//! Multi-threaded stress: producers enqueue connections on random cores while one blocking acceptor per
//! core takes them, under every policy; no connection is lost or duplicated, and no acceptor sleeps
//! through a connection it should take (every connection is accepted *before* the listener closes).
//!
//! These run under ThreadSanitizer in `scripts/test.sh`. The connection count scales with
//! `ACCEPT_STRESS_CONNS` (default 200,000 per policy).
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use accept_affinity::{AcceptError, AcceptQueue, AffinityConfig, EnqueueError, Policy};
use netchannel::signature::FlowGroup;

const CORES: usize = 4;
const PRODUCERS: u64 = 2;

fn conns() -> u64 {
    std::env::var("ACCEPT_STRESS_CONNS").ok().and_then(|s| s.parse().ok()).unwrap_or(200_000)
}

/// A small xorshift so producers spread connections unevenly (core 3 gets half) without a dependency.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn run(policy: Policy, retire_core_3: bool) {
    let n = conns();
    let q = Arc::new(AcceptQueue::<u64>::new(CORES, 64, policy.clone()).unwrap());
    let accepted = Arc::new(AtomicU64::new(0));
    let acceptors: Vec<_> = (0..CORES)
        .map(|core| {
            let (q, accepted) = (Arc::clone(&q), Arc::clone(&accepted));
            thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    match q.accept(core) {
                        Ok(a) => {
                            assert_eq!(a.group, FlowGroup::of_port(u16::try_from(a.conn % 4096).unwrap()));
                            got.push(a.conn);
                            // Relaxed: a progress counter; the final check joins the threads.
                            accepted.fetch_add(1, Ordering::Relaxed);
                            if retire_core_3 && core == 3 && got.len() == 1000 {
                                let r = q.retire(3).unwrap();
                                assert!(r.orphans.is_empty());
                            }
                        }
                        Err(AcceptError::Closed | AcceptError::Retired) => return got,
                        Err(e) => panic!("accept on {core}: {e}"),
                    }
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (p + 1);
                let mut full = 0u64;
                let mut id = p;
                while id < n {
                    let r = next(&mut rng);
                    let core = if r.is_multiple_of(2) { 3 } else { usize::try_from(r % 3).unwrap() };
                    let group = FlowGroup::of_port(u16::try_from(id % 4096).unwrap());
                    match q.enqueue(core, group, id) {
                        Ok(_) => id += PRODUCERS,
                        // The caller would reset it; here the client retries.
                        Err(EnqueueError::Full(_)) => {
                            full += 1;
                            thread::yield_now();
                        }
                        Err(e) => panic!("enqueue: {e}"),
                    }
                }
                full
            })
        })
        .collect();
    let full: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
    // Every connection must be accepted while the listener is open: a lost wakeup strands one.
    let deadline = Instant::now() + Duration::from_secs(60);
    // Relaxed: polling a counter.
    while accepted.load(Ordering::Relaxed) < n {
        assert!(
            Instant::now() < deadline,
            "{}: stuck at {} of {n}: {:?}",
            policy.name(),
            accepted.load(Ordering::Relaxed),
            q.stats()
        );
        thread::sleep(Duration::from_millis(1));
    }
    q.close();
    let mut all: Vec<u64> = acceptors.into_iter().flat_map(|t| t.join().unwrap()).collect();
    all.sort_unstable();
    assert_eq!(all.len() as u64, n, "{}: lost or extra connections", policy.name());
    assert!(all.iter().enumerate().all(|(i, &c)| c == i as u64), "{}: duplicated connections", policy.name());
    let s = q.stats();
    assert_eq!(s.enqueued(), n);
    assert_eq!(s.accepted(), n);
    assert_eq!(s.rejected(), full);
    assert_eq!(s.queued(), 0);
}

#[test]
fn stock_stress() {
    run(Policy::Stock, false);
}

#[test]
fn fine_stress() {
    run(Policy::Fine, false);
}

#[test]
fn affinity_stress() {
    run(Policy::affinity(), false);
}

/// Small queues so cores flip between busy and non-busy constantly; core 3 retires mid-run and its
/// connections (and later enqueues naming it) go to the others.
#[test]
fn affinity_stress_busy_flips_and_retire() {
    let cfg = AffinityConfig {
        busy_high_percent: 50,
        busy_low_percent: 25,
        ewma_weight: 2,
        ..AffinityConfig::default()
    };
    run(Policy::Affinity(cfg), true);
}
