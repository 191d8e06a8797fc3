//! A Sandstorm-style static HTTP/1.1 server (Marinos, Watson and Handley, "Network Stack
//! Specialization for Performance", SIGCOMM 2014) behind
//! `cargo run --release --example httpd`, on [`netchannel_runtime`]: the runtime owns the data
//! path (a backend's queues, one channelizer and one tcp-lib stack per core, net channels between
//! them, Affinity-Accept across the cores with stolen connections moved to the stealer, the
//! `same` or `split` placement); this module is what remains of httpd: the HTTP protocol
//! ([`parse`]), the content prepared at start ([`Content`]), its options ([`Options`]), the
//! per-core service, and the model's in-process client that fetches random files and checks every
//! byte.
//!
//! # Pre-segmented content
//!
//! At start every file's whole response (status line, headers, body), for GET and for HEAD, with
//! and without `Connection: close`, is built once and cut into TCP payload segments for the
//! segment sizes connections will use ([`SEGMENT_SIZES`]: 1448 bytes, an MSS of 1460 less the
//! timestamps option; and 1460), with the one's-complement sum of every segment precomputed
//! ([`PreparedSegments`]). Serving a request queues the prepared response on the connection by
//! reference ([`Stack::send_prepared`](tcp_lib::stack::Stack::send_prepared), through the core's
//! [`Interface::with_stack`](tcp_lib::socket::Interface::with_stack)): no byte of it is copied
//! into the connection's send ring, and a segment that is one of the prepared cuts gets its
//! checksum from the table. The one copy left is from the prepared bytes into the frame's pool
//! buffer (a pool buffer belongs to one frame and goes to the device; there is no shared,
//! reference-counted TX buffer to point a descriptor at). `--copy` serves the same bytes through
//! the stream's `write` ([`Stack::send`](tcp_lib::stack::Stack::send)) instead: copied into the send ring, from it into the
//! stack's scratch buffer, from there into the frame, and summed on the way.
//!
//! # HTTP
//!
//! GET and HEAD; other methods get 405. A request (line, headers and any `Content-Length` body)
//! is at most [`MAX_REQUEST`] bytes; longer, or malformed (a bad request line, a header line
//! without a colon, `Transfer-Encoding`, a bad `Content-Length`, a version other than HTTP/1.0 or
//! 1.1), it gets 400 and the connection is closed. Unknown paths get 404. Connections are kept
//! alive (HTTP/1.1) unless the request says `Connection: close` or is HTTP/1.0; pipelined
//! requests are answered in order. `/` serves `/index.html` when there is one. No `Date` header.
//! A connection closes lingering (as nginx does): our FIN follows the last response, and what the
//! peer still sends is read and dropped until its FIN (at most 5 s), so that closing with unread
//! input does not reset the connection before the peer has read the response.
//!
//! # The service
//!
//! Every core listens on [`Options::port`] and serves its connections from one non-blocking event
//! loop: [`Core::poll_wait`] (1 ms at most), accept until `WouldBlock` (Affinity-Accept: this
//! core's connections first, stolen ones when it has none), then for each connection send what
//! waits (`--copy`), answer every complete request buffered, read more; it returns when the
//! runtime stops. With `--copy` at most 64 responses wait per connection before it stops reading
//! requests; prepared responses wait in the stack.
//!
//! # Backends
//!
//! Whatever [`ServeArgs`] names: the 82599 model with an in-process client (the default; N
//! connections fetch random files and check every byte), `--tap NAME` (the kernel's clients:
//! curl, wrk, python), `--xdp IFACE` (an interface's queues through AF_XDP, one core each),
//! `--pci ADDR` (a real 82599 over VFIO); `--cores N` and `--placement same|split` on every
//! backend that has the queues.

mod client;
mod content;
mod http;

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;
use clap::builder::TypedValueParser as _;
use netchannel_runtime::stats::CoreStats;
use netchannel_runtime::{Core, Interface, Snapshot, Stream};
use tcp_lib::stack::{Error as StackError, PreparedSegments};

pub use client::ClientReport;
pub use content::{Content, DEMO_SIZES, SEGMENT_SIZES, demo_bytes, demo_name};
pub use http::{MAX_REQUEST, Method, Parsed, Request, parse};

