//! The stack's public counters: [`StackStats`] since creation and [`PollStats`] of one poll.

#[cfg(doc)]
use super::{Config, Stack};

/// Counters of a [`Stack`], since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Frames given to [`Stack::receive`].
    pub rx_frames: u64,
    /// Frames for another MAC or IP address (or a multicast group not joined).
    pub rx_not_for_us: u64,
    /// IPv4 frames sent to the broadcast MAC, discarded: the stack takes only datagrams for its
    /// unicast address, and one of those that came as a link-layer broadcast is discarded
    /// (RFC 1122 §3.3.6). (A multicast MAC is counted in `rx_not_for_us`.)
    pub rx_link_broadcast: u64,
    /// Frames that did not parse (truncated, bad checksum, malformed headers).
    pub rx_malformed: u64,
    /// Frames of an EtherType, IP protocol or ICMP message the stack does not handle.
    pub rx_unhandled: u64,
    /// IPv4 and IPv6 fragments received.
    pub rx_fragments: u64,
    /// Datagrams reassembled from fragments.
    pub rx_reassembled: u64,
    /// TCP segments delivered to a connection or listener.
    pub tcp_segments_in: u64,
    /// TCP segments for no connection and no listener.
    pub tcp_no_socket: u64,
    /// TCP segments from a source address no peer can have (unspecified, loopback, multicast,
    /// broadcast, or our own: RFC 1122 §3.2.1.3 and §4.2.3.10), dropped unanswered.
    pub tcp_bad_source: u64,
    /// Resets sent by the stack (for segments no one wants).
    pub rst_sent: u64,
    /// ARP requests sent.
    pub arp_requests: u64,
    /// ARP replies sent.
    pub arp_replies: u64,
    /// Packets dropped waiting for ARP (queue full, or the next hop never answered).
    pub arp_dropped: u64,
    /// Neighbour solicitations sent (IPv6 next hops being resolved).
    pub ndp_solicits: u64,
    /// Neighbour advertisements sent (answers to solicitations for our addresses).
    pub ndp_adverts: u64,
    /// IPv6 packets dropped waiting for Neighbor Discovery (queue full, or the next hop never
    /// answered).
    pub ndp_dropped: u64,
    /// Router advertisements taken (default router, SLAAC prefix).
    pub ra_accepted: u64,
    /// ICMP and ICMPv6 echo replies sent.
    pub icmp_echo_replies: u64,
    /// ICMP fragmentation-needed (RFC 1191) and ICMPv6 Packet Too Big (RFC 8201) messages that
    /// lowered a connection's path MTU.
    pub icmp_pmtu_updates: u64,
    /// Such messages ignored: for no TCP connection of ours, quoting a sequence number not in
    /// flight (RFC 5927 §4.1), or reporting an MTU not below the path MTU.
    pub icmp_pmtu_ignored: u64,
    /// Frames appended by [`Stack::transmit`].
    pub tx_frames: u64,
    /// Frames dropped on output: control queue full, no pool buffer, a device that refused them.
    pub tx_dropped: u64,
    /// Datagrams with no route.
    pub no_route: u64,
    /// SYN cookies sent.
    pub syn_cookies_sent: u64,
    /// Connections established from a valid cookie.
    pub syn_cookies_accepted: u64,
    /// ACKs that failed the cookie check, dropped without a reset (see the listener module's
    /// "Cookies and resets").
    pub syn_cookies_rejected: u64,
    /// SYNs and handshake ACKs dropped: SYN queue full without cookies, backlog full, or
    /// [`Config::max_connections`] reached.
    pub listen_drops: u64,
    /// Connections created (active and passive).
    pub connections_opened: u64,
    /// Connection slots reclaimed.
    pub connections_reclaimed: u64,
    /// TIME-WAIT connections evicted because the table was full.
    pub time_wait_evicted: u64,
    /// Connections moved out with [`Stack::detach`].
    pub connections_detached: u64,
    /// Connections moved in with [`Stack::adopt`].
    pub connections_adopted: u64,
    /// TCP segments whose payload was written from prepared content
    /// ([`Stack::send_prepared`]), not from the send ring.
    pub tx_prepared: u64,
    /// Of those, segments whose payload sum was precomputed (a prepared cut).
    pub tx_prepared_sums: u64,
    /// Of those, segments sent by reference: the headers written into the headroom of the pool
    /// buffer holding the segment ([`PreparedSegments::in_pool`](crate::stack::PreparedSegments::in_pool)),
    /// and that buffer handed to the device without a copy.
    pub tx_by_reference: u64,
    /// Segments that were exactly one pool buffer of prepared content but were copied: a frame
    /// of each of its copies was still in flight (other connections, or earlier sends of it), the
    /// headroom was too short for the headers, or the buffers are of another pool than the cache's.
    pub tx_by_reference_copied: u64,
    /// Segments whose payload was all of an application's pool buffer ([`Stack::send_pooled`])
    /// and went to the device by reference: the headers written into its headroom.
    pub tx_pool_by_reference: u64,
    /// Segments whose payload was part of an application's pool buffer, copied: the buffer held
    /// more than the segment could (more than the MSS, or the peer's window or the congestion
    /// window cut it), or an ACK had covered part of it.
    pub tx_pool_split: u64,
    /// Segments whose payload was all of an application's pool buffer but were copied: a frame
    /// of the buffer was still in flight (a retransmission before the device let the first one
    /// go), its headroom was too short for the headers, or it is of another pool than the cache's.
    pub tx_pool_busy: u64,
    /// TCP super-segments handed to the device to cut ([`Config::tso_max_size`]).
    pub tx_super_segments: u64,
    /// TCP super-segments the stack cut into frames itself ([`Config::gso_max_size`]).
    pub tx_gso_super_segments: u64,
    /// Frames of a software-cut super-segment dropped because the pool had no buffer for them
    /// (the connection counts them as sent; its retransmission recovers them).
    pub tx_gso_dropped: u64,
    /// TCP segments and UDP datagrams whose checksum was not verified under
    /// [`ChecksumPolicy::Verify`](crate::wire::ChecksumPolicy::Verify) because their frame's
    /// offload metadata said it need not be (`Offload::checksum_trusted`: verified by the
    /// device, or a partial checksum from a sender on this machine).
    pub rx_checksum_trusted: u64,
    /// TCP segments taken as the next of the frame before them in a [`Stack::poll`]'s burst,
    /// without parsing their headers or looking up their connection (a train of one flow's
    /// segments, each predicted by its connection; see [`Config::header_prediction`]).
    ///
    /// [`Config::header_prediction`]: crate::tcp::Config::header_prediction
    pub rx_continued: u64,
    /// Bytes of send and receive ring storage the connections hold now (a gauge, not a
    /// counter): at most [`Config::buffer_memory`] plus
    /// [`BufferBudget::GUARANTEED`](crate::tcp::BufferBudget::GUARANTEED) a ring.
    pub buffer_memory: u64,
    /// The most bytes of ring storage held at once.
    pub buffer_memory_peak: u64,
    /// Receive rings refused growth by [`Config::buffer_memory`] and held to their storage.
    pub rx_buffer_clamps: u64,
    /// Send rings refused growth by [`Config::buffer_memory`] and held to their storage.
    pub tx_buffer_clamps: u64,
    /// Received segments dropped, whole or in part, because [`Config::buffer_memory`] held a
    /// receive ring below its configured size (bytes a window advertised before had promised;
    /// the peer retransmits them).
    pub rx_memory_dropped: u64,
    /// [`Stack::send`] calls cut short (a short write or [`Error::WouldBlock`](super::Error::WouldBlock))
    /// because [`Config::buffer_memory`] held a send ring below its configured size.
    pub tx_memory_refused: u64,
    /// UDP datagrams a socket took: queued, or consumed in place.
    pub udp_datagrams_in: u64,
    /// Of those, datagrams [`Deliver::udp`](super::Deliver::udp) consumed in place (never
    /// copied into the socket's queue).
    pub udp_delivered_in_place: u64,
    /// UDP datagrams sent ([`Stack::udp_send_to`]).
    pub udp_datagrams_out: u64,
    /// UDP datagrams dropped because their socket's queue was full
    /// ([`UdpConfig`](super::UdpConfig)).
    pub udp_queue_drops: u64,
    /// UDP datagrams for a port with no socket, or from a source the port's connected socket
    /// does not accept (answered with a port unreachable, within the rate limit).
    pub udp_no_socket: u64,
    /// UDP datagrams with a wrong checksum (also counted in `rx_malformed`).
    pub udp_checksum_errors: u64,
    /// UDP datagrams from a source address no single host can have (unspecified, loopback,
    /// multicast, broadcast, or our own: RFC 1122 §3.2.1.3), dropped unanswered.
    pub udp_bad_source: u64,
    /// ICMP port unreachable messages sent (RFC 1122 §4.1.3.1).
    pub icmp_port_unreachable: u64,
    /// ICMP errors not sent because of the rate limit ([`Config::icmp_errors`]).
    pub icmp_rate_limited: u64,
}

/// [`StackStats`] as [`Stack::stats`] reads them: their fields through it (it dereferences to
/// them), or a copy with `*`. (The memory counters come from the stack's buffer budget when they
/// are read, so the stack cannot lend a reference to a struct it keeps.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsNow(pub(super) StackStats);

impl std::ops::Deref for StatsNow {
    type Target = StackStats;

    fn deref(&self) -> &StackStats {
        &self.0
    }
}

/// What one [`Stack::poll`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Frames received from the device.
    pub received: usize,
    /// Frames the device accepted for transmission.
    pub transmitted: usize,
    /// Frames built but refused by the device (dropped).
    pub dropped: usize,
}
