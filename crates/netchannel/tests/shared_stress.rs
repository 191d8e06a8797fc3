//! Cores sharing pool buffers by reference and dropping them concurrently, for ThreadSanitizer (the
//! CI's TSan stage runs every `*_stress` test): each round, the main thread writes a few buffers and
//! shares them; four threads each hold a clone of every one, read and check the data, send frames of
//! them (headers written into the headroom, one frame per buffer in flight at a time, released by
//! drop or by token through `free_burst` as a driver does on TX completion), and drop their clones in
//! an order of their own, so the last reference goes on any thread while others still read, then
//! allocate and overwrite buffers at once (the ones just freed come back first): a free that raced a
//! read, or a frame whose headers another frame overwrote, shows as a data race or a failed check. Every buffer comes back
//! exactly once. Rounds scale with `NETCHANNEL_STRESS_ITEMS` (default 300,000: 300 rounds).

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};

use netchannel::pool::{FrameError, HugePages, Pool, SharedPacket};

const THREADS: usize = 4;
const SHARED: usize = 6;
const HEADERS: usize = 14;

fn rounds() -> usize {
    let items: usize =
        std::env::var("NETCHANNEL_STRESS_ITEMS").ok().and_then(|s| s.parse().ok()).unwrap_or(300_000);
    (items / 1000).max(10)
}

fn payload(round: usize, k: usize) -> Vec<u8> {
    let len = 32 + (round * 7 + k * 13) % 1400;
    (0..len).map(|i| (round ^ k.wrapping_mul(31) ^ i).to_le_bytes()[0]).collect()
}

/// One thread's work on its clones: reads, frames, and drops in its own order.
fn work(
    thread: usize,
    round: usize,
    mut mine: Vec<SharedPacket>,
    pool: &Pool,
    sent: &AtomicU64,
    refused: &AtomicU64,
) {
    let cache = pool.cache();
    for pass in 0..3 {
        for (k, shared) in mine.iter().enumerate() {
            assert_eq!(shared.data(), payload(round, k), "round {round} buffer {k}");
            match shared.frame(&cache, HEADERS) {
                Ok(mut frame) => {
                    let tag = [(thread + 1).to_le_bytes()[0]; HEADERS];
                    frame.data_mut().copy_from_slice(&tag);
                    let data = frame.data();
                    assert_eq!(&data[..HEADERS], tag, "no other frame wrote these headers");
                    assert_eq!(&data[HEADERS..], payload(round, k));
                    if (pass + k + thread).is_multiple_of(2) {
                        drop(frame); // a TAP-style device: freed when written
                    } else {
                        let token = frame.into_raw();
                        // SAFETY: the token of the frame above, given up; the "device" is done.
                        unsafe { cache.free_burst(&[token]) };
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                Err(FrameError::InFlight) => {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    // Drop in an order of this thread's own, so the last references go on different threads.
    let rotate = (thread + round) % mine.len();
    mine.rotate_left(rotate);
    for shared in mine {
        drop(shared);
        std::thread::yield_now();
    }
    // Reuse at once what the last drops freed (the depot hands back the most recent first) while the
    // other threads may still be reading: a free not ordered after their reads races these writes.
    let scribbled: Vec<_> = std::iter::from_fn(|| cache.alloc()).take(SHARED).collect();
    for mut packet in scribbled {
        packet.set_len(packet.tailroom()).unwrap();
        packet.data_mut().fill(0xEE);
    }
    assert_eq!(cache.stats().rejected, 0);
}

#[test]
fn cores_share_buffers_and_drop_them_concurrently() {
    let pool = Pool::builder(64).hugepages(HugePages::Never).batch(4).cache_size(8).build().unwrap();
    let (sent, refused) = (AtomicU64::new(0), AtomicU64::new(0));
    let cache = pool.cache();
    for round in 0..rounds() {
        let shared: Vec<SharedPacket> = (0..SHARED)
            .map(|k| {
                let mut packet = cache.alloc().expect("the pool has room");
                packet.extend_from_slice(&payload(round, k)).unwrap();
                packet.into_shared().unwrap()
            })
            .collect();
        let start = Barrier::new(THREADS + 1);
        std::thread::scope(|s| {
            for thread in 0..THREADS {
                let mine = shared.clone();
                let (pool, start, sent, refused) = (&pool, &start, &sent, &refused);
                s.spawn(move || {
                    start.wait();
                    work(thread, round, mine, pool, sent, refused);
                });
            }
            start.wait();
            drop(shared); // the main thread's references go while the others work
        });
        assert_eq!(pool.audit().shared, 0, "round {round}: every shared buffer came back");
    }
    drop(cache);
    pool.check_leaks().unwrap();
    assert!(sent.load(Ordering::Relaxed) > 0);
    eprintln!(
        "{} rounds: {} frames sent, {} refused while another was in flight",
        rounds(),
        sent.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed)
    );
}
