//! Quiescent-state-based reclamation (QSBR): the read side of the signature registry.
//!
//! Source: the QSBR flavour of liburcu (Desnoyers, McKenney, Stern, Dagenais, Walpole, "User-Level
//! Implementations of Read-Copy Update", IEEE TPDS 2012, §3.4 and `urcu-qsbr.c`), with a monotonic 64-bit
//! grace-period counter instead of liburcu's parity bit.
//!
//! # Protocol
//!
//! The domain holds a global grace-period counter `gp` (starts at 1, only grows) and one cache-padded
//! slot `ctr` per registered reader: `0` means *offline*, any other value is the last `gp` the reader
//! announced.
//!
//! * [`ReadSide::quiescent`]: `ctr = gp` (an `Acquire` load and a `Release` store; no read-modify-write,
//!   no fence). The reader promises it holds no reference obtained before this call.
//! * [`ReadSide::offline`]: `ctr = 0` (`Release`). [`ReadSide::online`]: `ctr = gp`, then a `SeqCst`
//!   fence.
//! * A grace period (`synchronize`, or a batch of deferred frees): `target = gp.fetch_add(1) + 1`, a
//!   `SeqCst` fence, then wait until every slot has `ctr == 0 || ctr >= target`.
//!
//! Why it is enough. A writer unlinks an object, then starts a grace period with target `t`, then frees.
//! A reader that announces `ctr >= t` loaded `gp >= t` with `Acquire` from the writer's `Release`
//! increment, so every load it makes *after* the announcement sees the unlink; the writer's `Acquire`
//! load of `ctr >= t` (or of `0`) synchronises with the reader's `Release` store, so every load the reader
//! made *before* the announcement happens before the free. A reader that was offline and comes back
//! online is the store-buffering pattern (reader: store `ctr`, load the structure; writer: store the
//! unlink, load `ctr`), hence the `SeqCst` fences on both sides: either the writer sees the reader
//! online (and waits for it), or the reader's loads see the unlink. `quiescent` needs no fence: a reader
//! whose store the writer misses still shows an old `ctr < t`, and the writer keeps waiting.
//!
//! # Deferred reclamation
//!
//! Writers [`Reclaim::retire`] objects (or use [`Reclaim::defer_free`] / [`Reclaim::defer`]); they are
//! batched ([`BATCH`] per grace period). A full batch starts a grace period without waiting for it; a
//! later `retire` polls and frees every batch whose grace period has elapsed, so a writer does not block
//! per operation. Only when more than [`MAX_SEALED_BATCHES`] batches wait does `retire` block for the
//! oldest (bounded memory). [`Reclaim::barrier`] waits for and frees everything retired so far.
//!
//! # Calling `synchronize` from a reader thread
//!
//! As in liburcu, a thread that calls [`Reclaim::synchronize`] (or `barrier`, or `retire`) is in a
//! quiescent state: its own online readers of the domain do not hold the grace period up, so a writer
//! that is also a reader does not deadlock. The one exception is code running *inside* a read-side
//! section ([`Reclaim::read_section`], i.e. inside a registry lookup: the key's `Eq` or hash): there the
//! reader really does hold references, a blocking `synchronize` or `barrier` waits for itself forever,
//! and `retire` never blocks (it lets the batch queue grow instead).
//!
//! # Example
//!
//! ```
//! use netchannel::rcu::{Qsbr, Reclaim, ReadSide};
//!
//! let domain = Qsbr::new();
//! let mut reader = domain.register();
//! reader.quiescent(); // once per burst on a polling thread
//! domain.defer_free(Box::new([0u8; 64])); // freed after a grace period
//! reader.offline(); // before sleeping
//! domain.barrier(); // frees it now: no online reader left
//! assert_eq!(domain.pending(), 0);
//! reader.online();
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::PoisonError;

use crossbeam_utils::CachePadded;

use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering, fence, spin_loop};

#[cfg(loom)]
use loom::thread::{ThreadId, current as current_thread};
#[cfg(not(loom))]
use std::thread::{ThreadId, current as current_thread};

