//! The connection table: the slab of [`Entry`]s behind every [`StreamId`], its
//! demultiplexing map, the ready list, and reclaiming a slot. A reclaimed connection's small ring
//! storage waits in a bounded free list ([`MAX_SPARES`]) for the next connection, so that short
//! connections allocate nothing for their buffers. The connections one configuration opens
//! share it ([`SharedTcp`]).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::flows::FlowKey;
use super::{Entry, Error, ListenerId, Phase, Stack, StreamId};
use crate::tcp::{self, Connection, State};
use crate::wire::SeqNumber;

/// The most reclaimed connections' storage the stack keeps for new ones (each at most 8 KiB:
/// two rings of `tcp::buffer::RETAINED_STORAGE`).
pub(super) const MAX_SPARES: usize = 64;

/// A TCP configuration as the connections it opens share it: the stack's, or a listener's. One
/// copy per family, with the MSS clamped to what the interface's MTU leaves over that family's
/// header (an IPv6 header is 20 bytes longer), each behind an [`Arc`] that every connection
/// opened with it holds instead of a copy of its 224 bytes.
#[derive(Clone, Debug)]
pub(super) struct SharedTcp {
    v4: Arc<tcp::Config>,
    v6: Arc<tcp::Config>,
}

impl SharedTcp {
    /// `tcp` for an interface whose MTU allows segments of `mtu_mss` bytes over IPv4.
    pub(super) fn new(tcp: tcp::Config, mtu_mss: u16) -> Self {
        let family = |ipv6| Arc::new(Self::clamp(tcp, mtu_mss, ipv6));
        Self { v4: family(false), v6: family(true) }
    }

    /// `tcp` for a connection over IPv6 (`ipv6`) or IPv4 on an interface whose MTU allows
    /// segments of `mtu_mss` bytes over IPv4: the MSS clamped to what the MTU leaves over the
    /// family's header (an IPv6 header is 20 bytes longer).
    pub(super) fn clamp(tcp: tcp::Config, mtu_mss: u16, ipv6: bool) -> tcp::Config {
        let extra = if ipv6 { 20 } else { 0 };
        tcp::Config { mss: tcp.mss.min(mtu_mss.saturating_sub(extra).max(64)), ..tcp }
    }

    /// The configuration of a connection to `remote`.
    pub(super) fn for_remote(&self, remote: IpAddr) -> &Arc<tcp::Config> {
        if remote.is_ipv6() { &self.v6 } else { &self.v4 }
    }
}

impl Stack {
    pub(super) fn entry(&self, id: StreamId) -> Result<&Entry, Error> {
        self.slots.get_checked(id.index, id.generation).filter(|e| e.app_owned).ok_or(Error::InvalidHandle)
    }

    pub(super) fn entry_mut(&mut self, id: StreamId) -> Result<&mut Entry, Error> {
        self.slots
            .get_checked_mut(id.index, id.generation)
            .filter(|e| e.app_owned)
            .ok_or(Error::InvalidHandle)
    }

    pub(super) fn slot_entry(&mut self, index: u32) -> Option<&mut Entry> {
        self.slots.get_mut(index)
    }

    pub(super) fn stream_id(&self, index: u32) -> StreamId {
        let generation = self.slots.generation(index).unwrap_or(0);
        StreamId { index, generation }
    }

    /// Stores `conn`, a connection built elsewhere (a SYN cookie's, a migrated one), in the
    /// table: a copy of its 2 KB into the slot, which [`insert_new`](Self::insert_new) avoids.
    pub(super) fn insert(
        &mut self,
        conn: Connection,
        listener: Option<ListenerId>,
        phase: Phase,
        app_owned: bool,
    ) -> u32 {
        let index = self.slots.insert_with(|| Entry::new(conn, listener, phase, app_owned));
        self.register(index, false)
    }

    /// Opens a connection in a free slot of the table: actively (SYN-SENT, the application's)
    /// when `listener` is `None`, else passively (SYN-RECEIVED, in the listener's SYN queue,
    /// the SYN still to be taken). The connection is written in the slot where it will live:
    /// [`Connection::open`] is inlined here, into the slab's in-place insert, so that no
    /// temporary holds it (a connection is 2 KB; copying it from a temporary cost about 250
    /// instructions and 37 cache lines a connection, when it was 2.3 KB). Out of line, so that
    /// the active and the passive opens share this one copy of the connection's initialisation.
    #[inline(never)]
    pub(super) fn insert_new(
        &mut self,
        config: Arc<tcp::Config>,
        addresses: (SocketAddr, SocketAddr),
        iss: SeqNumber,
        listener: Option<ListenerId>,
    ) -> u32 {
        let now = self.now;
        let passive = listener.is_some();
        let (state, phase) =
            if passive { (State::SynReceived, Phase::SynQueue) } else { (State::SynSent, Phase::Open) };
        let index = self.slots.insert_with(|| {
            Entry::new(
                Connection::open(config, addresses, iss, now, (state, passive)),
                listener,
                phase,
                !passive,
            )
        });
        self.register(index, true)
    }

