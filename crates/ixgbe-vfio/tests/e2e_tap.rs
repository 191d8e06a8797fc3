//! End to end through every layer, both ways: the kernel, in a private network namespace, talks
//! through a TAP that is the wire of the 82599 model; the driver runs the model; one channelizer per
//! driver queue sorts what arrives into the consumers' channels by transport signature; the consumers
//! answer through their TX channels, back through the channelizer, the driver's TX ring, the model
//! and the TAP to the kernel's sockets.
//!
//! * ARP: the kernel asks for our address (10.77.0.2). The request reaches the default channel (the
//!   slow path), which answers it with a hand-built reply from the driver's MAC: the kernel learns
//!   its neighbour the real way, no static `ip neigh` entry.
//! * UDP echo: datagrams from a kernel socket to 10.77.0.2:7 reach consumer 0 with their exact
//!   signature; consumer 0 turns each frame around in place (MACs, addresses, ports, checksums) and
//!   sends it back; the kernel socket receives every payload exactly once.
//! * TCP: two non-blocking connects to 10.77.0.2:80 (consumer 1's listener), from ports whose flow
//!   groups Flow Director steers to different queues: each SYN reaches consumer 1 on the queue the
//!   driver's steering table names, with the signature and flow group of the kernel's port. Nobody
//!   answers them (there is no TCP stack here).
//! * A datagram to 10.77.0.2:9, which nobody registered, lands in the default channel.
//! * At the end the channelizers', queues', NIC's and model's counters agree with what the consumers
//!   saw, and no buffer of either pool leaked.
//!
//! The model is serviced in the test's own loop, so nothing moves between the test's steps; when
//! nothing moved, the loop waits in poll(2) on the TAP and the kernel's socket. Every wait has a
//! deadline. Only addresses inside the test's own namespace (10.77.0.0/24) are used. Without root,
//! `/dev/net/tun` or iproute2 it prints `skipped: <why>` (`netns_test::skip`).
//! The test command counts that as a skip (under `CI=true` a failure unless allowed); an error once
//! those preconditions hold fails the test.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ixgbe_vfio::driver::{Config, Ixgbe, IxgbeQueue};
use ixgbe_vfio::sim::{Model, SimConfig, Wire};
use netchannel::channelizer::{Channelizer, ChannelizerStats, ConsumerId, SignatureRegistry};
use netchannel::classify::{Classified, classify};
use netchannel::dev::{Link, MacAddr, NetDevice, Tap};
use netchannel::pool::{HugePages, PacketRx, PacketTx, Pool, PoolCache};
use netchannel::rcu::Qsbr;
use netchannel::signature::{FlowGroup, Proto, Signature};
use netchannel::steering::FlowSteering;

use netns_test::ip;

const IFACE: &str = "ixe2e0";
const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// The model's EEPROM MAC (not the model's default, so that the driver visibly reads it).
const NIC_MAC: MacAddr = MacAddr([0x02, 0x77, 0, 0, 0, 0x02]);
const ECHO_PORT: u16 = 7;
const DISCARD_PORT: u16 = 9;
const TCP_PORT: u16 = 80;
const QUEUES: u16 = 2;
/// Listens on UDP 10.77.0.2:7 and echoes.
const ECHO_CONSUMER: ConsumerId = ConsumerId(0);
/// Listens on TCP 10.77.0.2:80 and records the SYNs.
const TCP_CONSUMER: ConsumerId = ConsumerId(1);
const DATAGRAMS: usize = 6;
/// The queue whose channelizer carries the slow path's TX channel (ARP replies).
const SLOW_TX_QUEUE: usize = 0;
/// The queue whose channelizer carries the echo consumer's TX channel.
const ECHO_TX_QUEUE: usize = 1;

const ETH: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_ARP: u16 = 0x0806;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

// --- Frames -------------------------------------------------------------------------------------

fn be16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_be_bytes([s[0], s[1]]))
}

fn ipv4_at(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

/// The Internet checksum of the concatenation of `parts` (only the last part may have an odd length).
fn internet_checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = parts
        .iter()
        .flat_map(|p| p.chunks(2))
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !u16::try_from(sum).expect("folded to 16 bits")
}

