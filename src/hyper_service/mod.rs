//! HTTP/1.1 with [`hyper`] 1.x on the per-core runtime's async services (feature `async`), behind
//! `cargo run --release --features async --example hyper`: each core runs
//! [`Runtime::run_async`](netchannel_runtime::Runtime::run_async)'s executor, accepts on
//! [`Options::port`] (Affinity-Accept across the cores, as every service on the runtime) and
//! spawns a task per connection that runs hyper's
//! [`http1::Builder::serve_connection`](hyper::server::conn::http1::Builder::serve_connection)
//! over [`hyper_util::rt::TokioIo`] around the core's
//! [`AsyncStream`] (its tokio I/O traits). Nothing here knows
//! the backend: the 82599 model with an in-process client (the default), `--tap`, `--xdp` or
//! `--pci` ([`ServeArgs`]).
//!
//! # What it serves
//!
//! * `GET /` (and `HEAD`): 200 and a short HTML page ([`INDEX`]);
//! * `GET /bytes/N`, `N` in `0..=`[`MAX_BYTES`] (1 MiB): 200 and `N` bytes of a fixed pattern,
//!   byte `i` being `i % 251` ([`pattern`]), so a client can check a body byte for byte at any
//!   size (251 is prime: no segment size lines the pattern up with itself);
//! * anything else (another method, path or size): 404.
//!
//! Connections are kept alive (RFC 9112 §9.3) until the client closes them. Every body is a slice
//! of one buffer built at start (a reference count, no copy).
//!
//! # Timeouts
//!
//! hyper's HTTP/1 `header_read_timeout` (`--header-timeout`, default 30 s, hyper's default: from
//! when hyper starts reading a request head, a kept-alive connection waiting for its next request
//! included, to the head's end; then hyper closes the connection) needs a [`hyper::rt::Timer`],
//! whose sleeps must be `Send + Sync + 'static`. The core's timers ([`AsyncCore::sleep`]) are
//! neither (they hold the core's `Rc` handle and live as long as the core, `'c`), so hyper gets
//! a timer of its own on the core's clock (`timer`: sleeps that keep their wakers in a table of
//! the core's thread, and one task per core that sleeps on [`AsyncCore::sleep_until`] until the
//! earliest). Without a timer hyper would not panic (a *default* timeout without a timer is
//! skipped; only one *configured* without a timer panics) but would apply no header timeout at
//! all, and a client trickling a head byte by byte would hold its connection for ever.
//!
//! Beside it, each connection's task has an idle timeout on the core's clock (`--idle-timeout`,
//! default 30 s): a connection on which nothing was read or written that long is closed (a client
//! that stopped reading a response, or stalled mid-body). Counted per core:
//! [`CoreReport::header_timeouts`], [`CoreReport::idle_timeouts`].
//!
//! # The model client
//!
//! On the model backend the runtime's `main` thread runs the model client
//! (`crate::client`, as echo's and httpd's) over `--conns` connections of `--requests` requests
//! each: every fourth connection first asks for a missing page (404), then each request is for `/`
//! or `/bytes/N` with `N` drawn from 1 byte to `--max-body`; status, `Content-Length` and body are
//! checked byte for byte. The run ends when every connection is done; the summary follows.

mod client;
mod report;
mod timer;

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::Ipv4Addr;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use clap::Parser;
use clap::builder::TypedValueParser as _;
use http_body_util::Full;
use hyper::body::Body as _;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use netchannel_runtime::{AsyncCore, AsyncStream, Snapshot, Stopping};

pub use crate::httpd::ClientReport;
pub use report::{CoreReport, Report};

use crate::cli::{self, ServeArgs, Validate};
use crate::client::Plan;
use crate::service::{self, AsyncService, Service};
use crate::util::{add, get, thread_cpu};

/// The HTTP port.
pub const DEFAULT_PORT: u16 = 80;
/// The largest `/bytes/N`.
pub const MAX_BYTES: usize = 1 << 20;
/// The default `--header-timeout` (hyper's own default).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// The default `--idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The page `GET /` answers.
pub const INDEX: &str = "<!DOCTYPE html>\n<html><head><title>hyper on netchannels</title></head>\n\
<body><h1>hyper on netchannels</h1><p>HTTP/1.1 served by hyper 1.x on a per-core TCP stack behind \
net channels.</p></body></html>\n";
/// The body of a 404.
const NOT_FOUND: &str = "not found\n";

/// Byte `i` of every `/bytes/N` body: `i % 251`.
#[must_use]
pub fn pattern(i: usize) -> u8 {
    u8::try_from(i % 251).unwrap_or(0)
}

// -----------------------------------------------------------------------------------------------
// Options.

