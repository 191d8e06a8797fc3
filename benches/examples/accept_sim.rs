//! The Affinity-Accept load-balancer experiment, simulated: [`accept_affinity::sim`] run for the six
//! accept-queue configurations, balanced and with a CPU hog on half of the cores. Prints the results
//! table (Markdown) and the paper's targets with verdicts, and writes
//! `target/accept-sim/latency.png`: the median connection latency over time around the hog's start.
//!
//! ```text
//! cargo run --release -p netchannels-benches --example accept_sim          # 48 cores, the paper's experiment
//! cargo run --release -p netchannels-benches --example accept_sim -- --quick                 # 8 cores
//! cargo run --release -p netchannels-benches --example accept_sim -- --hog-share 0.8 # a hungrier hog
//! cargo run --release -p netchannels-benches --example accept_sim -- --backlog 511   # Apache's backlog
//! ```
//!
//! Text in the plot uses `/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf` (Debian `fonts-dejavu-core`);
//! without it the plot is drawn without text.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Instant;

use accept_affinity::sim::{self, SimConfig, SimResult, Variant};
use plotters::prelude::*;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut cfg = if quick { SimConfig::quick() } else { SimConfig::paper() };
    cfg.verify = false;
    if let Some(i) = args.iter().position(|a| a == "--hog-share") {
        let share: f64 = args.get(i + 1).ok_or("--hog-share needs a value")?.parse()?;
        cfg.hog.as_mut().ok_or("no hog")?.share = share;
    }
    if let Some(i) = args.iter().position(|a| a == "--backlog") {
        cfg.backlog = args.get(i + 1).ok_or("--backlog needs a value")?.parse()?;
    }
    let balanced_cfg = cfg.balanced();
    let started = Instant::now();
    let rows: Vec<(Variant, SimResult, SimResult)> =
        Variant::ALL.into_iter().map(|v| (v, sim::run(&balanced_cfg, v), sim::run(&cfg, v))).collect();
    let took = started.elapsed();
    print_table(&cfg, &rows);
    print_targets(&rows);
    let dir = target_dir().join("accept-sim");
    std::fs::create_dir_all(&dir)?;
    let png = dir.join("latency.png");
    let text = plot(&cfg, &rows, &png)?;
    println!();
    println!(
        "plot: {}{}; simulated in {:.2} s of wall time",
        png.display(),
        if text { "" } else { " (no font found: drawn without text)" },
        took.as_secs_f64()
    );
    Ok(())
}

/// `CARGO_TARGET_DIR`, else `target/` of the workspace this example was built in (the parent of
/// this package's folder, benches/).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"), PathBuf::from)
}

fn ms(x: f64) -> String {
    format!("{:.0}", x * 1e3)
}

fn print_table(cfg: &SimConfig, rows: &[(Variant, SimResult, SimResult)]) {
    let hog = cfg.hog.as_ref().expect("the experiment has a hog");
    println!(
        "{} cores, {:.0}% load ({:.0} connections/s, {:.2} ms CPU per connection), backlog {}, hog taking {:.0}% \
         of cores {}..{} from {:.0} s with {:.0} s of work (solo time), seed {:#x}",
        cfg.cores,
        cfg.load * 100.0,
        cfg.arrival_rate(),
        cfg.mean_connection_cpu() * 1e3,
        cfg.backlog,
        hog.share * 100.0,
        cfg.cores - cfg.cores / 2,
        cfg.cores - 1,
        hog.start.as_secs_f64(),
        hog.work.as_secs_f64(),
        cfg.seed,
    );
    println!();
    println!(
        "| configuration | balanced p50 / p90 (ms) | balanced local | hog p50 / p90 (ms) | hog timeouts | hog local \
         | steals/s | migrations/s | hog time (s) | vs solo |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (v, b, h) in rows {
        let hog_time = h.hog_completion.unwrap_or(f64::NAN);
        println!(
            "| {} | {} / {} | {:.1}% | {} / {} | {} of {} ({:.1}%) | {:.1}% | {} | {:.1} | {:.1} | {:.2}x |",
            v.name(),
            ms(b.p50),
            ms(b.p90),
            b.local_fraction * 100.0,
            ms(h.p50),
            ms(h.p90),
            h.timeouts,
            h.window_connections,
            h.timeouts as f64 * 100.0 / h.window_connections.max(1) as f64,
            h.local_fraction * 100.0,
            h.steals_per_s.map_or_else(|| "n/a".to_owned(), |s| format!("{s:.0}")),
            h.migrations_per_s,
            hog_time,
            hog_time / h.hog_solo.unwrap_or(f64::NAN),
        );
    }
}

