//! BBR congestion control, version 1 (Cardwell, Cheng, Gunn, Hassas Yeganeh and Jacobson, "BBR:
//! Congestion-Based Congestion Control", ACM Queue 14(5), 2016), with the behaviour of Linux's
//! `net/ipv4/tcp_bbr.c` (v1): see [`Bbr`].
//!
//! BBR does not read losses as congestion. It builds a model of the path from two measurements:
//! the bottleneck bandwidth (`BtlBw`, the largest delivery rate measured over the last ten round
//! trips) and the round-trip propagation time (`RTprop`, the smallest RTT measured over the last
//! ten seconds). Their product is the bandwidth-delay product (BDP), the data the path holds
//! without a queue. BBR paces its data at `pacing_gain · BtlBw` and keeps at most
//! `cwnd_gain · BDP` in flight, the gains depending on a small state machine:
//!
//! * **Startup** doubles the sending rate every round trip (both gains `2/ln 2` ≈ 2.885, the
//!   smallest that doubles the delivery rate each round) until three rounds in a row fail to
//!   raise the bandwidth estimate by 25 %: the pipe is full;
//! * **Drain** paces at the inverse gain to empty the queue Startup built, until the flight is
//!   down to one BDP;
//! * **ProbeBW** cycles the pacing gain over eight phases of one `RTprop` each,
//!   `[5/4, 3/4, 1, 1, 1, 1, 1, 1]`: a probe for more bandwidth, a drain of the queue it may have
//!   built, then six phases at the estimate; the window is two BDPs;
//! * **ProbeRTT**: when the `RTprop` estimate is ten seconds old, the window drops to four
//!   segments for at least 200 ms and one round trip, so that the queue drains and the
//!   propagation delay shows again.
//!
//! The connection feeds it a delivery rate sample ([`RateSample`], Linux's `tcp_rate.c`) on every
//! ACK that delivered data; the window moves on those samples only, never on
//! [`on_ack`](CongestionControl::on_ack). Arithmetic is in integers: gains in units of 1/256 as
//! the kernel's `BBR_UNIT`, the bandwidth in bytes per second, windows in bytes. Where the kernel
//! counts packets this counts bytes (its `TCP_INIT_CWND` is the connection's initial window, its
//! four-packet floor is four MSS). The window also allows for ACKs that arrive in bursts
//! (Linux's `extra_acked`, added to BBR v1 in 2019). Not modelled: the long-term (policer)
//! bandwidth estimate and the TSO quantization budget beyond its three segments.

use std::time::{Duration, Instant};

use super::congestion::{CongestionControl, RateSample};

/// The fixed-point unit of the gains (Linux's `BBR_UNIT`, 1 << 8).
const UNIT: u32 = 256;
/// Startup's pacing and window gain, 2/ln 2 (Linux's `bbr_high_gain`: 2885/1000, rounded up).
const HIGH_GAIN: u32 = UNIT * 2885 / 1000 + 1;
/// Drain's pacing gain, the inverse of [`HIGH_GAIN`] (Linux's `bbr_drain_gain`).
const DRAIN_GAIN: u32 = UNIT * 1000 / 2885;
/// ProbeBW's window gain (Linux's `bbr_cwnd_gain`): two BDPs.
const CWND_GAIN: u32 = 2 * UNIT;
/// The phases of ProbeBW's pacing gain cycle (Linux's `CYCLE_LEN`).
const CYCLE_LEN: usize = 8;
/// ProbeBW's pacing gains: probe at 5/4, drain at 3/4, cruise at 1 (Linux's `bbr_pacing_gain`).
const PACING_GAINS: [u32; CYCLE_LEN] = [UNIT * 5 / 4, UNIT * 3 / 4, UNIT, UNIT, UNIT, UNIT, UNIT, UNIT];
/// The number of ProbeBW phases a fresh cycle may start in (all but the 3/4 one: Linux's
/// `bbr_cycle_rand`).
const CYCLE_RAND: u64 = 7;
/// The bandwidth filter's window in rounds (Linux's `bbr_bw_rtts`: `CYCLE_LEN + 2`).
const BW_ROUNDS: usize = CYCLE_LEN + 2;
/// The min-RTT filter's window (Linux's `bbr_min_rtt_win_sec`).
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// The least time spent in ProbeRTT at the small window (Linux's `bbr_probe_rtt_mode_ms`).
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// The smallest window, in segments (Linux's `bbr_cwnd_min_target`); also ProbeRTT's window.
const MIN_TARGET_SEGMENTS: usize = 4;
/// The rounds of one window of the ACK aggregation filter (Linux's `bbr_extra_acked_win_rtts`):
/// its max covers the last five to ten rounds.
const EXTRA_ACKED_ROUNDS: u32 = 5;
/// The most data the ACK aggregation allowance may add, in time at the bandwidth estimate
/// (Linux's `bbr_extra_acked_max_us`).
const EXTRA_ACKED_MAX: Duration = Duration::from_millis(100);
/// Bandwidth growth that still counts as growth in Startup: 25 % (Linux's `bbr_full_bw_thresh`).
const FULL_BW_THRESH: u64 = UNIT as u64 * 5 / 4;
/// Rounds without such growth after which the pipe is full (Linux's `bbr_full_bw_cnt`).
const FULL_BW_ROUNDS: u32 = 3;
/// The pacing rate is this many percent below the model's rate, so that the bottleneck queue
/// drains (Linux's `bbr_pacing_margin_percent`).
const PACING_MARGIN_PERCENT: u128 = 1;
/// The MSS assumed before a call tells it.
const DEFAULT_MSS: usize = 1460;

