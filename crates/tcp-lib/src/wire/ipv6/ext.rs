//! IPv6 extension headers (RFC 8200 §4): the walk from the fixed header to the upper-layer header.
//!
//! The walk follows Next Header values through Hop-by-Hop Options (§4.3), Routing (§4.4), Fragment
//! (§4.5) and Destination Options (§4.6) headers, in the order they come, and stops at the first
//! value that is none of these: the upper-layer protocol (TCP, UDP, ICMPv6, "no next header", or any
//! other, which the caller judges). Other extension headers of RFC 7045's list (AH, ESP, Mobility,
//! HIP, Shim6) are reported as the upper layer too: this stack handles none of them.
//!
//! # Policy
//!
//! * **Bounds** (RFC 7045 §2.2 and RFC 9098 §6 ask a node to be able to walk a chain, and to be
//!   free to refuse one that is too long): at most [`MAX_HEADERS`] extension headers and
//!   [`MAX_CHAIN_LEN`] bytes of them. A longer chain is [`Error::Unrecognized`], never a panic and
//!   never an unbounded loop.
//! * **Order:** Hop-by-Hop Options only directly after the IPv6 header (RFC 8200 §4.1), else
//!   [`Error::Malformed`]. A second Fragment header is [`Error::Malformed`].
//! * **Options** of Hop-by-Hop and Destination Options headers (RFC 8200 §4.2) are walked: Pad1,
//!   PadN and any option whose action bits (the two high bits of its type) are `00` ("skip over this
//!   option") are skipped; an option of another unrecognized type asks the node to discard the
//!   packet, which the walk reports as [`Error::Unrecognized`] (this includes the Jumbo Payload
//!   option of RFC 2675: jumbograms are not supported). An option that runs past its header is
//!   [`Error::Malformed`].
//! * **Routing:** type 0 is refused ([`Error::Unrecognized`]; RFC 5095 deprecates it). A header of
//!   another type with segments left zero is skipped (RFC 8200 §4.4); with segments left non-zero
//!   this host would have to forward the packet, which it does not: [`Error::Unrecognized`].
//! * **Fragment:** an atomic fragment (offset zero, M clear; RFC 6946) is walked through as if the
//!   header were not there. A real fragment stops the walk right after its Fragment header: what
//!   follows is a piece of the fragmentable part, to be reassembled
//!   ([`reassembly`](super::reassembly)); [`Walk::fragment`] holds its fields.

use super::super::ipv4::Protocol;
use super::super::{Error, Result, be16, be32, put16, put32};

/// The most extension headers a walk follows.
pub const MAX_HEADERS: usize = 8;
/// The most bytes of extension headers a walk follows.
pub const MAX_CHAIN_LEN: usize = 1024;

/// The fields of a Fragment header (RFC 8200 §4.5): 8 bytes, next header (1), reserved (1),
/// fragment offset (13 bits, in 8-byte units), two reserved bits and the M flag, identification (4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragmentHeader {
    /// The Next Header of the fragmentable part.
    pub next_header: Protocol,
    /// The offset of this fragment's data in the fragmentable part, in bytes (a multiple of 8).
    pub offset: u16,
    /// The M flag: more fragments follow.
    pub more_frags: bool,
    /// The identification that the fragments of one packet share.
    pub ident: u32,
}

impl FragmentHeader {
    /// The length of a Fragment header.
    pub const LEN: usize = 8;

    /// Whether this is a real fragment: a non-zero offset or M set. One that is neither is an
    /// atomic fragment (RFC 6946), a whole packet.
    #[must_use]
    pub const fn is_fragment(&self) -> bool {
        self.offset != 0 || self.more_frags
    }

    /// Parses a Fragment header from the first 8 bytes of `bytes`.
    ///
    /// # Errors
    /// [`Error::Truncated`] if `bytes` is shorter than 8.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < Self::LEN {
            return Err(Error::Truncated);
        }
        let off = be16(bytes, 2);
        Ok(Self {
            next_header: Protocol::from(bytes[0]),
            offset: off & !0x7,
            more_frags: off & 1 != 0,
            ident: be32(bytes, 4),
        })
    }

    /// Writes the header into the first 8 bytes of `bytes` (reserved fields zero; the low three
    /// bits of `offset` are dropped).
    ///
    /// # Panics
    /// If `bytes` is shorter than 8 (a caller bug).
    pub fn emit(&self, bytes: &mut [u8]) {
        bytes[0] = self.next_header.into();
        bytes[1] = 0;
        put16(bytes, 2, (self.offset & !0x7) | u16::from(self.more_frags));
        put32(bytes, 4, self.ident);
    }
}

