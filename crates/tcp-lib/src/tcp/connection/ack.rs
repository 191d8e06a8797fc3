//! ACK processing of a [`Connection`] (RFC 9293 §3.10.7.4 fifth): the RFC 5961 §5.2 bound, RTT
//! samples, the send window update, and loss detection and recovery: duplicate ACKs, NewReno
//! fast recovery (RFC 6582), the SACK scoreboard and RFC 6675 recovery, early retransmit (RFC
//! 5827) and lost retransmissions; and Proportional Rate Reduction (RFC 6937, "Proportional Rate
//! Reduction for TCP", 2013, and RFC 9937, "Proportional Rate Reduction (PRR)", 2025, which
//! obsoletes it), which decides how much every ACK in recovery (or in an ECN reduction by PRR,
//! Linux's CWR state) lets the output send.

use std::time::{Duration, Instant};

use super::{Connection, distance};
use crate::tcp::congestion::{CongestionAlgorithm, CongestionControl, RateSample};
use crate::tcp::rules;
use crate::tcp::undo::Undo;
use crate::wire::tcp::{SackBlock, SackBlocks};
use crate::wire::{SeqNumber, TcpControl, TcpRepr};

/// What PRR needs to know of the state before an ACK (see [`Connection::prr_after_ack`]).
struct PriorAck {
    /// SND.UNA.
    una: SeqNumber,
    /// The SACKed bytes.
    sacked: usize,
    /// The end of the highest hole deemed lost, if any.
    lost_end: Option<SeqNumber>,
    /// Whether a fast retransmission was pending.
    rexmit: bool,
}

impl Connection {
    /// Takes the RTT sample an acceptable ACK carries, if any: the echoed timestamp (RFC 7323
    /// §4.1's RTTM), else the timed segment.
    ///
    /// After a retransmission timeout, an echo of a TSval sent before the last timeout is no
    /// sample (Karn's rule, kept where timestamps would lift it). The peer echoes the TSval of
    /// the segment that last advanced its ACK (RFC 7323 §4.3), so when our ACK of the original
    /// was lost, the ACK our retransmission draws echoes the original (or an earlier
    /// retransmission): it measured the timer's wait, not the path. Taken, each such sample
    /// makes the next RTO longer than the last (SRTT and RTTVAR swell by the wait), and under
    /// steady ACK loss the connection waits out ever longer timers. Linux takes these samples;
    /// without them the backoff stays until an ACK of data sent after the timeout gives a
    /// sample, as RFC 6298 §5 has it.
    pub(super) fn sample_rtt(&mut self, now: Instant, seg: &TcpRepr<'_>, ack: SeqNumber) {
        if self.ts.ok {
            if let Some(ts) = seg.timestamp {
                let ms = self.ts_now(now).wrapping_sub(ts.tsecr);
                #[allow(clippy::cast_possible_wrap, reason = "a wrapping comparison")]
                let before_timeout =
                    self.snd.retries > 0 && (self.snd.timeout_ts.wrapping_sub(ts.tsecr) as i32) > 0;
                // An echo from the future or from long ago is not a measurement.
                if ms < 60_000 && !before_timeout {
                    self.take_rtt_sample(Duration::from_millis(u64::from(ms)));
                }
            }
        } else if let Some((seq, sent)) = self.snd.rtt_timing
            && ack > seq
            && (seq == self.snd.iss || !self.config.linux_rto)
        {
            // One timed segment per round trip (RFC 6298, Karn's algorithm); with Linux's RTO
            // estimator, only the SYN: every ACK of data gives a sample (`cc_on_ack`).
            self.take_rtt_sample(now.saturating_duration_since(sent));
            self.snd.rtt_timing = None;
        }
    }

    pub(super) fn take_rtt_sample(&mut self, rtt: Duration) {
        self.rtt.sample(rtt);
        if self.config.rack {
            self.recovery.rack.on_rtt_sample(rtt);
        }
    }

    /// RACK (RFC 8985 §6.2) after an ACK: the delivered transmissions update its clock, then
    /// loss detection.
    fn rack_on_ack(&mut self, now: Instant) {
        let scoreboard = &self.recovery.scoreboard;
        let order = self.config.rack_rtt_sequence_order;
        self.recovery.rack.on_ack(self.snd.una, now, self.snd.mss, order, |a, b| {
            scoreboard.sacked_end(a).is_some_and(|e| b <= e)
        });
        self.rack_detect(now);
    }

