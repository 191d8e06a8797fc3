//! The retransmission timeout estimator of RFC 6298, or Linux's variant of it
//! ([`Config::linux_rto`](super::Config::linux_rto)).
//!
//! Linux (`tcp_rtt_estimator`, `tcp_set_rto`) keeps SRTT as RFC 6298 does, but its variance term
//! is the largest mean deviation (times four) seen in the last round trip, never less than the
//! minimum RTO, and decays toward a smaller one by a quarter per round trip; the RTO is SRTT plus
//! that term. So the minimum RTO bounds the variance term, not the whole RTO (RFC 6298 §2.4):
//! with a 200 ms minimum and a 100 ms RTT Linux waits 300 ms where RFC 6298 waits 250 ms. A
//! falling RTT also moves the deviation eight times slower than a rising one.

use std::time::Duration;

use crate::wire::SeqNumber;

/// The upper bound RFC 6298 §2.5 allows (at least 60 s).
pub(crate) const MAX_RTO: Duration = Duration::from_secs(60);
/// Clock granularity G of RFC 6298 §2.3 (our timestamps tick in milliseconds).
const GRANULARITY: Duration = Duration::from_millis(1);

/// SRTT, RTTVAR and the RTO with its exponential backoff (RFC 6298 §2, §5.5).
///
/// The estimates are kept in integer nanoseconds (`Duration` only at the interface): every ACK
/// of a timed segment takes a sample, and `Duration`'s seconds-and-nanoseconds arithmetic (a
/// carry on every multiply, a long division on every divide) cost several times the integer
/// sums here.
#[derive(Clone, Debug)]
pub(crate) struct RttEstimator {
    /// SRTT in nanoseconds; `None` before the first sample.
    srtt: Option<u64>,
    rttvar: u64,
    /// The RTO computed from the estimates, before backoff.
    base_rto: u64,
    /// Doublings applied since the last sample (RFC 6298 §5.5; kept until a new sample arrives,
    /// §5.7).
    backoff: u32,
    min_rto: u64,
    /// Linux's variance term (`None`: RFC 6298).
    linux: Option<LinuxVariance>,
}

/// Linux's variance state in nanoseconds: `mdev` is four times the mean deviation (RFC 6298's
/// 4·RTTVAR), `mdev_max` its largest value in the current round trip, `term` what the RTO adds to
/// SRTT.
#[derive(Clone, Debug)]
struct LinuxVariance {
    mdev: u64,
    mdev_max: u64,
    term: u64,
    /// The round trip ends once SND.UNA passes this (`None`: set by the next ACK).
    round_end: Option<SeqNumber>,
    /// A sample was taken since the last [`RttEstimator::end_round`].
    sampled: bool,
}

/// `d` in nanoseconds, at most [`MAX_RTO`]'s (every duration the estimator keeps is bounded by it,
/// so sums of a few of them cannot overflow).
fn nanos(d: Duration) -> u64 {
    let d = d.min(MAX_RTO);
    d.as_secs() * NS_PER_SEC + u64::from(d.subsec_nanos())
}

const NS_PER_SEC: u64 = 1_000_000_000;
const MAX_RTO_NS: u64 = MAX_RTO.as_secs() * NS_PER_SEC;
const GRANULARITY_NS: u64 = GRANULARITY.as_secs() * NS_PER_SEC + GRANULARITY.subsec_nanos() as u64;

