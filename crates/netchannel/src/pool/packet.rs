//! The [`Packet`]: an owned buffer whose data window (offset and length) lives in the buffer's own
//! header, and the [`RxFrame`] a device collects per received buffer before it becomes a packet.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use super::region::{FullHeader, Header, OFFLOAD_OFFSET};
use super::{HEADER_SIZE, Offload, PacketError, PoolCache};

/// An owned packet buffer, borrowed from the [`PoolCache`] it returns to when dropped.
///
/// The buffer is `headroom + data room` bytes; the packet's data is a window into it that starts at
/// [`Packet::headroom`] and is [`Packet::len`] bytes long. Length changes that do not fit are errors,
/// never panics. The handle is neither `Send` nor `Sync`: to move a packet to another thread, push it
/// into a [`PacketTx`](super::PacketTx) or send [`Packet::into_raw`]'s index.
///
/// ```compile_fail,E0277
/// fn is_send<T: Send>() {}
/// is_send::<netchannel::pool::Packet<'static>>();
/// ```
///
/// ```compile_fail,E0597
/// # use netchannel::pool::{HugePages, Pool};
/// let pool = Pool::builder(4).hugepages(HugePages::Never).build().unwrap();
/// let packet = {
///     let cache = pool.cache();
///     cache.alloc().unwrap() // cannot outlive its cache
/// };
/// ```
pub struct Packet<'c> {
    pub(super) cache: &'c PoolCache,
    pub(super) slot: NonNull<u8>,
    pub(super) index: u32,
}

impl fmt::Debug for Packet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packet")
            .field("index", &self.index)
            .field("headroom", &self.headroom())
            .field("len", &self.len())
            .finish()
    }
}

/// [`Packet::window`] of a header that does not fit its buffer (written through a raw pointer):
/// the start clamped to the buffer, the length to what is left after it.
#[cold]
#[inline(never)]
fn clamp_window(data_off: u32, data_len: u32, buf_len: u32) -> (usize, usize) {
    let off = data_off.min(buf_len);
    let len = data_len.min(buf_len - off);
    (off as usize, len as usize)
}

/// A header's data window clamped to a buffer of `buf_len` bytes (see [`Packet::window`]).
#[inline(always)]
fn window_in(Header { data_off, data_len }: Header, buf_len: u32) -> (usize, usize) {
    if u64::from(data_off) + u64::from(data_len) <= u64::from(buf_len) {
        (data_off as usize, data_len as usize)
    } else {
        clamp_window(data_off, data_len, buf_len)
    }
}

impl<'c> Packet<'c> {
    #[inline(always)]
    fn buf_len(&self) -> usize {
        self.cache.layout.buf_len as usize
    }

    #[inline(always)]
    pub(super) fn header(&self) -> Header {
        self.cache.pool.shared.track(self.index);
        // SAFETY: the slot is aligned and in the region (`PoolCache::slot`), and this handle owns the
        // buffer, so nothing writes the header concurrently.
        unsafe { self.slot.cast::<Header>().read() }
    }

    #[inline(always)]
    pub(super) fn set_header(&mut self, data_off: usize, data_len: usize) {
        debug_assert!(data_off + data_len <= self.buf_len());
        // Both fit: their sum is at most `buf_len`, a `u32`.
        let header = Header {
            data_off: u32::try_from(data_off).unwrap_or(u32::MAX),
            data_len: u32::try_from(data_len).unwrap_or(0),
        };
        self.cache.pool.shared.track(self.index);
        // SAFETY: as in `header`; `&mut self` makes this the only access through this handle.
        unsafe { self.slot.cast::<Header>().write(header) };
    }

    /// The data's start and length, clamped to the buffer so that no header contents (which raw
    /// pointers into the region could have scribbled on) can make an accessor reach outside it:
    /// `off = min(data_off, buf_len)`, `len = min(data_len, buf_len - off)`.
    ///
    /// Every header the pool writes has `data_off + data_len <= buf_len`, where clamping changes
    /// nothing: that case is one add, one compare and one predicted branch, and the clamp proper is
    /// out of line. The sum is taken in `u64`, so it cannot overflow on any target.
    #[inline(always)]
    pub(super) fn window(&self) -> (usize, usize) {
        window_in(self.header(), self.cache.layout.buf_len)
    }

