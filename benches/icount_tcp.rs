//! Instructions per TCP data segment in and its ACK out on an established connection: tcp-lib
//! beside smoltcp (the anchor), counted by gungraun (callgrind). `cargo bench -p netchannels-benches --bench icount_tcp`;
//! `scripts/icount.sh` divides each count by the `_n<N>` suffix of the benchmark id.
//!
//! Both stacks are the server of one connection whose client is this bench: it writes the frames
//! itself (Ethernet/IPv4/TCP, checksums filled), so both stacks see the same bytes. In `setup` (not
//! measured) the client answers the server's ARP request, sends a SYN with an MSS option only (no
//! window scaling, timestamps or SACK: both stacks then run the same plain TCP), takes the SYN-ACK,
//! ACKs it, and builds [`N`] data segments of [`PAYLOAD`] bytes with consecutive sequence numbers
//! (each one new data) and the server's ISN + 1 as the ACK. The measured function then, per segment,
//! with virtual time advanced by a fixed 10 µs:
//!
//! * **tcp-lib** (`tcplib_segment_ack`): `Stack::receive` of the frame, `Stack::handle_timeout`,
//!   `Stack::transmit` into a `PacketBatch` (the ACK; its pool buffer is freed with `clear`, as a
//!   device's TX would), `Stack::recv` of the 64 bytes (so the window stays open). This is what
//!   `Stack::poll` does per frame, without a device's `rx_burst`/`tx_burst`.
//! * **tcp-lib over IPv6** (`tcplib_segment_ack`, id `segment_ack_v6`): the same, the client
//!   writing Ethernet/IPv6/TCP frames (the server's neighbour entry for it set in `setup`).
//! * **smoltcp 0.14** (`smoltcp_segment_ack`): the frame handed to a one-frame `Device`,
//!   `Interface::poll` (ingress, then egress: the ACK, written into a reused buffer), then
//!   `tcp::Socket::recv_slice` of the 64 bytes. Congestion control: CUBIC in both (smoltcp's
//!   `socket-tcp-cubic`, on in the workspace since the anchors were made like for like; before,
//!   smoltcp ran none).
//!
//! ACK policy: every segment draws its own ACK at once in both stacks: tcp-lib with
//! `delayed_ack: None`, smoltcp with `set_ack_delay(None)`. The returned state counts the frames
//! each stack sent while measured; `teardown` asserts that it is exactly one per segment. Checksums
//! are verified on input and filled on output by both (their defaults).

#![allow(missing_docs, reason = "gungraun's macros generate undocumented modules, constants and functions")]

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use gungraun::{library_benchmark, library_benchmark_group, main};
use netchannel::dev::PacketBatch;
use netchannel::pool::{HugePages, Pool, PoolCache};
use smoltcp::iface::{Config as SmolConfig, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp as stcp;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr,
    IpAddress, IpCidr, IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};
use tcp_lib::stack::{Config, Stack, StreamId};
use tcp_lib::wire::{EthernetAddress as TlMac, Ipv4Cidr, Ipv6Cidr};

/// Segments per measured pass.
const N: usize = 256;
/// Payload bytes per segment.
const PAYLOAD: usize = 64;
/// Virtual time per segment.
const STEP: Duration = Duration::from_micros(10);
/// The server (the stack under test).
const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SERVER_PORT: u16 = 80;
/// The client (this bench).
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const CLIENT_PORT: u16 = 40_000;
/// The IPv6 addresses of the `_v6` case.
const SERVER_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const CLIENT_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
/// The client's initial sequence number.
const CLIENT_ISN: u32 = 1_000_000;

// ---------------------------------------------------------------------------------------------------
// The client: frames written and read with smoltcp's wire module
// ---------------------------------------------------------------------------------------------------

/// An Ethernet/IPv6/TCP frame from the client to the server (checksums filled), written with
/// tcp-lib's wire module (the workspace's smoltcp is built without IPv6).
fn tcp_frame6(control: TcpControl, seq: u32, ack: Option<u32>, payload: &[u8]) -> Vec<u8> {
    use tcp_lib::wire as tw;
    let tcp = tw::TcpRepr {
        src_port: CLIENT_PORT,
        dst_port: SERVER_PORT,
        control: if control == TcpControl::Syn { tw::TcpControl::Syn } else { tw::TcpControl::None },
        push: control == TcpControl::Psh,
        seq_number: tw::SeqNumber::new(seq),
        ack_number: ack.map(tw::SeqNumber::new),
        window_len: 65_535,
        max_seg_size: (control == TcpControl::Syn).then_some(1440),
        payload,
        ..tw::TcpRepr::default()
    };
    let ip = tw::Ipv6Repr {
        src_addr: CLIENT_IP6,
        dst_addr: SERVER_IP6,
        next_header: tw::Protocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    let eth = tw::EthernetRepr {
        src_addr: TlMac(CLIENT_MAC),
        dst_addr: TlMac(SERVER_MAC),
        vlan: None,
        ethertype: tw::EtherType::Ipv6,
    };
    let mut buf = vec![0u8; eth.buffer_len(ip.buffer_len())];
    let mut frame = tw::EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    let mut packet = tw::Ipv6Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut packet);
    tcp.emit_v6(&mut tw::TcpPacket::new_unchecked(packet.payload_mut()), CLIENT_IP6, SERVER_IP6);
    buf
}

