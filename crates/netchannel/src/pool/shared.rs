//! Shared buffers: a [`SharedPacket`] is a reference-counted, read-only pool buffer that cores can
//! hold at once, and that a device can send by reference as a *frame* (a [`Packet`] whose headers
//! are written into the buffer's headroom), one frame in flight at a time. See the pool module's
//! "Shared buffers" section for what it is for and the ordering argument.
//!
//! The state of a shared buffer is one `AtomicU32` in its header
//! ([`SHARED_STATE_OFFSET`](super::region::SHARED_STATE_OFFSET)): bit 0 is set while a frame is in
//! flight, and the rest count references, two per reference ([`REF`]): every [`SharedPacket`]
//! handle holds one, and so does the frame in flight.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use super::cache::Local;
use super::region::{FRAME, FRAME_TAG, FullHeader, Header, MAX_STATE, REF, Release, SHARED_PAYLOAD_OFFSET};
use super::{FrameError, HEADER_SIZE, Packet, PacketError, Pool, PoolCache, Shared};
use crate::sync::Ordering;

/// A pool buffer shared by reference: its data is read-only, `Clone` adds a reference (one atomic
/// increment), and the buffer goes back to the pool when the last reference goes, whichever thread
/// drops it. `Send + Sync`: prepared content (a response's segments, say) made once can be held by
/// every core.
///
/// Made with [`Packet::into_shared`]. [`SharedPacket::frame`] turns it into a [`Packet`] for a
/// device's `tx_burst` with only the headers written per send, into the headroom in front of the
/// data; [`SharedPacket::try_into_packet`] takes the buffer back for writing once no other reference
/// is left.
///
/// ```
/// use netchannel::pool::{FrameError, HugePages, Pool};
///
/// let pool = Pool::builder(64).hugepages(HugePages::Never).build()?;
/// let cache = pool.cache();
/// let mut segment = cache.alloc().expect("a free buffer");
/// segment.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")?;
/// let segment = segment.into_shared().expect("a plain packet");
/// let for_another_core = segment.clone(); // Send + Sync: one atomic increment
///
/// let mut frame = segment.frame(&cache, 54)?; // Ethernet, IPv4, TCP headers in the headroom
/// frame.data_mut().copy_from_slice(&[0u8; 54]); // only the headers are writable
/// assert_eq!(frame.len(), 54 + segment.len());
/// // Its headers occupy the headroom until the device is done: this send copies instead.
/// assert_eq!(for_another_core.frame(&cache, 54).unwrap_err(), FrameError::InFlight);
/// drop(frame); // the device is done with it (TAP: written; 82599: `free_burst` on completion)
///
/// drop((segment, for_another_core)); // the last reference frees the buffer
/// drop(cache);
/// pool.check_leaks()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SharedPacket {
    pool: Pool,
    slot: NonNull<u8>,
    index: u32,
    /// The data's offset from the buffer's start and its length: fixed while shared, so readers
    /// never read the header's window, which a frame rewrites.
    off: u32,
    len: u32,
}

// SAFETY: the handle names a buffer of the region `pool` keeps mapped, whose data no handle writes
// while it is shared (the frame writes only the bytes in front of it, and only one frame at a time:
// the state word's frame bit); the reference count is atomic.
unsafe impl Send for SharedPacket {}
// SAFETY: as above: `&SharedPacket` only reads the data, and `frame` takes the frame bit atomically.
unsafe impl Sync for SharedPacket {}

impl fmt::Debug for SharedPacket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedPacket")
            .field("index", &self.index)
            .field("headroom", &self.off)
            .field("len", &self.len)
            .field("refs", &self.ref_count())
            .finish()
    }
}

impl<'c> Packet<'c> {
    /// Whether this packet is a frame of a shared buffer ([`SharedPacket::frame`]).
    #[must_use]
    #[inline]
    pub fn is_frame(&self) -> bool {
        self.index & FRAME_TAG != 0
    }

