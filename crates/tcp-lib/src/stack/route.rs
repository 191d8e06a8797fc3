//! Routing for both families: which next hop a destination goes through (on-link, a static
//! route, the default gateway or router), which of our addresses a packet to it comes from, and
//! the neighbour cache of the next hop's family.
//!
//! A destination is *on-link* when it lies in an interface prefix (the IPv4 prefix, the IPv6
//! address's prefix) or is IPv6 link-local or multicast; otherwise the longest static route
//! ([`Stack::add_route`]) that covers it names the next hop, and failing that the default
//! gateway ([`Config::gateway`](super::Config::gateway),
//! [`Ipv6Config::gateway`](super::Ipv6Config::gateway), or the router an advertisement named).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{Error, Stack};
use crate::wire::EthernetAddress;

/// Most static routes a stack keeps.
pub(super) const MAX_ROUTES: usize = 64;

/// A static route: destinations in `prefix/len` go through `via`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Route {
    prefix: IpAddr,
    len: u8,
    via: IpAddr,
}

impl Route {
    fn covers(&self, dst: IpAddr) -> bool {
        match (self.prefix, dst) {
            (IpAddr::V4(p), IpAddr::V4(d)) => {
                prefix_match(u128::from(p.to_bits()) << 96, u128::from(d.to_bits()) << 96, self.len)
            }
            (IpAddr::V6(p), IpAddr::V6(d)) => prefix_match(p.to_bits(), d.to_bits(), self.len),
            _ => false,
        }
    }
}

/// Whether the first `len` bits of `a` and `b` agree.
fn prefix_match(a: u128, b: u128, len: u8) -> bool {
    let shift = 128u32.saturating_sub(u32::from(len));
    a.checked_shr(shift).unwrap_or(0) == b.checked_shr(shift).unwrap_or(0)
}

impl Stack {
    /// Adds a static route: destinations in `prefix/len` (an IPv4 or IPv6 prefix) are sent
    /// through the on-link router `via` (of the same family). The longest matching route wins;
    /// on-link destinations never take a route. Replaces a route for the same prefix.
    ///
    /// # Errors
    /// [`Error::Unreachable`] when `via` is not on-link or of another family than `prefix`, or
    /// the length exceeds the family's (32, 128); [`Error::TooManyRoutes`] when 64 routes are
    /// kept already.
    pub fn add_route(&mut self, prefix: IpAddr, len: u8, via: IpAddr) -> Result<(), Error> {
        let max = if prefix.is_ipv4() { 32 } else { 128 };
        if len > max || prefix.is_ipv4() != via.is_ipv4() || !self.on_link(via) {
            return Err(Error::Unreachable);
        }
        let route = Route { prefix, len, via };
        if let Some(r) = self.routes.iter_mut().find(|r| r.prefix == prefix && r.len == len) {
            *r = route;
            return Ok(());
        }
        if self.routes.len() >= MAX_ROUTES {
            return Err(Error::TooManyRoutes);
        }
        self.routes.push(route);
        Ok(())
    }

    /// Removes the static route for `prefix/len`; returns whether there was one.
    pub fn remove_route(&mut self, prefix: IpAddr, len: u8) -> bool {
        let before = self.routes.len();
        self.routes.retain(|r| !(r.prefix == prefix && r.len == len));
        self.routes.len() != before
    }

    /// Whether `dst` is reached directly on the link.
    fn on_link(&self, dst: IpAddr) -> bool {
        match dst {
            IpAddr::V4(d) => self.config.ip.contains_addr(d),
            IpAddr::V6(d) => self.v6.as_ref().is_some_and(|v6| v6.on_link(d)),
        }
    }

    /// The next hop toward `dst`: itself when on-link, else a static route's or the default
    /// gateway's router.
    #[inline(always)]
    pub(super) fn next_hop(&self, dst: IpAddr) -> Option<IpAddr> {
        match dst {
            IpAddr::V4(d) => self.route(d).map(IpAddr::V4),
            IpAddr::V6(d) => self.route6(d).map(IpAddr::V6),
        }
    }

