//! The few operating-system services the channel's wakeup protocol needs: a futex word to sleep on, an
//! eventfd for epoll integration, and an asymmetric memory barrier (`membarrier(2)`).
//!
//! Under `--cfg loom` the futex is emulated with loom's `Mutex` + `Condvar` (same semantics: `wait`
//! sleeps only while the word still holds the expected value, checked atomically with going to sleep),
//! and both barriers are full `SeqCst` fences, which loom models.
//!
//! The system calls go through `rustix` (its `thread::futex`, `event` and `thread::membarrier`
//! modules), which keeps this module free of `unsafe`.

use std::time::Duration;

use crate::sync::{AtomicU32, Ordering};

/// A 32-bit word that a thread can sleep on until another thread changes it and wakes it: a Linux
/// futex in production, a mutex/condvar emulation under loom.
#[derive(Debug)]
pub(crate) struct WaitWord {
    word: AtomicU32,
    #[cfg(loom)]
    lock: crate::sync::Mutex<()>,
    #[cfg(loom)]
    cond: crate::sync::Condvar,
}

impl WaitWord {
    pub(crate) fn new(value: u32) -> Self {
        Self {
            word: AtomicU32::new(value),
            #[cfg(loom)]
            lock: crate::sync::Mutex::new(()),
            #[cfg(loom)]
            cond: crate::sync::Condvar::new(),
        }
    }

    pub(crate) fn load(&self, order: Ordering) -> u32 {
        self.word.load(order)
    }

    pub(crate) fn store(&self, value: u32, order: Ordering) {
        self.word.store(value, order);
    }

    pub(crate) fn swap(&self, value: u32, order: Ordering) -> u32 {
        self.word.swap(value, order)
    }

    pub(crate) fn compare_exchange(
        &self,
        current: u32,
        new: u32,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u32, u32> {
        self.word.compare_exchange(current, new, success, failure)
    }

    /// Sleeps while the word equals `expected`, for at most `timeout`. Returns early on a wake, on a
    /// spurious wakeup, on a signal, or when the word no longer equals `expected`; callers re-check.
    pub(crate) fn wait(&self, expected: u32, timeout: Option<Duration>) {
        #[cfg(not(loom))]
        {
            use rustix::thread::futex;
            // A timeout past `i64::MAX` seconds waits untimed, which is the same thing.
            let ts = timeout.and_then(|t| futex::Timespec::try_from(t).ok());
            // Errors (EAGAIN when the word changed, EINTR, ETIMEDOUT) all mean "return and let the
            // caller re-check".
            let _ = futex::wait(&self.word, futex::Flags::PRIVATE, expected, ts.as_ref());
        }
        #[cfg(loom)]
        {
            let _ = timeout; // loom has no clock: a model waits until woken.
            let guard = self.lock.lock().unwrap();
            // SeqCst: the check and the sleep are atomic with respect to `wake` because both hold
            // `lock`; the ordering itself is what the futex syscall gives (a full barrier).
            if self.word.load(Ordering::SeqCst) == expected {
                drop(self.cond.wait(guard).unwrap());
            }
        }
    }

    /// Wakes every thread sleeping in [`WaitWord::wait`] on this word. The caller must have changed the
    /// word first, or a sleeper that has not yet entered the kernel would miss the wakeup.
    pub(crate) fn wake(&self) {
        #[cfg(not(loom))]
        {
            use rustix::thread::futex;
            // The count of woken threads does not matter; FUTEX_WAKE cannot fail on a live word.
            let _ = futex::wake(&self.word, futex::Flags::PRIVATE, i32::MAX.cast_unsigned());
        }
        #[cfg(loom)]
        {
            drop(self.lock.lock().unwrap());
            self.cond.notify_all();
        }
    }
}

/// An owned, non-blocking eventfd: the producer writes to it to wake a consumer that sleeps in
/// `epoll`/`poll`/mio rather than on a futex.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct EventFd(std::os::fd::OwnedFd);

#[cfg(not(loom))]
impl EventFd {
    pub(crate) fn new() -> std::io::Result<Self> {
        use rustix::event::{EventfdFlags, eventfd};
        Ok(Self(eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?))
    }

    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.0.as_fd()
    }

    /// Adds one to the counter, making the fd readable. A saturated counter (EAGAIN) is already
    /// readable, so the error is ignored.
    pub(crate) fn signal(&self) {
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }

