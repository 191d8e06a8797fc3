//! The tests of [`Bbr`](super::Bbr): its model on a simulated path and on hand-built samples.

use std::collections::VecDeque;

use super::*;

/// The segment size of the test paths.
const MSS: usize = 1000;
/// The bottleneck: one segment per millisecond.
const PATH_BW: u64 = 1_000_000;
/// The propagation RTT (the minimum RTT is this plus one segment's transmission time).
const PATH_RTT: Duration = Duration::from_millis(20);
/// The initial window.
const IW: usize = 10 * MSS;

/// A segment on the path.
struct Seg {
    sent: Instant,
    ack_at: Instant,
    prior_delivered: u64,
    prior_time: Instant,
}

/// A path with a FIFO bottleneck of [`PATH_BW`] and a propagation RTT of [`PATH_RTT`], a
/// sender with unlimited data that sends MSS segments as BBR's window and pacing rate allow,
/// and one ACK per segment; every ACK gives BBR a rate sample (its interval from the
/// delivery that preceded the segment's sending to its ACK, as `tcp_rate.c`'s ACK phase).
struct Path {
    bbr: Bbr,
    start: Instant,
    now: Instant,
    queue: VecDeque<Seg>,
    in_flight: usize,
    delivered: u64,
    delivered_time: Instant,
    link_free: Instant,
    next_send: Instant,
}

impl Path {
    fn new() -> Self {
        let start = Instant::now();
        let mut bbr = Bbr::new();
        bbr.on_established(IW);
        Self {
            bbr,
            start,
            now: start,
            queue: VecDeque::new(),
            in_flight: 0,
            delivered: 0,
            delivered_time: start,
            link_free: start,
            next_send: start,
        }
    }

    /// The next event, a send or an ACK; the rate sample of an ACK.
    fn step(&mut self) -> Option<RateSample> {
        let send_at = self.next_send.max(self.now);
        let can_send = self.in_flight + MSS <= self.bbr.window();
        match self.queue.front().map(|s| s.ack_at) {
            Some(ack_at) if !can_send || ack_at <= send_at => Some(self.ack()),
            _ => {
                assert!(can_send, "the path stalled");
                self.send(send_at);
                None
            }
        }
    }

    fn send(&mut self, at: Instant) {
        self.now = at;
        let tx = Duration::from_nanos(MSS as u64 * 1_000_000_000 / PATH_BW);
        let depart = self.link_free.max(at) + tx;
        self.link_free = depart;
        self.queue.push_back(Seg {
            sent: at,
            ack_at: depart + PATH_RTT,
            prior_delivered: self.delivered,
            prior_time: self.delivered_time,
        });
        self.in_flight += MSS;
        let gap = self.bbr.pacing_rate().map_or(0, |rate| MSS as u64 * 1_000_000_000 / rate);
        self.next_send = at + Duration::from_nanos(gap);
    }

    fn ack(&mut self) -> RateSample {
        let seg = self.queue.pop_front().unwrap();
        self.now = seg.ack_at;
        self.delivered += MSS as u64;
        self.delivered_time = seg.ack_at;
        self.in_flight -= MSS;
        let rs = RateSample {
            delivered: self.delivered - seg.prior_delivered,
            interval: seg.ack_at - seg.prior_time,
            prior_delivered: seg.prior_delivered,
            total_delivered: self.delivered,
            app_limited: false,
            rtt: Some(seg.ack_at - seg.sent),
            newly_delivered: MSS,
            in_flight: self.in_flight,
            mss: MSS,
        };
        self.bbr.on_rate_sample(&rs, self.now);
        rs
    }

    /// The oldest segment in flight is lost: never delivered.
    fn lose_oldest(&mut self) {
        self.queue.pop_front().unwrap();
        self.in_flight -= MSS;
    }

    /// Runs until `until` after the start; `f` sees BBR after each sample, with the sample,
    /// its time, and the window and mode before it.
    fn run(&mut self, until: Duration, mut f: impl FnMut(&Bbr, &RateSample, Instant, usize, BbrMode)) {
        while self.now < self.start + until {
            let (cwnd, mode) = (self.bbr.window(), self.bbr.mode());
            if let Some(rs) = self.step() {
                f(&self.bbr, &rs, self.now, cwnd, mode);
            }
        }
    }
}

