//! Security tests with the Linux kernel as the peer: our [`Stack`] on a TAP device in a private
//! network namespace, the kernel's TCP behind `std::net` sockets on threads in the same namespace
//! (see `kernel_support`).
//!
//! * **SYN flood.** Forged SYNs from random spoofed sources (`10.88.0.3`..`10.88.0.254`, random
//!   ports and ISNs; addresses inside the namespace's own subnet that nothing answers) at a paced
//!   50,000 SYN/s into our listener (SYN queue 64), for at least 3 s, while 200 kernel clients
//!   connect, send a message and read our echo. All 200 must get in (through SYN cookies: the
//!   flood keeps the SYN queue full), the SYN queue never exceeds its cap (sampled every poll),
//!   and the stack keeps no state per forged SYN (connections, ARP queue bounded). The achieved
//!   flood rate is printed and must reach 80% of the target (about 48,000-49,900 SYN/s measured
//!   with an unoptimised build on a loaded 2-core machine), unless the machine starved the driver
//!   thread (under 90% of a CPU while behind the rate, when its loop never sleeps): that prints
//!   `skipped: the flood rate check: ...` with the figures, and the other checks still apply.
//!   Our cookie SYN-ACKs to the spoofed addresses wait in the stack's bounded ARP queue (the
//!   kernel ignores ARP requests for addresses it does not own) and are dropped there, so what
//!   reaches the wire for them is ARP requests only, all on the TAP.
//! * **Blind RST/SYN injection.** 20 kernel clients and our stack transfer data both ways at once
//!   (paced over about 2 s) while forged RSTs and SYNs with the connections' real 4-tuples but
//!   wrong sequence numbers (in the window but never at `RCV.NXT`, and far out of the window) are
//!   injected both ways: towards our stack as if from the kernel, and towards the kernel as if
//!   from our stack. A connection is attacked from the kernel's handshake ACK until the first
//!   FIN either way (a half-closed or TIME-WAIT socket is out of scope). Every transfer must
//!   complete byte-exact with no RST crossing the TAP either way; our stack and the kernel answer
//!   with RFC 5961 challenge ACKs, which are counted (ours from the connections' stats, the
//!   kernel's from `TcpExt` in the namespace's `/proc/thread-self/net/netstat`).
//!
//! **How frames are injected.** Both tests wrap the TAP in an [`Injector`] device (as `Observer`
//! wraps it). Its `rx_burst` appends forged frames, built in buffers of the stack's pool, after the
//! frames the kernel sent, so they enter our stack's receive path exactly as frames from the wire;
//! its `tx_burst` writes forged frames into the TAP after our stack's own, so the kernel receives
//! them from the TAP as if our stack sent them. Pacing is by elapsed time (credits that accumulate
//! at the target rate, capped at 20 ms worth), so a slow poll loop lowers the achieved rate, which
//! is measured and reported, never assumed. This is simpler and cheaper than an `AF_PACKET`
//! socket on the kernel's side (no syscall per forged frame, nothing to synchronise with the
//! driver thread) and sends nothing anywhere but into the namespace's TAP.
//!
//! Forged sequence numbers are chosen from what the [`Injector`] saw cross the TAP: a receiver's
//! `RCV.NXT` is never past the end of what its peer sent, so `end + 1 + r` (`r < 1024`) is in the
//! window (unless the window is nearly closed) but never exact, and `end ± (2^30 + r)` is far
//! outside any window.
//!
//! Needs root and `/dev/net/tun`; otherwise each test prints `skipped: <why>` (`netns_test::skip`).
//! The test command counts that as a skip (under `CI=true` a failure unless allowed); an error once
//! those preconditions hold fails the test.
#![cfg(not(loom))]

mod kernel_support;

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use kernel_support::{
    Host, KERNEL_IP, OnTap, STACK_IP, Sink, Source, in_private_namespace, new_pool, open_tap, parse_tcp,
    splitmix, stack_config,
};
use netchannel::dev::{DevError, DeviceInfo, DeviceStats, Link, NetDevice, PacketBatch, Tap};
use netchannel::pool::{Packet, PoolCache};
use tcp_lib::stack::{Error, ListenerConfig, StreamId};
use tcp_lib::wire::{
    EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Ipv4Packet, Ipv4Repr, Protocol, SeqNumber,
    TcpControl, TcpPacket, TcpRepr,
};

/// Timeouts of every kernel socket operation in these tests.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Forging.

/// SplitMix64 over a counter.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        splitmix(self.0)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn below_usize(&mut self, n: usize) -> usize {
        usize::try_from(self.below(n as u64)).unwrap_or(0)
    }
}

/// Releases events at `rate` per second of real time: credits accumulate with elapsed time (in
/// event-nanoseconds, capped) and each event spends one.
struct Pacer {
    rate: u128,
    last: Instant,
    /// Events times 10^9.
    credit: u128,
    cap: u128,
}

impl Pacer {
    /// At `rate` per second; at most `burst` events owed at once.
    fn new(rate: u64, burst: u64, now: Instant) -> Self {
        Self { rate: u128::from(rate), last: now, credit: 0, cap: u128::from(burst) * 1_000_000_000 }
    }

