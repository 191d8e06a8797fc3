//! Pacing ([`Config::pacing`](super::Config::pacing)): a connection's data leaves spread over the
//! round trip at a rate derived from its congestion window, instead of in bursts as ACKs open
//! the window.
//!
//! A window-limited sender sends a whole window at once when it starts or comes back from idle,
//! and as many segments as an ACK covers after that: bursts that a shallow queue at the
//! bottleneck (a switch port, a shaper, a Wi-Fi driver) drops from, although the average rate
//! would fit. Pacing sends each packet at its earliest departure time instead, as Linux does
//! under the `fq` qdisc or with its internal pacing (the earliest departure time model, "EDT":
//! Jacobson et al., "Evolving from AFAP: Teaching NICs about time", Netdev 0x12, 2018):
//!
//! * the rate is `tcp_update_pacing_rate`'s: cwnd per smoothed RTT (the larger of cwnd and the
//!   flight), at [`Pacing::ss_ratio`] percent in slow start (cwnd below half ssthresh: 200 %, so
//!   the window can still double per round trip) and [`Pacing::ca_ratio`] after it (120 %), at
//!   most [`Pacing::max_rate`]; without an RTT sample nothing is paced;
//! * every data transmission (new data and retransmissions; a super-segment counts whole, as
//!   Linux paces its TSO packets) moves the next departure time on by its payload at that rate,
//!   from the later of the previous departure time and now (`tcp_update_skb_after_send`); a
//!   transmission that left late gets up to half its interval back ("OS jitter" credit), so a
//!   sender woken late does not fall behind its rate;
//! * the first ten segments of a connection are not paced (`sch_fq`'s initial quantum, which
//!   Linux keeps: "Original sch_fq does not pace first 10 MSS");
//! * while the next departure time is ahead, [`Connection::poll_transmit`] sends no data (ACKs,
//!   resets, window and tail loss probes still go) and the pacing deadline is one of
//!   [`Connection::poll_timeout`]'s timers: a paced connection sleeps until it, never spins
//!   (Linux's `tcp_pacing_check` arms an hrtimer the same way).
//!
//! This is Linux's internal pacing, where a packet is built when it may leave. Under `fq`, Linux
//! hands the qdisc up to two packets ahead (TCP Small Queues), each stamped with its departure
//! time when handed over, so an ACK that arrives meanwhile changes the rate one or two packets
//! later than here: departures differ by a fraction of a packet interval (packetdrill's
//! `slow-start-fq-ack-per-2pkt.pkt` allows 4 ms and tcp-lib's are within 3 ms of its times).
//!
//! The TSO packet sizes of [`Push::Linux`](super::Push::Linux) follow the same rate
//! (`tcp_tso_autosize`: about a millisecond of it). [`Stats::paced`] counts the transmissions
//! that waited for their departure time, [`Stats::pacing_wait`] how long they waited in all, and
//! [`Stats::pacing_rate`] is the rate of the last one.
//!
//! [`Connection::poll_transmit`]: super::Connection::poll_transmit
//! [`Connection::poll_timeout`]: super::Connection::poll_timeout
//! [`Stats::paced`]: super::Stats::paced
//! [`Stats::pacing_wait`]: super::Stats::pacing_wait
//! [`Stats::pacing_rate`]: super::Stats::pacing_rate

use std::time::{Duration, Instant};

/// How a connection paces its data ([`Config::pacing`](super::Config::pacing)).
///
/// ```
/// use tcp_lib::tcp::{Config, Pacing};
///
/// // Linux's ratios, and never more than 100 Mbit/s.
/// let pacing = Pacing { max_rate: Some(12_500_000), ..Pacing::LINUX };
/// let config = Config { pacing: Some(pacing), ..Config::default() };
/// assert_eq!(config.pacing.map(|p| p.ca_ratio), Some(120));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    /// The rate in slow start (cwnd below half of ssthresh), in percent of cwnd per smoothed RTT:
    /// Linux's `tcp_pacing_ss_ratio` (200).
    pub ss_ratio: u16,
    /// The rate after slow start, in percent of cwnd per smoothed RTT: Linux's
    /// `tcp_pacing_ca_ratio` (120).
    pub ca_ratio: u16,
    /// The most bytes per second, whatever the window (Linux's `SO_MAX_PACING_RATE`); `None`: no
    /// cap. A rate of 0 (a cap of 0, or a window too small for a byte per second) paces nothing:
    /// the windows alone hold the data then.
    pub max_rate: Option<u64>,
}

impl Pacing {
    /// Linux's defaults: 200 % in slow start, 120 % after, no cap.
    pub const LINUX: Self = Self { ss_ratio: 200, ca_ratio: 120, max_rate: None };
}

impl Default for Pacing {
    fn default() -> Self {
        Self::LINUX
    }
}

/// Segments a connection sends before pacing starts (Linux: "Original sch_fq does not pace first
/// 10 MSS").
pub(crate) const UNPACED_START: u32 = 10;

