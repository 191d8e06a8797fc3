//! Output: [`Stack::transmit`] drains queued control frames and the connections on the ready list
//! into pool buffers, writing the Ethernet, IP (v4 or v6) and TCP headers (and prepared content);
//! control frames (ARP, ICMP, Neighbor Discovery, resets, SYN cookies) and datagrams to next hops
//! still being resolved are queued here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

use netchannel::dev::PacketBatch;
use netchannel::pool::{GsoKind, Offload, Packet, PoolCache};

use super::Config;
use super::flows::FlowKey;
use super::ipv6::NDP_HOP_LIMIT;
use super::neighbor::Enqueued;
use super::{ETH_LEN, IP_LEN, IP6_LEN, MAX_HEADERS, Stack, StackStats, emit, gso};
use crate::tcp::{Connection, Lent, PooledRun, PooledSlice, State};
use crate::wire::ipv6::addr::multicast_mac;
use crate::wire::{
    ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Icmpv4Packet,
    Icmpv4Repr, Icmpv6Packet, Icmpv6Repr, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, Protocol, TcpControl,
    TcpPacket, TcpRepr,
};

/// The Ethernet header (no VLAN tag) of a frame from `src` to `dst` carrying `ethertype`, as its
/// 14 bytes: a connection's frames write it with one copy (`EthernetRepr::emit` sets the fields one
/// by one, about 30 instructions more per frame).
#[inline]
fn ethernet_header(src: EthernetAddress, dst: EthernetAddress, ethertype: EtherType) -> [u8; ETH_LEN] {
    let mut header = [0; ETH_LEN];
    header[..6].copy_from_slice(&dst.0);
    header[6..12].copy_from_slice(&src.0);
    header[12..].copy_from_slice(&u16::from(ethertype).to_be_bytes());
    header
}

