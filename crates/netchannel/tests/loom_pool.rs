//! loom models of the packet buffer pool: buffers allocated on one thread, sent as indices through a
//! net channel, freed on another thread into its cache, and carried back through the depot (or a
//! return channel) to the allocating thread.
//!
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p netchannel
//! --test loom_pool`. Under loom every access to a buffer's memory touches a loom-tracked cell for that
//! buffer (`src/pool.rs`, `Shared::track`), so a buffer owned by two threads at once (handed out while
//! still live, or freed without a happens-before edge to its next owner) is reported by loom as a
//! concurrent access; the models also check every payload and run the leak check at the end.
#![cfg(loom)]

use loom::thread;
use netchannel::channel::{Channel, WakeMode};
use netchannel::pool::{Audit, HugePages, Pool};

fn tiny_pool(buffers: u32, batch: usize, cache_size: usize) -> Pool {
    Pool::builder(buffers)
        .hugepages(HugePages::Never)
        .headroom(8)
        .data_room(8)
        .batch(batch)
        .cache_size(cache_size)
        .build()
        .unwrap()
}

/// Thread A allocates 3 packets from a 2-buffer pool, writes a sequence byte into each and sends the
/// indices through a net channel; thread B rebuilds each packet, checks it, and frees it into its own
/// cache (1 buffer, batch 1), which spills to the depot from the second free on; A's third allocation
/// can only be served by a buffer B spilled. Every buffer ends up back exactly once.
#[test]
fn free_on_consumer_core_refill_through_depot() {
    const SENT: u8 = 3;
    loom::model(|| {
        let pool = tiny_pool(2, 1, 1);
        let (mut tx, mut rx) = Channel::builder(2).wake(WakeMode::Poll).build().unwrap();

        let consumer = {
            let pool = pool.clone();
            thread::spawn(move || {
                let cache = pool.cache();
                let mut seq = 0;
                while seq < SENT {
                    let Some(index) = rx.pop() else {
                        thread::yield_now();
                        continue;
                    };
                    // SAFETY: A gave up `index` (into_raw) and sent it once; popping makes us its owner.
                    let packet = unsafe { cache.packet_from_raw(index) };
                    assert_eq!(packet.data(), [seq], "buffer {index}");
                    assert_eq!(packet.headroom(), 8);
                    drop(packet); // frees into this thread's cache, spilling to the depot when full
                    seq += 1;
                }
                cache.stats()
            })
        };

        let cache = pool.cache();
        for seq in 0..SENT {
            let mut packet = loop {
                match cache.alloc() {
                    Some(packet) => break packet,
                    None => thread::yield_now(),
                }
            };
            packet.extend_from_slice(&[seq]).unwrap();
            let mut index = packet.into_raw();
            while let Err(full) = tx.push(index) {
                index = full.into_inner();
                thread::yield_now();
            }
        }
        let consumer_stats = consumer.join().unwrap();
        assert_eq!(consumer_stats.frees, u64::from(SENT));
        assert!(consumer_stats.spills >= 1, "B spilled to the depot");
        assert!(cache.stats().refills >= 3, "A refilled for every allocation: {:?}", cache.stats());
        drop(cache);
        assert_eq!(pool.audit(), Audit { total: 2, in_depot: 2, ..Audit::default() });
        pool.check_leaks().unwrap();
    });
}

/// The return path: A sends `sent` packets through a packet channel; B checks them and sends the
/// indices back through a raw net channel; A, out of buffers (`buffers` in the pool, a cache of 1),
/// reclaims them straight into its cache and reuses them.
fn return_path(buffers: u32, sent: u8) {
    let pool = tiny_pool(buffers, 1, 1);
    let (mut tx, mut rx) = pool.packet_channel_with(Channel::builder(2).wake(WakeMode::Poll)).unwrap();
    let (mut ret_tx, mut ret_rx) = Channel::builder(2).wake(WakeMode::Poll).build().unwrap();

    let consumer = {
        let pool = pool.clone();
        thread::spawn(move || {
            let cache = pool.cache();
            let mut seq = 0;
            while seq < sent {
                let Some(packet) = rx.pop(&cache) else {
                    thread::yield_now();
                    continue;
                };
                assert_eq!(packet.data(), [seq]);
                let mut index = packet.into_raw();
                while let Err(full) = ret_tx.push(index) {
                    index = full.into_inner();
                    thread::yield_now();
                }
                seq += 1;
            }
            assert_eq!(cache.stats().frees, 0);
        })
    };

    let cache = pool.cache();
    let mut reclaimed = 0;
    for seq in 0..sent {
        let mut packet = loop {
            if let Some(packet) = cache.alloc() {
                break packet;
            }
            // SAFETY: the return channel carries only indices B gave up, each once per trip.
            reclaimed += unsafe { cache.reclaim(&mut ret_rx) };
            thread::yield_now();
        };
        packet.extend_from_slice(&[seq]).unwrap();
        while let Err(full) = tx.push(packet) {
            packet = full.into_inner();
            thread::yield_now();
        }
    }
    consumer.join().unwrap();
    // SAFETY: as above.
    reclaimed += unsafe { cache.reclaim(&mut ret_rx) };
    assert_eq!(reclaimed, usize::from(sent));
    drop(cache);
    drop(tx);
    pool.check_leaks().unwrap();
}

/// One buffer reused through the return channel: explored exhaustively.
#[test]
fn return_channel_reclaim() {
    loom::model(|| return_path(1, 2));
}

/// Two buffers in flight at once and three trips, so A reclaims while B is still returning; bounded
/// to 4 preemptions (exhaustive exploration takes about half a minute).
#[test]
fn return_channel_reclaim_two_in_flight() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(4);
    builder.check(|| return_path(2, 3));
}
