//! IPv6 on two stacks joined by an in-memory pair: Neighbor Discovery, ICMPv6 echo, TCP over IPv6
//! (global and link-local addresses, SYN cookies, TIME-WAIT), one listener for both families,
//! path MTU from Packet Too Big, router advertisements (SLAAC, default router), static routes,
//! and the messages the stack must refuse (Neighbor Discovery from off the link, foreign groups).

mod common;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use common::{A_IP, Net, Rng};
use tcp_lib::stack::{Ipv6Config, ListenerConfig, StreamId};
use tcp_lib::tcp::State;
use tcp_lib::wire::icmpv6::Repr as Icmp;
use tcp_lib::wire::ipv6::addr::{ALL_NODES, link_local, multicast_mac, solicited_node};
use tcp_lib::wire::ndp::{PrefixInfo, Prefixes};
use tcp_lib::wire::{
    ChecksumPolicy, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    Ipv6Cidr, Ipv6Packet, Ipv6Repr, NdpRepr, Protocol, SeqNumber, TcpPacket,
};

const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 2);

/// Two stacks with IPv4 and IPv6 (`fd00:0:0:1::/64`).
fn net() -> Net {
    Net::with(
        |c| *c = c.with_ipv6(Ipv6Cidr::new(A6, 64).unwrap()),
        |c| *c = c.with_ipv6(Ipv6Cidr::new(B6, 64).unwrap()),
    )
}

fn b6(port: u16) -> SocketAddr {
    SocketAddr::from((B6, port))
}

/// An Ethernet/IPv6/ICMPv6 frame.
fn icmp6_frame(
    macs: (EthernetAddress, EthernetAddress),
    (src, dst): (Ipv6Addr, Ipv6Addr),
    hop_limit: u8,
    repr: &Icmpv6Repr<'_>,
) -> Vec<u8> {
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: Protocol::Icmpv6,
        payload_len: repr.buffer_len(),
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    };
    let eth = EthernetRepr { src_addr: macs.0, dst_addr: macs.1, vlan: None, ethertype: EtherType::Ipv6 };
    let mut buf = vec![0u8; eth.buffer_len(ip.buffer_len())];
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    let mut packet = Ipv6Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut packet);
    repr.emit(&mut Icmpv6Packet::new_unchecked(packet.payload_mut()), src, dst);
    buf
}

/// The Ethernet destination, IPv6 header and ICMPv6 message of a frame, if it is one.
fn icmp6_in(frame: &[u8]) -> Option<(EthernetAddress, Ipv6Repr, Icmpv6Repr<'_>)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Ipv6 {
        return None;
    }
    let dst_mac = eth.dst_addr();
    let start = 14;
    let packet = Ipv6Packet::new_checked(&frame[start..]).ok()?;
    let (ip, payload) = Ipv6Repr::parse_with_payload(&packet).ok()?;
    if ip.next_header != Protocol::Icmpv6 {
        return None;
    }
    let offset = payload.as_ptr().addr() - frame.as_ptr().addr();
    let icmp = Icmpv6Packet::new_checked(&frame[offset..offset + payload.len()]).ok()?;
    let repr = Icmpv6Repr::parse(&icmp, ip.src_addr, ip.dst_addr, ChecksumPolicy::Verify).ok()?;
    Some((dst_mac, ip, repr))
}

/// Sends `data` from A's end of connection `c` and returns what B's end `s` received.
fn pump(net: &mut Net, (c, s): (StreamId, StreamId), data: &[u8]) -> Vec<u8> {
    let (mut sent, mut got) = (0, Vec::new());
    let mut buf = vec![0u8; 65536];
    assert!(net.run_until(20_000, |n| {
        if sent < data.len()
            && let Ok(k) = n.a.send(c, &data[sent..])
        {
            sent += k;
        }
        while let Ok(k) = n.b.recv(s, &mut buf) {
            got.extend_from_slice(&buf[..k]);
        }
        got.len() == data.len()
    }));
    got
}