    /// How many events are due now, at most `max`; they are spent.
    fn take(&mut self, now: Instant, max: usize) -> usize {
        let dt = now.saturating_duration_since(self.last).as_nanos();
        self.last = now;
        self.credit = (self.credit + dt * self.rate).min(self.cap);
        let due = usize::try_from(self.credit / 1_000_000_000).unwrap_or(usize::MAX).min(max);
        self.credit -= due as u128 * 1_000_000_000;
        due
    }
}

/// An Ethernet/IPv4/TCP frame carrying `seg` from `src` to `dst`, built in a buffer of `cache`
/// (None when the pool is empty).
fn forge<'c>(
    cache: &'c PoolCache,
    (src_mac, dst_mac): (EthernetAddress, EthernetAddress),
    src: SocketAddrV4,
    dst: SocketAddrV4,
    seg: &TcpRepr<'_>,
    ident: u16,
) -> Option<Packet<'c>> {
    let ip = Ipv4Repr {
        src_addr: *src.ip(),
        dst_addr: *dst.ip(),
        protocol: Protocol::Tcp,
        payload_len: seg.buffer_len(),
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident,
        dont_frag: true,
    };
    let eth = EthernetRepr { src_addr: src_mac, dst_addr: dst_mac, vlan: None, ethertype: EtherType::Ipv4 };
    let mut packet = cache.alloc()?;
    packet.set_len(eth.buffer_len(ip.buffer_len())).ok()?;
    let mut frame = EthernetFrame::new_unchecked(packet.data_mut());
    eth.emit(&mut frame);
    let mut ipp = Ipv4Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut ipp);
    seg.emit(&mut TcpPacket::new_unchecked(ipp.payload_mut()), *src.ip(), *dst.ip());
    Some(packet)
}

/// The SYN flood: forged SYNs to `port` from random spoofed sources.
struct Flood {
    port: u16,
    pacer: Pacer,
    rng: Rng,
    started: Instant,
    /// SYNs injected.
    sent: u64,
    /// SYNs not injected for want of a buffer.
    no_buffer: u64,
}

impl Flood {
    fn new(port: u16, rate: u64, seed: u64) -> Self {
        let now = Instant::now();
        // At most 20 ms worth owed: a stalled poll loop loses rate rather than bursting.
        Self {
            port,
            pacer: Pacer::new(rate, rate / 50, now),
            rng: Rng(seed),
            started: now,
            sent: 0,
            no_buffer: 0,
        }
    }

    /// A forged SYN: spoofed source in 10.88.0.3..=10.88.0.254 (the namespace's subnet, where
    /// nothing answers), random port, ISN and MAC, the options a Linux SYN carries.
    fn syn(&mut self) -> (EthernetAddress, SocketAddrV4, TcpRepr<'static>) {
        let r = self.rng.next();
        let host = u8::try_from(3 + r % 252).unwrap_or(3);
        let port = u16::try_from(1024 + (r >> 8) % 64_512).unwrap_or(1024);
        let b = self.rng.next().to_le_bytes();
        let mac = EthernetAddress([0x02, b[4], b[5], b[6], b[7], 0x01]);
        let seg = TcpRepr {
            src_port: port,
            dst_port: self.port,
            control: TcpControl::Syn,
            seq_number: SeqNumber::new(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            window_len: 64_240,
            max_seg_size: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            ..TcpRepr::default()
        };
        (mac, SocketAddrV4::new(Ipv4Addr::new(10, 88, 0, host), port), seg)
    }
}

/// Forged segments of one direction, by kind.
#[derive(Clone, Copy, Debug, Default)]
struct Forged {
    /// RST in the receiver's window but not at its `RCV.NXT`.
    rst_in_window: u64,
    /// RST 2^30 or more away from the window.
    rst_out_of_window: u64,
    syn_in_window: u64,
    syn_out_of_window: u64,
    /// Not injected for want of a buffer, or refused by the TAP.
    lost: u64,
}

impl Forged {
    fn total(&self) -> u64 {
        self.rst_in_window + self.rst_out_of_window + self.syn_in_window + self.syn_out_of_window
    }

    fn every_kind(&self) -> bool {
        self.rst_in_window > 0
            && self.rst_out_of_window > 0
            && self.syn_in_window > 0
            && self.syn_out_of_window > 0
    }
}

/// (the kernel's end, our end) of a connection.
type FlowKey = (SocketAddrV4, SocketAddrV4);

/// What crossed the TAP on one connection.
#[derive(Clone, Copy, Debug, Default)]
struct Flow {
    /// The end of the kernel's sequence space seen so far (the highest `SEQ + SEG.LEN`).
    kernel_end: Option<SeqNumber>,
    /// The same for our stack.
    our_end: Option<SeqNumber>,
    /// The kernel sent an ACK after the handshake: both ends are established.
    established: bool,
    /// A FIN was seen either way: the connection closes, the attack on it stops.
    fin: bool,
    /// Forged segments injected towards us / towards the kernel.
    hits_to_us: u64,
    hits_to_kernel: u64,
}

/// The blind attack: forged RSTs and SYNs with real 4-tuples and wrong sequence numbers, both
/// ways.
struct Blind {
    rng: Rng,
    to_us: Pacer,
    to_kernel: Pacer,
    flows: HashMap<FlowKey, Flow>,
    keys: Vec<FlowKey>,
    forged_to_us: Forged,
    forged_to_kernel: Forged,
}

impl Blind {
    fn new(rate_each_way: u64, seed: u64) -> Self {
        let now = Instant::now();
        let burst = (rate_each_way / 50).max(1);
        Self {
            rng: Rng(seed),
            to_us: Pacer::new(rate_each_way, burst, now),
            to_kernel: Pacer::new(rate_each_way, burst, now),
            flows: HashMap::new(),
            keys: Vec::new(),
            forged_to_us: Forged::default(),
            forged_to_kernel: Forged::default(),
        }
    }

