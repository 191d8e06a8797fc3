//! The model's IOMMU: the table of address ranges the driver made reachable ([`DmaSpace::alloc`] and
//! [`DmaSpace::map`]), and the only way the model touches memory. Every device access is checked
//! against the table first; an access outside every mapped range is an IOMMU fault that the caller
//! counts, never a wild read or write.
//!
//! IOVAs are virtual addresses ([`Translation::Linear`], as with VFIO). A range leaves the table when
//! its guard drops, under the model's lock, before its memory is freed; the model only accesses
//! memory while it holds that lock, so a range it finds in the table stays valid for the access.

use std::alloc::Layout;
use std::cell::Cell;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::hw::{DmaError, DmaGuard, DmaMapping, DmaMemory, DmaSpace, Iova, Translation};

use super::Shared;

/// The IOMMU page size: ranges from [`DmaSpace::alloc`] are mapped in whole pages.
const PAGE: usize = 4096;

/// One mapped range.
#[derive(Clone, Copy, Debug)]
struct Range {
    start: u64,
    end: u64,
    id: u64,
}

/// The table of mapped ranges, sorted by start address (ranges never overlap: each is memory that
/// someone owns).
#[derive(Debug, Default)]
pub(super) struct Iommu {
    ranges: Vec<Range>,
    next_id: u64,
    /// The index of the range that answered the last lookup (most accesses hit the same ring or
    /// buffer region as the one before).
    hint: Cell<usize>,
}

impl Iommu {
    /// Adds `start..start + len`; returns its id for [`Iommu::remove`].
    fn insert(&mut self, start: u64, len: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let end = start.saturating_add(len);
        let at = self.ranges.partition_point(|r| r.start < start);
        self.ranges.insert(at, Range { start, end, id });
        id
    }

    /// Removes the range with `id` (no-op when it is gone).
    fn remove(&mut self, id: u64) {
        self.ranges.retain(|r| r.id != id);
        self.hint.set(0);
    }

    /// How many ranges are mapped (a device reset does not change it: the IOMMU belongs to the host).
    pub(super) fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether `iova..iova + len` lies inside one mapped range (`len > 0`).
    #[inline]
    pub(super) fn check(&self, iova: u64, len: u64) -> bool {
        let Some(end) = iova.checked_add(len) else { return false };
        let inside = |r: &Range| r.start <= iova && end <= r.end;
        if let Some(r) = self.ranges.get(self.hint.get())
            && inside(r)
        {
            return true;
        }
        let at = self.ranges.partition_point(|r| r.start <= iova);
        let Some(i) = at.checked_sub(1) else { return false };
        if self.ranges.get(i).is_some_and(inside) {
            self.hint.set(i);
            true
        } else {
            false
        }
    }

    /// The 64-bit word at `iova`, when it is 8-byte aligned and mapped.
    #[inline]
    fn word(&self, iova: u64) -> Option<&AtomicU64> {
        if !iova.is_multiple_of(8) || !self.check(iova, 8) {
            return None;
        }
        let addr = usize::try_from(iova).ok()?;
        let ptr = std::ptr::with_exposed_provenance_mut::<u64>(addr);
        // SAFETY: the word lies inside a mapped range (checked above), which is live memory while it is
        // in the table and the caller holds the model's lock (the module doc); it is 8-byte aligned;
        // the driver accesses descriptor words only atomically (`DmaMemory::load_u64`/`store_u64`).
        Some(unsafe { AtomicU64::from_ptr(ptr) })
    }

    /// Loads the little-endian word at `iova`; `None` is an IOMMU fault.
    #[inline]
    pub(super) fn load(&self, iova: u64, order: Ordering) -> Option<u64> {
        self.word(iova).map(|w| u64::from_le(w.load(order)))
    }

    /// Stores `value` little-endian at `iova`; `false` is an IOMMU fault.
    #[inline]
    pub(super) fn store(&self, iova: u64, value: u64, order: Ordering) -> bool {
        self.word(iova).map(|w| w.store(value.to_le(), order)).is_some()
    }

    /// Writes `data` at `iova` (a packet into a receive buffer); `false` is an IOMMU fault and nothing
    /// is written.
    #[inline]
    pub(super) fn write_bytes(&self, iova: u64, data: &[u8]) -> bool {
        if data.is_empty() {
            return true;
        }
        if !self.check(iova, data.len() as u64) {
            return false;
        }
        let Ok(addr) = usize::try_from(iova) else { return false };
        let dst = std::ptr::with_exposed_provenance_mut::<u8>(addr);
        // SAFETY: `dst..dst + data.len()` is inside a mapped range (checked above), live while the
        // caller holds the model's lock; it cannot overlap `data` (the model's own memory or the wire
        // pool's, never a range it hands to the driver as a receive buffer at the same time); the
        // driver reads the buffer only after the descriptor's DD, stored later with `Release`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        true
    }

