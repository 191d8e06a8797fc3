//! The receive path below TCP: Ethernet frames, ARP (RFC 826), IPv4 with fragment reassembly,
//! ICMP echo and PMTU discovery from fragmentation-needed messages (RFC 1191), and the routing
//! decision ([`Stack::ping`] sends an echo request, [`Stack::take_ping_reply`] reads the answers).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

use super::hash::FlowKey;
use super::{Deliver, Error, Stack, StreamId};
#[cfg(doc)]
use crate::tcp::Connection;
use crate::wire::ipv4::ECN_CE;
use crate::wire::{
    ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, Icmpv4Packet, Icmpv4Repr,
    Ipv4Packet, Ipv4Repr, Protocol, SeqNumber,
};

/// Most echo replies kept for [`Stack::take_ping_reply`].
const MAX_PING_REPLIES: usize = 64;

/// An ICMP echo reply received (see [`Stack::ping`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingReply {
    /// Who answered.
    pub from: Ipv4Addr,
    /// The echo identifier.
    pub ident: u16,
    /// The echo sequence number.
    pub seq_no: u16,
    /// Bytes of echoed data.
    pub len: usize,
}

impl Stack {
    pub(super) fn route(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        if self.config.ip.contains_addr(dst) { Some(dst) } else { self.config.gateway }
    }

    /// Sends an ICMP echo request to `dst`.
    ///
    /// # Errors
    /// [`Error::Unreachable`].
    pub fn ping(&mut self, dst: Ipv4Addr, ident: u16, seq_no: u16, data: &[u8]) -> Result<(), Error> {
        self.route(dst).ok_or(Error::Unreachable)?;
        let repr = Icmpv4Repr::EchoRequest { ident, seq_no, data };
        self.send_icmp(dst, &repr);
        Ok(())
    }

    /// The oldest echo reply received and not yet taken (at most 64 are kept).
    pub fn take_ping_reply(&mut self) -> Option<PingReply> {
        self.ping_replies.pop_front()
    }

    /// Processes one received Ethernet frame (any bytes: what does not parse is counted and
    /// dropped).
    pub fn receive(&mut self, now: Instant, frame: &[u8]) {
        self.receive_with(now, frame, &mut |_, _| 0);
    }

    /// [`receive`](Self::receive) with in-place delivery of TCP payload: in-order bytes of a
    /// connection the application holds a handle for, with nothing buffered ahead of them, are
    /// offered to `deliver` where they lie in `frame` (see
    /// [`Connection::handle_segment_with`]); it returns how many it consumed, and the rest is
    /// buffered for [`recv`](Self::recv). Consumed bytes never enter the receive buffer, so the
    /// advertised window stays open.
    pub fn receive_with<F: FnMut(StreamId, &[u8]) -> usize>(
        &mut self,
        now: Instant,
        frame: &[u8],
        deliver: &mut F,
    ) {
        self.receive_deliver(now, frame, deliver);
    }

    /// [`receive_with`](Self::receive_with) for any [`Deliver`]: TCP payload as there, and UDP
    /// datagrams offered in place too ([`Deliver::udp`]).
    pub fn receive_deliver<D: Deliver + ?Sized>(&mut self, now: Instant, frame: &[u8], deliver: &mut D) {
        self.advance(now);
        self.stats.rx_frames += 1;
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let dst = eth.dst_addr();
        let unicast = dst == self.config.mac;
        if !unicast && !dst.is_broadcast() {
            self.stats.rx_not_for_us += 1;
            return;
        }
        match eth.ethertype() {
            EtherType::Arp => self.receive_arp(eth.payload()),
            // RFC 1122 §3.3.6: a datagram that came as a link-layer broadcast but is not an IP
            // broadcast or multicast is discarded, and this stack takes only datagrams for its
            // unicast address: on the broadcast MAC only ARP is ours.
            EtherType::Ipv4 if !unicast => self.stats.rx_link_broadcast += 1,
            EtherType::Ipv4 => self.receive_ipv4(eth.payload(), deliver),
            _ => self.stats.rx_unhandled += 1,
        }
    }

    /// Records that `ip` is at `mac`, as an ARP packet from it would (RFC 826), and sends what was
    /// waiting for the address. For a runtime that runs several stacks behind one address: an ARP
    /// packet reaches one of them, and the others learn the sender from it through this. Ignores
    /// what an ARP packet could not teach either (a broadcast or multicast MAC, the unspecified
    /// address, our own).
    pub fn learn_neighbor(&mut self, ip: Ipv4Addr, mac: EthernetAddress) {
        if mac.is_unicast() && !ip.is_unspecified() && ip != self.ip() {
            let waiting = self.arp.insert(ip, mac, self.now);
            for mut frame in waiting {
                self.fill_ethernet(&mut frame, mac);
                self.push_frame(frame);
            }
        }
    }

