//! Per-packet offload metadata: what a device is asked to finish on a frame it sends (a partial
//! checksum, a TCP super-segment to cut), and what it reports about a frame it received (checksums
//! it verified, segments it coalesced). The fields are those of the virtio-net header
//! (`struct virtio_net_hdr`, OASIS "Virtual I/O Device (VIRTIO) Version 1.2", 2022, §5.1.6), which
//! Linux's TAP and `AF_PACKET` (`PACKET_VNET_HDR`) also speak, so a device translates them one to
//! one; a device without the offload refuses a frame that asks for it.
//!
//! The metadata lives in the buffer's header beside the data window (8 bytes), so it travels with
//! the buffer when only its index crosses cores. Every fresh buffer (allocated, or received by a
//! device) starts with [`Offload::NONE`]; changing a packet's length keeps it.
//!
//! ```
//! use netchannel::pool::{GsoKind, HugePages, Offload, Pool};
//!
//! // Super-segments need buffers larger than a frame: a 64 KiB data room.
//! let pool = Pool::builder(4).data_room(65536).hugepages(HugePages::Never).build()?;
//! let cache = pool.cache();
//! let mut frame = cache.alloc().expect("a free buffer");
//! assert_eq!(frame.offload(), Offload::NONE);
//! // A 14 + 20 + 20-byte header and 4344 payload bytes, to be cut into 1448-byte segments, the TCP
//! // checksum (at 34 + 16) holding only the pseudo-header sum.
//! frame.set_len(54 + 4344)?;
//! let offload = Offload::NONE.with_partial_checksum(34, 16).with_segmentation(GsoKind::Tcp4, 1448, 54);
//! frame.set_offload(offload);
//! assert_eq!(frame.offload().segmentation(), Some((GsoKind::Tcp4, 1448, 54)));
//! assert_eq!(frame.offload().partial_checksum(), Some((34, 16)));
//! // A length change keeps it; a fresh buffer starts without.
//! frame.truncate(54 + 1448);
//! assert_eq!(frame.offload(), offload);
//! drop(frame);
//! assert_eq!(cache.alloc().expect("a free buffer").offload(), Offload::NONE);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

/// The kind of super-segment a frame is (virtio-net's `gso_type`, without the ECN bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GsoKind {
    /// TCP over IPv4 (`VIRTIO_NET_HDR_GSO_TCPV4`).
    Tcp4,
    /// TCP over IPv6 (`VIRTIO_NET_HDR_GSO_TCPV6`).
    Tcp6,
}

const PARTIAL: u8 = 1 << 0;
const VERIFIED: u8 = 1 << 1;
const GSO_TCP4: u8 = 1 << 2;
const GSO_TCP6: u8 = 1 << 3;
const GSO_ECN: u8 = 1 << 4;

/// Offload metadata of one frame: virtio-net's header fields (VIRTIO 1.2 §5.1.6). A small `Copy` value;
/// the builders return a changed copy.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct Offload {
    /// Where the checksummed bytes start, from the frame's first byte.
    csum_start: u16,
    /// The segment payload size of a super-segment.
    gso_size: u16,
    /// The headers' length (Ethernet, IP, TCP) of a super-segment: what each cut segment repeats.
    hdr_len: u16,
    /// Where the checksum field is, from `csum_start` (16 for TCP, 6 for UDP).
    csum_offset: u8,
    flags: u8,
}

const _: () = assert!(size_of::<Offload>() == 8);

impl Offload {
    /// Nothing to offload, nothing reported: what every fresh buffer carries.
    pub const NONE: Self = Self { csum_start: 0, gso_size: 0, hdr_len: 0, csum_offset: 0, flags: 0 };

    /// Sending: the checksum field at `start + offset` holds only the pseudo-header sum, and the
    /// device sums the bytes from `start` to the frame's end into it (virtio-net's
    /// `VIRTIO_NET_HDR_F_NEEDS_CSUM`). Receiving: the frame arrived so, from a sender on this
    /// machine that left the checksum to the device; its payload was never on a wire.
    #[must_use]
    pub const fn with_partial_checksum(self, start: u16, offset: u8) -> Self {
        Self { csum_start: start, csum_offset: offset, flags: self.flags | PARTIAL, ..self }
    }

    /// The partial checksum's `(start, offset)`, if the frame has one.
    #[must_use]
    pub const fn partial_checksum(self) -> Option<(u16, u8)> {
        if self.flags & PARTIAL != 0 { Some((self.csum_start, self.csum_offset)) } else { None }
    }

