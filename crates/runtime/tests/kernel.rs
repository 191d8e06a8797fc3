//! The example `echo_server` (its `serve`, compiled in here) against the Linux kernel's TCP: the
//! kernel's `std::net` clients, on threads of this process inside a private network namespace,
//! each send a pattern and read it back byte-exact through the runtime.
//!
//! * Over a TAP, one core: 20 clients of 64 KiB.
//! * Over AF_XDP on a veth pair with 4 RX/TX queues, one core per queue: 64 concurrent clients of
//!   64 KiB, their frames spread over the queues by the kernel's per-socket TX hash (veth delivers
//!   on the RX queue of the peer's TX queue); the report shows that several queues received frames
//!   and several cores served connections.
//! * Both under 3% loss each way: `iptables -m statistic` in the namespace drops the test port's
//!   segments on INPUT and OUTPUT. The stacks keep the runtime's default timers (SACK and fast
//!   retransmit recover most losses; a run takes a second or two).
//! * The example stays at most 40 lines.
//!
//! Each test runs in a namespace of its own (`netns_test`), one at a time (the cores busy-poll),
//! under a deadline that bounds every connect, read and write. Without root, `/dev/net/tun`,
//! iproute2, AF_XDP or (for the lossy ones) iptables, a test prints `skipped: <why>` (`netns_test::skip`).
//! The test command counts that as a skip (under `CI=true` a failure unless allowed); an error once
//! those preconditions hold fails the test.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use netchannel::dev::XdpError;
use netchannel_runtime::{Backend, Builder, Error, OpenError, Report, Runtime};
use netns_test::{SKIP, ip, tx_checksum_off};
use tcp_lib::wire::Ipv4Cidr;

#[path = "../examples/echo_server.rs"]
#[allow(dead_code, unreachable_pub, reason = "the example's `main` is not called here")]
mod echo_server;

/// The kernel's address (its end of the link) and ours, in every namespace.
const KERNEL: &str = "10.209.0.1/24";
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 209, 0, 2);
const PORT: u16 = 7;
/// A port nothing listens on: the runtime's stack answers a SYN to it with a reset once it is up.
const PROBE_PORT: u16 = 9;
const LOSS: f64 = 0.03;

/// The tests share two CPUs with whatever else runs, and the runtime's cores poll: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What one run asks for.
struct Case {
    clients: usize,
    size: usize,
    /// Bounds the run: every client's connect, reads and writes, and the server.
    limit: Duration,
}

/// What one run did.
struct Outcome {
    report: Report,
    elapsed: Duration,
    /// The kernel's source ports, one per client.
    ports: Vec<u16>,
}

/// The bytes client `i` sends (xorshift64: every client's differ).
fn pattern(i: usize, len: usize) -> Vec<u8> {
    let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[3]
        })
        .collect()
}

/// The time left until `deadline` (at least a millisecond: a zero timeout means none).
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))
}

/// One kernel client: connects, writes its pattern from a second thread and half-closes while
/// this one reads the echo to the server's FIN; the echo must be the pattern. Returns its source
/// port.
fn client(i: usize, server: SocketAddrV4, size: usize, deadline: Instant) -> Result<u16, String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("client {i}: {what}: {e}");
    let stream =
        TcpStream::connect_timeout(&server.into(), left(deadline)).map_err(|e| fail("connect", &e))?;
    stream.set_read_timeout(Some(left(deadline))).map_err(|e| fail("read timeout", &e))?;
    stream.set_write_timeout(Some(left(deadline))).map_err(|e| fail("write timeout", &e))?;
    let port = stream.local_addr().map_err(|e| fail("local address", &e))?.port();
    let data = pattern(i, size);
    let back = std::thread::scope(|s| {
        let writer = s.spawn(|| -> io::Result<()> {
            (&stream).write_all(&data)?;
            stream.shutdown(Shutdown::Write)
        });
        let mut back = Vec::with_capacity(size);
        let read = (&stream).read_to_end(&mut back);
        let written = writer.join().map_err(|_| format!("client {i}: the writer panicked"))?;
        written.map_err(|e| fail("write", &e))?;
        read.map_err(|e| fail(&format!("read ({} of {size} bytes back)", back.len()), &e))?;
        Ok::<_, String>(back)
    })?;
    if let Some(at) = data.iter().zip(&back).position(|(a, b)| a != b) {
        return Err(format!("client {i}: byte {at} of {size} came back changed"));
    }
    if back.len() != size {
        return Err(format!("client {i}: {} bytes came back, not {size}", back.len()));
    }
    Ok(port)
}

/// The runtime's error as a test outcome: missing AF_XDP support is a skip.
fn server_error(e: &Error) -> String {
    match e {
        Error::Open(OpenError::Xdp {
            source: XdpError::Unsupported { .. } | XdpError::PermissionDenied { .. },
            ..
        }) => format!("{SKIP}{e}"),
        _ => format!("the server failed: {e}"),
    }
}

