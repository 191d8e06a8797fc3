//! The model client: a tcp-lib [`Stack`] of its own on the peer's end of the model's wire (the
//! runtime's [`Peer`](netchannel_runtime::Peer)), driven non-blocking on the runtime's `main`
//! thread.
//!
//! It opens [`Options::conns`] connections at once. Each asks for random files, one request at a
//! time: the first request of every fourth connection is for a missing file (404), every 16th
//! request is a HEAD (its `Content-Length` checked), the rest are GETs whose bodies are checked
//! byte for byte. After [`Options::requests`] requests (or when the duration is up, or on Ctrl-C)
//! a connection half-closes, waits for the server's FIN and closes. The latency of a request is
//! from its `send` to the last byte of its response.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use netchannel::dev::NetDevice;
use netchannel::pool::PoolCache;
use netchannel_runtime::Peer;
use tcp_lib::stack::{Config as StackConfig, Error as StackError, Stack, StackStats, StreamId};
use tcp_lib::tcp::State;
use tcp_lib::wire::Ipv4Cidr;

use super::{Content, Options, Rng, tcp_tuning};
use crate::util::percentile;

/// A run with no progress for this long fails.
const STALL: Duration = Duration::from_secs(10);

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
    server: SocketAddrV4,
    files: Vec<(&'a str, &'a [u8])>,
    start: Instant,
    latencies: Vec<Duration>,
    report: ClientReport,
    buf: Vec<u8>,
}

impl ClientRun<'_> {
    fn finished(&self, c: &ClientConn) -> bool {
        match self.options.serve.duration {
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
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: netchannels\r\n\r\n",
            self.server.ip()
        );
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

/// Runs the client on `peer` (the other end of the model's wire) against the server at `server_ip`
/// (port [`Options::port`]) serving `content`, as `options` say, until every connection is done;
/// `stop` (Ctrl-C) ends the connections after their current request. `tick` runs once per round:
/// it returns false when the server stopped. The peer's device and buffers are gone when it
/// returns (the runtime audits the wire's pool after).
///
/// # Errors
///
/// The first connection that failed, got a wrong status, header or byte, a wire that failed, a
/// server that stopped, or no progress for 10 s; each message says which connection and request.
pub(super) fn run(
    peer: Peer,
    server_ip: Ipv4Cidr,
    content: &Content,
    options: &Options,
    stop: &AtomicBool,
    tick: impl FnMut() -> bool,
) -> Result<ClientReport, String> {
    let mut config = peer.stack_config(server_ip);
    tcp_tuning(&mut config);
    let server = SocketAddrV4::new(server_ip.address(), options.port);
    let (mut device, pool) = peer.into_parts();
    let cache = pool.cache();
    drive(&mut device, &cache, config, server, content, options, stop, tick)
}

/// [`run`] on a device and its buffers.
#[allow(clippy::too_many_arguments)]
fn drive<D: NetDevice>(
    device: &mut D,
    cache: &PoolCache,
    config: StackConfig,
    server: SocketAddrV4,
    content: &Content,
    options: &Options,
    stop: &AtomicBool,
    mut tick: impl FnMut() -> bool,
) -> Result<ClientReport, String> {
    let start = Instant::now();
    let mut stack = Stack::new(config, start);
    let mut files: Vec<(&str, &[u8])> = content
        .paths()
        .filter_map(|p| content.get(p).map(|b| (p, b)))
        .filter(|(_, b)| options.size.is_none_or(|s| s == b.len()))
        .collect();
    files.sort_unstable();
    if files.is_empty() {
        return Err("no file to fetch (--size matches none)".into());
    }
    let mut run = ClientRun {
        options,
        server,
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
            let phases = |p| conns.iter().filter(|c| c.phase == p).count();
            return Err(format!(
                "no progress for {} s: {} connecting, {} running, {} draining, {done} done; {} responses",
                STALL.as_secs(),
                phases(Phase::Connecting),
                phases(Phase::Running),
                phases(Phase::Draining),
                run.report.responses
            ));
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
        if !tick() {
            return Err(format!(
                "the server stopped with {done} of {} connections done, {} responses",
                conns.len(),
                run.report.responses
            ));
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