    #[inline(always)]
    pub(super) fn buffer_ptr(&self) -> NonNull<u8> {
        // SAFETY: every slot is `HEADER_SIZE + buf_len` bytes or more, so the buffer starts inside it.
        unsafe { self.slot.add(HEADER_SIZE) }
    }

    /// The buffer's index in its pool; for a frame of a shared buffer ([`Packet::is_frame`]), the
    /// index with [`FRAME_TAG`](super::FRAME_TAG) set: the token a driver hands back to
    /// [`PoolCache::free_burst`] to release the frame.
    #[must_use]
    #[inline]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The [id](super::Pool::id) of the pool the buffer belongs to.
    #[must_use]
    #[inline]
    pub fn pool_id(&self) -> u64 {
        self.cache.pool.id()
    }

    /// Bytes of packet data.
    #[must_use]
    #[inline]
    pub fn len(&self) -> usize {
        self.window().1
    }

    /// Whether the packet holds no data.
    #[must_use]
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Free bytes in front of the data (where [`Packet::prepend`] writes).
    #[must_use]
    #[inline]
    pub fn headroom(&self) -> usize {
        self.window().0
    }

    /// Free bytes after the data (how much [`Packet::set_len`] can grow it).
    #[must_use]
    #[inline]
    pub fn tailroom(&self) -> usize {
        let (off, len) = self.window();
        self.buf_len() - off - len
    }

    /// The packet's data.
    #[must_use]
    #[inline]
    pub fn data(&self) -> &[u8] {
        let (off, len) = self.window();
        // SAFETY: `off <= buf_len`, so the pointer stays inside the buffer, which starts `HEADER_SIZE`
        // bytes into the slot (`buffer_ptr`; one offset, so one address computation).
        let start = unsafe { self.slot.add(HEADER_SIZE + off) };
        // SAFETY: `off + len <= buf_len` bytes of the buffer this handle owns; the region is mapped
        // (and its bytes initialised, zero-filled by mmap) while the cache's pool lives.
        unsafe { std::slice::from_raw_parts(start.as_ptr(), len) }
    }

