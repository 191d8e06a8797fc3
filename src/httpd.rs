//! A Sandstorm-style static HTTP/1.1 server (seeds/003, DESIGN.md §4) behind
//! `cargo run --release --example httpd`: per-core tcp-lib stacks behind net channels, as in
//! [`crate::echo`], serving a directory loaded into memory at start.
//!
//! # Pre-segmented content
//!
//! At start every file's whole response (status line, headers, body), for GET and for HEAD, with
//! and without `Connection: close`, is built once and cut into TCP payload segments for the
//! segment sizes connections will use (1448 bytes: an MSS of 1460 less the timestamps option;
//! and 1460), with the one's-complement sum of every segment precomputed
//! ([`PreparedSegments`]). Serving a request queues the prepared response on the connection by
//! reference ([`Stack::send_prepared`]): no byte of it is copied into the connection's send ring,
//! and a segment that is one of the prepared cuts gets its checksum from the table. The one copy
//! left is from the prepared bytes into the frame's pool buffer (a pool buffer belongs to one frame
//! and goes to the device; there is no shared, reference-counted TX buffer to point a descriptor
//! at). `--copy` serves the same bytes through [`Stack::send`] instead: copied into the send ring,
//! from it into the stack's scratch buffer, from there into the frame, and summed on the way.
//!
//! # HTTP
//!
//! GET and HEAD; other methods get 405. A request (line, headers and any `Content-Length` body)
//! is at most [`MAX_REQUEST`] bytes; longer, or malformed (a bad request line, a header line
//! without a colon, `Transfer-Encoding`, a bad `Content-Length`, a version other than HTTP/1.0 or
//! 1.1), it gets 400 and the connection is closed. Unknown paths get 404. Connections are kept
//! alive (HTTP/1.1) unless the request says `Connection: close` or is HTTP/1.0; pipelined
//! requests are answered in order. `/` serves `/index.html` when there is one. No `Date` header.
//!
//! # Backends
//!
//! As in [`crate::echo`]: the 82599 model with an in-process client (the default; N connections
//! fetch random files and check every byte), `--tap NAME` (the kernel's clients: curl, wrk,
//! python), `--pci ADDR` (a real 82599 over VFIO). Each core runs a channelizer and a stack on one
//! thread; connections are served on the core whose queue their SYN arrived on (no stealing:
//! flow groups stay where Flow Director put them), their exact signatures registered to it.

use crate::echo::{cidr, lock, number, percentile};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ixgbe_vfio::driver::{Config as NicConfig, Ixgbe};
use ixgbe_vfio::sim::{Model, SimConfig, Wire};
use netchannel::channelizer::{Channelizer, ChannelizerStats, ConsumerId, SignatureRegistry};
use netchannel::dev::{NetDevice, PacketBatch, Pair, Tap};
use netchannel::pool::{Audit, HugePages, PacketRx, PacketTx, Pool, PoolCache};
use netchannel::rcu::Qsbr;
use netchannel::registry::Registration;
use netchannel::signature::{Proto, Signature};
use tcp_lib::stack::{
    AcceptHook, Config as StackConfig, Error as StackError, ListenerConfig, ListenerId, PreparedSegments,
    Stack, StackStats, StreamId,
};
use tcp_lib::tcp::State;
use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};

/// The HTTP port.
pub const DEFAULT_PORT: u16 = 80;
/// The server's address on the model backend (and the default for `--tap` and `--pci`).
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The in-process client's address on the model backend.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The most bytes of one request (line, headers, body).
pub const MAX_REQUEST: usize = 8 * 1024;
/// The payload segment sizes responses are cut for: an MSS of 1460 with and without the
/// timestamps option.
pub const SEGMENT_SIZES: [usize; 2] = [1448, 1460];
/// The demo set's file sizes (when no `--dir` is given).
pub const DEMO_SIZES: [usize; 9] =
    [1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10];
/// The most bytes loaded from a directory.
const MAX_CONTENT: u64 = 1 << 30;
const BURST: usize = 32;
const CHANNEL: usize = 1024;
const BACKLOG: usize = 4096;
const STALL: Duration = Duration::from_secs(10);
const SWEEP_EVERY: Duration = Duration::from_millis(50);
/// Responses queued per connection in `--copy` mode before it stops reading requests.
const MAX_PENDING: usize = 64;
/// How long a closing connection reads and drops the peer's input, waiting for its FIN.
const LINGER: Duration = Duration::from_secs(5);

// -----------------------------------------------------------------------------------------------
// Content.

/// One resource's responses, prepared: `[keep-alive, close]` for GET and for HEAD.
#[derive(Debug)]
struct Responses {
    get: [Arc<PreparedSegments>; 2],
    head: [Arc<PreparedSegments>; 2],
}

impl Responses {
    fn new(status: &str, content_type: &str, body: &[u8], extra: &str) -> Self {
        let make = |with_body: bool, close: bool| {
            let mut r = format!(
                "HTTP/1.1 {status}\r\nServer: netchannels-httpd\r\nContent-Type: {content_type}\r\nContent-Length: \
                 {}\r\n{extra}{}\r\n",
                body.len(),
                if close { "Connection: close\r\n" } else { "" }
            )
            .into_bytes();
            if with_body {
                r.extend_from_slice(body);
            }
            Arc::new(PreparedSegments::new(r, &SEGMENT_SIZES))
        };
        Self { get: [make(true, false), make(true, true)], head: [make(false, false), make(false, true)] }
    }

    fn pick(&self, method: Method, close: bool) -> &Arc<PreparedSegments> {
        let i = usize::from(close);
        if method == Method::Head { &self.head[i] } else { &self.get[i] }
    }
}

