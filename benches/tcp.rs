//! TCP end to end (issue 4, §6): tcp-lib against smoltcp and the kernel, **in the same run**.
//!
//! * **bulk**: one connection moves `TCP_BENCH_BYTES` one way between two endpoints, one thread each.
//!   tcp-lib and smoltcp each run two stacks on the two ends of a `netchannel::dev::Pair` (the same
//!   link model for both: frames cross as pool buffers, MTU 1500; smoltcp's device hands it the
//!   received pool buffer in place and lets it write each outgoing frame straight into a fresh pool
//!   buffer, so neither stack pays a device copy). On the Pair **both** stacks skip checksums, as the
//!   kernel does on loopback (a memory link cannot corrupt a frame): tcp-lib with
//!   `Config::checksum = Trust` and `tx_checksum = false`, smoltcp with `ChecksumCapabilities` of
//!   `Checksum::None` for IPv4, TCP and ICMP; `TCP_BENCH_CSUM=verify` makes both compute and verify
//!   them instead (the TAP runs always do). The kernel runs `std::net` over loopback
//!   (`kernel-lo`: lo's MTU 65536, TSO/GSO, so a 64 KiB super-packet is one trip through the stack),
//!   and, as root, also over a loopback in a private namespace set to MTU 1500 (`kernel-lo-1500`;
//!   still TSO/GSO, so the kernel still moves ~64 KiB per trip; `gso_max_segs 1` would force one
//!   segment per packet but throttles the kernel ~15x here, far more than per-packet cost explains,
//!   so it is no fair anchor and is not run).
//! * **txn**: transactions, one after another: connect, 64-byte request, 64-byte response, the server
//!   closes, the client reads the end of stream and closes (`TCP_BENCH_TXNS` of them). Nagle off
//!   everywhere. Run once per stack buffer size of `TCP_BENCH_TXN_BUFS` (tcp-lib allocates each
//!   connection, its buffers growing on demand up to that size; smoltcp keeps a few sockets, their
//!   buffers allocated in full, and reuses them).
//! * **tap** (root only; skipped with the reason otherwise): the stack on a TAP in a private namespace,
//!   the kernel as the peer over `std::net`, in the two modes of smoltcp's `examples/benchmark.rs`:
//!   `reader` (the kernel reads what the stack sends) and `writer` (the kernel writes, the stack
//!   receives).
//!
//! Every thread's CPU time is read with `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` (user + system,
//! so a kernel thread is charged the protocol work done in its system calls); the tables report
//! wall-clock rates and rates **per CPU-second** (units / the sum of the participating threads' CPU
//! time). The sides are pinned to CPU 0 and CPU 1. By default an endpoint that found nothing to do
//! sleeps until a frame arrives or its next timer (`Pair::wait` / `Tap::wait_readable`, at most
//! 1 ms), as the kernel's blocking sockets do; `TCP_BENCH_POLL=busy` makes them spin instead.
//! Each round runs every contender once (in a rotated order); the summary gives medians over the
//! rounds and the median of the per-round ratios (paired).
//!
//! Buffers: 256 KiB send and receive buffers for tcp-lib and smoltcp (`TCP_BENCH_BUF`; window
//! scaling on for both); the kernel keeps its defaults (autotuning). Applications write and read in
//! 64 KiB chunks everywhere.
//!
//! Environment: `TCP_BENCH_ROUNDS` (5), `TCP_BENCH_BYTES` (64M), `TCP_BENCH_TXNS` (5000),
//! `TCP_BENCH_TXN_BUFS` (`256K,16K`),
//! `TCP_BENCH_TAP_BYTES` (32M), `TCP_BENCH_BUF` (256K), `TCP_BENCH_POLL` (`wait` | `busy`),
//! `TCP_BENCH_CSUM` (`trust` | `verify`: checksums on the in-memory Pair, for both stacks),
//! `TCP_BENCH_ONLY` (comma list of `bulk`, `txn`, `tap`), `TCP_BENCH_ICOUNT=1` (also count
//! instructions per byte of the in-memory bulk transfer under callgrind, both threads together).
//!
//! `tcp --child bulk|txn <tcp-lib|smoltcp|kernel-lo> <bytes|txns>` runs one case alone and prints
//! its sample (for `valgrind`/`perf`).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

mod common;
#[path = "common/netns.rs"]
mod netns;

