//! The TCP echo service behind `cargo run --release --example echo`: the whole data path of the
//! design (DESIGN.md §2) from the NIC's queues to per-core TCP stacks, with Affinity-Accept between
//! the cores, and an in-process client that checks every echoed byte.
//!
//! # Backends
//!
//! * **The 82599 model** (the default): [`ixgbe_vfio::sim::Model`] on its own thread, the
//!   [`ixgbe_vfio::driver::Ixgbe`] driver with one queue pair per core, and the model's port wired
//!   through an in-memory [`Pair`] to a client [`Stack`] on the calling thread. No NIC, no root.
//! * **A TAP device** ([`Backend::Tap`]): one core serves the Linux kernel's sockets through
//!   [`Tap`] (the kernel is the client).
//! * **A real 82599 over VFIO** ([`Backend::Pci`]): [`ixgbe_vfio::platform::open`], then the same
//!   per-core server as on the model; the clients are whatever is on the wire.
//! * **AF_XDP on any Linux interface** ([`Backend::Xdp`]): one core serves one queue of the
//!   interface through [`AfXdp`] (the pool's region is the UMEM; generic or native XDP). The kernel,
//!   or whatever is on the interface's wire, is the client; it learns our MAC by ARP, which reaches
//!   the stack through the XDP redirect like every other frame of the queue. tcp-lib verifies every
//!   checksum and AF_XDP says nothing about offloads, so a peer that leaves checksums to the
//!   hardware must not (on a veth pair: `ethtool -K PEER tx off` on the kernel's end).
//!
//! # One core
//!
//! Core `c` owns the driver's queue `c`, a [`Channelizer`] for it and a tcp-lib [`Stack`]. Every
//! channelizer has one channel to every core's stack ([`Channelizer::attach`] of `ConsumerId(c)`
//! on every queue: an N x N matrix of single-producer channels), plus the queue's *default
//! channel*, consumed by core `c`. Frames whose exact signature is in the registry go to the
//! channel of the core it names, whichever queue they arrived on; the rest (ARP, SYNs for the
//! listener, strays) go to the default channel of their queue, so a new connection is created by
//! the stack of the core whose queue Flow Director steers its flow group to. That stack registers
//! the connection's exact signature to itself as soon as it creates it ([`AcceptHook::opened`],
//! before its SYN-ACK leaves, so nothing of the connection can arrive before the entry), and the
//! registration lives as long as the stack holds the 4-tuple ([`Stack::contains`]; a sweep every
//! 50 ms drops the others). The stack's output goes into a TX channel that the channelizer drains
//! into queue `c`. All stacks share the NIC's MAC and IP address.
//!
//! ARP is the exception to "one queue, one stack": a frame that is not TCP lands on one queue (RSS
//! or queue 0), yet every core's stack must know the client's MAC. So an ARP frame received on one
//! core is also given to every other core's stack, rewritten into a reply (so those stacks learn the
//! sender but do not answer).
//!
//! # Accepting, stealing, migration
//!
//! One [`AcceptQueue`] across the cores with [`Policy::affinity`], fed through each stack's
//! [`AcceptHook`]: an established connection is queued on the core it arrived on, with its flow
//! group. Each core's loop accepts from its queue as connections come. A connection stolen by core
//! `s` (`Accepted::remote`) from core `v` moves to `s` (issue 6 §2, DESIGN.md §2): `s` sends `v` a
//! steal request through `v`'s handoff channel (std mpsc); `v` [`Stack::detach`]es it, sends the
//! [`Detached`] connection with its registration to `s`, and from then on forwards the frames of
//! that signature that still reach it (classified before the redirect) to `s` behind it, for a
//! second; `s` [`Stack::adopt`]s it and re-points the registration to itself, so every
//! channelizer now delivers its frames to `s`'s channel. No frame of the connection reaches a
//! stack that lacks it, so none draws a reset.
//!
//! Flow-group migration ([`AcceptQueue::balance`], through the NIC's Flow Director) runs on a
//! balancer thread every 10 ms (the queue runs a round every 100 ms). It is correct because every
//! connection, half-open ones included, is registered to the core whose stack has it: moving a
//! group changes only where the group's *new* connections (their SYNs, unregistered) arrive; the
//! existing ones keep reaching their stacks through the registry from the new queue.
//!
//! `--slow-core N` slows core `N` (one accept per 5 ms, 1 ms per received chunk) so that its
//! accept queue fills, it turns busy and the others steal from it; `--backlog` sets the queue size
//! that busyness is measured against.

//! # Placement
//!
//! [`Placement::Same`]: the channelizer and the stack of a core run on one thread, polling in turn.
//! [`Placement::Split`]: the channelizer on one thread, the stack and the echo service on another,
//! the two joined by the default and TX channels.
//!
//! # The client (model backend)
//!
//! An in-process tcp-lib [`Stack`] on the other end of the wire opens [`Options::conns`]
//! connections from random ephemeral ports (so their flow groups spread over the queues). Each sends
//! messages of random size in [`Options::size`], one at a time, and checks the echo byte for byte;
//! the latency of a message is from its first `send` to the last byte of its echo. After
//! [`Options::messages`] messages (or when [`Options::duration`] is up) it half-closes, waits for
//! the server's FIN and closes.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel as handoff_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use accept_affinity::{AcceptQueue, Policy};
use ixgbe_vfio::driver::{Config as NicConfig, Ixgbe, NicStats};
use ixgbe_vfio::sim::{Model, SimConfig, SimStats, Wire};
use netchannel::channelizer::{Channelizer, ChannelizerStats, ConsumerId, SignatureRegistry};
use netchannel::dev::{AfXdp, NetDevice, PacketBatch, Pair, PcapWriter, Tap, XdpError, XdpMode};
use netchannel::pool::{Audit, HugePages, PacketRx, PacketTx, Pool, PoolCache};
use netchannel::rcu::Qsbr;
use netchannel::registry::Registration;
use netchannel::signature::{Classified, FlowGroup, Proto, Signature, classify};
use netchannel::steering::FlowSteering;
use tcp_lib::stack::{
    AcceptHook, Config as StackConfig, Detached, Error as StackError, ListenerConfig, ListenerId, Stack,
    StackStats, StreamId,
};
use tcp_lib::tcp::State;
use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};

/// The echo port (RFC 862).
pub const DEFAULT_PORT: u16 = 7;
/// The server's address on the model backend (and the default for `--tap`, `--xdp` and `--pci`).
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The in-process client's address on the model backend.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// Frames per burst, channel capacities.
const BURST: usize = 32;
/// Capacity of each core's default (RX) and TX channels.
const CHANNEL: usize = 1024;
/// The listener's backlog across all cores (split evenly by the accept queue).
const BACKLOG: usize = 4096;
/// A run with no progress for this long fails.
const STALL: Duration = Duration::from_secs(10);
/// How long a core forwards the frames of a connection it gave away (the registry's redirect is
/// seen by every channelizer within a grace period, a burst or so; this is ample).
const FORWARD_FOR: Duration = Duration::from_secs(1);
/// How often a core drops the registrations of connections its stack no longer holds.
const SWEEP_EVERY: Duration = Duration::from_millis(50);
/// The delay per received chunk on the `--slow-core`.
const SLOW_DELAY: Duration = Duration::from_millis(1);
/// The `--slow-core` accepts at most one connection per this.
const SLOW_ACCEPT: Duration = Duration::from_millis(5);
/// How often the balancer thread offers the accept queue a flow-group migration round (the queue
/// runs one every 100 ms, DESIGN.md §4).
const BALANCE_EVERY: Duration = Duration::from_millis(10);

/// Where the server runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The 82599 model with an in-process client.
    Model,
    /// A TAP interface; the kernel is the client.
    Tap {
        /// The interface name.
        name: String,
        /// The server's address and prefix.
        ip: Ipv4Cidr,
    },
    /// One queue of a Linux interface through AF_XDP; the kernel (or the wire) is the client.
    Xdp {
        /// The interface name.
        iface: String,
        /// The interface's receive queue (the XDP program passes the other queues' frames to the
        /// kernel).
        queue: u32,
        /// Generic, native, or native where the driver has it.
        mode: XdpMode,
        /// The server's address and prefix.
        ip: Ipv4Cidr,
    },
    /// A real 82599 over VFIO; the clients are on the wire.
    Pci {
        /// The PCI address, `0000:03:00.0`.
        addr: String,
        /// The server's address and prefix.
        ip: Ipv4Cidr,
    },
}

/// Where each core's channelizer runs relative to its stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// One thread per core polls the channelizer and runs the stack.
    Same,
    /// Per core, one thread for the channelizer and one for the stack and the echo service.
    Split,
}

/// What to run. [`Options::default`] is the README's run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Where the server runs.
    pub backend: Backend,
    /// Cores (queue pairs, per-core stacks); the TAP and AF_XDP backends always use one.
    pub cores: u16,
    /// Channelizer and stack on one thread per core, or two.
    pub placement: Placement,
    /// Client connections, all open at once (model backend).
    pub conns: usize,
    /// Messages per connection (model backend; ignored when `duration` is set).
    pub messages: u64,
    /// Message sizes, inclusive range in bytes.
    pub size: (usize, usize),
    /// Run the client (or the server, on TAP and PCI) this long.
    pub duration: Option<Duration>,
    /// Record the client's wire (model), the TAP, or each queue (PCI, one file per queue) to this
    /// pcap file.
    pub pcap: Option<PathBuf>,
    /// The echo port.
    pub port: u16,
    /// Seeds message sizes and contents.
    pub seed: u64,
    /// Print a progress line every second.
    pub progress: bool,
    /// The listener's backlog across all cores (split evenly by the accept queue; a core is busy
    /// above 75% of its share).
    pub backlog: usize,
    /// Make this core slow (a delay per accept and per message chunk) so that it gets busy and
    /// the others steal from it.
    pub slow_core: Option<u16>,
    /// Run flow-group migration ([`AcceptQueue::balance`]) through the NIC's Flow Director.
    pub balance: bool,
}

