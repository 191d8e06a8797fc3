//! The sending half of a [`Connection`]: [`Connection::poll_transmit`] and the segments it
//! builds, in order of precedence: resets, SYN and SYN-ACK, fast and SACK retransmissions, new
//! data and the FIN under the windows, Nagle and SWS avoidance, zero-window probes, keepalives and
//! ACKs; with the advertised window, the header every segment carries and its SACK blocks.

use std::time::{Duration, Instant};

use super::{Connection, MAX_RXT_MARKS, MIN_PERSIST, distance};
use crate::tcp::congestion::{CongestionAlgorithm, CongestionControl};
use crate::tcp::pacing;
use crate::tcp::prepared::PreparedSlice;
use crate::tcp::push::{Packet, Sizing};
use crate::tcp::rtt::MAX_RTO;
use crate::tcp::send_stream::Lent;
use crate::tcp::{Ecn, Pacing, Push, State, Transmit, WindowProbe};
use crate::wire::tcp::{SackBlocks, Timestamp};
use crate::wire::{SeqNumber, TcpControl, TcpRepr};
use netchannel::pool::SharedPacket;

impl Connection {
    /// The SWS threshold of the receiver (RFC 9293 §3.8.6.2.2): min(RCV.BUFF / 2, Eff.snd.MSS).
    pub(super) fn sws_threshold(&self) -> usize {
        (self.rcv.buf.capacity() / 2).min(self.rcv.mss).max(1)
    }

    /// The window to advertise now: the free receive space, but the right edge moves only by
    /// at least the SWS threshold, and never to the left.
    pub(super) fn window_to_advertise(&self) -> usize {
        let free = self.rcv.buf.free();
        let current = distance(self.rcv.nxt, self.rcv.adv);
        let wnd = if free >= current + self.sws_threshold() { free } else { current };
        wnd.min(usize::from(u16::MAX) << self.rcv.wscale)
    }

    /// The window field for an ACK-carrying segment, and the advertised edge it implies.
    fn advertise(&mut self) -> u16 {
        let mut wnd = self.window_to_advertise();
        if self.rcv.nxt + wnd > self.rcv.adv && self.rcv.buf.hold_if_pressed() {
            // The edge would move, but the budget is short: offer only what the ring can take.
            wnd = self.window_to_advertise();
        }
        let field = u16::try_from(wnd >> self.rcv.wscale).unwrap_or(u16::MAX);
        let edge = self.rcv.nxt + (usize::from(field) << self.rcv.wscale);
        self.rcv.adv = self.rcv.adv.max(edge);
        field
    }

