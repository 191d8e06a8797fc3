//! What the driver needs from a device: register access ([`Mmio`]) and memory the device can reach by
//! DMA ([`DmaSpace`], [`DmaMemory`], [`DmaMapping`]).
//!
//! Two implementations of each exist: the real thing (BAR0 mapped through VFIO or sysfs, memory
//! mapped into the IOMMU or pinned with known physical addresses; [`crate::platform::vfio`],
//! [`crate::platform::noiommu`]) and the behavioural model of the 82599 ([`crate::sim`]). The driver
//! ([`crate::driver`]) is written once against these traits, so every line of it runs in the tests.
//!
//! # Descriptor memory protocol
//!
//! Descriptor rings live in [`DmaMemory`]. Both sides access a descriptor as two little-endian 64-bit
//! words through [`DmaMemory::load_u64`] and [`DmaMemory::store_u64`], which are atomic:
//! * the device writes a write-back descriptor's first word, then its second word (the one holding the
//!   status bits, DD among them) with `Release`; the driver loads the second word with `Acquire`, and
//!   only then reads the first word and the packet data. That is the order real hardware gives
//!   (the 82599 writes the status last), expressed so that the model on another thread is race-free.
//! * the driver writes read-format descriptors with `Relaxed` stores and publishes them with one
//!   `Release` fence before the tail register write (as Linux's `wmb()` before the tail); the device reads them after it
//!   sees the tail.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// An address as the device sees it: what goes into descriptors and ring base registers. With an
/// IOMMU (VFIO) it is the process's virtual address; without one it is a physical address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Iova(pub u64);

impl Iova {
    /// The low 32 bits, for a `*BAL` register.
    #[must_use]
    pub fn low(self) -> u32 {
        (self.0 & 0xFFFF_FFFF) as u32
    }

