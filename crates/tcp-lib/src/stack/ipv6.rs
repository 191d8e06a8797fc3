//! The receive path below TCP for IPv6 (RFC 8200): the interface's addresses and groups, fragment
//! reassembly, ICMPv6 (RFC 4443) echo and Packet Too Big (path MTU discovery, RFC 8201), and
//! Neighbor Discovery (RFC 4861): neighbour solicitations answered and sent, advertisements
//! learned, router advertisements taken for the default router and, without a configured
//! address, an address formed from an advertised prefix (SLAAC, RFC 4862 §5.5.3).
//!
//! # Addresses and groups
//!
//! The interface has its link-local address (`fe80::/64` and the MAC's modified EUI-64 interface
//! identifier) and at most one global or unique-local address
//! ([`Ipv6Config::address`](super::Ipv6Config::address), or one formed by SLAAC). It listens
//! on the all-nodes group `ff02::1` and the solicited-node group of each address: frames to those
//! groups' MACs (`33:33:..`, RFC 2464 §7) are taken, other multicast frames are not. Segments for
//! TCP are taken only at a unicast address of ours; ICMPv6 also at the groups.
//!
//! # Neighbor Discovery
//!
//! * A solicitation for one of our addresses is answered with a solicited advertisement (with
//!   our MAC, override set) to its sender, whose MAC (its source link-layer option) is learned;
//!   one from the unspecified address (a duplicate address detection probe) is answered to
//!   all-nodes, unsolicited (RFC 4861 §7.2.4).
//! * An advertisement updates an entry we have or are resolving (one for an address nobody asked
//!   about creates none, §7.2.5).
//! * A next hop without an entry is solicited at its solicited-node group, the packets for it
//!   waiting (bounded, [`ArpConfig`](super::ArpConfig)), and solicited again until it answers or
//!   is given up, as ARP does.
//! * Every Neighbor Discovery message must arrive with hop limit 255 (so that it cannot come from
//!   off the link, §6.1 and §7.1); others are dropped.
//!
//! Not done: duplicate address detection of our own addresses (they are used at once, as with
//! optimistic DAD, RFC 4429), MLD reports for the groups joined (no switch here snoops them),
//! the reachability states (an entry is used until it expires), redirects, and the MTU option
//! of router advertisements (the interface MTU is [`Config::mtu`](super::Config::mtu)).

use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use super::hash::TableHash;
use super::neighbor::NeighborCache;
use super::{Config, Deliver, Ipv6Config, PingReply, Stack};
use crate::wire::icmpv6::Repr as Icmp;
use crate::wire::ipv4::ECN_CE;
use crate::wire::ipv6::addr::{
    ALL_NODES, interface_id, link_local, multicast_mac, solicited_node, with_interface_id,
};
use crate::wire::{
    Error as WireError, EthernetAddress, Icmpv6Packet, Icmpv6Repr, Ipv6Cidr, Ipv6FragmentReassembler,
    Ipv6Packet, Ipv6Repr, NdpRepr, Protocol,
};

/// The hop limit Neighbor Discovery messages are sent and must arrive with (RFC 4861 §6.1.2, §7.1).
pub(super) const NDP_HOP_LIMIT: u8 = 255;

/// IPv6's part of a stack.
#[derive(Debug)]
pub(super) struct Ipv6State {
    link_local: Ipv6Addr,
    global: Option<Ipv6Cidr>,
    gateway: Option<Ipv6Addr>,
    /// The default router a router advertisement named, until its lifetime ends.
    router: Option<(Ipv6Addr, Instant)>,
    accept_ra: bool,
    pub(super) hop_limit: u8,
    iid: [u8; 8],
    pub(super) ndp: NeighborCache<Ipv6Addr>,
    pub(super) reassembler: Ipv6FragmentReassembler,
}

impl Ipv6State {
    pub(super) fn new(v6: &Ipv6Config, config: &Config, hash: TableHash) -> Self {
        Self {
            link_local: link_local(config.mac),
            global: v6.address,
            gateway: v6.gateway,
            router: None,
            accept_ra: v6.accept_ra,
            hop_limit: v6.hop_limit,
            iid: interface_id(config.mac),
            ndp: NeighborCache::new(config.arp, hash),
            reassembler: Ipv6FragmentReassembler::new(config.reassembly),
        }
    }

    /// Whether `dst` is reached on the link: link-local, multicast, or in our prefix.
    pub(super) fn on_link(&self, dst: Ipv6Addr) -> bool {
        dst.is_unicast_link_local() || dst.is_multicast() || self.global.is_some_and(|g| g.contains_addr(dst))
    }

    /// The configured gateway, else the advertised router while its lifetime lasts.
    pub(super) fn default_router(&self, now: Instant) -> Option<Ipv6Addr> {
        self.gateway.or_else(|| self.router.filter(|&(_, until)| until > now).map(|(r, _)| r))
    }

