//! Measuring: per-thread CPU time, the clock of one side, samples, and the two-thread harness.

use crate::common;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

/// This thread's CPU time (user + system).
pub(crate) fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), u32::try_from(ts.tv_nsec).unwrap_or(0))
}

/// What one side of a run measured: its CPU time over the run, and when its timed part started and
/// ended.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Side {
    pub(crate) cpu: Duration,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
}

/// Starts a side's clocks.
pub(crate) struct Clock {
    pub(crate) cpu: Duration,
    pub(crate) start: Instant,
}

impl Clock {
    pub(crate) fn start() -> Self {
        Self { cpu: thread_cpu(), start: Instant::now() }
    }

    pub(crate) fn stop(self) -> Side {
        Side { cpu: thread_cpu().saturating_sub(self.cpu), start: self.start, end: Instant::now() }
    }
}

/// One run of one contender.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    /// Bytes or transactions.
    pub(crate) units: u64,
    pub(crate) wall: Duration,
    /// CPU time of each side (sender/client/stack, receiver/server/kernel).
    pub(crate) cpu: [Duration; 2],
}

impl Sample {
    pub(crate) fn per_sec(&self) -> f64 {
        self.units as f64 / self.wall.as_secs_f64()
    }

    pub(crate) fn cpu_total(&self) -> f64 {
        self.cpu[0].as_secs_f64() + self.cpu[1].as_secs_f64()
    }

    pub(crate) fn per_cpu_sec(&self) -> f64 {
        self.units as f64 / self.cpu_total()
    }
}

/// Runs `a` and `b` on two threads pinned to CPU 0 and 1; each gets a barrier to wait at once set
/// up (so set-up is not timed).
pub(crate) fn two_threads<A, B>(a: A, b: B) -> Result<(Side, Side), String>
where
    A: FnOnce(&Barrier) -> Result<Side, String> + Send,
    B: FnOnce(&Barrier) -> Result<Side, String> + Send,
{
    let barrier = Barrier::new(2);
    thread::scope(|s| {
        let ha = s.spawn(|| {
            common::pin_to_cpu(0);
            a(&barrier)
        });
        let hb = s.spawn(|| {
            common::pin_to_cpu(1);
            b(&barrier)
        });
        let ra = ha.join().map_err(|_| "side A panicked".to_owned())?;
        let rb = hb.join().map_err(|_| "side B panicked".to_owned())?;
        Ok((ra?, rb?))
    })
}