impl Default for Options {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Self {
            backend: Backend::Model,
            cores: u16::try_from(cpus.min(16)).unwrap_or(16),
            placement: Placement::Same,
            conns: 64,
            messages: 2000,
            size: (1, 4096),
            duration: None,
            pcap: None,
            port: DEFAULT_PORT,
            seed: 1,
            progress: true,
            backlog: BACKLOG,
            slow_core: None,
            balance: true,
        }
    }
}

/// The `--help` text.
pub const USAGE: &str = "\
usage: echo [OPTIONS]

A TCP echo service on per-core tcp-lib stacks behind net channels, with Affinity-Accept.

backends (default: the 82599 model with an in-process client):
  --tap NAME           serve the Linux kernel through the TAP interface NAME (needs CAP_NET_ADMIN)
  --xdp IFACE[:QUEUE]  serve queue QUEUE (default 0) of the Linux interface IFACE through AF_XDP
                       (needs root, or CAP_NET_ADMIN + CAP_NET_RAW + CAP_BPF); one core
  --xdp-mode M         generic, native or auto (native where the driver has it; the default)
  --pci ADDR           serve on a real 82599 at PCI address ADDR (0000:03:00.0) over VFIO
  --ip A/N             the server's address on --tap, --xdp and --pci (default 10.0.0.2/24)

options:
  --cores N            cores: queue pairs and per-core stacks, 1..=64 (default: all CPUs, at most 16)
  --queues N           the same as --cores
  --placement P        same: channelizer and stack on one thread per core (default);
                       split: a channelizer thread and a stack thread per core
  --conns N            client connections, all open at once (default 64)
  --messages M         messages per connection (default 2000)
  --size MIN..MAX      message sizes in bytes, or one size N (default 1..4096)
  --duration SECONDS   run the client this long instead of --messages; on --tap/--xdp/--pci, serve this
                       long (default: until Ctrl-C)
  --pcap FILE          record the client's wire (model), the TAP, or each queue (pci: FILE.qN)
  --port P             the echo port (default 7)
  --seed S             seeds message sizes and contents (default 1)
  --backlog N          the listener's backlog over all cores (default 4096); a core is busy, and
                       others steal from it, when its share is 75% full
  --slow-core N        slow core N down (one accept per 5 ms, 1 ms per message chunk) so that its
                       accept queue fills and the other cores steal from it
  --no-balance         no flow-group migration
  --quiet              no progress line
";

impl Options {
    /// Parses command-line arguments (without the program name).
    ///
    /// # Errors
    ///
    /// A message naming the bad argument; `Ok(None)` for `--help`.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Self>, String> {
        let mut o = Self::default();
        let mut tap = None;
        let mut pci = None;
        let mut xdp = None;
        let mut xdp_mode = None;
        let mut ip = None;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value (try --help)"));
            match arg.as_str() {
                "--cores" | "--queues" => o.cores = number(&value()?, 1, 64)?,
                "--placement" => {
                    o.placement = match value()?.as_str() {
                        "same" => Placement::Same,
                        "split" => Placement::Split,
                        other => return Err(format!("--placement is same or split, not {other:?}")),
                    }
                }
                "--conns" => o.conns = number(&value()?, 1, 60_000)?,
                "--messages" => o.messages = number(&value()?, 1, u64::MAX)?,
                "--size" => o.size = size_range(&value()?)?,
                "--duration" => {
                    let text = value()?;
                    let secs = text.parse::<f64>().ok().filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9);
                    let secs =
                        secs.ok_or_else(|| format!("--duration: {text:?} is not a positive number"))?;
                    o.duration = Some(Duration::from_secs_f64(secs));
                }
                "--pcap" => o.pcap = Some(PathBuf::from(value()?)),
                "--port" => o.port = number(&value()?, 1, u16::MAX)?,
                "--seed" => o.seed = number(&value()?, 0, u64::MAX)?,
                "--tap" => tap = Some(value()?),
                "--pci" => pci = Some(value()?),
                "--xdp" => xdp = Some(value()?),
                "--xdp-mode" => {
                    xdp_mode = Some(match value()?.as_str() {
                        "generic" | "skb" => XdpMode::Generic,
                        "native" | "drv" => XdpMode::Native,
                        "auto" => XdpMode::Auto,
                        other => return Err(format!("--xdp-mode is generic, native or auto, not {other:?}")),
                    });
                }
                "--ip" => ip = Some(cidr(&value()?)?),
                "--quiet" => o.progress = false,
                "--backlog" => o.backlog = number(&value()?, 1, 1 << 20)?,
                "--slow-core" => o.slow_core = Some(number(&value()?, 0, 63)?),
                "--no-balance" => o.balance = false,
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown argument {other:?} (try --help)")),
            }
        }
        let server = ip.unwrap_or_else(|| Ipv4Cidr::new(SERVER_IP, 24).expect("a /24"));
        if xdp_mode.is_some() && xdp.is_none() {
            return Err("--xdp-mode is for --xdp".into());
        }
        o.backend = match (tap, xdp, pci) {
            (Some(name), None, None) => Backend::Tap { name, ip: server },
            (None, Some(spec), None) => {
                let (iface, queue) = xdp_spec(&spec)?;
                Backend::Xdp { iface, queue, mode: xdp_mode.unwrap_or_default(), ip: server }
            }
            (None, None, Some(addr)) => Backend::Pci { addr, ip: server },
            (None, None, None) if ip.is_some() => {
                return Err("--ip is for --tap, --xdp and --pci; the model's addresses are fixed".into());
            }
            (None, None, None) => Backend::Model,
            _ => return Err("--tap, --xdp and --pci exclude each other".into()),
        };
        Ok(Some(o))
    }
}

/// `text` as a number in `min..=max`.
pub(crate) fn number<T: std::str::FromStr + PartialOrd + fmt::Display>(
    text: &str,
    min: T,
    max: T,
) -> Result<T, String> {
    match text.parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(format!("{text:?} is not a number in {min}..={max}")),
    }
}

/// `MIN..MAX` (inclusive) or `N`, sizes in 1..=1 MiB.
fn size_range(text: &str) -> Result<(usize, usize), String> {
    let (min, max) = match text.split_once("..") {
        Some((a, b)) => (number(a, 1, 1 << 20)?, number(b.trim_start_matches('='), 1, 1 << 20)?),
        None => {
            let n = number(text, 1, 1 << 20)?;
            (n, n)
        }
    };
    if min > max {
        return Err(format!("--size {text}: the minimum is above the maximum"));
    }
    Ok((min, max))
}

/// `IFACE[:QUEUE]`, checked as [`AfXdpBuilder::parse`](netchannel::dev::AfXdpBuilder::parse)
/// does it.
fn xdp_spec(spec: &str) -> Result<(String, u32), String> {
    netchannel::dev::AfXdpBuilder::parse(spec).map_err(|e| format!("--xdp {spec:?}: {e}"))?;
    Ok(match spec.rsplit_once(':') {
        Some((iface, queue)) => {
            (iface.to_owned(), queue.parse().map_err(|_| format!("--xdp {spec:?}: bad queue"))?)
        }
        None => (spec.to_owned(), 0),
    })
}

/// `A.B.C.D/N`.
pub(crate) fn cidr(text: &str) -> Result<Ipv4Cidr, String> {
    let bad = || format!("--ip {text:?} is not an IPv4 address with a prefix, like 10.0.0.2/24");
    let (addr, prefix) = text.split_once('/').ok_or_else(bad)?;
    let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    Ipv4Cidr::new(addr, prefix).filter(|_| (1..=32).contains(&prefix)).ok_or_else(bad)
}

// -----------------------------------------------------------------------------------------------
// What a run reports.

/// What one server core did.
#[derive(Clone, Debug, Default)]
pub struct CoreReport {
    /// The core (and queue) number.
    pub core: usize,
    /// The channelizer's counters: `dropped_full` is the default channel's drops.
    pub channelizer: ChannelizerStats,
    /// The stack's counters.
    pub stack: StackStats,
    /// Connections this core's echo service served (its own, and those it stole).
    pub served: u64,
    /// Connections this core stole: detached from the core they arrived on, adopted here, their
    /// signature re-pointed to this core's channels.
    pub stolen: u64,
    /// Connections this core's stack gave to a stealing core.
    pub given: u64,
    /// Frames of given-away connections that still reached this core and were forwarded.
    pub forwarded: u64,
    /// Connections whose exact signature could not be registered (already registered).
    pub unregistered: u64,
    /// Connections the accept queue refused (full): reset.
    pub rejected: u64,
    /// Connections closed after the peer's FIN, everything echoed.
    pub closed: u64,
    /// Connections that failed (reset, timed out) while served.
    pub failed: u64,
    /// Bytes echoed.
    pub bytes: u64,
    /// Frames the stack built that the TX channel refused (dropped).
    pub tx_dropped: u64,
    /// Connections still open when the server stopped.
    pub open_at_exit: usize,
}

