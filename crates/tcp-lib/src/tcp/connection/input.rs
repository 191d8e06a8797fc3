//! The receiving half of a [`Connection`]: the peer's SYN and the options it negotiates,
//! SYN-SENT processing, and the RFC 9293 §3.10.7.4 processing of every segment on a
//! synchronized connection (PAWS, acceptability, RST and SYN with RFC 5961 challenge ACKs,
//! TS.Recent, in-order and out-of-order data, the peer's FIN). ACK processing proper lives in
//! `ack.rs`.
//!
//! # Overlapping data
//!
//! RFC 9293 leaves open which copy of a byte wins when segments overlap with different contents;
//! a monitor that models the receiver (an intrusion-detection system) must guess, and a guess
//! wrong either way lets an attacker show it one stream and the application another (Ptacek and
//! Newsham, "Insertion, Evasion, and Denial of Service: Eluding Network Intrusion Detection",
//! 1998). Here the first copy received wins, always: a byte held out of order is never
//! overwritten, neither by a later out-of-order copy nor by the in-order segment that fills the
//! hole before it (bytes already delivered are never rewritten either). Linux keeps the first of
//! two out-of-order copies that start at different points, too.

use std::time::Instant;

use super::{Connection, DEFAULT_MSS, DEFAULT_MSS_V6, MAX_WSCALE, MIN_MSS, TS_OPTION_LEN, distance};
use crate::tcp::congestion::{CongestionControl, NewReno};
use crate::tcp::rules::{self, acceptable};
use crate::tcp::{ConnectionError, Ecn, State, reset_for};
use crate::wire::tcp::SackBlock;
use crate::wire::{SeqNumber, TcpControl, TcpRepr};

impl Connection {
    /// Records the peer's SYN: sequence numbers and the options negotiation (RFC 9293 §3.7.1,
    /// RFC 7323 §2.2 and §3.2, RFC 2018 §2).
    pub(crate) fn take_syn(&mut self, syn: &TcpRepr<'_>, now: Instant) {
        self.rcv.irs = syn.seq_number;
        self.rcv.nxt = syn.seq_number + 1;
        self.ws_ok = self.config.window_scaling && syn.window_scale.is_some();
        if self.ws_ok {
            self.snd.wscale = syn.window_scale.unwrap_or(0).min(MAX_WSCALE);
        } else {
            self.snd.wscale = 0;
            self.rcv.wscale = 0;
        }
        self.ts.ok = self.config.timestamps && syn.timestamp.is_some();
        if let Some(ts) = syn.timestamp.filter(|_| self.ts.ok) {
            self.ts.recent = ts.tsval;
            self.ts.recent_at = now;
        }
        self.sack_ok = self.config.sack && syn.sack_permitted;
        // RFC 3168 §6.1.1: a SYN asking for ECN sets ECE and CWR; a SYN-ACK accepting it, ECE
        // alone (a SYN-ACK with both is not an answer to our request).
        self.ecn.ok = match syn.ack_number {
            None => self.config.ecn != Ecn::Off && syn.ece && syn.cwr,
            Some(_) => self.config.ecn == Ecn::On && syn.ece && !syn.cwr,
        };
        // Without an MSS option, RFC 9293 §3.7.1 assumes 536 over IPv4; over IPv6 the minimum MTU
        // less the headers, 1220 (RFC 8200 §8.3).
        let default_mss = if self.local.is_ipv6() { DEFAULT_MSS_V6 } else { DEFAULT_MSS };
        let mss = syn.max_seg_size.unwrap_or(default_mss).min(self.config.mss).max(MIN_MSS);
        let option_len = if self.ts.ok { TS_OPTION_LEN } else { 0 };
        self.snd.mss = usize::from(mss) - option_len;
        if let Some(mtu) = self.snd.path_mtu {
            self.snd.mss = self.snd.mss.min(self.mss_for_mtu(mtu, option_len));
        }
        self.rcv.mss = usize::from(self.config.mss).saturating_sub(option_len).max(1);
        // The window of a SYN is never scaled (RFC 7323 §2.2).
        self.snd.wnd = usize::from(syn.window_len);
        self.snd.max_wnd = self.snd.wnd;
        self.snd.wl1 = syn.seq_number;
        self.rcv.adv = self.rcv.nxt + self.rcv.buf.free().min(usize::from(u16::MAX));
        self.ts.last_ack_sent = self.rcv.nxt;
        self.cc.on_established(self.initial_window());
    }

