//! UDP sockets on two stacks over a `Pair`: echo byte-exact, the connect filter, truncation, the
//! queue bound, ICMP port unreachable and its rate limit, stale handles, zero-copy delivery,
//! checksums.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use common::{A_IP, B_IP, Net, Rng, ipv4_frame};
use netchannel::dev::{NetDevice, PacketBatch};
use tcp_lib::stack::{Deliver, Error, IcmpRateLimit, StreamId, UdpConfig, UdpId};
use tcp_lib::wire::icmpv4::DstUnreachable;
use tcp_lib::wire::{
    EthernetAddress, EthernetFrame, Icmpv4Packet, Icmpv4Repr, Ipv4Packet, Ipv4Repr, Protocol, UdpPacket,
    UdpRepr,
};

fn any(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))
}

fn b(port: u16) -> SocketAddr {
    SocketAddr::from((B_IP, port))
}

/// Polls B once and takes the frames it sent off the wire before A sees them.
fn frames_from_b(net: &mut Net) -> Vec<Vec<u8>> {
    net.b.poll(net.now, &mut net.dev_b, &net.cache).unwrap();
    let mut batch = PacketBatch::with_capacity(256);
    let mut out = Vec::new();
    loop {
        let n = net.dev_a.rx_burst(0, &net.cache, &mut batch).unwrap();
        out.extend(batch.drain().map(|p| p.data().to_vec()));
        if n == 0 {
            return out;
        }
    }
}

/// The ICMP messages among `frames`, as (IP source, type-3 code, quoted IP header, quoted bytes).
fn unreachables(frames: &[Vec<u8>]) -> Vec<(Ipv4Addr, DstUnreachable, Ipv4Repr, Vec<u8>)> {
    let mut out = Vec::new();
    for f in frames {
        let Ok(eth) = EthernetFrame::new_checked(&f[..]) else { continue };
        let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else { continue };
        if ip.protocol() != Protocol::Icmp {
            continue;
        }
        let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
        let repr = Icmpv4Repr::parse(&icmp, tcp_lib::wire::ChecksumPolicy::Verify).unwrap();
        if let Icmpv4Repr::DstUnreachable { reason, header, data, .. } = repr {
            out.push((ip.src_addr(), reason, header, data.to_vec()));
        }
    }
    out
}

/// An Ethernet/IPv4/UDP frame from `src` to `dst` carrying `payload` (checksum `sum`, or the
/// right one).
fn udp_frame(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: &[u8],
    sum: Option<u16>,
) -> Vec<u8> {
    let udp = UdpRepr { src_port: src.port(), dst_port: dst.port(), payload };
    let (s, d) = (*src.ip(), *dst.ip());
    ipv4_frame(src_mac, dst_mac, s, d, Protocol::Udp, udp.buffer_len(), |b| {
        let mut datagram = UdpPacket::new_unchecked(b);
        udp.emit(&mut datagram, s, d);
        if let Some(sum) = sum {
            datagram.set_checksum(sum);
        }
    })
}

/// Resolves ARP both ways (a ping), so that what either stack sends leaves at once.
fn resolve(net: &mut Net) {
    net.a.ping(B_IP, 1, 1, b"").unwrap();
    let (ip_a, ip_b) = (A_IP, B_IP);
    assert!(net.run_until(50, |n| n.a.arp_lookup(ip_b).is_some() && n.b.arp_lookup(ip_a).is_some()));
}

/// Steps until `id` on B has a datagram; returns it.
fn recv_b(net: &mut Net, id: UdpId, buf: &mut [u8]) -> tcp_lib::stack::UdpRecv {
    let mut got = None;
    assert!(net.run_until(100, |n| {
        got = n.b.udp_recv_from(id, buf).ok();
        got.is_some()
    }));
    got.unwrap()
}

