//! hyper on our stack against hyper on the kernel's TCP (issue 19): the same hyper 1.x HTTP/1.1
//! service ([`netchannels::hyper_service::Pages`]: `GET /` a short page, `GET /bytes/N`), the same
//! `wrk` client, the same run, interleaved rounds.
//!
//! `cargo bench -p netchannels-benches --features async --bench hyper` (root, `/dev/net/tun`, iproute2 and `wrk`;
//! otherwise it prints `skipped: <why>` and exits 0).
//!
//! # Setup
//!
//! The bench thread enters a private network namespace A and creates a TAP `nchyb0` (the
//! kernel's side 10.210.0.1/24, our server 10.210.0.2) and a veth pair `nchyv0`/`nchyv1`
//! (`nchyv1`, the client's end, 10.211.0.1/24). Ours: [`netchannels::hyper_service::run`] on the
//! TAP (one core, its offloads on: the default), hyper over `TokioIo<AsyncStream>` on the core's
//! executor. The kernel's: a thread named `hyper-kernel` enters a second namespace B, `nchyv0`
//! moves there and gets 10.211.0.2 (offloads as they come), and the thread runs tokio's
//! current-thread runtime with a `TcpListener` and a task per connection serving the same
//! [`Pages`] with the same `http1::Builder` settings (keep-alive on, hyper's 30 s header timeout:
//! ours on the core's timer, this one on `TokioTimer`) over `TokioIo<TcpStream>`. Both
//! servers stay up for the whole run; one is loaded at a time.
//!
//! # The client, and what is measured
//!
//! `wrk -t1 -cNC_HYPER_BENCH_CONNS -dNC_HYPER_BENCH_SECS URL` (defaults 16 connections, 3 s), a
//! child process in namespace A, for each path (`/` and `/bytes/16384`), alternating ours and the
//! kernel's, `NC_HYPER_BENCH_ROUNDS` rounds (default 3); the table gives each row's median over
//! the rounds.
//!
//! * **requests/s**: wrk's `Requests/sec`.
//! * **server CPU/request**: the server's threads' CPU time (`/proc/self/task/TID/schedstat`) over
//!   wrk's run, divided by wrk's request count: ours, the runtime's threads (`core0`, ...: the
//!   stack, hyper and the TAP's reads and writes, with the kernel work done in those system
//!   calls); the kernel's, the `hyper-kernel` thread (hyper, tokio and the socket calls, with the
//!   kernel's TCP work done in them; softirq work that runs elsewhere is not counted, see the
//!   machine column).
//! * **machine CPU/request**: all CPUs' busy time (`/proc/stat`, wrk and other processes
//!   included).
//! * **wrk CPU/request**: wrk's own CPU.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

#[path = "common/netns.rs"]
mod netns;
#[path = "common/wrk.rs"]
mod wrk;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use netchannels::cli::{IpCidr, ServeArgs};
use netchannels::hyper_service::{Options, Pages, run};
use netchannels::tcp_lib::wire::Ipv4Cidr;
use netns::{env_or, ip};
use wrk::{Run, loadavg, median, threads_cpu, wait_listening};

const TAP: &str = "nchyb0";
const TAP_CLIENT: &str = "10.210.0.1/24";
const TAP_SERVER: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 2);
const KERNEL_END: &str = "nchyv0";
const CLIENT_END: &str = "nchyv1";
const VETH_CLIENT: &str = "10.211.0.1/24";
const VETH_SERVER: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 2);
const PORT: u16 = 80;
const PATHS: [&str; 2] = ["/", "/bytes/16384"];
/// The kernel baseline's thread.
const KERNEL_THREAD: &str = "hyper-kernel";
/// The bench's own thread (waits for wrk).
const BENCH_THREAD: &str = "hyper-bench";

fn unavailable() -> Option<String> {
    if let Some(why) = netns::namespace_unavailable() {
        return Some(why.into());
    }
    let wrk = std::process::Command::new("wrk").arg("--version").output();
    if wrk.is_err() {
        return Some("`wrk` is not installed (apt-get install wrk)".into());
    }
    None
}