/// The files served, by path, with their prepared responses, and the error responses.
#[derive(Debug)]
pub struct Content {
    files: HashMap<String, (Arc<[u8]>, Responses)>,
    not_found: Responses,
    not_allowed: Responses,
    bad_request: Arc<PreparedSegments>,
    /// Where the files came from, in words.
    pub source: String,
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).as_deref() {
        Some("html" | "htm") => "text/html",
        Some("txt") => "text/plain",
        Some("css") => "text/css",
        Some("js") => "text/javascript",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

/// The demo file name for a size: `1k.bin` .. `256k.bin`.
#[must_use]
pub fn demo_name(size: usize) -> String {
    format!("{}k.bin", size >> 10)
}

/// The deterministic contents of a demo file.
#[must_use]
pub fn demo_bytes(size: usize) -> Vec<u8> {
    let mut rng = Rng::new(size as u64);
    (0..size).map(|_| rng.next().to_le_bytes()[5]).collect()
}

impl Content {
    /// The content from `files` (path, bytes); paths start with `/`.
    #[must_use]
    pub fn new(files: Vec<(String, Vec<u8>)>, source: String) -> Self {
        let files = files
            .into_iter()
            .map(|(path, bytes)| {
                let responses = Responses::new("200 OK", content_type(&path), &bytes, "");
                (path, (Arc::from(bytes), responses))
            })
            .collect();
        Self {
            files,
            not_found: Responses::new("404 Not Found", "text/plain", b"404 not found\n", ""),
            not_allowed: Responses::new(
                "405 Method Not Allowed",
                "text/plain",
                b"405 method not allowed\n",
                "Allow: GET, HEAD\r\n",
            ),
            bad_request: Responses::new("400 Bad Request", "text/plain", b"400 bad request\n", "").get[1]
                .clone(),
            source,
        }
    }

    /// The demo set: [`DEMO_SIZES`] as `/1k.bin` .. `/256k.bin` and an `/index.html` listing them.
    /// Also written to `dir` (when given and writable) so that another server can serve the same
    /// files.
    #[must_use]
    pub fn demo(dir: Option<&Path>) -> Self {
        let mut files: Vec<(String, Vec<u8>)> =
            DEMO_SIZES.iter().map(|&s| (format!("/{}", demo_name(s)), demo_bytes(s))).collect();
        let mut index = String::from("<html><body><h1>netchannels httpd</h1><ul>\n");
        for &s in &DEMO_SIZES {
            index.push_str(&format!("<li><a href=\"/{0}\">{0}</a></li>\n", demo_name(s)));
        }
        index.push_str("</ul></body></html>\n");
        files.push(("/index.html".into(), index.into_bytes()));
        let mut source = String::from("a generated demo set (1 KiB .. 256 KiB)");
        if let Some(dir) = dir
            && std::fs::create_dir_all(dir).is_ok()
            && files.iter().all(|(p, b)| std::fs::write(dir.join(&p[1..]), b).is_ok())
        {
            source.push_str(&format!(", also written to {}", dir.display()));
        }
        Self::new(files, source)
    }

    /// Every regular file under `dir` (recursively; symbolic links are not followed).
    ///
    /// # Errors
    /// A message when the directory cannot be read, or holds more than 1 GiB.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let mut files = Vec::new();
        let mut total = 0u64;
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            let entries = std::fs::read_dir(&d).map_err(|e| format!("cannot read {}: {e}", d.display()))?;
            for entry in entries {
                let entry = entry.map_err(|e| format!("cannot read {}: {e}", d.display()))?;
                let kind = entry.file_type().map_err(|e| e.to_string())?;
                let path = entry.path();
                if kind.is_dir() {
                    todo.push(path);
                } else if kind.is_file() {
                    let bytes =
                        std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    total += bytes.len() as u64;
                    if total > MAX_CONTENT {
                        return Err(format!("{} holds more than 1 GiB", dir.display()));
                    }
                    let rel = path.strip_prefix(dir).map_err(|e| e.to_string())?;
                    let name: Vec<String> =
                        rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                    files.push((format!("/{}", name.join("/")), bytes));
                }
            }
        }
        let n = files.len();
        Ok(Self::new(
            files,
            format!("{n} files from {} ({:.1} MiB)", dir.display(), total as f64 / 1048576.0),
        ))
    }

    /// The files' paths.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    /// A file's bytes.
    #[must_use]
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(|(b, _)| &b[..])
    }

    /// Files.
    #[must_use]
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// No files.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The prepared response to a parsed request.
    fn respond(&self, request: &Request<'_>) -> &Arc<PreparedSegments> {
        match request.method {
            Method::Get | Method::Head => {
                let path = request.path.split(['?', '#']).next().unwrap_or("");
                let path = if path == "/" { "/index.html" } else { path };
                self.files.get(path).map_or(&self.not_found, |(_, r)| r).pick(request.method, request.close)
            }
            Method::Other => self.not_allowed.pick(Method::Get, request.close),
        }
    }
}

// -----------------------------------------------------------------------------------------------
// Requests.

/// A request method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD.
    Head,
    /// Any other (valid token): 405.
    Other,
}

/// A parsed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// The method.
    pub method: Method,
    /// The request target as sent.
    pub path: &'a str,
    /// The connection closes after the response (`Connection: close`, or HTTP/1.0).
    pub close: bool,
    /// Bytes of the buffer the request took (line, headers, body).
    pub len: usize,
}

/// What [`parse`] found at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// Not a whole request yet (and not over the limit).
    Incomplete,
    /// A request.
    Request(Request<'a>),
    /// Malformed, or over `max` bytes: 400, then close.
    Bad,
}

fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

/// Parses the request at the start of `buf`; at most `max` bytes make one request.
#[must_use]
pub fn parse(buf: &[u8], max: usize) -> Parsed<'_> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() >= max { Parsed::Bad } else { Parsed::Incomplete };
    };
    let head_len = end + 4;
    if head_len > max {
        return Parsed::Bad;
    }
    let Ok(head) = std::str::from_utf8(&buf[..end]) else { return Parsed::Bad };
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Parsed::Bad;
    };
    if !is_token(method.as_bytes())
        || !(path.starts_with('/') || path == "*")
        || path.bytes().any(|c| c <= b' ' || c == 0x7f)
    {
        return Parsed::Bad;
    }
    let mut close = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Parsed::Bad,
    };
    let mut body = 0usize;
    for header in lines {
        let Some((name, value)) = header.split_once(':') else { return Parsed::Bad };
        if !is_token(name.as_bytes()) {
            return Parsed::Bad;
        }
        let value = value.trim_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("connection") {
            if value.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")) {
                close = true;
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            match value.parse::<usize>() {
                Ok(n) if n <= max => body = n,
                _ => return Parsed::Bad,
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Bad;
        }
    }
    let len = head_len + body;
    if len > max {
        return Parsed::Bad;
    }
    if buf.len() < len {
        return Parsed::Incomplete;
    }
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        _ => Method::Other,
    };
    Parsed::Request(Request { method, path, close, len })
}