    /// The high 32 bits, for a `*BAH` register.
    #[must_use]
    pub fn high(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

impl fmt::Display for Iova {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Register access to a device's BAR0.
///
/// Offsets are byte offsets of 32-bit registers (the datasheet's). Both methods take `&self`: a BAR is
/// shared by every queue of a device, and each register has one writer by construction (the queue that
/// owns it, or the control path).
pub trait Mmio: Send + Sync {
    /// The BAR's length in bytes.
    fn bar_len(&self) -> usize;

    /// Reads the register at `offset`.
    ///
    /// # Panics
    ///
    /// When `offset` is not 4-byte aligned or `offset + 4 > bar_len()`: register offsets are the driver's
    /// constants, so this is a driver bug, never something a device or the wire can cause.
    fn read32(&self, offset: u32) -> u32;

    /// Writes `value` to the register at `offset`.
    ///
    /// # Panics
    ///
    /// As [`Mmio::read32`].
    fn write32(&self, offset: u32, value: u32);

    /// Sets `bits` in the register at `offset` (read, or, write).
    fn set_bits(&self, offset: u32, bits: u32) {
        self.write32(offset, self.read32(offset) | bits);
    }

    /// Clears `bits` in the register at `offset` (read, and-not, write).
    fn clear_bits(&self, offset: u32, bits: u32) {
        self.write32(offset, self.read32(offset) & !bits);
    }
}

/// Panics unless a 32-bit access at `offset` fits a BAR of `len` bytes: the shared bounds check of
/// every [`Mmio`] implementation.
///
/// # Panics
///
/// As [`Mmio::read32`].
#[inline]
pub fn check_register(offset: u32, len: usize) -> usize {
    let off = offset as usize;
    assert!(
        offset.is_multiple_of(4) && off.checked_add(4).is_some_and(|end| end <= len),
        "register offset {offset:#x} is outside a BAR of {len:#x} bytes or misaligned"
    );
    off
}

/// How addresses inside a DMA-reachable range translate to [`Iova`]s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Translation {
    /// The range is contiguous for the device too: `iova(offset) = base + offset` (VFIO, where the
    /// IOVA is the virtual address; the model).
    Linear {
        /// The IOVA of the range's first byte.
        base: Iova,
    },
    /// The range is made of pages of `1 << page_shift` bytes, each physically contiguous, with the
    /// given device addresses (the no-IOMMU fallback: hugepages and `/proc/self/pagemap`).
    Pages {
        /// log2 of the page size.
        page_shift: u32,
        /// The IOVA of each page, in order.
        pages: Box<[Iova]>,
    },
}

impl Translation {
    /// The IOVA of the byte at `offset` into the range; `None` when `offset` is past the last page.
    #[must_use]
    #[inline]
    pub fn iova(&self, offset: usize) -> Option<Iova> {
        match self {
            Self::Linear { base } => Some(Iova(base.0.wrapping_add(offset as u64))),
            Self::Pages { page_shift, pages } => {
                let page = pages.get(offset >> page_shift)?;
                let mask = (1usize << page_shift) - 1;
                Some(Iova(page.0 + (offset & mask) as u64))
            }
        }
    }
}

/// Something dropped when a DMA range goes away: it undoes the mapping (`VFIO_IOMMU_UNMAP_DMA`, the
/// model forgetting the range) and frees what the platform allocated.
pub trait DmaGuard: Send + Sync + fmt::Debug {}

/// Zeroed memory the device can read and write by DMA: descriptor rings. Owned; unmapped and freed on
/// drop.
#[derive(Debug)]
pub struct DmaMemory {
    ptr: NonNull<u8>,
    len: usize,
    /// `len / 16`: how many ring descriptors fit.
    descriptors: usize,
    translation: Translation,
    // Declared last: dropped after the fields above stop being used.
    _guard: Box<dyn DmaGuard>,
}

// SAFETY: `DmaMemory` owns its range (the guard keeps it mapped); the raw pointer has no thread
// affinity, and shared access only goes through atomic word operations.
unsafe impl Send for DmaMemory {}
// SAFETY: as above: `&DmaMemory` allows only atomic loads and stores.
unsafe impl Sync for DmaMemory {}

impl DmaMemory {
    /// Wraps a range a [`DmaSpace`] made.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` is readable and writable memory, 8-byte aligned, zeroed, that no one else
    /// accesses except the device through `translation`, and that stays valid until `guard` is dropped.
    pub unsafe fn from_raw_parts(
        ptr: NonNull<u8>,
        len: usize,
        translation: Translation,
        guard: Box<dyn DmaGuard>,
    ) -> Self {
        Self { ptr, len, descriptors: len / DESCRIPTOR_LEN, translation, _guard: guard }
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never, for memory a [`DmaSpace`] allocated).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte, for the device model and for debugging.
    #[must_use]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The device address of the byte at `offset`, for ring base registers.
    #[must_use]
    pub fn iova(&self, offset: usize) -> Option<Iova> {
        if offset >= self.len {
            return None;
        }
        self.translation.iova(offset)
    }

    /// How this range translates to device addresses.
    #[must_use]
    pub fn translation(&self) -> &Translation {
        &self.translation
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset.is_multiple_of(8) && offset.checked_add(8).is_some_and(|end| end <= self.len),
            "DMA word offset {offset:#x} is outside {} bytes or misaligned",
            self.len
        );
        // SAFETY: `offset + 8 <= len` (checked above), so the word is inside the range.
        let ptr = unsafe { self.ptr.as_ptr().add(offset) }.cast::<u64>();
        // SAFETY: in bounds and 8-byte aligned (checked above; the base is 8-byte aligned by the
        // constructor's contract), valid while `self` lives, and every access to this memory from this
        // side goes through atomic operations, so a shared atomic reference is sound.
        unsafe { AtomicU64::from_ptr(ptr) }
    }

    /// Loads the little-endian 64-bit word at `offset` (8-byte aligned).
    ///
    /// # Panics
    ///
    /// When the word is out of bounds or misaligned (a driver bug: offsets are ring index * 16 + 0/8).
    #[must_use]
    #[inline]
    pub fn load_u64(&self, offset: usize, order: Ordering) -> u64 {
        u64::from_le(self.word(offset).load(order))
    }

    /// Stores `value` little-endian at `offset` (8-byte aligned).
    ///
    /// # Panics
    ///
    /// As [`DmaMemory::load_u64`].
    #[inline]
    pub fn store_u64(&self, offset: usize, value: u64, order: Ordering) {
        self.word(offset).store(value.to_le(), order);
    }

    /// Descriptor `index` of the ring this memory holds (bytes `16 * index..16 * index + 16`);
    /// `None` past the end. One bounds check for the descriptor's two words: the driver's data path.
    #[must_use]
    #[inline]
    pub fn descriptor(&self, index: usize) -> Option<&Descriptor> {
        if index >= self.descriptors {
            return None;
        }
        // SAFETY: `index * 16 + 16 <= len` (checked above; no overflow, the product is below `len`),
        // so the descriptor is inside the range.
        let ptr = unsafe { self.ptr.as_ptr().add(index * DESCRIPTOR_LEN) };
        // SAFETY: in bounds, 8-byte aligned (the base is, by the constructor's contract, and 16 is a
        // multiple of 8), valid while `self` lives, and every access to this memory from this side
        // is atomic, so a shared reference to two atomic words is sound (`Descriptor` is
        // `repr(transparent)` over `[AtomicU64; 2]`).
        Some(unsafe { &*ptr.cast::<Descriptor>() })
    }

    /// Every descriptor of the ring this memory holds: `len / 16` of them.
    #[must_use]
    #[inline]
    pub fn descriptors(&self) -> &[Descriptor] {
        // SAFETY: `descriptors * 16 <= len` bytes from the base, which is 8-byte aligned (the
        // constructor's contract), valid while `self` lives, and accessed only atomically from this
        // side, so shared references to `Descriptor`s (`repr(transparent)` over `[AtomicU64; 2]`) are
        // sound, as in `descriptor`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<Descriptor>(), self.descriptors) }
    }
}

/// Bytes per descriptor, both directions (§7.1.6, §7.2.3).
const DESCRIPTOR_LEN: usize = 16;

/// One 16-byte ring descriptor in [`DmaMemory`]: two little-endian 64-bit words, accessed atomically
/// per the descriptor memory protocol of the [module documentation](self).
#[repr(transparent)]
#[derive(Debug)]
pub struct Descriptor([AtomicU64; 2]);

impl Descriptor {
    /// Loads word 0 (the buffer address in read format).
    #[must_use]
    #[inline]
    pub fn load0(&self, order: Ordering) -> u64 {
        u64::from_le(self.0[0].load(order))
    }

