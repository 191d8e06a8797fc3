//! The frame classifier: how the driver side finds the transport [`Signature`] of a received Ethernet
//! frame, or why the frame is not a flow (other traffic, or damaged).
//!
//! # Classification
//!
//! [`classify`] parses Ethernet II with at most one 802.1Q tag, IPv4 (options skipped) or IPv6 (the usual
//! extension headers walked, at most [`MAX_EXTENSION_HEADERS`] of them), and the TCP or UDP ports. It only
//! steers: it verifies no checksum and accepts anything the stack will validate later, but it never reads
//! past the frame or past the IP packet's own length, never panics, and every byte it uses is bounds
//! checked. Ethernet padding after the IP packet is ignored.
//!
//! The common case is parsed apart: a frame of at least 54 bytes (Ethernet, IPv4 and TCP headers
//! without options; every frame on a wire is 60 or more) carrying IPv4 without a VLAN tag or IP
//! options, not a fragment, with TCP or UDP, is checked with one length compare and a few compares at
//! fixed offsets, inline in the caller. Anything else (VLAN tags, IP options, IPv6, other traffic,
//! short or damaged frames) goes to the general parser, out of line. Both give the same verdict on
//! every frame: the fast path only ever returns a flow that the general parser would return too.
//!
//! **Fragments** are never flows. An IPv4 packet with MF set or a non-zero fragment offset, and an IPv6
//! packet with a Fragment header (including an "atomic" fragment with offset 0 and M clear), classify as
//! [`Other::Fragment`]: only the first fragment carries the ports, so steering by signature would split
//! one datagram's pieces between a flow's channel and the default channel. Sending every piece to the
//! default channel lets the slow path see all of them, reassemble, and hand the datagram on.
//!
//! ```
//! use netchannel::classify::{classify, Classified};
//! use netchannel::signature::{FlowGroup, Proto};
//!
//! // Ethernet + IPv4 (10.0.0.2 -> 10.0.0.1) + UDP (5353 -> 53)
//! let mut frame = vec![0u8; 14 + 20 + 8];
//! frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
//! frame[14] = 0x45;
//! frame[16..18].copy_from_slice(&28u16.to_be_bytes());
//! frame[23] = 17;
//! frame[26..30].copy_from_slice(&[10, 0, 0, 2]);
//! frame[30..34].copy_from_slice(&[10, 0, 0, 1]);
//! frame[34..36].copy_from_slice(&5353u16.to_be_bytes());
//! frame[36..38].copy_from_slice(&53u16.to_be_bytes());
//!
//! let Classified::Flow { sig, flow_group } = classify(&frame) else { panic!("not a flow") };
//! assert_eq!(sig.proto(), Proto::Udp);
//! assert_eq!(sig.local(), "10.0.0.1:53".parse()?);
//! assert_eq!(sig.remote(), "10.0.0.2:5353".parse()?);
//! assert_eq!(flow_group, FlowGroup::of_port(5353));
//! assert_eq!(sig.to_string(), "udp 10.0.0.1:53 <- 10.0.0.2:5353");
//! assert_eq!(sig.to_listener().to_string(), "udp 10.0.0.1:53 <- *");
//! # Ok::<(), std::net::AddrParseError>(())
//! ```

use crate::signature::{FlowGroup, IPPROTO_TCP, IPPROTO_UDP, Proto, Signature, le64_at, meta};

// The classifier's verdict stays small: a signature and a flow group, or a reason.
const _: () = assert!(size_of::<Classified>() <= 48);

/// The most IPv6 extension headers [`classify`] walks before giving a packet to the default channel
/// ([`Other::TooManyExtensionHeaders`]). Real traffic carries zero to two.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// What [`classify`] found in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Classified {
    /// A TCP or UDP packet: look `sig` up in the registry.
    Flow {
        /// The packet's exact signature (local = its destination).
        sig: Signature,
        /// The flow group of its source port.
        flow_group: FlowGroup,
    },
    /// Well-formed as far as the classifier looked, but not a flow: it goes to the default channel.
    Other(Other),
    /// The frame is damaged: the channelizer counts it and gives it to the default channel or drops it.
    Malformed(Malformed),
}

impl Classified {
    /// The signature, for a [`Classified::Flow`].
    #[must_use]
    pub fn signature(&self) -> Option<&Signature> {
        match self {
            Self::Flow { sig, .. } => Some(sig),
            Self::Other(_) | Self::Malformed(_) => None,
        }
    }
}

/// Traffic that is not a flow and goes to the default channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Other {
    /// ARP (EtherType 0x0806).
    Arp,
    /// ICMP over IPv4 (protocol 1).
    Icmp,
    /// ICMPv6 (next header 58), including neighbour discovery.
    Icmpv6,
    /// An IPv4 fragment (MF set or offset non-zero) or an IPv6 packet with a Fragment header.
    Fragment,
    /// Another transport protocol or an extension header that ends the walk (ESP 50, No Next Header 59,
    /// Mobility, ...), with its protocol number.
    OtherL4(u8),
    /// Another EtherType, including a second VLAN tag (0x8100 inside one) and 802.1ad (0x88A8); an
    /// 802.3 length field (< 0x0600) shows up here too.
    OtherEtherType(u16),
    /// An IPv6 chain longer than [`MAX_EXTENSION_HEADERS`] extension headers.
    TooManyExtensionHeaders,
}

