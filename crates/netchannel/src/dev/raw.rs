//! Receiving buffer indices instead of packets: the [`RawBatch`] a channelizer hands a device that
//! already holds its frames as buffer indices (the in-memory [`Pair`](super::Pair), the 82599
//! driver), and the [`RxSink`] a device's receive loop is written against so that one loop fills
//! either a [`PacketBatch`] or a `RawBatch`.
//!
//! A [`Packet`](crate::pool::Packet) is 24 bytes (its cache, its slot's address, its index): a burst
//! of them is built by the device and walked again by the channelizer, only for the channelizer to
//! take each index back out and forget the packet. A `RawBatch` carries the index alone; the
//! channelizer reads each frame's data from the buffer's own header
//! ([`PoolCache::raw_frames`]) and stages the index for its consumer's channel, as it did before.
//! Since it reads each frame's length there, it also hands the device their sum
//! ([`NetDevice::count_raw_rx_bytes`](super::NetDevice::count_raw_rx_bytes)), so a device whose
//! indices come without lengths (the `Pair`'s wire) counts its received bytes without reading every
//! header a second time.

use super::PacketBatch;
use crate::pool::{PoolCache, RxFrame};

/// A burst of received buffers as plain indices of one pool, each owned by the batch: what
/// [`NetDevice::rx_burst_raw`](super::NetDevice::rx_burst_raw) fills, so that a device that holds its
/// frames as indices hands them over without building a 24-byte [`Packet`](crate::pool::Packet) per
/// frame that the channelizer would walk again only to take the index back out. A device appends to it only through its `unsafe` methods, whose contract is that each index
/// names a buffer of the receive cache's pool that the device owns and gives up, and no packet for it
/// exists. Only a [`Channelizer`](crate::channelizer::Channelizer) makes one, and it takes every
/// index out after each receive; the buffers of indices left in a batch that is dropped are lost
/// (the pool's [`check_leaks`](crate::pool::Pool::check_leaks) reports them).
#[derive(Debug)]
pub struct RawBatch {
    /// `indices[..len]` are the batch's; the rest is room (never read).
    indices: Box<[u32]>,
    len: usize,
}

/// What [`NetDevice::rx_burst_raw`](super::NetDevice::rx_burst_raw) received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct RawReceived {
    /// Frames appended to the [`RawBatch`] as indices.
    pub indices: usize,
    /// Frames appended to the [`PacketBatch`] as packets (each arrived after every index).
    pub packets: usize,
}