    /// The initial window in bytes ([`Config::initial_window`](crate::tcp::Config::initial_window),
    /// else RFC 5681's).
    pub(super) fn initial_window(&self) -> usize {
        match self.config.initial_window {
            Some(segments) => segments.max(1).saturating_mul(self.snd.mss),
            None => NewReno::initial_window(self.snd.mss),
        }
    }

    /// Processes one segment that the caller demultiplexed to this connection (RFC 9293
    /// §3.10.7). Segments for other ports are ignored. Follow it with
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn handle_segment(&mut self, now: Instant, seg: &TcpRepr<'_>) {
        self.handle_segment_with(now, seg, |_| 0);
    }

    /// [`handle_segment`](Self::handle_segment) with in-place delivery: when the segment carries
    /// the next in-order bytes and nothing is buffered ahead of them (the receive ring is empty
    /// and no out-of-order data waits), `deliver` is offered the payload where it lies (in the
    /// received frame, e.g. a pool buffer) and returns how many bytes it consumed (at most the
    /// slice's length). Consumed bytes are received (acknowledged, counted) without touching the
    /// receive ring, so they take no window; what it leaves is buffered as usual and read with
    /// [`recv`](Self::recv). `deliver` is not called after [`close`](Self::close) (data that
    /// still arrives is discarded) or for data that is not in order.
    pub fn handle_segment_with<F: FnMut(&[u8]) -> usize>(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        deliver: F,
    ) {
        self.handle_segment_ecn(now, seg, false, deliver);
    }

    /// [`handle_segment_with`](Self::handle_segment_with) with the ECN field of the IP header
    /// that carried the segment: `ce` when it said Congestion Experienced (RFC 3168 §5). On a
    /// connection that negotiated ECN ([`Config::ecn`](crate::tcp::Config::ecn)), a CE mark on
    /// data makes our ACKs carry ECE until the peer's CWR.
    pub fn handle_segment_ecn<F: FnMut(&[u8]) -> usize>(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        ce: bool,
        mut deliver: F,
    ) {
        if seg.src_port != self.remote.port() || seg.dst_port != self.local.port() {
            return;
        }
        self.stats.segments_in += 1;
        match self.state {
            State::Closed => {
                if self.pending_rst.is_none() {
                    self.pending_rst = reset_for(seg);
                }
            }
            State::Listen => {}
            State::SynSent => self.handle_syn_sent(now, seg),
            _ => self.handle_synchronized(now, seg, ce, &mut deliver),
        }
    }

    /// SYN-SENT (RFC 9293 §3.10.7.3).
    fn handle_syn_sent(&mut self, now: Instant, seg: &TcpRepr<'_>) {
        let rst = seg.control == TcpControl::Rst;
        if let Some(ack) = seg.ack_number
            && (ack <= self.snd.iss || ack > self.snd.max)
        {
            if !rst {
                self.pending_rst = reset_for(seg);
            }
            return;
        }
        if rst {
            if seg.ack_number.is_some() {
                self.enter_closed(Some(ConnectionError::Refused));
            }
            return;
        }
        if seg.control != TcpControl::Syn {
            return;
        }
        self.take_syn(seg, now);
        self.snd.wl2 = seg.ack_number.unwrap_or(self.snd.iss);
        self.ack.pending = true;
        self.ack.now = true;
        match seg.ack_number {
            Some(ack) => {
                self.sample_rtt(now, seg, ack);
                self.snd.una = ack;
                // A retransmission timeout may have rewound SND.NXT to the SYN, to resend it; the
                // SYN is acknowledged now, so sending goes on after it.
                if self.snd.nxt < ack {
                    self.snd.nxt = ack;
                }
                self.snd.syn_acked = true;
                self.snd.retries = 0;
                self.timers.rto = None;
                self.state = State::Established;
                self.arm_keepalive(now);
                if self.snd.fin_queued {
                    self.state = State::FinWait1;
                }
            }
            None => {
                // Simultaneous open: answer with a SYN-ACK.
                self.state = State::SynReceived;
                self.snd.nxt = self.snd.iss;
            }
        }
    }

    fn challenge_ack(&mut self) {
        self.ack.pending = true;
        self.ack.now = true;
    }