/// `bw · rtt · num / den` in bytes, rounded up, as the model's BDP arithmetic.
fn bdp(bbr: &Bbr, num: u128, den: u128) -> usize {
    let rtt = bbr.min_rtt().unwrap().as_nanos();
    usize::try_from((u128::from(bbr.bandwidth()) * rtt * num).div_ceil(1_000_000_000 * den)).unwrap()
}

/// `bw · num / den · 99 %`.
fn paced(bw: u64, num: u64, den: u64) -> u64 {
    bw * num * 99 / (den * 100)
}

/// A sample that starts a round (its transmission left after the last one was delivered),
/// measuring `rate` over 10 ms.
fn round_sample(total: &mut u64, rate: u64, app_limited: bool) -> RateSample {
    let prior = *total;
    *total += MSS as u64;
    RateSample {
        delivered: rate / 100,
        interval: Duration::from_millis(10),
        prior_delivered: prior,
        total_delivered: *total,
        app_limited,
        rtt: Some(Duration::from_millis(10)),
        newly_delivered: MSS,
        in_flight: 10 * MSS,
        mss: MSS,
    }
}

#[test]
fn startup_grows_by_delivered_then_drains_into_probe_bw() {
    let mut p = Path::new();
    // The plateau rule, counted here independently at each round start.
    let (mut full_bw, mut flat_rounds, mut full) = (0u64, 0u32, false);
    let (mut startup_rounds, mut grown, mut drain_seen, mut probe_bw_at) = (0, 0, false, None);
    p.run(Duration::from_secs(1), |bbr, rs, now, before, mode| {
        if mode == BbrMode::Startup && bbr.round_start && !full {
            startup_rounds += 1;
            if bbr.bandwidth() >= full_bw * 5 / 4 {
                (full_bw, flat_rounds) = (bbr.bandwidth(), 0);
            } else {
                flat_rounds += 1;
                full = flat_rounds == 3;
            }
        }
        match (mode, bbr.mode()) {
            (BbrMode::Startup, BbrMode::Startup) => {
                assert!(!full, "still in Startup after three flat rounds");
                let grows = before < bbr.target_cwnd() || rs.total_delivered < IW as u64;
                let want = if grows { before + rs.newly_delivered } else { before };
                assert_eq!(bbr.window(), want.max(4 * MSS), "Startup grows by what is delivered");
                grown += usize::from(grows);
            }
            (BbrMode::Startup, next) => {
                assert!(full, "left Startup before three flat rounds");
                assert!(matches!(next, BbrMode::Drain | BbrMode::ProbeBw), "{next:?}");
            }
            (BbrMode::Drain, BbrMode::Drain) => {
                drain_seen = true;
                assert!(rs.in_flight > bdp(bbr, 1, 1), "Drain lasts while the flight exceeds a BDP");
                assert_eq!(bbr.pacing_rate(), Some(paced(bbr.bandwidth(), 88, 256)), "1/2.885 x bw");
            }
            (BbrMode::Drain, next) => {
                assert_eq!(next, BbrMode::ProbeBw);
                assert!(rs.in_flight <= bdp(bbr, 1, 1), "ProbeBW once the flight is down to a BDP");
                probe_bw_at.get_or_insert(now);
            }
            _ => {}
        }
    });
    assert!(full && drain_seen && probe_bw_at.is_some(), "{full} {drain_seen} {probe_bw_at:?}");
    assert!(startup_rounds >= 6 && grown > 20, "{startup_rounds} rounds, {grown} growths");
    assert_eq!(p.bbr.mode(), BbrMode::ProbeBw);
    assert!(p.bbr.bandwidth().abs_diff(PATH_BW) < PATH_BW / 100, "{}", p.bbr.bandwidth());
    assert_eq!(p.bbr.min_rtt(), Some(PATH_RTT + Duration::from_millis(1)));
}

