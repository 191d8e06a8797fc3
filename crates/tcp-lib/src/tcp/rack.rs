//! RACK, time-based loss detection (RFC 8985 §6, "The RACK-TLP Loss Detection Algorithm for
//! TCP", 2021): a segment is deemed lost once a segment sent after it was delivered and more than
//! an RTT plus a reordering window has passed since it was sent, instead of waiting for three
//! duplicate ACKs' worth of SACKed data (RFC 6675 IsLost) or for the RTO.
//!
//! The sender logs every transmission (its range, when it left, whether it was a retransmission)
//! in the order they left. On each ACK the newly delivered transmissions (cumulatively acknowledged
//! or fully SACKed) update `RACK.xmit_ts`/`RACK.end_seq` (the most recently sent one delivered) and
//! `RACK.rtt`, and show reordering when one ends below the highest delivered end (`RACK.fack`).
//! Then the original transmissions sent before RACK's segment are checked in order: those older
//! than `RACK.rtt + RACK.reo_wnd` are lost, and the youngest one's remaining time arms the
//! reordering timer, which checks again when it fires.
//!
//! What it marks is kept as one sequence number, `lost_below`: original transmissions leave in
//! sequence order, so the segments RACK deems lost are a prefix of the data not SACKed, and the
//! scoreboard counts every unSACKed byte below it as lost (`Scoreboard::mark_lost_below`).
//! Retransmissions are checked by the same rule (RFC 8985 §6.2 step 5 makes no difference
//! between them): one sent before the newest delivered transmission and older than RACK.rtt +
//! RACK.reo_wnd is lost again, and [`detect`](Rack::detect) reports the lowest such, which the
//! connection sends again when it is the segment at SND.UNA (a loss that otherwise waits for
//! enough SACKs of later data or for the RTO). RACK is off unless
//! [`Config::rack`](super::Config::rack) asks for it.
//!
//! The same log gives the delivery rate samples ([`RateSample`]; Cheng, Cardwell, Hassas Yeganeh
//! and Jacobson, "Delivery Rate Estimation", IETF draft, 2016, as Linux's `tcp_rate.c`): each
//! transmission also records how much the connection had delivered when it left, and when, and
//! an ACK that delivers transmissions takes the most recently sent of them as its sample.
//!
//! [`RateSample`]: super::RateSample

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::RateSample;
use crate::wire::SeqNumber;

/// The most transmissions logged; past it the oldest is forgotten (it is then neither a source of
/// RACK's clock nor checked for loss, which only delays detection to the older rules).
const MAX_LOG: usize = 4096;

/// The largest reordering degree reported, in segments (Linux's `sysctl_tcp_max_reordering`).
const MAX_DEGREE: usize = 300;

/// Recoveries after the last D-SACK for which the reordering window stays widened (RFC 8985
/// §6.2 step 4's RACK.reo_wnd_persist; Linux's `TCP_RACK_RECOVERY_THRESH`).
const REO_WND_PERSIST: u8 = 16;

/// One transmission of `start..end`.
#[derive(Debug, Clone, Copy)]
struct Sent {
    start: SeqNumber,
    end: SeqNumber,
    at: Instant,
    retransmission: bool,
    /// The delivery state when it left (the draft's P.delivered, P.delivered_time,
    /// P.first_sent_time, P.is_app_limited).
    rate: SentRate,
}

/// The connection's delivery state a transmission records when it leaves.
#[derive(Debug, Clone, Copy)]
struct SentRate {
    delivered: u64,
    delivered_at: Instant,
    first_sent_at: Instant,
    app_limited: bool,
}

/// The connection's delivery state (the draft's C.delivered, C.delivered_time,
/// C.first_sent_time, C.app_limited).
#[derive(Debug, Default)]
struct Delivery {
    /// Bytes delivered (acknowledged or SACKed) so far.
    delivered: u64,
    /// When the last delivery was acknowledged (or sending restarted with nothing in flight).
    delivered_at: Option<Instant>,
    /// When the transmission of the last sample left (or sending restarted).
    first_sent_at: Option<Instant>,
    /// Non-zero while the application limits sending: the delivered count past which the
    /// samples are no longer app-limited.
    app_limited_until: u64,
}

