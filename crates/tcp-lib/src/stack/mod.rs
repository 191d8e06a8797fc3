//! The per-core [`Stack`]: one interface with IPv4 (ARP, ICMP echo, PMTU discovery, fragment
//! reassembly) and, when [`Config::ipv6`] says so, IPv6 (Neighbor Discovery, ICMPv6 echo, PMTU
//! from Packet Too Big, router advertisements, reassembly), static routes over both, TCP
//! connections, listeners and socket handles over the sans-IO [`Connection`] core, and UDP
//! sockets.
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
//! * **Output**: [`transmit`](Stack::transmit) builds frames (Ethernet + IPv4 or IPv6 + TCP, checksums
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
//! # IPv4 and IPv6
//!
//! A connection is of one family, its addresses [`SocketAddr`](std::net::SocketAddr)s of that
//! family; everything TCP does (SYN cookies, SACK, timestamps, ECN, migration, TIME-WAIT) works
//! the same over both, with the MSS and the path MTU's floor of the family (an IPv6 header is 20
//! bytes longer; RFC 8200's 1280-byte minimum MTU). A listener takes both families on its port
//! (a dual-stack listener). [`connect`](Stack::connect) takes an address of either family and
//! picks the source of the destination's scope (for IPv6, link-local toward a link-local peer,
//! else the global address; RFC 6724 §5). The IPv6 receive path, its addresses and Neighbor
//! Discovery are described in the `ipv6` module (`stack/ipv6.rs`); routing for both families
//! ([`add_route`](Stack::add_route), gateways, source selection) in `stack/route.rs`.
//!
//! Two dual-stack stacks on an in-memory pair: Neighbor Discovery resolves the peer, a TCP
//! connection and a UDP datagram go over IPv6, and the same listener would take IPv4 too.
//!
//! ```
//! use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
//! use std::time::{Duration, Instant};
//! use netchannel::dev::{NetDevice, Pair};
//! use netchannel::pool::{HugePages, Pool};
//! use tcp_lib::stack::{Config, Stack};
//! use tcp_lib::wire::{EthernetAddress, Ipv4Cidr, Ipv6Cidr};
//!
//! let pool = Pool::builder(1024).hugepages(HugePages::Never).build()?;
//! let (mut dev_a, mut dev_b) = Pair::builder(&pool).build()?;
//! let cache = pool.cache();
//! let mut now = Instant::now();
//! let v6 = |host: u16| Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, host);
//! let config = |dev: &Pair, host: u8| {
//!     let v4 = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, host), 24).expect("a /24");
//!     Config::new(EthernetAddress(dev.info().mac.0), v4)
//!         .with_ipv6(Ipv6Cidr::new(v6(u16::from(host)), 64).expect("a /64"))
//! };
//! let mut a = Stack::new(config(&dev_a, 1), now);
//! let mut b = Stack::new(config(&dev_b, 2), now);
//!
//! let listener = b.listen(80)?; // both families
//! let client = a.connect(SocketAddr::from((v6(2), 80)))?;
//! let echo = b.udp_bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 7)))?;
//! let udp = a.udp_bind(SocketAddr::from((v6(1), 0)))?;
//! a.udp_send_to(udp, b"ping", SocketAddr::from((v6(2), 7)))?;
//! let (mut server, mut datagram) = (None, None);
//! let mut buf = [0u8; 64];
//! for _ in 0..100 {
//!     a.poll(now, &mut dev_a, &cache)?;
//!     b.poll(now, &mut dev_b, &cache)?;
//!     server = server.or_else(|| b.accept(listener));
//!     if let Ok(r) = b.udp_recv_from(echo, &mut buf) {
//!         datagram = Some((buf[..r.len].to_vec(), r.from));
//!     }
//!     now += Duration::from_millis(1);
//! }
//! let server = server.expect("accepted over IPv6");
//! assert_eq!(b.addrs(server)?.1, a.addrs(client)?.0);
//! assert_eq!(datagram, Some((b"ping".to_vec(), a.udp_local_addr(udp)?)));
//! assert!(a.stats().ndp_solicits >= 1, "B's address was resolved by Neighbor Discovery");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Demultiplexing and timers
//!
//! Connections live in a slab (a `Vec` of slots with generation counters, so a stale
//! [`StreamId`] is detected; listeners live in another, behind [`ListenerId`]) and are found by a
//! `HashMap<(local, remote), slot>`: O(1) per segment whatever the number of connections. The
//! 4-tuple is packed into one 128-bit word and hashed with a keyed multiply-fold hash (the
//! registry's construction, two multiplies per lookup, keyed from the stack's secret so that a
//! peer cannot aim its ports at one bucket); std's SipHash cost ~7% of a bulk transfer's
//! instructions. IPv6 tuples (two addresses of 128 bits) live in a second map of their own, so
//! the IPv4 map's keys stay one word. Listeners are found by local port, neighbour entries by
//! address, with the same hash.
//! Connections that have something to send are queued on a ready list, so
//! [`transmit`](Stack::transmit) visits only them; connection timers sit in a binary heap with at
//! most one live entry per connection plus stale entries that are skipped (the heap is rebuilt
//! when stale entries outnumber live connections by more than 64, so that short connections'
//! leftovers are dropped in bulk rather than popped one by one).
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
//! and a compact record of 72 bytes takes its place in the *TIME-WAIT table*: a slot of 144 bytes
//! (the record and its 4-tuple), reused oldest-first, a map from the 4-tuple to the slot (32-byte
//! buckets) and an expiry-ordered queue (24 bytes an entry). The record keeps
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
//!   TIME-WAIT, the ARP cache and its pending packets, fragment reassembly, queued control frames,
//!   UDP receive queues ([`UdpConfig`]). ICMP errors are rate-limited ([`Config::icmp_errors`]).
//!   No frame makes the stack panic.
//! * Connection memory is bounded as a whole, not only per connection; see [Memory](#memory).
//!
//! # Memory
//!
//! What the stack holds, and for how long:
//!
//! * **Pool buffers: never past the call that was given them.** [`receive`](Stack::receive) and
//!   [`receive_with`](Stack::receive_with) read a received frame where it lies, and zero-copy
//!   delivery ([`poll_with`](Stack::poll_with)) lends the payload to the application *during* that
//!   call only; what it does not consume is copied into the connection's receive ring.
//!   [`transmit`](Stack::transmit) fills pool buffers and hands them to the caller's batch at once.
//!   So a stack holds no pool buffer between calls, however its peers or its application behave:
//!   the buffers in use are the ones in the device's rings and the channels in between, which are
//!   of fixed capacity (the runtime sizes its pool from them).
//! * **Heap, per connection:** the send and receive rings (up to [`tcp::Config::send_buffer`] and
//!   [`tcp::Config::recv_buffer`], or [`tcp::Config::recv_buffer_max`] with receive autotuning,
//!   grown on demand, freed in TIME-WAIT and CLOSED), the
//!   out-of-order ranges ([`tcp::Config::max_ooo_ranges`], whose bytes live in the receive ring)
//!   and the SACK scoreboard (bounded), about 1.1 KB of state; prepared content is the
//!   application's, shared by [`Arc`], at most 64 runs a connection.
//! * **Heap, per stack:** the tables above, bounded by their limits; packets waiting for ARP are
//!   copies (`Vec<u8>`), bounded by [`ArpConfig`]; fragments being reassembled are copies, bounded
//!   by [`Config::reassembly`]; queued control frames and UDP datagrams sent by
//!   [`Config::max_queued_frames`]; each UDP socket's received datagrams by its [`UdpConfig`]
//!   (payload bytes and datagrams; the sockets are the application's, one a port).
//!
//! The rings are the part that peers and applications control: a thousand connections whose
//! readers never read, each with a 64 KiB receive buffer, or peers that never acknowledge what
//! fills 64 KiB send buffers, would hold their whole buffers for as long as they last. So every
//! ring's growth is charged to one [`BufferBudget`] of [`Config::buffer_memory`] bytes (64 MiB
//! by default). Each ring may always hold [`BufferBudget::GUARANTEED`] bytes (4 KiB: a full
//! segment, so every connection still makes progress; Linux's `tcp_rmem[0]`); beyond that a ring
//! grows only within the budget. A ring the budget refuses is *clamped* to the storage it has and
//! works on as a smaller ring until it drains empty: a receive ring's window offers only what it
//! can take (under pressure, the ring is clamped before the window is advertised; the right edge
//! never moves left, so bytes a window advertised earlier promised are dropped and counted, as
//! Linux does under `tcp_mem` pressure, and the peer retransmits them), and
//! [`send`](Stack::send) takes what fits ([`Error::WouldBlock`] when nothing does). The bound:
//!
//! ```text
//! ring storage <= Config::buffer_memory + 2 x BufferBudget::GUARANTEED x connections
//! ```
//!
//! (`connections` at most [`Config::max_connections`]). [`StackStats::buffer_memory`] is the
//! storage held now; `rx_buffer_clamps`, `tx_buffer_clamps`, `rx_memory_dropped` and
//! `tx_memory_refused` count what the budget refused. A connection moved to another stack
//! ([`adopt`](Stack::adopt)) moves its charge to that stack's budget. The test
//! `tests/stack_starve.rs` holds 2,000 connections whose server never reads and 300 peers that
//! stop acknowledging against an 8 MiB budget while other clients are echoed byte-exact.
//!
//! # Prepared content (the Sandstorm send path)
//!
//! [`send_prepared`](Stack::send_prepared) queues a [`PreparedSegments`] (content cut ahead of
//! time into payload segments with precomputed sums) on a connection by reference. Its bytes are
//! never copied into the send ring nor into the stack's scratch buffer: a segment
//! whose payload lies in it is written into its frame's pool buffer straight from the prepared
//! bytes (one copy, the only one: a pool buffer is owned by one frame and handed to the device,
//! so a frame cannot point at shared content), and when the segment is one of the prepared cuts
//! its checksum is the pseudo-header and header sums plus the precomputed payload sum (no pass
//! over the payload). [`StackStats::tx_prepared`] and [`StackStats::tx_prepared_sums`] count
//! them. Bytes given to [`send`](Stack::send) are copied into the send ring, and from it
//! straight into the frame: the connection lends the stack a segment's run of the ring
//! ([`Lent::Ring`](crate::tcp::Lent::Ring)) and the stack writes the headers and copies the
//! payload behind them (retransmissions read the ring again). Bytes the application writes into
//! the send ring itself with [`send_with`](Stack::send_with) skip the first copy, so they are
//! copied once. A segment of fewer than 512 bytes, or one whose bytes wrap around the ring's end
//! (one per lap), goes through the stack's scratch buffer instead, summed on the way into the
//! frame: for a short one that costs less than summing its header and payload apart.
//!
//! # Application data by reference from pool buffers
//!
//! [`send_pooled`](Stack::send_pooled) takes a pool buffer the application filled with one
//! segment's payload and shared ([`SharedPacket`](netchannel::pool::SharedPacket)) and queues it
//! on a connection by reference: no copy at all on the send side
//! ([`send_pooled_with`](Stack::send_pooled_with) takes as many as the send buffer has room for,
//! filled by a closure, in one call). The connection holds the buffer
//! until its bytes are acknowledged (it is their retransmit queue), cuts a segment at each buffer's
//! end, and a segment that is all of a buffer goes to the device as a frame of that buffer with
//! only the headers written into its headroom (the machinery prepared content uses:
//! [`SharedPacket::frame`](netchannel::pool::SharedPacket::frame), one frame in flight per buffer).
//! A segment that is only part of a buffer (a buffer larger than the MSS, a window that cuts it, a
//! partial ACK) is copied ([`StackStats::tx_pool_split`]), and so is a retransmission whose first
//! frame the device still holds ([`StackStats::tx_pool_busy`]); the rest are counted in
//! [`StackStats::tx_pool_by_reference`]. The buffer returns to the pool when the last reference
//! goes: acknowledged and the device done with its frame. The tests are in
//! `tests/stack_send_pooled.rs` (loss, reordering, duplication, IPv6, partial checksums, a
//! retransmission while the first frame is in flight, leaks) and `tests/stack_tso.rs` (a buffer of
//! several segments by reference as one super-segment).
//!
//! # Offloads: partial checksums and TCP super-segments (TSO)
//!
//! Each pool buffer carries [`Offload`](netchannel::pool::Offload) metadata (the fields of the
//! virtio-net header, which Linux's TAP speaks). On send, [`Config::tx_partial_checksum`] leaves
//! the TCP checksum of the segments written into pool buffers to the device (the field holds the
//! pseudo-header sum), and [`Config::tso_max_size`] lets a connection hand the device one
//! super-segment of up to 64 KiB, a whole number of MSS-sized segments that the device cuts as
//! Linux's TSO/GSO does (`tcp_gso_segment`; [`wire::gso::segment`](crate::wire::gso::segment)
//! does it in software), so a bulk sender pays one frame, one header and one device write per
//! 45 segments. The connection accounts for each cut segment as sent on its own: RACK
//! (RFC 8985) logs each, SACK (RFC 2018, RFC 6675) and PRR (RFC 6937) count bytes, and
//! retransmissions stay one segment long, so a lost cut costs one segment again, not 64 KiB.
//! Every cut repeats the header, timestamps option (RFC 7323) included; PSH and FIN go on the
//! last, CWR (RFC 3168) on the first; the short last segment goes along only where the data ends
//! and Nagle would send it. [`StackStats::tx_super_segments`] counts them. Both are off by
//! default: with them off the transmit path is the one without offloads.
//!
//! Without TSO, the stack cuts the super-segments itself ([`Config::gso_max_size`], 64 KiB by
//! default, as Linux's GSO is on for every device): the connection decides once for up to 64 KiB
//! and each frame gets the headers of the one before with its sequence number and IP
//! identification written ([`StackStats::tx_gso_super_segments`]). The wire carries what it
//! would without it.
//!
//! On receive, [`poll`](Stack::poll) passes each buffer's metadata to
//! [`receive_offload`](Stack::receive_offload): a frame whose checksum the device verified, or
//! that carries a partial checksum from a sender on the same machine, is not checked again
//! ([`StackStats::rx_checksum_trusted`]), and segments the device coalesced (GRO, up to 65535
//! bytes of IP packet) are taken whole where the window holds them and offered whole to in-place
//! delivery. `tests/stack_tso.rs` runs both on a [`Pair`](netchannel::dev::Pair) of 64 KiB
//! buffers: cut in software (the receiver verifying every checksum), with one cut lost, and
//! whole.
//!
//! # UDP
//!
//! [`udp_bind`](Stack::udp_bind) takes a local port (0: an ephemeral one, picked as
//! [`connect`](Stack::connect) picks, through the port filter) and gives a [`UdpId`], a
//! generation-checked handle like [`StreamId`]; an unspecified address takes datagrams to any of
//! the stack's addresses, and one socket holds a port. [`udp_send_to`](Stack::udp_send_to) sends
//! one datagram (checksum filled) through the same routing and ARP queue as TCP; a datagram the
//! MTU cannot carry whole is refused with [`Error::MessageTooLong`] naming the limit
//! ([`udp_max_payload`](Stack::udp_max_payload), 1472 bytes on a 1500-byte MTU): the stack does
//! not fragment what it sends. [`udp_connect`](Stack::udp_connect) sets the destination of
//! [`udp_send`](Stack::udp_send) and, as in Linux, filters what the socket receives to datagrams
//! from that peer. [`udp_recv_from`](Stack::udp_recv_from) takes the oldest datagram; one longer
//! than the buffer is cut to it and [`UdpRecv::truncated`] says so (`MSG_TRUNC`).
//!
//! A received datagram is checked (length; checksum per [`Config::checksum`], a zero checksum
//! over IPv4 meaning "none", RFC 768), dropped and counted when its source is no single host's
//! (RFC 1122 §3.2.1.3), and then, while its socket's queue is empty, offered in place to
//! [`Deliver::udp`] ([`receive_deliver`](Stack::receive_deliver),
//! [`poll_deliver`](Stack::poll_deliver)): what the application consumes there is never
//! copied. Otherwise it is copied into the socket's queue, bounded in datagrams and bytes by
//! [`UdpConfig`] ([`Config::udp`], or per socket with [`udp_bind_with`](Stack::udp_bind_with));
//! past either bound it is dropped and counted in [`StackStats::udp_queue_drops`]. A datagram
//! for a port with no socket draws an ICMP port unreachable (RFC 1122 §4.1.3.1) quoting its IP
//! header and first 8 bytes (RFC 792), so that a connected kernel socket sees `ECONNREFUSED`;
//! ICMP errors are rate-limited by a token bucket ([`Config::icmp_errors`], Linux's 1,000 a
//! second in bursts of 50; RFC 1812 §4.3.2.8), what the bucket refuses is counted in
//! [`StackStats::icmp_rate_limited`], and none is sent for a datagram to a broadcast or
//! multicast address or from an invalid source. Over IPv6 the same holds, with ICMPv6's port
//! unreachable (RFC 4443 §3.1) and 20 bytes less payload per datagram
//! ([`udp_max_payload_v6`](Stack::udp_max_payload_v6)); a socket bound to the unspecified
//! address serves both families, one bound to one of our addresses its own.
//!
//! # Wakers
//!
//! For async tasks over the stack: [`register_waker`](Stack::register_waker) leaves a
//! [`Waker`](std::task::Waker) on one side ([`Interest`]) of a stream after
//! [`recv`](Stack::recv) or [`send`](Stack::send) said [`Error::WouldBlock`], and
//! [`register_accept_waker`](Stack::register_accept_waker) one on a listener after
//! [`accept`](Stack::accept) found nothing. Each is woken once, synchronously from inside
//! [`receive`](Stack::receive), [`poll`](Stack::poll) or
//! [`handle_timeout`](Stack::handle_timeout) (a waker only schedules its task; it must not call
//! the stack), when its side may have become ready: after every segment or timer event on the
//! connection (data, FIN, an ACK that frees send room, RST, the handshake completing, a timeout
//! giving up) the side that is ready is woken, as is a listener's waker when its accept queue
//! gains a connection. A side that is ready when registered is woken at once. Releasing a stream
//! ([`close`](Stack::close), [`abort`](Stack::abort), a listener's
//! [`unlisten`](Stack::unlisten)) or detaching it wakes every waker it has, so no task waits on
//! a handle that went. Spurious wakes can happen; a lost one is a bug. The storage is out of
//! line, boxed on a connection the first time a waker is registered on it: a connection nobody
//! registered on costs one pointer test per event.
//!
//! # Migration
//!
//! A connection can move between stacks with the same local address (another core's stack, when
//! a stolen connection follows its stealer): [`detach`](Stack::detach) takes it out whole (state,
//! buffers, timers, the next hop's hardware address) as a [`Detached`] value that can cross
//! threads, and [`adopt`](Stack::adopt) takes it in and gives it a new handle.
//!
//! # Not yet
//!
//! IPv4 options and IPv6 extension headers are not emitted; of the ICMP errors only port
//! unreachable is generated (ICMP and ICMPv6; not protocol unreachable). UDP broadcast and
//! multicast are neither sent nor received. Of the ICMP errors received, only
//! fragmentation-needed and Packet Too Big are acted on (PMTU discovery, RFC 1191, RFC 8201);
//! other destination-unreachable and time-exceeded messages (soft errors) are counted and ignored.
//! IPv6 has no duplicate address detection, MLD reports or neighbour reachability states yet (see
//! `stack/ipv6.rs`).
//! SYN-cookie connections lose window scaling, SACK and timestamps (see above).
//! A sender with TSO does not wait to fill a super-segment (Linux's `tcp_tso_should_defer`): it
//! sends what the windows allow when it is polled; UDP datagrams are not segmented by the device
//! (no UDP GSO).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use netchannel::dev::BatchStorage;
#[cfg(doc)]
use netchannel::dev::{NetDevice, PacketBatch};
#[cfg(doc)]
use netchannel::pool::PoolCache;
use netchannel::signature::FlowGroup;

