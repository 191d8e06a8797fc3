//! Keyed hashing for the stack's secrets: initial sequence numbers (RFC 6528), SYN cookies
//! (RFC 4987) and ephemeral port selection (RFC 6056).
//!
//! The keyed hash is SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
//! INDOCRYPT 2012) over 64-bit words, the `siphasher` crate's, keyed by the stack so that the key
//! can be chosen (a seeded stack replays exactly) while the default key comes from the operating
//! system's randomness through [`std::hash::RandomState`].

use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use netchannel::signature::FlowGroup;

use crate::wire::SeqNumber;

/// A 128-bit SipHash key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key(pub(crate) [u64; 2]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a secret.
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A random key from the OS's randomness (std seeds each `RandomState` from it).
    pub(crate) fn random() -> Self {
        let a = RandomState::new().hash_one(0x5eed_u64);
        let b = RandomState::new().hash_one(0x00c0_ffee_u64);
        Self([a, b])
    }

    /// A key derived from a seed (deterministic tests).
    pub(crate) fn from_seed(seed: u64) -> Self {
        let k = Self([0x736f_6d65_7073_6575, 0x646f_7261_6e64_6f6d]);
        Self([k.hash(&[seed, 1]), k.hash(&[seed, 2])])
    }

    /// SipHash-2-4 of the little-endian bytes of `words`. (siphasher's per-word `write_u64` takes 9
    /// instructions more per hash than the hand-written rounds it replaced: 169 against 160 for an
    /// IPv4 ISN's two words under callgrind; a SYN hashes at most twice.)
    pub(crate) fn hash(&self, words: &[u64]) -> u64 {
        let mut h = siphasher::sip::SipHasher24::new_with_keys(self.0[0], self.0[1]);
        for &word in words {
            h.write_u64(word);
        }
        h.finish()
    }
}

/// The hash of the stack's tables (connections by 4-tuple, ARP entries, listeners): keyed, so
/// that a peer who cannot learn the key cannot aim its addresses and ports at one bucket, and
/// cheap, since the connection lookup runs on every segment (std's SipHash-1-3 was ~7% of a bulk
/// transfer's instructions). The construction is the registry's (`netchannel::signature`): each
/// 128-bit input is folded into the state with one 64x64->128-bit multiply of key-masked halves,
/// and a final multiply by an odd key word mixes the result; the four key words come from the
/// stack's SipHash key.
#[derive(Clone, Copy)]
pub(crate) struct TableHash([u64; 4]);

impl std::fmt::Debug for TableHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TableHash(..)")
    }
}

impl TableHash {
    pub(crate) fn new(key: &Key) -> Self {
        let word = |i: u64| key.hash(&[0x7461_626c_6568_6173, i]);
        Self([word(0), word(1), word(2), word(3) | 1])
    }
}

impl BuildHasher for TableHash {
    type Hasher = TableHasher;

    #[inline]
    fn build_hasher(&self) -> TableHasher {
        TableHasher { key: self.0, acc: 0 }
    }
}

/// The [`Hasher`] of [`TableHash`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableHasher {
    key: [u64; 4],
    acc: u64,
}

/// The 128-bit product of `a` and `b`, its halves XORed.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    #[expect(clippy::cast_possible_truncation, reason = "the low half of the product")]
    let lo = p as u64;
    lo ^ low64(p >> 64)
}

/// The low 64 bits.
#[inline(always)]
fn low64(x: u128) -> u64 {
    #[expect(clippy::cast_possible_truncation, reason = "the low 64 bits are the point")]
    let lo = x as u64;
    lo
}

impl std::hash::Hasher for TableHasher {
    #[inline]
    fn write_u128(&mut self, x: u128) {
        let [k0, k1, _, _] = self.key;
        self.acc = fold_mul(low64(x >> 64) ^ k0 ^ self.acc, low64(x) ^ k1);
    }

    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.write_u128(u128::from(x));
    }

    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u128(u128::from(x));
    }

    #[inline]
    fn write_u16(&mut self, x: u16) {
        self.write_u128(u128::from(x));
    }

    #[inline]
    fn write_u8(&mut self, x: u8) {
        self.write_u128(u128::from(x));
    }

    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.write_u128(u128::try_from(x).unwrap_or(u128::MAX));
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(16) {
            let mut word = [0u8; 16];
            word[..chunk.len()].copy_from_slice(chunk);
            // The chunk's length in the top byte, so that trailing zero bytes count.
            let len = u128::from(u8::try_from(chunk.len()).unwrap_or(16)) << 120;
            self.write_u128(u128::from_le_bytes(word) ^ len);
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        let [_, _, k2, k3] = self.key;
        fold_mul(self.acc ^ k2, k3)
    }
}

