//! [`SendStream`]: what a connection has queued to send and not yet had acknowledged, from
//! SND.UNA (or the byte after our SYN) on. Bytes the application copied in with
//! [`Connection::send`](super::Connection::send), or wrote straight into the ring's free space with
//! [`Connection::send_with`](super::Connection::send_with), sit in a ring buffer, which is also the
//! retransmit queue: each segment reads its payload from there; content queued by
//! reference with [`Connection::send_prepared`](super::Connection::send_prepared) stays in its
//! [`PreparedSegments`] and is only read (or, in lending mode, lent as a [`PreparedSlice`]) when
//! a segment is cut from it. Once prepared content was queued the stream is a list of pieces:
//! runs of ring bytes and runs of prepared content, in stream order.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use super::budget::{BufferBudget, Side};
use super::buffer::RingBuffer;
use super::prepared::{PreparedSegments, PreparedSlice};

/// The most pieces (runs of ring bytes and prepared contents) the send stream holds once prepared
/// content was queued: [`Connection::send_prepared`](super::Connection::send_prepared) refuses
/// more.
const MAX_SEND_PIECES: usize = 64;

/// A run of the send stream, once prepared content was queued (see
/// [`Connection::send_prepared`](super::Connection::send_prepared)).
enum Piece {
    /// This many bytes of the send ring.
    Ring(usize),
    /// `len` bytes of prepared content from offset `start`, held by reference.
    Prepared { segments: Arc<PreparedSegments>, start: usize, len: usize },
}

impl Piece {
    fn len(&self) -> usize {
        match self {
            Self::Ring(len) | Self::Prepared { len, .. } => *len,
        }
    }
}

impl fmt::Debug for Piece {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ring(len) => write!(f, "Ring({len})"),
            Self::Prepared { segments, start, len } => {
                write!(f, "Prepared {{ of: {}, start: {start}, len: {len} }}", segments.len())
            }
        }
    }
}

/// The send stream of a connection (see the [module documentation](self)).
#[derive(Debug)]
pub(super) struct SendStream {
    /// Bytes from the first unacknowledged data byte on (all of them while `pieces` is
    /// empty; else the runs of `Piece::Ring`).
    buf: RingBuffer,
    /// The send stream as runs of ring bytes and prepared content, once prepared content was
    /// queued; empty otherwise (then the ring holds the whole stream).
    pieces: VecDeque<Piece>,
    /// Bytes of prepared content in `pieces`.
    prepared_len: usize,
    /// `poll_transmit_prepared` is running: payload in prepared content is lent, not copied.
    lend: bool,
    /// The payload lent by the last read in lending mode.
    lent: Option<PreparedSlice>,
}

