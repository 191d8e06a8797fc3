//! Shared by `kernel_tap.rs` and `kernel_security.rs`: the Linux kernel as the peer of our [`Stack`], over a TAP device in a
//! private network namespace.
//!
//! * [`in_private_namespace`] runs a test body on a new thread that first `unshare(CLONE_NEWNET)`s.
//!   Namespaces are per thread, and threads that thread spawns *after* the unshare are created
//!   with its namespaces (checked by `threads_spawned_after_unshare_share_the_namespace`), so the
//!   kernel side's `std::net` sockets run on helper threads inside the namespace.
//! * [`open_tap`]: the TAP `ktap0`, the kernel's side addressed `10.88.0.1/24` and up.
//! * [`Host`]: our stack on the TAP (MAC: the TAP's random locally administered address, IP
//!   `10.88.0.2/24`), driven on the namespace thread by [`Host::run`] with real time: `poll`,
//!   the test's step, then a wait on the TAP bounded by the stack's `poll_timeout`.
//! * [`Observer`]: a pass-through device that counts what crossed it (segments, zero windows,
//!   resets) and can black-hole either direction.
//! * [`Source`]/[`Sink`]: a deterministic byte stream, checked byte for byte where it arrives.
//!
//! Without root, `/dev/net/tun` or iproute2 a test prints `skipped: <why>` (`netns_test::skip`).
//! The test command counts that as a skip (under `CI=true` a failure unless allowed); an error once
//! those preconditions hold fails the test.
#![allow(dead_code, unused_imports, unreachable_pub, missing_docs, reason = "each test uses its own subset")]

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use netchannel::dev::{
    DevError, DeviceInfo, DeviceStats, FaultInjector, Link, NetDevice, PacketBatch, PcapWriter, Tap,
    TapOptions,
};
use netchannel::pool::{HugePages, Pool, PoolCache};
use tcp_lib::stack::{Config, Error, Stack, StreamId};
use tcp_lib::wire::{
    ChecksumPolicy, EtherType, EthernetFrame, EthernetRepr, Ipv4Cidr, Ipv4Packet, Ipv4Repr, Ipv6Cidr,
    Ipv6Packet, Ipv6Repr, Protocol, TcpControl, TcpPacket, TcpRepr,
};

pub mod peer;

pub const IFACE: &str = "ktap0";
pub const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 1);
pub const STACK_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 2);
pub const KERNEL_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x88, 0, 0, 0, 0, 0, 1);
pub const STACK_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x88, 0, 0, 0, 0, 0, 2);

/// The address family a test runs over: the TAP and our stack have both, a test picks one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn kernel_ip(self) -> IpAddr {
        match self {
            Self::V4 => IpAddr::V4(KERNEL_IP),
            Self::V6 => IpAddr::V6(KERNEL_IP6),
        }
    }

    pub fn stack_ip(self) -> IpAddr {
        match self {
            Self::V4 => IpAddr::V4(STACK_IP),
            Self::V6 => IpAddr::V6(STACK_IP6),
        }
    }

    /// The kernel's end on `port`.
    pub fn kernel(self, port: u16) -> SocketAddr {
        SocketAddr::new(self.kernel_ip(), port)
    }

    /// Our stack's end on `port`.
    pub fn stack(self, port: u16) -> SocketAddr {
        SocketAddr::new(self.stack_ip(), port)
    }
}
/// The longest the driver sleeps on the TAP between polls.
const MAX_WAIT: Duration = Duration::from_millis(5);
/// Read and write timeouts of the kernel side's sockets: a kernel thread never blocks forever. As long
/// as the lossy tests' overall deadline: under 10% loss each way, a segment lost several times in a row
/// backs our RTO off past 25 s now and then, most often when the machine is loaded (seen once in 30+
/// runs), and that is TCP working, not a hang.
pub const SOCKET_TIMEOUT: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------------
// Namespaces.

pub use netns_test::{ip, namespace_unavailable, skip};

/// The network namespace of the calling thread (`net:[inode]`).
pub fn thread_netns() -> Result<String, String> {
    std::fs::read_link("/proc/thread-self/ns/net")
        .map(|p| p.display().to_string())
        .map_err(|e| format!("readlink /proc/thread-self/ns/net: {e}"))
}