    /// The packet's data, writable. On a frame of a shared buffer ([`Packet::is_frame`]), only the
    /// data's bytes in front of the shared data (the headers): other handles read the rest.
    #[must_use]
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        if self.is_frame() {
            return self.frame_data_mut();
        }
        let (off, len) = self.window();
        // SAFETY: `off <= buf_len`, so the pointer stays inside the buffer.
        let start = unsafe { self.buffer_ptr().add(off) };
        // SAFETY: as in `data`, and `&mut self` makes this the only reference into the buffer.
        unsafe { std::slice::from_raw_parts_mut(start.as_ptr(), len) }
    }

    /// The whole buffer: headroom, data and tailroom.
    #[must_use]
    #[inline]
    pub fn buffer(&self) -> &[u8] {
        self.cache.pool.shared.track(self.index);
        // SAFETY: the buffer's `buf_len` bytes, owned by this handle, in the mapped region.
        unsafe { std::slice::from_raw_parts(self.buffer_ptr().as_ptr(), self.buf_len()) }
    }

    /// The whole buffer, writable (a NIC-style driver receives into it, then calls
    /// [`Packet::set_len`]). On a frame of a shared buffer, only the headroom in front of the shared
    /// data.
    #[must_use]
    #[inline]
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        if self.is_frame() {
            return self.frame_buffer_mut();
        }
        self.cache.pool.shared.track(self.index);
        // SAFETY: as in `buffer`, and `&mut self` makes this the only reference into the buffer.
        unsafe { std::slice::from_raw_parts_mut(self.buffer_ptr().as_ptr(), self.buf_len()) }
    }

    /// The byte offset of the buffer (its first headroom byte) within the pool's [`Region`](super::Region).
    #[must_use]
    #[inline]
    pub fn buffer_offset(&self) -> usize {
        // From the slot's address rather than the index, which a frame tags: the same cost (one
        // load, one subtract), and right for frames too.
        self.slot.as_ptr() as usize - self.cache.base.as_ptr() as usize + HEADER_SIZE
    }

    /// The byte offset of the first data byte within the pool's [`Region`](super::Region): add the region's DMA
    /// address to get a descriptor's buffer address.
    #[must_use]
    #[inline]
    pub fn dma_offset(&self) -> usize {
        self.buffer_offset() + self.headroom()
    }

    /// [`dma_offset`](Self::dma_offset) and [`len`](Self::len) together, from one read of the
    /// packet's metadata: what a transmit descriptor needs.
    #[must_use]
    #[inline]
    pub fn dma_window(&self) -> (usize, usize) {
        let (off, len) = self.window();
        (self.buffer_offset() + off, len)
    }

    /// The cache this packet's buffer returns to when it is dropped. Two packets of one cache are
    /// of one pool: a device that checks the pool of every packet it is handed can check a cache
    /// it has seen before with one pointer compare.
    #[must_use]
    #[inline]
    pub fn cache(&self) -> &'c PoolCache {
        self.cache
    }

    /// Sets the data's length, keeping its start; new bytes hold whatever the buffer held.
    ///
    /// # Errors
    ///
    /// [`PacketError::TooLong`] when the data would run past the buffer's end.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> Result<(), PacketError> {
        let (off, _) = self.window();
        let max = self.buf_len() - off;
        if len > max {
            return Err(PacketError::TooLong { requested: len, max });
        }
        self.set_header(off, len);
        Ok(())
    }

    /// Shortens the data to `len` bytes; does nothing when it is not longer than that.
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        let (off, cur) = self.window();
        if len < cur {
            self.set_header(off, len);
        }
    }

    /// Appends `bytes` after the data.
    ///
    /// # Errors
    ///
    /// [`PacketError::TooLong`] when they do not fit, [`PacketError::SharedPayload`] on a frame of a
    /// shared buffer; the packet is unchanged.
    #[inline]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<(), PacketError> {
        if self.is_frame() {
            return Err(PacketError::SharedPayload);
        }
        let old = self.len();
        let new = old.saturating_add(bytes.len());
        self.set_len(new)?;
        self.data_mut()[old..].copy_from_slice(bytes);
        Ok(())
    }

    /// Grows the data by `n` bytes at the front, into the headroom, and returns those bytes for the
    /// caller to fill (an encapsulation header, say).
    ///
    /// # Errors
    ///
    /// [`PacketError::NoHeadroom`] when the headroom is smaller than `n`; on a frame of a shared
    /// buffer, [`PacketError::SharedPayload`] when the data starts inside the shared data (the new
    /// bytes would overwrite it).
    #[inline]
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8], PacketError> {
        if self.is_frame() {
            return self.frame_prepend(n);
        }
        let (off, len) = self.window();
        if n > off {
            return Err(PacketError::NoHeadroom { requested: n, available: off });
        }
        self.set_header(off - n, len + n);
        Ok(&mut self.data_mut()[..n])
    }

    /// Removes `n` bytes from the front of the data (a parsed header), growing the headroom.
    ///
    /// # Errors
    ///
    /// [`PacketError::TooShort`] when the data is shorter than `n`.
    #[inline]
    pub fn strip_front(&mut self, n: usize) -> Result<(), PacketError> {
        let (off, len) = self.window();
        if n > len {
            return Err(PacketError::TooShort { requested: n, len });
        }
        self.set_header(off + n, len - n);
        Ok(())
    }

    /// Empties the packet and restores the pool's default headroom.
    #[inline]
    pub fn reset(&mut self) {
        self.set_header(self.cache.layout.headroom as usize, 0);
    }

    /// The frame's [`Offload`] metadata: what a device reported receiving it, or what was asked of
    /// the device that sends it. [`Offload::NONE`] on a fresh buffer.
    #[must_use]
    #[inline]
    pub fn offload(&self) -> Offload {
        self.cache.pool.shared.track(self.index);
        // SAFETY: the slot is at least `HEADER_SIZE` bytes, which hold a `FullHeader`.
        let at = unsafe { self.slot.add(OFFLOAD_OFFSET) };
        // SAFETY: the slot is aligned and in the region, its header holds a `FullHeader` (written
        // whole whenever the buffer became fresh), and this handle owns the buffer.
        unsafe { at.cast::<Offload>().read() }
    }

    /// Sets the frame's [`Offload`] metadata (kept across length changes; a device that cannot do
    /// what it asks refuses the frame).
    #[inline]
    pub fn set_offload(&mut self, offload: Offload) {
        self.cache.pool.shared.track(self.index);
        // SAFETY: as in `offload`.
        let at = unsafe { self.slot.add(OFFLOAD_OFFSET) };
        // SAFETY: as in `offload`; `&mut self` makes this the only access through this handle.
        unsafe { at.cast::<Offload>().write(offload) };
    }

    /// Gives up the handle without freeing the buffer and returns its index: ownership now travels
    /// as the index (through a channel, into a NIC descriptor). The metadata stays in the buffer;
    /// [`PoolCache::packet_from_raw`] rebuilds the packet, and [`PoolCache::free_burst`] frees it.
    /// A frame of a shared buffer returns its token (the index with
    /// [`FRAME_TAG`](super::FRAME_TAG)): [`PoolCache::frame_from_raw`] rebuilds it, and
    /// [`PoolCache::free_burst`] releases it.
    #[must_use = "the buffer leaks unless the index is turned back into a packet or freed"]
    #[inline]
    pub fn into_raw(self) -> u32 {
        ManuallyDrop::new(self).index
    }
}