use crate::cli::{self, ServeArgs, Validate};
use crate::client::Plan;
use crate::service::{self, Counters, Handler, ServiceReport, Step, event_loop, write_latency};
use crate::util::{add, get, mib};

/// The HTTP port.
pub const DEFAULT_PORT: u16 = 80;
/// Bytes a connection reads at a time.
const CHUNK: usize = 16 * 1024;
/// Responses queued per connection in `--copy` mode before it stops reading requests.
const MAX_PENDING: usize = 64;
/// How long a closing connection reads and drops the peer's input, waiting for its FIN.
const LINGER: Duration = Duration::from_secs(5);

// -----------------------------------------------------------------------------------------------
// Options.

/// What to run: the runtime's options ([`ServeArgs`]) and httpd's own. [`Options::default`] is
/// `cargo run --release --example httpd` with no options.
///
/// In code: `Options::try_parse_args(["httpd", "--tap", "tap0", "--quiet"])` ([`Validate`]), or
/// the public fields with `..Options::default()`.
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    name = "httpd",
    about = "A static HTTP/1.1 server (GET, HEAD, keep-alive) on per-core tcp-lib stacks behind net \
             channels, serving responses pre-segmented at start with precomputed checksums (Sandstorm)",
    long_about = None
)]
pub struct Options {
    /// The backend, the cores, the address and the rest of the runtime's settings.
    #[command(flatten)]
    pub serve: ServeArgs,

    /// Serve the files under PATH (default: a generated set of 1 KiB .. 256 KiB files, also
    /// written to target/httpd-demo)
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,

    /// Send responses through the stream's write (Stack::send: copied) instead of by reference
    /// (Stack::send_prepared)
    #[arg(long)]
    pub copy: bool,

    /// Client connections, all open at once (model backend)
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=60_000).map(usize::from))]
    pub conns: usize,

    /// Requests per client connection (model backend; --duration instead bounds the run by time)
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: u64,

    /// The model client fetches only files of this size (default: every file)
    #[arg(long, value_name = "BYTES")]
    pub size: Option<usize>,

    /// The HTTP port
    #[arg(long, value_name = "P", default_value_t = DEFAULT_PORT, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,

    /// Seeds the client's choices (model backend)
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// No progress line
    #[arg(long = "quiet", visible_alias = "no-progress", action = clap::ArgAction::SetFalse)]
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self::parse_from(["httpd"])
    }
}

impl Validate for Options {
    /// [`ServeArgs::validate`].
    fn validate(&self) -> Result<(), clap::Error> {
        self.serve.validate()
    }
}

/// The content `options` name: `--dir`, or the demo set (written to `target/httpd-demo`).
///
/// # Errors
///
/// When the directory cannot be read, or holds more than 1 GiB.
pub fn content(options: &Options) -> Result<Content, String> {
    match &options.dir {
        Some(dir) => Content::load(dir),
        None => Ok(Content::demo(Some(&Path::new(env!("CARGO_MANIFEST_DIR")).join("target/httpd-demo")))),
    }
}

// -----------------------------------------------------------------------------------------------
// Reports.

/// What one core's HTTP service did (the runtime's own counters for the core, its stack's
/// included, are in the snapshot: [`Report::core_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreReport {
    /// The core (and queue) number.
    pub core: usize,
    /// Connections this core served (its own, and those it stole).
    pub conns: u64,
    /// Responses queued, by status: 200, 400, 404, 405.
    pub responses: [u64; 4],
    /// Response bytes queued (headers and bodies).
    pub bytes: u64,
    /// Connections that failed (reset, timed out).
    pub failed: u64,
    /// Connections open when the server stopped.
    pub open_at_exit: u64,
    /// CPU time of the core's thread while it served (Linux schedstat), when known; with the
    /// `split` placement its channelizer's thread is not counted.
    pub cpu: Option<Duration>,
}

impl CoreReport {
    /// Responses of any status.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.responses.iter().sum()
    }
}

/// How httpd sent, and what it served: the `details` of its [`Report`].
#[derive(Clone, Debug)]
pub struct Served {
    /// Whether responses were copied (`--copy`) rather than sent by reference.
    pub copy: bool,
    /// Where the content came from, in words.
    pub source: String,
}

/// Everything a run did ([`ServiceReport`]'s `details`: [`Served`]); [`fmt::Display`] is the
/// summary a person reads.
pub type Report = ServiceReport<ClientReport, CoreReport, Served>;

