//! TCP echo over one veth pair, the same kernel client against three servers in the same run:
//! our echo ([`netchannels::echo`]) over AF_XDP (generic and native XDP), our echo over a TAP, and
//! the kernel's own TCP (a `std::net` echo server on the far veth end).
//!
//! `cargo bench -p netchannels-benches --bench xdp_echo` (root: namespaces, veth, XDP; otherwise it prints `skipped: <why>`
//! and exits 0). `NC_XDP_BENCH_SERVERS=generic,kernel` runs only the servers whose names contain one
//! of the comma-separated words (`generic`, `native`, `TAP`, `kernel`).
//!
//! # Setup
//!
//! The bench thread enters a private network namespace A and creates the veth pair `ncbx0`/`ncbx1`
//! (`ncbx1`: the kernel client's end, 10.206.0.1/24, TX checksum offload off: tcp-lib verifies every
//! checksum and AF_XDP carries no "checksum partial" flag; TSO goes off with it) and a TAP `ncbt0`
//! (10.207.0.1/24). The servers, one after another, each for `NC_XDP_BENCH_SECS` (default 5):
//!
//! 1. our echo on `ncbx0` through AF_XDP, generic XDP, as 10.206.0.2;
//! 2. the same, native XDP;
//! 3. our echo on the TAP, as 10.207.0.2 (the client talks to that address; same client code);
//! 4. the kernel: a thread enters a second namespace B, `ncbx0` moves there and gets 10.206.0.2, and
//!    a `std::net` echo server (a thread per connection) listens on it; the client's packets cross
//!    the same veth pair.
//!
//! # The client, and what is measured
//!
//! `NC_XDP_BENCH_CONNS` (default 16) threads, one connection each (`TCP_NODELAY`), each a closed
//! loop: write a `NC_XDP_BENCH_SIZE`-byte message (default 64), read the echo whole, check it, again.
//! After every connection is up, the window starts; it ends after the duration.
//!
//! * **transactions/s**: messages echoed in the window, over its length.
//! * **packets/s**: frames through the client's interface (`ncbx1` or `ncbt0`, RX + TX, from
//!   `/proc/thread-self/net/dev`, i.e. the namespace A's view) over the window.
//! * **CPU per packet**: the process's CPU time (`getrusage(RUSAGE_SELF)`, user + system) over the
//!   window, divided by those packets: client, server and the kernel's work done in their threads
//!   (veth delivers in the sender's softirq context, so much of the receiving side's kernel work is
//!   charged to the sender). **Server CPU per packet**: the process's CPU minus the client threads'
//!   own (`CLOCK_THREAD_CPUTIME_ID` in each), i.e. the server's threads. Our server polls while it
//!   has work and sleeps in `ppoll` on its AF_XDP socket when idle (over the TAP it yields, and
//!   naps 100 us only after 2 ms idle); the kernel's server threads block in `read`.
//!
//! Softirq work that runs in `ksoftirqd` or a NAPI thread is in neither figure; the table also
//! prints the machine's total busy CPU (`/proc/stat`, all CPUs, other processes included) per packet.
//!
//! # Where the client's receive runs (`NC_XDP_BENCH_PEER`)
//!
//! veth hands a frame to its peer in the sender's context: by default (`softirq`) the kernel
//! client's TCP receive of each echo (about two thirds of our server thread's CPU, by `perf`) runs
//! in the softirq that our `sendto` (or the kernel server's `write`) raises, and is charged to the
//! server. `NC_XDP_BENCH_PEER=threaded` gives `ncbx1` a NAPI instance (GRO on; TSO off on
//! `ncbx0`, without which veth bypasses the peer's NAPI for frames that are not a local socket's)
//! run by a kernel thread of its own (`/sys/class/net/ncbx1/threaded`), so that, as with a NIC,
//! the far end's receive is not the server's CPU: it shows in the machine column instead. The TAP
//! row is unaffected (a TAP write delivers in the writer's softirq either way).
//!
//! `NC_XDP_BENCH_BUSY_POLL=USECS` opens our AF_XDP sockets with busy polling (`--xdp-busy-poll`).
//!
//! # More than one core (`NC_XDP_BENCH_QUEUES`)
//!
//! `NC_XDP_BENCH_QUEUES=N` (default 1) creates the veth pair with N RX and N TX queues on each end
//! and serves our AF_XDP rows on N cores, one queue each (`--queues N`): the kernel client's
//! connections spread over the queues by its transmit hash, and each queue's frames reach our core
//! for that queue. The kernel's server is a thread per connection whatever N is (it takes as many
//! cores as the scheduler gives it), and the TAP row stays on one core (a TAP has one queue here).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::time::{Duration, Instant};

