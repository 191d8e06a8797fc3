//! Output: [`Stack::transmit`] drains queued control frames and the connections on the ready list
//! into pool buffers, writing the Ethernet, IPv4 and TCP headers (and prepared content); control
//! frames (ARP, ICMP, resets, SYN cookies) and datagrams to next hops still being resolved are
//! queued here.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

use netchannel::dev::PacketBatch;
use netchannel::pool::PoolCache;

use super::arp::Enqueued;
use super::hash::FlowKey;
use super::{Config, ETH_LEN, IP_LEN, PreparedSlice, Stack};
use crate::tcp::{State, Transmit};
use crate::wire::ipv4::ECN_ECT0;
use crate::wire::{
    ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Icmpv4Packet,
    Icmpv4Repr, Ipv4Packet, Ipv4Repr, Protocol, TcpControl, TcpPacket, TcpRepr, checksum,
};

impl Stack {
    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
    }

    pub(super) fn fill_ethernet(&self, frame: &mut [u8], dst: EthernetAddress) {
        let repr =
            EthernetRepr { src_addr: self.config.mac, dst_addr: dst, vlan: None, ethertype: EtherType::Ipv4 };
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
        self.send_frame_to(hop, frame);
    }

    pub(super) fn send_frame_to(&mut self, hop: Ipv4Addr, mut frame: Vec<u8>) {
        if let Some(mac) = self.arp.lookup(hop, self.now) {
            self.fill_ethernet(&mut frame, mac);
            self.push_frame(frame);
            return;
        }
        match self.arp.enqueue(hop, frame, self.now) {
            Enqueued::RequestNow => {
                self.queue_arp(
                    ArpOperation::Request,
                    EthernetAddress::BROADCAST,
                    EthernetAddress([0; 6]),
                    hop,
                );
            }
            Enqueued::Queued => {}
            Enqueued::Dropped => self.stats.arp_dropped += 1,
        }
    }

    pub(super) fn send_icmp(&mut self, dst: Ipv4Addr, repr: &Icmpv4Repr<'_>) {
        self.send_ip(dst, Protocol::Icmp, repr.buffer_len(), |b| {
            repr.emit(&mut Icmpv4Packet::new_unchecked(b))
        });
    }

    pub(super) fn send_tcp_control(&mut self, local: SocketAddrV4, remote: SocketAddrV4, seg: &TcpRepr<'_>) {
        if seg.control == TcpControl::Rst {
            self.stats.rst_sent += 1;
        }
        let (src, dst) = (*local.ip(), *remote.ip());
        self.send_ip(dst, Protocol::Tcp, seg.buffer_len(), |b| {
            seg.emit(&mut TcpPacket::new_unchecked(b), src, dst)
        });
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
            match self.drain_connection(index, cache, out, &mut appended) {
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

    fn drain_connection<'c>(
        &mut self,
        index: u32,
        cache: &'c PoolCache,
        out: &mut PacketBatch<'c>,
        appended: &mut usize,
    ) -> Drained {
        let now = self.now;
        let Some(remote_ip) = self.slot_entry(index).map(|e| *e.conn.remote().ip()) else {
            return Drained::All;
        };
        let Some(hop) = self.route(remote_ip) else { return Drained::All };
        loop {
            let mac = self.arp.lookup(hop, now);
            if mac.is_some() && out.is_full() {
                return Drained::Stopped;
            }
            let ident = self.ident.wrapping_add(1);
            let Some(e) = self.slots.get_mut(index) else { return Drained::All };
            let Some(mac) = mac else {
                // Unresolved next hop: the segment waits (bounded) in the ARP queue.
                let Some((t, lent)) = e.conn.poll_transmit_prepared(now, &mut self.scratch) else {
                    return Drained::All;
                };
                let seg = match &lent {
                    Some(slice) => t.segment(slice.bytes()),
                    None => t.segment(&self.scratch),
                };
                let mut frame = vec![0u8; ETH_LEN + IP_LEN + seg.buffer_len()];
                emit_ip_tcp(&mut frame[ETH_LEN..], &seg, Ends::of(&t), ident, &self.config);
                self.ident = ident;
                self.send_frame_to(hop, frame);
                continue;
            };
            let Some(mut packet) = cache.alloc() else { return Drained::Stopped };
            let Some((t, lent)) = e.conn.poll_transmit_prepared(now, &mut self.scratch) else {
                return Drained::All;
            };
            self.ident = ident;
            let seg = match &lent {
                Some(_) => t.segment(&[]),
                None => t.segment(&self.scratch),
            };
            let payload_len = lent.as_ref().map_or(0, |l| l.len);
            let len = ETH_LEN + IP_LEN + seg.buffer_len() + payload_len;
            if packet.set_len(len).is_err() {
                self.stats.tx_dropped += 1;
                continue;
            }
            let data = packet.data_mut();
            EthernetRepr { src_addr: self.config.mac, dst_addr: mac, vlan: None, ethertype: EtherType::Ipv4 }
                .emit(&mut EthernetFrame::new_unchecked(&mut data[..]));
            match &lent {
                Some(slice) => {
                    let precomputed = emit_ip_tcp_prepared(
                        &mut data[ETH_LEN..],
                        &seg,
                        slice,
                        Ends::of(&t),
                        ident,
                        &self.config,
                    );
                    self.stats.tx_prepared += 1;
                    self.stats.tx_prepared_sums += u64::from(precomputed);
                }
                None => emit_ip_tcp(&mut data[ETH_LEN..], &seg, Ends::of(&t), ident, &self.config),
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

enum Drained {
    All,
    Stopped,
}

/// What the IP header of a connection's segment needs of its [`Transmit`], taken by value (a
/// reference to the `Transmit` would keep the whole 152-byte `Option` the connection returned in
/// memory, and cost a `memcpy` per segment).
#[derive(Clone, Copy)]
struct Ends {
    src: SocketAddrV4,
    dst: SocketAddrV4,
    ect: bool,
}

impl Ends {
    fn of(t: &Transmit) -> Self {
        Self { src: t.src, dst: t.dst, ect: t.ect }
    }
}

/// The IPv4 header of a connection's segment of `payload_len` TCP bytes: ECT(0) when the
/// connection marks it ECN-capable (RFC 3168 §5; ECT(1) is left to L4S, RFC 9331).
fn ip_header(t: Ends, payload_len: usize, ident: u16, config: &Config) -> Ipv4Repr {
    Ipv4Repr {
        src_addr: *t.src.ip(),
        dst_addr: *t.dst.ip(),
        protocol: Protocol::Tcp,
        payload_len,
        ttl: config.ttl,
        dscp: 0,
        ecn: if t.ect { ECN_ECT0 } else { 0 },
        ident,
        dont_frag: true,
    }
}

/// Writes the IPv4 header and the TCP segment into `buf` (exactly `20 + seg.buffer_len()` bytes);
/// the TCP checksum as [`Config::tx_checksum`] says.
fn emit_ip_tcp(buf: &mut [u8], seg: &TcpRepr<'_>, t: Ends, ident: u16, config: &Config) {
    let (src, dst) = (t.src, t.dst);
    let ip = ip_header(t, seg.buffer_len(), ident, config);
    let mut packet = Ipv4Packet::new_unchecked(buf);
    ip.emit(&mut packet);
    let mut tcp = TcpPacket::new_unchecked(packet.payload_mut());
    if config.tx_checksum {
        seg.emit(&mut tcp, *src.ip(), *dst.ip());
    } else {
        seg.emit_unsummed(&mut tcp);
    }
}

/// [`emit_ip_tcp`] for a segment whose payload is prepared content: `seg` is the header (empty
/// payload), `slice` the payload, written straight from the prepared bytes; the checksum adds the
/// precomputed payload sum when there is one (returns whether), else sums the payload; none at
/// all without [`Config::tx_checksum`] (returns false).
fn emit_ip_tcp_prepared(
    buf: &mut [u8],
    seg: &TcpRepr<'_>,
    slice: &PreparedSlice,
    t: Ends,
    ident: u16,
    config: &Config,
) -> bool {
    let (src, dst) = (t.src, t.dst);
    let header_len = seg.buffer_len();
    let tcp_len = header_len + slice.len;
    let ip = ip_header(t, tcp_len, ident, config);
    let mut packet = Ipv4Packet::new_unchecked(buf);
    ip.emit(&mut packet);
    let tcp = packet.payload_mut();
    if !config.tx_checksum {
        seg.emit_unsummed(&mut TcpPacket::new_unchecked(&mut tcp[..header_len]));
        tcp[header_len..tcp_len].copy_from_slice(slice.bytes());
        return false;
    }
    seg.emit(&mut TcpPacket::new_unchecked(&mut tcp[..header_len]), *src.ip(), *dst.ip());
    tcp[header_len..tcp_len].copy_from_slice(slice.bytes());
    let precomputed = slice.sum();
    let payload_sum = precomputed.unwrap_or_else(|| checksum::data(slice.bytes()));
    let mut view = TcpPacket::new_unchecked(&mut tcp[..tcp_len]);
    view.set_checksum(0);
    let length = u32::try_from(tcp_len).unwrap_or(u32::MAX);
    let sum = checksum::combine(&[
        checksum::pseudo_header_v4(*src.ip(), *dst.ip(), 6, length),
        checksum::data(&tcp[..header_len]),
        payload_sum,
    ]);
    TcpPacket::new_unchecked(&mut tcp[..tcp_len]).set_checksum(checksum::finish(sum));
    precomputed.is_some()
}
