//! The TCP echo service behind `cargo run --release --example echo`, on [`netchannel_runtime`]:
//! the runtime owns the data path (a backend's queues, one channelizer and one tcp-lib stack per
//! core, net channels between them, Affinity-Accept across the cores, stolen connections moved to
//! the stealer); this module is what remains of echo: its options, the per-core service, and the
//! model's in-process client that checks every echoed byte.
//!
//! # The service
//!
//! Every core listens on [`Options::port`] and serves many connections at once from one
//! non-blocking event loop: [`Core::poll_wait`] (1 ms at most), accept until `WouldBlock`, echo what
//! each connection has received (whatever its send buffer takes; the rest waits), close a
//! connection on its end of stream, and return when the runtime stops. `--slow-core N` slows core
//! `N` (one accept per 5 ms, 1 ms per chunk read) so that its accept queue fills, it turns busy and
//! the other cores steal from it; `--backlog` sets the queue size that busyness is measured against.
//!
//! # Backends
//!
//! Whatever [`ServeArgs`] names: the 82599 model with its in-process client (the default; no NIC,
//! no root), `--tap NAME` and `--xdp IFACE` (the kernel, or the interface's wire, is the client),
//! `--pci ADDR` (a real 82599 over VFIO). tcp-lib verifies every checksum, and TAP and AF_XDP carry
//! no "checksum partial" flag: a peer that leaves its checksums to the hardware (a veth's kernel
//! end by default) must not (`ethtool -K PEER tx off`); the summary says so when frames were
//! dropped as malformed.
//!
//! # The client (model backend)
//!
//! A tcp-lib stack of its own on the peer's end of the model's wire
//! ([`Runtime::take_peer`](netchannel_runtime::Runtime::take_peer)), driven non-blocking on the
//! runtime's `main` thread, opens [`Options::conns`] connections at once from random ephemeral
//! ports (so their flow groups spread over the queues). Each sends messages of random size in
//! [`Options::size`], one at a time, and checks the echo byte for byte; the latency of a message is
//! from its first `send` to the last byte of its echo. After [`Options::messages`] messages (or
//! when the duration is up, or on Ctrl-C) it half-closes, waits for the server's FIN and closes
//! ([`ClientReport`]).

mod client;

use std::fmt;
use std::io::{self, Read, Write};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use clap::builder::TypedValueParser as _;
use netchannel_runtime::stats::AcceptStats;
use netchannel_runtime::{Backend, Control, Core, Snapshot, Stopping, Stream};
use tcp_lib::stack::Config as StackConfig;

pub use client::ClientReport;

use crate::cli::{self, ServeArgs};

/// The echo port (RFC 862).
pub const DEFAULT_PORT: u16 = 7;
/// How long a core's event loop waits for something to happen.
const POLL_WAIT: Duration = Duration::from_millis(1);
/// The delay per received chunk on the `--slow-core`.
const SLOW_DELAY: Duration = Duration::from_millis(1);
/// The `--slow-core` accepts at most one connection per this.
const SLOW_ACCEPT: Duration = Duration::from_millis(5);
/// Bytes a connection reads at a time.
const CHUNK: usize = 64 * 1024;

/// What to run: the runtime's options ([`ServeArgs`]) and echo's own. [`Options::default`] is
/// `cargo run --release --example echo` with no options.
///
/// In code: `Options::parse_from(["echo", "--tap", "tap0", "--quiet"])`, or the public fields
/// with `..Options::default()`.
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    name = "echo",
    about = "A TCP echo service on per-core tcp-lib stacks behind net channels, with Affinity-Accept",
    long_about = None,
    mut_arg("cores", |a| a.help(
        "Cores, one queue each (default: every CPU, at most 16, on the model and --pci; one on --tap; one per queue \
         served on --xdp)"
    ))
)]
pub struct Options {
    /// The backend, the cores, the address and the rest of the runtime's settings.
    #[command(flatten)]
    pub serve: ServeArgs,

