//! The limits of UDP sockets ([`UdpConfig`]) and of the ICMP errors the stack sends
//! ([`IcmpRateLimit`]): plain values that [`Config`](crate::stack::Config) holds.

/// The receive queue limits of one UDP socket: a datagram that would take the queue past either
/// is dropped and counted in [`StackStats::udp_queue_drops`](crate::stack::StackStats::udp_queue_drops)
/// (as Linux drops past `SO_RCVBUF`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpConfig {
    /// Most datagrams queued.
    pub max_datagrams: usize,
    /// Most payload bytes queued.
    pub max_bytes: usize,
}

impl Default for UdpConfig {
    /// 2,048 datagrams and 2 MiB: a burst of 2,048 DNS queries or telemetry reports (a
    /// millisecond of a busy server's traffic) waits for the reader instead of being dropped;
    /// Linux's 208 KiB default `SO_RCVBUF` is what DNS servers are told to raise.
    fn default() -> Self {
        Self { max_datagrams: 2048, max_bytes: 2 << 20 }
    }
}

/// The rate limit on the ICMP errors the stack sends (port unreachable): a token bucket of
/// `burst` tokens refilled at `per_second`, one token a message, as Linux's
/// `icmp_msgs_per_sec`/`icmp_msgs_burst` (RFC 1812 §4.3.2.8 asks for a limit; RFC 1122 §4.1.3.1
/// has port unreachable sent). A message the bucket refuses is not sent and is counted in
/// [`StackStats::icmp_rate_limited`](crate::stack::StackStats::icmp_rate_limited). Zero in
/// either field sends none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpRateLimit {
    /// Tokens added a second.
    pub per_second: u32,
    /// Most tokens held (the largest burst).
    pub burst: u32,
}

impl Default for IcmpRateLimit {
    /// Linux's defaults: 1,000 a second, bursts of 50.
    fn default() -> Self {
        Self { per_second: 1000, burst: 50 }
    }
}
