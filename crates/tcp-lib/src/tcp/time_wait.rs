//! The compact record of a released connection in TIME-WAIT (RFC 9293 §3.10.7.4).
//!
//! A [`Connection`](super::Connection) in TIME-WAIT carries no more data: all it still does is
//! answer segments (a retransmitted FIN with an ACK and a restarted 2·MSL timer, an exact RST by
//! closing, a SYN or anything out of the window with a rate-limited ACK, PAWS with timestamps)
//! until 2·MSL has passed. [`TimeWait`] keeps exactly the state those answers read and write, in
//! 72 bytes instead of the whole TCB (1144), and answers every segment as the connection would:
//! the differential test in `tests/time_wait.rs` feeds random segments to both.
//!
//! Instants are kept as signed nanoseconds from a `base` instant that the owner passes to every
//! call (the stack's epoch), so that four of them fit where one `Option<Instant>` pair would.
//! The 4-tuple is not kept: it is the key of the table that holds the record.

use std::time::{Duration, Instant};

use super::Config;
use super::rules::{self, Moment, acceptable};
use crate::wire::tcp::Timestamp;
use crate::wire::{SeqNumber, TcpControl, TcpRepr};

/// An absent instant.
const NONE: i64 = i64::MIN;
/// Nanoseconds per millisecond (the timestamp clock's tick).
const NS_PER_MS: i64 = 1_000_000;
/// `bits`: the sub-millisecond phase of the timestamp clock's epoch (20 bits, < 10^6).
const SUB_MASK: u32 = (1 << 20) - 1;
/// `bits`: timestamps were negotiated.
const TS_OK: u32 = 1 << 31;
/// `bits`: the receive window scale, 4 bits from here.
const WS_SHIFT: u32 = 20;
/// `bits`: the send window scale (the peer's), 4 bits from here.
const SND_WS_SHIFT: u32 = 24;

/// `t` as signed nanoseconds from `base` (saturating, never [`NONE`]).
pub(crate) fn tick(base: Instant, t: Instant) -> i64 {
    if t >= base {
        i64::try_from((t - base).as_nanos()).unwrap_or(i64::MAX)
    } else {
        i64::try_from((base - t).as_nanos()).map_or(NONE + 1, |n| (-n).max(NONE + 1))
    }
}

/// The instant `tick` nanoseconds from `base` (`base` itself when out of range).
fn instant(base: Instant, tick: i64) -> Instant {
    let d = Duration::from_nanos(tick.unsigned_abs());
    if tick >= 0 { base.checked_add(d) } else { base.checked_sub(d) }.unwrap_or(base)
}

/// `d` in nanoseconds (saturating).
fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// `now - then`, 0 when `then` is later (`Instant::saturating_duration_since`).
fn since(now: i64, then: i64) -> i64 {
    now.saturating_sub(then).max(0)
}

/// The record's instants, nanoseconds from the owner's `base`, as the [`rules`] read
/// them.
impl Moment for i64 {
    #[inline]
    fn within(self, earlier: Self, limit: Duration) -> bool {
        since(self, earlier) < nanos(limit)
    }
}

/// What a [`TimeWait`] record does with a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimeWaitAction {
    /// Nothing to send.
    Ignore,
    /// Send this ACK.
    Reply(TcpRepr<'static>),
    /// An RST at RCV.NXT: the connection is closed, drop the record.
    Close,
}

/// The state a connection in TIME-WAIT still needs (see the [module documentation](self)):
/// 72 bytes. Built by `Connection::time_wait_record`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimeWait {
    /// End of 2·MSL (the connection's `timers.time_wait`).
    expires: i64,
    /// When TS.Recent was recorded (PAWS ages it out after [`PAWS_IDLE`](rules::PAWS_IDLE)).
    ts_recent_at: i64,
    /// The last out-of-window bare ACK answered ([`NONE`]: never).
    last_oow_ack: i64,
    /// The start of the current RFC 5961 challenge-ACK second ([`NONE`]: none).
    challenge_start: i64,
    rcv_nxt: SeqNumber,
    /// SND.MAX = SND.UNA = SND.NXT: our FIN was acknowledged. The sequence number of our ACKs.
    snd_max: SeqNumber,
    /// SND.WL1: the sequence number of the segment that last updated the send window (SND.WL2
    /// is SND.MAX, or behind it: only an ACK of SND.MAX updates the window now).
    snd_wl1: SeqNumber,
    /// The largest window the peer offered (RFC 5961 §5.2 bound on old ACKs); window updates
    /// in TIME-WAIT still raise it.
    max_snd_wnd: u32,
    /// RCV.ADV - RCV.NXT: the receive window that segments are tested against.
    wnd: u32,
    ts_recent: u32,
    /// The timestamp clock's offset, less its epoch's whole milliseconds from `base`.
    ts_offset: u32,
    /// [`TS_OK`], the window scales at [`WS_SHIFT`] and [`SND_WS_SHIFT`], the timestamp epoch's
    /// sub-millisecond phase.
    bits: u32,
    /// The window field of our ACKs (constant in TIME-WAIT: nothing is read or received).
    window: u16,
    /// Challenge ACKs sent in the current second (saturating).
    challenge_sent: u16,
}

