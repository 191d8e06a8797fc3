//! The connection table: the slab of [`Entry`](super::Entry)s behind every [`StreamId`], its
//! demultiplexing map, the ready list, and reclaiming a slot. A reclaimed connection's small ring
//! storage waits in a bounded free list ([`MAX_SPARES`]) for the next connection, so that short
//! connections allocate nothing for their buffers.

use super::flows::FlowKey;
use super::{Entry, Error, ListenerId, Phase, Stack, StreamId};
use crate::tcp::Connection;

/// The most reclaimed connections' storage the stack keeps for new ones (each at most 8 KiB:
/// two rings of [`RETAINED_STORAGE`](crate::tcp::buffer::RETAINED_STORAGE)).
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
        mut conn: Connection,
        listener: Option<ListenerId>,
        phase: Phase,
        app_owned: bool,
    ) -> u32 {
        if let Some(spare) = self.spares.pop() {
            conn.adopt(spare);
        }
        conn.set_budget(&self.budget);
        let key = FlowKey::new(conn.local(), conn.remote());
        let entry = Entry {
            conn,
            app_owned,
            listener,
            phase,
            in_demux: true,
            ready: false,
            timer_at: None,
            write_shut: false,
            wakers: None,
        };
        let index = self.slots.insert(entry);
        self.demux.insert(key, index);
        self.mark_ready(index);
        index
    }

    pub(super) fn mark_ready(&mut self, index: u32) {
        if let Some(e) = self.slot_entry(index)
            && !e.ready
        {
            e.ready = true;
            self.ready.push_back(index);
        }
    }

    pub(super) fn reclaim(&mut self, index: u32) {
        let Some(e) = self.slots.remove(index) else { return };
        // Only released connections are reclaimed, and release woke their wakers.
        debug_assert!(e.wakers.is_none(), "a reclaimed connection has no wakers left");
        if e.in_demux {
            self.demux.remove(&FlowKey::new(e.conn.local(), e.conn.remote()));
        }
        if e.phase == Phase::SynQueue
            && let Some(l) = e.listener.and_then(|l| self.listener_mut(l))
        {
            l.syn_queue = l.syn_queue.saturating_sub(1);
        }
        if e.ready {
            self.ready.retain(|&i| i != index);
        }
        if self.spares.len() < MAX_SPARES {
            let spare = e.conn.into_spare();
            if spare.bytes() > 0 {
                self.spares.push(spare);
            }
        }
        self.stats.connections_reclaimed += 1;
    }
}