/// How many retired objects share one grace period.
pub const BATCH: usize = 64;

/// How many full batches may wait for their grace period before `retire` blocks for the oldest.
pub const MAX_SEALED_BATCHES: usize = 16;

/// An object retired to a reclaimer: dropping it runs its destructor (frees the box, or calls the
/// closure). Built from a `Box` without another allocation.
pub struct Retired {
    ptr: *mut (),
    drop_fn: unsafe fn(*mut ()),
}

// SAFETY: a `Retired` is only built from `Send` payloads (`from_box`, `from_fn` require `Send`), and
// the payload is touched only by the single `drop` that consumes it.
unsafe impl Send for Retired {}

impl Retired {
    /// Retires a box: dropping the `Retired` drops the box.
    pub fn from_box<T: Send + 'static>(value: Box<T>) -> Self {
        /// # Safety
        ///
        /// `ptr` must come from `Box::<T>::into_raw` and be passed here exactly once.
        unsafe fn drop_box<T>(ptr: *mut ()) {
            // SAFETY: the caller passes the pointer from `Box::<T>::into_raw`, exactly once.
            drop(unsafe { Box::from_raw(ptr.cast::<T>()) });
        }
        Self { ptr: Box::into_raw(value).cast(), drop_fn: drop_box::<T> }
    }

    /// Retires a closure: dropping the `Retired` calls it.
    pub fn from_fn<F: FnOnce() + Send + 'static>(f: F) -> Self {
        /// # Safety
        ///
        /// `ptr` must come from `Box::<F>::into_raw` and be passed here exactly once.
        unsafe fn call<F: FnOnce()>(ptr: *mut ()) {
            // SAFETY: the caller passes the pointer from `Box::<F>::into_raw`, exactly once.
            let f = unsafe { Box::from_raw(ptr.cast::<F>()) };
            f();
        }
        Self { ptr: Box::into_raw(Box::new(f)).cast(), drop_fn: call::<F> }
    }
}

impl Drop for Retired {
    fn drop(&mut self) {
        let this = ManuallyDrop::new(Self { ptr: self.ptr, drop_fn: self.drop_fn });
        // SAFETY: `ptr` and `drop_fn` were paired by `from_box`/`from_fn`, and `drop` runs once.
        unsafe { (this.drop_fn)(this.ptr) }
    }
}

impl fmt::Debug for Retired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retired").field("ptr", &self.ptr).finish_non_exhaustive()
    }
}

/// The per-thread read side of a reclamation domain.
pub trait ReadSide {
    /// Announces a quiescent state: the thread holds no reference obtained from a protected structure
    /// before this call. Call it once per burst on a polling thread. A no-op while offline.
    fn quiescent(&mut self);
    /// Goes offline (before a sleep or a blocking call): grace periods stop waiting for this reader,
    /// and it must not read protected structures until [`online`](Self::online).
    fn offline(&mut self);
    /// Comes back online after [`offline`](Self::offline) (a no-op if already online).
    fn online(&mut self);
    /// Whether the reader is online (a lookup through an offline reader takes the writer lock).
    fn is_online(&self) -> bool;
}

