//! The IPv6 wire formats against the Linux kernel, over a TAP device in a private network namespace
//! (no stack yet: the test reads and writes frames on the TAP itself).
//!
//! What the kernel sends must parse with verified checksums, and what we emit must be accepted by
//! the kernel, which drops bad checksums and malformed Neighbor Discovery silently:
//!
//! * When the TAP comes up the kernel joins multicast groups and announces them with MLDv2 reports
//!   (a Hop-by-Hop header with Router Alert in front of ICMPv6, RFC 3810), runs duplicate address
//!   detection for its link-local address (a neighbour solicitation from `::`, RFC 4862 §5.4) and
//!   solicits routers (a router solicitation with its source link-layer address). Each is parsed.
//! * Our router advertisement (prefix `2001:db8:1::/64` with L and A, MTU 1400, source link-layer
//!   option, router lifetime 1800 s) must make the kernel configure `2001:db8:1::` plus the
//!   modified EUI-64 of its MAC (our `addr::with_interface_id`), the MTU and a default route.
//! * A UDP datagram from the kernel to an unresolved neighbour makes it send a neighbour
//!   solicitation to the solicited-node group; our advertisement must release the datagram to our
//!   MAC, and that datagram's checksum must verify.
//! * Our echo request must draw an echo reply; our UDP datagram must reach a kernel socket.
//! * The kernel's TCP SYN over IPv6 must parse (checksum verified) and our RST (`emit_v6`) must
//!   refuse its connection at once.
//!
//! Without root, `/dev/net/tun` or iproute2 the test prints `skipped: <why>` (`netns_test::skip`).
//! It takes about a second.

use std::net::{Ipv6Addr, SocketAddrV6, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use netchannel::dev::{NetDevice, PacketBatch, Tap};
use netchannel::pool::{HugePages, Pool, PoolCache};
use netns_test::{in_private_namespace, ip};
use tcp_lib::wire::ipv6::addr;
use tcp_lib::wire::ndp::{PrefixInfo, Prefixes};
use tcp_lib::wire::{
    ChecksumPolicy, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    Ipv6Packet, Ipv6Repr, NdpRepr, Protocol, SeqNumber, TcpControl, TcpPacket, TcpRepr, UdpPacket, UdpRepr,
};

const IFACE: &str = "k6tap0";
const KERNEL: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
/// Our address, a static neighbour of the kernel's.
const US: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
/// An address the kernel must resolve with a neighbour solicitation.
const UNRESOLVED: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 3);
const ROUTER: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
const OUR_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const DEADLINE: Duration = Duration::from_secs(10);

/// An IPv6 packet the kernel sent, parsed: header, upper-layer bytes.
struct Received {
    src_mac: EthernetAddress,
    header: Ipv6Repr,
    payload: Vec<u8>,
}

struct Wire {
    tap: Tap,
    cache: PoolCache,
    seen: Vec<Received>,
}

impl Wire {
    /// Reads frames until `want` matches one (it is returned) or the deadline passes. Every IPv6
    /// frame must parse; ICMPv6, UDP and TCP checksums must verify.
    fn until<T>(&mut self, what: &str, mut want: impl FnMut(&Received) -> Option<T>) -> Result<T, String> {
        let end = Instant::now() + DEADLINE;
        loop {
            // Frames that matched nothing yet stay for the next call (at most the last 256).
            if let Some((i, t)) = self.seen.iter().enumerate().find_map(|(i, r)| want(r).map(|t| (i, t))) {
                self.seen.remove(i);
                return Ok(t);
            }
            let excess = self.seen.len().saturating_sub(256);
            self.seen.drain(..excess);
            if Instant::now() > end {
                return Err(format!("the kernel never sent {what}"));
            }
            let _ = self.tap.wait_readable(Some(Duration::from_millis(20)));
            let mut batch = PacketBatch::with_capacity(32);
            self.tap.rx_burst(0, &self.cache, &mut batch).map_err(|e| format!("rx_burst: {e}"))?;
            for p in batch.drain() {
                if let Some(r) = parse(p.data())? {
                    self.seen.push(r);
                }
            }
        }
    }