    fn flow(&mut self, key: FlowKey) -> &mut Flow {
        let keys = &mut self.keys;
        self.flows.entry(key).or_insert_with(|| {
            keys.push(key);
            Flow::default()
        })
    }

    /// A random connection open both ways and not closing (a few tries).
    fn pick(&mut self) -> Option<FlowKey> {
        for _ in 0..4 {
            if self.keys.is_empty() {
                return None;
            }
            let key = self.keys[self.rng.below_usize(self.keys.len())];
            let f = self.flows[&key];
            if f.established && !f.fin && f.kernel_end.is_some() && f.our_end.is_some() {
                return Some(key);
            }
        }
        None
    }

    /// A forged segment from the side whose sequence space ends at `end`, to the side whose ends
    /// at `peer_end`.
    fn segment(
        rng: &mut Rng,
        counts: &mut Forged,
        (src_port, dst_port): (u16, u16),
        end: SeqNumber,
        peer_end: SeqNumber,
    ) -> TcpRepr<'static> {
        let r = rng.below_usize(1024);
        let far = if rng.below(2) == 0 { end + (1 << 30) + r } else { end - (1 << 30) - r };
        let (control, seq) = match rng.below(4) {
            0 => {
                counts.rst_in_window += 1;
                (TcpControl::Rst, end + 1 + r)
            }
            1 => {
                counts.rst_out_of_window += 1;
                (TcpControl::Rst, far)
            }
            2 => {
                counts.syn_in_window += 1;
                (TcpControl::Syn, end + 1 + r)
            }
            _ => {
                counts.syn_out_of_window += 1;
                (TcpControl::Syn, far)
            }
        };
        // Half the RSTs carry an ACK of everything the receiver sent (RST|ACK).
        let ack = (control == TcpControl::Rst && rng.below(2) == 0).then_some(peer_end);
        TcpRepr {
            src_port,
            dst_port,
            control,
            seq_number: seq,
            ack_number: ack,
            window_len: 502,
            max_seg_size: (control == TcpControl::Syn).then_some(1460),
            ..TcpRepr::default()
        }
    }
}

/// A device over the TAP that merges forged frames into both directions (see the module docs)
/// and counts the resets in the real traffic.
struct Injector<D> {
    inner: D,
    /// For frames forged towards the kernel (the stack's cache is not ours in `tx_burst`).
    cache: PoolCache,
    our_mac: EthernetAddress,
    /// Learned from the kernel's frames.
    kernel_mac: Option<EthernetAddress>,
    flood: Option<Flood>,
    blind: Option<Blind>,
    /// RSTs in the real traffic: from the kernel, from our stack.
    real_rst_from_kernel: u64,
    real_rst_from_us: u64,
    ident: u16,
}

impl<D: NetDevice> Injector<D> {
    fn new(inner: D, cache: PoolCache) -> Self {
        let our_mac = EthernetAddress(inner.info().mac.0);
        Self {
            inner,
            cache,
            our_mac,
            kernel_mac: None,
            flood: None,
            blind: None,
            real_rst_from_kernel: 0,
            real_rst_from_us: 0,
            ident: 0,
        }
    }
}

impl<D> Injector<D> {
    /// A frame the kernel sent us.
    fn saw_from_kernel(&mut self, frame: &[u8]) {
        let Some((ip, tcp)) = parse_tcp(frame) else { return };
        if ip.src_addr != KERNEL_IP || ip.dst_addr != STACK_IP {
            return;
        }
        if let Some(mac) = frame.get(6..12).and_then(|m| <[u8; 6]>::try_from(m).ok()) {
            self.kernel_mac = Some(EthernetAddress(mac));
        }
        if tcp.control == TcpControl::Rst {
            self.real_rst_from_kernel += 1;
        }
        if let Some(blind) = &mut self.blind {
            let key =
                (SocketAddrV4::new(ip.src_addr, tcp.src_port), SocketAddrV4::new(ip.dst_addr, tcp.dst_port));
            let f = blind.flow(key);
            let end = tcp.seq_number + tcp.segment_len();
            f.kernel_end = Some(f.kernel_end.map_or(end, |e| e.max(end)));
            f.fin |= tcp.control == TcpControl::Fin;
            f.established |=
                tcp.control != TcpControl::Syn && tcp.ack_number.is_some() && f.our_end.is_some();
        }
    }

