use super::*;
use proptest::prelude::*;

// Whole IPv6 packets as scapy 2 builds them (checked by hand against RFC 4861).

/// A neighbour solicitation for 2001:db8::1 from fe80::5054:ff:fe12:3456 to its solicited-node group, with a source link-layer option, hop limit 255.
pub(crate) const NS: [u8; 72] = [
    0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50,
    0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x01, 0xff, 0x00, 0x00, 0x01, 0x87, 0x00, 0x42, 0xea, 0x00, 0x00, 0x00, 0x00, 0x20, 0x01, 0x0d,
    0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, 0x01, 0x52, 0x54,
    0x00, 0x12, 0x34, 0x56,
];

/// The solicited, override neighbour advertisement answering it, with a target link-layer option.
pub(crate) const NA: [u8; 72] = [
    0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x54,
    0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0x88, 0x00, 0x17, 0x03, 0x60, 0x00, 0x00, 0x00, 0x20, 0x01, 0x0d,
    0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x01, 0x52, 0x54,
    0x00, 0xab, 0xcd, 0xef,
];

/// A router advertisement from fe80::1 to ff02::1: hop limit 64, router lifetime 1800 s, source link-layer, MTU 1500 and prefix 2001:db8:1::/64 (L, A, valid 86400 s, preferred 14400 s) options.
pub(crate) const RA: [u8; 104] = [
    0x60, 0x00, 0x00, 0x00, 0x00, 0x40, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x86, 0x00, 0xdb, 0x83, 0x40, 0x00, 0x07, 0x08, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, 0x52, 0x54, 0x00, 0x00, 0x00, 0x01, 0x05, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x05, 0xdc, 0x03, 0x04, 0x40, 0xc0, 0x00, 0x01, 0x51, 0x80, 0x00, 0x00, 0x38, 0x40, 0x00,
    0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00,
];

/// The IPv6 payload of a packet.
pub(crate) fn ipv6_payload(packet: &[u8]) -> &[u8] {
    &packet[40..]
}

fn mac(last: [u8; 3]) -> EthernetAddress {
    EthernetAddress([0x52, 0x54, 0x00, last[0], last[1], last[2]])
}

pub(crate) fn ra_repr() -> Repr {
    let mut prefixes = Prefixes::default();
    assert!(prefixes.push(PrefixInfo {
        prefix: "2001:db8:1::".parse().unwrap(),
        prefix_len: 64,
        on_link: true,
        autonomous: true,
        valid_lifetime: 86400,
        preferred_lifetime: 14400,
    }));
    Repr::RouterAdvert {
        hop_limit: 64,
        managed: false,
        other: false,
        router_lifetime: 1800,
        reachable_time: 0,
        retrans_time: 0,
        lladdr: Some(mac([0, 0, 1])),
        mtu: Some(1500),
        prefixes,
    }
}

#[test]
fn known_messages() {
    let body = |m: &[u8]| ipv6_payload(m)[4..].to_vec();
    assert_eq!(Repr::parse(ROUTER_ADVERT, 0, &body(&RA)), Ok(ra_repr()));
    assert_eq!(
        Repr::parse(NEIGHBOR_SOLICIT, 0, &body(&NS)),
        Ok(Repr::NeighborSolicit {
            target: "2001:db8::1".parse().unwrap(),
            lladdr: Some(mac([0x12, 0x34, 0x56]))
        })
    );
    assert_eq!(
        Repr::parse(NEIGHBOR_ADVERT, 0, &body(&NA)),
        Ok(Repr::NeighborAdvert {
            router: false,
            solicited: true,
            override_: true,
            target: "2001:db8::1".parse().unwrap(),
            lladdr: Some(mac([0xab, 0xcd, 0xef])),
        })
    );
    // Emit gives the same bytes back.
    for (kind, m) in [(ROUTER_ADVERT, &RA[..]), (NEIGHBOR_SOLICIT, &NS[..]), (NEIGHBOR_ADVERT, &NA[..])] {
        let b = body(m);
        let repr = Repr::parse(kind, 0, &b).unwrap();
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut out);
        assert_eq!(out, b, "{kind}");
    }
}

