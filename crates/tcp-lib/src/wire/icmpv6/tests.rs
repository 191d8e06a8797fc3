//! Tests of ICMPv6: byte vectors as scapy 2 builds them for Linux's messages (checked by hand against
//! RFC 4443 / RFC 4861), round trips and truncation.

use super::{
    DST_UNREACHABLE, DstUnreachable, ECHO_REQUEST, PARAM_PROBLEM, PKT_TOO_BIG, Packet, ParamProblem, Repr,
    TIME_EXCEEDED, TimeExceeded,
};
use crate::wire::ipv4::Protocol;
use crate::wire::ndp::tests::{NA, NS, RA, ipv6_payload, ra_repr};
use crate::wire::{ChecksumPolicy, Error, Result, ipv6};
use crate::wire::{EthernetAddress, ndp};
use proptest::prelude::*;
use std::net::Ipv6Addr;

/// A packet too big from 2001:db8::fe, MTU 1280, quoting the IPv6 header and 8 TCP bytes of a 1440-byte segment 2001:db8::2 -> 2001:db8::1.
pub(crate) const PTB: [u8; 96] = [
    0x60, 0x00, 0x00, 0x00, 0x00, 0x38, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x38, 0x48, 0x00, 0x00, 0x05, 0x00, 0x60, 0x00, 0x00,
    0x00, 0x05, 0x8c, 0x06, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x01, 0x9c, 0x40, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01,
];

/// An echo request 2001:db8::2 -> 2001:db8::1, id 0x1234, seq 1, data "abcdefgh".
pub(crate) const ECHO: [u8; 56] = [
    0x60, 0x00, 0x00, 0x00, 0x00, 0x10, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x80, 0x00, 0x80, 0x75, 0x12, 0x34, 0x00, 0x01, 0x61, 0x62, 0x63,
    0x64, 0x65, 0x66, 0x67, 0x68,
];

fn addrs(packet: &[u8]) -> (Ipv6Addr, Ipv6Addr) {
    let p = ipv6::Packet::new_checked(packet).unwrap();
    (p.src_addr(), p.dst_addr())
}

/// Parses the ICMPv6 message of a whole IPv6 packet, checksum verified, and checks that emit
/// gives its bytes back.
fn parse_and_reemit(packet: &[u8]) -> Repr<'_> {
    let ip_repr = ipv6::Repr::parse(&ipv6::Packet::new_checked(packet).unwrap()).unwrap();
    assert_eq!(ip_repr.next_header, Protocol::Icmpv6);
    let payload = ipv6_payload(packet);
    let p = Packet::new_checked(payload).unwrap();
    let repr = Repr::parse(&p, ip_repr.src_addr, ip_repr.dst_addr, ChecksumPolicy::Verify).unwrap();
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), ip_repr.src_addr, ip_repr.dst_addr);
    assert_eq!(out, payload, "emit gives the bytes back");
    repr
}

#[test]
fn known_ndp() {
    let Repr::Ndp(ndp::Repr::NeighborSolicit { target, lladdr }) = parse_and_reemit(&NS) else {
        panic!("an NS")
    };
    assert_eq!(target, "2001:db8::1".parse::<Ipv6Addr>().unwrap());
    assert_eq!(lladdr, Some(EthernetAddress([0x52, 0x54, 0, 0x12, 0x34, 0x56])));
    assert_eq!(addrs(&NS).1, ipv6::addr::solicited_node(target), "sent to the solicited-node group");
    assert!(matches!(parse_and_reemit(&NA), Repr::Ndp(ndp::Repr::NeighborAdvert { solicited: true, .. })));
    assert_eq!(parse_and_reemit(&RA), Repr::Ndp(ra_repr()));
}

#[test]
fn known_errors_and_echo() {
    let Repr::PktTooBig { mtu, header, data } = parse_and_reemit(&PTB) else { panic!("a packet too big") };
    assert_eq!(mtu, 1280);
    assert_eq!((header.next_header, header.payload_len), (Protocol::Tcp, 1420));
    assert_eq!(header.src_addr, "2001:db8::2".parse::<Ipv6Addr>().unwrap());
    assert_eq!(data, [0x9c, 0x40, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01], "ports and sequence number");
    assert_eq!(parse_and_reemit(&ECHO), Repr::EchoRequest { ident: 0x1234, seq_no: 1, data: b"abcdefgh" });
    // The checksum covers the pseudo-header: another destination fails.
    let (src, _) = addrs(&ECHO);
    let p = Packet::new_checked(ipv6_payload(&ECHO)).unwrap();
    assert_eq!(Repr::parse(&p, src, src, ChecksumPolicy::Verify), Err(Error::Checksum));
    assert!(Repr::parse(&p, src, src, ChecksumPolicy::Trust).is_ok());
}

