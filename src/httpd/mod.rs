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
//! At start every file's whole response (status line, headers, body), for GET and for HEAD, in
//! three variants (no `Connection` header, `Connection: close`, `Connection: keep-alive` for
//! HTTP/1.0), is built once and cut into TCP payload segments for the
//! segment sizes connections will use ([`SEGMENT_SIZES`]: 1448 bytes, an MSS of 1460 less the
//! timestamps option; and 1460), with the one's-complement sum of every segment precomputed
//! ([`PreparedSegments`]). Serving a request queues the prepared response on the connection by
//! reference ([`Stack::send_prepared`](tcp_lib::stack::Stack::send_prepared), through the core's
//! [`Interface::with_stack`](tcp_lib::socket::Interface::with_stack)): no byte of it is copied
//! into the connection's send ring, and a segment that is one of the prepared cuts gets its
//! checksum from the table. Each core also keeps copies of the responses in pool buffers of its
//! pool, each [`POOL_CUT`]-byte segment in `--pool-copies` buffers ([`Content::in_pool`]; the
//! runtime's pool grows by what that takes,
//! [`Builder::service_buffers`](netchannel_runtime::Builder::service_buffers)), and a segment that
//! is one of those buffers goes to the device by reference: the stack writes its Ethernet, IP and
//! TCP headers into the headroom of a copy with no frame in flight and hands that buffer over, with
//! no copy of the payload (Sandstorm's zero-copy send). One frame of a buffer is in flight at a
//! time, and a driver lets go of sent frames in batches (the 82599 reclaims its TX ring lazily; a
//! TAP at once, as it writes): when every copy is still at the device (other connections sending
//! the same response, or the previous one) the segment is copied into a fresh buffer instead, and
//! the summary counts both. On the 82599 model with 32 connections fetching one 24 KiB file, 1
//! copy sent 4% of the segments by reference, 4 copies 14%, 16 copies 59%, 64 copies all.
//! Per-core copies, not one shared by every core: the cores never wait on each other's frames, and
//! each core's copy lives exactly as long as its service. `--copy` serves the same bytes through
//! the stream's `write` ([`Stack::send`](tcp_lib::stack::Stack::send)) instead: copied into the send ring, from it into the
//! stack's scratch buffer, from there into the frame, and summed on the way.
//!
//! # HTTP
//!
//! GET and HEAD; other methods get 405. A request (line, headers and any `Content-Length` body)
//! is at most [`MAX_REQUEST`] bytes; longer, or malformed (a bad request line, a header line
//! without a colon, `Transfer-Encoding`, a bad `Content-Length`, a version other than HTTP/1.0 or
//! 1.1, a bare CR), it gets 400 and the connection is closed. Lines end in CRLF or a lone LF (RFC
//! 9112 §2.2). Unknown paths get 404. Connections persist (RFC 9112 §9.3): HTTP/1.1 unless the
//! request says `Connection: close`, HTTP/1.0 when it says `Connection: keep-alive` (the response
//! then says so too); pipelined requests are answered in order. `/` serves `/index.html` when
//! there is one. No `Date` header. A connection closes lingering (as nginx does): our FIN follows
//! the last response, and what the peer still sends is read and dropped until its FIN (at most
//! 5 s; 1 s for a connection cut off or refused), so that closing with unread input does not reset
//! the connection before the peer has read the response.
//!
//! # Hostile clients: timeouts and the connection cap
//!
//! A connection that holds resources without finishing a request is cut off (nginx's
//! `client_header_timeout` and `keepalive_timeout`, whose defaults are 60 s and 75 s; ours are
//! shorter, as a static server's requests are one small segment):
//!
//! * `--header-timeout` (default 10 s): from accept, or on a kept-alive connection from the end of
//!   the previous response when part of the next request was already there, else from its first
//!   byte, to a complete request head. Then a connection that sent part of a request gets
//!   `408 Request Timeout` and is closed; one that sent nothing is closed.
//! * `--idle-timeout` (default 60 s): a kept-alive connection that sent no byte of its next request
//!   this long after the previous response is closed. A response still being sent (bytes in the
//!   stack's send buffer, or `--copy`'s queue) is activity: the wait starts again.
//!
//! Deadlines cost nothing per connection per round: a connection waiting for input is quiet (not
//! stepped until the stack says it is readable, which the loop asks only in rounds where a segment
//! arrived), and every 100 ms the event loop compares the quiet connections' deadlines with the
//! time (one comparison each), so a deadline fires at most 100 ms late. A slowloris holding
//! 10,000 partial heads costs the core 10,000 comparisons every 100 ms and, while it sends
//! nothing, nothing per round.
//!
//! `--max-conns` (default 10,000 per core) caps the connections a core serves at once. One
//! accepted over it gets `503 Service Unavailable` with `Retry-After: 1` and `Connection: close`
//! (a prepared response) at once, and is closed after a 1 s linger in which what it sends is read
//! and dropped (no input kept for it; beyond 1024 such at once, closed at once). What a served
//! connection can hold is bounded: its read-ahead (at most [`MAX_REQUEST`] + 1 bytes, given back
//! when it goes idle) and the stack's receive and send buffers (64 KiB each at most; a slowloris
//! with a partial head grows the process by about 3.4 KiB, measured in a debug build). Not bounded in time: a client that pipelines
//! requests and never reads the responses (the stack's zero-window probes keep it alive); nginx's
//! `send_timeout` would be the next step.
//!
//! Counters: [`CoreReport::header_timeouts`], [`CoreReport::idle_timeouts`] and
//! [`CoreReport::refused`], in the summary's core lines and the progress line.
//!
//! # The service
//!
//! Every core listens on [`Options::port`] and serves its connections from one non-blocking event
//! loop: [`Core::poll_wait`] (1 ms at most), accept until `WouldBlock` (Affinity-Accept: this
//! core's connections first, stolen ones when it has none; over `--max-conns` refused), then for
//! each connection that has input or work waiting (or, every 100 ms, whose deadline passed) send
//! what waits (`--copy`), answer every complete request buffered, read more, cut it off when its
//! deadline passed; it returns when the runtime stops. With `--copy` at most 64 responses wait per connection before it stops reading
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
mod report;

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;
use clap::builder::TypedValueParser as _;
use netchannel_runtime::{Core, Interface, Snapshot, Stream};
use tcp_lib::stack::{Error as StackError, PreparedSegments};

