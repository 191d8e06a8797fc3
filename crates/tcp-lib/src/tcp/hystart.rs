//! HyStart: leaving slow start before the first loss, when the round-trip time shows the queue
//! at the bottleneck growing ([`Config::hystart`](super::Config::hystart)).
//!
//! Slow start doubles the window every round trip until a loss; by then up to a window of data
//! is in a queue or lost. HyStart (Ha and Rhee, "Taming the Elephants: New TCP Slow Start",
//! 2011; RFC 9406 "HyStart++", 2023, for its round and RTT-sample structure) watches the RTT of
//! each round of slow start instead: once it rises clearly above the path's minimum the window
//! has filled the pipe, and ssthresh is set to the window, so congestion avoidance takes over.
//! [`HyStart::Linux`] is the variant Linux's CUBIC runs (`tcp_cubic.c`, `hystart_detect` = 3,
//! its default), with its two detectors:
//! * delay: a round lasts until the data sent when it began is acknowledged; the minimum of its
//!   first eight RTT samples and later ones is compared, from the ninth sample on, with the
//!   minimum RTT seen on the connection plus an eighth of it (clamped to 4..16 ms, RFC 9406's
//!   `MIN_RTT_THRESH` and `MAX_RTT_THRESH`);
//! * ACK train: ACKs that keep arriving within 2 ms of each other for longer than half the
//!   minimum RTT (plus an allowance for segmentation offload of up to 1 ms) mean the window
//!   already spans the path's delay.
//!
//! HyStart runs in slow start once the window is at least 16 segments (`hystart_low_window`),
//! until it fires; a retransmission timeout starts it afresh.
//!
//! [`HyStart::Rfc9406`] is HyStart++ (RFC 9406 §4.2): from the eighth RTT sample of a round on,
//! a round whose minimum RTT is at least the previous round's plus an eighth of it (clamped to
//! 4..16 ms) leaves slow start for Conservative Slow Start (CSS), where the window grows a
//! quarter as fast (`CSS_GROWTH_DIVISOR`); a CSS round whose minimum falls back below the one
//! that triggered it shows the exit was spurious, and slow start resumes; after five CSS rounds
//! (`CSS_ROUNDS`) ssthresh = cwnd and congestion avoidance begins. It runs in the first slow
//! start only (RFC 9406 §4.3: while ssthresh is still the initial, arbitrarily high one); a
//! loss ends it, and later slow starts stop at the ssthresh the loss left. The samples come from the
//! sender's own log of when each transmission left (only original transmissions: an ACK of a
//! retransmitted segment gives no sample, as Karn's algorithm), one per ACK, the RTT of the
//! newest segment it acknowledged, as Linux's `ca_rtt_us`; the same samples feed the
//! congestion controller's minimum RTT
//! ([`CongestionControl::on_delay_sample`](super::CongestionControl::on_delay_sample)).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::wire::SeqNumber;

/// Whether and how slow start ends before a loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HyStart {
    /// Slow start ends at ssthresh or at a loss only (RFC 5681; the default).
    #[default]
    Off,
    /// Linux CUBIC's HyStart (`tcp_cubic.c`, `hystart_detect` = 3): from a window of 16
    /// segments on, the delay detector (a round's minimum RTT, from its ninth sample on, more
    /// than the connection's minimum plus an eighth of it, clamped to 4..16 ms) and the ACK-train
    /// detector (ACKs within 2 ms of each other for longer than half the minimum RTT) set
    /// ssthresh = cwnd; again after each retransmission timeout.
    Linux,
    /// HyStart++ (RFC 9406): the delay detector against the previous round's minimum RTT, then
    /// Conservative Slow Start, in the first slow start only.
    Rfc9406,
}

/// The most transmissions logged for RTT samples; past it the oldest is forgotten (an ACK that
/// covers only forgotten ones gives no sample).
const MAX_LOG: usize = 1024;
/// HyStart runs from this window on, in segments (`hystart_low_window`).
const LOW_WINDOW: usize = 16;
/// RTT samples a round takes before the delay detector decides (RFC 9406 `N_RTT_SAMPLE`).
const MIN_SAMPLES: u8 = 8;
/// The delay threshold's bounds (RFC 9406 `MIN_RTT_THRESH`, `MAX_RTT_THRESH`).
const DELAY_MIN: Duration = Duration::from_millis(4);
const DELAY_MAX: Duration = Duration::from_millis(16);
/// HyStart++'s delay threshold divisor (`MIN_RTT_DIVISOR`).
const MIN_RTT_DIVISOR: u32 = 8;
/// How much slower the window grows in Conservative Slow Start (`CSS_GROWTH_DIVISOR`).
pub(crate) const CSS_GROWTH_DIVISOR: u32 = 4;
/// Rounds of Conservative Slow Start before congestion avoidance (`CSS_ROUNDS`).
const CSS_ROUNDS: u8 = 5;
/// ACKs this close together belong to one train (`hystart_ack_delta_us`).
const ACK_DELTA: Duration = Duration::from_millis(2);
/// The offload allowance: a super-segment of up to this many bytes may be in the train...
const OFFLOAD_BYTES: u128 = 4 * 65_536;
/// ...but never more than this.
const OFFLOAD_MAX: Duration = Duration::from_millis(1);

