//! Congestion control behind a small trait, with four implementations: [`NewReno`] (RFC 5681 slow
//! start and congestion avoidance, cwnd = ssthresh through fast recovery, RFC 3465 byte
//! counting limited to one SMSS per ACK), [`Cubic`] (RFC 9438), `LinuxCubic` (`cubic_linux.rs`: the same
//! curve with Linux's `tcp_cubic.c` arithmetic, for the Linux profile), and `Bbr` (`bbr.rs`:
//! the window and the pacing rate from [`RateSample`]s, not from losses). Slow start may end
//! before a loss by HyStart (`hystart.rs`).
//!
//! The connection owns the loss *detection* (duplicate ACK counting, the SACK scoreboard, the
//! recovery point, the retransmission timer); an algorithm only decides the congestion window at
//! each event. Time comes from the caller (`now`), as everywhere in the sans-IO core.

use std::fmt;
use std::time::{Duration, Instant};

/// A congestion control algorithm: the congestion window and slow-start threshold in bytes,
/// updated at the events the connection reports. `mss` is the sender's maximum segment size
/// (SMSS) and `flight` the bytes in flight when the event happened.
pub trait CongestionControl: fmt::Debug + Send {
    /// The congestion window (cwnd), in bytes.
    fn window(&self) -> usize;

    /// The slow-start threshold (ssthresh), in bytes.
    fn ssthresh(&self) -> usize;

    /// The handshake completed and the MSS is known: the congestion window starts at
    /// `initial_window` bytes (RFC 5681 §3.1's [`NewReno::initial_window`], or the larger one a
    /// connection is configured with: RFC 6928's ten segments, as Linux).
    fn on_established(&mut self, initial_window: usize);

    /// `acked` bytes of new data were acknowledged outside fast recovery, at `now`, with the
    /// smoothed RTT `srtt` (zero before the first sample).
    fn on_ack(&mut self, acked: usize, mss: usize, now: Instant, srtt: Duration);

    /// Loss detected (the third duplicate ACK, or SACK loss detection): fast retransmit and
    /// enter recovery. Also called for an ECN echo (RFC 3168 §6.1.2: the same reduction, without
    /// a retransmission or a recovery). The window is reduced: ssthresh is set and cwnd = ssthresh (RFC 6675 §5
    /// step 4.2). During recovery the connection's Proportional Rate Reduction (RFC 9937)
    /// decides what is sent, with or without SACK; the window does not move (no NewReno
    /// inflation by duplicate ACKs, no deflation by partial ACKs).
    fn on_enter_recovery(&mut self, flight: usize, mss: usize);

    /// A full ACK ended fast recovery: cwnd = ssthresh (RFC 9937 §4; PRR brought the flight
    /// there, or as close as the application and the losses allowed).
    fn on_exit_recovery(&mut self);

    /// The retransmission timer expired.
    fn on_rto(&mut self, flight: usize, mss: usize);

    /// A window reduction proved spurious ([`Config::dsack_undo`](super::Config::dsack_undo)):
    /// cwnd and ssthresh go back to at least `cwnd` and `ssthresh`, their values before it. The
    /// default ignores it (BBR's window never followed the loss).
    fn on_undo(&mut self, cwnd: usize, ssthresh: usize) {
        let _ = (cwnd, ssthresh);
    }

    /// HyStart ([`Config::hystart`](super::Config::hystart)) found the end of slow start:
    /// ssthresh = cwnd, and the next ACK grows the window in congestion avoidance.
    fn exit_slow_start(&mut self);

    /// Slow start grows the window `divisor` times slower from now on (HyStart++'s Conservative
    /// Slow Start, RFC 9406 §4.2: 4; 1 again when it ends). A loss or a timeout resets it to 1.
    fn set_slow_start_divisor(&mut self, divisor: u32);

