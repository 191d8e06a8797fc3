//! One core: its queue's channelizer, its tcp-lib stack behind a [`tcp_lib::socket::Interface`]
//! over the core's channels, and the service's handles to them ([`Core`], [`Listener`]).

mod accept;
mod device;
mod duties;
pub(crate) mod local;

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use accept_affinity::AcceptQueue;
use netchannel::channelizer::{Channelizer, ConsumerId};
use netchannel::dev::{DeviceInfo, NetDevice};
use netchannel::pool::{PacketRx, Pool};
use tcp_lib::stack::{Config as StackConfig, ListenerConfig, ListenerId, Stack, StreamId};

pub use device::{CoreDevice, Stopping};

use crate::device::Port;
use crate::idle::Idle;
use crate::placement::Placement;
use crate::shared::{Handoff, Shared, lock};
use crate::stats::{PUBLISH_EVERY, QueueStats};
use crate::wiring::Ends;
use device::Parts;
use duties::Duties;
use local::{Listening, Local};

/// A core's tcp-lib interface: its stack over its [`CoreDevice`].
pub type Interface<'c> = tcp_lib::socket::Interface<CoreDevice<'c>>;
/// A TCP connection of a core: `std::io::Read` and `Write`, blocking or non-blocking
/// ([`tcp_lib::socket::Stream`]).
pub type Stream<'c> = tcp_lib::socket::Stream<CoreDevice<'c>>;

/// Frames per burst.
pub(crate) const BURST: usize = 32;
/// How long a blocked `accept` waits on the device before it looks at the accept queue again
/// (other cores queue connections there, and a steal completes through the handoff channel).
const ACCEPT_RECHECK: Duration = Duration::from_millis(1);
/// How long a stopping core keeps sending what its stack still has queued.
const FLUSH_FOR: Duration = Duration::from_secs(1);

/// The service's handle to the core it runs on: the core's [`Interface`] (for connecting out,
/// polling and the stack's escape hatch) and [`listen`](Self::listen) for Affinity-Accept.
///
/// Made by the runtime on the core's thread and lent to the service for as long as it runs; the
/// handles made from it ([`Listener`], [`Stream`]) live no longer than that.
pub struct Core<'c> {
    pub(crate) local: Rc<Local>,
    pub(crate) iface: Interface<'c>,
}

impl fmt::Debug for Core<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Core").field("id", &self.local.core).field("cores", &self.local.shared.cores).finish()
    }
}

impl<'c> Core<'c> {
    /// This core's number, `0..cores()`; core `i` serves queue `i`.
    #[must_use]
    pub fn id(&self) -> usize {
        self.local.core
    }

    /// How many cores the runtime runs.
    #[must_use]
    pub fn cores(&self) -> usize {
        self.local.shared.cores
    }