    /// The source for `dst` (RFC 6724 §5 rule 2): link-local toward link-local unicast and
    /// link-scope multicast, the global address elsewhere (link-local when there is none).
    pub(super) fn source_for(&self, dst: Ipv6Addr) -> Ipv6Addr {
        let link_scope = dst.is_unicast_link_local() || (dst.is_multicast() && dst.segments()[0] & 0xf == 2);
        match self.global {
            Some(g) if !link_scope => g.address(),
            _ => self.link_local,
        }
    }

    /// Whether `a` is one of our unicast addresses.
    pub(super) fn is_ours(&self, a: Ipv6Addr) -> bool {
        a == self.link_local || self.global.is_some_and(|g| g.address() == a)
    }

    /// The groups joined: all-nodes and the solicited-node group of each address.
    fn groups(&self) -> [Option<Ipv6Addr>; 3] {
        [
            Some(ALL_NODES),
            Some(solicited_node(self.link_local)),
            self.global.map(|g| solicited_node(g.address())),
        ]
    }

    /// Whether a packet to `dst` is ours: a unicast address or a group joined.
    fn takes_dst(&self, dst: Ipv6Addr) -> bool {
        self.is_ours(dst) || self.groups().contains(&Some(dst))
    }

    /// Whether a frame to the multicast `mac` is ours: one of a joined group's.
    pub(super) fn takes_mac(&self, mac: EthernetAddress) -> bool {
        self.groups().into_iter().flatten().any(|g| multicast_mac(g) == mac)
    }

    /// The link-local and global addresses.
    pub(super) fn addresses(&self) -> (Ipv6Addr, Option<Ipv6Cidr>) {
        (self.link_local, self.global)
    }
}

impl Stack {
    /// Our IPv6 addresses: the link-local one and the global one if configured or formed from a
    /// router advertisement (`None` while IPv6 is off).
    #[must_use]
    pub fn ipv6_addrs(&self) -> Option<(Ipv6Addr, Option<Ipv6Cidr>)> {
        self.v6.as_ref().map(|v6| v6.addresses())
    }

    /// The default IPv6 router in use now (configured, or from a router advertisement).
    #[must_use]
    pub fn ipv6_router(&self) -> Option<Ipv6Addr> {
        self.v6.as_ref().and_then(|v6| v6.default_router(self.now))
    }

    /// Neighbour entries resolved by Neighbor Discovery.
    #[must_use]
    pub fn ndp_entries(&self) -> usize {
        self.v6.as_ref().map_or(0, |v6| v6.ndp.len())
    }

    pub(super) fn receive_ipv6<D: Deliver + ?Sized>(&mut self, bytes: &[u8], deliver: &mut D) {
        let now = self.now;
        let Some(v6) = self.v6.as_mut() else {
            self.stats.rx_unhandled += 1;
            return;
        };
        let Ok(packet) = Ipv6Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        if !v6.takes_dst(packet.dst_addr()) {
            self.stats.rx_not_for_us += 1;
            return;
        }
        match Ipv6Repr::parse_with_payload(&packet) {
            Ok((repr, payload)) => self.receive_datagram6(&repr, payload, deliver),
            Err(WireError::Fragmented) => {
                self.stats.rx_fragments += 1;
                match v6.reassembler.add(&packet, now) {
                    Ok(Some(datagram)) => {
                        self.stats.rx_reassembled += 1;
                        self.rx_trusted = false;
                        self.receive_datagram6(&datagram.header, &datagram.payload, deliver);
                    }
                    Ok(None) => {}
                    Err(_) => self.stats.rx_malformed += 1,
                }
            }
            Err(_) => self.stats.rx_malformed += 1,
        }
    }

    fn receive_datagram6<D: Deliver + ?Sized>(&mut self, ip: &Ipv6Repr, payload: &[u8], deliver: &mut D) {
        // RFC 4291 §2.7: a multicast address is never a source.
        if ip.src_addr.is_multicast() {
            self.stats.rx_malformed += 1;
            return;
        }
        match ip.next_header {
            Protocol::Tcp if !ip.dst_addr.is_multicast() => {
                let ce = ip.traffic_class & 0b11 == ECN_CE;
                self.receive_tcp(ip.src_addr, ip.dst_addr, ce, payload, deliver);
            }
            Protocol::Udp if !ip.dst_addr.is_multicast() => self.receive_udp6(ip, payload, deliver),
            Protocol::Icmpv6 => self.receive_icmpv6(ip, payload),
            _ => self.stats.rx_unhandled += 1,
        }
    }

    fn receive_icmpv6(&mut self, ip: &Ipv6Repr, bytes: &[u8]) {
        let (src, dst) = (ip.src_addr, ip.dst_addr);
        let Ok(packet) = Icmpv6Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        match Icmpv6Repr::parse(&packet, src, dst, self.config.checksum) {
            Ok(Icmp::EchoRequest { ident, seq_no, data }) if !src.is_unspecified() => {
                self.send_icmpv6(src, &Icmp::EchoReply { ident, seq_no, data }, None);
                self.stats.icmp_echo_replies += 1;
            }
            Ok(Icmp::EchoReply { ident, seq_no, data }) => {
                self.take_echo_reply(PingReply { from: IpAddr::V6(src), ident, seq_no, len: data.len() });
            }
            Ok(Icmp::PktTooBig { mtu, header, data }) => {
                let (tcp, mtu) =
                    (header.next_header == Protocol::Tcp, u16::try_from(mtu).unwrap_or(u16::MAX));
                self.path_mtu_report(
                    tcp,
                    IpAddr::V6(header.src_addr),
                    IpAddr::V6(header.dst_addr),
                    data,
                    mtu,
                );
            }
            Ok(Icmp::Ndp(ndp)) if ip.hop_limit == NDP_HOP_LIMIT => self.receive_ndp(src, ndp),
            Ok(Icmp::Ndp(_)) => self.stats.rx_malformed += 1,
            Ok(_) => self.stats.rx_unhandled += 1,
            Err(_) => self.stats.rx_malformed += 1,
        }
    }

