//! [`Runtime`]: a backend opened, its queues served by one core each, and a service run on every
//! core until the caller's `main` returns.

use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use netchannel::dev::{MacAddr, NetDevice};
use netchannel::pool::Audit;
use netchannel::steering::FlowSteering;
use tcp_lib::stack::Config as StackConfig;
use tcp_lib::wire::ipv6::addr::{ALL_NODES, link_local, multicast_mac, solicited_node};
use tcp_lib::wire::{EthernetAddress, Ipv4Cidr, Ipv6Cidr};

use crate::Peer;
use crate::backend::{self, Backend, OpenError, OpenOptions, Opened};
use crate::core::{self, Core, CoreSetup};
use crate::placement::Placement;
use crate::shared::{Shared, lock};
use crate::stats::{AcceptStats, Snapshot};
use crate::wiring;

/// The server's address unless [`Builder::ip`] says otherwise.
pub const DEFAULT_IP: Ipv4Cidr = match Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 2), 24) {
    Some(c) => c,
    None => unreachable!(),
};
/// The accept backlog across all cores, per port, unless [`Builder::backlog`] says otherwise.
pub const DEFAULT_BACKLOG: usize = 4096;
/// How often [`Control::wait`] looks at its conditions and calls its `tick`.
pub const WAIT_TICK: Duration = Duration::from_millis(20);
/// How often the balancer offers the accept queues a flow-group migration round (each queue runs
/// one every 100 ms).
const BALANCE_EVERY: Duration = Duration::from_millis(10);

/// Tells the cores to stop when dropped, on return or unwind alike.
struct StopOnDrop<'a>(&'a Shared);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Why the runtime could not be built or could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The backend could not be opened (the message says how to fix it).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Setting the cores up failed.
    #[error("{0}")]
    Setup(String),
    /// A core's thread panicked.
    #[error("core {0} panicked")]
    Panicked(usize),
}

/// A stack configuration hook (see [`Builder::configure`]).
type Configure = Arc<dyn Fn(usize, &mut StackConfig) + Send + Sync>;

/// Sets a [`Runtime`] up: the backend, the cores, the address. Every setting has a default: the
/// 82599 model with an in-process peer, one core, 10.0.0.2/24, the `same` placement.
#[must_use]
pub struct Builder {
    backend: Backend,
    cores: Option<usize>,
    ip: Ipv4Cidr,
    ipv6: Option<Ipv6Cidr>,
    placement: Placement,
    pcap: Option<PathBuf>,
    backlog: usize,
    balance: bool,
    configure: Option<Configure>,
    service_buffers: usize,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("backend", &self.backend)
            .field("cores", &self.cores)
            .field("ip", &self.ip)
            .field("ipv6", &self.ipv6)
            .field("placement", &self.placement)
            .field("pcap", &self.pcap)
            .field("backlog", &self.backlog)
            .field("balance", &self.balance)
            .finish_non_exhaustive()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            backend: Backend::Model,
            cores: None,
            ip: DEFAULT_IP,
            ipv6: None,
            placement: Placement::Same,
            pcap: None,
            backlog: DEFAULT_BACKLOG,
            balance: true,
            configure: None,
            service_buffers: 0,
        }
    }
}

impl Builder {
    /// Where frames come from ([`Backend::Model`] by default).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// How many cores (one queue each). By default one for the model, a TAP or a card, and one per
    /// queue for AF_XDP; a TAP has one queue, so more is an error.
    pub fn cores(mut self, cores: usize) -> Self {
        self.cores = Some(cores);
        self
    }

    /// The stacks' address and subnet (10.0.0.2/24 by default). All cores share it and the
    /// backend's MAC.
    pub fn ip(mut self, ip: Ipv4Cidr) -> Self {
        self.ip = ip;
        self
    }

    /// Turns IPv6 on, with the stacks' address and on-link prefix `ip` besides their link-local
    /// address (off by default). All cores share it; Neighbor Discovery's answers are shared
    /// between the cores' stacks as ARP's are.
    pub fn ipv6(mut self, ip: Ipv6Cidr) -> Self {
        self.ipv6 = Some(ip);
        self
    }