    /// An RTT sample from an ACK at `now` (the newest segment it acknowledged that was sent
    /// once), for an algorithm that follows the minimum RTT. The default ignores it.
    fn on_delay_sample(&mut self, rtt: Duration, now: Instant) {
        let _ = (rtt, now);
    }

    /// The sender starts sending again after `idle` with nothing in flight. The default ignores
    /// it.
    fn on_idle_restart(&mut self, idle: Duration, now: Instant) {
        let _ = (idle, now);
    }

    /// The restart window after idle ([`Config::restart_after_idle`](super::Config::restart_after_idle)):
    /// cwnd becomes `cwnd` and ssthresh `ssthresh` (bytes). The default ignores it.
    fn on_restart_window(&mut self, cwnd: usize, ssthresh: usize) {
        let _ = (cwnd, ssthresh);
    }

    /// The delivery rate sample of an ACK that delivered data (acknowledged or SACKed it), at
    /// `now`, after the connection's loss detection and recovery ran for that ACK. Only taken
    /// where the connection logs its transmissions ([`Config::rack`](super::Config::rack)). The
    /// default ignores it.
    fn on_rate_sample(&mut self, rs: &RateSample, now: Instant) {
        let _ = (rs, now);
    }

    /// The connection has finished with an ACK: its loss detection and recovery, then its rate
    /// sample, if any. Called only where the algorithm takes rate samples (BBR), so that it can
    /// see the recovery state once per ACK as Linux's congestion controls do. The default does
    /// nothing.
    fn on_ack_done(&mut self) {}

    /// The rate the algorithm wants data paced at, in bytes per second, where
    /// [`Config::pacing`](super::Config::pacing) is set; `None` (the default): the connection's
    /// own rule, from the window and the smoothed RTT.
    fn pacing_rate(&self) -> Option<u64> {
        None
    }

    /// Whether the algorithm sets the window through fast recovery itself, so that the
    /// connection sends while the flight is below [`window`](Self::window) instead of as the
    /// Proportional Rate Reduction allows. `false` by default.
    fn owns_recovery_window(&self) -> bool {
        false
    }
}

/// A delivery rate sample (Cheng, Cardwell, Hassas Yeganeh and Jacobson, "Delivery Rate
/// Estimation", IETF draft, 2016, as Linux's `tcp_rate.c`): what one ACK says of the rate at which
/// the path delivered the connection's data. The connection keeps, for every transmission, how
/// much had been delivered when it left and when; an ACK that delivers some takes the most
/// recently sent of them and divides the bytes delivered since by the longer of the time over
/// which they were sent and the time over which their ACKs came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateSample {
    /// Bytes delivered over [`interval`](Self::interval).
    pub delivered: u64,
    /// The interval the sample spans; [`Duration::ZERO`] when the sample is not valid (shorter
    /// than the minimum RTT: compressed ACKs would inflate the rate).
    pub interval: Duration,
    /// The connection's total bytes delivered when the sample's transmission left (round trips
    /// are counted on it: a round ends once a transmission sent after it began is delivered).
    pub prior_delivered: u64,
    /// The connection's total bytes delivered, this ACK included.
    pub total_delivered: u64,
    /// Whether the sample's transmission left while the application, not the window, limited
    /// sending: the rate says less than the path could carry.
    pub app_limited: bool,
    /// The round trip of the sample's transmission (`None` when it was a retransmission).
    pub rtt: Option<Duration>,
    /// Bytes this ACK delivered (newly acknowledged or SACKed).
    pub newly_delivered: usize,
    /// Bytes in flight after the ACK (RFC 6675's pipe with SACK).
    pub in_flight: usize,
    /// The sender's MSS.
    pub mss: usize,
}

impl RateSample {
    /// The delivery rate in bytes per second, `None` for an invalid sample.
    #[must_use]
    pub fn rate(&self) -> Option<u64> {
        let nanos = self.interval.as_nanos();
        if nanos == 0 {
            return None;
        }
        u64::try_from(u128::from(self.delivered) * 1_000_000_000 / nanos).ok()
    }
}

