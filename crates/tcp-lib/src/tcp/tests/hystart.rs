//! HyStart ([`Config::hystart`]). Linux's: slow start ends when a round's RTT samples rise
//! clearly above the minimum (the delay detector) or when a train of closely spaced ACKs lasts
//! longer than half the minimum RTT, and not when the minimum itself drops; the scenarios follow
//! packetdrill's `cubic/cubic-hystart-delay-*.pkt`: MSS 1000, ten segments first, every segment
//! an ACK covers grows the window. HyStart++ (RFC 9406): Conservative Slow Start after a round
//! whose minimum RTT rose over the previous round's, back to slow start when it falls again,
//! congestion avoidance after five rounds of it.

use super::scripted::established_with;
use super::*;
use crate::tcp::{CongestionAlgorithm, HyStart};

const SEG: usize = 1000;

fn ours(n: usize) -> SeqNumber {
    LOCAL_SEQ + 1 + n
}

fn ack(segments: usize) -> TcpRepr<'static> {
    TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(ours(SEG * segments)),
        window_len: 60_000,
        ..SEND_TEMPL
    }
}

/// Established (MSS 1000, ten segments first) with `hystart`, 30 segments queued, the first ten
/// sent; ACKed whole after `rtt`, which sends the next twenty.
fn twenty_out(hystart: HyStart, congestion: CongestionAlgorithm, rtt: Duration) -> Script {
    let config = Config {
        send_buffer: 60_000,
        initial_window: Some(10),
        slow_start_segments_per_ack: 64,
        hystart,
        congestion,
        ..script_config()
    };
    let syn = TcpRepr { max_seg_size: Some(1000), ..syn_from_peer() };
    let mut s = established_with(config, syn, ack(0));
    assert_eq!(s.conn.send(&[1; 30 * SEG]), 30 * SEG);
    assert_eq!(s.drain().len(), 10);
    s.advance(rtt);
    send!(s, ack(10));
    assert_eq!(s.drain().len(), 20);
    assert_eq!(s.conn.stats().cwnd, 20 * SEG);
    s
}

/// (cwnd, ssthresh) in segments.
fn windows(s: &Script) -> (usize, usize) {
    let st = s.conn.stats();
    (st.cwnd / SEG, st.ssthresh.min(usize::MAX / SEG * SEG) / SEG)
}

const INFINITE: usize = usize::MAX / SEG;

#[test]
fn the_delay_detector_ends_slow_start_when_the_rtt_rises() {
    for congestion in [CongestionAlgorithm::Cubic, CongestionAlgorithm::LinuxCubic] {
        // Minimum RTT 200 ms; this round's samples 240, 241, ... ms: above 200 + 16 ms.
        let mut s = twenty_out(HyStart::Linux, congestion, Duration::from_millis(200));
        s.advance(Duration::from_millis(240));
        for i in 0..8 {
            send!(s, ack(12 + 2 * i));
            assert_eq!(windows(&s), (22 + 2 * i, INFINITE), "sample {} decides nothing", i + 1);
            s.advance(Duration::from_millis(1));
        }
        // The ninth sample: the round's minimum (240 ms) is too high; ssthresh = cwnd before
        // the ACK grows it, so it grows no more.
        send!(s, ack(28));
        assert_eq!(windows(&s), (36, 36), "{congestion:?}");
        assert_eq!(s.conn.stats().hystart_exits, 1);
        send!(s, ack(30));
        assert_eq!(windows(&s).1, 36);
    }
    // Without HyStart slow start goes on.
    let mut s = twenty_out(HyStart::Off, CongestionAlgorithm::LinuxCubic, Duration::from_millis(200));
    s.advance(Duration::from_millis(240));
    for i in 0..10 {
        send!(s, ack(12 + 2 * i));
        s.advance(Duration::from_millis(1));
    }
    assert_eq!(windows(&s), (40, INFINITE));
    assert_eq!(s.conn.stats().hystart_exits, 0);
}

#[test]
fn a_lower_minimum_late_in_the_round_does_not_end_slow_start() {
    // Samples 200..208 ms over a 200 ms minimum (below the 16 ms threshold), then one of 29 ms
    // (a segment sent just before): the minimum drops with it, and nothing fires.
    let mut s = twenty_out(HyStart::Linux, CongestionAlgorithm::LinuxCubic, Duration::from_millis(200));
    s.advance(Duration::from_millis(180));
    s.conn.send(&[2; 2 * SEG]);
    assert_eq!(s.drain().len(), 0, "the window is full");
    s.advance(Duration::from_millis(20));
    for i in 0..9 {
        send!(s, ack(12 + 2 * i));
        s.drain();
        s.advance(Duration::from_millis(1));
    }
    assert_eq!(windows(&s), (38, INFINITE));
    send!(s, ack(30));
    assert_eq!(windows(&s), (40, INFINITE));
    assert_eq!(s.conn.stats().hystart_exits, 0);
}

