//! Every `tcp_lib::wire` parser on arbitrary bytes, and the fragment reassembler on arbitrary
//! fragment sequences. Nothing may panic; whatever parses must re-emit to bytes that parse to the
//! same representation (and, where the representation holds every field, to the same bytes); a
//! reassembled datagram must be exactly the bytes its fragments carried, and the reassembler must
//! stay within its bounds. The software TCP segmenter (`wire::gso`) on arbitrary frames and
//! offload metadata: no panic, and a super-segment's payload comes out exactly once.
#![no_main]

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use netchannel::pool::{GsoKind, Offload};
use tcp_lib::wire::ipv4::reassembly::{Config, FragmentReassembler};
use tcp_lib::wire::tcp::TcpOptions;
use tcp_lib::wire::{
    ArpPacket, ArpRepr, ChecksumPolicy, Error, EtherType, EthernetFrame, EthernetRepr, Icmpv4Packet,
    Icmpv4Repr, Ipv4Packet, Ipv4Repr, Protocol, TcpPacket, TcpRepr,
};
use tcp_lib::wire::{checksum, gso};

fn check_tcp(bytes: &[u8], src: Ipv4Addr, dst: Ipv4Addr) {
    let packet = TcpPacket::new_unchecked(bytes);
    if packet.check_len().is_ok() {
        let _ = (packet.src_port(), packet.dst_port(), packet.seq_number(), packet.ack_number());
        let _ = (packet.flags(), packet.window_len(), packet.urgent_at(), packet.segment_len());
        assert!(packet.option_iter().count() <= packet.options().len());
        assert_eq!(packet.header_len() + packet.payload().len(), bytes.len());
    }
    let verified = TcpRepr::parse(&packet, src, dst, ChecksumPolicy::Verify);
    let Ok(repr) = TcpRepr::parse(&packet, src, dst, ChecksumPolicy::Trust) else {
        assert!(verified.is_err(), "verifying accepts only what trusting accepts");
        return;
    };
    assert!(verified.is_ok() || verified == Err(Error::Checksum));
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut TcpPacket::new_unchecked(&mut out[..]), src, dst);
    let again = TcpRepr::parse(
        &TcpPacket::new_checked(&out[..]).expect("emitted length"),
        src,
        dst,
        ChecksumPolicy::Verify,
    )
    .expect("emitted segment parses");
    let mut expected = repr;
    expected.sack_blocks.truncate(repr.sack_blocks_emitted());
    assert_eq!(again, expected);
}

fn check_icmp(bytes: &[u8]) {
    let packet = Icmpv4Packet::new_unchecked(bytes);
    if packet.check_len().is_ok() {
        let _ = (packet.msg_type(), packet.msg_code(), packet.echo_ident(), packet.echo_seq_no());
        let _ = (packet.next_hop_mtu(), packet.data(), packet.verify_checksum());
    }
    let Ok(repr) = Icmpv4Repr::parse(&packet, ChecksumPolicy::Trust) else { return };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]));
    let again = Icmpv4Repr::parse(
        &Icmpv4Packet::new_checked(&out[..]).expect("emitted length"),
        ChecksumPolicy::Verify,
    )
    .expect("emitted message parses");
    assert_eq!(again, repr);
    // A quoted TCP header is only 8 bytes: the parsers must cope.
    if let Icmpv4Repr::DstUnreachable { header, data, .. } | Icmpv4Repr::TimeExceeded { header, data, .. } =
        repr
    {
        check_tcp(data, header.src_addr, header.dst_addr);
    }
}

fn check_arp(bytes: &[u8]) {
    let packet = ArpPacket::new_unchecked(bytes);
    if packet.check_len().is_ok() {
        let _ = (packet.hardware_type(), packet.protocol_type(), packet.operation());
        let _ = (packet.source_hardware_addr(), packet.source_protocol_addr());
        let _ = (packet.target_hardware_addr(), packet.target_protocol_addr());
    }
    let Ok(repr) = ArpRepr::parse(&packet) else { return };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
    // Every field is represented, so the bytes come back as they were.
    assert_eq!(&out[..], &bytes[..out.len()]);
    assert_eq!(ArpRepr::parse(&ArpPacket::new_unchecked(&out[..])), Ok(repr));
}

fn check_transport(protocol: Protocol, payload: &[u8], src: Ipv4Addr, dst: Ipv4Addr) {
    match protocol {
        Protocol::Tcp => check_tcp(payload, src, dst),
        Protocol::Icmp => check_icmp(payload),
        _ => {}
    }
}

