//! Sockets over a per-core [`Stack`]: [`Listener`] and [`Stream`] with `std::io::Read`/`Write`,
//! blocking or non-blocking, on an [`Interface`] that owns the stack, its device and its buffer
//! cache.
//!
//! # Model
//!
//! An [`Interface`] is one core's endpoint: a [`Stack`] driven by a [`NetDevice`] (the device's RX
//! queue 0 is the net channel it reads, its TX queue 0 the queue it transmits on) and the
//! [`PoolCache`] its frames are built in. [`Interface::poll`] processes one burst (receive, timers,
//! transmit) at the current time and [`Interface::poll_timeout`] says when the next timer is due.
//!
//! **Everything runs on the calling thread.** There are no hidden threads and no locks in the data
//! path: an `Interface` is a cheap-to-clone handle to single-thread state (`Rc<RefCell<..>>`), so it
//! and every socket made from it are `!Send`. Make one per core, on the thread that runs there,
//! from a device value that thread owns.
//!
//! * **Blocking calls drive the stack themselves.** A blocking [`Stream::read`] that finds nothing
//!   buffered polls the interface, and when a poll brought nothing it sleeps on the device
//!   ([`NetDevice::wait_rx`]: an eventfd for a [`Pair`](netchannel::dev::Pair), `poll(2)` for a
//!   TAP, a yield for a poll-mode NIC) until the stack's next timer, the call's timeout, or a frame.
//!   So a thread that only uses blocking sockets needs no event loop: every blocking call keeps
//!   every connection of its interface moving (ACKs, retransmissions, accepts). Between calls
//!   nothing runs: a thread that does something else for a long time should call
//!   [`Interface::poll`] now and then, or the peers see a silent host.
//! * **Non-blocking calls never wait and never poll**: they act on the stack's buffers and return
//!   [`io::ErrorKind::WouldBlock`] when they cannot. The caller's event loop drives the interface
//!   ([`Interface::poll`] or [`Interface::poll_wait`]) and asks each socket for its
//!   [`Readiness`] (or [`Listener::is_acceptable`]).
//!
//! Only [`Interface::with_stack`] (and [`Interface::with_device`]) run a caller's closure while the
//! interface's state is borrowed. A socket call made from inside one (or from a stack hook such as
//! an [`AcceptHook`](crate::stack::AcceptHook)) does not panic: it fails with
//! [`io::ErrorKind::Other`] ("interface already in use"), and a socket dropped there has its close
//! deferred to the interface's next use.
//!
//! # Closing
//!
//! Dropping a [`Stream`] closes it as [`Stream::set_linger`] says: by default gracefully in the
//! background (the FIN follows the data still queued, and the stack finishes the handshake on later
//! polls of the interface); with a linger of zero by an abort (an RST); with a linger `d` by a
//! graceful close that blocks up to `d` until the peer acknowledged everything, FIN included. As on
//! Linux, closing a connection with received data left unread resets it, unless reading was
//! [shut down](Stream::shutdown) (then the unread data is discarded first).
//!
//! # Errors
//!
//! Stack errors become [`io::Error`]s whose [`get_ref`](io::Error::get_ref) is the
//! [`stack::Error`] (so the cause is kept): a reset connection is
//! [`ConnectionReset`](io::ErrorKind::ConnectionReset), a refused one
//! [`ConnectionRefused`](io::ErrorKind::ConnectionRefused), one given up after retransmissions
//! [`TimedOut`](io::ErrorKind::TimedOut), an aborted one
//! [`ConnectionAborted`](io::ErrorKind::ConnectionAborted), a write after
//! [`shutdown(Write)`](Stream::shutdown) [`BrokenPipe`](io::ErrorKind::BrokenPipe), a stale handle
//! [`NotConnected`](io::ErrorKind::NotConnected). Read and write timeouts expire with
//! [`WouldBlock`](io::ErrorKind::WouldBlock), as std's sockets do on Unix; a connect timeout with
//! [`TimedOut`](io::ErrorKind::TimedOut). Device errors keep the [`DevError`] as their inner error.
//!
//! # Example
//!
//! Two interfaces joined by an in-memory [`Pair`](netchannel::dev::Pair): a blocking echo server on
//! its own thread, and a blocking client.
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};
//! use std::sync::mpsc;
//! use std::time::{Duration, Instant};
//!
//! use netchannel::dev::{NetDevice, Pair};
//! use netchannel::pool::{HugePages, Pool};
//! use tcp_lib::socket::{Interface, Listener, Stream};
//! use tcp_lib::stack::{Config, Stack};
//! use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
//!
//! /// One interface: a stack with address 10.0.0.`host` on `dev`.
//! fn interface(dev: Pair, host: u8) -> Interface<Pair> {
//!     let mac = EthernetAddress(dev.info().mac.0);
//!     let cidr = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, host), 24).expect("a /24");
//!     let cache = dev.pool().cache();
//!     Interface::new(Stack::new(Config::new(mac, cidr), Instant::now()), dev, cache)
//! }
//!
//! let pool = Pool::builder(2048).hugepages(HugePages::Never).build()?;
//! let (dev_a, dev_b) = Pair::new(&pool)?;
//! let (listening, ready) = mpsc::channel();
//! let (finished, done) = mpsc::channel::<()>();
//!
//! // The server's interface is made on the thread that uses it (an `Interface` is `!Send`).
//! let server = std::thread::spawn(move || -> std::io::Result<()> {
//!     let b = interface(dev_b, 2);
//!     let listener = Listener::bind(&b, 7)?;
//!     listening.send(()).expect("the client waits");
//!     let (mut stream, _peer) = listener.accept()?;
//!     stream.set_read_timeout(Some(Duration::from_secs(10)))?;
//!     let mut buf = [0u8; 4096];
//!     loop {
//!         let n = stream.read(&mut buf)?; // blocks, driving `b`
//!         if n == 0 {
//!             break; // the client's FIN
//!         }
//!         stream.write_all(&buf[..n])?;
//!     }
//!     drop(stream); // our FIN
//!     let _ = done.recv_timeout(Duration::from_secs(10)); // keep the wire up until the client is done
//!     Ok(())
//! });
//!
//! let a = interface(dev_a, 1);
//! ready.recv()?;
//! let mut stream = Stream::connect(&a, SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 7))?;
//! stream.set_read_timeout(Some(Duration::from_secs(10)))?;
//! stream.set_nodelay(true)?;
//! stream.write_all(b"hello, net channels")?;
//! stream.shutdown(Shutdown::Write)?; // half-close: the server reads EOF, and still answers
//! let mut echo = Vec::new();
//! stream.read_to_end(&mut echo)?;
//! assert_eq!(echo, b"hello, net channels");
//! println!("rtt {:?}, {} segments out", stream.stats()?.srtt, stream.stats()?.segments_out);
//! finished.send(())?;
//! server.join().expect("the server does not panic")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cell::{Cell, RefCell, RefMut};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr};
use std::rc::Rc;
use std::task::Waker;
use std::time::{Duration, Instant};

