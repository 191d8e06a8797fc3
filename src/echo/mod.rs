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
//! With feature `async`, `run_async` is the same service written with async/await (an accept loop
//! spawning a task per connection on each core's executor; TCP only): `cargo run --release
//! --features async --example async_echo`.
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

#[cfg(feature = "async")]
mod async_service;
mod client;

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;
use clap::builder::TypedValueParser as _;
use netchannel_runtime::{Backend, Core, Runtime, Snapshot, Stream};
use tcp_lib::stack::UdpId;
use tcp_lib::wire::Ipv4Cidr;

#[cfg(feature = "async")]
pub use async_service::run_async;
pub use client::ClientReport;

use crate::cli::{self, IpCidr, ServeArgs, Validate};
use crate::client::Plan;
use crate::service::{self, Counters, Handler, Served, ServiceReport, Step, event_loop, write_latency};
use crate::util::{add, get, mib, thread_cpu};

/// The echo port (RFC 862).
pub const DEFAULT_PORT: u16 = 7;
/// The delay per received chunk on the `--slow-core`.
const SLOW_DELAY: Duration = Duration::from_millis(1);
/// The `--slow-core` accepts at most one connection per this.
const SLOW_ACCEPT: Duration = Duration::from_millis(5);
/// Bytes a connection reads at a time.
const CHUNK: usize = 64 * 1024;

/// What to run: the runtime's options ([`ServeArgs`]) and echo's own. [`Options::default`] is
/// `cargo run --release --example echo` with no options.
///
/// In code: `Options::try_parse_args(["echo", "--tap", "tap0", "--quiet"])` ([`Validate`]), or
/// the public fields with `..Options::default()`.
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

    /// Echo UDP datagrams on the same port too, over both families (every core binds it and echoes
    /// the datagrams its stack receives)
    #[arg(long)]
    pub udp: bool,

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

impl Options {
    /// Echo on `port` on the TAP `iface` as `ip`, one core, no progress line: what the tests that
    /// use the kernel as the client run (`--tap IFACE --ip IP --cores 1 --port P --quiet`).
    #[must_use]
    pub fn tap(iface: &str, ip: Ipv4Cidr, port: u16) -> Self {
        Self {
            serve: ServeArgs {
                tap: Some(iface.into()),
                ips: vec![IpCidr::V4(ip)],
                cores: Some(1),
                ..ServeArgs::default()
            },
            progress: false,
            port,
            ..Self::default()
        }
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

impl Validate for Options {
    /// [`ServeArgs::validate`], and `--slow-core` against `--cores` when given.
    fn validate(&self) -> Result<(), clap::Error> {
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
    /// UDP datagrams echoed (`--udp`).
    pub datagrams: u64,
    /// The CPU time of the core's thread while it served (`None` where the kernel does not say:
    /// `/proc/thread-self/schedstat`).
    pub cpu: Option<Duration>,
}

/// Everything a run did ([`ServiceReport`]'s `details`: the backend that ran); [`fmt::Display`]
/// is the summary a person reads.
pub type Report = ServiceReport<ClientReport, CoreReport, Backend>;

impl Report {
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

    /// The CPU time of every core's thread while it served, summed (`None` where unknown).
    #[must_use]
    pub fn server_cpu(&self) -> Option<Duration> {
        self.cores.iter().map(|c| c.cpu).sum()
    }

    /// The line that explains frames dropped as malformed on TAP or AF_XDP, if any were.
    #[must_use]
    pub fn malformed_warning(&self) -> Option<String> {
        malformed_warning(&self.details, self.snapshot())
    }
}

/// Frames dropped as malformed on a TAP or AF_XDP backend: almost always the peer's TX checksum
/// offload (the kernel leaves the checksum to hardware that is not there, and neither TAP nor
/// AF_XDP says so).
fn malformed_warning(backend: &Backend, snapshot: &Snapshot) -> Option<String> {
    let malformed = snapshot.rx_malformed();
    let (kind, iface) = match backend {
        Backend::Tap { name, .. } => ("TAP", name.as_str()),
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
            write_latency(f, "send to full echo", &c.latency)?;
            if let Some(cpu) = self.server_cpu() {
                writeln!(
                    f,
                    "  server CPU: {:.3} s over the cores, {:.2} us per message",
                    cpu.as_secs_f64(),
                    cpu.as_secs_f64() * 1e6 / c.messages.max(1) as f64
                )?;
            }
            writeln!(
                f,
                "  client stack: {} frames in, {} out, {} dropped on output, {} resets sent",
                c.stack.rx_frames, c.stack.tx_frames, c.stack.tx_dropped, c.stack.rst_sent
            )?;
        }
        self.write_accept(f, "steals (moved to the stealer, signature re-pointed)")?;
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
                 channel {}, malformed {} (stack {}); stack: {} listen drops, {} resets, {} not for us{}",
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
                not_for_us,
                if c.datagrams > 0 {
                    format!("; {} UDP datagrams echoed", c.datagrams)
                } else {
                    String::new()
                }
            )?;
        }
        if let Some(warning) = self.malformed_warning() {
            writeln!(f, "  {warning}")?;
        }
        self.write_runtime(f)
    }
}

