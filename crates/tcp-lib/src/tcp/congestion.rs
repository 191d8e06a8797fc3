//! Congestion control behind a small trait, and NewReno (RFC 5681 slow start and congestion
//! avoidance, RFC 6582 fast recovery window arithmetic, RFC 3465 byte counting limited to one
//! SMSS per ACK).
//!
//! The connection owns the loss *detection* (duplicate ACK counting, the recovery point, the
//! retransmission timer); an algorithm only decides the congestion window at each event. CUBIC
//! (RFC 9438) will be a second implementation of the same trait.

use std::fmt;

/// A congestion control algorithm: the congestion window and slow-start threshold in bytes,
/// updated at the events the connection reports. `mss` is the sender's maximum segment size
/// (SMSS) and `flight` the bytes in flight when the event happened.
pub trait CongestionControl: fmt::Debug + Send {
    /// The congestion window (cwnd), in bytes.
    fn window(&self) -> usize;

    /// The slow-start threshold (ssthresh), in bytes.
    fn ssthresh(&self) -> usize;

    /// The handshake completed and the MSS is known: set the initial window.
    fn on_established(&mut self, mss: usize);

    /// `acked` bytes of new data were acknowledged outside fast recovery.
    fn on_ack(&mut self, acked: usize, mss: usize);

    /// The third duplicate ACK: fast retransmit and enter fast recovery.
    fn on_enter_recovery(&mut self, flight: usize, mss: usize);

    /// Another duplicate ACK during fast recovery: one more segment has left the network.
    fn on_recovery_dup_ack(&mut self, mss: usize);

    /// A partial ACK during fast recovery acknowledged `acked` bytes.
    fn on_partial_ack(&mut self, acked: usize, mss: usize);

    /// A full ACK ended fast recovery with `flight` bytes still in flight.
    fn on_exit_recovery(&mut self, flight: usize, mss: usize);

    /// The retransmission timer expired.
    fn on_rto(&mut self, flight: usize, mss: usize);
}

/// Which congestion control a connection uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CongestionAlgorithm {
    /// [`NewReno`].
    #[default]
    NewReno,
}

impl CongestionAlgorithm {
    /// A fresh instance of the algorithm.
    #[must_use]
    pub fn build(self) -> Box<dyn CongestionControl> {
        match self {
            Self::NewReno => Box::new(NewReno::new()),
        }
    }
}

/// NewReno: RFC 5681 with the RFC 6582 fast recovery window updates.
#[derive(Clone, Debug)]
pub struct NewReno {
    cwnd: usize,
    ssthresh: usize,
    /// Bytes acknowledged in congestion avoidance since cwnd last grew (RFC 5681 §3.1, the
    /// byte-counting variant of "cwnd += SMSS*SMSS/cwnd").
    acked_in_ca: usize,
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
        Self { cwnd: 536, ssthresh: usize::MAX, acked_in_ca: 0 }
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

    fn on_established(&mut self, mss: usize) {
        self.cwnd = Self::initial_window(mss);
    }

    fn on_ack(&mut self, acked: usize, mss: usize) {
        if self.cwnd < self.ssthresh {
            // Slow start: at most one SMSS per ACK (RFC 5681 §3.1, RFC 3465 L = 1).
            self.cwnd = self.cwnd.saturating_add(acked.min(mss));
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
        self.cwnd = self.ssthresh + 3 * mss;
        self.acked_in_ca = 0;
    }

    fn on_recovery_dup_ack(&mut self, mss: usize) {
        self.cwnd = self.cwnd.saturating_add(mss);
    }

    fn on_partial_ack(&mut self, acked: usize, mss: usize) {
        // RFC 6582 §3.2 step 5: deflate by the amount acknowledged, add back one SMSS if at
        // least one SMSS was acknowledged.
        self.cwnd = self.cwnd.saturating_sub(acked);
        if acked >= mss {
            self.cwnd += mss;
        }
        self.cwnd = self.cwnd.max(mss);
    }

    fn on_exit_recovery(&mut self, flight: usize, mss: usize) {
        // RFC 6582 §3.2 step 3, option (1) with the burst guard: min(ssthresh, max(FlightSize,
        // SMSS) + SMSS).
        self.cwnd = self.ssthresh.min(flight.max(mss) + mss);
    }

    fn on_rto(&mut self, flight: usize, mss: usize) {
        // RFC 5681 §3.1: ssthresh per equation 4, cwnd = loss window (one SMSS).
        self.ssthresh = Self::reduced(flight, mss);
        self.cwnd = mss;
        self.acked_in_ca = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newreno_phases() {
        let mss = 1000;
        let mut c = CongestionAlgorithm::NewReno.build();
        c.on_established(mss);
        assert_eq!(c.window(), 4000, "IW for SMSS <= 1095 is 4 segments");
        c.on_ack(3000, mss);
        assert_eq!(c.window(), 5000, "slow start: one SMSS per ACK at most");
        c.on_enter_recovery(10_000, mss);
        assert_eq!((c.ssthresh(), c.window()), (5000, 8000));
        c.on_recovery_dup_ack(mss);
        assert_eq!(c.window(), 9000);
        c.on_partial_ack(2500, mss);
        assert_eq!(c.window(), 7500);
        c.on_exit_recovery(3000, mss);
        assert_eq!(c.window(), 4000, "min(ssthresh, flight + SMSS)");
        c.on_ack(1000, mss);
        assert_eq!(c.window(), 5000, "4000 < ssthresh 5000: still slow start");
        for _ in 0..5 {
            c.on_ack(1000, mss);
        }
        assert_eq!(c.window(), 6000, "congestion avoidance: one SMSS per window acked");
        c.on_rto(6000, mss);
        assert_eq!((c.ssthresh(), c.window()), (3000, 1000));
        c.on_rto(1000, mss);
        assert_eq!(c.ssthresh(), 2000, "never below 2 SMSS");
        assert_eq!(NewReno::initial_window(1460), 4380);
        assert_eq!(NewReno::initial_window(4000), 8000);
    }
}
