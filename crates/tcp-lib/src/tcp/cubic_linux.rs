//! CUBIC with the arithmetic of Linux's `tcp_cubic.c`: see [`LinuxCubic`].

use std::time::{Duration, Instant};

use super::congestion::CongestionControl;

/// β · 1024 (Linux's `beta`).
const BETA: usize = 717;
/// The fixed-point scale of β.
const BETA_SCALE: usize = 1024;
/// `bic_scale`: C = 41 / 1024 · 10 ≈ 0.4.
const BIC_SCALE: u64 = 41;
/// The Reno-friendly rate (`beta_scale`): `8 · (1024 + β) / 3 / (1024 − β)`, in integers (15).
const FRIENDLY_SCALE: usize = 8 * (BETA_SCALE + BETA) / 3 / (BETA_SCALE - BETA);
/// Before the first congestion event, `cnt` is at most this (5 % growth per RTT).
const FIRST_EPOCH_CNT: usize = 20;
/// `cnt` recomputation while the window stands still: at most once per 1/32 s.
const RECALC: Duration = Duration::from_millis(1000 / 32);

/// CUBIC with the arithmetic of Linux's `tcp_cubic.c`
/// ([`CongestionAlgorithm::LinuxCubic`](super::CongestionAlgorithm::LinuxCubic)), for a host that
/// must size its window as Linux does (the packetdrill profile): the same curve as RFC 9438's
/// [`Cubic`](super::Cubic), counted the way the kernel counts it.
///
/// What differs from the RFC arithmetic of [`Cubic`](super::Cubic):
/// * the window is whole segments: each ACK adds the segments it covers to a counter, and the
///   window grows by one segment each time the counter reaches `cnt`, the number of segments
///   to acknowledge per segment of growth (Linux's `tcp_cong_avoid_ai`);
/// * `cnt` comes from the cubic target `W(t)` at `t` = the time since the epoch began plus the
///   minimum RTT (RFC 9438 §4.4 uses the smoothed RTT), recomputed at most once per millisecond
///   and, while the window stands still, once per 1/32 s; time counts in 1/1024 s and the curve
///   in fixed point (C = 41/1024 · 10, as `bic_scale`);
/// * β = 717/1024, and the reduction starts from the congestion window, not the flight;
/// * before the first congestion event (`W_max` = 0) the window grows by at least 5 % per RTT
///   (`cnt` at most 20), and never faster than one segment per two acknowledged (`cnt` ≥ 2);
/// * the Reno-friendly estimate grows by one segment per `cwnd · 15 / 8` segments acknowledged
///   (`beta_scale`, α ≈ 0.53);
/// * a retransmission timeout forgets `W_max` and the epoch (the kernel resets CUBIC's state when
///   it enters its Loss state), and a send after the flight drained moves the epoch forward by
///   the idle time (`CA_EVENT_TX_START`), so idle time is no credit toward growth.
#[derive(Clone, Debug)]
pub struct LinuxCubic {
    /// cwnd in bytes (whole segments once the MSS is known).
    cwnd: usize,
    ssthresh: usize,
    /// Segments acknowledged toward the next one-segment growth (`snd_cwnd_cnt`).
    cwnd_cnt: usize,
    /// Segments to acknowledge per segment of growth.
    cnt: usize,
    /// `W_max` in segments (0: no congestion event yet).
    last_max_cwnd: usize,
    /// The window (segments) and time of the last `cnt` computation.
    last_cwnd: usize,
    last_time: Option<Instant>,
    /// The origin of the curve (segments) and `K` in 1/1024 s.
    origin: usize,
    k: u64,
    /// The start of the epoch (`None`: the next congestion avoidance ACK starts one).
    epoch: Option<Instant>,
    /// Segments acknowledged since the Reno estimate last grew, and that estimate.
    ack_cnt: usize,
    tcp_cwnd: usize,
    /// The minimum RTT of the samples fed by [`CongestionControl::on_delay_sample`].
    delay_min: Option<Duration>,
    /// Slow start's growth divisor ([`CongestionControl::set_slow_start_divisor`]) and the
    /// segments acknowledged toward its next segment of growth.
    ss_divisor: usize,
    ss_credit: usize,
}

