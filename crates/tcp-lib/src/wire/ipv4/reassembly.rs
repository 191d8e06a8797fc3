//! IPv4 fragment reassembly (RFC 791 §3.2 "Reassembly", RFC 1122 §3.3.2, RFC 815 for the hole
//! bookkeeping), sans-IO: the caller passes `now` with every call and no clock is read.
//!
//! Fragments belong to one datagram when they agree on source, destination, protocol and
//! identification (RFC 791). Each datagram in flight keeps a buffer of its payload and the sorted,
//! merged list of byte runs received so far; it is complete when one run covers `0..total`, where
//! `total` comes from the last fragment (MF clear), and the first fragment (offset 0) has arrived.
//! The reassembled datagram gets the first fragment's header, without options and without fragment
//! fields (as [`Repr`]), and the payload.
//!
//! # Policy
//!
//! * **Bounds.** At most [`Config::max_datagrams`] datagrams are in flight and their buffers hold at
//!   most [`Config::max_bytes`] bytes together; a datagram keeps at most [`Config::max_runs`]
//!   disjoint runs (a legitimate datagram arriving in any order needs a few dozen). When a fragment of
//!   a *new* datagram finds the table full, or a fragment needs buffer space beyond the budget, the
//!   **oldest** datagrams (by first arrival) are evicted to make room (as Linux does when its
//!   fragment memory is above the high threshold): new traffic wins over stale partial datagrams,
//!   which are the likelier to be lost or forged. A datagram that could not fit even alone is
//!   discarded ([`FragmentError::NoRoom`]).
//! * **Timeout.** A datagram is dropped [`Config::timeout`] after its *first* fragment arrived
//!   (RFC 1122 §3.3.2 suggests 60 to 120 seconds; Linux uses 30, the default here), whatever
//!   arrives later, so a trickle of fragments cannot keep it alive. Every call expires what is due;
//!   [`FragmentReassembler::next_deadline`] tells the caller when to call
//!   [`FragmentReassembler::expire`] otherwise.
//! * **Overlaps** (RFC 5722's rule for IPv6, which Linux applies to IPv4 too): a fragment whose
//!   bytes lie entirely within data already received *and equal it* is a duplicate and is ignored;
//!   any other overlap discards the whole datagram ([`FragmentError::Overlap`]), so no
//!   overlap can rewrite a header that was already checked (RFC 1858).
//! * **Lengths.** A fragment with MF set must carry a non-empty multiple of 8 bytes
//!   ([`FragmentError::BadLength`]); a fragment whose header and end offset exceed 65535 bytes is
//!   refused ([`FragmentError::TooLong`], the "ping of death"); last fragments that disagree on the
//!   end, or data past a known end, discard the datagram ([`FragmentError::Inconsistent`]).
//! * A packet that is not a fragment is returned as it is (a one-piece [`Datagram`]), untouched by
//!   the table.
//!
//! No ICMP "fragment reassembly time exceeded" (RFC 792) is generated here; the stack can build it
//! from the first fragment if it wants to.

use std::time::Instant;

use super::{Address, HEADER_LEN, MAX_PACKET_LEN, Packet, Repr};
use crate::wire::ChecksumPolicy;
pub use crate::wire::fragments::{Config, FragmentError};
use crate::wire::fragments::{Duplicates, Piece, Table, table_accessors};

/// A reassembled datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// The header of the first fragment, with `payload_len` the reassembled length.
    pub header: Repr,
    /// The payload.
    pub payload: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    src: Address,
    dst: Address,
    protocol: u8,
    ident: u16,
}

/// Reassembles IPv4 datagrams from fragments in any order, within fixed bounds (see the module
/// documentation for the policy).
#[derive(Debug)]
pub struct FragmentReassembler {
    table: Table<Key, Repr>,
}

impl Default for FragmentReassembler {
    fn default() -> Self {
        Self::new(Config::default())
    }
}

impl FragmentReassembler {
    /// An empty reassembler with these bounds.
    #[must_use]
    pub const fn new(config: Config) -> Self {
        Self { table: Table::new(config, Duplicates::Contained) }
    }