    /// A header from us with the ACK, window and timestamps filled in.
    fn header(&mut self, now: Instant, control: TcpControl, seq: SeqNumber) -> TcpRepr<'static> {
        let window_len = self.advertise();
        self.ack.pending = false;
        self.ack.now = false;
        self.timers.delayed_ack = None;
        self.ack.unacked_bytes = 0;
        self.ts.last_ack_sent = self.rcv.nxt;
        let repr = TcpRepr {
            src_port: self.local.port(),
            dst_port: self.remote.port(),
            control,
            seq_number: seq,
            ack_number: Some(self.rcv.nxt),
            window_len,
            timestamp: self.ts.ok.then(|| Timestamp { tsval: self.ts_now(now), tsecr: self.ts.recent }),
            sack_blocks: self.sack_blocks(),
            ece: self.ecn.echo,
            ..TcpRepr::default()
        };
        if self.rcv.dsack.is_some() {
            self.dsack_sent();
        }
        repr
    }

    /// The D-SACK block went in a segment: named once (RFC 2883 §4 reports each duplicate once).
    #[cold]
    #[inline(never)]
    fn dsack_sent(&mut self) {
        self.rcv.dsack = None;
        self.stats.dsacks_sent += 1;
    }

    /// The SACK blocks for our next ACK (RFC 2018 §4): when SACK was negotiated and data is held
    /// out of order, the block holding the most recently received segment first, then the
    /// blocks other segments joined most recently ([`RecentBlocks`](crate::tcp::sack::RecentBlocks):
    /// held data whose block was forgotten is not reported), as many as fit beside the timestamps
    /// option (three; four without it), after the D-SACK block naming a duplicate just received
    /// if there is one ([`Config::dsack`](crate::tcp::Config::dsack), RFC 2883 §4).
    fn sack_blocks(&self) -> SackBlocks {
        if !self.sack_ok || (self.rcv.ooo.is_empty() && self.rcv.dsack.is_none()) {
            return SackBlocks::new();
        }
        let max = if self.ts.ok { 3 } else { SackBlocks::MAX };
        self.rcv.sack_recent.blocks(self.rcv.dsack, self.rcv.nxt, max)
    }

    /// The most payload bytes in our next segment: the send MSS less the SACK option it will
    /// carry, so that the segment still fits the path MTU (a super-segment is cut into segments
    /// of this size).
    pub(crate) fn data_mss(&self) -> usize {
        let n = self.sack_blocks().len();
        let option = if n > 0 { 4 + 8 * n } else { 0 };
        self.snd.mss.saturating_sub(option).max(1)
    }

    /// RFC 6675 SetPipe(): the bytes presumed in flight during SACK recovery.
    fn pipe(&self) -> usize {
        self.recovery.scoreboard.pipe(
            self.snd.una,
            self.snd.max,
            self.recovery.high_rxt.max(self.snd.una),
            self.snd.mss,
        )
    }

    /// The pipe PRR compares with ssthresh: RFC 6675 SetPipe() with SACK; without it, the
    /// flight less what the duplicate ACKs of this recovery say was delivered (RFC 6937 §3).
    pub(super) fn recovery_pipe(&self) -> usize {
        if self.sack_ok {
            self.pipe()
        } else {
            distance(self.snd.una, self.snd.max).saturating_sub(self.recovery.dup_delivered)
        }
    }

    /// A segment of `len` bytes sent in recovery (or an ECN reduction by PRR): it counts in
    /// PRR's prr_out and uses up sndcnt.
    fn prr_sent(&mut self, len: usize) {
        if self.recovery.active || self.recovery.cwr {
            self.recovery.prr_out = self.recovery.prr_out.saturating_add(len);
            self.recovery.sndcnt = self.recovery.sndcnt.saturating_sub(len);
        }
    }

    /// What recovery (or an ECN reduction by PRR) lets out now: PRR's sndcnt (RFC 9937 §4), or,
    /// for an algorithm that sets the window through recovery itself (BBR), the window less the
    /// pipe.
    fn recovery_room(&self) -> usize {
        if self.cc.owns_recovery_window() {
            self.cc.window().saturating_sub(self.recovery_pipe())
        } else {
            self.recovery.sndcnt
        }
    }

    fn transmit(&mut self, repr: TcpRepr<'static>, payload_len: usize) -> Transmit {
        self.transmit_ect(repr, payload_len, false)
    }

    /// [`transmit`](Self::transmit), ECN-capable when `ect` (built in place: a copy of the
    /// 128-byte `Transmit` to change one field costs a `memcpy` per segment).
    fn transmit_ect(&mut self, repr: TcpRepr<'static>, payload_len: usize, ect: bool) -> Transmit {
        self.stats.segments_out += 1;
        Transmit { repr, payload_len, ect, segment_size: 0 }
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) may have a segment to send now. `false`
    /// only where it would return `None` and change nothing: no reset owed, and a SYN already
    /// sent (and in SYN-RECEIVED no immediate ACK owed), or, past the SYNs, no retransmission,
    /// probe or immediate ACK owed, nothing sent that was rewound, every queued byte sent, and
    /// in FIN-WAIT-1, CLOSING and LAST-ACK the FIN too. The stack asks it before draining a
    /// connection (after a segment whose ACK is delayed, say) and after each segment of a drain,
    /// instead of a `poll_transmit` that would find nothing. Conservative, never wrong the other
    /// way: every debug build checks that `poll_transmit` finds nothing where this says so.
    #[inline]
    pub fn may_transmit(&self) -> bool {
        // Each term a reason to look: something owed, data not sent (rewound, or queued past
        // SND.NXT), or a FIN to send (it follows the data: SND.NXT is past it once sent).
        let data_state =
            matches!(self.state, State::Established | State::CloseWait | State::FinWait2 | State::TimeWait);
        let fin_state = matches!(self.state, State::FinWait1 | State::Closing | State::LastAck);
        if data_state || fin_state {
            return self.pending_rst.is_some()
                || (self.ack.pending && self.ack.now)
                || self.recovery.fast_rexmit
                || self.recovery.tlp_pending
                || self.recovery.active
                || self.persist.probe_pending
                || self.keepalive.pending
                || self.snd.nxt != self.snd.max
                || self.snd.stream.len() + usize::from(fin_state) > distance(self.send_base(), self.snd.nxt);
        }
        self.pending_rst.is_some()
            || match self.state {
                State::SynSent => self.snd.nxt == self.snd.iss,
                State::SynReceived => self.snd.nxt == self.snd.iss || self.ack.now,
                _ => false,
            }
    }

    /// The next segment to send, its payload copied into `buf` (see [`Transmit`] for the
    /// contract); `None` when there is nothing to send now. Call it until it returns `None`
    /// after every input. `buf` should hold at least one MSS; a shorter one gives shorter
    /// segments.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(mut rst) = self.pending_rst.take() {
            if std::mem::take(&mut self.rst_with_ts) && self.ts.ok {
                rst.timestamp = Some(Timestamp { tsval: self.ts_now(now), tsecr: self.ts.recent });
            }
            return Some(self.transmit(rst, 0));
        }
        match self.state {
            State::Closed | State::Listen => return None,
            State::SynSent | State::SynReceived => {
                if self.snd.nxt == self.snd.iss {
                    return Some(self.send_syn(now));
                }
                if self.state == State::SynReceived && self.ack.now {
                    let repr = self.header(now, TcpControl::None, self.snd.nxt);
                    return Some(self.transmit(repr, 0));
                }
                return None;
            }
            _ => {}
        }
        // Pacing (`pacing.rs`) holds data until its departure time: checked only where data
        // would go, so that an ACK pays nothing for it.
        if self.recovery.fast_rexmit && !self.paced_hold(now) {
            self.recovery.fast_rexmit = false;
            if let Some(t) = self.retransmit_first(now, buf) {
                return Some(t);
            }
        }
        if std::mem::take(&mut self.recovery.tlp_pending)
            && let Some(t) = self.send_probe_segment(now, buf)
        {
            return Some(t);
        }
        let sack_recovery =
            self.recovery.active && self.sack_ok && self.state != State::TimeWait && !self.paced_hold(now);
        // A lost retransmission RACK found above SND.UNA, then RFC 6675 §5 step (C), NextSeg()
        // rule 1: lost holes first...
        if sack_recovery
            && self.recovery.resend.is_some()
            && let Some(t) = self.resend_lost(now, buf)
        {
            return Some(t);
        }
        if sack_recovery && let Some(t) = self.sack_retransmit(now, buf, true) {
            return Some(t);
        }
        // ... rule 2: new data...
        if self.state != State::TimeWait
            && let Some(t) = self.send_data(now, buf)
        {
            return Some(t);
        }
        // ... rule 3: holes below the highest SACKed byte not yet deemed lost.
        if sack_recovery && let Some(t) = self.sack_retransmit(now, buf, false) {
            return Some(t);
        }
        if self.persist.probe_pending {
            self.persist.probe_pending = false;
            if let Some(t) = self.send_probe(now, buf) {
                return Some(t);
            }
        }
        if self.keepalive.pending {
            self.keepalive.pending = false;
            let repr = self.header(now, TcpControl::None, self.snd.una - 1);
            return Some(self.transmit(repr, 0));
        }
        if self.ack.pending && self.ack.now {
            // At SND.MAX, not SND.NXT: after a timeout rewound SND.NXT, an ACK from there would
            // be old to the peer, which would answer it with an ACK of its own, and so on.
            let repr = self.header(now, TcpControl::None, self.snd.max);
            return Some(self.transmit(repr, 0));
        }
        None
    }

    /// [`poll_transmit`](Self::poll_transmit), except that a segment whose payload lies in
    /// prepared content (queued with [`send_prepared`](Self::send_prepared)) comes with that
    /// payload lent as a [`PreparedSlice`] (`payload_len` bytes of it) instead of copied into
    /// `buf`: the caller emits the payload from it, and its sum from
    /// [`PreparedSlice::sum`] when the segment is a prepared cut.
    /// A payload in a pool buffer (queued with [`send_pooled`](Self::send_pooled)) is copied into
    /// `buf` as by [`poll_transmit`](Self::poll_transmit); [`poll_transmit_lent`](Self::poll_transmit_lent)
    /// lends it too.
    pub fn poll_transmit_prepared(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<PreparedSlice>)> {
        match self.poll_transmit_lent(now, buf)? {
            (t, Some(Lent::Prepared(p))) => Some((t, Some(p))),
            (t, Some(Lent::Pooled(p))) => {
                buf[..p.len].copy_from_slice(p.bytes());
                Some((t, None))
            }
            (t, Some(Lent::PooledRun(run))) => {
                let mut at = 0;
                for p in run.slices() {
                    buf[at..at + p.len].copy_from_slice(p.bytes());
                    at += p.len;
                }
                Some((t, None))
            }
            (t, Some(Lent::Ring(b))) => {
                buf[..b.len()].copy_from_slice(b);
                Some((t, None))
            }
            (t, None) => Some((t, None)),
        }
    }

    /// [`send_pooled`](Self::send_pooled) for as many buffers as the send buffer takes: `fill` gets
    /// the room left (the bytes the send buffer takes now) and returns a buffer filled with at
    /// most that many bytes, or `None` to stop; it is called again until it returns `None`, the
    /// room is gone, or 4096 buffers are queued (then it is not called). A buffer larger than the
    /// room offered is queued all the same. Returns the bytes queued, or `None` without calling
    /// `fill` once the sending side is shut down or the connection closed, or when there is no
    /// room.
    pub fn send_pooled_with(&mut self, mut fill: impl FnMut(usize) -> Option<SharedPacket>) -> Option<usize> {
        let room =
            |s: &super::SendStream| if s.pooled_room() { s.capacity().saturating_sub(s.len()) } else { 0 };
        if !self.may_send() || room(&self.snd.stream) == 0 {
            return None;
        }
        let mut queued = 0;
        loop {
            let stream = &mut self.snd.stream;
            let room = room(stream);
            if room == 0 {
                return Some(queued);
            }
            let Some(buffer) = fill(room) else { return Some(queued) };
            let n = buffer.len();
            // Never refused: there is room for another buffer (checked above).
            if stream.push_pooled(buffer).is_ok() {
                queued += n;
            }
        }
    }

    /// [`poll_transmit_prepared`](Self::poll_transmit_prepared), with a payload in a pool buffer
    /// (queued with [`send_pooled`](Self::send_pooled)) lent as well, as a
    /// [`PooledSlice`](crate::tcp::PooledSlice): the caller sends the buffer by reference when the
    /// slice [is all of it](crate::tcp::PooledSlice::is_whole), else copies the range. A payload of
    /// at least 512 bytes of the send ring that lies in one run of its storage is lent too
    /// ([`Lent::Ring`]), so that the caller copies it into its frame once instead of through `buf`.
    /// Inlined into its caller: out of line, the plain path paid ~100 instructions a segment.
    #[inline(always)]
    pub fn poll_transmit_lent(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<Lent<'_>>)> {
        self.snd.stream.start_lending();
        let t = self.poll_transmit(now, buf);
        let lent = self.snd.stream.stop_lending();
        let t = t?;
        debug_assert!(
            lent.as_ref().is_none_or(|l| l.len() == t.payload_len),
            "the lent payload is the segment's"
        );
        Some((t, lent))
    }

    fn send_syn(&mut self, now: Instant) -> Transmit {
        let active = self.state == State::SynSent;
        let ack_number = (!active).then_some(self.rcv.nxt);
        let tsval = self.ts_now(now);
        // Under memory pressure, the first window offers only what the ring can take; the edge
        // the SYN-ACK advertises is the one later segments must not move left.
        self.rcv.buf.hold_if_pressed();
        let window = self.rcv.buf.free().min(usize::from(u16::MAX));
        if !active {
            let edge = self.rcv.nxt + window;
            self.rcv.adv = if self.snd.max == self.snd.iss { edge } else { self.rcv.adv.max(edge) };
        }
        let repr = TcpRepr {
            src_port: self.local.port(),
            dst_port: self.remote.port(),
            control: TcpControl::Syn,
            seq_number: self.snd.iss,
            ack_number,
            window_len: u16::try_from(window).unwrap_or(u16::MAX),
            max_seg_size: Some(self.config.mss),
            window_scale: (if active { self.config.window_scaling } else { self.ws_ok })
                .then_some(self.rcv.wscale),
            sack_permitted: if active { self.config.sack } else { self.sack_ok },
            timestamp: if active {
                self.config.timestamps.then_some(Timestamp { tsval, tsecr: 0 })
            } else {
                self.ts.ok.then_some(Timestamp { tsval, tsecr: self.ts.recent })
            },
            // RFC 3168 §6.1.1: an ECN-setup SYN carries ECE and CWR, the SYN-ACK accepting it
            // ECE alone.
            ece: if active { self.config.ecn == Ecn::On } else { self.ecn.ok },
            cwr: active && self.config.ecn == Ecn::On,
            ..TcpRepr::default()
        };
        if self.snd.max == self.snd.iss {
            self.snd.rtt_timing = Some((self.snd.iss, now));
        } else {
            self.stats.retransmits += 1;
        }
        if !active {
            self.ack.pending = false;
            self.ack.now = false;
            self.ts.last_ack_sent = self.rcv.nxt;
        }
        self.snd.nxt = self.snd.iss + 1;
        self.snd.max = self.snd.max.max(self.snd.nxt);
        self.timers.rto.get_or_insert_with(|| now + self.rtt.rto());
        self.transmit(repr, 0)
    }

    /// The sequence number of the first byte in the send buffer.
    pub(super) fn send_base(&self) -> SeqNumber {
        if self.snd.syn_acked { self.snd.una } else { self.snd.iss + 1 }
    }

    /// Fast retransmit: the first unacknowledged segment, whatever the windows say (up to the
    /// first SACKed byte).
    fn retransmit_first(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.snd.una == self.snd.max {
            return None;
        }
        let end = self.recovery.scoreboard.next_sacked(self.snd.una).unwrap_or(self.snd.max);
        let len = distance(self.snd.una, end).min(self.data_mss());
        self.retransmit_at(now, buf, self.snd.una, len)
    }

    /// RFC 6675 §5 step (C): the segment NextSeg() picks (rule 1, lost data, when `lost_only`;
    /// else rule 3), when the recovery's room holds it ([`recovery_room`](Self::recovery_room):
    /// PRR's sndcnt, RFC 9937 §4: cwnd = pipe + sndcnt, and a segment goes while cwnd - pipe
    /// covers it).
    fn sack_retransmit(&mut self, now: Instant, buf: &mut [u8], lost_only: bool) -> Option<Transmit> {
        let room = self.recovery_room();
        if room == 0 {
            return None;
        }
        let high_rxt = self.recovery.high_rxt.max(self.snd.una);
        let (seq, len, lost) =
            self.recovery.scoreboard.next_seg(self.snd.una, self.snd.max, high_rxt, self.snd.mss)?;
        let len = len.min(self.data_mss());
        if (lost_only && !lost) || len > room {
            return None;
        }
        self.retransmit_at(now, buf, seq, len)
    }

    /// The retransmission RACK deems lost above SND.UNA (`Recovery::resend`), when the
    /// recovery's room holds it (as [`sack_retransmit`](Self::sack_retransmit)); the next one
    /// comes with the next ACK's detection.
    #[cold]
    #[inline(never)]
    fn resend_lost(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let (start, end) = self.recovery.resend?;
        if start < self.snd.una {
            self.recovery.resend = None;
            return None;
        }
        let len = distance(start, end).min(self.data_mss());
        if len == 0 || len > self.recovery_room() {
            return None;
        }
        self.recovery.resend = None;
        self.retransmit_at(now, buf, start, len)
    }

    /// Retransmits up to `len` bytes from `seq` (and the FIN if it follows them) and moves
    /// HighRxt past them.
    fn retransmit_at(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        seq: SeqNumber,
        len: usize,
    ) -> Option<Transmit> {
        let offset = distance(self.send_base(), seq);
        let len = len.min(buf.len());
        let n = self.snd.stream.read(offset, &mut buf[..len]);
        let fin = self.snd.fin_seq.is_some_and(|f| seq + n == f);
        let end = seq + n + usize::from(fin);
        self.recovery.high_rxt = self.recovery.high_rxt.max(if n == 0 && !fin { seq + len } else { end });
        if n == 0 && !fin {
            return None;
        }
        if self.recovery.active && self.sack_ok {
            self.recovery.rxt_marks.retain(|&(s, _)| s != seq);
            if self.recovery.rxt_marks.len() == MAX_RXT_MARKS {
                self.recovery.rxt_marks.remove(0);
            }
            self.recovery.rxt_marks.push((seq, self.snd.max));
        }
        let control = if fin { TcpControl::Fin } else { TcpControl::None };
        let mut repr = self.header(now, control, seq);
        // A resent segment carries PSH when it ends the data written so far, as the original
        // last segment of a write did; a resent piece from the middle does not.
        repr.push = n > 0 && offset + n == self.snd.stream.len();
        self.stats.retransmits += 1;
        self.undo_needs(seq, end);
        if self.snd.rtt_timing.is_some_and(|(s, _)| seq <= s) {
            self.snd.rtt_timing = None;
        }
        self.prr_sent(n);
        if self.config.rack {
            self.recovery.rack.on_sent(seq, end, now, true);
        }
        if self.config.pacing.is_some() {
            self.pace_sent(now, seq, n);
        }
        self.timers.rto.get_or_insert_with(|| now + self.rtt.rto());
        Some(self.transmit(repr, n))
    }

    /// New data, retransmissions after a timeout, and the FIN, as the windows, Nagle and SWS
    /// avoidance allow.
    fn send_data(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.snd.nxt < self.snd.max {
            self.skip_sacked_resend();
        }
        let base = self.send_base();
        let sent = distance(base, self.snd.nxt);
        let buffered = self.snd.stream.len();
        let unsent = buffered.saturating_sub(sent);
        let data_end = base + buffered;
        let fin_pending = self.snd.fin_queued
            && !self.fin_acked()
            && self.snd.nxt <= data_end
            && matches!(self.state, State::FinWait1 | State::Closing | State::LastAck);
        if unsent == 0 && !fin_pending {
            if self.config.congestion == CongestionAlgorithm::Bbr {
                self.note_app_limited();
            }
            return None;
        }
        // Pacing: the data waits for its departure time (a tail loss probe does not).
        if self.config.pacing.is_some() && self.recovery.tlp_budget == 0 && self.pace_hold(now) {
            return None;
        }
        if unsent > 0 && self.snd.una == self.snd.max && self.snd.wnd > 0 {
            // New data can go (a zero window holds it, and the restart, until the peer opens).
            self.cc_restart_after_idle(now);
        }
        let in_flight = distance(self.snd.una, self.snd.nxt);
        let mss = self.data_mss();
        // Limited transmit (RFC 3042): up to two segments past cwnd on the first two duplicate
        // ACKs.
        // With SACK information, SACKed bytes have left the network: they do not count against
        // cwnd (which makes limited transmit redundant). In recovery, with SACK or without, PRR
        // says how much may go (RFC 9937 §4), as it does through an ECN reduction by PRR.
        let sacked = !self.recovery.scoreboard.is_empty();
        let cc_room = if self.recovery.active || self.recovery.cwr {
            self.recovery_room()
        } else {
            let extra =
                if self.recovery.dup_acks > 2 || sacked { 0 } else { self.recovery.dup_acks as usize * mss };
            let (_, above) = self.recovery.scoreboard.sacked_above(self.snd.nxt);
            let cc_flight = in_flight.saturating_sub(self.recovery.scoreboard.sacked_bytes() - above);
            self.cc.window().saturating_add(extra + self.recovery.tlp_budget).saturating_sub(cc_flight)
        };
        let usable = self.snd.wnd.saturating_sub(in_flight).min(cc_room);
        let mut size = unsent.min(usable).min(mss).min(buf.len());
        // A D-SACK block goes in one segment, not in each of a super-segment's.
        if size == mss && self.snd.super_max > mss && self.rcv.dsack.is_none() {
            // A super-segment lent from the ring ends where the ring's storage does (one that
            // wrapped would be copied whole); the one segment that crosses it is copied alone.
            let run = self.snd.stream.ring_run(sent).map_or(usize::MAX, |r| r.max(mss));
            size = self.super_size(unsent.min(usable).min(buf.len()).min(run), unsent, in_flight, mss);
        }
        let mut clipped = false;
        if self.snd.nxt < self.snd.max
            && let Some(short) = self.resend_before_sacked(size)
        {
            size = short;
            clipped = true;
        }
        // Prepared content goes in its own segments, on its cuts (their sums are precomputed).
        // Pool buffers too, one segment each, but for a software-cut super-segment, which may
        // span whole buffers of one segment each (`set_pooled_trains`).
        if self.snd.stream.has_pieces()
            && let Some(limit) = self.pieces_limit(sent, size, mss)
            && limit < size
        {
            size = limit;
            clipped = true;
        }
        if size > 0 && self.config.push != Push::Burst {
            size = self.linux_packet(now, size, unsent, usable, in_flight, mss);
        }
        let ends_data = size == unsent;
        let fin = fin_pending && ends_data;
        // Sender SWS avoidance and Nagle (RFC 9293 §3.8.6.2.1).
        let allowed = size > 0
            && (size >= mss.min(buf.len())
                || (ends_data && (self.snd.nodelay || in_flight == 0 || self.snd.fin_queued))
                || (in_flight == 0 && size >= self.snd.max_wnd / 2)
                || clipped
                || self.persist.force_send);
        // A FIN with no data left to send goes whatever the windows say.
        if !(allowed || (fin && unsent == 0)) {
            // Data waits. With nothing in flight, only the persist timer gets it going.
            if unsent > 0 && self.timers.rto.is_none() && self.timers.persist.is_none() && in_flight == 0 {
                self.timers.persist = Some(now + self.persist_interval());
            }
            return None;
        }
        self.persist.force_send = false;
        let seq = self.snd.nxt;
        let n = self.snd.stream.read(sent, &mut buf[..size]);
        let control = if fin { TcpControl::Fin } else { TcpControl::None };
        let mut repr = self.header(now, control, seq);
        // ECN (RFC 3168 §6.1.2, §6.1.5): new data goes as ECT, and the first new data after a
        // reduction carries CWR; resent data is Not-ECT.
        let ect = self.ecn.ok && n > 0 && seq >= self.snd.max;
        repr.cwr = ect && std::mem::take(&mut self.ecn.cwr_pending);
        // PSH (RFC 9293 §3.9.1, RFC 1122 §4.2.2.2) on the segment that empties the send buffer,
        // and, outside loss recovery, on the last one of a burst: the windows leave less than a
        // segment after it, or Nagle holds back the short rest. The receiver delivers there, as
        // Linux marks its bursts; segments sent in recovery (limited transmit, new data beside
        // retransmissions) and resent ones (after a timeout) do not end a burst the sender chose.
        let rest = unsent - size;
        let burst_end = usable.saturating_sub(size) < mss
            || (rest > 0 && rest < mss && !self.snd.nodelay && !self.snd.fin_queued);
        let calm = !self.recovery.active
            && self.recovery.dup_acks == 0
            && self.recovery.tlp_budget == 0
            && seq >= self.snd.max;
        repr.push = n > 0
            && match self.config.push {
                Push::Burst => ends_data || (calm && burst_end),
                Push::Linux { .. } => Packet::sent(&mut self.snd.packet, seq, n) || ends_data,
            };
        let end = seq + n + usize::from(fin);
        if self.config.cwnd_validation && n > 0 && seq >= self.snd.max {
            self.track_cwnd_use(in_flight + n, usable.saturating_sub(size) < mss && rest > 0);
        }
        if seq >= self.snd.max && (n > 0 || fin) {
            self.snd.last_seg = seq;
        }
        if seq < self.snd.max {
            // A resent segment may run past SND.MAX (sent again in larger pieces after a
            // timeout): the bytes above it go out for the first time.
            let resent = n.min(distance(seq, self.snd.max));
            self.count_resend(seq, resent, mss);
            self.stats.bytes_out += (n - resent) as u64;
        } else {
            self.stats.bytes_out += n as u64;
            if !self.ts.ok && self.snd.rtt_timing.is_none() {
                self.snd.rtt_timing = Some((seq, now));
            }
        }
        if fin {
            self.snd.fin_seq = Some(seq + n);
        }
        self.cc_on_sent(seq, end, now);
        if self.config.rack {
            self.rack_sent(seq, end, now, mss);
        }
        self.prr_sent(n);
        if self.config.pacing.is_some() {
            self.pace_sent(now, seq, n);
        }
        self.snd.nxt = end;
        self.snd.max = self.snd.max.max(end);
        self.timers.rto.get_or_insert_with(|| now + self.rtt.rto());
        self.timers.persist = None;
        self.arm_tlp(now);
        let mut t = self.transmit_ect(repr, n, ect);
        if n > mss {
            t.segment_size = u16::try_from(mss).unwrap_or(u16::MAX);
            self.stats.segments_out += n.div_ceil(mss) as u64 - 1;
        }
        Some(t)
    }

    /// Where a segment of `size` bytes from stream offset `sent` ends early once the send stream
    /// holds pieces ([`SendStream::prepared_limit`](super::SendStream::prepared_limit)); a
    /// super-segment of whole pool buffers when the stack cuts it in software
    /// ([`set_pooled_trains`](Self::set_pooled_trains)), each buffer a segment, runs on over them.
    fn pieces_limit(&self, sent: usize, size: usize, mss: usize) -> Option<usize> {
        if size > mss && self.snd.pooled_trains {
            if let Some(run) = self.snd.stream.pooled_run(sent, mss, size) {
                return Some(run);
            }
            // No run here: one segment, as without super-segments.
            let one = self.snd.stream.prepared_limit(sent, mss).unwrap_or(mss);
            return Some(one.min(mss));
        }
        self.snd.stream.prepared_limit(sent, if size > mss { usize::MAX } else { mss })
    }

    /// Resending after a timeout skips what the peer SACKed since. Out of line, as the other
    /// resend cases of [`send_data`](Self::send_data): the code a healthy connection runs for
    /// every segment should fit the instruction cache.
    #[cold]
    #[inline(never)]
    fn skip_sacked_resend(&mut self) {
        while self.snd.nxt < self.snd.max
            && let Some(end) = self.recovery.scoreboard.sacked_end(self.snd.nxt)
        {
            self.snd.nxt = end;
        }
    }

    /// A resend of `size` bytes at SND.NXT stops at the next SACKed byte: the shorter size if
    /// one comes before its end.
    #[cold]
    #[inline(never)]
    fn resend_before_sacked(&self, size: usize) -> Option<usize> {
        let next = self.recovery.scoreboard.next_sacked(self.snd.nxt)?;
        let short = distance(self.snd.nxt, next);
        (short < size).then_some(short)
    }

    /// A resend of `n` bytes at `seq`: a resent super-segment is as many retransmissions as it
    /// has segments of `mss`, and a timed segment it covers is no RTT sample (Karn).
    #[cold]
    #[inline(never)]
    fn count_resend(&mut self, seq: SeqNumber, n: usize, mss: usize) {
        self.stats.retransmits += n.div_ceil(mss).max(1) as u64;
        self.undo_needs(seq, seq + n);
        if self.snd.rtt_timing.is_some_and(|(s, _)| seq <= s) {
            self.snd.rtt_timing = None;
        }
    }

    /// `start..end` went again: the window reduction that may still be undone needs a D-SACK of
    /// it too (`tcp/undo.rs`); one that resent too many ranges no longer can be.
    fn undo_needs(&mut self, start: SeqNumber, end: SeqNumber) {
        if self.recovery.undo.as_mut().is_some_and(|u| !u.retransmitted(start, end)) {
            self.recovery.undo = None;
        }
    }

    /// [`pace_hold`](Self::pace_hold) when the connection paces; the knob is tested before any
    /// clock arithmetic, so that a connection without pacing pays a test for it.
    #[inline]
    fn paced_hold(&mut self, now: Instant) -> bool {
        self.config.pacing.is_some() && self.pace_hold(now)
    }

    /// Whether data must wait for its departure time ([`Config::pacing`](crate::tcp::Config::pacing)):
    /// then the pacing timer is armed for it. Only when there is data the windows would let go
    /// (or recovery is under way), so that the end of a burst or a full window arms no timer
    /// that would find nothing to send (the ACK that opens the window calls here again).
    #[cold]
    #[inline(never)]
    fn pace_hold(&mut self, now: Instant) -> bool {
        let Some(at) = self.snd.pacer.departure(now) else { return false };
        if Packet::continues(&self.snd.packet, now, self.snd.nxt) {
            // The rest of a TSO packet goes with its first segment.
            return false;
        }
        let unsent = distance(self.send_base(), self.snd.nxt) < self.snd.stream.len();
        let room = distance(self.snd.una, self.snd.nxt) < self.cc.window().min(self.snd.wnd);
        let waiting = self.recovery.fast_rexmit
            || self.recovery.active
            || (room && (unsent || self.snd.nxt < self.snd.max));
        if waiting {
            self.snd.pacer.hold(now);
            self.timers.pace = Some(at);
        }
        waiting
    }

    /// A data transmission of `len` bytes at `seq` left at `now`: the pacing's next departure
    /// time moves on, at the rate the window and the smoothed RTT give now (before the
    /// transmission counts in the flight, as Linux computes the rate on the ACK that let it go).
    /// Under [`Push::Linux`] a TSO packet is paced whole, as Linux paces its packets: its first
    /// segment is charged for all of it, the others for nothing.
    #[cold]
    #[inline(never)]
    fn pace_sent(&mut self, now: Instant, seq: SeqNumber, len: usize) {
        let Some(p) = self.config.pacing else { return };
        let bytes = Packet::paced_len(&self.snd.packet, now, seq, len);
        let cwnd = self.cc.window();
        let flight = distance(self.snd.una, self.snd.nxt);
        // An algorithm with a rate of its own (BBR's) sets it; else cwnd per smoothed RTT.
        let rate = match self.cc.pacing_rate() {
            Some(r) => Some(p.max_rate.map_or(r, |m| r.min(m))),
            None => pacing::rate(&p, cwnd.max(flight), cwnd, self.cc.ssthresh(), self.rtt.srtt()),
        };
        let segments = u32::try_from(bytes.div_ceil(self.snd.mss.max(1))).unwrap_or(u32::MAX);
        if let Some(waited) = self.snd.pacer.sent(now, bytes, segments, rate) {
            self.stats.paced += 1;
            self.stats.pacing_wait = self.stats.pacing_wait.saturating_add(waited);
        }
        if let Some(rate) = rate {
            self.stats.pacing_rate = rate;
        }
    }

    /// Under [`Push::Linux`]: the TSO packet the segment of `size` bytes at SND.NXT belongs to
    /// (planned as Linux's `tcp_write_xmit` would when it starts one), and the segment's size,
    /// a super-segment cut where the packet ends.
    #[cold]
    #[inline(never)]
    fn linux_packet(
        &mut self,
        now: Instant,
        size: usize,
        unsent: usize,
        room: usize,
        in_flight: usize,
        mss: usize,
    ) -> usize {
        let Push::Linux { min_tso_segs } = self.config.push else { return size };
        let sizing = Sizing {
            mss,
            cwnd: self.cc.window(),
            ssthresh: self.cc.ssthresh(),
            srtt: self.rtt.srtt(),
            pacing: self.config.pacing.unwrap_or(Pacing::LINUX),
            room,
            unsent,
            tail_ok: self.snd.nodelay || in_flight == 0 || self.snd.fin_queued,
        };
        let end =
            Packet::end(&mut self.snd.packet, now, self.snd.nxt, mss, || Packet::plan(min_tso_segs, &sizing));
        if size > mss { size.min(distance(self.snd.nxt, end).max(mss)) } else { size }
    }

    /// The payload of a super-segment (TSO) when `fits` bytes (at least one segment of `mss`)
    /// fit the windows and the buffer: whole segments up to the limit, and the short last one
    /// only where the data ends (`unsent`) and Nagle would let it go now (Linux's
    /// `tcp_mss_split_point`).
    #[cold]
    #[inline(never)]
    fn super_size(&self, fits: usize, unsent: usize, in_flight: usize, mss: usize) -> usize {
        let max = self.snd.super_max.min(self.snd.super_frames.saturating_mul(mss).max(mss));
        let size = fits.min(max / mss * mss);
        let tail_ok = size == unsent && (self.snd.nodelay || in_flight == 0 || self.snd.fin_queued);
        if tail_ok { size } else { size - size % mss }
    }

    /// Logs `start..end` with RACK: each segment a super-segment is cut into as a transmission of
    /// its own, so that the loss of one is told apart from its delivered neighbours.
    fn rack_sent(&mut self, start: SeqNumber, end: SeqNumber, now: Instant, mss: usize) {
        let retransmission = start < self.snd.max;
        let mut from = start;
        while distance(from, end) > mss {
            self.recovery.rack.on_sent(from, from + mss, now, retransmission);
            from += mss;
        }
        self.recovery.rack.on_sent(from, end, now, retransmission);
    }

    /// Nothing is left to send: where the window had room and no loss waits to be repaired,
    /// the application limits sending, and the delivery rate samples of what is in flight say
    /// so (the draft's and Linux's `tcp_rate_check_app_limited`).
    #[cold]
    #[inline(never)]
    fn note_app_limited(&mut self) {
        let in_flight = self.recovery_pipe();
        if in_flight < self.cc.window() && !self.recovery.active {
            self.recovery.rack.set_app_limited(in_flight);
        }
    }

    /// A zero-window probe: one byte past the window (RFC 9293 §3.8.6.1), not counted as sent,
    /// or an empty segment at SND.UNA - 1 ([`WindowProbe::Empty`]); and the persist timer again
    /// with backoff.
    fn send_probe(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let sent = distance(self.send_base(), self.snd.nxt);
        if self.snd.wnd != 0 || buf.is_empty() {
            return None;
        }
        if self.config.window_probe == WindowProbe::Empty {
            if sent >= self.snd.stream.len() {
                return None;
            }
            let repr = self.header(now, TcpControl::None, self.snd.una - 1);
            self.timers.persist = Some(now + self.persist_interval());
            return Some(self.transmit(repr, 0));
        }
        let n = self.snd.stream.read(sent, &mut buf[..1]);
        if n == 0 {
            return None;
        }
        let seq = self.snd.nxt;
        let repr = self.header(now, TcpControl::None, seq);
        self.persist.probe_end = Some(seq + 1);
        self.timers.persist = Some(now + self.persist_interval());
        Some(self.transmit(repr, n))
    }

    /// The persist timer's next interval: the RTO, at least [`MIN_PERSIST`], doubled for each
    /// expiry since the peer last moved the window or acknowledged data (RFC 1122 §4.2.2.17:
    /// "increase exponentially the interval between successive probes"), up to the RTO's own
    /// ceiling. The doubling has no other cap: it once stopped at 64 times the RTO, which with a
    /// 1 ms RTO woke the connection every 64 ms for as long as it lived.
    fn persist_interval(&self) -> Duration {
        let mut interval = self.rtt.rto().max(MIN_PERSIST);
        for _ in 0..self.persist.backoff {
            interval = interval.saturating_mul(2);
            if interval >= MAX_RTO {
                return MAX_RTO;
            }
        }
        interval.min(MAX_RTO)
    }

    /// Records how much of the congestion window new data used (RFC 7661 §4.3, as Linux's
    /// `tcp_cwnd_validate`): once per window of data, or whenever the window filled it or the
    /// flight grew past the window's most.
    fn track_cwnd_use(&mut self, flight: usize, limited: bool) {
        let snd = &mut self.snd;
        if snd.una >= snd.usage_end || limited || (!snd.cwnd_limited && flight > snd.max_flight) {
            snd.cwnd_limited = limited;
            snd.max_flight = flight;
            snd.usage_end = snd.nxt.max(snd.max);
        }
    }

    /// The tail loss probe (RFC 8985 §7.3): a new segment when there is unsent data and the
    /// receive window lets one go (one segment past the congestion window), else the last segment
    /// sent (or the FIN) again.
    fn send_probe_segment(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let mss = self.data_mss();
        self.recovery.tlp_budget = mss;
        let probe = self.send_data(now, buf);
        self.recovery.tlp_budget = 0;
        let retransmission = probe.is_none();
        let probe = probe.or_else(|| {
            // What was sent, not what is queued: bytes past SND.MAX (data Nagle holds back) sent
            // as a retransmission would not move SND.MAX, and the peer's ACK of them would then
            // be refused as acknowledging what was never sent, with every segment carrying it.
            let data_end = (self.send_base() + self.snd.stream.len()).min(self.snd.max);
            let start = self.snd.last_seg.max(self.snd.una);
            let len = distance(start, data_end).min(mss);
            self.retransmit_at(now, buf, start, len)
        })?;
        self.recovery.tlp_out = Some((self.snd.max, retransmission));
        Some(probe)
    }
}
