//! PCI facts the platform layers share: the address of a function (`0000:03:00.0`), the vendor and
//! device ids of the 82599 family, and the configuration-space bits that let a device master the bus.
//!
//! Sources: the PCI Local Bus Specification 3.0, §6.2.2 (the Command register at offset 0x04, bit 1
//! Memory Space, bit 2 Bus Master), and the device-id list of the Linux `ixgbe` driver
//! (`ixgbe_type.h`), which is the one public list of 82599 variants.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::str::FromStr;

/// Intel's PCI vendor id.
pub const INTEL_VENDOR_ID: u16 = 0x8086;

/// The device ids of the 82599 variants (physical functions only: the 82599 virtual function, 0x10ED,
/// has a different register map and is not driven here), with the names the `ixgbe` driver gives them.
pub const IXGBE_82599_DEVICE_IDS: &[(u16, &str)] = &[
    (0x10F7, "82599 KX4"),
    (0x1514, "82599 KX4 Mezzanine"),
    (0x1517, "82599 KR"),
    (0x10F8, "82599 Combo Backplane"),
    (0x10F9, "82599 CX4"),
    (0x10FB, "82599 SFP+ (82599ES)"),
    (0x152A, "82599 Backplane FCoE"),
    (0x1529, "82599 SFP+ FCoE"),
    (0x1507, "82599 SFP+ EM"),
    (0x154D, "82599 SFP+ SF2"),
    (0x154A, "82599 SFP+ SF QP"),
    (0x154F, "82599 LS"),
    (0x1557, "82599EN SFP+"),
    (0x1558, "82599 QSFP+ SF QP"),
    (0x10FC, "82599 XAUI LOM"),
    (0x151C, "82599 T3 LOM"),
];

/// The name of an 82599 variant, or `None` when `(vendor, device)` is not an 82599 physical function.
#[must_use]
pub fn ixgbe_82599_variant(vendor: u16, device: u16) -> Option<&'static str> {
    if vendor != INTEL_VENDOR_ID {
        return None;
    }
    IXGBE_82599_DEVICE_IDS.iter().find(|&&(id, _)| id == device).map(|&(_, name)| name)
}

/// Offset of the 16-bit Command register in configuration space (PCI 3.0 §6.2.2).
pub const PCI_COMMAND: u64 = 0x04;
/// Command register bit 1: the device responds to memory-space accesses (its BARs).
pub const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// Command register bit 2: the device may master the bus, i.e. do DMA.
pub const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// The address of a PCI function in the `domain:bus:device.function` form that sysfs and VFIO use,
/// e.g. `0000:03:00.0`.
///
/// The canonical text form (what [`fmt::Display`] writes and what names the sysfs directory) is
/// lower-case hex with a 4-digit domain, 2-digit bus and device, and a 1-digit function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI segment (domain).
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0..=31.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

/// Why a string is not a PCI address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a PCI address of the form 0000:03:00.0 (domain:bus:device.function): {why}")]
pub struct ParsePciAddressError {
    /// What was given.
    pub input: String,
    /// What is wrong with it, with a corrected form where one can be guessed.
    pub why: String,
}

impl PciAddress {
    /// Parses `dddd:bb:dd.f` (hex; upper or lower case).
    ///
    /// # Errors
    ///
    /// [`ParsePciAddressError`] naming what is wrong. The short form `03:00.0` (no domain) is refused
    /// with a hint to write `0000:03:00.0`: sysfs names devices by the full form.
    pub fn parse(input: &str) -> Result<Self, ParsePciAddressError> {
        let err = |why: String| ParsePciAddressError { input: input.to_owned(), why };
        let parts: Vec<&str> = input.split(':').collect();
        let (domain, bus, devfn) = match parts.as_slice() {
            [domain, bus, devfn] => (*domain, *bus, *devfn),
            [_bus, _devfn] => {
                let with_domain = format!("0000:{input}");
                return Err(err(if Self::parse(&with_domain).is_ok() {
                    format!("the domain is missing; did you mean {with_domain}?")
                } else {
                    "the domain is missing".to_owned()
                }));
            }
            _ => return Err(err("expected two ':' separators".to_owned())),
        };
        let Some((dev, func)) = devfn.split_once('.') else {
            return Err(err("expected '.' between the device and the function".to_owned()));
        };
        let field = |text: &str, digits: usize, what: &str| -> Result<u32, ParsePciAddressError> {
            if text.len() != digits || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err(format!("the {what} must be {digits} hex digit(s), got {text:?}")));
            }
            u32::from_str_radix(text, 16).map_err(|e| err(format!("the {what}: {e}")))
        };
        let domain = field(domain, 4, "domain")?;
        let bus = field(bus, 2, "bus")?;
        let device = field(dev, 2, "device")?;
        let function = field(func, 1, "function")?;
        if device > 31 {
            return Err(err(format!("the device number {device:#x} is above 0x1f")));
        }
        if function > 7 {
            return Err(err(format!("the function number {function} is above 7")));
        }
        let narrow = |v: u32| u8::try_from(v).map_err(|_| err("a field is out of range".to_owned()));
        Ok(Self {
            domain: u16::try_from(domain).map_err(|_| err("the domain is out of range".to_owned()))?,
            bus: narrow(bus)?,
            device: narrow(device)?,
            function: narrow(function)?,
        })
    }
}