#[path = "common/netns.rs"]
mod netns;

use netchannels::cli::ServeArgs;
use netchannels::echo::{Options, run};
use netchannels::netchannel::dev::XdpMode;
use netchannels::tcp_lib::wire::Ipv4Cidr;
use netns::{env_or, ip, machine_busy, timeval, tx_checksum_off};

const OURS: &str = "ncbx0";
const KERNELS: &str = "ncbx1";
const TAP: &str = "ncbt0";
const VETH_CLIENT: &str = "10.206.0.1/24";
const VETH_SERVER: Ipv4Addr = Ipv4Addr::new(10, 206, 0, 2);
const TAP_CLIENT: &str = "10.207.0.1/24";
const TAP_SERVER: Ipv4Addr = Ipv4Addr::new(10, 207, 0, 2);
const PORT: u16 = 7;

fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (namespaces, veth, TAP, XDP)".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("the `ip` command (iproute2) is not installed".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing (modprobe tun)".into());
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

/// This process's CPU time (user + system, all threads).
fn process_cpu() -> Duration {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid rusage the call writes.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut u) };
    timeval(u.ru_utime) + timeval(u.ru_stime)
}

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec the call writes.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut t) };
    Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0))
}

/// RX + TX frames of `iface` in this thread's network namespace.
fn frames(iface: &str) -> u64 {
    let dev = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
    for line in dev.lines() {
        if let Some((name, rest)) = line.split_once(':')
            && name.trim() == iface
        {
            let f: Vec<u64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            return f.get(1).copied().unwrap_or(0) + f.get(9).copied().unwrap_or(0);
        }
    }
    0
}

struct Row {
    server: String,
    transactions: u64,
    frames: u64,
    secs: f64,
    process_cpu: Duration,
    client_cpu: Duration,
    machine_cpu: Duration,
}

/// The client: `conns` threads against `server`, for `duration` after all connected; `iface` is
/// the interface whose frames are counted.
fn client(
    server: Ipv4Addr,
    iface: &str,
    conns: usize,
    size: usize,
    duration: Duration,
) -> Result<Row, String> {
    let go = Arc::new(Barrier::new(conns + 1));
    let done = Arc::new(Barrier::new(conns + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let transactions = Arc::new(AtomicU64::new(0));
    let client_cpu_ns = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..conns)
        .map(|i| {
            let (go, done, stop, transactions, client_cpu_ns, failed) = (
                Arc::clone(&go),
                Arc::clone(&done),
                Arc::clone(&stop),
                Arc::clone(&transactions),
                Arc::clone(&client_cpu_ns),
                Arc::clone(&failed),
            );
            std::thread::spawn(move || -> Result<(), String> {
                let addr = SocketAddrV4::new(server, PORT).into();
                let connected = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
                    .and_then(|s| {
                        s.set_nodelay(true)?;
                        s.set_read_timeout(Some(Duration::from_secs(5)))?;
                        Ok(s)
                    })
                    .map_err(|e| format!("client {i}: connect to {server}: {e}"));
                if connected.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                go.wait();
                let mut s = connected?;
                let msg: Vec<u8> = (0..size).map(|b| u8::try_from((b * 7 + i) % 251).unwrap_or(0)).collect();
                let mut back = vec![0u8; size];
                let cpu0 = thread_cpu();
                let mut n = 0u64;
                let mut result = Ok(());
                // Relaxed: a plain flag.
                while !stop.load(Ordering::Relaxed) && !failed.load(Ordering::Relaxed) {
                    if let Err(e) = s.write_all(&msg).and_then(|()| s.read_exact(&mut back)) {
                        result = Err(format!("client {i}: {e}"));
                        failed.store(true, Ordering::Relaxed);
                        break;
                    }
                    if back != msg {
                        result = Err(format!("client {i}: the echo came back changed"));
                        failed.store(true, Ordering::Relaxed);
                        break;
                    }
                    n += 1;
                }
                let cpu = thread_cpu().saturating_sub(cpu0);
                transactions.fetch_add(n, Ordering::Relaxed);
                client_cpu_ns.fetch_add(u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
                done.wait();
                let _ = s.shutdown(Shutdown::Write);
                let _ = s.read_to_end(&mut Vec::new());
                result
            })
        })
        .collect();
    go.wait();
    let (frames0, cpu0, machine0, start) = (frames(iface), process_cpu(), machine_busy(), Instant::now());
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    done.wait();
    let (frames1, cpu1, machine1, secs) = (frames(iface), process_cpu(), machine_busy(), start.elapsed());
    for t in threads {
        t.join().map_err(|_| "a client panicked".to_owned())??;
    }
    Ok(Row {
        server: String::new(),
        transactions: transactions.load(Ordering::Relaxed),
        frames: frames1 - frames0,
        secs: secs.as_secs_f64(),
        process_cpu: cpu1.saturating_sub(cpu0),
        client_cpu: Duration::from_nanos(client_cpu_ns.load(Ordering::Relaxed)),
        machine_cpu: machine1.saturating_sub(machine0),
    })
}

fn ethtool_off(iface: &str, feature: &str) -> Result<(), String> {
    match Command::new("ethtool").args(["-K", iface, feature, "off"]).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("ethtool -K {iface} {feature} off: {}", String::from_utf8_lossy(&o.stderr))),
        Err(e) => Err(format!("ethtool: {e}")),
    }
}

