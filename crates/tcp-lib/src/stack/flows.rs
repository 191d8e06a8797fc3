//! The tables keyed by a connection's 4-tuple (the demultiplexing map, the TIME-WAIT table's
//! index): [`FlowKey`] and [`FlowMap`], one map per address family so that an IPv4 tuple stays one
//! 128-bit word (hashed with a single multiply-fold, 32-byte buckets) whatever IPv6 needs.

use std::collections::HashMap;
use std::net::SocketAddr;

use super::hash::{TableHash, v6_bits};

/// A 4-tuple: IPv4 packed into one word (each address beside its port), IPv6 as both addresses
/// and the ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FlowKey {
    /// An IPv4 tuple.
    V4(u128),
    /// An IPv6 tuple.
    V6(Tuple6),
}

/// An IPv6 4-tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tuple6 {
    local: u128,
    remote: u128,
    ports: u32,
}

impl FlowKey {
    /// The key of `local` and `remote` (a mixed pair, which no connection has, is keyed as IPv6
    /// with the IPv4 address mapped).
    #[inline]
    pub(crate) fn new(local: SocketAddr, remote: SocketAddr) -> Self {
        match (local, remote) {
            (SocketAddr::V4(l), SocketAddr::V4(r)) => {
                let word =
                    |a: std::net::SocketAddrV4| (u64::from(a.ip().to_bits()) << 16) | u64::from(a.port());
                Self::V4((u128::from(word(l)) << 64) | u128::from(word(r)))
            }
            _ => Self::V6(Tuple6 {
                local: v6_bits(local.ip()),
                remote: v6_bits(remote.ip()),
                ports: (u32::from(local.port()) << 16) | u32::from(remote.port()),
            }),
        }
    }
}

/// A map from [`FlowKey`] to `V`, under the stack's keyed table hash.
#[derive(Debug)]
pub(crate) struct FlowMap<V> {
    v4: HashMap<u128, V, TableHash>,
    v6: HashMap<Tuple6, V, TableHash>,
}

impl<V> FlowMap<V> {
    pub(crate) fn new(hash: TableHash) -> Self {
        Self { v4: HashMap::with_hasher(hash), v6: HashMap::with_hasher(hash) }
    }

    #[inline]
    pub(crate) fn get(&self, key: &FlowKey) -> Option<&V> {
        match key {
            FlowKey::V4(k) => self.v4.get(k),
            FlowKey::V6(k) => self.v6.get(k),
        }
    }

    pub(crate) fn contains_key(&self, key: &FlowKey) -> bool {
        self.get(key).is_some()
    }

    /// Inserts, returning the value replaced.
    pub(crate) fn insert(&mut self, key: FlowKey, value: V) -> Option<V> {
        match key {
            FlowKey::V4(k) => self.v4.insert(k, value),
            FlowKey::V6(k) => self.v6.insert(k, value),
        }
    }

    pub(crate) fn remove(&mut self, key: &FlowKey) -> Option<V> {
        match key {
            FlowKey::V4(k) => self.v4.remove(k),
            FlowKey::V6(k) => self.v6.remove(k),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::super::hash::Key;
    use super::*;

    #[test]
    fn table_hash_spreads_sequential_tuples_and_depends_on_the_key() {
        let a = TableHash::new(&Key::from_seed(1));
        let b = TableHash::new(&Key::from_seed(2));
        let local = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 80));
        // The worst case for a weak hash: one client, consecutive ports.
        let keys: Vec<FlowKey> = (0..65_536u32)
            .map(|i| {
                let ip = Ipv4Addr::new(10, 0, 1, u8::try_from(i >> 14).unwrap());
                FlowKey::new(local, SocketAddr::from((ip, u16::try_from(i & 0x3fff).unwrap() + 1024)))
            })
            .collect();
        // Low bits (the bucket) and the top 7 bits (hashbrown's control byte): every value about
        // equally often.
        let mut low = vec![0u32; 4096];
        let mut top = [0u32; 128];
        let mut differ = 0;
        for k in &keys {
            let FlowKey::V4(word) = k else { panic!("an IPv4 tuple keys as IPv4") };
            let h = a.hash_one(word);
            low[usize::try_from(h & 4095).unwrap()] += 1;
            top[usize::try_from(h >> 57).unwrap()] += 1;
            differ += u32::from(h != b.hash_one(word));
        }
        let (lo_min, lo_max) = (low.iter().min().unwrap(), low.iter().max().unwrap());
        assert!(*lo_min >= 2 && *lo_max <= 40, "16 expected per bucket: {lo_min}..{lo_max}");
        let (t_min, t_max) = (top.iter().min().unwrap(), top.iter().max().unwrap());
        assert!(*t_min >= 400 && *t_max <= 640, "512 expected per tag: {t_min}..{t_max}");
        assert_eq!(differ, 65_536, "another key, other hashes");
        // Bytes: trailing zeros and lengths count.
        assert_ne!(a.hash_one([1u8, 0]), a.hash_one([1u8]));
        assert_ne!(a.hash_one("ab"), a.hash_one("ba"));
        assert_eq!(a.hash_one(keys[7]), a.hash_one(keys[7]));
    }

    #[test]
    fn families_key_apart_and_each_key_is_exact() {
        let mut map = FlowMap::new(TableHash::new(&Key::from_seed(1)));
        let v4 = |l: u16, r: u16| {
            FlowKey::new(
                SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), l)),
                SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), r)),
            )
        };
        let v6 = |l: u16, r: u16| {
            let (a, b) =
                (Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1), Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2));
            FlowKey::new(SocketAddr::from((a, l)), SocketAddr::from((b, r)))
        };
        // The IPv4 tuple and its IPv4-mapped IPv6 twin are different flows.
        let mapped = FlowKey::new(
            SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped(), 80)),
            SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped(), 90)),
        );
        assert_eq!(map.insert(v4(80, 90), 1), None);
        assert_eq!(map.insert(v6(80, 90), 2), None);
        assert_eq!(map.insert(mapped, 3), None);
        assert_eq!(map.len(), 3);
        assert_eq!(map.get(&v4(80, 90)), Some(&1));
        assert_eq!(map.get(&v6(80, 90)), Some(&2));
        assert_eq!(map.get(&v6(90, 80)), None, "ports are ordered");
        assert_eq!(map.get(&v4(80, 91)), None);
        assert_eq!(map.insert(v6(80, 90), 5), Some(2));
        assert_eq!(map.remove(&v6(80, 90)), Some(5));
        assert!(!map.contains_key(&v6(80, 90)));
        assert!(map.contains_key(&mapped));
        assert_eq!(map.get(&mapped), Some(&3));
        assert_eq!(map.insert(v4(80, 90), 7), Some(1));
        assert_eq!(map.len(), 2);
        map.remove(&v4(80, 90));
        assert!(!map.is_empty(), "the IPv6 map still holds one");
        map.remove(&mapped);
        assert!(map.is_empty());
    }
}
