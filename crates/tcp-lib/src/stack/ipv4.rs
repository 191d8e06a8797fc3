//! The receive path below TCP: Ethernet frames (to the IPv4 or the [IPv6](super::ipv6) path),
//! ARP (RFC 826), IPv4 with fragment reassembly, ICMP echo and PMTU discovery from
//! fragmentation-needed messages (RFC 1191) ([`Stack::ping`] sends an echo request over either
//! family, [`Stack::take_ping_reply`] reads the answers).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use super::flows::FlowKey;
use netchannel::pool::Offload;

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

/// An ICMP or ICMPv6 echo reply received (see [`Stack::ping`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingReply {
    /// Who answered.
    pub from: IpAddr,
    /// The echo identifier.
    pub ident: u16,
    /// The echo sequence number.
    pub seq_no: u16,
    /// Bytes of echoed data.
    pub len: usize,
}

impl Stack {
    /// Sends an echo request to `dst`: ICMP to an IPv4 address, ICMPv6 to an IPv6 one.
    ///
    /// # Errors
    /// [`Error::Unreachable`] (no route, or IPv6 off).
    pub fn ping(
        &mut self,
        dst: impl Into<IpAddr>,
        ident: u16,
        seq_no: u16,
        data: &[u8],
    ) -> Result<(), Error> {
        let dst = dst.into();
        self.next_hop(dst).ok_or(Error::Unreachable)?;
        match dst {
            IpAddr::V4(d) => self.send_icmp(d, &Icmpv4Repr::EchoRequest { ident, seq_no, data }),
            IpAddr::V6(d) => {
                let repr = crate::wire::Icmpv6Repr::EchoRequest { ident, seq_no, data };
                self.send_icmpv6(d, &repr, None);
            }
        }
        Ok(())
    }

    /// The oldest echo reply received and not yet taken (at most 64 are kept).
    pub fn take_ping_reply(&mut self) -> Option<PingReply> {
        self.ping_replies.pop_front()
    }

    /// Keeps an echo reply for [`take_ping_reply`](Self::take_ping_reply) (dropped beyond 64).
    pub(super) fn take_echo_reply(&mut self, reply: PingReply) {
        if self.ping_replies.len() < MAX_PING_REPLIES {
            self.ping_replies.push_back(reply);
        }
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
        self.receive_offload(now, frame, Offload::NONE, deliver);
    }

    /// [`receive_deliver`](Self::receive_deliver) for a frame with the device's offload
    /// metadata (a pool buffer's [`Packet::offload`](netchannel::pool::Packet::offload), which
    /// [`poll`](Self::poll) passes): when [`Offload::checksum_trusted`] (the device verified the
    /// checksums, or the frame carries a partial checksum from a sender on this machine), its TCP
    /// or UDP checksum is not verified even under
    /// [`ChecksumPolicy::Verify`](crate::wire::ChecksumPolicy::Verify), and counted in
    /// [`StackStats::rx_checksum_trusted`](super::StackStats::rx_checksum_trusted). Segments a
    /// device coalesced (GRO/LRO, up to 65535 bytes of IP packet) are taken as any segment: whole
    /// where the window holds them, offered whole to `deliver`. (`receive`, `receive_with` and
    /// `receive_deliver` are this with [`Offload::NONE`].)
    pub fn receive_offload<D: Deliver + ?Sized>(
        &mut self,
        now: Instant,
        frame: &[u8],
        offload: Offload,
        deliver: &mut D,
    ) {
        self.begin_frame(now, offload);
        self.receive_ethernet(frame, deliver);
    }

    /// [`receive_offload`](Self::receive_offload) inside [`poll`](Self::poll)'s receive loop,
    /// which remembers the headers of a segment a connection predicted, so that the same flow's
    /// next segment, if it is the next frame, is taken unparsed ([`rx_cache`](super::rx_cache)).
    pub(super) fn receive_frame<D: Deliver + ?Sized>(
        &mut self,
        now: Instant,
        frame: &[u8],
        offload: Offload,
        deliver: &mut D,
    ) {
        self.begin_frame(now, offload);
        if self.rx_memory.holds_headers() && self.receive_continued(frame, deliver) {
            return;
        }
        self.rx_remember = true;
        self.receive_ethernet(frame, deliver);
        self.rx_remember = false;
        self.rx_memory.keep_headers(frame);
    }

    /// What every received frame starts with: the clock, its offload metadata, the count.
    #[inline]
    fn begin_frame(&mut self, now: Instant, offload: Offload) {
        self.rx_trusted = offload.checksum_trusted();
        self.advance(now);
        self.stats.rx_frames += 1;
    }