/// A QSBR reclamation domain: readers, grace periods and deferred frees.
///
/// # Safety
///
/// The registry's lock-free lookups are sound only if an implementation guarantees:
///
/// 1. [`synchronize`](Self::synchronize) returns only after every reader `r` with `owns(r)` that was
///    online when it was called has announced a quiescent state, gone offline, or been dropped since
///    (a reader of the calling thread that is not inside [`read_section`](Self::read_section) counts as
///    quiescent), with happens-before from the reader's earlier loads to the return, and from the
///    writer's stores before the call to the reader's loads after its announcement.
/// 2. A [`Retired`] passed to [`retire`](Self::retire) is dropped only after such a grace period that
///    began after the `retire` call.
/// 3. Inside [`read_section`](Self::read_section), the reader does not become quiescent or offline.
pub unsafe trait Reclaim: Clone + Send + Sync + 'static {
    /// The per-thread reader handle (`!Sync`).
    type Reader: ReadSide;

    /// Registers the calling thread as a reader; the reader starts online.
    fn register(&self) -> Self::Reader;
    /// Whether `reader` belongs to this domain (its quiescent states are the ones this domain waits
    /// for).
    fn owns(&self, reader: &Self::Reader) -> bool;
    /// Waits for a grace period: every online reader has passed a quiescent state after the call
    /// began. See the module docs for calls from a reader thread.
    fn synchronize(&self);
    /// Hands `retired` to the domain, which drops it after a grace period (batched; blocks only when
    /// too many batches are waiting).
    fn retire(&self, retired: Retired);
    /// Waits until everything retired before the call has been dropped.
    fn barrier(&self);
    /// Runs `f` as a read-side section of `reader`: no quiescent state of `reader` (or of this thread,
    /// for thread-global domains) takes effect inside it, and a `synchronize` from inside it on the same
    /// thread does not count this reader as quiescent.
    fn read_section<T>(reader: &mut Self::Reader, f: impl FnOnce() -> T) -> T;

    /// Frees `value` after a grace period.
    fn defer_free<T: Send + 'static>(&self, value: Box<T>) {
        self.retire(Retired::from_box(value));
    }
    /// Calls `f` after a grace period.
    fn defer<F: FnOnce() + Send + 'static>(&self, f: F) {
        self.retire(Retired::from_fn(f));
    }
}

/// One reader's announcement slot, on its own cache line(s).
struct Slot {
    /// 0: offline; otherwise the last grace-period counter this reader announced.
    ctr: CachePadded<AtomicU64>,
    /// Set while the owner is inside `read_section`; read only by the owner thread.
    in_read: AtomicBool,
    owner: ThreadId,
}

#[derive(Default)]
struct Deferred {
    current: Vec<Retired>,
    /// Full batches with the grace-period target they wait for, oldest first.
    sealed: VecDeque<(u64, Vec<Retired>)>,
}

impl Deferred {
    fn len(&self) -> usize {
        self.current.len() + self.sealed.iter().map(|(_, b)| b.len()).sum::<usize>()
    }
}

