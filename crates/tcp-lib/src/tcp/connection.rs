//! [`Connection`]: one TCB and its state machine. See the [module documentation](super).
//!
//! This file holds the TCB, its state grouped by concern (the send side `snd`, the receive side
//! `rcv`, the ACK owed, timestamps `ts`, timer deadlines `timers`, zero-window probing, keepalive,
//! the RFC 5961 rate limits `limits`, loss `recovery`), the opens, the queries, the application
//! calls and the moves into TIME-WAIT and CLOSED. The state machine's other parts are its
//! children: `input` (segments received), `ack` (ACK processing and loss recovery), `output`
//! (`poll_transmit`), `timers` (`poll_timeout`, `handle_timeout`) and `autotune` (the receive
//! buffer's growth). The segment rules shared
//! with the TIME-WAIT record are in [`rules`](super::rules), the send stream in
//! [`send_stream`](super::send_stream).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::budget::{BufferBudget, Side};
use super::buffer::{Assembler, RingBuffer};
use super::congestion::{CongestionAlgorithm, CongestionControl};
use super::controller::Controller;
use super::hystart::SlowStartExit;
use super::pacing::Pacer;
use super::prepared::PreparedSegments;
use super::rack::Rack;
use super::rtt::RttEstimator;
use super::sack::{RecentBlocks, Scoreboard};
use super::send_stream::SendStream;
use super::time_wait::{TimeWait, TimeWaitParts};
use super::undo::Undo;
use super::{Config, ConnectionError, State, Stats};
use crate::wire::tcp::SackBlock;
use crate::wire::{SeqNumber, TcpControl, TcpRepr};
use netchannel::pool::{PoolCache, SharedPacket};

mod ack;
mod autotune;
mod cc;
mod input;
mod output;
mod spare;
mod timers;

pub(crate) use spare::Spare;

/// The MSS assumed when the peer's SYN has no MSS option (RFC 9293 §3.7.1).
const DEFAULT_MSS: u16 = 536;
/// The IPv6 equivalent: the minimum IPv6 MTU less 60 bytes of headers (RFC 8200 §8.3).
const DEFAULT_MSS_V6: u16 = 1220;
/// The smallest send MSS we accept, so a peer cannot make us send one-byte segments.
const MIN_MSS: u16 = 64;
/// Bytes the timestamps option takes in every segment (RFC 7323 §3: 10, padded to 12).
const TS_OPTION_LEN: usize = 12;
/// The IPv4 and TCP headers without options: a path MTU less this is the most segment bytes.
const HEADERS_LEN: usize = 40;
/// The IPv6 and TCP headers without options (no extension headers are emitted).
const HEADERS_LEN_V6: usize = 60;
/// The smallest IPv4 MTU (RFC 791): every path carries it, so no MTU report goes lower.
const MIN_PATH_MTU: usize = 68;
/// The smallest IPv6 MTU (RFC 8200 §5): a Packet Too Big reporting less is taken as this
/// (RFC 8201 §4).
const MIN_PATH_MTU_V6: usize = 1280;
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
    /// Shared with the other connections the same configuration opened (a stack's, or a
    /// listener's): read where it is used, never copied into each connection (as quinn-proto's
    /// connections share their `Arc<TransportConfig>`). A change to one connection's (its send
    /// buffer) copies it first ([`Arc::make_mut`]).
    config: Arc<Config>,
    local: SocketAddr,
    remote: SocketAddr,
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
    /// Explicit Congestion Notification (RFC 3168).
    ecn: EcnState,

    /// The RTT estimate and the RTO (RFC 6298).
    rtt: RttEstimator,
    /// Congestion control: the window arithmetic ([`Config::congestion`]).
    cc: Controller,
    /// HyStart ([`Config::hystart`]) and the per-ACK RTT samples the controller follows.
    slow_start: SlowStartExit,
    /// A reset to send before anything else.
    pending_rst: Option<TcpRepr<'static>>,
    /// The pending reset is our abort's: it carries our timestamps (RFC 7323 §3.2: SHOULD).
    rst_with_ts: bool,

    /// The counters of [`Stats`]; its other fields are read from the state when asked for.
    stats: Counters,
}

