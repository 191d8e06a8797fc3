//! What echo and httpd share as services on [`netchannel_runtime`]: how a run goes (the setup
//! line, the service on every core, on the `main` thread the model's client or a wait with progress
//! lines, the errors of both sides together), the per-core event loop over a listener and its
//! connections, and the part of the summary every service has ([`ServiceReport`]).
//!
//! A service runs on the cores in one of two modes, with everything else the same: blocking-style
//! (`BlockingService`, `serve`: each core runs the service's loop over non-blocking handles,
//! [`Runtime::run`]) or async (`AsyncService`, `serve_async`, feature `async`: each core runs the
//! service as an `async fn` on its executor, `Runtime::run_async`).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

#[cfg(feature = "async")]
use netchannel_runtime::AsyncCore;
use netchannel_runtime::stats::AcceptStats;
use netchannel_runtime::{Control, Core, Runtime, Snapshot, Stopping, Stream};
use tcp_lib::stack::StreamId;

use crate::cli;
use crate::client::{self, Plan, Protocol, Summary};
use crate::util::{add, runtime_lines};

/// How long a core's event loop waits for something to happen.
const POLL_WAIT: Duration = Duration::from_millis(1);
/// Most connections one round accepts: the runtime queues one established connection for
/// `accept` per poll, so after one is taken the loop polls again (without waiting) for the next,
/// up to this many, before it serves the connections it has.
const ACCEPT_BATCH: usize = 64;
/// How often the event loop asks whether a quiet connection's deadline passed ([`Handler::expired`]):
/// a deadline fires up to this late, and between sweeps no quiet connection is looked at.
pub(crate) const SWEEP: Duration = Duration::from_millis(100);

/// A service on the runtime, what both modes share: what it says, its counters, and the model
/// client's protocol. What each core runs is [`BlockingService::serve`] or `AsyncService::serve`.
pub(crate) trait Service: Sync {
    /// One core's counters, live (the progress line reads them) and final.
    type Live: Default + Sync;
    /// The model client's protocol.
    type Protocol: Protocol;

    /// The program's name, first on its lines: `echo`.
    const NAME: &'static str;

    /// The setup line after the name, given the runtime's (`HTTP on ...`).
    fn setup(&self, runtime: &str) -> String;

    /// What the model client will do, for the setup line (`64 connections, 2000 messages each`).
    fn client_line(&self, plan: &Plan) -> String;

    /// The model client's protocol, against the server at `host`.
    fn protocol(&self, host: Ipv4Addr) -> Result<Self::Protocol, String>;

    /// Once a second while the service waits for clients elsewhere (not the model's): `elapsed`
    /// since it began waiting.
    fn every_second(&self, elapsed: Duration, snapshot: &Snapshot, live: &[Self::Live]);
}