/// What the client did (model backend).
#[derive(Clone, Debug, Default)]
pub struct ClientReport {
    /// Connections opened.
    pub conns: usize,
    /// Connections that completed (all messages echoed, closed both ways).
    pub completed: usize,
    /// Messages echoed intact.
    pub messages: u64,
    /// Bytes sent (and received back, checked).
    pub bytes: u64,
    /// From the first connect to the last close.
    pub elapsed: Duration,
    /// Message latencies: 50th, 90th, 99th percentile and maximum.
    pub latency: [Duration; 4],
    /// The client stack's counters.
    pub stack: StackStats,
}

/// The accept queue's view of the run.
#[derive(Clone, Debug, Default)]
pub struct AcceptReport {
    /// Connections enqueued by the stacks.
    pub enqueued: u64,
    /// Accepts of connections that arrived on the accepting core.
    pub local: u64,
    /// Accepts of connections that arrived elsewhere (steals: moved to the stealing core).
    pub steals: u64,
    /// Flow-group migrations.
    pub migrations: u64,
    /// Enqueues refused.
    pub rejected: u64,
}

impl AcceptReport {
    /// Local accepts over all accepts (1 when nothing was accepted).
    #[must_use]
    pub fn local_fraction(&self) -> f64 {
        let all = self.local + self.steals;
        if all == 0 { 1.0 } else { self.local as f64 / all as f64 }
    }
}

/// Everything a run did; [`fmt::Display`] is the summary a person reads.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// What ran, in words.
    pub setup: String,
    /// The client's side (model backend).
    pub client: Option<ClientReport>,
    /// Per server core.
    pub cores: Vec<CoreReport>,
    /// Affinity-Accept.
    pub accept: AcceptReport,
    /// Device lines (NIC, model, TAP, pcap).
    pub devices: Vec<String>,
    /// Each pool's name and audit at exit, after every buffer came back.
    pub buffers: Vec<(String, Audit)>,
}

impl Report {
    /// Connections the server cores closed cleanly.
    #[must_use]
    pub fn closed(&self) -> u64 {
        self.cores.iter().map(|c| c.closed).sum()
    }

    /// Bytes the server echoed.
    #[must_use]
    pub fn bytes_echoed(&self) -> u64 {
        self.cores.iter().map(|c| c.bytes).sum()
    }
}

/// The `permille`/1000 quantile (nearest rank) of `sorted`.
pub(crate) fn percentile(sorted: &[Duration], permille: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * permille).div_ceil(1000);
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "summary: {}", self.setup)?;
        if let Some(c) = &self.client {
            let secs = c.elapsed.as_secs_f64().max(1e-9);
            writeln!(
                f,
                "  client: {} of {} connections completed, {} messages, {:.1} MiB echoed and checked byte for \
                 byte, in {secs:.2} s",
                c.completed,
                c.conns,
                c.messages,
                mib(c.bytes)
            )?;
            writeln!(
                f,
                "  throughput: {:.1} MiB/s each way, {:.0} messages/s, {:.0} connections/s",
                mib(c.bytes) / secs,
                c.messages as f64 / secs,
                c.completed as f64 / secs
            )?;
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            writeln!(
                f,
                "  latency (send to full echo): p50 {:.0} us, p90 {:.0} us, p99 {:.0} us, max {:.0} us",
                us(c.latency[0]),
                us(c.latency[1]),
                us(c.latency[2]),
                us(c.latency[3])
            )?;
            writeln!(
                f,
                "  client stack: {} frames in, {} out, {} dropped on output, {} resets sent",
                c.stack.rx_frames, c.stack.tx_frames, c.stack.tx_dropped, c.stack.rst_sent
            )?;
        }
        let a = &self.accept;
        writeln!(
            f,
            "  accept (affinity): {} connections, local-accept fraction {:.3}, {} steals (moved to the \
             stealer, signature re-pointed), {} flow-group migrations, {} refused",
            a.enqueued,
            a.local_fraction(),
            a.steals,
            a.migrations,
            a.rejected
        )?;
        for c in &self.cores {
            let ch = &c.channelizer;
            writeln!(
                f,
                "  core {}: {} conns served ({} stolen, {} given away, {} closed, {} failed, {} open at exit), \
                 {:.1} MiB echoed; {} frames in ({} redirected), {} out, {} forwarded; drops: channels {}, TX \
                 channel {}, malformed {}; stack: {} listen drops, {} resets, {} not for us",
                c.core,
                c.served,
                c.stolen,
                c.given,
                c.closed,
                c.failed,
                c.open_at_exit,
                mib(c.bytes),
                ch.rx,
                ch.delivered,
                ch.tx,
                c.forwarded,
                ch.dropped_full,
                c.tx_dropped,
                ch.dropped_malformed,
                c.stack.listen_drops,
                c.stack.rst_sent,
                c.stack.rx_not_for_us
            )?;
        }
        for line in &self.devices {
            writeln!(f, "  {line}")?;
        }
        for (name, audit) in &self.buffers {
            writeln!(
                f,
                "  buffers: {name}: all {} back ({} in the depot, {} outstanding, {} live caches)",
                audit.total, audit.in_depot, audit.outstanding, audit.live_caches
            )?;
        }
        Ok(())
    }
}

// -----------------------------------------------------------------------------------------------
// The server side.

pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Live counters for the progress line.
#[derive(Debug, Default)]
struct Live {
    served: AtomicU64,
    bytes: AtomicU64,
}

/// A connection's registry entry: its exact signature, naming the core whose stack has it.
type Reg = Registration<Signature, ConsumerId, Qsbr>;

/// Registrations by 4-tuple (server side `(local, remote)`), of one core's connections.
type Regs = Rc<RefCell<HashMap<(SocketAddrV4, SocketAddrV4), Reg>>>;

/// What one core sends another through its handoff channel.
enum Handoff {
    /// `to` accepted (stole) `stream` of the receiving core's stack: detach it and send it over.
    Steal {
        /// The stream, a handle of the receiving core's stack.
        stream: StreamId,
        /// The stealing core.
        to: usize,
    },
    /// A connection stolen by the receiving core, with its registration (still naming the core it
    /// came from: the receiver re-points it once it has adopted the connection).
    Adopt(Box<(Detached, Option<Reg>)>),
    /// A frame of a connection the sender gave to the receiver, that reached the sender after.
    Frame(Vec<u8>),
}

/// What the cores share.
struct Shared {
    queue: AcceptQueue<StreamId>,
    /// ARP frames seen on another core, per core (for its stack to learn from).
    arp: Vec<Mutex<Vec<Vec<u8>>>>,
    /// Per core, the sending side of its handoff channel (stolen connections and their frames).
    handoff: Vec<Sender<Handoff>>,
    live: Vec<Live>,
    stop: AtomicBool,
}

impl Shared {
    fn new(cores: usize, backlog: usize) -> Result<(Self, Vec<Receiver<Handoff>>), String> {
        let queue = AcceptQueue::new(cores, backlog, Policy::affinity()).map_err(|e| e.to_string())?;
        let (handoff, inboxes) = (0..cores).map(|_| handoff_channel()).unzip();
        let shared = Self {
            queue,
            arp: (0..cores).map(|_| Mutex::new(Vec::new())).collect(),
            handoff,
            live: (0..cores).map(|_| Live::default()).collect(),
            stop: AtomicBool::new(false),
        };
        Ok((shared, inboxes))
    }

    fn stopping(&self) -> bool {
        // Relaxed: a plain flag; the joins order everything else.
        self.stop.load(Ordering::Relaxed)
    }

    fn served(&self) -> u64 {
        self.live.iter().map(|l| l.served.load(Ordering::Relaxed)).sum()
    }

    fn bytes(&self) -> u64 {
        self.live.iter().map(|l| l.bytes.load(Ordering::Relaxed)).sum()
    }
}

/// The exact signature of a server-side connection.
fn signature(local: SocketAddrV4, remote: SocketAddrV4) -> Option<Signature> {
    Signature::new(Proto::Tcp, SocketAddr::V4(local), SocketAddr::V4(remote)).ok()
}

/// The accept hook of one core's stack: registers every connection's exact signature to this
/// core as soon as the stack creates it (before its SYN-ACK leaves), and collects established
/// connections; the core's loop queues them on the shared accept queue (it knows their flow
/// group).
struct Hook {
    core: usize,
    pending: Rc<RefCell<Vec<StreamId>>>,
    regs: Regs,
    registry: Arc<SignatureRegistry>,
    unregistered: Rc<RefCell<u64>>,
    shared: Arc<Shared>,
}

impl AcceptHook for Hook {
    fn has_room(&mut self, _listener: ListenerId) -> bool {
        self.shared.queue.queue_len(self.core) + self.pending.borrow().len()
            < self.shared.queue.per_core_max()
    }

    fn established(&mut self, _listener: ListenerId, stream: StreamId) {
        self.pending.borrow_mut().push(stream);
    }

    fn opened(&mut self, _listener: ListenerId, local: SocketAddrV4, remote: SocketAddrV4) {
        let consumer = ConsumerId(u32::try_from(self.core).unwrap_or(u32::MAX));
        let reg = signature(local, remote).and_then(|sig| self.registry.register(sig, consumer).ok());
        match reg {
            Some(reg) => {
                self.regs.borrow_mut().insert((local, remote), reg);
            }
            None => *self.unregistered.borrow_mut() += 1,
        }
    }
}

