//! The net channel against rtrb 0.4 and nexus-queue 1.3 the way a new user would measure them: two
//! threads, `u32` items, capacity 4096, a fixed number of items; the producer retries `push` (or
//! `push_burst`) until each item is in, the consumer pops in a loop and sums (the sum is checked).
//!
//! Regimes: `free` (both threads run flat out), `slow-producer` (a dependent chain of multiplies per
//! item on the producer, ~5 ns, so the ring runs near empty) and `slow-consumer` (the same on the
//! consumer, so the ring runs near full). Bursts of 1 (`push`/`pop`) and 32 (`push_burst`/`pop_burst`;
//! rtrb's chunk API; nexus-queue has no burst API, so its bursts are loops of single operations). Loop
//! shapes, because a channel whose per-item cost depends on the caller's loop is a trap:
//!
//! * `plain`: retry at once on a full/empty ring;
//! * `pause`: `std::hint::spin_loop()` on each failed attempt;
//! * `counters`: count failed attempts on both sides (kept, and printed in the `--verbose` output);
//! * burst 32 only: `plain` retries inside the burst until all 32 items are in; `outside` takes what
//!   `push_burst` accepted and starts the next call from there with a fresh 32-item window.
//!
//! Contenders: `nc-park` (a [`WakeMode::Park`] channel whose consumer never sleeps, so the producer pays
//! the wakeup check on every burst: "wakeups enabled"), `nc-poll` ([`WakeMode::Poll`]), `rtrb`, `nexus`.
//! Every case runs once per round, the cases interleaved, and the table shows medians over rounds and
//! the median of the per-round ratio `faster anchor / nc-park` (above 1: the net channel is faster).
//!
//! ```text
//! cargo build --release -p netchannel --example channel_regimes
//! target/release/examples/channel_regimes [--rounds 5] [--items 10000000] [--work 6] [--cpus 2,3]
//!     [--filter free/1] [--verbose] [--only nc-park]
//! ```

#![expect(
    clippy::cast_possible_truncation,
    reason = "bursts are at most 32 items and counts are u32 by construction"
)]

use std::hint::{black_box, spin_loop};
use std::sync::Barrier;
use std::time::Instant;

use netchannel::channel::{Channel, WakeMode};

/// Slots in every ring.
const CAPACITY: usize = 4096;

/// One SPSC ring, seen through the operations the harness needs.
trait Ring {
    type Tx: Send;
    type Rx: Send;
    const NAME: &'static str;
    fn new() -> (Self::Tx, Self::Rx);
    fn push(tx: &mut Self::Tx, item: u32) -> bool;
    fn push_burst(tx: &mut Self::Tx, items: &[u32]) -> usize;
    fn pop(rx: &mut Self::Rx) -> Option<u32>;
    fn pop_burst(rx: &mut Self::Rx, out: &mut [u32]) -> usize;
}

/// The net channel; `POLL` picks [`WakeMode::Poll`], otherwise [`WakeMode::Park`] with a consumer that
/// never sleeps (the producer pays the wakeup check).
struct Nc<const POLL: bool>;
type NcPark = Nc<false>;
type NcPoll = Nc<true>;

impl<const POLL: bool> Ring for Nc<POLL> {
    type Tx = netchannel::channel::Producer;
    type Rx = netchannel::channel::Consumer;
    const NAME: &'static str = if POLL { "nc-poll" } else { "nc-park" };
    fn new() -> (Self::Tx, Self::Rx) {
        let mode = if POLL { WakeMode::Poll } else { WakeMode::Park };
        Channel::builder(CAPACITY).wake(mode).build().expect("a 4096-slot channel")
    }
    #[inline(always)]
    fn push(tx: &mut Self::Tx, item: u32) -> bool {
        tx.push(item).is_ok()
    }
    #[inline(always)]
    fn push_burst(tx: &mut Self::Tx, items: &[u32]) -> usize {
        tx.push_burst(items)
    }
    #[inline(always)]
    fn pop(rx: &mut Self::Rx) -> Option<u32> {
        rx.pop()
    }
    #[inline(always)]
    fn pop_burst(rx: &mut Self::Rx, out: &mut [u32]) -> usize {
        rx.pop_burst(out)
    }
}

