//! TCP segments (RFC 9293 §3.1) with the options this stack uses: maximum segment size (RFC 9293
//! §3.2), window scale and timestamps (RFC 7323), SACK-permitted and SACK blocks (RFC 2018), and
//! the ECN flags ECE and CWR (RFC 3168); and [`SeqNumber`], sequence-space arithmetic modulo 2^32
//! (RFC 9293 §3.4, serial number arithmetic of RFC 1982).
//!
//! Layout: source port (2), destination port (2), sequence number (4), acknowledgment number (4),
//! data offset (4 bits, in 32-bit words) and 4 reserved bits, the flags CWR ECE URG ACK PSH RST SYN
//! FIN (1), window (2), checksum (2, over the IPv4 pseudo-header, or the IPv6 one of RFC 8200 §8.1
//! with the `_v6` methods, and the whole segment), urgent pointer (2), then `data offset * 4 - 20` bytes of options, then the payload.
//!
//! **Options** are a sequence of kind-length-value entries, except End of Option List (kind 0,
//! which ends the list; the rest of the header is padding) and No-Operation (kind 1), one byte each.
//! Every other option has a length byte that counts kind and length, so it is at least 2 and must fit
//! in the header: a length below 2 (which would make a parser loop forever) or past the end is an
//! error, and a known option with a length other than its own is malformed. Options of unknown kinds
//! are skipped by their length.

use std::cmp::Ordering;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::{Add, AddAssign, Sub, SubAssign};

use super::{ChecksumPolicy, Error, Result, be16, be32, checksum, put16, put32};

/// A TCP sequence number: a point in the sequence space modulo 2^32.
///
/// Arithmetic wraps. Comparison follows serial number arithmetic (RFC 1982, as RFC 9293 §3.4
/// requires: "the comparison ... must use modulo 2^32 arithmetic"): `a < b` when `b - a`, taken
/// modulo 2^32, is in `1..2^31`. Two numbers exactly 2^31 apart are incomparable:
/// [`partial_cmp`](PartialOrd::partial_cmp) returns `None` and every comparison operator is false.
/// This is not a total order (it is not transitive across more than half the space), so there is no
/// `Ord` and [`max`](Self::max)/[`min`](Self::min) are inherent methods. The raw value is reachable
/// only through [`new`](Self::new) and [`get`](Self::get), so raw `u32` comparisons do not creep in.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNumber(u32);

impl SeqNumber {
    /// The sequence number with value `v`.
    #[must_use]
    pub const fn new(v: u32) -> Self {
        Self(v)
    }

    /// The value in `0..2^32`.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The later of two sequence numbers in serial-number order (`self` when they are equal or
    /// incomparable).
    #[must_use]
    pub fn max(self, other: Self) -> Self {
        if self < other { other } else { self }
    }

    /// The earlier of two sequence numbers in serial-number order (`self` when they are equal or
    /// incomparable).
    #[must_use]
    pub fn min(self, other: Self) -> Self {
        if other < self { other } else { self }
    }
}

impl fmt::Debug for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SeqNumber({})", self.0)
    }
}

impl fmt::Display for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl PartialOrd for SeqNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match *self - *other {
            0 => Some(Ordering::Equal),
            i32::MIN => None,
            d if d < 0 => Some(Ordering::Less),
            _ => Some(Ordering::Greater),
        }
    }

    // The operators, each one signed compare of a distance: the defaults go through
    // `partial_cmp` (a test for zero, one for `i32::MIN`, one for the sign: six instructions where
    // this is three, on every sequence check of every segment). The incomparable distance
    // `i32::MIN` is negative either way round, so it fails each test below as it should.

    /// `other - self` in `1..2^31`.
    #[inline]
    fn lt(&self, other: &Self) -> bool {
        *other - *self > 0
    }

    /// `other - self` in `0..2^31`.
    #[inline]
    fn le(&self, other: &Self) -> bool {
        *other - *self >= 0
    }

    /// `self - other` in `1..2^31`.
    #[inline]
    fn gt(&self, other: &Self) -> bool {
        *self - *other > 0
    }

    /// `self - other` in `0..2^31`.
    #[inline]
    fn ge(&self, other: &Self) -> bool {
        *self - *other >= 0
    }
}

/// Reduces a byte count to the sequence space (modulo 2^32).
#[expect(clippy::cast_possible_truncation, reason = "sequence space arithmetic is modulo 2^32")]
const fn modulo(n: usize) -> u32 {
    n as u32
}

impl Add<usize> for SeqNumber {
    type Output = Self;

    /// Advances by `n` bytes, modulo 2^32.
    fn add(self, n: usize) -> Self {
        Self(self.0.wrapping_add(modulo(n)))
    }
}

impl AddAssign<usize> for SeqNumber {
    fn add_assign(&mut self, n: usize) {
        *self = *self + n;
    }
}

impl Sub<usize> for SeqNumber {
    type Output = Self;

    /// Goes back by `n` bytes, modulo 2^32.
    fn sub(self, n: usize) -> Self {
        Self(self.0.wrapping_sub(modulo(n)))
    }
}

impl SubAssign<usize> for SeqNumber {
    fn sub_assign(&mut self, n: usize) {
        *self = *self - n;
    }
}

impl Sub for SeqNumber {
    type Output = i32;

    /// The signed distance from `rhs` to `self`: positive when `self` is later. Numbers exactly
    /// 2^31 apart give `i32::MIN` (either way round).
    fn sub(self, rhs: Self) -> i32 {
        self.0.wrapping_sub(rhs.0) as i32
    }
}

mod field {
    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const SEQ_NUM: usize = 4;
    pub(super) const ACK_NUM: usize = 8;
    pub(super) const DATA_OFFSET: usize = 12;
    pub(super) const FLAGS: usize = 13;
    pub(super) const WINDOW: usize = 14;
    pub(super) const CHECKSUM: usize = 16;
    pub(super) const URGENT: usize = 18;
}

/// The length of a header without options.
pub const HEADER_LEN: usize = 20;
/// The most option bytes a header can carry.
pub const MAX_OPTIONS_LEN: usize = 40;

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;
const URG: u8 = 0x20;
const ECE: u8 = 0x40;
const CWR: u8 = 0x80;

/// The IP protocol number of TCP.
const PROTOCOL: u8 = 6;