/// Which congestion control a connection uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CongestionAlgorithm {
    /// [`NewReno`].
    NewReno,
    /// [`Cubic`] (the default, as in Linux and RFC 9438 deployments).
    #[default]
    Cubic,
    /// [`LinuxCubic`](super::LinuxCubic): CUBIC counted as Linux's `tcp_cubic.c` counts it.
    LinuxCubic,
    /// [`Bbr`](super::Bbr): the window and the pacing rate from the measured delivery rate and
    /// minimum RTT, not from losses. Needs [`Config::rack`](super::Config::rack) (its
    /// transmission log gives the delivery rate samples) and [`Config::pacing`](super::Config::pacing);
    /// [`Config::bbr`](super::Config::bbr) sets all three.
    Bbr,
}

/// NewReno: RFC 5681, with cwnd = ssthresh through fast recovery (the connection's PRR, RFC
/// 9937, paces what recovery sends; the RFC 6582 inflation and deflation are not used).
#[derive(Clone, Debug)]
pub struct NewReno {
    cwnd: usize,
    ssthresh: usize,
    /// Bytes acknowledged in congestion avoidance since cwnd last grew (RFC 5681 §3.1, the
    /// byte-counting variant of "cwnd += SMSS*SMSS/cwnd").
    acked_in_ca: usize,
    /// Slow start's growth divisor ([`CongestionControl::set_slow_start_divisor`]).
    ss_divisor: usize,
}

impl Default for NewReno {
    fn default() -> Self {
        Self::new()
    }
}

impl NewReno {
    /// Before the handshake: one 536-byte segment, and an "arbitrarily high" ssthresh
    /// (RFC 5681 §3.1).
    #[must_use]
    pub const fn new() -> Self {
        Self { cwnd: 536, ssthresh: usize::MAX, acked_in_ca: 0, ss_divisor: 1 }
    }

    /// The initial window of RFC 5681 §3.1 for a given SMSS.
    #[must_use]
    pub const fn initial_window(mss: usize) -> usize {
        if mss > 2190 {
            2 * mss
        } else if mss > 1095 {
            3 * mss
        } else {
            4 * mss
        }
    }

    /// ssthresh after a loss: max(FlightSize / 2, 2 * SMSS) (RFC 5681 equation 4).
    const fn reduced(flight: usize, mss: usize) -> usize {
        let half = flight / 2;
        if half > 2 * mss { half } else { 2 * mss }
    }
}

impl CongestionControl for NewReno {
    fn window(&self) -> usize {
        self.cwnd
    }

    fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    fn on_established(&mut self, initial_window: usize) {
        self.cwnd = initial_window;
    }

    fn on_ack(&mut self, acked: usize, mss: usize, _now: Instant, _srtt: Duration) {
        if self.cwnd < self.ssthresh {
            // Slow start: at most one SMSS per ACK (RFC 5681 §3.1, RFC 3465 L = 1).
            self.cwnd = self.cwnd.saturating_add(acked.min(mss) / self.ss_divisor);
        } else {
            self.acked_in_ca = self.acked_in_ca.saturating_add(acked);
            if self.acked_in_ca >= self.cwnd {
                self.acked_in_ca -= self.cwnd;
                self.cwnd = self.cwnd.saturating_add(mss);
            }
        }
    }

    fn on_enter_recovery(&mut self, flight: usize, mss: usize) {
        self.ssthresh = Self::reduced(flight, mss);
        self.cwnd = self.ssthresh;
        self.acked_in_ca = 0;
        self.ss_divisor = 1;
    }

    fn on_exit_recovery(&mut self) {
        self.cwnd = self.ssthresh;
    }