#[cfg(doc)]
use crate::tcp;
use crate::tcp::{BufferBudget, Connection, Spare};
use crate::wire::{ArpOperation, EthernetAddress, FragmentReassembler};

// Where things live (each file's own doc says more).
mod config; // Config, Ipv6Config, ListenerConfig, Error
mod connections; // the connection table: lookup, insert, ready list, reclaim
mod emit; // a connection's segment into its frame: IP header of its family, TCP, checksum
mod events; // take_events: the streams that had an event since the application last asked
mod family; // TcpFamily: what TCP does differently per IP family (header, pseudo-header, parse)
mod flows; // FlowKey and FlowMap: the tables keyed by 4-tuple, one map per family
mod gso; // software GSO: a connection's super-segment cut into wire segments before the device
mod hash; // keyed hashes: ISNs, SYN cookies, ephemeral ports, the tables' hash
mod ipv4; // receive below TCP: Ethernet, ARP, IPv4, ICMP (echo, PMTU); ping
mod ipv6; // receive below TCP for IPv6: NDP, ICMPv6 (echo, Packet Too Big), router adverts
mod listener; // listen/accept, the SYN queue, SYN cookies, the backlog, AcceptHook
mod migrate; // detach/adopt between stacks, Detached, AdoptError
mod neighbor; // the neighbour caches (ARP, NDP) and their queues of packets waiting for an address
mod output; // transmit, control frames, send_ip and neighbour queueing, header emission
mod poll; // poll/poll_with against a NetDevice
mod route; // routes (on-link, static, default), source addresses, next hops of both families
mod rx_cache; // the receive loop's memory of the frame before: a flow's next segment unparsed
mod slab; // the generation-checked Slab behind StreamId and ListenerId
mod stats; // StackStats, PollStats
mod streams; // connect, send, recv, close, ... on a StreamId
mod tcp_input; // a received TCP segment to its connection, TIME-WAIT record or listener
mod time_wait; // the TIME-WAIT table: compact records in reused slots, a slot index, expiry order
mod timers; // poll_timeout, handle_timeout, the timer heap
mod udp; // UDP sockets, their receive path, ICMP port unreachable, Deliver
mod wakers; // Interest, the wakers async tasks register on streams and listeners

