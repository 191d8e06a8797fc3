//! Flow Director perfect-match filters (§7.1.2.7): the global input masks, the filter table that
//! FDIRCMD programs, and the lookup of a received packet.
//!
//! Field representations follow the registers (the Linux and DPDK drivers program them this way):
//! IPv4 addresses as FDIRIPSA/FDIRIPDA hold them (the first address byte in bits 7:0), ports as host
//! integers (FDIRPORT), the VLAN tag and flex word as FDIRVLAN holds them. The masks FDIRSIP4M and
//! FDIRDIP4M are inverted (1 = ignore); FDIRTCPM/FDIRUDPM hold each 16-bit port mask bit-reversed and
//! inverted (§8.2.3.21.x: bit 15 of the port is compared under bit 0 of the register).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::hash::{AtrStream, atr_bucket_hash};
use crate::regs;

/// A small multiplicative hasher for the filter table (the key is a few machine words chosen by the
/// driver, not by the wire, so a keyed hash buys nothing here).
#[derive(Default)]
pub(super) struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517C_C1B7_2722_0A95);
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// The low 16 bits of a register field.
#[expect(clippy::cast_possible_truncation, reason = "a 16-bit register field")]
fn low16(v: u32) -> u16 {
    v as u16
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;

/// The L4 type field of FDIRCMD (bits 6:5) and of the hash input's flow type.
pub(super) const L4_UDP: u8 = 1;
/// TCP.
pub(super) const L4_TCP: u8 = 2;
/// SCTP.
pub(super) const L4_SCTP: u8 = 3;

/// A filter's or a packet's fields after the global masks: the key of the filter table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Tuple {
    /// Source IPv4 address (FDIRIPSA layout).
    pub(super) src_ip: u32,
    /// Destination IPv4 address (FDIRIPDA layout).
    pub(super) dst_ip: u32,
    /// Source port.
    pub(super) src_port: u16,
    /// Destination port.
    pub(super) dst_port: u16,
    /// Flow type: L4 type in bits 1:0, IPv6 in bit 2.
    pub(super) flow_type: u8,
    /// VLAN tag (TCI).
    pub(super) vlan: u16,
    /// Flex word.
    pub(super) flex: u16,
}

/// The global masks, read from their registers once per pass and at each FDIRCMD.
#[derive(Clone, Copy, Debug)]
pub(super) struct Masks {
    sip: u32,
    dip: u32,
    tcp: (u16, u16),
    udp: (u16, u16),
    fdirm: u32,
    /// Where the flex word sits in the frame (FDIRCTRL.FLEX, in bytes).
    pub(super) flex_offset: usize,
}

impl Masks {
    /// The masks the registers hold: `read` reads a register.
    pub(super) fn from_regs(read: impl Fn(u32) -> u32) -> Self {
        let ports = |reg: u32| {
            // Each half is bit-reversed and inverted: recover "1 = compare" in port bit order.
            let [lo0, lo1, hi0, hi1] = reg.to_le_bytes();
            let src = !u16::from_le_bytes([lo0, lo1]).reverse_bits();
            let dst = !u16::from_le_bytes([hi0, hi1]).reverse_bits();
            (src, dst)
        };
        let flex_words = (read(regs::FDIRCTRL) >> regs::FDIRCTRL_FLEX_SHIFT) & 0x1F;
        Self {
            sip: !read(regs::FDIRSIP4M),
            dip: !read(regs::FDIRDIP4M),
            tcp: ports(read(regs::FDIRTCPM)),
            udp: ports(read(regs::FDIRUDPM)),
            fdirm: read(regs::FDIRM),
            flex_offset: 2 * flex_words as usize,
        }
    }

    /// `t` with every ignored bit cleared.
    pub(super) fn apply(&self, t: Tuple) -> Tuple {
        let (sp, dp) = match t.flow_type & 0x3 {
            L4_UDP => self.udp,
            L4_TCP | L4_SCTP => self.tcp,
            _ => (0, 0),
        };
        let mut vlan_mask = 0xFFFFu16;
        if self.fdirm & regs::FDIRM_VLANID != 0 {
            vlan_mask &= !0x0FFF;
        }
        if self.fdirm & regs::FDIRM_VLANP != 0 {
            vlan_mask &= !0xE000;
        }
        Tuple {
            src_ip: t.src_ip & self.sip,
            dst_ip: t.dst_ip & self.dip,
            src_port: t.src_port & sp,
            dst_port: t.dst_port & dp,
            flow_type: if self.fdirm & regs::FDIRM_L4P != 0 { 0 } else { t.flow_type & 0x7 },
            vlan: t.vlan & vlan_mask,
            flex: if self.fdirm & regs::FDIRM_FLEX != 0 { 0 } else { t.flex },
        }
    }