impl Report {
    /// The runtime's final counters for core `core` (its stack's, handoffs, channels).
    #[must_use]
    pub fn core_stats(&self, core: usize) -> Option<&CoreStats> {
        self.snapshot().cores.iter().find(|c| c.core == core)
    }

    /// Requests the server answered.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.cores.iter().map(CoreReport::requests).sum()
    }

    /// Connections that failed while served.
    #[must_use]
    pub fn failed(&self) -> u64 {
        self.cores.iter().map(|c| c.failed).sum()
    }

    /// Segments the server's stacks sent from prepared content, and how many of them had their
    /// checksum from the precomputed table, over every core.
    #[must_use]
    pub fn prepared_segments(&self) -> (u64, u64) {
        let cores = &self.snapshot().cores;
        (
            cores.iter().map(|c| c.stack.tx_prepared).sum(),
            cores.iter().map(|c| c.stack.tx_prepared_sums).sum(),
        )
    }

    /// Resets the server's stacks sent, over every core.
    #[must_use]
    pub fn resets(&self) -> u64 {
        self.snapshot().cores.iter().map(|c| c.stack.rst_sent).sum()
    }

    /// The server cores' CPU time, when known.
    #[must_use]
    pub fn server_cpu(&self) -> Option<Duration> {
        self.cores.iter().map(|c| c.cpu).sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runtime = &self.runtime;
        let mode = if self.details.copy { "copy (Stack::send)" } else { "prepared (Stack::send_prepared)" };
        writeln!(
            f,
            "summary: HTTP on {}, port {}, {mode}; {}",
            runtime.setup, self.port, self.details.source
        )?;
        if let Some(c) = &self.client {
            let secs = c.elapsed.as_secs_f64().max(1e-9);
            writeln!(
                f,
                "  client: {} of {} connections completed, {} responses checked ({:.1} MiB of bodies byte for byte) in \
                 {secs:.2} s: {:.0} requests/s, {:.1} MiB/s",
                c.completed,
                c.conns,
                c.responses,
                mib(c.bytes),
                c.responses as f64 / secs,
                mib(c.bytes) / secs
            )?;
            write_latency(f, "request to last byte", &c.latency)?;
        }
        let requests = self.requests();
        if let Some(cpu) = self.server_cpu() {
            writeln!(
                f,
                "  server CPU: {:.3} s over {:.2} s, {:.1} us per request",
                cpu.as_secs_f64(),
                self.snapshot().elapsed.as_secs_f64(),
                cpu.as_secs_f64() * 1e6 / requests.max(1) as f64
            )?;
        }
        self.write_accept(f, "steals")?;
        let snapshot = self.snapshot();
        for c in &self.cores {
            let stats = self.core_stats(c.core);
            let queue = snapshot.queues.iter().find(|q| q.queue == c.core);
            let (stolen, prepared, sums, rx, tx, resets, malformed) =
                stats.map_or((0, 0, 0, 0, 0, 0, 0), |s| {
                    let st = &s.stack;
                    (
                        s.handoff.accepted_stolen,
                        st.tx_prepared,
                        st.tx_prepared_sums,
                        st.rx_frames,
                        st.tx_frames,
                        st.rst_sent,
                        st.rx_malformed,
                    )
                });
            let dropped = stats.map_or(0, |s| s.tx_channel.refused_full)
                + queue.map_or(0, |q| q.channelizer.dropped_full + q.device.rx_dropped);
            writeln!(
                f,
                "  core {}: {} conns ({} stolen, {} failed, {} open at exit), responses 200 {} / 400 {} / 404 {} / \
                 405 {}, {:.1} MiB; segments from prepared content {prepared} ({sums} with precomputed sums); \
                 {rx} frames in, {tx} out; {resets} resets, {dropped} drops, {malformed} malformed",
                c.core,
                c.conns,
                stolen,
                c.failed,
                c.open_at_exit,
                c.responses[0],
                c.responses[1],
                c.responses[2],
                c.responses[3],
                mib(c.bytes),
            )?;
        }
        self.write_runtime(f)
    }
}

// -----------------------------------------------------------------------------------------------
// The service.

