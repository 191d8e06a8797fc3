//! A safe net channel of packets between cores: [`PacketTx`] sends a packet's index, [`PacketRx`]
//! rebuilds the packet on the receiving side with that side's cache; a refused push hands the packet
//! back in a [`PacketPushError`]. A frame of a shared buffer ([`SharedPacket::frame`], a send by
//! reference on its way to the device behind the channel) crosses as its token (the index with
//! [`FRAME_TAG`]) and is rebuilt as that frame ([`PoolCache::frame_from_raw`]): the receiver can
//! write only its headers, as the sender could.

use std::fmt;
use std::time::Duration;

#[cfg(doc)]
use super::SharedPacket;
use super::{FRAME_TAG, Packet, Pool, PoolCache};
use crate::channel::{self, ArmedWakeups, Consumer, Producer, Wait, WakeupBatch};

/// The error [`PacketTx::push`] returns; the packet comes back to the caller, who still owns it.
#[derive(Debug, thiserror::Error)]
pub enum PacketPushError<'c> {
    /// The channel is full.
    #[error("packet channel full; buffer {} not pushed", .0.index())]
    Full(Packet<'c>),
    /// The packet belongs to a different pool than the channel.
    #[error("buffer {} belongs to another pool than the channel", .0.index())]
    WrongPool(Packet<'c>),
}

impl<'c> PacketPushError<'c> {
    /// The packet that was not pushed.
    #[must_use]
    pub fn into_inner(self) -> Packet<'c> {
        match self {
            Self::Full(packet) | Self::WrongPool(packet) => packet,
        }
    }
}

/// The sending end of a channel of packets; see [`Pool::packet_channel`]. `Send`, not `Sync`.
pub struct PacketTx {
    pub(super) tx: Producer,
    pub(super) pool_id: u64,
}

impl fmt::Debug for PacketTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketTx").field("pool", &self.pool_id).field("channel", &self.tx).finish()
    }
}

impl PacketTx {
    /// The [id](super::Pool::id) of the pool whose packets this channel carries.
    #[must_use]
    #[inline]
    pub fn pool_id(&self) -> u64 {
        self.pool_id
    }

    /// Sends a burst of packets given as raw buffer indices, with one index publication and one wakeup
    /// check for the whole burst; returns how many were sent (from the front). The rest still belong to
    /// the caller, who frees or retries them.
    ///
    /// # Safety
    ///
    /// Every index names a buffer of this channel's pool ([`PacketTx::pool_id`]) that the caller owns
    /// (from [`Packet::into_raw`] or [`PoolCache::alloc_burst`]) with no [`Packet`] handle alive, and
    /// no index appears twice: the receiver rebuilds a packet from each one it pops.
    #[inline]
    pub unsafe fn push_raw_burst(&mut self, indices: &[u32]) -> usize {
        // Pool indices are never `channel::EMPTY` (`MAX_BUFFERS`): no check.
        self.tx.push_indices(indices)
    }

    /// Sends `packet` (its index; the metadata travels in the buffer; a frame of a shared buffer
    /// its token, and the receiver gets that frame). The receiver now owns it.
    ///
    /// # Errors
    ///
    /// The packet comes back in [`PacketPushError::Full`] when the channel is full, and in
    /// [`PacketPushError::WrongPool`] when it is not from this channel's pool.
    #[inline]
    pub fn push<'c>(&mut self, packet: Packet<'c>) -> Result<(), PacketPushError<'c>> {
        if packet.cache.pool.shared.id != self.pool_id {
            return Err(PacketPushError::WrongPool(packet));
        }
        match self.tx.push(packet.index) {
            Ok(()) => {
                // Ownership moved into the channel with the index.
                let _ = packet.into_raw();
                Ok(())
            }
            Err(_) => Err(PacketPushError::Full(packet)),
        }
    }

    /// Whether the receiving end has been dropped (packets pushed after that are lost, and
    /// [`Pool::check_leaks`] reports them missing).
    #[must_use]
    #[inline]
    pub fn is_abandoned(&self) -> bool {
        self.tx.is_abandoned()
    }

    /// Free slots right now; see [`Producer::free_space`].
    #[must_use]
    #[inline]
    pub fn free_space(&mut self) -> usize {
        self.tx.free_space()
    }

    /// The underlying channel's counters.
    #[must_use]
    pub fn stats(&self) -> channel::ChannelStats {
        self.tx.stats()
    }
}