    fn on_rto(&mut self, flight: usize, mss: usize) {
        // RFC 5681 §3.1: ssthresh per equation 4, cwnd = loss window (one SMSS).
        self.ssthresh = Self::reduced(flight, mss);
        self.cwnd = mss;
        self.acked_in_ca = 0;
        self.ss_divisor = 1;
    }

    fn exit_slow_start(&mut self) {
        self.ssthresh = self.cwnd;
    }

    fn set_slow_start_divisor(&mut self, divisor: u32) {
        self.ss_divisor = divisor.max(1) as usize;
    }

    fn on_restart_window(&mut self, cwnd: usize, ssthresh: usize) {
        (self.cwnd, self.ssthresh, self.acked_in_ca) = (cwnd, ssthresh, 0);
    }

    fn on_undo(&mut self, cwnd: usize, ssthresh: usize) {
        (self.cwnd, self.ssthresh) = (self.cwnd.max(cwnd), self.ssthresh.max(ssthresh));
    }
}

/// CUBIC (RFC 9438): after a congestion event the window follows the cubic function of the
/// time since the current congestion avoidance stage began,
/// `W_cubic(t) = C·(t − K)³ + W_max` (RFC 9438 §4.2, in segments and seconds), concave up to the
/// window of the last congestion event `W_max` and convex past it, but never below the window a
/// Reno flow with the same loss rate would reach (the Reno-friendly region, §4.3). A congestion
/// event multiplies the window by β = 0.7 (§4.6); fast convergence (§4.7) lowers `W_max` when
/// the window shrinks from one event to the next, to leave room to new flows. Slow start is RFC
/// 5681's, as the RFC prescribes, and recovery is paced by the connection's PRR (RFC 9937).
/// Time is the `now` the caller passes; HyStart (`hystart.rs`) may end slow start early.
#[derive(Clone, Debug)]
pub struct Cubic {
    /// cwnd in bytes (fractional: per-ACK increments can be below one byte).
    cwnd: f64,
    ssthresh: usize,
    /// `W_max` in bytes: the window just before the last reduction (after fast convergence).
    w_max: f64,
    /// `cwnd_prior`: the window just before the last reduction (§4.3: α_cubic applies below it).
    cwnd_prior: f64,
    /// The start of the current congestion avoidance stage (`None`: not started).
    epoch: Option<Instant>,
    /// `K` in seconds for the current stage.
    k: f64,
    /// `W_est` in bytes, the Reno-friendly estimate (§4.3).
    w_est: f64,
    /// The last reduction was a retransmission timeout: the next stage starts with `K = 0` and
    /// `W_max` = the window it starts with (§4.8).
    after_rto: bool,
    /// Slow start's growth divisor ([`CongestionControl::set_slow_start_divisor`]).
    ss_divisor: f64,
}

impl Default for Cubic {
    fn default() -> Self {
        Self::new()
    }
}

impl Cubic {
    /// RFC 9438 §5.1: C = 0.4 (segments per second cubed).
    pub const C: f64 = 0.4;
    /// RFC 9438 §4.6: the multiplicative decrease factor.
    pub const BETA: f64 = 0.7;
    /// RFC 9438 §4.3: α_cubic = 3·(1 − β)/(1 + β), the Reno-friendly additive increase.
    pub const ALPHA: f64 = 3.0 * (1.0 - Self::BETA) / (1.0 + Self::BETA);

    /// Before the handshake: as [`NewReno::new`].
    #[must_use]
    pub const fn new() -> Self {
        Self {
            cwnd: 536.0,
            ssthresh: usize::MAX,
            w_max: 0.0,
            cwnd_prior: 0.0,
            epoch: None,
            k: 0.0,
            w_est: 0.0,
            after_rto: false,
            ss_divisor: 1.0,
        }
    }