fn accept_one(net: &mut Net, l: tcp_lib::stack::ListenerId, c: StreamId) -> StreamId {
    let mut s = None;
    assert!(net.run_until(200, |n| {
        s = s.or_else(|| n.b.accept(l));
        s.is_some() && n.a.state(c) == Ok(State::Established)
    }));
    s.unwrap()
}

#[test]
fn neighbor_discovery_resolves_both_ways_and_ping6_is_answered() {
    let mut net = net();
    for (i, dst) in [IpAddr::V6(B6), IpAddr::V6(link_local(net.mac_b()))].into_iter().enumerate() {
        let seq = u16::try_from(i).unwrap();
        net.a.ping(dst, 7, seq, b"ping six").unwrap();
        let mut reply = None;
        assert!(net.run_until(50, |n| {
            reply = reply.or_else(|| n.a.take_ping_reply());
            reply.is_some()
        }));
        let r = reply.unwrap();
        assert_eq!((r.from, r.ident, r.seq_no, r.len), (dst, 7, seq, 8));
    }
    assert_eq!(net.b.stats().icmp_echo_replies, 2);
    let (mac_a, mac_b) = (net.mac_a(), net.mac_b());
    // A solicited B's two addresses; B learned A from the solicitations' link-layer option.
    assert_eq!(net.a.stats().ndp_solicits, 2);
    assert!(net.b.stats().ndp_adverts >= 2);
    assert_eq!(net.a.arp_lookup(B6), Some(mac_b));
    assert_eq!(net.b.arp_lookup(A6), Some(mac_a));
    assert_eq!(net.a.ndp_entries(), 2);
    // IPv4 is untouched beside it.
    assert_eq!(net.a.arp_entries(), 0);
}

#[test]
fn tcp_over_ipv6_is_byte_exact_with_the_ipv6_mss_and_leaves_time_wait() {
    let mut net = net();
    let l = net.b.listen(80).unwrap();
    let c = net.a.connect(b6(80)).unwrap();
    let s = accept_one(&mut net, l, c);
    let (local, remote) = net.a.addrs(c).unwrap();
    assert_eq!(remote, b6(80));
    assert_eq!(local.ip(), IpAddr::V6(A6), "the global source for a global destination");
    assert_eq!(net.b.addrs(s).unwrap(), (b6(80), local));
    // MTU 1500 less 40 + 20 header bytes, less 12 of timestamps.
    assert_eq!(net.a.send_mss(c).unwrap(), 1500 - 60 - 12);
    let data = Rng(6).bytes(300_000);
    assert_eq!(pump(&mut net, (c, s), &data), data);
    net.a.close(c).unwrap();
    assert!(net.run_until(100, |n| n.b.state(s) == Ok(State::CloseWait)));
    net.b.close(s).unwrap();
    let done = net.run_until(500, |n| n.a.time_wait_count() == 1 && n.b.connection_count() == 0);
    assert!(done, "{:?} {:?} {}", net.a.state(c), net.b.state(s), net.b.connection_count());
    assert!(net.a.contains(local, remote), "a TIME-WAIT record keyed by the IPv6 tuple");
    assert!(
        !net.a.contains(SocketAddr::new(A_IP.into(), local.port()), SocketAddr::from((common::B_IP, 80)))
    );
}

#[test]
fn one_listener_takes_both_families_and_link_local_peers() {
    let mut net = net();
    let l = net.b.listen(443).unwrap();
    let b_ll = link_local(net.mac_b());
    let targets = [Net::b_addr(443).into(), b6(443), SocketAddr::from((b_ll, 443))];
    for target in targets {
        let c = net.a.connect(target).unwrap();
        let s = accept_one(&mut net, l, c);
        let (local, remote) = net.a.addrs(c).unwrap();
        assert_eq!(remote, target);
        assert_eq!(net.b.addrs(s).unwrap(), (target, local));
        let expected_source = match target.ip() {
            IpAddr::V4(_) => IpAddr::V4(A_IP),
            IpAddr::V6(d) if d.is_unicast_link_local() => IpAddr::V6(link_local(net.mac_a())),
            IpAddr::V6(_) => IpAddr::V6(A6),
        };
        assert_eq!(local.ip(), expected_source, "the source of the destination's scope");
        let data = Rng(u64::from(local.port())).bytes(5000);
        assert_eq!(pump(&mut net, (c, s), &data), data);
    }
    assert_eq!(net.b.connection_count(), 3);
}