/// The kernel baseline: on this (new) thread, enters namespace B, waits for the veth end, and
/// serves `pages` with hyper on tokio's current-thread runtime; `ready` gets this thread's id
/// (for the veth move) and then the result of binding. Runs until the process exits.
fn kernel_server(pages: Arc<Pages>, ready: &mpsc::Sender<Result<i32, String>>) -> Result<(), String> {
    // SAFETY: unshare only changes this thread's namespace membership.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!("unshare: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: gettid has no preconditions.
    let _ = ready.send(Ok(unsafe { libc::gettid() }));
    let start = Instant::now();
    while ip(&["link", "show", KERNEL_END]).is_err() {
        if start.elapsed() > Duration::from_secs(5) {
            return Err(format!("{KERNEL_END} never arrived in the kernel server's namespace"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    ip(&["addr", "add", &format!("{VETH_SERVER}/24"), "dev", KERNEL_END])?;
    ip(&["link", "set", "lo", "up"])?;
    ip(&["link", "set", KERNEL_END, "up"])?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("tokio's runtime: {e}"))?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(SocketAddrV4::new(VETH_SERVER, PORT))
            .await
            .map_err(|e| format!("bind {VETH_SERVER}:{PORT}: {e}"))?;
        let _ = ready.send(Ok(0));
        // As ours: keep-alive, and hyper's default 30 s header timeout, here on tokio's timer.
        let mut http = http1::Builder::new();
        http.keep_alive(true).timer(TokioTimer::new());
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            let (pages, http) = (Arc::clone(&pages), http.clone());
            tokio::spawn(async move {
                let service = service_fn(|req: hyper::Request<hyper::body::Incoming>| {
                    std::future::ready(Ok::<_, std::convert::Infallible>(
                        pages.respond(req.method(), req.uri().path()),
                    ))
                });
                let _ = http.serve_connection(TokioIo::new(stream), service).await;
            });
        }
    })
}

/// Starts the kernel baseline in namespace B with the veth's far end; returns once it listens.
fn start_kernel_server(pages: &Arc<Pages>) -> Result<(), String> {
    ip(&["link", "add", KERNEL_END, "type", "veth", "peer", "name", CLIENT_END])?;
    ip(&["addr", "add", VETH_CLIENT, "dev", CLIENT_END])?;
    ip(&["link", "set", CLIENT_END, "up"])?;
    let (tx, rx) = mpsc::channel();
    let pages = Arc::clone(pages);
    std::thread::Builder::new()
        .name(KERNEL_THREAD.into())
        .spawn(move || {
            if let Err(e) = kernel_server(pages, &tx) {
                let _ = tx.send(Err(e));
            }
        })
        .map_err(|e| format!("cannot start the kernel server's thread: {e}"))?;
    let tid = rx.recv().map_err(|_| "the kernel server's thread died".to_owned())??;
    ip(&["link", "set", KERNEL_END, "netns", &tid.to_string()])?;
    rx.recv_timeout(Duration::from_secs(10)).map_err(|_| "the kernel server never listened".to_owned())??;
    wait_listening(SocketAddr::from(SocketAddrV4::new(VETH_SERVER, PORT)), &mut || Ok(()))
}

/// One row of the table: a server, a path, its runs.
struct Rows {
    server: &'static str,
    path: &'static str,
    runs: Vec<Run>,
}