/// Why a frame is damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// A header, or the IP packet's declared length, runs past the end of the frame (or an extension
    /// or transport header past the end of the IP payload).
    Truncated,
    /// The IP version nibble does not match the EtherType.
    BadVersion,
    /// An IPv4 IHL below 5.
    BadHeaderLength,
    /// An IPv4 total length smaller than its header.
    BadTotalLength,
    /// A TCP data offset below 5.
    BadDataOffset,
}

/// Counters a channelizer keeps of what it classified.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassifyStats {
    /// TCP/UDP flows.
    pub flows: u64,
    /// [`Other::Arp`].
    pub arp: u64,
    /// [`Other::Icmp`] and [`Other::Icmpv6`].
    pub icmp: u64,
    /// [`Other::Fragment`].
    pub fragments: u64,
    /// [`Other::OtherL4`].
    pub other_l4: u64,
    /// [`Other::OtherEtherType`].
    pub other_ethertype: u64,
    /// [`Other::TooManyExtensionHeaders`].
    pub too_many_extension_headers: u64,
    /// [`Malformed::Truncated`].
    pub truncated: u64,
    /// [`Malformed::BadVersion`].
    pub bad_version: u64,
    /// [`Malformed::BadHeaderLength`].
    pub bad_header_length: u64,
    /// [`Malformed::BadTotalLength`].
    pub bad_total_length: u64,
    /// [`Malformed::BadDataOffset`].
    pub bad_data_offset: u64,
}

impl ClassifyStats {
    /// Counts one classification. Not inlined: a caller's loop would otherwise compute the address
    /// of every counter the match can pick before the loop (the channelizer did, eleven of them,
    /// before every burst), for frames that are rare on its hot path.
    #[inline(never)]
    pub fn record(&mut self, c: &Classified) {
        let counter = match c {
            Classified::Flow { .. } => &mut self.flows,
            Classified::Other(o) => match o {
                Other::Arp => &mut self.arp,
                Other::Icmp | Other::Icmpv6 => &mut self.icmp,
                Other::Fragment => &mut self.fragments,
                Other::OtherL4(_) => &mut self.other_l4,
                Other::OtherEtherType(_) => &mut self.other_ethertype,
                Other::TooManyExtensionHeaders => &mut self.too_many_extension_headers,
            },
            Classified::Malformed(m) => match m {
                Malformed::Truncated => &mut self.truncated,
                Malformed::BadVersion => &mut self.bad_version,
                Malformed::BadHeaderLength => &mut self.bad_header_length,
                Malformed::BadTotalLength => &mut self.bad_total_length,
                Malformed::BadDataOffset => &mut self.bad_data_offset,
            },
        };
        *counter = counter.wrapping_add(1);
    }

    /// Frames that went to the default channel as [`Classified::Other`].
    #[must_use]
    pub fn other(&self) -> u64 {
        self.arp
            .wrapping_add(self.icmp)
            .wrapping_add(self.fragments)
            .wrapping_add(self.other_l4)
            .wrapping_add(self.other_ethertype)
            .wrapping_add(self.too_many_extension_headers)
    }

    /// Frames that were [`Classified::Malformed`].
    #[must_use]
    pub fn malformed(&self) -> u64 {
        self.truncated
            .wrapping_add(self.bad_version)
            .wrapping_add(self.bad_header_length)
            .wrapping_add(self.bad_total_length)
            .wrapping_add(self.bad_data_offset)
    }

    /// All frames recorded.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.flows.wrapping_add(self.other()).wrapping_add(self.malformed())
    }
}

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType (TPID) of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;

const IPPROTO_HOPOPTS: u8 = 0;
const IPPROTO_ICMP: u8 = 1;
const IPPROTO_ROUTING: u8 = 43;
const IPPROTO_FRAGMENT: u8 = 44;
const IPPROTO_AH: u8 = 51;
const IPPROTO_ICMPV6: u8 = 58;
const IPPROTO_DSTOPTS: u8 = 60;

const TRUNCATED: Classified = Classified::Malformed(Malformed::Truncated);

/// Classifies one received Ethernet frame (without FCS): a flow with its signature and flow group,
/// other traffic for the default channel, or a malformed frame.
///
/// Never panics and never reads outside `frame`; see the [module documentation](self#classification)
/// for what is checked and how fragments are treated.
#[inline]
pub fn classify(frame: &[u8]) -> Classified {
    match classify_fast(frame) {
        Some(sig) => Classified::Flow { sig, flow_group: sig.flow_group() },
        None => classify_general(frame),
    }
}

/// The bytes the fast path reads: Ethernet (14) + IPv4 without options (20) + TCP without options
/// (20). Every frame on a real wire has them (the Ethernet minimum is 60 bytes without FCS), UDP
/// included.
const FAST_LEN: usize = 14 + 20 + 20;

