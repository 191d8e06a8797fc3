//! The stack's configuration ([`Config`], [`ListenerConfig`]) and its error type ([`Error`]).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::ArpConfig;
use super::udp::{IcmpRateLimit, UdpConfig};
#[cfg(doc)]
use super::{Detached, Stack, StackStats};
#[cfg(doc)]
use crate::tcp::BufferBudget;
use crate::tcp::{self, ConnectionError};
use crate::wire::ipv4::reassembly::Config as ReassemblyConfig;
use crate::wire::{ChecksumPolicy, EthernetAddress, Ipv4Cidr, Ipv6Cidr};
use netchannel::dev::DeviceOffloads;
#[cfg(doc)]
use netchannel::pool::Offload;

/// The configuration of a [`Stack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The interface's MAC address.
    pub mac: EthernetAddress,
    /// The interface's IPv4 address and prefix.
    pub ip: Ipv4Cidr,
    /// The default gateway for destinations outside the prefix (`None`: those are unreachable).
    pub gateway: Option<Ipv4Addr>,
    /// IPv6 on this interface (`None`, the default: IPv6 is off, and IPv6 frames are counted in
    /// [`StackStats::rx_unhandled`] and dropped). See [`Ipv6Config`].
    pub ipv6: Option<Ipv6Config>,
    /// The IP MTU (the Ethernet payload); TCP's MSS is clamped to `mtu - 40`.
    pub mtu: usize,
    /// The configuration of every TCP connection.
    pub tcp: tcp::Config,
    /// The ARP cache's limits.
    pub arp: ArpConfig,
    /// The fragment reassembly table's limits.
    pub reassembly: ReassemblyConfig,
    /// Announce our address with a gratuitous ARP request when the stack starts.
    pub gratuitous_arp: bool,
    /// Most connections at once (half-open, open, closing and TIME-WAIT together).
    pub max_connections: usize,
    /// Bytes the send and receive rings of all connections may hold together, beyond the
    /// [`BufferBudget::GUARANTEED`] bytes every ring may always hold (so that each connection
    /// still makes progress). A ring refused growth works on with the storage it has: `send`
    /// takes less, the window shrinks to what the ring can take. So connections whose readers do
    /// not read, or whose peers never acknowledge, hold at most this plus
    /// `2 × GUARANTEED × max_connections` bytes, however large their buffers
    /// ([`tcp::Config::send_buffer`], [`tcp::Config::recv_buffer`]) are. [`StackStats`]
    /// counts what it refused.
    pub buffer_memory: usize,
    /// Most released connections in TIME-WAIT (compact records, see [Connection lifetime and
    /// TIME-WAIT](crate::stack#connection-lifetime-and-time-wait)); the one that expires first
    /// is evicted beyond it.
    pub max_time_wait: usize,
    /// Most control frames (ARP, ICMP, RST, SYN cookies) queued between [`Stack::receive`] and
    /// [`Stack::transmit`]; more are dropped.
    pub max_queued_frames: usize,
    /// The ephemeral port range, inclusive (RFC 6335: 49152-65535).
    pub ephemeral_ports: (u16, u16),
    /// Seeds the stack's secret (ISNs, SYN cookies, ports) for reproducible tests; `None` draws it
    /// from the OS's randomness. Never seed a production stack.
    pub secret_seed: Option<u64>,
    /// TTL of emitted datagrams.
    pub ttl: u8,
    /// Received IPv4 headers, TCP segments and ICMP messages: [`ChecksumPolicy::Verify`] (the
    /// default) drops those whose checksum is wrong; [`ChecksumPolicy::Trust`] does not look at the
    /// checksums, for links that cannot corrupt a frame (an in-memory
    /// [`Pair`](netchannel::dev::Pair), as the kernel trusts loopback) or whose NIC verified them.
    /// IPv4 fragments are always verified.
    pub checksum: ChecksumPolicy,
    /// Fill the TCP checksum of the data and ACK segments a connection sends (`true`, the
    /// default). `false` leaves the field zero (no pass over the payload): only for links whose
    /// every receiver trusts checksums (above), or whose NIC fills them. IPv4 header checksums
    /// and RSTs, SYN cookies, ARP and ICMP are always filled.
    pub tx_checksum: bool,
    /// The device finishes partial checksums (virtio-net's `VIRTIO_NET_HDR_F_NEEDS_CSUM`, Linux's
    /// `NETIF_F_HW_CSUM`; `false`, the default: it does not). When `true`, the data and ACK
    /// segments a connection sends into pool buffers carry only the pseudo-header sum in their
    /// checksum field and [`Offload::with_partial_checksum`] in their buffer, and the device sums
    /// the rest; segments queued while a next hop is resolved, and control frames, are summed in
    /// full. Takes precedence over [`tx_checksum`](Self::tx_checksum).
    pub tx_partial_checksum: bool,
    /// TCP segmentation offload (TSO): the largest TCP super-segment the device takes, in IP
    /// packet bytes (IP header, TCP header and payload; 0, the default: off). With it, a
    /// connection whose windows allow sends up to this many bytes in one pool buffer, a whole
    /// number of MSS-sized segments (the last one short only where the sendable data ends), with
    /// the IP length of the whole, a partial checksum and
    /// [`Offload::with_segmentation`] (and [`Offload::with_ecn`] when it sets CWR), and the
    /// device cuts it into wire segments, as Linux's TSO/GSO does (`tcp_gso_segment`): each with
    /// a copy of the headers, its own sequence number and checksum, PSH and FIN only on the last,
    /// CWR only on the first, and the timestamps option (RFC 7323) of the whole on each. The
    /// sender counts every cut segment as sent on its own (RACK, SACK, PRR), so a lost one is
    /// resent alone. Without a device that cuts, [`wire::gso::segment`] does it in software.
    ///
    /// Needs [`tx_partial_checksum`](Self::tx_partial_checksum) (without it the stack sends no
    /// super-segments), and buffers that hold a super-segment: [`Stack::new`] clamps the limit to
    /// 65535, and [`Stack::transmit`] to what a buffer of its pool holds (less the Ethernet
    /// header); [`Config::check_offloads`] refuses both instead. A limit up to one MSS segment
    /// changes nothing.
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// use tcp_lib::stack::Config;
    /// use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
    ///
    /// let cidr = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24).expect("a /24");
    /// let mut config = Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]), cidr);
    /// // A TAP device with `TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6` on, buffers of 64 KiB and more.
    /// config.tx_partial_checksum = true;
    /// config.tso_max_size = 65535;
    /// assert!(config.check_offloads(65536 + 256).is_ok());
    /// // Buffers of a 2 KiB data room cannot hold one: the error names the fix.
    /// assert!(config.check_offloads(2048).is_err());
    /// ```
    ///
    /// [`wire::gso::segment`]: crate::wire::gso::segment
    pub tso_max_size: usize,
    /// Generic segmentation offload in software (GSO, Linux's `NETIF_F_GSO`): the largest TCP
    /// super-segment a connection builds for a device without TSO, in IP packet bytes (65535 by
    /// default, as Linux's GSO is on for every device; 0: off; at most 65535). The stack asks the
    /// connection once for up to this many bytes (whole MSS-sized segments, as for
    /// [`tso_max_size`](Self::tso_max_size), and no more than the outgoing batch has room for),
    /// then cuts them into ordinary frames itself before the device, as Linux's GSO cuts a TSO
    /// packet for a device that cannot: each frame with its own sequence number, IP identification
    /// and checksums, PSH and FIN only on the last, CWR only on the first. The wire carries exactly
    /// what it would without it; what changes is that the connection's per-segment decisions
    /// (windows, congestion control, timers, the header) are made once per super-segment instead of
    /// once per frame. The connection counts each cut segment as sent on its own (RACK, SACK, PRR),
    /// so a lost one is resent alone. Off with TSO ([`tso_max_size`](Self::tso_max_size), which
    /// takes precedence). While prepared content or pool buffers are queued on a connection
    /// (`send_prepared`, `send_pooled`), which go by reference where a cut would copy them, a
    /// super-segment only runs over consecutive whole pool buffers of one segment each, every
    /// buffer then a frame of its own, by reference; the rest goes one segment at a time. A
    /// super-segment lent from the send ring ends where the ring's storage does, so that it is not
    /// copied; 64 KiB measured fewest instructions per byte on an in-memory link (BENCHMARKS.md).
    /// The stack keeps a scratch buffer of this size for the connections' payloads (one MSS with
    /// GSO off).
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// use tcp_lib::stack::Config;
    /// use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
    ///
    /// let cidr = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24).expect("a /24");
    /// let mut config = Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]), cidr);
    /// // Up to 64 KiB of a connection's data per decision, cut into 1500-byte frames: the default.
    /// assert_eq!(config.gso_max_size, 65535);
    /// // One decision per frame, as a stack without GSO makes them.
    /// config.gso_max_size = 0;
    /// ```
    pub gso_max_size: usize,
    /// The receive queue limits of UDP sockets bound with [`Stack::udp_bind`].
    pub udp: UdpConfig,
    /// The rate limit on ICMP errors sent (port unreachable for UDP datagrams to no socket).
    pub icmp_errors: IcmpRateLimit,
}