/// The pacing rate in bytes per second (Linux's `tcp_update_pacing_rate`): `window` bytes (the
/// larger of cwnd and the flight) per `srtt`, at `ss_ratio` percent while `cwnd` is below half
/// of `ssthresh`, else `ca_ratio` percent, at most `max_rate`. `None` without an RTT sample
/// (Linux divides by nothing then: no pacing).
pub(crate) fn rate(
    p: &Pacing,
    window: usize,
    cwnd: usize,
    ssthresh: usize,
    srtt: Option<Duration>,
) -> Option<u64> {
    let srtt = srtt.filter(|r| !r.is_zero())?;
    let ratio = u128::from(if cwnd < ssthresh / 2 { p.ss_ratio } else { p.ca_ratio });
    let rate = window as u128 * ratio * 1_000_000 / 100 / srtt.as_micros().max(1);
    let rate = u64::try_from(rate).unwrap_or(u64::MAX);
    Some(p.max_rate.map_or(rate, |m| rate.min(m)))
}

/// A connection's pacing state: the earliest departure time of its next data transmission
/// (Linux's `tcp_wstamp_ns`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pacer {
    /// When the next data transmission may leave (`None`: none sent yet).
    next: Option<Instant>,
    /// Data segments sent, counted up to [`UNPACED_START`].
    segments: u32,
    /// When [`hold`](Self::hold) first held back the transmission now waiting, if one is.
    waiting: Option<Instant>,
}

impl Pacer {
    /// The departure time a data transmission must wait for at `now`, if it is ahead.
    pub(crate) fn departure(&self, now: Instant) -> Option<Instant> {
        self.next.filter(|&t| t > now)
    }

    /// A data transmission is held back at `now` until [`departure`](Self::departure).
    pub(crate) fn hold(&mut self, now: Instant) {
        self.waiting.get_or_insert(now);
    }

    /// A data transmission of `bytes` in `segments` segments left at `now`, paced at `rate`
    /// bytes per second: the next departure time moves on (`tcp_update_skb_after_send`). Returns
    /// how long the pacing held it back, if [`hold`](Self::hold) did: from the first hold to the
    /// departure time (not beyond: what the windows held it for after that is not the pacing's).
    pub(crate) fn sent(
        &mut self,
        now: Instant,
        bytes: usize,
        segments: u32,
        rate: Option<u64>,
    ) -> Option<Duration> {
        let prior = self.next.unwrap_or(now);
        let start = prior.max(now);
        let waited = self.waiting.take().map(|held| prior.saturating_duration_since(held));
        self.segments = self.segments.saturating_add(segments).min(UNPACED_START);
        let mut next = start;
        if let Some(rate) = rate.filter(|&r| r > 0)
            && self.segments >= UNPACED_START
        {
            let nanos = u128::try_from(bytes).unwrap_or(u128::MAX) * 1_000_000_000 / u128::from(rate);
            let interval = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
            // Linux's "OS jitter" credit: a transmission that left after its departure time gets
            // up to half its interval back.
            let late = start - prior;
            next += interval - late.min(interval / 2);
        }
        self.next = Some(next);
        waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_rate_is_linuxs() {
        let p = Pacing::LINUX;
        let srtt = Some(100 * MS);
        // 10 segments of 1460 per 100 ms, at 200 % in slow start: 292 000 bytes/s.
        assert_eq!(rate(&p, 14_600, 14_600, usize::MAX, srtt), Some(292_000));
        // At or above half of ssthresh: 120 %.
        assert_eq!(rate(&p, 14_600, 14_600, 29_200, srtt), Some(175_200));
        // The flight counts when it exceeds cwnd.
        assert_eq!(rate(&p, 29_200, 14_600, 29_200, srtt), Some(350_400));
        assert_eq!(rate(&Pacing { max_rate: Some(1000), ..p }, 14_600, 14_600, usize::MAX, srtt), Some(1000));
        assert_eq!(rate(&p, 14_600, 14_600, usize::MAX, None), None);
    }

    #[test]
    fn departures_follow_the_rate_after_ten_segments() {
        let t0 = Instant::now();
        let mut pacer = Pacer::default();
        // 1000 bytes per ms.
        let rate = Some(1_000_000);
        for _ in 0..4 {
            assert_eq!(pacer.departure(t0), None);
            pacer.sent(t0, 2000, 2, rate);
        }
        assert_eq!(pacer.departure(t0), None, "eight segments: unpaced");
        pacer.sent(t0, 2000, 2, rate);
        assert_eq!(pacer.departure(t0), Some(t0 + 2 * MS), "the tenth segment starts the pacing");
        pacer.hold(t0);
        assert_eq!(pacer.departure(t0 + MS), Some(t0 + 2 * MS));
        pacer.hold(t0 + MS);
        assert_eq!(pacer.sent(t0 + 2 * MS, 2000, 2, rate), Some(2 * MS), "it waited since t0");
        assert_eq!(pacer.departure(t0 + 3 * MS), Some(t0 + 4 * MS));
        pacer.hold(t0 + 3 * MS);
        // Sent 6 ms late (the windows held it): the pacing held it 1 ms, and half of the next
        // interval is given back.
        assert_eq!(pacer.sent(t0 + 10 * MS, 2000, 2, rate), Some(MS));
        assert_eq!(pacer.sent(t0 + 11 * MS, 2000, 2, None), None, "no RTT: no interval");
        assert_eq!(pacer.departure(t0 + 11 * MS), None);
    }
}
