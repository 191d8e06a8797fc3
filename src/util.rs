//! Small helpers the examples' services share: percentiles.

use std::time::Duration;

/// The `permille`/1000 quantile (nearest rank) of `sorted`.
pub(crate) fn percentile(sorted: &[Duration], permille: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * permille).div_ceil(1000);
    sorted[rank.clamp(1, sorted.len()) - 1]
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
