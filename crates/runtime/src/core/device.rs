//! [`CoreDevice`]: what a core's stack sees as its network device. Its receive side is the core's
//! channels (the default channel of its queue and one channel from every queue's channelizer); its
//! transmit side is the TX channel into its queue. With the `same` placement it also owns its
//! queue's channelizer and runs it on every receive and every idle wait, so one thread does it all.

use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use netchannel::channel::WakeupBatch;
use netchannel::channelizer::Channelizer;
use netchannel::classify::{Classified, classify};
use netchannel::dev::{DevError, DeviceInfo, DeviceStats, Link, NetDevice, PacketBatch};
use netchannel::pool::{PacketRx, PacketTx, PoolCache};
use tcp_lib::wire::{
    ArpPacket, ArpRepr, ChecksumPolicy, EtherType, EthernetAddress, EthernetFrame, Icmpv6Packet, Icmpv6Repr,
    Ipv6Packet, Ipv6Repr, NdpRepr, Protocol,
};

use super::local::Local;
use crate::device::Port;
use crate::idle::{Idle, NAP};

/// The longest an idle core sleeps at once: everything that brings work wakes it sooner (frames,
/// tasks, handoffs, neighbours, the stop), so this only bounds the wait for what is polled (the
/// stack's duties run at the next poll).
const SLEEP_CAP: Duration = Duration::from_millis(10);
use crate::shared::{Handoff, lock};
use crate::stats::{ChannelCounters, QueueStats};

/// The error a core's blocking calls end with once the runtime stops
/// ([`io::ErrorKind::Interrupted`], with this as its inner error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the runtime is stopping")]
pub struct Stopping;

impl Stopping {
    /// Whether `e` is the runtime stopping (a service's loop ends on it).
    #[must_use]
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|inner| inner.is::<Stopping>())
            || e.get_ref()
                .and_then(|inner| inner.downcast_ref::<DevError>())
                .is_some_and(|d| matches!(d, DevError::Failed(io) if Self::is(io)))
    }

    pub(crate) fn error() -> io::Error {
        io::Error::new(io::ErrorKind::Interrupted, Stopping)
    }
}

/// A core's device: the core's channels, and with the `same` placement its queue's channelizer.
#[derive(Debug)]
pub struct CoreDevice<'c> {
    local: Rc<Local>,
    driver: Option<Channelizer<'c, Port>>,
    default_rx: PacketRx,
    inputs: Vec<PacketRx>,
    tx: PacketTx,
    /// The TX channel's free space when empty (its capacity).
    tx_capacity: usize,
    info: DeviceInfo,
    stats: DeviceStats,
    idle: Idle,
    /// What an idle sleep polls (reused).
    pollfds: Vec<libc::pollfd>,
}

/// What a core's device is made of, given back when it is done.
pub(crate) struct Parts<'c> {
    pub(crate) driver: Option<Channelizer<'c, Port>>,
    pub(crate) default_rx: PacketRx,
    pub(crate) inputs: Vec<PacketRx>,
    pub(crate) tx: PacketTx,
}

impl<'c> CoreDevice<'c> {
    pub(crate) fn new(local: Rc<Local>, parts: Parts<'c>, info: DeviceInfo) -> Self {
        let Parts { driver, default_rx, inputs, mut tx } = parts;
        let tx_capacity = tx.free_space();
        Self {
            local,
            driver,
            default_rx,
            inputs,
            tx,
            tx_capacity,
            info,
            stats: DeviceStats::default(),
            idle: Idle::default(),
            pollfds: Vec::new(),
        }
    }

