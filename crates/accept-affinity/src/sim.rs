//! A deterministic discrete-event simulation of the Affinity-Accept paper's load-balancer experiment
//! (Pesterev et al., EuroSys 2012, §6.5), driving the crate's real [`AcceptQueue`] and
//! [`SoftwareSteering`] with virtual time.
//!
//! # What is simulated
//!
//! * **Machine.** `cores` cores (48 by default), each running one web-server worker and one RX queue
//!   of the NIC. The NIC routes each of the 4096 flow groups (the low 12 bits of the client's source
//!   port, [`FlowGroup::of_port`]) to a core through a [`SoftwareSteering`] table, which flow-group
//!   migration rewrites.
//! * **Clients.** Connections arrive as a Poisson process at `load` times the server's capacity (the
//!   capacity is computed from the cost model below, for all-local processing). Each picks a random
//!   source port and sends `batches` of requests (default 1, 2 and 3 requests, 6 in all) with a think
//!   time of 100 ms between the response to one batch and the next batch. Each request asks for one of
//!   30,000 files whose sizes are drawn once, log-uniformly between 30 and 5,670 bytes. Connection
//!   latency runs from the first SYN to the last response. A client whose connection is refused (accept
//!   queue full: the handshake is dropped) retransmits its SYN after 1, 3 and 7 s, as Linux does with
//!   an initial RTO of 1 s; a client with no complete answer 10 s after its first SYN gives up, and the
//!   connection counts as a timeout with a latency of 10 s.
//! * **Work on a core.** Every core serves its work non-preemptively: RX work (the handshake, the
//!   packets of each request batch) on the core the group is routed to *at that moment*, before
//!   application work; application work (the accept plus the first batch, then each later batch) on
//!   the core that accepted the connection. A worker with no work calls
//!   [`AcceptQueue::try_accept`], which decides (Stock: the one queue; Fine: round-robin; Affinity:
//!   local first, busy victims 5:1) exactly as in the real server. An enqueue wakes an idle worker that
//!   may take the connection the way [`AcceptQueue::enqueue`] picks a sleeper: the core's own worker
//!   first, else (Stock, Fine, or Affinity when the core is busy) the next idle (non-busy) core.
//! * **Costs** ([`Costs`]). RX work per handshake and per request, an accept cost, and per request a
//!   fixed cost plus a cost per byte of the file. When the accepting core is not the core the
//!   connection's packets arrive on, all of that connection's work costs `remote_penalty` more (the
//!   paper's cache misses on connection state shared across cores; its Table 3 shows ~40% more cycles
//!   in packet processing under Fine-Accept).
//! * **The hog** ([`HogConfig`]). From `start`, a CPU-bound job (the paper's parallel kernel build) runs
//!   on the upper half of the cores with `work` seconds of CPU per core. RX work runs in softirq
//!   context, ahead of any process: the hog does not slow it, and gets nothing of a core while RX work
//!   runs there. Application work competes with the hog as processes do: while a hog core runs
//!   application work, the hog takes `share` of the core (application work runs at `1 - share`
//!   speed). While a hog core has no web work, the hog runs at full speed. The hog is one pool of work
//!   spread over its cores (as `make -j` spreads jobs), so it completes when the pool is empty; its solo
//!   time is `work`.
//! * **Balancer.** Every 10 ms of virtual time the simulator calls [`AcceptQueue::balance_at`], which
//!   runs a migration round when one is due (every 100 ms under the paper's parameters).
//!
//! The six configurations ([`Variant`]) are all real policies of the crate: Stock, Fine and Affinity;
//! Affinity without migration (a migration interval longer than any run); Affinity without stealing (a
//! busy threshold of 100%, which no queue can exceed, so no core is ever busy: no steals and therefore
//! no migrations); and `SO_REUSEPORT`-style static hashing (the same never-busy Affinity queue, but each
//! connection is queued on the core a fixed hash of its source port names, independent of the NIC's
//! routing, and no group ever moves).
//!
//! # What is left out
//!
//! Lock contention and cache-line transfers inside the accept queue (so Stock is not 2.8x slower than
//! Fine here, as it is in the paper), the cost of migration itself, TCP retransmissions other than the
//! SYN's, NIC bandwidth limits, the Linux process scheduler
//! (one worker per core, pinned, as the paper pins Apache's threads), RX work preempting application
//! work already running (it only goes first in the core's queue), and the kernel build's serial phases
//! (the hog is one parallel phase).
//!
//! # The backlog
//!
//! The default backlog is 1024 (lighttpd's default), 21 connections per core on 48 cores. With
//! Apache's default of 511 (10 per core) the paper's busy rule misbehaves: the running average is fed
//! the queue length *after* each enqueue, which is at least 1, and the low-water mark is 10% of 10 =
//! 1, so once a burst has lifted the average above 1 it never falls below the mark again, and a core
//! that became busy stays busy for good. Busy cores neither steal nor take flow groups, so stealing
//! and migration fade out (measured with the hog: 15 steals/s and 2.7 migrations/s instead of 41 and
//! 32, the hog at 1.82x its solo time instead of 1.60x,
//! `cargo run --release -p netchannels-benches --example accept_sim -- --backlog 511`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::time::Duration;