    /// A frame our stack sent the kernel.
    fn saw_from_us(&mut self, frame: &[u8]) {
        let Some((ip, tcp)) = parse_tcp(frame) else { return };
        if ip.src_addr != STACK_IP || ip.dst_addr != KERNEL_IP {
            return;
        }
        if tcp.control == TcpControl::Rst {
            self.real_rst_from_us += 1;
        }
        if let Some(blind) = &mut self.blind {
            let key =
                (SocketAddrV4::new(ip.dst_addr, tcp.dst_port), SocketAddrV4::new(ip.src_addr, tcp.src_port));
            let f = blind.flow(key);
            let end = tcp.seq_number + tcp.segment_len();
            f.our_end = Some(f.our_end.map_or(end, |e| e.max(end)));
            f.fin |= tcp.control == TcpControl::Fin;
        }
    }

    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
    }
}

impl<D: OnTap> OnTap for Injector<D> {
    fn tap(&self) -> &Tap {
        self.inner.tap()
    }
}

impl<D: NetDevice> NetDevice for Injector<D> {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn link(&self) -> Link {
        self.inner.link()
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }

    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        let before = batch.len();
        let mut n = self.inner.rx_burst(queue, cache, batch)?;
        for p in &batch.as_slice()[before..] {
            self.saw_from_kernel(p.data());
        }
        let now = Instant::now();
        let our_mac = self.our_mac;
        if let Some(mut flood) = self.flood.take() {
            for _ in 0..flood.pacer.take(now, batch.remaining()) {
                let (mac, src, seg) = flood.syn();
                let ident = self.next_ident();
                let dst = SocketAddrV4::new(STACK_IP, flood.port);
                match forge(cache, (mac, our_mac), src, dst, &seg, ident).map(|p| batch.push(p)) {
                    Some(Ok(())) => {
                        flood.sent += 1;
                        n += 1;
                    }
                    _ => flood.no_buffer += 1,
                }
            }
            self.flood = Some(flood);
        }
        if let Some(kernel_mac) = self.kernel_mac
            && let Some(mut blind) = self.blind.take()
        {
            // After the kernel's real frames, so our RCV.NXT is at most the `kernel_end` seen.
            for _ in 0..blind.to_us.take(now, batch.remaining()) {
                let Some(key) = blind.pick() else { break };
                let f = blind.flows[&key];
                let (Some(end), Some(peer_end)) = (f.kernel_end, f.our_end) else { break };
                let ports = (key.0.port(), key.1.port());
                let seg = Blind::segment(&mut blind.rng, &mut blind.forged_to_us, ports, end, peer_end);
                let ident = self.next_ident();
                match forge(cache, (kernel_mac, our_mac), key.0, key.1, &seg, ident).map(|p| batch.push(p)) {
                    Some(Ok(())) => {
                        n += 1;
                        if let Some(f) = blind.flows.get_mut(&key) {
                            f.hits_to_us += 1;
                        }
                    }
                    _ => blind.forged_to_us.lost += 1,
                }
            }
            self.blind = Some(blind);
        }
        Ok(n)
    }

    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        for p in batch.as_slice() {
            self.saw_from_us(p.data());
        }
        let n = self.inner.tx_burst(queue, batch)?;
        if let Some(kernel_mac) = self.kernel_mac
            && let Some(mut blind) = self.blind.take()
        {
            // After our real frames, so the kernel's RCV.NXT is at most the `our_end` seen.
            let due = blind.to_kernel.take(Instant::now(), 32);
            let mut forged = PacketBatch::with_capacity(32);
            let mut keys = Vec::with_capacity(due);
            for _ in 0..due {
                let Some(key) = blind.pick() else { break };
                let f = blind.flows[&key];
                let (Some(end), Some(peer_end)) = (f.our_end, f.kernel_end) else { break };
                let ports = (key.1.port(), key.0.port());
                let seg = Blind::segment(&mut blind.rng, &mut blind.forged_to_kernel, ports, end, peer_end);
                self.ident = self.ident.wrapping_add(1);
                match forge(&self.cache, (self.our_mac, kernel_mac), key.1, key.0, &seg, self.ident)
                    .map(|p| forged.push(p))
                {
                    Some(Ok(())) => keys.push(key),
                    _ => blind.forged_to_kernel.lost += 1,
                }
            }
            let sent = if forged.is_empty() { 0 } else { self.inner.tx_burst(queue, &mut forged)? };
            blind.forged_to_kernel.lost += forged.len() as u64;
            forged.clear();
            for key in &keys[..sent.min(keys.len())] {
                if let Some(f) = blind.flows.get_mut(key) {
                    f.hits_to_kernel += 1;
                }
            }
            self.blind = Some(blind);
        }
        Ok(n)
    }
}

/// The `TcpExt` counters of the calling thread's network namespace (empty when unreadable).
fn tcp_ext_counters() -> HashMap<String, u64> {
    let Ok(text) = std::fs::read_to_string("/proc/thread-self/net/netstat") else { return HashMap::new() };
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else { return HashMap::new() };
    names
        .split_whitespace()
        .skip(1)
        .zip(values.split_whitespace().skip(1))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect()
}

/// CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live timespec that clock_gettime fills.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), u32::try_from(ts.tv_nsec).unwrap_or(0))
}

