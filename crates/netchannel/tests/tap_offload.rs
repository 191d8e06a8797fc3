//! TAP offloads with the kernel as peer: a TAP opened with `IFF_VNET_HDR` and checksum/TSO offload
//! in a private network namespace, a kernel TCP socket on one side and a tiny hand-built TCP
//! responder over `Tap::rx_burst`/`tx_burst` on the other.
//!
//! * Receive: a kernel client writes 200 000 bytes to an address behind the TAP; its TSO output
//!   must arrive as frames larger than the MTU that carry segmentation metadata and a trusted
//!   (partial or verified) checksum, and the bytes must be the ones written, in order.
//! * Transmit: one hand-built super-segment (3 x 1448 payload bytes, partial checksum, `gso_type`
//!   TCPV4/TCPV6) to a kernel listener, which must read every byte in order and acknowledge them.
//!
//! Both run over IPv4 and IPv6. A third test checks the path without offloads: it refuses, drops
//! and counts a frame that asks for one. The namespace (`netns_test::in_private_namespace`) holds
//! everything; only addresses inside it are used. Without root or `/dev/net/tun` the tests print
//! `skipped: <why>`.
#![cfg(not(loom))]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use netchannel::dev::{DeviceOffloads, MacAddr, NetDevice, OFFLOAD_DATA_ROOM, PacketBatch, Tap, TapOptions};
use netchannel::pool::{GsoKind, HugePages, Offload, Pool, PoolCache};

use netns_test::ip;

const SYN: u8 = 0x02;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

/// One address family's plan: the kernel's address on the TAP, ours behind it, the MSS we offer.
#[derive(Clone, Copy)]
struct Family {
    kernel: IpAddr,
    peer: IpAddr,
    mss: u16,
    kind: GsoKind,
}

const V4: Family = Family {
    kernel: IpAddr::V4(Ipv4Addr::new(10, 201, 0, 1)),
    peer: IpAddr::V4(Ipv4Addr::new(10, 201, 0, 2)),
    mss: 1460,
    kind: GsoKind::Tcp4,
};

const V6: Family = Family {
    kernel: IpAddr::V6(Ipv6Addr::new(0xfd00, 0x201, 0, 0, 0, 0, 0, 1)),
    peer: IpAddr::V6(Ipv6Addr::new(0xfd00, 0x201, 0, 0, 0, 0, 0, 2)),
    mss: 1440,
    kind: GsoKind::Tcp6,
};

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    u16::try_from(sum).unwrap()
}

fn sum16(bytes: &[u8]) -> u32 {
    bytes.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum()
}

fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The pseudo-header sum (RFC 9293 §3.1, RFC 8200 §8.1) of a TCP segment of `len` bytes.
fn pseudo_sum(src: IpAddr, dst: IpAddr, len: usize) -> u32 {
    let mut p = octets(src);
    p.extend_from_slice(&octets(dst));
    if src.is_ipv4() {
        p.extend_from_slice(&[0, 6]);
        p.extend_from_slice(&u16::try_from(len).unwrap().to_be_bytes());
    } else {
        p.extend_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 6]);
    }
    sum16(&p)
}

/// A TCP segment's fields, to build one.
struct Segment<'a> {
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    flags: u8,
    options: &'a [u8],
    payload: &'a [u8],
}