/// Serves `builder` with the example's `serve` while `case.clients` kernel clients run at once;
/// stops the server when they are done and checks the report's accounting.
fn echo(builder: Builder, case: &Case) -> Result<Outcome, String> {
    let deadline = Instant::now() + case.limit;
    let server = SocketAddrV4::new(SERVER, PORT);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let serving = s.spawn(|| echo_server::serve(builder, PORT, Some(case.limit.as_secs_f64()), &stop));
        let finish = |serving: std::thread::ScopedJoinHandle<'_, Result<Report, Error>>| {
            // Relaxed: a plain flag (the join orders the rest).
            stop.store(true, Ordering::Relaxed);
            match serving.join() {
                Ok(r) => r.map_err(|e| server_error(&e)),
                Err(_) => Err("the server panicked".to_owned()),
            }
        };
        // Up once its stack answers: a reset from the probe port (no ARP answer before that).
        loop {
            if serving.is_finished() {
                return Err(finish(serving).err().unwrap_or_else(|| "the server stopped early".into()));
            }
            let probe = SocketAddrV4::new(SERVER, PROBE_PORT);
            match TcpStream::connect_timeout(&probe.into(), Duration::from_millis(500)) {
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
                Ok(_) => break,
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("the server never answered: {e}; {:?}", finish(serving))),
            }
        }
        let start = Instant::now();
        let clients: Vec<_> =
            (0..case.clients).map(|i| s.spawn(move || client(i, server, case.size, deadline))).collect();
        let results: Vec<Result<u16, String>> = clients
            .into_iter()
            .map(|c| c.join().unwrap_or_else(|_| Err("a client panicked".into())))
            .collect();
        let elapsed = start.elapsed();
        let report = finish(serving)?;
        let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        if !failed.is_empty() {
            return Err(format!(
                "{} of {} clients failed after {elapsed:.2?}, first: {}\n{report}{}",
                failed.len(),
                case.clients,
                failed[0],
                report.snapshot
            ));
        }
        let ports: Vec<u16> = results.into_iter().map(Result::unwrap_or_default).collect();
        let s = &report.snapshot;
        assert!(report.errors.is_empty(), "{report}");
        assert_eq!(s.accepted(), case.clients as u64, "every connection accepted once: {s}");
        assert_eq!(s.rx_malformed(), 0, "{s}");
        for (name, audit) in &report.buffers {
            assert_eq!(audit.outstanding, 0, "{name}: {audit:?}");
        }
        Ok(Outcome { report, elapsed, ports })
    })
}

/// `iptables` (or `iptables-legacy`) drops the test port's segments at random, `LOSS` each way:
/// INPUT from the server's port, OUTPUT to it. Returns the command that worked.
fn lossy() -> Result<&'static str, String> {
    let p = LOSS.to_string();
    let port = PORT.to_string();
    let random = ["-m", "statistic", "--mode", "random", "--probability", &p, "-j", "DROP"];
    let rules =
        [["-A", "INPUT", "-p", "tcp", "--sport", &port], ["-A", "OUTPUT", "-p", "tcp", "--dport", &port]];
    let mut why = Vec::new();
    for cmd in ["iptables", "iptables-legacy"] {
        let added =
            rules.iter().try_for_each(|rule| match Command::new(cmd).args(rule).args(random).output() {
                Ok(out) if out.status.success() => Ok(()),
                Ok(out) => Err(format!("{cmd}: {}", String::from_utf8_lossy(&out.stderr).trim())),
                Err(e) => Err(format!("{cmd}: {e}")),
            });
        match added {
            Ok(()) => return Ok(cmd),
            Err(e) => why.push(e),
        }
        // No half-installed rule before the other backend.
        let _ = Command::new(cmd).arg("-F").output();
    }
    Err(format!("{SKIP}no iptables with the statistic match here: {}", why.join("; ")))
}

/// The packets `cmd -L CHAIN` counts against its DROP rules.
fn dropped(cmd: &str, chain: &str) -> u64 {
    let Ok(out) = Command::new(cmd).args(["-L", chain, "-v", "-x", "-n"]).output() else { return 0 };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("DROP"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Checks that `cmd`'s rules dropped segments both ways; returns (in, out).
fn check_dropped(cmd: &str) -> Result<(u64, u64), String> {
    let (input, output) = (dropped(cmd, "INPUT"), dropped(cmd, "OUTPUT"));
    if input == 0 || output == 0 {
        return Err(format!("iptables dropped nothing one way: in {input}, out {output}"));
    }
    Ok((input, output))
}

fn server_ip() -> Ipv4Cidr {
    Ipv4Cidr::new(SERVER, 24).expect("a /24")
}

/// Runs `body` in a private namespace, after the other tests of this file.
fn isolated(body: impl FnOnce() -> Result<(), String> + Send + 'static) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    netns_test::in_private_namespace(move || {
        ip(&["link", "set", "lo", "up"])?;
        body()
    });
}