use netchannel::signature::FlowGroup;
use netchannel::steering::{FlowSteering, SoftwareSteering};

use crate::{AcceptError, AcceptQueue, AffinityConfig, EnqueueError, Policy};

/// Nanoseconds of virtual time.
type Ns = u64;

const NS_PER_SEC: f64 = 1e9;

/// Rounds a non-negative duration in nanoseconds to an integer number of nanoseconds.
#[expect(
    clippy::cast_possible_truncation,
    reason = "simulated durations are far below 2^64 ns; negative or NaN inputs saturate to 0"
)]
fn round_ns(x: f64) -> Ns {
    x.round() as Ns
}

fn secs(ns: Ns) -> f64 {
    ns as f64 / NS_PER_SEC
}

fn dur_ns(d: Duration) -> Ns {
    Ns::try_from(d.as_nanos()).unwrap_or(Ns::MAX)
}

/// A tiny deterministic PRNG (splitmix64). Kept rather than `fastrand`: it is public API, and every
/// recorded simulator run replays from its seed under this stream.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `[0, 1)` (53 random bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform number in `0..n` (`n > 0`; the modulo bias is below 2^-40 for the sizes used here).
    pub fn below(&mut self, n: usize) -> usize {
        let n = u64::try_from(n.max(1)).unwrap_or(u64::MAX);
        usize::try_from(self.next_u64() % n).unwrap_or(0)
    }

    /// An exponentially distributed number with mean `mean`.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.next_f64()).ln()
    }
}

/// CPU costs of the web-server work, in microseconds at full speed on a core.
#[derive(Clone, Debug, PartialEq)]
pub struct Costs {
    /// RX processing of a connection's handshake (SYN and ACK), on the core the group is routed to.
    pub rx_handshake_us: f64,
    /// The accept itself, on the accepting core.
    pub accept_us: f64,
    /// RX processing of one request's packets, on the core the group is routed to.
    pub rx_request_us: f64,
    /// Application work per request, independent of the file (parsing, the response's headers, TX).
    pub request_us: f64,
    /// Application work per byte of the file served.
    pub per_byte_us: f64,
    /// Extra cost of all of a connection's work when it is accepted on a core other than the one its
    /// packets arrive on (0.3 = 30% more).
    pub remote_penalty: f64,
}

impl Default for Costs {
    /// About 5 ms of CPU per 6-request connection, a third of it RX processing.
    fn default() -> Self {
        Self {
            rx_handshake_us: 200.0,
            accept_us: 150.0,
            rx_request_us: 250.0,
            request_us: 300.0,
            per_byte_us: 0.2,
            remote_penalty: 0.3,
        }
    }
}

/// The CPU hog on half of the cores.
#[derive(Clone, Debug, PartialEq)]
pub struct HogConfig {
    /// When it starts.
    pub start: Duration,
    /// Its CPU work per hog core: its completion time when it runs alone.
    pub work: Duration,
    /// The fraction of a hog core it takes while the web server has work there (0.5: half).
    pub share: f64,
}

/// The experiment's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Cores (one worker, one RX queue each).
    pub cores: usize,
    /// The listener's backlog, split evenly over the cores (Stock: one queue of this size).
    pub backlog: usize,
    /// Offered load as a fraction of the capacity with all-local processing (0.5 = 50%).
    pub load: f64,
    /// Requests per batch; a think time separates consecutive batches.
    pub batches: Vec<u32>,
    /// Client think time between a batch's last response and the next batch.
    pub think: Duration,
    /// Clients give up on a connection this long after its first SYN.
    pub give_up: Duration,
    /// SYN retransmissions after a refused handshake, as offsets from the first SYN.
    pub syn_retries: Vec<Duration>,
    /// Distinct files.
    pub files: usize,
    /// Smallest and largest file in bytes (sizes log-uniform in between).
    pub file_bytes: (u32, u32),
    /// The cost model.
    pub costs: Costs,
    /// The hog, if any. Without one, connections arrive for `duration`.
    pub hog: Option<HogConfig>,
    /// Arrivals without a hog; with a hog, arrivals run until the hog completes plus `tail`.
    pub duration: Duration,
    /// Connections arriving before this are warm-up: not in the balanced statistics.
    pub warmup: Duration,
    /// Arrivals continue this long after the hog completes.
    pub tail: Duration,
    /// Width of the bins of the latency-over-time series.
    pub bin: Duration,
    /// The PRNG seed.
    pub seed: u64,
    /// Check conservation after every event (default: in debug builds).
    pub verify: bool,
}

impl SimConfig {
    /// The paper's experiment: 48 cores, a backlog of 1024, 50% load, a hog taking half the CPU on 24
    /// cores from 5 s with 40 s of work per core (its solo time), seed fixed.
    #[must_use]
    pub fn paper() -> Self {
        Self {
            cores: 48,
            backlog: 1024,
            load: 0.5,
            batches: vec![1, 2, 3],
            think: Duration::from_millis(100),
            give_up: Duration::from_secs(10),
            syn_retries: vec![Duration::from_secs(1), Duration::from_secs(3), Duration::from_secs(7)],
            files: 30_000,
            file_bytes: (30, 5670),
            costs: Costs::default(),
            hog: Some(HogConfig { start: Duration::from_secs(5), work: Duration::from_secs(40), share: 0.5 }),
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(1),
            tail: Duration::from_secs(1),
            bin: Duration::from_millis(500),
            seed: 0x5EED_0000_AFF1_2012,
            verify: cfg!(debug_assertions),
        }
    }