/// A service whose cores run blocking-style ([`serve`]).
pub(crate) trait BlockingService: Service {
    /// The service on one core, with its counters, until the runtime stops.
    fn serve(&self, core: &mut Core<'_>, live: &Self::Live) -> io::Result<()>;
}

/// A service whose cores run it as an `async fn` on their executors ([`serve_async`]).
#[cfg(feature = "async")]
pub(crate) trait AsyncService: Service {
    /// The service on one core, with its counters, until the runtime stops (its accept fails
    /// with [`Stopping`]); the tasks it spawned are dropped when it returns.
    async fn serve(&self, core: AsyncCore<'_>, live: &Self::Live) -> io::Result<()>;
}

/// How the cores run a service: [`Runtime::run`] or `Runtime::run_async` (feature `async`), with the service's
/// counters, and `main` on this thread.
trait Mode<S: Service> {
    fn run<T>(
        runtime: Runtime,
        service: &S,
        live: &[S::Live],
        main: impl FnOnce(&Control<'_>) -> T,
    ) -> Ran<T>;
}

/// What [`Mode::run`] returns: `main`'s output and the runtime's report.
type Ran<T> = Result<(T, netchannel_runtime::Report), netchannel_runtime::Error>;

/// [`BlockingService::serve`] on every core.
struct Blocking;

impl<S: BlockingService> Mode<S> for Blocking {
    fn run<T>(
        runtime: Runtime,
        service: &S,
        live: &[S::Live],
        main: impl FnOnce(&Control<'_>) -> T,
    ) -> Ran<T> {
        runtime.run(|core: &mut Core<'_>| service.serve(core, &live[core.id()]), main)
    }
}

/// `AsyncService::serve` on every core's executor.
#[cfg(feature = "async")]
struct Async;

#[cfg(feature = "async")]
impl<S: AsyncService> Mode<S> for Async {
    fn run<T>(
        runtime: Runtime,
        service: &S,
        live: &[S::Live],
        main: impl FnOnce(&Control<'_>) -> T,
    ) -> Ran<T> {
        runtime
            .run_async(async |core: AsyncCore<'_>| service.serve(core.clone(), &live[core.id()]).await, main)
    }
}

/// What [`serve`] did.
pub(crate) struct Served<L> {
    /// The runtime's report.
    pub(crate) runtime: netchannel_runtime::Report,
    /// Every core's counters, by core.
    pub(crate) live: Vec<L>,
    /// The model client's summary (model backend).
    pub(crate) client: Option<Summary>,
    /// The service's port.
    pub(crate) port: u16,
}

impl<L> Served<L> {
    /// The report: the client's as `C`, each core's from its counters, and the service's
    /// `details`.
    pub(crate) fn report<C: From<Summary>, K, X>(
        self,
        core: impl Fn(usize, &L) -> K,
        details: X,
    ) -> ServiceReport<C, K, X> {
        ServiceReport {
            runtime: self.runtime,
            client: self.client.map(C::from),
            cores: self.live.iter().enumerate().map(|(i, l)| core(i, l)).collect(),
            port: self.port,
            details,
        }
    }
}

/// Runs `service` on port `port` of `runtime` until it is done (the model's client finished), `stop` is set
/// (Ctrl-C), or the duration of `plan` (the model client's, and the run's) is up: prints the setup line (unless quiet), runs the service
/// on every core, and on this thread the model's client on the runtime's peer, or (other backends)
/// waits, printing the counters on SIGUSR1 and calling [`Service::every_second`].
///
/// # Errors
///
/// The runtime's failure, or the client's (with the cores' errors, when they failed too).
pub(crate) fn serve<S: BlockingService>(
    service: &S,
    port: u16,
    plan: Plan,
    runtime: Runtime,
    stop: &AtomicBool,
) -> Result<Served<S::Live>, String> {
    serve_in::<S, Blocking>(service, port, plan, runtime, stop)
}

/// As [`serve`], the service running as an `async fn` on every core ([`Runtime::run_async`]).
///
/// # Errors
///
/// As [`serve`].
#[cfg(feature = "async")]
pub(crate) fn serve_async<S: AsyncService>(
    service: &S,
    port: u16,
    plan: Plan,
    runtime: Runtime,
    stop: &AtomicBool,
) -> Result<Served<S::Live>, String> {
    serve_in::<S, Async>(service, port, plan, runtime, stop)
}

/// [`serve`] with the cores in mode `M`.
fn serve_in<S: Service, M: Mode<S>>(
    service: &S,
    port: u16,
    plan: Plan,
    mut runtime: Runtime,
    stop: &AtomicBool,
) -> Result<Served<S::Live>, String> {
    let server_ip = runtime.ip();
    let peer = runtime.take_peer();
    if plan.progress {
        let setup = service.setup(&runtime.setup());
        match &peer {
            Some(_) => println!("{}: {setup}; {}", S::NAME, service.client_line(&plan)),
            None => println!("{}: {setup}; Ctrl-C stops", S::NAME),
        }
    }
    let live: Vec<S::Live> = (0..runtime.cores()).map(|_| S::Live::default()).collect();
    let (client, runtime) = M::run(runtime, service, &live, |control| match peer {
        Some(peer) => {
            let tick = || {
                if cli::counters_requested() {
                    print!("{}", control.snapshot());
                }
                !control.is_stopping()
            };
            let client = service.protocol(server_ip.address()).and_then(|mut protocol| {
                client::run(peer, server_ip, port, &plan, &mut protocol, stop, tick)
            });
            Some(client)
        }
        None => {
            wait(control, plan.duration, stop, |elapsed, snapshot| {
                service.every_second(elapsed, snapshot, &live);
            });
            None
        }
    })
    .map_err(|e| e.to_string())?;
    let client = match client {
        Some(Err(e)) if !runtime.errors.is_empty() => {
            let cores: Vec<String> = runtime.errors.iter().map(|(c, e)| format!("core {c}: {e}")).collect();
            return Err(format!("{e}; the server failed: {}", cores.join("; ")));
        }
        client => client.transpose()?,
    };
    Ok(Served { runtime, live, client, port })
}

/// Waits until `stop` (Ctrl-C), the runtime stops or `duration` is up, printing the counters on
/// SIGUSR1 and calling `every_second` once a second with the time waited and the counters.
fn wait(
    control: &Control<'_>,
    duration: Option<Duration>,
    stop: &AtomicBool,
    mut every_second: impl FnMut(Duration, &Snapshot),
) {
    let mut next = Duration::from_secs(1);
    control.wait(duration, stop, |control, elapsed| {
        if cli::counters_requested() {
            print!("{}", control.snapshot());
        }
        if elapsed >= next {
            next += Duration::from_secs(1);
            every_second(elapsed, &control.snapshot());
        }
    });
}

/// What the per-core [`event_loop`] counts, live.
pub(crate) struct Counters<'a> {
    /// Connections accepted (this core's own, and those it stole).
    pub(crate) accepted: &'a AtomicU64,
    /// Connections closed cleanly ([`Step::Closed`]), when the service counts them.
    pub(crate) closed: Option<&'a AtomicU64>,
    /// Connections that failed ([`Step::Failed`]).
    pub(crate) failed: &'a AtomicU64,
    /// Connections still open when the runtime stopped.
    pub(crate) open_at_exit: &'a AtomicU64,
}

/// What a [`Handler`] did to a connection.
pub(crate) enum Step {
    /// Still open.
    Open,
    /// Done: drop it (our FIN follows what is still queued; the close finishes in the background).
    Closed,
    /// It failed: abort it.
    Failed,
}

/// A service's connections, as the per-core [`event_loop`] serves them.
pub(crate) trait Handler {
    /// A connection's own state.
    type Conn;

    /// Whether to accept another connection now.
    fn may_accept(&mut self) -> bool {
        true
    }

    /// A connection accepted: sets its stream up, returns its state.
    ///
    /// # Errors
    ///
    /// A stream that could not be set up: the core's service fails.
    fn accept(&mut self, stream: &Stream<'_>) -> io::Result<Self::Conn>;

    /// Moves a connection on (`now`: this round's time).
    fn step(&mut self, stream: &mut Stream<'_>, conn: &mut Self::Conn, now: Instant) -> Step;

    /// Whether the connection has nothing to do until its stream is readable (no output waiting,
    /// no deadline): the loop then does not step it while nothing arrived. The default steps
    /// every connection every round.
    fn is_quiet(&self, conn: &Self::Conn) -> bool {
        let _ = conn;
        false
    }

    /// Whether a quiet connection's deadline passed by `now`: the loop asks once every [`SWEEP`]
    /// and steps those that say yes. The default: no deadline.
    fn expired(&self, conn: &Self::Conn, now: Instant) -> bool {
        let _ = (conn, now);
        false
    }

    /// Once a round, after the poll: work of the service's own beside its connections (echo's
    /// UDP socket). The default: none.
    ///
    /// # Errors
    ///
    /// The service's: the core's service fails.
    fn each_round(&mut self, core: &Core<'_>) -> io::Result<()> {
        let _ = core;
        Ok(())
    }
}

/// A core's event loop over its listener on `port` and its connections, until the runtime stops:
/// [`Core::poll_wait`] (1 ms at most; it returns at once when the poll moved frames), accept every
/// connection ready (this core's first, then stolen ones; polling again while they come, up to
/// [`ACCEPT_BATCH`]) while the handler takes them, then step
/// every connection that is not quiet, has input, or (once every [`SWEEP`]) whose deadline passed,
/// dropping the closed and aborting the failed.
///
/// # Errors
///
/// The listener's, the accept's or the handler's error (not the runtime stopping).
pub(crate) fn event_loop<H: Handler>(
    core: &Core<'_>,
    port: u16,
    counters: &Counters<'_>,
    handler: &mut H,
) -> io::Result<()> {
    let listener = core.listen(port)?;
    listener.set_nonblocking(true);
    let mut conns: Vec<(Stream<'_>, H::Conn)> = Vec::new();
    // Whether `conns[i]`'s stream has input (data, end of stream or an error), kept across
    // rounds and refreshed only where something moved: true when it is accepted (its data may
    // have come first), asked again for the streams the stack reports an event on (a segment or
    // a timer: `Stack::take_events`) and after each step (its own reads), and for every stream
    // once a sweep. With thousands of connections, asking each one every round would cost a
    // cache miss apiece for the few that moved.
    let mut readable: Vec<bool> = Vec::new();
    // Where each stream sits in `conns`, to find the streams the stack reports.
    let mut position: HashMap<StreamId, usize> = HashMap::new();
    let mut events: Vec<StreamId> = Vec::new();
    let mut next_sweep = Instant::now() + SWEEP;
    let result = 'serve: loop {
        match core.poll_wait(Some(POLL_WAIT)) {
            Ok(()) => {}
            Err(e) if Stopping::is(&e) => break Ok(()),
            Err(e) => break Err(e),
        }
        if let Err(e) = handler.each_round(core) {
            break 'serve Err(e);
        }
        let known = conns.len();
        let mut polled_at = known;
        while handler.may_accept() {
            match listener.accept() {
                Ok((stream, _peer)) => {
                    let conn = match handler.accept(&stream) {
                        Ok(conn) => conn,
                        Err(e) => break 'serve Err(e),
                    };
                    add(counters.accepted, 1);
                    position.insert(stream.id(), conns.len());
                    conns.push((stream, conn));
                    readable.push(true);
                }
                // One came since the last poll, and another may be queued by the next.
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        && conns.len() > polled_at
                        && conns.len() - known < ACCEPT_BATCH =>
                {
                    polled_at = conns.len();
                    match core.poll_wait(Some(Duration::ZERO)) {
                        Ok(()) => {}
                        Err(e) if Stopping::is(&e) => break 'serve Ok(()),
                        Err(e) => break 'serve Err(e),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if Stopping::is(&e) => break 'serve Ok(()),
                Err(e) => break 'serve Err(e),
            }
        }
        let now = Instant::now();
        let sweep = now >= next_sweep;
        if sweep {
            next_sweep = now + SWEEP;
        }
        let asked = core.interface().with_stack(|s| {
            events.clear();
            s.take_events(&mut events);
            if sweep {
                for (r, (st, _)) in readable.iter_mut().zip(&conns) {
                    *r = s.is_readable(st.id());
                }
            } else {
                for &id in &events {
                    if let Some(&i) = position.get(&id) {
                        readable[i] = s.is_readable(id);
                    }
                }
            }
        });
        if let Err(e) = asked {
            break 'serve Err(e);
        }
        let mut i = 0;
        while i < conns.len() {
            let (stream, conn) = &mut conns[i];
            if !readable[i] && handler.is_quiet(conn) && !(sweep && handler.expired(conn, now)) {
                i += 1;
                continue;
            }
            match handler.step(stream, conn, now) {
                Step::Open => {
                    let id = stream.id();
                    match core.interface().with_stack(|s| s.is_readable(id)) {
                        Ok(r) => readable[i] = r,
                        Err(e) => break 'serve Err(e),
                    }
                    i += 1;
                }
                Step::Closed => {
                    drop(remove(&mut conns, &mut readable, &mut position, i));
                    if let Some(closed) = counters.closed {
                        add(closed, 1);
                    }
                }
                Step::Failed => {
                    let _ = remove(&mut conns, &mut readable, &mut position, i).abort();
                    add(counters.failed, 1);
                }
            }
        }
        if core.is_stopping() {
            break Ok(());
        }
    };
    add(counters.open_at_exit, conns.len() as u64);
    result
}

/// Takes `conns[i]` out (the last one moves into its place) and returns its stream, keeping
/// `readable` and `position` in step.
fn remove<'s, C>(
    conns: &mut Vec<(Stream<'s>, C)>,
    readable: &mut Vec<bool>,
    position: &mut HashMap<StreamId, usize>,
    i: usize,
) -> Stream<'s> {
    let (stream, _) = conns.swap_remove(i);
    readable.swap_remove(i);
    position.remove(&stream.id());
    if let Some((moved, _)) = conns.get(i) {
        position.insert(moved.id(), i);
    }
    stream
}

/// What a service's run reports: what every service has, and the service's own `details` (each
/// service's `Report` is one of these).
#[derive(Debug)]
#[non_exhaustive]
pub struct ServiceReport<C, K, X> {
    /// The runtime's report: its setup line, the final counters of every core (their stacks'
    /// included), queue and port, the devices' summaries, every pool's audit, and the cores whose
    /// service failed.
    pub runtime: netchannel_runtime::Report,
    /// The model's client (model backend).
    pub client: Option<C>,
    /// The service, per core.
    pub cores: Vec<K>,
    /// The service's port.
    pub port: u16,
    /// What the service adds (echo: the backend that ran; httpd: how it sent, what it served).
    pub details: X,
}

impl<C, K, X> ServiceReport<C, K, X> {
    /// The runtime's final counters.
    #[must_use]
    pub fn snapshot(&self) -> &Snapshot {
        &self.runtime.snapshot
    }

    /// Affinity-Accept's counters for the service's port (`None` when no core listened).
    #[must_use]
    pub fn accept(&self) -> Option<&AcceptStats> {
        self.snapshot().accept.iter().find(|a| a.port == self.port)
    }

    /// The summary's Affinity-Accept line; `steals` follows the steal count (`steals`, or what
    /// more it says about them).
    pub(crate) fn write_accept(&self, f: &mut fmt::Formatter<'_>, steals: &str) -> fmt::Result {
        match self.accept() {
            Some(a) => writeln!(
                f,
                "  accept (affinity): {} connections, local-accept fraction {:.3}, {} {steals}, {} flow-group \
                 migrations, {} refused",
                a.enqueued,
                a.local_fraction(),
                a.stolen,
                a.migrated,
                a.rejected
            ),
            None => writeln!(f, "  accept (affinity): no core listened on port {}", self.port),
        }
    }

    /// The summary's last lines: the runtime's (cores that failed, devices, buffers).
    pub(crate) fn write_runtime(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        runtime_lines(f, &self.runtime)
    }
}

/// The summary's latency line: `what` the latency is measured over, then p50, p90, p99, max.
pub(crate) fn write_latency(f: &mut fmt::Formatter<'_>, what: &str, latency: &[Duration; 4]) -> fmt::Result {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    writeln!(
        f,
        "  latency ({what}): p50 {:.0} us, p90 {:.0} us, p99 {:.0} us, max {:.0} us",
        us(latency[0]),
        us(latency[1]),
        us(latency[2]),
        us(latency[3])
    )
}