/// An Ethernet + IP + TCP frame, and where its TCP header starts. With `partial`, the checksum field
/// holds only the pseudo-header sum (for the device to finish); else the full checksum.
fn tcp_frame(dst_mac: MacAddr, src_mac: MacAddr, s: &Segment<'_>, partial: bool) -> (Vec<u8>, usize) {
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac.0);
    f.extend_from_slice(&src_mac.0);
    let tcp_len = 20 + s.options.len() + s.payload.len();
    match (s.src.ip(), s.dst.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&u16::try_from(20 + tcp_len).unwrap().to_be_bytes());
            ip[6] = 0x40;
            ip[8] = 64;
            ip[9] = 6;
            ip[12..16].copy_from_slice(&src.octets());
            ip[16..20].copy_from_slice(&dst.octets());
            let c = !fold(sum16(&ip));
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&u16::try_from(tcp_len).unwrap().to_be_bytes());
            f.extend_from_slice(&[6, 64]);
            f.extend_from_slice(&src.octets());
            f.extend_from_slice(&dst.octets());
        }
        _ => panic!("mixed families"),
    }
    let l4 = f.len();
    f.extend_from_slice(&s.src.port().to_be_bytes());
    f.extend_from_slice(&s.dst.port().to_be_bytes());
    f.extend_from_slice(&s.seq.to_be_bytes());
    f.extend_from_slice(&s.ack.to_be_bytes());
    f.push(u8::try_from((20 + s.options.len()) / 4).unwrap() << 4);
    f.push(s.flags);
    f.extend_from_slice(&65_535u16.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(s.options);
    f.extend_from_slice(s.payload);
    let pseudo = pseudo_sum(s.src.ip(), s.dst.ip(), tcp_len);
    let c = if partial { fold(pseudo) } else { !fold(pseudo + sum16(&f[l4..])) };
    f[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
    (f, l4)
}

/// A received TCP segment: source MAC, addresses, seq, ack, flags, payload.
struct Parsed<'a> {
    src_mac: MacAddr,
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &'a [u8],
}

fn parse(frame: &[u8]) -> Option<Parsed<'_>> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = frame.get(14..)?;
    let (src, dst, l4, end) = match ethertype {
        0x0800 if ip.len() >= 20 && ip[9] == 6 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let src = IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]));
            let dst = IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
            (src, dst, ihl, usize::from(u16::from_be_bytes([ip[2], ip[3]])))
        }
        0x86dd if ip.len() >= 40 && ip[6] == 6 => {
            let src = IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).ok()?));
            let dst = IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).ok()?));
            (src, dst, 40, 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]])))
        }
        _ => return None,
    };
    let tcp = ip.get(l4..end)?;
    let doff = usize::from(*tcp.get(12)? >> 4) * 4;
    let word = |at: usize| u32::from_be_bytes([tcp[at], tcp[at + 1], tcp[at + 2], tcp[at + 3]]);
    Some(Parsed {
        src_mac: MacAddr(frame[6..12].try_into().ok()?),
        src: SocketAddr::new(src, u16::from_be_bytes([tcp[0], tcp[1]])),
        dst: SocketAddr::new(dst, u16::from_be_bytes([tcp[2], tcp[3]])),
        seq: word(4),
        ack: word(8),
        flags: tcp[13],
        payload: tcp.get(doff..)?,
    })
}

fn send(tap: &mut Tap, cache: &PoolCache, frame: &[u8], offload: Offload) -> Result<(), String> {
    let mut packet = cache.alloc().ok_or("no buffer")?;
    packet.extend_from_slice(frame).map_err(|e| e.to_string())?;
    packet.set_offload(offload);
    let mut batch = PacketBatch::with_capacity(1);
    batch.push(packet).map_err(|_| "batch full")?;
    let before = tap.stats().tx_packets;
    tap.tx_burst(0, &mut batch).map_err(|e| e.to_string())?;
    if tap.stats().tx_packets != before + 1 {
        return Err(format!("the TAP did not send a {}-byte frame: {:?}", frame.len(), tap.stats()));
    }
    Ok(())
}