fn kernel_stream(port: u16) -> Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&SocketAddrV4::new(STACK_IP, port).into(), CONNECT_TIMEOUT)
        .map_err(|e| format!("kernel connect to {STACK_IP}:{port}: {e}"))?;
    s.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    Ok(s)
}

// ---------------------------------------------------------------------------------------------
// SYN flood.

const FLOOD_PORT: u16 = 8080;
const FLOOD_RATE: u64 = 50_000;
const FLOOD_MIN: Duration = Duration::from_secs(3);
const SYN_QUEUE: usize = 64;
const CLIENT_THREADS: usize = 20;
const CLIENTS_PER_THREAD: usize = 10;
const CLIENTS: usize = CLIENT_THREADS * CLIENTS_PER_THREAD;

/// Client `id`'s message: 1 to 3000 bytes of its own.
fn message(id: usize) -> Vec<u8> {
    let x = splitmix(0x66_6c6f_6f64 ^ id as u64);
    let len = 1 + usize::try_from(x % 3000).unwrap_or(0);
    (0..len).map(|i| splitmix(x ^ i as u64).to_le_bytes()[3]).collect()
}

/// One legitimate client: connect, send its message, read the echo, half-close and read our FIN.
/// Returns the connect time.
fn flood_client(id: usize) -> Result<Duration, String> {
    let start = Instant::now();
    let mut s = kernel_stream(FLOOD_PORT).map_err(|e| format!("client {id}: {e}"))?;
    let connected = start.elapsed();
    let msg = message(id);
    s.write_all(&msg).map_err(|e| format!("client {id}: write: {e}"))?;
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).map_err(|e| format!("client {id}: read echo: {e}"))?;
    if back != msg {
        return Err(format!("client {id}: the echo of {} bytes differs", msg.len()));
    }
    s.shutdown(Shutdown::Write).map_err(|e| format!("client {id}: shutdown: {e}"))?;
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(0) => Ok(connected),
        Ok(n) => Err(format!("client {id}: {n} bytes after the echo")),
        Err(e) => Err(format!("client {id}: read to our FIN: {e}")),
    }
}

