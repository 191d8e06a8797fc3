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

use std::time::{Duration, Instant};

use super::{Address, HEADER_LEN, MAX_PACKET_LEN, Packet, Repr};
use crate::wire::{ChecksumPolicy, Error};

/// The bounds of a [`FragmentReassembler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The most datagrams in flight at once.
    pub max_datagrams: usize,
    /// The most bytes of payload buffers all datagrams in flight hold together.
    pub max_bytes: usize,
    /// The most disjoint runs of received bytes one datagram may have.
    pub max_runs: usize,
    /// How long after its first fragment a datagram is dropped.
    pub timeout: Duration,
}

impl Default for Config {
    /// 16 datagrams, 256 KiB, 64 runs, 30 seconds.
    fn default() -> Self {
        Self { max_datagrams: 16, max_bytes: 256 * 1024, max_runs: 64, timeout: Duration::from_secs(30) }
    }
}

/// Why [`FragmentReassembler::add`] refused a packet or dropped its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FragmentError {
    /// The packet itself is invalid (as [`Repr::parse`] sees it, checksum verified); nothing changed.
    Packet(Error),
    /// A fragment with MF set whose payload is empty or not a multiple of 8 bytes; dropped.
    BadLength,
    /// The fragment reaches past 65535 bytes; dropped.
    TooLong,
    /// The fragment overlaps received data with different bytes, or partly; its datagram was
    /// discarded.
    Overlap,
    /// The fragment disagrees with the known end of its datagram; the datagram was discarded.
    Inconsistent,
    /// The datagram cannot fit in the budget even alone; it was discarded.
    NoRoom,
}

impl From<Error> for FragmentError {
    fn from(e: Error) -> Self {
        Self::Packet(e)
    }
}

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

#[derive(Debug)]
struct Entry {
    key: Key,
    created: Instant,
    deadline: Instant,
    /// The first fragment's header, once it arrived.
    header: Option<Repr>,
    /// Payload bytes, as long as the furthest end seen.
    data: Vec<u8>,
    /// Received byte ranges: sorted, disjoint and not adjacent (adjacent ones are merged).
    runs: Vec<(usize, usize)>,
    /// The payload length, once the last fragment arrived.
    total: Option<usize>,
}

impl Entry {
    fn is_complete(&self) -> bool {
        match (self.total, &self.header, self.runs.as_slice()) {
            (Some(total), Some(_), [(0, end)]) => *end == total,
            _ => false,
        }
    }

    /// Inserts `start..end` into the runs, merging with neighbours it touches. The caller has
    /// checked that it overlaps none.
    fn insert_run(&mut self, start: usize, end: usize) {
        let at = self.runs.partition_point(|&(_, e)| e < start);
        let mut new = (start, end);
        let mut last = at;
        while last < self.runs.len() && self.runs[last].0 <= end {
            new.0 = new.0.min(self.runs[last].0);
            new.1 = new.1.max(self.runs[last].1);
            last += 1;
        }
        self.runs.splice(at..last, [new]);
    }

    /// The number of runs after inserting `start..end` (which overlaps none).
    fn runs_after(&self, start: usize, end: usize) -> usize {
        let touches_left = self.runs.iter().any(|&(_, e)| e == start);
        let touches_right = self.runs.iter().any(|&(s, _)| s == end);
        self.runs.len() + 1 - usize::from(touches_left) - usize::from(touches_right)
    }
}

/// Reassembles IPv4 datagrams from fragments in any order, within fixed bounds (see the module
/// documentation for the policy).
#[derive(Debug)]
pub struct FragmentReassembler {
    config: Config,
    entries: Vec<Entry>,
    bytes: usize,
}

impl Default for FragmentReassembler {
    fn default() -> Self {
        Self::new(Config::default())
    }
}

impl FragmentReassembler {
    /// An empty reassembler with these bounds.
    #[must_use]
    pub fn new(config: Config) -> Self {
        Self { config, entries: Vec::new(), bytes: 0 }
    }

    /// The bounds.
    #[must_use]
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// The number of datagrams in flight.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no datagram is in flight.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bytes the payload buffers of the datagrams in flight hold.
    #[must_use]
    pub const fn buffered_bytes(&self) -> usize {
        self.bytes
    }

