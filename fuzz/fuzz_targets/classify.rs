//! The frame classifier on arbitrary bytes: it must never panic, and what it reports must agree with
//! the bytes. A small, separately written reference walk finds where the IP header and the transport
//! header start; a flow's addresses and ports must be the bytes found there, its flow group the low 12
//! bits of the source port. A non-flow verdict must agree with the bytes too: the EtherType for ARP and
//! other EtherTypes (and every frame with such an EtherType gets that verdict), the IPv4 protocol
//! for ICMP and other transports, the flags/offset word for IPv4 fragments, the version nibble, IHL,
//! total length and TCP data offset for the malformed ones. Appending bytes to a frame may only change
//! a `Truncated` verdict: everything else is bounded by the IP packet's own length.
#![no_main]

use std::net::{IpAddr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use netchannel::classify::{Classified, Malformed, Other, classify};
use netchannel::registry::HashKey;
use netchannel::signature::{FlowGroup, Proto};

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Offsets of the IP header and the transport header of a frame the classifier called a flow.
fn reference_offsets(frame: &[u8]) -> Option<(usize, usize)> {
    let mut l3 = 14;
    let mut ethertype = be16(frame, 12)?;
    if ethertype == 0x8100 {
        ethertype = be16(frame, 16)?;
        l3 = 18;
    }
    match ethertype {
        0x0800 => Some((l3, l3 + usize::from(*frame.get(l3)? & 0x0f) * 4)),
        0x86DD => {
            let mut next = *frame.get(l3 + 6)?;
            let mut at = l3 + 40;
            while next != 6 && next != 17 {
                let units = usize::from(*frame.get(at + 1)?);
                let len = if next == 51 { (units + 2) * 4 } else { (units + 1) * 8 };
                next = *frame.get(at)?;
                at += len;
            }
            Some((l3, at))
        }
        _ => None,
    }
}

/// The EtherType after at most one 802.1Q tag, and where the header it names starts.
fn reference_ethertype(frame: &[u8]) -> Option<(u16, usize)> {
    let outer = be16(frame, 12)?;
    if outer == 0x8100 { Some((be16(frame, 16)?, 18)) } else { Some((outer, 14)) }
}

/// A non-flow verdict against the bytes, read by the reference walk.
fn check_other(frame: &[u8], c: Classified) {
    let eth = reference_ethertype(frame);
    // ARP and any EtherType other than IP: the EtherType alone decides the verdict.
    if let Some((t, _)) = eth.filter(|&(t, _)| t != 0x0800 && t != 0x86DD) {
        let want = if t == 0x0806 { Other::Arp } else { Other::OtherEtherType(t) };
        assert_eq!(c, Classified::Other(want), "EtherType {t:#06x}");
        return;
    }
    let Some((ethertype, l3)) = eth else {
        assert_eq!(c, Classified::Malformed(Malformed::Truncated), "no room for an EtherType");
        return;
    };
    let v4 = ethertype == 0x0800;
    let byte = |at: usize| *frame.get(at).expect("a header byte the verdict depends on is in the frame");
    match c {
        Classified::Flow { .. } | Classified::Malformed(Malformed::Truncated) => {}
        Classified::Other(Other::Arp | Other::OtherEtherType(_)) => panic!("{c:?} for an IP EtherType"),
        Classified::Other(Other::Icmp) => {
            assert!(v4 && byte(l3) >> 4 == 4 && byte(l3 + 9) == 1, "ICMP: {c:?}");
        }
        Classified::Other(Other::Icmpv6 | Other::TooManyExtensionHeaders) => {
            assert!(!v4 && byte(l3) >> 4 == 6, "{c:?} outside IPv6");
        }
        Classified::Other(Other::OtherL4(p)) => {
            assert!(![6, 17].contains(&p), "TCP or UDP called another transport");
            if v4 {
                assert_eq!(byte(l3 + 9), p, "the IPv4 protocol field");
                assert_ne!(p, 1, "ICMP called another transport");
            } else {
                assert_ne!(p, 58, "ICMPv6 called another transport");
            }
        }
        Classified::Other(Other::Fragment) => {
            if v4 {
                let word = be16(frame, l3 + 6).expect("flags/offset in frame");
                assert_ne!(word & 0x3fff, 0, "an IPv4 fragment without MF or an offset");
            }
        }
        Classified::Malformed(Malformed::BadVersion) => {
            assert_ne!(byte(l3) >> 4, if v4 { 4 } else { 6 }, "BadVersion with the right version");
        }
        Classified::Malformed(Malformed::BadHeaderLength) => {
            assert!(v4 && byte(l3) & 0x0f < 5, "BadHeaderLength with IHL {}", byte(l3) & 0x0f);
        }
        Classified::Malformed(Malformed::BadTotalLength) => {
            let total = usize::from(be16(frame, l3 + 2).expect("total length in frame"));
            assert!(v4 && total < usize::from(byte(l3) & 0x0f) * 4, "BadTotalLength with {total}");
        }
        Classified::Malformed(Malformed::BadDataOffset) => {
            let (_, l4) = reference_offsets(frame).expect("a TCP header was read");
            assert!(byte(l4 + 12) >> 4 < 5, "BadDataOffset with data offset {}", byte(l4 + 12) >> 4);
        }
    }
}

fn check(frame: &[u8]) {
    let c = classify(frame);
    check_other(frame, c);
    if let Classified::Flow { sig, flow_group } = c {
        let (l3, l4) = reference_offsets(frame).expect("a flow has IP and transport headers");
        let src_port = be16(frame, l4).expect("source port in frame");
        let dst_port = be16(frame, l4 + 2).expect("destination port in frame");
        assert_eq!(sig.remote().port(), src_port);
        assert_eq!(sig.local().port(), dst_port);
        assert_eq!(flow_group, FlowGroup::of_port(src_port));
        let proto_at = if sig.local().is_ipv4() { l3 + 9 } else { usize::MAX };
        if let Some(&p) = frame.get(proto_at) {
            assert_eq!(Proto::from_number(p), Some(sig.proto()));
        }
        let ip = |at: usize, len: usize| -> IpAddr {
            let b = frame.get(at..at + len).expect("address in frame");
            if len == 4 {
                IpAddr::from(<[u8; 4]>::try_from(b).expect("4 bytes"))
            } else {
                IpAddr::from(<[u8; 16]>::try_from(b).expect("16 bytes"))
            }
        };
        let (src, dst) = match sig.local() {
            SocketAddr::V4(_) => (ip(l3 + 12, 4), ip(l3 + 16, 4)),
            SocketAddr::V6(_) => (ip(l3 + 8, 16), ip(l3 + 24, 16)),
        };
        assert_eq!(sig.remote().ip(), src);
        assert_eq!(sig.local().ip(), dst);
        // The signature round-trips through the public constructor and hashes consistently.
        let rebuilt = netchannel::signature::Signature::new(sig.proto(), sig.local(), sig.remote())
            .expect("same family");
        assert_eq!(rebuilt, sig);
        let key = HashKey::from_seed(7);
        assert_eq!(rebuilt.hash64(&key), sig.hash64(&key));
    }
    if c != Classified::Malformed(Malformed::Truncated) {
        let mut longer = frame.to_vec();
        longer.extend_from_slice(&[0xA5; 64]);
        assert_eq!(classify(&longer), c, "appending bytes changed a verdict that was not Truncated");
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    // Also with a valid Ethernet/IP prefix, so most inputs reach the IP and transport parsers.
    if let Some((&sel, rest)) = data.split_first() {
        let mut frame = vec![0u8; 12];
        if sel & 1 == 1 {
            frame.extend_from_slice(&[0x81, 0, 0, 1]);
        }
        frame.extend_from_slice(if sel & 2 == 2 { &[0x86, 0xDD, 0x60] } else { &[0x08, 0x00, 0x45] });
        frame.extend_from_slice(rest);
        check(&frame);
    }
});