    /// An RFC 5961 challenge ACK (§3.2 RST, §4.2 SYN, §5.2 ACK), at most
    /// [`Config::challenge_ack_limit`](crate::tcp::Config::challenge_ack_limit) per second (§7).
    #[cold]
    #[inline(never)]
    pub(super) fn rfc5961_challenge_ack(&mut self, now: Instant) {
        let (window, allowed) =
            rules::challenge_ack(self.limits.challenge, now, self.config.challenge_ack_limit);
        self.limits.challenge = Some(window);
        if !allowed {
            self.stats.challenge_acks_suppressed += 1;
            return;
        }
        self.stats.challenge_acks += 1;
        self.challenge_ack();
    }

    /// A SYN again from the peer, in SYN-RECEIVED, with the sequence number of its first: our
    /// SYN-ACK was lost (a retransmitted SYN), or both ends opened at once (a SYN-ACK). Out of
    /// line, as the other rare cases of [`handle_synchronized`](Self::handle_synchronized):
    /// the code every segment of a healthy connection runs should fit the instruction cache.
    #[cold]
    #[inline(never)]
    fn peer_syn_again(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        ce: bool,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        if seg.ack_number.is_none() {
            // A retransmitted SYN: our SYN-ACK was lost, send it again.
            self.snd.nxt = self.snd.iss;
            return;
        }
        // Simultaneous open: the peer's SYN-ACK repeats its SYN and acknowledges ours (RFC 9293
        // figure 8, line 6). Its ACK completes the handshake; ours tells the peer.
        let ack_only =
            TcpRepr { control: TcpControl::None, seq_number: self.rcv.irs + 1, payload: &[], ..*seg };
        self.handle_synchronized(now, &ack_only, ce, deliver);
        if self.is_established() {
            self.challenge_ack();
        }
    }

    /// A segment outside the receive window `wnd`. Returns whether its ACK is still to be
    /// processed (without its data and FIN).
    #[cold]
    #[inline(never)]
    fn unacceptable(&mut self, now: Instant, seg: &TcpRepr<'_>, wnd: usize) -> bool {
        if seg.control == TcpControl::Rst {
            return false;
        }
        if self.state == State::TimeWait && seg.control == TcpControl::Fin {
            // A retransmitted FIN: our ACK was lost. Acknowledge it and restart 2 MSL.
            self.timers.time_wait = Some(now + self.config.msl * 2);
        }
        // Answer with an ACK; for segments without data or flags at most once per
        // OOW_ACK_INTERVAL, so that two ends can never ping-pong ACKs.
        let bare = seg.payload.is_empty() && seg.control == TcpControl::None;
        let limited = rules::oow_ack_limited(bare, self.limits.last_oow_ack, now);
        if !limited {
            self.challenge_ack();
            if bare {
                self.limits.last_oow_ack = Some(now);
            }
        }
        // A zero window accepts nothing, but the ACK of a segment at RCV.NXT is still
        // processed (RFC 9293 §3.10.7.4).
        wnd == 0 && seg.seq_number == self.rcv.nxt && seg.control != TcpControl::Syn
    }

    /// A RST in the window (RFC 5961 §3.2): only an exact match resets; else a challenge ACK.
    #[cold]
    #[inline(never)]
    fn reset_received(&mut self, now: Instant, seg: &TcpRepr<'_>) {
        if seg.seq_number == self.rcv.nxt {
            let error = match self.state {
                State::SynReceived if !self.passive => Some(ConnectionError::Refused),
                State::SynReceived
                | State::Established
                | State::FinWait1
                | State::FinWait2
                | State::CloseWait => Some(ConnectionError::Reset),
                _ => None,
            };
            self.enter_closed(error);
        } else {
            self.rfc5961_challenge_ack(now);
        }
    }