/// What an ACK told HyStart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// The RTT sample the ACK gave (the newest original transmission it acknowledged).
    pub(crate) sample: Option<Duration>,
    /// The RTT of the oldest original transmission the ACK acknowledged (Linux's `seq_rtt_us`,
    /// the sample its RTO estimator takes from every ACK).
    pub(crate) oldest: Option<Duration>,
    /// Slow start should end here (ssthresh = cwnd).
    pub(crate) exit: bool,
    /// Slow start's growth is to be divided by this from now on (HyStart++'s Conservative Slow
    /// Start: 4; 1 when it ends).
    pub(crate) growth_divisor: Option<u32>,
}

/// A connection's HyStart state and its log of transmissions.
#[derive(Debug)]
pub(crate) struct SlowStartExit {
    mode: HyStart,
    /// Keep the log even with HyStart off (the controller wants the samples).
    samples_wanted: bool,
    /// Original transmissions not yet acknowledged: start, end, when they left.
    log: VecDeque<(SeqNumber, SeqNumber, Instant)>,
    /// When the last data left (for the idle time before a restart).
    last_send: Option<Instant>,
    /// HyStart fired in this slow start.
    found: bool,
    /// The minimum RTT seen.
    min_rtt: Option<Duration>,
    /// The round ends once an ACK covers data past this (SND.NXT when it began).
    round_end: SeqNumber,
    round_start: Instant,
    /// The last ACK of the current train.
    last_ack: Instant,
    /// The minimum RTT of the round, and how many samples it took.
    round_min: Option<Duration>,
    round_samples: u8,
    /// HyStart++: the previous round's minimum RTT (`lastRoundMinRTT`).
    last_round_min: Option<Duration>,
    /// HyStart++ in Conservative Slow Start: the round minimum that started it
    /// (`cssBaselineMinRtt`) and the rounds it has lasted.
    css: Option<(Duration, u8)>,
}

impl SlowStartExit {
    /// A connection's state before the handshake; `samples_wanted` keeps the log for the
    /// controller's minimum RTT even with `mode` off.
    pub(crate) fn new(mode: HyStart, samples_wanted: bool, now: Instant, iss: SeqNumber) -> Self {
        Self {
            mode,
            samples_wanted,
            log: VecDeque::new(),
            last_send: None,
            found: false,
            min_rtt: None,
            round_end: iss,
            round_start: now,
            last_ack: now,
            round_min: None,
            round_samples: 0,
            last_round_min: None,
            css: None,
        }
    }

    /// HyStart is on, or the controller wants the samples: otherwise nothing is logged.
    pub(crate) fn active(&self) -> bool {
        self.mode != HyStart::Off || self.samples_wanted
    }

    /// Starts afresh (a retransmission timeout reset the congestion control): no minimum RTT,
    /// and a round that ends past `snd_nxt`. Its ACK train starts with the next round (the last
    /// ACK of the old train is too old to continue it).
    pub(crate) fn restart(&mut self, snd_nxt: SeqNumber) {
        // HyStart++ runs in the first slow start only (RFC 9406 §4.3).
        self.found = self.mode == HyStart::Rfc9406;
        self.css = None;
        self.min_rtt = None;
        self.round_end = snd_nxt;
        self.round_min = None;
        self.round_samples = 0;
    }

    fn new_round(&mut self, now: Instant, snd_nxt: SeqNumber) {
        self.round_start = now;
        self.last_ack = now;
        self.round_end = snd_nxt;
        self.round_min = None;
        self.round_samples = 0;
    }

    /// `start..end` left at `now`; `retransmission`: it had been sent before. Returns the idle
    /// time since the last transmission when this one starts after the flight drained
    /// (`flight_empty`); nothing when inactive (no controller that follows the samples or the
    /// idle time is in use then).
    pub(crate) fn on_sent(
        &mut self,
        start: SeqNumber,
        end: SeqNumber,
        now: Instant,
        retransmission: bool,
        flight_empty: bool,
    ) -> Option<Duration> {
        if !self.active() {
            return None;
        }
        let idle = self.last_send.filter(|_| flight_empty).map(|t| now.saturating_duration_since(t));
        self.last_send = Some(now);
        if retransmission {
            // Karn: the ACK of a retransmitted range is no measure; what was logged for it goes.
            self.log.retain(|&(s, e, _)| e <= start || s >= end);
        } else {
            if self.log.len() == MAX_LOG {
                self.log.pop_front();
            }
            self.log.push_back((start, end, now));
        }
        idle
    }

