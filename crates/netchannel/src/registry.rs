//! The signature registry: a read-mostly concurrent hash map from keys (transport signatures) to small
//! `Copy` values (consumer/channel ids), read once per packet without a lock or an atomic
//! read-modify-write, under quiescent-state-based reclamation.
//!
//! Source: the RCU-protected hash chains of the Linux kernel and liburcu (McKenney & Walpole, "What is
//! RCU, Fundamentally?", LWN 2007; liburcu `rculfhash` for the resize-by-copy idea, here simplified to a
//! single writer lock). See [`crate::rcu`] for the reclamation protocol.
//!
//! # Structure
//!
//! A table pointer → a power-of-two bucket array → singly linked chains of immutable nodes
//! `{key, value, next}`. Readers load the table and every link with `Acquire`; writers serialize on a
//! mutex and publish with `Release` stores:
//!
//! * **insert**: the new node's `next` is the bucket head; then the head is set to the node.
//! * **remove**: the predecessor's link is set to the node's `next`; the node is retired.
//! * **repoint** (a stolen connection's new channel): a replacement node with the same `next` is stored
//!   into the predecessor's link in one `Release` store, so a reader sees the old or the new node, never
//!   neither; the old node is retired. Its `next` is never written again, so a reader standing on it
//!   still walks the rest of the chain (whose later removals are retired after it).
//! * **grow** (when the table holds more entries than half its buckets, so that a hit probes 1.19
//!   nodes on average): a new array with twice the buckets and copies of every node is built
//!   privately, then the table pointer is published; the old array and its nodes are retired
//!   together. A reader on the old table sees a consistent old snapshot.
//!
//! Retired objects are freed by the reclaimer after a grace period; dropping the registry frees the
//! live table at once (no lookup can be running: it borrows the registry).
//!
//! # Guarantees
//!
//! After [`Registration::repoint`] returns and every reader has passed a quiescent state (e.g. after
//! [`Reclaim::synchronize`]), no lookup returns the old value. A lookup through a reader that is offline
//! or belongs to another domain is still correct: it takes the writer lock.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use netchannel::rcu::{Qsbr, Reclaim, ReadSide};
//! use netchannel::registry::{HashKey, Registry, RegistryKey};
//!
//! #[derive(Clone, Copy, Debug, PartialEq, Eq)]
//! struct Port(u16);
//! impl RegistryKey for Port {
//!     fn hash64(&self, key: &HashKey) -> u64 {
//!         (u64::from(self.0) ^ key.words()[0]).wrapping_mul(0x9E37_79B9_7F4A_7C15)
//!     }
//! }
//!
//! let domain = Qsbr::new();
//! let registry = Arc::new(Registry::<Port, u32, _>::new(domain.clone()));
//! let mut conn = registry.register(Port(80), 1).unwrap();
//! assert!(registry.register(Port(80), 2).is_err()); // a duplicate hands the entry back
//!
//! let mut reader = domain.register(); // on the driver thread
//! assert_eq!(registry.lookup(&mut reader, &Port(80)), Some(1));
//! conn.repoint(7); // the connection was stolen by the core owning channel 7
//! reader.quiescent(); // end of burst
//! assert_eq!(registry.lookup(&mut reader, &Port(80)), Some(7));
//! drop(conn);
//! assert_eq!(registry.lookup(&mut reader, &Port(80)), None);
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::ptr;
use std::sync::{Arc, PoisonError};

use crate::rcu::{ReadSide, Reclaim};
use crate::sync::{Mutex, MutexGuard, Ordering, UnsafeCell};

#[cfg(loom)]
use loom::sync::atomic::AtomicPtr;
#[cfg(not(loom))]
use std::sync::atomic::AtomicPtr;

/// A registry key: `Copy`, comparable, and hashable under the registry's secret [`HashKey`].
pub trait RegistryKey: Copy + Eq + Send + Sync + 'static {
    /// A 64-bit hash of the key under `key`; the low bits pick the bucket, so they must be well mixed.
    fn hash64(&self, key: &HashKey) -> u64;
}

/// A registry's secret hash key: four words expanded once from its seed (SplitMix64), so that a key's
/// hash mixes its material with ready words instead of deriving them on every lookup.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HashKey([u64; 4]);