use netchannel::dev::{DevError, NetDevice};
use netchannel::pool::PoolCache;

use crate::stack::{self, Interest, ListenerConfig, ListenerId, PollStats, Stack, StackStats, StreamId};
use crate::tcp::{ConnectionError, State, Stats};

/// The RX and TX queue of the device an [`Interface`] drives ([`Stack::poll`] uses queue 0).
const QUEUE: u16 = 0;

/// Bytes discarded per `recv` call for a stream whose reading was shut down.
const DISCARD_CHUNK: usize = 4096;

/// Work that runs with the stack at the start of every poll of an [`Interface`]: what a runtime
/// around the stack does on the stack's own thread besides moving frames (connections handed over
/// from another core's stack, frames learned elsewhere, bookkeeping). Set with
/// [`Interface::set_poll_hook`].
///
/// It runs inside the poll, before the stack receives from its device: what it gives the stack
/// (frames through [`Stack::receive`], connections through [`Stack::adopt`]) is processed and
/// answered in the same poll. Like a stack hook it must not call the interface or its sockets
/// (such calls fail with "interface already in use").
pub trait PollHook {
    /// Runs at `now`; returns whether it did anything (a blocking call that polled and found
    /// nothing else to do then polls again instead of sleeping on the device).
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> bool;
}

/// What an interface owns, behind its `RefCell`.
struct Inner<D> {
    stack: Stack,
    device: D,
    cache: PoolCache,
    /// Streams whose reading was shut down: what arrives for them is read and dropped after every
    /// poll, so their receive window stays open.
    discard: Vec<StreamId>,
    hook: Option<Box<dyn PollHook>>,
    /// Whether the hook did something in the last poll.
    hook_busy: bool,
}

impl<D: NetDevice> Inner<D> {
    /// One [`Stack::poll`] at `now`, then the discarding of shut-down input.
    fn poll_at(&mut self, now: Instant) -> io::Result<PollStats> {
        self.poll_at_with(now, |_, _| 0)
    }

    /// Polls with in-place delivery: input of streams whose reading was shut down is dropped where
    /// it lies, the rest offered to `deliver`.
    fn poll_at_with(
        &mut self,
        now: Instant,
        mut deliver: impl FnMut(StreamId, &[u8]) -> usize,
    ) -> io::Result<PollStats> {
        let Self { stack, device, cache, discard, hook, hook_busy } = self;
        *hook_busy = hook.as_mut().is_some_and(|h| h.poll(stack, now));
        let stats =
            stack
                .poll_with(now, device, cache, |id, data| {
                    if discard.contains(&id) { data.len() } else { deliver(id, data) }
                })
                .map_err(dev_error)?;
        if !discard.is_empty() {
            discard.retain(|&id| discard_input(stack, id));
        }
        Ok(stats)
    }
}

