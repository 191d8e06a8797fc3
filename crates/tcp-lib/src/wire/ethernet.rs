//! Ethernet II frames (IEEE 802.3 clause 3.2.6 "Length/Type" used as a type, RFC 894 for IPv4 over
//! Ethernet) with at most one IEEE 802.1Q VLAN tag.
//!
//! Layout: destination address (6), source address (6), then either the EtherType (2) or the 802.1Q
//! TPID `0x8100` (2), the tag control information (2: priority code point 3 bits, drop eligible 1 bit,
//! VLAN id 12 bits) and the EtherType (2). The payload follows. The frame check sequence is not part
//! of the buffer (NICs strip it). A second tag (`0x8100` again) is not walked: the frame reports
//! [`EtherType::Vlan`] as its EtherType and the stack ignores it. Values below `0x0600` are 802.3
//! lengths, reported as [`EtherType::Unknown`].

use std::fmt;

use super::{Error, Result, be16, put16};

mod field {
    use std::ops::Range;

    pub(super) const DESTINATION: Range<usize> = 0..6;
    pub(super) const SOURCE: Range<usize> = 6..12;
    /// The EtherType of an untagged frame, or the TPID of a tagged one.
    pub(super) const TYPE: usize = 12;
    /// The tag control information of a tagged frame.
    pub(super) const TCI: usize = 14;
    /// The EtherType of a tagged frame.
    pub(super) const INNER_TYPE: usize = 16;
}

/// The length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// The length of an 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;
/// The 802.1Q tag protocol identifier.
const TPID_8021Q: u16 = 0x8100;

/// A 48-bit Ethernet (MAC) address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Address(pub [u8; 6]);

impl Address {
    /// The broadcast address `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: Self = Self([0xff; 6]);

    /// The address in `bytes`, which must be 6 bytes long.
    #[must_use]
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        <[u8; 6]>::try_from(bytes).ok().map(Self)
    }

    /// The address bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// Whether this is the broadcast address.
    #[must_use]
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// Whether the group bit (least significant bit of the first byte) is set; broadcast included.
    #[must_use]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Whether this is an individual (unicast) address.
    #[must_use]
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// Whether the locally administered bit is set.
    #[must_use]
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

/// The device layer's MAC type and this one are the same six bytes.
impl From<netchannel::dev::MacAddr> for Address {
    fn from(mac: netchannel::dev::MacAddr) -> Self {
        Self(mac.0)
    }
}

impl From<Address> for netchannel::dev::MacAddr {
    fn from(mac: Address) -> Self {
        Self(mac.0)
    }
}

/// An EtherType (IEEE registry; the ones this stack uses are named).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// IPv4, `0x0800`.
    Ipv4,
    /// ARP, `0x0806`.
    Arp,
    /// IPv6, `0x86dd`.
    Ipv6,
    /// An 802.1Q tag, `0x8100` (seen as the EtherType only for a second, unwalked tag).
    Vlan,
    /// Any other value (never one of the named ones).
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => Self::Ipv4,
            0x0806 => Self::Arp,
            0x86dd => Self::Ipv6,
            TPID_8021Q => Self::Vlan,
            other => Self::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(t: EtherType) -> Self {
        match t {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Vlan => TPID_8021Q,
            EtherType::Unknown(v) => v,
        }
    }
}

/// The tag control information of an 802.1Q tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point (3 bits; higher bits are ignored on emit).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits; higher bits are ignored on emit).
    pub vid: u16,
}

impl VlanTag {
    /// The tag from its 16-bit TCI.
    #[must_use]
    pub const fn from_tci(tci: u16) -> Self {
        let [hi, _] = tci.to_be_bytes();
        Self { pcp: hi >> 5, dei: tci & 0x1000 != 0, vid: tci & 0x0fff }
    }

