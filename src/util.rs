//! Small helpers the examples' services share: percentiles, the TCP
//! tuning of both ends, live counters, and the runtime's part of a summary.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tcp_lib::stack::Config as StackConfig;

/// The client's exchange latencies: an HdrHistogram (Gil Tene's High Dynamic Range Histogram, the
/// `hdrhistogram` crate) of nanoseconds from 1 ns to an hour at three significant digits, so its
/// memory is fixed however long the run is; a latency past an hour counts as an hour.
pub(crate) struct Latencies(hdrhistogram::Histogram<u64>);

/// The longest latency the histogram tells apart: an hour, in nanoseconds.
const LATENCY_MAX_NS: u64 = 3_600_000_000_000;

impl Latencies {
    pub(crate) fn new() -> Self {
        // Constant bounds that `new_with_bounds` accepts (low >= 1, high >= 2 * low, at most 5
        // significant digits): it cannot fail.
        Self(hdrhistogram::Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3).expect("constant, valid bounds"))
    }

    pub(crate) fn record(&mut self, latency: Duration) {
        self.0.saturating_record(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The 50th, 90th and 99th percentiles and the maximum; zeros when nothing was recorded.
    pub(crate) fn summary(&self) -> [Duration; 4] {
        let at = |q: f64| Duration::from_nanos(self.0.value_at_quantile(q));
        [at(0.5), at(0.9), at(0.99), Duration::from_nanos(self.0.max())]
    }
}

/// Request/response tuning for both ends (the cores' stacks and the model client's): no Nagle,
/// and Linux's 200 ms minimum RTO.
pub(crate) fn tcp_tuning(config: &mut StackConfig) {
    config.tcp.nodelay = true;
    config.tcp.min_rto = Duration::from_millis(200);
    config.tcp.initial_rto = Duration::from_millis(200);
}

/// Adds `n` to a live counter (a service's, read by the progress line while it runs).
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    // Relaxed: counters; the runtime's joins order the final reads.
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A live counter's value.
pub(crate) fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// This thread's CPU time so far (Linux: the first field of `/proc/thread-self/schedstat`, ns).
pub(crate) fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = text.split_whitespace().next()?.parse::<u64>().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Bytes in MiB.
pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// The lines a service's summary ends with: the runtime's report less its setup line (which the
/// service's own first line carries): the cores whose service failed, the devices' summaries and
/// every pool's audit.
pub(crate) fn runtime_lines(f: &mut fmt::Formatter<'_>, runtime: &netchannel_runtime::Report) -> fmt::Result {
    let text = runtime.to_string();
    f.write_str(text.split_once('\n').map_or("", |(_setup, rest)| rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        // The nearest-rank figures of 1..=100 us are 50, 90, 99 and 100 us; the histogram's agree
        // within its three significant digits.
        let mut l = Latencies::new();
        assert_eq!(l.summary(), [Duration::ZERO; 4]);
        for us in (1..=100).rev() {
            l.record(Duration::from_micros(us));
        }
        for (got, want) in l.summary().into_iter().zip([50, 90, 99, 100]) {
            let want = Duration::from_micros(want);
            assert!(got >= want && got <= want + want / 1000, "{got:?} vs {want:?}");
        }
        // Past the top: counted at the top, not lost.
        l.record(Duration::from_secs(7200));
        assert!(l.summary()[3] >= Duration::from_secs(3600), "{:?}", l.summary());
    }
}
