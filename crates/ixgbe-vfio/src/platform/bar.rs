//! A PCI BAR mapped into the process: [`MappedBar`], the [`Mmio`] of real hardware.
//!
//! Both platform layers end here: VFIO maps BAR0 from the device file descriptor at the offset that
//! `VFIO_DEVICE_GET_REGION_INFO` reports ([`super::vfio`]), the no-IOMMU fallback maps sysfs
//! `resource0` at offset 0 ([`super::noiommu`]). Every access is a volatile 32-bit load or store (device
//! registers have side effects: the compiler must neither merge, elide nor reorder them), bounds-checked
//! by [`check_register`], and the registers are little-endian (82599 datasheet §8.1).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use crate::hw::{Mmio, check_register};

/// A BAR (or memory standing in for one) mapped shared and read-write; unmapped on drop.
///
/// The mapping stays valid after the file it came from is closed (the kernel keeps the file alive for
/// the mapping), so a `MappedBar` is self-contained: hand it out as `Arc<dyn Mmio>`.
#[derive(Debug)]
pub struct MappedBar {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value, has no thread affinity, and is only ever accessed through
// volatile reads and writes of whole aligned registers (`&self` methods of `Mmio`), never through
// references; concurrent register accesses are the device's business (see the `Mmio` contract).
unsafe impl Send for MappedBar {}
// SAFETY: as above.
unsafe impl Sync for MappedBar {}

impl MappedBar {
    /// Maps `len` bytes of `file` from `offset`, shared and read-write: a VFIO device region or a sysfs
    /// `resource0` file.
    ///
    /// Register accesses are raw volatile accesses, never Rust references, so a file that shrinks
    /// under the mapping makes an access raise `SIGBUS` rather than read freed memory.
    ///
    /// # Errors
    ///
    /// The `mmap(2)` error, or `InvalidInput` for an empty length or an offset that does not fit
    /// `off_t`.
    pub fn map_file(file: &File, offset: u64, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot map an empty BAR"));
        }
        let off = libc::off_t::try_from(offset).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("BAR offset {offset:#x} does not fit off_t"))
        })?;
        // SAFETY: a new shared mapping at an address of the kernel's choosing touches no existing
        // memory; the fd is open for the duration of the call; failure is MAP_FAILED (checked below).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                off,
            )
        };
        Self::from_mmap_result(p, len)
    }

    /// Anonymous zeroed memory of `len` bytes standing in for a BAR: for tests of code written against
    /// [`Mmio`] that want the real volatile accessors, and for dry runs without a device.
    ///
    /// # Errors
    ///
    /// The `mmap(2)` error, or `InvalidInput` for an empty length.
    pub fn anonymous(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot map an empty BAR"));
        }
        // SAFETY: a new anonymous mapping at an address of the kernel's choosing touches no existing
        // memory; failure is MAP_FAILED (checked below).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        Self::from_mmap_result(p, len)
    }

    fn from_mmap_result(p: *mut libc::c_void, len: usize) -> io::Result<Self> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Self { base, len })
    }

    /// The first byte of the mapping (for diagnostics; use [`Mmio`] to access registers).
    #[must_use]
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Reads a 64-bit register with one volatile 64-bit load (for devices whose 64-bit registers take
    /// effect only on a full-width access; the 82599 needs none).
    ///
    /// # Panics
    ///
    /// When `offset` is not 8-aligned or the register is not inside the mapping.
    #[inline]
    #[must_use]
    pub fn read64(&self, offset: u32) -> u64 {
        let reg = self.register64(offset);
        // SAFETY: `reg` is an aligned 64-bit register inside the live mapping (see `register64`); the
        // access is volatile because device registers have side effects.
        u64::from_le(unsafe { reg.read_volatile() })
    }

    /// Writes a 64-bit register with one volatile 64-bit store (see [`MappedBar::read64`]).
    ///
    /// # Panics
    ///
    /// When `offset` is not 8-aligned or the register is not inside the mapping.
    #[inline]
    pub fn write64(&self, offset: u32, value: u64) {
        let reg = self.register64(offset);
        // SAFETY: as in `read64`.
        unsafe { reg.write_volatile(value.to_le()) }
    }

    fn register64(&self, offset: u32) -> *mut u64 {
        assert!(offset.is_multiple_of(8), "64-bit register offset {offset:#x} is not 8-aligned");
        let high = offset.checked_add(4).expect("register offset overflows");
        check_register(high, self.len);
        let off = check_register(offset, self.len);
        // SAFETY: `off + 8 <= len` (both halves checked by `check_register`), so the result stays inside
        // the mapping; the base is page-aligned and `off` 8-aligned, so the register is 8-aligned.
        unsafe { self.base.as_ptr().add(off) }.cast::<u64>()
    }

    fn register(&self, offset: u32) -> *mut u32 {
        let off = check_register(offset, self.len);
        // SAFETY: `off + 4 <= len` (checked by `check_register`), so the result stays inside the
        // mapping; the base is page-aligned and `off` 4-aligned, so the register is 4-aligned.
        unsafe { self.base.as_ptr().add(off) }.cast::<u32>()
    }
}

impl Mmio for MappedBar {
    fn bar_len(&self) -> usize {
        self.len
    }

    #[inline]
    fn read32(&self, offset: u32) -> u32 {
        let reg = self.register(offset);
        // SAFETY: `reg` is an aligned register inside the live mapping (see `register`); the access is
        // volatile because device registers have side effects.
        u32::from_le(unsafe { reg.read_volatile() })
    }

    #[inline]
    fn write32(&self, offset: u32, value: u32) {
        let reg = self.register(offset);
        // SAFETY: as in `read32`.
        unsafe { reg.write_volatile(value.to_le()) }
    }
}

impl Drop for MappedBar {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in the constructor, and nothing can access
        // it after this (all accesses go through `&self`).
        let r = unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
        if r != 0 {
            tracing::error!(error = %io::Error::last_os_error(), "munmap of a BAR failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_round_trip_on_anonymous_memory() {
        let bar = MappedBar::anonymous(0x2_0000).unwrap();
        assert_eq!(bar.bar_len(), 0x2_0000);
        assert_eq!(bar.read32(0), 0);
        bar.write32(0x1_FFFC, 0xDEAD_BEEF);
        assert_eq!(bar.read32(0x1_FFFC), 0xDEAD_BEEF);
        bar.set_bits(0x8, 0b101);
        bar.clear_bits(0x8, 0b100);
        assert_eq!(bar.read32(0x8), 0b001);
        // Little-endian in memory, as the device sees it.
        bar.write32(0x10, 0x0403_0201);
        let reg = bar.as_ptr().wrapping_add(0x10).cast::<[u8; 4]>();
        // SAFETY: offset 0x10..0x14 is inside the live mapping; plain byte reads of anonymous memory.
        let bytes = unsafe { reg.read_volatile() };
        assert_eq!(bytes, [1, 2, 3, 4]);
    }

    #[test]
    #[should_panic(expected = "outside a BAR")]
    fn bar_refuses_access_past_the_end() {
        let bar = MappedBar::anonymous(0x1000).unwrap();
        let _ = bar.read32(0x1000);
    }

    #[test]
    #[should_panic(expected = "misaligned")]
    fn bar_refuses_misaligned_access() {
        let bar = MappedBar::anonymous(0x1000).unwrap();
        bar.write32(0x2, 1);
    }

    #[test]
    fn bar_refuses_empty_mapping() {
        assert_eq!(MappedBar::anonymous(0).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