    /// When the next datagram in flight times out.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries.iter().map(|e| e.deadline).min()
    }

    /// Drops the datagrams whose deadline is at or before `now`; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.entries.len();
        let mut freed = 0;
        self.entries.retain(|e| {
            let keep = e.deadline > now;
            if !keep {
                freed += e.data.len();
            }
            keep
        });
        self.bytes -= freed;
        before - self.entries.len()
    }

    /// Drops every datagram in flight.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn remove(&mut self, index: usize) -> Entry {
        let entry = self.entries.swap_remove(index);
        self.bytes -= entry.data.len();
        entry
    }

    /// Evicts the oldest entry other than `keep`; false if there is none.
    fn evict_oldest(&mut self, keep: Option<Key>) -> bool {
        let oldest = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| Some(e.key) != keep)
            .min_by_key(|(_, e)| e.created)
            .map(|(i, _)| i);
        match oldest {
            Some(i) => {
                self.remove(i);
                true
            }
            None => false,
        }
    }

    fn discard(&mut self, key: Key, why: FragmentError) -> FragmentError {
        if let Some(i) = self.entries.iter().position(|e| e.key == key) {
            self.remove(i);
        }
        why
    }

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
        self.expire(now);
        let header = Repr::parse_header(packet, ChecksumPolicy::Verify)?;
        let payload = packet.payload();
        if !packet.is_fragment() {
            return Ok(Some(Datagram { header, payload: payload.to_vec() }));
        }
        let offset = usize::from(packet.frag_offset());
        let end = offset + payload.len();
        let more = packet.more_frags();
        if more && (payload.is_empty() || !payload.len().is_multiple_of(8)) {
            return Err(FragmentError::BadLength);
        }
        if packet.header_len() + end > MAX_PACKET_LEN {
            return Err(FragmentError::TooLong);
        }
        let key = Key {
            src: header.src_addr,
            dst: header.dst_addr,
            protocol: header.protocol.into(),
            ident: header.ident,
        };

        let index = match self.entries.iter().position(|e| e.key == key) {
            Some(i) => i,
            None => {
                while self.entries.len() >= self.config.max_datagrams {
                    if !self.evict_oldest(None) {
                        // max_datagrams is 0: nothing can be kept.
                        return Err(FragmentError::NoRoom);
                    }
                }
                self.entries.push(Entry {
                    key,
                    created: now,
                    deadline: now + self.config.timeout,
                    header: None,
                    data: Vec::new(),
                    runs: Vec::new(),
                    total: None,
                });
                self.entries.len() - 1
            }
        };
        let entry = &self.entries[index];

        // The end of the datagram.
        let known_end = entry.runs.last().map_or(0, |&(_, e)| e);
        if more {
            if entry.total.is_some_and(|total| end > total) {
                return Err(self.discard(key, FragmentError::Inconsistent));
            }
        } else if entry.total.is_some_and(|total| total != end) || known_end > end {
            return Err(self.discard(key, FragmentError::Inconsistent));
        }

        // Overlaps: a contained, identical fragment is a duplicate; anything else discards.
        if offset < end {
            let overlapping = entry.runs.iter().filter(|&&(s, e)| s < end && offset < e).count();
            if overlapping > 0 {
                let contained = entry.runs.iter().any(|&(s, e)| s <= offset && end <= e);
                if contained && entry.data[offset..end] == *payload {
                    return Ok(None);
                }
                return Err(self.discard(key, FragmentError::Overlap));
            }
            if entry.runs_after(offset, end) > self.config.max_runs {
                return Err(self.discard(key, FragmentError::NoRoom));
            }
        }

        // Buffer space.
        let growth = end.saturating_sub(entry.data.len());
        if growth > 0 {
            let own = entry.data.len();
            if own + growth > self.config.max_bytes {
                return Err(self.discard(key, FragmentError::NoRoom));
            }
            while self.bytes + growth > self.config.max_bytes {
                if !self.evict_oldest(Some(key)) {
                    return Err(self.discard(key, FragmentError::NoRoom));
                }
            }
        }
        // Evictions may have moved the entry.
        let Some(index) = self.entries.iter().position(|e| e.key == key) else {
            return Err(FragmentError::NoRoom);
        };
        let entry = &mut self.entries[index];
        if growth > 0 {
            entry.data.reserve_exact(growth);
            entry.data.resize(end, 0);
            self.bytes += growth;
        }
        entry.data[offset..end].copy_from_slice(payload);
        if offset < end {
            entry.insert_run(offset, end);
        }
        if !more {
            entry.total = Some(end);
        }
        if offset == 0 {
            entry.header = Some(header);
        }
        if !entry.is_complete() {
            return Ok(None);
        }
        let entry = self.remove(index);
        let total = entry.total.unwrap_or(0);
        let mut payload = entry.data;
        payload.truncate(total);
        let mut header = entry.header.unwrap_or(header);
        header.payload_len = total;
        debug_assert!(HEADER_LEN + total <= MAX_PACKET_LEN);
        Ok(Some(Datagram { header, payload }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Protocol;
    use super::*;
    use proptest::prelude::*;

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
            // A seeded shuffle (Fisher-Yates with an LCG).
            let mut s = seed;
            for i in (1..frags.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let j = usize::try_from(s >> 33).unwrap() % (i + 1);
                frags.swap(i, j);
            }
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