/// One core's HTTP counters, live (the progress line reads them) and final.
#[derive(Debug, Default)]
struct Live {
    conns: AtomicU64,
    responses: [AtomicU64; 4],
    bytes: AtomicU64,
    failed: AtomicU64,
    open_at_exit: AtomicU64,
    cpu: OnceLock<Duration>,
}

impl Live {
    fn requests(&self) -> u64 {
        self.responses.iter().map(get).sum()
    }

    fn report(&self, core: usize) -> CoreReport {
        CoreReport {
            core,
            conns: get(&self.conns),
            responses: [0, 1, 2, 3].map(|i| get(&self.responses[i])),
            bytes: get(&self.bytes),
            failed: get(&self.failed),
            open_at_exit: get(&self.open_at_exit),
            cpu: self.cpu.get().copied(),
        }
    }
}

/// httpd on the runtime, for [`cli::serve`]: what every core's service shares.
struct Service<'a> {
    options: &'a Options,
    content: &'a Content,
}

/// A connection being served.
#[derive(Default)]
struct Conn {
    /// Received bytes not yet answered (at most one request's worth is read ahead).
    input: Vec<u8>,
    /// `--copy`: responses not yet all in the send ring, and how much of the first is.
    out: VecDeque<Arc<PreparedSegments>>,
    out_sent: usize,
    /// Respond no more; close once `out` is sent.
    closing: bool,
    /// Lingering after our FIN until the peer's, at most until then.
    linger: Option<Instant>,
}

/// The response to the request at the start of `input`: the prepared response, the bytes the
/// request took, whether the connection closes after it, and its status's index in
/// [`CoreReport::responses`]. `None` while the request is incomplete.
fn answer<'a>(content: &'a Content, input: &[u8]) -> Option<(&'a Arc<PreparedSegments>, usize, bool, usize)> {
    match parse(input, MAX_REQUEST) {
        Parsed::Incomplete => None,
        Parsed::Bad => Some((content.bad_request(), input.len(), true, 1)),
        Parsed::Request(r) => {
            let response = content.respond(&r);
            let status = match response.data().get(9..12) {
                Some(b"200") => 0,
                Some(b"404") => 2,
                _ => 3,
            };
            Some((response, r.len, r.close, status))
        }
    }
}

/// Serves connection `c`: sends what waits (`--copy`), answers the complete requests buffered,
/// reads more, and closes it lingering once it is done.
fn serve_conn(
    iface: &Interface<'_>,
    stream: &Stream<'_>,
    c: &mut Conn,
    buf: &mut [u8],
    svc: &Service<'_>,
    live: &Live,
    now: Instant,
) -> Step {
    let would_block = |e: &io::Error| e.kind() == io::ErrorKind::WouldBlock;
    loop {
        // --copy: push waiting responses into the send ring.
        while let Some(r) = c.out.front() {
            match (&*stream).write(&r.data()[c.out_sent..]) {
                Ok(n) => {
                    c.out_sent += n;
                    if c.out_sent == r.len() {
                        c.out.pop_front();
                        c.out_sent = 0;
                    }
                }
                Err(e) if would_block(&e) => break,
                Err(_) => return Step::Failed,
            }
        }
        if c.closing {
            if !c.out.is_empty() {
                return Step::Open;
            }
            // Lingering close: our FIN follows the last response; what the peer still sends is
            // read and dropped until its FIN (or LINGER).
            let until = match c.linger {
                Some(until) => until,
                None => {
                    let _ = stream.shutdown(Shutdown::Write);
                    *c.linger.insert(now + LINGER)
                }
            };
            loop {
                match (&*stream).read(buf) {
                    Ok(n) if n > 0 => {}
                    Err(e) if would_block(&e) && now < until => return Step::Open,
                    _ => return Step::Closed,
                }
            }
        }
        // Answer the complete requests buffered.
        let mut blocked = false;
        let mut copied = false;
        while !c.closing {
            if c.out.len() >= MAX_PENDING {
                blocked = true;
                break;
            }
            let Some((response, len, close, status)) = answer(svc.content, &c.input) else { break };
            if svc.options.copy {
                c.out.push_back(Arc::clone(response));
                copied = true;
            } else {
                match iface.with_stack(|s| s.send_prepared(stream.id(), response)) {
                    Ok(Ok(())) => {}
                    Ok(Err(StackError::WouldBlock)) => {
                        blocked = true;
                        break;
                    }
                    _ => return Step::Failed,
                }
            }
            add(&live.responses[status], 1);
            add(&live.bytes, response.len() as u64);
            c.input.drain(..len);
            c.closing = close;
        }
        if c.closing || copied {
            continue; // --copy: into the send ring now; then close, or read on
        }
        if blocked {
            return Step::Open;
        }
        // Read more (at most one request's worth buffered).
        let room = (MAX_REQUEST + 1).saturating_sub(c.input.len()).min(buf.len());
        if room == 0 {
            return Step::Open;
        }
        match (&*stream).read(&mut buf[..room]) {
            Ok(0) => {
                // The peer is done sending: answer nothing more, close after the responses.
                c.closing = true;
                c.input.clear();
            }
            Ok(n) => {
                c.input.extend_from_slice(&buf[..n]);
            }
            Err(e) if would_block(&e) => return Step::Open,
            Err(_) => return Step::Failed,
        }
    }
}

