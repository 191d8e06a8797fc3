//! Neighbor Discovery for IPv6 (RFC 4861): router solicitation and advertisement, neighbour
//! solicitation and advertisement, the ICMPv6 messages of types 133 to 136. The ICMPv6 header
//! (type, code, checksum) is [`icmpv6`](super::icmpv6)'s; this module reads and writes the message
//! body after it.
//!
//! Layouts of the body: router solicitation: reserved (4), options. Router advertisement: current
//! hop limit (1), flags M and O (1), router lifetime (2, seconds), reachable time (4, ms),
//! retransmission timer (4, ms), options. Neighbour solicitation: reserved (4), target address (16),
//! options. Neighbour advertisement: flags R, S and O and reserved (4), target address (16), options.
//!
//! **Options** (RFC 4861 §4.6) are type (1), length (1, in units of 8 bytes, the type and length
//! included), value. An option of length zero is [`Error::Malformed`] (§4.6: "Nodes MUST silently
//! discard an ND packet that contains an option with length zero"); one that runs past the message
//! is [`Error::Truncated`]; more than [`MAX_OPTIONS`] is [`Error::Unrecognized`]. Known options with
//! another length than their own are malformed. Options this stack does not use, or that do not
//! belong in the message, are skipped (§4.6 and §6.1.2: "silently ignored"). The link-layer address
//! options are Ethernet's (RFC 2464 §6: length 1, six bytes). At most [`MAX_PREFIXES`] prefix
//! information options of a router advertisement are kept; further ones are skipped.
//!
//! Redirects (type 137) are refused ([`Error::Unrecognized`]): this stack sends to its default
//! router and does not keep the per-destination routes a redirect would install.
//!
//! The checks that need the IPv6 header (hop limit 255, §6.1 and §7.1; a link-local source for a
//! router advertisement; no source link-layer option from the unspecified address) are the caller's.

use std::net::Ipv6Addr;

use super::ethernet::Address as EthernetAddress;
use super::ipv6::addr_at;
use super::{Error, Result, be16, be32, put16, put32};

/// The most options one message may carry.
pub const MAX_OPTIONS: usize = 64;
/// The most prefix information options of a router advertisement that are kept.
pub const MAX_PREFIXES: usize = 4;

/// ICMPv6 type of a router solicitation.
pub const ROUTER_SOLICIT: u8 = 133;
/// ICMPv6 type of a router advertisement.
pub const ROUTER_ADVERT: u8 = 134;
/// ICMPv6 type of a neighbour solicitation.
pub const NEIGHBOR_SOLICIT: u8 = 135;
/// ICMPv6 type of a neighbour advertisement.
pub const NEIGHBOR_ADVERT: u8 = 136;
/// ICMPv6 type of a redirect.
pub const REDIRECT: u8 = 137;

const OPT_SOURCE_LLADDR: u8 = 1;
const OPT_TARGET_LLADDR: u8 = 2;
const OPT_PREFIX_INFO: u8 = 3;
const OPT_MTU: u8 = 5;

const RA_MANAGED: u8 = 0x80;
const RA_OTHER: u8 = 0x40;
const NA_ROUTER: u8 = 0x80;
const NA_SOLICITED: u8 = 0x40;
const NA_OVERRIDE: u8 = 0x20;
const PREFIX_ON_LINK: u8 = 0x80;
const PREFIX_AUTONOMOUS: u8 = 0x40;

/// A prefix information option (RFC 4861 §4.6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrefixInfo {
    /// The prefix (bits past `prefix_len` as sent).
    pub prefix: Ipv6Addr,
    /// The prefix length (at most 128).
    pub prefix_len: u8,
    /// L: the prefix is on-link.
    pub on_link: bool,
    /// A: the prefix may be used for stateless address autoconfiguration (RFC 4862).
    pub autonomous: bool,
    /// Valid lifetime in seconds (`u32::MAX`: infinity).
    pub valid_lifetime: u32,
    /// Preferred lifetime in seconds (`u32::MAX`: infinity).
    pub preferred_lifetime: u32,
}

