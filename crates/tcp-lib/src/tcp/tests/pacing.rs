//! Pacing ([`Config::pacing`]), after packetdrill's `slow_start/slow-start-fq-ack-per-2pkt.pkt`
//! and `cubic/cubic-bulk-166k-idle-restart.pkt`, which run Linux under the `fq` qdisc: each TSO
//! packet leaves at its earliest departure time, and the pacing deadline is a timer.

use std::time::{Duration, Instant};

use super::{LOCAL, LOCAL_SEQ, REMOTE, REMOTE_SEQ, SEND_TEMPL, syn_from_peer};
use crate::tcp::{Config, Connection, Pacing, Push};
use crate::wire::TcpRepr;

/// The configuration packetdrill's shim gives a Linux-like connection ([`Config::linux`] with
/// the scripts' `defaults.sh`), with `min_tso_segs` and pacing as a script sets them.
fn linux(min_tso_segs: u16, pacing: Option<Pacing>) -> Config {
    Config {
        send_buffer: 4_000_000,
        recv_buffer: 540_000,
        rcv_wscale: Some(8),
        restart_after_idle: false,
        push: Push::Linux { min_tso_segs },
        pacing,
        ..Config::linux()
    }
}

/// A data segment that left: when (since the SYN), its first byte (0: the first byte of data),
/// its length, and PSH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Departure {
    at: Duration,
    start: usize,
    len: usize,
    push: bool,
}

/// One passive connection driven on virtual time, the stack's contract kept: every timer that
/// falls due runs at its instant, each input and timer followed by `poll_transmit` until `None`.
struct Flow {
    conn: Connection,
    base: Instant,
    now: Instant,
    sent: Vec<Departure>,
}

impl Flow {
    /// The peer's SYN (MSS `mss`, SACK, window scale 10) at 0, its ACK of our SYN-ACK at
    /// `rtt`.
    fn open(config: Config, mss: u16, rtt: Duration) -> Self {
        let base = Instant::now();
        let syn = TcpRepr {
            max_seg_size: Some(mss),
            sack_permitted: true,
            window_scale: Some(10),
            ..syn_from_peer()
        };
        let conn = Connection::accept(config, LOCAL, REMOTE, &syn, LOCAL_SEQ, base).expect("a SYN");
        let mut flow = Self { conn, base, now: base, sent: Vec::new() };
        flow.drain();
        flow.at(rtt);
        flow.ack(0);
        flow
    }

    fn drain(&mut self) {
        let mut buf = vec![0u8; 65_536];
        let mut n = 0;
        while let Some(t) = self.conn.poll_transmit(self.now, &mut buf) {
            n += 1;
            assert!(n < 10_000, "poll_transmit never stops");
            if t.payload_len > 0 {
                self.sent.push(Departure {
                    at: self.now - self.base,
                    start: usize::try_from(t.repr.seq_number - (LOCAL_SEQ + 1)).unwrap(),
                    len: t.payload_len,
                    push: t.repr.push,
                });
            }
        }
    }

    /// Runs the clock to `t` since the SYN, every timer at its instant.
    fn at(&mut self, t: Duration) {
        let end = self.base + t;
        while let Some(due) = self.conn.poll_timeout().filter(|&d| d <= end) {
            assert!(due >= self.now, "a timer in the past");
            self.now = due;
            self.conn.handle_timeout(due);
            self.drain();
        }
        self.now = end;
        self.drain();
    }

    /// The peer acknowledges `bytes` of data (window 514 << 10).
    fn ack(&mut self, bytes: usize) {
        let ack = TcpRepr {
            seq_number: REMOTE_SEQ + 1,
            ack_number: Some(LOCAL_SEQ + 1 + bytes),
            window_len: 514,
            ..SEND_TEMPL
        };
        self.conn.handle_segment(self.now, &ack);
        self.drain();
    }

    fn write(&mut self, len: usize) {
        assert_eq!(self.conn.send(&vec![7; len]), len);
        self.drain();
    }

    fn cwnd(&self, mss: usize) -> usize {
        self.conn.stats().cwnd / mss
    }
}

const MS: Duration = Duration::from_millis(1);

/// `cubic/cubic-bulk-166k-idle-restart.pkt`: the peer acknowledges two 1000-byte segments every
/// 100 ms (166 kbit/s); 40 000 bytes, then after 4 s of idle 160 000 more. The congestion
/// window after each ten ACKs of the second write.
fn bulk_after_idle(pacing: Option<Pacing>) -> Vec<usize> {
    let mut f = Flow::open(linux(4, pacing), 1000, 100 * MS);
    f.write(40_000);
    let mut t = 100 * MS;
    let mut acked = 0;
    let mut ack_at = |f: &mut Flow, t: &mut Duration| {
        *t += 100 * MS;
        f.at(*t);
        acked += 2000;
        f.ack(acked);
    };
    for _ in 0..20 {
        ack_at(&mut f, &mut t);
    }
    assert_eq!(f.cwnd(1000), 48, "HyStart ends slow start at 48 segments");
    t += 4000 * MS;
    f.at(t);
    f.write(160_000);
    (0..4)
        .map(|_| {
            for _ in 0..10 {
                ack_at(&mut f, &mut t);
            }
            f.cwnd(1000)
        })
        .collect()
}

