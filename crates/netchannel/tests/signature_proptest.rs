//! Property tests of the frame classifier: frames built from random fields classify to exactly the
//! signature and flow group they were built with; arbitrary bytes and every prefix of a valid frame
//! classify without panicking, and a prefix that cuts the headers is malformed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use netchannel::classify::{
    Classified, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, MAX_EXTENSION_HEADERS, Malformed, classify,
};
use netchannel::signature::{FlowGroup, Proto, Signature};
use proptest::prelude::*;

/// An IPv6 extension header: Hop-by-Hop 0, Routing 43, Destination Options 60 (8-byte units) or AH 51
/// (4-byte units), with its length parameter.
#[derive(Clone, Debug)]
struct Ext {
    kind: u8,
    len: u8,
}

#[derive(Clone, Debug)]
enum Ip {
    V4 { src: Ipv4Addr, dst: Ipv4Addr, options_words: u8 },
    V6 { src: Ipv6Addr, dst: Ipv6Addr, ext: Vec<Ext> },
}

#[derive(Clone, Debug)]
struct Spec {
    vlan: Option<u16>,
    ip: Ip,
    proto: Proto,
    src_port: u16,
    dst_port: u16,
    tcp_options_words: u8,
    payload: Vec<u8>,
    padding: usize,
}

fn ext() -> impl Strategy<Value = Ext> {
    (prop::sample::select(vec![0u8, 43, 60, 51]), 0u8..6).prop_map(|(kind, len)| Ext { kind, len })
}

fn spec() -> impl Strategy<Value = Spec> {
    let ip = prop_oneof![
        (any::<[u8; 4]>(), any::<[u8; 4]>(), 0u8..=10).prop_map(|(s, d, o)| Ip::V4 {
            src: s.into(),
            dst: d.into(),
            options_words: o
        }),
        (any::<[u8; 16]>(), any::<[u8; 16]>(), prop::collection::vec(ext(), 0..=MAX_EXTENSION_HEADERS))
            .prop_map(|(s, d, ext)| Ip::V6 { src: s.into(), dst: d.into(), ext }),
    ];
    (
        prop::option::of(any::<u16>()),
        ip,
        prop::bool::ANY.prop_map(|t| if t { Proto::Tcp } else { Proto::Udp }),
        any::<u16>(),
        any::<u16>(),
        0u8..=10,
        prop::collection::vec(any::<u8>(), 0..64),
        0usize..16,
    )
        .prop_map(|(vlan, ip, proto, src_port, dst_port, tcp_options_words, payload, padding)| Spec {
            vlan,
            ip,
            proto,
            src_port,
            dst_port,
            tcp_options_words,
            payload,
            padding,
        })
}

fn be16(n: usize) -> [u8; 2] {
    u16::try_from(n).expect("fits in 16 bits").to_be_bytes()
}