    /// Sends `payload` (the upper layer of `header`) in a frame to `dst_mac`.
    fn send(
        &mut self,
        dst_mac: EthernetAddress,
        header: Ipv6Repr,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), String> {
        let eth =
            EthernetRepr { src_addr: OUR_MAC, dst_addr: dst_mac, vlan: None, ethertype: EtherType::Ipv6 };
        let mut bytes = vec![0u8; eth.buffer_len(header.buffer_len())];
        let mut frame = EthernetFrame::new_unchecked(&mut bytes[..]);
        eth.emit(&mut frame);
        let mut packet = Ipv6Packet::new_unchecked(frame.payload_mut());
        header.emit(&mut packet);
        fill(packet.payload_mut());
        let mut p = self.cache.alloc().ok_or("pool empty")?;
        p.extend_from_slice(&bytes).map_err(|e| format!("{e:?}"))?;
        let mut batch = PacketBatch::with_capacity(1);
        let _ = batch.push(p);
        let sent = self.tap.tx_burst(0, &mut batch).map_err(|e| format!("tx_burst: {e}"))?;
        if sent != 1 { Err("the TAP took no frame".into()) } else { Ok(()) }
    }
}

fn parse(frame: &[u8]) -> Result<Option<Received>, String> {
    let frame = EthernetFrame::new_checked(frame).map_err(|e| format!("frame: {e}"))?;
    if frame.ethertype() != EtherType::Ipv6 {
        return Ok(None);
    }
    let packet = Ipv6Packet::new_checked(frame.payload()).map_err(|e| format!("IPv6: {e}"))?;
    let (header, payload) = Ipv6Repr::parse_with_payload(&packet).map_err(|e| format!("IPv6 header: {e}"))?;
    let (src, dst) = (header.src_addr, header.dst_addr);
    let ok = match header.next_header {
        Protocol::Icmpv6 => Icmpv6Packet::new_checked(payload).is_ok_and(|p| p.verify_checksum(src, dst)),
        Protocol::Udp => UdpPacket::new_checked(payload).is_ok_and(|p| p.verify_checksum_v6(src, dst)),
        Protocol::Tcp => TcpPacket::new_checked(payload).is_ok_and(|p| p.verify_checksum_v6(src, dst)),
        other => return Err(format!("the kernel sent {other:?} in IPv6")),
    };
    if !ok {
        return Err(format!("{:?} from {src} to {dst}: the checksum does not verify", header.next_header));
    }
    let src_mac = frame.src_addr();
    Ok(Some(Received { src_mac, header, payload: payload.to_vec() }))
}

fn icmp(r: &Received) -> Option<Icmpv6Repr<'_>> {
    if r.header.next_header != Protocol::Icmpv6 {
        return None;
    }
    let p = Icmpv6Packet::new_checked(&r.payload[..]).ok()?;
    Icmpv6Repr::parse(&p, r.header.src_addr, r.header.dst_addr, ChecksumPolicy::Verify).ok()
}

fn header(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next_header: Protocol,
    payload_len: usize,
    hop_limit: u8,
) -> Ipv6Repr {
    Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header,
        payload_len,
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    }
}

fn sysctl(name: &str, value: &str) -> Result<(), String> {
    let path = format!("/proc/sys/net/ipv6/conf/{IFACE}/{name}");
    std::fs::write(&path, value).map_err(|e| format!("write {path}: {e}"))
}

fn kernel_has(args: &[&str], needle: &str) -> Result<bool, String> {
    let out = std::process::Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).contains(needle))
}

/// The MAC of the kernel's side of the TAP, from `ip -br link` (this thread's namespace; `/sys`
/// shows the namespace it was mounted in).
fn kernel_mac() -> Result<EthernetAddress, String> {
    let out = std::process::Command::new("ip")
        .args(["-br", "link", "show", "dev", IFACE])
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mac = text.split_whitespace().nth(2).unwrap_or_default();
    let bytes: Vec<u8> = mac.split(':').filter_map(|b| u8::from_str_radix(b, 16).ok()).collect();
    EthernetAddress::from_bytes(&bytes).ok_or_else(|| format!("ip -br link: {text:?} has no MAC"))
}