/// A zero-copy view of a TCP segment (the whole IPv4 payload).
///
/// **No-panic contract:** after [`check_len`](Self::check_len) has succeeded, no accessor panics,
/// whatever the bytes are, as long as the data offset is not changed through
/// [`set_header_len`](Self::set_header_len) afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and [`check_len`](Self::check_len)s it.
    ///
    /// # Errors
    /// As [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the fixed header and the options the data offset announces.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not; [`Error::Malformed`] for a data offset below 5.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < header_len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// The sequence number.
    pub fn seq_number(&self) -> SeqNumber {
        SeqNumber(be32(self.buffer.as_ref(), field::SEQ_NUM))
    }

    /// The acknowledgment number (meaningful when [`ack`](Self::ack) is set).
    pub fn ack_number(&self) -> SeqNumber {
        SeqNumber(be32(self.buffer.as_ref(), field::ACK_NUM))
    }

    /// The header length in bytes (data offset times 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFFSET] >> 4) * 4
    }

    /// The flags byte (CWR ECE URG ACK PSH RST SYN FIN, most significant first).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    fn flag(&self, bit: u8) -> bool {
        self.flags() & bit != 0
    }

    /// FIN.
    pub fn fin(&self) -> bool {
        self.flag(FIN)
    }

    /// SYN.
    pub fn syn(&self) -> bool {
        self.flag(SYN)
    }

    /// RST.
    pub fn rst(&self) -> bool {
        self.flag(RST)
    }

    /// PSH.
    pub fn psh(&self) -> bool {
        self.flag(PSH)
    }

    /// ACK.
    pub fn ack(&self) -> bool {
        self.flag(ACK)
    }

    /// URG.
    pub fn urg(&self) -> bool {
        self.flag(URG)
    }

    /// ECE (ECN-Echo, RFC 3168).
    pub fn ece(&self) -> bool {
        self.flag(ECE)
    }

    /// CWR (congestion window reduced, RFC 3168).
    pub fn cwr(&self) -> bool {
        self.flag(CWR)
    }

    /// The window field, unscaled.
    pub fn window_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW)
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The urgent pointer (meaningful when [`urg`](Self::urg) is set).
    pub fn urgent_at(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT)
    }

    /// The option bytes (padding included).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The options, parsed one by one.
    pub fn option_iter(&self) -> TcpOptions<'_> {
        TcpOptions::new(self.options())
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// The length of the segment in sequence space: payload bytes, plus one for SYN and for FIN.
    pub fn segment_len(&self) -> usize {
        self.payload().len() + usize::from(self.syn()) + usize::from(self.fin())
    }

    /// Whether the checksum over the pseudo-header for `src -> dst` and the segment verifies.
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        let length = u32::try_from(b.len()).unwrap_or(u32::MAX);
        checksum::combine(&[checksum::pseudo_header_v4(src, dst, PROTOCOL, length), checksum::data(b)])
            == 0xffff
    }

    /// Whether the checksum over the IPv6 pseudo-header for `src -> dst` and the segment verifies.
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        self.sum_v6(src, dst) == 0xffff
    }

    fn sum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> u16 {
        let b = self.buffer.as_ref();
        let length = u32::try_from(b.len()).unwrap_or(u32::MAX);
        checksum::combine(&[checksum::pseudo_header_v6(src, dst, PROTOCOL, length), checksum::data(b)])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    /// Sets the source port and updates the checksum incrementally (RFC 1624), as a port rewrite
    /// does: a correct checksum stays correct.
    pub fn set_src_port_incremental(&mut self, v: u16) {
        let sum = checksum::update(self.checksum(), self.src_port(), v);
        self.set_src_port(v);
        self.set_checksum(sum);
    }

    /// Sets the destination port and updates the checksum incrementally (RFC 1624).
    pub fn set_dst_port_incremental(&mut self, v: u16) {
        let sum = checksum::update(self.checksum(), self.dst_port(), v);
        self.set_dst_port(v);
        self.set_checksum(sum);
    }

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, v: SeqNumber) {
        put32(self.buffer.as_mut(), field::SEQ_NUM, v.0);
    }

    /// Sets the acknowledgment number.
    pub fn set_ack_number(&mut self, v: SeqNumber) {
        put32(self.buffer.as_mut(), field::ACK_NUM, v.0);
    }

    /// Sets the header length in bytes (rounded down to 4-byte words; voids
    /// [`check_len`](Self::check_len)). The reserved bits are cleared.
    pub fn set_header_len(&mut self, len: u8) {
        self.buffer.as_mut()[field::DATA_OFFSET] = ((len / 4) & 0x0f) << 4;
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[field::FLAGS] = flags;
    }

    /// Sets the window field.
    pub fn set_window_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::WINDOW, v);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::URGENT, v);
    }

    /// The option bytes, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }

    /// Computes and writes the checksum over the pseudo-header for `src -> dst` and the segment.
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let length = u32::try_from(b.len()).unwrap_or(u32::MAX);
        let sum =
            checksum::combine(&[checksum::pseudo_header_v4(src, dst, PROTOCOL, length), checksum::data(b)]);
        self.set_checksum(checksum::finish(sum));
    }

    /// Computes and writes the checksum over the IPv6 pseudo-header for `src -> dst` and the
    /// segment.
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let sum = self.sum_v6(src, dst);
        self.set_checksum(checksum::finish(sum));
    }
}

/// A SACK block (RFC 2018 §3): the sequence numbers of its first byte and of the byte after its
/// last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SackBlock {
    /// Left edge: the first sequence number of the block.
    pub left: SeqNumber,
    /// Right edge: the sequence number after the last byte of the block.
    pub right: SeqNumber,
}

/// Up to four SACK blocks, the most the 40 option bytes can carry (three beside timestamps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SackBlocks {
    // Invariant: entries at and after `len` are `SackBlock::default()`, so the derives compare
    // only the blocks in use.
    blocks: [SackBlock; 4],
    len: u8,
}

impl SackBlocks {
    /// The most blocks an option carries.
    pub const MAX: usize = 4;

    /// No blocks.
    #[must_use]
    pub const fn new() -> Self {
        Self { blocks: [SackBlock { left: SeqNumber(0), right: SeqNumber(0) }; 4], len: 0 }
    }

    /// The blocks in `blocks`, if there are at most [`MAX`](Self::MAX).
    #[must_use]
    pub fn from_slice(blocks: &[SackBlock]) -> Option<Self> {
        let mut s = Self::new();
        for &b in blocks {
            if !s.push(b) {
                return None;
            }
        }
        Some(s)
    }

    /// Appends a block; false (and nothing changes) if there are four already.
    pub fn push(&mut self, block: SackBlock) -> bool {
        match self.blocks.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = block;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Keeps the first `n` blocks.
    pub fn truncate(&mut self, n: usize) {
        for slot in self.blocks.iter_mut().skip(n) {
            *slot = SackBlock::default();
        }
        self.len = self.len.min(u8::try_from(n).unwrap_or(u8::MAX));
    }

    /// The blocks.
    #[must_use]
    pub fn as_slice(&self) -> &[SackBlock] {
        &self.blocks[..usize::from(self.len)]
    }

    /// The number of blocks.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are no blocks.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The timestamps option's values (RFC 7323 §3): the sender's clock and the echoed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Timestamp {
    /// TSval: the sender's timestamp clock.
    pub tsval: u32,
    /// TSecr: the TSval echoed (valid when ACK is set).
    pub tsecr: u32,
}

/// One TCP option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TcpOption<'a> {
    /// End of option list (kind 0).
    EndOfList,
    /// No-operation (kind 1), used for alignment.
    NoOperation,
    /// Maximum segment size (kind 2, length 4).
    MaxSegmentSize(u16),
    /// Window scale shift count (kind 3, length 3; RFC 7323 caps its use at 14, which is the
    /// stack's job).
    WindowScale(u8),
    /// SACK permitted (kind 4, length 2).
    SackPermitted,
    /// SACK blocks (kind 5, length 2 + 8n with n from 1 to 4).
    Sack(SackBlocks),
    /// Timestamps (kind 8, length 10).
    Timestamp(Timestamp),
    /// Any other kind, skipped by its length.
    Unknown {
        /// The kind.
        kind: u8,
        /// The value (length minus 2 bytes).
        data: &'a [u8],
    },
}