/// This thread's CPU time so far (Linux: the first field of `/proc/thread-self/schedstat`, ns).
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = text.split_whitespace().next()?.parse::<u64>().ok()?;
    Some(Duration::from_nanos(ns))
}

/// The HTTP service of one core: an event loop over its listener and its connections, until the
/// runtime stops.
fn serve(core: &Core<'_>, svc: &Service<'_>, live: &Live) -> io::Result<()> {
    let cpu_start = thread_cpu();
    let counters = Counters {
        accepted: &live.conns,
        closed: None,
        failed: &live.failed,
        open_at_exit: &live.open_at_exit,
    };
    let mut serving = Serving { iface: core.interface(), svc, live, buf: vec![0u8; CHUNK] };
    let result = event_loop(core, svc.options.port, &counters, &mut serving);
    if let Some(cpu) = thread_cpu().zip(cpu_start).map(|(end, start)| end.saturating_sub(start)) {
        let _ = live.cpu.set(cpu);
    }
    result
}

/// A core's HTTP connections, for the [`event_loop`].
struct Serving<'a, 'c> {
    iface: &'a Interface<'c>,
    svc: &'a Service<'a>,
    live: &'a Live,
    buf: Vec<u8>,
}

impl Handler for Serving<'_, '_> {
    type Conn = Conn;

    fn accept(&mut self, stream: &Stream<'_>) -> io::Result<Conn> {
        stream.set_nonblocking(true)?;
        Ok(Conn::default())
    }

    fn is_quiet(&self, c: &Conn) -> bool {
        c.input.is_empty() && c.out.is_empty() && !c.closing && c.linger.is_none()
    }

    fn step(&mut self, stream: &mut Stream<'_>, c: &mut Conn, now: Instant) -> Step {
        serve_conn(self.iface, stream, c, &mut self.buf, self.svc, self.live, now)
    }
}

impl<'a> service::Service for Service<'a> {
    type Live = Live;
    type Protocol = client::HttpProtocol<'a>;

    const NAME: &'static str = "httpd";

    fn setup(&self, runtime: &str) -> String {
        let mode = if self.options.copy { "copy" } else { "prepared" };
        format!("HTTP on {runtime}, port {}, {mode}; {}", self.options.port, self.content.source)
    }

    fn client_line(&self, plan: &Plan) -> String {
        format!("{} client connections, {}", plan.conns, plan.length("request"))
    }

    fn serve(&self, core: &mut Core<'_>, live: &Live) -> io::Result<()> {
        serve(core, self, live)
    }

    fn protocol(&self, host: Ipv4Addr) -> Result<client::HttpProtocol<'a>, String> {
        client::HttpProtocol::new(host, self.content, self.options)
    }

    /// The progress line (servers on TAP, AF_XDP and PCI: the clients are elsewhere).
    fn every_second(&self, _elapsed: Duration, snapshot: &Snapshot, live: &[Live]) {
        if self.options.progress {
            println!(
                "[{:6.1} s] {} requests, {} connections, {} frames in, {} dropped",
                snapshot.elapsed.as_secs_f64(),
                live.iter().map(Live::requests).sum::<u64>(),
                live.iter().map(|l| get(&l.conns)).sum::<u64>(),
                snapshot.rx_frames(),
                snapshot.dropped()
            );
        }
    }
}