/// BBR's state machine (the module documentation describes each state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BbrMode {
    /// Doubling the sending rate each round until the bandwidth stops growing.
    Startup,
    /// Draining the queue Startup built.
    Drain,
    /// Cycling the pacing gain around the bandwidth estimate.
    ProbeBw,
    /// At a four-segment window, to measure the propagation delay anew.
    ProbeRtt,
}

/// An exact windowed maximum of the delivery rate over the last [`BW_ROUNDS`] rounds: the
/// largest sample of each round, in a ring indexed by round count. It ages only as samples are
/// taken (as Linux's `lib/win_minmax.c` filter, which this replaces by an exact one), so that a
/// stretch of rejected, application-limited samples forgets nothing.
#[derive(Clone, Copy, Debug, Default)]
struct BwFilter {
    /// The round each slot holds the maximum of.
    rounds: [u64; BW_ROUNDS],
    /// The largest sample (bytes per second) of that round.
    rates: [u64; BW_ROUNDS],
    /// The maximum over the slots still in the window, as of the last sample taken.
    max: u64,
}

impl BwFilter {
    /// Takes the sample `rate` of round `round` (rounds never go back) and recomputes the max.
    fn update(&mut self, round: u64, rate: u64) {
        let slot = usize::try_from(round % BW_ROUNDS as u64).unwrap_or(0);
        if self.rounds[slot] == round {
            self.rates[slot] = self.rates[slot].max(rate);
        } else {
            (self.rounds[slot], self.rates[slot]) = (round, rate);
        }
        self.max = self
            .rounds
            .iter()
            .zip(&self.rates)
            .filter(|&(&r, _)| round.saturating_sub(r) < BW_ROUNDS as u64)
            .map(|(_, &rate)| rate)
            .max()
            .unwrap_or(0);
    }
}