#[test]
fn codes_and_types() {
    let (src, dst) = addrs(&PTB);
    let mut m = ipv6_payload(&PTB).to_vec();
    fn parse(m: &mut [u8], (src, dst): (Ipv6Addr, Ipv6Addr), t: u8, c: u8) -> Result<Repr<'_>> {
        m[0] = t;
        m[1] = c;
        Packet::new_unchecked(&mut m[..]).fill_checksum(src, dst);
        Repr::parse(&Packet::new_unchecked(&m[..]), src, dst, ChecksumPolicy::Verify)
    }
    let a = (src, dst);
    for code in 0..=6 {
        assert!(matches!(parse(&mut m, a, DST_UNREACHABLE, code), Ok(Repr::DstUnreachable { .. })));
    }
    assert_eq!(parse(&mut m, a, DST_UNREACHABLE, 7), Err(Error::Unrecognized));
    assert_eq!(parse(&mut m, a, PKT_TOO_BIG, 1), Err(Error::Unrecognized));
    assert!(matches!(
        parse(&mut m, a, TIME_EXCEEDED, 1),
        Ok(Repr::TimeExceeded { reason: TimeExceeded::FragReassemblyExceeded, .. })
    ));
    assert_eq!(parse(&mut m, a, TIME_EXCEEDED, 2), Err(Error::Unrecognized));
    let Ok(Repr::ParamProblem { reason, pointer, .. }) = parse(&mut m, a, PARAM_PROBLEM, 3) else {
        panic!("parses")
    };
    assert_eq!((reason, pointer), (ParamProblem::IncompleteChain, 1280));
    assert_eq!(parse(&mut m, a, PARAM_PROBLEM, 4), Err(Error::Unrecognized));
    assert_eq!(parse(&mut m, a, ECHO_REQUEST, 1), Err(Error::Unrecognized));
    assert_eq!(parse(&mut m, a, 200, 0), Err(Error::Unrecognized));
    assert_eq!(parse(&mut m, a, ndp::REDIRECT, 0), Err(Error::Unrecognized));
    for r in DstUnreachable::ALL {
        assert_eq!(DstUnreachable::from_code(r.code()), Some(*r));
    }
    // A quote that is not IPv6.
    m[8] = 0x45;
    assert_eq!(parse(&mut m, a, DST_UNREACHABLE, 0), Err(Error::Unrecognized));
}

#[test]
fn truncation_never_panics() {
    for packet in [&NS[..], &NA[..], &RA[..], &PTB[..], &ECHO[..]] {
        let (src, dst) = addrs(packet);
        let m = ipv6_payload(packet);
        for len in 0..m.len() {
            let p = Packet::new_unchecked(&m[..len]);
            // Lengths are in the checksum: verified, every cut fails; trusted, none panics.
            assert!(Repr::parse(&p, src, dst, ChecksumPolicy::Verify).is_err(), "{len}");
            let _ = Repr::parse(&p, src, dst, ChecksumPolicy::Trust);
        }
    }
}

proptest! {
    #[test]
    fn round_trip(
        data in proptest::collection::vec(any::<u8>(), 0..64),
        kind in 0u8..7,
        (ident, seq_no, code, param) in (any::<u16>(), any::<u16>(), any::<u8>(), any::<u32>()),
        header in crate::wire::ipv6::tests::arb_repr(),
        ndp in crate::wire::ndp::tests::arb_repr(),
        (s, d) in (any::<u128>(), any::<u128>()),
    ) {
        let (src, dst) = (Ipv6Addr::from_bits(s), Ipv6Addr::from_bits(d));
        let data = &data[..];
        // The quote cannot be longer than the packet it quotes.
        let header = crate::wire::ipv6::Repr { payload_len: header.payload_len.max(data.len()), ..header };
        let repr = match kind {
            0 => Repr::EchoRequest { ident, seq_no, data },
            1 => Repr::EchoReply { ident, seq_no, data },
            2 => Repr::DstUnreachable { reason: DstUnreachable::from_code(code % 7).unwrap(), header, data },
            3 => Repr::PktTooBig { mtu: param, header, data },
            4 => Repr::TimeExceeded { reason: TimeExceeded::from_code(code % 2).unwrap(), header, data },
            5 => Repr::ParamProblem { reason: ParamProblem::from_code(code % 4).unwrap(), pointer: param, header, data },
            _ => Repr::Ndp(ndp),
        };
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]), src, dst);
        let again = Repr::parse(&Packet::new_checked(&out[..]).unwrap(), src, dst, ChecksumPolicy::Verify);
        prop_assert_eq!(again, Ok(repr));
    }

    #[test]
    fn no_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        let p = Packet::new_unchecked(&bytes[..]);
        if p.check_len().is_ok() {
            let _ = (p.msg_type(), p.msg_code(), p.echo_ident(), p.echo_seq_no(), p.param(), p.data());
        }
        let _ = Repr::parse(&p, Ipv6Addr::UNSPECIFIED, Ipv6Addr::UNSPECIFIED, ChecksumPolicy::Trust);
    }
}
