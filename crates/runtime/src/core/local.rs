//! One core's own state, shared on its thread (`Rc`) by its device, its stack's hooks and the
//! service's handles.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Instant;

use accept_affinity::AcceptQueue;
use netchannel::channelizer::ConsumerId;
use netchannel::signature::{Proto, Signature};
use tcp_lib::stack::{ListenerId, StreamId};

use crate::shared::{Handoff, Reg, Shared};
use crate::stats::HandoffStats;

/// The exact signature of a server-side connection (`local` is ours).
pub(crate) fn signature(local: SocketAddrV4, remote: SocketAddrV4) -> Option<Signature> {
    Signature::new(Proto::Tcp, SocketAddr::V4(local), SocketAddr::V4(remote)).ok()
}

/// A listener of this core's stack: its port's accept queue.
#[derive(Debug)]
pub(crate) struct Listening {
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
    pub(crate) regs: RefCell<HashMap<(SocketAddrV4, SocketAddrV4), Reg>>,
    /// Connections given to another core: their frames that still arrive here are forwarded to it
    /// until the instant (the registry's redirect is seen by every channelizer within a burst or
    /// so; this is ample).
    pub(crate) moved: RefCell<HashMap<Signature, (usize, Instant)>>,
    /// Established connections the stack handed to the accept hook, to be queued on their port's
    /// accept queue with their flow group (the duties know the group from the stack).
    pub(crate) established: RefCell<Vec<(ListenerId, StreamId)>>,
    /// Connections this core stole and adopted, ready for its service's `accept`, by port.
    pub(crate) stolen: RefCell<HashMap<u16, VecDeque<StreamId>>>,
    /// This core's listeners.
    pub(crate) listeners: RefCell<HashMap<ListenerId, Listening>>,
    /// The handoff channel, and messages taken from it by an idle device wait but not yet handled.
    pub(crate) inbox: Receiver<Handoff>,
    pub(crate) stash: RefCell<VecDeque<Handoff>>,
    pub(crate) counters: Cell<HandoffStats>,
    /// Set by the duties every `PUBLISH_EVERY`: the device publishes its channels' counters at its
    /// next receive (it has no clock of its own to ask on every burst).
    pub(crate) publish_due: Cell<bool>,
}

impl Local {
    pub(crate) fn new(core: usize, shared: Arc<Shared>, inbox: Receiver<Handoff>) -> Self {
        Self {
            core,
            shared,
            consumer: ConsumerId(u32::try_from(core).unwrap_or(u32::MAX)),
            regs: RefCell::default(),
            moved: RefCell::default(),
            established: RefCell::default(),
            stolen: RefCell::default(),
            listeners: RefCell::default(),
            inbox,
            stash: RefCell::default(),
            counters: Cell::default(),
            publish_due: Cell::new(false),
        }
    }

    /// Updates the handoff counters.
    pub(crate) fn count(&self, f: impl FnOnce(&mut HandoffStats)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
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