#[test]
fn probe_bw_window_and_pacing_cycle() {
    let mut p = Path::new();
    p.run(Duration::from_secs(1), |_, _, _, _, _| {});
    assert_eq!(p.bbr.mode(), BbrMode::ProbeBw);
    let mut seen = [false; 3];
    let (mut last_index, mut phase_start) = (p.bbr.cycle_index, p.bbr.cycle_stamp.unwrap());
    let mut phases = 0;
    let min_rtt = p.bbr.min_rtt().unwrap();
    p.run(Duration::from_secs(4), |bbr, rs, now, _, _| {
        assert_eq!(bbr.mode(), BbrMode::ProbeBw);
        let bw = bbr.bandwidth();
        assert_eq!(bw, PATH_BW, "the bottleneck rate, exactly");
        // On a path whose ACKs come evenly, the aggregation allowance is the one segment each
        // new epoch's first ACK brings.
        assert_eq!(bbr.window(), bdp(bbr, 2, 1) + MSS + 3 * MSS, "2 BDP + 1 MSS of aggregation + 3 MSS");
        let rate = bbr.pacing_rate().unwrap();
        let gain = [(5, 4), (3, 4), (1, 1)].iter().position(|&(n, d)| rate == paced(bw, n, d));
        let gain = gain.unwrap_or_else(|| panic!("pacing rate {rate} at bw {bw}"));
        seen[gain] = true;
        let want = [0, 1, 2, 2, 2, 2, 2, 2][bbr.cycle_index];
        assert_eq!(gain, want, "phase {}", bbr.cycle_index);
        if bbr.cycle_index != last_index {
            assert_eq!(bbr.cycle_index, (last_index + 1) % CYCLE_LEN, "phases in order");
            let full_length = now - phase_start > min_rtt;
            match last_index {
                // The probe lasts a min RTT and until the flight reached 5/4 BDP.
                0 => assert!(full_length && rs.in_flight >= bdp(bbr, 5, 4), "{:?}", now - phase_start),
                // The drain ends after a min RTT, or once the flight is down to a BDP.
                1 => assert!(full_length || rs.in_flight <= bdp(bbr, 1, 1)),
                _ => assert!(full_length),
            }
            (last_index, phase_start, phases) = (bbr.cycle_index, now, phases + 1);
        } else {
            assert!(
                !(bbr.cycle_index >= 2 && now - phase_start > min_rtt),
                "a phase at gain 1 lasts one min RTT"
            );
        }
    });
    assert_eq!(seen, [true; 3], "5/4, 3/4 and 1 x bw");
    // Eight phases of about one min RTT (21 ms) each: about 140 phases in three seconds.
    assert!((100..=145).contains(&phases), "{phases} phases");
    assert_eq!(p.bbr.window(), 2 * 21_000 + MSS + 3 * MSS);
}

#[test]
fn recovery_conserves_packets_then_restores_the_window() {
    let mut p = Path::new();
    p.run(Duration::from_secs(2), |_, _, _, _, _| {});
    assert_eq!(p.bbr.mode(), BbrMode::ProbeBw);
    let before = p.bbr.window();
    p.lose_oldest();
    p.bbr.on_enter_recovery(p.in_flight, MSS);
    assert_eq!(p.bbr.window(), before, "the window moves on the next sample");
    let (mut round_end, mut conserved, mut raised, mut last) = (None, 0, 0, 0);
    while conserved < 1000 {
        let Some(rs) = p.step() else { continue };
        let pipe = rs.in_flight + rs.newly_delivered;
        match round_end {
            None => {
                assert_eq!(p.bbr.window(), pipe, "the first sample: flight + delivered");
                assert!(p.bbr.window() < before);
                round_end = Some(rs.total_delivered);
                // The fast retransmission, sent whatever the window (RFC 6675 §5 step 4),
                // after what the window allows: the flight exceeds the window.
                p.send(p.now);
                p.send(p.now);
            }
            Some(end) if rs.prior_delivered < end => {
                assert_eq!(p.bbr.window(), last.max(pipe), "packet conservation");
                conserved += 1;
                raised += usize::from(pipe > last);
            }
            Some(_) => break,
        }
        last = p.bbr.window();
    }
    assert!((10..1000).contains(&conserved), "{conserved} samples in the first round");
    assert!(raised > 0, "the window followed the flight up");
    assert!(!p.bbr.packet_conservation, "conservation ends with the round");
    assert!(p.bbr.window() < before);
    p.bbr.on_exit_recovery();
    assert!(p.bbr.window() >= before, "{} < {before}: the prior window is back", p.bbr.window());
    let end = p.now + Duration::from_millis(500);
    p.run(end - p.start, |bbr, _, _, _, _| assert!(bbr.window() >= before));
    assert_eq!(p.bbr.window(), before);
}

