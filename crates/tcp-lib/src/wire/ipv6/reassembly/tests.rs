use super::super::ext::walk;
use super::*;
use crate::wire::ipv4::Protocol;
use proptest::prelude::*;

fn base() -> Repr {
    Repr {
        src_addr: "2001:db8::2".parse().unwrap(),
        dst_addr: "2001:db8::1".parse().unwrap(),
        next_header: Protocol::Udp,
        payload_len: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
}

/// The byte at `pos` of the fragmentable part of packet `ident`.
fn pattern(ident: u32, pos: usize) -> u8 {
    u8::try_from((pos * 7 + usize::try_from(ident % 251).unwrap()) % 251).unwrap()
}

/// A fragment: `prefix` extension headers (their chain ends with a Fragment header's Next Header of
/// 44), a Fragment header with `next` as its Next Header, then `data`.
fn fragment_full(header: Repr, prefix: &[u8], first: Protocol, frag: FragmentHeader, data: &[u8]) -> Vec<u8> {
    let mut payload = prefix.to_vec();
    let mut f = [0u8; 8];
    frag.emit(&mut f);
    payload.extend(f);
    payload.extend_from_slice(data);
    let repr = Repr { next_header: first, payload_len: payload.len(), ..header };
    let mut bytes = vec![0u8; repr.buffer_len()];
    let mut p = Packet::new_unchecked(&mut bytes[..]);
    repr.emit(&mut p);
    p.payload_mut().copy_from_slice(&payload);
    bytes
}

/// A Fragment header.
fn fh(next_header: Protocol, ident: u32, offset: usize, more_frags: bool) -> FragmentHeader {
    FragmentHeader { next_header, offset: u16::try_from(offset).unwrap(), more_frags, ident }
}

fn fragment_with(ident: u32, offset: usize, data: &[u8], more: bool) -> Vec<u8> {
    fragment_full(base(), &[], Protocol::Ipv6Frag, fh(Protocol::Udp, ident, offset, more), data)
}

fn fragment(ident: u32, range: std::ops::Range<usize>, more: bool) -> Vec<u8> {
    let data: Vec<u8> = range.clone().map(|p| pattern(ident, p)).collect();
    fragment_with(ident, range.start, &data, more)
}

fn split(ident: u32, len: usize, piece: usize) -> Vec<Vec<u8>> {
    (0..len)
        .step_by(piece)
        .map(|start| {
            let end = (start + piece).min(len);
            fragment(ident, start..end, end < len)
        })
        .collect()
}

fn add(r: &mut FragmentReassembler, bytes: &[u8], now: Instant) -> Result<Option<Datagram>, FragmentError> {
    r.add(&Packet::new_checked(bytes).unwrap(), now)
}

fn expect(d: Datagram, ident: u32, len: usize) {
    assert_eq!(d.payload.len(), len);
    assert!(d.payload.iter().enumerate().all(|(p, &b)| b == pattern(ident, p)));
    assert_eq!(d.header, Repr { payload_len: len, ..base() });
}

#[test]
fn in_order_and_reversed() {
    let t = Instant::now();
    let mut r = FragmentReassembler::default();
    assert_eq!(r.config().timeout, Duration::from_secs(60), "RFC 8200 §4.5");
    let frags = split(1, 3000, 1232);
    assert_eq!(frags.len(), 3);
    assert_eq!(add(&mut r, &frags[0], t), Ok(None));
    assert_eq!(add(&mut r, &frags[1], t), Ok(None));
    expect(add(&mut r, &frags[2], t).unwrap().unwrap(), 1, 3000);
    assert!(r.is_empty());
    for f in split(2, 5000, 512).iter().rev() {
        if let Some(d) = add(&mut r, f, t).unwrap() {
            expect(d, 2, 5000);
        }
    }
    assert!(r.is_empty());
    assert_eq!(r.buffered_bytes(), 0);
}

#[test]
fn atomic_fragment_is_a_whole_packet() {
    // RFC 6946: offset 0 and M clear; it must not mix with a packet in flight of the same ident.
    let t = Instant::now();
    let mut r = FragmentReassembler::default();
    assert_eq!(add(&mut r, &fragment(7, 0..16, true), t), Ok(None));
    let atomic = fragment(7, 0..40, false);
    expect(add(&mut r, &atomic, t).unwrap().unwrap(), 7, 40);
    assert_eq!(r.len(), 1, "the packet in flight is untouched");
    // A packet without a Fragment header passes through too.
    let mut whole = vec![0u8; 48];
    Repr { payload_len: 8, ..base() }.emit(&mut Packet::new_unchecked(&mut whole[..]));
    assert_eq!(add(&mut r, &whole, t).unwrap().unwrap().payload, [0; 8]);
}

#[test]
fn exact_duplicates_dropped_other_overlaps_discard() {
    let t = Instant::now();
    let mut r = FragmentReassembler::default();
    let frags = split(3, 64, 16);
    assert_eq!(add(&mut r, &frags[1], t), Ok(None));
    assert_eq!(add(&mut r, &frags[1], t), Ok(None), "exact duplicate");
    assert_eq!(add(&mut r, &frags[2], t), Ok(None));
    assert_eq!(add(&mut r, &frags[1], t), Ok(None), "still exact beside a neighbour");
    assert_eq!(r.len(), 1);
    // Unlike IPv4, a sub-range with the same bytes is an overlap (RFC 5722).
    assert_eq!(add(&mut r, &fragment(3, 16..24, true), t), Err(FragmentError::Overlap));
    assert!(r.is_empty());
    assert_eq!(r.buffered_bytes(), 0);
    // Same range, other bytes.
    assert_eq!(add(&mut r, &frags[0], t), Ok(None));
    assert_eq!(add(&mut r, &fragment_with(3, 0, &[9; 16], true), t), Err(FragmentError::Overlap));
    assert!(r.is_empty());
    // After a discard, the rest of the packet starts anew and cannot complete with old data.
    for f in &frags[1..] {
        assert_eq!(add(&mut r, f, t), Ok(None));
    }
}

#[test]
fn lengths() {
    let t = Instant::now();
    let mut r = FragmentReassembler::default();
    assert_eq!(add(&mut r, &fragment(4, 0..12, true), t), Err(FragmentError::BadLength));
    assert_eq!(add(&mut r, &fragment(4, 8..8, true), t), Err(FragmentError::BadLength));
    // The largest fragmentable part: 65535 - 0 bytes of unfragmentable part... minus nothing.
    assert_eq!(add(&mut r, &fragment_with(4, 65528, &[1; 8], false), t), Err(FragmentError::TooLong));
    assert_eq!(add(&mut r, &fragment_with(4, 65528, &[1; 7], false), t), Ok(None));
    // With 8 bytes of Destination Options before the Fragment header, 8 fewer.
    let dest = [44, 0, 1, 4, 0, 0, 0, 0];
    let f = fragment_full(base(), &dest, Protocol::Ipv6Opts, fh(Protocol::Udp, 5, 65520, false), &[1; 8]);
    assert_eq!(add(&mut r, &f, t), Err(FragmentError::TooLong));
    let f = fragment_full(base(), &dest, Protocol::Ipv6Opts, fh(Protocol::Udp, 5, 65520, false), &[1; 7]);
    assert_eq!(add(&mut r, &f, t), Ok(None));
    assert!(r.buffered_bytes() <= r.config().max_bytes);
    // Inconsistent ends discard.
    assert_eq!(add(&mut r, &fragment(6, 16..20, false), t), Ok(None));
    assert_eq!(add(&mut r, &fragment(6, 16..24, false), t), Err(FragmentError::Inconsistent));
    // Header errors are the packet's own.
    let mut bad = fragment(8, 0..8, true);
    bad[0] = 0x40;
    assert_eq!(add(&mut r, &bad, t), Err(FragmentError::Packet(Error::Unrecognized)));
}

#[test]
fn header_chain_in_the_first_fragment() {
    let t = Instant::now();
    let mut r = FragmentReassembler::default();
    // The fragmentable part starts with 16 bytes of Destination Options, then UDP data.
    let mut part = vec![17, 1, 1, 12];
    part.resize(16, 0);
    part.extend((0..40).map(|p| pattern(9, p)));
    let first =
        fragment_full(base(), &[], Protocol::Ipv6Frag, fh(Protocol::Ipv6Opts, 9, 0, true), &part[..24]);
    let last =
        fragment_full(base(), &[], Protocol::Ipv6Frag, fh(Protocol::Ipv6Opts, 9, 24, false), &part[24..]);
    assert_eq!(add(&mut r, &last, t), Ok(None));
    let d = add(&mut r, &first, t).unwrap().unwrap();
    assert_eq!(d.header.next_header, Protocol::Udp);
    assert_eq!(d.payload, part[16..]);
    assert_eq!(d.header.payload_len, 40);
    // A first fragment that cuts the chain is refused (RFC 7112).
    let cut = fragment_full(base(), &[], Protocol::Ipv6Frag, fh(Protocol::Ipv6Opts, 10, 0, true), &part[..8]);
    assert_eq!(add(&mut r, &cut, t), Err(FragmentError::IncompleteChain));
    // A Fragment header inside the fragmentable part is malformed.
    let mut nested = [0u8; 16];
    FragmentHeader { next_header: Protocol::Udp, offset: 0, more_frags: false, ident: 1 }.emit(&mut nested);
    let f = fragment_full(base(), &[], Protocol::Ipv6Frag, fh(Protocol::Ipv6Frag, 11, 0, true), &nested);
    assert_eq!(add(&mut r, &f, t), Err(FragmentError::Packet(Error::Malformed)));
    assert!(r.is_empty());
    // The first fragment's walk: the helper builds what ext::walk expects.
    let p = Packet::new_checked(&first[..]).unwrap();
    assert_eq!(walk(p.next_header(), p.payload()).unwrap().offset, 8);
}

#[test]
fn timeout_and_eviction() {
    let t0 = Instant::now();
    let mut r = FragmentReassembler::default();
    let frags = split(12, 32, 16);
    assert_eq!(add(&mut r, &frags[0], t0), Ok(None));
    assert_eq!(r.next_deadline(), Some(t0 + TIMEOUT));
    assert_eq!(r.expire(t0 + TIMEOUT - Duration::from_millis(1)), 0);
    assert_eq!(add(&mut r, &frags[1], t0 + TIMEOUT), Ok(None), "expired before the last piece");
    assert_eq!(r.len(), 1);
    r.clear();
    assert!(r.is_empty() && r.buffered_bytes() == 0);
    // A full table evicts the oldest; the identification, source and destination are the key.
    let mut r = FragmentReassembler::new(Config { max_datagrams: 2, ..Config::default() });
    assert_eq!(add(&mut r, &fragment(1, 0..8, true), t0), Ok(None));
    let other_src = fragment_full(
        Repr { src_addr: "2001:db8::3".parse().unwrap(), ..base() },
        &[],
        Protocol::Ipv6Frag,
        fh(Protocol::Udp, 1, 8, false),
        &[0; 8],
    );
    assert_eq!(add(&mut r, &other_src, t0 + Duration::from_secs(1)), Ok(None));
    assert_eq!(r.len(), 2, "same ident, other source: another packet");
    assert_eq!(add(&mut r, &fragment(2, 0..8, true), t0 + Duration::from_secs(2)), Ok(None));
    assert_eq!(r.len(), 2);
    assert_eq!(
        add(&mut r, &fragment(1, 8..16, false), t0 + Duration::from_secs(3)),
        Ok(None),
        "ident 1 was evicted"
    );
    let mut r = FragmentReassembler::new(Config { max_datagrams: 0, ..Config::default() });
    assert_eq!(add(&mut r, &fragment(1, 0..8, true), t0), Err(FragmentError::NoRoom));
}

#[test]
fn truncation_never_panics() {
    let t = Instant::now();
    let mut r = FragmentReassembler::default();
    let f = fragment(13, 0..64, true);
    for len in 0..f.len() {
        let p = Packet::new_unchecked(&f[..len]);
        assert!(r.add(&p, t).is_err(), "{len}");
    }
    assert!(r.is_empty());
}

proptest! {
    #[test]
    fn any_order(len in 1usize..6000, piece in 1usize..200, seed in any::<u64>(),
                 dups in proptest::collection::vec(any::<prop::sample::Index>(), 0..5)) {
        let t = Instant::now();
        let mut frags = split(21, len, piece * 8);
        let mut r = FragmentReassembler::new(Config { max_runs: frags.len(), ..Config::default() });
        for d in &dups {
            let f = d.get(&frags).clone();
            frags.push(f);
        }
        crate::wire::fragments::shuffle(&mut frags, seed);
        let mut done = 0;
        for f in &frags {
            let res = add(&mut r, f, t);
            prop_assert!(res.is_ok(), "{:?}", res);
            if let Ok(Some(d)) = res {
                expect(d, 21, len);
                done += 1;
            }
        }
        prop_assert!(done >= 1, "never completed");
    }
}