impl RttEstimator {
    /// Before any sample: RTO = `initial` (RFC 6298 §2.1: 1 s).
    /// With `linux`, the variance term is Linux's (see the [module documentation](self)).
    pub(crate) fn new(initial: Duration, min_rto: Duration, linux: bool) -> Self {
        let min_rto = nanos(min_rto);
        Self {
            srtt: None,
            rttvar: 0,
            base_rto: nanos(initial).max(min_rto),
            backoff: 0,
            min_rto,
            linux: linux.then_some(LinuxVariance {
                mdev: 0,
                mdev_max: 0,
                term: 0,
                round_end: None,
                sampled: false,
            }),
        }
    }

    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt.map(Duration::from_nanos)
    }

    /// [`srtt`](Self::srtt) in nanoseconds (at most [`MAX_RTO`]'s), for arithmetic that ends in
    /// one `Duration`.
    pub(crate) fn srtt_nanos(&self) -> Option<u64> {
        self.srtt
    }

    pub(crate) fn rttvar(&self) -> Duration {
        Duration::from_nanos(self.rttvar)
    }

    /// The current RTO, backoff included, at most [`MAX_RTO`].
    pub(crate) fn rto(&self) -> Duration {
        Duration::from_nanos(self.rto_nanos())
    }

    fn rto_nanos(&self) -> u64 {
        // `base_rto <= MAX_RTO_NS < 2^36`: shifts below 28 cannot overflow.
        if self.backoff >= 28 { MAX_RTO_NS } else { (self.base_rto << self.backoff).min(MAX_RTO_NS) }
    }

    /// Doubles the RTO (a retransmission timer expired).
    pub(crate) fn back_off(&mut self) {
        if self.rto_nanos() < MAX_RTO_NS {
            self.backoff += 1;
        }
    }

    /// Takes an RTT measurement (RFC 6298 §2.2 and §2.3, alpha = 1/8, beta = 1/4, K = 4) and
    /// clears the backoff.
    pub(crate) fn sample(&mut self, r: Duration) {
        let r = nanos(r);
        if self.linux.is_some() {
            self.sample_linux(r);
            return;
        }
        let srtt = match self.srtt {
            None => {
                self.rttvar = r / 2;
                r
            }
            Some(srtt) => {
                let delta = srtt.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + delta / 4;
                srtt * 7 / 8 + r / 8
            }
        };
        self.srtt = Some(srtt);
        self.base_rto = (srtt + GRANULARITY_NS.max(self.rttvar * 4)).clamp(self.min_rto, MAX_RTO_NS);
        self.backoff = 0;
    }

    /// [`sample`](Self::sample) with Linux's variance term.
    fn sample_linux(&mut self, r: u64) {
        let min_rto = self.min_rto;
        let Some(v) = self.linux.as_mut() else { return };
        match self.srtt {
            None => {
                // The first sample: the RTO is three RTTs, or SRTT + the minimum.
                self.srtt = Some(r);
                v.mdev = r * 2;
                v.term = v.mdev.max(min_rto);
                v.mdev_max = v.term;
                v.round_end = None;
            }
            Some(srtt) => {
                self.srtt = Some(srtt * 7 / 8 + r / 8);
                let err = srtt.abs_diff(r);
                let quarter = v.mdev / 4;
                if r < srtt {
                    // A falling RTT: the deviation's excess over mdev / 4 counts with a gain of
                    // 1/32 instead of 1/4.
                    if err > quarter {
                        v.mdev += (err - quarter) / 8;
                    } else {
                        v.mdev -= quarter - err;
                    }
                } else if err > quarter {
                    v.mdev += err - quarter;
                } else {
                    v.mdev -= quarter - err;
                }
                if v.mdev > v.mdev_max {
                    v.mdev_max = v.mdev;
                    v.term = v.term.max(v.mdev_max);
                }
            }
        }
        v.sampled = true;
        self.rttvar = v.mdev / 4;
        self.set_linux_rto();
        self.backoff = 0;
    }

    fn set_linux_rto(&mut self) {
        if let (Some(srtt), Some(v)) = (self.srtt, &self.linux) {
            self.base_rto = (srtt + v.term).clamp(self.min_rto, MAX_RTO_NS);
        }
    }

    /// An ACK moved SND.UNA to `una` with SND.NXT at `snd_nxt`, after its sample (if any): with
    /// Linux's variance term, a round trip ends once SND.UNA passes where it began; the term then
    /// decays by a quarter toward the round's largest deviation, and the next round starts.
    pub(crate) fn end_round(&mut self, una: SeqNumber, snd_nxt: SeqNumber) {
        let min_rto = self.min_rto;
        let Some(v) = self.linux.as_mut().filter(|v| v.sampled) else { return };
        v.sampled = false;
        match v.round_end {
            None => v.round_end = Some(snd_nxt),
            Some(end) if una > end => {
                if v.mdev_max < v.term {
                    v.term -= (v.term - v.mdev_max) / 4;
                }
                v.round_end = Some(snd_nxt);
                v.mdev_max = min_rto;
            }
            Some(_) => return,
        }
        self.set_linux_rto();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298() {
        let ms = Duration::from_millis;
        let mut e = RttEstimator::new(ms(1000), ms(200), false);
        assert_eq!(e.rto(), ms(1000));
        e.back_off();
        e.back_off();
        assert_eq!(e.rto(), ms(4000));
        e.sample(ms(100));
        assert_eq!((e.srtt(), e.rttvar()), (Some(ms(100)), ms(50)));
        assert_eq!(e.rto(), ms(300), "SRTT + 4 RTTVAR, backoff cleared");
        e.sample(ms(200));
        // RTTVAR = 3/4 * 50 + 1/4 * 100 = 62.5; SRTT = 7/8 * 100 + 1/8 * 200 = 112.5.
        assert_eq!(e.srtt(), Some(Duration::from_micros(112_500)));
        assert_eq!(e.rttvar(), Duration::from_micros(62_500));
        assert_eq!(e.rto(), Duration::from_micros(362_500));
        for _ in 0..20 {
            e.back_off();
        }
        assert_eq!(e.rto(), MAX_RTO);
        let mut e = RttEstimator::new(ms(1000), ms(1000), false);
        e.sample(ms(1));
        assert_eq!(e.rto(), ms(1000), "never below the minimum");
    }

    #[test]
    fn linux_variance_term() {
        let ms = Duration::from_millis;
        let seq = SeqNumber::new;
        let mut e = RttEstimator::new(ms(1000), ms(200), true);
        e.sample(ms(100));
        e.end_round(seq(1), seq(1));
        // mdev = 2 RTT = 200 ms: the RTO is three RTTs (RFC 6298: 300 ms as well).
        assert_eq!((e.srtt(), e.rttvar(), e.rto()), (Some(ms(100)), ms(50), ms(300)));
        // The same RTT again: RFC 6298 brings the RTO to 250 ms; Linux keeps SRTT + 200 ms, the
        // minimum bounding the variance term.
        e.sample(ms(100));
        e.end_round(seq(1001), seq(1001));
        assert_eq!((e.rttvar(), e.rto()), (Duration::from_micros(37_500), ms(300)));
        let mut rfc = RttEstimator::new(ms(1000), ms(200), false);
        rfc.sample(ms(100));
        rfc.sample(ms(100));
        assert_eq!(rfc.rto(), ms(250));
        // A jump to 400 ms: mdev = 150 - 37.5 + 300 = 412.5 ms, the round's largest: the term.
        e.sample(ms(400));
        assert_eq!(e.rto(), Duration::from_micros(137_500 + 412_500));
        // The round ends: the term stays (the round's largest is the term), the next round
        // starts from the minimum; steady samples then bring the term down by a quarter of
        // the gap per round.
        e.end_round(seq(2001), seq(3001));
        let before = e.rto();
        e.sample(ms(137));
        e.end_round(seq(3002), seq(4001));
        assert!(e.rto() < before, "{:?} < {before:?}", e.rto());
        assert!(e.rto() > ms(137) + ms(200), "{:?}", e.rto());
    }
}
