//! Criterion benchmarks of the frame classifier (`netchannel::classify::classify`): nanoseconds per
//! frame for the shapes a channelizer sees.
//!
//! * `classify/<case>`: one frame classified over and over (every branch predicted, the frame in L1):
//!   the classifier's own cost on the fast path.
//! * `classify_burst32/<case>`: a burst of 32 frames of the case's shape with different addresses and
//!   ports, classified and each signature hashed with [`Signature::hash64`] and recorded in
//!   [`ClassifyStats`]: closer to the channelizer's per-packet work before the registry probe.
//!
//! Cases: `ipv4-tcp` (Ethernet, IPv4 without options, TCP with 12 option bytes), `ipv4-udp-vlan`
//! (802.1Q tag, IPv4, UDP), `ipv6-tcp-ext` (IPv6 with one Destination Options header, TCP), and
//! `malformed` (an IPv4/TCP frame cut inside the TCP header).
//!
//! The anchor, in the same run: `classify/etherparse-<case>` parses the same frame with etherparse's
//! zero-copy `SlicedPacket::from_ethernet` (the usual Rust packet parser) and reduces it to the same
//! 5-tuple (protocol, addresses, ports); a fragment, a non-IP frame or a parse error gives none.
//!
//! Run with `cargo bench -p netchannels-benches --bench classify`. For a noise-free figure, the same binary counts
//! instructions under callgrind: `CLASSIFY_ICOUNT=<case>:<n> valgrind --tool=callgrind <bench binary>`
//! classifies the case's frame `n` times in a loop and exits before Criterion starts; the instructions
//! per frame are `(I(n) - I(0)) / n`. `CLASSIFY_ICOUNT=etherparse-<case>:<n>` does the same for the
//! anchor.

use std::hint::black_box;
use std::time::Duration;

use std::net::IpAddr;

use criterion::{Criterion, Throughput, criterion_group};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use netchannel::classify::{Classified, ClassifyStats, classify};
use netchannel::registry::HashKey;
use netchannel::signature::Signature;

/// The hash key the hashing loop uses.
const KEY: HashKey = HashKey::from_seed(0x5eed);

const CASES: [&str; 4] = ["ipv4-tcp", "ipv4-udp-vlan", "ipv6-tcp-ext", "malformed"];

fn ethernet(vlan: bool, ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn ports(src: u16, dst: u16) -> [u8; 4] {
    let [a, b] = src.to_be_bytes();
    let [c, d] = dst.to_be_bytes();
    [a, b, c, d]
}

fn tcp(src: u16, dst: u16) -> Vec<u8> {
    let mut t = ports(src, dst).to_vec();
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x80, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]); // NOP NOP timestamps
    t
}

fn ipv4(proto: u8, i: u16, l4: &[u8]) -> Vec<u8> {
    let total = u16::try_from(20 + l4.len()).expect("small");
    let [t0, t1] = total.to_be_bytes();
    let [i0, i1] = i.to_be_bytes();
    let mut p = vec![0x45, 0, t0, t1, 0, 0, 0x40, 0, 64, proto, 0, 0, 10, 1, i0, i1, 10, 0, 0, 1];
    p.extend_from_slice(l4);
    p
}

/// The case's frame; `i` varies the remote address and port.
fn frame(case: &str, i: u16) -> Vec<u8> {
    let sport = 1024 + i.wrapping_mul(7919);
    match case {
        "ipv4-tcp" => [ethernet(false, 0x0800), ipv4(6, i, &tcp(sport, 80))].concat(),
        "ipv4-udp-vlan" => {
            let mut udp = ports(sport, 53).to_vec();
            udp.extend_from_slice(&[0, 40, 0, 0]);
            udp.resize(40, 0);
            [ethernet(true, 0x0800), ipv4(17, i, &udp)].concat()
        }
        "ipv6-tcp-ext" => {
            let mut ext = vec![6, 0, 1, 4, 0, 0, 0, 0]; // Destination Options, PadN
            ext.extend_from_slice(&tcp(sport, 443));
            let [l0, l1] = u16::try_from(ext.len()).expect("small").to_be_bytes();
            let mut p = vec![0x60, 0, 0, 0, l0, l1, 60, 64];
            p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            p.extend_from_slice(&i.to_be_bytes());
            p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            p.extend_from_slice(&ext);
            [ethernet(false, 0x86DD), p].concat()
        }
        "malformed" => {
            let mut f = frame("ipv4-tcp", i);
            f.truncate(14 + 20 + 10);
            f
        }
        other => panic!("unknown case {other}"),
    }
}

