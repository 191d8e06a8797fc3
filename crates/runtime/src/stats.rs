//! Counters a user reads while the runtime runs: one [`Snapshot`] of every core (its stack, its
//! handoffs, its channels), every queue (the device and its channelizer) and every port's accept
//! queue, printed `ethtool -S` style by its `Display`.
//!
//! Each core publishes its counters every [`PUBLISH_EVERY`] (and once more when it stops), so a
//! snapshot taken while the runtime runs is at most that old; the final one in
//! [`Report`](crate::Report) is exact.

use std::fmt;
use std::time::Duration;

use netchannel::channel::ChannelStats;
use netchannel::channelizer::ChannelizerStats;
use netchannel::dev::DeviceStats;
use tcp_lib::stack::StackStats;

/// How often a core publishes its counters.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// One core's connection handoffs (Affinity-Accept's stealing, and connections it served).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandoffStats {
    /// Connections the service accepted that arrived on this core (local accepts).
    pub accepted_local: u64,
    /// Connections the service accepted after stealing them from another core (adopted here).
    pub accepted_stolen: u64,
    /// Steal requests this core sent (a connection it took from another core's accept queue).
    pub steals_requested: u64,
    /// Connections this core's stack gave to a stealer (detached and sent).
    pub given: u64,
    /// Frames of given connections that still reached this core and were forwarded behind them.
    pub forwarded: u64,
    /// Steals that failed: the connection was gone before it could be detached, or could not be
    /// adopted.
    pub failed: u64,
    /// Established connections refused because the accept queue was full (aborted).
    pub rejected: u64,
    /// Connections whose signature could not be registered (their frames reach this core only
    /// through the queue Flow Director steers their group to).
    pub unregistered: u64,
}

/// A channel's counters, from its consumer's side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelCounters {
    /// Frames queued into it.
    pub pushed: u64,
    /// Frames taken out.
    pub popped: u64,
    /// Frames refused because it was full (drops).
    pub refused_full: u64,
}

impl From<ChannelStats> for ChannelCounters {
    fn from(s: ChannelStats) -> Self {
        Self { pushed: s.pushed, popped: s.popped, refused_full: s.refused_full }
    }
}

/// One core's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CoreStats {
    /// The core's number.
    pub core: usize,
    /// Its tcp-lib stack's counters (malformed and bad-checksum frames are `rx_malformed`).
    pub stack: StackStats,
    /// Connections the stack holds, and TIME-WAIT records.
    pub connections: usize,
    /// TIME-WAIT records.
    pub time_wait: usize,
    /// Registry entries naming this core.
    pub registered: usize,
    /// Handoffs and accepts.
    pub handoff: HandoffStats,
    /// The default channel of its queue (frames no one registered: ARP, SYNs, strays).
    pub default_channel: ChannelCounters,
    /// Channel `q`: what queue `q`'s channelizer delivered to this core.
    pub inputs: Vec<ChannelCounters>,
    /// The TX channel into its queue.
    pub tx_channel: ChannelCounters,
}

impl CoreStats {
    pub(crate) fn new(core: usize) -> Self {
        Self {
            core,
            stack: StackStats::default(),
            connections: 0,
            time_wait: 0,
            registered: 0,
            handoff: HandoffStats::default(),
            default_channel: ChannelCounters::default(),
            inputs: Vec::new(),
            tx_channel: ChannelCounters::default(),
        }
    }
}

/// One RX/TX queue pair's counters: the device's and its channelizer's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// The queue's number (the core that serves it).
    pub queue: usize,
    /// The device's counters for this queue.
    pub device: DeviceStats,
    /// Its channelizer's.
    pub channelizer: ChannelizerStats,
}

/// One port's Affinity-Accept counters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcceptStats {
    /// The listening port.
    pub port: u16,
    /// Connections queued (established and handed to the accept queue).
    pub enqueued: u64,
    /// Accepted on the core they arrived on.
    pub local: u64,
    /// Accepted by another core (stolen).
    pub stolen: u64,
    /// Flow groups migrated between queues by the balancer.
    pub migrated: u64,
    /// Refused for lack of room.
    pub rejected: u64,
    /// Still queued.
    pub queued: u64,
}

impl AcceptStats {
    /// The fraction of accepts that were local (1 when there were none).
    #[must_use]
    pub fn local_fraction(&self) -> f64 {
        let all = self.local + self.stolen;
        if all == 0 {
            return 1.0;
        }
        self.local as f64 / all as f64
    }
}

/// Every counter of the runtime at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// Since the runtime started serving.
    pub elapsed: Duration,
    /// Per core.
    pub cores: Vec<CoreStats>,
    /// Per queue (one per core).
    pub queues: Vec<QueueStats>,
    /// Per listening port.
    pub accept: Vec<AcceptStats>,
}

impl Snapshot {
    /// Frames that did not parse on any core (truncated, bad checksum, malformed headers).
    #[must_use]
    pub fn rx_malformed(&self) -> u64 {
        self.cores.iter().map(|c| c.stack.rx_malformed).sum()
    }

    /// Frames the stacks received.
    #[must_use]
    pub fn rx_frames(&self) -> u64 {
        self.cores.iter().map(|c| c.stack.rx_frames).sum()
    }