    /// RACK's loss detection (RFC 8985 §6.2 step 5, and §6.3 when its timer fires): marks what it
    /// deems lost in the scoreboard, arms the reordering timer for the rest, and starts recovery
    /// when the data at SND.UNA is lost and none is under way.
    pub(super) fn rack_detect(&mut self, now: Instant) {
        let mss = self.snd.mss;
        let sacked = self.recovery.scoreboard.sacked_bytes();
        let plain = self.recovery.active || sacked >= super::super::sack::DUP_THRESH * mss;
        let srtt = self.rtt.srtt().unwrap_or(Duration::MAX);
        let reo_wnd = self.recovery.rack.reo_wnd(plain, srtt);
        let marked = self.recovery.scoreboard.lost_below().unwrap_or(self.snd.una);
        let detected = self.recovery.rack.detect(now, reo_wnd, marked);
        let lost = detected.lost_below;
        if lost > self.snd.una && lost > marked {
            self.recovery.scoreboard.mark_lost_below(lost);
        }
        self.timers.rack = detected.timer;
        // A retransmission was lost too: it goes again now rather than at the RTO. The one of
        // the segment at SND.UNA as a fast retransmission; one above it before NextSeg's holes,
        // which start at HighRxt, above it (Linux resends every segment RACK marks lost).
        self.recovery.resend = None;
        if self.recovery.active
            && let Some((start, _)) = detected.lost_retransmission
        {
            if start <= self.snd.una {
                if !self.recovery.fast_rexmit {
                    self.recovery.fast_rexmit = true;
                    self.stats.fast_retransmits += 1;
                }
                self.recovery.resend = detected.next_lost_retransmission;
            } else {
                self.recovery.resend = detected.lost_retransmission;
            }
        }
        if !self.recovery.active
            && self.snd.una.partial_cmp(&self.recovery.recover) != Some(std::cmp::Ordering::Less)
            && self
                .recovery
                .scoreboard
                .holes(self.snd.una, self.snd.max, mss)
                .next()
                .is_some_and(|h| h.start == self.snd.una && h.lost)
        {
            self.enter_recovery();
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
        // What PRR needs of the ACK (RFC 9937 §4): the SACKed bytes and SND.UNA before it gives
        // DeliveredData, and the highest lost byte before it whether it shows a new loss.
        let prior_una = self.snd.una;
        let prior_sacked = self.recovery.scoreboard.sacked_bytes();
        let prior_lost_end = (self.recovery.active && self.sack_ok && !seg.sack_blocks.is_empty())
            .then(|| self.recovery.scoreboard.lost_end(prior_una, self.snd.max, mss))
            .flatten();
        let prior_rexmit = self.recovery.fast_rexmit;
        // An ECN echo that starts a reduction by PRR (Config::ecn_prr): this ACK reduces the
        // window instead of growing it (as Linux enters CWR before its congestion control runs).
        let ece_prr = self.config.ecn_prr
            && self.ecn.ok
            && seg.ece
            && !self.recovery.active
            && ack.max(self.snd.una) > self.ecn.reduced_until;
        // DeliveredData without SACK: estimated from duplicate ACKs (RFC 6937 §3).
        let mut reno_delivered = 0;
        let (new_sack, dsack) = if self.sack_ok && !seg.sack_blocks.is_empty() {
            self.take_sack_blocks(seg, ack)
        } else {
            (false, false)
        };
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
            self.cc_on_ack(now, ack);
            self.snd.retries = 0;
            self.snd.una = ack;
            let pruned = self.recovery.scoreboard.prune(ack);
            // Bytes SACKed before this ACK covered them were delivered already: only the rest is
            // new to the congestion control (as Linux counts delivered segments). Without SACK,
            // each duplicate ACK stood for one delivered segment (RFC 6937 §3's estimate); the ACK
            // still delivers at least one.
            let delivered_before = if self.sack_ok {
                pruned
            } else {
                (self.recovery.dup_acks as usize * mss).min(data_acked.saturating_sub(mss))
            };
            self.recovery.rxt_marks.retain(|&(s, _)| s >= ack);
            if self.snd.nxt < ack {
                self.snd.nxt = ack;
            }
            if self.recovery.active {
                reno_delivered = self.new_ack_in_recovery(ack, acked);
            } else {
                if self.recovery.cwr && ack > self.ecn.reduced_until {
                    self.end_cwr();
                }
                if !self.recovery.cwr && !ece_prr && data_acked > delivered_before {
                    self.grow_window(data_acked - delivered_before, mss, now);
                }
            }
            self.recovery.dup_acks = 0;
            self.timers.rto = if self.snd.una == self.snd.max { None } else { Some(now + self.rtt.rto()) };
            // RFC 8985 §7.2: the probe timeout restarts with every ACK of new data, as the RTO
            // does (a flow whose ACKs keep coming is not at a tail).
            self.arm_tlp(now);
            self.persist.backoff = 0;
        } else if ack == self.snd.una
            && self.snd.nxt != self.snd.una
            && seg.payload.is_empty()
            && seg.control == TcpControl::None
            && window == self.snd.wnd
            // An ACK whose only SACK news is a duplicate the peer received says nothing left the
            // network since the last (RFC 6675 §2: a DupAck SACKs bytes not SACKed before).
            && (new_sack || !dsack)
        {
            reno_delivered = self.duplicate_ack(ack);
        }
        if let Some(probe) = self.recovery.tlp_out {
            let pure_duplicate = ack == prior_una && seg.sack_blocks.is_empty() && seg.payload.is_empty();
            self.tlp_on_ack(probe, ack, pure_duplicate);
        }
        if self.config.rack && self.sack_ok {
            self.rack_on_ack(now);
        } else if self.config.rack && self.config.congestion == CongestionAlgorithm::Bbr && ack > prior_una {
            self.rate_samples_without_sack(now);
        }
        self.cc_on_sack(now, prior_una, prior_sacked);
        // RFC 6675 §5 step (1.b): with SACK, loss is also detected when IsLost(HighACK + 1),
        // whatever the ACK carried (data from the peer does not make an ACK a duplicate, but its
        // SACK blocks count); and by early retransmit (RFC 5827) when too little is in flight
        // for three segments to be SACKed, unless RACK is on: its reordering window covers that
        // case (RFC 8985 §3.4, as Linux, which dropped early retransmit for RACK in 4.14). A new
        // recovery starts once HighACK >= RecoveryPoint (RFC 6675 §5).
        if new_sack {
            self.loss_from_sack();
        }
        // ECN (RFC 3168 §6.1.2): an echo of congestion reduces the window as a loss would,
        // without a retransmission, once per window of data (the ACK must cover data sent after
        // the last reduction, which carried our CWR) and not inside loss recovery (which reduced
        // it already).
        // With Config::ecn_prr, PRR brings the flight down to the new ssthresh over the next
        // round trip (RFC 9937), from this ACK on.
        if self.ecn.ok && seg.ece && !self.recovery.active && self.snd.una > self.ecn.reduced_until {
            self.ecn_reduce();
        }
        if self.recovery.active || self.recovery.cwr {
            let prior = PriorAck {
                una: prior_una,
                sacked: prior_sacked,
                lost_end: prior_lost_end,
                rexmit: prior_rexmit,
            };
            self.prr_after_ack(seg, &prior, reno_delivered);
        }
        if self.config.congestion == CongestionAlgorithm::Bbr {
            self.cc_on_rate_sample(now);
        }
        self.update_window(seg.seq_number, ack, window);
        true
    }