impl PrefixInfo {
    const LEN: usize = 32;

    fn parse(o: &[u8]) -> Result<Self> {
        if o.len() != Self::LEN || o[2] > 128 {
            return Err(Error::Malformed);
        }
        let mut prefix = [0u8; 16];
        prefix.copy_from_slice(&o[16..32]);
        Ok(Self {
            prefix: prefix.into(),
            prefix_len: o[2],
            on_link: o[3] & PREFIX_ON_LINK != 0,
            autonomous: o[3] & PREFIX_AUTONOMOUS != 0,
            valid_lifetime: be32(o, 4),
            preferred_lifetime: be32(o, 8),
        })
    }

    fn emit(&self, o: &mut [u8]) {
        o[0] = OPT_PREFIX_INFO;
        o[1] = 4;
        o[2] = self.prefix_len;
        o[3] = if self.on_link { PREFIX_ON_LINK } else { 0 }
            | if self.autonomous { PREFIX_AUTONOMOUS } else { 0 };
        put32(o, 4, self.valid_lifetime);
        put32(o, 8, self.preferred_lifetime);
        put32(o, 12, 0);
        o[16..32].copy_from_slice(&self.prefix.octets());
    }
}

/// The prefix information options of a router advertisement: at most [`MAX_PREFIXES`], in the order
/// they came.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Prefixes {
    len: usize,
    items: [Option<PrefixInfo>; MAX_PREFIXES],
}

impl Prefixes {
    /// Appends a prefix; false (and nothing changes) when [`MAX_PREFIXES`] are held.
    pub fn push(&mut self, p: PrefixInfo) -> bool {
        let Some(slot) = self.items.get_mut(self.len) else { return false };
        *slot = Some(p);
        self.len += 1;
        true
    }

    /// The prefixes held.
    pub fn iter(&self) -> impl Iterator<Item = &PrefixInfo> {
        self.items.iter().flatten()
    }

    /// How many prefixes are held.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether none is held.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The meaning of a Neighbor Discovery message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Repr {
    /// A router solicitation.
    RouterSolicit {
        /// The source link-layer address option.
        lladdr: Option<EthernetAddress>,
    },
    /// A router advertisement: the default router and the prefixes of the link.
    RouterAdvert {
        /// Current hop limit for outgoing packets (0: unspecified).
        hop_limit: u8,
        /// M: addresses are available by DHCPv6.
        managed: bool,
        /// O: other configuration is available by DHCPv6.
        other: bool,
        /// How long the sender is a default router, in seconds (0: it is not one).
        router_lifetime: u16,
        /// Reachable time in milliseconds (0: unspecified).
        reachable_time: u32,
        /// Retransmission timer in milliseconds (0: unspecified).
        retrans_time: u32,
        /// The source link-layer address option.
        lladdr: Option<EthernetAddress>,
        /// The MTU option.
        mtu: Option<u32>,
        /// The prefix information options.
        prefixes: Prefixes,
    },
    /// A neighbour solicitation.
    NeighborSolicit {
        /// The address whose link-layer address is asked for (never multicast).
        target: Ipv6Addr,
        /// The source link-layer address option.
        lladdr: Option<EthernetAddress>,
    },
    /// A neighbour advertisement.
    NeighborAdvert {
        /// R: the sender is a router.
        router: bool,
        /// S: the advertisement answers a solicitation.
        solicited: bool,
        /// O: the advertisement overrides a cached link-layer address.
        override_: bool,
        /// The address advertised (never multicast).
        target: Ipv6Addr,
        /// The target link-layer address option.
        lladdr: Option<EthernetAddress>,
    },
}