/// What [`Rack::detect`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Detected {
    /// The end of the lost prefix of original transmissions.
    pub(crate) lost_below: SeqNumber,
    /// The lowest retransmission deemed lost again: its start and end.
    pub(crate) lost_retransmission: Option<(SeqNumber, SeqNumber)>,
    /// The second lowest (the one to resend when the lowest is at SND.UNA, where the fast
    /// retransmission resends it).
    pub(crate) next_lost_retransmission: Option<(SeqNumber, SeqNumber)>,
    /// When the reordering timer should check again.
    pub(crate) timer: Option<Instant>,
}

/// The RACK state of a connection.
#[derive(Debug, Default)]
pub(crate) struct Rack {
    log: VecDeque<Sent>,
    /// RACK.xmit_ts and RACK.end_seq: the most recently sent transmission delivered.
    newest: Option<(Instant, SeqNumber)>,
    /// RACK.rtt: the RTT of the latest delivered transmission taken as a sample.
    rtt: Option<Duration>,
    /// RACK.min_RTT.
    min_rtt: Option<Duration>,
    /// RACK.fack: the highest end of a delivered transmission.
    fack: Option<SeqNumber>,
    /// RACK.reord: a delivery below `fack` was seen.
    reordering: bool,
    /// The largest reordering seen, in segments: how far below `fack` a delivered transmission
    /// began (Linux's `tcpi_reordering`, which starts at DupThresh).
    degree: usize,
    /// ACKs that showed reordering (Linux's `tcpi_reord_seen`).
    events: u64,
    /// RACK.reo_wnd_mult − 1: quarters of the minimum RTT added to the reordering window, one per
    /// round trip in which a D-SACK arrived.
    reo_wnd_extra: u8,
    /// RACK.reo_wnd_persist: recoveries left before the window narrows back.
    reo_wnd_persist: u8,
    /// RACK.dsack_round: SND.NXT when the last widening happened; none until SND.UNA passes it.
    dsack_round: Option<SeqNumber>,
    /// The delivery rate sampling, for the connections that take samples (BBR's): boxed, so
    /// that the others do not carry it.
    rates: Option<Box<Rates>>,
}

/// The delivery state and the last sample.
#[derive(Debug, Default)]
struct Rates {
    delivery: Delivery,
    /// The rate sample of the last ACK that delivered something, until taken.
    sample: Option<RateSample>,
}

/// Removes the transmissions in `log` that start in `start..end` (the bytes are being sent
/// again); one that reaches past `end` is cut to its rest instead. A read-only pass finds them
/// first: usually there are none, or they are one run (the oldest data, resent after a
/// timeout), which leaves in one `drain` of it; only matches with others between them take
/// `retain`, which moves every entry after the first match. (With
/// `retain` alone, a retransmission storm over a full log moved up to [`MAX_LOG`] entries per
/// segment sent: the fuzz target `tcp_segments` found inputs that spent most of their time
/// there.)
fn supersede(log: &mut VecDeque<Sent>, start: SeqNumber, end: SeqNumber) {
    let hit = |s: &Sent| start <= s.start && s.start < end;
    let Some(first) = log.iter().position(hit) else { return };
    // A transmission that reaches past the new one keeps its rest, sent when it was (the
    // segment size can change between transmissions, with the options a segment carries): its
    // bytes there were not sent again, and RACK must still find them lost if they are.
    for s in log.range_mut(first..) {
        if hit(s) && s.end > end {
            s.start = end;
        }
    }
    let Some(first) = log.range(first..).position(hit).map(|i| first + i) else { return };
    let last = log.iter().rposition(hit).unwrap_or(first);
    if log.range(first..=last).all(hit) {
        log.drain(first..=last);
    } else {
        log.retain(|s| !hit(s));
    }
}

/// Whether a transmission at `t1` ending at `e1` left after one at `t2` ending at `e2` (RFC 8985
/// §6.2 RACK_sent_after: the later time, or at the same time the higher end).
fn sent_after(t1: Instant, e1: SeqNumber, t2: Instant, e2: SeqNumber) -> bool {
    t1 > t2 || (t1 == t2 && e1 > e2)
}

