//! [`SendStream`]: what a connection has queued to send and not yet had acknowledged, from
//! SND.UNA (or the byte after our SYN) on. Bytes the application copied in with
//! [`Connection::send`](super::Connection::send), or wrote straight into the ring's free space with
//! [`Connection::send_with`](super::Connection::send_with), sit in a ring buffer, which is also the
//! retransmit queue: each segment reads its payload from there; content queued by
//! reference with [`Connection::send_prepared`](super::Connection::send_prepared) stays in its
//! [`PreparedSegments`] and is only read (or, in lending mode, lent as a [`PreparedSlice`]) when
//! a segment is cut from it. Application data in pool buffers, queued by reference with
//! [`Connection::send_pooled`](super::Connection::send_pooled), stays in its buffer (a
//! [`SharedPacket`]) until acknowledged, and is lent as a [`PooledSlice`] the same way. Once
//! either was queued the stream is a list of pieces: runs of ring bytes, runs of prepared content
//! and pool buffers, in stream order. A lookup cursor remembers the last piece found, so a
//! stream of many pool buffers finds the next segment's piece without walking from the front.

use std::cell::Cell;
use std::collections::{VecDeque, vec_deque};
use std::fmt;
use std::sync::Arc;

use netchannel::pool::{PoolCache, SharedPacket};

use super::budget::{BufferBudget, Side};
use super::buffer::RingBuffer;
use super::prepared::{PreparedSegments, PreparedSlice};
use super::send_ref::PooledSlice;

/// What a read in lending mode lent: prepared content, or the range of the pool buffer of piece
/// `piece` (borrowed when lending ends, see [`SendStream::stop_lending`]).
#[derive(Debug)]
enum Lending {
    Prepared(PreparedSlice),
    Pooled {
        piece: usize,
        offset: usize,
        len: usize,
    },
    /// `len` bytes of the ring from `offset`, in one run of its storage.
    Ring {
        offset: usize,
        len: usize,
    },
    /// Pieces `first..first + count`, whole pool buffers, `len` bytes in all.
    PooledRun {
        first: usize,
        count: usize,
        len: usize,
    },
}

/// The fewest ring bytes a read in lending mode lends: below it, copying them through the
/// caller's buffer costs less than the lent path's separate header and payload sums.
const MIN_RING_LEND: usize = 512;

/// The most pieces other than pool buffers (runs of ring bytes and prepared contents) the send
/// stream holds once prepared content was queued:
/// [`Connection::send_prepared`](super::Connection::send_prepared) refuses more.
const MAX_SEND_PIECES: usize = 64;

/// The most pool buffers the send stream holds
/// ([`Connection::send_pooled`](super::Connection::send_pooled) refuses more, whatever their
/// bytes): a 1 MiB send buffer of 1448-byte buffers is 725.
pub(super) const MAX_POOLED_PIECES: usize = 4096;

/// The most acknowledged pool buffers kept for [`SendStream::recycle`]; more are dropped at once
/// (back to the pool's shared free list).
const MAX_ACKED: usize = 256;

/// A run of the send stream, once prepared content was queued (see
/// [`Connection::send_prepared`](super::Connection::send_prepared)).
enum Piece {
    /// This many bytes of the send ring.
    Ring(usize),
    /// `len` bytes of prepared content from offset `start`, held by reference.
    Prepared { segments: Arc<PreparedSegments>, start: usize, len: usize },
    /// `len` bytes of a pool buffer's data from offset `start`, held by reference.
    Pooled { buffer: SharedPacket, start: usize, len: usize },
}

impl Piece {
    fn len(&self) -> usize {
        match self {
            Self::Ring(len) | Self::Prepared { len, .. } | Self::Pooled { len, .. } => *len,
        }
    }

