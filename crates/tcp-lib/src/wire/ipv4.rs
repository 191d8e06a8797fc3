//! IPv4 (RFC 791), with the header checksum of RFC 791 §3.1 / RFC 1071, its incremental update for
//! a TTL decrement (RFC 1624), and fragment fields; reassembly lives in [`reassembly`].
//!
//! Layout of the header: version (4 bits) and IHL (4 bits, in 32-bit words), DSCP (6 bits, RFC 2474)
//! and ECN (2 bits, RFC 3168), total length (2), identification (2), flags (3 bits: reserved, DF,
//! MF) and fragment offset (13 bits, in 8-byte units), TTL (1), protocol (1), header checksum (2),
//! source and destination addresses (4 each), then `IHL * 4 - 20` bytes of options.
//!
//! **Options** are skipped: the header length is honoured (the payload starts after them) and they
//! are covered by the checksum, but never interpreted; [`Repr::emit`] writes none. **Padding**: the
//! payload is bounded by the total length, so Ethernet padding after the packet is ignored.

pub mod reassembly;

use std::fmt;
use std::net::Ipv4Addr;

use super::{ChecksumPolicy, Error, Result, be16, checksum, put16};

/// An IPv4 address (the standard library's).
pub type Address = Ipv4Addr;

mod field {
    pub(super) const VER_IHL: usize = 0;
    pub(super) const DSCP_ECN: usize = 1;
    pub(super) const LENGTH: usize = 2;
    pub(super) const IDENT: usize = 4;
    pub(super) const FLAGS_FRAG: usize = 6;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: usize = 10;
    pub(super) const SRC_ADDR: usize = 12;
    pub(super) const DST_ADDR: usize = 16;
}

/// The length of a header without options.
pub const HEADER_LEN: usize = 20;
/// The ECN field's ECT(0) codepoint: an ECN-Capable Transport (RFC 3168 §5).
pub const ECN_ECT0: u8 = 0b10;
/// The ECN field's CE codepoint: Congestion Experienced, set by a router (RFC 3168 §5).
pub const ECN_CE: u8 = 0b11;
/// The largest header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;
/// The largest total length.
pub const MAX_PACKET_LEN: usize = 65535;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// The DSCP/ECN byte: the DSCP's 6 bits above the ECN codepoint's 2.
const fn dscp_ecn(dscp: u8, ecn: u8) -> u8 {
    (dscp << 2) | (ecn & 0x03)
}

/// The flags-and-fragment-offset field: DF, MF and the offset in bytes (a multiple of 8; the low
/// three bits are dropped); the reserved bit clear.
const fn flags_frag(dont_frag: bool, more_frags: bool, offset: u16) -> u16 {
    let mut v = (offset >> 3) & FRAG_OFFSET_MASK;
    if dont_frag {
        v |= FLAG_DF;
    }
    if more_frags {
        v |= FLAG_MF;
    }
    v
}

/// An IP protocol number (IANA "Assigned Internet Protocol Numbers"; the ones this stack uses are
/// named).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// IPv6 Hop-by-Hop Options header, 0 (RFC 8200 §4.3).
    HopByHop,
    /// ICMP, 1.
    Icmp,
    /// TCP, 6.
    Tcp,
    /// UDP, 17.
    Udp,
    /// IPv6 Routing header, 43 (RFC 8200 §4.4).
    Ipv6Route,
    /// IPv6 Fragment header, 44 (RFC 8200 §4.5).
    Ipv6Frag,
    /// ICMPv6, 58 (RFC 4443).
    Icmpv6,
    /// IPv6 "no next header", 59 (RFC 8200 §4.7).
    Ipv6NoNxt,
    /// IPv6 Destination Options header, 60 (RFC 8200 §4.6).
    Ipv6Opts,
    /// Any other value (never one of the named ones).
    Unknown(u8),
}

