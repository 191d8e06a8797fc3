//! Writing a connection's segment into its frame: the IP header of the connection's family and
//! the TCP header (and payload, or prepared content) with its checksum. The code is generic over
//! the family ([`TcpFamily`]) and dispatched once per segment: a segment carries no `SocketAddr`
//! matching below [`segment`].

use std::net::SocketAddr;

use super::Config;
use super::family::{Ends, TcpFamily};
#[cfg(doc)]
use crate::tcp::Transmit;
use crate::wire::{SeqNumber, TcpPacket, TcpRepr, checksum};

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

/// Completes a segment of a super-segment whose IP and TCP headers (`header_len` bytes at the
/// start of `buf`) were copied from the frame before it, which [`segment`] wrote with the same
/// flags and payload length ([`gso::Piece::repeats`](super::gso::Piece::repeats)): writes its
/// sequence number `seq`, its IP identification, its `payload` behind the headers, and its
/// checksums as [`segment`] would (a partial sum, over the same length, is the copied one).
/// `BY_REFERENCE`: `buf` is only the headers, in front of the payload in its pool buffer (a
/// frame's headroom, as for [`segment_prepared`]), and the payload is not written.
#[inline]
pub(super) fn repeat_segment<const BY_REFERENCE: bool>(
    buf: &mut [u8],
    header_len: usize,
    (seq, payload): (SeqNumber, &[u8]),
    (local, remote): (SocketAddr, SocketAddr),
    partial: bool,
    ident: u16,
    config: &Config,
) {
    match (local, remote) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            let ends = Ends { src: *s.ip(), dst: *d.ip(), ect: false };
            repeat_ip_tcp::<_, BY_REFERENCE>(buf, header_len, (seq, payload), ends, partial, ident, config);
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            let ends = Ends { src: *s.ip(), dst: *d.ip(), ect: false };
            repeat_ip_tcp::<_, BY_REFERENCE>(buf, header_len, (seq, payload), ends, partial, ident, config);
        }
        _ => {}
    }
}

fn repeat_ip_tcp<A: TcpFamily, const BY_REFERENCE: bool>(
    buf: &mut [u8],
    header_len: usize,
    (seq, payload): (SeqNumber, &[u8]),
    ends: Ends<A>,
    partial: bool,
    ident: u16,
    config: &Config,
) {
    let (headers, rest) = buf.split_at_mut(header_len);
    if !BY_REFERENCE {
        rest[..payload.len()].copy_from_slice(payload);
    }
    let (ip, tcp) = headers.split_at_mut(A::HEADER_LEN);
    A::set_ident(ip, ident);
    let mut view = TcpPacket::new_unchecked(&mut *tcp);
    view.set_seq_number(seq);
    if partial || !config.tx_checksum {
        return;
    }
    view.set_checksum(0);
    fill_checksum(tcp, (checksum::data(payload), payload.len()), ends);
}

/// Fills the checksum of the TCP header `tcp` (its checksum field 0) whose payload, written
/// apart from it, has `payload_sum` over `payload_len` bytes.
fn fill_checksum<A: TcpFamily>(tcp: &mut [u8], (payload_sum, payload_len): (u16, usize), ends: Ends<A>) {
    let length = u32::try_from(tcp.len() + payload_len).unwrap_or(u32::MAX);
    let sum = checksum::combine(&[A::pseudo_header(ends, length), checksum::data(tcp), payload_sum]);
    TcpPacket::new_unchecked(tcp).set_checksum(checksum::finish(sum));
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
    fill_checksum(&mut tcp[..header_len], (payload_sum, bytes.len()), ends);
    precomputed.is_some()
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

    use super::super::{IP_LEN, IP6_LEN};
    use super::*;
    use crate::wire::tcp::Timestamp;
    use crate::wire::tcp::{SackBlock, SackBlocks};
    use crate::wire::{EthernetAddress, Ipv4Cidr, TcpControl};

    /// A segment completed from the frame before's headers ([`repeat_segment`]) is byte for byte
    /// the one [`segment`] writes: both families, checksums filled, partial or left out, options
    /// of several lengths, identifications that wrap.
    #[test]
    fn a_repeated_segment_is_the_one_emitted_whole() {
        let v4 = (
            SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80)),
            SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 40_000)),
        );
        let v6 = (
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1), 80, 0, 0)),
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2), 40_000, 0, 0)),
        );
        let payload: Vec<u8> = (0..2 * 1441u32).map(|i| (i * 7 + i / 256).to_le_bytes()[0]).collect();
        let (first, second) = payload.split_at(1441);
        let sack = [SackBlock { left: SeqNumber::new(9), right: SeqNumber::new(99) }];
        let mut cases = 0;
        for ends in [v4, v6] {
            let ip_len = if ends.0.is_ipv4() { IP_LEN } else { IP6_LEN };
            for (tx_checksum, partial) in [(true, false), (false, false), (true, true)] {
                for (timestamp, sacks) in
                    [(None, &[][..]), (Some(Timestamp { tsval: 7, tsecr: 3 }), &sack[..])]
                {
                    for (ect, ident) in [(false, 17u16), (true, u16::MAX)] {
                        let mut config = Config::new(
                            EthernetAddress([2, 0, 0, 0, 0, 1]),
                            Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24).unwrap(),
                        );
                        config.tx_checksum = tx_checksum;
                        let before = TcpRepr {
                            src_port: 80,
                            dst_port: 40_000,
                            seq_number: SeqNumber::new(u32::MAX - 1000),
                            ack_number: Some(SeqNumber::new(5)),
                            window_len: 1234,
                            control: TcpControl::None,
                            timestamp,
                            sack_blocks: SackBlocks::from_slice(sacks).unwrap(),
                            payload: first,
                            ..TcpRepr::default()
                        };
                        let next = TcpRepr {
                            seq_number: before.seq_number + first.len(),
                            payload: second,
                            ..before
                        };
                        let len = ip_len + before.buffer_len();
                        let (mut a, mut b, mut c) = (vec![0u8; len], vec![0u8; len], vec![0xa5u8; len]);
                        segment(&mut a, &before, ends, (ect, partial), ident, &config);
                        segment(&mut b, &next, ends, (ect, partial), ident.wrapping_add(1), &config);
                        let headers = ip_len + before.header_len();
                        c[..headers].copy_from_slice(&a[..headers]);
                        let piece = (next.seq_number, next.payload);
                        repeat_segment::<false>(
                            &mut c,
                            headers,
                            piece,
                            ends,
                            partial,
                            ident.wrapping_add(1),
                            &config,
                        );
                        assert_eq!(
                            c, b,
                            "{ends:?} checksum {tx_checksum} partial {partial} options {timestamp:?} ect {ect}"
                        );
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 24);
    }
}