impl Default for LinuxCubic {
    fn default() -> Self {
        Self::new()
    }
}

impl LinuxCubic {
    /// Before the handshake: as [`NewReno::new`](super::NewReno::new).
    #[must_use]
    pub const fn new() -> Self {
        Self {
            cwnd: 536,
            ssthresh: usize::MAX,
            cwnd_cnt: 0,
            cnt: 0,
            last_max_cwnd: 0,
            last_cwnd: 0,
            last_time: None,
            origin: 0,
            k: 0,
            epoch: None,
            ack_cnt: 0,
            tcp_cwnd: 0,
            delay_min: None,
            ss_divisor: 1,
            ss_credit: 0,
        }
    }

    /// `K` in 1/1024 s for a window `gap` segments below `W_max`: `∛(gap / C')` where the
    /// constant folds C and the 1/1024 s unit (`2^40 / (41 · 10)`).
    fn k_for(gap: usize) -> u64 {
        let cube_factor = (1u64 << 40) / (BIC_SCALE * 10);
        #[expect(clippy::cast_precision_loss, reason = "windows are far below 2^52 segments")]
        let cube = cube_factor as f64 * gap as f64;
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a cube root of a positive u64 fits"
        )]
        let k = cube.cbrt() as u64;
        k
    }

    /// Recomputes `cnt` for a window of `cwnd` segments when `acked` more were acknowledged
    /// (Linux's `bictcp_update`).
    fn update(&mut self, cwnd: usize, acked: usize, now: Instant) {
        self.ack_cnt += acked;
        let recent = self.last_time.is_some_and(|t| now.saturating_duration_since(t) <= RECALC);
        if self.last_cwnd == cwnd && recent {
            return;
        }
        let same_tick = self.epoch.is_some()
            && self.last_time.is_some_and(|t| now.saturating_duration_since(t) < Duration::from_millis(1));
        if !same_tick {
            self.last_cwnd = cwnd;
            self.last_time = Some(now);
            let epoch = match self.epoch {
                Some(e) => e,
                None => {
                    self.epoch = Some(now);
                    self.ack_cnt = acked;
                    self.tcp_cwnd = cwnd;
                    if self.last_max_cwnd <= cwnd {
                        self.k = 0;
                        self.origin = cwnd;
                    } else {
                        self.k = Self::k_for(self.last_max_cwnd - cwnd);
                        self.origin = self.last_max_cwnd;
                    }
                    now
                }
            };
            // t in 1/1024 s: the epoch's age plus the minimum RTT, in milliseconds (jiffies at
            // HZ = 1000; the RTT rounded up).
            let age = u64::try_from(now.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX / 2);
            let rtt = self.delay_min.map_or(0, |d| u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(0));
            let t = age.saturating_add(rtt).min(1 << 40) * 1024 / 1000;
            // In u128 (offs³ alone may pass 2^64 after hours in one epoch), capped past any window.
            let offs = u128::from(t.abs_diff(self.k).min(1 << 30));
            let delta = usize::try_from((u128::from(BIC_SCALE * 10) * offs * offs * offs) >> 40)
                .unwrap_or(usize::MAX);
            let target = if t < self.k {
                self.origin.saturating_sub(delta)
            } else {
                self.origin.saturating_add(delta)
            };
            self.cnt = if target > cwnd { cwnd / (target - cwnd) } else { 100 * cwnd };
            if self.last_max_cwnd == 0 {
                self.cnt = self.cnt.min(FIRST_EPOCH_CNT);
            }
        }
        // The Reno-friendly region.
        let per_segment = (cwnd * FRIENDLY_SCALE) >> 3;
        if per_segment > 0 {
            while self.ack_cnt > per_segment {
                self.ack_cnt -= per_segment;
                self.tcp_cwnd += 1;
            }
        }
        if self.tcp_cwnd > cwnd {
            self.cnt = self.cnt.min(cwnd / (self.tcp_cwnd - cwnd));
        }
        self.cnt = self.cnt.max(2);
    }

    /// The segment counter reached `cnt`: grow by as many segments as it holds (Linux's
    /// `tcp_cong_avoid_ai`, credit earned at a larger `cnt` applied first).
    fn additive_increase(&mut self, acked: usize, mss: usize) {
        let w = self.cnt.max(1);
        if self.cwnd_cnt >= w {
            self.cwnd_cnt = 0;
            self.cwnd += mss;
        }
        self.cwnd_cnt += acked;
        if self.cwnd_cnt >= w {
            let grow = self.cwnd_cnt / w;
            self.cwnd_cnt -= grow * w;
            self.cwnd += grow * mss;
        }
    }

    /// The congestion event bookkeeping (Linux's `cubictcp_recalc_ssthresh`): the epoch ends,
    /// `W_max` is the window (lowered by fast convergence when below the last one), and ssthresh
    /// = β · cwnd, at least two segments.
    fn reduce(&mut self, mss: usize) {
        let cwnd = self.cwnd / mss.max(1);
        self.epoch = None;
        self.ss_divisor = 1;
        self.ss_credit = 0;
        self.last_max_cwnd =
            if cwnd < self.last_max_cwnd { cwnd * (BETA_SCALE + BETA) / (2 * BETA_SCALE) } else { cwnd };
        self.ssthresh = (cwnd * BETA / BETA_SCALE).max(2) * mss;
    }
}