fn expect_shape(case: &str, c: &Classified) {
    let flow = matches!(c, Classified::Flow { .. });
    assert_eq!(flow, case != "malformed", "{case}: {c:?}");
}

/// The anchor: etherparse's slicer reduced to what `classify` extracts, the 5-tuple.
#[inline]
fn etherparse_tuple(frame: &[u8]) -> Option<(u8, IpAddr, IpAddr, u16, u16)> {
    let packet = SlicedPacket::from_ethernet(frame).ok()?;
    let (src, dst) = match packet.net? {
        NetSlice::Ipv4(ip) => {
            (IpAddr::V4(ip.header().source_addr()), IpAddr::V4(ip.header().destination_addr()))
        }
        NetSlice::Ipv6(ip) => {
            (IpAddr::V6(ip.header().source_addr()), IpAddr::V6(ip.header().destination_addr()))
        }
        NetSlice::Arp(_) => return None,
    };
    match packet.transport? {
        TransportSlice::Tcp(t) => Some((6, src, dst, t.source_port(), t.destination_port())),
        TransportSlice::Udp(u) => Some((17, src, dst, u.source_port(), u.destination_port())),
        _ => None,
    }
}

#[inline(never)]
fn etherparse_n(frame: &[u8], n: u64) -> u64 {
    let mut flows = 0;
    for _ in 0..n {
        flows += u64::from(etherparse_tuple(black_box(frame)).is_some());
    }
    flows
}

#[inline(never)]
fn classify_n(frame: &[u8], n: u64) -> u64 {
    let mut flows = 0;
    for _ in 0..n {
        flows += u64::from(matches!(classify(black_box(frame)), Classified::Flow { .. }));
    }
    flows
}

/// `CLASSIFY_ICOUNT=<case>:<n>`: the callgrind mode (see the module documentation).
fn icount_mode() -> bool {
    let Ok(spec) = std::env::var("CLASSIFY_ICOUNT") else { return false };
    let (case, n) = spec.split_once(':').expect("CLASSIFY_ICOUNT=<case>:<n>");
    let n: u64 = n.parse().expect("a count");
    if let Some(case) = case.strip_prefix("etherparse-") {
        let f = frame(case, 1);
        println!("etherparse {case}: {} flows", etherparse_n(&f, n));
        return true;
    }
    let f = frame(case, 1);
    expect_shape(case, &classify(&f));
    println!("{case}: {} flows", classify_n(&f, n));
    true
}

fn benches(c: &mut Criterion) {
    let mut single = c.benchmark_group("classify");
    single.throughput(Throughput::Elements(1));
    for case in CASES {
        let f = frame(case, 1);
        expect_shape(case, &classify(&f));
        single.bench_function(case, |b| b.iter(|| classify(black_box(&f))));
        // Both parsers must see the same flow (or both none) for the comparison to mean anything.
        let ours = classify(&f).signature().map(|s| (s.remote().port(), s.local().port()));
        let theirs = etherparse_tuple(&f).map(|t| (t.3, t.4));
        assert_eq!(ours, theirs, "{case}: classify and etherparse disagree");
        single.bench_function(format!("etherparse-{case}"), |b| b.iter(|| etherparse_tuple(black_box(&f))));
    }
    single.finish();

    let mut burst = c.benchmark_group("classify_burst32");
    burst.throughput(Throughput::Elements(32));
    for case in CASES {
        let frames: Vec<Vec<u8>> = (0..32).map(|i| frame(case, i)).collect();
        burst.bench_function(case, |b| {
            let mut stats = ClassifyStats::default();
            b.iter(|| {
                let mut acc = 0u64;
                for f in &frames {
                    let c = classify(black_box(f));
                    stats.record(&c);
                    if let Some(sig) = c.signature() {
                        acc ^= Signature::hash64(sig, &KEY);
                    }
                }
                acc
            });
            black_box(stats);
        });
    }
    burst.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2))
}

criterion_group! { name = classify_benches; config = config(); targets = benches }

fn main() {
    if icount_mode() {
        return;
    }
    classify_benches();
    Criterion::default().configure_from_args().final_summary();
}
