//! The per-core [`Stack`]: one IPv4 interface with ARP, ICMP echo, fragment reassembly, and TCP
//! connections, listeners and socket handles over the sans-IO [`Connection`] core.
//!
//! # Design
//!
//! A `Stack` belongs to one core and is driven by the thread running there: it starts no threads,
//! takes no locks and reads no clock. Like [`Connection`] it is sans-IO in time: every entry point
//! takes `now`, and application calls ([`connect`](Stack::connect), [`send`](Stack::send), ...)
//! use the latest `now` the stack was given.
//!
//! * **Input**: [`receive`](Stack::receive) takes one Ethernet frame (a borrowed slice, so a pool
//!   buffer is read in place; TCP payload is copied once, into the connection's receive buffer).
//!   [`receive_with`](Stack::receive_with) and [`poll_with`](Stack::poll_with) offer in-order
//!   payload to the application where it lies in the pool buffer first (zero-copy receive); only
//!   what it leaves is copied.
//! * **Timers**: [`handle_timeout`](Stack::handle_timeout) once `now` reaches
//!   [`poll_timeout`](Stack::poll_timeout).
//! * **Output**: [`transmit`](Stack::transmit) builds frames (Ethernet + IPv4 + TCP, checksums
//!   filled unless [`Config::tx_checksum`] is off, emitted with [`wire`](crate::wire)) in buffers of a
//!   [`PoolCache`] and appends them to a [`PacketBatch`] for the device.
//! * [`poll`](Stack::poll) does all three against a [`NetDevice`]: `rx_burst`, `receive` each
//!   frame, timers, `transmit`, `tx_burst`.
//!
//! ```
//! use std::net::{Ipv4Addr, SocketAddrV4};
//! use std::time::{Duration, Instant};
//! use netchannel::dev::{NetDevice, Pair};
//! use netchannel::pool::{HugePages, Pool};
//! use tcp_lib::stack::{Config, Stack};
//! use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
//!
//! let pool = Pool::builder(1024).hugepages(HugePages::Never).build()?;
//! let (mut dev_a, mut dev_b) = Pair::builder(&pool).build()?;
//! let cache = pool.cache();
//! let mut now = Instant::now(); // virtual time: only the stacks' arguments move it
//! let config = |dev: &Pair, host: u8| {
//!     let mac = EthernetAddress(dev.info().mac.0);
//!     let cidr = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, host), 24).expect("a /24");
//!     Config::new(mac, cidr)
//! };
//! let mut a = Stack::new(config(&dev_a, 1), now);
//! let mut b = Stack::new(config(&dev_b, 2), now);
//!
//! let listener = b.listen(80)?;
//! let client = a.connect(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80))?;
//! assert_eq!(a.send(client, b"hello")?, 5);
//! let mut server = None;
//! let mut got = Vec::new();
//! for _ in 0..100 {
//!     a.poll(now, &mut dev_a, &cache)?;
//!     b.poll(now, &mut dev_b, &cache)?;
//!     server = server.or_else(|| b.accept(listener));
//!     if let Some(s) = server {
//!         let mut buf = [0u8; 64];
//!         if let Ok(n) = b.recv(s, &mut buf) {
//!             got.extend_from_slice(&buf[..n]);
//!         }
//!     }
//!     now += Duration::from_millis(1);
//! }
//! assert_eq!(got, b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Demultiplexing and timers
//!
//! Connections live in a slab (a `Vec` of slots with generation counters, so a stale
//! [`StreamId`] is detected) and are found by a `HashMap<(local, remote), slot>`: O(1) per segment
//! whatever the number of connections. The 4-tuple is packed into one 128-bit word and hashed with
//! a keyed multiply-fold hash (the registry's construction, two multiplies per lookup, keyed from
//! the stack's secret so that a peer cannot aim its ports at one bucket); std's SipHash cost ~7% of
//! a bulk transfer's instructions. Listeners are found by local port, ARP entries by address,
//! with the same hash. Connections that have something to send are
//! queued on a ready list, so [`transmit`](Stack::transmit) visits only them; connection timers sit
//! in a binary heap with at most one live entry per connection plus stale entries that are skipped
//! (the heap is rebuilt when stale entries outnumber live connections).
//!
//! # Listeners, SYN queue, SYN cookies, accept backlog
//!
//! A listener ([`listen_with`](Stack::listen_with)) keeps a bounded *SYN queue* of half-open
//! connections (SYN-RECEIVED [`Connection`]s, counted against [`ListenerConfig::syn_queue`]) and
//! a bounded *accept backlog* of established connections not yet [`accept`](Stack::accept)ed.
//! When the SYN queue is full, the listener answers SYNs with SYN cookies (RFC 4987 §3.6, laid out
//! as Linux does): the SYN-ACK's ISN is `H1(tuple) + SEQ + (t << 24) + ((H2(tuple, t) + mss_index)
//! mod 2^24)` with a keyed SipHash and `t` counting 64-second periods; it keeps no state. An ACK
//! arriving for no connection, at a listener that overflowed in the last two periods, is checked as
//! a cookie (the counter at most one period old, the MSS index valid) and becomes an established
//! connection. **Cookie connections lose window scaling, SACK and timestamps** (the cookie carries
//! only the MSS, one of 536, 1300, 1440, 1460); encoding them in the timestamp as Linux does is a
//! later item. While the backlog is full, SYNs are dropped and handshake-completing ACKs are dropped
//! (the peer retransmits), as Linux does by default.
//!
//! The accept path has a hook: [`set_accept_hook`](Stack::set_accept_hook) installs an
//! [`AcceptHook`] that receives every established connection instead of the listener's own queue,
//! so the accept-affinity crate can own per-core accept queues; [`AcceptHook::has_room`] replaces the
//! backlog check.
//!
//! # Connection lifetime and TIME-WAIT
//!
//! A connection from [`connect`](Stack::connect) or [`accept`](Stack::accept) belongs to the
//! application until [`close`](Stack::close) or [`abort`](Stack::abort): its handle stays valid
//! (state, error, buffered data) even after the connection closed. After `close` the stack finishes
//! the connection (FIN handshake) and reclaims the slot when it reaches CLOSED.
//!
//! A released connection that reaches TIME-WAIT (its output drained) gives up its slot: the
//! `Connection` (about 1.1 KB) is reclaimed like a closed one (its handle's generation moves on)
//! and a compact record of 72 bytes takes its place in the *TIME-WAIT table*, a map keyed by the
//! 4-tuple (96 bytes an entry) plus an expiry-ordered queue (32 bytes an entry). The record keeps
//! exactly what TIME-WAIT still reads and writes (RCV.NXT, SND.MAX, the receive window and the
//! window field of our ACKs, the peer's largest window, TS.Recent and its age, our timestamp
//! clock, the out-of-window ACK and RFC 5961 challenge-ACK rate limits, the 2·MSL deadline) and
//! answers every segment as the connection would (a test feeds random segments to both): a
//! retransmitted FIN draws an ACK and restarts 2·MSL; an RST at RCV.NXT drops the record (RFC
//! 9293; an RST elsewhere in the window draws a challenge ACK); a SYN draws a rate-limited
//! challenge ACK (RFC 5961 §4: no new connection from TIME-WAIT); other segments outside the
//! window draw an ACK (at most one per 500 ms for bare ACKs); PAWS applies with timestamps. The
//! record's ACK is queued as a control frame at once, so two such segments in one receive burst
//! draw two ACKs where a connection would send one. The table is bounded by
//! [`Config::max_time_wait`]: beyond it the record that expires first is evicted (dropped without
//! a segment, as Linux does when `tcp_max_tw_buckets` overflows); records leave at their 2·MSL
//! deadline ([`poll_timeout`](Stack::poll_timeout) includes the earliest). TIME-WAIT records
//! count in [`connection_count`](Stack::connection_count) and against
//! [`Config::max_connections`] as the connections did. A connection the application still holds
//! stays whole in TIME-WAIT (its handle reads its state), without its buffers: a connection frees
//! its send and receive rings on entering TIME-WAIT or CLOSED (the receive ring once the
//! application has read it); it becomes a record when the application releases it. Ephemeral
//! ports are never picked for a 4-tuple that is in use, TIME-WAIT included, and
//! [`contains`](Stack::contains) reports TIME-WAIT tuples (they still need their steering entry).
//!
//! # Security
//!
//! * ISNs per RFC 6528: `M + F(4-tuple, secret)`, `M` a 4 µs clock, `F` keyed SipHash-2-4.
//! * Ephemeral ports per RFC 6056 algorithm 3, with an optional flow-group filter
//!   ([`set_port_filter`](Stack::set_port_filter)) so replies land on this core's RX queue.
//! * Blind RST/SYN/data injection is handled by the connection core (RFC 5961).
//! * Every table is bounded: connections ([`Config::max_connections`]), SYN queues and backlogs,
//!   TIME-WAIT, the ARP cache and its pending packets, fragment reassembly, queued control frames.
//!   No frame makes the stack panic.
//!
//! # Prepared content (the Sandstorm send path)
//!
//! [`send_prepared`](Stack::send_prepared) queues a [`PreparedSegments`] (content cut ahead of
//! time into payload segments with precomputed sums, seeds/003) on a connection by reference.
//! Its bytes are never copied into the send ring nor into the stack's scratch buffer: a segment
//! whose payload lies in it is written into its frame's pool buffer straight from the prepared
//! bytes (one copy, the only one: a pool buffer is owned by one frame and handed to the device,
//! so a frame cannot point at shared content), and when the segment is one of the prepared cuts
//! its checksum is the pseudo-header and header sums plus the precomputed payload sum (no pass
//! over the payload). [`StackStats::tx_prepared`] and [`StackStats::tx_prepared_sums`] count
//! them. Bytes given to [`send`](Stack::send) take the copying path: into the send ring, from it
//! into the scratch buffer, from there into the frame, summed on the way.
//!
//! # Not yet
//!
//! Zero-copy receive (reading payload in place from pool buffers) is a later item: today payload
//! is copied into the connection's receive ring on input. PMTU discovery from ICMP
//! fragmentation-needed, IPv4 options on output, and ICMP errors (port/protocol unreachable) are
//! not generated.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Instant;

use netchannel::dev::{DevError, NetDevice, PacketBatch};
use netchannel::pool::PoolCache;
use netchannel::signature::FlowGroup;

