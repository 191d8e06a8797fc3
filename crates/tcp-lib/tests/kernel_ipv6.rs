//! IPv6 with the Linux kernel as the peer, on a TAP in a private network namespace, beyond the TCP
//! suite `kernel_tap.rs` runs over both families:
//!
//! * ping6 both ways: the kernel's echo requests (a raw ICMPv6 socket) answered by our stack, ours
//!   answered by the kernel;
//! * Neighbor Discovery with the kernel's own neighbour cache: after the exchange the kernel lists
//!   our address with our MAC (`ip -6 neigh`), and our cache holds the kernel's MAC;
//! * path MTU discovery from a Packet Too Big the kernel sends as a router: two of our stacks on
//!   two TAPs, the kernel forwarding between them with an MTU of 1280 on the second link (the
//!   receiver, whose own MTU is 1500, announces an MSS of 1440); the sender's 1500-byte segments
//!   draw the kernel's Packet Too Big, its MSS falls to what 1280 bytes carry, and the transfer
//!   completes byte-exact.
//!
//! Needs root and `/dev/net/tun`; otherwise each test prints `skipped: <why>`.
#![cfg(not(loom))]

mod kernel_support;

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

use kernel_support::{
    Host, IFACE, KERNEL_IP6, STACK_IP6, in_private_namespace, ip, new_pool, open_tap, stack_config,
};
use netchannel::dev::{NetDevice, Tap};
use tcp_lib::stack::{Config, Stack};
use tcp_lib::wire::{EthernetAddress, Ipv6Cidr};

