//! The TCP echo service behind `cargo run --release --example echo`: the whole data path of the
//! design (DESIGN.md §2) from the NIC's queues to per-core TCP stacks, with Affinity-Accept between
//! the cores, and an in-process client that checks every echoed byte.
//!
//! # Backends
//!
//! * **The 82599 model** (the default): [`ixgbe_vfio::sim::Model`] on its own thread, the
//!   [`ixgbe_vfio::driver::Ixgbe`] driver with one queue pair per core, and the model's port wired
//!   through an in-memory [`Pair`] to a client [`Stack`] on the calling thread. No NIC, no root.
//! * **A TAP device** ([`Backend::Tap`]): one core serves the Linux kernel's sockets through
//!   [`Tap`] (the kernel is the client).
//! * **A real 82599 over VFIO** ([`Backend::Pci`]): [`ixgbe_vfio::platform::open`], then the same
//!   per-core server as on the model; the clients are whatever is on the wire.
//!
//! # One core
//!
//! Core `c` owns the driver's queue `c`, a [`Channelizer`] for it and a tcp-lib [`Stack`]. The
//! channelizer delivers every frame of queue `c` to the queue's *default channel*, which core `c`'s
//! stack consumes: the registry holds no signature. That is the simplest correct wiring while
//! stolen connections are not redirected (issue 6 §2): a per-core stack is only correct for the
//! flows the NIC steers to its queue, and Flow Director steers TCP by flow group (the low 12 bits
//! of the client's port), groups round-robin over the queues, so each stack sees exactly the
//! connections it owns, whatever the registry says. The stack's output goes into a TX channel that
//! the channelizer drains into queue `c`. All stacks share the NIC's MAC and IP address.
//!
//! ARP is the exception to "one queue, one stack": a frame that is not TCP lands on one queue (RSS
//! or queue 0), yet every core's stack must know the client's MAC. So an ARP frame received on one
//! core is also given to every other core's stack, rewritten into a reply (so those stacks learn the
//! sender but do not answer).
//!
//! # Accepting
//!
//! One [`AcceptQueue`] across the cores with [`Policy::affinity`], fed through each stack's
//! [`AcceptHook`]: an established connection is queued on the core it arrived on, with its flow
//! group. Each core's loop accepts from its queue. A [`StreamId`] names a connection of one stack,
//! so a connection stolen by another core (`Accepted::remote`) cannot be served there until packet
//! redirection exists: the stealer hands it back to its own core, which serves it. Steals are
//! therefore counted as the accept queue decided them, but every connection is served where its
//! packets arrive. Flow-group migration ([`AcceptQueue::balance`]) is not run, for the same reason:
//! moving a group in the NIC would move live connections' packets to a stack that does not have
//! them; the summary reports zero migrations.
//!
//! # Placement
//!
//! [`Placement::Same`]: the channelizer and the stack of a core run on one thread, polling in turn.
//! [`Placement::Split`]: the channelizer on one thread, the stack and the echo service on another,
//! the two joined by the default and TX channels.
//!
//! # The client (model backend)
//!
//! An in-process tcp-lib [`Stack`] on the other end of the wire opens [`Options::conns`]
//! connections from random ephemeral ports (so their flow groups spread over the queues). Each sends
//! messages of random size in [`Options::size`], one at a time, and checks the echo byte for byte;
//! the latency of a message is from its first `send` to the last byte of its echo. After
//! [`Options::messages`] messages (or when [`Options::duration`] is up) it half-closes, waits for
//! the server's FIN and closes.

use std::cell::RefCell;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use accept_affinity::{AcceptQueue, Policy};
use ixgbe_vfio::driver::{Config as NicConfig, Ixgbe, NicStats};
use ixgbe_vfio::sim::{Model, SimConfig, SimStats, Wire};
use netchannel::channelizer::{Channelizer, ChannelizerStats, SignatureRegistry};
use netchannel::dev::{NetDevice, PacketBatch, Pair, PcapWriter, Tap};
use netchannel::pool::{Audit, HugePages, PacketRx, PacketTx, Pool, PoolCache};
use netchannel::rcu::Qsbr;
use netchannel::signature::FlowGroup;
use tcp_lib::stack::{
    AcceptHook, Config as StackConfig, Error as StackError, ListenerConfig, ListenerId, Stack, StackStats,
    StreamId,
};
use tcp_lib::tcp::State;
use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};

/// The echo port (RFC 862).
pub const DEFAULT_PORT: u16 = 7;
/// The server's address on the model backend (and the default for `--tap` and `--pci`).
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The in-process client's address on the model backend.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// Frames per burst, channel capacities.
const BURST: usize = 32;
/// Capacity of each core's default (RX) and TX channels.
const CHANNEL: usize = 1024;
/// The listener's backlog across all cores (split evenly by the accept queue).
const BACKLOG: usize = 4096;
/// A run with no progress for this long fails.
const STALL: Duration = Duration::from_secs(10);

/// Where the server runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The 82599 model with an in-process client.
    Model,
    /// A TAP interface; the kernel is the client.
    Tap {
        /// The interface name.
        name: String,
        /// The server's address and prefix.
        ip: Ipv4Cidr,
    },
    /// A real 82599 over VFIO; the clients are on the wire.
    Pci {
        /// The PCI address, `0000:03:00.0`.
        addr: String,
        /// The server's address and prefix.
        ip: Ipv4Cidr,
    },
}

/// Where each core's channelizer runs relative to its stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// One thread per core polls the channelizer and runs the stack.
    Same,
    /// Per core, one thread for the channelizer and one for the stack and the echo service.
    Split,
}

/// What to run. [`Options::default`] is the README's run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Where the server runs.
    pub backend: Backend,
    /// Cores (queue pairs, per-core stacks); the TAP backend always uses one.
    pub cores: u16,
    /// Channelizer and stack on one thread per core, or two.
    pub placement: Placement,
    /// Client connections, all open at once (model backend).
    pub conns: usize,
    /// Messages per connection (model backend; ignored when `duration` is set).
    pub messages: u64,
    /// Message sizes, inclusive range in bytes.
    pub size: (usize, usize),
    /// Run the client (or the server, on TAP and PCI) this long.
    pub duration: Option<Duration>,
    /// Record the client's wire (model), the TAP, or each queue (PCI, one file per queue) to this
    /// pcap file.
    pub pcap: Option<PathBuf>,
    /// The echo port.
    pub port: u16,
    /// Seeds message sizes and contents.
    pub seed: u64,
    /// Print a progress line every second.
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Self {
            backend: Backend::Model,
            cores: u16::try_from(cpus.min(16)).unwrap_or(16),
            placement: Placement::Same,
            conns: 64,
            messages: 2000,
            size: (1, 4096),
            duration: None,
            pcap: None,
            port: DEFAULT_PORT,
            seed: 1,
            progress: true,
        }
    }
}

