//! The echo service's `--tap` mode under attack from outside, as it was first probed by hand and is
//! now kept in the test command: crafted segments, floods beside legitimate clients, and port
//! scans, each against a server of its own in a private network namespace.
//!
//! * [`crafted`]: `scripts/adversarial/cases.py` (scapy, Debian's `python3-scapy`, run with
//!   `/usr/bin/python3`) sends forty-odd crafted frames on the TAP from the kernel's side (overlapping
//!   segments and fragments, bogus SACK blocks, window scale 15, MSS 0 and 1, PAWS, URG, SYN with
//!   data, SYN+FIN, bad data offsets, IP length mismatches, broadcast and multicast MACs,
//!   martian sources) and reports what came back; the test asserts each case's answer against
//!   the RFC rule named beside it.
//! * [`flood`]: `hping3 --flood` of fourteen kinds, one after another, while kernel `std::net`
//!   clients echo random data, every byte checked; all must finish.
//! * [`scan`]: `nmap -sS/-sF/-sX/-sN/-sA/-sW/-sM` (and `-sV`) over ports 1-1024: only the echo
//!   port may look open.
//!
//! After each, the server must still serve a fresh kernel client, stop cleanly with no service
//! error, and account for every pool buffer ([`serve`]). The tests take a lock so that they run
//! one at a time (a flood would starve the crafted cases' timing). Each lives in its own
//! namespace (`netns_test::in_private_namespace`) and sends only to addresses inside it. A missing
//! tool (scapy, hping3, nmap), like a missing root or `/dev/net/tun`, is a skip
//! (`netns_test::skip`), which CI counts as a failure unless allowed.

mod crafted;
mod flood;
mod scan;

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use netchannels::echo::{Options, Report, run};
use netchannels::tcp_lib::wire::Ipv4Cidr;
use netns_test::{SKIP, ip};

/// The echo port.
const PORT: u16 = 7;

/// One test at a time: the floods would disturb the others' timing.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Where a test's server and the kernel sit: `10.<net>.0.1/24` on the kernel's end of the TAP
/// `iface`, the server on `10.<net>.0.2`.
#[derive(Clone, Copy, Debug)]
struct Net {
    iface: &'static str,
    net: u8,
    /// Open the TAP without offloads (`--tap-no-offloads`): what the kernel's sniffers see is then
    /// each segment as it would cross a wire. With offloads (the default) a super-segment reaches
    /// the kernel whole, its segment size in the virtio-net header, which a raw socket on the TAP
    /// does not show.
    plain_frames: bool,
}

impl Net {
    fn kernel(self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.net, 0, 1)
    }

    fn server(self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.net, 0, 2)
    }
}

/// A skip error when `tool` (an absolute path) is missing: `package` is the Debian package.
fn need(tool: &str, package: &str) -> Result<(), String> {
    if std::path::Path::new(tool).exists() {
        Ok(())
    } else {
        Err(format!("{SKIP}{tool} is not installed (Debian package {package}; scripts/test.sh installs it)"))
    }
}

/// Runs `cmd` with a time limit; its output, or an error naming what failed.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let name = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {name}: {e}"))?;
    let deadline = Instant::now() + limit;
    // Drain the pipes on threads so that a chatty child never blocks on a full pipe.
    let mut out = child.stdout.take().ok_or("no stdout pipe")?;
    let mut err = child.stderr.take().ok_or("no stderr pipe")?;
    let out_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("waiting for {name}: {e}"))? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{name} ran past its {} s limit and was killed", limit.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_thread.join().map_err(|_| "stdout reader panicked")?;
    let stderr = err_thread.join().map_err(|_| "stderr reader panicked")?;
    Ok(Output { status, stdout, stderr })
}

/// One kernel echo client of the server on `net` ([`netns_test::echo_client`]).
fn echo_client(server: Ipv4Addr, seed: u64, messages: usize, max: usize) -> Result<u64, String> {
    netns_test::echo_client(SocketAddrV4::new(server, PORT), seed, messages, max)
}

/// Makes the TAP of `net`, runs the echo service on it, runs `body` beside it, then checks that
/// the server still serves (a fresh kernel client, byte-exact), stops it and checks its report:
/// no service error, every pool buffer back (the runtime's audit fails the run otherwise), no
/// panic. Returns the body's result and the report.
fn serve<T: Send>(net: Net, body: impl FnOnce() -> Result<T, String> + Send) -> Result<(T, Report), String> {
    ip(&["link", "set", "lo", "up"])?;
    ip(&["tuntap", "add", "dev", net.iface, "mode", "tap"])?;
    ip(&["addr", "add", &format!("{}/24", net.kernel()), "dev", net.iface])?;
    ip(&["link", "set", net.iface, "up"])?;
    let mut options = Options::tap(net.iface, Ipv4Cidr::new(net.server(), 24).expect("a /24"), PORT);
    options.serve.tap_no_offloads = net.plain_frames;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let server = s.spawn(|| run(&options, &stop));
        // The TAP is up once the server answers; a first client proves it.
        let ready = echo_client(net.server(), 1000, 2, 1000).map_err(|e| format!("before the attack: {e}"));
        let result = ready.and_then(|_| body());
        let after = result.as_ref().map_err(Clone::clone).and_then(|_| {
            echo_client(net.server(), 2000, 8, 20_000).map_err(|e| format!("after the attack: {e}"))
        });
        // Relaxed: a plain flag; the join orders the rest.
        stop.store(true, Ordering::Relaxed);
        let report = server.join().map_err(|_| "the server panicked".to_owned())?;
        let report =
            report.map_err(|e| format!("the server failed (a leaked buffer fails its audit): {e}"))?;
        println!("{report}");
        let value = result?;
        after?;
        if !report.runtime.errors.is_empty() {
            return Err(format!("a core's service failed:\n{report}"));
        }
        if report.runtime.buffers.len() != 1 {
            return Err(format!("the pool was not audited:\n{report}"));
        }
        if report.runtime.snapshot.cores.len() != 1 {
            return Err(format!("one core expected:\n{report}"));
        }
        Ok((value, report))
    })
}

/// Runs `body` as a namespace test, one test at a time.
fn exclusive(body: impl FnOnce() -> Result<(), String> + Send + 'static) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    netns_test::in_private_namespace(body);
}

#[test]
fn crafted_cases() {
    exclusive(crafted::run);
}

#[test]
fn floods_beside_kernel_clients() {
    exclusive(flood::run);
}

#[test]
fn port_scans_see_only_the_echo_port() {
    exclusive(scan::run);
}