#[test]
fn echo_is_byte_exact_over_varied_sizes() {
    let mut net = Net::new();
    let server = net.b.udp_bind(any(7)).unwrap();
    let client = net.a.udp_bind(any(0)).unwrap();
    let local = net.a.udp_local_addr(client).unwrap();
    assert!((49_152..=65_535).contains(&local.port()), "an ephemeral port: {local}");
    assert_eq!(net.a.udp_max_payload(), 1472);
    let mut rng = Rng(11);
    let mut sizes: Vec<usize> = vec![0, 1, 8, 1471, 1472];
    sizes.extend((0..200).map(|_| rng.below(1473)));
    let sent: Vec<Vec<u8>> = sizes.iter().map(|&n| rng.bytes(n)).collect();
    let mut echoed = Vec::new();
    let mut buf = vec![0u8; 2048];
    let mut next = 0;
    for _ in 0..2000 {
        // Up to 16 in flight: the pair's rings and the stacks' queues never overflow.
        while next < sent.len() && next < echoed.len() + 16 {
            assert_eq!(net.a.udp_send_to(client, &sent[next], b(7)), Ok(sent[next].len()));
            next += 1;
        }
        net.step();
        while let Ok(r) = net.b.udp_recv_from(server, &mut buf) {
            assert!(!r.truncated());
            assert_eq!(r.from, SocketAddr::from((A_IP, local.port())));
            net.b.udp_send_to(server, &buf[..r.len], r.from).unwrap();
        }
        while let Ok(r) = net.a.udp_recv_from(client, &mut buf) {
            assert_eq!(r.from, b(7));
            echoed.push(buf[..r.len].to_vec());
        }
        if echoed.len() == sent.len() {
            break;
        }
    }
    assert_eq!(echoed.len(), sent.len());
    assert!(echoed == sent, "every datagram echoed byte-exact, in order");
    let (sa, sb) = (net.a.stats(), net.b.stats());
    let n = u64::try_from(sent.len()).unwrap();
    assert_eq!((sa.udp_datagrams_out, sa.udp_datagrams_in), (n, n));
    assert_eq!((sb.udp_datagrams_out, sb.udp_datagrams_in), (n, n));
    assert_eq!(sb.udp_queue_drops + sb.udp_no_socket + sb.rx_malformed, 0);
    // One byte more than the MTU carries is refused, naming the limit.
    let err = net.a.udp_send_to(client, &[0; 1473], b(7)).unwrap_err();
    assert_eq!(err, Error::MessageTooLong { max: 1472 });
    assert!(err.to_string().contains("1472"), "{err}");
}

#[test]
fn connect_sets_the_destination_and_filters_the_sources() {
    let mut net = Net::new();
    let server = net.b.udp_bind(any(53)).unwrap();
    let a1 = net.a.udp_bind(any(1001)).unwrap();
    let a2 = net.a.udp_bind(any(1002)).unwrap();
    assert_eq!(net.b.udp_send(server, b"x"), Err(Error::NotConnected));
    net.b.udp_connect(server, SocketAddr::from((A_IP, 1001))).unwrap();
    assert_eq!(net.b.udp_peer_addr(server), Ok(Some(SocketAddr::from((A_IP, 1001)))));
    net.a.udp_send_to(a2, b"from a stranger", b(53)).unwrap();
    net.a.udp_send_to(a1, b"from the peer", b(53)).unwrap();
    let mut buf = [0u8; 64];
    let r = recv_b(&mut net, server, &mut buf);
    assert_eq!((&buf[..r.len], r.from), (&b"from the peer"[..], SocketAddr::from((A_IP, 1001))));
    for _ in 0..10 {
        net.step();
    }
    assert_eq!(
        net.b.udp_recv_from(server, &mut buf),
        Err(Error::WouldBlock),
        "the stranger's was not queued"
    );
    assert_eq!(net.b.stats().udp_no_socket, 1);
    assert_eq!(net.b.stats().icmp_port_unreachable, 1, "as Linux: no socket takes it");
    // The connected socket sends without naming the destination.
    net.b.udp_send(server, b"reply").unwrap();
    let mut got = None;
    assert!(net.run_until(50, |n| {
        got = n.a.udp_recv_from(a1, &mut buf).ok();
        got.is_some()
    }));
    assert_eq!(&buf[..got.unwrap().len], b"reply");
    assert_eq!(net.b.udp_connect(server, SocketAddr::from((A_IP, 0))), Err(Error::InvalidPort));
    let outside = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 1), 53));
    assert_eq!(net.b.udp_connect(server, outside), Err(Error::Unreachable), "no gateway");
}

