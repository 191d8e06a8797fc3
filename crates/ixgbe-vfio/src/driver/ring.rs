//! A ring's descriptors beside the buffer index each slot owns, of one power-of-two length checked
//! once, when the ring is built, so that the data path indexes them with the mask alone.
//!
//! [`RingStore::new`] refuses descriptor memory that does not hold a power of two of descriptors,
//! and gives the slots the same length; neither length changes afterwards (the memory's
//! descriptor count is fixed, and the slots are a boxed slice this module never replaces). Every
//! access then masks its slot with `len - 1`, which is below the length of both by construction:
//! no compare per access and none per burst (ixy's `ixgbe_rx_batch` and DPDK's `ixgbe_recv_pkts`
//! index their rings the same way, with the mask as the only bound).

use crate::hw::{Descriptor, DmaMemory};

/// A ring's descriptor memory and the buffer index each of its slots owns (see the
/// [module documentation](self)).
#[derive(Debug)]
pub(super) struct RingStore {
    memory: DmaMemory,
    slots: Box<[u32]>,
    /// The ring's length less one; the length is a power of two.
    mask: usize,
}

impl RingStore {
    /// The ring over `memory` (16 bytes a descriptor), every slot's buffer index 0, or `None`
    /// unless `memory` holds a power of two of descriptors.
    pub(super) fn new(memory: DmaMemory) -> Option<Self> {
        let len = memory.descriptors().len();
        if !len.is_power_of_two() {
            return None;
        }
        Some(Self { memory, slots: vec![0; len].into_boxed_slice(), mask: len - 1 })
    }

    /// The data path's view: descriptors and slots, indexed without a check.
    #[inline(always)]
    pub(super) fn view(&mut self) -> Ring<'_> {
        Ring { descriptors: self.memory.descriptors(), slots: &mut self.slots, mask: self.mask }
    }

    /// The descriptor of `slot` (taken modulo the ring size).
    #[inline(always)]
    pub(super) fn descriptor(&self, slot: usize) -> &Descriptor {
        // SAFETY: `slot & mask <= mask < descriptors().len()`: the memory holds `mask + 1`
        // descriptors (checked in `new`; its count never changes).
        unsafe { self.memory.descriptors().get_unchecked(slot & self.mask) }
    }

    /// Descriptors in the ring.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The ring's length less one: a slot number modulo the ring size is `slot & mask`.
    #[inline(always)]
    pub(super) fn mask(&self) -> usize {
        self.mask
    }

    /// The buffer index of every slot.
    pub(super) fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// The buffer index of every slot, to change (their number cannot).
    pub(super) fn slots_mut(&mut self) -> &mut [u32] {
        &mut self.slots
    }

    /// The descriptor memory (its device address and raw words, for the init sequence and tests).
    pub(super) fn memory(&self) -> &DmaMemory {
        &self.memory
    }
}

/// A view of a [`RingStore`] for one burst: `mask + 1` descriptors and the buffer index each slot
/// owns.
pub(super) struct Ring<'a> {
    descriptors: &'a [Descriptor],
    slots: &'a mut [u32],
    mask: usize,
}

impl<'a> Ring<'a> {
    /// The descriptor of `slot` (taken modulo the ring size).
    #[inline(always)]
    pub(super) fn descriptor(&self, slot: usize) -> &'a Descriptor {
        // SAFETY: `slot & mask <= mask < descriptors.len()` (`RingStore`: the length is `mask + 1`).
        unsafe { self.descriptors.get_unchecked(slot & self.mask) }
    }

    /// The `n` descriptors from `start` on (taken modulo the ring size) and the buffer indices
    /// their slots own, as plain slices: a run that does not wrap, indexed without the mask. `n`
    /// is cut at the ring's end; the run after the wrap starts at slot 0.
    #[inline(always)]
    pub(super) fn run(&mut self, start: usize, n: usize) -> (&'a [Descriptor], &mut [u32]) {
        let start = start & self.mask;
        let end = start + n.min(self.mask + 1 - start);
        // SAFETY: `start <= end <= mask + 1`, the length of both slices (`RingStore`).
        let descriptors = unsafe { self.descriptors.get_unchecked(start..end) };
        // SAFETY: as above.
        (descriptors, unsafe { self.slots.get_unchecked_mut(start..end) })
    }

    /// The buffer index slot `slot` owns, replaced by `index`.
    #[inline(always)]
    pub(super) fn replace(&mut self, slot: usize, index: u32) -> u32 {
        // SAFETY: as in `descriptor`; `slots` has the same length.
        let own = unsafe { self.slots.get_unchecked_mut(slot & self.mask) };
        std::mem::replace(own, index)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::HeapDma;
    use super::*;
    use crate::hw::DmaSpace;

    #[test]
    fn refuses_a_length_not_a_power_of_two_and_masks_every_slot() {
        assert!(RingStore::new(HeapDma.alloc(6 * 16).expect("memory")).is_none(), "6 descriptors");
        let mut store = RingStore::new(HeapDma.alloc(8 * 16).expect("memory")).expect("8 descriptors");
        assert_eq!((store.len(), store.mask(), store.slots().len()), (8, 7, 8));
        let base = store.memory().descriptors().as_ptr();
        let mut ring = store.view();
        assert_eq!(ring.replace(9, 5), 0, "slot 9 is slot 1");
        assert_eq!(ring.replace(1, 6), 5);
        assert!(std::ptr::eq(ring.descriptor(8), base));
        assert!(std::ptr::eq(ring.descriptor(15), base.wrapping_add(7)));
        assert!(std::ptr::eq(store.descriptor(23), base.wrapping_add(7)));
        store.slots_mut()[2] = 9;
        assert_eq!(store.slots()[..3], [0, 6, 9]);
    }

    #[test]
    fn a_run_stops_at_the_ring_end_and_starts_modulo_the_size() {
        let mut store = RingStore::new(HeapDma.alloc(8 * 16).expect("memory")).expect("8 descriptors");
        store.slots_mut().copy_from_slice(&[10, 11, 12, 13, 14, 15, 16, 17]);
        let base = store.memory().descriptors().as_ptr();
        let mut ring = store.view();
        let (descriptors, slots) = ring.run(6, 5);
        assert_eq!((descriptors.len(), &*slots), (2, &[16, 17][..]), "cut at the end");
        assert!(std::ptr::eq(&descriptors[0], base.wrapping_add(6)));
        let (descriptors, slots) = ring.run(10, 3);
        assert_eq!((descriptors.len(), &*slots), (3, &[12, 13, 14][..]), "slot 10 is slot 2");
        assert!(std::ptr::eq(&descriptors[0], base.wrapping_add(2)));
        slots[0] = 99;
        assert_eq!(ring.run(7, 0).0.len(), 0);
        assert_eq!(store.slots()[2], 99, "the run's slots are the ring's");
    }
}