    pub(crate) fn into_parts(self) -> Parts<'c> {
        Parts { driver: self.driver, default_rx: self.default_rx, inputs: self.inputs, tx: self.tx }
    }

    /// Whether the TX channel is empty (everything the stack sent reached the channelizer).
    pub(crate) fn tx_empty(&mut self) -> bool {
        self.tx.free_space() >= self.tx_capacity
    }

    /// Runs the channelizer (same placement); returns the frames it moved.
    fn drive(&mut self) -> Result<usize, DevError> {
        let Some(ch) = self.driver.as_mut() else { return Ok(0) };
        let polled = ch.poll()?;
        Ok(polled.rx + polled.tx)
    }

    /// Publishes the channels' and the queue's counters.
    pub(crate) fn publish(&mut self) {
        let queue = self.driver.as_ref().map(|ch| QueueStats {
            queue: self.local.core,
            device: ch.device().stats(),
            channelizer: ch.stats(),
        });
        let local = &self.local;
        let mut published = lock(&local.shared.published[local.core]);
        published.0.default_channel = ChannelCounters::from(self.default_rx.stats());
        published.0.inputs = self.inputs.iter().map(|rx| ChannelCounters::from(rx.stats())).collect();
        published.0.tx_channel = ChannelCounters::from(self.tx.stats());
        if queue.is_some() {
            published.1 = queue;
        }
    }

    /// Sleeps until a frame arrives in one of the core's channels (each asked for a wakeup first:
    /// VJ's protocol, see `netchannel::channel`), the core is notified (a task, a handoff, a
    /// neighbour, the stop), the queue's socket is readable (AF_XDP, same placement), `deadline`,
    /// or [`SLEEP_CAP`]. Returns `false` without sleeping when something that can bring work
    /// cannot wake it (the model's or a TAP's queue with the same placement: those are polled).
    fn sleep(&mut self, now: Instant, deadline: Option<Instant>) -> bool {
        let Self { local, driver, default_rx, inputs, pollfds, .. } = self;
        let Some(wake_fd) = local.wake.event_fd() else { return false };
        let device_fd = match driver {
            None => None,
            Some(ch) => match ch.device().wake_fd() {
                Some(fd) => Some(fd.as_raw_fd()),
                None => return false,
            },
        };
        pollfds.clear();
        // Every channel is armed before one barrier and re-checked after it (one membarrier per
        // sleep, not one per channel: see `netchannel::channel::WakeupBatch`).
        let mut batch = WakeupBatch::new();
        for rx in std::iter::once(&mut *default_rx).chain(inputs.iter_mut()) {
            if rx.is_abandoned() {
                continue;
            }
            let Some(fd) = rx.event_fd().map(|fd| fd.as_raw_fd()) else { return false };
            if !rx.is_empty() {
                // Work already waits: arming the rest would only cost their senders a wakeup.
                return true;
            }
            if !rx.arm_wakeup(&mut batch) {
                return false;
            }
            pollfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        let armed = batch.fence();
        for rx in std::iter::once(default_rx).chain(inputs.iter_mut()) {
            // A frame arrived meanwhile, or the sender of an armed channel left frames behind.
            let ready = if rx.is_abandoned() { !rx.is_empty() } else { !rx.idle_after(&armed) };
            if ready {
                return true;
            }
        }
        for fd in std::iter::once(wake_fd.as_raw_fd()).chain(device_fd) {
            pollfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        let timeout = deadline.map_or(SLEEP_CAP, |d| d.saturating_duration_since(now).min(SLEEP_CAP));
        // To the nanosecond (`ppoll`, not `poll`'s whole milliseconds): a paced connection's next
        // departure is often a fraction of a millisecond ahead, and a wait rounded up to a
        // millisecond would hold its rate to a packet a millisecond.
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos().cast_signed()),
        };
        let count = libc::nfds_t::try_from(pollfds.len()).unwrap_or(libc::nfds_t::MAX);
        local.wake.sleep_with(|| {
            // SAFETY: `pollfds` is a live, initialised array of `count` pollfds for the call, of
            // descriptors this core owns (its channels', its wakeup's, its queue's socket) that
            // outlive it, and `ts` a live timespec; a null signal mask leaves the thread's alone.
            // EINTR or a timeout just return, and the caller re-checks.
            unsafe {
                libc::ppoll(pollfds.as_mut_ptr(), count, &raw const ts, std::ptr::null());
            }
        });
        true
    }

    fn has_input(&mut self) -> bool {
        !self.default_rx.is_empty() || self.inputs.iter_mut().any(|rx| !rx.is_empty())
    }
}