/// A recovery that ends and starts again on one ACK is one recovery, as Linux's BBR sees the
/// connection's state once per ACK: the window stays, with no new round of packet conservation
/// (which would set it to the flight). On separate ACKs the new recovery conserves packets.
#[test]
fn a_recovery_ended_and_begun_on_one_ack_goes_on() {
    let mut p = Path::new();
    p.run(Duration::from_secs(2), |_, _, _, _, _| {});
    let before = p.bbr.window();
    p.lose_oldest();
    p.bbr.on_enter_recovery(p.in_flight, MSS);
    let mut round_end = None;
    loop {
        let Some(rs) = p.step() else { continue };
        p.bbr.on_ack_done();
        if rs.prior_delivered >= *round_end.get_or_insert(rs.total_delivered) {
            break;
        }
    }
    assert!(!p.bbr.packet_conservation, "the first round is over");
    let during = p.bbr.window();
    assert!(during < before);
    // One ACK covers the recovery point and marks new losses.
    p.bbr.on_exit_recovery();
    assert!(p.bbr.window() >= before, "the exit restores the window");
    p.bbr.on_enter_recovery(p.in_flight, MSS);
    p.bbr.on_ack_done();
    assert_eq!(p.bbr.window(), during, "the recovery goes on: its window");
    assert!(!p.bbr.packet_conservation && !p.bbr.recovery_start_pending, "no new conservation");
    // An end and a start on separate ACKs: a new recovery.
    p.bbr.on_exit_recovery();
    p.bbr.on_ack_done();
    assert!(p.bbr.window() >= before);
    p.bbr.on_enter_recovery(p.in_flight, MSS);
    assert!(p.bbr.packet_conservation && p.bbr.recovery_start_pending, "a new round of conservation");
}

#[test]
fn bandwidth_filter_keeps_the_max_of_ten_rounds() {
    let now = Instant::now();
    let mut bbr = Bbr::new();
    bbr.on_established(IW);
    let mut total = 0;
    for _ in 0..3 {
        bbr.on_rate_sample(&round_sample(&mut total, 1_000_000, false), now);
    }
    assert_eq!(bbr.bandwidth(), 1_000_000);
    bbr.on_rate_sample(&round_sample(&mut total, 4_000_000, false), now);
    assert_eq!(bbr.bandwidth(), 4_000_000);
    // Application-limited samples below the max do not lower it, however many rounds.
    let round = bbr.round_count;
    for _ in 0..20 {
        bbr.on_rate_sample(&round_sample(&mut total, 2_000_000, true), now);
        assert_eq!(bbr.bandwidth(), 4_000_000);
    }
    assert_eq!(bbr.round_count, round + 20);
    // One at or above it is taken.
    bbr.on_rate_sample(&round_sample(&mut total, 5_000_000, true), now);
    assert_eq!(bbr.bandwidth(), 5_000_000);
    // Within a round a lower sample changes nothing.
    let mut same_round = round_sample(&mut total, 3_000_000, false);
    same_round.prior_delivered = 0;
    bbr.on_rate_sample(&same_round, now);
    assert_eq!(bbr.bandwidth(), 5_000_000);
    // Lower samples: the max holds for the rest of ten rounds, then is forgotten.
    for i in 1..=10 {
        bbr.on_rate_sample(&round_sample(&mut total, 3_000_000, false), now);
        let want = if i < 10 { 5_000_000 } else { 3_000_000 };
        assert_eq!(bbr.bandwidth(), want, "round {i} after the max");
    }
}

