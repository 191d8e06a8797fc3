//! The model client's driver, which echo's and httpd's clients plug their protocol into: a tcp-lib
//! [`Stack`] of its own on the peer's end of the model's wire (the runtime's [`Peer`]), driven
//! non-blocking on the runtime's `main` thread.
//!
//! It opens [`Plan::conns`] connections at once, from random ephemeral ports (so their flow groups
//! spread over the queues), and moves each through its phases: connecting; running, one exchange
//! at a time (a [`Protocol`]'s: an echoed message, an HTTP request and its response), each
//! exchange's latency measured from its start to its last byte back; after [`Plan::exchanges`]
//! exchanges (or when the duration is up, or on Ctrl-C) a half-close, then draining until the
//! server's FIN, then the close. It prints a progress line every second and fails a run that makes
//! no progress for 10 s.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use netchannel_runtime::Peer;
use tcp_lib::stack::{Error as StackError, Stack, StackStats, StreamId};
use tcp_lib::tcp::State;
use tcp_lib::wire::Ipv4Cidr;

use crate::cli::ServeArgs;
use crate::util::{Latencies, tcp_tuning};

/// A run with no progress for this long fails.
const STALL: Duration = Duration::from_secs(10);

/// What the client does, whatever its protocol.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Connections, all open at once.
    pub(crate) conns: usize,
    /// Exchanges per connection (unless `duration`).
    pub(crate) exchanges: u64,
    /// Exchange until this is up instead.
    pub(crate) duration: Option<Duration>,
    /// Seeds every connection's random numbers (a `fastrand::Rng` each).
    pub(crate) seed: u64,
    /// Print a progress line every second.
    pub(crate) progress: bool,
}

impl Plan {
    /// `conns` connections of `exchanges` each (or for `serve`'s duration), seeded by `seed`,
    /// with progress lines unless quiet.
    pub(crate) fn new(serve: &ServeArgs, conns: usize, exchanges: u64, seed: u64, progress: bool) -> Self {
        Self { conns, exchanges, duration: serve.duration, seed, progress }
    }

    /// How long each connection runs, in words: `2000 messages each` (`unit` = `message`), or
    /// `for 1.5 s`.
    pub(crate) fn length(&self, unit: &str) -> String {
        self.duration.map_or_else(
            || format!("{} {unit}s each", self.exchanges),
            |d| format!("for {:.1} s", d.as_secs_f64()),
        )
    }
}

/// What the client did (each example's `ClientReport` names [`exchanges`](Self::exchanges) its
/// own way).
#[derive(Clone, Debug, Default)]
pub(crate) struct Summary {
    /// Connections opened.
    pub(crate) conns: usize,
    /// Connections that completed (every exchange done, closed both ways).
    pub(crate) completed: usize,
    /// Exchanges completed and checked.
    pub(crate) exchanges: u64,
    /// Bytes checked, as the protocol counts them.
    pub(crate) bytes: u64,
    /// From the first connect to the last close.
    pub(crate) elapsed: Duration,
    /// Exchange latencies: 50th, 90th, 99th percentile and maximum.
    pub(crate) latency: [Duration; 4],
    /// The client stack's counters.
    pub(crate) stack: StackStats,
}

