//! UDP input: a received datagram is checked (length, checksum per
//! [`Config::checksum`](crate::stack::Config::checksum); a zero checksum over IPv4 means "none",
//! RFC 768), offered in place to [`Deliver::udp`], else copied into its socket's bounded queue. A
//! datagram for no socket draws an ICMP port unreachable (RFC 1122 §4.1.3.1, RFC 792) quoting its
//! IP header and first 8 bytes, within the ICMP error rate limit ([`IcmpRateLimit`], RFC 1812
//! §4.3.2.8), and never for a datagram to a broadcast or multicast address or from a source no
//! single host can have (RFC 1122 §3.2.2).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use super::{Deliver, IcmpRateLimit, UdpId};
use crate::stack::Stack;
use crate::wire::icmpv4::DstUnreachable;
use crate::wire::{
    Error as WireError, Icmpv4Repr, Icmpv6Repr, Ipv4Repr, Ipv6Repr, UdpPacket, UdpRepr, icmpv6,
};

/// The token bucket of [`IcmpRateLimit`], on the stack's clock.
#[derive(Debug)]
pub(super) struct TokenBucket {
    limit: IcmpRateLimit,
    tokens: u32,
    /// When `tokens` was last topped up (the time of the tokens added, not of the call, so that
    /// fractions of a token carry over).
    refilled: Option<Instant>,
}

impl TokenBucket {
    pub(super) const fn new(limit: IcmpRateLimit) -> Self {
        Self { limit, tokens: limit.burst, refilled: None }
    }