    /// Every state after SYN-SENT (RFC 9293 §3.10.7.4). `deliver` is a trait object so that
    /// there is one copy of this code, not one per closure: a server's connection takes the
    /// handshake's last ACK before the application owns it (with a closure that delivers
    /// nothing) and its data after, and two copies of the hottest input code in one transaction
    /// crowd the instruction cache. The segment header prediction expects
    /// ([`predicts`](Self::predicts)) takes the short way, checked here for the same reason.
    fn handle_synchronized(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        ce: bool,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        if self.predicts(seg, ce) {
            self.receive_predicted(now, seg, deliver);
            return;
        }
        let rst = seg.control == TcpControl::Rst;
        let syn = seg.control == TcpControl::Syn;
        let mut fin = seg.control == TcpControl::Fin;

        if syn && self.state == State::SynReceived && seg.seq_number == self.rcv.irs {
            self.peer_syn_again(now, seg, ce, deliver);
            return;
        }

        // PAWS (RFC 7323 §5.3 R1).
        if self.ts.ok
            && !rst
            && let Some(ts) = seg.timestamp
            && rules::paws_rejects(ts.tsval, self.ts.recent, self.ts.recent_at, now)
        {
            self.challenge_ack();
            return;
        }

        // Acceptability.
        let wnd = distance(self.rcv.nxt, self.rcv.adv);
        let mut payload = seg.payload;
        if !payload.is_empty() && seg.seq_number < self.rcv.nxt {
            // Data received before, all of it (RFC 2883 §4.1.1) or its head (§4.1.2, as Linux):
            // the ACK names it. (A SYN's data follows the SYN's sequence number.)
            let data = seg.seq_number + usize::from(syn);
            self.note_dsack(data, (data + payload.len()).min(self.rcv.nxt));
        }
        if !acceptable(self.rcv.nxt, wnd, seg.seq_number, seg.segment_len()) {
            if !self.unacceptable(now, seg, wnd) {
                return;
            }
            payload = &[];
            fin = false;
        }

        // Trim to the window: bytes before RCV.NXT were received already.
        let mut seq = seg.seq_number;
        if seq < self.rcv.nxt {
            let skip = distance(seq, self.rcv.nxt);
            if skip > payload.len() {
                fin = false;
            }
            payload = payload.get(skip..).unwrap_or(&[]);
            seq = self.rcv.nxt;
        }
        let room = wnd.saturating_sub(distance(self.rcv.nxt, seq));
        if payload.len() > room {
            payload = &payload[..room];
            fin = false;
        }

        // RST (RFC 5961 §3.2): only an exact match resets; in the window, a challenge ACK.
        if rst {
            self.reset_received(now, seg);
            return;
        }

        // SYN on a synchronized connection (RFC 5961 §4): challenge ACK.
        if syn {
            self.rfc5961_challenge_ack(now);
            return;
        }

        // TS.Recent (RFC 7323 §4.3), taken only from a segment whose ACK is acceptable: a
        // segment dropped for its ACK (of data never sent, or too old: RFC 5961 §5.2) must not
        // move it, or one forged segment with a high TSval would make PAWS drop everything the
        // peer sends after it (Linux's tcp_ack updates it only past the same checks).
        let ts_recent = self.ts_recent_from(seg);

        let Some(ack) = seg.ack_number else { return };
        if self.state == State::SynReceived {
            if self.snd.una < ack && ack <= self.snd.max {
                self.state = if self.snd.fin_queued { State::FinWait1 } else { State::Established };
                self.snd.wnd = usize::from(seg.window_len) << self.snd.wscale;
                self.snd.max_wnd = self.snd.max_wnd.max(self.snd.wnd);
                self.snd.wl1 = seg.seq_number;
                self.snd.wl2 = ack;
                self.arm_keepalive(now);
            } else {
                self.pending_rst = reset_for(seg);
                return;
            }
        }
        if !self.handle_ack(now, seg, ack) {
            return;
        }
        if let Some(tsval) = ts_recent {
            self.ts.recent = tsval;
            self.ts.recent_at = now;
        }
        if self.ecn.ok {
            self.receive_ecn(seg, ce);
        }
        if self.timers.keepalive.is_some() {
            self.arm_keepalive(now);
        }
        match self.state {
            State::LastAck if self.fin_acked() => {
                self.enter_closed(None);
                return;
            }
            State::Closing if self.fin_acked() => self.enter_time_wait(now),
            State::FinWait1 if self.fin_acked() => self.state = State::FinWait2,
            _ => {}
        }

        // Text (RFC 9293 §3.10.7.4 seventh), only before the peer's FIN.
        if !matches!(self.state, State::Established | State::FinWait1 | State::FinWait2) {
            return;
        }
        let offset = distance(self.rcv.nxt, seq);
        let mut written = 0;
        if !payload.is_empty() {
            self.rcv.largest = self.rcv.largest.max(payload.len().min(self.rcv.mss));
            if offset == 0 {
                written = self.receive_in_order(now, payload, deliver);
            } else {
                // Out of order: keep it if the range fits, and send a duplicate ACK at once
                // (RFC 5681 §4.2). Bytes already held are not overwritten (see the module docs),
                // and the first run of them this segment brought again is named (RFC 2883
                // §4.1.3: the D-SACK block, then the block that holds it, recorded below).
                let end = offset + payload.len();
                let held = self.rcv.ooo.ranges_past(offset).next().filter(|&(s, _)| s < end);
                if let Some((s, e)) = held {
                    self.note_dsack(self.rcv.nxt + s.max(offset), self.rcv.nxt + e.min(end));
                }
                written =
                    self.rcv.buf.write_unallocated_around(offset, payload, self.rcv.ooo.ranges_past(offset));
                if written > 0 {
                    if self.rcv.ooo.add(offset, offset + written) {
                        self.rcv.sack_recent.record(self.rcv.nxt, seq, seq + written);
                    } else {
                        written = 0;
                        self.stats.ooo_dropped += 1;
                    }
                }
                self.challenge_ack();
            }
        }
        if fin && written == payload.len() {
            let fin_seq = seq + payload.len();
            if fin_seq != self.rcv.nxt {
                self.rcv.ooo_fin = Some(fin_seq);
            }
        }
        if (fin && seq + payload.len() == self.rcv.nxt) || self.rcv.ooo_fin == Some(self.rcv.nxt) {
            self.rcv.ooo_fin = None;
            self.process_fin(now);
        }
    }