impl HashKey {
    /// The key expanded from `seed`. Every seed, zero included, gives four well-mixed words; the
    /// last is odd.
    #[must_use]
    pub const fn from_seed(seed: u64) -> Self {
        /// One SplitMix64 output for state `x` (Steele, Lea and Flood, 2014); ours because it runs
        /// in a `const fn`, which no generator crate's is.
        const fn splitmix(x: u64) -> u64 {
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
        Self([
            splitmix(seed.wrapping_add(GAMMA)),
            splitmix(seed.wrapping_add(GAMMA.wrapping_mul(2))),
            splitmix(seed.wrapping_add(GAMMA.wrapping_mul(3))),
            // Odd, so never zero: hashes may use it as a multiplier.
            splitmix(seed.wrapping_add(GAMMA.wrapping_mul(4))) | 1,
        ])
    }

    /// The four words.
    #[must_use]
    #[inline(always)]
    pub const fn words(&self) -> &[u64; 4] {
        &self.0
    }
}

/// Does not print the words: they are the registry's secret.
impl fmt::Debug for HashKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HashKey(..)")
    }
}

/// The largest bucket array the registry grows to (2^30 buckets).
const MAX_BUCKETS: usize = 1 << 30;

/// Buckets per entry the table keeps at least (it doubles when the entries pass half its buckets, up
/// to `MAX_BUCKETS`): a load factor α of at most 1/2, so a hit probes 1 + α/2 nodes, about 1.19 on
/// average as α goes from 1/4 to 1/2 between doublings (1.38 with up to one entry per bucket), for
/// 16 to 32 bytes of buckets per entry.
const BUCKETS_PER_ENTRY: usize = 2;

/// A bucket head or a node's `next`.
type Link<K, V> = AtomicPtr<Node<K, V>>;

/// Where a key's node hangs: the link pointing to it, and the node.
type Found<'t, K, V> = (&'t Link<K, V>, *mut Node<K, V>);

struct Node<K, V> {
    /// Immutable after publication; a loom-tracked cell so the model catches a read of a freed node.
    entry: UnsafeCell<(K, V)>,
    next: AtomicPtr<Node<K, V>>,
}

#[cfg(loom)]
impl<K, V> Drop for Node<K, V> {
    fn drop(&mut self) {
        // Under loom, freeing is a write of the entry: a concurrent unsynchronized read is reported.
        self.entry.with_mut(|_| ());
    }
}

impl<K: Copy, V: Copy> Node<K, V> {
    fn alloc(key: K, value: V, next: *mut Self) -> *mut Self {
        Box::into_raw(Box::new(Self { entry: UnsafeCell::new((key, value)), next: AtomicPtr::new(next) }))
    }

    fn entry(&self) -> (K, V) {
        // SAFETY: the entry is written only at construction and read-only afterwards; the node is
        // reachable (published with Release, loaded with Acquire) and not yet freed (caller's grace
        // period or writer lock).
        self.entry.with(|p| unsafe { *p })
    }
}

struct Table<K, V> {
    mask: usize,
    buckets: Box<[AtomicPtr<Node<K, V>>]>,
}

impl<K: Copy, V: Copy> Table<K, V> {
    fn new(buckets: usize) -> Box<Self> {
        let buckets: Box<[_]> = (0..buckets).map(|_| AtomicPtr::new(ptr::null_mut())).collect();
        Box::new(Self { mask: buckets.len() - 1, buckets })
    }

    #[inline(always)]
    fn bucket(&self, hash: u64) -> &AtomicPtr<Node<K, V>> {
        self.heads().bucket(hash)
    }

    /// The bucket array and its mask as plain values, which a [`View`] holds for a whole section.
    #[inline(always)]
    fn heads(&self) -> Heads<'_, K, V> {
        Heads { buckets: &self.buckets, mask: self.mask }
    }
}

/// A table's bucket array and mask (`mask == buckets.len() - 1`, a power of two minus one).
struct Heads<'t, K, V> {
    buckets: &'t [AtomicPtr<Node<K, V>>],
    mask: usize,
}

impl<K, V> Clone for Heads<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V> Copy for Heads<'_, K, V> {}

impl<'t, K, V> Heads<'t, K, V> {
    #[inline(always)]
    fn bucket(self, hash: u64) -> &'t AtomicPtr<Node<K, V>> {
        #[expect(clippy::cast_possible_truncation, reason = "only the low bits index the table")]
        let i = hash as usize & self.mask;
        // SAFETY: `mask == buckets.len() - 1` (a power of two: `Table::new` and `Table::heads`), so
        // `i < buckets.len()`.
        unsafe { self.buckets.get_unchecked(i) }
    }
}

impl<K, V> Drop for Table<K, V> {
    fn drop(&mut self) {
        // Exclusive: a table is dropped after its grace period (retired) or with the registry.
        for b in &*self.buckets {
            // Relaxed: exclusive access, ordered by the grace period or `&mut Registry`.
            let mut p = b.load(Ordering::Relaxed);
            while !p.is_null() {
                // SAFETY: nodes reachable from a dropped table belong to it alone (grow copies them,
                // removal unlinks them before retiring) and were allocated by `Node::alloc`.
                let node = unsafe { Box::from_raw(p) };
                // Relaxed: exclusive access, as above.
                p = node.next.load(Ordering::Relaxed);
            }
        }
    }
}

