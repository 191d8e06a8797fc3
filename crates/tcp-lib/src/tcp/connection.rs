//! [`Connection`]: one TCB and its state machine. See the [module documentation](super).

use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::buffer::{Assembler, RingBuffer};
use super::congestion::CongestionControl;
use super::prepared::{PreparedSegments, PreparedSlice};
use super::rtt::RttEstimator;
use super::rules::{self, acceptable};
use super::sack::{RecentBlocks, Scoreboard};
use super::send_stream::SendStream;
use super::time_wait::{TimeWait, TimeWaitParts};
use super::{Config, ConnectionError, State, Stats, Transmit, reset_for};
use crate::wire::tcp::{SackBlocks, Timestamp};
use crate::wire::{SeqNumber, TcpControl, TcpRepr};

/// The MSS assumed when the peer's SYN has no MSS option (RFC 9293 §3.7.1).
const DEFAULT_MSS: u16 = 536;
/// The smallest send MSS we accept, so a peer cannot make us send one-byte segments.
const MIN_MSS: u16 = 64;
/// Bytes the timestamps option takes in every segment (RFC 7323 §3: 10, padded to 12).
const TS_OPTION_LEN: usize = 12;
/// The IPv4 and TCP headers without options: a path MTU less this is the most segment bytes.
const HEADERS_LEN: usize = 40;
/// The smallest IPv4 MTU (RFC 791): every path carries it, so no MTU report goes lower.
const MIN_PATH_MTU: usize = 68;
/// The MTU plateaus of RFC 1191 §7, for a fragmentation-needed message without a next-hop MTU
/// (from a router older than RFC 1191): the next one down is tried.
const MTU_PLATEAUS: [usize; 10] = [32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68];
/// The largest window scale shift (RFC 7323 §2.3).
const MAX_WSCALE: u8 = 14;
/// The persist timer's shortest interval, whatever the RTO (Linux's `tcp_probe0_base` takes the
/// same floor, `TCP_RTO_MIN`): a connection configured with a tiny minimum RTO still probes a
/// closed window at a pace the peer can answer.
const MIN_PERSIST: Duration = Duration::from_millis(200);
/// The most retransmissions whose loss is tracked in SACK recovery.
const MAX_RXT_MARKS: usize = 16;
/// A TCP connection (one TCB): a sans-IO state machine. See the [module documentation](super)
/// for the calling contract.
#[derive(Debug)]
pub struct Connection {
    config: Config,
    local: SocketAddrV4,
    remote: SocketAddrV4,
    state: State,
    error: Option<ConnectionError>,
    /// Created by [`accept`](Self::accept) (passive open).
    passive: bool,
    /// Both SYNs carried a window scale (RFC 7323).
    ws_ok: bool,
    /// Both SYNs carried SACK-permitted (RFC 2018).
    sack_ok: bool,

    /// The send side: the send sequence space, the send stream, segment size and retransmission.
    snd: SendSide,
    /// The receive side: the receive sequence space, the receive ring and out-of-order data.
    rcv: RecvSide,
    /// The ACK we owe the peer.
    ack: AckState,
    /// Timestamps (RFC 7323): our clock and TS.Recent.
    ts: Timestamps,
    /// The deadlines of the timers.
    timers: Timers,
    /// Zero-window probing (the persist timer's state).
    persist: Persist,
    /// Keepalive probing (the keepalive timer's state).
    keepalive: KeepaliveState,
    /// Rate limits of the ACKs answering unacceptable segments (RFC 5961 §7 and bare segments).
    limits: RateLimits,
    /// Loss recovery: duplicate ACKs, fast recovery, the SACK scoreboard.
    recovery: Recovery,

    rtt: RttEstimator,
    // Congestion control.
    cc: Box<dyn CongestionControl>,
    pending_rst: Option<TcpRepr<'static>>,

    stats: Stats,
}

/// The send side of a connection: the send sequence space (RFC 9293 §3.3.1), the send stream,
/// the segment size and the retransmission state.
#[derive(Debug)]
struct SendSide {
    iss: SeqNumber,
    /// SND.UNA.
    una: SeqNumber,
    /// SND.NXT.
    nxt: SeqNumber,
    /// The highest sequence number sent plus one (SND.NXT is rewound on a timeout; this is not).
    max: SeqNumber,
    /// SND.WND: the peer's window, scaled, in bytes.
    wnd: usize,
    /// The largest window the peer offered.
    max_wnd: usize,
    /// SND.WL1.
    wl1: SeqNumber,
    /// SND.WL2.
    wl2: SeqNumber,
    syn_acked: bool,
    /// The application closed its sending side: a FIN follows the buffered data.
    fin_queued: bool,
    /// The sequence number of our FIN, once sent.
    fin_seq: Option<SeqNumber>,
    /// What is queued to send, from the first unacknowledged data byte on.
    stream: SendStream,
    /// Nagle's algorithm is off.
    nodelay: bool,
    /// Payload bytes per segment we send (the peer's MSS, clamped, minus the timestamps option).
    mss: usize,
    /// The path MTU learned from ICMP fragmentation-needed messages (RFC 1191), if any; it caps
    /// `mss`.
    path_mtu: Option<usize>,
    /// The peer's window scale shift.
    wscale: u8,
    /// Retransmission timeouts since data was last acknowledged.
    retries: u32,
    /// The segment timed for an RTT sample when timestamps are off (Karn's algorithm).
    rtt_timing: Option<(SeqNumber, Instant)>,
}

/// The receive side of a connection: the receive sequence space, the receive ring and the data
/// held out of order.
#[derive(Debug)]
struct RecvSide {
    irs: SeqNumber,
    /// RCV.NXT.
    nxt: SeqNumber,
    /// The right edge of the window last advertised (never moved left).
    adv: SeqNumber,
    buf: RingBuffer,
    ooo: Assembler,
    /// The starts of the out-of-order segments received most recently, for the order of our SACK
    /// blocks (RFC 2018 §4).
    sack_recent: RecentBlocks,
    /// A FIN received out of order, at this sequence number.
    ooo_fin: Option<SeqNumber>,
    fin_received: bool,
    /// The application will not read any more: data is acknowledged and discarded.
    closed: bool,
    /// Payload bytes of a full-sized segment from the peer.
    mss: usize,
    /// Our window scale shift.
    wscale: u8,
}

