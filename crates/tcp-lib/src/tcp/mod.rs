//! The TCP connection core: one transmission control block (TCB) as a sans-IO state machine.
//!
//! # Design
//!
//! A [`Connection`] is written in the quinn-proto style: it reads no clock, does no I/O and makes
//! no syscalls. The caller (the per-core stack, or a test harness with virtual time) feeds it
//! * segments: [`Connection::handle_segment`] with a parsed [`TcpRepr`] (the caller demultiplexed
//!   it by 4-tuple and verified the checksum),
//! * time: [`Connection::handle_timeout`] once `now` reaches [`Connection::poll_timeout`],
//! * application calls: [`send`](Connection::send), [`recv`](Connection::recv),
//!   [`shutdown_write`](Connection::shutdown_write), [`close`](Connection::close),
//!   [`abort`](Connection::abort),
//!
//! and after any of these drains [`Connection::poll_transmit`] until it returns `None`: each call
//! yields one segment as a [`Transmit`], the header description plus payload bytes copied into a
//! caller buffer, ready for [`TcpRepr::emit`](crate::wire::TcpRepr::emit).
//!
//! ```
//! use std::net::{Ipv4Addr, SocketAddrV4};
//! use std::time::Instant;
//! use tcp_lib::tcp::{Config, Connection, State};
//! use tcp_lib::wire::SeqNumber;
//!
//! let client_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 40000);
//! let server_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
//! let now = Instant::now(); // a real stack passes its clock; tests pass virtual time
//! let mut client = Connection::connect(Config::default(), client_addr, server_addr, SeqNumber::new(1), now);
//! let mut buf = [0u8; 1500];
//! let syn = client.poll_transmit(now, &mut buf).expect("the SYN");
//! // The listener accepts the SYN (the stack emits and parses segments with `wire` in between).
//! let mut server =
//!     Connection::accept(Config::default(), server_addr, client_addr, &syn.segment(&buf), SeqNumber::new(9), now)
//!         .expect("a SYN");
//! assert_eq!(client.send(b"hello"), 5);
//! // Shuttle segments until both sides are quiet.
//! loop {
//!     let mut moved = false;
//!     while let Some(t) = server.poll_transmit(now, &mut buf) {
//!         client.handle_segment(now, &t.segment(&buf));
//!         moved = true;
//!     }
//!     while let Some(t) = client.poll_transmit(now, &mut buf) {
//!         server.handle_segment(now, &t.segment(&buf));
//!         moved = true;
//!     }
//!     if !moved {
//!         break;
//!     }
//! }
//! assert_eq!((client.state(), server.state()), (State::Established, State::Established));
//! let mut got = [0u8; 16];
//! assert_eq!(server.recv(&mut got), 5);
//! assert_eq!(&got[..5], b"hello");
//! // The server's ACK of "hello" is delayed: a timer, for `handle_timeout` at this instant.
//! assert!(server.poll_timeout().is_some());
//! ```
//!
//! Memory is bounded when the connection is created: the send and receive buffers are ring buffers
//! limited to the configured sizes (their storage grows on demand up to that limit and is freed in
//! TIME-WAIT and CLOSED), out-of-order data is stored in the free part of the receive ring (the
//! advertised window never exceeds it) with at most [`Config::max_ooo_ranges`] ranges, and the
//! SACK scoreboard is bounded too; beyond that growth of the rings, no segment allocates. Many
//! connections can share a [`BufferBudget`] ([`Connection::set_budget`]; a stack attaches its own):
//! ring growth is charged to it, and a ring it refuses works on with the storage it has (every
//! ring may always hold [`BufferBudget::GUARANTEED`] bytes), so that connections whose readers do
//! not read or whose peers never acknowledge hold at most the budget plus that floor each. Nothing
//! a peer sends can make the connection panic; sequence numbers are compared only through the
//! wrapping [`SeqNumber`].
//!
//! # What it implements
//!
//! * RFC 9293: the eleven states ([`State`]), active, passive and simultaneous open, simultaneous
//!   close, half-close, TIME-WAIT for 2·MSL ([`Config::msl`]), the segment acceptability test
//!   (§3.10.7.4; a segment without data is also accepted at the right edge of the window, as
//!   Linux does, see the deadlock it avoids in the source), ACK processing with the
//!   SND.WL1/SND.WL2 window update rule, RST generation ([`reset_for`]) and processing, sender
//!   and receiver silly window avoidance (§3.8.6.2), Nagle (RFC 896, on unless
//!   [`Connection::set_nodelay`]). Data carried on a SYN is not accepted (it is not acknowledged,
//!   so the peer sends it again).
//! * RFC 5961: an RST is accepted only at exactly RCV.NXT; an in-window RST or any SYN on a
//!   synchronized connection gets a challenge ACK; so does an ACK of data never sent or older than
//!   SND.UNA less the largest window the peer offered, which is then dropped (§5.2). Challenge
//!   ACKs are rate-limited to [`Config::challenge_ack_limit`] per second per connection (§7). The
//!   ACKs answering other unacceptable segments are limited too: one per 500 ms for segments
//!   without data or flags, so that two ends can never ping-pong ACKs.
//! * RFC 7323: window scaling (only when both SYNs carry it; the shift is capped at 14), timestamps
//!   (TSval = a per-connection offset plus milliseconds of the caller's clock; TSecr echo of
//!   TS.Recent; RTT samples from TSecr; PAWS).
//! * RFC 2018: SACK-permitted negotiation ([`Connection::sack_permitted`]); once negotiated, our
//!   ACKs (and data segments, whose payload shrinks to leave room) carry SACK blocks for the
//!   out-of-order data held, the block of the most recently received segment first, then the
//!   other recent ones, up to 4 (3 beside timestamps), kept as Linux keeps them: held data whose
//!   block was forgotten (a fifth hole) is not reported later, since a sender that times SACKs
//!   would read the delay as a round trip.
//! * RFC 2883 D-SACK ([`Config::dsack`], on by default as in Linux): the ACK answering data
//!   received before names it once, in its first SACK block (below the cumulative ACK, or
//!   inside the block that holds it when it was held out of order); not from TIME-WAIT, whose
//!   answers are plain. D-SACKs received are counted ([`Stats::dsacks_received`]), are not
//!   duplicate ACKs (RFC 6675 §2), take no part in the scoreboard, and widen RACK's reordering
//!   window (below); with [`Config::dsack_undo`] (on in [`Config::linux`]), a fast recovery
//!   whose every retransmission comes back D-SACKed was spurious, and its window reduction is
//!   undone (RFC 3708's detection; the response restores cwnd and ssthresh, as Linux's
//!   `TCPDSACKUndo`; `undo.rs`). A timeout's reduction is never undone (no F-RTO or Eifel).
//! * RFC 6675 conservative SACK-based loss recovery: a bounded scoreboard of SACKed ranges,
//!   IsLost (DupThresh = 3 segments or duplicate ACKs), recovery entered on the third duplicate
//!   ACK or as soon as IsLost(HighACK + 1) (so ACKs carrying data count too), pipe estimation,
//!   NextSeg() (lost holes, then new data, then other holes below HighSACK), exit once the
//!   cumulative ACK reaches the recovery point; an RTO forgets the scoreboard (§5.1, safe
//!   against reneging) and resends from SND.UNA, skipping what is SACKed afterwards. Also: RFC
//!   5827 early retransmit for windows under four segments (without RACK), and detection of a lost
//!   retransmission of the hole at SND.UNA (data sent after it was SACKed). No rescue
//!   retransmission. Without SACK, NewReno recovery as below.
//! * RFC 8985 §6 RACK ([`Config::rack`], off by default, on in [`Config::linux`]): time-based
//!   loss marking beside IsLost. Every transmission is logged with the time it left; the most
//!   recently sent one the peer delivered (cumulatively or by SACK) sets RACK's clock, and the
//!   original transmissions sent before it are lost once an RTT plus a reordering window (a
//!   quarter of the minimum RTT, and another quarter for each round trip in which a D-SACK
//!   arrived, for 16 recoveries after the last, at most SRTT; none once the loss is plain and
//!   no reordering was seen: §6.2 step 4) has passed since they left, on an
//!   ACK or by the reordering timer. Its marks join the scoreboard's (`rack.rs`); [`Stats::reordering`] and
//!   [`Stats::reordering_events`] report the reordering it saw. RACK.rtt is the sample of the
//!   last delivered transmission by send time, or in Linux's order
//!   ([`Config::rack_rtt_sequence_order`]). With its log, SACK blocks can be taken in whole
//!   segments as sent, as Linux takes them ([`Config::sack_in_segments`]).
//! * RFC 8985 §7 tail loss probes ([`Config::tail_loss_probe`], off by default, on in
//!   [`Config::linux`]): after about two SRTTs without an ACK, one new segment or the last one
//!   again, so that the peer's answer shows a lost tail before the RTO would.
//! * RFC 9937 ("Proportional Rate Reduction (PRR)", 2025, which obsoletes RFC 6937,
//!   "Proportional Rate Reduction for TCP", 2013): how much every ACK in fast recovery lets the
//!   sender send, retransmissions and new data alike, with SACK and without. cwnd = ssthresh
//!   on entry and it does not move; on entry RecoverFS = pipe, and each ACK adds its
//!   DeliveredData (the change in SND.UNA plus the change in SACKed bytes; without SACK, one
//!   SMSS per duplicate ACK, bounded by the flight, and a cumulative ACK less what its duplicate
//!   ACKs counted) to prr_delivered. While the pipe is above ssthresh, sndcnt =
//!   ceil(prr_delivered · ssthresh / RecoverFS) − prr_out (the proportional part); at or below,
//!   max(prr_delivered − prr_out, DeliveredData) (PRR-CRB), one SMSS more when the ACK advances
//!   SND.UNA and shows no new loss (PRR-SSRB), at most ssthresh − pipe: RFC 9937 §4's choice,
//!   and Linux's. The fast retransmission goes regardless (it counts in prr_out), as does the
//!   NewReno retransmission on a partial ACK; recovery ends with cwnd = ssthresh. The pipe is RFC
//!   6675's with SACK, the flight less the duplicate ACKs' estimate without.
//! * RFC 6298: the retransmission timer (initial and minimum RTO configurable), Karn's algorithm
//!   when timestamps are off, exponential backoff, a retry limit after which the connection fails
//!   with [`ConnectionError::TimedOut`]; SYN retries.
//! * RFC 1122 §4.2.3.2: delayed ACKs (at most [`Config::delayed_ack`], and at least every second
//!   full-sized segment; the ACK of a FIN that moves the connection to CLOSE-WAIT after data
//!   arrived is delayed too, as Linux's `tcp_fin` does, so that it rides on the application's
//!   answer or FIN: a connection the server closes costs one segment less); §4.2.2.17 zero-window
//!   probing with the persist timer; §4.2.3.6 keepalive (off by default).
//! * RFC 1191 path MTU discovery: [`Connection::handle_frag_needed`] takes an ICMP
//!   fragmentation-needed report (checked against the segments in flight, RFC 5927 §4.1; the RFC
//!   1191 plateaus when the router gives no MTU) and shrinks the send MSS.
//! * RFC 5681 slow start and congestion avoidance, fast retransmit on the third duplicate ACK with
//!   NewReno fast recovery (RFC 6582: the recovery point and partial ACKs; PRR, not the window
//!   inflation, paces what is sent) and limited transmit (RFC 3042); growth in slow start by one
//!   SMSS per ACK, or by every segment an ACK covers ([`Config::slow_start_segments_per_ack`]),
//!   never twice for what was SACKed first; an initial window of RFC 5681's two to four segments
//!   or [`Config::initial_window`] (RFC 6928's ten); optionally no growth while
//!   application-limited ([`Config::cwnd_validation`], RFC 7661 §4.3); the window arithmetic
//!   behind the [`CongestionControl`] trait, with [`Cubic`] (RFC 9438, the default),
//!   [`LinuxCubic`] (the same curve counted as Linux's `tcp_cubic.c`), [`NewReno`] and [`Bbr`]
//!   (Cardwell et al., 2016: the window and the pacing rate from the delivery rate measured by
//!   [`RateSample`]s and the minimum RTT, not from losses; [`Config::bbr`]) selectable in
//!   [`Config::congestion`]; optionally HyStart ([`Config::hystart`]: RFC 9406's HyStart++
//!   with Conservative Slow Start, or Linux CUBIC's delay and ACK-train detectors) ends slow
//!   start before a loss.
//! * RFC 3168 Explicit Congestion Notification ([`Config::ecn`]: accepted when a peer asks, by
//!   default, as Linux does): ECT(0) on new data ([`Transmit::ect`], for the caller's IP header),
//!   ECE on our ACKs from a CE-marked data segment ([`Connection::handle_segment_ecn`]) until the
//!   peer's CWR, and a window reduction (cwnd = ssthresh, once per window of data, no
//!   retransmission) for an ECE, with CWR on the next new data. By default the reduction is RFC
//!   3168's, at once; with [`Config::ecn_prr`] it is Linux's CWR state: ssthresh from cwnd, and
//!   PRR (RFC 9937) paces the flight down to it over the round trip.
//! * Pacing ([`Config::pacing`], off by default; `pacing.rs`): each data transmission (a TSO
//!   packet whole) at its earliest departure time, at Linux's rate of 200 % of cwnd per smoothed
//!   RTT in slow start and 120 % after, as Linux sends under the `fq` qdisc; the departure time
//!   is a timer of [`Connection::poll_timeout`], so a paced connection sleeps between packets.
//! * Receive-buffer autotuning ([`Config::recv_buffer_max`], off by default): Fisk and Feng's
//!   dynamic right-sizing ("Dynamic right-sizing in TCP", 2001) as Linux's
//!   `tcp_rcv_space_adjust` does it: once a receiver-side round trip, the buffer grows to twice
//!   what the application read in the last one and more, up to the maximum, so the window
//!   follows the path and the reader (`connection/autotune.rs`).
//! * Overlapping data: the first copy of a byte received wins (see `connection/input.rs`).
//! * Header prediction ([`Config::header_prediction`], on by default; Jacobson, "4BSD Header
//!   Prediction", 1990, as Linux's `tcp_rcv_established` fast path): the next in-order data
//!   segment of an established connection with nothing in flight skips the general processing,
//!   with the same result (a test compares the two paths step by step).
//!
//! Urgent data is not supported: the urgent pointer is ignored and urgent bytes are ordinary data.
//!
//! # Listening
//!
//! The LISTEN state belongs to the listener of the per-core [`stack`](crate::stack), which keeps
//! the SYN queue and the accept backlog and answers with SYN cookies when the queue is full:
//! [`listen_reply`] says what a listener does with a segment, and [`Connection::accept`] builds
//! the SYN-RECEIVED connection for a SYN it accepts. A `Connection` itself never reports
//! [`State::Listen`].
//!
//! # TIME-WAIT
//!
//! Once a connection in TIME-WAIT has sent all it had to send, the stack may replace it with a
//! compact record (`time_wait.rs`, 72 bytes instead of the whole TCB) that answers every later
//! segment as the connection would until 2·MSL ends; both apply the same segment rules
//! (`rules.rs`).
//!
//! # Where the code lives
//!
//! `connection.rs` holds the TCB, its state grouped by concern, and the application calls; its
//! children `connection/input.rs`, `ack.rs`, `output.rs` and `timers.rs` hold the state machine's
//! receiving, ACK processing and loss recovery, sending, and timers, `connection/cc.rs` what
//! the congestion controller learns besides acknowledged bytes, and `connection/autotune.rs` the
//! receive buffer's growth. `send_stream.rs` is the send
//! stream (copied bytes and prepared content), `buffer.rs` the rings and the out-of-order
//! assembler, `sack.rs` the SACK scoreboard and our SACK blocks, `rtt.rs` the RTO estimator,
//! `budget.rs` the budget the rings are charged to, `push.rs` where PSH goes, `pacing.rs` departure times, `congestion.rs` the congestion controllers (`cubic_linux.rs` Linux's CUBIC arithmetic, `bbr.rs` BBR,
//! `controller.rs` the one a connection holds, `hystart.rs` HyStart and its RTT samples), `prepared.rs` prepared content with its checksums,
//! `send_ref.rs` the payloads lent from prepared content and from the application's pool buffers,
//! `rules.rs` the segment rules shared with `time_wait.rs`.

