//! A generation-checked slab, the storage of the connection table and the listener table: values
//! in a `Vec` of slots found by a `u32` index, each slot with a generation counter that moves on
//! when its value is removed, so that a stale handle (an index and the generation it was given
//! with) is refused; removed slots go on a free list and are reused.

/// One slot: its value, if any, and the generation handles to it carry.
#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Values by `u32` index with generation-checked access and a free list; see the
/// [module documentation](self).
#[derive(Debug)]
pub(super) struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Slab<T> {
    /// An empty slab.
    pub(super) const fn new() -> Self {
        Self { slots: Vec::new(), free: Vec::new(), len: 0 }
    }

    /// Values held.
    #[inline]
    pub(super) const fn len(&self) -> usize {
        self.len
    }

    /// The value at `index`, whatever its generation.
    #[inline]
    pub(super) fn get_mut(&mut self, index: u32) -> Option<&mut T> {
        self.slots.get_mut(usize::try_from(index).ok()?)?.value.as_mut()
    }

    /// The value at `index` if the slot is still at `generation` (the handle is not stale).
    #[inline]
    pub(super) fn get_checked(&self, index: u32, generation: u32) -> Option<&T> {
        let slot = self.slots.get(usize::try_from(index).ok()?)?;
        if slot.generation == generation { slot.value.as_ref() } else { None }
    }

    /// The value at `index` if the slot is still at `generation` (the handle is not stale).
    #[inline]
    pub(super) fn get_checked_mut(&mut self, index: u32, generation: u32) -> Option<&mut T> {
        let slot = self.slots.get_mut(usize::try_from(index).ok()?)?;
        if slot.generation == generation { slot.value.as_mut() } else { None }
    }

    /// The value at `index` and the slot's generation.
    #[inline]
    pub(super) fn get_mut_with_generation(&mut self, index: u32) -> Option<(u32, &mut T)> {
        let slot = self.slots.get_mut(usize::try_from(index).ok()?)?;
        let generation = slot.generation;
        Some((generation, slot.value.as_mut()?))
    }

    /// The generation of the slot at `index` (`None` past the end).
    #[inline]
    pub(super) fn generation(&self, index: u32) -> Option<u32> {
        self.slots.get(usize::try_from(index).ok()?).map(|s| s.generation)
    }

    /// Stores `value` in a free slot (the most recently freed one) or a new one; returns its index.
    /// The slot keeps its generation: [`generation`](Self::generation) gives the handle's.
    pub(super) fn insert(&mut self, value: T) -> u32 {
        self.insert_with(|| value)
    }

    /// Stores the value `make` builds, as [`insert`](Self::insert) does, but in the empty slot
    /// itself (`Option::get_or_insert_with` on a slot known to be empty): when `make` is inlined
    /// here and ends in a struct literal, the compiler writes the literal's fields straight into
    /// the slot, so a large value (a connection) is not built elsewhere and copied in. A value
    /// returned by a call that is not inlined still goes through a temporary: the compiler may
    /// not let a call that can unwind write into memory the caller can observe (see
    /// `Stack::insert_new`).
    #[inline]
    pub(super) fn insert_with(&mut self, make: impl FnOnce() -> T) -> u32 {
        let index = if let Some(i) = self.free.pop() {
            i
        } else {
            self.slots.push(Slot { generation: 0, value: None });
            u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
        };
        if let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) {
            debug_assert!(slot.value.is_none(), "a free slot holds no value");
            slot.value.get_or_insert_with(make);
        }
        self.len += 1;
        index
    }

    /// Takes the value at `index` out; the slot's generation moves on (its handles become stale)
    /// and the slot is free for reuse.
    pub(super) fn remove(&mut self, index: u32) -> Option<T> {
        let slot = self.slots.get_mut(usize::try_from(index).ok()?)?;
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.len -= 1;
        Some(value)
    }

    /// Drops the value at `index` where it lies (no copy of it out of the slot), as
    /// [`remove`](Self::remove) otherwise does; whether there was one.
    pub(super) fn discard(&mut self, index: u32) -> bool {
        let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) else {
            return false;
        };
        if slot.value.is_none() {
            return false;
        }
        slot.value = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.len -= 1;
        true
    }

    /// Every value with its slot's position and generation, in index order.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (usize, u32, &mut T)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, s)| Some((i, s.generation, s.value.as_mut()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::Slab;

    #[test]
    fn insert_get_remove() {
        let mut slab = Slab::new();
        let a = slab.insert("a");
        let b = slab.insert("b");
        assert_eq!((a, b), (0, 1));
        assert_eq!(slab.len(), 2);
        assert_eq!(slab.get_mut(a).map(|v| *v), Some("a"));
        assert_eq!(slab.get_mut(b).map(|v| *v), Some("b"));
        assert_eq!(slab.generation(a), Some(0));
        assert_eq!(slab.remove(a), Some("a"));
        assert_eq!(slab.remove(a), None, "removed once");
        assert!(!slab.discard(a), "nothing left to discard");
        assert_eq!(slab.len(), 1);
        assert_eq!(slab.get_mut(a), None);
        assert_eq!(slab.get_mut(7), None);
        assert_eq!(slab.generation(7), None);
    }

    #[test]
    fn stale_handles_are_refused() {
        let mut slab = Slab::new();
        let i = slab.insert(1);
        let generation = slab.generation(i).expect("a slot");
        assert_eq!(slab.get_checked(i, generation), Some(&1));
        slab.remove(i);
        assert_eq!(slab.get_checked(i, generation), None);
        let j = slab.insert(2);
        assert_eq!(j, i, "the freed slot is reused");
        let newer = slab.generation(j).expect("a slot");
        assert_ne!(newer, generation);
        assert_eq!(slab.get_checked(i, generation), None, "the old handle stays stale");
        assert_eq!(slab.get_checked_mut(j, newer).map(|v| *v), Some(2));
        assert_eq!(slab.get_mut_with_generation(j).map(|(g, v)| (g, *v)), Some((newer, 2)));
        assert_eq!(slab.get_checked_mut(j, generation), None);
    }

    #[test]
    fn discard_drops_in_place_and_frees_the_slot() {
        let mut slab = Slab::new();
        let shared = std::rc::Rc::new(());
        let i = slab.insert_with(|| std::rc::Rc::clone(&shared));
        let generation = slab.generation(i).expect("a slot");
        assert_eq!(std::rc::Rc::strong_count(&shared), 2);
        assert!(slab.discard(i));
        assert_eq!(std::rc::Rc::strong_count(&shared), 1, "the value was dropped");
        assert_eq!(slab.len(), 0);
        assert!(slab.get_checked(i, generation).is_none(), "its handles are stale");
        assert!(!slab.discard(i));
        assert_eq!(slab.insert_with(|| std::rc::Rc::clone(&shared)), i, "the slot is reused");
    }

    #[test]
    fn free_list_reuses_the_latest_freed_slot() {
        let mut slab = Slab::new();
        for v in 0..4 {
            slab.insert(v);
        }
        slab.remove(1);
        slab.remove(2);
        assert_eq!(slab.insert(10), 2);
        assert_eq!(slab.insert(11), 1);
        assert_eq!(slab.insert(12), 4, "a new slot once none is free");
        assert_eq!(slab.len(), 5);
    }

    #[test]
    fn iter_mut_visits_the_values_only() {
        let mut slab = Slab::new();
        for v in 0..3 {
            slab.insert(v);
        }
        slab.remove(1);
        for (_, _, v) in slab.iter_mut() {
            *v += 100;
        }
        let seen: Vec<(usize, u32, i32)> = slab.iter_mut().map(|(i, g, v)| (i, g, *v)).collect();
        assert_eq!(seen, [(0, 0, 100), (2, 0, 102)]);
    }
}