    /// A small, fast version for tests: 8 cores, a hog from 2 s with 6 s of work.
    #[must_use]
    pub fn quick() -> Self {
        Self {
            cores: 8,
            backlog: 128,
            hog: Some(HogConfig { start: Duration::from_secs(2), work: Duration::from_secs(6), share: 0.5 }),
            duration: Duration::from_secs(4),
            ..Self::paper()
        }
    }

    /// The same configuration without the hog (the balanced run).
    #[must_use]
    pub fn balanced(&self) -> Self {
        Self { hog: None, ..self.clone() }
    }

    /// Mean file size of the file set this configuration generates.
    #[must_use]
    pub fn mean_file_bytes(&self) -> f64 {
        let files = make_files(self);
        files.iter().map(|&s| f64::from(s)).sum::<f64>() / files.len().max(1) as f64
    }

    /// Mean CPU per connection, in seconds, with all processing local.
    #[must_use]
    pub fn mean_connection_cpu(&self) -> f64 {
        let c = &self.costs;
        let requests: f64 = self.batches.iter().map(|&n| f64::from(n)).sum();
        let us = c.rx_handshake_us
            + c.accept_us
            + requests * (c.rx_request_us + c.request_us + c.per_byte_us * self.mean_file_bytes());
        us / 1e6
    }

    /// Connections per second offered: `load` times the all-local capacity of all cores.
    #[must_use]
    pub fn arrival_rate(&self) -> f64 {
        self.load * self.cores as f64 / self.mean_connection_cpu()
    }
}

/// The six configurations of the experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// One shared queue.
    Stock,
    /// Per-core queues, round-robin accepts.
    Fine,
    /// Affinity-Accept with the paper's parameters.
    Affinity,
    /// Affinity-Accept with stealing but no flow-group migration.
    AffinityNoMigration,
    /// Affinity-Accept with neither stealing nor (hence) migration.
    AffinityNoStealing,
    /// `SO_REUSEPORT`-style: a static hash of the source port picks the queue; no stealing, no
    /// migration.
    StaticHash,
}

impl Variant {
    /// All six, in table order.
    pub const ALL: [Self; 6] = [
        Self::Stock,
        Self::Fine,
        Self::Affinity,
        Self::AffinityNoMigration,
        Self::AffinityNoStealing,
        Self::StaticHash,
    ];

    /// A short name for tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Stock => "Stock",
            Self::Fine => "Fine",
            Self::Affinity => "Affinity",
            Self::AffinityNoMigration => "Affinity w/o migration",
            Self::AffinityNoStealing => "Affinity w/o stealing",
            Self::StaticHash => "SO_REUSEPORT hash",
        }
    }

    /// The crate policy this variant runs.
    #[must_use]
    pub fn policy(self) -> Policy {
        let paper = AffinityConfig::default();
        match self {
            Self::Stock => Policy::Stock,
            Self::Fine => Policy::Fine,
            Self::Affinity => Policy::Affinity(paper),
            // Longer than any run: the first round is never due.
            Self::AffinityNoMigration => {
                Policy::Affinity(AffinityConfig { migration_interval: Duration::from_secs(1 << 40), ..paper })
            }
            // No queue can hold more than 100% of its share, so no core is ever busy.
            Self::AffinityNoStealing | Self::StaticHash => {
                Policy::Affinity(AffinityConfig { busy_high_percent: 100, ..paper })
            }
        }
    }

    /// Whether the variant runs the Affinity policy (whose accepts from other queues are steals).
    fn is_affinity(self) -> bool {
        matches!(
            self,
            Self::Affinity | Self::AffinityNoMigration | Self::AffinityNoStealing | Self::StaticHash
        )
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-core counters of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CoreReport {
    /// Connections queued on this core's accept queue.
    pub enqueued: u64,
    /// Connections this core's worker accepted.
    pub accepted: u64,
    /// Sum of the accept-queue waits of the connections this worker accepted from its own queue, in
    /// seconds.
    pub local_wait_sum: f64,
    /// How many such waits.
    pub local_waits: u64,
    /// Sum of the work (seconds at full speed) of this worker's accept jobs.
    pub accept_work_sum: f64,
    /// Sum of their squares.
    pub accept_work_sq_sum: f64,
    /// Accept jobs.
    pub accept_jobs: u64,
}

/// The connections whose first SYN fell in one bin of time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bin {
    /// The bin's start, seconds.
    pub start: f64,
    /// Connections.
    pub connections: u64,
    /// Median latency, seconds.
    pub p50: f64,
    /// 90th percentile latency, seconds.
    pub p90: f64,
    /// Connections that timed out.
    pub timeouts: u64,
}

