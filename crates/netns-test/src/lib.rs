//! Test support for the workspace's tests and benches that use the Linux kernel as a peer (a
//! dev-dependency only; not published).
//!
//! * The skip convention: a test that cannot run here (no root, no `/dev/net/tun`, no iproute2)
//!   calls [`skip`], which prints `skipped: <why>` and appends `<test> <why>` to the file named by
//!   [`SKIP_LOG_ENV`] (`NETCHANNEL_SKIP_LOG`) when that is set. The test then passes as far as
//!   `cargo test` is concerned; the test command (`scripts/test.sh`) reads the log, counts the test
//!   as skipped rather than passed, prints every skip with its reason, and under `CI=true` fails
//!   the run for a skip that `scripts/allowed-skips.txt` does not list. Only a missing
//!   precondition is a skip: an error after the preconditions hold is a failure.
//! * [`ip`] runs `ip(8)` with its error output in the error.
//! * A private network namespace per thread: [`run_isolated`] runs a body on a new thread that
//!   first `unshare(CLONE_NEWNET)`s, so the body, the threads it spawns after that, the TAP and
//!   veth devices it makes, the `ip` commands it runs and its sockets all live and vanish in a
//!   namespace of their own; nothing it sends leaves it. [`in_private_namespace`] is the test
//!   form: it skips when [`namespace_unavailable`] says why, and turns the body's error into a
//!   failure ([`report`]).
//! * [`tx_checksum_off`]: `ethtool -K IFACE tx off`, for veth peers whose partial checksums a
//!   userspace stack would otherwise reject.
//! * [`echo_client`]: a kernel client of a TCP echo service that checks every echoed byte.
//! * [`serve_while`]: a server under test on its own thread while the clients run, stopped and
//!   joined after them; a start-up error for want of kernel support is a skip.

mod echo;
mod serve;

pub use echo::echo_client;
pub use serve::{READY_TIMEOUT, serve_while};

use std::io;
use std::process::Command;

/// The prefix of an error that means "skip", not "fail" (see [`report`]).
pub const SKIP: &str = "skip:";

/// The environment variable that names the skip log: [`skip`] appends one line, `<test> <why>`,
/// per skip to that file (the test command sets it; see `scripts/test.sh`).
pub const SKIP_LOG_ENV: &str = "NETCHANNEL_SKIP_LOG";

/// Records that the calling test (or a part of it) cannot run here: prints `skipped: <why>` and
/// appends `<test> <why>` to the [`SKIP_LOG_ENV`] file, where `<test>` is [`test_name`].
///
/// Only for a missing precondition (not root, no `/dev/net/tun`, no iproute2, a kernel without
/// AF_XDP, no 82599): an error once the preconditions hold must fail the test instead.
///
/// # Panics
///
/// When the skip log is named but cannot be written: a skip that the test command cannot see
/// would pass as green.
pub fn skip(why: &str) {
    let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
    println!("skipped: {why}");
    eprintln!("skipped: {why}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        let line = format!("{} {why}\n", test_name());
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| io::Write::write_all(&mut f, line.as_bytes()));
        if let Err(e) = written {
            panic!("cannot append the skip to {} ({SKIP_LOG_ENV}): {e}", path.to_string_lossy());
        }
    }
}

/// The name the skip log and the test command's summary use for the running test:
/// `<binary>::<test>`, the test binary's name without cargo's hash (`kernel_tap`, or the crate's
/// name for unit tests) and the test's path as libtest names its thread (`lossy_client`).
/// [`run_isolated`] names its thread after the caller's, so a skip from the body names the test.
#[must_use]
pub fn test_name() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe.as_deref().and_then(std::path::Path::file_stem).map(|s| s.to_string_lossy().into_owned());
    let binary = stem.as_deref().map_or("?", binary_name).to_owned();
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("?"))
}