    /// RFC 9438 equation 2: `K = ∛((W_max − cwnd_epoch) / C)` in seconds, windows in segments
    /// (0 when the window starts at or above `W_max`).
    #[must_use]
    pub fn k(w_max: f64, cwnd_epoch: f64) -> f64 {
        if w_max <= cwnd_epoch { 0.0 } else { ((w_max - cwnd_epoch) / Self::C).cbrt() }
    }

    /// RFC 9438 equation 1: `W_cubic(t) = C·(t − K)³ + W_max`, in segments, `t` in seconds.
    #[must_use]
    pub fn w_cubic(t: f64, k: f64, w_max: f64) -> f64 {
        Self::C * (t - k).powi(3) + w_max
    }

    /// The congestion event bookkeeping of RFC 9438 §4.6 and §4.7: fast convergence, `W_max`,
    /// `cwnd_prior`, and the new ssthresh = max(FlightSize · β, 2 · SMSS).
    fn reduce(&mut self, flight: usize, mss: usize) {
        self.w_max = if self.cwnd < self.w_max { self.cwnd * (1.0 + Self::BETA) / 2.0 } else { self.cwnd };
        self.cwnd_prior = self.cwnd;
        self.ssthresh = to_bytes(flight as f64 * Self::BETA).max(2 * mss);
        self.epoch = None;
        self.ss_divisor = 1.0;
    }
}

/// A window in bytes from its floating-point value (truncated, saturating).
#[expect(clippy::cast_possible_truncation, reason = "windows are far below 2^52 bytes; the cast saturates")]
fn to_bytes(w: f64) -> usize {
    w as usize
}

impl CongestionControl for Cubic {
    fn window(&self) -> usize {
        to_bytes(self.cwnd)
    }

    fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    fn on_established(&mut self, initial_window: usize) {
        self.cwnd = initial_window as f64;
    }

    fn on_ack(&mut self, acked: usize, mss: usize, now: Instant, srtt: Duration) {
        if self.window() < self.ssthresh {
            // Slow start (RFC 9438 §4.10: as RFC 5681).
            self.cwnd += acked.min(mss) as f64 / self.ss_divisor;
            return;
        }
        let seg = mss as f64;
        let epoch = *self.epoch.get_or_insert_with(|| {
            // A new congestion avoidance stage (§4.2): t counts from here.
            if self.after_rto || self.w_max < self.cwnd {
                self.w_max = self.cwnd;
            }
            self.after_rto = false;
            self.k = Self::k(self.w_max / seg, self.cwnd / seg);
            self.w_est = self.cwnd;
            now
        });
        let t = now.saturating_duration_since(epoch).as_secs_f64();
        // The Reno-friendly estimate (§4.3, equation 4): α_cubic per RTT up to cwnd_prior, then 1.
        let alpha = if self.w_est >= self.cwnd_prior { 1.0 } else { Self::ALPHA };
        self.w_est += alpha * acked as f64 * seg / self.cwnd;
        let cubic = Self::w_cubic(t, self.k, self.w_max / seg) * seg;
        if cubic < self.w_est {
            // The Reno-friendly region.
            self.cwnd = self.w_est;
        } else {
            // Concave and convex regions (§4.4, §4.5): towards W_cubic(t + RTT), at most 1.5·cwnd.
            let target = (Self::w_cubic(t + srtt.as_secs_f64(), self.k, self.w_max / seg) * seg)
                .clamp(self.cwnd, 1.5 * self.cwnd);
            self.cwnd += (target - self.cwnd) * acked as f64 / self.cwnd;
        }
    }

    fn on_enter_recovery(&mut self, flight: usize, mss: usize) {
        self.reduce(flight, mss);
        self.cwnd = self.ssthresh as f64;
    }

    fn on_exit_recovery(&mut self) {
        self.cwnd = self.ssthresh as f64;
    }

    fn on_rto(&mut self, flight: usize, mss: usize) {
        // RFC 9438 §4.8: ssthresh as for a congestion event, cwnd as RFC 5681 (one SMSS), and the
        // next stage starts with K = 0.
        self.reduce(flight, mss);
        self.cwnd = mss as f64;
        self.after_rto = true;
    }