    /// Makes the buffer shared: its data (as it is now) becomes read-only, readable by every clone of
    /// the returned handle. The packet comes back unchanged when it is itself a frame of a shared
    /// buffer.
    ///
    /// # Errors
    ///
    /// The packet, when it is a frame ([`Packet::is_frame`]).
    pub fn into_shared(self) -> Result<SharedPacket, Self> {
        if self.is_frame() {
            return Err(self);
        }
        let (off, len) = self.window();
        let cache = self.cache;
        let shared = &*cache.pool.shared;
        shared.track(self.index);
        // Both fit: they are at most `buf_len`, a `u32`.
        let payload = Header {
            data_off: u32::try_from(off).unwrap_or(u32::MAX),
            data_len: u32::try_from(len).unwrap_or(0),
        };
        // SAFETY: the slot's header has room for the payload window (asserted in `region.rs`).
        let at = unsafe { self.slot.add(SHARED_PAYLOAD_OFFSET) };
        // SAFETY: in the slot's header, 4-byte aligned, and this handle owns the buffer: nothing
        // else reads or writes it yet.
        unsafe { at.cast::<Header>().write(payload) };
        // Relaxed: the handle reaches another thread only through something that synchronises
        // (it is `Send`), which orders this store before any access there.
        shared.state(self.index).store(REF, Ordering::Relaxed);
        // Relaxed: a count for `Pool::audit`.
        shared.shared_live.fetch_add(1, Ordering::Relaxed);
        let this = ManuallyDrop::new(self);
        Ok(SharedPacket {
            pool: cache.pool.clone(),
            slot: this.slot,
            index: this.index,
            off: payload.data_off,
            len: payload.data_len,
        })
    }

    /// The payload window of the shared buffer this frame is of: (offset, length). Written before
    /// the buffer was shared and immutable since.
    #[cold]
    fn payload(&self) -> (usize, usize) {
        // SAFETY: the slot's header has room for the payload window (asserted in `region.rs`).
        let at = unsafe { self.slot.add(SHARED_PAYLOAD_OFFSET) };
        // SAFETY: `into_shared` wrote the window before the frame existed, and the frame's reference
        // keeps the buffer shared, so nobody rewrites it.
        let p = unsafe { at.cast::<Header>().read() };
        let buf_len = self.cache.layout.buf_len;
        let off = p.data_off.min(buf_len);
        (off as usize, p.data_len.min(buf_len - off) as usize)
    }

    /// [`Packet::data_mut`] of a frame: the data's bytes in front of the shared payload (the
    /// headers), which no other handle reads.
    #[cold]
    #[inline(never)]
    pub(super) fn frame_data_mut(&mut self) -> &mut [u8] {
        let (off, len) = self.window();
        let limit = self.payload().0;
        let n = if off < limit { len.min(limit - off) } else { 0 };
        // SAFETY: `off <= buf_len` (a clamped window), so the pointer stays inside the buffer.
        let start = unsafe { self.buffer_ptr().add(off) };
        // SAFETY: `off + n <= limit <= buf_len`: bytes of the buffer in front of the shared
        // payload, which only the one frame in flight (this handle, `&mut self`) touches.
        unsafe { std::slice::from_raw_parts_mut(start.as_ptr(), n) }
    }

    /// [`Packet::buffer_mut`] of a frame: the headroom in front of the shared payload.
    #[cold]
    #[inline(never)]
    pub(super) fn frame_buffer_mut(&mut self) -> &mut [u8] {
        let limit = self.payload().0;
        self.cache.pool.shared.track(self.index);
        // SAFETY: as in `frame_data_mut`: the first `limit` bytes of the buffer.
        unsafe { std::slice::from_raw_parts_mut(self.buffer_ptr().as_ptr(), limit) }
    }

    /// [`Packet::prepend`] of a frame: allowed while the data starts at or before the shared
    /// payload, so the new bytes lie in front of it.
    #[cold]
    #[inline(never)]
    pub(super) fn frame_prepend(&mut self, n: usize) -> Result<&mut [u8], PacketError> {
        let (off, len) = self.window();
        let limit = self.payload().0;
        if off > limit {
            return Err(PacketError::SharedPayload);
        }
        if n > off {
            return Err(PacketError::NoHeadroom { requested: n, available: off });
        }
        self.set_header(off - n, len + n);
        // The new front `n` bytes end at `off <= limit`: all in `frame_data_mut`'s slice.
        Ok(self.frame_data_mut().get_mut(..n).unwrap_or_default())
    }
}

impl SharedPacket {
    #[inline(always)]
    fn shared(&self) -> &Shared {
        &self.pool.shared
    }

