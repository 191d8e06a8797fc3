//! Static HTTP: our httpd ([`netchannels::httpd`]) over a TAP, prepared (pre-segmented, sent by
//! reference from pool buffers) and `--copy`, against nginx (the Debian package) on the far end of a veth pair, the same `wrk`
//! client and the same files in the same run.
//!
//! `cargo bench -p netchannels-benches --bench httpd` (root, `/dev/net/tun`, iproute2, `wrk` and `nginx` on `PATH`;
//! otherwise it prints `skipped: <why>` and exits 0).
//!
//! # Setup
//!
//! The bench thread enters a private network namespace A and creates a TAP `ncht0` (the kernel's
//! side 10.208.0.1/24, our server 10.208.0.2) and a veth pair `nchv0`/`nchv1` (`nchv1`, the
//! client's end, 10.209.0.1/24). For nginx, a helper thread enters a second namespace B, `nchv0`
//! moves there and gets 10.209.0.2, and nginx is started from that thread (so it lives in B):
//! `worker_processes 1`, `master_process off`, `daemon off`, `sendfile on`, `tcp_nopush on`,
//! `access_log off`, `keepalive_requests 1000000`, `root target/httpd-demo`, and `open_file_cache
//! max=64 inactive=60s; open_file_cache_valid 60s` (open descriptors and sizes cached across
//! requests, as a static server is configured in production and as our httpd serves from memory;
//! `NC_HTTPD_BENCH_NGINX_OPEN_FILE_CACHE=off` leaves it out, as this bench did before). The files are the
//! httpd demo set (`Content::demo`, also written to `target/httpd-demo`), of which 1, 16, 24, 64
//! and 256 KiB are fetched (24 KiB: Sandstorm's zero-copy experiment, by reference against
//! `--copy`). nginx runs twice: with the veth's offloads as they come (TSO/GSO: the
//! kernel hands veth 64 KiB super-segments) and with TX checksum offload (and so TSO) off on
//! nginx's end, so that MTU-sized frames cross, as they do on the TAP.
//!
//! # The client, and what is measured
//!
//! `wrk -t1 -cNC_HTTPD_BENCH_CONNS -dNC_HTTPD_BENCH_SECS http://SERVER/SIZE.bin` (defaults 16
//! connections, 5 s), a child process in namespace A, one run per server and size.
//!
//! * **requests/s**: wrk's `Requests/sec`.
//! * **server CPU/request**: for our httpd the bench process's CPU time (`getrusage(RUSAGE_SELF)`,
//!   user + system, all threads: the server thread, its TAP reads and writes and the kernel work done
//!   in them; the bench thread only waits for wrk) over wrk's run; for nginx, nginx's
//!   `utime + stime` from `/proc/PID/stat` over wrk's run. Divided by wrk's request count. Our server
//!   polls (it yields, and sleeps only after 2 ms idle), so its thread is busy whatever the load.
//! * **wrk CPU/request**: wrk's own CPU (`getrusage(RUSAGE_CHILDREN)` across its wait).
//! * **machine CPU/request**: all CPUs' busy time (`/proc/stat`, other processes included).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[path = "common/netns.rs"]
mod netns;
#[path = "common/wrk.rs"]
mod wrk;

use netchannels::cli::ServeArgs;
use netchannels::httpd::{Content, Options, demo_name, run};
use netchannels::tcp_lib::wire::Ipv4Cidr;
use netns::{clock_ticks, env_or, ip, tx_checksum_off};
use wrk::{Run, loadavg, rusage, wait_listening, wrk};

const TAP: &str = "ncht0";
const TAP_CLIENT: &str = "10.208.0.1/24";
const TAP_SERVER: Ipv4Addr = Ipv4Addr::new(10, 208, 0, 2);
const NGINX_END: &str = "nchv0";
const CLIENT_END: &str = "nchv1";
const VETH_CLIENT: &str = "10.209.0.1/24";
const VETH_SERVER: Ipv4Addr = Ipv4Addr::new(10, 209, 0, 2);
const PORT: u16 = 80;
const SIZES: [usize; 5] = [1 << 10, 16 << 10, 24 << 10, 64 << 10, 256 << 10];

/// Whether `cmd ARG` runs at all.
fn runs(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (namespaces, veth, TAP)".into());
    }
    if !runs("ip", "-V") {
        return Some("the `ip` command (iproute2) is not installed".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing (modprobe tun)".into());
    }
    if !runs("wrk", "--version") {
        return Some("`wrk` is not installed (apt-get install wrk)".into());
    }
    if !runs("nginx", "-v") {
        return Some("`nginx` is not installed (apt-get install nginx-light)".into());
    }
    None
}