fn find(rows: &[(Variant, SimResult, SimResult)], v: Variant) -> (&SimResult, &SimResult) {
    let (_, b, h) = rows.iter().find(|r| r.0 == v).expect("every variant ran");
    (b, h)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

fn print_targets(rows: &[(Variant, SimResult, SimResult)]) {
    let (ab, ah) = find(rows, Variant::Affinity);
    let (_, sh) = find(rows, Variant::StaticHash);
    let static_timeouts = sh.timeouts as f64 / sh.window_connections.max(1) as f64;
    let hog_ratio = ah.hog_completion.unwrap_or(f64::NAN) / ah.hog_solo.unwrap_or(f64::NAN);
    println!();
    println!("| target (the paper's) | simulated | verdict |");
    println!("|---|---|---|");
    println!(
        "| balanced local-accept fraction >= 95% (Affinity) | {:.1}% | {} |",
        ab.local_fraction * 100.0,
        verdict(ab.local_fraction >= 0.95)
    );
    let ratio = ah.p50 / ab.p50;
    println!(
        "| with the hog, Affinity median <= 1.15x balanced | {} ms / {} ms = {ratio:.3}x | {} |",
        ms(ah.p50),
        ms(ab.p50),
        verdict(ratio <= 1.15)
    );
    println!(
        "| with the hog, static hashing times out (>= 1% of connections) | {} timeouts ({:.1}%), p90 {} ms | {} |",
        sh.timeouts,
        static_timeouts * 100.0,
        ms(sh.p90),
        verdict(static_timeouts >= 0.01)
    );
    println!(
        "| hog completion with migration <= 1.05x solo | {:.1} s / {:.1} s = {hog_ratio:.3}x | {} |",
        ah.hog_completion.unwrap_or(f64::NAN),
        ah.hog_solo.unwrap_or(f64::NAN),
        verdict(hog_ratio <= 1.05)
    );
}

/// Registers the font for plotters; `false` when there is none.
fn load_font() -> bool {
    match std::fs::read(FONT) {
        Ok(bytes) => {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        }
        Err(_) => false,
    }
}

/// Draws the median and the 90th percentile latency per bin of SYN time for the hog runs, from the
/// start to 20 s after the hog's start (6 s in quick mode). Returns whether text was drawn.
fn plot(
    cfg: &SimConfig,
    rows: &[(Variant, SimResult, SimResult)],
    png: &Path,
) -> Result<bool, Box<dyn Error>> {
    let text = load_font();
    let hog_start = cfg.hog.as_ref().map_or(0.0, |h| h.start.as_secs_f64());
    let x_end = hog_start + if cfg.cores >= 16 { 20.0 } else { 6.0 };
    let root = BitMapBackend::new(png, (1200, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 1));
    let colors = [BLACK, RGBColor(150, 150, 150), BLUE, GREEN, MAGENTA, RED];
    for (panel, p90) in panels.iter().zip([false, true]) {
        let what = if p90 { "90th percentile" } else { "Median" };
        let mut builder = ChartBuilder::on(panel);
        builder.margin(15).x_label_area_size(45).y_label_area_size(60);
        if text {
            builder.caption(
                format!(
                    "{what} connection latency, {} cores, hog on half of them from {hog_start:.0} s (simulated)",
                    cfg.cores
                ),
                ("sans-serif", 22),
            );
        }
        let mut chart = builder.build_cartesian_2d(0.0..x_end, 150f64.log10()..12_000f64.log10())?;
        let mut mesh = chart.configure_mesh();
        mesh.disable_y_mesh();
        if text {
            mesh.x_desc("time of the connection's first SYN (s)")
                .y_desc("latency (ms), log scale")
                .y_labels(12)
                .y_label_formatter(&|v| format!("{:.0}", 10f64.powf(*v)))
                .label_style(("sans-serif", 15));
        }
        mesh.draw()?;
        for ((v, _, h), color) in rows.iter().zip(colors) {
            let points =
                h.series.iter().filter(|b| b.start < x_end).map(|b| {
                    (b.start, (if p90 { b.p90 } else { b.p50 } * 1e3).clamp(150.0, 12_000.0).log10())
                });
            let series = chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?;
            if text {
                series
                    .label(v.name())
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
            }
        }
        chart.draw_series(LineSeries::new(
            [(hog_start, 150f64.log10()), (hog_start, 12_000f64.log10())],
            BLACK.stroke_width(1),
        ))?;
        if text {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 15))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()?;
        }
    }
    root.present()?;
    Ok(text)
}