/// BBR v1 ([`CongestionAlgorithm::Bbr`](super::CongestionAlgorithm::Bbr)): the window and the
/// pacing rate from the measured bottleneck bandwidth and propagation delay (see the module
/// documentation), following Linux's `tcp_bbr.c`.
///
/// What the connection must know:
/// * [`ssthresh`](CongestionControl::ssthresh) is `usize::MAX`: BBR has no slow-start threshold
///   (Startup ends on the bandwidth plateau, not on a threshold);
/// * the window only moves on [`on_rate_sample`](CongestionControl::on_rate_sample);
/// * in fast recovery BBR sets the window itself
///   ([`owns_recovery_window`](CongestionControl::owns_recovery_window)): packet conservation
///   (the window is what is in flight plus what each ACK delivers) for the first round, then the
///   usual growth, and the window from before the recovery back when it ends
///   (`bbr_set_cwnd_to_recover_or_restore`). An ECN echo is treated as the start of a recovery;
/// * [`pacing_rate`](CongestionControl::pacing_rate) is `None` until a valid delivery rate
///   sample came, then `pacing_gain · BtlBw · 99 %`; before the pipe is full it never drops.
///
/// Differences from the kernel: rounds are counted on every sample (the kernel skips invalid
/// ones, whose `prior_delivered` it may not have; here it always has it); data sent in ProbeRTT
/// counts as application-limited for the bandwidth filter, as the kernel marks the connection
/// application-limited there (here the connection cannot be told); the first phase of ProbeBW is
/// a hash of the round count, not random.
#[derive(Clone, Debug)]
pub struct Bbr {
    /// The state machine's state.
    mode: BbrMode,
    /// The congestion window, in bytes.
    cwnd: usize,
    /// The initial window (Linux's `TCP_INIT_CWND`): the window target before an RTT is known,
    /// and the bytes delivered before which Startup's window grows whatever its target.
    init_cwnd: usize,
    /// The last MSS a call or a sample told.
    mss: usize,
    /// The window saved at the start of a recovery, an RTO or ProbeRTT, restored at their end.
    prior_cwnd: usize,
    /// Round trips counted so far (Linux's `rtt_cnt`).
    round_count: u64,
    /// The delivered count that ends the current round: a sample whose transmission left with
    /// at least this much delivered starts a new one.
    next_rtt_delivered: u64,
    /// The last sample started a round.
    round_start: bool,
    /// The bottleneck bandwidth filter.
    bw: BwFilter,
    /// The propagation delay estimate and when it was last taken (or refreshed by ProbeRTT).
    min_rtt: Option<Duration>,
    min_rtt_stamp: Option<Instant>,
    /// The bandwidth at the last 25 % growth in Startup, and the rounds since.
    full_bw: u64,
    full_bw_count: u32,
    /// Startup found the bandwidth plateau (it stays found, through RTOs too, as in Linux).
    full_bw_reached: bool,
    /// The ProbeBW phase and when it began.
    cycle_index: usize,
    cycle_stamp: Option<Instant>,
    /// ProbeRTT's end: at least this time, once the flight fell to four segments.
    probe_rtt_done: Option<Instant>,
    /// A round passed since the flight fell to four segments in ProbeRTT.
    probe_rtt_round_done: bool,
    /// Samples of transmissions that left before this much was delivered are application-
    /// limited: those sent in ProbeRTT (Linux's `tp->app_limited` mark). 0: none.
    app_limited_until: u64,
    /// Packet conservation: the window is at least what is in flight plus what each ACK
    /// delivers, in the first round of a recovery.
    packet_conservation: bool,
    /// In fast recovery (between `on_enter_recovery` and `on_exit_recovery`).
    in_recovery: bool,
    /// A recovery started: the next sample sets the window to the flight plus what it delivered.
    recovery_start_pending: bool,
    /// A recovery ended on the ACK being processed: the window and conservation flag from before
    /// its end, put back if another recovery begins on the same ACK. Linux's BBR sees the
    /// connection's state once per ACK, so an end and a new start within one ACK are one
    /// recovery to it: no new round of packet conservation, which would set the window to the
    /// flight (a few segments, when the ACK marked much of it lost) and leave the path idle
    /// for rounds while it regrows.
    recovery_left: Option<(usize, bool)>,
    /// After an RTO, the loss state lasts until this round (Linux's `TCP_CA_Loss`, which ends
    /// once what was outstanding is acknowledged, about a round later).
    loss_until_round: u64,
    /// Sending restarted after idle: no ProbeRTT on the next sample.
    idle_restart: bool,
    /// ACK aggregation (Linux's `extra_acked`): the most data ACKed beyond what the bandwidth
    /// estimate expected since an epoch began, in two windows of [`EXTRA_ACKED_ROUNDS`]; the
    /// current window's index and its rounds so far.
    extra_acked: [usize; 2],
    extra_acked_index: usize,
    extra_acked_rounds: u32,
    /// The aggregation epoch: since when, and the bytes ACKed since.
    ack_epoch: Option<Instant>,
    ack_epoch_acked: usize,
    /// The pacing rate in bytes per second (0: none yet).
    pacing: u64,
}

impl Default for Bbr {
    fn default() -> Self {
        Self::new()
    }
}

impl Bbr {
    /// Before the handshake: Startup, with an initial window of ten default-sized segments
    /// (RFC 6928, Linux's `TCP_INIT_CWND`) until [`on_established`](CongestionControl::on_established).
    #[must_use]
    pub fn new() -> Self {
        let init = 10 * DEFAULT_MSS;
        Self {
            mode: BbrMode::Startup,
            cwnd: init,
            init_cwnd: init,
            mss: DEFAULT_MSS,
            prior_cwnd: 0,
            round_count: 0,
            next_rtt_delivered: 0,
            round_start: false,
            bw: BwFilter::default(),
            min_rtt: None,
            min_rtt_stamp: None,
            full_bw: 0,
            full_bw_count: 0,
            full_bw_reached: false,
            cycle_index: 0,
            cycle_stamp: None,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            app_limited_until: 0,
            packet_conservation: false,
            in_recovery: false,
            recovery_start_pending: false,
            recovery_left: None,
            loss_until_round: 0,
            idle_restart: false,
            extra_acked: [0; 2],
            extra_acked_index: 0,
            extra_acked_rounds: 0,
            ack_epoch: None,
            ack_epoch_acked: 0,
            pacing: 0,
        }
    }