fn no_such_queue(queue: u16) -> DevError {
    DevError::NoSuchQueue { queue, queues: 1 }
}

impl NetDevice for CoreDevice<'_> {
    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn link(&self) -> Link {
        self.driver.as_ref().map_or(Link::Up { speed_mbps: None }, |ch| ch.device().link())
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }

    fn rx_burst<'p>(
        &mut self,
        queue: u16,
        cache: &'p PoolCache,
        batch: &mut PacketBatch<'p>,
    ) -> Result<usize, DevError> {
        if queue != 0 {
            return Err(no_such_queue(queue));
        }
        self.drive()?;
        if self.local.publish_due.replace(false) {
            self.publish();
        }
        let mut n = 0;
        let Self { default_rx, inputs, .. } = self;
        for rx in std::iter::once(default_rx).chain(inputs.iter_mut()) {
            while !batch.is_full() {
                let Some(packet) = rx.pop(cache) else { break };
                if !inspect(&self.local, packet.data()) {
                    continue;
                }
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += packet.len() as u64;
                if batch.push(packet).is_err() {
                    break; // full (checked above): unreachable, and the packet goes back to the cache
                }
                n += 1;
            }
        }
        if n > 0 {
            // Busy: an idle wait after this starts its back-off afresh.
            self.idle.reset();
        }
        Ok(n)
    }

    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        if queue != 0 {
            return Err(no_such_queue(queue));
        }
        let n = batch.len().min(self.tx.free_space());
        let mut sent = 0;
        for packet in batch.drain_front(n) {
            let len = packet.len() as u64;
            if self.tx.push(packet).is_ok() {
                sent += 1;
                self.stats.tx_packets += 1;
                self.stats.tx_bytes += len;
            } else {
                self.stats.tx_dropped += 1;
            }
        }
        Ok(sent)
    }

    /// Waits for input (a frame in a channel, a handoff, a neighbour, a task made runnable), running
    /// the channelizer meanwhile with the `same` placement, sleeping on its queue's socket while
    /// idle when the kernel can wake it there (AF_XDP) and backing off otherwise (naps on the
    /// core's wakeup, which a task made runnable ends at once), until `timeout`. Fails with
    /// [`Stopping`] once the runtime stops, which ends every blocking call of the core's service.
    fn wait_rx(&mut self, queue: u16, timeout: Option<Duration>) -> Result<(), DevError> {
        if queue != 0 {
            return Err(no_such_queue(queue));
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        if !self.local.runs_tasks.get() {
            // Nobody else takes the core's wakeups (an async core's loop does, to know that a task
            // is runnable): what they announced (a handoff, a neighbour, the stop) is checked below.
            self.local.wake.take();
        }
        loop {
            if self.local.shared.stopping() {
                return Err(DevError::Failed(Stopping::error()));
            }
            let moved = self.drive()?;
            if self.has_input()
                || self.local.has_mail()
                || self.local.shared.has_neighbours(self.local.core)
                || self.local.wake.is_notified()
            {
                // Work came: the next wait starts its back-off afresh (yields first, not naps).
                self.idle.reset();
                return Ok(());
            }
            if moved > 0 {
                // The channelizer moved frames for other cores or to the device: not idle.
                self.idle.reset();
                continue;
            }
            // One clock read per idle round, for the deadline and the back-off.
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(());
            }
            // Idle for a while: sleep on everything that can bring work, when each of them can
            // wake us.
            if self.idle.napping(now) && self.sleep(now, deadline) {
                continue;
            }
            // A device the kernel wakes (AF_XDP) is slept on at once, for at most a nap (so that
            // mail, neighbours and the stop flag are seen as soon as with the back-off below),
            // instead of yielded to: an idle core burns no CPU in `sched_yield` between requests,
            // and the first frame wakes it. Not while frames wait on the device's TX ring (the
            // port says so): only a received frame ends the sleep, and they need the next kick.
            if let Some(ch) = &self.driver {
                let nap = deadline.map_or(NAP, |d| d.saturating_duration_since(now).min(NAP));
                if let Some(slept) = ch.device().sleep_rx(nap) {
                    slept?;
                    continue;
                }
            }
            self.idle.idle_on(now, &self.local.wake);
        }
    }
}

