//! The platform layer against fake sysfs trees and this machine's memory: address validation, the
//! refusals and their advice, the sysfs fallback end to end on a fake device, `/proc/self/pagemap`
//! translation, hugepage-only DMA, and the BAR accessors on memory standing in for BAR0.
//!
//! There is no IOMMU, VFIO device or 82599 here: the VFIO ioctls are exercised only up to the first one
//! (on a file that is not a VFIO container, which must be reported, not ignored).

mod platform_support;

use std::fs;
use std::sync::Arc;

use ixgbe_vfio::hw::{DmaSpace, Mmio, Translation};
use ixgbe_vfio::platform::bar::MappedBar;
use ixgbe_vfio::platform::noiommu::{HUGEPAGE_SIZE, HugepageDma};
use ixgbe_vfio::platform::pagemap::{Pagemap, PagemapError, system_page_size};
use ixgbe_vfio::platform::{Backend, OpenError, OpenOptions, map_pool_region};
use netchannel::pool::{HugePages, Pool};
use platform_support::{FakeSysfs, TempDir, free_hugepages_here, pagemap_readable};

const NIC: &str = "0000:03:00.0";

fn options(fake: &FakeSysfs) -> OpenOptions {
    OpenOptions::new().sysfs_root(fake.root())
}

#[test]
fn malformed_addresses_are_refused_before_sysfs_is_read() {
    let fake = FakeSysfs::new("addr");
    for bad in ["03:00.0", "0000:03:00", "0000:03:00.9", "../../etc", ""] {
        let e = options(&fake).open(bad).unwrap_err();
        assert!(matches!(e, OpenError::InvalidAddress(_)), "{bad:?}: {e:?}");
        assert!(e.to_string().contains("0000:03:00.0"), "{bad:?}: the message shows the expected form: {e}");
    }
    let e = options(&fake).open("03:00.0").unwrap_err();
    assert!(e.to_string().contains("did you mean 0000:03:00.0"), "{e}");
}

#[test]
fn missing_device_says_how_to_find_the_address() {
    let fake = FakeSysfs::new("missing");
    let e = options(&fake).open(NIC).unwrap_err();
    assert!(matches!(e, OpenError::NoSuchDevice { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("no PCI device 0000:03:00.0") && msg.contains("lspci -D -d 8086:"), "{msg}");
}

#[test]
fn other_devices_are_not_an_82599() {
    let fake = FakeSysfs::new("not82599");
    fake.add_device(NIC, 0x8086, 0x1528, 0x02_0000); // X540: an ixgbe NIC but not an 82599
    fake.add_device("0000:04:00.0", 0x15B3, 0x1017, 0x02_0000); // not Intel
    let e = options(&fake).open(NIC).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, OpenError::NotAn82599 { vendor: 0x8086, device: 0x1528, .. }), "{e:?}");
    assert!(msg.contains("0x1528") && msg.contains("0x10fb"), "names what it found and what it wants: {msg}");
    let e = options(&fake).open("0000:04:00.0").unwrap_err();
    assert!(matches!(e, OpenError::NotAn82599 { vendor: 0x15B3, .. }), "{e:?}");
    assert!(e.to_string().contains("vendor 0x15b3"), "{e}");
}

#[test]
fn kernel_driver_bound_prints_the_bind_commands() {
    let fake = FakeSysfs::new("ixgbe");
    fake.add_82599(NIC);
    fake.bind(NIC, "ixgbe");
    let e = options(&fake).open(NIC).unwrap_err();
    assert!(matches!(&e, OpenError::NotBoundToVfio { driver: Some(d), .. } if d == "ixgbe"), "{e:?}");
    let msg = e.to_string();
    let root = fake.path().display();
    for line in [
        format!("echo {NIC} > {root}/bus/pci/devices/{NIC}/driver/unbind"),
        format!("echo vfio-pci > {root}/bus/pci/devices/{NIC}/driver_override"),
        format!("echo {NIC} > {root}/bus/pci/drivers/vfio-pci/bind"),
        "modprobe vfio-pci".to_owned(),
        format!("scripts/vfio-bind.sh {NIC}"),
        "bound to ixgbe".to_owned(),
        "allow_unsafe_fallback".to_owned(),
    ] {
        assert!(msg.contains(&line), "missing {line:?} in:\n{msg}");
    }
    // With the default root the commands are the real ones.
    let real = ixgbe_vfio::platform::SysfsRoot::default().bind_commands(&NIC.parse().unwrap(), Some("ixgbe"));
    assert!(real.contains("echo 0000:03:00.0 > /sys/bus/pci/devices/0000:03:00.0/driver/unbind"), "{real}");

    // Allowing the fallback does not let us take a device away from a kernel driver.
    let e = options(&fake).allow_unsafe_fallback(true).open(NIC).unwrap_err();
    assert!(matches!(e, OpenError::NotBoundToVfio { .. }), "{e:?}");
}