/// The `--help` text.
pub const USAGE: &str = "\
usage: echo [OPTIONS]

A TCP echo service on per-core tcp-lib stacks behind net channels, with Affinity-Accept.

backends (default: the 82599 model with an in-process client):
  --tap NAME           serve the Linux kernel through the TAP interface NAME (needs CAP_NET_ADMIN)
  --pci ADDR           serve on a real 82599 at PCI address ADDR (0000:03:00.0) over VFIO
  --ip A/N             the server's address on --tap and --pci (default 10.0.0.2/24)

options:
  --cores N            cores: queue pairs and per-core stacks, 1..=64 (default: all CPUs, at most 16)
  --queues N           the same as --cores
  --placement P        same: channelizer and stack on one thread per core (default);
                       split: a channelizer thread and a stack thread per core
  --conns N            client connections, all open at once (default 64)
  --messages M         messages per connection (default 2000)
  --size MIN..MAX      message sizes in bytes, or one size N (default 1..4096)
  --duration SECONDS   run the client this long instead of --messages; on --tap/--pci, serve this
                       long (default: until Ctrl-C)
  --pcap FILE          record the client's wire (model), the TAP, or each queue (pci: FILE.qN)
  --port P             the echo port (default 7)
  --seed S             seeds message sizes and contents (default 1)
  --quiet              no progress line
";

impl Options {
    /// Parses command-line arguments (without the program name).
    ///
    /// # Errors
    ///
    /// A message naming the bad argument; `Ok(None)` for `--help`.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Self>, String> {
        let mut o = Self::default();
        let mut tap = None;
        let mut pci = None;
        let mut ip = None;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value (try --help)"));
            match arg.as_str() {
                "--cores" | "--queues" => o.cores = number(&value()?, 1, 64)?,
                "--placement" => {
                    o.placement = match value()?.as_str() {
                        "same" => Placement::Same,
                        "split" => Placement::Split,
                        other => return Err(format!("--placement is same or split, not {other:?}")),
                    }
                }
                "--conns" => o.conns = number(&value()?, 1, 60_000)?,
                "--messages" => o.messages = number(&value()?, 1, u64::MAX)?,
                "--size" => o.size = size_range(&value()?)?,
                "--duration" => {
                    let text = value()?;
                    let secs = text.parse::<f64>().ok().filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9);
                    let secs =
                        secs.ok_or_else(|| format!("--duration: {text:?} is not a positive number"))?;
                    o.duration = Some(Duration::from_secs_f64(secs));
                }
                "--pcap" => o.pcap = Some(PathBuf::from(value()?)),
                "--port" => o.port = number(&value()?, 1, u16::MAX)?,
                "--seed" => o.seed = number(&value()?, 0, u64::MAX)?,
                "--tap" => tap = Some(value()?),
                "--pci" => pci = Some(value()?),
                "--ip" => ip = Some(cidr(&value()?)?),
                "--quiet" => o.progress = false,
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown argument {other:?} (try --help)")),
            }
        }
        let server = ip.unwrap_or_else(|| Ipv4Cidr::new(SERVER_IP, 24).expect("a /24"));
        o.backend = match (tap, pci) {
            (Some(_), Some(_)) => return Err("--tap and --pci exclude each other".into()),
            (Some(name), None) => Backend::Tap { name, ip: server },
            (None, Some(addr)) => Backend::Pci { addr, ip: server },
            (None, None) if ip.is_some() => {
                return Err("--ip is for --tap and --pci; the model's addresses are fixed".into());
            }
            (None, None) => Backend::Model,
        };
        Ok(Some(o))
    }
}

/// `text` as a number in `min..=max`.
fn number<T: std::str::FromStr + PartialOrd + fmt::Display>(text: &str, min: T, max: T) -> Result<T, String> {
    match text.parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(format!("{text:?} is not a number in {min}..={max}")),
    }
}

/// `MIN..MAX` (inclusive) or `N`, sizes in 1..=1 MiB.
fn size_range(text: &str) -> Result<(usize, usize), String> {
    let (min, max) = match text.split_once("..") {
        Some((a, b)) => (number(a, 1, 1 << 20)?, number(b.trim_start_matches('='), 1, 1 << 20)?),
        None => {
            let n = number(text, 1, 1 << 20)?;
            (n, n)
        }
    };
    if min > max {
        return Err(format!("--size {text}: the minimum is above the maximum"));
    }
    Ok((min, max))
}

/// `A.B.C.D/N`.
fn cidr(text: &str) -> Result<Ipv4Cidr, String> {
    let bad = || format!("--ip {text:?} is not an IPv4 address with a prefix, like 10.0.0.2/24");
    let (addr, prefix) = text.split_once('/').ok_or_else(bad)?;
    let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    Ipv4Cidr::new(addr, prefix).filter(|_| (1..=32).contains(&prefix)).ok_or_else(bad)
}

// -----------------------------------------------------------------------------------------------
// What a run reports.

/// What one server core did.
#[derive(Clone, Debug, Default)]
pub struct CoreReport {
    /// The core (and queue) number.
    pub core: usize,
    /// The channelizer's counters: `dropped_full` is the default channel's drops.
    pub channelizer: ChannelizerStats,
    /// The stack's counters.
    pub stack: StackStats,
    /// Connections this core's echo service served (its own, and those handed back to it).
    pub served: u64,
    /// Connections this core's accepts took from another core (steals) and handed back.
    pub handed_back: u64,
    /// Connections the accept queue refused (full): reset.
    pub rejected: u64,
    /// Connections closed after the peer's FIN, everything echoed.
    pub closed: u64,
    /// Connections that failed (reset, timed out) while served.
    pub failed: u64,
    /// Bytes echoed.
    pub bytes: u64,
    /// Frames the stack built that the TX channel refused (dropped).
    pub tx_dropped: u64,
    /// Connections still open when the server stopped.
    pub open_at_exit: usize,
}

/// What the client did (model backend).
#[derive(Clone, Debug, Default)]
pub struct ClientReport {
    /// Connections opened.
    pub conns: usize,
    /// Connections that completed (all messages echoed, closed both ways).
    pub completed: usize,
    /// Messages echoed intact.
    pub messages: u64,
    /// Bytes sent (and received back, checked).
    pub bytes: u64,
    /// From the first connect to the last close.
    pub elapsed: Duration,
    /// Message latencies: 50th, 90th, 99th percentile and maximum.
    pub latency: [Duration; 4],
    /// The client stack's counters.
    pub stack: StackStats,
}