pub use client::ClientReport;
#[cfg(feature = "async")]
pub(crate) use client::{send_request, take_response};
pub use content::{
    Content, DEMO_SIZES, InPool, MAX_POOL_BUFFERS, POOL_CUT, SEGMENT_SIZES, demo_bytes, demo_name,
};
pub use http::{MAX_REQUEST, Method, Parsed, Request, parse};
#[cfg(feature = "async")]
pub(crate) use report::write_client_and_cpu;
pub use report::{CoreReport, Report, Served};

use crate::cli::{self, ServeArgs, Validate};
use crate::client::Plan;
use crate::service::{self, Counters, Handler, Step, event_loop};
use crate::util::{add, get, thread_cpu};

/// The HTTP port.
pub const DEFAULT_PORT: u16 = 80;
/// Bytes a connection reads at a time.
const CHUNK: usize = 16 * 1024;
/// Responses queued per connection in `--copy` mode before it stops reading requests.
const MAX_PENDING: usize = 64;
/// How long a closing connection reads and drops the peer's input, waiting for its FIN.
const LINGER: Duration = Duration::from_secs(5);
/// The same for a connection refused over the cap or cut off by a timeout: its peer is slow or
/// hostile, and what it holds is bounded by how briefly it is held.
const SHORT_LINGER: Duration = Duration::from_secs(1);
/// Refused connections (503) one core holds at once, lingering; one refused beyond it is closed as
/// soon as its 503 is queued and what it sent so far is read.
const MAX_REFUSING: usize = 1024;
/// Connections each core serves at once by default (`--max-conns`).
pub const DEFAULT_MAX_CONNS: usize = 10_000;
/// The default `--header-timeout`.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The default `--pool-copies`.
pub const DEFAULT_POOL_COPIES: usize = 4;
/// The default `--idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

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
    /// written to a temporary directory removed at exit, or to --demo-dir; the directory is
    /// printed on stderr at start)
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,

    /// Write the generated demo files to PATH (created if missing, kept at exit) instead of a
    /// temporary directory
    #[arg(long, value_name = "PATH", conflicts_with = "dir")]
    pub demo_dir: Option<PathBuf>,

    /// Seconds from accept, or on a kept-alive connection from the next request's first byte, to
    /// a complete request head; then 408 Request Timeout (nothing if no byte came) and close
    #[arg(long, value_name = "S", default_value = "10", value_parser = cli::seconds)]
    pub header_timeout: Duration,

    /// Seconds a kept-alive connection may wait for the first byte of its next request (from the
    /// end of the previous response); then it is closed
    #[arg(long, value_name = "S", default_value = "60", value_parser = cli::seconds)]
    pub idle_timeout: Duration,

    /// Connections each core serves at once; one accepted over it gets 503 Service Unavailable
    /// (Retry-After: 1, Connection: close) and is closed
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNS, value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| n as usize))]
    pub max_conns: usize,

    /// Send responses through the stream's write (Stack::send: copied) instead of by reference
    /// (Stack::send_prepared)
    #[arg(long)]
    pub copy: bool,

    /// Pool buffers each 1448-byte segment of the responses is copied into, per core, for sending
    /// by reference: a segment goes by reference from a copy whose previous frame the device has
    /// let go of, and is copied when all are still in flight (0: none, every segment copied)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_POOL_COPIES, value_parser = clap::value_parser!(u16).range(0..=256).map(usize::from))]
    pub pool_copies: usize,

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