impl Config {
    /// Defaults for an interface with `mac` and `ip`: MTU 1500, no gateway, 64k connections,
    /// 64 MiB of connection buffers (a thousand connections with full default send and receive
    /// rings, or 1 KiB for each of the 64k connections), 4096 TIME-WAIT, a random secret,
    /// checksums verified and filled, software GSO for a device without TSO.
    #[must_use]
    pub fn new(mac: EthernetAddress, ip: Ipv4Cidr) -> Self {
        Self {
            mac,
            ip,
            gateway: None,
            ipv6: None,
            mtu: 1500,
            tcp: tcp::Config::default(),
            arp: ArpConfig::default(),
            reassembly: ReassemblyConfig::default(),
            gratuitous_arp: true,
            max_connections: 65_536,
            buffer_memory: 64 << 20,
            max_time_wait: 4096,
            max_queued_frames: 4096,
            ephemeral_ports: (49_152, 65_535),
            secret_seed: None,
            ttl: 64,
            checksum: ChecksumPolicy::Verify,
            tx_checksum: true,
            tx_partial_checksum: false,
            tso_max_size: 0,
            gso_max_size: MAX_SUPER_SEGMENT,
            udp: UdpConfig::default(),
            icmp_errors: IcmpRateLimit::default(),
        }
    }
}