    /// The buffer's index in its pool.
    #[must_use]
    #[inline]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The [id](Pool::id) of the pool the buffer belongs to.
    #[must_use]
    #[inline]
    pub fn pool_id(&self) -> u64 {
        self.pool.id()
    }

    /// The pool the buffer belongs to.
    #[must_use]
    #[inline]
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Bytes of data.
    #[must_use]
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the buffer holds no data.
    #[must_use]
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes in front of the data: the most headers a [frame](Self::frame) can carry.
    #[must_use]
    #[inline]
    pub fn headroom(&self) -> usize {
        self.off as usize
    }

    /// The data, read-only (every handle reads the same bytes).
    #[must_use]
    #[inline]
    pub fn data(&self) -> &[u8] {
        self.shared().track_read(self.index);
        // SAFETY: `off <= buf_len` (`into_shared` took it from a clamped window), so the pointer
        // stays inside the slot.
        let start = unsafe { self.slot.add(HEADER_SIZE + self.off as usize) };
        // SAFETY: `off + len <= buf_len`, so the bytes lie in this buffer, in the region `pool`
        // keeps mapped; no handle writes them while the buffer is shared (frames write only in
        // front of `off`).
        unsafe { std::slice::from_raw_parts(start.as_ptr(), self.len as usize) }
    }

    /// How many references the buffer has right now (handles, and the frame in flight if any): a
    /// snapshot for statistics and tests.
    #[must_use]
    pub fn ref_count(&self) -> usize {
        // Relaxed: a snapshot; it orders nothing.
        (self.shared().state(self.index).load(Ordering::Relaxed) / REF) as usize
    }

    /// Whether a frame of the buffer is in flight right now (a snapshot: [`frame`](Self::frame)
    /// decides atomically).
    #[must_use]
    pub fn frame_in_flight(&self) -> bool {
        // Relaxed: a snapshot; it orders nothing.
        self.shared().state(self.index).load(Ordering::Relaxed) & FRAME != 0
    }

    /// A frame of this buffer for a device's `tx_burst`: a [`Packet`] whose data is `headers` bytes
    /// in front of the shared data (uninitialised: whatever the last frame left) followed by the
    /// shared data, for the caller to fill with [`Packet::data_mut`] (which, on a frame, covers only
    /// the bytes in front of the shared data). The frame holds a reference: the buffer stays while
    /// it is in flight, however it is freed (dropped, or its [`index`](Packet::index), which carries
    /// [`FRAME_TAG`], handed to [`PoolCache::free_burst`] by a driver on TX completion). Never
    /// blocks. The frame starts with no [offload metadata](super::Offload) (set it with
    /// [`Packet::set_offload`]).
    ///
    /// # Errors
    ///
    /// [`FrameError::InFlight`] while another frame of the buffer is in flight (its headers occupy
    /// the headroom: copy the data into a fresh buffer instead), [`FrameError::NoHeadroom`] when the
    /// headers do not fit in front of the data, [`FrameError::WrongPool`] when `cache` is of another
    /// pool.
    pub fn frame<'c>(&self, cache: &'c PoolCache, headers: usize) -> Result<Packet<'c>, FrameError> {
        let shared = self.shared();
        if cache.pool.shared.id != shared.id {
            return Err(FrameError::WrongPool);
        }
        let Some(front) = u32::try_from(headers).ok().filter(|&h| h <= self.off) else {
            return Err(FrameError::NoHeadroom { requested: headers, available: self.off as usize });
        };
        let state = shared.state(self.index);
        // Relaxed: only a guess for the compare-exchange, which decides.
        let mut cur = state.load(Ordering::Relaxed);
        loop {
            if cur & FRAME != 0 {
                cache.with_local(|l| l.stats.frames_refused += 1);
                return Err(FrameError::InFlight);
            }
            if cur > MAX_STATE {
                std::process::abort();
            }
            // Acquire: synchronises with the Release of the previous frame's release (`free_token`),
            // so the device's reads of that frame's headers happen before the writes below.
            match state.compare_exchange_weak(cur, cur + REF + FRAME, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        shared.track(self.index | FRAME_TAG);
        // No overflow: `front <= off` and `off + len <= buf_len`.
        let header = FullHeader::fresh(self.off - front, self.len + front);
        // SAFETY: the slot's header is aligned and in the region; the frame bit (taken above) makes
        // this the only frame, and shared handles never read the header's window or offload fields.
        unsafe { self.slot.cast::<FullHeader>().write(header) };
        cache.with_local(|l| l.stats.frames += 1);
        Ok(Packet { cache: cache.frames(), slot: self.slot, index: self.index | FRAME_TAG })
    }

    /// The buffer back as a writable packet of `cache`, when this is its only reference and no frame
    /// is in flight; otherwise the handle comes back.
    ///
    /// # Errors
    ///
    /// The handle, when other references exist or `cache` is of another pool.
    pub fn try_into_packet(self, cache: &PoolCache) -> Result<Packet<'_>, Self> {
        let shared = self.shared();
        if cache.pool.shared.id != shared.id {
            return Err(self);
        }
        // Acquire: synchronises with the Release decrements of the other references, so their reads
        // happen before this handle's owner writes the data.
        if shared.state(self.index).compare_exchange(REF, 0, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return Err(self);
        }
        // The whole buffer is this owner's again, headroom included.
        shared.track(self.index);
        shared.track(self.index | FRAME_TAG);
        // Relaxed: a count for `Pool::audit`.
        shared.shared_live.fetch_sub(1, Ordering::Relaxed);
        let this = ManuallyDrop::new(self);
        // SAFETY: `index` names a buffer of `cache`'s pool (checked) and the exchange above made this
        // handle its only owner: nothing else reads or writes it.
        let mut packet = unsafe { cache.packet_from_raw(this.index) };
        packet.set_header(this.off as usize, this.len as usize);
        packet.set_offload(super::Offload::NONE); // whatever the last frame asked for
        // SAFETY: `this` is never used or dropped again, so its pool handle is moved out once.
        drop(unsafe { std::ptr::read(&raw const this.pool) });
        Ok(packet)
    }
}