#[test]
fn an_unspecified_ipv6_bind_takes_ipv4_datagrams_and_replies() {
    // `[::]:p` is the dual-stack wildcard (Linux's default `bindv6only=0`): one socket a port.
    let mut net = Net::new();
    let server = net.b.udp_bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 5353))).unwrap();
    assert_eq!(net.b.udp_bind(any(5353)), Err(Error::AddrInUse));
    let client = net.a.udp_bind(any(0)).unwrap();
    net.a.udp_send_to(client, b"query", b(5353)).unwrap();
    let mut buf = [0u8; 16];
    let r = recv_b(&mut net, server, &mut buf);
    assert_eq!(&buf[..r.len], b"query");
    net.b.udp_send_to(server, b"answer", r.from).unwrap();
    let mut got = None;
    assert!(net.run_until(50, |n| {
        got = n.a.udp_recv_from(client, &mut buf).ok();
        got.is_some()
    }));
    assert_eq!(got.unwrap().from, b(5353), "sent from our IPv4 address");
    // IPv6 addresses other than the unspecified one are not the stack's (yet).
    let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 9));
    assert_eq!(net.b.udp_bind(v6), Err(Error::NotLocal));
}

#[test]
fn ephemeral_ports_go_through_the_port_filter_and_skip_taken_ports() {
    use netchannel::signature::FlowGroup;
    let mut net = Net::new();
    let group = FlowGroup::of_port(50_000);
    net.a.set_port_filter(Some(Box::new(move |g| g == group)));
    // The range 49152-65535 holds four ports of the group: each bind takes the next free one.
    let mut ports = Vec::new();
    for _ in 0..4 {
        let id = net.a.udp_bind(any(0)).unwrap();
        let port = net.a.udp_local_addr(id).unwrap().port();
        assert_eq!(FlowGroup::of_port(port), group, "port {port}");
        ports.push(port);
    }
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 4, "four different ports");
    assert_eq!(net.a.udp_bind(any(0)), Err(Error::NoPorts), "the group's ports are all taken");
}

#[test]
fn a_datagram_longer_than_the_buffer_is_truncated_and_says_so() {
    let mut net = Net::new();
    let server = net.b.udp_bind(any(9)).unwrap();
    let client = net.a.udp_bind(any(0)).unwrap();
    let data: Vec<u8> = (0..100).collect();
    net.a.udp_send_to(client, &data, b(9)).unwrap();
    net.a.udp_send_to(client, b"next", b(9)).unwrap();
    let mut small = [0u8; 10];
    let r = recv_b(&mut net, server, &mut small);
    assert_eq!((r.len, r.datagram_len), (10, 100));
    assert!(r.truncated());
    assert_eq!(small[..], data[..10]);
    // The rest of it is gone: the next read is the next datagram.
    let mut buf = [0u8; 10];
    let r = net.b.udp_recv_from(server, &mut buf).unwrap();
    assert_eq!((&buf[..r.len], r.truncated()), (&b"next"[..], false));
    assert_eq!(net.b.udp_queued(server), Ok((0, 0)));
}

#[test]
fn queues_are_bounded_in_datagrams_and_bytes_and_drops_are_counted() {
    let mut net = Net::new();
    let by_count = net.b.udp_bind_with(any(10), UdpConfig { max_datagrams: 4, max_bytes: 1 << 20 }).unwrap();
    let by_bytes = net.b.udp_bind_with(any(11), UdpConfig { max_datagrams: 100, max_bytes: 250 }).unwrap();
    let client = net.a.udp_bind(any(0)).unwrap();
    resolve(&mut net);
    for _ in 0..10 {
        net.a.udp_send_to(client, &[1; 100], b(10)).unwrap();
        net.a.udp_send_to(client, &[2; 100], b(11)).unwrap();
    }
    for _ in 0..20 {
        net.step();
    }
    assert_eq!(net.b.udp_queued(by_count), Ok((4, 400)));
    assert_eq!(net.b.udp_queued(by_bytes), Ok((2, 200)));
    assert_eq!(net.b.stats().udp_queue_drops, 6 + 8);
    assert_eq!(net.b.stats().udp_datagrams_in, 4 + 2);
    // Reading makes room again.
    let mut buf = [0u8; 200];
    net.b.udp_recv_from(by_count, &mut buf).unwrap();
    net.a.udp_send_to(client, &[3; 100], b(10)).unwrap();
    for _ in 0..10 {
        net.step();
    }
    assert_eq!(net.b.udp_queued(by_count), Ok((4, 400)));
    assert_eq!(net.b.stats().udp_queue_drops, 14);
}

