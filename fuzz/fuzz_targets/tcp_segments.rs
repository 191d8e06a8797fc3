//! TCP segment sequences against one connection: a `tcp_lib::tcp::Connection` is opened actively
//! (SYN-SENT), passively (SYN-RECEIVED, from a SYN the listener logic accepts), by simultaneous open,
//! or driven to ESTABLISHED through a valid handshake either way, with a fuzzed configuration; then
//! a sequence of operations runs against it: structured segments whose sequence and acknowledgment
//! numbers are offsets from the connection's real RCV.NXT and SND.UNA/SND.MAX (as its own segments
//! tell them; flags, window, payload, MSS/WS/TS/SACK options), raw segment bytes through the `wire`
//! parser, bounded time advances, and application calls. Everything goes through the public API
//! only.
//!
//! After every input the transmits are drained (a bounded loop), and each one is emitted, parsed
//! back and checked. The invariants:
//! * nothing panics; `poll_transmit` stops; timers move forward (a bounded number fire per advance);
//! * every transmit emits to bytes that parse back (checksum verified) to the same segment, with
//!   every SACK block it carries fitting in the options; a segment is at most the MSS, or (with a
//!   super-segment limit, TSO) a super-segment of more than one cut of at most the MSS within it;
//! * the peer's stream is a function of the sequence number (`peer_byte`): every byte the
//!   application reads is the byte at its position in that stream, at a position the peer did
//!   send; every SACK block we send covers bytes the peer sent, above the cumulative ACK;
//! * likewise every payload byte we send (new or resent, copied or lent from prepared content) is
//!   the application's byte at that stream offset, within what the application queued; a FIN only
//!   after the application closed, right after the last byte;
//! * our ACK is exactly IRS + 1 + the bytes received in order (+ 1 once the peer's FIN is in), and
//!   the peer's FIN was taken at a position where the peer sent one;
//! * the advertised window never exceeds the free receive buffer; the buffers stay within the
//!   configured sizes; `send` and `recv` move exactly what fits; nothing is left to send once
//!   closed or in TIME-WAIT;
//! * the timestamp clock follows virtual time; TSecr only echoes a TSval the peer sent;
//! * the state moves only along the RFC 9293 state diagram (never LISTEN; CLOSED is final; an
//!   error only once closed, and it never changes);
//! * at the end, four hours of silence close every connection that is not idle in ESTABLISHED,
//!   CLOSE-WAIT or FIN-WAIT-2.
#![no_main]

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tcp_lib::stack::PreparedSegments;
use tcp_lib::tcp::{
    BufferBudget, Config, Connection, ConnectionError, ListenAction, State, Transmit, listen_reply, reset_for,
};
use tcp_lib::wire::tcp::{SackBlock, SackBlocks, Timestamp};
use tcp_lib::wire::{ChecksumPolicy, SeqNumber, TcpControl, TcpPacket, TcpRepr, checksum};

#[path = "tcp_segments/config.rs"]
mod config;
use config::ConfigIn;

const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 49500);
/// The caller buffer for `poll_transmit` (a shorter slice of it when the input says so).
const BUF_LEN: usize = 16 * 1024;
/// Timer expirations one advance may run.
const MAX_FIRES: u32 = 100_000;

/// The byte of the peer's stream at sequence number `seq`.
fn peer_byte(seq: SeqNumber) -> u8 {
    (seq.get().wrapping_mul(0x9e37_79b1) >> 24) as u8 ^ 0x5a
}

/// The byte of our application's stream at offset `offset`.
fn app_byte(offset: u64) -> u8 {
    ((offset as u32).wrapping_mul(0x85eb_ca6b) >> 24) as u8 ^ 0xa5
}

/// `base + off` in sequence space.
fn offset(base: SeqNumber, off: i64) -> SeqNumber {
    let off = off as i32;
    if off >= 0 { base + off as usize } else { base - off.unsigned_abs() as usize }
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    SynSent,
    SynReceived,
    SimultaneousOpen,
    EstablishedActive,
    EstablishedPassive,
}

/// The options of the peer's SYN (or SYN-ACK).
#[derive(Arbitrary, Debug)]
struct SynIn {
    mss: Option<u16>,
    window_scale: Option<u8>,
    sack_permitted: bool,
    tsval: Option<u32>,
    window: u16,
}

#[derive(Arbitrary, Debug)]
struct Setup {
    start: Start,
    config: ConfigIn,
    iss: u32,
    irs: u32,
    syn: SynIn,
    /// `poll_transmit` buffer length: the full one unless a shorter one is asked for.
    short_buf: Option<u16>,
    /// Drain with `poll_transmit_prepared` (payload in prepared content is lent).
    lend: bool,
    /// Let the connection send super-segments of up to this many payload bytes (TSO).
    super_segments: Option<u16>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Offset {
    Zero,
    Small(i8),
    Medium(i16),
    Large(i32),
}

impl Offset {
    fn get(self) -> i64 {
        match self {
            Self::Zero => 0,
            Self::Small(v) => i64::from(v),
            Self::Medium(v) => i64::from(v),
            Self::Large(v) => i64::from(v),
        }
    }
}

/// Where a segment's sequence number is taken from.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum SeqBase {
    /// The connection's RCV.NXT (the acknowledgment number of its latest segment).
    RcvNxt,
    /// The end of what the peer sent so far.
    PeerNxt,
    /// IRS + 1.
    Irs,
    /// Zero: the offset is the sequence number.
    Absolute,
}

