//! The connection table: the slab of [`Entry`](super::Entry)s behind every [`StreamId`], its
//! demultiplexing map, the ready list, and reclaiming a slot.

use super::hash::FlowKey;
use super::{Entry, Error, ListenerId, Phase, Slot, Stack, StreamId};
use crate::tcp::Connection;

impl Stack {
    pub(super) fn entry(&self, id: StreamId) -> Result<&Entry, Error> {
        let slot = self.slots.get(usize::try_from(id.index).map_err(|_| Error::InvalidHandle)?);
        match slot {
            Some(s) if s.generation == id.generation => {
                s.entry.as_ref().filter(|e| e.app_owned).ok_or(Error::InvalidHandle)
            }
            _ => Err(Error::InvalidHandle),
        }
    }

    pub(super) fn entry_mut(&mut self, id: StreamId) -> Result<&mut Entry, Error> {
        let slot = self.slots.get_mut(usize::try_from(id.index).map_err(|_| Error::InvalidHandle)?);
        match slot {
            Some(s) if s.generation == id.generation => {
                s.entry.as_mut().filter(|e| e.app_owned).ok_or(Error::InvalidHandle)
            }
            _ => Err(Error::InvalidHandle),
        }
    }

    pub(super) fn slot_entry(&mut self, index: u32) -> Option<&mut Entry> {
        self.slots.get_mut(usize::try_from(index).ok()?)?.entry.as_mut()
    }

    pub(super) fn stream_id(&self, index: u32) -> StreamId {
        let generation =
            usize::try_from(index).ok().and_then(|i| self.slots.get(i)).map_or(0, |s| s.generation);
        StreamId { index, generation }
    }

    pub(super) fn insert(
        &mut self,
        conn: Connection,
        listener: Option<ListenerId>,
        phase: Phase,
        app_owned: bool,
    ) -> u32 {
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
        };
        let index = if let Some(i) = self.free.pop() {
            i
        } else {
            self.slots.push(Slot::default());
            u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
        };
        if let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) {
            slot.entry = Some(entry);
        }
        self.demux.insert(key, index);
        self.live += 1;
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
        let Some(slot) = usize::try_from(index).ok().and_then(|i| self.slots.get_mut(i)) else { return };
        let Some(e) = slot.entry.take() else { return };
        slot.generation = slot.generation.wrapping_add(1);
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
        self.free.push(index);
        self.live -= 1;
        self.stats.connections_reclaimed += 1;
    }
}