/// The accept queue's view of the run.
#[derive(Clone, Debug, Default)]
pub struct AcceptReport {
    /// Connections enqueued by the stacks.
    pub enqueued: u64,
    /// Accepts of connections that arrived on the accepting core.
    pub local: u64,
    /// Accepts of connections that arrived elsewhere (steals; handed back to their core).
    pub steals: u64,
    /// Flow-group migrations (zero: balancing is off, see the module docs).
    pub migrations: u64,
    /// Enqueues refused.
    pub rejected: u64,
}

impl AcceptReport {
    /// Local accepts over all accepts (1 when nothing was accepted).
    #[must_use]
    pub fn local_fraction(&self) -> f64 {
        let all = self.local + self.steals;
        if all == 0 { 1.0 } else { self.local as f64 / all as f64 }
    }
}

/// Everything a run did; [`fmt::Display`] is the summary a person reads.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// What ran, in words.
    pub setup: String,
    /// The client's side (model backend).
    pub client: Option<ClientReport>,
    /// Per server core.
    pub cores: Vec<CoreReport>,
    /// Affinity-Accept.
    pub accept: AcceptReport,
    /// Device lines (NIC, model, TAP, pcap).
    pub devices: Vec<String>,
    /// Each pool's name and audit at exit, after every buffer came back.
    pub buffers: Vec<(String, Audit)>,
}

impl Report {
    /// Connections the server cores closed cleanly.
    #[must_use]
    pub fn closed(&self) -> u64 {
        self.cores.iter().map(|c| c.closed).sum()
    }

    /// Bytes the server echoed.
    #[must_use]
    pub fn bytes_echoed(&self) -> u64 {
        self.cores.iter().map(|c| c.bytes).sum()
    }
}

/// The `permille`/1000 quantile (nearest rank) of `sorted`.
fn percentile(sorted: &[Duration], permille: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * permille).div_ceil(1000);
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "summary: {}", self.setup)?;
        if let Some(c) = &self.client {
            let secs = c.elapsed.as_secs_f64().max(1e-9);
            writeln!(
                f,
                "  client: {} of {} connections completed, {} messages, {:.1} MiB echoed and checked byte for \
                 byte, in {secs:.2} s",
                c.completed,
                c.conns,
                c.messages,
                mib(c.bytes)
            )?;
            writeln!(
                f,
                "  throughput: {:.1} MiB/s each way, {:.0} messages/s, {:.0} connections/s",
                mib(c.bytes) / secs,
                c.messages as f64 / secs,
                c.completed as f64 / secs
            )?;
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            writeln!(
                f,
                "  latency (send to full echo): p50 {:.0} us, p90 {:.0} us, p99 {:.0} us, max {:.0} us",
                us(c.latency[0]),
                us(c.latency[1]),
                us(c.latency[2]),
                us(c.latency[3])
            )?;
            writeln!(
                f,
                "  client stack: {} frames in, {} out, {} dropped on output, {} resets sent",
                c.stack.rx_frames, c.stack.tx_frames, c.stack.tx_dropped, c.stack.rst_sent
            )?;
        }
        let a = &self.accept;
        writeln!(
            f,
            "  accept (affinity): {} connections, local-accept fraction {:.3}, {} steals (served by their own \
             core: no packet redirection yet), {} migrations (balancing off), {} refused",
            a.enqueued,
            a.local_fraction(),
            a.steals,
            a.migrations,
            a.rejected
        )?;
        for c in &self.cores {
            let ch = &c.channelizer;
            writeln!(
                f,
                "  core {}: {} conns served ({} closed, {} failed, {} open at exit), {:.1} MiB echoed; {} frames \
                 in, {} out; drops: default channel {}, TX channel {}, malformed {}; stack: {} listen drops, {} \
                 resets, {} not for us",
                c.core,
                c.served,
                c.closed,
                c.failed,
                c.open_at_exit,
                mib(c.bytes),
                ch.rx,
                ch.tx,
                ch.dropped_full,
                c.tx_dropped,
                ch.dropped_malformed,
                c.stack.listen_drops,
                c.stack.rst_sent,
                c.stack.rx_not_for_us
            )?;
        }
        for line in &self.devices {
            writeln!(f, "  {line}")?;
        }
        for (name, audit) in &self.buffers {
            writeln!(
                f,
                "  buffers: {name}: all {} back ({} in the depot, {} outstanding, {} live caches)",
                audit.total, audit.in_depot, audit.outstanding, audit.live_caches
            )?;
        }
        Ok(())
    }
}

// -----------------------------------------------------------------------------------------------
// The server side.

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Live counters for the progress line.
#[derive(Debug, Default)]
struct Live {
    served: AtomicU64,
    bytes: AtomicU64,
}

/// What the cores share.
struct Shared {
    queue: AcceptQueue<StreamId>,
    /// ARP frames seen on another core, per core (for its stack to learn from).
    arp: Vec<Mutex<Vec<Vec<u8>>>>,
    /// Stolen connections handed back to the core whose stack owns them.
    handback: Vec<Mutex<Vec<StreamId>>>,
    live: Vec<Live>,
    stop: AtomicBool,
}

impl Shared {
    fn new(cores: usize) -> Result<Self, String> {
        let queue = AcceptQueue::new(cores, BACKLOG, Policy::affinity()).map_err(|e| e.to_string())?;
        Ok(Self {
            queue,
            arp: (0..cores).map(|_| Mutex::new(Vec::new())).collect(),
            handback: (0..cores).map(|_| Mutex::new(Vec::new())).collect(),
            live: (0..cores).map(|_| Live::default()).collect(),
            stop: AtomicBool::new(false),
        })
    }

    fn stopping(&self) -> bool {
        // Relaxed: a plain flag; the joins order everything else.
        self.stop.load(Ordering::Relaxed)
    }

    fn served(&self) -> u64 {
        self.live.iter().map(|l| l.served.load(Ordering::Relaxed)).sum()
    }

    fn bytes(&self) -> u64 {
        self.live.iter().map(|l| l.bytes.load(Ordering::Relaxed)).sum()
    }
}

/// The accept hook of one core's stack: collects established connections; the core's loop queues
/// them on the shared accept queue (it knows their flow group).
struct Hook {
    core: usize,
    pending: Rc<RefCell<Vec<StreamId>>>,
    shared: Arc<Shared>,
}

impl AcceptHook for Hook {
    fn has_room(&mut self, _listener: ListenerId) -> bool {
        self.shared.queue.queue_len(self.core) + self.pending.borrow().len()
            < self.shared.queue.per_core_max()
    }

    fn established(&mut self, _listener: ListenerId, stream: StreamId) {
        self.pending.borrow_mut().push(stream);
    }
}