    /// Takes a token at `now`, if there is one.
    fn take(&mut self, now: Instant) -> bool {
        let IcmpRateLimit { per_second, burst } = self.limit;
        if per_second == 0 {
            return false;
        }
        let last = *self.refilled.get_or_insert(now);
        let elapsed = now.saturating_duration_since(last).as_nanos();
        let added = elapsed.saturating_mul(u128::from(per_second)) / 1_000_000_000;
        if added > 0 {
            let added = u32::try_from(added).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(added).min(burst);
            self.refilled = Some(if self.tokens == burst {
                now
            } else {
                let nanos = u64::from(added).saturating_mul(1_000_000_000) / u64::from(per_second);
                last + Duration::from_nanos(nanos)
            });
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

impl Stack {
    /// A UDP datagram received over IPv4 with header `ip` (its payload `bytes`, the UDP header
    /// first). A datagram for no socket draws an ICMP port unreachable quoting the IP header and
    /// the first 64 bits of the datagram (RFC 792: the UDP header, whose ports let the sender find
    /// its socket).
    pub(in crate::stack) fn receive_udp<D: Deliver + ?Sized>(
        &mut self,
        ip: &Ipv4Repr,
        bytes: &[u8],
        deliver: &mut D,
    ) {
        let (src, dst) = (ip.src_addr, ip.dst_addr);
        let policy = self.rx_checksum();
        let parsed = UdpPacket::new_checked(bytes).and_then(|p| UdpRepr::parse(&p, src, dst, policy));
        if self.udp_datagram(parsed, (src.into(), dst.into()), deliver)
            || self.config.ip.broadcast() == Some(dst)
            || !self.icmp_error_allowed()
        {
            return;
        }
        let quoted = &bytes[..bytes.len().min(8)];
        let reason = DstUnreachable::PortUnreachable;
        self.send_icmp(
            src,
            &Icmpv4Repr::DstUnreachable { reason, next_hop_mtu: 0, header: *ip, data: quoted },
        );
        self.stats.icmp_port_unreachable += 1;
    }

    /// A UDP datagram received over IPv6 with header `ip` (to one of our unicast addresses; its
    /// payload `bytes`, the UDP header first). A datagram for no socket draws an ICMPv6 port
    /// unreachable (RFC 4443 §3.1) quoting as much of it as fits in the minimum MTU (RFC 4443
    /// §2.4 (c): 1280 less the IPv6 and ICMPv6 headers of the error and the quoted IPv6 header).
    pub(in crate::stack) fn receive_udp6<D: Deliver + ?Sized>(
        &mut self,
        ip: &Ipv6Repr,
        bytes: &[u8],
        deliver: &mut D,
    ) {
        let (src, dst) = (ip.src_addr, ip.dst_addr);
        let policy = self.rx_checksum();
        let parsed = UdpPacket::new_checked(bytes).and_then(|p| UdpRepr::parse_v6(&p, src, dst, policy));
        if self.udp_datagram(parsed, (src.into(), dst.into()), deliver) || !self.icmp_error_allowed() {
            return;
        }
        let quoted = &bytes[..bytes.len().min(1280 - 40 - 8 - 40)];
        let reason = icmpv6::DstUnreachable::PortUnreachable;
        self.send_icmpv6(src, &Icmpv6Repr::DstUnreachable { reason, header: *ip, data: quoted }, Some(dst));
        self.stats.icmp_port_unreachable += 1;
    }

    /// What both families do with a parsed datagram from `src` to `dst`: count a malformed one,
    /// drop one from a source no host can have, hand the rest to [`udp_input`](Self::udp_input).
    /// Returns false only when it found no socket and may draw a port unreachable (not to a
    /// broadcast or multicast destination).
    fn udp_datagram<D: Deliver + ?Sized>(
        &mut self,
        parsed: crate::wire::Result<UdpRepr<'_>>,
        (src, dst): (IpAddr, IpAddr),
        deliver: &mut D,
    ) -> bool {
        let repr = match parsed {
            Ok(repr) => repr,
            Err(e) => {
                if e == WireError::Checksum {
                    self.stats.udp_checksum_errors += 1;
                }
                self.stats.rx_malformed += 1;
                return true;
            }
        };
        if self.invalid_source(src) {
            self.stats.udp_bad_source += 1;
            return true;
        }
        let (from, to) = (SocketAddr::new(src, repr.src_port), SocketAddr::new(dst, repr.dst_port));
        self.udp_input(from, to, repr.payload, deliver) || no_icmp_error_to(dst)
    }

    /// A datagram's payload from `from` to `to` (checked, from a valid source) to the socket
    /// bound to its port: offered to `deliver` in place while the socket's queue is empty, else
    /// queued (or dropped and counted when the queue is full). Returns false when no socket takes
    /// it (counted in `udp_no_socket`): the caller answers with a port unreachable. Either family.
    pub(in crate::stack) fn udp_input<D: Deliver + ?Sized>(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
        deliver: &mut D,
    ) -> bool {
        let socket = self
            .udp
            .ports
            .get(&to.port())
            .and_then(|&index| Some((index, self.udp.sockets.get_mut_with_generation(index)?)))
            .filter(|(_, (_, socket))| socket.accepts(from, to.ip()));
        let Some((index, (generation, socket))) = socket else {
            self.stats.udp_no_socket += 1;
            return false;
        };
        if socket.queue.is_empty() && deliver.udp(UdpId { index, generation }, from, payload) {
            self.stats.udp_datagrams_in += 1;
            self.stats.udp_delivered_in_place += 1;
        } else if socket.push(from, payload) {
            self.stats.udp_datagrams_in += 1;
        } else {
            self.stats.udp_queue_drops += 1;
        }
        true
    }

    /// Whether the ICMP error rate limit lets one more error out now (counted when it does not).
    pub(in crate::stack) fn icmp_error_allowed(&mut self) -> bool {
        let allowed = self.udp.icmp.take(self.now);
        if !allowed {
            self.stats.icmp_rate_limited += 1;
        }
        allowed
    }
}

/// Whether `ip` is an address a datagram to which must not draw an ICMP error: broadcast or
/// multicast (RFC 1122 §3.2.2; for IPv4 the subnet's directed broadcast too, which only the
/// interface's prefix knows).
#[must_use]
pub(in crate::stack) fn no_icmp_error_to(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_broadcast() || a.is_multicast(),
        IpAddr::V6(a) => a.is_multicast(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bursts_then_refills_at_its_rate() {
        let mut b = TokenBucket::new(IcmpRateLimit { per_second: 10, burst: 3 });
        let t0 = Instant::now();
        assert_eq!((0..5).filter(|_| b.take(t0)).count(), 3, "the burst");
        assert!(!b.take(t0 + Duration::from_millis(99)), "under a token's time");
        assert!(b.take(t0 + Duration::from_millis(100)));
        // Fractions carry over: 150 ms after the last token's time is one token and a half.
        assert!(b.take(t0 + Duration::from_millis(250)));
        assert!(b.take(t0 + Duration::from_millis(300)), "the half from before");
        assert!(!b.take(t0 + Duration::from_millis(300)));
        // A long idle fills to the burst, no more.
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| b.take(later)).count(), 3);
    }

    /// The IPv4 path drops datagrams not addressed to our unicast address before UDP sees them;
    /// this holds the UDP layer's own check (which the IPv6 path and broadcast reception will
    /// rely on) by calling it directly.
    #[test]
    fn no_port_unreachable_for_broadcast_or_multicast_destinations() {
        use std::net::Ipv4Addr;

        use crate::stack::Config;
        use crate::wire::{EthernetAddress, Ipv4Cidr, Protocol};

        let ours = Ipv4Addr::new(10, 0, 0, 2);
        let mac = EthernetAddress([2, 0, 0, 0, 0, 2]);
        let mut stack = Stack::new(Config::new(mac, Ipv4Cidr::new(ours, 24).unwrap()), Instant::now());
        let datagram = |dst: Ipv4Addr| {
            let repr = UdpRepr { src_port: 53, dst_port: 9, payload: b"x" };
            let mut bytes = vec![0u8; repr.buffer_len()];
            let src = Ipv4Addr::new(10, 0, 0, 1);
            repr.emit(&mut UdpPacket::new_unchecked(&mut bytes[..]), src, dst);
            let ip = Ipv4Repr {
                src_addr: src,
                dst_addr: dst,
                protocol: Protocol::Udp,
                payload_len: bytes.len(),
                ttl: 64,
                dscp: 0,
                ecn: 0,
                ident: 1,
                dont_frag: false,
            };
            (ip, bytes)
        };
        let mut none = |_: crate::stack::StreamId, _: &[u8]| 0;
        for dst in [Ipv4Addr::BROADCAST, Ipv4Addr::new(10, 0, 0, 255), Ipv4Addr::new(224, 0, 0, 251)] {
            let (ip, bytes) = datagram(dst);
            stack.receive_udp(&ip, &bytes, &mut none);
        }
        assert_eq!((stack.stats.udp_no_socket, stack.stats.icmp_port_unreachable), (3, 0));
        let (ip, bytes) = datagram(ours);
        stack.receive_udp(&ip, &bytes, &mut none);
        assert_eq!((stack.stats.udp_no_socket, stack.stats.icmp_port_unreachable), (4, 1));
    }

    #[test]
    fn zero_rate_sends_nothing() {
        let mut b = TokenBucket::new(IcmpRateLimit { per_second: 0, burst: 50 });
        assert!(!b.take(Instant::now()));
        let mut b = TokenBucket::new(IcmpRateLimit { per_second: 10, burst: 0 });
        assert!(!b.take(Instant::now() + Duration::from_secs(5)));
    }
}