#[test]
fn syn_flood_50k_per_second_200_kernel_clients_get_in_via_cookies() {
    in_private_namespace(|| {
        let tap = open_tap()?;
        let config = stack_config(&tap);
        let pool = new_pool()?;
        let dev = Injector::new(tap, pool.cache());
        let mut host = Host::with_pool(pool, dev, config);
        let l = host
            .stack
            .listen_with(FLOOD_PORT, ListenerConfig { syn_queue: SYN_QUEUE, backlog: 256, syn_cookies: true })
            .map_err(|e| e.to_string())?;

        // The flood starts first and fills the SYN queue with half-open connections that never
        // complete (their SYN-ACKs are retried for over a minute): from then on every SYN, the
        // kernel's included, is answered with a cookie.
        host.dev.flood = Some(Flood::new(FLOOD_PORT, FLOOD_RATE, 0x5eed));
        let flood_start = Instant::now();
        let cpu_start = thread_cpu_time();
        let (mut max_syn_queue, mut max_conns, mut max_arp_pending) = (0usize, 0usize, 0usize);
        host.run(Duration::from_secs(5), "the flood fills the SYN queue", |stack| {
            let q = stack.syn_queue_len(l).unwrap_or(0);
            max_syn_queue = max_syn_queue.max(q);
            Ok(q == SYN_QUEUE && flood_start.elapsed() > Duration::from_millis(200))
        })?;
        let cookies_before_clients = host.stack.stats().syn_cookies_sent;

        let clients_start = Instant::now();
        std::thread::scope(|scope| -> Result<(), String> {
            let kernels: Vec<_> = (0..CLIENT_THREADS)
                .map(|t| {
                    scope.spawn(move || -> Vec<Result<Duration, String>> {
                        // Spread over the flood: a client every 250 ms per thread; a thread stops
                        // at its first failure (every socket operation has a timeout).
                        let mut results = Vec::with_capacity(CLIENTS_PER_THREAD);
                        for i in 0..CLIENTS_PER_THREAD {
                            let pause = if i == 0 { 10 * t as u64 } else { 250 };
                            std::thread::sleep(Duration::from_millis(pause));
                            let r = flood_client(t * CLIENTS_PER_THREAD + i);
                            let failed = r.is_err();
                            results.push(r);
                            if failed {
                                break;
                            }
                        }
                        results
                    })
                })
                .collect();

            struct Echo {
                s: StreamId,
                pending: Vec<u8>,
            }
            let mut streams: Vec<Echo> = Vec::new();
            let (mut accepted, mut closed) = (0usize, 0usize);
            let mut buf = vec![0u8; 16 * 1024];
            let result = host.run(Duration::from_secs(40), "200 clients under the flood", |stack| {
                max_syn_queue = max_syn_queue.max(stack.syn_queue_len(l).unwrap_or(0));
                max_conns = max_conns.max(stack.connection_count());
                max_arp_pending = max_arp_pending.max(stack.arp_pending());
                while let Some(s) = stack.accept(l) {
                    accepted += 1;
                    streams.push(Echo { s, pending: Vec::new() });
                }
                let mut i = 0;
                while i < streams.len() {
                    let e = &mut streams[i];
                    let mut eof = false;
                    match stack.recv(e.s, &mut buf) {
                        Ok(0) => eof = true,
                        Ok(n) => e.pending.extend_from_slice(&buf[..n]),
                        Err(Error::WouldBlock) => {}
                        Err(err) => return Err(format!("echo recv: {err}")),
                    }
                    if !e.pending.is_empty() {
                        match stack.send(e.s, &e.pending) {
                            Ok(n) => drop(e.pending.drain(..n)),
                            Err(Error::WouldBlock) => {}
                            Err(err) => return Err(format!("echo send: {err}")),
                        }
                    }
                    if eof && e.pending.is_empty() {
                        stack.close(e.s).map_err(|e| e.to_string())?;
                        closed += 1;
                        streams.swap_remove(i);
                    } else {
                        i += 1;
                    }
                }
                Ok(kernels.iter().all(|k| k.is_finished())
                    && streams.is_empty()
                    && flood_start.elapsed() >= FLOOD_MIN)
            });
            let flood = host.dev.flood.take().ok_or("no flood")?;
            let flood_time = flood.started.elapsed();
            let cpu = thread_cpu_time().saturating_sub(cpu_start);
            let cpu_share = cpu.as_secs_f64() / flood_time.as_secs_f64();
            let mut connect_times = Vec::with_capacity(CLIENTS);
            let mut failures = Vec::new();
            for k in kernels {
                for r in k.join().map_err(|_| "kernel thread panicked".to_owned())? {
                    match r {
                        Ok(t) => connect_times.push(t),
                        Err(e) => failures.push(e),
                    }
                }
            }
            result?;
            connect_times.sort();
            let st = *host.stack.stats();
            let rate = flood.sent as f64 / flood_time.as_secs_f64();
            println!(
                "flood: {} forged SYNs in {flood_time:.2?} = {rate:.0} SYN/s (target {FLOOD_RATE}), {} not injected for want of a buffer",
                flood.sent, flood.no_buffer
            );
            eprintln!(
                "measured flood rate: {rate:.0} SYN/s; the driver thread ran {cpu:.2?} of {flood_time:.2?} ({:.0}% of a CPU)",
                cpu_share * 100.0
            );
            println!(
                "clients: {} of {CLIENTS} echoed byte-exact in {:.2?} (connect median {:.2?}, max {:.2?}); accepted {accepted}, closed {closed}",
                connect_times.len(),
                clients_start.elapsed(),
                connect_times.get(connect_times.len() / 2).copied().unwrap_or_default(),
                connect_times.last().copied().unwrap_or_default(),
            );
            println!(
                "bounds: SYN queue max {max_syn_queue} (cap {SYN_QUEUE}), live connections max {max_conns}, ARP queue max {max_arp_pending} frames; cookies sent {} ({} before the clients), accepted {}, rejected {}; listen drops {}, ARP drops {}, connections opened {}",
                st.syn_cookies_sent,
                cookies_before_clients,
                st.syn_cookies_accepted,
                st.syn_cookies_rejected,
                st.listen_drops,
                st.arp_dropped,
                st.connections_opened
            );
            if let Some(e) = failures.first() {
                return Err(format!(
                    "{} clients failed ({} succeeded of {CLIENTS}), first: {e}",
                    failures.len(),
                    connect_times.len()
                ));
            }
            if accepted != CLIENTS || closed != CLIENTS {
                return Err(format!("accepted {accepted}, closed {closed} of {CLIENTS}"));
            }
            if max_syn_queue > SYN_QUEUE {
                return Err(format!("the SYN queue reached {max_syn_queue}, over its cap {SYN_QUEUE}"));
            }
            // The queue held forged half-open connections throughout, so every client came in
            // through a cookie.
            if st.syn_cookies_accepted != CLIENTS as u64 {
                return Err(format!("{} cookie connections, expected {CLIENTS}", st.syn_cookies_accepted));
            }
            // A cookie answered (nearly) every forged SYN past the queue; the rest were
            // listen drops.
            let forged_past_queue = flood.sent - SYN_QUEUE as u64;
            if st.syn_cookies_sent + st.listen_drops < forged_past_queue {
                return Err(format!(
                    "{} cookies + {} drops for {forged_past_queue} forged SYNs past the queue",
                    st.syn_cookies_sent, st.listen_drops
                ));
            }
            // No state per forged SYN: the SYN queue, plus the clients at most.
            if max_conns > SYN_QUEUE + CLIENTS || st.connections_opened != (SYN_QUEUE + CLIENTS) as u64 {
                return Err(format!(
                    "{max_conns} live connections at most, {} opened: state per forged SYN",
                    st.connections_opened
                ));
            }
            let arp = config.arp;
            if max_arp_pending > arp.max_pending_hosts * arp.max_pending_packets {
                return Err(format!("{max_arp_pending} frames waited for ARP"));
            }
            if rate < 0.8 * FLOOD_RATE as f64 {
                // Behind the target rate the driver loop never sleeps (SYNs are due at every poll),
                // so a thread that got under 90% of a CPU was starved by other processes: the
                // machine, not the stack, set the rate. Said loudly, not failed.
                if cpu_share < 0.9 {
                    let why = format!(
                        "the flood rate check: {rate:.0} SYN/s, under 80% of {FLOOD_RATE}, but the machine gave the driver thread only {:.0}% of a CPU",
                        cpu_share * 100.0
                    );
                    kernel_support::skip(&why);
                } else {
                    return Err(format!(
                        "the flood reached only {rate:.0} SYN/s, under 80% of {FLOOD_RATE}, with {:.0}% of a CPU",
                        cpu_share * 100.0
                    ));
                }
            }
            Ok(())
        })?;
        host.check_leaks()
    });
}

