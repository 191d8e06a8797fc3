//! Reporting: medians, paired ratios and the Markdown tables.

use std::fmt::Write as _;

use crate::measure::Sample;

/// Samples of one contender over the rounds.
#[derive(Clone, Debug, Default)]
pub(crate) struct Series {
    pub(crate) name: String,
    /// The successful runs, each with the round it ran in (ratios pair samples of the same round).
    pub(crate) samples: Vec<(usize, Sample)>,
    pub(crate) failures: Vec<String>,
}

/// `f(ours) / f(theirs)` for every round in which both ran: a failed round of either side drops
/// that round's pair and shifts no other.
fn paired_ratios(ours: &Series, theirs: &Series, f: fn(&Sample) -> f64) -> Vec<f64> {
    ours.samples
        .iter()
        .filter_map(|(round, o)| theirs.samples.iter().find(|(r, _)| r == round).map(|(_, t)| f(o) / f(t)))
        .collect()
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { f64::midpoint(v[n / 2 - 1], v[n / 2]) }
}

/// Formats a rate with three significant figures.
pub(crate) fn fmt_rate(x: f64) -> String {
    if !x.is_finite() {
        "-".to_owned()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Prints one group's table: per contender medians, and ratios of `ours` (the first series) to
/// each other one, median of the per-round ratios.
pub(crate) fn table(title: &str, unit: &str, scale: f64, series: &[Series]) {
    println!("\n### {title}\n");
    println!(
        "| contender | runs | wall {unit}/s (median) | min..max | {unit} per CPU-s (median) | CPU-s per wall-s | {0} / this, wall (paired) | {0} / this, per CPU-s (paired) |",
        series[0].name
    );
    println!("|---|---:|---:|---|---:|---:|---:|---:|");
    let ours = &series[0];
    for s in series {
        let wall: Vec<f64> = s.samples.iter().map(|(_, x)| x.per_sec() / scale).collect();
        let cpu: Vec<f64> = s.samples.iter().map(|(_, x)| x.per_cpu_sec() / scale).collect();
        let util: Vec<f64> = s.samples.iter().map(|(_, x)| x.cpu_total() / x.wall.as_secs_f64()).collect();
        let lo = wall.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = wall.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let paired = |f: fn(&Sample) -> f64| {
            let r = paired_ratios(ours, s, f);
            if std::ptr::eq(s, ours) || r.is_empty() { String::new() } else { format!("{:.2}x", median(r)) }
        };
        let mut row = format!(
            "| {} | {} | {} | {}..{} | {} | {:.2} | {} | {} |",
            s.name,
            s.samples.len(),
            fmt_rate(median(wall)),
            fmt_rate(lo),
            fmt_rate(hi),
            fmt_rate(median(cpu)),
            median(util),
            paired(Sample::per_sec),
            paired(Sample::per_cpu_sec),
        );
        if !s.failures.is_empty() {
            let _ = write!(row, " ({} failed: {})", s.failures.len(), s.failures[0]);
        }
        println!("{row}");
    }
}

/// Adds round `round`'s result to `series` (a failure is kept apart and reported with the table).
pub(crate) fn record(series: &mut Series, round: usize, r: Result<Sample, String>) {
    match r {
        Ok(x) => {
            eprintln!(
                "  {:<22} {:>10.1} /s wall  {:>10.1} /CPU-s  cpu {:.3}+{:.3} s  wall {:.3} s",
                series.name,
                x.per_sec(),
                x.per_cpu_sec(),
                x.cpu[0].as_secs_f64(),
                x.cpu[1].as_secs_f64(),
                x.wall.as_secs_f64()
            );
            series.samples.push((round, x));
        }
        Err(e) => {
            eprintln!("  {:<22} FAILED: {e}", series.name);
            series.failures.push(e);
        }
    }
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|_| "?".to_owned(), |s| s.trim().to_owned())
}

pub(crate) fn series(names: &[&str]) -> Vec<Series> {
    names.iter().map(|n| Series { name: (*n).to_owned(), ..Series::default() }).collect()
}

/// Runs `f(i)` for every contender `i` of a round, starting at a rotating offset.
pub(crate) fn rotated(round: usize, n: usize, mut f: impl FnMut(usize)) {
    for k in 0..n {
        f((round + k) % n);
    }
}