/// A connection the echo service serves: bytes received and not yet sent back.
struct Served {
    id: StreamId,
    out: Vec<u8>,
}

/// What the server cores are built from.
#[derive(Clone, Copy)]
struct ServerSetup {
    mac: EthernetAddress,
    ip: Ipv4Cidr,
    port: u16,
    placement: Placement,
}

fn tcp_tuning(config: &mut StackConfig) {
    // A request/response workload: no Nagle, and Linux's 200 ms minimum RTO.
    config.tcp.nodelay = true;
    config.tcp.min_rto = Duration::from_millis(200);
    config.tcp.initial_rto = Duration::from_millis(200);
}

/// One core's stack and echo service.
struct ServerCore {
    core: usize,
    stack: Stack,
    pending: Rc<RefCell<Vec<StreamId>>>,
    shared: Arc<Shared>,
    served: Vec<Served>,
    buf: Vec<u8>,
    report: CoreReport,
}

impl ServerCore {
    fn new(core: usize, setup: ServerSetup, shared: Arc<Shared>) -> Result<Self, String> {
        let mut config = StackConfig::new(setup.mac, setup.ip);
        config.gratuitous_arp = core == 0;
        tcp_tuning(&mut config);
        let mut stack = Stack::new(config, Instant::now());
        let backlog = shared.queue.per_core_max();
        stack
            .listen_with(setup.port, ListenerConfig { backlog, ..ListenerConfig::default() })
            .map_err(|e| format!("core {core}: cannot listen on port {}: {e}", setup.port))?;
        let pending = Rc::new(RefCell::new(Vec::new()));
        stack.set_accept_hook(Some(Box::new(Hook {
            core,
            pending: Rc::clone(&pending),
            shared: Arc::clone(&shared),
        })));
        Ok(Self {
            core,
            stack,
            pending,
            shared,
            served: Vec::new(),
            buf: vec![0; 64 * 1024],
            report: CoreReport { core, ..CoreReport::default() },
        })
    }

    /// One received frame.
    fn receive(&mut self, now: Instant, frame: &[u8]) {
        self.stack.receive(now, frame);
        let cores = self.shared.arp.len();
        if cores > 1 && frame.len() >= 42 && frame[12..14] == [0x08, 0x06] {
            // Every stack must learn the sender: the others get it as a reply (no answer from them).
            let mut copy = frame.to_vec();
            copy[20..22].copy_from_slice(&2u16.to_be_bytes());
            for (other, mailbox) in self.shared.arp.iter().enumerate() {
                let mut mailbox = lock(mailbox);
                if other != self.core && mailbox.len() < 256 {
                    mailbox.push(copy.clone());
                }
            }
        }
    }

    /// Everything but I/O: learned ARP, accepts, echoing, timers. Returns whether it did anything.
    fn service(&mut self, now: Instant) -> bool {
        let mut busy = false;
        let learned = std::mem::take(&mut *lock(&self.shared.arp[self.core]));
        for frame in learned {
            self.stack.receive(now, &frame);
        }
        let established = std::mem::take(&mut *self.pending.borrow_mut());
        for stream in established {
            busy = true;
            let group = self.stack.addrs(stream).map_or(FlowGroup(0), |(_, r)| FlowGroup::of_port(r.port()));
            if let Err(e) = self.shared.queue.enqueue(self.core, group, stream) {
                let _ = self.stack.abort(e.into_inner());
                self.report.rejected += 1;
            }
        }
        while let Ok(accepted) = self.shared.queue.try_accept(self.core) {
            busy = true;
            if accepted.remote {
                lock(&self.shared.handback[accepted.arrived_on]).push(accepted.conn);
                self.report.handed_back += 1;
            } else {
                self.serve(accepted.conn);
            }
        }
        let handed = std::mem::take(&mut *lock(&self.shared.handback[self.core]));
        for stream in handed {
            self.serve(stream);
        }
        let mut i = 0;
        while i < self.served.len() {
            let (done, moved) = self.echo(i);
            busy |= moved > 0 || done;
            if done {
                self.served.swap_remove(i);
            } else {
                i += 1;
            }
        }
        if self.stack.poll_timeout().is_some_and(|t| t <= now) {
            self.stack.handle_timeout(now);
        }
        busy
    }

    fn serve(&mut self, id: StreamId) {
        self.report.served += 1;
        self.shared.live[self.core].served.fetch_add(1, Ordering::Relaxed);
        self.served.push(Served { id, out: Vec::new() });
    }

    /// Echoes what connection `i` has received; returns (finished, bytes moved).
    fn echo(&mut self, i: usize) -> (bool, usize) {
        let Self { stack, served, buf, report, shared, core, .. } = self;
        let s = &mut served[i];
        let mut moved = 0;
        loop {
            if !s.out.is_empty() {
                match stack.send(s.id, &s.out) {
                    Ok(n) => {
                        s.out.drain(..n);
                        moved += n;
                        report.bytes += n as u64;
                        shared.live[*core].bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(StackError::WouldBlock) => {}
                    Err(_) => {
                        let _ = stack.abort(s.id);
                        report.failed += 1;
                        return (true, moved);
                    }
                }
                if !s.out.is_empty() {
                    return (false, moved); // the send buffer is full: read more later
                }
            }
            match stack.recv(s.id, buf) {
                Ok(0) => {
                    let _ = stack.close(s.id);
                    report.closed += 1;
                    return (true, moved);
                }
                Ok(n) => s.out.extend_from_slice(&buf[..n]),
                Err(StackError::WouldBlock) => return (false, moved),
                Err(_) => {
                    let _ = stack.abort(s.id);
                    report.failed += 1;
                    return (true, moved);
                }
            }
        }
    }

    /// Moves the stack's output into the TX channel while it has room.
    fn transmit<'c>(
        &mut self,
        now: Instant,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
        tx: &mut PacketTx,
    ) -> bool {
        let mut any = false;
        while tx.free_space() >= BURST {
            let n = self.stack.transmit(now, cache, batch);
            for packet in batch.drain() {
                if tx.push(packet).is_err() {
                    self.report.tx_dropped += 1;
                }
            }
            any |= n > 0;
            if n < BURST {
                break;
            }
        }
        any
    }

    fn finish(mut self) -> CoreReport {
        self.report.open_at_exit = self.served.len();
        self.report.stack = *self.stack.stats();
        self.report
    }
}

/// Sleeps a little after a while with nothing to do (the model and the other cores share CPUs).
struct Idle {
    since: Option<Instant>,
}

impl Idle {
    fn new() -> Self {
        Self { since: None }
    }

