//! The segment rules that a [`Connection`](super::Connection) and its compact TIME-WAIT record
//! ([`TimeWait`](super::TimeWait)) both apply, kept here once: the acceptability test of RFC
//! 9293 §3.10.7.4, PAWS and the TS.Recent update of RFC 7323, the RFC 5961 §5.2 bound on
//! acknowledgment numbers, the RFC 5961 §7 challenge-ACK limit and the rate limit of ACKs
//! answering unacceptable bare segments. Each rule is a pure function of the state it reads; the
//! caller's clock comes in as a [`Moment`] (an [`Instant`], or the nanoseconds the record keeps).

use std::time::{Duration, Instant};

use crate::wire::SeqNumber;

/// The shortest interval between ACKs answering unacceptable bare segments (Linux's
/// `tcp_invalid_ratelimit` default).
pub(super) const OOW_ACK_INTERVAL: Duration = Duration::from_millis(500);
/// TS.Recent older than this is no longer valid for PAWS (RFC 7323 §5.5: 24 days).
pub(super) const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);
/// The window of the challenge-ACK limit (RFC 5961 §7: so many per second).
const CHALLENGE_WINDOW: Duration = Duration::from_secs(1);

/// An instant of the caller's clock as the rules read it.
pub(super) trait Moment: Copy {
    /// Whether less than `limit` passed from `earlier` to `self` (nothing passed when `earlier`
    /// is later).
    fn within(self, earlier: Self, limit: Duration) -> bool;
}

impl Moment for Instant {
    #[inline]
    fn within(self, earlier: Self, limit: Duration) -> bool {
        self.saturating_duration_since(earlier) < limit
    }
}

/// The acceptability test of RFC 9293 §3.10.7.4 for a segment of `len` at `seq` against a
/// receive window of `wnd` bytes from `rcv_nxt` (the connection's, and its TIME-WAIT record's),
/// except that a segment without data is also accepted at the right edge of the window (as
/// Linux's `tcp_sequence` does). Our pure ACKs go out at SND.MAX; when we filled the peer's
/// window while its RCV.NXT lags behind a hole, SND.MAX *is* its right edge, and if both ends are
/// in that state (each one's ACKs lost, each one resending data the other already has, which is
/// dropped as old without its ACK being looked at) a strict test deadlocks the connection. The
/// random-fault pair test found it.
pub(super) fn acceptable(rcv_nxt: SeqNumber, wnd: usize, seq: SeqNumber, len: usize) -> bool {
    let in_window = |s: SeqNumber| rcv_nxt <= s && s < rcv_nxt + wnd;
    match (len, wnd) {
        (0, 0) => seq == rcv_nxt,
        (0, _) => rcv_nxt <= seq && seq <= rcv_nxt + wnd,
        (_, 0) => false,
        _ => in_window(seq) || in_window(seq + (len - 1)),
    }
}

/// PAWS (RFC 7323 §5.3 R1): whether a segment with timestamp value `tsval` is an old duplicate,
/// older than TS.Recent (`recent`, recorded at `recent_at`) while TS.Recent is still valid (less
/// than [`PAWS_IDLE`] old at `now`). The caller checks first that timestamps are in use and that
/// the segment is not an RST.
#[inline]
pub(super) fn paws_rejects<T: Moment>(tsval: u32, recent: u32, recent_at: T, now: T) -> bool {
    SeqNumber::new(tsval) < SeqNumber::new(recent) && now.within(recent_at, PAWS_IDLE)
}

/// Whether a segment at `seq` with timestamp value `tsval` becomes TS.Recent (RFC 7323 §4.3):
/// it starts at or before the RCV.NXT our last ACK carried (`last_ack_sent`), and its timestamp
/// is not older than TS.Recent (`recent`).
#[inline]
pub(super) fn ts_recent_updates(seq: SeqNumber, last_ack_sent: SeqNumber, tsval: u32, recent: u32) -> bool {
    seq <= last_ack_sent && SeqNumber::new(tsval) >= SeqNumber::new(recent)
}

/// Whether an unacceptable segment's answering ACK is suppressed: it is `bare` (no data, no
/// flags) and one was answered less than [`OOW_ACK_INTERVAL`] before `now` (at `last`), so that
/// two ends can never ping-pong ACKs.
#[inline]
pub(super) fn oow_ack_limited<T: Moment>(bare: bool, last: Option<T>, now: T) -> bool {
    bare && last.is_some_and(|t| now.within(t, OOW_ACK_INTERVAL))
}

/// Whether an acknowledgment number is out of range (RFC 5961 §5.2): beyond `highest` (the
/// highest sequence number sent plus one), or older than SND.UNA (`una`) less the largest
/// window the peer offered (`max_snd_wnd`). Such an ACK gets a challenge ACK and the segment is
/// dropped.
#[inline]
pub(super) fn ack_out_of_range(
    ack: SeqNumber,
    una: SeqNumber,
    highest: SeqNumber,
    max_snd_wnd: usize,
) -> bool {
    ack > highest || ack < una - max_snd_wnd
}

/// The RFC 5961 §7 challenge-ACK limit, at most `limit` per second. `window` is the start of the
/// current one-second window and the challenge ACKs sent in it (`None`: none yet). Returns the
/// window once a challenge ACK is due at `now`, and whether it may be sent (else it is
/// suppressed and not counted).
#[inline]
pub(super) fn challenge_ack<T: Moment>(window: Option<(T, u32)>, now: T, limit: u32) -> ((T, u32), bool) {
    let (start, sent) = match window {
        Some((start, sent)) if now.within(start, CHALLENGE_WINDOW) => (start, sent),
        _ => (now, 0),
    };
    if sent >= limit { ((start, sent), false) } else { ((start, sent + 1), true) }
}
