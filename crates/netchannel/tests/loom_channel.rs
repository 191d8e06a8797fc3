//! loom models of the net channel: the ring's publish/consume protocol and VJ's wakeup protocol.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p netchannel --test loom_channel`. Under loom the
//! wakeup handshake uses `SeqCst` fences on both sides (loom models fences, not `membarrier(2)`), and the
//! futex is emulated with a mutex and condition variable (`src/sys.rs`). A lost wakeup shows up as a
//! loom deadlock: the consumer blocked forever with the producer finished.
//!
//! Under loom the consumer hands slots back in batches of half the ring (two slots of a four-slot ring),
//! so the small models exercise batched returns ("Returning slots" in `netchannel::channel`). The
//! items name buffers (`Buffers`) the producer fills before each push and the consumer reads after
//! each pop, so an ordering the channel fails to give shows up as a causality violation on a buffer.
//!
//! The models are known to bite: removing the producer-side fence makes `no_lost_wakeup` deadlock;
//! removing the consumer's re-check of the ring after it asks for a wakeup makes `no_lost_wakeup`
//! deadlock; storing a slot (`write_first`) or `tail` with `Relaxed`, or loading the slot in `pop`
//! with `Relaxed`, makes the publish/consume models report a causality violation on a buffer; storing
//! the consumer's returned `head` with `Relaxed`, handing back one slot past `head`, or handing slots
//! back from `pop` without writing `EMPTY` into them fails `batched_returns_wrap`, `ring_publish_consume`
//! and `pops_and_bursts_mix`; a `pop` that trusts the slots a burst left full (no `polled_from`)
//! fails `pops_and_bursts_mix`. Leaving the barrier out of `WakeupBatch::fence` makes
//! `one_barrier_arms_many_channels` fail its assertion (and `no_lost_wakeup` deadlock:
//! `request_wakeup` is a batch of one). A burst's return rounded up instead of down, and a
//! `pop_burst` that does not notice `pop` running past its cached `tail`, are caught by
//! `tests/channel_proptest.rs`, not here.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use netchannel::channel::{Channel, Wait, WakeMode, WakeupBatch};

/// What the items name: a buffer per item that the producer fills before it pushes the item and the
/// consumer reads after it pops it, as packet buffers are. loom's cell tracking reports a read that
/// the channel did not order after its write (a slot or `tail` published with `Relaxed`, a slot read
/// with `Relaxed`).
struct Buffers(Vec<UnsafeCell<u32>>);

// SAFETY: each cell is written by the producer before its item is pushed and read by the consumer
// after the item is popped; that ordering is what the models check.
unsafe impl Sync for Buffers {}

impl Buffers {
    fn new(n: u32) -> Arc<Self> {
        Arc::new(Self((0..n).map(|_| UnsafeCell::new(0)).collect()))
    }

    /// The producer's write of buffer `i`, before it pushes `i + base`.
    fn fill(&self, i: u32) {
        // SAFETY: only the producer writes, before the push (see the `Sync` impl).
        self.0[i as usize].with_mut(|p| unsafe { *p = i + 1000 });
    }

    /// The consumer's read of buffer `i`, after it popped it.
    fn check(&self, i: u32) {
        // SAFETY: read after the pop (see the `Sync` impl).
        let v = self.0[i as usize].with(|p| unsafe { *p });
        assert_eq!(v, i + 1000, "buffer {i} read before it was filled");
    }
}