/// Prepared content lives in [`crate::tcp`] (the connection reads it); re-exported here,
/// next to [`Stack::send_prepared`].
pub use crate::tcp::{InPoolError, PreparedSegments, PreparedSlice};
pub use config::{Config, ConfigError, Error, Ipv6Config, ListenerConfig};
pub use ipv4::PingReply;
pub use listener::AcceptHook;
pub use migrate::{AdoptError, Detached};
pub use neighbor::ArpConfig;
pub use stats::{PollStats, StackStats, StatsNow};
pub use udp::{Deliver, IcmpRateLimit, UdpConfig, UdpId, UdpRecv};
pub use wakers::Interest;

use flows::FlowMap;
use hash::{Key, PortAllocator, TableHash};
use ipv6::Ipv6State;
use listener::Listener;
use neighbor::NeighborCache;
use route::Route;
use slab::Slab;

/// Ethernet header length (no VLAN tag: the stack emits untagged frames).
const ETH_LEN: usize = 14;
/// IPv4 header length emitted.
const IP_LEN: usize = 20;
/// IPv6 header length emitted (no extension headers).
const IP6_LEN: usize = 40;
/// The longest headers of a TCP frame of the stack's: Ethernet, IPv6's fixed header, TCP with
/// 40 bytes of options.
const MAX_HEADERS: usize = ETH_LEN + IP6_LEN + 60;

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
    /// Wakers registered on the stream (`None` until one is: see `wakers.rs`).
    wakers: Option<Box<wakers::StreamWakers>>,
}

