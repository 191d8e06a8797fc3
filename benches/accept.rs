//! The real (threaded) benchmark of `accept-affinity`: the three accept-queue policies ([`Policy::Stock`],
//! [`Policy::Fine`], [`Policy::affinity`]) on real threads, in the same run, with the same seed.
//!
//! # Mode 1: the dynamics run (the default: `cargo bench -p netchannels-benches --bench accept`)
//!
//! For each policy, one run of `ACCEPT_BENCH_SECONDS`:
//!
//! * **Workers**: one thread per core (`ACCEPT_BENCH_CORES`, default: the CPUs this process may use),
//!   pinned to CPU `core % cpus`, each looping on [`AcceptQueue::accept`] and running a synthetic request
//!   script per connection: touch the connection's RX-side state in the per-core table of the core its
//!   packets arrive on (`ACCEPT_BENCH_TOUCH_LINES` cache lines, written with atomic adds, so a remote
//!   accept really pulls lines another core wrote: the remote-accept penalty is paid in coherence misses,
//!   not modelled), then a CPU-bound loop for a service time drawn from an exponential distribution
//!   (mean `ACCEPT_BENCH_SERVICE_US`, capped at 20x the mean). The loop counts iterations calibrated at
//!   start-up, not wall time, so a worker that shares its CPU with the hog really serves more slowly.
//! * **The NIC**: `ACCEPT_BENCH_PRODUCERS` threads (default `ceil(cores / 8)`, not pinned) generate an
//!   open-loop Poisson stream of `ACCEPT_BENCH_RATE` connections/s in total (default `cores x 25000`, so
//!   half of each core with the default 20 us service, the paper's load). Each connection gets a random source port;
//!   its flow group (low 12 bits) is looked up in a `SoftwareSteering` table (4096 groups over the cores,
//!   round-robin at start) and the connection is enqueued on that core; a full queue counts as rejected
//!   (the stack would reset it). A producer sleeps until its next arrival is due and then enqueues every
//!   arrival that is due, so arrivals come in small bursts of up to about one sleep granularity (~60 us).
//! * **The hog**: one spinning thread pinned to each of the upper `max(1, cores / 2)` cores, on for the
//!   middle third of the run (it sleeps otherwise). A worker and the hog on one CPU share it as the
//!   scheduler decides (about half each while both are runnable), so the hog cores' capacity drops to
//!   about the offered 50% or below it: their queues grow, and the policies differ in what happens next.
//! * **The balancer**: a separate, unpinned thread calls [`AcceptQueue::balance`] every 100 ms with the
//!   steering table. The table lives behind a `Mutex`, taken by the producers for each lookup and by the
//!   balancer for the whole round (migrations write it); the run reports the round's duration (the time
//!   the producers may be held up), and the Criterion mode measures the lookup against a lock-free table.
//!   Under Stock and Fine `balance` returns at once; it is called the same way.
//!
//! Each connection carries the instant it was enqueued; the worker records enqueue -> accept ("accept
//! wait") and enqueue -> request done ("done"), overall and for connections enqueued while the hog ran.
//! At the end the producers stop, the queue is closed, and the workers drain it (drained connections are
//! counted and timed like the others). `ACCEPT_BENCH_ROUNDS` (default 1) repeats the three policies,
//! interleaved (stock, fine, affinity, stock, ...), merging the samples; `ACCEPT_BENCH_SEED` sets the
//! seed, the same for every policy of a round.
//!
//! # Mode 2: per-accept cost (Criterion, `ACCEPT_BENCH_MODE=criterion`; `all` runs both modes)
//!
//! * `accept_uncontended/<policy>`: one thread on CPU 0: `enqueue(0, ..)` then `try_accept(0)` on a
//!   two-core queue; one iteration is the pair.
//! * `accept_contended/<policy>`: the same, while a second thread pinned to CPU 1 runs the same loop on
//!   core 1 (enqueue on core 1, try_accept on core 1). It enqueues *and* accepts so that its queue does
//!   not just fill and turn every enqueue into a rejection. Stock shares one queue and lock between the
//!   two, Fine's accepts scan both queues, Affinity's touch only the local queue while neither is busy.
//! * `steering_lookup/<table>`: the producers' per-connection lookup: `Mutex<SoftwareSteering>` (what the
//!   dynamics run uses) against a table of `AtomicU16` read with `Relaxed` loads.
//!
//! Pinning is best effort and needs no privileges. On a 2-CPU machine the dynamics run checks overheads
//! and dynamics, not scaling: workers, producers, the hog and the balancer share two CPUs. The core count
//! is a parameter, so the same command sweeps 1..N cores on a larger machine.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::pin_to_cpu;

