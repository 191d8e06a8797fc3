//! A userspace Intel 82599 (ixgbe) driver that pushes received packets into net channels, with RSS and
//! Flow Director flow groups, plus a behavioural model of the NIC so that the driver runs in tests and
//! demos without the card.
//!
//! * [`hw`]: what the driver needs from a device: bounds-checked register access ([`hw::Mmio`]) and
//!   DMA memory ([`hw::DmaSpace`]).
//! * [`regs`]: the registers and descriptor formats, with their datasheet sections.
//! * [`sim`]: the behavioural model of the 82599.
//! * [`driver`]: the driver, written once against [`hw`].
//! * [`platform`]: what gives the driver a real device: [`platform::open`], over VFIO
//!   ([`platform::vfio`]) or the no-IOMMU sysfs fallback ([`platform::noiommu`]).
#![cfg_attr(
    loom,
    allow(dead_code, unused_imports, reason = "the loom build compiles only the models' code paths")
)]

pub mod driver;
pub mod hw;
pub mod platform;
pub mod regs;
pub mod sim;