/// A per-core IPv4/IPv6 TCP endpoint on one interface. See the [module documentation](self).
pub struct Stack {
    config: Config,
    /// [`Config::tcp`] as the connections it opens share it.
    tcp: connections::SharedTcp,
    epoch: Instant,
    now: Instant,
    key: Key,
    ports: PortAllocator,
    arp: NeighborCache<Ipv4Addr>,
    reassembler: FragmentReassembler,
    /// IPv6's addresses, neighbour cache and reassembly (`None` while IPv6 is off).
    v6: Option<Box<Ipv6State>>,
    /// Static routes ([`add_route`](Stack::add_route)), both families.
    routes: Vec<Route>,
    /// The connection table.
    slots: Slab<Entry>,
    /// The connection slots that had an event since [`take_events`](Stack::take_events) last ran.
    events: events::EventSet,
    /// The demultiplexing map: the 4-tuple to slot index.
    demux: FlowMap<u32>,
    /// The listener table.
    listeners: Slab<Listener>,
    listener_ports: HashMap<u16, u32, TableHash>,
    ready: VecDeque<u32>,
    timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    /// The TIME-WAIT table: released connections in TIME-WAIT, as compact records.
    time_wait: time_wait::TimeWaitTable,
    frames: VecDeque<Vec<u8>>,
    scratch: Vec<u8>,
    /// The allocation of [`poll`](Self::poll)'s packet batch, kept between polls.
    batch: BatchStorage,
    /// Reclaimed connections' ring storage for new ones (at most `connections::MAX_SPARES`).
    spares: Vec<Spare>,
    port_filter: Option<Box<dyn Fn(FlowGroup) -> bool>>,
    accept_hook: Option<Box<dyn AcceptHook>>,
    ping_replies: VecDeque<PingReply>,
    /// The UDP sockets.
    udp: udp::UdpTable,
    ident: u16,
    /// The frame being received arrived with a checksum trusted (`Offload::checksum_trusted`):
    /// its TCP or UDP checksum is not verified.
    rx_trusted: bool,
    /// Inside [`poll`](Self::poll)'s receive loop, which remembers a predicted segment's frame
    /// for the next ([`rx_cache`]): [`tcp_input`] keeps such a segment in `rx_memory`.
    rx_remember: bool,
    /// The receive loop's memory of the frame before ([`rx_cache`]).
    rx_memory: rx_cache::Memory,
    stats: StackStats,
    /// What the connections' rings hold together ([`Config::buffer_memory`]).
    budget: Arc<BufferBudget>,
}

