//! TCP input: a received segment goes to its connection, to its TIME-WAIT record, to a listener,
//! or draws a reset; a segment for no connection from a source address no peer can have is
//! dropped instead ([`Stack::invalid_source`]).

use std::net::{IpAddr, Ipv4Addr};

use super::family::TcpFamily;
use super::flows::FlowKey;
use super::{Deliver, ListenerId, Phase, Stack, rx_cache};
use crate::tcp::{TimeWaitAction, reset_for};
use crate::wire::{ChecksumPolicy, TcpPacket, TcpRepr};

impl Stack {
    /// A TCP segment from `src` to `dst` (one of our unicast addresses, of the same family); `ce`
    /// when its IP header said Congestion Experienced. Generic over the family so that the IPv4
    /// path matches on no `IpAddr` (see [`TcpFamily`]).
    pub(super) fn receive_tcp<A: TcpFamily, D: Deliver + ?Sized>(
        &mut self,
        src: A,
        dst: A,
        ce: bool,
        bytes: &[u8],
        deliver: &mut D,
    ) {
        let Ok(packet) = TcpPacket::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        // Used where the parse left it (a reference into the `Result`): moved out of it, the
        // segment was copied with 16-byte loads that waited on the parse's narrower stores (a
        // failed store-to-load forward).
        let parsed = A::parse(&packet, src, dst, self.rx_checksum());
        let Ok(seg) = &parsed else {
            self.stats.rx_malformed += 1;
            return;
        };
        let local = dst.socket(seg.dst_port);
        let remote = src.socket(seg.src_port);
        if let Some(&index) = self.demux.get(&FlowKey::new(local, remote)) {
            let predicted = self.segment_for_connection(index, seg, ce, deliver);
            if predicted && self.rx_remember && seg.payload.len() >= rx_cache::MIN_REMEMBERED {
                self.rx_memory.keep_segment(index, seg);
            }
            return;
        }
        let key = FlowKey::new(local, remote);
        if let Some(slot) = self.time_wait.find(&key) {
            self.stats.tcp_segments_in += 1;
            let (epoch, now) = (self.epoch, self.now);
            let record = self.time_wait.record_mut(slot);
            let before = record.expires(epoch);
            let action = record.handle_segment(&self.config.tcp, epoch, now, seg);
            let after = record.expires(epoch);
            match action {
                TimeWaitAction::Ignore => {}
                TimeWaitAction::Reply(ack) => self.send_tcp_control(local, remote, &ack),
                TimeWaitAction::Close => {
                    self.time_wait.remove(slot);
                    return;
                }
            }
            if after != before {
                // A retransmitted FIN restarted 2·MSL.
                self.time_wait.requeue(slot, after);
            }
            return;
        }
        // Checked only for segments no connection wants (a connection's own segments come from
        // the address its SYN came from, checked then): the per-segment path pays nothing.
        if self.invalid_source(src.into()) {
            self.stats.tcp_bad_source += 1;
            return;
        }
        if let Some(&li) = self.listener_ports.get(&seg.dst_port) {
            self.stats.tcp_segments_in += 1;
            let generation = self.listeners.generation(li).unwrap_or(0);
            self.listener_segment(ListenerId { index: li, generation }, local, remote, seg);
            return;
        }
        self.stats.tcp_no_socket += 1;
        if let Some(rst) = reset_for(seg) {
            self.send_tcp_control(local, remote, &rst);
        }
    }

