//! Drives this crate's VFIO layer ([`ixgbe_vfio::platform::vfio`]) against real devices: the guest program of
//! `crates/ixgbe-vfio/tests/qemu_vfio.rs`, which boots it in QEMU with an emulated Intel IOMMU
//! (`scripts/qemu-vfio-guest.sh`). It uses QEMU's `edu` device (an ID register, a liveness register, a
//! DMA engine with a 4 KiB buffer at device address 0x40000, and MSI), an `e1000e`, and devices set up
//! to fail: one not bound to vfio-pci, one in a group that is not viable, or no IOMMU at all.
//!
//! It prints `ok <check>` or `FAIL <check>: <why>` per check and `probe summary: N ok, M FAIL` last;
//! the exit status is 0 only when nothing failed.
//!
//! ```text
//! vfio_probe main --edu 0000:00:03.0 --e1000e 0000:00:04.0 --unbound 0000:00:05.0 --not-viable 0000:01:01.0
//! vfio_probe noiommu --edu 0000:00:03.0
//! ```

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ixgbe_vfio::platform::pci::{PCI_COMMAND, PCI_COMMAND_MASTER, PciAddress};
use ixgbe_vfio::platform::vfio::{IommuKind, IrqKind, VfioContainer, VfioDevice};
use ixgbe_vfio::platform::{self, Backend, OpenError};
use netchannel::pool::{HugePages, Pool};

/// edu registers (QEMU `docs/specs/edu.rst`).
mod edu {
    pub(crate) const ID: u32 = 0x00;
    pub(crate) const LIVENESS: u32 = 0x04;
    pub(crate) const IRQ_STATUS: u32 = 0x24;
    pub(crate) const IRQ_RAISE: u32 = 0x60;
    pub(crate) const IRQ_ACK: u32 = 0x64;
    pub(crate) const DMA_SRC: u32 = 0x80;
    pub(crate) const DMA_DST: u32 = 0x88;
    pub(crate) const DMA_COUNT: u32 = 0x90;
    pub(crate) const DMA_CMD: u32 = 0x98;
    pub(crate) const DMA_START: u64 = 1;
    pub(crate) const DMA_TO_RAM: u64 = 2;
    pub(crate) const DMA_IRQ: u64 = 4;
    /// The DMA interrupt's bit in the interrupt status register.
    pub(crate) const DMA_IRQ_BIT: u32 = 0x100;
    /// The device-side DMA buffer.
    pub(crate) const BUFFER: u64 = 0x40000;
    pub(crate) const ID_VALUE: u32 = 0x0100_00ed;
}

const E1000_STATUS: u32 = 0x0008;
/// The DMA buffers' size (a page).
const DMA_LEN: usize = 4096;
/// Bytes per edu transfer: half of its 4 KiB buffer (QEMU 7.2's edu refuses a transfer that ends
/// exactly at the end of its buffer).
const XFER: usize = 2048;

struct Report {
    ok: usize,
    failed: usize,
}

impl Report {
    fn check(&mut self, name: &str, result: Result<String, String>) -> bool {
        match result {
            Ok(detail) if detail.is_empty() => {
                self.ok += 1;
                println!("ok {name}");
                true
            }
            Ok(detail) => {
                self.ok += 1;
                println!("ok {name} ({detail})");
                true
            }
            Err(why) => {
                self.failed += 1;
                println!("FAIL {name}: {why}");
                false
            }
        }
    }

    /// Prints an error's message with a prefix on each line, so the host log shows what a user sees.
    fn show(name: &str, text: &str) {
        for line in text.lines() {
            println!("  {name}| {line}");
        }
    }
}

fn parse_args() -> Result<(String, HashMap<String, PciAddress>), String> {
    let mut args = std::env::args().skip(1);
    let scenario = args.next().ok_or("usage: vfio_probe main|noiommu --ROLE PCI-ADDRESS ...")?;
    let mut roles = HashMap::new();
    while let Some(flag) = args.next() {
        let role = flag.strip_prefix("--").ok_or_else(|| format!("expected --ROLE, got {flag:?}"))?;
        let value = args.next().ok_or_else(|| format!("{flag} needs a PCI address"))?;
        let address = PciAddress::parse(&value).map_err(|e| e.to_string())?;
        roles.insert(role.to_owned(), address);
    }
    Ok((scenario, roles))
}