#[test]
fn a_closed_port_draws_a_port_unreachable_quoting_the_datagram() {
    let mut net = Net::new();
    let client = net.a.udp_bind(any(4000)).unwrap();
    resolve(&mut net);
    net.a.udp_send_to(client, b"anyone there?", b(5555)).unwrap();
    net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
    let frames = frames_from_b(&mut net);
    let got = unreachables(&frames);
    assert_eq!(got.len(), 1, "{got:?}");
    let (from, reason, header, data) = &got[0];
    assert_eq!((*from, *reason), (B_IP, DstUnreachable::PortUnreachable));
    assert_eq!((header.src_addr, header.dst_addr, header.protocol), (A_IP, B_IP, Protocol::Udp));
    assert_eq!(header.payload_len, 8 + 13);
    // The first 8 bytes of the datagram: its UDP header, ports and all.
    let quoted = UdpPacket::new_unchecked(&data[..]);
    assert_eq!(data.len(), 8);
    assert_eq!((quoted.src_port(), quoted.dst_port(), quoted.len()), (4000, 5555, 21));
    assert_eq!(net.b.stats().udp_no_socket, 1);
    assert_eq!(net.b.stats().icmp_port_unreachable, 1);
}

#[test]
fn port_unreachables_are_rate_limited_and_counted() {
    let mut net = Net::with(|_| {}, |c| c.icmp_errors = IcmpRateLimit { per_second: 10, burst: 5 });
    let client = net.a.udp_bind(any(4000)).unwrap();
    resolve(&mut net);
    for i in 0..20 {
        net.a.udp_send_to(client, &[i], b(6000)).unwrap();
    }
    net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
    assert_eq!(unreachables(&frames_from_b(&mut net)).len(), 5, "the burst");
    let s = net.b.stats();
    assert_eq!((s.udp_no_socket, s.icmp_port_unreachable, s.icmp_rate_limited), (20, 5, 15));
    // A second later the bucket holds ten tokens again (at most its burst of five).
    net.now += Duration::from_secs(1);
    for i in 0..20 {
        net.a.udp_send_to(client, &[i], b(6000)).unwrap();
    }
    net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
    assert_eq!(unreachables(&frames_from_b(&mut net)).len(), 5);
    assert_eq!(net.b.stats().icmp_rate_limited, 30);
    // 100 ms later, one token.
    net.now += Duration::from_millis(100);
    for i in 0..3 {
        net.a.udp_send_to(client, &[i], b(6000)).unwrap();
    }
    net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
    assert_eq!(unreachables(&frames_from_b(&mut net)).len(), 1);
}

#[test]
fn no_port_unreachable_for_invalid_sources_or_broadcasts() {
    let mut net = Net::new();
    resolve(&mut net);
    let (mac_a, mac_b) = (net.mac_a(), net.mac_b());
    let dst = SocketAddrV4::new(B_IP, 7777);
    for src in [Ipv4Addr::UNSPECIFIED, Ipv4Addr::LOCALHOST, B_IP, Ipv4Addr::new(10, 0, 0, 255)] {
        let frame = udp_frame(mac_a, mac_b, SocketAddrV4::new(src, 53), dst, b"spoofed", None);
        net.b.receive(net.now, &frame);
    }
    // To the subnet's broadcast and to a multicast group (both at B's MAC).
    for to in [Ipv4Addr::new(10, 0, 0, 255), Ipv4Addr::new(224, 0, 0, 251)] {
        let frame =
            udp_frame(mac_a, mac_b, SocketAddrV4::new(A_IP, 53), SocketAddrV4::new(to, 7777), b"all", None);
        net.b.receive(net.now, &frame);
    }
    assert!(unreachables(&frames_from_b(&mut net)).is_empty());
    let s = net.b.stats();
    assert_eq!((s.udp_bad_source, s.icmp_port_unreachable), (4, 0));
    // A valid source to the same port is answered.
    let frame = udp_frame(mac_a, mac_b, SocketAddrV4::new(A_IP, 53), dst, b"fine", None);
    net.b.receive(net.now, &frame);
    assert_eq!(unreachables(&frames_from_b(&mut net)).len(), 1);
}

