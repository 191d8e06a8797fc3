//! The settings, read from the environment (the knobs are listed in the bench's top doc).

#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) rounds: usize,
    pub(crate) bytes: u64,
    pub(crate) txns: u64,
    /// Stack buffer sizes the transaction workload runs with (one table each).
    pub(crate) txn_bufs: Vec<usize>,
    pub(crate) tap_bytes: u64,
    pub(crate) buf: usize,
    pub(crate) busy: bool,
}

/// A byte count with an optional `K`/`M`/`G` suffix.
pub(crate) fn parse_bytes(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mul) = match v.as_bytes().last() {
        Some(b'K' | b'k') => (&v[..v.len() - 1], 1 << 10),
        Some(b'M' | b'm') => (&v[..v.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mul)
}

/// A byte count from `var`, or `default`.
pub(crate) fn env_bytes(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().and_then(|v| parse_bytes(&v)).unwrap_or(default)
}

pub(crate) fn env_usize(var: &str, default: usize) -> usize {
    usize::try_from(env_bytes(var, default as u64)).unwrap_or(default)
}

impl Settings {
    pub(crate) fn from_env() -> Self {
        Self {
            rounds: env_usize("TCP_BENCH_ROUNDS", 5).max(1),
            bytes: env_bytes("TCP_BENCH_BYTES", 64 << 20),
            txns: env_bytes("TCP_BENCH_TXNS", 5000),
            txn_bufs: std::env::var("TCP_BENCH_TXN_BUFS")
                .unwrap_or_else(|_| "256K,16K".to_owned())
                .split(',')
                .filter_map(|v| parse_bytes(v).and_then(|n| usize::try_from(n).ok()))
                .collect(),
            tap_bytes: env_bytes("TCP_BENCH_TAP_BYTES", 32 << 20),
            buf: env_usize("TCP_BENCH_BUF", 256 << 10),
            busy: std::env::var("TCP_BENCH_POLL").is_ok_and(|v| v == "busy"),
        }
    }
}