    /// The core's tcp-lib interface: [`Stream::connect`](tcp_lib::socket::Stream::connect) and
    /// friends, [`poll`](tcp_lib::socket::Interface::poll) for event loops, and
    /// [`with_stack`](tcp_lib::socket::Interface::with_stack) for everything else.
    #[must_use]
    pub fn interface(&self) -> &Interface<'c> {
        &self.iface
    }

    /// Whether the runtime is stopping: a service's loop ends when it is.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.local.shared.stopping()
    }

    /// Drives the core until something happened or `timeout` passed (the heart of an event
    /// loop; [`Interface::poll_wait`](tcp_lib::socket::Interface::poll_wait)).
    ///
    /// # Errors
    ///
    /// [`Stopping`] (as [`io::ErrorKind::Interrupted`]) once the runtime stops; the device's errors.
    pub fn poll_wait(&self, timeout: Option<Duration>) -> io::Result<()> {
        if self.is_stopping() {
            return Err(Stopping::error());
        }
        self.iface.poll_wait(timeout)
    }

    /// Listens on `port` of this core's stack, with Affinity-Accept across the cores: a connection
    /// is queued on the core whose queue its SYN arrived on, and [`Listener::accept`] takes this
    /// core's connections first and steals from busy cores when it has none. Every core of a
    /// service listens on the ports it serves (a SYN reaches whichever core its flow group is
    /// steered to).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::AddrInUse`] when this core already listens on `port`; the accept queue's
    /// configuration error (a backlog smaller than the core count).
    pub fn listen(&self, port: u16) -> io::Result<Listener<'c>> {
        Self::listen_with(&self.local, &self.iface, port)
    }

    /// [`listen`](Self::listen) for the core whose state and interface these are.
    pub(crate) fn listen_with(
        local: &Rc<Local>,
        iface: &Interface<'c>,
        port: u16,
    ) -> io::Result<Listener<'c>> {
        let queue = local.shared.accept_queue(port).map_err(io::Error::other)?;
        let config = ListenerConfig { backlog: queue.per_core_max(), ..ListenerConfig::default() };
        let id = iface
            .with_stack(|s| s.listen_with(port, config))?
            .map_err(|e| io::Error::new(io::ErrorKind::AddrInUse, e))?;
        local.listeners.borrow_mut().insert(id, Listening { port, queue: Arc::clone(&queue) });
        Ok(Listener {
            local: Rc::clone(local),
            iface: iface.clone(),
            id,
            port,
            queue,
            nonblocking: Cell::new(false),
        })
    }
}

/// A listening port of one core, accepting through the port's Affinity-Accept queue.
///
/// Blocking by default ([`accept`](Self::accept) drives the core until a connection comes, or the
/// runtime stops); dropping it stops this core listening.
pub struct Listener<'c> {
    local: Rc<Local>,
    iface: Interface<'c>,
    id: ListenerId,
    port: u16,
    queue: Arc<AcceptQueue<StreamId>>,
    nonblocking: Cell<bool>,
}

impl fmt::Debug for Listener<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener").field("core", &self.local.core).field("port", &self.port).finish()
    }
}

impl<'c> Listener<'c> {
    /// The next connection for this core: one that arrived here, else one stolen from a busy core
    /// (moved to this core's stack first), as a [`Stream`] of this core with its peer's address.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::WouldBlock`] when non-blocking and none is ready; [`Stopping`] (as
    /// [`io::ErrorKind::Interrupted`]) once the runtime stops; the device's errors.
    pub fn accept(&self) -> io::Result<(Stream<'c>, SocketAddr)> {
        loop {
            if let Some(stream) = self.take_ready()? {
                self.local.set_waiting(self.port, false);
                return Ok(stream);
            }
            self.local.set_waiting(self.port, true);
            if self.nonblocking.get() {
                return Err(io::Error::from(io::ErrorKind::WouldBlock));
            }
            if self.local.shared.stopping() {
                return Err(Stopping::error());
            }
            self.iface.poll_wait(Some(ACCEPT_RECHECK))?;
        }
    }

    /// A connection ready now, if any: one made ready for this core (taken from the accept queue
    /// or stolen and adopted), else one from the accept queue (a stolen one is asked of its core,
    /// and comes back through a later call).
    fn take_ready(&self) -> io::Result<Option<(Stream<'c>, SocketAddr)>> {
        let local = &self.local;
        loop {
            let ready = local.ready.borrow_mut().get_mut(&self.port).and_then(VecDeque::pop_front);
            if let Some((id, stolen)) = ready {
                if let Some(s) = self.wrap(id) {
                    local.count(|c| if stolen { c.accepted_stolen += 1 } else { c.accepted_local += 1 });
                    return Ok(Some(s));
                }
                continue;
            }
            if !local.pull(self.port, &self.queue).map_err(io::Error::other)? {
                return Ok(None);
            }
        }
    }

    /// The stream for a handle of this core's stack; `None` when the connection is already gone.
    fn wrap(&self, id: StreamId) -> Option<(Stream<'c>, SocketAddr)> {
        let stream = tcp_lib::socket::Stream::from_handle(&self.iface, id).ok()?;
        let peer = stream.peer_addr();
        Some((stream, peer))
    }