/// Reads frames for up to `limit`, handing each TCP one to `on` (with its offload and frame length)
/// until it returns `true`.
fn receive(
    tap: &mut Tap,
    cache: &PoolCache,
    limit: Duration,
    mut on: impl FnMut(&mut Tap, &Parsed<'_>, Offload, usize) -> Result<bool, String>,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let mut batch = PacketBatch::with_capacity(16);
    while Instant::now() < deadline {
        tap.wait_readable(Some(Duration::from_millis(50))).map_err(|e| e.to_string())?;
        tap.rx_burst(0, cache, &mut batch).map_err(|e| e.to_string())?;
        for packet in batch.drain() {
            if let Some(seg) = parse(packet.data())
                && on(tap, &seg, packet.offload(), packet.len())?
            {
                return Ok(());
            }
        }
    }
    Err("timed out".into())
}

fn pattern(n: usize, salt: usize) -> Vec<u8> {
    (0..n).map(|i| u8::try_from((i * 7 + salt) % 251).unwrap()).collect()
}

fn setup(iface: &str, fam: Family, tap: &Tap) -> Result<(), String> {
    let (prefix, nodad): (u8, &[&str]) = if fam.kernel.is_ipv4() { (24, &[]) } else { (64, &["nodad"]) };
    let mut args = vec!["addr", "add"];
    let cidr = format!("{}/{prefix}", fam.kernel);
    args.extend_from_slice(&[&cidr, "dev", iface]);
    args.extend_from_slice(nodad);
    ip(&args)?;
    ip(&["link", "set", iface, "up"])?;
    let (peer, mac) = (fam.peer.to_string(), tap.info().mac.to_string());
    ip(&["neigh", "add", &peer, "lladdr", &mac, "dev", iface, "nud", "permanent"])
}

/// (a): the kernel sends 200 000 bytes through the TAP; its super-segments arrive whole.
fn kernel_sends(tap: &mut Tap, cache: &PoolCache, fam: Family) -> Result<MacAddr, String> {
    const TOTAL: usize = 200_000;
    const ISS: u32 = 0x1000_0000;
    let peer = SocketAddr::new(fam.peer, 7001);
    let sent = pattern(TOTAL, 3);
    let to_send = sent.clone();
    let client = std::thread::spawn(move || -> Result<(), String> {
        let mut s =
            TcpStream::connect_timeout(&peer, Duration::from_secs(5)).map_err(|e| format!("connect: {e}"))?;
        s.set_write_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        s.write_all(&to_send).map_err(|e| format!("write: {e}"))
    });
    let our_mac = tap.info().mac;
    let mtu = tap.info().mtu;
    let [hi, lo] = fam.mss.to_be_bytes();
    let mss_option = [2, 4, hi, lo];
    let (mut rcv_nxt, mut kernel_mac, mut got, mut super_frames) = (None::<u32>, None, Vec::new(), 0);
    let mut largest = 0;
    receive(tap, cache, Duration::from_secs(15), |tap, seg, offload, len| {
        if seg.dst != peer {
            return Ok(false);
        }
        kernel_mac = Some(seg.src_mac);
        let dst = seg.src;
        let reply =
            |seq, ack, flags, options| Segment { src: peer, dst, seq, ack, flags, options, payload: &[] };
        if seg.flags & SYN != 0 {
            let nxt = seg.seq.wrapping_add(1);
            rcv_nxt = Some(nxt);
            let (f, _) = tcp_frame(seg.src_mac, our_mac, &reply(ISS, nxt, SYN | ACK, &mss_option[..]), false);
            send(tap, cache, &f, Offload::NONE)?;
            return Ok(false);
        }
        let Some(nxt) = rcv_nxt else { return Ok(false) };
        if len > 14 + mtu {
            // Larger than the MTU: only a super-segment can be, and it must say so.
            let Some((kind, mss, header_len)) = offload.segmentation() else {
                return Err(format!("a {len}-byte frame without segmentation metadata: {offload:?}"));
            };
            let l4 = if fam.kernel.is_ipv4() { 34 } else { 54 };
            assert_eq!((kind, mss, usize::from(header_len)), (fam.kind, fam.mss, l4 + 20), "{offload:?}");
            assert!(
                offload.checksum_trusted(),
                "a super-segment's checksum is partial or verified: {offload:?}"
            );
            if let Some((start, offset)) = offload.partial_checksum() {
                assert_eq!((usize::from(start), offset), (l4, 16));
            }
            super_frames += 1;
            largest = largest.max(len);
        }
        let mut fin = false;
        let mut nxt = nxt;
        if seg.seq == nxt {
            got.extend_from_slice(seg.payload);
            nxt = nxt.wrapping_add(u32::try_from(seg.payload.len()).unwrap());
            if seg.flags & FIN != 0 {
                nxt = nxt.wrapping_add(1);
                fin = true;
            }
            rcv_nxt = Some(nxt);
        }
        if !seg.payload.is_empty() || seg.flags & FIN != 0 {
            let (f, _) = tcp_frame(seg.src_mac, our_mac, &reply(ISS + 1, nxt, ACK, &[]), false);
            send(tap, cache, &f, Offload::NONE)?;
        }
        Ok(fin || got.len() >= TOTAL)
    })
    .map_err(|e| format!("receiving the kernel's {TOTAL} bytes: {e} after {} bytes", got.len()))?;
    client.join().map_err(|_| "the client panicked")??;
    assert!(got == sent, "the kernel's bytes, in order ({} of {TOTAL} received)", got.len());
    assert!(super_frames > 0, "no frame larger than the MTU came through: is TSO on? {:?}", tap.tap_stats());
    assert_eq!(tap.tap_stats().rx_coalesced, super_frames);
    assert_eq!(tap.tap_stats().rx_bad_vnet_header, 0);
    eprintln!(
        "{:?}: {TOTAL} bytes from the kernel in {} frames, {super_frames} of them super-segments, the largest {largest} bytes",
        fam.kind,
        tap.stats().rx_packets
    );
    kernel_mac.ok_or_else(|| "no frame from the kernel".to_owned())
}

/// (b): we send one super-segment of 3 x 1448 bytes; the kernel's socket reads them all.
fn kernel_receives(tap: &mut Tap, cache: &PoolCache, fam: Family, kernel_mac: MacAddr) -> Result<(), String> {
    const MSS: u16 = 1448;
    let listener = TcpListener::bind(SocketAddr::new(fam.kernel, 0)).map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let server_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = std::thread::spawn(move || -> Result<Vec<u8>, String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(format!("accept: {e}")),
            }
        };
        stream.set_nonblocking(false).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        let mut all = Vec::new();
        stream.read_to_end(&mut all).map_err(|e| format!("read: {e}"))?;
        Ok(all)
    });
    let our_mac = tap.info().mac;
    let us = SocketAddr::new(fam.peer, 7002);
    let iss = 5000u32;
    let [hi, lo] = fam.mss.to_be_bytes();
    let mss_option = [2, 4, hi, lo];
    let syn = Segment {
        src: us,
        dst: server_addr,
        seq: iss,
        ack: 0,
        flags: SYN,
        options: &mss_option,
        payload: &[],
    };
    send(tap, cache, &tcp_frame(kernel_mac, our_mac, &syn, false).0, Offload::NONE)?;
    let mut kernel_iss = 0;
    receive(tap, cache, Duration::from_secs(5), |_, seg, _, _| {
        kernel_iss = seg.seq;
        Ok(seg.dst == us && seg.flags & (SYN | ACK) == SYN | ACK && seg.ack == iss + 1)
    })
    .map_err(|e| format!("waiting for the kernel's SYN/ACK: {e}"))?;
    let ack = kernel_iss.wrapping_add(1);
    let handshake = Segment { seq: iss + 1, ack, flags: ACK, ..syn };
    send(tap, cache, &tcp_frame(kernel_mac, our_mac, &handshake, false).0, Offload::NONE)?;

    let payload = pattern(3 * usize::from(MSS), 11);
    let big = Segment { seq: iss + 1, ack, flags: ACK | PSH, options: &[], payload: &payload, ..syn };
    let (frame, l4) = tcp_frame(kernel_mac, our_mac, &big, true);
    let offload = Offload::NONE.with_partial_checksum(u16::try_from(l4).unwrap(), 16).with_segmentation(
        fam.kind,
        MSS,
        u16::try_from(l4 + 20).unwrap(),
    );
    send(tap, cache, &frame, offload)?;
    assert_eq!(tap.tap_stats().tx_super_segments, 1);
    let end = iss + 1 + u32::try_from(payload.len()).unwrap();
    receive(tap, cache, Duration::from_secs(5), |_, seg, _, _| Ok(seg.dst == us && seg.ack == end))
        .map_err(|e| format!("waiting for the kernel to acknowledge the super-segment: {e}"))?;
    let fin = Segment { seq: end, ack, flags: ACK | FIN, options: &[], payload: &[], ..syn };
    send(tap, cache, &tcp_frame(kernel_mac, our_mac, &fin, false).0, Offload::NONE)?;
    let read = server.join().map_err(|_| "the server panicked")??;
    assert!(read == payload, "the kernel read {} of {} bytes, or other bytes", read.len(), payload.len());
    Ok(())
}

