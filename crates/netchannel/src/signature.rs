//! Transport signatures and the frame classifier: how the driver side finds the net channel that a
//! received Ethernet frame belongs to.
//!
//! Source: Van Jacobson & Felderman, "Speeding up Networking", LCA 2006 (`seeds/004`): the driver
//! computes each packet's *transport signature* and drops the packet into the channel registered for it;
//! everything else goes to the core's default channel. The 4096 [`FlowGroup`]s keyed by the low 12 bits
//! of the TCP source port are Affinity-Accept's (Pesterev et al., EuroSys 2012, `seeds/000`).
//!
//! # Signatures
//!
//! A [`Signature`] is `(protocol, local address and port, remote address and port)` *as seen by the
//! receiver*: `local` is the destination of a received packet, `remote` its source. A listener registers
//! the wildcard form ([`Signature::listener`]): the remote is the unspecified address of the local's
//! family with port 0. The registry looks up the exact signature first, then [`Signature::listener`] of
//! it, then falls back to the default channel (DESIGN §4).
//!
//! Signatures are canonical: both addresses have the same family and IPv6 addresses carry no flow label
//! or scope id (the classifier cannot see a scope id, and the flow label is per-packet).
//!
//! ## Representation
//!
//! A signature is five 64-bit words (40 bytes, no padding), laid out so that [`classify`] fills it with
//! plain loads of the header bytes and the registry compares and hashes it a word at a time:
//!
//! * `meta`: the four port bytes as they are on the wire (source port, destination port) read as a
//!   little-endian `u32` in bits 0..32, the IP protocol number in bits 32..40, and bit 40 set for IPv6.
//! * `addrs`: the address bytes as they are on the wire, source (remote) then destination (local),
//!   read as little-endian words. IPv6 fills all four words; IPv4's 8 address bytes fill `addrs[0]`
//!   alone (remote in the low half, local in the high half) and the other three words are zero.
//!
//! Little-endian is a plain load on the targets that matter; on a big-endian target the words are
//! byte-swapped but mean the same. The fields are private, so every signature is built by
//! [`Signature::new`], [`Signature::listener`] or [`classify`] and is canonical: equality of signatures
//! is equality of the five words, and the derived `Hash` and [`Signature::hash64`] only ever see
//! canonical values. [`Signature::local`] and [`Signature::remote`] build a [`SocketAddr`] on demand.
//!
//! # Hashing
//!
//! [`Signature::hash64`] is the registry's bucket hash. It is *keyed*: the registry draws a random seed
//! when it is built, so a remote peer, who chooses its own address and port and so half of every
//! signature it sends, cannot precompute a set of signatures that land in one bucket. The function
//! combines the words that carry information for the signature's family with the *folded multiply* of
//! wyhash and foldhash (`fold(x, y) = lo(x·y) ^ hi(x·y)` of the full 128-bit product), with words of
//! the registry's secret [`HashKey`] (expanded once from the seed) XORed into both operands of the
//! first multiply, and a second multiply by another key word to finish. An IPv4 signature
//! (`meta` and `addrs[0]`) costs two multiplies, an IPv6 one four: a handful of instructions, where
//! SipHash-1-3 (std's `DefaultHasher`) costs several times the whole per-packet budget. The family bit in
//! `meta` keeps an IPv4 signature from colliding by construction with the IPv6 one whose words happen to
//! equal it. Like foldhash it is not a cryptographic PRF: it is meant to defeat blind flooding by peers
//! who do not know the seed and never see hash values, which is the threat a receive path faces; it is
//! not meant to resist an attacker who can observe bucket placement precisely enough to recover the
//! seed.
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
//! use netchannel::signature::{classify, Classified, FlowGroup, Proto};
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

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::registry::HashKey;

/// A transport protocol that signatures steer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Proto {
    /// TCP, IP protocol number 6.
    Tcp = 6,
    /// UDP, IP protocol number 17.
    Udp = 17,
}

impl Proto {
    /// The IP protocol number (IPv4 `protocol`, IPv6 `next header`).
    #[must_use]
    pub const fn number(self) -> u8 {
        self as u8
    }