/// The 4-tuple as 64-bit words for the keyed hash: two for IPv4 (each address beside its port),
/// five for IPv6 (the addresses' halves, then both ports); room for two words more (the cookie's
/// inputs).
#[derive(Clone, Copy)]
pub(crate) struct TupleWords {
    words: [u64; 7],
    len: usize,
}

impl TupleWords {
    pub(crate) fn new(local: SocketAddr, remote: SocketAddr) -> Self {
        let mut words = [0; 7];
        let len = match (local, remote) {
            (SocketAddr::V4(l), SocketAddr::V4(r)) => {
                words[0] = (u64::from(l.ip().to_bits()) << 16) | u64::from(l.port());
                words[1] = (u64::from(r.ip().to_bits()) << 16) | u64::from(r.port());
                2
            }
            _ => {
                let (l, r) = (v6_bits(local.ip()), v6_bits(remote.ip()));
                words[..4].copy_from_slice(&[high64(l), low64(l), high64(r), low64(r)]);
                words[4] = (u64::from(local.port()) << 16) | u64::from(remote.port());
                5
            }
        };
        Self { words, len }
    }

    /// These words and `extra` (at most two).
    fn with(mut self, extra: &[u64]) -> Self {
        let end = (self.len + extra.len()).min(self.words.len());
        self.words[self.len..end].copy_from_slice(&extra[..end - self.len]);
        self.len = end;
        self
    }

    fn hash(&self, key: &Key) -> u64 {
        key.hash(&self.words[..self.len])
    }
}

/// The address as 128 bits, an IPv4 one mapped into IPv6 (`::ffff:a.b.c.d`).
pub(crate) fn v6_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().to_bits(),
        IpAddr::V6(v6) => v6.to_bits(),
    }
}

/// The high 64 bits.
fn high64(x: u128) -> u64 {
    low64(x >> 64)
}

/// The low 32 bits.
fn low32(x: u64) -> u32 {
    u32::try_from(x & 0xffff_ffff).unwrap_or(0)
}

/// RFC 6528 §3: `ISN = M + F(localip, localport, remoteip, remoteport, secretkey)`, where `M` is a
/// timer ticking every 4 microseconds (`since` is the time since the stack's epoch).
pub(crate) fn isn(key: &Key, local: SocketAddr, remote: SocketAddr, since: Duration) -> SeqNumber {
    let m = low32(u64::try_from(since.as_micros() / 4).unwrap_or(u64::MAX));
    SeqNumber::new(m.wrapping_add(low32(TupleWords::new(local, remote).hash(key))))
}

/// The MSS values a SYN cookie can carry (its 2-bit index), after Linux's `msstab`.
pub(crate) const COOKIE_MSS: [u16; 4] = [536, 1300, 1440, 1460];

/// Bits of a cookie below its counter.
const COOKIE_BITS: u32 = 24;
const COOKIE_MASK: u32 = (1 << COOKIE_BITS) - 1;
/// How many counter periods a cookie stays valid (the period is [`COOKIE_PERIOD`]).
const COOKIE_MAX_AGE: u32 = 2;
/// The cookie counter's period.
pub(crate) const COOKIE_PERIOD: Duration = Duration::from_secs(64);

/// The counter for `since` the stack's epoch.
pub(crate) fn cookie_count(since: Duration) -> u32 {
    low32(since.as_secs() / COOKIE_PERIOD.as_secs())
}

/// The cookie for a SYN with sequence number `peer_seq`, MSS index `mss_index` (`< 4`), at counter
/// `count` (RFC 4987 §3.6, laid out as Linux's `secure_tcp_syn_cookie`):
/// `H1(tuple) + SEQ + (count << 24) + ((H2(tuple, count) + data) mod 2^24)`.
pub(crate) fn cookie(
    key: &Key,
    local: SocketAddr,
    remote: SocketAddr,
    peer_seq: SeqNumber,
    count: u32,
    mss_index: u32,
) -> SeqNumber {
    let tuple = TupleWords::new(local, remote);
    let h1 = low32(tuple.with(&[1]).hash(key));
    let h2 = low32(tuple.with(&[2, u64::from(count)]).hash(key));
    let value = h1
        .wrapping_add(peer_seq.get())
        .wrapping_add(count << COOKIE_BITS)
        .wrapping_add(h2.wrapping_add(mss_index) & COOKIE_MASK);
    SeqNumber::new(value)
}