fn check_ipv4(bytes: &[u8], reassembler: &mut FragmentReassembler, now: Instant) {
    let packet = Ipv4Packet::new_unchecked(bytes);
    if packet.check_len().is_ok() {
        let _ = (packet.version(), packet.dscp(), packet.ecn(), packet.ident(), packet.ttl());
        let _ = (packet.frag_offset(), packet.more_frags(), packet.options(), packet.verify_checksum());
        assert!(packet.header_len() + packet.payload().len() <= bytes.len());
    }
    match Ipv4Repr::parse(&packet, ChecksumPolicy::Trust) {
        Ok(repr) => {
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
            let again = Ipv4Repr::parse(
                &Ipv4Packet::new_checked(&out[..]).expect("emitted length"),
                ChecksumPolicy::Verify,
            );
            assert_eq!(again, Ok(repr));
            check_transport(repr.protocol, packet.payload(), repr.src_addr, repr.dst_addr);
        }
        Err(Error::Fragmented) => {
            let _ = reassembler.add(&packet, now);
        }
        Err(_) => {}
    }
    if let Ok(Some(datagram)) = reassembler.add(&packet, now) {
        assert!(datagram.payload.len() <= 65515);
        assert_eq!(datagram.payload.len(), datagram.header.payload_len);
        check_transport(
            datagram.header.protocol,
            &datagram.payload,
            datagram.header.src_addr,
            datagram.header.dst_addr,
        );
    }
}

fn check_frame(bytes: &[u8], reassembler: &mut FragmentReassembler, now: Instant) {
    let Ok(frame) = EthernetFrame::new_checked(bytes) else { return };
    let repr = EthernetRepr::parse(&frame).expect("checked frame parses");
    let mut out = vec![0u8; repr.buffer_len(0)];
    repr.emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &bytes[..out.len()], "the header comes back as it was");
    match frame.ethertype() {
        EtherType::Ipv4 => check_ipv4(frame.payload(), reassembler, now),
        EtherType::Arp => check_arp(frame.payload()),
        _ => {}
    }
}

/// One fragment of one of four datagrams. Its bytes are a function of the datagram and the
/// position, unless it is corrupted.
#[derive(Arbitrary, Debug)]
struct Fragment {
    datagram: u8,
    offset_units: u16,
    len_units: u8,
    extra: u8,
    more: bool,
    corrupt: bool,
    options: bool,
    advance_ms: u16,
}

fn pattern(ident: u16, pos: usize) -> u8 {
    ((pos * 13 + usize::from(ident) * 7) % 251) as u8
}

