//! The Internet checksum: the 16-bit one's-complement sum of RFC 1071, its incremental update
//! (RFC 1624) and the IPv4 and IPv6 pseudo-headers that TCP, UDP and ICMPv6 sum (RFC 9293 §3.1,
//! RFC 8200 §8.1).
//!
//! Sums here are *unfinished*: a `u16` one's-complement sum, not yet complemented. A checksum field
//! holds [`finish`] of the sum over the covered bytes with the field itself zero; a receiver verifies by
//! summing the covered bytes *including* the field and comparing with `0xffff`.
//!
//! [`data`] adds eight bytes at a time into a 64-bit accumulator with an end-around carry. That gives
//! the same result as adding 16-bit words, because the one's-complement sum is a sum modulo
//! `0xffff` and `2^16 ≡ 1 (mod 0xffff)`, so every 16-bit lane of a 64-bit word carries the same weight
//! (RFC 1071 §2(B), "parallel summation"); the result is folded to 16 bits at the end. The sum is
//! byte-order independent in the same way, but this module reads big-endian words so that the result
//! is the value of the field as it is on the wire.
//!
//! Ours rather than a crate's on purpose: the stack needs unfinished sums it can add to (prepared
//! content's per-segment sums, RFC 1624 updates, offload pseudo-header seeds), not only a finished
//! checksum of a buffer.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Folds a 64-bit one's-complement accumulator to 16 bits.
pub(crate) fn fold(mut acc: u64) -> u16 {
    // Each step adds the high half to the low half; two rounds per width remove every carry.
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    // The loop above leaves at most 16 bits.
    u16::try_from(acc).unwrap_or(0xffff)
}

/// Adds a 64-bit word into a one's-complement accumulator (end-around carry).
fn add64(acc: u64, word: u64) -> u64 {
    let (sum, carry) = acc.overflowing_add(word);
    sum + u64::from(carry)
}

/// The one's-complement sum of `bytes`, read as big-endian 16-bit words; an odd last byte is padded
/// with a zero byte on its right (RFC 1071 §1). Sums eight bytes per step.
#[must_use]
pub fn data(bytes: &[u8]) -> u16 {
    let mut acc = 0u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        acc = add64(acc, u64::from_be_bytes(word));
    }
    let rest = chunks.remainder();
    let mut pairs = rest.chunks_exact(2);
    for pair in &mut pairs {
        acc = add64(acc, u64::from(u16::from_be_bytes([pair[0], pair[1]])));
    }
    if let [last] = pairs.remainder() {
        acc = add64(acc, u64::from(u16::from_be_bytes([*last, 0])));
    }
    fold(acc)
}

/// The one's-complement sum of `bytes`, two bytes at a time: the plain RFC 1071 loop, kept as the
/// reference that [`data`] is tested against.
#[must_use]
pub fn data_reference(bytes: &[u8]) -> u16 {
    let mut acc: u32 = 0;
    let mut pairs = bytes.chunks_exact(2);
    for pair in &mut pairs {
        acc += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
        acc = (acc & 0xffff) + (acc >> 16);
    }
    if let [last] = pairs.remainder() {
        acc += u32::from(u16::from_be_bytes([*last, 0]));
        acc = (acc & 0xffff) + (acc >> 16);
    }
    fold(u64::from(acc))
}

/// One's-complement addition of two sums.
#[must_use]
pub fn add(a: u16, b: u16) -> u16 {
    fold(u64::from(a) + u64::from(b))
}

/// The one's-complement sum of several sums, e.g. a pseudo-header and a segment.
///
/// Summing a buffer in pieces and combining the pieces equals summing it whole as long as every piece
/// but the last has an even length (the byte lanes must line up).
#[must_use]
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// The checksum field value for a finished sum: its one's complement.
#[must_use]
pub fn finish(sum: u16) -> u16 {
    !sum
}

/// The one's-complement sum of the IPv4 pseudo-header of RFC 9293 §3.1 (source, destination, a zero
/// byte, the protocol number and the upper-layer length).
///
/// `length` is the TCP or UDP length (header and data). IPv4 carries it in 16 bits; a larger value
/// (which no IPv4 packet can have) is summed as the two 16-bit halves of a 32-bit field, so the call
/// never panics but the result matches no real packet.
#[must_use]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u32) -> u16 {
    let s = u64::from(src.to_bits());
    let d = u64::from(dst.to_bits());
    fold(s + d + u64::from(protocol) + u64::from(length))
}

/// The one's-complement sum of the IPv6 pseudo-header of RFC 8200 §8.1: source, destination, the
/// 32-bit upper-layer packet length, three zero bytes and the next header value (the upper-layer
/// protocol, not that of an extension header in between).
///
/// TCP, UDP and ICMPv6 (RFC 4443 §2.3) sum it; `length` is the upper-layer length (header and
/// data), which IPv6 carries in 32 bits here.
#[must_use]
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, length: u32) -> u16 {
    let mut acc = 0u64;
    for addr in [src.to_bits(), dst.to_bits()] {
        // Each 64-bit half is four 16-bit lanes; add64 keeps the end-around carry.
        acc = add64(acc, u64::try_from(addr >> 64).unwrap_or(0));
        acc = add64(acc, u64::try_from(addr & u128::from(u64::MAX)).unwrap_or(0));
    }
    fold(add64(acc, u64::from(length) + u64::from(next_header)))
}

