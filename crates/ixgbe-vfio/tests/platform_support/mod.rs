//! A fake sysfs tree in a temporary directory, shaped like the parts of `/sys` the platform layer and
//! `scripts/vfio-bind.sh` read (see the module docs of `ixgbe_vfio::platform::sysfs`).

#![allow(dead_code, unreachable_pub, reason = "each test uses its own subset of the helpers")]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use ixgbe_vfio::platform::SysfsRoot;

/// A temporary directory removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        // Relaxed: only uniqueness within this process matters.
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("ixgbe-vfio-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A fake `/sys`.
#[derive(Debug)]
pub struct FakeSysfs {
    dir: TempDir,
}

impl FakeSysfs {
    pub fn new(tag: &str) -> Self {
        let dir = TempDir::new(tag);
        for d in [
            "bus/pci/devices",
            "bus/pci/drivers",
            "kernel/iommu_groups",
            "kernel/mm/hugepages/hugepages-2048kB",
        ] {
            fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let me = Self { dir };
        me.hugepages(0, 0);
        me
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn root(&self) -> SysfsRoot {
        SysfsRoot::new(self.path())
    }

    pub fn device_dir(&self, addr: &str) -> PathBuf {
        self.path().join("bus/pci/devices").join(addr)
    }

    /// A PCI function with `vendor`/`device`/`class`, a 256-byte `config` and a 128 KiB `resource0`.
    pub fn add_device(&self, addr: &str, vendor: u16, device: u16, class: u32) -> PathBuf {
        let d = self.device_dir(addr);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("vendor"), format!("{vendor:#06x}\n")).unwrap();
        fs::write(d.join("device"), format!("{device:#06x}\n")).unwrap();
        fs::write(d.join("class"), format!("{class:#08x}\n")).unwrap();
        let mut config = vec![0u8; 256];
        config[..2].copy_from_slice(&vendor.to_le_bytes());
        config[2..4].copy_from_slice(&device.to_le_bytes());
        fs::write(d.join("config"), config).unwrap();
        fs::write(d.join("resource0"), vec![0u8; 128 * 1024]).unwrap();
        fs::write(d.join("driver_override"), "(null)\n").unwrap();
        d
    }

    /// An Intel 82599ES (8086:10fb), Ethernet class.
    pub fn add_82599(&self, addr: &str) -> PathBuf {
        self.add_device(addr, 0x8086, 0x10FB, 0x02_0000)
    }

    /// Binds `addr` to `driver` (the `driver` symlink, as the kernel makes it).
    pub fn bind(&self, addr: &str, driver: &str) {
        let drv = self.path().join("bus/pci/drivers").join(driver);
        fs::create_dir_all(&drv).unwrap();
        let link = self.device_dir(addr).join("driver");
        let _ = fs::remove_file(&link);
        symlink(&drv, link).unwrap();
    }

    /// Puts `addr` into IOMMU group `group`.
    pub fn set_group(&self, addr: &str, group: u32) {
        let g = self.path().join("kernel/iommu_groups").join(group.to_string());
        fs::create_dir_all(g.join("devices")).unwrap();
        symlink(self.device_dir(addr), g.join("devices").join(addr)).unwrap();
        symlink(&g, self.device_dir(addr).join("iommu_group")).unwrap();
    }

    /// A network interface of `addr`, administratively up or down (`flags` bit 0, IFF_UP).
    pub fn add_net(&self, addr: &str, ifname: &str, up: bool) {
        let n = self.device_dir(addr).join("net").join(ifname);
        fs::create_dir_all(&n).unwrap();
        fs::write(n.join("flags"), if up { "0x1003\n" } else { "0x1002\n" }).unwrap();
        fs::write(n.join("operstate"), if up { "up\n" } else { "down\n" }).unwrap();
    }

    pub fn hugepages(&self, nr: u64, free: u64) {
        let h = self.path().join("kernel/mm/hugepages/hugepages-2048kB");
        fs::write(h.join("nr_hugepages"), format!("{nr}\n")).unwrap();
        fs::write(h.join("free_hugepages"), format!("{free}\n")).unwrap();
    }
}

/// Whether this process reads real physical addresses (root); prints why not.
pub fn pagemap_readable() -> bool {
    match ixgbe_vfio::platform::noiommu::probe_pagemap() {
        Ok(()) => true,
        Err(e) => {
            netns_test::skip(&format!("physical addresses are not readable here: {e}"));
            false
        }
    }
}

/// Free 2 MiB hugepages on this machine, from /proc/meminfo.
pub fn free_hugepages_here() -> u64 {
    let text = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let free = text
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let size_2m = text.lines().any(|l| l.starts_with("Hugepagesize:") && l.contains("2048 kB"));
    if size_2m { free } else { 0 }
}