impl SendStream {
    /// An empty stream whose ring holds at most `capacity` bytes.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            buf: RingBuffer::new(capacity),
            pieces: VecDeque::new(),
            prepared_len: 0,
            lend: false,
            lent: None,
        }
    }

    /// Gives the ring, if it has no storage yet, a finished stream's (see
    /// [`RingBuffer::give_storage`]).
    pub(super) fn give_storage(&mut self, storage: Vec<u8>) {
        self.buf.give_storage(storage);
    }

    /// The ring's storage (emptied), for another stream; this one is left without any.
    pub(super) fn take_storage(&mut self) -> Vec<u8> {
        self.buf.take_storage()
    }

    /// Lets the ring hold `capacity` bytes (never fewer than it holds now).
    pub(super) fn set_capacity(&mut self, capacity: usize) {
        self.buf.set_capacity(capacity);
    }

    /// Free space in the ring: how many bytes [`push`](Self::push) accepts now.
    pub(super) fn free(&self) -> usize {
        self.buf.free()
    }

    /// Bytes of storage the ring holds now (tests check it is released).
    #[cfg(test)]
    pub(super) fn allocated(&self) -> usize {
        self.buf.allocated()
    }

    /// Whether prepared content was queued (the stream is kept as pieces).
    pub(super) fn has_pieces(&self) -> bool {
        !self.pieces.is_empty()
    }

    /// Charges the ring's storage to `budget`.
    pub(super) fn set_budget(&mut self, budget: &Arc<BufferBudget>) {
        self.buf.set_budget(budget, Side::Tx);
    }

    /// Copies bytes into the ring at the end of the stream; returns how many fit (fewer than the
    /// free space when the ring's budget refuses it storage).
    pub(super) fn push(&mut self, data: &[u8]) -> usize {
        self.unclamp();
        let n = self.buf.enqueue_slice(data);
        self.appended(n);
        n
    }

    /// Lets the application write up to `max` bytes straight into the ring's free space:
    /// `write` gets the free space as a slice, writes its bytes at the front and returns how many
    /// (more than the slice's length counts as all of it); when the free space wraps and the first
    /// slice was filled, `write` is called once more with the rest. The bytes written are appended
    /// to the stream, without a copy of their own. Returns `None` (and
    /// `write` is not called) when the ring has no free space to offer, else the bytes appended.
    pub(super) fn push_with(
        &mut self,
        max: usize,
        mut write: impl FnMut(&mut [u8]) -> usize,
    ) -> Option<usize> {
        self.unclamp();
        let (first, second) = self.buf.free_slices(max);
        if first.is_empty() {
            return None;
        }
        let (len, more) = (first.len(), !second.is_empty());
        let mut n = write(first).min(len);
        if n == len && more {
            let len = second.len();
            n += write(second).min(len);
        }
        self.buf.enqueue_unallocated(n);
        self.appended(n);
        Some(n)
    }

    /// A clamped ring whose bytes were all acknowledged may ask its budget for storage again.
    fn unclamp(&mut self) {
        if self.buf.is_clamped() {
            self.buf.unclamp();
        }
    }

    /// Records `n` bytes just appended to the ring in the piece list, if the stream is kept as
    /// pieces.
    fn appended(&mut self, n: usize) {
        if n > 0 && !self.pieces.is_empty() {
            match self.pieces.back_mut() {
                Some(Piece::Ring(len)) => *len += n,
                _ => self.pieces.push_back(Piece::Ring(n)),
            }
        }
    }

    /// Queues prepared content at the end of the stream, by reference; false (nothing queued)
    /// when [`MAX_SEND_PIECES`] pieces are already queued.
    pub(super) fn push_prepared(&mut self, segments: &Arc<PreparedSegments>) -> bool {
        if self.pieces.len() >= MAX_SEND_PIECES {
            return false;
        }
        if segments.is_empty() {
            return true;
        }
        if self.pieces.is_empty() && !self.buf.is_empty() {
            self.pieces.push_back(Piece::Ring(self.buf.len()));
        }
        let len = segments.len();
        self.pieces.push_back(Piece::Prepared { segments: Arc::clone(segments), start: 0, len });
        self.prepared_len += len;
        true
    }

    /// Bytes of the send stream from the first unacknowledged data byte on.
    pub(super) fn len(&self) -> usize {
        self.buf.len() + self.prepared_len
    }

    /// Drops `n` acknowledged bytes from the front of the send stream.
    pub(super) fn dequeue(&mut self, mut n: usize) {
        while n > 0
            && let Some(front) = self.pieces.front_mut()
        {
            let k = n.min(front.len());
            match front {
                Piece::Ring(len) => {
                    self.buf.dequeue_allocated(k);
                    *len -= k;
                }
                Piece::Prepared { start, len, .. } => {
                    *start += k;
                    *len -= k;
                    self.prepared_len -= k;
                }
            }
            n -= k;
            if front.len() == 0 {
                self.pieces.pop_front();
            }
        }
        if self.pieces.is_empty() {
            self.buf.dequeue_allocated(n);
        }
    }

    /// The piece holding stream offset `offset`: its index, the offset of its first byte, and the
    /// ring offset of its first byte (the ring bytes of the pieces before it).
    fn piece_at(&self, offset: usize) -> Option<(usize, usize, usize)> {
        let (mut pos, mut ring) = (0, 0);
        for (i, p) in self.pieces.iter().enumerate() {
            let len = p.len();
            if offset < pos + len {
                return Some((i, pos, ring));
            }
            pos += len;
            if let Piece::Ring(_) = p {
                ring += len;
            }
        }
        None
    }

    /// Reads the send stream from `offset` into `buf` without removing it; returns how many bytes.
    /// In lending mode, a read starting in prepared content lends it instead (`self.lent`, up to
    /// the end of its piece; `buf` untouched).
    pub(super) fn read(&mut self, offset: usize, buf: &mut [u8]) -> usize {
        if self.pieces.is_empty() {
            return self.buf.read_allocated(offset, buf);
        }
        let Some((idx, pos, mut ring)) = self.piece_at(offset) else { return 0 };
        let mut within = offset - pos;
        if self.lend
            && let Piece::Prepared { segments, start, len } = &self.pieces[idx]
        {
            let n = buf.len().min(len - within);
            if n > 0 {
                self.lent =
                    Some(PreparedSlice { segments: Arc::clone(segments), offset: start + within, len: n });
            }
            return n;
        }
        let mut copied = 0;
        for p in self.pieces.iter().skip(idx) {
            if copied == buf.len() {
                break;
            }
            let k = (buf.len() - copied).min(p.len() - within);
            match p {
                Piece::Ring(len) => {
                    self.buf.read_allocated(ring + within, &mut buf[copied..copied + k]);
                    ring += len;
                }
                Piece::Prepared { segments, start, .. } => {
                    let from = start + within;
                    buf[copied..copied + k].copy_from_slice(&segments.data()[from..from + k]);
                }
            }
            copied += k;
            within = 0;
        }
        copied
    }

    /// Where a segment starting at stream offset `offset` should end early so that prepared
    /// content is emitted in its own segments, aligned to its cuts of `mss` bytes: at most this
    /// many bytes (`None`: no limit).
    pub(super) fn prepared_limit(&self, offset: usize, mss: usize) -> Option<usize> {
        let (idx, pos, _) = self.piece_at(offset)?;
        let within = offset - pos;
        match &self.pieces[idx] {
            Piece::Prepared { segments, start, len } => {
                let at = start + within;
                Some((len - within).min(segments.next_boundary(at, mss) - at))
            }
            // Ring bytes before prepared content end their segment where it starts.
            Piece::Ring(len) if idx + 1 < self.pieces.len() => Some(len - within),
            Piece::Ring(_) => None,
        }
    }

    /// Enters lending mode (for `poll_transmit_prepared`): reads starting in prepared content
    /// lend it instead of copying it.
    pub(super) fn start_lending(&mut self) {
        self.lend = true;
        self.lent = None;
    }

    /// Leaves lending mode; returns the payload lent by the last read, if any.
    pub(super) fn stop_lending(&mut self) -> Option<PreparedSlice> {
        self.lend = false;
        self.lent.take()
    }

    /// Frees the heap storage of a stream that carries no more data (see
    /// `Connection::release_storage`): the ring, and the piece list once empty.
    pub(super) fn release(&mut self) {
        self.buf.release();
        if self.pieces.is_empty() {
            self.pieces = VecDeque::new();
        }
    }
}
