//! Instruction counts of the net channel's push and pop at bursts 1, 32 and 256, beside rtrb 0.4.
//!
//! Run with `cargo bench -p netchannels-benches --bench icount_channel` (gungraun under callgrind; `scripts/icount.sh` runs it
//! and checks the counts against `benches/icount/baseline.tsv`). Every benchmark moves [`ITEMS`] `u32`
//! items on one thread, so the instructions per item are the count divided by [`ITEMS`] (the id's
//! `_n4096` suffix, which the script reads):
//!
//! * `push/<contender>_push/burst<B>_n4096`: [`ITEMS`] items pushed into an empty ring of capacity
//!   [`ITEMS`] in bursts of `B` (`push` at burst 1, `push_burst` above it).
//! * `pop/<contender>_pop/burst<B>_n4096`: the same items popped out of a full ring in bursts of `B`
//!   (`pop` at burst 1, `pop_burst` above it).
//!
//! Contenders: `netchannel_park` (the default wake mode: the producer checks whether the consumer
//! sleeps), `netchannel_poll` (no wakeup check) and the anchor `rtrb` (its `push`/`pop` at burst 1 and
//! its chunk API above it). Building the ring and filling it for `pop` happens in gungraun's `setup`,
//! which is not counted; the ring is returned so that dropping it is not counted either. One thread
//! and fixed inputs keep the counts exact from run to run (a two-thread run is not deterministic under
//! callgrind; `benches/channel.rs` times the cross-core case).
#![allow(missing_docs, reason = "gungraun's macros generate undocumented public modules and functions")]

use std::hint::black_box;

use gungraun::{library_benchmark, library_benchmark_group, main};
use netchannel::channel::{Channel, Consumer, Producer, WakeMode};
use rtrb::{Consumer as RtrbConsumer, CopyToUninit, Producer as RtrbProducer, RingBuffer};

/// Items per benchmark run, and the ring's capacity.
const ITEMS: usize = 4096;

/// A net channel as the benchmarks use it: both ends and the burst buffer.
type NetRing = (Producer, Consumer, Vec<u32>);

/// An empty net channel of [`ITEMS`] slots in wake mode `mode`, and `burst` items to push.
fn netchannel_empty(mode: WakeMode, burst: usize) -> NetRing {
    let (tx, rx) = Channel::builder(ITEMS).wake(mode).build().expect("channel");
    let src = (0..).take(burst).collect();
    (tx, rx, src)
}

/// A full net channel of [`ITEMS`] slots and a buffer of `burst` slots to pop into.
fn netchannel_full(mode: WakeMode, burst: usize) -> NetRing {
    let (mut tx, rx) = Channel::builder(ITEMS).wake(mode).build().expect("channel");
    let all: Vec<u32> = (0..).take(ITEMS).collect();
    assert_eq!(tx.push_burst(&all), ITEMS, "the ring holds ITEMS");
    (tx, rx, vec![0; burst])
}

fn park_empty(burst: usize) -> NetRing {
    netchannel_empty(WakeMode::Park, burst)
}

fn poll_empty(burst: usize) -> NetRing {
    netchannel_empty(WakeMode::Poll, burst)
}

fn park_full(burst: usize) -> NetRing {
    netchannel_full(WakeMode::Park, burst)
}

fn poll_full(burst: usize) -> NetRing {
    netchannel_full(WakeMode::Poll, burst)
}

/// Pushes [`ITEMS`] items in bursts of `src.len()`.
fn netchannel_push((mut tx, rx, src): NetRing) -> NetRing {
    if src.len() == 1 {
        for i in (0u32..).take(ITEMS) {
            tx.push(black_box(i)).expect("room");
        }
    } else {
        for _ in 0..ITEMS / src.len() {
            assert_eq!(tx.push_burst(black_box(&src)), src.len());
        }
    }
    (tx, rx, src)
}

/// Pops [`ITEMS`] items in bursts of `out.len()`.
fn netchannel_pop((tx, mut rx, mut out): NetRing) -> NetRing {
    if out.len() == 1 {
        for _ in 0..ITEMS {
            black_box(rx.pop().expect("item"));
        }
    } else {
        for _ in 0..ITEMS / out.len() {
            assert_eq!(rx.pop_burst(black_box(&mut out)), out.len());
        }
    }
    (tx, rx, out)
}