    /// The state machine's state.
    #[must_use]
    pub fn mode(&self) -> BbrMode {
        self.mode
    }

    /// The bottleneck bandwidth estimate (the windowed maximum delivery rate), bytes per second.
    #[must_use]
    pub fn bandwidth(&self) -> u64 {
        self.bw.max
    }

    /// The propagation delay estimate (the windowed minimum RTT), `None` before a sample.
    #[must_use]
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The smallest window: four segments.
    fn min_target(&self) -> usize {
        MIN_TARGET_SEGMENTS.saturating_mul(self.mss)
    }

    /// The pacing gain of the current state, in 1/256 (Linux's `bbr_update_gains`).
    fn pacing_gain(&self) -> u32 {
        match self.mode {
            BbrMode::Startup => HIGH_GAIN,
            BbrMode::Drain => DRAIN_GAIN,
            BbrMode::ProbeBw => PACING_GAINS[self.cycle_index % CYCLE_LEN],
            BbrMode::ProbeRtt => UNIT,
        }
    }

    /// The window gain of the current state, in 1/256.
    fn cwnd_gain(&self) -> u32 {
        match self.mode {
            BbrMode::Startup | BbrMode::Drain => HIGH_GAIN,
            BbrMode::ProbeBw => CWND_GAIN,
            BbrMode::ProbeRtt => UNIT,
        }
    }

    /// `gain` BDPs at bandwidth `bw`, in bytes, rounded up (Linux's `bbr_bdp`); the initial
    /// window while no RTT is known.
    fn inflight(&self, bw: u64, gain: u32) -> usize {
        let Some(rtt) = self.min_rtt else {
            return self.init_cwnd;
        };
        let scaled = u128::from(bw).saturating_mul(rtt.as_nanos()).saturating_mul(u128::from(gain));
        usize::try_from(scaled.div_ceil(1_000_000_000 * u128::from(UNIT))).unwrap_or(usize::MAX)
    }

    /// The window the model asks for: `cwnd_gain` BDPs, plus the ACK aggregation allowance once
    /// the pipe is full, plus three segments for the ACKs the receiver delays and the segments
    /// sent together (Linux's quantization budget); the initial window while no RTT is known.
    fn target_cwnd(&self) -> usize {
        if self.min_rtt.is_none() {
            return self.init_cwnd;
        }
        self.inflight(self.bandwidth(), self.cwnd_gain())
            .saturating_add(self.aggregation_cwnd())
            .saturating_add(3 * self.mss)
    }

    /// The window's allowance for ACKs that come in bursts (Linux's `bbr_ack_aggregation_cwnd`):
    /// once the pipe is full, the largest excess of ACKed data seen in the last five to ten
    /// rounds, at most 100 ms at the bandwidth estimate. A path whose ACKs arrive aggregated (a
    /// receiver's delayed and stretched ACKs, a Wi-Fi or a virtual link that delivers in
    /// batches) would otherwise starve the sender between bursts, its window of two BDPs
    /// spent.
    fn aggregation_cwnd(&self) -> usize {
        if !self.full_bw_reached {
            return 0;
        }
        let max = usize::try_from(
            u128::from(self.bandwidth()).saturating_mul(EXTRA_ACKED_MAX.as_nanos()) / 1_000_000_000,
        )
        .unwrap_or(usize::MAX);
        self.extra_acked[0].max(self.extra_acked[1]).min(max)
    }