/// Where an acknowledgment number (or a SACK block) is taken from.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum AckBase {
    /// The connection's SND.MAX (the end of its furthest segment).
    SndMax,
    /// SND.UNA as far as the peer knows (its highest acceptable ACK).
    SndUna,
    /// ISS + 1.
    Iss,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Ctl {
    None,
    Syn,
    Fin,
    Rst,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Window {
    Zero,
    One,
    Full,
    Raw(u16),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Len {
    Zero,
    Small(u8),
    Medium(u16),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum TsVal {
    /// The peer's clock, moved forward.
    Next(u8),
    /// Near the peer's clock, possibly behind (PAWS).
    Near(i8),
    Absolute(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum TsEcr {
    /// The connection's latest TSval.
    Echo,
    Zero,
    Absolute(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct SackIn {
    base: AckBase,
    off: Offset,
    len: u16,
}

#[derive(Arbitrary, Debug)]
struct Seg {
    seq_base: SeqBase,
    seq_off: Offset,
    ack: Option<(AckBase, Offset)>,
    control: Ctl,
    push: bool,
    ece: bool,
    cwr: bool,
    urgent: Option<u16>,
    window: Window,
    len: Len,
    mss: Option<u16>,
    window_scale: Option<u8>,
    sack_permitted: bool,
    ts: Option<(TsVal, TsEcr)>,
    sack: Vec<SackIn>,
}

#[derive(Arbitrary, Debug)]
struct RawSeg {
    bytes: Vec<u8>,
    /// Keep the parsed ports (a segment for another connection) instead of the connection's.
    keep_ports: bool,
    /// Read the sequence and acknowledgment numbers as signed offsets from RCV.NXT and SND.MAX.
    rebase: bool,
}

#[derive(Arbitrary, Debug)]
enum Advance {
    Millis(u8),
    Millis16(u16),
    Seconds(u8),
    /// Exactly to the next timer (if within an hour).
    ToNextTimer,
    /// One millisecond before it.
    BeforeNextTimer,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Segment(Seg),
    Raw(RawSeg),
    Advance(Advance),
    /// `handle_timeout` now, whether or not anything is due.
    Tick,
    /// The last segment again, this many times (duplicate ACKs, retransmissions).
    Repeat(u8),
    Send(u16),
    SendPrepared(u16),
    Recv(u16),
    Shutdown,
    Close,
    Abort,
    SetNodelay(bool),
    FragNeeded {
        seq: Offset,
        mtu: u16,
    },
    SetPathMtu(u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    setup: Setup,
    ops: Vec<Op>,
}

/// The transitions of the RFC 9293 state diagram (§3.3.2, figure 5) a `Connection` can make (it is
/// never in LISTEN; from SYN-RECEIVED a reset closes it; any state may close on a reset, an abort or
/// a timeout).
fn edge(from: State, to: State) -> bool {
    use State::*;
    if from == to {
        return true;
    }
    match from {
        Closed | Listen => false,
        SynSent => matches!(to, SynReceived | Established | Closed),
        SynReceived => matches!(to, Established | FinWait1 | Closed),
        Established => matches!(to, FinWait1 | CloseWait | Closed),
        FinWait1 => matches!(to, FinWait2 | Closing | TimeWait | Closed),
        FinWait2 => matches!(to, TimeWait | Closed),
        CloseWait => matches!(to, LastAck | Closed),
        Closing => matches!(to, TimeWait | Closed),
        LastAck => matches!(to, Closed),
        TimeWait => matches!(to, Closed),
    }
}

/// Whether `to` is reachable from `from` in at most `steps` transitions.
fn reachable(from: State, to: State, steps: u32) -> bool {
    use State::*;
    if edge(from, to) {
        return true;
    }
    steps > 1
        && [SynReceived, Established, FinWait1, FinWait2, CloseWait, Closing, LastAck, TimeWait]
            .into_iter()
            .any(|mid| mid != from && edge(from, mid) && reachable(mid, to, steps - 1))
}

/// States in which the peer's FIN has been received (and the connection still stands).
fn fin_in(state: State) -> bool {
    matches!(state, State::CloseWait | State::LastAck | State::Closing | State::TimeWait)
}

/// Disjoint, non-adjacent ranges of stream offsets, sorted.
#[derive(Default)]
struct Ranges(Vec<(i64, i64)>);

impl Ranges {
    fn add(&mut self, start: i64, end: i64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        self.0.retain(|&(a, b)| {
            if b < s || a > e {
                true
            } else {
                s = s.min(a);
                e = e.max(b);
                false
            }
        });
        let at = self.0.partition_point(|&(a, _)| a < s);
        self.0.insert(at, (s, e));
    }

    fn covers(&self, start: i64, end: i64) -> bool {
        start >= end || self.0.iter().any(|&(a, b)| a <= start && end <= b)
    }
}

/// What the checks know of reset and listener helpers for any segment.
fn check_helpers(seg: &TcpRepr<'_>) {
    let reset = reset_for(seg);
    if seg.control == TcpControl::Rst {
        assert!(reset.is_none(), "no reset answers a reset");
    } else {
        let r = reset.expect("a reset answers anything else");
        assert_eq!(r.control, TcpControl::Rst);
        assert_eq!((r.src_port, r.dst_port), (seg.dst_port, seg.src_port));
        assert!(r.payload.is_empty());
        match seg.ack_number {
            Some(ack) => assert_eq!((r.seq_number, r.ack_number), (ack, None)),
            None => assert_eq!(r.ack_number, Some(seg.seq_number + seg.segment_len())),
        }
    }
    match listen_reply(seg) {
        ListenAction::Ignore => {
            assert!(
                seg.control == TcpControl::Rst
                    || (seg.ack_number.is_none() && seg.control != TcpControl::Syn)
            );
        }
        ListenAction::Reset(r) => {
            assert!(seg.control != TcpControl::Rst && seg.ack_number.is_some());
            assert_eq!(Some(r), reset);
        }
        ListenAction::Accept => assert!(seg.control == TcpControl::Syn && seg.ack_number.is_none()),
    }
}

/// Emits `repr` from `src` to `dst`, parses it back (checksum verified) and checks it is the same
/// segment (less the SACK blocks the option space cannot hold). Returns the bytes.
fn round_trip(repr: &TcpRepr<'_>, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut TcpPacket::new_unchecked(&mut bytes[..]), src, dst);
    let packet = TcpPacket::new_checked(&bytes[..]).expect("emitted header length");
    let parsed = TcpRepr::parse(&packet, src, dst, ChecksumPolicy::Verify).expect("emitted segment parses");
    let mut expected = *repr;
    expected.sack_blocks.truncate(repr.sack_blocks_emitted());
    assert_eq!(parsed, expected);
    bytes
}

struct Harness {
    conn: Connection,
    config: Config,
    base: Instant,
    now: Instant,
    buf: Vec<u8>,
    buf_len: usize,
    lend: bool,
    /// The super-segment limit set on the connection (0: none).
    super_limit: usize,
    /// The last state seen.
    state: State,
    error: Option<ConnectionError>,

    // Our side, as its segments and the application calls tell it.
    iss: SeqNumber,
    /// RCV.NXT: the acknowledgment number of the connection's latest segment.
    rcv_nxt: SeqNumber,
    /// SND.MAX: the end of the connection's furthest segment.
    snd_max: SeqNumber,
    /// The connection's latest TSval.
    tsval: u32,
    /// TSval less the milliseconds of virtual time (the connection's timestamp offset).
    ts_offset: Option<u32>,
    /// Bytes the application queued (`send` and `send_prepared`).
    app_sent: u64,
    /// Bytes of prepared content queued (they are not bounded by the send buffer).
    prepared: usize,
    /// Bytes the application read.
    app_read: u64,
    shutdown: bool,
    closed: bool,
    /// What `send` takes at least, of what fits: all of it, or with a buffer budget, what the
    /// ring's guaranteed storage holds.
    send_floor: usize,

    // The peer.
    /// The peer's ISS, once the connection took a SYN.
    irs: Option<SeqNumber>,
    /// The IRS the setup chose (for offsets before the connection knows it).
    irs_hint: SeqNumber,
    /// The end of the peer's furthest segment.
    peer_nxt: SeqNumber,
    /// The highest acknowledgment the peer sent that the connection could accept.
    peer_acked: SeqNumber,
    peer_ts: u32,
    /// Every TSval the peer sent.
    peer_tsvals: HashSet<u32>,
    /// Sequence numbers of every FIN the peer sent.
    peer_fins: HashSet<u32>,
    /// Offsets from IRS + 1 of the data the peer sent.
    peer_data: Ranges,
    /// The last segment delivered, on the wire (payload included).
    last: Option<Vec<u8>>,
    /// The segment being delivered came in an IP header marked CE (congestion experienced).
    ce: bool,
}

impl Harness {
    fn new(mut conn: Connection, config: Config, setup: &Setup, base: Instant) -> Self {
        let budget = setup.config.budget();
        if let Some(budget) = &budget {
            conn.set_budget(budget);
        }
        conn.set_super_segment_limit(setup.super_segments.map_or(0, usize::from));
        let (iss, irs) = (SeqNumber::new(setup.iss), SeqNumber::new(setup.irs));
        Self {
            state: conn.state(),
            conn,
            config,
            send_floor: budget.map_or(usize::MAX, |_| BufferBudget::GUARANTEED.min(config.send_buffer)),
            base,
            now: base,
            buf: vec![0; BUF_LEN],
            buf_len: setup.short_buf.map_or(BUF_LEN, |n| usize::from(n).clamp(1, BUF_LEN)),
            lend: setup.lend,
            super_limit: setup.super_segments.map_or(0, usize::from),
            error: None,
            iss,
            rcv_nxt: irs + 1,
            snd_max: iss,
            tsval: 0,
            ts_offset: None,
            app_sent: 0,
            prepared: 0,
            app_read: 0,
            shutdown: false,
            closed: false,
            irs: None,
            irs_hint: irs,
            peer_nxt: irs + 1,
            peer_acked: iss,
            peer_ts: setup.syn.tsval.unwrap_or(0),
            peer_tsvals: HashSet::new(),
            peer_fins: HashSet::new(),
            peer_data: Ranges::default(),
            last: None,
            ce: false,
        }
    }

    fn irs_base(&self) -> SeqNumber {
        self.irs.unwrap_or(self.irs_hint)
    }

    /// The stream offset (from IRS + 1) of sequence number `seq`.
    fn peer_offset(&self, seq: SeqNumber) -> Option<i64> {
        self.irs.map(|irs| i64::from(seq - (irs + 1)))
    }

    /// Drains the transmits, checking each one; returns how many.
    fn drain(&mut self) -> usize {
        let limit = 4 * (self.config.send_buffer + self.prepared + 1) + 64;
        let mut buf = std::mem::take(&mut self.buf);
        let mut count = 0;
        loop {
            let out = &mut buf[..self.buf_len];
            let (t, lent) = if self.lend {
                match self.conn.poll_transmit_prepared(self.now, out) {
                    Some(x) => x,
                    None => break,
                }
            } else {
                match self.conn.poll_transmit(self.now, out) {
                    Some(t) => (t, None),
                    None => break,
                }
            };
            count += 1;
            assert!(count <= limit, "poll_transmit does not stop");
            let payload = match &lent {
                Some(slice) => {
                    assert_eq!(slice.len, t.payload_len, "the lent payload is the segment's");
                    if let Some(sum) = slice.sum() {
                        assert_eq!(sum, checksum::data(slice.bytes()), "a prepared sum");
                    }
                    slice.bytes()
                }
                None => {
                    assert!(t.payload_len <= self.buf_len);
                    &buf[..t.payload_len]
                }
            };
            self.check_transmit(&t, payload);
        }
        self.buf = buf;
        count
    }

    fn check_transmit(&mut self, t: &Transmit, payload: &[u8]) {
        assert!(t.repr.payload.is_empty(), "the header carries no payload");
        let repr = t.segment(payload);
        assert_eq!(repr.payload.len(), t.payload_len);
        assert_eq!((repr.src_port, repr.dst_port), (LOCAL.port(), REMOTE.port()));
        assert!(
            !t.ect || (t.payload_len > 0 && self.conn.stats().ecn),
            "ECT only on data of an ECN connection"
        );
        assert!(
            !repr.cwr || t.ect || repr.control == TcpControl::Syn,
            "CWR only on new data (or an ECN-setup SYN)"
        );
        assert!(
            !repr.ece || self.conn.stats().ecn || repr.control == TcpControl::Syn,
            "ECE only on an ECN connection"
        );
        assert_eq!(repr.sack_blocks_emitted(), repr.sack_blocks.len(), "SACK blocks that do not fit");
        round_trip(&repr, *LOCAL.ip(), *REMOTE.ip());
        let state = self.conn.state();
        if repr.control == TcpControl::Rst {
            assert!(payload.is_empty());
            return;
        }
        assert_ne!(state, State::Closed, "a closed connection sends only resets");
        let seq = repr.seq_number;
        self.snd_max = self.snd_max.max(seq + repr.segment_len());
        // At most the MSS; a super-segment: more than one cut of at most the MSS, within the limit.
        let (mss, cut) = (self.conn.send_mss().max(1), usize::from(t.segment_size));
        let ok = if cut == 0 { payload.len() <= mss } else { cut <= mss && payload.len() > cut };
        assert!(ok && payload.len() <= mss.max(self.super_limit), "a segment over the MSS or its limit");
        if let Some(ts) = repr.timestamp {
            let ms = ((self.now - self.base).as_millis() % (1 << 32)) as u32;
            let off = ts.tsval.wrapping_sub(ms);
            assert_eq!(*self.ts_offset.get_or_insert(off), off, "TSval follows the clock");
            self.tsval = ts.tsval;
        }
        let active_syn = repr.control == TcpControl::Syn && repr.ack_number.is_none();
        if let Some(ts) = repr.timestamp.filter(|_| !active_syn) {
            assert!(self.peer_tsvals.contains(&ts.tsecr), "TSecr {} echoes no TSval of the peer", ts.tsecr);
        }
        if repr.control == TcpControl::Syn {
            assert_eq!(seq, self.iss);
            assert!(payload.is_empty(), "no data on our SYN");
            assert!(matches!(state, State::SynSent | State::SynReceived), "a SYN in {state:?}");
            assert_eq!(repr.ack_number.is_some(), state == State::SynReceived);
            assert!(usize::from(repr.window_len) <= self.config.recv_buffer);
            assert!(repr.sack_blocks.is_empty());
            if active_syn {
                assert_eq!(repr.timestamp.is_some(), self.config.timestamps);
            }
        } else {
            assert!(state != State::SynSent, "only the SYN in SYN-SENT");
            assert_eq!(repr.timestamp.is_some(), self.conn.timestamps());
            let wscale = self.conn.window_scale().map_or(0, |(ours, _)| ours);
            let window = usize::from(repr.window_len) << wscale;
            let free = self.config.recv_buffer - self.conn.recv_queue();
            assert!(window <= free, "window {window} over the free buffer {free}");
        }
        let Some(ack) = repr.ack_number else {
            assert!(active_syn, "every segment but the first SYN carries an ACK");
            return;
        };
        let irs = self.irs.expect("an ACK before any SYN was taken");
        let expected = irs + 1 + self.conn.stats().bytes_in as usize + usize::from(fin_in(state));
        assert_eq!(ack, expected, "ACK is not RCV.NXT in {state:?}");
        self.rcv_nxt = ack;
        if repr.control != TcpControl::Syn {
            // Data: the application's bytes at their stream offsets.
            let start = seq - (self.iss + 1);
            if !payload.is_empty() || repr.control == TcpControl::Fin {
                assert!(start >= 0, "data before ISS + 1");
                let start = start as u64;
                assert!(start + payload.len() as u64 <= self.app_sent, "data the application never queued");
                for (i, &b) in payload.iter().enumerate() {
                    assert_eq!(b, app_byte(start + i as u64), "payload byte at offset {}", start + i as u64);
                }
            }
            if repr.control == TcpControl::Fin {
                assert!(self.shutdown, "a FIN before the application closed");
                assert_eq!(
                    seq + payload.len(),
                    self.iss + 1 + self.app_sent as usize,
                    "the FIN follows the last byte"
                );
            }
            // SACK blocks: above the cumulative ACK, within the buffer, over data the peer sent;
            // the first may be a D-SACK (RFC 2883) of data received before, below the ACK.
            for (i, block) in repr.sack_blocks.as_slice().iter().enumerate() {
                assert!(block.left < block.right, "SACK block {block:?} at ACK {ack:?}");
                if i == 0 && block.left < ack {
                    assert!(self.config.dsack && block.right <= ack, "D-SACK {block:?} at ACK {ack:?}");
                } else {
                    assert!(ack < block.left, "SACK block {block:?} at ACK {ack:?}");
                    assert!((block.right - ack) as usize <= self.config.recv_buffer);
                }
                let (l, r) = (block.left - (irs + 1), block.right - (irs + 1));
                assert!(self.peer_data.covers(i64::from(l), i64::from(r)), "SACK of data never sent");
            }
        }
    }

    /// The checks after an input that may have moved the state `steps` transitions at most.
    fn after(&mut self, steps: u32) {
        let (prev, state) = (self.state, self.conn.state());
        assert_ne!(state, State::Listen);
        assert!(reachable(prev, state, steps), "illegal transition {prev:?} -> {state:?}");
        self.state = state;
        let error = self.conn.error();
        if error.is_some() {
            assert_eq!(state, State::Closed, "an error but not closed");
        }
        if self.error.is_some() {
            assert_eq!(error, self.error, "the error changed");
        }
        self.error = error;
        assert_eq!(self.conn.is_closed(), state == State::Closed);
        let stats = self.conn.stats();
        // The peer's FIN: taken at a position where the peer sent one.
        if !fin_in(prev) && fin_in(state) {
            let irs = self.irs.expect("a FIN before any SYN");
            let at = irs + 1 + stats.bytes_in as usize;
            assert!(self.peer_fins.contains(&at.get()), "the peer sent no FIN at {at:?}");
        }
        // Buffers.
        let (recv_queue, send_queue) = (self.conn.recv_queue(), self.conn.send_queue());
        assert!(recv_queue <= self.config.recv_buffer, "receive buffer over its size");
        assert!(send_queue <= self.config.send_buffer + self.prepared, "send buffer over its size");
        assert!(self.app_read + recv_queue as u64 <= stats.bytes_in);
        if !self.closed {
            assert_eq!(self.app_read + recv_queue as u64, stats.bytes_in, "bytes received but not readable");
        }
        if matches!(state, State::Closed | State::TimeWait) {
            assert_eq!(send_queue, 0, "data left to send in {state:?}");
        }
        assert!(stats.bytes_out <= self.app_sent, "more bytes sent than queued");
        // Timers.
        match self.conn.poll_timeout() {
            Some(t) => {
                assert!(t >= self.now, "a timer in the past");
                assert_ne!(state, State::Closed, "a timer once closed");
            }
            None => assert!(state != State::TimeWait, "TIME-WAIT without its timer"),
        }
    }

    /// Advances virtual time by `d`, running the timers that fall due.
    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        let mut fired = 0;
        while let Some(t) = self.conn.poll_timeout().filter(|&t| t <= end) {
            fired += 1;
            assert!(fired < MAX_FIRES, "a timer fires without moving");
            self.now = self.now.max(t);
            self.conn.handle_timeout(self.now);
            self.drain();
            self.after(1);
        }
        self.now = end;
    }

    /// Delivers one segment from the peer.
    fn deliver(&mut self, seg: &TcpRepr<'_>) {
        check_helpers(seg);
        let before = self.conn.state();
        self.conn.handle_segment_ecn(self.now, seg, self.ce, |_| 0);
        let after = self.conn.state();
        if before == State::SynSent && !matches!(after, State::SynSent | State::Closed) {
            assert!(seg.control == TcpControl::Syn, "SYN-SENT left without a SYN");
            self.irs = Some(seg.seq_number);
        }
        // What the peer sent.
        if let Some(ts) = seg.timestamp {
            self.peer_tsvals.insert(ts.tsval);
        }
        if let Some(ack) = seg.ack_number
            && self.peer_acked < ack
            && ack <= self.snd_max
        {
            self.peer_acked = ack;
        }
        if seg.control != TcpControl::Rst {
            self.peer_nxt = self.peer_nxt.max(seg.seq_number + seg.segment_len());
        }
        let data_at = seg.seq_number + usize::from(seg.control == TcpControl::Syn);
        if seg.control == TcpControl::Fin {
            self.peer_fins.insert((data_at + seg.payload.len()).get());
        }
        if let Some(start) = self.peer_offset(data_at) {
            self.peer_data.add(start.max(0), start + seg.payload.len() as i64);
        }
        self.drain();
        self.after(2);
    }

    /// The peer's stream at sequence numbers `from..from + len`.
    fn peer_payload(from: SeqNumber, len: usize) -> Vec<u8> {
        (0..len).map(|i| peer_byte(from + i)).collect()
    }

    fn ack_base(&self, base: AckBase) -> SeqNumber {
        match base {
            AckBase::SndMax => self.snd_max,
            AckBase::SndUna => self.peer_acked,
            AckBase::Iss => self.iss + 1,
        }
    }

    fn segment(&mut self, s: &Seg) {
        let seq_base = match s.seq_base {
            SeqBase::RcvNxt => self.rcv_nxt,
            SeqBase::PeerNxt => self.peer_nxt,
            SeqBase::Irs => self.irs_base() + 1,
            SeqBase::Absolute => SeqNumber::new(0),
        };
        let seq = offset(seq_base, s.seq_off.get());
        let control = match s.control {
            Ctl::None => TcpControl::None,
            Ctl::Syn => TcpControl::Syn,
            Ctl::Fin => TcpControl::Fin,
            Ctl::Rst => TcpControl::Rst,
        };
        let len = match s.len {
            Len::Zero => 0,
            Len::Small(n) => usize::from(n),
            Len::Medium(n) => usize::from(n % 9001),
        };
        let payload = Self::peer_payload(seq + usize::from(control == TcpControl::Syn), len);
        let mut sack_blocks = SackBlocks::new();
        for b in s.sack.iter().take(SackBlocks::MAX) {
            let left = offset(self.ack_base(b.base), b.off.get());
            sack_blocks.push(SackBlock { left, right: left + usize::from(b.len) });
        }
        let ack_number = s.ack.map(|(b, off)| offset(self.ack_base(b), off.get()));
        let timestamp = s.ts.map(|(val, ecr)| {
            let tsval = match val {
                TsVal::Next(n) => {
                    self.peer_ts = self.peer_ts.wrapping_add(u32::from(n));
                    self.peer_ts
                }
                TsVal::Near(d) => self.peer_ts.wrapping_add(d as u32),
                TsVal::Absolute(v) => v,
            };
            let tsecr = match ecr {
                TsEcr::Echo => self.tsval,
                TsEcr::Zero => 0,
                TsEcr::Absolute(v) => v,
            };
            Timestamp { tsval, tsecr }
        });
        let repr = TcpRepr {
            src_port: REMOTE.port(),
            dst_port: LOCAL.port(),
            control,
            push: s.push,
            seq_number: seq,
            ack_number,
            window_len: match s.window {
                Window::Zero => 0,
                Window::One => 1,
                Window::Full => u16::MAX,
                Window::Raw(w) => w,
            },
            ece: s.ece,
            cwr: s.cwr,
            urgent_pointer: s.urgent,
            max_seg_size: s.mss,
            window_scale: s.window_scale,
            sack_permitted: s.sack_permitted,
            sack_blocks,
            timestamp,
            payload: &payload,
        };
        // Through the wire, as a stack would receive it; a CE mark in the IP header when the
        // urgent pointer's top bit is set.
        let bytes = round_trip(&repr, *REMOTE.ip(), *LOCAL.ip());
        self.ce = s.urgent.is_some_and(|u| u & 0x8000 != 0);
        self.deliver_bytes(&bytes);
        self.ce = false;
        self.last = Some(bytes);
    }

    /// Delivers a segment the harness emitted (it parses).
    fn deliver_bytes(&mut self, bytes: &[u8]) {
        let packet = TcpPacket::new_checked(bytes).expect("emitted header length");
        let parsed = TcpRepr::parse(&packet, *REMOTE.ip(), *LOCAL.ip(), ChecksumPolicy::Verify)
            .expect("it parsed once");
        self.deliver(&parsed);
    }

    fn raw(&mut self, r: &RawSeg) {
        let Ok(packet) = TcpPacket::new_checked(&r.bytes[..]) else { return };
        let Ok(mut repr) = TcpRepr::parse(&packet, *REMOTE.ip(), *LOCAL.ip(), ChecksumPolicy::Trust) else {
            return;
        };
        if !r.keep_ports {
            repr.src_port = REMOTE.port();
            repr.dst_port = LOCAL.port();
        }
        if r.rebase {
            repr.seq_number = offset(self.rcv_nxt, i64::from(repr.seq_number.get() as i32));
            repr.ack_number = repr.ack_number.map(|a| offset(self.snd_max, i64::from(a.get() as i32)));
        }
        if let Some(ts) = repr.timestamp {
            self.peer_ts = self.peer_ts.max(ts.tsval);
        }
        // The peer's stream, whatever the bytes said.
        let payload = Self::peer_payload(
            repr.seq_number + usize::from(repr.control == TcpControl::Syn),
            repr.payload.len(),
        );
        let repr = TcpRepr { payload: &payload, ..repr };
        self.last = Some(round_trip(&repr, *REMOTE.ip(), *LOCAL.ip()));
        self.deliver(&repr);
    }

    fn op(&mut self, op: &Op) {
        match op {
            Op::Segment(s) => self.segment(s),
            Op::Raw(r) => self.raw(r),
            Op::Advance(a) => {
                let next = self.conn.poll_timeout().map(|t| t.saturating_duration_since(self.now));
                let d = match a {
                    Advance::Millis(ms) => Duration::from_millis(u64::from(*ms)),
                    Advance::Millis16(ms) => Duration::from_millis(u64::from(*ms)),
                    Advance::Seconds(s) => Duration::from_secs(4 * u64::from(*s)),
                    Advance::ToNextTimer => next.unwrap_or_default(),
                    Advance::BeforeNextTimer => {
                        next.unwrap_or_default().saturating_sub(Duration::from_millis(1))
                    }
                };
                self.advance(d.min(Duration::from_secs(3600)));
            }
            Op::Repeat(n) => {
                if let Some(bytes) = self.last.take() {
                    for _ in 0..1 + n % 8 {
                        self.deliver_bytes(&bytes);
                    }
                    self.last = Some(bytes);
                }
            }
            Op::Tick => {
                self.conn.handle_timeout(self.now);
                self.drain();
                self.after(1);
            }
            Op::Send(n) => {
                let n = usize::from(*n);
                let data: Vec<u8> = (0..n as u64).map(|i| app_byte(self.app_sent + i)).collect();
                let (before, state) = (self.conn.send_queue(), self.conn.state());
                let k = self.conn.send(&data);
                assert!(k <= n);
                assert_eq!(self.conn.send_queue(), before + k);
                let may_send = !self.shutdown
                    && matches!(
                        state,
                        State::SynSent | State::SynReceived | State::Established | State::CloseWait
                    );
                if !may_send {
                    assert_eq!(k, 0, "send accepted data in {state:?} (shut down: {})", self.shutdown);
                } else if self.prepared == 0 {
                    let fits = n.min(self.config.send_buffer - before);
                    let least = fits.min(self.send_floor.saturating_sub(before));
                    assert!(k <= fits && k >= least, "send took {k} of {fits}");
                }
                self.app_sent += k as u64;
                self.drain();
                self.after(1);
            }
            Op::SendPrepared(n) => {
                let n = usize::from(*n % 8193);
                let data: Vec<u8> = (0..n as u64).map(|i| app_byte(self.app_sent + i)).collect();
                let mss = self.conn.send_mss();
                let segments = Arc::new(PreparedSegments::new(data, &[mss, mss.saturating_sub(12)]));
                let before = self.conn.send_queue();
                if self.conn.send_prepared(&segments) {
                    assert!(!self.shutdown, "prepared content queued after shutdown");
                    self.app_sent += n as u64;
                    self.prepared += n;
                    assert_eq!(self.conn.send_queue(), before + n);
                } else {
                    assert_eq!(self.conn.send_queue(), before);
                }
                self.drain();
                self.after(1);
            }
            Op::Recv(n) => {
                let n = usize::from(*n);
                let before = self.conn.recv_queue();
                let mut buf = vec![0u8; n];
                let k = self.conn.recv(&mut buf);
                assert_eq!(k, n.min(before), "recv returns what is buffered");
                assert_eq!(self.conn.recv_queue(), before - k);
                if k > 0 {
                    let irs = self.irs.expect("data before any SYN");
                    let start = self.app_read as i64;
                    assert!(self.peer_data.covers(start, start + k as i64), "data the peer never sent");
                    for (i, &b) in buf[..k].iter().enumerate() {
                        let seq = irs + 1 + (self.app_read as usize + i);
                        assert_eq!(b, peer_byte(seq), "byte {} of the stream", self.app_read as usize + i);
                    }
                }
                self.app_read += k as u64;
                self.drain();
                self.after(1);
            }
            Op::Shutdown => {
                let before = self.conn.state();
                self.conn.shutdown_write();
                self.shutdown = true;
                let expected = match before {
                    State::Established => State::FinWait1,
                    State::CloseWait => State::LastAck,
                    s => s,
                };
                assert_eq!(self.conn.state(), expected, "shutdown in {before:?}");
                self.drain();
                self.after(1);
            }
            Op::Close => {
                let before = self.conn.state();
                self.conn.close();
                self.shutdown = true;
                self.closed = true;
                if before == State::SynSent {
                    assert_eq!(self.conn.state(), State::Closed);
                }
                self.drain();
                self.after(1);
            }
            Op::Abort => {
                let before = self.conn.state();
                self.conn.abort();
                assert_eq!(self.conn.state(), State::Closed);
                if before != State::Closed {
                    assert_eq!(self.conn.error(), Some(ConnectionError::Aborted));
                }
                self.drain();
                self.after(1);
            }
            Op::SetNodelay(on) => {
                self.conn.set_nodelay(*on);
                self.drain();
                self.after(0);
            }
            Op::FragNeeded { seq, mtu } => {
                let (mss, pmtu) = (self.conn.send_mss(), self.conn.path_mtu());
                let shrank = self.conn.handle_frag_needed(offset(self.peer_acked, seq.get()), *mtu);
                self.check_mtu(mss, pmtu, shrank);
            }
            Op::SetPathMtu(mtu) => {
                let (mss, pmtu) = (self.conn.send_mss(), self.conn.path_mtu());
                let shrank = self.conn.set_path_mtu(usize::from(*mtu));
                self.check_mtu(mss, pmtu, shrank);
            }
        }
    }

    fn check_mtu(&mut self, mss: usize, pmtu: usize, shrank: bool) {
        assert!(self.conn.send_mss() >= 1);
        if shrank {
            assert!(self.conn.send_mss() < mss && self.conn.path_mtu() < pmtu, "the MSS did not shrink");
            assert!(self.conn.path_mtu() >= 68);
        } else {
            assert_eq!((self.conn.send_mss(), self.conn.path_mtu()), (mss, pmtu));
        }
        self.drain();
        self.after(0);
    }
}

/// The peer's SYN (`ack`: a SYN-ACK acknowledging it).
fn peer_syn(setup: &Setup, ack: Option<SeqNumber>, tsecr: u32) -> TcpRepr<'static> {
    TcpRepr {
        src_port: REMOTE.port(),
        dst_port: LOCAL.port(),
        control: TcpControl::Syn,
        seq_number: SeqNumber::new(setup.irs),
        ack_number: ack,
        window_len: setup.syn.window,
        max_seg_size: setup.syn.mss,
        window_scale: setup.syn.window_scale,
        sack_permitted: setup.syn.sack_permitted,
        timestamp: setup.syn.tsval.map(|tsval| Timestamp { tsval, tsecr }),
        // An odd window asks for ECN (a SYN: ECE and CWR) or accepts it (a SYN-ACK: ECE).
        ece: setup.syn.window & 1 == 1,
        cwr: setup.syn.window & 1 == 1 && ack.is_none(),
        ..TcpRepr::default()
    }
}

fn start(setup: &Setup) -> Harness {
    let config = setup.config.config();
    let base = Instant::now();
    let iss = SeqNumber::new(setup.iss);
    let active = matches!(setup.start, Start::SynSent | Start::SimultaneousOpen | Start::EstablishedActive);
    let mut h = if active {
        let conn = Connection::connect(config, LOCAL, REMOTE, iss, base);
        let mut h = Harness::new(conn, config, setup, base);
        assert_eq!(h.drain(), 1, "the SYN");
        h.after(0);
        assert_eq!(h.state, State::SynSent);
        h
    } else {
        let syn = peer_syn(setup, None, 0);
        assert_eq!(listen_reply(&syn), ListenAction::Accept);
        let conn = Connection::accept(config, LOCAL, REMOTE, &syn, iss, base).expect("a SYN");
        let mut h = Harness::new(conn, config, setup, base);
        h.irs = Some(syn.seq_number);
        h.peer_tsvals.extend(setup.syn.tsval);
        assert_eq!(h.drain(), 1, "the SYN-ACK");
        h.after(0);
        assert_eq!(h.state, State::SynReceived);
        h
    };
    match setup.start {
        Start::SynSent | Start::SynReceived => {}
        Start::SimultaneousOpen => {
            h.deliver(&peer_syn(setup, None, 0));
            assert_eq!(h.state, State::SynReceived, "simultaneous open");
        }
        Start::EstablishedActive => {
            let tsecr = h.tsval;
            h.deliver(&peer_syn(setup, Some(iss + 1), tsecr));
            assert_eq!(h.state, State::Established, "the SYN-ACK completes the handshake");
        }
        Start::EstablishedPassive => {
            let ack = TcpRepr {
                src_port: REMOTE.port(),
                dst_port: LOCAL.port(),
                seq_number: SeqNumber::new(setup.irs) + 1,
                ack_number: Some(iss + 1),
                window_len: setup.syn.window,
                timestamp: h.conn.timestamps().then_some(Timestamp { tsval: h.peer_ts, tsecr: h.tsval }),
                ..TcpRepr::default()
            };
            h.deliver(&ack);
            assert_eq!(h.state, State::Established, "the ACK completes the handshake");
        }
    }
    h
}

fuzz_target!(|input: Input| {
    let mut h = start(&input.setup);
    for op in &input.ops {
        h.op(op);
    }
    // Silence: every connection that is not idle and open ends by itself.
    h.advance(Duration::from_secs(4 * 3600));
    assert!(
        matches!(h.state, State::Established | State::CloseWait | State::FinWait2 | State::Closed),
        "still {:?} after four silent hours",
        h.state
    );
});
