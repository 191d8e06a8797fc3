use std::net::{Ipv4Addr, Ipv6Addr};

use netchannel::pool::{GsoKind, Offload};

use super::segment;
use crate::wire::tcp::Timestamp;
use crate::wire::{
    ChecksumPolicy, Error, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Ipv4Packet, Ipv4Repr,
    Ipv6Packet, Ipv6Repr, Protocol, SeqNumber, TcpControl, TcpPacket, TcpRepr, checksum,
};

const SRC4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SRC6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const DST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(131) >> 2).to_le_bytes()[0]).collect()
}

/// A super-segment as the stack emits it: the IP length of the whole, the TCP checksum field
/// holding the pseudo-header sum over the whole TCP length; its offload metadata.
fn super_segment(v6: bool, data: &[u8], mss: u16, fin: bool, cwr: bool) -> (Vec<u8>, Offload) {
    let tcp = TcpRepr {
        src_port: 40_000,
        dst_port: 80,
        control: if fin { TcpControl::Fin } else { TcpControl::None },
        push: true,
        cwr,
        seq_number: SeqNumber::new(0xffff_f000),
        ack_number: Some(SeqNumber::new(7)),
        window_len: 1000,
        timestamp: Some(Timestamp { tsval: 5, tsecr: 6 }),
        payload: data,
        ..TcpRepr::default()
    };
    let ip_len = if v6 { 40 } else { 20 };
    let l4 = 14 + ip_len;
    let mut frame = vec![0u8; l4 + tcp.buffer_len()];
    let ethertype = if v6 { EtherType::Ipv6 } else { EtherType::Ipv4 };
    EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        vlan: None,
        ethertype,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
    let tcp_len = tcp.buffer_len();
    let pseudo = if v6 {
        Ipv6Repr {
            src_addr: SRC6,
            dst_addr: DST6,
            next_header: Protocol::Tcp,
            payload_len: tcp_len,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut frame[14..]));
        checksum::pseudo_header_v6(SRC6, DST6, 6, u32::try_from(tcp_len).unwrap())
    } else {
        Ipv4Repr {
            src_addr: SRC4,
            dst_addr: DST4,
            protocol: Protocol::Tcp,
            payload_len: tcp_len,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 0xfffe,
            dont_frag: true,
        }
        .emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..]));
        checksum::pseudo_header_v4(SRC4, DST4, 6, u32::try_from(tcp_len).unwrap())
    };
    let mut view = TcpPacket::new_unchecked(&mut frame[l4..]);
    tcp.emit_unsummed(&mut view);
    view.set_checksum(pseudo);
    let kind = if v6 { GsoKind::Tcp6 } else { GsoKind::Tcp4 };
    let header_len = u16::try_from(l4 + tcp.header_len()).unwrap();
    let mut offload = Offload::NONE
        .with_partial_checksum(u16::try_from(l4).unwrap(), 16)
        .with_segmentation(kind, mss, header_len);
    if cwr {
        offload = offload.with_ecn();
    }
    (frame, offload)
}

/// What one cut segment says, after full verification of its checksums.
#[derive(Debug)]
struct Cut {
    seq: u32,
    payload: Vec<u8>,
    fin: bool,
    psh: bool,
    cwr: bool,
    ident: Option<u16>,
    timestamp: Option<Timestamp>,
}

fn parse(frame: &[u8]) -> Cut {
    let eth = EthernetFrame::new_checked(frame).expect("an Ethernet frame");
    let (bytes, src, dst, ident) = match eth.ethertype() {
        EtherType::Ipv4 => {
            let ip = Ipv4Packet::new_checked(eth.payload()).expect("IPv4");
            let repr = Ipv4Repr::parse(&ip, ChecksumPolicy::Verify).expect("a valid IPv4 header");
            assert_eq!(repr.payload_len, ip.payload().len());
            (ip.payload().to_vec(), Some((SRC4, DST4)), None, Some(repr.ident))
        }
        _ => {
            let ip = Ipv6Packet::new_checked(eth.payload()).expect("IPv6");
            let (_, payload) = Ipv6Repr::parse_with_payload(&ip).expect("a valid IPv6 header");
            (payload.to_vec(), None, Some((SRC6, DST6)), None)
        }
    };
    let packet = TcpPacket::new_checked(&bytes[..]).expect("TCP");
    let repr = match (src, dst) {
        (Some((s, d)), _) => TcpRepr::parse(&packet, s, d, ChecksumPolicy::Verify),
        (_, Some((s, d))) => TcpRepr::parse_v6(&packet, s, d, ChecksumPolicy::Verify),
        _ => unreachable!(),
    }
    .expect("a TCP segment whose checksum verifies");
    Cut {
        seq: repr.seq_number.get(),
        payload: repr.payload.to_vec(),
        fin: repr.control == TcpControl::Fin,
        psh: repr.push,
        cwr: repr.cwr,
        ident,
        timestamp: repr.timestamp,
    }
}

