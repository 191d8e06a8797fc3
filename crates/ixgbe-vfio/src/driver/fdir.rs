//! Flow Director perfect-match filters keyed by flow group (82599 datasheet §7.1.2.7), and the
//! bucket hash the driver must compute for each filter.
//!
//! Affinity-Accept (Pesterev et al., EuroSys 2012) routes the 4096 flow groups (the low 12 bits of
//! the TCP source port) with one perfect filter each. The global masks make every field but those 12
//! bits irrelevant: FDIRTCPM = `0xFFFF000F` (source mask `0x0FFF` bit-reversed and inverted, the
//! destination ignored), addresses, VLAN, pool and flex bytes ignored, the L4 type (TCP) kept.
//!
//! # The bucket hash
//!
//! A perfect filter is stored in the bucket that its (masked) input hashes to, and the driver has to
//! tell the device which bucket (FDIRHASH bits 14:0). The hash is the 82599's "ATR" hash with the key
//! in FDIRHKEY, as described in the comments of Linux's `ixgbe_atr_compute_perfect_hash_82599` and
//! DPDK's `ixgbe_atr_compute_hash_82599` (read for the facts; this is our own code):
//!
//! * the input is 11 big-endian 32-bit words: `vm_pool:8 flow_type:8 vlan:16`, the destination
//!   address (4 words), the source address (4 words), `src_port:16 dst_port:16`,
//!   `flex_bytes:16 bucket_hash:16`, each ANDed with its mask;
//! * `common` is the XOR of words 1..=10; `hi = common ^ w0 ^ (w0 >> 16)`, `lo = rotate(common, 16)`;
//! * key bit 0 selects `lo` and bit 16 `hi` (before `lo` takes `w0 ^ (w0 << 16)`), then for
//!   n in 1..16 key bit n selects `lo >> n` and bit n + 16 selects `hi >> n`; the selected values are
//!   XORed together;
//! * a perfect filter keeps 11, 12 or 13 bits of the result for PBALLOC 64, 128 or 256 KiB.

use std::time::{Duration, Instant};

use crate::hw::Mmio;
use crate::regs;

/// How many flow groups there are (the low 12 bits of a port).
pub(crate) const GROUPS: usize = 4096;

/// The mask that takes a TCP source port to its flow group.
pub(crate) const GROUP_PORT_MASK: u16 = 0x0FFF;

/// How many times the driver reads FDIRCMD waiting for the device to execute a filter command
/// before giving up (Linux and DPDK poll 10 times, 10 µs apart; the model may need a few more).
pub(crate) const CMD_POLLS: u32 = 1000;

/// The Flow Director input of one filter, in the layout the hash reads (Linux's
/// `union ixgbe_atr_input`). Every field holds the value as a number (not wire bytes); the hash
/// puts each in its big-endian place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FdirInput {
    /// VM pool (byte 0).
    pub vm_pool: u8,
    /// Flow type: L4 type in bits 1:0, IPv6 in bit 2 (byte 1).
    pub flow_type: u8,
    /// VLAN tag (bytes 2..4).
    pub vlan_id: u16,
    /// Destination address, as four big-endian words (IPv4 in word 0).
    pub dst_ip: [u32; 4],
    /// Source address, as four big-endian words (IPv4 in word 0).
    pub src_ip: [u32; 4],
    /// TCP/UDP source port.
    pub src_port: u16,
    /// TCP/UDP destination port.
    pub dst_port: u16,
    /// Flexible bytes.
    pub flex_bytes: u16,
}

impl FdirInput {
    /// The input of flow group `group`'s filter, already masked: TCP over IPv4, source port = the
    /// group, everything else zero (ignored by the global masks).
    #[must_use]
    pub fn flow_group(group: u16) -> Self {
        Self { flow_type: flow_type_tcpv4(), src_port: group & GROUP_PORT_MASK, ..Self::default() }
    }

    /// The mask matching the registers the driver programs (see the module documentation): flow
    /// type (L4 type and IPv6 bits), the low 12 bits of the source port; everything else ignored.
    #[must_use]
    pub fn flow_group_mask() -> Self {
        Self { flow_type: 0x7, src_port: GROUP_PORT_MASK, ..Self::default() }
    }

