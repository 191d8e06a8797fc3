//! The net channel: a cache-aware single-producer, single-consumer ring of `u32` packet-buffer indices
//! with Van Jacobson's wakeup protocol.
//!
//! Source: Van Jacobson & Felderman, "Speeding up Networking", linux.conf.au 2006, the
//! `net_channel` structure and `net_channel_enqueue`.
//!
//! # Layout
//!
//! ```text
//!  line group 0 (producer header)   tail · wakecnt · counters    written by the producer every burst
//!  line group 1 (consumer header)   head                         written by the consumer every burst
//!  line group 2 (wake header)       wakecnt · wake_type · wake_arg  written by the consumer only when
//!                                                                it goes to sleep; read by the producer
//!                                                                every burst
//!  ring                             capacity × u32 (power of two, every slot usable); an empty
//!                                   slot holds EMPTY (u32::MAX)
//! ```
//!
//! Each header is a [`CachePadded`] group (128 bytes on x86_64, where the adjacent-line prefetcher pulls
//! 64-byte lines in pairs), so the producer and consumer never write the same line. VJ's consumer header
//! holds `head` and `wakecnt` together; we split them because the producer reads the consumer's
//! `wakecnt` on every burst and the consumer writes `head` on every burst: sharing a line would bounce it
//! between the cores on every packet. Here the wake header is written only when the consumer sleeps, so
//! it stays in both caches in the shared state and the producer's check costs a hit.
//!
//! Indices `head` and `tail` run freely and are reduced with a mask, so `tail - head` distinguishes
//! full from empty without wasting a slot. Each side caches the other's index and re-reads it only when
//! the ring looks full (producer) or too empty for the burst (consumer). Every `push`/`push_burst` ends
//! with one `Release` store of `tail`, so a completed push is visible to the consumer at once (VJ's
//! contract); the consumer returns slots in batches (below).
//!
//! # Empty slots
//!
//! [`Consumer::pop`] does not read `tail`: it reads the slot at `head`, which holds [`EMPTY`] until the
//! producer writes the item there. That is for the steady state two free-running threads fall into
//! when the consumer is the faster, the ring empty after every pop. A consumer that learns of items
//! from `tail` re-reads `tail` on every pop there while the producer stores it on every push, so each
//! item moves two lines between the cores, `tail`'s and the slot's, and both threads slow to the speed
//! of those transfers: rtrb 0.4 and nexus-queue 1.3 work that way, and so did this ring, 2-3x slower
//! per item than rtrb across two cores (BENCHMARKS.md, "Every regime and loop shape"). Polling the
//! slot, each item moves one line. This is FastForward's design (Giacomoni, Moseley & Vachharajani,
//! "FastForward for Efficient Pipeline Parallelism: A Cache-Optimized Concurrent Lock-Free Queue",
//! PPoPP 2008) and Linux's `ptr_ring`'s, with their batched emptying: `pop` writes [`EMPTY`] back
//! into the slots it took items from a line pair at a time, when it hands them back (below), never
//! into a line the producer may be writing. The price is one value: a channel cannot carry `u32::MAX`
//! (pushing it panics; pool buffer indices never take it).
//!
//! Bursts keep `tail`: [`Consumer::pop_burst`] reads `tail` once per burst and hands slots back
//! without emptying them, so that the burst path writes no ring line; `pop` then does not trust the
//! contents of those slots for a lap (`polled_from`) and asks `tail` instead, as before. A
//! [`Producer::push_burst`] writes every slot but the first with one `memcpy` and the first last
//! (`Release`): `pop` polls the first, and so reaches the others only after them.
//!
//! # Returning slots
//!
//! A ring whose consumer stores `head` after every pop (as rtrb 0.4 and nexus-queue 1.3 do, and as this
//! one did) has a slow steady state that two free-running threads fall into and do not leave: once the
//! producer catches up with the consumer, the ring is full, each pop frees one slot and each push takes
//! it. Every item then moves three cache lines between the cores: `head` (the consumer stores it, the
//! producer's refresh reads it), and the ring line that the producer writes while the consumer is still
//! reading the rest of it, in both directions. Both sides slow to the speed of those transfers (~30 ns
//! an item, against ~3 when the threads happen to run apart), so which speed a program gets depends on
//! how its two loops first interleave (we measured 29 ns against 3 at burst 1; BENCHMARKS.md, "Every
//! regime and loop shape").
//!
//! The consumer therefore hands slots back the way MCRingBuffer does (Lee, Bu & Chandranmenon,
//! "A Lock-Free, Cache-Efficient Multi-Core Synchronization Mechanism for Line-Rate Network Traffic
//! Monitoring", IPDPS 2010): it stores `head` only when it crosses a [`RETURN_SLOTS`]-slot (128-byte,
//! line-pair) boundary, and then stores the boundary, not its position; and whenever `pop_burst` has
//! caught up with every item it knows of (`head == cached_tail`), when it stores its exact position
//! (`pop`, which does not read `tail`, does not know when it has caught up). In the full
//! ring the producer is thus handed whole line pairs that the consumer has finished reading, it refreshes
//! `head` once per 32 items instead of once per item, and the consumer's `head` line moves once per 32
//! items. Elsewhere nothing changes: a consumer that has caught up (the near-empty ring, a consumer
//! about to sleep) holds nothing back, and the producer is not reading `head` then. The cost is that the
//! producer may see up to `RETURN_SLOTS - 1` popped slots as still in use (`capacity / 8` for rings of
//! fewer than 256 slots), so [`Producer::push`] can refuse while that many slots are free but not yet
//! handed back; [`Consumer::request_wakeup`] hands every slot back before the consumer sleeps.
//!
//! # Wakeups
//!
//! The consumer asks for a wakeup by bumping its `wakecnt` and re-checking the ring before it sleeps;
//! after publishing a burst, the producer compares the two counts and, when they differ, copies the
//! consumer's count into its own and wakes the consumer. That is a store-buffering pattern: each side
//! stores one word and then loads the other's, so each needs a StoreLoad barrier or both can miss each
//! other and the consumer sleeps on a non-empty ring. The producer pays only a compiler barrier per burst
//! and the consumer issues `membarrier(2)` before it sleeps (an asymmetric barrier; see `sys::Barrier`),
//! falling back to `SeqCst` fences on both sides where `membarrier` is unavailable. The loom models in
//! `tests/loom_channel.rs` check the protocol with fences on both sides.
//!
//! # Orderings, each with its pair
//!
//! * slots: `Release` store of a burst's first slot (or a `push`'s only one) in
//!   `Producer::write_first`, after the burst's other slots; `Acquire` load in `Consumer::pop` before
//!   it returns the item. A consumer that sees an item in a slot sees what was written before it (the
//!   buffer the item names, the burst's later slots).
//! * `tail`: `Release` store in `Producer::publish` after the slot writes; `Acquire` loads in
//!   `Consumer::pop_burst`, `refresh` and `pop`'s fallback before the slot reads. A consumer that sees
//!   `tail` sees the items below it.
//! * `head`: `Release` store in `Consumer::return_slots` (batched, above) after the slot reads and the
//!   `EMPTY` writes; `Acquire` loads in `Producer::push`, `push_burst` and `free_space` before the slot
//!   writes.
//!   The value stored never exceeds the consumer's position, so the producer never reuses a slot the
//!   consumer has not read.
//! * wakeups: the consumer's `wake.wakecnt` store, then `Barrier::heavy`, then its `tail` load; the
//!   producer's `tail` store, then `Barrier::light`, then its `wake.wakecnt` load (store-buffering,
//!   above). A consumer sleeping on several channels arms them all, issues one `Barrier::heavy`, then
//!   re-checks them all ([`WakeupBatch`]): the barrier orders every earlier store of the thread before
//!   every later load, so one serves the set. `producer.wakecnt`: `Release` store in `Producer::send_wakeup`, `Acquire` loads in
//!   `Consumer::request_wakeup` and `wait`.
//! * `closed`: `Release` store in each side's `Drop`, `Acquire` load in the other's `is_abandoned`.
//!
//! The producer sends at most one wakeup per request, so a sleeping consumer never causes a wakeup storm.
//! [`WakeMode`] chooses how the consumer sleeps: not at all ([`WakeMode::Poll`]), on a futex
//! ([`WakeMode::Park`]), or on an eventfd that an event loop can poll ([`WakeMode::EventFd`]).
//!
//! # Example
//!
//! ```
//! use netchannel::channel::Channel;
//!
//! let (mut tx, mut rx) = Channel::with_capacity(1024);
//! let consumer = std::thread::spawn(move || {
//!     let mut sum = 0u64;
//!     let mut buf = [0u32; 32];
//!     loop {
//!         let n = rx.pop_burst(&mut buf);
//!         sum += buf[..n].iter().map(|&i| u64::from(i)).sum::<u64>();
//!         if n == 0 && rx.wait(None).is_closed() {
//!             return sum;
//!         }
//!     }
//! });
//! for i in 0..10_000u32 {
//!     while tx.push(i).is_err() {
//!         std::hint::spin_loop();
//!     }
//! }
//! drop(tx); // closing wakes the consumer
//! assert_eq!(consumer.join().unwrap(), (0..10_000u64).sum());
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::time::Duration;