    /// The ACK aggregation estimate after a sample (Linux's `bbr_update_ack_aggregation`): an
    /// epoch lasts while ACKs bring more than the bandwidth estimate would have delivered since
    /// it began; the excess is the aggregation, kept as a max over two windows of rounds (at
    /// most the window).
    fn update_ack_aggregation(&mut self, rs: &RateSample, now: Instant) {
        let acked = rs.newly_delivered;
        if acked == 0 || rs.interval.is_zero() {
            return;
        }
        if self.round_start {
            self.extra_acked_rounds = (self.extra_acked_rounds + 1).min(31);
            if self.extra_acked_rounds >= EXTRA_ACKED_ROUNDS {
                self.extra_acked_rounds = 0;
                self.extra_acked_index ^= 1;
                self.extra_acked[self.extra_acked_index] = 0;
            }
        }
        let epoch = self.ack_epoch.map_or(Duration::ZERO, |e| now.saturating_duration_since(e));
        let mut expected =
            usize::try_from(u128::from(self.bandwidth()).saturating_mul(epoch.as_nanos()) / 1_000_000_000)
                .unwrap_or(usize::MAX);
        // A new epoch when the ACKs fell behind the estimate, or after a very long one.
        if self.ack_epoch.is_none()
            || self.ack_epoch_acked <= expected
            || self.ack_epoch_acked.saturating_add(acked) >= self.mss.saturating_mul(1 << 20)
        {
            self.ack_epoch = Some(now);
            self.ack_epoch_acked = 0;
            expected = 0;
        }
        self.ack_epoch_acked = self.ack_epoch_acked.saturating_add(acked);
        let extra = (self.ack_epoch_acked - expected.min(self.ack_epoch_acked)).min(self.cwnd);
        let slot = &mut self.extra_acked[self.extra_acked_index];
        *slot = (*slot).max(extra);
    }

    /// `bw` times `gain`, less the pacing margin, in bytes per second (Linux's
    /// `bbr_rate_bytes_per_sec`).
    fn rate_with_gain(bw: u64, gain: u32) -> u64 {
        let rate =
            u128::from(bw).saturating_mul(u128::from(gain)).saturating_mul(100 - PACING_MARGIN_PERCENT)
                / (u128::from(UNIT) * 100);
        u64::try_from(rate).unwrap_or(u64::MAX)
    }

    /// Sets the pacing rate for `gain`; before the pipe is full it only ever grows, so that a
    /// low early sample does not slow Startup (Linux's `bbr_set_pacing_rate`).
    fn set_pacing_rate(&mut self, gain: u32) {
        let rate = Self::rate_with_gain(self.bandwidth(), gain);
        if self.full_bw_reached || rate > self.pacing {
            self.pacing = rate;
        }
    }

    /// Whether the loss state of a recent RTO still lasts.
    fn in_loss(&self) -> bool {
        self.round_count < self.loss_until_round
    }

    /// Saves the window for a later restore; within a recovery, an RTO's loss state or
    /// ProbeRTT the window is already reduced and the saved one is kept if larger (Linux's
    /// `bbr_save_cwnd`).
    fn save_cwnd(&mut self) {
        self.prior_cwnd = if self.in_recovery || self.in_loss() || self.mode == BbrMode::ProbeRtt {
            self.prior_cwnd.max(self.cwnd)
        } else {
            self.cwnd
        };
    }

    /// Caps the window at four segments in ProbeRTT.
    fn cap_probe_rtt(&mut self) {
        if self.mode == BbrMode::ProbeRtt {
            self.cwnd = self.cwnd.min(self.min_target());
        }
    }

    /// Whether the sample's transmission was application-limited: as the connection says, or
    /// sent in ProbeRTT.
    fn sample_app_limited(&self, rs: &RateSample) -> bool {
        rs.app_limited || rs.prior_delivered < self.app_limited_until
    }

    /// Round counting (Linux's `bbr_update_bw`, first half): a round ends when a transmission
    /// that left after it began is delivered; a new round ends packet conservation.
    fn update_round(&mut self, rs: &RateSample) {
        self.round_start = false;
        if rs.prior_delivered >= self.next_rtt_delivered {
            self.next_rtt_delivered = rs.total_delivered;
            self.round_count = self.round_count.saturating_add(1);
            self.round_start = true;
            self.packet_conservation = false;
        }
    }

    /// The bandwidth filter takes a valid sample unless it is application-limited and below
    /// the current maximum: such a sample says more of the application than of the path.
    fn update_bw(&mut self, rs: &RateSample, app_limited: bool) {
        let Some(rate) = rs.rate() else {
            return;
        };
        if !app_limited || rate >= self.bandwidth() {
            self.bw.update(self.round_count, rate);
        }
    }

    /// Whether the current ProbeBW phase is over (Linux's `bbr_is_next_cycle_phase`): a phase at
    /// gain 1 lasts one `RTprop`; the probe at 5/4 lasts at least that and until the flight
    /// reached 5/4 BDP; the drain at 3/4 ends after one `RTprop` or once the flight is down to
    /// one BDP.
    fn is_next_cycle_phase(&self, rs: &RateSample, now: Instant) -> bool {
        let full_length = match (self.cycle_stamp, self.min_rtt) {
            (Some(stamp), Some(rtt)) => now.saturating_duration_since(stamp) > rtt,
            _ => false,
        };
        let gain = self.pacing_gain();
        let bw = self.bandwidth();
        if gain == UNIT {
            full_length
        } else if gain > UNIT {
            full_length && rs.in_flight >= self.inflight(bw, gain)
        } else {
            full_length || rs.in_flight <= self.inflight(bw, UNIT)
        }
    }