    /// The VM pool field as it enters the hash (zero when FDIRM.POOL ignores it).
    pub(super) fn pool(&self, pool: u8) -> u8 {
        if self.fdirm & regs::FDIRM_POOL != 0 { 0 } else { pool & 0x3F }
    }
}

/// The bucket hash the hardware computes over a masked tuple (§7.1.2.7.15), 15 bits.
#[must_use]
pub(super) fn bucket_hash(key: u32, t: &Tuple, pool: u8) -> u32 {
    let mut s: AtrStream = [0; 11];
    s[0] = u32::from(pool) << 24 | u32::from(t.flow_type) << 16 | u32::from(t.vlan);
    // The registers hold the first address byte in bits 7:0; the stream reads addresses big-endian.
    s[1] = t.dst_ip.swap_bytes();
    s[5] = t.src_ip.swap_bytes();
    s[9] = u32::from(t.src_port) << 16 | u32::from(t.dst_port);
    s[10] = u32::from(t.flex.swap_bytes()) << 16;
    atr_bucket_hash(key, &s)
}

/// What a filter does with a matching packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Action {
    /// The RX queue (FDIRCMD.QUEUE_EN), or `None` to leave the choice to RSS.
    pub(super) queue: Option<u16>,
    /// Drop matching packets (FDIRCMD.DROP).
    pub(super) drop: bool,
    /// The software id reported in the descriptor.
    pub(super) soft_id: u16,
    /// The bucket hash, reported next to the soft id.
    pub(super) bucket: u16,
}

/// Why an FDIRCMD failed (counted in FDIRFSTAT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AddError {
    /// Flow Director is not initialized in perfect-match mode, or the filter is IPv6.
    NotSupported,
    /// FDIRHASH's bucket hash is not the one the hardware computes over the masked input.
    HashMismatch,
    /// The table is full.
    Full,
    /// The filter exists and FILTER_UPDATE was not set, or another filter has this hash and soft id.
    Collision,
}

/// What an add did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Added {
    /// A new filter.
    New,
    /// An existing filter re-pointed (FILTER_UPDATE).
    Updated,
}

/// The perfect-match filter table.
#[derive(Debug, Default)]
pub(super) struct Table {
    /// How many filters fit (0: Flow Director not initialized).
    capacity: usize,
    /// log2 of the bucket count: the bucket hash bits that count.
    bucket_bits: u32,
    filters: Map<Tuple, Action>,
    /// (bucket hash, soft id) -> filter, for FDIRCMD remove and query.
    by_hash: Map<u32, Tuple>,
}

impl Table {
    /// Resets the table for a PBALLOC value (FDIRCTRL bits 1:0): 64K/128K/256K hold 2K/4K/8K perfect
    /// filters in as many buckets; 0 turns Flow Director off.
    pub(super) fn init(&mut self, pballoc: u32) {
        self.filters.clear();
        self.by_hash.clear();
        if (1..=3).contains(&pballoc) {
            self.bucket_bits = 10 + pballoc;
            self.capacity = 1 << self.bucket_bits;
        } else {
            self.bucket_bits = 0;
            self.capacity = 0;
        }
    }

    /// Clears every filter (FDIRCMD.CLEARHT), keeping the size.
    pub(super) fn clear(&mut self) {
        self.filters.clear();
        self.by_hash.clear();
    }

    /// Free filters (FDIRFREE.FREE).
    pub(super) fn free(&self) -> usize {
        self.capacity.saturating_sub(self.filters.len())
    }

    /// Programmed filters.
    pub(super) fn len(&self) -> usize {
        self.filters.len()
    }

    /// Whether filters can be programmed.
    pub(super) fn is_enabled(&self) -> bool {
        self.capacity > 0
    }

    fn bucket_mask(&self) -> u32 {
        (1u32 << self.bucket_bits) - 1
    }

    fn hash_key(&self, bucket: u32, soft_id: u16) -> u32 {
        (bucket & self.bucket_mask()) | u32::from(soft_id) << 16
    }