/// A cargo-built executable's name without its `-<16 hex digits>` suffix.
fn binary_name(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name,
        _ => stem,
    }
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
/// The body's error; an `unshare` failure, as a [`SKIP`] error when it is `EPERM` (root without
/// `CAP_SYS_ADMIN`, as in some containers: a missing precondition) and a plain error otherwise; a
/// panic of the thread.
pub fn run_isolated<T: Send + 'static>(
    body: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let mut builder = std::thread::Builder::new();
    if let Some(name) = std::thread::current().name() {
        builder = builder.name(name.to_owned());
    }
    let thread = builder.spawn(move || {
        // SAFETY: unshare only changes this thread's namespace membership.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            let e = io::Error::last_os_error();
            let skip = if e.raw_os_error() == Some(libc::EPERM) { SKIP } else { "" };
            return Err(format!("{skip}unshare(CLONE_NEWNET) failed: {e}"));
        }
        body()
    });
    thread
        .map_err(|e| format!("cannot start the namespace thread: {e}"))?
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

/// The Python that has scapy (Debian's `python3-scapy` installs for the system interpreter, not
/// for one a version manager puts first on `PATH`), for tests that craft packets with it.
pub const SCAPY_PYTHON: &str = "/usr/bin/python3";

/// Checks that [`SCAPY_PYTHON`] can import scapy.
///
/// # Errors
///
/// A [`SKIP`] error naming the package to install when it cannot.
pub fn need_scapy() -> Result<(), String> {
    let ok = Command::new(SCAPY_PYTHON)
        .args(["-c", "import scapy.all"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Ok(())
    } else {
        Err(format!("{SKIP}scapy is not importable by {SCAPY_PYTHON} (Debian package python3-scapy)"))
    }
}

/// `ethtool -K IFACE tx off`: the legacy `ETHTOOL_STXCSUM` command through `SIOCETHTOOL` (the
/// kernel turns TSO off with it).
///
/// # Errors
///
/// The interface name does not fit, or the ioctl failed.
pub fn tx_checksum_off(iface: &str) -> Result<(), String> {
    // `libc` has the request number and `ifreq`, not the ethtool command or `struct ethtool_value`.
    const ETHTOOL_STXCSUM: u32 = 0x17;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    if iface.len() >= libc::IFNAMSIZ {
        return Err(format!("interface name too long: {iface}"));
    }
    let mut value = EthtoolValue { cmd: ETHTOOL_STXCSUM, data: 0 };
    // SAFETY: `ifreq` is plain old data; all zeroes is a valid value of each union member.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(iface.as_bytes()) {
        *dst = src.cast_signed();
    }
    req.ifr_ifru.ifru_data = (&raw mut value).cast();
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", io::Error::last_os_error()));
    }
    // SAFETY: `req` is a valid ifreq whose data points at a live ethtool_value; both outlive the call.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &raw mut req) };
    let err = io::Error::last_os_error();
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(format!("ethtool -K {iface} tx off: {err}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_names_lose_only_cargos_hash() {
        assert_eq!(binary_name("kernel_tap-0123456789abcdef"), "kernel_tap");
        assert_eq!(binary_name("netns_test-fedcba9876543210"), "netns_test");
        assert_eq!(binary_name("echo-tap"), "echo-tap");
        assert_eq!(binary_name("x-0123456789abcdeg"), "x-0123456789abcdeg");
        assert_eq!(binary_name("plain"), "plain");
    }

    #[test]
    fn a_skip_lands_in_the_log_with_the_test_name() {
        let path = std::env::temp_dir().join(format!("netns-test-skips-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        // The test command's own log, if it set one, is put back afterwards.
        let outer = std::env::var_os(SKIP_LOG_ENV);
        // SAFETY: no other thread of this test binary reads or writes the environment: the
        // only other test here touches no variables.
        unsafe { std::env::set_var(SKIP_LOG_ENV, &path) };
        skip("no 82599\n here");
        match outer {
            // SAFETY: as above.
            Some(outer) => unsafe { std::env::set_var(SKIP_LOG_ENV, outer) },
            // SAFETY: as above.
            None => unsafe { std::env::remove_var(SKIP_LOG_ENV) },
        }
        let log = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(log, "netns_test::tests::a_skip_lands_in_the_log_with_the_test_name no 82599 here\n");
    }
}
