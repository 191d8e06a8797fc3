//! The kernel is our peer over AF_XDP: a veth pair in a private network namespace, `AfXdp` on one
//! end (generic and native XDP), the kernel's UDP socket behind the other.
//!
//! The test thread calls `unshare(CLONE_NEWNET)`; both veth ends live in that namespace, which
//! vanishes with the thread. The kernel's end `ncxdp1` has 10.202.0.1/24; our address 10.202.0.2 is on
//! no kernel interface: a static neighbour entry on `ncxdp1` maps it to the MAC of `ncxdp0`, the end
//! the XDP program and our sockets are attached to (so no ARP is needed, and our side answers none).
//! The kernel sends datagrams out of `ncxdp1`; they arrive on `ncxdp0`, are redirected to our AF_XDP
//! socket, classified by the `Channelizer` into a registered UDP listener's channel, echoed (addresses
//! and ports swapped, UDP checksum recomputed) into a TX channel, and sent back through AF_XDP's TX
//! ring to the kernel's socket, which checks every byte.
//!
//! Without root, or on a kernel without AF_XDP/BPF, it prints `skipped: <why>` and passes.
#![cfg(not(loom))]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netchannel::channelizer::{Channelizer, ConsumerId, SignatureRegistry};
use netchannel::dev::{AfXdp, Link, NetDevice, XdpError, XdpMode, ZeroCopy};
use netchannel::pool::{HugePages, Pool};
use netchannel::rcu::Qsbr;
use netchannel::signature::{Proto, Signature};

use netns_test::ip;

const OURS: &str = "ncxdp0";
const KERNELS: &str = "ncxdp1";
const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 202, 0, 1);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 202, 0, 2);
const OUR_PORT: u16 = 7000;

/// Why AF_XDP cannot be used here, if it cannot (checked after the namespace checks: we are root).
fn xdp_unavailable() -> Option<String> {
    // SAFETY: plain socket creation; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Some(format!("no AF_XDP sockets here: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    None
}

/// Runs `body` in a private namespace with the veth pair up and addressed; `queues` RX/TX queues each.
fn with_veth(queues: u16, body: impl FnOnce() -> Result<(), String> + Send + 'static) {
    netns_test::in_private_namespace(move || {
        if let Some(why) = xdp_unavailable() {
            return Err(format!("skip:{why}"));
        }
        let q = queues.to_string();
        ip(&[
            "link",
            "add",
            OURS,
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            KERNELS,
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
        ])?;
        ip(&["addr", "add", &format!("{KERNEL_IP}/24"), "dev", KERNELS])?;
        ip(&["link", "set", "lo", "up"])?;
        ip(&["link", "set", OURS, "up"])?;
        ip(&["link", "set", KERNELS, "up"])?;
        body()
    });
}

/// The device's error as a test outcome: missing kernel support is a skip, anything else a failure.
fn open_error(e: &XdpError) -> String {
    match e {
        XdpError::Unsupported { .. } | XdpError::PermissionDenied { .. } => format!("skip:{e}"),
        _ => format!("opening AF_XDP failed: {e}"),
    }
}

fn sum16(bytes: &[u8], mut sum: u32) -> u32 {
    for c in bytes.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    u16::try_from(sum).unwrap()
}

/// Turns an Ethernet/IPv4/UDP frame into its reply in place: MACs, addresses and ports swapped, the
/// UDP checksum recomputed (the kernel may have left a partial one: veth offloads it). `false` if the
/// frame is not IPv4/UDP.
fn echo_in_place(f: &mut [u8]) -> bool {
    if f.len() < 14 + 20 + 8 || f[12..14] != [0x08, 0x00] || f[14] >> 4 != 4 || f[14 + 9] != 17 {
        return false;
    }
    let ihl = usize::from(f[14] & 0x0f) * 4;
    let udp_at = 14 + ihl;
    let udp_len = usize::from(u16::from_be_bytes([f[udp_at + 4], f[udp_at + 5]]));
    if f.len() < udp_at + udp_len || udp_len < 8 {
        return false;
    }
    for i in 0..6 {
        f.swap(i, 6 + i);
    }
    for i in 0..4 {
        f.swap(14 + 12 + i, 14 + 16 + i);
    }
    f.swap(udp_at, udp_at + 2);
    f.swap(udp_at + 1, udp_at + 3);
    f[udp_at + 6] = 0;
    f[udp_at + 7] = 0;
    let mut pseudo = [0u8; 12];
    pseudo[..8].copy_from_slice(&f[14 + 12..14 + 20]);
    pseudo[9] = 17;
    pseudo[10..12].copy_from_slice(&u16::try_from(udp_len).unwrap().to_be_bytes());
    let c = !fold(sum16(&f[udp_at..udp_at + udp_len], sum16(&pseudo, 0)));
    let c = if c == 0 { 0xffff } else { c };
    f[udp_at + 6..udp_at + 8].copy_from_slice(&c.to_be_bytes());
    true
}