#[test]
fn checksums_are_verified_and_zero_means_none() {
    let mut net = Net::new();
    let server = net.b.udp_bind(any(7)).unwrap();
    let (mac_a, mac_b) = (net.mac_a(), net.mac_b());
    let (src, dst) = (SocketAddrV4::new(A_IP, 99), SocketAddrV4::new(B_IP, 7));
    net.b.receive(net.now, &udp_frame(mac_a, mac_b, src, dst, b"corrupt", Some(0x1234)));
    net.b.receive(net.now, &udp_frame(mac_a, mac_b, src, dst, b"unsummed", Some(0)));
    let mut buf = [0u8; 16];
    let r = net.b.udp_recv_from(server, &mut buf).unwrap();
    assert_eq!(&buf[..r.len], b"unsummed");
    assert_eq!(net.b.udp_recv_from(server, &mut buf), Err(Error::WouldBlock));
    let s = net.b.stats();
    assert_eq!((s.udp_checksum_errors, s.rx_malformed, s.udp_datagrams_in), (1, 1, 1));
}

#[test]
fn stale_handles_taken_ports_and_foreign_addresses_are_refused() {
    let mut net = Net::new();
    let old = net.b.udp_bind(any(53)).unwrap();
    assert_eq!(net.b.udp_bind(b(53)), Err(Error::AddrInUse));
    assert_eq!(net.b.udp_bind(SocketAddr::from((Ipv4Addr::new(10, 0, 0, 9), 54))), Err(Error::NotLocal));
    assert_eq!(net.b.udp_local_addr(old), Ok(any(53)));
    net.b.udp_close(old).unwrap();
    assert_eq!(net.b.udp_socket_count(), 0);
    // The port is free again and the slot is reused, but the old handle stays stale.
    let new = net.b.udp_bind(b(53)).unwrap();
    assert_ne!(new, old);
    let mut buf = [0u8; 4];
    assert_eq!(net.b.udp_recv_from(old, &mut buf), Err(Error::InvalidHandle));
    assert_eq!(net.b.udp_send_to(old, b"x", SocketAddr::from((A_IP, 1))), Err(Error::InvalidHandle));
    assert_eq!(net.b.udp_send(old, b"x"), Err(Error::InvalidHandle));
    assert_eq!(net.b.udp_connect(old, SocketAddr::from((A_IP, 1))), Err(Error::InvalidHandle));
    assert_eq!(net.b.udp_local_addr(old), Err(Error::InvalidHandle));
    assert_eq!(net.b.udp_queued(old), Err(Error::InvalidHandle));
    assert_eq!(net.b.udp_close(old), Err(Error::InvalidHandle));
    assert_eq!(net.b.udp_local_addr(new), Ok(b(53)), "the live socket is untouched");
    // Broadcast, multicast and IPv6 destinations are refused (no IPv6 path yet).
    for to in [
        SocketAddr::from((Ipv4Addr::BROADCAST, 9)),
        SocketAddr::from((Ipv4Addr::new(10, 0, 0, 255), 9)),
        SocketAddr::from((Ipv4Addr::new(224, 0, 0, 1), 9)),
        SocketAddr::from((IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), 9)),
    ] {
        assert_eq!(net.b.udp_send_to(new, b"x", to), Err(Error::Unreachable), "{to}");
    }
    assert_eq!(net.b.udp_send_to(new, b"x", SocketAddr::from((A_IP, 0))), Err(Error::InvalidPort));
}

/// Takes every datagram in place (when `take`) and records it; TCP payload it leaves.
#[derive(Default)]
struct InPlace {
    take: bool,
    seen: Vec<(UdpId, SocketAddr, Vec<u8>)>,
}

impl Deliver for InPlace {
    fn tcp(&mut self, _: StreamId, _: &[u8]) -> usize {
        0
    }

    fn udp(&mut self, socket: UdpId, from: SocketAddr, datagram: &[u8]) -> bool {
        self.seen.push((socket, from, datagram.to_vec()));
        self.take
    }
}