impl CongestionControl for LinuxCubic {
    fn window(&self) -> usize {
        self.cwnd
    }

    fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    fn on_established(&mut self, initial_window: usize) {
        self.cwnd = initial_window;
    }

    fn on_ack(&mut self, acked: usize, mss: usize, now: Instant, _srtt: Duration) {
        let mss = mss.max(1);
        let mut segments = acked.div_ceil(mss);
        if self.cwnd < self.ssthresh {
            // Slow start: every segment acknowledged, up to ssthresh; the rest counts below.
            let room = (self.ssthresh - self.cwnd).div_ceil(mss);
            let grow = segments.min(room);
            self.ss_credit += grow;
            let add = self.ss_credit / self.ss_divisor;
            self.ss_credit -= add * self.ss_divisor;
            self.cwnd = (self.cwnd + add * mss).min(self.ssthresh.max(self.cwnd));
            segments -= grow;
            if segments == 0 {
                return;
            }
        }
        self.update(self.cwnd / mss, segments, now);
        self.additive_increase(segments, mss);
    }

    fn on_enter_recovery(&mut self, _flight: usize, mss: usize) {
        self.reduce(mss);
        self.cwnd = self.ssthresh;
    }

    fn on_exit_recovery(&mut self) {
        self.cwnd = self.ssthresh;
    }

    fn on_rto(&mut self, _flight: usize, mss: usize) {
        // The kernel computes ssthresh as for any congestion event, then its Loss state resets
        // CUBIC: W_max, the epoch and the minimum RTT are forgotten.
        self.reduce(mss);
        *self = Self { cwnd: mss, ssthresh: self.ssthresh, ..Self::new() };
    }

    fn exit_slow_start(&mut self) {
        self.ssthresh = self.cwnd;
    }

    fn set_slow_start_divisor(&mut self, divisor: u32) {
        self.ss_divisor = divisor.max(1) as usize;
    }

    fn on_delay_sample(&mut self, rtt: Duration, now: Instant) {
        // Samples within a second of an epoch's start (just after a reduction) are left out.
        if self.epoch.is_some_and(|e| now.saturating_duration_since(e) < Duration::from_secs(1)) {
            return;
        }
        let rtt = rtt.max(Duration::from_micros(1));
        self.delay_min = Some(self.delay_min.map_or(rtt, |m| m.min(rtt)));
    }

    fn on_idle_restart(&mut self, idle: Duration, now: Instant) {
        if let Some(epoch) = self.epoch {
            self.epoch = Some((epoch + idle).min(now));
        }
    }

    fn on_restart_window(&mut self, cwnd: usize, ssthresh: usize) {
        // `tcp_cwnd_restart` sets the window; CUBIC itself ignores `CA_EVENT_CWND_RESTART`.
        (self.cwnd, self.ssthresh) = (cwnd, ssthresh);
    }