#[test]
fn syn_cookies_work_over_ipv6() {
    let mut net = net();
    let l = net.b.listen_with(80, ListenerConfig { syn_queue: 0, ..ListenerConfig::default() }).unwrap();
    let c = net.a.connect(b6(80)).unwrap();
    let s = accept_one(&mut net, l, c);
    assert_eq!(net.b.stats().syn_cookies_accepted, 1);
    assert_eq!(net.b.send_mss(s).unwrap(), 1440, "the cookie's MSS for a 1500-byte IPv6 path");
    let data = Rng(9).bytes(20_000);
    assert_eq!(pump(&mut net, (c, s), &data), data);
}

#[test]
fn packet_too_big_lowers_the_mss_only_for_a_segment_in_flight() {
    let mut net = net();
    let l = net.b.listen(80).unwrap();
    let c = net.a.connect(b6(80)).unwrap();
    let _s = accept_one(&mut net, l, c);
    let (local, remote) = net.a.addrs(c).unwrap();
    let _ = net.a.send(c, &[7u8; 20_000]).unwrap();
    let frames = net.frames_from_a();
    let seq = frames
        .iter()
        .find_map(|f| {
            let eth = EthernetFrame::new_checked(&f[..]).ok()?;
            let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
            let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
            (tcp.payload().len() > 1000).then(|| tcp.seq_number())
        })
        .expect("a full-sized IPv6 segment left");
    let quote = |seq: SeqNumber| {
        let mut data = vec![0u8; 8];
        data[..2].copy_from_slice(&local.port().to_be_bytes());
        data[2..4].copy_from_slice(&remote.port().to_be_bytes());
        data[4..].copy_from_slice(&seq.get().to_be_bytes());
        data
    };
    let header = Ipv6Repr {
        src_addr: A6,
        dst_addr: B6,
        next_header: Protocol::Tcp,
        payload_len: 1452,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    let router = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 0xfe);
    let macs = (net.mac_b(), net.mac_a());
    let ptb =
        |data: &[u8], mtu: u32| icmp6_frame(macs, (router, A6), 64, &Icmp::PktTooBig { mtu, header, data });
    let mss = net.a.send_mss(c).unwrap();
    // A forged report quoting a sequence number outside the flight (RFC 5927).
    let forged = ptb(&quote(seq + 1_000_000), 1280);
    net.a.receive(net.now, &forged);
    assert_eq!(net.a.send_mss(c).unwrap(), mss);
    assert_eq!(net.a.stats().icmp_pmtu_ignored, 1);
    // An MTU below IPv6's minimum is taken as 1280 (RFC 8201 §4).
    let report = ptb(&quote(seq), 600);
    net.a.receive(net.now, &report);
    assert_eq!(net.a.stats().icmp_pmtu_updates, 1);
    assert_eq!(net.a.send_mss(c).unwrap(), 1280 - 60 - 12);
}