use std::fmt;
use std::time::Duration;

use crate::wire::{SeqNumber, TcpControl, TcpRepr};

mod bbr;
mod budget;
mod buffer;
mod congestion;
mod connection;
mod controller;
mod cubic_linux;
mod hystart;
mod pacing;
mod prepared;
mod push;
mod rack;
mod rtt;
mod rules;
mod sack;
mod send_ref;
mod send_stream;
mod time_wait;
mod undo;

#[cfg(test)]
mod tests;

pub use bbr::{Bbr, BbrMode};
pub use budget::{BudgetStats, BufferBudget};
pub use congestion::{CongestionAlgorithm, CongestionControl, Cubic, NewReno, RateSample};
pub use connection::Connection;
pub(crate) use connection::Spare;
pub use cubic_linux::LinuxCubic;
pub use hystart::HyStart;
pub use pacing::Pacing;
pub use prepared::{InPoolError, PreparedSegments, PreparedSlice};
pub use push::Push;
pub use send_ref::PooledSlice;
pub use send_stream::{Lent, PooledRun};
#[cfg(test)]
pub(crate) use time_wait::TimeWaitParts;
pub(crate) use time_wait::{TimeWait, TimeWaitAction};

/// The states of RFC 9293 §3.3.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// No connection.
    Closed,
    /// Waiting for a connection request (a listener's state).
    Listen,
    /// SYN sent, waiting for a matching SYN.
    SynSent,
    /// SYN received and SYN sent, waiting for the ACK of our SYN.
    SynReceived,
    /// Open: data flows both ways.
    Established,
    /// We closed (FIN sent), waiting for its ACK or the peer's FIN.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's FIN.
    FinWait2,
    /// The peer closed; we may still send.
    CloseWait,
    /// Both closed at once; waiting for the ACK of our FIN.
    Closing,
    /// The peer closed first and then we did; waiting for the ACK of our FIN.
    LastAck,
    /// Waiting 2·MSL so that the peer received our ACK of its FIN and old duplicates die.
    TimeWait,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Closed => "CLOSED",
            Self::Listen => "LISTEN",
            Self::SynSent => "SYN-SENT",
            Self::SynReceived => "SYN-RECEIVED",
            Self::Established => "ESTABLISHED",
            Self::FinWait1 => "FIN-WAIT-1",
            Self::FinWait2 => "FIN-WAIT-2",
            Self::CloseWait => "CLOSE-WAIT",
            Self::Closing => "CLOSING",
            Self::LastAck => "LAST-ACK",
            Self::TimeWait => "TIME-WAIT",
        })
    }
}