use netchannel::dev::{NetDevice, PacketBatch, Pair, Tap};
use netchannel::pool::{HugePages, Packet, Pool, PoolCache};
use smoltcp::iface::{Config as SmolConfig, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::phy::{Checksum, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp as stcp;
use tcp_lib::stack::{Config, Error as StackError, Stack, StreamId};
use tcp_lib::tcp::State;
use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const TAP_KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 89, 0, 1);
const TAP_STACK_IP: Ipv4Addr = Ipv4Addr::new(10, 89, 0, 2);
const TAP_NAME: &str = "tcpbench0";
const PORT: u16 = 5001;
const CHUNK: usize = 64 * 1024;
const MSG: usize = 64;
/// The longest an idle endpoint sleeps before it looks again.
const MAX_SLEEP: Duration = Duration::from_millis(1);
/// A run that has not finished by then failed.
const DEADLINE: Duration = Duration::from_secs(120);
/// Pool buffers per link (2 KiB each).
const POOL_BUFFERS: u32 = 16 * 1024;

// ---------------------------------------------------------------------------------------------
// Settings.

#[derive(Clone, Debug)]
struct Settings {
    rounds: usize,
    bytes: u64,
    txns: u64,
    /// Stack buffer sizes the transaction workload runs with (one table each).
    txn_bufs: Vec<usize>,
    tap_bytes: u64,
    buf: usize,
    busy: bool,
}

/// A byte count with an optional `K`/`M`/`G` suffix.
fn parse_bytes(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mul) = match v.as_bytes().last() {
        Some(b'K' | b'k') => (&v[..v.len() - 1], 1 << 10),
        Some(b'M' | b'm') => (&v[..v.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mul)
}

/// A byte count from `var`, or `default`.
fn env_bytes(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().and_then(|v| parse_bytes(&v)).unwrap_or(default)
}

fn env_usize(var: &str, default: usize) -> usize {
    usize::try_from(env_bytes(var, default as u64)).unwrap_or(default)
}

impl Settings {
    fn from_env() -> Self {
        Self {
            rounds: env_usize("TCP_BENCH_ROUNDS", 5).max(1),
            bytes: env_bytes("TCP_BENCH_BYTES", 64 << 20),
            txns: env_bytes("TCP_BENCH_TXNS", 5000),
            txn_bufs: std::env::var("TCP_BENCH_TXN_BUFS")
                .unwrap_or_else(|_| "256K,16K".to_owned())
                .split(',')
                .filter_map(|v| parse_bytes(v).and_then(|n| usize::try_from(n).ok()))
                .collect(),
            tap_bytes: env_bytes("TCP_BENCH_TAP_BYTES", 32 << 20),
            buf: env_usize("TCP_BENCH_BUF", 256 << 10),
            busy: std::env::var("TCP_BENCH_POLL").is_ok_and(|v| v == "busy"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Measuring.

/// This thread's CPU time (user + system).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), u32::try_from(ts.tv_nsec).unwrap_or(0))
}

/// What one side of a run measured: its CPU time over the run, and when its timed part started and
/// ended.
#[derive(Clone, Copy, Debug)]
struct Side {
    cpu: Duration,
    start: Instant,
    end: Instant,
}

/// Starts a side's clocks.
struct Clock {
    cpu: Duration,
    start: Instant,
}

impl Clock {
    fn start() -> Self {
        Self { cpu: thread_cpu(), start: Instant::now() }
    }

    fn stop(self) -> Side {
        Side { cpu: thread_cpu().saturating_sub(self.cpu), start: self.start, end: Instant::now() }
    }
}

/// One run of one contender.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Bytes or transactions.
    units: u64,
    wall: Duration,
    /// CPU time of each side (sender/client/stack, receiver/server/kernel).
    cpu: [Duration; 2],
}

impl Sample {
    fn per_sec(&self) -> f64 {
        self.units as f64 / self.wall.as_secs_f64()
    }

    fn cpu_total(&self) -> f64 {
        self.cpu[0].as_secs_f64() + self.cpu[1].as_secs_f64()
    }

    fn per_cpu_sec(&self) -> f64 {
        self.units as f64 / self.cpu_total()
    }
}

/// Runs `a` and `b` on two threads pinned to CPU 0 and 1; each gets a barrier to wait at once set
/// up (so set-up is not timed).
fn two_threads<A, B>(a: A, b: B) -> Result<(Side, Side), String>
where
    A: FnOnce(&Barrier) -> Result<Side, String> + Send,
    B: FnOnce(&Barrier) -> Result<Side, String> + Send,
{
    let barrier = Barrier::new(2);
    thread::scope(|s| {
        let ha = s.spawn(|| {
            common::pin_to_cpu(0);
            a(&barrier)
        });
        let hb = s.spawn(|| {
            common::pin_to_cpu(1);
            b(&barrier)
        });
        let ra = ha.join().map_err(|_| "side A panicked".to_owned())?;
        let rb = hb.join().map_err(|_| "side B panicked".to_owned())?;
        Ok((ra?, rb?))
    })
}

// ---------------------------------------------------------------------------------------------
// Devices: waiting, and smoltcp's `Device` over a netchannel device.

/// A device an idle endpoint can sleep on until a frame arrives.
trait Sleep: NetDevice {
    /// The link cannot corrupt a frame (it is memory), so both stacks may skip checksums on it.
    const IN_MEMORY: bool = false;
    fn sleep(&mut self, timeout: Duration);
}

/// Whether stacks on an in-memory link skip checksums (`TCP_BENCH_CSUM`, `trust` by default;
/// `verify` makes both stacks compute and verify them as on a real link).
fn trust_checksums<D: Sleep>() -> bool {
    D::IN_MEMORY && std::env::var("TCP_BENCH_CSUM").map_or(true, |v| v != "verify")
}

impl Sleep for Pair {
    const IN_MEMORY: bool = true;

    fn sleep(&mut self, timeout: Duration) {
        let _ = self.wait(Some(timeout));
    }
}

impl Sleep for Tap {
    fn sleep(&mut self, timeout: Duration) {
        let _ = self.wait_readable(Some(timeout));
    }
}

/// smoltcp's [`Device`] over a netchannel device: received frames are handed to smoltcp in their pool
/// buffers, and each frame smoltcp transmits is written into a fresh pool buffer and sent in bursts.
struct SmolDev<'c, D> {
    dev: D,
    cache: &'c PoolCache,
    rx: VecDeque<Packet<'c>>,
    scratch: PacketBatch<'c>,
    tx: PacketBatch<'c>,
    /// Frames moved, either way (progress).
    moved: u64,
    /// No checksums computed or verified ([`trust_checksums`]).
    trust: bool,
}

impl<'c, D: NetDevice> SmolDev<'c, D> {
    fn new(dev: D, cache: &'c PoolCache) -> Self {
        Self {
            dev,
            cache,
            rx: VecDeque::with_capacity(64),
            scratch: PacketBatch::with_capacity(32),
            tx: PacketBatch::with_capacity(32),
            moved: 0,
            trust: false,
        }
    }

    /// Sends what smoltcp queued; what the device refuses is dropped (TCP retransmits).
    fn flush(&mut self) {
        if !self.tx.is_empty() {
            let _ = self.dev.tx_burst(0, &mut self.tx);
            self.tx.clear();
        }
    }
}

struct SmolRx<'c>(Packet<'c>);

struct SmolTx<'a, 'c, D> {
    dev: &'a mut D,
    cache: &'c PoolCache,
    tx: &'a mut PacketBatch<'c>,
    moved: &'a mut u64,
}

impl smoltcp::phy::RxToken for SmolRx<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0.data())
    }
}

impl<D: NetDevice> smoltcp::phy::TxToken for SmolTx<'_, '_, D> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let Some(mut packet) = self.cache.alloc().filter(|p| p.tailroom() >= len) else {
            // No buffer: the frame is built and dropped, as a full ring would.
            return f(&mut vec![0; len]);
        };
        if packet.set_len(len).is_err() {
            return f(&mut vec![0; len]);
        }
        let r = f(packet.data_mut());
        *self.moved += 1;
        if self.tx.push(packet).is_ok() && self.tx.is_full() {
            let _ = self.dev.tx_burst(0, self.tx);
            self.tx.clear();
        }
        r
    }
}

impl<'c, D: NetDevice> Device for SmolDev<'c, D> {
    type RxToken<'a>
        = SmolRx<'c>
    where
        Self: 'a;
    type TxToken<'a>
        = SmolTx<'a, 'c, D>
    where
        Self: 'a;

    fn receive(&mut self, _: smoltcp::time::Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if self.rx.is_empty() {
            let _ = self.dev.rx_burst(0, self.cache, &mut self.scratch);
            self.rx.extend(self.scratch.drain());
        }
        let packet = self.rx.pop_front()?;
        self.moved += 1;
        Some((
            SmolRx(packet),
            SmolTx { dev: &mut self.dev, cache: self.cache, tx: &mut self.tx, moved: &mut self.moved },
        ))
    }

    fn transmit(&mut self, _: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(SmolTx { dev: &mut self.dev, cache: self.cache, tx: &mut self.tx, moved: &mut self.moved })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = 1514;
        if self.trust {
            // As tcp-lib's `checksum: Trust` and `tx_checksum: false`: neither filled nor checked.
            caps.checksum.ipv4 = Checksum::None;
            caps.checksum.tcp = Checksum::None;
            caps.checksum.icmpv4 = Checksum::None;
        }
        caps
    }
}

// ---------------------------------------------------------------------------------------------
// The two stacks behind one driver interface.

/// An endpoint: a stack on a device, driven by one thread.
trait Endpoint {
    type Sock: Copy;
    /// Polls the device and the stack once; whether anything moved.
    fn poll(&mut self) -> bool;
    /// Sleeps until a frame arrives or the next timer (at most [`MAX_SLEEP`]); spins when busy.
    fn idle(&mut self, busy: bool);
    fn listen(&mut self, port: u16) -> Result<(), String>;
    /// An accepted connection, if one is ready.
    fn accept(&mut self) -> Option<Self::Sock>;
    fn connect(&mut self, remote: SocketAddrV4) -> Result<Self::Sock, String>;
    fn established(&self, s: Self::Sock) -> bool;
    /// Bytes queued (0 when there is no room now).
    fn send(&mut self, s: Self::Sock, data: &[u8]) -> Result<usize, String>;
    /// Bytes read; `None` when nothing is there now, `Some(0)` at the end of the stream.
    fn recv(&mut self, s: Self::Sock, buf: &mut [u8]) -> Result<Option<usize>, String>;
    fn close(&mut self, s: Self::Sock);
    /// Whether everything sent on `s` was acknowledged.
    fn all_acked(&self, s: Self::Sock) -> bool;
}

