//! What TCP does differently in each IP family, on the family's address type ([`TcpFamily`],
//! implemented for [`Ipv4Addr`] and [`Ipv6Addr`]): the IP header of a segment, the pseudo-header
//! its checksum covers, parsing, and the socket address of an end. The receive path
//! ([`super::tcp_input`]) and the transmit path ([`super::emit`]) are generic over it and
//! dispatched once per segment, so the IPv4 path compiles to what it was before IPv6 existed and
//! matches on no `IpAddr` or `SocketAddr` below that dispatch.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use super::{Config, IP_LEN, IP6_LEN};
#[cfg(doc)]
use crate::tcp::Transmit;
use crate::wire::ipv4::ECN_ECT0;
use crate::wire::{
    ChecksumPolicy, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, Protocol, Result as WireResult, TcpPacket,
    TcpRepr, checksum,
};

/// An IP family's part of receiving and emitting TCP segments, on its address type.
pub(super) trait TcpFamily: Copy + Into<IpAddr> {
    /// The IP header length emitted.
    const HEADER_LEN: usize;
    /// Writes the IP header of a TCP segment of `payload_len` bytes from `src` to `dst`.
    fn emit_header(buf: &mut [u8], ends: Ends<Self>, payload_len: usize, ident: u16, config: &Config);
    /// Writes `ident` into the IP header `buf` (one [`emit_header`](Self::emit_header) wrote) and
    /// mends its checksum; nothing in a family without one.
    fn set_ident(buf: &mut [u8], ident: u16);
    /// Writes `seg` with its checksum over this family's pseudo-header.
    fn emit_summed(seg: &TcpRepr<'_>, tcp: &mut TcpPacket<&mut [u8]>, ends: Ends<Self>);
    /// The pseudo-header sum for a TCP segment of `length` bytes.
    fn pseudo_header(ends: Ends<Self>, length: u32) -> u16;
    /// Parses (and verifies, as `policy` says) a segment from `src` to `dst`.
    fn parse<'a>(
        packet: &TcpPacket<&'a [u8]>,
        src: Self,
        dst: Self,
        policy: ChecksumPolicy,
    ) -> WireResult<TcpRepr<'a>>;
    /// This address with `port`.
    fn socket(self, port: u16) -> SocketAddr;
}

/// What the IP header of a connection's segment needs: its ends and [`Transmit::ect`], taken by
/// value (a reference to the `Transmit` would keep the whole `Option` the connection returned in
/// memory, and cost a `memcpy` per segment).
#[derive(Clone, Copy)]
pub(super) struct Ends<A> {
    pub(super) src: A,
    pub(super) dst: A,
    /// ECT(0) in the IP header when the connection marks it ECN-capable (RFC 3168 §5; ECT(1) is
    /// left to L4S, RFC 9331).
    pub(super) ect: bool,
}

impl TcpFamily for Ipv4Addr {
    const HEADER_LEN: usize = IP_LEN;

    #[inline]
    fn emit_header(buf: &mut [u8], ends: Ends<Self>, payload_len: usize, ident: u16, config: &Config) {
        let ip = Ipv4Repr {
            src_addr: ends.src,
            dst_addr: ends.dst,
            protocol: Protocol::Tcp,
            payload_len,
            ttl: config.ttl,
            dscp: 0,
            ecn: if ends.ect { ECN_ECT0 } else { 0 },
            ident,
            dont_frag: true,
        };
        ip.emit(&mut Ipv4Packet::new_unchecked(buf));
    }

    #[inline]
    fn set_ident(buf: &mut [u8], ident: u16) {
        // The checksum mended for the one field that changed, as RFC 1624's equation 3 says:
        // HC' = ~(~HC + ~m + m'), a third of the instructions of summing the header again.
        let mut ip = Ipv4Packet::new_unchecked(buf);
        let sum = checksum::combine(&[!ip.checksum(), !ip.ident(), ident]);
        ip.set_ident(ident);
        ip.set_checksum(checksum::finish(sum));
    }

