//! ARP, the Address Resolution Protocol (RFC 826), for Ethernet hardware and IPv4 protocol
//! addresses.
//!
//! Layout: hardware type (2), protocol type (2), hardware address length (1), protocol address
//! length (1), operation (2), then sender hardware address, sender protocol address, target hardware
//! address and target protocol address, of the lengths the header gives. The view handles any
//! lengths; [`Repr`] only Ethernet (hardware type 1, length 6) and IPv4 (`0x0800`, length 4) with the
//! request and reply operations, which is all this stack speaks.

use std::net::Ipv4Addr;

use super::ethernet::Address as EthernetAddress;
use super::{Error, Result, be16, put16};

mod field {
    pub(super) const HTYPE: usize = 0;
    pub(super) const PTYPE: usize = 2;
    pub(super) const HLEN: usize = 4;
    pub(super) const PLEN: usize = 5;
    pub(super) const OPER: usize = 6;
    /// Where the addresses start.
    pub(super) const SHA: usize = 8;
}

/// The fixed part of the header.
const FIXED_LEN: usize = 8;
/// Hardware type Ethernet.
const HTYPE_ETHERNET: u16 = 1;
/// Protocol type IPv4.
const PTYPE_IPV4: u16 = 0x0800;
/// The length of an Ethernet/IPv4 ARP packet.
pub const ETHERNET_IPV4_LEN: usize = FIXED_LEN + 2 * (6 + 4);

/// An ARP operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A request, 1.
    Request,
    /// A reply, 2.
    Reply,
    /// Any other value (RARP, InARP, ...).
    Unknown(u16),
}

impl From<u16> for Operation {
    fn from(v: u16) -> Self {
        match v {
            1 => Self::Request,
            2 => Self::Reply,
            other => Self::Unknown(other),
        }
    }
}

impl From<Operation> for u16 {
    fn from(op: Operation) -> Self {
        match op {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Unknown(v) => v,
        }
    }
}

/// A zero-copy view of an ARP packet.
///
/// **No-panic contract:** after [`check_len`](Self::check_len) has succeeded, no accessor panics,
/// whatever the bytes are, unless the address lengths are changed through setters afterwards.
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

    /// Checks that the buffer holds the fixed header and the four addresses of the lengths it gives.
    /// Bytes after them (Ethernet padding) are allowed.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < FIXED_LEN || b.len() < self.total_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The length of header and addresses, from the two length fields (at most 8 + 2 * 510).
    fn total_len(&self) -> usize {
        let b = self.buffer.as_ref();
        match (b.get(field::HLEN), b.get(field::PLEN)) {
            (Some(&h), Some(&p)) => FIXED_LEN + 2 * (usize::from(h) + usize::from(p)),
            _ => usize::MAX,
        }
    }

    /// The hardware type (1 for Ethernet).
    pub fn hardware_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HTYPE)
    }

    /// The protocol type (an EtherType; `0x0800` for IPv4).
    pub fn protocol_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PTYPE)
    }

    /// The hardware address length.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// The protocol address length.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// The operation.
    pub fn operation(&self) -> Operation {
        Operation::from(be16(self.buffer.as_ref(), field::OPER))
    }

    fn hlen(&self) -> usize {
        usize::from(self.hardware_len())
    }

    fn plen(&self) -> usize {
        usize::from(self.protocol_len())
    }

    /// The sender hardware address.
    pub fn source_hardware_addr(&self) -> &[u8] {
        let start = field::SHA;
        &self.buffer.as_ref()[start..start + self.hlen()]
    }

    /// The sender protocol address.
    pub fn source_protocol_addr(&self) -> &[u8] {
        let start = field::SHA + self.hlen();
        &self.buffer.as_ref()[start..start + self.plen()]
    }

    /// The target hardware address.
    pub fn target_hardware_addr(&self) -> &[u8] {
        let start = field::SHA + self.hlen() + self.plen();
        &self.buffer.as_ref()[start..start + self.hlen()]
    }

    /// The target protocol address.
    pub fn target_protocol_addr(&self) -> &[u8] {
        let start = field::SHA + 2 * self.hlen() + self.plen();
        &self.buffer.as_ref()[start..start + self.plen()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the hardware type.
    pub fn set_hardware_type(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::HTYPE, v);
    }

    /// Sets the protocol type.
    pub fn set_protocol_type(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::PTYPE, v);
    }

    /// Sets the hardware address length (voids [`check_len`](Self::check_len)).
    pub fn set_hardware_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::HLEN] = v;
    }

    /// Sets the protocol address length (voids [`check_len`](Self::check_len)).
    pub fn set_protocol_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::PLEN] = v;
    }

    /// Sets the operation.
    pub fn set_operation(&mut self, op: Operation) {
        put16(self.buffer.as_mut(), field::OPER, op.into());
    }

    /// Writes the four addresses, whose lengths must match the length fields.
    fn set_addrs(&mut self, sha: &[u8], spa: &[u8], tha: &[u8], tpa: &[u8]) {
        let mut at = field::SHA;
        let b = self.buffer.as_mut();
        for a in [sha, spa, tha, tpa] {
            b[at..at + a.len()].copy_from_slice(a);
            at += a.len();
        }
    }
}