/// Datagram `i`: a 4-byte sequence number, then pseudo-random bytes; sizes from 4 to 1472 (a full
/// 1500-byte IP packet).
fn datagram(i: u32) -> Vec<u8> {
    let len = 4 + (i as usize * 7919) % 1469;
    let mut x = u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut d = i.to_be_bytes().to_vec();
    d.extend((4..len).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x.to_le_bytes()[0]
    }));
    d
}

/// The echo test in `mode`: `count` datagrams, at most `window` in flight.
fn echo(mode: XdpMode, count: u32, window: u32) -> Result<(), String> {
    let pool = Pool::builder(4096).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
    let dev = AfXdp::builder(OURS)
        .queue(0)
        .mode(mode)
        .ring_size(512)
        .fill_size(512)
        .open(&pool)
        .map_err(|e| open_error(&e))?;
    assert_eq!(dev.mode(), mode, "{dev:?}");
    assert!(!dev.is_zero_copy(), "veth has no AF_XDP zero-copy: {dev:?}");
    let info = dev.info();
    assert_eq!((info.name.as_str(), info.queues, info.mtu), (OURS, 1, 1500));
    assert!(matches!(dev.link(), Link::Up { .. }), "{:?}", dev.link());
    let mac = info.mac.to_string();
    ip(&["neigh", "replace", &OUR_IP.to_string(), "lladdr", &mac, "dev", KERNELS, "nud", "permanent"])?;

    let cache = pool.cache();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let (default_tx, mut default_rx) = pool.packet_channel(256).map_err(|e| e.to_string())?;
    let mut ch = Channelizer::new(dev, 0, &cache, Arc::clone(&registry), default_tx, 32);
    let (tx, mut rx) = pool.packet_channel(512).map_err(|e| e.to_string())?;
    ch.attach(ConsumerId(0), tx).expect("same pool");
    let (mut echo_tx, echo_rx) = pool.packet_channel(512).map_err(|e| e.to_string())?;
    ch.add_tx(echo_rx);
    let us = SocketAddr::V4(SocketAddrV4::new(OUR_IP, OUR_PORT));
    let _registration = registry.register(Signature::listener(Proto::Udp, us), ConsumerId(0)).unwrap();

    let sock = UdpSocket::bind(SocketAddrV4::new(KERNEL_IP, 0)).map_err(|e| e.to_string())?;
    sock.set_nonblocking(true).map_err(|e| e.to_string())?;
    let (mut sent, mut echoed, mut bytes) = (0u32, 0u32, 0usize);
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let deadline = start + Duration::from_secs(20);
    while echoed < count {
        if Instant::now() > deadline {
            let d = ch.device();
            return Err(format!(
                "timed out: sent {sent}, echoed {echoed} of {count}; device {:?}, {:?}; channelizer {:?}",
                d.stats(),
                d.xdp_stats(0),
                ch.stats()
            ));
        }
        while sent < count && sent - echoed < window {
            match sock.send_to(&datagram(sent), us) {
                Ok(_) => sent += 1,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("send_to: {e}")),
            }
        }
        let _ = ch.device().wait_readable(0, Some(Duration::from_millis(5)));
        let _ = ch.poll().map_err(|e| e.to_string())?;
        while let Some(mut p) = rx.pop(&cache) {
            assert!(echo_in_place(p.data_mut()), "the listener got a frame that is not UDP/IPv4");
            if let Err(full) = echo_tx.push(p) {
                drop(full.into_inner()); // the kernel will not see this one: the test times out
            }
        }
        let _ = ch.poll().map_err(|e| e.to_string())?;
        while let Some(p) = default_rx.pop(&cache) {
            drop(p); // IPv6 router solicitations and the like from the veth ends
        }
        loop {
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    assert_eq!(from, us, "a reply from elsewhere");
                    let seq = u32::from_be_bytes(buf[..4].try_into().unwrap());
                    assert_eq!(seq, echoed, "replies out of order or lost");
                    assert_eq!(&buf[..n], &datagram(seq)[..], "datagram {seq} came back changed");
                    echoed += 1;
                    bytes += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("recv_from: {e}")),
            }
        }
    }
    let elapsed = start.elapsed();
    let stats = ch.device().stats();
    let xdp = ch.device().xdp_stats(0).map_err(|e| e.to_string())?;
    println!(
        "{mode:?}: {count} datagrams ({bytes} payload bytes) echoed byte-exact in {elapsed:?}; device {stats:?}; {xdp:?}"
    );
    assert!(stats.rx_packets >= u64::from(count) && stats.tx_packets >= u64::from(count), "{stats:?}");
    assert_eq!((stats.rx_errors, stats.rx_dropped, stats.tx_dropped), (0, 0, 0), "{stats:?}");
    assert_eq!(ch.stats().dropped_full + ch.stats().dropped_malformed, 0, "{:?}", ch.stats());
    assert!(xdp.tx_wakeups > 0, "copy-mode TX needs sendto wakeups: {xdp:?}");

    // Dropping the device detaches the program and returns every buffer it held.
    drop(ch);
    drop((rx, default_rx, echo_tx));
    drop(cache);
    pool.check_leaks().map_err(|e| e.to_string())?;
    // The kernel's stack has the interface back: with no program, the neighbour's traffic passes.
    let out = std::process::Command::new("ip").args(["-d", "link", "show", OURS]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("prog/xdp"), "the XDP program is still attached after drop: {text}");
    Ok(())
}