mod kind {
    pub(super) const EOL: u8 = 0;
    pub(super) const NOP: u8 = 1;
    pub(super) const MSS: u8 = 2;
    pub(super) const WS: u8 = 3;
    pub(super) const SACK_PERMITTED: u8 = 4;
    pub(super) const SACK: u8 = 5;
    pub(super) const TIMESTAMP: u8 = 8;
}

impl<'a> TcpOption<'a> {
    /// Parses the option at the start of `buffer`; returns the bytes after it and the option.
    ///
    /// # Errors
    /// [`Error::Truncated`] if `buffer` is empty, has a kind byte but no length byte, or is
    /// shorter than the length says; [`Error::Malformed`] for a length below 2 or a known kind with
    /// the wrong length.
    pub fn parse(buffer: &'a [u8]) -> Result<(&'a [u8], Self)> {
        let (&kind, rest) = buffer.split_first().ok_or(Error::Truncated)?;
        match kind {
            kind::EOL => return Ok((rest, Self::EndOfList)),
            kind::NOP => return Ok((rest, Self::NoOperation)),
            _ => {}
        }
        let &len = rest.first().ok_or(Error::Truncated)?;
        let len = usize::from(len);
        if len < 2 {
            return Err(Error::Malformed);
        }
        let (option, rest) = (buffer.get(..len).ok_or(Error::Truncated)?, &buffer[len..]);
        let data = &option[2..];
        let option = match (kind, data.len()) {
            (kind::MSS, 2) => Self::MaxSegmentSize(be16(data, 0)),
            (kind::WS, 1) => Self::WindowScale(data[0]),
            (kind::SACK_PERMITTED, 0) => Self::SackPermitted,
            (kind::SACK, n) if n.is_multiple_of(8) && (8..=32).contains(&n) => {
                let mut blocks = SackBlocks::new();
                for b in data.chunks_exact(8) {
                    blocks.push(SackBlock { left: SeqNumber(be32(b, 0)), right: SeqNumber(be32(b, 4)) });
                }
                Self::Sack(blocks)
            }
            (kind::TIMESTAMP, 8) => Self::Timestamp(Timestamp { tsval: be32(data, 0), tsecr: be32(data, 4) }),
            (kind::MSS | kind::WS | kind::SACK_PERMITTED | kind::SACK | kind::TIMESTAMP, _) => {
                return Err(Error::Malformed);
            }
            (kind, _) => Self::Unknown { kind, data },
        };
        Ok((rest, option))
    }

    /// The bytes the option takes.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        match self {
            Self::EndOfList | Self::NoOperation => 1,
            Self::MaxSegmentSize(_) => 4,
            Self::WindowScale(_) => 3,
            Self::SackPermitted => 2,
            Self::Sack(blocks) => 2 + 8 * blocks.len(),
            Self::Timestamp(_) => 10,
            Self::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// Writes the option at the start of `buffer`; returns the bytes after it.
    ///
    /// # Panics
    /// If `buffer` is shorter than [`buffer_len`](Self::buffer_len), or an unknown option's data
    /// is longer than 253 bytes (caller bugs, not input).
    pub fn emit<'b>(&self, buffer: &'b mut [u8]) -> &'b mut [u8] {
        let len = self.buffer_len();
        let (out, rest) = buffer.split_at_mut(len);
        let (kind, value): (u8, &mut [u8]) = match *self {
            Self::EndOfList => {
                out[0] = kind::EOL;
                return rest;
            }
            Self::NoOperation => {
                out[0] = kind::NOP;
                return rest;
            }
            Self::MaxSegmentSize(mss) => {
                put16(out, 2, mss);
                (kind::MSS, out)
            }
            Self::WindowScale(shift) => {
                out[2] = shift;
                (kind::WS, out)
            }
            Self::SackPermitted => (kind::SACK_PERMITTED, out),
            Self::Sack(blocks) => {
                for (i, b) in blocks.as_slice().iter().enumerate() {
                    put32(out, 2 + 8 * i, b.left.0);
                    put32(out, 6 + 8 * i, b.right.0);
                }
                (kind::SACK, out)
            }
            Self::Timestamp(ts) => {
                put32(out, 2, ts.tsval);
                put32(out, 6, ts.tsecr);
                (kind::TIMESTAMP, out)
            }
            Self::Unknown { kind, data } => {
                out[2..].copy_from_slice(data);
                (kind, out)
            }
        };
        value[0] = kind;
        value[1] = u8::try_from(len).expect("TCP option length at most 255");
        rest
    }
}

/// Two NOPs and a timestamps option: the 12 option bytes of a segment that carries only
/// timestamps (RFC 7323 Appendix A's recommended layout).
const ALIGNED_TIMESTAMP_LEN: usize = 12;

/// The first word of [`ALIGNED_TIMESTAMP_LEN`]'s layout: NOP, NOP, kind 8, length 10.
const ALIGNED_TIMESTAMP_HEAD: [u8; 4] = [kind::NOP, kind::NOP, kind::TIMESTAMP, 10];

/// The timestamps of options laid out as two NOPs and a timestamps option, and nothing else.
#[inline]
fn aligned_timestamp(options: &[u8]) -> Option<Timestamp> {
    let bytes: &[u8; ALIGNED_TIMESTAMP_LEN] = options.try_into().ok()?;
    if bytes[..4] != ALIGNED_TIMESTAMP_HEAD {
        return None;
    }
    Some(Timestamp { tsval: be32(bytes, 4), tsecr: be32(bytes, 8) })
}

/// The option bytes [`aligned_timestamp`] reads.
#[inline]
fn aligned_timestamp_bytes(ts: Timestamp) -> [u8; ALIGNED_TIMESTAMP_LEN] {
    let mut bytes = [0; ALIGNED_TIMESTAMP_LEN];
    bytes[..4].copy_from_slice(&ALIGNED_TIMESTAMP_HEAD);
    bytes[4..8].copy_from_slice(&ts.tsval.to_be_bytes());
    bytes[8..].copy_from_slice(&ts.tsecr.to_be_bytes());
    bytes
}

