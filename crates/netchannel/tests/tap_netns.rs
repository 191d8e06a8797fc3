//! The kernel is our peer: a TAP device in a private network namespace, the kernel's UDP socket on
//! one side and `Tap::rx_burst`/`tx_burst` on the other.
//!
//! The test thread calls `unshare(CLONE_NEWNET)` (namespaces are per thread), so the TAP, the `ip`
//! commands it spawns and its `UdpSocket` all live in a namespace that disappears with the thread.
//! Only addresses inside it (10.200.0.0/24) are used. Without root or `/dev/net/tun` it prints
//! `skipped: <why>` (`netns_test::skip`).
//! The test command counts that as a skip (under `CI=true` a failure unless allowed); an error once
//! those preconditions hold fails the test.
#![cfg(not(loom))]

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use netchannel::dev::{Link, MacAddr, NetDevice, PacketBatch, Tap};
use netchannel::pool::{HugePages, Pool};

use netns_test::ip;

const IFACE: &str = "nctap0";
const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
const PEER_PORT: u16 = 40_000;

fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 =
        bytes.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !u16::try_from(sum).unwrap_or(0xffff)
}

/// An Ethernet + IPv4 + UDP frame (UDP checksum 0: "none", allowed over IPv4).
fn udp_frame(
    dst_mac: MacAddr,
    src_mac: MacAddr,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac.0);
    f.extend_from_slice(&src_mac.0);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = u16::try_from(20 + 8 + payload.len()).unwrap();
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.ip().octets());
    ip[16..20].copy_from_slice(&dst.ip().octets());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&src.port().to_be_bytes());
    f.extend_from_slice(&dst.port().to_be_bytes());
    f.extend_from_slice(&(total - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// The UDP datagram in `frame` if it is IPv4/UDP to `PEER_IP:PEER_PORT`: (source MAC, source, payload).
fn parse_udp_to_peer(frame: &[u8]) -> Option<(MacAddr, SocketAddrV4, &[u8])> {
    if frame.len() < 14 + 20 + 8 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ip[9] != 17 || ip.len() < ihl + 8 || ip[16..20] != PEER_IP.octets() {
        return None;
    }
    let udp = &ip[ihl..];
    if u16::from_be_bytes([udp[2], udp[3]]) != PEER_PORT {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    let src = SocketAddrV4::new(
        Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        u16::from_be_bytes([udp[0], udp[1]]),
    );
    let mut mac = [0; 6];
    mac.copy_from_slice(&frame[6..12]);
    Some((MacAddr(mac), src, udp.get(8..len)?))
}

fn run_in_namespace() -> Result<(), String> {
    let mut tap = match Tap::open(IFACE) {
        Ok(t) => t,
        Err(e) => return Err(format!("Tap::open({IFACE}): {e}")),
    };
    let mac = tap.info().mac;
    assert!(mac.is_local() && !mac.is_multicast());
    assert_eq!(tap.name(), IFACE);
    assert_eq!(tap.link(), Link::Down, "a fresh TAP is down");
    ip(&["addr", "add", &format!("{KERNEL_IP}/24"), "dev", IFACE])?;
    ip(&["link", "set", IFACE, "up"])?;
    ip(&[
        "neigh",
        "add",
        &PEER_IP.to_string(),
        "lladdr",
        &mac.to_string(),
        "dev",
        IFACE,
        "nud",
        "permanent",
    ])?;
    assert!(matches!(tap.link(), Link::Up { .. }), "up and attached: {:?}", tap.link());
    ip(&["link", "set", IFACE, "mtu", "1400"])?;
    assert_eq!(tap.info().mtu, 1400);

    let pool = Pool::builder(256).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
    let cache = pool.cache();
    let mut batch = PacketBatch::with_capacity(32);

    let sock = UdpSocket::bind(SocketAddrV4::new(KERNEL_IP, 0)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let local = match sock.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        other => return Err(format!("unexpected address {other}")),
    };

    // Kernel -> us.
    let payloads: Vec<Vec<u8>> =
        (0..5u8).map(|i| format!("datagram {i} from the kernel").into_bytes()).collect();
    for p in &payloads {
        sock.send_to(p, SocketAddrV4::new(PEER_IP, PEER_PORT)).map_err(|e| e.to_string())?;
    }
    let mut got = Vec::new();
    let mut kernel_mac = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < payloads.len() && Instant::now() < deadline {
        tap.wait_readable(Some(Duration::from_millis(100))).map_err(|e| e.to_string())?;
        tap.rx_burst(0, &cache, &mut batch).map_err(|e| e.to_string())?;
        for packet in batch.drain() {
            let frame = packet.data();
            // Other traffic (IPv6 neighbour discovery, MLD) is ignored.
            if let Some((src_mac, src, payload)) = parse_udp_to_peer(frame) {
                assert_eq!(frame[..6], mac.0, "sent to our MAC");
                assert_eq!(src, local);
                kernel_mac = Some(src_mac);
                got.push(payload.to_vec());
            }
        }
    }
    assert_eq!(got, payloads, "every datagram, in order, byte for byte");
    let kernel_mac = kernel_mac.ok_or("no frame from the kernel")?;
    assert!(tap.stats().rx_packets >= 5);

    // Us -> kernel.
    let reply = b"hello kernel, from a hand-built frame";
    let frame = udp_frame(kernel_mac, mac, SocketAddrV4::new(PEER_IP, PEER_PORT), local, reply);
    let mut packet = cache.alloc().ok_or("no buffer")?;
    packet.extend_from_slice(&frame).map_err(|e| e.to_string())?;
    batch.push(packet).map_err(|_| "batch full")?;
    assert_eq!(tap.tx_burst(0, &mut batch).map_err(|e| e.to_string())?, 1);
    assert!(batch.is_empty());
    let mut buf = [0u8; 2048];
    let (n, from) = sock.recv_from(&mut buf).map_err(|e| format!("the kernel socket got nothing: {e}"))?;
    assert_eq!(&buf[..n], reply);
    assert_eq!(from, std::net::SocketAddr::V4(SocketAddrV4::new(PEER_IP, PEER_PORT)));
    let stats = tap.stats();
    assert_eq!((stats.tx_packets, stats.tx_bytes), (1, frame.len() as u64));

    // A frame larger than the data room is dropped and counted, never truncated.
    drop(batch);
    drop(cache);
    let small =
        Pool::builder(16).hugepages(HugePages::Never).data_room(256).build().map_err(|e| e.to_string())?;
    let small_cache = small.cache();
    let mut batch = PacketBatch::with_capacity(8);
    let before = tap.stats().rx_dropped;
    sock.send_to(&[0x5a; 600], SocketAddrV4::new(PEER_IP, PEER_PORT)).map_err(|e| e.to_string())?;
    sock.send_to(b"small", SocketAddrV4::new(PEER_IP, PEER_PORT)).map_err(|e| e.to_string())?;
    let mut small_seen = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !small_seen && Instant::now() < deadline {
        tap.wait_readable(Some(Duration::from_millis(100))).map_err(|e| e.to_string())?;
        tap.rx_burst(0, &small_cache, &mut batch).map_err(|e| e.to_string())?;
        for packet in batch.drain() {
            if let Some((_, _, payload)) = parse_udp_to_peer(packet.data()) {
                assert_eq!(payload, b"small", "the oversized datagram never shows up truncated");
                small_seen = true;
            }
        }
    }
    assert!(small_seen);
    assert_eq!(tap.stats().rx_dropped, before + 1);
    drop(batch);
    drop(small_cache);
    small.check_leaks().map_err(|e| e.to_string())?;
    pool.check_leaks().map_err(|e| e.to_string())?;
    Ok(())
}

#[test]
fn kernel_udp_through_a_tap_in_a_private_namespace() {
    netns_test::in_private_namespace(run_in_namespace);
}

/// A wait shorter than a millisecond lasts about that long: `poll(2)` counts whole milliseconds and
/// slept at least one for any timeout, which held a paced connection (its next departure a fraction
/// of a millisecond ahead) to one packet a millisecond. The shortest of 20 waits of 200 µs on an
/// idle TAP (no frame can arrive: the link is down) must have slept its timeout and woken well
/// before a millisecond; with whole milliseconds every one took at least 1 ms.
fn sub_millisecond_waits() -> Result<(), String> {
    let mut tap = Tap::open("nctapwait0").map_err(|e| format!("Tap::open: {e}"))?;
    let wait = Duration::from_micros(200);
    let mut shortest = Duration::MAX;
    for i in 0..20 {
        let start = Instant::now();
        let readable = if i % 2 == 0 {
            tap.wait_readable(Some(wait)).map_err(|e| format!("wait_readable: {e}"))?
        } else {
            tap.wait_rx(0, Some(wait)).map_err(|e| format!("wait_rx: {e}"))?;
            false
        };
        let took = start.elapsed();
        assert!(!readable, "nothing can arrive on a TAP whose link is down");
        assert!(took >= wait, "wait {i} returned after {took:?}, before its {wait:?} timeout");
        shortest = shortest.min(took);
    }
    assert!(shortest < Duration::from_micros(800), "the shortest of 20 waits of {wait:?} took {shortest:?}");
    Ok(())
}

#[test]
fn a_wait_shorter_than_a_millisecond_is_not_rounded_up() {
    netns_test::in_private_namespace(sub_millisecond_waits);
}
