//! Timers of a core's tasks: [`Sleep`] (the table the core's loop fires them from is `timers`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use super::handle::AsyncCore;

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