impl Stack {
    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
    }

    /// Writes the Ethernet header of an IP packet built behind it (its version nibble says
    /// which EtherType).
    pub(super) fn fill_ethernet(&self, frame: &mut [u8], dst: EthernetAddress) {
        let ethertype = match frame.get(ETH_LEN) {
            Some(b) if b >> 4 == 6 => EtherType::Ipv6,
            _ => EtherType::Ipv4,
        };
        let repr = EthernetRepr { src_addr: self.config.mac, dst_addr: dst, vlan: None, ethertype };
        if frame.len() >= ETH_LEN {
            repr.emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
        }
    }

    pub(super) fn push_frame(&mut self, frame: Vec<u8>) {
        if self.frames.len() >= self.config.max_queued_frames {
            self.stats.tx_dropped += 1;
            return;
        }
        self.frames.push_back(frame);
    }

    pub(super) fn queue_arp(
        &mut self,
        op: ArpOperation,
        eth_dst: EthernetAddress,
        target_mac: EthernetAddress,
        target: Ipv4Addr,
    ) {
        let arp = ArpRepr {
            operation: op,
            source_hardware_addr: self.config.mac,
            source_protocol_addr: self.ip(),
            target_hardware_addr: target_mac,
            target_protocol_addr: target,
        };
        let eth = EthernetRepr {
            src_addr: self.config.mac,
            dst_addr: eth_dst,
            vlan: None,
            ethertype: EtherType::Arp,
        };
        let mut frame = vec![0u8; eth.buffer_len(arp.buffer_len())];
        let mut view = EthernetFrame::new_unchecked(&mut frame[..]);
        eth.emit(&mut view);
        arp.emit(&mut ArpPacket::new_unchecked(view.payload_mut()));
        if op == ArpOperation::Request {
            self.stats.arp_requests += 1;
        }
        self.push_frame(frame);
    }

    /// Sends an IPv4 datagram whose payload `write` fills (`len` bytes): now if the next hop is
    /// resolved, else after ARP.
    pub(super) fn send_ip(
        &mut self,
        dst: Ipv4Addr,
        protocol: Protocol,
        len: usize,
        write: impl FnOnce(&mut [u8]),
    ) {
        let Some(hop) = self.route(dst) else {
            self.stats.no_route += 1;
            return;
        };
        let ip = Ipv4Repr {
            src_addr: self.ip(),
            dst_addr: dst,
            protocol,
            payload_len: len,
            ttl: self.config.ttl,
            dscp: 0,
            ecn: 0,
            ident: self.next_ident(),
            dont_frag: true,
        };
        let mut frame = vec![0u8; ETH_LEN + ip.buffer_len()];
        let mut packet = Ipv4Packet::new_unchecked(&mut frame[ETH_LEN..]);
        ip.emit(&mut packet);
        write(packet.payload_mut());
        self.send_frame_to(IpAddr::V4(hop), frame);
    }

    /// Sends an IPv6 packet from `src` whose payload `write` fills (`len` bytes): to a multicast
    /// group's MAC at once, to a unicast destination through its next hop (now if resolved, else
    /// after Neighbor Discovery).
    pub(super) fn send_ip6(
        &mut self,
        (src, dst): (Ipv6Addr, Ipv6Addr),
        protocol: Protocol,
        len: usize,
        hop_limit: u8,
        write: impl FnOnce(&mut [u8]),
    ) {
        let hop = if dst.is_multicast() { Some(dst) } else { self.route6(dst) };
        let Some(hop) = hop else {
            self.stats.no_route += 1;
            return;
        };
        let ip = Ipv6Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: protocol,
            payload_len: len,
            hop_limit,
            traffic_class: 0,
            flow_label: 0,
        };
        let mut frame = vec![0u8; ETH_LEN + ip.buffer_len()];
        let mut packet = Ipv6Packet::new_unchecked(&mut frame[ETH_LEN..]);
        ip.emit(&mut packet);
        write(packet.payload_mut());
        if dst.is_multicast() {
            self.fill_ethernet(&mut frame, multicast_mac(dst));
            self.push_frame(frame);
        } else {
            self.send_frame_to(IpAddr::V6(hop), frame);
        }
    }

    /// Sends a frame (its Ethernet header still to fill) to the next hop `hop`: now if its MAC is
    /// known, else queued while it is resolved (an ARP request or a neighbour solicitation goes
    /// out for a new one).
    pub(super) fn send_frame_to(&mut self, hop: IpAddr, mut frame: Vec<u8>) {
        if let Some(mac) = self.neighbor_lookup(hop) {
            self.fill_ethernet(&mut frame, mac);
            self.push_frame(frame);
            return;
        }
        // The source of an IPv6 packet that prompts a solicitation (RFC 4861 §7.2.2).
        let prompted_by = frame.get(ETH_LEN + 8..ETH_LEN + 24).and_then(|b| <[u8; 16]>::try_from(b).ok());
        let now = self.now;
        let enqueued = match hop {
            IpAddr::V4(h) => self.arp.enqueue(h, frame, now),
            IpAddr::V6(h) => match self.v6.as_mut() {
                Some(v6) => v6.ndp.enqueue(h, frame, now),
                None => Enqueued::Dropped,
            },
        };
        match (enqueued, hop) {
            (Enqueued::RequestNow, IpAddr::V4(h)) => {
                self.queue_arp(ArpOperation::Request, EthernetAddress::BROADCAST, EthernetAddress([0; 6]), h);
            }
            (Enqueued::RequestNow, IpAddr::V6(h)) => self.send_solicit(h, prompted_by.map(Ipv6Addr::from)),
            (Enqueued::Queued, _) => {}
            (Enqueued::Dropped, IpAddr::V4(_)) => self.stats.arp_dropped += 1,
            (Enqueued::Dropped, IpAddr::V6(_)) => self.stats.ndp_dropped += 1,
        }
    }

    pub(super) fn send_icmp(&mut self, dst: Ipv4Addr, repr: &Icmpv4Repr<'_>) {
        self.send_ip(dst, Protocol::Icmp, repr.buffer_len(), |b| {
            repr.emit(&mut Icmpv4Packet::new_unchecked(b))
        });
    }

    /// Sends an ICMPv6 message to `dst` from `src` (by default the source address for `dst`);
    /// Neighbor Discovery messages with hop limit 255. Nothing while IPv6 is off.
    pub(super) fn send_icmpv6(&mut self, dst: Ipv6Addr, repr: &Icmpv6Repr<'_>, src: Option<Ipv6Addr>) {
        let Some(v6) = self.v6.as_ref() else { return };
        let src = src.unwrap_or_else(|| v6.source_for(dst));
        let hop_limit = if matches!(repr, Icmpv6Repr::Ndp(_)) { NDP_HOP_LIMIT } else { v6.hop_limit };
        self.send_ip6((src, dst), Protocol::Icmpv6, repr.buffer_len(), hop_limit, |b| {
            repr.emit(&mut Icmpv6Packet::new_unchecked(b), src, dst);
        });
    }

    pub(super) fn send_tcp_control(&mut self, local: SocketAddr, remote: SocketAddr, seg: &TcpRepr<'_>) {
        if seg.control == TcpControl::Rst {
            self.stats.rst_sent += 1;
        }
        match (local.ip(), remote.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                self.send_ip(dst, Protocol::Tcp, seg.buffer_len(), |b| {
                    seg.emit(&mut TcpPacket::new_unchecked(b), src, dst);
                });
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let hop_limit = self.config.hop_limit6();
                self.send_ip6((src, dst), Protocol::Tcp, seg.buffer_len(), hop_limit, |b| {
                    seg.emit_v6(&mut TcpPacket::new_unchecked(b), src, dst);
                });
            }
            _ => self.stats.no_route += 1,
        }
    }

    /// Whether [`transmit`](Self::transmit) has anything to send now: queued control frames or
    /// connections on the ready list.
    #[inline]
    pub(super) fn has_output(&self) -> bool {
        !self.frames.is_empty() || !self.ready.is_empty()
    }

    /// Builds outgoing frames in buffers of `cache` and appends them to `out` until it is full or
    /// nothing is left to send: queued control frames (ARP, ICMP, resets, SYN cookies), then the
    /// segments of connections with something to send. Returns how many frames it appended. Frames
    /// for next hops still being resolved wait in the ARP queue.
    pub fn transmit<'c>(&mut self, now: Instant, cache: &'c PoolCache, out: &mut PacketBatch<'c>) -> usize {
        self.advance(now);
        let mut appended = 0;
        while !out.is_full() {
            let Some(frame) = self.frames.pop_front() else { break };
            let Some(mut packet) = cache.alloc() else {
                self.frames.push_front(frame);
                return appended;
            };
            if packet.extend_from_slice(&frame).is_err() {
                self.stats.tx_dropped += 1;
                continue;
            }
            if out.push(packet).is_err() {
                break;
            }
            appended += 1;
        }
        while let Some(&index) = self.ready.front() {
            // Monomorphized on the offloads, so that the path without them carries none of their
            // code (it measured +1.4% instructions per segment and ACK as a runtime branch).
            let drained = if self.config.tx_partial_checksum {
                self.drain_connection::<true>(index, cache, out, &mut appended)
            } else {
                self.drain_connection::<false>(index, cache, out, &mut appended)
            };
            match drained {
                Drained::All => {
                    self.ready.pop_front();
                    if let Some(e) = self.slot_entry(index) {
                        e.ready = false;
                    }
                    self.after_drain(index);
                }
                Drained::Stopped => break,
            }
        }
        self.stats.tx_frames += u64::try_from(appended).unwrap_or(u64::MAX);
        appended
    }

    /// Drains connection `index`'s output into `out`; `OFFLOAD`: with
    /// [`Config::tx_partial_checksum`](super::Config::tx_partial_checksum) (partial checksums,
    /// and super-segments when [`Config::tso_max_size`](super::Config::tso_max_size) says).
    fn drain_connection<'c, const OFFLOAD: bool>(
        &mut self,
        index: u32,
        cache: &'c PoolCache,
        out: &mut PacketBatch<'c>,
        appended: &mut usize,
    ) -> Drained {
        let now = self.now;
        let Some(e) = self.slots.get_mut(index) else { return Drained::All };
        e.conn.recycle_acked(cache);
        // A connection with nothing to send (a segment came whose ACK is delayed, an ACK that
        // only moved SND.UNA) skips the drain's setup: its acknowledged pool buffers went back
        // above, and what follows a drain (`after_drain`) still runs.
        if nothing_to_send(&mut e.conn, now, &mut self.scratch) {
            return Drained::All;
        }
        let ends = (e.conn.local(), e.conn.remote());
        let remote_ip = ends.1.ip();
        let Some(hop) = self.next_hop(remote_ip) else { return Drained::All };
        let ip_len = if remote_ip.is_ipv6() { IP6_LEN } else { IP_LEN };
        let super_max =
            if OFFLOAD && self.config.tso_max_size != 0 { self.super_payload(ip_len, cache) } else { 0 };
        // Super-segments cut here (software GSO), when the device does not cut them (TSO).
        let gso_max = if super_max == 0 { self.gso_payload(ip_len) } else { 0 };
        if let Some(e) = self.slots.get_mut(index) {
            // While content that goes by reference is queued, a super-segment cut here runs only
            // over whole pool buffers, each sent by reference (`Train::emit`): the cut would copy
            // the rest. A device that cuts it (TSO) would need the bytes in one buffer.
            e.conn.set_pooled_trains(gso_max != 0);
        }
        let mut first = true;
        loop {
            // After a segment, a connection that has sent everything is done without asking again.
            if !std::mem::take(&mut first)
                && self
                    .slots
                    .get_mut(index)
                    .is_none_or(|e| nothing_to_send(&mut e.conn, now, &mut self.scratch))
            {
                return Drained::All;
            }
            let mac = self.neighbor_lookup(hop);
            if mac.is_some() && out.is_full() {
                return Drained::Stopped;
            }
            let ident = self.ident.wrapping_add(1);
            let Some(e) = self.slots.get_mut(index) else { return Drained::All };
            if super_max != 0 {
                // Super-segments only into pool buffers: a frame queued for ARP goes out without
                // offloads. (A stack without TSO never sets the limit; a connection adopted from
                // one with TSO keeps its limit, but the scratch buffer of one MSS caps its
                // segments there.)
                e.conn.set_super_segment_limit(if mac.is_some() { super_max } else { 0 });
            } else if gso_max != 0 {
                // No more segments than the batch has room for: each is a frame of its own.
                e.conn.set_software_segmentation(if mac.is_some() { gso_max } else { 0 }, out.remaining());
            }
            let Some(mac) = mac else {
                // Unresolved next hop: the segment waits (bounded) in the ARP queue.
                let Some((t, lent)) = e.conn.poll_transmit_lent(now, &mut self.scratch) else {
                    return Drained::All;
                };
                let seg = match &lent {
                    Some(lent) => t.segment(lent.bytes()),
                    None => t.segment(&self.scratch),
                };
                let mut frame = vec![0u8; ETH_LEN + ip_len + seg.buffer_len()];
                emit::segment(&mut frame[ETH_LEN..], &seg, ends, (t.ect, false), ident, &self.config);
                self.ident = ident;
                self.send_frame_to(hop, frame);
                continue;
            };
            // A segment taken from the connection must go out, so a buffer for it is certain
            // first: this cache's own (nothing else takes from it before the segment is built,
            // and most drains end with a connection that has nothing to send), or, when the
            // cache holds none, one from the pool taken now.
            let mut plain = if cache.is_empty() {
                let Some(packet) = cache.alloc() else { return Drained::Stopped };
                Some(packet)
            } else {
                None
            };
            let Some((t, lent)) = e.conn.poll_transmit_lent(now, &mut self.scratch) else {
                return Drained::All;
            };
            if let Some(Lent::PooledRun(run)) = &lent {
                let ethertype = if remote_ip.is_ipv6() { EtherType::Ipv6 } else { EtherType::Ipv4 };
                let train = Train {
                    stats: &mut self.stats,
                    config: &self.config,
                    cache,
                    eth: ethernet_header(self.config.mac, mac, ethertype),
                    ends,
                    ip_len,
                    ect: t.ect,
                };
                drop(plain);
                let frames = train.emit::<OFFLOAD>(run, &t.segment(&[]), ident, out);
                self.ident =
                    ident.wrapping_add(u16::try_from(frames.sent).unwrap_or(u16::MAX)).wrapping_sub(1);
                self.stats.tx_gso_super_segments += 1;
                self.stats.tx_gso_dropped += frames.dropped as u64;
                *appended += frames.sent;
                continue;
            }
            if gso_max != 0 && t.segment_size != 0 {
                // A lent payload larger than a segment (a pool buffer or prepared piece of more
                // than one MSS) is copied into the frames, as a lent piece cut by a window is.
                // (`Train::emit` cuts a run of pool buffers the same way; one function for both,
                // tried, cost the single-segment path 2% of its instructions, `icount_tcp`,
                // through `transmit`'s code.)
                let seg = match &lent {
                    Some(lent) => t.segment(lent.bytes()),
                    None => t.segment(&self.scratch),
                };
                let ethertype = if remote_ip.is_ipv6() { EtherType::Ipv6 } else { EtherType::Ipv4 };
                let eth = ethernet_header(self.config.mac, mac, ethertype);
                // The headers of the frame before (Ethernet, IP, TCP), for a segment that repeats
                // them (`Piece::repeats`): copied, then the few fields that differ written.
                let mut before = [0u8; MAX_HEADERS];
                let headers = ETH_LEN + ip_len + seg.header_len();
                let frames = gso::cut(&seg, usize::from(t.segment_size), ident, |piece| {
                    let mut packet = plain.take().or_else(|| cache.alloc())?;
                    packet.set_len(headers + piece.payload.len()).ok()?;
                    let data = packet.data_mut();
                    let (ident, config) = (piece.ident, &self.config);
                    if piece.repeats {
                        // All of `before` where the frame is that long (the payload, written
                        // next, covers what lies past the headers): a copy of known length is a
                        // few vector moves, not a call to `memcpy` (11 instructions a segment
                        // fewer, measured). Every frame is, from the smallest MSS accepted (64).
                        match data.first_chunk_mut::<MAX_HEADERS>() {
                            Some(head) => *head = before,
                            None => data[..headers].copy_from_slice(&before[..headers]),
                        }
                        let (buf, headers) = (&mut data[ETH_LEN..], headers - ETH_LEN);
                        let payload = (piece.seq_number, piece.payload);
                        emit::repeat_segment::<false>(buf, headers, payload, ends, OFFLOAD, ident, config);
                    } else {
                        data[..ETH_LEN].copy_from_slice(&eth);
                        let seg = piece.segment(&seg);
                        emit::segment(&mut data[ETH_LEN..], &seg, ends, (t.ect, OFFLOAD), ident, config);
                        before[..headers].copy_from_slice(&data[..headers]);
                    }
                    if OFFLOAD {
                        let tcp_header = headers - ETH_LEN - ip_len;
                        packet.set_offload(offload_for((0, tcp_header, false), ip_len, remote_ip.is_ipv6()));
                    }
                    out.push(packet).ok()
                });
                self.ident =
                    ident.wrapping_add(u16::try_from(frames.sent).unwrap_or(u16::MAX)).wrapping_sub(1);
                self.stats.tx_gso_super_segments += 1;
                self.stats.tx_gso_dropped += frames.dropped as u64;
                *appended += frames.sent;
                continue;
            }
            self.ident = ident;
            let seg = match &lent {
                Some(_) => t.segment(&[]),
                None => t.segment(&self.scratch),
            };
            // A segment that is exactly one pool buffer of prepared content goes by reference: a
            // frame of the first of its copies with none in flight (round robin), whose data is only the
            // headers in front of the payload. So does one that is all of an application's pool
            // buffer (`send_pooled`), unless its one frame is still in flight.
            let headers = ETH_LEN + ip_len + seg.buffer_len();
            let frame = match &lent {
                Some(Lent::Prepared(slice)) => slice.copies().and_then(|mut copies| {
                    let frame = copies.find_map(|s| s.frame(cache, headers).ok());
                    self.stats.tx_by_reference_copied += u64::from(frame.is_none());
                    frame
                }),
                Some(Lent::Pooled(slice)) => pooled_frame(&mut self.stats, slice, cache, headers),
                Some(Lent::Ring(_) | Lent::PooledRun(_)) | None => None,
            };
            let by_reference = frame.is_some();
            let mut packet = if let Some(frame) = frame {
                drop(plain);
                frame
            } else {
                let Some(mut packet) = plain.or_else(|| cache.alloc()) else {
                    // Not expected (see above); the segment is lost and goes again on a timer.
                    self.stats.tx_dropped += 1;
                    return Drained::Stopped;
                };
                let payload_len = lent.as_ref().map_or(0, Lent::len);
                let len = ETH_LEN + ip_len + seg.buffer_len() + payload_len;
                if packet.set_len(len).is_err() {
                    self.stats.tx_dropped += 1;
                    continue;
                }
                packet
            };
            let data = packet.data_mut();
            let ethertype = if remote_ip.is_ipv6() { EtherType::Ipv6 } else { EtherType::Ipv4 };
            data[..ETH_LEN].copy_from_slice(&ethernet_header(self.config.mac, mac, ethertype));
            match &lent {
                Some(lent) => {
                    let (buf, flags, config) = (&mut data[ETH_LEN..], (t.ect, OFFLOAD), &self.config);
                    let payload = (lent.bytes(), lent.sum());
                    let precomputed = if by_reference {
                        emit::segment_prepared::<true>(buf, &seg, payload, ends, flags, ident, config)
                    } else {
                        emit::segment_prepared::<false>(buf, &seg, payload, ends, flags, ident, config)
                    };
                    if let Lent::Prepared(_) = lent {
                        self.stats.tx_by_reference += u64::from(by_reference);
                        self.stats.tx_prepared += 1;
                        self.stats.tx_prepared_sums += u64::from(precomputed);
                    }
                }
                None => {
                    emit::segment(&mut data[ETH_LEN..], &seg, ends, (t.ect, OFFLOAD), ident, &self.config)
                }
            }
            if OFFLOAD {
                let gso = (t.segment_size, seg.header_len(), seg.cwr);
                packet.set_offload(offload_for(gso, ip_len, remote_ip.is_ipv6()));
                if t.segment_size != 0 {
                    self.stats.tx_super_segments += 1;
                }
            }
            if out.push(packet).is_err() {
                self.stats.tx_dropped += 1;
                return Drained::Stopped;
            }
            *appended += 1;
        }
    }

    /// After a connection's output is drained: timers, reclaiming, and a released connection in
    /// TIME-WAIT traded for its compact record in the TIME-WAIT table. A connection whose state
    /// the record does not cover (see `Connection::time_wait_record`; not expected once drained)
    /// stays whole in its slot until its own 2·MSL ends, and is tried again after its next drain.
    pub(super) fn after_drain(&mut self, index: u32) {
        let epoch = self.epoch;
        if let Some(e) = self.slot_entry(index)
            && !e.app_owned
            && e.conn.state() == State::TimeWait
            && let Some(record) = e.conn.time_wait_record(epoch)
        {
            let key = FlowKey::new(e.conn.local(), e.conn.remote());
            self.reclaim(index);
            self.time_wait_insert(key, record);
            return;
        }
        self.arm_timer(index);
        let Some(e) = self.slot_entry(index) else { return };
        if e.conn.is_closed() {
            let key = FlowKey::new(e.conn.local(), e.conn.remote());
            let in_demux = std::mem::replace(&mut e.in_demux, false);
            let app_owned = e.app_owned;
            if in_demux {
                self.demux.remove(&key);
            }
            if !app_owned {
                self.reclaim(index);
            }
        }
    }
}