#[test]
fn unbound_device_without_fallback_is_refused() {
    let fake = FakeSysfs::new("unbound");
    fake.add_82599(NIC);
    let e = options(&fake).open(NIC).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, OpenError::NotBoundToVfio { driver: None, .. }), "{e:?}");
    assert!(!msg.contains("driver/unbind"), "nothing to unbind: {msg}");
    assert!(msg.contains("driver_override") && msg.contains("drivers/vfio-pci/bind"), "{msg}");
}

#[test]
fn group_not_viable_lists_the_other_devices() {
    let fake = FakeSysfs::new("group");
    fake.add_82599(NIC);
    fake.add_82599("0000:03:00.1");
    fake.add_device("0000:00:01.0", 0x8086, 0x1901, 0x06_0400); // the root port: a bridge
    fake.add_device("0000:03:00.2", 0x8086, 0x10D3, 0x02_0000);
    fake.bind(NIC, "vfio-pci");
    fake.bind("0000:03:00.1", "ixgbe");
    fake.bind("0000:00:01.0", "pcieport");
    for addr in [NIC, "0000:03:00.1", "0000:00:01.0", "0000:03:00.2"] {
        fake.set_group(addr, 17);
    }
    let e = options(&fake).open(NIC).unwrap_err();
    let OpenError::GroupNotViable { group, peers, .. } = &e else { panic!("{e:?}") };
    assert_eq!(*group, 17);
    let names: Vec<&str> = peers.iter().map(|p| p.address.as_str()).collect();
    assert_eq!(names, ["0000:00:01.0", "0000:03:00.1", "0000:03:00.2"], "every other member, sorted");
    let msg = e.to_string();
    assert!(msg.contains("kernel/iommu_groups/17/devices"), "{msg}");
    assert!(msg.contains("0000:03:00.1 (driver: ixgbe) blocks the group"), "{msg}");
    assert!(msg.contains("0000:00:01.0 (driver: pcieport) ok"), "{msg}");
    assert!(msg.contains("0000:03:00.2 (driver: no driver) ok"), "{msg}");
    assert!(!msg.contains("0000:03:00.0 (driver"), "the device itself is not listed: {msg}");

    // Once the blocking peer is handed to vfio-pci, the sysfs check passes and VFIO itself is next.
    fake.bind("0000:03:00.1", "vfio-pci");
    let empty_dev = TempDir::new("devvfio");
    let e = options(&fake).dev_vfio(empty_dev.path()).open(NIC).unwrap_err();
    assert!(matches!(e, OpenError::VfioUnavailable { .. }), "{e:?}");
    assert!(e.to_string().contains("modprobe vfio-pci"), "{e}");
}