    fn tick(&mut self, busy: bool) {
        if busy {
            self.since = None;
            return;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() > Duration::from_millis(2) {
            std::thread::sleep(Duration::from_micros(100));
        } else {
            std::thread::yield_now();
        }
    }
}

/// Drains `tx` into the device (polling the channelizer) until it is empty or a second passes,
/// dropping what arrives meanwhile.
fn drain_channels<D: NetDevice>(
    ch: &mut Channelizer<'_, D>,
    tx: &mut PacketTx,
    rx: &mut PacketRx,
    cache: &PoolCache,
) {
    let deadline = Instant::now() + Duration::from_secs(1);
    let capacity = tx.free_space();
    loop {
        let _ = ch.poll();
        while rx.pop(cache).is_some() {}
        if tx.free_space() >= capacity || Instant::now() > deadline {
            break;
        }
        std::thread::yield_now();
    }
}

/// Core `core` with channelizer and stack on this thread.
fn core_same<D: NetDevice>(
    core: usize,
    device: D,
    pool: &Pool,
    registry: Arc<SignatureRegistry>,
    setup: ServerSetup,
    shared: Arc<Shared>,
) -> Result<CoreReport, String> {
    let cache = pool.cache();
    let channel = |capacity| pool.packet_channel(capacity).map_err(|e| e.to_string());
    let (default_tx, mut default_rx) = channel(CHANNEL)?;
    let (mut reply_tx, reply_rx) = channel(CHANNEL)?;
    let mut ch = Channelizer::new(device, 0, &cache, registry, default_tx, BURST);
    ch.add_tx(reply_rx);
    let mut server = ServerCore::new(core, setup, Arc::clone(&shared))?;
    let mut batch = PacketBatch::with_capacity(BURST);
    let mut idle = Idle::new();
    let capacity = reply_tx.free_space();
    let mut result = Ok(());
    while !shared.stopping() {
        let polled = match ch.poll() {
            Ok(p) => p,
            Err(e) => {
                result = Err(format!("core {core}: the device failed: {e}"));
                break;
            }
        };
        let now = Instant::now();
        let mut frames = 0;
        while let Some(packet) = default_rx.pop(&cache) {
            server.receive(now, packet.data());
            frames += 1;
        }
        let served = server.service(now);
        let sent = server.transmit(now, &cache, &mut batch, &mut reply_tx);
        idle.tick(polled.rx + polled.tx + frames > 0 || served || sent || reply_tx.free_space() < capacity);
    }
    drain_channels(&mut ch, &mut reply_tx, &mut default_rx, &cache);
    let mut report = server.finish();
    report.channelizer = ch.stats();
    drop(ch);
    while default_rx.pop(&cache).is_some() {}
    result.map(|()| report)
}

/// Core `core` split over two threads: the channelizer on this one, the stack on a new one.
fn core_split<D: NetDevice>(
    core: usize,
    device: D,
    pool: &Pool,
    registry: Arc<SignatureRegistry>,
    setup: ServerSetup,
    shared: Arc<Shared>,
) -> Result<CoreReport, String> {
    let channel = |capacity| pool.packet_channel(capacity).map_err(|e| e.to_string());
    let (default_tx, default_rx) = channel(CHANNEL)?;
    let (reply_tx, reply_rx) = channel(CHANNEL)?;
    let tx_drained = AtomicBool::new(false);
    let ch_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let app = s.spawn(|| {
            let (mut default_rx, mut reply_tx) = (default_rx, reply_tx);
            let cache = pool.cache();
            let mut server = ServerCore::new(core, setup, Arc::clone(&shared))?;
            let mut batch = PacketBatch::with_capacity(BURST);
            let mut idle = Idle::new();
            let capacity = reply_tx.free_space();
            while !shared.stopping() {
                let now = Instant::now();
                let mut frames = 0;
                while let Some(packet) = default_rx.pop(&cache) {
                    server.receive(now, packet.data());
                    frames += 1;
                }
                let served = server.service(now);
                let sent = server.transmit(now, &cache, &mut batch, &mut reply_tx);
                idle.tick(frames > 0 || served || sent);
            }
            // Let the channelizer send what is queued, then take the last frames it delivered.
            loop {
                while default_rx.pop(&cache).is_some() {}
                if reply_tx.free_space() >= capacity {
                    tx_drained.store(true, Ordering::Release);
                }
                // Acquire: after it, the channelizer pushes nothing more.
                if ch_done.load(Ordering::Acquire) {
                    while default_rx.pop(&cache).is_some() {}
                    break;
                }
                std::thread::yield_now();
            }
            Ok::<_, String>(server.finish())
        });
        let cache = pool.cache();
        let mut ch = Channelizer::new(device, 0, &cache, registry, default_tx, BURST);
        ch.add_tx(reply_rx);
        let mut idle = Idle::new();
        let mut result = Ok(());
        while !shared.stopping() {
            match ch.poll() {
                Ok(p) => idle.tick(p.rx + p.tx > 0),
                Err(e) => {
                    result = Err(format!("core {core}: the device failed: {e}"));
                    shared.stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        // Acquire: pairs with the app thread's Release store.
        while !tx_drained.load(Ordering::Acquire) && Instant::now() < deadline && !app.is_finished() {
            let _ = ch.poll();
            std::thread::yield_now();
        }
        let stats = ch.stats();
        drop(ch);
        ch_done.store(true, Ordering::Release);
        let mut report = app.join().map_err(|_| format!("core {core}: the stack thread panicked"))??;
        report.channelizer = stats;
        result.map(|()| report)
    })
}

/// Runs the server cores on `devices` (one per core) while `main` runs on this thread; stops them
/// when `main` returns.
fn serve<D, T>(
    devices: Vec<D>,
    pool: &Pool,
    setup: ServerSetup,
    main: impl FnOnce(&Shared) -> T,
) -> Result<(T, Vec<CoreReport>, AcceptReport), String>
where
    D: NetDevice + Send,
{
    let shared = Arc::new(Shared::new(devices.len())?);
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let (out, cores) = std::thread::scope(|s| {
        let workers: Vec<_> = devices
            .into_iter()
            .enumerate()
            .map(|(core, device)| {
                let (shared, registry) = (Arc::clone(&shared), Arc::clone(&registry));
                s.spawn(move || match setup.placement {
                    Placement::Same => core_same(core, device, pool, registry, setup, shared),
                    Placement::Split => core_split(core, device, pool, registry, setup, shared),
                })
            })
            .collect();
        let out = main(&shared);
        shared.stop.store(true, Ordering::Relaxed);
        let cores: Vec<_> =
            workers.into_iter().map(|w| w.join().map_err(|_| "a core panicked".to_owned())).collect();
        (out, cores)
    });
    let cores = cores.into_iter().map(|c| c.and_then(|c| c)).collect::<Result<Vec<_>, _>>()?;
    // Connections still queued when the server stopped belong to stacks that are gone.
    let _ = shared.queue.take_all();
    let stats = shared.queue.stats();
    let accept = AcceptReport {
        enqueued: stats.enqueued(),
        local: stats.cores.iter().map(|c| c.local_accepts).sum(),
        steals: stats.cores.iter().map(|c| c.remote_accepts).sum(),
        migrations: stats.migrations(),
        rejected: stats.rejected(),
    };
    Ok((out, cores, accept))
}

/// Waits until `stop` or `duration`, printing a progress line every second (TAP and PCI modes).
fn wait_serving(shared: &Shared, stop: &AtomicBool, duration: Option<Duration>, progress: bool) {
    let start = Instant::now();
    let mut next = start + Duration::from_secs(1);
    // Relaxed: a plain flag.
    while !stop.load(Ordering::Relaxed) && duration.is_none_or(|d| start.elapsed() < d) {
        std::thread::sleep(Duration::from_millis(20));
        if progress && Instant::now() >= next {
            next += Duration::from_secs(1);
            println!(
                "[{:6.1} s] {} connections served, {:.1} MiB echoed",
                start.elapsed().as_secs_f64(),
                shared.served(),
                mib(shared.bytes())
            );
        }
    }
}

// -----------------------------------------------------------------------------------------------
// The client.

/// xorshift64*: message sizes and contents.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Running,
    Draining,
    Done,
}

struct ClientConn {
    index: usize,
    id: StreamId,
    phase: Phase,
    rng: Rng,
    msg: Vec<u8>,
    sent: usize,
    echoed: usize,
    messages: u64,
    started: Instant,
}

struct ClientRun<'a> {
    options: &'a Options,
    start: Instant,
    latencies: Vec<Duration>,
    report: ClientReport,
    buf: Vec<u8>,
}