    /// A pool buffer's bytes in the stream, as a slice of the buffer.
    fn pooled(&self) -> Option<PooledSlice<'_>> {
        match self {
            Self::Pooled { buffer, start, len } => Some(PooledSlice { buffer, offset: *start, len: *len }),
            _ => None,
        }
    }

    /// A pool buffer whose bytes in the stream are all of its data (none acknowledged yet) and
    /// at most `seg` of them: a frame of the buffer is a segment.
    fn whole_segment(&self, seg: usize) -> Option<usize> {
        self.pooled().filter(|p| p.is_whole() && p.len <= seg).map(|p| p.len)
    }
}

impl fmt::Debug for Piece {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ring(len) => write!(f, "Ring({len})"),
            Self::Prepared { segments, start, len } => {
                write!(f, "Prepared {{ of: {}, start: {start}, len: {len} }}", segments.len())
            }
            Self::Pooled { buffer, start, len } => {
                write!(f, "Pooled {{ buffer: {}, start: {start}, len: {len} }}", buffer.index())
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
    /// Bytes of prepared content and pool buffers in `pieces` (the bytes outside the ring).
    prepared_len: usize,
    /// Pool buffers in `pieces`.
    pooled: usize,
    /// Pool buffers acknowledged since the last [`Self::recycle`] (at most [`MAX_ACKED`]): the
    /// stack gives them back to its own pool cache, the cheap way, when it next drains the
    /// connection.
    acked: Vec<SharedPacket>,
    /// Where the last lookup found its piece: `(index, stream offset, ring offset)` of a piece's
    /// first byte, a place to start the next lookup from (see [`Self::piece_at`]).
    cursor: Cell<(usize, usize, usize)>,
    /// `poll_transmit_lent` is running: payload in prepared content or pool buffers is lent, not
    /// copied.
    lend: bool,
    /// The payload lent by the last read in lending mode.
    lent: Option<Lending>,
}

impl SendStream {
    /// An empty stream whose ring holds at most `capacity` bytes.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            buf: RingBuffer::new(capacity),
            pieces: VecDeque::new(),
            prepared_len: 0,
            pooled: 0,
            acked: Vec::new(),
            cursor: Cell::new((0, 0, 0)),
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