use accept_affinity::sim::SplitMix64;
use accept_affinity::{AcceptError, AcceptQueue, EnqueueError, Policy};
use criterion::Criterion;
use crossbeam_utils::CachePadded;
use netchannel::signature::FlowGroup;
use netchannel::steering::{FlowSteering, SoftwareSteering};

/// Parameters of the dynamics run.
#[derive(Clone, Debug)]
struct Config {
    cores: usize,
    cpus: usize,
    producers: usize,
    rate: f64,
    service_us: f64,
    seconds: f64,
    backlog: usize,
    touch_lines: usize,
    rounds: usize,
    seed: u64,
    hog: bool,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v}: cannot parse")),
        Err(_) => default,
    }
}

impl Config {
    fn from_env() -> Self {
        let cpus = thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let cores: usize = env_or("ACCEPT_BENCH_CORES", cpus);
        assert!(cores >= 1, "ACCEPT_BENCH_CORES must be at least 1");
        let rate_default = 25_000.0 * cores as f64;
        Self {
            cores,
            cpus,
            producers: env_or("ACCEPT_BENCH_PRODUCERS", cores.div_ceil(8)).max(1),
            rate: env_or("ACCEPT_BENCH_RATE", rate_default),
            service_us: env_or("ACCEPT_BENCH_SERVICE_US", 20.0),
            seconds: env_or("ACCEPT_BENCH_SECONDS", 6.0),
            backlog: env_or("ACCEPT_BENCH_BACKLOG", 1024),
            touch_lines: env_or("ACCEPT_BENCH_TOUCH_LINES", 16),
            rounds: env_or("ACCEPT_BENCH_ROUNDS", 1).max(1),
            seed: env_or("ACCEPT_BENCH_SEED", 1),
            hog: env_or("ACCEPT_BENCH_HOG", 1u8) != 0,
        }
    }

    fn hog_cores(&self) -> std::ops::Range<usize> {
        if self.hog { self.cores - (self.cores / 2).max(1)..self.cores } else { 0..0 }
    }
}

/// A synthetic connection: when it was enqueued (relative to the run's start) and its CPU work.
#[derive(Debug)]
struct Conn {
    enqueued_ns: u64,
    work_iters: u64,
}

/// One served connection, as a worker recorded it.
#[derive(Clone, Copy, Debug)]
struct Sample {
    enqueued_ns: u64,
    accept_wait_ns: u64,
    done_ns: u64,
    remote: bool,
}

/// Cache lines of RX-side state per core (the request script touches `touch_lines` of them).
const STATE_LINES: usize = 64;

/// One core's RX-side state: `STATE_LINES` cache lines, each an `AtomicU64` padded to its own line.
type CoreState = Box<[CachePadded<AtomicU64>]>;

fn nanos_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The synthetic CPU work: `iters` rounds of a dependent multiply-add chain.
fn spin_work(iters: u64) -> u64 {
    let mut x = black_box(0x9E37_79B9_7F4A_7C15u64);
    // `black_box` on every step, so the compiler cannot fold steps together: one iteration is a fixed
    // amount of work whatever the count, the calibration's constant one or a worker's run-time one.
    for _ in 0..black_box(iters) {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407));
    }
    x
}