/// An ARP request as the kernel sends it: who has `target_ip`, tell `sender_ip` at `sender_mac`.
#[derive(Clone, Copy, Debug)]
struct ArpRequest {
    sender_mac: MacAddr,
    sender_ip: Ipv4Addr,
    target_ip: Ipv4Addr,
}

/// The ARP request (Ethernet, IPv4, opcode 1) in `frame`, if it is one.
fn parse_arp_request(frame: &[u8]) -> Option<ArpRequest> {
    let arp = frame.get(ETH..ETH + 28)?;
    if be16(frame, 12)? != ETHERTYPE_ARP || arp[..8] != [0, 1, 8, 0, 6, 4, 0, 1] {
        return None;
    }
    Some(ArpRequest {
        sender_mac: MacAddr(arp[8..14].try_into().ok()?),
        sender_ip: ipv4_at(&arp[14..18]),
        target_ip: ipv4_at(&arp[24..28]),
    })
}

/// The ARP reply to `req`: `OUR_IP` is at `our_mac` (42 bytes; the NIC pads it to 60).
fn arp_reply(our_mac: MacAddr, req: &ArpRequest) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH + 28);
    f.extend_from_slice(&req.sender_mac.0);
    f.extend_from_slice(&our_mac.0);
    f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]); // Ethernet, IPv4, 6, 4, reply
    f.extend_from_slice(&our_mac.0);
    f.extend_from_slice(&OUR_IP.octets());
    f.extend_from_slice(&req.sender_mac.0);
    f.extend_from_slice(&req.sender_ip.octets());
    f
}

/// The IPv4 header length and total length of an IPv4 frame, checked against the frame's length
/// (which may be longer: Ethernet padding).
fn ipv4_lengths(frame: &[u8]) -> Option<(usize, usize)> {
    if be16(frame, 12)? != ETHERTYPE_IPV4 {
        return None;
    }
    let version_ihl = *frame.get(ETH)?;
    let ihl = usize::from(version_ihl & 0x0F) * 4;
    let total = usize::from(be16(frame, ETH + 2)?);
    (version_ihl >> 4 == 4 && ihl >= 20 && total >= ihl + 8 && frame.len() >= ETH + total)
        .then_some((ihl, total))
}

/// The payload of the UDP/IPv4 datagram in `frame`.
fn udp_payload(frame: &[u8]) -> Option<&[u8]> {
    let (ihl, total) = ipv4_lengths(frame)?;
    if frame[ETH + 9] != Proto::Udp.number() {
        return None;
    }
    let udp = &frame[ETH + ihl..ETH + total];
    udp.get(8..usize::from(be16(udp, 4)?))
}

/// The flags of the TCP/IPv4 segment in `frame`.
fn tcp_flags(frame: &[u8]) -> Option<u8> {
    let (ihl, _) = ipv4_lengths(frame)?;
    if frame[ETH + 9] != Proto::Tcp.number() {
        return None;
    }
    frame.get(ETH + ihl + 13).copied()
}

/// Turns the UDP/IPv4 frame in `frame` around in place: swaps the MACs, the addresses and the ports,
/// sets a fresh TTL and recomputes the IPv4 and UDP checksums. Returns the reply's length: the frame
/// without any Ethernet padding it arrived with.
fn turn_around(frame: &mut [u8]) -> Result<usize, String> {
    let (ihl, total) = ipv4_lengths(frame).ok_or("not an IPv4 frame")?;
    if frame[ETH + 9] != Proto::Udp.number() {
        return Err("not UDP".into());
    }
    let (dst, src) = frame[..12].split_at_mut(6);
    dst.swap_with_slice(src);
    let (src, dst) = frame[ETH + 12..ETH + 20].split_at_mut(4);
    src.swap_with_slice(dst);
    frame[ETH + 8] = 64;
    frame[ETH + 10..ETH + 12].fill(0);
    let ip_sum = internet_checksum(&[&frame[ETH..ETH + ihl]]);
    frame[ETH + 10..ETH + 12].copy_from_slice(&ip_sum.to_be_bytes());

    let u = ETH + ihl;
    let (src, dst) = frame[u..u + 4].split_at_mut(2);
    src.swap_with_slice(dst);
    let udp_len = usize::from(be16(frame, u + 4).ok_or("no UDP header")?);
    if udp_len < 8 || udp_len > total - ihl {
        return Err(format!("UDP length {udp_len} does not fit the IPv4 packet of {total} bytes"));
    }
    frame[u + 6..u + 8].fill(0);
    let mut pseudo = [0u8; 12];
    pseudo[..8].copy_from_slice(&frame[ETH + 12..ETH + 20]);
    pseudo[9] = Proto::Udp.number();
    pseudo[10..].copy_from_slice(&frame[u + 4..u + 6]);
    let udp_sum = match internet_checksum(&[&pseudo, &frame[u..u + udp_len]]) {
        0 => 0xFFFF, // 0 means "no checksum" in UDP over IPv4
        sum => sum,
    };
    frame[u + 6..u + 8].copy_from_slice(&udp_sum.to_be_bytes());
    Ok(ETH + total)
}