#[test]
fn generic_mode_echoes_kernel_udp_byte_exact() {
    with_veth(1, || echo(XdpMode::Generic, 2000, 64));
}

#[test]
fn native_mode_on_veth_echoes_kernel_udp_byte_exact() {
    with_veth(1, || echo(XdpMode::Native, 2000, 64));
}

/// What goes wrong is reported as what to fix, and a failed open leaks nothing.
#[test]
fn errors_are_specific_and_leak_nothing() {
    with_veth(2, || {
        let pool = Pool::builder(4096).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
        let small = |b: netchannel::dev::AfXdpBuilder| b.ring_size(256).fill_size(256);

        let e = small(AfXdp::builder("ncnope0")).open(&pool).unwrap_err();
        assert!(matches!(e, XdpError::NoSuchInterface { .. }), "{e}");

        // Loopback has no native XDP.
        match small(AfXdp::builder("lo").mode(XdpMode::Native)).open(&pool) {
            Err(XdpError::NativeUnsupported { .. }) => {}
            Err(e @ (XdpError::Unsupported { .. } | XdpError::PermissionDenied { .. })) => {
                return Err(format!("skip:{e}"));
            }
            other => panic!("expected NativeUnsupported, got {other:?}"),
        }
        // ... and `Auto` falls back to generic there.
        let lo = small(AfXdp::builder("lo")).open(&pool).map_err(|e| open_error(&e))?;
        assert_eq!(lo.mode(), XdpMode::Generic);
        drop(lo);

        // veth has no zero-copy.
        let e = small(AfXdp::builder(OURS).mode(XdpMode::Native).zero_copy(ZeroCopy::Require))
            .open(&pool)
            .unwrap_err();
        assert!(matches!(e, XdpError::ZeroCopyUnsupported { source: Some(_), .. }), "{e}");

        // A queue the interface does not have.
        let e = small(AfXdp::builder(OURS).queue(5)).open(&pool).unwrap_err();
        assert!(matches!(e, XdpError::NoSuchQueue { queue: 5, .. }), "{e}");

        // One owner per queue, and one program per interface.
        let first = small(AfXdp::builder(OURS).queue(0).mode(XdpMode::Generic)).open(&pool).unwrap();
        let e = small(AfXdp::builder(OURS).queue(0).mode(XdpMode::Generic)).open(&pool).unwrap_err();
        assert!(matches!(e, XdpError::QueueBusy { queue: 0, .. }), "{e}");
        let e = small(AfXdp::builder(OURS).queue(1).mode(XdpMode::Generic)).open(&pool).unwrap_err();
        assert!(matches!(e, XdpError::AlreadyAttached { .. }), "{e}");
        assert!(e.to_string().contains("xdp off"), "{e}");
        drop(first);
        // Once the first is gone, the interface is free again.
        let two = small(AfXdp::builder(OURS).queues(0, 2).mode(XdpMode::Generic)).open(&pool).unwrap();
        assert_eq!(two.info().queues, 2);
        assert_eq!((two.nic_queue(0), two.nic_queue(1), two.nic_queue(2)), (Some(0), Some(1), None));
        drop(two);

        pool.check_leaks().map_err(|e| e.to_string())
    });
}