// ---------------------------------------------------------------------------------------------
// Blind RST/SYN injection.

const BLIND_PORT: u16 = 8081;
const BLIND_CONNS: usize = 20;
const BLIND_BYTES: u64 = 256 * 1024;
/// Each side spreads its bytes over this long.
const BLIND_SEND_TIME: Duration = Duration::from_secs(2);
/// Forged segments per second, each way.
const BLIND_RATE: u64 = 4000;

fn kernel_seed(port: u16) -> u64 {
    0x6b65_726e_0000 ^ u64::from(port)
}

fn our_seed(port: u16) -> u64 {
    0x6f75_7273_0000 ^ u64::from(port)
}

/// A kernel client of the blind test: `BLIND_BYTES` each way at once, ours paced over
/// `BLIND_SEND_TIME`; returns what it read.
fn blind_client() -> Result<Sink, String> {
    let s = kernel_stream(BLIND_PORT)?;
    let port = s.local_addr().map_err(|e| e.to_string())?.port();
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    let writer = std::thread::spawn(move || -> Result<(), String> {
        const STEPS: u64 = 64;
        let mut src = Source::new(kernel_seed(port), BLIND_BYTES);
        for step in 1..=STEPS {
            let until = BLIND_BYTES * step / STEPS;
            while src.produced() < until {
                let left = usize::try_from(until - src.produced()).unwrap_or(usize::MAX);
                let chunk = src.chunk();
                let take = chunk.len().min(left);
                let n = w
                    .write(&chunk[..take])
                    .map_err(|e| format!("port {port}: kernel write after {} bytes: {e}", src.produced()))?;
                src.consume(n);
            }
            std::thread::sleep(BLIND_SEND_TIME / 64);
        }
        w.shutdown(Shutdown::Write).map_err(|e| format!("port {port}: kernel shutdown: {e}"))
    });
    let mut r = s;
    let mut sink = Sink::new(our_seed(port));
    let mut buf = vec![0u8; 64 * 1024];
    let read = loop {
        match r.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => sink.put(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err(format!("port {port}: kernel read after {} bytes: {e}", sink.len)),
        }
    };
    let wrote = writer.join().map_err(|_| "kernel writer panicked".to_owned())?;
    read?;
    wrote?;
    sink.check(BLIND_BYTES, &format!("port {port}: us -> kernel"))?;
    Ok(sink)
}