impl Drop for Packet<'_> {
    #[inline]
    fn drop(&mut self) {
        let cache = self.cache;
        let index = self.index;
        cache.pool.shared.track(index);
        cache.with_local(|l| {
            cache.push_free(l, index);
            cache.publish(l);
        });
    }
}

/// A frame a device received into a pool buffer: the buffer's index and the frame's length in bytes,
/// its data starting at the pool's headroom. What a DMA driver collects per descriptor before
/// [`PacketBatch::extend_received`](crate::dev::PacketBatch::extend_received) turns a burst of them into packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct RxFrame {
    /// The buffer's index in its pool.
    pub index: u32,
    /// The frame's length in bytes.
    pub len: u32,
}

/// Where a receive loop puts each buffer it hands over: a packet slot of a
/// [`PacketBatch`](crate::dev::PacketBatch) (the packet is built), or a plain index of a
/// [`RawBatch`](crate::dev::RawBatch) (the index is stored, nothing built). The loops below are written
/// once for both.
pub(crate) trait RxSlot<'c> {
    /// Takes buffer `index`, whose slot in the region starts at `at`, of `cache`'s pool.
    fn put(&mut self, cache: &'c PoolCache, at: NonNull<u8>, index: u32);
}

impl<'c> RxSlot<'c> for std::mem::MaybeUninit<Packet<'c>> {
    #[inline(always)]
    fn put(&mut self, cache: &'c PoolCache, at: NonNull<u8>, index: u32) {
        self.write(Packet { cache, slot: at, index });
    }
}

impl RxSlot<'_> for u32 {
    #[inline(always)]
    fn put(&mut self, _: &PoolCache, _: NonNull<u8>, index: u32) {
        *self = index;
    }
}

/// A cache's region base and slot geometry as plain values ([`PoolCache::raw_frames`]): a loop over
/// buffer indices keeps them in registers (the cache itself holds a cell, so the compiler reloads
/// what it reads through it after every store).
#[derive(Clone, Copy)]
pub(crate) struct RawFrames<'c> {
    base: NonNull<u8>,
    stride: usize,
    buf_len: u32,
    cache: &'c PoolCache,
}

