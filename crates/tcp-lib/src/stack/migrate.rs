//! Moving a connection between stacks (connection stealing): [`Stack::detach`] takes it out as a
//! [`Detached`] value that can cross threads, [`Stack::adopt`] takes it in on another stack, and
//! [`Stack::contains`] says whether a stack still holds a 4-tuple.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

#[cfg(doc)]
use super::Config;
use super::flows::FlowKey;
use super::{Error, Phase, Stack, StreamId};
use crate::tcp::{Connection, State};
use crate::wire::EthernetAddress;

/// A connection moved out of a [`Stack`] by [`Stack::detach`], on its way to another stack's
/// [`Stack::adopt`]: an owned value that can cross threads. Dropping it loses the connection
/// without a segment (the peer times out): adopt it, or adopt it back.
#[derive(Debug)]
#[must_use = "dropping a detached connection loses it without a reset"]
pub struct Detached {
    conn: Connection,
    write_shut: bool,
    next_hop: Option<(IpAddr, EthernetAddress)>,
}

impl Detached {
    /// The local address.
    #[must_use]
    pub const fn local(&self) -> SocketAddr {
        self.conn.local()
    }

    /// The remote address.
    #[must_use]
    pub const fn remote(&self) -> SocketAddr {
        self.conn.remote()
    }

    /// The RFC 9293 state.
    #[must_use]
    pub const fn state(&self) -> State {
        self.conn.state()
    }

    /// Bytes received and not yet read, and bytes in the send buffer (unsent or unacknowledged).
    #[must_use]
    pub fn queues(&self) -> (usize, usize) {
        (self.conn.recv_queue(), self.conn.send_queue())
    }
}

/// Why [`Stack::adopt`] refused a connection; the connection comes back with
/// [`into_inner`](Self::into_inner).
#[derive(Debug, thiserror::Error)]
#[error("cannot adopt {} <- {}: {}", .detached.local(), .detached.remote(), .error)]
pub struct AdoptError {
    error: Error,
    detached: Box<Detached>,
}

impl AdoptError {
    /// Why.
    #[must_use]
    pub const fn error(&self) -> Error {
        self.error
    }

    /// The connection, still detached.
    pub fn into_inner(self) -> Detached {
        *self.detached
    }
}

impl Stack {
    /// Whether the stack holds a connection for `local`/`remote` that incoming segments reach (any
    /// state from SYN-RECEIVED to TIME-WAIT; not once it is closed or reclaimed). A steering entry
    /// for the connection (a registry signature) is needed as long as this holds.
    #[must_use]
    pub fn contains(&self, local: SocketAddr, remote: SocketAddr) -> bool {
        let key = FlowKey::new(local, remote);
        self.demux.contains_key(&key) || self.time_wait.contains(&key)
    }

    /// Moves the connection `stream` out of this stack, for [`adopt`](Self::adopt) by another
    /// stack with the same local address (another core's stack, when a stolen connection follows
    /// its stealer). Everything the connection is moves with it: its state and sequence space, the
    /// receive buffer (bytes not yet read, out-of-order data), the send buffer (unsent and
    /// unacknowledged bytes), its timers (absolute instants), whether the application shut down
    /// writing, and the peer's next hop's hardware address if this stack has it resolved. This
    /// stack forgets it: the 4-tuple's demultiplexing entry, the ready list and timer entries, the
    /// listener's accept queue if it was still waiting there; the handle becomes stale, and the
    /// wakers registered on it ([`register_waker`](Self::register_waker)) are woken (not moved:
    /// the adopter's handle is a new one to register on).
    ///
    /// Segments for the connection that reach this stack afterwards find no connection (a segment
    /// with an ACK draws a reset from a listener on the port, as for any stray): steer them to
    /// the adopter before they can arrive here, or hold them back until the adopter has it.
    /// Segments already built and waiting here for ARP resolution still leave from here.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`] (also for a connection the application does not hold, such as
    /// a half-open one in a SYN queue).
    pub fn detach(&mut self, stream: StreamId) -> Result<Detached, Error> {
        self.entry(stream)?;
        let index = stream.index;
        let mut e = self.slots.remove(index).ok_or(Error::InvalidHandle)?;
        e.wake_all();
        let (local, remote) = (e.conn.local(), e.conn.remote());
        if e.in_demux {
            self.demux.remove(&FlowKey::new(local, remote));
        }
        if e.ready {
            self.ready.retain(|&r| r != index);
        }
        if let Some(l) = e.listener.and_then(|l| self.listener_mut(l)) {
            l.accept_queue.retain(|&s| s != stream);
        }
        // Its timer-heap entry is stale now (the generation moved on) and is skipped.
        self.stats.connections_detached += 1;
        let next_hop =
            self.next_hop(remote.ip()).and_then(|hop| self.neighbor_lookup(hop).map(|mac| (hop, mac)));
        Ok(Detached { conn: e.conn, write_shut: e.write_shut, next_hop })
    }

    /// Takes in a connection [`detach`](Self::detach)ed from another stack and returns its new
    /// handle here; its timers are armed and whatever it has to send leaves at the next
    /// [`transmit`](Self::transmit). The peer's next hop is added to the neighbour cache from the
    /// detached record when this stack lacks it (else this stack resolves it as usual). `now` is
    /// on the same clock as the detaching stack's (connection timers are absolute instants).
    ///
    /// # Errors
    /// The connection comes back in [`AdoptError`]: [`Error::NotLocal`] when its local address is
    /// not this stack's, [`Error::AddrInUse`] when this stack already has its 4-tuple,
    /// [`Error::TooManyConnections`] at [`Config::max_connections`].
    pub fn adopt(&mut self, detached: Detached, now: Instant) -> Result<StreamId, AdoptError> {
        self.advance(now);
        let (local, remote) = (detached.conn.local(), detached.conn.remote());
        let refused = if !self.is_local(local.ip()) {
            Some(Error::NotLocal)
        } else if self.contains(local, remote) {
            Some(Error::AddrInUse)
        } else if self.connection_count() >= self.config.max_connections {
            Some(Error::TooManyConnections)
        } else {
            None
        };
        if let Some(error) = refused {
            return Err(AdoptError { error, detached: Box::new(detached) });
        }
        let Detached { conn, write_shut, next_hop } = detached;
        if let Some((hop, mac)) = next_hop
            && self.next_hop(remote.ip()) == Some(hop)
            && self.neighbor_lookup(hop).is_none()
        {
            self.neighbor_learned(hop, mac);
        }
        let index = self.insert(conn, None, Phase::Open, true);
        if let Some(e) = self.slot_entry(index) {
            e.write_shut = write_shut;
        }
        self.arm_timer(index);
        self.stats.connections_adopted += 1;
        Ok(self.stream_id(index))
    }
}