    /// Makes [`accept`](Self::accept) return [`io::ErrorKind::WouldBlock`] instead of blocking.
    pub fn set_nonblocking(&self, nonblocking: bool) {
        self.nonblocking.set(nonblocking);
    }

    /// The listening address.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::from((self.iface.ip(), self.port))
    }
}

impl Drop for Listener<'_> {
    fn drop(&mut self) {
        self.local.listeners.borrow_mut().remove(&self.id);
        let _ = self.iface.with_stack(|s| s.unlisten(self.id));
    }
}

/// What a core needs to run.
pub(crate) struct CoreSetup<'a, S> {
    pub(crate) core: usize,
    pub(crate) port: Port,
    pub(crate) pool: &'a Pool,
    pub(crate) ends: Ends,
    pub(crate) inbox: Receiver<Handoff>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) placement: Placement,
    pub(crate) stack: StackConfig,
    pub(crate) service: &'a S,
}

/// What a core hands back: the service's result, and its input channels, which must be dropped
/// only once every channelizer is gone (dropping a channel returns what it holds to the pool).
pub(crate) struct CoreOut {
    pub(crate) result: io::Result<()>,
    pub(crate) inputs: Vec<PacketRx>,
}

/// Runs core `setup.core` on this thread (and, with the split placement, its channelizer on
/// another) until its service returns and what it sent is flushed.
pub(crate) fn run<S>(setup: CoreSetup<'_, S>) -> Result<CoreOut, String>
where
    S: for<'c> Fn(&mut Core<'c>) -> io::Result<()> + Sync,
{
    let CoreSetup { core, port, pool, ends, inbox, shared, placement, stack, service } = setup;
    let Ends { lanes, inputs, default: (default_tx, default_rx), tx: (tx_tx, tx_rx) } = ends;
    let info = DeviceInfo { name: format!("core{core}"), queues: 1, ..port.info() };
    let local = Rc::new(Local::new(core, Arc::clone(&shared), inbox));
    let attach = |ch: &mut Channelizer<'_, Port>, lanes: Vec<_>| -> Result<(), String> {
        for (c, lane) in lanes.into_iter().enumerate() {
            let id = ConsumerId(u32::try_from(c).map_err(|e| e.to_string())?);
            ch.attach(id, lane).map_err(|_| format!("core {core}: cannot attach core {c}'s channel"))?;
        }
        Ok(())
    };
    let out = match placement {
        Placement::Same => {
            let cache = pool.cache();
            let mut ch = Channelizer::builder(port, &cache, Arc::clone(&shared.registry), default_tx)
                .burst(BURST)
                .build()
                .map_err(|e| format!("core {core}: {e}"))?;
            attach(&mut ch, lanes)?;
            ch.add_tx(tx_rx);
            let parts = Parts { driver: Some(ch), default_rx, inputs, tx: tx_tx };
            let (result, parts) =
                serve(&local, pool, CoreDevice::new(Rc::clone(&local), parts, info), stack, service)?;
            // The channelizer (and with it the port) goes now; the inputs once every core's has.
            drop(parts.driver);
            CoreOut { result, inputs: parts.inputs }
        }
        Placement::Split => std::thread::scope(|s| {
            let channelizer = s.spawn(|| -> Result<(), String> {
                let cache = pool.cache();
                let mut ch = Channelizer::builder(port, &cache, Arc::clone(&shared.registry), default_tx)
                    .burst(BURST)
                    .build()
                    .map_err(|e| format!("core {core}: {e}"))?;
                attach(&mut ch, lanes)?;
                ch.add_tx(tx_rx);
                let result = drive_split(core, &mut ch, &shared);
                publish_queue(&shared, core, &ch);
                result
            });
            let parts = Parts { driver: None, default_rx, inputs, tx: tx_tx };
            let served = serve(&local, pool, CoreDevice::new(Rc::clone(&local), parts, info), stack, service);
            // Dropping the TX channel's producer tells the channelizer this core has sent its last
            // frame (it drains the channel and stops: `Channelizer::tx_finished`). On an error
            // the device (and with it the producer) is already gone.
            let inputs = served.map(|(result, parts)| {
                drop(parts.tx);
                (result, parts.inputs)
            });
            let drained =
                channelizer.join().map_err(|_| format!("core {core}: the channelizer thread panicked"));
            let (result, inputs) = inputs?;
            drained??;
            Ok::<_, String>(CoreOut { result, inputs })
        })?,
    };
    if let Err(e) = &out.result
        && !Stopping::is(e)
    {
        tracing::error!(core, "the service failed: {e}; stopping the runtime");
        shared.stop();
    }
    Ok(out)
}