/// What to run: the runtime's options ([`ServeArgs`]) and the service's own.
/// [`Options::default`] is `cargo run --release --features async --example hyper` with no options.
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    name = "hyper",
    about = "HTTP/1.1 with hyper 1.x on per-core tcp-lib stacks behind net channels, a task per \
             connection on each core's async executor: GET / and GET /bytes/N",
    long_about = None
)]
pub struct Options {
    /// The backend, the cores, the address and the rest of the runtime's settings.
    #[command(flatten)]
    pub serve: ServeArgs,

    /// The HTTP port
    #[arg(long, value_name = "P", default_value_t = DEFAULT_PORT, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,

    /// Seconds hyper waits for a request head (from when it starts reading one, on a kept-alive
    /// connection from the end of the previous response); then it closes the connection
    #[arg(long, value_name = "S", default_value = "30", value_parser = cli::seconds)]
    pub header_timeout: Duration,

    /// Seconds a connection may go without reading or writing a byte; then it is closed
    #[arg(long, value_name = "S", default_value = "30", value_parser = cli::seconds)]
    pub idle_timeout: Duration,

    /// Client connections, all open at once (model backend)
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=10_000).map(usize::from))]
    pub conns: usize,

    /// Requests per client connection (model backend; --duration instead bounds the run by time)
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: u64,

    /// The largest body the model client asks for (/bytes/N, N up to this)
    #[arg(long, value_name = "BYTES", default_value_t = MAX_BYTES, value_parser = clap::value_parser!(u32).range(1..=1 << 20).map(|n| n as usize))]
    pub max_body: usize,

    /// Seeds the client's choices (model backend)
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// No progress line
    #[arg(long = "quiet", visible_alias = "no-progress", action = clap::ArgAction::SetFalse)]
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self::parse_from(["hyper"])
    }
}

impl Validate for Options {
    /// [`ServeArgs::validate`].
    fn validate(&self) -> Result<(), clap::Error> {
        self.serve.validate()
    }
}

// -----------------------------------------------------------------------------------------------
// The pages.

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    /// `/`: [`INDEX`].
    Index,
    /// `/bytes/N`: `N` bytes of the [`pattern`].
    Bytes(usize),
}

/// The page `path` names, if any: `/`, or `/bytes/N` with `N` a decimal number (digits only) up
/// to [`MAX_BYTES`].
#[must_use]
pub fn route(path: &str) -> Option<Page> {
    if path == "/" {
        return Some(Page::Index);
    }
    let n = path.strip_prefix("/bytes/")?;
    if n.is_empty() || n.len() > 7 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok().filter(|&n| n <= MAX_BYTES).map(Page::Bytes)
}

/// The responses, built once at start: the page and [`MAX_BYTES`] of the pattern that every
/// `/bytes/N` body is a slice of (a reference count, no copy). What the service answers, and what
/// `benches/hyper.rs`'s kernel baseline answers too.
#[derive(Debug)]
pub struct Pages {
    index: Bytes,
    pattern: Bytes,
}

impl Default for Pages {
    fn default() -> Self {
        Self::new()
    }
}

impl Pages {
    /// Builds the bodies (1 MiB of pattern).
    #[must_use]
    pub fn new() -> Self {
        Self {
            index: Bytes::from_static(INDEX.as_bytes()),
            pattern: (0..MAX_BYTES).map(pattern).collect::<Vec<u8>>().into(),
        }
    }

    /// The response to `method path`: 200 with the page or the bytes, else 404.
    #[must_use]
    pub fn respond(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        let page = matches!(*method, Method::GET | Method::HEAD).then(|| route(path)).flatten();
        let (status, kind, body) = match page {
            Some(Page::Index) => (StatusCode::OK, "text/html; charset=utf-8", self.index.clone()),
            Some(Page::Bytes(n)) => (StatusCode::OK, "application/octet-stream", self.pattern.slice(..n)),
            None => (StatusCode::NOT_FOUND, "text/plain", Bytes::from_static(NOT_FOUND.as_bytes())),
        };
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(kind));
        response
    }
}

// -----------------------------------------------------------------------------------------------
// The service.

/// One core's counters, live (the progress line reads them) and final; shared with the core's
/// connection tasks, which outlive the borrow `serve` gets.
#[derive(Debug, Default)]
struct Live {
    counts: Arc<Counts>,
}

/// What [`Live`] counts.
#[derive(Debug, Default)]
struct Counts {
    conns: AtomicU64,
    ok: AtomicU64,
    not_found: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    idle_timeouts: AtomicU64,
    header_timeouts: AtomicU64,
    /// The first connection error, in words.
    first_error: Mutex<Option<String>>,
    cpu: OnceLock<Duration>,
}

impl Counts {
    fn requests(&self) -> u64 {
        get(&self.ok) + get(&self.not_found)
    }

