//! Instruction counts of a send by reference against a send by copy, for the shared pool buffers
//! (`netchannel::pool::SharedPacket`, the zero-copy send of Marinos, Watson and Handley, "Network
//! stack specialization for performance", SIGCOMM 2014).
//!
//! Run with `cargo bench -p netchannels-benches --bench icount_pool` (gungraun under callgrind; `scripts/icount.sh` runs it
//! and checks the counts against `benches/icount/baseline.tsv`). Each benchmark sends [`SENDS`]
//! segments of [`PAYLOAD`] bytes (a full-MSS TCP segment's payload) with [`HEADERS`] bytes of headers
//! (Ethernet, IPv4 and TCP without options), on one thread, so the instructions per send are the count
//! divided by [`SENDS`] (the id's `_n256` suffix):
//!
//! * `send/by_reference/mss_n256`: take a frame of a prepared shared buffer, write the headers into its
//!   headroom, drop it (a TAP-style device frees it when written: the reference is released).
//! * `send/by_copy_anchor/mss_n256`: allocate a fresh buffer, copy the payload into it, prepend and
//!   write the headers, drop it: what a send costs without sharing (the anchor).
//!
//! The pool, the cache and the shared buffer are built in gungraun's `setup`, which is not counted.
#![allow(missing_docs, reason = "gungraun's macros generate undocumented public modules and functions")]

use std::hint::black_box;

use gungraun::{library_benchmark, library_benchmark_group, main};
use netchannel::pool::{HugePages, Pool, PoolCache, SharedPacket};

/// Sends per benchmark run.
const SENDS: usize = 256;

/// Payload bytes per segment: a 1500-byte MTU's TCP payload with timestamps.
const PAYLOAD: usize = 1448;

/// Header bytes written per send: Ethernet (14), IPv4 (20) and TCP (20).
const HEADERS: usize = 54;

/// What both benchmarks send from: a cache, a prepared shared segment and the payload to copy.
type Rig = (&'static PoolCache, SharedPacket, Vec<u8>);

fn rig() -> Rig {
    let pool: &'static Pool =
        Box::leak(Box::new(Pool::builder(512).hugepages(HugePages::Never).build().expect("pool")));
    let cache: &'static PoolCache = Box::leak(Box::new(pool.cache()));
    let payload: Vec<u8> = (0..PAYLOAD).map(|i: usize| i.to_le_bytes()[0]).collect();
    let mut packet = cache.alloc().expect("a buffer");
    packet.extend_from_slice(&payload).expect("fits");
    let shared = packet.into_shared().expect("a plain packet");
    // Warm both paths once: the frames cache is made on first use, the cache refilled.
    drop(shared.frame(cache, HEADERS).expect("no frame in flight"));
    drop(cache.alloc());
    (cache, shared, payload)
}

#[library_benchmark]
#[bench::mss_n256(setup = rig)]
fn by_reference((cache, shared, payload): Rig) -> Rig {
    let header = [0x45u8; HEADERS];
    for _ in 0..SENDS {
        let mut frame = shared.frame(cache, black_box(HEADERS)).expect("no frame in flight");
        frame.data_mut().copy_from_slice(&header);
        black_box(&frame);
    }
    (cache, shared, payload)
}

#[library_benchmark]
#[bench::mss_n256(setup = rig)]
fn by_copy_anchor((cache, shared, payload): Rig) -> Rig {
    let header = [0x45u8; HEADERS];
    for _ in 0..SENDS {
        let mut packet = cache.alloc().expect("a buffer");
        packet.extend_from_slice(black_box(&payload)).expect("fits");
        packet.prepend(HEADERS).expect("headroom").copy_from_slice(&header);
        black_box(&packet);
    }
    (cache, shared, payload)
}

library_benchmark_group!(
    name = send;
    benchmarks = by_reference, by_copy_anchor
);

main!(library_benchmark_groups = send);
