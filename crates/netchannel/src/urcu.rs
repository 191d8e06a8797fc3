//! The system liburcu's QSBR flavour (`liburcu-qsbr`, tested with 0.13) behind the [`Reclaim`] trait.
//!
//! Source: liburcu, `urcu/urcu-qsbr.h` and `src/urcu-qsbr.c` (Desnoyers et al., "User-Level
//! Implementations of Read-Copy Update", IEEE TPDS 2012).
//!
//! liburcu's domain is process-global and its registration is per thread: [`Urcu::register`]
//! registers the calling thread on its first handle and unregisters it when the thread's last
//! [`UrcuReader`] is dropped (or at thread exit, should a handle be leaked). All handles of a thread
//! share the thread's online state. liburcu's `synchronize_rcu` puts a calling reader thread offline
//! for the wait, so a writer that is also a reader does not deadlock (as in [`crate::rcu`]).
//!
//! Every registered thread of the process holds up every grace period while it is online, so a thread
//! must go [`offline`](ReadSide::offline) before it sleeps or blocks (this includes joining a thread
//! that synchronizes).
//!
//! Deferred frees are batched ([`crate::rcu::BATCH`] per grace period) and freed by the writer that
//! fills a batch after a blocking `synchronize_rcu` (liburcu's `defer_rcu` does the same); `call_rcu`
//! and its helper thread are not used.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use crate::rcu::{BATCH, ReadSide, Reclaim, Retired};

#[link(name = "urcu-qsbr")]
unsafe extern "C" {
    fn urcu_qsbr_register_thread();
    fn urcu_qsbr_unregister_thread();
    fn urcu_qsbr_quiescent_state();
    fn urcu_qsbr_thread_offline();
    fn urcu_qsbr_thread_online();
    fn urcu_qsbr_synchronize_rcu();
}

/// This thread's liburcu state, mirrored so the read path needs no call to ask.
struct Local {
    /// Live `UrcuReader` handles on this thread; registered with liburcu while nonzero.
    handles: Cell<usize>,
    online: Cell<bool>,
    /// Nesting depth of `read_section` on this thread.
    in_read: Cell<usize>,
}

impl Drop for Local {
    fn drop(&mut self) {
        if self.handles.get() > 0 {
            // A handle was leaked: unregister at thread exit, before liburcu's per-thread state goes
            // away. SAFETY: this thread is registered (`handles > 0`), so unregistering is valid.
            unsafe { urcu_qsbr_unregister_thread() };
        }
    }
}

thread_local! {
    static LOCAL: Local = const {
        Local { handles: Cell::new(0), online: Cell::new(false), in_read: Cell::new(0) }
    };
}

/// The liburcu QSBR domain: a cheap, cloneable handle with its own queue of deferred frees. The grace
/// periods are process-global.
#[derive(Clone, Default)]
pub struct Urcu {
    deferred: Arc<Mutex<Vec<Retired>>>,
}

impl fmt::Debug for Urcu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Urcu").field("pending", &self.pending()).finish()
    }
}

impl Urcu {
    /// A new handle with an empty queue of deferred frees.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// How many retired objects wait for a grace period.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.deferred.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether this thread is inside a read-side section (a blocking grace period would wait for it).
    fn in_read() -> bool {
        LOCAL.try_with(|l| l.in_read.get() > 0).unwrap_or(false)
    }

    fn grace_period() {
        if Self::in_read() {
            // A grace period here would have to wait for this very thread, which liburcu would
            // instead put offline while it holds references: block forever rather than free early.
            loop {
                std::thread::park();
            }
        }
        // SAFETY: `synchronize_rcu` may be called from any thread, registered or not; a registered
        // online caller is put offline for the wait by liburcu itself, and we are not inside a
        // read-side section (checked above), so this thread holds no protected reference.
        unsafe { urcu_qsbr_synchronize_rcu() };
    }
}

// SAFETY: (1) `synchronize` is liburcu's `synchronize_rcu`, which waits for every registered online
// thread to pass `urcu_qsbr_quiescent_state` or go offline, with full barriers on both sides, and is
// never called inside a read-side section of this thread; (2) retired objects are dropped only after a
// `synchronize_rcu` that began after they were queued; (3) inside `read_section` (thread-local depth >
// 0), `quiescent` and `offline` do nothing, whichever handle of the thread they are called on.
unsafe impl Reclaim for Urcu {
    type Reader = UrcuReader;