/// The ACK we owe the peer.
#[derive(Debug)]
struct AckState {
    /// An ACK is due (at once when `now`, else when the delayed-ACK timer expires).
    pending: bool,
    /// The ACK goes out with the next `poll_transmit`.
    now: bool,
    /// Bytes received in order since our last ACK.
    unacked_bytes: usize,
}

/// Timestamps (RFC 7323).
#[derive(Debug)]
struct Timestamps {
    /// Both SYNs carried timestamps.
    ok: bool,
    /// The zero of the timestamp clock.
    epoch: Instant,
    offset: u32,
    /// TS.Recent.
    recent: u32,
    /// When TS.Recent was recorded (PAWS ages it out).
    recent_at: Instant,
    /// The RCV.NXT our last ACK carried (Last.ACK.sent).
    last_ack_sent: SeqNumber,
}

/// The deadlines of the timers (`None`: not armed).
#[derive(Debug)]
struct Timers {
    /// Retransmission (RFC 6298).
    rto: Option<Instant>,
    /// Delayed ACK (RFC 1122 §4.2.3.2).
    delayed_ack: Option<Instant>,
    /// Persist (zero-window probing, RFC 1122 §4.2.2.17).
    persist: Option<Instant>,
    /// Keepalive (RFC 1122 §4.2.3.6).
    keepalive: Option<Instant>,
    /// The end of TIME-WAIT (2·MSL).
    time_wait: Option<Instant>,
}

/// Zero-window probing (RFC 1122 §4.2.2.17).
#[derive(Debug)]
struct Persist {
    /// Persist timer expiries since the peer last moved the window or acknowledged data.
    backoff: u32,
    /// Zero-window probes sent since the peer last sent an acceptable ACK. RFC 1122 §4.2.2.17: the
    /// connection must stay open while the peer answers probes; one that never answers times out
    /// like any unanswered retransmission (after `max_retransmits` probes).
    unanswered_probes: u32,
    probe_pending: bool,
    /// The end of the last zero-window probe byte: an ACK may cover it.
    probe_end: Option<SeqNumber>,
    /// The persist timer expired with a non-zero but unusable window: send what fits.
    force_send: bool,
}

/// Keepalive probing (RFC 1122 §4.2.3.6).
#[derive(Debug)]
struct KeepaliveState {
    /// Unanswered probes.
    sent: u32,
    pending: bool,
}

/// Rate limits of our answers to unacceptable segments (see [`rules`]).
#[derive(Debug)]
struct RateLimits {
    /// When we last answered an unacceptable segment without data (rate limit).
    last_oow_ack: Option<Instant>,
    /// The start of the current one-second window of the challenge ACK limit, and the
    /// challenge ACKs sent in it (RFC 5961 §7).
    challenge: Option<(Instant, u32)>,
}

/// Loss recovery: fast retransmit and recovery (RFC 5681, RFC 6582), SACK-based recovery (RFC
/// 6675).
#[derive(Debug)]
struct Recovery {
    dup_acks: u32,
    /// In fast recovery.
    active: bool,
    /// The recovery point (RFC 6582 `recover`).
    recover: SeqNumber,
    /// A fast retransmission of the segment at SND.UNA is due.
    fast_rexmit: bool,
    /// What the peer SACKed (RFC 6675 §3); empty unless SACK was negotiated.
    scoreboard: Scoreboard,
    /// RFC 6675 HighRxt: the end of the highest retransmission of the current SACK recovery.
    high_rxt: SeqNumber,
    /// Retransmissions of the current SACK recovery: (first byte, SND.MAX when sent), at most
    /// [`MAX_RXT_MARKS`], oldest first. SACKs of data sent after a retransmission while its hole
    /// at SND.UNA stays open say that the retransmission was lost too.
    rxt_marks: Vec<(SeqNumber, SeqNumber)>,
}

/// The smallest shift that makes `buffer` fit the 16-bit window field, at most 14.
fn wscale_for(buffer: usize) -> u8 {
    let mut shift = 0;
    while shift < MAX_WSCALE && (buffer >> shift) > usize::from(u16::MAX) {
        shift += 1;
    }
    shift
}

/// The distance from `from` to `to` in bytes, 0 when `to` is not after `from`.
fn distance(from: SeqNumber, to: SeqNumber) -> usize {
    usize::try_from(to - from).unwrap_or(0)
}