impl Clone for SharedPacket {
    fn clone(&self) -> Self {
        // Relaxed: as `Arc::clone`: the new reference comes from an existing one, so the buffer
        // cannot be freed meanwhile, and the handle reaches another thread only through something
        // that synchronises.
        let old = self.shared().state(self.index).fetch_add(REF, Ordering::Relaxed);
        if old > MAX_STATE {
            std::process::abort();
        }
        Self { pool: self.pool.clone(), slot: self.slot, index: self.index, off: self.off, len: self.len }
    }
}

impl Drop for SharedPacket {
    fn drop(&mut self) {
        let shared = &*self.pool.shared;
        // Release: this handle's reads of the data happen before the decrement, so before the
        // Acquire of whoever drops the last reference and frees the buffer.
        if shared.state(self.index).fetch_sub(REF, Ordering::Release) != REF {
            return;
        }
        shared.last_reference_gone(self.index);
        shared.lock_depot().free.push(self.index);
    }
}

impl Shared {
    /// Called by whoever took buffer `index`'s last reference (its count to zero) before it frees
    /// the buffer: orders every other reference's accesses before the free, counts the buffer
    /// unshared for [`Pool::audit`], and under loom makes an exclusive access to the buffer and its
    /// headroom, which the model checker reports unless every reference's accesses happen before it.
    pub(super) fn last_reference_gone(&self, index: u32) {
        // Acquire: reads the decrement that took the count to zero (or a later value), which
        // continues the release sequence of every earlier Release decrement and frame release (they
        // are all read-modify-writes of this word), so it synchronises with each: every reference's
        // reads happen before the buffer is reused. `Arc`'s argument, with an Acquire load in place
        // of its fence: the same edge, and one that ThreadSanitizer models (it ignores fences).
        let _ = self.state(index).load(Ordering::Acquire);
        self.track(index);
        self.track(index | FRAME_TAG);
        // Relaxed: a count for `Pool::audit`.
        self.shared_live.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PoolCache {
    /// The cache that frames of shared buffers borrow ([`SharedPacket::frame`]): its cache size is
    /// zero, so a frame's drop takes [`PoolCache::push_free`]'s cold path, which releases the
    /// frame's reference: plain packets pay nothing for it. Made on first use, registered like any
    /// cache ([`Audit::live_caches`](super::Audit::live_caches) counts it), dropped with this one.
    pub(super) fn frames(&self) -> &Self {
        self.frames.get_or_init(|| Box::new(self.pool.new_cache(0)))
    }

    /// Releases a frame's token ([`FRAME_TAG`] set): drops the frame's reference and clears the
    /// in-flight bit. [`Release::Freed`] when that was the last reference: the caller frees the
    /// buffer; [`Release::Rejected`], changing nothing, for anything that is not the token of a frame
    /// in flight (the caller counts it rejected).
    #[cold]
    #[inline(never)]
    pub(super) fn release_token(&self, token: u32) -> Release {
        let index = token & !FRAME_TAG;
        if token & FRAME_TAG == 0 || index >= self.layout.count {
            return Release::Rejected;
        }
        let shared = &*self.pool.shared;
        // The device's accesses to the frame end here.
        shared.track(token);
        // Release: the frame's accesses (the device's reads) happen before the next frame's header
        // writes (its Acquire compare-exchange) and before the final free (`last_reference_gone`).
        let released = shared.state(index).fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
            (s & FRAME != 0 && s >= REF + FRAME).then(|| s - (REF + FRAME))
        });
        match released {
            Err(_) => Release::Rejected,
            Ok(old) if old == REF + FRAME => {
                shared.last_reference_gone(index);
                Release::Freed(index)
            }
            Ok(_) => Release::Released,
        }
    }