    fn report(&self, core: usize) -> CoreReport {
        CoreReport {
            core,
            conns: get(&self.conns),
            ok: get(&self.ok),
            not_found: get(&self.not_found),
            bytes: get(&self.bytes),
            errors: get(&self.errors),
            idle_timeouts: get(&self.idle_timeouts),
            header_timeouts: get(&self.header_timeouts),
            first_error: self.first_error.lock().ok().and_then(|e| e.clone()),
            cpu: self.cpu.get().copied(),
        }
    }

    /// Counts `response`.
    fn count(&self, response: &Response<Full<Bytes>>) {
        add(if response.status() == StatusCode::OK { &self.ok } else { &self.not_found }, 1);
        add(&self.bytes, response.body().size_hint().exact().unwrap_or(0));
    }

    fn error(&self, e: &hyper::Error) {
        add(&self.errors, 1);
        if let Ok(mut first) = self.first_error.lock()
            && first.is_none()
        {
            *first = Some(e.to_string());
        }
    }
}

/// What every core's connection tasks share.
struct Shared {
    pages: Pages,
    http: http1::Builder,
    idle_timeout: Duration,
}

/// The service: its options and what its connection tasks share.
struct Hyper<'o> {
    options: &'o Options,
    shared: Arc<Shared>,
}

/// A connection's stream with the time of its last read or write (for the idle timeout).
struct Watched<'c> {
    stream: AsyncStream<'c>,
    last: Rc<Cell<Instant>>,
}

impl tokio::io::AsyncRead for Watched<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let done = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.last.set(Instant::now());
        }
        done
    }
}

impl tokio::io::AsyncWrite for Watched<'_> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let done = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(done, Poll::Ready(Ok(n)) if n > 0) {
            self.last.set(Instant::now());
        }
        done
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Runs `future` until it completes (`Some`), or until `idle` passed since `last` (`None`).
async fn idle_limited<F: Future>(
    core: &AsyncCore<'_>,
    future: F,
    last: &Cell<Instant>,
    idle: Duration,
) -> Option<F::Output> {
    let mut future = pin!(future);
    let mut sleep = core.sleep_until(last.get() + idle);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        while Pin::new(&mut sleep).poll(cx).is_ready() {
            let due = last.get() + idle;
            if Instant::now() >= due {
                return Poll::Ready(None);
            }
            sleep = core.sleep_until(due);
        }
        Poll::Pending
    })
    .await
}

/// One connection, on its own task: hyper's HTTP/1 server over the stream, until the client
/// closes it, it fails, or it is idle too long.
async fn connection(core: AsyncCore<'_>, stream: AsyncStream<'_>, shared: Arc<Shared>, live: Arc<Counts>) {
    let last = Rc::new(Cell::new(Instant::now()));
    let io = TokioIo::new(Watched { stream, last: Rc::clone(&last) });
    let service = service_fn(|req: Request<Incoming>| {
        let response = shared.pages.respond(req.method(), req.uri().path());
        live.count(&response);
        std::future::ready(Ok::<_, Infallible>(response))
    });
    let served = shared.http.serve_connection(io, service);
    match idle_limited(&core, served, &last, shared.idle_timeout).await {
        Some(Ok(())) => {}
        // The runtime stopping fails what is still open: not the connection's error.
        Some(Err(_)) if core.is_stopping() => {}
        Some(Err(e)) if e.is_timeout() => add(&live.header_timeouts, 1),
        Some(Err(e)) => live.error(&e),
        None => add(&live.idle_timeouts, 1),
    }
}

impl Service for Hyper<'_> {
    type Live = Live;
    type Protocol = client::HyperProtocol;

    const NAME: &'static str = "hyper";

    fn setup(&self, runtime: &str) -> String {
        format!("hyper 1.x HTTP/1.1 on {runtime}, port {}", self.options.port)
    }

    fn client_line(&self, plan: &Plan) -> String {
        format!("{} client connections, {}", plan.conns, plan.length("request"))
    }

    fn protocol(&self, host: Ipv4Addr) -> Result<Self::Protocol, String> {
        Ok(client::HyperProtocol::new(host, self.options.max_body))
    }

    fn every_second(&self, elapsed: Duration, _snapshot: &Snapshot, live: &[Live]) {
        if self.options.progress {
            let sum = |f: fn(&Counts) -> u64| live.iter().map(|l| f(&l.counts)).sum::<u64>();
            println!(
                "[{:6.1} s] {} requests, {} connections, {} errors, {} header and {} idle timeouts",
                elapsed.as_secs_f64(),
                sum(Counts::requests),
                sum(|c| get(&c.conns)),
                sum(|c| get(&c.errors)),
                sum(|c| get(&c.header_timeouts)),
                sum(|c| get(&c.idle_timeouts)),
            );
        }
    }
}

