//! Placement of the channelizer and the application (after Sandstorm's and Affinity-Accept's
//! question of where the work runs): the same packet path
//! with the driver side and the app pinned (a) on one core, one thread doing both, (b) on two cores,
//! two threads on CPU 0 and CPU 1, and (c) two threads that both live on CPU 0 (what (b) costs
//! without the second core: the hand-off plus context switches). The different-socket regime needs a
//! multi-socket machine; this binary prints the cache topology it ran on so the regime is on record.
//!
//! The path is deliberately lean, so that what changes between placements is the hand-off and the
//! cache traffic, not a TCP client: the 82599 model's `Wire::Generator` fills the RX ring with
//! 60-byte IPv4/TCP frames of 256 registered flows; the driver side is `Channelizer::poll` over the
//! driver's `IxgbeQueue` (RX burst 32, classify, registry lookup, push into the app's channel) and,
//! when a poll finds the ring empty, one `Model::service()` pass (the "NIC", on the driver's core);
//! the app pops each packet, does a fixed amount of work on it (the ones' complement sum of the frame
//! and 16 rounds of an integer mix) and frees it. Across cores the driver never overruns the app's
//! channel: it polls only while fewer than `CHANNEL - BURST` packets are in flight (a credit counter
//! the app publishes once per drain), so no packet is dropped and both sides do the same work.
//!
//! Reported per placement, medians of interleaved rounds of `RUN` each: throughput (packets/s, wall),
//! CPU per packet (the sum of the threads' `CLOCK_THREAD_CPUTIME_ID` over the packets), its split
//! between the driver thread, the app thread and the model's share, context switches (`getrusage`
//! `RUSAGE_THREAD`), idle polls; and instructions per packet from `valgrind --tool=callgrind` runs of
//! this binary (`--child PLACEMENT PACKETS`; a long run minus a short one, so set-up cancels), whole
//! process and the model alone (`--toggle-collect=*service_model*`). Hardware counters (`perf`) are
//! not used: the VM this was written on reports cycles and instructions as `<not supported>`.
//! `PLACEMENT_BENCH_NO_VALGRIND=1` skips the callgrind runs.

#[path = "common/flows.rs"]
mod flows;

use flows::{flow, tcp_frame};

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

mod common;

use ixgbe_vfio::driver::{Config, Ixgbe, IxgbeQueue};
use ixgbe_vfio::sim::{Model, SimConfig, Wire};
use netchannel::channelizer::{Channelizer, ConsumerId, SignatureRegistry};
use netchannel::pool::{HugePages, PacketRx, PacketTx, Pool, PoolCache};
use netchannel::rcu::Qsbr;
use netchannel::registry::Registration;
use netchannel::signature::{Proto, Signature};

/// Frames per channelizer poll.
const BURST: usize = 32;
/// RX descriptors (the driver's default).
const RING: u16 = 512;
/// Capacity of the app's channel; the driver keeps at most `CHANNEL - BURST` packets in flight.
const CHANNEL: usize = 1024;
/// Registered flows the generator cycles through.
const FLOWS: u32 = 256;
/// Integer-mix rounds of the app's per-packet work (on top of summing the frame).
const WORK_ROUNDS: u32 = 16;
/// Buffers in the pool: the ring, the channel, the per-thread caches, with room to spare.
const BUFFERS: u32 = 8192;
/// One timed run.
const RUN: Duration = Duration::from_secs(1);
/// Interleaved rounds (every placement once per round).
const ROUNDS: usize = 5;
/// Packets of the long and the short callgrind run.
const ICOUNT_PACKETS: (u64, u64) = (200_000, 50_000);
/// The longest the `split-wait` app sleeps before it looks at the stop flag.
const WAIT: Duration = Duration::from_millis(1);
/// Spins on an empty channel (or no credit) before yielding the CPU.
const SPINS: u32 = 64;

// ---------------------------------------------------------------------------------------------------
// Placements
// ---------------------------------------------------------------------------------------------------

/// Where the driver side and the app run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// One thread on CPU 0 polls the channelizer and runs the app in turn.
    Same,
    /// The driver side on CPU 0, the app on CPU 1.
    Split,
    /// As `Split`, but the app sleeps in `PacketRx::wait` on an empty channel (the net channel's
    /// wakeup protocol: the channelizer wakes it with `FUTEX_WAKE`) instead of spinning.
    SplitWait,
    /// Two threads as in `Split`, both pinned to CPU 0.
    SplitOneCpu,
}

const PLACEMENTS: [Placement; 4] =
    [Placement::Same, Placement::Split, Placement::SplitWait, Placement::SplitOneCpu];