/// Gives the client's veth end a NAPI instance (GRO on) run by a kernel thread of its own
/// (`/sys/class/net/IFACE/threaded`), so that the client's receive work (its kernel TCP) runs there
/// instead of in the softirq of whichever thread sent it the frame: our server's `sendto`, or the
/// kernel server's `write`. As with a NIC, the far end's receive is then not the server's CPU.
fn threaded_napi(iface: &str) -> Result<(), String> {
    let out = Command::new("ethtool").args(["-K", iface, "gro", "on"]).output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => return Err(format!("ethtool -K {iface} gro on: {}", String::from_utf8_lossy(&o.stderr))),
        Err(e) => return Err(format!("ethtool (for threaded NAPI on {iface}): {e}")),
    }
    let iface = iface.to_owned();
    // sysfs shows the network namespace of whoever mounted it: a thread of this namespace mounts
    // its own, in a mount namespace of its own, and writes the interface's `threaded` there.
    std::thread::spawn(move || -> Result<(), String> {
        let cstr = |s: &str| std::ffi::CString::new(s).map_err(|e| e.to_string());
        let (root, sys, sysfs) = (cstr("/")?, cstr("/sys")?, cstr("sysfs")?);
        // SAFETY: unshare only changes this thread's filesystem context and mount namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_FS) } != 0 {
            return Err(format!("unshare(CLONE_NEWNS): {}", std::io::Error::last_os_error()));
        }
        // SAFETY: NUL-terminated paths; makes this namespace's mounts private (nothing propagates out).
        let private = unsafe {
            libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        if private != 0 {
            return Err(format!("mount --make-rprivate /: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: NUL-terminated strings; a fresh sysfs over /sys in this private namespace only.
        let mounted =
            unsafe { libc::mount(sysfs.as_ptr(), sys.as_ptr(), sysfs.as_ptr(), 0, std::ptr::null()) };
        if mounted != 0 {
            return Err(format!("mount sysfs: {}", std::io::Error::last_os_error()));
        }
        std::fs::write(format!("/sys/class/net/{iface}/threaded"), "1")
            .map_err(|e| format!("threaded NAPI on {iface}: {e}"))
    })
    .join()
    .map_err(|_| "the sysfs thread panicked".to_owned())?
}

fn xdp_attached(iface: &str) -> bool {
    Command::new("ip")
        .args(["-d", "link", "show", iface])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("prog/xdp"))
}

/// Our echo on the backend `serve` names while the client runs against `server` through `iface`.
fn ours(
    serve: ServeArgs,
    server: Ipv4Addr,
    iface: &str,
    conns: usize,
    size: usize,
    secs: Duration,
) -> Result<Row, String> {
    let xdp = serve.xdp.is_some();
    let options = Options { serve, progress: false, port: PORT, ..Options::default() };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let echo = s.spawn(|| run(&options, &stop));
        let start = Instant::now();
        // XDP: wait for the program; TAP: for the server to open the device and answer ARP.
        while xdp && !xdp_attached(OURS) && !echo.is_finished() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        if echo.is_finished() {
            return Err(match echo.join() {
                Ok(Err(e)) => e,
                _ => "the server stopped at once".into(),
            });
        }
        let row = client(server, iface, conns, size, secs);
        stop.store(true, Ordering::Relaxed);
        let report = echo.join().map_err(|_| "the server panicked".to_owned())??;
        let row = row?;
        if report.failed() > 0 || !report.runtime.errors.is_empty() {
            return Err(format!("connections failed: {report}"));
        }
        Ok(row)
    })
}

