//! The retransmission timeout estimator of RFC 6298.

use std::time::Duration;

/// The upper bound RFC 6298 §2.5 allows (at least 60 s).
pub(crate) const MAX_RTO: Duration = Duration::from_secs(60);
/// Clock granularity G of RFC 6298 §2.3 (our timestamps tick in milliseconds).
const GRANULARITY: Duration = Duration::from_millis(1);

/// SRTT, RTTVAR and the RTO with its exponential backoff (RFC 6298 §2, §5.5).
#[derive(Clone, Debug)]
pub(crate) struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// The RTO computed from the estimates, before backoff.
    base_rto: Duration,
    /// Doublings applied since the last sample (RFC 6298 §5.5; kept until a new sample arrives,
    /// §5.7).
    backoff: u32,
    min_rto: Duration,
}

impl RttEstimator {
    /// Before any sample: RTO = `initial` (RFC 6298 §2.1: 1 s).
    pub(crate) fn new(initial: Duration, min_rto: Duration) -> Self {
        Self {
            srtt: None,
            rttvar: Duration::ZERO,
            base_rto: initial.clamp(min_rto, MAX_RTO),
            backoff: 0,
            min_rto,
        }
    }

    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    pub(crate) fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// The current RTO, backoff included, at most [`MAX_RTO`].
    pub(crate) fn rto(&self) -> Duration {
        let mut rto = self.base_rto;
        for _ in 0..self.backoff {
            rto = rto.saturating_mul(2);
            if rto >= MAX_RTO {
                return MAX_RTO;
            }
        }
        rto
    }

    /// Doubles the RTO (a retransmission timer expired).
    pub(crate) fn back_off(&mut self) {
        if self.rto() < MAX_RTO {
            self.backoff += 1;
        }
    }

    /// Takes an RTT measurement (RFC 6298 §2.2 and §2.3, alpha = 1/8, beta = 1/4, K = 4) and
    /// clears the backoff.
    pub(crate) fn sample(&mut self, r: Duration) {
        let r = r.min(MAX_RTO);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let delta = srtt.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + delta / 4;
                self.srtt = Some(srtt * 7 / 8 + r / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(r);
        self.base_rto = (srtt + GRANULARITY.max(self.rttvar * 4)).clamp(self.min_rto, MAX_RTO);
        self.backoff = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298() {
        let ms = Duration::from_millis;
        let mut e = RttEstimator::new(ms(1000), ms(200));
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
        let mut e = RttEstimator::new(ms(1000), ms(1000));
        e.sample(ms(1));
        assert_eq!(e.rto(), ms(1000), "never below the minimum");
    }
}
