//! The echo service's `--tap` mode against the kernel's TCP and UDP: many concurrent `std::net`
//! connections over IPv4 and IPv6 at once (the server given `--ip` once per family, and `--udp`:
//! a kernel UDP socket per family checks its echoes too), in a private network
//! namespace, random message sizes, every echoed byte checked, and the server's summary and buffer
//! accounting checked afterwards.
//!
//! The test thread calls `unshare(CLONE_NEWNET)` (namespaces are per thread; the threads it spawns
//! inherit it), creates a TAP with `ip tuntap`, gives the kernel's side 10.201.0.1/24 and
//! fd00:201::1/64 and runs [`netchannels::echo::run`] on it as 10.201.0.2/24 and fd00:201::2/64. Without root or `/dev/net/tun` it prints
//! `skipped: <why>` (`netns_test::skip`).
//!
//! The async echo ([`netchannels::echo::run_async`], feature `async`) passes the same tests, TCP
//! only (it refuses `--udp`).
//! The test command counts that as a skip (under `CI=true` a failure unless allowed); an error once
//! those preconditions hold fails the test.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use netchannels::cli::IpCidr;
use netchannels::echo::{Options, Report, run};
use netchannels::tcp_lib::wire::{Ipv4Cidr, Ipv6Cidr};
use netns_test::ip;

const IFACE: &str = "ncecho0";
const KERNEL: &str = "10.201.0.1/24";
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 2);
const KERNEL6: &str = "fd00:201::1/64";
const SERVER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x201, 0, 0, 0, 0, 0, 2);
const PORT: u16 = 7;
const CONNECTIONS: usize = 48;
const MESSAGES: usize = 12;
const MAX_SIZE: usize = 20_000;
/// UDP datagrams each family's kernel socket sends to the echo (`--udp`).
const DATAGRAMS: usize = 50;

/// One kernel client: `MESSAGES` messages of random size, each written whole and read back whole,
/// then a half-close and the server's FIN; odd clients over IPv6.
fn kernel_client(index: usize) -> Result<u64, String> {
    let server =
        if index % 2 == 1 { SocketAddr::from((SERVER6, PORT)) } else { SocketAddr::from((SERVER, PORT)) };
    netns_test::echo_client(server, index as u64, MESSAGES, MAX_SIZE)
}