#[test]
fn router_advertisements_give_an_address_and_a_default_router() {
    let mut net = Net::with(|c| c.ipv6 = Some(Ipv6Config::default()), |_| {});
    let router_mac = EthernetAddress([0x02, 0, 0, 0, 0, 0xfe]);
    let router = link_local(router_mac);
    let prefix = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0);
    let mut prefixes = Prefixes::default();
    assert!(prefixes.push(PrefixInfo {
        prefix,
        prefix_len: 64,
        on_link: true,
        autonomous: true,
        valid_lifetime: 3600,
        preferred_lifetime: 1800,
    }));
    let ra = NdpRepr::RouterAdvert {
        hop_limit: 64,
        managed: false,
        other: false,
        router_lifetime: 1800,
        reachable_time: 0,
        retrans_time: 0,
        lladdr: Some(router_mac),
        mtu: None,
        prefixes,
    };
    let to_all = (router_mac, multicast_mac(ALL_NODES));
    // From off the link (hop limit not 255): ignored.
    net.a.receive(net.now, &icmp6_frame(to_all, (router, ALL_NODES), 64, &Icmpv6Repr::Ndp(ra)));
    assert_eq!(net.a.ipv6_addrs().unwrap().1, None);
    assert_eq!(net.a.ipv6_router(), None);
    net.a.receive(net.now, &icmp6_frame(to_all, (router, ALL_NODES), 255, &Icmpv6Repr::Ndp(ra)));
    let (ll, global) = net.a.ipv6_addrs().unwrap();
    assert_eq!(ll, link_local(net.mac_a()));
    let global = global.expect("an address from the autonomous prefix");
    assert_eq!(global.prefix_len(), 64);
    assert_eq!(global.address().segments()[..4], prefix.segments()[..4]);
    assert_eq!(global.address().segments()[4..], ll.segments()[4..], "our interface identifier");
    assert_eq!(net.a.ipv6_router(), Some(router));
    // Off-link traffic goes to the router's MAC, learned from the advertisement: no solicitation.
    let far = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 5);
    net.a.ping(far, 1, 1, b"x").unwrap();
    let frames = net.frames_from_a();
    let (dst_mac, ip, _) = frames.iter().find_map(|f| icmp6_in(f)).expect("the echo request");
    assert_eq!((dst_mac, ip.src_addr, ip.dst_addr), (router_mac, global.address(), far));
    assert_eq!(net.a.stats().ndp_solicits, 0);
    assert_eq!(net.a.stats().ra_accepted, 1);
}

#[test]
fn static_routes_take_the_longest_prefix() {
    let mut net = net();
    let via = |x: u16| IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, x));
    let p48 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 0));
    net.a.add_route(p48, 48, via(1)).unwrap();
    net.a.add_route(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 9, 5, 0, 0, 0, 0)), 64, via(2)).unwrap();
    assert!(
        net.a.add_route(p48, 48, IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 1))).is_err(),
        "an off-link router"
    );
    assert!(net.a.add_route(p48, 129, via(1)).is_err());
    let solicited = |net: &mut Net, dst: Ipv6Addr| {
        net.a.ping(dst, 1, 1, b"x").unwrap();
        net.frames_from_a()
            .iter()
            .find_map(|f| match icmp6_in(f)? {
                (_, ip, Icmpv6Repr::Ndp(NdpRepr::NeighborSolicit { target, .. })) => {
                    assert_eq!(ip.dst_addr, solicited_node(target));
                    assert_eq!(ip.hop_limit, 255);
                    Some(target)
                }
                _ => None,
            })
            .expect("a solicitation for the next hop")
    };
    assert_eq!(IpAddr::V6(solicited(&mut net, Ipv6Addr::new(0x2001, 0xdb8, 9, 1, 0, 0, 0, 1))), via(1));
    assert_eq!(IpAddr::V6(solicited(&mut net, Ipv6Addr::new(0x2001, 0xdb8, 9, 5, 0, 0, 0, 1))), via(2));
    assert!(net.a.remove_route(p48, 48));
    assert!(
        net.a.ping(Ipv6Addr::new(0x2001, 0xdb8, 9, 1, 0, 0, 0, 1), 1, 1, b"x").is_err(),
        "no default router"
    );
}