    /// Frees a frame's token into this cache ([`PoolCache::release_token`], then the buffer when
    /// that was its last reference); counts anything else rejected.
    #[cold]
    #[inline(never)]
    pub(super) fn free_token(&self, local: &mut Local, token: u32) {
        match self.release_token(token) {
            Release::Freed(index) => self.push_free(local, index),
            Release::Released => {}
            Release::Rejected => local.stats.rejected += 1,
        }
    }

    /// Rebuilds the frame whose token ([`Packet::index`] of a frame, with [`FRAME_TAG`]) a device
    /// holds: the inverse of [`Packet::into_raw`] for frames, for a device that moves frames as
    /// indices (through a channel to the core that sends them) and reads them there.
    ///
    /// # Safety
    ///
    /// `token` came from [`Packet::into_raw`] of a frame of a shared buffer of this cache's pool,
    /// and the caller owns it (nobody else kept it, no other packet for it exists).
    #[must_use]
    pub unsafe fn frame_from_raw(&self, token: u32) -> Packet<'_> {
        let index = token & !FRAME_TAG;
        debug_assert!(token & FRAME_TAG != 0 && index < self.layout.count, "not a frame token: {token:#x}");
        // SAFETY: the index is in range (the caller's contract).
        let slot = unsafe { self.slot(index) };
        Packet { cache: self.frames(), slot, index: token | FRAME_TAG }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::dev::PacketBatch;
    use crate::pool::tests::pool;
    use crate::pool::{Audit, LeakError};

    fn shared_of(cache: &PoolCache, payload: &[u8]) -> SharedPacket {
        let mut p = cache.alloc().unwrap();
        p.extend_from_slice(payload).unwrap();
        p.into_shared().unwrap()
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<SharedPacket>();
    }

