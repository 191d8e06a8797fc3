//! IPv6 address helpers that the standard library's [`Ipv6Addr`] lacks: the solicited-node
//! multicast group (RFC 4291 §2.7.1), interface identifiers and link-local addresses from a MAC
//! (modified EUI-64, RFC 4291 §2.5.1 and appendix A), the Ethernet multicast address of an IPv6
//! multicast group (RFC 2464 §7), and [`Cidr`], an IPv6 prefix.

use std::fmt;
use std::net::Ipv6Addr;

use super::super::ethernet::Address as EthernetAddress;
use super::super::ipv4::parse_prefix;

/// The link-local all-nodes multicast group, `ff02::1` (RFC 4291 §2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// The link-local all-routers multicast group, `ff02::2` (RFC 4291 §2.7.1).
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

/// The solicited-node multicast group of `addr`: `ff02::1:ff00:0/104` with the low 24 bits of
/// `addr` (RFC 4291 §2.7.1), where neighbour solicitations for `addr` go (RFC 4861 §7.2.2).
#[must_use]
pub const fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    Ipv6Addr::from_bits(0xff02_0000_0000_0000_0000_0001_ff00_0000 | (addr.to_bits() & 0x00ff_ffff))
}

/// The modified EUI-64 interface identifier of a MAC (RFC 4291 appendix A): `ff:fe` inserted in
/// the middle and the universal/local bit (0x02 of the first byte) inverted.
#[must_use]
pub const fn interface_id(mac: EthernetAddress) -> [u8; 8] {
    let m = mac.0;
    [m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]
}

/// The address made of the first 64 bits of `prefix` and an interface identifier (as stateless
/// address autoconfiguration does, RFC 4862 §5.5.3).
#[must_use]
pub const fn with_interface_id(prefix: Ipv6Addr, iid: [u8; 8]) -> Ipv6Addr {
    let high = prefix.to_bits() & !(u64::MAX as u128);
    Ipv6Addr::from_bits(high | u64::from_be_bytes(iid) as u128)
}

/// The link-local address `fe80::/64` with the modified EUI-64 interface identifier of `mac`
/// (RFC 4291 §2.5.6, RFC 4862 §5.3).
#[must_use]
pub const fn link_local(mac: EthernetAddress) -> Ipv6Addr {
    with_interface_id(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), interface_id(mac))
}