// -----------------------------------------------------------------------------------------------
// The service.

/// One core's echo counters, live (the progress line reads them) and final.
#[derive(Debug, Default)]
struct Counts {
    served: AtomicU64,
    closed: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    open_at_exit: AtomicU64,
    datagrams: AtomicU64,
}

/// One core's echo counters (shared with its connection tasks in the async echo, which outlive
/// any borrow: `Arc`) and the CPU time the core spent serving.
#[derive(Debug, Default)]
struct Live {
    counts: Arc<Counts>,
    /// The core's thread CPU time while it served.
    cpu: OnceLock<Duration>,
}

impl std::ops::Deref for Live {
    type Target = Counts;

    fn deref(&self) -> &Counts {
        &self.counts
    }
}

impl Live {
    /// Keeps the CPU time the core's thread spent since `start` (its [`thread_cpu`] then).
    fn cpu_since(&self, start: Option<Duration>) {
        if let Some(cpu) = thread_cpu().zip(start).map(|(end, start)| end.saturating_sub(start)) {
            let _ = self.cpu.set(cpu);
        }
    }

    fn report(&self, core: usize) -> CoreReport {
        CoreReport {
            core,
            served: get(&self.served),
            closed: get(&self.closed),
            failed: get(&self.failed),
            bytes: get(&self.bytes),
            open_at_exit: get(&self.open_at_exit),
            datagrams: get(&self.datagrams),
            cpu: self.cpu.get().copied(),
        }
    }
}

/// A core's echo connections, for the [`event_loop`]: the chunk buffer, whether this is the
/// `--slow-core`, and when it last accepted.
struct Echoing<'a> {
    live: &'a Live,
    buf: Vec<u8>,
    slow: bool,
    last_accept: Option<Instant>,
    /// The UDP socket on the echo port (`--udp`).
    udp: Option<UdpId>,
}

impl Handler for Echoing<'_> {
    /// What the connection sent that is not echoed yet.
    type Conn = Vec<u8>;

    /// The slow core takes at most one per `SLOW_ACCEPT` (a worker that is behind).
    fn may_accept(&mut self) -> bool {
        !self.slow || self.last_accept.is_none_or(|t| t.elapsed() >= SLOW_ACCEPT)
    }

    fn accept(&mut self, stream: &Stream<'_>) -> io::Result<Vec<u8>> {
        self.last_accept = Some(Instant::now());
        stream.set_nonblocking(true).and_then(|()| stream.set_nodelay(true))?;
        Ok(Vec::new())
    }

    /// Echoes what the connection has received, as far as its send buffer takes it; closes it on
    /// the peer's end of stream, everything echoed.
    fn is_quiet(&self, out: &Vec<u8>) -> bool {
        out.is_empty()
    }

    /// Echoes every datagram the UDP socket holds back to its sender.
    fn each_round(&mut self, core: &Core<'_>) -> io::Result<()> {
        let Some(id) = self.udp else { return Ok(()) };
        let (buf, live) = (&mut self.buf, self.live);
        core.interface().with_stack(|stack| {
            while let Ok(r) = stack.udp_recv_from(id, buf) {
                // A full queue of frames drops the echo (counted by the stack), as UDP may.
                if stack.udp_send_to(id, &buf[..r.len], r.from).is_ok() {
                    add(&live.datagrams, 1);
                }
            }
        })
    }

    fn step(&mut self, stream: &mut Stream<'_>, out: &mut Vec<u8>, _now: Instant) -> Step {
        loop {
            if !out.is_empty() {
                match stream.write(out) {
                    Ok(n) => {
                        out.drain(..n);
                        add(&self.live.bytes, n as u64);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return Step::Failed,
                }
                if !out.is_empty() {
                    return Step::Open; // the send buffer is full: read more later
                }
            }
            match stream.read(&mut self.buf) {
                Ok(0) => return Step::Closed,
                Ok(n) => {
                    if self.slow {
                        std::thread::sleep(SLOW_DELAY);
                    }
                    out.extend_from_slice(&self.buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Open,
                Err(_) => return Step::Failed,
            }
        }
    }
}

/// Echo on the runtime, for [`service::serve`]: the options, and whether the malformed-frames warning
/// was given.
struct Echo<'a> {
    options: &'a Options,
    backend: &'a Backend,
    warned: AtomicBool,
    /// The cores run the async echo ([`async_service`]): the setup line says so.
    asynchronous: bool,
}

impl service::BlockingService for Echo<'_> {
    /// Echo on one core: the [`event_loop`] over its connections.
    fn serve(&self, core: &mut Core<'_>, live: &Live) -> io::Result<()> {
        let counters = Counters {
            accepted: &live.served,
            closed: Some(&live.closed),
            failed: &live.failed,
            open_at_exit: &live.open_at_exit,
        };
        let slow = self.options.slow_core == Some(core.id());
        let udp = if self.options.udp {
            let any = SocketAddr::from((Ipv6Addr::UNSPECIFIED, self.options.port));
            let bound = core.interface().with_stack(|s| s.udp_bind(any))?;
            Some(bound.map_err(|e| {
                io::Error::other(format!("--udp: binding UDP port {}: {e}", self.options.port))
            })?)
        } else {
            None
        };
        let mut echoing = Echoing { live, buf: vec![0; CHUNK], slow, last_accept: None, udp };
        let start = thread_cpu();
        let result = event_loop(core, self.options.port, &counters, &mut echoing);
        live.cpu_since(start);
        result
    }
}