    fn exit_slow_start(&mut self) {
        self.ssthresh = self.window();
    }

    fn set_slow_start_divisor(&mut self, divisor: u32) {
        self.ss_divisor = f64::from(divisor.max(1));
    }

    fn on_restart_window(&mut self, cwnd: usize, ssthresh: usize) {
        // The next congestion avoidance stage starts a new epoch from the restarted window.
        (self.cwnd, self.ssthresh, self.epoch) = (cwnd as f64, ssthresh, None);
    }

    fn on_undo(&mut self, cwnd: usize, ssthresh: usize) {
        // RFC 9438 §4.9 lets CUBIC restore its state from before a spurious event; the window and
        // ssthresh come back, and the next congestion avoidance stage starts a new epoch from
        // them (W_max stays the event's).
        self.cwnd = self.cwnd.max(cwnd as f64);
        self.ssthresh = self.ssthresh.max(ssthresh);
        self.epoch = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newreno_phases() {
        let mss = 1000;
        let now = Instant::now();
        let rtt = Duration::from_millis(10);
        let mut c = CongestionAlgorithm::NewReno.build();
        c.on_established(NewReno::initial_window(mss));
        assert_eq!(c.window(), 4000, "IW for SMSS <= 1095 is 4 segments");
        c.on_ack(3000, mss, now, rtt);
        assert_eq!(c.window(), 5000, "slow start: one SMSS per ACK at most");
        c.on_enter_recovery(10_000, mss);
        assert_eq!((c.ssthresh(), c.window()), (5000, 5000), "cwnd = ssthresh (RFC 6675 4.2)");
        c.on_exit_recovery();
        assert_eq!(c.window(), 5000, "cwnd = ssthresh (RFC 9937 4)");
        for _ in 0..4 {
            c.on_ack(1000, mss, now, rtt);
        }
        assert_eq!(c.window(), 5000, "at ssthresh: congestion avoidance");
        c.on_ack(1000, mss, now, rtt);
        assert_eq!(c.window(), 6000, "congestion avoidance: one SMSS per window acked");
        c.on_rto(6000, mss);
        assert_eq!((c.ssthresh(), c.window()), (3000, 1000));
        c.on_rto(1000, mss);
        assert_eq!(c.ssthresh(), 2000, "never below 2 SMSS");
        assert_eq!(NewReno::initial_window(1460), 4380);
        assert_eq!(NewReno::initial_window(4000), 8000);
    }

    /// ACKs a window's worth, one SMSS per ACK, at `now`; returns cwnd in segments.
    fn one_rtt(c: &mut Cubic, mss: usize, now: Instant, rtt: Duration) -> f64 {
        let acks = c.window() / mss;
        for _ in 0..acks {
            c.on_ack(mss, mss, now, rtt);
        }
        c.cwnd / mss as f64
    }

    /// A CUBIC in congestion avoidance at `w` segments, just reduced by a loss at `w_max`.
    fn after_loss(w_max: usize, mss: usize) -> Cubic {
        let mut c = Cubic::new();
        c.on_established(NewReno::initial_window(mss));
        c.cwnd = (w_max * mss) as f64;
        c.on_enter_recovery(w_max * mss, mss);
        c.on_exit_recovery();
        c
    }

    #[test]
    fn cubic_k_and_w_cubic_follow_rfc_9438() {
        // K = cbrt((W_max - cwnd_epoch) / C): W_max 100, cwnd_epoch 70 -> cbrt(75).
        let k = Cubic::k(100.0, 70.0);
        assert!((k - 75f64.cbrt()).abs() < 1e-9 && (k - 4.2172).abs() < 1e-3, "{k}");
        assert_eq!(Cubic::k(100.0, 120.0), 0.0);
        assert!((Cubic::w_cubic(0.0, k, 100.0) - 70.0).abs() < 1e-9, "starts at cwnd_epoch");
        assert!((Cubic::w_cubic(k, k, 100.0) - 100.0).abs() < 1e-9, "plateau at W_max at t = K");
        assert!((Cubic::w_cubic(k + 2.0, k, 100.0) - 103.2).abs() < 1e-9, "C (t - K)^3 past it");
        assert!((Cubic::ALPHA - 0.3 * 3.0 / 1.7).abs() < 1e-12);
    }

    #[test]
    fn cubic_beta_and_fast_convergence() {
        let mss = 1000;
        let mut c = after_loss(100, mss);
        assert_eq!((c.ssthresh(), c.window()), (70_000, 70_000), "beta = 0.7");
        assert!((c.w_max - 100_000.0).abs() < 1e-6);
        // A second loss below W_max: fast convergence lowers W_max to cwnd (1 + beta) / 2.
        c.on_enter_recovery(70_000, mss);
        assert!((c.w_max - 70_000.0 * 0.85).abs() < 1e-6, "{}", c.w_max);
        assert_eq!(c.window(), 49_000);
        // A timeout: one segment, and the next stage starts with K = 0 and W_max = its window.
        c.on_rto(49_000, mss);
        assert_eq!((c.window(), c.ssthresh()), (1000, 34_300));
        c.ssthresh = 1000;
        c.on_ack(mss, mss, Instant::now(), Duration::from_millis(100));
        assert_eq!((c.k, c.w_max), (0.0, 1000.0));
        assert_eq!(CongestionAlgorithm::default(), CongestionAlgorithm::Cubic);
    }

    #[test]
    fn cubic_window_follows_the_cubic_curve() {
        // A long RTT (so that the Reno estimate stays below the curve): concave growth up to
        // W_max at t = K, a plateau, then convex growth; always between the curve at t and t + RTT.
        let mss = 1000;
        let rtt = Duration::from_millis(500);
        let mut c = after_loss(100, mss);
        let start = Instant::now();
        let k = Cubic::k(100.0, 70.0);
        let mut t = Duration::ZERO;
        let mut last = 70.0;
        while t.as_secs_f64() < 2.0 * k {
            let w = one_rtt(&mut c, mss, start + t, rtt);
            let secs = t.as_secs_f64();
            let (lo, hi) =
                (Cubic::w_cubic(secs, k, 100.0), Cubic::w_cubic(secs + rtt.as_secs_f64(), k, 100.0));
            assert!(
                w >= last && w <= hi.max(last) + 1.0 && w + 5.0 >= lo,
                "t {secs}: {w} not near [{lo}, {hi}]"
            );
            last = w;
            t += rtt;
        }
        assert!(last > 100.0, "convex past W_max: {last}");
        assert!(c.w_est / mss as f64 <= last);
    }

    #[test]
    fn cubic_reno_friendly_region() {
        // A short RTT: many RTTs before K, and the Reno estimate (alpha_cubic per RTT up to
        // cwnd_prior, then one segment per RTT) overtakes the concave curve: cwnd follows it.
        let mss = 1000;
        let rtt = Duration::from_millis(10);
        let mut c = after_loss(100, mss);
        let start = Instant::now();
        let k = Cubic::k(100.0, 70.0);
        let mut w = 0.0;
        for i in 0..100u32 {
            w = one_rtt(&mut c, mss, start + rtt * i, rtt);
        }
        let cubic_now = Cubic::w_cubic(0.99, k, 100.0);
        assert!(w > cubic_now + 10.0, "cwnd {w} follows W_est, above W_cubic(1 s) = {cubic_now}");
        assert!((w - c.w_est / mss as f64).abs() < 1e-9);
        // About 57 RTTs at alpha_cubic to reach 100, then 43 at one segment per RTT.
        assert!((135.0..150.0).contains(&w), "{w}");
    }
}