/// Sleeps on `dev` for at most [`MAX_SLEEP`], or less when a timer is due sooner.
fn sleep_on(dev: &mut impl Sleep, timer: Option<Duration>) {
    let t = timer.map_or(MAX_SLEEP, |t| t.min(MAX_SLEEP));
    if !t.is_zero() {
        dev.sleep(t);
    }
}

struct LibEndpoint<'c, D> {
    stack: Stack,
    dev: D,
    cache: &'c PoolCache,
    listener: Option<tcp_lib::stack::ListenerId>,
    /// `Some`: the application reads in place (`Stack::poll_with`).
    in_place: Option<InPlace>,
}

/// An application reading in place: its sink copies each payload, where it lies in the received
/// pool buffer, into the application's own 64 KiB buffer (cyclically), as `read(2)` would, and
/// counts it; `recv` then reports those bytes before reading what the stack buffered. The copy from
/// the frame into the stack's receive ring is what this saves.
struct InPlace {
    app: Vec<u8>,
    at: usize,
    placed: usize,
}

impl InPlace {
    fn new() -> Self {
        Self { app: vec![0; CHUNK], at: 0, placed: 0 }
    }

    fn take(&mut self, mut data: &[u8]) -> usize {
        let n = data.len();
        while !data.is_empty() {
            let k = data.len().min(self.app.len() - self.at);
            self.app[self.at..self.at + k].copy_from_slice(&data[..k]);
            self.at = (self.at + k) % self.app.len();
            data = &data[k..];
        }
        self.placed += n;
        n
    }
}

fn lib_config(mac: [u8; 6], ip: Ipv4Addr, buf: usize, trust: bool) -> Config {
    let mut c = Config::new(EthernetAddress(mac), Ipv4Cidr::new(ip, 24).expect("a /24"));
    if trust {
        c.checksum = tcp_lib::wire::ChecksumPolicy::Trust;
        c.tx_checksum = false;
    }
    c.tcp.send_buffer = buf;
    c.tcp.recv_buffer = buf;
    c.tcp.nodelay = true;
    c.tcp.min_rto = Duration::from_millis(200);
    c
}

impl<'c, D: Sleep> LibEndpoint<'c, D> {
    fn new(dev: D, cache: &'c PoolCache, ip: Ipv4Addr, buf: usize) -> Self {
        let config = lib_config(dev.info().mac.0, ip, buf, trust_checksums::<D>());
        let stack = Stack::new(config, Instant::now());
        Self { stack, dev, cache, listener: None, in_place: None }
    }
}

fn lib_err(e: StackError) -> String {
    format!("tcp-lib: {e}")
}

impl<D: Sleep> Endpoint for LibEndpoint<'_, D> {
    type Sock = StreamId;

    fn poll(&mut self) -> bool {
        let polled = match self.in_place.as_mut() {
            Some(app) => {
                self.stack.poll_with(Instant::now(), &mut self.dev, self.cache, |_, data| app.take(data))
            }
            None => self.stack.poll(Instant::now(), &mut self.dev, self.cache),
        };
        match polled {
            Ok(ps) => ps.received + ps.transmitted > 0,
            Err(_) => false,
        }
    }

    fn idle(&mut self, busy: bool) {
        if busy {
            return;
        }
        let now = Instant::now();
        let timer = self.stack.poll_timeout().map(|t| t.saturating_duration_since(now));
        sleep_on(&mut self.dev, timer);
    }

    fn listen(&mut self, port: u16) -> Result<(), String> {
        self.listener = Some(self.stack.listen(port).map_err(lib_err)?);
        Ok(())
    }

    fn accept(&mut self) -> Option<StreamId> {
        self.stack.accept(self.listener?)
    }

    fn connect(&mut self, remote: SocketAddrV4) -> Result<StreamId, String> {
        self.stack.connect(remote).map_err(lib_err)
    }

    fn established(&self, s: StreamId) -> bool {
        self.stack.state(s).is_ok_and(|st| st == State::Established)
    }

    fn send(&mut self, s: StreamId, data: &[u8]) -> Result<usize, String> {
        match self.stack.send(s, data) {
            Ok(n) => Ok(n),
            Err(StackError::WouldBlock) => Ok(0),
            Err(e) => Err(lib_err(e)),
        }
    }

    fn recv(&mut self, s: StreamId, buf: &mut [u8]) -> Result<Option<usize>, String> {
        if let Some(app) = self.in_place.as_mut()
            && app.placed > 0
        {
            let n = app.placed.min(buf.len());
            app.placed -= n;
            return Ok(Some(n));
        }
        match self.stack.recv(s, buf) {
            Ok(n) => Ok(Some(n)),
            Err(StackError::WouldBlock) => Ok(None),
            Err(e) => Err(lib_err(e)),
        }
    }

    fn close(&mut self, s: StreamId) {
        let _ = self.stack.close(s);
    }

    fn all_acked(&self, s: StreamId) -> bool {
        self.stack.queues(s).is_ok_and(|(send, _)| send == 0)
    }
}

struct SmolEndpoint<'c, D> {
    iface: Interface,
    dev: SmolDev<'c, D>,
    sockets: SocketSet<'static>,
    buf: usize,
    /// Listening sockets (re-armed once they finish) and accepted ones not yet handed out.
    listeners: Vec<SocketHandle>,
    handed: Vec<bool>,
    port: u16,
    /// Sockets for `connect`, reused once closed, and the next local port.
    clients: Vec<SocketHandle>,
    next_port: u16,
}

impl<'c, D: Sleep> SmolEndpoint<'c, D> {
    fn new(dev: D, cache: &'c PoolCache, ip: Ipv4Addr, buf: usize) -> Self {
        let mac = dev.info().mac.0;
        let mut dev = SmolDev::new(dev, cache);
        dev.trust = trust_checksums::<D>();
        let mut config =
            SmolConfig::new(smoltcp::wire::HardwareAddress::Ethernet(smoltcp::wire::EthernetAddress(mac)));
        config.random_seed = u64::from(ip.to_bits()) ^ 0x5eed;
        let mut iface = Interface::new(config, &mut dev, smoltcp::time::Instant::now());
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(smoltcp::wire::IpCidr::new(smoltcp::wire::IpAddress::Ipv4(ip), 24));
        });
        Self {
            iface,
            dev,
            sockets: SocketSet::new(Vec::new()),
            buf,
            listeners: Vec::new(),
            handed: Vec::new(),
            port: 0,
            clients: Vec::new(),
            next_port: 49_152,
        }
    }

    fn socket(&self) -> stcp::Socket<'static> {
        let mut s = stcp::Socket::new(
            stcp::SocketBuffer::new(vec![0; self.buf]),
            stcp::SocketBuffer::new(vec![0; self.buf]),
        );
        s.set_nagle_enabled(false);
        s
    }

    fn tcp(&self, h: SocketHandle) -> &stcp::Socket<'static> {
        self.sockets.get::<stcp::Socket<'static>>(h)
    }

    fn tcp_mut(&mut self, h: SocketHandle) -> &mut stcp::Socket<'static> {
        self.sockets.get_mut::<stcp::Socket<'static>>(h)
    }
}