/// The fields of a connection in TIME-WAIT that a [`TimeWait`] is built from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimeWaitParts {
    pub(crate) expires: Instant,
    pub(crate) rcv_nxt: SeqNumber,
    pub(crate) rcv_adv: SeqNumber,
    pub(crate) rcv_wscale: u8,
    pub(crate) window: u16,
    pub(crate) snd_max: SeqNumber,
    pub(crate) snd_wl1: SeqNumber,
    pub(crate) snd_wscale: u8,
    pub(crate) max_snd_wnd: usize,
    pub(crate) ts_ok: bool,
    pub(crate) ts_epoch: Instant,
    pub(crate) ts_offset: u32,
    pub(crate) ts_recent: u32,
    pub(crate) ts_recent_at: Instant,
    pub(crate) last_oow_ack: Option<Instant>,
    pub(crate) challenge_window: Option<(Instant, u32)>,
}

impl TimeWait {
    /// The record of `p`, its instants kept relative to `base`.
    pub(crate) fn new(p: &TimeWaitParts, base: Instant) -> Self {
        let epoch = tick(base, p.ts_epoch);
        let sub = u32::try_from(epoch.rem_euclid(NS_PER_MS)).unwrap_or(0);
        let whole_ms = u32::try_from(epoch.div_euclid(NS_PER_MS).rem_euclid(1 << 32)).unwrap_or(0);
        let (challenge_start, challenge_sent) = p
            .challenge_window
            .map_or((NONE, 0), |(start, sent)| (tick(base, start), u16::try_from(sent).unwrap_or(u16::MAX)));
        let distance = usize::try_from(p.rcv_adv - p.rcv_nxt).unwrap_or(0);
        Self {
            expires: tick(base, p.expires),
            ts_recent_at: tick(base, p.ts_recent_at),
            last_oow_ack: p.last_oow_ack.map_or(NONE, |t| tick(base, t)),
            challenge_start,
            rcv_nxt: p.rcv_nxt,
            snd_max: p.snd_max,
            snd_wl1: p.snd_wl1,
            max_snd_wnd: u32::try_from(p.max_snd_wnd).unwrap_or(u32::MAX),
            wnd: u32::try_from(distance).unwrap_or(u32::MAX),
            ts_recent: p.ts_recent,
            ts_offset: p.ts_offset.wrapping_sub(whole_ms),
            bits: (if p.ts_ok { TS_OK } else { 0 })
                | (u32::from(p.rcv_wscale.min(15)) << WS_SHIFT)
                | (u32::from(p.snd_wscale.min(15)) << SND_WS_SHIFT)
                | (sub & SUB_MASK),
            window: p.window,
            challenge_sent,
        }
    }

    /// When 2·MSL ends: the record is dropped then (the connection would be CLOSED).
    pub(crate) fn expires(&self, base: Instant) -> Instant {
        instant(base, self.expires)
    }

    const fn ts_ok(&self) -> bool {
        self.bits & TS_OK != 0
    }

    /// Our timestamp clock at `now` (the connection's `ts_now`).
    fn ts_now(&self, now: i64) -> u32 {
        let sub = i64::from(self.bits & SUB_MASK);
        let ms = now.saturating_sub(sub).div_euclid(NS_PER_MS).rem_euclid(1 << 32);
        u32::try_from(ms).unwrap_or(0).wrapping_add(self.ts_offset)
    }

    /// An RFC 5961 challenge ACK under the per-second limit; whether it may be sent.
    fn challenge(&mut self, config: &Config, now: i64) -> bool {
        let window =
            (self.challenge_start != NONE).then(|| (self.challenge_start, u32::from(self.challenge_sent)));
        let ((start, sent), allowed) = rules::challenge_ack(window, now, config.challenge_ack_limit);
        self.challenge_start = start;
        self.challenge_sent = u16::try_from(sent).unwrap_or(u16::MAX);
        allowed
    }

