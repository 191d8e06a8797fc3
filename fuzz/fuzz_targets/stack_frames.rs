//! A dual-stack `tcp_lib::stack::Stack` on arbitrary frames: Ethernet frames built from templates
//! (IPv4 or IPv6 to our address, to a group we joined or another; TCP, UDP, ICMP, ICMPv6 with
//! Neighbor Discovery, fragments and extension headers; the hop limit 255 or not) with fuzzed
//! bodies, raw frames, and the application's calls between them (connect over either family,
//! send, ping, static routes), time moving on. Checksums are trusted so that fuzzed bodies reach
//! the code behind them. Nothing may panic; every table stays within its configured bound; every
//! frame the stack transmits is Ethernet it could parse again.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use netchannel::dev::PacketBatch;
use netchannel::pool::{HugePages, Pool};
use tcp_lib::stack::{ArpConfig, Config, Stack};
use tcp_lib::wire::ipv6::addr::{ALL_NODES, link_local, multicast_mac, solicited_node};
use tcp_lib::wire::{ChecksumPolicy, EtherType, EthernetAddress, EthernetFrame, Ipv4Cidr, Ipv6Cidr};

const OUR_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
const PEER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const OUR_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const PEER_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const MAX_CONNECTIONS: usize = 32;
const MAX_TIME_WAIT: usize = 8;

#[derive(Arbitrary, Debug)]
enum Op {
    /// A frame from a template: `to` picks the destination, `proto` the next header, `hop` the
    /// hop limit (255 or not), `src` the source.
    Frame {
        v6: bool,
        to: u8,
        proto: u8,
        hop: bool,
        src: u8,
        body: Vec<u8>,
    },
    /// Raw bytes.
    Raw(Vec<u8>),
    /// Time moves on (milliseconds) and the timers run.
    Tick(u16),
    Connect {
        v6: bool,
        port: u16,
    },
    Send {
        conn: u8,
        len: u16,
    },
    Close {
        conn: u8,
    },
    Ping {
        v6: bool,
        far: bool,
    },
    Route {
        len: u8,
    },
    Listen(u16),
}

fn ipv6_frame(dst: Ipv6Addr, src: Ipv6Addr, next_header: u8, hop: u8, body: &[u8]) -> Vec<u8> {
    let dst_mac = if dst.is_multicast() { multicast_mac(dst) } else { OUR_MAC };
    let mut f = Vec::with_capacity(54 + body.len());
    f.extend_from_slice(&dst_mac.0);
    f.extend_from_slice(&PEER_MAC.0);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend_from_slice(&u16::try_from(body.len()).unwrap_or(u16::MAX).to_be_bytes());
    f.extend_from_slice(&[next_header, hop]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(body);
    f
}

fn ipv4_frame(dst: Ipv4Addr, src: Ipv4Addr, protocol: u8, ttl: u8, body: &[u8]) -> Vec<u8> {
    let total = u16::try_from(20 + body.len()).unwrap_or(u16::MAX);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = ttl;
    ip[9] = protocol;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let sum = tcp_lib::wire::checksum::finish(tcp_lib::wire::checksum::data(&ip));
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut f = Vec::with_capacity(34 + body.len());
    f.extend_from_slice(&OUR_MAC.0);
    f.extend_from_slice(&PEER_MAC.0);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ip);
    f.extend_from_slice(body);
    f
}