struct Inner {
    /// The grace-period counter; starts at 1 (0 in a slot means offline).
    gp: CachePadded<AtomicU64>,
    readers: Mutex<Vec<Arc<Slot>>>,
    deferred: Mutex<Deferred>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits with a backoff: spin, then yield, then sleep (the waiting writer must not starve the readers
/// it waits for on a small machine).
fn backoff(round: &mut u32) {
    *round = round.saturating_add(1);
    #[cfg(loom)]
    spin_loop();
    #[cfg(not(loom))]
    if *round < 16 {
        spin_loop();
    } else if *round < 256 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

impl Inner {
    /// Starts a grace period and returns its target.
    fn start_gp(&self) -> u64 {
        // Release: publishes the writer's unlinks before this call to every reader that loads the new
        // value; pairs with the Acquire load in `QsbrReader::quiescent`/`online`.
        let target = self.gp.fetch_add(1, Ordering::Release) + 1;
        // SeqCst: the store-buffering half of the writer (unlink, then load `ctr`); pairs with the
        // SeqCst fence in `QsbrReader::online`.
        fence(Ordering::SeqCst);
        target
    }

    /// Whether `slot` has passed `target`, as seen from thread `me`.
    fn passed(slot: &Slot, target: u64, me: ThreadId) -> bool {
        // Acquire: the reader's loads before its announcement happen before what the writer does next
        // (free); pairs with the Release stores in `QsbrReader::quiescent`/`offline`/`drop`.
        let ctr = slot.ctr.load(Ordering::Acquire);
        // Relaxed: `in_read` is read only by its owner thread (program order).
        ctr == 0 || ctr >= target || (slot.owner == me && !slot.in_read.load(Ordering::Relaxed))
    }

    /// Polls once: whether every reader has passed `target`.
    fn poll(&self, target: u64) -> bool {
        let me = current_thread().id();
        lock(&self.readers).iter().all(|s| Self::passed(s, target, me))
    }

    /// Waits until every reader has passed `target`. With `bail`, returns `false` instead of waiting
    /// for a reader of this thread that is inside a read-side section (it would wait forever).
    fn wait(&self, target: u64, bail: bool) -> bool {
        let me = current_thread().id();
        // Snapshot under the lock, wait outside it: readers registering or unregistering meanwhile
        // must not block on a waiting writer. A reader registered after the snapshot went online after
        // `start_gp` (the lock orders it), so it loads the new `gp` and needs no waiting for.
        let mut waiting: Vec<Arc<Slot>> =
            lock(&self.readers).iter().filter(|s| !Self::passed(s, target, me)).cloned().collect();
        if bail && waiting.iter().any(|s| s.owner == me) {
            return false;
        }
        let mut round = 0;
        while !waiting.is_empty() {
            waiting.retain(|s| !Self::passed(s, target, me));
            if !waiting.is_empty() {
                backoff(&mut round);
            }
        }
        true
    }

    /// Takes every sealed batch whose grace period has elapsed (oldest first).
    fn take_ready(&self, d: &mut Deferred) -> Vec<Vec<Retired>> {
        let mut ready = Vec::new();
        while let Some(&(target, _)) = d.sealed.front() {
            if !self.poll(target) {
                break;
            }
            if let Some((_, batch)) = d.sealed.pop_front() {
                ready.push(batch);
            }
        }
        ready
    }

    /// Takes every sealed batch whose target is at most `target`, a grace period that has been waited
    /// for. (Polling again could fail spuriously: a reader seen offline may have come back online with
    /// an older counter, which is safe, see `online`, but does not pass the poll.)
    fn take_upto(d: &mut Deferred, target: u64) -> Vec<Vec<Retired>> {
        let mut ready = Vec::new();
        while d.sealed.front().is_some_and(|b| b.0 <= target) {
            if let Some((_, batch)) = d.sealed.pop_front() {
                ready.push(batch);
            }
        }
        ready
    }

    /// Seals the current batch (if any) under a new grace period.
    fn seal(&self, d: &mut Deferred) {
        if !d.current.is_empty() {
            let target = self.start_gp();
            let batch = std::mem::take(&mut d.current);
            d.sealed.push_back((target, batch));
        }
    }
}

/// The pure-Rust QSBR domain: a cheap, cloneable handle.
#[derive(Clone)]
pub struct Qsbr {
    inner: Arc<Inner>,
}

impl fmt::Debug for Qsbr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qsbr")
            // Relaxed: diagnostic only.
            .field("gp", &self.inner.gp.load(Ordering::Relaxed))
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

impl Default for Qsbr {
    fn default() -> Self {
        Self::new()
    }
}

impl Qsbr {
    /// A new domain with no readers.
    #[must_use]
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                gp: CachePadded::new(AtomicU64::new(1)),
                readers: Mutex::new(Vec::new()),
                deferred: Mutex::new(Deferred::default()),
            }),
        }
    }

    /// How many retired objects wait for a grace period.
    #[must_use]
    pub fn pending(&self) -> usize {
        lock(&self.inner.deferred).len()
    }

    /// How many readers are registered.
    #[must_use]
    pub fn readers(&self) -> usize {
        lock(&self.inner.readers).len()
    }

    /// Frees every batch whose grace period has elapsed, without waiting; returns how many objects it
    /// freed.
    pub fn try_reclaim(&self) -> usize {
        let ready = {
            let mut d = lock(&self.inner.deferred);
            self.inner.take_ready(&mut d)
        };
        ready.iter().map(Vec::len).sum()
    }
}

// SAFETY: (1) `synchronize` starts a grace period with `start_gp` and `wait`s until every slot passed
// it (see the module docs for the ordering argument); (2) every retired object goes into a batch that
// is sealed with a target taken after it was pushed, and is dropped only after `poll`/`wait` saw every
// reader pass that target, or when the last handle (and so every reader) is gone; (3) `read_section`
// holds `&mut QsbrReader`, so its own `quiescent`/`offline` cannot run inside, and it sets `in_read` so
// that same-thread grace periods wait for it.
unsafe impl Reclaim for Qsbr {
    type Reader = QsbrReader;