    /// An ACK moved SND.UNA to `una` at `now`. `cwnd` and `ssthresh` are the controller's (in
    /// bytes), `snd_nxt` where a new round would end, `srtt` the smoothed RTT.
    pub(crate) fn on_ack(&mut self, a: AckInfo) -> Verdict {
        let mut verdict = Verdict::default();
        let mut newest = None;
        let mut oldest = None;
        while let Some(&(start, end, at)) = self.log.front() {
            if start < a.una {
                // Acknowledged, whole or in part.
                oldest.get_or_insert(at);
            }
            if end <= a.una {
                newest = Some(at);
                self.log.pop_front();
            } else {
                if start < a.una {
                    // Partly acknowledged: its segments up to SND.UNA were delivered.
                    newest = Some(at);
                }
                break;
            }
        }
        verdict.oldest = oldest.map(|t| a.now.saturating_duration_since(t));
        let Some(sent) = newest else { return verdict };
        let rtt = a.now.saturating_duration_since(sent).max(Duration::from_micros(1));
        verdict.sample = Some(rtt);
        let min_rtt = self.min_rtt.map_or(rtt, |m| m.min(rtt));
        self.min_rtt = Some(min_rtt);
        match self.mode {
            HyStart::Off => {}
            HyStart::Linux => verdict.exit = self.linux(&a, rtt, min_rtt),
            HyStart::Rfc9406 => self.rfc9406(&a, rtt, &mut verdict),
        }
        verdict
    }

    /// HyStart++ (RFC 9406 §4.2) after an ACK with the RTT sample `rtt`.
    fn rfc9406(&mut self, a: &AckInfo, rtt: Duration, verdict: &mut Verdict) {
        if self.found {
            return;
        }
        if a.ssthresh != usize::MAX {
            // A loss set ssthresh: HyStart++ is over (and so is CSS, if it was on).
            self.found = true;
            if self.css.take().is_some() {
                verdict.growth_divisor = Some(1);
            }
            return;
        }
        if a.una > self.round_end {
            self.last_round_min = self.round_min;
            self.new_round(a.now, a.snd_nxt);
            if let Some((_, rounds)) = self.css.as_mut() {
                *rounds += 1;
                if *rounds >= CSS_ROUNDS {
                    self.css = None;
                    self.found = true;
                    verdict.exit = true;
                    verdict.growth_divisor = Some(1);
                    return;
                }
            }
        }
        let round_min = self.round_min.map_or(rtt, |m| m.min(rtt));
        self.round_min = Some(round_min);
        self.round_samples = self.round_samples.saturating_add(1);
        if self.round_samples < MIN_SAMPLES {
            return;
        }
        match self.css {
            None => {
                if let Some(last) = self.last_round_min {
                    let threshold = (last / MIN_RTT_DIVISOR).clamp(DELAY_MIN, DELAY_MAX);
                    if round_min >= last + threshold {
                        self.css = Some((round_min, 0));
                        verdict.growth_divisor = Some(CSS_GROWTH_DIVISOR);
                    }
                }
            }
            Some((baseline, _)) if round_min < baseline => {
                // The exit was spurious: back to slow start.
                self.css = None;
                verdict.growth_divisor = Some(1);
            }
            Some(_) => {}
        }
    }

    /// Linux's HyStart after an ACK with the RTT sample `rtt`, the minimum RTT `min_rtt`
    /// included; whether slow start ends.
    fn linux(&mut self, a: &AckInfo, rtt: Duration, min_rtt: Duration) -> bool {
        let segments = a.cwnd / a.mss.max(1);
        if self.found || a.cwnd >= a.ssthresh || segments < LOW_WINDOW {
            return false;
        }
        if a.una > self.round_end {
            self.new_round(a.now, a.snd_nxt);
        }
        // The ACK-train detector.
        if a.now.saturating_duration_since(self.last_ack) <= ACK_DELTA {
            self.last_ack = a.now;
            let threshold = (min_rtt + offload_allowance(a.cwnd, a.srtt)) / 2;
            if a.now.saturating_duration_since(self.round_start) > threshold {
                self.found = true;
            }
        }
        // The delay detector.
        let round_min = self.round_min.map_or(rtt, |m| m.min(rtt));
        self.round_min = Some(round_min);
        if self.round_samples < MIN_SAMPLES {
            self.round_samples += 1;
        } else if round_min > min_rtt + (min_rtt / 8).clamp(DELAY_MIN, DELAY_MAX) {
            self.found = true;
        }
        self.found
    }
}

/// What [`SlowStartExit::on_ack`] reads of the connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AckInfo {
    pub(crate) una: SeqNumber,
    pub(crate) snd_nxt: SeqNumber,
    pub(crate) now: Instant,
    pub(crate) cwnd: usize,
    pub(crate) ssthresh: usize,
    pub(crate) mss: usize,
    pub(crate) srtt: Option<Duration>,
}

/// How long a train of offloaded super-segments may take to arrive: the time four 64 KiB
/// super-segments take at the slow-start pacing rate (twice cwnd per RTT), at most 1 ms.
fn offload_allowance(cwnd: usize, srtt: Option<Duration>) -> Duration {
    let Some(srtt) = srtt.filter(|s| !s.is_zero()) else { return Duration::ZERO };
    // rate = 2 · cwnd / srtt bytes per second.
    let rate = 2 * cwnd as u128 * 1_000_000 / srtt.as_micros().max(1);
    if rate == 0 {
        return OFFLOAD_MAX;
    }
    let micros = OFFLOAD_BYTES * 1_000_000 / rate;
    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX)).min(OFFLOAD_MAX)
}