    fn receive_arp(&mut self, bytes: &[u8]) {
        let Ok(repr) = ArpPacket::new_checked(bytes).and_then(|p| ArpRepr::parse(&p)) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let (sender_ip, sender_mac) = (repr.source_protocol_addr, repr.source_hardware_addr);
        let for_us = repr.target_protocol_addr == self.ip();
        let usable = sender_mac.is_unicast() && !sender_ip.is_unspecified() && sender_ip != self.ip();
        // RFC 826: update a known entry from any packet; add one when the packet is for us.
        if usable && (for_us || self.arp.contains(sender_ip)) {
            let waiting = self.arp.insert(sender_ip, sender_mac, self.now);
            for mut frame in waiting {
                self.fill_ethernet(&mut frame, sender_mac);
                self.push_frame(frame);
            }
        }
        if !for_us {
            self.stats.rx_not_for_us += 1;
            return;
        }
        if repr.operation == ArpOperation::Request && usable {
            self.queue_arp(ArpOperation::Reply, sender_mac, sender_mac, sender_ip);
            self.stats.arp_replies += 1;
        }
    }

    fn receive_ipv4<D: Deliver + ?Sized>(&mut self, bytes: &[u8], deliver: &mut D) {
        let Ok(packet) = Ipv4Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        if packet.is_fragment() {
            self.stats.rx_fragments += 1;
            match self.reassembler.add(&packet, self.now) {
                Ok(Some(datagram)) => {
                    self.stats.rx_reassembled += 1;
                    self.receive_datagram(&datagram.header, &datagram.payload, deliver);
                }
                Ok(None) => {}
                Err(_) => self.stats.rx_malformed += 1,
            }
            return;
        }
        match Ipv4Repr::parse(&packet, self.config.checksum) {
            Ok(repr) => self.receive_datagram(&repr, packet.payload(), deliver),
            Err(_) => self.stats.rx_malformed += 1,
        }
    }

    fn receive_datagram<D: Deliver + ?Sized>(&mut self, ip: &Ipv4Repr, payload: &[u8], deliver: &mut D) {
        if ip.dst_addr != self.ip() {
            self.stats.rx_not_for_us += 1;
            return;
        }
        match ip.protocol {
            Protocol::Tcp => self.receive_tcp(ip.src_addr, ip.ecn == ECN_CE, payload, deliver),
            Protocol::Icmp => self.receive_icmp(ip.src_addr, payload),
            Protocol::Udp => self.receive_udp(ip, payload, deliver),
            _ => self.stats.rx_unhandled += 1,
        }
    }

    fn receive_icmp(&mut self, src: Ipv4Addr, bytes: &[u8]) {
        let Ok(packet) = Icmpv4Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        match Icmpv4Repr::parse(&packet, self.config.checksum) {
            Ok(Icmpv4Repr::EchoRequest { ident, seq_no, data }) => {
                self.send_icmp(src, &Icmpv4Repr::EchoReply { ident, seq_no, data });
                self.stats.icmp_echo_replies += 1;
            }
            Ok(Icmpv4Repr::EchoReply { ident, seq_no, data }) => {
                if self.ping_replies.len() < MAX_PING_REPLIES {
                    self.ping_replies.push_back(PingReply { from: src, ident, seq_no, len: data.len() });
                }
            }
            Ok(Icmpv4Repr::DstUnreachable {
                reason: crate::wire::icmpv4::DstUnreachable::FragRequired,
                next_hop_mtu,
                header,
                data,
            }) => {
                self.frag_needed(next_hop_mtu, &header, data);
            }
            // Other destination unreachable / time exceeded messages: soft errors are a later item.
            Ok(_) => self.stats.rx_unhandled += 1,
            Err(_) => self.stats.rx_malformed += 1,
        }
    }

    /// PMTU discovery (RFC 1191): a fragmentation-needed message quoting a segment we sent (its
    /// IPv4 header and first 8 TCP bytes: ports and sequence number) goes to that connection,
    /// which checks the sequence number (RFC 5927 §4.1) and lowers its send MSS.
    fn frag_needed(&mut self, next_hop_mtu: u16, header: &Ipv4Repr, data: &[u8]) {
        let quoted = (header.protocol == Protocol::Tcp && header.src_addr == self.ip())
            .then(|| data.get(..8))
            .flatten()
            .map(|d| {
                let port = |i: usize| u16::from_be_bytes([d[i], d[i + 1]]);
                let seq = SeqNumber::new(u32::from_be_bytes([d[4], d[5], d[6], d[7]]));
                (
                    SocketAddrV4::new(header.src_addr, port(0)),
                    SocketAddrV4::new(header.dst_addr, port(2)),
                    seq,
                )
            });
        let lowered = quoted.is_some_and(|(local, remote, seq)| {
            let Some(&index) = self.demux.get(&FlowKey::new(local, remote)) else { return false };
            let lowered =
                self.slot_entry(index).is_some_and(|e| e.conn.handle_frag_needed(seq, next_hop_mtu));
            if lowered {
                self.mark_ready(index);
            }
            lowered
        });
        if lowered {
            self.stats.icmp_pmtu_updates += 1;
        } else {
            self.stats.icmp_pmtu_ignored += 1;
        }
    }
}