/// `utime + stime` of process `pid` (`/proc/PID/stat`).
fn proc_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    // After the command: state is field 3, utime 14, stime 15.
    let f: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|x| x.parse().ok()).collect();
    Duration::from_nanos(f.iter().sum::<u64>() * 1_000_000_000 / clock_ticks())
}

/// One server and size: what wrk and the CPU counters said.
struct Row {
    server: String,
    size: usize,
    run: Run,
}

/// The client's settings.
#[derive(Clone, Copy)]
struct Client {
    conns: usize,
    secs: u64,
}

/// Runs wrk against `server` for `size`-byte files; `server_cpu` reads the server's CPU time.
fn measure(
    name: &str,
    server: Ipv4Addr,
    size: usize,
    client: Client,
    server_cpu: &dyn Fn() -> Duration,
) -> Result<Row, String> {
    let url = format!("http://{server}:{PORT}/{}", demo_name(size));
    let run = wrk(&url, client.conns, client.secs, server_cpu)?;
    Ok(Row { server: name.to_owned(), size, run })
}

/// Waits until `server:80` accepts a connection.
fn wait_for(server: Ipv4Addr, alive: &mut dyn FnMut() -> Result<(), String>) -> Result<(), String> {
    wait_listening(SocketAddrV4::new(server, PORT).into(), alive)
}

/// Our httpd on the TAP, prepared or `--copy`: one server, wrk once per size.
fn ours(copy: bool, content: &Arc<Content>, client: Client) -> Result<Vec<Row>, String> {
    let name = if copy { "ours, TAP, --copy" } else { "ours, TAP, by reference" };
    let options = Options {
        serve: ServeArgs {
            tap: Some(TAP.into()),
            ips: vec![netchannels::cli::IpCidr::V4(Ipv4Cidr::new(TAP_SERVER, 24).expect("a /24"))],
            ..ServeArgs::default()
        },
        copy,
        progress: false,
        port: PORT,
        ..Options::default()
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let server = s.spawn(|| run(&options, Arc::clone(content), &stop));
        let rows = wait_for(TAP_SERVER, &mut || {
            if server.is_finished() { Err("the server stopped".to_owned()) } else { Ok(()) }
        })
        .and_then(|()| {
            SIZES
                .iter()
                .map(|&size| measure(name, TAP_SERVER, size, client, &|| rusage(libc::RUSAGE_SELF)))
                .collect::<Result<Vec<_>, _>>()
        });
        // Relaxed: a plain flag; the join orders the rest.
        stop.store(true, Ordering::Relaxed);
        let report = server.join().map_err(|_| "the server panicked".to_owned())??;
        let (prepared, sums) = report.prepared_segments();
        let (by_reference, copied) = report.by_reference();
        println!(
            "{name}: {} requests answered, {} failed connections, {prepared} prepared segments ({sums} with \
             precomputed sums), {by_reference} sent by reference ({copied} copied: frame in flight)",
            report.requests(),
            report.failed(),
        );
        rows
    })
}