/// The error of [`Registry::register`]: the key is already registered; the entry comes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DuplicateKey<K, V> {
    /// The key that was not registered.
    pub key: K,
    /// Its value.
    pub value: V,
}

impl<K, V> DuplicateKey<K, V> {
    /// The entry that was not registered.
    #[must_use]
    pub fn into_inner(self) -> (K, V) {
        (self.key, self.value)
    }
}

impl<K, V> fmt::Display for DuplicateKey<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("key already registered")
    }
}

impl<K: fmt::Debug, V: fmt::Debug> std::error::Error for DuplicateKey<K, V> {}

struct Writer {
    len: usize,
}

/// A concurrent map from `K` to `V` with lock-free, RMW-free lookups under the reclaimer `R`.
pub struct Registry<K, V, R>
where
    K: RegistryKey,
    V: Copy + Send + Sync + 'static,
    R: Reclaim,
{
    table: AtomicPtr<Table<K, V>>,
    key: HashKey,
    reclaim: R,
    writer: Mutex<Writer>,
    #[cfg(loom)]
    broken: crate::sync::AtomicBool,
    // Owns nodes of `(K, V)` (immutable after publication, so shared reads are fine).
    _owns: PhantomData<Box<(K, V)>>,
}

impl<K, V, R> fmt::Debug for Registry<K, V, R>
where
    K: RegistryKey,
    V: Copy + Send + Sync + 'static,
    R: Reclaim,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("len", &self.len())
            .field("buckets", &self.buckets())
            .finish_non_exhaustive()
    }
}