/// The outcome of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    /// The configuration run.
    pub variant: Variant,
    /// Offered connections per second.
    pub arrival_rate: f64,
    /// Connections started (first SYNs).
    pub connections: u64,
    /// The statistics window: `[from, to)` seconds of SYN time (with a hog: from its start to its
    /// completion; without: from the warm-up to the end of arrivals).
    pub window: (f64, f64),
    /// Connections in the window.
    pub window_connections: u64,
    /// Median latency in the window, seconds (timeouts count as the give-up time).
    pub p50: f64,
    /// 90th percentile latency in the window, seconds.
    pub p90: f64,
    /// Connections in the window that timed out.
    pub timeouts: u64,
    /// Handshakes refused because the accept queue was full (whole run).
    pub dropped: u64,
    /// Fraction of accepts in the window made on the core the connection's packets arrive on.
    pub local_fraction: f64,
    /// Accepts from another core's queue per second in the window (Affinity variants only).
    pub steals_per_s: Option<f64>,
    /// Flow groups migrated per second in the window.
    pub migrations_per_s: f64,
    /// When the hog completed, measured from its start (seconds), if there was one.
    pub hog_completion: Option<f64>,
    /// The hog's solo time (seconds), if there was one.
    pub hog_solo: Option<f64>,
    /// Latency per bin of SYN time ([`SimConfig::bin`] wide), for the bins with connections.
    pub series: Vec<Bin>,
    /// Per-core counters.
    pub cores: Vec<CoreReport>,
    /// Events processed.
    pub events: u64,
    /// Conservation checks made (0 unless [`SimConfig::verify`]).
    pub conservation_checks: u64,
    /// Simulated seconds until the last connection finished.
    pub end: f64,
}

fn make_files(cfg: &SimConfig) -> Vec<u32> {
    let mut rng = SplitMix64::new(cfg.seed ^ 0xF11E_5EED);
    let (lo, hi) = cfg.file_bytes;
    let (lo, hi) = (f64::from(lo.max(1)), f64::from(hi.max(lo.max(1))));
    (0..cfg.files.max(1))
        .map(|_| {
            let s = lo * (hi / lo).powf(rng.next_f64());
            u32::try_from(round_ns(s)).unwrap_or(u32::MAX)
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrival,
    Syn(u32),
    JobDone { core: u32, version: u32 },
    Batch(u32),
    Tick,
    HogStart,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Handshake,
    BatchRx(u8),
    Accept,
    BatchApp(u8),
}

impl Kind {
    fn is_rx(self) -> bool {
        matches!(self, Self::Handshake | Self::BatchRx(_))
    }
}

#[derive(Clone, Copy, Debug)]
struct Job {
    conn: u32,
    kind: Kind,
    /// Nanoseconds at full speed.
    work: f64,
}

#[derive(Clone, Copy, Debug)]
struct Running {
    job: Job,
    left: f64,
    since: Ns,
}

#[derive(Debug, Default)]
struct Worker {
    rx: VecDeque<Job>,
    app: VecDeque<Job>,
    run: Option<Running>,
    version: u32,
    speed: f64,
    hog_core: bool,
}

impl Worker {
    fn idle(&self) -> bool {
        self.run.is_none() && self.rx.is_empty() && self.app.is_empty()
    }
}

const NO_CORE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Conn {
    first_syn: Ns,
    port: u16,
    attempts: u8,
    /// The next request batch, once accepted.
    next_batch: u8,
    app_core: u32,
    enqueued_at: Ns,
    queued_on: u32,
    /// `Ns::MAX` while open.
    end: Ns,
    timed_out: bool,
}

#[derive(Debug, Default)]
struct Hog {
    active: bool,
    start: Ns,
    total: f64,
    done: f64,
    last: Ns,
    cores: usize,
    /// Hog cores running RX work (the hog gets nothing there).
    rx_busy: usize,
    /// Hog cores running application work (the hog gets `share` there).
    app_busy: usize,
    share: f64,
    finished_at: Option<Ns>,
}

impl Hog {
    fn rate(&self) -> f64 {
        (self.cores - self.rx_busy - self.app_busy) as f64 + self.app_busy as f64 * self.share
    }

    /// Integrates progress up to `now`; notes the completion time if the pool ran out.
    fn advance(&mut self, now: Ns) {
        if !self.active || now <= self.last {
            return;
        }
        let rate = self.rate();
        let dt = (now - self.last) as f64;
        if self.finished_at.is_none() && rate > 0.0 && self.done + rate * dt >= self.total {
            let need = (self.total - self.done).max(0.0);
            self.finished_at = Some(self.last + round_ns(need / rate));
        }
        self.done += rate * dt;
        self.last = now;
    }
}

struct Sim<'a> {
    cfg: &'a SimConfig,
    variant: Variant,
    queue: AcceptQueue<u32>,
    steering: SoftwareSteering,
    rng: SplitMix64,
    files: Vec<u32>,
    conns: Vec<Conn>,
    workers: Vec<Worker>,
    heap: BinaryHeap<Reverse<(Ns, u64, Event)>>,
    seq: u64,
    now: Ns,
    hog: Hog,
    arrivals_open: bool,
    stop_arrivals: Ns,
    live: u64,
    arrived: u64,
    accepted: u64,
    dropped: u64,
    mean_gap_ns: f64,
    /// `(time, from another core's queue, local to the RX core)` per accept of a live connection.
    accepts: Vec<(Ns, bool, bool)>,
    migration_times: Vec<Ns>,
    cores: Vec<CoreReport>,
    events: u64,
    checks: u64,
}

impl fmt::Debug for Sim<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim").field("variant", &self.variant).field("now", &self.now).finish_non_exhaustive()
    }
}