/// The receiving end of a channel of packets; see [`Pool::packet_channel`]. `Send`, not `Sync`.
///
/// Dropping it returns the packets still queued to the depot.
pub struct PacketRx {
    pub(super) rx: Consumer,
    pub(super) pool: Pool,
}

impl fmt::Debug for PacketRx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketRx").field("pool", &self.pool.id()).field("channel", &self.rx).finish()
    }
}

impl PacketRx {
    /// Receives a packet, owned by `cache` from now on (it returns there when dropped; a frame of a
    /// shared buffer is released there). `None` when the channel is empty, or when `cache` belongs
    /// to another pool than the channel.
    #[must_use = "a popped packet that is dropped at once is freed unread"]
    #[inline]
    pub fn pop<'c>(&mut self, cache: &'c PoolCache) -> Option<Packet<'c>> {
        if cache.pool.shared.id != self.pool.shared.id {
            return None;
        }
        let index = self.rx.pop()?;
        if index & FRAME_TAG != 0 {
            // SAFETY: as below, for the token of a frame (it carries `FRAME_TAG`).
            return Some(unsafe { cache.frame_from_raw(index) });
        }
        // SAFETY: only `PacketTx::push` feeds this channel, with indices of live packets of this pool
        // (checked) whose handles it gave up; popping transfers that ownership to us.
        Some(unsafe { cache.packet_from_raw(index) })
    }

    /// Frees every queued packet into `cache` without building packet handles (a return path: other
    /// threads send buffers back, the allocating thread reclaims them); returns how many. Returns 0
    /// when `cache` belongs to another pool than the channel.
    pub fn reclaim(&mut self, cache: &PoolCache) -> usize {
        if cache.pool.shared.id != self.pool.shared.id {
            return 0;
        }
        // SAFETY: as in `pop`: every index in the channel is an owned buffer of this pool.
        unsafe { cache.reclaim(&mut self.rx) }
    }

    /// Blocks until a packet is ready, the sender is gone and the channel drained, or `timeout`
    /// passes; see [`Consumer::wait`].
    #[inline]
    pub fn wait(&mut self, timeout: Option<Duration>) -> Wait {
        self.rx.wait(timeout)
    }

    /// Whether the sending end has been dropped (packets it pushed may still be queued).
    #[must_use]
    #[inline]
    pub fn is_abandoned(&self) -> bool {
        self.rx.is_abandoned()
    }

    /// Asks the sender for a wakeup and re-checks the channel; `true` when the caller may sleep
    /// (see [`Consumer::request_wakeup`]).
    #[inline]
    pub fn request_wakeup(&mut self) -> bool {
        self.rx.request_wakeup()
    }

    /// Arms this channel's wakeup in `batch` (one barrier for many channels); see
    /// [`WakeupBatch::arm`].
    #[inline]
    pub fn arm_wakeup(&mut self, batch: &mut WakeupBatch) -> bool {
        batch.arm(&mut self.rx)
    }

    /// After the batch's fence: whether the channel is still empty and its sender alive; see
    /// [`ArmedWakeups::idle`].
    #[inline]
    pub fn idle_after(&mut self, armed: &ArmedWakeups) -> bool {
        armed.idle(&mut self.rx)
    }

    /// The eventfd of a [`WakeMode::EventFd`](crate::channel::WakeMode::EventFd) channel, to poll
    /// after [`request_wakeup`](Self::request_wakeup) (see [`Consumer::event_fd`]).
    #[cfg(not(loom))]
    #[must_use]
    pub fn event_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.rx.event_fd()
    }

    /// Packets ready right now; see [`Consumer::len`].
    #[must_use]
    #[inline]
    pub fn len(&mut self) -> usize {
        self.rx.len()
    }

    /// Whether no packet is ready right now.
    #[must_use]
    #[inline]
    pub fn is_empty(&mut self) -> bool {
        self.rx.is_empty()
    }

    /// The underlying channel's counters.
    #[must_use]
    pub fn stats(&self) -> channel::ChannelStats {
        self.rx.stats()
    }
}

