//! [`AcceptQueue`]: one listener's accept queues across cores, under the Stock, Fine or Affinity policy.
//!
//! # Structure
//!
//! * Per-core bounded queues (one for [`Policy::Stock`]), each behind its own mutex; the backlog is split
//!   evenly (`backlog / cores`, at least 1 per core). A full queue refuses an enqueue and hands the
//!   connection back ([`EnqueueError::Full`]) so the caller can reset it.
//! * Per-core accept state (the [`StealPolicy`] or [`FineCursor`], the [`StealLog`], counters) behind a
//!   second per-core mutex that only that core's acceptors and the migration round take.
//! * Two one-cache-line bit vectors: the busy flags (written under the owning queue's lock, read without
//!   a lock by acceptors choosing victims) and the cores with waiting acceptors, sleeping threads or a
//!   registered waker (written under the core's wait lock, read by enqueuers choosing whom to wake).
//!
//! # Waiting without lost wakeups
//!
//! `accept()` on core `u` tries the policy's order (local, then busy victims); if nothing is there it
//! *registers* as a sleeper of `u` (wait lock, sleeper count, sleeping bit), then *re-checks every
//! queue under that queue's lock*, asking "is there a connection I may take" with the busy flags read
//! under the same locks, and only then sleeps until it is handed a wake token. An enqueue on core `v`
//! pushes under `v`'s lock, then hands a token to a sleeper of `v` if there is one, else (Fine, Stock, or
//! Affinity with `v` busy) to a sleeper of another core that may take from `v` (Affinity: a non-busy
//! core). This is the order the Affinity-Accept paper prescribes (§3.3.1: register on the local wait
//! queue first, then check the other queues, then sleep); the paper's implementation skipped it and
//! relied on timeouts, we do not.
//!
//! Why no wakeup is lost: for any queue `v`, the waiter's re-check and the enqueuer's push are critical
//! sections of the same mutex, so one precedes the other. If the push came first, the re-check sees the
//! connection (and `v`'s busy flag as the push left it) and the waiter does not sleep. If the re-check
//! came first, the waiter's registration happens-before the enqueuer's lock of `v`, so the enqueuer sees
//! the sleeping bit and the busy flags the waiter saw, and hands it a token; a token given before the
//! waiter reaches the condition variable is kept in the wait state and seen under the wait lock. The
//! loom models in `tests/loom_accept.rs` check this protocol.
//!
//! A token wakes one thread, which may then take a *different* connection than the one that caused the
//! wake (its local queue comes first). So a woken thread that took a connection passes one wake on for
//! any queue that still holds connections; a woken thread that found nothing lets the wake lapse (the
//! connection that caused it is gone).
//!
//! ## Readiness: the waker path
//!
//! [`AcceptQueue::poll_accept`] is the same protocol for an event loop or async task that must not
//! block: a waiter that is a [`Waker`] instead of a thread. Each core's wait state has one waker slot
//! beside its sleeper count; a filled slot counts as a waiter (it sets the core's bit in the waiting
//! set, under the wait lock, exactly as the first sleeper does). `poll_accept` tries the policy's order;
//! if nothing is there it registers the waker under the wait lock (replacing the core's earlier one),
//! re-checks every queue under its lock as a sleeper does, and returns `Pending` only if the re-check
//! found nothing; otherwise it withdraws the registration and tries again. The lost-wakeup argument above
//! holds word for word with "registers the waker" for "registers as a sleeper": an enqueue whose push
//! follows the re-check sees the core's waiting bit and reaches `give_token`, which, when the core has no
//! sleeper without a token, *takes* the waker out of the slot (a wake is one-shot), notes that it was
//! woken, and wakes it after dropping the wait lock. A wake before `Pending` is returned is not lost
//! either: the executor polls again. Choosing the core is unchanged (its own core first, else under
//! Affinity a non-busy core when the queue is busy, under Fine and Stock any core), and so is the
//! pass-on rule: the next `poll_accept` of a woken waker's core that returns a connection (or an error)
//! passes one wake on, and one that finds nothing again re-registers and lets the wake lapse.
//! [`AcceptQueue::close`] and [`AcceptQueue::retire`] take and wake registered wakers as they notify
//! sleepers. Registering allocates nothing beyond the executor's `Waker::clone` (skipped when the same
//! waker is registered again), and waking allocates nothing.
//!
//! One slot per core means one polling task per core (the core's event loop): a second task's
//! registration replaces the first's, which is then not woken. And a registration outlives a task that
//! stops polling, where it would take a wake meant for a waiting acceptor, so a `poll_accept` that
//! returns `Ready` withdraws its core's registration, and a task that gives up while pending calls
//! [`AcceptQueue::cancel_poll`] (which also passes on a wake it had been given).
//!
//! # Retiring a core
//!
//! [`AcceptQueue::retire`] is the exit of a core's worker: its queued connections move, in order, to the
//! live core with the shortest queue (its *heir*, regardless of the heir's bound: the retired core's
//! share of the backlog moves with them, so memory stays bounded by the backlog), and later enqueues that
//! name the retired core go to the heir. Nothing is dropped; with no live core left the connections come
//! back to the caller.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Deref;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use netchannel::signature::FlowGroup;
use netchannel::steering::FlowSteering;

use crate::policy::{
    AcceptOrder, AffinityConfig, BusyChange, BusyTracker, ConfigError, CoreSet, FineCursor, MAX_CORES,
    MigrationController, MigrationReport, StealLog, StealPolicy,
};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering, lock};

/// Which accept-queue design a listener uses. All three have the same interface, so they can be
/// compared in one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Stock-Accept: one queue and one lock for all cores (the Linux listen socket of the paper).
    Stock,
    /// Fine-Accept: per-core queues with their own locks; every accept scans the queues round-robin,
    /// ignoring where a connection arrived.
    Fine,
    /// Affinity-Accept: per-core queues, local accepts first, stealing by non-busy cores from busy ones,
    /// flow-group migration.
    Affinity(AffinityConfig),
}