    /// Connections the service accepted, on every core.
    #[must_use]
    pub fn accepted(&self) -> u64 {
        self.cores.iter().map(|c| c.handoff.accepted_local + c.handoff.accepted_stolen).sum()
    }

    /// Times a queue's receive path found the pool empty (`rx_no_buffer`, summed over the queues):
    /// 0 with a pool sized for everything that can hold its buffers.
    #[must_use]
    pub fn rx_no_buffer(&self) -> u64 {
        self.queues.iter().map(|q| q.device.rx_no_buffer).sum()
    }

    /// Frames dropped because a channel was full (`channelizer_dropped_full`, summed over the
    /// queues): a consumer that fell behind, never one that blocks a driver.
    #[must_use]
    pub fn dropped_channel_full(&self) -> u64 {
        self.queues.iter().map(|q| q.channelizer.dropped_full).sum()
    }

    /// Frames dropped in the data path: full channels, refused TX, malformed frames at the
    /// channelizers, and the devices' own drops.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        let queues: u64 = self
            .queues
            .iter()
            .map(|q| q.channelizer.dropped_full + q.channelizer.dropped_malformed + q.device.rx_dropped)
            .sum();
        let tx: u64 = self.cores.iter().map(|c| c.tx_channel.refused_full).sum();
        queues + tx
    }
}

impl fmt::Display for Snapshot {
    /// One `name: value` line per counter, `ethtool -S` style, grouped by core, queue and port.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "NIC statistics ({:.1} s):", self.elapsed.as_secs_f64())?;
        for q in &self.queues {
            let (d, c) = (&q.device, &q.channelizer);
            let p = format!("queue{}", q.queue);
            for (name, v) in [
                ("rx_packets", d.rx_packets),
                ("rx_bytes", d.rx_bytes),
                ("rx_dropped", d.rx_dropped),
                ("rx_errors", d.rx_errors),
                ("rx_no_buffer", d.rx_no_buffer),
                ("tx_packets", d.tx_packets),
                ("tx_bytes", d.tx_bytes),
                ("tx_dropped", d.tx_dropped),
                ("channelizer_polls", c.polls),
                ("channelizer_delivered", c.delivered),
                ("channelizer_to_default", c.to_default),
                ("channelizer_unattached", c.unattached),
                ("channelizer_dropped_full", c.dropped_full),
                ("channelizer_dropped_malformed", c.dropped_malformed),
                ("channelizer_tx", c.tx),
            ] {
                writeln!(f, "     {p}_{name}: {v}")?;
            }
        }
        for c in &self.cores {
            let p = format!("core{}", c.core);
            let s = &c.stack;
            let h = &c.handoff;
            for (name, v) in [
                ("rx_frames", s.rx_frames),
                ("rx_not_for_us", s.rx_not_for_us),
                ("rx_link_broadcast", s.rx_link_broadcast),
                ("rx_malformed", s.rx_malformed),
                ("rx_unhandled", s.rx_unhandled),
                ("tcp_segments_in", s.tcp_segments_in),
                ("tcp_no_socket", s.tcp_no_socket),
                ("tcp_bad_source", s.tcp_bad_source),
                ("rst_sent", s.rst_sent),
                ("buffer_memory", s.buffer_memory),
                ("buffer_memory_peak", s.buffer_memory_peak),
                ("rx_buffer_clamps", s.rx_buffer_clamps),
                ("tx_buffer_clamps", s.tx_buffer_clamps),
                ("rx_memory_dropped", s.rx_memory_dropped),
                ("tx_memory_refused", s.tx_memory_refused),
                ("connections", c.connections as u64),
                ("time_wait", c.time_wait as u64),
                ("registered", c.registered as u64),
                ("accepted_local", h.accepted_local),
                ("accepted_stolen", h.accepted_stolen),
                ("steals_requested", h.steals_requested),
                ("given", h.given),
                ("forwarded", h.forwarded),
                ("handoff_failed", h.failed),
                ("accept_rejected", h.rejected),
                ("unregistered", h.unregistered),
                ("default_channel_pushed", c.default_channel.pushed),
                ("default_channel_refused_full", c.default_channel.refused_full),
                ("tx_channel_pushed", c.tx_channel.pushed),
                ("tx_channel_refused_full", c.tx_channel.refused_full),
            ] {
                writeln!(f, "     {p}_{name}: {v}")?;
            }
            for (q, ch) in c.inputs.iter().enumerate() {
                writeln!(f, "     {p}_from_queue{q}_pushed: {}", ch.pushed)?;
                writeln!(f, "     {p}_from_queue{q}_refused_full: {}", ch.refused_full)?;
            }
        }
        for a in &self.accept {
            let p = format!("port{}", a.port);
            for (name, v) in [
                ("enqueued", a.enqueued),
                ("accepted_local", a.local),
                ("accepted_stolen", a.stolen),
                ("migrated", a.migrated),
                ("rejected", a.rejected),
                ("queued", a.queued),
            ] {
                writeln!(f, "     {p}_{name}: {v}")?;
            }
        }
        Ok(())
    }
}
