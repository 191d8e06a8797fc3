//! Wire formats: zero-copy typed views over packet bytes and high-level representations.
//!
//! Every format follows the same pattern (after smoltcp's `wire` module):
//!
//! * A *view* (`Frame<T>`, `Packet<T>`) wraps any `T: AsRef<[u8]>` without copying. Its field
//!   offsets are private constants. [`new_unchecked`](ethernet::Frame::new_unchecked) wraps any
//!   buffer; [`check_len`](ethernet::Frame::check_len) checks that the buffer is long enough for every
//!   field the header says it has; [`new_checked`](ethernet::Frame::new_checked) does both.
//!   **Contract:** once `check_len` has succeeded, no accessor of the view panics, whatever the bytes
//!   are, as long as the length fields are not rewritten through setters afterwards. Accessors do not
//!   validate field *values* (versions, reserved bits, checksums); the `Repr` parsers do.
//! * A *representation* (`Repr`) is the meaning of a header: `Repr::parse` validates a view (it
//!   re-checks lengths itself, so it never panics either, even on an unchecked view) and
//!   `Repr::emit` writes one into a view over a buffer of at least `Repr::buffer_len` bytes.
//!   `Repr::parse(emit(repr)) == repr` for every representation the emitter documents as valid.
//!
//! Multi-byte fields are big-endian on the wire and are read with `from_be_bytes`, like the frame
//! classifier in `netchannel::signature`.
//!
//! Formats: [`ethernet`] (Ethernet II with one optional 802.1Q tag), [`arp`] (Ethernet/IPv4 ARP),
//! [`ipv4`] (with [`ipv4::reassembly`]), [`icmpv4`], [`ipv6`] (with its extension headers,
//! [`ipv6::ext`], [`ipv6::reassembly`] and address helpers, [`ipv6::addr`]), [`icmpv6`] (with
//! Neighbor Discovery, [`ndp`]), [`tcp`] and [`udp`] (each over IPv4 or IPv6), and the Internet
//! [`checksum`] with both pseudo-headers.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use tcp_lib::wire::{
//!     ChecksumPolicy, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Ipv4Packet, Ipv4Repr,
//!     Protocol, SeqNumber, TcpControl, TcpPacket, TcpRepr,
//! };
//!
//! // Build a SYN: emit each layer's header into its slice of one buffer, innermost first.
//! let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1));
//! let tcp = TcpRepr {
//!     src_port: 40000,
//!     dst_port: 80,
//!     control: TcpControl::Syn,
//!     seq_number: SeqNumber::new(1),
//!     window_len: 65535,
//!     max_seg_size: Some(1460),
//!     ..TcpRepr::default()
//! };
//! let ip = Ipv4Repr {
//!     src_addr: src,
//!     dst_addr: dst,
//!     protocol: Protocol::Tcp,
//!     payload_len: tcp.buffer_len(),
//!     ttl: 64,
//!     dscp: 0,
//!     ecn: 0,
//!     ident: 0,
//!     dont_frag: true,
//! };
//! let eth = EthernetRepr {
//!     src_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
//!     dst_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
//!     vlan: None,
//!     ethertype: EtherType::Ipv4,
//! };
//! let mut buf = vec![0u8; eth.buffer_len(ip.buffer_len())];
//! let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
//! eth.emit(&mut frame);
//! let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
//! ip.emit(&mut packet);
//! tcp.emit(&mut TcpPacket::new_unchecked(packet.payload_mut()), src, dst);
//!
//! // Parse it back, layer by layer.
//! let frame = EthernetFrame::new_checked(&buf[..])?;
//! assert_eq!(frame.ethertype(), EtherType::Ipv4);
//! let packet = Ipv4Packet::new_checked(frame.payload())?;
//! let ip_in = Ipv4Repr::parse(&packet, ChecksumPolicy::Verify)?;
//! let segment = TcpPacket::new_checked(packet.payload())?;
//! let tcp_in = TcpRepr::parse(&segment, ip_in.src_addr, ip_in.dst_addr, ChecksumPolicy::Verify)?;
//! assert_eq!((ip_in, tcp_in), (ip, tcp));
//! # Ok::<(), tcp_lib::wire::Error>(())
//! ```
//!
//! IPv6 works the same way; [`Ipv6Repr::parse_with_payload`] walks the extension headers, and the
//! transport `Repr`s have `_v6` twins for the IPv6 pseudo-header:
//!
//! ```
//! use std::net::Ipv6Addr;
//! use tcp_lib::wire::{ChecksumPolicy, Ipv6Packet, Ipv6Repr, Protocol, UdpPacket, UdpRepr};
//!
//! let (src, dst): (Ipv6Addr, Ipv6Addr) = ("2001:db8::2".parse().unwrap(), "2001:db8::1".parse().unwrap());
//! let udp = UdpRepr { src_port: 5353, dst_port: 53, payload: b"hello" };
//! let ip = Ipv6Repr {
//!     src_addr: src,
//!     dst_addr: dst,
//!     next_header: Protocol::Udp,
//!     payload_len: udp.buffer_len(),
//!     hop_limit: 64,
//!     traffic_class: 0,
//!     flow_label: 0,
//! };
//! let mut buf = vec![0u8; ip.buffer_len()];
//! let mut packet = Ipv6Packet::new_unchecked(&mut buf[..]);
//! ip.emit(&mut packet);
//! udp.emit_v6(&mut UdpPacket::new_unchecked(packet.payload_mut()), src, dst);
//!
//! let packet = Ipv6Packet::new_checked(&buf[..])?;
//! let (ip_in, payload) = Ipv6Repr::parse_with_payload(&packet)?;
//! let udp_in = UdpRepr::parse_v6(&UdpPacket::new_checked(payload)?, src, dst, ChecksumPolicy::Verify)?;
//! assert_eq!((ip_in, udp_in), (ip, udp));
//! # Ok::<(), tcp_lib::wire::Error>(())
//! ```

