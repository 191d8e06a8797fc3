//! Listeners: [`Stack::listen`] and [`Stack::accept`], the SYN queue of half-open connections,
//! SYN cookies when it overflows, the accept backlog, and the [`AcceptHook`] that can take the
//! established connections instead.
//!
//! # Cookies and resets
//!
//! RFC 9293 §3.10.7.2 has a listener answer any ACK with a reset (`<SEQ=SEG.ACK><CTL=RST>`), and
//! Linux does so for an ACK whose SYN cookie does not check. Under a SYN flood spoofed from a
//! client's own address that rule resets live connections: the client's handshake ACK and first
//! data are lost at the saturated link, so the listener has no state for it; a spoofed SYN on
//! the same four-tuple draws a new cookie SYN-ACK; the client, established, answers it with an
//! ACK whose sequence number is past its data, so the cookie (which encodes the client's ISN as
//! `SEG.SEQ - 1`) does not check; and the reset, with `SEQ = SEG.ACK = RCV.NXT` of the client, is
//! exactly in its window. Probing over TAP reset 1 connection attempt in 5 that way.
//!
//! So while a listener is in cookie mode (its SYN queue overflowed in the last two cookie
//! periods), an ACK that fails the cookie check is dropped without a reset and counted in
//! `syn_cookies_rejected`. This is safe: a peer with a real connection we lost retransmits its
//! data from `ISN + 1`, which checks while the cookie is valid and establishes the connection;
//! a peer whose cookie expired times out instead of being reset, only during a flood; and it
//! keeps a spoofed ACK flood from being reflected as resets to the spoofed addresses (the
//! backscatter RFC 4987 §3 describes). Outside cookie mode the RFC's reset is sent as before.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use super::connections::SharedTcp;
use super::hash;
use super::{Error, ListenerConfig, ListenerId, Phase, Stack, StreamId};
use crate::tcp::{self, Connection, ListenAction, State, listen_reply};
use crate::wire::{SeqNumber, TcpControl, TcpRepr};

/// Receives the connections a listener establishes, instead of the listener's own accept queue:
/// the extension point for per-core accept queues (the accept-affinity crate).
pub trait AcceptHook {
    /// Whether the accept queue for `listener` can take another connection; when it cannot, SYNs
    /// and handshake-completing ACKs for it are dropped.
    fn has_room(&mut self, listener: ListenerId) -> bool {
        let _ = listener;
        true
    }

    /// `stream` is established on `listener`; the hook now holds its handle (which belongs to the
    /// application: it must eventually be closed or aborted).
    fn established(&mut self, listener: ListenerId, stream: StreamId);

    /// A passive open on `listener` created state for `local`/`remote` (a SYN-RECEIVED connection,
    /// or an established one from a SYN cookie). Called before the stack sends anything for it, so
    /// a steering entry made here (a registry signature naming this core) is in place before the
    /// peer can answer. The stack keeps the state while [`Stack::contains`] says so.
    fn opened(&mut self, listener: ListenerId, local: SocketAddr, remote: SocketAddr) {
        let _ = (listener, local, remote);
    }
}

#[derive(Debug)]
pub(super) struct Listener {
    pub(super) port: u16,
    pub(super) config: ListenerConfig,
    /// The configuration of the connections it accepts (`None`: the stack's).
    pub(super) tcp: Option<SharedTcp>,
    pub(super) syn_queue: usize,
    pub(super) accept_queue: VecDeque<StreamId>,
    pub(super) last_overflow: Option<Instant>,
    /// Woken when `accept_queue` gains a connection ([`Stack::register_accept_waker`]).
    pub(super) accept_waker: Option<Waker>,
}

impl Stack {
    /// Listens on `port` with the default [`ListenerConfig`].
    ///
    /// # Errors
    /// [`Error::InvalidPort`] for 0, [`Error::AddrInUse`] if a listener has it.
    pub fn listen(&mut self, port: u16) -> Result<ListenerId, Error> {
        self.listen_with(port, ListenerConfig::default())
    }

    /// Listens on `port`.
    ///
    /// # Errors
    /// As [`listen`](Self::listen).
    pub fn listen_with(&mut self, port: u16, config: ListenerConfig) -> Result<ListenerId, Error> {
        if port == 0 {
            return Err(Error::InvalidPort);
        }
        if self.listener_ports.contains_key(&port) {
            return Err(Error::AddrInUse);
        }
        let listener = Listener {
            port,
            config,
            tcp: None,
            syn_queue: 0,
            accept_queue: VecDeque::new(),
            last_overflow: None,
            accept_waker: None,
        };
        let index = self.listeners.insert(listener);
        self.listener_ports.insert(port, index);
        Ok(ListenerId { index, generation: self.listeners.generation(index).unwrap_or(0) })
    }

    pub(super) fn listener(&self, id: ListenerId) -> Option<&Listener> {
        self.listeners.get_checked(id.index, id.generation)
    }

