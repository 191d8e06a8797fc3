//! IPv6 (RFC 8200): the fixed header, its extension headers ([`ext`]), fragment reassembly
//! ([`reassembly`]) and address helpers ([`addr`]).
//!
//! Layout of the fixed header (40 bytes): version (4 bits), traffic class (8 bits: DSCP and ECN, RFC
//! 2474 / RFC 3168), flow label (20 bits, RFC 6437), payload length (2: everything after the fixed
//! header, extension headers included), next header (1), hop limit (1), source and destination
//! addresses (16 each). There is no header checksum: TCP, UDP and ICMPv6 cover the addresses with
//! the pseudo-header of RFC 8200 §8.1 ([`checksum::pseudo_header_v6`](super::checksum::pseudo_header_v6)).
//!
//! **Padding**: the payload is bounded by the payload length, so Ethernet padding after the packet
//! is ignored. **Jumbograms** (RFC 2675, payload length zero with a Jumbo Payload option) are not
//! supported: the option is refused by the extension-header walk.

pub mod addr;
pub mod ext;
pub mod reassembly;

use std::net::Ipv6Addr;

pub use addr::{Cidr, ParseCidrError};
pub use ext::{FragmentHeader, Walk};

use super::ipv4::Protocol;
use super::{Error, Result, be16, be32, put16, put32};

/// An IPv6 address (the standard library's).
pub type Address = Ipv6Addr;

mod field {
    pub(super) const VER_TC_FLOW: usize = 0;
    pub(super) const LENGTH: usize = 4;
    pub(super) const NEXT_HEADER: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SRC_ADDR: usize = 8;
    pub(super) const DST_ADDR: usize = 24;
}

/// The length of the fixed header.
pub const HEADER_LEN: usize = 40;
/// The largest payload length (without jumbograms).
pub const MAX_PAYLOAD_LEN: usize = 65535;
/// The minimum link MTU every IPv6 link has (RFC 8200 §5).
pub const MIN_MTU: usize = 1280;

/// A zero-copy view of an IPv6 packet.
///
/// **No-panic contract:** after [`check_len`](Self::check_len) has succeeded, no accessor panics,
/// whatever the bytes are, as long as the payload length is not changed through setters afterwards.
/// [`check_len`](Self::check_len) checks the lengths only; [`Repr::parse`] also checks the version
/// and walks the extension headers.
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

    /// Checks that the buffer holds the fixed header and the payload length (more is allowed:
    /// padding).
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + usize::from(self.payload_len()) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version field (6 for IPv6).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }

    /// The traffic class (DSCP in the high 6 bits, ECN in the low 2).
    pub fn traffic_class(&self) -> u8 {
        let b = be16(self.buffer.as_ref(), field::VER_TC_FLOW);
        u8::try_from((b >> 4) & 0xff).unwrap_or(0)
    }

    /// The flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }

    /// The payload length: the bytes after the fixed header, extension headers included.
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The Next Header of the fixed header (an extension header or the upper layer).
    pub fn next_header(&self) -> Protocol {
        Protocol::from(self.buffer.as_ref()[field::NEXT_HEADER])
    }

    /// The hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// The source address.
    pub fn src_addr(&self) -> Address {
        addr_at(self.buffer.as_ref(), field::SRC_ADDR)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Address {
        addr_at(self.buffer.as_ref(), field::DST_ADDR)
    }

    /// The payload: extension headers and upper layer, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }

    /// Walks the extension headers of the payload ([`ext::walk`]).
    ///
    /// # Errors
    /// As [`ext::walk`].
    pub fn walk(&self) -> Result<Walk> {
        ext::walk(self.next_header(), self.payload())
    }
}

