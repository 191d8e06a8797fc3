//! Backing off when a polling loop finds nothing to do.

use std::time::{Duration, Instant};

use netchannel::wake::Notify;

/// Yield while work stopped only recently; past [`SPIN`], sleep [`NAP`] per idle round. A loop that
/// polls a device or channels calls [`tick`](Idle::tick) after each round with whether it did
/// anything: on a dedicated core the yields cost nothing, and on a shared machine (the model's
/// thread and the cores on two CPUs) an idle core gives its CPU back within [`SPIN`].
#[derive(Debug, Default)]
pub(crate) struct Idle {
    since: Option<Instant>,
}

/// How long an idle loop keeps yielding before it naps.
pub(crate) const SPIN: Duration = Duration::from_millis(2);
/// One nap.
pub(crate) const NAP: Duration = Duration::from_micros(100);

impl Idle {
    pub(crate) fn tick(&mut self, busy: bool) {
        if busy {
            self.reset();
        } else {
            self.idle_at(Instant::now());
        }
    }

    /// Work was done: the next idle round starts the back-off afresh.
    pub(crate) fn reset(&mut self) {
        self.since = None;
    }

    /// An idle round at `now` (a caller that read the clock anyway saves a read).
    pub(crate) fn idle_at(&mut self, now: Instant) {
        if self.napping(now) {
            std::thread::sleep(NAP);
        } else {
            std::thread::yield_now();
        }
    }

    /// As [`idle_at`](Self::idle_at), napping on `wake` instead: a notification ends the nap at
    /// once (and makes it return at once when it came since the caller last took one).
    pub(crate) fn idle_on(&mut self, now: Instant, wake: &Notify) {
        if self.napping(now) {
            wake.sleep(Some(NAP));
        } else {
            std::thread::yield_now();
        }
    }

    /// Whether the loop has been idle for longer than [`SPIN`] at `now`.
    pub(crate) fn napping(&mut self, now: Instant) -> bool {
        let since = *self.since.get_or_insert(now);
        now.saturating_duration_since(since) > SPIN
    }
}