/// Whether `conn` has nothing to send now (`!`[`Connection::may_transmit`]), which every debug
/// build checks against `poll_transmit` itself (it finds nothing, and changes nothing, then).
#[inline]
fn nothing_to_send(conn: &mut Connection, now: Instant, scratch: &mut [u8]) -> bool {
    if conn.may_transmit() {
        return false;
    }
    #[cfg(debug_assertions)]
    assert!(
        conn.poll_transmit(now, scratch).is_none(),
        "may_transmit said no, but poll_transmit had a segment"
    );
    #[cfg(not(debug_assertions))]
    let _ = (now, scratch);
    true
}

enum Drained {
    All,
    Stopped,
}

/// The offload metadata of a connection's segment sent with a partial checksum: the TCP
/// checksum at `ETH_LEN + ip_len + 16`, and for a super-segment (its
/// [`Transmit::segment_size`](crate::tcp::Transmit::segment_size) not 0) the cut size and the
/// headers each cut repeats (the TCP header is `tcp_header_len` bytes), with ECN when the first
/// cut carries CWR. Scalars, not the segment: a reference would keep it in memory.
fn offload_for((segment_size, tcp_header_len, cwr): (u16, usize, bool), ip_len: usize, v6: bool) -> Offload {
    let l4 = u16::try_from(ETH_LEN + ip_len).unwrap_or(u16::MAX);
    let offload = Offload::NONE.with_partial_checksum(l4, 16);
    if segment_size == 0 {
        return offload;
    }
    let kind = if v6 { GsoKind::Tcp6 } else { GsoKind::Tcp4 };
    let header_len = l4.saturating_add(u16::try_from(tcp_header_len).unwrap_or(u16::MAX));
    let offload = offload.with_segmentation(kind, segment_size, header_len);
    if cwr { offload.with_ecn() } else { offload }
}