/// An Ethernet/IPv4/TCP frame from the client to the server (checksums filled).
fn tcp_frame(control: TcpControl, seq: u32, ack: Option<u32>, payload: &[u8]) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: CLIENT_PORT,
        dst_port: SERVER_PORT,
        control,
        seq_number: TcpSeqNumber(seq.cast_signed()),
        ack_number: ack.map(|a| TcpSeqNumber(a.cast_signed())),
        window_len: 65_535,
        window_scale: None,
        max_seg_size: (control == TcpControl::Syn).then_some(1460),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let ip = Ipv4Repr {
        src_addr: CLIENT_IP,
        dst_addr: SERVER_IP,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress(CLIENT_MAC),
        dst_addr: EthernetAddress(SERVER_MAC),
        ethertype: EthernetProtocol::Ipv4,
    };
    let caps = ChecksumCapabilities::default();
    let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + tcp.buffer_len()];
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut packet, &caps);
    let (src, dst) = (IpAddress::Ipv4(CLIENT_IP), IpAddress::Ipv4(SERVER_IP));
    tcp.emit(&mut TcpPacket::new_unchecked(packet.payload_mut()), &src, &dst, &caps);
    buf
}

/// The client's ARP reply to the server.
fn arp_reply() -> Vec<u8> {
    let arp = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Reply,
        source_hardware_addr: EthernetAddress(CLIENT_MAC),
        source_protocol_addr: CLIENT_IP,
        target_hardware_addr: EthernetAddress(SERVER_MAC),
        target_protocol_addr: SERVER_IP,
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress(CLIENT_MAC),
        dst_addr: EthernetAddress(SERVER_MAC),
        ethertype: EthernetProtocol::Arp,
    };
    let mut buf = vec![0u8; eth.buffer_len() + arp.buffer_len()];
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    arp.emit(&mut ArpPacket::new_unchecked(frame.payload_mut()));
    buf
}

/// What the client makes of a frame from the server.
enum Seen {
    /// An ARP request for the client's address.
    ArpRequest,
    /// A TCP segment: its flags byte and sequence number.
    Tcp { flags: u8, seq: u32 },
    /// Anything else (ignored).
    Other,
}

/// Reads the few fields of `frame` the handshake needs.
fn classify(frame: &[u8]) -> Seen {
    let be32 = |at: usize| u32::from_be_bytes(frame[at..at + 4].try_into().expect("4 bytes"));
    match frame.get(12..14) {
        Some([0x08, 0x06]) if frame[20..22] == [0, 1] && frame[38..42] == CLIENT_IP.octets() => {
            Seen::ArpRequest
        }
        Some([0x08, 0x00]) if frame[23] == 6 => {
            let tcp = 14 + 4 * usize::from(frame[14] & 0x0f);
            Seen::Tcp { flags: frame[tcp + 13], seq: be32(tcp + 4) }
        }
        Some([0x86, 0xdd]) if frame[20] == 6 => Seen::Tcp { flags: frame[54 + 13], seq: be32(54 + 4) },
        _ => Seen::Other,
    }
}

/// A server the client can talk to in set-up.
trait Server {
    /// Hands `frame` to the server and returns what it sends in answer.
    fn exchange(&mut self, frame: &[u8]) -> Vec<Vec<u8>>;
}

/// Opens the connection (answering ARP), over IPv6 when `v6`, and returns the data segments to
/// measure with.
fn handshake(server: &mut impl Server, v6: bool) -> Vec<Vec<u8>> {
    let tcp_frame = if v6 { tcp_frame6 } else { tcp_frame };
    let mut out = server.exchange(&tcp_frame(TcpControl::Syn, CLIENT_ISN, None, &[]));
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.extend(out.iter().map(|f| f.get(..f.len().min(60)).unwrap_or_default().to_vec()));
        let mut next = Vec::new();
        for frame in &out {
            match classify(frame) {
                Seen::ArpRequest => next.extend(server.exchange(&arp_reply())),
                // SYN and ACK set: the SYN-ACK.
                Seen::Tcp { flags, seq } if flags & 0x12 == 0x12 => {
                    let ack = seq.wrapping_add(1);
                    let done = server.exchange(&tcp_frame(TcpControl::None, CLIENT_ISN + 1, Some(ack), &[]));
                    assert!(done.is_empty(), "no answer to the handshake's ACK");
                    return (0..N)
                        .map(|i| {
                            let seq = CLIENT_ISN + 1 + u32::try_from(i * PAYLOAD).expect("fits");
                            let payload = [u8::try_from(i % 251).expect("fits"); PAYLOAD];
                            tcp_frame(TcpControl::Psh, seq, Some(ack), &payload)
                        })
                        .collect();
                }
                _ => {}
            }
        }
        out = next;
    }
    panic!("no SYN-ACK; the server sent {seen:02x?}");
}