/// Defines an example's public client report: [`Summary`] with its count of exchanges named as the
/// example names them (`messages`, `responses`) and the example's words for that count, the bytes
/// and the latency; and `From<Summary>`.
macro_rules! client_report {
    (
        $(#[$doc:meta])*
        pub struct $name:ident {
            $(#[$count_doc:meta])* $count:ident,
            $(#[$bytes_doc:meta])* bytes,
            $(#[$latency_doc:meta])* latency,
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default)]
        pub struct $name {
            /// Connections opened.
            pub conns: usize,
            /// Connections that completed (every exchange done, closed both ways).
            pub completed: usize,
            $(#[$count_doc])*
            pub $count: u64,
            $(#[$bytes_doc])*
            pub bytes: u64,
            /// From the first connect to the last close.
            pub elapsed: std::time::Duration,
            $(#[$latency_doc])*
            pub latency: [std::time::Duration; 4],
            /// The client stack's counters.
            pub stack: tcp_lib::stack::StackStats,
        }

        impl From<$crate::client::Summary> for $name {
            fn from(s: $crate::client::Summary) -> Self {
                let $crate::client::Summary { conns, completed, exchanges, bytes, elapsed, latency, stack } = s;
                Self { conns, completed, $count: exchanges, bytes, elapsed, latency, stack }
            }
        }
    };
}
pub(crate) use client_report;

/// A client connection: the driver's bookkeeping and the protocol's state.
pub(crate) struct Conn<S> {
    /// Its number, from 0.
    pub(crate) index: usize,
    /// Its stream in the client's stack.
    pub(crate) id: StreamId,
    /// Exchanges completed.
    pub(crate) done: u64,
    /// Its own random numbers, seeded by [`Plan::seed`] and its index.
    pub(crate) rng: fastrand::Rng,
    /// What the protocol keeps.
    pub(crate) state: S,
    phase: Phase,
    /// When the exchange in flight began.
    started: Instant,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Running,
    Draining,
    Done,
}

/// What [`Protocol::advance`] did.
pub(crate) struct Advanced {
    /// Something was sent or received.
    pub(crate) moved: bool,
    /// The exchange completed, checked: the bytes it counts.
    pub(crate) completed: Option<u64>,
}

/// One connection's side of a protocol, as the driver steps it: begin an exchange, advance it
/// until it completes. Errors are what went wrong, in words; the driver says which connection and
/// exchange, and why the stack failed it if it did.
pub(crate) trait Protocol {
    /// A connection's own state (a new connection's is the default).
    type State: Default;
    /// One exchange, in messages: `message`, `request`.
    const EXCHANGE: &'static str;
    /// The reply that ends an exchange, in messages: `echo`, `response`.
    const REPLY: &'static str;

    /// Begins an exchange on `c` (just established, or its last exchange complete).
    fn begin(&mut self, stack: &mut Stack, c: &mut Conn<Self::State>) -> Result<(), String>;

    /// Moves `c`'s exchange forward (`buf` is scratch for [`receive`]).
    fn advance(
        &mut self,
        stack: &mut Stack,
        c: &mut Conn<Self::State>,
        buf: &mut [u8],
    ) -> Result<Advanced, String>;

    /// The progress line's counts after `N/M connections done, ` (`12 responses, 3400 requests/s`).
    fn progress(&self, totals: &Summary, secs: f64) -> String;

    /// `exchanges` in words: `123 messages echoed`.
    fn tally(&self, exchanges: u64) -> String;
}

/// Reads everything `id` has received, a chunk at a time through `buf`, handing each chunk to
/// `take`; returns whether anything came. The server's end of stream is an error here: it closed
/// early.
pub(crate) fn receive(
    stack: &mut Stack,
    id: StreamId,
    buf: &mut [u8],
    mut take: impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<bool, String> {
    let mut moved = false;
    loop {
        match stack.recv(id, buf) {
            Ok(0) => return Err("the server closed early".into()),
            Ok(n) => {
                moved = true;
                take(&buf[..n])?;
            }
            Err(StackError::WouldBlock) => return Ok(moved),
            Err(e) => return Err(format!("recv failed ({e})")),
        }
    }
}

/// A run of the client: the protocol, the totals, the latencies.
struct Driver<'a, P> {
    protocol: &'a mut P,
    plan: &'a Plan,
    start: Instant,
    latencies: Latencies,
    totals: Summary,
    buf: Vec<u8>,
    /// This round's time.
    now: Instant,
    /// Whether `stop` was set this round.
    stopping: bool,
}

impl<P: Protocol> Driver<'_, P> {
    fn finished(&self, c: &Conn<P::State>) -> bool {
        match self.plan.duration {
            Some(d) => self.start.elapsed() >= d,
            None => c.done >= self.plan.exchanges,
        }
    }

    fn begin(&mut self, stack: &mut Stack, c: &mut Conn<P::State>) -> Result<(), String> {
        c.started = self.now;
        self.protocol.begin(stack, c)
    }

    /// Moves connection `c` forward; returns whether anything happened.
    fn step(&mut self, stack: &mut Stack, c: &mut Conn<P::State>) -> Result<bool, String> {
        self.phase(stack, c).map_err(|what| {
            let why =
                stack.error(c.id).ok().flatten().map_or_else(|| what.clone(), |e| format!("{what}: {e}"));
            format!("connection {} ({} {}): {why}", c.index, P::EXCHANGE, c.done)
        })
    }

    /// [`step`](Self::step) by the connection's phase; errors are what went wrong, in words.
    fn phase(&mut self, stack: &mut Stack, c: &mut Conn<P::State>) -> Result<bool, String> {
        match c.phase {
            Phase::Done => Ok(false),
            Phase::Connecting => match stack.state(c.id) {
                Ok(State::Established) => {
                    c.phase = Phase::Running;
                    self.begin(stack, c)?;
                    Ok(true)
                }
                Ok(State::SynSent | State::SynReceived) => Ok(false),
                _ => Err("the connection failed to open".into()),
            },
            Phase::Running => {
                let advanced = self.protocol.advance(stack, c, &mut self.buf)?;
                let Some(bytes) = advanced.completed else { return Ok(advanced.moved) };
                self.latencies.record(self.now - c.started);
                c.done += 1;
                self.totals.exchanges += 1;
                self.totals.bytes += bytes;
                if self.stopping || self.finished(c) {
                    stack.shutdown_write(c.id).map_err(|e| e.to_string())?;
                    c.phase = Phase::Draining;
                } else {
                    self.begin(stack, c)?;
                }
                Ok(true)
            }
            Phase::Draining => match stack.recv(c.id, &mut self.buf) {
                Ok(0) => {
                    stack.close(c.id).map_err(|e| e.to_string())?;
                    c.phase = Phase::Done;
                    self.totals.completed += 1;
                    Ok(true)
                }
                Ok(n) => Err(format!("{n} unexpected bytes after the last {}", P::REPLY)),
                Err(StackError::WouldBlock) => Ok(false),
                Err(e) => Err(format!("waiting for the server's FIN ({e})")),
            },
        }
    }
}

/// Runs the client on `peer` (the other end of the model's wire) against port `port` of the server
/// at `server_ip`, as `plan` says, each connection speaking `protocol`, until every
/// connection is done; `stop` (Ctrl-C) ends each after its current exchange. `tick` runs once per
/// round of the loop (the caller's chance to answer SIGUSR1) and says whether the server still
/// runs. The peer's device and buffers are gone when it returns (the runtime audits the wire's
/// pool after).
///
/// # Errors
///
/// The first connection that failed or got back a wrong byte, a wire that failed, a server that
/// stopped, or no progress for 10 s; each message says which connection and exchange.
pub(crate) fn run<P: Protocol>(
    peer: Peer,
    server_ip: Ipv4Cidr,
    port: u16,
    plan: &Plan,
    protocol: &mut P,
    stop: &AtomicBool,
    mut tick: impl FnMut() -> bool,
) -> Result<Summary, String> {
    let server = SocketAddrV4::new(server_ip.address(), port);
    let mut config = peer.stack_config(server_ip);
    tcp_tuning(&mut config);
    let (mut device, pool) = peer.into_parts();
    let cache = pool.cache();
    let start = Instant::now();
    let mut stack = Stack::new(config, start);
    let mut conns = Vec::with_capacity(plan.conns);
    for index in 0..plan.conns {
        let id = stack.connect(server).map_err(|e| format!("connect #{index}: {e}"))?;
        let rng = fastrand::Rng::with_seed(plan.seed ^ (index as u64 + 1).wrapping_mul(0x1000_0000_01b3));
        conns.push(Conn {
            index,
            id,
            done: 0,
            rng,
            state: P::State::default(),
            phase: Phase::Connecting,
            started: start,
        });
    }
    let mut run = Driver {
        protocol,
        plan,
        start,
        latencies: Latencies::new(),
        totals: Summary { conns: plan.conns, ..Summary::default() },
        buf: vec![0; 64 * 1024],
        now: start,
        stopping: false,
    };
    let mut last_progress = start;
    let mut next_line = start + Duration::from_secs(1);
    let mut done = 0;
    while done < conns.len() {
        let now = Instant::now();
        let polled =
            stack.poll(now, &mut device, &cache).map_err(|e| format!("the client's wire failed: {e}"))?;
        run.now = now;
        // Relaxed: a plain flag.
        run.stopping = stop.load(Ordering::Relaxed);
        let mut moved = false;
        done = 0;
        for c in &mut conns {
            moved |= run.step(&mut stack, c)?;
            done += usize::from(c.phase == Phase::Done);
        }
        if moved {
            last_progress = now;
        } else if now - last_progress > STALL {
            let phases = |p| conns.iter().filter(|c| c.phase == p).count();
            return Err(format!(
                "no progress for {} s: {} connecting, {} running, {} draining, {done} done; {}",
                STALL.as_secs(),
                phases(Phase::Connecting),
                phases(Phase::Running),
                phases(Phase::Draining),
                run.protocol.tally(run.totals.exchanges)
            ));
        }
        if plan.progress && now >= next_line {
            next_line += Duration::from_secs(1);
            let secs = (now - start).as_secs_f64();
            println!(
                "[{secs:6.1} s] {done}/{} connections done, {}",
                conns.len(),
                run.protocol.progress(&run.totals, secs)
            );
        }
        if !tick() {
            return Err(format!(
                "the server stopped with {done} of {} connections done, {}",
                conns.len(),
                run.protocol.tally(run.totals.exchanges)
            ));
        }
        if polled.received == 0 && !moved {
            std::thread::yield_now();
        }
    }
    run.totals.elapsed = start.elapsed();
    // A few more polls so the last ACKs leave.
    for _ in 0..20 {
        stack
            .poll(Instant::now(), &mut device, &cache)
            .map_err(|e| format!("the client's wire failed: {e}"))?;
        std::thread::sleep(Duration::from_millis(1));
    }
    run.totals.latency = run.latencies.summary();
    run.totals.stack = *stack.stats();
    Ok(run.totals)
}