/// Reads and drops what is buffered on `id`; returns whether the handle is still valid.
fn discard_input(stack: &mut Stack, id: StreamId) -> bool {
    let mut scratch = [0u8; DISCARD_CHUNK];
    loop {
        match stack.recv(id, &mut scratch) {
            Ok(0) | Err(stack::Error::WouldBlock | stack::Error::Connection(_)) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

/// A release of a handle that could not be done at once (the interface was borrowed), applied at
/// the interface's next use.
#[derive(Clone, Copy, Debug)]
enum Deferred {
    Close(StreamId),
    Abort(StreamId),
    Unlisten(ListenerId),
}

struct Shared<D> {
    inner: RefCell<Inner<D>>,
    /// Borrowed only to push or take, never across other code.
    deferred: RefCell<Vec<Deferred>>,
    clock: Box<dyn Fn() -> Instant>,
    ip: Ipv4Addr,
}

/// One core's network endpoint: a [`Stack`], the [`NetDevice`] it is driven over and the
/// [`PoolCache`] its frames are built in, shared by the sockets made from it.
///
/// A cheap-to-clone handle to single-thread state: `!Send`, one per core, used on the thread that
/// made it (see the [module documentation](self)). Blocking socket calls drive it themselves; an
/// event loop drives it with [`poll`](Self::poll) or [`poll_wait`](Self::poll_wait). A blocking
/// call drives only its own interface: a thread serving two interfaces (two stacks talking to each
/// other, say) uses non-blocking sockets and polls both.
///
/// ```compile_fail
/// fn send<T: Send>() {}
/// send::<tcp_lib::socket::Interface<netchannel::dev::Pair>>(); // one per core: not `Send`
/// ```
pub struct Interface<D: NetDevice> {
    shared: Rc<Shared<D>>,
}

impl<D: NetDevice> Clone for Interface<D> {
    fn clone(&self) -> Self {
        Self { shared: Rc::clone(&self.shared) }
    }
}

impl<D: NetDevice> fmt::Debug for Interface<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Interface");
        d.field("ip", &self.shared.ip);
        match self.shared.inner.try_borrow() {
            Ok(inner) => d.field("stack", &inner.stack),
            Err(_) => d.field("stack", &"<in use>"),
        };
        d.finish_non_exhaustive()
    }
}

impl<D: NetDevice> Interface<D> {
    /// An interface driving `stack` over `device` (its queue 0), building frames in `cache` (a cache
    /// of the device's pool), with the real clock (`Instant::now`).
    #[must_use]
    pub fn new(stack: Stack, device: D, cache: PoolCache) -> Self {
        Self::with_clock(stack, device, cache, Instant::now)
    }

    /// As [`new`](Self::new), reading the time from `clock` (which must not go backwards). The
    /// blocking calls still sleep in real time: a clock that runs faster or slower than the real
    /// one makes timeouts and timers do the same.
    #[must_use]
    pub fn with_clock(
        stack: Stack,
        device: D,
        cache: PoolCache,
        clock: impl Fn() -> Instant + 'static,
    ) -> Self {
        let ip = stack.ip();
        let inner = Inner { stack, device, cache, discard: Vec::new(), hook: None, hook_busy: false };
        Self {
            shared: Rc::new(Shared {
                inner: RefCell::new(inner),
                deferred: RefCell::new(Vec::new()),
                clock: Box::new(clock),
                ip,
            }),
        }
    }

    /// The interface's IPv4 address.
    #[must_use]
    pub fn ip(&self) -> Ipv4Addr {
        self.shared.ip
    }

    /// Processes one burst at the current time: received frames, due timers, and what is ready to
    /// transmit ([`Stack::poll`]). Never blocks.
    ///
    /// # Errors
    ///
    /// The device's errors, and [`io::ErrorKind::Other`] when called from inside
    /// [`with_stack`](Self::with_stack).
    pub fn poll(&self) -> io::Result<PollStats> {
        let now = self.now();
        self.borrow()?.poll_at(now)
    }

    /// [`poll`](Self::poll) with zero-copy receive ([`Stack::poll_with`]): in-order payload of a
    /// stream with nothing buffered ahead of it is offered to `deliver` where it lies in the
    /// received pool buffer, with the stream's [`Stream::id`]; `deliver` returns how many bytes it
    /// consumed, and the rest is read as usual. It runs inside the poll: it must not call the
    /// interface or its sockets (such calls fail with "interface already in use").
    ///
    /// # Errors
    ///
    /// As [`poll`](Self::poll).
    pub fn poll_with(&self, deliver: impl FnMut(StreamId, &[u8]) -> usize) -> io::Result<PollStats> {
        let now = self.now();
        self.borrow()?.poll_at_with(now, deliver)
    }

    /// When the stack next has work without a frame arriving: its earliest timer, or now when
    /// something waits to be transmitted; `None` when only a frame can give it work. (Now, when
    /// called from inside [`with_stack`](Self::with_stack).)
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.shared.inner.try_borrow() {
            Ok(inner) => inner.stack.poll_timeout(),
            Err(_) => Some(self.now()),
        }
    }

    /// Polls; when that brought nothing in or out, sleeps on the device until a frame may have
    /// arrived, the stack's next timer, or `timeout` (`None`: no limit), whichever comes first, and
    /// polls again. The heart of an event loop, and of every blocking call.
    ///
    /// # Errors
    ///
    /// As [`poll`](Self::poll), and the device's errors while waiting.
    pub fn poll_wait(&self, timeout: Option<Duration>) -> io::Result<()> {
        let now = self.now();
        let next = {
            let mut inner = self.borrow()?;
            let stats = inner.poll_at(now)?;
            if stats.received > 0 || stats.transmitted > 0 || inner.hook_busy {
                return Ok(());
            }
            inner.stack.poll_timeout()
        };
        let until = [next, timeout.and_then(|t| now.checked_add(t))].into_iter().flatten().min();
        let now = self.now();
        let wait = until.map(|t| t.saturating_duration_since(now));
        let mut inner = self.borrow()?;
        if wait != Some(Duration::ZERO) {
            inner.device.wait_rx(QUEUE, wait).map_err(dev_error)?;
        }
        drop(inner);
        let now = self.now();
        self.borrow()?.poll_at(now)?;
        Ok(())
    }

    /// The stack's counters.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::Other`] when called from inside [`with_stack`](Self::with_stack).
    pub fn stack_stats(&self) -> io::Result<StackStats> {
        Ok(*self.borrow()?.stack.stats())
    }

    /// Runs `f` on the stack: the escape hatch to everything the socket API does not cover (ARP,
    /// ping, accept hooks, connection counts). Socket calls made inside `f` fail (they do not
    /// panic); sockets dropped inside `f` are released at the interface's next use.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::Other`] when called from inside another `with_stack`.
    pub fn with_stack<R>(&self, f: impl FnOnce(&mut Stack) -> R) -> io::Result<R> {
        let mut inner = self.borrow()?;
        Ok(f(&mut inner.stack))
    }

    /// Runs `f` with the cache the interface builds its frames in: to put content into pool
    /// buffers of the device's pool once ([`PreparedSegments::in_pool`](crate::stack::PreparedSegments::in_pool)),
    /// so that the stack sends it by reference. As [`with_stack`](Self::with_stack).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::Other`] when called from inside another `with_stack`.
    pub fn with_cache<R>(&self, f: impl FnOnce(&PoolCache) -> R) -> io::Result<R> {
        let inner = self.borrow()?;
        Ok(f(&inner.cache))
    }

    /// Sets (or, with `None`, removes) the work that runs with the stack at the start of every
    /// poll ([`PollHook`]); returns the previous one.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::Other`] when called from inside [`with_stack`](Self::with_stack) or a hook.
    pub fn set_poll_hook(&self, hook: Option<Box<dyn PollHook>>) -> io::Result<Option<Box<dyn PollHook>>> {
        let mut inner = self.borrow()?;
        Ok(std::mem::replace(&mut inner.hook, hook))
    }

    /// Runs `f` on the device (its counters, its own controls). As [`with_stack`](Self::with_stack).
    ///
    /// # Errors
    ///
    /// As [`with_stack`](Self::with_stack).
    pub fn with_device<R>(&self, f: impl FnOnce(&mut D) -> R) -> io::Result<R> {
        let mut inner = self.borrow()?;
        Ok(f(&mut inner.device))
    }

    /// The stack, device and cache back, when this is the last handle (no clone and no socket of it
    /// left); otherwise the interface comes back.
    ///
    /// # Errors
    ///
    /// `self`, while other handles or sockets exist.
    pub fn into_parts(self) -> Result<(Stack, D, PoolCache), Self> {
        let shared = Rc::try_unwrap(self.shared).map_err(|shared| Self { shared })?;
        let mut inner = shared.inner.into_inner();
        for d in shared.deferred.into_inner() {
            apply(&mut inner.stack, d);
        }
        Ok((inner.stack, inner.device, inner.cache))
    }

    fn now(&self) -> Instant {
        (self.shared.clock)()
    }

    /// Borrows the state for a socket call (never across a caller's closure but `with_stack`'s),
    /// first applying the releases deferred while it was borrowed.
    fn borrow(&self) -> io::Result<RefMut<'_, Inner<D>>> {
        let mut inner = self.shared.inner.try_borrow_mut().map_err(|_| in_use())?;
        if let Ok(mut deferred) = self.shared.deferred.try_borrow_mut()
            && !deferred.is_empty()
        {
            for d in deferred.drain(..) {
                apply(&mut inner.stack, d);
            }
        }
        Ok(inner)
    }

    /// Releases a handle now, or at the next use of the interface when it is borrowed. Returns
    /// whether it was done now.
    fn release(&self, what: Deferred) -> bool {
        if let Ok(mut inner) = self.borrow() {
            apply(&mut inner.stack, what);
            true
        } else {
            if let Ok(mut deferred) = self.shared.deferred.try_borrow_mut() {
                deferred.push(what);
            }
            false
        }
    }

    /// Runs `attempt` until it gives an answer, driving the interface in between: at once
    /// `WouldBlock` when `nonblocking`, `timed_out` past `deadline`.
    fn block<T>(
        &self,
        nonblocking: bool,
        deadline: Option<Instant>,
        timed_out: fn() -> io::Error,
        mut attempt: impl FnMut(&mut Inner<D>) -> Option<io::Result<T>>,
    ) -> io::Result<T> {
        loop {
            {
                let mut inner = self.borrow()?;
                if let Some(answer) = attempt(&mut inner) {
                    return answer;
                }
            }
            if nonblocking {
                return Err(io::Error::from(io::ErrorKind::WouldBlock));
            }
            let wait = match deadline {
                None => None,
                Some(deadline) => {
                    let now = self.now();
                    if now >= deadline {
                        return Err(timed_out());
                    }
                    Some(deadline - now)
                }
            };
            self.poll_wait(wait)?;
        }
    }

    /// The deadline `timeout` from now (`None`: none, or too far to represent).
    fn deadline(&self, timeout: Option<Duration>) -> Option<Instant> {
        timeout.and_then(|t| self.now().checked_add(t))
    }

    /// One poll whose errors are left for the next call to report (after queuing a segment, so it
    /// leaves now rather than at the next blocking call).
    fn push_out(&self) {
        let _ = self.poll();
    }
}