fn both_ways(iface: &'static str, fam: Family) -> Result<(), String> {
    let mut tap = Tap::open_with(iface, TapOptions { offloads: true }).map_err(|e| e.to_string())?;
    let offloads = tap.info().offloads;
    assert_eq!(
        offloads,
        DeviceOffloads { tx_checksum: true, tx_tso_max: 65_535, rx_coalesced: true, rx_checksum: true }
    );
    setup(iface, fam, &tap)?;

    // A pool whose buffers cannot hold a 64 KiB frame is refused, with the fix in the message.
    let small = Pool::builder(4).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
    let small_cache = small.cache();
    let err = tap.rx_burst(0, &small_cache, &mut PacketBatch::with_capacity(4)).unwrap_err().to_string();
    assert!(err.contains("data_room(netchannel::dev::OFFLOAD_DATA_ROOM)"), "{err}");
    drop(small_cache);

    let pool = Pool::builder(64)
        .data_room(OFFLOAD_DATA_ROOM)
        .hugepages(HugePages::Never)
        .build()
        .map_err(|e| e.to_string())?;
    let cache = pool.cache();
    let kernel_mac = kernel_sends(&mut tap, &cache, fam)?;
    kernel_receives(&mut tap, &cache, fam, kernel_mac)?;
    drop(cache);
    pool.check_leaks().map_err(|e| e.to_string())
}