/// The largest IP packet a TCP super-segment may be (IPv4's total length field).
pub(super) const MAX_SUPER_SEGMENT: usize = 65_535;

impl Config {
    /// Checks the offload settings ([`tso_max_size`](Self::tso_max_size)) against each other
    /// and against pool buffers of `data_room` bytes, refusing what [`Stack::new`] and
    /// [`Stack::transmit`] would otherwise clamp.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the fix: a super-segment limit without partial checksums,
    /// above 65535 bytes, or above what a buffer holds.
    pub fn check_offloads(&self, data_room: usize) -> Result<(), ConfigError> {
        if self.tso_max_size == 0 {
            return Ok(());
        }
        if !self.tx_partial_checksum {
            return Err(ConfigError(
                "tso_max_size needs tx_partial_checksum: set it (the device must finish the checksums of the segments it cuts) or set tso_max_size to 0",
            ));
        }
        if self.tso_max_size > MAX_SUPER_SEGMENT {
            return Err(ConfigError("tso_max_size above 65535 IP bytes: set it to 65535 or less"));
        }
        if self.tso_max_size + super::ETH_LEN > data_room {
            return Err(ConfigError(
                "tso_max_size plus the 14-byte Ethernet header exceeds the pool's data room: build the pool with Pool::builder(n).data_room(tso_max_size + 14) or more, or lower tso_max_size",
            ));
        }
        Ok(())
    }

    /// This configuration with the transmit offloads `offloads` (a device's
    /// [`DeviceInfo::offloads`](netchannel::dev::DeviceInfo::offloads)) offers:
    /// [`tx_partial_checksum`](Self::tx_partial_checksum) when it finishes partial checksums, and
    /// [`tso_max_size`](Self::tso_max_size) its largest super-segment when it also cuts them (0
    /// otherwise). What it reports on receive needs no setting: [`Stack::poll`] reads each frame's
    /// metadata.
    ///
    /// ```
    /// # use std::net::Ipv4Addr;
    /// use netchannel::dev::DeviceOffloads;
    /// # use tcp_lib::stack::Config;
    /// # use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
    /// # let cidr = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24).expect("a /24");
    /// let tap = DeviceOffloads { tx_checksum: true, tx_tso_max: 65_535, ..DeviceOffloads::NONE };
    /// let config = Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]), cidr).with_device_offloads(tap);
    /// assert!(config.tx_partial_checksum && config.tso_max_size == 65_535);
    /// let plain = config.with_device_offloads(DeviceOffloads::NONE);
    /// assert!(!plain.tx_partial_checksum && plain.tso_max_size == 0);
    /// ```
    #[must_use]
    pub fn with_device_offloads(mut self, offloads: DeviceOffloads) -> Self {
        self.tx_partial_checksum = offloads.tx_checksum;
        self.tso_max_size = if offloads.tx_checksum { offloads.tx_tso_max as usize } else { 0 };
        self
    }

    /// The super-segment limit in IP bytes [`Stack::new`] keeps: 0 without partial checksums,
    /// at most 65535.
    pub(super) fn super_segment_limit(&self) -> usize {
        if self.tx_partial_checksum { self.tso_max_size.min(MAX_SUPER_SEGMENT) } else { 0 }
    }

    /// The largest super-segment cut in software ([`gso_max_size`](Self::gso_max_size)), in IP
    /// packet bytes; 0 when off or when the device cuts ([`super_segment_limit`](Self::super_segment_limit)).
    pub(super) fn gso_limit(&self) -> usize {
        if self.super_segment_limit() == 0 { self.gso_max_size.min(MAX_SUPER_SEGMENT) } else { 0 }
    }