    /// Without SACK, RACK detects nothing, but its log still gives BBR its samples, from what
    /// the cumulative ACK delivered.
    #[cold]
    #[inline(never)]
    fn rate_samples_without_sack(&mut self, now: Instant) {
        let order = self.config.rack_rtt_sequence_order;
        self.recovery.rack.on_ack(self.snd.una, now, self.snd.mss, order, |_, _| false);
    }

    /// The delivery rate sample this ACK gave, if it delivered data, to the congestion control
    /// (after the loss detection and recovery of the ACK, as Linux's `tcp_cong_control`), then
    /// the end of the ACK.
    #[cold]
    #[inline(never)]
    fn cc_on_rate_sample(&mut self, now: Instant) {
        if let Some(s) = self.recovery.rack.take_sample() {
            let rs = RateSample { in_flight: self.recovery_pipe(), mss: self.snd.mss, ..s };
            self.cc.on_rate_sample(&rs, now);
        }
        self.cc.on_ack_done();
    }

    /// The end of the episode of the probe outstanding, `(end, retransmission)` (RFC 8985 §7.4,
    /// as Linux's `tcp_process_tlp_ack`) on an ACK of `ack` (`pure_duplicate`: it moved nothing, SACKed nothing and carried no
    /// data). A probe of new data ends once the ACK covers it. A probe that resent the last
    /// segment ends on an ACK past it, which says the probe repaired a loss: the window is
    /// reduced as for one; or on a pure duplicate ACK at it, which says the original and the
    /// probe both arrived. Until then no other probe goes, and without this end none would go
    /// again before the next RTO, whatever the losses at the tail.
    #[cold]
    #[inline(never)]
    fn tlp_on_ack(&mut self, (end, retransmission): (SeqNumber, bool), ack: SeqNumber, pure_duplicate: bool) {
        if ack < end {
            return;
        }
        if !retransmission {
            self.recovery.tlp_out = None;
        } else if ack > end {
            self.recovery.tlp_out = None;
            // (BBR takes no loss for congestion: its window stays, as Linux's BBR ignores the
            // CWR state this enters there.)
            if !self.recovery.active && !self.recovery.cwr && !self.cc.owns_recovery_window() {
                self.cc.on_enter_recovery(self.cc.window(), self.snd.mss);
                self.stats.tlp_recoveries += 1;
            }
        } else if pure_duplicate {
            self.recovery.tlp_out = None;
        }
    }