/// An rtrb ring as the benchmarks use it: both ends and the burst buffer.
type Rtrb = (RtrbProducer<u32>, RtrbConsumer<u32>, Vec<u32>);

fn rtrb_empty(burst: usize) -> Rtrb {
    let (tx, rx) = RingBuffer::<u32>::new(ITEMS);
    (tx, rx, (0..).take(burst).collect())
}

fn rtrb_full(burst: usize) -> Rtrb {
    let (mut tx, rx) = RingBuffer::<u32>::new(ITEMS);
    for i in (0u32..).take(ITEMS) {
        tx.push(i).expect("room");
    }
    (tx, rx, vec![0; burst])
}

#[library_benchmark]
#[bench::burst1_n4096(args = (1), setup = park_empty)]
#[bench::burst32_n4096(args = (32), setup = park_empty)]
#[bench::burst256_n4096(args = (256), setup = park_empty)]
fn netchannel_park_push(ring: NetRing) -> NetRing {
    netchannel_push(ring)
}

#[library_benchmark]
#[bench::burst1_n4096(args = (1), setup = poll_empty)]
#[bench::burst32_n4096(args = (32), setup = poll_empty)]
#[bench::burst256_n4096(args = (256), setup = poll_empty)]
fn netchannel_poll_push(ring: NetRing) -> NetRing {
    netchannel_push(ring)
}

#[library_benchmark]
#[bench::burst1_n4096(args = (1), setup = rtrb_empty)]
#[bench::burst32_n4096(args = (32), setup = rtrb_empty)]
#[bench::burst256_n4096(args = (256), setup = rtrb_empty)]
fn rtrb_push((mut tx, rx, src): Rtrb) -> Rtrb {
    if src.len() == 1 {
        for i in (0u32..).take(ITEMS) {
            tx.push(black_box(i)).expect("room");
        }
    } else {
        for _ in 0..ITEMS / src.len() {
            let mut chunk = tx.write_chunk_uninit(src.len()).expect("room");
            let (a, b) = chunk.as_mut_slices();
            let m = a.len();
            black_box(&src)[..m].copy_to_uninit(a);
            src[m..].copy_to_uninit(b);
            // SAFETY: both slices of the chunk were initialised just above.
            unsafe { chunk.commit_all() };
        }
    }
    (tx, rx, src)
}

#[library_benchmark]
#[bench::burst1_n4096(args = (1), setup = park_full)]
#[bench::burst32_n4096(args = (32), setup = park_full)]
#[bench::burst256_n4096(args = (256), setup = park_full)]
fn netchannel_park_pop(ring: NetRing) -> NetRing {
    netchannel_pop(ring)
}

#[library_benchmark]
#[bench::burst1_n4096(args = (1), setup = poll_full)]
#[bench::burst32_n4096(args = (32), setup = poll_full)]
#[bench::burst256_n4096(args = (256), setup = poll_full)]
fn netchannel_poll_pop(ring: NetRing) -> NetRing {
    netchannel_pop(ring)
}

#[library_benchmark]
#[bench::burst1_n4096(args = (1), setup = rtrb_full)]
#[bench::burst32_n4096(args = (32), setup = rtrb_full)]
#[bench::burst256_n4096(args = (256), setup = rtrb_full)]
fn rtrb_pop((tx, mut rx, mut out): Rtrb) -> Rtrb {
    if out.len() == 1 {
        for _ in 0..ITEMS {
            black_box(rx.pop().expect("item"));
        }
    } else {
        for _ in 0..ITEMS / out.len() {
            let chunk = rx.read_chunk(out.len()).expect("items");
            let (a, b) = chunk.as_slices();
            out[..a.len()].copy_from_slice(a);
            out[a.len()..].copy_from_slice(b);
            chunk.commit_all();
            black_box(&mut out);
        }
    }
    (tx, rx, out)
}

library_benchmark_group!(
    name = push;
    benchmarks = netchannel_park_push, netchannel_poll_push, rtrb_push
);

library_benchmark_group!(
    name = pop;
    benchmarks = netchannel_park_pop, netchannel_poll_pop, rtrb_pop
);

main!(library_benchmark_groups = push, pop);