/// The common case, read at fixed offsets from the first [`FAST_LEN`] bytes: Ethernet without a VLAN
/// tag, IPv4 without options and not a fragment, TCP or UDP whose header lies within the IP packet,
/// and the IP packet within the frame. `None` for anything else, which [`classify_general`] then
/// parses from the start; where this returns a flow, `classify_general` returns the same flow (the
/// `fast_path_agrees_with_the_general_parser` test checks it byte by byte).
///
/// It returns the bare signature, not a [`Classified`], so that a caller that inlines it (the
/// channelizer) keeps the signature's two live words in registers all the way into the registry
/// lookup, with the IPv6 words known to be zero.
#[inline(always)]
pub(crate) fn classify_fast(frame: &[u8]) -> Option<Signature> {
    let h = frame.first_chunk::<FAST_LEN>()?;
    // Bytes of the frame past the first `FAST_LEN`.
    let spare = frame.len() - FAST_LEN;
    // EtherType IPv4 straight after the MAC addresses (no VLAN tag), version 4 with IHL 5 (no
    // options), MF and the fragment offset zero (not a fragment). Each is a compare of a constant with
    // the bytes in memory, in wire byte order.
    if u16::from_ne_bytes([h[12], h[13]]) != NE_IPV4 || h[14] != 0x45 || ne16(h, 20)? & NE_FRAGMENT_MASK != 0
    {
        return None;
    }
    let total_len = usize::from(u16::from_be_bytes([h[16], h[17]]));
    let protocol = h[23];
    let proto = if protocol == IPPROTO_TCP {
        // `20 <= data_offset` and `20 + data_offset <= total_len <= frame.len() - 14`: the TCP header
        // within the IP packet, the IP packet within the frame. As two range checks: `total_len - 40`
        // (wrapping when the packet cannot hold a minimal TCP header) at most `spare`, then
        // `data_offset - 20` (wrapping when the offset is below 5) at most `total_len - 40`.
        let data_offset = usize::from(h[46] >> 4) * 4;
        let excess = total_len.wrapping_sub(40);
        if excess > spare || data_offset.wrapping_sub(20) > excess {
            return None;
        }
        Proto::Tcp
    } else if protocol == IPPROTO_UDP {
        std::hint::cold_path();
        // `28 <= total_len <= frame.len() - 14`: the UDP header within the IP packet, the packet
        // within the frame (`spare + 12` is `frame.len() - 42`).
        if total_len.wrapping_sub(28) > spare + 12 {
            return None;
        }
        Proto::Udp
    } else {
        return None;
    };
    let ports = [h[34], h[35], h[36], h[37]];
    Some(Signature {
        meta: meta(ports, proto, false),
        // One 8-byte load: source then destination address, as the general parser stores them.
        addrs: [le64_at(h, 26), 0, 0, 0],
    })
}

/// The 2 bytes of `h` at the constant offset `at`, as one native-endian load (`None` past the end,
/// which the callers' constant offsets rule out: the fallback keeps the fast path panic-free).
#[inline(always)]
fn ne16(h: &[u8; FAST_LEN], at: usize) -> Option<u16> {
    let b: &[u8; 2] = h.get(at..at.wrapping_add(2))?.try_into().ok()?;
    Some(u16::from_ne_bytes(*b))
}

/// Every frame the fast path does not take, parsed field by field. Out of line, so that the fast path
/// inlined into the channelizer stays small.
#[inline(never)]
#[cold]
pub(crate) fn classify_general(frame: &[u8]) -> Classified {
    let Some(eth) = frame.first_chunk::<14>() else { return TRUNCATED };
    // EtherTypes are compared in wire byte order (`NE_*`): no byte swap. With a VLAN tag the real
    // EtherType is the 2 bytes before the IP header, as it is without one.
    let l3_at = if u16::from_ne_bytes([eth[12], eth[13]]) == NE_VLAN { 18 } else { 14 };
    let Some((head, l3)) = frame.split_at_checked(l3_at) else { return TRUNCATED };
    let Some(&ethertype) = head.last_chunk::<2>() else { return TRUNCATED };
    let ethertype = u16::from_ne_bytes(ethertype);
    match ethertype {
        NE_IPV4 => ipv4(l3),
        NE_IPV6 => ipv6(l3),
        NE_ARP => Classified::Other(Other::Arp),
        other => Classified::Other(Other::OtherEtherType(u16::from_be(other))),
    }
}

const NE_IPV4: u16 = u16::from_ne_bytes(ETHERTYPE_IPV4.to_be_bytes());
const NE_IPV6: u16 = u16::from_ne_bytes(ETHERTYPE_IPV6.to_be_bytes());
const NE_ARP: u16 = u16::from_ne_bytes(ETHERTYPE_ARP.to_be_bytes());
const NE_VLAN: u16 = u16::from_ne_bytes(ETHERTYPE_VLAN.to_be_bytes());
/// MF and the fragment offset of the IPv4 flags/offset word, in wire byte order.
const NE_FRAGMENT_MASK: u16 = u16::from_ne_bytes(0x3fffu16.to_be_bytes());