impl Connection {
    fn new(config: Config, local: SocketAddrV4, remote: SocketAddrV4, iss: SeqNumber, now: Instant) -> Self {
        let rcv_wscale = if config.window_scaling { wscale_for(config.recv_buffer) } else { 0 };
        Self {
            config,
            local,
            remote,
            state: State::Closed,
            error: None,
            passive: false,
            ws_ok: false,
            sack_ok: false,
            snd: SendSide {
                iss,
                una: iss,
                nxt: iss,
                max: iss,
                wnd: 0,
                max_wnd: 0,
                wl1: SeqNumber::default(),
                wl2: iss,
                syn_acked: false,
                fin_queued: false,
                fin_seq: None,
                stream: SendStream::new(config.send_buffer),
                nodelay: config.nodelay,
                mss: usize::from(DEFAULT_MSS),
                path_mtu: None,
                wscale: 0,
                retries: 0,
                rtt_timing: None,
            },
            rcv: RecvSide {
                irs: SeqNumber::default(),
                nxt: SeqNumber::default(),
                adv: SeqNumber::default(),
                buf: RingBuffer::new(config.recv_buffer),
                ooo: Assembler::new(config.max_ooo_ranges),
                sack_recent: RecentBlocks::default(),
                ooo_fin: None,
                fin_received: false,
                closed: false,
                mss: usize::from(config.mss),
                wscale: rcv_wscale,
            },
            ack: AckState { pending: false, now: false, unacked_bytes: 0 },
            ts: Timestamps {
                ok: false,
                epoch: now,
                // A per-connection timestamp offset (RFC 7323 §5.4 recommends one) derived from the
                // ISS, which the stack draws from a keyed hash (RFC 6528).
                offset: iss.get().wrapping_mul(0x9e37_79b9).rotate_left(13),
                recent: 0,
                recent_at: now,
                last_ack_sent: SeqNumber::default(),
            },
            timers: Timers { rto: None, delayed_ack: None, persist: None, keepalive: None, time_wait: None },
            persist: Persist {
                backoff: 0,
                unanswered_probes: 0,
                probe_pending: false,
                probe_end: None,
                force_send: false,
            },
            keepalive: KeepaliveState { sent: 0, pending: false },
            limits: RateLimits { last_oow_ack: None, challenge: None },
            recovery: Recovery {
                dup_acks: 0,
                active: false,
                recover: iss,
                fast_rexmit: false,
                scoreboard: Scoreboard::new(),
                high_rxt: iss,
                rxt_marks: Vec::with_capacity(MAX_RXT_MARKS),
            },
            rtt: RttEstimator::new(config.initial_rto, config.min_rto),
            cc: config.congestion.build(),
            pending_rst: None,
            stats: Stats::default(),
        }
    }

    /// Active open (RFC 9293 §3.10.1): a connection in SYN-SENT whose first
    /// [`poll_transmit`](Self::poll_transmit) is the SYN. `iss` is the initial send sequence
    /// number (RFC 6528: the stack draws it from a keyed hash).
    #[must_use]
    pub fn connect(
        config: Config,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        iss: SeqNumber,
        now: Instant,
    ) -> Self {
        let mut c = Self::new(config, local, remote, iss, now);
        c.state = State::SynSent;
        c
    }

    /// Passive open: the connection a listener creates for the SYN `syn` from `remote` (the
    /// LISTEN-state processing of RFC 9293 §3.10.7.2), in SYN-RECEIVED; its first
    /// [`poll_transmit`](Self::poll_transmit) is the SYN-ACK. Returns `None` if `syn` is not a
    /// SYN without ACK, or its ports do not match `local` and `remote`.
    #[must_use]
    pub fn accept(
        config: Config,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        syn: &TcpRepr<'_>,
        iss: SeqNumber,
        now: Instant,
    ) -> Option<Self> {
        if syn.control != TcpControl::Syn
            || syn.ack_number.is_some()
            || syn.src_port != remote.port()
            || syn.dst_port != local.port()
        {
            return None;
        }
        let mut c = Self::new(config, local, remote, iss, now);
        c.passive = true;
        c.state = State::SynReceived;
        c.take_syn(syn, now);
        Some(c)
    }

    // ---------------------------------------------------------------------------------------
    // Queries.

    /// The RFC 9293 state.
    #[must_use]
    pub const fn state(&self) -> State {
        self.state
    }

    /// Why the connection failed, once it has.
    #[must_use]
    pub const fn error(&self) -> Option<ConnectionError> {
        self.error
    }

    /// The local address.
    #[must_use]
    pub const fn local(&self) -> SocketAddrV4 {
        self.local
    }

    /// The remote address.
    #[must_use]
    pub const fn remote(&self) -> SocketAddrV4 {
        self.remote
    }

    /// Counters and estimates.
    #[must_use]
    pub fn stats(&self) -> Stats {
        Stats {
            srtt: self.rtt.srtt(),
            rttvar: self.rtt.rttvar(),
            rto: self.rtt.rto(),
            cwnd: self.cc.window(),
            ssthresh: self.cc.ssthresh(),
            ..self.stats
        }
    }

    /// Whether [`recv`](Self::recv) has something to return: data, or the end of the stream
    /// (the peer's FIN, or the connection closed).
    #[must_use]
    pub fn is_readable(&self) -> bool {
        !self.rcv.buf.is_empty() || self.rcv.fin_received || self.state == State::Closed
    }

    /// Whether [`send`](Self::send) accepts at least one byte now.
    #[must_use]
    pub fn is_writable(&self) -> bool {
        self.may_send() && self.snd.stream.free() > 0
    }

    /// Whether the connection is closed (normally, or with an [`error`](Self::error)).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Whether the peer ended its stream and every byte of it has been read.
    #[must_use]
    pub fn recv_finished(&self) -> bool {
        self.rcv.fin_received && self.rcv.buf.is_empty()
    }

    /// Whether the handshake completed (the connection is or was synchronized).
    #[must_use]
    pub const fn is_established(&self) -> bool {
        !matches!(self.state, State::Closed | State::Listen | State::SynSent | State::SynReceived)
    }

    /// Bytes waiting to be read.
    #[must_use]
    pub fn recv_queue(&self) -> usize {
        self.rcv.buf.len()
    }

    /// Bytes in the send buffer (unsent, and sent but unacknowledged).
    #[must_use]
    pub fn send_queue(&self) -> usize {
        self.snd.stream.len()
    }

    /// Whether both SYNs carried SACK-permitted (RFC 2018).
    #[must_use]
    pub const fn sack_permitted(&self) -> bool {
        self.sack_ok
    }

    /// Whether timestamps are in use (RFC 7323).
    #[must_use]
    pub const fn timestamps(&self) -> bool {
        self.ts.ok
    }

    /// The window scale shifts in use, `(ours, the peer's)`, or `None` without window scaling.
    #[must_use]
    pub const fn window_scale(&self) -> Option<(u8, u8)> {
        if self.ws_ok { Some((self.rcv.wscale, self.snd.wscale)) } else { None }
    }

    /// The most payload bytes we put in one segment.
    #[must_use]
    pub const fn send_mss(&self) -> usize {
        self.snd.mss
    }

