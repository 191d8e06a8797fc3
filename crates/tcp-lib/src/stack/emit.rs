//! Writing a connection's segment into its frame: the IP header of the connection's family and
//! the TCP header (and payload, or prepared content) with its checksum. The code is generic over
//! the family ([`TcpFamily`]) and dispatched once per segment: a segment carries no `SocketAddr`
//! matching below [`segment`].

use std::net::SocketAddr;

use super::Config;
use super::family::{Ends, TcpFamily};
#[cfg(doc)]
use crate::tcp::Transmit;
use crate::wire::{TcpPacket, TcpRepr, checksum};

/// Writes the IP header and the TCP segment `seg` of a connection with `(local, remote)` into
/// `buf` (exactly the family's IP header and `seg.buffer_len()` bytes), ECN-capable when `ect`
/// ([`Transmit::ect`]); the TCP checksum as [`Config::tx_checksum`] says, or only its
/// pseudo-header sum when `partial` (the device finishes it). Ends of two families (which no
/// connection has) write nothing.
#[inline]
pub(super) fn segment(
    buf: &mut [u8],
    seg: &TcpRepr<'_>,
    (local, remote): (SocketAddr, SocketAddr),
    (ect, partial): (bool, bool),
    ident: u16,
    config: &Config,
) {
    match (local, remote) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            emit_ip_tcp(buf, seg, Ends { src: *s.ip(), dst: *d.ip(), ect }, partial, ident, config);
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            emit_ip_tcp(buf, seg, Ends { src: *s.ip(), dst: *d.ip(), ect }, partial, ident, config);
        }
        _ => {}
    }
}

/// [`segment`] for a segment whose payload is lent (prepared content or an application's pool
/// buffer, see [`emit_ip_tcp_prepared`]): `payload` is its bytes and their precomputed sum, if
/// any; `BY_REFERENCE`: `buf` is exactly the IP and TCP headers, which lie in front of the payload
/// in its pool buffer (a frame's headroom), and the payload is not touched.
#[inline]
pub(super) fn segment_prepared<const BY_REFERENCE: bool>(
    buf: &mut [u8],
    seg: &TcpRepr<'_>,
    payload: (&[u8], Option<u16>),
    (local, remote): (SocketAddr, SocketAddr),
    (ect, partial): (bool, bool),
    ident: u16,
    config: &Config,
) -> bool {
    match (local, remote) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            let ends = Ends { src: *s.ip(), dst: *d.ip(), ect };
            emit_ip_tcp_prepared::<_, BY_REFERENCE>(buf, seg, payload, ends, partial, ident, config)
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            let ends = Ends { src: *s.ip(), dst: *d.ip(), ect };
            emit_ip_tcp_prepared::<_, BY_REFERENCE>(buf, seg, payload, ends, partial, ident, config)
        }
        _ => false,
    }
}

fn emit_ip_tcp<A: TcpFamily>(
    buf: &mut [u8],
    seg: &TcpRepr<'_>,
    ends: Ends<A>,
    partial: bool,
    ident: u16,
    config: &Config,
) {
    let (header, tcp) = buf.split_at_mut(A::HEADER_LEN);
    A::emit_header(header, ends, seg.buffer_len(), ident, config);
    let mut tcp = TcpPacket::new_unchecked(tcp);
    if partial {
        seg.emit_unsummed(&mut tcp);
        tcp.set_checksum(partial_sum(ends, seg.buffer_len()));
    } else if config.tx_checksum {
        A::emit_summed(seg, &mut tcp, ends);
    } else {
        seg.emit_unsummed(&mut tcp);
    }
}

/// The checksum field of a segment of `tcp_len` bytes whose sum the device finishes: the
/// pseudo-header sum alone, not complemented (what Linux's `tcp_v4_send_check` leaves for
/// `CHECKSUM_PARTIAL`; for a super-segment, over the length of the whole).
fn partial_sum<A: TcpFamily>(ends: Ends<A>, tcp_len: usize) -> u16 {
    A::pseudo_header(ends, u32::try_from(tcp_len).unwrap_or(u32::MAX))
}

/// [`emit_ip_tcp`] for a segment whose payload is lent: `seg` is the header (empty payload),
/// `payload` the payload and its precomputed sum, written straight from where it lies (not at all when
/// `BY_REFERENCE`: `buf` is then only the headers, in front of the payload wherever it lies). The
/// checksum adds the precomputed payload sum when there is one (returns whether), else sums the
/// payload; 0 without [`Config::tx_checksum`] (returns false), the pseudo-header sum alone when
/// `partial`.
fn emit_ip_tcp_prepared<A: TcpFamily, const BY_REFERENCE: bool>(
    buf: &mut [u8],
    seg: &TcpRepr<'_>,
    (bytes, precomputed): (&[u8], Option<u16>),
    ends: Ends<A>,
    partial: bool,
    ident: u16,
    config: &Config,
) -> bool {
    if !BY_REFERENCE {
        let (_, payload) = buf.split_at_mut(A::HEADER_LEN + seg.buffer_len());
        payload[..bytes.len()].copy_from_slice(bytes);
    }
    let header_len = seg.buffer_len();
    let tcp_len = header_len + bytes.len();
    let (ip, tcp) = buf.split_at_mut(A::HEADER_LEN);
    A::emit_header(ip, ends, tcp_len, ident, config);
    let mut view = TcpPacket::new_unchecked(&mut tcp[..header_len]);
    seg.emit_unsummed(&mut view);
    if partial {
        view.set_checksum(partial_sum(ends, tcp_len));
        return false;
    }
    // `emit_unsummed` left the checksum field 0, as the sum below needs it.
    if !config.tx_checksum {
        return false;
    }
    let payload_sum = precomputed.unwrap_or_else(|| checksum::data(bytes));
    let length = u32::try_from(tcp_len).unwrap_or(u32::MAX);
    let sum =
        checksum::combine(&[A::pseudo_header(ends, length), checksum::data(&tcp[..header_len]), payload_sum]);
    TcpPacket::new_unchecked(&mut tcp[..header_len]).set_checksum(checksum::finish(sum));
    precomputed.is_some()
}