impl<K, V, R> Registry<K, V, R>
where
    K: RegistryKey,
    V: Copy + Send + Sync + 'static,
    R: Reclaim,
{
    /// An empty registry with a random hash seed.
    pub fn new(reclaim: R) -> Self {
        Self::with_capacity(reclaim, 16)
    }

    /// An empty registry with room for `capacity` entries before it grows (a table of at least
    /// `2 × capacity` buckets, [`buckets`](Self::buckets)), and a random hash seed.
    pub fn with_capacity(reclaim: R, capacity: usize) -> Self {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one(0x6e63_7265_6769_7374_u64);
        Self::with_capacity_and_seed(reclaim, capacity, seed)
    }

    /// An empty registry with room for `capacity` entries and the hash seed `seed`.
    pub fn with_capacity_and_seed(reclaim: R, capacity: usize, seed: u64) -> Self {
        let buckets = capacity.saturating_mul(BUCKETS_PER_ENTRY).clamp(1, MAX_BUCKETS).next_power_of_two();
        Self {
            table: AtomicPtr::new(Box::into_raw(Table::new(buckets))),
            key: HashKey::from_seed(seed),
            reclaim,
            writer: Mutex::new(Writer { len: 0 }),
            #[cfg(loom)]
            broken: crate::sync::AtomicBool::new(false),
            _owns: PhantomData,
        }
    }

    /// The reclaimer.
    pub fn reclaim(&self) -> &R {
        &self.reclaim
    }

    fn lock(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many entries are registered.
    pub fn len(&self) -> usize {
        self.lock().len
    }

    /// Whether no entry is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of buckets.
    pub fn buckets(&self) -> usize {
        let w = self.lock();
        self.current(&w).buckets.len()
    }

    /// Looks `key` up: lock-free and free of atomic read-modify-writes when `reader` is an online
    /// reader of this registry's domain; otherwise it takes the writer lock (still correct).
    #[inline]
    pub fn lookup(&self, reader: &mut R::Reader, key: &K) -> Option<V> {
        if !(reader.is_online() && self.reclaim.owns(reader)) {
            return self.lookup_locked(key);
        }
        // SAFETY: `reader` is an online reader of our domain, and inside `read_section` it cannot
        // become quiescent, so no node or table we reach is freed before we return (the reclaimer's
        // contract); nothing we reach escapes the call (we return a copy).
        R::read_section(reader, || unsafe { self.lookup_raw(key) })
    }

    /// Runs `f` with a [`View`] for looking keys up in a burst: the checks and the read-side section
    /// that [`lookup`](Self::lookup) pays per call are paid once here. Lock-free and free of atomic
    /// read-modify-writes when `reader` is an online reader of this registry's domain; otherwise `f`
    /// runs holding the writer lock (still correct, and writers wait for it). `reader` cannot announce
    /// a quiescent state while `f` runs (it is borrowed), so a channelizer wraps one burst in one call.
    ///
    /// `f` must not register, re-point or unregister entries of this registry: on the locked path
    /// that would wait for the lock `f` runs under.
    #[inline]
    pub fn read<T>(&self, reader: &mut R::Reader, f: impl FnOnce(&View<'_, K, V, R>) -> T) -> T {
        if reader.is_online() && self.reclaim.owns(reader) {
            // SAFETY: inside the read-side section of an online reader of our domain, which lasts as
            // long as the view (`f` borrows it), so the table stays live.
            R::read_section(reader, || f(&unsafe { self.view() }))
        } else {
            let _w = self.lock();
            // SAFETY: under the writer lock, held as long as the view, the table stays live.
            f(&unsafe { self.view() })
        }
    }

    /// A view of the current table.
    ///
    /// # Safety
    ///
    /// As [`lookup_raw`](Self::lookup_raw), for as long as the view lives.
    #[inline(always)]
    unsafe fn view(&self) -> View<'_, K, V, R> {
        // Acquire: as in `lookup_raw`.
        let table = self.table.load(Ordering::Acquire);
        // SAFETY: live for as long as the view (the caller's contract).
        View { registry: self, table: unsafe { &*table }.heads() }
    }

    #[cold]
    fn lookup_locked(&self, key: &K) -> Option<V> {
        let _w = self.lock();
        // SAFETY: under the writer lock the table and every node reachable from it stay live (only
        // lock holders unlink and retire).
        unsafe { self.lookup_raw(key) }
    }

    /// # Safety
    ///
    /// The caller must keep every node and table reachable during the call from being freed: be
    /// inside a read-side section of an online reader of `self.reclaim`, or hold the writer lock.
    #[inline(always)]
    unsafe fn lookup_raw(&self, key: &K) -> Option<V> {
        // Acquire: the table and its initial chains are initialized before we read them; pairs with
        // the Release store in `grow` (and the constructor, ordered by the registry's publication).
        let table = self.table.load(Ordering::Acquire);
        // SAFETY: live by the caller's contract.
        let table = unsafe { &*table };
        // SAFETY: its nodes are live by the caller's contract too.
        unsafe { self.lookup_in(table.heads(), key) }
    }

    /// Looks `key` up in the buckets of `table`, this registry's current table or one it retired.
    ///
    /// # Safety
    ///
    /// As [`lookup_raw`](Self::lookup_raw): every node reachable from `table` stays live during the
    /// call.
    #[inline(always)]
    unsafe fn lookup_in(&self, table: Heads<'_, K, V>, key: &K) -> Option<V> {
        // Acquire: the node's entry and `next` are initialized; pairs with the Release stores in
        // `register`, `repoint`, `unlink` and `grow`.
        let mut p = table.bucket(key.hash64(&self.key)).load(Ordering::Acquire);
        // SAFETY: non-null links point to nodes that are live by the caller's contract.
        while let Some(node) = unsafe { p.as_ref() } {
            let (k, v) = node.entry();
            if k == *key {
                return Some(v);
            }
            // Acquire: as for the bucket head.
            p = node.next.load(Ordering::Acquire);
        }
        None
    }

    /// The link that points to `key`'s node, and the node. Writer lock held.
    fn find<'t>(table: &'t Table<K, V>, hash_key: &HashKey, key: &K) -> Option<Found<'t, K, V>> {
        let mut link = table.bucket(key.hash64(hash_key));
        loop {
            // Relaxed: under the writer lock, which orders every store to the table.
            let p = link.load(Ordering::Relaxed);
            // SAFETY: nodes reachable from the current table are live while the writer lock is held.
            let node = unsafe { p.as_ref() }?;
            if node.entry().0 == *key {
                return Some((link, p));
            }
            link = &node.next;
        }
    }

    /// The current table. Writer lock held.
    fn current(&self, _w: &MutexGuard<'_, Writer>) -> &Table<K, V> {
        // Relaxed: under the writer lock, which orders every table store.
        let t = self.table.load(Ordering::Relaxed);
        // SAFETY: the current table is live while the writer lock is held.
        unsafe { &*t }
    }

    /// Registers `key → value`; the entry lives until the returned [`Registration`] is dropped.
    ///
    /// # Errors
    ///
    /// [`DuplicateKey`] (with the entry) if `key` is already registered; nothing changes.
    pub fn register(self: &Arc<Self>, key: K, value: V) -> Result<Registration<K, V, R>, DuplicateKey<K, V>> {
        let mut w = self.lock();
        let table = self.current(&w);
        if Self::find(table, &self.key, &key).is_some() {
            return Err(DuplicateKey { key, value });
        }
        let head = table.bucket(key.hash64(&self.key));
        // Relaxed: under the writer lock.
        let node = Node::alloc(key, value, head.load(Ordering::Relaxed));
        // Release: publishes the node's entry and `next`; pairs with the Acquire loads in `lookup_raw`.
        head.store(node, Ordering::Release);
        w.len += 1;
        if w.len > table.buckets.len() / BUCKETS_PER_ENTRY && table.buckets.len() < MAX_BUCKETS {
            self.grow(&w);
        }
        drop(w);
        Ok(Registration { registry: Arc::clone(self), key, value })
    }

    fn grow(&self, w: &MutexGuard<'_, Writer>) {
        let old = self.current(w);
        let new = Table::new(old.buckets.len() * 2);
        for b in &*old.buckets {
            // Relaxed: under the writer lock.
            let mut p = b.load(Ordering::Relaxed);
            // SAFETY: nodes of the current table are live under the writer lock.
            while let Some(node) = unsafe { p.as_ref() } {
                let (k, v) = node.entry();
                let head = new.bucket(k.hash64(&self.key));
                // Relaxed (both): the new table is private until published below.
                head.store(Node::alloc(k, v, head.load(Ordering::Relaxed)), Ordering::Relaxed);
                // Relaxed: under the writer lock.
                p = node.next.load(Ordering::Relaxed);
            }
        }
        // Release: publishes the new table and all its nodes; pairs with the Acquire load in
        // `lookup_raw`.
        let old = self.table.swap(Box::into_raw(new), Ordering::Release);
        // SAFETY: `old` came from `Box::into_raw` and is unreachable now; readers still on it are
        // covered by the grace period before the reclaimer drops it.
        self.retire(unsafe { Box::from_raw(old) });
    }

    fn retire<T: Send + 'static>(&self, b: Box<T>) {
        #[cfg(loom)]
        // Relaxed: a test switch set before the model's threads start.
        if self.broken.load(Ordering::Relaxed) {
            // The deliberately broken variant: destroy now, without a grace period (the memory is
            // leaked, not freed, so the model reports the race instead of reading freed memory).
            let mut b = std::mem::ManuallyDrop::new(b);
            // SAFETY: dropped exactly once, never used again; the allocation is leaked.
            unsafe { ptr::drop_in_place(&mut **b) };
            return;
        }
        self.reclaim.defer_free(b);
    }

    /// Test hook of the loom model: retire without a grace period (must be caught).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn loom_break_reclamation(&self) {
        // Relaxed: set before the model's threads start.
        self.broken.store(true, Ordering::Relaxed);
    }

    fn repoint_locked(&self, key: &K, value: V) {
        let _w = self.lock();
        let table = self.current(&_w);
        if let Some((link, old)) = Self::find(table, &self.key, key) {
            // SAFETY: `old` is live (reachable under the writer lock).
            let next = unsafe { &*old }.next.load(Ordering::Relaxed); // Relaxed: under the writer lock.
            let new = Node::alloc(*key, value, next);
            // Release: publishes the replacement in one store (readers see old or new, never
            // neither); pairs with the Acquire loads in `lookup_raw`.
            link.store(new, Ordering::Release);
            // SAFETY: `old` came from `Node::alloc` and is unlinked now; never written again.
            self.retire(unsafe { Box::from_raw(old) });
        }
    }

    fn unregister(&self, key: &K) {
        let mut w = self.lock();
        let table = self.current(&w);
        if let Some((link, node)) = Self::find(table, &self.key, key) {
            // SAFETY: `node` is live (reachable under the writer lock).
            let next = unsafe { &*node }.next.load(Ordering::Relaxed); // Relaxed: under the writer lock.
            // Release: `next` was published earlier, but readers that reach it through this link
            // must see it initialized too; pairs with the Acquire loads in `lookup_raw`.
            link.store(next, Ordering::Release);
            // SAFETY: `node` came from `Node::alloc` and is unlinked now.
            self.retire(unsafe { Box::from_raw(node) });
            w.len -= 1;
        }
    }
}