#[test]
fn datagrams_are_offered_in_place_before_they_are_queued() {
    let mut net = Net::new();
    let server = net.b.udp_bind(any(7)).unwrap();
    let client = net.a.udp_bind(any(2000)).unwrap();
    let mut deliver = InPlace { take: true, ..InPlace::default() };
    for i in 0..5u8 {
        net.a.udp_send_to(client, &[i; 30], b(7)).unwrap();
    }
    for _ in 0..10 {
        net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
        net.b.poll_deliver(net.now, &mut net.dev_b, &net.cache, &mut deliver).unwrap();
        net.now += Duration::from_millis(1);
    }
    let from = SocketAddr::from((A_IP, 2000));
    let want: Vec<_> = (0..5u8).map(|i| (server, from, vec![i; 30])).collect();
    assert_eq!(deliver.seen, want);
    assert_eq!(net.b.udp_queued(server), Ok((0, 0)), "consumed in place: never queued");
    assert_eq!((net.b.stats().udp_delivered_in_place, net.b.stats().udp_datagrams_in), (5, 5));
    // Declined: queued for udp_recv_from, and while the queue holds one, the next is not offered
    // (so that the reader sees them in order).
    let mut deliver = InPlace::default();
    for i in 0..3u8 {
        net.a.udp_send_to(client, &[i], b(7)).unwrap();
    }
    for _ in 0..10 {
        net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
        net.b.poll_deliver(net.now, &mut net.dev_b, &net.cache, &mut deliver).unwrap();
        net.now += Duration::from_millis(1);
    }
    assert_eq!(deliver.seen.len(), 1, "offered once, while the queue was empty");
    assert_eq!(net.b.udp_queued(server), Ok((3, 3)));
    let mut buf = [0u8; 4];
    for i in 0..3u8 {
        let r = net.b.udp_recv_from(server, &mut buf).unwrap();
        assert_eq!(&buf[..r.len], &[i]);
    }
    // A closure is still a Deliver (TCP only): UDP datagrams go to the queue.
    net.a.udp_send_to(client, b"q", b(7)).unwrap();
    for _ in 0..5 {
        net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
        net.b.poll_with(net.now, &mut net.dev_b, &net.cache, |_, _| 0).unwrap();
        net.now += Duration::from_millis(1);
    }
    assert_eq!(net.b.udp_queued(server), Ok((1, 1)));
}

/// The receive path never panics and keeps its bounds on mutated frames: valid UDP frames with
/// random bytes of their IP and UDP headers and payload changed, cut short or padded, fed to a
/// stack with bound, connected and small-queued sockets, checksums verified or trusted (so that
/// mutated datagrams reach the sockets). Every frame the UDP path saw is counted once.
#[test]
fn mutated_frames_never_panic_and_every_datagram_is_counted_once() {
    for trust in [false, true] {
        let mut net = Net::with(
            |_| {},
            |c| {
                if trust {
                    c.checksum = tcp_lib::wire::ChecksumPolicy::Trust;
                }
                c.icmp_errors = IcmpRateLimit { per_second: 100, burst: 10 };
            },
        );
        let small = net.b.udp_bind_with(any(7), UdpConfig { max_datagrams: 3, max_bytes: 300 }).unwrap();
        let connected = net.b.udp_bind(any(8)).unwrap();
        net.b.udp_connect(connected, SocketAddr::from((A_IP, 1000))).unwrap();
        let (mac_a, mac_b) = (net.mac_a(), net.mac_b());
        let mut rng = Rng(if trust { 2 } else { 1 });
        let mut udp_frames = 0u64;
        for i in 0..5000u32 {
            let port = [7, 8, 9][rng.below(3)];
            let len = rng.below(200);
            let src = SocketAddrV4::new(A_IP, [1000, 1001][rng.below(2)]);
            let mut frame =
                udp_frame(mac_a, mac_b, src, SocketAddrV4::new(B_IP, port), &rng.bytes(len), None);
            for _ in 0..rng.below(4) {
                let at = 14 + rng.below(frame.len() - 14);
                frame[at] = rng.bytes(1)[0];
            }
            match rng.below(4) {
                0 => frame.truncate(14 + rng.below(frame.len() - 13)),
                1 => {
                    let n = rng.below(20);
                    frame.extend(rng.bytes(n));
                }
                _ => {}
            }
            let before = *net.b.stats();
            net.b.receive(net.now, &frame);
            let after = *net.b.stats();
            let outcomes = [
                after.udp_datagrams_in - before.udp_datagrams_in,
                after.udp_queue_drops - before.udp_queue_drops,
                after.udp_no_socket - before.udp_no_socket,
                after.udp_bad_source - before.udp_bad_source,
            ];
            let udp_malformed = after.rx_malformed - before.rx_malformed;
            let udp_seen = outcomes.iter().sum::<u64>();
            assert!(udp_seen + udp_malformed <= 1, "frame {i}: {outcomes:?} and {udp_malformed} malformed");
            udp_frames += udp_seen;
            if i % 64 == 0 {
                net.now += Duration::from_millis(10);
                let mut buf = [0u8; 64];
                while net.b.udp_recv_from(small, &mut buf).is_ok() {}
                while net.b.udp_recv_from(connected, &mut buf).is_ok() {}
                net.b.poll(net.now, &mut net.dev_b, &net.cache).unwrap();
                let mut batch = PacketBatch::with_capacity(256);
                while net.dev_a.rx_burst(0, &net.cache, &mut batch).unwrap() > 0 {
                    batch.clear();
                }
            }
            let (count, bytes) = net.b.udp_queued(small).unwrap();
            assert!(count <= 3 && bytes <= 300, "the queue bound holds: {count} datagrams, {bytes} bytes");
        }
        let s = net.b.stats();
        assert!(udp_frames > 500, "many mutated frames still reach the UDP path: {udp_frames}");
        assert!(s.udp_datagrams_in > 0 && s.udp_queue_drops > 0 && s.udp_no_socket > 0, "{s:?}");
        // 100 a second after a burst of 10, over 79 steps of 10 ms.
        let steps = 5000u64.div_ceil(64);
        assert!(s.icmp_port_unreachable <= 10 + steps, "the rate limit holds: {s:?}");
        assert!(s.icmp_rate_limited > 0, "{s:?}");
        if !trust {
            assert!(s.udp_checksum_errors > 0, "{s:?}");
        }
    }
}