impl From<u8> for Protocol {
    fn from(v: u8) -> Self {
        match v {
            0 => Self::HopByHop,
            1 => Self::Icmp,
            6 => Self::Tcp,
            17 => Self::Udp,
            43 => Self::Ipv6Route,
            44 => Self::Ipv6Frag,
            58 => Self::Icmpv6,
            59 => Self::Ipv6NoNxt,
            60 => Self::Ipv6Opts,
            other => Self::Unknown(other),
        }
    }
}

impl From<Protocol> for u8 {
    fn from(p: Protocol) -> Self {
        match p {
            Protocol::HopByHop => 0,
            Protocol::Icmp => 1,
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Ipv6Route => 43,
            Protocol::Ipv6Frag => 44,
            Protocol::Icmpv6 => 58,
            Protocol::Ipv6NoNxt => 59,
            Protocol::Ipv6Opts => 60,
            Protocol::Unknown(v) => v,
        }
    }
}

/// An IPv4 prefix: an address and a prefix length of at most 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    address: Address,
    prefix_len: u8,
}

impl Cidr {
    /// The prefix `address/prefix_len`; `None` if `prefix_len > 32`. The host bits of `address`
    /// are kept (an interface address with its subnet).
    #[must_use]
    pub const fn new(address: Address, prefix_len: u8) -> Option<Self> {
        if prefix_len > 32 { None } else { Some(Self { address, prefix_len }) }
    }

    /// The address.
    #[must_use]
    pub const fn address(&self) -> Address {
        self.address
    }

    /// The prefix length.
    #[must_use]
    pub const fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// The netmask, e.g. `255.255.255.0` for `/24`.
    #[must_use]
    pub fn netmask(&self) -> Address {
        Address::from_bits(self.mask())
    }

    fn mask(&self) -> u32 {
        u32::MAX.checked_shl(32 - u32::from(self.prefix_len)).unwrap_or(0)
    }

    /// The network address (host bits cleared).
    #[must_use]
    pub fn network(&self) -> Address {
        Address::from_bits(self.address.to_bits() & self.mask())
    }

    /// The directed broadcast address (host bits set); `None` for `/31` and `/32`, which have none
    /// (RFC 3021).
    #[must_use]
    pub fn broadcast(&self) -> Option<Address> {
        (self.prefix_len < 31).then(|| Address::from_bits(self.address.to_bits() | !self.mask()))
    }

    /// Whether `addr` is inside the prefix.
    #[must_use]
    pub fn contains_addr(&self, addr: Address) -> bool {
        (addr.to_bits() ^ self.address.to_bits()) & self.mask() == 0
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

/// Why a string is not an IPv4 prefix ([`Cidr`]'s `FromStr`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IPv4 address with a prefix length (like 10.0.0.2/24)")]
pub struct ParseCidrError(String);

impl std::str::FromStr for Cidr {
    type Err = ParseCidrError;

    /// `a.b.c.d/n` with `n <= 32`, as [`Display`](fmt::Display) writes it.
    ///
    /// ```
    /// use tcp_lib::wire::Ipv4Cidr;
    ///
    /// let cidr: Ipv4Cidr = "10.0.0.2/24".parse()?;
    /// assert_eq!((cidr.address().octets(), cidr.prefix_len()), ([10, 0, 0, 2], 24));
    /// assert!("10.0.0.2".parse::<Ipv4Cidr>().is_err(), "the prefix length is required");
    /// assert!("10.0.0.2/33".parse::<Ipv4Cidr>().is_err());
    /// # Ok::<(), tcp_lib::wire::ipv4::ParseCidrError>(())
    /// ```
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        parse_prefix(s).and_then(|(a, len)| Self::new(a, len)).ok_or_else(|| ParseCidrError(s.to_owned()))
    }
}

/// Splits `address/len` into a parsed address and a prefix length of decimal digits (the caller
/// bounds it); `None` if either part does not parse.
pub(crate) fn parse_prefix<A: std::str::FromStr>(s: &str) -> Option<(A, u8)> {
    let (address, len) = s.split_once('/')?;
    let address = address.parse().ok()?;
    // Digits only: `u8::from_str` would take a leading `+`.
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((address, len.parse().ok()?))
}

/// A zero-copy view of an IPv4 packet.
///
/// **No-panic contract:** after [`check_len`](Self::check_len) has succeeded, no accessor panics,
/// whatever the bytes are, as long as the IHL and total length are not changed through setters
/// afterwards. [`check_len`](Self::check_len) checks the lengths only; [`Repr::parse`] also checks
/// the version and the checksum.
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