impl Placement {
    fn name(self) -> &'static str {
        match self {
            Self::Same => "same",
            Self::Split => "split",
            Self::SplitWait => "split-wait",
            Self::SplitOneCpu => "split-1cpu",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        PLACEMENTS.into_iter().find(|p| p.name() == s)
    }

    /// What the table says about it.
    fn describe(self) -> &'static str {
        match self {
            Self::Same => "same core, one thread (CPU 0)",
            Self::Split => "two cores, two threads (CPU 0 + CPU 1)",
            Self::SplitWait => "two cores, app sleeps when idle (CPU 0 + CPU 1)",
            Self::SplitOneCpu => "one core, two threads (both CPU 0)",
        }
    }

    /// The CPU of the app thread (the driver thread is on CPU 0).
    fn app_cpu(self) -> usize {
        match self {
            Self::Split | Self::SplitWait => 1,
            Self::Same | Self::SplitOneCpu => 0,
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Frames and the app's work
// ---------------------------------------------------------------------------------------------------

/// The app's fixed per-packet work: the ones' complement sum of the frame (it reads every byte the
/// NIC wrote), then `WORK_ROUNDS` rounds of an integer mix.
#[inline(never)]
fn app_work(data: &[u8]) -> u64 {
    let mut sum: u32 = 0;
    for pair in data.chunks(2) {
        let hi = u32::from(pair[0]) << 8;
        sum += hi | pair.get(1).map_or(0, |&lo| u32::from(lo));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let mut x = u64::from(sum) | 1;
    for _ in 0..WORK_ROUNDS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    x
}

/// Pops every packet waiting in `rx`, works on it and frees it (into `cache`); returns how many.
fn drain(rx: &mut PacketRx, cache: &PoolCache, acc: &mut u64) -> u64 {
    let mut n = 0;
    while let Some(packet) = rx.pop(cache) {
        *acc = acc.wrapping_add(app_work(packet.data()));
        n += 1;
    }
    n
}

// ---------------------------------------------------------------------------------------------------
// The driver side
// ---------------------------------------------------------------------------------------------------

/// The model, the driver on it and a channelizer over its one queue, all flows registered to the app.
struct DriverSide<'c> {
    model: Model,
    _nic: Ixgbe,
    // Dropped before the channelizer (unregistering needs no grace period from its reader).
    _registrations: Vec<Registration<Signature, ConsumerId, Qsbr>>,
    ch: Channelizer<'c, IxgbeQueue>,
    default_rx: PacketRx,
    /// Thread CPU time inside `Model::service`.
    model_time: Duration,
}

impl<'c> DriverSide<'c> {
    fn new(pool: &Pool, cache: &'c PoolCache, app: PacketTx) -> Self {
        let model = Model::new(SimConfig {
            wire: Wire::Generator((0..FLOWS).map(|i| tcp_frame(i, 6)).collect()),
            ..SimConfig::default()
        });
        let config = Config {
            queues: 1,
            rx_ring: RING,
            tx_ring: RING,
            fdir: false,
            rss: false,
            link_timeout: Duration::from_secs(1),
            ..Config::default()
        };
        let (nic, mut queues) =
            Ixgbe::init("placement", model.mmio(), model.dma(), pool, config).expect("init");
        let queue = queues.pop().expect("one queue");
        let registry =
            Arc::new(SignatureRegistry::with_capacity_and_seed(Qsbr::new(), FLOWS as usize, 0x5eed));
        let registrations = (0..FLOWS)
            .map(|i| {
                let (local, remote) = flow(i);
                let sig =
                    Signature::new(Proto::Tcp, SocketAddr::V4(local), SocketAddr::V4(remote)).expect("v4");
                registry.register(sig, ConsumerId(0)).expect("distinct flows")
            })
            .collect();
        let (default_tx, default_rx) = pool.packet_channel(CHANNEL).expect("channel");
        let mut ch =
            Channelizer::builder(queue, cache, registry, default_tx).burst(BURST).build().expect("same pool");
        ch.attach(ConsumerId(0), app).expect("same pool");
        Self { model, _nic: nic, _registrations: registrations, ch, default_rx, model_time: Duration::ZERO }
    }

    /// One channelizer poll; when it finds the ring empty, one pass of the model (the NIC refills the
    /// ring). Returns the packets delivered.
    fn step(&mut self) -> u64 {
        let n = poll_channelizer(&mut self.ch);
        if n == 0 {
            let t = thread_cpu();
            let _ = black_box(service_model(&self.model));
            self.model_time += thread_cpu().saturating_sub(t);
        }
        n as u64
    }

    /// Checks that every frame went to the app's channel and returns the time spent in the model.
    fn finish(mut self, cache: &PoolCache) -> Duration {
        let stats = self.ch.stats();
        assert_eq!((stats.to_default, stats.dropped_full, stats.dropped_malformed), (0, 0, 0), "{stats:?}");
        assert!(self.default_rx.pop(cache).is_none());
        self.model_time
    }
}

#[inline(never)]
fn poll_channelizer(ch: &mut Channelizer<'_, IxgbeQueue>) -> usize {
    ch.poll().expect("poll").rx
}

#[inline(never)]
fn service_model(model: &Model) -> usize {
    model.service().rx
}

// ---------------------------------------------------------------------------------------------------
// Per-thread accounting
// ---------------------------------------------------------------------------------------------------

/// A thread's CPU time and context switches at one instant.
#[derive(Clone, Copy, Debug, Default)]
struct ThreadClock {
    cpu: Duration,
    voluntary: u64,
    involuntary: u64,
}

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    // SAFETY: `timespec` is plain data; all-zero is a valid value.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is to the live local `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), u32::try_from(ts.tv_nsec).unwrap_or(0))
}

impl ThreadClock {
    fn now() -> Self {
        // SAFETY: `rusage` is plain data; all-zero is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: the pointer is to the live local `ru`.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &raw mut ru) };
        assert_eq!(rc, 0, "getrusage(RUSAGE_THREAD)");
        Self {
            cpu: thread_cpu(),
            voluntary: u64::try_from(ru.ru_nvcsw).unwrap_or(0),
            involuntary: u64::try_from(ru.ru_nivcsw).unwrap_or(0),
        }
    }

    fn since(self, start: Self) -> Self {
        Self {
            cpu: self.cpu.saturating_sub(start.cpu),
            voluntary: self.voluntary.saturating_sub(start.voluntary),
            involuntary: self.involuntary.saturating_sub(start.involuntary),
        }
    }
}

/// What one thread did in a run.
#[derive(Clone, Copy, Debug, Default)]
struct ThreadOut {
    clock: ThreadClock,
    /// Loop turns that found nothing to do (app: an empty channel; driver: no credit).
    idle: u64,
}

/// One run of one placement.
#[derive(Clone, Copy, Debug)]
struct RunOut {
    packets: u64,
    wall: Duration,
    driver: ThreadOut,
    /// The app thread (on `same`: no clock, the empty drains of the one thread).
    app: ThreadOut,
    model: Duration,
}

/// Spins a little, then yields the CPU (so that two threads on one CPU make progress).
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < SPINS {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Runs `placement` until `stop` is set or `limit` packets have reached the app.
fn run(pool: &Pool, placement: Placement, limit: u64, stop: &AtomicBool) -> RunOut {
    match placement {
        Placement::Same => std::thread::scope(|s| {
            s.spawn(|| {
                common::pin_to_cpu(0);
                let cache = pool.cache();
                let (app_tx, mut app_rx) = pool.packet_channel(CHANNEL).expect("channel");
                let mut nic = DriverSide::new(pool, &cache, app_tx);
                let (mut packets, mut idle, mut acc) = (0, 0, 0);
                let (start, clock) = (Instant::now(), ThreadClock::now());
                while packets < limit && !stop.load(Ordering::Relaxed) {
                    let _ = nic.step();
                    let n = drain(&mut app_rx, &cache, &mut acc);
                    packets += n;
                    idle += u64::from(n == 0);
                }
                let (wall, clock) = (start.elapsed(), ThreadClock::now().since(clock));
                black_box(acc);
                let model = nic.finish(&cache);
                while app_rx.pop(&cache).is_some() {}
                RunOut {
                    packets,
                    wall,
                    driver: ThreadOut { clock, idle: 0 },
                    app: ThreadOut { clock: ThreadClock::default(), idle },
                    model,
                }
            })
            .join()
            .expect("the thread")
        }),
        Placement::Split | Placement::SplitWait | Placement::SplitOneCpu => {
            let (app_tx, app_rx) = pool.packet_channel(CHANNEL).expect("channel");
            let consumed = AtomicU64::new(0);
            let (app_done, driver_done) = (AtomicBool::new(false), AtomicBool::new(false));
            let barrier = Barrier::new(2);
            std::thread::scope(|s| {
                let app = s.spawn(|| {
                    common::pin_to_cpu(placement.app_cpu());
                    let mut app_rx = app_rx;
                    let cache = pool.cache();
                    let (mut packets, mut idle, mut spins, mut acc) = (0, 0, 0, 0);
                    barrier.wait();
                    let (start, clock) = (Instant::now(), ThreadClock::now());
                    while packets < limit && !stop.load(Ordering::Relaxed) {
                        let n = drain(&mut app_rx, &cache, &mut acc);
                        if n == 0 {
                            idle += 1;
                            if placement == Placement::SplitWait {
                                let _ = app_rx.wait(Some(WAIT));
                            } else {
                                backoff(&mut spins);
                            }
                        } else {
                            packets += n;
                            spins = 0;
                            // Release: the credit is returned after the packets are freed.
                            consumed.store(packets, Ordering::Release);
                        }
                    }
                    let (wall, clock) = (start.elapsed(), ThreadClock::now().since(clock));
                    black_box(acc);
                    // Release: pairs with the driver's Acquire load.
                    app_done.store(true, Ordering::Release);
                    // Acquire: after it, the driver pushes nothing more.
                    while !driver_done.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    while app_rx.pop(&cache).is_some() {}
                    (packets, wall, ThreadOut { clock, idle })
                });
                let driver = s.spawn(|| {
                    common::pin_to_cpu(0);
                    let cache = pool.cache();
                    let mut nic = DriverSide::new(pool, &cache, app_tx);
                    let (mut delivered, mut idle, mut spins) = (0_u64, 0, 0);
                    let budget = (CHANNEL - BURST) as u64;
                    barrier.wait();
                    let clock = ThreadClock::now();
                    // Acquire: pairs with the app's Release store.
                    while !app_done.load(Ordering::Acquire) {
                        // Acquire: the app freed these packets before returning their credit.
                        if delivered - consumed.load(Ordering::Acquire) > budget {
                            idle += 1;
                            backoff(&mut spins);
                            continue;
                        }
                        spins = 0;
                        delivered += nic.step();
                    }
                    let clock = ThreadClock::now().since(clock);
                    let model = nic.finish(&cache);
                    // Release: pairs with the app's Acquire load.
                    driver_done.store(true, Ordering::Release);
                    (ThreadOut { clock, idle }, model)
                });
                let (packets, wall, app) = app.join().expect("the app thread");
                let (driver, model) = driver.join().expect("the driver thread");
                RunOut { packets, wall, driver, app, model }
            })
        }
    }
}

fn new_pool() -> Pool {
    Pool::builder(BUFFERS).hugepages(HugePages::Never).build().expect("pool")
}

/// A timed run of `RUN`.
fn timed(placement: Placement) -> RunOut {
    let pool = new_pool();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let runner = s.spawn(|| run(&pool, placement, u64::MAX, &stop));
        std::thread::sleep(RUN);
        stop.store(true, Ordering::Relaxed);
        runner.join().expect("the run")
    })
}