impl Policy {
    /// Affinity-Accept with the paper's parameters.
    #[must_use]
    pub fn affinity() -> Self {
        Self::Affinity(AffinityConfig::default())
    }

    /// A short name for reports: `stock`, `fine` or `affinity`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Stock => "stock",
            Self::Fine => "fine",
            Self::Affinity(_) => "affinity",
        }
    }
}

/// A connection handed back by [`AcceptQueue::enqueue`].
#[derive(Clone, PartialEq, Eq)]
pub enum EnqueueError<C> {
    /// The queue is at its bound: reset the connection.
    Full(C),
    /// The listener is closed, or every core has retired.
    Closed(C),
    /// The core number is out of range.
    NoSuchCore(C),
}

impl<C> EnqueueError<C> {
    /// The connection that was not queued.
    pub fn into_inner(self) -> C {
        match self {
            Self::Full(c) | Self::Closed(c) | Self::NoSuchCore(c) => c,
        }
    }
}

impl<C> fmt::Debug for EnqueueError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full(_) => "Full(..)",
            Self::Closed(_) => "Closed(..)",
            Self::NoSuchCore(_) => "NoSuchCore(..)",
        })
    }
}

impl<C> fmt::Display for EnqueueError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full(_) => "the accept queue is full",
            Self::Closed(_) => "the listener is closed",
            Self::NoSuchCore(_) => "no such core",
        })
    }
}

impl<C> std::error::Error for EnqueueError<C> {}

/// Why an accept returned no connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptError {
    /// Nothing this core may take right now ([`AcceptQueue::try_accept`], or a timeout ran out).
    WouldBlock,
    /// The listener is closed and every queue is empty.
    Closed,
    /// This core has retired.
    Retired,
    /// The core number is out of range.
    NoSuchCore,
}

impl fmt::Display for AcceptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::WouldBlock => "no connection available",
            Self::Closed => "the listener is closed",
            Self::Retired => "this core has retired",
            Self::NoSuchCore => "no such core",
        })
    }
}

impl std::error::Error for AcceptError {}

/// A connection taken off an accept queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted<C> {
    /// The connection handle.
    pub conn: C,
    /// Its flow group.
    pub group: FlowGroup,
    /// The core it arrived on (the one named at enqueue: where the NIC delivers its packets).
    pub arrived_on: usize,
    /// The core whose queue it was taken from (differs from `arrived_on` after a retirement; always 0
    /// under [`Policy::Stock`]).
    pub queue: usize,
    /// Whether the accepting core is not `arrived_on`: its packets arrive elsewhere, so the stack
    /// should redirect them (for Affinity-Accept, a stolen connection).
    pub remote: bool,
}

/// What [`AcceptQueue::retire`] did with the retiring core's connections.
#[derive(Debug)]
pub struct Retirement<C> {
    /// How many queued connections moved to the heir.
    pub moved: usize,
    /// The live core that took them (and takes later enqueues naming the retired core).
    pub heir: Option<usize>,
    /// Connections no live core could take (only when the last core retires): `(arrived_on, group,
    /// conn)`, for the caller to reset.
    pub orphans: Vec<(usize, FlowGroup, C)>,
}

/// Counters of one core.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreStats {
    /// Connections in this core's queue now (Stock: the shared queue is core 0's).
    pub queue_len: usize,
    /// Whether the core is busy (Affinity only).
    pub busy: bool,
    /// Whether the core has retired.
    pub retired: bool,
    /// Connections this core's queue took from `enqueue` (Stock: all on core 0).
    pub enqueued: u64,
    /// Enqueues this core's queue refused because it was full.
    pub rejected: u64,
    /// Accepts on this core of connections that arrived on this core.
    pub local_accepts: u64,
    /// Accepts on this core of connections that arrived on another core (Affinity: steals).
    pub remote_accepts: u64,
    /// Connections taken from this core's queue by other cores' accepts.
    pub stolen_from: u64,
    /// Connections moved into this queue by retirements.
    pub handed_in: u64,
    /// Connections moved out of this queue by its retirement.
    pub handed_out: u64,
    /// Flow groups migrated to this core.
    pub migrations_in: u64,
}

/// A snapshot of a listener's counters (each core's read under its own locks, so not one instant).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Per-core counters.
    pub cores: Vec<CoreStats>,
    /// Migration rounds run.
    pub migration_rounds: u64,
    /// Connections removed by [`AcceptQueue::take_all`] and retirement orphans.
    pub taken: u64,
}

impl Stats {
    /// All connections queued by `enqueue`.
    #[must_use]
    pub fn enqueued(&self) -> u64 {
        self.cores.iter().map(|c| c.enqueued).sum()
    }

    /// All refused enqueues.
    #[must_use]
    pub fn rejected(&self) -> u64 {
        self.cores.iter().map(|c| c.rejected).sum()
    }

    /// All accepts.
    #[must_use]
    pub fn accepted(&self) -> u64 {
        self.cores.iter().map(|c| c.local_accepts + c.remote_accepts).sum()
    }

    /// All connections queued now.
    #[must_use]
    pub fn queued(&self) -> u64 {
        self.cores.iter().map(|c| c.queue_len as u64).sum()
    }

    /// All flow-group migrations.
    #[must_use]
    pub fn migrations(&self) -> u64 {
        self.cores.iter().map(|c| c.migrations_in).sum()
    }
}