impl Stack {
    /// The most payload bytes of a super-segment to a peer behind an IP header of `ip_len`
    /// bytes: the configured limit ([`Config::super_segment_limit`]) clamped to what a buffer
    /// of `cache`'s pool holds behind the Ethernet header, less the headers (the TCP header at
    /// its longest, 60 bytes); 0 when off.
    #[cold]
    #[inline(never)]
    fn super_payload(&self, ip_len: usize, cache: &PoolCache) -> usize {
        let limit = self.config.super_segment_limit();
        limit.min(cache.pool().data_room().saturating_sub(ETH_LEN)).saturating_sub(ip_len + 60)
    }

    /// The most payload bytes of a super-segment the stack cuts itself ([`Config::gso_limit`]),
    /// to a peer behind an IP header of `ip_len` bytes: the limit less the headers (the TCP
    /// header at its longest), at most what the scratch buffer holds; 0 when off.
    ///
    /// [`Config::gso_limit`]: super::Config
    #[inline]
    fn gso_payload(&self, ip_len: usize) -> usize {
        let limit = self.config.gso_limit();
        if limit == 0 { 0 } else { limit.saturating_sub(ip_len + 60).min(self.scratch.len()) }
    }
}

/// What [`Train::emit`] needs of the stack to send a super-segment of whole pool buffers.
struct Train<'s, 'c> {
    stats: &'s mut StackStats,
    config: &'s Config,
    cache: &'c PoolCache,
    /// The frames' Ethernet header.
    eth: [u8; ETH_LEN],
    ends: (SocketAddr, SocketAddr),
    /// The IP header's length.
    ip_len: usize,
    /// The segments go as ECT.
    ect: bool,
}