    /// Appends `len` bytes read at `iova` to `out` (a transmit buffer); `false` is an IOMMU fault and
    /// `out` is unchanged.
    #[inline]
    pub(super) fn read_bytes(&self, iova: u64, len: usize, out: &mut Vec<u8>) -> bool {
        if len == 0 {
            return true;
        }
        if !self.check(iova, len as u64) {
            return false;
        }
        let Ok(addr) = usize::try_from(iova) else { return false };
        let src = std::ptr::with_exposed_provenance::<u8>(addr);
        // SAFETY: `src..src + len` is inside a mapped range (checked above), live while the caller holds
        // the model's lock, and the driver wrote it before publishing the descriptor (Release fence +
        // tail write, observed by the caller's Acquire load of the tail).
        let bytes = unsafe { std::slice::from_raw_parts(src, len) };
        out.extend_from_slice(bytes);
        true
    }
}

/// Undoes one mapping: removes the range from the model's table (under its lock) and frees memory
/// the model allocated.
struct SimDmaGuard {
    shared: Arc<Shared>,
    id: u64,
    owned: Option<(NonNull<u8>, Layout)>,
}

// SAFETY: the pointer is only used to free the allocation once, in `drop`; nothing else reads it.
unsafe impl Send for SimDmaGuard {}
// SAFETY: `&SimDmaGuard` exposes nothing (no methods use the pointer).
unsafe impl Sync for SimDmaGuard {}

impl fmt::Debug for SimDmaGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimDmaGuard").field("id", &self.id).field("owned", &self.owned.is_some()).finish()
    }
}

impl DmaGuard for SimDmaGuard {}

impl Drop for SimDmaGuard {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.dev.iommu.remove(self.id);
        if let Some((ptr, layout)) = self.owned.take() {
            // SAFETY: `ptr` came from `alloc_zeroed(layout)` in `SimDma::alloc` and is freed only here;
            // the range is out of the table and the lock is held, so the model no longer accesses it.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        }
        drop(state);
    }
}

/// The model's [`DmaSpace`]: zeroed heap memory for rings, and a record of mapped ranges.
pub(super) struct SimDma(pub(super) Arc<Shared>);

impl fmt::Debug for SimDma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SimDma")
    }
}

impl DmaSpace for SimDma {
    fn alloc(&self, len: usize) -> Result<DmaMemory, DmaError> {
        let oom =
            |len| DmaError::Alloc { len, source: std::io::Error::from(std::io::ErrorKind::OutOfMemory) };
        let size = len.max(1).checked_next_multiple_of(PAGE).ok_or_else(|| oom(len))?;
        let layout = Layout::from_size_align(size, PAGE).map_err(|_| oom(len))?;
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| oom(len))?;
        let start = ptr.as_ptr().expose_provenance() as u64;
        let id = self.0.lock().dev.iommu.insert(start, size as u64);
        let guard = SimDmaGuard { shared: Arc::clone(&self.0), id, owned: Some((ptr, layout)) };
        let translation = Translation::Linear { base: Iova(start) };
        // SAFETY: `size >= len` fresh zeroed bytes, 4096-byte aligned, owned by the guard until it drops;
        // only the model touches them besides the `DmaMemory`, through atomic word accesses.
        Ok(unsafe { DmaMemory::from_raw_parts(ptr, len, translation, Box::new(guard)) })
    }

    fn map(&self, start: usize, len: usize) -> Result<DmaMapping, DmaError> {
        if len == 0 || start.checked_add(len).is_none() {
            return Err(DmaError::Map { start, len, why: "empty or wrapping range".into() });
        }
        let id = self.0.lock().dev.iommu.insert(start as u64, len as u64);
        let guard = SimDmaGuard { shared: Arc::clone(&self.0), id, owned: None };
        Ok(DmaMapping::new(start, len, Translation::Linear { base: Iova(start as u64) }, Box::new(guard)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_check_and_remove() {
        let mut t = Iommu::default();
        let a = t.insert(0x1000, 0x1000);
        let _b = t.insert(0x4000, 0x100);
        assert!(t.check(0x1000, 0x1000));
        assert!(!t.check(0x1000, 0x1001));
        assert!(t.check(0x40F8, 8));
        assert!(!t.check(0x40F9, 8));
        assert!(!t.check(0x3000, 8));
        assert!(!t.check(u64::MAX - 2, 8));
        t.remove(a);
        assert!(!t.check(0x1000, 8));
        assert_eq!(t.len(), 1);
    }
}
