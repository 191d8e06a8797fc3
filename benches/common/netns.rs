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