pub use netns_test::in_private_namespace;

/// Creates the TAP, addresses the kernel's side (`10.88.0.1/24` and `fd00:88::1/64`, the latter
/// without duplicate address detection so that it is usable at once) and brings it up (and `lo`).
pub fn open_tap() -> Result<Tap, String> {
    open_tap_with(TapOptions::default())
}

/// [`open_tap`] with `options` (offloads).
pub fn open_tap_with(options: TapOptions) -> Result<Tap, String> {
    let tap =
        Tap::open_with(IFACE, options).map_err(|e| format!("Tap::open_with({IFACE}, {options:?}): {e}"))?;
    ip(&["link", "set", "lo", "up"])?;
    ip(&["addr", "add", &format!("{KERNEL_IP}/24"), "dev", IFACE])?;
    ip(&["-6", "addr", "add", &format!("{KERNEL_IP6}/64"), "dev", IFACE, "nodad"])?;
    ip(&["link", "set", IFACE, "up"])?;
    Ok(tap)
}

/// Adds `iptables -A INPUT|OUTPUT -m statistic --mode random --probability P -j DROP` for
/// `family`'s traffic on the TAP (`ip6tables` for IPv6), with the nft backend or else the legacy
/// one; returns the command used, or why neither works.
pub fn iptables_random_drop(family: Family, probability: f64) -> Result<&'static str, String> {
    let p = format!("{probability}");
    let rules: [&[&str]; 2] = [
        &[
            "-A",
            "INPUT",
            "-i",
            IFACE,
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            &p,
            "-j",
            "DROP",
        ],
        &[
            "-A",
            "OUTPUT",
            "-o",
            IFACE,
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            &p,
            "-j",
            "DROP",
        ],
    ];
    let mut why = Vec::new();
    let commands = match family {
        Family::V4 => ["iptables", "iptables-legacy"],
        Family::V6 => ["ip6tables", "ip6tables-legacy"],
    };
    for cmd in commands {
        let mut ok = true;
        for rule in rules {
            match Command::new(cmd).args(rule).output() {
                Ok(out) if out.status.success() => {}
                Ok(out) => {
                    why.push(format!("{cmd}: {}", String::from_utf8_lossy(&out.stderr).trim()));
                    ok = false;
                    break;
                }
                Err(e) => {
                    why.push(format!("{cmd}: {e}"));
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            return Ok(cmd);
        }
        // Leave no half-installed rule behind before trying the other backend.
        let _ = Command::new(cmd).args(["-F", "INPUT"]).output();
        let _ = Command::new(cmd).args(["-F", "OUTPUT"]).output();
    }
    Err(why.join("; "))
}

/// The packets `iptables -L CHAIN -v -x` counts against its DROP rules.
pub fn iptables_dropped(cmd: &str, chain: &str) -> u64 {
    let Ok(out) = Command::new(cmd).args(["-L", chain, "-v", "-x", "-n"]).output() else { return 0 };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("DROP"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

// ---------------------------------------------------------------------------------------------
// Socket options std does not have.

fn setsockopt_int(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> Result<(), String> {
    let len = libc::socklen_t::try_from(size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: `value` is a live c_int for the duration of the call and `len` is its size.
    let r = unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (&raw const value).cast(), len) };
    if r == 0 { Ok(()) } else { Err(format!("setsockopt({level}, {name}): {}", io::Error::last_os_error())) }
}

/// `SO_RCVBUF` (the kernel doubles it; a listener's accepted sockets inherit it).
pub fn set_rcvbuf(fd: &impl AsRawFd, bytes: i32) -> Result<(), String> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes)
}

/// `SO_LINGER` on with a zero timeout: `close` then sends an RST.
pub fn set_linger_zero(fd: &impl AsRawFd) -> Result<(), String> {
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    let len = libc::socklen_t::try_from(size_of::<libc::linger>()).unwrap_or(8);
    // SAFETY: `l` is a live `linger` for the duration of the call and `len` is its size.
    let r = unsafe {
        libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_LINGER, (&raw const l).cast(), len)
    };
    if r == 0 { Ok(()) } else { Err(format!("setsockopt(SO_LINGER): {}", io::Error::last_os_error())) }
}

