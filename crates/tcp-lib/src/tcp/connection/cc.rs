//! What the congestion controller learns besides the acknowledged bytes: the per-ACK RTT
//! samples and HyStart's verdict (`hystart.rs`), transmissions for their log, the idle time
//! before a restart, a retransmission timeout's fresh start, and SACKed data under reordering.

use std::time::Instant;

use super::Connection;
use crate::tcp::congestion::CongestionControl;
use crate::tcp::hystart::AckInfo;
use crate::tcp::sack::DUP_THRESH;
use crate::wire::SeqNumber;

impl Connection {
    /// An ACK moved SND.UNA to `una` (call before the window grows for it): the RTT sample of
    /// the newest original transmission it covers goes to the controller, and HyStart may end
    /// slow start (ssthresh = cwnd, so that this ACK already grows the window in congestion
    /// avoidance, as Linux's `pkts_acked` hook runs before `cong_avoid`) or, as HyStart++, slow
    /// its growth (Conservative Slow Start). With Linux's RTO estimator, the ACK may also end its
    /// round trip, and without timestamps it gives that estimator its RTT sample: the oldest
    /// original transmission it acknowledged ([`Config::linux_rto`](crate::tcp::Config::linux_rto)).
    pub(super) fn cc_on_ack(&mut self, now: Instant, una: SeqNumber) {
        self.rtt.end_round(una, self.snd.max);
        if !self.slow_start.active() {
            return;
        }
        let verdict = self.slow_start.on_ack(AckInfo {
            una,
            snd_nxt: self.snd.max,
            now,
            cwnd: self.cc.window(),
            ssthresh: self.cc.ssthresh(),
            mss: self.snd.mss,
            srtt: self.rtt.srtt(),
        });
        if self.config.linux_rto
            && !self.ts.ok
            && let Some(rtt) = verdict.oldest
        {
            // Linux's RTT sample of every ACK without timestamps (see `sample_rtt`).
            self.take_rtt_sample(rtt);
        }
        if let Some(rtt) = verdict.sample {
            self.cc.on_delay_sample(rtt, now);
        }
        if let Some(divisor) = verdict.growth_divisor {
            self.cc.set_slow_start_divisor(divisor);
        }
        if verdict.exit && self.cc.window() < self.cc.ssthresh() {
            self.cc.exit_slow_start();
            self.stats.hystart_exits += 1;
        }
    }

    /// After an ACK's SACK blocks and RACK's reordering measure: with
    /// [`Config::grow_on_reordered_sacks`](crate::tcp::Config::grow_on_reordered_sacks), once the
    /// reordering seen exceeds DupThresh, an ACK that SACKs new data without moving SND.UNA grows
    /// the window by what it SACKed (as Linux's `tcp_may_raise_cwnd`: delivery counts whatever
    /// its order when reordering is high; RFC 5681 grows on cumulative ACKs only). Outside
    /// recovery; the cumulative ACK that later covers those bytes does not count them again.
    pub(super) fn cc_on_sack(&mut self, now: Instant, prior_una: SeqNumber, prior_sacked: usize) {
        if !self.config.grow_on_reordered_sacks
            || self.recovery.active
            || self.snd.una != prior_una
            || self.recovery.rack.reordering() <= DUP_THRESH
        {
            return;
        }
        let newly = self.recovery.scoreboard.sacked_bytes().saturating_sub(prior_sacked);
        if newly > 0 {
            self.grow_window(newly, self.snd.mss, now);
        }
    }

    /// New data is about to go with nothing in flight: after more than an RTO without sending,
    /// the restart window ([`Config::restart_after_idle`](crate::tcp::Config::restart_after_idle);
    /// RFC 5681 §4.1, with Linux's `tcp_cwnd_restart` arithmetic: the old cwnd halved once per
    /// RTO idle down to the initial window, ssthresh at least three quarters of the old cwnd
    /// outside a reduction).
    pub(super) fn cc_restart_after_idle(&mut self, now: Instant) {
        // The knob first: this runs before every send with nothing in flight, and the clock
        // arithmetic below is not free.
        if !self.config.restart_after_idle {
            return;
        }
        let Some(last) = self.snd.last_data_sent else { return };
        let rto = self.rtt.rto();
        let mut idle = now.saturating_duration_since(last);
        if idle <= rto || rto.is_zero() {
            return;
        }
        let mss = self.snd.mss.max(1);
        let cwnd = self.cc.window();
        let restart = self.initial_window().min(cwnd);
        let ssthresh = if self.recovery.active || self.recovery.cwr {
            self.cc.ssthresh()
        } else {
            self.cc.ssthresh().max(cwnd / 2 + cwnd / 4)
        };
        let mut segments = cwnd / mss;
        loop {
            idle = idle.saturating_sub(rto);
            if idle.is_zero() || segments * mss <= restart {
                break;
            }
            segments /= 2;
        }
        self.cc.on_restart_window((segments * mss).max(restart), ssthresh);
        // The restarted window is fresh: the idle time no longer counts from the last send.
        self.snd.last_data_sent = Some(now);
        self.stats.idle_restarts += 1;
    }

    /// `start..end` leaves at `now` (before SND.MAX moves past it).
    pub(super) fn cc_on_sent(&mut self, start: SeqNumber, end: SeqNumber, now: Instant) {
        self.snd.last_data_sent = Some(now);
        if !self.slow_start.active() {
            return;
        }
        let retransmission = start < self.snd.max;
        let flight_empty = self.snd.una == self.snd.max;
        if let Some(idle) = self.slow_start.on_sent(start, end, now, retransmission, flight_empty)
            && !idle.is_zero()
        {
            self.cc.on_idle_restart(idle, now);
        }
    }

    /// A retransmission timeout reset the controller: HyStart starts again from SND.NXT.
    pub(super) fn cc_on_rto(&mut self) {
        self.slow_start.restart(self.snd.max);
    }
}