    /// Where each core's channelizer runs.
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// Records the traffic to `path` (pcap): the peer's end of the model's wire, or each queue of
    /// another backend (`path.qN` when there are several).
    pub fn pcap(mut self, path: impl Into<PathBuf>) -> Self {
        self.pcap = Some(path.into());
        self
    }

    /// Each port's accept backlog across all cores (split evenly between them).
    pub fn backlog(mut self, backlog: usize) -> Self {
        self.backlog = backlog;
        self
    }

    /// Whether flow groups migrate between queues toward the cores that steal (Affinity-Accept's
    /// balancer; on backends with Flow Director: the model and the card). On by default.
    pub fn balance(mut self, balance: bool) -> Self {
        self.balance = balance;
        self
    }

    /// Adjusts each core's stack configuration (TCP options, buffers, timers) before the stack is
    /// made; `f` gets the core's number.
    pub fn configure(mut self, f: impl Fn(usize, &mut StackConfig) + Send + Sync + 'static) -> Self {
        self.configure = Some(Arc::new(f));
        self
    }

    /// Pool buffers each core's service keeps while it runs (httpd: its prepared responses, sent
    /// by reference), added to the pool's size so that nothing else runs short (0 by default).
    pub fn service_buffers(mut self, per_core: usize) -> Self {
        self.service_buffers = per_core;
        self
    }

    /// Opens the backend.
    ///
    /// # Errors
    ///
    /// [`Error::Open`], whose message names the fix (a missing interface, permissions, the
    /// IOMMU, hugepages, a core count the backend cannot serve).
    pub fn build(self) -> Result<Runtime, Error> {
        let options = OpenOptions {
            cores: self.cores,
            pcap: self.pcap.as_deref(),
            service_buffers: self.service_buffers,
        };
        let opened = backend::open(&self.backend, &options)?;
        if let (Some(v6), Some(nic)) = (self.ipv6, &opened.steering) {
            // The 82599 filters multicast: let Neighbor Discovery's groups in (TAP and AF_XDP
            // take every frame already).
            let groups = ipv6_groups(opened.mac, v6).map(|g| MacAddr(g.0));
            lock(nic).join_multicast(&groups);
        }
        Ok(Runtime { opened, builder: self })
    }
}

/// The MACs of the IPv6 groups a stack with `mac` and the address `v6` joins (the all-nodes group
/// and the solicited-node groups of its link-local and its global address; RFC 4861 §7.2.1).
fn ipv6_groups(mac: EthernetAddress, v6: Ipv6Cidr) -> [EthernetAddress; 3] {
    [ALL_NODES, solicited_node(link_local(mac)), solicited_node(v6.address())].map(multicast_mac)
}

/// An opened backend, ready to serve: [`run`](Self::run) starts a thread per core (two with the
/// split placement) and runs the service on each.
pub struct Runtime {
    opened: Opened,
    builder: Builder,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime").field("setup", &self.setup()).finish_non_exhaustive()
    }
}

/// What a run did: the final counters, the devices' own summaries, and every buffer accounted for.
#[derive(Debug)]
#[non_exhaustive]
pub struct Report {
    /// What ran: backend, cores, placement, address.
    pub setup: String,
    /// The counters when every core had stopped.
    pub snapshot: Snapshot,
    /// Cores whose service returned an error (other than the runtime stopping).
    pub errors: Vec<(usize, io::Error)>,
    /// One line per device-level summary (the NIC's registers, the model, pcap files).
    pub devices: Vec<String>,
    /// Every pool's audit after the run: all buffers back.
    pub buffers: Vec<(String, Audit)>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.setup)?;
        for (core, e) in &self.errors {
            writeln!(f, "  core {core}: the service failed: {e}")?;
        }
        for line in &self.devices {
            writeln!(f, "  {line}")?;
        }
        for (name, audit) in &self.buffers {
            writeln!(
                f,
                "  buffers: {name}: all {} back ({} in the depot, {} outstanding, {} live caches)",
                audit.total, audit.in_depot, audit.outstanding, audit.live_caches
            )?;
        }
        Ok(())
    }
}