/// Where a walk of the extension headers ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Walk {
    /// The upper-layer protocol; after a real fragment, the Next Header of its Fragment header.
    pub protocol: Protocol,
    /// Where the upper-layer header (or, after a real fragment, the fragment's data) starts, from
    /// the start of the IPv6 payload.
    pub offset: usize,
    /// The Fragment header, if the chain has one.
    pub fragment: Option<FragmentHeader>,
    /// How many extension headers the walk went through.
    pub headers: usize,
}

/// Walks the extension headers at the start of `payload` (an IPv6 payload whose first header is
/// `first`, the Next Header of the fixed header). See the module documentation for the policy.
///
/// # Errors
/// [`Error::Truncated`] when a header runs past `payload`; [`Error::Malformed`] and
/// [`Error::Unrecognized`] as the module documentation says.
#[inline]
pub fn walk(first: Protocol, payload: &[u8]) -> Result<Walk> {
    let walk = Walk { protocol: first, offset: 0, fragment: None, headers: 0 };
    // The common case: no extension header at all.
    if !matches!(first, Protocol::HopByHop | Protocol::Ipv6Route | Protocol::Ipv6Opts | Protocol::Ipv6Frag) {
        return Ok(walk);
    }
    walk_headers(walk, payload)
}

/// [`walk`] past its first extension header.
fn walk_headers(mut walk: Walk, payload: &[u8]) -> Result<Walk> {
    loop {
        let len = match walk.protocol {
            Protocol::HopByHop | Protocol::Ipv6Route | Protocol::Ipv6Opts => {
                let header = payload.get(walk.offset..walk.offset + 2).ok_or(Error::Truncated)?;
                (usize::from(header[1]) + 1) * 8
            }
            Protocol::Ipv6Frag => FragmentHeader::LEN,
            _ => return Ok(walk),
        };
        if walk.headers == MAX_HEADERS || walk.offset + len > MAX_CHAIN_LEN {
            return Err(Error::Unrecognized);
        }
        let header = payload.get(walk.offset..walk.offset + len).ok_or(Error::Truncated)?;
        match walk.protocol {
            Protocol::HopByHop if walk.headers != 0 => return Err(Error::Malformed),
            Protocol::HopByHop | Protocol::Ipv6Opts => check_options(&header[2..])?,
            Protocol::Ipv6Route => {
                // Type 0 is deprecated (RFC 5095); with segments left, we would have to forward.
                if header[2] == 0 || header[3] != 0 {
                    return Err(Error::Unrecognized);
                }
            }
            _ => {
                if walk.fragment.is_some() {
                    return Err(Error::Malformed);
                }
                let fragment = FragmentHeader::parse(header)?;
                walk.fragment = Some(fragment);
                if fragment.is_fragment() {
                    walk.headers += 1;
                    walk.offset += len;
                    walk.protocol = fragment.next_header;
                    return Ok(walk);
                }
            }
        }
        walk.headers += 1;
        walk.offset += len;
        walk.protocol = Protocol::from(header[0]);
    }
}

/// Walks on from where `walk` stopped after a first fragment's Fragment header, through the
/// extension headers of the fragmentable part (in a first fragment or a reassembled packet).
///
/// # Errors
/// As [`walk`]; a Hop-by-Hop or another Fragment header is [`Error::Malformed`], and the bounds
/// count the whole chain.
pub fn walk_on(walk: Walk, payload: &[u8]) -> Result<Walk> {
    // Hop-by-Hop only directly after the IPv6 header, never after a Fragment header.
    if walk.protocol == Protocol::HopByHop {
        return Err(Error::Malformed);
    }
    let rest = payload.get(walk.offset..).ok_or(Error::Truncated)?;
    let on = self::walk(walk.protocol, rest)?;
    if on.fragment.is_some() {
        return Err(Error::Malformed);
    }
    if walk.headers + on.headers > MAX_HEADERS || walk.offset + on.offset > MAX_CHAIN_LEN {
        return Err(Error::Unrecognized);
    }
    Ok(Walk {
        protocol: on.protocol,
        offset: walk.offset + on.offset,
        fragment: walk.fragment,
        headers: walk.headers + on.headers,
    })
}