#[test]
fn probe_rtt_after_ten_seconds() {
    let mut p = Path::new();
    let min_rtt = PATH_RTT + Duration::from_millis(1);
    let mut min_rtt_at = None;
    let (mut enter, mut low, mut exit) = (None, None, None);
    let mut before_probe = 0;
    p.run(Duration::from_secs(13), |bbr, rs, now, before, mode| {
        if rs.rtt == Some(min_rtt) {
            min_rtt_at.get_or_insert(now);
        }
        match (mode, bbr.mode()) {
            (BbrMode::ProbeBw, BbrMode::ProbeRtt) => {
                assert!(enter.is_none(), "once in 13 s");
                enter = Some(now);
                before_probe = before;
                assert_eq!(bbr.window(), 4 * MSS);
            }
            (BbrMode::ProbeRtt, BbrMode::ProbeRtt) => {
                assert_eq!(bbr.window(), 4 * MSS);
                if low.is_none() && rs.in_flight <= 4 * MSS {
                    low = Some((now, bbr.round_count));
                }
            }
            (BbrMode::ProbeRtt, next) => {
                assert_eq!(next, BbrMode::ProbeBw);
                let (low_at, low_round) = low.unwrap();
                assert!(now - low_at >= Duration::from_millis(200), "{:?}", now - low_at);
                assert!(bbr.round_count > low_round, "a round passed");
                assert!(bbr.window() >= before_probe, "the window comes back");
                assert_eq!(bbr.min_rtt_stamp, Some(now), "the estimate counts as fresh");
                exit = Some(now);
            }
            _ => {}
        }
    });
    let (first, enter, exit) = (min_rtt_at.unwrap(), enter.unwrap(), exit.unwrap());
    let since = enter - first;
    assert!(since > MIN_RTT_WINDOW && since < MIN_RTT_WINDOW + min_rtt, "{since:?}");
    assert!(exit - enter < Duration::from_millis(300), "{:?}", exit - enter);
    // The bandwidth estimate survived the small window; the window is the model's again.
    assert_eq!(p.bbr.bandwidth(), PATH_BW);
    assert_eq!(p.bbr.window(), 2 * 21_000 + MSS + 3 * MSS);
}

#[test]
fn rto_sets_one_segment_then_regrows_by_delivered() {
    let mut p = Path::new();
    p.run(Duration::from_secs(2), |_, _, _, _, _| {});
    let target = p.bbr.window();
    assert_eq!(target, 2 * 21_000 + MSS + 3 * MSS);
    p.bbr.on_rto(p.in_flight, MSS);
    assert_eq!(p.bbr.window(), MSS);
    assert!(p.bbr.full_bw_reached && p.bbr.full_bw == 0 && p.bbr.full_bw_count == 0);
    let (round, mut total, mut want) = (p.bbr.round_count, p.delivered, MSS);
    let mut steps = 0;
    while want < p.bbr.target_cwnd() {
        // The first delivers two segments: the window is at least four.
        let newly = if steps == 0 { 2 * MSS } else { 5 * MSS };
        let rs = RateSample {
            delivered: newly as u64,
            interval: Duration::from_millis(5),
            // The first was sent well before the RTO, in the current round.
            prior_delivered: if steps == 0 { total - 20 * MSS as u64 } else { total },
            total_delivered: total + newly as u64,
            app_limited: false,
            rtt: Some(Duration::from_millis(30)),
            newly_delivered: newly,
            in_flight: 0,
            mss: MSS,
        };
        total = rs.total_delivered;
        // ACKed at the bottleneck's rate (a segment a millisecond): no aggregation.
        let steps_ms = u64::try_from(steps).unwrap();
        p.bbr.on_rate_sample(&rs, p.now + Duration::from_millis(2 + 5 * steps_ms));
        want = (want + newly).min(p.bbr.target_cwnd()).max(4 * MSS);
        assert_eq!(p.bbr.window(), want);
        if steps == 0 {
            assert_eq!(p.bbr.round_count, round + 1, "the first sample after an RTO starts a round");
        }
        steps += 1;
    }
    assert!(steps > 5);
    assert_eq!(p.bbr.mode(), BbrMode::ProbeBw);
}

#[test]
fn invalid_samples_change_no_bandwidth() {
    let now = Instant::now();
    let mut bbr = Bbr::new();
    bbr.on_established(IW);
    let mut total = 0;
    let mut invalid = round_sample(&mut total, 50_000_000, false);
    invalid.interval = Duration::ZERO;
    bbr.on_rate_sample(&invalid, now);
    assert_eq!((bbr.bandwidth(), bbr.pacing_rate()), (0, None));
    assert_eq!(bbr.window(), IW + MSS, "the window still grows in Startup");
    bbr.on_rate_sample(&round_sample(&mut total, 1_000_000, false), now);
    assert_eq!(bbr.bandwidth(), 1_000_000);
    let pacing = bbr.pacing_rate();
    assert_eq!(pacing, Some(paced(1_000_000, 739, 256)), "high gain");
    let mut invalid = round_sample(&mut total, 50_000_000, false);
    invalid.interval = Duration::ZERO;
    bbr.on_rate_sample(&invalid, now);
    assert_eq!((bbr.bandwidth(), bbr.pacing_rate()), (1_000_000, pacing));
}