/// What a frame popped from a channel needs besides the stack: a frame of a connection this core
/// gave away goes to its new core (returns false: not for this stack); an ARP packet's sender is
/// shared with the other cores' stacks (an ARP frame lands on one queue, yet every core's stack
/// must know the peer's MAC), and so is the sender of a Neighbor Discovery message (IPv6).
fn inspect(local: &Local, frame: &[u8]) -> bool {
    if !local.moved.borrow().is_empty()
        && let Classified::Flow { sig, .. } = classify(frame)
    {
        let to = local.moved.borrow().get(&sig).map(|&(to, _)| to);
        if let Some(to) = to {
            if local.shared.send_handoff(to, Handoff::Frame(frame.to_vec())).is_ok() {
                local.count(|c| c.forwarded += 1);
            }
            return false;
        }
    }
    if local.shared.cores > 1
        && let Ok(eth) = EthernetFrame::new_checked(frame)
    {
        let learned = match eth.ethertype() {
            EtherType::Arp => ArpPacket::new_checked(eth.payload())
                .and_then(|p| ArpRepr::parse(&p))
                .ok()
                .map(|arp| (IpAddr::V4(arp.source_protocol_addr), arp.source_hardware_addr)),
            EtherType::Ipv6 => ndp_sender(eth.payload()),
            _ => None,
        };
        if let Some((ip, mac)) = learned {
            local.shared.share_neighbour(local.core, ip, mac);
        }
    }
    true
}

/// The address and MAC a Neighbor Discovery message teaches (RFC 4861): a solicitation's or a
/// router advertisement's sender with its source link-layer option, an advertisement's target
/// with its target link-layer option. Only messages that arrived with hop limit 255 (from the
/// link), directly after the fixed header (no extension header) and with a valid checksum; the
/// stack that receives the frame checks the rest again.
fn ndp_sender(bytes: &[u8]) -> Option<(IpAddr, EthernetAddress)> {
    // Every IPv6 frame a core pops comes here: the fixed header's next header (ICMPv6) and hop
    // limit (255) turn away the data frames before anything is parsed.
    if bytes.get(6..8) != Some(&[58, 255]) {
        return None;
    }
    let packet = Ipv6Packet::new_checked(bytes).ok()?;
    let (ip, payload) = Ipv6Repr::parse_with_payload(&packet).ok()?;
    if ip.next_header != Protocol::Icmpv6 || ip.hop_limit != 255 {
        return None;
    }
    let icmp = Icmpv6Packet::new_checked(payload).ok()?;
    let learned = match Icmpv6Repr::parse(&icmp, ip.src_addr, ip.dst_addr, ChecksumPolicy::Verify).ok()? {
        Icmpv6Repr::Ndp(
            NdpRepr::NeighborSolicit { lladdr: Some(mac), .. }
            | NdpRepr::RouterAdvert { lladdr: Some(mac), .. },
        ) if !ip.src_addr.is_unspecified() => (ip.src_addr, mac),
        Icmpv6Repr::Ndp(NdpRepr::NeighborAdvert { target, lladdr: Some(mac), .. }) => (target, mac),
        _ => return None,
    };
    let (addr, mac): (std::net::Ipv6Addr, EthernetAddress) = learned;
    mac.is_unicast().then_some((IpAddr::V6(addr), mac))
}