impl<K, V, R> Drop for Registry<K, V, R>
where
    K: RegistryKey,
    V: Copy + Send + Sync + 'static,
    R: Reclaim,
{
    fn drop(&mut self) {
        // Relaxed: `&mut self`, so no lookup or writer is running.
        let t = self.table.load(Ordering::Relaxed);
        // SAFETY: the current table came from `Box::into_raw` and no one else can reach it any more.
        drop(unsafe { Box::from_raw(t) });
    }
}

/// Lookups inside one [`Registry::read`] section (one burst). Only `read` makes one, and it cannot
/// outlive the section: the closure receives it by reference and cannot return it.
///
/// The view holds the table as it was when the section began, so a lookup does not load the
/// registry's table pointer again: entries registered, re-pointed or removed during the section are
/// seen by its lookups as they would be by one lookup that began then (a table that grows during the
/// section is seen at the next one, as by a lookup that loaded the old table before the grow). The
/// registry's [guarantees](crate::registry#guarantees) are about quiescent states, which end sections, so they
/// hold as they are.
pub struct View<'r, K, V, R>
where
    K: RegistryKey,
    V: Copy + Send + Sync + 'static,
    R: Reclaim,
{
    registry: &'r Registry<K, V, R>,
    /// The buckets of the table when the section began: live while the view is (the section, or the
    /// writer lock, lasts as long).
    table: Heads<'r, K, V>,
}