impl<'c> Train<'_, 'c> {
    /// Sends the super-segment `whole`, whose payload is `run` (whole pool buffers of one segment
    /// each, the last maybe shorter), as software segmentation cuts one (`gso::cut_items`): a
    /// frame per buffer, by reference where its frame is not still in flight (else its bytes
    /// are copied into a fresh buffer), IP identifications from `first_ident`. The first and last
    /// frames' headers are emitted whole; a middle frame's are copied from the frame before and
    /// the fields that differ written (`emit::repeat_segment`), as for a cut of copied bytes.
    fn emit<const OFFLOAD: bool>(
        self,
        run: &PooledRun<'_>,
        whole: &TcpRepr<'_>,
        first_ident: u16,
        out: &mut PacketBatch<'c>,
    ) -> gso::Cut {
        let Self { stats, config, cache, eth, ends, ip_len, ect } = self;
        let headers = ETH_LEN + ip_len + whole.header_len();
        let mut before = [0u8; MAX_HEADERS];
        let items = run.slices().map(|slice| (slice.bytes(), slice));
        gso::cut_items(whole, items, run.count(), first_ident, |piece, slice| {
            let frame = pooled_frame(stats, &slice, cache, headers);
            let by_reference = frame.is_some();
            let mut packet = match frame {
                Some(frame) => frame,
                None => {
                    let mut packet = cache.alloc()?;
                    packet.set_len(headers + piece.payload.len()).ok()?;
                    packet
                }
            };
            let data = packet.data_mut();
            let ident = piece.ident;
            if piece.repeats {
                data[..headers].copy_from_slice(&before[..headers]);
                let (buf, headers) = (&mut data[ETH_LEN..], headers - ETH_LEN);
                let payload = (piece.seq_number, piece.payload);
                if by_reference {
                    emit::repeat_segment::<true>(buf, headers, payload, ends, OFFLOAD, ident, config);
                } else {
                    emit::repeat_segment::<false>(buf, headers, payload, ends, OFFLOAD, ident, config);
                }
            } else {
                data[..ETH_LEN].copy_from_slice(&eth);
                let (buf, seg) = (&mut data[ETH_LEN..], piece.segment(whole));
                if by_reference {
                    // The header alone, the payload lying behind it.
                    let (seg, payload) = (TcpRepr { payload: &[], ..seg }, (piece.payload, None));
                    emit::segment_prepared::<true>(buf, &seg, payload, ends, (ect, OFFLOAD), ident, config);
                } else {
                    emit::segment(buf, &seg, ends, (ect, OFFLOAD), ident, config);
                }
                before[..headers].copy_from_slice(&data[..headers]);
            }
            if OFFLOAD {
                let tcp_header = headers - ETH_LEN - ip_len;
                packet.set_offload(offload_for((0, tcp_header, false), ip_len, ends.1.is_ipv6()));
            }
            out.push(packet).ok()
        })
    }
}

