//! Helpers shared by the benchmarks: thread pinning and counting instructions with callgrind.
#![allow(dead_code, reason = "each bench uses its own subset")]

use std::process::Command;

/// Pins the calling thread to `cpu`; best effort (a machine with fewer CPUs, or a cgroup that forbids
/// it, just leaves the thread where the scheduler puts it).
pub(crate) fn pin_to_cpu(cpu: usize) {
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return;
    }
    // SAFETY: `cpu_set_t` is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below the set's capacity (checked above) and `set` is a live local.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the pointer and size describe the live local `set`.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set) };
    let _ignored_on_failure = rc;
}

/// Whether `valgrind` can be run.
pub(crate) fn have_valgrind() -> bool {
    Command::new("valgrind").arg("--version").output().is_ok()
}

/// Runs this bench binary again under `valgrind --tool=callgrind` with `--child` and `args` (plus any
/// extra valgrind `options`, e.g. `--toggle-collect=...`) and returns the instructions it counted.
pub(crate) fn callgrind_instructions(options: &[&str], args: &[String]) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .args(options)
        .arg(exe)
        .arg("--child")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run valgrind: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("callgrind run failed: {stderr}"));
    }
    stderr
        .lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("no 'Collected' line in callgrind's output: {stderr}"))
}