impl<K, V, R> fmt::Debug for View<'_, K, V, R>
where
    K: RegistryKey,
    V: Copy + Send + Sync + 'static,
    R: Reclaim,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View").finish_non_exhaustive()
    }
}

impl<K, V, R> View<'_, K, V, R>
where
    K: RegistryKey,
    V: Copy + Send + Sync + 'static,
    R: Reclaim,
{
    /// Looks `key` up (see [`Registry::lookup`]).
    #[inline]
    pub fn lookup(&self, key: &K) -> Option<V> {
        // SAFETY: only `Registry::read` makes a view, and lends it (by reference, so it cannot escape)
        // to a closure that runs either inside a read-side section of an online reader of this
        // registry's domain or holding the writer lock: either way every node and table reachable
        // now stays live until we return a copy.
        unsafe { self.registry.lookup_in(self.table, key) }
    }
}

/// A registered entry: unregistered when dropped.
#[must_use = "dropping a Registration unregisters it"]
pub struct Registration<K, V, R>
where
    K: RegistryKey,
    V: Copy + Send + Sync + 'static,
    R: Reclaim,
{
    registry: Arc<Registry<K, V, R>>,
    key: K,
    value: V,
}

impl<K, V, R> fmt::Debug for Registration<K, V, R>
where
    K: RegistryKey + fmt::Debug,
    V: Copy + Send + Sync + 'static + fmt::Debug,
    R: Reclaim,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration").field("key", &self.key).field("value", &self.value).finish()
    }
}

impl<K, V, R> Registration<K, V, R>
where
    K: RegistryKey,
    V: Copy + Send + Sync + 'static,
    R: Reclaim,
{
    /// The registered key.
    pub fn key(&self) -> K {
        self.key
    }

    /// The current value.
    pub fn value(&self) -> V {
        self.value
    }

    /// The registry.
    pub fn registry(&self) -> &Arc<Registry<K, V, R>> {
        &self.registry
    }

    /// Re-points the entry at `value` (e.g. the stealing core's channel) and returns the old value.
    /// Readers see the old or the new value, never neither; once every reader has passed a quiescent
    /// state after this returns, none sees the old value.
    pub fn repoint(&mut self, value: V) -> V {
        self.registry.repoint_locked(&self.key, value);
        std::mem::replace(&mut self.value, value)
    }
}

impl<K, V, R> Drop for Registration<K, V, R>
where
    K: RegistryKey,
    V: Copy + Send + Sync + 'static,
    R: Reclaim,
{
    fn drop(&mut self) {
        self.registry.unregister(&self.key);
    }
}