/// The caller's view of a running runtime (given to `main` by [`Runtime::run`]).
#[derive(Debug)]
pub struct Control<'r> {
    shared: &'r Shared,
    started: Instant,
}

impl Control<'_> {
    /// Every counter now (each core's at most [`PUBLISH_EVERY`](crate::stats::PUBLISH_EVERY) old).
    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        snapshot(self.shared, self.started)
    }

    /// Asks every core to stop (`main` returning does the same).
    pub fn stop(&self) {
        self.shared.stop();
    }

    /// Whether the runtime is stopping (asked to, or a core failed).
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.shared.stopping()
    }

    /// Waits until the runtime stops, `interrupt` is set (a signal handler's flag), or `duration`
    /// passed, calling `tick` every [`WAIT_TICK`] with the time waited so far (for progress lines,
    /// or counters printed on demand).
    pub fn wait(
        &self,
        duration: Option<Duration>,
        interrupt: &AtomicBool,
        mut tick: impl FnMut(&Self, Duration),
    ) {
        let start = Instant::now();
        // Relaxed: a plain flag.
        while !self.is_stopping()
            && !interrupt.load(Ordering::Relaxed)
            && duration.is_none_or(|d| start.elapsed() < d)
        {
            std::thread::sleep(WAIT_TICK);
            tick(self, start.elapsed());
        }
    }
}

fn snapshot(shared: &Shared, started: Instant) -> Snapshot {
    let mut s = Snapshot { elapsed: started.elapsed(), ..Snapshot::default() };
    for published in &shared.published {
        let (core, queue) = lock(published).clone();
        s.cores.push(core);
        s.queues.extend(queue);
    }
    for (port, q) in shared.accept_queues() {
        let st = q.stats();
        s.accept.push(AcceptStats {
            port,
            enqueued: st.enqueued(),
            local: st.cores.iter().map(|c| c.local_accepts).sum(),
            stolen: st.cores.iter().map(|c| c.remote_accepts).sum(),
            migrated: st.migrations(),
            rejected: st.rejected(),
            queued: st.queued(),
        });
    }
    s
}

impl Runtime {
    /// A builder with every default.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// How many cores [`run`](Self::run) will run.
    #[must_use]
    pub fn cores(&self) -> usize {
        self.opened.ports.len()
    }

    /// The backend's MAC address (every core's stack uses it).
    #[must_use]
    pub fn mac(&self) -> EthernetAddress {
        self.opened.mac
    }

    /// The stacks' address.
    #[must_use]
    pub fn ip(&self) -> Ipv4Cidr {
        self.builder.ip
    }

    /// The stacks' IPv6 address, when IPv6 is on.
    #[must_use]
    pub fn ipv6(&self) -> Option<Ipv6Cidr> {
        self.builder.ipv6
    }

    /// One line: the backend, the cores, the placement, the addresses.
    #[must_use]
    pub fn setup(&self) -> String {
        let v6 = self.builder.ipv6.map(|v6| format!(" and {v6}")).unwrap_or_default();
        format!(
            "{}, {} core(s), placement {}, {}{v6} (MAC {})",
            self.opened.description,
            self.cores(),
            self.builder.placement,
            self.builder.ip,
            self.opened.mac
        )
    }

    /// The model's in-process peer (the other end of its wire), once; `None` on other backends.
    pub fn take_peer(&mut self) -> Option<Peer> {
        self.opened.peer.take()
    }