/// Asserts that the server answered every segment with exactly one frame.
fn one_ack_each(frames_out: usize) {
    assert_eq!(frames_out, N, "one ACK per segment");
}

// ---------------------------------------------------------------------------------------------------
// tcp-lib
// ---------------------------------------------------------------------------------------------------

/// A tcp-lib stack serving the client, and the connection's data segments.
struct TcpLib {
    stack: Stack,
    cache: &'static PoolCache,
    stream: Option<StreamId>,
    now: Instant,
    frames: Vec<Vec<u8>>,
    /// The ACKs go here; `clear` frees their buffers.
    batch: PacketBatch<'static>,
    buf: Vec<u8>,
    sent: usize,
}

impl Server for TcpLib {
    fn exchange(&mut self, frame: &[u8]) -> Vec<Vec<u8>> {
        self.now += STEP;
        self.stack.receive(self.now, frame);
        self.stack.handle_timeout(self.now);
        // Twice: a frame held for ARP resolution asks for it in the first call, and the request
        // leaves in the second.
        let mut batch = PacketBatch::with_capacity(32);
        let mut out = Vec::new();
        for _ in 0..2 {
            self.stack.transmit(self.now, self.cache, &mut batch);
            out.extend(batch.drain().map(|p| p.data().to_vec()));
        }
        out
    }
}

fn setup_tcplib() -> TcpLib {
    setup_tcplib_family(false)
}

/// The same connection over IPv6 (the client's MAC learned beforehand, as ARP's answer is for
/// IPv4): what IPv6 costs against the IPv4 case, in the same harness.
fn setup_tcplib_v6() -> TcpLib {
    setup_tcplib_family(true)
}

fn setup_tcplib_family(v6: bool) -> TcpLib {
    // Leaked, so that the batch can borrow the cache from the set-up into the measured function (a
    // gungraun benchmark is one process per run).
    let pool: &'static Pool =
        Box::leak(Box::new(Pool::builder(4096).hugepages(HugePages::Never).build().expect("pool")));
    let cache: &'static PoolCache = Box::leak(Box::new(pool.cache()));
    let mut config = Config::new(TlMac(SERVER_MAC), Ipv4Cidr::new(SERVER_IP, 24).expect("a /24"));
    config.secret_seed = Some(1);
    config.gratuitous_arp = false;
    config.tcp.delayed_ack = None;
    if v6 {
        config = config.with_ipv6(Ipv6Cidr::new(SERVER_IP6, 64).expect("a /64"));
    }
    // A fixed base; only differences from it matter to the stack.
    let now = Instant::now();
    let mut stack = Stack::new(config, now);
    if v6 {
        stack.learn_neighbor(CLIENT_IP6, TlMac(CLIENT_MAC));
    }
    let listener = stack.listen(SERVER_PORT).expect("listen");
    let mut s = TcpLib {
        stack,
        cache,
        stream: None,
        now,
        frames: Vec::new(),
        batch: PacketBatch::with_capacity(32),
        buf: vec![0; 2048],
        sent: 0,
    };
    s.frames = handshake(&mut s, v6);
    s.stream = Some(s.stack.accept(listener).expect("established"));
    s
}

#[library_benchmark]
#[bench::segment_ack_n256(setup = setup_tcplib, teardown = teardown_tcplib)]
#[bench::segment_ack_v6_n256(setup = setup_tcplib_v6, teardown = teardown_tcplib)]
fn tcplib_segment_ack(mut s: TcpLib) -> TcpLib {
    let stream = s.stream.expect("accepted");
    for frame in &s.frames {
        s.now += STEP;
        s.stack.receive(s.now, frame);
        s.stack.handle_timeout(s.now);
        s.sent += s.stack.transmit(s.now, s.cache, &mut s.batch);
        s.batch.clear();
        black_box(s.stack.recv(stream, &mut s.buf).expect("recv"));
    }
    s
}

fn teardown_tcplib(s: TcpLib) {
    one_ack_each(s.sent);
}

// ---------------------------------------------------------------------------------------------------
// smoltcp
// ---------------------------------------------------------------------------------------------------