/// A raw ICMPv6 socket (the kernel fills the checksum of what it sends).
fn icmp6_socket() -> Result<OwnedFd, String> {
    // SAFETY: socket(2) with constant arguments; the descriptor is owned at once.
    let fd =
        unsafe { libc::socket(libc::AF_INET6, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::IPPROTO_ICMPV6) };
    if fd < 0 {
        return Err(format!("socket(AF_INET6, SOCK_RAW, ICMPV6): {}", io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let tv = libc::timeval { tv_sec: 0, tv_usec: 20_000 };
    let len = libc::socklen_t::try_from(size_of::<libc::timeval>()).unwrap_or(16);
    // SAFETY: `tv` is a live timeval for the call and `len` its size.
    let r = unsafe {
        libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&raw const tv).cast(), len)
    };
    if r != 0 {
        return Err(format!("SO_RCVTIMEO: {}", io::Error::last_os_error()));
    }
    Ok(fd)
}

fn sockaddr6(addr: Ipv6Addr) -> libc::sockaddr_in6 {
    // SAFETY: sockaddr_in6 is plain old data; all zeroes is a valid value.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    sa.sin6_family = libc::sa_family_t::try_from(libc::AF_INET6).unwrap_or(10);
    sa.sin6_addr.s6_addr = addr.octets();
    sa
}

/// Sends an echo request (`ident`, `seq`, 16 bytes of data) from the kernel to `dst`.
fn kernel_echo_request(fd: &OwnedFd, dst: Ipv6Addr, ident: u16, seq: u16) -> Result<(), String> {
    let mut msg = [0u8; 24];
    msg[0] = 128;
    msg[4..6].copy_from_slice(&ident.to_be_bytes());
    msg[6..8].copy_from_slice(&seq.to_be_bytes());
    msg[8..].copy_from_slice(b"kernel ping six!");
    let sa = sockaddr6(dst);
    let len = libc::socklen_t::try_from(size_of::<libc::sockaddr_in6>()).unwrap_or(28);
    // SAFETY: `msg` and `sa` are live for the call; the lengths are theirs.
    let n = unsafe {
        libc::sendto(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0, (&raw const sa).cast(), len)
    };
    if n < 0 {
        return Err(format!("sendto {dst}: {}", io::Error::last_os_error()));
    }
    Ok(())
}

/// The echo replies with `ident` waiting on the socket: their sequence numbers.
fn kernel_echo_replies(fd: &OwnedFd, ident: u16) -> Vec<u16> {
    let mut seqs = Vec::new();
    let mut buf = [0u8; 1500];
    loop {
        // SAFETY: `buf` is live and writable for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        let Ok(n) = usize::try_from(n) else { return seqs };
        if n >= 8 && buf[0] == 129 && u16::from_be_bytes([buf[4], buf[5]]) == ident {
            seqs.push(u16::from_be_bytes([buf[6], buf[7]]));
        }
    }
}

/// The kernel side's MAC of `iface` (from `ip -br link`: `/sys` shows the namespace the test
/// started in).
fn tap_mac(iface: &str) -> Result<EthernetAddress, String> {
    let out =
        Command::new("ip").args(["-br", "link", "show", "dev", iface]).output().map_err(|e| e.to_string())?;
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    let word = s.split_whitespace().nth(2).unwrap_or_default();
    let bytes: Vec<u8> = word.split(':').filter_map(|h| u8::from_str_radix(h, 16).ok()).collect();
    <[u8; 6]>::try_from(bytes).map(EthernetAddress).map_err(|_| format!("MAC of {iface}: {s}"))
}

#[test]
fn ping6_both_ways_and_the_kernels_neighbour_cache() {
    in_private_namespace(|| {
        let tap = open_tap()?;
        let config = stack_config(&tap);
        let our_mac = config.mac;
        let mut host = Host::new(tap, config)?;
        let fd = icmp6_socket()?;
        const IDENT: u16 = 0x6b70;
        let mut answered = Vec::new();
        let mut next_seq = 0u16;
        let mut last_sent = Instant::now() - Duration::from_secs(1);
        host.run(Duration::from_secs(10), "the kernel's pings answered", |_| {
            if next_seq < 3 && last_sent.elapsed() > Duration::from_millis(100) {
                kernel_echo_request(&fd, STACK_IP6, IDENT, next_seq)?;
                next_seq += 1;
                last_sent = Instant::now();
            }
            answered.extend(kernel_echo_replies(&fd, IDENT));
            Ok(answered.len() >= 3)
        })?;
        answered.sort_unstable();
        if answered != [0, 1, 2] {
            return Err(format!("the kernel's echo requests answered: {answered:?}"));
        }
        // Ours to the kernel.
        host.stack.ping(KERNEL_IP6, 9, 1, b"our ping six").map_err(|e| e.to_string())?;
        let mut reply = None;
        host.run(Duration::from_secs(5), "our ping answered", |stack| {
            reply = reply.or_else(|| stack.take_ping_reply());
            Ok(reply.is_some())
        })?;
        let reply = reply.ok_or("no reply")?;
        if reply.from != IpAddr::V6(KERNEL_IP6) || reply.len != 12 {
            return Err(format!("reply {reply:?}"));
        }
        // Both neighbour caches.
        let kernel_mac = tap_mac(IFACE)?;
        if host.stack.arp_lookup(KERNEL_IP6) != Some(kernel_mac) {
            return Err(format!(
                "our cache has {:?} for the kernel, not {kernel_mac:?}",
                host.stack.arp_lookup(KERNEL_IP6)
            ));
        }
        let out = Command::new("ip")
            .args(["-6", "neigh", "show", "dev", IFACE])
            .output()
            .map_err(|e| e.to_string())?;
        let neigh = String::from_utf8_lossy(&out.stdout).to_string();
        let mac = our_mac.0.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
        let line = neigh.lines().find(|l| l.starts_with(&format!("{STACK_IP6} "))).unwrap_or_default();
        if !line.contains(&mac) || line.contains("FAILED") || line.contains("INCOMPLETE") {
            return Err(format!("the kernel's neighbour cache lacks {STACK_IP6} at {mac}:\n{neigh}"));
        }
        let st = host.stack.stats();
        println!(
            "kernel neighbour entry: {line}; ours: {kernel_mac:?}; adverts sent {}, solicits {}",
            st.ndp_adverts, st.ndp_solicits
        );
        host.check_leaks()
    });
}

/// Our stack on a second TAP.
fn second_tap(name: &str, kernel: &str) -> Result<Tap, String> {
    let tap = Tap::open(name).map_err(|e| format!("Tap::open({name}): {e}"))?;
    ip(&["-6", "addr", "add", kernel, "dev", name, "nodad"])?;
    ip(&["link", "set", name, "mtu", "1280"])?;
    ip(&["link", "set", name, "up"])?;
    Ok(tap)
}

/// Polls both stacks on their TAPs until `done`, failing after `limit`.
fn run_two(
    (a, dev_a): (&mut Stack, &mut Tap),
    (b, dev_b): (&mut Stack, &mut Tap),
    cache: &netchannel::pool::PoolCache,
    limit: Duration,
    mut done: impl FnMut(&mut Stack, &mut Stack) -> Result<bool, String>,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let now = Instant::now();
        let ra = a.poll(now, dev_a, cache).map_err(|e| e.to_string())?.received;
        let rb = b.poll(now, dev_b, cache).map_err(|e| e.to_string())?.received;
        if done(a, b)? {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(format!("not done after {limit:?}"));
        }
        if ra + rb == 0 {
            dev_a.wait_readable(Some(Duration::from_millis(1))).map_err(|e| e.to_string())?;
        }
    }
}