/// The content `options` name: `--dir`, or the demo set, written to `--demo-dir` or to a
/// temporary directory removed when the content is dropped ([`Content::demo_written`]); where is
/// printed on stderr (one line, `--quiet` or not).
///
/// # Errors
///
/// When the directory cannot be read, or holds more than 1 GiB; when the demo files cannot be
/// written.
pub fn content(options: &Options) -> Result<Content, String> {
    match &options.dir {
        Some(dir) => Content::load(dir),
        None => {
            let (content, dir) = Content::demo_written(options.demo_dir.as_deref())
                .map_err(|e| format!("the demo files: {e} (--demo-dir PATH names another directory)"))?;
            let fate = if options.demo_dir.is_some() { "kept at exit" } else { "removed at exit" };
            eprintln!("httpd: demo files in {} ({fate})", dir.display());
            Ok(content)
        }
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
    header_timeouts: AtomicU64,
    idle_timeouts: AtomicU64,
    refused: AtomicU64,
    cpu: OnceLock<Duration>,
    in_pool: OnceLock<InPool>,
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
            header_timeouts: get(&self.header_timeouts),
            idle_timeouts: get(&self.idle_timeouts),
            refused: get(&self.refused),
            cpu: self.cpu.get().copied(),
            in_pool: self.in_pool.get().copied().unwrap_or_default(),
        }
    }
}

/// httpd on the runtime, for [`run`]: what every core's service shares.
struct Service<'a> {
    options: &'a Options,
    content: &'a Content,
}

/// What a connection's deadline is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// A complete request head (`--header-timeout`): from accept, or on a kept-alive connection
    /// from the end of the previous response when bytes of the next request were already there,
    /// else from its first byte.
    Head,
    /// The first byte of the next request on a kept-alive connection (`--idle-timeout`), from the
    /// end of the previous response.
    Idle,
    /// The peer's FIN after ours (lingering close).
    Linger,
}

/// A connection being served.
struct Conn {
    /// Received bytes not yet answered (at most one request's worth is read ahead).
    input: Vec<u8>,
    /// `--copy`: responses not yet all in the send ring, and how much of the first is.
    out: VecDeque<Arc<PreparedSegments>>,
    out_sent: usize,
    /// Respond no more; close once `out` is sent.
    closing: bool,
    /// What `deadline` is for.
    wait: Wait,
    /// When the connection is cut off (or, lingering, closed) unless something happens first.
    deadline: Instant,
    /// Responses wait for room in the stack (or `MAX_PENDING` in `--copy` mode): step it every
    /// round.
    blocked: bool,
    /// Refused over the cap (503): not counted among the connections served.
    refused: bool,
}

