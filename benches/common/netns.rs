//! A private network namespace and a TAP in it, for benches that put a stack in front of the kernel
//! (on the workspace's `netns-test` helpers).
//!
//! Namespaces are per thread, and threads spawned after the `unshare` share the new one, so the
//! kernel side's `std::net` sockets run on helper threads spawned inside.
#![allow(dead_code, unused_imports, reason = "each bench uses its own subset")]

use std::net::Ipv4Addr;

use netchannel::dev::{Tap, TapOptions};

pub(crate) use netns_test::{ip, namespace_unavailable, tx_checksum_off};

/// Runs `body` on a new thread that first moves into a fresh network namespace of its own (with
/// `lo` up); returns its result, or why the namespace could not be made.
pub(crate) fn in_private_namespace<T: Send + 'static>(
    body: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    if let Some(why) = namespace_unavailable() {
        return Err(why.to_owned());
    }
    netns_test::run_isolated(move || {
        ip(&["link", "set", "lo", "up"])?;
        body()
    })
}

/// Creates the TAP `name` (in the calling thread's namespace), gives the kernel's side `kernel_ip/24`
/// and brings it up.
pub(crate) fn open_tap(name: &str, kernel_ip: Ipv4Addr) -> Result<Tap, String> {
    open_tap_with(name, kernel_ip, TapOptions::default())
}

/// [`open_tap`] with `options` (offloads).
pub(crate) fn open_tap_with(name: &str, kernel_ip: Ipv4Addr, options: TapOptions) -> Result<Tap, String> {
    let tap = Tap::open_with(name, options).map_err(|e| e.to_string())?;
    ip(&["addr", "add", &format!("{kernel_ip}/24"), "dev", name])?;
    ip(&["link", "set", name, "up"])?;
    Ok(tap)
}

/// A parsed environment variable, or `default` when it is unset or does not parse.
pub(crate) fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A `timeval` as a `Duration` (negative fields read as zero).
pub(crate) fn timeval(t: libc::timeval) -> std::time::Duration {
    std::time::Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_usec).unwrap_or(0) * 1000,
    )
}

/// Clock ticks per second of `/proc` CPU counters.
pub(crate) fn clock_ticks() -> u64 {
    // SAFETY: sysconf takes an integer and reads no memory.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100).max(1)
}

/// Busy CPU time of the whole machine so far (all CPUs; idle and iowait excluded), from `/proc/stat`.
pub(crate) fn machine_busy() -> std::time::Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = stat.lines().next().unwrap_or_default();
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let busy: u64 = f.iter().enumerate().filter(|(i, _)| *i != 3 && *i != 4).take(8).map(|(_, v)| v).sum();
    std::time::Duration::from_nanos(busy * 1_000_000_000 / clock_ticks())
}