    /// The next ProbeBW phase starts now.
    fn advance_cycle_phase(&mut self, now: Instant) {
        self.cycle_index = (self.cycle_index + 1) % CYCLE_LEN;
        self.cycle_stamp = Some(now);
    }

    /// ProbeBW's gain cycling.
    fn update_cycle_phase(&mut self, rs: &RateSample, now: Instant) {
        if self.mode == BbrMode::ProbeBw && self.is_next_cycle_phase(rs, now) {
            self.advance_cycle_phase(now);
        }
    }

    /// Moves to `mode`, with a `tracing` event (DEBUG) that gives the model's estimates: what
    /// the window and the pacing rate follow.
    fn set_mode(&mut self, mode: BbrMode) {
        tracing::debug!(
            from = ?self.mode,
            to = ?mode,
            bandwidth = self.bandwidth(),
            min_rtt = ?self.min_rtt,
            cwnd = self.cwnd,
            rounds = self.round_count,
            "BBR mode"
        );
        self.mode = mode;
    }

    /// Enters ProbeBW (Linux's `bbr_reset_probe_bw_mode`) at a phase other than the 3/4 drain:
    /// Linux draws it at random so that flows desynchronize; here a hash of the round count
    /// picks it, deterministically.
    fn enter_probe_bw(&mut self, now: Instant) {
        self.set_mode(BbrMode::ProbeBw);
        let draw = (self.round_count.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % CYCLE_RAND;
        self.cycle_index = CYCLE_LEN - 1 - usize::try_from(draw).unwrap_or(0);
        self.advance_cycle_phase(now);
    }

    /// Leaves ProbeRTT: to ProbeBW if the pipe was found full, else back to Startup.
    fn reset_mode(&mut self, now: Instant) {
        if self.full_bw_reached {
            self.enter_probe_bw(now);
        } else {
            self.set_mode(BbrMode::Startup);
        }
    }

    /// Startup's plateau detection (Linux's `bbr_check_full_bw_reached`): at each round start
    /// that is not application-limited, 25 % more bandwidth than at the last growth is growth;
    /// three rounds without it fill the pipe.
    fn check_full_bw_reached(&mut self, app_limited: bool) {
        if self.full_bw_reached || !self.round_start || app_limited {
            return;
        }
        let max = self.bandwidth();
        let threshold = u128::from(self.full_bw) * u128::from(FULL_BW_THRESH) / u128::from(UNIT);
        if u128::from(max) >= threshold {
            (self.full_bw, self.full_bw_count) = (max, 0);
            return;
        }
        self.full_bw_count = self.full_bw_count.saturating_add(1);
        self.full_bw_reached = self.full_bw_count >= FULL_BW_ROUNDS;
    }

    /// Startup → Drain once the pipe is full, Drain → ProbeBW once the flight is down to one
    /// BDP (Linux's `bbr_check_drain`).
    fn check_drain(&mut self, rs: &RateSample, now: Instant) {
        if self.mode == BbrMode::Startup && self.full_bw_reached {
            self.set_mode(BbrMode::Drain);
        }
        if self.mode == BbrMode::Drain && rs.in_flight <= self.inflight(self.bandwidth(), UNIT) {
            self.enter_probe_bw(now);
        }
    }

    /// Takes `rtt` at `now` into the min-RTT filter if it is a new minimum, or if `expired`. A
    /// zero RTT is no measurement (a clock that did not tick between send and ACK): taken, it
    /// would make every BDP zero and pin the window at its four-segment floor.
    fn take_rtt(&mut self, rtt: Duration, now: Instant, expired: bool) {
        if rtt.is_zero() {
            return;
        }
        if expired || self.min_rtt.is_none_or(|min| rtt < min) {
            (self.min_rtt, self.min_rtt_stamp) = (Some(rtt), Some(now));
        }
    }

    /// Whether the min-RTT estimate is older than its window at `now`.
    fn min_rtt_expired(&self, now: Instant) -> bool {
        self.min_rtt_stamp.is_some_and(|stamp| now.saturating_duration_since(stamp) > MIN_RTT_WINDOW)
    }

    /// ProbeRTT ends once its time and a round passed (Linux's `bbr_check_probe_rtt_done`): the
    /// estimate counts as fresh, the window comes back.
    fn check_probe_rtt_done(&mut self, now: Instant) {
        if self.probe_rtt_done.is_none_or(|done| now < done) {
            return;
        }
        self.min_rtt_stamp = Some(now);
        self.cwnd = self.cwnd.max(self.prior_cwnd);
        self.probe_rtt_done = None;
        self.reset_mode(now);
    }

    /// The min-RTT filter and ProbeRTT (Linux's `bbr_update_min_rtt`).
    fn update_min_rtt(&mut self, rs: &RateSample, now: Instant) {
        let expired = self.min_rtt_expired(now);
        if let Some(rtt) = rs.rtt {
            self.take_rtt(rtt, now, expired);
        }
        if expired && !self.idle_restart && self.mode != BbrMode::ProbeRtt {
            self.save_cwnd();
            self.set_mode(BbrMode::ProbeRtt);
            self.probe_rtt_done = None;
        }
        if self.mode == BbrMode::ProbeRtt {
            // What leaves now is limited by the small window, not by the path.
            self.app_limited_until = rs.total_delivered.saturating_add(rs.in_flight as u64).max(1);
            if self.probe_rtt_done.is_none() && rs.in_flight <= self.min_target() {
                self.probe_rtt_done = Some(now + PROBE_RTT_TIME);
                self.probe_rtt_round_done = false;
                self.next_rtt_delivered = rs.total_delivered;
            } else if self.probe_rtt_done.is_some() {
                self.probe_rtt_round_done |= self.round_start;
                if self.probe_rtt_round_done {
                    self.check_probe_rtt_done(now);
                }
            }
        }
        if rs.newly_delivered > 0 {
            self.idle_restart = false;
        }
    }

    /// The window in recovery (Linux's `bbr_set_cwnd_to_recover_or_restore`): the first sample
    /// of a recovery sets it to the flight plus what it delivered and starts a round of packet
    /// conservation, during which the window never falls below that sum. `None` outside
    /// conservation: the usual rule applies.
    fn recovery_cwnd(&mut self, rs: &RateSample) -> Option<usize> {
        let pipe = rs.in_flight.saturating_add(rs.newly_delivered);
        let mut cwnd = self.cwnd;
        if std::mem::take(&mut self.recovery_start_pending) {
            self.packet_conservation = true;
            self.next_rtt_delivered = rs.total_delivered;
            cwnd = pipe.max(self.mss);
        }
        self.packet_conservation.then(|| cwnd.max(pipe))
    }

    /// The window after a sample (Linux's `bbr_set_cwnd`): in packet conservation as
    /// [`recovery_cwnd`](Self::recovery_cwnd); else it grows by what was delivered up to the
    /// target once the pipe is full (and falls to it at once), and before that grows while
    /// below the target (or within the initial window), never shrinking; at least four
    /// segments, at most four in ProbeRTT.
    fn set_cwnd(&mut self, rs: &RateSample) {
        let acked = rs.newly_delivered;
        if acked > 0 {
            if let Some(cwnd) = self.recovery_cwnd(rs) {
                self.cwnd = cwnd;
            } else {
                let target = self.target_cwnd();
                let mut cwnd = self.cwnd;
                if self.full_bw_reached {
                    cwnd = cwnd.saturating_add(acked).min(target);
                } else if cwnd < target || rs.total_delivered < self.init_cwnd as u64 {
                    cwnd = cwnd.saturating_add(acked);
                }
                self.cwnd = cwnd.max(self.min_target());
            }
        }
        self.cap_probe_rtt();
    }
}

impl CongestionControl for Bbr {
    fn window(&self) -> usize {
        self.cwnd
    }