    /// Checks the lengths: the buffer holds the fixed header, the IHL is at least 5, the total
    /// length covers the header, and the buffer holds the total length (more is allowed: padding).
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than the fixed header or the total length;
    /// [`Error::Malformed`] if the IHL is below 5 or the total length is below the header length.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        let total = usize::from(self.total_len());
        if total < header_len {
            return Err(Error::Malformed);
        }
        if len < total {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version field (4 for IPv4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// The header length in bytes (IHL times 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The differentiated services code point.
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// The ECN field (RFC 3168: 0 not ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// The total length of header and payload.
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The identification.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }

    fn flags_frag(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG)
    }

    /// The reserved (evil) flag bit, which must be zero.
    pub fn reserved_flag(&self) -> bool {
        self.flags_frag() & 0x8000 != 0
    }

    /// The don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }

    /// The more-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.flags_frag() & FLAG_MF != 0
    }

    /// The fragment offset in bytes (the field times 8; at most 65528).
    pub fn frag_offset(&self) -> u16 {
        (self.flags_frag() & FRAG_OFFSET_MASK) << 3
    }

    /// Whether this packet is a fragment: MF set or a non-zero offset.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// The time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The payload's protocol.
    pub fn protocol(&self) -> Protocol {
        Protocol::from(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// The header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The source address.
    pub fn src_addr(&self) -> Address {
        addr_at(self.buffer.as_ref(), field::SRC_ADDR)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Address {
        addr_at(self.buffer.as_ref(), field::DST_ADDR)
    }

    /// Whether the header checksum verifies (the header, options included, sums to `0xffff`).
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.header()) == 0xffff
    }

    /// The header, options included.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The options (empty without).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The payload: from the end of the header to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

fn addr_at(b: &[u8], at: usize) -> Address {
    Address::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version and the header length in bytes (rounded down to 4-byte words; voids
    /// [`check_len`](Self::check_len)).
    pub fn set_version_and_header_len(&mut self, version: u8, header_len: u8) {
        self.buffer.as_mut()[field::VER_IHL] = (version << 4) | ((header_len / 4) & 0x0f);
    }

    /// Sets the DSCP (6 bits) and ECN (2 bits).
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = dscp_ecn(dscp, ecn);
    }

    /// Sets the total length (voids [`check_len`](Self::check_len)).
    pub fn set_total_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::IDENT, v);
    }

    /// Sets the flags and the fragment offset in bytes (which must be a multiple of 8; the low
    /// three bits are dropped). The reserved bit is cleared.
    pub fn set_flags_and_frag_offset(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        put16(self.buffer.as_mut(), field::FLAGS_FRAG, flags_frag(dont_frag, more_frags, offset));
    }

    /// Sets the TTL (the checksum is not updated; see
    /// [`set_ttl_incremental`](Self::set_ttl_incremental)).
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the TTL and updates the checksum incrementally (RFC 1624), as a router does for a TTL
    /// decrement: a correct checksum stays correct.
    pub fn set_ttl_incremental(&mut self, ttl: u8) {
        let b = self.buffer.as_ref();
        let old = be16(b, field::TTL);
        let new = u16::from_be_bytes([ttl, b[field::PROTOCOL]]);
        let sum = checksum::update(self.checksum(), old, new);
        self.set_ttl(ttl);
        self.set_checksum(sum);
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, p: Protocol) {
        self.buffer.as_mut()[field::PROTOCOL] = p.into();
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Address) {
        self.buffer.as_mut()[field::SRC_ADDR..field::SRC_ADDR + 4].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Address) {
        self.buffer.as_mut()[field::DST_ADDR..field::DST_ADDR + 4].copy_from_slice(&a.octets());
    }

    /// Computes and writes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::finish(checksum::data(self.header()));
        self.set_checksum(sum);
    }

    /// The payload, mutably (from the end of the header to the total length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.header_len()..usize::from(self.total_len());
        &mut self.buffer.as_mut()[range]
    }
}