/// Runs one configuration and returns its statistics.
///
/// # Panics
///
/// If the configuration has no cores or more than [`MAX_CORES`](crate::MAX_CORES), a zero backlog,
/// no batches, or (with [`SimConfig::verify`]) if conservation is violated.
#[must_use]
pub fn run(cfg: &SimConfig, variant: Variant) -> SimResult {
    let mut sim = Sim::new(cfg, variant);
    sim.run();
    sim.result()
}

impl<'a> Sim<'a> {
    fn new(cfg: &'a SimConfig, variant: Variant) -> Self {
        assert!(!cfg.batches.is_empty(), "a connection needs at least one batch");
        let queue =
            AcceptQueue::new(cfg.cores, cfg.backlog, variant.policy()).expect("valid simulator config");
        let queues = u16::try_from(cfg.cores).expect("at most MAX_CORES cores");
        let hog_cores = cfg.hog.as_ref().map_or(0, |_| cfg.cores / 2);
        let workers = (0..cfg.cores)
            .map(|c| Worker { speed: 1.0, hog_core: c >= cfg.cores - hog_cores, ..Worker::default() })
            .collect();
        let hog = match &cfg.hog {
            Some(h) => Hog {
                start: dur_ns(h.start),
                total: dur_ns(h.work) as f64 * hog_cores as f64,
                cores: hog_cores,
                share: h.share.clamp(0.0, 1.0),
                ..Hog::default()
            },
            None => Hog::default(),
        };
        let rate = cfg.arrival_rate();
        Self {
            cfg,
            variant,
            queue,
            steering: SoftwareSteering::new(queues),
            rng: SplitMix64::new(cfg.seed),
            files: make_files(cfg),
            conns: Vec::new(),
            workers,
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0,
            hog,
            arrivals_open: true,
            stop_arrivals: if cfg.hog.is_some() { Ns::MAX } else { dur_ns(cfg.duration) },
            live: 0,
            arrived: 0,
            accepted: 0,
            dropped: 0,
            mean_gap_ns: NS_PER_SEC / rate,
            accepts: Vec::new(),
            migration_times: Vec::new(),
            cores: vec![CoreReport::default(); cfg.cores],
            events: 0,
            checks: 0,
        }
    }

