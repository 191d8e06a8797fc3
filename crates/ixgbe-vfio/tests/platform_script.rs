//! `scripts/vfio-bind.sh --dry-run` against fake sysfs trees: the printed plan, and the refusals (bad
//! address, missing device, not an Intel NIC, interfaces up, no IOMMU). Dry runs change nothing, which
//! is checked too. Skipped, with the reason printed, when bash is missing.

mod platform_support;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

use platform_support::FakeSysfs;

const NIC: &str = "0000:03:00.0";

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/vfio-bind.sh")
}

fn have_bash() -> bool {
    let ok = Command::new("bash").arg("-c").arg("true").output().is_ok_and(|o| o.status.success());
    if !ok {
        netns_test::skip("bash is not available to run scripts/vfio-bind.sh");
    }
    ok
}

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn run(fake: &FakeSysfs, args: &[&str]) -> Run {
    let Output { status, stdout, stderr } = Command::new("bash")
        .arg(script())
        .args(args)
        .env("SYSFS_ROOT", fake.path())
        .output()
        .expect("run bash");
    let run = Run {
        ok: status.success(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    };
    eprintln!("$ vfio-bind.sh {}\n--- stdout\n{}--- stderr\n{}", args.join(" "), run.stdout, run.stderr);
    run
}

/// The commands of a dry run's plan (its non-comment lines).
fn plan(run: &Run) -> Vec<String> {
    run.stdout.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(str::to_owned).collect()
}

#[test]
fn help() {
    if !have_bash() {
        return;
    }
    let fake = FakeSysfs::new("script-help");
    let r = run(&fake, &["--help"]);
    assert!(r.ok);
    for word in ["Usage", "--dry-run", "--hugepages", "--force", "--noiommu", "SYSFS_ROOT"] {
        assert!(r.stdout.contains(word), "help mentions {word}");
    }
}

#[test]
fn dry_run_prints_the_whole_plan_and_changes_nothing() {
    if !have_bash() {
        return;
    }
    let fake = FakeSysfs::new("script-plan");
    let dev = fake.add_82599(NIC);
    fake.bind(NIC, "ixgbe");
    fake.set_group(NIC, 17);
    fake.add_net(NIC, "enp3s0f0", false);
    let r = run(&fake, &["--dry-run", "--hugepages", "64", NIC]);
    assert!(r.ok, "{}", r.stderr);
    let root = fake.path().display();
    assert_eq!(
        plan(&r),
        [
            "modprobe vfio-pci".to_owned(),
            format!("echo {NIC} > {root}/bus/pci/devices/{NIC}/driver/unbind"),
            format!("echo vfio-pci > {root}/bus/pci/devices/{NIC}/driver_override"),
            format!("echo {NIC} > {root}/bus/pci/drivers/vfio-pci/bind"),
            format!("echo 64 > {root}/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
        ]
    );
    assert!(r.stdout.starts_with("# dry run"), "says it is a dry run");
    assert!(r.stderr.contains("driver ixgbe"), "reports the current driver");
    assert_eq!(fs::read_to_string(dev.join("driver_override")).unwrap(), "(null)\n", "nothing written");
    assert_eq!(fake.root().free_hugepages(), Some(0));
}

#[test]
fn upper_case_addresses_and_defaults() {
    if !have_bash() {
        return;
    }
    let fake = FakeSysfs::new("script-defaults");
    fake.add_82599("0000:0a:00.1");
    fake.set_group("0000:0a:00.1", 3);
    let r = run(&fake, &["--dry-run", "0000:0A:00.1"]);
    assert!(r.ok, "{}", r.stderr);
    let p = plan(&r);
    assert!(!p.iter().any(|l| l.contains("unbind")), "unbound: nothing to unbind: {p:?}");
    assert!(
        p.iter().any(|l| l.starts_with("echo 0000:0a:00.1 > ") && l.ends_with("/drivers/vfio-pci/bind")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|l| l.starts_with("echo 512 > ") && l.ends_with("/nr_hugepages")),
        "512 by default: {p:?}"
    );

    let r = run(&fake, &["--dry-run", "--hugepages", "0", "0000:0a:00.1"]);
    assert!(r.ok);
    assert!(!plan(&r).iter().any(|l| l.contains("nr_hugepages")), "--hugepages 0 leaves them alone");
}

#[test]
fn already_bound_is_left_alone() {
    if !have_bash() {
        return;
    }
    let fake = FakeSysfs::new("script-bound");
    fake.add_82599(NIC);
    fake.bind(NIC, "vfio-pci");
    fake.set_group(NIC, 4);
    let r = run(&fake, &["--dry-run", "--hugepages=0", NIC]);
    assert!(r.ok, "{}", r.stderr);
    assert_eq!(plan(&r), ["modprobe vfio-pci"]);
    assert!(r.stderr.contains("already bound to vfio-pci"));
}

#[test]
fn bad_addresses_are_refused() {
    if !have_bash() {
        return;
    }
    let fake = FakeSysfs::new("script-addr");
    for (bad, why) in [
        ("03:00.0", "did you mean 0000:03:00.0"),
        ("0000:03:00.8", "not a PCI address"),
        ("0000:03:20.0", "not a PCI address"),
        ("../../etc/passwd", "not a PCI address"),
        ("0000:03:00.0;reboot", "not a PCI address"),
    ] {
        let r = run(&fake, &["--dry-run", bad]);
        assert!(!r.ok, "{bad} accepted");
        assert!(r.stderr.contains(why), "{bad}: {}", r.stderr);
        assert!(plan(&r).is_empty(), "{bad}: nothing planned");
    }
    let r = run(&fake, &["--dry-run"]);
    assert!(!r.ok && r.stderr.contains("no PCI address"));
    let r = run(&fake, &["--dry-run", "--hugepages", "lots", NIC]);
    assert!(!r.ok && r.stderr.contains("whole number"));
    let r = run(&fake, &["--dry-run", "--bogus", NIC]);
    assert!(!r.ok && r.stderr.contains("unknown option"));
}

#[test]
fn missing_and_foreign_devices_are_refused() {
    if !have_bash() {
        return;
    }
    let fake = FakeSysfs::new("script-missing");
    let r = run(&fake, &["--dry-run", NIC]);
    assert!(!r.ok);
    assert!(r.stderr.contains("no PCI device 0000:03:00.0") && r.stderr.contains("lspci"), "{}", r.stderr);

    fake.add_device("0000:04:00.0", 0x15B3, 0x1017, 0x02_0000);
    fake.add_device("0000:05:00.0", 0x8086, 0x2922, 0x01_0601); // an Intel SATA controller
    let r = run(&fake, &["--dry-run", "0000:04:00.0"]);
    assert!(!r.ok && r.stderr.contains("not an Intel device"), "{}", r.stderr);
    let r = run(&fake, &["--dry-run", "0000:05:00.0"]);
    assert!(!r.ok && r.stderr.contains("not a network controller"), "{}", r.stderr);

    // One bad address among good ones: nothing is planned at all.
    fake.add_82599(NIC);
    fake.set_group(NIC, 1);
    let r = run(&fake, &["--dry-run", NIC, "0000:04:00.0"]);
    assert!(!r.ok && plan(&r).is_empty(), "{}", r.stdout);
}

#[test]
fn interfaces_up_need_force() {
    if !have_bash() {
        return;
    }
    let fake = FakeSysfs::new("script-up");
    fake.add_82599(NIC);
    fake.bind(NIC, "ixgbe");
    fake.set_group(NIC, 9);
    fake.add_net(NIC, "eth7", true);
    let r = run(&fake, &["--dry-run", NIC]);
    assert!(!r.ok);
    assert!(r.stderr.contains("eth7") && r.stderr.contains("--force"), "{}", r.stderr);
    let r = run(&fake, &["--dry-run", "--force", NIC]);
    assert!(r.ok, "{}", r.stderr);
    assert!(plan(&r).iter().any(|l| l.ends_with("/driver/unbind")));
    assert!(r.stderr.contains("warning: interface(s) eth7"));
}

#[test]
fn group_peers_are_reported() {
    if !have_bash() {
        return;
    }
    let fake = FakeSysfs::new("script-group");
    fake.add_82599(NIC);
    fake.add_82599("0000:03:00.1");
    fake.bind(NIC, "ixgbe");
    fake.bind("0000:03:00.1", "ixgbe");
    fake.set_group(NIC, 12);
    fake.set_group("0000:03:00.1", 12);
    let r = run(&fake, &["--dry-run", NIC]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stderr.contains("IOMMU group 12 also holds 0000:03:00.1 (driver ixgbe)"), "{}", r.stderr);
    // Binding both ports at once plans both.
    let r = run(&fake, &["--dry-run", NIC, "0000:03:00.1"]);
    assert!(r.ok);
    assert_eq!(plan(&r).iter().filter(|l| l.ends_with("/drivers/vfio-pci/bind")).count(), 2);
}

#[test]
fn no_iommu_is_refused_unless_asked_for() {
    if !have_bash() {
        return;
    }
    let fake = FakeSysfs::new("script-noiommu");
    fake.add_82599(NIC);
    fake.bind(NIC, "ixgbe");
    let r = run(&fake, &["--dry-run", NIC]);
    assert!(!r.ok);
    assert!(r.stderr.contains("intel_iommu=on") && r.stderr.contains("--noiommu"), "{}", r.stderr);
    let r = run(&fake, &["--dry-run", "--noiommu", NIC]);
    assert!(r.ok, "{}", r.stderr);
    let p = plan(&r);
    let root = fake.path().display();
    assert_eq!(p[0], "modprobe vfio enable_unsafe_noiommu_mode=1");
    assert_eq!(p[1], format!("echo 1 > {root}/module/vfio/parameters/enable_unsafe_noiommu_mode"));
    assert_eq!(p[2], "modprobe vfio-pci");
    assert!(r.stderr.contains("WARNING"), "the unsafe mode is called out");
}
