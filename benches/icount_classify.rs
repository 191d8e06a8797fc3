//! Instruction counts of the frame classifier (`netchannel::classify::classify`) beside etherparse on
//! the same frames.
//!
//! Run with `cargo bench -p netchannels-benches --bench icount_classify` (gungraun under callgrind; `scripts/icount.sh` runs it
//! and checks the counts against `benches/icount/baseline.tsv`). Each benchmark classifies one frame of
//! a case [`FRAMES`] times, so the instructions per frame are the count divided by 4096 (the id's
//! `_n4096` suffix):
//!
//! * `parse/classifier/<case>_n4096`: our classifier, reduced to "is it a flow".
//! * `parse/etherparse_sliced/<case>_n4096`, the anchor: etherparse's zero-copy `SlicedPacket::from_ethernet`
//!   reduced to the same 5-tuple (protocol, addresses, ports); a fragment, a non-IP frame or a parse
//!   error gives none.
//!
//! Cases (the frames of `benches/classify.rs`, the Criterion timing of the same code): `ipv4_tcp`
//! (Ethernet, IPv4 without options, TCP with 12 option bytes), `ipv4_udp_vlan` (802.1Q tag, IPv4,
//! UDP), `ipv6_tcp_ext` (IPv6 with one Destination Options header, TCP) and `malformed` (an IPv4/TCP
//! frame cut inside the TCP header). The frame is built in gungraun's `setup`, which is not counted;
//! there both parsers are checked to agree on it.
#![allow(missing_docs, reason = "gungraun's macros generate undocumented public modules and functions")]

use std::hint::black_box;
use std::net::IpAddr;

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use gungraun::{library_benchmark, library_benchmark_group, main};
use netchannel::classify::{Classified, classify};

/// Frames classified per benchmark run.
const FRAMES: usize = 4096;

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

fn ipv4(proto: u8, l4: &[u8]) -> Vec<u8> {
    let [t0, t1] = u16::try_from(20 + l4.len()).expect("small").to_be_bytes();
    let mut p = vec![0x45, 0, t0, t1, 0, 0, 0x40, 0, 64, proto, 0, 0, 10, 1, 0, 1, 10, 0, 0, 1];
    p.extend_from_slice(l4);
    p
}

/// The case's frame, checked to be what both parsers agree on.
fn frame(case: &str) -> Vec<u8> {
    let sport = 1024 + 7919;
    let f = match case {
        "ipv4_tcp" => [ethernet(false, 0x0800), ipv4(6, &tcp(sport, 80))].concat(),
        "ipv4_udp_vlan" => {
            let mut udp = ports(sport, 53).to_vec();
            udp.extend_from_slice(&[0, 40, 0, 0]);
            udp.resize(40, 0);
            [ethernet(true, 0x0800), ipv4(17, &udp)].concat()
        }
        "ipv6_tcp_ext" => {
            let mut ext = vec![6, 0, 1, 4, 0, 0, 0, 0]; // Destination Options, PadN
            ext.extend_from_slice(&tcp(sport, 443));
            let [l0, l1] = u16::try_from(ext.len()).expect("small").to_be_bytes();
            let mut p = vec![0x60, 0, 0, 0, l0, l1, 60, 64];
            p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            p.extend_from_slice(&ext);
            [ethernet(false, 0x86DD), p].concat()
        }
        "malformed" => {
            let mut f = frame("ipv4_tcp");
            f.truncate(14 + 20 + 10);
            f
        }
        other => panic!("unknown case {other}"),
    };
    let ours = classify(&f).signature().map(|s| (s.remote().port(), s.local().port()));
    let theirs = etherparse_tuple(&f).map(|t| (t.3, t.4));
    assert_eq!(ours, theirs, "{case}: classify and etherparse disagree");
    assert_eq!(ours.is_some(), case != "malformed", "{case}: {:?}", classify(&f));
    f
}

/// The anchor: etherparse's slicer reduced to what `classify` extracts, the 5-tuple.
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

/// Parses `frame` [`FRAMES`] times with `is_flow` (inlined: one copy per parser) and counts the flows.
#[inline(always)]
fn flows_in(frame: &[u8], is_flow: impl Fn(&[u8]) -> bool) -> usize {
    (0..FRAMES).filter(|_| is_flow(black_box(frame))).count()
}

#[library_benchmark]
#[bench::ipv4_tcp_n4096(args = ("ipv4_tcp"), setup = frame)]
#[bench::ipv4_udp_vlan_n4096(args = ("ipv4_udp_vlan"), setup = frame)]
#[bench::ipv6_tcp_ext_n4096(args = ("ipv6_tcp_ext"), setup = frame)]
#[bench::malformed_n4096(args = ("malformed"), setup = frame)]
fn classifier(frame: Vec<u8>) -> (Vec<u8>, usize) {
    let flows = flows_in(&frame, |f| matches!(classify(f), Classified::Flow { .. }));
    (frame, flows)
}

#[library_benchmark]
#[bench::ipv4_tcp_n4096(args = ("ipv4_tcp"), setup = frame)]
#[bench::ipv4_udp_vlan_n4096(args = ("ipv4_udp_vlan"), setup = frame)]
#[bench::ipv6_tcp_ext_n4096(args = ("ipv6_tcp_ext"), setup = frame)]
#[bench::malformed_n4096(args = ("malformed"), setup = frame)]
fn etherparse_sliced(frame: Vec<u8>) -> (Vec<u8>, usize) {
    let flows = flows_in(&frame, |f| etherparse_tuple(f).is_some());
    (frame, flows)
}

library_benchmark_group!(name = parse; benchmarks = classifier, etherparse_sliced);

main!(library_benchmark_groups = parse);