    pub(super) fn listener_mut(&mut self, id: ListenerId) -> Option<&mut Listener> {
        self.listeners.get_checked_mut(id.index, id.generation)
    }

    /// Sets the configuration of the connections `listener` accepts from now on (by default the
    /// stack's [`Config::tcp`](super::Config::tcp)), as socket options set on a listening socket
    /// carry over to the connections it accepts: buffer sizes, the MSS (clamped to the MTU's),
    /// Nagle, keepalive. SYN cookies announce and decode its MSS too.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn set_listener_tcp(&mut self, listener: ListenerId, tcp: tcp::Config) -> Result<(), Error> {
        let shared = SharedTcp::new(tcp, self.mtu_mss());
        self.listener_mut(listener).ok_or(Error::InvalidHandle)?.tcp = Some(shared);
        Ok(())
    }

    /// The configuration of the connections listener `id` accepts from `remote` (its own, or
    /// the stack's). Cloned only for a connection made: the segments a listener answers without
    /// one take no reference.
    fn listener_tcp(&self, id: ListenerId, remote: SocketAddr) -> &Arc<tcp::Config> {
        self.listener(id).and_then(|l| l.tcp.as_ref()).unwrap_or(&self.tcp).for_remote(remote.ip())
    }

    /// The next established connection of `listener`, oldest first.
    pub fn accept(&mut self, listener: ListenerId) -> Option<StreamId> {
        self.listener_mut(listener)?.accept_queue.pop_front()
    }

    /// Half-open connections in `listener`'s SYN queue.
    #[must_use]
    pub fn syn_queue_len(&self, listener: ListenerId) -> Option<usize> {
        self.listener(listener).map(|l| l.syn_queue)
    }

    /// Established connections waiting in `listener`'s accept queue.
    #[must_use]
    pub fn accept_queue_len(&self, listener: ListenerId) -> Option<usize> {
        self.listener(listener).map(|l| l.accept_queue.len())
    }

    /// Stops listening: queued, never accepted connections are aborted (reset); half-open ones are
    /// aborted when they complete. Wakes the listener's accept waker
    /// ([`register_accept_waker`](Self::register_accept_waker)).
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn unlisten(&mut self, listener: ListenerId) -> Result<(), Error> {
        let l = self.listener_mut(listener).ok_or(Error::InvalidHandle)?;
        let queued: Vec<StreamId> = l.accept_queue.drain(..).collect();
        let port = l.port;
        if let Some(waker) = l.accept_waker.take() {
            waker.wake();
        }
        self.listeners.remove(listener.index);
        self.listener_ports.remove(&port);
        for s in queued {
            let _ = self.abort(s);
        }
        Ok(())
    }

    pub(super) fn backlog_has_room(&mut self, listener: ListenerId) -> bool {
        if let Some(hook) = self.accept_hook.as_mut() {
            return hook.has_room(listener);
        }
        self.listener(listener).is_some_and(|l| l.accept_queue.len() < l.config.backlog)
    }

    pub(super) fn listener_segment(
        &mut self,
        id: ListenerId,
        local: SocketAddr,
        remote: SocketAddr,
        seg: &TcpRepr<'_>,
    ) {
        let now = self.now;
        let since = now - self.epoch;
        let Some(l) = self.listener(id) else { return };
        let lconfig = l.config;
        let recent_overflow = l.last_overflow.is_some_and(|t| now - t < hash::COOKIE_PERIOD * 2);
        let syn_queue = l.syn_queue;
        match listen_reply(seg) {
            ListenAction::Ignore => {}
            ListenAction::Reset(rst) => {
                if lconfig.syn_cookies
                    && recent_overflow
                    && matches!(seg.control, TcpControl::None | TcpControl::Fin)
                    && let Some(ack) = seg.ack_number
                {
                    let ours = ack - 1;
                    let peer = seg.seq_number - 1;
                    let count = hash::cookie_count(since);
                    if let Some(i) = hash::check_cookie(&self.key, local, remote, peer, ours, count) {
                        self.accept_cookie(id, local, remote, seg, peer, ours, i);
                        return;
                    }
                    // No reset while cookies are in use: see "Cookies and resets" above.
                    self.stats.syn_cookies_rejected += 1;
                    return;
                }
                self.send_tcp_control(local, remote, &rst);
            }
            ListenAction::Accept => {
                if !self.backlog_has_room(id) || self.connection_count() >= self.config.max_connections {
                    self.stats.listen_drops += 1;
                    return;
                }
                if syn_queue < lconfig.syn_queue {
                    if !Connection::accepts(seg, local, remote) {
                        return;
                    }
                    let iss = hash::isn(&self.key, local, remote, since);
                    if let Some(l) = self.listener_mut(id) {
                        l.syn_queue += 1;
                    }
                    // Built in its slot, the SYN taken there (no copy of the connection).
                    let tcp = Arc::clone(self.listener_tcp(id, remote));
                    let index = self.insert_new(tcp, (local, remote), iss, Some(id));
                    if let Some(e) = self.slot_entry(index) {
                        e.conn.take_syn(seg, now);
                    }
                    self.stats.connections_opened += 1;
                    if let Some(hook) = self.accept_hook.as_mut() {
                        hook.opened(id, local, remote);
                    }
                } else if lconfig.syn_cookies {
                    if let Some(l) = self.listener_mut(id) {
                        l.last_overflow = Some(now);
                    }
                    let tcp = self.listener_tcp(id, remote);
                    let (mss, window) = (tcp.mss, u16::try_from(tcp.recv_buffer).unwrap_or(u16::MAX));
                    let default_mss = if remote.is_ipv6() { 1220 } else { 536 };
                    let peer_mss = seg.max_seg_size.unwrap_or(default_mss).min(mss);
                    let index = hash::cookie_mss_index(peer_mss);
                    let count = hash::cookie_count(since);
                    let iss = hash::cookie(&self.key, local, remote, seg.seq_number, count, index);
                    let synack = TcpRepr {
                        src_port: local.port(),
                        dst_port: remote.port(),
                        control: TcpControl::Syn,
                        seq_number: iss,
                        ack_number: Some(seg.seq_number + 1),
                        window_len: window,
                        max_seg_size: Some(mss),
                        ..TcpRepr::default()
                    };
                    self.send_tcp_control(local, remote, &synack);
                    self.stats.syn_cookies_sent += 1;
                } else {
                    self.stats.listen_drops += 1;
                }
            }
        }
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the cookie ACK, its tuple, and the three values the cookie check decoded"
    )]
    fn accept_cookie(
        &mut self,
        id: ListenerId,
        local: SocketAddr,
        remote: SocketAddr,
        seg: &TcpRepr<'_>,
        peer_isn: SeqNumber,
        our_isn: SeqNumber,
        mss_index: u32,
    ) {
        if !self.backlog_has_room(id) || self.connection_count() >= self.config.max_connections {
            self.stats.listen_drops += 1;
            return;
        }
        let mss =
            usize::try_from(mss_index).ok().and_then(|i| hash::COOKIE_MSS.get(i)).copied().unwrap_or(536);
        // The SYN the cookie stands for: its options are lost, except the MSS.
        let syn = TcpRepr {
            src_port: remote.port(),
            dst_port: local.port(),
            control: TcpControl::Syn,
            seq_number: peer_isn,
            window_len: seg.window_len,
            max_seg_size: Some(mss),
            ..TcpRepr::default()
        };
        let now = self.now;
        let tcp = Arc::clone(self.listener_tcp(id, remote));
        let Some(mut conn) = Connection::accept(tcp, local, remote, &syn, our_isn, now) else {
            return;
        };
        // The SYN-ACK it would send went out already, as the cookie.
        while conn.poll_transmit(now, &mut self.scratch).is_some() {}
        conn.handle_segment(now, seg);
        if !conn.is_established() {
            return;
        }
        self.stats.syn_cookies_accepted += 1;
        let index = self.insert(conn, Some(id), Phase::Cookie, false);
        self.stats.connections_opened += 1;
        if let Some(hook) = self.accept_hook.as_mut() {
            hook.opened(id, local, remote);
        }
        self.settle(index);
    }

    /// Bookkeeping after an event on a connection (a segment processed, its timers run): the
    /// event recorded for [`take_events`](Self::take_events), its wakers woken when their side is
    /// ready, delivery to the accept queue when a passive open completes, SYN-queue accounting.
    pub(super) fn settle(&mut self, index: u32) {
        self.events.mark(index);
        let Some(e) = self.slot_entry(index) else { return };
        e.wake_ready();
        if !matches!(e.phase, Phase::SynQueue | Phase::Cookie) || e.conn.state() == State::SynReceived {
            return;
        }
        let was_counted = e.phase == Phase::SynQueue;
        e.phase = Phase::Open;
        let established = e.conn.is_established() && !e.conn.is_closed();
        let listener = e.listener;
        if was_counted && let Some(l) = listener.and_then(|l| self.listener_mut(l)) {
            l.syn_queue = l.syn_queue.saturating_sub(1);
        }
        if !established {
            return;
        }
        let stream = self.stream_id(index);
        let live_listener = listener.filter(|&l| self.listener(l).is_some());
        let Some(l) = live_listener else {
            // The listener is gone: nobody will accept it.
            if let Some(e) = self.slot_entry(index) {
                e.conn.abort();
            }
            return;
        };
        if let Some(e) = self.slot_entry(index) {
            e.app_owned = true;
        }
        if let Some(hook) = self.accept_hook.as_mut() {
            hook.established(l, stream);
        } else if let Some(listener) = self.listener_mut(l) {
            listener.accept_queue.push_back(stream);
            if let Some(waker) = listener.accept_waker.take() {
                waker.wake();
            }
        }
    }
}