/// Iterations of [`spin_work`] per microsecond: the best of several timed runs (preemption only makes
/// a run slower).
fn calibrate() -> f64 {
    const ITERS: u64 = 200_000;
    let best = (0..7)
        .map(|_| {
            let t = Instant::now();
            spin_work(ITERS);
            t.elapsed()
        })
        .min()
        .unwrap_or(Duration::from_millis(1));
    let per_us = ITERS as f64 / (best.as_secs_f64() * 1e6);
    // A check that a run-time count takes the time the calibration says (the best of several again).
    let check = (0..7)
        .map(|_| {
            let t = Instant::now();
            spin_work(black_box(f64_to_u64(20.0 * per_us)));
            t.elapsed()
        })
        .min()
        .unwrap_or_default();
    println!(
        "calibration: {per_us:.0} work iterations per us; 20 us of work measured {:.1} us",
        check.as_secs_f64() * 1e6
    );
    per_us
}

#[expect(clippy::cast_possible_truncation, reason = "the value is a non-negative, bounded iteration count")]
fn f64_to_u64(x: f64) -> u64 {
    x.max(0.0).round() as u64
}

/// What one policy's run produced.
#[derive(Debug, Default)]
struct Outcome {
    samples: Vec<Sample>,
    offered: u64,
    rejected: u64,
    accepted: u64,
    local: u64,
    remote: u64,
    migrations: u64,
    rounds: u64,
    balance_ns: Vec<u64>,
    seconds: f64,
    hog_from_ns: u64,
    hog_to_ns: u64,
    /// Per core: enqueued, rejected, local accepts, remote accepts, stolen from, migrations in.
    per_core: Vec<[u64; 6]>,
}