#[test]
fn an_ack_train_longer_than_half_the_minimum_rtt_ends_slow_start() {
    // Minimum RTT 20 ms. The twenty segments come back one per millisecond from 20 ms on: the
    // samples rise by 1 ms each (never 4 ms above the minimum in the first nine), but the train
    // outlasts (20 ms + the offload allowance) / 2.
    let mut s = twenty_out(HyStart::Linux, CongestionAlgorithm::LinuxCubic, Duration::from_millis(20));
    s.advance(Duration::from_millis(20));
    let mut exit_at = None;
    for i in 0..20 {
        send!(s, ack(11 + i));
        s.drain();
        if exit_at.is_none() && s.conn.stats().hystart_exits == 1 {
            exit_at = Some(i);
        }
        s.advance(Duration::from_millis(1));
    }
    // The train started with the round's first ACK (i = 0): 11 ms later is past 10.5 ms.
    assert_eq!(exit_at, Some(11));
    let (cwnd, ssthresh) = windows(&s);
    assert_eq!(ssthresh, 31, "cwnd when the train ended slow start");
    assert!(cwnd < 40, "congestion avoidance since: {cwnd}");
}

/// A bulk sender with HyStart++ whose peer ACKs every segment, one round trip at a time: each
/// round, everything in flight left together and is ACKed `rtt` later, segment by segment.
struct Rounds {
    s: Script,
    acked: usize,
    sent: usize,
}

impl Rounds {
    fn new(congestion: CongestionAlgorithm) -> Self {
        let config = Config {
            send_buffer: 2_000_000,
            window_scaling: true,
            initial_window: Some(10),
            slow_start_segments_per_ack: 64,
            hystart: HyStart::Rfc9406,
            congestion,
            ..script_config()
        };
        let syn = TcpRepr { max_seg_size: Some(1000), window_scale: Some(7), ..syn_from_peer() };
        let mut s = established_with(config, syn, ack(0));
        assert_eq!(s.conn.send(&[1; 2_000_000]), 2_000_000);
        let sent = s.drain().len();
        assert_eq!(sent, 10);
        Self { s, acked: 0, sent }
    }

    /// One round at `rtt`; the window (bytes) before its first ACK.
    fn round(&mut self, rtt: Duration) -> usize {
        let before = self.s.conn.stats().cwnd;
        self.s.advance(rtt);
        for _ in self.acked..self.sent {
            self.acked += 1;
            send!(self.s, ack(self.acked));
            self.sent += self.s.drain().len();
        }
        before
    }

    fn windows(&self) -> (usize, usize) {
        let st = self.s.conn.stats();
        (st.cwnd, st.ssthresh)
    }
}

#[test]
fn hystart_plus_plus_enters_conservative_slow_start_and_resumes_when_the_rtt_falls_back() {
    let ms = Duration::from_millis;
    for congestion in
        [CongestionAlgorithm::NewReno, CongestionAlgorithm::Cubic, CongestionAlgorithm::LinuxCubic]
    {
        let mut r = Rounds::new(congestion);
        r.round(ms(100));
        r.round(ms(100));
        assert_eq!(r.windows(), (40 * SEG, usize::MAX), "{congestion:?}: slow start");
        // 120 ms >= 100 + 100 / 8: from the eighth sample of the round on, a quarter of the growth.
        r.round(ms(120));
        assert_eq!(r.windows().0 / SEG, 40 + 7 + 33 / 4, "{congestion:?}: CSS");
        assert_eq!(r.windows().1, usize::MAX, "CSS is not congestion avoidance");
        // The next round's minimum (100 ms) is below the one that started CSS: the exit was
        // spurious, and slow start resumes at its eighth sample.
        r.round(ms(100));
        assert_eq!(r.windows().0 / SEG, 105, "{congestion:?}: seven quarters, then 48 whole segments");
        assert_eq!(r.s.conn.stats().hystart_exits, 0);
    }
}

#[test]
fn hystart_plus_plus_ends_slow_start_after_five_conservative_rounds() {
    let ms = Duration::from_millis;
    let mut r = Rounds::new(CongestionAlgorithm::NewReno);
    r.round(ms(100));
    r.round(ms(100));
    r.round(ms(120));
    for _ in 0..4 {
        r.round(ms(120));
        assert_eq!(r.windows().1, usize::MAX, "still in CSS");
    }
    // The fifth round boundary in CSS: ssthresh = cwnd at its first ACK.
    let before = r.round(ms(120));
    assert_eq!(r.windows().1, before);
    assert_eq!(r.s.conn.stats().hystart_exits, 1);
    // Congestion avoidance since: about one segment per round, where CSS grew a quarter of one
    // per ACK (over 50 here).
    let (cwnd, _) = r.windows();
    r.round(ms(120));
    assert!(r.windows().0 - cwnd <= 2 * SEG, "{:?} from {cwnd}", r.windows());
}