    fn on_undo(&mut self, cwnd: usize, ssthresh: usize) {
        // `tcp_undo_cwnd_reduction` with CUBIC's `undo_cwnd` (the window before the loss).
        (self.cwnd, self.ssthresh) = (self.cwnd.max(cwnd), self.ssthresh.max(ssthresh));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    /// In congestion avoidance at `segments`, before any loss, 100 ms minimum RTT.
    fn after_slow_start(segments: usize, now: Instant) -> LinuxCubic {
        let mut c = LinuxCubic::new();
        c.on_established(segments * MSS);
        c.on_delay_sample(Duration::from_millis(100), now);
        c.exit_slow_start();
        c
    }

    /// `acks` ACKs of two segments, `gap` apart from `start`; the window in segments after each.
    fn acks(c: &mut LinuxCubic, start: Instant, gap: Duration, acks: u32) -> Vec<usize> {
        (0..acks)
            .map(|i| {
                c.on_ack(2 * MSS, MSS, start + gap * i, Duration::from_secs(1));
                c.window() / MSS
            })
            .collect()
    }

    #[test]
    fn before_the_first_loss_growth_is_at_least_one_segment_per_twenty_acked() {
        // cubic-bulk-166k.pkt: slow start left at 48 segments, two segments ACKed per 100 ms;
        // the curve starts flat (W_max = 0: K = 0, origin 48), so the 5 % floor rules: 49 after
        // ten ACKs, 50 after twenty; then the convex curve takes over.
        let now = Instant::now();
        let mut c = after_slow_start(48, now);
        let w = acks(&mut c, now, Duration::from_millis(100), 41);
        assert_eq!((w[9], w[19], w[29], w[40]), (49, 50, 52, 58), "{w:?}");
        // At most one segment per two ACKed: the next ACKs add one each.
        let w = acks(&mut c, now + Duration::from_millis(4100), Duration::from_millis(100), 3);
        assert_eq!(w, [59, 60, 61]);
    }

    #[test]
    fn a_reduction_takes_beta_of_the_window_and_a_timeout_forgets_w_max() {
        let now = Instant::now();
        let mut c = LinuxCubic::new();
        c.on_established(10 * MSS);
        c.on_enter_recovery(3 * MSS, MSS);
        assert_eq!((c.ssthresh(), c.window(), c.last_max_cwnd), (7 * MSS, 7 * MSS, 10), "717/1024 of cwnd");
        // Fast convergence: a loss below W_max lowers it to cwnd · (1 + β) / 2.
        c.on_enter_recovery(7 * MSS, MSS);
        assert_eq!((c.ssthresh(), c.last_max_cwnd), (4 * MSS, 5));
        // A timeout: ssthresh as for a loss, one segment, and W_max and the epoch forgotten.
        c.on_exit_recovery();
        c.on_ack(MSS, MSS, now, Duration::ZERO);
        assert!(c.epoch.is_some());
        c.on_rto(MSS, MSS);
        assert_eq!((c.window(), c.ssthresh(), c.last_max_cwnd, c.epoch), (MSS, 2 * MSS, 0, None));
        // K for a window 3 segments below W_max: ∛(3 / 0.4) s ≈ 1.957 s, in 1/1024 s.
        assert_eq!(LinuxCubic::k_for(3), 2003);
    }

    #[test]
    fn idle_time_is_no_credit_toward_growth() {
        // An epoch under way, then four idle seconds: with the epoch moved forward the curve
        // picks up where it was (the 5 % floor still rules); without, t jumps by 4 s and the
        // window grows by one segment per two ACKed.
        let now = Instant::now();
        let grow = |shift: bool| {
            let mut c = after_slow_start(48, now);
            acks(&mut c, now, Duration::from_millis(100), 2);
            let back = now + Duration::from_millis(4200);
            if shift {
                c.on_idle_restart(Duration::from_secs(4), back);
            }
            acks(&mut c, back, Duration::from_millis(100), 10).last().copied()
        };
        assert_eq!(grow(true), Some(49));
        // Days in one epoch: the curve saturates, nothing overflows.
        let mut c = after_slow_start(48, now);
        acks(&mut c, now, Duration::from_secs(100_000), 3);
        assert!(c.window() > 48 * MSS);
        assert!(grow(false).is_some_and(|w| w >= 55), "{:?}", grow(false));
    }
}