#[inline(always)]
fn ipv4(packet: &[u8]) -> Classified {
    let Some(hdr) = packet.first_chunk::<20>() else { return TRUNCATED };
    // Version 4 and IHL 5 (no options) is nearly all traffic: one compare.
    let header_len = if hdr[0] == 0x45 {
        20
    } else {
        match ipv4_header_len(hdr[0], packet.len()) {
            Ok(len) => len,
            Err(c) => return c,
        }
    };
    let total_len = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
    // Checks `header_len <= total_len <= packet.len()`; Ethernet padding after `total_len` is ignored.
    let Some(l4) = packet.get(header_len..total_len) else { return ipv4_length_error(total_len, header_len) };
    // MF (0x2000) or a fragment offset (0x1fff): a fragment. The reserved and DF bits do not matter.
    if u16::from_ne_bytes([hdr[6], hdr[7]]) & NE_FRAGMENT_MASK != 0 {
        return Classified::Other(Other::Fragment);
    }
    // TCP tested first: it is the common case, and a `match` would test in numeric order (ICMP first).
    let protocol = hdr[9];
    let (proto, ports) = if protocol == IPPROTO_TCP {
        match tcp_ports(l4) {
            Ok(ports) => (Proto::Tcp, ports),
            Err(c) => return c,
        }
    } else if protocol == IPPROTO_UDP {
        match udp_ports(l4) {
            Ok(ports) => (Proto::Udp, ports),
            Err(c) => return c,
        }
    } else if protocol == IPPROTO_ICMP {
        return Classified::Other(Other::Icmp);
    } else {
        return Classified::Other(Other::OtherL4(protocol));
    };
    // The signature is the header bytes as they are: source and destination address in one word.
    Classified::Flow {
        sig: Signature { meta: meta(ports, proto, false), addrs: [le64_at(hdr, 12), 0, 0, 0] },
        flow_group: FlowGroup::of_port(u16::from_be_bytes([ports[0], ports[1]])),
    }
}

/// The header length of an IPv4 header whose first byte is not `0x45`, or why there is none.
#[cold]
fn ipv4_header_len(first: u8, packet_len: usize) -> Result<usize, Classified> {
    if first >> 4 != 4 {
        return Err(Classified::Malformed(Malformed::BadVersion));
    }
    let header_len = usize::from(first & 0x0f) * 4;
    if header_len < 20 {
        Err(Classified::Malformed(Malformed::BadHeaderLength))
    } else if header_len > packet_len {
        Err(TRUNCATED)
    } else {
        Ok(header_len)
    }
}

/// Why `header_len..total_len` is not within the packet (`header_len` is).
#[cold]
fn ipv4_length_error(total_len: usize, header_len: usize) -> Classified {
    if total_len < header_len { Classified::Malformed(Malformed::BadTotalLength) } else { TRUNCATED }
}

/// The port bytes of a TCP header at the start of `l4` (the IP payload): the header must be whole.
#[inline(always)]
fn tcp_ports(l4: &[u8]) -> Result<[u8; 4], Classified> {
    let Some(tcp) = l4.first_chunk::<20>() else { return Err(TRUNCATED) };
    let data_offset = usize::from(tcp[12] >> 4) * 4;
    // `20 <= data_offset <= l4.len()` in one compare: below 20 wraps around to a huge value.
    if data_offset.wrapping_sub(20) > l4.len().wrapping_sub(20) {
        return Err(tcp_data_offset_error(data_offset));
    }
    Ok([tcp[0], tcp[1], tcp[2], tcp[3]])
}

#[cold]
fn tcp_data_offset_error(data_offset: usize) -> Classified {
    if data_offset < 20 { Classified::Malformed(Malformed::BadDataOffset) } else { TRUNCATED }
}

/// The port bytes of a UDP header at the start of `l4`.
#[inline(always)]
fn udp_ports(l4: &[u8]) -> Result<[u8; 4], Classified> {
    match l4.first_chunk::<8>() {
        Some(udp) => Ok([udp[0], udp[1], udp[2], udp[3]]),
        None => Err(TRUNCATED),
    }
}