    /// The protocol with IP protocol number `n`, if signatures steer it.
    #[must_use]
    pub const fn from_number(n: u8) -> Option<Self> {
        match n {
            IPPROTO_TCP => Some(Self::Tcp),
            IPPROTO_UDP => Some(Self::Udp),
            _ => None,
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
        })
    }
}

/// Why [`Signature::new`] refused its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignatureError {
    /// One address is IPv4 and the other IPv6: no packet can carry such a pair.
    FamilyMismatch,
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FamilyMismatch => f.write_str("local and remote addresses are of different families"),
        }
    }
}

impl std::error::Error for SignatureError {}

/// A transport signature: protocol, local and remote socket addresses, as seen by the receiver.
///
/// Always canonical (see the [module documentation](self)): both addresses of one family, IPv6 flow
/// label and scope id zero. A *listener* signature has the wildcard remote (unspecified address, port 0).
///
/// Five 64-bit words in a fixed layout (see [Representation](self#representation)): equality compares
/// the words, and [`Signature::local`] and [`Signature::remote`] build their [`SocketAddr`] on demand.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct Signature {
    /// Wire port bytes (source, destination) as a little-endian `u32` in bits 0..32, the protocol
    /// number in bits 32..40, [`META_V6`] for IPv6.
    meta: u64,
    /// Wire address bytes, source then destination, as little-endian words; IPv4 fills `addrs[0]` only.
    addrs: [u64; 4],
}

// The layout the hot path relies on: five words, no padding (so derived `Eq` compares exactly the words),
// and a classifier verdict that stays small.
const _: () = assert!(size_of::<Signature>() == 40);
const _: () = assert!(size_of::<Classified>() <= 48);

/// The family bit of [`Signature::meta`]: set for IPv6.
const META_V6: u64 = 1 << 40;
/// The remote (source) port's bits of [`Signature::meta`].
const META_REMOTE_PORT: u64 = 0xFFFF;
/// Where the protocol number sits in [`Signature::meta`].
const META_PROTO_SHIFT: u32 = 32;

/// `meta` from the four wire port bytes (source port, destination port), the protocol and the family.
#[inline(always)]
const fn meta(ports: [u8; 4], proto: Proto, v6: bool) -> u64 {
    let family = if v6 { META_V6 } else { 0 };
    // Widening casts: `u64::from` is not const.
    u32::from_le_bytes(ports) as u64 | (proto.number() as u64) << META_PROTO_SHIFT | family
}

/// The little-endian word of the 8 bytes of `b` at `at` (zero if they are not all there, which the
/// callers' constant offsets rule out; the fallback keeps the function panic-free).
#[inline(always)]
fn le64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at.wrapping_add(8)).and_then(|s| <[u8; 8]>::try_from(s).ok()).map_or(0, u64::from_le_bytes)
}

/// The four wire port bytes of a (source, destination) port pair.
#[inline(always)]
const fn ports(src: u16, dst: u16) -> [u8; 4] {
    let [a, b] = src.to_be_bytes();
    let [c, d] = dst.to_be_bytes();
    [a, b, c, d]
}

/// The IPv4 address whose wire bytes are the low 4 bytes of little-endian `w`.
#[expect(clippy::cast_possible_truncation, reason = "the low half of the word")]
fn ipv4_of(w: u64) -> Ipv4Addr {
    Ipv4Addr::from((w as u32).to_le_bytes())
}

/// The IPv6 address whose wire bytes are those of little-endian `w0` then `w1`.
fn ipv6_of(w0: u64, w1: u64) -> Ipv6Addr {
    Ipv6Addr::from((u128::from(w1) << 64 | u128::from(w0)).to_le_bytes())
}

/// (low, high) halves of `x`: the first and second 8 bytes of its little-endian representation.
#[inline(always)]
#[expect(clippy::cast_possible_truncation, reason = "splitting a 128-bit word into its halves")]
const fn split128(x: u128) -> (u64, u64) {
    (x as u64, (x >> 64) as u64)
}