/// The meaning of an IPv4 header that is not a fragment.
///
/// Options are not represented (they are skipped on parse and none are emitted); neither are the
/// fragment fields, because [`Repr::parse`] refuses fragments ([`reassembly`] handles them) and
/// [`Repr::emit`] writes an unfragmented packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Address,
    /// Destination address.
    pub dst_addr: Address,
    /// The payload's protocol.
    pub protocol: Protocol,
    /// The payload length (at most [`MAX_PACKET_LEN`] − 20 to be emitted).
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// Differentiated services code point (6 bits).
    pub dscp: u8,
    /// ECN codepoint (2 bits).
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// The don't-fragment flag (set on TCP segments for path MTU discovery, RFC 1191).
    pub dont_frag: bool,
}

impl Repr {
    /// Parses the header of a packet that is not a fragment.
    ///
    /// # Errors
    /// The errors of [`Packet::check_len`]; [`Error::Unrecognized`] if the version is not 4;
    /// [`Error::Malformed`] if the reserved flag is set; [`Error::Checksum`] if the policy verifies
    /// and the checksum is wrong; [`Error::Fragmented`] for a fragment.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>, policy: ChecksumPolicy) -> Result<Self> {
        let repr = Self::parse_header(packet, policy)?;
        if packet.is_fragment() {
            return Err(Error::Fragmented);
        }
        Ok(repr)
    }

    /// The checks of [`parse`](Self::parse) except the fragment one; `payload_len` is this
    /// packet's.
    ///
    /// The fixed header is read once, as an array (one length check), and every field comes from
    /// it: the checks of [`Packet::check_len`] in its order, then the version, the reserved flag
    /// and the sum. (Through the accessors, each field paid its own bounds check, and the payload
    /// length its slice.)
    #[inline]
    pub(crate) fn parse_header<T: AsRef<[u8]>>(packet: &Packet<T>, policy: ChecksumPolicy) -> Result<Self> {
        let bytes = packet.buffer.as_ref();
        let Some(h) = bytes.first_chunk::<HEADER_LEN>() else {
            return Err(Error::Truncated);
        };
        let header_len = usize::from(h[field::VER_IHL] & 0x0f) * 4;
        let total = usize::from(be16(h, field::LENGTH));
        if header_len < HEADER_LEN || total < header_len {
            return Err(Error::Malformed);
        }
        if bytes.len() < total {
            return Err(Error::Truncated);
        }
        if h[field::VER_IHL] >> 4 != 4 {
            return Err(Error::Unrecognized);
        }
        if be16(h, field::FLAGS_FRAG) & 0x8000 != 0 {
            return Err(Error::Malformed);
        }
        if policy.verify() && !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        Ok(Self::from_header(h, total - header_len))
    }

    /// The fields of the fixed header `h` (whose lengths the caller checked), with `payload_len`.
    #[inline]
    fn from_header(h: &[u8; HEADER_LEN], payload_len: usize) -> Self {
        Self {
            src_addr: addr_at(h, field::SRC_ADDR),
            dst_addr: addr_at(h, field::DST_ADDR),
            protocol: Protocol::from(h[field::PROTOCOL]),
            payload_len,
            ttl: h[field::TTL],
            dscp: h[field::DSCP_ECN] >> 2,
            ecn: h[field::DSCP_ECN] & 0x03,
            ident: be16(h, field::IDENT),
            dont_frag: be16(h, field::FLAGS_FRAG) & FLAG_DF != 0,
        }
    }

    /// Parses the original-datagram header quoted in an ICMP error (RFC 792): the header must be
    /// complete, but the quoted payload is cut short, so the total length is not checked against the
    /// buffer, the checksum is not verified, and fragments are accepted (their fragment fields are
    /// dropped). Returns the header and the quoted payload bytes that follow it.
    pub(crate) fn parse_quoted(bytes: &[u8]) -> Result<(Self, &[u8])> {
        let packet = Packet::new_unchecked(bytes);
        let Some(h) = bytes.first_chunk::<HEADER_LEN>() else {
            return Err(Error::Truncated);
        };
        let header_len = packet.header_len();
        if header_len < HEADER_LEN || usize::from(packet.total_len()) < header_len {
            return Err(Error::Malformed);
        }
        if packet.version() != 4 {
            return Err(Error::Unrecognized);
        }
        let rest = bytes.get(header_len..).ok_or(Error::Truncated)?;
        let payload_len = usize::from(packet.total_len()) - header_len;
        Ok((Self::from_header(h, payload_len), rest))
    }

    /// The header length emitted: 20.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The packet length: header and payload.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header (no options, not a fragment, checksum filled); the payload is left alone.
    ///
    /// # Panics
    /// If the buffer is shorter than the header, or `payload_len` exceeds 65515 (caller bugs, not
    /// input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let total = u16::try_from(self.buffer_len()).expect("IPv4 payload_len at most 65515");
        self.emit_header(packet, total, false, 0);
    }

    /// Writes the header with the given total length and fragment fields, and fills the checksum.
    pub(crate) fn emit_header<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        total_len: u16,
        more_frags: bool,
        frag_offset: u16,
    ) {
        // The header as three big-endian words, built in registers, its checksum summed from the
        // same words, and stored whole. Written a field at a time and summed back from memory (as
        // `Packet::fill_checksum` does), the sum's 8-byte loads wait for the narrow stores to
        // retire (a store-to-load forward fails): a third of this function's time.
        let first = (0x45_u64 << 56)
            | (u64::from(dscp_ecn(self.dscp, self.ecn)) << 48)
            | (u64::from(total_len) << 32)
            | (u64::from(self.ident) << 16)
            | u64::from(flags_frag(self.dont_frag, more_frags, frag_offset));
        let ttl_protocol = (u32::from(self.ttl) << 24) | (u32::from(u8::from(self.protocol)) << 16);
        let (src, dst) = (u32::from(self.src_addr), u32::from(self.dst_addr));
        // One's-complement sums of 32-bit halves fold to the sum of the 16-bit words.
        let sum = checksum::fold(
            (first >> 32) + (first & 0xffff_ffff) + u64::from(ttl_protocol) + u64::from(src) + u64::from(dst),
        );
        let second = (u64::from(ttl_protocol | u32::from(checksum::finish(sum))) << 32) | u64::from(src);
        let header = &mut packet.buffer.as_mut()[..HEADER_LEN];
        header[..8].copy_from_slice(&first.to_be_bytes());
        header[8..16].copy_from_slice(&second.to_be_bytes());
        header[16..].copy_from_slice(&dst.to_be_bytes());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // An IPv4 header as Linux sends it for a SYN with options: 10.0.0.2 -> 10.0.0.1, TCP, DF, TTL
    // 64, total length 60. Assembled by hand; the checksum 0x0a74 was computed independently
    // (Python).
    pub(crate) const SYN_HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0x0a, 0x74, 0x0a, 0x00, 0x00, 0x02, 0x0a,
        0x00, 0x00, 0x01,
    ];

    fn syn_packet() -> Vec<u8> {
        let mut v = SYN_HEADER.to_vec();
        v.resize(60, 0);
        v
    }

    #[test]
    fn parse_known_header() {
        let bytes = syn_packet();
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 60);
        assert_eq!(p.ident(), 0x1c46);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), Protocol::Tcp);
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 40);
        let repr = Repr::parse(&p, ChecksumPolicy::Verify).unwrap();
        assert_eq!(
            repr,
            Repr {
                src_addr: Address::new(10, 0, 0, 2),
                dst_addr: Address::new(10, 0, 0, 1),
                protocol: Protocol::Tcp,
                payload_len: 40,
                ttl: 64,
                dscp: 0,
                ecn: 0,
                ident: 0x1c46,
                dont_frag: true,
            }
        );
        let mut out = [0u8; 60];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..20], SYN_HEADER, "emit reproduces Linux's header byte for byte");
    }

    #[test]
    fn padding_and_options() {
        // IHL 6 (one option word: NOP NOP NOP EOL), total 28, plus 10 bytes of Ethernet padding.
        let mut bytes = [0u8; 38];
        bytes[..20].copy_from_slice(&SYN_HEADER);
        bytes[0] = 0x46;
        bytes[2..4].copy_from_slice(&28u16.to_be_bytes());
        bytes[20..24].copy_from_slice(&[1, 1, 1, 0]);
        bytes[24..28].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let mut p = Packet::new_checked(&mut bytes[..]).unwrap();
        p.fill_checksum();
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        let repr = Repr::parse(&p, ChecksumPolicy::Verify).unwrap();
        assert_eq!(repr.payload_len, 4);
    }

    #[test]
    fn field_errors() {
        let good = syn_packet();
        let check = |f: &dyn Fn(&mut Vec<u8>), fix: bool| {
            let mut b = good.clone();
            f(&mut b);
            let mut p = Packet::new_unchecked(&mut b[..]);
            if fix && p.check_len().is_ok() {
                p.fill_checksum();
            }
            let p = Packet::new_unchecked(&b[..]);
            Repr::parse(&p, ChecksumPolicy::Verify)
        };
        for len in 0..20 {
            assert_eq!(Packet::new_checked(&good[..len]).unwrap_err(), Error::Truncated);
        }
        assert_eq!(Packet::new_checked(&good[..59]).unwrap_err(), Error::Truncated, "short of total");
        assert_eq!(check(&|b| b[0] = 0x44, true), Err(Error::Malformed), "IHL 4");
        assert!(check(&|b| b[0] = 0x4f, true).is_ok(), "IHL 15, total 60: all header");
        let ihl_past_total = |b: &mut Vec<u8>| {
            b[0] = 0x4f;
            b[2..4].copy_from_slice(&[0, 40]);
        };
        assert_eq!(check(&ihl_past_total, true), Err(Error::Malformed), "IHL 15 > total 40");
        assert_eq!(check(&|b| b[2..4].copy_from_slice(&[0, 19]), true), Err(Error::Malformed));
        assert_eq!(check(&|b| b[2..4].copy_from_slice(&[0, 61]), true), Err(Error::Truncated));
        assert_eq!(check(&|b| b[0] = 0x65, true), Err(Error::Unrecognized), "version 6");
        assert_eq!(check(&|b| b[6] |= 0x80, true), Err(Error::Malformed), "reserved flag");
        assert_eq!(check(&|b| b[8] = 63, false), Err(Error::Checksum));
        assert_eq!(check(&|b| b[6] |= 0x20, true), Err(Error::Fragmented), "MF");
        assert_eq!(check(&|b| b[7] = 1, true), Err(Error::Fragmented), "offset");
        // Trust skips the checksum only.
        let mut b = good.clone();
        b[8] = 63;
        assert!(Repr::parse(&Packet::new_unchecked(&b[..]), ChecksumPolicy::Trust).is_ok());
    }

    #[test]
    fn ttl_decrement_incremental() {
        let mut bytes = syn_packet();
        let mut p = Packet::new_checked(&mut bytes[..]).unwrap();
        for ttl in (0..64).rev() {
            p.set_ttl_incremental(ttl);
            assert!(p.verify_checksum(), "ttl {ttl}");
            let incremental = p.checksum();
            p.fill_checksum();
            assert_eq!(p.checksum(), incremental);
        }
    }

    #[test]
    fn protocol_numbers() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(Protocol::from(v)), v);
        }
        let named = [(0, Protocol::HopByHop), (43, Protocol::Ipv6Route), (44, Protocol::Ipv6Frag)];
        let named = named.into_iter().chain([
            (58, Protocol::Icmpv6),
            (59, Protocol::Ipv6NoNxt),
            (60, Protocol::Ipv6Opts),
        ]);
        for (v, p) in named {
            assert_eq!(Protocol::from(v), p);
        }
    }

    #[test]
    fn cidr() {
        let c = Cidr::new(Address::new(192, 168, 7, 9), 24).unwrap();
        assert_eq!(c.netmask(), Address::new(255, 255, 255, 0));
        assert_eq!(c.network(), Address::new(192, 168, 7, 0));
        assert_eq!(c.broadcast(), Some(Address::new(192, 168, 7, 255)));
        assert!(c.contains_addr(Address::new(192, 168, 7, 200)));
        assert!(!c.contains_addr(Address::new(192, 168, 8, 1)));
        assert_eq!(c.to_string(), "192.168.7.9/24");
        assert!(Cidr::new(Address::UNSPECIFIED, 33).is_none());
        let all = Cidr::new(Address::UNSPECIFIED, 0).unwrap();
        assert!(all.contains_addr(Address::BROADCAST));
        assert_eq!(all.netmask(), Address::UNSPECIFIED);
        let host = Cidr::new(Address::new(10, 0, 0, 1), 32).unwrap();
        assert!(host.contains_addr(Address::new(10, 0, 0, 1)));
        assert!(!host.contains_addr(Address::new(10, 0, 0, 2)));
        assert_eq!(host.broadcast(), None);
    }

    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            any::<u8>(),
            0usize..=65515,
            any::<u8>(),
            0u8..64,
            0u8..4,
            any::<u16>(),
            any::<bool>(),
        )
            .prop_map(|(s, d, p, payload_len, ttl, dscp, ecn, ident, dont_frag)| Repr {
                src_addr: s.into(),
                dst_addr: d.into(),
                protocol: Protocol::from(p),
                payload_len,
                ttl,
                dscp,
                ecn,
                ident,
                dont_frag,
            })
    }

    proptest! {
        #[test]
        fn round_trip(repr in arb_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            let p = Packet::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p, ChecksumPolicy::Verify).unwrap(), repr);
        }

        #[test]
        fn no_panic(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = (p.version(), p.dscp(), p.ecn(), p.ident(), p.frag_offset(), p.options());
                prop_assert!(p.header_len() + p.payload().len() <= bytes.len());
            }
            let _ = Repr::parse(&Packet::new_unchecked(&bytes[..]), ChecksumPolicy::Trust);
            let _ = Repr::parse_quoted(&bytes);
        }

        /// `parse_header` reads the fixed header as one array; it answers as the accessors do,
        /// error for error and field for field: mostly valid headers with one byte changed, and
        /// any bytes.
        #[test]
        fn parse_header_agrees_with_the_accessors(
            repr in arb_repr(),
            flip in proptest::option::of((0..24usize, any::<u8>())),
            cut in proptest::option::of(1..24usize),
            noise in proptest::collection::vec(any::<u8>(), 0..48),
        ) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            if let Some((at, v)) = flip && at < bytes.len() {
                bytes[at] ^= v;
            }
            bytes.truncate(bytes.len().saturating_sub(cut.unwrap_or(0)));
            for case in [&bytes[..], &noise[..]] {
                for policy in [ChecksumPolicy::Verify, ChecksumPolicy::Trust] {
                    let p = Packet::new_unchecked(case);
                    prop_assert_eq!(Repr::parse_header(&p, policy), reference_parse_header(&p, policy));
                }
            }
        }
    }

    /// `parse_header` written with the accessors, as it was before it read the header at once.
    fn reference_parse_header(packet: &Packet<&[u8]>, policy: ChecksumPolicy) -> Result<Repr> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(Error::Unrecognized);
        }
        if packet.reserved_flag() {
            return Err(Error::Malformed);
        }
        if policy.verify() && !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: packet.payload().len(),
            ttl: packet.ttl(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
        })
    }
}