#[test]
fn option_errors() {
    let ns = |opts: &[u8]| {
        let mut b = vec![0u8; 20];
        b[4] = 0x20;
        b.extend_from_slice(opts);
        Repr::parse(NEIGHBOR_SOLICIT, 0, &b)
    };
    assert!(ns(&[]).is_ok());
    assert_eq!(ns(&[1, 0, 0, 0, 0, 0, 0, 0]), Err(Error::Malformed), "length 0 (RFC 4861 §4.6)");
    assert_eq!(ns(&[1, 2, 0, 0, 0, 0, 0, 0]), Err(Error::Truncated), "past the end");
    assert_eq!(ns(&[1]), Err(Error::Truncated));
    assert_eq!(
        ns(&[1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        Err(Error::Malformed),
        "lladdr of 14 bytes"
    );
    // Unknown options and options that belong elsewhere are skipped.
    assert!(ns(&[14, 1, 1, 2, 3, 4, 5, 6, 2, 1, 1, 2, 3, 4, 5, 6]).is_ok());
    assert_eq!(ns(&[14, 1, 0, 0, 0, 0, 0, 0].repeat(MAX_OPTIONS)).map(|_| ()), Ok(()));
    assert_eq!(ns(&[14, 1, 0, 0, 0, 0, 0, 0].repeat(MAX_OPTIONS + 1)), Err(Error::Unrecognized));
    // A multicast target, a code, a short body, a redirect.
    let mut b = vec![0u8; 20];
    b[4] = 0xff;
    assert_eq!(Repr::parse(NEIGHBOR_ADVERT, 0, &b), Err(Error::Malformed));
    assert_eq!(Repr::parse(NEIGHBOR_SOLICIT, 1, &[0; 20]), Err(Error::Malformed));
    for (kind, fixed) in
        [(ROUTER_SOLICIT, 4), (ROUTER_ADVERT, 12), (NEIGHBOR_SOLICIT, 20), (NEIGHBOR_ADVERT, 20)]
    {
        assert_eq!(Repr::parse(kind, 0, &vec![0; fixed - 1]), Err(Error::Truncated));
    }
    assert_eq!(Repr::parse(REDIRECT, 0, &[0; 36]), Err(Error::Unrecognized));
    // RA options of the wrong size.
    let ra = |opts: &[u8]| {
        let mut b = vec![0u8; 12];
        b.extend_from_slice(opts);
        Repr::parse(ROUTER_ADVERT, 0, &b)
    };
    assert_eq!(ra(&[5, 2, 0, 0, 0, 0, 5, 0xdc, 0, 0, 0, 0, 0, 0, 0, 0]), Err(Error::Malformed), "MTU");
    let mut prefix = [0u8; 32];
    prefix[..3].copy_from_slice(&[3, 4, 129]);
    assert_eq!(ra(&prefix), Err(Error::Malformed), "prefix length 129");
    prefix[2] = 64;
    assert_eq!(ra(&prefix[..24].iter().copied().chain([0; 0]).collect::<Vec<_>>()), Err(Error::Truncated));
    // More than MAX_PREFIXES prefixes: the first ones are kept.
    let mut many = Vec::new();
    for i in 0..=MAX_PREFIXES {
        prefix[16] = u8::try_from(i).unwrap();
        many.extend_from_slice(&prefix);
    }
    let Ok(Repr::RouterAdvert { prefixes, .. }) = ra(&many) else { panic!("parses") };
    assert_eq!(prefixes.len(), MAX_PREFIXES);
    assert_eq!(prefixes.iter().map(|p| p.prefix.octets()[0]).collect::<Vec<_>>(), [0, 1, 2, 3]);
}

fn arb_lladdr() -> impl Strategy<Value = Option<EthernetAddress>> {
    proptest::option::of(any::<[u8; 6]>().prop_map(EthernetAddress))
}

fn arb_prefix() -> impl Strategy<Value = PrefixInfo> {
    (any::<u128>(), 0u8..=128, any::<bool>(), any::<bool>(), any::<u32>(), any::<u32>()).prop_map(
        |(p, prefix_len, on_link, autonomous, valid_lifetime, preferred_lifetime)| PrefixInfo {
            prefix: Ipv6Addr::from_bits(p),
            prefix_len,
            on_link,
            autonomous,
            valid_lifetime,
            preferred_lifetime,
        },
    )
}

pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> + Clone {
    let unicast = any::<u128>().prop_map(|a| Ipv6Addr::from_bits(a & !(0xff << 120)));
    prop_oneof![
        arb_lladdr().prop_map(|lladdr| Repr::RouterSolicit { lladdr }),
        (
            (any::<u8>(), any::<bool>(), any::<bool>(), any::<u16>(), any::<u32>(), any::<u32>()),
            arb_lladdr(),
            proptest::option::of(any::<u32>()),
            proptest::collection::vec(arb_prefix(), 0..=MAX_PREFIXES)
        )
            .prop_map(
                |(
                    (hop_limit, managed, other, router_lifetime, reachable_time, retrans_time),
                    lladdr,
                    mtu,
                    list,
                )| {
                    let mut prefixes = Prefixes::default();
                    for p in list {
                        prefixes.push(p);
                    }
                    Repr::RouterAdvert {
                        hop_limit,
                        managed,
                        other,
                        router_lifetime,
                        reachable_time,
                        retrans_time,
                        lladdr,
                        mtu,
                        prefixes,
                    }
                }
            ),
        (unicast.clone(), arb_lladdr()).prop_map(|(target, lladdr)| Repr::NeighborSolicit { target, lladdr }),
        (any::<[bool; 3]>(), unicast, arb_lladdr()).prop_map(
            |([router, solicited, override_], target, lladdr)| {
                Repr::NeighborAdvert { router, solicited, override_, target, lladdr }
            }
        ),
    ]
}

proptest! {
    #[test]
    fn round_trip(repr in arb_repr()) {
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut out);
        prop_assert_eq!(Repr::parse(repr.msg_type(), 0, &out), Ok(repr));
    }

    #[test]
    fn no_panic(kind in 133u8..=137, body in proptest::collection::vec(any::<u8>(), 0..120)) {
        if let Ok(repr) = Repr::parse(kind, 0, &body) {
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut out);
            prop_assert_eq!(Repr::parse(kind, 0, &out), Ok(repr));
        }
        // Truncation at every length.
        for len in 0..body.len() {
            let _ = Repr::parse(kind, 0, &body[..len]);
        }
    }
}
