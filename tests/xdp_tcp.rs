//! The kernel talks TCP to our stack over AF_XDP: [`netchannels::echo`] with its `--xdp` backend (one
//! queue, one core) on one end of a veth pair in a private network namespace, the kernel's `std::net`
//! clients behind the other end; generic and native XDP.
//!
//! * **Echo**: many concurrent connections, half of them over IPv6 (the server given both
//!   families), random message sizes, every echoed byte checked, then the server's summary and
//!   buffer accounting.
//! * **Bulk**: one connection (over IPv4, and in the `_ipv6` tests over IPv6) streams `NC_XDP_BULK_MIB` MiB (default 64: 4 to 8 s on a
//!   debug build sharing two cores) to the server while a second thread reads the echo back; both
//!   sides generate the same deterministic stream (xorshift64), so every byte is compared at its
//!   position, which locates a corruption where a SHA-256 of the whole would only flag it (and costs
//!   nothing in a debug build, where an unoptimised SHA-256 would dominate the run).
//!
//! The kernel learns our MAC by ARP and by Neighbor Discovery: its requests and solicitations (to
//! our solicited-node group) from `ncxt1` reach our stack through the XDP redirect on `ncxt0` and
//! the stack answers; the test checks the kernel's neighbour entries for both addresses afterwards.
//!
//! veth hands frames over as the sender's stack left them: with TX checksum offload on, a TCP
//! segment carries only the pseudo-header sum (`CHECKSUM_PARTIAL`) and may be a TSO super-frame, and
//! AF_XDP has no metadata to say so; tcp-lib verifies every checksum and would drop them. So the
//! kernel's end gets `ethtool -K ncxt1 tx off` (done here with the `SIOCETHTOOL` ioctl; TSO goes
//! off with it), as a real NIC's wire would deliver complete frames.
//!
//! The async echo ([`netchannels::echo::run_async`], feature `async`) runs the echo, one bulk stream
//! and the idle-sleep check too.
//!
//! Without root, or without AF_XDP in the kernel, each test prints `skipped: <why>` (`netns_test::skip`).
//! The test command counts that as a skip (under `CI=true` a failure unless allowed); an error once
//! those preconditions hold fails the test.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, SocketAddrV4, TcpStream};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use netchannels::cli::ServeArgs;
use netchannels::echo::{Options, Report, run};
use netchannels::netchannel::dev::XdpMode;
use netchannels::tcp_lib::wire::{Ipv4Cidr, Ipv6Cidr};
use netns_test::{ip, skip, tx_checksum_off};

const OURS: &str = "ncxt0";
const KERNELS: &str = "ncxt1";
const KERNEL: &str = "10.205.0.1/24";
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 205, 0, 2);
const KERNEL6: &str = "fd00:205::1/64";
const SERVER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x205, 0, 0, 0, 0, 0, 2);
const PORT: u16 = 7;
const CONNECTIONS: usize = 48;
const MESSAGES: usize = 12;
const MAX_SIZE: usize = 20_000;
const BULK_MIB_DEFAULT: u64 = 64;

/// The tests share two busy-polling CPUs with whatever else runs: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (CAP_NET_ADMIN, CAP_BPF) for a network namespace, veth and XDP".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("the `ip` command (iproute2) is not installed".into());
    }
    // SAFETY: plain socket creation; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Some(format!("no AF_XDP sockets here: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    None
}

/// Runs `body` in a private namespace holding the veth pair `ncxt0` (ours) / `ncxt1` (the kernel's,
/// 10.205.0.1/24, TX checksum offload off).
fn with_veth(body: impl FnOnce() -> Result<(), String> + Send + 'static) {
    if let Some(why) = unavailable() {
        return skip(&why);
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    netns_test::report(netns_test::run_isolated(move || {
        ip(&["link", "add", OURS, "type", "veth", "peer", "name", KERNELS])?;
        ip(&["addr", "add", KERNEL, "dev", KERNELS])?;
        ip(&["-6", "addr", "add", KERNEL6, "dev", KERNELS, "nodad"])?;
        tx_checksum_off(KERNELS)?;
        ip(&["link", "set", "lo", "up"])?;
        ip(&["link", "set", OURS, "up"])?;
        ip(&["link", "set", KERNELS, "up"])?;
        body()
    }));
}

fn options(mode: XdpMode) -> Options {
    Options {
        serve: ServeArgs {
            xdp: Some(OURS.into()),
            xdp_mode: Some(mode),
            queues: Some(1),
            ips: vec![
                netchannels::cli::IpCidr::V4(Ipv4Cidr::new(SERVER, 24).expect("a /24")),
                netchannels::cli::IpCidr::V6(Ipv6Cidr::new(SERVER6, 64).expect("a /64")),
            ],
            ..ServeArgs::default()
        },
        progress: false,
        port: PORT,
        ..Options::default()
    }
}

/// An echo service: [`run`] or (feature `async`) `run_async`.
type Run = fn(&Options, &AtomicBool) -> Result<Report, String>;

/// Runs the echo server `run` in `mode` while `clients` run on this thread; returns the server's report
/// and what the clients returned. An AF_XDP open failure for want of kernel support is a skip.
fn serve<T>(mode: XdpMode, run: Run, clients: impl FnOnce() -> T) -> Result<(Report, T), String> {
    let options = options(mode);
    // Let the server attach its program before the kernel's first SYN.
    netns_test::serve_while(|stop: &AtomicBool| run(&options, stop), xdp_attached, clients)
}

fn xdp_attached() -> bool {
    Command::new("ip")
        .args(["-d", "link", "show", OURS])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("prog/xdp"))
}