impl service::Service for Echo<'_> {
    type Live = Live;
    type Protocol = client::EchoProtocol;

    const NAME: &'static str = "echo";

    fn setup(&self, runtime: &str) -> String {
        let mode = if self.asynchronous { ", async/await" } else { "" };
        format!("{runtime}, port {}{mode}", self.options.port)
    }

    fn client_line(&self, plan: &Plan) -> String {
        let (min, max) = self.options.size;
        format!("{} connections, {}, sizes {min}..={max} bytes", plan.conns, plan.length("message"))
    }

    fn protocol(&self, _host: Ipv4Addr) -> Result<client::EchoProtocol, String> {
        Ok(client::EchoProtocol::new(self.options))
    }

    /// The progress line, and once the malformed-frames warning (servers on TAP, AF_XDP and PCI:
    /// the clients are elsewhere).
    fn every_second(&self, elapsed: Duration, snapshot: &Snapshot, live: &[Live]) {
        if let Some(warning) = malformed_warning(self.backend, snapshot)
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            eprintln!("echo: {warning}");
        }
        if self.options.progress {
            let sum = |f: fn(&Live) -> &AtomicU64| live.iter().map(|l| get(f(l))).sum::<u64>();
            println!(
                "[{:6.1} s] {} connections served, {:.1} MiB echoed, {} frames in, {} dropped",
                elapsed.as_secs_f64(),
                sum(|l| &l.served),
                mib(sum(|l| &l.bytes)),
                snapshot.rx_frames(),
                snapshot.dropped()
            );
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
    run_in(options, stop, false, |echo, port, plan, runtime, stop| {
        service::serve(echo, port, plan, runtime, stop)
    })
}

/// [`run`]'s body, the cores running `serve` (`asynchronous` for the setup line).
fn run_in(
    options: &Options,
    stop: &AtomicBool,
    asynchronous: bool,
    serve: impl FnOnce(&Echo<'_>, u16, Plan, Runtime, &AtomicBool) -> Result<Served<Live>, String>,
) -> Result<Report, String> {
    cli::check(options)?;
    let backend = options.serve.backend();
    let mut builder = options.serve.builder().balance(options.balance);
    if options.serve.cores.is_none() && matches!(backend, Backend::Model | Backend::Pci { .. }) {
        builder = builder.cores(default_cores());
    }
    let runtime = cli::build(builder)?;
    let cores = runtime.cores();
    if let Some(slow) = options.slow_core
        && slow >= cores
    {
        return Err(slow_core_error(slow, cores));
    }
    let echo = Echo { options, backend: &backend, warned: AtomicBool::new(false), asynchronous };
    let plan = Plan::new(&options.serve, options.conns, options.messages, options.seed, options.progress);
    let served = serve(&echo, options.port, plan, runtime, stop)?;
    Ok(served.report(|core, l: &Live| l.report(core), backend))
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

    /// The async echo ([`run_async`]) on the model: the same run, the same counters, the same
    /// summary as the blocking echo's.
    #[cfg(feature = "async")]
    #[test]
    fn model_async_echo_small_run() {
        let report = run_async(&model(2, |_| {}), &AtomicBool::new(false)).unwrap();
        check_small_run(&report);
        assert_eq!(report.cores.len(), 2);
        assert!(report.runtime.setup.contains("2 core"), "{report}");
        assert!(report.server_cpu().is_some(), "{report}");
    }

    #[cfg(feature = "async")]
    #[test]
    fn model_async_echo_stolen_connections_move_to_the_stealer() {
        stolen_connections_move_to_the_stealer(run_async);
    }

    #[cfg(feature = "async")]
    #[test]
    fn the_async_echo_refuses_udp() {
        let e = run_async(&model(1, |o| o.udp = true), &AtomicBool::new(false)).unwrap_err();
        assert!(e.contains("--udp") && e.contains("--example echo --udp"), "{e}");
    }

    #[test]
    fn model_echo_stolen_connections_move_to_the_stealer() {
        stolen_connections_move_to_the_stealer(run);
    }

    /// A slow core's queue fills and the other core steals from it: every steal moves its
    /// connection, every byte comes back, nothing is reset.
    fn stolen_connections_move_to_the_stealer(run: fn(&Options, &AtomicBool) -> Result<Report, String>) {
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