#[test]
fn packet_too_big_from_a_kernel_router_lowers_the_mss() {
    in_private_namespace(|| {
        let mut tap_a = open_tap()?;
        let mut tap_b = second_tap("ktap1", "fd00:99::1/64")?;
        std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1")
            .map_err(|e| format!("forwarding: {e}"))?;
        let config_a = stack_config(&tap_a);
        let b6 = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 2);
        let mut config_b = Config::new(EthernetAddress(tap_b.info().mac.0), config_a.ip)
            .with_ipv6(Ipv6Cidr::new(b6, 64).unwrap());
        config_b.ip = tcp_lib::wire::Ipv4Cidr::new(std::net::Ipv4Addr::new(10, 99, 0, 2), 24).unwrap();
        // B's own MTU is 1500, so it announces an MSS of 1440: only the kernel knows the link
        // between them carries 1280.
        config_b.gratuitous_arp = false;
        let mut a = Stack::new(config_a, Instant::now());
        let mut b = Stack::new(config_b, Instant::now());
        let via = |s: &str| IpAddr::V6(s.parse::<Ipv6Addr>().unwrap());
        a.add_route(via("fd00:99::"), 64, IpAddr::V6(KERNEL_IP6)).map_err(|e| e.to_string())?;
        b.add_route(via("fd00:88::"), 64, via("fd00:99::1")).map_err(|e| e.to_string())?;
        let pool = new_pool()?;
        let cache = pool.cache();
        let l = b.listen(7000).map_err(|e| e.to_string())?;
        let c = a.connect(SocketAddr::from((b6, 7000))).map_err(|e| e.to_string())?;
        let mut server = None;
        run_two((&mut a, &mut tap_a), (&mut b, &mut tap_b), &cache, Duration::from_secs(10), |a, b| {
            server = server.or_else(|| b.accept(l));
            Ok(server.is_some() && a.is_writable(c))
        })?;
        let s = server.ok_or("no connection")?;
        let mss_before = a.send_mss(c).map_err(|e| e.to_string())?;
        let data: Vec<u8> = (0..400_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let (mut sent, mut got) = (0, Vec::new());
        let mut buf = vec![0u8; 65536];
        run_two((&mut a, &mut tap_a), (&mut b, &mut tap_b), &cache, Duration::from_secs(60), |a, b| {
            if sent < data.len()
                && let Ok(n) = a.send(c, &data[sent..])
            {
                sent += n;
            }
            while let Ok(n) = b.recv(s, &mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
            Ok(got.len() == data.len())
        })?;
        if got != data {
            return Err("the transfer through the kernel router is not byte-exact".into());
        }
        let mss_after = a.send_mss(c).map_err(|e| e.to_string())?;
        let updates = a.stats().icmp_pmtu_updates;
        println!("MSS {mss_before} -> {mss_after} after {updates} Packet Too Big; 400000 bytes byte-exact");
        // 1280 less 40 + 20 header bytes and 12 of timestamps.
        if updates == 0 || mss_after != 1280 - 60 - 12 || mss_before <= mss_after {
            return Err(format!("MSS {mss_before} -> {mss_after}, {updates} path MTU updates"));
        }
        Ok(())
    });
}
