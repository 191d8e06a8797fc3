//! Timers of a core's tasks: [`Sleep`], and the table the core's loop fires them from.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::AsyncCore;

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

    fn insert(&self, at: Instant, waker: &Waker) -> (Instant, u64) {
        let id = self.next_id.get();
        self.next_id.set(id.wrapping_add(1));
        self.pending.borrow_mut().insert((at, id), waker.clone());
        (at, id)
    }

    /// Replaces the waker of a registered timer; `false` when it already fired.
    fn update(&self, key: (Instant, u64), waker: &Waker) -> bool {
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

    fn remove(&self, key: (Instant, u64)) {
        self.pending.borrow_mut().remove(&key);
    }
}

/// A future that completes at its deadline ([`AsyncCore::sleep`]); the core's loop sleeps no
/// longer than the earliest one.
#[must_use = "a Sleep does nothing unless awaited"]
pub struct Sleep<'c> {
    core: AsyncCore<'c>,
    deadline: Instant,
    /// The timer's key while registered.
    key: Option<(Instant, u64)>,
}

impl fmt::Debug for Sleep<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep").field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl<'c> Sleep<'c> {
    pub(super) fn new(core: AsyncCore<'c>, deadline: Instant) -> Self {
        Self { core, deadline, key: None }
    }

    /// When it completes.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl Future for Sleep<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            if let Some(key) = self.key.take() {
                self.core.inner.timers.remove(key);
            }
            return Poll::Ready(());
        }
        let timers = &self.core.inner.timers;
        let registered = self.key.is_some_and(|key| timers.update(key, cx.waker()));
        if !registered {
            let key = timers.insert(self.deadline, cx.waker());
            self.key = Some(key);
        }
        Poll::Pending
    }
}

impl Drop for Sleep<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.core.inner.timers.remove(key);
        }
    }
}
