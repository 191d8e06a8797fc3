//! The hash functions the 82599 computes in hardware: the Toeplitz hash of RSS (§7.1.2.8.1), the
//! Flow Director bucket hash of perfect-match filters (§7.1.2.7.15), and the Ethernet CRC-32 that the
//! MAC appends when CRC stripping is off.
//!
//! Sources (facts only, our own code): Microsoft's "Verifying the RSS Hash Calculation" (the Toeplitz
//! definition and its verification suite); Linux's `ixgbe_atr_compute_perfect_hash_82599` and DPDK's
//! `ixgbe_fdir.c` for the layout of the Flow Director hash input and the bucket hash steps.

/// The Toeplitz hash of `input` under the 40-byte RSS key (§7.1.2.8.1): for every set bit `i` of the
/// input (most significant bit of the first byte first), XOR in the 32 key bits starting at bit `i`.
///
/// `input` is at most 36 bytes (IPv6 addresses and ports), so the window never runs past the key.
/// The definition, kept as the reference the tables are tested against.
#[cfg(test)]
#[must_use]
pub(crate) fn toeplitz(key: &[u8; 40], input: &[u8]) -> u32 {
    let mut hash = 0u32;
    // The key window: the 32 key bits starting at the current input bit, plus the next 32 bits to
    // shift in from.
    let mut window = u64::from(u32::from_be_bytes([key[0], key[1], key[2], key[3]])) << 32
        | u64::from(u32::from_be_bytes([key[4], key[5], key[6], key[7]]));
    let mut next = 8;
    for (i, &byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= (window >> 32) as u32;
            }
            window <<= 1;
        }
        // After every 4 input bytes the low half of the window has been shifted out; refill it.
        if i % 4 == 3 {
            let k = |j: usize| key.get(j).copied().unwrap_or(0);
            window |= u64::from(u32::from_be_bytes([k(next), k(next + 1), k(next + 2), k(next + 3)]));
            next += 4;
        }
    }
    hash
}

/// The Toeplitz hash of one key as byte tables: the hash of an input is the XOR of one table entry per
/// input byte (the hash is linear in the input bits), 12 lookups for TCP/IPv4 instead of 96 key
/// windows. Built when the driver changes RSSRK.
pub(crate) struct ToeplitzTable {
    key: [u8; 40],
    /// `table[i][v]`: the hash of an input whose byte `i` is `v` and every other byte zero.
    table: Box<[[u32; 256]; 36]>,
}

impl ToeplitzTable {
    /// The tables of `key`.
    pub(crate) fn new(key: &[u8; 40]) -> Self {
        // The 32 key bits starting at bit `pos` (most significant bit of byte 0 is bit 0).
        let window = |pos: usize| -> u32 {
            (0..32).fold(0u32, |w, k| {
                let bit = pos + k;
                let byte = key.get(bit / 8).copied().unwrap_or(0);
                w << 1 | u32::from((byte >> (7 - bit % 8)) & 1)
            })
        };
        let mut table = Box::new([[0u32; 256]; 36]);
        for (i, row) in table.iter_mut().enumerate() {
            let windows: [u32; 8] = std::array::from_fn(|b| window(8 * i + b));
            for (v, entry) in row.iter_mut().enumerate() {
                *entry = (0..8).filter(|b| v & (0x80 >> b) != 0).fold(0, |h, b| h ^ windows[b]);
            }
        }
        Self { key: *key, table }
    }

    /// Whether these are the tables of `key`.
    pub(crate) fn is_for(&self, key: &[u8; 40]) -> bool {
        self.key == *key
    }

    /// The Toeplitz hash of `input` (at most 36 bytes; bytes beyond are ignored).
    #[inline]
    pub(crate) fn hash(&self, input: &[u8]) -> u32 {
        self.table.iter().zip(input).fold(0, |h, (row, &b)| h ^ row[usize::from(b)])
    }
}

/// The Flow Director hash input of one filter or packet, after masking (§7.1.2.7.15), as the 11
/// big-endian words of the hardware's input stream read as integers: word 0 holds the pool (31:24),
/// the flow type (23:16: L4 type in 17:16, IPv6 in 18) and the VLAN tag (15:0); words 1..5 the
/// destination address, 5..9 the source address (IPv4: the first word of each, the address as a
/// big-endian integer); word 9 the source port (31:16) and destination port (15:0); word 10 the flex
/// bytes (31:16).
pub(crate) type AtrStream = [u32; 11];

/// The bucket hash of a perfect-match filter (§7.1.2.7.15) under the 32-bit hash key `key`
/// (FDIRHKEY), 15 bits wide: the hardware uses the low 11, 12 or 13 bits (2K, 4K or 8K buckets).
///
/// The stream's words 1..11 fold into one word `common`; the hash XORs, for every set bit `n` of the
/// key's low half, `common` rotated by 16 bits and shifted right by `n`, and for every set bit `n + 16`,
/// `common` shifted right by `n`; word 0 (flow type, pool, VLAN) is mixed into both halves, into the
/// rotated one only after bit 0 has been processed.
#[must_use]
pub(crate) fn atr_bucket_hash(key: u32, stream: &AtrStream) -> u32 {
    let flow_vm_vlan = stream[0];
    let common = stream[1..].iter().fold(0u32, |acc, w| acc ^ w);
    let mut lo = common.rotate_left(16);
    let hi = common ^ flow_vm_vlan ^ (flow_vm_vlan >> 16);
    let mut bucket = 0u32;
    for n in 0..16 {
        if n == 1 {
            lo ^= flow_vm_vlan ^ (flow_vm_vlan << 16);
        }
        if key & (1 << n) != 0 {
            bucket ^= lo >> n;
        }
        if key & (1 << (n + 16)) != 0 {
            bucket ^= hi >> n;
        }
    }
    bucket & 0x7FFF
}