struct Rtrb;
impl Ring for Rtrb {
    type Tx = rtrb::Producer<u32>;
    type Rx = rtrb::Consumer<u32>;
    const NAME: &'static str = "rtrb";
    fn new() -> (Self::Tx, Self::Rx) {
        rtrb::RingBuffer::new(CAPACITY)
    }
    #[inline(always)]
    fn push(tx: &mut Self::Tx, item: u32) -> bool {
        tx.push(item).is_ok()
    }
    #[inline(always)]
    fn push_burst(tx: &mut Self::Tx, items: &[u32]) -> usize {
        use rtrb::CopyToUninit;
        let n = items.len().min(tx.slots());
        if n == 0 {
            return 0;
        }
        let mut chunk = tx.write_chunk_uninit(n).expect("free slots stay free");
        let (first, second) = chunk.as_mut_slices();
        let mid = first.len();
        items[..mid].copy_to_uninit(first);
        items[mid..n].copy_to_uninit(second);
        // SAFETY: both slices were initialised just above.
        unsafe { chunk.commit_all() };
        n
    }
    #[inline(always)]
    fn pop(rx: &mut Self::Rx) -> Option<u32> {
        rx.pop().ok()
    }
    #[inline(always)]
    fn pop_burst(rx: &mut Self::Rx, out: &mut [u32]) -> usize {
        let n = out.len().min(rx.slots());
        if n == 0 {
            return 0;
        }
        let chunk = rx.read_chunk(n).expect("ready items stay ready");
        let (first, second) = chunk.as_slices();
        out[..first.len()].copy_from_slice(first);
        out[first.len()..n].copy_from_slice(second);
        chunk.commit_all();
        n
    }
}