// -----------------------------------------------------------------------------------------------
// Options.

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
    /// A real 82599 over VFIO.
    Pci {
        /// The PCI address.
        addr: String,
        /// The server's address and prefix.
        ip: Ipv4Cidr,
    },
}

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Where the server runs.
    pub backend: Backend,
    /// Cores (queue pairs, per-core stacks); TAP uses one.
    pub cores: u16,
    /// The directory to serve (`None`: the demo set).
    pub dir: Option<PathBuf>,
    /// Send responses with [`Stack::send`] (copies) instead of [`Stack::send_prepared`].
    pub copy: bool,
    /// Client connections (model backend), all open at once.
    pub conns: usize,
    /// Requests per client connection (model backend; ignored when `duration` is set).
    pub requests: u64,
    /// Only fetch files of these sizes (model client; `None`: every file).
    pub size: Option<usize>,
    /// Run the client (or serve, on TAP and PCI) this long.
    pub duration: Option<Duration>,
    /// The port.
    pub port: u16,
    /// Seeds the client's choices.
    pub seed: u64,
    /// A progress line every second.
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            backend: Backend::Model,
            cores: 1,
            dir: None,
            copy: false,
            conns: 32,
            requests: 200,
            size: None,
            duration: None,
            port: DEFAULT_PORT,
            seed: 1,
            progress: true,
        }
    }
}

/// The `--help` text.
pub const USAGE: &str = "\
usage: httpd [OPTIONS]

A static HTTP/1.1 server (GET, HEAD, keep-alive) on per-core tcp-lib stacks behind net channels,
serving responses pre-segmented at start with precomputed checksums (Sandstorm).

backends (default: the 82599 model with an in-process client that checks every byte):
  --tap NAME           serve the Linux kernel through the TAP interface NAME (needs CAP_NET_ADMIN)
  --pci ADDR           serve on a real 82599 at PCI address ADDR over VFIO
  --ip A/N             the server's address on --tap and --pci (default 10.0.0.2/24)

options:
  --dir PATH           serve the files under PATH (default: a generated set of 1 KiB .. 256 KiB
                       files, also written to target/httpd-demo)
  --copy               send responses through Stack::send (copied) instead of by reference
  --cores N            cores: queue pairs and per-core stacks (default 1; TAP: 1)
  --conns N            client connections, all open at once (model; default 32)
  --requests N         requests per connection (model; default 200)
  --size BYTES         the model client fetches only files of this size
  --duration SECONDS   run the client this long; on --tap/--pci serve this long (default: Ctrl-C)
  --port P             the port (default 80)
  --seed S             seeds the client's choices (default 1)
  --quiet              no progress line
";

impl Options {
    /// Parses command-line arguments (without the program name).
    ///
    /// # Errors
    /// A message naming the bad argument; `Ok(None)` for `--help`.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Self>, String> {
        let mut o = Self::default();
        let (mut tap, mut pci, mut ip) = (None, None, None);
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value (try --help)"));
            match arg.as_str() {
                "--cores" | "--queues" => o.cores = number(&value()?, 1, 64)?,
                "--dir" => o.dir = Some(PathBuf::from(value()?)),
                "--copy" => o.copy = true,
                "--conns" => o.conns = number(&value()?, 1, 60_000)?,
                "--requests" => o.requests = number(&value()?, 1, u64::MAX)?,
                "--size" => o.size = Some(number(&value()?, 0, usize::MAX)?),
                "--duration" => {
                    let text = value()?;
                    let secs = text.parse::<f64>().ok().filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9);
                    let secs =
                        secs.ok_or_else(|| format!("--duration: {text:?} is not a positive number"))?;
                    o.duration = Some(Duration::from_secs_f64(secs));
                }
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
            (None, None) if ip.is_some() => return Err("--ip is for --tap and --pci".into()),
            (None, None) => Backend::Model,
        };
        Ok(Some(o))
    }
}

// -----------------------------------------------------------------------------------------------
// Reports.

/// What one server core did.
#[derive(Clone, Debug, Default)]
pub struct CoreReport {
    /// The core.
    pub core: usize,
    /// Connections served.
    pub conns: u64,
    /// Responses queued, by status: 200, 400, 404, 405.
    pub responses: [u64; 4],
    /// Response bytes queued (headers and bodies).
    pub bytes: u64,
    /// Connections that failed (reset, timed out).
    pub failed: u64,
    /// Connections open when the server stopped.
    pub open_at_exit: usize,
    /// CPU time of the core's thread (Linux schedstat), when known.
    pub cpu: Option<Duration>,
    /// The channelizer's counters.
    pub channelizer: ChannelizerStats,
    /// The stack's counters.
    pub stack: StackStats,
}

impl CoreReport {
    /// Responses of any status.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.responses.iter().sum()
    }
}

/// What the model's client did.
#[derive(Clone, Debug, Default)]
pub struct ClientReport {
    /// Connections opened.
    pub conns: usize,
    /// Connections that completed.
    pub completed: usize,
    /// Responses received and checked (200s byte for byte, HEADs and 404s by their headers).
    pub responses: u64,
    /// Body bytes received and checked.
    pub bytes: u64,
    /// From the first connect to the last close.
    pub elapsed: Duration,
    /// Request latency (request sent to the response's last byte): p50, p90, p99, max.
    pub latency: [Duration; 4],
    /// The client stack's counters.
    pub stack: StackStats,
}

/// Everything a run did; [`fmt::Display`] is the summary.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// What ran.
    pub setup: String,
    /// The model's client.
    pub client: Option<ClientReport>,
    /// Per server core.
    pub cores: Vec<CoreReport>,
    /// Each pool's audit at exit.
    pub buffers: Vec<(String, Audit)>,
    /// How long the server ran.
    pub elapsed: Duration,
}

impl Report {
    /// Requests the server answered.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.cores.iter().map(CoreReport::requests).sum()
    }

    /// The server cores' CPU time, when known.
    #[must_use]
    pub fn server_cpu(&self) -> Option<Duration> {
        self.cores.iter().map(|c| c.cpu).sum()
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "summary: {}", self.setup)?;
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
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            writeln!(
                f,
                "  latency (request to last byte): p50 {:.0} us, p90 {:.0} us, p99 {:.0} us, max {:.0} us",
                us(c.latency[0]),
                us(c.latency[1]),
                us(c.latency[2]),
                us(c.latency[3])
            )?;
        }
        let requests = self.requests();
        if let Some(cpu) = self.server_cpu() {
            writeln!(
                f,
                "  server CPU: {:.3} s over {:.2} s, {:.1} us per request",
                cpu.as_secs_f64(),
                self.elapsed.as_secs_f64(),
                cpu.as_secs_f64() * 1e6 / requests.max(1) as f64
            )?;
        }
        for c in &self.cores {
            writeln!(
                f,
                "  core {}: {} conns ({} failed, {} open at exit), responses 200 {} / 400 {} / 404 {} / 405 {}, {:.1} MiB; \
                 segments from prepared content {} ({} with precomputed sums); {} frames in, {} out; {} resets, {} \
                 TX drops",
                c.core,
                c.conns,
                c.failed,
                c.open_at_exit,
                c.responses[0],
                c.responses[1],
                c.responses[2],
                c.responses[3],
                mib(c.bytes),
                c.stack.tx_prepared,
                c.stack.tx_prepared_sums,
                c.channelizer.rx,
                c.channelizer.tx,
                c.stack.rst_sent,
                c.stack.tx_dropped
            )?;
        }
        for (name, audit) in &self.buffers {
            writeln!(f, "  buffers: {name}: all {} back ({} outstanding)", audit.total, audit.outstanding)?;
        }
        Ok(())
    }
}

