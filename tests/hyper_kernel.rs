//! hyper on our stack ([`netchannels::hyper_service`]) against the kernel's HTTP clients, in a
//! private network namespace: through a TAP, and through AF_XDP on one end of a veth pair (the
//! kernel's end with TX checksum offload off, as in `xdp_tcp.rs`).
//!
//! * **curl** fetches `/`, a missing page and `/bytes/N` for N = 1, 1000, 65536 and 1048576 in
//!   one invocation, which keeps one connection alive for all of them (checked: curl says it
//!   opened one connection); every body is compared byte for byte with the pattern.
//! * **python3's `http.client`** fetches the same pages twice over on one keep-alive connection
//!   (checked: the same socket throughout), each body compared byte for byte.
//! * **Under 3% loss both ways**: the same clients with `iptables -m statistic --mode random
//!   --probability 0.03 -j DROP` on the namespace's INPUT and OUTPUT chains (the kernel's side:
//!   what our stack sends is dropped on its way in, what the kernel sends on its way out); the
//!   test checks that both rules dropped packets. The server's timeouts are 10 s and 20 s there, so
//!   that loss recovery's backed-off retransmissions never look like an idle client.
//! * **The timeouts** (TAP, without loss): a connection that sends nothing is closed by the server after
//!   `--idle-timeout` (1 s here); one that trickles a request head a byte every 100 ms (never idle)
//!   by hyper's header timeout (`--header-timeout`, 2 s here: hyper's timer on the core's clock);
//!   each counted in the report.
//!
//! The server's report must show no connection errors and every buffer back. Without root (or
//! `/dev/net/tun`, or AF_XDP, or curl, python3 or iptables) a test prints `skipped: <why>`
//! (`netns_test::skip`); an error once those hold fails the test. Bounded: every client has a
//! 60 s limit.
#![cfg(feature = "async")]

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use netchannels::cli::{IpCidr, ServeArgs};
use netchannels::hyper_service::{INDEX, Options, Report, pattern, run};
use netchannels::netchannel::dev::XdpMode;
use netchannels::tcp_lib::wire::Ipv4Cidr;
use netns_test::{ip, skip, tx_checksum_off};

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 207, 0, 2);
const KERNEL: &str = "10.207.0.1/24";
const PORT: u16 = 80;
const SIZES: [usize; 4] = [1, 1000, 65_536, 1 << 20];
/// The drop probability of each iptables rule.
const LOSS: &str = "0.03";
/// The TAP, and our end and the kernel's end of the veth pair.
const TAP: &str = "nchyp0";
const OURS: &str = "nchyx0";
const KERNELS: &str = "nchyx1";

/// The AF_XDP tests share two busy-polling CPUs with whatever else runs: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Tap,
    Xdp,
}

/// Why a test cannot run here, if it cannot.
fn unavailable(backend: Backend) -> Option<String> {
    if let Some(why) = netns_test::namespace_unavailable() {
        return Some(why.into());
    }
    for (tool, arg) in [("curl", "--version"), ("python3", "--version"), ("iptables", "--version")] {
        if !Command::new(tool).arg(arg).output().is_ok_and(|o| o.status.success()) {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    if backend == Backend::Xdp {
        // SAFETY: plain socket creation; the descriptor is closed at once.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Some(format!("no AF_XDP sockets here: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is ours and closed once.
        unsafe { libc::close(fd) };
    }
    None
}

/// A command's output, failing unless it exited 0.
fn command(program: &str, args: &[&str]) -> Result<Output, String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out)
}

/// `n` bytes of the pattern `/bytes/n` serves.
fn expected(n: usize) -> Vec<u8> {
    (0..n).map(pattern).collect()
}