    fn register(&self) -> UrcuReader {
        LOCAL.with(|l| {
            if l.handles.get() == 0 {
                // SAFETY: the thread is not registered (no live handle, and `Local::drop` has not
                // run since we are inside `with`); registering marks it online.
                unsafe { urcu_qsbr_register_thread() };
                l.online.set(true);
            }
            l.handles.set(l.handles.get() + 1);
        });
        UrcuReader { _not_send_sync: PhantomData }
    }

    fn owns(&self, _reader: &UrcuReader) -> bool {
        // The domain is process-global and a reader is used only on its registering thread (`!Send`).
        true
    }

    fn synchronize(&self) {
        Self::grace_period();
    }

    fn retire(&self, retired: Retired) {
        let batch = {
            let mut d = self.deferred.lock().unwrap_or_else(PoisonError::into_inner);
            d.push(retired);
            if d.len() < BATCH || Self::in_read() {
                return;
            }
            std::mem::take(&mut *d)
        };
        Self::grace_period();
        drop(batch);
    }

    fn barrier(&self) {
        let batch = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(PoisonError::into_inner));
        Self::grace_period();
        drop(batch);
    }

    #[inline(always)]
    fn read_section<T>(_reader: &mut UrcuReader, f: impl FnOnce() -> T) -> T {
        struct Exit;
        impl Drop for Exit {
            #[inline(always)]
            fn drop(&mut self) {
                let _ = LOCAL.try_with(|l| l.in_read.set(l.in_read.get() - 1));
            }
        }
        LOCAL.with(|l| l.in_read.set(l.in_read.get() + 1));
        let _exit = Exit;
        f()
    }
}

impl Drop for Urcu {
    fn drop(&mut self) {
        // The last handle: free what is left after one more grace period (readers of structures that
        // used this handle may still be between quiescent states).
        if let Some(m) = Arc::get_mut(&mut self.deferred) {
            let batch = std::mem::take(m.get_mut().unwrap_or_else(PoisonError::into_inner));
            if !batch.is_empty() {
                Self::grace_period();
            }
            drop(batch);
        }
    }
}

/// A handle on this thread's liburcu QSBR registration. `!Send` and `!Sync`.
pub struct UrcuReader {
    _not_send_sync: PhantomData<*const ()>,
}

impl fmt::Debug for UrcuReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UrcuReader").field("online", &self.is_online()).finish()
    }
}

impl ReadSide for UrcuReader {
    #[inline]
    fn quiescent(&mut self) {
        LOCAL.with(|l| {
            if l.online.get() && l.in_read.get() == 0 {
                // SAFETY: the thread is registered (this handle is live) and online, and not inside a
                // read-side section, so it holds no protected reference.
                unsafe { urcu_qsbr_quiescent_state() };
            }
        });
    }

    fn offline(&mut self) {
        LOCAL.with(|l| {
            if l.online.get() && l.in_read.get() == 0 {
                // SAFETY: registered (live handle), online, and not inside a read-side section.
                unsafe { urcu_qsbr_thread_offline() };
                l.online.set(false);
            }
        });
    }

    fn online(&mut self) {
        LOCAL.with(|l| {
            if !l.online.get() {
                // SAFETY: the thread is registered (this handle is live) and offline.
                unsafe { urcu_qsbr_thread_online() };
                l.online.set(true);
            }
        });
    }

    #[inline]
    fn is_online(&self) -> bool {
        LOCAL.try_with(|l| l.online.get()).unwrap_or(false)
    }
}

impl Drop for UrcuReader {
    fn drop(&mut self) {
        // If `LOCAL` is already gone (dropped from another thread-local destructor), `Local::drop`
        // has unregistered the thread.
        let _ = LOCAL.try_with(|l| {
            let n = l.handles.get() - 1;
            l.handles.set(n);
            if n == 0 {
                // SAFETY: this was the thread's last handle, so it is registered and unregistering is
                // valid (liburcu puts it offline first).
                unsafe { urcu_qsbr_unregister_thread() };
                l.online.set(false);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn nested_handles_share_registration() {
        let u = Urcu::new();
        let mut a = u.register();
        let mut b = u.register();
        a.offline();
        assert!(!b.is_online());
        b.online();
        assert!(a.is_online());
        drop(a);
        b.quiescent();
        u.synchronize();
        drop(b);
        assert!(!LOCAL.with(|l| l.online.get()));
    }

    #[test]
    fn deferred_free_runs_after_barrier() {
        let u = Urcu::new();
        let mut r = u.register();
        let freed = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&freed);
        u.defer(move || f.store(true, Ordering::Relaxed));
        assert_eq!(u.pending(), 1);
        r.quiescent();
        u.barrier();
        assert!(freed.load(Ordering::Relaxed));
        assert_eq!(u.pending(), 0);
    }
}