    /// Adds or updates a filter: `tuple` is already masked, `fdirhash` the FDIRHASH register, `key`
    /// FDIRHKEY.
    pub(super) fn add(
        &mut self,
        tuple: Tuple,
        pool: u8,
        fdirhash: u32,
        key: u32,
        action: (Option<u16>, bool),
        update: bool,
    ) -> Result<Added, AddError> {
        if !self.is_enabled() || tuple.flow_type & 0x4 != 0 {
            return Err(AddError::NotSupported);
        }
        let mask = self.bucket_mask();
        let computed = bucket_hash(key, &tuple, pool);
        if fdirhash & mask != computed & mask {
            return Err(AddError::HashMismatch);
        }
        let soft_id = low16(fdirhash >> regs::FDIRHASH_SOFT_ID_SHIFT);
        let bucket = low16(computed & mask);
        let hkey = self.hash_key(computed, soft_id);
        let new = Action { queue: action.0, drop: action.1, soft_id, bucket };
        if let Some(&other) = self.by_hash.get(&hkey)
            && other != tuple
        {
            return Err(AddError::Collision);
        }
        if let Some(&old) = self.filters.get(&tuple) {
            if !update {
                return Err(AddError::Collision);
            }
            let old_key = self.hash_key(u32::from(old.bucket), old.soft_id);
            self.filters.insert(tuple, new);
            self.by_hash.remove(&old_key);
            self.by_hash.insert(hkey, tuple);
            return Ok(Added::Updated);
        }
        if self.filters.len() >= self.capacity {
            return Err(AddError::Full);
        }
        self.filters.insert(tuple, new);
        self.by_hash.insert(hkey, tuple);
        Ok(Added::New)
    }

    /// Removes the filter with this FDIRHASH (bucket hash and soft id); whether there was one.
    pub(super) fn remove(&mut self, fdirhash: u32) -> bool {
        let hkey = self.hash_key(fdirhash, low16(fdirhash >> regs::FDIRHASH_SOFT_ID_SHIFT));
        match self.by_hash.remove(&hkey) {
            Some(t) => self.filters.remove(&t).is_some(),
            None => false,
        }
    }

    /// Whether a filter with this FDIRHASH exists, and its action.
    pub(super) fn query(&self, fdirhash: u32) -> Option<Action> {
        let hkey = self.hash_key(fdirhash, low16(fdirhash >> regs::FDIRHASH_SOFT_ID_SHIFT));
        self.by_hash.get(&hkey).and_then(|t| self.filters.get(t)).copied()
    }

    /// The filter a masked packet tuple matches.
    #[inline]
    pub(super) fn lookup(&self, tuple: &Tuple) -> Option<Action> {
        self.filters.get(tuple).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masks(tcpm: u32) -> Masks {
        Masks::from_regs(|r| match r {
            regs::FDIRTCPM | regs::FDIRUDPM => tcpm,
            regs::FDIRSIP4M | regs::FDIRDIP4M => u32::MAX,
            regs::FDIRM => regs::FDIRM_VLANID | regs::FDIRM_VLANP | regs::FDIRM_FLEX | regs::FDIRM_POOL,
            _ => 0,
        })
    }

    #[test]
    fn design_port_mask_keeps_low_12_source_bits() {
        let m = masks(0xFFFF_000F);
        let t = Tuple {
            src_ip: 0x0100_000A,
            dst_ip: 0x0200_000A,
            src_port: 0xABCD,
            dst_port: 80,
            flow_type: L4_TCP,
            vlan: 5,
            flex: 7,
        };
        let masked = m.apply(t);
        assert_eq!(
            masked,
            Tuple {
                src_ip: 0,
                dst_ip: 0,
                src_port: 0x0BCD,
                dst_port: 0,
                flow_type: L4_TCP,
                vlan: 0,
                flex: 0
            }
        );
    }

    #[test]
    fn add_update_remove() {
        let m = masks(0xFFFF_000F);
        let mut table = Table::default();
        table.init(regs::FDIRCTRL_PBALLOC_256K);
        let key = 0x3DAD_14E2;
        let t = m.apply(Tuple { src_port: 0x123, flow_type: L4_TCP, ..Tuple::default() });
        let h = bucket_hash(key, &t, 0);
        let fdirhash = h | 42 << 16;
        assert_eq!(table.add(t, 0, fdirhash ^ 1, key, (Some(1), false), true), Err(AddError::HashMismatch));
        assert_eq!(table.add(t, 0, fdirhash, key, (Some(1), false), true), Ok(Added::New));
        assert_eq!(table.add(t, 0, fdirhash, key, (Some(2), false), false), Err(AddError::Collision));
        assert_eq!(table.add(t, 0, fdirhash, key, (Some(3), false), true), Ok(Added::Updated));
        assert_eq!(table.lookup(&t).map(|a| a.queue), Some(Some(3)));
        assert_eq!(table.query(fdirhash).map(|a| a.soft_id), Some(42));
        assert!(table.remove(fdirhash));
        assert!(!table.remove(fdirhash));
        assert_eq!(table.lookup(&t), None);
        assert_eq!(table.free(), 8192);
    }
}
