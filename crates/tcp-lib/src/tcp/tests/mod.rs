//! Tests of the connection core.
//!
//! * [`Script`] and the `send!`/`recv!` macros: inject exact segments into one connection and
//!   assert exactly what it answers (in the spirit of smoltcp's socket tests), with virtual time.
//! * `scripted`: every state transition and mechanism, segment by segment.
//! * `ecn`: Explicit Congestion Notification (RFC 3168): negotiation, ECT, ECE and CWR.
//! * `cubic`: Linux's RTO estimator and CUBIC arithmetic through a timeout; growth for
//!   SACKed data under reordering.
//! * `header_prediction`: the fast path for the next in-order segment sends what the general
//!   processing sends, segment for segment.
//! * `hystart`: HyStart ends slow start on a rising RTT or a long ACK train (Linux's), or
//!   slows it first (RFC 9406's HyStart++).
//! * `rack`: RACK time-based loss detection (RFC 8985 §6) and its reordering timer.
//! * `prr`: what each ACK of fast recovery sends (Proportional Rate Reduction, RFC 9937).
//! * `push`: where PSH goes, tcp-lib's rule against Linux's TSO packets.
//! * `pair`: two connections over an in-memory link with seeded faults (drop, duplicate,
//!   reorder, delay), every segment emitted and parsed through `wire` with checksums; bulk and
//!   proptest transfers.
//! * `fuzz`: random segments against a connection in each state never panic, and take the
//!   header-prediction fast path and the general path alike.
//! * `time_wait`: the compact TIME-WAIT record answers random segments as the connection does.
//! * `tracing`: the `tracing` events of loss recovery.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use super::{Config, Connection, State};
use crate::wire::{SeqNumber, TcpControl, TcpRepr};

/// Delivers one segment to a [`Script`].
macro_rules! send {
    ($s:expr, $repr:expr) => {
        $s.send(&$repr)
    };
}

/// Asserts exactly which segments a [`Script`] sends now.
macro_rules! recv {
    ($s:expr, [$($repr:expr),* $(,)?]) => {
        $s.expect(&[$($repr),*])
    };
}

mod autotune;
mod cubic;
mod dsack;
mod ecn;
mod fuzz;
mod header_prediction;
mod hystart;
mod idle_restart;
mod linux_profile;
mod pacing;
mod pair;
mod prr;
mod push;
mod rack;
mod rtt;
mod scripted;
mod time_wait;
pub(crate) mod tracing;

pub(super) const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
pub(super) const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 49500);
/// Our ISS.
pub(super) const LOCAL_SEQ: SeqNumber = SeqNumber::new(10_000);
/// The peer's ISS: just below the wrap, so every script crosses 2^32.
pub(super) const REMOTE_SEQ: SeqNumber = SeqNumber::new(u32::MAX - 20);

/// A segment from the peer at RCV.NXT = REMOTE_SEQ + 1 acknowledging our SYN.
pub(super) const SEND_TEMPL: TcpRepr<'static> = TcpRepr {
    src_port: REMOTE.port(),
    dst_port: LOCAL.port(),
    control: TcpControl::None,
    push: false,
    seq_number: SeqNumber::new(REMOTE_SEQ.get().wrapping_add(1)),
    ack_number: Some(SeqNumber::new(LOCAL_SEQ.get() + 1)),
    window_len: 256,
    ece: false,
    cwr: false,
    urgent_pointer: None,
    max_seg_size: None,
    window_scale: None,
    sack_permitted: false,
    sack_blocks: crate::wire::tcp::SackBlocks::new(),
    timestamp: None,
    payload: &[],
};

/// A segment from us, right after the handshake, with the whole 64-byte window open.
pub(super) const RECV_TEMPL: TcpRepr<'static> = TcpRepr {
    src_port: LOCAL.port(),
    dst_port: REMOTE.port(),
    control: TcpControl::None,
    push: false,
    seq_number: SeqNumber::new(LOCAL_SEQ.get() + 1),
    ack_number: Some(SeqNumber::new(REMOTE_SEQ.get().wrapping_add(1))),
    window_len: 64,
    ece: false,
    cwr: false,
    urgent_pointer: None,
    max_seg_size: None,
    window_scale: None,
    sack_permitted: false,
    sack_blocks: crate::wire::tcp::SackBlocks::new(),
    timestamp: None,
    payload: &[],
};

/// The configuration scripts use unless they say otherwise: 64-byte buffers, no options but MSS,
/// immediate ACKs, 1 s RTO, MSL 30 s.
pub(super) fn script_config() -> Config {
    Config {
        send_buffer: 64,
        recv_buffer: 64,
        window_scaling: false,
        timestamps: false,
        sack: false,
        delayed_ack: None,
        ..Config::default()
    }
}

/// The instant every script starts at (virtual time runs from it): two scripts built the same
/// way are then the same, instants included, and can be compared step by step.
pub(super) fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// One connection driven by hand in virtual time.
pub(super) struct Script {
    pub(super) conn: Connection,
    pub(super) base: Instant,
    pub(super) now: Instant,
    /// Segments sent while [`advance`](Self::advance) ran the timers.
    pending: Vec<Sent>,
}

