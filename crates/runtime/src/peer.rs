//! [`Peer`]: the other end of the 82599 model's wire, for an in-process client.
//!
//! With [`Backend::Model`](crate::Backend::Model) there is no network: the model's port is wired to
//! one end of an in-memory [`Pair`](netchannel::dev::Pair), and the other end is handed out as the
//! peer, for a client (a tcp-lib [`Stack`](tcp_lib::stack::Stack) on a thread of its own, say) to
//! talk to the server through the model, its Flow Director and the driver's queues. The peer's
//! buffers come from a pool of their own (the wire's), not from the server's.

use netchannel::dev::NetDevice;
use netchannel::pool::Pool;
use tcp_lib::stack::Config;
use tcp_lib::wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

use crate::device::Port;

/// The model's in-process peer: the other end of the model's wire (a [`Port::Pair`], or a
/// [`Port::Pcap`] recording one), the pool that end's buffers come from, and its MAC address.
///
/// Drop it (or its device, after [`into_parts`](Self::into_parts)) before the runtime finishes: the
/// wire pool is audited then.
#[derive(Debug)]
pub struct Peer {
    device: Port,
    pool: Pool,
    mac: EthernetAddress,
}

impl Peer {
    /// The peer of `device`, whose buffers come from `pool`.
    pub(crate) fn new(device: Port, pool: Pool) -> Self {
        let mac = EthernetAddress(device.info().mac.0);
        Self { device, pool, mac }
    }

    /// The wire's end, to poll and transmit on (queue 0).
    #[must_use]
    pub fn device_mut(&mut self) -> &mut Port {
        &mut self.device
    }

    /// The wire's end.
    #[must_use]
    pub fn device(&self) -> &Port {
        &self.device
    }

    /// The pool the peer's packets come from: make the peer's cache from it.
    #[must_use]
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The peer's MAC address.
    #[must_use]
    pub fn mac(&self) -> EthernetAddress {
        self.mac
    }

    /// An address for the peer in the server's subnet: the first host address of `server`'s prefix
    /// that is not the server's (`10.0.0.1/24` for a server at `10.0.0.2/24`, `10.0.0.2/24` for one
    /// at `10.0.0.1/24`; the other address of a `/31`). A `/32` has no other host: the peer then
    /// takes the server's `/31` partner, which the server reaches only through a gateway.
    #[must_use]
    pub fn address(server: Ipv4Cidr) -> Ipv4Cidr {
        let prefix = server.prefix_len();
        let ours = server.address().to_bits();
        if prefix >= 32 {
            let addr = Ipv4Address::from_bits(ours ^ 1);
            return Ipv4Cidr::new(addr, 31).unwrap_or(server);
        }
        let network = server.network().to_bits();
        // Hosts of a /31 are both of its addresses (RFC 3021); otherwise the network address is not
        // a host, and a prefix of /30 or shorter has at least two hosts.
        let first = if prefix == 31 { network } else { network.wrapping_add(1) };
        let host = if first == ours { first.wrapping_add(1) } else { first };
        Ipv4Cidr::new(Ipv4Address::from_bits(host), prefix).unwrap_or(server)
    }

    /// A tcp-lib stack configuration for the peer, facing a server at `server`: the peer's MAC, the
    /// address [`Peer::address`] picks, and the wire's MTU; everything else is
    /// [`Config::new`]'s defaults, to adjust before building the stack.
    #[must_use]
    pub fn stack_config(&self, server: Ipv4Cidr) -> Config {
        let mut config = Config::new(self.mac, Self::address(server));
        config.mtu = self.device.info().mtu;
        config
    }

    /// The device and its pool, to move them where the client runs.
    #[must_use]
    pub fn into_parts(self) -> (Port, Pool) {
        (self.device, self.pool)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use netchannel::dev::Pair;
    use netchannel::pool::HugePages;

    use super::*;

    fn cidr(a: [u8; 4], p: u8) -> Ipv4Cidr {
        Ipv4Cidr::new(Ipv4Addr::from(a), p).unwrap()
    }

    #[test]
    fn the_peer_takes_the_first_other_host_of_the_servers_subnet() {
        assert_eq!(Peer::address(cidr([10, 0, 0, 2], 24)), cidr([10, 0, 0, 1], 24));
        assert_eq!(Peer::address(cidr([10, 0, 0, 1], 24)), cidr([10, 0, 0, 2], 24));
        assert_eq!(Peer::address(cidr([192, 168, 7, 200], 16)), cidr([192, 168, 0, 1], 16));
        assert_eq!(Peer::address(cidr([10, 0, 0, 5], 30)), cidr([10, 0, 0, 6], 30));
        assert_eq!(Peer::address(cidr([10, 0, 0, 4], 31)), cidr([10, 0, 0, 5], 31));
        assert_eq!(Peer::address(cidr([10, 0, 0, 5], 31)), cidr([10, 0, 0, 4], 31));
        assert_eq!(Peer::address(cidr([10, 0, 0, 5], 32)), cidr([10, 0, 0, 4], 31));
    }

    #[test]
    fn the_peers_stack_faces_the_server() {
        let pool = Pool::builder(64).hugepages(HugePages::Never).build().unwrap();
        let (a, b) = Pair::builder(&pool).capacity(16).build().unwrap();
        let mac = EthernetAddress(a.info().mac.0);
        let mtu = a.info().mtu;
        let peer = Peer::new(Port::Pair(a), pool.clone());
        assert_eq!(peer.mac(), mac);
        let config = peer.stack_config(cidr([10, 0, 0, 2], 24));
        assert_eq!((config.mac, config.ip, config.mtu), (mac, cidr([10, 0, 0, 1], 24), mtu));
        let (device, wire_pool) = peer.into_parts();
        assert_eq!((device.kind(), wire_pool.id()), ("pair", pool.id()));
        drop((device, b));
        pool.check_leaks().unwrap();
    }
}