/// The options of a SYN as Linux lays them out (and as [`Repr::emit`] writes a SYN with all
/// four): MSS, SACK-permitted, timestamps, NOP, window scale, 20 bytes.
const SYN_LAYOUT_LEN: usize = 20;

/// The MSS, timestamps and window scale of options in [`SYN_LAYOUT_LEN`]'s layout (SACK
/// permitted), and nothing else.
#[inline]
fn syn_layout(options: &[u8]) -> Option<(u16, Timestamp, u8)> {
    let b: &[u8; SYN_LAYOUT_LEN] = options.try_into().ok()?;
    if b[..2] != [kind::MSS, 4]
        || b[4..8] != [kind::SACK_PERMITTED, 2, kind::TIMESTAMP, 10]
        || b[16..19] != [kind::NOP, kind::WS, 3]
    {
        return None;
    }
    Some((be16(b, 2), Timestamp { tsval: be32(b, 8), tsecr: be32(b, 12) }, b[19]))
}

/// The bytes [`syn_layout`] reads.
fn syn_layout_bytes(mss: u16, ts: Timestamp, shift: u8) -> [u8; SYN_LAYOUT_LEN] {
    let mut b = [0; SYN_LAYOUT_LEN];
    b[..2].copy_from_slice(&[kind::MSS, 4]);
    b[2..4].copy_from_slice(&mss.to_be_bytes());
    b[4..8].copy_from_slice(&[kind::SACK_PERMITTED, 2, kind::TIMESTAMP, 10]);
    b[8..12].copy_from_slice(&ts.tsval.to_be_bytes());
    b[12..16].copy_from_slice(&ts.tsecr.to_be_bytes());
    b[16..].copy_from_slice(&[kind::NOP, kind::WS, 3, shift]);
    b
}

/// An iterator over the options of a header. It ends after End of Option List, at the end of the
/// bytes, or after yielding the first error; it always ends, since every step consumes at least one
/// byte.
#[derive(Clone, Debug)]
pub struct TcpOptions<'a> {
    rest: &'a [u8],
}

impl<'a> TcpOptions<'a> {
    /// Iterates over the options in `bytes`.
    #[must_use]
    pub const fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }
}

impl<'a> Iterator for TcpOptions<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match TcpOption::parse(self.rest) {
            Ok((rest, option)) => {
                self.rest = if option == TcpOption::EndOfList { &[] } else { rest };
                Some(Ok(option))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for TcpOptions<'_> {}

/// The control flags that change the connection state; at most one of them per segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Control {
    /// None of SYN, FIN, RST.
    #[default]
    None,
    /// SYN.
    Syn,
    /// FIN.
    Fin,
    /// RST.
    Rst,
}

impl Control {
    /// The sequence space the flag takes: one for SYN and FIN.
    #[must_use]
    pub const fn seq_len(self) -> usize {
        match self {
            Self::Syn | Self::Fin => 1,
            Self::None | Self::Rst => 0,
        }
    }
}