/// A TAP named `tap0` with the kernel's address on it; the runtime serves it as `SERVER`.
fn tap() -> Result<Builder, String> {
    ip(&["tuntap", "add", "dev", "tap0", "mode", "tap"])?;
    ip(&["addr", "add", KERNEL, "dev", "tap0"])?;
    ip(&["link", "set", "tap0", "up"])?;
    Ok(Runtime::builder().backend(Backend::tap("tap0")).cores(1).ip(server_ip()))
}

/// A veth pair with 4 RX and 4 TX queues each way; the runtime serves `veth0` through AF_XDP, all
/// 4 queues, one core each; the kernel has `veth1`, its TX checksum offload off.
fn veth() -> Result<Builder, String> {
    let q = ["numrxqueues", "4", "numtxqueues", "4"];
    let mut args = vec!["link", "add", "veth0"];
    args.extend(q);
    args.extend(["type", "veth", "peer", "name", "veth1"]);
    args.extend(q);
    ip(&args)?;
    ip(&["addr", "add", KERNEL, "dev", "veth1"])?;
    tx_checksum_off("veth1")?;
    ip(&["link", "set", "veth0", "up"])?;
    ip(&["link", "set", "veth1", "up"])?;
    Ok(Runtime::builder().backend(Backend::xdp("veth0")).cores(4).ip(server_ip()))
}

/// Queues that received frames, and connections served per core.
fn spread(report: &Report) -> (Vec<u64>, Vec<u64>) {
    let s = &report.snapshot;
    let rx = s.queues.iter().map(|q| q.device.rx_packets).collect();
    let served = s.cores.iter().map(|c| c.handoff.accepted_local + c.handoff.accepted_stolen).collect();
    (rx, served)
}

fn summary(what: &str, case: &Case, o: &Outcome) {
    let (rx, served) = spread(&o.report);
    let mut ports = o.ports.clone();
    ports.sort_unstable();
    println!(
        "{what}: {} clients x {} bytes echoed byte-exact in {:.2?}; source ports {}..={}; rx packets per queue {rx:?}; connections per core {served:?}",
        case.clients,
        case.size,
        o.elapsed,
        ports.first().copied().unwrap_or_default(),
        ports.last().copied().unwrap_or_default()
    );
    println!("{}", o.report);
}

/// Several queues received frames and several cores served connections; the kernel's source ports
/// were all different.
fn check_spread(o: &Outcome) -> Result<(), String> {
    let (rx, served) = spread(&o.report);
    let mut ports = o.ports.clone();
    ports.sort_unstable();
    ports.dedup();
    if ports.len() != o.ports.len() {
        return Err(format!("the kernel reused a source port: {:?}", o.ports));
    }
    if rx.iter().filter(|&&n| n > 0).count() < 2 {
        return Err(format!("frames arrived on one queue only: {rx:?}\n{}", o.report.snapshot));
    }
    if served.iter().filter(|&&n| n > 0).count() < 2 {
        return Err(format!("one core served every connection: {served:?}\n{}", o.report.snapshot));
    }
    Ok(())
}

#[test]
fn tap_one_core_echoes_20_kernel_clients() {
    isolated(|| {
        let case = Case { clients: 20, size: 64 * 1024, limit: Duration::from_secs(30) };
        let o = echo(tap()?, &case)?;
        summary("TAP, 1 core", &case, &o);
        assert_eq!(o.report.snapshot.queues.len(), 1);
        assert_eq!(o.report.snapshot.dropped(), 0, "{}", o.report.snapshot);
        Ok(())
    });
}

#[test]
fn xdp_four_queues_echo_64_kernel_clients_on_several_cores() {
    isolated(|| {
        let case = Case { clients: 64, size: 64 * 1024, limit: Duration::from_secs(40) };
        let o = echo(veth()?, &case)?;
        summary("AF_XDP on veth0, 4 queues, 4 cores", &case, &o);
        assert_eq!(o.report.snapshot.queues.len(), 4);
        check_spread(&o)
    });
}

#[test]
fn tap_one_core_echoes_under_loss() {
    isolated(|| {
        let case = Case { clients: 20, size: 64 * 1024, limit: Duration::from_secs(20) };
        let builder = tap()?;
        let cmd = lossy()?;
        let o = echo(builder, &case)?;
        let (input, output) = check_dropped(cmd)?;
        summary(&format!("TAP, 1 core, {LOSS} loss: iptables dropped {input} in, {output} out"), &case, &o);
        Ok(())
    });
}

#[test]
fn xdp_four_queues_echo_under_loss() {
    isolated(|| {
        let case = Case { clients: 64, size: 64 * 1024, limit: Duration::from_secs(20) };
        let builder = veth()?;
        let cmd = lossy()?;
        let o = echo(builder, &case)?;
        let (input, output) = check_dropped(cmd)?;
        summary(
            &format!("AF_XDP, 4 cores, {LOSS} loss: iptables dropped {input} in, {output} out"),
            &case,
            &o,
        );
        check_spread(&o)
    });
}

#[test]
fn the_example_is_at_most_40_lines() {
    let lines = include_str!("../examples/echo_server.rs").lines().count();
    assert!(lines <= 40, "examples/echo_server.rs has {lines} lines, more than 40");
}
