//! ACK processing of a [`Connection`] (RFC 9293 §3.10.7.4 fifth): the RFC 5961 §5.2 bound, RTT
//! samples, the send window update, and loss detection and recovery: duplicate ACKs, NewReno
//! fast recovery (RFC 6582), the SACK scoreboard and RFC 6675 recovery, early retransmit (RFC
//! 5827) and lost retransmissions.

use std::time::{Duration, Instant};

use super::{Connection, distance};
use crate::tcp::rules;
use crate::wire::{SeqNumber, TcpControl, TcpRepr};

impl Connection {
    pub(super) fn sample_rtt(&mut self, now: Instant, seg: &TcpRepr<'_>, ack: SeqNumber) {
        if self.ts.ok {
            if let Some(ts) = seg.timestamp {
                let ms = self.ts_now(now).wrapping_sub(ts.tsecr);
                // An echo from the future or from long ago is not a measurement.
                if ms < 60_000 {
                    self.rtt.sample(Duration::from_millis(u64::from(ms)));
                }
            }
        } else if let Some((seq, sent)) = self.snd.rtt_timing
            && ack > seq
        {
            self.rtt.sample(now.saturating_duration_since(sent));
            self.snd.rtt_timing = None;
        }
    }

    /// ACK processing (RFC 9293 §3.10.7.4 fifth, RFC 5961 §5, RFC 5681 §3.2, RFC 6582 §3.2).
    /// Returns false when the segment must be dropped.
    pub(super) fn handle_ack(&mut self, now: Instant, seg: &TcpRepr<'_>, ack: SeqNumber) -> bool {
        let highest = self.persist.probe_end.map_or(self.snd.max, |p| self.snd.max.max(p));
        if rules::ack_out_of_range(ack, self.snd.una, highest, self.snd.max_wnd) {
            self.rfc5961_challenge_ack(now);
            return false;
        }
        // An acceptable ACK: the peer is alive, whatever its window says.
        self.persist.unanswered_probes = 0;
        if ack > self.snd.max {
            // The peer took a zero-window probe byte.
            self.snd.max = ack;
        }
        if self.persist.probe_end.is_some_and(|p| ack >= p) {
            self.persist.probe_end = None;
        }
        let window = usize::from(seg.window_len) << self.snd.wscale;
        let mss = self.snd.mss;
        // RFC 6675 §5: the scoreboard takes the SACK blocks first. Blocks at or below the
        // cumulative ACK (D-SACKs, stale blocks) are ignored.
        let new_sack = self.sack_ok
            && !seg.sack_blocks.is_empty()
            && self.recovery.scoreboard.update(&seg.sack_blocks, ack.max(self.snd.una), self.snd.max);
        if ack > self.snd.una {
            let acked = distance(self.snd.una, ack);
            let mut data_acked = acked;
            if !self.snd.syn_acked {
                self.snd.syn_acked = true;
                data_acked -= 1;
            }
            if self.snd.fin_seq.is_some_and(|f| ack > f && self.snd.una <= f) {
                data_acked = data_acked.saturating_sub(1);
            }
            self.snd.stream.dequeue(data_acked);
            self.sample_rtt(now, seg, ack);
            self.snd.retries = 0;
            self.snd.una = ack;
            self.recovery.scoreboard.prune(ack);
            self.recovery.rxt_marks.retain(|&(s, _)| s >= ack);
            if self.snd.nxt < ack {
                self.snd.nxt = ack;
            }
            let flight = distance(self.snd.una, self.snd.max);
            if self.recovery.active {
                if ack >= self.recovery.recover {
                    // RFC 6582 §3.2 step 3, RFC 6675 §5 (the recovery point is covered).
                    self.cc.on_exit_recovery(flight, mss);
                    self.recovery.active = false;
                    self.recovery.rxt_marks.clear();
                } else if self.sack_ok {
                    // RFC 6675: a partial ACK changes no window; the scoreboard chooses what to
                    // retransmit. Without SACK information above it, the segment now at SND.UNA
                    // is presumed lost as in NewReno (it was sent before the retransmission the
                    // peer just acknowledged), unless it was retransmitted in this recovery.
                    if self.recovery.scoreboard.is_empty() && self.recovery.high_rxt <= self.snd.una {
                        self.recovery.fast_rexmit = true;
                        self.stats.fast_retransmits += 1;
                    }
                } else {
                    // A partial ACK: the next hole was lost too (RFC 6582 §3.2 step 5).
                    self.cc.on_partial_ack(data_acked, mss);
                    self.recovery.fast_rexmit = true;
                    self.stats.fast_retransmits += 1;
                }
            } else if data_acked > 0 {
                let srtt = self.rtt.srtt().unwrap_or_default();
                self.cc.on_ack(data_acked, mss, now, srtt);
            }
            self.recovery.dup_acks = 0;
            self.timers.rto = if self.snd.una == self.snd.max { None } else { Some(now + self.rtt.rto()) };
            self.persist.backoff = 0;
        } else if ack == self.snd.una
            && self.snd.nxt != self.snd.una
            && seg.payload.is_empty()
            && seg.control == TcpControl::None
            && window == self.snd.wnd
        {
            // A duplicate ACK (RFC 5681 §2).
            self.stats.dup_acks += 1;
            self.recovery.dup_acks = self.recovery.dup_acks.saturating_add(1);
            if self.recovery.active {
                // NewReno inflates cwnd per duplicate ACK; SACK recovery counts the pipe instead.
                if !self.sack_ok {
                    self.cc.on_recovery_dup_ack(mss);
                }
            } else if self.recovery.dup_acks == 3 && self.recover_passed(ack) {
                self.enter_recovery();
            }
        }
        // RFC 6675 §5 step (1.b): with SACK, loss is also detected when IsLost(HighACK + 1),
        // whatever the ACK carried (data from the peer does not make an ACK a duplicate, but its
        // SACK blocks count); and by early retransmit (RFC 5827) when too little is in flight
        // for three segments to be SACKed. A new recovery starts once HighACK >= RecoveryPoint
        // (RFC 6675 §5).
        if new_sack
            && !self.recovery.active
            && self.snd.una.partial_cmp(&self.recovery.recover) != Some(std::cmp::Ordering::Less)
            && (self
                .recovery
                .scoreboard
                .holes(self.snd.una, self.snd.max, mss)
                .next()
                .is_some_and(|h| h.start == self.snd.una && h.lost)
                || self.early_retransmit())
        {
            self.enter_recovery();
        }
        // A lost retransmission: data sent after the retransmission of the hole at SND.UNA was
        // SACKed (as much as IsLost asks) while the hole stays open. Retransmit it again.
        if new_sack
            && self.recovery.active
            && self
                .recovery
                .rxt_marks
                .iter()
                .find(|&&(s, _)| s == self.snd.una)
                .is_some_and(|&(_, mark)| self.recovery.scoreboard.enough_above(mark, mss))
        {
            self.recovery.rxt_marks.retain(|&(s, _)| s != self.snd.una);
            self.recovery.fast_rexmit = true;
            self.stats.fast_retransmits += 1;
        }
        // Window update (SND.WL1/SND.WL2 rule), for ACKs that are not old.
        if ack >= self.snd.una
            && (self.snd.wl1 < seg.seq_number || (self.snd.wl1 == seg.seq_number && self.snd.wl2 <= ack))
        {
            self.snd.wnd = window;
            self.snd.max_wnd = self.snd.max_wnd.max(window);
            self.snd.wl1 = seg.seq_number;
            self.snd.wl2 = ack;
            if window > 0 {
                self.timers.persist = None;
                self.persist.backoff = 0;
                self.persist.probe_pending = false;
                self.persist.probe_end = None;
            }
        }
        true
    }