    /// The 11 words the hash reads, as numbers (each the big-endian reading of its four bytes).
    #[must_use]
    pub fn words(&self) -> [u32; 11] {
        let mut w = [0u32; 11];
        w[0] = u32::from(self.vm_pool) << 24 | u32::from(self.flow_type) << 16 | u32::from(self.vlan_id);
        w[1..5].copy_from_slice(&self.dst_ip);
        w[5..9].copy_from_slice(&self.src_ip);
        w[9] = u32::from(self.src_port) << 16 | u32::from(self.dst_port);
        // The low half is the bucket hash field, always zero in the input.
        w[10] = u32::from(self.flex_bytes) << 16;
        w
    }

    /// This input ANDed with `mask`, field by field.
    #[must_use]
    pub fn masked(&self, mask: &Self) -> Self {
        let and4 = |a: [u32; 4], b: [u32; 4]| [a[0] & b[0], a[1] & b[1], a[2] & b[2], a[3] & b[3]];
        Self {
            vm_pool: self.vm_pool & mask.vm_pool,
            flow_type: self.flow_type & mask.flow_type,
            vlan_id: self.vlan_id & mask.vlan_id,
            dst_ip: and4(self.dst_ip, mask.dst_ip),
            src_ip: and4(self.src_ip, mask.src_ip),
            src_port: self.src_port & mask.src_port,
            dst_port: self.dst_port & mask.dst_port,
            flex_bytes: self.flex_bytes & mask.flex_bytes,
        }
    }
}

/// The flow type byte of TCP over IPv4.
fn flow_type_tcpv4() -> u8 {
    // The constant is 2; the conversion cannot fail.
    u8::try_from(regs::FDIR_FLOW_TYPE_TCPV4).unwrap_or(2)
}

/// The 82599 ATR hash of `words` (already masked) with `key`: 16 significant bits (see the module
/// documentation for the algorithm and its sources).
#[must_use]
pub fn atr_hash(words: &[u32; 11], key: u32) -> u32 {
    let flow_vm_vlan = words[0];
    let common = words[1..].iter().fold(0, |acc, w| acc ^ w);
    let hi = common ^ flow_vm_vlan ^ (flow_vm_vlan >> 16);
    let mut lo = common.rotate_left(16);
    let mut hash = 0;
    if key & 1 != 0 {
        hash ^= lo;
    }
    if key & (1 << 16) != 0 {
        hash ^= hi;
    }
    // Bit 0 of the stream is processed without the flow/VM/VLAN word; the rest with it.
    lo ^= flow_vm_vlan ^ (flow_vm_vlan << 16);
    for n in 1..16 {
        if key & (1 << n) != 0 {
            hash ^= lo >> n;
        }
        if key & (1 << (n + 16)) != 0 {
            hash ^= hi >> n;
        }
    }
    hash & 0xFFFF
}

/// The bucket hash mask of a perfect-match filter for a FDIRCTRL.PBALLOC value.
#[must_use]
pub fn perfect_bucket_mask(pballoc: u32) -> u32 {
    match pballoc {
        regs::FDIRCTRL_PBALLOC_64K => regs::FDIR_PERFECT_BUCKET_MASK_64K,
        regs::FDIRCTRL_PBALLOC_128K => regs::FDIR_PERFECT_BUCKET_MASK_128K,
        _ => regs::FDIR_PERFECT_BUCKET_MASK_256K,
    }
}

/// The bucket hash of `group`'s perfect filter, for FDIRHASH bits 14:0.
#[must_use]
pub fn flow_group_bucket(group: u16, key: u32, pballoc: u32) -> u32 {
    let input = FdirInput::flow_group(group).masked(&FdirInput::flow_group_mask());
    atr_hash(&input.words(), key) & perfect_bucket_mask(pballoc)
}

/// A 2 x 16-bit port mask register value (FDIRTCPM, FDIRUDPM): each half bit-reversed (the register's
/// least significant bit masks the port's most significant bit) and inverted (1 = ignore).
#[must_use]
pub fn port_mask_register(src_mask: u16, dst_mask: u16) -> u32 {
    let value = u32::from(dst_mask.reverse_bits()) << 16 | u32::from(src_mask.reverse_bits());
    !value
}

