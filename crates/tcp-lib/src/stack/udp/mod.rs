//! UDP sockets (RFC 768) on the stack: [`Stack::udp_bind`], [`Stack::udp_connect`],
//! [`Stack::udp_send_to`], [`Stack::udp_recv_from`] and the rest on a [`UdpId`].
//!
//! A socket owns one local port (one socket a port; an unspecified address takes datagrams to any
//! of the stack's addresses, of either family, as Linux's dual-stack wildcard does) and a bounded
//! queue of received datagrams ([`UdpConfig`]). The receive path (`input`) checks a datagram
//! and offers it in place to the application's [`Deliver::udp`] before it copies it into the
//! queue; a datagram for no socket draws a rate-limited ICMP port unreachable. Datagrams are sent
//! whole: one that does not fit the MTU is refused ([`Error::MessageTooLong`]), never fragmented.
//!
//! The address family is a match arm wherever it matters: a socket bound to the unspecified
//! address (`0.0.0.0` or `::`) serves both families, one bound to one of our addresses serves
//! its family.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

use super::hash::TableHash;
use super::slab::Slab;
use super::{Error, IP_LEN, IP6_LEN, Stack};
use crate::wire::{Protocol, UdpPacket, UdpRepr, udp};

mod config; // UdpConfig, IcmpRateLimit
mod deliver; // the Deliver trait: in-place delivery of TCP payload and UDP datagrams
mod input; // a received datagram to its socket, or an ICMP port unreachable; the rate limit

pub use config::{IcmpRateLimit, UdpConfig};
pub use deliver::Deliver;
use input::TokenBucket;

/// A UDP socket handle (an index and a generation: stale handles are refused with
/// [`Error::InvalidHandle`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UdpId {
    index: u32,
    generation: u32,
}

/// What [`Stack::udp_recv_from`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpRecv {
    /// Bytes written into the buffer.
    pub len: usize,
    /// The datagram's length: more than [`len`](Self::len) when it was truncated to the buffer
    /// (the rest is discarded, as with `MSG_TRUNC`).
    pub datagram_len: usize,
    /// Who sent it.
    pub from: SocketAddr,
}

impl UdpRecv {
    /// Whether the datagram was longer than the buffer (its tail was discarded).
    #[must_use]
    pub const fn truncated(&self) -> bool {
        self.datagram_len > self.len
    }
}

/// A queued datagram.
#[derive(Debug)]
struct Datagram {
    from: SocketAddr,
    data: Box<[u8]>,
}

/// One socket.
#[derive(Debug)]
struct Socket {
    /// The bound address (an unspecified IP: any of ours).
    local: SocketAddr,
    /// The default destination, and the only source accepted, after `udp_connect`.
    remote: Option<SocketAddr>,
    config: UdpConfig,
    queue: VecDeque<Datagram>,
    /// Payload bytes in `queue`.
    bytes: usize,
}

impl Socket {
    /// Whether a datagram from `from` to `to` is this socket's (its port already matched).
    fn accepts(&self, from: SocketAddr, to: IpAddr) -> bool {
        let local = self.local.ip();
        (local.is_unspecified() || local == to) && self.remote.is_none_or(|r| r == from)
    }

    /// Queues a copy of `data`; false (nothing queued) past the limits.
    fn push(&mut self, from: SocketAddr, data: &[u8]) -> bool {
        if self.queue.len() >= self.config.max_datagrams
            || self.bytes.saturating_add(data.len()) > self.config.max_bytes
        {
            return false;
        }
        self.bytes += data.len();
        self.queue.push_back(Datagram { from, data: data.into() });
        true
    }
}

/// The stack's UDP sockets: a generation-checked slab, found by local port.
pub(super) struct UdpTable {
    sockets: Slab<Socket>,
    ports: HashMap<u16, u32, TableHash>,
    /// The ICMP error rate limit ([`IcmpRateLimit`]).
    icmp: TokenBucket,
}

impl UdpTable {
    pub(super) fn new(tables: TableHash, limit: IcmpRateLimit) -> Self {
        Self { sockets: Slab::new(), ports: HashMap::with_hasher(tables), icmp: TokenBucket::new(limit) }
    }

    fn get(&self, id: UdpId) -> Result<&Socket, Error> {
        self.sockets.get_checked(id.index, id.generation).ok_or(Error::InvalidHandle)
    }

    fn get_mut(&mut self, id: UdpId) -> Result<&mut Socket, Error> {
        self.sockets.get_checked_mut(id.index, id.generation).ok_or(Error::InvalidHandle)
    }
}

