//! Socket wakers: the [`Waker`]s async tasks register on a stream ([`Stack::register_waker`]) or a
//! listener ([`Stack::register_accept_waker`]), and the one check that wakes them.
//!
//! A stream's wakers live out of line, in a [`StreamWakers`] boxed on its
//! [`Entry`] the first time one is registered: a connection nobody registered on
//! carries a null pointer, and the per-segment path pays one test of it. After every event on a
//! connection (a segment processed, its timers run: [`Stack::settle`] is that one place) the
//! registered side that is now ready is woken and forgotten ([`Entry::wake_ready`]); release and
//! removal wake every waker left ([`Entry::wake_all`]). Readiness is the application call's own:
//! `recv` would not say `WouldBlock` (Read), `send` would not (Write, once the handshake is over).

use std::task::Waker;

use super::{Entry, Error, ListenerId, Stack, StreamId};
use crate::tcp::State;

/// Which side of a stream a waker waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// [`Stack::recv`] may return something other than [`Error::WouldBlock`]: in-order data, the
    /// peer's FIN, a connection error or reset, the stream gone.
    Read,
    /// [`Stack::send`] may accept a byte or fail: the handshake completed, send-buffer room freed
    /// by an ACK, writing shut down, an error or reset, the stream gone.
    Write,
}

/// The wakers registered on one stream, one per side.
#[derive(Debug, Default)]
pub(super) struct StreamWakers {
    read: Option<Waker>,
    write: Option<Waker>,
}

impl StreamWakers {
    fn side(&mut self, interest: Interest) -> &mut Option<Waker> {
        match interest {
            Interest::Read => &mut self.read,
            Interest::Write => &mut self.write,
        }
    }
}

/// Puts `waker` in `slot` (no clone when the one there already wakes the same task).
fn store(slot: &mut Option<Waker>, waker: &Waker) {
    match slot {
        Some(w) if w.will_wake(waker) => {}
        _ => *slot = Some(waker.clone()),
    }
}

/// Wakes and empties `slot` when `ready`.
fn wake_if(slot: &mut Option<Waker>, ready: bool) {
    if ready && let Some(w) = slot.take() {
        w.wake();
    }
}

impl Entry {
    /// Whether [`Stack::recv`] would return something other than [`Error::WouldBlock`].
    fn read_ready(&self) -> bool {
        self.conn.is_readable() || self.conn.error().is_some()
    }

    /// Whether [`Stack::send`] would accept a byte or fail, once the handshake is over (a
    /// connection still in SYN-SENT or SYN-RECEIVED waits for the handshake, whatever room its
    /// send buffer has).
    fn write_ready(&self) -> bool {
        if self.conn.error().is_some() || self.write_shut {
            return true;
        }
        match self.conn.state() {
            State::SynSent | State::SynReceived => false,
            State::Established | State::CloseWait => self.conn.is_writable(),
            _ => true,
        }
    }

    /// Wakes (once) each registered waker whose side is ready now; a no-op for a connection
    /// nobody registered on.
    #[inline]
    pub(super) fn wake_ready(&mut self) {
        if self.wakers.is_some() {
            self.wake_registered();
        }
    }

    /// [`wake_ready`](Self::wake_ready) for a connection with wakers, out of the per-segment path.
    #[inline(never)]
    fn wake_registered(&mut self) {
        let (read, write) = (self.read_ready(), self.write_ready());
        if let Some(w) = self.wakers.as_deref_mut() {
            wake_if(&mut w.read, read);
            wake_if(&mut w.write, write);
        }
    }

    /// Wakes every registered waker and forgets them: the stream is being released or removed.
    pub(super) fn wake_all(&mut self) {
        if let Some(mut w) = self.wakers.take() {
            wake_if(&mut w.read, true);
            wake_if(&mut w.write, true);
        }
    }
}

impl Stack {
    /// Registers `waker` to be woken once when stream `id` may have become ready for `interest`
    /// (replacing a waker registered before for the same side; `will_wake` avoids a clone).
    ///
    /// Read: in-order data, the peer's FIN, a connection error or reset, the stream gone.
    /// Write: the handshake completed (connect), send-buffer room freed by an ACK, an error or
    /// reset, writing shut down, the stream gone. Spurious wakes are allowed; a lost wake is a
    /// bug.
    ///
    /// Register after [`recv`](Self::recv) or [`send`](Self::send) said [`Error::WouldBlock`]
    /// (or, for Write, while [`connect`](Self::connect) is not yet established); a side that is
    /// ready already is woken at once, so a registration cannot miss its event. Wakers are woken
    /// synchronously from inside [`receive`](Self::receive), [`poll`](Self::poll) and
    /// [`handle_timeout`](Self::handle_timeout): a waker must only schedule its task, never call
    /// the stack. Every waker of a stream is woken when the stream is released
    /// ([`close`](Self::close), [`abort`](Self::abort)) or [`detach`](Self::detach)ed; its handle
    /// is stale after that. Write readiness is `send`'s (room in the send ring), not
    /// [`send_prepared`](Self::send_prepared)'s limit of queued runs.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`] (a released, detached or stale handle: its wakers were woken
    /// when it went).
    pub fn register_waker(&mut self, id: StreamId, interest: Interest, waker: &Waker) -> Result<(), Error> {
        let e = self.entry_mut(id)?;
        store(e.wakers.get_or_insert_with(Box::default).side(interest), waker);
        e.wake_ready();
        Ok(())
    }

    /// Registers `waker` for listener `id`: woken once when a connection is ready for
    /// [`accept`](Self::accept) on the stack's own accept queue (the [`AcceptHook`](super::AcceptHook)
    /// path does not use it: while a hook is installed the queue stays empty), and when the listener
    /// goes ([`unlisten`](Self::unlisten)). Replaces the waker registered before; one that finds the
    /// queue non-empty is woken at once.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn register_accept_waker(&mut self, id: ListenerId, waker: &Waker) -> Result<(), Error> {
        let l = self.listener_mut(id).ok_or(Error::InvalidHandle)?;
        store(&mut l.accept_waker, waker);
        let ready = !l.accept_queue.is_empty();
        wake_if(&mut l.accept_waker, ready);
        Ok(())
    }
}
