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
//! Without root, or on a kernel without AF_XDP/BPF, it prints `skipped: <why>` (`netns_test::skip`).
//! The test command counts that as a skip (under `CI=true` a failure unless allowed); an error once
//! those preconditions hold fails the test.
#![cfg(not(loom))]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netchannel::channelizer::{Channelizer, ConsumerId, SignatureRegistry};
use netchannel::dev::xdp::BusyPoll;
use netchannel::dev::{AfXdp, DeviceStats, Link, NetDevice, XdpError, XdpMode, XdpStats, ZeroCopy};
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
        // The carrier comes up from the kernel's link-watch work, a moment later (up to a second
        // when other tests churn interfaces at the same time): the device reports it in `link()`.
        let start = Instant::now();
        while !carrier(OURS) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        body()
    });
}

/// Whether `iface` (in this thread's namespace) has carrier (`LOWER_UP`).
fn carrier(iface: &str) -> bool {
    std::process::Command::new("ip")
        .args(["link", "show", iface])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("LOWER_UP"))
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

/// The echo test in `mode`: `count` datagrams, at most `window` in flight, with busy polling if
/// `busy`; returns the device's counters and the socket's.
fn echo(
    mode: XdpMode,
    count: u32,
    window: u32,
    busy: Option<BusyPoll>,
) -> Result<(DeviceStats, XdpStats), String> {
    let pool = Pool::builder(4096).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
    let dev = AfXdp::builder(OURS)
        .queue(0)
        .mode(mode)
        .ring_size(512)
        .fill_size(512)
        .busy_poll(busy)
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
    let mut ch = Channelizer::builder(dev, &cache, Arc::clone(&registry), default_tx)
        .build()
        .map_err(|e| e.to_string())?;
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
    // One CI run saw the program still listed right after the drop (native mode on veth; the link's
    // descriptor is closed in the drop, and why the kernel listed it a moment longer is not pinned
    // down): wait up to a second for it to go, so a program left attached still fails here.
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let out = std::process::Command::new("ip").args(["-d", "link", "show", OURS]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !text.contains("prog/xdp") {
            break;
        }
        assert!(Instant::now() < deadline, "the XDP program is still attached 1 s after drop: {text}");
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((stats, xdp))
}

#[test]
fn generic_mode_echoes_kernel_udp_byte_exact() {
    with_veth(1, || echo(XdpMode::Generic, 2000, 64, None).map(drop));
}

#[test]
fn native_mode_on_veth_echoes_kernel_udp_byte_exact() {
    with_veth(1, || echo(XdpMode::Native, 2000, 64, None).map(drop));
}

/// `XDP_USE_NEED_WAKEUP`: the fill ring is only kicked (`recvfrom`) when the kernel sets its
/// `XDP_RING_NEED_WAKEUP` flag, which a copy-mode socket never does, so a ping-pong of 400
/// datagrams (one frame per burst, the case where a kick per refill would cost one system call
/// per frame) makes none; TX asks for one `sendto` per burst in copy mode (the copy happens there),
/// and bursts of up to 64 datagrams share theirs.
#[test]
fn wakeups_only_when_the_kernel_asks() {
    with_veth(1, || {
        for mode in [XdpMode::Generic, XdpMode::Native] {
            let (stats, xdp) = echo(mode, 400, 1, None)?;
            assert!(stats.rx_packets >= 400, "{stats:?}");
            assert!(
                xdp.rx_wakeups * 20 < stats.rx_packets,
                "{mode:?}: a fill-ring kick per refill: {xdp:?}, {stats:?}"
            );
            assert!(xdp.tx_wakeups <= stats.tx_packets, "{mode:?}: more TX kicks than frames: {xdp:?}");
            assert_eq!(xdp.busy_polls, 0, "no busy polling asked for: {xdp:?}");
            let (stats, xdp) = echo(mode, 2000, 64, None)?;
            assert!(xdp.rx_wakeups * 20 < stats.rx_packets, "{mode:?}: {xdp:?}, {stats:?}");
            assert!(
                xdp.tx_wakeups < stats.tx_packets,
                "{mode:?}: no TX burst shared its kick: {xdp:?}, {stats:?}"
            );
        }
        Ok(())
    });
}

/// With busy polling (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`) the device
/// opens (as root), echoes the same, and runs the NAPI with `recvfrom` after each empty RX burst.
#[test]
fn busy_polling_opens_and_echoes() {
    with_veth(1, || {
        let busy = BusyPoll { prefer: true, usecs: 20, budget: 64 };
        let (stats, xdp) = echo(XdpMode::Native, 500, 16, Some(busy))?;
        assert!(stats.rx_packets >= 500, "{stats:?}");
        assert!(xdp.busy_polls > 0, "an empty RX burst runs the NAPI: {xdp:?}");
        Ok(())
    });
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

/// What one queue's thread saw: the kernel's source ports of the datagrams it received, how many
/// frames it received, and how many it echoed.
#[derive(Debug, Default)]
struct QueueSeen {
    ports: std::collections::BTreeMap<u16, u32>,
    received: u64,
    echoed: u64,
}

/// The UDP source port of an Ethernet/IPv4/UDP frame to `OUR_IP:OUR_PORT`.
fn udp_source_port(f: &[u8]) -> Option<u16> {
    if f.len() < 14 + 20 + 8 || f[12..14] != [0x08, 0x00] || f[14] >> 4 != 4 || f[14 + 9] != 17 {
        return None;
    }
    let udp_at = 14 + usize::from(f[14] & 0x0f) * 4;
    let dst = f.get(udp_at + 2..udp_at + 4)?;
    (f[14 + 16..14 + 20] == OUR_IP.octets() && dst == OUR_PORT.to_be_bytes())
        .then(|| u16::from_be_bytes([f[udp_at], f[udp_at + 1]]))
}

/// A 4-queue veth end split into one `XdpQueue` per queue, each served by its own thread: the kernel
/// sends from many source ports (veth picks the receive queue by the sender's flow hash), every
/// flow's datagrams arrive on one queue's device only, every queue gets traffic, every datagram is
/// echoed back through the queue it arrived on, and the pool is whole afterwards.
#[test]
fn split_queues_each_serve_their_own_nic_queue() {
    const QUEUES: u16 = 4;
    const FLOWS: u16 = 64;
    const PER_FLOW: u32 = 16;
    with_veth(QUEUES, || {
        // The driver says how many queues there are (sysfs would show the namespace it was mounted in).
        assert_eq!(netchannel::dev::xdp::rx_queues(OURS).map_err(|e| e.to_string())?, u32::from(QUEUES));
        let e = netchannel::dev::xdp::rx_queues("ncnope0").unwrap_err();
        assert!(matches!(e, XdpError::NoSuchInterface { .. }), "{e}");
        let pool = Pool::builder(8192).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
        let dev = AfXdp::builder(OURS)
            .queues(0, QUEUES)
            .mode(XdpMode::Native)
            .ring_size(512)
            .fill_size(512)
            .open(&pool)
            .map_err(|e| open_error(&e))?;
        let mac = dev.info().mac.to_string();
        let queues = dev.into_queues();
        assert_eq!(queues.len(), usize::from(QUEUES));
        for (i, q) in queues.iter().enumerate() {
            assert_eq!(q.nic_queue(), u32::try_from(i).unwrap());
            let info = q.info();
            assert_eq!((info.name, info.queues), (format!("{OURS}:{i}"), 1));
            assert_eq!(q.mode(), XdpMode::Native);
        }
        ip(&["neigh", "replace", &OUR_IP.to_string(), "lladdr", &mac, "dev", KERNELS, "nud", "permanent"])?;

        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = queues
            .into_iter()
            .map(|mut dev| {
                let (pool, stop) = (pool.clone(), Arc::clone(&stop));
                std::thread::spawn(move || -> Result<(QueueSeen, netchannel::dev::xdp::XdpQueue), String> {
                    let cache = pool.cache();
                    let mut batch = netchannel::dev::PacketBatch::with_capacity(32);
                    let mut seen = QueueSeen::default();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let _ = dev.wait_rx(0, Some(Duration::from_millis(5)));
                        let n = dev.rx_burst(0, &cache, &mut batch).map_err(|e| e.to_string())?;
                        seen.received += n as u64;
                        for p in batch.as_mut_slice() {
                            if let Some(port) = udp_source_port(p.data()) {
                                *seen.ports.entry(port).or_default() += 1;
                                assert!(echo_in_place(p.data_mut()));
                            }
                        }
                        // Everything else (IPv6 router solicitations) goes back out too: harmless.
                        while !batch.is_empty() {
                            let sent = dev.tx_burst(0, &mut batch).map_err(|e| e.to_string())?;
                            seen.echoed += sent as u64;
                            if sent == 0 {
                                std::thread::yield_now();
                            }
                        }
                    }
                    Ok((seen, dev))
                })
            })
            .collect();

        let socks = (0..FLOWS)
            .map(|_| {
                let s = UdpSocket::bind(SocketAddrV4::new(KERNEL_IP, 0)).map_err(|e| e.to_string())?;
                s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
                Ok(s)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let us = SocketAddr::V4(SocketAddrV4::new(OUR_IP, OUR_PORT));
        let mut buf = vec![0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut result = Ok(());
        'flows: for round in 0..PER_FLOW {
            for (f, s) in socks.iter().enumerate() {
                let d = datagram(round * u32::from(FLOWS) + u32::try_from(f).unwrap());
                s.send_to(&d, us).map_err(|e| format!("send_to: {e}"))?;
                // One in flight per flow: each reply is awaited (the channel between the kernel and a
                // queue never overflows, and a lost reply fails the test instead of hanging it).
                match s.recv_from(&mut buf) {
                    Ok((n, from)) if from == us && buf[..n] == d[..] => {}
                    Ok((n, from)) => {
                        result = Err(format!("flow {f}: a wrong reply of {n} bytes from {from}"));
                        break 'flows;
                    }
                    Err(e) => {
                        result = Err(format!("flow {f}, datagram {round}: no reply ({e})"));
                        break 'flows;
                    }
                }
                if Instant::now() > deadline {
                    result = Err("timed out".to_owned());
                    break 'flows;
                }
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut seen = Vec::new();
        let mut devs = Vec::new();
        for t in threads {
            let (s, d) = t.join().map_err(|_| "a queue thread panicked".to_owned())??;
            seen.push(s);
            devs.push(d);
        }
        for (q, (s, d)) in seen.iter().zip(&devs).enumerate() {
            println!(
                "queue {q}: {} frames, {} flows, {} echoed; {:?}; {:?}",
                s.received,
                s.ports.len(),
                s.echoed,
                d.stats(),
                d.xdp_stats()
            );
        }
        result?;
        // Every flow arrived on exactly one queue, with all of its datagrams.
        let ours: Vec<u16> = socks.iter().map(|s| s.local_addr().unwrap().port()).collect();
        for port in &ours {
            let on: Vec<(usize, u32)> =
                seen.iter().enumerate().filter_map(|(q, s)| s.ports.get(port).map(|&n| (q, n))).collect();
            assert!(
                matches!(on[..], [(_, PER_FLOW)]),
                "flow from port {port} arrived as {on:?} (queue, datagrams)"
            );
        }
        // ... and the flows spread over every queue (64 flows over 4 queues: a queue without one has
        // a probability of about 4e-8).
        for (q, s) in seen.iter().enumerate() {
            assert!(!s.ports.is_empty(), "queue {q} received no flow: {seen:?}");
        }
        for (s, d) in seen.iter().zip(&devs) {
            let st = d.stats();
            assert_eq!((st.rx_packets, st.tx_packets), (s.received, s.echoed), "{st:?}");
            assert_eq!((st.rx_errors, st.rx_dropped, st.tx_dropped), (0, 0, 0), "{st:?}");
        }
        // Dropping the queues one by one: the program stays until the last goes, then the pool is
        // whole again.
        let last = devs.pop().unwrap();
        drop(devs);
        let attached = || {
            let out = std::process::Command::new("ip").args(["-d", "link", "show", OURS]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
        };
        assert!(attached(), "the program went with the first queues");
        drop(last);
        assert!(!attached(), "the XDP program is still attached after the last queue was dropped");
        pool.check_leaks().map_err(|e| e.to_string())
    });
}

/// A frame of a shared buffer (a send by reference: headers in the buffer's headroom) handed to
/// AF_XDP is copied into a plain buffer and sent ([`XdpStats::tx_frames_copied`]): the completion
/// ring names buffers by address and could not release the frame. The kernel gets the datagram
/// byte-exact, the frame is released at once (the next one of the same buffer can go), and the
/// pool has no leak.
#[test]
fn frames_of_shared_buffers_are_copied_and_never_leak() {
    with_veth(1, || {
        let pool = Pool::builder(4096).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
        let mut dev = AfXdp::builder(OURS)
            .queue(0)
            .mode(XdpMode::Generic)
            .ring_size(256)
            .fill_size(256)
            .open(&pool)
            .map_err(|e| open_error(&e))?;
        let mac = dev.info().mac;
        ip(&[
            "neigh",
            "replace",
            &OUR_IP.to_string(),
            "lladdr",
            &mac.to_string(),
            "dev",
            KERNELS,
            "nud",
            "permanent",
        ])?;
        let show = std::process::Command::new("ip")
            .args(["link", "show", KERNELS])
            .output()
            .map_err(|e| e.to_string())?;
        let show = String::from_utf8_lossy(&show.stdout).into_owned();
        let kernel_mac: Vec<u8> = show
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .ok_or(format!("no MAC in {show}"))?
            .split(':')
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        let sock = UdpSocket::bind(SocketAddrV4::new(KERNEL_IP, 9000)).map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
        let cache = pool.cache();
        let body = datagram(5);
        let mut p = cache.alloc().unwrap();
        p.extend_from_slice(&body).unwrap();
        let shared = p.into_shared().unwrap();
        let mut buf = vec![0u8; 2048];
        for round in 0..2 {
            let mut frame = shared.frame(&cache, 42).map_err(|e| format!("round {round}: {e}"))?;
            let h = frame.data_mut();
            h[..6].copy_from_slice(&kernel_mac);
            h[6..12].copy_from_slice(&mac.0);
            h[12..14].copy_from_slice(&[0x08, 0x00]);
            let total = u16::try_from(20 + 8 + body.len()).unwrap();
            h[14..34].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            h[16..18].copy_from_slice(&total.to_be_bytes());
            h[26..30].copy_from_slice(&OUR_IP.octets());
            h[30..34].copy_from_slice(&KERNEL_IP.octets());
            let c = !fold(sum16(&h[14..34], 0));
            h[24..26].copy_from_slice(&c.to_be_bytes());
            h[34..36].copy_from_slice(&OUR_PORT.to_be_bytes());
            h[36..38].copy_from_slice(&9000u16.to_be_bytes());
            h[38..40].copy_from_slice(&(total - 20).to_be_bytes());
            h[40..42].copy_from_slice(&[0, 0]); // no UDP checksum (IPv4 allows it)
            let mut batch = netchannel::dev::PacketBatch::with_capacity(4);
            batch.push(frame).unwrap();
            while !batch.is_empty() {
                dev.tx_burst(0, &mut batch).map_err(|e| e.to_string())?;
            }
            assert!(!shared.frame_in_flight(), "round {round}: the frame was released once copied");
            let (n, from) = sock.recv_from(&mut buf).map_err(|e| format!("round {round}: recv_from: {e}"))?;
            assert_eq!(from, SocketAddr::V4(SocketAddrV4::new(OUR_IP, OUR_PORT)));
            assert_eq!(&buf[..n], &body[..], "round {round}: the datagram arrived changed");
        }
        let xdp = dev.xdp_stats(0).map_err(|e| e.to_string())?;
        assert_eq!(xdp.tx_frames_copied, 2, "{xdp:?}");
        assert_eq!(dev.stats().tx_dropped, 0);
        drop((dev, shared));
        drop(cache);
        pool.check_leaks().map_err(|e| e.to_string())
    });
}