    #[test]
    fn the_last_reference_frees_the_buffer_once() {
        let pool = pool(4, 1, 2);
        let cache = pool.cache();
        let a = shared_of(&cache, b"prepared");
        assert_eq!((a.data(), a.len(), a.headroom(), a.ref_count()), (&b"prepared"[..], 8, 128, 1));
        let b = a.clone();
        let c = b.clone();
        assert_eq!(a.ref_count(), 3);
        assert_eq!(pool.audit().shared, 1);
        let other = std::thread::spawn(move || (c.data().to_vec(), drop(c)).0).join().unwrap();
        assert_eq!(other, b"prepared");
        drop(a);
        assert_eq!((b.ref_count(), pool.audit().outstanding), (1, 1));
        drop(b);
        let audit = pool.audit();
        assert_eq!((audit.outstanding, audit.shared, audit.in_depot), (0, 0, 3 - cache.len() + 1));
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn a_leaked_shared_buffer_is_reported() {
        let pool = pool(4, 1, 2);
        let cache = pool.cache();
        let a = shared_of(&cache, b"x");
        let index = a.index();
        std::mem::forget(a.clone());
        drop(a);
        drop(cache);
        assert_eq!(
            pool.audit(),
            Audit { total: 4, in_depot: 3, outstanding: 1, shared: 1, ..Audit::default() }
        );
        assert!(
            matches!(pool.check_leaks(), Err(LeakError::Leaked { missing: 1, first_missing: Some(i), .. }) if i == index)
        );
    }

    #[test]
    fn one_frame_at_a_time_with_headers_in_the_headroom() {
        let pool = pool(4, 1, 2);
        let cache = pool.cache();
        let shared = shared_of(&cache, b"payload");
        let mut frame = shared.frame(&cache, 4).unwrap();
        assert!(frame.is_frame());
        assert_eq!(frame.index(), shared.index() | FRAME_TAG);
        assert_eq!((frame.len(), frame.headroom()), (11, 124));
        assert_eq!(frame.dma_offset(), pool.buffer_offset(shared.index()).unwrap() + 124);
        assert_eq!(frame.data_mut().len(), 4, "only the headers are writable");
        frame.data_mut().copy_from_slice(b"HDR:");
        assert_eq!(frame.data(), b"HDR:payload");
        assert_eq!(frame.buffer_mut().len(), 128, "the headroom in front of the shared data");
        assert_eq!((shared.ref_count(), shared.frame_in_flight()), (2, true));
        assert_eq!(shared.frame(&cache, 4).unwrap_err(), FrameError::InFlight);
        assert_eq!(shared.clone().frame(&cache, 4).unwrap_err(), FrameError::InFlight);
        assert_eq!((cache.stats().frames, cache.stats().frames_refused), (1, 2));
        // Writes that would reach the shared data are refused, never done.
        assert_eq!(frame.extend_from_slice(b"!"), Err(PacketError::SharedPayload));
        frame.strip_front(5).unwrap();
        assert_eq!(frame.prepend(1), Err(PacketError::SharedPayload));
        assert!(frame.data_mut().is_empty());
        frame.reset();
        assert_eq!(frame.prepend(2).unwrap().len(), 2);
        assert_eq!(shared.data(), b"payload", "the shared data never changed");
        // A frame is not shared again; it comes back, and dropping it releases its reference.
        let frame = frame.into_shared().unwrap_err();
        assert_eq!(shared.ref_count(), 2);
        drop(frame);
        assert_eq!((shared.ref_count(), shared.frame_in_flight()), (1, false));
        let other_pool = super::super::tests::pool(1, 1, 1);
        let other = other_pool.cache();
        assert_eq!(shared.frame(&other, 4).unwrap_err(), FrameError::WrongPool);
        assert_eq!(
            shared.frame(&cache, 129).unwrap_err(),
            FrameError::NoHeadroom { requested: 129, available: 128 }
        );
        drop(other);
        other_pool.check_leaks().unwrap();
        drop(shared);
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn a_dropped_frame_releases_its_reference() {
        let pool = pool(4, 1, 2);
        let cache = pool.cache();
        let shared = shared_of(&cache, b"payload");
        let frame = shared.frame(&cache, 14).unwrap();
        drop(frame);
        assert_eq!((shared.ref_count(), shared.frame_in_flight()), (1, false));
        // The frame outlives every handle: its drop frees the buffer.
        let frame = shared.frame(&cache, 14).unwrap();
        drop(shared);
        assert_eq!(pool.audit().shared, 1);
        drop(frame);
        assert_eq!(pool.audit().shared, 0);
        assert_eq!(pool.audit().outstanding, 0);
        // Freed into the frames cache; a flush empties it too.
        cache.flush();
        assert_eq!(pool.audit().in_caches, 0);
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn a_driver_frees_frames_by_token_on_tx_completion() {
        let pool = pool(8, 2, 4);
        let cache = pool.cache();
        let shared = shared_of(&cache, b"segment");
        let mut batch = PacketBatch::with_capacity(4);
        batch.push(shared.frame(&cache, 2).unwrap()).unwrap();
        batch.push(cache.alloc().unwrap()).unwrap();
        // The 82599 driver's way: the index goes into the ring, the packet is forgotten.
        let ring: Vec<u32> = batch.as_slice().iter().map(Packet::index).collect();
        // SAFETY: `ring` holds each packet's index once; it is freed below.
        unsafe { batch.forget_front(2) };
        assert_eq!(shared.ref_count(), 2);
        // SAFETY: the indices (a frame token and a plain index) the "device" is done with, each once.
        unsafe { cache.free_burst(&ring) };
        assert_eq!((shared.ref_count(), cache.stats().rejected), (1, 0));
        // A token whose frame is not in flight is rejected, not released twice.
        // SAFETY: a deliberate stale token: nothing is freed (the shared buffer is still referenced).
        unsafe { cache.free_burst(&[ring[0]]) };
        assert_eq!((shared.ref_count(), cache.stats().rejected), (1, 1));
        // The frame's release is the last one: the buffer comes back into the cache.
        let token = shared.frame(&cache, 2).unwrap().into_raw();
        drop(shared);
        let before = cache.len();
        // SAFETY: the token of the frame just taken, given up by `into_raw`.
        unsafe { cache.free_burst(&[token]) };
        assert_eq!(cache.len(), before + 1);
        drop(batch);
        drop(cache);
        pool.check_leaks().unwrap();
    }

    /// A frame crosses a packet channel (to the core or thread that owns the device) as the frame
    /// it is: only its headers are writable there, and its release frees nothing while a handle
    /// remains; one left in the channel is released when the receiver goes.
    #[test]
    fn frames_cross_packet_channels_as_frames() {
        let pool = pool(4, 1, 2);
        let (mut tx, mut rx) = pool.packet_channel(4).unwrap();
        let cache = pool.cache();
        let shared = shared_of(&cache, b"xyz");
        let mut frame = shared.frame(&cache, 2).unwrap();
        frame.data_mut().copy_from_slice(b"hd");
        tx.push(frame).unwrap();
        let mut got = rx.pop(&cache).unwrap();
        assert!(got.is_frame());
        assert_eq!(got.data_mut().len(), 2);
        assert_eq!(got.data(), b"hdxyz");
        assert!(shared.frame_in_flight());
        drop(got);
        assert!(!shared.frame_in_flight());
        tx.push(shared.frame(&cache, 2).unwrap()).unwrap();
        drop(rx);
        assert!(!shared.frame_in_flight(), "released with the receiver");
        // Tokens sent back through a return channel are released by `reclaim`.
        let (mut ret_tx, mut ret_rx) = crate::channel::Channel::builder(4).build().unwrap();
        let token = shared.frame(&cache, 1).unwrap().into_raw();
        ret_tx.push(token).unwrap();
        // SAFETY: the channel carries the one token, given up.
        assert_eq!(unsafe { cache.reclaim(&mut ret_rx) }, 0, "a reference remains: nothing freed");
        assert_eq!(shared.ref_count(), 1);
        let token = shared.frame(&cache, 1).unwrap().into_raw();
        drop(shared);
        ret_tx.push(token).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { cache.reclaim(&mut ret_rx) }, 1, "the last reference: freed here");
        drop((tx, cache));
        pool.check_leaks().unwrap();
    }

    #[test]
    fn the_sole_reference_takes_the_buffer_back() {
        let pool = pool(4, 1, 2);
        let cache = pool.cache();
        let shared = shared_of(&cache, b"abc");
        let twin = shared.clone();
        let shared = shared.try_into_packet(&cache).unwrap_err();
        drop(twin);
        let mut frame = shared.frame(&cache, 1).unwrap();
        frame.set_offload(crate::pool::Offload::NONE.with_partial_checksum(1, 16));
        let shared = shared.try_into_packet(&cache).unwrap_err();
        drop(frame);
        let mut packet = shared.try_into_packet(&cache).unwrap();
        assert_eq!((packet.data(), packet.headroom()), (&b"abc"[..], 128));
        assert_eq!(packet.offload(), crate::pool::Offload::NONE, "not the last frame's");
        packet.data_mut()[0] = b'x';
        packet.extend_from_slice(b"d").unwrap();
        assert_eq!(pool.audit().shared, 0);
        drop(packet);
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[test]
    fn a_frame_rebuilt_from_its_token_reads_the_same_bytes() {
        let pool = pool(4, 1, 2);
        let (a, b) = (pool.cache(), pool.cache());
        let shared = shared_of(&a, b"data");
        let mut frame = shared.frame(&a, 2).unwrap();
        frame.data_mut().copy_from_slice(b"h:");
        let token = frame.into_raw();
        // SAFETY: the token of the frame above, given up by `into_raw`.
        let frame = unsafe { b.frame_from_raw(token) };
        assert_eq!(frame.data(), b"h:data");
        drop((frame, shared));
        drop((a, b));
        pool.check_leaks().unwrap();
    }
}