/// What the kernel says of one of its TCP sockets (`TCP_INFO`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelTcpInfo {
    /// The smoothed RTT.
    pub srtt: Duration,
    /// The retransmission timeout.
    pub rto: Duration,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub retransmits: u32,
    /// Segments the peer's D-SACK blocks said it received twice (`tcpi_dsack_dups`): each
    /// D-SACK the kernel took as one.
    pub dsack_dups: u32,
    /// Bytes the peer acknowledged (`tcpi_bytes_acked`, RFC 4898's `tcpEStatsAppHCThruOctetsAcked`:
    /// how far SND.UNA moved, the SYN and FIN included).
    pub bytes_acked: u64,
}

/// The kernel's smoothed RTT, RTO and retransmissions of a TCP socket (`TCP_INFO`).
pub fn kernel_tcp_info(fd: &impl AsRawFd) -> Result<KernelTcpInfo, String> {
    // SAFETY: `tcp_info` is plain integers, for which all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = libc::socklen_t::try_from(size_of::<libc::tcp_info>()).unwrap_or(0);
    // SAFETY: `info` is a live `tcp_info` for the duration of the call and `len` is its size; the
    // kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &raw mut len,
        )
    };
    if r != 0 {
        return Err(format!("getsockopt(TCP_INFO): {}", io::Error::last_os_error()));
    }
    Ok(KernelTcpInfo {
        srtt: Duration::from_micros(info.tcpi_rtt.into()),
        rto: Duration::from_micros(info.tcpi_rto.into()),
        retransmits: info.tcpi_total_retrans,
        dsack_dups: info.tcpi_dsack_dups,
        bytes_acked: info.tcpi_bytes_acked,
    })
}

/// The calling thread's namespace's `TcpExt` counters named in `names` (`/proc/thread-self/net/netstat`,
/// what `nstat` reads), in that order; 0 for one the kernel does not have.
pub fn kernel_tcp_ext(names: &[&str]) -> Result<Vec<u64>, String> {
    let text = std::fs::read_to_string("/proc/thread-self/net/netstat")
        .map_err(|e| format!("read /proc/thread-self/net/netstat: {e}"))?;
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(keys), Some(values)) = (lines.next(), lines.next()) else {
        return Err("no TcpExt lines in /proc/thread-self/net/netstat".into());
    };
    let table: Vec<(&str, u64)> = keys
        .split_whitespace()
        .zip(values.split_whitespace())
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    Ok(names.iter().map(|n| table.iter().find(|(k, _)| k == n).map_or(0, |&(_, v)| v)).collect())
}

/// The sysctl of the calling thread's namespace that names its congestion control.
const CONGESTION_CONTROL: &str = "/proc/sys/net/ipv4/tcp_congestion_control";

/// The congestion control the calling thread's namespace gives new TCP sockets
/// (`net.ipv4.tcp_congestion_control`: each namespace has its own, a new one starts with the
/// host's).
pub fn congestion_control() -> Result<String, String> {
    let path = CONGESTION_CONTROL;
    let text = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
    Ok(text.trim().to_owned())
}

/// Sets the congestion control of the calling thread's namespace (call it in a namespace of the
/// test's own: the setting is the namespace's). Fails, naming the fix, where the kernel has no
/// such algorithm (`tcp_bbr` not loaded, say).
pub fn set_congestion_control(name: &str) -> Result<(), String> {
    let path = CONGESTION_CONTROL;
    std::fs::write(path, name).map_err(|e| {
        format!("write {name} to {path}: {e} (is it in /proc/sys/net/ipv4/tcp_available_congestion_control? modprobe tcp_{name})")
    })?;
    let now = congestion_control()?;
    if now != name {
        return Err(format!("{path} says {now} after {name} was written"));
    }
    Ok(())
}

/// `SO_KEEPALIVE` with `TCP_KEEPIDLE`, `TCP_KEEPINTVL` (seconds) and `TCP_KEEPCNT`.
pub fn set_keepalive(fd: &impl AsRawFd, idle_s: i32, interval_s: i32, count: i32) -> Result<(), String> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, idle_s)?;
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, interval_s)?;
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, count)
}