    /// Loads word 1 (the status word in write-back format).
    #[must_use]
    #[inline]
    pub fn load1(&self, order: Ordering) -> u64 {
        u64::from_le(self.0[1].load(order))
    }

    /// Stores word 0.
    #[inline]
    pub fn store0(&self, value: u64, order: Ordering) {
        self.0[0].store(value.to_le(), order);
    }

    /// Stores word 1.
    #[inline]
    pub fn store1(&self, value: u64, order: Ordering) {
        self.0[1].store(value.to_le(), order);
    }
}

/// A range of memory the caller owns (the packet buffer pool's region), made reachable by the device
/// for as long as this value lives.
#[derive(Debug)]
pub struct DmaMapping {
    start: usize,
    len: usize,
    translation: Translation,
    _guard: Box<dyn DmaGuard>,
}

impl DmaMapping {
    /// Wraps a mapping a [`DmaSpace`] made of `start..start + len` (virtual addresses).
    #[must_use]
    pub fn new(start: usize, len: usize, translation: Translation, guard: Box<dyn DmaGuard>) -> Self {
        Self { start, len, translation, _guard: guard }
    }

    /// The first mapped virtual address.
    #[must_use]
    pub fn start(&self) -> usize {
        self.start
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address of the byte at `offset` into the range.
    #[must_use]
    #[inline]
    pub fn iova(&self, offset: usize) -> Option<Iova> {
        if offset >= self.len {
            return None;
        }
        self.translation.iova(offset)
    }

    /// How this range translates to device addresses.
    #[must_use]
    pub fn translation(&self) -> &Translation {
        &self.translation
    }
}

/// Why DMA memory could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum DmaError {
    /// Allocating the memory failed.
    #[error("could not allocate {len} bytes of DMA memory: {source}")]
    Alloc {
        /// Bytes asked for.
        len: usize,
        /// The OS error.
        source: std::io::Error,
    },
    /// Mapping the range for the device failed (IOMMU, pagemap).
    #[error("could not map {len} bytes at {start:#x} for DMA: {why}")]
    Map {
        /// First virtual address.
        start: usize,
        /// Length.
        len: usize,
        /// What went wrong and, where we know, how to fix it.
        why: String,
    },
}

/// Where DMA memory comes from: the IOMMU container, the pinned-hugepage fallback, or the model.
pub trait DmaSpace: Send + Sync {
    /// `len` bytes of zeroed memory, 4096-byte aligned, reachable by the device (descriptor rings).
    ///
    /// # Errors
    ///
    /// [`DmaError`] when the memory cannot be allocated or mapped.
    fn alloc(&self, len: usize) -> Result<DmaMemory, DmaError>;

    /// Makes `start..start + len` (memory the caller keeps alive and mapped for longer than the
    /// returned value: the pool's region) reachable by the device.
    ///
    /// # Errors
    ///
    /// [`DmaError::Map`] when the range cannot be mapped (not hugepage-backed on the no-IOMMU fallback,
    /// the IOMMU refused it).
    fn map(&self, start: usize, len: usize) -> Result<DmaMapping, DmaError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translations() {
        let lin = Translation::Linear { base: Iova(0x1000) };
        assert_eq!(lin.iova(0x10), Some(Iova(0x1010)));
        let pages =
            Translation::Pages { page_shift: 21, pages: vec![Iova(0x4000_0000), Iova(0x1000_0000)].into() };
        assert_eq!(pages.iova(5), Some(Iova(0x4000_0005)));
        assert_eq!(pages.iova((1 << 21) + 7), Some(Iova(0x1000_0007)));
        assert_eq!(pages.iova(2 << 21), None);
        assert_eq!(Iova(0x1_2345_6789).low(), 0x2345_6789);
        assert_eq!(Iova(0x1_2345_6789).high(), 1);
    }

    #[test]
    #[should_panic(expected = "outside a BAR")]
    fn register_bounds() {
        let _ = check_register(0x2_0000, 0x2_0000);
    }
}