/// The counters a connection keeps for [`Connection::stats`] (the rest of [`Stats`] is computed
/// from the connection's state there): 160 bytes where the whole `Stats` took 312, fewer for a
/// new connection to write.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    retransmits: u64,
    timeouts: u64,
    fast_retransmits: u64,
    recoveries: u64,
    dup_acks: u64,
    bytes_out: u64,
    bytes_in: u64,
    segments_out: u64,
    segments_in: u64,
    challenge_acks: u64,
    challenge_acks_suppressed: u64,
    tail_loss_probes: u64,
    tlp_recoveries: u64,
    ce_received: u64,
    ecn_reductions: u64,
    hystart_exits: u64,
    idle_restarts: u64,
    paced: u64,
    pacing_wait: Duration,
    pacing_rate: u64,
    predicted: u64,
    ooo_dropped: u64,
    dsacks_sent: u64,
    dsacks_received: u64,
    dsack_undos: u64,
    recv_buffer_raises: u64,
}

/// Explicit Congestion Notification (RFC 3168) on a connection: negotiated or not, the ECE we
/// echo as the receiver, the reduction and CWR we owe as the sender.
#[derive(Debug, Clone, Copy)]
struct EcnState {
    /// Both SYNs agreed (RFC 3168 §6.1.1).
    ok: bool,
    /// Receiver: a CE mark arrived and the peer has not yet answered with CWR; our ACKs carry
    /// ECE (RFC 3168 §6.1.3).
    echo: bool,
    /// Sender: the next new data segment carries CWR (RFC 3168 §6.1.2).
    cwr_pending: bool,
    /// Sender: SND.MAX at our last reduction; ECEs until SND.UNA passes it belong to the same
    /// window of data and reduce nothing more (RFC 3168 §6.1.2: once per window).
    reduced_until: SeqNumber,
}

/// The send side of a connection: the send sequence space (RFC 9293 §3.3.1), the send stream,
/// the segment size and the retransmission state.
#[derive(Debug)]
struct SendSide {
    iss: SeqNumber,
    /// When data (new or resent) last left ([`Config::restart_after_idle`]).
    last_data_sent: Option<Instant>,
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
    /// Cwnd validation ([`Config::cwnd_validation`]): the window filled the congestion window
    /// in the current window of data, the most bytes in flight in it, and where it ends.
    cwnd_limited: bool,
    max_flight: usize,
    usage_end: SeqNumber,
    /// Where the last segment of new data (or the FIN) we sent starts: a tail loss probe resends it.
    last_seg: SeqNumber,
    /// Payload bytes per segment we send (the peer's MSS, clamped, minus the timestamps option).
    mss: usize,
    /// The most payload bytes in one segment handed to a device that cuts it into `mss`-sized
    /// segments (TSO; see [`Connection::set_super_segment_limit`]); at most `mss`: off.
    super_max: usize,
    /// The most segments a super-segment is cut into (the frames the stack's outgoing batch has
    /// room for, [`Connection::set_software_segmentation`]); `usize::MAX` for a device that cuts
    /// it.
    super_frames: usize,
    /// Super-segments may run over whole pool buffers of one segment each
    /// ([`Connection::set_pooled_trains`]).
    pooled_trains: bool,
    /// The TSO packet new data is being sent in ([`Push::Linux`](super::Push::Linux)).
    packet: Option<super::push::Packet>,
    /// The path MTU learned from ICMP fragmentation-needed messages (RFC 1191), if any; it caps
    /// `mss`.
    path_mtu: Option<usize>,
    /// The peer's window scale shift.
    wscale: u8,
    /// Retransmission timeouts since data was last acknowledged.
    retries: u32,
    /// The timestamp clock ([`Connection::ts_now`]) at the last of those timeouts; meaningful
    /// while `retries` is not zero. An echo of an earlier TSval is no RTT sample
    /// ([`Connection::sample_rtt`]).
    timeout_ts: u32,
    /// The segment timed for an RTT sample when timestamps are off (Karn's algorithm).
    rtt_timing: Option<(SeqNumber, Instant)>,
    /// Departure times ([`Config::pacing`]).
    pacer: Pacer,
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
    /// Our SACK blocks (RFC 2018 §4): those of the out-of-order segments received most recently.
    sack_recent: RecentBlocks,
    /// A duplicate segment's data to report once, first in the next segment's SACK option
    /// (D-SACK, RFC 2883 §4; [`Config::dsack`]).
    dsack: Option<SackBlock>,
    /// A FIN received out of order, at this sequence number.
    ooo_fin: Option<SeqNumber>,
    fin_received: bool,
    /// The application will not read any more: data is acknowledged and discarded.
    closed: bool,
    /// Payload bytes of a full-sized segment from the peer.
    mss: usize,
    /// The largest payload received in one segment (at most `mss`; 0 before any).
    largest: usize,
    /// Our window scale shift.
    wscale: u8,
    /// Receive-buffer autotuning's measures ([`Config::recv_buffer_max`]).
    tune: autotune::RecvTuning,
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
    /// In-order data segments still to acknowledge at once ([`Config::quick_acks`]).
    quick: usize,
    /// When the last in-order data segment arrived (`None`: none yet).
    last_data: Option<Instant>,
}