impl Drop for PacketRx {
    fn drop(&mut self) {
        let shared = &*self.pool.shared;
        let mut buf = [0u32; 64];
        let mut frames = Vec::new();
        let mut depot = shared.lock_depot();
        loop {
            let n = self.rx.pop_burst(&mut buf);
            if n == 0 {
                break;
            }
            for &index in &buf[..n] {
                if index & FRAME_TAG == 0 {
                    shared.track(index);
                    depot.free.push(index);
                } else {
                    frames.push(index);
                }
            }
        }
        drop(depot);
        if !frames.is_empty() {
            // Frames are released (their buffer freed only with its last reference), in a cache.
            let cache = self.pool.cache();
            // SAFETY: the tokens of frames of this pool whose handles the sender gave up, popped
            // (so owned) here, each once.
            unsafe { cache.free_burst(&frames) };
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::pool::tests::pool;

    fn pool_for_other() -> Pool {
        pool(4, 1, 2)
    }

    #[test]
    fn packet_channel_moves_packets_and_hands_them_back() {
        let pool = pool(8, 2, 4);
        let other = pool_for_other();
        let (mut tx, mut rx) = pool.packet_channel(2).unwrap();
        let a = pool.cache();
        let b = pool.cache();
        let foreign_cache = other.cache();

        let foreign = foreign_cache.alloc().unwrap();
        let foreign = match tx.push(foreign) {
            Err(PacketPushError::WrongPool(p)) => p,
            r => panic!("foreign packet accepted: {r:?}"),
        };
        drop(foreign);

        for byte in 1..=2u8 {
            let mut p = a.alloc().unwrap();
            p.extend_from_slice(&[byte; 3]).unwrap();
            tx.push(p).unwrap();
        }
        let third = a.alloc().unwrap();
        let index = third.index();
        let back = tx.push(third).unwrap_err();
        assert!(matches!(back, PacketPushError::Full(_)));
        assert!(back.to_string().contains("full"));
        assert_eq!(back.into_inner().index(), index);

        assert!(rx.pop(&foreign_cache).is_none(), "a cache of another pool gets nothing");
        let p = rx.pop(&b).unwrap();
        assert_eq!(p.data(), &[1; 3]);
        drop(p);
        assert_eq!(b.len(), 1);
        assert_eq!(rx.reclaim(&b), 1);
        assert_eq!(b.len(), 2);
        assert_eq!(rx.reclaim(&foreign_cache), 0);
        assert!(rx.pop(&b).is_none());
        drop((a, b, foreign_cache));
        pool.check_leaks().unwrap();
        other.check_leaks().unwrap();
    }

    #[test]
    fn dropping_the_receiver_returns_queued_packets() {
        let pool = pool(8, 2, 4);
        let (mut tx, rx) = pool.packet_channel(8).unwrap();
        let cache = pool.cache();
        for _ in 0..5 {
            tx.push(cache.alloc().unwrap()).unwrap();
        }
        assert_eq!(pool.audit().outstanding, 5);
        drop(rx);
        assert!(tx.is_abandoned());
        assert_eq!(pool.audit().outstanding, 0);
        drop(cache);
        pool.check_leaks().unwrap();
    }
}