    /// The window update (RFC 9293 §3.10.7.4, the SND.WL1/SND.WL2 rule) for an ACK of `ack`
    /// on a segment at `seq` offering `window` bytes (scaled): taken when the ACK is not old
    /// and the segment not older than the last that updated the window.
    #[inline]
    pub(super) fn update_window(&mut self, seq: SeqNumber, ack: SeqNumber, window: usize) {
        if ack >= self.snd.una && (self.snd.wl1 < seq || (self.snd.wl1 == seq && self.snd.wl2 <= ack)) {
            self.snd.wnd = window;
            self.snd.max_wnd = self.snd.max_wnd.max(window);
            self.snd.wl1 = seq;
            self.snd.wl2 = ack;
            if window > 0 {
                self.timers.persist = None;
                self.persist.backoff = 0;
                self.persist.probe_pending = false;
                self.persist.probe_end = None;
            }
        }
    }

    /// RFC 6675 §5: the scoreboard takes the SACK blocks of `seg` (there are some) first.
    /// Blocks at or below the cumulative ACK (D-SACKs, stale blocks) are ignored. Returns
    /// whether the scoreboard learned something, and whether the first block was a D-SACK
    /// ([`on_dsack`](Self::on_dsack)). Out of line, as every branch below that only loss,
    /// reordering or ECN takes: a transaction's ACKs carry no SACK blocks, and the code they
    /// run should fit the instruction cache.
    #[cold]
    #[inline(never)]
    fn take_sack_blocks(&mut self, seg: &TcpRepr<'_>, ack: SeqNumber) -> (bool, bool) {
        let dsack = is_dsack(seg.sack_blocks.as_slice(), ack);
        if dsack {
            self.on_dsack(seg.sack_blocks.as_slice()[0]);
        }
        let whole;
        let blocks = if self.config.sack_in_segments && self.config.rack {
            whole = self.whole_segment_blocks(&seg.sack_blocks);
            &whole
        } else {
            &seg.sack_blocks
        };
        let new = !blocks.is_empty()
            && self.recovery.scoreboard.update(blocks, ack.max(self.snd.una), self.snd.max);
        (new, dsack)
    }