/// Timestamps (RFC 7323).
#[derive(Debug)]
struct Timestamps {
    /// Both SYNs carried timestamps.
    ok: bool,
    /// The zero of the timestamp clock.
    epoch: Instant,
    /// The clock's last reading, in milliseconds since `epoch` (offset not added), and the
    /// instant it was read for: the segments and ACKs of one poll share their `now`, so each
    /// reads the clock once (a `Timespec` subtraction each time otherwise).
    read: (Instant, u32),
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
    /// The tail loss probe (RFC 8985 §7).
    tlp: Option<Instant>,
    /// RACK's reordering timer (RFC 8985 §6.3).
    rack: Option<Instant>,
    /// The departure time of data the pacing holds back ([`Config::pacing`]).
    pace: Option<Instant>,
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

/// Rate limits of our answers to unacceptable segments (see [`rules`](super::rules)).
#[derive(Debug)]
struct RateLimits {
    /// When we last answered an unacceptable segment without data (rate limit).
    last_oow_ack: Option<Instant>,
    /// The start of the current one-second window of the challenge ACK limit, and the
    /// challenge ACKs sent in it (RFC 5961 §7).
    challenge: Option<(Instant, u32)>,
}

/// Loss recovery: fast retransmit and recovery (RFC 5681, RFC 6582), SACK-based recovery (RFC
/// 6675), and how much either may send: Proportional Rate Reduction (RFC 6937, RFC 9937).
#[derive(Debug)]
struct Recovery {
    dup_acks: u32,
    /// In fast recovery.
    active: bool,
    /// The recovery point (RFC 6582 `recover`).
    recover: SeqNumber,
    /// A fast retransmission of the segment at SND.UNA is due.
    fast_rexmit: bool,
    /// A retransmission above SND.UNA that RACK deems lost again (`start..end`): it goes again
    /// before NextSeg's holes, which start at HighRxt, above it.
    resend: Option<(SeqNumber, SeqNumber)>,
    /// Reducing the window for an ECN echo by PRR ([`Config::ecn_prr`], Linux's CWR state):
    /// PRR paces what goes out, as in recovery, with nothing to retransmit; it ends once SND.UNA
    /// passes the SND.MAX of the reduction (`EcnState::reduced_until`).
    cwr: bool,
    /// What the peer SACKed (RFC 6675 §3); empty unless SACK was negotiated.
    scoreboard: Scoreboard,
    /// RFC 6675 HighRxt: the end of the highest retransmission of the current SACK recovery.
    high_rxt: SeqNumber,
    /// Retransmissions of the current SACK recovery: (first byte, SND.MAX when sent), at most
    /// [`MAX_RXT_MARKS`], oldest first. SACKs of data sent after a retransmission while its hole
    /// at SND.UNA stays open say that the retransmission was lost too.
    rxt_marks: Vec<(SeqNumber, SeqNumber)>,
    /// PRR RecoverFS (RFC 9937 §4): the pipe when this recovery began, in bytes.
    recover_fs: usize,
    /// PRR prr_delivered: bytes the peer received during this recovery (DeliveredData summed).
    prr_delivered: usize,
    /// PRR prr_out: bytes sent during this recovery (retransmissions and new data).
    prr_out: usize,
    /// A tail loss probe is due (RFC 8985 §7.3).
    tlp_pending: bool,
    /// The probe outstanding: SND.MAX after it (RFC 8985's TLP.end_seq), and whether it resent
    /// data (TLP.is_retrans). No other probe goes until an ACK ends the episode
    /// ([`Connection::tlp_on_ack`]) or the RTO fires.
    tlp_out: Option<(SeqNumber, bool)>,
    /// Bytes a new-data probe may send past the congestion window.
    tlp_budget: usize,
    /// PRR sndcnt: bytes the last ACK allows to send, less what was sent since.
    sndcnt: usize,
    /// Without SACK: bytes the duplicate ACKs of this recovery say were delivered (one SMSS
    /// each, at most the flight), not yet matched by a cumulative ACK (RFC 6937 §3's estimate
    /// of DeliveredData without SACK).
    dup_delivered: usize,
    /// RACK (RFC 8985 §6) when [`Config::rack`] is on: the transmissions in flight and the
    /// clock of the latest delivered one.
    rack: Rack,
    /// The last window reduction, while D-SACKs may still prove it spurious
    /// ([`Config::dsack_undo`]). Boxed: 88 bytes that only connections with the knob on use,
    /// kept out of every connection's slot (the box reused when one reduction follows another).
    undo: Option<Box<Undo>>,
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
    /// A connection in `state` (`passive`: made by a listener), for the public constructors: one
    /// out-of-line copy of [`open`](Self::open).
    #[inline(never)]
    fn new(
        config: Arc<Config>,
        addresses: (SocketAddr, SocketAddr),
        iss: SeqNumber,
        now: Instant,
        opening: (State, bool),
    ) -> Self {
        let mut c = Self::open(config, addresses, iss, now, opening);
        c.finish_open();
        c
    }