/// Why a connection ended abnormally.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ConnectionError {
    /// The peer answered our SYN with a reset ("connection refused").
    #[error("connection refused")]
    Refused,
    /// The peer reset an open connection.
    #[error("connection reset by peer")]
    Reset,
    /// Retransmissions (of data, SYN or keepalive probes) went unanswered too long.
    #[error("connection timed out")]
    TimedOut,
    /// The application aborted the connection.
    #[error("connection aborted")]
    Aborted,
}

/// Keepalive parameters (RFC 1122 §4.2.3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe (RFC 1122: at least two hours by default).
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes after which the connection fails with [`ConnectionError::TimedOut`].
    pub probes: u32,
}

/// The configuration of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Send buffer size in bytes (bounds what [`Connection::send`] accepts before the peer
    /// acknowledges it). A limit: the memory is allocated as data is queued, growing
    /// geometrically up to it, and freed in TIME-WAIT and CLOSED.
    pub send_buffer: usize,
    /// Receive buffer size in bytes; the advertised window follows its free space (the limit
    /// less the bytes held, however much memory is allocated now: it grows as data arrives).
    pub recv_buffer: usize,
    /// Receive-buffer autotuning: the most the receive buffer may grow to, from
    /// [`recv_buffer`](Self::recv_buffer), as the application reads (0, or any size not above
    /// `recv_buffer`: off, the default). Once a round trip (the receiver's estimate: the
    /// shortest time the peer took to fill a window it was offered), when the application read
    /// more in the last round trip than in any before, the buffer grows to twice that and more
    /// (so the window stays ahead of a sender in slow start), up to this: the window follows what
    /// the path and the application take, and an application that reads slowly keeps a small
    /// one. This is Linux's receive autotuning (`tcp_moderate_rcvbuf`, up to `tcp_rmem[2]`, 6
    /// MiB by default), after Fisk and Feng's dynamic right-sizing ("Dynamic right-sizing in
    /// TCP", 2001). The buffer's memory is allocated as data arrives, as always, and charged to
    /// a [`BufferBudget`] when the stack has one (growth is skipped
    /// when it has no room); the window scale announced ([`rcv_wscale`](Self::rcv_wscale)'s
    /// `None`) covers this size. Counted in [`Stats::recv_buffer`] and
    /// [`Stats::recv_buffer_raises`].
    ///
    /// ```
    /// use tcp_lib::tcp::Config;
    ///
    /// // Start at Linux's 128 KiB and grow to its 6 MiB as the path and the reader allow.
    /// let config = Config { recv_buffer: 128 * 1024, recv_buffer_max: 6 << 20, ..Config::linux() };
    /// assert!(config.recv_buffer_max > config.recv_buffer);
    /// ```
    pub recv_buffer_max: usize,
    /// The MSS we announce and the most we send per segment (the interface MTU minus 40).
    pub mss: u16,
    /// Offer window scaling (RFC 7323).
    pub window_scaling: bool,
    /// The window scale shift to announce (RFC 7323 §2.3, at most 14); `None`: the smallest that
    /// lets the whole [`recv_buffer`](Self::recv_buffer) be advertised (or the whole
    /// [`recv_buffer_max`](Self::recv_buffer_max), when larger). Linux announces the shift
    /// for the largest buffer its receive autotuning may grow to (`tcp_rmem[2]`: 7 for its
    /// default 6 MiB, 8 for 8 to 16 MiB), so a peer modelling Linux sets it.
    pub rcv_wscale: Option<u8>,
    /// Offer timestamps (RFC 7323).
    pub timestamps: bool,
    /// Offer SACK (RFC 2018).
    pub sack: bool,
    /// With SACK: report duplicate segments received (D-SACK, RFC 2883 §4), as Linux does
    /// (`tcp_dsack` 1, the default): the first SACK block of the ACK that answers a segment
    /// holding data already received names that data once, below the cumulative ACK or inside
    /// the second block. A sender that reads them learns that a retransmission was spurious
    /// (Linux undoes the window reduction it made for it, and widens RACK's reordering window);
    /// one that does not ignores them (RFC 2883 §4 keeps them valid SACK blocks to an RFC 2018
    /// sender). Ours reads them whatever this says: [`Stats::dsacks_received`] and RACK's
    /// reordering window ([`Config::rack`]).
    pub dsack: bool,
    /// Undo a fast recovery's window reduction once D-SACKs name every segment it retransmitted
    /// (`tcp/undo.rs`: RFC 3708's detection, Linux's `TCPDSACKUndo` response): none was lost,
    /// the originals were late (reordering), and cwnd and ssthresh go back to their values
    /// before it (never lower), ending the recovery if it is still under way. Needs SACK and
    /// a peer that sends D-SACKs (Linux does; [`Config::dsack`] on ours). Counted in
    /// [`Stats::dsack_undos`]. `false` (the default): a reduction stands, as RFC 5681 has it.
    pub dsack_undo: bool,
    /// Maximum segment lifetime; TIME-WAIT lasts twice this.
    pub msl: Duration,
    /// RTO before any RTT sample (RFC 6298: 1 s).
    pub initial_rto: Duration,
    /// Lower bound of the RTO (RFC 6298: 1 s; many stacks use 200 ms).
    pub min_rto: Duration,
    /// Retransmissions of one segment after which the connection fails.
    pub max_retransmits: u32,
    /// Retransmissions of the SYN (or SYN-ACK) after which the connection fails.
    pub syn_retries: u32,
    /// Longest ACK delay (`None`: acknowledge every segment at once). RFC 1122 allows up to 500 ms.
    pub delayed_ack: Option<Duration>,
    /// Acknowledge up to this many of the first in-order data segments of a connection at once
    /// instead of delaying them, and again after the connection sat idle longer than the RTO
    /// (Linux's quick-ACK mode, which allows 16): the sender is in slow start then and each ACK
    /// grows its window. 0 (the default): delay from the first segment.
    pub quick_acks: usize,
    /// Keepalive probing (`None`: off, the default).
    pub keepalive: Option<Keepalive>,
    /// Disable Nagle's algorithm from the start.
    pub nodelay: bool,
    /// Most out-of-order ranges held (each one a hole the peer must fill). A segment that would
    /// open one more is dropped and counted ([`Stats::ooo_dropped`]); the peer sends it again.
    /// The ranges' bytes live in the receive ring, so this bounds only their bookkeeping (16
    /// bytes a range, allocated when out-of-order data first arrives) and the work of each
    /// out-of-order segment (a binary search and an insertion into a sorted list). The default,
    /// 256, holds every other full-sized segment of a 740 KiB window (Linux bounds its
    /// out-of-order queue by memory only): at 8, a 512 KiB window through 10% loss dropped 500 to
    /// 1,000 segments of a 2 MiB transfer.
    pub max_ooo_ranges: usize,
    /// Congestion control (CUBIC by default).
    pub congestion: CongestionAlgorithm,
    /// Once the reordering seen (RACK's measure, [`Config::rack`]) exceeds DupThresh, grow the
    /// congestion window for data an ACK SACKs, not only for what it acknowledges cumulatively,
    /// as Linux does (`tcp_may_raise_cwnd`). `false` (the default): RFC 5681, growth on
    /// cumulative ACKs only.
    pub grow_on_reordered_sacks: bool,
    /// Compute the RTO as Linux does: SRTT plus the largest deviation of the last round trip
    /// (four times the mean deviation), never less than [`min_rto`](Self::min_rto), so the RTO
    /// is at least SRTT + `min_rto` (300 ms for a 100 ms RTT and Linux's 200 ms minimum). `false`
    /// (the default): RFC 6298, SRTT + 4·RTTVAR with `min_rto` bounding the whole RTO. Without
    /// timestamps, Linux also measures every ACK that acknowledges original data (the time since
    /// the oldest transmission it covers left, from its log of transmissions; Karn's rule leaves
    /// retransmitted data out) where RFC 6298 times one segment per round trip: the estimate
    /// follows a queue that builds within the round trip, as Linux's does (and its pacing rate
    /// with it, [`Config::pacing`]).
    pub linux_rto: bool,
    /// HyStart: whether slow start ends before a loss when the RTT shows the bottleneck's queue
    /// growing: [`HyStart::Rfc9406`] (HyStart++, with Conservative Slow Start) or
    /// [`HyStart::Linux`] (Linux CUBIC's detectors). [`HyStart::Off`] (the default): at ssthresh
    /// or a loss only (RFC 5681).
    pub hystart: HyStart,
    /// In slow start, how many SMSS one ACK may grow the congestion window by: 1 (the default) is
    /// RFC 5681 §3.1's `cwnd += min(N, SMSS)`; RFC 3465 allows 2; Linux grows by every segment
    /// an ACK covers (a large value models it).
    pub slow_start_segments_per_ack: usize,
    /// Tail loss probes (RFC 8985 §7): when data is outstanding and no ACK came for about two
    /// round trips, send one segment (new data if the receive window allows, else the last one
    /// sent again) instead of waiting for the RTO, so an ACK, SACK or duplicate ACK tells what was
    /// lost. One probe is outstanding at a time, until an ACK covers it (a probe that resent data
    /// and repaired a loss reduces the window as a loss would, [`Stats::tlp_recoveries`]); the
    /// probe timeout restarts with every ACK of new data. `false` (the default): only the RTO
    /// recovers a lost tail.
    pub tail_loss_probe: bool,
    /// RACK time-based loss detection with SACK (RFC 8985 §6): a segment sent before one the
    /// peer has SACKed is deemed lost once an RTT plus a reordering window (a quarter of the
    /// minimum RTT while reordering is seen or the loss is not plain) has passed since it left,
    /// checked on every ACK and by a reordering timer, besides RFC 6675's IsLost. Its
    /// reordering window then stands in for RFC 5827's early retransmit, which is off (as in
    /// Linux since 4.14). Retransmissions are checked alike: one deemed lost goes again at once,
    /// wherever it lies (RFC 6675's NextSeg alone never goes back below HighRxt). `false` (the
    /// default): IsLost and early retransmit, and the RTO.
    pub rack: bool,
    /// Which delivered transmission gives RACK.rtt when one ACK delivers several: `false` (the
    /// default) the last by the time it left (RFC 8985 §6.2 step 2); `true` the last in Linux's
    /// order (`tcp_rack_advance`: the newly SACKed ones by sequence, then the cumulatively
    /// acknowledged ones by sequence), so the highest cumulatively acknowledged transmission's
    /// RTT. After a retransmission of SND.UNA and the original data above it are acknowledged
    /// together, Linux waits for the older original's longer RTT before deeming the rest lost.
    pub rack_rtt_sequence_order: bool,
    /// With [`rack`](Self::rack): a SACK block counts only for the segments it covers whole, as
    /// they were sent (RACK logs each one), as Linux's `tcp_match_skb_to_sack` takes SACKs in
    /// whole segments of its buffers. A SACK of part of a segment (the last byte of it, say) then
    /// SACKs nothing, and that segment is resent whole. `false` (the default): every byte a SACK
    /// block covers is SACKed (RFC 2018, RFC 6675's byte-granular scoreboard). Each SACK block
    /// costs a walk of RACK's log of transmissions in flight.
    pub sack_in_segments: bool,
    /// Grow the congestion window only while the sender uses it (RFC 7661 §4.3, as Linux's
    /// `tcp_is_cwnd_limited`): in the current window of data the flight filled cwnd, or, in slow
    /// start, reached half of it. `false` (the default): every ACK outside recovery grows it.
    pub cwnd_validation: bool,
    /// The restart window after idle (RFC 5681 §4.1, Linux's `tcp_slow_start_after_idle`): new
    /// data written after nothing has been sent for more than an RTO, with nothing in flight,
    /// goes out under a cwnd of at most the initial window (halved from the old cwnd once per RTO
    /// idle, as Linux's `tcp_cwnd_restart`), ssthresh keeping three quarters of the old cwnd.
    /// `false` (the default): the window stays as the last flight left it (RFC 5681 says SHOULD;
    /// the default keeps what earlier releases did, and RFC 7661's [`Config::cwnd_validation`]
    /// is the other answer to a stale window).
    pub restart_after_idle: bool,
    /// The initial congestion window in segments (at least one: a window of none would never
    /// send, so no timer would ever end the connection); `None` (the default): RFC 5681 §3.1's
    /// two to four segments by SMSS. Linux starts with ten (RFC 6928).
    pub initial_window: Option<usize>,
    /// Most RFC 5961 challenge ACKs (for an in-window RST or SYN, or an unacceptable ACK) one
    /// connection sends per second (RFC 5961 §7); more are suppressed and counted in
    /// [`Stats::challenge_acks_suppressed`]. A per-connection limit (the default, 1000, is Linux's
    /// `tcp_challenge_ack_limit`, which Linux applies per host); 0 sends none.
    pub challenge_ack_limit: u32,
    /// Explicit Congestion Notification (RFC 3168): whether this side asks for it in its SYN
    /// and accepts it in a peer's. [`Ecn::Passive`] (the default, as Linux's `tcp_ecn = 2`):
    /// accepted when a peer asks, never asked for.
    pub ecn: Ecn,
    /// How an ECN echo reduces the window (RFC 3168 §6.1.2 asks for the reduction a loss
    /// brings): `false` (the default) at once, cwnd = ssthresh; `true` by Proportional Rate
    /// Reduction over the next round trip (RFC 9937 allows PRR for any window reduction), as
    /// Linux's CWR state does (`tcp_enter_cwr`, `tcp_cwnd_reduction`): each ACK lets out what
    /// PRR's sndcnt allows, the window does not grow, and cwnd = ssthresh once the peer
    /// acknowledges data sent after the reduction began. A loss detected meanwhile continues
    /// the same reduction in fast recovery instead of reducing again ([`Stats::cwr`]).
    pub ecn_prr: bool,
    /// Where data segments carry PSH (RFC 1122 §4.2.2.2 leaves it to the sender):
    /// [`Push::Burst`] (the default) on the segment that empties the send buffer and on the last
    /// one of a burst; [`Push::Linux`] where Linux's TSO packets put it.
    pub push: Push,
    /// What a zero-window probe carries (RFC 9293 §3.8.6.1): [`WindowProbe::Byte`] (the default)
    /// one byte past the window, [`WindowProbe::Empty`] nothing, as Linux probes.
    pub window_probe: WindowProbe,
    /// Pacing (`pacing.rs`): data leaves at a rate derived from the congestion window (by default
    /// [`Pacing::LINUX`]'s 200 % of cwnd per smoothed RTT in slow start, 120 % after), each
    /// transmission at its earliest departure time, as Linux sends under the `fq` qdisc, instead
    /// of a window's worth at once. It smooths the bursts of a window-limited sender into queues
    /// too shallow for them (the connection sleeps on a timer until each departure time;
    /// [`Stats::paced`], [`Stats::pacing_wait`] and [`Stats::pacing_rate`] say what it did).
    /// `None` (the default): every segment goes as soon as the windows allow (RFC 9293).
    pub pacing: Option<Pacing>,
    /// Header prediction (Van Jacobson's fast path, as in 4.4BSD's `tcp_input` and Linux's
    /// `tcp_rcv_established`): on an established connection with nothing in flight, the next
    /// in-order data segment with an ACK of SND.UNA, no flags, no SACK blocks, no ECN marks and
    /// a timestamp no older than TS.Recent is taken without the general processing of RFC 9293
    /// §3.10.7.4 (acceptability, trimming, ACK processing, loss detection), which would change
    /// nothing for it but the window, TS.Recent and the data. The result is the same either way,
    /// segment for segment; `true` (the default) is faster for the receiver of a bulk transfer
    /// ([`Stats::predicted`] counts the segments taken so). `false`: every segment goes through
    /// the general processing (a comparison, or to rule the fast path out).
    pub header_prediction: bool,
}