fn main() -> ExitCode {
    let (scenario, roles) = match parse_args() {
        Ok(parsed) => parsed,
        Err(why) => {
            eprintln!("vfio_probe: {why}");
            return ExitCode::from(2);
        }
    };
    let mut report = Report { ok: 0, failed: 0 };
    let started = Instant::now();
    let role = |name: &str| roles.get(name).copied().ok_or_else(|| format!("no --{name} address given"));
    match scenario.as_str() {
        "main" => main_scenario(&mut report, &role),
        "noiommu" => no_iommu_scenario(&mut report, &role),
        other => report.check("scenario", Err(format!("unknown scenario {other:?}"))),
    };
    println!(
        "probe summary: {} ok, {} FAIL ({} ms)",
        report.ok,
        report.failed,
        started.elapsed().as_millis()
    );
    if report.failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

type Role<'a> = &'a dyn Fn(&str) -> Result<PciAddress, String>;

fn main_scenario(report: &mut Report, role: Role<'_>) -> bool {
    let container = match VfioContainer::open() {
        Ok(c) => c,
        Err(e) => return report.check("container open", Err(e.to_string())),
    };
    report.check("container open", Ok("/dev/vfio/vfio, API version checked".to_owned()));

    let edu = match role("edu").and_then(|a| container.open_device(&a).map_err(|e| e.to_string())) {
        Ok(d) => d,
        Err(why) => return report.check("edu open (group viable, type1 set, device fd)", Err(why)),
    };
    report.check(
        "edu open (group viable, type1 set, device fd)",
        match edu.iommu() {
            IommuKind::Type1v2 | IommuKind::Type1 => Ok(format!("{} iommu {:?}", edu.address(), edu.iommu())),
            IommuKind::NoIommu => Err("the container fell back to no-IOMMU".to_owned()),
        },
    );
    report.check("edu bus master via config space", bus_master(&edu));
    edu_registers(report, &edu);
    edu_dma(report, &edu);
    edu_irq(report, &edu);

    let e1000e = role("e1000e").and_then(|a| container.open_device(&a).map_err(|e| e.to_string()));
    report.check(
        "e1000e STATUS",
        e1000e.as_ref().map_err(Clone::clone).and_then(|nic| {
            let status = nic.bar0().read32(E1000_STATUS);
            if status == u32::MAX {
                Err(format!("STATUS reads {status:#x}: BAR0 not decoded"))
            } else {
                Ok(format!("{} STATUS = {status:#010x}, link up: {}", nic.address(), status & 2 != 0))
            }
        }),
    );

    error_paths(report, &container, role);

    // Everything closes cleanly: the groups can be opened again only once their fds are gone.
    let edu_address = *edu.address();
    drop(e1000e);
    drop(edu);
    drop(container);
    report.check(
        "drop and reopen",
        VfioContainer::open()
            .and_then(|c| c.open_device(&edu_address))
            .map(|d| format!("{} reopened in a new container", d.address()))
            .map_err(|e| format!("after dropping everything: {e}")),
    )
}

fn bus_master(device: &VfioDevice) -> Result<String, String> {
    let mut cmd = [0u8; 2];
    device.read_config(PCI_COMMAND, &mut cmd).map_err(|e| format!("reading COMMAND: {e}"))?;
    let cmd = u16::from_le_bytes(cmd);
    if cmd & PCI_COMMAND_MASTER == 0 {
        return Err(format!("COMMAND = {cmd:#06x}: Bus Master is off"));
    }
    Ok(format!("COMMAND = {cmd:#06x}"))
}

fn edu_registers(report: &mut Report, edu: &VfioDevice) {
    let bar0 = edu.bar0();
    let id = bar0.read32(edu::ID);
    report.check(
        "edu BAR0 ID register",
        if id == edu::ID_VALUE { Ok(format!("{id:#010x}")) } else { Err(format!("read {id:#010x}")) },
    );
    let mut result = Ok(String::new());
    for value in [0x1234_5678u32, 0xdead_beef, 0] {
        bar0.write32(edu::LIVENESS, value);
        let back = bar0.read32(edu::LIVENESS);
        if back != !value {
            result = Err(format!("wrote {value:#x}, read {back:#x}, expected {:#x}", !value));
            break;
        }
    }
    report.check("edu BAR0 liveness register", result);
}

/// Runs one edu DMA transfer and waits for it (the engine clears the start bit when done).
fn edu_transfer(edu: &VfioDevice, src: u64, dst: u64, len: usize, cmd: u64) -> Result<(), String> {
    let bar = edu.map_bar(0).map_err(|e| e.to_string())?;
    bar.write64(edu::DMA_SRC, src);
    bar.write64(edu::DMA_DST, dst);
    bar.write64(edu::DMA_COUNT, len as u64);
    bar.write64(edu::DMA_CMD, cmd | edu::DMA_START);
    let deadline = Instant::now() + Duration::from_secs(2);
    while bar.read64(edu::DMA_CMD) & edu::DMA_START != 0 {
        if Instant::now() > deadline {
            return Err("the DMA did not complete within 2 s".to_owned());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(u8::try_from(i * 7 % 251).unwrap_or(0))).collect()
}

fn edu_dma(report: &mut Report, edu: &VfioDevice) {
    let dma = edu.dma();
    // The pool, mapped the way the driver maps its packet buffers (`Device::map_pool`).
    let pool = match Pool::builder(16).hugepages(HugePages::Never).build() {
        Ok(p) => p,
        Err(e) => {
            report.check("pool region mapped for DMA", Err(format!("building the pool: {e}")));
            return;
        }
    };
    let region = pool.region();
    let mapping = match platform::map_pool_region(&*dma, Backend::Vfio, &pool) {
        Ok(m) => m,
        Err(e) => {
            report.check("pool region mapped for DMA", Err(e.to_string()));
            return;
        }
    };
    let Some(pool_iova) = mapping.iova(0) else {
        report.check("pool region mapped for DMA", Err("the mapping has no IOVA at 0".to_owned()));
        return;
    };
    report.check(
        "pool region mapped for DMA",
        Ok(format!("{} bytes at IOVA {pool_iova}, {}-byte pages", mapping.len(), region.page_size())),
    );
    if region.len() < DMA_LEN {
        report.check("edu DMA round trip", Err(format!("the pool region has only {} bytes", region.len())));
        return;
    }
    // SAFETY: the pool's region is `region.len()` >= DMA_LEN bytes of memory owned by `pool`, which
    // outlives this slice; no packet of the pool is in use, so nothing else reads or writes it now (the
    // device only touches it during the transfers below, while this code waits).
    let pool_bytes = unsafe { std::slice::from_raw_parts_mut(region.as_ptr(), XFER) };

    // RAM (pool) -> edu buffer -> RAM (a ring-style allocation): the bytes come back.
    let out = pattern(0x5a, XFER);
    pool_bytes.copy_from_slice(&out);
    let result = dma.alloc(DMA_LEN).map_err(|e| e.to_string()).and_then(|ring| {
        let ring_iova = ring.iova(0).ok_or("the allocation has no IOVA")?;
        edu_transfer(edu, pool_iova.0, edu::BUFFER, XFER, 0)?;
        edu_transfer(edu, edu::BUFFER, ring_iova.0, XFER, edu::DMA_TO_RAM)?;
        let back: Vec<u8> =
            (0..XFER / 8).flat_map(|i| ring.load_u64(i * 8, Ordering::Acquire).to_le_bytes()).collect();
        match back.iter().zip(&out).position(|(a, b)| a != b) {
            None => Ok(format!("{XFER} bytes pool IOVA {pool_iova} -> edu -> ring IOVA {ring_iova}")),
            Some(i) => Err(format!("byte {i} came back {:#04x}, sent {:#04x}", back[i], out[i])),
        }
    });
    report.check("edu DMA round trip", result);

    // edu -> pool while mapped: the pool sees the bytes.
    let mid = pattern(0xa5, XFER);
    let result = (|| {
        // Fill the edu buffer with `mid` from a scratch allocation, then copy it into the pool.
        let scratch = dma.alloc(DMA_LEN).map_err(|e| e.to_string())?;
        for (i, chunk) in mid.chunks(8).enumerate() {
            let word = u64::from_le_bytes(chunk.try_into().map_err(|_| "chunk")?);
            scratch.store_u64(i * 8, word, Ordering::Release);
        }
        let scratch_iova = scratch.iova(0).ok_or("no IOVA")?;
        edu_transfer(edu, scratch_iova.0, edu::BUFFER, XFER, 0)?;
        edu_transfer(edu, edu::BUFFER, pool_iova.0, XFER, edu::DMA_TO_RAM)?;
        if pool_bytes[..] == mid[..] {
            Ok(String::new())
        } else {
            Err("the pool did not receive the bytes".to_owned())
        }
    })();
    report.check("edu DMA into the mapped pool", result);

    // Unmap, then DMA to the same IOVA again: the IOMMU must block it and the pool keep its bytes.
    drop(mapping);
    let before = pool_bytes.to_vec();
    let result = (|| {
        let scratch = dma.alloc(DMA_LEN).map_err(|e| e.to_string())?;
        let scratch_iova = scratch.iova(0).ok_or("no IOVA")?;
        // Zeroes into the edu buffer, then the edu buffer towards the unmapped pool.
        edu_transfer(edu, scratch_iova.0, edu::BUFFER, XFER, 0)?;
        edu_transfer(edu, edu::BUFFER, pool_iova.0, XFER, edu::DMA_TO_RAM)?;
        if pool_bytes[..] == before[..] {
            Ok("DMA to the unmapped IOVA did not reach memory".to_owned())
        } else {
            Err("DMA reached memory after VFIO_IOMMU_UNMAP_DMA".to_owned())
        }
    })();
    report.check("unmap blocks DMA (IOMMU translation is real)", result);
    drop(pool);
}

fn edu_irq(report: &mut Report, edu: &VfioDevice) {
    let info = edu.irq_info(IrqKind::Msi);
    report.check(
        "edu MSI irq info",
        match &info {
            Ok(i) if i.count >= 1 && i.eventfd => Ok(format!("{} vector(s), eventfd", i.count)),
            Ok(i) => Err(format!("{i:?}")),
            Err(e) => Err(e.to_string()),
        },
    );
    let irq = match edu.enable_irqs(IrqKind::Msi, 1) {
        Ok(irq) => irq,
        Err(e) => {
            report.check("edu MSI enabled with an eventfd", Err(e.to_string()));
            return;
        }
    };
    report.check("edu MSI enabled with an eventfd", Ok(format!("{irq:?}")));
    let bar0 = edu.bar0();

    // A software-raised interrupt.
    bar0.write32(edu::IRQ_RAISE, 0x1);
    let fired = irq.wait(0, Duration::from_secs(2));
    let status = bar0.read32(edu::IRQ_STATUS);
    bar0.write32(edu::IRQ_ACK, status);
    report.check(
        "edu MSI eventfd fires (raised interrupt)",
        match fired {
            Ok(0) => Err(format!("no event within 2 s (interrupt status {status:#x})")),
            Ok(n) => Ok(format!("{n} event(s), interrupt status {status:#x}")),
            Err(e) => Err(e.to_string()),
        },
    );

    // The DMA engine's completion interrupt: what a driver sleeps on instead of polling.
    let result = edu.dma().alloc(DMA_LEN).map_err(|e| e.to_string()).and_then(|buf| {
        let iova = buf.iova(0).ok_or("no IOVA")?;
        let bar = edu.map_bar(0).map_err(|e| e.to_string())?;
        bar.write64(edu::DMA_SRC, iova.0);
        bar.write64(edu::DMA_DST, edu::BUFFER);
        bar.write64(edu::DMA_COUNT, XFER as u64);
        bar.write64(edu::DMA_CMD, edu::DMA_START | edu::DMA_IRQ);
        let n = irq.wait(0, Duration::from_secs(2)).map_err(|e| e.to_string())?;
        let status = bar0.read32(edu::IRQ_STATUS);
        bar0.write32(edu::IRQ_ACK, status);
        if n == 0 {
            Err(format!("no event within 2 s (interrupt status {status:#x})"))
        } else if status & edu::DMA_IRQ_BIT == 0 {
            Err(format!("an event, but the interrupt status is {status:#x}"))
        } else {
            Ok(format!("interrupt status {status:#x}"))
        }
    });
    report.check("edu MSI eventfd fires (DMA completion)", result);

    // Dropping the IrqEventFd disables MSI (the kernel releases the vectors): enabling again works,
    // and the new eventfd holds no stale events.
    drop(irq);
    let result =
        edu.enable_irqs(IrqKind::Msi, 1).map_err(|e| format!("re-enabling: {e}")).and_then(|again| {
            let stale = again.wait(0, Duration::from_millis(100)).map_err(|e| e.to_string())?;
            if stale == 0 {
                Ok("re-enabled without stale events".to_owned())
            } else {
                Err(format!("{stale} stale event(s)"))
            }
        });
    report.check("edu MSI disabled on drop", result);
}

fn error_paths(report: &mut Report, container: &Arc<VfioContainer>, role: Role<'_>) {
    // A device that is not bound to vfio-pci.
    let result = role("unbound").and_then(|a| match container.open_device(&a) {
        Err(e @ OpenError::NotBoundToVfio { .. }) => {
            let text = e.to_string();
            Report::show("not bound", &text);
            if text.contains("not vfio-pci") && text.contains("driver_override") {
                Ok(String::new())
            } else {
                Err(format!("the message does not say how to bind: {text}"))
            }
        }
        Err(e) => Err(format!("expected NotBoundToVfio, got: {e}")),
        Ok(d) => Err(format!("{} opened although it is not bound to vfio-pci", d.address())),
    });
    report.check("error: device not bound to vfio-pci", result);

    // A device bound to vfio-pci whose group holds a device owned by a kernel driver.
    let result = role("not-viable").and_then(|a| match container.open_device(&a) {
        Err(e @ OpenError::GroupNotViable { .. }) => {
            let text = e.to_string();
            Report::show("not viable", &text);
            let OpenError::GroupNotViable { peers, .. } = &e else { unreachable!() };
            let blockers: Vec<_> = peers.iter().filter(|p| !p.allows_vfio()).collect();
            if blockers.is_empty() {
                Err(format!("no blocking peer listed: {peers:?}"))
            } else if !text.contains("blocks the group") {
                Err(format!("the message does not name the blocker: {text}"))
            } else {
                Ok(format!(
                    "blocked by {}",
                    blockers
                        .iter()
                        .map(|p| format!("{} ({})", p.address, p.driver.as_deref().unwrap_or("-")))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
        Err(e) => Err(format!("expected GroupNotViable, got: {e}")),
        Ok(d) => Err(format!("{} opened although its group is not viable", d.address())),
    });
    report.check("error: group not viable", result);

    // The driver's own entry point refuses a device that is not an 82599, before touching VFIO.
    let result = role("e1000e").and_then(|a| match platform::open(&a.to_string()) {
        Err(e @ OpenError::NotAn82599 { .. }) => {
            Report::show("not an 82599", &e.to_string());
            Ok(String::new())
        }
        Err(e) => Err(format!("expected NotAn82599, got: {e}")),
        Ok(d) => Err(format!("{d:?} opened as an 82599")),
    });
    report.check("error: platform::open of a non-82599", result);
}

fn no_iommu_scenario(report: &mut Report, role: Role<'_>) -> bool {
    let container = match VfioContainer::open() {
        Ok(c) => c,
        Err(e) => return report.check("container open", Err(e.to_string())),
    };
    report.check("container open", Ok(String::new()));
    let result = role("edu").and_then(|a| match container.open_device(&a) {
        Err(e @ OpenError::NoIommuGroup { .. }) => {
            let text = e.to_string();
            Report::show("no iommu", &text);
            if text.contains("intel_iommu=on") {
                Ok(String::new())
            } else {
                Err(format!("the message does not say how to turn the IOMMU on: {text}"))
            }
        }
        Err(e) => Err(format!("expected NoIommuGroup, got: {e}")),
        Ok(d) => Err(format!("{} opened without an IOMMU", d.address())),
    });
    report.check("error: no IOMMU", result)
}