    /// The echo port
    #[arg(long, value_name = "P", default_value_t = DEFAULT_PORT, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,

    /// Client connections, all open at once (model backend)
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=60_000).map(usize::from))]
    pub conns: usize,

    /// Messages per connection (model backend; --duration instead bounds the run by time)
    #[arg(long, value_name = "M", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub messages: u64,

    /// Message sizes in bytes, MIN..MAX (inclusive) or one size N, at most 1 MiB (model backend)
    #[arg(long, value_name = "MIN..MAX", default_value = "1..4096", value_parser = size_range)]
    pub size: (usize, usize),

    /// Seeds message sizes and contents (model backend)
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// Slow core N down (one accept per 5 ms, 1 ms per chunk read) so that its accept queue fills
    /// and the other cores steal from it
    #[arg(long, value_name = "N")]
    pub slow_core: Option<usize>,

    /// No flow-group migration (Affinity-Accept's balancer, through Flow Director)
    #[arg(long = "no-balance", action = clap::ArgAction::SetFalse)]
    pub balance: bool,

    /// No progress line
    #[arg(long = "quiet", visible_alias = "no-progress", action = clap::ArgAction::SetFalse)]
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self::parse_from(["echo"])
    }
}

/// `MIN..MAX` (inclusive; `MIN..=MAX` too) or `N`, sizes in 1..=1 MiB.
fn size_range(text: &str) -> Result<(usize, usize), String> {
    let size = |t: &str| {
        t.parse::<usize>()
            .ok()
            .filter(|n| (1..=1 << 20).contains(n))
            .ok_or_else(|| format!("{t:?} is not a size in 1..={}", 1 << 20))
    };
    let (min, max) = match text.split_once("..") {
        Some((a, b)) => (size(a)?, size(b.trim_start_matches('='))?),
        None => {
            let n = size(text)?;
            (n, n)
        }
    };
    if min > max {
        return Err(format!("{text}: the minimum is above the maximum"));
    }
    Ok((min, max))
}

impl Options {
    /// Parses command-line arguments (the program name first) and [validates](Self::validate)
    /// them.
    ///
    /// # Errors
    ///
    /// clap's error (print it with `exit()`, which also answers `--help`), naming the option.
    pub fn try_parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let options = Self::try_parse_from(args)?;
        options.validate()?;
        Ok(options)
    }

    /// Checks what clap's rules cannot ([`ServeArgs::validate`]; `--slow-core` against
    /// `--cores` when given).
    ///
    /// # Errors
    ///
    /// A clap error naming the options that contradict each other.
    pub fn validate(&self) -> Result<(), clap::Error> {
        self.serve.validate()?;
        if let (Some(slow), Some(cores)) = (self.slow_core, self.serve.cores)
            && slow >= cores
        {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{}\n", slow_core_error(slow, cores)),
            ));
        }
        Ok(())
    }
}

fn slow_core_error(slow: usize, cores: usize) -> String {
    format!(
        "--slow-core {slow}: there {} only {cores} core{} (0..{cores})",
        if cores == 1 { "is" } else { "are" },
        if cores == 1 { "" } else { "s" }
    )
}

// -----------------------------------------------------------------------------------------------
// What a run reports.

/// What one core's echo service did (the runtime's own counters for the core are in the
/// snapshot: [`Report::runtime`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreReport {
    /// The core (and queue) number.
    pub core: usize,
    /// Connections this core's service accepted (its own, and those it stole).
    pub served: u64,
    /// Connections closed after the peer's end of stream, everything echoed.
    pub closed: u64,
    /// Connections that failed (reset, timed out) while served.
    pub failed: u64,
    /// Bytes echoed.
    pub bytes: u64,
    /// Connections still open when the service stopped.
    pub open_at_exit: u64,
}