#[test]
fn blind_rst_and_syn_injection_with_wrong_sequence_numbers_kills_nothing() {
    in_private_namespace(|| {
        let tap = open_tap()?;
        let config = stack_config(&tap);
        let pool = new_pool()?;
        let dev = Injector::new(tap, pool.cache());
        let mut host = Host::with_pool(pool, dev, config);
        let l = host.stack.listen(BLIND_PORT).map_err(|e| e.to_string())?;
        host.dev.blind = Some(Blind::new(BLIND_RATE, 0xb11d));
        let kernel_before = tcp_ext_counters();
        let start = Instant::now();

        struct Conn {
            s: StreamId,
            port: u16,
            at: Instant,
            src: Source,
            sink: Sink,
            shut: bool,
            eof: bool,
        }
        std::thread::scope(|scope| -> Result<(), String> {
            let kernels: Vec<_> = (0..BLIND_CONNS).map(|_| scope.spawn(blind_client)).collect();
            let mut conns: Vec<Conn> = Vec::new();
            let (mut done, mut challenge_acks, mut suppressed) = (0usize, 0u64, 0u64);
            let mut buf = vec![0u8; 64 * 1024];
            let result = host.run(Duration::from_secs(40), "transfers under blind injection", |stack| {
                while let Some(s) = stack.accept(l) {
                    let port = stack.addrs(s).map_err(|e| e.to_string())?.1.port();
                    conns.push(Conn {
                        s,
                        port,
                        at: Instant::now(),
                        src: Source::new(our_seed(port), BLIND_BYTES),
                        sink: Sink::new(kernel_seed(port)),
                        shut: false,
                        eof: false,
                    });
                }
                let mut i = 0;
                while i < conns.len() {
                    let c = &mut conns[i];
                    if let Ok(Some(e)) = stack.error(c.s) {
                        return Err(format!("port {}: our connection failed: {e:?}", c.port));
                    }
                    // Paced: the share of the bytes that the elapsed time allows.
                    let elapsed = c.at.elapsed().as_nanos().min(BLIND_SEND_TIME.as_nanos());
                    let allowed =
                        u64::try_from(u128::from(BLIND_BYTES) * elapsed / BLIND_SEND_TIME.as_nanos())
                            .unwrap_or(BLIND_BYTES);
                    while c.src.produced() < allowed {
                        let left = usize::try_from(allowed - c.src.produced()).unwrap_or(usize::MAX);
                        let chunk = c.src.chunk();
                        let take = chunk.len().min(left);
                        match stack.send(c.s, &chunk[..take]) {
                            Ok(n) => c.src.consume(n),
                            Err(Error::WouldBlock) => break,
                            Err(e) => return Err(format!("port {}: our send: {e}", c.port)),
                        }
                    }
                    if c.src.is_done() && !c.shut {
                        stack.shutdown_write(c.s).map_err(|e| e.to_string())?;
                        c.shut = true;
                    }
                    while !c.eof {
                        match stack.recv(c.s, &mut buf) {
                            Ok(0) => c.eof = true,
                            Ok(n) => c.sink.put(&buf[..n]),
                            Err(Error::WouldBlock) => break,
                            Err(e) => {
                                return Err(format!(
                                    "port {}: our recv after {} bytes: {e}",
                                    c.port, c.sink.len
                                ));
                            }
                        }
                    }
                    if c.eof && c.shut {
                        c.sink.check(BLIND_BYTES, &format!("port {}: kernel -> us", c.port))?;
                        let st = stack.connection_stats(c.s).map_err(|e| e.to_string())?;
                        challenge_acks += st.challenge_acks;
                        suppressed += st.challenge_acks_suppressed;
                        stack.close(c.s).map_err(|e| e.to_string())?;
                        done += 1;
                        conns.swap_remove(i);
                    } else {
                        i += 1;
                    }
                }
                // A kernel client that ended early has failed: stop soon and report its error.
                let all = kernels.iter().all(|k| k.is_finished()) && conns.is_empty();
                let failed =
                    kernels.iter().any(|k| k.is_finished()) && start.elapsed() > Duration::from_secs(30);
                Ok(all || failed)
            });
            let mut failures = Vec::new();
            for k in kernels {
                if let Err(e) = k.join().map_err(|_| "kernel thread panicked".to_owned())? {
                    failures.push(e);
                }
            }
            let elapsed = start.elapsed();
            let blind = host.dev.blind.take().ok_or("no attack")?;
            let kernel_after = tcp_ext_counters();
            let kernel = |k: &str| {
                kernel_after
                    .get(k)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(kernel_before.get(k).copied().unwrap_or(0))
            };
            let (to_us, to_kernel) = (blind.forged_to_us, blind.forged_to_kernel);
            let flows: Vec<Flow> = blind.flows.values().copied().collect();
            let least_to_us = flows.iter().map(|f| f.hits_to_us).min().unwrap_or(0);
            let least_to_kernel = flows.iter().map(|f| f.hits_to_kernel).min().unwrap_or(0);
            println!(
                "{done} of {BLIND_CONNS} connections moved {BLIND_BYTES} bytes each way byte-exact in {elapsed:.2?} under {:.0} forged segments/s each way",
                to_us.total() as f64 / elapsed.as_secs_f64()
            );
            println!("forged towards us: {to_us:?}; towards the kernel: {to_kernel:?}");
            println!(
                "{} connections attacked, each hit at least {least_to_us} times towards us and {least_to_kernel} towards the kernel",
                flows.len()
            );
            println!(
                "real RSTs: from the kernel {}, from us {}; our challenge ACKs {challenge_acks} (suppressed {suppressed}); kernel TCPChallengeACK {}, TCPSYNChallenge {}, TCPACKSkippedChallenge {}",
                host.dev.real_rst_from_kernel,
                host.dev.real_rst_from_us,
                kernel("TCPChallengeACK"),
                kernel("TCPSYNChallenge"),
                kernel("TCPACKSkippedChallenge"),
            );
            if let Some(e) = failures.first() {
                return Err(format!("{} of {BLIND_CONNS} kernel clients failed, first: {e}", failures.len()));
            }
            result?;
            if done != BLIND_CONNS {
                return Err(format!("{done} of {BLIND_CONNS} connections completed"));
            }
            if host.dev.real_rst_from_kernel != 0 || host.dev.real_rst_from_us != 0 {
                return Err("a reset crossed the TAP".into());
            }
            if flows.len() != BLIND_CONNS || least_to_us < 5 || least_to_kernel < 5 {
                return Err("not every connection was attacked both ways".into());
            }
            if !to_us.every_kind()
                || !to_kernel.every_kind()
                || to_us.total() < 1000
                || to_kernel.total() < 1000
            {
                return Err("too few forged segments to mean anything".into());
            }
            // Each in-window RST or SYN draws one (under the limit of 1000 per second per
            // connection); some may fall out of a window that shrank meanwhile.
            let in_window = to_us.rst_in_window + to_us.syn_in_window;
            if challenge_acks == 0 || challenge_acks * 2 < in_window {
                return Err(format!(
                    "our stack sent {challenge_acks} challenge ACKs for {in_window} in-window forgeries"
                ));
            }
            if !kernel_after.is_empty() && kernel("TCPChallengeACK") == 0 {
                return Err("the kernel sent no challenge ACK".into());
            }
            Ok(())
        })?;
        host.check_leaks()
    });
}