#[test]
fn after_idle_a_paced_window_grows_only_once_it_is_used() {
    // Linux under fq: the window of 48 segments goes out paced at 120 % of cwnd per smoothed RTT
    // (about 0.8 s by then, the RTT of every ACK before the idle time), so the first ten ACKs find
    // the flight below cwnd and grow nothing (RFC 7661, `tcp_is_cwnd_limited`); then CUBIC's
    // curve, from the restart: the script's 48, 49, 52, 58.
    assert_eq!(bulk_after_idle(Some(Pacing::LINUX)), [48, 49, 52, 58]);
    // Unpaced, the whole window leaves at once and the first ten ACKs grow it already.
    assert_eq!(bulk_after_idle(None), [49, 50, 52, 58]);
}

/// `slow_start/slow-start-fq-ack-per-2pkt.pkt`: 40 000 bytes written when the handshake ends
/// (100 ms after the SYN), the peer acknowledging every second segment. The departures of the
/// TSO packets (two segments each, `tcp_min_tso_segs` = 2) that start at `starts`, in ms
/// since the write, and the flow.
fn slow_start_under_fq(pacing: Option<Pacing>) -> (Vec<Duration>, Flow) {
    let t0 = 100 * MS;
    let mut f = Flow::open(linux(2, pacing), 1460, t0);
    f.write(40_000);
    for (at, acked) in [(105, 2920), (108, 5840), (110, 8760), (119, 11_680), (120, 14_600)] {
        f.at(t0 + at * MS);
        f.ack(acked);
    }
    f.at(t0 + 135 * MS);
    let starts = [0, 2920, 5840, 8760, 11_680, 14_600, 17_520, 20_440, 23_360, 26_280];
    let departures = starts
        .iter()
        .map(|&s| {
            let d = f.sent.iter().find(|d| d.start == s).unwrap_or_else(|| panic!("{s} never left"));
            let second = f.sent.iter().find(|d| d.start == s + 1460).expect("its second segment");
            assert_eq!(
                (second.at, d.push, second.push),
                (d.at, false, true),
                "one TSO packet with PSH at {s}"
            );
            d.at - t0
        })
        .collect();
    (departures, f)
}

#[test]
fn under_fq_tso_packets_leave_at_their_departure_times() {
    let (got, f) = slow_start_under_fq(Some(Pacing::LINUX));
    // The script's times: the first ten segments unpaced, then each packet at its earliest
    // departure time, 2920 bytes at 200 % of cwnd per smoothed RTT after the one before
    // (packetdrill's default tolerance is 4 ms).
    let want = [0, 0, 0, 0, 0, 105, 109, 117, 124, 131];
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let w = w * MS;
        assert!(g.abs_diff(w) <= 4 * MS, "packet {i} left at {g:?}, Linux at {w:?} (all: {got:?})");
    }
    let st = f.conn.stats();
    assert!(st.paced >= 4 && st.pacing_wait >= 10 * MS, "{st:?}");
    // 20 segments per ~107 ms smoothed RTT at 200 %.
    assert!((500_000..600_000).contains(&st.pacing_rate), "{}", st.pacing_rate);

    // Unpaced, the ACK of 5840 lets the packet at 17520 go with the one before it, 4 ms early.
    let (got, f) = slow_start_under_fq(None);
    assert_eq!(got[6], 105 * MS);
    assert_eq!((f.conn.stats().paced, f.conn.stats().pacing_rate), (0, 0));
}

#[test]
fn a_held_packet_waits_on_a_timer_not_a_spin() {
    let t0 = 100 * MS;
    let mut f = Flow::open(linux(2, Some(Pacing::LINUX)), 1460, t0);
    f.write(40_000);
    f.at(t0 + 105 * MS);
    f.ack(2920);
    // Two packets fit the window; the second waits for its departure time, which is the
    // connection's next deadline (the RTO is 300 ms away).
    let sent = f.sent.len();
    let deadline = f.conn.poll_timeout().expect("the pacing timer");
    let wait = deadline - f.now;
    assert!(wait > 3 * MS && wait < 5 * MS, "{wait:?}");
    let mut buf = vec![0u8; 65_536];
    assert!(f.conn.poll_transmit(f.now + wait / 2, &mut buf).is_none(), "nothing before it");
    assert_eq!(f.conn.poll_timeout(), Some(deadline));
    f.at(deadline - f.base);
    assert_eq!(f.sent.len(), sent + 2, "both segments of the packet at the deadline");
    assert!(f.sent[sent..].iter().all(|d| d.at == deadline - f.base));
    // The window is full now: no pacing timer is left armed for nothing.
    assert!(f.conn.poll_timeout().is_some_and(|t| t > deadline + 100 * MS));
}

#[test]
fn linux_rto_samples_every_ack_without_timestamps() {
    // Ten segments leave 100 ms after the SYN; the peer acknowledges two of them 100, 200 and
    // 300 ms later. Linux's estimator takes each ACK's sample (its oldest segment: 100, 200,
    // 300 ms): SRTT 100 → 100 → 112.5 → 135.9 ms, the pacing rate following it down.
    let srtt_after = |config: Config| {
        let mut f = Flow::open(config, 1460, 100 * MS);
        f.write(14_600);
        for (at, acked) in [(200, 2920), (300, 5840), (400, 8760)] {
            f.at(at * MS);
            f.ack(acked);
        }
        f.conn.stats().srtt.expect("measured")
    };
    let linux = linux(2, None);
    assert_eq!(srtt_after(linux), Duration::from_nanos(135_937_500));
    // RFC 6298's one timed segment per round trip: the first, then none acknowledged yet.
    assert_eq!(srtt_after(Config { linux_rto: false, ..linux }), 100 * MS);
}