/// A connection the echo service serves: bytes received and not yet sent back.
struct Served {
    id: StreamId,
    out: Vec<u8>,
}

/// What the server cores are built from.
#[derive(Clone, Copy)]
struct ServerSetup {
    mac: EthernetAddress,
    ip: Ipv4Cidr,
    port: u16,
    placement: Placement,
    backlog: usize,
    slow_core: Option<usize>,
}

fn tcp_tuning(config: &mut StackConfig) {
    // A request/response workload: no Nagle, and Linux's 200 ms minimum RTO.
    config.tcp.nodelay = true;
    config.tcp.min_rto = Duration::from_millis(200);
    config.tcp.initial_rto = Duration::from_millis(200);
}

/// One core's stack and echo service.
struct ServerCore {
    core: usize,
    stack: Stack,
    pending: Rc<RefCell<Vec<StreamId>>>,
    regs: Regs,
    unregistered: Rc<RefCell<u64>>,
    shared: Arc<Shared>,
    inbox: Receiver<Handoff>,
    /// Connections given to another core: their frames that still arrive here are forwarded
    /// (until the instant), so the stack never answers them with a reset.
    moved: HashMap<Signature, (usize, Instant)>,
    last_sweep: Instant,
    last_accept: Instant,
    slow: bool,
    served: Vec<Served>,
    buf: Vec<u8>,
    report: CoreReport,
}

impl ServerCore {
    fn new(
        core: usize,
        setup: ServerSetup,
        shared: Arc<Shared>,
        registry: Arc<SignatureRegistry>,
        inbox: Receiver<Handoff>,
    ) -> Result<Self, String> {
        let mut config = StackConfig::new(setup.mac, setup.ip);
        config.gratuitous_arp = core == 0;
        tcp_tuning(&mut config);
        let mut stack = Stack::new(config, Instant::now());
        let backlog = shared.queue.per_core_max();
        stack
            .listen_with(setup.port, ListenerConfig { backlog, ..ListenerConfig::default() })
            .map_err(|e| format!("core {core}: cannot listen on port {}: {e}", setup.port))?;
        let pending = Rc::new(RefCell::new(Vec::new()));
        let regs = Regs::default();
        let unregistered = Rc::new(RefCell::new(0));
        stack.set_accept_hook(Some(Box::new(Hook {
            core,
            pending: Rc::clone(&pending),
            regs: Rc::clone(&regs),
            registry,
            unregistered: Rc::clone(&unregistered),
            shared: Arc::clone(&shared),
        })));
        Ok(Self {
            core,
            stack,
            pending,
            regs,
            unregistered,
            shared,
            inbox,
            moved: HashMap::new(),
            last_sweep: Instant::now(),
            last_accept: Instant::now(),
            slow: setup.slow_core == Some(core),
            served: Vec::new(),
            buf: vec![0; 64 * 1024],
            report: CoreReport { core, ..CoreReport::default() },
        })
    }

    /// One received frame.
    fn receive(&mut self, now: Instant, frame: &[u8]) {
        if !self.moved.is_empty()
            && let Classified::Flow { sig, .. } = classify(frame)
            && let Some(&(to, _)) = self.moved.get(&sig)
        {
            // A frame of a connection given away, classified before the redirect: forward it
            // (behind the connection itself in the handoff channel).
            if self.shared.handoff[to].send(Handoff::Frame(frame.to_vec())).is_ok() {
                self.report.forwarded += 1;
            }
            return;
        }
        self.stack.receive(now, frame);
        let cores = self.shared.arp.len();
        if cores > 1 && frame.len() >= 42 && frame[12..14] == [0x08, 0x06] {
            // Every stack must learn the sender: the others get it as a reply (no answer from them).
            let mut copy = frame.to_vec();
            copy[20..22].copy_from_slice(&2u16.to_be_bytes());
            for (other, mailbox) in self.shared.arp.iter().enumerate() {
                let mut mailbox = lock(mailbox);
                if other != self.core && mailbox.len() < 256 {
                    mailbox.push(copy.clone());
                }
            }
        }
    }

    /// The handoff channel: steal requests from other cores, connections this core stole, and
    /// their forwarded frames.
    fn handoffs(&mut self, now: Instant) -> bool {
        let mut busy = false;
        while let Ok(msg) = self.inbox.try_recv() {
            busy = true;
            match msg {
                Handoff::Steal { stream, to } => self.give(now, stream, to),
                Handoff::Adopt(moved) => {
                    let (detached, reg) = *moved;
                    self.take(now, detached, reg);
                }
                Handoff::Frame(frame) => self.stack.receive(now, &frame),
            }
        }
        busy
    }

    /// Core `to` stole `stream`: detach it and send it there with its registration; forward its
    /// frames that still come here until `to` has re-pointed the registration.
    fn give(&mut self, now: Instant, stream: StreamId, to: usize) {
        let detached = match self.stack.detach(stream) {
            Ok(d) => d,
            Err(_) => {
                self.report.failed += 1;
                return;
            }
        };
        let key = (detached.local(), detached.remote());
        let reg = self.regs.borrow_mut().remove(&key);
        if let Some(sig) = signature(key.0, key.1) {
            self.moved.insert(sig, (to, now + FORWARD_FOR));
        }
        self.report.given += 1;
        if let Err(back) = self.shared.handoff[to].send(Handoff::Adopt(Box::new((detached, reg)))) {
            // The stealer is gone (stopping): keep serving it here.
            if let Handoff::Adopt(moved) = back.0 {
                let (detached, reg) = *moved;
                self.take(now, detached, reg);
            }
        }
    }

    /// Adopts a stolen connection, points its signature at this core's channels, serves it.
    fn take(&mut self, now: Instant, detached: Detached, reg: Option<Reg>) {
        let key = (detached.local(), detached.remote());
        match self.stack.adopt(detached, now) {
            Ok(id) => {
                let consumer = ConsumerId(u32::try_from(self.core).unwrap_or(u32::MAX));
                if let Some(sig) = signature(key.0, key.1) {
                    self.moved.remove(&sig);
                }
                if let Some(mut reg) = reg {
                    reg.repoint(consumer);
                    self.regs.borrow_mut().insert(key, reg);
                }
                self.report.stolen += 1;
                self.serve(id);
            }
            Err(_) => self.report.failed += 1,
        }
    }

    /// Drops the registrations of connections the stack no longer holds, and expired forwards.
    fn sweep(&mut self, now: Instant) {
        if now.duration_since(self.last_sweep) < SWEEP_EVERY {
            return;
        }
        self.last_sweep = now;
        let stack = &self.stack;
        self.regs.borrow_mut().retain(|&(local, remote), _| stack.contains(local, remote));
        self.moved.retain(|_, &mut (_, until)| until > now);
    }

    /// Everything but I/O: learned ARP, handoffs, accepts, echoing, timers. Returns whether it did
    /// anything.
    fn service(&mut self, now: Instant) -> bool {
        let mut busy = false;
        let learned = std::mem::take(&mut *lock(&self.shared.arp[self.core]));
        for frame in learned {
            self.stack.receive(now, &frame);
        }
        busy |= self.handoffs(now);
        let established = std::mem::take(&mut *self.pending.borrow_mut());
        for stream in established {
            busy = true;
            let group = self.stack.addrs(stream).map_or(FlowGroup(0), |(_, r)| FlowGroup::of_port(r.port()));
            if let Err(e) = self.shared.queue.enqueue(self.core, group, stream) {
                let _ = self.stack.abort(e.into_inner());
                self.report.rejected += 1;
            }
            // Accept as connections come (an application thread waiting in accept()), so that a
            // burst does not make a core that keeps up look busy.
            self.accept_some(now);
        }
        busy |= self.accept_some(now);
        let mut i = 0;
        while i < self.served.len() {
            let (done, moved) = self.echo(i);
            busy |= moved > 0 || done;
            if done {
                self.served.swap_remove(i);
            } else {
                i += 1;
            }
        }
        if self.stack.poll_timeout().is_some_and(|t| t <= now) {
            self.stack.handle_timeout(now);
        }
        self.sweep(now);
        busy
    }

    /// Takes connections from the accept queue: local ones are served here, stolen ones are asked
    /// of the core they arrived on. Returns whether it took any.
    fn accept_some(&mut self, now: Instant) -> bool {
        // The slow core accepts at most one connection per `SLOW_ACCEPT` (a worker that is behind).
        let mut accepts = usize::MAX;
        if self.slow {
            accepts = usize::from(now.duration_since(self.last_accept) >= SLOW_ACCEPT);
        }
        let mut took = false;
        while accepts > 0
            && let Ok(accepted) = self.shared.queue.try_accept(self.core)
        {
            accepts -= 1;
            took = true;
            self.last_accept = now;
            if accepted.remote {
                // Stolen: the core it arrived on moves it here (DESIGN.md §2).
                let steal = Handoff::Steal { stream: accepted.conn, to: self.core };
                if self.shared.handoff[accepted.arrived_on].send(steal).is_err() {
                    self.report.failed += 1;
                }
            } else {
                self.serve(accepted.conn);
            }
        }
        took
    }

    fn serve(&mut self, id: StreamId) {
        self.report.served += 1;
        self.shared.live[self.core].served.fetch_add(1, Ordering::Relaxed);
        self.served.push(Served { id, out: Vec::new() });
    }