    /// In lending mode, with only ring bytes queued: how many bytes from stream offset `offset`
    /// lie in one run of the ring's storage, the most a read from there lends (a longer one
    /// wraps and is copied). `None` otherwise.
    pub(super) fn ring_run(&self, offset: usize) -> Option<usize> {
        (self.lend && self.pieces.is_empty()).then(|| self.buf.run_from(offset))
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
        if self.pieces.len() - self.pooled >= MAX_SEND_PIECES {
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

    /// Queues the data of a pool buffer at the end of the stream, by reference; the buffer comes
    /// back (nothing queued) when [`MAX_POOLED_PIECES`] buffers are already queued.
    pub(super) fn push_pooled(&mut self, buffer: SharedPacket) -> Result<(), SharedPacket> {
        if self.pooled >= MAX_POOLED_PIECES {
            return Err(buffer);
        }
        let len = buffer.len();
        if len == 0 {
            return Ok(());
        }
        if self.pieces.is_empty() && !self.buf.is_empty() {
            self.pieces.push_back(Piece::Ring(self.buf.len()));
        }
        self.pieces.push_back(Piece::Pooled { buffer, start: 0, len });
        self.prepared_len += len;
        self.pooled += 1;
        Ok(())
    }

    /// The ring's capacity.
    pub(super) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Whether [`push_pooled`](Self::push_pooled) takes another buffer (fewer than
    /// [`MAX_POOLED_PIECES`] are queued).
    pub(super) fn pooled_room(&self) -> bool {
        self.pooled < MAX_POOLED_PIECES
    }

    /// Gives the acknowledged pool buffers back to `cache` (its local free list, no lock) when
    /// nothing else holds them. One whose frame the device still holds stays for a later call
    /// (so that this core, not the device's, frees it: the device then only drops its frame's
    /// reference); one of another pool, or with a handle left elsewhere, is dropped, to go back
    /// when its last reference goes.
    #[inline]
    pub(super) fn recycle(&mut self, cache: &PoolCache) {
        if !self.acked.is_empty() {
            self.recycle_some(cache);
        }
    }

    #[cold]
    #[inline(never)]
    fn recycle_some(&mut self, cache: &PoolCache) {
        let mut i = 0;
        while let Some(buffer) = self.acked.get(i) {
            if buffer.frame_in_flight() && buffer.pool_id() == cache.pool().id() {
                i += 1;
                continue;
            }
            // Dropped either way: a packet of `cache` goes to its free list.
            let _ = self.acked.swap_remove(i).try_into_packet(cache);
        }
    }

    /// Bytes of the send stream from the first unacknowledged data byte on.
    pub(super) fn len(&self) -> usize {
        self.buf.len() + self.prepared_len
    }

    /// Drops `n` acknowledged bytes from the front of the send stream. A ring left empty starts
    /// again at the front of its storage (ring offsets are from its head: the pieces and the
    /// cursor keep their meaning).
    pub(super) fn dequeue(&mut self, n: usize) {
        self.dequeue_pieces(n);
        self.buf.rewind();
    }

    fn dequeue_pieces(&mut self, mut n: usize) {
        if self.pieces.is_empty() {
            self.buf.dequeue_allocated(n);
            return;
        }
        let (total, mut ring, mut popped) = (n, 0, 0);
        while n > 0
            && let Some(front) = self.pieces.front_mut()
        {
            let k = n.min(front.len());
            match front {
                Piece::Ring(len) => {
                    self.buf.dequeue_allocated(k);
                    *len -= k;
                    ring += k;
                }
                Piece::Prepared { start, len, .. } | Piece::Pooled { start, len, .. } => {
                    *start += k;
                    *len -= k;
                    self.prepared_len -= k;
                }
            }
            n -= k;
            if front.len() == 0 {
                if let Some(Piece::Pooled { buffer, .. }) = self.pieces.pop_front() {
                    self.pooled -= 1;
                    // Past the bound (a device holding many frames), dropped at once.
                    if self.acked.len() < MAX_ACKED {
                        self.acked.push(buffer);
                    }
                }
                popped += 1;
            }
        }
        // The cursor's piece keeps its place when it lies wholly after the bytes dropped.
        let (i, pos, r) = self.cursor.get();
        let kept = pos >= total - n && i >= popped;
        self.cursor.set(if kept { (i - popped, pos - (total - n), r - ring) } else { (0, 0, 0) });
        if self.pieces.is_empty() {
            self.buf.dequeue_allocated(n);
        }
    }

    /// The piece holding stream offset `offset`: its index, the offset of its first byte, and the
    /// ring offset of its first byte (the ring bytes of the pieces before it).
    /// The walk starts at the cursor (the piece the last lookup found) when `offset` lies at or
    /// after it, as the next segment's does, and from the front otherwise (a retransmission).
    fn piece_at(&self, offset: usize) -> Option<(usize, usize, usize)> {
        let (mut i, mut pos, mut ring) = match self.cursor.get() {
            c @ (i, pos, _) if i < self.pieces.len() && pos <= offset => c,
            _ => (0, 0, 0),
        };
        while let Some(p) = self.pieces.get(i) {
            let len = p.len();
            if offset < pos + len {
                self.cursor.set((i, pos, ring));
                return Some((i, pos, ring));
            }
            pos += len;
            if let Piece::Ring(_) = p {
                ring += len;
            }
            i += 1;
        }
        None
    }

    /// Reads the send stream from `offset` into `buf` without removing it; returns how many bytes.
    /// In lending mode, a read starting in prepared content or a pool buffer lends it instead
    /// (`self.lent`, up to the end of its piece; `buf` untouched), and so does a read of at least
    /// [`MIN_RING_LEND`] ring bytes that lie in one run of the ring's storage (the read that
    /// crosses the storage's end, once per lap, is copied).
    pub(super) fn read(&mut self, offset: usize, buf: &mut [u8]) -> usize {
        if self.pieces.is_empty() {
            if self.lend {
                let n = buf.len().min(self.buf.len().saturating_sub(offset));
                if self.lend_ring(offset, n) {
                    return n;
                }
            }
            return self.buf.read_allocated(offset, buf);
        }
        let Some((idx, pos, mut ring)) = self.piece_at(offset) else { return 0 };
        let mut within = offset - pos;
        if self.lend {
            let n = buf.len().min(self.pieces[idx].len() - within);
            if matches!(self.pieces[idx], Piece::Ring(_)) && self.lend_ring(ring + within, n) {
                return n;
            }
            match &self.pieces[idx] {
                Piece::Prepared { segments, start, .. } if n > 0 => {
                    let offset = start + within;
                    self.lent = Some(Lending::Prepared(PreparedSlice {
                        segments: Arc::clone(segments),
                        offset,
                        len: n,
                    }));
                    return n;
                }
                Piece::Pooled { start, .. } if n > 0 => {
                    // A read longer than its buffer, from its start, is a run of whole buffers
                    // (`pooled_run` sized it).
                    if buf.len() > n
                        && within == 0
                        && let Some(count) = self.whole_buffers(idx, buf.len())
                    {
                        self.lent = Some(Lending::PooledRun { first: idx, count, len: buf.len() });
                        return buf.len();
                    }
                    let offset = start + within;
                    self.lent = Some(Lending::Pooled { piece: idx, offset, len: n });
                    return n;
                }
                Piece::Ring(_) => {}
                _ => return n,
            }
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
                Piece::Pooled { buffer, start, .. } => {
                    let from = start + within;
                    buf[copied..copied + k].copy_from_slice(&buffer.data()[from..from + k]);
                }
            }
            copied += k;
            within = 0;
        }
        copied
    }

    /// In lending mode, lends `n` bytes of the ring from ring offset `offset` when they are at
    /// least [`MIN_RING_LEND`] and lie in one run of its storage; returns whether it did.
    #[inline]
    fn lend_ring(&mut self, offset: usize, n: usize) -> bool {
        let lend = n >= MIN_RING_LEND && self.buf.allocated_run(offset, n).is_some();
        if lend {
            self.lent = Some(Lending::Ring { offset, len: n });
        }
        lend
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
            // A pool buffer goes in a segment of its own, whatever the segment size: one frame
            // of it by reference (or, when the segment must be shorter, a copy of a part).
            Piece::Pooled { len, .. } => Some(len - within),
            // Ring bytes before prepared content end their segment where it starts.
            Piece::Ring(len) if idx + 1 < self.pieces.len() => Some(len - within),
            Piece::Ring(_) => None,
        }
    }

    /// How far a super-segment from stream offset `offset` may go when its payload is to be
    /// consecutive whole pool buffers of at most `seg` bytes each (so that each is a frame of its
    /// own, by reference): their bytes, at most `max`, when at least two such buffers start
    /// there. Only the last may be shorter than `seg` (a shorter one ends the run), as the last
    /// segment of a super-segment cut in software. `None` otherwise.
    pub(super) fn pooled_run(&self, offset: usize, seg: usize, max: usize) -> Option<usize> {
        let (idx, pos, _) = self.piece_at(offset)?;
        if pos != offset {
            return None;
        }
        let (bytes, count) = self.whole_run(idx, seg, max);
        (count >= 2).then_some(bytes)
    }

    /// The run of whole pool buffers from piece `first` on, of at most `seg` bytes each and only
    /// the last shorter, at most `max` bytes in all: its bytes and its buffers.
    fn whole_run(&self, first: usize, seg: usize, max: usize) -> (usize, usize) {
        let (mut bytes, mut count) = (0, 0);
        for len in self.pieces.iter().skip(first).map_while(|p| p.whole_segment(seg)) {
            if bytes + len > max {
                break;
            }
            bytes += len;
            count += 1;
            if len < seg {
                break;
            }
        }
        (bytes, count)
    }

    /// The number of buffers of the run [`pooled_run`](Self::pooled_run) finds from piece
    /// `first` (its segment size the first buffer's) when they hold exactly `len` bytes.
    fn whole_buffers(&self, first: usize, len: usize) -> Option<usize> {
        let seg = self.pieces.get(first)?.whole_segment(usize::MAX)?;
        match self.whole_run(first, seg, len) {
            (bytes, count) if bytes == len && count >= 2 => Some(count),
            _ => None,
        }
    }

    /// Enters lending mode (for `poll_transmit_lent`): reads starting in prepared content, a
    /// pool buffer or a long enough run of the ring lend it instead of copying it (see
    /// [`read`](Self::read)).
    pub(super) fn start_lending(&mut self) {
        self.lend = true;
        self.lent = None;
    }

    /// Leaves lending mode; returns the payload lent by the last read, if any.
    #[inline]
    pub(super) fn stop_lending(&mut self) -> Option<Lent<'_>> {
        self.lend = false;
        match self.lent.take()? {
            Lending::Ring { offset, len } => self.buf.allocated_run(offset, len).map(Lent::Ring),
            Lending::Prepared(p) => Some(Lent::Prepared(p)),
            Lending::Pooled { piece, offset, len } => match self.pieces.get(piece) {
                Some(Piece::Pooled { buffer, .. }) => Some(Lent::Pooled(PooledSlice { buffer, offset, len })),
                // Unreachable: nothing changes the pieces between the read and here.
                _ => None,
            },
            Lending::PooledRun { first, count, len } => {
                let pieces = self.pieces.range(first..first + count);
                Some(Lent::PooledRun(PooledRun { pieces, len }))
            }
        }
    }