    /// A segment for the connection in slot `index` (found by its 4-tuple, or by the receive
    /// path's memory of the frame before, [`super::rx_cache`]); returns whether the connection
    /// took it on the header-prediction path.
    pub(super) fn segment_for_connection<D: Deliver + ?Sized>(
        &mut self,
        index: u32,
        seg: &TcpRepr<'_>,
        ce: bool,
        deliver: &mut D,
    ) -> bool {
        self.stats.tcp_segments_in += 1;
        let now = self.now;
        let Some(e) = self.slot_entry(index) else { return false };
        let completing = e.phase == Phase::SynQueue && seg.ack_number.is_some();
        let listener = e.listener;
        if completing
            && let Some(l) = listener
            && !self.backlog_has_room(l)
        {
            self.stats.listen_drops += 1;
            return false;
        }
        let id = self.stream_id(index);
        let mut predicted = false;
        if let Some(e) = self.slot_entry(index) {
            let before = e.conn.predicted();
            if e.app_owned {
                e.conn.handle_segment_ecn(now, seg, ce, |data| deliver.tcp(id, data));
            } else {
                e.conn.handle_segment_ecn(now, seg, ce, |_| 0);
            }
            predicted = e.conn.predicted() != before;
        }
        self.settle(index);
        self.mark_ready(index);
        predicted
    }

    /// A continued segment (the receive memory's, [`rx_cache`]) for the connection in slot
    /// `index`, which predicted the segment before it in this receive loop: taken on the
    /// connection's short path ([`Connection::receive_continued`]) when the application holds
    /// the connection and it predicts this segment too, with the bookkeeping
    /// [`segment_for_connection`](Self::segment_for_connection) would do; returns whether it
    /// was taken (if not, nothing was done or counted). The segment before left the connection
    /// held by the application, past its listener's queues and marked ready (so settling it
    /// only wakes its wakers): checked and kept here rather than assumed.
    ///
    /// [`Connection::receive_continued`]: crate::tcp::Connection
    pub(super) fn continue_connection<D: Deliver + ?Sized>(
        &mut self,
        index: u32,
        seg: &TcpRepr<'_>,
        deliver: &mut D,
    ) -> bool {
        let (now, id) = (self.now, self.stream_id(index));
        let Some(e) = self.slots.get_mut(index) else { return false };
        if !e.app_owned || e.phase != Phase::Open {
            return false;
        }
        if !e.conn.receive_continued(now, seg, &mut |data| deliver.tcp(id, data)) {
            return false;
        }
        self.stats.tcp_segments_in += 1;
        e.wake_ready();
        // Its event is recorded for `take_events` already: the segment before, in this receive
        // loop, went through `segment_for_connection` and its `settle`.
        e.mark_ready(index, &mut self.ready);
        true
    }

    /// The checksum policy for the transport header of the frame being received:
    /// [`Config::checksum`](super::Config::checksum), or `Trust` (counted) for a frame whose
    /// offload metadata said its checksum need not be checked ([`Stack::receive_offload`]).
    pub(super) fn rx_checksum(&mut self) -> ChecksumPolicy {
        if self.rx_trusted && self.config.checksum.verify() {
            self.stats.rx_checksum_trusted += 1;
            return ChecksumPolicy::Trust;
        }
        self.config.checksum
    }

    /// Whether `src` is an address no TCP (or UDP) peer can have (for IPv6 see
    /// [`invalid_source6`](Self::invalid_source6)).
    pub(super) fn invalid_source(&self, src: IpAddr) -> bool {
        match src {
            IpAddr::V4(s) => self.invalid_source4(s),
            IpAddr::V6(s) => self.invalid_source6(s),
        }
    }

    /// Whether `src` is an IPv4 address no TCP peer can have: unspecified, loopback, multicast,
    /// the limited broadcast or our subnet's, or our own. RFC 1122 §4.2.3.10 has TCP (or IP)
    /// ignore a SYN with such a source (§3.2.1.3 lists them); a connection to it could never be
    /// answered (a broadcast one would only draw ARP requests for the broadcast address, one from
    /// our own address, the land attack, a connection to ourselves), and a reset to it must not be
    /// sent either, so every segment from one is dropped.
    pub(super) fn invalid_source4(&self, src: Ipv4Addr) -> bool {
        src.is_unspecified()
            || src.is_loopback()
            || src.is_multicast()
            || src.is_broadcast()
            || src == self.ip()
            || self.config.ip.broadcast() == Some(src)
    }
}