/// Checks the cookie `ours` (the ACK's acknowledgment number minus one) for a connection whose
/// SYN had `peer_seq` (the ACK's sequence number minus one) at counter `count`; returns the MSS
/// index it encodes.
pub(crate) fn check_cookie(
    key: &Key,
    local: SocketAddr,
    remote: SocketAddr,
    peer_seq: SeqNumber,
    ours: SeqNumber,
    count: u32,
) -> Option<u32> {
    let tuple = TupleWords::new(local, remote);
    let h1 = low32(tuple.with(&[1]).hash(key));
    let rest = ours.get().wrapping_sub(h1).wrapping_sub(peer_seq.get());
    let diff = count.wrapping_sub(rest >> COOKIE_BITS) & (u32::MAX >> COOKIE_BITS);
    if diff >= COOKIE_MAX_AGE {
        return None;
    }
    let h2 = low32(tuple.with(&[2, u64::from(count.wrapping_sub(diff))]).hash(key));
    let index = rest.wrapping_sub(h2) & COOKIE_MASK;
    (usize::try_from(index).is_ok_and(|i| i < COOKIE_MSS.len())).then_some(index)
}

/// The index of the largest cookie MSS not above `mss`.
pub(crate) fn cookie_mss_index(mss: u16) -> u32 {
    let mut best = 0;
    for (i, &m) in (0u32..).zip(COOKIE_MSS.iter()) {
        if m <= mss {
            best = i;
        }
    }
    best
}

/// RFC 6056 §3.3.3 (algorithm 3, "simple hash-based"): the search for a free ephemeral port starts
/// at `F(local ip, remote ip, remote port, key) + next`, so different destinations see unrelated
/// sequences and one destination sees ports advance.
#[derive(Debug)]
pub(crate) struct PortAllocator {
    key: Key,
    next: u32,
    first: u16,
    count: u32,
}

impl PortAllocator {
    pub(crate) fn new(key: Key, first: u16, last: u16) -> Self {
        let (first, last) = if first <= last { (first, last) } else { (last, first) };
        let first = first.max(1);
        Self { key, next: 0, first, count: u32::from(last) - u32::from(first) + 1 }
    }