#[test]
fn ipv6_datagrams_echo_and_sockets_keep_to_their_family() {
    use std::net::Ipv6Addr;
    use tcp_lib::wire::Ipv6Cidr;
    let (a6, b6) = (Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1), Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2));
    let mut net = Net::with(
        |c| *c = c.with_ipv6(Ipv6Cidr::new(a6, 64).unwrap()),
        |c| *c = c.with_ipv6(Ipv6Cidr::new(b6, 64).unwrap()),
    );
    // One wildcard server for both families; a client bound to our IPv6 address.
    let server = net.b.udp_bind(any(7)).unwrap();
    let client = net.a.udp_bind(SocketAddr::from((a6, 0))).unwrap();
    let to = SocketAddr::from((b6, 7));
    assert_eq!(net.a.udp_max_payload_v6(), 1452);
    let sent: Vec<Vec<u8>> = [0, 1, 1000, 1452].iter().map(|&n| Rng(n as u64).bytes(n)).collect();
    for d in &sent {
        net.a.udp_send_to(client, d, to).unwrap();
    }
    let mut buf = vec![0u8; 2048];
    let mut echoed = Vec::new();
    assert!(net.run_until(200, |n| {
        while let Ok(r) = n.b.udp_recv_from(server, &mut buf) {
            assert_eq!(r.from.ip(), IpAddr::V6(a6));
            n.b.udp_send_to(server, &buf[..r.len], r.from).unwrap();
        }
        while let Ok(r) = n.a.udp_recv_from(client, &mut buf) {
            assert_eq!(r.from, to);
            echoed.push(buf[..r.len].to_vec());
        }
        echoed.len() == sent.len()
    }));
    assert!(echoed == sent, "every IPv6 datagram echoed byte-exact, in order");
    let err = net.a.udp_send_to(client, &[0; 1453], to).unwrap_err();
    assert_eq!(err, Error::MessageTooLong { max: 1452 });
    // A socket bound to an IPv6 address sends only to IPv6; a closed port draws ICMPv6.
    assert_eq!(net.a.udp_send_to(client, b"x", b(7)), Err(Error::Unreachable));
    net.a.udp_send_to(client, b"anyone?", SocketAddr::from((b6, 9))).unwrap();
    assert!(net.run_until(50, |n| n.b.stats().icmp_port_unreachable == 1));
    assert_eq!(net.b.stats().udp_no_socket, 1);
}