    /// The peer received `block` twice (RFC 2883): a retransmission of ours was spurious, or the
    /// network duplicated a segment. Counted ([`Stats::dsacks_received`]); with RACK, its
    /// reordering window grows (RFC 8985 §6.2 step 4); and when it names the last of the
    /// retransmissions a window reduction made, the reduction is undone, at once or, in
    /// recovery, when the recovery ends ([`Config::dsack_undo`]).
    ///
    /// [`Stats::dsacks_received`]: crate::tcp::Stats::dsacks_received
    /// [`Config::dsack_undo`]: crate::tcp::Config::dsack_undo
    fn on_dsack(&mut self, block: SackBlock) {
        self.stats.dsacks_received += 1;
        if self.config.rack {
            self.recovery.rack.on_dsack(self.snd.una, self.snd.nxt);
        }
        if self.recovery.undo.as_mut().is_some_and(|u| u.dsacked(block.left, block.right))
            && !self.recovery.active
        {
            self.undo_reduction();
        }
    }

    /// The last window reduction was spurious: cwnd and ssthresh go back to their values before
    /// it (`tcp/undo.rs`). Called outside recovery only: in recovery, PRR paces the flight down
    /// to ssthresh and the exit sets cwnd to it, so the undo waits for the exit.
    fn undo_reduction(&mut self) {
        let Some(u) = self.recovery.undo.take() else { return };
        let (cwnd, ssthresh) = u.prior();
        self.cc.on_undo(cwnd, ssthresh);
        self.stats.dsack_undos += 1;
        tracing::debug!(local = %self.local, remote = %self.remote, cwnd = self.cc.window(), "window reduction undone");
    }

    /// An ACK of new data (`acked` bytes, up to `ack`) in loss recovery. Returns the bytes it
    /// delivers without SACK (RFC 6937 §3's estimate), else 0.
    #[cold]
    #[inline(never)]
    fn new_ack_in_recovery(&mut self, ack: SeqNumber, acked: usize) -> usize {
        let mss = self.snd.mss;
        if ack >= self.recovery.recover {
            // RFC 6582 §3.2 step 3, RFC 6675 §5 (the recovery point is covered); cwnd =
            // ssthresh (RFC 9937 §4: PRR brought the flight there).
            self.cc.on_exit_recovery();
            self.recovery.rack.on_recovery_end();
            if self.recovery.undo.as_ref().is_some_and(|u| u.proven()) {
                self.undo_reduction();
            }
            tracing::debug!(local = %self.local, remote = %self.remote, una = ack.get(), cwnd = self.cc.window(), "fast recovery ends");
            self.recovery.active = false;
            // The marks of retransmissions still out stay for the next recovery (see
            // `enter_recovery`); the cumulative ACK prunes them.
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
            // A partial ACK: the next hole was lost too (RFC 6582 §3.2 step 5). What
            // the duplicate ACKs already counted as delivered is not counted again, but
            // the ACK delivers at least one SMSS (as Linux's tcp_remove_reno_sacks).
            let counted = self.recovery.dup_delivered.min(acked - acked.min(mss));
            self.recovery.dup_delivered -= counted;
            self.recovery.fast_rexmit = true;
            self.stats.fast_retransmits += 1;
            return acked - counted;
        }
        0
    }

    /// The peer acknowledged data sent after an ECN reduction began (which carried our CWR):
    /// it ends with cwnd = ssthresh (Linux's tcp_end_cwnd_reduction).
    #[cold]
    #[inline(never)]
    fn end_cwr(&mut self) {
        self.cc.on_exit_recovery();
        self.recovery.cwr = false;
    }

    /// A duplicate ACK (RFC 5681 §2) of `ack`. Returns the bytes it delivers without SACK (RFC
    /// 6937 §3's estimate), else 0.
    #[cold]
    #[inline(never)]
    fn duplicate_ack(&mut self, ack: SeqNumber) -> usize {
        let mss = self.snd.mss;
        self.stats.dup_acks += 1;
        self.recovery.dup_acks = self.recovery.dup_acks.saturating_add(1);
        if self.recovery.active {
            // Without SACK a duplicate ACK says one SMSS left the network (RFC 6937 §3), as
            // long as the duplicate ACKs do not add up to more than the flight (a peer
            // cannot clock out data with duplicate ACKs alone). With SACK, the blocks say.
            if !self.sack_ok {
                let flight = distance(self.snd.una, self.snd.max);
                // A partial ACK may have left the estimate above what is still in flight:
                // it never shrinks here, and this ACK then delivers nothing more.
                let before = self.recovery.dup_delivered;
                self.recovery.dup_delivered = (before + mss).min(flight).max(before);
                return self.recovery.dup_delivered - before;
            }
        } else if self.recovery.dup_acks == 3 && self.recover_passed(ack) {
            self.enter_recovery();
            return mss;
        }
        0
    }

