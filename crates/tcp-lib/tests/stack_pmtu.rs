//! PMTU discovery (RFC 1191) on two stacks: a router between them with a smaller MTU drops A's
//! oversized datagrams and reports them with ICMP fragmentation needed; A lowers its send MSS and
//! resends. A forged report with a sequence number outside the flight is ignored (RFC 5927).

mod common;

use std::net::Ipv4Addr;

use common::{A_IP, Net, Rng};
use netchannel::dev::{NetDevice, PacketBatch};
use tcp_lib::stack::StreamId;
use tcp_lib::tcp::State;
use tcp_lib::wire::icmpv4::DstUnreachable;
use tcp_lib::wire::{
    ChecksumPolicy, EtherType, EthernetFrame, EthernetRepr, Icmpv4Packet, Icmpv4Repr, Ipv4Packet, Ipv4Repr,
    Protocol, SeqNumber, TcpPacket,
};

const ROUTER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 254);

/// What the router saw of A's TCP datagrams.
#[derive(Default)]
struct Router {
    /// The link MTU towards B, if limited.
    mtu: Option<usize>,
    /// Fragmentation-needed messages sent to A.
    reports: usize,
    /// The largest TCP payload forwarded since the last report.
    largest_since_report: usize,
    /// The sequence number of the last TCP segment from A with data.
    last_seq: Option<SeqNumber>,
}

/// An ICMP fragmentation needed from the router to A, quoting `ip` and the first 8 bytes of
/// `payload`, with the sequence number in them replaced by `seq` when given.
fn frag_needed(net: &Net, ip: &Ipv4Repr, payload: &[u8], mtu: u16, seq: Option<SeqNumber>) -> Vec<u8> {
    let mut quoted = payload[..8].to_vec();
    if let Some(seq) = seq {
        quoted[4..8].copy_from_slice(&seq.get().to_be_bytes());
    }
    let icmp = Icmpv4Repr::DstUnreachable {
        reason: DstUnreachable::FragRequired,
        next_hop_mtu: mtu,
        header: *ip,
        data: &quoted,
    };
    let outer = Ipv4Repr {
        src_addr: ROUTER,
        dst_addr: A_IP,
        protocol: Protocol::Icmp,
        payload_len: icmp.buffer_len(),
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 7,
        dont_frag: false,
    };
    let eth =
        EthernetRepr { src_addr: net.mac_b(), dst_addr: net.mac_a(), vlan: None, ethertype: EtherType::Ipv4 };
    let mut buf = vec![0u8; eth.buffer_len(outer.buffer_len())];
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
    outer.emit(&mut packet);
    icmp.emit(&mut Icmpv4Packet::new_unchecked(packet.payload_mut()));
    buf
}

/// One tick: A polls; the router takes A's frames off the wire and either forwards them to B or,
/// for TCP datagrams over its MTU, drops them and reports to A; B runs timers and transmits.
fn step(net: &mut Net, router: &mut Router) {
    net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
    let mut batch = PacketBatch::with_capacity(64);
    let mut reports = Vec::new();
    loop {
        let n = net.dev_b.rx_burst(0, &net.cache, &mut batch).unwrap();
        for packet in batch.drain() {
            let frame = packet.data();
            let tcp = EthernetFrame::new_checked(frame)
                .ok()
                .filter(|e| e.ethertype() == EtherType::Ipv4)
                .and_then(|e| {
                    let ip = Ipv4Packet::new_checked(e.payload()).ok()?;
                    let repr = Ipv4Repr::parse(&ip, ChecksumPolicy::Verify).ok()?;
                    (repr.protocol == Protocol::Tcp).then(|| (repr, ip.payload().to_vec()))
                });
            if let Some((ip, payload)) = tcp {
                let seg = TcpPacket::new_checked(&payload[..]).unwrap();
                let data_len = payload.len() - seg.header_len();
                if data_len > 0 {
                    router.last_seq = Some(seg.seq_number());
                }
                if let Some(mtu) = router.mtu
                    && ip.buffer_len() > mtu
                {
                    reports.push(frag_needed(net, &ip, &payload, u16::try_from(mtu).unwrap(), None));
                    router.reports += 1;
                    router.largest_since_report = 0;
                    continue;
                }
                router.largest_since_report = router.largest_since_report.max(data_len);
            }
            net.b.receive(net.now, frame);
        }
        if n < 64 {
            break;
        }
    }
    for r in reports {
        net.a.receive(net.now, &r);
    }
    net.b.handle_timeout(net.now);
    while net.b.transmit(net.now, &net.cache, &mut batch) > 0 {
        net.dev_b.tx_burst(0, &mut batch).unwrap();
    }
    net.now += common::TICK;
}

fn open(net: &mut Net, router: &mut Router) -> (StreamId, StreamId) {
    let l = net.b.listen(80).unwrap();
    let c = net.a.connect(Net::b_addr(80)).unwrap();
    let mut s = None;
    for _ in 0..100 {
        s = s.or_else(|| net.b.accept(l));
        if let Some(s) = s
            && net.a.state(c) == Ok(State::Established)
        {
            return (c, s);
        }
        step(net, router);
    }
    panic!("no connection");
}