impl Stack {
    /// Binds a UDP socket to `local` with the stack's [`Config::udp`](super::Config::udp)
    /// limits. Port 0 picks an ephemeral port (RFC 6056 algorithm 3, through the
    /// [port filter](Self::set_port_filter), as [`connect`](Self::connect) does); an unspecified
    /// IP (`0.0.0.0` or `::`) takes datagrams to any of the stack's addresses.
    ///
    /// # Errors
    /// [`Error::AddrInUse`] when a UDP socket has the port, [`Error::NotLocal`] for an address
    /// that is not the stack's, [`Error::NoPorts`].
    pub fn udp_bind(&mut self, local: SocketAddr) -> Result<UdpId, Error> {
        self.udp_bind_with(local, self.config.udp)
    }

    /// [`udp_bind`](Self::udp_bind) with queue limits of its own.
    ///
    /// # Errors
    /// As [`udp_bind`](Self::udp_bind).
    pub fn udp_bind_with(&mut self, local: SocketAddr, config: UdpConfig) -> Result<UdpId, Error> {
        if !local.ip().is_unspecified() && !self.is_local(local.ip()) {
            return Err(Error::NotLocal);
        }
        let port = if local.port() == 0 {
            let ports = &self.udp.ports;
            let anyone = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
            self.ports
                .pick(local.ip(), anyone, self.port_filter.as_deref(), |p| !ports.contains_key(&p))
                .ok_or(Error::NoPorts)?
        } else if self.udp.ports.contains_key(&local.port()) {
            return Err(Error::AddrInUse);
        } else {
            local.port()
        };
        let socket = Socket {
            local: SocketAddr::new(local.ip(), port),
            remote: None,
            config,
            queue: VecDeque::new(),
            bytes: 0,
        };
        let index = self.udp.sockets.insert(socket);
        self.udp.ports.insert(port, index);
        let generation = self.udp.sockets.generation(index).unwrap_or(0);
        Ok(UdpId { index, generation })
    }

    /// Sets the socket's default destination ([`udp_send`](Self::udp_send)) and filters what it
    /// receives: from now on only datagrams from `remote` are queued (datagrams already queued
    /// stay). A datagram from anyone else finds no socket, as in Linux: it is counted in
    /// [`StackStats::udp_no_socket`](super::StackStats::udp_no_socket) and draws a port
    /// unreachable.
    ///
    /// # Errors
    /// [`Error::InvalidPort`] for port 0, [`Error::Unreachable`] for a destination
    /// [`udp_send_to`](Self::udp_send_to) would refuse, [`Error::InvalidHandle`].
    pub fn udp_connect(&mut self, id: UdpId, remote: SocketAddr) -> Result<(), Error> {
        let local = self.udp.get(id)?.local;
        self.udp_destination(local, remote)?;
        self.udp.get_mut(id)?.remote = Some(remote);
        Ok(())
    }

    /// Sends `data` as one datagram to the connected destination (see
    /// [`udp_connect`](Self::udp_connect)).
    ///
    /// # Errors
    /// [`Error::NotConnected`] before `udp_connect`; as [`udp_send_to`](Self::udp_send_to).
    pub fn udp_send(&mut self, id: UdpId, data: &[u8]) -> Result<usize, Error> {
        let remote = self.udp.get(id)?.remote.ok_or(Error::NotConnected)?;
        self.udp_send_to(id, data, remote)
    }