fn apply(stack: &mut Stack, what: Deferred) {
    // A handle already released (or never valid) has nothing left to release.
    let _ = match what {
        Deferred::Close(id) => stack.close(id),
        Deferred::Abort(id) => stack.abort(id),
        Deferred::Unlisten(id) => stack.unlisten(id),
    };
}

fn in_use() -> io::Error {
    io::Error::other(
        "tcp_lib::socket: the interface is already in use (a socket call from inside \
         Interface::with_stack, with_device, or a stack hook)",
    )
}

fn read_timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "read timed out")
}

fn write_timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "write timed out")
}

fn accept_timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "accept timed out")
}

fn connect_timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "connect timed out")
}

/// The `io::ErrorKind` of a connection failure.
fn connection_kind(e: ConnectionError) -> io::ErrorKind {
    match e {
        ConnectionError::Refused => io::ErrorKind::ConnectionRefused,
        ConnectionError::Reset => io::ErrorKind::ConnectionReset,
        ConnectionError::TimedOut => io::ErrorKind::TimedOut,
        ConnectionError::Aborted => io::ErrorKind::ConnectionAborted,
    }
}

/// A stack error as an `io::Error` whose inner error is `e`.
fn stack_error(e: stack::Error) -> io::Error {
    let kind = match e {
        stack::Error::InvalidHandle => io::ErrorKind::NotConnected,
        stack::Error::InvalidPort | stack::Error::NotLocal => io::ErrorKind::InvalidInput,
        stack::Error::AddrInUse => io::ErrorKind::AddrInUse,
        stack::Error::NoPorts => io::ErrorKind::AddrNotAvailable,
        stack::Error::TooManyConnections | stack::Error::TooManyRoutes => io::ErrorKind::Other,
        stack::Error::Unreachable => io::ErrorKind::NetworkUnreachable,
        stack::Error::WouldBlock => io::ErrorKind::WouldBlock,
        stack::Error::WriteClosed => io::ErrorKind::BrokenPipe,
        stack::Error::MessageTooLong { .. } => io::ErrorKind::InvalidInput,
        stack::Error::NotConnected => io::ErrorKind::NotConnected,
        stack::Error::Connection(c) => connection_kind(c),
    };
    io::Error::new(kind, e)
}

/// A device error as an `io::Error` whose inner error is `e`.
fn dev_error(e: DevError) -> io::Error {
    let kind = match &e {
        DevError::Failed(io) => io.kind(),
        DevError::NoSuchQueue { .. } | DevError::WrongPool { .. } => io::ErrorKind::InvalidInput,
    };
    io::Error::new(kind, e)
}

/// Whether the handshake of a connection in `state` is still under way.
fn connecting(state: State) -> bool {
    matches!(state, State::SynSent | State::SynReceived)
}

/// Whether the peer's FIN has arrived on a connection in `state` (or it closed).
fn fin_received(state: State) -> bool {
    matches!(state, State::CloseWait | State::LastAck | State::Closing | State::TimeWait | State::Closed)
}

// -----------------------------------------------------------------------------------------------
// Listener.

/// A TCP listener on one port of an [`Interface`]: accepts connections as [`Stream`]s.
///
/// Blocking by default ([`accept`](Self::accept) drives the interface until a connection is
/// established); dropping it stops listening (connections established but not accepted are reset).
pub struct Listener<D: NetDevice> {
    iface: Interface<D>,
    id: ListenerId,
    port: u16,
    nonblocking: Cell<bool>,
    timeout: Cell<Option<Duration>>,
}

impl<D: NetDevice> fmt::Debug for Listener<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("local", &self.local_addr())
            .field("nonblocking", &self.nonblocking.get())
            .finish_non_exhaustive()
    }
}

impl<D: NetDevice> Listener<D> {
    /// Listens on `port` of `iface` with the default [`ListenerConfig`].
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for port 0, [`io::ErrorKind::AddrInUse`] when another
    /// listener has the port.
    pub fn bind(iface: &Interface<D>, port: u16) -> io::Result<Self> {
        Self::bind_with(iface, port, ListenerConfig::default())
    }

    /// Listens on `port` of `iface` with `config` (SYN queue, backlog, SYN cookies).
    ///
    /// # Errors
    ///
    /// As [`bind`](Self::bind).
    pub fn bind_with(iface: &Interface<D>, port: u16, config: ListenerConfig) -> io::Result<Self> {
        let id = iface.borrow()?.stack.listen_with(port, config).map_err(stack_error)?;
        Ok(Self { iface: iface.clone(), id, port, nonblocking: Cell::new(false), timeout: Cell::new(None) })
    }

