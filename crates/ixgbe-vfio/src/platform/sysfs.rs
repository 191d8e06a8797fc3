//! What sysfs says about a PCI function: which driver owns it, its IOMMU group and the other members of
//! that group, its vendor and device ids, the free hugepages, and the commands that bind it to
//! `vfio-pci`; plus the one write the no-IOMMU backend makes through it, bus mastering through
//! `config` ([`PciFunction::enable_bus_master`]). That backend itself is [`super::noiommu`].
//!
//! The sysfs root is a parameter ([`SysfsRoot`], `/sys` by default), so tests build fake trees in a
//! temporary directory and run the same code. The layout used (Linux
//! `Documentation/ABI/testing/sysfs-bus-pci`, `sysfs-kernel-iommu_groups`):
//!
//! ```text
//! bus/pci/devices/0000:03:00.0/{vendor,device,class,config,resource0,driver_override}
//! bus/pci/devices/0000:03:00.0/driver        -> .../bus/pci/drivers/ixgbe      (absent when unbound)
//! bus/pci/devices/0000:03:00.0/iommu_group   -> .../kernel/iommu_groups/17     (absent without IOMMU)
//! bus/pci/devices/0000:03:00.0/net/<ifname>/ (while a kernel network driver owns it)
//! kernel/iommu_groups/17/devices/<address>   (one entry per member of the group)
//! kernel/mm/hugepages/hugepages-2048kB/{nr_hugepages,free_hugepages}
//! ```

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::error::{GroupMember, OpenError, io_error, open_rw};
use super::pci::{self, PCI_COMMAND_MASTER, PCI_COMMAND_MEMORY, PciAddress, set_command_bits};

/// Where sysfs is mounted: `/sys`, or a fake tree in tests.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SysfsRoot(PathBuf);

impl Default for SysfsRoot {
    fn default() -> Self {
        Self(PathBuf::from("/sys"))
    }
}

impl SysfsRoot {
    /// A sysfs tree rooted at `path`.
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self(path.into())
    }

    /// The root directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `bus/pci/devices/<address>`.
    #[must_use]
    pub fn device_dir(&self, address: &PciAddress) -> PathBuf {
        self.0.join("bus/pci/devices").join(address.to_string())
    }

    /// `bus/pci/drivers/<driver>`.
    #[must_use]
    pub fn driver_dir(&self, driver: &str) -> PathBuf {
        self.0.join("bus/pci/drivers").join(driver)
    }

    /// `kernel/iommu_groups/<group>`.
    #[must_use]
    pub fn iommu_group_dir(&self, group: u32) -> PathBuf {
        self.0.join("kernel/iommu_groups").join(group.to_string())
    }

    /// `kernel/mm/hugepages/hugepages-2048kB`.
    #[must_use]
    pub fn hugepages_dir(&self) -> PathBuf {
        self.0.join("kernel/mm/hugepages/hugepages-2048kB")
    }

    /// Free 2 MiB hugepages, or `None` when the kernel has no such pool (the directory is missing).
    #[must_use]
    pub fn free_hugepages(&self) -> Option<u64> {
        read_trimmed(&self.hugepages_dir().join("free_hugepages")).ok()?.parse().ok()
    }

    /// The commands (as root) that hand `address`, now owned by `driver`, to `vfio-pci`, one per line.
    #[must_use]
    pub fn bind_commands(&self, address: &PciAddress, driver: Option<&str>) -> String {
        let dev = self.device_dir(address);
        let mut lines = vec!["    modprobe vfio-pci".to_owned()];
        if driver.is_some() {
            lines.push(format!("    echo {address} > {}", dev.join("driver/unbind").display()));
        }
        lines.push(format!("    echo vfio-pci > {}", dev.join("driver_override").display()));
        lines.push(format!("    echo {address} > {}", self.driver_dir("vfio-pci").join("bind").display()));
        lines.join("\n")
    }

    /// The command that reserves `n` hugepages of 2 MiB.
    #[must_use]
    pub fn reserve_hugepages_command(&self, n: u32) -> String {
        format!("echo {n} > {}", self.hugepages_dir().join("nr_hugepages").display())
    }
}

fn read_trimmed(path: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim().to_owned())
}

/// The last component of the target of the symlink at `path` (`driver` -> `.../drivers/ixgbe` gives
/// `ixgbe`), or `None` when there is no such link.
fn link_name(path: &Path) -> Result<Option<String>, OpenError> {
    match fs::read_link(path) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(OpenError::Io { path: path.to_owned(), source }),
    }
}

fn parse_hex_u16(text: &str) -> Option<u16> {
    u16::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
}

/// A PCI function as sysfs shows it.
#[derive(Clone, Debug)]
pub struct PciFunction {
    root: SysfsRoot,
    address: PciAddress,
    dir: PathBuf,
}

impl PciFunction {
    /// Looks `address` up under `root`.
    ///
    /// # Errors
    ///
    /// [`OpenError::NoSuchDevice`] when sysfs has no such device.
    pub fn find(root: &SysfsRoot, address: &PciAddress) -> Result<Self, OpenError> {
        let dir = root.device_dir(address);
        if !dir.is_dir() {
            return Err(OpenError::NoSuchDevice { address: *address, path: dir });
        }
        Ok(Self { root: root.clone(), address: *address, dir })
    }

    /// The function's address.
    #[must_use]
    pub fn address(&self) -> &PciAddress {
        &self.address
    }

    /// Its sysfs directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sysfs root it was found under.
    #[must_use]
    pub fn root(&self) -> &SysfsRoot {
        &self.root
    }

