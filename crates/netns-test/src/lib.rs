//! Test support for the workspace's tests and benches that use the Linux kernel as a peer (a
//! dev-dependency only; not published).
//!
//! * The skip convention: a test that cannot run here (no root, no `/dev/net/tun`, no iproute2)
//!   prints `skipped: <why>` and passes ([`skip`]).
//! * [`ip`] runs `ip(8)` with its error output in the error.
//! * A private network namespace per thread: [`run_isolated`] runs a body on a new thread that
//!   first `unshare(CLONE_NEWNET)`s, so the body, the threads it spawns after that, the TAP and
//!   veth devices it makes, the `ip` commands it runs and its sockets all live and vanish in a
//!   namespace of their own; nothing it sends leaves it. [`in_private_namespace`] is the test
//!   form: it skips when [`namespace_unavailable`] says why, and turns the body's error into a
//!   failure ([`report`]).
//! * [`tx_checksum_off`]: `ethtool -K IFACE tx off`, for veth peers whose partial checksums a
//!   userspace stack would otherwise reject.

use std::io;
use std::process::Command;

/// The prefix of an error that means "skip", not "fail" (see [`report`]).
pub const SKIP: &str = "skip:";

/// Prints a visible skip line (tests that cannot run here pass with this message).
pub fn skip(why: &str) {
    println!("skipped: {why}");
    eprintln!("skipped: {why}");
}

/// Runs `ip ARGS...`, with its error output in the error.
///
/// # Errors
///
/// `ip` could not run or exited with a failure.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Why a namespace test cannot run here, if it cannot: it needs root, `/dev/net/tun` and iproute2.
#[must_use]
pub fn namespace_unavailable() -> Option<&'static str> {
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

/// Runs `body` on a new thread that first moves into a fresh network namespace of its own, and
/// returns its result.
///
/// # Errors
///
/// The body's error; an `unshare` failure as a [`SKIP`] error; a panic of the thread.
pub fn run_isolated<T: Send + 'static>(
    body: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    std::thread::spawn(move || {
        // SAFETY: unshare only changes this thread's namespace membership.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(format!("{SKIP}unshare(CLONE_NEWNET) failed: {}", io::Error::last_os_error()));
        }
        body()
    })
    .join()
    .map_err(|_| "the namespace thread panicked".to_owned())?
}

/// The end of a namespace test: nothing on success, a visible [`skip`] for an error that starts
/// with [`SKIP`].
///
/// # Panics
///
/// On any other error: the test fails with it.
pub fn report(result: Result<(), String>) {
    match result {
        Ok(()) => {}
        Err(e) if e.starts_with(SKIP) => skip(&e[SKIP.len()..]),
        Err(e) => panic!("{e}"),
    }
}

/// Runs a test body in a private namespace ([`run_isolated`]): skipped when
/// [`namespace_unavailable`] says why, and [`report`]ed.
///
/// # Panics
///
/// When the body fails (not with a [`SKIP`] error).
pub fn in_private_namespace(body: impl FnOnce() -> Result<(), String> + Send + 'static) {
    if let Some(why) = namespace_unavailable() {
        return skip(why);
    }
    report(run_isolated(body));
}

/// `ethtool -K IFACE tx off`: the legacy `ETHTOOL_STXCSUM` command through `SIOCETHTOOL` (the
/// kernel turns TSO off with it).
///
/// # Errors
///
/// The interface name does not fit, or the ioctl failed.
pub fn tx_checksum_off(iface: &str) -> Result<(), String> {
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
    if iface.len() >= libc::IFNAMSIZ {
        return Err(format!("interface name too long: {iface}"));
    }
    let mut value = EthtoolValue { cmd: ETHTOOL_STXCSUM, data: 0 };
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], data: &raw mut value, _pad: [0; 16] };
    req.name[..iface.len()].copy_from_slice(iface.as_bytes());
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", io::Error::last_os_error()));
    }
    // SAFETY: `req` is a valid ifreq whose data points at a live ethtool_value; both outlive the call.
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL, &raw mut req) };
    let err = io::Error::last_os_error();
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(format!("ethtool -K {iface} tx off: {err}"));
    }
    Ok(())
}