/// The kernel's echo: `ncbx0` moves into a second namespace where a `std::net` server listens.
fn kernel(conns: usize, size: usize, secs: Duration) -> Result<Row, String> {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let quit = Arc::new(AtomicBool::new(false));
    let server = {
        let quit = Arc::clone(&quit);
        std::thread::spawn(move || -> Result<(), String> {
            // SAFETY: unshare only changes this thread's namespace membership.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(format!("unshare: {}", std::io::Error::last_os_error()));
            }
            // SAFETY: gettid has no preconditions.
            let _ = tid_tx.send(unsafe { libc::gettid() });
            // Wait for the interface to arrive.
            let start = Instant::now();
            while ip(&["link", "show", OURS]).is_err() {
                if start.elapsed() > Duration::from_secs(5) {
                    return Err(format!("{OURS} never arrived in the server's namespace"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let setup = ip(&["addr", "add", &format!("{VETH_SERVER}/24"), "dev", OURS])
                .and_then(|()| ip(&["link", "set", "lo", "up"]))
                .and_then(|()| ip(&["link", "set", OURS, "up"]));
            let listener = setup.and_then(|()| {
                TcpListener::bind(SocketAddrV4::new(VETH_SERVER, PORT)).map_err(|e| format!("bind: {e}"))
            });
            let listener = match listener {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.clone()));
                    return Err(e);
                }
            };
            listener.set_nonblocking(true).map_err(|e| e.to_string())?;
            let _ = ready_tx.send(Ok(()));
            let mut workers = Vec::new();
            // Relaxed: a plain flag.
            while !quit.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => workers.push(std::thread::spawn(move || {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_nodelay(true);
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = s.read(&mut buf) {
                            if n == 0 || s.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    })),
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            for w in workers {
                let _ = w.join();
            }
            Ok(())
        })
    };
    let tid: i32 = tid_rx.recv().map_err(|_| "the server thread failed to start".to_owned())?;
    ip(&["link", "set", OURS, "netns", &tid.to_string()])?;
    ready_rx.recv().map_err(|_| "the server thread died".to_owned())??;
    std::thread::sleep(Duration::from_millis(100));
    let row = client(VETH_SERVER, KERNELS, conns, size, secs);
    quit.store(true, Ordering::Relaxed);
    server.join().map_err(|_| "the server panicked".to_owned())??;
    row
}

/// One server's run: its measurement.
type Measure<'a> = Box<dyn FnOnce() -> Result<Row, String> + 'a>;

fn bench() -> Result<(), String> {
    let conns: usize = env_or("NC_XDP_BENCH_CONNS", 16);
    let size: usize = env_or("NC_XDP_BENCH_SIZE", 64);
    let secs = Duration::from_secs_f64(env_or("NC_XDP_BENCH_SECS", 5.0));
    // SAFETY: unshare only changes this thread's namespace membership.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!("skip:unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error()));
    }
    let queues: u16 = env_or("NC_XDP_BENCH_QUEUES", 1).max(1);
    let n = queues.to_string();
    let per_end = ["numrxqueues", n.as_str(), "numtxqueues", n.as_str()];
    let mut add = vec!["link", "add", OURS];
    add.extend(per_end);
    add.extend(["type", "veth", "peer", "name", KERNELS]);
    add.extend(per_end);
    ip(&add).map_err(|e| format!("skip:{e}"))?;
    ip(&["addr", "add", VETH_CLIENT, "dev", KERNELS])?;
    tx_checksum_off(KERNELS)?;
    let peer_napi = std::env::var("NC_XDP_BENCH_PEER").unwrap_or_default();
    let threaded = match peer_napi.as_str() {
        "" | "softirq" => false,
        "threaded" => true,
        other => return Err(format!("NC_XDP_BENCH_PEER={other:?}: softirq (default) or threaded")),
    };
    ip(&["tuntap", "add", "dev", TAP, "mode", "tap"]).map_err(|e| format!("skip:{e}"))?;
    ip(&["addr", "add", TAP_CLIENT, "dev", TAP])?;
    for dev in ["lo", OURS, KERNELS, TAP] {
        ip(&["link", "set", dev, "up"])?;
    }
    if threaded {
        // After `up`: veth creates its NAPI instances when the interface opens. veth hands a frame
        // to the peer's NAPI only when the sender has no TSO (or the frame is a socket's own),
        // which AF_XDP's are not.
        ethtool_off(OURS, "tso")?;
        threaded_napi(KERNELS)?;
    }
    // Busy polling on our sockets (`--xdp-busy-poll USECS`), when NC_XDP_BENCH_BUSY_POLL names it.
    let busy_poll: Option<u32> = std::env::var("NC_XDP_BENCH_BUSY_POLL").ok().and_then(|v| v.parse().ok());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "xdp_echo: {conns} connections, {size}-byte messages, {:.1} s per server, {queues} AF_XDP queue(s) and core(s), client's receive in {}, busy polling {}, {} CPUs, load average {}",
        secs.as_secs_f64(),
        if threaded { "its own NAPI thread" } else { "the sender's softirq" },
        busy_poll.map_or_else(|| "off".to_owned(), |us| format!("{us} us")),
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let veth = |mode| ServeArgs {
        xdp: Some(OURS.into()),
        xdp_mode: Some(mode),
        xdp_busy_poll: busy_poll,
        queues: Some(queues),
        ips: vec![netchannels::cli::IpCidr::V4(Ipv4Cidr::new(VETH_SERVER, 24).expect("a /24"))],
        ..ServeArgs::default()
    };
    let tap = ServeArgs {
        tap: Some(TAP.into()),
        ips: vec![netchannels::cli::IpCidr::V4(Ipv4Cidr::new(TAP_SERVER, 24).expect("a /24"))],
        cores: Some(1),
        ..ServeArgs::default()
    };
    let mut rows = Vec::new();
    let runs: [(&str, Measure<'_>); 4] = [
        (
            "ours, AF_XDP generic",
            Box::new(|| ours(veth(XdpMode::Generic), VETH_SERVER, KERNELS, conns, size, secs)),
        ),
        (
            "ours, AF_XDP native",
            Box::new(|| ours(veth(XdpMode::Native), VETH_SERVER, KERNELS, conns, size, secs)),
        ),
        ("ours, TAP", Box::new(|| ours(tap, TAP_SERVER, TAP, conns, size, secs))),
        ("kernel TCP (std::net)", Box::new(|| kernel(conns, size, secs))),
    ];
    let only = std::env::var("NC_XDP_BENCH_SERVERS").unwrap_or_default();
    let wanted =
        |name: &str| only.is_empty() || only.split(',').any(|w| !w.is_empty() && name.contains(w.trim()));
    for (name, f) in runs {
        if !wanted(name) {
            continue;
        }
        match f() {
            Ok(mut row) => {
                row.server = name.into();
                rows.push(row);
            }
            Err(e) if e.contains("lacks AF_XDP") || e.contains("was refused") => {
                println!("skipped: {name}: {e}");
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    }
    println!(
        "| server | transactions/s | packets/s | process CPU/packet | server CPU/packet | machine CPU/packet | process CPU % |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let packets = r.frames.max(1) as f64;
        let us = |d: Duration| d.as_secs_f64() * 1e6 / packets;
        println!(
            "| {} | {:.0} | {:.0} | {:.2} us | {:.2} us | {:.2} us | {:.0}% |",
            r.server,
            r.transactions as f64 / r.secs,
            r.frames as f64 / r.secs,
            us(r.process_cpu),
            us(r.process_cpu.saturating_sub(r.client_cpu)),
            us(r.machine_cpu),
            r.process_cpu.as_secs_f64() * 100.0 / r.secs
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
            eprintln!("xdp_echo: {e}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("xdp_echo: the bench panicked");
            std::process::exit(1);
        }
    }
}