    /// Always `usize::MAX`: BBR has no slow-start threshold (Startup ends when the bandwidth
    /// stops growing, and a loss sets no threshold).
    fn ssthresh(&self) -> usize {
        usize::MAX
    }

    fn on_established(&mut self, initial_window: usize) {
        self.cwnd = initial_window;
        self.init_cwnd = initial_window;
    }

    /// Ignored: BBR moves the window on [`on_rate_sample`](CongestionControl::on_rate_sample),
    /// from the bytes each ACK delivered (SACKed ones included).
    fn on_ack(&mut self, _acked: usize, _mss: usize, _now: Instant, _srtt: Duration) {}

    /// Saves the window; the next sample sets it to the flight plus what it delivered and
    /// starts a round of packet conservation. `flight` is not used: the sample's is newer.
    fn on_enter_recovery(&mut self, _flight: usize, mss: usize) {
        if mss > 0 {
            self.mss = mss;
        }
        if let Some((cwnd, conservation)) = self.recovery_left.take() {
            // The recovery that ended on this ACK goes on (see `recovery_left`).
            (self.cwnd, self.packet_conservation, self.in_recovery) = (cwnd, conservation, true);
            return;
        }
        self.save_cwnd();
        self.in_recovery = true;
        self.packet_conservation = true;
        self.recovery_start_pending = true;
    }