/// What a zero-window probe carries ([`Config::window_probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WindowProbe {
    /// One byte of queued data past the window (RFC 9293 §3.8.6.1, RFC 1122 §4.2.2.17): a peer
    /// whose window opened meanwhile takes it and acknowledges it.
    #[default]
    Byte,
    /// An empty segment at SND.UNA - 1 (Linux's `tcp_xmit_probe_skb`): old to the peer, which
    /// answers with an ACK that carries its window (RFC 9293 §3.10.7.4), and no data is resent.
    Empty,
}

/// Whether a connection uses Explicit Congestion Notification (RFC 3168, [`Config::ecn`]).
///
/// On a connection that negotiated it, new data goes out as ECT(0); a data segment that arrives
/// marked CE (Congestion Experienced) is echoed with ECE on every ACK until the peer's CWR says
/// it reduced its window; and an ACK with ECE reduces our window as a loss would, at most once per
/// window of data, without retransmitting anything (at once, or by PRR with
/// [`Config::ecn_prr`]), and the next new segment carries CWR.
/// Retransmissions, pure ACKs, window probes, SYNs and FINs without data are sent Not-ECT (RFC
/// 3168 §6.1.4 to §6.1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Ecn {
    /// Neither asked for nor accepted.
    Off,
    /// Accepted when the peer's SYN asks (ECE and CWR set), not asked for.
    #[default]
    Passive,
    /// Asked for in our SYN, and accepted.
    On,
}