/// The meaning of an Ethernet/IPv4 ARP request or reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Request or reply (never [`Operation::Unknown`]: parse refuses it and emit writes what it is
    /// given).
    pub operation: Operation,
    /// The sender's hardware address.
    pub source_hardware_addr: EthernetAddress,
    /// The sender's IPv4 address.
    pub source_protocol_addr: Ipv4Addr,
    /// The target's hardware address (zero in a request).
    pub target_hardware_addr: EthernetAddress,
    /// The target's IPv4 address.
    pub target_protocol_addr: Ipv4Addr,
}

impl Repr {
    /// Parses an ARP packet.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is short; [`Error::Unrecognized`] for hardware or protocol
    /// types or lengths other than Ethernet/IPv4, or an operation other than request or reply.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Self> {
        packet.check_len()?;
        if packet.hardware_type() != HTYPE_ETHERNET
            || packet.protocol_type() != PTYPE_IPV4
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
        {
            return Err(Error::Unrecognized);
        }
        let operation = packet.operation();
        if let Operation::Unknown(_) = operation {
            return Err(Error::Unrecognized);
        }
        let hw = |s: &[u8]| EthernetAddress::from_bytes(s).ok_or(Error::Truncated);
        let ip = |s: &[u8]| <[u8; 4]>::try_from(s).map(Ipv4Addr::from).map_err(|_| Error::Truncated);
        Ok(Self {
            operation,
            source_hardware_addr: hw(packet.source_hardware_addr())?,
            source_protocol_addr: ip(packet.source_protocol_addr())?,
            target_hardware_addr: hw(packet.target_hardware_addr())?,
            target_protocol_addr: ip(packet.target_protocol_addr())?,
        })
    }

    /// The packet length: 28 bytes.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        ETHERNET_IPV4_LEN
    }

    /// Writes the packet.
    ///
    /// # Panics
    /// If the buffer is shorter than [`buffer_len`](Self::buffer_len) (a caller bug, not input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_hardware_type(HTYPE_ETHERNET);
        packet.set_protocol_type(PTYPE_IPV4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_addrs(
            &self.source_hardware_addr.0,
            &self.source_protocol_addr.octets(),
            &self.target_hardware_addr.0,
            &self.target_protocol_addr.octets(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // An ARP request as Linux sends it (ARP payload only, after the Ethernet header), assembled by
    // hand field by field from RFC 826: "who-has 10.0.0.1 tell 10.0.0.2" from 52:54:00:12:34:56.
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x0a, 0x00, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01,
    ];
    // "10.0.0.1 is-at 02:00:00:00:00:01", with the 18 bytes of Ethernet padding a 60-byte frame
    // carries.
    const REPLY_PADDED: [u8; 46] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00,
        0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x0a, 0x00, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0,
    ];

    fn request_repr() -> Repr {
        Repr {
            operation: Operation::Request,
            source_hardware_addr: EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            source_protocol_addr: Ipv4Addr::new(10, 0, 0, 2),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Addr::new(10, 0, 0, 1),
        }
    }

    #[test]
    fn parse_request() {
        let packet = Packet::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(packet.hardware_type(), 1);
        assert_eq!(packet.protocol_type(), 0x0800);
        assert_eq!(packet.operation(), Operation::Request);
        assert_eq!(Repr::parse(&packet).unwrap(), request_repr());
    }

    #[test]
    fn parse_padded_reply() {
        let repr = Repr::parse(&Packet::new_checked(&REPLY_PADDED[..]).unwrap()).unwrap();
        assert_eq!(repr.operation, Operation::Reply);
        assert_eq!(repr.source_hardware_addr, EthernetAddress([2, 0, 0, 0, 0, 1]));
        assert_eq!(repr.source_protocol_addr, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(repr.target_protocol_addr, Ipv4Addr::new(10, 0, 0, 2));
    }

    #[test]
    fn emit_request() {
        let mut bytes = [0xffu8; 28];
        request_repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, REQUEST);
    }

    #[test]
    fn field_errors() {
        for len in 0..28 {
            assert_eq!(Packet::new_checked(&REQUEST[..len]).unwrap_err(), Error::Truncated, "len {len}");
        }
        // Each of hardware type, protocol type, the two lengths and the operation.
        for (at, value) in [(1, 6), (2, 0x86), (4, 8), (5, 16), (7, 3)] {
            let mut bytes = [0u8; 64];
            bytes[..28].copy_from_slice(&REQUEST);
            bytes[at] = value;
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            assert_eq!(Repr::parse(&packet), Err(Error::Unrecognized), "byte {at}");
        }
        // Large address lengths make the view longer than the buffer.
        let mut bytes = REQUEST;
        bytes[4] = 255;
        assert_eq!(Packet::new_checked(&bytes[..]).unwrap_err(), Error::Truncated);
        assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Err(Error::Truncated));
    }

    #[test]
    fn generic_lengths() {
        // Hardware length 2, protocol length 1: addresses at 8, 10, 11, 13.
        let bytes = [0, 9, 0, 9, 2, 1, 0, 1, 0xa1, 0xa2, 0xb1, 0xc1, 0xc2, 0xd1];
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.source_hardware_addr(), &[0xa1, 0xa2]);
        assert_eq!(p.source_protocol_addr(), &[0xb1]);
        assert_eq!(p.target_hardware_addr(), &[0xc1, 0xc2]);
        assert_eq!(p.target_protocol_addr(), &[0xd1]);
    }

    proptest! {
        #[test]
        fn round_trip(
            reply in any::<bool>(),
            sha in any::<[u8; 6]>(), spa in any::<[u8; 4]>(),
            tha in any::<[u8; 6]>(), tpa in any::<[u8; 4]>(),
        ) {
            let repr = Repr {
                operation: if reply { Operation::Reply } else { Operation::Request },
                source_hardware_addr: EthernetAddress(sha),
                source_protocol_addr: spa.into(),
                target_hardware_addr: EthernetAddress(tha),
                target_protocol_addr: tpa.into(),
            };
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap(), repr);
        }

        #[test]
        fn no_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let total = p.source_hardware_addr().len() + p.source_protocol_addr().len()
                    + p.target_hardware_addr().len() + p.target_protocol_addr().len();
                prop_assert!(8 + total <= bytes.len());
                let _ = Repr::parse(&p);
            }
        }
    }
}