    /// Processes one segment of the connection (its ports are the table key's) at `now`, as
    /// `Connection::handle_segment` followed by `poll_transmit` does in TIME-WAIT. `config` is
    /// the connection's ([`Config::msl`], [`Config::challenge_ack_limit`]).
    pub(crate) fn handle_segment(
        &mut self,
        config: &Config,
        base: Instant,
        now: Instant,
        seg: &TcpRepr<'_>,
    ) -> TimeWaitAction {
        let now = tick(base, now);
        let ack = self.segment(config, base, now, seg);
        if self.expires == NONE {
            TimeWaitAction::Close
        } else if ack {
            self.ack(now, seg)
        } else {
            TimeWaitAction::Ignore
        }
    }

    /// The state changes of `Connection::handle_synchronized` in TIME-WAIT; returns whether an
    /// ACK is due. An RST at RCV.NXT sets `expires` to [`NONE`]: the connection is closed.
    fn segment(&mut self, config: &Config, base: Instant, now: i64, seg: &TcpRepr<'_>) -> bool {
        let rst = seg.control == TcpControl::Rst;
        let syn = seg.control == TcpControl::Syn;
        let fin = seg.control == TcpControl::Fin;
        let mut ack = false;

        // PAWS (RFC 7323 §5.3 R1).
        if self.ts_ok()
            && !rst
            && let Some(ts) = seg.timestamp
            && rules::paws_rejects(ts.tsval, self.ts_recent, self.ts_recent_at, now)
        {
            return true;
        }

        let wnd = usize::try_from(self.wnd).unwrap_or(usize::MAX);
        if !acceptable(self.rcv_nxt, wnd, seg.seq_number, seg.segment_len()) {
            if rst {
                return false;
            }
            if fin {
                // A retransmitted FIN: our ACK was lost. Acknowledge it and restart 2·MSL.
                self.expires = tick(base, instant(base, now) + config.msl * 2);
            }
            let bare = seg.payload.is_empty() && seg.control == TcpControl::None;
            let last = (self.last_oow_ack != NONE).then_some(self.last_oow_ack);
            let limited = rules::oow_ack_limited(bare, last, now);
            if !limited {
                ack = true;
                if bare {
                    self.last_oow_ack = now;
                }
            }
            if !(self.wnd == 0 && seg.seq_number == self.rcv_nxt && !syn) {
                return ack;
            }
        }

        if rst {
            if seg.seq_number == self.rcv_nxt {
                self.expires = NONE;
                return false;
            }
            return self.challenge(config, now);
        }
        if syn {
            return self.challenge(config, now);
        }

        // ACK processing (RFC 5961 §5.2): everything we sent was acknowledged.
        let Some(a) = seg.ack_number else { return ack };
        let max_snd_wnd = usize::try_from(self.max_snd_wnd).unwrap_or(0);
        if rules::ack_out_of_range(a, self.snd_max, self.snd_max, max_snd_wnd) {
            return self.challenge(config, now) || ack;
        }
        // TS.Recent (RFC 7323 §4.3), from a segment whose ACK is acceptable, as the connection
        // takes it; our last ACK acknowledged RCV.NXT.
        if self.ts_ok()
            && let Some(ts) = seg.timestamp
            && rules::ts_recent_updates(seg.seq_number, self.rcv_nxt, ts.tsval, self.ts_recent)
        {
            self.ts_recent = ts.tsval;
            self.ts_recent_at = now;
        }
        // The window update (SND.WL1/SND.WL2 rule) still raises the largest window seen.
        if a == self.snd_max && self.snd_wl1 <= seg.seq_number {
            let ws = (self.bits >> SND_WS_SHIFT) & 0xf;
            let window = u32::from(seg.window_len) << ws;
            self.max_snd_wnd = self.max_snd_wnd.max(window);
            self.snd_wl1 = seg.seq_number;
        }
        ack
    }

    /// Our ACK (the connection's `header`), after which the advertised edge is where it says.
    fn ack(&mut self, now: i64, seg: &TcpRepr<'_>) -> TimeWaitAction {
        let ws = (self.bits >> WS_SHIFT) & 0xf;
        let edge = u32::from(self.window) << ws;
        self.wnd = self.wnd.max(edge);
        TimeWaitAction::Reply(TcpRepr {
            src_port: seg.dst_port,
            dst_port: seg.src_port,
            control: TcpControl::None,
            seq_number: self.snd_max,
            ack_number: Some(self.rcv_nxt),
            window_len: self.window,
            timestamp: self.ts_ok().then(|| Timestamp { tsval: self.ts_now(now), tsecr: self.ts_recent }),
            ..TcpRepr::default()
        })
    }
}
