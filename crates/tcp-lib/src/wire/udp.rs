//! UDP (RFC 768) over IPv4 or IPv6.
//!
//! Layout: source port (2), destination port (2), length (2: header and data), checksum (2, over
//! the IPv4 pseudo-header of RFC 768 or the IPv6 one of RFC 8200 §8.1, and the whole datagram),
//! then the data. The length field bounds the datagram: bytes after it (IP or Ethernet padding)
//! are not data.
//!
//! **Zero checksum.** Over IPv4 a zero checksum field means "not computed" (RFC 768) and is
//! accepted unverified; over IPv6 the checksum is mandatory and a zero field is
//! [`Error::Checksum`] (RFC 8200 §8.1). A computed sum of zero is sent as `0xffff` (RFC 768),
//! which verifies the same.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{ChecksumPolicy, Error, Result, be16, checksum, put16};

mod field {
    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const LENGTH: usize = 4;
    pub(super) const CHECKSUM: usize = 6;
}

/// The length of the UDP header.
pub const HEADER_LEN: usize = 8;
const PROTOCOL: u8 = 17;

/// A zero-copy view of a UDP datagram.
///
/// **No-panic contract:** after [`check_len`](Self::check_len) has succeeded, no accessor panics,
/// whatever the bytes are, as long as the length field is not changed through setters afterwards.
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

    /// Checks that the buffer holds the header, that the length field covers the header, and that
    /// the buffer holds the length field's bytes (more is allowed: padding).
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is too short; [`Error::Malformed`] if the length field is
    /// below 8 (over IPv6 a zero length would announce a jumbogram, RFC 2675, which is not
    /// supported).
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let field = usize::from(self.len());
        if field < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < field {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The source port (zero: none, RFC 768).
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// The length field: header and data.
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Whether the datagram carries no data.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The data, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    fn sum(&self, pseudo: u16) -> u16 {
        checksum::combine(&[pseudo, checksum::data(&self.buffer.as_ref()[..usize::from(self.len())])])
    }

    /// Whether the checksum verifies for `src -> dst` over IPv4; a zero field (not computed)
    /// verifies.
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.checksum() == 0
            || self.sum(checksum::pseudo_header_v4(src, dst, PROTOCOL, u32::from(self.len()))) == 0xffff
    }

    /// Whether the checksum verifies for `src -> dst` over IPv6; a zero field does not.
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        self.checksum() != 0
            && self.sum(checksum::pseudo_header_v6(src, dst, PROTOCOL, u32::from(self.len()))) == 0xffff
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

    /// Sets the length field (voids [`check_len`](Self::check_len)).
    pub fn set_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// The data, mutably (up to the length field).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    fn fill(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let sum = checksum::finish(self.sum(pseudo));
        // A computed zero is sent as all ones (RFC 768): zero means "none" over IPv4.
        self.set_checksum(if sum == 0 { 0xffff } else { sum });
    }

    /// Computes and writes the checksum for `src -> dst` over IPv4.
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let pseudo = checksum::pseudo_header_v4(src, dst, PROTOCOL, u32::from(self.len()));
        self.fill(pseudo);
    }

    /// Computes and writes the checksum for `src -> dst` over IPv6.
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        let pseudo = checksum::pseudo_header_v6(src, dst, PROTOCOL, u32::from(self.len()));
        self.fill(pseudo);
    }
}