/// Keeps per-core state on its own pair of cache lines (the adjacent-line prefetcher pulls pairs).
#[derive(Debug)]
#[repr(align(128))]
struct Padded<T>(T);

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A [`CoreSet`] of atomics: one cache line.
#[derive(Debug)]
#[repr(align(64))]
struct AtomicCoreSet([AtomicU64; MAX_CORES / 64]);

impl AtomicCoreSet {
    fn new() -> Self {
        Self(std::array::from_fn(|_| AtomicU64::new(0)))
    }

    fn set(&self, core: usize, on: bool, order: Ordering) {
        let bit = 1u64 << (core % 64);
        if on {
            self.0[core / 64].fetch_or(bit, order);
        } else {
            self.0[core / 64].fetch_and(!bit, order);
        }
    }

    fn contains(&self, core: usize, order: Ordering) -> bool {
        self.0[core / 64].load(order) & (1 << (core % 64)) != 0
    }

    fn load(&self, cores: usize, order: Ordering) -> CoreSet {
        let mut words = [0u64; MAX_CORES / 64];
        for (w, a) in words.iter_mut().zip(&self.0).take(cores.div_ceil(64)) {
            *w = a.load(order);
        }
        CoreSet::from_words(words)
    }
}

const NO_HEIR: usize = usize::MAX;

#[derive(Debug)]
struct Item<C> {
    arrived_on: usize,
    group: FlowGroup,
    conn: C,
}

/// One bounded queue and what its lock protects.
#[derive(Debug)]
struct Queue<C> {
    items: VecDeque<Item<C>>,
    cap: usize,
    /// Affinity only.
    tracker: Option<BusyTracker>,
    retired: bool,
    heir: usize,
    enqueued: u64,
    rejected: u64,
    stolen_from: u64,
    handed_in: u64,
    handed_out: u64,
}

impl<C> Queue<C> {
    fn busy(&self) -> bool {
        self.tracker.as_ref().is_some_and(BusyTracker::is_busy)
    }
}

#[derive(Debug)]
struct QueueSlot<C> {
    queue: Mutex<Queue<C>>,
    /// A copy of `queue.items.len()`, stored under the lock: a hint for skipping empty queues.
    len: AtomicUsize,
}

#[derive(Debug)]
enum Chooser {
    Stock,
    Fine(FineCursor),
    Affinity(StealPolicy),
}

/// One core's accept-side state.
#[derive(Debug)]
struct AcceptSide {
    chooser: Chooser,
    log: StealLog,
    retired: bool,
    local_accepts: u64,
    remote_accepts: u64,
    migrations_in: u64,
}

/// One core's waiters: sleeping threads and at most one registered [`Waker`].
#[derive(Debug, Default)]
struct WaitState {
    /// Threads registered as waiting on this core.
    sleepers: usize,
    /// Wakes handed to them and not yet consumed (`tokens <= sleepers`).
    tokens: usize,
    /// The waker registered by [`AcceptQueue::poll_accept`]: one slot per core, taken (one-shot) by the
    /// wake that uses it.
    waker: Option<Waker>,
    /// The registered waker was taken and woken as a wake token (not by `close` or `retire`), and its
    /// task has not polled since: the waker-side analogue of `tokens`.
    waker_woken: bool,
    retired: bool,
}

impl WaitState {
    /// Whether this core counts as having a waiter: its bit in the `sleeping` set.
    fn waiting(&self) -> bool {
        self.sleepers > 0 || self.waker.is_some()
    }
}

#[derive(Debug)]
struct PerCore {
    accept: Mutex<AcceptSide>,
    wait: Mutex<WaitState>,
    cv: Condvar,
}

#[derive(Debug)]
struct RetireState {
    retired: CoreSet,
    taken: u64,
}

/// The accept queue of one listener across `cores` cores, generic over the connection handle `C`.
///
/// Core numbers are `0..cores`; core `c` is also RX queue `c` of the [`FlowSteering`] that
/// [`balance`](Self::balance) drives. Every method takes `&self`: share it with an `Arc`.
///
/// `enqueue`, `try_accept`, `retire`, `balance_at` and `stats` read no clock, so a single-threaded
/// simulator can drive a real `AcceptQueue` with virtual time; only the blocking accepts and
/// [`balance`](Self::balance) read [`Instant::now`].
#[derive(Debug)]
pub struct AcceptQueue<C> {
    policy: Policy,
    cores: usize,
    per_core_max: usize,
    queues: Box<[Padded<QueueSlot<C>>]>,
    percore: Box<[Padded<PerCore>]>,
    busy: AtomicCoreSet,
    sleeping: AtomicCoreSet,
    closed: AtomicBool,
    retire: Mutex<RetireState>,
    migration: Mutex<Option<MigrationController>>,
    epoch: Instant,
}