impl Config {
    /// Linux's TCP as its default sysctls leave it (6.x kernels), for a connection that should
    /// behave as a Linux host's would towards the same peers: RACK loss detection and tail loss
    /// probes (RFC 8985, `tcp_recovery` 1, `tcp_early_retrans` 3; RACK's RTT taken in Linux's
    /// order, SACKs taken in whole segments) with window growth for SACKed data under reordering,
    /// window reductions undone when D-SACKs prove them spurious (`TCPDSACKUndo`),
    /// a 200 ms minimum RTO that bounds the RTO's variance term (Linux's estimator), delayed ACKs
    /// of up to 40 ms after a quick-ACK start of 16 segments, an initial window of ten segments
    /// (RFC 6928), slow start that grows by every segment an ACK covers, only while the window is
    /// used, and that HyStart may end, CUBIC with Linux's arithmetic, the restart window after
    /// idle (`tcp_slow_start_after_idle` 1), ECN reductions by PRR, PSH where Linux's TSO packets
    /// put it (`tcp_min_tso_segs` 2), empty zero-window probes, six SYN retries and fifteen
    /// retransmissions (`tcp_syn_retries`, `tcp_retries2`).
    ///
    /// Buffer sizes, the MSS and the rest are [`Config::default`]'s (Linux sizes its receive
    /// buffer by autotuning, from `tcp_rmem`'s 128 KiB up to 6 MiB: set
    /// [`Config::recv_buffer_max`] for that; this profile, which packetdrill's shim starts
    /// from, leaves it off). Each field is one of the knobs
    /// [`Config`] documents; this is the set packetdrill's Linux scripts run against (its shim
    /// starts from it). On a lossy path it recovers sooner than the defaults, which follow the
    /// RFCs' conservative choices: in `kernel_tap`'s lossy tests (about 10% loss each way, a
    /// kernel peer, 2 MiB each way, the same 200 ms minimum RTO for both) our 2 MiB arrive in
    /// about 5 to 6 s against 10.5 to 11 s (medians), with about 18 to 21 of our RTOs a run
    /// against 30 to 41: level with the kernel's own CUBIC in our place through the same faults
    /// (6 to 7 s, 17 to 18 RTOs). The kernel's BBR gets through them in hundredths of a second:
    /// random loss is not congestion to it; [`Config::bbr`] is this library's (`BENCHMARKS.md`,
    /// "TCP through loss").
    /// Its price: its larger windows make each timeout costlier, since a timeout forgets the SACK
    /// information (RFC 2018 §8; Linux keeps it) and resends what the peer already holds until
    /// new SACK blocks report it: in four of 16 runs we resent 489 to 844 segments where the
    /// others resent about 200.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tcp_lib::tcp::Config;
    ///
    /// let linux = Config { recv_buffer: 256 * 1024, ..Config::linux() };
    /// assert!(linux.rack && linux.tail_loss_probe && linux.dsack_undo);
    /// assert_eq!(linux.min_rto, Duration::from_millis(200));
    /// ```
    #[must_use]
    pub fn linux() -> Self {
        Self {
            min_rto: Duration::from_millis(200),
            initial_rto: Duration::from_secs(1),
            delayed_ack: Some(Duration::from_millis(40)),
            quick_acks: 16,
            syn_retries: 6,
            max_retransmits: 15,
            initial_window: Some(10),
            slow_start_segments_per_ack: 64,
            congestion: CongestionAlgorithm::LinuxCubic,
            hystart: HyStart::Linux,
            linux_rto: true,
            grow_on_reordered_sacks: true,
            cwnd_validation: true,
            restart_after_idle: true,
            tail_loss_probe: true,
            rack: true,
            dsack_undo: true,
            rack_rtt_sequence_order: true,
            sack_in_segments: true,
            ecn_prr: true,
            push: Push::Linux { min_tso_segs: 2 },
            window_probe: WindowProbe::Empty,
            ..Self::default()
        }
    }

