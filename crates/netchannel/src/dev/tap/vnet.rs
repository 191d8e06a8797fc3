//! The virtio-net header a TAP opened with `IFF_VNET_HDR` puts in front of every frame, and its
//! translation to and from a packet's [`Offload`] metadata.
//!
//! The layout is `struct virtio_net_hdr_mrg_rxbuf` (OASIS "Virtual I/O Device (VIRTIO) Version 1.2",
//! §5.1.6 "Device Operation"): `flags` (u8), `gso_type` (u8), `hdr_len`, `gso_size`, `csum_start`,
//! `csum_offset` and `num_buffers` (u16 each), 12 bytes. The TAP driver reads and writes the 16-bit
//! fields in the host's byte order (virtio's "legacy" endianness, unless `TUNSETVNETLE`/`BE` says
//! otherwise, which we never do), and ignores `num_buffers` in both directions.
//!
//! Receiving, a header is checked before it is believed: a `gso_type` we did not enable, a checksum
//! field outside the frame, a super-segment that is not TCP over the IP version it claims, are
//! [`VnetError`]s, and the device drops the frame and counts it. The kernel's `hdr_len` is only a hint
//! (the length of its socket buffer's linear part, which may hold payload too), so the header length
//! a received super-segment reports is recomputed from the frame itself.

use crate::pool::{GsoKind, Offload};