    /// Receiving: the device verified the frame's IP and transport checksums
    /// (`VIRTIO_NET_HDR_F_DATA_VALID`).
    #[must_use]
    pub const fn with_checksum_verified(self) -> Self {
        Self { flags: self.flags | VERIFIED, ..self }
    }

    /// Whether the device verified the checksums.
    #[must_use]
    pub const fn checksum_verified(self) -> bool {
        self.flags & VERIFIED != 0
    }

    /// Whether a transport checksum on this frame need not be checked: verified by the device, or
    /// partial (never computed, the frame never left the machine).
    #[must_use]
    pub const fn checksum_trusted(self) -> bool {
        self.flags & (VERIFIED | PARTIAL) != 0
    }

    /// Sending: the frame is a TCP super-segment whose payload the device cuts into segments of
    /// `mss` bytes, each behind a copy of the first `header_len` bytes with the sequence number,
    /// lengths, identification and checksums fixed up (needs a partial checksum too). Receiving:
    /// the device coalesced segments of `mss` payload bytes into this frame.
    #[must_use]
    pub const fn with_segmentation(self, kind: GsoKind, mss: u16, header_len: u16) -> Self {
        let kind = match kind {
            GsoKind::Tcp4 => GSO_TCP4,
            GsoKind::Tcp6 => GSO_TCP6,
        };
        let flags = (self.flags & !(GSO_TCP4 | GSO_TCP6)) | kind;
        Self { gso_size: mss, hdr_len: header_len, flags, ..self }
    }

    /// The super-segment's `(kind, mss, header_len)`, if the frame is one.
    #[must_use]
    pub const fn segmentation(self) -> Option<(GsoKind, u16, u16)> {
        if self.flags & GSO_TCP4 != 0 {
            Some((GsoKind::Tcp4, self.gso_size, self.hdr_len))
        } else if self.flags & GSO_TCP6 != 0 {
            Some((GsoKind::Tcp6, self.gso_size, self.hdr_len))
        } else {
            None
        }
    }

    /// Sending a super-segment with CWR set on its first segment: the device sets CWR on the first
    /// cut only (`VIRTIO_NET_HDR_GSO_ECN`).
    #[must_use]
    pub const fn with_ecn(self) -> Self {
        Self { flags: self.flags | GSO_ECN, ..self }
    }

    /// Whether [`with_ecn`](Self::with_ecn) was asked.
    #[must_use]
    pub const fn ecn(self) -> bool {
        self.flags & GSO_ECN != 0
    }

    /// Nothing asked or reported.
    #[must_use]
    pub const fn is_none(self) -> bool {
        self.flags == 0
    }
}

impl fmt::Debug for Offload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_none() {
            return f.write_str("Offload::NONE");
        }
        let mut d = f.debug_struct("Offload");
        if let Some((start, offset)) = self.partial_checksum() {
            d.field("partial_checksum", &(start, offset));
        }
        if self.checksum_verified() {
            d.field("checksum_verified", &true);
        }
        if let Some(gso) = self.segmentation() {
            d.field("segmentation", &gso);
        }
        if self.ecn() {
            d.field("ecn", &true);
        }
        d.finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn builders_round_trip_and_compose() {
        let o = Offload::NONE;
        assert!(o.is_none() && !o.checksum_trusted());
        assert_eq!((o.partial_checksum(), o.segmentation()), (None, None));
        let p = o.with_partial_checksum(54, 16);
        assert_eq!(p.partial_checksum(), Some((54, 16)));
        assert!(p.checksum_trusted() && !p.checksum_verified());
        let g = p.with_segmentation(GsoKind::Tcp6, 1428, 74).with_ecn();
        assert_eq!(g.segmentation(), Some((GsoKind::Tcp6, 1428, 74)));
        assert_eq!(g.partial_checksum(), Some((54, 16)));
        assert!(g.ecn());
        // A second segmentation replaces the first kind rather than setting both.
        let g4 = g.with_segmentation(GsoKind::Tcp4, 1448, 54);
        assert_eq!(g4.segmentation(), Some((GsoKind::Tcp4, 1448, 54)));
        let v = Offload::NONE.with_checksum_verified();
        assert!(v.checksum_verified() && v.checksum_trusted() && v.partial_checksum().is_none());
        assert_eq!(format!("{o:?}"), "Offload::NONE");
        assert!(format!("{g:?}").contains("Tcp6"));
    }
}