#[test]
fn cuts_a_super_segment_into_verified_segments() {
    for v6 in [false, true] {
        let data = payload(10 * 1448 + 100);
        let (frame, offload) = super_segment(v6, &data, 1448, true, true);
        let mut cuts = Vec::new();
        let n = segment(&frame, offload, |f| cuts.push(parse(f))).expect("segmented");
        assert_eq!((n, cuts.len()), (11, 11), "ten whole segments and the short rest (v6: {v6})");
        let mut joined = Vec::new();
        for (i, cut) in cuts.iter().enumerate() {
            let last = i == cuts.len() - 1;
            assert_eq!(
                cut.seq,
                0xffff_f000u32.wrapping_add(u32::try_from(i * 1448).unwrap()),
                "sequence wraps with the cuts"
            );
            assert_eq!(cut.payload.len(), if last { 100 } else { 1448 });
            assert_eq!((cut.fin, cut.psh), (last, last), "FIN and PSH only on the last");
            assert_eq!(cut.cwr, i == 0, "CWR only on the first");
            assert_eq!(cut.timestamp, Some(Timestamp { tsval: 5, tsecr: 6 }), "each cut keeps the options");
            if !v6 {
                assert_eq!(
                    cut.ident,
                    Some(0xfffeu16.wrapping_add(u16::try_from(i).unwrap())),
                    "IPv4 ident incremented"
                );
            }
            joined.extend_from_slice(&cut.payload);
        }
        assert_eq!(joined, data);
    }
}

#[test]
fn a_64k_super_segment_and_one_of_exactly_one_segment() {
    for v6 in [false, true] {
        let data = payload(65_535 - 40 - 32 - 20);
        let (frame, offload) = super_segment(v6, &data, 1428, false, false);
        let mut total = 0;
        let n = segment(&frame, offload, |f| total += parse(f).payload.len()).expect("segmented");
        assert_eq!((n, total), (data.len().div_ceil(1428), data.len()));
        let data = payload(1000);
        let (frame, offload) = super_segment(v6, &data, 1448, false, false);
        let mut cuts = Vec::new();
        assert_eq!(segment(&frame, offload, |f| cuts.push(parse(f))), Ok(1));
        assert_eq!(cuts[0].payload, data);
        assert!(cuts[0].psh);
    }
}

#[test]
fn finishes_a_partial_checksum_and_passes_plain_frames() {
    for v6 in [false, true] {
        let data = payload(700);
        let (frame, offload) = super_segment(v6, &data, 1448, false, false);
        let (l4, _) = offload.partial_checksum().expect("partial");
        let partial_only = Offload::NONE.with_partial_checksum(l4, 16);
        let mut cuts = Vec::new();
        assert_eq!(segment(&frame, partial_only, |f| cuts.push(parse(f))), Ok(1));
        assert_eq!(cuts[0].payload, data);
        let mut plain = Vec::new();
        assert_eq!(segment(&frame, Offload::NONE, |f| plain.push(f.to_vec())), Ok(1));
        assert_eq!(plain, vec![frame], "no offload: the frame unchanged");
    }
}

#[test]
fn refuses_metadata_that_does_not_fit_the_frame() {
    let (frame, offload) = super_segment(false, &payload(5000), 1448, false, false);
    let (_, mss, header_len) = offload.segmentation().expect("gso");
    let cases = [
        Offload::NONE.with_segmentation(GsoKind::Tcp4, mss, header_len),
        offload.with_segmentation(GsoKind::Tcp6, mss, header_len),
        offload.with_segmentation(GsoKind::Tcp4, 0, header_len),
        offload.with_segmentation(GsoKind::Tcp4, mss, header_len + 4),
        offload.with_segmentation(GsoKind::Tcp4, mss, u16::MAX),
        Offload::NONE.with_partial_checksum(34, 6).with_segmentation(GsoKind::Tcp4, mss, header_len),
        Offload::NONE.with_partial_checksum(u16::MAX, 16).with_segmentation(GsoKind::Tcp4, mss, header_len),
    ];
    for bad in cases {
        let mut out = 0;
        assert_eq!(segment(&frame, bad, |_| out += 1), Err(Error::Malformed), "{bad:?}");
        assert_eq!(out, 0);
    }
    assert_eq!(segment(&frame[..40], offload, |_| {}), Err(Error::Malformed));
    assert_eq!(
        segment(&[0u8; 10], Offload::NONE.with_partial_checksum(9, 16), |_| {}),
        Err(Error::Truncated)
    );
}

#[test]
fn never_panics_on_arbitrary_frames_and_metadata() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (template, _) = super_segment(false, &payload(3000), 1448, false, false);
    for _ in 0..20_000 {
        let r = next();
        let len = usize::try_from(r % 200).unwrap();
        let mut frame: Vec<u8> = template.iter().take(len.max(20)).copied().collect();
        if r & 1 == 0 {
            let at = usize::try_from(next() % 1000).unwrap() % frame.len();
            frame[at] = next().to_le_bytes()[0];
        }
        let kind = if r & 2 == 0 { GsoKind::Tcp4 } else { GsoKind::Tcp6 };
        let start = u16::try_from(next() % 80).unwrap();
        let offset = u8::try_from(next() % 20).unwrap();
        let mss = u16::try_from(next() % 100).unwrap();
        let hdr = u16::try_from(next() % 120).unwrap();
        let mut o = Offload::NONE.with_partial_checksum(start, offset);
        if r & 4 == 0 {
            o = o.with_segmentation(kind, mss, hdr);
        }
        let _ = segment(&frame, o, |_| {});
    }
}
