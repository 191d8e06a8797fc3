//! The table of a core's pending timers, by deadline: what [`Sleep`](super::Sleep)s register in
//! and the core's loop fires.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::task::Waker;
use std::time::Instant;

/// The core's pending timers, by deadline (then by arrival, so that equal deadlines are distinct).
#[derive(Default)]
pub(super) struct Timers {
    pending: RefCell<BTreeMap<(Instant, u64), Waker>>,
    next_id: Cell<u64>,
}

impl Timers {
    /// The earliest deadline.
    pub(super) fn next(&self) -> Option<Instant> {
        self.pending.borrow().first_key_value().map(|(&(at, _), _)| at)
    }

    /// Wakes (and forgets) every timer due at `now`.
    pub(super) fn fire(&self, now: Instant) {
        loop {
            let due = {
                let mut pending = self.pending.borrow_mut();
                match pending.first_key_value() {
                    Some((&(at, _), _)) if at <= now => pending.pop_first(),
                    _ => None,
                }
            };
            let Some((_, waker)) = due else { return };
            waker.wake();
        }
    }

    /// Wakes every timer (the runtime stops), keeping them registered.
    pub(super) fn wake_all(&self) {
        let wakers: Vec<Waker> = self.pending.borrow().values().cloned().collect();
        for waker in wakers {
            waker.wake();
        }
    }

    pub(super) fn insert(&self, at: Instant, waker: &Waker) -> (Instant, u64) {
        let id = self.next_id.get();
        self.next_id.set(id.wrapping_add(1));
        self.pending.borrow_mut().insert((at, id), waker.clone());
        (at, id)
    }

    /// Replaces the waker of a registered timer; `false` when it already fired.
    pub(super) fn update(&self, key: (Instant, u64), waker: &Waker) -> bool {
        match self.pending.borrow_mut().get_mut(&key) {
            Some(w) => {
                if !w.will_wake(waker) {
                    w.clone_from(waker);
                }
                true
            }
            None => false,
        }
    }

    pub(super) fn remove(&self, key: (Instant, u64)) {
        self.pending.borrow_mut().remove(&key);
    }
}