impl Conn {
    /// A connection accepted `now`: a request head is due within `header`.
    fn new(now: Instant, header: Duration) -> Self {
        Self {
            input: Vec::new(),
            out: VecDeque::new(),
            out_sent: 0,
            closing: false,
            wait: Wait::Head,
            deadline: now + header,
            blocked: false,
            refused: false,
        }
    }

    fn is_lingering(&self) -> bool {
        self.wait == Wait::Linger
    }
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

/// What [`queue`] did with a response.
enum Queued {
    /// Queued (in the stack, or on `out` for `--copy`).
    Yes,
    /// No room in the stack now.
    WouldBlock,
    /// The connection failed.
    Failed,
}

/// Queues `response` on the connection: by reference in the stack, or on `out` with `--copy`.
fn queue(
    iface: &Interface<'_>,
    stream: &Stream<'_>,
    c: &mut Conn,
    response: &Arc<PreparedSegments>,
    copy: bool,
) -> Queued {
    if copy {
        c.out.push_back(Arc::clone(response));
        return Queued::Yes;
    }
    match iface.with_stack(|s| s.send_prepared(stream.id(), response)) {
        Ok(Ok(())) => Queued::Yes,
        Ok(Err(StackError::WouldBlock)) => Queued::WouldBlock,
        _ => Queued::Failed,
    }
}

/// Serves connection `c`: sends what waits (`--copy`), answers the complete requests buffered,
/// reads more, cuts it off when its deadline passed, and closes it lingering once it is done.
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
    let options = svc.options;
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
            // read and dropped until its FIN (or the deadline).
            if !c.is_lingering() {
                let _ = stream.shutdown(Shutdown::Write);
                c.input = Vec::new();
                c.deadline = match c.wait {
                    _ if c.refused => c.deadline, // set when it was refused
                    Wait::Head | Wait::Idle if now >= c.deadline => now + SHORT_LINGER, // cut off
                    _ => now + LINGER,
                };
                c.wait = Wait::Linger;
            }
            loop {
                match (&*stream).read(buf) {
                    Ok(n) if n > 0 => {}
                    Err(e) if would_block(&e) && now < c.deadline => return Step::Open,
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
            match queue(iface, stream, c, response, options.copy) {
                Queued::Yes => copied |= options.copy,
                Queued::WouldBlock => {
                    blocked = true;
                    break;
                }
                Queued::Failed => return Step::Failed,
            }
            add(&live.responses[status], 1);
            add(&live.bytes, response.len() as u64);
            c.input.drain(..len);
            c.closing = close;
            // The next request's head is due from now if part of it is here, else its first byte.
            (c.wait, c.deadline) = if c.input.is_empty() {
                if c.input.capacity() > 1024 {
                    c.input = Vec::new(); // an idle connection holds no buffer
                }
                (Wait::Idle, now + options.idle_timeout)
            } else {
                (Wait::Head, now + options.header_timeout)
            };
        }
        c.blocked = blocked;
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
                if c.wait == Wait::Idle {
                    (c.wait, c.deadline) = (Wait::Head, now + options.header_timeout);
                }
                c.input.extend_from_slice(&buf[..n]);
            }
            Err(e) if would_block(&e) => {
                if now < c.deadline {
                    return Step::Open;
                }
                if let Some(step) = expire(iface, stream, c, svc, live, now) {
                    return step;
                }
                // 408 queued: close after it.
            }
            Err(_) => return Step::Failed,
        }
    }
}