#[test]
fn min_rtt_filter() {
    let now = Instant::now();
    let ms = Duration::from_millis;
    let mut bbr = Bbr::default();
    bbr.on_delay_sample(ms(30), now);
    bbr.on_delay_sample(ms(40), now + ms(10));
    assert_eq!((bbr.min_rtt(), bbr.min_rtt_stamp), (Some(ms(30)), Some(now)));
    bbr.on_delay_sample(ms(20), now + ms(20));
    assert_eq!((bbr.min_rtt(), bbr.min_rtt_stamp), (Some(ms(20)), Some(now + ms(20))));
    // A delay sample never refreshes an expired estimate (the rate sample decides ProbeRTT).
    let late = now + ms(20) + MIN_RTT_WINDOW + ms(1);
    bbr.on_delay_sample(ms(25), late);
    assert_eq!(bbr.min_rtt(), Some(ms(20)));
    let mut total = 0;
    let mut rs = round_sample(&mut total, 1_000_000, false);
    rs.rtt = Some(ms(25));
    bbr.on_rate_sample(&rs, late);
    assert_eq!((bbr.min_rtt(), bbr.min_rtt_stamp), (Some(ms(25)), Some(late)));
    assert_eq!(bbr.mode(), BbrMode::ProbeRtt, "the expiry enters ProbeRTT");
}

#[test]
fn idle_restart_and_trait_constants() {
    let mut p = Path::new();
    p.run(Duration::from_secs(1), |_, _, _, _, _| {});
    assert_eq!(p.bbr.mode(), BbrMode::ProbeBw);
    // An expired min RTT: ProbeRTT on the next sample, but not right after idle, where the
    // sample's RTT (the queue drained while idle) is the fresh estimate.
    let late = p.bbr.min_rtt_stamp.unwrap() + MIN_RTT_WINDOW + Duration::from_millis(1);
    let mut total = p.delivered;
    let mut rs = round_sample(&mut total, PATH_BW, false);
    rs.rtt = Some(Duration::from_millis(30));
    let mut busy = p.bbr.clone();
    busy.on_rate_sample(&rs, late);
    assert_eq!(busy.mode(), BbrMode::ProbeRtt);
    let mut idle = p.bbr.clone();
    idle.on_idle_restart(Duration::from_secs(10), late);
    idle.on_rate_sample(&rs, late);
    assert_eq!((idle.mode(), idle.min_rtt()), (BbrMode::ProbeBw, rs.rtt));
    assert_eq!(idle.min_rtt_stamp, Some(late));
    // In ProbeBW the rate after idle is the estimate's (gain 1) until the next sample.
    p.bbr.cycle_index = 0;
    p.bbr.set_pacing_rate(p.bbr.pacing_gain());
    assert_eq!(p.bbr.pacing_rate(), Some(paced(PATH_BW, 5, 4)));
    p.bbr.on_idle_restart(Duration::from_secs(1), p.now);
    assert_eq!(p.bbr.pacing_rate(), Some(paced(PATH_BW, 1, 1)), "gain 1 after idle");
    let (cwnd, mut bbr) = (p.bbr.window(), p.bbr.clone());
    bbr.on_ack(10 * MSS, MSS, p.now, PATH_RTT);
    bbr.on_restart_window(MSS, MSS);
    bbr.exit_slow_start();
    bbr.set_slow_start_divisor(4);
    assert_eq!(bbr.window(), cwnd, "the window moves on rate samples only");
    assert_eq!(bbr.ssthresh(), usize::MAX);
    assert!(bbr.owns_recovery_window());
    assert_eq!(Bbr::default().pacing_rate(), None);
    assert_eq!((HIGH_GAIN, DRAIN_GAIN, PACING_GAINS[0], PACING_GAINS[1]), (739, 88, 320, 192));
}