/// A kernel TCP connection to our stack over `family`, with [`SOCKET_TIMEOUT`]s.
pub fn kernel_connect(family: Family, port: u16) -> Result<TcpStream, String> {
    kernel_connect_to(family.stack(port))
}

/// Accepts one connection on `l` within the socket timeout (a non-blocking poll, so a kernel thread
/// never waits forever for a connection that does not come).
pub fn kernel_accept(l: &TcpListener) -> Result<TcpStream, String> {
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + SOCKET_TIMEOUT;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                with_timeouts(&s)?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(format!("kernel accept: {e}")),
        }
    }
}

/// A kernel TCP connection to `to`, with [`SOCKET_TIMEOUT`]s.
pub fn kernel_connect_to(to: SocketAddr) -> Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&to, SOCKET_TIMEOUT)
        .map_err(|e| format!("kernel connect to {to}: {e}"))?;
    with_timeouts(&s)?;
    Ok(s)
}

pub fn with_timeouts(s: &TcpStream) -> Result<(), String> {
    s.set_read_timeout(Some(SOCKET_TIMEOUT)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(SOCKET_TIMEOUT)).map_err(|e| e.to_string())
}

/// Reads `s` to its end into a [`Sink`] expecting the stream of `seed`.
pub fn kernel_read_all(s: &mut TcpStream, seed: u64) -> Result<Sink, String> {
    let mut sink = Sink::new(seed);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(sink),
            Ok(n) => sink.put(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("kernel read after {} bytes: {e}", sink.len)),
        }
    }
}

/// Writes all of `src` to `s`.
pub fn kernel_write_all(s: &mut TcpStream, src: &mut Source) -> Result<(), String> {
    loop {
        let chunk = src.chunk();
        if chunk.is_empty() {
            return Ok(());
        }
        let n = s.write(chunk).map_err(|e| format!("kernel write after {} bytes: {e}", src.produced()))?;
        src.consume(n);
    }
}

// ---------------------------------------------------------------------------------------------
// Data.

/// SplitMix64.
pub fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const CHUNK: usize = 64 * 1024;

/// Byte `offset..offset + out.len()` of the stream of `seed`: SplitMix64 of the 8-byte word index.
pub fn fill(seed: u64, offset: u64, out: &mut [u8]) {
    let mut word = offset / 8;
    let mut skip = usize::try_from(offset % 8).unwrap_or(0);
    let mut at = 0;
    while at < out.len() {
        let bytes = splitmix(seed ^ word.wrapping_mul(0x2545_f491_4f6c_dd1d)).to_le_bytes();
        let take = (8 - skip).min(out.len() - at);
        out[at..at + take].copy_from_slice(&bytes[skip..skip + take]);
        at += take;
        skip = 0;
        word += 1;
    }
}

/// `total` bytes of the stream of `seed`, produced in chunks.
#[derive(Debug)]
pub struct Source {
    seed: u64,
    total: u64,
    /// Bytes handed out and consumed.
    done: u64,
    buf: Vec<u8>,
    off: usize,
}

impl Source {
    pub fn new(seed: u64, total: u64) -> Self {
        Self { seed, total, done: 0, buf: Vec::with_capacity(CHUNK), off: 0 }
    }

    /// The next unconsumed bytes (empty at the end).
    pub fn chunk(&mut self) -> &[u8] {
        if self.off == self.buf.len() {
            let n = usize::try_from((self.total - self.done).min(CHUNK as u64)).unwrap_or(CHUNK);
            self.buf.resize(n, 0);
            fill(self.seed, self.done, &mut self.buf);
            self.off = 0;
        }
        &self.buf[self.off..]
    }

    pub fn consume(&mut self, n: usize) {
        self.off += n;
        self.done += n as u64;
    }

    pub fn produced(&self) -> u64 {
        self.done
    }

    pub fn is_done(&self) -> bool {
        self.done == self.total
    }
}

/// The receiving end: checks every byte against the stream of `seed` as it arrives (byte-exact,
/// and it names the first wrong offset).
#[derive(Debug, Clone)]
pub struct Sink {
    seed: u64,
    pub len: u64,
    /// The first offset whose byte differs from the stream's.
    pub first_mismatch: Option<u64>,
    expect: Vec<u8>,
}