pub mod arp;
pub mod checksum;
pub mod ethernet;
mod fragments;
pub mod gso;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod ndp;
pub mod tcp;
pub mod udp;

pub use arp::{Operation as ArpOperation, Packet as ArpPacket, Repr as ArpRepr};
pub use ethernet::{
    Address as EthernetAddress, EtherType, Frame as EthernetFrame, Repr as EthernetRepr, VlanTag,
};
pub use icmpv4::{Packet as Icmpv4Packet, Repr as Icmpv4Repr};
pub use icmpv6::{Packet as Icmpv6Packet, Repr as Icmpv6Repr};
pub use ipv4::reassembly::FragmentReassembler;
pub use ipv4::{Address as Ipv4Address, Cidr as Ipv4Cidr, Packet as Ipv4Packet, Protocol, Repr as Ipv4Repr};
pub use ipv6::reassembly::FragmentReassembler as Ipv6FragmentReassembler;
pub use ipv6::{Cidr as Ipv6Cidr, Packet as Ipv6Packet, Repr as Ipv6Repr};
pub use ndp::Repr as NdpRepr;
pub use tcp::{Control as TcpControl, Packet as TcpPacket, Repr as TcpRepr, SeqNumber, TcpOption};
pub use udp::{Packet as UdpPacket, Repr as UdpRepr};

/// Why a parser refused a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the header or than a length field says.
    #[error("truncated packet")]
    Truncated,
    /// A field has a value that no valid packet has (a header length below the minimum, a
    /// malformed option, an impossible flag combination).
    #[error("malformed packet")]
    Malformed,
    /// The checksum does not verify.
    #[error("checksum mismatch")]
    Checksum,
    /// A well-formed packet of a kind this stack does not handle (another hardware type, an
    /// unknown ICMP message, another IP version, an IPv6 option or routing header it must not
    /// pass, an extension-header chain past its bounds).
    #[error("unrecognized packet")]
    Unrecognized,
    /// An IPv4 or IPv6 fragment: it must go through [`FragmentReassembler`] (IPv4) or
    /// [`Ipv6FragmentReassembler`] before its payload can be parsed.
    #[error("IP fragment")]
    Fragmented,
}

/// The result of the wire parsers.
pub type Result<T> = core::result::Result<T, Error>;

/// Whether a `Repr::parse` verifies the checksum.
///
/// [`Verify`](Self::Verify) is the safe default. [`Trust`](Self::Trust) is for frames whose
/// checksums the NIC already verified (the 82599 validates IPv4 and TCP checksums on receive and
/// reports it in the descriptor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ChecksumPolicy {
    /// Verify the checksum; a mismatch is [`Error::Checksum`].
    #[default]
    Verify,
    /// Do not look at the checksum.
    Trust,
}

impl ChecksumPolicy {
    /// Whether the checksum must be verified.
    #[must_use]
    pub const fn verify(self) -> bool {
        matches!(self, Self::Verify)
    }
}