#[test]
fn probe_rtt_waits_for_time_and_a_round() {
    let start = Instant::now();
    let ms = Duration::from_millis;
    let mut bbr = Bbr::new();
    bbr.on_established(IW);
    let mut total = 0;
    for i in 0..5 {
        bbr.on_rate_sample(&round_sample(&mut total, 1_000_000 << i, false), start);
    }
    let cwnd = bbr.window();
    assert!(cwnd > 4 * MSS);
    // Ten seconds later (no new minimum): ProbeRTT, four segments, the flight still high.
    let t = start + MIN_RTT_WINDOW + ms(1);
    let mut rs = round_sample(&mut total, 1_000_000, false);
    rs.rtt = Some(ms(50));
    bbr.on_rate_sample(&rs, t);
    assert_eq!((bbr.mode(), bbr.window(), bbr.probe_rtt_done), (BbrMode::ProbeRtt, 4 * MSS, None));
    assert!(!bbr.full_bw_reached);
    let startup_pacing = Some(paced(16_000_000, 739, 256));
    assert_eq!(bbr.pacing_rate(), startup_pacing, "before the pipe is full the rate never drops");
    // The flight falls to four segments: 200 ms and a round from now.
    let mut rs = round_sample(&mut total, 1_000_000, false);
    rs.in_flight = 4 * MSS;
    bbr.on_rate_sample(&rs, t + ms(10));
    assert_eq!(bbr.probe_rtt_done, Some(t + ms(210)));
    // 300 ms later, but the round is not over (a segment sent before it began).
    let mut rs = round_sample(&mut total, 1_000_000, false);
    rs.prior_delivered -= 2 * MSS as u64;
    rs.in_flight = 4 * MSS;
    bbr.on_rate_sample(&rs, t + ms(310));
    assert_eq!((bbr.mode(), bbr.window()), (BbrMode::ProbeRtt, 4 * MSS));
    // The round ends: back to Startup (the pipe was never full) with the window from before.
    let mut rs = round_sample(&mut total, 1_000_000, false);
    rs.in_flight = 4 * MSS;
    bbr.on_rate_sample(&rs, t + ms(320));
    assert_eq!(bbr.mode(), BbrMode::Startup);
    assert!(bbr.window() >= cwnd, "{} < {cwnd}", bbr.window());
    assert_eq!(bbr.min_rtt_stamp, Some(t + ms(320)));
}

#[test]
fn probe_bw_phase_rules() {
    let mut p = Path::new();
    p.run(Duration::from_secs(1), |_, _, _, _, _| {});
    assert_eq!(p.bbr.mode(), BbrMode::ProbeBw);
    let (bdp1, bdp54) = (bdp(&p.bbr, 1, 1), bdp(&p.bbr, 5, 4));
    let min_rtt = p.bbr.min_rtt().unwrap();
    let now = p.now;
    let mut total = p.delivered;
    // A phase in `index` began at `now`; a sample at `at` with `in_flight`: the next phase?
    let mut advances = |index: usize, at: Duration, in_flight: usize| {
        let mut bbr = p.bbr.clone();
        (bbr.cycle_index, bbr.cycle_stamp) = (index, Some(now));
        let mut rs = round_sample(&mut total, PATH_BW, false);
        rs.in_flight = in_flight;
        rs.rtt = Some(min_rtt);
        bbr.on_rate_sample(&rs, now + at);
        assert_eq!(bbr.pacing_rate(), Some(Bbr::rate_with_gain(PATH_BW, bbr.pacing_gain())));
        bbr.cycle_index != index
    };
    let (short, long) = (min_rtt - Duration::from_millis(1), min_rtt + Duration::from_millis(1));
    // 5/4: a min RTT and a flight of 5/4 BDP.
    assert!(!advances(0, short, bdp54));
    assert!(!advances(0, long, bdp54 - 1));
    assert!(advances(0, long, bdp54));
    // 3/4: a min RTT, or a flight down to a BDP.
    assert!(!advances(1, short, bdp1 + 1));
    assert!(advances(1, short, bdp1));
    assert!(advances(1, long, 2 * bdp1));
    // 1: a min RTT.
    assert!(!advances(2, short, 0));
    assert!(advances(7, long, 3 * bdp1));
    // A fresh ProbeBW never starts in the 3/4 phase.
    for round in 0..1000 {
        let mut bbr = p.bbr.clone();
        bbr.round_count = round;
        bbr.enter_probe_bw(now);
        assert_ne!(bbr.cycle_index, 1);
    }
}