use crate::tcp::{
    self, Connection, ConnectionError, ListenAction, State, Stats, TimeWait, TimeWaitAction, listen_reply,
    reset_for,
};
use crate::wire::ipv4::reassembly::Config as ReassemblyConfig;
use crate::wire::{
    ArpOperation, ArpPacket, ArpRepr, ChecksumPolicy, EtherType, EthernetAddress, EthernetFrame,
    EthernetRepr, FragmentReassembler, Icmpv4Packet, Icmpv4Repr, Ipv4Cidr, Ipv4Packet, Ipv4Repr, Protocol,
    SeqNumber, TcpControl, TcpPacket, TcpRepr, checksum,
};

mod arp;
mod hash;

/// Prepared content lives in [`crate::tcp`] (the connection reads it); re-exported here,
/// next to [`Stack::send_prepared`].
pub use crate::tcp::{PreparedSegments, PreparedSlice};
pub use arp::ArpConfig;

use arp::{ArpCache, Enqueued};
use hash::{FlowKey, Key, PortAllocator, TableHash};

/// Ethernet header length (no VLAN tag: the stack emits untagged frames).
const ETH_LEN: usize = 14;
/// IPv4 header length emitted.
const IP_LEN: usize = 20;
/// Frames received per `rx_burst` in [`Stack::poll`].
const BURST: usize = 32;
/// Most receive bursts per [`Stack::poll`].
const MAX_RX_BURSTS: usize = 8;
/// Most echo replies kept for [`Stack::take_ping_reply`].
const MAX_PING_REPLIES: usize = 64;

/// The configuration of a [`Stack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The interface's MAC address.
    pub mac: EthernetAddress,
    /// The interface's IPv4 address and prefix.
    pub ip: Ipv4Cidr,
    /// The default gateway for destinations outside the prefix (`None`: those are unreachable).
    pub gateway: Option<Ipv4Addr>,
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
}

impl Config {
    /// Defaults for an interface with `mac` and `ip`: MTU 1500, no gateway, 64k connections,
    /// 4096 TIME-WAIT, a random secret, checksums verified and filled.
    #[must_use]
    pub fn new(mac: EthernetAddress, ip: Ipv4Cidr) -> Self {
        Self {
            mac,
            ip,
            gateway: None,
            mtu: 1500,
            tcp: tcp::Config::default(),
            arp: ArpConfig::default(),
            reassembly: ReassemblyConfig::default(),
            gratuitous_arp: true,
            max_connections: 65_536,
            max_time_wait: 4096,
            max_queued_frames: 4096,
            ephemeral_ports: (49_152, 65_535),
            secret_seed: None,
            ttl: 64,
            checksum: ChecksumPolicy::Verify,
            tx_checksum: true,
        }
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// The handle does not name a live connection or listener of this stack.
    InvalidHandle,
    /// Port 0.
    InvalidPort,
    /// A listener already has this port.
    AddrInUse,
    /// No free ephemeral port for this destination.
    NoPorts,
    /// [`Config::max_connections`] reached.
    TooManyConnections,
    /// The destination is outside the prefix and there is no gateway.
    Unreachable,
    /// Nothing to read, or no room to write, now.
    WouldBlock,
    /// The sending side was shut down (or the connection is closing).
    WriteClosed,
    /// The connection failed.
    Connection(ConnectionError),
    /// A [`Detached`] connection's local address is not this stack's.
    NotLocal,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidHandle => f.write_str("invalid handle"),
            Self::InvalidPort => f.write_str("invalid port"),
            Self::AddrInUse => f.write_str("address in use"),
            Self::NoPorts => f.write_str("no free ephemeral port"),
            Self::TooManyConnections => f.write_str("too many connections"),
            Self::Unreachable => f.write_str("no route to host"),
            Self::WouldBlock => f.write_str("operation would block"),
            Self::WriteClosed => f.write_str("sending side shut down"),
            Self::Connection(e) => write!(f, "{e}"),
            Self::NotLocal => f.write_str("the connection's local address is not this stack's"),
        }
    }
}

impl std::error::Error for Error {}

/// A connection handle (an index and a generation: stale handles are refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId {
    index: u32,
    generation: u32,
}

/// A listener handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId {
    index: u32,
    generation: u32,
}

/// A connection moved out of a [`Stack`] by [`Stack::detach`], on its way to another stack's
/// [`Stack::adopt`]: an owned value that can cross threads. Dropping it loses the connection
/// without a segment (the peer times out): adopt it, or adopt it back.
#[derive(Debug)]
#[must_use = "dropping a detached connection loses it without a reset"]
pub struct Detached {
    conn: Connection,
    write_shut: bool,
    next_hop: Option<(Ipv4Addr, EthernetAddress)>,
}

impl Detached {
    /// The local address.
    #[must_use]
    pub const fn local(&self) -> SocketAddrV4 {
        self.conn.local()
    }

    /// The remote address.
    #[must_use]
    pub const fn remote(&self) -> SocketAddrV4 {
        self.conn.remote()
    }

    /// The RFC 9293 state.
    #[must_use]
    pub const fn state(&self) -> State {
        self.conn.state()
    }

    /// Bytes received and not yet read, and bytes in the send buffer (unsent or unacknowledged).
    #[must_use]
    pub fn queues(&self) -> (usize, usize) {
        (self.conn.recv_queue(), self.conn.send_queue())
    }
}

/// Why [`Stack::adopt`] refused a connection; the connection comes back with
/// [`into_inner`](Self::into_inner).
#[derive(Debug)]
pub struct AdoptError {
    error: Error,
    detached: Box<Detached>,
}

impl AdoptError {
    /// Why.
    #[must_use]
    pub const fn error(&self) -> Error {
        self.error
    }

    /// The connection, still detached.
    pub fn into_inner(self) -> Detached {
        *self.detached
    }
}

impl fmt::Display for AdoptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot adopt {} <- {}: {}", self.detached.local(), self.detached.remote(), self.error)
    }
}

impl std::error::Error for AdoptError {}

/// Receives the connections a listener establishes, instead of the listener's own accept queue:
/// the extension point for per-core accept queues (the accept-affinity crate).
pub trait AcceptHook {
    /// Whether the accept queue for `listener` can take another connection; when it cannot, SYNs
    /// and handshake-completing ACKs for it are dropped.
    fn has_room(&mut self, listener: ListenerId) -> bool {
        let _ = listener;
        true
    }

    /// `stream` is established on `listener`; the hook now holds its handle (which belongs to the
    /// application: it must eventually be closed or aborted).
    fn established(&mut self, listener: ListenerId, stream: StreamId);

    /// A passive open on `listener` created state for `local`/`remote` (a SYN-RECEIVED connection,
    /// or an established one from a SYN cookie). Called before the stack sends anything for it, so
    /// a steering entry made here (a registry signature naming this core) is in place before the
    /// peer can answer. The stack keeps the state while [`Stack::contains`] says so.
    fn opened(&mut self, listener: ListenerId, local: SocketAddrV4, remote: SocketAddrV4) {
        let _ = (listener, local, remote);
    }
}

/// Counters of a [`Stack`], since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Frames given to [`Stack::receive`].
    pub rx_frames: u64,
    /// Frames for another MAC or IPv4 address.
    pub rx_not_for_us: u64,
    /// Frames that did not parse (truncated, bad checksum, malformed headers).
    pub rx_malformed: u64,
    /// Frames of an EtherType, IP protocol or ICMP message the stack does not handle.
    pub rx_unhandled: u64,
    /// IPv4 fragments received.
    pub rx_fragments: u64,
    /// Datagrams reassembled from fragments.
    pub rx_reassembled: u64,
    /// TCP segments delivered to a connection or listener.
    pub tcp_segments_in: u64,
    /// TCP segments for no connection and no listener.
    pub tcp_no_socket: u64,
    /// Resets sent by the stack (for segments no one wants).
    pub rst_sent: u64,
    /// ARP requests sent.
    pub arp_requests: u64,
    /// ARP replies sent.
    pub arp_replies: u64,
    /// Packets dropped waiting for ARP (queue full, or the next hop never answered).
    pub arp_dropped: u64,
    /// ICMP echo replies sent.
    pub icmp_echo_replies: u64,
    /// ICMP fragmentation-needed messages that lowered a connection's path MTU (RFC 1191).
    pub icmp_pmtu_updates: u64,
    /// ICMP fragmentation-needed messages ignored: for no connection of ours, quoting a sequence
    /// number not in flight (RFC 5927 §4.1), or reporting an MTU not below the path MTU.
    pub icmp_pmtu_ignored: u64,
    /// Frames appended by [`Stack::transmit`].
    pub tx_frames: u64,
    /// Frames dropped on output: control queue full, no pool buffer, a device that refused them.
    pub tx_dropped: u64,
    /// Datagrams with no route.
    pub no_route: u64,
    /// SYN cookies sent.
    pub syn_cookies_sent: u64,
    /// Connections established from a valid cookie.
    pub syn_cookies_accepted: u64,
    /// ACKs that failed the cookie check.
    pub syn_cookies_rejected: u64,
    /// SYNs and handshake ACKs dropped: SYN queue full without cookies, backlog full, or
    /// [`Config::max_connections`] reached.
    pub listen_drops: u64,
    /// Connections created (active and passive).
    pub connections_opened: u64,
    /// Connection slots reclaimed.
    pub connections_reclaimed: u64,
    /// TIME-WAIT connections evicted because the table was full.
    pub time_wait_evicted: u64,
    /// Connections moved out with [`Stack::detach`].
    pub connections_detached: u64,
    /// Connections moved in with [`Stack::adopt`].
    pub connections_adopted: u64,
    /// TCP segments whose payload was written from prepared content
    /// ([`Stack::send_prepared`]), not from the send ring.
    pub tx_prepared: u64,
    /// Of those, segments whose payload sum was precomputed (a prepared cut).
    pub tx_prepared_sums: u64,
}

/// What one [`Stack::poll`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Frames received from the device.
    pub received: usize,
    /// Frames the device accepted for transmission.
    pub transmitted: usize,
    /// Frames built but refused by the device (dropped).
    pub dropped: usize,
}

/// An ICMP echo reply received (see [`Stack::ping`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingReply {
    /// Who answered.
    pub from: Ipv4Addr,
    /// The echo identifier.
    pub ident: u16,
    /// The echo sequence number.
    pub seq_no: u16,
    /// Bytes of echoed data.
    pub len: usize,
}