/// Everything a run did; [`fmt::Display`] is the summary a person reads.
#[derive(Debug)]
#[non_exhaustive]
pub struct Report {
    /// The runtime's report: its setup line, the final counters of every core, queue and port,
    /// the devices' summaries, every pool's audit, and the cores whose service failed.
    pub runtime: netchannel_runtime::Report,
    /// The client's side (model backend).
    pub client: Option<ClientReport>,
    /// The echo service, per core.
    pub cores: Vec<CoreReport>,
    /// The echo port.
    pub port: u16,
    /// What ran.
    pub backend: Backend,
}

impl Report {
    /// The runtime's final counters.
    #[must_use]
    pub fn snapshot(&self) -> &Snapshot {
        &self.runtime.snapshot
    }

    /// Affinity-Accept's counters for the echo port (`None` when no core listened).
    #[must_use]
    pub fn accept(&self) -> Option<&AcceptStats> {
        self.snapshot().accept.iter().find(|a| a.port == self.port)
    }

    /// Connections the cores served.
    #[must_use]
    pub fn served(&self) -> u64 {
        self.cores.iter().map(|c| c.served).sum()
    }

    /// Connections the cores closed cleanly.
    #[must_use]
    pub fn closed(&self) -> u64 {
        self.cores.iter().map(|c| c.closed).sum()
    }

    /// Connections that failed while served.
    #[must_use]
    pub fn failed(&self) -> u64 {
        self.cores.iter().map(|c| c.failed).sum()
    }

    /// Bytes the server echoed.
    #[must_use]
    pub fn bytes_echoed(&self) -> u64 {
        self.cores.iter().map(|c| c.bytes).sum()
    }

    /// The line that explains frames dropped as malformed on TAP or AF_XDP, if any were.
    #[must_use]
    pub fn malformed_warning(&self) -> Option<String> {
        malformed_warning(&self.backend, self.snapshot())
    }
}

