//! Driving `wrk` against an HTTP server and reading what it and the CPU counters say, for the
//! benches that put a server on our stack beside one on the kernel's.
#![allow(dead_code, reason = "each bench uses its own subset")]

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use super::netns::{machine_busy, timeval};

/// One wrk run: what wrk and the CPU counters said.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    /// Requests wrk completed.
    pub(crate) requests: u64,
    /// wrk's `Requests/sec`.
    pub(crate) rps: f64,
    /// wrk's average latency, as it wrote it.
    pub(crate) latency: String,
    /// wrk's socket errors and non-2xx lines, if any.
    pub(crate) errors: String,
    /// The server's CPU time over the run.
    pub(crate) server_cpu: Duration,
    /// wrk's own CPU time.
    pub(crate) wrk_cpu: Duration,
    /// All CPUs' busy time over the run.
    pub(crate) machine_cpu: Duration,
}

/// CPU time (user + system) of this process (`RUSAGE_SELF`) or its waited-for children.
pub(crate) fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid rusage the call writes.
    unsafe { libc::getrusage(who, &raw mut u) };
    timeval(u.ru_utime) + timeval(u.ru_stime)
}

/// CPU time of this process's threads whose name (`comm`) `pick` accepts, from
/// `/proc/self/task/TID/schedstat` (ns on the CPU).
pub(crate) fn threads_cpu(pick: impl Fn(&str) -> bool) -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Duration::ZERO };
    let mut ns = 0u64;
    for task in tasks.flatten() {
        let dir = task.path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !pick(name.trim_end()) {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
        ns += stat.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    Duration::from_nanos(ns)
}

/// The load average's three numbers.
pub(crate) fn loadavg() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// Runs `wrk -t1 -cCONNS -dSECSs URL`; `server_cpu` reads the server's CPU time before and after.
pub(crate) fn wrk(
    url: &str,
    conns: usize,
    secs: u64,
    server_cpu: &dyn Fn() -> Duration,
) -> Result<Run, String> {
    let (cpu0, wrk0, busy0) = (server_cpu(), rusage(libc::RUSAGE_CHILDREN), machine_busy());
    let out = Command::new("wrk")
        .args(["-t1", &format!("-c{conns}"), &format!("-d{secs}s"), url])
        .output()
        .map_err(|e| format!("cannot run wrk: {e}"))?;
    let (cpu1, wrk1, busy1) = (server_cpu(), rusage(libc::RUSAGE_CHILDREN), machine_busy());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!("wrk {url} failed: {text}{}", String::from_utf8_lossy(&out.stderr)));
    }
    let field = |prefix: &str| text.lines().find_map(|l| l.trim().strip_prefix(prefix).map(str::trim));
    let rps = field("Requests/sec:")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no Requests/sec in wrk's output: {text}"))?;
    let requests = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.trim().parse().ok())
        .ok_or_else(|| format!("no request count in wrk's output: {text}"))?;
    let latency = field("Latency").and_then(|l| l.split_whitespace().next()).unwrap_or("?").to_owned();
    let errors: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("Socket errors") || l.starts_with("Non-2xx"))
        .collect();
    Ok(Run {
        requests,
        rps,
        latency,
        errors: errors.join("; "),
        server_cpu: cpu1.saturating_sub(cpu0),
        wrk_cpu: wrk1.saturating_sub(wrk0),
        machine_cpu: busy1.saturating_sub(busy0),
    })
}

/// Waits (10 s at most) until `addr` accepts a connection; `alive` fails when the server died.
pub(crate) fn wait_listening(
    addr: SocketAddr,
    alive: &mut dyn FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        alive()?;
        if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(10) {
            return Err(format!("{addr} never accepted a connection"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The median of `values` (the upper one of an even count); 0 for none.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