    fn register(&self) -> QsbrReader {
        let slot = Arc::new(Slot {
            ctr: CachePadded::new(AtomicU64::new(0)),
            in_read: AtomicBool::new(false),
            owner: current_thread().id(),
        });
        lock(&self.inner.readers).push(Arc::clone(&slot));
        let mut reader =
            QsbrReader { domain: Arc::clone(&self.inner), slot, online: false, _not_sync: PhantomData };
        reader.online();
        reader
    }

    fn owns(&self, reader: &QsbrReader) -> bool {
        Arc::ptr_eq(&self.inner, &reader.domain)
    }

    fn synchronize(&self) {
        let target = self.inner.start_gp();
        self.inner.wait(target, false);
    }

    fn retire(&self, retired: Retired) {
        let (ready, oldest) = {
            let mut d = lock(&self.inner.deferred);
            d.current.push(retired);
            if d.current.len() >= BATCH {
                self.inner.seal(&mut d);
            }
            let ready = self.inner.take_ready(&mut d);
            let oldest = (d.sealed.len() > MAX_SEALED_BATCHES).then(|| d.sealed.front().map(|b| b.0));
            (ready, oldest.flatten())
        };
        drop(ready);
        if let Some(target) = oldest
            && self.inner.wait(target, true)
        {
            let ready = Inner::take_upto(&mut lock(&self.inner.deferred), target);
            drop(ready);
        }
    }

    fn barrier(&self) {
        let target = {
            let mut d = lock(&self.inner.deferred);
            self.inner.seal(&mut d);
            d.sealed.back().map(|b| b.0)
        };
        if let Some(target) = target {
            self.inner.wait(target, false);
            let ready = Inner::take_upto(&mut lock(&self.inner.deferred), target);
            drop(ready);
        }
    }

    #[inline(always)]
    fn read_section<T>(reader: &mut QsbrReader, f: impl FnOnce() -> T) -> T {
        struct Exit<'a>(&'a AtomicBool);
        impl Drop for Exit<'_> {
            #[inline(always)]
            fn drop(&mut self) {
                // Relaxed: read only by this thread (`Inner::passed`).
                self.0.store(false, Ordering::Relaxed);
            }
        }
        // Relaxed: read only by this thread (`Inner::passed`).
        reader.slot.in_read.store(true, Ordering::Relaxed);
        let _exit = Exit(&reader.slot.in_read);
        f()
    }
}

/// A registered reader of a [`Qsbr`] domain. `!Sync` and `!Send`: one per thread.
pub struct QsbrReader {
    domain: Arc<Inner>,
    slot: Arc<Slot>,
    online: bool,
    _not_sync: PhantomData<*const ()>,
}