/// The producer pushes `items` one at a time into a ring of `capacity` slots, retrying when it is full;
/// the consumer busy-polls them out: order is preserved, nothing is lost, and loom's cell tracking finds
/// no slot accessed by both sides at once.
fn publish_consume(capacity: usize, items: u32) {
    loom::model(move || {
        let (mut tx, mut rx) = Channel::builder(capacity).wake(WakeMode::Poll).build().unwrap();
        let buffers = Buffers::new(items);
        let filled = Arc::clone(&buffers);
        let producer = thread::spawn(move || {
            for i in 0..items {
                filled.fill(i);
                while tx.push(i).is_err() {
                    thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        while got.len() < items as usize {
            match rx.pop() {
                Some(v) => {
                    buffers.check(v);
                    got.push(v);
                }
                None => thread::yield_now(),
            }
        }
        producer.join().unwrap();
        assert_eq!(got, (0..items).collect::<Vec<_>>());
    });
}

/// Three items through a 2-slot ring (so the producer meets a full ring).
#[test]
fn ring_publish_consume() {
    publish_consume(2, 3);
}

/// The same with bursts that wrap around the ring.
#[test]
fn ring_bursts_wrap() {
    loom::model(|| {
        let (mut tx, mut rx) = Channel::builder(2).wake(WakeMode::Poll).build().unwrap();
        let producer = thread::spawn(move || {
            let items = [10, 11, 12];
            let mut sent = 0;
            while sent < items.len() {
                sent += tx.push_burst(&items[sent..]);
                if sent < items.len() {
                    thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        let mut buf = [0u32; 2];
        while got.len() < 3 {
            let n = rx.pop_burst(&mut buf);
            got.extend_from_slice(&buf[..n]);
            if n == 0 {
                thread::yield_now();
            }
        }
        producer.join().unwrap();
        assert_eq!(got, [10, 11, 12]);
    });
}

/// The consumer hands slots back two at a time (or when it catches up) while the producer laps a
/// four-slot ring with a full ring now and then: every item arrives once and in order, and loom's cell
/// tracking finds no slot the producer rewrote before the consumer had read it.
#[test]
fn batched_returns_wrap() {
    publish_consume(4, 7);
}

/// `pop` polls slots, and `pop_burst` reads `tail` and hands slots back without emptying them: the
/// producer bursts and then pushes one at a time into a four-slot ring, lapping it; the consumer
/// alternates `pop` and `pop_burst`, so single pops follow bursts that left their slots full (which
/// `pop` must not take for new items) and bursts follow single pops that ran ahead of the `tail` the
/// producer has stored. Every item arrives once and in order.
#[test]
fn pops_and_bursts_mix() {
    loom::model(|| {
        let (mut tx, mut rx) = Channel::builder(4).wake(WakeMode::Poll).build().unwrap();
        let buffers = Buffers::new(7);
        let filled = Arc::clone(&buffers);
        let producer = thread::spawn(move || {
            let items = [0, 1, 2];
            for &i in &items {
                filled.fill(i);
            }
            let mut sent = 0;
            while sent < items.len() {
                sent += tx.push_burst(&items[sent..]);
                if sent < items.len() {
                    thread::yield_now();
                }
            }
            for item in 3..7 {
                filled.fill(item);
                while tx.push(item).is_err() {
                    thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        let mut buf = [0u32; 2];
        let mut single = true;
        while got.len() < 7 {
            let n = if single {
                rx.pop().map_or(0, |v| {
                    got.push(v);
                    1
                })
            } else {
                let n = rx.pop_burst(&mut buf);
                got.extend_from_slice(&buf[..n]);
                n
            };
            for &v in &got[got.len() - n..] {
                buffers.check(v);
            }
            single = !single;
            if n == 0 {
                thread::yield_now();
            }
        }
        producer.join().unwrap();
        assert_eq!(got, (0..7).collect::<Vec<_>>());
    });
}

/// VJ's wakeup protocol: the consumer sleeps whenever the ring is empty; two pushes must wake it as
/// often as needed (no lost wakeup = no deadlock), and the producer answers each request at most once
/// (no wakeup storm).
#[test]
fn no_lost_wakeup() {
    loom::model(|| {
        let (mut tx, mut rx) = Channel::builder(4).wake(WakeMode::Park).build().unwrap();
        let producer = thread::spawn(move || {
            tx.push(1).unwrap();
            tx.push(2).unwrap();
            tx
        });
        let mut got = Vec::new();
        while got.len() < 2 {
            match rx.pop() {
                Some(v) => got.push(v),
                None => assert_eq!(rx.wait(None), Wait::Ready),
            }
        }
        let tx = producer.join().unwrap();
        assert_eq!(got, [1, 2]);
        let stats = tx.stats();
        assert!(stats.wakeups <= stats.wakeup_requests, "{stats:?}");
    });
}

/// Dropping the producer wakes a consumer that is asleep (or about to sleep), which then drains the
/// ring and sees `Closed`.
#[test]
fn close_wakes_sleeper() {
    loom::model(|| {
        let (mut tx, mut rx) = Channel::builder(2).wake(WakeMode::Park).build().unwrap();
        let producer = thread::spawn(move || {
            tx.push(7).unwrap();
            drop(tx);
        });
        let mut got = Vec::new();
        loop {
            if let Some(v) = rx.pop() {
                got.push(v);
                continue;
            }
            if rx.wait(None).is_closed() {
                break;
            }
        }
        producer.join().unwrap();
        assert_eq!(got, [7]);
    });
}

/// A consumer that sees the producer gone also sees every item it pushed, without waiting: the
/// drain protocol of a channelizer whose consumers drop their TX channels when they are done
/// (`Channelizer::tx_finished`: abandoned, then empty, means nothing more can come). Bites when
/// the producer's close is stored `Relaxed`.
#[test]
fn abandoned_then_empty_means_everything_was_seen() {
    loom::model(|| {
        let (mut tx, mut rx) = Channel::builder(4).wake(WakeMode::Poll).build().unwrap();
        let producer = thread::spawn(move || {
            tx.push(1).unwrap();
            tx.push(2).unwrap();
            drop(tx);
        });
        let mut got = Vec::new();
        loop {
            if rx.is_abandoned() && rx.is_empty() {
                break;
            }
            if let Some(v) = rx.pop() {
                got.push(v);
            } else {
                thread::yield_now();
            }
        }
        producer.join().unwrap();
        assert_eq!(got, [1, 2], "every item pushed before the close was seen");
    });
}

/// A consumer that asks for a wakeup and then finds items must not sleep, and a later sleep must still
/// be woken: the outstanding request is reused, not lost.
#[test]
fn outstanding_request_is_reused() {
    loom::model(|| {
        let (mut tx, mut rx) = Channel::builder(2).wake(WakeMode::Park).build().unwrap();
        let producer = thread::spawn(move || {
            tx.push(1).unwrap();
            thread::yield_now();
            while tx.push(2).is_err() {
                thread::yield_now();
            }
        });
        // Arm possibly before, possibly after the first push.
        let _ = rx.request_wakeup();
        let mut got = Vec::new();
        while got.len() < 2 {
            match rx.pop() {
                Some(v) => got.push(v),
                None => assert_eq!(rx.wait(None), Wait::Ready),
            }
        }
        producer.join().unwrap();
        assert_eq!(got, [1, 2]);
    });
}

/// One barrier for two channels (`WakeupBatch`: a core that sleeps on all its input channels arms
/// them all, fences once and re-checks them all): for each channel, either the re-check after the
/// fence sees the item its producer pushed, or that producer sees the request and sends the wakeup
/// that ends the sleep. Never neither (store-buffering: both sides can miss each other without the
/// consumer's barrier).
#[test]
fn one_barrier_arms_many_channels() {
    loom::model(|| {
        let (mut tx_a, mut rx_a) = Channel::builder(2).wake(WakeMode::Park).build().unwrap();
        let (mut tx_b, mut rx_b) = Channel::builder(2).wake(WakeMode::Park).build().unwrap();
        let a = thread::spawn(move || {
            tx_a.push(1).unwrap();
            tx_a
        });
        let b = thread::spawn(move || {
            tx_b.push(2).unwrap();
            tx_b
        });
        let mut batch = WakeupBatch::new();
        assert!(batch.arm(&mut rx_a) && batch.arm(&mut rx_b));
        let armed = batch.fence();
        let idle = [armed.idle(&mut rx_a), armed.idle(&mut rx_b)];
        let senders = [a.join().unwrap(), b.join().unwrap()];
        for (channel, (idle, tx)) in idle.into_iter().zip(&senders).enumerate() {
            let stats = tx.stats();
            assert!(
                !idle || stats.wakeups == 1,
                "channel {channel}: the push and the request missed each other"
            );
        }
        assert_eq!((rx_a.pop(), rx_b.pop()), (Some(1), Some(2)));
    });
}