    /// Loss detection after an ACK whose SACK blocks told the scoreboard something new (RFC 6675
    /// §5 step (1.b), early retransmit, a lost retransmission).
    #[cold]
    #[inline(never)]
    fn loss_from_sack(&mut self) {
        let mss = self.snd.mss;
        if !self.recovery.active
            && self.snd.una.partial_cmp(&self.recovery.recover) != Some(std::cmp::Ordering::Less)
            && (self
                .recovery
                .scoreboard
                .holes(self.snd.una, self.snd.max, mss)
                .next()
                .is_some_and(|h| h.start == self.snd.una && h.lost)
                || (!self.config.rack && self.early_retransmit()))
        {
            self.enter_recovery();
        }
        // A lost retransmission: data sent after the retransmission of the hole at SND.UNA was
        // SACKed (as much as IsLost asks) while the hole stays open. Retransmit it again.
        if self.recovery.active
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
    }

    /// An ECN echo outside recovery that covers data sent after the last reduction.
    #[cold]
    #[inline(never)]
    fn ecn_reduce(&mut self) {
        // A reduction for congestion the network reported, which no D-SACK undoes; nor, after
        // it, one before it.
        self.recovery.undo = None;
        self.ecn.reduced_until = self.snd.max;
        self.ecn.cwr_pending = true;
        self.stats.ecn_reductions += 1;
        if self.cc.owns_recovery_window() {
            // BBR (v1) does not respond to ECN: the peer is told (CWR) and the window stays.
            return;
        }
        // RFC 3168 §6.1.2 halves cwnd; RFC 5681's reduction (the default) starts from the
        // flight. With PRR the reduction starts from cwnd, as Linux's does.
        let from = if self.config.ecn_prr { self.cc.window() } else { distance(self.snd.una, self.snd.max) };
        self.cc.on_enter_recovery(from, self.snd.mss);
        // (With nothing in flight there is nothing to pace, and no ACK would come to let
        // new data out: the reduction is at once.)
        if self.config.ecn_prr && self.snd.una != self.snd.max {
            self.recovery.cwr = true;
            self.recovery.dup_delivered = 0;
            self.start_prr();
        }
    }

    /// PRR's part of an ACK in recovery or in an ECN reduction by PRR (RFC 9937 §4): how much
    /// it delivered, and whether it was safe.
    #[cold]
    #[inline(never)]
    fn prr_after_ack(&mut self, seg: &TcpRepr<'_>, prior: &PriorAck, reno_delivered: usize) {
        let mss = self.snd.mss;
        let delivered = if self.sack_ok {
            // RFC 6937 §3: the change in SND.UNA plus the change in SACKed bytes.
            (distance(prior.una, self.snd.una) + self.recovery.scoreboard.sacked_bytes())
                .saturating_sub(prior.sacked)
        } else if self.recovery.active {
            reno_delivered
        } else {
            // An ECN reduction without SACK: what the cumulative ACK covers.
            distance(prior.una, self.snd.una)
        };
        // "Further losses" (RFC 9937 §4): a hole newly deemed lost, or a retransmission
        // this ACK called for (a lost retransmission, a NewReno partial ACK).
        let lost_end = (self.sack_ok && !seg.sack_blocks.is_empty())
            .then(|| self.recovery.scoreboard.lost_end(self.snd.una, self.snd.max, mss))
            .flatten();
        let newly_lost = (self.recovery.fast_rexmit && !prior.rexmit)
            || lost_end.is_some_and(|e| prior.lost_end.is_none_or(|p| e > p));
        let safe_ack = self.snd.una > prior.una && !newly_lost;
        self.prr_on_ack(delivered, safe_ack);
    }

