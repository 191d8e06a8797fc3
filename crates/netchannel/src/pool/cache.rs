//! The magazine layer: the shared depot of free buffers and the per-thread [`PoolCache`] in front of it,
//! whose allocations and frees take no lock and no atomic read-modify-write.

use std::fmt;
use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use super::Pool;
use super::region::Release;
use super::region::{FullHeader, Layout};
use crate::channel::Consumer;
use crate::sync::{Arc, AtomicUsize, Ordering};

/// The free buffers not held by any cache, and the registry of live caches.
#[derive(Debug)]
pub(super) struct Depot {
    /// Free indices; caches take from and give back to the end.
    pub(super) free: Vec<u32>,
    /// Each live cache's count of free buffers it holds.
    pub(super) caches: Vec<Arc<CachePadded<AtomicUsize>>>,
}

/// A cache's counters: plain fields, read by its owner with [`PoolCache::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Buffers allocated.
    pub allocs: u64,
    /// Buffers freed into this cache (dropped packets, `free_burst`, `reclaim`).
    pub frees: u64,
    /// Allocations that found neither the cache nor the depot holding a buffer.
    pub alloc_failures: u64,
    /// Refills from the depot.
    pub refills: u64,
    /// Spills to the depot.
    pub spills: u64,
    /// Out-of-range indices passed to `free_burst` or found in a reclaimed channel, and ignored.
    pub rejected: u64,
    /// Frames of shared buffers taken on this cache ([`SharedPacket::frame`](super::SharedPacket::frame)).
    pub frames: u64,
    /// Frames refused on this cache because another frame of the buffer was in flight (the
    /// caller copied instead).
    pub frames_refused: u64,
}

/// The state only the owning thread touches.
#[derive(Debug)]
pub(super) struct Local {
    /// Free indices; the top (end) is the most recently freed, hence the warmest.
    pub(super) stack: Vec<u32>,
    pub(super) stats: CacheStats,
}

/// A per-thread cache of free buffers: allocations and frees that hit it take no lock and perform no
/// atomic read-modify-write.
///
/// `Send` (move it to the thread that will use it) but not `Sync`, and packets borrow it, so they stay
/// on its thread. Dropping the cache returns its free buffers to the depot.
///
/// ```compile_fail,E0277
/// fn is_sync<T: Sync>() {}
/// is_sync::<netchannel::pool::PoolCache>();
/// ```
pub struct PoolCache {
    pub(super) local: std::cell::UnsafeCell<Local>,
    /// The region's base and slot geometry, copied here so the fast path reads no shared line.
    pub(super) base: NonNull<u8>,
    pub(super) layout: Layout,
    pub(super) batch: usize,
    pub(super) cache_size: usize,
    /// `local.stack.len()`, mirrored for [`Pool::audit`] with a plain (non-RMW) relaxed store.
    pub(super) mirror: Arc<CachePadded<AtomicUsize>>,
    /// The cache frames of shared buffers borrow (`PoolCache::frames`, `shared.rs`), made on first use.
    pub(super) frames: std::cell::OnceCell<Box<PoolCache>>,
    pub(super) pool: Pool,
}

// SAFETY: `base` points into the region that `pool` keeps mapped, and `local` is owned state with no
// thread affinity, so the cache may move to another thread. It stays `!Sync` (the cell), which is what
// makes the unsynchronised access to `local` sound.
unsafe impl Send for PoolCache {}