/// Connection `c`'s deadline passed with nothing to read: a response still on its way starts the
/// wait again (`Some(Open)`); a partial request head gets 408 and closes (`None`: the caller
/// sends it and lingers); a connection that sent nothing of its next request closes
/// (`Some(Closed)`).
fn expire(
    iface: &Interface<'_>,
    stream: &Stream<'_>,
    c: &mut Conn,
    svc: &Service<'_>,
    live: &Live,
    now: Instant,
) -> Option<Step> {
    let options = svc.options;
    let unsent = iface.with_stack(|s| s.queues(stream.id()).map_or(0, |(_, send)| send)).unwrap_or(0);
    let timeout = if c.wait == Wait::Idle { options.idle_timeout } else { options.header_timeout };
    if unsent > 0 || !c.out.is_empty() {
        c.deadline = now + timeout;
        return Some(Step::Open);
    }
    if c.wait == Wait::Idle {
        add(&live.idle_timeouts, 1);
        return Some(Step::Closed);
    }
    add(&live.header_timeouts, 1);
    if c.input.is_empty() {
        return Some(Step::Closed);
    }
    let response = svc.content.request_timeout();
    match queue(iface, stream, c, response, options.copy) {
        Queued::Yes => {
            add(&live.bytes, response.len() as u64);
            c.closing = true;
            None
        }
        Queued::WouldBlock => Some(Step::Closed),
        Queued::Failed => Some(Step::Failed),
    }
}

/// The HTTP service of one core: an event loop over its listener and its connections, until the
/// runtime stops.
fn serve(core: &Core<'_>, svc: &Service<'_>, live: &Live) -> io::Result<()> {
    // The core's copy of the responses in its pool, sent by reference (dropped when the service
    // ends; connections still holding a response keep its buffers until the stack goes).
    let copies = svc.options.pool_copies;
    let pooled = if svc.options.copy || copies == 0 {
        None
    } else {
        let budget = svc.content.pool_buffers(copies).min(MAX_POOL_BUFFERS);
        let (content, done) =
            core.interface().with_cache(|cache| svc.content.in_pool(cache, budget, copies))?;
        let _ = live.in_pool.set(done);
        Some(content)
    };
    let svc = &Service { options: svc.options, content: pooled.as_ref().unwrap_or(svc.content) };
    let cpu_start = thread_cpu();
    let counters = Counters {
        accepted: &live.conns,
        closed: None,
        failed: &live.failed,
        open_at_exit: &live.open_at_exit,
    };
    let mut serving =
        Serving { iface: core.interface(), svc, live, buf: vec![0u8; CHUNK], served: 0, refusing: 0 };
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
    /// Connections held that count against `--max-conns` (all but the refused).
    served: usize,
    /// Refused connections held (lingering after their 503), at most [`MAX_REFUSING`].
    refusing: usize,
}

impl Handler for Serving<'_, '_> {
    type Conn = Conn;

    /// Over `--max-conns`: the connection gets 503 at once and is closed after a short linger (at
    /// once beyond [`MAX_REFUSING`]); no input is kept for it.
    fn accept(&mut self, stream: &Stream<'_>) -> io::Result<Conn> {
        stream.set_nonblocking(true)?;
        let now = Instant::now();
        let options = self.svc.options;
        let mut c = Conn::new(now, options.header_timeout);
        if self.served < options.max_conns {
            self.served += 1;
            return Ok(c);
        }
        add(&self.live.refused, 1);
        let response = self.svc.content.unavailable();
        if let Queued::Yes = queue(self.iface, stream, &mut c, response, options.copy) {
            add(&self.live.bytes, response.len() as u64);
        }
        c.refused = true;
        c.closing = true;
        c.deadline = if self.refusing < MAX_REFUSING { now + SHORT_LINGER } else { now };
        self.refusing += 1;
        Ok(c)
    }

    /// Nothing to do until input comes or the deadline passes: waiting for a request (a partial
    /// head included), or lingering.
    fn is_quiet(&self, c: &Conn) -> bool {
        !c.blocked && c.out.is_empty() && (!c.closing || c.is_lingering())
    }

    fn expired(&self, c: &Conn, now: Instant) -> bool {
        now >= c.deadline
    }

    fn step(&mut self, stream: &mut Stream<'_>, c: &mut Conn, now: Instant) -> Step {
        let step = serve_conn(self.iface, stream, c, &mut self.buf, self.svc, self.live, now);
        if !matches!(step, Step::Open) {
            if c.refused {
                self.refusing -= 1;
            } else {
                self.served -= 1;
            }
        }
        step
    }
}