/// A segment that the connection sent, with its payload owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Sent {
    pub(super) repr: TcpRepr<'static>,
    pub(super) payload: Vec<u8>,
    /// Sent as ECN-capable (ECT(0) in the IP header).
    pub(super) ect: bool,
}

impl Sent {
    pub(super) fn repr(&self) -> TcpRepr<'_> {
        TcpRepr { payload: &self.payload, ..self.repr }
    }
}

impl Script {
    pub(super) fn new(conn: Connection, base: Instant) -> Self {
        Self { conn, base, now: base, pending: Vec::new() }
    }

    /// A passive open with `config` from a SYN with these options; the SYN-ACK is not consumed.
    pub(super) fn accept_with(config: Config, syn: TcpRepr<'_>) -> Self {
        let base = epoch();
        let conn = Connection::accept(config, LOCAL, REMOTE, &syn, LOCAL_SEQ, base).expect("a SYN");
        Self::new(conn, base)
    }

    /// Time since the script began.
    pub(super) fn elapsed(&self) -> Duration {
        self.now - self.base
    }

    /// Delivers a segment.
    pub(super) fn send(&mut self, repr: &TcpRepr<'_>) {
        self.conn.handle_segment(self.now, repr);
    }

    /// Delivers a segment whose IP header was marked CE (Congestion Experienced).
    pub(super) fn send_ce(&mut self, repr: &TcpRepr<'_>) {
        self.conn.handle_segment_ecn(self.now, repr, true, |_| 0);
    }

    /// Advances virtual time by `d`, running the timers that fall due on the way, each followed
    /// by `poll_transmit` as the contract says; what they send waits for the next
    /// [`drain`](Self::drain).
    pub(super) fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        let mut fired = 0;
        while let Some(t) = self.conn.poll_timeout().filter(|&t| t <= end) {
            fired += 1;
            assert!(fired < 100_000, "a timer fires without moving");
            self.now = self.now.max(t);
            self.conn.handle_timeout(self.now);
            let sent = self.transmits();
            self.pending.extend(sent);
        }
        self.now = end;
    }

    /// Everything the connection sent during [`advance`](Self::advance) and sends now.
    pub(super) fn drain(&mut self) -> Vec<Sent> {
        let mut out = std::mem::take(&mut self.pending);
        out.extend(self.transmits());
        out
    }

    fn transmits(&mut self) -> Vec<Sent> {
        let mut out = Vec::new();
        let mut buf = [0u8; 2048];
        while let Some(t) = self.conn.poll_transmit(self.now, &mut buf) {
            assert!(out.len() < 1000, "poll_transmit never stops");
            assert!(t.repr.payload.is_empty(), "the header carries no payload");
            out.push(Sent { repr: t.repr, payload: buf[..t.payload_len].to_vec(), ect: t.ect });
        }
        out
    }

    /// Asserts that the connection sends exactly `expected`.
    #[track_caller]
    pub(super) fn expect(&mut self, expected: &[TcpRepr<'_>]) {
        let got = self.drain();
        let got: Vec<_> = got.iter().map(Sent::repr).collect();
        assert_eq!(got, expected, "state {:?} at {:?}", self.conn.state(), self.elapsed());
    }

    /// Sends a SYN-ACK-less handshake completion: our SYN-ACK is consumed, the peer ACKs.
    pub(super) fn established() -> Self {
        let mut s = Self::syn_received();
        send!(s, TcpRepr { ack_number: Some(LOCAL_SEQ + 1), ..SEND_TEMPL });
        recv!(s, []);
        assert_eq!(s.conn.state(), State::Established);
        s
    }

    /// SYN-RECEIVED, the SYN-ACK consumed.
    pub(super) fn syn_received() -> Self {
        let mut s = Self::accept_with(script_config(), syn_from_peer());
        recv!(s, [syn_ack()]);
        assert_eq!(s.conn.state(), State::SynReceived);
        s
    }

    /// SYN-SENT, the SYN consumed.
    pub(super) fn syn_sent() -> Self {
        let base = epoch();
        let mut s = Self::new(Connection::connect(script_config(), LOCAL, REMOTE, LOCAL_SEQ, base), base);
        recv!(s, [our_syn()]);
        assert_eq!(s.conn.state(), State::SynSent);
        s
    }
}

/// The peer's SYN.
pub(super) fn syn_from_peer() -> TcpRepr<'static> {
    TcpRepr {
        control: TcpControl::Syn,
        seq_number: REMOTE_SEQ,
        ack_number: None,
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    }
}

/// Our SYN-ACK to [`syn_from_peer`] under [`script_config`].
pub(super) fn syn_ack() -> TcpRepr<'static> {
    TcpRepr { control: TcpControl::Syn, seq_number: LOCAL_SEQ, max_seg_size: Some(1460), ..RECV_TEMPL }
}

/// Our SYN under [`script_config`].
pub(super) fn our_syn() -> TcpRepr<'static> {
    TcpRepr {
        control: TcpControl::Syn,
        seq_number: LOCAL_SEQ,
        ack_number: None,
        max_seg_size: Some(1460),
        ..RECV_TEMPL
    }
}