/// ACKs that come in bursts (a receiver or a link that delivers in batches) raise the window by
/// the excess they bring over what the bandwidth estimate expects, so that the sender does not
/// starve between bursts; once the bursts stop, the allowance ages out after five to ten rounds.
#[test]
fn aggregated_acks_raise_the_window_until_they_stop() {
    // One segment delivered, now `total` in all, by a transmission that left when `prior` had
    // been: 21 segments over 21 ms, at the path's rate.
    let one = |total: u64, prior: u64| RateSample {
        delivered: 21 * MSS as u64,
        interval: Duration::from_millis(21),
        prior_delivered: prior,
        total_delivered: total,
        app_limited: false,
        rtt: Some(Duration::from_millis(21)),
        newly_delivered: MSS,
        in_flight: 20 * MSS,
        mss: MSS,
    };
    let mut p = Path::new();
    p.run(Duration::from_secs(2), |_, _, _, _, _| {});
    let smooth = p.bbr.window();
    assert_eq!(smooth, 2 * 21_000 + MSS + 3 * MSS);
    // Twenty segments ACKed at one instant, after a pause as long as they took to send.
    let mut total = p.delivered;
    let at = p.now + Duration::from_millis(20);
    for _ in 0..20 {
        total += MSS as u64;
        p.bbr.on_rate_sample(&one(total, total - 21 * MSS as u64), at);
    }
    assert_eq!(p.bbr.aggregation_cwnd(), 20 * MSS, "the burst's excess over the estimate's expectation");
    assert_eq!(p.bbr.window(), smooth + 19 * MSS);
    // A pause (the ACKs fall behind the estimate: a new epoch), then evenly ACKed rounds, a
    // segment a millisecond, each sample a round: the allowance ages out within ten rounds.
    let mut at = at + Duration::from_millis(25);
    for _ in 0..10 {
        at += Duration::from_millis(1);
        total += MSS as u64;
        p.bbr.on_rate_sample(&one(total, total - MSS as u64), at);
    }
    assert_eq!(p.bbr.aggregation_cwnd(), MSS);
}

/// Each change of mode is a `tracing` event with the model's estimates.
#[test]
fn mode_changes_are_traced_with_the_estimates() {
    let log = crate::tcp::tests::tracing::traced(|| {
        let mut p = Path::new();
        p.run(Duration::from_secs(1), |_, _, _, _, _| {});
        assert_eq!(p.bbr.mode(), BbrMode::ProbeBw);
    });
    let drain = log
        .lines()
        .find(|l| l.contains("BBR mode") && l.contains("to=Drain"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(drain.contains("from=Startup") && drain.contains("bandwidth=1000000"), "{drain}");
    assert!(log.lines().any(|l| l.contains("from=Drain") && l.contains("to=ProbeBw")), "{log}");
}

/// A zero RTT (a clock that did not tick between a segment's send and its ACK, as a stack that
/// reads the time once per poll can see) is no measurement: the min RTT, and with it the BDP and
/// the window, stay.
#[test]
fn a_zero_rtt_is_not_a_minimum() {
    let mut p = Path::new();
    p.run(Duration::from_secs(2), |_, _, _, _, _| {});
    let (min, cwnd) = (p.bbr.min_rtt(), p.bbr.window());
    assert_eq!(min, Some(Duration::from_millis(21)));
    p.bbr.on_delay_sample(Duration::ZERO, p.now);
    let total = p.delivered + MSS as u64;
    let rs = RateSample {
        delivered: 21 * MSS as u64,
        interval: Duration::from_millis(21),
        prior_delivered: total - 21 * MSS as u64,
        total_delivered: total,
        app_limited: false,
        rtt: Some(Duration::ZERO),
        newly_delivered: MSS,
        in_flight: 20 * MSS,
        mss: MSS,
    };
    p.bbr.on_rate_sample(&rs, p.now);
    assert_eq!(p.bbr.min_rtt(), min);
    assert!(p.bbr.window() >= cwnd, "{} < {cwnd}: the BDP fell", p.bbr.window());
}
