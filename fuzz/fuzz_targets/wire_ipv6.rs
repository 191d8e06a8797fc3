//! The IPv6 side of `tcp_lib::wire` on arbitrary bytes: the IPv6 header and its extension-header
//! walk, ICMPv6 and Neighbor Discovery, UDP and TCP over IPv6 (and UDP over IPv4), the address
//! helpers, and the IPv6 fragment reassembler on arbitrary fragment sequences. Nothing may panic;
//! whatever parses must re-emit to bytes that parse to the same representation; the walk stays
//! within its bounds; a reassembled packet must be exactly the bytes its fragments carried, and
//! the reassembler must stay within its bounds.
#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use tcp_lib::wire::ipv6::ext::{self, FragmentHeader, MAX_CHAIN_LEN, MAX_HEADERS};
use tcp_lib::wire::ipv6::reassembly::{Config, FragmentReassembler};
use tcp_lib::wire::ipv6::{Cidr, addr};
use tcp_lib::wire::{
    ChecksumPolicy, Error, EtherType, EthernetAddress, EthernetFrame, Icmpv6Packet, Icmpv6Repr, Ipv6Packet,
    Ipv6Repr, NdpRepr, Protocol, TcpPacket, TcpRepr, UdpPacket, UdpRepr,
};

fn check_tcp(bytes: &[u8], src: Ipv6Addr, dst: Ipv6Addr) {
    let packet = TcpPacket::new_unchecked(bytes);
    let verified = TcpRepr::parse_v6(&packet, src, dst, ChecksumPolicy::Verify);
    let Ok(repr) = TcpRepr::parse_v6(&packet, src, dst, ChecksumPolicy::Trust) else {
        assert!(verified.is_err(), "verifying accepts only what trusting accepts");
        return;
    };
    assert!(verified.is_ok() || verified == Err(Error::Checksum));
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit_v6(&mut TcpPacket::new_unchecked(&mut out[..]), src, dst);
    let p = TcpPacket::new_checked(&out[..]).expect("emitted length");
    let again = TcpRepr::parse_v6(&p, src, dst, ChecksumPolicy::Verify).expect("emitted segment parses");
    let mut expected = repr;
    expected.sack_blocks.truncate(repr.sack_blocks_emitted());
    assert_eq!(again, expected);
}

fn check_udp(bytes: &[u8], src: Ipv6Addr, dst: Ipv6Addr) {
    let packet = UdpPacket::new_unchecked(bytes);
    if packet.check_len().is_ok() {
        let _ = (packet.src_port(), packet.dst_port(), packet.checksum(), packet.is_empty());
        assert!(8 + packet.payload().len() <= bytes.len());
    }
    let verified = UdpRepr::parse_v6(&packet, src, dst, ChecksumPolicy::Verify);
    let Ok(repr) = UdpRepr::parse_v6(&packet, src, dst, ChecksumPolicy::Trust) else {
        assert!(verified.is_err());
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit_v6(&mut UdpPacket::new_unchecked(&mut out[..]), src, dst);
    let p = UdpPacket::new_checked(&out[..]).expect("emitted length");
    assert_eq!(UdpRepr::parse_v6(&p, src, dst, ChecksumPolicy::Verify), Ok(repr));
    // The same datagram over IPv4, where a zero checksum is allowed.
    let (s4, d4) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
    let _ = UdpRepr::parse(&packet, s4, d4, ChecksumPolicy::Verify);
    repr.emit(&mut UdpPacket::new_unchecked(&mut out[..]), s4, d4);
    let p = UdpPacket::new_checked(&out[..]).expect("emitted length");
    assert_eq!(UdpRepr::parse(&p, s4, d4, ChecksumPolicy::Verify), Ok(repr));
}

fn check_ndp(msg_type: u8, code: u8, body: &[u8]) {
    let Ok(repr) = NdpRepr::parse(msg_type, code, body) else { return };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out);
    assert_eq!(NdpRepr::parse(repr.msg_type(), 0, &out), Ok(repr));
}