#[test]
fn ipv4_super_segments_both_ways_with_the_kernel() {
    netns_test::in_private_namespace(|| both_ways("ncoff4", V4));
}

#[test]
fn ipv6_super_segments_both_ways_with_the_kernel() {
    netns_test::in_private_namespace(|| both_ways("ncoff6", V6));
}

#[test]
fn a_tap_without_offloads_refuses_frames_that_ask_for_them() {
    netns_test::in_private_namespace(|| {
        let mut tap = Tap::open("ncplain0").map_err(|e| e.to_string())?;
        assert_eq!(tap.info().offloads, DeviceOffloads::NONE);
        ip(&["link", "set", "ncplain0", "up"])?;
        let pool = Pool::builder(8).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(4);
        let asks = [
            Offload::NONE.with_partial_checksum(34, 16),
            Offload::NONE.with_partial_checksum(34, 16).with_segmentation(GsoKind::Tcp4, 1448, 54),
            // A received frame's report (verified) asks nothing: it is sent like any frame.
            Offload::NONE.with_checksum_verified(),
        ];
        for offload in asks {
            let mut p = cache.alloc().ok_or("no buffer")?;
            p.extend_from_slice(&[0xff; 60]).map_err(|e| e.to_string())?;
            p.set_offload(offload);
            batch.push(p).map_err(|_| "full")?;
        }
        assert_eq!(tap.tx_burst(0, &mut batch).map_err(|e| e.to_string())?, 3);
        let (stats, tap_stats) = (tap.stats(), tap.tap_stats());
        assert_eq!((stats.tx_packets, stats.tx_dropped, tap_stats.tx_offload_refused), (1, 2, 2));
        drop(batch);
        drop(cache);
        pool.check_leaks().map_err(|e| e.to_string())
    });
}