impl ClientRun<'_> {
    fn new_message(&self, c: &mut ClientConn, now: Instant) {
        let (min, max) = self.options.size;
        let span = u64::try_from(max - min + 1).unwrap_or(u64::MAX);
        let len = min + usize::try_from(c.rng.next() % span).unwrap_or(0);
        c.msg.clear();
        while c.msg.len() < len {
            let word = c.rng.next().to_le_bytes();
            let take = (len - c.msg.len()).min(8);
            c.msg.extend_from_slice(&word[..take]);
        }
        c.sent = 0;
        c.echoed = 0;
        c.started = now;
    }

    fn finished_sending(&self, c: &ClientConn) -> bool {
        match self.options.duration {
            Some(d) => self.start.elapsed() >= d,
            None => c.messages >= self.options.messages,
        }
    }

    /// Moves connection `c` forward; returns whether anything happened.
    fn step(
        &mut self,
        stack: &mut Stack,
        c: &mut ClientConn,
        now: Instant,
        stop: bool,
    ) -> Result<bool, String> {
        let fail = |stack: &Stack, c: &ClientConn, what: &str| {
            let why =
                stack.error(c.id).ok().flatten().map_or_else(|| what.to_owned(), |e| format!("{what}: {e}"));
            format!("connection {} (message {}): {why}", c.index, c.messages)
        };
        match c.phase {
            Phase::Done => Ok(false),
            Phase::Connecting => match stack.state(c.id) {
                Ok(State::Established) => {
                    c.phase = Phase::Running;
                    self.new_message(c, now);
                    Ok(true)
                }
                Ok(State::SynSent | State::SynReceived) => Ok(false),
                _ => Err(fail(stack, c, "the connection failed to open")),
            },
            Phase::Running => {
                let mut moved = false;
                if c.sent < c.msg.len() {
                    match stack.send(c.id, &c.msg[c.sent..]) {
                        Ok(n) => {
                            c.sent += n;
                            moved = true;
                        }
                        Err(StackError::WouldBlock) => {}
                        Err(e) => return Err(fail(stack, c, &format!("send failed ({e})"))),
                    }
                }
                loop {
                    match stack.recv(c.id, &mut self.buf) {
                        Ok(0) => return Err(fail(stack, c, "the server closed early")),
                        Ok(n) => {
                            moved = true;
                            let expected = c.msg.get(c.echoed..c.echoed + n).ok_or_else(|| {
                                fail(stack, c, &format!("{n} bytes came back beyond the {} sent", c.sent))
                            })?;
                            if let Some(at) = expected.iter().zip(&self.buf[..n]).position(|(a, b)| a != b) {
                                return Err(fail(
                                    stack,
                                    c,
                                    &format!(
                                        "byte {} of the message came back as {:#04x}, sent {:#04x}",
                                        c.echoed + at,
                                        self.buf[at],
                                        expected[at]
                                    ),
                                ));
                            }
                            c.echoed += n;
                        }
                        Err(StackError::WouldBlock) => break,
                        Err(e) => return Err(fail(stack, c, &format!("recv failed ({e})"))),
                    }
                }
                if c.echoed == c.msg.len() {
                    self.latencies.push(now - c.started);
                    c.messages += 1;
                    self.report.messages += 1;
                    self.report.bytes += c.msg.len() as u64;
                    if stop || self.finished_sending(c) {
                        stack.shutdown_write(c.id).map_err(|e| fail(stack, c, &e.to_string()))?;
                        c.phase = Phase::Draining;
                    } else {
                        self.new_message(c, now);
                    }
                    moved = true;
                }
                Ok(moved)
            }
            Phase::Draining => match stack.recv(c.id, &mut self.buf) {
                Ok(0) => {
                    stack.close(c.id).map_err(|e| fail(stack, c, &e.to_string()))?;
                    c.phase = Phase::Done;
                    self.report.completed += 1;
                    Ok(true)
                }
                Ok(n) => Err(fail(stack, c, &format!("{n} unexpected bytes after the last echo"))),
                Err(StackError::WouldBlock) => Ok(false),
                Err(e) => Err(fail(stack, c, &format!("waiting for the server's FIN ({e})"))),
            },
        }
    }
}