// -----------------------------------------------------------------------------------------------
// The server.

/// This thread's CPU time so far (Linux: the first field of `/proc/thread-self/schedstat`, ns).
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = text.split_whitespace().next()?.parse::<u64>().ok()?;
    Some(Duration::from_nanos(ns))
}

type Reg = Registration<Signature, ConsumerId, Qsbr>;
type Regs = Rc<RefCell<HashMap<(SocketAddrV4, SocketAddrV4), Reg>>>;

struct Shared {
    content: Arc<Content>,
    arp: Vec<Mutex<Vec<Vec<u8>>>>,
    requests: AtomicU64,
    stop: AtomicBool,
    copy: bool,
}

impl Shared {
    fn stopping(&self) -> bool {
        // Relaxed: a plain flag; the joins order the rest.
        self.stop.load(Ordering::Relaxed)
    }
}

/// Registers each new connection's exact signature to this core before its SYN-ACK leaves, and
/// collects established ones.
struct Hook {
    core: usize,
    pending: Rc<RefCell<Vec<StreamId>>>,
    regs: Regs,
    registry: Arc<SignatureRegistry>,
}

impl AcceptHook for Hook {
    fn has_room(&mut self, _listener: ListenerId) -> bool {
        self.pending.borrow().len() < BACKLOG
    }

    fn established(&mut self, _listener: ListenerId, stream: StreamId) {
        self.pending.borrow_mut().push(stream);
    }

    fn opened(&mut self, _listener: ListenerId, local: SocketAddrV4, remote: SocketAddrV4) {
        let consumer = ConsumerId(u32::try_from(self.core).unwrap_or(u32::MAX));
        if let Ok(sig) = Signature::new(Proto::Tcp, SocketAddr::V4(local), SocketAddr::V4(remote))
            && let Ok(reg) = self.registry.register(sig, consumer)
        {
            self.regs.borrow_mut().insert((local, remote), reg);
        }
    }
}

/// A connection being served.
struct Conn {
    id: StreamId,
    input: Vec<u8>,
    /// `--copy`: responses not yet all in the send ring, and how much of the first is.
    out: VecDeque<Arc<PreparedSegments>>,
    out_sent: usize,
    /// Respond no more; close once `out` is sent.
    closing: bool,
    /// Lingering after our FIN until the peer's, at most until then.
    linger: Option<Instant>,
}

struct Server {
    core: usize,
    stack: Stack,
    pending: Rc<RefCell<Vec<StreamId>>>,
    regs: Regs,
    shared: Arc<Shared>,
    conns: Vec<Conn>,
    buf: Vec<u8>,
    last_sweep: Instant,
    report: CoreReport,
}

fn tcp_tuning(config: &mut StackConfig) {
    config.tcp.nodelay = true;
    config.tcp.min_rto = Duration::from_millis(200);
    config.tcp.initial_rto = Duration::from_millis(200);
}

enum Step {
    Open,
    Done,
}

impl Server {
    fn new(
        core: usize,
        mac: EthernetAddress,
        ip: Ipv4Cidr,
        port: u16,
        shared: Arc<Shared>,
        registry: Arc<SignatureRegistry>,
    ) -> Result<Self, String> {
        let mut config = StackConfig::new(mac, ip);
        config.gratuitous_arp = core == 0;
        tcp_tuning(&mut config);
        let mut stack = Stack::new(config, Instant::now());
        stack
            .listen_with(
                port,
                ListenerConfig { backlog: BACKLOG, syn_queue: BACKLOG, ..ListenerConfig::default() },
            )
            .map_err(|e| format!("core {core}: cannot listen on port {port}: {e}"))?;
        let pending = Rc::new(RefCell::new(Vec::new()));
        let regs = Regs::default();
        stack.set_accept_hook(Some(Box::new(Hook {
            core,
            pending: Rc::clone(&pending),
            regs: Rc::clone(&regs),
            registry,
        })));
        Ok(Self {
            core,
            stack,
            pending,
            regs,
            shared,
            conns: Vec::new(),
            buf: vec![0; 16 * 1024],
            last_sweep: Instant::now(),
            report: CoreReport { core, ..CoreReport::default() },
        })
    }