/// Checks the options of a Hop-by-Hop or Destination Options header (RFC 8200 §4.2).
fn check_options(mut options: &[u8]) -> Result<()> {
    while let Some((&kind, rest)) = options.split_first() {
        if kind == 0 {
            // Pad1.
            options = rest;
            continue;
        }
        let (&len, rest) = rest.split_first().ok_or(Error::Malformed)?;
        options = rest.get(usize::from(len)..).ok_or(Error::Malformed)?;
        // PadN (1) has action bits 00 like every option to skip; any other action discards.
        if kind >> 6 != 0 {
            return Err(Error::Unrecognized);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An options header: next header, length, then `body` (padded by the caller to a multiple of
    /// 8 minus 2).
    fn opts(next: u8, body: &[u8]) -> Vec<u8> {
        assert_eq!((body.len() + 2) % 8, 0);
        let mut v = vec![next, u8::try_from((body.len() + 2) / 8 - 1).unwrap()];
        v.extend_from_slice(body);
        v
    }

    fn frag(next: u8, offset: u16, more: bool, ident: u32) -> Vec<u8> {
        let mut v = vec![0; 8];
        FragmentHeader { next_header: Protocol::from(next), offset, more_frags: more, ident }.emit(&mut v);
        v
    }

    #[test]
    fn no_extension_headers() {
        let w = walk(Protocol::Tcp, &[0; 20]).unwrap();
        assert_eq!(w, Walk { protocol: Protocol::Tcp, offset: 0, fragment: None, headers: 0 });
        // Even an empty payload: the upper layer judges its own length.
        assert_eq!(walk(Protocol::Udp, &[]).unwrap().offset, 0);
    }

    #[test]
    fn full_chain_in_order() {
        // Hop-by-Hop (Router Alert, as MLD sends it) -> Destination Options (PadN) -> Routing type 4
        // with segments left 0 -> atomic Fragment -> Destination Options -> UDP.
        let mut p = opts(60, &[5, 2, 0, 0, 1, 0]);
        p.extend(opts(43, &[1, 4, 0, 0, 0, 0]));
        p.extend(opts(44, &[4, 0, 0, 0, 0, 0]));
        p.extend(frag(60, 0, false, 7));
        p.extend(opts(17, &[0, 0, 0, 0, 0, 0]));
        p.extend([0; 8]);
        let w = walk(Protocol::HopByHop, &p).unwrap();
        assert_eq!(w.protocol, Protocol::Udp);
        assert_eq!(w.offset, 40);
        assert_eq!(w.headers, 5);
        assert_eq!(w.fragment.map(|f| (f.ident, f.is_fragment())), Some((7, false)));
    }

    #[test]
    fn real_fragment_stops_the_walk() {
        let mut p = frag(60, 1448, true, 0xdead_beef);
        p.extend(opts(6, &[1, 4, 0, 0, 0, 0]));
        let w = walk(Protocol::Ipv6Frag, &p).unwrap();
        assert_eq!((w.protocol, w.offset, w.headers), (Protocol::Ipv6Opts, 8, 1));
        let f = w.fragment.unwrap();
        assert_eq!((f.offset, f.more_frags, f.ident), (1448, true, 0xdead_beef));
        assert!(f.is_fragment());
        // The reserved bits are ignored on parse.
        let mut q = p.clone();
        q[1] = 0xff;
        q[3] |= 0x6;
        assert_eq!(walk(Protocol::Ipv6Frag, &q).unwrap(), w);
    }

    #[test]
    fn walk_on_after_a_first_fragment() {
        let mut p = frag(60, 0, true, 3);
        p.extend(opts(17, &[1, 4, 0, 0, 0, 0]));
        p.extend([0; 8]);
        let w = walk(Protocol::Ipv6Frag, &p).unwrap();
        assert_eq!((w.protocol, w.offset), (Protocol::Ipv6Opts, 8));
        let on = walk_on(w, &p).unwrap();
        assert_eq!((on.protocol, on.offset, on.headers, on.fragment), (Protocol::Udp, 16, 2, w.fragment));
        // Cut inside the chain: the first fragment lacks it (RFC 7112).
        assert_eq!(walk_on(w, &p[..12]), Err(Error::Truncated));
        // Hop-by-Hop after the Fragment header.
        let mut h = frag(0, 0, true, 3);
        h.extend(opts(17, &[1, 4, 0, 0, 0, 0]));
        let w = walk(Protocol::Ipv6Frag, &h).unwrap();
        assert_eq!(walk_on(w, &h), Err(Error::Malformed));
        // A Fragment header in the fragmentable part.
        let mut q = frag(44, 0, true, 3);
        q.extend(frag(17, 0, false, 3));
        let w = walk(Protocol::Ipv6Frag, &q).unwrap();
        assert_eq!(walk_on(w, &q), Err(Error::Malformed));
        // The bounds count both parts.
        let mut r = frag(60, 0, true, 3);
        r.extend(opts(60, &[1, 4, 0, 0, 0, 0]).repeat(MAX_HEADERS - 1));
        r.extend(opts(6, &[1, 4, 0, 0, 0, 0]));
        let w = walk(Protocol::Ipv6Frag, &r).unwrap();
        assert_eq!(walk_on(w, &r), Err(Error::Unrecognized));
    }

    #[test]
    fn refusals() {
        let hbh = opts(59, &[1, 4, 0, 0, 0, 0]);
        // Hop-by-Hop after another header.
        let mut p = opts(0, &[1, 4, 0, 0, 0, 0]);
        p.extend(&hbh);
        assert_eq!(walk(Protocol::Ipv6Opts, &p), Err(Error::Malformed));
        assert_eq!(walk(Protocol::HopByHop, &hbh).unwrap().protocol, Protocol::Ipv6NoNxt);
        // Routing type 0, even with segments left 0; any type with segments left.
        assert_eq!(walk(Protocol::Ipv6Route, &opts(6, &[0, 0, 0, 0, 0, 0])), Err(Error::Unrecognized));
        assert_eq!(walk(Protocol::Ipv6Route, &opts(6, &[2, 1, 0, 0, 0, 0])), Err(Error::Unrecognized));
        assert!(walk(Protocol::Ipv6Route, &opts(6, &[2, 0, 0, 0, 0, 0])).is_ok());
        // Two Fragment headers.
        let mut p = frag(44, 0, false, 1);
        p.extend(frag(6, 0, false, 1));
        assert_eq!(walk(Protocol::Ipv6Frag, &p), Err(Error::Malformed));
        // Options: unknown with action bits 01, 10, 11 discard; 00 is skipped; Jumbo is refused.
        for kind in [0x4e, 0x8e, 0xce, 0xc2] {
            assert_eq!(walk(Protocol::Ipv6Opts, &opts(6, &[kind, 4, 0, 0, 0, 0])), Err(Error::Unrecognized));
        }
        assert!(walk(Protocol::Ipv6Opts, &opts(6, &[0x0e, 4, 0, 0, 0, 0])).is_ok());
        // An option running past its header, and a lone type byte at the end.
        assert_eq!(walk(Protocol::Ipv6Opts, &opts(6, &[1, 5, 0, 0, 0, 0])), Err(Error::Malformed));
        assert_eq!(walk(Protocol::Ipv6Opts, &opts(6, &[0, 0, 0, 0, 0, 1])), Err(Error::Malformed));
    }

    #[test]
    fn bounds() {
        let one = opts(60, &[1, 4, 0, 0, 0, 0]);
        let chain = |n: usize| {
            let mut p = one.repeat(n);
            p.extend([0; 8]);
            p
        };
        // MAX_HEADERS headers are walked; one more is refused (the last one points at itself).
        let mut ok = one.repeat(MAX_HEADERS - 1);
        ok.extend(opts(6, &[1, 4, 0, 0, 0, 0]));
        assert_eq!(walk(Protocol::Ipv6Opts, &ok).unwrap().headers, MAX_HEADERS);
        assert_eq!(walk(Protocol::Ipv6Opts, &chain(MAX_HEADERS + 1)), Err(Error::Unrecognized));
        // A long header: 2048 bytes is past the byte bound.
        let mut big = vec![6, 255];
        big.extend([1, 254]);
        big.resize(2048, 0);
        assert_eq!(walk(Protocol::Ipv6Opts, &big), Err(Error::Unrecognized));
        // 1024 bytes is the largest: one header of length 127.
        let mut max = vec![6, 127, 1, 252];
        max.resize(MAX_CHAIN_LEN, 0);
        assert_eq!(walk(Protocol::Ipv6Opts, &max).unwrap().offset, MAX_CHAIN_LEN);
    }

    #[test]
    fn truncation_never_panics() {
        let mut p = opts(44, &[5, 2, 0, 0, 1, 0]);
        p.extend(frag(60, 0, false, 7));
        p.extend(opts(6, &[0, 0, 0, 0, 0, 0]));
        for len in 0..p.len() {
            assert_eq!(walk(Protocol::HopByHop, &p[..len]), Err(Error::Truncated), "{len}");
        }
        // A looping chain (Destination Options pointing at itself) ends at the bound.
        assert_eq!(
            walk(Protocol::Ipv6Opts, &opts(60, &[1, 4, 0, 0, 0, 0]).repeat(100)),
            Err(Error::Unrecognized)
        );
    }
}