    /// The IPv4 next hop toward `dst`.
    #[inline(always)]
    pub(super) fn route(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        if self.config.ip.contains_addr(dst) {
            return Some(dst);
        }
        match self.static_route(IpAddr::V4(dst)) {
            Some(IpAddr::V4(via)) => Some(via),
            _ => self.config.gateway,
        }
    }

    /// The IPv6 next hop toward `dst` (`None` while IPv6 is off).
    pub(super) fn route6(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        let v6 = self.v6.as_ref()?;
        if v6.on_link(dst) {
            return Some(dst);
        }
        match self.static_route(IpAddr::V6(dst)) {
            Some(IpAddr::V6(via)) => Some(via),
            _ => v6.default_router(self.now),
        }
    }

    #[inline(always)]
    fn static_route(&self, dst: IpAddr) -> Option<IpAddr> {
        if self.routes.is_empty() {
            return None;
        }
        self.static_route_slow(dst)
    }

    #[inline(never)]
    fn static_route_slow(&self, dst: IpAddr) -> Option<IpAddr> {
        self.routes.iter().filter(|r| r.covers(dst)).max_by_key(|r| r.len).map(|r| r.via)
    }

    /// Our address that a packet to `dst` comes from: the IPv4 address, or for IPv6 the
    /// link-local address toward link-local destinations and the global one elsewhere (RFC 6724
    /// §5, rule 2: the smallest scope that reaches the destination).
    pub(super) fn source_for(&self, dst: IpAddr) -> Option<IpAddr> {
        match dst {
            IpAddr::V4(_) => Some(IpAddr::V4(self.ip())),
            IpAddr::V6(d) => self.v6.as_ref().map(|v6| IpAddr::V6(v6.source_for(d))),
        }
    }

    /// Whether `ip` is one of our unicast addresses.
    pub(super) fn is_local(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => a == self.ip(),
            IpAddr::V6(a) => self.v6.as_ref().is_some_and(|v6| v6.is_ours(a)),
        }
    }

    /// The hardware address cached for the next hop `hop`.
    #[inline(always)]
    pub(super) fn neighbor_lookup(&mut self, hop: IpAddr) -> Option<EthernetAddress> {
        match hop {
            IpAddr::V4(h) => self.arp.lookup(h, self.now),
            IpAddr::V6(h) => self.v6.as_mut()?.ndp.lookup(h, self.now),
        }
    }

    /// Records that the neighbour `ip` is at `mac` and sends what was waiting for it.
    pub(super) fn neighbor_learned(&mut self, ip: IpAddr, mac: EthernetAddress) {
        let now = self.now;
        let waiting = match ip {
            IpAddr::V4(a) => self.arp.insert(a, mac, now),
            IpAddr::V6(a) => match self.v6.as_mut() {
                Some(v6) => v6.ndp.insert(a, mac, now),
                None => return,
            },
        };
        for mut frame in waiting {
            self.fill_ethernet(&mut frame, mac);
            self.push_frame(frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_on_their_bits_only() {
        let v4 = |s: &str| IpAddr::V4(s.parse().unwrap());
        let v6 = |s: &str| IpAddr::V6(s.parse().unwrap());
        let r = Route { prefix: v4("10.1.0.0"), len: 16, via: v4("10.0.0.1") };
        assert!(r.covers(v4("10.1.255.3")));
        assert!(!r.covers(v4("10.2.0.1")));
        assert!(!r.covers(v6("::ffff:10.1.0.1")), "families never mix");
        let any = Route { prefix: v4("0.0.0.0"), len: 0, via: v4("10.0.0.1") };
        assert!(any.covers(v4("192.0.2.1")));
        let r6 = Route { prefix: v6("2001:db8:1::"), len: 48, via: v6("fe80::1") };
        assert!(r6.covers(v6("2001:db8:1:ffff::9")));
        assert!(!r6.covers(v6("2001:db8:2::9")));
        let host = Route { prefix: v6("2001:db8::5"), len: 128, via: v6("fe80::1") };
        assert!(host.covers(v6("2001:db8::5")) && !host.covers(v6("2001:db8::6")));
    }
}