fn check_icmp(bytes: &[u8], src: Ipv6Addr, dst: Ipv6Addr, depth: u8) {
    let packet = Icmpv6Packet::new_unchecked(bytes);
    if packet.check_len().is_ok() {
        let _ = (packet.msg_type(), packet.msg_code(), packet.echo_ident(), packet.echo_seq_no());
        let _ = (packet.param(), packet.data(), packet.verify_checksum(src, dst));
        check_ndp(packet.msg_type(), packet.msg_code(), &bytes[4..]);
    }
    let Ok(repr) = Icmpv6Repr::parse(&packet, src, dst, ChecksumPolicy::Trust) else { return };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Icmpv6Packet::new_unchecked(&mut out[..]), src, dst);
    let p = Icmpv6Packet::new_checked(&out[..]).expect("emitted length");
    assert_eq!(Icmpv6Repr::parse(&p, src, dst, ChecksumPolicy::Verify), Ok(repr));
    // The quoted packet's upper layer is cut short: its parsers must cope.
    if let Icmpv6Repr::DstUnreachable { header, data, .. }
    | Icmpv6Repr::PktTooBig { header, data, .. }
    | Icmpv6Repr::TimeExceeded { header, data, .. }
    | Icmpv6Repr::ParamProblem { header, data, .. } = repr
    {
        assert!(data.len() <= header.payload_len);
        check_transport(header.next_header, data, header.src_addr, header.dst_addr, depth + 1);
    }
}

fn check_transport(protocol: Protocol, payload: &[u8], src: Ipv6Addr, dst: Ipv6Addr, depth: u8) {
    // An ICMPv6 error quotes a packet that may itself be an ICMPv6 error: one level is enough.
    if depth > 1 {
        return;
    }
    match protocol {
        Protocol::Tcp => check_tcp(payload, src, dst),
        Protocol::Udp => check_udp(payload, src, dst),
        Protocol::Icmpv6 => check_icmp(payload, src, dst, depth),
        _ => {}
    }
}

fn check_walk(first: Protocol, bytes: &[u8]) {
    let Ok(walk) = ext::walk(first, bytes) else { return };
    assert!(walk.offset <= bytes.len() && walk.offset <= MAX_CHAIN_LEN);
    assert!(walk.headers <= MAX_HEADERS);
    if walk.fragment.is_some_and(|f| f.is_fragment()) {
        if let Ok(on) = ext::walk_on(walk, bytes) {
            assert!(on.offset >= walk.offset && on.offset <= bytes.len().min(MAX_CHAIN_LEN));
            assert!(on.headers <= MAX_HEADERS);
        }
    } else {
        assert!(!matches!(
            walk.protocol,
            Protocol::HopByHop | Protocol::Ipv6Route | Protocol::Ipv6Frag | Protocol::Ipv6Opts
        ));
    }
}

fn check_ipv6(bytes: &[u8], reassembler: &mut FragmentReassembler, now: Instant) {
    let packet = Ipv6Packet::new_unchecked(bytes);
    if packet.check_len().is_ok() {
        let _ = (packet.version(), packet.traffic_class(), packet.flow_label(), packet.hop_limit());
        assert!(40 + packet.payload().len() <= bytes.len());
        check_walk(packet.next_header(), packet.payload());
    }
    match Ipv6Repr::parse_with_payload(&packet) {
        Ok((repr, payload)) => {
            assert_eq!(repr.payload_len, payload.len());
            let mut out = vec![0u8; repr.buffer_len()];
            let mut p = Ipv6Packet::new_unchecked(&mut out[..]);
            repr.emit(&mut p);
            p.payload_mut().copy_from_slice(payload);
            let p = Ipv6Packet::new_checked(&out[..]).expect("emitted length");
            assert_eq!(Ipv6Repr::parse(&p), Ok(repr));
            check_transport(repr.next_header, payload, repr.src_addr, repr.dst_addr, 0);
        }
        Err(Error::Fragmented) => {}
        Err(_) => {}
    }
    let config = *reassembler.config();
    if let Ok(Some(d)) = reassembler.add(&packet, now) {
        assert_eq!(d.header.payload_len, d.payload.len());
        assert!(d.payload.len() <= 65535);
        check_transport(d.header.next_header, &d.payload, d.header.src_addr, d.header.dst_addr, 0);
    }
    assert!(reassembler.len() <= config.max_datagrams);
    assert!(reassembler.buffered_bytes() <= config.max_bytes);
}