    /// The path MTU the send MSS makes room for: the MSS, the options every segment carries
    /// (timestamps) and the IPv4 and TCP headers. [`set_path_mtu`](Self::set_path_mtu) lowers it.
    #[must_use]
    pub const fn path_mtu(&self) -> usize {
        self.snd.mss + self.option_len() + HEADERS_LEN
    }

    const fn option_len(&self) -> usize {
        if self.ts.ok { TS_OPTION_LEN } else { 0 }
    }

    /// The send MSS for a path MTU: the MTU less the headers and `option_len`, at least 1.
    fn mss_for_mtu(mtu: usize, option_len: usize) -> usize {
        mtu.saturating_sub(HEADERS_LEN + option_len).max(1)
    }

    /// Lowers the path MTU to `mtu` (RFC 1191 §6.3; never below 68, the IPv4 minimum) and with it
    /// the send MSS, to `mtu` less 40 bytes of headers and the timestamps option when in use. An
    /// MTU not below the current [`path_mtu`](Self::path_mtu) is ignored: the path MTU only
    /// shrinks here. Data in flight is resent at once in segments of the new size (those sent
    /// before were dropped by the router that reported the MTU), without the congestion response
    /// of a loss, as Linux's `tcp_simple_retransmit` does. Returns whether the MSS shrank.
    ///
    /// This trusts `mtu`: for an ICMP report use
    /// [`handle_frag_needed`](Self::handle_frag_needed), which checks it against the connection
    /// first.
    pub fn set_path_mtu(&mut self, mtu: usize) -> bool {
        if matches!(self.state, State::Closed | State::Listen | State::TimeWait) {
            return false;
        }
        let mtu = mtu.max(MIN_PATH_MTU);
        if mtu >= self.path_mtu() {
            return false;
        }
        self.snd.path_mtu = Some(mtu);
        self.snd.mss = Self::mss_for_mtu(mtu, self.option_len());
        if self.snd.syn_acked && self.snd.una < self.snd.nxt {
            self.snd.nxt = self.snd.una;
            self.recovery.high_rxt = self.snd.una;
        }
        true
    }

    /// An ICMP destination unreachable / fragmentation needed (RFC 1191) for a segment of this
    /// connection whose quoted sequence number is `seq`, reporting `next_hop_mtu` (0 from a router
    /// older than RFC 1191: the next plateau of RFC 1191 §7 below the current path MTU is taken).
    /// Against blind attacks (RFC 5927 §4.1), the report is ignored unless `seq` is SND.UNA or
    /// lies in SND.UNA..SND.NXT (a segment in flight); then [`set_path_mtu`](Self::set_path_mtu)
    /// applies. Returns whether the send MSS shrank. Follow it with
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn handle_frag_needed(&mut self, seq: SeqNumber, next_hop_mtu: u16) -> bool {
        let in_flight = seq == self.snd.una || (self.snd.una < seq && seq < self.snd.max);
        if !in_flight {
            return false;
        }
        let mtu = if next_hop_mtu == 0 {
            let current = self.path_mtu();
            MTU_PLATEAUS.into_iter().find(|&p| p < current).unwrap_or(MIN_PATH_MTU)
        } else {
            usize::from(next_hop_mtu)
        };
        self.set_path_mtu(mtu)
    }

    /// The peer's send window in bytes (scaled).
    #[must_use]
    pub const fn send_window(&self) -> usize {
        self.snd.wnd
    }

    /// Disables (`true`) or enables Nagle's algorithm.
    pub fn set_nodelay(&mut self, nodelay: bool) {
        self.snd.nodelay = nodelay;
    }

    /// Out-of-order ranges and bytes held (tests check the bounds).
    #[cfg(test)]
    pub(crate) fn ooo_held(&self) -> (usize, usize) {
        (self.rcv.ooo.len(), self.rcv.ooo.bytes())
    }

    /// Bytes of storage the send and receive rings hold now (tests check they are released).
    #[cfg(test)]
    pub(crate) fn buffers_allocated(&self) -> (usize, usize) {
        (self.snd.stream.allocated(), self.rcv.buf.allocated())
    }

    fn may_send(&self) -> bool {
        !self.snd.fin_queued
            && matches!(
                self.state,
                State::SynSent | State::SynReceived | State::Established | State::CloseWait
            )
    }

    // ---------------------------------------------------------------------------------------
    // Application calls.

    /// Queues bytes to send; returns how many fit in the send buffer (0 once the sending side
    /// is shut down or the connection closed). Data queued before the handshake completes is sent
    /// after it. Like every input, follow it with [`poll_transmit`](Self::poll_transmit) (which
    /// also arms the persist timer when the peer's window is closed).
    pub fn send(&mut self, data: &[u8]) -> usize {
        if !self.may_send() {
            return 0;
        }
        self.snd.stream.push(data)
    }

    /// Queues prepared content to send after what is queued, by reference: its bytes are not
    /// copied into the send ring, and the connection holds the [`Arc`] until they are all
    /// acknowledged (retransmissions read them again). Returns false (nothing queued) once the
    /// sending side is shut down or the connection closed, or when 64 runs of content are already
    /// queued. Segments are cut at the content's boundaries and realigned to its prepared cuts of
    /// the current segment size, so that their payload sums come from the table (see
    /// [`poll_transmit_prepared`](Self::poll_transmit_prepared)).
    pub fn send_prepared(&mut self, segments: &Arc<PreparedSegments>) -> bool {
        if !self.may_send() {
            return false;
        }
        self.snd.stream.push_prepared(segments)
    }

    /// Reads received bytes in order; returns how many (0 when none are buffered; see
    /// [`recv_finished`](Self::recv_finished) for the end of the stream). Freeing space may
    /// schedule a window update.
    pub fn recv(&mut self, buf: &mut [u8]) -> usize {
        let n = self.rcv.buf.dequeue_slice(buf);
        if matches!(self.state, State::TimeWait | State::Closed) {
            // Read to the end after the last byte arrived: free the ring.
            self.rcv.buf.release();
        }
        if n > 0 && self.is_established() && !self.rcv.fin_received {
            let current = distance(self.rcv.nxt, self.rcv.adv);
            let next = self.window_to_advertise();
            let threshold = (self.rcv.buf.capacity() / 2).min(2 * self.rcv.mss);
            if next > current && (current < self.sws_threshold() || next - current >= threshold) {
                self.ack.pending = true;
                self.ack.now = true;
            }
        }
        n
    }