    /// The next established connection and its peer's address, oldest first. Blocks (driving the
    /// interface) until there is one, unless non-blocking. The stream is blocking, whatever the
    /// listener is.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::WouldBlock`] when non-blocking and none is waiting, or when the
    /// [accept timeout](Self::set_accept_timeout) passed; the device's errors.
    pub fn accept(&self) -> io::Result<(Stream<D>, SocketAddr)> {
        let deadline = self.iface.deadline(self.timeout.get());
        let id = self.id;
        let (stream, local, peer) =
            self.iface.block(self.nonblocking.get(), deadline, accept_timed_out, |inner| {
                let stream = inner.stack.accept(id)?;
                Some(match inner.stack.addrs(stream) {
                    Ok((local, peer)) => Ok((stream, local, peer)),
                    Err(e) => Err(stack_error(e)),
                })
            })?;
        let nodelay = self.iface.with_stack(|s| s.config().tcp.nodelay).unwrap_or(false);
        Ok((Stream::new(&self.iface, stream, local, peer, nodelay), peer))
    }

    /// Makes [`accept`](Self::accept) return [`io::ErrorKind::WouldBlock`] instead of blocking.
    ///
    /// # Errors
    ///
    /// None today (the signature is std's).
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.nonblocking.set(nonblocking);
        Ok(())
    }

    /// Bounds how long a blocking [`accept`](Self::accept) waits (`None`: forever, the default);
    /// past it, it fails with [`io::ErrorKind::WouldBlock`]. (std's listener has no such option.)
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a zero duration, as std's socket timeouts.
    pub fn set_accept_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        self.timeout.set(timeout);
        Ok(())
    }

    /// The accept timeout.
    #[must_use]
    pub fn accept_timeout(&self) -> Option<Duration> {
        self.timeout.get()
    }

    /// The address it listens on (the interface's address and the port).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::from((self.iface.ip(), self.port))
    }

    /// Whether [`accept`](Self::accept) returns a connection now (readiness for event loops).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::Other`] when called from inside [`Interface::with_stack`].
    pub fn is_acceptable(&self) -> io::Result<bool> {
        let inner = self.iface.borrow()?;
        Ok(inner.stack.accept_queue_len(self.id).is_some_and(|n| n > 0))
    }

    /// Established connections waiting to be accepted.
    ///
    /// # Errors
    ///
    /// As [`is_acceptable`](Self::is_acceptable).
    pub fn backlog(&self) -> io::Result<usize> {
        Ok(self.iface.borrow()?.stack.accept_queue_len(self.id).unwrap_or(0))
    }

    /// The interface it listens on.
    #[must_use]
    pub fn interface(&self) -> &Interface<D> {
        &self.iface
    }
}

impl<D: NetDevice> Drop for Listener<D> {
    fn drop(&mut self) {
        if self.iface.release(Deferred::Unlisten(self.id)) {
            self.iface.push_out();
        }
    }
}

fn check_timeout(timeout: Option<Duration>) -> io::Result<()> {
    if timeout == Some(Duration::ZERO) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot set a 0 duration timeout"));
    }
    Ok(())
}

// -----------------------------------------------------------------------------------------------
// Stream.

/// What a [`Stream`] can do now without blocking: for non-blocking event loops, after a poll of
/// the interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Readiness {
    /// A read returns at once: with data, with the end of the stream, or with an error.
    pub readable: bool,
    /// The connection is established and a write accepts at least one byte.
    pub writable: bool,
    /// The peer ended its stream and every byte was read (a read returns `Ok(0)`), or reading was
    /// shut down.
    pub read_closed: bool,
    /// The connection failed ([`Stream::take_error`] says why; reads and writes fail).
    pub error: bool,
}

/// A TCP connection of an [`Interface`], with `std::io::Read` and `Write` (on `Stream` and on
/// `&Stream`).
///
/// Blocking by default: reads wait for data, writes for room in the send buffer, each driving the
/// interface, bounded by the [read](Self::set_read_timeout) and [write](Self::set_write_timeout)
/// timeouts. Dropping it closes the connection as its [linger](Self::set_linger) says.
pub struct Stream<D: NetDevice> {
    iface: Interface<D>,
    id: StreamId,
    local: SocketAddr,
    peer: SocketAddr,
    nonblocking: Cell<bool>,
    read_timeout: Cell<Option<Duration>>,
    write_timeout: Cell<Option<Duration>>,
    linger: Cell<Option<Duration>>,
    nodelay: Cell<bool>,
    read_shut: Cell<bool>,
    /// Bytes handed to the stack's send buffer through this handle (what `flush` waits for).
    queued: Cell<u64>,
    /// The connection error was reported by `take_error`.
    error_taken: Cell<bool>,
    /// The handle was released (`abort`).
    released: Cell<bool>,
}

impl<D: NetDevice> fmt::Debug for Stream<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("local", &self.local)
            .field("peer", &self.peer)
            .field("nonblocking", &self.nonblocking.get())
            .finish_non_exhaustive()
    }
}

impl<D: NetDevice> Stream<D> {
    fn new(iface: &Interface<D>, id: StreamId, local: SocketAddr, peer: SocketAddr, nodelay: bool) -> Self {
        Self {
            iface: iface.clone(),
            id,
            local,
            peer,
            nonblocking: Cell::new(false),
            read_timeout: Cell::new(None),
            write_timeout: Cell::new(None),
            linger: Cell::new(None),
            nodelay: Cell::new(nodelay),
            read_shut: Cell::new(false),
            queued: Cell::new(0),
            error_taken: Cell::new(false),
            released: Cell::new(false),
        }
    }

    /// Opens a connection to `addr` and blocks (driving the interface) until it is established or
    /// failed; the SYN retries bound the wait.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::ConnectionRefused`] when the peer resets the SYN,
    /// [`io::ErrorKind::TimedOut`] when the SYN retries go unanswered,
    /// [`io::ErrorKind::NetworkUnreachable`] without a route, [`io::ErrorKind::AddrNotAvailable`]
    /// without a free port, the device's errors.
    pub fn connect(iface: &Interface<D>, addr: impl Into<SocketAddr>) -> io::Result<Self> {
        Self::connect_within(iface, addr.into(), None)
    }