#[inline(always)]
fn ipv6(packet: &[u8]) -> Classified {
    let Some((hdr, rest)) = packet.split_first_chunk::<40>() else { return TRUNCATED };
    if hdr[0] >> 4 != 6 {
        return Classified::Malformed(Malformed::BadVersion);
    }
    // A payload length of 0 with a Hop-by-Hop header would be a jumbogram, which no Ethernet frame
    // carries: the walk finds the payload too short and calls it truncated.
    let payload_len = usize::from(u16::from_be_bytes([hdr[4], hdr[5]]));
    let Some(mut payload) = rest.get(..payload_len) else { return TRUNCATED };
    let mut next = hdr[6];
    let mut headers = 0;
    loop {
        let len = match next {
            IPPROTO_TCP | IPPROTO_UDP => break,
            IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS | IPPROTO_AH => {
                if headers == MAX_EXTENSION_HEADERS {
                    return Classified::Other(Other::TooManyExtensionHeaders);
                }
                headers += 1;
                let Some(ext) = payload.first_chunk::<2>() else { return TRUNCATED };
                // AH counts 4-byte units minus 2 (RFC 4302); the others 8-byte units minus 1 (RFC 8200).
                let len = if next == IPPROTO_AH {
                    (usize::from(ext[1]) + 2) * 4
                } else {
                    (usize::from(ext[1]) + 1) * 8
                };
                next = ext[0];
                len
            }
            IPPROTO_FRAGMENT => {
                return if payload.len() < 8 { TRUNCATED } else { Classified::Other(Other::Fragment) };
            }
            IPPROTO_ICMPV6 => return Classified::Other(Other::Icmpv6),
            other => return Classified::Other(Other::OtherL4(other)),
        };
        let Some(after) = payload.get(len..) else { return TRUNCATED };
        payload = after;
    }
    let (proto, ports) = match next {
        IPPROTO_TCP => match tcp_ports(payload) {
            Ok(ports) => (Proto::Tcp, ports),
            Err(c) => return c,
        },
        // UDP: the walk above stops only at TCP or UDP.
        _ => match udp_ports(payload) {
            Ok(ports) => (Proto::Udp, ports),
            Err(c) => return c,
        },
    };
    // Source then destination address, as they are in the header (`hdr` is 40 bytes: the constant
    // offsets are in bounds, and `le64_at` would give 0 rather than panic if they were not).
    Classified::Flow {
        sig: Signature {
            meta: meta(ports, proto, true),
            addrs: [le64_at(hdr, 8), le64_at(hdr, 16), le64_at(hdr, 24), le64_at(hdr, 32)],
        },
        flow_group: FlowGroup::of_port(u16::from_be_bytes([ports[0], ports[1]])),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::SocketAddr;

    // ---- frame builders -------------------------------------------------------------------------

    fn eth(vlan: Option<u16>, ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        if let Some(tci) = vlan {
            f.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn ipv4(proto: u8, src: [u8; 4], dst: [u8; 4], options: usize, frag: u16, l4: &[u8]) -> Vec<u8> {
        assert!(options.is_multiple_of(4) && options <= 40);
        let hl = 20 + options;
        let total = u16::try_from(hl + l4.len()).unwrap();
        let mut p = vec![0u8; hl];
        p[0] = 0x40 | u8::try_from(hl / 4).unwrap();
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[6..8].copy_from_slice(&frag.to_be_bytes());
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        for (i, b) in p[20..].iter_mut().enumerate() {
            *b = if i == 0 { 1 } else { 0xAA }; // NOP then junk: never interpreted
        }
        p.extend_from_slice(l4);
        p
    }

    /// `ext`: (header type, length parameter) in order; the AH parameter counts 4-byte units - 2,
    /// the others 8-byte units - 1.
    fn ipv6(next: u8, src: [u8; 16], dst: [u8; 16], ext: &[(u8, u8)], l4: &[u8]) -> Vec<u8> {
        let mut payload = Vec::new();
        for (i, &(kind, n)) in ext.iter().enumerate() {
            let following = ext.get(i + 1).map_or(next, |e| e.0);
            let len = match kind {
                IPPROTO_AH => (usize::from(n) + 2) * 4,
                IPPROTO_FRAGMENT => 8,
                _ => (usize::from(n) + 1) * 8,
            };
            let mut h = vec![0x55u8; len];
            h[0] = following;
            h[1] = n;
            payload.extend_from_slice(&h);
        }
        payload.extend_from_slice(l4);
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
        p[6] = ext.first().map_or(next, |e| e.0);
        p[7] = 64;
        p[8..24].copy_from_slice(&src);
        p[24..40].copy_from_slice(&dst);
        p.extend_from_slice(&payload);
        p
    }

    fn tcp(sport: u16, dport: u16, data_offset: u8, payload: usize) -> Vec<u8> {
        let hl = usize::from(data_offset.max(5)) * 4;
        let mut t = vec![0u8; hl + payload];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[12] = data_offset << 4;
        t[13] = 0x02;
        t
    }

    fn udp(sport: u16, dport: u16, payload: usize) -> Vec<u8> {
        let mut u = vec![0u8; 8 + payload];
        u[0..2].copy_from_slice(&sport.to_be_bytes());
        u[2..4].copy_from_slice(&dport.to_be_bytes());
        u[4..6].copy_from_slice(&u16::try_from(8 + payload).unwrap().to_be_bytes());
        u
    }

    const A4: [u8; 4] = [10, 0, 0, 2];
    const B4: [u8; 4] = [10, 0, 0, 1];
    const A6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    const B6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

    pub(crate) fn v4_tcp_frame() -> Vec<u8> {
        eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 0, 0x4000, &tcp(40000, 80, 5, 10)))
    }
    fn v4_udp_vlan_frame() -> Vec<u8> {
        eth(Some(0x0064), ETHERTYPE_IPV4, &ipv4(17, A4, B4, 8, 0, &udp(5353, 53, 3)))
    }
    fn v6_tcp_ext_frame() -> Vec<u8> {
        eth(None, ETHERTYPE_IPV6, &ipv6(6, A6, B6, &[(IPPROTO_DSTOPTS, 1)], &tcp(50001, 443, 8, 4)))
    }

    pub(crate) fn flow(c: Classified) -> (Signature, FlowGroup) {
        match c {
            Classified::Flow { sig, flow_group } => (sig, flow_group),
            other => panic!("expected a flow, got {other:?}"),
        }
    }

    pub(crate) fn sock(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    // ---- classification ---------------------------------------------------------------------------

    #[test]
    fn ipv4_tcp() {
        let (sig, group) = flow(classify(&v4_tcp_frame()));
        assert_eq!(sig, Signature::new(Proto::Tcp, sock("10.0.0.1:80"), sock("10.0.0.2:40000")).unwrap());
        assert_eq!(group, FlowGroup(40000 & 0xfff));
        assert_eq!(sig.flow_group(), group);
    }

    #[test]
    fn ipv4_udp_vlan_with_options() {
        let (sig, group) = flow(classify(&v4_udp_vlan_frame()));
        assert_eq!(sig, Signature::new(Proto::Udp, sock("10.0.0.1:53"), sock("10.0.0.2:5353")).unwrap());
        assert_eq!(group, FlowGroup::of_port(5353));
    }

    #[test]
    fn ipv4_max_options_and_tcp_options() {
        let f = eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 40, 0, &tcp(1, 2, 15, 0)));
        let (sig, _) = flow(classify(&f));
        assert_eq!((sig.remote().port(), sig.local().port()), (1, 2));
    }

    #[test]
    fn ethernet_padding_is_ignored() {
        // A 40-byte IPv4/TCP packet padded to the 60-byte Ethernet minimum with non-zero junk.
        let mut f = eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 0, 0, &tcp(7, 8, 5, 0)));
        f.resize(60, 0xEE);
        let (sig, _) = flow(classify(&f));
        assert_eq!(sig.remote(), sock("10.0.0.2:7"));
        // Padding that looks like a bigger TCP header changes nothing: the IP length bounds the walk.
        let mut f = eth(None, ETHERTYPE_IPV4, &ipv4(17, A4, B4, 0, 0, &udp(9, 10, 0)));
        f.resize(60, 0xFF);
        assert!(matches!(classify(&f), Classified::Flow { .. }));
    }

    #[test]
    fn ipv4_fragments() {
        for frag in [0x2000, 0x0001, 0x00b9, 0x2001, 0x3fff, 0x6000] {
            let f = eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 0, frag, &tcp(1, 2, 5, 0)));
            assert_eq!(classify(&f), Classified::Other(Other::Fragment), "frag field {frag:#x}");
        }
        // DF alone, or the reserved bit: not a fragment.
        for frag in [0x4000, 0x8000] {
            let f = eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 0, frag, &tcp(1, 2, 5, 0)));
            assert!(matches!(classify(&f), Classified::Flow { .. }));
        }
        // A non-first fragment whose payload is too short for a TCP header is still a fragment.
        let f = eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 0, 0x0010, &[0; 3]));
        assert_eq!(classify(&f), Classified::Other(Other::Fragment));
    }

    #[test]
    fn ipv4_other_protocols() {
        let f = eth(None, ETHERTYPE_IPV4, &ipv4(1, A4, B4, 0, 0, &[8, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(classify(&f), Classified::Other(Other::Icmp));
        let f = eth(None, ETHERTYPE_IPV4, &ipv4(47, A4, B4, 0, 0, &[0; 4]));
        assert_eq!(classify(&f), Classified::Other(Other::OtherL4(47)));
        // ICMPv6's number over IPv4 is just another protocol.
        let f = eth(None, ETHERTYPE_IPV4, &ipv4(58, A4, B4, 0, 0, &[]));
        assert_eq!(classify(&f), Classified::Other(Other::OtherL4(58)));
    }

    #[test]
    fn ipv4_malformed() {
        let good = ipv4(6, A4, B4, 0, 0, &tcp(1, 2, 5, 0));
        let mal = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut p = good.clone();
            edit(&mut p);
            classify(&eth(None, ETHERTYPE_IPV4, &p))
        };
        let m = Classified::Malformed;
        assert_eq!(mal(&|p| p[0] = 0x65), m(Malformed::BadVersion));
        assert_eq!(mal(&|p| p[0] = 0x05), m(Malformed::BadVersion));
        assert_eq!(mal(&|p| p[0] = 0x44), m(Malformed::BadHeaderLength));
        assert_eq!(mal(&|p| p[0] = 0x40), m(Malformed::BadHeaderLength));
        assert_eq!(mal(&|p| p[2..4].copy_from_slice(&19u16.to_be_bytes())), m(Malformed::BadTotalLength));
        assert_eq!(mal(&|p| p[2..4].copy_from_slice(&41u16.to_be_bytes())), m(Malformed::Truncated));
        // IHL says 60 bytes, the frame holds 40: truncated, though the total length (40) is also short.
        assert_eq!(mal(&|p| p[0] = 0x4f), m(Malformed::Truncated));
        // IHL 6 makes the TCP header start 4 bytes later: only 16 bytes of it remain.
        assert_eq!(mal(&|p| p[0] = 0x46), m(Malformed::Truncated));
        // TCP data offset below 5, or beyond the packet.
        assert_eq!(mal(&|p| p[32] = 0x40), m(Malformed::BadDataOffset));
        assert_eq!(mal(&|p| p[32] = 0x00), m(Malformed::BadDataOffset));
        assert_eq!(mal(&|p| p[32] = 0x60), m(Malformed::Truncated));
        // A UDP packet with only 7 bytes of UDP header.
        let f = eth(None, ETHERTYPE_IPV4, &ipv4(17, A4, B4, 0, 0, &[0; 7]));
        assert_eq!(classify(&f), m(Malformed::Truncated));
        // EtherType IPv6 carrying an IPv4 header.
        assert_eq!(classify(&eth(None, ETHERTYPE_IPV6, &ipv6_padded(&good))), m(Malformed::BadVersion));
    }

    fn ipv6_padded(p: &[u8]) -> Vec<u8> {
        let mut v = p.to_vec();
        v.resize(60, 0);
        v
    }

    #[test]
    fn ethertypes() {
        assert_eq!(classify(&eth(None, ETHERTYPE_ARP, &[0; 28])), Classified::Other(Other::Arp));
        assert_eq!(classify(&eth(Some(5), ETHERTYPE_ARP, &[0; 28])), Classified::Other(Other::Arp));
        // Two 802.1Q tags (or 802.1ad outside): not parsed further.
        let inner = eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 0, 0, &tcp(1, 2, 5, 0)));
        let qinq = eth(Some(1), ETHERTYPE_VLAN, &[&[0, 2][..], &inner[12..]].concat());
        assert_eq!(classify(&qinq), Classified::Other(Other::OtherEtherType(ETHERTYPE_VLAN)));
        assert_eq!(classify(&eth(None, 0x88A8, &[0; 50])), Classified::Other(Other::OtherEtherType(0x88A8)));
        assert_eq!(classify(&eth(None, 0x05DC, &[0; 50])), Classified::Other(Other::OtherEtherType(0x05DC)));
        // Short frames.
        assert_eq!(classify(&[]), TRUNCATED);
        assert_eq!(classify(&[0; 13]), TRUNCATED);
        assert_eq!(classify(&eth(None, 0x1234, &[])), Classified::Other(Other::OtherEtherType(0x1234)));
        assert_eq!(classify(&eth(None, ETHERTYPE_VLAN, &[0, 1, 0x08])), TRUNCATED);
    }

    #[test]
    fn ipv6_tcp_and_udp() {
        let (sig, group) =
            flow(classify(&eth(None, ETHERTYPE_IPV6, &ipv6(6, A6, B6, &[], &tcp(1, 2, 5, 0)))));
        assert_eq!(
            sig,
            Signature::new(Proto::Tcp, sock("[2001:db8::1]:2"), sock("[2001:db8::2]:1")).unwrap()
        );
        assert_eq!(group, FlowGroup(1));
        let (sig, group) =
            flow(classify(&eth(Some(7), ETHERTYPE_IPV6, &ipv6(17, A6, B6, &[], &udp(0xFFFF, 3, 100)))));
        assert_eq!(sig.proto(), Proto::Udp);
        assert_eq!(group, FlowGroup(0x0FFF));
        let (sig, _) = flow(classify(&v6_tcp_ext_frame()));
        assert_eq!(sig.local(), sock("[2001:db8::1]:443"));
        assert_eq!(sig.remote(), sock("[2001:db8::2]:50001"));
    }

    #[test]
    fn ipv6_extension_headers() {
        let chains: [&[(u8, u8)]; 6] = [
            &[(IPPROTO_HOPOPTS, 0)],
            &[(IPPROTO_ROUTING, 2)],
            &[(IPPROTO_DSTOPTS, 255)],
            &[(IPPROTO_AH, 4)],
            &[(IPPROTO_HOPOPTS, 0), (IPPROTO_DSTOPTS, 1), (IPPROTO_ROUTING, 0), (IPPROTO_AH, 1)],
            &[(IPPROTO_AH, 0); MAX_EXTENSION_HEADERS],
        ];
        for chain in chains {
            let f = eth(None, ETHERTYPE_IPV6, &ipv6(17, A6, B6, chain, &udp(4242, 4343, 0)));
            let (sig, _) = flow(classify(&f));
            assert_eq!(sig.remote().port(), 4242, "{chain:?}");
            assert_eq!(sig.local().port(), 4343, "{chain:?}");
        }
        let too_many = [(IPPROTO_DSTOPTS, 0); MAX_EXTENSION_HEADERS + 1];
        let f = eth(None, ETHERTYPE_IPV6, &ipv6(6, A6, B6, &too_many, &tcp(1, 2, 5, 0)));
        assert_eq!(classify(&f), Classified::Other(Other::TooManyExtensionHeaders));
    }

    #[test]
    fn ipv6_non_flows() {
        let c = |next: u8, ext: &[(u8, u8)], l4: &[u8]| {
            classify(&eth(None, ETHERTYPE_IPV6, &ipv6(next, A6, B6, ext, l4)))
        };
        let frag = [(IPPROTO_FRAGMENT, 0)];
        assert_eq!(c(6, &frag, &tcp(1, 2, 5, 0)), Classified::Other(Other::Fragment));
        assert_eq!(
            c(6, &[(IPPROTO_HOPOPTS, 0), (IPPROTO_FRAGMENT, 0)], &[]),
            Classified::Other(Other::Fragment)
        );
        assert_eq!(c(58, &[], &[135, 0, 0, 0]), Classified::Other(Other::Icmpv6));
        assert_eq!(c(58, &[(IPPROTO_HOPOPTS, 0)], &[143, 0, 0, 0]), Classified::Other(Other::Icmpv6));
        assert_eq!(c(50, &[], &[0; 16]), Classified::Other(Other::OtherL4(50)));
        assert_eq!(c(59, &[], &[]), Classified::Other(Other::OtherL4(59)));
        assert_eq!(c(59, &[(IPPROTO_DSTOPTS, 0)], &[]), Classified::Other(Other::OtherL4(59)));
        assert_eq!(c(1, &[], &[]), Classified::Other(Other::OtherL4(1)));
        assert_eq!(c(135, &[], &[]), Classified::Other(Other::OtherL4(135)));
    }

    #[test]
    fn ipv6_malformed() {
        let good = ipv6(6, A6, B6, &[(IPPROTO_ROUTING, 1)], &tcp(1, 2, 5, 0));
        let mal = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut p = good.clone();
            edit(&mut p);
            classify(&eth(None, ETHERTYPE_IPV6, &p))
        };
        let m = Classified::Malformed;
        assert_eq!(mal(&|p| p[0] = 0x40), m(Malformed::BadVersion));
        // Payload length longer than the frame.
        assert_eq!(mal(&|p| p[4..6].copy_from_slice(&57u16.to_be_bytes())), m(Malformed::Truncated));
        // Payload length cutting the TCP header, or the extension header.
        assert_eq!(mal(&|p| p[4..6].copy_from_slice(&35u16.to_be_bytes())), m(Malformed::Truncated));
        assert_eq!(mal(&|p| p[4..6].copy_from_slice(&20u16.to_be_bytes())), m(Malformed::Truncated));
        assert_eq!(mal(&|p| p[4..6].copy_from_slice(&1u16.to_be_bytes())), m(Malformed::Truncated));
        assert_eq!(mal(&|p| p[4..6].copy_from_slice(&0u16.to_be_bytes())), m(Malformed::Truncated));
        // An extension header length pointing past the payload.
        assert_eq!(mal(&|p| p[41] = 200), m(Malformed::Truncated));
        // A TCP data offset below 5.
        assert_eq!(mal(&|p| p[40 + 16 + 12] = 0x10), m(Malformed::BadDataOffset));
        // A Fragment header cut short.
        let f = eth(None, ETHERTYPE_IPV6, &ipv6(6, A6, B6, &[], &[]));
        let mut p = f[14..].to_vec();
        p[6] = IPPROTO_FRAGMENT;
        p.extend_from_slice(&[6, 0, 0, 0]);
        p[4..6].copy_from_slice(&4u16.to_be_bytes());
        assert_eq!(classify(&eth(None, ETHERTYPE_IPV6, &p)), m(Malformed::Truncated));
    }

    /// The fast path never changes a verdict: on frames that differ from IPv4/TCP and IPv4/UDP ones in
    /// any one byte it reads (and in the IP length and TCP data offset together), cut or padded to
    /// lengths around the IP packet's, [`classify`] agrees with [`classify_general`].
    #[test]
    fn fast_path_agrees_with_the_general_parser() {
        let check = |f: &[u8]| {
            for len in FAST_LEN - 1..=f.len() {
                let f = &f[..len];
                assert_eq!(classify(f), classify_general(f), "{f:02x?}");
            }
        };
        let mut bases = vec![
            v4_tcp_frame(),
            eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 0, 0, &tcp(1, 2, 8, 0))),
            eth(None, ETHERTYPE_IPV4, &ipv4(17, A4, B4, 0, 0, &udp(5353, 53, 12))),
        ];
        for b in bases.iter_mut() {
            b.resize(b.len() + 24, 0xEE);
        }
        let mut fast = 0;
        for base in &bases {
            assert!(matches!(classify(base), Classified::Flow { .. }));
            for at in 0..FAST_LEN {
                for v in 0..=u8::MAX {
                    let mut f = base.clone();
                    f[at] = v;
                    check(&f);
                }
            }
            for total in 0..=u8::MAX {
                for data_offset in 0..16u8 {
                    let mut f = base.clone();
                    f[17] = total;
                    f[46] = data_offset << 4;
                    check(&f);
                    fast += usize::from(classify_fast(&f).is_some());
                }
            }
        }
        // The sweep does exercise the fast path, not only its refusals.
        assert!(fast > 500, "{fast}");
    }

    /// Every strict prefix of a valid, unpadded frame is truncated: the IP length always says more.
    #[test]
    fn every_truncation_point() {
        let frames = [
            v4_tcp_frame(),
            v4_udp_vlan_frame(),
            v6_tcp_ext_frame(),
            eth(
                Some(9),
                ETHERTYPE_IPV6,
                &ipv6(17, A6, B6, &[(IPPROTO_HOPOPTS, 0), (IPPROTO_AH, 2)], &udp(1, 2, 0)),
            ),
            eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 40, 0, &tcp(1, 2, 15, 0))),
        ];
        for frame in frames {
            assert!(matches!(classify(&frame), Classified::Flow { .. }));
            for len in 0..frame.len() {
                assert_eq!(classify(&frame[..len]), TRUNCATED, "prefix of {len} of {frame:02x?}");
            }
        }
    }

    #[test]
    fn stats() {
        let mut s = ClassifyStats::default();
        let frames = [
            v4_tcp_frame(),
            v6_tcp_ext_frame(),
            eth(None, ETHERTYPE_ARP, &[0; 28]),
            eth(None, 0x88CC, &[]),
            eth(None, ETHERTYPE_IPV4, &ipv4(1, A4, B4, 0, 0, &[0; 8])),
            eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 0, 0x2000, &[0; 8])),
            vec![0; 3],
        ];
        for f in &frames {
            s.record(&classify(f));
        }
        assert_eq!((s.flows, s.arp, s.other_ethertype, s.icmp, s.fragments, s.truncated), (2, 1, 1, 1, 1, 1));
        assert_eq!((s.other(), s.malformed(), s.total()), (4, 1, 7));
    }
}
