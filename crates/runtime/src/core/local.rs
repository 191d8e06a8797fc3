//! One core's own state, shared on its thread (`Rc`) by its device, its stack's hooks and the
//! service's handles.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Instant;

use accept_affinity::{AcceptError, AcceptQueue};
use netchannel::channelizer::ConsumerId;
use netchannel::signature::{Proto, Signature};
use netchannel::wake::Notify;
use tcp_lib::stack::{ListenerId, StreamId};

use crate::shared::{Handoff, Reg, Shared};
use crate::stats::HandoffStats;

/// The exact signature of a server-side connection (`local` is ours).
pub(crate) fn signature(local: SocketAddr, remote: SocketAddr) -> Option<Signature> {
    Signature::new(Proto::Tcp, local, remote).ok()
}

/// A listener of this core's stack: its port and that port's accept queue.
#[derive(Debug)]
pub(crate) struct Listening {
    pub(crate) port: u16,
    pub(crate) queue: Arc<AcceptQueue<StreamId>>,
}

/// One core's state. Every field is borrowed only for the length of one operation, never across a
/// call into the stack, the device or another field's user, so no borrow can fail.
#[derive(Debug)]
pub(crate) struct Local {
    pub(crate) core: usize,
    pub(crate) shared: Arc<Shared>,
    /// This core as the registry's consumer.
    pub(crate) consumer: ConsumerId,
    /// Registrations of this core's connections, by `(local, remote)`.
    pub(crate) regs: RefCell<HashMap<(SocketAddr, SocketAddr), Reg>>,
    /// Connections given to another core: their frames that still arrive here are forwarded to it
    /// until the instant (the registry's redirect is seen by every channelizer within a burst or
    /// so; this is ample).
    pub(crate) moved: RefCell<HashMap<Signature, (usize, Instant)>>,
    /// Established connections the stack handed to the accept hook, to be queued on their port's
    /// accept queue with their flow group (the duties know the group from the stack).
    pub(crate) established: RefCell<VecDeque<(ListenerId, StreamId)>>,
    /// Connections ready for the service's `accept`, by port: taken from the accept queue for a
    /// service waiting in `accept` (see [`Local::pull`]), or stolen and adopted (`true`).
    pub(crate) ready: RefCell<HashMap<u16, VecDeque<(StreamId, bool)>>>,
    /// Ports whose `accept` last found nothing (the service waits for a connection there).
    pub(crate) waiting: RefCell<HashSet<u16>>,
    /// This core's listeners.
    pub(crate) listeners: RefCell<HashMap<ListenerId, Listening>>,
    /// The handoff channel, and messages taken from it by an idle device wait but not yet handled.
    pub(crate) inbox: Receiver<Handoff>,
    pub(crate) stash: RefCell<VecDeque<Handoff>>,
    pub(crate) counters: Cell<HandoffStats>,
    /// Set by the duties every `PUBLISH_EVERY`: the device publishes its channels' counters at its
    /// next receive (it has no clock of its own to ask on every burst).
    pub(crate) publish_due: Cell<bool>,
    /// What an idle wait of the device sleeps on (with the core's channels): notified when a task
    /// is made runnable (on any thread: the async services' executor), a handoff or neighbour
    /// arrives, and when the runtime stops.
    pub(crate) wake: Arc<Notify>,
    /// An async executor runs on this core and takes the wakeups (`wake`) itself.
    pub(crate) runs_tasks: Cell<bool>,
    /// Connections made ready for `accept` so far: an async core wakes the tasks waiting in
    /// `accept` when it moved (or when their periodic re-check is due), not on every round.
    pub(crate) ready_events: Cell<u64>,
}

impl Local {
    pub(crate) fn new(core: usize, shared: Arc<Shared>, inbox: Receiver<Handoff>) -> Self {
        let wake = Arc::clone(&shared.wakes[core]);
        Self {
            core,
            shared,
            consumer: ConsumerId(u32::try_from(core).unwrap_or(u32::MAX)),
            regs: RefCell::default(),
            moved: RefCell::default(),
            established: RefCell::default(),
            ready: RefCell::default(),
            waiting: RefCell::default(),
            listeners: RefCell::default(),
            inbox,
            stash: RefCell::default(),
            counters: Cell::default(),
            publish_due: Cell::new(false),
            wake,
            runs_tasks: Cell::new(false),
            ready_events: Cell::new(0),
        }
    }

    /// Updates the handoff counters.
    pub(crate) fn count(&self, f: impl FnOnce(&mut HandoffStats)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
    }

    /// Whether the service waits in `accept` on `port` (its last call found nothing, and it has
    /// not taken a connection since).
    pub(crate) fn waits_for(&self, port: u16) -> bool {
        self.waiting.borrow().contains(&port)
    }

    /// Makes `stream` ready for the service's `accept` on `port` (`stolen`: adopted from another
    /// core), and counts it in [`ready_events`](Self::ready_events).
    pub(crate) fn make_ready(&self, port: u16, stream: StreamId, stolen: bool) {
        self.ready.borrow_mut().entry(port).or_default().push_back((stream, stolen));
        self.ready_events.set(self.ready_events.get().wrapping_add(1));
    }

    /// How many connections are ready for the service's `accept` on `port`.
    pub(crate) fn ready_len(&self, port: u16) -> usize {
        self.ready.borrow().get(&port).map_or(0, VecDeque::len)
    }

    /// Notes whether the service's last `accept` on `port` found nothing.
    pub(crate) fn set_waiting(&self, port: u16, waiting: bool) {
        let mut w = self.waiting.borrow_mut();
        if waiting {
            w.insert(port);
        } else {
            w.remove(&port);
        }
    }

    /// Takes one connection from `port`'s accept queue for this core: a local one is made ready
    /// for the service's `accept`; a stolen one is asked of the core it arrived on (it becomes
    /// ready once adopted). Returns whether the queue had one.
    ///
    /// The duties also call it right after queuing a connection while the service waits in
    /// `accept` (its last call found nothing), as an application thread blocked in `accept` takes
    /// the connection that arrives and returns; a service that falls behind (it does not call
    /// `accept`) lets its queue fill, and is stolen from.
    pub(crate) fn pull(&self, port: u16, queue: &AcceptQueue<StreamId>) -> Result<bool, AcceptError> {
        match queue.try_accept(self.core) {
            Ok(a) if a.remote => {
                let steal = Handoff::Steal { stream: a.conn, to: self.core, port };
                let sent =
                    a.arrived_on < self.shared.cores && self.shared.send_handoff(a.arrived_on, steal).is_ok();
                if sent {
                    self.count(|c| c.steals_requested += 1);
                } else {
                    self.count(|c| c.failed += 1);
                }
                Ok(true)
            }
            Ok(a) => {
                self.make_ready(port, a.conn, false);
                Ok(true)
            }
            Err(AcceptError::WouldBlock) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether handoff messages wait (taking one from the channel into the stash to know).
    pub(crate) fn has_mail(&self) -> bool {
        if !self.stash.borrow().is_empty() {
            return true;
        }
        match self.inbox.try_recv() {
            Ok(msg) => {
                self.stash.borrow_mut().push_back(msg);
                true
            }
            Err(_) => false,
        }
    }

    /// The next handoff message, stashed first.
    pub(crate) fn next_mail(&self) -> Option<Handoff> {
        let stashed = self.stash.borrow_mut().pop_front();
        stashed.or_else(|| self.inbox.try_recv().ok())
    }
}