    /// As [`connect`](Self::connect), giving up (and releasing the connection) after `timeout`.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect), and [`io::ErrorKind::TimedOut`] after `timeout`;
    /// [`io::ErrorKind::InvalidInput`] for a zero timeout.
    pub fn connect_timeout(
        iface: &Interface<D>,
        addr: impl Into<SocketAddr>,
        timeout: Duration,
    ) -> io::Result<Self> {
        check_timeout(Some(timeout))?;
        Self::connect_within(iface, addr.into(), Some(timeout))
    }

    /// Opens a connection to `addr` and returns at once, non-blocking: the SYN leaves at the
    /// interface's next poll; [`readiness`](Self::readiness) says `writable` once the connection is
    /// established, `error` once it failed.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect), for what fails at once (no route, no port).
    pub fn connect_nonblocking(iface: &Interface<D>, addr: impl Into<SocketAddr>) -> io::Result<Self> {
        let stream = Self::open(iface, addr.into())?;
        stream.nonblocking.set(true);
        Ok(stream)
    }

    fn open(iface: &Interface<D>, addr: SocketAddr) -> io::Result<Self> {
        let now = iface.now();
        let mut inner = iface.borrow()?;
        // Bring the stack's clock to now, so that the SYN's timers start from the present.
        inner.stack.handle_timeout(now);
        let id = inner.stack.connect(addr).map_err(stack_error)?;
        let (local, peer) = inner.stack.addrs(id).map_err(stack_error)?;
        let nodelay = inner.stack.config().tcp.nodelay;
        drop(inner);
        Ok(Self::new(iface, id, local, peer, nodelay))
    }

    fn connect_within(iface: &Interface<D>, addr: SocketAddr, timeout: Option<Duration>) -> io::Result<Self> {
        let stream = Self::open(iface, addr)?;
        let deadline = iface.deadline(timeout);
        let id = stream.id;
        let connected = iface.block(false, deadline, connect_timed_out, |inner| {
            match (inner.stack.error(id), inner.stack.state(id)) {
                (Err(e), _) | (_, Err(e)) => Some(Err(stack_error(e))),
                (Ok(Some(e)), _) => Some(Err(stack_error(stack::Error::Connection(e)))),
                (Ok(None), Ok(state)) if connecting(state) => None,
                (Ok(None), Ok(_)) => Some(Ok(())),
            }
        });
        match connected {
            Ok(()) => Ok(stream),
            Err(e) => {
                // Released by an abort: an RST if the handshake got that far, none otherwise.
                stream.linger.set(Some(Duration::ZERO));
                Err(e)
            }
        }
    }

    /// A stream for a connection the application already owns by its handle in the interface's
    /// stack: one an [`AcceptHook`](crate::stack::AcceptHook) received, or one
    /// [`Stack::adopt`] returned. The stream takes the handle over (dropping it closes the
    /// connection). Blocking, with the stack's Nagle setting, like an accepted stream.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::NotConnected`] for a handle the stack does not know;
    /// [`io::ErrorKind::Other`] when called from inside [`Interface::with_stack`] or a hook.
    pub fn from_handle(iface: &Interface<D>, id: StreamId) -> io::Result<Self> {
        let inner = iface.borrow()?;
        let (local, peer) = inner.stack.addrs(id).map_err(stack_error)?;
        let nodelay = inner.stack.config().tcp.nodelay;
        drop(inner);
        Ok(Self::new(iface, id, local, peer, nodelay))
    }

    /// The stream's handle in the interface's [`Stack`] (what [`Interface::poll_with`] and
    /// [`Interface::with_stack`] name it by).
    #[must_use]
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// The local address.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The peer's address.
    #[must_use]
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The interface the connection lives on.
    #[must_use]
    pub fn interface(&self) -> &Interface<D> {
        &self.iface
    }