    /// Sends `data` as one datagram to `dst`; returns its length. It leaves at the next
    /// [`transmit`](Self::transmit) (after ARP, if the next hop is not resolved yet: the ARP
    /// queue is bounded, see [`ArpConfig`](super::ArpConfig)). The UDP checksum is always filled.
    ///
    /// # Errors
    /// [`Error::MessageTooLong`] for a datagram the MTU cannot carry whole (no fragmentation on
    /// send: [`udp_max_payload`](Self::udp_max_payload)); [`Error::InvalidPort`] for port 0;
    /// [`Error::Unreachable`] with no route, for a broadcast, multicast or unspecified
    /// destination, or across families from a socket bound to a specific address;
    /// [`Error::WouldBlock`] while [`Config::max_queued_frames`](super::Config::max_queued_frames)
    /// frames wait for [`transmit`](Self::transmit); [`Error::InvalidHandle`].
    pub fn udp_send_to(&mut self, id: UdpId, data: &[u8], dst: SocketAddr) -> Result<usize, Error> {
        let local = self.udp.get(id)?.local;
        let (src, dst) = self.udp_destination(local, dst)?;
        let max = self.udp_max_payload_for(dst.ip());
        if data.len() > max {
            return Err(Error::MessageTooLong { max });
        }
        if self.frames.len() >= self.config.max_queued_frames {
            return Err(Error::WouldBlock);
        }
        let repr = UdpRepr { src_port: local.port(), dst_port: dst.port(), payload: data };
        match (src, dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => self.send_ip(d, Protocol::Udp, repr.buffer_len(), |b| {
                repr.emit(&mut UdpPacket::new_unchecked(b), s, d);
            }),
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let hop_limit = self.config.hop_limit6();
                self.send_ip6((s, d), Protocol::Udp, repr.buffer_len(), hop_limit, |b| {
                    repr.emit_v6(&mut UdpPacket::new_unchecked(b), s, d);
                });
            }
            _ => return Err(Error::Unreachable),
        }
        self.stats.udp_datagrams_out += 1;
        Ok(data.len())
    }

    /// The source address for a datagram from a socket bound to `local` to `dst`, and `dst`,
    /// when the stack can send it.
    fn udp_destination(&self, local: SocketAddr, dst: SocketAddr) -> Result<(IpAddr, SocketAddr), Error> {
        if dst.port() == 0 {
            return Err(Error::InvalidPort);
        }
        // A socket bound to one of our addresses sends from it, so only to its family.
        let bound = Some(local.ip()).filter(|ip| !ip.is_unspecified());
        if bound.is_some_and(|ip| ip.is_ipv4() != dst.is_ipv4()) {
            return Err(Error::Unreachable);
        }
        let src = match dst.ip() {
            IpAddr::V4(ip) => {
                let broadcast = ip.is_broadcast() || self.config.ip.broadcast() == Some(ip);
                if ip.is_unspecified() || ip.is_multicast() || broadcast || self.route(ip).is_none() {
                    return Err(Error::Unreachable);
                }
                IpAddr::V4(self.ip())
            }
            IpAddr::V6(ip) => {
                if ip.is_unspecified() || ip.is_multicast() || self.route6(ip).is_none() {
                    return Err(Error::Unreachable);
                }
                bound.or_else(|| self.source_for(IpAddr::V6(ip))).ok_or(Error::Unreachable)?
            }
        };
        Ok((src, dst))
    }

    /// The largest datagram payload [`udp_send_to`](Self::udp_send_to) sends over IPv4: the
    /// MTU less the IPv4 (20) and UDP (8) headers, 1472 bytes on a 1500-byte MTU (over IPv6, 20
    /// bytes less: [`udp_max_payload_v6`](Self::udp_max_payload_v6)).
    #[must_use]
    pub fn udp_max_payload(&self) -> usize {
        self.config.mtu.min(usize::from(u16::MAX)).saturating_sub(IP_LEN + udp::HEADER_LEN)
    }

    /// The largest datagram payload [`udp_send_to`](Self::udp_send_to) sends over IPv6: the
    /// MTU less the IPv6 (40) and UDP (8) headers, 1452 bytes on a 1500-byte MTU.
    #[must_use]
    pub fn udp_max_payload_v6(&self) -> usize {
        self.config.mtu.min(usize::from(u16::MAX)).saturating_sub(IP6_LEN + udp::HEADER_LEN)
    }

    fn udp_max_payload_for(&self, dst: IpAddr) -> usize {
        if dst.is_ipv6() { self.udp_max_payload_v6() } else { self.udp_max_payload() }
    }

    /// Takes the oldest queued datagram into `buf`; one longer than `buf` is truncated to it and
    /// the rest discarded ([`UdpRecv::truncated`]).
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when nothing is queued, [`Error::InvalidHandle`].
    pub fn udp_recv_from(&mut self, id: UdpId, buf: &mut [u8]) -> Result<UdpRecv, Error> {
        let socket = self.udp.get_mut(id)?;
        let datagram = socket.queue.pop_front().ok_or(Error::WouldBlock)?;
        socket.bytes -= datagram.data.len();
        let len = datagram.data.len().min(buf.len());
        buf[..len].copy_from_slice(&datagram.data[..len]);
        Ok(UdpRecv { len, datagram_len: datagram.data.len(), from: datagram.from })
    }

    /// Closes the socket: its port is free again, its queued datagrams are dropped and its handle
    /// goes stale.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn udp_close(&mut self, id: UdpId) -> Result<(), Error> {
        let port = self.udp.get(id)?.local.port();
        self.udp.sockets.remove(id.index);
        self.udp.ports.remove(&port);
        Ok(())
    }

    /// The socket's bound address (the port picked for port 0; an unspecified IP stays
    /// unspecified: any of ours).
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn udp_local_addr(&self, id: UdpId) -> Result<SocketAddr, Error> {
        Ok(self.udp.get(id)?.local)
    }

    /// The socket's connected destination, if any.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn udp_peer_addr(&self, id: UdpId) -> Result<Option<SocketAddr>, Error> {
        Ok(self.udp.get(id)?.remote)
    }

    /// Datagrams and payload bytes queued on the socket.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn udp_queued(&self, id: UdpId) -> Result<(usize, usize), Error> {
        let socket = self.udp.get(id)?;
        Ok((socket.queue.len(), socket.bytes))
    }

    /// UDP sockets bound.
    #[must_use]
    pub fn udp_socket_count(&self) -> usize {
        self.udp.sockets.len()
    }
}