    /// The 16-bit TCI.
    #[must_use]
    pub fn tci(&self) -> u16 {
        (u16::from(self.pcp & 0x7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }
}

/// A zero-copy view of an Ethernet II frame.
///
/// **No-panic contract:** after [`check_len`](Self::check_len) (or [`new_checked`](Self::new_checked))
/// has succeeded, no accessor panics whatever the bytes are. Setters that change whether the frame is
/// tagged (writing `0x8100` at offset 12 with [`set_raw_type`](Self::set_raw_type)) void the check;
/// check again before reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps `buffer` without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and [`check_len`](Self::check_len)s it.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer cannot hold the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds the whole header, tag included.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.header_len() { Err(Error::Truncated) } else { Ok(()) }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The bytes at the type offset: the EtherType of an untagged frame, `0x8100` for a tagged one.
    /// Reads zero if the buffer is too short, so [`check_len`](Self::check_len) can use it.
    fn type_or_tpid(&self) -> u16 {
        let b = self.buffer.as_ref();
        match b.get(field::TYPE..field::TYPE + 2) {
            Some(&[hi, lo]) => u16::from_be_bytes([hi, lo]),
            _ => 0,
        }
    }

    /// Whether the frame carries an 802.1Q tag.
    pub fn is_tagged(&self) -> bool {
        self.type_or_tpid() == TPID_8021Q
    }

    /// The header length: 14, or 18 with a tag.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() { HEADER_LEN + VLAN_TAG_LEN } else { HEADER_LEN }
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Address {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        Address(a)
    }

    /// The source address.
    pub fn src_addr(&self) -> Address {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        Address(a)
    }

    /// The 802.1Q tag, if the frame has one.
    pub fn vlan_tag(&self) -> Option<VlanTag> {
        self.is_tagged().then(|| VlanTag::from_tci(be16(self.buffer.as_ref(), field::TCI)))
    }

    /// The EtherType of the payload (after the tag of a tagged frame).
    pub fn ethertype(&self) -> EtherType {
        if self.is_tagged() {
            EtherType::from(be16(self.buffer.as_ref(), field::INNER_TYPE))
        } else {
            EtherType::from(self.type_or_tpid())
        }
    }

    /// The payload: everything after the header (Ethernet padding included: upper layers bound
    /// themselves by their own length fields).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Address) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr.0);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Address) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr.0);
    }

    /// Writes the 16 bits at offset 12 (the EtherType, or `0x8100` to make the frame tagged).
    pub fn set_raw_type(&mut self, value: u16) {
        put16(self.buffer.as_mut(), field::TYPE, value);
    }

    /// Sets the EtherType of the payload, after the tag of a tagged frame.
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        let at = if self.is_tagged() { field::INNER_TYPE } else { field::TYPE };
        put16(self.buffer.as_mut(), at, ethertype.into());
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

/// The meaning of an Ethernet II header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Address,
    /// Destination address.
    pub dst_addr: Address,
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// The payload's EtherType. Must not be [`EtherType::Vlan`] when `vlan` is `None` (that would
    /// emit a tagged frame); with a tag it may be (a second tag, left to the payload).
    pub ethertype: EtherType,
}