impl FromStr for PciAddress {
    type Err = ParsePciAddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}

/// Read-modify-writes the Command register of a configuration space that starts at `base` in `file`.
/// Returns the old value.
pub(crate) fn set_command_bits(file: &File, base: u64, bits: u16) -> io::Result<u16> {
    let mut buf = [0u8; 2];
    file.read_exact_at(&mut buf, base + PCI_COMMAND)?;
    let old = u16::from_le_bytes(buf);
    if old & bits != bits {
        file.write_all_at(&(old | bits).to_le_bytes(), base + PCI_COMMAND)?;
    }
    Ok(old)
}

#[cfg(test)]
mod tests {
    use std::fs::{self, OpenOptions};

    use super::*;

    #[test]
    fn pci_address_round_trip() {
        let a = PciAddress::parse("0000:03:00.0").unwrap();
        assert_eq!(a, PciAddress { domain: 0, bus: 3, device: 0, function: 0 });
        assert_eq!(a.to_string(), "0000:03:00.0");
        let b: PciAddress = "ABCD:ef:1F.7".parse().unwrap();
        assert_eq!(b.to_string(), "abcd:ef:1f.7");
    }

    #[test]
    fn pci_address_refusals() {
        for (bad, needle) in [
            ("03:00.0", "did you mean 0000:03:00.0"),
            ("3:00.0", "the domain is missing"),
            ("", "two ':'"),
            ("0000:03:00", "'.'"),
            ("000:03:00.0", "domain must be 4"),
            ("0000:3:00.0", "bus must be 2"),
            ("0000:03:0.0", "device must be 2"),
            ("0000:03:00.00", "function must be 1"),
            ("0000:03:20.0", "above 0x1f"),
            ("0000:03:00.8", "above 7"),
            ("0000:0g:00.0", "hex"),
            ("0000:03:00.0/../..", "function must be 1"),
            ("0000:+3:00.0", "hex"),
        ] {
            let e = PciAddress::parse(bad).expect_err(bad);
            assert!(e.to_string().contains(needle), "{bad:?}: {e}");
        }
    }

    #[test]
    fn ids_of_82599_variants() {
        assert_eq!(ixgbe_82599_variant(0x8086, 0x10FB), Some("82599 SFP+ (82599ES)"));
        assert_eq!(ixgbe_82599_variant(0x8086, 0x1528), None, "X540 is not an 82599");
        assert_eq!(ixgbe_82599_variant(0x8086, 0x10ED), None, "the VF is not driven");
        assert_eq!(ixgbe_82599_variant(0x15B3, 0x10FB), None);
    }

    #[test]
    fn sysfs_command_register_read_modify_write() {
        let path = std::env::temp_dir().join(format!("ixgbe-vfio-config-{}", std::process::id()));
        let mut config = vec![0u8; 256];
        config[4] = 0x03; // memory + I/O space already on
        config[5] = 0x04; // interrupt disable
        fs::write(&path, &config).unwrap();
        let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let old = set_command_bits(&file, 0, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER).unwrap();
        assert_eq!(old, 0x0403);
        let after = fs::read(&path).unwrap();
        fs::remove_file(&path).unwrap();
        assert_eq!(u16::from_le_bytes([after[4], after[5]]), 0x0407);
        assert_eq!(after.iter().filter(|&&b| b != 0).count(), 2, "nothing else written");
    }
}
