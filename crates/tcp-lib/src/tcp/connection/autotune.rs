//! Receive-buffer autotuning ([`Config::recv_buffer_max`]): the receive buffer grows, once a
//! round trip, to twice what the application read in the last one, so the window follows what
//! the path and the reader take rather than a size fixed at the open. After Fisk and Feng,
//! "Dynamic right-sizing in TCP" (2001), as Linux does it (`tcp_rcv_space_adjust`, with its
//! receiver-side RTT estimate `tcp_rcv_rtt_measure`).
//!
//! [`Config::recv_buffer_max`]: crate::tcp::Config::recv_buffer_max
//!
//! Two measures run on in-order data as it arrives:
//!
//! * **The receiver's RTT.** A receiver that only acknowledges takes no RTT sample of its own, so
//!   it times how long RCV.NXT takes to pass the edge one window beyond where it was: the peer
//!   can send past that edge only after an ACK sent no sooner than the measure began, so each
//!   sample is at least a round trip, and more when the peer sent less than the window (its own
//!   congestion window, an application with less to send). The estimate keeps the smallest
//!   sample (a minimum filter, as Linux's without timestamps), which a window-limited sender
//!   brings down to the round trip itself.
//! * **The application's reading.** Once at least that estimate has passed since the last
//!   measure, the bytes the application read since (RCV.NXT less the bytes still in the ring:
//!   data taken in place counts as read) are compared with the most read in a measure before.
//!   More means the reader keeps up and the sender is still growing: the buffer is raised to
//!   `2 · read + 16 · MSS`, plus twice that times the growth's ratio (Linux's formula: a sender
//!   doubling each round trip finds the window ahead of it), at most `recv_buffer_max`.
//!
//! A reader that does not keep up reads no more than before and the buffer stays as it is; the
//! buffer never shrinks (a window offered is not taken back). Once it reaches its maximum the
//! connection stops measuring: what each segment pays is one flag's test.

use std::time::Instant;

use super::{Config, Connection, distance};
use crate::wire::SeqNumber;

/// The state of the two measures (see the [module documentation](self)), in 40 bytes: every
/// connection carries it. Instants are nanoseconds since the connection's timestamp epoch, plus
/// one, so that every field but `on` starts at zero ("not begun").
#[derive(Debug)]
pub(super) struct RecvTuning {
    /// The buffer may still grow: set at the open when the maximum is above the buffer, cleared
    /// when the buffer reaches it (one byte to test per segment).
    on: bool,
    /// The receiver's RTT estimate in nanoseconds (0 before the first sample; at most 4.3 s).
    rtt: u32,
    /// The RTT measure under way: RCV.NXT must pass `rtt_edge`; it began at `rtt_start`.
    rtt_edge: SeqNumber,
    /// The reading measure under way: from the application's read position `read_from`.
    read_from: SeqNumber,
    /// The most the application read in one measure (bytes).
    space: u32,
    /// When the RTT measure began.
    rtt_start: u64,
    /// When the reading measure began.
    read_start: u64,
}

/// An instant of [`RecvTuning`] not reached yet: its measure has not begun.
const NOT_BEGUN: u64 = 0;

impl RecvTuning {
    /// Nothing measured yet; on when `config` lets the buffer grow.
    pub(super) fn new(config: &Config) -> Self {
        Self {
            on: config.recv_buffer_max > config.recv_buffer,
            rtt: 0,
            rtt_edge: SeqNumber::default(),
            read_from: SeqNumber::default(),
            space: 0,
            rtt_start: NOT_BEGUN,
            read_start: NOT_BEGUN,
        }
    }
}

/// In-order segments' worth of bytes the first measure's reading must exceed (Linux starts its
/// measure at its initial window, ten segments).
const INITIAL_SPACE_SEGMENTS: usize = 10;

impl Connection {
    /// Whether autotuning may still raise the receive buffer (the test every in-order segment
    /// pays).
    #[inline]
    pub(super) fn may_raise_recv_buffer(&self) -> bool {
        self.rcv.tune.on
    }

    /// In-order data arrived at `now` (RCV.NXT has moved past it): advances the two measures,
    /// and raises the receive buffer when the application read more in the last round trip than
    /// in any before. Out of line: the segment path of a connection without autotuning (or
    /// done with it) carries only the test.
    #[inline(never)]
    pub(super) fn tune_recv_buffer(&mut self, now: Instant) {
        let now = u64::try_from(now.saturating_duration_since(self.ts.epoch).as_nanos())
            .map_or(u64::MAX, |ns| ns.saturating_add(1));
        let mss = self.rcv.mss.max(1);
        // What the peer may send now at most: the ring, or the largest window the scale allows.
        let window = self.rcv.buf.capacity().min(usize::from(u16::MAX) << self.rcv.wscale).max(mss);
        let read_at = self.rcv.nxt - self.rcv.buf.len();
        let t = &mut self.rcv.tune;
        if t.rtt_start == NOT_BEGUN || self.rcv.nxt >= t.rtt_edge {
            if t.rtt_start != NOT_BEGUN {
                let sample = u32::try_from(now.saturating_sub(t.rtt_start)).unwrap_or(u32::MAX).max(1);
                if t.rtt == 0 || sample < t.rtt {
                    t.rtt = sample;
                }
            }
            (t.rtt_edge, t.rtt_start) = (self.rcv.nxt + window, now);
        }
        if t.read_start == NOT_BEGUN {
            t.space = u32::try_from((INITIAL_SPACE_SEGMENTS * mss).min(self.rcv.buf.capacity()))
                .unwrap_or(u32::MAX);
            (t.read_from, t.read_start) = (read_at, now);
            return;
        }
        if t.rtt == 0 || now.saturating_sub(t.read_start) < u64::from(t.rtt) {
            return;
        }
        let read = distance(t.read_from, read_at);
        (t.read_from, t.read_start) = (read_at, now);
        let space = t.space.max(1) as u128;
        if read as u128 <= space {
            return;
        }
        let mut target = 2 * read as u128 + 16 * mss as u128;
        target += 2 * (target * (read as u128 - space) / space);
        t.space = u32::try_from(read).unwrap_or(u32::MAX);
        let max = self.config.recv_buffer_max.min(usize::from(u16::MAX) << self.rcv.wscale);
        let target = usize::try_from(target).unwrap_or(usize::MAX).min(max);
        // Everything written so far lies within the in-order bytes and the last range held
        // out of order.
        let extent = self.rcv.buf.len() + self.rcv.ooo.ranges().last().map_or(0, |(_, end)| end);
        if self.rcv.buf.raise_limit(target, extent) {
            self.stats.recv_buffer_raises += 1;
        }
        self.rcv.tune.on = self.rcv.buf.limit() < max;
    }
}