impl<C> AcceptQueue<C> {
    /// A listener over `cores` cores (at most [`MAX_CORES`]) with room for `backlog` connections, split
    /// evenly: each core's queue holds `max(1, backlog / cores)` (Stock: one queue of `backlog`).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for zero or too many cores, a zero backlog or bad Affinity thresholds.
    pub fn new(cores: usize, backlog: usize, policy: Policy) -> Result<Self, ConfigError> {
        if cores == 0 {
            return Err(ConfigError::NoCores);
        }
        if cores > MAX_CORES {
            return Err(ConfigError::TooManyCores { cores, max: MAX_CORES });
        }
        if backlog == 0 {
            return Err(ConfigError::ZeroBacklog);
        }
        if let Policy::Affinity(cfg) = &policy {
            cfg.validate()?;
        }
        let per_core_max = (backlog / cores).max(1);
        let (nqueues, cap) = match policy {
            Policy::Stock => (1, backlog),
            _ => (cores, per_core_max),
        };
        let queues = (0..nqueues)
            .map(|_| {
                Padded(QueueSlot {
                    queue: Mutex::new(Queue {
                        items: VecDeque::with_capacity(cap),
                        cap,
                        tracker: match &policy {
                            Policy::Affinity(cfg) => Some(BusyTracker::new(cap, cfg)),
                            _ => None,
                        },
                        retired: false,
                        heir: NO_HEIR,
                        enqueued: 0,
                        rejected: 0,
                        stolen_from: 0,
                        handed_in: 0,
                        handed_out: 0,
                    }),
                    len: AtomicUsize::new(0),
                })
            })
            .collect();
        let percore = (0..cores)
            .map(|c| {
                Padded(PerCore {
                    accept: Mutex::new(AcceptSide {
                        chooser: match &policy {
                            Policy::Stock => Chooser::Stock,
                            Policy::Fine => Chooser::Fine(FineCursor::new(c, cores)),
                            Policy::Affinity(cfg) => Chooser::Affinity(StealPolicy::new(c, cores, cfg)),
                        },
                        log: StealLog::new(cores),
                        retired: false,
                        local_accepts: 0,
                        remote_accepts: 0,
                        migrations_in: 0,
                    }),
                    wait: Mutex::new(WaitState::default()),
                    cv: Condvar::new(),
                })
            })
            .collect();
        let migration = match &policy {
            Policy::Affinity(cfg) => Some(MigrationController::new(cfg)),
            _ => None,
        };
        Ok(Self {
            policy,
            cores,
            per_core_max,
            queues,
            percore,
            busy: AtomicCoreSet::new(),
            sleeping: AtomicCoreSet::new(),
            closed: AtomicBool::new(false),
            retire: Mutex::new(RetireState { retired: CoreSet::new(), taken: 0 }),
            migration: Mutex::new(migration),
            epoch: Instant::now(),
        })
    }

    /// The policy.
    #[must_use]
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// How many cores.
    #[must_use]
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// Each core's share of the backlog (the *maximum local accept-queue length*).
    #[must_use]
    pub fn per_core_max(&self) -> usize {
        self.per_core_max
    }

    fn is_stock(&self) -> bool {
        self.policy == Policy::Stock
    }

    fn qidx(&self, core: usize) -> usize {
        if self.is_stock() { 0 } else { core }
    }

    /// Queues `conn`, whose packets arrive on `core` and which belongs to flow `group`, on `core`'s
    /// queue (Stock: the one queue; a retired core: its heir's queue). Returns the core whose queue
    /// took it, and wakes an acceptor that may take it: one on that core first, else (Fine, Stock, or
    /// Affinity when that core is busy) one on another (Affinity: non-busy) core.
    ///
    /// # Errors
    ///
    /// The connection comes back in [`EnqueueError::Full`] when the queue is at its bound,
    /// [`EnqueueError::Closed`] after [`close`](Self::close) or when every core retired,
    /// [`EnqueueError::NoSuchCore`] for a bad core.
    pub fn enqueue(&self, core: usize, group: FlowGroup, conn: C) -> Result<usize, EnqueueError<C>> {
        if core >= self.cores {
            return Err(EnqueueError::NoSuchCore(conn));
        }
        // Acquire: pairs with the Release store in `close`; a late enqueue is still drained.
        if self.closed.load(Ordering::Acquire) {
            return Err(EnqueueError::Closed(conn));
        }
        let mut target = self.qidx(core);
        for _ in 0..=self.cores {
            let slot = &self.queues[target];
            let mut q = lock(&slot.queue);
            if q.retired {
                if q.heir == NO_HEIR {
                    return Err(EnqueueError::Closed(conn));
                }
                target = q.heir;
                continue;
            }
            if q.items.len() >= q.cap {
                q.rejected += 1;
                return Err(EnqueueError::Full(conn));
            }
            q.items.push_back(Item { arrived_on: core, group, conn });
            q.enqueued += 1;
            let len = q.items.len();
            // Relaxed: a hint only; every decision that must not miss a connection re-reads the queue
            // under its lock.
            slot.len.store(len, Ordering::Relaxed);
            self.track_busy(target, &mut q, len);
            let busy = q.busy();
            drop(q);
            let local = if self.is_stock() { core } else { target };
            self.wake_for(local, busy);
            return Ok(target);
        }
        Err(EnqueueError::Closed(conn))
    }

    /// Feeds an enqueue into `queue`'s busy tracker and mirrors a change into the busy bit vector.
    /// Called with the queue's lock held, so the bit changes in the same order as the flag.
    fn track_busy(&self, queue: usize, q: &mut Queue<C>, len: usize) {
        if let Some(t) = &mut q.tracker {
            match t.on_enqueue(len) {
                // Release: pairs with the Acquire loads in `try_accept_once` and `wake_for`. The
                // protocol's ordering comes from the queue lock (module docs); the pair keeps the
                // lock-free readers' view no older than the last critical section they synchronised
                // with.
                BusyChange::BecameBusy => self.busy.set(queue, true, Ordering::Release),
                BusyChange::BecameNonBusy => self.busy.set(queue, false, Ordering::Release),
                BusyChange::Unchanged => {}
            }
        }
    }

    /// Mirrors a change of `core`'s waiters into the `sleeping` bit vector. Called with `core`'s wait
    /// lock held (`was` is `w.waiting()` before the change), so the bit changes in the same order as
    /// the wait state.
    fn mark_waiting(&self, core: usize, was: bool, w: &WaitState) {
        let now = w.waiting();
        if now != was {
            // Release: pairs with the Acquire loads in `wake_for`.
            self.sleeping.set(core, now, Ordering::Release);
        }
    }

    /// Takes `core`'s registered waker, if any, for the caller to wake after dropping the wait lock
    /// (a waker may run arbitrary code, such as polling this queue inline).
    fn take_waker(&self, core: usize, w: &mut WaitState) -> Option<Waker> {
        let was = w.waiting();
        let waker = w.waker.take();
        self.mark_waiting(core, was, w);
        waker
    }