/// Frames dropped as malformed on a TAP or AF_XDP backend: almost always the peer's TX checksum
/// offload (the kernel leaves the checksum to hardware that is not there, and neither TAP nor
/// AF_XDP says so).
fn malformed_warning(backend: &Backend, snapshot: &Snapshot) -> Option<String> {
    let malformed = snapshot.rx_malformed();
    let (kind, iface) = match backend {
        Backend::Tap { name } => ("TAP", name.as_str()),
        Backend::Xdp { iface, .. } => ("AF_XDP", iface.as_str()),
        _ => return None,
    };
    (malformed > 0).then(|| {
        format!(
            "warning: {malformed} of {} frames from {kind} {iface} were dropped as malformed (bad checksums, most \
             likely): the usual cause is TX checksum offload on the peer's interface, which leaves the checksums to \
             hardware that is not there; turn it off there: `ethtool -K <peer-if> tx off`",
            snapshot.rx_frames()
        )
    })
}

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runtime = &self.runtime;
        writeln!(f, "summary: TCP echo on {}, port {}", runtime.setup, self.port)?;
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
        match self.accept() {
            Some(a) => writeln!(
                f,
                "  accept (affinity): {} connections, local-accept fraction {:.3}, {} steals (moved to the \
                 stealer, signature re-pointed), {} flow-group migrations, {} refused",
                a.enqueued,
                a.local_fraction(),
                a.stolen,
                a.migrated,
                a.rejected
            )?,
            None => writeln!(f, "  accept (affinity): no core listened on port {}", self.port)?,
        }
        let snapshot = self.snapshot();
        for c in &self.cores {
            let stats = snapshot.cores.iter().find(|s| s.core == c.core);
            let queue = snapshot.queues.iter().find(|q| q.queue == c.core);
            let (stolen, given, forwarded, tx_dropped) = stats.map_or((0, 0, 0, 0), |s| {
                (s.handoff.accepted_stolen, s.handoff.given, s.handoff.forwarded, s.tx_channel.refused_full)
            });
            let (rx, delivered, tx, dropped_full, dropped_malformed) = queue.map_or((0, 0, 0, 0, 0), |q| {
                let ch = &q.channelizer;
                (ch.rx, ch.delivered, ch.tx, ch.dropped_full, ch.dropped_malformed)
            });
            let (listen_drops, resets, not_for_us, malformed) = stats.map_or((0, 0, 0, 0), |s| {
                (s.stack.listen_drops, s.stack.rst_sent, s.stack.rx_not_for_us, s.stack.rx_malformed)
            });
            writeln!(
                f,
                "  core {}: {} conns served ({} stolen, {} given away, {} closed, {} failed, {} open at exit), \
                 {:.1} MiB echoed; {} frames in ({} redirected), {} out, {} forwarded; drops: channels {}, TX \
                 channel {}, malformed {} (stack {}); stack: {} listen drops, {} resets, {} not for us",
                c.core,
                c.served,
                stolen,
                given,
                c.closed,
                c.failed,
                c.open_at_exit,
                mib(c.bytes),
                rx,
                delivered,
                tx,
                forwarded,
                dropped_full,
                tx_dropped,
                dropped_malformed,
                malformed,
                listen_drops,
                resets,
                not_for_us
            )?;
        }
        if let Some(warning) = self.malformed_warning() {
            writeln!(f, "  {warning}")?;
        }
        for (core, e) in &runtime.errors {
            writeln!(f, "  core {core}: the service failed: {e}")?;
        }
        for line in &runtime.devices {
            writeln!(f, "  {line}")?;
        }
        for (name, audit) in &runtime.buffers {
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
// The service.

/// One core's echo counters, live (the progress line reads them) and final.
#[derive(Debug, Default)]
struct Live {
    served: AtomicU64,
    closed: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    open_at_exit: AtomicU64,
}

impl Live {
    fn add(counter: &AtomicU64, n: u64) {
        // Relaxed: counters; the runtime's joins order the final reads.
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn report(&self, core: usize) -> CoreReport {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CoreReport {
            core,
            served: get(&self.served),
            closed: get(&self.closed),
            failed: get(&self.failed),
            bytes: get(&self.bytes),
            open_at_exit: get(&self.open_at_exit),
        }
    }
}

/// A connection being served: what it sent that is not echoed yet.
struct Conn<'c> {
    stream: Stream<'c>,
    out: Vec<u8>,
}

/// What echoing did to a connection.
enum Echoed {
    /// Still open (it may have moved bytes).
    Open,
    /// The peer ended its stream and everything was echoed: close it.
    Finished,
    /// It failed: abort it.
    Failed,
}

/// Echoes what `c` has received, as far as its send buffer takes it.
fn echo(c: &mut Conn<'_>, buf: &mut [u8], slow: bool, live: &Live) -> Echoed {
    loop {
        if !c.out.is_empty() {
            match c.stream.write(&c.out) {
                Ok(n) => {
                    c.out.drain(..n);
                    Live::add(&live.bytes, n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return Echoed::Failed,
            }
            if !c.out.is_empty() {
                return Echoed::Open; // the send buffer is full: read more later
            }
        }
        match c.stream.read(buf) {
            Ok(0) => return Echoed::Finished,
            Ok(n) => {
                if slow {
                    std::thread::sleep(SLOW_DELAY);
                }
                c.out.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Echoed::Open,
            Err(_) => return Echoed::Failed,
        }
    }
}

/// The echo service of one core: an event loop over its listener and its connections, until the
/// runtime stops.
fn serve(core: &mut Core<'_>, port: u16, slow_core: Option<usize>, live: &[Live]) -> io::Result<()> {
    let id = core.id();
    let live = &live[id];
    let slow = slow_core == Some(id);
    let listener = core.listen(port)?;
    listener.set_nonblocking(true);
    let mut conns: Vec<Conn<'_>> = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    let mut last_accept: Option<Instant> = None;
    let result = 'serve: loop {
        match core.poll_wait(Some(POLL_WAIT)) {
            Ok(()) => {}
            Err(e) if Stopping::is(&e) => break Ok(()),
            Err(e) => break Err(e),
        }
        // Accept every connection ready (this core's first, then stolen ones); the slow core takes
        // at most one per `SLOW_ACCEPT` (a worker that is behind).
        while !slow || last_accept.is_none_or(|t| t.elapsed() >= SLOW_ACCEPT) {
            match listener.accept() {
                Ok((stream, _peer)) => {
                    last_accept = Some(Instant::now());
                    if let Err(e) = stream.set_nonblocking(true).and_then(|()| stream.set_nodelay(true)) {
                        break 'serve Err(e);
                    }
                    Live::add(&live.served, 1);
                    conns.push(Conn { stream, out: Vec::new() });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if Stopping::is(&e) => break 'serve Ok(()),
                Err(e) => break 'serve Err(e),
            }
        }
        let mut i = 0;
        while i < conns.len() {
            match echo(&mut conns[i], &mut buf, slow, live) {
                Echoed::Open => i += 1,
                Echoed::Finished => {
                    // Dropping it closes it: our FIN follows what is still queued.
                    drop(conns.swap_remove(i));
                    Live::add(&live.closed, 1);
                }
                Echoed::Failed => {
                    let _ = conns.swap_remove(i).stream.abort();
                    Live::add(&live.failed, 1);
                }
            }
        }
        if core.is_stopping() {
            break Ok(());
        }
    };
    Live::add(&live.open_at_exit, conns.len() as u64);
    result
}

/// Request/response tuning for both ends: no Nagle, and Linux's 200 ms minimum RTO.
fn tcp_tuning(config: &mut StackConfig) {
    config.tcp.nodelay = true;
    config.tcp.min_rto = Duration::from_millis(200);
    config.tcp.initial_rto = Duration::from_millis(200);
}

/// Waits until `stop` (Ctrl-C), the runtime stops or the duration is up, printing a progress line
/// every second, the counters on SIGUSR1, and once the malformed-frames warning (servers on TAP,
/// AF_XDP and PCI: the clients are elsewhere).
fn wait_serving(
    control: &Control<'_>,
    options: &Options,
    backend: &Backend,
    stop: &AtomicBool,
    live: &[Live],
) {
    let start = Instant::now();
    let mut next = start + Duration::from_secs(1);
    let mut warned = false;
    // Relaxed: a plain flag.
    while !control.is_stopping()
        && !stop.load(Ordering::Relaxed)
        && options.serve.duration.is_none_or(|d| start.elapsed() < d)
    {
        std::thread::sleep(Duration::from_millis(20));
        if cli::counters_requested() {
            print!("{}", control.snapshot());
        }
        if Instant::now() >= next {
            next += Duration::from_secs(1);
            let snapshot = control.snapshot();
            if !warned && let Some(warning) = malformed_warning(backend, &snapshot) {
                eprintln!("echo: {warning}");
                warned = true;
            }
            if options.progress {
                let sum = |f: fn(&Live) -> &AtomicU64| {
                    live.iter().map(|l| f(l).load(Ordering::Relaxed)).sum::<u64>()
                };
                println!(
                    "[{:6.1} s] {} connections served, {:.1} MiB echoed, {} frames in, {} dropped",
                    start.elapsed().as_secs_f64(),
                    sum(|l| &l.served),
                    mib(sum(|l| &l.bytes)),
                    snapshot.rx_frames(),
                    snapshot.dropped()
                );
            }
        }
    }
}

/// The default core count on the model and a card: every CPU, at most 16.
fn default_cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(16)
}

/// Runs the echo service as `options` say until it is done (the model's client finished), `stop`
/// is set (Ctrl-C), or its duration is up; returns the summary.
///
/// # Errors
///
/// A message saying what failed and what to do about it: contradictory options, a backend that
/// would not open, a client connection that failed or got a wrong byte back, a core that failed,
/// buffers not all back.
pub fn run(options: &Options, stop: &AtomicBool) -> Result<Report, String> {
    options.validate().map_err(|e| e.to_string().trim_end().trim_start_matches("error: ").to_owned())?;
    let backend = options.serve.backend();
    let mut builder = options.serve.builder().balance(options.balance).configure(|_, c| tcp_tuning(c));
    if options.serve.cores.is_none() && matches!(backend, Backend::Model | Backend::Pci { .. }) {
        builder = builder.cores(default_cores());
    }
    let mut runtime = builder.build().map_err(|e| e.to_string())?;
    let cores = runtime.cores();
    if let Some(slow) = options.slow_core
        && slow >= cores
    {
        return Err(slow_core_error(slow, cores));
    }
    let server = SocketAddrV4::new(runtime.ip().address(), options.port);
    let peer = runtime.take_peer();
    let setup = format!("{}, port {}", runtime.setup(), options.port);
    if options.progress {
        match &peer {
            Some(_) => {
                let msgs = options.serve.duration.map_or_else(
                    || format!("{} messages each", options.messages),
                    |d| format!("for {:.1} s", d.as_secs_f64()),
                );
                println!(
                    "echo: {setup}; {} connections, {msgs}, sizes {}..={} bytes",
                    options.conns, options.size.0, options.size.1
                );
            }
            None => println!("echo: {setup}; Ctrl-C stops"),
        }
    }
    let live: Vec<Live> = (0..cores).map(|_| Live::default()).collect();
    let server_ip = runtime.ip();
    let (port, slow_core, live_ref) = (options.port, options.slow_core, &live[..]);
    let (client, runtime_report) = runtime
        .run(
            move |core: &mut Core<'_>| serve(core, port, slow_core, live_ref),
            |control| match peer {
                Some(peer) => {
                    let mut config = peer.stack_config(server_ip);
                    tcp_tuning(&mut config);
                    let (mut device, pool) = peer.into_parts();
                    let cache = pool.cache();
                    let tick = || {
                        if cli::counters_requested() {
                            print!("{}", control.snapshot());
                        }
                        !control.is_stopping()
                    };
                    Some(client::run(&mut device, &cache, config, server, options, stop, tick))
                }
                None => {
                    wait_serving(control, options, &backend, stop, &live);
                    None
                }
            },
        )
        .map_err(|e| e.to_string())?;
    let report = Report {
        runtime: runtime_report,
        client: None,
        cores: live.iter().enumerate().map(|(core, l)| l.report(core)).collect(),
        port: options.port,
        backend,
    };
    match client {
        Some(Ok(c)) => Ok(Report { client: Some(c), ..report }),
        Some(Err(e)) if !report.runtime.errors.is_empty() => {
            let cores: Vec<String> =
                report.runtime.errors.iter().map(|(c, e)| format!("core {c}: {e}")).collect();
            Err(format!("{e}; the server failed: {}", cores.join("; ")))
        }
        Some(Err(e)) => Err(e),
        None => Ok(report),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Options::try_parse_args(std::iter::once("echo").chain(args.iter().copied()))
    }

    #[test]
    fn options_parse() {
        let o = parse(&["--cores", "3", "--size", "10..20", "--placement", "split", "--conns", "5"]).unwrap();
        let s = &o.serve;
        assert_eq!(
            (s.cores, o.size, s.placement, o.conns),
            (Some(3), (10, 20), netchannel_runtime::Placement::Split, 5)
        );
        let o =
            parse(&["--conns=32", "--messages=100", "--size=1..8192", "--quiet", "--no-balance"]).unwrap();
        assert_eq!((o.conns, o.messages, o.size, o.progress, o.balance), (32, 100, (1, 8192), false, false));
        assert!(!parse(&["--no-progress"]).unwrap().progress);
        assert_eq!(parse(&["--size", "512"]).unwrap().size, (512, 512));
        assert_eq!(parse(&["--size", "1..=9"]).unwrap().size, (1, 9));
        let d = Options::default();
        assert_eq!(
            (d.port, d.conns, d.messages, d.size, d.progress, d.balance),
            (7, 64, 2000, (1, 4096), true, true)
        );
        assert!(d.serve.is_model());
        for (args, option) in [
            (&["--size", "20..10"][..], "--size"),
            (&["--size", "0..10"], "--size"),
            (&["--conns", "0"], "--conns"),
            (&["--messages", "0"], "--messages"),
            (&["--slow-core", "2", "--cores", "2"], "--slow-core"),
            (&["--tap", "a", "--xdp", "b"], "--xdp"),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(option), "{args:?}: {e}");
        }
        assert_eq!(parse(&["--help"]).unwrap_err().kind(), clap::error::ErrorKind::DisplayHelp);
    }

    #[test]
    fn the_slow_core_must_exist() {
        let options = Options {
            serve: ServeArgs { cores: Some(2), ..ServeArgs::default() },
            slow_core: Some(2),
            progress: false,
            ..Options::default()
        };
        let e = run(&options, &AtomicBool::new(false)).unwrap_err();
        assert!(e.contains("--slow-core 2"), "{e}");
    }

    fn model(cores: usize, extra: impl FnOnce(&mut Options)) -> Options {
        let mut options = Options {
            serve: ServeArgs { cores: Some(cores), ..ServeArgs::default() },
            conns: 8,
            messages: 5,
            size: (1, 3000),
            progress: false,
            ..Options::default()
        };
        extra(&mut options);
        options
    }

    fn check_small_run(report: &Report) {
        let client = report.client.as_ref().unwrap();
        assert_eq!((client.completed, client.messages), (8, 40), "{report}");
        assert_eq!(report.bytes_echoed(), client.bytes, "{report}");
        assert_eq!(report.accept().map(|a| a.enqueued), Some(8), "{report}");
        assert_eq!(report.served(), 8, "{report}");
        assert_eq!(report.closed(), 8, "{report}");
        assert_eq!(report.failed(), 0, "{report}");
        assert!(report.runtime.errors.is_empty(), "{report}");
        assert!(!report.runtime.buffers.is_empty(), "the pools were audited: {report}");
    }

    #[test]
    fn model_echo_small_run() {
        let report = run(&model(2, |_| {}), &AtomicBool::new(false)).unwrap();
        check_small_run(&report);
        assert_eq!(report.cores.len(), 2);
    }

    #[test]
    fn model_echo_split_placement() {
        let options = model(2, |o| o.serve.placement = netchannel_runtime::Placement::Split);
        let report = run(&options, &AtomicBool::new(false)).unwrap();
        check_small_run(&report);
        assert!(report.runtime.setup.contains("split"), "{report}");
    }

    #[test]
    fn model_echo_stolen_connections_move_to_the_stealer() {
        let options = model(2, |o| {
            o.conns = 128;
            o.serve.backlog = 32;
            o.slow_core = Some(1);
        });
        let report = run(&options, &AtomicBool::new(false)).unwrap();
        let client = report.client.as_ref().unwrap();
        assert_eq!((client.completed, client.messages), (128, 640), "{report}");
        assert_eq!(report.bytes_echoed(), client.bytes);
        let accept = report.accept().unwrap();
        assert!(accept.stolen > 0, "the slow core was stolen from: {report}");
        let snapshot = report.snapshot();
        let adopted: u64 = snapshot.cores.iter().map(|c| c.handoff.accepted_stolen).sum();
        assert_eq!(adopted, accept.stolen, "every steal moved its connection: {report}");
        assert!(snapshot.cores.iter().all(|c| c.handoff.failed == 0 && c.stack.rst_sent == 0), "{report}");
        assert_eq!(report.failed(), 0, "{report}");
        assert_eq!(client.stack.rst_sent, 0);
    }
}