impl fmt::Debug for PoolCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolCache")
            .field("pool", &self.pool.id())
            .field("free", &self.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl PoolCache {
    /// Runs `f` on the thread-local state.
    #[inline(always)]
    pub(super) fn with_local<R>(&self, f: impl FnOnce(&mut Local) -> R) -> R {
        // SAFETY: `PoolCache` is `!Sync`, so only the thread that owns it gets here; and no `f` passed
        // by the `pool` module (this file, and `Packet`'s drop in `packet.rs`) calls `with_local` again
        // (they touch `Local`, the depot and the mirror only, and the caller's closure that
        // `take_top_with` runs must not reach `Local`), so this is the only reference to `local`
        // while it lives.
        f(unsafe { &mut *self.local.get() })
    }

    /// Mirrors the stack length for [`Pool::audit`].
    #[inline(always)]
    pub(super) fn publish(&self, local: &Local) {
        // Relaxed: a count for `Pool::audit`, which reads it Relaxed; on slow paths this store happens
        // under the depot lock, which orders it with the depot change.
        self.mirror.store(local.stack.len(), Ordering::Relaxed);
    }

    /// Moves up to `batch` buffers from the depot to the local stack; returns how many.
    #[cold]
    fn refill(&self, local: &mut Local) -> usize {
        let mut depot = self.pool.shared.lock_depot();
        let free = &mut depot.free;
        let n = self.batch.min(free.len());
        let start = free.len() - n;
        // A copy and a truncation rather than `extend(drain(..))`: half the instructions of a
        // refill (the drain's bookkeeping and its element-wise copy; measured in `icount_driver`).
        local.stack.extend_from_slice(&free[start..]);
        free.truncate(start);
        local.stats.refills += 1;
        self.publish(local);
        n
    }

    /// Moves the `n` coldest buffers (the bottom of the stack) to the depot.
    #[cold]
    fn spill(&self, local: &mut Local, n: usize) {
        let n = n.min(local.stack.len());
        let mut depot = self.pool.shared.lock_depot();
        // As in `refill`: a copy, then the rest moved down, rather than `extend(drain(..n))`.
        depot.free.extend_from_slice(&local.stack[..n]);
        local.stack.copy_within(n.., 0);
        local.stack.truncate(local.stack.len() - n);
        local.stats.spills += 1;
        self.publish(local);
    }

    /// Pops a free index, refilling from the depot when the stack is empty.
    #[inline(always)]
    pub(super) fn pop_free(&self, local: &mut Local) -> Option<u32> {
        if let Some(index) = local.stack.pop() {
            return Some(index);
        }
        self.refill(local);
        let index = local.stack.pop();
        if index.is_none() {
            local.stats.alloc_failures += 1;
        }
        index
    }

    /// Pushes a free index, spilling a batch first when the stack is full.
    #[inline(always)]
    pub(super) fn push_free(&self, local: &mut Local, index: u32) {
        if local.stack.len() >= self.cache_size {
            self.push_free_full(local, index);
            return;
        }
        // Never reallocates: the stack holds fewer than `cache_size` (its capacity).
        local.stack.push(index);
        local.stats.frees += 1;
    }

    /// [`push_free`](Self::push_free) into a full stack: spills a batch first. A frame of a shared
    /// buffer is dropped into the frames cache (`PoolCache::frames`), whose size is zero, so its
    /// token always lands here, where its reference is released: the plain path pays nothing.
    #[cold]
    #[inline(never)]
    fn push_free_full(&self, local: &mut Local, index: u32) {
        if index & super::FRAME_TAG != 0 {
            self.free_token(local, index);
            return;
        }
        self.spill(local, self.batch);
        // Never reallocates: after the spill the stack holds fewer than its capacity (at least
        // `cache_size`, and at least one).
        local.stack.push(index);
        local.stats.frees += 1;
    }

    /// The slot of buffer `index`.
    ///
    /// # Safety
    ///
    /// `index < self.layout.count`.
    #[inline(always)]
    pub(super) unsafe fn slot(&self, index: u32) -> NonNull<u8> {
        // SAFETY: `index < count` (caller), and the build checked that `count × stride` bytes fit in the
        // region, so the slot's first byte is inside the mapping.
        unsafe { self.base.add(index as usize * self.layout.stride) }
    }

    /// Resets buffer `index`'s metadata to an empty packet at the default headroom.
    ///
    /// # Safety
    ///
    /// `index < self.layout.count`, and the caller owns buffer `index`.
    #[inline(always)]
    pub(super) unsafe fn reset_header(&self, index: u32) {
        self.pool.shared.track(index);
        // SAFETY: forwarded from the caller.
        let slot = unsafe { self.slot(index) };
        let header = FullHeader::fresh(self.layout.headroom, 0);
        // SAFETY: the slot starts 64-byte aligned (page-aligned base, stride a multiple of 64) with a
        // header's worth of bytes, and the caller owns the buffer, so nothing else accesses it.
        unsafe { slot.cast::<FullHeader>().write(header) };
    }

    /// The pool this cache belongs to.
    #[must_use]
    #[inline]
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Free buffers held by this cache.
    #[must_use]
    #[inline]
    pub fn len(&self) -> usize {
        self.with_local(|l| l.stack.len())
    }

    /// Whether this cache holds no free buffer (the next allocation goes to the depot).
    #[must_use]
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This cache's counters.
    #[must_use]
    pub fn stats(&self) -> CacheStats {
        self.with_local(|l| l.stats)
    }

    /// Allocates up to `out.len()` buffers as raw indices, each reset to an empty packet; returns how
    /// many, written to the front of `out`. The caller owns them: each must eventually be freed
    /// (`free_burst`), turned into a packet (`packet_from_raw`) or sent to someone who does.
    #[must_use]
    pub fn alloc_burst(&self, out: &mut [u32]) -> usize {
        let n = self.alloc_burst_raw(out);
        for &index in &out[..n] {
            // SAFETY: each index was in range in the stack, and popping it made us its only owner.
            unsafe { self.reset_header(index) };
        }
        n
    }

    /// [`alloc_burst`](Self::alloc_burst) without resetting the buffers' metadata: for a device's
    /// receive path, which writes every buffer's header when it hands the buffer over
    /// ([`PacketBatch::extend_received`](crate::dev::PacketBatch::extend_received) and
    /// [`extend_received_with`](crate::dev::PacketBatch::extend_received_with)) and keeps the
    /// others as raw indices until it frees them. A packet made of such a buffer some other way
    /// ([`packet_from_raw`](Self::packet_from_raw)) has whatever data window the buffer's last user
    /// left, clamped to the buffer as every header is.
    #[must_use]
    pub fn alloc_burst_raw(&self, out: &mut [u32]) -> usize {
        self.with_local(|l| {
            let mut n = 0;
            while n < out.len() {
                if l.stack.is_empty() && self.refill(l) == 0 {
                    l.stats.alloc_failures += 1;
                    break;
                }
                let take = (out.len() - n).min(l.stack.len());
                let from = l.stack.len() - take;
                out[n..n + take].copy_from_slice(&l.stack[from..]);
                l.stack.truncate(from);
                n += take;
            }
            l.stats.allocs += n as u64;
            self.publish(l);
            n
        })
    }

    /// Takes the `n` buffers on top of this cache (the most recently freed) without copying their
    /// indices out: `f` reads them where the cache keeps them, oldest first, and from then on they
    /// are the caller's, as from [`alloc_burst_raw`](Self::alloc_burst_raw) (metadata not reset;
    /// each index below [`Pool::buffers`], distinct). For a device's receive path, which re-arms each
    /// consumed ring slot with one: the indices go from the cache's own storage into the slots, with
    /// no staging copy. Returns what `f` returns. ([`take_top_with`](Self::take_top_with) taking
    /// all `n`.)
    ///
    /// # Safety
    ///
    /// As [`take_top_with`](Self::take_top_with).
    #[inline(always)]
    pub unsafe fn take_raw_with<T>(&self, n: usize, f: impl FnOnce(&[u32]) -> T) -> T {
        // SAFETY: the caller's contract, and the closure keeps all `n` it is lent.
        unsafe { self.take_top_with(n, |top| (n, f(top))) }
    }

    /// [`take_raw_with`](Self::take_raw_with) for a caller that learns only inside `f` how many
    /// buffers it takes: `f` reads the `n` indices on top of the cache, oldest first, and returns
    /// `(k, out)`; the caller takes the last `k` of them (the newest, `k <= n`, which it must say
    /// exactly), and the first `n - k` stay free in the cache. For a receive path that re-arms each
    /// slot as it takes the slot's frame, and learns where the run ends only at the descriptor that
    /// ends it. Returns `out`.
    ///
    /// # Safety
    ///
    /// The cache holds at least `n` free buffers ([`len`](Self::len); [`fill`](Self::fill) brings a
    /// batch from the depot); `f` does not reach its free list: no allocation from it, no free
    /// into it (which dropping one of its packets does), no `fill` and no nested `take_top_with`
    /// or `take_raw_with`; and `k <= n`: the indices `f` keeps are the last `k` it was lent, and it
    /// keeps none of the others.
    #[inline(always)]
    pub unsafe fn take_top_with<T>(&self, n: usize, f: impl FnOnce(&[u32]) -> (usize, T)) -> T {
        self.with_local(
            #[inline(always)]
            |l| {
                debug_assert!(n <= l.stack.len(), "take_top_with({n}) from a cache of {}", l.stack.len());
                let len = l.stack.len();
                // SAFETY: `len - n <= len` (the caller's contract: `n <= len`). `f` does not reach the
                // free list (the other half of it), so `with_local`'s reference is still the only one
                // to it while `f` runs.
                let (k, out) = f(unsafe { l.stack.get_unchecked(len - n..) });
                debug_assert!(k <= n, "take_top_with: {k} taken of {n} lent");
                // SAFETY: `len - k <= len` (`k <= n <= len`: the caller's contract); the entries past
                // it are plain integers (nothing to drop).
                unsafe { l.stack.set_len(len - k) };
                l.stats.allocs += k as u64;
                self.publish(l);
                out
            },
        )
    }

    /// Brings a batch of free buffers from the pool's shared depot when this cache holds none;
    /// returns how many it holds afterwards (0: the depot had none either; not an allocation, so
    /// not counted as a failure: the caller counts what it could not do).
    #[cold]
    #[inline(never)]
    pub fn fill(&self) -> usize {
        self.with_local(|l| {
            if l.stack.is_empty() {
                self.refill(l);
            }
            l.stack.len()
        })
    }

    /// Frees buffers given as raw indices into this cache, spilling to the depot as needed. A
    /// frame's token (its [`Packet::index`](super::Packet::index), with
    /// [`FRAME_TAG`](super::FRAME_TAG)) releases the frame's reference to its shared buffer, which is
    /// freed here when that was the last. Other out-of-range indices are ignored and counted in
    /// [`CacheStats::rejected`].
    ///
    /// # Safety
    ///
    /// The caller owns every buffer in `indices` (from `alloc_burst`, `into_raw`, or a channel it was
    /// sent through), no [`Packet`](super::Packet) for them exists, `indices` holds no index twice, and the caller
    /// gives them up: freeing a buffer twice lets two later allocations return it, and the two packets
    /// would alias each other's `&mut` data.
    pub unsafe fn free_burst(&self, indices: &[u32]) {
        self.with_local(|l| {
            // The common case in one copy: every index in range (one OR, or one maximum, over the
            // burst), with the spills that freeing them one at a time would make done first: each
            // time the stack is full before a push, the `batch` coldest go to the depot. Done up
            // front they move the same buffers as long as only buffers already here go, so the depot
            // and the stack end as they would (the per-index loop below handles the rest).
            let count = self.layout.count;
            let batch = self.batch.max(1);
            let spills = (l.stack.len() + indices.len()).saturating_sub(self.cache_size).div_ceil(batch);
            if spills * batch <= l.stack.len()
                && (indices.iter().fold(0, |m, &i| m | i) < count
                    || indices.iter().fold(0, |m, &i| m.max(i)) < count)
            {
                for _ in 0..spills {
                    self.spill(l, batch);
                }
                for &index in indices {
                    self.pool.shared.track(index);
                }
                l.stack.extend_from_slice(indices);
                l.stats.frees += indices.len() as u64;
                self.publish(l);
                return;
            }
            for &index in indices {
                if index < self.layout.count {
                    self.pool.shared.track(index);
                    self.push_free(l, index);
                } else {
                    self.free_token(l, index);
                }
            }
            self.publish(l);
        });
    }

    /// Drains buffer indices that other threads send back through `rx` into this cache (spilling
    /// batches to the depot when it fills); returns how many buffers it took. Out-of-range indices are
    /// ignored and counted in [`CacheStats::rejected`].
    ///
    /// This is `unsafe` because a raw [`Consumer`] can carry any `u32`: [`PacketRx::reclaim`](super::PacketRx::reclaim) is the
    /// safe version for channels that only carry packets.
    ///
    /// # Safety
    ///
    /// Every index the channel delivers names a buffer of this pool whose ownership its sender gave up
    /// by sending it, and no index is sent twice without being allocated again in between (the same
    /// contract as [`PoolCache::free_burst`]).
    pub unsafe fn reclaim(&self, rx: &mut Consumer) -> usize {
        self.with_local(|l| {
            let mut taken = 0;
            loop {
                if l.stack.len() >= self.cache_size {
                    // Spill only for buffers that are really there (an exact fill ends the last
                    // burst with `n == room` whether or not more are queued).
                    if rx.is_empty() {
                        break;
                    }
                    self.spill(l, self.batch);
                }
                let start = l.stack.len();
                let room = self.cache_size - start;
                // Pop straight into the stack's free tail (within its capacity: no reallocation).
                l.stack.resize(self.cache_size, 0);
                let n = rx.pop_burst(&mut l.stack[start..]);
                let mut kept = start;
                for i in start..start + n {
                    let index = l.stack[i];
                    if index < self.layout.count {
                        self.pool.shared.track(index);
                        l.stack[kept] = index;
                        kept += 1;
                    } else {
                        // A frame's token: its buffer is kept here when that was its last reference.
                        match self.release_token(index) {
                            Release::Freed(index) => {
                                l.stack[kept] = index;
                                kept += 1;
                            }
                            Release::Released => {}
                            Release::Rejected => l.stats.rejected += 1,
                        }
                    }
                }
                l.stack.truncate(kept);
                l.stats.frees += (kept - start) as u64;
                taken += kept - start;
                if n < room {
                    break;
                }
            }
            self.publish(l);
            taken
        })
    }

    /// Returns every free buffer this cache holds to the depot (for a thread about to go idle, so
    /// others can use them), and those of its frames cache (`PoolCache::frames`).
    pub fn flush(&self) {
        self.with_local(|l| {
            if !l.stack.is_empty() {
                self.spill(l, l.stack.len());
            }
        });
        if let Some(frames) = self.frames.get() {
            frames.flush();
        }
    }
}

impl Drop for PoolCache {
    fn drop(&mut self) {
        let local = self.local.get_mut();
        let mut depot = self.pool.shared.lock_depot();
        depot.free.append(&mut local.stack);
        let mirror = &self.mirror;
        depot.caches.retain(|c| !Arc::ptr_eq(c, mirror));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::channel::Channel;
    use crate::pool::tests::pool;
    use crate::pool::{Audit, Packet};

    #[test]
    fn exhaustion_refill_and_spill() {
        let pool = pool(10, 2, 4);
        let a = pool.cache();
        let mut held = Vec::new();
        while let Some(p) = a.alloc() {
            held.push(p);
        }
        assert_eq!(held.len(), 10);
        let mut seen: Vec<u32> = held.iter().map(Packet::index).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(a.stats().alloc_failures, 1);
        assert_eq!(a.stats().refills, 6, "5 refills of 2, then 1 empty one");
        assert_eq!(pool.audit(), Audit { total: 10, outstanding: 10, live_caches: 1, ..Audit::default() });

        drop(held);
        // Frees 1..=4 fill the cache, each later one spills the 2 coldest first.
        assert_eq!(a.len(), 4);
        assert_eq!(a.stats().spills, 3);
        assert_eq!(
            pool.audit(),
            Audit { total: 10, in_depot: 6, in_caches: 4, outstanding: 0, live_caches: 1, shared: 0 }
        );
        a.flush();
        assert_eq!(pool.audit().in_depot, 10);
        drop(a);
        assert_eq!(pool.audit(), Audit { total: 10, in_depot: 10, ..Audit::default() });
        pool.check_leaks().unwrap();
    }

    /// The spill moves the cache's coldest `batch` (its bottom) to the depot's top, in order, and
    /// keeps the rest in order; a refill takes the depot's top `batch`, in order. Checked against
    /// a model of the two stacks (fails with the spill taking the top, or not moving the rest down).
    #[test]
    fn spills_take_the_coldest_and_refills_the_depots_top_in_order() {
        let (batch, size) = (4, 8);
        let pool = pool(32, batch, size);
        let a = pool.cache();
        let held: Vec<Packet<'_>> = (0..20).map(|_| a.alloc().expect("a buffer")).collect();
        let freed: Vec<u32> = held.iter().map(Packet::index).collect();
        let depot = |pool: &crate::pool::Pool| pool.shared.lock_depot().free.clone();
        let (mut cache_model, mut depot_model) = (a.with_local(|l| l.stack.clone()), depot(&pool));
        drop(held); // frees in order
        for index in freed {
            if cache_model.len() == size {
                depot_model.extend(cache_model.drain(..batch));
            }
            cache_model.push(index);
        }
        assert_eq!(a.with_local(|l| l.stack.clone()), cache_model);
        assert_eq!(depot(&pool), depot_model);

        // Empty the cache, then one more allocation refills it from the depot's top.
        let mut held: Vec<Packet<'_>> = (0..cache_model.len()).map(|_| a.alloc().expect("cached")).collect();
        held.push(a.alloc().expect("refilled"));
        let mut refilled = depot_model.split_off(depot_model.len() - batch);
        assert_eq!(held.last().map(Packet::index), refilled.pop());
        assert_eq!(a.with_local(|l| l.stack.clone()), refilled);
        assert_eq!(depot(&pool), depot_model);
        drop(held);
        drop(a);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn bursts_of_raw_indices() {
        let pool = pool(16, 4, 8);
        let cache = pool.cache();
        let mut idx = [0u32; 20];
        assert_eq!(cache.alloc_burst(&mut idx), 16);
        let mut sorted = idx[..16].to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..16).collect::<Vec<_>>());
        assert_eq!(cache.alloc_burst(&mut idx[16..]), 0);
        // Headers were reset: a rebuilt packet is empty at the default headroom.
        // SAFETY: idx[3] came from `alloc_burst` and is owned here; the handle goes back into raw form.
        let p = unsafe { cache.packet_from_raw(idx[3]) };
        assert_eq!((p.len(), p.headroom()), (0, 128));
        let _ = p.into_raw();
        // SAFETY: these 16 indices are owned here (alloc_burst above) and listed once each; 999 and
        // u32::MAX are out of range and must be rejected.
        unsafe { cache.free_burst(&[999, u32::MAX]) };
        // SAFETY: as above.
        unsafe { cache.free_burst(&idx[..16]) };
        assert_eq!(cache.stats().rejected, 2);
        assert_eq!(cache.stats().frees, 16);
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn take_raw_with_lends_the_top_in_place_and_fill_refills_only_an_empty_cache() {
        let pool = pool(10, 4, 8);
        let cache = pool.cache();
        assert_eq!(cache.fill(), 4, "one batch from the depot");
        assert_eq!(cache.fill(), 4, "not empty: nothing moved");
        let expected: Vec<u32> = cache.with_local(|l| l.stack[1..].to_vec());
        // SAFETY: the cache holds 4 >= 3, and the closure does not touch the cache.
        let seen = unsafe { cache.take_raw_with(3, <[u32]>::to_vec) };
        assert_eq!(seen, expected, "the top three, oldest first");
        assert_eq!((cache.len(), cache.stats().allocs), (1, 3));
        assert_eq!(
            pool.audit(),
            Audit { total: 10, in_depot: 6, in_caches: 1, outstanding: 3, live_caches: 1, shared: 0 }
        );
        // SAFETY: the cache holds 1, and the closure does not touch the cache.
        let last = unsafe { cache.take_raw_with(1, |top| top.to_vec()) };
        assert_eq!(cache.fill(), 4);
        assert_eq!(cache.fill(), 4);
        // SAFETY: the cache holds 4; nothing taken (n = 0) is a no-op.
        assert!(unsafe { cache.take_raw_with(0, <[u32]>::is_empty) });
        // Drain the depot: 10 = 3 + 1 + 4 + 2.
        // SAFETY: as above.
        let mut held: Vec<u32> = unsafe { cache.take_raw_with(4, <[u32]>::to_vec) };
        assert_eq!(cache.fill(), 2, "the depot's last two");
        // SAFETY: as above.
        held.extend(unsafe { cache.take_raw_with(2, <[u32]>::to_vec) });
        assert_eq!(cache.fill(), 0, "nothing left anywhere");
        assert_eq!(cache.stats().alloc_failures, 0, "a fill is not an allocation");
        held.extend(seen.iter().chain(&last));
        held.sort_unstable();
        assert_eq!(held, (0..10).collect::<Vec<_>>(), "each buffer taken once");
        // SAFETY: every index was taken above, once, and no packet was made of any.
        unsafe { cache.free_burst(&held) };
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn take_top_with_keeps_the_newest_it_says_and_leaves_the_rest() {
        let pool = pool(10, 8, 8);
        let cache = pool.cache();
        assert_eq!(cache.fill(), 8);
        let stack: Vec<u32> = cache.with_local(|l| l.stack.clone());
        // SAFETY: the cache holds 8 >= 5; the closure keeps the last 2 it is lent and does not
        // touch the cache.
        let (lent, kept) = unsafe {
            cache.take_top_with(5, |top| {
                let kept = top[3..].to_vec();
                (kept.len(), (top.to_vec(), kept))
            })
        };
        assert_eq!(lent, stack[3..], "the top five, oldest first");
        assert_eq!(kept, stack[6..], "the newest two are taken");
        assert_eq!(cache.with_local(|l| l.stack.clone()), stack[..6], "the other three stay, in place");
        assert_eq!((cache.len(), cache.stats().allocs), (6, 2));
        // SAFETY: as above; nothing kept leaves the cache as it is.
        assert_eq!(unsafe { cache.take_top_with(6, |top| (0, top.len())) }, 6);
        assert_eq!(cache.len(), 6);
        assert_eq!(
            pool.audit(),
            Audit { total: 10, in_depot: 2, in_caches: 6, outstanding: 2, live_caches: 1, shared: 0 }
        );
        // SAFETY: the two indices were taken above, once, and no packet was made of either.
        unsafe { cache.free_burst(&kept) };
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn reclaim_drains_a_raw_return_channel_and_spills() {
        let pool = pool(32, 4, 8);
        let (mut tx, mut rx) = Channel::with_capacity(64);
        let a = pool.cache();
        let b = pool.cache();
        let mut idx = [0u32; 20];
        assert_eq!(b.alloc_burst(&mut idx), 20);
        assert_eq!(tx.push_burst(&idx), 20);
        tx.push(12345).unwrap();
        // SAFETY: the channel carries the 20 indices `b` allocated and gave up, each once, plus one
        // out-of-range index that must be rejected.
        let taken = unsafe { a.reclaim(&mut rx) };
        assert_eq!(taken, 20);
        assert_eq!(a.stats().rejected, 1);
        assert!(a.len() <= 8);
        assert_eq!(pool.audit().in_depot + a.len() + b.len(), 32);
        assert!(a.stats().spills >= 3);
        drop((a, b));
        pool.check_leaks().unwrap();
    }
}