impl AsyncService for Hyper<'_> {
    /// The service of one core: accept, and a task per connection, until the runtime stops.
    async fn serve(&self, core: AsyncCore<'_>, live: &Live) -> io::Result<()> {
        let cpu_start = thread_cpu();
        let counts = &live.counts;
        let listener = core.listen(self.options.port)?;
        core.spawn(timer::drive(core.clone())).detach();
        let result = loop {
            let stream = match listener.accept().await {
                Ok((stream, _peer)) => stream,
                Err(e) if Stopping::is(&e) => break Ok(()),
                Err(e) => break Err(e),
            };
            add(&counts.conns, 1);
            core.spawn(connection(core.clone(), stream, Arc::clone(&self.shared), Arc::clone(counts)))
                .detach();
        };
        if let Some(cpu) = thread_cpu().zip(cpu_start).map(|(end, start)| end.saturating_sub(start)) {
            let _ = counts.cpu.set(cpu);
        }
        result
    }
}

/// Runs the server as `options` say until it is done (the model's client finished), `stop` is
/// set (Ctrl-C), or its duration is up; returns the summary.
///
/// # Errors
///
/// A message saying what failed: contradictory options, a backend that would not open, a client
/// connection that failed or got a wrong byte (with the cores' errors when they failed too).
pub fn run(options: &Options, stop: &AtomicBool) -> Result<Report, String> {
    cli::check(options)?;
    let runtime = cli::build(options.serve.builder())?;
    let plan = Plan::new(&options.serve, options.conns, options.requests, options.seed, options.progress);
    let mut http = http1::Builder::new();
    http.keep_alive(true).timer(timer::CoreTimer).header_read_timeout(options.header_timeout);
    let shared = Arc::new(Shared { pages: Pages::new(), http, idle_timeout: options.idle_timeout });
    let hyper = Hyper { options, shared };
    let served = service::serve_async(&hyper, options.port, plan, runtime, stop)?;
    Ok(served.report(|i, l: &Live| l.counts.report(i), ()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("/"), Some(Page::Index));
        assert_eq!(route("/bytes/0"), Some(Page::Bytes(0)));
        assert_eq!(route("/bytes/1048576"), Some(Page::Bytes(MAX_BYTES)));
        for bad in ["/bytes/1048577", "/bytes/", "/bytes/+1", "/bytes/1x", "/bytes/99999999999999", "/x", ""]
        {
            assert_eq!(route(bad), None, "{bad}");
        }
        assert_eq!((pattern(0), pattern(250), pattern(251), pattern(252)), (0, 250, 0, 1));
    }

    #[test]
    fn options_parse() {
        let parse =
            |args: &[&str]| Options::try_parse_args(std::iter::once("hyper").chain(args.iter().copied()));
        let o = parse(&["--cores", "2", "--conns", "5", "--requests", "7", "--max-body", "1000"]).unwrap();
        assert_eq!((o.serve.cores, o.conns, o.requests, o.max_body), (Some(2), 5, 7, 1000));
        let d = Options::default();
        assert_eq!(
            (d.port, d.idle_timeout, d.max_body, d.progress),
            (80, DEFAULT_IDLE_TIMEOUT, MAX_BYTES, true)
        );
        for (args, option) in [
            (&["--max-body", "0"][..], "--max-body"),
            (&["--max-body", "1048577"], "--max-body"),
            (&["--idle-timeout", "0"], "--idle-timeout"),
            (&["--header-timeout", "x"], "--header-timeout"),
            (&["--tap", "a", "--cores", "2"], "--tap"),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(option), "{args:?}: {e}");
        }
    }

    /// The example's run on the model with its in-process client: every response checked byte
    /// for byte, on 2 cores, every buffer back.
    #[test]
    fn model_serves_every_byte() {
        let options = Options {
            serve: ServeArgs { cores: Some(2), ..ServeArgs::default() },
            conns: 8,
            requests: 12,
            max_body: 300_000,
            progress: false,
            ..Options::default()
        };
        let report = run(&options, &AtomicBool::new(false)).unwrap();
        let client = report.client.as_ref().unwrap();
        assert_eq!((client.completed, client.responses), (8, 96), "{report}");
        assert_eq!(report.requests(), 96, "{report}");
        assert_eq!(report.cores.iter().map(|c| c.not_found).sum::<u64>(), 2, "{report}");
        assert!(client.bytes > 1_000_000, "{report}");
        assert_eq!(report.cores.iter().map(|c| c.conns).sum::<u64>(), 8, "{report}");
        assert_eq!((report.errors(), report.cores.iter().map(|c| c.idle_timeouts).sum::<u64>()), (0, 0));
        assert!(report.runtime.errors.is_empty(), "{report}");
        for (name, audit) in &report.runtime.buffers {
            assert_eq!(audit.outstanding, 0, "{name}: {report}");
        }
        let text = report.to_string();
        assert!(text.contains("96 responses checked") && text.contains("core 1:"), "{text}");
    }
}