    fn receive(&mut self, now: Instant, frame: &[u8]) {
        self.stack.receive(now, frame);
        let cores = self.shared.arp.len();
        if cores > 1 && frame.len() >= 42 && frame[12..14] == [0x08, 0x06] {
            // Every stack learns the sender, from a copy rewritten into a reply.
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

    fn service(&mut self, now: Instant) -> bool {
        let mut busy = false;
        let learned = std::mem::take(&mut *lock(&self.shared.arp[self.core]));
        for frame in learned {
            self.stack.receive(now, &frame);
        }
        for id in std::mem::take(&mut *self.pending.borrow_mut()) {
            busy = true;
            self.report.conns += 1;
            self.conns.push(Conn {
                id,
                input: Vec::new(),
                out: VecDeque::new(),
                out_sent: 0,
                closing: false,
                linger: None,
            });
        }
        let mut i = 0;
        while i < self.conns.len() {
            let (step, moved) = self.serve(i, now);
            busy |= moved;
            match step {
                Step::Done => {
                    self.conns.swap_remove(i);
                }
                Step::Open => i += 1,
            }
        }
        if self.stack.poll_timeout().is_some_and(|t| t <= now) {
            self.stack.handle_timeout(now);
        }
        if now.duration_since(self.last_sweep) >= SWEEP_EVERY {
            self.last_sweep = now;
            let stack = &self.stack;
            self.regs.borrow_mut().retain(|&(l, r), _| stack.contains(l, r));
        }
        busy
    }

    /// Serves connection `i`: sends what waits (`--copy`), reads, answers complete requests.
    fn serve(&mut self, i: usize, now: Instant) -> (Step, bool) {
        let Self { stack, conns, buf, report, shared, .. } = self;
        let c = &mut conns[i];
        let mut moved = false;
        let fail = |stack: &mut Stack, report: &mut CoreReport, id| {
            let _ = stack.abort(id);
            report.failed += 1;
            (Step::Done, true)
        };
        loop {
            // --copy: push waiting responses into the send ring.
            while let Some(r) = c.out.front() {
                match stack.send(c.id, &r.data()[c.out_sent..]) {
                    Ok(n) => {
                        moved = true;
                        c.out_sent += n;
                        if c.out_sent == r.len() {
                            c.out.pop_front();
                            c.out_sent = 0;
                        }
                    }
                    Err(StackError::WouldBlock) => break,
                    Err(_) => return fail(stack, report, c.id),
                }
            }
            if c.closing {
                if !c.out.is_empty() {
                    return (Step::Open, moved);
                }
                // Lingering close (as nginx does): our FIN follows the last response; what the
                // peer still sends is read and dropped until its FIN (or LINGER), so that
                // closing with unread input does not reset the connection before the peer has
                // read the response.
                let until = *c.linger.get_or_insert_with(|| {
                    let _ = stack.shutdown_write(c.id);
                    now + LINGER
                });
                loop {
                    match stack.recv(c.id, buf) {
                        Ok(n) if n > 0 => moved = true,
                        Err(StackError::WouldBlock) if now < until => return (Step::Open, moved),
                        _ => {
                            let _ = stack.close(c.id);
                            return (Step::Done, true);
                        }
                    }
                }
            }
            // Answer the complete requests buffered.
            let mut blocked = false;
            loop {
                if c.out.len() >= MAX_PENDING {
                    blocked = true;
                    break;
                }
                let (response, len, close, status) = match parse(&c.input, MAX_REQUEST) {
                    Parsed::Incomplete => break,
                    Parsed::Bad => (&shared.content.bad_request, c.input.len(), true, 1),
                    Parsed::Request(r) => {
                        let response = shared.content.respond(&r);
                        let status = match response.data().get(9..12) {
                            Some(b"200") => 0,
                            Some(b"404") => 2,
                            _ => 3,
                        };
                        (response, r.len, r.close, status)
                    }
                };
                if shared.copy {
                    c.out.push_back(Arc::clone(response));
                } else {
                    match stack.send_prepared(c.id, response) {
                        Ok(()) => {}
                        Err(StackError::WouldBlock) => {
                            blocked = true;
                            break;
                        }
                        Err(_) => return fail(stack, report, c.id),
                    }
                }
                moved = true;
                report.responses[status] += 1;
                report.bytes += response.len() as u64;
                shared.requests.fetch_add(1, Ordering::Relaxed);
                c.input.drain(..len);
                if close {
                    c.closing = true;
                    break;
                }
            }
            if c.closing {
                continue; // flush and close
            }
            if blocked {
                return (Step::Open, moved);
            }
            // Read more (at most one request's worth buffered).
            let room = (MAX_REQUEST + 1).saturating_sub(c.input.len()).min(buf.len());
            if room == 0 {
                return (Step::Open, moved);
            }
            match stack.recv(c.id, &mut buf[..room]) {
                Ok(0) => {
                    // The peer is done sending: answer nothing more, close after the responses.
                    c.closing = true;
                    c.input.clear();
                }
                Ok(n) => {
                    moved = true;
                    c.input.extend_from_slice(&buf[..n]);
                }
                Err(StackError::WouldBlock) => return (Step::Open, moved),
                Err(_) => return fail(stack, report, c.id),
            }
        }
    }

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
                    self.report.stack.tx_dropped += 1;
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
        let dropped = self.report.stack.tx_dropped;
        self.report.open_at_exit = self.conns.len();
        self.report.stack = *self.stack.stats();
        self.report.stack.tx_dropped += dropped;
        self.report
    }
}

struct Idle(Option<Instant>);

impl Idle {
    fn tick(&mut self, busy: bool) {
        if busy {
            self.0 = None;
            return;
        }
        let since = *self.0.get_or_insert_with(Instant::now);
        if since.elapsed() > Duration::from_millis(2) {
            std::thread::sleep(Duration::from_micros(100));
        } else {
            std::thread::yield_now();
        }
    }
}

/// Where a core's server is reached: its MAC and address, the port.
#[derive(Clone, Copy)]
struct Setup {
    mac: EthernetAddress,
    ip: Ipv4Cidr,
    port: u16,
}

/// One core: a channelizer on `device` and a stack, on this thread, until the stop flag.
fn core_loop<D: NetDevice>(
    core: usize,
    device: D,
    pool: &Pool,
    registry: Arc<SignatureRegistry>,
    setup: Setup,
    shared: Arc<Shared>,
    (lanes, mut inputs): (Vec<PacketTx>, Vec<PacketRx>),
) -> Result<(CoreReport, Vec<PacketRx>), String> {
    let cpu_start = thread_cpu();
    let cache = pool.cache();
    let channel = |capacity| pool.packet_channel(capacity).map_err(|e| e.to_string());
    let (default_tx, mut default_rx) = channel(CHANNEL)?;
    let (mut reply_tx, reply_rx) = channel(CHANNEL)?;
    let mut ch = Channelizer::new(device, 0, &cache, Arc::clone(&registry), default_tx, BURST);
    for (c, lane) in lanes.into_iter().enumerate() {
        let id = ConsumerId(u32::try_from(c).map_err(|e| e.to_string())?);
        ch.attach(id, lane).map_err(|_| format!("cannot attach consumer {c}'s channel"))?;
    }
    ch.add_tx(reply_rx);
    let mut server = Server::new(core, setup.mac, setup.ip, setup.port, Arc::clone(&shared), registry)?;
    let mut batch = PacketBatch::with_capacity(BURST);
    let mut idle = Idle(None);
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
        for rx in std::iter::once(&mut default_rx).chain(inputs.iter_mut()) {
            while let Some(packet) = rx.pop(&cache) {
                server.receive(now, packet.data());
                frames += 1;
            }
        }
        let served = server.service(now);
        let sent = server.transmit(now, &cache, &mut batch, &mut reply_tx);
        idle.tick(polled.rx + polled.tx + frames > 0 || served || sent || reply_tx.free_space() < capacity);
    }
    // Let the last frames leave.
    let deadline = Instant::now() + Duration::from_secs(1);
    while reply_tx.free_space() < capacity && Instant::now() < deadline {
        let _ = ch.poll();
        while default_rx.pop(&cache).is_some() {}
        std::thread::yield_now();
    }
    let mut report = server.finish();
    report.cpu = thread_cpu().zip(cpu_start).map(|(end, start)| end.saturating_sub(start));
    report.channelizer = ch.stats();
    drop(ch);
    while default_rx.pop(&cache).is_some() {}
    result.map(|()| (report, inputs))
}

