//! Two-thread stress tests: millions of items, checked for order and loss, in every wake mode.
//!
//! These are the tests the test script runs under ThreadSanitizer (`scripts/test.sh`). The item count
//! scales with `NETCHANNEL_STRESS_ITEMS` (default 4 million; TSan runs use fewer).

use std::time::Duration;

use netchannel::channel::{Channel, Consumer, Producer, Wait, WakeMode};

/// How long a consumer waits on an empty ring before it calls the wakeup lost. The producer pushes
/// without pause until it is done and then closes the channel, so an empty ring is refilled or
/// closed within microseconds; only a producer starved of CPU for this long (or a TSan run on a
/// very loaded machine) could reach it honestly. A lost wakeup thus fails within this bound
/// instead of showing as a slow run.
const LOST_WAKEUP: Duration = Duration::from_secs(20);

fn items() -> u32 {
    std::env::var("NETCHANNEL_STRESS_ITEMS").ok().and_then(|s| s.parse().ok()).unwrap_or(4_000_000)
}

/// Pushes `0..n` in bursts of varying size; the consumer checks the sequence and, in the sleeping
/// modes, waits for items whenever the ring runs dry, so every wakeup path is exercised.
fn run(mode: WakeMode, capacity: usize, n: u32) {
    // No spinning in `wait`: every empty ring goes straight to the wakeup protocol.
    let (mut tx, mut rx): (Producer, Consumer) =
        Channel::builder(capacity).wake(mode).spin(Duration::ZERO).build().unwrap();
    let consumer = std::thread::spawn(move || {
        let mut expect = 0u32;
        let mut buf = [0u32; 61];
        let mut sleeps = 0u64;
        let mut k = 0usize;
        loop {
            k = (k + 1) % buf.len();
            let got = if k.is_multiple_of(3) {
                usize::from(rx.pop().map(|v| buf[0] = v).is_some())
            } else {
                rx.pop_burst(&mut buf[..=k])
            };
            for &v in &buf[..got] {
                assert_eq!(v, expect, "out of order or lost item");
                expect += 1;
            }
            if got == 0 {
                sleeps += 1;
                match rx.wait(Some(LOST_WAKEUP)) {
                    Wait::Closed => break,
                    Wait::Ready => {}
                    Wait::TimedOut => panic!(
                        "{mode:?}: the consumer waited {LOST_WAKEUP:?} on an empty ring after item {expect} \
                         (ring empty now: {}): a lost wakeup",
                        rx.is_empty()
                    ),
                }
            }
        }
        assert!(rx.is_empty());
        (expect, sleeps, rx.stats())
    });
    let mut next = 0u32;
    let mut burst = Vec::with_capacity(64);
    let mut round = 0u32;
    while next < n {
        round = round.wrapping_add(1);
        let len = (round % 64).min(n - next);
        if len <= 1 {
            if tx.push(next).is_ok() {
                next += 1;
            }
        } else {
            burst.clear();
            burst.extend(next..next + len);
            next += u32::try_from(tx.push_burst(&burst)).unwrap();
        }
        if round.is_multiple_of(4096) {
            // Let the consumer drain and fall asleep now and then.
            std::thread::yield_now();
        }
    }
    drop(tx);
    let (received, _sleeps, stats) = consumer.join().unwrap();
    assert_eq!(received, n);
    assert_eq!(stats.pushed, u64::from(n));
    assert_eq!(stats.popped, u64::from(n));
    assert!(stats.wakeups <= stats.wakeup_requests, "{stats:?}");
    if mode == WakeMode::Poll {
        assert_eq!(stats.wakeups, 0);
    }
}

#[test]
fn stress_poll() {
    run(WakeMode::Poll, 1024, items());
}

#[test]
fn stress_park() {
    run(WakeMode::Park, 1024, items());
}

#[test]
fn stress_eventfd() {
    run(WakeMode::EventFd, 1024, items() / 4);
}

#[test]
fn stress_tiny_ring_park() {
    // Capacity 2: nearly every push finds the ring full or empty, so the cached indices are re-read
    // constantly and the consumer sleeps often.
    run(WakeMode::Park, 2, items() / 16);
}

/// The producer pushes one item at a time with pauses, so the consumer is asleep for almost every item
/// and each item needs a wakeup (no spinning before sleeping). A lost wakeup shows up as a `TimedOut`
/// from the bounded wait.
#[test]
fn every_item_needs_a_wakeup() {
    for mode in [WakeMode::Park, WakeMode::EventFd] {
        let (mut tx, mut rx) = Channel::builder(8).wake(mode).spin(Duration::ZERO).build().unwrap();
        let rounds = 2_000u32;
        let consumer = std::thread::spawn(move || {
            for expect in 0..rounds {
                assert_eq!(
                    rx.wait(Some(LOST_WAKEUP)),
                    Wait::Ready,
                    "{mode:?}: a lost wakeup at item {expect}"
                );
                assert_eq!(rx.pop(), Some(expect));
            }
            rx.stats()
        });
        for i in 0..rounds {
            tx.push(i).unwrap();
            if i % 2 == 0 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                // Wait until consumed so the next push finds a consumer that is asleep or about to be.
                while tx.free_space() != tx.capacity() {
                    std::hint::spin_loop();
                }
            }
        }
        let stats = consumer.join().unwrap();
        assert_eq!(stats.popped, u64::from(rounds));
        // One wakeup per request at most (no wakeup storm), and the consumer did sleep.
        assert!(stats.wakeups <= stats.wakeup_requests, "{mode:?}: {stats:?}");
        assert!(stats.wakeups > 0, "{mode:?}: {stats:?}");
    }
}