    /// Completes [`open`](Self::open) once the connection is in its place: for BBR, the
    /// controller and RACK's delivery rate sampling, which allocate (see
    /// `CongestionAlgorithm::controller`).
    #[inline]
    pub(crate) fn finish_open(&mut self) {
        if self.config.congestion == CongestionAlgorithm::Bbr {
            self.attach_bbr();
        }
    }

    #[cold]
    #[inline(never)]
    fn attach_bbr(&mut self) {
        self.cc = Controller::bbr();
        self.recovery.rack = Rack::with_rate_samples();
    }

    /// A connection in `state` (`passive`: made by a listener), as one struct literal. Always
    /// inlined, so that a caller storing it in place (the stack's table slot, where
    /// `Stack::insert_new` has its one copy of this) writes its 2 KB there directly: a
    /// function returning it would write it to a temporary that the caller then copies, since
    /// the compiler may not let a call that can unwind write its result into memory the caller
    /// can observe.
    #[inline(always)]
    pub(crate) fn open(
        config: Arc<Config>,
        (local, remote): (SocketAddr, SocketAddr),
        iss: SeqNumber,
        now: Instant,
        (state, passive): (State, bool),
    ) -> Self {
        let rcv_wscale = match (config.window_scaling, config.rcv_wscale) {
            (false, _) => 0,
            (true, Some(shift)) => shift.min(MAX_WSCALE),
            (true, None) => wscale_for(config.recv_buffer.max(config.recv_buffer_max)),
        };
        Self {
            local,
            remote,
            state,
            error: None,
            passive,
            ws_ok: false,
            sack_ok: false,
            snd: SendSide {
                iss,
                last_data_sent: None,
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
                cwnd_limited: false,
                max_flight: 0,
                usage_end: iss,
                last_seg: iss,
                mss: usize::from(DEFAULT_MSS),
                super_max: 0,
                super_frames: usize::MAX,
                pooled_trains: false,
                packet: None,
                path_mtu: None,
                wscale: 0,
                retries: 0,
                timeout_ts: 0,
                rtt_timing: None,
                pacer: Pacer::default(),
            },
            rcv: RecvSide {
                irs: SeqNumber::default(),
                nxt: SeqNumber::default(),
                adv: SeqNumber::default(),
                buf: RingBuffer::new(config.recv_buffer),
                ooo: Assembler::new(config.max_ooo_ranges),
                sack_recent: RecentBlocks::default(),
                dsack: None,
                ooo_fin: None,
                fin_received: false,
                closed: false,
                mss: usize::from(config.mss),
                largest: 0,
                wscale: rcv_wscale,
                tune: autotune::RecvTuning::new(&config),
            },
            ack: AckState { pending: false, now: false, unacked_bytes: 0, quick: 0, last_data: None },
            ts: Timestamps {
                ok: false,
                epoch: now,
                read: (now, 0),
                // A per-connection timestamp offset (RFC 7323 §5.4 recommends one) derived from the
                // ISS, which the stack draws from a keyed hash (RFC 6528).
                offset: iss.get().wrapping_mul(0x9e37_79b9).rotate_left(13),
                recent: 0,
                recent_at: now,
                last_ack_sent: SeqNumber::default(),
            },
            timers: Timers {
                rto: None,
                delayed_ack: None,
                persist: None,
                keepalive: None,
                time_wait: None,
                tlp: None,
                rack: None,
                pace: None,
            },
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
                resend: None,
                cwr: false,
                scoreboard: Scoreboard::new(),
                high_rxt: iss,
                rxt_marks: Vec::new(),
                recover_fs: 0,
                prr_delivered: 0,
                prr_out: 0,
                tlp_pending: false,
                tlp_out: None,
                tlp_budget: 0,
                sndcnt: 0,
                dup_delivered: 0,
                // (BBR's delivery rate samples come with it: `finish_open`.)
                rack: Rack::default(),
                undo: None,
            },
            ecn: EcnState { ok: false, echo: false, cwr_pending: false, reduced_until: iss },
            rtt: RttEstimator::new(config.initial_rto, config.min_rto, config.linux_rto),
            cc: config.congestion.controller(),
            slow_start: SlowStartExit::new(
                config.hystart,
                // Its log of transmissions gives Linux's RTO estimator a sample per ACK, too.
                config.congestion == CongestionAlgorithm::LinuxCubic || config.linux_rto,
                now,
                iss,
            ),
            pending_rst: None,
            rst_with_ts: false,
            stats: Counters::default(),
            // Last: the fields above read it.
            config,
        }
    }