    #[inline]
    fn emit_summed(seg: &TcpRepr<'_>, tcp: &mut TcpPacket<&mut [u8]>, ends: Ends<Self>) {
        seg.emit(tcp, ends.src, ends.dst);
    }

    #[inline]
    fn pseudo_header(ends: Ends<Self>, length: u32) -> u16 {
        checksum::pseudo_header_v4(ends.src, ends.dst, 6, length)
    }

    #[inline]
    fn parse<'a>(
        packet: &TcpPacket<&'a [u8]>,
        src: Self,
        dst: Self,
        policy: ChecksumPolicy,
    ) -> WireResult<TcpRepr<'a>> {
        TcpRepr::parse(packet, src, dst, policy)
    }

    #[inline]
    fn socket(self, port: u16) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self, port))
    }
}

impl TcpFamily for Ipv6Addr {
    const HEADER_LEN: usize = IP6_LEN;

    #[inline]
    fn emit_header(buf: &mut [u8], ends: Ends<Self>, payload_len: usize, _ident: u16, config: &Config) {
        let ip = Ipv6Repr {
            src_addr: ends.src,
            dst_addr: ends.dst,
            next_header: Protocol::Tcp,
            payload_len,
            hop_limit: config.hop_limit6(),
            traffic_class: if ends.ect { ECN_ECT0 } else { 0 },
            flow_label: 0,
        };
        ip.emit(&mut Ipv6Packet::new_unchecked(buf));
    }

    #[inline]
    fn set_ident(_buf: &mut [u8], _ident: u16) {}

    #[inline]
    fn emit_summed(seg: &TcpRepr<'_>, tcp: &mut TcpPacket<&mut [u8]>, ends: Ends<Self>) {
        seg.emit_v6(tcp, ends.src, ends.dst);
    }

    #[inline]
    fn pseudo_header(ends: Ends<Self>, length: u32) -> u16 {
        checksum::pseudo_header_v6(ends.src, ends.dst, 6, length)
    }

    #[inline]
    fn parse<'a>(
        packet: &TcpPacket<&'a [u8]>,
        src: Self,
        dst: Self,
        policy: ChecksumPolicy,
    ) -> WireResult<TcpRepr<'a>> {
        TcpRepr::parse_v6(packet, src, dst, policy)
    }

    #[inline]
    fn socket(self, port: u16) -> SocketAddr {
        SocketAddr::V6(SocketAddrV6::new(self, port, 0, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checksum [`TcpFamily::set_ident`] mends is the one the header summed again has, for
    /// every identification (among them those whose sum is one's-complement zero) after every
    /// other, in headers of several addresses, TTLs and ECN marks.
    #[test]
    fn a_mended_ipv4_checksum_is_the_summed_one_for_every_identification() {
        let mut config = Config::new(
            crate::wire::EthernetAddress([2, 0, 0, 0, 0, 1]),
            crate::wire::Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24).unwrap(),
        );
        for (src, dst, ttl, ect, start) in [
            (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 64, false, 0),
            (Ipv4Addr::new(192, 168, 200, 7), Ipv4Addr::new(172, 16, 99, 254), 1, true, 0x8000),
            (Ipv4Addr::new(255, 255, 255, 254), Ipv4Addr::new(0, 0, 0, 1), 255, true, 0xffff),
        ] {
            config.ttl = ttl;
            let ends = Ends { src, dst, ect };
            let mut mended = [0u8; IP_LEN];
            Ipv4Addr::emit_header(&mut mended, ends, 1480, start, &config);
            let mut summed = [0u8; IP_LEN];
            let mut ident = start;
            for _ in 0..=u16::MAX {
                ident = ident.wrapping_add(1);
                Ipv4Addr::set_ident(&mut mended, ident);
                Ipv4Addr::emit_header(&mut summed, ends, 1480, ident, &config);
                assert_eq!(mended, summed, "{src} -> {dst}, identification {ident:#06x}");
            }
        }
    }
}