impl Signature {
    /// The exact signature of packets from `remote` to `local`.
    ///
    /// IPv6 flow labels and scope ids are cleared (the classifier never produces them).
    ///
    /// # Errors
    ///
    /// [`SignatureError::FamilyMismatch`] if one address is IPv4 and the other IPv6.
    pub fn new(proto: Proto, local: SocketAddr, remote: SocketAddr) -> Result<Self, SignatureError> {
        match (local, remote) {
            (SocketAddr::V4(l), SocketAddr::V4(r)) => Ok(Self::v4(proto, l, r)),
            (SocketAddr::V6(l), SocketAddr::V6(r)) => Ok(Self::v6(proto, l, r)),
            _ => Err(SignatureError::FamilyMismatch),
        }
    }

    /// The listener signature for `local`: matches packets to `local` from any remote.
    #[must_use]
    pub fn listener(proto: Proto, local: SocketAddr) -> Self {
        match local {
            SocketAddr::V4(l) => Self::v4(proto, l, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            SocketAddr::V6(l) => Self::v6(proto, l, SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0)),
        }
    }

    fn v4(proto: Proto, local: SocketAddrV4, remote: SocketAddrV4) -> Self {
        let [a, b, c, d] = remote.ip().octets();
        let [e, f, g, h] = local.ip().octets();
        Self {
            meta: meta(ports(remote.port(), local.port()), proto, false),
            addrs: [u64::from_le_bytes([a, b, c, d, e, f, g, h]), 0, 0, 0],
        }
    }

    /// Flow label and scope id are dropped: they are not part of a signature.
    fn v6(proto: Proto, local: SocketAddrV6, remote: SocketAddrV6) -> Self {
        let (r0, r1) = split128(u128::from_le_bytes(remote.ip().octets()));
        let (l0, l1) = split128(u128::from_le_bytes(local.ip().octets()));
        Self { meta: meta(ports(remote.port(), local.port()), proto, true), addrs: [r0, r1, l0, l1] }
    }

    /// Whether this is an IPv6 signature.
    #[inline(always)]
    fn is_v6(&self) -> bool {
        self.meta & META_V6 != 0
    }

    /// An IPv4 signature's two live words, `meta` and `addrs[0]` (the others are zero): what a hot
    /// loop passes to out-of-line code instead of the whole signature, which would have to be
    /// written to memory first.
    #[inline(always)]
    pub(crate) fn v4_words(&self) -> (u64, u64) {
        debug_assert!(!self.is_v6());
        (self.meta, self.addrs[0])
    }

    /// The IPv4 signature of [`Signature::v4_words`].
    #[inline(always)]
    pub(crate) fn from_v4_words(meta: u64, a0: u64) -> Self {
        debug_assert!(meta & META_V6 == 0);
        Self { meta, addrs: [a0, 0, 0, 0] }
    }

    /// The bits of `addrs[0]` that hold the remote address (all of it for IPv6, where `addrs[1]`
    /// holds the rest; the low half for IPv4, where `addrs[1]` is zero).
    #[inline(always)]
    fn remote_mask0(&self) -> u64 {
        if self.is_v6() { u64::MAX } else { 0xFFFF_FFFF }
    }

    /// Whether this is a listener (wildcard remote) signature.
    #[must_use]
    #[inline]
    pub fn is_listener(&self) -> bool {
        self.meta & META_REMOTE_PORT == 0 && self.addrs[0] & self.remote_mask0() == 0 && self.addrs[1] == 0
    }

    /// The listener form of this signature: the same protocol and local address, the wildcard remote.
    /// The registry's second lookup after the exact signature missed.
    #[must_use]
    #[inline]
    pub fn to_listener(&self) -> Self {
        let [a0, _, a2, a3] = self.addrs;
        Self { meta: self.meta & !META_REMOTE_PORT, addrs: [a0 & !self.remote_mask0(), 0, a2, a3] }
    }

    /// The transport protocol.
    #[must_use]
    #[inline]
    pub fn proto(&self) -> Proto {
        // Only `new` and `classify` build signatures, from a `Proto`: the fallback is never taken.
        #[expect(clippy::cast_possible_truncation, reason = "the protocol byte of `meta`")]
        let n = (self.meta >> META_PROTO_SHIFT) as u8;
        Proto::from_number(n).unwrap_or(Proto::Tcp)
    }