/// The meaning of a UDP datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// Source port (zero: none).
    pub src_port: u16,
    /// Destination port (never zero).
    pub dst_port: u16,
    /// The data.
    pub payload: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses a datagram received over IPv4 from `src` to `dst`.
    ///
    /// # Errors
    /// The errors of [`Packet::check_len`]; [`Error::Checksum`] if the policy verifies and a
    /// non-zero checksum is wrong; [`Error::Malformed`] for destination port zero.
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
        Self::fields(packet)
    }

    /// Parses a datagram received over IPv6 from `src` to `dst`.
    ///
    /// # Errors
    /// As [`parse`](Self::parse), except that a zero checksum is [`Error::Checksum`] when the policy
    /// verifies (RFC 8200 §8.1).
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
        Self::fields(packet)
    }

    fn fields<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Self> {
        if packet.dst_port() == 0 {
            return Err(Error::Malformed);
        }
        let bytes: &'a [u8] = packet.buffer.as_ref();
        Ok(Self {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload: &bytes[HEADER_LEN..usize::from(packet.len())],
        })
    }

    /// The datagram length: header and data.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    fn emit_unsummed<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        assert_eq!(packet.buffer.as_ref().len(), self.buffer_len(), "UDP buffer length");
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(u16::try_from(self.buffer_len()).expect("UDP datagram at most 65535 bytes"));
        packet.payload_mut().copy_from_slice(self.payload);
    }

    /// Writes the datagram and its checksum for `src -> dst` over IPv4.
    ///
    /// # Panics
    /// If the buffer is not exactly [`buffer_len`](Self::buffer_len) bytes, or that is over 65535
    /// (caller bugs, not input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>, src: Ipv4Addr, dst: Ipv4Addr) {
        self.emit_unsummed(packet);
        packet.fill_checksum(src, dst);
    }

    /// Writes the datagram and its checksum for `src -> dst` over IPv6.
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const DST4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
    const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

    // "hello" from port 5353 to 53, as scapy builds it: checksum 0x92e1 over IPv4 10.0.0.2 ->
    // 10.0.0.1, 0x4b6f over IPv6 2001:db8::2 -> 2001:db8::1.
    const HELLO_V4: [u8; 13] = [0x14, 0xe9, 0x00, 0x35, 0x00, 0x0d, 0x92, 0xe1, b'h', b'e', b'l', b'l', b'o'];
    const HELLO_V6: [u8; 13] = [0x14, 0xe9, 0x00, 0x35, 0x00, 0x0d, 0x4b, 0x6f, b'h', b'e', b'l', b'l', b'o'];

    fn hello() -> Repr<'static> {
        Repr { src_port: 5353, dst_port: 53, payload: b"hello" }
    }

    #[test]
    fn known_datagrams() {
        let p = Packet::new_checked(&HELLO_V4[..]).unwrap();
        assert_eq!(Repr::parse(&p, SRC4, DST4, ChecksumPolicy::Verify), Ok(hello()));
        assert_eq!(Repr::parse(&p, DST4, DST4, ChecksumPolicy::Verify), Err(Error::Checksum));
        let p = Packet::new_checked(&HELLO_V6[..]).unwrap();
        assert_eq!(Repr::parse_v6(&p, SRC6, DST6, ChecksumPolicy::Verify), Ok(hello()));
        assert_eq!(Repr::parse_v6(&p, DST6, DST6, ChecksumPolicy::Verify), Err(Error::Checksum));
        let mut out = [0u8; 13];
        hello().emit(&mut Packet::new_unchecked(&mut out[..]), SRC4, DST4);
        assert_eq!(out, HELLO_V4);
        hello().emit_v6(&mut Packet::new_unchecked(&mut out[..]), SRC6, DST6);
        assert_eq!(out, HELLO_V6);
    }

    #[test]
    fn zero_checksum_ipv4_only() {
        let mut b = HELLO_V4;
        b[6..8].copy_from_slice(&[0, 0]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p, SRC4, DST4, ChecksumPolicy::Verify), Ok(hello()), "IPv4: not computed");
        assert_eq!(Repr::parse_v6(&p, SRC6, DST6, ChecksumPolicy::Verify), Err(Error::Checksum), "IPv6");
        assert_eq!(Repr::parse_v6(&p, SRC6, DST6, ChecksumPolicy::Trust), Ok(hello()));
    }

    #[test]
    fn computed_zero_is_sent_as_ones() {
        // Find data whose sum makes the checksum zero: the two data bytes absorb the rest.
        let mut b = [0x14, 0xe9, 0x00, 0x35, 0x00, 0x0a, 0, 0, 0, 0];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.fill_checksum_v6(SRC6, DST6);
        let c = p.checksum();
        p.payload_mut().copy_from_slice(&c.to_be_bytes());
        p.fill_checksum_v6(SRC6, DST6);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum_v6(SRC6, DST6));
        let p = Packet::new_unchecked(&b[..]);
        assert!(Repr::parse_v6(&p, SRC6, DST6, ChecksumPolicy::Verify).is_ok());
        // The field zero would sum the same (one's-complement zero has two forms), but over IPv6
        // zero means "no checksum", which is refused (RFC 8200 §8.1).
        b[6..8].copy_from_slice(&[0, 0]);
        let p = Packet::new_unchecked(&b[..]);
        assert!(!p.verify_checksum_v6(SRC6, DST6));
        assert_eq!(Repr::parse_v6(&p, SRC6, DST6, ChecksumPolicy::Verify), Err(Error::Checksum));
    }

    #[test]
    fn lengths() {
        for len in 0..HELLO_V4.len() {
            assert!(Packet::new_checked(&HELLO_V4[..len]).is_err(), "{len}");
            let p = Packet::new_unchecked(&HELLO_V4[..len]);
            assert!(Repr::parse(&p, SRC4, DST4, ChecksumPolicy::Trust).is_err());
        }
        // Padding after the length is not data.
        let mut b = HELLO_V4.to_vec();
        b.extend([0; 5]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert_eq!(Repr::parse(&p, SRC4, DST4, ChecksumPolicy::Verify), Ok(hello()));
        // A length field below the header (zero: a jumbogram's) is malformed.
        for field in [0u8, 7] {
            let mut b = HELLO_V6;
            b[4..6].copy_from_slice(&[0, field]);
            assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        }
        let mut b = HELLO_V6;
        b[2..4].copy_from_slice(&[0, 0]);
        assert_eq!(
            Repr::parse_v6(&Packet::new_unchecked(&b[..]), SRC6, DST6, ChecksumPolicy::Trust),
            Err(Error::Malformed)
        );
    }

    proptest! {
        #[test]
        fn round_trip(src in any::<u16>(), dst in 1u16.., payload in proptest::collection::vec(any::<u8>(), 0..300),
                      s6 in any::<u128>(), d6 in any::<u128>(), s4 in any::<u32>(), d4 in any::<u32>()) {
            let repr = Repr { src_port: src, dst_port: dst, payload: &payload };
            let mut out = vec![0u8; repr.buffer_len()];
            let (s6, d6, s4, d4) = (Ipv6Addr::from_bits(s6), Ipv6Addr::from_bits(d6), Ipv4Addr::from_bits(s4), Ipv4Addr::from_bits(d4));
            repr.emit_v6(&mut Packet::new_unchecked(&mut out[..]), s6, d6);
            prop_assert_eq!(Repr::parse_v6(&Packet::new_checked(&out[..]).unwrap(), s6, d6, ChecksumPolicy::Verify), Ok(repr));
            repr.emit(&mut Packet::new_unchecked(&mut out[..]), s4, d4);
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&out[..]).unwrap(), s4, d4, ChecksumPolicy::Verify), Ok(repr));
        }

        #[test]
        fn no_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = (p.src_port(), p.dst_port(), p.checksum(), p.is_empty());
                prop_assert!(HEADER_LEN + p.payload().len() <= bytes.len());
                let _ = (p.verify_checksum(SRC4, DST4), p.verify_checksum_v6(SRC6, DST6));
            }
            let p = Packet::new_unchecked(&bytes[..]);
            let _ = Repr::parse(&p, SRC4, DST4, ChecksumPolicy::Verify);
            let _ = Repr::parse_v6(&p, SRC6, DST6, ChecksumPolicy::Verify);
        }
    }
}