// --- The kernel's side --------------------------------------------------------------------------

fn sockaddr_in(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::sa_family_t::try_from(libc::AF_INET).expect("AF_INET fits sa_family_t"),
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(addr.ip().octets()) },
        sin_zero: [0; 8],
    }
}

/// A kernel TCP socket bound to `local` (port 0: the kernel picks one) whose non-blocking connect
/// to `remote` is in progress, so that its SYN is on its way; and its local port. Closing it (drop)
/// abandons the connect without a packet.
fn start_tcp_connect(local: SocketAddrV4, remote: SocketAddrV4) -> Result<(OwnedFd, u16), String> {
    let len = libc::socklen_t::try_from(size_of::<libc::sockaddr_in>()).expect("a small struct");
    // SAFETY: plain socket creation; the result is checked.
    let raw = unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0)
    };
    if raw < 0 {
        return Err(format!("socket(AF_INET, SOCK_STREAM): {}", io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a descriptor that `socket` just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let at = sockaddr_in(local);
    // SAFETY: `at` is a valid `sockaddr_in` of `len` bytes that `bind` only reads during the call.
    if unsafe { libc::bind(fd.as_raw_fd(), (&raw const at).cast(), len) } != 0 {
        return Err(format!("bind({local}): {}", io::Error::last_os_error()));
    }
    let to = sockaddr_in(remote);
    // SAFETY: as for `bind`.
    if unsafe { libc::connect(fd.as_raw_fd(), (&raw const to).cast(), len) } == 0 {
        return Err(format!("connect({remote}) completed at once: nobody should answer it"));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EINPROGRESS) {
        return Err(format!("connect({remote}): {e}"));
    }
    let mut bound = sockaddr_in(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
    let mut bound_len = len;
    // SAFETY: `getsockname` writes at most `bound_len` bytes into `bound`, a `sockaddr_in` we own, and
    // the length into `bound_len`.
    if unsafe { libc::getsockname(fd.as_raw_fd(), (&raw mut bound).cast(), &raw mut bound_len) } != 0 {
        return Err(format!("getsockname: {}", io::Error::last_os_error()));
    }
    Ok((fd, u16::from_be(bound.sin_port)))
}

/// Waits until one of `fds` is readable or `timeout` passes.
fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> Result<(), String> {
    let mut pfds: Vec<libc::pollfd> =
        fds.iter().map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    let n = libc::nfds_t::try_from(pfds.len()).expect("a few descriptors");
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `pfds` is an array of `n` valid `pollfd`s that we own for the duration of the call.
    if unsafe { libc::poll(pfds.as_mut_ptr(), n, ms) } < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(format!("poll: {e}"));
        }
    }
    Ok(())
}

// --- Our side -----------------------------------------------------------------------------------

/// A datagram's payload; its `Debug` is short (the length and the start as text).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Payload(Vec<u8>);

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let start = String::from_utf8_lossy(&self.0[..self.0.len().min(12)]);
        write!(f, "{} bytes {start:?}..", self.0.len())
    }
}

/// The consumers' ends of the channels: per queue, the default channel and one channel per
/// consumer; and the TX channels the channelizers drain.
struct Ends {
    default_rx: Vec<PacketRx>,
    echo_rx: Vec<PacketRx>,
    tcp_rx: Vec<PacketRx>,
    /// The slow path's replies (ARP).
    slow_tx: PacketTx,
    /// The echo consumer's replies.
    echo_tx: PacketTx,
}