    /// [`Config::linux`] with BBR ([`CongestionAlgorithm::Bbr`], [`Bbr`]) in place of CUBIC, as
    /// a Linux host with `net.ipv4.tcp_congestion_control = bbr` behaves: the window and the
    /// pacing rate follow the delivery rate and the minimum RTT the connection measures, not its
    /// losses, so random loss (a lossy radio link, a faulty cable) costs retransmissions but not
    /// throughput. BBR paces ([`Config::pacing`], Linux's ratios for the first segments) and
    /// takes its samples from RACK's log of transmissions ([`Config::rack`], on in the Linux
    /// profile); HyStart, which ends CUBIC's slow start, is off (BBR's startup ends on its own).
    ///
    /// In `kernel_tap`'s lossy tests (about 10% loss each way, 2 MiB each way) our data arrives
    /// in 1.1 to 1.6 s (medians) with 5 to 7 RTOs, against 4.6 to 6.1 s and 18 to 22 RTOs for
    /// [`Config::linux`]'s CUBIC; the kernel's own BBR in our place, behind a relay and so on
    /// another path, takes 0.03 s there. Through a 10 ms, 20 MB/s bottleneck that both see
    /// alike (the same faults), ours takes 0.25 to 0.33 s against the kernel's 0.30 to 0.49 s
    /// (with 8 MiB, 0.7 to 1.4 times the kernel's time), provided the loop that drives the stack
    /// sleeps to [`Stack::poll_timeout`](crate::stack::Stack::poll_timeout) to the microsecond: woken a
    /// millisecond at a time, a paced sender falls behind its own rate (`BENCHMARKS.md`, "BBR in
    /// tcp-lib", "BBR through a bottleneck", "Waits to the nanosecond" and "Lost
    /// retransmissions").
    ///
    /// ```
    /// use tcp_lib::tcp::{CongestionAlgorithm, Config};
    ///
    /// let bbr = Config::bbr();
    /// assert_eq!(bbr.congestion, CongestionAlgorithm::Bbr);
    /// assert!(bbr.rack && bbr.pacing.is_some());
    /// ```
    #[must_use]
    pub fn bbr() -> Self {
        Self {
            congestion: CongestionAlgorithm::Bbr,
            hystart: HyStart::Off,
            pacing: Some(Pacing::LINUX),
            ..Self::linux()
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            send_buffer: 64 * 1024,
            recv_buffer: 64 * 1024,
            recv_buffer_max: 0,
            mss: 1460,
            window_scaling: true,
            rcv_wscale: None,
            timestamps: true,
            sack: true,
            dsack: true,
            dsack_undo: false,
            msl: Duration::from_secs(30),
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_secs(1),
            max_retransmits: 12,
            syn_retries: 6,
            delayed_ack: Some(Duration::from_millis(40)),
            quick_acks: 0,
            keepalive: None,
            nodelay: false,
            max_ooo_ranges: 256,
            congestion: CongestionAlgorithm::Cubic,
            hystart: HyStart::Off,
            linux_rto: false,
            grow_on_reordered_sacks: false,
            initial_window: None,
            slow_start_segments_per_ack: 1,
            cwnd_validation: false,
            restart_after_idle: false,
            tail_loss_probe: false,
            rack: false,
            rack_rtt_sequence_order: false,
            sack_in_segments: false,
            challenge_ack_limit: 1000,
            ecn: Ecn::Passive,
            ecn_prr: false,
            push: Push::Burst,
            window_probe: WindowProbe::Byte,
            pacing: None,
            header_prediction: true,
        }
    }
}