    /// `left..right` arrived again: our next segment names it in a D-SACK block ([`Config::dsack`],
    /// RFC 2883 §4), once SACK was negotiated. A later duplicate before it goes replaces it.
    /// Not in TIME-WAIT, whose answers are plain ACKs (the compact record's, as Linux's
    /// `tcp_timewait_state_process`).
    ///
    /// [`Config::dsack`]: crate::tcp::Config::dsack
    #[cold]
    #[inline(never)]
    fn note_dsack(&mut self, left: SeqNumber, right: SeqNumber) {
        // Data only: the peer's SYN is not (a duplicate SYN's data starts after it).
        let left = left.max(self.rcv.irs + 1);
        if self.sack_ok && self.config.dsack && left < right && self.state != State::TimeWait {
            self.rcv.dsack = Some(SackBlock { left, right });
        }
    }

    /// The TSval `seg` would make TS.Recent (RFC 7323 §4.3): it starts at or before the RCV.NXT
    /// our last ACK carried, and its timestamp is not older.
    fn ts_recent_from(&self, seg: &TcpRepr<'_>) -> Option<u32> {
        let ts = seg.timestamp.filter(|_| self.ts.ok)?;
        rules::ts_recent_updates(seg.seq_number, self.ts.last_ack_sent, ts.tsval, self.ts.recent)
            .then_some(ts.tsval)
    }

    /// In-order data at RCV.NXT (`payload`, not empty, inside the window): offered in place
    /// first, when nothing buffered has to be read before it; the rest goes into the receive
    /// ring, and the ACK it owes is scheduled (RFC 1122 §4.2.3.2: at least every second
    /// full-sized segment, else delayed). Returns the bytes taken.
    fn receive_in_order(
        &mut self,
        now: Instant,
        payload: &[u8],
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) -> usize {
        let delivered = if self.rcv.buf.is_empty() && self.rcv.ooo.is_empty() && !self.rcv.closed {
            deliver(payload).min(payload.len())
        } else {
            0
        };
        // Taken whole in place (offered only with nothing held out of order): nothing to buffer.
        let (copied, filled_hole, buffered) = if delivered != 0 && delivered == payload.len() {
            (0, false, 0)
        } else {
            let copied =
                self.rcv.buf.write_unallocated_around(0, &payload[delivered..], self.rcv.ooo.ranges());
            let filled_hole = !self.rcv.ooo.is_empty();
            let buffered = self.rcv.ooo.advance(copied);
            if filled_hole && self.rcv.ooo.is_empty() {
                // Every SACK block was held out of order: all in order now.
                self.rcv.sack_recent.clear();
            }
            self.rcv.buf.enqueue_unallocated(buffered);
            (copied, filled_hole, buffered)
        };
        let reach = delivered + buffered;
        if self.rcv.closed {
            self.rcv.buf.dequeue_allocated(usize::MAX);
        }
        self.rcv.nxt += reach;
        self.stats.bytes_in += reach as u64;
        if self.may_raise_recv_buffer() {
            self.tune_recv_buffer(now);
        }
        self.ack.unacked_bytes += reach;
        self.ack.pending = true;
        let quick = self.quick_ack(now);
        if filled_hole || quick || self.ack.unacked_bytes >= 2 * self.rcv.mss {
            self.ack.now = true;
        } else if let Some(delay) = self.config.delayed_ack {
            self.timers.delayed_ack.get_or_insert_with(|| now + delay);
        } else {
            self.ack.now = true;
        }
        delivered + copied
    }