fn bench() -> Result<(), String> {
    let conns = env_or("NC_HYPER_BENCH_CONNS", 16);
    let secs = env_or("NC_HYPER_BENCH_SECS", 3);
    let rounds = env_or("NC_HYPER_BENCH_ROUNDS", 3usize).max(1);
    // SAFETY: unshare only changes this thread's namespace membership.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!("skip:unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error()));
    }
    ip(&["link", "set", "lo", "up"])?;
    ip(&["tuntap", "add", "dev", TAP, "mode", "tap"]).map_err(|e| format!("skip:{e}"))?;
    ip(&["addr", "add", TAP_CLIENT, "dev", TAP])?;
    ip(&["link", "set", TAP, "up"])?;
    let pages = Arc::new(Pages::new());
    start_kernel_server(&pages)?;
    let options = Options {
        serve: ServeArgs {
            tap: Some(TAP.into()),
            ips: vec![IpCidr::V4(Ipv4Cidr::new(TAP_SERVER, 24).expect("a /24"))],
            ..ServeArgs::default()
        },
        progress: false,
        port: PORT,
        ..Options::default()
    };
    println!(
        "hyper bench: wrk -t1 -c{conns} -d{secs}s, {rounds} rounds, {} CPUs, load average {} at the start",
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        loadavg()
    );
    let ours_cpu = || threads_cpu(|name| name != KERNEL_THREAD && name != BENCH_THREAD);
    let kernel_cpu = || threads_cpu(|name| name == KERNEL_THREAD);
    let mut table: Vec<Rows> = Vec::new();
    for path in PATHS {
        table.push(Rows { server: "hyper on our stack (TAP)", path, runs: Vec::new() });
        table.push(Rows { server: "hyper on the kernel (tokio, veth)", path, runs: Vec::new() });
    }
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|s| -> Result<_, String> {
        let server = std::thread::Builder::new()
            .name("hyper-ours".into())
            .spawn_scoped(s, || run(&options, &stop))
            .map_err(|e| e.to_string())?;
        let ours = SocketAddr::from(SocketAddrV4::new(TAP_SERVER, PORT));
        let measured = wait_listening(ours, &mut || {
            if server.is_finished() { Err("our server stopped".to_owned()) } else { Ok(()) }
        })
        .and_then(|()| {
            for _ in 0..rounds {
                for row in &mut table {
                    let (addr, cpu): (Ipv4Addr, &dyn Fn() -> Duration) = if row.server.contains("our stack") {
                        (TAP_SERVER, &ours_cpu)
                    } else {
                        (VETH_SERVER, &kernel_cpu)
                    };
                    row.runs.push(wrk::wrk(&format!("http://{addr}:{PORT}{}", row.path), conns, secs, cpu)?);
                }
            }
            Ok(())
        });
        // Relaxed: a plain flag; the join orders the rest.
        stop.store(true, Ordering::Relaxed);
        let report = server.join().map_err(|_| "our server panicked".to_owned())??;
        measured.map(|()| report)
    })?;
    let first_error = report.cores.iter().find_map(|c| c.first_error.as_deref()).unwrap_or("none");
    println!(
        "ours: {} requests answered, {} connection errors (the first: {first_error}); load average {} at the end",
        report.requests(),
        report.errors(),
        loadavg()
    );
    println!(
        "| server | path | requests/s | server CPU/req | machine CPU/req | wrk CPU/req | wrk latency avg | errors |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---|");
    for row in &table {
        let per = |f: fn(&Run) -> Duration| {
            let mut v: Vec<f64> =
                row.runs.iter().map(|r| f(r).as_secs_f64() * 1e6 / r.requests.max(1) as f64).collect();
            median(&mut v)
        };
        let mut rps: Vec<f64> = row.runs.iter().map(|r| r.rps).collect();
        let errors: Vec<&str> =
            row.runs.iter().map(|r| r.errors.as_str()).filter(|e| !e.is_empty()).collect();
        println!(
            "| {} | {} | {:.0} | {:.1} us | {:.1} us | {:.1} us | {} | {} |",
            row.server,
            row.path,
            median(&mut rps),
            per(|r| r.server_cpu),
            per(|r| r.machine_cpu),
            per(|r| r.wrk_cpu),
            row.runs.iter().map(|r| r.latency.as_str()).collect::<Vec<_>>().join(", "),
            if errors.is_empty() { "-".to_owned() } else { errors.join("; ") }
        );
    }
    Ok(())
}

fn main() {
    // `cargo bench` passes `--bench`; `--list` etc. from test runners: nothing to list.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Some(why) = unavailable() {
        println!("skipped: {why}");
        return;
    }
    let bench = std::thread::Builder::new().name(BENCH_THREAD.into()).spawn(bench);
    match bench.map(std::thread::JoinHandle::join) {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) if e.starts_with("skip:") => println!("skipped: {}", &e["skip:".len()..]),
        Ok(Ok(Err(e))) => {
            eprintln!("hyper bench: {e}");
            std::process::exit(1);
        }
        _ => {
            eprintln!("hyper bench: the bench thread failed");
            std::process::exit(1);
        }
    }
}