    /// Hands a wake token to a sleeper of `core` if it has one without a token, else wakes (and takes)
    /// its registered waker.
    fn give_token(&self, core: usize) -> bool {
        let pc = &self.percore[core];
        let mut w = lock(&pc.wait);
        if w.retired {
            return false;
        }
        if w.sleepers > w.tokens {
            w.tokens += 1;
            // All: a sleeper that leaves without waiting must not strand the notification.
            pc.cv.notify_all();
            return true;
        }
        let Some(waker) = self.take_waker(core, &mut w) else { return false };
        w.waker_woken = true;
        drop(w);
        waker.wake();
        true
    }

    /// Drops `me`'s waker registration, returning whether it was woken as a wake token since its last
    /// registration (the caller then owes a [`pass_on_wake`](Self::pass_on_wake) if it stops waiting).
    fn unregister_waker(&self, me: usize) -> bool {
        let mut w = lock(&self.percore[me].wait);
        let old = self.take_waker(me, &mut w);
        let woken = std::mem::take(&mut w.waker_woken);
        drop(w);
        // Dropped without the lock: a waker's drop may run the executor's code.
        drop(old);
        woken
    }

    /// Wakes one acceptor that may take a connection just queued on `core` (whose queue is `busy`
    /// after the push): a waiter (sleeper or registered waker) on `core` first, else one on another core
    /// that may take from it.
    fn wake_for(&self, core: usize, busy: bool) -> bool {
        // Acquire: pairs with the Release in `mark_waiting`; the enqueuer's lock of the queue the waiter
        // re-checked orders the registration before this load (module docs).
        if self.sleeping.contains(core, Ordering::Acquire) && self.give_token(core) {
            return true;
        }
        let affinity = matches!(self.policy, Policy::Affinity(_));
        // Acquire: pairs with the Release in `close`.
        let closed = self.closed.load(Ordering::Acquire);
        if affinity && !busy && !closed {
            return false;
        }
        // Acquire: pairs with the Release in `mark_waiting` (see above).
        let sleeping = self.sleeping.load(self.cores, Ordering::Acquire);
        if sleeping.is_empty() {
            return false;
        }
        // Acquire: pairs with the Release in `track_busy`; a sleeper's own busy flag, as it read it
        // under its queue lock, happens-before this load by the same lock chain.
        let busy_set = if affinity { self.busy.load(self.cores, Ordering::Acquire) } else { CoreSet::new() };
        for k in 1..self.cores {
            let u = (core + k) % self.cores;
            if sleeping.contains(u) && (closed || !busy_set.contains(u)) && self.give_token(u) {
                return true;
            }
        }
        false
    }

    /// After a woken thread took a connection, passes one wake on for a queue that still holds
    /// connections (the one that caused its wake may be among them).
    fn pass_on_wake(&self) {
        for (q, slot) in self.queues.iter().enumerate() {
            // Relaxed: a hint, see `enqueue`.
            if slot.len.load(Ordering::Relaxed) > 0 {
                let busy = lock(&slot.queue).busy();
                if self.wake_for(q, busy) {
                    return;
                }
            }
        }
    }

    /// One pass of the policy's order without sleeping.
    fn try_accept_once(&self, me: usize) -> Result<Option<Accepted<C>>, AcceptError> {
        // Acquire: pairs with the Release store in `close`.
        let closed = self.closed.load(Ordering::Acquire);
        let mut acc = lock(&self.percore[me].accept);
        if acc.retired {
            return Err(AcceptError::Retired);
        }
        let order = match &acc.chooser {
            Chooser::Stock => AcceptOrder::round_robin(0, 0, 1),
            Chooser::Fine(_) | Chooser::Affinity(_) if closed => AcceptOrder::round_robin(me, me, self.cores),
            Chooser::Fine(f) => f.order(),
            Chooser::Affinity(p) => {
                // Acquire: pairs with the Release in `track_busy`.
                let busy = self.busy.load(self.cores, Ordering::Acquire);
                p.order(busy.contains(me), &busy)
            }
        };
        for s in order {
            let slot = &self.queues[s];
            // Relaxed: a hint; a miss here is caught by the locked re-check before sleeping.
            if s != self.qidx(me) && slot.len.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut q = lock(&slot.queue);
            let Some(item) = q.items.pop_front() else { continue };
            let stolen = s != self.qidx(me);
            if stolen {
                q.stolen_from += 1;
            }
            // Relaxed: a hint, see `enqueue`.
            slot.len.store(q.items.len(), Ordering::Relaxed);
            drop(q);
            match &mut acc.chooser {
                Chooser::Stock => {}
                Chooser::Fine(f) => f.record(s),
                Chooser::Affinity(p) => {
                    p.record(if stolen { s } else { me });
                    if stolen {
                        acc.log.record(s, item.group);
                    }
                }
            }
            let remote = item.arrived_on != me;
            if remote {
                acc.remote_accepts += 1;
            } else {
                acc.local_accepts += 1;
            }
            return Ok(Some(Accepted {
                conn: item.conn,
                group: item.group,
                arrived_on: item.arrived_on,
                queue: s,
                remote,
            }));
        }
        Ok(None)
    }

    /// Whether some queue holds a connection `me` may take, each queue read under its lock.
    fn anything_for(&self, me: usize) -> bool {
        // Acquire: pairs with the Release store in `close`.
        let closed = self.closed.load(Ordering::Acquire);
        if !matches!(self.policy, Policy::Affinity(_)) || closed {
            return self.queues.iter().any(|s| !lock(&s.queue).items.is_empty());
        }
        let me_busy = {
            let q = lock(&self.queues[me].queue);
            if !q.items.is_empty() {
                return true;
            }
            q.busy()
        };
        if me_busy {
            return false;
        }
        (0..self.cores).filter(|&s| s != me).any(|s| {
            let q = lock(&self.queues[s].queue);
            !q.items.is_empty() && q.busy()
        })
    }