    /// Header prediction ([`Config::header_prediction`](crate::tcp::Config::header_prediction);
    /// Jacobson, "4BSD Header Prediction", 1990): whether `seg` is the segment a receiving
    /// connection expects next, for which the general processing of
    /// [`handle_synchronized`](Self::handle_synchronized) would change nothing but TS.Recent,
    /// the send window and the data. Checked in the order most segments that are not it fail.
    ///
    /// What each condition spares: the next byte expected, inside the window, no flags and no
    /// ECN marks (acceptability, trimming, RST, SYN, FIN and ECN processing); an ACK of SND.UNA
    /// with nothing in flight, no SACK blocks and no ECN window reduction under way (ACK
    /// processing: nothing is acknowledged and nothing can be deemed lost; with nothing in
    /// flight, loss recovery has ended, RACK has nothing logged and no timer set, and a
    /// zero-window probe's byte lies past the ACK: [`receive_predicted`](Self::receive_predicted)
    /// asserts those in debug builds); a timestamp not older than TS.Recent (PAWS cannot reject
    /// it; a segment without one, on a connection with timestamps, passes the general path's
    /// checks too).
    #[inline]
    fn predicts(&self, seg: &TcpRepr<'_>, ce: bool) -> bool {
        self.config.header_prediction
            && self.state == State::Established
            && seg.seq_number == self.rcv.nxt
            && seg.ack_number == Some(self.snd.una)
            && self.snd.una == self.snd.max
            && seg.control == TcpControl::None
            && !seg.payload.is_empty()
            && seg.payload.len() <= distance(self.rcv.nxt, self.rcv.adv)
            && seg.sack_blocks.is_empty()
            && !(seg.ece || seg.cwr || ce)
            && match seg.timestamp {
                Some(ts) if self.ts.ok => SeqNumber::new(ts.tsval) >= SeqNumber::new(self.ts.recent),
                _ => true,
            }
            && !self.recovery.cwr
    }

    /// The next segment of a train whose segment before it this connection predicted, with
    /// nothing else run on the connection in between and the same headers but for the sequence
    /// number and the payload's length (the stack's receive memory, `stack::rx_cache`): taken
    /// as [`receive_predicted`](Self::receive_predicted) takes a predicted segment, and true,
    /// when it is predicted too; false, and nothing done, when not. Of
    /// [`predicts`](Self::predicts)' conditions only those the segment before can have changed
    /// are checked (the state: an out-of-order FIN it made in order closes; the next sequence
    /// number; the window); the rest held for identical headers and hold still, which debug
    /// builds assert.
    pub(crate) fn receive_continued(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) -> bool {
        if self.state != State::Established
            || seg.seq_number != self.rcv.nxt
            || seg.payload.len() > distance(self.rcv.nxt, self.rcv.adv)
        {
            return false;
        }
        debug_assert!(self.predicts(seg, false), "a continued segment passes all of header prediction");
        self.stats.segments_in += 1;
        self.receive_predicted(now, seg, deliver);
        true
    }

