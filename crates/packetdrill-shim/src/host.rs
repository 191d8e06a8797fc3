//! The host packetdrill talks to: one tcp-lib [`Stack`] on virtual time, the link below it, and
//! the socket table above it (in [`crate::socket`]).
//!
//! # Virtual time
//!
//! The stack reads no clock: every call takes `now`, and here `now` is [`Host::now`], a virtual
//! clock that only three things move:
//!
//! * `usleep(us)` moves it `us` forward ([`Host::advance_to`]): packetdrill sleeps until its next
//!   event, so a script's second takes no real time;
//! * `netdev_receive`, when the stack has sent nothing yet, moves it to the stack's next timer
//!   deadline, and on until a packet leaves ([`Host::next_packet`]): a retransmission due in
//!   1 s is sniffed at once, stamped 1 s later;
//! * each `gettimeofday` moves it 1 µs ([`Host::tick`]), as a real clock moves between two
//!   readings. packetdrill's event loop spins on `gettimeofday` for the last 20 µs before an
//!   event; a clock that stood still there would spin forever.
//!
//! Every advance visits each timer deadline on the way in order, so timers fire at the virtual
//! instant they are due, never late. After anything that may change what the stack wants to send
//! (a received packet, a socket call, a timer), [`Host::flush`] runs `transmit` and queues the
//! frames that leave, stamped with the instant they left.
//!
//! # The link
//!
//! packetdrill works at the IP layer; the stack at the Ethernet layer. The shim adds an Ethernet
//! header to each packet packetdrill injects, strips it from each frame the stack sends, and
//! answers the stack's ARP requests and IPv6 neighbour solicitations itself (every address is at
//! [`PEER_MAC`]), so no ARP or Neighbor Discovery exchange shows in a script (packetdrill's tun
//! device has none) and none costs virtual time.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use netchannel::dev::PacketBatch;
use netchannel::pool::{HugePages, Pool, PoolCache, PoolError};
use std::net::IpAddr;
use tcp_lib::stack::Stack;

use tcp_lib::wire::{
    ArpOperation, ArpPacket, ArpRepr, ChecksumPolicy, EtherType, EthernetFrame, Icmpv6Packet, Icmpv6Repr,
    Ipv6Packet, Ipv6Repr, NdpRepr, Protocol,
};

use crate::fds::Sockets;
use crate::profile::{PEER_MAC, Profile, STACK_MAC};

/// Ethernet header length (no VLAN tag).
const ETH_HEADER: usize = 14;
/// Frames `transmit` fills per call.
const BURST: usize = 32;
/// Pool buffers: enough for every frame of a burst in flight; frames are copied out at once.
const POOL_BUFFERS: u32 = 256;

/// An IP packet the stack sent, and the virtual instant it left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The IP packet (no link-layer header).
    pub packet: Vec<u8>,
    /// When it left, in microseconds since the Unix epoch on the virtual clock.
    pub time_usecs: i64,
}