    /// Takes a connection for core `me` without blocking: the local queue and, as the policy allows,
    /// other cores' queues (Affinity: busy ones, 5 local : 1 remote; Fine: round-robin; Stock: the one
    /// queue). After [`close`](Self::close), any queue.
    ///
    /// # Errors
    ///
    /// [`AcceptError::WouldBlock`] when there is nothing to take, [`AcceptError::Closed`] when closed
    /// and empty, [`AcceptError::Retired`] or [`AcceptError::NoSuchCore`].
    pub fn try_accept(&self, me: usize) -> Result<Accepted<C>, AcceptError> {
        if me >= self.cores {
            return Err(AcceptError::NoSuchCore);
        }
        match self.try_accept_once(me)? {
            Some(a) => Ok(a),
            // Acquire: pairs with the Release store in `close`.
            None if self.closed.load(Ordering::Acquire) => Err(AcceptError::Closed),
            None => Err(AcceptError::WouldBlock),
        }
    }

    /// Takes a connection for core `me`, sleeping until one it may take arrives.
    ///
    /// # Errors
    ///
    /// [`AcceptError::Closed`] once the listener is closed and drained, [`AcceptError::Retired`] when
    /// `me` retires (also while sleeping), [`AcceptError::NoSuchCore`].
    pub fn accept(&self, me: usize) -> Result<Accepted<C>, AcceptError> {
        self.accept_until(me, None)
    }

    /// [`accept`](Self::accept) giving up after `timeout` with [`AcceptError::WouldBlock`].
    ///
    /// # Errors
    ///
    /// As [`accept`](Self::accept), and [`AcceptError::WouldBlock`] on timeout.
    pub fn accept_timeout(&self, me: usize, timeout: Duration) -> Result<Accepted<C>, AcceptError> {
        self.accept_until(me, Some(Instant::now() + timeout))
    }

    /// Readiness-based accept for event loops and async runtimes: takes a connection for core `me` as
    /// [`try_accept`](Self::try_accept) does, or, when there is nothing `me` may take, registers
    /// `waker` as core `me`'s waiter and returns [`Poll::Pending`].
    ///
    /// The registration follows the protocol of a sleeping [`accept`](Self::accept) (module docs): it
    /// is made before a locked re-check of every queue, so a connection enqueued at any point after the
    /// first try is either found by this call or wakes `waker`. A registered waker is woken (once: the
    /// wake takes the registration) by an enqueue that would wake a sleeper of `me` (a connection on
    /// `me`, or one on a core `me` may take from: Affinity, a busy core while `me` is not busy; Fine and
    /// Stock, any core), by a wake passed on, and by [`close`](Self::close) and
    /// [`retire`](Self::retire)`(me)`. After a wake, poll again: the next call registers again if it
    /// still finds nothing.
    ///
    /// Each core has **one** waker slot, meant for the one task (or event loop) that accepts on that
    /// core: a registration replaces the core's earlier one (the replaced waker is not woken), and a
    /// call that returns [`Poll::Ready`] withdraws the core's registration. A task that stops waiting
    /// without polling to `Ready` (an accept future dropped while pending) should call
    /// [`cancel_poll`](Self::cancel_poll), or a later wake may go to it instead of a waiting acceptor.
    ///
    /// # Errors
    ///
    /// As [`accept`](Self::accept), in `Poll::Ready`: [`AcceptError::Closed`] once the listener is
    /// closed and drained, [`AcceptError::Retired`], [`AcceptError::NoSuchCore`].
    pub fn poll_accept(&self, me: usize, waker: &Waker) -> Poll<Result<Accepted<C>, AcceptError>> {
        if me >= self.cores {
            return Poll::Ready(Err(AcceptError::NoSuchCore));
        }
        let pc = &self.percore[me];
        // Whether this call consumed a wake token given to the core's waker (see `accept_until`).
        let mut woken = false;
        loop {
            let done = match self.try_accept_once(me) {
                Ok(Some(a)) => Some(Ok(a)),
                // Acquire: pairs with the Release store in `close`.
                Ok(None) if self.closed.load(Ordering::Acquire) => Some(Err(AcceptError::Closed)),
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            };
            if let Some(result) = done {
                return Poll::Ready(self.stop_polling(me, woken, result));
            }
            // Register `waker` as core `me`'s waiter, replacing an earlier registration.
            let replaced = {
                let mut w = lock(&pc.wait);
                if w.retired {
                    drop(w);
                    return Poll::Ready(self.stop_polling(me, woken, Err(AcceptError::Retired)));
                }
                // Acquire: pairs with the Release store in `close`, which takes the registered waker
                // under this lock afterwards: a registration made after that is seen here and not made.
                if self.closed.load(Ordering::Acquire) {
                    continue;
                }
                woken |= std::mem::take(&mut w.waker_woken);
                let was = w.waiting();
                let replaced = match &w.waker {
                    Some(registered) if registered.will_wake(waker) => None,
                    _ => w.waker.replace(waker.clone()),
                };
                self.mark_waiting(me, was, &w);
                replaced
            };
            // Dropped without the lock: a waker's drop may run the executor's code.
            drop(replaced);
            // Re-check every queue under its lock; return Pending unless something turned up. A wake
            // this call consumed and found nothing after lapses (the connection that caused it is gone).
            if !self.anything_for(me) {
                return Poll::Pending;
            }
            woken |= self.unregister_waker(me);
        }
    }