/// One policy's dynamics run.
#[expect(clippy::too_many_lines, reason = "one run's threads are easiest to read in one place")]
fn run_policy(cfg: &Config, policy: &Policy, seed: u64, iters_per_us: f64) -> Outcome {
    let cores = cfg.cores;
    let queue: Arc<AcceptQueue<Conn>> =
        Arc::new(AcceptQueue::new(cores, cfg.backlog, policy.clone()).expect("a valid accept-queue config"));
    let steering =
        Arc::new(Mutex::new(SoftwareSteering::new(u16::try_from(cores).expect("at most 65535 cores"))));
    let state: Arc<Vec<CoreState>> = Arc::new(
        (0..cores).map(|_| (0..STATE_LINES).map(|_| CachePadded::new(AtomicU64::new(0))).collect()).collect(),
    );
    let duration = Duration::from_secs_f64(cfg.seconds);
    let hog_from = duration / 3;
    let hog_to = duration * 2 / 3;
    // 0: off, 1: spinning, 2: exit.
    let hog_state = Arc::new(AtomicU8::new(0));
    let stop_balancer = Arc::new(AtomicBool::new(false));
    let touch = cfg.touch_lines.min(STATE_LINES);

    // Everything measures from `start`, taken before any thread runs; producers begin after a barrier.
    let barrier = Arc::new(std::sync::Barrier::new(cfg.producers + 1));
    let start = Instant::now();

    let workers: Vec<_> = (0..cores)
        .map(|core| {
            let queue = Arc::clone(&queue);
            let state = Arc::clone(&state);
            let cpu = core % cfg.cpus;
            let expect = usize::try_from(f64_to_u64(cfg.rate * cfg.seconds * 1.2)).unwrap_or(0) / cores;
            thread::spawn(move || {
                pin_to_cpu(cpu);
                let mut samples = Vec::with_capacity(expect);
                loop {
                    match queue.accept(core) {
                        Ok(a) => {
                            let accepted_ns = nanos_since(start);
                            // The request script: RX-side state of the core the packets arrive on.
                            let lines = &state[a.arrived_on];
                            let base = usize::from(a.group.0) % STATE_LINES;
                            for i in 0..touch {
                                // Relaxed: the value is never read for anything but keeping the write.
                                lines[(base + i) % STATE_LINES].fetch_add(1, Ordering::Relaxed);
                            }
                            spin_work(a.conn.work_iters);
                            let done_ns = nanos_since(start);
                            samples.push(Sample {
                                enqueued_ns: a.conn.enqueued_ns,
                                accept_wait_ns: accepted_ns.saturating_sub(a.conn.enqueued_ns),
                                done_ns: done_ns.saturating_sub(a.conn.enqueued_ns),
                                remote: a.remote,
                            });
                        }
                        Err(AcceptError::WouldBlock) => {}
                        Err(AcceptError::Closed | AcceptError::Retired | AcceptError::NoSuchCore) => break,
                    }
                }
                samples
            })
        })
        .collect();

    let hogs: Vec<_> = cfg
        .hog_cores()
        .map(|core| {
            let hog_state = Arc::clone(&hog_state);
            let cpu = core % cfg.cpus;
            thread::spawn(move || {
                pin_to_cpu(cpu);
                let mut x = 0u64;
                loop {
                    // Relaxed: a flag polled in a loop; nothing else is published through it.
                    match hog_state.load(Ordering::Relaxed) {
                        0 => thread::sleep(Duration::from_millis(1)),
                        1 => x = x.wrapping_add(spin_work(1000)),
                        _ => break,
                    }
                }
                black_box(x);
            })
        })
        .collect();

    let balancer = {
        let queue = Arc::clone(&queue);
        let steering = Arc::clone(&steering);
        let stop = Arc::clone(&stop_balancer);
        thread::spawn(move || {
            let mut times = Vec::new();
            // Relaxed: a stop flag; the join publishes the results.
            while !stop.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(100));
                let mut table = steering.lock().unwrap_or_else(PoisonError::into_inner);
                let t = Instant::now();
                let report = queue.balance(&mut *table);
                let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
                drop(table);
                if report.is_some() {
                    times.push(ns);
                }
            }
            times
        })
    };

    let per_producer_rate = cfg.rate / cfg.producers as f64;
    let mean_gap_ns = 1e9 / per_producer_rate;
    let producers: Vec<_> = (0..cfg.producers)
        .map(|p| {
            let queue = Arc::clone(&queue);
            let steering = Arc::clone(&steering);
            let barrier = Arc::clone(&barrier);
            let service_us = cfg.service_us;
            let mut rng = SplitMix64::new(seed ^ (0xA5A5_0000 + p as u64));
            thread::spawn(move || {
                barrier.wait();
                let end_ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
                let (mut offered, mut rejected) = (0u64, 0u64);
                let mut next_ns = nanos_since(start) as f64 + rng.exp(mean_gap_ns);
                loop {
                    let now = nanos_since(start);
                    if now >= end_ns {
                        break;
                    }
                    while next_ns <= now as f64 {
                        let port = u16::try_from(1024 + rng.below(64_512)).unwrap_or(u16::MAX);
                        let group = FlowGroup::of_port(port);
                        let core = {
                            let table = steering.lock().unwrap_or_else(PoisonError::into_inner);
                            usize::from(table.queue_of(group))
                        };
                        let service = rng.exp(service_us).min(20.0 * service_us);
                        let conn = Conn {
                            enqueued_ns: nanos_since(start),
                            work_iters: f64_to_u64(service * iters_per_us),
                        };
                        offered += 1;
                        match queue.enqueue(core, group, conn) {
                            Ok(_) => {}
                            Err(EnqueueError::Full(_)) => rejected += 1,
                            Err(e) => panic!("enqueue failed: {e}"),
                        }
                        next_ns += rng.exp(mean_gap_ns);
                    }
                    let gap = (next_ns - nanos_since(start) as f64).max(0.0);
                    if gap > 2_000.0 {
                        thread::sleep(Duration::from_nanos(f64_to_u64(gap.min(1e6))));
                    } else {
                        std::hint::spin_loop();
                    }
                }
                (offered, rejected)
            })
        })
        .collect();

    barrier.wait();
    if !hogs.is_empty() {
        thread::sleep(hog_from.saturating_sub(start.elapsed()));
        // Relaxed: see the hog loop.
        hog_state.store(1, Ordering::Relaxed);
        thread::sleep(hog_to.saturating_sub(start.elapsed()));
        hog_state.store(0, Ordering::Relaxed);
    }
    let (mut offered, mut rejected) = (0, 0);
    for p in producers {
        let (o, r) = p.join().expect("producer panicked");
        offered += o;
        rejected += r;
    }
    let seconds = start.elapsed().as_secs_f64();
    queue.close();
    let mut samples = Vec::new();
    for w in workers {
        samples.extend(w.join().expect("worker panicked"));
    }
    // Relaxed: see the hog loop and the balancer.
    hog_state.store(2, Ordering::Relaxed);
    stop_balancer.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().expect("hog panicked");
    }
    let balance_ns = balancer.join().expect("balancer panicked");
    let stats = queue.stats();
    assert_eq!(stats.rejected(), rejected, "the queue's and the producers' rejection counts differ");
    assert_eq!(stats.accepted(), samples.len() as u64, "every accepted connection was recorded");
    Outcome {
        offered,
        rejected,
        accepted: stats.accepted(),
        local: stats.cores.iter().map(|c| c.local_accepts).sum(),
        remote: stats.cores.iter().map(|c| c.remote_accepts).sum(),
        migrations: stats.migrations(),
        rounds: stats.migration_rounds,
        balance_ns,
        seconds,
        samples,
        hog_from_ns: if cfg.hog { u64::try_from(hog_from.as_nanos()).unwrap_or(0) } else { 0 },
        hog_to_ns: if cfg.hog { u64::try_from(hog_to.as_nanos()).unwrap_or(0) } else { 0 },
        per_core: stats
            .cores
            .iter()
            .map(|c| {
                [c.enqueued, c.rejected, c.local_accepts, c.remote_accepts, c.stolen_from, c.migrations_in]
            })
            .collect(),
    }
}