/// Runs the server as `options` say, with `content`, until it is done (the model's client
/// finished), `stop` is set (Ctrl-C), or its duration is up; returns the summary.
///
/// # Errors
///
/// A message saying what failed and what to do about it: contradictory options, nothing to serve,
/// a backend that would not open, a client connection that failed or got a wrong byte, a core that
/// failed, buffers not all back.
pub fn run(options: &Options, content: Arc<Content>, stop: &AtomicBool) -> Result<Report, String> {
    cli::check(options)?;
    if content.is_empty() {
        return Err(format!("nothing to serve: {}", content.source));
    }
    let runtime = cli::build(options.serve.builder())?;
    let plan = Plan::new(&options.serve, options.conns, options.requests, options.seed, options.progress);
    let served = service::serve(&Service { options, content: &content }, options.port, plan, runtime, stop)?;
    let details = Served { copy: options.copy, source: content.source.clone() };
    Ok(served.report(|core, l: &Live| l.report(core), details))
}

#[cfg(test)]
mod tests {
    use netchannel_runtime::Placement;

    use super::*;

    #[test]
    fn options_parse() {
        let parse =
            |args: &[&str]| Options::try_parse_args(std::iter::once("httpd").chain(args.iter().copied()));
        let o = parse(&["--cores", "2", "--placement", "split", "--copy", "--conns", "5", "--size", "1024"])
            .unwrap();
        assert_eq!((o.serve.cores, o.serve.placement, o.copy, o.conns), (Some(2), Placement::Split, true, 5));
        assert_eq!(o.size, Some(1024));
        let o = parse(&["--dir=/srv", "--requests=7", "--port=8080", "--seed=9", "--quiet"]).unwrap();
        assert_eq!(o.dir, Some(PathBuf::from("/srv")));
        assert_eq!((o.requests, o.port, o.seed, o.progress), (7, 8080, 9, false));
        let d = Options::default();
        assert_eq!(
            (d.port, d.conns, d.requests, d.size, d.copy, d.progress),
            (80, 32, 200, None, false, true)
        );
        assert!(d.serve.is_model() && d.serve.cores.is_none());
        for (args, option) in [
            (&["--conns", "0"][..], "--conns"),
            (&["--requests", "0"], "--requests"),
            (&["--port", "0"], "--port"),
            (&["--tap", "a", "--pci", "b"], "--pci"),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(option), "{args:?}: {e}");
        }
    }

    fn model_run(cores: usize, placement: Placement, copy: bool) -> Report {
        let options = Options {
            serve: ServeArgs { cores: Some(cores), placement, ..ServeArgs::default() },
            conns: 12,
            requests: 20,
            copy,
            progress: false,
            ..Options::default()
        };
        let content = Arc::new(Content::demo(None));
        let report = run(&options, content, &AtomicBool::new(false)).unwrap();
        let client = report.client.as_ref().unwrap();
        assert_eq!((client.completed, client.responses), (12, 240), "{report}");
        assert_eq!(report.requests(), 240, "{report}");
        assert_eq!(report.accept().map(|a| a.enqueued), Some(12), "{report}");
        assert_eq!(report.cores.iter().map(|c| c.conns).sum::<u64>(), 12, "{report}");
        assert_eq!((report.failed(), report.resets()), (0, 0), "{report}");
        assert!(report.runtime.errors.is_empty(), "{report}");
        for (name, audit) in &report.runtime.buffers {
            assert_eq!(audit.outstanding, 0, "{name}: {report}");
        }
        report
    }

    #[test]
    fn model_serves_every_byte_prepared() {
        let report = model_run(2, Placement::Same, false);
        let (prepared, sums) = report.prepared_segments();
        assert!(prepared > 240 && sums * 10 >= prepared * 9, "{report}");
    }

    #[test]
    fn model_serves_every_byte_copied() {
        let report = model_run(2, Placement::Same, true);
        assert_eq!(report.prepared_segments(), (0, 0), "{report}");
    }

    #[test]
    fn model_serves_every_byte_split_placement() {
        let report = model_run(2, Placement::Split, false);
        assert!(report.runtime.setup.contains("placement split"), "{report}");
        assert_eq!(report.snapshot().queues.len(), 2, "{report}");
        let (prepared, _) = report.prepared_segments();
        assert!(prepared > 240, "{report}");
    }
}
