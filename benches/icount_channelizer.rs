//! Instruction counts of the channelizer's full per-packet path: device RX burst (the in-memory
//! `Pair`), classify, registry lookup, push into the consumer's channel and the quiescent state, at
//! burst 32 with 1, 1k, 10k and 100k signatures registered, 4 consumers (with 1 signature every packet
//! is of the one flow, so each burst reaches one consumer, not four). Target (the issue's): at or
//! under 100 instructions per packet at burst 32 with 10k signatures, flat from 1 to 100k.
//!
//! Run with `cargo bench -p netchannels-benches --bench icount_channelizer` (gungraun under callgrind; `scripts/icount.sh` runs
//! it and checks the counts against `benches/icount/baseline.tsv`). Each benchmark,
//! `poll/channelizer/sigs<S>_n4096`, calls `Channelizer::poll` [`ROUNDS`] times, each receiving a burst
//! of [`BURST`] frames of registered IPv4/TCP flows, so the instructions per packet are the count
//! divided by 4096 (the id's `_n4096` suffix). Gungraun's `setup`, which is not counted, builds the
//! pool, the registry (a fixed hash seed: chain lengths, and so the counts, depend on it), the
//! channelizer with its consumers' channels (large enough to take every packet, so nothing drains them
//! during the run) and puts all 4096 frames on the wire beforehand, so only the channelizer's work is
//! counted. The rig is returned, so tearing it down is not counted either.
#![allow(missing_docs, reason = "gungraun's macros generate undocumented public modules and functions")]

#[path = "common/flows.rs"]
mod flows;

use flows::{flow, tcp_frame};

use std::net::SocketAddr;
use std::sync::Arc;

use gungraun::{library_benchmark, library_benchmark_group, main};
use netchannel::channelizer::{Channelizer, ConsumerId, SignatureRegistry};
use netchannel::dev::{NetDevice, PacketBatch, Pair};
use netchannel::pool::{HugePages, PacketRx, Pool, PoolCache};
use netchannel::rcu::Qsbr;
use netchannel::registry::Registration;
use netchannel::signature::{Proto, Signature};

/// Frames per poll.
const BURST: usize = 32;
/// Polls per benchmark run: 4096 packets.
const ROUNDS: usize = 128;
/// Consumers the signatures are spread over.
const CONSUMERS: u32 = 4;

/// A channelizer with its wire filled, its consumers' channels and its registry's entries.
struct Rig {
    channelizer: Channelizer<'static, Pair>,
    /// The channelizer's cache (leaked: it must outlive the channelizer).
    cache: &'static PoolCache,
    /// The wire's other end: it must stay open while the channelizer receives.
    _wire: Pair,
    consumers: Vec<PacketRx>,
    default: PacketRx,
    registrations: Vec<Registration<Signature, ConsumerId, Qsbr>>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        // The process ends right after the benchmark: skip unregistering 100k entries one by one.
        std::mem::forget(std::mem::take(&mut self.registrations));
    }
}

/// Builds the rig with `entries` signatures registered and [`ROUNDS`] bursts on the wire.
fn rig(entries: u32) -> Rig {
    let pool = Pool::builder(16_384).hugepages(HugePages::Never).build().expect("pool");
    let (nic, mut wire) = Pair::builder(&pool).capacity(8192).build().expect("pair");
    let registry = Arc::new(SignatureRegistry::with_capacity_and_seed(Qsbr::new(), entries as usize, 0x5eed));
    let registrations = (0..entries)
        .map(|i| {
            let (local, remote) = flow(i);
            let sig = Signature::new(Proto::Tcp, SocketAddr::V4(local), SocketAddr::V4(remote)).expect("v4");
            registry.register(sig, ConsumerId(i % CONSUMERS)).expect("distinct flows")
        })
        .collect();
    // The channelizer borrows its cache for its whole life; the benchmark process ends soon after.
    let cache: &'static PoolCache = Box::leak(Box::new(pool.cache()));
    let (default_tx, default) = pool.packet_channel(8192).expect("channel");
    let mut channelizer = Channelizer::builder(nic, cache, registry, default_tx)
        .queue(0)
        .burst(BURST)
        .build()
        .expect("same pool");
    let consumers = (0..CONSUMERS)
        .map(|id| {
            let (tx, rx) = pool.packet_channel(8192).expect("channel");
            channelizer.attach(ConsumerId(id), tx).expect("same pool");
            rx
        })
        .collect();
    // Frames of registered flows spread over the table, all on the wire before the run.
    let step = (entries / 256).max(1);
    let frames: Vec<Vec<u8>> = (0..256).map(|k| tcp_frame((k * step) % entries, 64)).collect();
    let peer = pool.cache();
    let mut batch = PacketBatch::with_capacity(BURST);
    for round in 0..ROUNDS {
        for k in 0..BURST {
            let mut p = peer.alloc().expect("buffer");
            p.extend_from_slice(&frames[(round * BURST + k) % frames.len()]).expect("fits");
            let _ = batch.push(p);
        }
        assert_eq!(wire.tx_burst(0, &mut batch).expect("wire"), BURST);
    }
    drop(batch);
    Rig { channelizer, cache, _wire: wire, consumers, default, registrations }
}

#[library_benchmark]
#[bench::sigs1_n4096(args = (1), setup = rig, teardown = check)]
#[bench::sigs1k_n4096(args = (1_000), setup = rig, teardown = check)]
#[bench::sigs10k_n4096(args = (10_000), setup = rig, teardown = check)]
#[bench::sigs100k_n4096(args = (100_000), setup = rig, teardown = check)]
fn channelizer(mut rig: Rig) -> Rig {
    for _ in 0..ROUNDS {
        assert_eq!(rig.channelizer.poll().expect("poll").rx, BURST);
    }
    rig
}

/// Not counted: every packet reached a consumer, none the default channel.
fn check(mut rig: Rig) {
    let stats = rig.channelizer.stats();
    assert_eq!(stats.delivered, (ROUNDS * BURST) as u64, "every packet reaches its consumer: {stats:?}");
    let cache = rig.cache;
    assert!(rig.default.pop(cache).is_none(), "nothing went to the default channel");
    let delivered: usize =
        rig.consumers.iter_mut().map(|rx| std::iter::from_fn(|| rx.pop(cache)).count()).sum();
    assert_eq!(delivered, ROUNDS * BURST);
}

library_benchmark_group!(name = poll; benchmarks = channelizer);

main!(library_benchmark_groups = poll);
