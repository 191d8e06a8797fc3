//! The VFIO platform layer for real: boots a QEMU guest (TCG, q35, emulated Intel IOMMU) built by
//! `scripts/qemu-vfio-guest.sh` from Debian packages, and runs `examples/vfio_probe.rs` in it, a program
//! built on this crate's own `vfio` module. The probe opens the container and groups, maps BARs, runs
//! DMA through the IOMMU with QEMU's `edu` device (and checks that an unmapped IOVA is refused), takes
//! MSIs through eventfds, reads an e1000e's STATUS, and checks the error messages for a device not bound
//! to vfio-pci, a group that is not viable, and a machine without an IOMMU.
//!
//! Skipped, with a message, only where QEMU or busybox is missing and cannot be installed (root with
//! apt-get installs `qemu-system-x86`, `busybox-static` and `cpio`). The guest image is cached under
//! `target/qemu-vfio/`; a warm run takes a few seconds per boot.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The longest a boot may take before the test kills QEMU and fails.
const BOOT_TIMEOUT: Duration = Duration::from_secs(45);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script() -> PathBuf {
    workspace().join("scripts/qemu-vfio-guest.sh")
}

fn have_tools() -> bool {
    Command::new("bash").arg(script()).arg("check").status().is_ok_and(|s| s.success())
}

/// Installs QEMU and busybox with apt-get when running as root; quiet about failures (the caller
/// checks again).
fn try_install() {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || Command::new("apt-get").arg("--version").stdout(Stdio::null()).status().is_err() {
        return;
    }
    eprintln!("qemu_vfio: installing qemu-system-x86, busybox-static and cpio with apt-get");
    let _ = Command::new("apt-get").args(["update", "-qq"]).status();
    let _ = Command::new("apt-get")
        .args([
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "qemu-system-x86",
            "busybox-static",
            "cpio",
        ])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status();
}

/// Builds the guest image once per test binary. `Err` carries a reason to skip; a failing build panics.
fn image() -> Result<(), String> {
    static IMAGE: OnceLock<Result<(), String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            if !have_tools() {
                try_install();
                if !have_tools() {
                    return Err("qemu-system-x86_64 or busybox (or cpio) is missing and could not be \
                                installed (apt-get install qemu-system-x86 busybox-static cpio)"
                        .to_owned());
                }
            }
            let started = Instant::now();
            let out = Command::new("bash")
                .arg(script())
                .arg("build")
                .env_remove("CARGO_ENCODED_RUSTFLAGS")
                .output()
                .expect("run scripts/qemu-vfio-guest.sh build");
            assert!(
                out.status.success(),
                "building the guest image failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            eprintln!("qemu_vfio: guest image ready in {:.1} s", started.elapsed().as_secs_f64());
            Ok(())
        })
        .clone()
}

/// Boots the guest in `scenario` and returns its console output; kills QEMU after [`BOOT_TIMEOUT`].
fn boot(scenario: &str) -> String {
    // Boots of one test binary run one at a time: on a 2-core machine two TCG guests only slow each
    // other down past the timeout.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let started = Instant::now();
    let mut child = Command::new("bash")
        .arg(script())
        .args(["run", scenario])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start QEMU");
    let (tx, rx) = mpsc::channel::<String>();
    let readers: Vec<_> = [
        Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().expect("stderr")),
    ]
    .into_iter()
    .map(|pipe| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        })
    })
    .collect();
    drop(tx);
    let mut console = String::new();
    let mut timed_out = false;
    loop {
        let left = BOOT_TIMEOUT.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) => {
                console.push_str(line.trim_end_matches('\r'));
                console.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                let _ = child.kill();
                break;
            }
        }
    }
    let status = child.wait().expect("wait for QEMU");
    for r in readers {
        let _ = r.join();
    }
    eprintln!("qemu_vfio: {scenario} boot took {:.1} s ({status})", started.elapsed().as_secs_f64());
    assert!(!timed_out, "the {scenario} guest did not finish within {BOOT_TIMEOUT:?}; console:\n{console}");
    console
}

/// Checks that every `expected` check printed `ok`, that none printed `FAIL`, and that the probe's
/// summary says so; prints the probe's lines.
fn assert_checks(scenario: &str, console: &str, expected: &[&str]) {
    let probe: Vec<&str> = console
        .lines()
        .filter(|l| {
            l.starts_with("ok ")
                || l.starts_with("FAIL ")
                || l.starts_with("  ")
                || l.starts_with("probe summary")
        })
        .collect();
    println!("--- {scenario} guest: vfio_probe ---\n{}", probe.join("\n"));
    let failed: Vec<&&str> = probe.iter().filter(|l| l.starts_with("FAIL ")).collect();
    assert!(failed.is_empty(), "checks failed in the {scenario} guest: {failed:#?}\nconsole:\n{console}");
    for name in expected {
        assert!(
            console.lines().any(|l| l == format!("ok {name}") || l.starts_with(&format!("ok {name} ("))),
            "the {scenario} guest did not report `ok {name}`; console:\n{console}"
        );
    }
    let summary = format!("probe summary: {} ok, 0 FAIL", expected.len());
    assert!(
        console.lines().any(|l| l.starts_with(&summary)),
        "the {scenario} guest's summary is not `{summary}`; console:\n{console}"
    );
    assert!(
        console.contains("init: vfio_probe exited with 0"),
        "vfio_probe did not exit 0 in the {scenario} guest; console:\n{console}"
    );
}

#[test]
fn vfio_layer_drives_edu_and_e1000e_in_a_guest_with_an_iommu() {
    if let Err(why) = image() {
        netns_test::skip(&why);
        return;
    }
    let console = boot("main");
    assert_checks(
        "main",
        &console,
        &[
            "container open",
            "edu open (group viable, type1 set, device fd)",
            "edu bus master via config space",
            "edu BAR0 ID register",
            "edu BAR0 liveness register",
            "pool region mapped for DMA",
            "edu DMA round trip",
            "edu DMA into the mapped pool",
            "unmap blocks DMA (IOMMU translation is real)",
            "edu MSI irq info",
            "edu MSI enabled with an eventfd",
            "edu MSI eventfd fires (raised interrupt)",
            "edu MSI eventfd fires (DMA completion)",
            "edu MSI disabled on drop",
            "e1000e STATUS",
            "error: device not bound to vfio-pci",
            "error: group not viable",
            "error: platform::open of a non-82599",
            "drop and reopen",
        ],
    );
    // The unmap check is only meaningful if the IOMMU really refused the DMA.
    assert!(
        console.contains("DMAR: [DMA Write"),
        "the guest kernel logged no DMAR fault for the DMA to an unmapped IOVA; console:\n{console}"
    );
}

#[test]
fn vfio_layer_reports_a_missing_iommu_in_a_guest_without_one() {
    if let Err(why) = image() {
        netns_test::skip(&why);
        return;
    }
    let console = boot("noiommu");
    assert_checks("noiommu", &console, &["container open", "error: no IOMMU"]);
}