fn run() -> Result<(), String> {
    let tap = Tap::open(IFACE).map_err(|e| format!("Tap::open: {e}"))?;
    let pool = Pool::builder(1024).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
    // The kernel's side of the TAP has its own MAC (`tap.info().mac` is the one for our side).
    let kernel_mac = kernel_mac()?;
    ip(&["link", "set", "lo", "up"])?;
    // Solicit routers at once (the default waits up to a second) and accept our advertisement.
    sysctl("router_solicitation_delay", "0")?;
    sysctl("accept_ra", "1")?;
    ip(&["-6", "addr", "add", &format!("{KERNEL}/64"), "dev", IFACE, "nodad"])?;
    ip(&["-6", "neigh", "add", &US.to_string(), "lladdr", "02:00:00:00:00:02", "dev", IFACE])?;
    ip(&["link", "set", IFACE, "up"])?;
    let mut wire = Wire { tap, cache: pool.cache(), seen: Vec::new() };
    let link_local = addr::link_local(kernel_mac);

    // What the kernel sends by itself: MLDv2 reports behind Hop-by-Hop, DAD, a router solicitation.
    wire.until("an MLDv2 report", |r| {
        let p = Icmpv6Packet::new_checked(&r.payload[..]).ok()?;
        (r.header.next_header == Protocol::Icmpv6 && p.msg_type() == 143).then_some(())
    })?;
    let dad = wire.until("a DAD neighbour solicitation", |r| match icmp(r) {
        Some(Icmpv6Repr::Ndp(NdpRepr::NeighborSolicit { target, lladdr }))
            if r.header.src_addr.is_unspecified() =>
        {
            Some((target, lladdr, r.header))
        }
        _ => None,
    })?;
    assert_eq!(dad.0, link_local, "DAD is for the modified EUI-64 link-local address");
    assert_eq!(dad.1, None, "no source link-layer option from the unspecified address (RFC 4861 §4.3)");
    assert_eq!((dad.2.dst_addr, dad.2.hop_limit), (addr::solicited_node(link_local), 255));
    let rs = wire.until("a router solicitation", |r| match icmp(r) {
        Some(Icmpv6Repr::Ndp(NdpRepr::RouterSolicit { lladdr })) => {
            Some((lladdr, r.header.dst_addr, r.src_mac))
        }
        _ => None,
    })?;
    assert_eq!(rs, (Some(kernel_mac), addr::ALL_ROUTERS, kernel_mac));

    // Our router advertisement configures the kernel.
    let mut prefixes = Prefixes::default();
    prefixes.push(PrefixInfo {
        prefix: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0),
        prefix_len: 64,
        on_link: true,
        autonomous: true,
        valid_lifetime: 86400,
        preferred_lifetime: 14400,
    });
    let ra = Icmpv6Repr::Ndp(NdpRepr::RouterAdvert {
        hop_limit: 64,
        managed: false,
        other: false,
        router_lifetime: 1800,
        reachable_time: 0,
        retrans_time: 0,
        lladdr: Some(EthernetAddress([0x02, 0, 0, 0, 0, 0x01])),
        mtu: Some(1400),
        prefixes,
    });
    let h = header(ROUTER, addr::ALL_NODES, Protocol::Icmpv6, ra.buffer_len(), 255);
    wire.send(addr::multicast_mac(addr::ALL_NODES), h, |b| {
        ra.emit(&mut Icmpv6Packet::new_unchecked(b), ROUTER, addr::ALL_NODES);
    })?;
    let slaac = addr::with_interface_id(
        Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0),
        addr::interface_id(kernel_mac),
    );
    let end = Instant::now() + DEADLINE;
    while !(kernel_has(&["-6", "addr", "show", "dev", IFACE], &slaac.to_string())?
        && kernel_has(&["-6", "route", "show", "default"], "via fe80::1")?)
    {
        if Instant::now() > end {
            return Err(format!(
                "the kernel did not take our router advertisement (no {slaac} or default route)"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mtu =
        std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{IFACE}/mtu")).map_err(|e| e.to_string())?;
    assert_eq!(mtu.trim(), "1400", "the MTU option");

    // A datagram to an unresolved neighbour: the kernel solicits, our advertisement releases it.
    let socket = UdpSocket::bind(SocketAddrV6::new(KERNEL, 7777, 0, 0)).map_err(|e| e.to_string())?;
    socket.send_to(b"to ::3", SocketAddrV6::new(UNRESOLVED, 9, 0, 0)).map_err(|e| e.to_string())?;
    let ns = wire.until("a neighbour solicitation for ::3", |r| match icmp(r) {
        Some(Icmpv6Repr::Ndp(NdpRepr::NeighborSolicit { target, lladdr })) if target == UNRESOLVED => {
            Some((lladdr, r.header))
        }
        _ => None,
    })?;
    assert_eq!(ns.0, Some(kernel_mac));
    assert_eq!((ns.1.dst_addr, ns.1.hop_limit), (addr::solicited_node(UNRESOLVED), 255));
    let na = Icmpv6Repr::Ndp(NdpRepr::NeighborAdvert {
        router: false,
        solicited: true,
        override_: true,
        target: UNRESOLVED,
        lladdr: Some(OUR_MAC),
    });
    wire.send(kernel_mac, header(UNRESOLVED, KERNEL, Protocol::Icmpv6, na.buffer_len(), 255), |b| {
        na.emit(&mut Icmpv6Packet::new_unchecked(b), UNRESOLVED, KERNEL);
    })?;
    let udp = wire.until("the datagram to ::3", |r| {
        (r.header.next_header == Protocol::Udp && r.header.dst_addr == UNRESOLVED).then(|| r.payload.clone())
    })?;
    let p = UdpPacket::new_checked(&udp[..]).map_err(|e| e.to_string())?;
    let repr =
        UdpRepr::parse_v6(&p, KERNEL, UNRESOLVED, ChecksumPolicy::Verify).map_err(|e| e.to_string())?;
    assert_eq!((repr.src_port, repr.dst_port, repr.payload), (7777, 9, &b"to ::3"[..]));

    // Our echo request draws a reply; our datagram reaches the socket.
    let echo = Icmpv6Repr::EchoRequest { ident: 0x4242, seq_no: 7, data: b"wire_ipv6" };
    wire.send(kernel_mac, header(US, KERNEL, Protocol::Icmpv6, echo.buffer_len(), 64), |b| {
        echo.emit(&mut Icmpv6Packet::new_unchecked(b), US, KERNEL);
    })?;
    wire.until("an echo reply", |r| match icmp(r) {
        Some(Icmpv6Repr::EchoReply { ident: 0x4242, seq_no: 7, data }) if data == b"wire_ipv6" => Some(()),
        _ => None,
    })?;
    let dgram = UdpRepr { src_port: 5555, dst_port: 7777, payload: b"from us" };
    wire.send(kernel_mac, header(US, KERNEL, Protocol::Udp, dgram.buffer_len(), 64), |b| {
        dgram.emit_v6(&mut UdpPacket::new_unchecked(b), US, KERNEL);
    })?;
    socket.set_read_timeout(Some(DEADLINE)).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    let (n, from) =
        socket.recv_from(&mut buf).map_err(|e| format!("the kernel dropped our datagram: {e}"))?;
    assert_eq!((&buf[..n], from.port()), (&b"from us"[..], 5555));

    // The kernel's SYN over IPv6, and our RST refusing it.
    let connect = std::thread::spawn(|| {
        TcpStream::connect_timeout(&SocketAddrV6::new(US, 80, 0, 0).into(), DEADLINE)
            .map(|_| ())
            .map_err(|e| e.kind())
    });
    let syn = wire.until("a SYN", |r| {
        let p = TcpPacket::new_checked(&r.payload[..]).ok()?;
        let tcp = TcpRepr::parse_v6(&p, r.header.src_addr, r.header.dst_addr, ChecksumPolicy::Verify).ok()?;
        (r.header.next_header == Protocol::Tcp && tcp.control == TcpControl::Syn).then_some((
            tcp.src_port,
            tcp.seq_number,
            tcp.max_seg_size,
        ))
    })?;
    assert_eq!(syn.2, Some(1400 - 60), "the MSS follows the MTU our advertisement set");
    let rst = TcpRepr {
        src_port: 80,
        dst_port: syn.0,
        control: TcpControl::Rst,
        seq_number: SeqNumber::new(0),
        ack_number: Some(syn.1 + 1),
        ..TcpRepr::default()
    };
    wire.send(kernel_mac, header(US, KERNEL, Protocol::Tcp, rst.buffer_len(), 64), |b| {
        rst.emit_v6(&mut TcpPacket::new_unchecked(b), US, KERNEL);
    })?;
    let refused = connect.join().map_err(|_| "the connect thread panicked")?;
    assert_eq!(refused, Err(std::io::ErrorKind::ConnectionRefused), "our RST refuses the connection");
    Ok(())
}

#[test]
fn kernel_speaks_our_ipv6() {
    in_private_namespace(run);
}