/// The in-process client: `options.conns` connections to `server` through `device`.
fn client<D: NetDevice>(
    device: &mut D,
    cache: &PoolCache,
    mac: EthernetAddress,
    server: SocketAddrV4,
    options: &Options,
    stop: &AtomicBool,
) -> Result<ClientReport, String> {
    let mut config = StackConfig::new(mac, Ipv4Cidr::new(CLIENT_IP, 24).expect("a /24"));
    tcp_tuning(&mut config);
    let start = Instant::now();
    let mut stack = Stack::new(config, start);
    let mut run = ClientRun {
        options,
        start,
        latencies: Vec::new(),
        report: ClientReport { conns: options.conns, ..ClientReport::default() },
        buf: vec![0; 64 * 1024],
    };
    let mut conns = Vec::with_capacity(options.conns);
    for index in 0..options.conns {
        let id = stack.connect(server).map_err(|e| format!("connect #{index}: {e}"))?;
        let rng = Rng::new(options.seed ^ (index as u64 + 1).wrapping_mul(0x1000_0000_01b3));
        conns.push(ClientConn {
            index,
            id,
            phase: Phase::Connecting,
            rng,
            msg: Vec::new(),
            sent: 0,
            echoed: 0,
            messages: 0,
            started: start,
        });
    }
    let mut last_progress = start;
    let mut next_line = start + Duration::from_secs(1);
    let mut done = 0;
    while done < conns.len() {
        let now = Instant::now();
        let polled = stack.poll(now, device, cache).map_err(|e| format!("the client's wire failed: {e}"))?;
        // Relaxed: a plain flag.
        let stopping = stop.load(Ordering::Relaxed);
        let mut moved = false;
        done = 0;
        for c in &mut conns {
            moved |= run.step(&mut stack, c, now, stopping)?;
            done += usize::from(c.phase == Phase::Done);
        }
        if moved {
            last_progress = now;
        } else if now - last_progress > STALL {
            let phases = |p| conns.iter().filter(|c| c.phase == p).count();
            return Err(format!(
                "no progress for {} s: {} connecting, {} running, {} draining, {} done; {} messages echoed",
                STALL.as_secs(),
                phases(Phase::Connecting),
                phases(Phase::Running),
                phases(Phase::Draining),
                done,
                run.report.messages
            ));
        }
        if options.progress && now >= next_line {
            next_line += Duration::from_secs(1);
            let secs = (now - start).as_secs_f64();
            println!(
                "[{secs:6.1} s] {done}/{} connections done, {} messages, {:.1} MiB echoed, {:.1} MiB/s",
                conns.len(),
                run.report.messages,
                mib(run.report.bytes),
                mib(run.report.bytes) / secs
            );
        }
        if polled.received == 0 && !moved {
            std::thread::yield_now();
        }
    }
    run.report.elapsed = start.elapsed();
    // A few more polls so the last ACKs leave.
    for _ in 0..20 {
        stack.poll(Instant::now(), device, cache).map_err(|e| format!("the client's wire failed: {e}"))?;
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut sorted = std::mem::take(&mut run.latencies);
    sorted.sort_unstable();
    run.report.latency = [
        percentile(&sorted, 500),
        percentile(&sorted, 900),
        percentile(&sorted, 990),
        sorted.last().copied().unwrap_or_default(),
    ];
    run.report.stack = *stack.stats();
    Ok(run.report)
}

// -----------------------------------------------------------------------------------------------
// The backends.

/// Runs the echo service as `options` say until it is done, `stop` is set (Ctrl-C), or its
/// duration is up; returns the summary.
///
/// # Errors
///
/// A message saying what failed (and what to do about it, where the device says).
pub fn run(options: &Options, stop: &AtomicBool) -> Result<Report, String> {
    match &options.backend {
        Backend::Model => run_model(options, stop),
        Backend::Tap { name, ip } => run_tap(options, name, *ip, stop),
        Backend::Pci { addr, ip } => run_pci(options, addr, *ip, stop),
    }
}

fn nic_line(nic: &mut Ixgbe) -> String {
    let s: NicStats = nic.stats();
    let queues = usize::from(nic.config().queues).min(s.queue_rx_packets.len());
    let per_queue: Vec<String> = (0..queues).map(|q| format!("q{q} {}", s.queue_rx_packets[q])).collect();
    format!(
        "nic {}: {} frames in ({}), {} out, {} missed, Flow Director {} matches, {} misses",
        nic.name(),
        s.rx_good_packets,
        per_queue.join(", "),
        s.tx_good_packets,
        s.missed_packets,
        s.fdir_matches,
        s.fdir_misses
    )
}

fn model_line(m: &SimStats) -> String {
    format!(
        "model: {} frames from the wire, {} into rings, {} dropped for lack of descriptors, {} sent, {} DMA \
         faults",
        m.rx_wire, m.rx_delivered, m.rx_dropped_no_desc, m.tx_sent, m.dma_faults
    )
}

fn audit(name: &str, pool: &Pool) -> Result<(String, Audit), String> {
    pool.check_leaks().map_err(|e| format!("{name}: {e}"))?;
    Ok((name.to_owned(), pool.audit()))
}

fn setup_line(options: &Options, what: &str, cores: usize) -> String {
    let placement = match options.placement {
        Placement::Same => "same",
        Placement::Split => "split",
    };
    format!("{what}, {cores} core(s), placement {placement}, port {}", options.port)
}

fn run_model(options: &Options, stop: &AtomicBool) -> Result<Report, String> {
    let e = |e: &dyn fmt::Display| e.to_string();
    let cores = usize::from(options.cores);
    let mut report = Report {
        setup: setup_line(options, "TCP echo on the 82599 model, in-process client", cores),
        ..Report::default()
    };
    if options.progress {
        let msgs = options.duration.map_or_else(
            || format!("{} messages each", options.messages),
            |d| format!("for {:.1} s", d.as_secs_f64()),
        );
        println!(
            "echo: {}; {} connections, {msgs}, sizes {}..={} bytes",
            report.setup, options.conns, options.size.0, options.size.1
        );
    }
    let wire_pool = Pool::builder(8192).hugepages(HugePages::Never).build().map_err(|x| e(&x))?;
    let (port, wire) = Pair::builder(&wire_pool).capacity(2048).build().map_err(|x| e(&x))?;
    let model = Model::new(SimConfig {
        wire: Wire::Device(Box::new(port), wire_pool.clone()),
        ..SimConfig::default()
    });
    let sim = model.spawn();
    let buffers = u32::try_from(4096 * (cores + 1)).map_err(|x| e(&x))?;
    let pool = Pool::builder(buffers).hugepages(HugePages::Prefer).build().map_err(|x| e(&x))?;
    let config = NicConfig { queues: options.cores, rx_ring: 512, tx_ring: 512, ..NicConfig::default() };
    let (mut nic, queues) =
        Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config).map_err(|x| format!("driver: {x}"))?;
    let mac = EthernetAddress(nic.mac().0);
    let server_ip = Ipv4Cidr::new(SERVER_IP, 24).expect("a /24");
    let setup = ServerSetup { mac, ip: server_ip, port: options.port, placement: options.placement };
    let client_mac = EthernetAddress(wire.info().mac.0);
    let server = SocketAddrV4::new(SERVER_IP, options.port);
    let mut pcap_line = None;
    let (client_report, cores_report, accept) = serve(queues, &pool, setup, |_| {
        let cache = wire_pool.cache();
        match &options.pcap {
            Some(path) => {
                let mut dev = PcapWriter::create(wire, path)
                    .map_err(|x| format!("cannot create the pcap file {}: {x}", path.display()))?;
                let r = client(&mut dev, &cache, client_mac, server, options, stop);
                let _ = dev.flush();
                let s = dev.pcap_stats();
                pcap_line = Some(format!(
                    "pcap: {} frames recorded to {} ({} in, {} out)",
                    s.rx_frames + s.tx_frames,
                    path.display(),
                    s.rx_frames,
                    s.tx_frames
                ));
                r
            }
            None => {
                let mut dev = wire;
                client(&mut dev, &cache, client_mac, server, options, stop)
            }
        }
    })?;
    report.client = Some(client_report?);
    report.cores = cores_report;
    report.accept = accept;
    sim.stop();
    report.devices.push(nic_line(&mut nic));
    report.devices.push(model_line(&model.stats()));
    report.devices.extend(pcap_line);
    drop(nic);
    drop(model);
    report.buffers.push(audit("driver pool", &pool)?);
    report.buffers.push(audit("wire pool", &wire_pool)?);
    Ok(report)
}