fn check_frame(bytes: &[u8], reassembler: &mut FragmentReassembler, now: Instant) {
    let Ok(frame) = EthernetFrame::new_checked(bytes) else { return };
    if frame.ethertype() == EtherType::Ipv6 {
        check_ipv6(frame.payload(), reassembler, now);
    }
}

fn check_addresses(data: &[u8]) {
    let Some((bits, rest)) = data.split_first_chunk::<16>() else { return };
    let a = Ipv6Addr::from(*bits);
    let group = addr::solicited_node(a);
    assert!(group.is_multicast());
    assert_eq!(addr::solicited_node(group), group, "the low 24 bits are kept");
    assert!(addr::multicast_mac(a).is_multicast());
    if let Some(mac) = rest.first_chunk::<6>() {
        let ll = addr::link_local(EthernetAddress(*mac));
        assert_eq!(addr::interface_id(EthernetAddress(*mac)), ll.octets()[8..]);
        assert!(Cidr::new(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 64).expect("valid").contains_addr(ll));
    }
    let len = rest.first().copied().unwrap_or(0);
    if let Some(cidr) = Cidr::new(a, len) {
        assert!(cidr.contains_addr(a) && cidr.contains_addr(cidr.network()));
        assert_eq!(cidr.to_string().parse::<Cidr>(), Ok(cidr));
    } else {
        assert!(len > 128);
    }
}

/// One fragment of one of four packets: a Fragment header, perhaps after Destination Options.
/// Its bytes are a function of the packet and the position, unless it is corrupted.
#[derive(Arbitrary, Debug)]
struct Fragment {
    packet: u8,
    offset_units: u16,
    len_units: u8,
    extra: u8,
    more: bool,
    corrupt: bool,
    dest_opts: bool,
    advance_ms: u16,
}

fn pattern(ident: u32, pos: usize) -> u8 {
    ((pos * 13 + ident as usize * 7) % 251) as u8
}

fn reassemble(fragments: Vec<Fragment>) {
    let config =
        Config { max_datagrams: 3, max_bytes: 16 * 1024, max_runs: 8, timeout: Duration::from_secs(1) };
    let mut r = FragmentReassembler::new(config);
    let mut now = Instant::now();
    let mut corrupted = [false; 4];
    let (src, dst) =
        (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2), Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    for f in fragments {
        now += Duration::from_millis(u64::from(f.advance_ms % 1500));
        let ident = u32::from(f.packet % 4);
        let offset = usize::from(f.offset_units & 0x1fff) * 8;
        let len = usize::from(f.len_units) * 8 + if f.more { 0 } else { usize::from(f.extra % 8) };
        let mut payload = Vec::new();
        if f.dest_opts {
            payload.extend([44, 0, 1, 4, 0, 0, 0, 0]);
        }
        let mut header = [0u8; 8];
        FragmentHeader { next_header: Protocol::Udp, offset: offset as u16, more_frags: f.more, ident }
            .emit(&mut header);
        payload.extend(header);
        let start = payload.len();
        payload.extend((0..len).map(|i| pattern(ident, offset + i)));
        if f.corrupt && len > 0 {
            payload[start + usize::from(f.extra) % len] ^= 0x80;
            corrupted[ident as usize] = true;
        }
        let Ok(payload_len) = u16::try_from(payload.len()) else { continue };
        let repr = Ipv6Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: if f.dest_opts { Protocol::Ipv6Opts } else { Protocol::Ipv6Frag },
            payload_len: usize::from(payload_len),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        };
        let mut bytes = vec![0u8; repr.buffer_len()];
        let mut p = Ipv6Packet::new_unchecked(&mut bytes[..]);
        repr.emit(&mut p);
        p.payload_mut().copy_from_slice(&payload);
        let result = r.add(&Ipv6Packet::new_checked(&bytes[..]).expect("built valid"), now);
        assert!(r.len() <= config.max_datagrams);
        assert!(r.buffered_bytes() <= config.max_bytes);
        if let Ok(Some(d)) = result {
            assert_eq!(d.header.payload_len, d.payload.len());
            assert_eq!(d.header.next_header, Protocol::Udp);
            if !corrupted[ident as usize] {
                for (pos, &b) in d.payload.iter().enumerate() {
                    assert_eq!(b, pattern(ident, pos), "byte {pos} of packet {ident}");
                }
            }
        }
    }
    let deadline = r.next_deadline();
    if let Some(t) = deadline {
        r.expire(t);
    }
    assert!(r.is_empty() || r.next_deadline() > deadline);
}