/// The reflected CRC-32 table of the Ethernet polynomial 0x04C11DB7 (IEEE 802.3 §3.2.9).
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        #[expect(clippy::cast_possible_truncation, reason = "i < 256")]
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// The Ethernet frame check sequence of `frame` (without FCS), in the byte order it goes on the wire.
#[must_use]
pub(crate) fn ethernet_fcs(frame: &[u8]) -> [u8; 4] {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in frame {
        crc = CRC_TABLE[((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
    }
    (!crc).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of Microsoft's RSS verification suite.
    const MS_KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0,
        0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42,
        0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    fn v4_input(src: [u8; 4], dst: [u8; 4], ports: Option<(u16, u16)>) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&src);
        v.extend_from_slice(&dst);
        if let Some((s, d)) = ports {
            v.extend_from_slice(&s.to_be_bytes());
            v.extend_from_slice(&d.to_be_bytes());
        }
        v
    }

    #[test]
    fn toeplitz_microsoft_ipv4_vectors() {
        // (destination, source, destination port, source port, IPv4-only hash, TCP/IPv4 hash)
        type Vector = ([u8; 4], [u8; 4], u16, u16, u32, u32);
        let vectors: [Vector; 5] = [
            ([161, 142, 100, 80], [66, 9, 149, 187], 1766, 2794, 0x323e_8fc2, 0x51cc_c178),
            ([65, 69, 140, 83], [199, 92, 111, 2], 4739, 14230, 0xd718_262a, 0xc626_b0ea),
            ([12, 22, 207, 184], [24, 19, 198, 95], 38024, 12898, 0xd2d0_a5de, 0x5c2b_394a),
            ([209, 142, 163, 6], [38, 27, 205, 30], 2217, 48228, 0x8298_9176, 0xafc7_327f),
            ([202, 188, 127, 2], [153, 39, 163, 191], 1303, 44251, 0x5d18_09c5, 0x10e8_28a2),
        ];
        for (dst, src, dport, sport, ip_hash, tcp_hash) in vectors {
            assert_eq!(toeplitz(&MS_KEY, &v4_input(src, dst, None)), ip_hash, "{dst:?} ip");
            assert_eq!(toeplitz(&MS_KEY, &v4_input(src, dst, Some((sport, dport)))), tcp_hash, "{dst:?} tcp");
        }
    }

    #[test]
    fn tables_agree_with_the_definition() {
        let t = ToeplitzTable::new(&MS_KEY);
        assert!(t.is_for(&MS_KEY));
        let mut x = 0x1234_5678_9ABC_DEF0u64;
        for len in [8usize, 12, 32, 36] {
            for _ in 0..200 {
                let input: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x.to_le_bytes()[0]
                    })
                    .collect();
                assert_eq!(t.hash(&input), toeplitz(&MS_KEY, &input));
            }
        }
    }

    #[test]
    fn toeplitz_microsoft_ipv6_vector() {
        // 3ffe:2501:200:3::1 (dst) / 3ffe:2501:200:1fff::7 (src), ports 1766 / 2794.
        let dst: std::net::Ipv6Addr = "3ffe:2501:200:3::1".parse().expect("literal");
        let src: std::net::Ipv6Addr = "3ffe:2501:200:1fff::7".parse().expect("literal");
        let mut input = Vec::new();
        input.extend_from_slice(&src.octets());
        input.extend_from_slice(&dst.octets());
        assert_eq!(toeplitz(&MS_KEY, &input), 0x2cc1_8cd5);
        input.extend_from_slice(&2794u16.to_be_bytes());
        input.extend_from_slice(&1766u16.to_be_bytes());
        assert_eq!(toeplitz(&MS_KEY, &input), 0x4020_7d3d);
    }

    #[test]
    fn fcs_of_known_frame() {
        // CRC-32 of "123456789" is 0xCBF43926 (the standard check value).
        assert_eq!(ethernet_fcs(b"123456789"), 0xCBF4_3926u32.to_le_bytes());
    }

    #[test]
    fn bucket_hash_depends_on_masked_fields_only() {
        let key = 0x3DAD_14E2;
        let mut a: AtrStream = [0; 11];
        a[0] = 0x2 << 16;
        a[9] = 0x0123 << 16;
        let mut b = a;
        assert_eq!(atr_bucket_hash(key, &a), atr_bucket_hash(key, &b));
        b[9] = 0x0124 << 16;
        assert_ne!(atr_bucket_hash(key, &a), atr_bucket_hash(key, &b));
        assert!(atr_bucket_hash(key, &a) <= 0x7FFF);
    }
}