/// Runs one server core per device while `main` runs on this thread; stops them after.
fn serve<D: NetDevice + Send, T>(
    devices: Vec<D>,
    pool: &Pool,
    setup: Setup,
    shared: &Arc<Shared>,
    main: impl FnOnce() -> T,
) -> Result<(T, Vec<CoreReport>, Duration), String> {
    let cores = devices.len();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let mut lanes: Vec<Vec<PacketTx>> = (0..cores).map(|_| Vec::new()).collect();
    let mut inputs: Vec<Vec<PacketRx>> = (0..cores).map(|_| Vec::new()).collect();
    for lanes_of_q in &mut lanes {
        for inputs_of_c in &mut inputs {
            let (tx, rx) = pool.packet_channel(CHANNEL).map_err(|e| e.to_string())?;
            lanes_of_q.push(tx);
            inputs_of_c.push(rx);
        }
    }
    let start = Instant::now();
    let (out, results) = std::thread::scope(|s| {
        let workers: Vec<_> = devices
            .into_iter()
            .zip(lanes.into_iter().zip(inputs))
            .enumerate()
            .map(|(core, (device, (lanes, inputs)))| {
                let (shared, registry) = (Arc::clone(shared), Arc::clone(&registry));
                s.spawn(move || core_loop(core, device, pool, registry, setup, shared, (lanes, inputs)))
            })
            .collect();
        let out = main();
        shared.stop.store(true, Ordering::Relaxed);
        let results: Vec<_> =
            workers.into_iter().map(|w| w.join().map_err(|_| "a core panicked".to_owned())).collect();
        (out, results)
    });
    let elapsed = start.elapsed();
    let cores = results
        .into_iter()
        .map(|r| r.and_then(|r| r).map(|(report, _inputs)| report))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((out, cores, elapsed))
}

// -----------------------------------------------------------------------------------------------
// The model's client.

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

/// What a client connection expects of the response in flight.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// 200 and this file's bytes.
    File(usize),
    /// 200 with this file's length, no body.
    Head(usize),
    /// 404.
    NotFound,
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
    expect: Option<Expect>,
    input: Vec<u8>,
    sent_at: Instant,
    done: u64,
}

/// Parses a response head: (status, Content-Length, head length).
fn response_head(buf: &[u8]) -> Option<Result<(u16, usize, usize), String>> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.strip_prefix("HTTP/1.1 "))
        .and_then(|l| l.get(..3))
        .and_then(|s| s.parse().ok());
    let Some(status) = status else { return Some(Err(format!("bad status line in {head:?}"))) };
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok());
    let Some(length) = length else { return Some(Err(format!("no Content-Length in {head:?}"))) };
    Some(Ok((status, length, end + 4)))
}

struct ClientRun<'a> {
    options: &'a Options,
    files: Vec<(&'a str, &'a [u8])>,
    start: Instant,
    latencies: Vec<Duration>,
    report: ClientReport,
    buf: Vec<u8>,
}

impl ClientRun<'_> {
    fn finished(&self, c: &ClientConn) -> bool {
        match self.options.duration {
            Some(d) => self.start.elapsed() >= d,
            None => c.done >= self.options.requests,
        }
    }

    fn request(&self, stack: &mut Stack, c: &mut ClientConn, now: Instant) -> Result<(), String> {
        // The first request of a connection is for a missing file; then every 16th is a HEAD.
        let pick = usize::try_from(c.rng.next() % self.files.len() as u64).unwrap_or(0);
        let (expect, method, path) = if c.done == 0 && c.index.is_multiple_of(4) {
            (Expect::NotFound, "GET", "/no/such/file")
        } else if c.done % 16 == 15 {
            (Expect::Head(pick), "HEAD", self.files[pick].0)
        } else {
            (Expect::File(pick), "GET", self.files[pick].0)
        };
        let req = format!("{method} {path} HTTP/1.1\r\nHost: {SERVER_IP}\r\nUser-Agent: netchannels\r\n\r\n");
        // A request is small: it always fits the (empty) send buffer.
        match stack.send(c.id, req.as_bytes()) {
            Ok(n) if n == req.len() => {}
            other => return Err(format!("connection {}: sending a request: {other:?}", c.index)),
        }
        c.expect = Some(expect);
        c.sent_at = now;
        Ok(())
    }

    fn step(
        &mut self,
        stack: &mut Stack,
        c: &mut ClientConn,
        now: Instant,
        stop: bool,
    ) -> Result<bool, String> {
        let fail =
            |c: &ClientConn, what: String| format!("connection {} (request {}): {what}", c.index, c.done);
        match c.phase {
            Phase::Done => Ok(false),
            Phase::Connecting => match stack.state(c.id) {
                Ok(State::Established) => {
                    c.phase = Phase::Running;
                    self.request(stack, c, now)?;
                    Ok(true)
                }
                Ok(State::SynSent | State::SynReceived) => Ok(false),
                other => Err(fail(c, format!("the connection failed to open: {other:?}"))),
            },
            Phase::Running => {
                let mut moved = false;
                loop {
                    match stack.recv(c.id, &mut self.buf) {
                        Ok(0) => return Err(fail(c, "the server closed early".into())),
                        Ok(n) => {
                            moved = true;
                            c.input.extend_from_slice(&self.buf[..n]);
                        }
                        Err(StackError::WouldBlock) => break,
                        Err(e) => return Err(fail(c, format!("recv: {e}"))),
                    }
                }
                let Some(expect) = c.expect else { return Ok(moved) };
                let Some(head) = response_head(&c.input) else { return Ok(moved) };
                let (status, length, head_len) = head.map_err(|e| fail(c, e))?;
                let (want_status, body): (u16, Option<&[u8]>) = match expect {
                    Expect::File(i) => (200, Some(self.files[i].1)),
                    Expect::Head(i) => {
                        if length != self.files[i].1.len() {
                            return Err(fail(
                                c,
                                format!("HEAD {}: Content-Length {length}", self.files[i].0),
                            ));
                        }
                        (200, None)
                    }
                    Expect::NotFound => (404, None),
                };
                if status != want_status {
                    return Err(fail(c, format!("status {status}, expected {want_status}")));
                }
                let body_len = if matches!(expect, Expect::Head(_)) { 0 } else { length };
                if c.input.len() < head_len + body_len {
                    return Ok(moved);
                }
                if c.input.len() > head_len + body_len {
                    return Err(fail(
                        c,
                        format!("{} bytes beyond the response", c.input.len() - head_len - body_len),
                    ));
                }
                if let Some(body) = body {
                    let got = &c.input[head_len..];
                    if let Some(at) = body
                        .iter()
                        .zip(got)
                        .position(|(a, b)| a != b)
                        .or((body.len() != got.len()).then_some(0))
                    {
                        return Err(fail(c, format!("body byte {at} differs")));
                    }
                    self.report.bytes += body.len() as u64;
                }
                c.input.clear();
                c.expect = None;
                c.done += 1;
                self.report.responses += 1;
                self.latencies.push(now - c.sent_at);
                if stop || self.finished(c) {
                    stack.shutdown_write(c.id).map_err(|e| fail(c, e.to_string()))?;
                    c.phase = Phase::Draining;
                } else {
                    self.request(stack, c, now)?;
                }
                Ok(true)
            }
            Phase::Draining => match stack.recv(c.id, &mut self.buf) {
                Ok(0) => {
                    stack.close(c.id).map_err(|e| fail(c, e.to_string()))?;
                    c.phase = Phase::Done;
                    self.report.completed += 1;
                    Ok(true)
                }
                Ok(n) => Err(fail(c, format!("{n} unexpected bytes after the last response"))),
                Err(StackError::WouldBlock) => Ok(false),
                Err(e) => Err(fail(c, format!("waiting for the server's FIN: {e}"))),
            },
        }
    }
}