impl fmt::Debug for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stack")
            .field("mac", &self.config.mac)
            .field("ip", &self.config.ip)
            .field("connections", &self.slots.len())
            .field("listeners", &self.listener_ports.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The largest MSS an MTU allows (IPv4 and TCP headers without options), at least 64.
fn mtu_mss(mtu: usize) -> u16 {
    u16::try_from(mtu.saturating_sub(IP_LEN + 20)).unwrap_or(u16::MAX).max(64)
}

impl Stack {
    /// The largest MSS this interface's MTU allows.
    pub(super) fn mtu_mss(&self) -> u16 {
        mtu_mss(self.config.mtu)
    }

    /// A stack for one interface, at time `now`. Queues a gratuitous ARP when configured.
    #[must_use]
    pub fn new(mut config: Config, now: Instant) -> Self {
        config.tcp.mss = config.tcp.mss.min(mtu_mss(config.mtu));
        let key = config.secret_seed.map_or_else(Key::random, Key::from_seed);
        let port_key = Key([key.0[0] ^ 0x706f_7274, key.0[1].rotate_left(17)]);
        let tables = TableHash::new(&key);
        let mut stack = Self {
            config,
            tcp: connections::SharedTcp::new(config.tcp, mtu_mss(config.mtu)),
            epoch: now,
            now,
            key,
            ports: PortAllocator::new(port_key, config.ephemeral_ports.0, config.ephemeral_ports.1),
            arp: NeighborCache::new(config.arp, tables),
            reassembler: FragmentReassembler::new(config.reassembly),
            v6: config.ipv6.map(|v6| Box::new(Ipv6State::new(&v6, &config, tables))),
            routes: Vec::new(),
            slots: Slab::new(),
            demux: FlowMap::new(tables),
            listeners: Slab::new(),
            listener_ports: HashMap::with_hasher(tables),
            ready: VecDeque::new(),
            timers: BinaryHeap::new(),
            time_wait: time_wait::TimeWaitTable::new(tables),
            frames: VecDeque::new(),
            scratch: vec![
                0;
                usize::from(config.tcp.mss)
                    .max(config.super_segment_limit())
                    .max(config.gso_limit())
            ],
            batch: BatchStorage::new(poll::BURST),
            spares: Vec::with_capacity(connections::MAX_SPARES),
            port_filter: None,
            accept_hook: None,
            ping_replies: VecDeque::new(),
            udp: udp::UdpTable::new(tables, config.icmp_errors),
            ident: 0,
            rx_trusted: false,
            rx_remember: false,
            rx_memory: rx_cache::Memory::default(),
            events: events::EventSet::default(),
            stats: StackStats::default(),
            budget: Arc::new(BufferBudget::new(config.buffer_memory)),
        };
        if config.gratuitous_arp && !stack.ip().is_unspecified() {
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

    /// Counters (`*stack.stats()` copies them out).
    #[must_use]
    pub fn stats(&self) -> StatsNow {
        let budget = self.budget.stats();
        StatsNow(StackStats {
            buffer_memory: budget.used as u64,
            buffer_memory_peak: budget.peak as u64,
            rx_buffer_clamps: budget.rx_clamps,
            tx_buffer_clamps: budget.tx_clamps,
            rx_memory_dropped: budget.rx_dropped,
            tx_memory_refused: budget.tx_refused,
            ..self.stats
        })
    }

    /// Connections held (any state, TIME-WAIT included: the application's and the TIME-WAIT
    /// table's).
    #[must_use]
    pub fn connection_count(&self) -> usize {
        self.slots.len() + self.time_wait.len()
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

    /// The hardware address cached for `ip` (by ARP for IPv4, by Neighbor Discovery for
    /// IPv6), if any.
    pub fn arp_lookup(&mut self, ip: impl Into<IpAddr>) -> Option<EthernetAddress> {
        self.neighbor_lookup(ip.into())
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

    fn advance(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
    }
}
