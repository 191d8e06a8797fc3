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
//! [`PooledRun`](super::PooledRun): the stack sends each buffer as a frame of its own, by reference, the
//! headers of each middle frame copied from the frame before but for the fields that differ. A segment that
//! covers only part of a buffer (the buffer holds more than the MSS, the peer's window or
//! congestion window cut it, an ACK acknowledged part of it, PMTU discovery lowered the MSS
//! before a retransmission) is copied into a fresh buffer, and so is a whole buffer whose frame
//! is still in flight (a retransmission before the device let the first frame go) or lacks
//! headroom; [`StackStats::tx_pool_split`](crate::stack::StackStats::tx_pool_split) and
//! [`StackStats::tx_pool_busy`](crate::stack::StackStats::tx_pool_busy) count them. Fill each
//! buffer with at most [`Stack::send_mss`](crate::stack::Stack::send_mss) bytes.

use netchannel::pool::SharedPacket;

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