    /// A free port for a connection from `local_ip` to `remote`: the first candidate for which
    /// `free(port)` holds and whose flow group `want` accepts.
    pub(crate) fn pick(
        &mut self,
        local_ip: IpAddr,
        remote: SocketAddr,
        want: Option<&dyn Fn(FlowGroup) -> bool>,
        mut free: impl FnMut(u16) -> bool,
    ) -> Option<u16> {
        // The local port is the unknown: the tuple with local port 0.
        let offset = low32(TupleWords::new(SocketAddr::new(local_ip, 0), remote).hash(&self.key));
        for _ in 0..self.count {
            let candidate = offset.wrapping_add(self.next) % self.count;
            self.next = self.next.wrapping_add(1);
            let port = u16::try_from(u32::from(self.first) + candidate).ok()?;
            if want.is_some_and(|w| !w(FlowGroup::of_port(port))) {
                continue;
            }
            if free(port) {
                return Some(port);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    #[test]
    #[expect(deprecated, reason = "std's SipHasher is the reference this test checks against")]
    fn siphash_matches_std_siphasher() {
        use std::hash::Hasher;
        // The reference vector for the empty message with key 00 01 .. 0f.
        let key = Key([0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908]);
        assert_eq!(key.hash(&[]), 0x726f_db47_dd0e_0e31);
        for words in [&[1u64][..], &[1, 2, 3], &[u64::MAX, 0, 7, 9, 11]] {
            let mut h = std::hash::SipHasher::new_with_keys(key.0[0], key.0[1]);
            for w in words {
                h.write(&w.to_le_bytes());
            }
            assert_eq!(key.hash(words), h.finish());
        }
        assert_ne!(Key::random(), Key::random());
        assert_eq!(Key::from_seed(3), Key::from_seed(3));
        assert_ne!(Key::from_seed(3), Key::from_seed(4));
    }

    #[test]
    fn cookies_round_trip_and_expire() {
        let key = Key::from_seed(1);
        let l = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 80));
        let r = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), 40000));
        let seq = SeqNumber::new(u32::MAX - 3);
        for idx in 0..4 {
            for count in [0u32, 5, 255, 256, 1000] {
                let c = cookie(&key, l, r, seq, count, idx);
                assert_eq!(check_cookie(&key, l, r, seq, c, count), Some(idx));
                assert_eq!(check_cookie(&key, l, r, seq, c, count + 1), Some(idx));
                assert_eq!(check_cookie(&key, l, r, seq, c, count + 2), None, "too old");
                // As in Linux, SEQ is added, not hashed: a SYN a few numbers off shifts the MSS
                // index; one further off decodes to no valid index.
                assert_eq!(check_cookie(&key, l, r, seq + 4096, c, count), None, "other SYN");
                let r2 = SocketAddr::new(r.ip(), 40001);
                assert_eq!(check_cookie(&key, l, r2, seq, c, count), None, "other tuple");
                assert_eq!(check_cookie(&Key::from_seed(2), l, r, seq, c, count), None, "other key");
            }
        }
        // A random guess passes with probability about 4 * 2 / 2^24 * ... : none of 10k.
        let passes = (0..10_000u32)
            .filter(|&g| {
                check_cookie(&key, l, r, seq, SeqNumber::new(g.wrapping_mul(0x9e37_79b9)), 7).is_some()
            })
            .count();
        assert!(passes <= 1, "{passes}");
        assert_eq!(cookie_mss_index(1460), 3);
        assert_eq!(cookie_mss_index(1400), 1);
        assert_eq!(cookie_mss_index(100), 0);
    }

    #[test]
    fn isn_depends_on_tuple_and_time() {
        let key = Key::from_seed(1);
        let l = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 80));
        let r = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), 40000));
        let r2 = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), 40001));
        let t = Duration::from_secs(1);
        assert_ne!(isn(&key, l, r, t), isn(&key, l, r2, t));
        assert_eq!(isn(&key, l, r, t + Duration::from_micros(40)) - isn(&key, l, r, t), 10);
    }

    #[test]
    fn ports_spread_and_respect_the_flow_group_hook() {
        let mut p = PortAllocator::new(Key::from_seed(9), 49152, 65535);
        let r = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), 80));
        let ip = IpAddr::from(Ipv4Addr::new(10, 0, 0, 1));
        let a = p.pick(ip, r, None, |_| true).unwrap();
        let b = p.pick(ip, r, None, |_| true).unwrap();
        assert!(a >= 49152 && b >= 49152 && a != b);
        let even: &dyn Fn(FlowGroup) -> bool = &|g| g.0 % 2 == 0;
        for _ in 0..100 {
            let port = p.pick(ip, r, Some(even), |_| true).unwrap();
            assert_eq!(FlowGroup::of_port(port).0 % 2, 0);
        }
        let mut small = PortAllocator::new(Key::from_seed(9), 1000, 1003);
        let mut used = std::collections::HashSet::new();
        while let Some(port) = small.pick(ip, r, None, |p| !used.contains(&p)) {
            used.insert(port);
        }
        assert_eq!(used.len(), 4);
    }

    #[test]
    fn ipv6_tuples_get_cookies_and_isns_of_their_own() {
        let key = Key::from_seed(1);
        let a = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
        let b = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
        let (l, r) = (SocketAddr::from((a, 80)), SocketAddr::from((b, 40000)));
        let seq = SeqNumber::new(7);
        for idx in 0..4 {
            let c = cookie(&key, l, r, seq, 3, idx);
            assert_eq!(check_cookie(&key, l, r, seq, c, 3), Some(idx));
            // Every word of the tuple counts: the low half of the remote address, and each port.
            let other = SocketAddr::from((Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3), 40000));
            assert_eq!(check_cookie(&key, l, other, seq, c, 3), None);
            assert_eq!(check_cookie(&key, SocketAddr::new(l.ip(), 81), r, seq, c, 3), None);
        }
        let t = Duration::from_secs(1);
        let v4 = |x: u8, p: u16| SocketAddr::from((Ipv4Addr::new(10, 0, 0, x), p));
        let mapped = |x: u8, p: u16| SocketAddr::from((Ipv4Addr::new(10, 0, 0, x).to_ipv6_mapped(), p));
        assert_ne!(isn(&key, l, r, t), isn(&key, r, l, t));
        assert_ne!(isn(&key, v4(1, 80), v4(2, 90), t), isn(&key, mapped(1, 80), mapped(2, 90), t));
    }
}