/// The stack under test and everything around it.
pub struct Host {
    pub(crate) stack: Stack,
    pub(crate) sockets: Sockets,
    pub(crate) profile: Profile,
    now: Instant,
    /// The virtual clock's reading at `start`, as wall-clock microseconds since the Unix epoch:
    /// scripts print and compare differences only, so any origin works; a real one reads well.
    epoch_usecs: i64,
    start: Instant,
    sent: VecDeque<Sent>,
    /// Instants at which a blocked call wants to look again (a `poll` timeout).
    wakeups: Vec<Instant>,
    cache: PoolCache,
    _pool: Pool,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("now_usecs", &self.now_usecs())
            .field("sent", &self.sent.len())
            .field("sockets", &self.sockets)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// A host with `profile`'s stack, its clock at the real time of day.
    ///
    /// # Errors
    /// The pool's, when its memory cannot be had.
    pub fn new(profile: Profile) -> Result<Self, PoolError> {
        let pool = Pool::builder(POOL_BUFFERS).hugepages(HugePages::Never).build()?;
        let cache = pool.cache();
        let start = Instant::now();
        let epoch_usecs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 2));
        Ok(Self {
            stack: Stack::new(profile.stack_config(), start),
            sockets: Sockets::default(),
            profile,
            now: start,
            epoch_usecs,
            start,
            sent: VecDeque::new(),
            wakeups: Vec::new(),
            cache,
            _pool: pool,
        })
    }

    /// The virtual now.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The virtual now in microseconds since the Unix epoch (what `gettimeofday` reports).
    #[must_use]
    pub fn now_usecs(&self) -> i64 {
        self.usecs_at(self.now)
    }

    fn usecs_at(&self, t: Instant) -> i64 {
        self.epoch_usecs + i64::try_from((t - self.start).as_micros()).unwrap_or(i64::MAX / 2)
    }

    /// Asks to be looked at again at `at` (a blocked call's timeout): [`advance_to`](Self::advance_to)
    /// stops there on its way.
    pub fn wake_at(&mut self, at: Instant) {
        self.wakeups.push(at);
    }

    /// The next instant, after now and no later than `limit`, at which something is due: a stack
    /// timer or a requested wakeup.
    fn next_deadline(&self, limit: Instant) -> Option<Instant> {
        let stack = self.stack.poll_timeout().map(|t| t.max(self.now));
        let wake = self.wakeups.iter().copied().filter(|&t| t > self.now).min();
        [stack, wake].into_iter().flatten().filter(|&t| t <= limit).min()
    }

    /// Moves the clock to `target`, stopping at every deadline on the way: at each, the stack's
    /// timers run and what it sends is queued; `each` runs after every stop (the actor retries
    /// blocked calls there).
    pub fn advance_to(&mut self, target: Instant, each: &mut dyn FnMut(&mut Self)) {
        let mut stalled = false;
        while let Some(at) = self.next_deadline(target) {
            if at <= self.now {
                // Work due now (a frame waiting for transmit): once, then time must move.
                if stalled {
                    break;
                }
                stalled = true;
            } else {
                stalled = false;
                self.now = at;
            }
            self.wakeups.retain(|&t| t > self.now);
            self.stack.handle_timeout(self.now);
            self.flush();
            each(self);
        }
        if target > self.now {
            self.now = target;
            self.stack.handle_timeout(self.now);
            self.flush();
            each(self);
        }
    }

    /// One microsecond forward (a `gettimeofday` reading).
    pub fn tick(&mut self, each: &mut dyn FnMut(&mut Self)) {
        self.advance_to(self.now + Duration::from_micros(1), each);
    }

    /// The next packet the stack sends: one already queued, or the first that leaves as the
    /// clock advances through the stack's deadlines, at most [`Profile::horizon`] ahead. `None`
    /// when nothing leaves within the horizon.
    pub fn next_packet(&mut self, each: &mut dyn FnMut(&mut Self)) -> Option<Sent> {
        let limit = self.now + self.profile.horizon;
        loop {
            if let Some(sent) = self.sent.pop_front() {
                return Some(sent);
            }
            let at = self.next_deadline(limit)?;
            self.advance_to(at.max(self.now + Duration::from_micros(1)), each);
        }
    }

    /// Takes one IP packet from packetdrill: wraps it in Ethernet, hands it to the stack, and
    /// queues what the stack sends in answer.
    pub fn inject(&mut self, ip_packet: &[u8]) {
        let mut frame = vec![0u8; ETH_HEADER + ip_packet.len()];
        let ethertype = match ip_packet.first().map(|b| b >> 4) {
            Some(6) => EtherType::Ipv6,
            _ => EtherType::Ipv4,
        };
        let mut eth = EthernetFrame::new_unchecked(&mut frame[..]);
        eth.set_dst_addr(STACK_MAC);
        eth.set_src_addr(PEER_MAC);
        eth.set_ethertype(ethertype);
        eth.payload_mut().copy_from_slice(ip_packet);
        self.stack.receive(self.now, &frame);
        self.flush();
    }

    /// Runs `transmit` until the stack has nothing more to send: IP packets are queued for
    /// `netdev_receive`, ARP requests are answered (every address is at [`PEER_MAC`]), which
    /// releases the packets that waited for them.
    pub fn flush(&mut self) {
        let time_usecs = self.now_usecs();
        loop {
            let mut batch = PacketBatch::with_capacity(BURST);
            if self.stack.transmit(self.now, &self.cache, &mut batch) == 0 {
                break;
            }
            let mut learned = Vec::new();
            for packet in batch.drain() {
                let Ok(eth) = EthernetFrame::new_checked(packet.data()) else { continue };
                match eth.ethertype() {
                    EtherType::Arp => {
                        let request = ArpPacket::new_checked(eth.payload()).and_then(|p| ArpRepr::parse(&p));
                        if let Ok(r) = request
                            && r.operation == ArpOperation::Request
                        {
                            learned.push(IpAddr::V4(r.target_protocol_addr));
                        }
                    }
                    EtherType::Ipv6 if let Some(target) = solicited(eth.payload()) => {
                        learned.push(IpAddr::V6(target));
                    }
                    EtherType::Ipv4 | EtherType::Ipv6 => {
                        self.sent.push_back(Sent { packet: eth.payload().to_vec(), time_usecs });
                    }
                    _ => {}
                }
            }
            for ip in learned {
                self.stack.learn_neighbor(ip, PEER_MAC);
            }
        }
    }
}

/// The target of a neighbour solicitation, when `packet` is one.
fn solicited(packet: &[u8]) -> Option<std::net::Ipv6Addr> {
    let ip = Ipv6Packet::new_checked(packet).ok()?;
    let (repr, payload) = Ipv6Repr::parse_with_payload(&ip).ok()?;
    if repr.next_header != Protocol::Icmpv6 {
        return None;
    }
    let icmp = Icmpv6Packet::new_checked(payload).ok()?;
    match Icmpv6Repr::parse(&icmp, repr.src_addr, repr.dst_addr, ChecksumPolicy::Trust).ok()? {
        Icmpv6Repr::Ndp(NdpRepr::NeighborSolicit { target, .. }) => Some(target),
        _ => None,
    }
}