/// The Ethernet destination of a packet to the IPv6 multicast group `addr`: `33:33` and the last
/// four bytes of the group (RFC 2464 §7). Meaningful only for multicast `addr`.
#[must_use]
pub const fn multicast_mac(addr: Ipv6Addr) -> EthernetAddress {
    let o = addr.octets();
    EthernetAddress([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// An IPv6 prefix: an address and a prefix length of at most 128.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    address: Ipv6Addr,
    prefix_len: u8,
}

impl Cidr {
    /// The prefix `address/prefix_len`; `None` if `prefix_len > 128`. The host bits of `address`
    /// are kept (an interface address with its prefix).
    #[must_use]
    pub const fn new(address: Ipv6Addr, prefix_len: u8) -> Option<Self> {
        if prefix_len > 128 { None } else { Some(Self { address, prefix_len }) }
    }

    /// The address.
    #[must_use]
    pub const fn address(&self) -> Ipv6Addr {
        self.address
    }

    /// The prefix length.
    #[must_use]
    pub const fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    fn mask(&self) -> u128 {
        u128::MAX.checked_shl(128 - u32::from(self.prefix_len)).unwrap_or(0)
    }

    /// The prefix itself (host bits cleared).
    #[must_use]
    pub fn network(&self) -> Ipv6Addr {
        Ipv6Addr::from_bits(self.address.to_bits() & self.mask())
    }

    /// Whether `addr` is inside the prefix.
    #[must_use]
    pub fn contains_addr(&self, addr: Ipv6Addr) -> bool {
        (addr.to_bits() ^ self.address.to_bits()) & self.mask() == 0
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

/// Why a string is not an IPv6 prefix ([`Cidr`]'s `FromStr`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IPv6 address with a prefix length (like 2001:db8::2/64)")]
pub struct ParseCidrError(String);

impl std::str::FromStr for Cidr {
    type Err = ParseCidrError;

    /// `address/n` with `n <= 128`, as [`Display`](fmt::Display) writes it.
    ///
    /// ```
    /// use tcp_lib::wire::Ipv6Cidr;
    ///
    /// let cidr: Ipv6Cidr = "2001:db8::2/64".parse()?;
    /// assert_eq!(cidr.prefix_len(), 64);
    /// assert!(cidr.contains_addr("2001:db8::ffff".parse().unwrap()));
    /// assert!("2001:db8::2".parse::<Ipv6Cidr>().is_err(), "the prefix length is required");
    /// assert!("2001:db8::2/129".parse::<Ipv6Cidr>().is_err());
    /// # Ok::<(), tcp_lib::wire::ipv6::ParseCidrError>(())
    /// ```
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        parse_prefix(s).and_then(|(a, len)| Self::new(a, len)).ok_or_else(|| ParseCidrError(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);

    #[test]
    fn solicited_node_group() {
        // RFC 4291 §2.7.1's example form: 4037::01:800:200e:8c6c -> ff02::1:ff0e:8c6c.
        let a: Ipv6Addr = "4037::1:800:200e:8c6c".parse().unwrap();
        assert_eq!(solicited_node(a), "ff02::1:ff0e:8c6c".parse::<Ipv6Addr>().unwrap());
        assert_eq!(solicited_node(Ipv6Addr::UNSPECIFIED), "ff02::1:ff00:0".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn eui64() {
        // What Linux gives a QEMU NIC with this MAC: fe80::5054:ff:fe12:3456.
        assert_eq!(interface_id(MAC), [0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56]);
        assert_eq!(link_local(MAC), "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap());
        // RFC 4291 appendix A: the universal bit is inverted both ways.
        let local = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
        assert_eq!(link_local(local), "fe80::ff:fe00:1".parse::<Ipv6Addr>().unwrap());
        let prefix: Ipv6Addr = "2001:db8:1:2:ffff::".parse().unwrap();
        assert_eq!(
            with_interface_id(prefix, interface_id(MAC)),
            "2001:db8:1:2:5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn multicast_macs() {
        // RFC 2464 §7: ff02::1 -> 33:33:00:00:00:01; the solicited-node group of the MAC above.
        assert_eq!(multicast_mac(ALL_NODES), EthernetAddress([0x33, 0x33, 0, 0, 0, 1]));
        let group = solicited_node(link_local(MAC));
        assert_eq!(multicast_mac(group), EthernetAddress([0x33, 0x33, 0xff, 0x12, 0x34, 0x56]));
        assert!(multicast_mac(group).is_multicast());
    }

    #[test]
    fn cidr() {
        let c: Cidr = "2001:db8:7::9/48".parse().unwrap();
        assert_eq!(c.network(), "2001:db8:7::".parse::<Ipv6Addr>().unwrap());
        assert!(c.contains_addr("2001:db8:7:ffff::1".parse().unwrap()));
        assert!(!c.contains_addr("2001:db8:8::1".parse().unwrap()));
        assert_eq!(c.to_string(), "2001:db8:7::9/48");
        assert!(Cidr::new(Ipv6Addr::UNSPECIFIED, 129).is_none());
        let all = Cidr::new(Ipv6Addr::UNSPECIFIED, 0).unwrap();
        assert!(all.contains_addr(ALL_NODES));
        let host = Cidr::new(ALL_NODES, 128).unwrap();
        assert!(host.contains_addr(ALL_NODES) && !host.contains_addr(ALL_ROUTERS));
        for bad in ["2001:db8::/", "2001:db8::/+1", "10.0.0.1/8", "2001:db8::/1000", "/64"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        assert!(ParseCidrError("x".into()).to_string().contains("2001:db8::2/64"));
    }
}