    /// An Ethernet frame, to the protocol it carries.
    fn receive_ethernet<D: Deliver + ?Sized>(&mut self, frame: &[u8], deliver: &mut D) {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let dst = eth.dst_addr();
        let unicast = dst == self.config.mac;
        let broadcast = dst.is_broadcast();
        // A multicast MAC is ours only for an IPv6 group joined.
        let group = !unicast && !broadcast && self.v6.as_ref().is_some_and(|v6| v6.takes_mac(dst));
        if !unicast && !broadcast && !group {
            self.stats.rx_not_for_us += 1;
            return;
        }
        match eth.ethertype() {
            EtherType::Arp if !group => self.receive_arp(eth.payload()),
            EtherType::Ipv4 if unicast => self.receive_ipv4(eth.payload(), deliver),
            // RFC 1122 §3.3.6: a datagram that came as a link-layer broadcast but is not an IP
            // broadcast or multicast is discarded, and this stack takes only datagrams for its
            // unicast address: on the broadcast MAC only ARP is ours. (IPv6 has no broadcast.)
            EtherType::Ipv4 | EtherType::Ipv6 if broadcast => self.stats.rx_link_broadcast += 1,
            EtherType::Ipv6 => self.receive_ipv6(eth.payload(), deliver),
            _ => self.stats.rx_unhandled += 1,
        }
    }

    /// Records that `ip` is at `mac`, as an ARP packet (or, for IPv6, a neighbour advertisement)
    /// from it would (RFC 826, RFC 4861), and sends what was waiting for the address. For a
    /// runtime that runs several stacks behind one address: an ARP packet reaches one of them,
    /// and the others learn the sender from it through this. Ignores what such a packet could
    /// not teach either (a broadcast or multicast MAC, the unspecified or a multicast address,
    /// our own).
    pub fn learn_neighbor(&mut self, ip: impl Into<IpAddr>, mac: EthernetAddress) {
        let ip = ip.into();
        if mac.is_unicast() && !ip.is_unspecified() && !ip.is_multicast() && !self.is_local(ip) {
            self.neighbor_learned(ip, mac);
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
            self.neighbor_learned(IpAddr::V4(sender_ip), sender_mac);
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
        if self.ip().is_unspecified() {
            // IPv4 is off (an IPv6-only interface).
            self.stats.rx_unhandled += 1;
            return;
        }
        let Ok(packet) = Ipv4Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        if packet.is_fragment() {
            self.stats.rx_fragments += 1;
            match self.reassembler.add(&packet, self.now) {
                Ok(Some(datagram)) => {
                    self.stats.rx_reassembled += 1;
                    // One fragment's metadata speaks for no datagram: its checksum is verified.
                    self.rx_trusted = false;
                    self.receive_datagram(&datagram.header, &datagram.payload, deliver);
                }
                Ok(None) => {}
                Err(_) => self.stats.rx_malformed += 1,
            }
            return;
        }
        // Not a fragment (above): the header's checks alone.
        match Ipv4Repr::parse_header(&packet, self.config.checksum) {
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
            Protocol::Tcp => self.receive_tcp(ip.src_addr, ip.dst_addr, ip.ecn == ECN_CE, payload, deliver),
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
                self.take_echo_reply(PingReply { from: IpAddr::V4(src), ident, seq_no, len: data.len() });
            }
            Ok(Icmpv4Repr::DstUnreachable {
                reason: crate::wire::icmpv4::DstUnreachable::FragRequired,
                next_hop_mtu,
                header,
                data,
            }) => {
                let tcp = header.protocol == Protocol::Tcp;
                self.path_mtu_report(
                    tcp,
                    IpAddr::V4(header.src_addr),
                    IpAddr::V4(header.dst_addr),
                    data,
                    next_hop_mtu,
                );
            }
            // Other destination unreachable / time exceeded messages: soft errors are a later item.
            Ok(_) => self.stats.rx_unhandled += 1,
            Err(_) => self.stats.rx_malformed += 1,
        }
    }

    /// Path MTU discovery (RFC 1191, RFC 8201): an ICMP fragmentation-needed or ICMPv6 Packet Too
    /// Big message quoting a TCP segment (`tcp`) sent from `src` to `dst` (`quoted`: its first 8
    /// TCP bytes, ports and sequence number) goes to that connection, which checks the sequence
    /// number (RFC 5927 §4.1) and lowers its send MSS.
    pub(super) fn path_mtu_report(&mut self, tcp: bool, src: IpAddr, dst: IpAddr, quoted: &[u8], mtu: u16) {
        let tuple = quoted.get(..8).filter(|_| tcp && self.is_local(src)).map(|d| {
            let port = |i: usize| u16::from_be_bytes([d[i], d[i + 1]]);
            let seq = SeqNumber::new(u32::from_be_bytes([d[4], d[5], d[6], d[7]]));
            (SocketAddr::new(src, port(0)), SocketAddr::new(dst, port(2)), seq)
        });
        let lowered = tuple.is_some_and(|(local, remote, seq)| {
            let Some(&index) = self.demux.get(&FlowKey::new(local, remote)) else { return false };
            let lowered = self.slot_entry(index).is_some_and(|e| e.conn.handle_frag_needed(seq, mtu));
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
