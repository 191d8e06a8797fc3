//! A wakeup that any thread can send to one thread that sleeps when it has nothing to do: how a
//! core that runs tasks (an async executor over its stack) is woken by a task that another thread
//! made runnable.
//!
//! The sleeper's loop is the same as a channel consumer's (see the wakeup protocol in
//! [`channel`](crate::channel)): clear the pending wakeup ([`Notify::take`]), look for work,
//! and only then sleep ([`Notify::sleep`]). The register/re-check is a single atomic step on
//! one word: `sleep` moves the word from *idle* to *sleeping* with a compare-and-exchange that
//! fails when a [`notify`](Notify::notify) came after the `take`, so a wakeup sent between
//! "found nothing" and "asleep" makes `sleep` return at once instead of being lost; and the
//! futex wait itself only sleeps while the word still says *sleeping*. Every notification is a
//! swap on the same word, so the word's modification order alone decides who saw whom: no fence
//! is needed. `tests/loom_notify.rs` checks it, and fails when the compare-and-exchange is
//! replaced by a plain store.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::time::Duration;
//! use netchannel::wake::Notify;
//!
//! let notify = Arc::new(Notify::new());
//! let work = Arc::new(AtomicBool::new(false));
//! let (n, w) = (Arc::clone(&notify), Arc::clone(&work));
//! let waker = std::thread::spawn(move || {
//!     w.store(true, Ordering::Release);
//!     n.notify();
//! });
//! loop {
//!     notify.take();
//!     if work.load(Ordering::Acquire) {
//!         break;
//!     }
//!     notify.sleep(Some(Duration::from_secs(5)));
//! }
//! waker.join().unwrap();
//! ```

use std::time::Duration;

use crate::sync::Ordering;
#[cfg(not(loom))]
use crate::sys::EventFd;
use crate::sys::WaitWord;

/// Nothing pending, nobody asleep.
const IDLE: u32 = 0;
/// A wakeup was sent since the sleeper last took one.
const NOTIFIED: u32 = 1;
/// The sleeper is (about to be) asleep in the futex ([`Notify::sleep`]).
const SLEEPING: u32 = 2;
/// The sleeper is (about to be) asleep in its own wait on the eventfd ([`Notify::sleep_with`]).
const POLLING: u32 = 3;

/// A wakeup for one sleeping thread, sent from any thread (see the [module documentation](self)).
#[derive(Debug)]
pub struct Notify {
    word: WaitWord,
    /// Signalled with the futex, for a sleeper that waits in `poll(2)` on this and other
    /// descriptors ([`Notify::sleep_with`]).
    #[cfg(not(loom))]
    event: Option<EventFd>,
}

impl Default for Notify {
    fn default() -> Self {
        Self::new()
    }
}

impl Notify {
    /// Idle: nothing pending.
    #[must_use]
    pub fn new() -> Self {
        Self {
            word: WaitWord::new(IDLE),
            #[cfg(not(loom))]
            event: None,
        }
    }

    /// As [`new`](Self::new), with an eventfd that a wakeup signals when the sleeper waits in
    /// [`sleep_with`](Self::sleep_with): for a sleeper that waits on several descriptors at once.
    ///
    /// # Errors
    ///
    /// When the eventfd cannot be created (typically `EMFILE`: raise the process's file limit).
    #[cfg(not(loom))]
    pub fn with_event_fd() -> std::io::Result<Self> {
        Ok(Self { word: WaitWord::new(IDLE), event: Some(EventFd::new()?) })
    }

    /// The eventfd of a [`with_event_fd`](Self::with_event_fd) notify: readable while a wakeup
    /// sent to a sleeper in [`sleep_with`](Self::sleep_with) is pending.
    #[cfg(not(loom))]
    #[must_use]
    pub fn event_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.event.as_ref().map(EventFd::fd)
    }

    /// Sends a wakeup: the next [`take`](Self::take) returns `true`, and a thread asleep in
    /// [`sleep`](Self::sleep) wakes. Costs one atomic swap, and a `FUTEX_WAKE` (or, for a sleeper in
    /// [`sleep_with`](Self::sleep_with), an eventfd write) only when the sleeper is asleep.
    pub fn notify(&self) {
        // Release: pairs with the Acquire of `take`, `is_notified` and `sleep`: what the caller did
        // before (queued a task) is visible to the sleeper that sees NOTIFIED. Whether the sleeper is
        // asleep is read from the word's modification order, which needs no ordering.
        match self.word.swap(NOTIFIED, Ordering::Release) {
            SLEEPING => self.word.wake(),
            #[cfg(not(loom))]
            POLLING => {
                if let Some(event) = &self.event {
                    event.signal();
                }
            }
            _ => {}
        }
    }

    /// Takes the pending wakeup: whether one was sent since the last `take`. The sleeper calls it
    /// before it looks for work, so a wakeup sent while it looks is kept for `sleep`.
    pub fn take(&self) -> bool {
        // Acquire: pairs with the Release of `notify`'s swap.
        self.word.swap(IDLE, Ordering::Acquire) == NOTIFIED
    }

    /// Whether a wakeup is pending (without taking it).
    #[must_use]
    pub fn is_notified(&self) -> bool {
        // Acquire: pairs with the Release of `notify`'s swap.
        self.word.load(Ordering::Acquire) == NOTIFIED
    }

    /// Sleeps until a wakeup comes or `timeout` passes (`None`: no limit); returns at once when a
    /// wakeup came since the last [`take`](Self::take). The pending wakeup stays pending (the
    /// caller's next `take` sees it). Only one thread may sleep on a `Notify`.
    pub fn sleep(&self, timeout: Option<Duration>) {
        self.sleep_as(SLEEPING, || self.word.wait(SLEEPING, timeout));
    }

    /// As [`sleep`](Self::sleep), sleeping in `wait` instead of the futex: `wait` blocks until
    /// this notify's [`event_fd`](Self::event_fd) (or whatever else the caller also waits for)
    /// is readable, or its own timeout. It is not called when a wakeup came since the last
    /// [`take`](Self::take). Only one thread may sleep on a `Notify`.
    pub fn sleep_with(&self, wait: impl FnOnce()) {
        self.sleep_as(POLLING, wait);
        // The eventfd's signal (if any) was for this sleep: the next sleep starts unsignalled.
        #[cfg(not(loom))]
        if let Some(event) = &self.event {
            event.drain();
        }
    }

    /// Announces the sleep as `how` (so that `notify` wakes it the one way it sleeps) and sleeps in
    /// `wait`, unless a wakeup came since the last `take`.
    fn sleep_as(&self, how: u32, wait: impl FnOnce()) {
        // The re-check: fails (leaves NOTIFIED in place) when a wakeup came after `take`.
        // Acquire on success and failure: pairs with the Release of `notify`'s swap.
        if self.word.compare_exchange(IDLE, how, Ordering::Acquire, Ordering::Acquire).is_err() {
            return;
        }
        wait();
        // Timed out or woken spuriously: back to idle, unless a wakeup came (then it stays NOTIFIED).
        // Relaxed: this only withdraws our own announcement; nothing is published through it.
        let _ = self.word.compare_exchange(how, IDLE, Ordering::Relaxed, Ordering::Relaxed);
    }
}