    /// Withdraws core `me`'s [`poll_accept`](Self::poll_accept) registration, for a task that stops
    /// waiting without polling to `Ready` (call it from an accept future's `Drop`). If the registered
    /// waker had been woken for a connection, the wake is passed on to another waiting acceptor.
    pub fn cancel_poll(&self, me: usize) {
        if me < self.cores && self.unregister_waker(me) {
            self.pass_on_wake();
        }
    }

    /// The end of a `poll_accept` that returns `result`: the task no longer waits on `me`, so its
    /// registration goes (it would take a wake meant for a waiting acceptor), and a wake it consumed is
    /// passed on as a woken sleeper passes its on.
    fn stop_polling(
        &self,
        me: usize,
        woken: bool,
        result: Result<Accepted<C>, AcceptError>,
    ) -> Result<Accepted<C>, AcceptError> {
        if self.unregister_waker(me) || woken {
            self.pass_on_wake();
        }
        result
    }

    fn accept_until(&self, me: usize, deadline: Option<Instant>) -> Result<Accepted<C>, AcceptError> {
        if me >= self.cores {
            return Err(AcceptError::NoSuchCore);
        }
        let pc = &self.percore[me];
        let mut woken = false;
        loop {
            let got = self.try_accept_once(me);
            match got {
                Ok(Some(a)) => {
                    if woken {
                        self.pass_on_wake();
                    }
                    return Ok(a);
                }
                Ok(None) => {}
                Err(e) => {
                    if woken {
                        self.pass_on_wake();
                    }
                    return Err(e);
                }
            }
            // Acquire: pairs with the Release store in `close`.
            if self.closed.load(Ordering::Acquire) {
                return Err(AcceptError::Closed);
            }
            // Register as a sleeper of `me`.
            {
                let mut w = lock(&pc.wait);
                if w.retired {
                    return Err(AcceptError::Retired);
                }
                let was = w.waiting();
                w.sleepers += 1;
                self.mark_waiting(me, was, &w);
            }
            // Re-check every queue under its lock, then sleep unless something turned up.
            let available = self.anything_for(me);
            let mut w = lock(&pc.wait);
            let mut saw_token = false;
            let mut timed_out = false;
            if !available {
                loop {
                    // Acquire: pairs with the Release store in `close` (which notifies under this lock).
                    if w.retired || self.closed.load(Ordering::Acquire) {
                        break;
                    }
                    if w.tokens > 0 {
                        saw_token = true;
                        break;
                    }
                    match deadline {
                        None => w = pc.cv.wait(w).unwrap_or_else(std::sync::PoisonError::into_inner),
                        Some(d) => {
                            let now = Instant::now();
                            if now >= d {
                                timed_out = true;
                                break;
                            }
                            w = pc
                                .cv
                                .wait_timeout(w, d - now)
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .0;
                        }
                    }
                }
            }
            // Deregister; keep `tokens <= sleepers`.
            let was = w.waiting();
            w.sleepers -= 1;
            if w.tokens > 0 && (saw_token || w.tokens > w.sleepers) {
                w.tokens -= 1;
                woken = true;
            }
            self.mark_waiting(me, was, &w);
            drop(w);
            if timed_out {
                if woken {
                    self.pass_on_wake();
                }
                return Err(AcceptError::WouldBlock);
            }
        }
    }