use crossbeam_utils::CachePadded;

mod wakeups;

pub use wakeups::{ArmedWakeups, WakeupBatch};

use crate::sync::{Arc, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, spin_loop};
use crate::sys::{Barrier, WaitWord};

/// The largest capacity a channel accepts (2^30 slots, 4 GiB of ring).
pub const MAX_CAPACITY: usize = 1 << 30;

/// The one `u32` a channel cannot carry: it marks an empty slot (see "Empty slots" in the module
/// docs). Pool buffer indices never take it (`pool::MAX_BUFFERS`); pushing it panics.
pub const EMPTY: u32 = u32::MAX;

/// How many popped slots the consumer hands back to the producer at once, at most: one 128-byte line
/// pair of `u32` slots (see "Returning slots" in the module docs). Rings smaller than eight batches
/// return `capacity / 8` slots at a time (one at a time below 16 slots), so the producer never sees
/// more than an eighth of the ring held back.
pub const RETURN_SLOTS: usize = 32;

/// The consumer's return batch for a ring of `capacity` slots (a power of two). Under loom it is half
/// the ring, so the models' two- and four-slot rings exercise batched returns.
fn return_batch(capacity: usize) -> usize {
    #[cfg(not(loom))]
    return (capacity / 8).clamp(1, RETURN_SLOTS);
    #[cfg(loom)]
    return (capacity / 2).max(1);
}

/// How a consumer waits for items, and so how the producer wakes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WakeMode {
    /// The consumer busy-polls and never sleeps; the producer skips the wakeup check entirely.
    Poll,
    /// The consumer sleeps on a futex; the producer wakes it with `FUTEX_WAKE`.
    #[default]
    Park,
    /// The consumer sleeps on an eventfd ([`Consumer::event_fd`]) that can be registered with epoll,
    /// mio or tokio; the producer wakes it by writing to the eventfd.
    EventFd,
}

/// The error [`Producer::push`] returns: the ring is full, and the item comes back to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The ring had no free slot; the item was not enqueued.
    #[error("net channel full; item {0} not pushed")]
    Full(u32),
}

impl PushError {
    /// The item that was not pushed.
    #[must_use]
    pub fn into_inner(self) -> u32 {
        match self {
            Self::Full(item) => item,
        }
    }
}

/// Why a channel could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The requested capacity was zero.
    #[error("net channel capacity must be at least 1")]
    ZeroCapacity,
    /// The requested capacity exceeds [`MAX_CAPACITY`] once rounded up to a power of two.
    #[error("net channel capacity {0} exceeds the maximum of {MAX_CAPACITY}")]
    CapacityTooLarge(usize),
    /// The eventfd for [`WakeMode::EventFd`] could not be created (typically `EMFILE`).
    #[error("cannot create the channel's eventfd: {0}")]
    EventFd(#[source] std::io::Error),
}

/// What [`Consumer::wait`] observed when it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Wait {
    /// At least one item is ready to pop.
    Ready,
    /// The producer is gone and every item it pushed has been popped.
    Closed,
    /// The timeout passed with the ring still empty.
    TimedOut,
}

impl Wait {
    /// Whether the channel is closed and drained.
    #[must_use]
    pub fn is_closed(self) -> bool {
        self == Self::Closed
    }
}

/// A snapshot of a channel's counters. Reading them costs the reader a few loads and the data path
/// nothing: `pushed` and `popped` are the free-running ring indices themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// Items the producer enqueued.
    pub pushed: u64,
    /// Items the consumer dequeued: exact from [`Consumer::stats`]; from [`Producer::stats`], the slots
    /// the consumer has handed back, which lag by less than [`RETURN_SLOTS`] while it is behind.
    pub popped: u64,
    /// Items refused because the ring was full, counted per item and per attempt: for a driver, which
    /// drops what does not fit and returns the buffers, these are drops; a caller that retries the same
    /// item counts each refusal.
    pub refused_full: u64,
    /// Wakeups the producer sent to a sleeping (or about to sleep) consumer.
    pub wakeups: u64,
    /// Wakeups the consumer requested before sleeping (VJ's `c.wakecnt`; a 32-bit count that wraps).
    /// The producer answers each request at most once, so `wakeups <= wakeup_requests` until it wraps.
    pub wakeup_requests: u64,
}

/// The producer's header: what the producer writes.
#[derive(Debug)]
struct ProducerHeader {
    /// Free-running index one past the last published item.
    tail: AtomicUsize,
    /// Count of wakeups answered: the producer copies the consumer's `wakecnt` here before it wakes the
    /// consumer, which sleeps on this word (a futex) while it still holds the value it saw.
    wakecnt: WaitWord,
    /// Set when the producer is dropped.
    closed: AtomicBool,
    /// Statistics, written only by the producer and only on slow paths.
    refused: AtomicU64,
    wakeups: AtomicU64,
}

/// The consumer's hot header: what the consumer writes on every burst.
#[derive(Debug)]
struct ConsumerHeader {
    /// Free-running index of the next item to pop.
    head: AtomicUsize,
    /// Set when the consumer is dropped.
    closed: AtomicBool,
}

/// The consumer's wake header: written only when the consumer asks for a wakeup, read by the producer on
/// every burst.
#[derive(Debug)]
struct WakeHeader {
    /// Count of wakeups requested.
    wakecnt: AtomicU32,
    /// VJ's `wake_type`.
    mode: WakeMode,
    /// VJ's `wake_arg` for [`WakeMode::EventFd`].
    #[cfg(not(loom))]
    event: Option<crate::sys::EventFd>,
}