    /// Frees the heap storage of a stream that carries no more data (see
    /// `Connection::release_storage`): the ring, and the piece list once empty.
    pub(super) fn release(&mut self) {
        self.buf.release();
        if self.pieces.is_empty() {
            self.pieces = VecDeque::new();
            self.cursor.set((0, 0, 0));
        }
    }
}

/// Consecutive pool buffers of the send stream that a super-segment's payload is, each the whole
/// of one segment (the stack's software segmentation, see
/// [`Lent::PooledRun`]): borrowed from the send stream as [`PooledSlice`]s are.
#[derive(Clone, Debug)]
pub struct PooledRun<'a> {
    /// The send stream's pieces of the run, every one a whole pool buffer.
    pieces: vec_deque::Iter<'a, Piece>,
    /// Their bytes.
    len: usize,
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

#[cfg(test)]
mod tests {
    use netchannel::pool::{HugePages, Pool};

    use super::*;

    /// SplitMix64.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            usize::try_from((z ^ (z >> 31)) % n as u64).unwrap()
        }
    }

    /// Ring bytes, prepared content and pool buffers queued, read (forward, as new segments are,
    /// and back, as retransmissions are; lent and copied) and acknowledged at random: every read
    /// returns the model's bytes, whatever the lookup cursor remembered, and every buffer goes
    /// back to the pool.
    #[test]
    fn reads_match_a_model_through_pieces_and_the_cursor() {
        let pool = Pool::builder(4096).hugepages(HugePages::Never).build().unwrap();
        let cache = pool.cache();
        let mut rng = Rng(7);
        let mut s = SendStream::new(8192);
        let mut model: VecDeque<u8> = VecDeque::new();
        let mut next = 0u8;
        let mut fresh = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    next = next.wrapping_add(1);
                    next
                })
                .collect()
        };
        let mut forward = 0usize;
        let mut buf = vec![0u8; 3000];
        // Runs of whole pool buffers `pooled_run` found (each read and lent as a run below).
        let mut trains = 0;
        for _ in 0..20_000 {
            match rng.below(8) {
                0 => {
                    let data = fresh(1 + rng.below(2000));
                    let n = s.push(&data);
                    model.extend(&data[..n]);
                }
                1 | 2 => {
                    // Half of them one segment of 1448 bytes, as trains are made of.
                    let data = fresh(if rng.below(2) == 0 { 1448 } else { 1 + rng.below(2000) });
                    let mut p = cache.alloc().unwrap();
                    p.extend_from_slice(&data).unwrap();
                    if s.push_pooled(p.into_shared().unwrap()).is_ok() {
                        model.extend(&data);
                    }
                }
                3 if rng.below(8) == 0 => {
                    let data = fresh(1 + rng.below(5000));
                    if s.push_prepared(&Arc::new(PreparedSegments::new(data.clone(), &[1448]))) {
                        model.extend(&data);
                    }
                }
                4 => {
                    let n = rng.below(model.len() + 1).min(4000);
                    s.dequeue(n);
                    model.drain(..n);
                    forward = forward.saturating_sub(n);
                }
                _ => {
                    if model.is_empty() {
                        continue;
                    }
                    // Mostly the next segment, sometimes a retransmission from further back.
                    let at =
                        if rng.below(4) == 0 { rng.below(model.len()) } else { forward.min(model.len() - 1) };
                    let want = 1 + rng.below(buf.len());
                    let lend = rng.below(2) == 0;
                    if lend {
                        s.start_lending();
                    }
                    let n = s.read(at, &mut buf[..want]);
                    let got = match s.stop_lending() {
                        // A read that covers exactly two whole buffers or more.
                        Some(Lent::PooledRun(run)) => {
                            assert!(run.count() >= 2 && run.slices().all(|p| p.is_whole()));
                            run.slices().flat_map(|p| p.bytes().to_vec()).collect()
                        }
                        Some(lent) => lent.bytes().to_vec(),
                        None => buf[..n].to_vec(),
                    };
                    assert!(lend || s.lent.is_none());
                    assert_eq!(got.len(), n);
                    assert!(n > 0 && n <= want, "{n} of {want} at {at}");
                    let expected: Vec<u8> = model.iter().skip(at).take(n).copied().collect();
                    assert_eq!(got, expected, "at {at}, {n} bytes, lent: {lend}");
                    if let Some(limit) = s.prepared_limit(at, 1448) {
                        assert!(limit > 0 && at + limit <= model.len());
                    }
                    if let Some(run) = s.pooled_run(at, 1448, 3000) {
                        // Whole buffers from `at` on, of 1448 bytes but the last, together at
                        // most 3000 bytes: read so, they are lent as a run.
                        trains += 1;
                        assert!(run > 1448 && at + run <= model.len());
                        s.start_lending();
                        assert_eq!(s.read(at, &mut buf[..run]), run);
                        assert!(matches!(s.stop_lending(), Some(Lent::PooledRun(r)) if r.len() == run));
                    }
                    forward = at + n;
                }
            }
            assert_eq!(s.len(), model.len());
        }
        assert!(trains > 0, "runs of whole buffers were found and lent");
        drop(s);
        drop(cache);
        pool.check_leaks().unwrap();
    }

    /// A ring-only stream read in lending mode lends each read of at least [`MIN_RING_LEND`]
    /// bytes that lies in one run of the ring's storage and copies the rest (short reads, and the
    /// read across the storage's end); what is lent or copied is the model's bytes either way, and
    /// every case comes up.
    #[test]
    fn ring_runs_are_lent_and_the_rest_copied() {
        let mut rng = Rng(11);
        let mut s = SendStream::new(16 * 1024);
        let mut model: VecDeque<u8> = VecDeque::new();
        let mut next = 0u8;
        let mut buf = vec![0u8; 4000];
        let (mut lent, mut short, mut wrapped) = (0, 0, 0);
        for _ in 0..20_000 {
            if rng.below(3) == 0 {
                let data: Vec<u8> = (0..1 + rng.below(3000))
                    .map(|_| {
                        next = next.wrapping_add(1);
                        next
                    })
                    .collect();
                let n = s.push(&data);
                model.extend(&data[..n]);
            } else if rng.below(3) == 0 {
                let n = rng.below(model.len() + 1).min(3000);
                s.dequeue(n);
                model.drain(..n);
            }
            if model.is_empty() {
                continue;
            }
            let at = rng.below(model.len());
            let want = 1 + rng.below(buf.len());
            s.start_lending();
            let n = s.read(at, &mut buf[..want]);
            let got = match s.stop_lending() {
                Some(Lent::Ring(bytes)) => {
                    lent += 1;
                    assert!(bytes.len() >= MIN_RING_LEND, "{} bytes lent", bytes.len());
                    bytes.to_vec()
                }
                Some(other) => panic!("a ring-only stream lent {other:?}"),
                None => {
                    if n < MIN_RING_LEND {
                        short += 1;
                    } else {
                        wrapped += 1;
                    }
                    buf[..n].to_vec()
                }
            };
            assert_eq!(n, want.min(model.len() - at));
            let expected: Vec<u8> = model.iter().skip(at).take(n).copied().collect();
            assert_eq!(got, expected, "at {at}, {n} bytes");
        }
        assert!(lent > 1000 && short > 1000 && wrapped > 10, "lent {lent}, short {short}, wrapped {wrapped}");
    }

    /// `ring_run` says how much a lent read can take from an offset: a read of exactly that many
    /// bytes (when enough to lend) is lent whole, one byte more is not (when the run ends at the
    /// storage's end rather than at the last byte queued); outside lending mode it says nothing.
    #[test]
    fn ring_run_is_what_a_lent_read_can_take() {
        let mut rng = Rng(12);
        let mut s = SendStream::new(16 * 1024);
        let mut queued = 0usize;
        let mut buf = vec![0u8; 20 * 1024];
        let (mut whole, mut ends_early) = (0, 0);
        for _ in 0..5_000 {
            if rng.below(2) == 0 {
                queued += s.push(&vec![7; 1 + rng.below(6000)]);
            } else {
                let n = rng.below(queued + 1);
                s.dequeue(n);
                queued -= n;
            }
            if queued == 0 {
                continue;
            }
            let at = rng.below(queued);
            assert_eq!(s.ring_run(at), None, "not lending");
            s.start_lending();
            let run = s.ring_run(at).expect("lending a ring-only stream");
            assert!(run >= 1 && run <= queued - at);
            if run >= MIN_RING_LEND {
                assert_eq!(s.read(at, &mut buf[..run]), run);
                assert!(matches!(s.stop_lending(), Some(Lent::Ring(b)) if b.len() == run));
                whole += 1;
                s.start_lending();
            }
            if run < queued - at {
                assert_eq!(s.read(at, &mut buf[..run + 1]), run + 1);
                assert!(s.stop_lending().is_none(), "a read past the storage's end is copied");
                ends_early += 1;
            } else {
                s.stop_lending();
            }
        }
        assert!(whole > 1000 && ends_early > 100, "whole {whole}, ends early {ends_early}");
    }

    /// An acknowledged pool buffer goes back to the stack's own cache (not the pool's shared
    /// depot), but only once the device let its frame go: until then it is kept, so that the
    /// device's core only drops the frame's reference.
    #[test]
    fn acknowledged_buffers_go_back_to_the_cache_once_their_frame_is_done() {
        let pool = Pool::builder(64).hugepages(HugePages::Never).build().unwrap();
        let cache = pool.cache();
        let mut s = SendStream::new(8192);
        let mut p = cache.alloc().unwrap();
        p.extend_from_slice(&[5u8; 1000]).unwrap();
        let buffer = p.into_shared().unwrap();
        let frame = buffer.frame(&cache, 54).unwrap();
        s.push_pooled(buffer).unwrap();
        s.dequeue(1000);
        assert_eq!((s.len(), s.acked.len()), (0, 1));
        let before = pool.audit();
        s.recycle(&cache);
        assert_eq!(s.acked.len(), 1, "kept while its frame is in flight");
        drop(frame);
        s.recycle(&cache);
        assert!(s.acked.is_empty());
        let after = pool.audit();
        assert_eq!(after.in_caches, before.in_caches + 1, "{before:?} -> {after:?}");
        assert_eq!((after.in_depot, after.shared), (before.in_depot, 0), "{before:?} -> {after:?}");
        drop(s);
        drop(cache);
        pool.check_leaks().unwrap();
    }
}
