//! Instructions per item, net channel vs rtrb, counted by `valgrind --tool=callgrind`.
//!
//! `cargo bench --bench channel_icount` runs this binary once per (contender, burst) under callgrind,
//! with `N` items and with none, and reports `(I(N) - I(0)) / N`: the code path per item with start-up
//! subtracted. One thread pushes a burst and pops it back, so there is no cross-core traffic: this is
//! the stable, noise-free complement to `benches/channel.rs`, whose two-thread timings on a shared VM
//! move with vCPU placement. Instruction counts are repeatable for the same binary and inputs.
//!
//! Without valgrind on the PATH it says so and exits successfully (the test script installs it).

use std::hint::black_box;

mod common;

use netchannel::channel::{Channel, WakeMode};
use rtrb::{CopyToUninit, RingBuffer};

const CAPACITY: usize = 4096;
const ITEMS: usize = 1 << 20;
const BURSTS: [usize; 3] = [1, 32, 256];
const CONTENDERS: [&str; 3] = ["netchannel-park", "netchannel-poll", "rtrb"];

#[inline(never)]
fn netchannel(mode: WakeMode, burst: usize, items: usize) -> u64 {
    let (mut tx, mut rx) = Channel::builder(CAPACITY).wake(mode).build().expect("channel");
    let src: Vec<u32> = (0..).take(burst).collect();
    let mut out = vec![0u32; burst];
    let mut sum = 0u64;
    for _ in 0..items / burst {
        if burst == 1 {
            tx.push(black_box(src[0])).expect("room");
            sum += u64::from(rx.pop().expect("item"));
        } else {
            assert_eq!(tx.push_burst(black_box(&src)), burst);
            assert_eq!(rx.pop_burst(&mut out), burst);
            sum += out.iter().map(|&x| u64::from(x)).sum::<u64>();
        }
    }
    sum
}

#[inline(never)]
fn rtrb(burst: usize, items: usize) -> u64 {
    let (mut tx, mut rx) = RingBuffer::<u32>::new(CAPACITY);
    let src: Vec<u32> = (0..).take(burst).collect();
    let mut out = vec![0u32; burst];
    let mut sum = 0u64;
    for _ in 0..items / burst {
        if burst == 1 {
            tx.push(black_box(src[0])).expect("room");
            sum += u64::from(rx.pop().expect("item"));
        } else {
            let mut chunk = tx.write_chunk_uninit(burst).expect("room");
            let (a, b) = chunk.as_mut_slices();
            let m = a.len();
            black_box(&src)[..m].copy_to_uninit(a);
            src[m..].copy_to_uninit(b);
            // SAFETY: both slices of the chunk were initialised just above.
            unsafe { chunk.commit_all() };
            let chunk = rx.read_chunk(burst).expect("items");
            let (a, b) = chunk.as_slices();
            out[..a.len()].copy_from_slice(a);
            out[a.len()..].copy_from_slice(b);
            chunk.commit_all();
            sum += out.iter().map(|&x| u64::from(x)).sum::<u64>();
        }
    }
    sum
}

/// The child: runs one contender and prints its checksum.
fn child(contender: &str, burst: usize, items: usize) {
    let sum = match contender {
        "netchannel-park" => netchannel(WakeMode::Park, burst, items),
        "netchannel-poll" => netchannel(WakeMode::Poll, burst, items),
        "rtrb" => rtrb(burst, items),
        other => panic!("unknown contender {other}"),
    };
    println!("{sum}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let parse = |i: usize| args.get(i).and_then(|s| s.parse().ok()).expect("burst and item count");
        child(&args[2], parse(3), parse(4));
        return;
    }
    if !common::have_valgrind() {
        println!("channel_icount: valgrind is not installed; skipping the instruction counts");
        return;
    }
    println!("instructions per item, one thread, push + pop, capacity {CAPACITY}, {ITEMS} items");
    println!("| burst | netchannel-park | netchannel-poll | rtrb | rtrb/park | rtrb/poll |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for burst in BURSTS {
        let mut per_item = [0f64; CONTENDERS.len()];
        for (slot, contender) in per_item.iter_mut().zip(CONTENDERS) {
            let run = |items: usize| {
                let args = [contender.to_owned(), burst.to_string(), items.to_string()];
                common::callgrind_instructions(&[], &args).unwrap_or_else(|e| panic!("{e}"))
            };
            let (full, empty) = (run(ITEMS), run(0));
            *slot = (full - empty) as f64 / ITEMS as f64;
        }
        let [park, poll, rtrb] = per_item;
        println!(
            "| {burst} | {park:.1} | {poll:.1} | {rtrb:.1} | {:.2}x | {:.2}x |",
            rtrb / park,
            rtrb / poll
        );
    }
}