/// The split placement's channelizer loop: polls until the core has dropped its TX channel and
/// everything in it went out (or [`FLUSH_FOR`] passed since), publishing the queue's counters.
fn drive_split(core: usize, ch: &mut Channelizer<'_, Port>, shared: &Shared) -> Result<(), String> {
    let mut idle = Idle::default();
    let mut last_publish = Instant::now();
    let mut done_at: Option<Instant> = None;
    loop {
        let polled = match ch.poll() {
            Ok(p) => p,
            Err(e) => {
                shared.stop();
                return Err(format!("core {core}: the device failed: {e}"));
            }
        };
        if last_publish.elapsed() >= PUBLISH_EVERY {
            publish_queue(shared, core, ch);
            last_publish = Instant::now();
        }
        if ch.tx_abandoned() {
            let at = *done_at.get_or_insert_with(Instant::now);
            if ch.tx_finished() || at.elapsed() > FLUSH_FOR {
                return Ok(());
            }
        }
        idle.tick(polled.rx + polled.tx > 0);
    }
}

fn publish_queue(shared: &Shared, core: usize, ch: &Channelizer<'_, Port>) {
    let queue = QueueStats { queue: core, device: ch.device().stats(), channelizer: ch.stats() };
    lock(&shared.published[core]).1 = Some(queue);
}

/// Runs the service on a stack over `device`, then flushes what the stack still sends; gives back
/// the service's result and the device's parts.
fn serve<'c, S>(
    local: &Rc<Local>,
    pool: &Pool,
    device: CoreDevice<'c>,
    config: StackConfig,
    service: &S,
) -> Result<(io::Result<()>, Parts<'c>), String>
where
    S: for<'x> Fn(&mut Core<'x>) -> io::Result<()>,
{
    let core = local.core;
    let now = Instant::now();
    let mut stack = Stack::new(config, now);
    stack.set_accept_hook(Some(Box::new(accept::Hook(Rc::clone(local)))));
    let iface = Interface::new(stack, device, pool.cache());
    iface.set_poll_hook(Some(Box::new(Duties::new(Rc::clone(local), now)))).map_err(|e| e.to_string())?;
    let mut handle = Core { local: Rc::clone(local), iface };
    let result = service(&mut handle);
    let Core { iface, .. } = handle;
    // What the service's streams queued (their FINs included) goes out.
    let deadline = Instant::now() + FLUSH_FOR;
    let mut idle = Idle::default();
    while Instant::now() < deadline {
        let Ok(polled) = iface.poll() else { break };
        let empty = iface.with_device(|d| d.tx_empty()).unwrap_or(true);
        if empty && polled.transmitted == 0 && polled.received == 0 {
            break;
        }
        idle.tick(polled.transmitted + polled.received > 0);
    }
    let (stack, mut device, cache) = iface
        .into_parts()
        .map_err(|_| format!("core {core}: a handle of its interface outlived the service"))?;
    duties::publish_stack(local, &stack);
    device.publish();
    drop(cache);
    Ok((result, device.into_parts()))
}