    /// Active open (RFC 9293 §3.10.1): a connection in SYN-SENT whose first
    /// [`poll_transmit`](Self::poll_transmit) is the SYN. `iss` is the initial send sequence
    /// number (RFC 6528: the stack draws it from a keyed hash). `config` is a [`Config`], or an
    /// `Arc<Config>` that many connections share (as the stack's do: one copy, not one each).
    #[must_use]
    pub fn connect(
        config: impl Into<Arc<Config>>,
        local: impl Into<SocketAddr>,
        remote: impl Into<SocketAddr>,
        iss: SeqNumber,
        now: Instant,
    ) -> Self {
        Self::new(config.into(), (local.into(), remote.into()), iss, now, (State::SynSent, false))
    }

    /// Passive open: the connection a listener creates for the SYN `syn` from `remote` (the
    /// LISTEN-state processing of RFC 9293 §3.10.7.2), in SYN-RECEIVED; its first
    /// [`poll_transmit`](Self::poll_transmit) is the SYN-ACK. Returns `None` if `syn` is not a
    /// SYN without ACK, or its ports do not match `local` and `remote`. `config` as for
    /// [`connect`](Self::connect).
    #[must_use]
    pub fn accept(
        config: impl Into<Arc<Config>>,
        local: impl Into<SocketAddr>,
        remote: impl Into<SocketAddr>,
        syn: &TcpRepr<'_>,
        iss: SeqNumber,
        now: Instant,
    ) -> Option<Self> {
        let (local, remote) = (local.into(), remote.into());
        if !Self::accepts(syn, local, remote) {
            return None;
        }
        let mut c = Self::new(config.into(), (local, remote), iss, now, (State::SynReceived, true));
        c.take_syn(syn, now);
        Some(c)
    }

