//! The four single-producer/single-consumer rings an AF_XDP socket shares with the kernel (fill,
//! completion, RX, TX), mapped from the socket with `mmap(2)` at the offsets `XDP_MMAP_OFFSETS`
//! reports (Documentation/networking/af_xdp.rst, "Rings").
//!
//! Each ring is a power-of-two array of entries (`u64` UMEM addresses for fill and completion,
//! `struct xdp_desc` for RX and TX) with free-running `u32` producer and consumer indices and a flags
//! word. We are the producer of fill and TX and the consumer of RX and completion; the kernel is the
//! other side. The protocol is the kernel's `xsk_queue.h` one: the producer writes entries, then
//! store-releases the producer index; the consumer load-acquires the producer index, reads the
//! entries, then store-releases the consumer index, which the producer load-acquires before reusing
//! the slots. Each side caches the other side's index and re-reads it only when the ring looks full
//! (or empty), as net channels do.

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// A shared mapping of part of a socket, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value and has no thread affinity; the memory is only reached
// through `Ring`, which is driven by one thread at a time (`&mut self`).
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(fd: &OwnedFd, len: usize, pgoff: libc::off_t) -> io::Result<Self> {
        // SAFETY: a new shared mapping of the socket at an address of the kernel's choosing touches no
        // existing memory; failure is reported as MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Self { base, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping `new` made, and the ring that points into it is
        // being dropped with it.
        let r = unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
        if r != 0 {
            tracing::error!(error = %io::Error::last_os_error(), "munmap of an AF_XDP ring failed");
        }
    }
}

/// One mapped ring of entries `T` (`u64` or `libc::xdp_desc`).
#[derive(Debug)]
pub(super) struct Ring<T> {
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    entries: NonNull<T>,
    mask: u32,
    /// Our own index: the producer index of a ring we produce into, the consumer index of one we
    /// consume from.
    local: u32,
    /// The other side's index as last read.
    cached: u32,
    /// Declared last: dropped after everything that points into it.
    _map: Mapping,
    _entries: PhantomData<T>,
}