impl Sink {
    pub fn new(seed: u64) -> Self {
        Self { seed, len: 0, first_mismatch: None, expect: Vec::new() }
    }

    pub fn put(&mut self, bytes: &[u8]) {
        if self.first_mismatch.is_none() {
            self.expect.resize(bytes.len(), 0);
            fill(self.seed, self.len, &mut self.expect);
            if self.expect[..] != *bytes {
                let i = bytes.iter().zip(&self.expect).position(|(a, b)| a != b).unwrap_or(0);
                self.first_mismatch = Some(self.len + i as u64);
            }
        }
        self.len += bytes.len() as u64;
    }

    /// Ok when exactly `total` bytes arrived, each the stream's.
    pub fn check(&self, total: u64, what: &str) -> Result<(), String> {
        match self.first_mismatch {
            Some(at) => Err(format!("{what}: byte {at} differs from what was sent")),
            None if self.len != total => {
                Err(format!("{what}: {} bytes arrived, {total} were sent", self.len))
            }
            None => Ok(()),
        }
    }
}

/// Reads what is buffered on `s` into `sink`; true at the end of the stream.
pub fn our_drain(stack: &mut Stack, s: StreamId, sink: &mut Sink, buf: &mut [u8]) -> Result<bool, String> {
    loop {
        match stack.recv(s, buf) {
            Ok(0) => return Ok(true),
            Ok(n) => sink.put(&buf[..n]),
            Err(Error::WouldBlock) => return Ok(false),
            Err(e) => return Err(format!("our recv after {} bytes: {e}", sink.len)),
        }
    }
}

/// Sends what fits of `src` on `s`; shuts the sending side once all is queued.
pub fn our_feed(stack: &mut Stack, s: StreamId, src: &mut Source, shut: &mut bool) -> Result<(), String> {
    while !src.is_done() {
        match stack.send(s, src.chunk()) {
            Ok(n) => src.consume(n),
            Err(Error::WouldBlock) => return Ok(()),
            Err(e) => return Err(format!("our send after {} bytes: {e}", src.produced())),
        }
    }
    if !*shut {
        stack.shutdown_write(s).map_err(|e| e.to_string())?;
        *shut = true;
    }
    Ok(())
}

/// A byte count from the environment (`VAR`, in bytes, with an optional `K`/`M` suffix), or
/// `default`.
pub fn env_bytes(var: &str, default: u64) -> u64 {
    let Ok(v) = std::env::var(var) else { return default };
    let v = v.trim();
    let (num, mul) = match v.as_bytes().last() {
        Some(b'K' | b'k') => (&v[..v.len() - 1], 1 << 10),
        Some(b'M' | b'm') => (&v[..v.len() - 1], 1 << 20),
        _ => (v, 1),
    };
    num.parse::<u64>().map_or(default, |n| n * mul)
}

// ---------------------------------------------------------------------------------------------
// Devices.

/// A device with a TAP at the bottom, whose descriptor the driver waits on.
pub trait OnTap: NetDevice {
    fn tap(&self) -> &Tap;
}

impl OnTap for Tap {
    fn tap(&self) -> &Tap {
        self
    }
}

impl<D: OnTap> OnTap for FaultInjector<D> {
    fn tap(&self) -> &Tap {
        self.inner().tap()
    }
}

impl<D: OnTap, W: Write> OnTap for PcapWriter<D, W> {
    fn tap(&self) -> &Tap {
        self.inner().tap()
    }
}

impl<D: OnTap> OnTap for Observer<D> {
    fn tap(&self) -> &Tap {
        self.inner.tap()
    }
}

/// What an [`Observer`] saw of the TCP segments of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    pub segments: u64,
    /// Segments with data.
    pub data: u64,
    /// Segments (not SYN, not RST) advertising a zero window.
    pub zero_window: u64,
    pub rst: u64,
    pub fin: u64,
    /// Frames black-holed.
    pub blackholed: u64,
}

/// A pass-through device that counts TCP segments each way and can black-hole either direction.
#[derive(Debug)]
pub struct Observer<D> {
    pub inner: D,
    /// Received (from the kernel).
    pub rx: Seen,
    /// Transmitted (by our stack).
    pub tx: Seen,
    pub blackhole_rx: bool,
    pub blackhole_tx: bool,
}