#[cfg_attr(loom, allow(dead_code, reason = "the loom build has no devices to call it"))]
impl RawBatch {
    /// An empty batch with room for `capacity` indices.
    #[must_use]
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self { indices: vec![0; capacity].into_boxed_slice(), len: 0 }
    }

    /// How many indices it holds at most.
    #[must_use]
    #[inline]
    pub fn capacity(&self) -> usize {
        self.indices.len()
    }

    /// How many indices it holds.
    #[must_use]
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no index.
    #[must_use]
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Room left.
    #[must_use]
    #[inline]
    pub fn remaining(&self) -> usize {
        self.indices.len() - self.len
    }

    /// The indices, first received first.
    #[must_use]
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u32] {
        // `len <= capacity`: every method that raises it stays within the room.
        self.indices.get(..self.len).unwrap_or_default()
    }

    /// Appends buffers `indices` of `cache`'s pool, as many as there is room for, in one copy that also
    /// sums their lengths as their headers say (for device statistics); returns how many it appended
    /// and the sum. The receive path of a device whose frames arrive as indices (the [`Pair`](super::Pair)).
    ///
    /// # Safety
    ///
    /// As [`PoolCache::packet_from_raw`] for each index appended: it names a buffer of `cache`'s pool
    /// that the caller owns (and gives up), no packet for it exists, and no index appears twice. The
    /// indices past the returned count are left to the caller, who still owns them.
    #[inline]
    pub unsafe fn extend_from_raw(&mut self, cache: &PoolCache, indices: &[u32]) -> (usize, u64) {
        let Some(room) = self.indices.get_mut(self.len..) else { return (0, 0) };
        let n = indices.len().min(room.len());
        // SAFETY: the caller's contract, for the first `n` indices.
        let bytes = unsafe { cache.packets_from_raw(&mut room[..n], &indices[..n]) };
        self.len += n;
        (n, bytes)
    }

    /// The room after the batch's indices, for a device to receive indices into before it
    /// [`commit`](Self::commit)s them.
    #[inline]
    pub(crate) fn room_mut(&mut self) -> &mut [u32] {
        self.indices.get_mut(self.len..).unwrap_or_default()
    }

    /// Appends the first `n` indices of [`room_mut`](Self::room_mut) (at most its length).
    ///
    /// # Safety
    ///
    /// As [`extend_from_raw`](Self::extend_from_raw) for each of them.
    #[inline]
    pub(crate) unsafe fn commit(&mut self, n: usize) {
        self.len += n.min(self.remaining());
    }

    /// Marks every index as taken: the caller owns their buffers now.
    ///
    /// # Safety
    ///
    /// The caller has taken over every index of [`as_slice`](Self::as_slice) (staged it for a channel,
    /// or for [`PoolCache::free_burst`]), exactly once each: otherwise the buffers leak.
    #[inline]
    pub(crate) unsafe fn forget_all(&mut self) {
        self.len = 0;
    }
}

/// Where a device's receive loop puts the frames it hands over: a [`PacketBatch`] (as packets) or a
/// [`RawBatch`] (as indices). A driver writes its receive loop once, generic over the sink, and
/// implements both [`NetDevice::rx_burst`](super::NetDevice::rx_burst) and
/// [`NetDevice::rx_burst_raw`](super::NetDevice::rx_burst_raw) with it.
pub trait RxSink<'c> {
    /// Room left.
    fn remaining(&self) -> usize;

    /// As [`PacketBatch::extend_received_with`]: appends up to `max` frames (no more than there is
    /// room for) that `next(i)` produces one at a time, `None` to stop, each with its data at the
    /// pool's headroom and the given length; returns how many it appended and the sum of their
    /// lengths.
    ///
    /// # Safety
    ///
    /// As [`PacketBatch::extend_received_with`] for each frame `next` returns: it names a buffer of
    /// `cache`'s pool that the caller owns (and gives up) and no packet exists for, and no index is
    /// returned twice.
    unsafe fn extend_received_with(
        &mut self,
        cache: &'c PoolCache,
        max: usize,
        next: impl FnMut(usize) -> Option<RxFrame>,
    ) -> (usize, u64);
}

impl<'c> RxSink<'c> for PacketBatch<'c> {
    #[inline(always)]
    fn remaining(&self) -> usize {
        PacketBatch::remaining(self)
    }

    #[inline(always)]
    unsafe fn extend_received_with(
        &mut self,
        cache: &'c PoolCache,
        max: usize,
        next: impl FnMut(usize) -> Option<RxFrame>,
    ) -> (usize, u64) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { PacketBatch::extend_received_with(self, cache, max, next) }
    }
}

impl<'c> RxSink<'c> for RawBatch {
    #[inline(always)]
    fn remaining(&self) -> usize {
        RawBatch::remaining(self)
    }

    #[inline(always)]
    unsafe fn extend_received_with(
        &mut self,
        cache: &'c PoolCache,
        max: usize,
        next: impl FnMut(usize) -> Option<RxFrame>,
    ) -> (usize, u64) {
        let Some(room) = self.indices.get_mut(self.len..) else { return (0, 0) };
        let n = max.min(room.len());
        // SAFETY: the caller's contract, for each frame `next` returns.
        let (written, bytes) = unsafe { cache.packets_from_received_with(&mut room[..n], next) };
        self.len += written;
        (written, bytes)
    }
}