    fn at(&mut self, t: Ns, e: Event) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, e)));
    }

    fn run(&mut self) {
        self.at(0, Event::Arrival);
        self.at(0, Event::Tick);
        if self.cfg.hog.is_some() {
            self.at(self.hog.start, Event::HogStart);
        }
        while let Some(Reverse((t, _, e))) = self.heap.pop() {
            self.now = t;
            self.events += 1;
            match e {
                Event::Arrival => self.arrival(),
                Event::Syn(c) => self.syn(c),
                Event::JobDone { core, version } => self.job_done(core as usize, version),
                Event::Batch(c) => self.batch(c),
                Event::Tick => self.tick(),
                Event::HogStart => self.hog_start(),
            }
            if self.cfg.verify {
                self.check();
            }
            if !self.arrivals_open && self.live == 0 {
                break;
            }
        }
    }

    fn check(&mut self) {
        let queued: u64 = (0..self.queue_count()).map(|q| self.queue.queue_len(q) as u64).sum();
        assert_eq!(
            self.arrived,
            self.accepted + self.dropped + queued,
            "conservation at t={}s: arrived {} != accepted {} + dropped {} + queued {queued}",
            secs(self.now),
            self.arrived,
            self.accepted,
            self.dropped
        );
        self.checks += 1;
    }

    fn queue_count(&self) -> usize {
        if self.variant == Variant::Stock { 1 } else { self.cfg.cores }
    }

    fn arrival(&mut self) {
        if self.now >= self.stop_arrivals {
            self.arrivals_open = false;
            return;
        }
        let port = u16::try_from(self.rng.next_u64() & 0xFFFF).unwrap_or(0);
        let id = u32::try_from(self.conns.len()).expect("fewer than 2^32 connections");
        self.conns.push(Conn {
            first_syn: self.now,
            port,
            attempts: 0,
            next_batch: 0,
            app_core: NO_CORE,
            enqueued_at: 0,
            queued_on: NO_CORE,
            end: Ns::MAX,
            timed_out: false,
        });
        self.live += 1;
        self.syn(id);
        let gap = round_ns(self.rng.exp(self.mean_gap_ns)).max(1);
        self.at(self.now + gap, Event::Arrival);
    }

    fn rx_core(&self, conn: u32) -> usize {
        usize::from(self.steering.queue_of(FlowGroup::of_port(self.conns[conn as usize].port)))
    }

    fn deadline(&self, conn: u32) -> Ns {
        self.conns[conn as usize].first_syn + dur_ns(self.cfg.give_up)
    }

    /// A SYN (first or retransmitted) arrives: handshake RX work on the group's core, then the queue.
    fn syn(&mut self, conn: u32) {
        let work = self.cfg.costs.rx_handshake_us * 1e3;
        if work <= 0.0 {
            self.enqueue(conn);
        } else {
            let core = self.rx_core(conn);
            self.workers[core].rx.push_back(Job { conn, kind: Kind::Handshake, work });
            self.kick(core);
        }
    }

    fn enqueue(&mut self, conn: u32) {
        let rx = self.rx_core(conn);
        let port = self.conns[conn as usize].port;
        let core = if self.variant == Variant::StaticHash {
            // A hash of the source port unrelated to the NIC's routing (SO_REUSEPORT's socket hash).
            let h = SplitMix64::new(u64::from(port) ^ 0x50_5245_5553_4550).next_u64();
            usize::try_from(h % self.cfg.cores as u64).unwrap_or(0)
        } else {
            rx
        };
        self.arrived += 1;
        match self.queue.enqueue(core, FlowGroup::of_port(port), conn) {
            Ok(target) => {
                let c = &mut self.conns[conn as usize];
                c.enqueued_at = self.now;
                c.queued_on = u32::try_from(target).unwrap_or(NO_CORE);
                self.cores[target].enqueued += 1;
                self.wake_for(if self.variant == Variant::Stock { rx } else { target });
            }
            Err(EnqueueError::Full(_)) => {
                self.dropped += 1;
                let c = &mut self.conns[conn as usize];
                let next =
                    self.cfg.syn_retries.get(usize::from(c.attempts)).map(|&d| c.first_syn + dur_ns(d));
                c.attempts = c.attempts.saturating_add(1);
                match next {
                    Some(t) if t < self.deadline(conn) => self.at(t, Event::Syn(conn)),
                    _ => {
                        let end = self.deadline(conn).max(self.now);
                        self.finish(conn, end, true);
                    }
                }
            }
            Err(e) => panic!("the simulator's accept queue refused a connection: {e}"),
        }
    }

    /// Wakes one idle worker that may take a connection just queued on queue `core` (Stock: `core`
    /// is the RX core), as `AcceptQueue::enqueue` picks a sleeper.
    fn wake_for(&mut self, core: usize) {
        if self.workers[core].idle() {
            self.kick(core);
            return;
        }
        let affinity = self.variant.is_affinity();
        if affinity && !self.queue.is_busy(core) {
            return;
        }
        let n = self.cfg.cores;
        for k in 1..n {
            let u = (core + k) % n;
            if self.workers[u].idle() && !(affinity && self.queue.is_busy(u)) {
                self.kick(u);
                return;
            }
        }
    }

    fn set_running(&mut self, core: usize, run: Option<Running>) {
        if self.workers[core].hog_core && self.hog.active {
            self.hog.advance(self.now);
            match self.workers[core].run.map(|r| r.job.kind.is_rx()) {
                Some(true) => self.hog.rx_busy -= 1,
                Some(false) => self.hog.app_busy -= 1,
                None => {}
            }
            match run.map(|r| r.job.kind.is_rx()) {
                Some(true) => self.hog.rx_busy += 1,
                Some(false) => self.hog.app_busy += 1,
                None => {}
            }
        }
        self.workers[core].run = run;
    }

    /// Starts the next piece of work on `core` if its worker is free: RX work, application work, or
    /// an accept.
    fn kick(&mut self, core: usize) {
        if self.workers[core].run.is_some() {
            return;
        }
        let w = &mut self.workers[core];
        let (job, pass_on) = match w.rx.pop_front().or_else(|| w.app.pop_front()) {
            Some(j) => (j, None),
            None => match self.accept(core) {
                Some((j, q)) => (j, Some(q)),
                None => return,
            },
        };
        self.set_running(core, Some(Running { job, left: job.work, since: self.now }));
        self.schedule_done(core);
        // Pass the wake on if the queue still holds connections (as the real queue does).
        if let Some(q) = pass_on
            && self.queue.queue_len(q) > 0
        {
            self.wake_for(q);
        }
    }

    fn schedule_done(&mut self, core: usize) {
        let w = &mut self.workers[core];
        let Some(r) = w.run else { return };
        w.version = w.version.wrapping_add(1);
        let version = w.version;
        // RX work runs in softirq context, ahead of any process: the hog does not slow it.
        let speed = if r.job.kind.is_rx() { 1.0 } else { w.speed };
        let t = self.now + round_ns(r.left / speed);
        self.at(t, Event::JobDone { core: u32::try_from(core).unwrap_or(NO_CORE), version });
    }

    fn batch_work(&mut self, n: u32) -> f64 {
        let c = &self.cfg.costs;
        let mut us = 0.0;
        for _ in 0..n {
            let size = self.files[self.rng.below(self.files.len())];
            us += c.request_us + c.per_byte_us * f64::from(size);
        }
        us * 1e3
    }

    fn penalty(&self, conn: u32) -> f64 {
        let app = self.conns[conn as usize].app_core as usize;
        if app == self.rx_core(conn) { 1.0 } else { 1.0 + self.cfg.costs.remote_penalty }
    }

    /// Accepts on `core`: the accept job and the queue it came from.
    fn accept(&mut self, core: usize) -> Option<(Job, usize)> {
        let acc = match self.queue.try_accept(core) {
            Ok(a) => a,
            Err(AcceptError::WouldBlock) => return None,
            Err(e) => panic!("the simulator's accept failed: {e}"),
        };
        self.accepted += 1;
        let conn = acc.conn;
        let queued_on = self.conns[conn as usize].queued_on as usize;
        let stolen = self.variant != Variant::Stock && acc.queue != core;
        self.conns[conn as usize].app_core = u32::try_from(core).unwrap_or(NO_CORE);
        let local = core == self.rx_core(conn);
        let report = &mut self.cores[core];
        report.accepted += 1;
        if queued_on == core {
            report.local_wait_sum += secs(self.now - self.conns[conn as usize].enqueued_at);
            report.local_waits += 1;
        }
        let accept_work = self.cfg.costs.accept_us * 1e3;
        if self.now >= self.deadline(conn) {
            // The client is gone: the server accepts a reset connection and closes it.
            let end = self.deadline(conn);
            self.finish(conn, end, true);
            return Some((Job { conn, kind: Kind::Accept, work: accept_work }, acc.queue));
        }
        self.accepts.push((self.now, stolen, local));
        let first = self.cfg.batches[0];
        let work = (accept_work + self.batch_work(first)) * self.penalty(conn);
        let report = &mut self.cores[core];
        report.accept_work_sum += work / NS_PER_SEC;
        report.accept_work_sq_sum += (work / NS_PER_SEC).powi(2);
        report.accept_jobs += 1;
        Some((Job { conn, kind: Kind::Accept, work }, acc.queue))
    }

    fn finish(&mut self, conn: u32, end: Ns, timed_out: bool) {
        let c = &mut self.conns[conn as usize];
        if c.end != Ns::MAX {
            return;
        }
        c.end = end;
        c.timed_out = timed_out;
        self.live -= 1;
    }

    fn job_done(&mut self, core: usize, version: u32) {
        if self.workers[core].version != version {
            return;
        }
        let Some(r) = self.workers[core].run else { return };
        self.set_running(core, None);
        let conn = r.job.conn;
        let open = self.conns[conn as usize].end == Ns::MAX;
        match r.job.kind {
            Kind::Handshake => self.enqueue(conn),
            Kind::BatchRx(b) if open => {
                let app = self.conns[conn as usize].app_core as usize;
                let n = self.cfg.batches[usize::from(b)];
                let work = self.batch_work(n) * self.penalty(conn);
                self.workers[app].app.push_back(Job { conn, kind: Kind::BatchApp(b), work });
                self.kick(app);
            }
            Kind::Accept | Kind::BatchApp(_) if open => {
                let b = match r.job.kind {
                    Kind::BatchApp(b) => usize::from(b),
                    _ => 0,
                };
                if self.now > self.deadline(conn) {
                    let end = self.deadline(conn);
                    self.finish(conn, end, true);
                } else if b + 1 == self.cfg.batches.len() {
                    self.finish(conn, self.now, false);
                } else {
                    self.at(self.now + dur_ns(self.cfg.think), Event::Batch(conn));
                    self.conns[conn as usize].next_batch = u8::try_from(b + 1).unwrap_or(u8::MAX);
                }
            }
            _ => {}
        }
        self.kick(core);
    }

    /// The next batch of requests arrives.
    fn batch(&mut self, conn: u32) {
        if self.now >= self.deadline(conn) {
            let end = self.deadline(conn);
            self.finish(conn, end, true);
            return;
        }
        let b = self.conns[conn as usize].next_batch;
        let n = self.cfg.batches[usize::from(b)];
        let work = self.cfg.costs.rx_request_us * 1e3 * f64::from(n) * self.penalty(conn);
        let rx = self.rx_core(conn);
        self.workers[rx].rx.push_back(Job { conn, kind: Kind::BatchRx(b), work });
        self.kick(rx);
    }

    fn tick(&mut self) {
        let now = Duration::from_nanos(self.now);
        if let Some(report) = self.queue.balance_at(now, &mut self.steering) {
            self.migration_times.extend(std::iter::repeat_n(self.now, report.migrations.len()));
        }
        if self.hog.active {
            self.hog.advance(self.now);
            if self.hog.finished_at.is_some() {
                self.hog_end();
            }
        }
        if self.arrivals_open || self.live > 0 {
            self.at(self.now + 10_000_000, Event::Tick);
        }
    }

    fn set_hog_speed(&mut self, speed: f64) {
        for core in 0..self.cfg.cores {
            if !self.workers[core].hog_core {
                continue;
            }
            let w = &mut self.workers[core];
            if let Some(r) = &mut w.run
                && !r.job.kind.is_rx()
            {
                r.left = (r.left - (self.now - r.since) as f64 * w.speed).max(0.0);
                r.since = self.now;
            }
            w.speed = speed;
            self.schedule_done(core);
        }
    }

    fn hog_start(&mut self) {
        self.hog.active = true;
        self.hog.last = self.now;
        let running = |rx: bool| {
            self.workers
                .iter()
                .filter(|w| w.hog_core && w.run.is_some_and(|r| r.job.kind.is_rx() == rx))
                .count()
        };
        self.hog.rx_busy = running(true);
        self.hog.app_busy = running(false);
        let speed = (1.0 - self.hog.share).max(1e-3);
        self.set_hog_speed(speed);
    }

    fn hog_end(&mut self) {
        self.hog.active = false;
        self.set_hog_speed(1.0);
        let done = self.hog.finished_at.unwrap_or(self.now);
        self.stop_arrivals = done + dur_ns(self.cfg.tail);
    }

    fn result(&self) -> SimResult {
        let (from, to) = match (&self.cfg.hog, self.hog.finished_at) {
            (Some(_), Some(done)) => (self.hog.start, done),
            (Some(_), None) => (self.hog.start, self.now),
            (None, _) => (dur_ns(self.cfg.warmup), dur_ns(self.cfg.duration)),
        };
        let give_up = secs(dur_ns(self.cfg.give_up));
        let latency = |c: &Conn| if c.timed_out { give_up } else { secs(c.end - c.first_syn) };
        let mut window: Vec<f64> = Vec::new();
        let mut timeouts = 0;
        for c in self.conns.iter().filter(|c| c.first_syn >= from && c.first_syn < to) {
            window.push(latency(c));
            timeouts += u64::from(c.timed_out);
        }
        window.sort_by(f64::total_cmp);
        let span = secs(to.saturating_sub(from)).max(1e-9);
        let in_window = |t: Ns| t >= from && t < to;
        let accepts: Vec<_> = self.accepts.iter().filter(|a| in_window(a.0)).collect();
        let local = accepts.iter().filter(|a| a.2).count();
        let steals = accepts.iter().filter(|a| a.1).count();
        let migrations = self.migration_times.iter().filter(|&&t| in_window(t)).count();
        // The latency series.
        let bin = dur_ns(self.cfg.bin).max(1);
        let mut bins: Vec<(Vec<f64>, u64)> = Vec::new();
        for c in &self.conns {
            let i = usize::try_from(c.first_syn / bin).unwrap_or(usize::MAX);
            if bins.len() <= i {
                bins.resize_with(i + 1, Default::default);
            }
            bins[i].0.push(latency(c));
            bins[i].1 += u64::from(c.timed_out);
        }
        let series = bins
            .iter_mut()
            .enumerate()
            .filter(|(_, (v, _))| !v.is_empty())
            .map(|(i, (v, timeouts))| {
                v.sort_by(f64::total_cmp);
                Bin {
                    start: secs(bin * i as u64),
                    connections: v.len() as u64,
                    p50: quantile(v, 0.5),
                    p90: quantile(v, 0.9),
                    timeouts: *timeouts,
                }
            })
            .collect();
        SimResult {
            variant: self.variant,
            arrival_rate: self.cfg.arrival_rate(),
            connections: self.conns.len() as u64,
            window: (secs(from), secs(to)),
            window_connections: window.len() as u64,
            p50: quantile(&window, 0.5),
            p90: quantile(&window, 0.9),
            timeouts,
            dropped: self.dropped,
            local_fraction: if accepts.is_empty() { 0.0 } else { local as f64 / accepts.len() as f64 },
            steals_per_s: self.variant.is_affinity().then(|| steals as f64 / span),
            migrations_per_s: migrations as f64 / span,
            hog_completion: self.hog.finished_at.map(|t| secs(t - self.hog.start)),
            hog_solo: self.cfg.hog.as_ref().map(|h| h.work.as_secs_f64()),
            series,
            cores: self.cores.clone(),
            events: self.events,
            conservation_checks: self.checks,
            end: secs(self.now),
        }
    }
}

/// The `q` quantile of sorted values (nearest rank; 0 for none).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = round_ns((q * sorted.len() as f64).ceil()).max(1);
    let i = usize::try_from(rank).unwrap_or(usize::MAX).min(sorted.len()) - 1;
    sorted[i]
}

/// The Pollaczek-Khinchine mean wait in an M/G/1 queue with arrival rate `lambda` and service-time
/// moments `es = E[S]`, `es2 = E[S^2]`: `lambda * E[S^2] / (2 (1 - rho))`, `rho = lambda * E[S]`.
#[must_use]
pub fn pollaczek_khinchine(lambda: f64, es: f64, es2: f64) -> f64 {
    let rho = lambda * es;
    lambda * es2 / (2.0 * (1.0 - rho))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        assert_eq!(quantile(&v, 0.5), 5.0);
        assert_eq!(quantile(&v, 0.9), 9.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn file_sizes_in_range() {
        let cfg = SimConfig::quick();
        let files = make_files(&cfg);
        assert_eq!(files.len(), 30_000);
        assert!(files.iter().all(|&s| (30..=5670).contains(&s)));
        let mean = cfg.mean_file_bytes();
        assert!((1000.0..1150.0).contains(&mean), "log-uniform mean {mean}");
    }
}