impl<D> Observer<D> {
    pub fn new(inner: D) -> Self {
        Self { inner, rx: Seen::default(), tx: Seen::default(), blackhole_rx: false, blackhole_tx: false }
    }
}

/// The IPv4/TCP segment in an Ethernet frame (checksums not checked).
pub fn parse_tcp(frame: &[u8]) -> Option<(Ipv4Repr, TcpRepr<'_>)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if EthernetRepr::parse(&eth).ok()?.ethertype != EtherType::Ipv4 {
        return None;
    }
    let ipp = Ipv4Packet::new_checked(&frame[eth.header_len()..]).ok()?;
    let ip = Ipv4Repr::parse(&ipp, ChecksumPolicy::Trust).ok()?;
    if ip.protocol != Protocol::Tcp {
        return None;
    }
    let hl = ipp.header_len();
    let seg =
        TcpPacket::new_checked(&frame[eth.header_len() + hl..eth.header_len() + hl + ip.payload_len]).ok()?;
    let tcp = TcpRepr::parse(&seg, ip.src_addr, ip.dst_addr, ChecksumPolicy::Trust).ok()?;
    Some((ip, tcp))
}

/// The source, destination and TCP segment of an Ethernet frame carrying IPv4 or IPv6 TCP
/// (checksums not checked).
pub fn parse_tcp_any(frame: &[u8]) -> Option<(IpAddr, IpAddr, TcpRepr<'_>)> {
    if let Some((ip, t)) = parse_tcp(frame) {
        return Some((IpAddr::V4(ip.src_addr), IpAddr::V4(ip.dst_addr), t));
    }
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if EthernetRepr::parse(&eth).ok()?.ethertype != EtherType::Ipv6 {
        return None;
    }
    let start = eth.header_len();
    let packet = Ipv6Packet::new_checked(&frame[start..]).ok()?;
    let (ip, payload) = Ipv6Repr::parse_with_payload(&packet).ok()?;
    if ip.next_header != Protocol::Tcp {
        return None;
    }
    let offset = payload.as_ptr().addr() - frame.as_ptr().addr();
    let seg = TcpPacket::new_checked(&frame[offset..offset + payload.len()]).ok()?;
    let tcp = TcpRepr::parse_v6(&seg, ip.src_addr, ip.dst_addr, ChecksumPolicy::Trust).ok()?;
    Some((IpAddr::V6(ip.src_addr), IpAddr::V6(ip.dst_addr), tcp))
}

fn count(seen: &mut Seen, frame: &[u8]) {
    if let Some((_, _, t)) = parse_tcp_any(frame) {
        seen.segments += 1;
        if !t.payload.is_empty() {
            seen.data += 1;
        }
        match t.control {
            TcpControl::Rst => seen.rst += 1,
            TcpControl::Fin => seen.fin += 1,
            _ => {}
        }
        if t.window_len == 0 && !matches!(t.control, TcpControl::Syn | TcpControl::Rst) {
            seen.zero_window += 1;
        }
    }
}

impl<D: NetDevice> NetDevice for Observer<D> {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn link(&self) -> Link {
        self.inner.link()
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }

    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        let before = batch.len();
        let n = self.inner.rx_burst(queue, cache, batch)?;
        if self.blackhole_rx {
            self.rx.blackholed += n as u64;
            // Keep what the batch held before; the new frames go back to the pool.
            let mut all: Vec<_> = batch.drain().collect();
            all.truncate(before);
            for p in all {
                let _ = batch.push(p);
            }
            return Ok(0);
        }
        for p in &batch.as_slice()[before..] {
            count(&mut self.rx, p.data());
        }
        Ok(n)
    }

    fn wait_rx(&mut self, queue: u16, timeout: Option<Duration>) -> Result<(), DevError> {
        self.inner.wait_rx(queue, timeout)
    }

    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        if self.blackhole_tx {
            let n = batch.len();
            self.tx.blackholed += n as u64;
            batch.clear();
            return Ok(n);
        }
        let mut seen: Vec<Seen> = Vec::with_capacity(batch.len());
        for p in batch.as_slice() {
            let mut s = Seen::default();
            count(&mut s, p.data());
            seen.push(s);
        }
        let n = self.inner.tx_burst(queue, batch)?;
        for s in &seen[..n.min(seen.len())] {
            self.tx.segments += s.segments;
            self.tx.data += s.data;
            self.tx.zero_window += s.zero_window;
            self.tx.rst += s.rst;
            self.tx.fin += s.fin;
        }
        Ok(n)
    }
}

