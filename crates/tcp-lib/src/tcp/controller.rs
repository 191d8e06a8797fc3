//! The controller a connection holds: the algorithm [`Config::congestion`](super::Config::congestion)
//! chose, inline (an enum, not a box), with the [`CongestionControl`] calls forwarded to it.

use std::time::{Duration, Instant};

use super::bbr::Bbr;
use super::congestion::{CongestionAlgorithm, CongestionControl, Cubic, NewReno, RateSample};
use super::cubic_linux::LinuxCubic;

impl CongestionAlgorithm {
    /// A fresh instance of the algorithm.
    #[must_use]
    pub fn build(self) -> Box<dyn CongestionControl> {
        match self {
            Self::NewReno => Box::new(NewReno::new()),
            Self::Cubic => Box::new(Cubic::new()),
            Self::LinuxCubic => Box::new(LinuxCubic::new()),
            Self::Bbr => Box::new(Bbr::new()),
        }
    }
}

/// The algorithm a connection runs, held inline in the connection: no allocation per connection
/// and no virtual call per event (the [`CongestionControl`] trait stays the interface).
#[derive(Clone, Debug)]
pub(crate) enum Controller {
    NewReno(NewReno),
    Cubic(Cubic),
    LinuxCubic(LinuxCubic),
    /// Boxed: BBR's model (its filters and clocks) is more than twice CUBIC's state, and the
    /// connections that do not run it should not carry its size.
    Bbr(Box<Bbr>),
}

impl CongestionAlgorithm {
    /// A fresh [`Controller`] running the algorithm; for BBR, a CUBIC that stands in until
    /// the connection, in its place, attaches BBR (`Connection::finish_open`): BBR's model is
    /// boxed, and an allocation inside the connection's constructor would make the stack build
    /// every connection in a temporary and copy its 2 KB into the table.
    pub(crate) fn controller(self) -> Controller {
        match self {
            Self::NewReno => Controller::NewReno(NewReno::new()),
            Self::Cubic => Controller::Cubic(Cubic::new()),
            Self::LinuxCubic => Controller::LinuxCubic(LinuxCubic::new()),
            Self::Bbr => Controller::Cubic(Cubic::new()),
        }
    }
}

impl Controller {
    /// A fresh BBR.
    pub(crate) fn bbr() -> Self {
        Self::Bbr(Box::default())
    }
}

/// Forwards a call to the algorithm the controller holds.
macro_rules! dispatch {
    ($self:ident, $c:ident => $call:expr) => {
        match $self {
            Controller::NewReno($c) => $call,
            Controller::Cubic($c) => $call,
            Controller::LinuxCubic($c) => $call,
            Controller::Bbr($c) => $call,
        }
    };
}

impl CongestionControl for Controller {
    fn window(&self) -> usize {
        dispatch!(self, c => c.window())
    }

    fn ssthresh(&self) -> usize {
        dispatch!(self, c => c.ssthresh())
    }

    fn on_established(&mut self, initial_window: usize) {
        dispatch!(self, c => c.on_established(initial_window));
    }

    fn on_ack(&mut self, acked: usize, mss: usize, now: Instant, srtt: Duration) {
        dispatch!(self, c => c.on_ack(acked, mss, now, srtt));
    }

    fn on_enter_recovery(&mut self, flight: usize, mss: usize) {
        dispatch!(self, c => c.on_enter_recovery(flight, mss));
    }

    fn on_exit_recovery(&mut self) {
        dispatch!(self, c => c.on_exit_recovery());
    }

    fn on_rto(&mut self, flight: usize, mss: usize) {
        dispatch!(self, c => c.on_rto(flight, mss));
    }

    fn on_undo(&mut self, cwnd: usize, ssthresh: usize) {
        dispatch!(self, c => c.on_undo(cwnd, ssthresh));
    }

    fn exit_slow_start(&mut self) {
        dispatch!(self, c => c.exit_slow_start());
    }

    fn set_slow_start_divisor(&mut self, divisor: u32) {
        dispatch!(self, c => c.set_slow_start_divisor(divisor));
    }

    fn on_delay_sample(&mut self, rtt: Duration, now: Instant) {
        dispatch!(self, c => c.on_delay_sample(rtt, now));
    }

    fn on_idle_restart(&mut self, idle: Duration, now: Instant) {
        dispatch!(self, c => c.on_idle_restart(idle, now));
    }

    fn on_restart_window(&mut self, cwnd: usize, ssthresh: usize) {
        dispatch!(self, c => c.on_restart_window(cwnd, ssthresh));
    }

    fn on_rate_sample(&mut self, rs: &RateSample, now: Instant) {
        dispatch!(self, c => c.on_rate_sample(rs, now));
    }

    fn on_ack_done(&mut self) {
        dispatch!(self, c => c.on_ack_done());
    }

    fn pacing_rate(&self) -> Option<u64> {
        dispatch!(self, c => c.pacing_rate())
    }

    fn owns_recovery_window(&self) -> bool {
        dispatch!(self, c => c.owns_recovery_window())
    }
}
