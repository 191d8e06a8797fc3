//! What a consumer pays to get ready to sleep on N channels at once (a runtime core polling every
//! input channel's eventfd in one `poll(2)`): asking each producer for a wakeup and re-checking each
//! ring after a StoreLoad barrier. `per-channel` calls `Consumer::request_wakeup` on each channel (a
//! `membarrier(2)` each); `batched` arms them all with one `WakeupBatch` (one `membarrier(2)`), then
//! re-checks them all. Channels use `WakeMode::EventFd`, as the runtime's do.
//!
//! `membarrier(2)` interrupts every CPU that runs one of the process's threads, so a thread spins
//! on the other CPU (as a busy-polling neighbour core would) while the cases run; without it the
//! barrier is nearly free in a one-thread process and the comparison says nothing.
//!
//! Run with `cargo bench -p netchannels-benches --bench sleep_entry`.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

mod common;
use common::pin_to_cpu;

use criterion::{BenchmarkId, Criterion};
use netchannel::channel::{Channel, Consumer, Producer, WakeMode, WakeupBatch};

/// Channels per sleep entry: one, a 4-core runtime's inputs (3 neighbours and the default), 16.
const CHANNELS: [usize; 3] = [1, 4, 16];

fn channels(n: usize) -> (Vec<Producer>, Vec<Consumer>) {
    (0..n).map(|_| Channel::builder(64).wake(WakeMode::EventFd).build().expect("an eventfd channel")).unzip()
}

fn main() {
    pin_to_cpu(0);
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            pin_to_cpu(1);
            // Relaxed: a plain flag; the join orders the rest.
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("sleep_entry");
    for n in CHANNELS {
        let (_senders, mut rxs) = channels(n);
        group.bench_with_input(BenchmarkId::new("per-channel", n), &n, |b, _| {
            b.iter(|| {
                // Every channel is asked, as a core going to sleep asks them all.
                let mut idle = true;
                for rx in &mut rxs {
                    idle &= rx.request_wakeup();
                }
                idle
            });
        });
        group.bench_with_input(BenchmarkId::new("batched", n), &n, |b, _| {
            b.iter(|| {
                let mut batch = WakeupBatch::new();
                let mut armed = true;
                for rx in &mut rxs {
                    armed &= batch.arm(rx);
                }
                let fenced = batch.fence();
                let mut idle = black_box(armed);
                for rx in &mut rxs {
                    idle &= fenced.idle(rx);
                }
                idle
            });
        });
    }
    group.finish();
    c.final_summary();
    // Relaxed: a plain flag; the join orders the rest.
    stop.store(true, Ordering::Relaxed);
    spinner.join().expect("the spinner thread");
}