    /// `blocks` cut to the whole segments they cover, as sent ([`Config::sack_in_segments`]).
    ///
    /// [`Config::sack_in_segments`]: crate::tcp::Config::sack_in_segments
    fn whole_segment_blocks(&self, blocks: &SackBlocks) -> SackBlocks {
        let mut whole = SackBlocks::new();
        for b in blocks.as_slice() {
            if let Some((left, right)) = self.recovery.rack.whole_segments(b.left, b.right) {
                whole.push(SackBlock { left, right });
            }
        }
        whole
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

    /// Fast retransmit and fast recovery: NewReno (RFC 6582 §3.2 step 2) without SACK, RFC 6675
    /// §5 step (4) with it; cwnd = ssthresh, and PRR starts (RFC 9937 §4): RecoverFS = pipe,
    /// prr_delivered = prr_out = 0. The fast retransmission goes whatever PRR says (RFC 9937 §4
    /// forces it too) and counts in prr_out.
    fn enter_recovery(&mut self) {
        let mss = self.snd.mss;
        let flight = distance(self.snd.una, self.snd.max);
        tracing::debug!(
            local = %self.local,
            remote = %self.remote,
            una = self.snd.una.get(),
            max = self.snd.max.get(),
            sacked = self.recovery.scoreboard.sacked_bytes(),
            cwnd = self.cc.window(),
            "fast recovery begins"
        );
        self.recovery.recover = self.snd.max;
        self.recovery.active = true;
        self.stats.recoveries += 1;
        // Without SACK, the three duplicate ACKs were three segments delivered.
        self.recovery.dup_delivered = if self.sack_ok { 0 } else { (3 * mss).min(flight) };
        // Retransmissions of the recovery before are still out when HighRxt lies above SND.UNA:
        // that recovery ended when the ACK passed its recovery point, and this one begins on
        // losses of data sent since, while the holes it resent from SND.UNA up to HighRxt are
        // on their way. They are not sent again (HighRxt stays, and so do their marks); one of
        // them lost again is found as any lost retransmission is: by RACK wherever it lies
        // (`rack_detect`), else by the SACKs above its mark once it reaches SND.UNA. Linux keeps
        // the same memory per segment (`TCPCB_SACKED_RETRANS`). Starting over from SND.UNA sent
        // each of them again a round trip early; their deliveries, a moment after they left,
        // ended BBR's rounds early (`tests::rack`, and BENCHMARKS.md, "Lost retransmissions").
        let resent = self.sack_ok && self.recovery.high_rxt > self.snd.una;
        if !resent {
            self.recovery.high_rxt = self.snd.una;
            self.recovery.rxt_marks.clear();
        }
        let cwr = std::mem::take(&mut self.recovery.cwr);
        // What undoing this reduction needs (`Config::dsack_undo`): none where the window is not
        // reduced here (an ECN reduction continued, which is no loss to undo; BBR's window).
        let undo = (self.config.dsack_undo && self.sack_ok && !cwr && !self.cc.owns_recovery_window())
            .then(|| Undo::new(self.snd.una, self.cc.window(), self.cc.ssthresh()));
        match (undo, &mut self.recovery.undo) {
            (Some(new), Some(slot)) => **slot = new,
            (new, slot) => *slot = new.map(Box::new),
        }
        if !cwr {
            self.cc.on_enter_recovery(flight, mss);
            self.start_prr();
        }
        // Else an ECN reduction by PRR is under way: recovery continues it, with its ssthresh
        // and its PRR counts, instead of reducing again (Linux's tcp_enter_recovery from CWR).
        if !resent {
            self.recovery.fast_rexmit = true;
            self.stats.fast_retransmits += 1;
        }
        self.snd.rtt_timing = None;
    }

    /// PRR starts (RFC 9937 §4): RecoverFS = pipe, prr_delivered = prr_out = 0.
    fn start_prr(&mut self) {
        self.recovery.recover_fs = self.recovery_pipe();
        self.recovery.prr_delivered = 0;
        self.recovery.prr_out = 0;
        self.recovery.sndcnt = 0;
    }

    /// PRR on an ACK in recovery that reported `delivered` bytes delivered (DeliveredData): how
    /// much the output may now send, `sndcnt` (RFC 6937 §3, RFC 9937 §4). While the pipe is
    /// above ssthresh, the proportional part: sending keeps pace with delivery at the ratio
    /// ssthresh / RecoverFS, so the flight comes down to ssthresh by the end of recovery. At or
    /// below ssthresh, the reduction bound: the conservative bound (PRR-CRB, packet
    /// conservation: what was delivered), plus one SMSS on a `safe_ack` (SND.UNA advanced and
    /// no further loss: PRR-SSRB, a slow start back up to ssthresh), never past ssthresh. This
    /// is RFC 9937's choice between the bounds, and Linux's `tcp_cwnd_reduction`. An ACK that
    /// delivers nothing leaves what the previous one allowed (RFC 9937 §6.2).
    fn prr_on_ack(&mut self, delivered: usize, safe_ack: bool) {
        if delivered == 0 {
            return;
        }
        let r = &mut self.recovery;
        r.prr_delivered = r.prr_delivered.saturating_add(delivered);
        let pipe = self.recovery_pipe();
        let ssthresh = self.cc.ssthresh();
        let r = &mut self.recovery;
        r.sndcnt = if pipe > ssthresh {
            r.prr_delivered.saturating_mul(ssthresh).div_ceil(r.recover_fs.max(1)).saturating_sub(r.prr_out)
        } else {
            let bound = r.prr_delivered.saturating_sub(r.prr_out).max(delivered);
            let bound = if safe_ack { bound.saturating_add(self.snd.mss) } else { bound };
            bound.min(ssthresh - pipe)
        };
    }

    /// Whether `ack` is past the recovery point (RFC 6582 §3.2 step 2: "the cumulative
    /// acknowledgment field covers more than recover"). A recovery point so stale that it is
    /// incomparable counts as passed.
    fn recover_passed(&self, ack: SeqNumber) -> bool {
        ack.partial_cmp(&self.recovery.recover) != Some(std::cmp::Ordering::Less)
            && ack != self.recovery.recover
    }

    /// Reports `acked` newly acknowledged bytes to the congestion control outside recovery. In
    /// slow start an ACK grows the window by at most one SMSS (RFC 5681 §3.1) unless
    /// [`Config::slow_start_segments_per_ack`](crate::tcp::Config::slow_start_segments_per_ack)
    /// allows more: then each SMSS it covers, up to that many, counts as an ACK of its own. With
    /// [`Config::cwnd_validation`](crate::tcp::Config::cwnd_validation) an application-limited
    /// sender's window does not grow.
    pub(super) fn grow_window(&mut self, acked: usize, mss: usize, now: Instant) {
        let srtt = self.rtt.srtt().unwrap_or_default();
        let slow_start = self.cc.window() < self.cc.ssthresh();
        if self.config.cwnd_validation
            && !self.snd.cwnd_limited
            && !(slow_start && self.cc.window() < 2 * self.snd.max_flight)
        {
            // Application-limited: the window was not used, so an ACK does not grow it.
            return;
        }
        let limit = self.config.slow_start_segments_per_ack;
        if limit <= 1 || self.cc.window() >= self.cc.ssthresh() {
            self.cc.on_ack(acked, mss, now, srtt);
            return;
        }
        let mut left = acked;
        for _ in 0..limit {
            if left == 0 || self.cc.window() >= self.cc.ssthresh() {
                break;
            }
            let n = left.min(mss);
            self.cc.on_ack(n, mss, now, srtt);
            left -= n;
        }
        if left > 0 && self.cc.window() >= self.cc.ssthresh() {
            // Slow start ended inside this ACK: the rest counts in congestion avoidance.
            self.cc.on_ack(left, mss, now, srtt);
        }
    }
}

/// Whether the first of an ACK's SACK `blocks` (there is one) is a D-SACK (RFC 2883 §4): it
/// starts below the cumulative `ack`, or lies inside the second block. Linux's test
/// (`tcp_check_dsack`).
fn is_dsack(blocks: &[SackBlock], ack: SeqNumber) -> bool {
    let first = blocks[0];
    first.left < ack || blocks.get(1).is_some_and(|b| b.left <= first.left && first.right <= b.right)
}