    /// RFC 5827 early retransmit with SACK: fewer than four segments are outstanding, no new
    /// data can be sent to draw more ACKs, and everything past the first unacknowledged segment
    /// was SACKed (ER_thresh = outstanding segments - 1).
    fn early_retransmit(&self) -> bool {
        let mss = self.snd.mss;
        let flight = distance(self.snd.una, self.snd.max);
        let sent = distance(self.send_base(), self.snd.max);
        let unsent = self.snd.stream.len().saturating_sub(sent);
        let room = self.snd.wnd.min(self.cc.window()).saturating_sub(flight);
        // The FIN is never SACKed: the data ends before it.
        let data_end = self.snd.fin_seq.filter(|&f| f < self.snd.max).unwrap_or(self.snd.max);
        flight < 4 * mss
            && (unsent == 0 || room < unsent.min(mss))
            && self.recovery.scoreboard.high_sack() == Some(data_end)
            && self.recovery.scoreboard.sacked_bytes() + mss >= flight
    }

    /// Fast retransmit and fast recovery: NewReno (RFC 6582 §3.2 step 2, with the RFC 5681 §3.2
    /// step 3 inflation by the three duplicate ACKs) without SACK, RFC 6675 §5 step (4) with it
    /// (cwnd = ssthresh; the pipe counts what left the network).
    fn enter_recovery(&mut self) {
        let mss = self.snd.mss;
        self.recovery.recover = self.snd.max;
        self.recovery.active = true;
        self.cc.on_enter_recovery(distance(self.snd.una, self.snd.max), mss);
        if !self.sack_ok {
            for _ in 0..3 {
                self.cc.on_recovery_dup_ack(mss);
            }
        }
        self.recovery.high_rxt = self.snd.una;
        self.recovery.rxt_marks.clear();
        self.recovery.fast_rexmit = true;
        self.stats.fast_retransmits += 1;
        self.snd.rtt_timing = None;
    }

    /// Whether `ack` is past the recovery point (RFC 6582 §3.2 step 2: "the cumulative
    /// acknowledgment field covers more than recover"). A recovery point so stale that it is
    /// incomparable counts as passed.
    fn recover_passed(&self, ack: SeqNumber) -> bool {
        ack.partial_cmp(&self.recovery.recover) != Some(std::cmp::Ordering::Less)
            && ack != self.recovery.recover
    }
}