    /// The window from before the recovery comes back (if larger); conservation ends.
    fn on_exit_recovery(&mut self) {
        if self.in_recovery {
            self.recovery_left = Some((self.cwnd, self.packet_conservation));
            self.cwnd = self.cwnd.max(self.prior_cwnd);
        }
        self.in_recovery = false;
        self.packet_conservation = false;
        self.recovery_start_pending = false;
        self.cap_probe_rtt();
    }

    /// One segment; the window then regrows by what each sample delivers, up to the model's
    /// target. Startup's plateau detection starts over (the pipe, if found full, stays so) and
    /// the next sample starts a round (Linux treats an RTO as the end of one). A recovery under
    /// way is over: its end restores nothing.
    fn on_rto(&mut self, _flight: usize, mss: usize) {
        if mss > 0 {
            self.mss = mss;
        }
        self.save_cwnd();
        self.cwnd = self.mss;
        (self.full_bw, self.full_bw_count) = (0, 0);
        self.packet_conservation = false;
        self.recovery_start_pending = false;
        self.recovery_left = None;
        self.in_recovery = false;
        self.next_rtt_delivered = 0;
        self.loss_until_round = self.round_count.saturating_add(2);
    }

    /// Ignored: Startup ends on the bandwidth plateau, not on HyStart's delay signal.
    fn exit_slow_start(&mut self) {}

    /// Ignored: Startup's growth is BBR's own (HyStart++ does not apply).
    fn set_slow_start_divisor(&mut self, _divisor: u32) {}

    /// A smaller RTT is a new minimum. Unlike a rate sample's, this one never refreshes an
    /// expired estimate: the rate sample of the same ACK decides on ProbeRTT first.
    fn on_delay_sample(&mut self, rtt: Duration, now: Instant) {
        self.take_rtt(rtt, now, false);
    }

    /// Sending restarts after idle (Linux's `CA_EVENT_TX_START`): in ProbeBW it paces at the
    /// estimate (gain 1) until the next sample sets the phase's rate again; in ProbeRTT, the
    /// idle time may have ended it. The next sample does not enter ProbeRTT.
    fn on_idle_restart(&mut self, _idle: Duration, now: Instant) {
        self.idle_restart = true;
        match self.mode {
            BbrMode::ProbeBw => self.set_pacing_rate(UNIT),
            BbrMode::ProbeRtt => self.check_probe_rtt_done(now),
            BbrMode::Startup | BbrMode::Drain => {}
        }
    }

    /// Ignored: after idle BBR keeps its window and paces at its estimate
    /// ([`on_idle_restart`](CongestionControl::on_idle_restart)) instead.
    fn on_restart_window(&mut self, _cwnd: usize, _ssthresh: usize) {}

    /// Linux's `bbr_main`: the model (rounds, bandwidth, ProbeBW phase, Startup's plateau,
    /// Drain, min RTT and ProbeRTT), then the pacing rate and the window from it.
    fn on_rate_sample(&mut self, rs: &RateSample, now: Instant) {
        if rs.mss > 0 {
            self.mss = rs.mss;
        }
        let app_limited = self.sample_app_limited(rs);
        self.update_round(rs);
        self.update_bw(rs, app_limited);
        self.update_ack_aggregation(rs, now);
        self.update_cycle_phase(rs, now);
        self.check_full_bw_reached(app_limited);
        self.check_drain(rs, now);
        self.update_min_rtt(rs, now);
        self.set_pacing_rate(self.pacing_gain());
        self.set_cwnd(rs);
    }

    fn pacing_rate(&self) -> Option<u64> {
        (self.pacing > 0).then_some(self.pacing)
    }

    /// BBR sets the window through recovery (packet conservation, then its usual growth).
    fn owns_recovery_window(&self) -> bool {
        true
    }

    /// A recovery that ended on this ACK and did not start again is over.
    fn on_ack_done(&mut self) {
        self.recovery_left = None;
    }
}

#[cfg(test)]
mod tests;