fn client<D: NetDevice>(
    device: &mut D,
    cache: &PoolCache,
    mac: EthernetAddress,
    server: SocketAddrV4,
    content: &Content,
    options: &Options,
    stop: &AtomicBool,
) -> Result<ClientReport, String> {
    let mut config = StackConfig::new(mac, Ipv4Cidr::new(CLIENT_IP, 24).expect("a /24"));
    tcp_tuning(&mut config);
    let start = Instant::now();
    let mut stack = Stack::new(config, start);
    let mut files: Vec<(&str, &[u8])> = content
        .files
        .iter()
        .filter(|(_, (b, _))| options.size.is_none_or(|s| s == b.len()))
        .map(|(p, (b, _))| (p.as_str(), &b[..]))
        .collect();
    files.sort_unstable();
    if files.is_empty() {
        return Err("no file to fetch (--size matches none)".into());
    }
    let mut run = ClientRun {
        options,
        files,
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
            expect: None,
            input: Vec::new(),
            sent_at: start,
            done: 0,
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
            return Err(format!("no progress for {} s; {} responses", STALL.as_secs(), run.report.responses));
        }
        if options.progress && now >= next_line {
            next_line += Duration::from_secs(1);
            let secs = (now - start).as_secs_f64();
            println!(
                "[{secs:6.1} s] {done}/{} connections done, {} responses, {:.0} requests/s",
                conns.len(),
                run.report.responses,
                run.report.responses as f64 / secs
            );
        }
        if polled.received == 0 && !moved {
            std::thread::yield_now();
        }
    }
    run.report.elapsed = start.elapsed();
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
// Backends.

/// The content `options` name: `--dir`, or the demo set (written to `target/httpd-demo`).
///
/// # Errors
/// When the directory cannot be read.
pub fn content(options: &Options) -> Result<Content, String> {
    match &options.dir {
        Some(dir) => Content::load(dir),
        None => Ok(Content::demo(Some(&Path::new(env!("CARGO_MANIFEST_DIR")).join("target/httpd-demo")))),
    }
}