    /// The hop limit of emitted IPv6 packets other than Neighbor Discovery's.
    pub(super) fn hop_limit6(&self) -> u8 {
        self.ipv6.map_or(64, |v6| v6.hop_limit)
    }

    /// This configuration with IPv6 on, with the address (global or unique local) and on-link
    /// prefix `address` and the other settings of [`Ipv6Config::default`] (a link-local address
    /// is always added).
    #[must_use]
    pub fn with_ipv6(mut self, address: Ipv6Cidr) -> Self {
        self.ipv6 = Some(Ipv6Config { address: Some(address), ..Ipv6Config::default() });
        self
    }
}

/// IPv6 on a [`Stack`]'s interface (RFC 8200, with Neighbor Discovery, RFC 4861).
///
/// The interface always has the link-local address `fe80::/64` with the modified EUI-64
/// interface identifier of its MAC (RFC 4291 §2.5.1) and joins the all-nodes group and the
/// solicited-node group of each of its addresses (frames to those multicast MACs are taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Config {
    /// A global (or unique local) address and its on-link prefix (`None`: link-local only,
    /// unless [`accept_ra`](Self::accept_ra) forms one from an advertised prefix).
    pub address: Option<Ipv6Cidr>,
    /// The default router for destinations off-link (usually its link-local address; `None`:
    /// those are unreachable unless a router advertisement names one).
    pub gateway: Option<Ipv6Addr>,
    /// Take the default router, the link MTU and (when [`address`](Self::address) is `None`) an
    /// address formed from an autonomous prefix (SLAAC, RFC 4862 §5.5.3) from router
    /// advertisements.
    pub accept_ra: bool,
    /// The hop limit of emitted packets (Neighbor Discovery always uses 255).
    pub hop_limit: u8,
}

impl Default for Ipv6Config {
    /// Link-local only, no gateway, router advertisements accepted, hop limit 64.
    fn default() -> Self {
        Self { address: None, gateway: None, accept_ra: true, hop_limit: 64 }
    }
}

/// The limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerConfig {
    /// Most half-open (SYN-RECEIVED) connections; beyond it SYNs get cookies (or are dropped).
    pub syn_queue: usize,
    /// Most established connections waiting for [`Stack::accept`].
    pub backlog: usize,
    /// Answer SYNs with SYN cookies when the SYN queue is full.
    pub syn_cookies: bool,
}

impl Default for ListenerConfig {
    /// A SYN queue of 256, a backlog of 128, cookies on.
    fn default() -> Self {
        Self { syn_queue: 256, backlog: 128, syn_cookies: true }
    }
}

/// Why a stack call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The handle does not name a live connection or listener of this stack.
    #[error("invalid handle")]
    InvalidHandle,
    /// Port 0.
    #[error("invalid port")]
    InvalidPort,
    /// A listener already has this port.
    #[error("address in use")]
    AddrInUse,
    /// No free ephemeral port for this destination.
    #[error("no free ephemeral port")]
    NoPorts,
    /// [`Config::max_connections`] reached.
    #[error("too many connections")]
    TooManyConnections,
    /// The destination is outside the prefix and there is no gateway.
    #[error("no route to host")]
    Unreachable,
    /// Nothing to read, or no room to write, now.
    #[error("operation would block")]
    WouldBlock,
    /// The sending side was shut down (or the connection is closing).
    #[error("sending side shut down")]
    WriteClosed,
    /// The connection failed.
    #[error("{0}")]
    Connection(ConnectionError),
    /// A [`Detached`] connection's local address, or the address given to
    /// [`Stack::udp_bind`], is not this stack's.
    #[error("the local address is not this stack's")]
    NotLocal,
    /// [`Stack::add_route`] found 64 routes kept already: remove one first.
    #[error("64 static routes already: remove one first")]
    TooManyRoutes,
    /// A UDP datagram longer than `max` bytes of payload, the most the interface's MTU carries
    /// in one IP datagram ([`Stack::udp_max_payload`]): the stack does not fragment what it
    /// sends. Send less, or raise [`Config::mtu`] where the link allows.
    #[error("datagram too long: at most {max} bytes of payload fit the MTU (no fragmentation on send)")]
    MessageTooLong {
        /// The largest payload that fits.
        max: usize,
    },
    /// [`Stack::udp_send`] on a socket with no destination: call [`Stack::udp_connect`] first,
    /// or name the destination with [`Stack::udp_send_to`].
    #[error("no destination: udp_connect first, or use udp_send_to")]
    NotConnected,
}

/// Settings of a [`Config`] that do not fit each other or the device's buffers
/// ([`Config::check_offloads`]); its text names the fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(&'static str);