    /// Echoes what connection `i` has received; returns (finished, bytes moved).
    fn echo(&mut self, i: usize) -> (bool, usize) {
        let Self { stack, served, buf, report, shared, core, slow, .. } = self;
        let s = &mut served[i];
        let mut moved = 0;
        loop {
            if !s.out.is_empty() {
                match stack.send(s.id, &s.out) {
                    Ok(n) => {
                        s.out.drain(..n);
                        moved += n;
                        report.bytes += n as u64;
                        shared.live[*core].bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(StackError::WouldBlock) => {}
                    Err(_) => {
                        let _ = stack.abort(s.id);
                        report.failed += 1;
                        return (true, moved);
                    }
                }
                if !s.out.is_empty() {
                    return (false, moved); // the send buffer is full: read more later
                }
            }
            match stack.recv(s.id, buf) {
                Ok(0) => {
                    let _ = stack.close(s.id);
                    report.closed += 1;
                    return (true, moved);
                }
                Ok(n) => {
                    if *slow {
                        std::thread::sleep(SLOW_DELAY);
                    }
                    s.out.extend_from_slice(&buf[..n]);
                }
                Err(StackError::WouldBlock) => return (false, moved),
                Err(_) => {
                    let _ = stack.abort(s.id);
                    report.failed += 1;
                    return (true, moved);
                }
            }
        }
    }

    /// Moves the stack's output into the TX channel while it has room.
    fn transmit<'c>(
        &mut self,
        now: Instant,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
        tx: &mut PacketTx,
    ) -> bool {
        let mut any = false;
        while tx.free_space() >= BURST {
            let n = self.stack.transmit(now, cache, batch);
            for packet in batch.drain() {
                if tx.push(packet).is_err() {
                    self.report.tx_dropped += 1;
                }
            }
            any |= n > 0;
            if n < BURST {
                break;
            }
        }
        any
    }

    fn finish(mut self) -> CoreReport {
        self.report.open_at_exit = self.served.len();
        self.report.unregistered = *self.unregistered.borrow();
        self.report.stack = *self.stack.stats();
        self.report
    }
}

/// Sleeps a little after a while with nothing to do (the model and the other cores share CPUs).
struct Idle {
    since: Option<Instant>,
}

impl Idle {
    fn new() -> Self {
        Self { since: None }
    }