    /// Closes the sending side (half-close): a FIN follows the data already queued (RFC 9293
    /// §3.10.4 CLOSE). In SYN-SENT and SYN-RECEIVED the FIN (and any queued data) waits for the
    /// handshake to complete.
    pub fn shutdown_write(&mut self) {
        match self.state {
            State::SynSent | State::SynReceived => self.snd.fin_queued = true,
            State::Established => {
                self.snd.fin_queued = true;
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.snd.fin_queued = true;
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// Closes both directions. In SYN-SENT the connection just closes (RFC 9293 §3.10.4). With
    /// unread received data this is an [`abort`](Self::abort) (RFC 2525 §2.17, as Linux does);
    /// otherwise a [`shutdown_write`](Self::shutdown_write), and data that still arrives is
    /// acknowledged and discarded.
    pub fn close(&mut self) {
        self.rcv.closed = true;
        if self.state == State::SynSent {
            self.enter_closed(None);
        } else if !self.rcv.buf.is_empty() {
            self.abort();
        } else {
            self.shutdown_write();
        }
    }

    /// Aborts: a synchronized connection sends `<SEQ=SND.NXT><CTL=RST>` (RFC 9293 §3.10.5) and
    /// closes at once with [`ConnectionError::Aborted`].
    pub fn abort(&mut self) {
        match self.state {
            State::Closed | State::Listen => return,
            State::SynReceived
            | State::Established
            | State::FinWait1
            | State::FinWait2
            | State::CloseWait => {
                self.pending_rst = Some(TcpRepr {
                    src_port: self.local.port(),
                    dst_port: self.remote.port(),
                    control: TcpControl::Rst,
                    seq_number: self.snd.nxt,
                    ..TcpRepr::default()
                });
            }
            _ => {}
        }
        self.enter_closed(Some(ConnectionError::Aborted));
    }

    fn enter_closed(&mut self, error: Option<ConnectionError>) {
        self.state = State::Closed;
        if self.error.is_none() {
            self.error = error;
        }
        self.timers.rto = None;
        self.timers.delayed_ack = None;
        self.timers.persist = None;
        self.timers.keepalive = None;
        self.timers.time_wait = None;
        self.ack.pending = false;
        self.ack.now = false;
        self.persist.probe_pending = false;
        self.keepalive.pending = false;
        self.recovery.fast_rexmit = false;
        self.snd.stream.dequeue(usize::MAX);
        self.rcv.sack_recent.clear();
        self.release_storage();
    }

    /// Frees the heap storage a connection that carries no more data does not need, on entering
    /// TIME-WAIT or CLOSED: the send ring (empty by then: in TIME-WAIT our FIN was acknowledged,
    /// a closed connection drops what it had queued), the pieces and scoreboard of the send side,
    /// the out-of-order ranges, and the receive ring once the application has read it (see
    /// [`recv`](Self::recv); no data is accepted after the peer's FIN or in CLOSED). What remains is
    /// the sequence state that answers a retransmitted FIN.
    fn release_storage(&mut self) {
        self.snd.stream.release();
        self.rcv.ooo.release();
        self.recovery.scoreboard = Scoreboard::default();
        self.recovery.rxt_marks = Vec::new();
        self.rcv.buf.release();
    }

    fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.timers.time_wait = Some(now + self.config.msl * 2);
        self.timers.rto = None;
        self.timers.persist = None;
        self.timers.keepalive = None;
        self.persist.probe_pending = false;
        self.keepalive.pending = false;
        self.recovery.fast_rexmit = false;
        self.release_storage();
    }

    /// The compact record of this connection once it is in TIME-WAIT with its output drained
    /// (see [`TimeWait`]; instants kept relative to `base`): it answers every later segment as
    /// this connection would. `None` in any other state, with output pending, or in a state the
    /// record does not cover (a zero-window probe beyond SND.MAX, data unacknowledged, an ACK
    /// not yet sent for RCV.NXT, a challenge-ACK limit beyond `u16::MAX`); the connection is then
    /// kept whole.
    pub(crate) fn time_wait_record(&self, base: Instant) -> Option<TimeWait> {
        let covered = self.state == State::TimeWait
            && !self.ack.pending
            && !self.ack.now
            && self.pending_rst.is_none()
            && !self.persist.probe_pending
            && !self.keepalive.pending
            && !self.recovery.fast_rexmit
            && self.snd.una == self.snd.max
            && self.snd.nxt == self.snd.max
            && self.snd.wl2 <= self.snd.max
            && self.persist.probe_end.is_none_or(|p| p <= self.snd.max)
            && self.ts.last_ack_sent == self.rcv.nxt
            && self.rcv.ooo.is_empty()
            && self.rcv.adv >= self.rcv.nxt
            && self.config.challenge_ack_limit <= u32::from(u16::MAX);
        if !covered {
            return None;
        }
        let window = u16::try_from(self.window_to_advertise() >> self.rcv.wscale).unwrap_or(u16::MAX);
        let parts = TimeWaitParts {
            expires: self.timers.time_wait?,
            rcv_nxt: self.rcv.nxt,
            rcv_adv: self.rcv.adv,
            rcv_wscale: self.rcv.wscale,
            window,
            snd_max: self.snd.max,
            snd_wl1: self.snd.wl1,
            snd_wscale: self.snd.wscale,
            max_snd_wnd: self.snd.max_wnd,
            ts_ok: self.ts.ok,
            ts_epoch: self.ts.epoch,
            ts_offset: self.ts.offset,
            ts_recent: self.ts.recent,
            ts_recent_at: self.ts.recent_at,
            last_oow_ack: self.limits.last_oow_ack,
            challenge_window: self.limits.challenge,
        };
        Some(TimeWait::new(&parts, base))
    }

    // ---------------------------------------------------------------------------------------
    // Time.

    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) has work, if any.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.timers.rto,
            self.timers.delayed_ack,
            self.timers.persist,
            self.timers.keepalive,
            self.timers.time_wait,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the timers due at `now`: retransmission, delayed ACK, persist, keepalive, TIME-WAIT.
    /// Follow it with [`poll_transmit`](Self::poll_transmit).
    pub fn handle_timeout(&mut self, now: Instant) {
        let due = |t: Option<Instant>| t.is_some_and(|t| t <= now);
        if due(self.timers.time_wait) {
            self.enter_closed(None);
            return;
        }
        if due(self.timers.rto) {
            self.timers.rto = None;
            self.on_rto();
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

    fn on_rto(&mut self) {
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
        self.rtt.back_off();
        self.snd.rtt_timing = None;
        match self.state {
            State::SynSent | State::SynReceived => self.snd.nxt = self.snd.iss,
            _ => {
                let flight = distance(self.snd.una, self.snd.max);
                if flight > 0 {
                    self.cc.on_rto(flight, self.snd.mss);
                }
                self.recovery.active = false;
                self.recovery.recover = self.snd.max;
                self.recovery.dup_acks = 0;
                self.recovery.fast_rexmit = false;
                // RFC 6675 §5.1: forget the SACK information (the receiver may have reneged) and
                // go back: resend from the first unacknowledged byte as the window allows. SACK
                // blocks that arrive from now on let the resending skip what they cover.
                self.recovery.scoreboard.clear();
                self.recovery.rxt_marks.clear();
                self.recovery.high_rxt = self.snd.una;
                self.snd.nxt = self.snd.una;
            }
        }
    }

    fn arm_keepalive(&mut self, now: Instant) {
        if let Some(ka) = self.config.keepalive {
            self.timers.keepalive = Some(now + ka.idle);
            self.keepalive.sent = 0;
        }
    }

    /// The timestamp clock: milliseconds since the connection was created, plus the offset.
    fn ts_now(&self, now: Instant) -> u32 {
        let ms = now.saturating_duration_since(self.ts.epoch).as_millis() % (1 << 32);
        u32::try_from(ms).unwrap_or(0).wrapping_add(self.ts.offset)
    }

    // ---------------------------------------------------------------------------------------
    // Receiving.

    /// Records the peer's SYN: sequence numbers and the options negotiation (RFC 9293 §3.7.1,
    /// RFC 7323 §2.2 and §3.2, RFC 2018 §2).
    fn take_syn(&mut self, syn: &TcpRepr<'_>, now: Instant) {
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
        let mss = syn.max_seg_size.unwrap_or(DEFAULT_MSS).min(self.config.mss).max(MIN_MSS);
        let option_len = if self.ts.ok { TS_OPTION_LEN } else { 0 };
        self.snd.mss = usize::from(mss) - option_len;
        if let Some(mtu) = self.snd.path_mtu {
            self.snd.mss = self.snd.mss.min(Self::mss_for_mtu(mtu, option_len));
        }
        self.rcv.mss = usize::from(self.config.mss).saturating_sub(option_len).max(1);
        // The window of a SYN is never scaled (RFC 7323 §2.2).
        self.snd.wnd = usize::from(syn.window_len);
        self.snd.max_wnd = self.snd.wnd;
        self.snd.wl1 = syn.seq_number;
        self.rcv.adv = self.rcv.nxt + self.rcv.buf.free().min(usize::from(u16::MAX));
        self.ts.last_ack_sent = self.rcv.nxt;
        self.cc.on_established(self.snd.mss);
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
            _ => self.handle_synchronized(now, seg, &mut deliver),
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
    /// [`Config::challenge_ack_limit`] per second (§7).
    fn rfc5961_challenge_ack(&mut self, now: Instant) {
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

    /// Every state after SYN-SENT (RFC 9293 §3.10.7.4).
    fn handle_synchronized<F: FnMut(&[u8]) -> usize>(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        deliver: &mut F,
    ) {
        let rst = seg.control == TcpControl::Rst;
        let syn = seg.control == TcpControl::Syn;
        let mut fin = seg.control == TcpControl::Fin;

        // A retransmitted SYN: our SYN-ACK was lost, send it again.
        if self.state == State::SynReceived
            && syn
            && seg.ack_number.is_none()
            && seg.seq_number == self.rcv.irs
        {
            self.snd.nxt = self.snd.iss;
            return;
        }
        // Simultaneous open: the peer's SYN-ACK repeats its SYN and acknowledges ours (RFC 9293
        // figure 8, line 6). Its ACK completes the handshake; ours tells the peer.
        if self.state == State::SynReceived
            && syn
            && seg.ack_number.is_some()
            && seg.seq_number == self.rcv.irs
        {
            let ack_only =
                TcpRepr { control: TcpControl::None, seq_number: self.rcv.irs + 1, payload: &[], ..*seg };
            self.handle_synchronized(now, &ack_only, deliver);
            if self.is_established() {
                self.challenge_ack();
            }
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
        if !acceptable(self.rcv.nxt, wnd, seg.seq_number, seg.segment_len()) {
            if rst {
                return;
            }
            if self.state == State::TimeWait && fin {
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
            if !(wnd == 0 && seg.seq_number == self.rcv.nxt && !syn) {
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
            return;
        }

        // SYN on a synchronized connection (RFC 5961 §4): challenge ACK.
        if syn {
            self.rfc5961_challenge_ack(now);
            return;
        }

        // TS.Recent (RFC 7323 §4.3).
        if self.ts.ok
            && let Some(ts) = seg.timestamp
            && rules::ts_recent_updates(seg.seq_number, self.ts.last_ack_sent, ts.tsval, self.ts.recent)
        {
            self.ts.recent = ts.tsval;
            self.ts.recent_at = now;
        }

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
            if offset == 0 {
                // In place first, when nothing buffered has to be read before these bytes.
                let delivered = if self.rcv.buf.is_empty() && self.rcv.ooo.is_empty() && !self.rcv.closed {
                    deliver(payload).min(payload.len())
                } else {
                    0
                };
                let copied = self.rcv.buf.write_unallocated(0, &payload[delivered..]);
                written = delivered + copied;
                let filled_hole = !self.rcv.ooo.is_empty();
                let buffered = self.rcv.ooo.advance(copied);
                self.rcv.buf.enqueue_unallocated(buffered);
                let reach = delivered + buffered;
                if self.rcv.closed {
                    self.rcv.buf.dequeue_allocated(usize::MAX);
                }
                self.rcv.nxt += reach;
                self.stats.bytes_in += reach as u64;
                self.ack.unacked_bytes += reach;
                self.ack.pending = true;
                if filled_hole || self.ack.unacked_bytes >= 2 * self.rcv.mss {
                    self.ack.now = true;
                } else if let Some(delay) = self.config.delayed_ack {
                    self.timers.delayed_ack.get_or_insert(now + delay);
                } else {
                    self.ack.now = true;
                }
            } else {
                // Out of order: keep it if the range fits, and send a duplicate ACK at once
                // (RFC 5681 §4.2).
                written = self.rcv.buf.write_unallocated(offset, payload);
                if written > 0 {
                    if self.rcv.ooo.add(offset, offset + written) {
                        self.rcv.sack_recent.record(seq);
                    } else {
                        written = 0;
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

    /// Whether `ack` is past the recovery point (RFC 6582 §3.2 step 2: "the cumulative
    /// acknowledgment field covers more than recover"). A recovery point so stale that it is
    /// incomparable counts as passed.
    fn recover_passed(&self, ack: SeqNumber) -> bool {
        ack.partial_cmp(&self.recovery.recover) != Some(std::cmp::Ordering::Less)
            && ack != self.recovery.recover
    }

    fn fin_acked(&self) -> bool {
        self.snd.fin_seq.is_some_and(|f| self.snd.una > f)
    }

    fn process_fin(&mut self, now: Instant) {
        self.rcv.nxt += 1;
        self.rcv.fin_received = true;
        self.ack.pending = true;
        self.ack.now = true;
        self.rcv.ooo.clear();
        self.rcv.sack_recent.clear();
        match self.state {
            State::SynReceived | State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                if self.fin_acked() {
                    self.enter_time_wait(now);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(now),
            _ => {}
        }
    }

    fn sample_rtt(&mut self, now: Instant, seg: &TcpRepr<'_>, ack: SeqNumber) {
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
    fn handle_ack(&mut self, now: Instant, seg: &TcpRepr<'_>, ack: SeqNumber) -> bool {
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

    // ---------------------------------------------------------------------------------------
    // Sending.

    /// The SWS threshold of the receiver (RFC 9293 §3.8.6.2.2): min(RCV.BUFF / 2, Eff.snd.MSS).
    fn sws_threshold(&self) -> usize {
        (self.rcv.buf.capacity() / 2).min(self.rcv.mss).max(1)
    }

    /// The window to advertise now: the free receive space, but the right edge moves only by
    /// at least the SWS threshold, and never to the left.
    fn window_to_advertise(&self) -> usize {
        let free = self.rcv.buf.free();
        let current = distance(self.rcv.nxt, self.rcv.adv);
        let wnd = if free >= current + self.sws_threshold() { free } else { current };
        wnd.min(usize::from(u16::MAX) << self.rcv.wscale)
    }

    /// The window field for an ACK-carrying segment, and the advertised edge it implies.
    fn advertise(&mut self) -> u16 {
        let wnd = self.window_to_advertise();
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
        TcpRepr {
            src_port: self.local.port(),
            dst_port: self.remote.port(),
            control,
            seq_number: seq,
            ack_number: Some(self.rcv.nxt),
            window_len,
            timestamp: self.ts.ok.then(|| Timestamp { tsval: self.ts_now(now), tsecr: self.ts.recent }),
            sack_blocks: self.sack_blocks(),
            ..TcpRepr::default()
        }
    }

    /// The SACK blocks for our next ACK (RFC 2018 §4): when SACK was negotiated and data is held
    /// out of order, the block holding the most recently received segment first, then the
    /// other recently received ones, then the rest, as many as fit beside the timestamps
    /// option (three; four without it). D-SACK (RFC 2883) is not sent.
    fn sack_blocks(&self) -> SackBlocks {
        if !self.sack_ok || self.rcv.ooo.is_empty() {
            return SackBlocks::new();
        }
        let max = if self.ts.ok { 3 } else { SackBlocks::MAX };
        let base = self.rcv.nxt;
        self.rcv.sack_recent.blocks(self.rcv.ooo.ranges().map(move |(s, e)| (base + s, base + e)), max)
    }

    /// The most payload bytes in our next segment: the send MSS less the SACK option it will
    /// carry, so that the segment still fits the path MTU.
    fn data_mss(&self) -> usize {
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

    fn transmit(&mut self, repr: TcpRepr<'static>, payload_len: usize) -> Transmit {
        self.stats.segments_out += 1;
        Transmit { src: self.local, dst: self.remote, repr, payload_len }
    }

    /// The next segment to send, its payload copied into `buf` (see [`Transmit`] for the
    /// contract); `None` when there is nothing to send now. Call it until it returns `None`
    /// after every input. `buf` should hold at least one MSS; a shorter one gives shorter
    /// segments.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(rst) = self.pending_rst.take() {
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
        if self.recovery.fast_rexmit {
            self.recovery.fast_rexmit = false;
            if let Some(t) = self.retransmit_first(now, buf) {
                return Some(t);
            }
        }
        let sack_recovery = self.recovery.active && self.sack_ok && self.state != State::TimeWait;
        // RFC 6675 §5 step (C), NextSeg() rule 1: lost holes first...
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
    pub fn poll_transmit_prepared(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<PreparedSlice>)> {
        self.snd.stream.start_lending();
        let t = self.poll_transmit(now, buf);
        let lent = self.snd.stream.stop_lending();
        let t = t?;
        debug_assert!(
            lent.as_ref().is_none_or(|l| l.len == t.payload_len),
            "the lent payload is the segment's"
        );
        Some((t, lent))
    }

    fn send_syn(&mut self, now: Instant) -> Transmit {
        let active = self.state == State::SynSent;
        let ack_number = (!active).then_some(self.rcv.nxt);
        let tsval = self.ts_now(now);
        let repr = TcpRepr {
            src_port: self.local.port(),
            dst_port: self.remote.port(),
            control: TcpControl::Syn,
            seq_number: self.snd.iss,
            ack_number,
            window_len: u16::try_from(self.rcv.buf.free()).unwrap_or(u16::MAX),
            max_seg_size: Some(self.config.mss),
            window_scale: (if active { self.config.window_scaling } else { self.ws_ok })
                .then_some(self.rcv.wscale),
            sack_permitted: if active { self.config.sack } else { self.sack_ok },
            timestamp: if active {
                self.config.timestamps.then_some(Timestamp { tsval, tsecr: 0 })
            } else {
                self.ts.ok.then_some(Timestamp { tsval, tsecr: self.ts.recent })
            },
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
        self.timers.rto.get_or_insert(now + self.rtt.rto());
        self.transmit(repr, 0)
    }

    /// The sequence number of the first byte in the send buffer.
    fn send_base(&self) -> SeqNumber {
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

    /// RFC 6675 §5 step (C): while cwnd - pipe >= 1 SMSS, the segment NextSeg() picks (rule 1,
    /// lost data, when `lost_only`; else rule 3).
    fn sack_retransmit(&mut self, now: Instant, buf: &mut [u8], lost_only: bool) -> Option<Transmit> {
        if self.cc.window() < self.pipe().saturating_add(self.snd.mss) {
            return None;
        }
        let high_rxt = self.recovery.high_rxt.max(self.snd.una);
        let (seq, len, lost) =
            self.recovery.scoreboard.next_seg(self.snd.una, self.snd.max, high_rxt, self.snd.mss)?;
        if lost_only && !lost {
            return None;
        }
        let len = len.min(self.data_mss());
        self.retransmit_at(now, buf, seq, len)
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
        repr.push = n > 0;
        self.stats.retransmits += 1;
        if self.snd.rtt_timing.is_some_and(|(s, _)| seq <= s) {
            self.snd.rtt_timing = None;
        }
        self.timers.rto.get_or_insert(now + self.rtt.rto());
        Some(self.transmit(repr, n))
    }

    /// New data, retransmissions after a timeout, and the FIN, as the windows, Nagle and SWS
    /// avoidance allow.
    fn send_data(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        // Resending after a timeout skips what the peer SACKed since.
        while self.snd.nxt < self.snd.max
            && let Some(end) = self.recovery.scoreboard.sacked_end(self.snd.nxt)
        {
            self.snd.nxt = end;
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
            return None;
        }
        let in_flight = distance(self.snd.una, self.snd.nxt);
        let mss = self.data_mss();
        // Limited transmit (RFC 3042): up to two segments past cwnd on the first two duplicate
        // ACKs.
        // With SACK information, SACKed bytes have left the network: they do not count against
        // cwnd (which makes limited transmit redundant), and in SACK recovery the congestion
        // window limits the pipe (RFC 6675 §5 step (C)).
        let sacked = !self.recovery.scoreboard.is_empty();
        let extra = if self.recovery.active || self.recovery.dup_acks > 2 || sacked {
            0
        } else {
            self.recovery.dup_acks as usize * mss
        };
        let cc_flight = if self.recovery.active && self.sack_ok {
            self.pipe()
        } else {
            let (_, above) = self.recovery.scoreboard.sacked_above(self.snd.nxt);
            in_flight.saturating_sub(self.recovery.scoreboard.sacked_bytes() - above)
        };
        let usable = self
            .snd
            .wnd
            .saturating_sub(in_flight)
            .min(self.cc.window().saturating_add(extra).saturating_sub(cc_flight));
        let mut size = unsent.min(usable).min(mss).min(buf.len());
        // A resend stops at the next SACKed byte.
        let mut clipped = false;
        if self.snd.nxt < self.snd.max
            && let Some(next) = self.recovery.scoreboard.next_sacked(self.snd.nxt)
            && distance(self.snd.nxt, next) < size
        {
            size = distance(self.snd.nxt, next);
            clipped = true;
        }
        // Prepared content goes in its own segments, on its cuts (their sums are precomputed).
        if self.snd.stream.has_pieces()
            && let Some(limit) = self.snd.stream.prepared_limit(sent, mss)
            && limit < size
        {
            size = limit;
            clipped = true;
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
        repr.push = n > 0 && ends_data;
        let end = seq + n + usize::from(fin);
        if seq < self.snd.max {
            self.stats.retransmits += 1;
            if self.snd.rtt_timing.is_some_and(|(s, _)| seq <= s) {
                self.snd.rtt_timing = None;
            }
        } else {
            self.stats.bytes_out += n as u64;
            if !self.ts.ok && self.snd.rtt_timing.is_none() {
                self.snd.rtt_timing = Some((seq, now));
            }
        }
        if fin {
            self.snd.fin_seq = Some(seq + n);
        }
        self.snd.nxt = end;
        self.snd.max = self.snd.max.max(end);
        self.timers.rto.get_or_insert(now + self.rtt.rto());
        self.timers.persist = None;
        Some(self.transmit(repr, n))
    }

    /// A zero-window probe: one byte past the window (RFC 9293 §3.8.6.1), not counted as sent,
    /// and the persist timer again with backoff.
    fn send_probe(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let sent = distance(self.send_base(), self.snd.nxt);
        if self.snd.wnd != 0 || buf.is_empty() {
            return None;
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
            if interval >= super::rtt::MAX_RTO {
                return super::rtt::MAX_RTO;
            }
        }
        interval.min(super::rtt::MAX_RTO)
    }
}