/// A smoltcp device that receives at most one frame per poll (the one `next` names) and either keeps
/// what it transmits (set-up) or writes it into one reused buffer and counts it (measured).
struct OneFrameDev {
    frames: Vec<Vec<u8>>,
    next: Option<usize>,
    keep: bool,
    kept: Vec<Vec<u8>>,
    tx_buf: Vec<u8>,
    sent: usize,
}

struct Rx<'a>(&'a [u8]);

struct Tx<'a> {
    keep: bool,
    kept: &'a mut Vec<Vec<u8>>,
    tx_buf: &'a mut Vec<u8>,
    sent: &'a mut usize,
}

impl smoltcp::phy::RxToken for Rx<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0)
    }
}

impl smoltcp::phy::TxToken for Tx<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        *self.sent += 1;
        let r = f(&mut self.tx_buf[..len]);
        if self.keep {
            self.kept.push(self.tx_buf[..len].to_vec());
        }
        r
    }
}

impl Device for OneFrameDev {
    type RxToken<'a>
        = Rx<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = Tx<'a>
    where
        Self: 'a;

    fn receive(&mut self, _: smoltcp::time::Instant) -> Option<(Rx<'_>, Tx<'_>)> {
        let frame = &self.frames[self.next.take()?];
        let tx = Tx { keep: self.keep, kept: &mut self.kept, tx_buf: &mut self.tx_buf, sent: &mut self.sent };
        Some((Rx(frame), tx))
    }

    fn transmit(&mut self, _: smoltcp::time::Instant) -> Option<Tx<'_>> {
        Some(Tx { keep: self.keep, kept: &mut self.kept, tx_buf: &mut self.tx_buf, sent: &mut self.sent })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = 1514;
        caps
    }
}

/// A smoltcp interface serving the client, its socket and the connection's data segments.
struct Smol {
    iface: Interface,
    dev: OneFrameDev,
    sockets: SocketSet<'static>,
    handle: SocketHandle,
    now: smoltcp::time::Instant,
    buf: Vec<u8>,
}

impl Server for Smol {
    fn exchange(&mut self, frame: &[u8]) -> Vec<Vec<u8>> {
        self.now += smoltcp::time::Duration::from_micros(10);
        self.dev.frames.push(frame.to_vec());
        self.dev.next = Some(self.dev.frames.len() - 1);
        self.iface.poll(self.now, &mut self.dev, &mut self.sockets);
        std::mem::take(&mut self.dev.kept)
    }
}

fn setup_smoltcp() -> Smol {
    let mut dev = OneFrameDev {
        frames: Vec::new(),
        next: None,
        keep: true,
        kept: Vec::new(),
        tx_buf: vec![0; 1514],
        sent: 0,
    };
    let mut config = SmolConfig::new(smoltcp::wire::HardwareAddress::Ethernet(EthernetAddress(SERVER_MAC)));
    config.random_seed = 0x5eed;
    let now = smoltcp::time::Instant::from_secs(1);
    let mut iface = Interface::new(config, &mut dev, now);
    iface.update_ip_addrs(|addrs| {
        addrs.push(IpCidr::new(IpAddress::Ipv4(SERVER_IP), 24)).expect("room");
    });
    let mut socket =
        stcp::Socket::new(stcp::SocketBuffer::new(vec![0; 65_536]), stcp::SocketBuffer::new(vec![0; 65_536]));
    socket.set_ack_delay(None);
    socket.set_nagle_enabled(false);
    socket.listen(SERVER_PORT).expect("listen");
    let mut sockets = SocketSet::new(Vec::new());
    let handle = sockets.add(socket);
    let mut s = Smol { iface, dev, sockets, handle, now, buf: vec![0; 2048] };
    let frames = handshake(&mut s, false);
    assert_eq!(s.sockets.get::<stcp::Socket<'_>>(s.handle).state(), stcp::State::Established);
    s.dev.frames = frames;
    s.dev.keep = false;
    s.dev.sent = 0;
    s
}

#[library_benchmark]
#[bench::segment_ack_n256(setup = setup_smoltcp, teardown = teardown_smoltcp)]
fn smoltcp_segment_ack(mut s: Smol) -> Smol {
    for i in 0..s.dev.frames.len() {
        s.now += smoltcp::time::Duration::from_micros(10);
        s.dev.next = Some(i);
        s.iface.poll(s.now, &mut s.dev, &mut s.sockets);
        let socket = s.sockets.get_mut::<stcp::Socket<'_>>(s.handle);
        black_box(socket.recv_slice(&mut s.buf).expect("recv"));
    }
    s
}

fn teardown_smoltcp(s: Smol) {
    one_ack_each(s.dev.sent);
}

library_benchmark_group!(name = segment_ack, benchmarks = [tcplib_segment_ack, smoltcp_segment_ack]);

main!(library_benchmark_groups = [segment_ack]);