    /// Whether [`accept`](Self::accept) takes `syn` for `local` and `remote`: a SYN without ACK
    /// between their ports. The stack accepts in two steps, so that it builds the connection in
    /// its table's slot: [`open`](Self::open) in SYN-RECEIVED, then
    /// [`take_syn`](Self::take_syn) on it where it lies, once this has checked the SYN.
    pub(crate) fn accepts(syn: &TcpRepr<'_>, local: SocketAddr, remote: SocketAddr) -> bool {
        syn.control == TcpControl::Syn
            && syn.ack_number.is_none()
            && syn.src_port == remote.port()
            && syn.dst_port == local.port()
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
    pub const fn local(&self) -> SocketAddr {
        self.local
    }

    /// The remote address.
    #[must_use]
    pub const fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// How many segments took the header-prediction path ([`Stats::predicted`]), without
    /// assembling the whole [`Stats`].
    #[inline]
    pub(crate) const fn predicted(&self) -> u64 {
        self.stats.predicted
    }

    /// Counters and estimates.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let c = &self.stats;
        Stats {
            srtt: self.rtt.srtt(),
            rttvar: self.rtt.rttvar(),
            rto: self.rtt.rto(),
            cwnd: self.cc.window(),
            ssthresh: self.cc.ssthresh(),
            send_mss: self.send_mss(),
            announced_mss: usize::from(self.config.mss),
            recv_mss: if self.rcv.largest == 0 { self.rcv.mss.min(536) } else { self.rcv.largest },
            unacked_bytes: distance(self.snd.una, self.snd.max),
            sacked_bytes: self.recovery.scoreboard.sacked_bytes(),
            lost_bytes: self.recovery.scoreboard.lost_bytes(self.snd.una, self.snd.max, self.snd.mss),
            in_recovery: self.recovery.active,
            cwr: self.recovery.cwr,
            prr_window: (self.recovery.active || self.recovery.cwr)
                .then(|| self.recovery_pipe().saturating_add(self.recovery.sndcnt)),
            dup_acks_now: self.recovery.dup_acks,
            ecn: self.ecn.ok,
            reordering: self.recovery.rack.reordering(),
            reordering_events: self.recovery.rack.reordering_events(),
            retransmits: c.retransmits,
            timeouts: c.timeouts,
            fast_retransmits: c.fast_retransmits,
            recoveries: c.recoveries,
            dup_acks: c.dup_acks,
            bytes_out: c.bytes_out,
            bytes_in: c.bytes_in,
            segments_out: c.segments_out,
            segments_in: c.segments_in,
            challenge_acks: c.challenge_acks,
            challenge_acks_suppressed: c.challenge_acks_suppressed,
            tail_loss_probes: c.tail_loss_probes,
            tlp_recoveries: c.tlp_recoveries,
            ce_received: c.ce_received,
            ecn_reductions: c.ecn_reductions,
            hystart_exits: c.hystart_exits,
            idle_restarts: c.idle_restarts,
            paced: c.paced,
            pacing_wait: c.pacing_wait,
            pacing_rate: c.pacing_rate,
            predicted: c.predicted,
            ooo_dropped: c.ooo_dropped,
            dsacks_sent: c.dsacks_sent,
            dsacks_received: c.dsacks_received,
            dsack_undos: c.dsack_undos,
            recv_buffer: self.rcv.buf.limit(),
            recv_buffer_raises: c.recv_buffer_raises,
        }
    }

    /// Turns header prediction ([`Config::header_prediction`]) on or off on a connection
    /// already built, for tests that compare the two paths from one state.
    #[cfg(test)]
    pub(crate) fn set_header_prediction(&mut self, on: bool) {
        Arc::make_mut(&mut self.config).header_prediction = on;
    }

    /// RCV.NXT, SND.UNA and TS.Recent: where the segment header prediction expects starts, what
    /// it acknowledges, and the timestamp it must not be older than (for tests that send it).
    #[cfg(test)]
    pub(crate) fn expected_segment(&self) -> (SeqNumber, SeqNumber, u32) {
        (self.rcv.nxt, self.snd.una, self.ts.recent)
    }

    /// What a segment or a timer can change in the connection, but the bytes it holds and
    /// RACK's log of transmissions: for tests that run the same events twice and compare the
    /// two runs step by step (instants print as they are, so both runs start at one instant).
    #[cfg(test)]
    pub(crate) fn digest(&self) -> String {
        let (s, r, v) = (&self.snd, &self.rcv, &self.recovery);
        format!(
            "{:?} {:?} | snd {:?} {:?} {:?} {} {} {:?} {:?} {:?} {} {:?} {:?} {} {} | rcv {:?} {:?} {:?} {:?} {} {} {} {} {} \
             | {:?} {:?} {:?} {:?} {:?} {:?} | recovery {} {} {:?} {} {} {:?} | {:?}",
            self.state,
            self.error,
            s.una,
            s.nxt,
            s.max,
            s.wnd,
            s.max_wnd,
            s.wl1,
            s.wl2,
            s.fin_seq,
            s.retries,
            s.rtt_timing,
            s.last_seg,
            s.mss,
            s.stream.len(),
            r.nxt,
            r.adv,
            r.ooo,
            r.ooo_fin,
            r.fin_received,
            r.closed,
            r.buf.len(),
            r.largest,
            r.mss,
            self.ack,
            self.ts,
            self.timers,
            self.persist,
            self.keepalive,
            self.limits,
            v.dup_acks,
            v.active,
            v.recover,
            v.fast_rexmit,
            v.cwr,
            v.high_rxt,
            Stats { predicted: 0, ..self.stats() },
        )
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
        self.snd.mss + self.option_len() + self.headers_len()
    }