/// nginx in namespace B on the veth's far end, serving `root`; wrk once per size.
fn nginx(root: &Path, offload: bool, client: Client) -> Result<Vec<Row>, String> {
    let name = if offload { "nginx, veth" } else { "nginx, veth, TX csum/TSO off" };
    let dir = std::env::temp_dir().join(format!("nc-httpd-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let open_file_cache = if std::env::var("NC_HTTPD_BENCH_NGINX_OPEN_FILE_CACHE").is_ok_and(|v| v == "off") {
        ""
    } else {
        "open_file_cache max=64 inactive=60s;\n  open_file_cache_valid 60s;\n  "
    };
    let conf = format!(
        "worker_processes 1;\nmaster_process off;\ndaemon off;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 1000000;\n  \
         {open_file_cache}default_type application/octet-stream;\n  \
         server {{ listen {VETH_SERVER}:{PORT}; root {r}; }}\n}}\n",
        d = dir.display(),
        r = root.display()
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).map_err(|e| format!("{}: {e}", conf_path.display()))?;
    // Namespace B: a thread enters it, receives the veth end, and starts nginx there.
    let (tid_tx, tid_rx) = mpsc::channel();
    let helper = {
        let (dir, conf_path) = (dir.clone(), conf_path.clone());
        std::thread::spawn(move || -> Result<Child, String> {
            // SAFETY: unshare only changes this thread's namespace membership.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(format!("unshare: {}", std::io::Error::last_os_error()));
            }
            // SAFETY: gettid has no preconditions.
            let _ = tid_tx.send(unsafe { libc::gettid() });
            let start = Instant::now();
            while ip(&["link", "show", NGINX_END]).is_err() {
                if start.elapsed() > Duration::from_secs(5) {
                    return Err(format!("{NGINX_END} never arrived in nginx's namespace"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            ip(&["addr", "add", &format!("{VETH_SERVER}/24"), "dev", NGINX_END])?;
            ip(&["link", "set", "lo", "up"])?;
            ip(&["link", "set", NGINX_END, "up"])?;
            if !offload {
                tx_checksum_off(NGINX_END)?;
            }
            let d = dir.to_string_lossy().into_owned();
            Command::new("nginx")
                .args(["-p", &d, "-e", &format!("{d}/error.log"), "-c"])
                .arg(&conf_path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start nginx: {e}"))
        })
    };
    let tid: i32 = tid_rx.recv().map_err(|_| "the namespace thread failed to start".to_owned())?;
    ip(&["link", "set", NGINX_END, "netns", &tid.to_string()])?;
    let mut child = helper.join().map_err(|_| "the namespace thread panicked".to_owned())??;
    let pid = child.id();
    let errlog = dir.join("error.log");
    let rows = wait_for(VETH_SERVER, &mut || match child.try_wait() {
        Ok(None) => Ok(()),
        _ => Err(format!("nginx exited: {}", std::fs::read_to_string(&errlog).unwrap_or_default())),
    })
    .and_then(|()| {
        SIZES
            .iter()
            .map(|&size| measure(name, VETH_SERVER, size, client, &|| proc_cpu(pid)))
            .collect::<Result<Vec<_>, _>>()
    });
    let _ = child.kill();
    let _ = child.wait();
    // nginx's namespace dies with it, and the veth pair with its end: make a fresh pair for the next run.
    let _ = std::fs::remove_dir_all(&dir);
    rows
}

fn veth() -> Result<(), String> {
    let start = Instant::now();
    while ip(&["link", "show", CLIENT_END]).is_ok() {
        if start.elapsed() > Duration::from_secs(5) {
            return Err(format!("{CLIENT_END} is still there"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ip(&["link", "add", NGINX_END, "type", "veth", "peer", "name", CLIENT_END])?;
    ip(&["addr", "add", VETH_CLIENT, "dev", CLIENT_END])?;
    ip(&["link", "set", CLIENT_END, "up"])
}

fn bench() -> Result<(), String> {
    let client = Client { conns: env_or("NC_HTTPD_BENCH_CONNS", 16), secs: env_or("NC_HTTPD_BENCH_SECS", 5) };
    // SAFETY: unshare only changes this thread's namespace membership.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!("skip:unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error()));
    }
    ip(&["link", "set", "lo", "up"])?;
    ip(&["tuntap", "add", "dev", TAP, "mode", "tap"]).map_err(|e| format!("skip:{e}"))?;
    ip(&["addr", "add", TAP_CLIENT, "dev", TAP])?;
    ip(&["link", "set", TAP, "up"])?;
    // The workspace's target/ (this package sits in benches/).
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/httpd-demo");
    let content = Arc::new(Content::demo(Some(&root)));
    if !content.source.contains("also written") {
        return Err(format!("could not write the demo files to {}", root.display()));
    }
    let load0 = loadavg();
    println!(
        "httpd bench: wrk -t1 -c{} -d{}s, {} CPUs, load average {load0} at the start",
        client.conns,
        client.secs,
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
    );
    let mut rows = Vec::new();
    rows.extend(ours(false, &content, client)?);
    rows.extend(ours(true, &content, client)?);
    for offload in [true, false] {
        veth().map_err(|e| format!("skip:{e}"))?;
        rows.extend(nginx(&root, offload, client)?);
    }
    println!("load average {} at the end", loadavg());
    println!(
        "| server | object | requests/s | server CPU/req | wrk CPU/req | machine CPU/req | server CPU % | wrk latency avg | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for Row { server, size, run: r } in &rows {
        let n = r.requests.max(1) as f64;
        let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
        println!(
            "| {} | {} KiB | {:.0} | {:.1} us | {:.1} us | {:.1} us | {:.0}% | {} | {} |",
            server,
            size >> 10,
            r.rps,
            us(r.server_cpu),
            us(r.wrk_cpu),
            us(r.machine_cpu),
            r.server_cpu.as_secs_f64() * 100.0 / client.secs as f64,
            r.latency,
            if r.errors.is_empty() { "-" } else { &r.errors }
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
    match std::thread::spawn(bench).join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.starts_with("skip:") => println!("skipped: {}", &e["skip:".len()..]),
        Ok(Err(e)) => {
            eprintln!("httpd bench: {e}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("httpd bench: the bench panicked");
            std::process::exit(1);
        }
    }
}