    /// `(vendor, device)` from the `vendor` and `device` files.
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] when a file is missing or unreadable or does not hold a hex id.
    pub fn ids(&self) -> Result<(u16, u16), OpenError> {
        let read = |name: &str| -> Result<u16, OpenError> {
            let path = self.dir.join(name);
            let text = read_trimmed(&path).map_err(io_error(&path))?;
            parse_hex_u16(&text).ok_or_else(|| OpenError::Io {
                path,
                source: io::Error::new(io::ErrorKind::InvalidData, format!("not a hex id: {text:?}")),
            })
        };
        Ok((read("vendor")?, read("device")?))
    }

    /// Checks that this is an Intel 82599 and returns the variant's name.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotAn82599`] naming the ids found; [`OpenError::Io`] as [`PciFunction::ids`].
    pub fn check_82599(&self) -> Result<&'static str, OpenError> {
        let (vendor, device) = self.ids()?;
        pci::ixgbe_82599_variant(vendor, device).ok_or(OpenError::NotAn82599 {
            address: self.address,
            vendor,
            device,
        })
    }

    /// The PCI class code (`0x020000` is an Ethernet controller, `0x0604xx` a PCI bridge), if readable.
    #[must_use]
    pub fn class(&self) -> Option<u32> {
        let text = read_trimmed(&self.dir.join("class")).ok()?;
        u32::from_str_radix(text.trim_start_matches("0x"), 16).ok()
    }

    /// The driver bound to the function (`ixgbe`, `vfio-pci`, `uio_pci_generic`), `None` when unbound.
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] when the `driver` link cannot be read for another reason than absence.
    pub fn driver(&self) -> Result<Option<String>, OpenError> {
        link_name(&self.dir.join("driver"))
    }

    /// The IOMMU group number, `None` when the function has none (no IOMMU, or it is off).
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] when the link cannot be read or does not end in a number.
    pub fn iommu_group(&self) -> Result<Option<u32>, OpenError> {
        let path = self.dir.join("iommu_group");
        let Some(name) = link_name(&path)? else { return Ok(None) };
        name.parse().map(Some).map_err(|_| OpenError::Io {
            path,
            source: io::Error::new(io::ErrorKind::InvalidData, format!("not a group number: {name:?}")),
        })
    }

    /// The network interfaces a kernel driver made for the function (`net/*`).
    #[must_use]
    pub fn net_interfaces(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.dir.join("net"))
            .map(|rd| {
                rd.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The other members of IOMMU group `group` and their drivers, in address order.
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] when the group's `devices` directory cannot be listed.
    pub fn group_peers(&self, group: u32) -> Result<Vec<GroupMember>, OpenError> {
        let dir = self.root.iommu_group_dir(group).join("devices");
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_error(&dir))? {
            let entry = entry.map_err(io_error(&dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == self.address.to_string() {
                continue;
            }
            let (driver, bridge) = match name.parse::<PciAddress>() {
                Ok(addr) => match Self::find(&self.root, &addr) {
                    Ok(peer) => (peer.driver()?, peer.class().is_some_and(|c| c >> 8 == 0x0604)),
                    Err(_) => (link_name(&entry.path().join("driver"))?, false),
                },
                Err(_) => (link_name(&entry.path().join("driver"))?, false),
            };
            out.push(GroupMember { address: name, driver, bridge });
        }
        out.sort_by(|a, b| a.address.cmp(&b.address));
        Ok(out)
    }

    /// Checks, from sysfs alone, what `VFIO_GROUP_GET_STATUS` will say: a group is viable only when
    /// every member is bound to a VFIO driver, to `pci-stub`, or to nothing (bridges are exempt).
    /// Returns the group number.
    ///
    /// # Errors
    ///
    /// [`OpenError::NoIommuGroup`] when the function has no group; [`OpenError::GroupNotViable`]
    /// listing the members that block the group.
    pub fn check_group_viable(&self) -> Result<u32, OpenError> {
        let Some(group) = self.iommu_group()? else {
            return Err(OpenError::NoIommuGroup {
                address: self.address,
                path: self.dir.join("iommu_group"),
            });
        };
        let peers = self.group_peers(group)?;
        if peers.iter().any(|p| !p.allows_vfio()) {
            return Err(self.group_not_viable(group, peers));
        }
        Ok(group)
    }

    /// The [`OpenError::GroupNotViable`] for `group` with its `peers`.
    pub(crate) fn group_not_viable(&self, group: u32, peers: Vec<GroupMember>) -> OpenError {
        OpenError::GroupNotViable {
            address: self.address,
            group,
            devices_dir: self.root.iommu_group_dir(group).join("devices"),
            peers,
        }
    }

    /// Sets Memory Space and Bus Master in the Command register through the sysfs `config` file, so
    /// that the device answers on BAR0 and may do DMA. Returns the register's old value.
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] (or [`OpenError::PermissionDenied`]) when `config` cannot be read or written.
    pub fn enable_bus_master(&self) -> Result<u16, OpenError> {
        let path = self.dir.join("config");
        let file = open_rw(&path)?;
        set_command_bits(&file, 0, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER).map_err(io_error(&path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_bind_commands_text() {
        let root = SysfsRoot::default();
        let a = PciAddress::parse("0000:03:00.0").unwrap();
        let text = root.bind_commands(&a, Some("ixgbe"));
        assert!(
            text.contains("echo 0000:03:00.0 > /sys/bus/pci/devices/0000:03:00.0/driver/unbind"),
            "{text}"
        );
        assert!(text.contains("echo vfio-pci > /sys/bus/pci/devices/0000:03:00.0/driver_override"), "{text}");
        assert!(text.contains("echo 0000:03:00.0 > /sys/bus/pci/drivers/vfio-pci/bind"), "{text}");
        assert!(!root.bind_commands(&a, None).contains("unbind"));
        assert_eq!(
            root.reserve_hugepages_command(512),
            "echo 512 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
        );
    }
}