/// Bytes of the header: the 12-byte `virtio_net_hdr_mrg_rxbuf` (see the [module docs](self)).
pub(crate) const LEN: usize = 12;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` is partial.
const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the device verified the checksums (receive only).
const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_NONE`.
const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_ECN`: set CWR on the first segment only.
const GSO_ECN: u8 = 0x80;

/// Why a received virtio-net header was not believed (the frame is dropped and counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum VnetError {
    /// The read returned fewer bytes than the header.
    #[error("a {len}-byte read is shorter than the {LEN}-byte virtio-net header")]
    Short {
        /// Bytes read.
        len: usize,
    },
    /// A `gso_type` this device did not enable (UDP fragmentation or segmentation, or an unknown
    /// value), or the ECN bit without a segmentation kind.
    #[error("gso_type {0:#04x} was not enabled")]
    UnknownGsoType(u8),
    /// A super-segment with a segment size of 0.
    #[error("a super-segment with gso_size 0")]
    ZeroMss,
    /// The partial checksum's field does not lie inside the frame, or its offset does not fit the
    /// packet's metadata (at most 255).
    #[error("checksum field at {start} + {offset} lies outside the {len}-byte frame")]
    ChecksumOutside {
        /// `csum_start`.
        start: u16,
        /// `csum_offset`.
        offset: u16,
        /// The frame's length.
        len: usize,
    },
    /// A super-segment whose frame is not TCP over the IP version its `gso_type` names.
    #[error("a {0:?} super-segment whose frame is not TCP over that IP version")]
    NotTcp(GsoKind),
}

/// The header that asks the kernel to finish what `offload` says (a zero header for
/// [`Offload::NONE`]). What a device reports on receive (a verified checksum) is not sent: the
/// virtio spec defines `DATA_VALID` for the device only.
pub(crate) fn encode(offload: Offload) -> [u8; LEN] {
    let mut h = [0u8; LEN];
    if let Some((start, offset)) = offload.partial_checksum() {
        h[0] = F_NEEDS_CSUM;
        h[6..8].copy_from_slice(&start.to_ne_bytes());
        h[8..10].copy_from_slice(&u16::from(offset).to_ne_bytes());
    }
    if let Some((kind, mss, header_len)) = offload.segmentation() {
        let ecn = if offload.ecn() { GSO_ECN } else { 0 };
        h[1] = ecn
            | match kind {
                GsoKind::Tcp4 => GSO_TCPV4,
                GsoKind::Tcp6 => GSO_TCPV6,
            };
        h[2..4].copy_from_slice(&header_len.to_ne_bytes());
        h[4..6].copy_from_slice(&mss.to_ne_bytes());
    }
    h
}

fn field(h: &[u8; LEN], at: usize) -> u16 {
    u16::from_ne_bytes([h[at], h[at + 1]])
}

/// The offload metadata `header` reports for `frame` (the bytes after it), or why it is not to be
/// believed. Unknown `flags` bits are ignored (`VIRTIO_NET_HDR_F_RSC_INFO` is the only other one
/// defined, and it is for the driver's side).
pub(crate) fn decode(header: &[u8; LEN], frame: &[u8]) -> Result<Offload, VnetError> {
    let (flags, gso_type) = (header[0], header[1]);
    let mut offload = Offload::NONE;
    if flags & F_NEEDS_CSUM != 0 {
        let (start, offset) = (field(header, 6), field(header, 8));
        let end = usize::from(start) + usize::from(offset) + 2;
        match u8::try_from(offset) {
            Ok(offset8) if end <= frame.len() => offload = offload.with_partial_checksum(start, offset8),
            _ => return Err(VnetError::ChecksumOutside { start, offset, len: frame.len() }),
        }
    }
    if flags & F_DATA_VALID != 0 {
        offload = offload.with_checksum_verified();
    }
    let kind = match gso_type & !GSO_ECN {
        GSO_NONE if gso_type == GSO_NONE => return Ok(offload),
        GSO_TCPV4 => GsoKind::Tcp4,
        GSO_TCPV6 => GsoKind::Tcp6,
        _ => return Err(VnetError::UnknownGsoType(gso_type)),
    };
    let mss = field(header, 4);
    if mss == 0 {
        return Err(VnetError::ZeroMss);
    }
    let header_len = tcp_headers_len(frame, kind).ok_or(VnetError::NotTcp(kind))?;
    offload = offload.with_segmentation(kind, mss, header_len);
    if gso_type & GSO_ECN != 0 {
        offload = offload.with_ecn();
    }
    Ok(offload)
}

/// The length of `frame`'s Ethernet (one optional 802.1Q tag), IP and TCP headers, if it is TCP
/// over the IP version `kind` names and they all lie inside it. IPv6 hop-by-hop, routing and
/// destination options headers are walked (at most 8).
fn tcp_headers_len(frame: &[u8], kind: GsoKind) -> Option<u16> {
    let mut l3 = 14;
    let mut ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if ethertype == 0x8100 {
        ethertype = u16::from_be_bytes([*frame.get(16)?, *frame.get(17)?]);
        l3 = 18;
    }
    let l4 = match kind {
        GsoKind::Tcp4 => {
            let vihl = *frame.get(l3)?;
            let ihl = usize::from(vihl & 0x0f) * 4;
            if ethertype != 0x0800 || vihl >> 4 != 4 || ihl < 20 || *frame.get(l3 + 9)? != 6 {
                return None;
            }
            l3 + ihl
        }
        GsoKind::Tcp6 => {
            if ethertype != 0x86dd || *frame.get(l3)? >> 4 != 6 {
                return None;
            }
            let (mut next, mut at) = (*frame.get(l3 + 6)?, l3 + 40);
            for _ in 0..8 {
                if !matches!(next, 0 | 43 | 60) {
                    break;
                }
                next = *frame.get(at)?;
                at += 8 + usize::from(*frame.get(at + 1)?) * 8;
            }
            if next != 6 {
                return None;
            }
            at
        }
    };
    let doff = usize::from(*frame.get(l4 + 12)? >> 4) * 4;
    let end = l4 + doff;
    if doff < 20 || end > frame.len() {
        return None;
    }
    u16::try_from(end).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 (with `ihl` words) + TCP (20 bytes) + `payload` zero bytes.
    fn tcp4_frame(ihl: u8, payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + usize::from(ihl) * 4 + 20 + payload];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x40 | ihl;
        f[14 + 9] = 6;
        f[14 + usize::from(ihl) * 4 + 12] = 5 << 4;
        f
    }

    /// Ethernet + IPv6 + one hop-by-hop options header (8 bytes) + TCP (32 bytes) + `payload`.
    fn tcp6_frame(payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40 + 8 + 32 + payload];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[14 + 6] = 0; // hop-by-hop
        f[54] = 6; // then TCP
        f[62 + 12] = 8 << 4;
        f
    }

    fn header(flags: u8, gso_type: u8, gso_size: u16, start: u16, offset: u16) -> [u8; LEN] {
        let mut h = [0u8; LEN];
        h[0] = flags;
        h[1] = gso_type;
        h[2..4].copy_from_slice(&1234u16.to_ne_bytes()); // the kernel's hint, never believed
        h[4..6].copy_from_slice(&gso_size.to_ne_bytes());
        h[6..8].copy_from_slice(&start.to_ne_bytes());
        h[8..10].copy_from_slice(&offset.to_ne_bytes());
        h
    }

    #[test]
    fn sending_translates_every_field_and_nothing_gives_a_zero_header() {
        assert_eq!(encode(Offload::NONE), [0; LEN]);
        // A verified checksum is the device's to report, never sent.
        assert_eq!(encode(Offload::NONE.with_checksum_verified()), [0; LEN]);
        let csum = encode(Offload::NONE.with_partial_checksum(34, 16));
        assert_eq!((csum[0], csum[1], field(&csum, 6), field(&csum, 8)), (F_NEEDS_CSUM, GSO_NONE, 34, 16));
        let tso = Offload::NONE.with_partial_checksum(34, 16).with_segmentation(GsoKind::Tcp4, 1448, 54);
        let h = encode(tso);
        assert_eq!((h[0], h[1], field(&h, 2), field(&h, 4)), (F_NEEDS_CSUM, GSO_TCPV4, 54, 1448));
        let h = encode(tso.with_segmentation(GsoKind::Tcp6, 1428, 74).with_ecn());
        assert_eq!((h[1], field(&h, 2), field(&h, 4)), (GSO_TCPV6 | GSO_ECN, 74, 1428));
        assert_eq!(field(&h, 10), 0, "num_buffers stays 0");
    }

    #[test]
    fn receiving_translates_flags_and_recomputes_the_header_length() {
        let frame = tcp4_frame(5, 3 * 1448);
        assert_eq!(decode(&[0; LEN], &frame), Ok(Offload::NONE));
        assert_eq!(
            decode(&header(F_DATA_VALID, 0, 0, 0, 0), &frame),
            Ok(Offload::NONE.with_checksum_verified())
        );
        let got = decode(&header(F_NEEDS_CSUM, GSO_TCPV4, 1448, 34, 16), &frame);
        assert_eq!(
            got,
            Ok(Offload::NONE.with_partial_checksum(34, 16).with_segmentation(GsoKind::Tcp4, 1448, 54))
        );
        // IPv4 options and a VLAN tag move the headers' end; the kernel's hdr_len (1234) does not.
        let mut tagged = tcp4_frame(6, 100);
        tagged.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
        let got = decode(&header(F_DATA_VALID, GSO_TCPV4 | GSO_ECN, 536, 0, 0), &tagged).unwrap();
        assert_eq!(got.segmentation(), Some((GsoKind::Tcp4, 536, 18 + 24 + 20)));
        assert!(got.ecn() && got.checksum_verified() && got.partial_checksum().is_none());
        let six = decode(&header(F_NEEDS_CSUM, GSO_TCPV6, 1428, 62, 16), &tcp6_frame(4000)).unwrap();
        assert_eq!(six.segmentation(), Some((GsoKind::Tcp6, 1428, 14 + 40 + 8 + 32)));
        // What we send, we read back (on a frame it fits).
        let tso = Offload::NONE.with_partial_checksum(34, 16).with_segmentation(GsoKind::Tcp4, 1448, 54);
        assert_eq!(decode(&encode(tso), &frame), Ok(tso));
    }

    #[test]
    fn malformed_headers_are_refused_without_panicking() {
        let frame = tcp4_frame(5, 1000);
        // UDP fragmentation (3) and USO (5) were never enabled; 0x80 alone is ECN without a kind.
        for t in [3, 5, 2, 0x7f, 0x80, 0x83] {
            assert_eq!(decode(&header(0, t, 1448, 0, 0), &frame), Err(VnetError::UnknownGsoType(t)), "{t}");
        }
        assert_eq!(decode(&header(0, GSO_TCPV4, 0, 0, 0), &frame), Err(VnetError::ZeroMss));
        let len = frame.len();
        let last = u16::try_from(len - 2).unwrap();
        assert!(decode(&header(F_NEEDS_CSUM, 0, 0, last, 0), &frame).is_ok(), "the last two bytes fit");
        for (start, offset) in [(last, 1), (u16::MAX, u16::MAX), (0, 256), (34, u16::MAX)] {
            assert_eq!(
                decode(&header(F_NEEDS_CSUM, 0, 0, start, offset), &frame),
                Err(VnetError::ChecksumOutside { start, offset, len }),
                "{start} + {offset}"
            );
        }
        // The kind must match the frame: IPv4 is not TCPV6, UDP is not TCP, headers must fit.
        assert_eq!(decode(&header(0, GSO_TCPV6, 1448, 0, 0), &frame), Err(VnetError::NotTcp(GsoKind::Tcp6)));
        let mut udp = frame.clone();
        udp[14 + 9] = 17;
        assert_eq!(decode(&header(0, GSO_TCPV4, 1448, 0, 0), &udp), Err(VnetError::NotTcp(GsoKind::Tcp4)));
        for cut in [0, 13, 20, 40, 53] {
            assert_eq!(
                decode(&header(0, GSO_TCPV4, 1448, 0, 0), &frame[..cut]),
                Err(VnetError::NotTcp(GsoKind::Tcp4)),
                "cut at {cut}"
            );
        }
        let mut bad_doff = frame.clone();
        bad_doff[34 + 12] = 4 << 4;
        assert!(decode(&header(0, GSO_TCPV4, 1448, 0, 0), &bad_doff).is_err());
        // An IPv6 extension header that runs past the frame.
        let mut six = tcp6_frame(0);
        six[55] = 200;
        assert_eq!(decode(&header(0, GSO_TCPV6, 1448, 0, 0), &six), Err(VnetError::NotTcp(GsoKind::Tcp6)));
        // Arbitrary headers over arbitrary short frames never panic.
        for b in 0..=255u8 {
            let h = [b; LEN];
            for cut in [0, 1, 14, 33, 54, 60] {
                let _ = decode(&h, &frame[..cut.min(frame.len())]);
            }
        }
    }
}