/// Where a connection is in its listener's queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Active open, or delivered to the application.
    Open,
    /// Half-open, counted in its listener's SYN queue.
    SynQueue,
    /// From a SYN cookie, not yet delivered (never counted in the SYN queue).
    Cookie,
}

#[derive(Debug)]
struct Entry {
    conn: Connection,
    /// The application holds a handle.
    app_owned: bool,
    /// The listener that made it (passive opens).
    listener: Option<ListenerId>,
    phase: Phase,
    /// In the demultiplexing map.
    in_demux: bool,
    /// On the ready list.
    ready: bool,
    /// The earliest live timer-heap entry.
    timer_at: Option<Instant>,
    /// The application shut down the sending side.
    write_shut: bool,
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

#[derive(Debug)]
struct Listener {
    port: u16,
    config: ListenerConfig,
    syn_queue: usize,
    accept_queue: VecDeque<StreamId>,
    last_overflow: Option<Instant>,
}

#[derive(Debug, Default)]
struct ListenerSlot {
    generation: u32,
    listener: Option<Listener>,
}

/// The demultiplexing map: the 4-tuple to slot index, under the stack's keyed table hash.
type Demux = HashMap<FlowKey, u32, TableHash>;

/// A per-core IPv4/TCP endpoint on one interface. See the [module documentation](self).
pub struct Stack {
    config: Config,
    epoch: Instant,
    now: Instant,
    key: Key,
    ports: PortAllocator,
    arp: ArpCache,
    reassembler: FragmentReassembler,
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    demux: Demux,
    listeners: Vec<ListenerSlot>,
    listener_ports: HashMap<u16, u32, TableHash>,
    ready: VecDeque<u32>,
    timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    /// The TIME-WAIT table: released connections in TIME-WAIT, as compact records.
    time_wait: HashMap<FlowKey, TimeWait, TableHash>,
    /// The table's records by expiry, earliest first, with stale entries (records gone or
    /// restarted since) skipped and dropped.
    time_wait_order: VecDeque<(Instant, FlowKey)>,
    frames: VecDeque<Vec<u8>>,
    scratch: Vec<u8>,
    port_filter: Option<Box<dyn Fn(FlowGroup) -> bool>>,
    accept_hook: Option<Box<dyn AcceptHook>>,
    ping_replies: VecDeque<PingReply>,
    ident: u16,
    stats: StackStats,
}

impl fmt::Debug for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stack")
            .field("mac", &self.config.mac)
            .field("ip", &self.config.ip)
            .field("connections", &self.live)
            .field("listeners", &self.listener_ports.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Stack {
    /// A stack for one interface, at time `now`. Queues a gratuitous ARP when configured.
    #[must_use]
    pub fn new(mut config: Config, now: Instant) -> Self {
        let mss = u16::try_from(config.mtu.saturating_sub(IP_LEN + 20)).unwrap_or(u16::MAX).max(64);
        config.tcp.mss = config.tcp.mss.min(mss);
        let key = config.secret_seed.map_or_else(Key::random, Key::from_seed);
        let port_key = Key([key.0[0] ^ 0x706f_7274, key.0[1].rotate_left(17)]);
        let tables = TableHash::new(&key);
        let mut stack = Self {
            config,
            epoch: now,
            now,
            key,
            ports: PortAllocator::new(port_key, config.ephemeral_ports.0, config.ephemeral_ports.1),
            arp: ArpCache::new(config.arp, tables),
            reassembler: FragmentReassembler::new(config.reassembly),
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            demux: HashMap::with_hasher(tables),
            listeners: Vec::new(),
            listener_ports: HashMap::with_hasher(tables),
            ready: VecDeque::new(),
            timers: BinaryHeap::new(),
            time_wait: HashMap::with_hasher(tables),
            time_wait_order: VecDeque::new(),
            frames: VecDeque::new(),
            scratch: vec![0; usize::from(config.tcp.mss)],
            port_filter: None,
            accept_hook: None,
            ping_replies: VecDeque::new(),
            ident: 0,
            stats: StackStats::default(),
        };
        if config.gratuitous_arp {
            let ip = stack.ip();
            stack.queue_arp(ArpOperation::Request, EthernetAddress::BROADCAST, EthernetAddress([0; 6]), ip);
        }
        stack
    }

    /// The configuration (with the MSS clamped to the MTU).
    #[must_use]
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// Our IPv4 address.
    #[must_use]
    pub const fn ip(&self) -> Ipv4Addr {
        self.config.ip.address()
    }

    /// Counters.
    #[must_use]
    pub const fn stats(&self) -> &StackStats {
        &self.stats
    }

    /// Connections held (any state, TIME-WAIT included: the application's and the TIME-WAIT
    /// table's).
    #[must_use]
    pub fn connection_count(&self) -> usize {
        self.live + self.time_wait.len()
    }

    /// Released connections in TIME-WAIT (the TIME-WAIT table's records).
    #[must_use]
    pub fn time_wait_count(&self) -> usize {
        self.time_wait.len()
    }

    /// Resolved ARP entries.
    #[must_use]
    pub fn arp_entries(&self) -> usize {
        self.arp.len()
    }

    /// Packets waiting for ARP resolution, over all next hops.
    #[must_use]
    pub fn arp_pending(&self) -> usize {
        self.arp.pending_packets()
    }

    /// The hardware address cached for `ip`, if any.
    pub fn arp_lookup(&mut self, ip: Ipv4Addr) -> Option<EthernetAddress> {
        self.arp.lookup(ip, self.now)
    }

    /// Restricts ephemeral ports to those whose flow group `filter` accepts (e.g. the groups the
    /// NIC steers to this core's RX queue, so that replies land on this core); `None` lifts it.
    /// The group is [`FlowGroup::of_port`] of the local port.
    pub fn set_port_filter(&mut self, filter: Option<Box<dyn Fn(FlowGroup) -> bool>>) {
        self.port_filter = filter;
    }

    /// Hands established connections of every listener to `hook` instead of the listeners' own
    /// accept queues (`None`: back to the queues).
    pub fn set_accept_hook(&mut self, hook: Option<Box<dyn AcceptHook>>) {
        self.accept_hook = hook;
    }

    // -------------------------------------------------------------------------------------------
    // Listeners.

    /// Listens on `port` with the default [`ListenerConfig`].
    ///
    /// # Errors
    /// [`Error::InvalidPort`] for 0, [`Error::AddrInUse`] if a listener has it.
    pub fn listen(&mut self, port: u16) -> Result<ListenerId, Error> {
        self.listen_with(port, ListenerConfig::default())
    }

    /// Listens on `port`.
    ///
    /// # Errors
    /// As [`listen`](Self::listen).
    pub fn listen_with(&mut self, port: u16, config: ListenerConfig) -> Result<ListenerId, Error> {
        if port == 0 {
            return Err(Error::InvalidPort);
        }
        if self.listener_ports.contains_key(&port) {
            return Err(Error::AddrInUse);
        }
        let listener =
            Listener { port, config, syn_queue: 0, accept_queue: VecDeque::new(), last_overflow: None };
        let index = match self.listeners.iter().position(|l| l.listener.is_none()) {
            Some(i) => i,
            None => {
                self.listeners.push(ListenerSlot::default());
                self.listeners.len() - 1
            }
        };
        let index32 = u32::try_from(index).map_err(|_| Error::TooManyConnections)?;
        let slot = &mut self.listeners[index];
        slot.listener = Some(listener);
        self.listener_ports.insert(port, index32);
        Ok(ListenerId { index: index32, generation: slot.generation })
    }

    fn listener(&self, id: ListenerId) -> Option<&Listener> {
        let slot = self.listeners.get(usize::try_from(id.index).ok()?)?;
        if slot.generation == id.generation { slot.listener.as_ref() } else { None }
    }

    fn listener_mut(&mut self, id: ListenerId) -> Option<&mut Listener> {
        let slot = self.listeners.get_mut(usize::try_from(id.index).ok()?)?;
        if slot.generation == id.generation { slot.listener.as_mut() } else { None }
    }

    /// The next established connection of `listener`, oldest first.
    pub fn accept(&mut self, listener: ListenerId) -> Option<StreamId> {
        self.listener_mut(listener)?.accept_queue.pop_front()
    }

    /// Half-open connections in `listener`'s SYN queue.
    #[must_use]
    pub fn syn_queue_len(&self, listener: ListenerId) -> Option<usize> {
        self.listener(listener).map(|l| l.syn_queue)
    }

    /// Established connections waiting in `listener`'s accept queue.
    #[must_use]
    pub fn accept_queue_len(&self, listener: ListenerId) -> Option<usize> {
        self.listener(listener).map(|l| l.accept_queue.len())
    }

    /// Stops listening: queued, never accepted connections are aborted (reset); half-open ones are
    /// aborted when they complete.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn unlisten(&mut self, listener: ListenerId) -> Result<(), Error> {
        let l = self.listener_mut(listener).ok_or(Error::InvalidHandle)?;
        let queued: Vec<StreamId> = l.accept_queue.drain(..).collect();
        let port = l.port;
        let slot = &mut self.listeners[usize::try_from(listener.index).map_err(|_| Error::InvalidHandle)?];
        slot.listener = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.listener_ports.remove(&port);
        for s in queued {
            let _ = self.abort(s);
        }
        Ok(())
    }

    // -------------------------------------------------------------------------------------------
    // Connections.

    fn entry(&self, id: StreamId) -> Result<&Entry, Error> {
        let slot = self.slots.get(usize::try_from(id.index).map_err(|_| Error::InvalidHandle)?);
        match slot {
            Some(s) if s.generation == id.generation => {
                s.entry.as_ref().filter(|e| e.app_owned).ok_or(Error::InvalidHandle)
            }
            _ => Err(Error::InvalidHandle),
        }
    }

    fn entry_mut(&mut self, id: StreamId) -> Result<&mut Entry, Error> {
        let slot = self.slots.get_mut(usize::try_from(id.index).map_err(|_| Error::InvalidHandle)?);
        match slot {
            Some(s) if s.generation == id.generation => {
                s.entry.as_mut().filter(|e| e.app_owned).ok_or(Error::InvalidHandle)
            }
            _ => Err(Error::InvalidHandle),
        }
    }

    fn slot_entry(&mut self, index: u32) -> Option<&mut Entry> {
        self.slots.get_mut(usize::try_from(index).ok()?)?.entry.as_mut()
    }

    fn route(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        if self.config.ip.contains_addr(dst) { Some(dst) } else { self.config.gateway }
    }

    /// Opens a connection to `remote` from an ephemeral port (RFC 6056 algorithm 3, through the
    /// [port filter](Self::set_port_filter)). The SYN leaves at the next
    /// [`transmit`](Self::transmit); data sent before the handshake completes follows it.
    ///
    /// # Errors
    /// [`Error::Unreachable`], [`Error::NoPorts`], [`Error::TooManyConnections`].
    pub fn connect(&mut self, remote: SocketAddrV4) -> Result<StreamId, Error> {
        if remote.port() == 0 {
            return Err(Error::InvalidPort);
        }
        self.route(*remote.ip()).ok_or(Error::Unreachable)?;
        if self.connection_count() >= self.config.max_connections {
            return Err(Error::TooManyConnections);
        }
        let ip = self.ip();
        let demux = &self.demux;
        let time_wait = &self.time_wait;
        let listeners = &self.listener_ports;
        let port = self
            .ports
            .pick(ip, remote, self.port_filter.as_deref(), |p| {
                let key = FlowKey::new(SocketAddrV4::new(ip, p), remote);
                !listeners.contains_key(&p) && !demux.contains_key(&key) && !time_wait.contains_key(&key)
            })
            .ok_or(Error::NoPorts)?;
        let local = SocketAddrV4::new(ip, port);
        let iss = hash::isn(&self.key, local, remote, self.now - self.epoch);
        let conn = Connection::connect(self.config.tcp, local, remote, iss, self.now);
        let index = self.insert(conn, None, Phase::Open, true);
        self.stats.connections_opened += 1;
        Ok(self.stream_id(index))
    }

    fn stream_id(&self, index: u32) -> StreamId {
        let generation =
            usize::try_from(index).ok().and_then(|i| self.slots.get(i)).map_or(0, |s| s.generation);
        StreamId { index, generation }
    }

    fn insert(
        &mut self,
        conn: Connection,
        listener: Option<ListenerId>,
        phase: Phase,
        app_owned: bool,
    ) -> u32 {
        let key = FlowKey::new(conn.local(), conn.remote());
        let entry = Entry {
            conn,
            app_owned,
            listener,
            phase,
            in_demux: true,
            ready: false,
            timer_at: None,
            write_shut: false,
        };
        let index = if let Some(i) = self.free.pop() {
            i
        } else {
            self.slots.push(Slot::default());
            u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
        };
        if let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) {
            slot.entry = Some(entry);
        }
        self.demux.insert(key, index);
        self.live += 1;
        self.mark_ready(index);
        index
    }

