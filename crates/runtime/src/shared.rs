//! What the cores share: the signature registry, one Affinity-Accept queue per listening port, each
//! core's handoff channel and neighbour mailbox, the stop flag, and the counters each core publishes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SendError, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use accept_affinity::{AcceptQueue, Policy};
use netchannel::channelizer::{ConsumerId, SignatureRegistry};
use netchannel::rcu::Qsbr;
use netchannel::registry::Registration;
use netchannel::signature::Signature;
use netchannel::wake::Notify;
use tcp_lib::stack::{Detached, StreamId};
use tcp_lib::wire::EthernetAddress;

use crate::stats::{CoreStats, QueueStats};

/// A connection's registry entry: its exact signature, naming the core whose stack has it.
pub(crate) type Reg = Registration<Signature, ConsumerId, Qsbr>;

/// The most neighbours a core's mailbox holds before it drops (the stacks also learn by their own
/// ARP; the mailbox only saves them a round trip).
const MAILBOX: usize = 256;

/// A neighbour one core's stack learned: its address and MAC.
type Neighbour = (IpAddr, EthernetAddress);

/// What one core sends another through its handoff channel (std `mpsc`: ordered per sender, so
/// a forwarded frame always arrives behind the connection it belongs to).
#[derive(Debug)]
pub(crate) enum Handoff {
    /// Core `to` accepted (stole) `stream`, a handle of the receiving core's stack, from the
    /// accept queue of `port`: detach it and send it over.
    Steal { stream: StreamId, to: usize, port: u16 },
    /// A connection the receiving core stole, with its registration (still naming the core it
    /// came from: the receiver re-points it once its stack has the connection).
    Adopt { detached: Box<Detached>, reg: Option<Reg>, port: u16 },
    /// A frame of a connection the sender gave to the receiver that reached the sender after.
    Frame(Vec<u8>),
}

pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Everything the cores share, behind one `Arc`.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cores: usize,
    pub(crate) registry: Arc<SignatureRegistry>,
    backlog: usize,
    /// The accept queue of each listening port, made by the first core that listens on it.
    queues: Mutex<HashMap<u16, Arc<AcceptQueue<StreamId>>>>,
    /// Per core, the sending side of its handoff channel.
    pub(crate) handoff: Vec<Sender<Handoff>>,
    /// Per core, neighbours another core's stack learned from ARP, and whether any wait (a hint
    /// read on every poll without taking the lock).
    neighbours: Vec<(Mutex<Vec<Neighbour>>, AtomicBool)>,
    /// Per core, what it last published.
    pub(crate) published: Vec<Mutex<(CoreStats, Option<QueueStats>)>>,
    stop: AtomicBool,
    /// Per core, what its idle waits sleep on: notified for its tasks (async services), its
    /// handoffs and neighbours, and the stop.
    pub(crate) wakes: Vec<Arc<Notify>>,
}

impl Shared {
    /// The shared state of `cores` cores, and each core's handoff receiver.
    pub(crate) fn new(cores: usize, backlog: usize) -> (Self, Vec<Receiver<Handoff>>) {
        let (handoff, inboxes) = (0..cores).map(|_| channel()).unzip();
        let shared = Self {
            cores,
            registry: Arc::new(SignatureRegistry::new(Qsbr::new())),
            backlog,
            queues: Mutex::new(HashMap::new()),
            handoff,
            neighbours: (0..cores).map(|_| (Mutex::new(Vec::new()), AtomicBool::new(false))).collect(),
            published: (0..cores).map(|c| Mutex::new((CoreStats::new(c), None))).collect(),
            stop: AtomicBool::new(false),
            wakes: (0..cores).map(|_| Arc::new(wake())).collect(),
        };
        (shared, inboxes)
    }

    pub(crate) fn stopping(&self) -> bool {
        // Relaxed: a plain flag; the joins at the end order everything else.
        self.stop.load(Ordering::Relaxed)
    }