// ---------------------------------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------------------------------

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => f64::midpoint(v[n / 2 - 1], v[n / 2]),
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// For each cache level of CPU 0, its size and which CPUs share it (from sysfs).
fn topology() -> Vec<String> {
    let mut out = Vec::new();
    for index in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).map(|s| s.trim().to_owned());
        let (Ok(level), Ok(kind)) = (read("level"), read("type")) else { break };
        let size = read("size").unwrap_or_default();
        let shared = read("shared_cpu_list").unwrap_or_default();
        out.push(format!("L{level} {kind} {size}: CPUs {shared}"));
    }
    let nodes = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("node")).count()
        })
        .unwrap_or(0);
    let packages: std::collections::BTreeSet<String> = (0..std::thread::available_parallelism()
        .map_or(1, usize::from))
        .filter_map(|c| {
            std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{c}/topology/physical_package_id"))
                .ok()
        })
        .map(|s| s.trim().to_owned())
        .collect();
    out.push(format!("NUMA nodes: {nodes}, sockets (packages): {}", packages.len()));
    out
}

/// Instructions per packet of `placement` under callgrind with `options`: a long run minus a short one.
fn instructions(placement: Placement, options: &[&str]) -> Result<f64, String> {
    let per = |packets: u64| {
        common::callgrind_instructions(options, &[placement.name().to_owned(), packets.to_string()])
    };
    let (long, short) = (per(ICOUNT_PACKETS.0)?, per(ICOUNT_PACKETS.1)?);
    Ok((long.saturating_sub(short)) as f64 / (ICOUNT_PACKETS.0 - ICOUNT_PACKETS.1) as f64)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let placement = args.get(2).and_then(|s| Placement::parse(s)).expect("placement");
        let packets = args.get(3).and_then(|s| s.parse().ok()).expect("packets");
        let out = run(&new_pool(), placement, packets, &AtomicBool::new(false));
        assert!(out.packets >= packets);
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    println!("placement: 82599 model -> driver RX burst {BURST} -> channelizer -> app channel -> app");
    println!("CPUs: {cpus}; cache topology of CPU 0:");
    for line in topology() {
        println!("  {line}");
    }
    if cpus < 2 {
        println!("(fewer than 2 CPUs: the split placement cannot use a second core)");
    }
    let load_before = loadavg();
    let mut runs: Vec<Vec<RunOut>> = vec![Vec::new(); PLACEMENTS.len()];
    let _ = timed(Placement::Same); // warm-up
    for round in 0..ROUNDS {
        for (i, &p) in PLACEMENTS.iter().enumerate() {
            let r = timed(p);
            let per = |d: Duration| d.as_nanos() as f64 / r.packets as f64;
            let app = per(r.app.clock.cpu);
            println!(
                "round {round} {:<10} {:>6.2} Mpkt/s  cpu {:>6.1} ns/pkt (driver {:.1}, app {app:.1}, model {:.1})  csw vol {} invol {}  load {}",
                p.name(),
                r.packets as f64 / r.wall.as_secs_f64() / 1e6,
                per(r.driver.clock.cpu) + app,
                per(r.driver.clock.cpu),
                per(r.model),
                r.driver.clock.voluntary + r.app.clock.voluntary,
                r.driver.clock.involuntary + r.app.clock.involuntary,
                loadavg(),
            );
            runs[i].push(r);
        }
    }
    let load_after = loadavg();
    let valgrind = std::env::var_os("PLACEMENT_BENCH_NO_VALGRIND").is_none() && common::have_valgrind();
    println!();
    println!(
        "medians of {ROUNDS} interleaved runs of {:.1} s; load average (1/5/15 min) {load_before} before, {load_after} after",
        RUN.as_secs_f64()
    );
    println!(
        "| placement | Mpkt/s (wall; min-max) | throughput vs same, paired | CPU ns/pkt, all threads | driver thread ns/pkt (model) | app thread ns/pkt | instructions/pkt, all (model) | context switches per 1k pkt (vol/invol) | idle turns per pkt (driver/app) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, &p) in PLACEMENTS.iter().enumerate() {
        let rs = &runs[i];
        let m = |f: &dyn Fn(&RunOut) -> f64| median(rs.iter().map(f).collect());
        let ns = |d: Duration, r: &RunOut| d.as_nanos() as f64 / r.packets as f64;
        let mpps: Vec<f64> = rs.iter().map(|r| r.packets as f64 / r.wall.as_secs_f64() / 1e6).collect();
        let (lo, hi) =
            (mpps.iter().copied().fold(f64::INFINITY, f64::min), mpps.iter().copied().fold(0.0, f64::max));
        let app_ns = |r: &RunOut| ns(r.app.clock.cpu, r);
        // Paired with the `same` run of the same round, so load that hits a round hits both.
        let paired: Vec<f64> = rs
            .iter()
            .zip(&runs[0])
            .map(|(r, s)| {
                (r.packets as f64 / r.wall.as_secs_f64()) / (s.packets as f64 / s.wall.as_secs_f64())
            })
            .collect();
        let icount = if valgrind {
            match (instructions(p, &[]), instructions(p, &["--toggle-collect=*service_model*"])) {
                (Ok(all), Ok(model)) => format!("{all:.0} ({model:.0})"),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("callgrind: {e}");
                    "failed".to_owned()
                }
            }
        } else {
            "not run".to_owned()
        };
        let csw = |r: &RunOut, f: fn(&ThreadClock) -> u64| {
            (f(&r.driver.clock) + f(&r.app.clock)) as f64 * 1000.0 / r.packets as f64
        };
        println!(
            "| {} | {:.2} ({lo:.2}-{hi:.2}) | {:.2}x | {:.1} | {:.1} ({:.1}) | {} | {icount} | {:.2} / {:.2} | {:.3} / {:.3} |",
            p.describe(),
            median(mpps.clone()),
            median(paired),
            m(&|r| ns(r.driver.clock.cpu, r) + app_ns(r)),
            m(&|r| ns(r.driver.clock.cpu, r)),
            m(&|r| ns(r.model, r)),
            if p == Placement::Same { "(same thread)".to_owned() } else { format!("{:.1}", m(&app_ns)) },
            m(&|r| csw(r, |c| c.voluntary)),
            m(&|r| csw(r, |c| c.involuntary)),
            m(&|r| r.driver.idle as f64 / r.packets as f64),
            m(&|r| r.app.idle as f64 / r.packets as f64),
        );
    }
}
