//! A ring's descriptors beside the driver's per-slot arrays, checked once per burst so that the data
//! path indexes them without a bounds check per access.
//!
//! [`Ring::new`] takes the descriptor slice and the per-slot slices and refuses them unless all have
//! the same power-of-two length; every access then masks its slot with `len - 1`, which is below the
//! length of each slice by construction. The check is one compare per slice per burst instead of one
//! per slice per packet (ixy's `ixgbe_rx_batch` and DPDK's `ixgbe_recv_pkts` index their rings the
//! same way, with the mask as the only bound).

use crate::hw::Descriptor;

/// A ring of `mask + 1` descriptors and the buffer index each slot owns.
pub(super) struct Ring<'a> {
    descriptors: &'a [Descriptor],
    slots: &'a mut [u32],
    mask: usize,
}

impl<'a> Ring<'a> {
    /// The ring, or `None` unless both slices have one power-of-two length.
    #[inline]
    pub(super) fn new(descriptors: &'a [Descriptor], slots: &'a mut [u32]) -> Option<Self> {
        let len = descriptors.len();
        if !len.is_power_of_two() || slots.len() != len {
            return None;
        }
        Some(Self { descriptors, slots, mask: len - 1 })
    }

    /// The descriptor of `slot` (taken modulo the ring size).
    #[inline(always)]
    pub(super) fn descriptor(&self, slot: usize) -> &'a Descriptor {
        // SAFETY: `slot & mask <= mask < descriptors.len()` (`new`: the length is `mask + 1`).
        unsafe { self.descriptors.get_unchecked(slot & self.mask) }
    }

    /// The buffer index slot `slot` owns.
    #[inline(always)]
    pub(super) fn slot(&self, slot: usize) -> u32 {
        // SAFETY: as in `descriptor`; `slots` has the same length.
        *unsafe { self.slots.get_unchecked(slot & self.mask) }
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
    use super::*;

    #[test]
    fn refuses_slices_of_other_lengths_or_not_a_power_of_two() {
        let words: Vec<_> = (0..16).map(|_| std::sync::atomic::AtomicU64::new(0)).collect();
        // SAFETY: `Descriptor` is `repr(transparent)` over two atomic words; 16 words are 8 descriptors.
        let descriptors: &[Descriptor] = unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), 8) };
        let mut slots = vec![0u32; 8];
        assert!(Ring::new(descriptors, &mut slots).is_some());
        assert!(Ring::new(descriptors, &mut slots[..7]).is_none());
        assert!(Ring::new(&descriptors[..6], &mut slots[..6]).is_none());
        let mut ring = Ring::new(descriptors, &mut slots).expect("valid");
        assert_eq!(ring.replace(9, 5), 0, "slot 9 is slot 1");
        assert_eq!(ring.replace(1, 6), 5);
        assert_eq!(ring.slot(17), 6);
        assert!(std::ptr::eq(ring.descriptor(8), &descriptors[0]));
        assert!(std::ptr::eq(ring.descriptor(15), &descriptors[7]));
    }
}
