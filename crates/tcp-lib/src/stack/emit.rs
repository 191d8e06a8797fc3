//! Writing a connection's segment into its frame: the IP header of the connection's family and
//! the TCP header (and payload, or prepared content) with its checksum. The code is generic over
//! the family ([`IpVersion`], implemented for [`Ipv4Addr`] and [`Ipv6Addr`]) and dispatched once
//! per segment, so the IPv4 path compiles to what it was before IPv6 existed: a segment carries
//! no `SocketAddr` matching below [`segment`].

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{Config, IP_LEN, IP6_LEN, PreparedSlice};
#[cfg(doc)]
use crate::tcp::Transmit;
use crate::wire::ipv4::ECN_ECT0;
use crate::wire::{Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, Protocol, TcpPacket, TcpRepr, checksum};

/// An IP version's part of emitting a TCP segment, on its address type.
trait IpVersion: Copy {
    /// The IP header length emitted.
    const HEADER_LEN: usize;
    /// Writes the IP header of a TCP segment of `payload_len` bytes from `src` to `dst`.
    fn emit_header(buf: &mut [u8], ends: Ends<Self>, payload_len: usize, ident: u16, config: &Config);
    /// Writes `seg` with its checksum over this version's pseudo-header.
    fn emit_summed(seg: &TcpRepr<'_>, tcp: &mut TcpPacket<&mut [u8]>, ends: Ends<Self>);
    /// The pseudo-header sum for a TCP segment of `length` bytes.
    fn pseudo_header(ends: Ends<Self>, length: u32) -> u16;
}

/// What the IP header of a connection's segment needs: its ends and [`Transmit::ect`], taken by
/// value (a reference to the `Transmit` would keep the whole `Option` the connection returned in
/// memory, and cost a `memcpy` per segment).
#[derive(Clone, Copy)]
struct Ends<A> {
    src: A,
    dst: A,
    /// ECT(0) in the IP header when the connection marks it ECN-capable (RFC 3168 §5; ECT(1) is
    /// left to L4S, RFC 9331).
    ect: bool,
}

impl IpVersion for Ipv4Addr {
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
    fn emit_summed(seg: &TcpRepr<'_>, tcp: &mut TcpPacket<&mut [u8]>, ends: Ends<Self>) {
        seg.emit(tcp, ends.src, ends.dst);
    }

    #[inline]
    fn pseudo_header(ends: Ends<Self>, length: u32) -> u16 {
        checksum::pseudo_header_v4(ends.src, ends.dst, 6, length)
    }
}

impl IpVersion for Ipv6Addr {
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
    fn emit_summed(seg: &TcpRepr<'_>, tcp: &mut TcpPacket<&mut [u8]>, ends: Ends<Self>) {
        seg.emit_v6(tcp, ends.src, ends.dst);
    }

    #[inline]
    fn pseudo_header(ends: Ends<Self>, length: u32) -> u16 {
        checksum::pseudo_header_v6(ends.src, ends.dst, 6, length)
    }
}

/// Writes the IP header and the TCP segment `seg` of a connection with `(local, remote)` into
/// `buf` (exactly the family's IP header and `seg.buffer_len()` bytes), ECN-capable when `ect`
/// ([`Transmit::ect`]); the TCP checksum as [`Config::tx_checksum`] says. Ends of two families
/// (which no connection has) write nothing.
#[inline]
pub(super) fn segment(
    buf: &mut [u8],
    seg: &TcpRepr<'_>,
    (local, remote): (SocketAddr, SocketAddr),
    ect: bool,
    ident: u16,
    config: &Config,
) {
    match (local, remote) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            emit_ip_tcp(buf, seg, Ends { src: *s.ip(), dst: *d.ip(), ect }, ident, config);
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            emit_ip_tcp(buf, seg, Ends { src: *s.ip(), dst: *d.ip(), ect }, ident, config);
        }
        _ => {}
    }
}

/// [`segment`] for a segment whose payload is prepared content (see [`emit_ip_tcp_prepared`]).
#[inline]
pub(super) fn segment_prepared(
    buf: &mut [u8],
    seg: &TcpRepr<'_>,
    slice: &PreparedSlice,
    (local, remote): (SocketAddr, SocketAddr),
    ect: bool,
    ident: u16,
    config: &Config,
) -> bool {
    match (local, remote) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            let ends = Ends { src: *s.ip(), dst: *d.ip(), ect };
            emit_ip_tcp_prepared(buf, seg, slice, ends, ident, config)
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            let ends = Ends { src: *s.ip(), dst: *d.ip(), ect };
            emit_ip_tcp_prepared(buf, seg, slice, ends, ident, config)
        }
        _ => false,
    }
}

fn emit_ip_tcp<A: IpVersion>(buf: &mut [u8], seg: &TcpRepr<'_>, ends: Ends<A>, ident: u16, config: &Config) {
    let (header, tcp) = buf.split_at_mut(A::HEADER_LEN);
    A::emit_header(header, ends, seg.buffer_len(), ident, config);
    let mut tcp = TcpPacket::new_unchecked(tcp);
    if config.tx_checksum {
        A::emit_summed(seg, &mut tcp, ends);
    } else {
        seg.emit_unsummed(&mut tcp);
    }
}

/// [`emit_ip_tcp`] for a segment whose payload is prepared content: `seg` is the header (empty
/// payload), `slice` the payload, written straight from the prepared bytes; the checksum adds the
/// precomputed payload sum when there is one (returns whether), else sums the payload; none at
/// all without [`Config::tx_checksum`] (returns false).
fn emit_ip_tcp_prepared<A: IpVersion>(
    buf: &mut [u8],
    seg: &TcpRepr<'_>,
    slice: &PreparedSlice,
    ends: Ends<A>,
    ident: u16,
    config: &Config,
) -> bool {
    let header_len = seg.buffer_len();
    let tcp_len = header_len + slice.len;
    let (ip, tcp) = buf.split_at_mut(A::HEADER_LEN);
    A::emit_header(ip, ends, tcp_len, ident, config);
    if !config.tx_checksum {
        seg.emit_unsummed(&mut TcpPacket::new_unchecked(&mut tcp[..header_len]));
        tcp[header_len..tcp_len].copy_from_slice(slice.bytes());
        return false;
    }
    A::emit_summed(seg, &mut TcpPacket::new_unchecked(&mut tcp[..header_len]), ends);
    tcp[header_len..tcp_len].copy_from_slice(slice.bytes());
    let precomputed = slice.sum();
    let payload_sum = precomputed.unwrap_or_else(|| checksum::data(slice.bytes()));
    let mut view = TcpPacket::new_unchecked(&mut tcp[..tcp_len]);
    view.set_checksum(0);
    let length = u32::try_from(tcp_len).unwrap_or(u32::MAX);
    let sum =
        checksum::combine(&[A::pseudo_header(ends, length), checksum::data(&tcp[..header_len]), payload_sum]);
    TcpPacket::new_unchecked(&mut tcp[..tcp_len]).set_checksum(checksum::finish(sum));
    precomputed.is_some()
}
