//! Transport signatures: how the driver side names the net channel that a received Ethernet frame
//! belongs to. The [classifier](crate::classify) computes them from frames.
//!
//! Source: Van Jacobson & Felderman, "Speeding up Networking", LCA 2006: the driver
//! computes each packet's *transport signature* and drops the packet into the channel registered for it;
//! everything else goes to the core's default channel. The 4096 [`FlowGroup`]s keyed by the low 12 bits
//! of the TCP source port are Affinity-Accept's (Pesterev et al., EuroSys 2012).
//!
//! # Signatures
//!
//! A [`Signature`] is `(protocol, local address and port, remote address and port)` *as seen by the
//! receiver*: `local` is the destination of a received packet, `remote` its source. A listener registers
//! the wildcard form ([`Signature::listener`]): the remote is the unspecified address of the local's
//! family with port 0. The registry looks up the exact signature first, then [`Signature::listener`] of
//! it, then falls back to the default channel.
//!
//! Signatures are canonical: both addresses have the same family and IPv6 addresses carry no flow label
//! or scope id (the classifier cannot see a scope id, and the flow label is per-packet).
//!
//! ## Representation
//!
//! A signature is five 64-bit words (40 bytes, no padding), laid out so that [`classify`](crate::classify::classify) fills it with
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
//! [`Signature::new`], [`Signature::listener`] or [`classify`](crate::classify::classify) and is canonical: equality of signatures
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

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::registry::HashKey;

/// TCP's IP protocol number.
pub(crate) const IPPROTO_TCP: u8 = 6;
/// UDP's IP protocol number.
pub(crate) const IPPROTO_UDP: u8 = 17;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// One address is IPv4 and the other IPv6: no packet can carry such a pair.
    #[error("local and remote addresses are of different families")]
    FamilyMismatch,
}

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
    pub(crate) meta: u64,
    /// Wire address bytes, source then destination, as little-endian words; IPv4 fills `addrs[0]` only.
    pub(crate) addrs: [u64; 4],
}

// The layout the hot path relies on: five words, no padding (so derived `Eq` compares exactly the words).
const _: () = assert!(size_of::<Signature>() == 40);

/// The family bit of [`Signature::meta`]: set for IPv6.
const META_V6: u64 = 1 << 40;
/// The remote (source) port's bits of [`Signature::meta`].
const META_REMOTE_PORT: u64 = 0xFFFF;
/// Where the protocol number sits in [`Signature::meta`].
const META_PROTO_SHIFT: u32 = 32;

/// `meta` from the four wire port bytes (source port, destination port), the protocol and the family.
#[inline(always)]
pub(crate) const fn meta(ports: [u8; 4], proto: Proto, v6: bool) -> u64 {
    let family = if v6 { META_V6 } else { 0 };
    // Widening casts: `u64::from` is not const.
    u32::from_le_bytes(ports) as u64 | (proto.number() as u64) << META_PROTO_SHIFT | family
}

/// The little-endian word of the 8 bytes of `b` at `at` (zero if they are not all there, which the
/// callers' constant offsets rule out; the fallback keeps the function panic-free).
#[inline(always)]
pub(crate) fn le64_at(b: &[u8], at: usize) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify;
    use crate::classify::tests::{flow, sock, v4_tcp_frame};

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
}