    /// Runs `service` on every core, each on its own thread with its own [`Core`], while `main`
    /// runs on this thread; when `main` returns the runtime stops: the cores' blocking calls fail
    /// with [`Stopping`](crate::Stopping), each service returns, what the stacks still send is
    /// flushed, and every buffer is accounted for. A core whose service fails stops the runtime.
    /// When `main` panics the cores are stopped and joined too, and then the panic goes on.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] when the cores could not be wired or a device failed; [`Error::Panicked`];
    /// [`Error::Open`] when the backend's final accounting failed (buffers leaked).
    pub fn run<S, T>(self, service: S, main: impl FnOnce(&Control<'_>) -> T) -> Result<(T, Report), Error>
    where
        S: for<'c> Fn(&mut Core<'c>) -> io::Result<()> + Sync,
    {
        let setup = self.setup();
        let Self { mut opened, builder } = self;
        let ports = std::mem::take(&mut opened.ports);
        let cores = ports.len();
        let (shared, inboxes) = Shared::new(cores, builder.backlog);
        let shared = Arc::new(shared);
        let ends = wiring::wire(&opened.pool, cores).map_err(Error::Setup)?;
        let steering: Option<&Mutex<dyn FlowSteering + Send>> = match &opened.steering {
            Some(nic) if builder.balance && cores > 1 => Some(nic),
            _ => None,
        };
        let started = Instant::now();
        let (out, results) = std::thread::scope(|s| {
            let workers: Vec<_> = ports
                .into_iter()
                .zip(ends)
                .zip(inboxes)
                .enumerate()
                .map(|(core, ((port, ends), inbox))| {
                    // What the device finishes for the stack (a TAP with offloads: TSO and
                    // partial checksums); nothing for the others.
                    let mut stack =
                        StackConfig::new(opened.mac, builder.ip).with_device_offloads(port.info().offloads);
                    if let Some(v6) = builder.ipv6 {
                        stack = stack.with_ipv6(v6);
                    }
                    stack.gratuitous_arp = core == 0;
                    if let Some(f) = &builder.configure {
                        f(core, &mut stack);
                    }
                    let setup = CoreSetup {
                        core,
                        port,
                        pool: &opened.pool,
                        ends,
                        inbox,
                        shared: Arc::clone(&shared),
                        placement: builder.placement,
                        stack,
                        service: &service,
                    };
                    std::thread::Builder::new()
                        .name(format!("core{core}"))
                        .spawn_scoped(s, move || core::run(setup))
                })
                .collect();
            if let Some(steering) = steering {
                let shared = Arc::clone(&shared);
                let _ = std::thread::Builder::new().name("balancer".into()).spawn_scoped(s, move || {
                    while !shared.stopping() {
                        std::thread::sleep(BALANCE_EVERY);
                        // Any group may move: every connection, half-open ones included, is
                        // registered to the core whose stack has it, so its frames reach that
                        // core from whichever queue they arrive on; only new connections follow.
                        for (_, q) in shared.accept_queues() {
                            let _ = q.balance(&mut *lock(steering));
                        }
                    }
                });
            }
            let control = Control { shared: &shared, started };
            // Stops the cores when `main` returns and also when it panics: the scope joins every
            // core before it lets the panic go on, and a core only returns once told to stop.
            let stop = StopOnDrop(&shared);
            let out = main(&control);
            drop(stop);
            let results: Vec<_> = workers
                .into_iter()
                .enumerate()
                .map(|(core, w)| match w {
                    Ok(handle) => handle.join().map_err(|_| Error::Panicked(core))?.map_err(Error::Setup),
                    Err(e) => Err(Error::Setup(format!("cannot start core {core}'s thread: {e}"))),
                })
                .collect();
            (out, results)
        });
        // Every channelizer is gone: the inputs can go, returning what they hold.
        let mut errors = Vec::new();
        let mut failure = None;
        for (core, r) in results.into_iter().enumerate() {
            match r {
                Ok(out) => {
                    if let Err(e) = out.result
                        && !crate::Stopping::is(&e)
                    {
                        errors.push((core, e));
                    }
                    drop(out.inputs);
                }
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        // Connections still queued belong to stacks that are gone.
        for (_, q) in shared.accept_queues() {
            drop(q.take_all());
        }
        let snapshot = snapshot(&shared, started);
        drop(shared);
        let finished = opened.finish()?;
        if let Some(e) = failure {
            return Err(e);
        }
        let report = Report { setup, snapshot, errors, devices: finished.devices, buffers: finished.buffers };
        Ok((out, report))
    }
}
