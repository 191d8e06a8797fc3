//! The accept hook of a core's stack: every passive connection's exact signature is registered to
//! this core as soon as the stack creates it, and established connections go to the port's
//! Affinity-Accept queue instead of the stack's own.

use std::net::SocketAddr;
use std::rc::Rc;

use tcp_lib::stack::{AcceptHook, ListenerId, StreamId};

use super::local::{Local, signature};

/// Installed on every core's stack by the runtime.
#[derive(Debug)]
pub(crate) struct Hook(pub(crate) Rc<Local>);

impl AcceptHook for Hook {
    fn has_room(&mut self, listener: ListenerId) -> bool {
        let local = &self.0;
        let listeners = local.listeners.borrow();
        let Some(l) = listeners.get(&listener) else { return false };
        // Connections taken for the service but not yet accepted count against its share too.
        let held = l.queue.queue_len(local.core) + local.established.borrow().len() + local.ready_len(l.port);
        held < l.queue.per_core_max()
    }

    fn established(&mut self, listener: ListenerId, stream: StreamId) {
        self.0.established.borrow_mut().push_back((listener, stream));
    }

    /// Called before the stack sends anything for the connection, so the entry is in place
    /// before the peer can answer: from here on every channelizer delivers the connection's
    /// frames to this core, whichever queue they arrive on.
    fn opened(&mut self, _listener: ListenerId, local: SocketAddr, remote: SocketAddr) {
        let core = &self.0;
        let reg =
            signature(local, remote).and_then(|sig| core.shared.registry.register(sig, core.consumer).ok());
        match reg {
            Some(reg) => {
                core.regs.borrow_mut().insert((local, remote), reg);
            }
            None => core.count(|c| c.unregistered += 1),
        }
    }
}
