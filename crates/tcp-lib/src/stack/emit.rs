//! Writing a connection's segment into its frame: the IP header of the connection's family and
//! the TCP header (and payload, or prepared content) with its checksum. The code is generic over
//! the family ([`TcpFamily`]) and dispatched once per segment: a segment carries no `SocketAddr`
//! matching below [`segment`].

use std::net::SocketAddr;

use super::family::{Ends, TcpFamily};
use super::{Config, PreparedSlice};
#[cfg(doc)]
use crate::tcp::Transmit;
use crate::wire::{TcpPacket, TcpRepr, checksum};

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

fn emit_ip_tcp<A: TcpFamily>(buf: &mut [u8], seg: &TcpRepr<'_>, ends: Ends<A>, ident: u16, config: &Config) {
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
fn emit_ip_tcp_prepared<A: TcpFamily>(
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