impl service::BlockingService for Service<'_> {
    fn serve(&self, core: &mut Core<'_>, live: &Live) -> io::Result<()> {
        serve(core, self, live)
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

    fn protocol(&self, host: Ipv4Addr) -> Result<client::HttpProtocol<'a>, String> {
        client::HttpProtocol::new(host, self.content, self.options)
    }

    /// The progress line (servers on TAP, AF_XDP and PCI: the clients are elsewhere).
    fn every_second(&self, _elapsed: Duration, snapshot: &Snapshot, live: &[Live]) {
        if self.options.progress {
            println!(
                "[{:6.1} s] {} requests, {} connections ({} timed out, {} refused), {} frames in, {} dropped",
                snapshot.elapsed.as_secs_f64(),
                live.iter().map(Live::requests).sum::<u64>(),
                live.iter().map(|l| get(&l.conns)).sum::<u64>(),
                live.iter().map(|l| get(&l.header_timeouts) + get(&l.idle_timeouts)).sum::<u64>(),
                live.iter().map(|l| get(&l.refused)).sum::<u64>(),
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
    let builder = options.serve.builder();
    // Room in the pool for each core's copy of the responses, sent by reference.
    let per_core =
        if options.copy { 0 } else { content.pool_buffers(options.pool_copies).min(MAX_POOL_BUFFERS) };
    let runtime = cli::build(builder.service_buffers(per_core))?;
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
        assert_eq!(parse(&["--pool-copies", "16"]).unwrap().pool_copies, 16);
        assert!(parse(&["--pool-copies", "257"]).unwrap_err().to_string().contains("--pool-copies"));
        let o = parse(&["--dir=/srv", "--requests=7", "--port=8080", "--seed=9", "--quiet"]).unwrap();
        assert_eq!(o.dir, Some(PathBuf::from("/srv")));
        assert_eq!((o.requests, o.port, o.seed, o.progress), (7, 8080, 9, false));
        let t =
            parse(&["--header-timeout=0.5", "--idle-timeout", "2", "--max-conns", "3", "--demo-dir", "/d"])
                .unwrap();
        assert_eq!(
            (t.header_timeout, t.idle_timeout, t.max_conns, t.demo_dir),
            (Duration::from_millis(500), Duration::from_secs(2), 3, Some(PathBuf::from("/d")))
        );
        let d = Options::default();
        assert_eq!(
            (d.port, d.conns, d.requests, d.size, d.copy, d.progress, d.pool_copies),
            (80, 32, 200, None, false, true, DEFAULT_POOL_COPIES)
        );
        assert!(d.serve.is_model() && d.serve.cores.is_none());
        assert_eq!(
            (d.header_timeout, d.idle_timeout, d.max_conns, d.demo_dir),
            (DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNS, None)
        );
        for (args, option) in [
            (&["--conns", "0"][..], "--conns"),
            (&["--requests", "0"], "--requests"),
            (&["--port", "0"], "--port"),
            (&["--header-timeout", "0"], "--header-timeout"),
            (&["--idle-timeout", "x"], "--idle-timeout"),
            (&["--max-conns", "0"], "--max-conns"),
            (&["--dir", "a", "--demo-dir", "b"], "--demo-dir"),
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
        // Sent by reference from each core's copy of the responses in the pool, every buffer back.
        let (by_reference, copied) = report.by_reference();
        assert!(by_reference * 10 > prepared * 6 && by_reference + copied <= prepared, "{report}");
        for c in &report.cores {
            let p = c.in_pool;
            assert!(p.pooled == p.responses && p.responses > 30 && p.error.is_none(), "{p:?}");
        }
    }

    #[test]
    fn model_serves_every_byte_copied() {
        let report = model_run(2, Placement::Same, true);
        assert_eq!(report.prepared_segments(), (0, 0), "{report}");
        assert_eq!(report.by_reference(), (0, 0), "{report}");
        assert!(report.cores.iter().all(|c| c.in_pool == InPool::default()), "{report}");
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