/// Everything the consumers and the kernel's socket saw.
#[derive(Debug, Default)]
struct Observed {
    /// The kernel's MAC, from its ARP requests.
    kernel_mac: Option<MacAddr>,
    /// The kernel's ARP requests for our address (on the default channel).
    arp_requests: usize,
    /// ARP replies the slow path sent.
    arp_replies: usize,
    /// UDP datagrams on the default channel: their signature and payload.
    default_udp: Vec<(Signature, Payload)>,
    /// The echo consumer's datagrams: the queue each arrived on, and its payload.
    echo_in: Vec<(u16, Payload)>,
    /// Replies the echo consumer sent.
    echoes_sent: usize,
    /// The TCP consumer's SYNs: the queue, the signature and the flow group.
    syns: Vec<(u16, Signature, FlowGroup)>,
    /// What the kernel's UDP socket received back.
    echoed: Vec<Payload>,
    /// Anything else, anywhere: each one fails the test.
    unexpected: Vec<String>,
}

/// The rig, driven one step at a time.
struct World<'c> {
    channelizers: Vec<Channelizer<'c, IxgbeQueue>>,
    model: Model,
    ends: Ends,
    /// The consumers' cache.
    cache: &'c PoolCache,
    our_mac: MacAddr,
    /// The kernel's UDP socket (non-blocking), and a duplicate of the TAP's descriptor to wait on.
    sock: UdpSocket,
    tap_fd: OwnedFd,
    seen: Observed,
}

impl World<'_> {
    /// One step: the device moves frames both ways, each channelizer polls its queue, the consumers
    /// empty their channels (answering what needs an answer), the kernel's socket is read. Returns
    /// whether anything moved.
    fn step(&mut self) -> Result<bool, String> {
        let Self { channelizers, model, ends, cache, our_mac, sock, seen, .. } = self;
        let cache: &PoolCache = cache;
        let mut moved = !model.service().is_idle();
        for ch in channelizers.iter_mut() {
            let polled = ch.poll().map_err(|e| format!("channelizer poll: {e}"))?;
            moved |= polled.rx + polled.tx > 0;
        }

        // The slow path: answer ARP for our address; record the rest.
        for (q, rx) in (0u16..).zip(&mut ends.default_rx) {
            while let Some(packet) = rx.pop(cache) {
                moved = true;
                let frame = packet.data();
                if let Some(req) = parse_arp_request(frame) {
                    let from_kernel = req.sender_ip == KERNEL_IP
                        && frame[..6] == MacAddr::BROADCAST.0
                        && frame[6..12] == req.sender_mac.0;
                    if from_kernel && req.target_ip == OUR_IP {
                        seen.arp_requests += 1;
                        seen.kernel_mac = Some(req.sender_mac);
                        let mut reply = cache.alloc().ok_or("the pool has no buffer for an ARP reply")?;
                        reply.extend_from_slice(&arp_reply(*our_mac, &req)).map_err(|e| e.to_string())?;
                        ends.slow_tx.push(reply).map_err(|_| "the slow path's TX channel is full")?;
                        seen.arp_replies += 1;
                        continue;
                    }
                }
                match classify(frame) {
                    Classified::Flow { sig, .. } if sig.proto() == Proto::Udp => {
                        let payload = udp_payload(frame).ok_or("a UDP flow without a UDP payload")?;
                        seen.default_udp.push((sig, Payload(payload.to_vec())));
                    }
                    other => seen.unexpected.push(format!(
                        "default channel, queue {q}: {other:?}, {:02x?}",
                        &frame[..frame.len().min(42)]
                    )),
                }
            }
        }

        // Consumer 0: checks each datagram's signature and echoes it, in place.
        let udp_peer = sock.local_addr().map_err(|e| e.to_string())?;
        let echo_sig = Signature::new(Proto::Udp, SocketAddr::from((OUR_IP, ECHO_PORT)), udp_peer)
            .map_err(|e| e.to_string())?;
        for (q, rx) in (0u16..).zip(&mut ends.echo_rx) {
            while let Some(mut packet) = rx.pop(cache) {
                moved = true;
                match classify(packet.data()) {
                    Classified::Flow { sig, .. } if sig == echo_sig => {}
                    other => {
                        seen.unexpected.push(format!("echo consumer, queue {q}: {other:?}"));
                        continue;
                    }
                }
                let payload = udp_payload(packet.data()).ok_or("a UDP flow without a UDP payload")?;
                seen.echo_in.push((q, Payload(payload.to_vec())));
                let len = turn_around(packet.data_mut())?;
                packet.truncate(len);
                ends.echo_tx.push(packet).map_err(|_| "the echo consumer's TX channel is full")?;
                seen.echoes_sent += 1;
            }
        }

        // Consumer 1: records the SYNs.
        for (q, rx) in (0u16..).zip(&mut ends.tcp_rx) {
            while let Some(packet) = rx.pop(cache) {
                moved = true;
                match (classify(packet.data()), tcp_flags(packet.data())) {
                    (Classified::Flow { sig, flow_group }, Some(flags))
                        if flags & (TCP_SYN | TCP_ACK) == TCP_SYN =>
                    {
                        seen.syns.push((q, sig, flow_group));
                    }
                    (other, flags) => {
                        seen.unexpected
                            .push(format!("TCP consumer, queue {q}: {other:?}, flags {flags:02x?}"));
                    }
                }
            }
        }

        // The kernel's socket: the echoes.
        let mut buf = [0u8; 2048];
        loop {
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    moved = true;
                    if from != SocketAddr::from((OUR_IP, ECHO_PORT)) {
                        seen.unexpected.push(format!("the kernel's socket got {n} bytes from {from}"));
                    }
                    seen.echoed.push(Payload(buf[..n].to_vec()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("the kernel's socket: {e}")),
            }
        }
        Ok(moved)
    }

    /// Steps until `done` holds, waiting on the TAP and the socket whenever nothing moved.
    fn run_until(
        &mut self,
        what: &str,
        within: Duration,
        done: impl Fn(&Observed) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + within;
        while !done(&self.seen) {
            if Instant::now() >= deadline {
                return Err(format!("timed out after {within:?} waiting for {what}; saw {:#?}", self.seen));
            }
            if !self.step()? {
                self.wait(Duration::from_millis(10))?;
            }
        }
        Ok(())
    }

    /// Steps until nothing has moved for three waits of 20 ms in a row: whatever was still on its
    /// way (a duplicate, a retransmission) has been seen.
    fn settle(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let mut quiet = 0;
        while quiet < 3 {
            if Instant::now() >= deadline {
                return Err(format!("the rig did not go quiet within {within:?}; saw {:#?}", self.seen));
            }
            if self.step()? {
                quiet = 0;
            } else {
                quiet += 1;
                self.wait(Duration::from_millis(20))?;
            }
        }
        Ok(())
    }

    fn wait(&self, timeout: Duration) -> Result<(), String> {
        wait_readable(&[self.tap_fd.as_fd(), self.sock.as_fd()], timeout)
    }
}