/// Listening sockets a smoltcp server keeps (smoltcp has no accept queue: a socket listens, becomes
/// the connection, and listens again once it is closed).
const SMOL_LISTENERS: usize = 8;
/// Client sockets a smoltcp client rotates through.
const SMOL_CLIENTS: usize = 8;

impl<D: Sleep> Endpoint for SmolEndpoint<'_, D> {
    type Sock = SocketHandle;

    fn poll(&mut self) -> bool {
        let before = self.dev.moved;
        let r = self.iface.poll(smoltcp::time::Instant::now(), &mut self.dev, &mut self.sockets);
        self.dev.flush();
        // Re-arm listeners that finished (closed, or in TIME-WAIT, which smoltcp gives up on reuse).
        for i in 0..self.listeners.len() {
            let h = self.listeners[i];
            let port = self.port;
            let s = self.tcp_mut(h);
            if !s.is_open() {
                let _ = s.listen(port);
                self.handed[i] = false;
            }
        }
        self.dev.moved != before || r == PollResult::SocketStateChanged
    }

    fn idle(&mut self, busy: bool) {
        if busy {
            return;
        }
        let now = smoltcp::time::Instant::now();
        let timer =
            self.iface.poll_delay(now, &self.sockets).map(|d| Duration::from_micros(d.total_micros()));
        sleep_on(&mut self.dev.dev, timer);
    }

    fn listen(&mut self, port: u16) -> Result<(), String> {
        self.port = port;
        for _ in 0..SMOL_LISTENERS {
            let mut s = self.socket();
            s.listen(port).map_err(|e| format!("smoltcp listen: {e}"))?;
            self.listeners.push(self.sockets.add(s));
            self.handed.push(false);
        }
        Ok(())
    }

    fn accept(&mut self) -> Option<SocketHandle> {
        for i in 0..self.listeners.len() {
            let h = self.listeners[i];
            if !self.handed[i] && self.tcp(h).may_send() {
                self.handed[i] = true;
                return Some(h);
            }
        }
        None
    }

    fn connect(&mut self, remote: SocketAddrV4) -> Result<SocketHandle, String> {
        let h = if let Some(&h) = self.clients.iter().find(|&&h| !self.tcp(h).is_open()) {
            h
        } else if self.clients.len() < SMOL_CLIENTS {
            let s = self.socket();
            let h = self.sockets.add(s);
            self.clients.push(h);
            h
        } else {
            return Err("smoltcp: every client socket is still open".to_owned());
        };
        let port = self.next_port;
        self.next_port = if port == u16::MAX { 49_152 } else { port + 1 };
        let remote =
            smoltcp::wire::IpEndpoint::new(smoltcp::wire::IpAddress::Ipv4(*remote.ip()), remote.port());
        let cx = self.iface.context();
        let s = self.sockets.get_mut::<stcp::Socket<'static>>(h);
        s.connect(cx, remote, port).map_err(|e| format!("smoltcp connect: {e}"))?;
        Ok(h)
    }

    fn established(&self, s: SocketHandle) -> bool {
        self.tcp(s).state() == stcp::State::Established
    }

    fn send(&mut self, s: SocketHandle, data: &[u8]) -> Result<usize, String> {
        let s = self.tcp_mut(s);
        if !s.may_send() {
            return Ok(0);
        }
        s.send_slice(data).map_err(|e| format!("smoltcp send: {e}"))
    }

    fn recv(&mut self, s: SocketHandle, buf: &mut [u8]) -> Result<Option<usize>, String> {
        let s = self.tcp_mut(s);
        match s.recv_slice(buf) {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(n)),
            Err(stcp::RecvError::Finished) => Ok(Some(0)),
            // Not synchronized yet: nothing to read now.
            Err(stcp::RecvError::InvalidState)
                if matches!(
                    s.state(),
                    stcp::State::Listen | stcp::State::SynSent | stcp::State::SynReceived
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(format!("smoltcp recv: {e} in {}", s.state())),
        }
    }

    fn close(&mut self, s: SocketHandle) {
        self.tcp_mut(s).close();
    }

    fn all_acked(&self, s: SocketHandle) -> bool {
        self.tcp(s).send_queue() == 0
    }
}

// ---------------------------------------------------------------------------------------------
// Workloads, written once against `Endpoint`.

/// Waits (polling) until `done`, failing after [`DEADLINE`].
fn drive<E: Endpoint>(
    ep: &mut E,
    busy: bool,
    what: &str,
    mut step: impl FnMut(&mut E) -> Result<(bool, bool), String>,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let moved = ep.poll();
        let (done, progressed) = step(ep)?;
        if done {
            return Ok(());
        }
        if !moved && !progressed {
            if start.elapsed() > DEADLINE {
                return Err(format!("{what}: not done after {DEADLINE:?}"));
            }
            ep.idle(busy);
        }
    }
}

/// Sends `CHUNK`-sized writes of `data` on `s` until `total` bytes went (counted in `sent`) or
/// the stack takes no more; returns whether any went.
fn send_some<E: Endpoint>(
    ep: &mut E,
    s: E::Sock,
    data: &[u8],
    sent: &mut u64,
    total: u64,
) -> Result<bool, String> {
    let mut progressed = false;
    while *sent < total {
        let want = usize::try_from((total - *sent).min(CHUNK as u64)).unwrap_or(CHUNK);
        let n = ep.send(s, &data[..want])?;
        if n == 0 {
            break;
        }
        *sent += n as u64;
        progressed = true;
    }
    Ok(progressed)
}

/// Reads from `s` into `buf` until `total` bytes arrived (counted in `got`) or none is ready;
/// returns whether any arrived. An end of stream before `total` is an error.
fn recv_some<E: Endpoint>(
    ep: &mut E,
    s: E::Sock,
    buf: &mut [u8],
    got: &mut u64,
    total: u64,
) -> Result<bool, String> {
    let mut progressed = false;
    while *got < total
        && let Some(n) = ep.recv(s, buf)?
    {
        if n == 0 {
            return Err(format!("end of stream after {got} of {total} bytes"));
        }
        *got += n as u64;
        progressed = true;
    }
    Ok(progressed)
}

/// The sending side of a bulk transfer: connects to `remote`, waits at `barrier`, sends `total` bytes
/// and keeps the connection going until `done`.
fn bulk_sender<E: Endpoint>(
    ep: &mut E,
    remote: SocketAddrV4,
    total: u64,
    busy: bool,
    barrier: &Barrier,
    done: &AtomicBool,
) -> Result<Side, String> {
    let s = ep.connect(remote)?;
    drive(ep, busy, "bulk connect", |ep| Ok((ep.established(s), false)))?;
    barrier.wait();
    let clock = Clock::start();
    let data = vec![0x5a_u8; CHUNK];
    let mut sent = 0u64;
    drive(ep, busy, "bulk send", |ep| {
        let progressed = send_some(ep, s, &data, &mut sent, total)?;
        Ok((done.load(Ordering::Acquire), progressed))
    })?;
    Ok(clock.stop())
}