/// Nearest-rank percentiles (in microseconds, one decimal) of `values`, sorted in place.
fn percentiles(values: &mut [u64], ps: &[u64]) -> Vec<String> {
    values.sort_unstable();
    ps.iter()
        .map(|&p| {
            if values.is_empty() {
                return "-".to_owned();
            }
            let rank = (values.len() * usize::try_from(p).unwrap_or(100)).div_ceil(100).max(1);
            format!("{:.1}", values[rank - 1] as f64 / 1000.0)
        })
        .collect()
}

fn triple(values: &mut [u64]) -> String {
    percentiles(values, &[50, 90, 99]).join(" / ")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn merge(into: &mut Outcome, o: Outcome) {
    into.samples.extend(o.samples);
    into.offered += o.offered;
    into.rejected += o.rejected;
    into.accepted += o.accepted;
    into.local += o.local;
    into.remote += o.remote;
    into.migrations += o.migrations;
    into.rounds += o.rounds;
    into.balance_ns.extend(o.balance_ns);
    into.seconds += o.seconds;
    into.hog_from_ns = o.hog_from_ns;
    into.hog_to_ns = o.hog_to_ns;
    into.per_core.resize(o.per_core.len(), [0; 6]);
    for (a, b) in into.per_core.iter_mut().zip(&o.per_core) {
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 { "-".to_owned() } else { format!("{:.1}%", 100.0 * part as f64 / whole as f64) }
}

fn print_per_core(policies: &[Policy], outcomes: &[Outcome]) {
    println!();
    println!(
        "| policy | core | enqueued | rejected | local accepts | remote accepts | stolen from | migrations in |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (policy, o) in policies.iter().zip(outcomes) {
        for (core, c) in o.per_core.iter().enumerate() {
            println!(
                "| {} | {core} | {} | {} | {} | {} | {} | {} |",
                policy.name(),
                c[0],
                c[1],
                c[2],
                c[3],
                c[4],
                c[5]
            );
        }
    }
}

fn run_dynamics() {
    let cfg = Config::from_env();
    let policies = [Policy::Stock, Policy::Fine, Policy::affinity()];
    let iters_per_us = calibrate();
    let load_before = load_average();
    println!(
        "accept dynamics: {} cores on {} CPUs, {} producer(s), {:.0} conn/s offered, service exp(mean {} us) \
         = {:.0}% of the cores, backlog {}, {} s per policy x {} round(s), {}, {} lines touched per request, seed {}",
        cfg.cores,
        cfg.cpus,
        cfg.producers,
        cfg.rate,
        cfg.service_us,
        100.0 * cfg.rate * cfg.service_us / 1e6 / cfg.cores as f64,
        cfg.backlog,
        cfg.seconds,
        cfg.rounds,
        if cfg.hog {
            format!(
                "hog on cores {:?} from {:.1} s to {:.1} s",
                cfg.hog_cores(),
                cfg.seconds / 3.0,
                cfg.seconds * 2.0 / 3.0
            )
        } else {
            "no hog".to_owned()
        },
        cfg.touch_lines.min(STATE_LINES),
        cfg.seed,
    );
    println!("load average before: {load_before}");
    let mut outcomes: Vec<Outcome> = policies.iter().map(|_| Outcome::default()).collect();
    for round in 0..cfg.rounds {
        let seed = cfg.seed.wrapping_add(round as u64);
        for (i, policy) in policies.iter().enumerate() {
            let o = run_policy(&cfg, policy, seed, iters_per_us);
            eprintln!("round {}/{}: {} done ({} accepted)", round + 1, cfg.rounds, policy.name(), o.accepted);
            merge(&mut outcomes[i], o);
        }
    }
    println!("load average after: {}", load_average());
    println!();
    println!(
        "| policy | offered/s | accepts/s | rejected | accept wait p50 / p90 / p99 (us) | done p50 / p90 / p99 (us) | local | remote accepts | migrations | balance round mean / max (us) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (policy, o) in policies.iter().zip(&mut outcomes) {
        let mut wait: Vec<u64> = o.samples.iter().map(|s| s.accept_wait_ns).collect();
        let mut done: Vec<u64> = o.samples.iter().map(|s| s.done_ns).collect();
        let balance = if o.balance_ns.is_empty() {
            "n/a".to_owned()
        } else {
            let mean = o.balance_ns.iter().sum::<u64>() as f64 / o.balance_ns.len() as f64 / 1000.0;
            let max = o.balance_ns.iter().max().copied().unwrap_or(0) as f64 / 1000.0;
            format!("{mean:.1} / {max:.1}")
        };
        println!(
            "| {} | {:.0} | {:.0} | {} ({}) | {} | {} | {} | {} | {} | {} |",
            policy.name(),
            o.offered as f64 / o.seconds,
            o.accepted as f64 / o.seconds,
            o.rejected,
            pct(o.rejected, o.offered),
            triple(&mut wait),
            triple(&mut done),
            pct(o.local, o.accepted),
            o.remote,
            o.migrations,
            balance,
        );
    }
    if cfg.hog {
        println!();
        println!(
            "| policy | hog window: accepted | accept wait p50 / p90 / p99 (us) | done p50 / p90 / p99 (us) | local | after the hog: done p50 / p90 / p99 (us) |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
        for (policy, o) in policies.iter().zip(&outcomes) {
            let in_hog = |s: &&Sample| s.enqueued_ns >= o.hog_from_ns && s.enqueued_ns < o.hog_to_ns;
            let hog: Vec<&Sample> = o.samples.iter().filter(in_hog).collect();
            let mut wait: Vec<u64> = hog.iter().map(|s| s.accept_wait_ns).collect();
            let mut done: Vec<u64> = hog.iter().map(|s| s.done_ns).collect();
            let local = hog.iter().filter(|s| !s.remote).count() as u64;
            let mut after: Vec<u64> =
                o.samples.iter().filter(|s| s.enqueued_ns >= o.hog_to_ns).map(|s| s.done_ns).collect();
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                policy.name(),
                hog.len(),
                triple(&mut wait),
                triple(&mut done),
                pct(local, hog.len() as u64),
                triple(&mut after),
            );
        }
    }
    print_per_core(&policies, &outcomes);
}

// ---------------------------------------------------------------------------------------------------
// Mode 2: Criterion.

/// The CPU of the measuring thread, and of the contending one.
const MAIN_CPU: usize = 0;
const OTHER_CPU: usize = 1;

/// A table of `AtomicU16`, the lock-free alternative to `Mutex<SoftwareSteering>` for the lookups.
#[derive(Debug)]
struct AtomicSteering {
    table: Box<[AtomicU16]>,
}

impl AtomicSteering {
    fn new(queues: u16) -> Self {
        Self {
            table: (0..FlowGroup::COUNT)
                .map(|g| AtomicU16::new(u16::try_from(g % usize::from(queues)).unwrap_or(0)))
                .collect(),
        }
    }

    fn queue_of(&self, group: FlowGroup) -> u16 {
        // Relaxed: a routing hint, as the NIC's table is; a stale read routes one connection to the
        // group's previous core, which accepts it as any other.
        self.table[group.index()].load(Ordering::Relaxed)
    }
}

fn policies() -> [Policy; 3] {
    [Policy::Stock, Policy::Fine, Policy::affinity()]
}

fn run_criterion() {
    pin_to_cpu(MAIN_CPU);
    let mut c = Criterion::default().configure_from_args();
    let group_a = FlowGroup(0);
    let group_b = FlowGroup(1);

    let mut g = c.benchmark_group("accept_uncontended");
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    g.sample_size(20);
    for policy in policies() {
        let q: AcceptQueue<u64> = AcceptQueue::new(2, 1024, policy.clone()).expect("valid config");
        g.bench_function(policy.name(), |b| {
            b.iter(|| {
                q.enqueue(0, group_a, black_box(7)).expect("room in the queue");
                black_box(q.try_accept(0).expect("the connection just queued"))
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("accept_contended");
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    g.sample_size(20);
    for policy in policies() {
        let q: Arc<AcceptQueue<u64>> =
            Arc::new(AcceptQueue::new(2, 1024, policy.clone()).expect("valid config"));
        let stop = Arc::new(AtomicBool::new(false));
        let other = {
            let q = Arc::clone(&q);
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                pin_to_cpu(OTHER_CPU);
                let mut n = 0u64;
                // Relaxed: a stop flag.
                while !stop.load(Ordering::Relaxed) {
                    if q.enqueue(1, group_b, 9).is_ok() {
                        n += 1;
                    }
                    let _ = black_box(q.try_accept(1));
                }
                n
            })
        };
        g.bench_function(policy.name(), |b| {
            b.iter(|| {
                // Under Fine (and Stock) this core may take the other thread's connection instead of its
                // own; either is one accept. The queue never fills: both threads take one per one queued.
                let _ = q.enqueue(0, group_a, black_box(7));
                black_box(q.try_accept(0))
            });
        });
        // Relaxed: a stop flag.
        stop.store(true, Ordering::Relaxed);
        let n = other.join().expect("contending thread panicked");
        black_box(n);
    }
    g.finish();

    let mut g = c.benchmark_group("steering_lookup");
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(1));
    g.sample_size(20);
    let mutex = Mutex::new(SoftwareSteering::new(2));
    let atomic = AtomicSteering::new(2);
    let mut port = 0u16;
    g.bench_function("mutex-software-steering", |b| {
        b.iter(|| {
            port = port.wrapping_add(1);
            let t = mutex.lock().unwrap_or_else(PoisonError::into_inner);
            black_box(t.queue_of(FlowGroup::of_port(black_box(port))))
        });
    });
    g.bench_function("atomic-table", |b| {
        b.iter(|| {
            port = port.wrapping_add(1);
            black_box(atomic.queue_of(FlowGroup::of_port(black_box(port))))
        });
    });
    g.finish();
    c.final_summary();
}

fn main() {
    let mode = std::env::var("ACCEPT_BENCH_MODE").unwrap_or_else(|_| "dynamics".to_owned());
    match mode.as_str() {
        "dynamics" => run_dynamics(),
        "criterion" => run_criterion(),
        "all" => {
            run_dynamics();
            run_criterion();
        }
        other => panic!("ACCEPT_BENCH_MODE={other}: expected dynamics, criterion or all"),
    }
}
