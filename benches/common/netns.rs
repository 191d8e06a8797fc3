//! A private network namespace and a TAP in it, for benches that put a stack in front of the kernel
//! (a small copy of `crates/tcp-lib/tests/kernel_support`, which benches cannot import).
//!
//! Namespaces are per thread, and threads spawned after the `unshare` share the new one, so the
//! kernel side's `std::net` sockets run on helper threads spawned inside.
#![allow(dead_code)] // each bench uses its own subset

use std::io;
use std::net::Ipv4Addr;
use std::process::Command;

use netchannel::dev::Tap;

/// Runs `ip ARGS...`, with its error output in the error.
pub(crate) fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Why a namespace cannot be made here, if it cannot: it needs root, `/dev/net/tun` and iproute2.
pub(crate) fn namespace_unavailable() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (CAP_NET_ADMIN) to create a network namespace and a TAP");
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing (modprobe tun)");
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("the `ip` command (iproute2) is not installed");
    }
    None
}

/// Runs `body` on a new thread that first moves into a fresh network namespace of its own (with
/// `lo` up); returns its result, or why the namespace could not be made.
pub(crate) fn in_private_namespace<T: Send + 'static>(
    body: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    if let Some(why) = namespace_unavailable() {
        return Err(why.to_owned());
    }
    std::thread::spawn(move || {
        // SAFETY: unshare only changes this thread's namespace membership.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(format!("unshare(CLONE_NEWNET) failed: {}", io::Error::last_os_error()));
        }
        ip(&["link", "set", "lo", "up"])?;
        body()
    })
    .join()
    .map_err(|_| "the namespace thread panicked".to_owned())?
}

/// Creates the TAP `name` (in the calling thread's namespace), gives the kernel's side `kernel_ip/24`
/// and brings it up.
pub(crate) fn open_tap(name: &str, kernel_ip: Ipv4Addr) -> Result<Tap, String> {
    let tap = Tap::open(name).map_err(|e| e.to_string())?;
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

/// `ethtool -K IFACE tx off` through `SIOCETHTOOL` (`ETHTOOL_STXCSUM`); TSO goes off with it.
pub(crate) fn tx_checksum_off(iface: &str) -> Result<(), String> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_STXCSUM: u32 = 0x17;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        data: *mut EthtoolValue,
        _pad: [u8; 16],
    }
    let mut value = EthtoolValue { cmd: ETHTOOL_STXCSUM, data: 0 };
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], data: &raw mut value, _pad: [0; 16] };
    req.name[..iface.len()].copy_from_slice(iface.as_bytes());
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `req` is a valid ifreq whose data points at a live ethtool_value; both outlive the call.
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL, &raw mut req) };
    let err = std::io::Error::last_os_error();
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(format!("ethtool -K {iface} tx off: {err}"));
    }
    Ok(())
}