/// The meaning of a TCP segment.
///
/// Window scaling is not applied here: `window_len` is the raw field (the stack scales it, except
/// on SYNs). Options of unknown kinds are dropped on parse; when an option appears twice, the last
/// one counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Repr<'a> {
    /// Source port (never 0).
    pub src_port: u16,
    /// Destination port (never 0).
    pub dst_port: u16,
    /// SYN, FIN, RST or none.
    pub control: Control,
    /// PSH.
    pub push: bool,
    /// Sequence number.
    pub seq_number: SeqNumber,
    /// Acknowledgment number, when ACK is set.
    pub ack_number: Option<SeqNumber>,
    /// Window field, unscaled.
    pub window_len: u16,
    /// ECE (RFC 3168).
    pub ece: bool,
    /// CWR (RFC 3168).
    pub cwr: bool,
    /// The urgent pointer, when URG is set.
    pub urgent_pointer: Option<u16>,
    /// Maximum segment size option.
    pub max_seg_size: Option<u16>,
    /// Window scale option (shift count).
    pub window_scale: Option<u8>,
    /// SACK-permitted option.
    pub sack_permitted: bool,
    /// SACK blocks, most recent first (RFC 2018 §4). [`emit`](Self::emit) writes as many as fit
    /// in the option space after the other options and drops the rest from the end (four alone,
    /// three beside timestamps).
    pub sack_blocks: SackBlocks,
    /// Timestamps option.
    pub timestamp: Option<Timestamp>,
    /// The payload.
    pub payload: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses a segment received from `src` to `dst` (the pseudo-header's addresses).
    ///
    /// # Errors
    /// The errors of [`Packet::check_len`]; [`Error::Checksum`] if the policy verifies and the
    /// checksum is wrong; [`Error::Malformed`] for a zero port, more than one of SYN, FIN and RST,
    /// or a malformed option; [`Error::Truncated`] for an option that runs past the header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        policy: ChecksumPolicy,
    ) -> Result<Self> {
        packet.check_len()?;
        if policy.verify() && !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        if packet.src_port() == 0 || packet.dst_port() == 0 {
            return Err(Error::Malformed);
        }
        let control = match (packet.syn(), packet.fin(), packet.rst()) {
            (false, false, false) => Control::None,
            (true, false, false) => Control::Syn,
            (false, true, false) => Control::Fin,
            (false, false, true) => Control::Rst,
            _ => return Err(Error::Malformed),
        };
        let bytes: &'a [u8] = packet.buffer.as_ref();
        let header_len = packet.header_len();
        let mut repr = Self {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            control,
            push: packet.psh(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack().then(|| packet.ack_number()),
            window_len: packet.window_len(),
            ece: packet.ece(),
            cwr: packet.cwr(),
            urgent_pointer: packet.urg().then(|| packet.urgent_at()),
            payload: &bytes[header_len..],
            ..Self::default()
        };
        let options = &bytes[HEADER_LEN..header_len];
        // The layout of nearly every segment of a connection with timestamps (two NOPs and the
        // timestamps, as Linux and we send them) read at once, as Linux's
        // tcp_fast_parse_options does; any other layout takes the general walk.
        if let Some(ts) = aligned_timestamp(options) {
            repr.timestamp = Some(ts);
            return Ok(repr);
        }
        // The SYN and SYN-ACK of nearly every connection (Linux's layout, and ours), also at once.
        if let Some((mss, ts, shift)) = syn_layout(options) {
            repr.max_seg_size = Some(mss);
            repr.sack_permitted = true;
            repr.timestamp = Some(ts);
            repr.window_scale = Some(shift);
            return Ok(repr);
        }
        for option in TcpOptions::new(options) {
            match option? {
                TcpOption::EndOfList | TcpOption::NoOperation | TcpOption::Unknown { .. } => {}
                TcpOption::MaxSegmentSize(mss) => repr.max_seg_size = Some(mss),
                TcpOption::WindowScale(shift) => repr.window_scale = Some(shift),
                TcpOption::SackPermitted => repr.sack_permitted = true,
                TcpOption::Sack(blocks) => repr.sack_blocks = blocks,
                TcpOption::Timestamp(ts) => repr.timestamp = Some(ts),
            }
        }
        Ok(repr)
    }

    /// Parses a segment received over IPv6 from `src` to `dst` (the IPv6 pseudo-header's
    /// addresses, RFC 8200 §8.1).
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    pub fn parse_v6<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        policy: ChecksumPolicy,
    ) -> Result<Self> {
        packet.check_len()?;
        if policy.verify() && !packet.verify_checksum_v6(src, dst) {
            return Err(Error::Checksum);
        }
        // The checksum is verified: the IPv4 parser does the rest, its addresses unused.
        Self::parse(packet, Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED, ChecksumPolicy::Trust)
    }

    /// The option bytes before SACK blocks: MSS, SACK-permitted and timestamps, window scale.
    const fn fixed_options_len(&self) -> usize {
        let mut len = 0;
        if self.max_seg_size.is_some() {
            len += 4;
        }
        if self.sack_permitted || self.timestamp.is_some() {
            // SACK-permitted and timestamps share 12 bytes; either alone is padded to 4 or 12.
            len += if self.timestamp.is_some() { 12 } else { 4 };
        }
        if self.window_scale.is_some() {
            len += 4;
        }
        len
    }

    /// The number of SACK blocks [`emit`](Self::emit) writes.
    #[must_use]
    pub const fn sack_blocks_emitted(&self) -> usize {
        // Two NOPs, kind and length, then 8 bytes per block.
        let room = (MAX_OPTIONS_LEN - self.fixed_options_len()).saturating_sub(4) / 8;
        let n = self.sack_blocks.len();
        if n < room { n } else { room }
    }

    /// The header length emitted: 20 plus the options, a multiple of 4 and at most 60.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        let sack = self.sack_blocks_emitted();
        HEADER_LEN + self.fixed_options_len() + if sack > 0 { 4 + 8 * sack } else { 0 }
    }

    /// The segment length: header and payload.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// The length in sequence space: payload plus one for SYN or FIN.
    #[must_use]
    pub const fn segment_len(&self) -> usize {
        self.payload.len() + self.control.seq_len()
    }

    /// Writes the segment (header, options, payload) and fills the checksum for `src -> dst`.
    ///
    /// Options are laid out as Linux does: MSS; SACK-permitted and timestamps (NOP-padded when
    /// alone); NOP and window scale; two NOPs and the SACK blocks that fit.
    ///
    /// # Panics
    /// If the buffer is not exactly [`buffer_len`](Self::buffer_len) bytes long (a caller bug, not
    /// input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>, src: Ipv4Addr, dst: Ipv4Addr) {
        self.emit_unsummed(packet);
        packet.fill_checksum(src, dst);
    }

    /// Writes the segment as [`emit`](Self::emit) does, with the checksum over the IPv6
    /// pseudo-header for `src -> dst`.
    ///
    /// # Panics
    /// As [`emit`](Self::emit).
    pub fn emit_v6<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) {
        self.emit_unsummed(packet);
        packet.fill_checksum_v6(src, dst);
    }

    /// [`emit`](Self::emit) without the checksum: the field is left zero. Only for links that
    /// cannot corrupt and whose receiver trusts checksums ([`ChecksumPolicy::Trust`]), such as
    /// an in-memory pair of stacks; a receiver that verifies drops the segment.
    ///
    /// # Panics
    /// As [`emit`](Self::emit).
    pub fn emit_unsummed<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let header_len = self.header_len();
        let buf = packet.buffer.as_mut();
        assert_eq!(buf.len(), header_len + self.payload.len(), "TCP buffer length");
        let (head, payload) = buf.split_at_mut(header_len);
        let (fixed, mut out) = head.split_at_mut(HEADER_LEN);
        // The fixed header assembled in registers and stored at once (one bounds check, not one
        // per field), the checksum field 0. (Written with `put16`/`put32` on the array it measured
        // 20 instructions more per segment and ACK in `icount_tcp`.)
        let flags = match self.control {
            Control::None => 0,
            Control::Syn => SYN,
            Control::Fin => FIN,
            Control::Rst => RST,
        } | (u8::from(self.push) * PSH)
            | (u8::from(self.ack_number.is_some()) * ACK)
            | (u8::from(self.urgent_pointer.is_some()) * URG)
            | (u8::from(self.ece) * ECE)
            | (u8::from(self.cwr) * CWR);
        let mut h = [0u8; HEADER_LEN];
        h[field::SRC_PORT..field::SRC_PORT + 2].copy_from_slice(&self.src_port.to_be_bytes());
        h[field::DST_PORT..field::DST_PORT + 2].copy_from_slice(&self.dst_port.to_be_bytes());
        h[field::SEQ_NUM..field::SEQ_NUM + 4].copy_from_slice(&self.seq_number.0.to_be_bytes());
        let ack = self.ack_number.unwrap_or_default().0;
        h[field::ACK_NUM..field::ACK_NUM + 4].copy_from_slice(&ack.to_be_bytes());
        // `header_len` is at most 60 (`Repr::header_len`): the data offset's four bits hold it.
        h[field::DATA_OFFSET] = u8::try_from(header_len / 4).unwrap_or(15) << 4;
        h[field::FLAGS] = flags;
        h[field::WINDOW..field::WINDOW + 2].copy_from_slice(&self.window_len.to_be_bytes());
        let urgent = self.urgent_pointer.unwrap_or(0);
        h[field::URGENT..field::URGENT + 2].copy_from_slice(&urgent.to_be_bytes());
        fixed.copy_from_slice(&h);

        if let (Some(mss), true, Some(ts), Some(shift), 0) = (
            self.max_seg_size,
            self.sack_permitted,
            self.timestamp,
            self.window_scale,
            self.sack_blocks.len(),
        ) {
            // The layout `syn_layout` reads back, written at once (what the general path below
            // writes for these four).
            out.copy_from_slice(&syn_layout_bytes(mss, ts, shift));
            payload.copy_from_slice(self.payload);
            return;
        }
        if let Some(mss) = self.max_seg_size {
            out = TcpOption::MaxSegmentSize(mss).emit(out);
        }
        match (self.sack_permitted, self.timestamp) {
            (true, Some(ts)) => {
                out = TcpOption::SackPermitted.emit(out);
                out = TcpOption::Timestamp(ts).emit(out);
            }
            (false, Some(ts)) => {
                // The layout `aligned_timestamp` reads back, written at once.
                let (aligned, rest) = std::mem::take(&mut out).split_at_mut(ALIGNED_TIMESTAMP_LEN);
                aligned.copy_from_slice(&aligned_timestamp_bytes(ts));
                out = rest;
            }
            (true, None) => {
                out = TcpOption::NoOperation.emit(out);
                out = TcpOption::NoOperation.emit(out);
                out = TcpOption::SackPermitted.emit(out);
            }
            (false, None) => {}
        }
        if let Some(shift) = self.window_scale {
            out = TcpOption::NoOperation.emit(out);
            out = TcpOption::WindowScale(shift).emit(out);
        }
        let n = self.sack_blocks_emitted();
        if n > 0 {
            let mut blocks = self.sack_blocks;
            blocks.truncate(n);
            out = TcpOption::NoOperation.emit(out);
            out = TcpOption::NoOperation.emit(out);
            out = TcpOption::Sack(blocks).emit(out);
        }
        debug_assert!(out.is_empty(), "options fill the header exactly");
        payload.copy_from_slice(self.payload);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    pub(crate) const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

    // A SYN in the exact layout Linux uses for connect() (10.0.0.2:42728 -> 10.0.0.1:80): MSS 1460,
    // SACK-permitted, timestamps, NOP, window scale 7; window 64240. Assembled by hand; the checksum
    // 0x5f9c was computed independently (Python) with the pseudo-header.
    pub(crate) const LINUX_SYN: [u8; 40] = [
        0xa6, 0xe8, 0x00, 0x50, 0x7a, 0x3c, 0x5d, 0x21, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0, 0x5f,
        0x9c, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x9c, 0x5a, 0x3e, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    pub(crate) fn linux_syn_repr() -> Repr<'static> {
        Repr {
            src_port: 42728,
            dst_port: 80,
            control: Control::Syn,
            seq_number: SeqNumber::new(0x7a3c_5d21),
            window_len: 64240,
            max_seg_size: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            timestamp: Some(Timestamp { tsval: 0x009c_5a3e, tsecr: 0 }),
            ..Repr::default()
        }
    }

    #[test]
    fn linux_syn() {
        let p = Packet::new_checked(&LINUX_SYN[..]).unwrap();
        assert_eq!(p.header_len(), 40);
        assert!(p.syn() && !p.ack() && !p.fin() && !p.rst());
        assert!(p.verify_checksum(SRC, DST));
        assert!(!p.verify_checksum(DST, Ipv4Addr::new(10, 0, 0, 3)));
        let options: Vec<_> = p.option_iter().collect::<Result<_>>().unwrap();
        assert_eq!(
            options,
            [
                TcpOption::MaxSegmentSize(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamp(Timestamp { tsval: 0x009c_5a3e, tsecr: 0 }),
                TcpOption::NoOperation,
                TcpOption::WindowScale(7),
            ]
        );
        let repr = Repr::parse(&p, SRC, DST, ChecksumPolicy::Verify).unwrap();
        assert_eq!(repr, linux_syn_repr());
        assert_eq!(repr.segment_len(), 1);
        let mut out = [0u8; 40];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]), SRC, DST);
        assert_eq!(out, LINUX_SYN, "emit lays options out as Linux does");
    }

    #[test]
    fn ack_with_sack_and_ece_cwr() {
        // An ACK with PSH, ECE, CWR, timestamps and three SACK blocks: 20 + 12 + 28 = 60 bytes.
        let mut blocks = SackBlocks::new();
        for i in 0..4u32 {
            assert!(
                blocks.push(SackBlock {
                    left: SeqNumber::new(1000 * i),
                    right: SeqNumber::new(1000 * i + 500)
                })
            );
        }
        assert!(!blocks.push(SackBlock::default()), "four at most");
        let repr = Repr {
            src_port: 80,
            dst_port: 42728,
            push: true,
            seq_number: SeqNumber::new(u32::MAX - 2),
            ack_number: Some(SeqNumber::new(7)),
            window_len: 502,
            ece: true,
            cwr: true,
            sack_blocks: blocks,
            timestamp: Some(Timestamp { tsval: 1, tsecr: 2 }),
            payload: b"hello",
            ..Repr::default()
        };
        assert_eq!(repr.sack_blocks_emitted(), 3);
        assert_eq!(repr.header_len(), 60);
        let mut bytes = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]), SRC, DST);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.flags(), 0xd8, "CWR ECE ACK PSH");
        let parsed = Repr::parse(&p, SRC, DST, ChecksumPolicy::Verify).unwrap();
        let mut expected = repr;
        expected.sack_blocks.truncate(3);
        assert_eq!(parsed, expected);
        // Without timestamps all four fit.
        let repr = Repr { timestamp: None, ..repr };
        assert_eq!(repr.sack_blocks_emitted(), 4);
        assert_eq!(repr.header_len(), 56);
    }

    #[test]
    fn option_errors() {
        fn parse(b: &[u8]) -> Result<TcpOption<'_>> {
            TcpOption::parse(b).map(|(_, o)| o)
        }
        assert_eq!(parse(&[]), Err(Error::Truncated));
        assert_eq!(parse(&[2]), Err(Error::Truncated), "kind without length");
        assert_eq!(parse(&[2, 4, 5]), Err(Error::Truncated), "length past the end");
        assert_eq!(parse(&[99, 0]), Err(Error::Malformed), "length 0 would never advance");
        assert_eq!(parse(&[99, 1]), Err(Error::Malformed), "length 1 would overlap the next");
        assert_eq!(parse(&[2, 3, 5]), Err(Error::Malformed), "MSS length 3");
        assert_eq!(parse(&[3, 4, 7, 0]), Err(Error::Malformed), "WS length 4");
        assert_eq!(parse(&[4, 3, 0]), Err(Error::Malformed), "SACKOK length 3");
        assert_eq!(parse(&[5, 2]), Err(Error::Malformed), "SACK without blocks");
        assert_eq!(parse(&[5, 9, 0, 0, 0, 0, 0, 0, 0]), Err(Error::Malformed), "SACK length 9");
        let mut five = vec![5u8, 42];
        five.resize(42, 0);
        assert_eq!(parse(&five), Err(Error::Malformed), "five SACK blocks");
        assert_eq!(parse(&[8, 8, 0, 0, 0, 0, 0, 0]), Err(Error::Malformed), "TS length 8");
        assert_eq!(parse(&[99, 2]), Ok(TcpOption::Unknown { kind: 99, data: &[] }));
        assert_eq!(parse(&[30, 4, 1, 2]), Ok(TcpOption::Unknown { kind: 30, data: &[1, 2] }));
        // The iterator stops at EOL and after the first error.
        let opts: Vec<_> = TcpOptions::new(&[1, 0, 2, 4, 5, 0xb4]).collect();
        assert_eq!(opts, [Ok(TcpOption::NoOperation), Ok(TcpOption::EndOfList)]);
        let opts: Vec<_> = TcpOptions::new(&[1, 99, 0, 1, 1]).collect();
        assert_eq!(opts, [Ok(TcpOption::NoOperation), Err(Error::Malformed)]);
    }

    #[test]
    fn segment_errors() {
        fn parse(b: &[u8]) -> Result<Repr<'_>> {
            Repr::parse(&Packet::new_unchecked(b), SRC, DST, ChecksumPolicy::Verify)
        }
        let refill = |f: &dyn Fn(&mut [u8])| {
            let mut b = LINUX_SYN;
            f(&mut b);
            Packet::new_unchecked(&mut b[..]).fill_checksum(SRC, DST);
            parse(Vec::leak(b.to_vec()))
        };
        for len in 0..20 {
            assert_eq!(Packet::new_checked(&LINUX_SYN[..len]).unwrap_err(), Error::Truncated);
        }
        assert_eq!(parse(&LINUX_SYN[..39]), Err(Error::Truncated), "options cut short");
        let mut bad = LINUX_SYN;
        bad[30] ^= 0x10;
        assert_eq!(parse(&bad), Err(Error::Checksum));
        assert!(Repr::parse(&Packet::new_unchecked(&bad[..]), SRC, DST, ChecksumPolicy::Trust).is_ok());
        assert_eq!(refill(&|b| b[12] = 0x40), Err(Error::Malformed), "data offset 4");
        assert_eq!(refill(&|b| b[12] = 0xb0), Err(Error::Truncated), "data offset past the end");
        assert_eq!(refill(&|b| b[0..2].fill(0)), Err(Error::Malformed), "source port 0");
        assert_eq!(refill(&|b| b[2..4].fill(0)), Err(Error::Malformed), "destination port 0");
        assert_eq!(refill(&|b| b[13] = SYN | FIN), Err(Error::Malformed));
        assert_eq!(refill(&|b| b[13] = SYN | RST), Err(Error::Malformed));
        assert_eq!(refill(&|b| b[13] = FIN | RST | ACK), Err(Error::Malformed));
        assert_eq!(refill(&|b| b[21] = 0), Err(Error::Malformed), "MSS length 0");
        assert_eq!(refill(&|b| b[38] = 4), Err(Error::Truncated), "WS length past the header");
        // An unknown option in place of SACK-permitted is skipped.
        let r = refill(&|b| b[24] = 0x42).unwrap();
        assert!(!r.sack_permitted && r.max_seg_size == Some(1460) && r.window_scale == Some(7));
        // EOL ends the list: what follows is padding.
        let r = refill(&|b| b[24] = 0).unwrap();
        assert_eq!((r.sack_permitted, r.timestamp, r.window_scale), (false, None, None));
        // ECE and CWR on a SYN (ECN setup, RFC 3168 §6.1.1) are accepted.
        let r = refill(&|b| b[13] = SYN | ECE | CWR).unwrap();
        assert!(r.ece && r.cwr && r.control == Control::Syn);
        // Reserved bits are ignored.
        assert!(refill(&|b| b[12] |= 0x0f).is_ok());
    }

    #[test]
    fn incremental_port_rewrite() {
        let mut b = LINUX_SYN;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_dst_port_incremental(8080);
        p.set_src_port_incremental(1);
        assert!(p.verify_checksum(SRC, DST));
        let incremental = p.checksum();
        p.fill_checksum(SRC, DST);
        assert_eq!(p.checksum(), incremental);
    }

    #[test]
    fn seq_number_arithmetic() {
        let a = SeqNumber::new(u32::MAX - 1);
        let b = a + 4;
        assert_eq!(b.get(), 2);
        assert_eq!(b - a, 4);
        assert_eq!(a - b, -4);
        assert!(a < b);
        assert!(b > a);
        assert!(a <= b);
        assert_ne!(a, b);
        assert_eq!(a.max(b), b);
        assert_eq!(b.max(a), b);
        assert_eq!(a.min(b), a);
        assert_eq!(b - 4usize, a);
        let mut c = a;
        c += 10;
        c -= 10;
        assert_eq!(c, a);
        // Exactly half the space apart: incomparable both ways.
        let far = a + (1usize << 31);
        assert_eq!(far - a, i32::MIN);
        assert_eq!(a.partial_cmp(&far), None);
        assert_eq!(far.partial_cmp(&a), None);
        assert_eq!([a < far, a > far, far < a, far > a, a <= far, a >= far], [false; 6]);
        assert_eq!(a.max(far), a);
        // Just under half: later.
        assert!(a < a + ((1usize << 31) - 1));
        assert!(a > a + ((1usize << 31) + 1));
        // Adding a usize of more than 2^32 wraps modulo 2^32.
        #[cfg(target_pointer_width = "64")]
        assert_eq!(a + ((1usize << 32) + 3), a + 3);
    }

    proptest! {
        #[test]
        fn seq_order_is_serial(x in any::<u32>(), d in 1u32..(1 << 31)) {
            let a = SeqNumber::new(x);
            let b = a + d as usize;
            prop_assert!(a < b);
            prop_assert!(b > a);
            prop_assert_eq!(b - a, i32::try_from(d).unwrap());
            prop_assert_eq!(a.max(b), b);
            prop_assert_eq!(b.min(a), a);
            prop_assert_eq!(b - d as usize, a);
        }

        /// The four operators say what `partial_cmp` says, for any two numbers (the distances
        /// 0 and 2^31, where the operators' own arithmetic could go wrong, included on purpose).
        #[test]
        fn seq_operators_agree_with_partial_cmp(
            x in any::<u32>(),
            d in prop_oneof![any::<u32>(), Just(0u32), Just(1 << 31), Just((1 << 31) - 1), Just((1 << 31) + 1)],
        ) {
            let (a, b) = (SeqNumber::new(x), SeqNumber::new(x.wrapping_add(d)));
            for (p, q) in [(a, b), (b, a)] {
                let ord = p.partial_cmp(&q);
                prop_assert_eq!(p < q, ord == Some(Ordering::Less));
                prop_assert_eq!(p <= q, matches!(ord, Some(Ordering::Less | Ordering::Equal)));
                prop_assert_eq!(p > q, ord == Some(Ordering::Greater));
                prop_assert_eq!(p >= q, matches!(ord, Some(Ordering::Greater | Ordering::Equal)));
            }
        }
    }

    pub(crate) fn arb_parts() -> impl Strategy<Value = (Repr<'static>, Vec<u8>)> {
        let head = (
            1u16..,
            1u16..,
            0u8..4,
            any::<bool>(),
            any::<u32>(),
            proptest::option::of(any::<u32>()),
            any::<u16>(),
            any::<(bool, bool)>(),
            proptest::option::of(any::<u16>()),
        );
        let options = (
            proptest::option::of(any::<u16>()),
            proptest::option::of(any::<u8>()),
            any::<bool>(),
            proptest::collection::vec(any::<(u32, u32)>(), 0..=4),
            proptest::option::of(any::<(u32, u32)>()),
        );
        (head, options, proptest::collection::vec(any::<u8>(), 0..100)).prop_map(
            |((sp, dp, ctl, push, seq, ack, win, (ece, cwr), urg), (mss, ws, sok, sack, ts), payload)| {
                let blocks: Vec<_> = sack
                    .into_iter()
                    .map(|(l, r)| SackBlock { left: SeqNumber::new(l), right: SeqNumber::new(r) })
                    .collect();
                let repr = Repr {
                    src_port: sp,
                    dst_port: dp,
                    control: [Control::None, Control::Syn, Control::Fin, Control::Rst][usize::from(ctl)],
                    push,
                    seq_number: SeqNumber::new(seq),
                    ack_number: ack.map(SeqNumber::new),
                    window_len: win,
                    ece,
                    cwr,
                    urgent_pointer: urg,
                    max_seg_size: mss,
                    window_scale: ws,
                    sack_permitted: sok,
                    sack_blocks: SackBlocks::from_slice(&blocks).unwrap(),
                    timestamp: ts.map(|(tsval, tsecr)| Timestamp { tsval, tsecr }),
                    payload: &[],
                };
                (repr, payload)
            },
        )
    }

    proptest! {
        #[test]
        fn round_trip((repr, payload) in arb_parts(), src in any::<[u8; 4]>(), dst in any::<[u8; 4]>()) {
            let repr = Repr { payload: &payload, ..repr };
            let (src, dst) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
            prop_assert!(repr.header_len() <= 60 && repr.header_len().is_multiple_of(4));
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]), src, dst);
            let p = Packet::new_checked(&bytes[..]).unwrap();
            let parsed = Repr::parse(&p, src, dst, ChecksumPolicy::Verify).unwrap();
            let mut expected = repr;
            expected.sack_blocks.truncate(repr.sack_blocks_emitted());
            prop_assert_eq!(parsed, expected);
        }

        #[test]
        fn incremental_port_rewrite_verifies((repr, payload) in arb_parts(), port in 1u16..) {
            let repr = Repr { payload: &payload, ..repr };
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]), SRC, DST);
            let mut p = Packet::new_checked(&mut bytes[..]).unwrap();
            p.set_dst_port_incremental(port);
            prop_assert!(p.verify_checksum(SRC, DST));
        }

        #[test]
        fn no_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let p = Packet::new_unchecked(&bytes[..]);
            if p.check_len().is_ok() {
                let _ = (p.seq_number(), p.ack_number(), p.flags(), p.urgent_at(), p.segment_len());
                prop_assert!(p.option_iter().count() <= p.options().len());
            }
            let _ = Repr::parse(&p, SRC, DST, ChecksumPolicy::Trust);
        }

        #[test]
        fn aligned_timestamps_read_as_the_general_walk_reads_them(
            tsval in any::<u32>(), tsecr in any::<u32>(), layout in 0usize..4,
        ) {
            let ts = Timestamp { tsval, tsecr };
            let [v0, v1, v2, v3] = tsval.to_be_bytes();
            let [e0, e1, e2, e3] = tsecr.to_be_bytes();
            let option = [8, 10, v0, v1, v2, v3, e0, e1, e2, e3];
            // The aligned layout (the fast path), and layouts only the general walk reads.
            let options: Vec<u8> = match layout {
                0 => [&[1, 1][..], &option].concat(),
                1 => [&option[..], &[1, 1]].concat(),
                2 => [&option[..], &[0, 0]].concat(),
                _ => [&[1][..], &option, &[0]].concat(),
            };
            let mut bytes = vec![0u8; HEADER_LEN + options.len()];
            let mut p = Packet::new_unchecked(&mut bytes[..]);
            p.set_src_port(1);
            p.set_dst_port(2);
            p.set_header_len(32);
            p.set_flags(ACK);
            p.options_mut().copy_from_slice(&options);
            let repr = Repr::parse(&Packet::new_unchecked(&bytes[..]), SRC, DST, ChecksumPolicy::Trust).unwrap();
            prop_assert_eq!(repr.timestamp, Some(ts));
            prop_assert_eq!(aligned_timestamp(&options).is_some(), layout == 0);
            let walked = TcpOptions::new(&options).filter_map(|o| match o {
                Ok(TcpOption::Timestamp(t)) => Some(t),
                _ => None,
            });
            prop_assert_eq!(walked.last(), Some(ts));
            // What emit writes for timestamps alone is the aligned layout.
            let sent = Repr { timestamp: Some(ts), ack_number: Some(SeqNumber(0)), src_port: 1, dst_port: 2, ..Repr::default() };
            let mut out = vec![0u8; sent.buffer_len()];
            sent.emit_unsummed(&mut Packet::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[HEADER_LEN..], &[&[1u8, 1][..], &option].concat()[..]);
        }

        #[test]
        fn the_syn_layout_reads_and_writes_as_the_general_path_does(
            mss in any::<u16>(), tsval in any::<u32>(), tsecr in any::<u32>(), shift in any::<u8>(),
            swap in any::<bool>(),
        ) {
            let ts = Timestamp { tsval, tsecr };
            let general = |out: &mut [u8]| {
                let mut out = TcpOption::MaxSegmentSize(mss).emit(out);
                out = TcpOption::SackPermitted.emit(out);
                out = TcpOption::Timestamp(ts).emit(out);
                out = TcpOption::NoOperation.emit(out);
                out = TcpOption::WindowScale(shift).emit(out);
                assert!(out.is_empty());
            };
            let mut walked = [0u8; SYN_LAYOUT_LEN];
            general(&mut walked);
            prop_assert_eq!(walked, syn_layout_bytes(mss, ts, shift));
            prop_assert_eq!(syn_layout(&walked), Some((mss, ts, shift)));
            // What emit writes for a SYN with all four is that layout.
            let syn = Repr {
                src_port: 1, dst_port: 2, control: Control::Syn, max_seg_size: Some(mss),
                sack_permitted: true, timestamp: Some(ts), window_scale: Some(shift), ..Repr::default()
            };
            let mut out = vec![0u8; syn.buffer_len()];
            syn.emit_unsummed(&mut Packet::new_unchecked(&mut out[..]));
            prop_assert_eq!(&out[HEADER_LEN..], &walked[..]);
            // Parsed at once, or (another order: SACK-permitted after the timestamps) by the walk,
            // the fields are the same.
            let mut options = walked;
            if swap {
                options[4..14].copy_from_slice(&walked[6..16]);
                options[14..16].copy_from_slice(&walked[4..6]);
                prop_assert_eq!(syn_layout(&options), None);
            }
            out[HEADER_LEN..].copy_from_slice(&options);
            let repr = Repr::parse(&Packet::new_unchecked(&out[..]), SRC, DST, ChecksumPolicy::Trust).unwrap();
            prop_assert_eq!(repr, syn);
        }

        #[test]
        fn options_never_loop(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            // Every item consumes at least one byte.
            prop_assert!(TcpOptions::new(&bytes).count() <= bytes.len());
        }
    }
}