    /// The IP and TCP headers without options, for this connection's address family.
    const fn headers_len(&self) -> usize {
        if self.local.is_ipv6() { HEADERS_LEN_V6 } else { HEADERS_LEN }
    }

    /// The smallest MTU of this connection's address family.
    const fn min_path_mtu(&self) -> usize {
        if self.local.is_ipv6() { MIN_PATH_MTU_V6 } else { MIN_PATH_MTU }
    }

    const fn option_len(&self) -> usize {
        if self.ts.ok { TS_OPTION_LEN } else { 0 }
    }

    /// The send MSS for a path MTU: the MTU less the headers and `option_len`, at least 1.
    fn mss_for_mtu(&self, mtu: usize, option_len: usize) -> usize {
        mtu.saturating_sub(self.headers_len() + option_len).max(1)
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
        let mtu = mtu.max(self.min_path_mtu());
        if mtu >= self.path_mtu() {
            return false;
        }
        self.snd.path_mtu = Some(mtu);
        self.snd.mss = self.mss_for_mtu(mtu, self.option_len());
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
            MTU_PLATEAUS.into_iter().find(|&p| p < current).unwrap_or(self.min_path_mtu())
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

    /// Resizes the send buffer ([`Config::send_buffer`]) to `bytes`, never below what it holds:
    /// `SO_SNDBUF` on an open connection.
    pub fn set_send_buffer(&mut self, bytes: usize) {
        if self.config.send_buffer != bytes {
            Arc::make_mut(&mut self.config).send_buffer = bytes;
        }
        self.snd.stream.set_capacity(bytes);
    }

    /// Charges the storage of the send and receive rings to `budget` from now on (moving what
    /// they hold from the budget they were charged to before, if any). A ring the budget refuses
    /// growth works on with the storage it has: [`send`](Self::send) accepts less, and the window
    /// advertised shrinks to what that storage can take (never moving its right edge left: bytes
    /// already promised beyond it are dropped and counted, as Linux does under `tcp_mem`
    /// pressure). See [`BufferBudget`].
    pub fn set_budget(&mut self, budget: &Arc<BufferBudget>) {
        self.snd.stream.set_budget(budget);
        self.rcv.buf.set_budget(budget, Side::Rx);
    }

    /// Lets [`poll_transmit`](Self::poll_transmit) return TCP super-segments of up to `bytes`
    /// payload bytes, for a device that cuts them into segments of
    /// [`Transmit::segment_size`](super::Transmit::segment_size) bytes (TCP segmentation offload, as Linux's TSO): a whole
    /// number of segments, the last one short only where the sendable data ends. The send
    /// bookkeeping (RACK, SACK, PRR, retransmission) counts each cut segment as sent on its own,
    /// and retransmissions stay one segment long. 0 (the default) or anything up to the MSS:
    /// ordinary segments.
    pub fn set_super_segment_limit(&mut self, bytes: usize) {
        self.snd.super_max = bytes;
        self.snd.super_frames = usize::MAX;
    }

    /// [`set_super_segment_limit`](Self::set_super_segment_limit) for the stack's software
    /// segmentation, which cuts a super-segment into at most `frames` frames (what its outgoing
    /// batch has room for). The segment size is the connection's to know, and a lone segment
    /// never needs it, so the bytes `frames` allow are worked out only when a super-segment is
    /// sized.
    pub(crate) fn set_software_segmentation(&mut self, bytes: usize, frames: usize) {
        self.snd.super_max = bytes;
        self.snd.super_frames = frames;
    }

    /// Lets a super-segment ([`set_super_segment_limit`](Self::set_super_segment_limit)) run over
    /// consecutive pool buffers queued with [`send_pooled`](Self::send_pooled) when each is whole
    /// and one segment (only the last shorter), lent as a
    /// [`Lent::PooledRun`](super::Lent::PooledRun); otherwise (`false`, the default) each pool
    /// buffer is a segment of its own. Other content queued by reference (prepared content) goes
    /// a segment at a time either way. For the stack's software segmentation, which sends each
    /// buffer of the run as a frame of its own, by reference: a device that cuts super-segments
    /// itself (TSO) would need their bytes in one buffer.
    pub(crate) fn set_pooled_trains(&mut self, on: bool) {
        self.snd.pooled_trains = on;
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

    /// Lets the application write up to `max` bytes to send straight into the send buffer's free
    /// space, instead of copying them in from a buffer of its own as [`send`](Self::send) does:
    /// `write` gets the free space as a slice (holding earlier bytes of this stream, or zeros),
    /// writes its bytes at its front and returns how many; when the free space wraps around the
    /// ring and the first slice was filled, `write` is called again with the rest. Each segment that
    /// carries the bytes reads them from the buffer (retransmissions included), as for `send`.
    /// Returns `None` without calling `write` when no byte can be queued now (the buffer is full,
    /// or the sending side is shut down or the connection closed), else how many bytes were queued.
    pub fn send_with(&mut self, max: usize, write: impl FnMut(&mut [u8]) -> usize) -> Option<usize> {
        if !self.may_send() {
            return None;
        }
        self.snd.stream.push_with(max, write)
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

    /// Queues the data of a pool buffer to send after what is queued, by reference (see
    /// [`PooledSlice`](crate::tcp::PooledSlice)): the connection holds the buffer until its bytes are
    /// acknowledged, and sends it as one segment, by reference when the segment is all of it.
    /// The buffer comes back (nothing queued) once the sending side is shut down or the
    /// connection closed, when the bytes queued would pass the send buffer's size (an empty send
    /// stream takes any one buffer), or when 4096 buffers are queued.
    ///
    /// # Errors
    ///
    /// The buffer, when it was not queued.
    pub fn send_pooled(&mut self, buffer: SharedPacket) -> Result<(), SharedPacket> {
        let queued = self.snd.stream.len();
        if !self.may_send() || (queued > 0 && queued + buffer.len() > self.snd.stream.capacity()) {
            return Err(buffer);
        }
        self.snd.stream.push_pooled(buffer)
    }

    /// Gives the pool buffers queued with [`send_pooled`](Self::send_pooled) and acknowledged
    /// since the last call back to `cache`'s free list (the ones the device is done with; the
    /// others go back when it is), instead of to the pool's shared one. The stack calls it when
    /// it drains the connection's output; without it they go back all the same.
    #[inline]
    pub fn recycle_acked(&mut self, cache: &PoolCache) {
        self.snd.stream.recycle(cache);
    }

    /// Reads received bytes in order; returns how many (0 when none are buffered; see
    /// [`recv_finished`](Self::recv_finished) for the end of the stream). Freeing space may
    /// schedule a window update.
    pub fn recv(&mut self, buf: &mut [u8]) -> usize {
        let n = self.rcv.buf.dequeue_slice(buf);
        if self.rcv.ooo.is_empty() {
            // Read empty (a no-op otherwise): the next segment goes to the start of the storage,
            // and a clamped ring may ask its budget for storage again.
            self.rcv.buf.rewind();
            if self.rcv.buf.is_clamped() {
                self.rcv.buf.unclamp();
            }
        }
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
                // <SEQ=SND.NXT><CTL=RST> (RFC 9293 §3.10.4), with the ACK of what was received
                // and our timestamps (RFC 7323 §3.2), as Linux sends it.
                self.pending_rst = Some(TcpRepr {
                    src_port: self.local.port(),
                    dst_port: self.remote.port(),
                    control: TcpControl::Rst,
                    seq_number: self.snd.nxt,
                    ack_number: Some(self.rcv.nxt),
                    ..TcpRepr::default()
                });
                self.rst_with_ts = true;
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
        self.timers.tlp = None;
        self.timers.rack = None;
        self.timers.pace = None;
        self.recovery.tlp_pending = false;
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
        self.recovery.rxt_marks.clear();
        self.recovery.rack.release();
        self.rcv.buf.release();
    }

    fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.timers.time_wait = Some(now + self.config.msl * 2);
        self.timers.rto = None;
        self.timers.persist = None;
        self.timers.keepalive = None;
        self.timers.tlp = None;
        self.timers.rack = None;
        self.timers.pace = None;
        self.recovery.tlp_pending = false;
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
}
