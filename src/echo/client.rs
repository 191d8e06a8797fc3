//! The model client: a tcp-lib [`Stack`] of its own on the peer's end of the model's wire, driven
//! non-blocking on the runtime's `main` thread.
//!
//! It opens [`Options::conns`] connections from random ephemeral ports (so their flow groups spread
//! over the queues). Each sends messages of random size in [`Options::size`], one at a time, and
//! checks the echo byte for byte; the latency of a message is from its first `send` to the last
//! byte of its echo. After [`Options::messages`] messages (or when the duration is up, or on
//! Ctrl-C) it half-closes, waits for the server's FIN and closes.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use netchannel::dev::NetDevice;
use netchannel::pool::PoolCache;
use tcp_lib::stack::{Config as StackConfig, Error as StackError, Stack, StackStats, StreamId};
use tcp_lib::tcp::State;

use super::{Options, mib};
use crate::util::percentile;

/// A run with no progress for this long fails.
const STALL: Duration = Duration::from_secs(10);

/// What the client did.
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
        match self.options.serve.duration {
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

/// Runs the client: `options.conns` connections to `server` from a stack configured by `config`
/// (the peer's, from [`Peer::stack_config`](netchannel_runtime::Peer::stack_config)) on `device`,
/// whose buffers come from `cache`. `tick` runs once per round of the loop (the caller's chance to
/// answer SIGUSR1) and says whether the server still runs; `stop` ends every connection after its
/// current message.
///
/// # Errors
///
/// The first connection that failed or got back a wrong byte, a wire that failed, a server that
/// stopped, or no progress for 10 s; each message says which connection and message.
pub(crate) fn run<D: NetDevice>(
    device: &mut D,
    cache: &PoolCache,
    config: StackConfig,
    server: SocketAddrV4,
    options: &Options,
    stop: &AtomicBool,
    mut tick: impl FnMut() -> bool,
) -> Result<ClientReport, String> {
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
        if !tick() {
            return Err(format!(
                "the server stopped with {} of {} connections done, {} messages echoed",
                done,
                conns.len(),
                run.report.messages
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