    fn mark_ready(&mut self, index: u32) {
        if let Some(e) = self.slot_entry(index)
            && !e.ready
        {
            e.ready = true;
            self.ready.push_back(index);
        }
    }

    /// Queues bytes on `stream`; returns how many fit in the send buffer.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when the buffer is full, [`Error::WriteClosed`] after
    /// [`shutdown_write`](Self::shutdown_write) or once the connection is closing,
    /// [`Error::Connection`] once it failed, [`Error::InvalidHandle`].
    pub fn send(&mut self, stream: StreamId, data: &[u8]) -> Result<usize, Error> {
        let e = self.entry_mut(stream)?;
        if let Some(err) = e.conn.error() {
            return Err(Error::Connection(err));
        }
        if e.write_shut
            || !matches!(
                e.conn.state(),
                State::SynSent | State::SynReceived | State::Established | State::CloseWait
            )
        {
            return Err(Error::WriteClosed);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let n = e.conn.send(data);
        if n == 0 {
            return Err(Error::WouldBlock);
        }
        self.mark_ready(stream.index);
        Ok(n)
    }

    /// Queues prepared content on `stream` after what is queued, by reference (no copy of its
    /// bytes; see [Prepared content](self#prepared-content-the-sandstorm-send-path)). All or
    /// nothing: the send ring's room does not limit it (the content is shared, not buffered per
    /// connection), but at most 64 runs of content wait per connection.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when 64 runs are queued, [`Error::WriteClosed`],
    /// [`Error::Connection`], [`Error::InvalidHandle`] as for [`send`](Self::send).
    pub fn send_prepared(&mut self, stream: StreamId, segments: &Arc<PreparedSegments>) -> Result<(), Error> {
        let e = self.entry_mut(stream)?;
        if let Some(err) = e.conn.error() {
            return Err(Error::Connection(err));
        }
        if e.write_shut
            || !matches!(
                e.conn.state(),
                State::SynSent | State::SynReceived | State::Established | State::CloseWait
            )
        {
            return Err(Error::WriteClosed);
        }
        if !e.conn.send_prepared(segments) {
            return Err(Error::WouldBlock);
        }
        self.mark_ready(stream.index);
        Ok(())
    }

    /// Reads received bytes of `stream` in order; `Ok(0)` at the end of the stream (the peer's FIN,
    /// or a connection closed normally).
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when nothing is buffered yet, [`Error::Connection`] once it failed
    /// (after the buffered bytes are read), [`Error::InvalidHandle`].
    pub fn recv(&mut self, stream: StreamId, buf: &mut [u8]) -> Result<usize, Error> {
        let e = self.entry_mut(stream)?;
        let n = e.conn.recv(buf);
        if n > 0 {
            self.mark_ready(stream.index);
            return Ok(n);
        }
        if let Some(err) = e.conn.error() {
            return Err(Error::Connection(err));
        }
        if e.conn.recv_finished() || e.conn.is_closed() || buf.is_empty() {
            return Ok(0);
        }
        Err(Error::WouldBlock)
    }

    /// Half-close: a FIN follows the data already queued.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn shutdown_write(&mut self, stream: StreamId) -> Result<(), Error> {
        let e = self.entry_mut(stream)?;
        e.write_shut = true;
        e.conn.shutdown_write();
        self.mark_ready(stream.index);
        Ok(())
    }