    /// The exit of core `core`'s worker: its queued connections move in order to the live core with the
    /// shortest queue (the heir), later enqueues naming `core` go there too, and `core`'s sleeping
    /// acceptors return [`AcceptError::Retired`]. Under Stock nothing moves (the queue is shared) unless
    /// this was the last live core.
    ///
    /// # Errors
    ///
    /// [`AcceptError::Retired`] when it already retired, [`AcceptError::NoSuchCore`].
    pub fn retire(&self, core: usize) -> Result<Retirement<C>, AcceptError> {
        if core >= self.cores {
            return Err(AcceptError::NoSuchCore);
        }
        let mut rs = lock(&self.retire);
        if rs.retired.contains(core) {
            return Err(AcceptError::Retired);
        }
        rs.retired.insert(core);
        lock(&self.percore[core].accept).retired = true;
        let waker = {
            let pc = &self.percore[core];
            let mut w = lock(&pc.wait);
            w.retired = true;
            pc.cv.notify_all();
            self.take_waker(core, &mut w)
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        let live: Vec<usize> =
            (1..self.cores).map(|k| (core + k) % self.cores).filter(|&c| !rs.retired.contains(c)).collect();
        let heir = if self.is_stock() {
            live.first().copied()
        } else {
            // Relaxed: a hint for balance only.
            live.iter().copied().min_by_key(|&c| self.queues[c].len.load(Ordering::Relaxed))
        };
        let from = self.qidx(core);
        if self.is_stock() && heir.is_some() {
            return Ok(Retirement { moved: 0, heir, orphans: Vec::new() });
        }
        let slot = &self.queues[from];
        let mut q = lock(&slot.queue);
        q.retired = true;
        q.heir = heir.unwrap_or(NO_HEIR);
        let items = std::mem::take(&mut q.items);
        // Relaxed: a hint, see `enqueue`.
        slot.len.store(0, Ordering::Relaxed);
        let n = items.len();
        q.handed_out += n as u64;
        if q.busy() {
            let cap = q.cap;
            if let (Some(t), Policy::Affinity(cfg)) = (&mut q.tracker, &self.policy) {
                *t = BusyTracker::new(cap, cfg);
            }
            // Release: pairs with the Acquire loads of the busy set.
            self.busy.set(from, false, Ordering::Release);
        }
        let Some(h) = heir else {
            drop(q);
            rs.taken += n as u64;
            let orphans = items.into_iter().map(|i| (i.arrived_on, i.group, i.conn)).collect();
            return Ok(Retirement { moved: 0, heir: None, orphans });
        };
        // Holding both queue locks keeps the moved connections ahead of enqueues redirected to the heir;
        // only `retire` (serialised by the retire lock) ever holds two queue locks, so no deadlock.
        let hslot = &self.queues[h];
        let mut hq = lock(&hslot.queue);
        for item in items {
            hq.items.push_back(item);
            let len = hq.items.len();
            self.track_busy(h, &mut hq, len);
        }
        hq.handed_in += n as u64;
        // Relaxed: a hint, see `enqueue`.
        hslot.len.store(hq.items.len(), Ordering::Relaxed);
        let hbusy = hq.busy();
        drop(hq);
        drop(q);
        drop(rs);
        for _ in 0..n {
            if !self.wake_for(h, hbusy) {
                break;
            }
        }
        Ok(Retirement { moved: n, heir: Some(h), orphans: Vec::new() })
    }

    /// Closes the listener: enqueues are refused, accepts drain whatever is queued (from any core,
    /// whatever the policy) and then return [`AcceptError::Closed`]; sleeping acceptors wake up.
    pub fn close(&self) {
        // Release: pairs with the Acquire loads in `enqueue`, the accept paths and `wake_for`.
        self.closed.store(true, Ordering::Release);
        for (core, pc) in self.percore.iter().enumerate() {
            let mut w = lock(&pc.wait);
            pc.cv.notify_all();
            let waker = self.take_waker(core, &mut w);
            drop(w);
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// Whether [`close`](Self::close) was called.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        // Acquire: pairs with the Release store in `close`.
        self.closed.load(Ordering::Acquire)
    }

    /// Removes every queued connection (for a caller shutting the listener down and resetting them):
    /// `(arrived_on, group, conn)`, each queue's in order.
    pub fn take_all(&self) -> Vec<(usize, FlowGroup, C)> {
        let mut rs = lock(&self.retire);
        let mut out = Vec::new();
        for slot in &*self.queues {
            let mut q = lock(&slot.queue);
            out.extend(q.items.drain(..).map(|i| (i.arrived_on, i.group, i.conn)));
            // Relaxed: a hint, see `enqueue`.
            slot.len.store(0, Ordering::Relaxed);
        }
        rs.taken += out.len() as u64;
        out
    }

    /// How many connections are queued on `core` (Stock: in the shared queue) now.
    #[must_use]
    pub fn queue_len(&self, core: usize) -> usize {
        self.queues.get(self.qidx(core)).map_or(0, |s| lock(&s.queue).items.len())
    }

    /// Whether `core` is busy (always false except under Affinity).
    #[must_use]
    pub fn is_busy(&self, core: usize) -> bool {
        // Acquire: pairs with the Release in `track_busy`.
        core < self.cores && !self.is_stock() && self.busy.contains(core, Ordering::Acquire)
    }

    /// The busy bit vector.
    #[must_use]
    pub fn busy_set(&self) -> CoreSet {
        // Acquire: pairs with the Release in `track_busy`.
        self.busy.load(self.cores, Ordering::Acquire)
    }

    /// Time since the listener was created: the clock [`balance`](Self::balance) uses.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// [`balance_at`](Self::balance_at) with the real clock.
    pub fn balance(&self, steering: &mut dyn FlowSteering) -> Option<MigrationReport> {
        self.balance_at(self.elapsed(), steering)
    }

    /// Runs a flow-group migration round if one is due at `now` (time since the listener started):
    /// every live, non-busy core takes a group of the victim it stole the most from since the last
    /// round (see [`MigrationController::plan`]) through `steering`. Call it from any thread, as often
    /// as convenient (every accept loop iteration is fine: it returns at once unless a round is due and
    /// no other thread is running one). `None` under Stock and Fine, or when no round ran.
    pub fn balance_at(&self, now: Duration, steering: &mut dyn FlowSteering) -> Option<MigrationReport> {
        let mut guard = match self.migration.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        let mc = guard.as_mut()?;
        if !mc.start_round(now) {
            return None;
        }
        // Acquire: pairs with the Release in `track_busy`.
        let busy = self.busy.load(self.cores, Ordering::Acquire);
        let retired = lock(&self.retire).retired;
        let mut report = MigrationReport { now, ..MigrationReport::default() };
        for core in 0..self.cores {
            // Take the log out so the steering (an MMIO write on the 82599) runs without the lock.
            let mut log = {
                let mut acc = lock(&self.percore[core].accept);
                std::mem::replace(&mut acc.log, StealLog::new(self.cores))
            };
            if retired.contains(core) {
                continue;
            }
            let moved = mc.migrate_core(core, busy.contains(core), &mut log, steering, &mut report);
            lock(&self.percore[core].accept).migrations_in += moved as u64;
        }
        Some(report)
    }

    /// A snapshot of the counters.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let mut cores: Vec<CoreStats> = (0..self.cores)
            .map(|c| {
                let acc = lock(&self.percore[c].accept);
                CoreStats {
                    retired: acc.retired,
                    local_accepts: acc.local_accepts,
                    remote_accepts: acc.remote_accepts,
                    migrations_in: acc.migrations_in,
                    ..CoreStats::default()
                }
            })
            .collect();
        for (i, slot) in self.queues.iter().enumerate() {
            let q = lock(&slot.queue);
            let s = &mut cores[i];
            s.queue_len = q.items.len();
            s.busy = q.busy();
            s.enqueued = q.enqueued;
            s.rejected = q.rejected;
            s.stolen_from = q.stolen_from;
            s.handed_in = q.handed_in;
            s.handed_out = q.handed_out;
        }
        let rounds = lock(&self.migration).as_ref().map_or(0, MigrationController::rounds);
        Stats { cores, migration_rounds: rounds, taken: lock(&self.retire).taken }
    }
}
