//! Application data sent by reference from pool buffers.
//!
//! The application fills buffers of the device's pool (netchannel's
//! [`PoolCache::alloc`](netchannel::pool::PoolCache::alloc), one segment's payload each, behind
//! the pool's headroom), shares them ([`Packet::into_shared`](netchannel::pool::Packet::into_shared))
//! and queues them on a connection with
//! [`Stack::send_pooled`](crate::stack::Stack::send_pooled) (or
//! [`Connection::send_pooled`](super::Connection::send_pooled)). The connection holds each
//! [`SharedPacket`] in its send stream until its bytes are acknowledged: the buffer *is* the
//! retransmit queue for its bytes. A segment whose payload is exactly one such buffer goes to the
//! device by reference: the stack writes the Ethernet, IP and TCP headers into the buffer's
//! headroom ([`SharedPacket::frame`]) and hands the frame over, the same machinery that sends
//! [`PreparedSegments::in_pool`](super::PreparedSegments::in_pool) content, reference counts and
//! all. The buffer goes back to the pool when its last reference is gone: acknowledged (the
//! connection's handle dropped) and the device done with the frame (dropped, or freed by the
//! driver on TX completion), whichever comes last.
//!
//! Each buffer is a segment of its own: segments are cut at buffer boundaries. With the stack's
//! software segmentation ([`Config::gso_max_size`](crate::stack::Config::gso_max_size)), consecutive
//! whole buffers of one segment each go as one decision of the connection, a
//! [`PooledRun`]: the stack sends each buffer as a frame of its own, by reference, the
//! headers of each middle frame copied from the frame before but for the fields that differ. A segment that
//! covers only part of a buffer (the buffer holds more than the MSS, the peer's window or
//! congestion window cut it, an ACK acknowledged part of it, PMTU discovery lowered the MSS
//! before a retransmission) is copied into a fresh buffer, and so is a whole buffer whose frame
//! is still in flight (a retransmission before the device let the first frame go) or lacks
//! headroom; [`StackStats::tx_pool_split`](crate::stack::StackStats::tx_pool_split) and
//! [`StackStats::tx_pool_busy`](crate::stack::StackStats::tx_pool_busy) count them. Fill each
//! buffer with at most [`Stack::send_mss`](crate::stack::Stack::send_mss) bytes.

use std::collections::vec_deque;

use netchannel::pool::SharedPacket;

use super::prepared::PreparedSlice;
use super::send_stream::Piece;

/// A range of a pool buffer's data that a connection emits as one segment's payload (from
/// [`Connection::poll_transmit_lent`](super::Connection::poll_transmit_lent)), borrowed from the
/// connection's send stream (no reference count taken: the buffer's state word is shared with
/// the core that releases its frames, and each atomic on it costs a cache-line transfer).
#[derive(Clone, Copy, Debug)]
pub struct PooledSlice<'a> {
    /// The buffer.
    pub buffer: &'a SharedPacket,
    /// The first byte, an offset into the buffer's [data](SharedPacket::data).
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

impl<'a> PooledSlice<'a> {
    /// The payload bytes.
    #[must_use]
    pub fn bytes(&self) -> &'a [u8] {
        &self.buffer.data()[self.offset..self.offset + self.len]
    }

    /// Whether the range is the buffer's whole data, so that a frame of the buffer carries it.
    #[must_use]
    pub fn is_whole(&self) -> bool {
        self.offset == 0 && self.len == self.buffer.len()
    }
}

/// Consecutive pool buffers of the send stream that a super-segment's payload is, each the whole
/// of one segment (the stack's software segmentation, see
/// [`Lent::PooledRun`]): borrowed from the send stream as [`PooledSlice`]s are.
#[derive(Clone, Debug)]
pub struct PooledRun<'a> {
    /// The send stream's pieces of the run, every one a whole pool buffer.
    pub(super) pieces: vec_deque::Iter<'a, Piece>,
    /// Their bytes.
    pub(super) len: usize,
}

impl<'a> PooledRun<'a> {
    /// The buffers, in stream order, each a [whole](PooledSlice::is_whole) slice.
    pub fn slices(&self) -> impl Iterator<Item = PooledSlice<'a>> + 'a {
        self.pieces.clone().filter_map(Piece::pooled)
    }

    /// The number of buffers.
    #[must_use]
    pub fn count(&self) -> usize {
        self.pieces.len()
    }

    /// Bytes, all buffers together.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// No bytes (never lent: a run has at least two buffers).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A segment's payload lent instead of copied: prepared content, a pool buffer, a run of them, or
/// a run of the send ring.
#[derive(Clone, Debug)]
pub enum Lent<'a> {
    /// Prepared content ([`Connection::send_prepared`](super::Connection::send_prepared)).
    Prepared(PreparedSlice),
    /// Application data in a pool buffer ([`Connection::send_pooled`](super::Connection::send_pooled)).
    Pooled(PooledSlice<'a>),
    /// A super-segment whose payload is consecutive whole pool buffers of one segment each, lent
    /// only to the stack's own software segmentation (which sends each buffer as a frame of its
    /// own, by reference): it has no contiguous bytes ([`bytes`](Self::bytes) is empty).
    PooledRun(PooledRun<'a>),
    /// Bytes of the send ring ([`Connection::send`](super::Connection::send),
    /// [`Connection::send_with`](super::Connection::send_with)), at least 512 of them in one run
    /// of its storage: the caller copies them into the frame once, where they would otherwise go
    /// through its buffer first.
    Ring(&'a [u8]),
}

impl Lent<'_> {
    /// The payload bytes (none for a [`PooledRun`](Self::PooledRun), whose bytes lie in its
    /// buffers).
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::Prepared(p) => p.bytes(),
            Self::Pooled(p) => p.bytes(),
            Self::Ring(b) => b,
            Self::PooledRun(_) => &[],
        }
    }

    /// Bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Self::Prepared(p) => p.len,
            Self::Pooled(p) => p.len,
            Self::Ring(b) => b.len(),
            Self::PooledRun(r) => r.len,
        }
    }

    /// No bytes (never lent: a lent payload has at least one).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The precomputed payload sum, when the payload is a prepared cut.
    #[must_use]
    pub fn sum(&self) -> Option<u16> {
        match self {
            Self::Prepared(p) => p.sum(),
            Self::Pooled(_) | Self::Ring(_) | Self::PooledRun(_) => None,
        }
    }
}
