//! The no-IOMMU backend: a device driven through sysfs ([`SysfsDevice`]: BAR0 through `resource0`, bus
//! mastering through `config`), and DMA memory from 2 MiB hugepages with physical addresses from
//! `/proc/self/pagemap` ([`HugepageDma`]), which VFIO's `enable_unsafe_noiommu_mode` reuses.
//!
//! # The fallback is unsafe for production
//!
//! Without an IOMMU the NIC can read and write any physical memory: a wrong descriptor (a driver bug, a
//! stale address after the process died) corrupts whatever the kernel put there. It exists for
//! development machines without an IOMMU; [`OpenOptions::allow_unsafe_fallback`](super::OpenOptions::allow_unsafe_fallback)
//! must ask for it, and it logs a warning every time it is used.

use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use super::bar::MappedBar;
use super::error::{OpenError, io_error, open_rw};
use super::pagemap::{self, Pagemap, PagemapError};
use super::sysfs::{PciFunction, SysfsRoot};
use crate::hw::{DmaError, DmaGuard, DmaMapping, DmaMemory, DmaSpace, Iova, Mmio, Translation};

/// The size of the hugepages the fallback uses.
pub const HUGEPAGE_SIZE: usize = 2 << 20;
const HUGEPAGE_SHIFT: u32 = 21;

/// A device driven without an IOMMU through sysfs: BAR0 from `resource0`, DMA from hugepages with
/// physical addresses. See the module docs for why this is unsafe for production.
#[derive(Debug)]
pub struct SysfsDevice {
    function: PciFunction,
    bar0: Arc<MappedBar>,
    dma: Arc<HugepageDma>,
}

impl SysfsDevice {
    /// Maps BAR0 of `function` and enables bus mastering, after checking that no kernel driver owns
    /// it (unbound, or `uio_pci_generic`), that 2 MiB hugepages are reserved, and that this process can
    /// read physical addresses.
    ///
    /// Logs a warning: without an IOMMU the device can write anywhere in memory.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotBoundToVfio`] when a kernel driver owns the device (with the commands that
    /// unbind it), [`OpenError::NoHugepages`], [`OpenError::Pagemap`], [`OpenError::PermissionDenied`],
    /// [`OpenError::Bar`], [`OpenError::Io`].
    pub fn open(function: PciFunction) -> Result<Self, OpenError> {
        let address = *function.address();
        let driver = function.driver()?;
        if let Some(d) = driver.as_deref().filter(|d| *d != "uio_pci_generic") {
            return Err(OpenError::NotBoundToVfio {
                address,
                driver: Some(d.to_owned()),
                commands: function.root().bind_commands(&address, Some(d)),
                fallback_allowed: true,
            });
        }
        check_physical_dma_ready(function.root())?;
        tracing::warn!(
            pci = %address,
            "opening {address} WITHOUT an IOMMU (sysfs resource0 + physical addresses): the NIC can \
             read and write any memory of this machine; unsafe for production, use vfio-pci with an \
             IOMMU (scripts/vfio-bind.sh)"
        );
        let path = function.dir().join("resource0");
        let file = open_rw(&path)?;
        let len = file.metadata().map_err(io_error(&path))?.len();
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l >= 4)
            .ok_or_else(|| OpenError::Bar { address, why: format!("{} has size {len}", path.display()) })?;
        let bar0 = MappedBar::map_file(&file, 0, len)
            .map_err(|e| OpenError::Bar { address, why: format!("mmap of {}: {e}", path.display()) })?;
        let old = function.enable_bus_master()?;
        tracing::debug!(pci = %address, command = format_args!("{old:#06x}"), "bus mastering enabled via sysfs config");
        Ok(Self { function, bar0: Arc::new(bar0), dma: Arc::new(HugepageDma::new()) })
    }

    /// The PCI function.
    #[must_use]
    pub fn function(&self) -> &PciFunction {
        &self.function
    }

    /// BAR0.
    #[must_use]
    pub fn bar0(&self) -> Arc<dyn Mmio> {
        self.bar0.clone()
    }

    /// DMA memory: hugepages with physical addresses.
    #[must_use]
    pub fn dma(&self) -> Arc<dyn DmaSpace> {
        self.dma.clone()
    }
}

/// Checks what DMA without an IOMMU needs: free 2 MiB hugepages under `root`, and real page frame
/// numbers in `/proc/self/pagemap`.
///
/// # Errors
///
/// [`OpenError::NoHugepages`] with the command that reserves them; [`OpenError::Pagemap`].
pub fn check_physical_dma_ready(root: &SysfsRoot) -> Result<(), OpenError> {
    match root.free_hugepages() {
        Some(n) if n > 0 => {}
        free => {
            return Err(OpenError::NoHugepages {
                free: free.unwrap_or(0),
                command: root.reserve_hugepages_command(512),
            });
        }
    }
    probe_pagemap()
}

/// Checks that this process reads real page frame numbers from `/proc/self/pagemap`.
///
/// # Errors
///
/// [`OpenError::Pagemap`], notably [`PagemapError::NoPermission`] when not root.
pub fn probe_pagemap() -> Result<(), OpenError> {
    let probe = Box::new(0x5Au64);
    let addr = std::ptr::from_ref::<u64>(&probe) as usize;
    // The heap word was just written, so its page is present.
    std::hint::black_box(&probe);
    Pagemap::open()?.translate(addr)?;
    Ok(())
}