    /// The wire port bytes: (source, destination).
    #[inline(always)]
    #[expect(clippy::cast_possible_truncation, reason = "the port bytes of `meta`")]
    fn ports(&self) -> (u16, u16) {
        let [a, b, c, d] = (self.meta as u32).to_le_bytes();
        (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]))
    }

    /// The remote (source) address.
    fn remote_ip(&self) -> IpAddr {
        let [a0, a1, ..] = self.addrs;
        if self.is_v6() { IpAddr::V6(ipv6_of(a0, a1)) } else { IpAddr::V4(ipv4_of(a0)) }
    }

    /// The local (destination) address.
    fn local_ip(&self) -> IpAddr {
        let [a0, _, a2, a3] = self.addrs;
        if self.is_v6() { IpAddr::V6(ipv6_of(a2, a3)) } else { IpAddr::V4(ipv4_of(a0 >> 32)) }
    }

    /// The local (receiving) socket address: the destination of received packets.
    #[must_use]
    pub fn local(&self) -> SocketAddr {
        SocketAddr::new(self.local_ip(), self.ports().1)
    }

    /// The remote socket address: the source of received packets; the wildcard for a listener.
    #[must_use]
    pub fn remote(&self) -> SocketAddr {
        SocketAddr::new(self.remote_ip(), self.ports().0)
    }

    /// The flow group of this signature: the low 12 bits of the remote port.
    #[must_use]
    #[inline]
    pub fn flow_group(&self) -> FlowGroup {
        FlowGroup::of_port(self.ports().0)
    }

    /// A keyed 64-bit hash for the signature registry's buckets; `key` is the registry's random key.
    ///
    /// All 64 bits are well mixed, so a table of `2^k` buckets may use either the low or the high `k`
    /// bits. Equal signatures hash equally for one seed; see the [module documentation](self#hashing) for
    /// the construction and what it defends against.
    #[must_use]
    #[inline]
    pub fn hash64(&self, key: &HashKey) -> u64 {
        let [k0, k1, k2, k3] = *key.words();
        let [a0, a1, a2, a3] = self.addrs;
        let h = if self.is_v6() {
            let a = fold_mul(a0 ^ k0, a1 ^ k1);
            let b = fold_mul(a2 ^ k2, a3 ^ k3);
            fold_mul(a ^ self.meta, b ^ K)
        } else {
            // `addrs[1..]` are zero for IPv4: both addresses are in `a0`, ports, protocol and family
            // in `meta`.
            fold_mul(a0 ^ k0, self.meta ^ k1)
        };
        // `k3` is odd (`HashKey`), so the finishing multiply never zeroes the hash.
        fold_mul(h ^ k2, k3)
    }
}

/// Signatures key the [registry](crate::registry): the keyed hash above, seeded per registry.
impl crate::registry::RegistryKey for Signature {
    #[inline]
    fn hash64(&self, key: &HashKey) -> u64 {
        Signature::hash64(self, key)
    }
}

impl fmt::Display for Signature {
    /// `tcp 10.0.0.1:80 <- 10.0.0.2:40000`, or `tcp 10.0.0.1:80 <- *` for a listener.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_listener() {
            write!(f, "{} {} <- *", self.proto(), self.local())
        } else {
            write!(f, "{} {} <- {}", self.proto(), self.local(), self.remote())
        }
    }
}

/// Equality of the five words. An IPv4 signature's `addrs[1..]` are zero (canonical form), so once
/// `meta` (which holds the family) and `addrs[0]` match, two IPv4 signatures are equal without reading
/// the other words: the registry's probe of an IPv4 key compares two words.
impl PartialEq for Signature {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.meta == other.meta
            && self.addrs[0] == other.addrs[0]
            && (!self.is_v6() || {
                let ([_, a1, a2, a3], [_, b1, b2, b3]) = (self.addrs, other.addrs);
                (a1 ^ b1) | (a2 ^ b2) | (a3 ^ b3) == 0
            })
    }
}