    /// A new connection's place in the stack, once its entry is in slot `index`: what
    /// [`Connection::open`] left for it to finish there when `opened` (BBR's boxed state; a
    /// connection [`insert`](Self::insert) stores is complete, and a migrated one carries its
    /// running state), ring storage from a reclaimed connection, the buffer budget, the
    /// demultiplexing map, the ready list.
    fn register(&mut self, index: u32, opened: bool) -> u32 {
        let spare = self.spares.pop();
        let budget = &self.budget;
        let Some(e) = self.slots.get_mut(index) else { return index };
        if opened {
            e.conn.finish_open();
        }
        if let Some(spare) = spare {
            e.conn.adopt(spare);
        }
        e.conn.set_budget(budget);
        let key = FlowKey::new(e.conn.local(), e.conn.remote());
        self.demux.insert(key, index);
        self.mark_ready(index);
        index
    }

    pub(super) fn mark_ready(&mut self, index: u32) {
        if let Some(e) = self.slots.get_mut(index) {
            e.mark_ready(index, &mut self.ready);
        }
    }

    /// Drops the connection in slot `index` (where it lies: its 2 KB are not copied out),
    /// after taking it out of the tables and keeping its ring storage for the next connection.
    pub(super) fn reclaim(&mut self, index: u32) {
        let keep_spare = self.spares.len() < MAX_SPARES;
        let Some(e) = self.slots.get_mut(index) else { return };
        // Only released connections are reclaimed, and release woke their wakers.
        debug_assert!(e.wakers.is_none(), "a reclaimed connection has no wakers left");
        let key = e.in_demux.then(|| FlowKey::new(e.conn.local(), e.conn.remote()));
        let (phase, listener, ready) = (e.phase, e.listener, e.ready);
        let spare = if keep_spare { Some(e.conn.take_spare()) } else { None };
        self.slots.discard(index);
        if let Some(key) = key {
            self.demux.remove(&key);
        }
        if phase == Phase::SynQueue
            && let Some(l) = listener.and_then(|l| self.listener_mut(l))
        {
            l.syn_queue = l.syn_queue.saturating_sub(1);
        }
        if ready {
            self.ready.retain(|&i| i != index);
        }
        if let Some(spare) = spare.filter(|s| s.bytes() > 0) {
            self.spares.push(spare);
        }
        self.stats.connections_reclaimed += 1;
    }
}

impl Entry {
    /// A new connection's entry. Always inlined: [`Stack::insert_new`] builds the connection
    /// into it in place.
    #[inline(always)]
    fn new(conn: Connection, listener: Option<ListenerId>, phase: Phase, app_owned: bool) -> Self {
        Self {
            conn,
            app_owned,
            listener,
            phase,
            in_demux: true,
            ready: false,
            timer_at: None,
            write_shut: false,
            wakers: None,
        }
    }

    /// Queues this entry (in slot `index`) on the stack's `ready` list for the next transmit,
    /// unless it is there already.
    pub(super) fn mark_ready(&mut self, index: u32, ready: &mut VecDeque<u32>) {
        if !self.ready {
            self.ready = true;
            ready.push_back(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};
    use std::sync::Arc;
    use std::time::Instant;

    use netchannel::dev::PacketBatch;
    use netchannel::pool::{HugePages, Pool};

    use super::super::{Config, Stack};
    use crate::tcp;
    use crate::wire::{EthernetAddress, Ipv4Cidr};

    fn stack() -> Stack {
        let cidr = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24).expect("a /24");
        Stack::new(Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]), cidr), Instant::now())
    }

    fn remote(port: u16) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), port))
    }

    #[test]
    fn connections_share_the_stacks_configuration_and_give_it_back() {
        let mut s = stack();
        let shared = |s: &Stack| Arc::strong_count(s.tcp.for_remote(remote(1).ip()));
        assert_eq!(shared(&s), 1);
        let ids: Vec<_> = (1..=3).map(|p| s.connect(remote(p)).expect("a connection")).collect();
        assert_eq!(shared(&s), 4, "each connection holds the stack's configuration, not a copy");
        // Its own configuration: a connection of its own, the stack's untouched.
        let own = s.connect_with(remote(4), tcp::Config { send_buffer: 4096, ..tcp::Config::default() });
        assert!(own.is_ok());
        assert_eq!(shared(&s), 4);
        // SO_SNDBUF on a connection copies the configuration it changes.
        s.set_send_buffer(ids[0], 8192).expect("an open connection");
        assert_eq!(shared(&s), 3);
        for id in ids {
            s.abort(id).expect("an open connection");
        }
        // Released connections are reclaimed in the next transmit.
        let pool = Pool::builder(64).hugepages(HugePages::Never).build().expect("a pool");
        let cache = pool.cache();
        let mut out = PacketBatch::with_capacity(64);
        s.transmit(Instant::now(), &cache, &mut out);
        assert_eq!(shared(&s), 1, "a reclaimed connection gives its share back");
    }
}