/// Counters and estimates of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stats {
    /// Smoothed RTT (None before the first sample).
    pub srtt: Option<Duration>,
    /// RTT variation.
    pub rttvar: Duration,
    /// Current retransmission timeout, backoff included.
    pub rto: Duration,
    /// Congestion window in bytes.
    pub cwnd: usize,
    /// Slow-start threshold in bytes (`usize::MAX` until the first loss).
    pub ssthresh: usize,
    /// Segments retransmitted (timeouts, fast retransmits, SYN retries).
    pub retransmits: u64,
    /// Retransmission timer expirations.
    pub timeouts: u64,
    /// Fast retransmits (entries into fast recovery, NewReno partial-ACK retransmits, and with
    /// SACK the segment at SND.UNA sent again when its retransmission was lost).
    pub fast_retransmits: u64,
    /// Fast recovery episodes entered (Linux's `TCPSackRecovery` and `TCPRenoRecovery`), each a
    /// window reduction unless it continues an ECN reduction under way.
    pub recoveries: u64,
    /// Duplicate ACKs received (RFC 5681 definition).
    pub dup_acks: u64,
    /// Payload bytes sent for the first time.
    pub bytes_out: u64,
    /// Payload bytes received in order.
    pub bytes_in: u64,
    /// Segments emitted.
    pub segments_out: u64,
    /// Segments handled.
    pub segments_in: u64,
    /// RFC 5961 challenge ACKs sent (for an in-window RST or SYN, or an unacceptable ACK).
    pub challenge_acks: u64,
    /// Challenge ACKs not sent: over [`Config::challenge_ack_limit`] per second (RFC 5961 §7).
    pub challenge_acks_suppressed: u64,
    /// Payload bytes per segment we send now (the peer's MSS, less the options we carry).
    pub send_mss: usize,
    /// The MSS we announced.
    pub announced_mss: usize,
    /// The largest payload the peer sent in one segment, at most the MSS we announced (536, the
    /// RFC 9293 default, before any): Linux's estimate of the peer's MSS (`tcpi_rcv_mss`).
    pub recv_mss: usize,
    /// Bytes sent and not yet cumulatively acknowledged (SND.MAX - SND.UNA, SYN and FIN included).
    pub unacked_bytes: usize,
    /// Of those, bytes the peer acknowledged selectively (SACK).
    pub sacked_bytes: usize,
    /// Of those, bytes the SACK scoreboard deems lost (RFC 6675 IsLost).
    pub lost_bytes: usize,
    /// In fast recovery now.
    pub in_recovery: bool,
    /// Reducing the window for an ECN echo by PRR now ([`Config::ecn_prr`]; Linux's CWR state).
    pub cwr: bool,
    /// While PRR paces sending (fast recovery, or [`cwr`](Self::cwr)): RFC 9937's cwnd = pipe +
    /// sndcnt, the flight plus what the last ACK still lets out, which is the congestion window
    /// Linux reports then ([`cwnd`](Self::cwnd) is ssthresh through a reduction).
    pub prr_window: Option<usize>,
    /// Duplicate ACKs (or SACKs) seen since the last advance of SND.UNA.
    pub dup_acks_now: u32,
    /// Tail loss probes sent ([`Config::tail_loss_probe`]).
    pub tail_loss_probes: u64,
    /// Tail loss probes that resent the last segment and repaired its loss (an ACK went past
    /// them without saying both copies arrived), each taken as a loss by the congestion control
    /// (Linux's `TCPLossProbeRecovery`).
    pub tlp_recoveries: u64,
    /// The largest reordering seen, in segments, at least DupThresh (3): how far below the
    /// highest delivered byte a delivered segment began (measured with [`Config::rack`];
    /// Linux's `tcpi_reordering`).
    pub reordering: usize,
    /// ACKs that delivered data below the highest byte delivered before them (measured with
    /// [`Config::rack`]; Linux's `tcpi_reord_seen`).
    pub reordering_events: u64,
    /// Both sides agreed to use ECN (RFC 3168; [`Config::ecn`]).
    pub ecn: bool,
    /// Data segments received marked CE (Congestion Experienced), on an ECN connection.
    pub ce_received: u64,
    /// Window reductions for an ECE from the peer (at most one per window of data).
    pub ecn_reductions: u64,
    /// Slow starts HyStart ended before a loss ([`Config::hystart`]).
    pub hystart_exits: u64,
    /// Restart windows taken after idle ([`Config::restart_after_idle`]).
    pub idle_restarts: u64,
    /// Data transmissions that waited for their departure time ([`Config::pacing`]).
    pub paced: u64,
    /// How long those waited in all: from the first time the pacing held one back to its
    /// departure time.
    pub pacing_wait: Duration,
    /// The rate the last paced transmission was paced at, in bytes per second (0: none yet).
    pub pacing_rate: u64,
    /// Segments taken by header prediction ([`Config::header_prediction`]), of
    /// [`segments_in`](Self::segments_in).
    pub predicted: u64,
    /// The receive buffer's size now: [`Config::recv_buffer`], or more once autotuning raised
    /// it ([`Config::recv_buffer_max`]).
    pub recv_buffer: usize,
    /// Times autotuning raised the receive buffer ([`Config::recv_buffer_max`]).
    pub recv_buffer_raises: u64,
    /// Out-of-order segments whose data was not kept because every range
    /// [`Config::max_ooo_ranges`] allows was taken by other holes (Linux's `TCPOFODrop`): the
    /// peer sends that data again.
    pub ooo_dropped: u64,
    /// D-SACKs sent ([`Config::dsack`]): ACKs that named a duplicate segment we received (each
    /// a retransmission the peer need not have sent, or a segment the network duplicated).
    pub dsacks_sent: u64,
    /// D-SACKs received (RFC 2883): ACKs whose first SACK block named data the peer received
    /// twice, i.e. a retransmission of ours that was spurious, or a duplicate the network made
    /// (Linux's `TCPDSACKRecv`). Each widens RACK's reordering window ([`Config::rack`];
    /// RFC 8985 §6.2 step 4), at most once a round trip.
    pub dsacks_received: u64,
    /// Window reductions undone because D-SACKs proved them spurious ([`Config::dsack_undo`];
    /// Linux's `TCPDSACKUndo`).
    pub dsack_undos: u64,
}