/// The receiving side of a bulk transfer: accepts on `port`, waits at `barrier`, reads `total` bytes,
/// then sets `done`.
fn bulk_receiver<E: Endpoint>(
    ep: &mut E,
    port: u16,
    total: u64,
    busy: bool,
    barrier: &Barrier,
    done: &AtomicBool,
) -> Result<Side, String> {
    ep.listen(port)?;
    let mut conn = None;
    drive(ep, busy, "bulk accept", |ep| {
        conn = conn.or_else(|| ep.accept());
        Ok((conn.is_some_and(|s| ep.established(s)), false))
    })?;
    let s = conn.ok_or("no connection")?;
    barrier.wait();
    let clock = Clock::start();
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    let r = drive(ep, busy, "bulk receive", |ep| {
        let progressed = recv_some(ep, s, &mut buf, &mut got, total)?;
        Ok((got >= total, progressed))
    });
    let side = clock.stop();
    done.store(true, Ordering::Release);
    r?;
    Ok(side)
}

/// The client of the transaction workload: `n` times connect, send a 64-byte request, read the 64-byte
/// response and the end of stream, close.
fn txn_client<E: Endpoint>(
    ep: &mut E,
    remote: SocketAddrV4,
    n: u64,
    busy: bool,
    barrier: &Barrier,
    stop: &AtomicBool,
) -> Result<Side, String> {
    barrier.wait();
    let clock = Clock::start();
    let req = [0x71_u8; MSG];
    let mut buf = [0u8; CHUNK / 64];
    let mut done = 0u64;
    // The connection in progress: its handle, whether the request went out, response bytes.
    let mut cur: Option<(E::Sock, bool, usize)> = None;
    let r = drive(ep, busy, "transactions", |ep| {
        let mut progressed = false;
        if cur.is_none() {
            if done == n {
                return Ok((true, false));
            }
            cur = Some((ep.connect(remote)?, false, 0));
            progressed = true;
        }
        if let Some((s, sent, got)) = cur.as_mut() {
            if !*sent && ep.established(*s) {
                if ep.send(*s, &req)? != MSG {
                    return Err("the request did not fit".to_owned());
                }
                *sent = true;
                progressed = true;
            }
            while let Some(k) = ep.recv(*s, &mut buf)? {
                progressed = true;
                if k == 0 {
                    if *got != MSG {
                        return Err(format!("response of {got} bytes"));
                    }
                    ep.close(*s);
                    done += 1;
                    cur = None;
                    break;
                }
                *got += k;
            }
        }
        Ok((false, progressed))
    });
    let side = clock.stop();
    stop.store(true, Ordering::Release);
    r?;
    Ok(side)
}

/// The server of the transaction workload: accepts, reads the 64-byte request, sends the 64-byte
/// response and closes, until `stop`.
fn txn_server<E: Endpoint>(
    ep: &mut E,
    port: u16,
    busy: bool,
    barrier: &Barrier,
    stop: &AtomicBool,
) -> Result<Side, String> {
    ep.listen(port)?;
    barrier.wait();
    let clock = Clock::start();
    let resp = [0x72_u8; MSG];
    let mut buf = [0u8; MSG];
    let mut conns: Vec<(E::Sock, usize)> = Vec::new();
    drive(ep, busy, "transaction server", |ep| {
        let mut progressed = false;
        while let Some(s) = ep.accept() {
            conns.push((s, 0));
            progressed = true;
        }
        let mut i = 0;
        while i < conns.len() {
            let (s, got) = &mut conns[i];
            let s = *s;
            while *got < MSG {
                match ep.recv(s, &mut buf[..MSG - *got])? {
                    Some(0) => return Err("the client closed before its request".to_owned()),
                    Some(k) => {
                        *got += k;
                        progressed = true;
                    }
                    None => break,
                }
            }
            if *got == MSG {
                if ep.send(s, &resp)? != MSG {
                    return Err("the response did not fit".to_owned());
                }
                ep.close(s);
                conns.swap_remove(i);
                progressed = true;
            } else {
                i += 1;
            }
        }
        Ok((stop.load(Ordering::Acquire), progressed))
    })?;
    Ok(clock.stop())
}

// ---------------------------------------------------------------------------------------------
// Contenders on the in-memory link.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    TcpLib,
    /// tcp-lib, the receiving application reading in place ([`InPlace`]).
    TcpLibInPlace,
    Smoltcp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::TcpLib => "tcp-lib",
            Kind::TcpLibInPlace => "tcp-lib-inplace",
            Kind::Smoltcp => "smoltcp",
        }
    }
}

fn new_pool() -> Result<Pool, String> {
    Pool::builder(POOL_BUFFERS).hugepages(HugePages::Never).build().map_err(|e| e.to_string())
}

/// Runs `a` (on one end, IP `A_IP`) and `b` (the other end, `B_IP`) of a `Pair`, each with an
/// endpoint of `kind`.
fn on_pair<FA, FB>(kind: Kind, s: &Settings, a: FA, b: FB) -> Result<(Side, Side), String>
where
    FA: FnOnce(&mut dyn AnyEndpoint, &Barrier) -> Result<Side, String> + Send,
    FB: FnOnce(&mut dyn AnyEndpoint, &Barrier) -> Result<Side, String> + Send,
{
    let pool = new_pool()?;
    let (dev_a, dev_b) = Pair::builder(&pool).capacity(4096).build().map_err(|e| e.to_string())?;
    let buf = s.buf;
    two_threads(
        move |barrier| with_endpoint(kind, dev_a, A_IP, buf, |ep| a(ep, barrier)),
        move |barrier| with_endpoint(kind, dev_b, B_IP, buf, |ep| b(ep, barrier)),
    )
}

/// Builds an endpoint of `kind` on `dev` (with its own pool cache) and runs `f` with it.
fn with_endpoint<D: Sleep + HasPool, R>(
    kind: Kind,
    dev: D,
    ip: Ipv4Addr,
    buf: usize,
    f: impl FnOnce(&mut dyn AnyEndpoint) -> R,
) -> R {
    let cache = dev.pool_cache();
    match kind {
        Kind::TcpLib => f(&mut LibEndpoint::new(dev, &cache, ip, buf)),
        Kind::TcpLibInPlace => {
            let mut ep = LibEndpoint::new(dev, &cache, ip, buf);
            ep.in_place = Some(InPlace::new());
            f(&mut ep)
        }
        Kind::Smoltcp => f(&mut SmolEndpoint::new(dev, &cache, ip, buf)),
    }
}

/// A device that knows its pool.
trait HasPool {
    fn pool_cache(&self) -> PoolCache;
}

impl HasPool for Pair {
    fn pool_cache(&self) -> PoolCache {
        self.pool().cache()
    }
}

/// Object-safe access to the workloads for either stack.
trait AnyEndpoint {
    fn bulk_sender(
        &mut self,
        total: u64,
        busy: bool,
        barrier: &Barrier,
        done: &AtomicBool,
    ) -> Result<Side, String>;
    fn bulk_receiver(
        &mut self,
        total: u64,
        busy: bool,
        barrier: &Barrier,
        done: &AtomicBool,
    ) -> Result<Side, String>;
    fn txn_client(
        &mut self,
        n: u64,
        busy: bool,
        barrier: &Barrier,
        stop: &AtomicBool,
    ) -> Result<Side, String>;
    fn txn_server(&mut self, busy: bool, barrier: &Barrier, stop: &AtomicBool) -> Result<Side, String>;
}