impl Repr {
    /// Parses the header of a frame.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the frame is shorter than its header.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<Self> {
        frame.check_len()?;
        Ok(Self {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            vlan: frame.vlan_tag(),
            ethertype: frame.ethertype(),
        })
    }

    /// The header length this representation emits.
    #[must_use]
    pub const fn header_len(&self) -> usize {
        if self.vlan.is_some() { HEADER_LEN + VLAN_TAG_LEN } else { HEADER_LEN }
    }

    /// The frame length for a payload of `payload_len` bytes.
    #[must_use]
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len
    }

    /// Writes the header into `frame`; the payload is left alone.
    ///
    /// # Panics
    /// If the buffer is shorter than [`header_len`](Self::header_len) (a caller bug, not input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        let b = frame.buffer.as_mut();
        match self.vlan {
            Some(tag) => {
                put16(b, field::TYPE, TPID_8021Q);
                put16(b, field::TCI, tag.tci());
                put16(b, field::INNER_TYPE, self.ethertype.into());
            }
            None => put16(b, field::TYPE, self.ethertype.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // A broadcast ARP request frame header as Linux sends it.
    const UNTAGGED: [u8; 16] =
        [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x06, 0xaa, 0xbb];

    #[test]
    fn parse_untagged() {
        let frame = Frame::new_checked(&UNTAGGED[..]).unwrap();
        assert!(!frame.is_tagged());
        assert_eq!(frame.header_len(), 14);
        assert_eq!(frame.dst_addr(), Address::BROADCAST);
        assert_eq!(frame.src_addr(), Address([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]));
        assert_eq!(frame.ethertype(), EtherType::Arp);
        assert_eq!(frame.vlan_tag(), None);
        assert_eq!(frame.payload(), &[0xaa, 0xbb]);
        assert_eq!(frame.src_addr().to_string(), "52:54:00:12:34:56");
        assert!(frame.dst_addr().is_broadcast() && frame.dst_addr().is_multicast());
        assert!(frame.src_addr().is_unicast() && frame.src_addr().is_local());
    }

    #[test]
    fn parse_tagged() {
        let mut bytes = [0u8; 20];
        bytes[12..18].copy_from_slice(&[0x81, 0x00, 0xa0, 0x64, 0x08, 0x00]);
        let frame = Frame::new_checked(&bytes[..]).unwrap();
        assert_eq!(frame.header_len(), 18);
        assert_eq!(frame.vlan_tag(), Some(VlanTag { pcp: 5, dei: false, vid: 100 }));
        assert_eq!(frame.ethertype(), EtherType::Ipv4);
        assert_eq!(frame.payload().len(), 2);
    }

    #[test]
    fn truncated() {
        assert_eq!(Frame::new_checked(&UNTAGGED[..13]).unwrap_err(), Error::Truncated);
        assert!(Frame::new_checked(&UNTAGGED[..14]).is_ok());
        let mut tagged = [0u8; 18];
        tagged[12] = 0x81;
        assert_eq!(Frame::new_checked(&tagged[..17]).unwrap_err(), Error::Truncated);
        assert!(Frame::new_checked(&tagged[..]).is_ok());
        assert_eq!(Repr::parse(&Frame::new_unchecked(&tagged[..16])), Err(Error::Truncated));
    }

    #[test]
    fn ethertype_values() {
        for v in [0x0800u16, 0x0806, 0x86dd, 0x8100, 0x88a8, 0x0000, 0x05dc] {
            assert_eq!(u16::from(EtherType::from(v)), v);
        }
        assert_eq!(EtherType::from(0x88a8), EtherType::Unknown(0x88a8));
    }

    #[test]
    fn emit_bytes() {
        let repr = Repr {
            dst_addr: Address::BROADCAST,
            src_addr: Address([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            vlan: None,
            ethertype: EtherType::Arp,
        };
        let mut bytes = [0xaau8; 16];
        repr.emit(&mut Frame::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[..14], UNTAGGED[..14]);
        assert_eq!(bytes[14], 0xaa, "emit leaves the payload alone");
    }

    fn arb_repr() -> impl Strategy<Value = Repr> {
        (
            any::<[u8; 6]>(),
            any::<[u8; 6]>(),
            proptest::option::of((0u8..8, any::<bool>(), 0u16..4096)),
            any::<u16>(),
        )
            .prop_filter_map("untagged 0x8100", |(s, d, tag, t)| {
                let vlan = tag.map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid });
                let ethertype = EtherType::from(t);
                (vlan.is_some() || ethertype != EtherType::Vlan).then_some(Repr {
                    src_addr: Address(s),
                    dst_addr: Address(d),
                    vlan,
                    ethertype,
                })
            })
    }

    proptest! {
        #[test]
        fn round_trip(repr in arb_repr(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut bytes = vec![0u8; repr.buffer_len(payload.len())];
            let mut frame = Frame::new_unchecked(&mut bytes[..]);
            repr.emit(&mut frame);
            frame.payload_mut().copy_from_slice(&payload);
            let frame = Frame::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(Repr::parse(&frame).unwrap(), repr);
            prop_assert_eq!(frame.payload(), &payload[..]);
        }

        #[test]
        fn no_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(frame) = Frame::new_checked(&bytes[..]) {
                let _ = (frame.dst_addr(), frame.src_addr(), frame.vlan_tag(), frame.ethertype());
                prop_assert!(frame.header_len() + frame.payload().len() == bytes.len());
            }
        }
    }
}
