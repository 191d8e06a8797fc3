//! What a core does besides moving frames, with its stack, at the start of every poll of its
//! interface ([`tcp_lib::socket::PollHook`]), so a service blocked in a read keeps it going too:
//!
//! * neighbours other cores learned go into this stack's ARP table;
//! * the handoff channel: steal requests for this stack's connections (detach, send, forward what
//!   still arrives), connections this core stole (adopt, re-point the registration, queue for the
//!   service's `accept`), and frames forwarded behind them;
//! * established connections go to their port's accept queue with their flow group;
//! * registrations of connections the stack no longer holds are dropped (every 50 ms);
//! * the counters are published (every [`PUBLISH_EVERY`]).
//!
//! # The handoff protocol
//!
//! Core `s` takes connection `c` from core `v`'s accept queue (Affinity-Accept's steal): `s` sends
//! `Steal(c)` to `v`. `v` [`Stack::detach`]es `c`, sends `Adopt(c, its registration)` to `s`, and
//! remembers `c`'s signature: until [`FORWARD_FOR`] passes, frames of `c` that still reach `v`
//! (classified before the redirect below) are forwarded to `s` as `Frame`s, behind `Adopt` in the
//! same ordered channel. `s` [`Stack::adopt`]s `c` and re-points its registration to itself, after
//! which every channelizer delivers `c`'s frames to `s`. So every frame of `c` reaches a stack that
//! has `c`, in order per path, and none draws a reset. When the steal cannot complete (the
//! connection failed before `v` saw the request, or `s` is gone), it is counted in
//! [`HandoffStats::failed`](crate::stats::HandoffStats) or served where it is.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use netchannel::signature::FlowGroup;
use tcp_lib::socket::PollHook;
use tcp_lib::stack::{Detached, Stack, StreamId};

use super::local::{Local, signature};
use crate::shared::{Handoff, Reg, lock};
use crate::stats::PUBLISH_EVERY;

/// How long a core forwards the frames of a connection it gave away.
pub(crate) const FORWARD_FOR: Duration = Duration::from_secs(1);
/// How often a core drops the registrations of connections its stack no longer holds.
const SWEEP_EVERY: Duration = Duration::from_millis(50);

/// The poll hook of one core's interface.
#[derive(Debug)]
pub(crate) struct Duties {
    local: Rc<Local>,
    last_sweep: Instant,
    last_publish: Instant,
}

impl Duties {
    pub(crate) fn new(local: Rc<Local>, now: Instant) -> Self {
        Self { local, last_sweep: now, last_publish: now }
    }

    /// Core `to` stole `stream`: detach it and send it there with its registration.
    fn give(&self, stack: &mut Stack, now: Instant, stream: StreamId, to: usize, port: u16) {
        let local = &self.local;
        let Ok(detached) = stack.detach(stream) else {
            // Gone before the request came (reset, timed out): nothing to give.
            local.count(|c| c.failed += 1);
            return;
        };
        let key = (detached.local(), detached.remote());
        let reg = local.regs.borrow_mut().remove(&key);
        if let Some(sig) = signature(key.0, key.1) {
            local.moved.borrow_mut().insert(sig, (to, now + FORWARD_FOR));
        }
        local.count(|c| c.given += 1);
        let msg = Handoff::Adopt { detached: Box::new(detached), reg, port };
        if let Err(back) = local.shared.send_handoff(to, msg) {
            // The stealer is gone (stopping): keep the connection here.
            if let Handoff::Adopt { detached, reg, port } = back.0 {
                self.take(stack, now, *detached, reg, port);
            }
        }
    }

    /// Adopts a connection this core stole and makes it this core's: registration re-pointed,
    /// queued for the service's `accept` on `port`.
    fn take(&self, stack: &mut Stack, now: Instant, detached: Detached, reg: Option<Reg>, port: u16) {
        let local = &self.local;
        let key = (detached.local(), detached.remote());
        match stack.adopt(detached, now) {
            Ok(id) => {
                if let Some(sig) = signature(key.0, key.1) {
                    local.moved.borrow_mut().remove(&sig);
                }
                if let Some(mut reg) = reg {
                    reg.repoint(local.consumer);
                    local.regs.borrow_mut().insert(key, reg);
                }
                local.make_ready(port, id, true);
            }
            Err(_) => local.count(|c| c.failed += 1),
        }
    }

    fn handoffs(&self, stack: &mut Stack, now: Instant) -> bool {
        let mut busy = false;
        while let Some(msg) = self.local.next_mail() {
            busy = true;
            match msg {
                Handoff::Steal { stream, to, port } => self.give(stack, now, stream, to, port),
                Handoff::Adopt { detached, reg, port } => self.take(stack, now, *detached, reg, port),
                Handoff::Frame(frame) => stack.receive(now, &frame),
            }
        }
        busy
    }

    /// Queues one established connection on its port's accept queue (the oldest); returns whether
    /// it did. One per poll, as a kernel queues each connection as its handshake completes: the
    /// service runs between polls, so a service waiting in `accept` takes each one before the next
    /// is queued, and a burst does not make a core that keeps up look busy (Affinity-Accept
    /// measures busyness by the queue's length on enqueue; a busy core never steals). A
    /// connection that is not yet queued still counts against the core's share (`has_room`).
    fn enqueue(&self, stack: &mut Stack) -> bool {
        let local = &self.local;
        let next = local.established.borrow_mut().pop_front();
        let Some((listener, stream)) = next else { return false };
        let listening = local.listeners.borrow().get(&listener).map(|l| (l.port, Arc::clone(&l.queue)));
        let Some((port, queue)) = listening else {
            // Its listener was dropped meanwhile.
            let _ = stack.abort(stream);
            return true;
        };
        let group = stack.addrs(stream).map_or(FlowGroup(0), |(_, remote)| FlowGroup::of_port(remote.port()));
        if let Err(e) = queue.enqueue(local.core, group, stream) {
            let _ = stack.abort(e.into_inner());
            local.count(|c| c.rejected += 1);
        } else if local.waits_for(port) {
            // A thread blocked in accept takes this one connection and returns.
            local.set_waiting(port, false);
            let _ = local.pull(port, &queue);
        }
        true
    }

    fn sweep(&mut self, stack: &Stack, now: Instant) {
        if now.duration_since(self.last_sweep) < SWEEP_EVERY {
            return;
        }
        self.last_sweep = now;
        self.local.regs.borrow_mut().retain(|&(l, r), _| stack.contains(l, r));
        self.local.moved.borrow_mut().retain(|_, &mut (_, until)| until > now);
    }
}

/// Publishes the stack's side of a core's counters.
pub(crate) fn publish_stack(local: &Local, stack: &Stack) {
    let mut published = lock(&local.shared.published[local.core]);
    let stats = &mut published.0;
    stats.stack = *stack.stats();
    stats.connections = stack.connection_count();
    stats.time_wait = stack.time_wait_count();
    stats.registered = local.regs.borrow().len();
    stats.handoff = local.counters.get();
}

impl PollHook for Duties {
    fn poll(&mut self, stack: &mut Stack, now: Instant) -> bool {
        let mut busy = false;
        for (ip, mac) in self.local.shared.take_neighbours(self.local.core) {
            stack.learn_neighbor(ip, mac);
            busy = true;
        }
        busy |= self.handoffs(stack, now);
        busy |= self.enqueue(stack);
        self.sweep(stack, now);
        if now.duration_since(self.last_publish) >= PUBLISH_EVERY {
            self.last_publish = now;
            publish_stack(&self.local, stack);
            self.local.publish_due.set(true);
        }
        busy
    }
}