impl fmt::Debug for QsbrReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QsbrReader")
            .field("online", &self.online)
            // Relaxed: diagnostic only.
            .field("ctr", &self.slot.ctr.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl ReadSide for QsbrReader {
    #[inline(always)]
    fn quiescent(&mut self) {
        if self.online {
            // Acquire: the writer's unlinks before its grace period happen before our later loads;
            // pairs with the Release increment in `Inner::start_gp`.
            let gp = self.domain.gp.load(Ordering::Acquire);
            // Release: our earlier loads happen before the writer's free; pairs with the Acquire load
            // in `Inner::passed`.
            self.slot.ctr.store(gp, Ordering::Release);
        }
    }

    fn offline(&mut self) {
        if self.online {
            // Release: our earlier loads happen before the writer's free; pairs with the Acquire load
            // in `Inner::passed`.
            self.slot.ctr.store(0, Ordering::Release);
            self.online = false;
        }
    }

    fn online(&mut self) {
        if !self.online {
            // Acquire: as in `quiescent`; pairs with the Release increment in `Inner::start_gp`.
            let gp = self.domain.gp.load(Ordering::Acquire);
            // Relaxed: ordered before our later loads by the fence below.
            self.slot.ctr.store(gp, Ordering::Relaxed);
            // SeqCst: store-buffering with the writer (we store `ctr` then load the structure; it stores
            // the unlink then loads `ctr`); pairs with the SeqCst fence in `Inner::start_gp`.
            fence(Ordering::SeqCst);
            self.online = true;
        }
    }

    #[inline(always)]
    fn is_online(&self) -> bool {
        self.online
    }
}

impl Drop for QsbrReader {
    fn drop(&mut self) {
        // Offline first (a Release store, see `offline`), so a writer waiting on us never blocks our
        // unregistration.
        self.offline();
        let mut readers = lock(&self.domain.readers);
        if let Some(i) = readers.iter().position(|s| Arc::ptr_eq(s, &self.slot)) {
            readers.swap_remove(i);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    #[test]
    fn retire_frees_after_grace_period() {
        let q = Qsbr::new();
        let freed = std::sync::Arc::new(AtomicUsize::new(0));
        let mut r = q.register();
        for _ in 0..BATCH {
            let f = std::sync::Arc::clone(&freed);
            q.defer(move || {
                f.fetch_add(1, Ordering::Relaxed);
            });
        }
        // The batch is sealed; the own-thread reader does not hold it up (the writer is quiescent).
        q.try_reclaim();
        assert_eq!(freed.load(Ordering::Relaxed), BATCH);
        q.defer_free(Box::new(5u64));
        assert_eq!(q.pending(), 1);
        r.quiescent();
        q.barrier();
        assert_eq!(q.pending(), 0);
    }

    #[test]
    fn online_reader_of_other_thread_holds_grace_period() {
        let q = Qsbr::new();
        let (to_reader, rx) = mpsc::channel::<u32>();
        let (to_main, from_reader) = mpsc::channel::<()>();
        let q2 = q.clone();
        let t = std::thread::spawn(move || {
            let mut r = q2.register();
            to_main.send(()).unwrap();
            // Wait (online, not quiescent) for the go signal, then announce.
            let _ = rx.recv();
            r.quiescent();
            let _ = rx.recv();
            drop(r);
        });
        from_reader.recv().unwrap();
        let freed = std::sync::Arc::new(AtomicBool::new(false));
        let f = std::sync::Arc::clone(&freed);
        q.defer(move || f.store(true, Ordering::Relaxed));
        {
            let mut d = lock(&q.inner.deferred);
            q.inner.seal(&mut d);
        }
        q.try_reclaim();
        assert!(!freed.load(Ordering::Relaxed), "freed while a reader had not passed a quiescent state");
        to_reader.send(1).unwrap();
        q.barrier();
        assert!(freed.load(Ordering::Relaxed));
        to_reader.send(2).unwrap();
        t.join().unwrap();
        assert_eq!(q.readers(), 0);
    }

    #[test]
    fn offline_reader_does_not_hold_grace_period() {
        let q = Qsbr::new();
        let mut r = q.register();
        let q2 = q.clone();
        r.offline();
        assert!(!r.is_online());
        // Another thread synchronizes while we are offline: must not wait for us.
        std::thread::spawn(move || q2.synchronize()).join().unwrap();
        r.online();
        assert!(r.is_online());
        r.quiescent();
    }

    #[test]
    fn synchronize_from_online_reader_thread_does_not_deadlock() {
        let q = Qsbr::new();
        let _r = q.register();
        q.synchronize();
        q.barrier();
    }

    #[test]
    fn domain_drop_frees_everything() {
        let freed = std::sync::Arc::new(AtomicUsize::new(0));
        {
            let q = Qsbr::new();
            let _r = q.register();
            for _ in 0..10 {
                let f = std::sync::Arc::clone(&freed);
                q.defer(move || {
                    f.fetch_add(1, Ordering::Relaxed);
                });
            }
        }
        assert_eq!(freed.load(Ordering::Relaxed), 10);
    }
}
