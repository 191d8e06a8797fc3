//! The connection table: the slab of [`Entry`]s behind every [`StreamId`], its
//! demultiplexing map, the ready list, and reclaiming a slot. A reclaimed connection's small ring
//! storage waits in a bounded free list ([`MAX_SPARES`]) for the next connection, so that short
//! connections allocate nothing for their buffers.

use std::collections::VecDeque;

use super::flows::FlowKey;
use super::{Entry, Error, ListenerId, Phase, Stack, StreamId};
use crate::tcp::Connection;

/// The most reclaimed connections' storage the stack keeps for new ones (each at most 8 KiB:
/// two rings of `tcp::buffer::RETAINED_STORAGE`).
pub(super) const MAX_SPARES: usize = 64;

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

    pub(super) fn insert(
        &mut self,
        conn: Connection,
        listener: Option<ListenerId>,
        phase: Phase,
        app_owned: bool,
    ) -> u32 {
        self.insert_with(|| conn, listener, phase, app_owned)
    }

    /// [`insert`](Self::insert) of the connection `make` builds, built in its slot: a new
    /// connection (1.7 KB) is not copied from where it was made into the table.
    #[inline]
    pub(super) fn insert_with(
        &mut self,
        make: impl FnOnce() -> Connection,
        listener: Option<ListenerId>,
        phase: Phase,
        app_owned: bool,
    ) -> u32 {
        let index = self.slots.insert_with(|| Entry {
            conn: make(),
            app_owned,
            listener,
            phase,
            in_demux: true,
            ready: false,
            timer_at: None,
            write_shut: false,
            wakers: None,
        });
        let spare = self.spares.pop();
        let budget = &self.budget;
        let Some(e) = self.slots.get_mut(index) else { return index };
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

    /// Drops the connection in slot `index` (where it lies: the 1.7 KB are not copied out),
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
    /// Queues this entry (in slot `index`) on the stack's `ready` list for the next transmit,
    /// unless it is there already.
    pub(super) fn mark_ready(&mut self, index: u32, ready: &mut VecDeque<u32>) {
        if !self.ready {
            self.ready = true;
            ready.push_back(index);
        }
    }
}