// SAFETY: the pointers point into the ring's own mapping (`_map`), which moves with it; nothing about
// the ring is tied to a thread.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries (a power of two) at `pgoff` of socket `fd`, laid out as `off`
    /// says; `we_produce` for fill and TX, not for RX and completion.
    pub(super) fn map(
        fd: &OwnedFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: libc::off_t,
        we_produce: bool,
    ) -> io::Result<Self> {
        let bad = |what: &str| io::Error::other(format!("the kernel's ring layout is unusable: {what}"));
        let desc = usize::try_from(off.desc).map_err(|_| bad("descriptor offset"))?;
        let len = (size as usize)
            .checked_mul(size_of::<T>())
            .and_then(|b| b.checked_add(desc))
            .ok_or_else(|| bad("ring length"))?;
        let word = |o: u64| -> io::Result<usize> {
            usize::try_from(o)
                .ok()
                .filter(|&o| o % align_of::<AtomicU32>() == 0 && o + 4 <= len)
                .ok_or_else(|| bad("index offset"))
        };
        let (p, c, f) = (word(off.producer)?, word(off.consumer)?, word(off.flags)?);
        if desc % align_of::<T>() != 0 {
            return Err(bad("descriptor alignment"));
        }
        let map = Mapping::new(fd, len, pgoff)?;
        let at = |o: usize| map.base.as_ptr().wrapping_add(o);
        // All four offsets were checked to lie inside the mapping (words within `len`, the entries
        // ending at `len`) and to be aligned for their types (the mapping is page-aligned).
        let (Some(producer), Some(consumer), Some(flags), Some(entries)) = (
            NonNull::new(at(p).cast::<AtomicU32>()),
            NonNull::new(at(c).cast::<AtomicU32>()),
            NonNull::new(at(f).cast::<AtomicU32>()),
            NonNull::new(at(desc).cast::<T>()),
        ) else {
            return Err(bad("null pointer"));
        };
        let mut ring = Self {
            producer,
            consumer,
            flags,
            entries,
            mask: size - 1,
            local: 0,
            cached: 0,
            _map: map,
            _entries: PhantomData,
        };
        // A fresh ring has both indices at zero; read them anyway. Acquire: as in `free`/`available`.
        let (p, c) = (ring.producer().load(Ordering::Acquire), ring.consumer().load(Ordering::Acquire));
        (ring.local, ring.cached) = if we_produce { (p, c) } else { (c, p) };
        Ok(ring)
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: an aligned word inside the mapping, which lives as long as `self`; the kernel accesses
        // it only atomically (`smp_load_acquire`/`smp_store_release`).
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`.
        unsafe { self.consumer.as_ref() }
    }

    /// Whether the kernel asks to be woken up (`XDP_RING_NEED_WAKEUP`, with `XDP_USE_NEED_WAKEUP`).
    pub(super) fn needs_wakeup(&self) -> bool {
        // SAFETY: as `producer`.
        let flags = unsafe { self.flags.as_ref() };
        // Relaxed: a hint; the caller orders it after its producer store with a fence (af_xdp.rst,
        // "XDP_USE_NEED_WAKEUP").
        flags.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    fn slot(&self, i: u32) -> *mut T {
        // `(..) & mask` is below the ring size, so the slot is inside the entries array.
        self.entries.as_ptr().wrapping_add((i & self.mask) as usize)
    }

    // ---- the producer side (fill, TX) ----

    /// Free slots, at most `want`: re-reads the kernel's consumer index only when the cached one
    /// shows fewer than `want`.
    pub(super) fn free(&mut self, want: u32) -> u32 {
        let size = self.mask + 1;
        let mut free = size - self.local.wrapping_sub(self.cached);
        if free < want {
            // Acquire: pairs with the kernel's release of the consumer index after it read the
            // entries (xskq_cons_release), so the slots are ours again.
            self.cached = self.consumer().load(Ordering::Acquire);
            free = size - self.local.wrapping_sub(self.cached);
        }
        free.min(want)
    }

    /// Writes entry `i` of the ones `free` granted (not yet visible to the kernel).
    pub(super) fn write(&mut self, i: u32, value: T) {
        let slot = self.slot(self.local.wrapping_add(i));
        // SAFETY: `slot` is inside the mapping and aligned; the kernel does not read the slot before
        // the producer store in `submit` publishes it, and has released it (the `free` check).
        unsafe { slot.write(value) };
    }

    /// Publishes `n` written entries.
    pub(super) fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // Release: orders the entry writes before the index; pairs with the kernel's
        // smp_load_acquire of the producer index (xskq_cons_peek).
        self.producer().store(self.local, Ordering::Release);
    }

    /// Entries the kernel has not consumed yet, without updating the cached index (for `&self`
    /// callers).
    pub(super) fn unconsumed(&self) -> u32 {
        // Acquire: as in `free`.
        self.local.wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// Entries the kernel has not consumed yet (re-reads its consumer index).
    pub(super) fn pending(&mut self) -> u32 {
        // Acquire: as in `free`.
        self.cached = self.consumer().load(Ordering::Acquire);
        self.local.wrapping_sub(self.cached)
    }

    // ---- the consumer side (RX, completion) ----

    /// Entries ready, at most `want`: re-reads the kernel's producer index only when the cached one
    /// shows fewer than `want`.
    pub(super) fn available(&mut self, want: u32) -> u32 {
        let mut ready = self.cached.wrapping_sub(self.local);
        if ready < want {
            // Acquire: pairs with the kernel's smp_store_release of the producer index after writing
            // the entries (xskq_prod_submit).
            self.cached = self.producer().load(Ordering::Acquire);
            ready = self.cached.wrapping_sub(self.local);
        }
        // A kernel index more than a ring ahead is impossible; clamp so a scribble cannot make us read
        // a slot twice.
        ready.min(self.mask + 1).min(want)
    }

    /// Reads entry `i` of the ones `available` granted.
    pub(super) fn read(&self, i: u32) -> T {
        let slot = self.slot(self.local.wrapping_add(i));
        // SAFETY: `slot` is inside the mapping and aligned; the kernel wrote it before publishing the
        // producer index we acquired, and does not touch it until `release`.
        unsafe { slot.read() }
    }

    /// Hands `n` read entries back to the kernel.
    pub(super) fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // Release: our reads of the entries happen before the kernel may overwrite them; pairs with
        // the kernel's acquire of the consumer index (xskq_prod_nb_free).
        self.consumer().store(self.local, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn descriptor_layout_matches_the_kernel() {
        assert_eq!(size_of::<libc::xdp_desc>(), 16);
        assert_eq!(size_of::<libc::xdp_ring_offset>(), 32);
        assert_eq!(size_of::<libc::xdp_mmap_offsets>(), 128);
        assert_eq!(size_of::<libc::xdp_umem_reg>(), 32);
    }
}