fuzz_target!(|ops: Vec<Op>| {
    let Ok(pool) = Pool::builder(512).hugepages(HugePages::Never).build() else { return };
    let cache = pool.cache();
    let mut config = Config::new(OUR_MAC, Ipv4Cidr::new(OUR_IP, 24).expect("a /24"))
        .with_ipv6(Ipv6Cidr::new(OUR_IP6, 64).expect("a /64"));
    config.checksum = ChecksumPolicy::Trust;
    config.secret_seed = Some(7);
    config.max_connections = MAX_CONNECTIONS;
    config.max_time_wait = MAX_TIME_WAIT;
    config.max_queued_frames = 64;
    config.arp =
        ArpConfig { max_entries: 8, max_pending_hosts: 4, max_pending_packets: 4, ..ArpConfig::default() };
    let mut now = Instant::now();
    let mut stack = Stack::new(config, now);
    let _ = stack.listen(80);
    let mut conns = Vec::new();
    let mut batch = PacketBatch::with_capacity(64);
    let peer_ll = link_local(PEER_MAC);
    for op in ops.into_iter().take(256) {
        match op {
            Op::Frame { v6: true, to, proto, hop, src, body } => {
                let dst = match to % 5 {
                    0 => OUR_IP6,
                    1 => link_local(OUR_MAC),
                    2 => solicited_node(OUR_IP6),
                    3 => ALL_NODES,
                    _ => PEER_IP6,
                };
                let src = match src % 4 {
                    0 => PEER_IP6,
                    1 => peer_ll,
                    2 => Ipv6Addr::UNSPECIFIED,
                    _ => OUR_IP6,
                };
                // TCP, UDP, ICMPv6, Fragment, Hop-by-Hop, Destination options, Routing, or any.
                let next = [6, 17, 58, 44, 0, 60, 43][usize::from(proto % 8).min(6)];
                let next = if proto % 8 == 7 { proto } else { next };
                stack.receive(now, &ipv6_frame(dst, src, next, if hop { 255 } else { 64 }, &body));
            }
            Op::Frame { v6: false, to, proto, hop, src, body } => {
                let dst = if to % 2 == 0 { OUR_IP } else { Ipv4Addr::new(10, 0, 0, 255) };
                let src = if src % 2 == 0 { PEER_IP } else { Ipv4Addr::new(10, 0, 0, src) };
                let protocol = [6, 17, 1][usize::from(proto % 3)];
                stack.receive(now, &ipv4_frame(dst, src, protocol, if hop { 64 } else { 1 }, &body));
            }
            Op::Raw(bytes) => stack.receive(now, &bytes),
            Op::Tick(ms) => {
                now += Duration::from_millis(u64::from(ms));
                stack.handle_timeout(now);
            }
            Op::Connect { v6, port } => {
                let to =
                    if v6 { SocketAddr::from((PEER_IP6, port)) } else { SocketAddr::from((PEER_IP, port)) };
                if let Ok(c) = stack.connect(to) {
                    conns.push(c);
                }
            }
            Op::Send { conn, len } => {
                if let Some(&c) = conns.get(usize::from(conn) % conns.len().max(1)) {
                    let _ = stack.send(c, &vec![0x5a; usize::from(len)]);
                }
            }
            Op::Close { conn } => {
                if let Some(&c) = conns.get(usize::from(conn) % conns.len().max(1)) {
                    let _ = stack.close(c);
                }
            }
            Op::Ping { v6, far } => {
                let dst: IpAddr = match (v6, far) {
                    (true, false) => PEER_IP6.into(),
                    (true, true) => Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into(),
                    (false, _) => PEER_IP.into(),
                };
                let _ = stack.ping(dst, 1, 1, b"fuzz");
            }
            Op::Route { len } => {
                let _ = stack.add_route(
                    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0).into(),
                    len,
                    peer_ll.into(),
                );
            }
            Op::Listen(port) => {
                let _ = stack.listen(port);
            }
        }
        stack.transmit(now, &cache, &mut batch);
        for p in batch.drain() {
            let frame = EthernetFrame::new_checked(p.data()).expect("a transmitted frame is Ethernet");
            assert!(matches!(frame.ethertype(), EtherType::Ipv4 | EtherType::Ipv6 | EtherType::Arp));
        }
        assert!(stack.connection_count() <= MAX_CONNECTIONS + MAX_TIME_WAIT);
        assert!(stack.time_wait_count() <= MAX_TIME_WAIT);
        assert!(stack.arp_entries() <= 8 && stack.ndp_entries() <= 8);
        assert!(stack.arp_pending() <= 4 * 4);
    }
});