/// Reads a big-endian `u16` at `at`. Callers index only within lengths that `check_len` proved.
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian `u32` at `at`. Callers index only within lengths that `check_len` proved.
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Writes a big-endian `u16` at `at`.
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian `u32` at `at`.
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::tests::SYN_HEADER;
    use crate::wire::tcp::tests::{LINUX_SYN, linux_syn_repr};

    /// The whole Linux SYN frame: Ethernet, IPv4 and TCP, walked as the stack will.
    #[test]
    fn linux_syn_frame() {
        let mut frame = vec![0x02, 0, 0, 0, 0, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x00];
        frame.extend_from_slice(&SYN_HEADER);
        frame.extend_from_slice(&LINUX_SYN);
        let eth = EthernetFrame::new_checked(&frame[..]).unwrap();
        assert_eq!(eth.ethertype(), EtherType::Ipv4);
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        let ip_repr = Ipv4Repr::parse(&ip, ChecksumPolicy::Verify).unwrap();
        assert_eq!(ip_repr.protocol, Protocol::Tcp);
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        let tcp_repr =
            TcpRepr::parse(&tcp, ip_repr.src_addr, ip_repr.dst_addr, ChecksumPolicy::Verify).unwrap();
        assert_eq!(tcp_repr, linux_syn_repr());
        // The TCP checksum depends on the addresses: swapping them breaks it.
        assert_eq!(
            TcpRepr::parse(&tcp, ip_repr.dst_addr, Ipv4Address::new(10, 0, 0, 9), ChecksumPolicy::Verify),
            Err(Error::Checksum)
        );
    }

    // A TCP SYN over IPv6 as Linux sends it (2001:db8::2 port 40000 -> 2001:db8::1 port 80: MSS
    // 1440, SACK-permitted, timestamps, NOP, window scale 7, window 64800), built by scapy; the TCP
    // checksum 0xea40 covers the IPv6 pseudo-header.
    const SYN_V6: [u8; 80] = [
        0x60, 0x09, 0xb6, 0xf1, 0x00, 0x28, 0x06, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x9c, 0x40, 0x00, 0x50, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00,
        0x00, 0xa0, 0x02, 0xfd, 0x20, 0xea, 0x40, 0x00, 0x00, 0x02, 0x04, 0x05, 0xa0, 0x04, 0x02, 0x08, 0x0a,
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    /// The IPv6 SYN: fixed header, then TCP with the IPv6 pseudo-header checksum, both ways.
    #[test]
    fn linux_syn_v6() {
        let ip = Ipv6Packet::new_checked(&SYN_V6[..]).unwrap();
        let (ip_repr, payload) = Ipv6Repr::parse_with_payload(&ip).unwrap();
        assert_eq!(ip_repr, crate::wire::ipv6::tests::syn_repr());
        let segment = TcpPacket::new_checked(payload).unwrap();
        assert_eq!(segment.checksum(), 0xea40);
        let tcp =
            TcpRepr::parse_v6(&segment, ip_repr.src_addr, ip_repr.dst_addr, ChecksumPolicy::Verify).unwrap();
        assert_eq!((tcp.control, tcp.max_seg_size, tcp.window_scale), (TcpControl::Syn, Some(1440), Some(7)));
        // The IPv4 pseudo-header does not verify it; other IPv6 addresses do not either.
        assert!(!segment.verify_checksum(Ipv4Address::new(10, 0, 0, 2), Ipv4Address::new(10, 0, 0, 1)));
        assert_eq!(
            TcpRepr::parse_v6(&segment, ip_repr.dst_addr, ip_repr.dst_addr, ChecksumPolicy::Verify),
            Err(Error::Checksum)
        );
        let mut out = vec![0u8; ip_repr.buffer_len()];
        let mut packet = Ipv6Packet::new_unchecked(&mut out[..]);
        ip_repr.emit(&mut packet);
        tcp.emit_v6(&mut TcpPacket::new_unchecked(packet.payload_mut()), ip_repr.src_addr, ip_repr.dst_addr);
        assert_eq!(out, SYN_V6, "emit reproduces the packet byte for byte");
    }

    #[test]
    fn errors_display() {
        for e in [Error::Truncated, Error::Malformed, Error::Checksum, Error::Unrecognized, Error::Fragmented]
        {
            assert!(!e.to_string().is_empty());
        }
        assert!(ChecksumPolicy::default().verify());
        assert!(!ChecksumPolicy::Trust.verify());
    }
}