/// The kernel's neighbour entries for our addresses name `ncxt0`'s MAC: its ARP request and its
/// neighbour solicitation reached our stack through the XDP redirect, and the stack's answers reached
/// the kernel through the TX ring.
fn check_arp(ipv4: bool, ipv6: bool) -> Result<(), String> {
    // `ip` and not /sys/class/net: sysfs shows the namespace it was mounted in, not this thread's.
    let show = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .map_err(|e| e.to_string())
    };
    let link = show(&["-o", "link", "show", OURS])?;
    let mac = link
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .ok_or_else(|| format!("no MAC in `ip link show {OURS}`: {link:?}"))?
        .to_owned();
    let families = [(ipv4, "ARP", SERVER.to_string()), (ipv6, "Neighbor Discovery", SERVER6.to_string())];
    for (_, by, addr) in families.into_iter().filter(|f| f.0) {
        let neigh = show(&["neigh", "show", &addr, "dev", KERNELS])?;
        if !neigh.contains(&mac) {
            return Err(format!("the kernel did not learn our MAC {mac} by {by}: `ip neigh` says {neigh:?}"));
        }
    }
    Ok(())
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// One kernel client: `MESSAGES` messages of random size, each written whole and read back whole,
/// then a half-close and the server's FIN; odd clients over IPv6.
fn kernel_client(index: usize) -> Result<u64, String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("client {index}: {what}: {e}");
    let server = if index % 2 == 1 {
        SocketAddr::from((SERVER6, PORT))
    } else {
        SocketAddr::from(SocketAddrV4::new(SERVER, PORT))
    };
    let mut s =
        TcpStream::connect_timeout(&server, Duration::from_secs(10)).map_err(|e| fail("connect", &e))?;
    s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| fail("timeout", &e))?;
    s.set_nodelay(true).map_err(|e| fail("nodelay", &e))?;
    let mut state = (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut total = 0;
    let mut back = vec![0u8; MAX_SIZE];
    for m in 0..MESSAGES {
        let len = 1 + usize::try_from(xorshift(&mut state) % MAX_SIZE as u64).expect("small");
        let msg: Vec<u8> = (0..len).map(|_| xorshift(&mut state).to_le_bytes()[3]).collect();
        s.write_all(&msg).map_err(|e| fail(&format!("write message {m}"), &e))?;
        s.read_exact(&mut back[..len]).map_err(|e| fail(&format!("read message {m} ({len} bytes)"), &e))?;
        if let Some(at) = msg.iter().zip(&back[..len]).position(|(a, b)| a != b) {
            return Err(format!("client {index}: message {m}: byte {at} of {len} came back changed"));
        }
        total += len as u64;
    }
    s.shutdown(Shutdown::Write).map_err(|e| fail("shutdown", &e))?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).map_err(|e| fail("waiting for the server's FIN", &e))?;
    if !rest.is_empty() {
        return Err(format!("client {index}: {} unexpected bytes after the last echo", rest.len()));
    }
    Ok(total)
}