/// Why a filter command did not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmdError {
    /// FDIRCMD's command field never cleared.
    Timeout,
    /// The command completed, but FDIRFSTAT counted `failed` failed adds.
    Rejected {
        /// Failed adds the device reported.
        failed: u32,
    },
}

/// The result of one filter command: what the device's add counters said on the way.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CmdCounters {
    /// FDIRUSTAT's add field, read after the command (clear on read).
    pub(crate) adds: u64,
    /// FDIRUSTAT's remove field.
    pub(crate) removes: u64,
    /// FDIRFSTAT's failed-add field.
    pub(crate) failed_adds: u64,
    /// FDIRFSTAT's failed-remove field.
    pub(crate) failed_removes: u64,
    /// FDIRCMD reads spent polling.
    pub(crate) polls: u64,
}

/// Writes (or with `update`, rewrites) flow group `group`'s perfect filter to route to `queue`, and
/// waits for the device to execute the command (§7.1.2.7.x "Adding a perfect filter"; FDIRCMD
/// §8.2.3.21.x). Returns the counters it read; the statistics registers it reads are clear-on-read,
/// so the caller adds them to its totals.
pub(crate) fn write_group_filter(
    mmio: &dyn Mmio,
    group: u16,
    queue: u16,
    key: u32,
    pballoc: u32,
    update: bool,
) -> (Result<(), CmdError>, CmdCounters) {
    let group = group & GROUP_PORT_MASK;
    let bucket = flow_group_bucket(group, key, pballoc);
    // The masked input goes into the filter registers (addresses, destination port, VLAN and flex
    // bytes are all masked to zero).
    mmio.write32(regs::FDIRIPSA, 0);
    mmio.write32(regs::FDIRIPDA, 0);
    mmio.write32(regs::FDIRPORT, u32::from(group));
    mmio.write32(regs::FDIRVLAN, 0);
    mmio.write32(regs::FDIRHASH, bucket | u32::from(group) << regs::FDIRHASH_SOFT_ID_SHIFT);
    let mut cmd = regs::FDIRCMD_ADD_FLOW
        | regs::FDIRCMD_LAST
        | regs::FDIRCMD_QUEUE_EN
        | regs::FDIR_FLOW_TYPE_TCPV4 << regs::FDIRCMD_L4TYPE_SHIFT
        | u32::from(queue) << regs::FDIRCMD_RX_QUEUE_SHIFT;
    if update {
        cmd |= regs::FDIRCMD_FILTER_UPDATE;
    }
    mmio.write32(regs::FDIRCMD, cmd);
    let mut counters = CmdCounters::default();
    let done = poll_cmd(mmio, &mut counters);
    let ustat = mmio.read32(regs::FDIRUSTAT);
    let fstat = mmio.read32(regs::FDIRFSTAT);
    counters.adds = u64::from(ustat & regs::FDIRUSTAT_ADD_MASK);
    counters.removes = u64::from(ustat >> regs::FDIRUSTAT_REMOVE_SHIFT);
    let failed = fstat & regs::FDIRFSTAT_FADD_MASK;
    counters.failed_adds = u64::from(failed);
    counters.failed_removes =
        u64::from((fstat >> regs::FDIRFSTAT_FREMOVE_SHIFT) & regs::FDIRFSTAT_FIELD_MASK);
    if !done {
        return (Err(CmdError::Timeout), counters);
    }
    if failed != 0 {
        return (Err(CmdError::Rejected { failed }), counters);
    }
    (Ok(()), counters)
}

/// Polls FDIRCMD until its command field clears, at most [`CMD_POLLS`] reads; the first few back to
/// back, then 10 µs apart (as Linux and DPDK wait).
fn poll_cmd(mmio: &dyn Mmio, counters: &mut CmdCounters) -> bool {
    for i in 0..CMD_POLLS {
        counters.polls += 1;
        if mmio.read32(regs::FDIRCMD) & regs::FDIRCMD_CMD_MASK == 0 {
            return true;
        }
        if i < 8 {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(10));
        }
    }
    false
}