/// One segment to send, from [`Connection::poll_transmit`].
///
/// **Contract:** `repr` is the complete header (ports, flags, sequence and acknowledgment numbers,
/// window, options) with an empty payload; the payload is the first `payload_len` bytes of the
/// buffer passed to `poll_transmit`. [`segment`](Self::segment) joins the two into the
/// [`TcpRepr`] to emit from the connection's [`local`](Connection::local) to its
/// [`remote`](Connection::remote) address (which never change, so a `Transmit` does not carry
/// them: the two `SocketAddr`s would be 64 of its bytes, copied with every segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The header; its `payload` is empty.
    pub repr: TcpRepr<'static>,
    /// Payload bytes at the start of the caller's buffer.
    pub payload_len: usize,
    /// Send the segment as ECN-Capable Transport, ECT(0) in the IP header (RFC 3168 §5): new data
    /// on a connection that negotiated ECN. `false`: Not-ECT.
    pub ect: bool,
    /// A super-segment ([`Connection::set_super_segment_limit`]): the device cuts the payload
    /// into segments of this many bytes (the last may be shorter), each behind a copy of the
    /// header. 0: an ordinary segment.
    pub segment_size: u16,
}

impl Transmit {
    /// The segment, with its payload taken from `buf` (the buffer given to `poll_transmit`).
    /// A `buf` shorter than `payload_len` gives a shorter payload.
    #[must_use]
    pub fn segment<'a>(&self, buf: &'a [u8]) -> TcpRepr<'a> {
        TcpRepr { payload: &buf[..self.payload_len.min(buf.len())], ..self.repr }
    }
}

/// The reset answering `seg` when no connection wants it (RFC 9293 §3.10.7.1, CLOSED state, and
/// §3.5.2): none for a reset; `<SEQ=SEG.ACK><CTL=RST>` when it carries an ACK; else
/// `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`. Ports are swapped.
#[must_use]
pub fn reset_for(seg: &TcpRepr<'_>) -> Option<TcpRepr<'static>> {
    if seg.control == TcpControl::Rst {
        return None;
    }
    let base = TcpRepr {
        src_port: seg.dst_port,
        dst_port: seg.src_port,
        control: TcpControl::Rst,
        ..TcpRepr::default()
    };
    Some(match seg.ack_number {
        Some(ack) => TcpRepr { seq_number: ack, ..base },
        None => TcpRepr {
            seq_number: SeqNumber::new(0),
            ack_number: Some(seg.seq_number + seg.segment_len()),
            ..base
        },
    })
}

/// What a listener does with a segment for which no connection exists (RFC 9293 §3.10.7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenAction {
    /// Drop it silently (an RST, or a segment with neither SYN nor ACK).
    Ignore,
    /// Answer with this reset (any ACK).
    Reset(TcpRepr<'static>),
    /// A connection request: [`Connection::accept`] it (or queue it, or answer with a cookie).
    Accept,
}

/// The LISTEN-state processing of RFC 9293 §3.10.7.2.
#[must_use]
pub fn listen_reply(seg: &TcpRepr<'_>) -> ListenAction {
    match (seg.control, seg.ack_number) {
        (TcpControl::Rst, _) => ListenAction::Ignore,
        (_, Some(_)) => reset_for(seg).map_or(ListenAction::Ignore, ListenAction::Reset),
        (TcpControl::Syn, None) => ListenAction::Accept,
        _ => ListenAction::Ignore,
    }
}