/// A frame of the application's pool buffer `slice` lies in, when the segment is all of it and
/// the buffer can carry the headers now; `None` (counted in `stats`) when the segment is a part of
/// it or its frame is still in flight (or it lacks headroom, or is of another pool): then the
/// caller copies.
fn pooled_frame<'c>(
    stats: &mut StackStats,
    slice: &PooledSlice<'_>,
    cache: &'c PoolCache,
    headers: usize,
) -> Option<Packet<'c>> {
    if !slice.is_whole() {
        stats.tx_pool_split += 1;
        return None;
    }
    let frame = slice.buffer.frame(cache, headers).ok();
    stats.tx_pool_by_reference += u64::from(frame.is_some());
    stats.tx_pool_busy += u64::from(frame.is_none());
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ethernet_header_bytes_are_what_emit_writes() {
        let (src, dst) = (EthernetAddress([2, 0, 0, 0, 0, 1]), EthernetAddress([2, 0, 0, 0, 0, 2]));
        for ethertype in [EtherType::Ipv4, EtherType::Ipv6] {
            let mut frame = [0xff; ETH_LEN];
            EthernetRepr { src_addr: src, dst_addr: dst, vlan: None, ethertype }
                .emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
            assert_eq!(ethernet_header(src, dst, ethertype), frame);
        }
    }
}