// ---------------------------------------------------------------------------------------------
// Our side.

/// The stack's configuration on `dev`: its MAC, `10.88.0.2/24` and `fd00:88::2/64`, a 200 ms
/// minimum RTO (as Linux), a 1 s MSL.
pub fn stack_config(dev: &impl NetDevice) -> Config {
    let mut c =
        Config::new(tcp_lib::wire::EthernetAddress(dev.info().mac.0), Ipv4Cidr::new(STACK_IP, 24).unwrap())
            .with_ipv6(Ipv6Cidr::new(STACK_IP6, 64).unwrap());
    c.tcp.min_rto = Duration::from_millis(200);
    c.tcp.msl = Duration::from_secs(1);
    c
}

/// A pool of 16 Ki 2 KiB buffers, in ordinary pages.
pub fn new_pool() -> Result<Pool, String> {
    Pool::builder(16 * 1024).hugepages(HugePages::Never).build().map_err(|e| e.to_string())
}

/// Our stack on a TAP-backed device, with its pool.
pub struct Host<D> {
    pub stack: Stack,
    pub dev: D,
    pub cache: PoolCache,
    pub pool: Pool,
}

impl<D: OnTap> Host<D> {
    pub fn new(dev: D, config: Config) -> Result<Self, String> {
        Ok(Self::with_pool(new_pool()?, dev, config))
    }

    /// With a pool made by [`new_pool`] (for devices such as a fault injector that need it first).
    pub fn with_pool(pool: Pool, dev: D, config: Config) -> Self {
        let cache = pool.cache();
        let stack = Stack::new(config, Instant::now());
        Self { stack, dev, cache, pool }
    }

    /// Drives the stack until `step` returns true (it runs after every poll), failing after
    /// `limit`. Sleeps on the device when a poll received nothing: at most 5 ms (1 ms while a
    /// fault injector holds frames), and never past the stack's next timer.
    pub fn run(
        &mut self,
        limit: Duration,
        what: &str,
        mut step: impl FnMut(&mut Stack) -> Result<bool, String>,
    ) -> Result<Duration, String> {
        let start = Instant::now();
        loop {
            let now = Instant::now();
            let ps = self.stack.poll(now, &mut self.dev, &self.cache).map_err(|e| format!("poll: {e}"))?;
            if step(&mut self.stack)? {
                return Ok(start.elapsed());
            }
            if now.duration_since(start) > limit {
                return Err(format!("{what}: not done after {limit:?}"));
            }
            if ps.received == 0 {
                let now = Instant::now();
                let wait = match self.stack.poll_timeout() {
                    Some(t) if t <= now => continue,
                    Some(t) => (t - now).min(MAX_WAIT),
                    None => MAX_WAIT,
                };
                // The device's own wait, not the TAP's: a fault injector bounds it to 1 ms while
                // it holds frames, so that a delayed or reordered frame leaves on time (as the
                // relay of `peer`, the kernel anchor's loop, lets them) rather than up to
                // `MAX_WAIT` late.
                self.dev.wait_rx(0, Some(wait)).map_err(|e| format!("wait_rx: {e}"))?;
            }
        }
    }

    /// Drops the stack, the device and the cache, then checks that every pool buffer came back.
    pub fn check_leaks(self) -> Result<(), String> {
        let Self { stack, dev, cache, pool } = self;
        drop((stack, dev, cache));
        pool.check_leaks().map_err(|e| e.to_string())
    }

    /// Drives the stack for `d` (timers, ACKs, probes) with nothing else to do.
    pub fn idle(&mut self, d: Duration) -> Result<(), String> {
        let end = Instant::now() + d;
        self.run(d + Duration::from_secs(1), "idle", |_| Ok(Instant::now() >= end)).map(drop)
    }
}