/// Runs the server as `options` say, with `content`, until done, `stop`, or the duration.
///
/// # Errors
/// A message saying what failed.
pub fn run(options: &Options, content: Arc<Content>, stop: &AtomicBool) -> Result<Report, String> {
    if content.is_empty() {
        return Err(format!("nothing to serve: {}", content.source));
    }
    let mode = if options.copy { "copy (Stack::send)" } else { "prepared (Stack::send_prepared)" };
    let cores = match options.backend {
        Backend::Tap { .. } => 1,
        _ => usize::from(options.cores),
    };
    let shared = Arc::new(Shared {
        content: Arc::clone(&content),
        arp: (0..cores).map(|_| Mutex::new(Vec::new())).collect(),
        requests: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        copy: options.copy,
    });
    let what = |backend: &str| {
        format!("HTTP on {backend}, {cores} core(s), port {}, {mode}; {}", options.port, content.source)
    };
    let wait = || {
        let start = Instant::now();
        let mut next = start + Duration::from_secs(1);
        // Relaxed: a plain flag.
        while !stop.load(Ordering::Relaxed) && options.duration.is_none_or(|d| start.elapsed() < d) {
            std::thread::sleep(Duration::from_millis(20));
            if options.progress && Instant::now() >= next {
                next += Duration::from_secs(1);
                println!(
                    "[{:6.1} s] {} requests",
                    start.elapsed().as_secs_f64(),
                    shared.requests.load(Ordering::Relaxed)
                );
            }
        }
    };
    match &options.backend {
        Backend::Model => {
            let e = |e: &dyn fmt::Display| e.to_string();
            let mut report =
                Report { setup: what("the 82599 model, in-process client"), ..Report::default() };
            if options.progress {
                println!("httpd: {}", report.setup);
            }
            let wire_pool = Pool::builder(16384).hugepages(HugePages::Never).build().map_err(|x| e(&x))?;
            let (port, wire) = Pair::builder(&wire_pool).capacity(4096).build().map_err(|x| e(&x))?;
            let model = Model::new(SimConfig {
                wire: Wire::Device(Box::new(port), wire_pool.clone()),
                ..SimConfig::default()
            });
            let sim = model.spawn();
            let pool = Pool::builder(u32::try_from(8192 * (cores + 1)).map_err(|x| e(&x))?)
                .hugepages(HugePages::Prefer)
                .build()
                .map_err(|x| e(&x))?;
            let config =
                NicConfig { queues: options.cores, rx_ring: 512, tx_ring: 512, ..NicConfig::default() };
            let (nic, queues) = Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config)
                .map_err(|x| format!("driver: {x}"))?;
            let setup = Setup {
                mac: EthernetAddress(nic.mac().0),
                ip: Ipv4Cidr::new(SERVER_IP, 24).expect("a /24"),
                port: options.port,
            };
            let client_mac = EthernetAddress(wire.info().mac.0);
            let server = SocketAddrV4::new(SERVER_IP, options.port);
            let (client_report, cores_report, elapsed) = serve(queues, &pool, setup, &shared, || {
                let cache = wire_pool.cache();
                let mut dev = wire;
                client(&mut dev, &cache, client_mac, server, &content, options, stop)
            })?;
            report.client = Some(client_report?);
            report.cores = cores_report;
            report.elapsed = elapsed;
            sim.stop();
            drop(nic);
            drop(model);
            for (name, p) in [("driver pool", &pool), ("wire pool", &wire_pool)] {
                p.check_leaks().map_err(|x| format!("{name}: {x}"))?;
                report.buffers.push((name.into(), p.audit()));
            }
            Ok(report)
        }
        Backend::Tap { name, ip } => {
            let tap = Tap::open(name).map_err(|e| format!("cannot open the TAP interface {name:?}: {e}"))?;
            let mut report = Report { setup: what(&format!("TAP {name} at {ip}")), ..Report::default() };
            if options.progress {
                println!("httpd: {} (our MAC {}); Ctrl-C stops", report.setup, tap.info().mac);
            }
            let setup = Setup { mac: EthernetAddress(tap.info().mac.0), ip: *ip, port: options.port };
            let pool = Pool::builder(8192).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
            let ((), cores, elapsed) = serve(vec![tap], &pool, setup, &shared, wait)?;
            report.cores = cores;
            report.elapsed = elapsed;
            pool.check_leaks().map_err(|e| format!("pool: {e}"))?;
            report.buffers.push(("pool".into(), pool.audit()));
            Ok(report)
        }
        Backend::Pci { addr, ip } => {
            let device = ixgbe_vfio::platform::open(addr)
                .map_err(|e| format!("cannot open the 82599 at {addr}: {e}"))?;
            let pool = Pool::builder(u32::try_from(8192 * (cores + 1)).map_err(|e| e.to_string())?)
                .hugepages(HugePages::Prefer)
                .build()
                .map_err(|e| e.to_string())?;
            let config = NicConfig { queues: options.cores, ..NicConfig::default() };
            let (nic, queues) = Ixgbe::init(addr, device.bar0(), device.dma(), &pool, config)
                .map_err(|e| format!("cannot bring up the 82599 at {addr}: {e}"))?;
            let mut report =
                Report { setup: what(&format!("the 82599 at {addr}, {ip}")), ..Report::default() };
            if options.progress {
                println!("httpd: {} (MAC {}); Ctrl-C stops", report.setup, nic.mac());
            }
            let setup = Setup { mac: EthernetAddress(nic.mac().0), ip: *ip, port: options.port };
            let ((), cores, elapsed) = serve(queues, &pool, setup, &shared, wait)?;
            report.cores = cores;
            report.elapsed = elapsed;
            drop(nic);
            drop(device);
            pool.check_leaks().map_err(|e| format!("driver pool: {e}"))?;
            report.buffers.push(("driver pool".into(), pool.audit()));
            Ok(report)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> Parsed<'_> {
        parse(text.as_bytes(), MAX_REQUEST)
    }

    #[test]
    fn parses_requests() {
        let Parsed::Request(r) = req("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET") else { panic!() };
        assert_eq!((r.method, r.path, r.close, r.len), (Method::Get, "/a", false, 28));
        let Parsed::Request(r) = req("HEAD /b?x=1 HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n") else {
            panic!()
        };
        assert_eq!((r.method, r.path, r.close), (Method::Head, "/b?x=1", true));
        let Parsed::Request(r) = req("GET / HTTP/1.0\r\n\r\n") else { panic!() };
        assert!(r.close);
        let Parsed::Request(r) = req("POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc") else { panic!() };
        assert_eq!((r.method, r.len), (Method::Other, 42));
        assert_eq!(req("POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nab"), Parsed::Incomplete);
        assert_eq!(req("GET /a HTTP/1.1\r\nHost: x\r\n"), Parsed::Incomplete);
        for bad in [
            "GET /a\r\n\r\n",
            "GET  /a HTTP/1.1\r\n\r\n",
            "GET a HTTP/1.1\r\n\r\n",
            "GET /a HTTP/2.0\r\n\r\n",
            "G(T /a HTTP/1.1\r\n\r\n",
            "GET /a HTTP/1.1\r\nno colon\r\n\r\n",
            "GET /a HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "GET /a HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            "GET /a HTTP/1.1\r\nContent-Length: 999999\r\n\r\n",
            "GET /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert_eq!(req(bad), Parsed::Bad, "{bad:?}");
        }
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_REQUEST));
        assert_eq!(req(&long), Parsed::Bad);
    }

    #[test]
    fn responses_are_prepared_per_file() {
        let content = Content::new(vec![("/a.txt".into(), b"hello".to_vec())], "test".into());
        let get = Request { method: Method::Get, path: "/a.txt", close: false, len: 0 };
        let r = content.respond(&get);
        let text = String::from_utf8_lossy(r.data()).into_owned();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n") && text.ends_with("\r\n\r\nhello"), "{text}");
        assert!(text.contains("Content-Type: text/plain\r\nContent-Length: 5\r\n"), "{text}");
        let head = content.respond(&Request { method: Method::Head, close: true, ..get });
        let text = String::from_utf8_lossy(head.data()).into_owned();
        assert!(text.ends_with("Connection: close\r\n\r\n"), "{text}");
        let missing = content.respond(&Request { path: "/b", ..get });
        assert!(missing.data().starts_with(b"HTTP/1.1 404 "));
        let post = content.respond(&Request { method: Method::Other, ..get });
        assert!(post.data().starts_with(b"HTTP/1.1 405 "));
        assert!(SEGMENT_SIZES.iter().all(|&m| r.is_cut_for(m)));
    }

    fn model_run(copy: bool) -> Report {
        let options =
            Options { cores: 2, conns: 12, requests: 20, copy, progress: false, ..Options::default() };
        let content = Arc::new(Content::demo(None));
        run(&options, content, &AtomicBool::new(false)).unwrap()
    }

    #[test]
    fn model_serves_every_byte_prepared() {
        let report = model_run(false);
        let client = report.client.as_ref().unwrap();
        assert_eq!((client.completed, client.responses), (12, 240), "{report}");
        assert_eq!(report.requests(), 240, "{report}");
        let prepared: u64 = report.cores.iter().map(|c| c.stack.tx_prepared).sum();
        let sums: u64 = report.cores.iter().map(|c| c.stack.tx_prepared_sums).sum();
        assert!(prepared > 240 && sums * 10 >= prepared * 9, "{report}");
        assert!(report.cores.iter().all(|c| c.failed == 0 && c.stack.rst_sent == 0), "{report}");
    }

    #[test]
    fn model_serves_every_byte_copied() {
        let report = model_run(true);
        let client = report.client.as_ref().unwrap();
        assert_eq!((client.completed, client.responses), (12, 240), "{report}");
        assert!(report.cores.iter().all(|c| c.stack.tx_prepared == 0 && c.failed == 0), "{report}");
    }
}