impl Delivery {
    /// The sample of an ACK that delivered `newly` bytes, `p` the most recently sent of them
    /// (the draft's `UpdateRateSample` and `GenerateRateSample`): the bytes delivered since `p`
    /// left over the longer of its send phase (from the first transmission of its flight to
    /// it) and its ACK phase (from the delivery before it left to now). A sample shorter than
    /// `min_rtt` is not valid: ACKs compressed in time would inflate it.
    fn sample(&mut self, p: &Sent, newly: usize, now: Instant, min_rtt: Option<Duration>) -> RateSample {
        self.delivered = self.delivered.saturating_add(newly as u64);
        self.delivered_at = Some(now);
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        self.first_sent_at = Some(p.at);
        let send = p.at.saturating_duration_since(p.rate.first_sent_at);
        let ack = now.saturating_duration_since(p.rate.delivered_at);
        let interval = send.max(ack);
        let valid = min_rtt.is_none_or(|m| interval >= m) && !interval.is_zero();
        RateSample {
            delivered: self.delivered - p.rate.delivered.min(self.delivered),
            interval: if valid { interval } else { Duration::ZERO },
            prior_delivered: p.rate.delivered,
            total_delivered: self.delivered,
            app_limited: p.rate.app_limited,
            // (A round trip shorter than the caller's clock ticks reads as zero: no measure.)
            rtt: (!p.retransmission)
                .then(|| now.saturating_duration_since(p.at))
                .filter(|rtt| !rtt.is_zero()),
            newly_delivered: newly,
            // The connection's to fill in.
            in_flight: 0,
            mss: 0,
        }
    }
}

impl Rack {
    /// A RACK state that also takes delivery rate samples (see [`take_sample`](Self::take_sample)).
    pub(crate) fn with_rate_samples() -> Self {
        Self { rates: Some(Box::default()), ..Self::default() }
    }

    /// `start..end` left at `now` (`retransmission`: it had been sent before).
    pub(crate) fn on_sent(&mut self, start: SeqNumber, end: SeqNumber, now: Instant, retransmission: bool) {
        if retransmission {
            // The earlier transmissions of these bytes are superseded.
            supersede(&mut self.log, start, end);
        }
        if self.log.len() == MAX_LOG {
            self.log.pop_front();
        }
        let rate = match self.rates.as_deref_mut() {
            Some(Rates { delivery: d, .. }) => {
                if self.log.is_empty() {
                    // Nothing in flight: the sending starts afresh, and so does the rate's
                    // clock (the draft's "if no packets in flight").
                    d.first_sent_at = Some(now);
                    d.delivered_at = Some(now);
                }
                SentRate {
                    delivered: d.delivered,
                    delivered_at: d.delivered_at.unwrap_or(now),
                    first_sent_at: d.first_sent_at.unwrap_or(now),
                    app_limited: d.app_limited_until != 0,
                }
            }
            None => SentRate { delivered: 0, delivered_at: now, first_sent_at: now, app_limited: false },
        };
        self.log.push_back(Sent { start, end, at: now, retransmission, rate });
    }

    /// The application, not the window, limits sending with `in_flight` bytes out: the samples
    /// of what leaves until all that is delivered say less than the path can do (the draft's
    /// `C.app_limited = C.delivered + C.inflight`, at least 1).
    pub(crate) fn set_app_limited(&mut self, in_flight: usize) {
        if let Some(Rates { delivery: d, .. }) = self.rates.as_deref_mut() {
            d.app_limited_until = d.delivered.saturating_add(in_flight as u64).max(1);
        }
    }

    /// The rate sample of the last ACK that delivered data, once (none unless made
    /// [`with_rate_samples`](Self::with_rate_samples)); its `in_flight` and `mss` are the
    /// connection's to fill in.
    pub(crate) fn take_sample(&mut self) -> Option<RateSample> {
        self.rates.as_deref_mut().and_then(|r| r.sample.take())
    }

    /// Whether no transmission is logged (every one was delivered, or none was sent).
    pub(crate) fn is_empty(&self) -> bool {
        self.log.is_empty()
    }

    /// Forgets the log and frees its storage (a connection that sends no more data); the
    /// reordering measures stay for the statistics.
    pub(crate) fn release(&mut self) {
        self.log = VecDeque::new();
    }