fn sum(stats: &[ChannelizerStats], f: impl Fn(&ChannelizerStats) -> u64) -> u64 {
    stats.iter().map(f).sum()
}

fn run() -> Result<(), String> {
    // The kernel's side of the TAP: 10.77.0.1/24, up.
    let tap = Tap::open(IFACE).map_err(|e| format!("Tap::open({IFACE}): {e}"))?;
    ip(&["addr", "add", &format!("{KERNEL_IP}/24"), "dev", IFACE])?;
    ip(&["link", "set", IFACE, "up"])?;
    if !matches!(tap.link(), Link::Up { .. }) {
        return Err(format!("{IFACE} is not up after `ip link set up`: {:?}", tap.link()));
    }
    let tap_fd = tap.as_fd().try_clone_to_owned().map_err(|e| format!("dup of the TAP's descriptor: {e}"))?;

    // The model with the TAP as its wire, and the driver on it.
    let wire_pool =
        Pool::builder(1024).hugepages(HugePages::Never).build().map_err(|e| format!("wire pool: {e}"))?;
    let model = Model::new(SimConfig {
        mac: NIC_MAC,
        wire: Wire::Device(Box::new(tap), wire_pool.clone()),
        ..SimConfig::default()
    });
    let pool = Pool::builder(4096).hugepages(HugePages::Never).build().map_err(|e| format!("pool: {e}"))?;
    let config = Config {
        queues: QUEUES,
        rx_ring: 128,
        tx_ring: 128,
        link_timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let (mut nic, queues) = Ixgbe::init("e2e0", model.mmio(), model.dma(), &pool, config)
        .map_err(|e| format!("driver init: {e}"))?;
    let our_mac = nic.mac();
    assert_eq!(our_mac, NIC_MAC, "the driver reads the MAC from RAL/RAH(0)");
    assert!(matches!(nic.link(), Link::Up { .. }), "the link follows the TAP's: {:?}", nic.link());
    assert_eq!(queues.len(), usize::from(QUEUES));

    // A channelizer per queue, each with a default channel and a channel per consumer; the slow
    // path's TX channel on queue 0's, the echo consumer's on queue 1's.
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let queue_caches: Vec<PoolCache> = queues.iter().map(|_| pool.cache()).collect();
    let app_cache = pool.cache();
    let channel = |what: &str| pool.packet_channel(64).map_err(|e| format!("{what} channel: {e}"));
    let (mut default_rx, mut echo_rx, mut tcp_rx) = (Vec::new(), Vec::new(), Vec::new());
    let mut channelizers = Vec::new();
    for (queue, cache) in queues.into_iter().zip(&queue_caches) {
        let (default_tx, rx) = channel("default")?;
        default_rx.push(rx);
        let mut ch = Channelizer::builder(queue, cache, Arc::clone(&registry), default_tx)
            .build()
            .map_err(|e| format!("channelizer: {e}"))?;
        for (id, rxs) in [(ECHO_CONSUMER, &mut echo_rx), (TCP_CONSUMER, &mut tcp_rx)] {
            let (tx, rx) = channel("consumer")?;
            let previous = ch.attach(id, tx).map_err(|_| format!("attaching {id:?}: another pool"))?;
            assert!(previous.is_none(), "{id:?} attached once");
            rxs.push(rx);
        }
        channelizers.push(ch);
    }
    let (slow_tx, rx) = channel("slow-path TX")?;
    channelizers[SLOW_TX_QUEUE].add_tx(rx);
    let (echo_tx, rx) = channel("echo TX")?;
    channelizers[ECHO_TX_QUEUE].add_tx(rx);
    let echo_listener = Signature::listener(Proto::Udp, SocketAddr::from((OUR_IP, ECHO_PORT)));
    let tcp_listener = Signature::listener(Proto::Tcp, SocketAddr::from((OUR_IP, TCP_PORT)));
    let registrations = [
        registry.register(echo_listener, ECHO_CONSUMER).map_err(|_| "the echo listener is taken")?,
        registry.register(tcp_listener, TCP_CONSUMER).map_err(|_| "the TCP listener is taken")?,
    ];

    let sock = UdpSocket::bind(SocketAddrV4::new(KERNEL_IP, 0)).map_err(|e| format!("UDP bind: {e}"))?;
    sock.set_nonblocking(true).map_err(|e| e.to_string())?;
    let udp_peer = sock.local_addr().map_err(|e| e.to_string())?;
    let mut world = World {
        channelizers,
        model: model.clone(),
        ends: Ends { default_rx, echo_rx, tcp_rx, slow_tx, echo_tx },
        cache: &app_cache,
        our_mac,
        sock,
        tap_fd,
        seen: Observed::default(),
    };

    // The kernel sends: datagrams to the echo port (distinct payloads, from shorter than the
    // Ethernet minimum to most of the MTU), one to a port nobody registered, and two SYNs. All of
    // it waits in the kernel for ARP to resolve 10.77.0.2.
    let payloads: Vec<Payload> = (0..DATAGRAMS)
        .map(|i| {
            let mut p = format!("echo #{i}").into_bytes();
            p.extend((0..i * 271).map(|j| u8::try_from((i * 31 + j) % 251).expect("below 251")));
            Payload(p)
        })
        .collect();
    for p in &payloads {
        world.sock.send_to(&p.0, (OUR_IP, ECHO_PORT)).map_err(|e| format!("UDP send: {e}"))?;
    }
    let discard_payload = Payload(b"nobody listens on port 9".to_vec());
    world.sock.send_to(&discard_payload.0, (OUR_IP, DISCARD_PORT)).map_err(|e| format!("UDP send: {e}"))?;
    let tcp_remote = SocketAddrV4::new(OUR_IP, TCP_PORT);
    let (first, first_port) = start_tcp_connect(SocketAddrV4::new(KERNEL_IP, 0), tcp_remote)?;
    // The second SYN from a nearby port whose flow group the driver steers to the other queue.
    let first_queue = nic.queue_of(FlowGroup::of_port(first_port));
    let second_port = (1..64)
        .map(|d| first_port.wrapping_add(d))
        .find(|&p| p >= 1024 && nic.queue_of(FlowGroup::of_port(p)) != first_queue)
        .ok_or("no port near the kernel's whose flow group is on another queue")?;
    let (second, _) = start_tcp_connect(SocketAddrV4::new(KERNEL_IP, second_port), tcp_remote)?;
    let tcp_ports = [first_port, second_port];

    let started = Instant::now();
    world.run_until(
        "the ARP exchange, every echo, both SYNs and the unmatched datagram",
        Duration::from_secs(5),
        |s| {
            s.echoed.len() >= DATAGRAMS
                && tcp_ports.iter().all(|&p| s.syns.iter().any(|(_, sig, _)| sig.remote().port() == p))
                && !s.default_udp.is_empty()
        },
    )?;
    let round_trip = started.elapsed();
    // No more SYN retransmissions; then let whatever is still on its way arrive.
    drop((first, second));
    world.settle(Duration::from_secs(2))?;
    let seen = &world.seen;
    println!("everything arrived {round_trip:?} after the kernel sent it; {seen:?}");

    // Nothing anywhere that should not be there.
    assert!(seen.unexpected.is_empty(), "unexpected frames: {:#?}", seen.unexpected);

    // ARP: the kernel asked, the slow path answered every request, and the kernel believed it (the
    // datagrams and SYNs it held back came out).
    assert!(seen.arp_requests >= 1);
    assert_eq!(seen.arp_replies, seen.arp_requests);
    let kernel_mac = seen.kernel_mac.ok_or("no ARP request from the kernel")?;
    assert!(!kernel_mac.is_multicast() && kernel_mac != our_mac, "{kernel_mac}");

    // UDP echo: each datagram reached the echo consumer once, all on the one queue RSS picks for the
    // address pair (UDP hashes addresses only), and came back to the kernel's socket exactly once.
    let mut sent = payloads.clone();
    sent.sort();
    let mut consumed: Vec<Payload> = seen.echo_in.iter().map(|(_, p)| p.clone()).collect();
    consumed.sort();
    assert_eq!(consumed, sent, "the echo consumer got every datagram once, byte for byte");
    let udp_queue = seen.echo_in[0].0;
    assert!(seen.echo_in.iter().all(|&(q, _)| q == udp_queue), "one flow, one queue: {:?}", seen.echo_in);
    assert_eq!(seen.echoes_sent, DATAGRAMS);
    let mut echoed = seen.echoed.clone();
    echoed.sort();
    assert_eq!(echoed, sent, "the kernel got every payload back exactly once");

    // TCP: each SYN reached the TCP consumer on the queue Flow Director steers its flow group to,
    // with the exact signature of the kernel's connect.
    for port in tcp_ports {
        let syns: Vec<_> = seen.syns.iter().filter(|(_, sig, _)| sig.remote().port() == port).collect();
        assert!(!syns.is_empty(), "no SYN from port {port}");
        let group = FlowGroup(port & 0xFFF);
        let want = Signature::new(Proto::Tcp, tcp_remote.into(), SocketAddrV4::new(KERNEL_IP, port).into())
            .map_err(|e| e.to_string())?;
        for &&(q, sig, flow_group) in &syns {
            assert_eq!(sig, want, "the SYN's signature");
            assert_eq!(sig.local(), SocketAddr::from(tcp_remote));
            assert_eq!(sig.remote(), SocketAddr::from((KERNEL_IP, port)));
            assert_eq!((flow_group, sig.flow_group()), (group, group), "flow group of port {port}");
            assert_eq!(q, nic.queue_of(group), "the SYN from port {port} on its flow group's queue");
        }
    }
    assert!(seen.syns.iter().all(|(_, sig, _)| tcp_ports.contains(&sig.remote().port())));
    let syn_queues: Vec<u16> = seen.syns.iter().map(|&(q, _, _)| q).collect();
    assert!((0..QUEUES).all(|q| syn_queues.contains(&q)), "SYNs on every queue: {syn_queues:?}");

    // The datagram nobody registered: in the default channel, with its signature and payload.
    let discard_sig = Signature::new(Proto::Udp, SocketAddr::from((OUR_IP, DISCARD_PORT)), udp_peer)
        .map_err(|e| e.to_string())?;
    assert_eq!(seen.default_udp, vec![(discard_sig, discard_payload)]);

    // The counters agree with each other and with what the consumers saw.
    let stats: Vec<ChannelizerStats> = world.channelizers.iter().map(Channelizer::stats).collect();
    println!("channelizers: {stats:#?}");
    for (q, s) in stats.iter().enumerate() {
        assert_eq!((s.dropped_full, s.dropped_malformed, s.unattached), (0, 0, 0), "queue {q}: {s:?}");
        assert_eq!(s.rx, s.delivered + s.to_default, "queue {q}: {s:?}");
    }
    let syns = seen.syns.len() as u64;
    let arp_requests = seen.arp_requests as u64;
    let arp_replies = seen.arp_replies as u64;
    let datagrams = DATAGRAMS as u64;
    assert_eq!(sum(&stats, |s| s.delivered), datagrams + syns);
    assert_eq!(sum(&stats, |s| s.to_default), arp_requests + 1);
    assert_eq!(stats[SLOW_TX_QUEUE].tx, arp_replies);
    assert_eq!(stats[ECHO_TX_QUEUE].tx, datagrams);
    let mut fdir_matches = 0;
    let mut queue_rx_bytes = 0;
    for (q, (ch, s)) in world.channelizers.iter().zip(&stats).enumerate() {
        let d = ch.device().stats();
        assert_eq!((d.rx_packets, d.tx_packets), (s.rx, s.tx), "queue {q}: {d:?}");
        assert_eq!((d.rx_dropped, d.rx_errors, d.tx_dropped), (0, 0, 0), "queue {q}: {d:?}");
        fdir_matches += ch.device().queue_stats().rx_fdir_matches;
        queue_rx_bytes += d.rx_bytes;
    }
    assert_eq!(fdir_matches, syns, "exactly the SYNs matched a flow-group filter");

    let sim = model.stats();
    println!("model: {sim:#?}");
    let total_rx = sum(&stats, |s| s.rx);
    assert_eq!(sim.rx_delivered, total_rx);
    assert_eq!(sim.rx_bytes, queue_rx_bytes);
    assert_eq!(sim.rx_wire, sim.rx_delivered + sim.rx_dropped_filtered, "{sim:?}");
    assert_eq!((sim.rx_dropped_no_desc, sim.rx_dropped_disabled, sim.rx_dropped_oversize), (0, 0, 0));
    assert_eq!(sim.tx_sent, arp_replies + datagrams);
    assert_eq!((sim.tx_dropped, sim.dma_faults, sim.ring_faults), (0, 0, 0), "{sim:?}");
    assert_eq!(sim.fdir_matches, syns);

    let n = nic.stats();
    assert_eq!(n.rx_good_packets, total_rx, "{n:?}");
    assert_eq!(n.rx_broadcast, arp_requests, "{n:?}");
    assert_eq!(n.tx_good_packets, arp_replies + datagrams, "{n:?}");
    for (q, s) in stats.iter().enumerate() {
        assert_eq!((n.queue_rx_packets[q], n.queue_tx_packets[q]), (s.rx, s.tx), "queue {q}: {n:?}");
    }
    assert_eq!(n.fdir_matches, syns);

    // Tear down in order: the channelizers (and their queues), the channels, the registrations and
    // the caches; then the driver, whose DMA mappings must all be gone; then the model with its
    // wire. Every buffer of both pools is back.
    drop(world);
    drop(registrations);
    drop(queue_caches);
    drop(app_cache);
    drop(nic);
    assert_eq!(model.dma_ranges(), 0, "rings and the pool mapping are released");
    drop(model);
    pool.check_leaks().map_err(|e| format!("driver pool: {e}"))?;
    wire_pool.check_leaks().map_err(|e| format!("wire pool: {e}"))?;
    Ok(())
}

#[test]
fn kernel_udp_and_tcp_round_trip_through_model_driver_and_channelizer() {
    netns_test::in_private_namespace(run);
}
