//! Small helpers the examples' services share: percentiles, the client's random numbers, the TCP
//! tuning of both ends, live counters, and the runtime's part of a summary.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tcp_lib::stack::Config as StackConfig;

/// The `permille`/1000 quantile (nearest rank) of `sorted`.
pub(crate) fn percentile(sorted: &[Duration], permille: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * permille).div_ceil(1000);
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// xorshift64*: the model clients' choices, echo's message contents, httpd's demo files.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
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
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&v, 500), Duration::from_micros(50));
        assert_eq!(percentile(&v, 990), Duration::from_micros(99));
        assert_eq!(percentile(&[], 500), Duration::ZERO);
    }
}