/// Sends `data` from A to B through the router; returns what B received.
fn transfer(
    net: &mut Net,
    router: &mut Router,
    ab: (StreamId, StreamId),
    data: &[u8],
    steps: usize,
) -> Vec<u8> {
    let (c, s) = ab;
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..steps {
        if sent < data.len()
            && let Ok(n) = net.a.send(c, &data[sent..])
        {
            sent += n;
        }
        step(net, router);
        while let Ok(n) = net.b.recv(s, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        if got.len() == data.len() {
            break;
        }
    }
    got
}

#[test]
fn frag_needed_lowers_the_mss_and_the_transfer_continues() {
    let mut net = Net::new();
    let mut router = Router::default();
    let ab = open(&mut net, &mut router);
    let full = net.a.send_mss(ab.0).unwrap();
    assert!(full > 1000, "full-sized segments first: {full}");
    let data = Rng(5).bytes(400_000);
    // A first part at full size, then the path shrinks to 576 bytes mid-transfer.
    let got = transfer(&mut net, &mut router, ab, &data[..100_000], 20_000);
    assert_eq!(got.len(), 100_000);
    assert_eq!(router.largest_since_report, full);
    router.mtu = Some(576);
    let got2 = transfer(&mut net, &mut router, ab, &data[100_000..], 100_000);
    assert!(got2 == data[100_000..], "byte-exact after the MTU dropped");
    let mss = net.a.send_mss(ab.0).unwrap();
    // 576 less 40 bytes of headers and 12 of the timestamps option.
    assert_eq!(mss, 576 - 40 - 12);
    assert!(router.reports >= 1);
    assert_eq!(net.a.stats().icmp_pmtu_updates, 1, "one report lowers it; later ones are not lower");
    assert!(router.largest_since_report <= mss && router.largest_since_report > 0);
}

#[test]
fn forged_frag_needed_outside_the_flight_is_ignored() {
    let mut net = Net::new();
    let mut router = Router::default();
    let ab = open(&mut net, &mut router);
    let full = net.a.send_mss(ab.0).unwrap();
    let data = Rng(9).bytes(300_000);
    let got = transfer(&mut net, &mut router, ab, &data[..50_000], 20_000);
    assert_eq!(got.len(), 50_000);
    // Keep data flowing; right after a step A has not yet seen B's ACK of the last segment sent.
    let mut sent = net.a.send(ab.0, &data[50_000..]).unwrap();
    step(&mut net, &mut router);
    let in_flight = router.last_seq.unwrap();
    let (local, remote) = net.a.addrs(ab.0).unwrap();
    let ip = Ipv4Repr {
        src_addr: A_IP,
        dst_addr: match remote.ip() {
            std::net::IpAddr::V4(a) => a,
            std::net::IpAddr::V6(_) => unreachable!("an IPv4 connection"),
        },
        protocol: Protocol::Tcp,
        payload_len: 1500,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 1,
        dont_frag: true,
    };
    let mut head = Vec::new();
    head.extend_from_slice(&local.port().to_be_bytes());
    head.extend_from_slice(&remote.port().to_be_bytes());
    head.extend_from_slice(&[0; 4]);
    let report = |net: &mut Net, mtu: u16, seq: SeqNumber| {
        let f = frag_needed(net, &ip, &head, mtu, Some(seq));
        net.a.receive(net.now, &f);
    };
    // Blind: a sequence number far outside SND.UNA..SND.NXT.
    report(&mut net, 576, in_flight + (1usize << 30));
    report(&mut net, 576, in_flight + (3usize << 30));
    assert_eq!(net.a.send_mss(ab.0).unwrap(), full);
    assert_eq!(net.a.stats().icmp_pmtu_ignored, 2);
    // Another connection's 4-tuple: ignored too.
    let mut other = head.clone();
    other[0..2].copy_from_slice(&1u16.to_be_bytes());
    let f = frag_needed(&net, &ip, &other, 576, Some(in_flight));
    net.a.receive(net.now, &f);
    assert_eq!(net.a.stats().icmp_pmtu_ignored, 3);
    // In flight: accepted. A larger MTU afterwards is not taken; one below 68 stops at 68.
    report(&mut net, 1400, in_flight);
    assert_eq!(net.a.send_mss(ab.0).unwrap(), 1400 - 40 - 12);
    report(&mut net, 1500, in_flight);
    assert_eq!(net.a.send_mss(ab.0).unwrap(), 1400 - 40 - 12);
    report(&mut net, 20, in_flight);
    assert_eq!(net.a.send_mss(ab.0).unwrap(), 68 - 40 - 12);
    assert_eq!((net.a.stats().icmp_pmtu_updates, net.a.stats().icmp_pmtu_ignored), (2, 4));
    // The transfer still completes, byte-exact, in 16-byte segments.
    router.largest_since_report = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..400_000 {
        if sent < data.len() - 50_000
            && let Ok(n) = net.a.send(ab.0, &data[50_000 + sent..])
        {
            sent += n;
        }
        step(&mut net, &mut router);
        while let Ok(n) = net.b.recv(ab.1, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        if got.len() == data.len() - 50_000 {
            break;
        }
    }
    assert!(got == data[50_000..], "byte-exact: {} of {}", got.len(), data.len() - 50_000);
    assert_eq!(router.largest_since_report, 16);
}