/// Slots per [`Block`].
#[cfg(not(loom))]
const BLOCK_SLOTS: usize = 32;

/// 128 bytes of ring, aligned like the headers, so the ring starts on a line pair of its own and shares
/// no line with a neighbouring heap object (the allocator gives a plain `[u32]` 16-byte alignment).
/// `repr(C)` with a size equal to its alignment: consecutive blocks are contiguous, so the ring can be
/// indexed as one flat array of slots.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(C, align(128))]
struct Block([AtomicU32; BLOCK_SLOTS]);

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Block>() == BLOCK_SLOTS * std::mem::size_of::<u32>());

/// The ring's storage. Under loom the atomics are loom's (tracked, not `u32`-sized), so the ring is a
/// plain slice of them there.
#[cfg(not(loom))]
type Ring = Box<[Block]>;
#[cfg(loom)]
type Ring = Box<[AtomicU32]>;

/// A ring of `capacity` empty slots.
fn new_ring(capacity: usize) -> Ring {
    #[cfg(not(loom))]
    return (0..capacity.div_ceil(BLOCK_SLOTS))
        .map(|_| Block(std::array::from_fn(|_| AtomicU32::new(EMPTY))))
        .collect();
    #[cfg(loom)]
    return (0..capacity).map(|_| AtomicU32::new(EMPTY)).collect();
}

/// A pointer to the first slot whose provenance covers the whole ring (it is derived from the slice,
/// not from one element). The slots are atomics, whose `UnsafeCell` allows writes through it.
fn ring_base(ring: &Ring) -> NonNull<AtomicU32> {
    NonNull::from(&**ring).cast()
}

#[derive(Debug)]
#[repr(C)]
struct Shared {
    producer: CachePadded<ProducerHeader>,
    consumer: CachePadded<ConsumerHeader>,
    wake: CachePadded<WakeHeader>,
    ring: Ring,
}

impl Shared {
    /// Wakes the consumer the way it sleeps.
    fn wake_consumer(&self) {
        match self.wake.mode {
            WakeMode::Poll => {}
            WakeMode::Park => self.producer.wakecnt.wake(),
            WakeMode::EventFd => {
                #[cfg(not(loom))]
                if let Some(event) = &self.wake.event {
                    event.signal();
                }
                #[cfg(loom)]
                self.producer.wakecnt.wake();
            }
        }
    }

    fn stats(&self) -> ChannelStats {
        // Relaxed everywhere: a monitoring snapshot that orders nothing.
        ChannelStats {
            pushed: self.producer.tail.load(Ordering::Relaxed) as u64,
            popped: self.consumer.head.load(Ordering::Relaxed) as u64,
            refused_full: self.producer.refused.load(Ordering::Relaxed),
            wakeups: self.producer.wakeups.load(Ordering::Relaxed),
            wakeup_requests: self.wake.wakecnt.load(Ordering::Relaxed).into(),
        }
    }
}

/// The constructor namespace for net channels.
///
/// ```
/// use netchannel::channel::{Channel, WakeMode};
///
/// let (tx, rx) = Channel::builder(4096).wake(WakeMode::EventFd).build()?;
/// assert_eq!(tx.capacity(), 4096);
/// assert!(rx.event_fd().is_some());
/// # Ok::<(), netchannel::channel::BuildError>(())
/// ```
#[derive(Debug)]
pub struct Channel(());

impl Channel {
    /// Creates a channel with room for at least `capacity` items (rounded up to a power of two) whose
    /// consumer sleeps on a futex ([`WakeMode::Park`]).
    ///
    /// # Panics
    ///
    /// If `capacity` is zero or rounds up past [`MAX_CAPACITY`]; use [`Channel::builder`] to get an
    /// error instead.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> (Producer, Consumer) {
        match Self::builder(capacity).build() {
            Ok(pair) => pair,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts building a channel with room for at least `capacity` items.
    pub fn builder(capacity: usize) -> Builder {
        Builder { capacity, wake: WakeMode::default(), spin: DEFAULT_SPIN }
    }
}

/// Configures a channel before it is built. See [`Channel::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct Builder {
    capacity: usize,
    wake: WakeMode,
    spin: Duration,
}

/// How long [`Consumer::wait`] busy-polls before asking for a wakeup, unless [`Builder::spin`] says
/// otherwise.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(20);

impl Builder {
    /// How the consumer waits ([`WakeMode::Park`] by default).
    pub fn wake(mut self, mode: WakeMode) -> Self {
        self.wake = mode;
        self
    }

    /// How long [`Consumer::wait`] busy-polls an empty ring before it asks for a wakeup and sleeps
    /// ([`DEFAULT_SPIN`] by default; zero sleeps at once).
    ///
    /// Asking for a wakeup is what costs: the consumer's `membarrier(2)` interrupts every other running
    /// thread of the process (measured at ~13 µs per request on our 2-vCPU VM; a few µs on bare metal),
    /// and the producer then pays a futex wake or eventfd write. Spinning for about as long as that
    /// costs bounds the waste at 2x whichever way the next packet's arrival falls, and keeps a consumer
    /// under steady load from arming at all.
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// Allocates the ring and returns its two ends.
    ///
    /// # Errors
    ///
    /// [`BuildError`] for a zero or too large capacity, or an eventfd that cannot be created.
    pub fn build(self) -> Result<(Producer, Consumer), BuildError> {
        if self.capacity == 0 {
            return Err(BuildError::ZeroCapacity);
        }
        let capacity = self
            .capacity
            .checked_next_power_of_two()
            .filter(|&c| c <= MAX_CAPACITY)
            .ok_or(BuildError::CapacityTooLarge(self.capacity))?;
        #[cfg(not(loom))]
        let event = match self.wake {
            WakeMode::EventFd => Some(crate::sys::EventFd::new().map_err(BuildError::EventFd)?),
            _ => None,
        };
        let ring = new_ring(capacity);
        let shared = Arc::new(Shared {
            producer: CachePadded::new(ProducerHeader {
                tail: AtomicUsize::new(0),
                wakecnt: WaitWord::new(0),
                closed: AtomicBool::new(false),
                refused: AtomicU64::new(0),
                wakeups: AtomicU64::new(0),
            }),
            consumer: CachePadded::new(ConsumerHeader {
                head: AtomicUsize::new(0),
                closed: AtomicBool::new(false),
            }),
            wake: CachePadded::new(WakeHeader {
                wakecnt: AtomicU32::new(0),
                mode: self.wake,
                #[cfg(not(loom))]
                event,
            }),
            ring,
        });
        // The ring's heap block never moves while `shared` lives, and both handles hold `shared`.
        let ring = ring_base(&shared.ring);
        let mask = capacity - 1;
        let barrier = Barrier::get();
        let producer = Producer {
            shared: Arc::clone(&shared),
            ring,
            mask,
            tail: 0,
            cached_head: 0,
            wakecnt: 0,
            refused: 0,
            wakeups: 0,
            mode: self.wake,
            barrier,
            _not_sync: PhantomData,
        };
        let consumer = Consumer {
            shared,
            ring,
            mask,
            head: 0,
            cached_tail: 0,
            returned: 0,
            polled_from: 0,
            return_low: return_batch(capacity) - 1,
            wakecnt: 0,
            mode: self.wake,
            spin: self.spin,
            _not_sync: PhantomData,
        };
        Ok((producer, consumer))
    }
}