    fn tick(&mut self, busy: bool) {
        if busy {
            self.since = None;
            return;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() > Duration::from_millis(2) {
            std::thread::sleep(Duration::from_micros(100));
        } else {
            std::thread::yield_now();
        }
    }
}

/// Drains `tx` into the device (polling the channelizer) until it is empty or a second passes,
/// dropping what arrives meanwhile.
fn drain_channels<D: NetDevice>(
    ch: &mut Channelizer<'_, D>,
    tx: &mut PacketTx,
    rx: &mut PacketRx,
    cache: &PoolCache,
) {
    let deadline = Instant::now() + Duration::from_secs(1);
    let capacity = tx.free_space();
    loop {
        let _ = ch.poll();
        while rx.pop(cache).is_some() {}
        if tx.free_space() >= capacity || Instant::now() > deadline {
            break;
        }
        std::thread::yield_now();
    }
}

/// One core's ends of the channel matrix: `lanes[c]` carries what this core's channelizer
/// delivers to consumer `c` (the frames of connections registered to core `c`), `inputs[q]` what
/// channelizer `q` delivers to this core's stack; `inbox` is its handoff channel.
struct Wiring {
    lanes: Vec<PacketTx>,
    inputs: Vec<PacketRx>,
    inbox: Receiver<Handoff>,
}

/// What a core hands back: its report, and its input channels, dropped only once every
/// channelizer is gone (dropping a channel returns its queued buffers to the pool).
type CoreOut = (CoreReport, Vec<PacketRx>);

fn attach_lanes<D: NetDevice>(ch: &mut Channelizer<'_, D>, lanes: Vec<PacketTx>) -> Result<(), String> {
    for (c, lane) in lanes.into_iter().enumerate() {
        let id = ConsumerId(u32::try_from(c).map_err(|e| e.to_string())?);
        ch.attach(id, lane).map_err(|_| format!("cannot attach consumer {c}'s channel"))?;
    }
    Ok(())
}

/// Pops every frame waiting in `default` and `inputs` into the core's stack; returns how many.
fn receive_all(
    server: &mut ServerCore,
    now: Instant,
    cache: &PoolCache,
    default: &mut PacketRx,
    inputs: &mut [PacketRx],
) -> usize {
    let mut frames = 0;
    for rx in std::iter::once(default).chain(inputs.iter_mut()) {
        while let Some(packet) = rx.pop(cache) {
            server.receive(now, packet.data());
            frames += 1;
        }
    }
    frames
}

/// Core `core` with channelizer and stack on this thread.
fn core_same<D: NetDevice>(
    core: usize,
    device: D,
    pool: &Pool,
    registry: Arc<SignatureRegistry>,
    setup: ServerSetup,
    shared: Arc<Shared>,
    wiring: Wiring,
) -> Result<CoreOut, String> {
    let cache = pool.cache();
    let channel = |capacity| pool.packet_channel(capacity).map_err(|e| e.to_string());
    let (default_tx, mut default_rx) = channel(CHANNEL)?;
    let (mut reply_tx, reply_rx) = channel(CHANNEL)?;
    let Wiring { lanes, mut inputs, inbox } = wiring;
    let mut ch = Channelizer::new(device, 0, &cache, Arc::clone(&registry), default_tx, BURST);
    attach_lanes(&mut ch, lanes)?;
    ch.add_tx(reply_rx);
    let mut server = ServerCore::new(core, setup, Arc::clone(&shared), registry, inbox)?;
    let mut batch = PacketBatch::with_capacity(BURST);
    let mut idle = Idle::new();
    let capacity = reply_tx.free_space();
    let mut result = Ok(());
    while !shared.stopping() {
        let polled = match ch.poll() {
            Ok(p) => p,
            Err(e) => {
                result = Err(format!("core {core}: the device failed: {e}"));
                break;
            }
        };
        let now = Instant::now();
        let frames = receive_all(&mut server, now, &cache, &mut default_rx, &mut inputs);
        let served = server.service(now);
        let sent = server.transmit(now, &cache, &mut batch, &mut reply_tx);
        idle.tick(polled.rx + polled.tx + frames > 0 || served || sent || reply_tx.free_space() < capacity);
    }
    drain_channels(&mut ch, &mut reply_tx, &mut default_rx, &cache);
    let mut report = server.finish();
    report.channelizer = ch.stats();
    drop(ch);
    while default_rx.pop(&cache).is_some() {}
    result.map(|()| (report, inputs))
}

/// Core `core` split over two threads: the channelizer on this one, the stack on a new one.
fn core_split<D: NetDevice>(
    core: usize,
    device: D,
    pool: &Pool,
    registry: Arc<SignatureRegistry>,
    setup: ServerSetup,
    shared: Arc<Shared>,
    wiring: Wiring,
) -> Result<CoreOut, String> {
    let channel = |capacity| pool.packet_channel(capacity).map_err(|e| e.to_string());
    let (default_tx, default_rx) = channel(CHANNEL)?;
    let (reply_tx, reply_rx) = channel(CHANNEL)?;
    let Wiring { lanes, inputs, inbox } = wiring;
    let tx_drained = AtomicBool::new(false);
    let ch_done = AtomicBool::new(false);
    let app_registry = Arc::clone(&registry);
    std::thread::scope(|s| {
        let app = s.spawn(|| {
            let (mut default_rx, mut reply_tx, mut inputs) = (default_rx, reply_tx, inputs);
            let cache = pool.cache();
            let mut server = ServerCore::new(core, setup, Arc::clone(&shared), app_registry, inbox)?;
            let mut batch = PacketBatch::with_capacity(BURST);
            let mut idle = Idle::new();
            let capacity = reply_tx.free_space();
            while !shared.stopping() {
                let now = Instant::now();
                let frames = receive_all(&mut server, now, &cache, &mut default_rx, &mut inputs);
                let served = server.service(now);
                let sent = server.transmit(now, &cache, &mut batch, &mut reply_tx);
                idle.tick(frames > 0 || served || sent);
            }
            // Let the channelizer send what is queued, then take the last frames it delivered.
            loop {
                while default_rx.pop(&cache).is_some() {}
                if reply_tx.free_space() >= capacity {
                    tx_drained.store(true, Ordering::Release);
                }
                // Acquire: after it, the channelizer pushes nothing more.
                if ch_done.load(Ordering::Acquire) {
                    while default_rx.pop(&cache).is_some() {}
                    break;
                }
                std::thread::yield_now();
            }
            Ok::<_, String>((server.finish(), inputs))
        });
        let cache = pool.cache();
        let mut ch = Channelizer::new(device, 0, &cache, registry, default_tx, BURST);
        let mut result = attach_lanes(&mut ch, lanes);
        ch.add_tx(reply_rx);
        let mut idle = Idle::new();
        if result.is_err() {
            shared.stop.store(true, Ordering::Relaxed);
        }
        while !shared.stopping() {
            match ch.poll() {
                Ok(p) => idle.tick(p.rx + p.tx > 0),
                Err(e) => {
                    result = Err(format!("core {core}: the device failed: {e}"));
                    shared.stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        // Acquire: pairs with the app thread's Release store.
        while !tx_drained.load(Ordering::Acquire) && Instant::now() < deadline && !app.is_finished() {
            let _ = ch.poll();
            std::thread::yield_now();
        }
        let stats = ch.stats();
        drop(ch);
        ch_done.store(true, Ordering::Release);
        let (mut report, inputs) =
            app.join().map_err(|_| format!("core {core}: the stack thread panicked"))??;
        report.channelizer = stats;
        result.map(|()| (report, inputs))
    })
}

/// Runs the server cores on `devices` (one per core) while `main` runs on this thread; stops them
/// when `main` returns. With `steering` (the NIC's Flow Director), a balancer thread runs the
/// accept queue's flow-group migration rounds.
fn serve<D, T>(
    devices: Vec<D>,
    pool: &Pool,
    setup: ServerSetup,
    steering: Option<&Mutex<dyn FlowSteering + Send + '_>>,
    main: impl FnOnce(&Shared) -> T,
) -> Result<(T, Vec<CoreReport>, AcceptReport), String>
where
    D: NetDevice + Send,
{
    let cores = devices.len();
    let (shared, inboxes) = Shared::new(cores, setup.backlog)?;
    let shared = Arc::new(shared);
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    // The channel matrix: channelizer q to consumer (core) c.
    let mut lanes: Vec<Vec<PacketTx>> = (0..cores).map(|_| Vec::with_capacity(cores)).collect();
    let mut inputs: Vec<Vec<PacketRx>> = (0..cores).map(|_| Vec::with_capacity(cores)).collect();
    for lanes_of_q in &mut lanes {
        for inputs_of_c in &mut inputs {
            let (tx, rx) = pool.packet_channel(CHANNEL).map_err(|e| e.to_string())?;
            lanes_of_q.push(tx);
            inputs_of_c.push(rx);
        }
    }
    let wirings: Vec<Wiring> = lanes
        .into_iter()
        .zip(inputs)
        .zip(inboxes)
        .map(|((lanes, inputs), inbox)| Wiring { lanes, inputs, inbox })
        .collect();
    let (out, cores) = std::thread::scope(|s| {
        let workers: Vec<_> = devices
            .into_iter()
            .zip(wirings)
            .enumerate()
            .map(|(core, (device, wiring))| {
                let (shared, registry) = (Arc::clone(&shared), Arc::clone(&registry));
                s.spawn(move || match setup.placement {
                    Placement::Same => core_same(core, device, pool, registry, setup, shared, wiring),
                    Placement::Split => core_split(core, device, pool, registry, setup, shared, wiring),
                })
            })
            .collect();
        if let Some(steering) = steering {
            let shared = Arc::clone(&shared);
            s.spawn(move || {
                while !shared.stopping() {
                    std::thread::sleep(BALANCE_EVERY);
                    // Safe to move any group: every connection, half-open ones included, is
                    // registered to the core whose stack has it, so its packets reach that core
                    // from whichever queue they arrive on; only new connections follow the group.
                    let _ = shared.queue.balance(&mut *lock(steering));
                }
            });
        }
        let out = main(&shared);
        shared.stop.store(true, Ordering::Relaxed);
        let cores: Vec<_> =
            workers.into_iter().map(|w| w.join().map_err(|_| "a core panicked".to_owned())).collect();
        (out, cores)
    });
    // Every channelizer is gone: dropping the inputs returns what they still hold.
    let cores = cores
        .into_iter()
        .map(|c| c.and_then(|c| c).map(|(report, _inputs)| report))
        .collect::<Result<Vec<_>, _>>()?;
    // Connections still queued when the server stopped belong to stacks that are gone.
    let _ = shared.queue.take_all();
    let stats = shared.queue.stats();
    let accept = AcceptReport {
        enqueued: stats.enqueued(),
        local: stats.cores.iter().map(|c| c.local_accepts).sum(),
        steals: stats.cores.iter().map(|c| c.remote_accepts).sum(),
        migrations: stats.migrations(),
        rejected: stats.rejected(),
    };
    Ok((out, cores, accept))
}

/// Waits until `stop` or `duration`, printing a progress line every second (TAP and PCI modes).
fn wait_serving(shared: &Shared, stop: &AtomicBool, duration: Option<Duration>, progress: bool) {
    let start = Instant::now();
    let mut next = start + Duration::from_secs(1);
    // Relaxed: a plain flag.
    while !stop.load(Ordering::Relaxed) && duration.is_none_or(|d| start.elapsed() < d) {
        std::thread::sleep(Duration::from_millis(20));
        if progress && Instant::now() >= next {
            next += Duration::from_secs(1);
            println!(
                "[{:6.1} s] {} connections served, {:.1} MiB echoed",
                start.elapsed().as_secs_f64(),
                shared.served(),
                mib(shared.bytes())
            );
        }
    }
}

// -----------------------------------------------------------------------------------------------
// The client.

/// xorshift64*: message sizes and contents.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Running,
    Draining,
    Done,
}

struct ClientConn {
    index: usize,
    id: StreamId,
    phase: Phase,
    rng: Rng,
    msg: Vec<u8>,
    sent: usize,
    echoed: usize,
    messages: u64,
    started: Instant,
}

struct ClientRun<'a> {
    options: &'a Options,
    start: Instant,
    latencies: Vec<Duration>,
    report: ClientReport,
    buf: Vec<u8>,
}

impl ClientRun<'_> {
    fn new_message(&self, c: &mut ClientConn, now: Instant) {
        let (min, max) = self.options.size;
        let span = u64::try_from(max - min + 1).unwrap_or(u64::MAX);
        let len = min + usize::try_from(c.rng.next() % span).unwrap_or(0);
        c.msg.clear();
        while c.msg.len() < len {
            let word = c.rng.next().to_le_bytes();
            let take = (len - c.msg.len()).min(8);
            c.msg.extend_from_slice(&word[..take]);
        }
        c.sent = 0;
        c.echoed = 0;
        c.started = now;
    }

    fn finished_sending(&self, c: &ClientConn) -> bool {
        match self.options.duration {
            Some(d) => self.start.elapsed() >= d,
            None => c.messages >= self.options.messages,
        }
    }

    /// Moves connection `c` forward; returns whether anything happened.
    fn step(
        &mut self,
        stack: &mut Stack,
        c: &mut ClientConn,
        now: Instant,
        stop: bool,
    ) -> Result<bool, String> {
        let fail = |stack: &Stack, c: &ClientConn, what: &str| {
            let why =
                stack.error(c.id).ok().flatten().map_or_else(|| what.to_owned(), |e| format!("{what}: {e}"));
            format!("connection {} (message {}): {why}", c.index, c.messages)
        };
        match c.phase {
            Phase::Done => Ok(false),
            Phase::Connecting => match stack.state(c.id) {
                Ok(State::Established) => {
                    c.phase = Phase::Running;
                    self.new_message(c, now);
                    Ok(true)
                }
                Ok(State::SynSent | State::SynReceived) => Ok(false),
                _ => Err(fail(stack, c, "the connection failed to open")),
            },
            Phase::Running => {
                let mut moved = false;
                if c.sent < c.msg.len() {
                    match stack.send(c.id, &c.msg[c.sent..]) {
                        Ok(n) => {
                            c.sent += n;
                            moved = true;
                        }
                        Err(StackError::WouldBlock) => {}
                        Err(e) => return Err(fail(stack, c, &format!("send failed ({e})"))),
                    }
                }
                loop {
                    match stack.recv(c.id, &mut self.buf) {
                        Ok(0) => return Err(fail(stack, c, "the server closed early")),
                        Ok(n) => {
                            moved = true;
                            let expected = c.msg.get(c.echoed..c.echoed + n).ok_or_else(|| {
                                fail(stack, c, &format!("{n} bytes came back beyond the {} sent", c.sent))
                            })?;
                            if let Some(at) = expected.iter().zip(&self.buf[..n]).position(|(a, b)| a != b) {
                                return Err(fail(
                                    stack,
                                    c,
                                    &format!(
                                        "byte {} of the message came back as {:#04x}, sent {:#04x}",
                                        c.echoed + at,
                                        self.buf[at],
                                        expected[at]
                                    ),
                                ));
                            }
                            c.echoed += n;
                        }
                        Err(StackError::WouldBlock) => break,
                        Err(e) => return Err(fail(stack, c, &format!("recv failed ({e})"))),
                    }
                }
                if c.echoed == c.msg.len() {
                    self.latencies.push(now - c.started);
                    c.messages += 1;
                    self.report.messages += 1;
                    self.report.bytes += c.msg.len() as u64;
                    if stop || self.finished_sending(c) {
                        stack.shutdown_write(c.id).map_err(|e| fail(stack, c, &e.to_string()))?;
                        c.phase = Phase::Draining;
                    } else {
                        self.new_message(c, now);
                    }
                    moved = true;
                }
                Ok(moved)
            }
            Phase::Draining => match stack.recv(c.id, &mut self.buf) {
                Ok(0) => {
                    stack.close(c.id).map_err(|e| fail(stack, c, &e.to_string()))?;
                    c.phase = Phase::Done;
                    self.report.completed += 1;
                    Ok(true)
                }
                Ok(n) => Err(fail(stack, c, &format!("{n} unexpected bytes after the last echo"))),
                Err(StackError::WouldBlock) => Ok(false),
                Err(e) => Err(fail(stack, c, &format!("waiting for the server's FIN ({e})"))),
            },
        }
    }
}

/// The in-process client: `options.conns` connections to `server` through `device`.
fn client<D: NetDevice>(
    device: &mut D,
    cache: &PoolCache,
    mac: EthernetAddress,
    server: SocketAddrV4,
    options: &Options,
    stop: &AtomicBool,
) -> Result<ClientReport, String> {
    let mut config = StackConfig::new(mac, Ipv4Cidr::new(CLIENT_IP, 24).expect("a /24"));
    tcp_tuning(&mut config);
    let start = Instant::now();
    let mut stack = Stack::new(config, start);
    let mut run = ClientRun {
        options,
        start,
        latencies: Vec::new(),
        report: ClientReport { conns: options.conns, ..ClientReport::default() },
        buf: vec![0; 64 * 1024],
    };
    let mut conns = Vec::with_capacity(options.conns);
    for index in 0..options.conns {
        let id = stack.connect(server).map_err(|e| format!("connect #{index}: {e}"))?;
        let rng = Rng::new(options.seed ^ (index as u64 + 1).wrapping_mul(0x1000_0000_01b3));
        conns.push(ClientConn {
            index,
            id,
            phase: Phase::Connecting,
            rng,
            msg: Vec::new(),
            sent: 0,
            echoed: 0,
            messages: 0,
            started: start,
        });
    }
    let mut last_progress = start;
    let mut next_line = start + Duration::from_secs(1);
    let mut done = 0;
    while done < conns.len() {
        let now = Instant::now();
        let polled = stack.poll(now, device, cache).map_err(|e| format!("the client's wire failed: {e}"))?;
        // Relaxed: a plain flag.
        let stopping = stop.load(Ordering::Relaxed);
        let mut moved = false;
        done = 0;
        for c in &mut conns {
            moved |= run.step(&mut stack, c, now, stopping)?;
            done += usize::from(c.phase == Phase::Done);
        }
        if moved {
            last_progress = now;
        } else if now - last_progress > STALL {
            let phases = |p| conns.iter().filter(|c| c.phase == p).count();
            return Err(format!(
                "no progress for {} s: {} connecting, {} running, {} draining, {} done; {} messages echoed",
                STALL.as_secs(),
                phases(Phase::Connecting),
                phases(Phase::Running),
                phases(Phase::Draining),
                done,
                run.report.messages
            ));
        }
        if options.progress && now >= next_line {
            next_line += Duration::from_secs(1);
            let secs = (now - start).as_secs_f64();
            println!(
                "[{secs:6.1} s] {done}/{} connections done, {} messages, {:.1} MiB echoed, {:.1} MiB/s",
                conns.len(),
                run.report.messages,
                mib(run.report.bytes),
                mib(run.report.bytes) / secs
            );
        }
        if polled.received == 0 && !moved {
            std::thread::yield_now();
        }
    }
    run.report.elapsed = start.elapsed();
    // A few more polls so the last ACKs leave.
    for _ in 0..20 {
        stack.poll(Instant::now(), device, cache).map_err(|e| format!("the client's wire failed: {e}"))?;
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut sorted = std::mem::take(&mut run.latencies);
    sorted.sort_unstable();
    run.report.latency = [
        percentile(&sorted, 500),
        percentile(&sorted, 900),
        percentile(&sorted, 990),
        sorted.last().copied().unwrap_or_default(),
    ];
    run.report.stack = *stack.stats();
    Ok(run.report)
}

// -----------------------------------------------------------------------------------------------
// The backends.

/// Runs the echo service as `options` say until it is done, `stop` is set (Ctrl-C), or its
/// duration is up; returns the summary.
///
/// # Errors
///
/// A message saying what failed (and what to do about it, where the device says).
pub fn run(options: &Options, stop: &AtomicBool) -> Result<Report, String> {
    match &options.backend {
        Backend::Model => run_model(options, stop),
        Backend::Tap { name, ip } => run_tap(options, name, *ip, stop),
        Backend::Xdp { iface, queue, mode, ip } => run_xdp(options, iface, *queue, *mode, *ip, stop),
        Backend::Pci { addr, ip } => run_pci(options, addr, *ip, stop),
    }
}

fn nic_line(nic: &mut Ixgbe) -> String {
    let s: NicStats = nic.stats();
    let queues = usize::from(nic.config().queues).min(s.queue_rx_packets.len());
    let per_queue: Vec<String> = (0..queues).map(|q| format!("q{q} {}", s.queue_rx_packets[q])).collect();
    format!(
        "nic {}: {} frames in ({}), {} out, {} missed, Flow Director {} matches, {} misses",
        nic.name(),
        s.rx_good_packets,
        per_queue.join(", "),
        s.tx_good_packets,
        s.missed_packets,
        s.fdir_matches,
        s.fdir_misses
    )
}

fn model_line(m: &SimStats) -> String {
    format!(
        "model: {} frames from the wire, {} into rings, {} dropped for lack of descriptors, {} sent, {} DMA \
         faults",
        m.rx_wire, m.rx_delivered, m.rx_dropped_no_desc, m.tx_sent, m.dma_faults
    )
}

fn audit(name: &str, pool: &Pool) -> Result<(String, Audit), String> {
    pool.check_leaks().map_err(|e| format!("{name}: {e}"))?;
    Ok((name.to_owned(), pool.audit()))
}

fn setup_line(options: &Options, what: &str, cores: usize) -> String {
    let placement = match options.placement {
        Placement::Same => "same",
        Placement::Split => "split",
    };
    format!("{what}, {cores} core(s), placement {placement}, port {}", options.port)
}

fn server_setup(options: &Options, mac: EthernetAddress, ip: Ipv4Cidr) -> ServerSetup {
    ServerSetup {
        mac,
        ip,
        port: options.port,
        placement: options.placement,
        backlog: options.backlog,
        slow_core: options.slow_core.map(usize::from),
    }
}

fn run_model(options: &Options, stop: &AtomicBool) -> Result<Report, String> {
    let e = |e: &dyn fmt::Display| e.to_string();
    let cores = usize::from(options.cores);
    let mut report = Report {
        setup: setup_line(options, "TCP echo on the 82599 model, in-process client", cores),
        ..Report::default()
    };
    if options.progress {
        let msgs = options.duration.map_or_else(
            || format!("{} messages each", options.messages),
            |d| format!("for {:.1} s", d.as_secs_f64()),
        );
        println!(
            "echo: {}; {} connections, {msgs}, sizes {}..={} bytes",
            report.setup, options.conns, options.size.0, options.size.1
        );
    }
    let wire_pool = Pool::builder(8192).hugepages(HugePages::Never).build().map_err(|x| e(&x))?;
    let (port, wire) = Pair::builder(&wire_pool).capacity(2048).build().map_err(|x| e(&x))?;
    let model = Model::new(SimConfig {
        wire: Wire::Device(Box::new(port), wire_pool.clone()),
        ..SimConfig::default()
    });
    let sim = model.spawn();
    let buffers = u32::try_from(4096 * (cores + 1)).map_err(|x| e(&x))?;
    let pool = Pool::builder(buffers).hugepages(HugePages::Prefer).build().map_err(|x| e(&x))?;
    let config = NicConfig { queues: options.cores, rx_ring: 512, tx_ring: 512, ..NicConfig::default() };
    let (nic, queues) =
        Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config).map_err(|x| format!("driver: {x}"))?;
    let mac = EthernetAddress(nic.mac().0);
    let server_ip = Ipv4Cidr::new(SERVER_IP, 24).expect("a /24");
    let setup = server_setup(options, mac, server_ip);
    let nic = Mutex::new(nic);
    let steering: Option<&Mutex<dyn FlowSteering + Send>> = options.balance.then_some(&nic);
    let client_mac = EthernetAddress(wire.info().mac.0);
    let server = SocketAddrV4::new(SERVER_IP, options.port);
    let mut pcap_line = None;
    let (client_report, cores_report, accept) = serve(queues, &pool, setup, steering, |_| {
        let cache = wire_pool.cache();
        match &options.pcap {
            Some(path) => {
                let mut dev = PcapWriter::create(wire, path)
                    .map_err(|x| format!("cannot create the pcap file {}: {x}", path.display()))?;
                let r = client(&mut dev, &cache, client_mac, server, options, stop);
                let _ = dev.flush();
                let s = dev.pcap_stats();
                pcap_line = Some(format!(
                    "pcap: {} frames recorded to {} ({} in, {} out)",
                    s.rx_frames + s.tx_frames,
                    path.display(),
                    s.rx_frames,
                    s.tx_frames
                ));
                r
            }
            None => {
                let mut dev = wire;
                client(&mut dev, &cache, client_mac, server, options, stop)
            }
        }
    })?;
    report.client = Some(client_report?);
    report.cores = cores_report;
    report.accept = accept;
    sim.stop();
    let mut nic = nic.into_inner().unwrap_or_else(PoisonError::into_inner);
    report.devices.push(nic_line(&mut nic));
    report.devices.push(model_line(&model.stats()));
    report.devices.extend(pcap_line);
    drop(nic);
    drop(model);
    report.buffers.push(audit("driver pool", &pool)?);
    report.buffers.push(audit("wire pool", &wire_pool)?);
    Ok(report)
}

fn run_tap(options: &Options, name: &str, ip: Ipv4Cidr, stop: &AtomicBool) -> Result<Report, String> {
    let tap = Tap::open(name).map_err(|e| format!("cannot open the TAP interface {name:?}: {e}"))?;
    let mac = EthernetAddress(tap.info().mac.0);
    let mut report = Report {
        setup: setup_line(options, &format!("TCP echo on TAP {name} at {ip}, the kernel is the client"), 1),
        ..Report::default()
    };
    if options.progress {
        println!("echo: {} (our MAC {}); Ctrl-C stops", report.setup, tap.info().mac);
    }
    let pool = Pool::builder(4096).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
    let setup = server_setup(options, mac, ip);
    let wait = |shared: &Shared| wait_serving(shared, stop, options.duration, options.progress);
    let (cores, accept) = match &options.pcap {
        Some(path) => {
            let dev = PcapWriter::create(tap, path)
                .map_err(|e| format!("cannot create the pcap file {}: {e}", path.display()))?;
            let ((), cores, accept) = serve(vec![dev], &pool, setup, None, wait)?;
            report.devices.push(format!("pcap: recorded to {}", path.display()));
            (cores, accept)
        }
        None => {
            let ((), cores, accept) = serve(vec![tap], &pool, setup, None, wait)?;
            (cores, accept)
        }
    };
    report.cores = cores;
    report.accept = accept;
    report.buffers.push(audit("pool", &pool)?);
    Ok(report)
}

fn xdp_mode_name(mode: XdpMode) -> &'static str {
    match mode {
        XdpMode::Generic => "generic",
        XdpMode::Native => "native",
        XdpMode::Auto => "auto",
    }
}