/// The options of a message: `(type, whole option)` for each, checked as the module says.
fn options(mut bytes: &[u8]) -> impl Iterator<Item = Result<(u8, &[u8])>> {
    let mut count = 0;
    std::iter::from_fn(move || {
        if bytes.is_empty() {
            return None;
        }
        count += 1;
        let item = if count > MAX_OPTIONS {
            Err(Error::Unrecognized)
        } else if bytes.len() < 2 {
            Err(Error::Truncated)
        } else if bytes[1] == 0 {
            Err(Error::Malformed)
        } else {
            let len = usize::from(bytes[1]) * 8;
            match (bytes.get(..len), bytes.get(len..)) {
                (Some(option), Some(rest)) => {
                    bytes = rest;
                    return Some(Ok((option[0], option)));
                }
                _ => Err(Error::Truncated),
            }
        };
        bytes = &[];
        Some(item)
    })
}

impl Repr {
    /// Parses the body (after type, code and checksum) of an ICMPv6 message of type `msg_type`
    /// and code `code`.
    ///
    /// # Errors
    /// [`Error::Truncated`] for a body shorter than its fixed part or an option past the end;
    /// [`Error::Malformed`] for a code other than 0, a multicast target, a zero-length or
    /// wrongly sized option, a prefix length over 128; [`Error::Unrecognized`] for a redirect, a
    /// type that is not NDP's, or too many options.
    pub fn parse(msg_type: u8, code: u8, body: &[u8]) -> Result<Self> {
        let fixed = match msg_type {
            ROUTER_SOLICIT => 4,
            ROUTER_ADVERT => 12,
            NEIGHBOR_SOLICIT | NEIGHBOR_ADVERT => 20,
            _ => return Err(Error::Unrecognized),
        };
        if body.len() < fixed {
            return Err(Error::Truncated);
        }
        if code != 0 {
            return Err(Error::Malformed);
        }
        let mut repr = match msg_type {
            ROUTER_SOLICIT => Self::RouterSolicit { lladdr: None },
            ROUTER_ADVERT => Self::RouterAdvert {
                hop_limit: body[0],
                managed: body[1] & RA_MANAGED != 0,
                other: body[1] & RA_OTHER != 0,
                router_lifetime: be16(body, 2),
                reachable_time: be32(body, 4),
                retrans_time: be32(body, 8),
                lladdr: None,
                mtu: None,
                prefixes: Prefixes::default(),
            },
            NEIGHBOR_SOLICIT => Self::NeighborSolicit { target: addr_at(body, 4), lladdr: None },
            _ => Self::NeighborAdvert {
                router: body[0] & NA_ROUTER != 0,
                solicited: body[0] & NA_SOLICITED != 0,
                override_: body[0] & NA_OVERRIDE != 0,
                target: addr_at(body, 4),
                lladdr: None,
            },
        };
        for option in options(&body[fixed..]) {
            let (kind, option) = option?;
            match (&mut repr, kind) {
                (
                    Self::RouterSolicit { lladdr }
                    | Self::RouterAdvert { lladdr, .. }
                    | Self::NeighborSolicit { lladdr, .. },
                    OPT_SOURCE_LLADDR,
                )
                | (Self::NeighborAdvert { lladdr, .. }, OPT_TARGET_LLADDR) => {
                    *lladdr = Some(lladdr_of(option)?)
                }
                (Self::RouterAdvert { mtu, .. }, OPT_MTU) => {
                    if option.len() != 8 {
                        return Err(Error::Malformed);
                    }
                    *mtu = Some(be32(option, 4));
                }
                (Self::RouterAdvert { prefixes, .. }, OPT_PREFIX_INFO) => {
                    // Beyond MAX_PREFIXES the option is still checked, then skipped.
                    let _ = prefixes.push(PrefixInfo::parse(option)?);
                }
                _ => {}
            }
        }
        match repr {
            Self::NeighborSolicit { target, .. } | Self::NeighborAdvert { target, .. }
                if target.is_multicast() =>
            {
                Err(Error::Malformed)
            }
            _ => Ok(repr),
        }
    }