fn reassemble(fragments: Vec<Fragment>) {
    let config =
        Config { max_datagrams: 3, max_bytes: 16 * 1024, max_runs: 8, timeout: Duration::from_secs(1) };
    let mut r = FragmentReassembler::new(config);
    let mut now = Instant::now();
    let mut corrupted = [false; 4];
    let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1));
    for f in fragments {
        now += Duration::from_millis(u64::from(f.advance_ms % 1500));
        let ident = u16::from(f.datagram % 4);
        let offset = usize::from(f.offset_units & 0x1fff) * 8;
        let len = usize::from(f.len_units) * 8 + if f.more { 0 } else { usize::from(f.extra % 8) };
        let header_len = if f.options { 24 } else { 20 };
        let mut bytes = vec![0u8; header_len + len];
        let Ok(total) = u16::try_from(bytes.len()) else { continue };
        let repr = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            protocol: Protocol::Udp,
            payload_len: len,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident,
            dont_frag: false,
        };
        let mut packet = Ipv4Packet::new_unchecked(&mut bytes[..]);
        repr.emit(&mut packet);
        packet.set_version_and_header_len(4, u8::try_from(header_len).expect("at most 32"));
        packet.set_total_len(total);
        packet.set_flags_and_frag_offset(false, f.more, u16::try_from(offset).expect("13 bits times 8"));
        for (i, b) in packet.payload_mut().iter_mut().enumerate() {
            *b = pattern(ident, offset + i);
        }
        if f.corrupt && len > 0 {
            packet.payload_mut()[usize::from(f.extra) % len] ^= 0x80;
            corrupted[usize::from(ident)] = true;
        }
        packet.fill_checksum();
        let result = r.add(&Ipv4Packet::new_checked(&bytes[..]).expect("built valid"), now);
        assert!(r.len() <= config.max_datagrams);
        assert!(r.buffered_bytes() <= config.max_bytes);
        if let Ok(Some(d)) = result {
            assert_eq!(d.header.ident, ident);
            assert_eq!(d.header.payload_len, d.payload.len());
            assert!(20 + d.payload.len() <= 65535);
            if !corrupted[usize::from(ident)] {
                for (pos, &b) in d.payload.iter().enumerate() {
                    assert_eq!(b, pattern(ident, pos), "byte {pos} of datagram {ident}");
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

/// The software segmenter on the bytes behind a 4-byte prefix that picks the offload metadata:
/// no panic; an error hands out nothing; a super-segment's cuts carry its payload exactly once,
/// each behind a copy of its headers and at most `mss` of it.
fn check_gso(data: &[u8]) {
    let Some((&[a, b, c, d], frame)) = data.split_first_chunk::<4>() else { return };
    let start = u16::from(a % 80);
    let mss = u16::from_be_bytes([b, c]) % 2048;
    let header_len = u16::from(d % 128);
    let kind = if a & 0x80 == 0 { GsoKind::Tcp4 } else { GsoKind::Tcp6 };
    let mut offload = Offload::NONE;
    if d & 0x80 == 0 {
        offload = offload.with_partial_checksum(start, if b & 1 == 0 { 16 } else { 6 });
    }
    if c & 1 == 0 {
        offload = offload.with_segmentation(kind, mss, header_len);
    }
    let mut cuts = Vec::new();
    match gso::segment(frame, offload, |f| cuts.push(f.to_vec())) {
        Ok(n) => {
            assert_eq!(n, cuts.len());
            if offload.segmentation().is_some() {
                let h = usize::from(header_len);
                let payload: usize = cuts.iter().map(|f| f.len() - h).sum();
                assert_eq!(payload, frame.len() - h, "the payload exactly once");
                assert!(cuts.iter().all(|f| f.len() <= h + usize::from(mss) && f[..12] == frame[..12]));
            } else {
                assert_eq!((n, cuts[0].len()), (1, frame.len()));
            }
        }
        Err(_) => assert!(cuts.is_empty(), "an error hands out nothing"),
    }
}

fuzz_target!(|data: &[u8]| {
    check_gso(data);
    let now = Instant::now();
    let mut reassembler = FragmentReassembler::default();
    let (src, dst) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));

    // Every parser on the raw bytes.
    check_frame(data, &mut reassembler, now);
    check_ipv4(data, &mut reassembler, now);
    check_tcp(data, src, dst);
    check_icmp(data);
    check_arp(data);
    assert!(TcpOptions::new(data).count() <= data.len());
    assert_eq!(checksum::data(data), checksum::data_reference(data));

    // With a valid IPv4 header in front (checksum and lengths fixed up), so that most inputs reach
    // the transport parsers and the reassembler with a verified header.
    if let Some((&sel, rest)) = data.split_first() {
        let header_len = 20 + 4 * usize::from(sel & 0x3).min(rest.len() / 4);
        let mut packet = rest.to_vec();
        packet.resize(packet.len().max(header_len), 0);
        packet.truncate(65535);
        let total = u16::try_from(packet.len()).expect("truncated");
        let mut p = Ipv4Packet::new_unchecked(&mut packet[..]);
        p.set_version_and_header_len(4, u8::try_from(header_len).expect("at most 32"));
        p.set_total_len(total);
        p.set_protocol(match sel >> 6 {
            0 | 1 => Protocol::Tcp,
            2 => Protocol::Icmp,
            _ => Protocol::Udp,
        });
        p.fill_checksum();
        let mut frame = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        if sel & 0x4 != 0 {
            frame.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        }
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(&packet);
        check_frame(&frame, &mut reassembler, now);
        // The TCP and ICMP checksums verified too, so re-emission is compared on verified input.
        let p = Ipv4Packet::new_unchecked(&packet[..]);
        if let Ok(repr) = Ipv4Repr::parse(&p, ChecksumPolicy::Verify) {
            let mut payload = p.payload().to_vec();
            if repr.protocol == Protocol::Tcp && payload.len() >= 20 {
                let mut t = TcpPacket::new_unchecked(&mut payload[..]);
                t.fill_checksum(repr.src_addr, repr.dst_addr);
                if let Ok(dst_port) = TcpRepr::parse(
                    &TcpPacket::new_unchecked(&payload[..]),
                    repr.src_addr,
                    repr.dst_addr,
                    ChecksumPolicy::Verify,
                )
                .map(|tcp| tcp.dst_port)
                {
                    let mut t = TcpPacket::new_unchecked(&mut payload[..]);
                    t.set_dst_port_incremental(dst_port.wrapping_add(1).max(1));
                    assert!(
                        t.verify_checksum(repr.src_addr, repr.dst_addr),
                        "incremental update keeps the checksum"
                    );
                }
            }
            check_transport(repr.protocol, &payload, repr.src_addr, repr.dst_addr);
        }
    }

    // The reassembler on a fragment sequence decoded from the same bytes.
    let mut u = Unstructured::new(data);
    if let Ok(fragments) = Vec::<Fragment>::arbitrary(&mut u) {
        reassemble(fragments);
    }
});