    /// Releases the handle and closes the connection gracefully (an abort if received data was
    /// left unread, see [`Connection::close`]); the stack finishes it and reclaims it.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn close(&mut self, stream: StreamId) -> Result<(), Error> {
        let e = self.entry_mut(stream)?;
        e.conn.close();
        e.app_owned = false;
        self.mark_ready(stream.index);
        Ok(())
    }

    /// Releases the handle and aborts the connection (an RST if it was synchronized).
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn abort(&mut self, stream: StreamId) -> Result<(), Error> {
        let e = self.entry_mut(stream)?;
        e.conn.abort();
        e.app_owned = false;
        self.mark_ready(stream.index);
        Ok(())
    }

    /// Disables (`true`) or enables Nagle's algorithm.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn set_nodelay(&mut self, stream: StreamId, nodelay: bool) -> Result<(), Error> {
        self.entry_mut(stream)?.conn.set_nodelay(nodelay);
        Ok(())
    }

    /// The RFC 9293 state.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn state(&self, stream: StreamId) -> Result<State, Error> {
        Ok(self.entry(stream)?.conn.state())
    }

    /// Why the connection failed, once it has.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn error(&self, stream: StreamId) -> Result<Option<ConnectionError>, Error> {
        Ok(self.entry(stream)?.conn.error())
    }

    /// The local and remote addresses.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn addrs(&self, stream: StreamId) -> Result<(SocketAddrV4, SocketAddrV4), Error> {
        let e = self.entry(stream)?;
        Ok((e.conn.local(), e.conn.remote()))
    }

    /// Whether [`recv`](Self::recv) returns something other than [`Error::WouldBlock`] (false for
    /// an invalid handle).
    #[must_use]
    pub fn is_readable(&self, stream: StreamId) -> bool {
        self.entry(stream).is_ok_and(|e| e.conn.is_readable() || e.conn.error().is_some())
    }

    /// Whether [`send`](Self::send) accepts a byte now.
    #[must_use]
    pub fn is_writable(&self, stream: StreamId) -> bool {
        self.entry(stream).is_ok_and(|e| !e.write_shut && e.conn.is_writable())
    }

    /// Counters and estimates of the connection (RTT, cwnd, retransmits, bytes).
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn connection_stats(&self, stream: StreamId) -> Result<Stats, Error> {
        Ok(self.entry(stream)?.conn.stats())
    }

    /// The most payload bytes `stream` puts in one segment: the peer's MSS, lowered by PMTU
    /// discovery (ICMP fragmentation needed, RFC 1191).
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn send_mss(&self, stream: StreamId) -> Result<usize, Error> {
        Ok(self.entry(stream)?.conn.send_mss())
    }

    /// Bytes waiting to be read, and bytes in the send buffer.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn queues(&self, stream: StreamId) -> Result<(usize, usize), Error> {
        let e = self.entry(stream)?;
        Ok((e.conn.recv_queue(), e.conn.send_queue()))
    }

    // -------------------------------------------------------------------------------------------
    // Migration between stacks (connection stealing).

    /// Whether the stack holds a connection for `local`/`remote` that incoming segments reach (any
    /// state from SYN-RECEIVED to TIME-WAIT; not once it is closed or reclaimed). A steering entry
    /// for the connection (a registry signature) is needed as long as this holds.
    #[must_use]
    pub fn contains(&self, local: SocketAddrV4, remote: SocketAddrV4) -> bool {
        let key = FlowKey::new(local, remote);
        self.demux.contains_key(&key) || self.time_wait.contains_key(&key)
    }

    /// Moves the connection `stream` out of this stack, for [`adopt`](Self::adopt) by another
    /// stack with the same local address (another core's stack, when a stolen connection follows
    /// its stealer). Everything the connection is moves with it: its state and sequence space, the
    /// receive buffer (bytes not yet read, out-of-order data), the send buffer (unsent and
    /// unacknowledged bytes), its timers (absolute instants), whether the application shut down
    /// writing, and the peer's next hop's hardware address if this stack has it resolved. This
    /// stack forgets it: the 4-tuple's demultiplexing entry, the ready list and timer entries, the
    /// listener's accept queue if it was still waiting there; the handle becomes stale.
    ///
    /// Segments for the connection that reach this stack afterwards find no connection (a segment
    /// with an ACK draws a reset from a listener on the port, as for any stray): steer them to
    /// the adopter before they can arrive here, or hold them back until the adopter has it.
    /// Segments already built and waiting here for ARP resolution still leave from here.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`] (also for a connection the application does not hold, such as
    /// a half-open one in a SYN queue).
    pub fn detach(&mut self, stream: StreamId) -> Result<Detached, Error> {
        self.entry(stream)?;
        let index = stream.index;
        let i = usize::try_from(index).map_err(|_| Error::InvalidHandle)?;
        let slot = self.slots.get_mut(i).ok_or(Error::InvalidHandle)?;
        let e = slot.entry.take().ok_or(Error::InvalidHandle)?;
        slot.generation = slot.generation.wrapping_add(1);
        let (local, remote) = (e.conn.local(), e.conn.remote());
        if e.in_demux {
            self.demux.remove(&FlowKey::new(local, remote));
        }
        if e.ready {
            self.ready.retain(|&r| r != index);
        }
        if let Some(l) = e.listener.and_then(|l| self.listener_mut(l)) {
            l.accept_queue.retain(|&s| s != stream);
        }
        // Its timer-heap entry is stale now (the generation moved on) and is skipped.
        self.free.push(index);
        self.live -= 1;
        self.stats.connections_detached += 1;
        let now = self.now;
        let next_hop =
            self.route(*remote.ip()).and_then(|hop| self.arp.lookup(hop, now).map(|mac| (hop, mac)));
        Ok(Detached { conn: e.conn, write_shut: e.write_shut, next_hop })
    }

    /// Takes in a connection [`detach`](Self::detach)ed from another stack and returns its new
    /// handle here; its timers are armed and whatever it has to send leaves at the next
    /// [`transmit`](Self::transmit). The peer's next hop is added to the ARP cache from the
    /// detached record when this stack lacks it (else this stack resolves it as usual). `now` is
    /// on the same clock as the detaching stack's (connection timers are absolute instants).
    ///
    /// # Errors
    /// The connection comes back in [`AdoptError`]: [`Error::NotLocal`] when its local address is
    /// not this stack's, [`Error::AddrInUse`] when this stack already has its 4-tuple,
    /// [`Error::TooManyConnections`] at [`Config::max_connections`].
    pub fn adopt(&mut self, detached: Detached, now: Instant) -> Result<StreamId, AdoptError> {
        self.advance(now);
        let (local, remote) = (detached.conn.local(), detached.conn.remote());
        let refused = if *local.ip() != self.ip() {
            Some(Error::NotLocal)
        } else if self.contains(local, remote) {
            Some(Error::AddrInUse)
        } else if self.connection_count() >= self.config.max_connections {
            Some(Error::TooManyConnections)
        } else {
            None
        };
        if let Some(error) = refused {
            return Err(AdoptError { error, detached: Box::new(detached) });
        }
        let Detached { conn, write_shut, next_hop } = detached;
        if let Some((hop, mac)) = next_hop
            && self.route(*remote.ip()) == Some(hop)
            && self.arp.lookup(hop, self.now).is_none()
        {
            let waiting = self.arp.insert(hop, mac, self.now);
            for mut frame in waiting {
                self.fill_ethernet(&mut frame, mac);
                self.push_frame(frame);
            }
        }
        let index = self.insert(conn, None, Phase::Open, true);
        if let Some(e) = self.slot_entry(index) {
            e.write_shut = write_shut;
        }
        self.arm_timer(index);
        self.stats.connections_adopted += 1;
        Ok(self.stream_id(index))
    }

    // -------------------------------------------------------------------------------------------
    // ICMP echo.

    /// Sends an ICMP echo request to `dst`.
    ///
    /// # Errors
    /// [`Error::Unreachable`].
    pub fn ping(&mut self, dst: Ipv4Addr, ident: u16, seq_no: u16, data: &[u8]) -> Result<(), Error> {
        self.route(dst).ok_or(Error::Unreachable)?;
        let repr = Icmpv4Repr::EchoRequest { ident, seq_no, data };
        self.send_icmp(dst, &repr);
        Ok(())
    }

    /// The oldest echo reply received and not yet taken (at most 64 are kept).
    pub fn take_ping_reply(&mut self) -> Option<PingReply> {
        self.ping_replies.pop_front()
    }

    // -------------------------------------------------------------------------------------------
    // Receive.

    fn advance(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
    }

    /// Processes one received Ethernet frame (any bytes: what does not parse is counted and
    /// dropped).
    pub fn receive(&mut self, now: Instant, frame: &[u8]) {
        self.receive_with(now, frame, &mut |_, _| 0);
    }

    /// [`receive`](Self::receive) with in-place delivery of TCP payload: in-order bytes of a
    /// connection the application holds a handle for, with nothing buffered ahead of them, are
    /// offered to `deliver` where they lie in `frame` (see
    /// [`Connection::handle_segment_with`]); it returns how many it consumed, and the rest is
    /// buffered for [`recv`](Self::recv). Consumed bytes never enter the receive buffer, so the
    /// advertised window stays open.
    pub fn receive_with<F: FnMut(StreamId, &[u8]) -> usize>(
        &mut self,
        now: Instant,
        frame: &[u8],
        deliver: &mut F,
    ) {
        self.advance(now);
        self.stats.rx_frames += 1;
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let dst = eth.dst_addr();
        if dst != self.config.mac && !dst.is_broadcast() {
            self.stats.rx_not_for_us += 1;
            return;
        }
        match eth.ethertype() {
            EtherType::Arp => self.receive_arp(eth.payload()),
            EtherType::Ipv4 => self.receive_ipv4(eth.payload(), deliver),
            _ => self.stats.rx_unhandled += 1,
        }
    }

    /// Records that `ip` is at `mac`, as an ARP packet from it would (RFC 826), and sends what was
    /// waiting for the address. For a runtime that runs several stacks behind one address: an ARP
    /// packet reaches one of them, and the others learn the sender from it through this. Ignores
    /// what an ARP packet could not teach either (a broadcast or multicast MAC, the unspecified
    /// address, our own).
    pub fn learn_neighbor(&mut self, ip: Ipv4Addr, mac: EthernetAddress) {
        if mac.is_unicast() && !ip.is_unspecified() && ip != self.ip() {
            let waiting = self.arp.insert(ip, mac, self.now);
            for mut frame in waiting {
                self.fill_ethernet(&mut frame, mac);
                self.push_frame(frame);
            }
        }
    }

    fn receive_arp(&mut self, bytes: &[u8]) {
        let Ok(repr) = ArpPacket::new_checked(bytes).and_then(|p| ArpRepr::parse(&p)) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let (sender_ip, sender_mac) = (repr.source_protocol_addr, repr.source_hardware_addr);
        let for_us = repr.target_protocol_addr == self.ip();
        let usable = sender_mac.is_unicast() && !sender_ip.is_unspecified() && sender_ip != self.ip();
        // RFC 826: update a known entry from any packet; add one when the packet is for us.
        if usable && (for_us || self.arp.contains(sender_ip)) {
            let waiting = self.arp.insert(sender_ip, sender_mac, self.now);
            for mut frame in waiting {
                self.fill_ethernet(&mut frame, sender_mac);
                self.push_frame(frame);
            }
        }
        if !for_us {
            self.stats.rx_not_for_us += 1;
            return;
        }
        if repr.operation == ArpOperation::Request && usable {
            self.queue_arp(ArpOperation::Reply, sender_mac, sender_mac, sender_ip);
            self.stats.arp_replies += 1;
        }
    }

    fn receive_ipv4<F: FnMut(StreamId, &[u8]) -> usize>(&mut self, bytes: &[u8], deliver: &mut F) {
        let Ok(packet) = Ipv4Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        if packet.is_fragment() {
            self.stats.rx_fragments += 1;
            match self.reassembler.add(&packet, self.now) {
                Ok(Some(datagram)) => {
                    self.stats.rx_reassembled += 1;
                    self.receive_datagram(&datagram.header, &datagram.payload, deliver);
                }
                Ok(None) => {}
                Err(_) => self.stats.rx_malformed += 1,
            }
            return;
        }
        match Ipv4Repr::parse(&packet, self.config.checksum) {
            Ok(repr) => self.receive_datagram(&repr, packet.payload(), deliver),
            Err(_) => self.stats.rx_malformed += 1,
        }
    }

    fn receive_datagram<F: FnMut(StreamId, &[u8]) -> usize>(
        &mut self,
        ip: &Ipv4Repr,
        payload: &[u8],
        deliver: &mut F,
    ) {
        if ip.dst_addr != self.ip() {
            self.stats.rx_not_for_us += 1;
            return;
        }
        match ip.protocol {
            Protocol::Tcp => self.receive_tcp(ip.src_addr, payload, deliver),
            Protocol::Icmp => self.receive_icmp(ip.src_addr, payload),
            _ => self.stats.rx_unhandled += 1,
        }
    }

    fn receive_icmp(&mut self, src: Ipv4Addr, bytes: &[u8]) {
        let Ok(packet) = Icmpv4Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        match Icmpv4Repr::parse(&packet, self.config.checksum) {
            Ok(Icmpv4Repr::EchoRequest { ident, seq_no, data }) => {
                self.send_icmp(src, &Icmpv4Repr::EchoReply { ident, seq_no, data });
                self.stats.icmp_echo_replies += 1;
            }
            Ok(Icmpv4Repr::EchoReply { ident, seq_no, data }) => {
                if self.ping_replies.len() < MAX_PING_REPLIES {
                    self.ping_replies.push_back(PingReply { from: src, ident, seq_no, len: data.len() });
                }
            }
            Ok(Icmpv4Repr::DstUnreachable {
                reason: crate::wire::icmpv4::DstUnreachable::FragRequired,
                next_hop_mtu,
                header,
                data,
            }) => {
                self.frag_needed(next_hop_mtu, &header, data);
            }
            // Other destination unreachable / time exceeded messages: soft errors are a later item.
            Ok(_) => self.stats.rx_unhandled += 1,
            Err(_) => self.stats.rx_malformed += 1,
        }
    }

    /// PMTU discovery (RFC 1191): a fragmentation-needed message quoting a segment we sent (its
    /// IPv4 header and first 8 TCP bytes: ports and sequence number) goes to that connection,
    /// which checks the sequence number (RFC 5927 §4.1) and lowers its send MSS.
    fn frag_needed(&mut self, next_hop_mtu: u16, header: &Ipv4Repr, data: &[u8]) {
        let quoted = (header.protocol == Protocol::Tcp && header.src_addr == self.ip())
            .then(|| data.get(..8))
            .flatten()
            .map(|d| {
                let port = |i: usize| u16::from_be_bytes([d[i], d[i + 1]]);
                let seq = SeqNumber::new(u32::from_be_bytes([d[4], d[5], d[6], d[7]]));
                (
                    SocketAddrV4::new(header.src_addr, port(0)),
                    SocketAddrV4::new(header.dst_addr, port(2)),
                    seq,
                )
            });
        let lowered = quoted.is_some_and(|(local, remote, seq)| {
            let Some(&index) = self.demux.get(&FlowKey::new(local, remote)) else { return false };
            let lowered =
                self.slot_entry(index).is_some_and(|e| e.conn.handle_frag_needed(seq, next_hop_mtu));
            if lowered {
                self.mark_ready(index);
            }
            lowered
        });
        if lowered {
            self.stats.icmp_pmtu_updates += 1;
        } else {
            self.stats.icmp_pmtu_ignored += 1;
        }
    }

    fn receive_tcp<F: FnMut(StreamId, &[u8]) -> usize>(
        &mut self,
        src: Ipv4Addr,
        bytes: &[u8],
        deliver: &mut F,
    ) {
        let ip = self.ip();
        let Ok(packet) = TcpPacket::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(seg) = TcpRepr::parse(&packet, src, ip, self.config.checksum) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let local = SocketAddrV4::new(ip, seg.dst_port);
        let remote = SocketAddrV4::new(src, seg.src_port);
        if let Some(&index) = self.demux.get(&FlowKey::new(local, remote)) {
            self.stats.tcp_segments_in += 1;
            let now = self.now;
            let Some(e) = self.slot_entry(index) else { return };
            let completing = e.phase == Phase::SynQueue && seg.ack_number.is_some();
            let listener = e.listener;
            if completing
                && let Some(l) = listener
                && !self.backlog_has_room(l)
            {
                self.stats.listen_drops += 1;
                return;
            }
            let id = self.stream_id(index);
            if let Some(e) = self.slot_entry(index) {
                if e.app_owned {
                    e.conn.handle_segment_with(now, &seg, |data| deliver(id, data));
                } else {
                    e.conn.handle_segment(now, &seg);
                }
            }
            self.settle(index);
            self.mark_ready(index);
            return;
        }
        let key = FlowKey::new(local, remote);
        if let Some(record) = self.time_wait.get_mut(&key) {
            self.stats.tcp_segments_in += 1;
            let before = record.expires(self.epoch);
            let action = record.handle_segment(&self.config.tcp, self.epoch, self.now, &seg);
            let after = record.expires(self.epoch);
            match action {
                TimeWaitAction::Ignore => {}
                TimeWaitAction::Reply(ack) => self.send_tcp_control(local, remote, &ack),
                TimeWaitAction::Close => {
                    self.time_wait.remove(&key);
                }
            }
            if action != TimeWaitAction::Close && after != before {
                // A retransmitted FIN restarted 2·MSL.
                self.time_wait_queue(after, key);
            }
            self.time_wait_trim();
            return;
        }
        if let Some(&li) = self.listener_ports.get(&seg.dst_port) {
            self.stats.tcp_segments_in += 1;
            let generation =
                self.listeners.get(usize::try_from(li).unwrap_or(usize::MAX)).map_or(0, |s| s.generation);
            self.listener_segment(ListenerId { index: li, generation }, local, remote, &seg);
            return;
        }
        self.stats.tcp_no_socket += 1;
        if let Some(rst) = reset_for(&seg) {
            self.send_tcp_control(local, remote, &rst);
        }
    }

    fn backlog_has_room(&mut self, listener: ListenerId) -> bool {
        if let Some(hook) = self.accept_hook.as_mut() {
            return hook.has_room(listener);
        }
        self.listener(listener).is_some_and(|l| l.accept_queue.len() < l.config.backlog)
    }

    fn listener_segment(
        &mut self,
        id: ListenerId,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        seg: &TcpRepr<'_>,
    ) {
        let now = self.now;
        let since = now - self.epoch;
        let Some(l) = self.listener(id) else { return };
        let lconfig = l.config;
        let recent_overflow = l.last_overflow.is_some_and(|t| now - t < hash::COOKIE_PERIOD * 2);
        let syn_queue = l.syn_queue;
        match listen_reply(seg) {
            ListenAction::Ignore => {}
            ListenAction::Reset(rst) => {
                if lconfig.syn_cookies
                    && recent_overflow
                    && matches!(seg.control, TcpControl::None | TcpControl::Fin)
                    && let Some(ack) = seg.ack_number
                {
                    let ours = ack - 1;
                    let peer = seg.seq_number - 1;
                    let count = hash::cookie_count(since);
                    if let Some(i) = hash::check_cookie(&self.key, local, remote, peer, ours, count) {
                        self.accept_cookie(id, local, remote, seg, peer, ours, i);
                        return;
                    }
                    self.stats.syn_cookies_rejected += 1;
                }
                self.send_tcp_control(local, remote, &rst);
            }
            ListenAction::Accept => {
                if !self.backlog_has_room(id) || self.connection_count() >= self.config.max_connections {
                    self.stats.listen_drops += 1;
                    return;
                }
                if syn_queue < lconfig.syn_queue {
                    let iss = hash::isn(&self.key, local, remote, since);
                    let Some(conn) = Connection::accept(self.config.tcp, local, remote, seg, iss, now) else {
                        return;
                    };
                    if let Some(l) = self.listener_mut(id) {
                        l.syn_queue += 1;
                    }
                    self.insert(conn, Some(id), Phase::SynQueue, false);
                    self.stats.connections_opened += 1;
                    if let Some(hook) = self.accept_hook.as_mut() {
                        hook.opened(id, local, remote);
                    }
                } else if lconfig.syn_cookies {
                    if let Some(l) = self.listener_mut(id) {
                        l.last_overflow = Some(now);
                    }
                    let peer_mss = seg.max_seg_size.unwrap_or(536).min(self.config.tcp.mss);
                    let index = hash::cookie_mss_index(peer_mss);
                    let count = hash::cookie_count(since);
                    let iss = hash::cookie(&self.key, local, remote, seg.seq_number, count, index);
                    let synack = TcpRepr {
                        src_port: local.port(),
                        dst_port: remote.port(),
                        control: TcpControl::Syn,
                        seq_number: iss,
                        ack_number: Some(seg.seq_number + 1),
                        window_len: u16::try_from(self.config.tcp.recv_buffer).unwrap_or(u16::MAX),
                        max_seg_size: Some(self.config.tcp.mss),
                        ..TcpRepr::default()
                    };
                    self.send_tcp_control(local, remote, &synack);
                    self.stats.syn_cookies_sent += 1;
                } else {
                    self.stats.listen_drops += 1;
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn accept_cookie(
        &mut self,
        id: ListenerId,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        seg: &TcpRepr<'_>,
        peer_isn: SeqNumber,
        our_isn: SeqNumber,
        mss_index: u32,
    ) {
        if !self.backlog_has_room(id) || self.connection_count() >= self.config.max_connections {
            self.stats.listen_drops += 1;
            return;
        }
        let mss =
            usize::try_from(mss_index).ok().and_then(|i| hash::COOKIE_MSS.get(i)).copied().unwrap_or(536);
        // The SYN the cookie stands for: its options are lost, except the MSS.
        let syn = TcpRepr {
            src_port: remote.port(),
            dst_port: local.port(),
            control: TcpControl::Syn,
            seq_number: peer_isn,
            window_len: seg.window_len,
            max_seg_size: Some(mss),
            ..TcpRepr::default()
        };
        let now = self.now;
        let Some(mut conn) = Connection::accept(self.config.tcp, local, remote, &syn, our_isn, now) else {
            return;
        };
        // The SYN-ACK it would send went out already, as the cookie.
        while conn.poll_transmit(now, &mut self.scratch).is_some() {}
        conn.handle_segment(now, seg);
        if !conn.is_established() {
            return;
        }
        self.stats.syn_cookies_accepted += 1;
        let index = self.insert(conn, Some(id), Phase::Cookie, false);
        self.stats.connections_opened += 1;
        if let Some(hook) = self.accept_hook.as_mut() {
            hook.opened(id, local, remote);
        }
        self.settle(index);
    }

    /// Bookkeeping after an event on a connection: delivery to the accept queue when a passive
    /// open completes, SYN-queue accounting.
    fn settle(&mut self, index: u32) {
        let Some(e) = self.slot_entry(index) else { return };
        if !matches!(e.phase, Phase::SynQueue | Phase::Cookie) || e.conn.state() == State::SynReceived {
            return;
        }
        let was_counted = e.phase == Phase::SynQueue;
        e.phase = Phase::Open;
        let established = e.conn.is_established() && !e.conn.is_closed();
        let listener = e.listener;
        if was_counted && let Some(l) = listener.and_then(|l| self.listener_mut(l)) {
            l.syn_queue = l.syn_queue.saturating_sub(1);
        }
        if !established {
            return;
        }
        let stream = self.stream_id(index);
        let live_listener = listener.filter(|&l| self.listener(l).is_some());
        let Some(l) = live_listener else {
            // The listener is gone: nobody will accept it.
            if let Some(e) = self.slot_entry(index) {
                e.conn.abort();
            }
            return;
        };
        if let Some(e) = self.slot_entry(index) {
            e.app_owned = true;
        }
        if let Some(hook) = self.accept_hook.as_mut() {
            hook.established(l, stream);
        } else if let Some(listener) = self.listener_mut(l) {
            listener.accept_queue.push_back(stream);
        }
    }

    // -------------------------------------------------------------------------------------------
    // Timers.

    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) has work (`now`
    /// itself when frames wait for [`transmit`](Self::transmit)).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.frames.is_empty() || !self.ready.is_empty() {
            return Some(self.now);
        }
        [
            self.timers.peek().map(|Reverse((t, _, _))| *t),
            self.time_wait_order.front().map(|&(t, _)| t),
            self.arp.next_deadline(),
            self.reassembler.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the timers due at `now`: connection timers, ARP retries, fragment expiry.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
        let now = self.now;
        while let Some(&Reverse((at, index, generation))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) else {
                continue;
            };
            if slot.generation != generation {
                continue;
            }
            let Some(e) = slot.entry.as_mut() else { continue };
            if e.timer_at != Some(at) {
                continue;
            }
            e.timer_at = None;
            if e.conn.poll_timeout().is_some_and(|t| t <= now) {
                e.conn.handle_timeout(now);
            }
            self.settle(index);
            self.mark_ready(index);
        }
        while let Some(&(at, key)) = self.time_wait_order.front() {
            if at > now {
                break;
            }
            self.time_wait_order.pop_front();
            if self.time_wait_live(at, key) {
                self.time_wait.remove(&key);
            }
        }
        self.time_wait_trim();
        let mut requests = Vec::new();
        self.stats.arp_dropped += u64::try_from(self.arp.poll(now, &mut requests)).unwrap_or(u64::MAX);
        for ip in requests {
            self.queue_arp(ArpOperation::Request, EthernetAddress::BROADCAST, EthernetAddress([0; 6]), ip);
        }
        self.reassembler.expire(now);
    }

    fn arm_timer(&mut self, index: u32) {
        let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) else { return };
        let generation = slot.generation;
        let Some(e) = slot.entry.as_mut() else { return };
        let Some(t) = e.conn.poll_timeout() else { return };
        if e.timer_at.is_none_or(|cur| t < cur) {
            e.timer_at = Some(t);
            self.timers.push(Reverse((t, index, generation)));
        }
        if self.timers.len() > 2 * self.live + 1024 {
            self.rebuild_timers();
        }
    }

    fn rebuild_timers(&mut self) {
        self.timers.clear();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(e) = slot.entry.as_mut() else { continue };
            e.timer_at = e.conn.poll_timeout();
            if let (Some(t), Ok(i)) = (e.timer_at, u32::try_from(i)) {
                self.timers.push(Reverse((t, i, slot.generation)));
            }
        }
    }

    // -------------------------------------------------------------------------------------------
    // Transmit.

    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
    }

    fn fill_ethernet(&self, frame: &mut [u8], dst: EthernetAddress) {
        let repr =
            EthernetRepr { src_addr: self.config.mac, dst_addr: dst, vlan: None, ethertype: EtherType::Ipv4 };
        if frame.len() >= ETH_LEN {
            repr.emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
        }
    }

    fn push_frame(&mut self, frame: Vec<u8>) {
        if self.frames.len() >= self.config.max_queued_frames {
            self.stats.tx_dropped += 1;
            return;
        }
        self.frames.push_back(frame);
    }

    fn queue_arp(
        &mut self,
        op: ArpOperation,
        eth_dst: EthernetAddress,
        target_mac: EthernetAddress,
        target: Ipv4Addr,
    ) {
        let arp = ArpRepr {
            operation: op,
            source_hardware_addr: self.config.mac,
            source_protocol_addr: self.ip(),
            target_hardware_addr: target_mac,
            target_protocol_addr: target,
        };
        let eth = EthernetRepr {
            src_addr: self.config.mac,
            dst_addr: eth_dst,
            vlan: None,
            ethertype: EtherType::Arp,
        };
        let mut frame = vec![0u8; eth.buffer_len(arp.buffer_len())];
        let mut view = EthernetFrame::new_unchecked(&mut frame[..]);
        eth.emit(&mut view);
        arp.emit(&mut ArpPacket::new_unchecked(view.payload_mut()));
        if op == ArpOperation::Request {
            self.stats.arp_requests += 1;
        }
        self.push_frame(frame);
    }

    /// Sends an IPv4 datagram whose payload `write` fills (`len` bytes): now if the next hop is
    /// resolved, else after ARP.
    fn send_ip(&mut self, dst: Ipv4Addr, protocol: Protocol, len: usize, write: impl FnOnce(&mut [u8])) {
        let Some(hop) = self.route(dst) else {
            self.stats.no_route += 1;
            return;
        };
        let ip = Ipv4Repr {
            src_addr: self.ip(),
            dst_addr: dst,
            protocol,
            payload_len: len,
            ttl: self.config.ttl,
            dscp: 0,
            ecn: 0,
            ident: self.next_ident(),
            dont_frag: true,
        };
        let mut frame = vec![0u8; ETH_LEN + ip.buffer_len()];
        let mut packet = Ipv4Packet::new_unchecked(&mut frame[ETH_LEN..]);
        ip.emit(&mut packet);
        write(packet.payload_mut());
        self.send_frame_to(hop, frame);
    }

    fn send_frame_to(&mut self, hop: Ipv4Addr, mut frame: Vec<u8>) {
        if let Some(mac) = self.arp.lookup(hop, self.now) {
            self.fill_ethernet(&mut frame, mac);
            self.push_frame(frame);
            return;
        }
        match self.arp.enqueue(hop, frame, self.now) {
            Enqueued::RequestNow => {
                self.queue_arp(
                    ArpOperation::Request,
                    EthernetAddress::BROADCAST,
                    EthernetAddress([0; 6]),
                    hop,
                );
            }
            Enqueued::Queued => {}
            Enqueued::Dropped => self.stats.arp_dropped += 1,
        }
    }

    fn send_icmp(&mut self, dst: Ipv4Addr, repr: &Icmpv4Repr<'_>) {
        self.send_ip(dst, Protocol::Icmp, repr.buffer_len(), |b| {
            repr.emit(&mut Icmpv4Packet::new_unchecked(b))
        });
    }

    fn send_tcp_control(&mut self, local: SocketAddrV4, remote: SocketAddrV4, seg: &TcpRepr<'_>) {
        if seg.control == TcpControl::Rst {
            self.stats.rst_sent += 1;
        }
        let (src, dst) = (*local.ip(), *remote.ip());
        self.send_ip(dst, Protocol::Tcp, seg.buffer_len(), |b| {
            seg.emit(&mut TcpPacket::new_unchecked(b), src, dst)
        });
    }

    /// Builds outgoing frames in buffers of `cache` and appends them to `out` until it is full or
    /// nothing is left to send: queued control frames (ARP, ICMP, resets, SYN cookies), then the
    /// segments of connections with something to send. Returns how many frames it appended. Frames
    /// for next hops still being resolved wait in the ARP queue.
    pub fn transmit<'c>(&mut self, now: Instant, cache: &'c PoolCache, out: &mut PacketBatch<'c>) -> usize {
        self.advance(now);
        let mut appended = 0;
        while !out.is_full() {
            let Some(frame) = self.frames.pop_front() else { break };
            let Some(mut packet) = cache.alloc() else {
                self.frames.push_front(frame);
                return appended;
            };
            if packet.extend_from_slice(&frame).is_err() {
                self.stats.tx_dropped += 1;
                continue;
            }
            if out.push(packet).is_err() {
                break;
            }
            appended += 1;
        }
        while let Some(&index) = self.ready.front() {
            match self.drain_connection(index, cache, out, &mut appended) {
                Drained::All => {
                    self.ready.pop_front();
                    if let Some(e) = self.slot_entry(index) {
                        e.ready = false;
                    }
                    self.after_drain(index);
                }
                Drained::Stopped => break,
            }
        }
        self.stats.tx_frames += u64::try_from(appended).unwrap_or(u64::MAX);
        appended
    }

    fn drain_connection<'c>(
        &mut self,
        index: u32,
        cache: &'c PoolCache,
        out: &mut PacketBatch<'c>,
        appended: &mut usize,
    ) -> Drained {
        let now = self.now;
        let Some(remote_ip) = self.slot_entry(index).map(|e| *e.conn.remote().ip()) else {
            return Drained::All;
        };
        let Some(hop) = self.route(remote_ip) else { return Drained::All };
        loop {
            let mac = self.arp.lookup(hop, now);
            if mac.is_some() && out.is_full() {
                return Drained::Stopped;
            }
            let ident = self.ident.wrapping_add(1);
            let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) else {
                return Drained::All;
            };
            let Some(e) = slot.entry.as_mut() else { return Drained::All };
            let Some(mac) = mac else {
                // Unresolved next hop: the segment waits (bounded) in the ARP queue.
                let Some((t, lent)) = e.conn.poll_transmit_prepared(now, &mut self.scratch) else {
                    return Drained::All;
                };
                let seg = match &lent {
                    Some(slice) => t.segment(slice.bytes()),
                    None => t.segment(&self.scratch),
                };
                let mut frame = vec![0u8; ETH_LEN + IP_LEN + seg.buffer_len()];
                emit_ip_tcp(&mut frame[ETH_LEN..], &seg, t.src, t.dst, ident, &self.config);
                self.ident = ident;
                self.send_frame_to(hop, frame);
                continue;
            };
            let Some(mut packet) = cache.alloc() else { return Drained::Stopped };
            let Some((t, lent)) = e.conn.poll_transmit_prepared(now, &mut self.scratch) else {
                return Drained::All;
            };
            self.ident = ident;
            let seg = match &lent {
                Some(_) => t.segment(&[]),
                None => t.segment(&self.scratch),
            };
            let payload_len = lent.as_ref().map_or(0, |l| l.len);
            let len = ETH_LEN + IP_LEN + seg.buffer_len() + payload_len;
            if packet.set_len(len).is_err() {
                self.stats.tx_dropped += 1;
                continue;
            }
            let data = packet.data_mut();
            EthernetRepr { src_addr: self.config.mac, dst_addr: mac, vlan: None, ethertype: EtherType::Ipv4 }
                .emit(&mut EthernetFrame::new_unchecked(&mut data[..]));
            match &lent {
                Some(slice) => {
                    let precomputed = emit_ip_tcp_prepared(
                        &mut data[ETH_LEN..],
                        &seg,
                        slice,
                        t.src,
                        t.dst,
                        ident,
                        &self.config,
                    );
                    self.stats.tx_prepared += 1;
                    self.stats.tx_prepared_sums += u64::from(precomputed);
                }
                None => emit_ip_tcp(&mut data[ETH_LEN..], &seg, t.src, t.dst, ident, &self.config),
            }
            if out.push(packet).is_err() {
                self.stats.tx_dropped += 1;
                return Drained::Stopped;
            }
            *appended += 1;
        }
    }

    /// After a connection's output is drained: timers, reclaiming, and a released connection in
    /// TIME-WAIT traded for its compact record in the TIME-WAIT table. A connection whose state
    /// the record does not cover (see `Connection::time_wait_record`; not expected once drained)
    /// stays whole in its slot until its own 2·MSL ends, and is tried again after its next drain.
    fn after_drain(&mut self, index: u32) {
        let epoch = self.epoch;
        if let Some(e) = self.slot_entry(index)
            && !e.app_owned
            && e.conn.state() == State::TimeWait
            && let Some(record) = e.conn.time_wait_record(epoch)
        {
            let key = FlowKey::new(e.conn.local(), e.conn.remote());
            self.reclaim(index);
            self.time_wait_insert(key, record);
            return;
        }
        self.arm_timer(index);
        let Some(e) = self.slot_entry(index) else { return };
        if e.conn.is_closed() {
            let key = FlowKey::new(e.conn.local(), e.conn.remote());
            let in_demux = std::mem::replace(&mut e.in_demux, false);
            let app_owned = e.app_owned;
            if in_demux {
                self.demux.remove(&key);
            }
            if !app_owned {
                self.reclaim(index);
            }
        }
    }

    /// Puts a record in the TIME-WAIT table, evicting the records that expire first beyond
    /// [`Config::max_time_wait`] (dropped without a segment, as Linux does when
    /// `tcp_max_tw_buckets` overflows).
    fn time_wait_insert(&mut self, key: FlowKey, record: TimeWait) {
        let at = record.expires(self.epoch);
        self.time_wait.insert(key, record);
        self.time_wait_queue(at, key);
        while self.time_wait.len() > self.config.max_time_wait {
            let Some((at, key)) = self.time_wait_order.pop_front() else { break };
            if self.time_wait_live(at, key) {
                self.time_wait.remove(&key);
                self.stats.time_wait_evicted += 1;
            }
        }
        self.time_wait_trim();
    }

    /// Whether the order entry `(at, key)` is its record's (not stale).
    fn time_wait_live(&self, at: Instant, key: FlowKey) -> bool {
        self.time_wait.get(&key).is_some_and(|r| r.expires(self.epoch) == at)
    }

    /// Queues the record of `key` expiring `at` in expiry order; drops the stale entries once
    /// they outnumber the records (a peer that keeps restarting 2·MSL cannot grow the queue).
    fn time_wait_queue(&mut self, at: Instant, key: FlowKey) {
        let i = self.time_wait_order.partition_point(|&(t, _)| t <= at);
        self.time_wait_order.insert(i, (at, key));
        if self.time_wait_order.len() > 2 * self.time_wait.len() + 1024 {
            let (epoch, table) = (self.epoch, &self.time_wait);
            self.time_wait_order.retain(|&(t, k)| table.get(&k).is_some_and(|r| r.expires(epoch) == t));
        }
    }

    /// Drops stale entries at the front of the expiry order, so that its front is the next
    /// expiry.
    fn time_wait_trim(&mut self) {
        while let Some(&(at, key)) = self.time_wait_order.front() {
            if self.time_wait_live(at, key) {
                break;
            }
            self.time_wait_order.pop_front();
        }
    }

    fn reclaim(&mut self, index: u32) {
        let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) else { return };
        let Some(e) = slot.entry.take() else { return };
        slot.generation = slot.generation.wrapping_add(1);
        if e.in_demux {
            self.demux.remove(&FlowKey::new(e.conn.local(), e.conn.remote()));
        }
        if e.phase == Phase::SynQueue
            && let Some(l) = e.listener.and_then(|l| self.listener_mut(l))
        {
            l.syn_queue = l.syn_queue.saturating_sub(1);
        }
        if e.ready {
            self.ready.retain(|&i| i != index);
        }
        self.free.push(index);
        self.live -= 1;
        self.stats.connections_reclaimed += 1;
    }

    /// Receives a burst from `device`, processes each frame, runs the timers, transmits what is
    /// ready, in as many bursts as it takes. Frames the device refuses are dropped (TCP
    /// retransmits them).
    ///
    /// # Errors
    /// The device's errors.
    pub fn poll<D: NetDevice + ?Sized>(
        &mut self,
        now: Instant,
        device: &mut D,
        cache: &PoolCache,
    ) -> Result<PollStats, DevError> {
        self.poll_with(now, device, cache, |_, _| 0)
    }

    /// [`poll`](Self::poll) with in-place delivery ([`receive_with`](Self::receive_with)):
    /// `deliver` reads TCP payload where it lies in the received pool buffers, before they go
    /// back to the pool, and returns how much it consumed. It runs inside the poll, so it cannot
    /// call the stack; what it does not consume is read later with [`recv`](Self::recv).
    ///
    /// ```
    /// # use std::net::{Ipv4Addr, SocketAddrV4};
    /// # use std::time::{Duration, Instant};
    /// # use netchannel::dev::{NetDevice, Pair};
    /// # use netchannel::pool::{HugePages, Pool};
    /// # use tcp_lib::stack::{Config, Stack};
    /// # use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
    /// # let pool = Pool::builder(1024).hugepages(HugePages::Never).build()?;
    /// # let (mut dev_a, mut dev_b) = Pair::builder(&pool).build()?;
    /// # let cache = pool.cache();
    /// # let mut now = Instant::now();
    /// # let config = |dev: &Pair, host: u8| {
    /// #     let mac = EthernetAddress(dev.info().mac.0);
    /// #     Config::new(mac, Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, host), 24).expect("a /24"))
    /// # };
    /// # let mut a = Stack::new(config(&dev_a, 1), now);
    /// # let mut b = Stack::new(config(&dev_b, 2), now);
    /// let listener = b.listen(80)?;
    /// let client = a.connect(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80))?;
    /// let mut server = None;
    /// while server.is_none() {
    ///     a.poll(now, &mut dev_a, &cache)?;
    ///     b.poll(now, &mut dev_b, &cache)?;
    ///     server = b.accept(listener);
    ///     now += Duration::from_millis(1);
    /// }
    /// a.send(client, b"GET / HTTP/1.0\r\n\r\n")?;
    /// let mut lines = 0; // parsed where it lies in the pool buffer: never copied
    /// for _ in 0..10 {
    ///     a.poll(now, &mut dev_a, &cache)?;
    ///     b.poll_with(now, &mut dev_b, &cache, |_stream, payload| {
    ///         lines += payload.windows(2).filter(|w| w == b"\r\n").count();
    ///         payload.len()
    ///     })?;
    ///     now += Duration::from_millis(1);
    /// }
    /// assert_eq!(lines, 2);
    /// let (buffered, _) = b.queues(server.expect("accepted"))?;
    /// assert_eq!(buffered, 0, "nothing went through the receive buffer");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The device's errors.
    pub fn poll_with<D: NetDevice + ?Sized, F: FnMut(StreamId, &[u8]) -> usize>(
        &mut self,
        now: Instant,
        device: &mut D,
        cache: &PoolCache,
        mut deliver: F,
    ) -> Result<PollStats, DevError> {
        let mut stats = PollStats::default();
        let mut batch = PacketBatch::with_capacity(BURST);
        for _ in 0..MAX_RX_BURSTS {
            let n = device.rx_burst(0, cache, &mut batch)?;
            for packet in batch.drain() {
                self.receive_with(now, packet.data(), &mut deliver);
            }
            stats.received += n;
            if n < BURST {
                break;
            }
        }
        self.handle_timeout(now);
        loop {
            let n = self.transmit(now, cache, &mut batch);
            if n == 0 {
                break;
            }
            stats.transmitted += device.tx_burst(0, &mut batch)?;
            if !batch.is_empty() {
                stats.dropped += batch.len();
                self.stats.tx_dropped += u64::try_from(batch.len()).unwrap_or(u64::MAX);
                batch.clear();
                break;
            }
        }
        Ok(stats)
    }
}