    /// The ICMPv6 type of the message.
    #[must_use]
    pub const fn msg_type(&self) -> u8 {
        match self {
            Self::RouterSolicit { .. } => ROUTER_SOLICIT,
            Self::RouterAdvert { .. } => ROUTER_ADVERT,
            Self::NeighborSolicit { .. } => NEIGHBOR_SOLICIT,
            Self::NeighborAdvert { .. } => NEIGHBOR_ADVERT,
        }
    }

    /// The body length [`emit`](Self::emit) writes.
    #[must_use]
    pub fn buffer_len(&self) -> usize {
        let ll = |l: &Option<EthernetAddress>| if l.is_some() { 8 } else { 0 };
        match self {
            Self::RouterSolicit { lladdr } => 4 + ll(lladdr),
            Self::RouterAdvert { lladdr, mtu, prefixes, .. } => {
                12 + ll(lladdr) + if mtu.is_some() { 8 } else { 0 } + prefixes.len() * PrefixInfo::LEN
            }
            Self::NeighborSolicit { lladdr, .. } | Self::NeighborAdvert { lladdr, .. } => 20 + ll(lladdr),
        }
    }

    /// Writes the body (reserved fields zero; options in the order source/target link-layer
    /// address, MTU, prefixes, as Linux's radvd and kernel send them).
    ///
    /// # Panics
    /// If `body` is not exactly [`buffer_len`](Self::buffer_len) bytes (a caller bug).
    pub fn emit(&self, body: &mut [u8]) {
        assert_eq!(body.len(), self.buffer_len(), "NDP body length");
        body.fill(0);
        let (fixed, kind, lladdr) = match *self {
            Self::RouterSolicit { lladdr } => (4, OPT_SOURCE_LLADDR, lladdr),
            Self::RouterAdvert {
                hop_limit,
                managed,
                other,
                router_lifetime,
                reachable_time,
                retrans_time,
                lladdr,
                ..
            } => {
                body[0] = hop_limit;
                body[1] = if managed { RA_MANAGED } else { 0 } | if other { RA_OTHER } else { 0 };
                put16(body, 2, router_lifetime);
                put32(body, 4, reachable_time);
                put32(body, 8, retrans_time);
                (12, OPT_SOURCE_LLADDR, lladdr)
            }
            Self::NeighborSolicit { target, lladdr } => {
                body[4..20].copy_from_slice(&target.octets());
                (20, OPT_SOURCE_LLADDR, lladdr)
            }
            Self::NeighborAdvert { router, solicited, override_, target, lladdr } => {
                body[0] = [(router, NA_ROUTER), (solicited, NA_SOLICITED), (override_, NA_OVERRIDE)]
                    .iter()
                    .filter(|(set, _)| *set)
                    .fold(0, |acc, (_, bit)| acc | bit);
                body[4..20].copy_from_slice(&target.octets());
                (20, OPT_TARGET_LLADDR, lladdr)
            }
        };
        let mut at = fixed;
        if let Some(mac) = lladdr {
            body[at] = kind;
            body[at + 1] = 1;
            body[at + 2..at + 8].copy_from_slice(mac.as_bytes());
            at += 8;
        }
        if let Self::RouterAdvert { mtu, prefixes, .. } = self {
            if let Some(mtu) = mtu {
                body[at] = OPT_MTU;
                body[at + 1] = 1;
                put32(body, at + 4, *mtu);
                at += 8;
            }
            for p in prefixes.iter() {
                p.emit(&mut body[at..at + PrefixInfo::LEN]);
                at += PrefixInfo::LEN;
            }
        }
    }
}

/// The address of an Ethernet link-layer address option (length 1, RFC 2464 §6).
fn lladdr_of(option: &[u8]) -> Result<EthernetAddress> {
    option.get(2..).and_then(EthernetAddress::from_bytes).ok_or(Error::Malformed)
}

#[cfg(test)]
pub(crate) mod tests;