impl Eq for Signature {}

/// Hashes the five words: equal signatures have equal words.
impl Hash for Signature {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.meta.hash(state);
        self.addrs.hash(state);
    }
}

impl fmt::Debug for Signature {
    /// `Signature { proto: Tcp, local: 10.0.0.1:80, remote: 10.0.0.2:40000 }`: the fields decoded,
    /// not the raw words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signature")
            .field("proto", &self.proto())
            .field("local", &self.local())
            .field("remote", &self.remote())
            .finish()
    }
}

/// Digits of pi (as foldhash and others use): an arbitrary constant for the IPv6 combine, so that
/// its second operand is not the first's key word again.
const K: u64 = 0x243f_6a88_85a3_08d3;

/// The folded multiply of wyhash/foldhash: both halves of the 128-bit product, XORed.
#[inline(always)]
#[expect(clippy::cast_possible_truncation, reason = "taking the two halves of a 128-bit product")]
const fn fold_mul(x: u64, y: u64) -> u64 {
    let p = (x as u128) * (y as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

/// One of the 4096 flow groups of Affinity-Accept: the low 12 bits of the remote (TCP/UDP source)
/// port. The NIC's Flow Director maps each group to an RX queue, and migration moves whole groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowGroup(pub u16);

impl FlowGroup {
    /// How many flow groups there are.
    pub const COUNT: usize = 4096;
    /// The mask that takes a port to its flow group.
    pub const MASK: u16 = 0x0FFF;

    /// The flow group of a remote (source) port.
    #[must_use]
    #[inline]
    pub const fn of_port(port: u16) -> Self {
        Self(port & Self::MASK)
    }

    /// The group's number as an index into a table of [`FlowGroup::COUNT`] entries.
    #[must_use]
    pub const fn index(self) -> usize {
        (self.0 & Self::MASK) as usize
    }
}

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
    /// Counts one classification.
    #[inline]
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
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
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
mod tests {
    use super::*;

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

    fn v4_tcp_frame() -> Vec<u8> {
        eth(None, ETHERTYPE_IPV4, &ipv4(6, A4, B4, 0, 0x4000, &tcp(40000, 80, 5, 10)))
    }
    fn v4_udp_vlan_frame() -> Vec<u8> {
        eth(Some(0x0064), ETHERTYPE_IPV4, &ipv4(17, A4, B4, 8, 0, &udp(5353, 53, 3)))
    }
    fn v6_tcp_ext_frame() -> Vec<u8> {
        eth(None, ETHERTYPE_IPV6, &ipv6(6, A6, B6, &[(IPPROTO_DSTOPTS, 1)], &tcp(50001, 443, 8, 4)))
    }

    fn flow(c: Classified) -> (Signature, FlowGroup) {
        match c {
            Classified::Flow { sig, flow_group } => (sig, flow_group),
            other => panic!("expected a flow, got {other:?}"),
        }
    }

    fn sock(s: &str) -> SocketAddr {
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

    // ---- signatures ------------------------------------------------------------------------------

    #[test]
    fn signature_api() {
        assert_eq!(
            Signature::new(Proto::Tcp, sock("10.0.0.1:80"), sock("[::1]:80")),
            Err(SignatureError::FamilyMismatch)
        );
        // Flow labels and scope ids are dropped.
        let with_scope = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 80, 0xabcde, 3));
        let sig = Signature::new(Proto::Tcp, with_scope, with_scope).unwrap();
        assert_eq!(sig.local(), sock("[::1]:80"));
        assert_eq!(sig.remote(), sock("[::1]:80"));
        assert_eq!(Signature::listener(Proto::Tcp, with_scope).local(), sock("[::1]:80"));

        let exact = Signature::new(Proto::Tcp, sock("10.0.0.1:80"), sock("10.0.0.2:4000")).unwrap();
        assert!(!exact.is_listener());
        let listener = exact.to_listener();
        assert!(listener.is_listener());
        assert_eq!(listener, Signature::listener(Proto::Tcp, sock("10.0.0.1:80")));
        assert_eq!(listener.remote(), sock("0.0.0.0:0"));
        assert_eq!(listener.to_listener(), listener);
        let l6 = Signature::listener(Proto::Udp, sock("[2001:db8::1]:53"));
        assert_eq!(l6.remote(), sock("[::]:0"));
        assert!(l6.is_listener());
        // A wildcard address with a port, or a port with no address, is an exact signature.
        assert!(!Signature::new(Proto::Tcp, sock("10.0.0.1:80"), sock("0.0.0.0:1")).unwrap().is_listener());

        assert_eq!(exact.to_string(), "tcp 10.0.0.1:80 <- 10.0.0.2:4000");
        assert_eq!(listener.to_string(), "tcp 10.0.0.1:80 <- *");
        assert_eq!(
            Signature::new(Proto::Udp, sock("[2001:db8::1]:53"), sock("[2001:db8::2]:5353"))
                .unwrap()
                .to_string(),
            "udp [2001:db8::1]:53 <- [2001:db8::2]:5353"
        );
        assert_eq!(l6.to_string(), "udp [2001:db8::1]:53 <- *");
        assert_eq!(Proto::from_number(6), Some(Proto::Tcp));
        assert_eq!(Proto::from_number(17), Some(Proto::Udp));
        assert_eq!(Proto::from_number(1), None);
        assert_eq!(Proto::Udp.number(), 17);
        assert_eq!(FlowGroup::of_port(0xABCD).index(), 0xBCD);
    }

    #[test]
    fn representation_equality_and_debug() {
        let v4 = Signature::new(Proto::Tcp, sock("10.0.0.1:80"), sock("10.0.0.2:4000")).unwrap();
        // The IPv4-mapped IPv6 form is another signature: the family bit tells them apart.
        let mapped =
            Signature::new(Proto::Tcp, sock("[::ffff:10.0.0.1]:80"), sock("[::ffff:10.0.0.2]:4000")).unwrap();
        assert_ne!(v4, mapped);
        assert_eq!(mapped.local(), sock("[::ffff:10.0.0.1]:80"));
        // IPv6 signatures differing only in the last word are different.
        let a = Signature::new(Proto::Udp, sock("[2001:db8::1]:53"), sock("[2001:db8::2]:53")).unwrap();
        let b = Signature::new(Proto::Udp, sock("[2001:db8::1]:53"), sock("[2001:db8::3]:53")).unwrap();
        let c = Signature::new(Proto::Udp, sock("[2001:db8::4]:53"), sock("[2001:db8::2]:53")).unwrap();
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.to_listener(), Signature::listener(Proto::Udp, sock("[2001:db8::1]:53")));
        assert_ne!(a.to_listener(), c.to_listener());
        assert_eq!(format!("{v4:?}"), "Signature { proto: Tcp, local: 10.0.0.1:80, remote: 10.0.0.2:4000 }");
        assert_eq!(size_of::<Signature>(), 40);
    }

    #[test]
    fn hash_is_a_function_of_the_signature_and_the_seed() {
        let a = Signature::new(Proto::Tcp, sock("10.0.0.1:80"), sock("10.0.0.2:4000")).unwrap();
        let b = Signature::new(Proto::Tcp, sock("10.0.0.1:80"), sock("10.0.0.2:4000")).unwrap();
        assert_eq!(a.hash64(&HashKey::from_seed(1)), b.hash64(&HashKey::from_seed(1)));
        assert_ne!(a.hash64(&HashKey::from_seed(1)), a.hash64(&HashKey::from_seed(2)));
        let udp = Signature::new(Proto::Udp, sock("10.0.0.1:80"), sock("10.0.0.2:4000")).unwrap();
        assert_ne!(a.hash64(&HashKey::from_seed(1)), udp.hash64(&HashKey::from_seed(1)));
        let swapped = Signature::new(Proto::Tcp, sock("10.0.0.2:4000"), sock("10.0.0.1:80")).unwrap();
        assert_ne!(a.hash64(&HashKey::from_seed(1)), swapped.hash64(&HashKey::from_seed(1)));
        // The classifier's signature hashes like the constructed one.
        let (sig, _) = flow(classify(&v4_tcp_frame()));
        let built = Signature::new(Proto::Tcp, sock("10.0.0.1:80"), sock("10.0.0.2:40000")).unwrap();
        assert_eq!(sig.hash64(&HashKey::from_seed(99)), built.hash64(&HashKey::from_seed(99)));
    }

    /// Chi-square statistic and the fullest bucket of `keys` hashed into 4096 buckets, by the low and
    /// by the high 12 bits.
    fn spread(keys: &[Signature], seed: u64) -> [(f64, usize); 2] {
        [0u32, 52].map(|shift| {
            let mut buckets = vec![0usize; 4096];
            let mut n = 0usize;
            for k in keys {
                buckets[usize::try_from((k.hash64(&HashKey::from_seed(seed)) >> shift) & 4095).unwrap()] += 1;
                n += 1;
            }
            #[expect(clippy::cast_precision_loss, reason = "test statistics")]
            let expected = n as f64 / 4096.0;
            #[expect(clippy::cast_precision_loss, reason = "test statistics")]
            let chi2 = buckets.iter().map(|&b| (b as f64 - expected).powi(2) / expected).sum();
            (chi2, buckets.iter().copied().max().unwrap())
        })
    }

    #[test]
    fn hash_distribution() {
        let local4 = sock("192.0.2.1:443");
        let local6 = sock("[2001:db8::1]:443");
        let v4 = move |ip: u32, port: u16| {
            Signature::new(
                Proto::Tcp,
                local4,
                SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from_bits(ip), port)),
            )
            .unwrap()
        };
        let v6 = move |ip: u128, port: u16| {
            Signature::new(
                Proto::Tcp,
                local6,
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from_bits(ip), port, 0, 0)),
            )
            .unwrap()
        };
        let base4 = 0x0a00_0000u32;
        let base6 = 0x2001_0db8_0000_0000_0000_0000_0000_0000u128;
        type Keys = Box<dyn Fn() -> Box<dyn Iterator<Item = Signature>>>;
        let sets: Vec<(&str, Keys)> = vec![
            (
                "v4 sequential ports",
                Box::new(move || Box::new((0..=u16::MAX).map(move |p| v4(base4 + 2, p)))),
            ),
            (
                "v4 sequential addresses",
                Box::new(move || Box::new((0..65536).map(move |i| v4(base4 + i, 1234)))),
            ),
            (
                "v4 256 addresses x 256 ports",
                Box::new(move || {
                    Box::new((0..65536u32).map(move |i| v4(base4 + (i >> 8), (i & 255) as u16 + 1024)))
                }),
            ),
            (
                "v4 sequential local ports",
                Box::new(move || {
                    Box::new((0..=u16::MAX).map(move |p| {
                        Signature::new(Proto::Udp, SocketAddr::new(local4.ip(), p), sock("10.9.9.9:53"))
                            .unwrap()
                    }))
                }),
            ),
            (
                "v6 sequential ports",
                Box::new(move || Box::new((0..=u16::MAX).map(move |p| v6(base6 + 2, p)))),
            ),
            (
                "v6 sequential hosts",
                Box::new(move || Box::new((0..65536u128).map(move |i| v6(base6 + i, 80)))),
            ),
            (
                "v6 sequential /64 prefixes",
                Box::new(move || Box::new((0..65536u128).map(move |i| v6(base6 + (i << 64) + 1, 80)))),
            ),
        ];
        // 4095 degrees of freedom: mean 4095, sd 90.5. Poisson(16) over 4096 buckets rarely tops 32.
        for (name, keys) in &sets {
            let keys: Vec<Signature> = keys().collect();
            for seed in [0, 1, 0xdead_beef_cafe_f00d, u64::MAX] {
                for (bits, (chi2, max)) in ["low", "high"].iter().zip(spread(&keys, seed)) {
                    assert!(chi2 < 4095.0 + 6.0 * 90.5, "{name}, seed {seed:#x}, {bits} bits: chi2 {chi2}");
                    assert!(max <= 40, "{name}, seed {seed:#x}, {bits} bits: fullest bucket {max}");
                }
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