struct Nexus;
impl Ring for Nexus {
    type Tx = nexus_queue::spsc::Producer<u32>;
    type Rx = nexus_queue::spsc::Consumer<u32>;
    const NAME: &'static str = "nexus";
    fn new() -> (Self::Tx, Self::Rx) {
        nexus_queue::spsc::ring_buffer(CAPACITY)
    }
    #[inline(always)]
    fn push(tx: &mut Self::Tx, item: u32) -> bool {
        tx.push(item).is_ok()
    }
    #[inline(always)]
    fn push_burst(tx: &mut Self::Tx, items: &[u32]) -> usize {
        items.iter().take_while(|&&item| tx.push(item).is_ok()).count()
    }
    #[inline(always)]
    fn pop(rx: &mut Self::Rx) -> Option<u32> {
        rx.pop()
    }
    #[inline(always)]
    fn pop_burst(rx: &mut Self::Rx, out: &mut [u32]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match rx.pop() {
                Some(v) => out[n] = v,
                None => break,
            }
            n += 1;
        }
        n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Regime {
    Free,
    SlowProducer,
    SlowConsumer,
}

impl Regime {
    fn name(self) -> &'static str {
        match self {
            Self::Free => "free",
            Self::SlowProducer => "slow-producer",
            Self::SlowConsumer => "slow-consumer",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Plain,
    Pause,
    Counters,
    Outside,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Pause => "pause",
            Self::Counters => "counters",
            Self::Outside => "outside",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Case {
    regime: Regime,
    burst: usize,
    shape: Shape,
}

impl Case {
    fn label(self) -> String {
        format!("{}/{}/{}", self.regime.name(), self.burst, self.shape.name())
    }
}

/// About 1.3 ns per step of a dependent multiply-add chain: `steps` of them are the per-item "work" of
/// the slow side.
#[inline(always)]
fn work(x: u64, steps: u32) -> u64 {
    let mut x = x;
    for _ in 0..steps {
        x = x.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(0x1405_7b7e_f767_814f);
    }
    x
}

fn pin(cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    // SAFETY: `cpu_set_t` is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return;
    }
    // SAFETY: `cpu` is below the set's capacity (checked above) and `set` is a live local.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the pointer and size describe the live local `set`.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set) };
    if rc != 0 {
        eprintln!("cannot pin to CPU {cpu}: {}", std::io::Error::last_os_error());
    }
}

/// What one run measured.
struct Run {
    ns_per_item: f64,
    failed_pushes: u64,
    empty_pops: u64,
}

fn producer<R: Ring>(tx: &mut R::Tx, case: Case, items: u32, steps: u32) -> (u64, u64) {
    let slow = case.regime == Regime::SlowProducer;
    let mut acc = 0u64;
    let mut failed = 0u64;
    if case.burst == 1 {
        for i in 0..items {
            if slow {
                acc = work(acc ^ u64::from(i), steps);
            }
            loop {
                if R::push(tx, i) {
                    break;
                }
                match case.shape {
                    Shape::Pause => spin_loop(),
                    Shape::Counters => failed += 1,
                    Shape::Plain | Shape::Outside => {}
                }
            }
        }
        return (acc, failed);
    }
    let mut buf = [0u32; 32];
    let mut next = 0u32;
    while next < items {
        let n = (items - next).min(case.burst as u32) as usize;
        for (k, slot) in buf[..n].iter_mut().enumerate() {
            *slot = next + k as u32;
            if slow {
                acc = work(acc ^ u64::from(*slot), steps);
            }
        }
        if case.shape == Shape::Outside {
            let sent = R::push_burst(tx, &buf[..n]);
            if sent == 0 {
                failed += 1;
            }
            next += sent as u32;
            continue;
        }
        let mut sent = 0;
        while sent < n {
            let k = R::push_burst(tx, &buf[sent..n]);
            if k == 0 {
                match case.shape {
                    Shape::Pause => spin_loop(),
                    Shape::Counters => failed += 1,
                    Shape::Plain | Shape::Outside => {}
                }
            }
            sent += k;
        }
        next += n as u32;
    }
    (acc, failed)
}

fn consumer<R: Ring>(rx: &mut R::Rx, case: Case, items: u32, steps: u32) -> (u64, u64, u64) {
    let slow = case.regime == Regime::SlowConsumer;
    let mut sum = 0u64;
    let mut acc = 0u64;
    let mut empty = 0u64;
    let mut got = 0u32;
    if case.burst == 1 {
        while got < items {
            if let Some(v) = R::pop(rx) {
                sum += u64::from(v);
                got += 1;
                if slow {
                    acc = work(acc ^ u64::from(v), steps);
                }
            } else {
                match case.shape {
                    Shape::Pause => spin_loop(),
                    Shape::Counters => empty += 1,
                    Shape::Plain | Shape::Outside => {}
                }
            }
        }
        return (sum, acc, empty);
    }
    let mut buf = [0u32; 32];
    while got < items {
        let n = R::pop_burst(rx, &mut buf[..case.burst]);
        if n == 0 {
            match case.shape {
                Shape::Pause => spin_loop(),
                Shape::Counters => empty += 1,
                Shape::Plain | Shape::Outside => {}
            }
            continue;
        }
        for &v in &buf[..n] {
            sum += u64::from(v);
            if slow {
                acc = work(acc ^ u64::from(v), steps);
            }
        }
        got += n as u32;
    }
    (sum, acc, empty)
}

fn run<R: Ring>(case: Case, opts: &Opts) -> Run {
    let (mut tx, mut rx) = R::new();
    let items = opts.items;
    let steps = black_box(opts.steps);
    let start = Barrier::new(2);
    let (elapsed, failed, empty) = std::thread::scope(|s| {
        let start = &start;
        let prod = s.spawn(move || {
            pin(opts.cpus.map(|c| c.0));
            start.wait();
            let t0 = Instant::now();
            let (acc, failed) = producer::<R>(&mut tx, case, items, steps);
            black_box(acc);
            (t0, failed)
        });
        let cons = s.spawn(move || {
            pin(opts.cpus.map(|c| c.1));
            start.wait();
            let (sum, acc, empty) = consumer::<R>(&mut rx, case, items, steps);
            let t1 = Instant::now();
            black_box(acc);
            let n = u64::from(items);
            assert_eq!(sum, n * (n - 1) / 2, "{} lost or duplicated items", R::NAME);
            (t1, empty)
        });
        let (t0, failed) = prod.join().expect("producer thread");
        let (t1, empty) = cons.join().expect("consumer thread");
        (t1.saturating_duration_since(t0), failed, empty)
    });
    Run {
        ns_per_item: elapsed.as_secs_f64() * 1e9 / f64::from(items),
        failed_pushes: failed,
        empty_pops: empty,
    }
}

/// The contenders, in table order.
const CONTENDERS: [&str; 4] = [NcPark::NAME, NcPoll::NAME, Rtrb::NAME, Nexus::NAME];

fn run_named(name: &str, case: Case, opts: &Opts) -> Run {
    match name {
        "nc-park" => run::<NcPark>(case, opts),
        "nc-poll" => run::<NcPoll>(case, opts),
        "rtrb" => run::<Rtrb>(case, opts),
        _ => run::<Nexus>(case, opts),
    }
}

struct Opts {
    rounds: usize,
    items: u32,
    steps: u32,
    cpus: Option<(usize, usize)>,
    filter: Vec<String>,
    verbose: bool,
    only: Option<&'static str>,
}

fn parse_args() -> Result<Opts, String> {
    let mut opts = Opts {
        rounds: 5,
        items: 10_000_000,
        steps: 4,
        cpus: None,
        filter: Vec::new(),
        verbose: false,
        only: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |what: &str| args.next().ok_or_else(|| format!("{arg} needs {what}"));
        match arg.as_str() {
            "--rounds" => opts.rounds = value("a count")?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--items" => opts.items = value("a count")?.parse().map_err(|e| format!("--items: {e}"))?,
            "--work" => opts.steps = value("a step count")?.parse().map_err(|e| format!("--work: {e}"))?,
            "--cpus" => {
                let v = value("two CPUs, e.g. 2,3")?;
                let (a, b) = v.split_once(',').ok_or("--cpus wants two CPUs, e.g. 2,3")?;
                let a = a.parse().map_err(|e| format!("--cpus: {e}"))?;
                let b = b.parse().map_err(|e| format!("--cpus: {e}"))?;
                opts.cpus = Some((a, b));
            }
            "--filter" => opts.filter.push(value("a substring of a case label")?),
            "--verbose" => opts.verbose = true,
            "--only" => {
                let v = value("a contender")?;
                let name = CONTENDERS
                    .iter()
                    .find(|&&c| c == v)
                    .ok_or_else(|| format!("--only: no contender {v}; one of {}", CONTENDERS.join(", ")))?;
                opts.only = Some(name);
            }
            "--help" | "-h" => return Err(String::new()),
            // `cargo bench` passes this to harness-less targets.
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if opts.items < 2 || opts.rounds == 0 {
        return Err("--items must be at least 2 and --rounds at least 1".into());
    }
    Ok(opts)
}

fn cases(filter: &[String]) -> Vec<Case> {
    let mut all = Vec::new();
    for regime in [Regime::Free, Regime::SlowProducer, Regime::SlowConsumer] {
        for (burst, shapes) in [
            (1, &[Shape::Plain, Shape::Pause, Shape::Counters][..]),
            (32, &[Shape::Plain, Shape::Outside, Shape::Pause, Shape::Counters][..]),
        ] {
            for &shape in shapes {
                all.push(Case { regime, burst, shape });
            }
        }
    }
    all.retain(|c| filter.is_empty() || filter.iter().any(|f| c.label().contains(f.as_str())));
    all
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn main() {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("channel_regimes: {e}");
            }
            eprintln!(
                "usage: channel_regimes [--rounds N] [--items N] [--work STEPS] [--cpus P,C] [--filter S]... [--verbose] [--only CONTENDER]"
            );
            std::process::exit(2);
        }
    };
    let cases = cases(&opts.filter);
    if let Some(name) = opts.only {
        // One contender alone, for a profiler attached to the whole process (`perf stat`).
        for round in 0..opts.rounds {
            for &case in &cases {
                let r = run_named(name, case, &opts);
                println!(
                    "round {round} {:<28} {name:<8} {:>7.2} ns/item  failed pushes {:>10}  empty pops {:>10}",
                    case.label(),
                    r.ns_per_item,
                    r.failed_pushes,
                    r.empty_pops
                );
            }
        }
        return;
    }
    // ns[case][contender][round]
    let mut ns = vec![vec![Vec::new(); CONTENDERS.len()]; cases.len()];
    let mut ratio = vec![Vec::new(); cases.len()];
    let t = Instant::now();
    for round in 0..opts.rounds {
        for (ci, &case) in cases.iter().enumerate() {
            // Rotate the order within a case so no contender always runs first.
            let mut this = [0.0; CONTENDERS.len()];
            for k in 0..CONTENDERS.len() {
                let idx = (k + round + ci) % CONTENDERS.len();
                let r = run_named(CONTENDERS[idx], case, &opts);
                if opts.verbose {
                    eprintln!(
                        "round {round} {:<28} {:<8} {:>7.2} ns/item  failed pushes {:>10}  empty pops {:>10}",
                        case.label(),
                        CONTENDERS[idx],
                        r.ns_per_item,
                        r.failed_pushes,
                        r.empty_pops
                    );
                }
                this[idx] = r.ns_per_item;
                ns[ci][idx].push(r.ns_per_item);
            }
            ratio[ci].push(this[2].min(this[3]) / this[0]);
        }
        eprintln!("round {} of {} done ({:.0?})", round + 1, opts.rounds, t.elapsed());
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "channel_regimes: {} items of u32, capacity {CAPACITY}, {} interleaved rounds, medians in ns/item; \
         work = {} multiply-add steps per item on the slow side; cpus {:?}; loadavg {}",
        opts.items,
        opts.rounds,
        opts.steps,
        opts.cpus,
        load.trim()
    );
    println!(
        "vs faster = median over rounds of min(rtrb, nexus) / nc-park (above 1: the net channel is faster)"
    );
    println!();
    println!("| regime | burst | loop | nc-park | nc-poll | rtrb 0.4 | nexus-queue 1.3 | vs faster |");
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for (ci, case) in cases.iter().enumerate() {
        let m: Vec<f64> = ns[ci].iter_mut().map(|v| median(v)).collect();
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}x |",
            case.regime.name(),
            case.burst,
            case.shape.name(),
            m[0],
            m[1],
            m[2],
            m[3],
            median(&mut ratio[ci])
        );
    }
}