    /// Makes reads, writes and flushes return [`io::ErrorKind::WouldBlock`] instead of blocking
    /// (and never drive the interface: the event loop does).
    ///
    /// # Errors
    ///
    /// None today (the signature is std's).
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.nonblocking.set(nonblocking);
        Ok(())
    }

    /// Bounds how long a blocking read waits (`None`: forever, the default); past it the read fails
    /// with [`io::ErrorKind::WouldBlock`], as std's sockets do on Unix.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a zero duration, as std.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        self.read_timeout.set(timeout);
        Ok(())
    }

    /// Bounds how long a blocking write or flush waits (`None`: forever, the default); past it the
    /// call fails with [`io::ErrorKind::WouldBlock`].
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a zero duration, as std.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        self.write_timeout.set(timeout);
        Ok(())
    }

    /// The read timeout.
    ///
    /// # Errors
    ///
    /// None today (the signature is std's).
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.read_timeout.get())
    }

    /// The write timeout.
    ///
    /// # Errors
    ///
    /// None today (the signature is std's).
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.write_timeout.get())
    }

    /// Disables (`true`) or enables Nagle's algorithm.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::NotConnected`] for a released connection; [`io::ErrorKind::Other`] from
    /// inside [`Interface::with_stack`].
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.iface.borrow()?.stack.set_nodelay(self.id, nodelay).map_err(stack_error)?;
        self.nodelay.set(nodelay);
        Ok(())
    }

    /// Whether Nagle's algorithm is disabled.
    ///
    /// # Errors
    ///
    /// None today (the signature is std's).
    pub fn nodelay(&self) -> io::Result<bool> {
        Ok(self.nodelay.get())
    }

    /// How dropping the stream closes the connection: `None` (the default) gracefully in the
    /// background; `Some(Duration::ZERO)` by an abort (an RST, unsent data discarded); `Some(d)`
    /// gracefully, blocking the drop up to `d` (driving the interface) until the peer acknowledged
    /// all data and the FIN (after `d` the close goes on in the background).
    ///
    /// # Errors
    ///
    /// None today (the signature is std's).
    pub fn set_linger(&self, linger: Option<Duration>) -> io::Result<()> {
        self.linger.set(linger);
        Ok(())
    }

    /// The linger setting.
    ///
    /// # Errors
    ///
    /// None today (the signature is std's).
    pub fn linger(&self) -> io::Result<Option<Duration>> {
        Ok(self.linger.get())
    }

    /// Shuts down reading, writing, or both. `Write` is a half-close: a FIN follows the data already
    /// queued, later writes fail with [`io::ErrorKind::BrokenPipe`], and reading goes on. `Read`
    /// makes reads return `Ok(0)` and discards what is buffered and what still arrives (so the peer
    /// is never stuck on a closed window, and a later close is not turned into a reset by unread
    /// data); the peer is not told.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::NotConnected`] for a released connection; [`io::ErrorKind::Other`] from
    /// inside [`Interface::with_stack`].
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        {
            let mut inner = self.iface.borrow()?;
            inner.stack.state(self.id).map_err(stack_error)?;
            if matches!(how, Shutdown::Write | Shutdown::Both) {
                inner.stack.shutdown_write(self.id).map_err(stack_error)?;
            }
            if matches!(how, Shutdown::Read | Shutdown::Both) && !self.read_shut.replace(true) {
                discard_input(&mut inner.stack, self.id);
                inner.discard.push(self.id);
            }
        }
        if !self.nonblocking.get() && matches!(how, Shutdown::Write | Shutdown::Both) {
            self.iface.push_out();
        }
        Ok(())
    }

    /// Aborts the connection now: an RST if it was synchronized, data in both directions discarded.
    /// The peer's reads fail with [`io::ErrorKind::ConnectionReset`].
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::NotConnected`] when the handle was no longer valid. From inside
    /// [`Interface::with_stack`] the abort is deferred to the interface's next use, and this
    /// succeeds.
    pub fn abort(self) -> io::Result<()> {
        self.released.set(true);
        let Ok(mut inner) = self.iface.borrow() else {
            self.iface.release(Deferred::Abort(self.id));
            return Ok(());
        };
        let result = inner.stack.abort(self.id).map_err(stack_error);
        drop(inner);
        if result.is_ok() && !self.nonblocking.get() {
            self.iface.push_out();
        }
        result
    }

    /// Counters and estimates of the connection: RTT, congestion window, retransmissions, bytes and
    /// segments each way.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::NotConnected`] for a released connection; [`io::ErrorKind::Other`] from
    /// inside [`Interface::with_stack`].
    pub fn stats(&self) -> io::Result<Stats> {
        self.iface.borrow()?.stack.connection_stats(self.id).map_err(stack_error)
    }

    /// The connection's RFC 9293 state.
    ///
    /// # Errors
    ///
    /// As [`stats`](Self::stats).
    pub fn state(&self) -> io::Result<State> {
        self.iface.borrow()?.stack.state(self.id).map_err(stack_error)
    }

    /// Bytes received and not yet read, and bytes in the send buffer (unsent or unacknowledged).
    ///
    /// # Errors
    ///
    /// As [`stats`](Self::stats).
    pub fn queues(&self) -> io::Result<(usize, usize)> {
        self.iface.borrow()?.stack.queues(self.id).map_err(stack_error)
    }

    /// What the connection can do now without blocking (see [`Readiness`]). Reflects the last poll
    /// of the interface: an event loop polls, then asks.
    ///
    /// # Errors
    ///
    /// As [`stats`](Self::stats).
    pub fn readiness(&self) -> io::Result<Readiness> {
        let inner = self.iface.borrow()?;
        let stack = &inner.stack;
        let state = stack.state(self.id).map_err(stack_error)?;
        let error = stack.error(self.id).map_err(stack_error)?.is_some();
        let (unread, _) = stack.queues(self.id).map_err(stack_error)?;
        let read_shut = self.read_shut.get();
        let read_closed = read_shut || (!error && unread == 0 && fin_received(state));
        Ok(Readiness {
            readable: read_shut || stack.is_readable(self.id),
            writable: !connecting(state) && stack.is_writable(self.id),
            read_closed,
            error,
        })
    }

    /// Why the connection failed, once it has (reported once, as `SO_ERROR`; reads and writes keep
    /// failing with it).
    ///
    /// # Errors
    ///
    /// As [`stats`](Self::stats).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        let error = self.iface.borrow()?.stack.error(self.id).map_err(stack_error)?;
        Ok(error
            .filter(|_| !self.error_taken.replace(true))
            .map(|e| stack_error(stack::Error::Connection(e))))
    }

    /// A non-blocking read for an async runtime: the bytes read (`Some`, 0 at the end of the
    /// stream), or `None` when nothing is readable, after registering `waker` with the stack for
    /// the stream's next readable moment ([`Stack::register_waker`]), in one use of the interface.
    ///
    /// # Errors
    ///
    /// As [`Read::read`] on a non-blocking stream (never [`io::ErrorKind::WouldBlock`]).
    pub fn read_or_register(&self, buf: &mut [u8], waker: &Waker) -> io::Result<Option<usize>> {
        if self.read_shut.get() {
            return self.read_inner(buf).map(Some);
        }
        let mut inner = self.iface.borrow()?;
        match inner.stack.recv(self.id, buf) {
            Ok(n) => Ok(Some(n)),
            Err(stack::Error::WouldBlock) => {
                inner.stack.register_waker(self.id, Interest::Read, waker).map_err(stack_error)?;
                Ok(None)
            }
            Err(e) => Err(stack_error(e)),
        }
    }

    /// A non-blocking write for an async runtime: the bytes queued (`Some`), or `None` when the
    /// send buffer has no room, after registering `waker` for the stream's next writable moment,
    /// in one use of the interface. What is queued leaves at the interface's next poll.
    ///
    /// # Errors
    ///
    /// As [`Write::write`] on a non-blocking stream (never [`io::ErrorKind::WouldBlock`]).
    pub fn write_or_register(&self, buf: &[u8], waker: &Waker) -> io::Result<Option<usize>> {
        let mut inner = self.iface.borrow()?;
        match inner.stack.send(self.id, buf) {
            Ok(n) => {
                drop(inner);
                self.queued.set(self.queued.get() + n as u64);
                Ok(Some(n))
            }
            Err(stack::Error::WouldBlock) if !buf.is_empty() => {
                inner.stack.register_waker(self.id, Interest::Write, waker).map_err(stack_error)?;
                Ok(None)
            }
            Err(e) => Err(stack_error(e)),
        }
    }

    /// [`Write::write`] whose bytes the application writes straight into the send buffer (which is
    /// also the retransmit queue), skipping the copy into it: up to `max` bytes, offered to `write` as [`Stack::send_with`] says (the
    /// free space as a slice, twice when it wraps; `write` returns how many bytes it wrote at the
    /// front). Blocks (driving the interface) while the buffer is full, unless non-blocking, and
    /// polls once after queuing, as `write` does. Returns the bytes queued; `Ok(0)` when `write`
    /// wrote none or `max` is 0.
    ///
    /// ```
    /// use std::net::{Ipv4Addr, SocketAddrV4};
    /// use std::time::Instant;
    ///
    /// use netchannel::dev::{NetDevice, Pair};
    /// use netchannel::pool::{HugePages, Pool};
    /// use tcp_lib::socket::{Interface, Stream};
    /// use tcp_lib::stack::{Config, Stack};
    /// use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
    ///
    /// let pool = Pool::builder(256).hugepages(HugePages::Never).build()?;
    /// let (dev, _peer) = Pair::new(&pool)?;
    /// let cidr = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24).expect("a /24");
    /// let stack = Stack::new(Config::new(EthernetAddress(dev.info().mac.0), cidr), Instant::now());
    /// let cache = dev.pool().cache();
    /// let iface = Interface::new(stack, dev, cache);
    /// let stream = Stream::connect_nonblocking(&iface, SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80))?;
    /// // Bytes queued while connecting follow the SYN: a counter, formatted in place.
    /// let n = stream.write_with(64, |free| {
    ///     let text = format!("{}", 12345);
    ///     free[..text.len()].copy_from_slice(text.as_bytes());
    ///     text.len()
    /// })?;
    /// assert_eq!((n, stream.queues()?.1), (5, 5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Write::write`].
    pub fn write_with(&self, max: usize, mut write: impl FnMut(&mut [u8]) -> usize) -> io::Result<usize> {
        let id = self.id;
        self.queue(max == 0, |stack| stack.send_with(id, max, &mut write))
    }

    fn read_inner(&self, buf: &mut [u8]) -> io::Result<usize> {
        if self.read_shut.get() {
            if let Ok(mut inner) = self.iface.borrow() {
                discard_input(&mut inner.stack, self.id);
            }
            return Ok(0);
        }
        let deadline = self.iface.deadline(self.read_timeout.get());
        let id = self.id;
        self.iface.block(self.nonblocking.get(), deadline, read_timed_out, |inner| {
            match inner.stack.recv(id, buf) {
                Ok(n) => Some(Ok(n)),
                Err(stack::Error::WouldBlock) => None,
                Err(e) => Some(Err(stack_error(e))),
            }
        })
    }

    fn write_inner(&self, buf: &[u8]) -> io::Result<usize> {
        let id = self.id;
        self.queue(buf.is_empty(), |stack| stack.send(id, buf))
    }

    /// Queues bytes with `send` as [`Write::write`] does (blocking while the buffer is full,
    /// unless non-blocking); `empty`: the call queues nothing whatever the room, and only reports a
    /// failed or shut-down connection, as a non-empty write would.
    fn queue(
        &self,
        empty: bool,
        mut send: impl FnMut(&mut Stack) -> Result<usize, stack::Error>,
    ) -> io::Result<usize> {
        let nonblocking = self.nonblocking.get();
        let deadline = self.iface.deadline(self.write_timeout.get());
        let n = self.iface.block(nonblocking, deadline, write_timed_out, |inner| {
            match send(&mut inner.stack) {
                Ok(n) => Some(Ok(n)),
                Err(stack::Error::WouldBlock) if !empty => None,
                Err(e) => Some(Err(stack_error(e))),
            }
        })?;
        self.queued.set(self.queued.get() + n as u64);
        if !nonblocking && n > 0 {
            self.iface.push_out();
        }
        Ok(n)
    }

    /// Drives the interface until every byte written through this handle has been transmitted at
    /// least once (not necessarily acknowledged).
    fn flush_inner(&self) -> io::Result<()> {
        let nonblocking = self.nonblocking.get();
        if nonblocking {
            self.iface.poll()?;
        }
        let deadline = self.iface.deadline(self.write_timeout.get());
        let (id, queued) = (self.id, self.queued.get());
        self.iface.block(nonblocking, deadline, write_timed_out, |inner| {
            let stack = &inner.stack;
            match (stack.connection_stats(id), stack.error(id)) {
                (Err(e), _) | (_, Err(e)) => Some(Err(stack_error(e))),
                (_, Ok(Some(e))) => Some(Err(stack_error(stack::Error::Connection(e)))),
                (Ok(stats), Ok(None)) if stats.bytes_out >= queued => Some(Ok(())),
                (Ok(_), Ok(None)) => None,
            }
        })
    }

    /// The linger close: half-close, then block until the FIN is acknowledged (or `linger` passed).
    fn linger_close(&self, linger: Duration) {
        if self.iface.with_stack(|s| s.shutdown_write(self.id)).is_err() {
            return;
        }
        let deadline = self.iface.deadline(Some(linger));
        let id = self.id;
        let _ = self.iface.block(false, deadline, write_timed_out, |inner| {
            match (inner.stack.error(id), inner.stack.state(id)) {
                (Ok(None), Ok(State::FinWait2 | State::TimeWait | State::Closed)) => Some(Ok(())),
                (Ok(None), Ok(_)) => None,
                _ => Some(Ok(())),
            }
        });
    }
}