fn run_xdp(
    options: &Options,
    iface: &str,
    queue: u32,
    mode: XdpMode,
    ip: Ipv4Cidr,
    stop: &AtomicBool,
) -> Result<Report, String> {
    // Fill and RX rings of 1024 each, TX and completion rings of 1024, the channels: 8192 is ample.
    let pool = Pool::builder(8192).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
    let dev = AfXdp::builder(iface).queue(queue).mode(mode).open(&pool).map_err(|e| {
        let hint = match e {
            XdpError::NativeUnsupported { .. } => "; on the command line: --xdp-mode generic (or auto)",
            _ => "",
        };
        format!("cannot serve {iface}:{queue} through AF_XDP ({} mode): {e}{hint}", xdp_mode_name(mode))
    })?;
    let mac = EthernetAddress(dev.info().mac.0);
    let copy = if dev.is_zero_copy() { "zero-copy" } else { "copy mode" };
    let mut report = Report {
        setup: setup_line(
            options,
            &format!(
                "TCP echo over AF_XDP on {iface} queue {queue} ({} XDP, {copy}) at {ip}, the kernel is the client",
                xdp_mode_name(dev.mode())
            ),
            1,
        ),
        ..Report::default()
    };
    if options.progress {
        println!("echo: {} (our MAC {}); Ctrl-C stops", report.setup, dev.info().mac);
    }
    let setup = server_setup(options, mac, ip);
    let wait = |shared: &Shared| wait_serving(shared, stop, options.duration, options.progress);
    let (cores, accept) = match &options.pcap {
        Some(path) => {
            let dev = PcapWriter::create(dev, path)
                .map_err(|e| format!("cannot create the pcap file {}: {e}", path.display()))?;
            let ((), cores, accept) = serve(vec![dev], &pool, setup, None, wait)?;
            report.devices.push(format!("pcap: recorded to {}", path.display()));
            (cores, accept)
        }
        None => {
            let ((), cores, accept) = serve(vec![dev], &pool, setup, None, wait)?;
            (cores, accept)
        }
    };
    report.cores = cores;
    report.accept = accept;
    report.buffers.push(audit("pool", &pool)?);
    Ok(report)
}