#[cfg_attr(loom, allow(dead_code, reason = "the loom build has no receive loop over indices"))]
impl<'c> RawFrames<'c> {
    /// The data of buffer `index` as its header says, clamped to the buffer as [`Packet::data`]'s is.
    ///
    /// # Safety
    ///
    /// As [`PoolCache::packet_from_raw`]: `index` names a buffer of the cache's pool that the caller
    /// owns, and no packet for it exists (so nothing writes the buffer while the slice lives).
    #[must_use]
    #[inline(always)]
    pub(crate) unsafe fn data(self, index: u32) -> &'c [u8] {
        debug_assert!(index < self.cache.layout.count, "buffer index {index} out of range");
        self.cache.pool.shared.track(index);
        // SAFETY: `index < count` (the caller's contract), and the build checked that `count × stride`
        // bytes fit in the region, so the slot is inside the mapping.
        let at = unsafe { self.base.add(index as usize * self.stride) };
        // SAFETY: the slot starts with an aligned header; the caller owns the buffer, so nothing writes
        // it concurrently.
        let (off, len) = window_in(unsafe { at.cast::<Header>().read() }, self.buf_len);
        // SAFETY: `off <= buf_len` (clamped), so the pointer stays inside the buffer, which starts
        // `HEADER_SIZE` bytes into the slot.
        let start = unsafe { at.add(HEADER_SIZE + off) };
        // SAFETY: `off + len <= buf_len` (clamped): bytes of the buffer, mapped (and initialised) while
        // the cache's pool lives.
        unsafe { std::slice::from_raw_parts(start.as_ptr(), len) }
    }
}