/// Updates a checksum *field* after one 16-bit word it covers changed from `old` to `new`
/// (RFC 1624 eqn. 3: `HC' = ~(~HC + ~m + m')`).
///
/// Eqn. 3 (rather than eqn. 2 of RFC 1141) gives exactly the field a full recomputation gives, for
/// any data that is not all zeros: neither can produce `0xffff`, the negative zero that eqn. 2 can.
/// IPv4 headers (version nibble) and TCP pseudo-headers (protocol number) are never all zeros.
#[must_use]
pub fn update(checksum: u16, old: u16, new: u16) -> u16 {
    !combine(&[!checksum, !old, new])
}

/// Updates a checksum field after a 32-bit value it covers (an IPv4 address, a sequence number)
/// changed from `old` to `new`; a 32-bit word is two 16-bit words to RFC 1624.
#[must_use]
pub fn update_u32(checksum: u16, old: u32, new: u32) -> u16 {
    let [o0, o1, o2, o3] = old.to_be_bytes();
    let [n0, n1, n2, n3] = new.to_be_bytes();
    !combine(&[
        !checksum,
        !u16::from_be_bytes([o0, o1]),
        !u16::from_be_bytes([o2, o3]),
        u16::from_be_bytes([n0, n1]),
        u16::from_be_bytes([n2, n3]),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(data(&bytes), 0xddf2);
        assert_eq!(data_reference(&bytes), 0xddf2);
        assert_eq!(finish(data(&bytes)), 0x220d);
    }

    #[test]
    fn known_ipv4_header() {
        // A real header (Wikipedia's IPv4 checksum example): checksum field b861.
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01,
            0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(data(&header), 0xffff, "a correct header sums to all ones");
        let mut zeroed = header;
        zeroed[10] = 0;
        zeroed[11] = 0;
        assert_eq!(finish(data(&zeroed)), 0xb861);
    }

    #[test]
    fn odd_length_pads_right() {
        assert_eq!(data(&[0xab]), 0xab00);
        assert_eq!(data(&[0x12, 0x34, 0xab]), 0x12 * 256 + 0x34 + 0xab00);
        assert_eq!(data(&[]), 0);
    }

    #[test]
    fn carries_wrap_around() {
        assert_eq!(data(&[0xff; 64]), 0xffff);
        assert_eq!(data(&[0xff, 0xff, 0x00, 0x01]), 0x0001);
        assert_eq!(add(0xffff, 0x0001), 0x0001);
    }

    #[test]
    fn pseudo_header_matches_bytes() {
        let src = Ipv4Addr::new(192, 168, 1, 1);
        let dst = Ipv4Addr::new(10, 0, 0, 200);
        let bytes = [192, 168, 1, 1, 10, 0, 0, 200, 0, 6, 0x05, 0xdc];
        assert_eq!(pseudo_header_v4(src, dst, 6, 1500), data(&bytes));
    }

    #[test]
    fn pseudo_header_v6_matches_bytes() {
        let src: Ipv6Addr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        let dst: Ipv6Addr = "ff02::1:ff00:1".parse().unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&src.octets());
        bytes.extend_from_slice(&dst.octets());
        bytes.extend_from_slice(&70_000u32.to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 58]);
        assert_eq!(pseudo_header_v6(src, dst, 58, 70_000), data(&bytes));
        // All-ones addresses: every lane carries.
        let ones = Ipv6Addr::from_bits(u128::MAX);
        let mut bytes = [0xffu8; 40];
        bytes[32..].copy_from_slice(&[0, 0, 0xff, 0xff, 0, 0, 0, 0xff]);
        assert_eq!(pseudo_header_v6(ones, ones, 0xff, 0xffff), data(&bytes));
    }

    proptest! {
        #[test]
        fn pseudo_header_v6_equals_bytes(src in any::<u128>(), dst in any::<u128>(), nh in any::<u8>(), len in any::<u32>()) {
            let (src, dst) = (Ipv6Addr::from_bits(src), Ipv6Addr::from_bits(dst));
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&src.octets());
            bytes.extend_from_slice(&dst.octets());
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend_from_slice(&[0, 0, 0, nh]);
            prop_assert_eq!(pseudo_header_v6(src, dst, nh, len), data(&bytes));
        }

        #[test]
        fn wide_sum_equals_reference(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            prop_assert_eq!(data(&bytes), data_reference(&bytes));
        }

        #[test]
        fn split_sums_combine(bytes in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..300) {
            let cut = (cut * 2).min(bytes.len() & !1);
            let (a, b) = bytes.split_at(cut);
            prop_assert_eq!(combine(&[data(a), data(b)]), data(&bytes));
        }

        #[test]
        fn incremental_update_equals_recompute(
            mut bytes in proptest::collection::vec(any::<u8>(), 4..200),
            word in 0usize..100,
            new in any::<u16>(),
        ) {
            // Make the data non-zero so that the one's-complement zero ambiguity cannot arise.
            bytes[0] |= 0x40;
            let at = (word * 2) % (bytes.len() & !1);
            prop_assume!(at != 0);
            let before = finish(data(&bytes));
            let old = u16::from_be_bytes([bytes[at], bytes[at + 1]]);
            bytes[at..at + 2].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update(before, old, new), finish(data(&bytes)));
        }

        #[test]
        fn incremental_update_u32_equals_recompute(
            mut bytes in proptest::collection::vec(any::<u8>(), 8..200),
            word in 0usize..50,
            new in any::<u32>(),
        ) {
            bytes[0] |= 0x40;
            let at = 4 + (word * 4) % ((bytes.len() - 4) & !3).max(1);
            prop_assume!(at + 4 <= bytes.len());
            let before = finish(data(&bytes));
            let old = u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
            bytes[at..at + 4].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update_u32(before, old, new), finish(data(&bytes)));
        }
    }
}