fn run_pci(options: &Options, addr: &str, ip: Ipv4Cidr, stop: &AtomicBool) -> Result<Report, String> {
    let device =
        ixgbe_vfio::platform::open(addr).map_err(|e| format!("cannot open the 82599 at {addr}: {e}"))?;
    let cores = usize::from(options.cores);
    let pool = Pool::builder(u32::try_from(4096 * (cores + 1)).map_err(|e| e.to_string())?)
        .hugepages(HugePages::Prefer)
        .build()
        .map_err(|e| e.to_string())?;
    let config = NicConfig { queues: options.cores, ..NicConfig::default() };
    let (nic, queues) = Ixgbe::init(addr, device.bar0(), device.dma(), &pool, config)
        .map_err(|e| format!("cannot bring up the 82599 at {addr}: {e}"))?;
    let mut report = Report {
        setup: setup_line(
            options,
            &format!("TCP echo on the 82599 at {addr} ({}), {ip}", device.variant()),
            cores,
        ),
        ..Report::default()
    };
    if options.progress {
        println!("echo: {} (MAC {}, {:?}); Ctrl-C stops", report.setup, nic.mac(), nic.link());
    }
    let mac = EthernetAddress(nic.mac().0);
    let setup = server_setup(options, mac, ip);
    let wait = |shared: &Shared| wait_serving(shared, stop, options.duration, options.progress);
    let nic = Mutex::new(nic);
    let steering: Option<&Mutex<dyn FlowSteering + Send>> = options.balance.then_some(&nic);
    let (cores_report, accept) = match &options.pcap {
        Some(path) => {
            let devices = queues
                .into_iter()
                .map(|q| {
                    let file = format!("{}.q{}", path.display(), q.index());
                    PcapWriter::create(q, &file)
                        .map_err(|e| format!("cannot create the pcap file {file}: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let ((), c, a) = serve(devices, &pool, setup, steering, wait)?;
            (c, a)
        }
        None => {
            let ((), c, a) = serve(queues, &pool, setup, steering, wait)?;
            (c, a)
        }
    };
    report.cores = cores_report;
    report.accept = accept;
    let mut nic = nic.into_inner().unwrap_or_else(PoisonError::into_inner);
    report.devices.push(nic_line(&mut nic));
    drop(nic);
    drop(device);
    report.buffers.push(audit("driver pool", &pool)?);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Options>, String> {
        Options::parse(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn options_parse() {
        let o = parse(&["--cores", "3", "--size", "10..20", "--placement", "split", "--conns", "5"])
            .unwrap()
            .unwrap();
        assert_eq!((o.cores, o.size, o.placement, o.conns), (3, (10, 20), Placement::Split, 5));
        let o = parse(&["--tap", "tap0", "--ip", "10.1.0.2/16"]).unwrap().unwrap();
        assert_eq!(o.backend, Backend::Tap { name: "tap0".into(), ip: cidr("10.1.0.2/16").unwrap() });
        assert!(parse(&["--size", "20..10"]).is_err());
        assert!(parse(&["--ip", "10.0.0.2"]).is_err());
        assert!(parse(&["--tap", "a", "--pci", "0000:01:00.0"]).is_err());
        let o = parse(&["--xdp", "veth0:3", "--xdp-mode", "native", "--ip", "10.1.0.2/16"]).unwrap().unwrap();
        let ip = cidr("10.1.0.2/16").unwrap();
        assert_eq!(o.backend, Backend::Xdp { iface: "veth0".into(), queue: 3, mode: XdpMode::Native, ip });
        let o = parse(&["--xdp", "veth0"]).unwrap().unwrap();
        assert!(matches!(o.backend, Backend::Xdp { queue: 0, mode: XdpMode::Auto, .. }), "{o:?}");
        assert!(parse(&["--xdp", "veth0:x"]).is_err());
        assert!(parse(&["--xdp", "veth0", "--xdp-mode", "fast"]).is_err());
        assert!(parse(&["--xdp-mode", "generic"]).is_err());
        assert!(parse(&["--xdp", "a", "--tap", "b"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        assert_eq!(parse(&["--help"]).unwrap(), None);
    }

    #[test]
    fn percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&v, 500), Duration::from_micros(50));
        assert_eq!(percentile(&v, 990), Duration::from_micros(99));
        assert_eq!(percentile(&[], 500), Duration::ZERO);
    }

    #[test]
    fn model_echo_small_run() {
        let options = Options {
            cores: 2,
            conns: 8,
            messages: 5,
            size: (1, 3000),
            progress: false,
            ..Options::default()
        };
        let report = run(&options, &AtomicBool::new(false)).unwrap();
        let client = report.client.as_ref().unwrap();
        assert_eq!((client.completed, client.messages), (8, 40));
        assert_eq!(report.bytes_echoed(), client.bytes);
        assert_eq!(report.accept.enqueued, 8);
        assert_eq!(report.cores.iter().map(|c| c.served).sum::<u64>(), 8);
    }

    #[test]
    fn model_echo_stolen_connections_move_to_the_stealer() {
        let options = Options {
            cores: 2,
            conns: 128,
            messages: 5,
            size: (1, 3000),
            backlog: 32,
            slow_core: Some(1),
            progress: false,
            ..Options::default()
        };
        let report = run(&options, &AtomicBool::new(false)).unwrap();
        let client = report.client.as_ref().unwrap();
        assert_eq!((client.completed, client.messages), (128, 640), "{report}");
        assert_eq!(report.bytes_echoed(), client.bytes);
        assert!(report.accept.steals > 0, "the slow core was stolen from: {report}");
        let stolen: u64 = report.cores.iter().map(|c| c.stolen).sum();
        assert_eq!(stolen, report.accept.steals, "every steal moved its connection: {report}");
        assert!(report.cores.iter().all(|c| c.failed == 0 && c.stack.rst_sent == 0), "{report}");
        assert_eq!(client.stack.rst_sent, 0);
    }
}