fuzz_target!(|data: &[u8]| {
    let now = Instant::now();
    let mut reassembler = FragmentReassembler::default();
    let (src, dst) =
        (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2), Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1));

    // Every parser on the raw bytes.
    check_ipv6(data, &mut reassembler, now);
    check_transport(Protocol::Tcp, data, src, dst, 0);
    check_transport(Protocol::Udp, data, src, dst, 0);
    check_transport(Protocol::Icmpv6, data, src, dst, 0);
    if let Some((&first, rest)) = data.split_first() {
        check_walk(Protocol::from(first), rest);
        if let Some((&code, body)) = rest.split_first() {
            check_ndp(133 + first % 5, code % 2, body);
        }
    }
    check_addresses(data);

    // With a valid IPv6 header in front and the upper layer's checksum fixed up (after walking the
    // extension headers the input may start with), so that most inputs reach the verified paths.
    if let Some((&sel, rest)) = data.split_first() {
        let mut payload = rest.to_vec();
        payload.truncate(65535);
        let next_header = match sel & 0x7 {
            0 | 1 => Protocol::Tcp,
            2 => Protocol::Udp,
            3 | 4 => Protocol::Icmpv6,
            5 => Protocol::HopByHop,
            6 => Protocol::Ipv6Frag,
            _ => Protocol::Ipv6Opts,
        };
        if let Ok(walk) = ext::walk(next_header, &payload) {
            if walk.fragment.is_none_or(|f| !f.is_fragment()) {
                let upper = &mut payload[walk.offset..];
                match walk.protocol {
                    Protocol::Tcp if upper.len() >= 20 => {
                        TcpPacket::new_unchecked(&mut *upper).fill_checksum_v6(src, dst)
                    }
                    Protocol::Udp if upper.len() >= 8 => {
                        let len = u16::try_from(upper.len()).expect("truncated");
                        let mut u = UdpPacket::new_unchecked(&mut *upper);
                        if sel & 0x80 != 0 {
                            u.set_len(len);
                        }
                        if u.check_len().is_ok() {
                            u.fill_checksum_v6(src, dst);
                        }
                    }
                    Protocol::Icmpv6 if upper.len() >= 8 => {
                        Icmpv6Packet::new_unchecked(&mut *upper).fill_checksum(src, dst)
                    }
                    _ => {}
                }
            }
        }
        let repr = Ipv6Repr {
            src_addr: src,
            dst_addr: dst,
            next_header,
            payload_len: payload.len(),
            hop_limit: 255,
            traffic_class: sel,
            flow_label: 0,
        };
        let mut frame = vec![0x33, 0x33, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
        let at = frame.len();
        frame.resize(at + repr.buffer_len(), 0);
        let mut p = Ipv6Packet::new_unchecked(&mut frame[at..]);
        repr.emit(&mut p);
        p.payload_mut().copy_from_slice(&payload);
        check_frame(&frame, &mut reassembler, now);
    }

    // The reassembler on a fragment sequence decoded from the same bytes.
    let mut u = Unstructured::new(data);
    if let Ok(fragments) = Vec::<Fragment>::arbitrary(&mut u) {
        reassemble(fragments);
    }
});