fn echo(mode: XdpMode, run: Run) -> Result<(), String> {
    let start = Instant::now();
    let (report, results) = serve(mode, run, || {
        std::thread::scope(|s| {
            let clients: Vec<_> = (0..CONNECTIONS).map(|i| s.spawn(move || kernel_client(i))).collect();
            clients
                .into_iter()
                .map(|c| c.join().unwrap_or_else(|_| Err("a client panicked".into())))
                .collect::<Vec<Result<u64, String>>>()
        })
    })?;
    println!("{report}");
    let mut sent = 0;
    for r in results {
        sent += r?;
    }
    let core = report.cores.first().ok_or("no core in the report")?;
    assert_eq!(report.cores.len(), 1);
    assert_eq!(core.served, CONNECTIONS as u64, "every connection served");
    assert_eq!(report.closed(), CONNECTIONS as u64, "every connection closed after the kernel's FIN");
    assert_eq!(report.bytes_echoed(), sent, "every byte echoed once");
    assert_eq!(core.failed, 0);
    let stack = &report.snapshot().cores.first().ok_or("no core in the snapshot")?.stack;
    assert_eq!(stack.rx_malformed, 0, "no frame with a bad checksum: {stack:?}");
    assert!(stack.arp_requests > 0, "the kernel's ARP request reached the stack: {stack:?}");
    assert_eq!(report.accept().map(|a| a.enqueued), Some(CONNECTIONS as u64), "{report}");
    assert!(report.runtime.errors.is_empty(), "{report}");
    assert_eq!(report.runtime.buffers.len(), 1, "the pool was checked for leaks");
    check_arp(true, true)?;
    assert!(!xdp_attached(), "the XDP program is detached when the server stops");
    println!(
        "{mode:?}: {CONNECTIONS} kernel connections x {MESSAGES} messages, {sent} bytes echoed byte-exact in {:.2} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One connection: a writer thread streams `total` bytes, this thread reads the echo and compares
/// it with the same stream; returns (bytes, first mismatch if any).
fn bulk_client(server: SocketAddr, total: u64) -> Result<u64, String> {
    const SEED: u64 = 0x2545_f491_4f6c_dd1d;
    const CHUNK: usize = 64 * 1024;
    let s =
        TcpStream::connect_timeout(&server, Duration::from_secs(10)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    let mut r = s;
    // The stream: 8 bytes of xorshift64 output at a time, little-endian.
    let fill = |state: &mut u64, buf: &mut [u8]| {
        for c in buf.chunks_mut(8) {
            let x = xorshift(state).to_le_bytes();
            c.copy_from_slice(&x[..c.len()]);
        }
    };
    std::thread::scope(|sc| {
        let writer = sc.spawn(move || -> Result<(), String> {
            let mut state = SEED;
            let mut buf = vec![0u8; CHUNK];
            let mut left = total;
            while left > 0 {
                let n = usize::try_from(left.min(CHUNK as u64)).expect("small");
                fill(&mut state, &mut buf[..n]);
                w.write_all(&buf[..n]).map_err(|e| format!("write at {}: {e}", total - left))?;
                left -= n as u64;
            }
            w.shutdown(Shutdown::Write).map_err(|e| format!("shutdown: {e}"))
        });
        let mut state = SEED;
        let mut want = vec![0u8; CHUNK];
        let mut got = vec![0u8; CHUNK];
        let mut at = 0u64;
        while at < total {
            let n = usize::try_from((total - at).min(CHUNK as u64)).expect("small");
            fill(&mut state, &mut want[..n]);
            r.read_exact(&mut got[..n]).map_err(|e| format!("read at {at} of {total}: {e}"))?;
            if let Some(i) = want[..n].iter().zip(&got[..n]).position(|(a, b)| a != b) {
                return Err(format!("byte {} of the stream came back changed", at + i as u64));
            }
            at += n as u64;
        }
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).map_err(|e| format!("waiting for the server's FIN: {e}"))?;
        if !rest.is_empty() {
            return Err(format!("{} unexpected bytes after the stream", rest.len()));
        }
        writer.join().map_err(|_| "the writer panicked".to_owned())??;
        Ok(at)
    })
}

/// The bulk transfer over IPv4, or over IPv6 when `ipv6`.
fn bulk(mode: XdpMode, ipv6: bool, run: Run) -> Result<(), String> {
    let server = if ipv6 {
        SocketAddr::from((SERVER6, PORT))
    } else {
        SocketAddr::from(SocketAddrV4::new(SERVER, PORT))
    };
    let mib =
        std::env::var("NC_XDP_BULK_MIB").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(BULK_MIB_DEFAULT);
    let total = mib << 20;
    let mut elapsed = Duration::ZERO;
    let (report, result) = serve(mode, run, || {
        let start = Instant::now();
        let r = bulk_client(server, total);
        elapsed = start.elapsed();
        r
    })?;
    println!("{report}");
    let bytes = result?;
    let core = report.cores.first().ok_or("no core in the report")?;
    assert_eq!(bytes, total);
    assert_eq!(report.bytes_echoed(), total, "every byte echoed once");
    assert_eq!((core.served, report.closed(), core.failed), (1, 1, 0));
    let stack = &report.snapshot().cores.first().ok_or("no core in the snapshot")?.stack;
    assert_eq!(stack.rx_malformed, 0, "no frame with a bad checksum: {stack:?}");
    check_arp(!ipv6, ipv6)?;
    println!(
        "{mode:?}: {mib} MiB kernel -> us -> kernel on one connection, compared byte for byte, in {:.2} s ({:.1} MiB/s each way)",
        elapsed.as_secs_f64(),
        mib as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}

/// The voluntary context switches (sleeps) of this process's thread named `name`, if there is one.
fn voluntary_switches(name: &str) -> Option<u64> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let task = tasks
        .filter_map(Result::ok)
        .find(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))?;
    let status = std::fs::read_to_string(task.path().join("status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("voluntary_ctxt_switches:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Between requests a core sleeps on its AF_XDP socket (`ppoll` until a frame arrives) instead of
/// yielding its CPU for 2 ms before its first nap: one connection
/// sends a message every 500 us, and the core thread's sleeps (voluntary context switches) are
/// counted over 200 of them. A core that yields through each gap sleeps in none of them.
fn idle_core_sleeps(mode: XdpMode, run: Run) -> Result<(), String> {
    const ROUNDS: u64 = 200;
    let (report, result) = serve(mode, run, || -> Result<u64, String> {
        let addr = SocketAddrV4::new(SERVER, PORT);
        let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(10))
            .map_err(|e| format!("connect: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
        let mut back = [0u8; 64];
        let mut round = |i: u64| -> Result<(), String> {
            let msg = [u8::try_from(i % 251).unwrap_or(0); 64];
            s.write_all(&msg).and_then(|()| s.read_exact(&mut back)).map_err(|e| format!("echo {i}: {e}"))?;
            if back == msg { Ok(()) } else { Err(format!("echo {i} came back changed")) }
        };
        round(0)?;
        let before = voluntary_switches("core0").ok_or("no thread named core0")?;
        for i in 1..=ROUNDS {
            std::thread::sleep(Duration::from_micros(500));
            round(i)?;
        }
        let after = voluntary_switches("core0").ok_or("no thread named core0")?;
        Ok(after - before)
    })?;
    let slept = result?;
    println!("{mode:?}: the core slept {slept} times over {ROUNDS} idle gaps of 500 us; {report}");
    assert!(slept >= ROUNDS, "the core spun through the idle gaps: {slept} sleeps in {ROUNDS} gaps");
    Ok(())
}

#[test]
fn generic_xdp_core_sleeps_when_idle() {
    with_veth(|| idle_core_sleeps(XdpMode::Generic, run));
}

#[test]
fn generic_xdp_echo_serves_concurrent_kernel_clients() {
    with_veth(|| echo(XdpMode::Generic, run));
}

#[test]
fn native_xdp_echo_serves_concurrent_kernel_clients() {
    with_veth(|| echo(XdpMode::Native, run));
}

#[test]
fn generic_xdp_bulk_is_byte_exact() {
    with_veth(|| bulk(XdpMode::Generic, false, run));
}

#[test]
fn native_xdp_bulk_is_byte_exact() {
    with_veth(|| bulk(XdpMode::Native, false, run));
}

#[test]
fn generic_xdp_bulk_is_byte_exact_ipv6() {
    with_veth(|| bulk(XdpMode::Generic, true, run));
}

#[test]
fn native_xdp_bulk_is_byte_exact_ipv6() {
    with_veth(|| bulk(XdpMode::Native, true, run));
}

/// The async echo (feature `async`) serves the same kernel clients: many connections, one bulk
/// stream, and its core sleeps between requests as the blocking one does.
#[cfg(feature = "async")]
#[test]
fn generic_xdp_async_echo_serves_concurrent_kernel_clients() {
    with_veth(|| echo(XdpMode::Generic, netchannels::echo::run_async));
}

#[cfg(feature = "async")]
#[test]
fn native_xdp_async_echo_serves_concurrent_kernel_clients() {
    with_veth(|| echo(XdpMode::Native, netchannels::echo::run_async));
}

#[cfg(feature = "async")]
#[test]
fn generic_xdp_async_bulk_is_byte_exact() {
    with_veth(|| bulk(XdpMode::Generic, false, netchannels::echo::run_async));
}

#[cfg(feature = "async")]
#[test]
fn generic_xdp_async_core_sleeps_when_idle() {
    with_veth(|| idle_core_sleeps(XdpMode::Generic, netchannels::echo::run_async));
}