enum Drained {
    All,
    Stopped,
}

/// Writes the IPv4 header and the TCP segment into `buf` (exactly `20 + seg.buffer_len()` bytes);
/// the TCP checksum as [`Config::tx_checksum`] says.
fn emit_ip_tcp(
    buf: &mut [u8],
    seg: &TcpRepr<'_>,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    ident: u16,
    config: &Config,
) {
    let ip = Ipv4Repr {
        src_addr: *src.ip(),
        dst_addr: *dst.ip(),
        protocol: Protocol::Tcp,
        payload_len: seg.buffer_len(),
        ttl: config.ttl,
        dscp: 0,
        ecn: 0,
        ident,
        dont_frag: true,
    };
    let mut packet = Ipv4Packet::new_unchecked(buf);
    ip.emit(&mut packet);
    let mut tcp = TcpPacket::new_unchecked(packet.payload_mut());
    if config.tx_checksum {
        seg.emit(&mut tcp, *src.ip(), *dst.ip());
    } else {
        seg.emit_unsummed(&mut tcp);
    }
}

/// [`emit_ip_tcp`] for a segment whose payload is prepared content: `seg` is the header (empty
/// payload), `slice` the payload, written straight from the prepared bytes; the checksum adds the
/// precomputed payload sum when there is one (returns whether), else sums the payload; none at
/// all without [`Config::tx_checksum`] (returns false).
fn emit_ip_tcp_prepared(
    buf: &mut [u8],
    seg: &TcpRepr<'_>,
    slice: &PreparedSlice,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    ident: u16,
    config: &Config,
) -> bool {
    let header_len = seg.buffer_len();
    let tcp_len = header_len + slice.len;
    let ip = Ipv4Repr {
        src_addr: *src.ip(),
        dst_addr: *dst.ip(),
        protocol: Protocol::Tcp,
        payload_len: tcp_len,
        ttl: config.ttl,
        dscp: 0,
        ecn: 0,
        ident,
        dont_frag: true,
    };
    let mut packet = Ipv4Packet::new_unchecked(buf);
    ip.emit(&mut packet);
    let tcp = packet.payload_mut();
    if !config.tx_checksum {
        seg.emit_unsummed(&mut TcpPacket::new_unchecked(&mut tcp[..header_len]));
        tcp[header_len..tcp_len].copy_from_slice(slice.bytes());
        return false;
    }
    seg.emit(&mut TcpPacket::new_unchecked(&mut tcp[..header_len]), *src.ip(), *dst.ip());
    tcp[header_len..tcp_len].copy_from_slice(slice.bytes());
    let precomputed = slice.sum();
    let payload_sum = precomputed.unwrap_or_else(|| checksum::data(slice.bytes()));
    let mut view = TcpPacket::new_unchecked(&mut tcp[..tcp_len]);
    view.set_checksum(0);
    let length = u32::try_from(tcp_len).unwrap_or(u32::MAX);
    let sum = checksum::combine(&[
        checksum::pseudo_header_v4(*src.ip(), *dst.ip(), 6, length),
        checksum::data(&tcp[..header_len]),
        payload_sum,
    ]);
    TcpPacket::new_unchecked(&mut tcp[..tcp_len]).set_checksum(checksum::finish(sum));
    precomputed.is_some()
}