/// curl fetches `/`, a missing page and every size in one invocation (one kept-alive
/// connection), each body checked byte for byte; returns the responses checked.
fn curl(dir: &std::path::Path) -> Result<u64, String> {
    let base = format!("http://{SERVER}:{PORT}");
    let mut args: Vec<String> =
        ["-sS", "--noproxy", "*", "--max-time", "60", "--write-out", "%{http_code} %{num_connects}\\n"]
            .map(String::from)
            .to_vec();
    let mut pages: Vec<(String, u16, Vec<u8>)> = vec![
        ("/".into(), 200, INDEX.as_bytes().to_vec()),
        ("/no/such/page".into(), 404, b"not found\n".to_vec()),
    ];
    pages.extend(SIZES.iter().map(|&n| (format!("/bytes/{n}"), 200, expected(n))));
    for (i, (path, _, _)) in pages.iter().enumerate() {
        args.extend([
            format!("{base}{path}"),
            "-o".into(),
            dir.join(format!("body{i}")).display().to_string(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = command("curl", &args)?;
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    if lines.len() != pages.len() {
        return Err(format!("curl wrote {lines:?} for {} pages", pages.len()));
    }
    let mut connects = 0;
    for (i, ((path, status, body), line)) in pages.iter().zip(&lines).enumerate() {
        let (code, n) = line.split_once(' ').ok_or_else(|| format!("curl's line {line:?}"))?;
        connects += n.parse::<u32>().map_err(|e| format!("{line:?}: {e}"))?;
        if code != status.to_string() {
            return Err(format!("curl {path}: status {code}, expected {status}"));
        }
        let got = std::fs::read(dir.join(format!("body{i}"))).map_err(|e| e.to_string())?;
        if got != *body {
            let at = got.iter().zip(body).position(|(a, b)| a != b);
            return Err(format!("curl {path}: {} bytes, first difference at {at:?}", got.len()));
        }
    }
    if connects != 1 {
        return Err(format!(
            "curl opened {connects} connections for {} pages, not one kept alive",
            pages.len()
        ));
    }
    Ok(pages.len() as u64)
}

/// python3's http.client: every page twice on one keep-alive connection, bodies byte for byte.
const PYTHON: &str = r#"
import http.client, sys
host, sizes = sys.argv[1], [int(n) for n in sys.argv[2:]]
index = sys.stdin.read().encode()
conn = http.client.HTTPConnection(host, 80, timeout=60)
sock, n = None, 0
for round in range(2):
    for path, status, body in [('/', 200, index), ('/missing', 404, b'not found\n')] + \
            [('/bytes/%d' % s, 200, bytes(i % 251 for i in range(s))) for s in sizes]:
        conn.request('GET', path)
        r = conn.getresponse()
        got = r.read()
        assert r.status == status, (path, r.status)
        assert got == body, (path, len(got), next((i for i, (a, b) in enumerate(zip(got, body)) if a != b), None))
        assert sock is None or conn.sock is sock, 'a new connection for ' + path
        sock = conn.sock
        n += 1
print(n)
"#;

fn python() -> Result<u64, String> {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(PYTHON)
        .arg(SERVER.to_string())
        .args(SIZES.map(|n| n.to_string()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("python3's stdin")?;
    std::io::Write::write_all(&mut stdin, INDEX.as_bytes()).map_err(|e| e.to_string())?;
    drop(stdin);
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("python3 http.client failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|e| format!("python3 said {out:?}: {e}"))
}

/// A connection that sends nothing is closed by the server within its idle timeout (1 s) and a
/// bit; returns how long that took.
fn idle_client() -> Result<Duration, String> {
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(&SocketAddrV4::new(SERVER, PORT).into(), Duration::from_secs(10))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => Ok(start.elapsed()),
        Ok(n) => Err(format!("{n} bytes on a connection that asked nothing")),
        Err(e) => Err(format!("the server did not close an idle connection within 5 s: {e}")),
    }
}

/// A client that trickles a request head, a byte every 100 ms (never idle for a second): hyper's
/// header timeout (2 s) closes it; returns how long that took.
fn trickle_client() -> Result<Duration, String> {
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(&SocketAddrV4::new(SERVER, PORT).into(), Duration::from_secs(10))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| e.to_string())?;
    std::io::Write::write_all(&mut s, b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ").map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    while start.elapsed() < Duration::from_secs(6) {
        if std::io::Write::write_all(&mut s, b"a").is_err() {
            return Ok(start.elapsed());
        }
        match s.read(&mut buf) {
            Ok(0) => return Ok(start.elapsed()),
            Ok(n) => return Err(format!("{n} bytes in answer to an unfinished head")),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Ok(start.elapsed()),
        }
    }
    Err("a head trickled for 6 s was not cut off".into())
}

/// Packets the namespace's iptables rule on `chain` dropped.
fn iptables_drops(chain: &str) -> Result<u64, String> {
    let out = command("iptables", &["-L", chain, "-v", "-x", "-n"])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("DROP") && l.contains("statistic"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum())
}

fn xdp_attached() -> bool {
    Command::new("ip")
        .args(["-d", "link", "show", OURS])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("prog/xdp"))
}

/// In the calling thread's (private) namespace: the backend's interfaces, the loss rules when
/// `lossy`, the server, and `clients` against it; then the server stops. Returns the clients'
/// result and the server's report.
fn serve<T>(
    backend: Backend,
    lossy: bool,
    clients: impl FnOnce() -> Result<T, String>,
) -> Result<(T, Report), String> {
    let mut serve = ServeArgs {
        ips: vec![IpCidr::V4(Ipv4Cidr::new(SERVER, 24).expect("a /24"))],
        ..ServeArgs::default()
    };
    match backend {
        Backend::Tap => {
            ip(&["tuntap", "add", "dev", TAP, "mode", "tap"])?;
            ip(&["addr", "add", KERNEL, "dev", TAP])?;
            ip(&["link", "set", TAP, "up"])?;
            serve.tap = Some(TAP.into());
            // Under loss, one frame per segment (no TSO super-segments): each is a packet to drop.
            serve.tap_no_offloads = lossy;
        }
        Backend::Xdp => {
            ip(&["link", "add", OURS, "type", "veth", "peer", "name", KERNELS])?;
            ip(&["addr", "add", KERNEL, "dev", KERNELS])?;
            tx_checksum_off(KERNELS)?;
            ip(&["link", "set", OURS, "up"])?;
            ip(&["link", "set", KERNELS, "up"])?;
            serve.xdp = Some(OURS.into());
            serve.xdp_mode = Some(XdpMode::Generic);
            serve.queues = Some(1);
        }
    }
    ip(&["link", "set", "lo", "up"])?;
    if lossy {
        for chain in ["INPUT", "OUTPUT"] {
            let rule =
                ["-A", chain, "-m", "statistic", "--mode", "random", "--probability", LOSS, "-j", "DROP"];
            command("iptables", &rule)?;
        }
    }
    // The timeouts are checked in the lossless run. Under loss they only have to stay out of the
    // way: a retransmission lost twice backs the RTO off past a second with no progress, which a
    // 1 s idle timeout took for an idle client (it closed a 1 MiB body after 64 KB, once in many
    // runs).
    let (idle_timeout, header_timeout) = if lossy {
        (Duration::from_secs(10), Duration::from_secs(20))
    } else {
        (Duration::from_secs(1), Duration::from_secs(2))
    };
    let options =
        Options { serve, port: PORT, idle_timeout, header_timeout, progress: false, ..Options::default() };
    // Let the server open its backend (and attach its program) before the kernel's first SYN, then
    // wait until it listens (a SYN before that gets a reset).
    let addr = SocketAddrV4::new(SERVER, PORT).into();
    let ready = || {
        let up = match backend {
            Backend::Tap => command("ip", &["-o", "link", "show", TAP]).is_ok_and(|o| {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                !text.contains("NO-CARRIER")
            }),
            Backend::Xdp => xdp_attached(),
        };
        up && TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
    };
    let (report, result) = netns_test::serve_while(|stop: &AtomicBool| run(&options, stop), ready, clients)?;
    println!("{report}");
    Ok((result?, report))
}

/// curl and python against the server on `backend`, with loss when `lossy`; checks the report.
fn kernel_clients(backend: Backend, lossy: bool) -> Result<(), String> {
    let dir =
        std::env::temp_dir().join(format!("hyper-kernel-{}-{}", std::process::id(), netns_test::test_name()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let result = serve(backend, lossy, || {
        let by_curl = curl(&dir)?;
        let by_python = python()?;
        let idle =
            if backend == Backend::Tap && !lossy { Some((idle_client()?, trickle_client()?)) } else { None };
        let drops = if lossy { (iptables_drops("INPUT")?, iptables_drops("OUTPUT")?) } else { (0, 0) };
        Ok((by_curl + by_python, idle, drops))
    });
    let _ = std::fs::remove_dir_all(&dir);
    let ((responses, idle, drops), report) = result?;
    println!(
        "{responses} responses checked byte for byte; idle and trickling connections closed after {idle:?}; iptables dropped \
         {} packets coming in, {} going out",
        drops.0, drops.1
    );
    if report.requests() != responses {
        return Err(format!(
            "the server answered {} requests, the clients checked {responses}",
            report.requests()
        ));
    }
    if report.errors() != 0 {
        return Err(format!("connection errors: {report}"));
    }
    if let Some((idle, trickle)) = idle {
        let idle_timeouts: u64 = report.cores.iter().map(|c| c.idle_timeouts).sum();
        let header_timeouts: u64 = report.cores.iter().map(|c| c.header_timeouts).sum();
        if idle_timeouts != 1 || idle < Duration::from_millis(900) {
            return Err(format!(
                "idle connection closed after {idle:?}, {idle_timeouts} idle timeouts: {report}"
            ));
        }
        if header_timeouts != 1 || trickle < Duration::from_millis(1900) {
            return Err(format!(
                "trickling connection closed after {trickle:?}, {header_timeouts} header timeouts: {report}"
            ));
        }
    }
    if lossy && (drops.0 == 0 || drops.1 == 0) {
        return Err(format!("the loss rules dropped {drops:?} packets (in, out): no loss both ways"));
    }
    if let Some((name, audit)) = report.runtime.buffers.iter().find(|(_, a)| a.outstanding != 0) {
        return Err(format!("{name}: {} buffers not back: {report}", audit.outstanding));
    }
    Ok(())
}

fn test(backend: Backend, lossy: bool) {
    if let Some(why) = unavailable(backend) {
        return skip(&why);
    }
    let _one = (backend == Backend::Xdp)
        .then(|| ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    netns_test::report(netns_test::run_isolated(move || kernel_clients(backend, lossy)));
}

#[test]
fn tap_curl_and_python_byte_exact() {
    test(Backend::Tap, false);
}

#[test]
fn tap_under_loss_both_ways() {
    test(Backend::Tap, true);
}

#[test]
fn xdp_curl_and_python_byte_exact() {
    test(Backend::Xdp, false);
}

#[test]
fn xdp_under_loss_both_ways() {
    test(Backend::Xdp, true);
}