/// Whether free-running index `a` comes before `b` (indices never drift more than two laps apart).
#[inline(always)]
#[allow(clippy::cast_possible_wrap, reason = "a signed distance by design")]
fn before(a: usize, b: usize) -> bool {
    (a.wrapping_sub(b) as isize) < 0
}

/// Whether `items` holds [`EMPTY`]: eight items at a time without an early exit, so the compiler
/// compares vectors of them (a search that stops at the first match compares one at a time).
#[inline(always)]
fn holds_empty(items: &[u32]) -> bool {
    // All ones where an item is `EMPTY` (`!item == 0`), ORed: a compare and an OR per vector.
    items.iter().fold(0u32, |any, &item| any | u32::from(item == EMPTY).wrapping_neg()) != 0
}

/// Splits a run of `n` slots that starts at ring position `start` at the ring's end (`capacity`
/// slots): how many lie from `start` to the end, and how many wrap to slot 0 (0 when none do).
/// `n` is at most `capacity`.
#[inline(always)]
fn split_at_end(start: usize, n: usize, capacity: usize) -> (usize, usize) {
    let first = n.min(capacity - start);
    (first, n - first)
}

/// Marker that makes a handle `!Sync` (and, until the explicit impl, `!Send`).
type NotSync = PhantomData<*const ()>;

/// The ring slot for free-running `index`.
#[inline(always)]
fn slot<'a>(ring: NonNull<AtomicU32>, mask: usize, index: usize) -> &'a AtomicU32 {
    // SAFETY: `index & mask < capacity`, so the pointer is inside the ring allocation; both handles keep
    // that allocation alive (through `shared`) for as long as they can call this, and never move it.
    unsafe { &*ring.as_ptr().wrapping_add(index & mask) }
}

/// The sending end of a net channel: the driver or channelizer side.
///
/// `Send` but not `Sync` or `Clone`: exactly one thread produces at a time.
pub struct Producer {
    shared: Arc<Shared>,
    ring: NonNull<AtomicU32>,
    mask: usize,
    /// Authoritative copy of `producer.tail`: only this handle writes it.
    tail: usize,
    /// Last value read from `consumer.head`; the ring has at least `capacity - (tail - cached_head)`
    /// free slots.
    cached_head: usize,
    /// Authoritative copy of `producer.wakecnt`.
    wakecnt: u32,
    refused: u64,
    wakeups: u64,
    mode: WakeMode,
    barrier: Barrier,
    _not_sync: NotSync,
}

// SAFETY: the handle owns its half of the protocol; moving it to another thread moves that ownership.
// `ring` points into the `Arc`-owned allocation, which the handle keeps alive.
unsafe impl Send for Producer {}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity())
            .field("mode", &self.mode)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Producer {
    /// The number of slots in the ring.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Free slots right now, as far as the consumer has handed them back (re-reads the consumer's
    /// index; up to [`RETURN_SLOTS`]` - 1` popped slots may not be back yet while the consumer is
    /// behind, see "Returning slots" in the module docs).
    #[must_use]
    pub fn free_space(&mut self) -> usize {
        // Acquire: pairs with the Release store of `head` in `Consumer::pop_burst`.
        self.cached_head = self.shared.consumer.head.load(Ordering::Acquire);
        self.capacity() - self.tail.wrapping_sub(self.cached_head)
    }

    /// Whether the consumer has been dropped (pushes still succeed but nobody will read them).
    #[must_use]
    pub fn is_abandoned(&self) -> bool {
        // Acquire: pairs with the Release store in `Consumer::drop`.
        self.shared.consumer.closed.load(Ordering::Acquire)
    }

    /// The channel's counters.
    #[must_use]
    pub fn stats(&self) -> ChannelStats {
        self.shared.stats()
    }

    /// Enqueues one item, waking the consumer if it asked. On a full ring (full as far as the consumer
    /// has handed slots back, see [`Producer::free_space`]) the item comes back in the error and is
    /// counted in [`ChannelStats::refused_full`].
    ///
    /// # Errors
    ///
    /// [`PushError::Full`] when no slot is free.
    ///
    /// # Panics
    ///
    /// If `item` is [`EMPTY`], the one value a channel cannot carry.
    #[inline]
    pub fn push(&mut self, item: u32) -> Result<(), PushError> {
        assert_ne!(item, EMPTY, "u32::MAX marks an empty net channel slot and cannot be sent");
        if self.tail.wrapping_sub(self.cached_head) == self.capacity() {
            // Acquire: pairs with the Release store of `head` in `Consumer::pop_burst`, so the
            // consumer's reads of the slots we are about to reuse happen before our writes.
            self.cached_head = self.shared.consumer.head.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.cached_head) == self.capacity() {
                self.count_refused(1);
                return Err(PushError::Full(item));
            }
        }
        // SAFETY: the slot at `tail` is free (checked above) and only the producer writes free slots.
        unsafe { self.write_first(self.tail, item) };
        self.tail = self.tail.wrapping_add(1);
        self.publish();
        Ok(())
    }

    /// Enqueues as many of `items` as fit, in order, with one index publication and one wakeup check
    /// for the whole burst. Returns how many were enqueued; the rest are counted as refused.
    ///
    /// # Panics
    ///
    /// If an item is [`EMPTY`], the one value a channel cannot carry.
    #[inline]
    pub fn push_burst(&mut self, items: &[u32]) -> usize {
        assert!(!holds_empty(items), "u32::MAX marks an empty net channel slot and cannot be sent");
        self.push_indices(items)
    }

    /// [`push_burst`](Self::push_burst) without the check for [`EMPTY`], for pool buffer indices
    /// and frame tokens, which never take it ([`MAX_BUFFERS`](crate::pool::MAX_BUFFERS)). An
    /// [`EMPTY`] pushed here would not be unsafe, but `pop` would take it for an empty slot and not
    /// see it (nor what follows) until the consumer reads `tail` (`pop_burst`, `len`, `wait`).
    #[inline(always)]
    pub(crate) fn push_indices(&mut self, items: &[u32]) -> usize {
        debug_assert!(!holds_empty(items), "a pool index is never EMPTY");
        let capacity = self.capacity();
        let mut free = capacity - self.tail.wrapping_sub(self.cached_head);
        if free < items.len() {
            // Acquire: pairs with the Release store of `head` in `Consumer::pop_burst`.
            self.cached_head = self.shared.consumer.head.load(Ordering::Acquire);
            free = capacity - self.tail.wrapping_sub(self.cached_head);
        }
        let n = items.len().min(free);
        if n < items.len() {
            self.count_refused(items.len() - n);
        }
        if n == 0 {
            return 0;
        }
        // Every slot but the first with plain stores, then the first: the consumer's `pop` polls the
        // slot at `tail` and so reaches the others only after it (see `write_behind`).
        if n > 1 {
            let next = self.tail.wrapping_add(1);
            let start = next & self.mask;
            let rest = &items[1..n];
            let (first, wrapped) = split_at_end(start, rest.len(), capacity);
            // SAFETY: `n <= free`, so `[tail, tail + n)` are free slots; `first` stops at the ring's
            // end; none of them is the slot at `tail`.
            unsafe { self.write_behind(start, &rest[..first]) };
            if wrapped > 0 {
                // SAFETY: the remainder of the same free run, wrapped to slot 0.
                unsafe { self.write_behind(0, &rest[first..]) };
            }
        }
        // SAFETY: free, as above.
        unsafe { self.write_first(self.tail, items[0]) };
        self.tail = self.tail.wrapping_add(n);
        self.publish();
        n
    }

    /// Publishes `self.tail` and wakes the consumer if it asked for a wakeup.
    #[inline(always)]
    fn publish(&mut self) {
        // Release: publishes the slot writes; pairs with the Acquire loads of `tail` in
        // `Consumer::pop_burst`, `Consumer::pop` and `Consumer::request_wakeup`.
        self.shared.producer.tail.store(self.tail, Ordering::Release);
        self.check_wakeup();
    }

    #[inline(always)]
    fn check_wakeup(&mut self) {
        if self.mode == WakeMode::Poll {
            return;
        }
        // StoreLoad between the `tail` store above and the `wakecnt` load below; pairs with
        // `Barrier::heavy` in `Consumer::request_wakeup` (store-buffering pattern, see module docs).
        self.barrier.light();
        // Relaxed: the barrier pair, not this load, orders it against the consumer's request.
        let requested = self.shared.wake.wakecnt.load(Ordering::Relaxed);
        if requested != self.wakecnt {
            self.send_wakeup(requested);
        }
    }

    #[cold]
    #[inline(never)]
    fn send_wakeup(&mut self, requested: u32) {
        self.wakecnt = requested;
        // Release: the consumer's futex wait compares this word; the change must be visible before the
        // wake below (FUTEX_WAKE is itself a full barrier). Pairs with the Acquire load in
        // `Consumer::request_wakeup`.
        self.shared.producer.wakecnt.store(requested, Ordering::Release);
        self.shared.wake_consumer();
        self.wakeups += 1;
        // Relaxed: statistics only.
        self.shared.producer.wakeups.store(self.wakeups, Ordering::Relaxed);
    }

    #[cold]
    fn count_refused(&mut self, n: usize) {
        self.refused += n as u64;
        // Relaxed: statistics only.
        self.shared.producer.refused.store(self.refused, Ordering::Relaxed);
    }

    /// Writes `item` into the slot at `index`, where the consumer's `pop` may be polling.
    ///
    /// # Safety
    ///
    /// The slot at `index` must be free (in `[tail, returned + capacity)`).
    #[inline(always)]
    unsafe fn write_first(&self, index: usize, item: u32) {
        // Release: publishes the item to `Consumer::pop`, and with it whatever the item names (a
        // packet buffer written before the push), and the burst's other slots written before it;
        // pairs with the Acquire load there.
        slot(self.ring, self.mask, index).store(item, Ordering::Release);
    }

    /// Writes `items` into ring positions `[start, start + items.len())` with plain stores, one
    /// `memcpy`.
    ///
    /// The consumer cannot be reading these slots: `pop` reads the slot at `head` only, and these lie
    /// after the slot at `tail`, which `write_first` fills after them, so the consumer reaches them
    /// only after its Acquire load of that slot has ordered these stores before its loads; `pop_burst`
    /// reads only below a `tail` stored after them; and the consumer finished with them a lap ago and
    /// emptied them before it handed them back.
    ///
    /// # Safety
    ///
    /// The positions must lie inside the ring and be free, and not include the slot at `tail`.
    #[inline(always)]
    unsafe fn write_behind(&self, start: usize, items: &[u32]) {
        #[cfg(not(loom))]
        {
            // `AtomicU32` has the size and alignment of `u32`.
            let dst = self.ring.as_ptr().wrapping_add(start).cast::<u32>();
            // SAFETY: the run is inside the ring and no other thread accesses it now (above); the
            // slots' `UnsafeCell` allows the write; `items` cannot overlap the ring.
            unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), dst, items.len()) };
        }
        #[cfg(loom)]
        for (i, &item) in items.iter().enumerate() {
            // Relaxed: ordered before the consumer's loads by `write_first`'s Release store.
            slot(self.ring, self.mask, start + i).store(item, Ordering::Relaxed);
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // Release: the consumer that sees `closed` also sees every published item; pairs with the
        // Acquire loads in `Consumer::wait` and `Consumer::request_wakeup`.
        self.shared.producer.closed.store(true, Ordering::Release);
        // A consumer asleep waiting for items must learn that none will come.
        self.check_wakeup();
    }
}