    /// A segment header prediction took ([`predicts`](Self::predicts)): what
    /// [`handle_synchronized`](Self::handle_synchronized) does for it, in the same order, less
    /// the checks it is known to pass.
    fn receive_predicted(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        debug_assert!(
            !self.recovery.active
                && self.timers.rack.is_none()
                && !(self.config.rack && self.sack_ok && !self.recovery.rack.is_empty())
                && self.persist.probe_end.is_none_or(|p| p > self.snd.una),
            "nothing in flight, yet loss detection has state",
        );
        self.stats.predicted += 1;
        let ts_recent = self.ts_recent_from(seg);
        // ACK processing of an acceptable ACK that acknowledges nothing (`handle_ack`).
        self.persist.unanswered_probes = 0;
        let window = usize::from(seg.window_len) << self.snd.wscale;
        self.update_window(seg.seq_number, self.snd.una, window);
        if let Some(tsval) = ts_recent {
            self.ts.recent = tsval;
            self.ts.recent_at = now;
        }
        if self.timers.keepalive.is_some() {
            self.arm_keepalive(now);
        }
        self.rcv.largest = self.rcv.largest.max(seg.payload.len().min(self.rcv.mss));
        self.receive_in_order(now, seg.payload, deliver);
        // A FIN held out of order (one that came before the data it ends) is in order now.
        if self.rcv.ooo_fin == Some(self.rcv.nxt) {
            self.rcv.ooo_fin = None;
            self.process_fin(now);
        }
    }

    /// The receiver's half of ECN (RFC 3168 §6.1.3) for an acceptable segment: the peer's CWR
    /// ends our echo, and a CE mark on data starts it again (after the CWR, so a segment with
    /// both keeps it going). The first mark is acknowledged at once, as Linux does, so that the
    /// sender hears of the congestion a delayed ACK sooner.
    fn receive_ecn(&mut self, seg: &TcpRepr<'_>, ce: bool) {
        if seg.cwr {
            self.ecn.echo = false;
        }
        if ce && !seg.payload.is_empty() {
            self.stats.ce_received += 1;
            if !self.ecn.echo {
                self.ecn.echo = true;
                self.ack.pending = true;
                self.ack.now = true;
            }
        }
    }

    pub(super) fn fin_acked(&self) -> bool {
        self.snd.fin_seq.is_some_and(|f| self.snd.una > f)
    }

    fn process_fin(&mut self, now: Instant) {
        self.rcv.nxt += 1;
        self.rcv.fin_received = true;
        self.ack.pending = true;
        self.rcv.ooo.clear();
        self.rcv.sack_recent.clear();
        match self.state {
            State::SynReceived | State::Established => {
                // The application is expected to answer (its response, its own FIN): the ACK is
                // delayed so that it rides on that segment, as Linux's `tcp_fin` does by entering
                // ping-pong mode on the move to CLOSE-WAIT. A request/response connection closed
                // by the server then costs one segment less. Only once data has arrived: until
                // then Linux's ACK timeout estimate (`icsk_ack.ato`) is 0 and its "delayed" ACK
                // of the FIN leaves at once (packetdrill's close-remote-fin-then-close.pkt).
                self.state = State::CloseWait;
                match self.config.delayed_ack {
                    Some(delay) if !self.ack.now && self.stats.bytes_in > 0 => {
                        self.timers.delayed_ack.get_or_insert_with(|| now + delay);
                    }
                    _ => self.ack.now = true,
                }
            }
            State::FinWait1 => {
                self.ack.now = true;
                if self.fin_acked() {
                    self.enter_time_wait(now);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => {
                self.ack.now = true;
                self.enter_time_wait(now);
            }
            _ => self.ack.now = true,
        }
    }

    /// Whether this in-order data segment is acknowledged at once as one of the first of the
    /// connection, or of a burst after the connection sat idle longer than the RTO
    /// ([`Config::quick_acks`](crate::tcp::Config::quick_acks)): the sender is in slow start then,
    /// and every ACK grows its window. At most half the receive window in segments, at least two.
    fn quick_ack(&mut self, now: Instant) -> bool {
        let limit = self.config.quick_acks;
        if limit == 0 {
            return false;
        }
        let idle = self.ack.last_data.is_some_and(|t| now.saturating_duration_since(t) > self.rtt.rto());
        if self.ack.last_data.is_none() || idle {
            let half_window = self.rcv.buf.free() / (2 * self.rcv.mss.max(1));
            self.ack.quick = self.ack.quick.max(half_window.clamp(2, limit.max(2)).min(limit));
        }
        self.ack.last_data = Some(now);
        if self.ack.quick > 0 {
            self.ack.quick -= 1;
            true
        } else {
            false
        }
    }
}