/// Programs the global Flow Director configuration for perfect filters keyed by flow group
/// (§7.1.2.7.x; Linux `ixgbe_init_fdir_perfect_82599` and `ixgbe_fdir_set_input_mask_82599` for the
/// order): keys, FDIRCTRL (then poll INIT_DONE), then the masks. Returns whether INIT_DONE was seen
/// within `timeout`.
pub(crate) fn init_perfect(mmio: &dyn Mmio, key: u32, pballoc: u32, timeout: Duration) -> bool {
    mmio.write32(regs::FDIRHKEY, key);
    mmio.write32(regs::FDIRSKEY, regs::ATR_SIGNATURE_HASH_KEY);
    // Perfect match, report the filter id in the RX descriptor, maximum bucket list length 0xA and
    // the "almost full" threshold of Linux and DPDK; flex bytes at word 6 (the EtherType, unused:
    // masked off below).
    let ctrl = pballoc
        | regs::FDIRCTRL_PERFECT_MATCH
        | regs::FDIRCTRL_REPORT_STATUS
        | 0x6 << regs::FDIRCTRL_FLEX_SHIFT
        | 0xA << regs::FDIRCTRL_MAX_LENGTH_SHIFT
        | 0x4 << regs::FDIRCTRL_FULL_THRESH_SHIFT;
    mmio.write32(regs::FDIRCTRL, ctrl);
    let start = Instant::now();
    loop {
        if mmio.read32(regs::FDIRCTRL) & regs::FDIRCTRL_INIT_DONE != 0 {
            break;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    // The global masks (§8.2.3.21.x): ignore VLAN, pool, flex bytes and the IPv6 destination; keep
    // the L4 type. Addresses: all bits ignored. Ports: the low 12 bits of the source port only.
    mmio.write32(
        regs::FDIRM,
        regs::FDIRM_VLANID | regs::FDIRM_VLANP | regs::FDIRM_POOL | regs::FDIRM_FLEX | regs::FDIRM_DIPV6,
    );
    mmio.write32(regs::FDIRSIP4M, u32::MAX);
    mmio.write32(regs::FDIRDIP4M, u32::MAX);
    let ports = port_mask_register(GROUP_PORT_MASK, 0);
    mmio.write32(regs::FDIRTCPM, ports);
    mmio.write32(regs::FDIRUDPM, ports);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An independent transcription of the reference's byte-level procedure: the input as Linux lays
    /// it out in memory (44 bytes, multi-byte fields big-endian), the mask applied to each 32-bit
    /// word of the stream, words XORed in memory order and then read big-endian.
    fn reference(input: &FdirInput, mask: &FdirInput, key: u32) -> u32 {
        fn bytes(i: &FdirInput) -> [u8; 44] {
            let mut b = [0u8; 44];
            b[0] = i.vm_pool;
            b[1] = i.flow_type;
            b[2..4].copy_from_slice(&i.vlan_id.to_be_bytes());
            for k in 0..4 {
                b[4 + 4 * k..8 + 4 * k].copy_from_slice(&i.dst_ip[k].to_be_bytes());
                b[20 + 4 * k..24 + 4 * k].copy_from_slice(&i.src_ip[k].to_be_bytes());
            }
            b[36..38].copy_from_slice(&i.src_port.to_be_bytes());
            b[38..40].copy_from_slice(&i.dst_port.to_be_bytes());
            b[40..42].copy_from_slice(&i.flex_bytes.to_be_bytes());
            b
        }
        let (ib, mb) = (bytes(input), bytes(mask));
        let stream: Vec<[u8; 4]> =
            (0..11).map(|w| std::array::from_fn(|k| ib[4 * w + k] & mb[4 * w + k])).collect();
        let flow_vm_vlan = u32::from_be_bytes(stream[0]);
        let mut x = [0u8; 4];
        for w in &stream[1..] {
            for k in 0..4 {
                x[k] ^= w[k];
            }
        }
        let common = u32::from_be_bytes(x);
        let mut lo = common.rotate_right(16);
        let hi = common ^ flow_vm_vlan ^ (flow_vm_vlan >> 16);
        let mut hash = 0u32;
        for n in 0..16 {
            if n == 1 {
                lo ^= flow_vm_vlan ^ (flow_vm_vlan << 16);
            }
            if key & (1 << n) != 0 {
                hash ^= lo >> n;
            }
            if key & (1 << (n + 16)) != 0 {
                hash ^= hi >> n;
            }
        }
        hash & 0xFFFF
    }

    #[test]
    fn matches_the_byte_level_reference_on_arbitrary_inputs() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let mut r = || u32::try_from(next() >> 32).unwrap_or(0);
            let input = FdirInput {
                vm_pool: r().to_le_bytes()[0],
                flow_type: r().to_le_bytes()[0],
                vlan_id: u16::try_from(r() >> 16).unwrap_or(0),
                dst_ip: [r(), r(), r(), r()],
                src_ip: [r(), r(), r(), r()],
                src_port: u16::try_from(r() >> 16).unwrap_or(0),
                dst_port: u16::try_from(r() >> 16).unwrap_or(0),
                flex_bytes: u16::try_from(r() >> 16).unwrap_or(0),
            };
            let all = FdirInput {
                vm_pool: 0xFF,
                flow_type: 0xFF,
                vlan_id: 0xFFFF,
                dst_ip: [u32::MAX; 4],
                src_ip: [u32::MAX; 4],
                src_port: 0xFFFF,
                dst_port: 0xFFFF,
                flex_bytes: 0xFFFF,
            };
            for mask in [all, FdirInput::flow_group_mask()] {
                let key = r();
                assert_eq!(
                    atr_hash(&input.masked(&mask).words(), key),
                    reference(&input, &mask, key),
                    "{input:?} {mask:?} {key:#x}"
                );
            }
        }
    }

    #[test]
    fn a_hand_computed_vector() {
        // Only the flow type (TCPv4 = 2) is set: w0 = 0x0002_0000, common = 0.
        // hi = 0x0002_0000 ^ 0x0000_0002 = 0x0002_0002; lo = 0, then 0x0002_0000 for n >= 1.
        // Key 0x0001_0002 selects hi (bit 16) and lo >> 1 (bit 1): 0x0002_0002 ^ 0x0001_0000.
        let words = FdirInput::flow_group(0).words();
        assert_eq!(words[0], 0x0002_0000);
        assert_eq!(atr_hash(&words, 0x0001_0002), (0x0002_0002 ^ 0x0001_0000) & 0xFFFF);
        // Group 1: common = 0x0001_0000 (source port in the high half of word 9).
        let words = FdirInput::flow_group(1).words();
        assert_eq!(words[9], 0x0001_0000);
    }

    #[test]
    fn only_the_low_12_bits_of_the_source_port_matter() {
        for port in [0u16, 1, 0x0FFF, 0x1000, 0xABCD, 0xFFFF] {
            assert_eq!(
                flow_group_bucket(port, regs::ATR_BUCKET_HASH_KEY, regs::FDIRCTRL_PBALLOC_256K),
                flow_group_bucket(port & 0x0FFF, regs::ATR_BUCKET_HASH_KEY, regs::FDIRCTRL_PBALLOC_256K)
            );
        }
        let buckets: std::collections::HashSet<u32> = (0..4096u16)
            .map(|g| flow_group_bucket(g, regs::ATR_BUCKET_HASH_KEY, regs::FDIRCTRL_PBALLOC_256K))
            .collect();
        assert!(buckets.iter().all(|&b| b <= 0x1FFF));
        // The hash spreads the groups over many buckets (it is linear, so distinct groups may share).
        assert!(buckets.len() >= 1024, "only {} buckets", buckets.len());
    }

    #[test]
    fn port_mask_of_the_flow_groups() {
        assert_eq!(port_mask_register(0x0FFF, 0), 0xFFFF_000F);
        assert_eq!(port_mask_register(0xFFFF, 0xFFFF), 0);
        assert_eq!(port_mask_register(0, 0), u32::MAX);
    }

    #[test]
    fn bucket_masks_follow_pballoc() {
        assert_eq!(perfect_bucket_mask(regs::FDIRCTRL_PBALLOC_64K), 0x7FF);
        assert_eq!(perfect_bucket_mask(regs::FDIRCTRL_PBALLOC_128K), 0xFFF);
        assert_eq!(perfect_bucket_mask(regs::FDIRCTRL_PBALLOC_256K), 0x1FFF);
    }
}