/// DMA memory for a device without an IOMMU: 2 MiB hugepages, each physically contiguous, addressed
/// by their physical addresses from `/proc/self/pagemap` ([`Translation::Pages`]).
///
/// Refuses ranges that are not hugepage-backed: 4 KiB pages that are adjacent in virtual memory are
/// scattered in physical memory, so a packet buffer crossing a page boundary would be written partly
/// into someone else's memory.
#[derive(Debug, Default)]
pub struct HugepageDma {
    _private: (),
}

impl HugepageDma {
    /// A DMA space; logs nothing (the caller that chose the fallback warns).
    #[must_use]
    pub fn new() -> Self {
        Self { _private: () }
    }

    fn translate_pages(start: usize, len: usize) -> Result<Translation, PagemapError> {
        let pagemap = Pagemap::open()?;
        let pages = (start..start + len)
            .step_by(HUGEPAGE_SIZE)
            .map(|va| pagemap.translate(va).map(Iova::from))
            .collect::<Result<Box<[Iova]>, _>>()?;
        Ok(Translation::Pages { page_shift: HUGEPAGE_SHIFT, pages })
    }
}

/// How to fix a lack of hugepages, for error messages.
fn hugepage_hint() -> String {
    format!(
        "reserve 2 MiB hugepages as root: `{}` (or scripts/vfio-bind.sh --hugepages 512)",
        SysfsRoot::default().reserve_hugepages_command(512)
    )
}

/// Hugepages this process mapped; unmapped on drop.
#[derive(Debug)]
struct HugeAlloc {
    base: usize,
    len: usize,
}

impl DmaGuard for HugeAlloc {}

impl Drop for HugeAlloc {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping `HugepageDma::alloc` made; the `DmaMemory` that
        // owns this guard drops it last, after its last use of the memory.
        let r = unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        if r != 0 {
            tracing::error!(error = %io::Error::last_os_error(), "munmap of hugepage DMA memory failed");
        }
    }
}

/// Nothing to undo: the caller owns the memory and no IOMMU mapping exists.
#[derive(Debug)]
struct NoUnmap;

impl DmaGuard for NoUnmap {}

impl DmaSpace for HugepageDma {
    fn alloc(&self, len: usize) -> Result<DmaMemory, DmaError> {
        let len = len.max(1).next_multiple_of(HUGEPAGE_SIZE);
        let flags = libc::MAP_PRIVATE
            | libc::MAP_ANONYMOUS
            | libc::MAP_HUGETLB
            | libc::MAP_HUGE_2MB
            | libc::MAP_POPULATE;
        // SAFETY: a new anonymous mapping at an address of the kernel's choosing touches no existing
        // memory; failure is MAP_FAILED (checked below).
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0)
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(DmaError::Alloc {
                len,
                source: io::Error::new(
                    e.kind(),
                    format!("2 MiB hugepage mmap failed ({e}); {}", hugepage_hint()),
                ),
            });
        }
        let guard = HugeAlloc { base: p as usize, len };
        let Some(ptr) = NonNull::new(p.cast::<u8>()) else {
            return Err(DmaError::Alloc { len, source: io::Error::other("mmap returned null") });
        };
        // The device's writes must not be copied into a child on fork (DPDK does the same).
        // SAFETY: madvise on a range this function just mapped; it changes no memory contents.
        if unsafe { libc::madvise(p, len, libc::MADV_DONTFORK) } != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "MADV_DONTFORK on DMA memory failed");
        }
        let translation = Self::translate_pages(guard.base, len).map_err(|e| DmaError::Map {
            start: guard.base,
            len,
            why: e.to_string(),
        })?;
        // SAFETY: the range is a fresh private anonymous mapping (zeroed, 2 MiB aligned), owned by the
        // guard that goes into the `DmaMemory`; only the device (through `translation`) shares it.
        Ok(unsafe { DmaMemory::from_raw_parts(ptr, len, translation, Box::new(guard)) })
    }

    fn map(&self, start: usize, len: usize) -> Result<DmaMapping, DmaError> {
        let refuse = |why: String| DmaError::Map { start, len, why };
        if len == 0 {
            return Err(refuse("empty range".to_owned()));
        }
        if !start.is_multiple_of(HUGEPAGE_SIZE) || !len.is_multiple_of(HUGEPAGE_SIZE) {
            return Err(refuse(format!(
                "the no-IOMMU fallback maps whole 2 MiB hugepages: start and length must be multiples of \
                 {HUGEPAGE_SIZE:#x} (build the pool with HugePages::Require; {})",
                hugepage_hint()
            )));
        }
        let vmas = pagemap::own_mappings().map_err(|e| refuse(e.to_string()))?;
        match pagemap::min_page_size(&vmas, start, len) {
            None => return Err(refuse("the range is not (entirely) mapped".to_owned())),
            Some(page) if page < HUGEPAGE_SIZE => {
                return Err(refuse(format!(
                    "the range is backed by {page}-byte pages, not hugepages: without an IOMMU the device \
                     needs physically contiguous memory and only a hugepage is; build the pool with \
                     HugePages::Require and {}",
                    hugepage_hint()
                )));
            }
            Some(_) => {}
        }
        let translation = Self::translate_pages(start, len).map_err(|e| refuse(e.to_string()))?;
        Ok(DmaMapping::new(start, len, translation, Box::new(NoUnmap)))
    }
}