    table_accessors!("datagrams");

    /// Adds a received packet at time `now`. Returns the reassembled datagram when this fragment
    /// completes one, `None` while it is incomplete (or the fragment was a duplicate), and the
    /// packet itself as a [`Datagram`] when it is not a fragment.
    ///
    /// The header is validated as by [`Repr::parse`] with the checksum verified, so any bytes may be
    /// passed. Datagrams due at `now` are expired first.
    ///
    /// # Errors
    /// See [`FragmentError`]; every error leaves the reassembler within its bounds.
    pub fn add<T: AsRef<[u8]>>(
        &mut self,
        packet: &Packet<T>,
        now: Instant,
    ) -> Result<Option<Datagram>, FragmentError> {
        self.table.expire(now);
        let header = Repr::parse_header(packet, ChecksumPolicy::Verify)?;
        let payload = packet.payload();
        if !packet.is_fragment() {
            return Ok(Some(Datagram { header, payload: payload.to_vec() }));
        }
        let offset = usize::from(packet.frag_offset());
        let more = packet.more_frags();
        if more && (payload.is_empty() || !payload.len().is_multiple_of(8)) {
            return Err(FragmentError::BadLength);
        }
        if packet.header_len() + offset + payload.len() > MAX_PACKET_LEN {
            return Err(FragmentError::TooLong);
        }
        let key = Key {
            src: header.src_addr,
            dst: header.dst_addr,
            protocol: header.protocol.into(),
            ident: header.ident,
        };
        let piece = Piece { offset, data: payload, more, header: (offset == 0).then_some(header) };
        Ok(self.table.add(key, now, piece)?.map(|(mut header, payload)| {
            header.payload_len = payload.len();
            debug_assert!(HEADER_LEN + payload.len() <= MAX_PACKET_LEN);
            Datagram { header, payload }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Protocol;
    use super::*;
    use crate::wire::Error;
    use proptest::prelude::*;
    use std::time::Duration;

    fn base() -> Repr {
        Repr {
            src_addr: Address::new(10, 0, 0, 2),
            dst_addr: Address::new(10, 0, 0, 1),
            protocol: Protocol::Udp,
            payload_len: 0,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 0x4242,
            dont_frag: false,
        }
    }

    /// The payload byte at `pos` of datagram `ident`.
    fn pattern(ident: u16, pos: usize) -> u8 {
        let [hi, lo] = ident.to_be_bytes();
        u8::try_from((pos * 7 + usize::from(hi ^ lo)) % 251).unwrap()
    }

    /// A fragment of `header`'s datagram: `data` at `offset`.
    fn fragment_with(header: Repr, offset: usize, data: &[u8], more: bool) -> Vec<u8> {
        let mut bytes = vec![0u8; HEADER_LEN + data.len()];
        let total = u16::try_from(bytes.len()).unwrap();
        let mut p = Packet::new_unchecked(&mut bytes[..]);
        header.emit_header(&mut p, total, more, u16::try_from(offset).unwrap());
        p.payload_mut().copy_from_slice(data);
        bytes
    }

    fn fragment(header: Repr, range: std::ops::Range<usize>, more: bool) -> Vec<u8> {
        let data: Vec<u8> = range.clone().map(|p| pattern(header.ident, p)).collect();
        fragment_with(header, range.start, &data, more)
    }

    /// Splits a `len`-byte datagram into pieces of `piece` bytes (a multiple of 8).
    fn split(header: Repr, len: usize, piece: usize) -> Vec<Vec<u8>> {
        (0..len)
            .step_by(piece)
            .map(|start| {
                let end = (start + piece).min(len);
                fragment(header, start..end, end < len)
            })
            .collect()
    }

    fn add(
        r: &mut FragmentReassembler,
        bytes: &[u8],
        now: Instant,
    ) -> Result<Option<Datagram>, FragmentError> {
        r.add(&Packet::new_checked(bytes).unwrap(), now)
    }

    fn expect_datagram(d: Datagram, header: Repr, len: usize) {
        assert_eq!(d.payload.len(), len);
        assert!(d.payload.iter().enumerate().all(|(p, &b)| b == pattern(header.ident, p)));
        assert_eq!(d.header, Repr { payload_len: len, ..header });
    }

    #[test]
    fn in_order() {
        let t = Instant::now();
        let mut r = FragmentReassembler::default();
        let frags = split(base(), 3000, 1480);
        assert_eq!(frags.len(), 3);
        assert_eq!(add(&mut r, &frags[0], t), Ok(None));
        assert_eq!(add(&mut r, &frags[1], t), Ok(None));
        assert_eq!(r.len(), 1);
        let d = add(&mut r, &frags[2], t).unwrap().unwrap();
        expect_datagram(d, base(), 3000);
        assert!(r.is_empty());
        assert_eq!(r.buffered_bytes(), 0);
    }

    #[test]
    fn reversed() {
        let t = Instant::now();
        let mut r = FragmentReassembler::default();
        let mut frags = split(base(), 5000, 512);
        frags.reverse();
        let (last, rest) = frags.split_last().unwrap();
        for f in rest {
            assert_eq!(add(&mut r, f, t), Ok(None));
        }
        expect_datagram(add(&mut r, last, t).unwrap().unwrap(), base(), 5000);
        assert_eq!(r.buffered_bytes(), 0);
    }

    #[test]
    fn not_a_fragment_passes_through() {
        let mut r = FragmentReassembler::default();
        let bytes = fragment(base(), 0..100, false);
        let d = add(&mut r, &bytes, Instant::now()).unwrap().unwrap();
        expect_datagram(d, base(), 100);
        assert!(r.is_empty());
    }

    #[test]
    fn first_fragment_header_wins() {
        // The last fragment arrives first with another TTL; the datagram gets the first one's.
        let t = Instant::now();
        let mut r = FragmentReassembler::default();
        let last = fragment(Repr { ttl: 3, ..base() }, 8..16, false);
        assert_eq!(add(&mut r, &last, t), Ok(None));
        let d = add(&mut r, &fragment(base(), 0..8, true), t).unwrap().unwrap();
        expect_datagram(d, base(), 16);
    }

    #[test]
    fn duplicates_are_ignored() {
        let t = Instant::now();
        let mut r = FragmentReassembler::default();
        let frags = split(base(), 64, 16);
        assert_eq!(add(&mut r, &frags[1], t), Ok(None));
        let bytes = r.buffered_bytes();
        assert_eq!(add(&mut r, &frags[1], t), Ok(None), "exact duplicate");
        // A sub-range of received data with the same bytes is a duplicate too.
        assert_eq!(add(&mut r, &fragment(base(), 16..24, true), t), Ok(None));
        assert_eq!(r.buffered_bytes(), bytes);
        for f in &frags[2..] {
            assert_eq!(add(&mut r, f, t), Ok(None));
        }
        expect_datagram(add(&mut r, &frags[0], t).unwrap().unwrap(), base(), 64);
    }

    #[test]
    fn overlaps_discard_the_datagram() {
        let t = Instant::now();
        let mut r = FragmentReassembler::default();
        assert_eq!(add(&mut r, &fragment(base(), 0..16, true), t), Ok(None));
        // Partial overlap with the same bytes.
        assert_eq!(add(&mut r, &fragment(base(), 8..24, true), t), Err(FragmentError::Overlap));
        assert!(r.is_empty());
        assert_eq!(r.buffered_bytes(), 0);
        // Same range, different bytes.
        assert_eq!(add(&mut r, &fragment(base(), 0..16, true), t), Ok(None));
        assert_eq!(add(&mut r, &fragment_with(base(), 0, &[9; 16], true), t), Err(FragmentError::Overlap));
        assert!(r.is_empty());
    }

    #[test]
    fn inconsistent_ends() {
        let t = Instant::now();
        let mut r = FragmentReassembler::default();
        assert_eq!(add(&mut r, &fragment(base(), 16..20, false), t), Ok(None));
        assert_eq!(add(&mut r, &fragment(base(), 16..24, false), t), Err(FragmentError::Inconsistent));
        assert!(r.is_empty());
        assert_eq!(add(&mut r, &fragment(base(), 16..20, false), t), Ok(None));
        assert_eq!(add(&mut r, &fragment(base(), 24..32, true), t), Err(FragmentError::Inconsistent));
        assert!(r.is_empty());
        assert_eq!(add(&mut r, &fragment(base(), 24..32, true), t), Ok(None));
        assert_eq!(add(&mut r, &fragment(base(), 8..16, false), t), Err(FragmentError::Inconsistent));
        assert!(r.is_empty());
    }

    #[test]
    fn bad_lengths() {
        let t = Instant::now();
        let mut r = FragmentReassembler::default();
        assert_eq!(add(&mut r, &fragment(base(), 0..12, true), t), Err(FragmentError::BadLength));
        assert_eq!(add(&mut r, &fragment(base(), 8..8, true), t), Err(FragmentError::BadLength));
        assert!(r.is_empty());
        // Offset 65528 plus 8 bytes plus a 20-byte header is past 65535.
        assert_eq!(add(&mut r, &fragment(base(), 65528..65536, false), t), Err(FragmentError::TooLong));
        assert_eq!(add(&mut r, &fragment(base(), 65504..65516, false), t), Err(FragmentError::TooLong));
        // The largest legal end: 20 + 65515.
        assert_eq!(add(&mut r, &fragment(base(), 65504..65515, false), t), Ok(None));
        // A bad checksum is the packet's own error and changes nothing.
        let mut bad = fragment(Repr { ident: 1, ..base() }, 0..8, true);
        bad[10] ^= 1;
        assert_eq!(add(&mut r, &bad, t), Err(FragmentError::Packet(Error::Checksum)));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn largest_datagram() {
        let t = Instant::now();
        let mut r = FragmentReassembler::default();
        let frags = split(base(), 65515, 1480);
        let (last, rest) = frags.split_last().unwrap();
        for f in rest.iter().rev() {
            assert_eq!(add(&mut r, f, t), Ok(None));
        }
        expect_datagram(add(&mut r, last, t).unwrap().unwrap(), base(), 65515);
    }

    #[test]
    fn timeout_expiry() {
        let t0 = Instant::now();
        let timeout = Config::default().timeout;
        let mut r = FragmentReassembler::default();
        let frags = split(base(), 32, 16);
        assert_eq!(add(&mut r, &frags[0], t0), Ok(None));
        assert_eq!(r.next_deadline(), Some(t0 + timeout));
        assert_eq!(r.expire(t0 + timeout - Duration::from_millis(1)), 0);
        assert_eq!(r.expire(t0 + timeout), 1);
        assert!(r.is_empty());
        assert_eq!(r.next_deadline(), None);
        // A late fragment after expiry starts a new datagram rather than completing the old one.
        assert_eq!(add(&mut r, &frags[0], t0), Ok(None));
        assert_eq!(add(&mut r, &frags[1], t0 + timeout), Ok(None));
        assert_eq!(r.len(), 1);
        // The deadline counts from the first fragment: later fragments do not extend it.
        let mut r = FragmentReassembler::default();
        let frags = split(base(), 48, 16);
        assert_eq!(add(&mut r, &frags[0], t0), Ok(None));
        assert_eq!(add(&mut r, &frags[1], t0 + timeout / 2), Ok(None));
        assert_eq!(r.next_deadline(), Some(t0 + timeout));
        assert_eq!(add(&mut r, &frags[2], t0 + timeout), Ok(None), "expired before the last piece");
    }

    #[test]
    fn table_full_evicts_oldest() {
        let t0 = Instant::now();
        let config = Config { max_datagrams: 3, ..Config::default() };
        let mut r = FragmentReassembler::new(config);
        let id = |ident| Repr { ident, ..base() };
        for i in 0..3u16 {
            let at = t0 + Duration::from_secs(u64::from(i));
            assert_eq!(add(&mut r, &fragment(id(i), 0..8, true), at), Ok(None));
        }
        assert_eq!(r.len(), 3);
        // A fourth datagram evicts ident 0, the oldest.
        assert_eq!(add(&mut r, &fragment(id(3), 0..8, true), t0 + Duration::from_secs(5)), Ok(None));
        assert_eq!(r.len(), 3);
        let t = t0 + Duration::from_secs(6);
        // Ident 0's last fragment now starts a new entry (evicting ident 1) and completes nothing.
        assert_eq!(add(&mut r, &fragment(id(0), 8..16, false), t), Ok(None));
        // Ident 2 is still there and completes.
        expect_datagram(add(&mut r, &fragment(id(2), 8..16, false), t).unwrap().unwrap(), id(2), 16);
        // Ident 1 was evicted.
        assert_eq!(add(&mut r, &fragment(id(1), 8..16, false), t), Ok(None));
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn byte_budget() {
        let t0 = Instant::now();
        let config = Config { max_bytes: 4000, ..Config::default() };
        let mut r = FragmentReassembler::new(config);
        let a = Repr { ident: 1, ..base() };
        let b = Repr { ident: 2, ..base() };
        assert_eq!(add(&mut r, &fragment(a, 0..2400, true), t0), Ok(None));
        assert_eq!(r.buffered_bytes(), 2400);
        // b needs 2400 more: a, the oldest, is evicted.
        assert_eq!(add(&mut r, &fragment(b, 0..2400, true), t0 + Duration::from_secs(1)), Ok(None));
        assert_eq!(r.len(), 1);
        assert_eq!(r.buffered_bytes(), 2400);
        // A datagram larger than the whole budget is refused and discarded.
        assert_eq!(add(&mut r, &fragment(b, 3992..4008, false), t0), Err(FragmentError::NoRoom));
        assert!(r.is_empty());
        assert_eq!(r.buffered_bytes(), 0);
        // An out-of-order fragment far out counts its whole buffer.
        assert_eq!(add(&mut r, &fragment(a, 3000..3008, false), t0), Ok(None));
        assert_eq!(r.buffered_bytes(), 3008);
    }

    #[test]
    fn run_limit() {
        let t = Instant::now();
        let mut r = FragmentReassembler::new(Config { max_runs: 4, ..Config::default() });
        for i in 0..4 {
            assert_eq!(add(&mut r, &fragment(base(), i * 16..i * 16 + 8, true), t), Ok(None));
        }
        // Filling a gap merges runs and is fine; a fifth disjoint run is not.
        assert_eq!(add(&mut r, &fragment(base(), 8..16, true), t), Ok(None));
        assert_eq!(add(&mut r, &fragment(base(), 80..88, true), t), Ok(None));
        assert_eq!(add(&mut r, &fragment(base(), 112..120, true), t), Err(FragmentError::NoRoom));
        assert!(r.is_empty());
    }

    #[test]
    fn zero_capacity() {
        let mut r = FragmentReassembler::new(Config { max_datagrams: 0, ..Config::default() });
        let f = fragment(base(), 0..8, true);
        assert_eq!(add(&mut r, &f, Instant::now()), Err(FragmentError::NoRoom));
    }

    proptest! {
        #[test]
        fn any_order(
            len in 1usize..6000,
            piece in 1usize..200,
            seed in any::<u64>(),
            dups in proptest::collection::vec(any::<prop::sample::Index>(), 0..5),
        ) {
            let t = Instant::now();
            let mut frags = split(base(), len, piece * 8);
            // Random order over hundreds of 8-byte pieces needs more runs than the default bound.
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
                // Duplicates after completion start a new datagram, which may complete again.
                if let Ok(Some(d)) = res {
                    expect_datagram(d, base(), len);
                    done += 1;
                }
            }
            prop_assert!(done >= 1, "never completed");
        }
    }
}