fn run_tap(options: &Options, name: &str, ip: Ipv4Cidr, stop: &AtomicBool) -> Result<Report, String> {
    let tap = Tap::open(name).map_err(|e| format!("cannot open the TAP interface {name:?}: {e}"))?;
    let mac = EthernetAddress(tap.info().mac.0);
    let mut report = Report {
        setup: setup_line(options, &format!("TCP echo on TAP {name} at {ip}, the kernel is the client"), 1),
        ..Report::default()
    };
    if options.progress {
        println!("echo: {} (our MAC {}); Ctrl-C stops", report.setup, tap.info().mac);
    }
    let pool = Pool::builder(4096).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
    let setup = ServerSetup { mac, ip, port: options.port, placement: options.placement };
    let wait = |shared: &Shared| wait_serving(shared, stop, options.duration, options.progress);
    let (cores, accept) = match &options.pcap {
        Some(path) => {
            let dev = PcapWriter::create(tap, path)
                .map_err(|e| format!("cannot create the pcap file {}: {e}", path.display()))?;
            let ((), cores, accept) = serve(vec![dev], &pool, setup, wait)?;
            report.devices.push(format!("pcap: recorded to {}", path.display()));
            (cores, accept)
        }
        None => {
            let ((), cores, accept) = serve(vec![tap], &pool, setup, wait)?;
            (cores, accept)
        }
    };
    report.cores = cores;
    report.accept = accept;
    report.buffers.push(audit("pool", &pool)?);
    Ok(report)
}

fn run_pci(options: &Options, addr: &str, ip: Ipv4Cidr, stop: &AtomicBool) -> Result<Report, String> {
    let device =
        ixgbe_vfio::platform::open(addr).map_err(|e| format!("cannot open the 82599 at {addr}: {e}"))?;
    let cores = usize::from(options.cores);
    let pool = Pool::builder(u32::try_from(4096 * (cores + 1)).map_err(|e| e.to_string())?)
        .hugepages(HugePages::Prefer)
        .build()
        .map_err(|e| e.to_string())?;
    let config = NicConfig { queues: options.cores, ..NicConfig::default() };
    let (mut nic, queues) = Ixgbe::init(addr, device.bar0(), device.dma(), &pool, config)
        .map_err(|e| format!("cannot bring up the 82599 at {addr}: {e}"))?;
    let mut report = Report {
        setup: setup_line(
            options,
            &format!("TCP echo on the 82599 at {addr} ({}), {ip}", device.variant()),
            cores,
        ),
        ..Report::default()
    };
    if options.progress {
        println!("echo: {} (MAC {}, {:?}); Ctrl-C stops", report.setup, nic.mac(), nic.link());
    }
    let mac = EthernetAddress(nic.mac().0);
    let setup = ServerSetup { mac, ip, port: options.port, placement: options.placement };
    let wait = |shared: &Shared| wait_serving(shared, stop, options.duration, options.progress);
    let (cores_report, accept) = match &options.pcap {
        Some(path) => {
            let devices = queues
                .into_iter()
                .map(|q| {
                    let file = format!("{}.q{}", path.display(), q.index());
                    PcapWriter::create(q, &file)
                        .map_err(|e| format!("cannot create the pcap file {file}: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let ((), c, a) = serve(devices, &pool, setup, wait)?;
            (c, a)
        }
        None => {
            let ((), c, a) = serve(queues, &pool, setup, wait)?;
            (c, a)
        }
    };
    report.cores = cores_report;
    report.accept = accept;
    report.devices.push(nic_line(&mut nic));
    drop(nic);
    drop(device);
    report.buffers.push(audit("driver pool", &pool)?);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Options>, String> {
        Options::parse(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn options_parse() {
        let o = parse(&["--cores", "3", "--size", "10..20", "--placement", "split", "--conns", "5"])
            .unwrap()
            .unwrap();
        assert_eq!((o.cores, o.size, o.placement, o.conns), (3, (10, 20), Placement::Split, 5));
        let o = parse(&["--tap", "tap0", "--ip", "10.1.0.2/16"]).unwrap().unwrap();
        assert_eq!(o.backend, Backend::Tap { name: "tap0".into(), ip: cidr("10.1.0.2/16").unwrap() });
        assert!(parse(&["--size", "20..10"]).is_err());
        assert!(parse(&["--ip", "10.0.0.2"]).is_err());
        assert!(parse(&["--tap", "a", "--pci", "0000:01:00.0"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        assert_eq!(parse(&["--help"]).unwrap(), None);
    }

    #[test]
    fn percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&v, 500), Duration::from_micros(50));
        assert_eq!(percentile(&v, 990), Duration::from_micros(99));
        assert_eq!(percentile(&[], 500), Duration::ZERO);
    }

    #[test]
    fn model_echo_small_run() {
        let options = Options {
            cores: 2,
            conns: 8,
            messages: 5,
            size: (1, 3000),
            progress: false,
            ..Options::default()
        };
        let report = run(&options, &AtomicBool::new(false)).unwrap();
        let client = report.client.as_ref().unwrap();
        assert_eq!((client.completed, client.messages), (8, 40));
        assert_eq!(report.bytes_echoed(), client.bytes);
        assert_eq!(report.accept.enqueued, 8);
        assert_eq!(report.cores.iter().map(|c| c.served).sum::<u64>(), 8);
    }
}