/// The receiving end of a net channel: the core that consumes the packets.
///
/// `Send` but not `Sync` or `Clone`: exactly one thread consumes at a time.
pub struct Consumer {
    shared: Arc<Shared>,
    ring: NonNull<AtomicU32>,
    mask: usize,
    /// Authoritative copy of `consumer.head`.
    head: usize,
    /// Last value read from `producer.tail`, or `head` where `pop` has taken items past it.
    cached_tail: usize,
    /// The last value stored in `consumer.head`: the slots below it are handed back.
    returned: usize,
    /// `pop` trusts a slot's content (`EMPTY`, or the item) from this index on; below it, a slot may
    /// still hold the item a `pop_burst` took a lap before (bursts hand slots back without emptying
    /// them), and `pop` asks `tail` instead (see "Empty slots" in the module docs).
    polled_from: usize,
    /// The return batch less one (the batch is a power of two): `advance` hands slots back at
    /// multiples of the batch.
    return_low: usize,
    /// Authoritative copy of `wake.wakecnt`.
    wakecnt: u32,
    mode: WakeMode,
    /// How long `wait` polls before arming.
    spin: Duration,
    _not_sync: NotSync,
}

// SAFETY: as for `Producer`.
unsafe impl Send for Consumer {}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.capacity())
            .field("mode", &self.mode)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// The number of slots in the ring.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// How the consumer waits.
    #[must_use]
    pub fn wake_mode(&self) -> WakeMode {
        self.mode
    }

    /// Items ready to pop right now (re-reads the producer's index).
    #[must_use]
    pub fn len(&mut self) -> usize {
        self.refresh()
    }

    /// Whether no item is ready right now.
    #[must_use]
    pub fn is_empty(&mut self) -> bool {
        self.refresh() == 0
    }

    /// Whether the producer has been dropped. Items it pushed before that may still be queued.
    #[must_use]
    pub fn is_abandoned(&self) -> bool {
        // Acquire: pairs with the Release store in `Producer::drop`.
        self.shared.producer.closed.load(Ordering::Acquire)
    }

    /// The channel's counters. `popped` is exact here (the consumer's own count); from the producer's
    /// side it counts the slots handed back, which may lag by less than [`RETURN_SLOTS`].
    #[must_use]
    pub fn stats(&self) -> ChannelStats {
        ChannelStats { popped: self.head as u64, ..self.shared.stats() }
    }

    /// The eventfd a [`WakeMode::EventFd`] channel signals; register it with epoll (level-triggered),
    /// and call [`Consumer::request_wakeup`] before each wait. `None` in the other modes.
    #[cfg(not(loom))]
    #[must_use]
    pub fn event_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.shared.wake.event.as_ref().map(crate::sys::EventFd::fd)
    }

    /// Dequeues one item.
    #[inline]
    pub fn pop(&mut self) -> Option<u32> {
        let head = self.head;
        let slot = slot(self.ring, self.mask, head);
        // Acquire: pairs with the Release store in `Producer::write_first`. The slot at `head` is
        // read whether or not the producer has filled it: an emptied one holds `EMPTY`.
        let mut item = slot.load(Ordering::Acquire);
        if before(head, self.polled_from) {
            // A slot that a burst took an item from a lap ago and did not empty: `tail` says.
            if self.ready(1) == 0 {
                return None;
            }
            // Relaxed: published below a `tail` loaded with Acquire.
            item = slot.load(Ordering::Relaxed);
        } else if item == EMPTY {
            return None;
        }
        let next = head.wrapping_add(1);
        self.head = next;
        // One item crosses a return boundary exactly when it lands on one (see `advance`). `pop`
        // does not read `tail` on its way, so it cannot tell that it has caught up: it hands slots
        // back, emptied, at the boundaries only, and `pop_burst` and `request_wakeup` hand back the
        // rest.
        if next & self.return_low == 0 {
            self.return_slots(next, true);
        }
        Some(item)
    }

    /// Dequeues up to `out.len()` items into `out`, in order, with one index publication. Returns how
    /// many were dequeued.
    #[inline]
    pub fn pop_burst(&mut self, out: &mut [u32]) -> usize {
        let n = out.len().min(self.ready(out.len()));
        if n == 0 {
            return 0;
        }
        let start = self.head & self.mask;
        let (first, _) = split_at_end(start, n, self.capacity());
        let (a, b) = out[..n].split_at_mut(first);
        // SAFETY: `n <= ready`, so `[head, head + n)` hold published items; `first` stops at the
        // ring's end.
        unsafe { self.read_run(start, a) };
        if !b.is_empty() {
            // SAFETY: the remainder of the same published run, wrapped to slot 0.
            unsafe { self.read_run(0, b) };
        }
        self.advance(n);
        n
    }

    /// Moves `head` past `n` popped items and hands their slots back to the producer when that is
    /// cheap or needed (see "Returning slots" in the module docs): when `head` crosses a
    /// [`RETURN_SLOTS`]-aligned boundary, every slot below the boundary goes back (whole line pairs, so
    /// the producer never writes a line this side is still reading); when the consumer has caught up
    /// with the items it knows of, every slot goes back (the producer is not competing for `head` then,
    /// and a consumer about to idle must not hold slots).
    #[inline(always)]
    fn advance(&mut self, n: usize) {
        let old = self.head;
        let next = old.wrapping_add(n);
        self.head = next;
        if next == self.cached_tail {
            self.return_slots(next, false);
        } else if old ^ next > self.return_low {
            // A bit at or above the batch's changed: a boundary lies in `(old, next]`.
            self.return_slots(next & !self.return_low, false);
        }
    }

    /// Hands the slots in `[self.returned, returned)` (at most `head`) back to the producer: emptied
    /// (`pop`, and a consumer about to sleep), or as they are (`pop_burst`, which then keeps `pop`
    /// from trusting those slots' contents for a lap: `polled_from`).
    #[inline(always)]
    fn return_slots(&mut self, returned: usize, empty: bool) {
        if empty {
            let from = self.returned;
            let start = from & self.mask;
            let n = returned.wrapping_sub(from);
            let (first, wrapped) = split_at_end(start, n, self.capacity());
            // SAFETY: `[self.returned, returned)` lie below `head`: popped, not yet handed back, so
            // the producer does not write them and `pop` does not read them again; `first` stops
            // at the ring's end.
            unsafe { self.empty_run(start, first) };
            if wrapped > 0 {
                // SAFETY: the remainder, wrapped to slot 0.
                unsafe { self.empty_run(0, wrapped) };
            }
        } else {
            let trusted = returned.wrapping_add(self.capacity());
            if before(self.polled_from, trusted) {
                self.polled_from = trusted;
            }
        }
        self.returned = returned;
        // Release: our reads (and emptying) of the slots below `returned` happen before the
        // producer reuses them; pairs with the Acquire loads of `head` in `Producer::push`/
        // `push_burst`/`free_space`.
        self.shared.consumer.head.store(returned, Ordering::Release);
    }

    /// Writes `EMPTY` into ring positions `[start, start + n)`, with plain stores (one `memset`).
    ///
    /// # Safety
    ///
    /// The positions must lie inside the ring, and hold popped items not yet handed back.
    #[inline(always)]
    unsafe fn empty_run(&self, start: usize, n: usize) {
        #[cfg(not(loom))]
        {
            let dst = self.ring.as_ptr().wrapping_add(start).cast::<u32>();
            // SAFETY: inside the ring; no other thread accesses popped slots before they are handed
            // back; `EMPTY` is all ones, so a byte fill writes it.
            unsafe { std::ptr::write_bytes(dst, 0xff, n) };
        }
        #[cfg(loom)]
        for i in 0..n {
            // Relaxed: ordered before the producer's reuse by the Release store of `head`.
            slot(self.ring, self.mask, start + i).store(EMPTY, Ordering::Relaxed);
        }
    }

    /// Asks the producer for a wakeup, then re-checks the ring (VJ's sleep protocol).
    ///
    /// Returns `true` when the ring is still empty and the producer is alive, so the caller may sleep:
    /// the next push will wake it (futex in [`WakeMode::Park`], the eventfd in [`WakeMode::EventFd`]).
    /// Returns `false` when items are ready or the producer is gone; then the caller must not sleep.
    /// [`Consumer::wait`] does this for you; event-loop users call it before each `epoll_wait`.
    ///
    /// In [`WakeMode::Poll`] no wakeup will ever come, so this never returns `true`.
    pub fn request_wakeup(&mut self) -> bool {
        let mut batch = WakeupBatch::new();
        batch.arm(self) && batch.fence().idle(self)
    }

    /// The first half of [`request_wakeup`](Self::request_wakeup): makes the request and hands every
    /// slot back, without the StoreLoad barrier that must follow before the re-check (see
    /// [`WakeupBatch`]). `false` in [`WakeMode::Poll`].
    fn arm_wakeup(&mut self) -> bool {
        if self.mode == WakeMode::Poll {
            return false;
        }
        #[cfg(not(loom))]
        if let Some(event) = &self.shared.wake.event {
            // Clear wakeups already consumed before arming, so a level-triggered poller reports only
            // new ones.
            event.drain();
        }
        // Acquire: pairs with the Release store in `Producer::send_wakeup`.
        let answered = self.shared.producer.wakecnt.load(Ordering::Acquire);
        if answered == self.wakecnt {
            // No request outstanding: make one. (If one is outstanding, the producer has not answered
            // it yet and will, so asking again would only cost it a second wakeup.)
            self.wakecnt = self.wakecnt.wrapping_add(1);
            // Relaxed: ordered against the `tail` load of the re-check by the barrier of
            // `WakeupBatch::fence`.
            self.shared.wake.wakecnt.store(self.wakecnt, Ordering::Relaxed);
        }
        // A consumer about to sleep holds no slot back: a producer that finds the ring full must be
        // able to count on every popped slot.
        if self.returned != self.head {
            self.return_slots(self.head, true);
        }
        true
    }

    /// The second half of [`request_wakeup`](Self::request_wakeup), after the barrier: whether the
    /// ring is still empty and the producer alive.
    fn idle_after_arming(&mut self) -> bool {
        self.refresh() == 0 && !self.is_abandoned()
    }

    /// Blocks until an item is ready, the producer is gone and the ring drained, or `timeout` passes
    /// (`None` waits indefinitely). Does not dequeue. It busy-polls for the builder's
    /// [`spin`](Builder::spin) time, then asks for a wakeup and sleeps; in [`WakeMode::Poll`] it only
    /// busy-polls.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Wait {
        #[cfg(not(loom))]
        let start = std::time::Instant::now();
        #[cfg(not(loom))]
        let deadline = timeout.map(|t| start + t);
        #[cfg(loom)]
        let _ = timeout;
        loop {
            if self.refresh() > 0 {
                return Wait::Ready;
            }
            if self.is_abandoned() {
                // Items published before `closed` are visible now (Release/Acquire on `closed`).
                return if self.refresh() > 0 { Wait::Ready } else { Wait::Closed };
            }
            #[cfg(not(loom))]
            let remaining = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(r) if !r.is_zero() => Some(r),
                    _ => return Wait::TimedOut,
                },
            };
            #[cfg(loom)]
            let remaining = None;
            #[cfg(not(loom))]
            let spinning = self.mode == WakeMode::Poll || start.elapsed() < self.spin;
            #[cfg(loom)]
            let spinning = self.mode == WakeMode::Poll;
            if spinning {
                spin_loop();
                continue;
            }
            // The value the producer has not yet moved past; read before arming so that an answer
            // arriving between arming and sleeping makes the futex wait return at once.
            // Acquire: pairs with the Release store in `Producer::send_wakeup`.
            let answered = self.shared.producer.wakecnt.load(Ordering::Acquire);
            if !self.request_wakeup() {
                continue;
            }
            self.sleep(answered, remaining);
        }
    }

    fn sleep(&self, answered: u32, timeout: Option<Duration>) {
        #[cfg(not(loom))]
        if let Some(event) = &self.shared.wake.event {
            event.poll(timeout);
            return;
        }
        self.shared.producer.wakecnt.wait(answered, timeout);
    }

    /// Items known to be published below `tail`, re-reading `tail` when fewer than `want` are known.
    #[inline(always)]
    fn ready(&mut self, want: usize) -> usize {
        let ready = self.cached_tail.wrapping_sub(self.head);
        // `pop` moves `head` by the slots themselves and may pass `cached_tail`: then `ready` wraps
        // past the capacity, and the refresh sets it right.
        if ready < want || ready > self.capacity() { self.refresh() } else { ready }
    }

    /// Re-reads `tail` and returns the number of ready items.
    #[inline]
    fn refresh(&mut self) -> usize {
        // Acquire: pairs with the Release store of `tail` in `Producer::publish`.
        let tail = self.shared.producer.tail.load(Ordering::Acquire);
        // `pop` may have taken items before the producer stored the `tail` that covers them: a
        // `tail` behind `head` means that nothing is ready.
        self.cached_tail = if tail.wrapping_sub(self.head) <= self.capacity() { tail } else { self.head };
        self.cached_tail.wrapping_sub(self.head)
    }

    /// # Safety
    ///
    /// Slots `[start, start + out.len())` must hold published items and lie inside the ring.
    #[inline(always)]
    unsafe fn read_run(&self, start: usize, out: &mut [u32]) {
        #[cfg(not(loom))]
        {
            // `AtomicU32` has the size and alignment of `u32`.
            let src = self.ring.as_ptr().wrapping_add(start).cast::<u32>().cast_const();
            // SAFETY: the run is inside the ring and published (caller), and the producer does not
            // write it until it is handed back, so plain reads race with nothing; `out` is a distinct
            // caller buffer.
            unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        }
        #[cfg(loom)]
        for (i, item) in out.iter_mut().enumerate() {
            // Relaxed: published by a `tail` the caller loaded with Acquire.
            *item = slot(self.ring, self.mask, start + i).load(Ordering::Relaxed);
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load in `Producer::is_abandoned`.
        self.shared.consumer.closed.store(true, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn split_at_end_names_each_position_once_in_order() {
        for capacity in [1usize, 2, 8, 64] {
            for index in [0usize, 1, capacity - 1, capacity, 3 * capacity - 1, usize::MAX - 2, usize::MAX] {
                let start = index & (capacity - 1);
                for n in 0..=capacity {
                    let (first, wrapped) = split_at_end(start, n, capacity);
                    assert!(start + first <= capacity, "the first part ends inside the ring");
                    let positions: Vec<usize> = (start..start + first).chain(0..wrapped).collect();
                    let expected: Vec<usize> =
                        (0..n).map(|i| index.wrapping_add(i) & (capacity - 1)).collect();
                    assert_eq!(positions, expected, "capacity {capacity}, index {index}, n {n}");
                }
            }
        }
    }

    #[test]
    fn capacity_rounds_up_and_every_slot_is_usable() {
        let (mut tx, mut rx) = Channel::with_capacity(5);
        assert_eq!(tx.capacity(), 8);
        for i in 0..8 {
            tx.push(i).unwrap();
        }
        assert_eq!(tx.push(99), Err(PushError::Full(99)));
        assert_eq!(rx.len(), 8);
        for i in 0..8 {
            assert_eq!(rx.pop(), Some(i));
        }
        assert_eq!(rx.pop(), None);
        let stats = rx.stats();
        assert_eq!((stats.pushed, stats.popped, stats.refused_full), (8, 8, 1));
    }

    #[test]
    fn slots_go_back_a_line_pair_at_a_time_or_when_caught_up() {
        let (mut tx, mut rx) = Channel::with_capacity(4096);
        for i in 0..100 {
            tx.push(i).unwrap();
        }
        assert_eq!(rx.pop(), Some(0));
        assert_eq!(tx.free_space(), 4096 - 100, "one popped slot is not handed back alone");
        assert_eq!((tx.stats().popped, rx.stats().popped), (0, 1));
        for i in 1..40 {
            assert_eq!(rx.pop(), Some(i));
        }
        assert_eq!(tx.free_space(), 4096 - 100 + 32, "the first line pair goes back whole");
        let mut out = [0u32; 64];
        assert_eq!(rx.pop_burst(&mut out[..10]), 10);
        assert_eq!(tx.free_space(), 4096 - 100 + 32, "no boundary crossed");
        assert_eq!(rx.pop_burst(&mut out), 50);
        assert_eq!(tx.free_space(), 4096, "a consumer that caught up holds nothing back");
    }

    #[test]
    fn a_consumer_arming_a_wakeup_hands_every_slot_back() {
        let (mut tx, mut rx) = Channel::with_capacity(4096);
        let items: Vec<u32> = (0..4096).collect();
        assert_eq!(tx.push_burst(&items), 4096);
        assert_eq!(rx.pop(), Some(0));
        assert_eq!(tx.push(1), Err(PushError::Full(1)), "one popped slot is still held back");
        assert!(!rx.request_wakeup(), "items are ready");
        assert_eq!(tx.push(1), Ok(()), "arming handed the slot back");
    }

    #[test]
    fn pop_does_not_trust_slots_a_burst_left_full() {
        let (mut tx, mut rx) = Channel::with_capacity(64);
        let items: Vec<u32> = (0..64).collect();
        let mut out = [0u32; 64];
        assert_eq!(tx.push_burst(&items), 64);
        assert_eq!(rx.pop_burst(&mut out), 64);
        // The slots still hold 0..64 (bursts hand them back as they are): `pop` must ask `tail`.
        assert_eq!(rx.pop(), None, "a slot a burst took its item from is not a new item");
        let items: Vec<u32> = (64..128).collect();
        assert_eq!(tx.push_burst(&items), 64);
        for i in 64..128 {
            assert_eq!(rx.pop(), Some(i));
        }
        // A lap later every slot has been emptied by `pop`: it polls them again.
        assert_eq!(rx.pop(), None);
        tx.push(7).unwrap();
        assert_eq!(rx.pop(), Some(7));
        assert_eq!(rx.pop(), None);
    }

    #[test]
    #[should_panic(expected = "u32::MAX marks an empty net channel slot")]
    fn pushing_the_empty_mark_panics() {
        let (mut tx, _rx) = Channel::with_capacity(8);
        let _ = tx.push(EMPTY);
    }

    #[test]
    #[should_panic(expected = "u32::MAX marks an empty net channel slot")]
    fn a_burst_holding_the_empty_mark_panics() {
        let (mut tx, _rx) = Channel::with_capacity(64);
        let mut items = [1u32; 20];
        items[13] = EMPTY;
        tx.push_burst(&items);
    }

    #[test]
    fn a_refused_burst_leaves_nothing_for_pop() {
        // A burst holding EMPTY panics with nothing of it in the ring: a producer that survives
        // the panic pushes one item, and `pop` must see that item and nothing after it. The ring wraps under the burst, the refused
        // items beyond what fits are checked too, and the slots were emptied or left full by a
        // burst before.
        for (capacity, start, len, at) in
            [(64, 0, 20, 19), (64, 50, 20, 17), (16, 10, 30, 25), (64, 40, 3, 1)]
        {
            let (mut tx, mut rx) = Channel::with_capacity(capacity);
            let mut out = vec![0; capacity];
            for item in (1000u32..).take(start) {
                assert!(tx.push(item).is_ok());
            }
            assert_eq!(rx.pop_burst(&mut out[..start / 2]), start / 2);
            while rx.pop().is_some() {}
            let mut items: Vec<u32> = (0u32..).take(len).collect();
            items[at] = EMPTY;
            let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tx.push_burst(&items)));
            assert!(refused.is_err(), "capacity {capacity}, start {start}");
            assert!(tx.push(7).is_ok());
            assert_eq!(rx.pop(), Some(7), "capacity {capacity}, start {start}");
            assert_eq!(rx.pop(), None, "capacity {capacity}, start {start}: a refused item came through");
            assert_eq!(rx.pop_burst(&mut out), 0);
        }
    }

    #[test]
    fn bad_capacities_are_errors() {
        assert!(matches!(Channel::builder(0).build(), Err(BuildError::ZeroCapacity)));
        assert!(matches!(Channel::builder(MAX_CAPACITY + 1).build(), Err(BuildError::CapacityTooLarge(_))));
        assert!(matches!(Channel::builder(usize::MAX).build(), Err(BuildError::CapacityTooLarge(_))));
    }

    #[test]
    fn bursts_wrap_around_the_ring() {
        let (mut tx, mut rx) = Channel::with_capacity(8);
        let mut out = [0u32; 8];
        let mut next = 0u32;
        let mut expect = 0u32;
        for round in 0..100 {
            let n = 1 + round % 7;
            let items: Vec<u32> = (next..next + n).collect();
            assert_eq!(tx.push_burst(&items), n as usize);
            next += n;
            let got = rx.pop_burst(&mut out);
            assert_eq!(got, n as usize);
            for &v in &out[..got] {
                assert_eq!(v, expect);
                expect += 1;
            }
        }
    }

    #[test]
    fn push_burst_partial_when_nearly_full() {
        let (mut tx, mut rx) = Channel::with_capacity(4);
        assert_eq!(tx.push_burst(&[1, 2, 3]), 3);
        assert_eq!(tx.push_burst(&[4, 5, 6]), 1);
        assert_eq!(tx.stats().refused_full, 2);
        let mut out = [0; 8];
        assert_eq!(rx.pop_burst(&mut out), 4);
        assert_eq!(&out[..4], &[1, 2, 3, 4]);
        assert_eq!(tx.push_burst(&[]), 0);
        assert_eq!(rx.pop_burst(&mut []), 0);
    }

    #[test]
    fn headers_sit_on_separate_line_pairs() {
        let (tx, _rx) = Channel::with_capacity(16);
        let base = std::ptr::from_ref(&*tx.shared) as usize;
        let p = std::ptr::from_ref(&tx.shared.producer.tail) as usize - base;
        let c = std::ptr::from_ref(&tx.shared.consumer.head) as usize - base;
        let w = std::ptr::from_ref(&tx.shared.wake.wakecnt) as usize - base;
        let line = std::mem::align_of::<CachePadded<u8>>();
        #[cfg(target_arch = "x86_64")]
        assert_eq!(line, 128);
        assert_ne!(p / line, c / line);
        assert_ne!(c / line, w / line);
        assert_ne!(p / line, w / line);
        assert_eq!(tx.ring.as_ptr() as usize % line, 0, "the ring starts on a line pair of its own");
    }

    #[test]
    fn wait_times_out_on_empty_ring() {
        for mode in [WakeMode::Poll, WakeMode::Park, WakeMode::EventFd] {
            let (_tx, mut rx) = Channel::builder(4).wake(mode).build().unwrap();
            let t = std::time::Instant::now();
            assert_eq!(rx.wait(Some(Duration::from_millis(20))), Wait::TimedOut);
            assert!(t.elapsed() >= Duration::from_millis(20), "{mode:?}");
        }
    }

    #[test]
    fn dropping_the_producer_wakes_a_sleeping_consumer() {
        for mode in [WakeMode::Poll, WakeMode::Park, WakeMode::EventFd] {
            let (mut tx, mut rx) = Channel::builder(4).wake(mode).build().unwrap();
            let sleeper = std::thread::spawn(move || {
                let first = rx.wait(None);
                let item = rx.pop();
                let second = rx.wait(None);
                (first, item, second)
            });
            std::thread::sleep(Duration::from_millis(10));
            tx.push(7).unwrap();
            std::thread::sleep(Duration::from_millis(10));
            drop(tx);
            assert_eq!(sleeper.join().unwrap(), (Wait::Ready, Some(7), Wait::Closed), "{mode:?}");
        }
    }

    #[test]
    fn abandonment_is_visible_to_both_sides() {
        let (tx, rx) = Channel::with_capacity(4);
        assert!(!tx.is_abandoned());
        drop(rx);
        assert!(tx.is_abandoned());
        let (tx, rx) = Channel::with_capacity(4);
        drop(tx);
        assert!(rx.is_abandoned());
    }

    #[test]
    fn eventfd_becomes_readable_only_after_a_request() {
        use std::os::fd::AsRawFd;
        let readable = |fd: std::os::fd::BorrowedFd<'_>| {
            let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one live pollfd, zero timeout.
            unsafe { libc::poll(&raw mut pfd, 1, 0) == 1 }
        };
        let (mut tx, mut rx) = Channel::builder(8).wake(WakeMode::EventFd).build().unwrap();
        tx.push(1).unwrap();
        assert!(!readable(rx.event_fd().unwrap()), "no request, no wakeup");
        assert_eq!(rx.pop(), Some(1));
        assert!(rx.request_wakeup());
        tx.push(2).unwrap();
        assert!(readable(rx.event_fd().unwrap()));
        assert_eq!(tx.stats().wakeups, 1);
        tx.push(3).unwrap();
        assert_eq!(tx.stats().wakeups, 1, "one wakeup per request");
        // Items are ready, so the consumer must not sleep; arming drains the stale signal.
        assert!(!rx.request_wakeup());
        assert!(!readable(rx.event_fd().unwrap()));
    }
}