/// Tests generic over the reclaimer, instantiated for [`crate::rcu::Qsbr`] and (with the `liburcu`
/// feature) [`crate::urcu::Urcu`].
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) struct Key(pub(super) u32);

    impl RegistryKey for Key {
        fn hash64(&self, key: &HashKey) -> u64 {
            let x = (u64::from(self.0) ^ key.words()[0]).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            x ^ (x >> 29)
        }
    }

    /// A key that hashes everything to one bucket (long chains).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) struct Collide(pub(super) u32);

    impl RegistryKey for Collide {
        fn hash64(&self, _key: &HashKey) -> u64 {
            7
        }
    }

    macro_rules! registry_tests {
        ($name:ident, $new:expr) => {
            mod $name {
                use super::*;
                use crate::rcu::{ReadSide, Reclaim};
                use std::sync::Arc;
                use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as O};

                fn domain() -> impl Reclaim {
                    $new
                }

                #[test]
                fn register_lookup_unregister() {
                    let d = domain();
                    let reg = Arc::new(Registry::<Key, u32, _>::with_capacity(d.clone(), 1));
                    let mut r = d.register();
                    assert_eq!(reg.lookup(&mut r, &Key(1)), None);
                    let a = reg.register(Key(1), 10).unwrap();
                    assert_eq!(reg.lookup(&mut r, &Key(1)), Some(10));
                    let dup = reg.register(Key(1), 11).unwrap_err();
                    assert_eq!(dup.into_inner(), (Key(1), 11));
                    assert_eq!(reg.lookup(&mut r, &Key(1)), Some(10));
                    drop(a);
                    assert_eq!(reg.lookup(&mut r, &Key(1)), None);
                    assert!(reg.is_empty());
                    r.quiescent();
                    d.barrier();
                }

                #[test]
                fn a_view_looks_up_in_the_table_its_section_began_with() {
                    let d = domain();
                    let reg = Arc::new(Registry::<Key, u32, _>::with_capacity(d.clone(), 1));
                    let mut r = d.register();
                    let _old = reg.register(Key(0), 7).unwrap();
                    let buckets = reg.buckets();
                    let regs = reg.read(&mut r, |view| {
                        // Registered from inside the section (this reader is online, so the section
                        // holds no lock) until the table grows: the view still reads the old table,
                        // which keeps every entry it had and none of the new ones.
                        let regs: Vec<_> = (1..64).map(|i| reg.register(Key(i), i).unwrap()).collect();
                        assert!(reg.buckets() > buckets, "the table grew");
                        assert_eq!(view.lookup(&Key(0)), Some(7));
                        assert_eq!(view.lookup(&Key(63)), None, "a section reads one table");
                        regs
                    });
                    r.quiescent();
                    // The next section reads the grown table.
                    assert_eq!(
                        reg.read(&mut r, |view| (view.lookup(&Key(0)), view.lookup(&Key(63)))),
                        (Some(7), Some(63))
                    );
                    drop(regs);
                    r.quiescent();
                    d.barrier();
                }

                #[test]
                fn grow_keeps_every_entry() {
                    let d = domain();
                    let reg = Arc::new(Registry::<Key, u32, _>::with_capacity(d.clone(), 1));
                    let mut r = d.register();
                    let regs: Vec<_> = (0..1000).map(|i| reg.register(Key(i), i * 3).unwrap()).collect();
                    assert!(reg.buckets() >= 1000);
                    for i in 0..1000 {
                        assert_eq!(reg.lookup(&mut r, &Key(i)), Some(i * 3));
                    }
                    assert_eq!(reg.lookup(&mut r, &Key(1000)), None);
                    drop(regs);
                    assert_eq!(reg.len(), 0);
                    r.quiescent();
                    d.barrier();
                }

                #[test]
                fn the_table_keeps_two_buckets_per_entry() {
                    let d = domain();
                    let reg = Arc::new(Registry::<Key, u32, _>::with_capacity(d.clone(), 4));
                    assert_eq!(reg.buckets(), 8, "room for 4 entries: 8 buckets");
                    let mut regs: Vec<_> = (0..4).map(|i| reg.register(Key(i), i).unwrap()).collect();
                    assert_eq!(reg.buckets(), 8, "4 entries fit");
                    regs.push(reg.register(Key(4), 4).unwrap());
                    assert_eq!(reg.buckets(), 16, "the fifth passes half the buckets: the table doubles");
                    drop(regs);
                    d.barrier();
                }

                #[test]
                fn collisions_and_middle_removal() {
                    let d = domain();
                    let reg = Arc::new(Registry::<Collide, u32, _>::with_capacity(d.clone(), 64));
                    let mut r = d.register();
                    let mut regs: Vec<_> =
                        (0..10).map(|i| Some(reg.register(Collide(i), i).unwrap())).collect();
                    regs[5] = None;
                    regs[0] = None;
                    regs[9] = None;
                    if let Some(x) = regs[3].as_mut() {
                        assert_eq!(x.repoint(33), 3);
                        assert_eq!(x.value(), 33);
                    }
                    for i in 0..10 {
                        let want = match i {
                            0 | 5 | 9 => None,
                            3 => Some(33),
                            _ => Some(i),
                        };
                        assert_eq!(reg.lookup(&mut r, &Collide(i)), want);
                    }
                    r.quiescent();
                }

                #[test]
                fn offline_reader_falls_back_to_lock() {
                    let d = domain();
                    let reg = Arc::new(Registry::<Key, u32, _>::new(d.clone()));
                    let _a = reg.register(Key(4), 40).unwrap();
                    let mut r = d.register();
                    r.offline();
                    assert_eq!(reg.lookup(&mut r, &Key(4)), Some(40));
                    r.online();
                    assert_eq!(reg.lookup(&mut r, &Key(4)), Some(40));
                }

                #[test]
                fn burst_view_reads_like_lookup_online_and_offline() {
                    let d = domain();
                    let reg = Arc::new(Registry::<Key, u32, _>::with_capacity(d.clone(), 4));
                    let regs: Vec<_> = (0..64).map(|i| reg.register(Key(i), i * 10).unwrap()).collect();
                    let mut r = d.register();
                    for online in [true, false, true] {
                        if online {
                            r.online();
                        } else {
                            r.offline();
                        }
                        let found: Vec<Option<u32>> =
                            reg.read(&mut r, |view| (0..70).map(|i| view.lookup(&Key(i))).collect());
                        let want: Vec<Option<u32>> = (0..70).map(|i| (i < 64).then_some(i * 10)).collect();
                        assert_eq!(found, want, "online: {online}");
                    }
                    r.quiescent();
                    drop(regs);
                }

                #[test]
                fn registry_drop_frees_live_entries() {
                    let d = domain();
                    let reg = Arc::new(Registry::<Key, u32, _>::with_capacity(d.clone(), 1));
                    let regs: Vec<_> = (0..100).map(|i| reg.register(Key(i), i).unwrap()).collect();
                    let mut r = d.register();
                    assert_eq!(reg.lookup(&mut r, &Key(99)), Some(99));
                    r.quiescent();
                    // The registrations hold the registry; once they go, dropping it frees the live
                    // table (checked for leaks by Miri/ASan runs of this test).
                    drop(regs);
                    drop(reg);
                    d.barrier();
                }

                /// The steering guarantee: once `repoint` returned and every reader passed a quiescent
                /// state (`synchronize`), no reader returns the old value. Readers count every value
                /// they see; the count of the old value must not grow after the grace period.
                #[test]
                fn no_old_value_after_grace_period() {
                    const N: usize = 1000;
                    let d = domain();
                    let reg = Arc::new(Registry::<Key, u32, _>::new(d.clone()));
                    let mut conn = reg.register(Key(1), 0).unwrap();
                    let stop = Arc::new(AtomicBool::new(false));
                    let hits: Arc<Vec<AtomicUsize>> = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect());
                    let readers: Vec<_> = (0..2)
                        .map(|_| {
                            let (d, reg, stop, hits) =
                                (d.clone(), Arc::clone(&reg), Arc::clone(&stop), Arc::clone(&hits));
                            std::thread::spawn(move || {
                                let mut r = d.register();
                                // Relaxed: a stop flag.
                                while !stop.load(O::Relaxed) {
                                    let v = reg.lookup(&mut r, &Key(1)).unwrap();
                                    // Relaxed: ordered before the writer's read by our next quiescent
                                    // state and its grace period.
                                    hits[v as usize].fetch_add(1, O::Relaxed);
                                    r.quiescent();
                                }
                                r.offline();
                            })
                        })
                        .collect();
                    let mut at_grace = vec![0usize; N];
                    for v in 1..N {
                        let old = conn.repoint(u32::try_from(v).unwrap()) as usize;
                        d.synchronize();
                        // Relaxed: the grace period ordered every reader's earlier increments
                        // before this load.
                        at_grace[old] = hits[old].load(O::Relaxed);
                    }
                    stop.store(true, O::Relaxed);
                    for t in readers {
                        t.join().unwrap();
                    }
                    for old in 0..N - 1 {
                        assert_eq!(
                            hits[old].load(O::Relaxed),
                            at_grace[old],
                            "value {old} seen after its grace period"
                        );
                    }
                    drop(conn);
                    d.barrier();
                }

                #[test]
                fn lookups_see_old_or_new_during_repoint_and_grow() {
                    let d = domain();
                    let reg = Arc::new(Registry::<Key, u32, _>::with_capacity(d.clone(), 1));
                    let mut conn = reg.register(Key(0), 0).unwrap();
                    let stop = Arc::new(AtomicBool::new(false));
                    let (d2, reg2, stop2) = (d.clone(), Arc::clone(&reg), Arc::clone(&stop));
                    let reader = std::thread::spawn(move || {
                        let mut r = d2.register();
                        let mut n = 0u64;
                        // Relaxed: a stop flag.
                        while !stop2.load(O::Relaxed) {
                            assert!(reg2.lookup(&mut r, &Key(0)).is_some(), "neither old nor new");
                            n += 1;
                            if n % 16 == 0 {
                                r.quiescent();
                            }
                        }
                        r.offline();
                    });
                    let mut others = Vec::new();
                    for i in 1..3000u32 {
                        conn.repoint(i);
                        others.push(reg.register(Key(i), i).unwrap());
                        if i % 500 == 0 {
                            others.clear();
                        }
                    }
                    stop.store(true, O::Relaxed);
                    reader.join().unwrap();
                    drop(others);
                    drop(conn);
                    d.barrier();
                }
            }
        };
    }

    registry_tests!(qsbr, crate::rcu::Qsbr::new());
    #[cfg(feature = "liburcu")]
    registry_tests!(liburcu, crate::urcu::Urcu::new());
}