/// A kernel UDP socket sends `DATAGRAMS` datagrams of varied sizes to the echo port at `server`,
/// one at a time, and checks every echo byte-exact (after knocking until the echo is up).
fn kernel_udp_client(server: SocketAddr) -> Result<u64, String> {
    let bind: SocketAddr =
        if server.is_ipv6() { (Ipv6Addr::UNSPECIFIED, 0).into() } else { (Ipv4Addr::UNSPECIFIED, 0).into() };
    let s = UdpSocket::bind(bind).map_err(|e| format!("udp bind: {e}"))?;
    s.connect(server).map_err(|e| format!("udp connect {server}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 2048];
    // The server may not have bound its UDP port (or even opened the TAP) when this starts, and
    // UDP does not retry as a SYN does: knock until the echo answers (or ECONNREFUSED says the
    // port is not bound yet), for at most 10 s.
    s.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        s.send(b"knock").map_err(|e| format!("udp knock to {server}: {e}"))?;
        match s.recv(&mut buf) {
            Ok(5) if &buf[..5] == b"knock" => break,
            Ok(n) => return Err(format!("udp knock from {server}: {n} unexpected bytes")),
            Err(_) if std::time::Instant::now() < deadline => {}
            Err(e) => return Err(format!("udp knock to {server}: no echo within 10 s: {e}")),
        }
    }
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    for i in 0..DATAGRAMS {
        let msg: Vec<u8> = (0..(i * 29) % 1400).map(|k| (k ^ i).to_le_bytes()[0]).collect();
        s.send(&msg).map_err(|e| format!("udp send #{i} to {server}: {e}"))?;
        // Skipping the late echoes of knocks that were answered twice.
        let mut n = s.recv(&mut buf).map_err(|e| format!("udp echo #{i} from {server}: {e}"))?;
        while &buf[..n] == b"knock" {
            n = s.recv(&mut buf).map_err(|e| format!("udp echo #{i} from {server}: {e}"))?;
        }
        if buf[..n] != msg[..] {
            return Err(format!("udp echo #{i} from {server}: {n} bytes back for {}", msg.len()));
        }
    }
    Ok(DATAGRAMS as u64)
}

/// An echo service: [`run`] or `run_async`.
type Run = fn(&Options, &AtomicBool) -> Result<Report, String>;

/// The blocking echo over TCP and UDP, the async one over TCP.
fn in_namespace(offloads: bool, run: Run, udp: bool) -> Result<(), String> {
    ip(&["tuntap", "add", "dev", IFACE, "mode", "tap"])?;
    ip(&["addr", "add", KERNEL, "dev", IFACE])?;
    ip(&["-6", "addr", "add", KERNEL6, "dev", IFACE, "nodad"])?;
    ip(&["link", "set", IFACE, "up"])?;
    let mut options = Options::tap(IFACE, Ipv4Cidr::new(SERVER, 24).expect("a /24"), PORT);
    options.serve.ips.push(IpCidr::V6(Ipv6Cidr::new(SERVER6, 64).expect("a /64")));
    options.udp = udp;
    options.serve.tap_no_offloads = !offloads;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let server = s.spawn(|| run(&options, &stop));
        let clients: Vec<_> = (0..CONNECTIONS).map(|i| s.spawn(move || kernel_client(i))).collect();
        let udp_clients: Vec<_> = [SocketAddr::from((SERVER, PORT)), SocketAddr::from((SERVER6, PORT))]
            .into_iter()
            .filter(|_| udp)
            .map(|to| s.spawn(move || kernel_udp_client(to)))
            .collect();
        let udp_results: Vec<Result<u64, String>> = udp_clients
            .into_iter()
            .map(|c| c.join().unwrap_or_else(|_| Err("a UDP client panicked".into())))
            .collect();
        let results: Vec<Result<u64, String>> = clients
            .into_iter()
            .map(|c| c.join().unwrap_or_else(|_| Err("a client panicked".into())))
            .collect();
        // Relaxed: a plain flag; the join orders the rest.
        stop.store(true, Ordering::Relaxed);
        let report = server.join().map_err(|_| "the server panicked".to_owned())??;
        println!("{report}");
        let mut sent = 0;
        for r in results {
            sent += r?;
        }
        for r in udp_results {
            r?;
        }
        let core = report.cores.first().ok_or("no core in the report")?;
        if udp {
            assert!(core.datagrams >= 2 * DATAGRAMS as u64 + 2, "every UDP datagram echoed, both families");
        }
        assert_eq!(report.cores.len(), 1);
        assert_eq!(core.served, CONNECTIONS as u64, "every connection served");
        assert_eq!(report.closed(), CONNECTIONS as u64, "every connection closed after the kernel's FIN");
        assert_eq!(report.bytes_echoed(), sent, "every byte echoed once");
        assert_eq!(core.failed, 0);
        let accept = report.accept().ok_or("no accept counters for the echo port")?;
        assert_eq!(accept.enqueued, CONNECTIONS as u64);
        assert_eq!(accept.local, CONNECTIONS as u64);
        assert!(report.runtime.errors.is_empty(), "{report}");
        assert_eq!(report.runtime.buffers.len(), 1, "the pool was checked for leaks");
        let stack = &report.runtime.snapshot.cores.first().ok_or("no core in the runtime's report")?.stack;
        assert_eq!(
            stack.rx_checksum_trusted > 0,
            offloads,
            "the kernel's partial checksums trusted: {stack:?}"
        );
        Ok(())
    })
}

#[test]
fn tap_echo_serves_concurrent_kernel_clients() {
    netns_test::in_private_namespace(|| in_namespace(true, run, true));
}

/// The same over a TAP opened without offloads (`--tap-no-offloads`): plain frames both ways.
#[test]
fn tap_echo_without_offloads_serves_concurrent_kernel_clients() {
    netns_test::in_private_namespace(|| in_namespace(false, run, true));
}

#[cfg(feature = "async")]
#[test]
fn tap_async_echo_serves_concurrent_kernel_clients() {
    netns_test::in_private_namespace(|| in_namespace(true, netchannels::echo::run_async, false));
}

#[cfg(feature = "async")]
#[test]
fn tap_async_echo_without_offloads_serves_concurrent_kernel_clients() {
    netns_test::in_private_namespace(|| in_namespace(false, netchannels::echo::run_async, false));
}