    pub(crate) fn stop(&self) {
        // Relaxed: as `stopping`; the notifies below publish it to sleeping cores (their Release
        // pairs with the Acquire of the core's `Notify`).
        self.stop.store(true, Ordering::Relaxed);
        for wake in &self.wakes {
            wake.notify();
        }
    }

    /// Sends `msg` to core `to`'s handoff channel and wakes the core if it sleeps.
    pub(crate) fn send_handoff(&self, to: usize, msg: Handoff) -> Result<(), SendError<Handoff>> {
        self.handoff[to].send(msg)?;
        self.wakes[to].notify();
        Ok(())
    }

    /// The accept queue of `port`, made on first use.
    ///
    /// # Errors
    ///
    /// The accept queue's configuration error (a backlog smaller than the core count).
    pub(crate) fn accept_queue(&self, port: u16) -> Result<Arc<AcceptQueue<StreamId>>, String> {
        let mut queues = lock(&self.queues);
        if let Some(q) = queues.get(&port) {
            return Ok(Arc::clone(q));
        }
        let q = AcceptQueue::new(self.cores, self.backlog, Policy::affinity()).map_err(|e| e.to_string())?;
        let q = Arc::new(q);
        queues.insert(port, Arc::clone(&q));
        Ok(q)
    }

    /// Every port's accept queue, by port.
    pub(crate) fn accept_queues(&self) -> Vec<(u16, Arc<AcceptQueue<StreamId>>)> {
        let mut v: Vec<_> = lock(&self.queues).iter().map(|(&p, q)| (p, Arc::clone(q))).collect();
        v.sort_by_key(|&(p, _)| p);
        v
    }

    /// Tells every core but `from` that `ip` is at `mac`.
    pub(crate) fn share_neighbour(&self, from: usize, ip: IpAddr, mac: EthernetAddress) {
        for (core, (mailbox, waiting)) in self.neighbours.iter().enumerate() {
            let mut mailbox = lock(mailbox);
            if core != from && mailbox.len() < MAILBOX && !mailbox.contains(&(ip, mac)) {
                mailbox.push((ip, mac));
                // Relaxed: a hint; the mutex orders the mailbox itself, and a reader that misses
                // the hint reads it on a later poll (one that slept was woken by the notify).
                waiting.store(true, Ordering::Relaxed);
                drop(mailbox);
                self.wakes[core].notify();
            }
        }
    }

    /// What other cores learned for `core`'s stack since it last looked.
    pub(crate) fn take_neighbours(&self, core: usize) -> Vec<Neighbour> {
        let Some((mailbox, waiting)) = self.neighbours.get(core) else { return Vec::new() };
        if !self.has_neighbours_hint(waiting) {
            return Vec::new();
        }
        let mut mailbox = lock(mailbox);
        // Relaxed: cleared under the lock that guards the mailbox (see `share_neighbour`).
        waiting.store(false, Ordering::Relaxed);
        std::mem::take(&mut *mailbox)
    }

    /// Whether `core` has neighbours waiting (a cheap check for an idle loop).
    pub(crate) fn has_neighbours(&self, core: usize) -> bool {
        self.neighbours.get(core).is_some_and(|(_, waiting)| self.has_neighbours_hint(waiting))
    }

    fn has_neighbours_hint(&self, waiting: &AtomicBool) -> bool {
        // Relaxed: a hint (see `share_neighbour`).
        waiting.load(Ordering::Relaxed)
    }
}

/// A core's wakeup, with an eventfd so that an idle core can sleep on it and its channels at
/// once; without one when the process is out of descriptors (the core then naps instead).
fn wake() -> Notify {
    Notify::with_event_fd().unwrap_or_else(|e| {
        tracing::warn!("no eventfd for a core's wakeup ({e}): idle cores will nap instead of sleeping");
        Notify::new()
    })
}
