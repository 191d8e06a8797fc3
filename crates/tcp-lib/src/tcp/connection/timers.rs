//! The clock side of a [`Connection`]: when it next has work ([`Connection::poll_timeout`]) and
//! what its timers do when due ([`Connection::handle_timeout`]): retransmission timeouts with
//! backoff and the retry limit, the delayed ACK, the persist timer, keepalive probes, the end of
//! TIME-WAIT and the pacing's departure times; and the timestamp clock.

use std::time::{Duration, Instant};

use super::{Connection, distance};
use crate::tcp::congestion::CongestionControl;
use crate::tcp::{ConnectionError, State};

impl Connection {
    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) has work, if any.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        // Pairwise, without an array and an iterator over it: the stack asks after every event
        // of every connection.
        #[inline]
        fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, None) => x,
                (None, y) => y,
            }
        }
        let t = &self.timers;
        let retransmit = earlier(earlier(t.rto, t.tlp), t.rack);
        let other = earlier(earlier(t.delayed_ack, t.persist), earlier(t.keepalive, t.time_wait));
        let soonest = earlier(retransmit, other);
        // Only a pacing connection arms the pacing timer.
        if self.config.pacing.is_some() { earlier(soonest, t.pace) } else { soonest }
    }

    /// Runs the timers due at `now`: retransmission, delayed ACK, persist, keepalive, TIME-WAIT.
    /// Follow it with [`poll_transmit`](Self::poll_transmit).
    pub fn handle_timeout(&mut self, now: Instant) {
        let due = |t: Option<Instant>| t.is_some_and(|t| t <= now);
        if due(self.timers.time_wait) {
            self.enter_closed(None);
            return;
        }
        if due(self.timers.pace) {
            // The departure time of data the pacing held: the next poll_transmit sends it.
            self.timers.pace = None;
        }
        if due(self.timers.rack) {
            self.timers.rack = None;
            self.rack_detect(now);
        }
        if due(self.timers.tlp) {
            self.timers.tlp = None;
            self.on_pto(now);
        }
        if due(self.timers.rto) {
            self.timers.rto = None;
            self.timers.tlp = None;
            self.recovery.tlp_out = None;
            self.on_rto(now);
            if self.state == State::Closed {
                return;
            }
        }
        if due(self.timers.delayed_ack) {
            self.timers.delayed_ack = None;
            if self.ack.pending {
                self.ack.now = true;
            }
        }
        if due(self.timers.persist) {
            self.timers.persist = None;
            if self.snd.wnd == 0 {
                self.persist.unanswered_probes += 1;
                if self.persist.unanswered_probes > self.config.max_retransmits {
                    self.enter_closed(Some(ConnectionError::TimedOut));
                    return;
                }
                self.persist.probe_pending = true;
            } else {
                self.persist.force_send = true;
            }
            self.persist.backoff = self.persist.backoff.saturating_add(1);
        }
        if due(self.timers.keepalive) {
            self.timers.keepalive = None;
            if let (Some(ka), State::Established) = (self.config.keepalive, self.state) {
                if self.keepalive.sent >= ka.probes {
                    self.enter_closed(Some(ConnectionError::TimedOut));
                    return;
                }
                self.keepalive.sent += 1;
                self.keepalive.pending = true;
                self.timers.keepalive = Some(now + ka.interval);
            }
        }
    }

    fn on_rto(&mut self, now: Instant) {
        if self.ts.ok {
            self.snd.timeout_ts = self.ts_now(now);
        }
        self.snd.retries += 1;
        let limit = match self.state {
            State::SynSent | State::SynReceived => self.config.syn_retries,
            _ => self.config.max_retransmits,
        };
        if self.snd.retries > limit {
            self.enter_closed(Some(ConnectionError::TimedOut));
            return;
        }
        self.stats.timeouts += 1;
        tracing::debug!(
            local = %self.local,
            remote = %self.remote,
            state = ?self.state,
            una = self.snd.una.get(),
            nxt = self.snd.nxt.get(),
            max = self.snd.max.get(),
            sacked = self.recovery.scoreboard.sacked_bytes(),
            in_recovery = self.recovery.active,
            cwnd = self.cc.window(),
            ssthresh = self.cc.ssthresh(),
            rto = ?self.rtt.rto(),
            retries = self.snd.retries,
            "retransmission timeout"
        );
        self.rtt.back_off();
        self.snd.rtt_timing = None;
        match self.state {
            State::SynSent | State::SynReceived => self.snd.nxt = self.snd.iss,
            _ => {
                let flight = distance(self.snd.una, self.snd.max);
                if flight > 0 {
                    self.cc.on_rto(flight, self.snd.mss);
                    self.cc_on_rto();
                }
                // A recovery ends (fast recovery, or the last timeout's): counted down for the
                // D-SACK-widened reordering window (RFC 8985 §6.2 step 4).
                self.recovery.rack.on_recovery_end();
                // A timeout's reduction is not undone (no F-RTO or Eifel here), and it supersedes
                // the one before it.
                self.recovery.undo = None;
                self.recovery.active = false;
                self.recovery.cwr = false;
                self.recovery.recover = self.snd.max;
                self.recovery.dup_acks = 0;
                self.recovery.fast_rexmit = false;
                self.recovery.resend = None;
                // RFC 6675 §5.1: forget the SACK information (the receiver may have reneged) and
                // go back: resend from the first unacknowledged byte as the window allows. SACK
                // blocks that arrive from now on let the resending skip what they cover.
                self.recovery.scoreboard.clear();
                self.recovery.rxt_marks.clear();
                self.timers.rack = None;
                self.recovery.high_rxt = self.snd.una;
                self.snd.nxt = self.snd.una;
            }
        }
    }

    /// The probe timeout (RFC 8985 §7.3): one probe goes at the next `poll_transmit`, and the
    /// RTO restarts from now.
    fn on_pto(&mut self, now: Instant) {
        if self.snd.una < self.snd.max && !self.recovery.active && self.recovery.tlp_out.is_none() {
            self.recovery.tlp_pending = true;
            self.stats.tail_loss_probes += 1;
            tracing::debug!(local = %self.local, remote = %self.remote, una = self.snd.una.get(), max = self.snd.max.get(), "tail loss probe");
            self.timers.rto = Some(now + self.rtt.rto());
        }
    }

    /// Arms the probe timeout (RFC 8985 §7.2) when tail loss probes are on, data is outstanding,
    /// no recovery or probe is under way and an RTT was measured: two SRTTs, plus the worst-case
    /// delayed ACK (200 ms) when one segment is in flight or else 2 ms of timer slack (Linux's
    /// choice), and no later than the RTO (the probe goes first then).
    pub(super) fn arm_tlp(&mut self, now: Instant) {
        self.timers.tlp = None;
        if !self.config.tail_loss_probe {
            return;
        }
        let sending = matches!(
            self.state,
            State::Established | State::CloseWait | State::FinWait1 | State::Closing | State::LastAck
        );
        if !sending || self.recovery.active || self.recovery.tlp_out.is_some() || self.snd.una >= self.snd.max
        {
            return;
        }
        let Some(srtt) = self.rtt.srtt_nanos() else { return };
        let one_segment = distance(self.snd.una, self.snd.max) <= self.snd.mss;
        // In nanoseconds: SRTT is at most 60 s, so the sum cannot overflow.
        let pto = Duration::from_nanos(2 * srtt + if one_segment { 200_000_000 } else { 2_000_000 });
        let at = now + pto;
        self.timers.tlp = Some(self.timers.rto.map_or(at, |rto| at.min(rto)));
    }

    pub(super) fn arm_keepalive(&mut self, now: Instant) {
        if let Some(ka) = self.config.keepalive {
            self.timers.keepalive = Some(now + ka.idle);
            self.keepalive.sent = 0;
        }
    }

    /// The timestamp clock: milliseconds since the connection was created, plus the offset.
    pub(super) fn ts_now(&mut self, now: Instant) -> u32 {
        let (at, ms) = self.ts.read;
        if now == at {
            return ms.wrapping_add(self.ts.offset);
        }
        let d = now.saturating_duration_since(self.ts.epoch);
        // Milliseconds modulo 2^32 (RFC 7323's clock wraps), without `as_millis`' 128-bit product.
        #[allow(clippy::cast_possible_truncation, reason = "the clock wraps at 2^32 by design")]
        let ms = d.as_secs().wrapping_mul(1000).wrapping_add(u64::from(d.subsec_millis())) as u32;
        self.ts.read = (now, ms);
        ms.wrapping_add(self.ts.offset)
    }
}