impl<E: Endpoint> AnyEndpoint for E {
    fn bulk_sender(
        &mut self,
        total: u64,
        busy: bool,
        barrier: &Barrier,
        done: &AtomicBool,
    ) -> Result<Side, String> {
        bulk_sender(self, SocketAddrV4::new(B_IP, PORT), total, busy, barrier, done)
    }

    fn bulk_receiver(
        &mut self,
        total: u64,
        busy: bool,
        barrier: &Barrier,
        done: &AtomicBool,
    ) -> Result<Side, String> {
        bulk_receiver(self, PORT, total, busy, barrier, done)
    }

    fn txn_client(
        &mut self,
        n: u64,
        busy: bool,
        barrier: &Barrier,
        stop: &AtomicBool,
    ) -> Result<Side, String> {
        txn_client(self, SocketAddrV4::new(B_IP, PORT), n, busy, barrier, stop)
    }

    fn txn_server(&mut self, busy: bool, barrier: &Barrier, stop: &AtomicBool) -> Result<Side, String> {
        txn_server(self, PORT, busy, barrier, stop)
    }
}

fn bulk_stack(kind: Kind, s: &Settings, bytes: u64) -> Result<Sample, String> {
    let done = AtomicBool::new(false);
    let busy = s.busy;
    let (a, b) = on_pair(
        kind,
        s,
        |ep, barrier| ep.bulk_sender(bytes, busy, barrier, &done),
        |ep, barrier| ep.bulk_receiver(bytes, busy, barrier, &done),
    )?;
    Ok(Sample { units: bytes, wall: b.end - b.start, cpu: [a.cpu, b.cpu] })
}

fn txn_stack(kind: Kind, s: &Settings, n: u64) -> Result<Sample, String> {
    let stop = AtomicBool::new(false);
    let busy = s.busy;
    let (a, b) = on_pair(
        kind,
        s,
        |ep, barrier| ep.txn_client(n, busy, barrier, &stop),
        |ep, barrier| ep.txn_server(busy, barrier, &stop),
    )?;
    Ok(Sample { units: n, wall: a.end - a.start, cpu: [a.cpu, b.cpu] })
}

// ---------------------------------------------------------------------------------------------
// The kernel over loopback.

fn io_err(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn bulk_kernel(bytes: u64, ip: Ipv4Addr) -> Result<Sample, String> {
    let listener = TcpListener::bind((ip, 0)).map_err(io_err("bind"))?;
    let addr = listener.local_addr().map_err(io_err("local_addr"))?;
    let (a, b) = two_threads(
        |barrier| {
            let mut s = TcpStream::connect(addr).map_err(io_err("connect"))?;
            barrier.wait();
            let clock = Clock::start();
            let data = vec![0x5a_u8; CHUNK];
            let mut sent = 0u64;
            while sent < bytes {
                let want = usize::try_from((bytes - sent).min(CHUNK as u64)).unwrap_or(CHUNK);
                s.write_all(&data[..want]).map_err(io_err("write"))?;
                sent += want as u64;
            }
            Ok(clock.stop())
        },
        |barrier| {
            let (mut s, _) = listener.accept().map_err(io_err("accept"))?;
            barrier.wait();
            let clock = Clock::start();
            let mut buf = vec![0u8; CHUNK];
            let mut got = 0u64;
            while got < bytes {
                match s.read(&mut buf).map_err(io_err("read"))? {
                    0 => return Err(format!("end of stream after {got} bytes")),
                    n => got += n as u64,
                }
            }
            Ok(clock.stop())
        },
    )?;
    Ok(Sample { units: bytes, wall: b.end - b.start, cpu: [a.cpu, b.cpu] })
}

fn txn_kernel(n: u64) -> Result<Sample, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io_err("bind"))?;
    let addr = listener.local_addr().map_err(io_err("local_addr"))?;
    let (a, b) = two_threads(
        |barrier| {
            barrier.wait();
            let clock = Clock::start();
            let req = [0x71_u8; MSG];
            let mut buf = [0u8; MSG];
            for _ in 0..n {
                let mut s = TcpStream::connect(addr).map_err(io_err("connect"))?;
                s.set_nodelay(true).map_err(io_err("nodelay"))?;
                s.write_all(&req).map_err(io_err("write"))?;
                s.read_exact(&mut buf).map_err(io_err("read"))?;
                if s.read(&mut buf).map_err(io_err("read"))? != 0 {
                    return Err("more than the response".to_owned());
                }
            }
            Ok(clock.stop())
        },
        |barrier| {
            barrier.wait();
            let clock = Clock::start();
            let resp = [0x72_u8; MSG];
            let mut buf = [0u8; MSG];
            for _ in 0..n {
                let (mut s, _) = listener.accept().map_err(io_err("accept"))?;
                s.set_nodelay(true).map_err(io_err("nodelay"))?;
                s.read_exact(&mut buf).map_err(io_err("read"))?;
                s.write_all(&resp).map_err(io_err("write"))?;
            }
            Ok(clock.stop())
        },
    )?;
    Ok(Sample { units: n, wall: a.end - a.start, cpu: [a.cpu, b.cpu] })
}

// ---------------------------------------------------------------------------------------------
// Over TAP, the kernel as the peer (run inside a private namespace).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TapMode {
    /// The kernel reads what the stack sends.
    Reader,
    /// The kernel writes, the stack receives.
    Writer,
}

/// One transfer of `bytes` between the stack of `kind` on a fresh TAP and a kernel socket; the stack
/// listens, the kernel connects (as in smoltcp's benchmark). Wall time runs from the kernel's
/// `connect` to the last byte read by the receiving application.
fn tap_run(kind: Kind, mode: TapMode, s: &Settings) -> Result<Sample, String> {
    let tap = netns::open_tap(TAP_NAME, TAP_KERNEL_IP)?;
    let pool = new_pool()?;
    let cache = pool.cache();
    let bytes = s.tap_bytes;
    let busy = s.busy;
    let done = Arc::new(AtomicBool::new(false));
    let kernel = {
        let done = Arc::clone(&done);
        thread::spawn(move || -> Result<(Side, Instant), String> {
            common::pin_to_cpu(0);
            let start = Instant::now();
            let clock = Clock::start();
            let mut sock =
                TcpStream::connect_timeout(&SocketAddrV4::new(TAP_STACK_IP, PORT).into(), DEADLINE)
                    .map_err(io_err("kernel connect"))?;
            sock.set_read_timeout(Some(DEADLINE)).map_err(io_err("timeout"))?;
            sock.set_write_timeout(Some(DEADLINE)).map_err(io_err("timeout"))?;
            let mut buf = vec![0x5a_u8; CHUNK];
            let mut moved = 0u64;
            let r = match mode {
                TapMode::Reader => loop {
                    if moved >= bytes {
                        break Ok(());
                    }
                    match sock.read(&mut buf) {
                        Ok(0) => break Err(format!("kernel: end of stream after {moved} bytes")),
                        Ok(n) => moved += n as u64,
                        Err(e) => break Err(format!("kernel read: {e}")),
                    }
                },
                TapMode::Writer => loop {
                    if moved >= bytes {
                        break Ok(());
                    }
                    let want = usize::try_from((bytes - moved).min(CHUNK as u64)).unwrap_or(CHUNK);
                    if let Err(e) = sock.write_all(&buf[..want]) {
                        break Err(format!("kernel write: {e}"));
                    }
                    moved += want as u64;
                },
            };
            let side = clock.stop();
            if mode == TapMode::Reader {
                done.store(true, Ordering::Release);
            }
            r.map(|()| (side, start))
        })
    };
    common::pin_to_cpu(1);
    let ours = match kind {
        Kind::TcpLib => {
            tap_stack(&mut LibEndpoint::new(tap, &cache, TAP_STACK_IP, s.buf), mode, bytes, busy, &done)
        }
        Kind::TcpLibInPlace => {
            let mut ep = LibEndpoint::new(tap, &cache, TAP_STACK_IP, s.buf);
            ep.in_place = Some(InPlace::new());
            tap_stack(&mut ep, mode, bytes, busy, &done)
        }
        Kind::Smoltcp => {
            tap_stack(&mut SmolEndpoint::new(tap, &cache, TAP_STACK_IP, s.buf), mode, bytes, busy, &done)
        }
    };
    done.store(true, Ordering::Release);
    let (k, kstart) = kernel.join().map_err(|_| "the kernel thread panicked".to_owned())??;
    let ours = ours?;
    let end = if mode == TapMode::Reader { k.end } else { ours.end };
    Ok(Sample { units: bytes, wall: end - kstart, cpu: [ours.cpu, k.cpu] })
}