    fn receive_ndp(&mut self, src: Ipv6Addr, ndp: NdpRepr) {
        match ndp {
            NdpRepr::NeighborSolicit { target, lladdr } => {
                if !self.v6.as_ref().is_some_and(|v6| v6.is_ours(target)) {
                    self.stats.rx_not_for_us += 1;
                    return;
                }
                if src.is_unspecified() {
                    // A duplicate address detection probe: it must carry no link-layer option
                    // (§7.1.1); the answer goes to all-nodes, not solicited (§7.2.4).
                    if lladdr.is_none() {
                        self.send_advert(ALL_NODES, target, false);
                    }
                    return;
                }
                if let Some(mac) = lladdr.filter(EthernetAddress::is_unicast) {
                    self.neighbor_learned(IpAddr::V6(src), mac);
                }
                self.send_advert(src, target, true);
            }
            NdpRepr::NeighborAdvert { target, lladdr, .. } => {
                let Some(v6) = self.v6.as_ref() else { return };
                let known = v6.ndp.knows(target);
                if let Some(mac) = lladdr.filter(|m| m.is_unicast() && known && !v6.is_ours(target)) {
                    self.neighbor_learned(IpAddr::V6(target), mac);
                }
            }
            NdpRepr::RouterAdvert { router_lifetime, lladdr, prefixes, .. } => {
                let now = self.now;
                let Some(v6) = self.v6.as_mut().filter(|v6| v6.accept_ra) else { return };
                // §6.1.2: only from a link-local source.
                if !src.is_unicast_link_local() {
                    self.stats.rx_malformed += 1;
                    return;
                }
                if router_lifetime > 0 {
                    v6.router = Some((src, now + Duration::from_secs(u64::from(router_lifetime))));
                } else if v6.router.is_some_and(|(r, _)| r == src) {
                    v6.router = None;
                }
                if v6.global.is_none()
                    && let Some(p) = prefixes
                        .iter()
                        .find(|p| p.autonomous && p.on_link && p.prefix_len == 64 && p.valid_lifetime > 0)
                {
                    v6.global = Ipv6Cidr::new(with_interface_id(p.prefix, v6.iid), 64);
                }
                self.stats.ra_accepted += 1;
                if let Some(mac) = lladdr.filter(EthernetAddress::is_unicast) {
                    self.neighbor_learned(IpAddr::V6(src), mac);
                }
            }
            NdpRepr::RouterSolicit { .. } => self.stats.rx_unhandled += 1,
        }
    }

    /// A neighbour advertisement for our `target` to `dst`: solicited (an answer to `dst`'s
    /// solicitation) or not (to all-nodes, after a duplicate address detection probe).
    fn send_advert(&mut self, dst: Ipv6Addr, target: Ipv6Addr, solicited: bool) {
        let repr = NdpRepr::NeighborAdvert {
            router: false,
            solicited,
            override_: true,
            target,
            lladdr: Some(self.config.mac),
        };
        self.send_icmpv6(dst, &Icmpv6Repr::Ndp(repr), Some(target));
        self.stats.ndp_adverts += 1;
    }

    /// A neighbour solicitation for the next hop `target`, to its solicited-node group, from the
    /// source of the packet that prompted it when that is ours (RFC 4861 §7.2.2), else from our
    /// address for `target`.
    pub(super) fn send_solicit(&mut self, target: Ipv6Addr, prompted_by: Option<Ipv6Addr>) {
        let repr = NdpRepr::NeighborSolicit { target, lladdr: Some(self.config.mac) };
        let src = prompted_by.filter(|&a| self.is_local(IpAddr::V6(a)));
        let src = src.or_else(|| self.v6.as_ref().map(|v6| v6.source_for(target)));
        self.send_icmpv6(solicited_node(target), &Icmpv6Repr::Ndp(repr), src);
        self.stats.ndp_solicits += 1;
    }

    /// Whether `src` (an IPv6 source of a TCP segment for no connection) is one no peer can have:
    /// unspecified, loopback, multicast, IPv4-mapped (RFC 4291 §2.5.5.2: never on the wire), or
    /// our own.
    pub(super) fn invalid_source6(&self, src: Ipv6Addr) -> bool {
        src.is_unspecified()
            || src.is_loopback()
            || src.is_multicast()
            || src.to_ipv4_mapped().is_some()
            || self.is_local(IpAddr::V6(src))
    }
}