#[test]
fn no_iommu_group_explains_the_iommu() {
    let fake = FakeSysfs::new("noiommu");
    fake.add_82599(NIC);
    fake.bind(NIC, "vfio-pci");
    let e = options(&fake).open(NIC).unwrap_err();
    assert!(matches!(e, OpenError::NoIommuGroup { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("intel_iommu=on") && msg.contains("enable_unsafe_noiommu_mode"), "{msg}");
}

#[test]
fn vfio_ioctl_failures_are_reported() {
    // A container node that is not a VFIO container: the first ioctl fails (ENOTTY) and says so.
    let fake = FakeSysfs::new("ioctl");
    fake.add_82599(NIC);
    fake.bind(NIC, "vfio-pci");
    fake.set_group(NIC, 5);
    let dev = TempDir::new("devvfio-file");
    fs::write(dev.path().join("vfio"), b"not a char device").unwrap();
    let e = options(&fake).dev_vfio(dev.path()).open(NIC).unwrap_err();
    let OpenError::Vfio { op, source, .. } = &e else { panic!("{e:?}") };
    assert_eq!(*op, "VFIO_GET_API_VERSION");
    assert_eq!(source.raw_os_error(), Some(libc::ENOTTY), "{e}");
}

#[test]
fn fallback_needs_hugepages() {
    let fake = FakeSysfs::new("nohuge");
    fake.add_82599(NIC);
    let e = options(&fake).allow_unsafe_fallback(true).open(NIC).unwrap_err();
    assert!(matches!(e, OpenError::NoHugepages { free: 0, .. }), "{e:?}");
    let msg = e.to_string();
    let want =
        format!("echo 512 > {}/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", fake.path().display());
    assert!(msg.contains(&want), "{msg}");
}

#[test]
fn fallback_opens_a_fake_device_through_sysfs() {
    if !pagemap_readable() {
        return;
    }
    for driver in [None, Some("uio_pci_generic")] {
        let fake = FakeSysfs::new("fallback");
        let dir = fake.add_82599(NIC);
        if let Some(d) = driver {
            fake.bind(NIC, d);
        }
        fake.hugepages(512, 512);
        let nic = options(&fake).allow_unsafe_fallback(true).open(NIC).unwrap();
        assert_eq!(nic.backend(), Backend::Sysfs);
        assert_eq!(nic.variant(), "82599 SFP+ (82599ES)");
        assert_eq!(nic.address().to_string(), NIC);

        // Bus Master and Memory Space were set in the Command register through `config`.
        let config = fs::read(dir.join("config")).unwrap();
        let command = u16::from_le_bytes([config[4], config[5]]);
        assert_eq!(command & 0b110, 0b110, "command {command:#x}");

        // BAR0 is `resource0`, mapped shared: register writes land in the file.
        let bar = nic.bar0();
        assert_eq!(bar.bar_len(), 128 * 1024);
        bar.write32(0x8, 0x1234_5678);
        assert_eq!(bar.read32(0x8), 0x1234_5678);
        let res = fs::read(dir.join("resource0")).unwrap();
        assert_eq!(&res[8..12], &0x1234_5678u32.to_le_bytes());
        drop(nic);
        // The BAR mapping is self-contained: it stays valid after the device handle is gone.
        assert_eq!(Arc::strong_count(&bar), 1);
        assert_eq!(bar.read32(0x8), 0x1234_5678);
    }
}

#[test]
fn pagemap_translates_this_process_memory() {
    let page = system_page_size();
    let mut buf = vec![0u8; 16 * page];
    for b in buf.iter_mut().step_by(page) {
        *b = 1; // touch every page so that it is present
    }
    let base = buf.as_ptr() as usize;
    let pagemap = Pagemap::open().unwrap();
    match pagemap.translate(base) {
        Err(PagemapError::NoPermission { .. }) => {
            netns_test::skip("not root, pagemap hides page frame numbers (the error says so)");
            return;
        }
        Err(e) => panic!("{e}"),
        Ok(_) => {}
    }
    for i in 0..16 {
        let va = base + i * page + 123;
        let pa = pagemap.translate(va).unwrap();
        assert_eq!(pa.0 % page as u64, (va % page) as u64, "same offset within the page");
        assert_ne!(pa.0 / page as u64, 0, "a real frame");
        assert_eq!(pagemap.translate(va).unwrap(), pa, "stable");
        let start = va - va % page;
        assert_eq!(
            pagemap.translate(start + page - 1).unwrap().0,
            pa.0 - (va % page) as u64 + page as u64 - 1
        );
    }
    std::hint::black_box(&mut buf);
}

/// Without `CAP_SYS_ADMIN` the PFNs read as zero: the test re-runs itself as `nobody` (through
/// `setpriv`) and expects the clear error instead of a zero address.
#[test]
fn pagemap_without_privilege_reports_no_permission() {
    const CHILD: &str = "IXGBE_VFIO_PAGEMAP_CHILD";
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if std::env::var_os(CHILD).is_some() || euid != 0 {
        let e = ixgbe_vfio::platform::noiommu::probe_pagemap().unwrap_err();
        assert!(matches!(e, OpenError::Pagemap(PagemapError::NoPermission { .. })), "{e:?}");
        assert!(e.to_string().contains("CAP_SYS_ADMIN"), "{e}");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(exe)
        .args(["--exact", "pagemap_without_privilege_reports_no_permission", "--test-threads=1"])
        .env(CHILD, "1")
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            netns_test::skip(&format!("cannot run setpriv to drop privileges: {e}"));
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !stdout.contains("running 1 test") {
        netns_test::skip(&format!(
            "could not re-run this test as nobody: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
        return;
    }
    assert!(
        out.status.success(),
        "the unprivileged run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn pagemap_reports_untouched_pages() {
    let page = system_page_size();
    // A fresh anonymous mapping that is never touched has no frames yet.
    let bar = MappedBar::anonymous(4 * page).unwrap();
    let e = Pagemap::open().unwrap().translate(bar.as_ptr() as usize + page).unwrap_err();
    assert!(matches!(e, PagemapError::NotPresent { .. } | PagemapError::NoPermission { .. }), "{e:?}");
}

#[test]
fn hugepage_dma_refuses_normal_pages() {
    let dma = HugepageDma::new();
    let pool = Pool::builder(256).hugepages(HugePages::Never).build().unwrap();
    let region = pool.region();
    assert!(!region.is_hugepage());

    let e = map_pool_region(&dma, Backend::Sysfs, &pool).unwrap_err();
    assert!(e.to_string().contains("HugePages::Require") && e.to_string().contains("nr_hugepages"), "{e}");

    let e = dma.map(region.as_ptr() as usize, region.len()).unwrap_err();
    assert!(e.to_string().contains("2 MiB"), "{e}");

    // A 2 MiB-aligned range of ordinary pages is refused for what it is, not for its alignment.
    let big = MappedBar::anonymous(2 * HUGEPAGE_SIZE).unwrap();
    // `aligned < base + 2 MiB`, so `aligned..aligned + 2 MiB` lies inside the 4 MiB mapping.
    let aligned = (big.as_ptr() as usize).next_multiple_of(HUGEPAGE_SIZE);
    let e = dma.map(aligned, HUGEPAGE_SIZE).unwrap_err();
    assert!(e.to_string().contains("not hugepages"), "{e}");
}

#[test]
fn hugepage_dma_on_real_hugepages() {
    let free = free_hugepages_here();
    if free < 2 {
        netns_test::skip(&format!(
            "{free} free 2 MiB hugepages on this machine (reserve some with `echo 8 > \
             /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages` to run this test; \
             scripts/test.sh does so as root)"
        ));
        return;
    }
    if !pagemap_readable() {
        return;
    }
    let dma = HugepageDma::new();
    let ring = dma.alloc(64 * 1024).unwrap();
    assert_eq!(ring.len(), HUGEPAGE_SIZE);
    let Translation::Pages { page_shift: 21, pages } = ring.translation() else {
        panic!("{:?}", ring.translation())
    };
    assert_eq!(pages.len(), 1);
    assert_eq!(pages[0].0 % HUGEPAGE_SIZE as u64, 0, "a hugepage starts on a 2 MiB physical boundary");
    // The hugepage is physically contiguous: pagemap agrees with the translation at every 4 KiB.
    let pagemap = Pagemap::open().unwrap();
    for off in (0..HUGEPAGE_SIZE).step_by(64 * 1024) {
        ring.store_u64(off, 1, std::sync::atomic::Ordering::Relaxed);
        let pa = pagemap.translate(ring.as_ptr() as usize + off).unwrap();
        assert_eq!(Some(pa.into()), ring.iova(off));
    }

    let pool = Pool::builder(512).hugepages(HugePages::Require).build().unwrap();
    let mapping = map_pool_region(&dma, Backend::Sysfs, &pool).unwrap();
    assert_eq!(mapping.len(), pool.region().len());
    assert!(mapping.iova(0).is_some());
}

#[test]
fn bar_on_anonymous_memory_through_the_trait() {
    let bar: Arc<dyn Mmio> = Arc::new(MappedBar::anonymous(0x2_0000).unwrap());
    for (i, off) in (0u32..).zip([0u32, 0x4, 0x8800, 0x1_FFFC]) {
        bar.write32(off, 0xA5A5_0000 | i);
    }
    assert_eq!(bar.read32(0x8800), 0xA5A5_0002);
    assert_eq!(bar.read32(0x1_FFFC), 0xA5A5_0003);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bar.read32(0x2_0000)));
    assert!(caught.is_err(), "reads past BAR0 panic");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bar.write32(0x1_FFFE, 0)));
    assert!(caught.is_err(), "misaligned writes panic");
}