#[test]
fn neighbor_discovery_from_off_the_link_and_foreign_groups_are_refused() {
    let mut net = net();
    let (mac_a, mac_b) = (net.mac_a(), net.mac_b());
    let ns = |hop_limit: u8| {
        let repr = NdpRepr::NeighborSolicit { target: A6, lladdr: Some(mac_b) };
        icmp6_frame(
            (mac_b, multicast_mac(solicited_node(A6))),
            (B6, solicited_node(A6)),
            hop_limit,
            &Icmpv6Repr::Ndp(repr),
        )
    };
    net.a.receive(net.now, &ns(64));
    assert!(net.frames_from_a().iter().all(|f| icmp6_in(f).is_none()), "no advertisement");
    assert_eq!(net.a.arp_lookup(B6), None, "nothing learned");
    net.a.receive(net.now, &ns(255));
    let frames = net.frames_from_a();
    let advert = frames.iter().find_map(|f| icmp6_in(f)).expect("an advertisement");
    match advert {
        (
            dst_mac,
            ip,
            Icmpv6Repr::Ndp(NdpRepr::NeighborAdvert { solicited, override_, target, lladdr, .. }),
        ) => {
            assert_eq!((dst_mac, ip.src_addr, ip.dst_addr, ip.hop_limit), (mac_b, A6, B6, 255));
            assert_eq!((solicited, override_, target, lladdr), (true, true, A6, Some(mac_a)));
        }
        other => panic!("{other:?}"),
    }
    // A group we did not join: not ours, at the MAC or the address.
    let other_group = solicited_node(Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0x77, 0x7777));
    let before = net.a.stats().rx_not_for_us;
    let echo = Icmpv6Repr::EchoRequest { ident: 1, seq_no: 1, data: b"x" };
    net.a.receive(net.now, &icmp6_frame((mac_b, multicast_mac(other_group)), (B6, other_group), 64, &echo));
    assert_eq!(net.a.stats().rx_not_for_us, before + 1);
    // A duplicate address detection probe is answered to all-nodes, not solicited.
    let probe = NdpRepr::NeighborSolicit { target: A6, lladdr: None };
    let dad = icmp6_frame(
        (mac_b, multicast_mac(solicited_node(A6))),
        (Ipv6Addr::UNSPECIFIED, solicited_node(A6)),
        255,
        &Icmpv6Repr::Ndp(probe),
    );
    net.a.receive(net.now, &dad);
    let frames = net.frames_from_a();
    match frames.iter().find_map(|f| icmp6_in(f)).expect("an advertisement") {
        (dst_mac, ip, Icmpv6Repr::Ndp(NdpRepr::NeighborAdvert { solicited, .. })) => {
            assert_eq!((dst_mac, ip.dst_addr, solicited), (multicast_mac(ALL_NODES), ALL_NODES, false));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_ipv4_only_stack_ignores_ipv6() {
    let mut net = Net::new();
    let echo = Icmpv6Repr::EchoRequest { ident: 1, seq_no: 1, data: b"x" };
    let dst = link_local(net.mac_a());
    let frame = icmp6_frame((net.mac_b(), net.mac_a()), (link_local(net.mac_b()), dst), 64, &echo);
    let before = net.a.stats().rx_unhandled;
    net.a.receive(net.now, &frame);
    assert_eq!(net.a.stats().rx_unhandled, before + 1);
    assert!(net.frames_from_a().iter().all(|f| icmp6_in(f).is_none()), "no answer");
    assert!(net.a.connect(b6(80)).is_err());
    assert_eq!(net.a.ipv6_addrs(), None);
}

#[test]
fn an_ipv6_connection_moves_between_stacks_whole() {
    let mut net = net();
    let l = net.b.listen(80).unwrap();
    let c = net.a.connect(b6(80)).unwrap();
    let s = accept_one(&mut net, l, c);
    let data = Rng(4).bytes(30_000);
    assert_eq!(pump(&mut net, (c, s), &data), data);
    // Bytes in flight and unread on both sides when it moves.
    net.a.send(c, &data[..5_000]).unwrap();
    net.step();
    let (local, remote) = net.b.addrs(s).unwrap();
    let detached = net.b.detach(s).unwrap();
    assert_eq!((detached.local(), detached.remote()), (local, remote));
    assert!(!net.b.contains(local, remote));
    // Another stack with the same addresses (another core's) takes it, with the neighbour entry.
    let config = *net.b.config();
    let mut other = tcp_lib::stack::Stack::new(config, net.now);
    let s2 = other.adopt(detached, net.now).unwrap();
    assert!(other.contains(local, remote));
    assert_eq!(other.arp_lookup(A6), Some(net.mac_a()), "the next hop came along");
    net.b = other;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    assert!(net.run_until(2000, |n| {
        while let Ok(k) = n.b.recv(s2, &mut buf) {
            got.extend_from_slice(&buf[..k]);
        }
        got.len() == 5_000
    }));
    assert_eq!(got, data[..5_000]);
    assert_eq!(net.b.stats().ndp_solicits, 0, "no resolution needed after the move");
}