/// Our side over TAP: listen, accept, then send or receive `bytes`.
fn tap_stack<E: Endpoint>(
    ep: &mut E,
    mode: TapMode,
    bytes: u64,
    busy: bool,
    done: &AtomicBool,
) -> Result<Side, String> {
    let clock = Clock::start();
    ep.listen(PORT)?;
    let mut conn = None;
    drive(ep, busy, "tap accept", |ep| {
        conn = conn.or_else(|| ep.accept());
        Ok((conn.is_some_and(|s| ep.established(s)), false))
    })?;
    let s = conn.ok_or("no connection")?;
    let mut buf = vec![0x5a_u8; CHUNK];
    let mut moved = 0u64;
    match mode {
        TapMode::Reader => drive(ep, busy, "tap send", |ep| {
            let progressed = send_some(ep, s, &buf, &mut moved, bytes)?;
            Ok((done.load(Ordering::Acquire) && ep.all_acked(s), progressed))
        })?,
        TapMode::Writer => drive(ep, busy, "tap receive", |ep| {
            let progressed = recv_some(ep, s, &mut buf, &mut moved, bytes)?;
            Ok((moved >= bytes, progressed))
        })?,
    }
    let side = clock.stop();
    ep.close(s);
    // Let the close go out so the kernel's side ends cleanly.
    for _ in 0..10 {
        ep.poll();
    }
    Ok(side)
}

// ---------------------------------------------------------------------------------------------
// Reporting.

/// Samples of one contender over the rounds.
#[derive(Debug, Default)]
struct Series {
    name: String,
    samples: Vec<Sample>,
    failures: Vec<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { f64::midpoint(v[n / 2 - 1], v[n / 2]) }
}