    /// Resets the counter to zero so level-triggered pollers stop reporting it.
    pub(crate) fn drain(&self) {
        // EAGAIN (already zero) is fine.
        let _ = rustix::io::read(&self.0, &mut [0u8; 8]);
    }

    /// Sleeps until the fd is readable or `timeout` passes (EINTR just returns early).
    pub(crate) fn poll(&self, timeout: Option<Duration>) {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let mut fds = [PollFd::new(&self.0, PollFlags::IN)];
        // A timeout past `i64::MAX` seconds waits untimed, which is the same thing.
        let ts = timeout.and_then(|t| Timespec::try_from(t).ok());
        let _ = poll(&mut fds, ts.as_ref());
    }
}

/// The asymmetric barrier pair that keeps a full fence off the producer's per-push path.
///
/// The wakeup handshake is a store-buffering (Dekker) pattern: the producer stores `tail` then loads the
/// consumer's wakeup count; the consumer stores its wakeup count then loads `tail`. Each side needs a
/// StoreLoad barrier between its store and its load, or both could miss each other and the consumer would
/// sleep on a non-empty ring. A `SeqCst` fence on both sides is correct but costs tens of nanoseconds per
/// push. `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` instead makes every running thread of the process
/// execute a full barrier, so the rarely-taken side (the consumer going to sleep) pays a system call and
/// the hot side (the producer) needs only a compiler barrier, which keeps the compiler from reordering
/// its store and load. This is the same substitution liburcu's `urcu-memb` flavour and folly's
/// `asymmetricHeavyBarrier` make. When `membarrier` is unavailable (old kernel, seccomp) both sides fall
/// back to `SeqCst` fences; the choice is made once per process, before any channel exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Barrier {
    /// `membarrier(2)` on the heavy side, a compiler fence on the light side.
    Asymmetric,
    /// `SeqCst` fences on both sides.
    Symmetric,
}

impl Barrier {
    /// The barrier this process uses; registers with `membarrier` on first use. Setting the environment
    /// variable `NETCHANNEL_NO_MEMBARRIER=1` forces the symmetric fallback (for benchmarks and tests).
    pub(crate) fn get() -> Self {
        #[cfg(loom)]
        return Self::Symmetric;
        #[cfg(not(loom))]
        {
            static CHOICE: std::sync::OnceLock<Barrier> = std::sync::OnceLock::new();
            *CHOICE.get_or_init(|| {
                if std::env::var_os("NETCHANNEL_NO_MEMBARRIER").is_some_and(|v| v != "0") {
                    return Self::Symmetric;
                }
                use rustix::thread::{MembarrierCommand, membarrier};
                if let Err(error) = membarrier(MembarrierCommand::RegisterPrivateExpedited) {
                    tracing::debug!(
                        error = %std::io::Error::from(error),
                        "membarrier(2) unavailable; channel wakeups use SeqCst fences on both sides"
                    );
                    Self::Symmetric
                } else {
                    Self::Asymmetric
                }
            })
        }
    }

    /// The hot side's StoreLoad barrier (the producer, every burst).
    #[inline(always)]
    pub(crate) fn light(self) {
        match self {
            // The heavy side's membarrier supplies the hardware barrier; we only stop the compiler
            // from moving the following load above the preceding store.
            Self::Asymmetric => std::sync::atomic::compiler_fence(Ordering::SeqCst),
            // SeqCst fence: pairs with the SeqCst fence in `heavy` (store-buffering pattern).
            Self::Symmetric => fence(Ordering::SeqCst),
        }
    }

    /// The cold side's StoreLoad barrier (the consumer, once per sleep).
    pub(crate) fn heavy(self) {
        // SeqCst fence: orders this thread's own store before its load; pairs with `light`.
        fence(Ordering::SeqCst);
        #[cfg(not(loom))]
        if self == Self::Asymmetric {
            // Registration succeeded in `get`, so this cannot fail with EPERM; any other failure would
            // leave us without the barrier, so we fall through to the fence above, which alone is
            // only correct if the producer also fences — report it.
            let r = rustix::thread::membarrier(rustix::thread::MembarrierCommand::PrivateExpedited);
            debug_assert!(r.is_ok(), "membarrier failed after successful registration: {r:?}");
        }
    }
}

use crate::sync::fence;
