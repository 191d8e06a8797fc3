//! For the tests that use the kernel as a peer (the same conventions as netchannel's
//! `tests/common`): the visible skip, `ip(8)`, and a private network namespace per test thread.

use std::process::Command;

/// Prints a visible skip line (tests that cannot run here pass with this message).
pub(crate) fn skip(why: &str) {
    println!("skipped: {why}");
    eprintln!("skipped: {why}");
}

/// Runs `ip ARGS...`, with its error output in the error.
pub(crate) fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Why a namespace test cannot run here, if it cannot: it needs root, `/dev/net/tun` and iproute2.
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

/// Runs `body` on a new thread that first moves into a fresh network namespace of its own (it, the
/// threads it spawns, the TAP devices it opens, the `ip` commands it runs and its sockets vanish with
/// the thread). An error that starts with `skip:` becomes a visible skip; any other error fails the
/// test.
pub(crate) fn in_private_namespace(body: impl FnOnce() -> Result<(), String> + Send + 'static) {
    if let Some(why) = namespace_unavailable() {
        return skip(why);
    }
    let result = std::thread::spawn(move || {
        // SAFETY: unshare only changes this thread's namespace membership.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(format!("skip:unshare(CLONE_NEWNET) failed: {}", std::io::Error::last_os_error()));
        }
        body()
    })
    .join()
    .expect("the namespace thread panicked");
    match result {
        Ok(()) => {}
        Err(e) if e.starts_with("skip:") => skip(&e["skip:".len()..]),
        Err(e) => panic!("{e}"),
    }
}