/// Formats a rate with three significant figures.
fn fmt_rate(x: f64) -> String {
    if !x.is_finite() {
        "-".to_owned()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Prints one group's table: per contender medians, and ratios of `ours` (the first series) to
/// each other one, median of the per-round ratios.
fn table(title: &str, unit: &str, scale: f64, series: &[Series]) {
    println!("\n### {title}\n");
    println!(
        "| contender | runs | wall {unit}/s (median) | min..max | {unit} per CPU-s (median) | CPU-s per wall-s | {0} / this, wall (paired) | {0} / this, per CPU-s (paired) |",
        series[0].name
    );
    println!("|---|---:|---:|---|---:|---:|---:|---:|");
    let ours = &series[0];
    for s in series {
        let wall: Vec<f64> = s.samples.iter().map(|x| x.per_sec() / scale).collect();
        let cpu: Vec<f64> = s.samples.iter().map(|x| x.per_cpu_sec() / scale).collect();
        let util: Vec<f64> = s.samples.iter().map(|x| x.cpu_total() / x.wall.as_secs_f64()).collect();
        let lo = wall.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = wall.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let paired = |f: fn(&Sample) -> f64| {
            let r: Vec<f64> = ours.samples.iter().zip(&s.samples).map(|(o, t)| f(o) / f(t)).collect();
            if std::ptr::eq(s, ours) || r.is_empty() { String::new() } else { format!("{:.2}x", median(r)) }
        };
        let mut row = format!(
            "| {} | {} | {} | {}..{} | {} | {:.2} | {} | {} |",
            s.name,
            s.samples.len(),
            fmt_rate(median(wall)),
            fmt_rate(lo),
            fmt_rate(hi),
            fmt_rate(median(cpu)),
            median(util),
            paired(Sample::per_sec),
            paired(Sample::per_cpu_sec),
        );
        if !s.failures.is_empty() {
            let _ = write!(row, " ({} failed: {})", s.failures.len(), s.failures[0]);
        }
        println!("{row}");
    }
}

fn record(series: &mut Series, r: Result<Sample, String>) {
    match r {
        Ok(x) => {
            eprintln!(
                "  {:<22} {:>10.1} /s wall  {:>10.1} /CPU-s  cpu {:.3}+{:.3} s  wall {:.3} s",
                series.name,
                x.per_sec(),
                x.per_cpu_sec(),
                x.cpu[0].as_secs_f64(),
                x.cpu[1].as_secs_f64(),
                x.wall.as_secs_f64()
            );
            series.samples.push(x);
        }
        Err(e) => {
            eprintln!("  {:<22} FAILED: {e}", series.name);
            series.failures.push(e);
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|_| "?".to_owned(), |s| s.trim().to_owned())
}

fn series(names: &[&str]) -> Vec<Series> {
    names.iter().map(|n| Series { name: (*n).to_owned(), ..Series::default() }).collect()
}

/// Runs `f(i)` for every contender `i` of a round, starting at a rotating offset.
fn rotated(round: usize, n: usize, mut f: impl FnMut(usize)) {
    for k in 0..n {
        f((round + k) % n);
    }
}

/// Instructions per byte of the in-memory bulk transfer of `kind` (both threads), from two callgrind
/// runs of different sizes (so set-up cancels out).
fn icount_per_byte(kind: Kind) -> Result<f64, String> {
    let (small, large) = (4u64 << 20, 12u64 << 20);
    let run = |bytes: u64| {
        common::callgrind_instructions(&[], &["bulk".to_owned(), kind.name().to_owned(), bytes.to_string()])
    };
    let (a, b) = (run(small)?, run(large)?);
    Ok((b.saturating_sub(a)) as f64 / (large - small) as f64)
}

/// The process's peak resident set, KiB.
fn max_rss_kib() -> i64 {
    // SAFETY: all-zero is a valid `rusage`.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a live, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) };
    if rc == 0 { ru.ru_maxrss } else { -1 }
}

fn child(args: &[String]) -> Result<(), String> {
    let s = Settings::from_env();
    let what = args.first().map(String::as_str).unwrap_or_default();
    let who = args.get(1).map(String::as_str).unwrap_or_default();
    let n: u64 = args.get(2).and_then(|v| v.parse().ok()).ok_or("usage: --child bulk|txn WHO N")?;
    let kind = match who {
        "tcp-lib" => Some(Kind::TcpLib),
        "tcp-lib-inplace" => Some(Kind::TcpLibInPlace),
        "smoltcp" => Some(Kind::Smoltcp),
        "kernel-lo" => None,
        _ => return Err(format!("unknown contender {who}")),
    };
    let sample = match (what, kind) {
        ("bulk", Some(k)) => bulk_stack(k, &s, n)?,
        ("bulk", None) => bulk_kernel(n, Ipv4Addr::LOCALHOST)?,
        ("txn", Some(k)) => txn_stack(k, &s, n)?,
        ("txn", None) => txn_kernel(n)?,
        _ => return Err(format!("unknown workload {what}")),
    };
    println!(
        "{sample:?} per_sec={:.1} per_cpu_sec={:.1} max_rss_mib={}",
        sample.per_sec(),
        sample.per_cpu_sec(),
        max_rss_kib() >> 10
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    if args.first().map(String::as_str) == Some("--child") {
        if let Err(e) = child(&args[1..]) {
            eprintln!("{e}");
            std::process::exit(1);
        }
        return;
    }
    let s = Settings::from_env();
    let only = std::env::var("TCP_BENCH_ONLY").unwrap_or_else(|_| "bulk,txn,tap".to_owned());
    let want = |g: &str| only.split(',').any(|x| x.trim() == g);
    println!("# tcp-lib vs smoltcp vs the kernel");
    println!(
        "settings: {} rounds, bulk {} MiB, {} transactions (stack buffers {:?} KiB), TAP {} MiB, stack buffers {} KiB, {} polling; load average at start: {}",
        s.rounds,
        s.bytes >> 20,
        s.txns,
        s.txn_bufs.iter().map(|b| b >> 10).collect::<Vec<_>>(),
        s.tap_bytes >> 20,
        s.buf >> 10,
        if s.busy { "busy" } else { "sleep-when-idle" },
        loadavg()
    );
    let ns_missing = netns::namespace_unavailable();

    if want("bulk") {
        let mut ser = series(&["tcp-lib", "smoltcp", "tcp-lib-inplace", "kernel-lo", "kernel-lo-1500"]);
        let contenders = if ns_missing.is_some() { 4 } else { 5 };
        for round in 0..s.rounds {
            eprintln!("bulk round {round}:");
            rotated(round, contenders, |i| {
                let r = match i {
                    0 => bulk_stack(Kind::TcpLib, &s, s.bytes),
                    1 => bulk_stack(Kind::Smoltcp, &s, s.bytes),
                    2 => bulk_stack(Kind::TcpLibInPlace, &s, s.bytes),
                    3 => bulk_kernel(s.bytes, Ipv4Addr::LOCALHOST),
                    _ => {
                        let bytes = s.bytes;
                        netns::in_private_namespace(move || {
                            netns::ip(&["link", "set", "lo", "mtu", "1500"])?;
                            bulk_kernel(bytes, Ipv4Addr::LOCALHOST)
                        })
                    }
                };
                record(&mut ser[i], r);
            });
        }
        if let Some(why) = ns_missing {
            println!("(kernel-lo-1500 skipped: {why})");
            ser.truncate(4);
        }
        table(&format!("Bulk, one connection, {} MiB, in-memory link", s.bytes >> 20), "MB", 1e6, &ser);
        // The same samples with the in-place reader as the reference.
        ser.swap(0, 2);
        table(
            &format!("Bulk, one connection, {} MiB, in-memory link, tcp-lib reading in place", s.bytes >> 20),
            "MB",
            1e6,
            &ser,
        );
        if std::env::var("TCP_BENCH_ICOUNT").is_ok_and(|v| v == "1") {
            if common::have_valgrind() {
                for kind in [Kind::TcpLib, Kind::TcpLibInPlace, Kind::Smoltcp] {
                    match icount_per_byte(kind) {
                        Ok(x) => println!(
                            "{}: {x:.2} instructions per byte (callgrind, both threads)",
                            kind.name()
                        ),
                        Err(e) => println!("{}: callgrind failed: {e}", kind.name()),
                    }
                }
            } else {
                println!("(instruction counts skipped: valgrind is not installed)");
            }
        }
    }

    if want("txn") {
        for &buf in &s.txn_bufs {
            let st = Settings { buf, ..s.clone() };
            let mut ser = series(&["tcp-lib", "smoltcp", "kernel-lo"]);
            for round in 0..s.rounds {
                eprintln!("txn round {round}, stack buffers {} KiB:", buf >> 10);
                rotated(round, 3, |i| {
                    let r = match i {
                        0 => txn_stack(Kind::TcpLib, &st, s.txns),
                        1 => txn_stack(Kind::Smoltcp, &st, s.txns),
                        _ => txn_kernel(s.txns),
                    };
                    record(&mut ser[i], r);
                });
            }
            table(
                &format!(
                    "Transactions (connect + 64 B request + 64 B response + close), one at a time, {} in a row, stack buffers {} KiB",
                    s.txns,
                    buf >> 10
                ),
                "txn",
                1.0,
                &ser,
            );
        }
    }

    if want("tap") {
        if let Some(why) = ns_missing {
            println!("\n### Over TAP against the kernel\n\nskipped: {why}");
        } else {
            let settings = s.clone();
            let r = netns::in_private_namespace(move || {
                let mut ser = series(&[
                    "tcp-lib reader",
                    "smoltcp reader",
                    "tcp-lib writer",
                    "smoltcp writer",
                    "tcp-lib-inplace writer",
                ]);
                for round in 0..settings.rounds {
                    eprintln!("tap round {round}:");
                    rotated(round, 5, |i| {
                        let (kind, mode) = match i {
                            0 => (Kind::TcpLib, TapMode::Reader),
                            1 => (Kind::Smoltcp, TapMode::Reader),
                            2 => (Kind::TcpLib, TapMode::Writer),
                            3 => (Kind::Smoltcp, TapMode::Writer),
                            _ => (Kind::TcpLibInPlace, TapMode::Writer),
                        };
                        record(&mut ser[i], tap_run(kind, mode, &settings));
                    });
                }
                Ok(ser)
            });
            match r {
                Ok(mut ser) => {
                    let writer = ser.split_off(2);
                    table(
                        &format!(
                            "Over TAP, reader mode (the stack sends, the kernel reads), {} MiB",
                            s.tap_bytes >> 20
                        ),
                        "MB",
                        1e6,
                        &ser,
                    );
                    table(
                        &format!(
                            "Over TAP, writer mode (the kernel writes, the stack receives), {} MiB",
                            s.tap_bytes >> 20
                        ),
                        "MB",
                        1e6,
                        &writer,
                    );
                    let mut in_place: Vec<Series> = writer.into_iter().rev().collect();
                    in_place.truncate(2); // the in-place reader first, then smoltcp
                    table(
                        &format!(
                            "Over TAP, writer mode, tcp-lib reading in place, {} MiB",
                            s.tap_bytes >> 20
                        ),
                        "MB",
                        1e6,
                        &in_place,
                    );
                }
                Err(e) => println!("\n### Over TAP against the kernel\n\nskipped: {e}"),
            }
        }
    }
    println!("\nload average at the end: {}", loadavg());
}
