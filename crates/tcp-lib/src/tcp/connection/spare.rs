//! A finished connection's ring storage, kept by the stack for the next connection: a short
//! connection (a request and a response) then allocates nothing for its buffers. Only small
//! storage is kept ([`RETAINED_STORAGE`] per ring, see [`RingBuffer::release`]); a bulk
//! transfer's rings are freed as before.
//!
//! [`RingBuffer::release`]: crate::tcp::buffer::RingBuffer::release

use super::Connection;
#[cfg(doc)]
use crate::tcp::buffer::RETAINED_STORAGE;

/// The heap storage a finished connection leaves for the next one (see the
/// [module documentation](self)).
#[derive(Debug, Default)]
pub(crate) struct Spare {
    send: Vec<u8>,
    recv: Vec<u8>,
}

impl Spare {
    /// Bytes of storage it holds.
    pub(crate) fn bytes(&self) -> usize {
        self.send.capacity() + self.recv.capacity()
    }
}

impl Connection {
    /// The storage this connection leaves (its rings' storage, emptied, their charges refunded):
    /// for a connection the stack is discarding (and drops where it lies).
    pub(crate) fn take_spare(&mut self) -> Spare {
        Spare { send: self.snd.stream.take_storage(), recv: self.rcv.buf.take_storage() }
    }

    /// Gives this connection's rings, which must not have storage yet (a new connection), the
    /// storage of a finished one.
    pub(crate) fn adopt(&mut self, spare: Spare) {
        self.snd.stream.give_storage(spare.send);
        self.rcv.buf.give_storage(spare.recv);
    }
}