/// The address in the 16 bytes at `at` (callers index within lengths they checked).
pub(crate) fn addr_at(b: &[u8], at: usize) -> Address {
    let mut octets = [0u8; 16];
    octets.copy_from_slice(&b[at..at + 16]);
    Address::from(octets)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version, traffic class and flow label (the low 20 bits of `flow_label`).
    pub fn set_version_tc_flow(&mut self, version: u8, traffic_class: u8, flow_label: u32) {
        let v =
            (u32::from(version & 0x0f) << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        put32(self.buffer.as_mut(), field::VER_TC_FLOW, v);
    }

    /// Sets the payload length (voids [`check_len`](Self::check_len)).
    pub fn set_payload_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Sets the Next Header of the fixed header.
    pub fn set_next_header(&mut self, p: Protocol) {
        self.buffer.as_mut()[field::NEXT_HEADER] = p.into();
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Address) {
        self.buffer.as_mut()[field::SRC_ADDR..field::SRC_ADDR + 16].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Address) {
        self.buffer.as_mut()[field::DST_ADDR..field::DST_ADDR + 16].copy_from_slice(&a.octets());
    }

    /// The payload, mutably (up to the payload length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The meaning of an IPv6 packet that is not a fragment, its extension headers walked.
///
/// The extension headers themselves are not represented: [`Repr::parse`] walks them and
/// [`Repr::emit`] writes none, so `next_header` is the upper-layer protocol and `payload_len` the
/// upper-layer length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Address,
    /// Destination address.
    pub dst_addr: Address,
    /// The upper-layer protocol, after the extension headers.
    pub next_header: Protocol,
    /// The upper-layer length (at most [`MAX_PAYLOAD_LEN`] to be emitted).
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Repr {
    /// Parses a packet that is not a fragment (an atomic fragment, RFC 6946, is one).
    ///
    /// # Errors
    /// As [`parse_with_payload`](Self::parse_with_payload).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Self> {
        Self::parse_with_payload(packet).map(|(repr, _)| repr)
    }

    /// Parses a packet that is not a fragment and returns the upper-layer payload too.
    ///
    /// # Errors
    /// The errors of [`Packet::check_len`]; [`Error::Unrecognized`] if the version is not 6; the
    /// errors of [`ext::walk`]; [`Error::Fragmented`] for a fragment.
    pub fn parse_with_payload<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<(Self, &[u8])> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(Error::Unrecognized);
        }
        let walk = packet.walk()?;
        if walk.fragment.is_some_and(|f| f.is_fragment()) {
            return Err(Error::Fragmented);
        }
        let upper = &packet.payload()[walk.offset..];
        Ok((Self::from_fields(packet, walk.protocol, upper.len()), upper))
    }

    fn from_fields<T: AsRef<[u8]>>(packet: &Packet<T>, next_header: Protocol, payload_len: usize) -> Self {
        Self {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header,
            payload_len,
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        }
    }

    /// Parses the invoking packet quoted in an ICMPv6 error (RFC 4443 §2.4 (c): as much of it as
    /// fits in the minimum MTU): the fixed header must be complete and its extension headers must
    /// be walkable within the quote, but the payload is cut short, so the payload length is not
    /// checked against the buffer. A first fragment is accepted; a later one is
    /// [`Error::Fragmented`] (its data is not an upper-layer header). Returns the header, with
    /// `payload_len` the original upper-layer length, and the quoted upper-layer bytes.
    pub(crate) fn parse_quoted(bytes: &[u8]) -> Result<(Self, &[u8])> {
        let packet = Packet::new_unchecked(bytes);
        if bytes.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if packet.version() != 6 {
            return Err(Error::Unrecognized);
        }
        let original = usize::from(packet.payload_len());
        let quoted = &bytes[HEADER_LEN..HEADER_LEN + original.min(bytes.len() - HEADER_LEN)];
        let mut walk = ext::walk(packet.next_header(), quoted)?;
        if let Some(fragment) = walk.fragment.filter(FragmentHeader::is_fragment) {
            if fragment.offset != 0 {
                return Err(Error::Fragmented);
            }
            walk = ext::walk_on(walk, quoted)?;
        }
        let repr = Self::from_fields(&packet, walk.protocol, original - walk.offset);
        Ok((repr, &quoted[walk.offset..]))
    }

    /// The header length emitted: 40.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The packet length: header and payload.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the fixed header (no extension headers); the payload is left alone.
    ///
    /// # Panics
    /// If the buffer is shorter than the header, or `payload_len` exceeds 65535 (caller bugs, not
    /// input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let len = u16::try_from(self.payload_len).expect("IPv6 payload_len at most 65535");
        packet.set_version_tc_flow(6, self.traffic_class, self.flow_label);
        packet.set_payload_len(len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The IPv6 header of a TCP SYN as Linux sends it: 2001:db8::2 -> 2001:db8::1, traffic class 0,
    /// flow label 0x9b6f1 (Linux's auto flow labels), payload 40, hop limit 64.
    pub(crate) const SYN_HEADER: [u8; 40] = [
        0x60, 0x09, 0xb6, 0xf1, 0x00, 0x28, 0x06, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
    ];

    pub(crate) fn syn_repr() -> Repr {
        Repr {
            src_addr: "2001:db8::2".parse().unwrap(),
            dst_addr: "2001:db8::1".parse().unwrap(),
            next_header: Protocol::Tcp,
            payload_len: 40,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0x9b6f1,
        }
    }

    #[test]
    fn parse_known_header() {
        let mut bytes = SYN_HEADER.to_vec();
        bytes.resize(80 + 6, 0xee);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!((p.version(), p.traffic_class(), p.flow_label()), (6, 0, 0x9b6f1));
        assert_eq!((p.payload_len(), p.next_header(), p.hop_limit()), (40, Protocol::Tcp, 64));
        assert_eq!(p.payload().len(), 40, "Ethernet padding is not payload");
        let (repr, payload) = Repr::parse_with_payload(&p).unwrap();
        assert_eq!(repr, syn_repr());
        assert_eq!(payload.len(), 40);
        let mut out = [0u8; 80];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..40], SYN_HEADER, "emit reproduces the header byte for byte");
    }

    #[test]
    fn traffic_class_and_flow_label_bits() {
        let mut b = [0u8; 40];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_tc_flow(6, 0xb9, 0xfff_ffff);
        assert_eq!(b[..4], [0x6b, 0x9f, 0xff, 0xff]);
        let p = Packet::new_unchecked(&b[..]);
        assert_eq!((p.version(), p.traffic_class(), p.flow_label()), (6, 0xb9, 0xf_ffff));
    }

    #[test]
    fn errors() {
        let mut good = SYN_HEADER.to_vec();
        good.resize(80, 0);
        for len in 0..80 {
            assert_eq!(Packet::new_checked(&good[..len]).unwrap_err(), Error::Truncated, "{len}");
            assert_eq!(Repr::parse(&Packet::new_unchecked(&good[..len])), Err(Error::Truncated));
        }
        let mut b = good.clone();
        b[0] = 0x40;
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Err(Error::Unrecognized), "version 4");
        // A real fragment is refused; an atomic one is a whole packet (RFC 6946).
        let mut b = good.clone();
        b[6] = 44;
        b[40..48].copy_from_slice(&[6, 0, 0, 1, 0, 0, 0, 9]);
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Err(Error::Fragmented));
        b[43] = 0;
        let p = Packet::new_unchecked(&b[..]);
        let (repr, payload) = Repr::parse_with_payload(&p).unwrap();
        assert_eq!((repr.next_header, repr.payload_len, payload.len()), (Protocol::Tcp, 32, 32));
        // Extension-header errors come through.
        b[40..48].copy_from_slice(&[6, 0, 0x8e, 0, 0, 0, 0, 0]);
        b[6] = 60;
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Err(Error::Unrecognized));
    }

    #[test]
    fn quoted() {
        // A quote cut after 8 bytes of TCP.
        let mut b = SYN_HEADER.to_vec();
        b.extend([0x9c, 0x40, 0, 80, 0, 0, 0, 1]);
        let (repr, rest) = Repr::parse_quoted(&b).unwrap();
        assert_eq!(repr, syn_repr());
        assert_eq!(rest.len(), 8);
        for len in 0..40 {
            assert_eq!(Repr::parse_quoted(&b[..len]).unwrap_err(), Error::Truncated);
        }
        // A later fragment cannot be matched to a connection.
        let mut f = SYN_HEADER.to_vec();
        f[6] = 44;
        f.extend([6, 0, 0, 8, 0, 0, 0, 9]);
        assert_eq!(Repr::parse_quoted(&f), Err(Error::Fragmented));
        f[43] = 1;
        assert_eq!(Repr::parse_quoted(&f).unwrap().0.payload_len, 32, "a first fragment is fine");
    }

    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> + Clone {
        (any::<u128>(), any::<u128>(), any::<u8>(), 0usize..=2000, any::<u8>(), any::<u8>(), 0u32..1 << 20)
            .prop_filter_map("an extension header would be walked", |(s, d, nh, len, hl, tc, fl)| {
                let next_header = Protocol::from(nh);
                let ext = [Protocol::HopByHop, Protocol::Ipv6Route, Protocol::Ipv6Frag, Protocol::Ipv6Opts];
                (!ext.contains(&next_header)).then(|| Repr {
                    src_addr: Address::from_bits(s),
                    dst_addr: Address::from_bits(d),
                    next_header,
                    payload_len: len,
                    hop_limit: hl,
                    traffic_class: tc,
                    flow_label: fl,
                })
            })
    }

    proptest! {
        #[test]
        fn round_trip(repr in arb_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            let p = Packet::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p).unwrap(), repr);
        }

        #[test]
        fn no_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = (p.version(), p.traffic_class(), p.flow_label(), p.src_addr(), p.dst_addr(), p.walk());
                prop_assert!(HEADER_LEN + p.payload().len() <= bytes.len());
            }
            if let Ok((repr, payload)) = Repr::parse_with_payload(&Packet::new_unchecked(&bytes[..])) {
                prop_assert_eq!(repr.payload_len, payload.len());
            }
            let _ = Repr::parse_quoted(&bytes);
        }
    }
}