/// The frame `spec` describes, and where its transport header ends.
fn build(spec: &Spec) -> (Vec<u8>, usize) {
    let mut l4 = Vec::new();
    l4.extend_from_slice(&spec.src_port.to_be_bytes());
    l4.extend_from_slice(&spec.dst_port.to_be_bytes());
    match spec.proto {
        Proto::Tcp => {
            l4.extend_from_slice(&[0; 8]);
            l4.push((5 + spec.tcp_options_words) << 4);
            l4.extend_from_slice(&[0x18, 0, 0, 0, 0, 0, 0]);
            l4.extend(std::iter::repeat_n(1, usize::from(spec.tcp_options_words) * 4));
        }
        Proto::Udp => {
            l4.extend_from_slice(&be16(8 + spec.payload.len()));
            l4.extend_from_slice(&[0, 0]);
        }
    }
    let l4_header = l4.len();
    l4.extend_from_slice(&spec.payload);

    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    if let Some(tci) = spec.vlan {
        frame.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        frame.extend_from_slice(&tci.to_be_bytes());
    }
    let l3_at = frame.len() + 2;
    let l4_at = match &spec.ip {
        Ip::V4 { src, dst, options_words } => {
            frame.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            let hl = 20 + usize::from(*options_words) * 4;
            frame.push(0x40 | (5 + options_words));
            frame.push(0);
            frame.extend_from_slice(&be16(hl + l4.len()));
            frame.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 64, spec.proto.number(), 0, 0]);
            frame.extend_from_slice(&src.octets());
            frame.extend_from_slice(&dst.octets());
            frame.extend(std::iter::repeat_n(0x01, hl - 20));
            l3_at + hl
        }
        Ip::V6 { src, dst, ext } => {
            frame.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            let mut chain = Vec::new();
            for (i, e) in ext.iter().enumerate() {
                let next = ext.get(i + 1).map_or(spec.proto.number(), |n| n.kind);
                let len =
                    if e.kind == 51 { (usize::from(e.len) + 2) * 4 } else { (usize::from(e.len) + 1) * 8 };
                let start = chain.len();
                chain.resize(start + len, 0x77);
                chain[start] = next;
                chain[start + 1] = e.len;
            }
            frame.extend_from_slice(&[0x60, 0, 0, 0]);
            frame.extend_from_slice(&be16(chain.len() + l4.len()));
            frame.push(ext.first().map_or(spec.proto.number(), |e| e.kind));
            frame.push(64);
            frame.extend_from_slice(&src.octets());
            frame.extend_from_slice(&dst.octets());
            frame.extend_from_slice(&chain);
            l3_at + 40 + chain.len()
        }
    };
    frame.extend_from_slice(&l4);
    frame.resize(frame.len() + spec.padding, 0xEE);
    (frame, l4_at + l4_header)
}

fn expected(spec: &Spec) -> Signature {
    let (src, dst): (IpAddr, IpAddr) = match &spec.ip {
        Ip::V4 { src, dst, .. } => ((*src).into(), (*dst).into()),
        Ip::V6 { src, dst, .. } => ((*src).into(), (*dst).into()),
    };
    Signature::new(spec.proto, SocketAddr::new(dst, spec.dst_port), SocketAddr::new(src, spec.src_port))
        .expect("same family")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn built_frames_classify_to_their_signature(spec in spec()) {
        let (frame, _) = build(&spec);
        let want = expected(&spec);
        prop_assert_eq!(
            classify(&frame),
            Classified::Flow { sig: want, flow_group: FlowGroup::of_port(spec.src_port) }
        );
        prop_assert_eq!(want.flow_group(), FlowGroup(spec.src_port & 0x0fff));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let c = classify(&bytes);
        if let Classified::Flow { sig, flow_group } = c {
            prop_assert_eq!(flow_group, sig.flow_group());
            prop_assert_eq!(sig.local().is_ipv4(), sig.remote().is_ipv4());
        }
    }

    /// Arbitrary bytes behind a valid Ethernet + IP prefix, so the fuzzing reaches the deeper layers.
    #[test]
    fn arbitrary_ip_payloads_never_panic(
        v6 in any::<bool>(),
        vlan in any::<bool>(),
        body in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut frame = vec![0u8; 12];
        if vlan {
            frame.extend_from_slice(&[0x81, 0, 0, 1]);
        }
        frame.extend_from_slice(&if v6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 }.to_be_bytes());
        frame.push(if v6 { 0x60 } else { 0x45 });
        frame.extend_from_slice(&body);
        let _ = classify(&frame);
    }

    #[test]
    fn prefixes_never_panic_and_cut_headers_are_malformed(spec in spec()) {
        let (frame, headers_end) = build(&spec);
        let ip_end = frame.len() - spec.padding;
        for len in 0..=frame.len() {
            let c = classify(&frame[..len]);
            if len < headers_end {
                prop_assert_eq!(c, Classified::Malformed(Malformed::Truncated), "prefix {}", len);
            } else if len < ip_end {
                // The transport header is whole but the IP length says more: still truncated.
                prop_assert_eq!(c, Classified::Malformed(Malformed::Truncated), "prefix {}", len);
            } else {
                prop_assert!(matches!(c, Classified::Flow { .. }), "prefix {}: {:?}", len, c);
            }
        }
    }
}