/// Packets made from a cache's buffers: one allocated empty, one rebuilt from its raw index, and the
/// bursts a device's receive loop builds. They live beside [`Packet`] so that the cache, which
/// packets borrow and free into, does not import them back.
impl PoolCache {
    /// Allocates an empty packet (data starting after the default headroom), or `None` when neither
    /// this cache nor the depot has a free buffer.
    #[must_use]
    #[inline]
    pub fn alloc(&self) -> Option<Packet<'_>> {
        let index = self.with_local(|l| {
            let index = self.pop_free(l)?;
            l.stats.allocs += 1;
            self.publish(l);
            Some(index)
        })?;
        // SAFETY: indices only enter the stack in range (`Builder::build`, `free_burst` and `reclaim`
        // check), and popping it made us its only owner.
        unsafe { self.reset_header(index) };
        // SAFETY: as above.
        let slot = unsafe { self.slot(index) };
        Some(Packet { cache: self, slot, index })
    }

    /// Rebuilds the packet handle of buffer `index`, with the metadata (data offset and length) that
    /// travelled in the buffer. The inverse of [`Packet::into_raw`].
    ///
    /// # Safety
    ///
    /// `index` names a buffer of this cache's pool that the caller owns (it came from
    /// [`Packet::into_raw`] or [`PoolCache::alloc_burst`], possibly through a channel, and nobody
    /// else kept it), and no other packet for it exists. Two handles on one buffer would hand out
    /// aliasing `&mut` references to its bytes; an out-of-range index would point outside the region.
    /// A frame's token (with [`FRAME_TAG`](super::FRAME_TAG)) is not an index:
    /// [`PoolCache::frame_from_raw`] takes it.
    #[must_use]
    #[inline]
    pub unsafe fn packet_from_raw(&self, index: u32) -> Packet<'_> {
        debug_assert!(index < self.layout.count, "buffer index {index} out of range");
        // SAFETY: `index` is in range (caller).
        let slot = unsafe { self.slot(index) };
        Packet { cache: self, slot, index }
    }

    /// The region's geometry, read once, for a receive loop over raw buffer indices
    /// ([`RawBatch`](crate::dev::RawBatch)): it reads each frame through [`RawFrames::data`] instead of
    /// building a packet.
    #[cfg_attr(loom, allow(dead_code, reason = "the loom build has no receive loop over indices"))]
    #[must_use]
    #[inline(always)]
    pub(crate) fn raw_frames(&self) -> RawFrames<'_> {
        RawFrames { base: self.base, stride: self.layout.stride, buf_len: self.layout.buf_len, cache: self }
    }

    /// Writes the packets of buffers `indices` into `slots` (as many as both hold) and returns the sum
    /// of their data lengths as their headers say (for device statistics only: nothing reads memory by
    /// that sum, so a scribbled header can only skew a counter). A device's receive loop: the region
    /// base and stride are read once, not per packet.
    ///
    /// # Safety
    ///
    /// As [`PoolCache::packet_from_raw`] for each index written.
    #[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
    #[inline(always)]
    pub(crate) unsafe fn packets_from_raw<'c, S: RxSlot<'c>>(
        &'c self,
        slots: &mut [S],
        indices: &[u32],
    ) -> u64 {
        let (base, stride) = (self.base, self.layout.stride);
        let mut bytes = 0u64;
        for (slot, &index) in slots.iter_mut().zip(indices) {
            debug_assert!(index < self.layout.count, "buffer index {index} out of range");
            self.pool.shared.track(index);
            // SAFETY: `index < count` (the caller's contract), and the build checked that `count ×
            // stride` bytes fit in the region, so the slot is inside the mapping.
            let at = unsafe { base.add(index as usize * stride) };
            // SAFETY: the slot starts with an aligned header, and the caller owns the buffer, so
            // nothing writes it concurrently.
            let header = unsafe { at.cast::<Header>().read() };
            bytes += u64::from(header.data_len);
            slot.put(self, at, index);
        }
        bytes
    }

    /// Writes the packets of the frames a device received (`frames`: buffer index and length) into
    /// `slots` (as many as both hold), each with its data at the pool's headroom and the given length
    /// (clamped to the data room), and returns the sum of the lengths written.
    ///
    /// # Safety
    ///
    /// As [`PoolCache::packet_from_raw`] for each index written.
    #[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
    #[inline(always)]
    pub(crate) unsafe fn packets_from_received<'c, S: RxSlot<'c>>(
        &'c self,
        slots: &mut [S],
        frames: &[RxFrame],
    ) -> u64 {
        let room = self.layout.buf_len - self.layout.headroom;
        let clamped = |i| frames.get(i).map(|&RxFrame { index, len }| RxFrame { index, len: len.min(room) });
        // SAFETY: forwarded from the caller, for the frames `get` returns; their lengths are clamped.
        unsafe { self.packets_from_received_with(slots, clamped) }.1
    }

    /// [`packets_from_received`](Self::packets_from_received) with the frames produced one at a time:
    /// `next(i)` gives the `i`th frame, or `None` to stop. A device's receive loop runs inside `next`,
    /// so each frame becomes a packet while its descriptor is in registers, with no array of frames
    /// in between. Returns how many packets were written (at most `slots.len()`) and the sum of their
    /// lengths. The lengths are written as given: the caller keeps them within the data room (a
    /// longer one is still clamped to the buffer whenever the packet's data is read, as every
    /// header is, but it would count in the sum).
    ///
    /// # Safety
    ///
    /// As [`PoolCache::packet_from_raw`] for each frame's index `next` returns.
    #[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
    #[inline(always)]
    pub(crate) unsafe fn packets_from_received_with<'c, S: RxSlot<'c>>(
        &'c self,
        slots: &mut [S],
        mut next: impl FnMut(usize) -> Option<RxFrame>,
    ) -> (usize, u64) {
        let (base, stride) = (self.base, self.layout.stride);
        let headroom = self.layout.headroom;
        let mut bytes = 0u64;
        let mut written = 0;
        // Indexed by the count itself, so that `next` sees `written < slots.len()` as the loop's
        // own bound (a driver's closure then needs no check of its own).
        while let Some(slot) = slots.get_mut(written) {
            let Some(RxFrame { index, len: data_len }) = next(written) else { break };
            debug_assert!(index < self.layout.count, "buffer index {index} out of range");
            self.pool.shared.track(index);
            // SAFETY: `index < count` (the caller's contract), and the build checked that `count ×
            // stride` bytes fit in the region, so the slot is inside the mapping.
            let at = unsafe { base.add(index as usize * stride) };
            // SAFETY: the slot starts with an aligned header, and the caller owns the buffer, so
            // nothing reads or writes it concurrently (the lengths it holds are clamped on every read).
            unsafe { at.cast::<FullHeader>().write(FullHeader::fresh(headroom, data_len)) };
            bytes += u64::from(data_len);
            slot.put(self, at, index);
            written += 1;
        }
        (written, bytes)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::pool::tests::pool;

    #[test]
    fn scribbled_headers_are_clamped_to_the_buffer() {
        let pool = pool(4, 1, 2);
        let cache = pool.cache();
        let buf_len = pool.buffer_len();
        let bad = [
            (u32::MAX, u32::MAX),
            (0, u32::MAX),
            (u32::MAX, 0),
            (2000, 2000),
            (0, u32::try_from(buf_len).unwrap() + 1),
            (u32::try_from(buf_len).unwrap(), 1),
            (u32::try_from(buf_len).unwrap() - 1, 2),
        ];
        for (off, len) in bad {
            let p = cache.alloc().unwrap();
            let header =
                pool.region().as_ptr().wrapping_add(p.index() as usize * pool.stride()).cast::<Header>();
            // SAFETY: the header of a buffer we own, at the start of its slot inside the region (what a
            // raw-pointer user such as a NIC could scribble on).
            unsafe { header.write(Header { data_off: off, data_len: len }) };
            let (start, n) = (p.headroom(), p.len());
            assert!(start <= buf_len && start + n <= buf_len, "({off}, {len}) -> ({start}, {n})");
            assert_eq!(p.data().len(), n);
            let end = p.buffer().as_ptr() as usize + buf_len;
            assert!(p.data().as_ptr() as usize + n <= end);
        }
    }

    #[test]
    fn packet_accessors_stay_inside_the_buffer() {
        let pool = pool(4, 1, 2);
        let cache = pool.cache();
        let mut p = cache.alloc().unwrap();
        assert_eq!((p.index(), p.len(), p.headroom(), p.tailroom()), (0, 0, 128, 2048));
        assert!(p.is_empty());
        assert_eq!(p.buffer_offset(), 64);
        assert_eq!(p.dma_offset(), 64 + 128);

        p.extend_from_slice(b"hello").unwrap();
        assert_eq!(p.data(), b"hello");
        assert_eq!(p.set_len(2049), Err(PacketError::TooLong { requested: 2049, max: 2048 }));
        assert_eq!(p.len(), 5);
        p.set_len(2048).unwrap();
        assert_eq!(p.tailroom(), 0);
        assert_eq!(p.extend_from_slice(b"x"), Err(PacketError::TooLong { requested: 2049, max: 2048 }));
        p.truncate(4);
        assert_eq!(p.data(), b"hell");
        p.truncate(100);
        assert_eq!(p.len(), 4);

        p.prepend(2).unwrap().copy_from_slice(b"<<");
        assert_eq!(p.data(), b"<<hell");
        assert_eq!((p.headroom(), p.dma_offset()), (126, 64 + 126));
        assert_eq!(p.prepend(127), Err(PacketError::NoHeadroom { requested: 127, available: 126 }));
        p.strip_front(3).unwrap();
        assert_eq!(p.data(), b"ell");
        assert_eq!(p.strip_front(4), Err(PacketError::TooShort { requested: 4, len: 3 }));
        // Past the data room a prepend still fits the headroom, and set_len counts from the data start.
        assert_eq!(p.headroom(), 129);
        assert_eq!(p.set_len(2048), Err(PacketError::TooLong { requested: 2048, max: 2047 }));

        // Scribbling over the whole buffer leaves the header (outside it) intact.
        p.buffer_mut().fill(0xAB);
        assert_eq!(p.buffer().len(), 2176);
        assert_eq!((p.headroom(), p.len()), (129, 3));
        assert_eq!(p.data(), &[0xAB; 3]);
        p.reset();
        assert_eq!((p.headroom(), p.len()), (128, 0));
    }

    #[test]
    fn metadata_travels_in_the_buffer() {
        let pool = pool(8, 2, 4);
        let a = pool.cache();
        let b = pool.cache();
        let mut p = a.alloc().unwrap();
        p.extend_from_slice(b"payload").unwrap();
        p.prepend(4).unwrap().copy_from_slice(b"head");
        let index = p.into_raw();
        // SAFETY: `index` came from `into_raw` above and nothing else holds it.
        let q = unsafe { b.packet_from_raw(index) };
        assert_eq!(q.data(), b"headpayload");
        assert_eq!(q.headroom(), 124);
        drop(q);
        assert_eq!(b.len(), 1, "freed into the cache that dropped it");
        assert_eq!(b.stats().frees, 1);
        assert_eq!(a.stats().allocs, 1);
    }

    #[test]
    fn metadata_of_adjacent_buffers_is_on_separate_lines() {
        let pool = pool(4, 4, 4);
        let cache = pool.cache();
        let p = cache.alloc().unwrap();
        let q = cache.alloc().unwrap();
        let line = |pkt: &Packet<'_>| (pkt.slot.as_ptr() as usize) / 64;
        assert_ne!(line(&p), line(&q));
        assert_eq!(p.slot.as_ptr() as usize % 64, 0);
        assert_eq!(q.slot.as_ptr() as usize % 64, 0);
    }

    #[test]
    fn a_device_receive_and_transmit_cycle_through_the_raw_paths() {
        use crate::dev::PacketBatch;
        // A cache of 4 that spills 2 at a time, over 8 buffers.
        let pool = pool(8, 2, 4);
        let cache = pool.cache();
        let mut fresh = [0u32; 6];
        assert_eq!(cache.alloc_burst_raw(&mut fresh), 6);
        // The device "receives" into the first five; the producer stops at the fourth frame.
        let mut batch = PacketBatch::with_capacity(8);
        // SAFETY: fresh buffers of `cache`'s pool, each returned once.
        let (n, bytes) = unsafe {
            batch.extend_received_with(&cache, 5, |i| {
                (i < 3).then(|| RxFrame { index: fresh[i], len: 10 * (u32::try_from(i).unwrap() + 1) })
            })
        };
        assert_eq!((n, bytes, batch.len()), (3, 60, 3));
        let p = &batch.as_slice()[2];
        assert_eq!((p.index(), p.headroom(), p.len()), (fresh[2], 128, 30));
        assert_eq!(p.dma_window(), (p.dma_offset(), p.len()));
        assert!(std::ptr::eq(p.cache(), &cache));
        // A frame longer than the data room is clamped to it; `max` bounds the run.
        // SAFETY: as above.
        let (n, _) = unsafe {
            batch.extend_received_with(&cache, 1, |i| Some(RxFrame { index: fresh[3 + i], len: 9999 }))
        };
        assert_eq!((n, batch.as_slice()[3].len()), (1, 2048));
        // The device "transmits" the first two: their buffers are its now, the rest move up.
        let sent: Vec<u32> = batch.as_slice()[..2].iter().map(Packet::index).collect();
        // SAFETY: `sent` holds the first two packets' buffers, each once.
        unsafe { batch.forget_front(2) };
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.as_slice()[0].index(), fresh[2]);
        // SAFETY: past the end: nothing moves.
        unsafe { batch.forget_front(0) };
        assert_eq!(batch.len(), 2);
        batch.clear();
        // The device is done: the two come back with the two fresh ones never used, into a cache
        // holding two, so the burst spills (the cache keeps at most 4).
        let back = [sent[0], sent[1], fresh[4], fresh[5]];
        // SAFETY: buffers of this pool owned by the "device", distinct, given up.
        unsafe { cache.free_burst(&back) };
        assert!(cache.len() <= 4, "{}", cache.len());
        assert!(cache.stats().spills >= 1);
        assert_eq!(cache.stats().rejected, 0);
        drop(batch);
        drop(cache);
        pool.check_leaks().expect("every buffer back");
    }
}