    /// An RTT sample from the connection's estimator (RACK.min_RTT follows every sample).
    pub(crate) fn on_rtt_sample(&mut self, rtt: Duration) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
    }

    /// An ACK moved SND.UNA to `una`; `sacked(start, end)` says whether the peer SACKed all of
    /// a range. Updates RACK's clock from the transmissions now delivered, and forgets them
    /// (RFC 8985 §6.2 steps 1 to 3).
    ///
    /// RACK.rtt is the sample of the last delivered transmission in an order: by the time they
    /// left (RFC 8985 §6.2 step 2), or with `sequence_order` as Linux takes it
    /// (`tcp_rack_advance` runs for the newly SACKed segments in sequence order, then for the
    /// cumulatively acknowledged ones in sequence order): the highest cumulatively acknowledged
    /// transmission's, else the highest SACKed one's.
    pub(crate) fn on_ack(
        &mut self,
        una: SeqNumber,
        now: Instant,
        mss: usize,
        sequence_order: bool,
        sacked: impl Fn(SeqNumber, SeqNumber) -> bool,
    ) {
        let Self { log, newest, rtt, min_rtt, fack, reordering, degree, events, rates, .. } = self;
        let mut reordered = false;
        // Linux's last sample so far: (cumulatively acknowledged, start, sample).
        let mut last: Option<(bool, SeqNumber, Duration)> = None;
        // The delivered transmission that left last: the rate sample's (kept only where samples
        // are taken).
        let sampling = rates.is_some();
        let mut newly = 0usize;
        let mut latest: Option<Sent> = None;
        // One pass, in transmission order: delivered transmissions update the clock and leave.
        log.retain(|s| {
            if !(s.end <= una || sacked(s.start, s.end)) {
                return true;
            }
            if sampling {
                newly += usize::try_from(s.end - s.start).unwrap_or(0);
                if latest.is_none_or(|l| sent_after(s.at, s.end, l.at, l.end)) {
                    latest = Some(*s);
                }
            }
            let sample = now.saturating_duration_since(s.at);
            // A retransmission's ACK may be the original's: too short a sample is ambiguous.
            if s.retransmission && min_rtt.is_some_and(|m| sample < m) {
                return false;
            }
            let cumulative = s.end <= una;
            if !sequence_order {
                *rtt = Some(sample);
            } else if last
                .is_none_or(|(c, start, _)| (cumulative && !c) || (cumulative == c && s.start > start))
            {
                last = Some((cumulative, s.start, sample));
            }
            if newest.is_none_or(|(t, e)| sent_after(s.at, s.end, t, e)) {
                *newest = Some((s.at, s.end));
            }
            // RFC 8985 §6.2 step 2: reordering is an original transmission delivered below
            // RACK.fack; a retransmission delivered there is the repair of a loss.
            match *fack {
                Some(f) if s.end < f && s.retransmission => {}
                Some(f) if s.end < f => {
                    *reordering = true;
                    reordered = true;
                    let displaced = usize::try_from(f - s.start).unwrap_or(0);
                    *degree = (*degree).max(displaced.div_ceil(mss.max(1)).min(MAX_DEGREE));
                }
                Some(f) if s.end <= f => {}
                _ => *fack = Some(s.end),
            }
            false
        });
        *events += u64::from(reordered);
        if let Some((_, _, sample)) = last {
            *rtt = Some(sample);
        }
        if let (Some(p), Some(r)) = (latest, rates.as_deref_mut()) {
            r.sample = Some(r.delivery.sample(&p, newly, now, *min_rtt));
        }
    }

    /// `left..right` (a SACK block) shrunk to the logged transmissions it covers whole: an edge
    /// inside one moves out to its end (the left edge) or back to its start (the right edge).
    /// `None` when no whole transmission is left. Bytes with no transmission logged stay.
    pub(crate) fn whole_segments(&self, left: SeqNumber, right: SeqNumber) -> Option<(SeqNumber, SeqNumber)> {
        let (mut l, mut r) = (left, right);
        // Transmissions of the same bytes may overlap (a retransmission cut differently from the
        // original): a moved edge may land inside another, so again until nothing moves (each
        // pass moves an edge past a transmission, so the passes are bounded by the log).
        for _ in 0..=self.log.len() {
            let (l0, r0) = (l, r);
            for s in &self.log {
                if s.start < l && l < s.end {
                    l = s.end;
                }
                if s.start < r && r < s.end {
                    r = s.start;
                }
            }
            if (l, r) == (l0, r0) || l >= r {
                break;
            }
        }
        (l < r).then_some((l, r))
    }

    /// ACKs that delivered data below the highest delivered byte.
    pub(crate) fn reordering_events(&self) -> u64 {
        self.events
    }

    /// The largest reordering seen, in segments (at least DupThresh, as Linux reports it).
    pub(crate) fn reordering(&self) -> usize {
        self.degree.max(super::sack::DUP_THRESH)
    }

    /// RACK.reo_wnd (RFC 8985 §6.2 step 4): none when no reordering was seen and the sender is
    /// in recovery or DupThresh segments were SACKed (the loss is plain), else a quarter of the
    /// minimum RTT times RACK.reo_wnd_mult ([`on_dsack`](Self::on_dsack)), at most `srtt`.
    pub(crate) fn reo_wnd(&self, in_recovery_or_dupthresh: bool, srtt: Duration) -> Duration {
        if !self.reordering && in_recovery_or_dupthresh {
            return Duration::ZERO;
        }
        let mult = 1 + u32::from(self.reo_wnd_extra);
        self.min_rtt.map_or(Duration::ZERO, |m| (m / 4 * mult).min(srtt))
    }

    /// An ACK carried a D-SACK (RFC 8985 §6.2 step 4): the first of a round trip (since SND.UNA
    /// passed the SND.NXT of the last one counted) widens the reordering window by another
    /// quarter of the minimum RTT, and keeps it so for the next [`REO_WND_PERSIST`] recoveries.
    /// A spurious retransmission says the window was too short for this path's reordering.
    pub(crate) fn on_dsack(&mut self, una: SeqNumber, nxt: SeqNumber) {
        if self.dsack_round.is_some_and(|round| una >= round) {
            self.dsack_round = None;
        }
        if self.dsack_round.is_none() {
            self.dsack_round = Some(nxt);
            self.reo_wnd_extra = self.reo_wnd_extra.saturating_add(1);
            self.reo_wnd_persist = REO_WND_PERSIST;
        }
    }

    /// A recovery ended (fast recovery, or a timeout's): after [`REO_WND_PERSIST`] of them with
    /// no D-SACK, the reordering window is a quarter of the minimum RTT again.
    pub(crate) fn on_recovery_end(&mut self) {
        self.reo_wnd_persist = self.reo_wnd_persist.saturating_sub(1);
        if self.reo_wnd_persist == 0 {
            self.reo_wnd_extra = 0;
        }
    }

    /// RFC 8985 §6.2 step 5: the transmissions sent before RACK's segment and older than
    /// RACK.rtt + `reo_wnd` are lost. Returns the end of the lost prefix of original
    /// transmissions (never below `lost_below`, the prefix already lost), the two lowest
    /// retransmissions lost again, and, when a candidate is not old enough yet, when the
    /// reordering timer should check again.
    pub(crate) fn detect(&self, now: Instant, reo_wnd: Duration, lost_below: SeqNumber) -> Detected {
        let mut d =
            Detected { lost_below, lost_retransmission: None, next_lost_retransmission: None, timer: None };
        let (Some((newest_at, newest_end)), Some(rtt)) = (self.newest, self.rtt) else {
            return d;
        };
        for s in &self.log {
            if !sent_after(newest_at, newest_end, s.at, s.end) {
                break;
            }
            if !s.retransmission && s.end <= d.lost_below {
                continue;
            }
            let deadline = s.at + rtt + reo_wnd;
            if deadline > now {
                d.timer = Some(d.timer.map_or(deadline, |t: Instant| t.max(deadline)));
            } else if s.retransmission {
                let this = Some((s.start, s.end));
                if d.lost_retransmission.is_none_or(|(l, _)| s.start < l) {
                    d.next_lost_retransmission = d.lost_retransmission;
                    d.lost_retransmission = this;
                } else if d.next_lost_retransmission.is_none_or(|(l, _)| s.start < l) {
                    d.next_lost_retransmission = this;
                }
            } else {
                d.lost_below = s.end;
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn s(n: u32) -> SeqNumber {
        SeqNumber::new(u32::MAX - 500) + n as usize
    }

    /// Ten segments at once, the eighth SACKed an RTT later: the seven before it are lost a
    /// quarter RTT after that (the reordering window), not before; the two after it are not.
    #[test]
    fn segments_sent_before_a_delivered_one_are_lost_after_rtt_plus_reo_wnd() {
        let t0 = Instant::now();
        let mut r = Rack::default();
        r.on_rtt_sample(100 * MS);
        for i in 0..10 {
            r.on_sent(s(i * 100), s(i * 100 + 100), t0, false);
        }
        let t1 = t0 + 100 * MS;
        r.on_ack(s(0), t1, 100, false, |a, b| a == s(700) && b == s(800));
        let reo = r.reo_wnd(false, 100 * MS);
        assert_eq!(reo, 25 * MS);
        let d = r.detect(t1, reo, s(0));
        assert_eq!((d.lost_below, d.timer), (s(0), Some(t0 + 125 * MS)));
        let d = r.detect(t0 + 125 * MS, reo, s(0));
        assert_eq!((d.lost_below, d.timer), (s(700), None), "1..7 lost, 9 and 10 were sent after 8");
        assert_eq!(d.lost_retransmission, None);
    }

    /// A retransmission is checked like an original: lost once a transmission sent after it was
    /// delivered and RACK.rtt + reo_wnd passed since it left; reported by its start, below the
    /// originals' prefix.
    #[test]
    fn a_retransmission_sent_before_a_delivered_one_is_lost_again() {
        let t0 = Instant::now();
        let mut r = Rack::default();
        r.on_rtt_sample(100 * MS);
        for i in 0..4 {
            r.on_sent(s(i * 100), s(i * 100 + 100), t0, false);
        }
        // The first segment resent at 200 ms, the second at 210 ms; the second's retransmission
        // is SACKed at 310 ms, the first's is not.
        r.on_sent(s(0), s(100), t0 + 200 * MS, true);
        r.on_sent(s(100), s(200), t0 + 210 * MS, true);
        r.on_ack(s(0), t0 + 310 * MS, 100, false, |a, _| a == s(100));
        // Outside recovery the reordering window is a quarter of the minimum RTT; the sample is
        // the second retransmission's 100 ms.
        let reo = r.reo_wnd(false, 100 * MS);
        assert_eq!(reo, 25 * MS);
        let d = r.detect(t0 + 310 * MS, reo, s(400));
        assert_eq!((d.lost_retransmission, d.timer), (None, Some(t0 + 300 * MS + reo)));
        let d = r.detect(t0 + 300 * MS + reo, reo, s(400));
        assert_eq!((d.lost_retransmission, d.lost_below, d.timer), (Some((s(0), s(100))), s(400), None));
        // Sent again: the lost one is superseded.
        r.on_sent(s(0), s(100), t0 + 330 * MS, true);
        assert_eq!(r.detect(t0 + 330 * MS, reo, s(400)).lost_retransmission, None);
    }

    /// A retransmission shorter than the one before it (the segment size changes with the
    /// options a segment carries) leaves the rest of the earlier one logged, with its own send
    /// time: when that is lost too, RACK finds it. (Removed whole, the rest was in no
    /// transmission RACK knew, and only the RTO resent it.)
    #[test]
    fn the_rest_of_a_longer_retransmission_stays_to_be_found_lost() {
        let t0 = Instant::now();
        let mut r = Rack::default();
        r.on_rtt_sample(100 * MS);
        r.on_sent(s(0), s(100), t0, false);
        r.on_sent(s(100), s(200), t0, false);
        // Resent as 0..108 (cutting the second segment's first 8 bytes off its original),
        // then, lost again, as 0..100.
        r.on_sent(s(0), s(108), t0 + 200 * MS, true);
        r.on_sent(s(0), s(100), t0 + 305 * MS, true);
        // Something sent after both is delivered: the 100..108 of the first retransmission was
        // sent before it and is older than RACK.rtt + reo_wnd.
        r.on_sent(s(200), s(300), t0 + 310 * MS, false);
        r.on_ack(s(0), t0 + 410 * MS, 100, false, |a, _| a == s(200));
        // At 404 ms the last retransmission (sent at 305 ms) is not overdue yet.
        let d = r.detect(t0 + 404 * MS, Duration::ZERO, s(0));
        assert_eq!(d.lost_retransmission, Some((s(100), s(108))), "the rest, sent at 200 ms");
        assert_eq!(d.lost_below, s(200), "108..200, the original's rest, sent at 0 ms");
    }

    /// D-SACKs widen the reordering window by a quarter of the minimum RTT, once a round trip
    /// (until SND.UNA passes the SND.NXT of the last widening), never past SRTT, and 16
    /// recoveries without one narrow it back (RFC 8985 §6.2 step 4).
    #[test]
    fn dsacks_widen_the_window_once_a_round_trip_for_16_recoveries() {
        let mut r = Rack::default();
        r.on_rtt_sample(100 * MS);
        let srtt = 200 * MS;
        assert_eq!(r.reo_wnd(false, srtt), 25 * MS);
        r.on_dsack(s(0), s(1000));
        assert_eq!(r.reo_wnd(false, srtt), 50 * MS);
        r.on_dsack(s(999), s(2000));
        assert_eq!(r.reo_wnd(false, srtt), 50 * MS, "the same round trip");
        r.on_dsack(s(1000), s(3000));
        assert_eq!(r.reo_wnd(false, srtt), 75 * MS, "SND.UNA passed the round's SND.NXT");
        assert_eq!(r.reo_wnd(false, 60 * MS), 60 * MS, "at most SRTT");
        assert_eq!(r.reo_wnd(true, srtt), Duration::ZERO, "plain loss, no reordering seen");
        for _ in 0..15 {
            r.on_recovery_end();
        }
        assert_eq!(r.reo_wnd(false, srtt), 75 * MS);
        r.on_recovery_end();
        assert_eq!(r.reo_wnd(false, srtt), 25 * MS, "16 recoveries without a D-SACK");
    }

    /// A delivery below the highest delivered one is reordering: the window stays open even in
    /// recovery.
    #[test]
    fn reordering_keeps_the_window() {
        let t0 = Instant::now();
        let mut r = Rack::default();
        r.on_rtt_sample(40 * MS);
        for i in 0..4 {
            r.on_sent(s(i * 100), s(i * 100 + 100), t0 + i * MS, false);
        }
        r.on_ack(s(0), t0 + 50 * MS, 100, false, |a, _| a == s(300));
        assert_eq!(r.reo_wnd(true, 40 * MS), Duration::ZERO, "no reordering seen");
        assert_eq!(r.reordering(), 3);
        r.on_ack(s(0), t0 + 51 * MS, 100, false, |a, _| a == s(300) || a == s(100));
        assert_eq!(r.reo_wnd(true, 40 * MS), 10 * MS);
        assert_eq!(r.reordering(), 3, "3 segments below the highest delivered");
        r.on_ack(s(0), t0 + 52 * MS, 100, false, |a, _| a == s(300) || a == s(100) || a == s(0));
        assert_eq!(r.reordering(), 4);
        assert_eq!(r.reordering_events(), 2, "one per ACK that showed it");
    }

    /// A SACK block shrinks to the transmissions it covers whole, across transmissions that
    /// overlap (a retransmission cut at other edges than the original).
    #[test]
    fn sack_blocks_shrink_to_whole_transmissions() {
        let t0 = Instant::now();
        let mut r = Rack::default();
        for i in 0..4 {
            r.on_sent(s(i * 100), s(i * 100 + 100), t0, false);
        }
        assert_eq!(r.whole_segments(s(150), s(400)), Some((s(200), s(400))));
        assert_eq!(r.whole_segments(s(399), s(400)), None, "the last byte alone");
        assert_eq!(r.whole_segments(s(0), s(250)), Some((s(0), s(200))));
        assert_eq!(r.whole_segments(s(400), s(500)), Some((s(400), s(500))), "nothing logged there");
        // 150..250 resent: it supersedes 200..250 (250..300 stays, sent at t0), and 100..200
        // stays logged beside it, before it. A right edge at 220 moves back to 150, inside
        // 100..200, and on to 100.
        r.on_sent(s(150), s(250), t0 + 10 * MS, true);
        assert_eq!(r.whole_segments(s(0), s(220)), Some((s(0), s(100))));
        assert_eq!(r.whole_segments(s(120), s(220)), None);
    }

    /// Superseding removes exactly what `retain` of the same predicate removes, once the
    /// transmissions that reach past the new one are cut to their rest, and keeps the rest in
    /// order, for logs of runs, scattered matches and none (random, against `retain`).
    #[test]
    fn supersede_matches_retain() {
        let t0 = Instant::now();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut below = |n: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            u32::try_from(seed % u64::from(n)).unwrap()
        };
        let (mut runs, mut scattered, mut none) = (0, 0, 0);
        for _ in 0..5000 {
            let len = below(40);
            let log: VecDeque<Sent> = (0..len)
                .map(|i| {
                    let at = below(30) * 100;
                    let rate =
                        SentRate { delivered: 0, delivered_at: t0, first_sent_at: t0, app_limited: false };
                    Sent {
                        start: s(at),
                        end: s(at + 100),
                        at: t0 + i * MS,
                        retransmission: below(2) == 0,
                        rate,
                    }
                })
                .collect();
            let (start, end) = (s(below(30) * 100), s(below(30) * 100 + 50 + below(500)));
            let mut expected = log.clone();
            // What reaches past the new transmission keeps its rest.
            for x in &mut expected {
                if start <= x.start && x.start < end && x.end > end {
                    x.start = end;
                }
            }
            expected.retain(|x| !(start <= x.start && x.start < end));
            let hits: Vec<usize> =
                (0..log.len()).filter(|&i| start <= log[i].start && log[i].start < end).collect();
            match hits.as_slice() {
                [] => none += 1,
                [a, .., b] if b - a + 1 != hits.len() => scattered += 1,
                _ => runs += 1,
            }
            let mut got = log;
            supersede(&mut got, start, end);
            let key = |x: &Sent| (x.start, x.end, x.at, x.retransmission);
            assert_eq!(got.iter().map(key).collect::<Vec<_>>(), expected.iter().map(key).collect::<Vec<_>>());
        }
        assert!(
            runs > 300 && scattered > 300 && none > 300,
            "runs {runs}, scattered {scattered}, none {none}"
        );
    }

    /// A flight sent one segment a millisecond, each ACKed 20 ms after it left: once the ACKs
    /// come as steadily as the segments left, each delivery rate sample says one segment a
    /// millisecond (the bytes delivered since its segment left, over the time since then), the
    /// delivered count at its departure counts round trips, and a sample shorter than the
    /// minimum RTT is not valid.
    #[test]
    fn delivery_rate_samples_measure_the_rate_acks_come_back_at() {
        let t0 = Instant::now();
        let mut r = Rack::with_rate_samples();
        r.on_rtt_sample(20 * MS);
        let mut samples = Vec::new();
        for i in 0..80u32 {
            let at = t0 + i * MS;
            r.on_sent(s(i * 100), s(i * 100 + 100), at, false);
            // The ACK of the segment sent 20 ms ago arrives now.
            if i >= 20 {
                r.on_ack(s((i - 19) * 100), at, 100, false, |_, _| false);
                samples.push(r.take_sample().expect("an ACK that delivered gives a sample"));
            }
        }
        assert_eq!(r.take_sample(), None, "taken once");
        let last = samples.last().unwrap();
        // Its segment (the 60th) left at 59 ms, when 39 had been delivered, the last at 58 ms,
        // and the sample before it had come from the segment sent at 38 ms: 21 segments over
        // 21 ms either way.
        assert_eq!((last.delivered, last.interval, last.prior_delivered), (2100, 21 * MS, 3900));
        assert_eq!((last.newly_delivered, last.total_delivered), (100, 6000));
        assert_eq!(last.rtt, Some(20 * MS));
        assert!(!last.app_limited);
        // Too short a sample is not valid: one segment ACKed after 20 ms, a minimum RTT of 30.
        let mut r = Rack::with_rate_samples();
        r.on_rtt_sample(30 * MS);
        r.on_sent(s(0), s(100), t0, false);
        r.on_ack(s(100), t0 + 20 * MS, 100, false, |_, _| false);
        assert_eq!(r.take_sample().map(|x| (x.delivered, x.interval)), Some((100, Duration::ZERO)));
    }

    /// What leaves while the application limits sending is marked, until the data in flight
    /// then is delivered.
    #[test]
    fn app_limited_marks_last_until_the_flight_is_delivered() {
        let t0 = Instant::now();
        let mut r = Rack::with_rate_samples();
        r.on_sent(s(0), s(100), t0, false);
        r.set_app_limited(100);
        r.on_sent(s(100), s(200), t0 + MS, false);
        r.on_ack(s(100), t0 + 10 * MS, 100, false, |_, _| false);
        assert!(!r.take_sample().unwrap().app_limited, "sent before the mark");
        r.on_sent(s(200), s(300), t0 + 11 * MS, false);
        r.on_ack(s(200), t0 + 11 * MS, 100, false, |_, _| false);
        assert!(r.take_sample().unwrap().app_limited, "sent while marked");
        // Delivered past the mark (100 + 100 in flight then): what leaves now is not marked.
        r.on_sent(s(300), s(400), t0 + 12 * MS, false);
        r.on_ack(s(400), t0 + 20 * MS, 100, false, |_, _| false);
        let last = r.take_sample().unwrap();
        assert_eq!(last.total_delivered, 400);
        assert!(!last.app_limited);
    }

    /// A retransmission whose ACK comes back faster than the minimum RTT may be the original's:
    /// no sample, and it does not become RACK's segment.
    #[test]
    fn an_ambiguous_retransmission_is_not_a_sample() {
        let t0 = Instant::now();
        let mut r = Rack::default();
        r.on_rtt_sample(100 * MS);
        r.on_sent(s(0), s(100), t0, false);
        r.on_sent(s(0), s(100), t0 + 150 * MS, true);
        r.on_ack(s(100), t0 + 160 * MS, 100, false, |_, _| false);
        assert_eq!((r.newest, r.rtt), (None, None));
        assert!(r.log.is_empty());
    }
}