impl<D: NetDevice> Drop for Stream<D> {
    fn drop(&mut self) {
        if self.released.get() {
            return;
        }
        let linger = self.linger.get();
        if linger == Some(Duration::ZERO) {
            if self.iface.release(Deferred::Abort(self.id)) {
                self.iface.push_out();
            }
            return;
        }
        if self.read_shut.get()
            && let Ok(mut inner) = self.iface.borrow()
        {
            discard_input(&mut inner.stack, self.id);
        }
        if let Some(linger) = linger {
            self.linger_close(linger);
        }
        if self.iface.release(Deferred::Close(self.id)) {
            self.iface.push_out();
        }
    }
}

impl<D: NetDevice> Read for &Stream<D> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inner(buf)
    }
}

impl<D: NetDevice> Read for Stream<D> {
    /// Reads what is buffered; blocks (driving the interface) while nothing is, unless
    /// non-blocking. `Ok(0)` at the end of the stream or after [`shutdown(Read)`](Self::shutdown).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inner(buf)
    }
}

impl<D: NetDevice> Write for &Stream<D> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_inner(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_inner()
    }
}

impl<D: NetDevice> Write for Stream<D> {
    /// Queues as much of `buf` as the send buffer takes, at least one byte: blocks (driving the
    /// interface) while it is full, unless non-blocking. A blocking write polls once after queuing,
    /// so the data leaves at once.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_inner(buf)
    }

    /// Drives the interface until every byte written has been transmitted (not necessarily
    /// acknowledged), bounded by the write timeout. Non-blocking: one poll, then
    /// [`io::ErrorKind::WouldBlock`] if bytes are still unsent.
    fn flush(&mut self) -> io::Result<()> {
        self.flush_inner()
    }
}
