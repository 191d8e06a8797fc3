//! The channelizer's full per-packet path, counted by `valgrind --tool=callgrind`: device RX burst
//! (the in-memory `Pair`), classify, registry lookup, push into the consumer's channel, the quiescent
//! state, at burst 32 with 1, 10k and 100k signatures registered. Target (the issue's): at or under 100
//! instructions per packet at burst 32 with 10k signatures.
//!
//! `cargo bench --bench channelizer_icount` runs this binary under callgrind with collection switched
//! on only inside `Channelizer::poll` (`--toggle-collect`), so the peer that fills the wire and the
//! consumers that drain the channels are not counted. It also times the same loop without valgrind
//! and reports ns per packet (noisy on a shared VM; the instruction count is the stable figure).

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use netchannel::channelizer::{Channelizer, ConsumerId, SignatureRegistry};
use netchannel::dev::{NetDevice, PacketBatch, Pair};
use netchannel::pool::{HugePages, PacketRx, Pool};
use netchannel::rcu::Qsbr;
use netchannel::signature::{Proto, Signature};

const BURST: usize = 32;
const ROUNDS: usize = 20_000;
const CONSUMERS: u32 = 4;
const SIZES: [u32; 3] = [1, 10_000, 100_000];
const TARGET: f64 = 100.0;

/// The flow `i`: TCP 10.0.x.y:80 <- 10.1.x.y:(1024 + i % 50000).
fn flow(i: u32) -> (SocketAddrV4, SocketAddrV4) {
    let [_, _, a, b] = i.to_be_bytes();
    let port = u16::try_from(1024 + i % 50_000).expect("fits");
    (SocketAddrV4::new(Ipv4Addr::new(10, 0, a, b), 80), SocketAddrV4::new(Ipv4Addr::new(10, 1, a, b), port))
}

/// An Ethernet/IPv4/TCP frame of flow `i` with a 64-byte payload.
fn frame(i: u32) -> Vec<u8> {
    let (local, remote) = flow(i);
    let mut f = vec![
        0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00, 0x45, 0, 0, 104, 0, 0, 0x40, 0, 64, 6, 0, 0,
    ];
    f.extend_from_slice(&remote.ip().octets());
    f.extend_from_slice(&local.ip().octets());
    f.extend_from_slice(&remote.port().to_be_bytes());
    f.extend_from_slice(&local.port().to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(&[0xab; 64]);
    f
}

#[inline(never)]
fn poll_once<D: NetDevice>(ch: &mut Channelizer<'_, D>) -> usize {
    ch.poll().expect("poll").rx
}

/// Runs `rounds` bursts through a channelizer with `entries` signatures registered; returns the time
/// spent inside `poll`.
fn run(entries: u32, rounds: usize) -> Duration {
    let pool = Pool::builder(16_384).hugepages(HugePages::Prefer).build().expect("pool");
    let (nic, mut wire) = Pair::builder(&pool).capacity(4096).build().expect("pair");
    // A fixed seed: the counts depend on chain lengths, which depend on the seed.
    let registry = Arc::new(SignatureRegistry::with_capacity_and_seed(Qsbr::new(), entries as usize, 0x5eed));
    let registrations: Vec<_> = (0..entries)
        .map(|i| {
            let (local, remote) = flow(i);
            let sig = Signature::new(Proto::Tcp, SocketAddr::V4(local), SocketAddr::V4(remote)).expect("v4");
            registry.register(sig, ConsumerId(i % CONSUMERS)).expect("distinct flows")
        })
        .collect();
    let cache = pool.cache();
    let peer = pool.cache();
    let (default_tx, mut default_rx) = pool.packet_channel(4096).expect("channel");
    let mut ch = Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx)
        .burst(BURST)
        .build()
        .expect("same pool");
    let mut consumers: Vec<PacketRx> = (0..CONSUMERS)
        .map(|id| {
            let (tx, rx) = pool.packet_channel(4096).expect("channel");
            ch.attach(ConsumerId(id), tx).expect("same pool");
            rx
        })
        .collect();
    // Frames of registered flows spread over the table.
    let step = (entries / 256).max(1);
    let frames: Vec<Vec<u8>> = (0..256).map(|k| frame((k * step) % entries)).collect();
    let mut batch = PacketBatch::with_capacity(BURST);
    let mut inside = Duration::ZERO;
    for round in 0..rounds {
        for k in 0..BURST {
            let mut p = peer.alloc().expect("buffer");
            p.extend_from_slice(&frames[(round * BURST + k) % frames.len()]).expect("fits");
            let _ = batch.push(p);
        }
        assert_eq!(wire.tx_burst(0, &mut batch).expect("wire"), BURST);
        let t = Instant::now();
        assert_eq!(poll_once(black_box(&mut ch)), BURST);
        inside += t.elapsed();
        for rx in &mut consumers {
            while rx.pop(&cache).is_some() {}
        }
    }
    let stats = ch.stats();
    assert_eq!(stats.delivered, (rounds * BURST) as u64, "every packet reaches its consumer: {stats:?}");
    assert!(default_rx.pop(&cache).is_none());
    drop(registrations);
    inside
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let entries = args.get(2).and_then(|s| s.parse().ok()).expect("entries");
        let rounds = args.get(3).and_then(|s| s.parse().ok()).expect("rounds");
        let _ = run(entries, rounds);
        return;
    }
    let have_valgrind = common::have_valgrind();
    println!(
        "channelizer full path per packet at burst {BURST}: rx_burst + classify + lookup + push (IPv4/TCP)"
    );
    println!("| signatures | instructions/packet | target | ns/packet |");
    println!("|---:|---:|---:|---:|");
    for entries in SIZES {
        let packets = (ROUNDS * BURST) as f64;
        let ns = run(entries, ROUNDS).as_nanos() as f64 / packets;
        let instructions = if have_valgrind {
            let per = |rounds: usize| {
                let args = [entries.to_string(), rounds.to_string()];
                common::callgrind_instructions(&["--toggle-collect=*poll_once*"], &args)
                    .unwrap_or_else(|e| panic!("{e}"))
            };
            // Subtract a short run so set-up inside the first polls is not counted.
            let (full, short) = (per(ROUNDS), per(ROUNDS / 10));
            format!("{:.1}", (full - short) as f64 / (packets - (ROUNDS / 10 * BURST) as f64))
        } else {
            "valgrind not installed".to_owned()
        };
        println!("| {entries} | {instructions} | <= {TARGET} | {ns:.1} |");
    }
}
