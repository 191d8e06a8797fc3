//! The `Endpoint` interface both stacks are driven through, and tcp-lib's endpoint (copying, or
//! reading and writing in place, or sending by reference from pool buffers).

use netchannel::pool::PoolCache;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};
use tcp_lib::stack::{Config, Error as StackError, Stack, StreamId};
use tcp_lib::tcp::State;
use tcp_lib::wire::{EthernetAddress, Ipv4Cidr, Ipv6Cidr};

use crate::device::{Sleep, trust_checksums};
use crate::{CHUNK, MAX_SLEEP};

/// An endpoint: a stack on a device, driven by one thread.
pub(crate) trait Endpoint {
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
pub(crate) fn sleep_on(dev: &mut impl Sleep, timer: Option<Duration>) {
    let t = timer.map_or(MAX_SLEEP, |t| t.min(MAX_SLEEP));
    if !t.is_zero() {
        dev.sleep(t);
    }
}

pub(crate) struct LibEndpoint<'c, D> {
    pub(crate) stack: Stack,
    pub(crate) dev: D,
    pub(crate) cache: &'c PoolCache,
    pub(crate) listener: Option<tcp_lib::stack::ListenerId>,
    /// `Some`: the application reads in place (`Stack::poll_with`).
    pub(crate) in_place: Option<InPlace>,
    /// The application writes in place (`Stack::send_with`, see [`produce`]).
    pub(crate) write_in_place: bool,
    /// The application produces each segment's payload in a pool buffer and queues the buffer
    /// by reference (`Stack::send_pooled_with`, see [`Self::send_by_reference`]).
    pub(crate) by_reference: bool,
    /// Connections go over IPv6: to `fd00::N` for the workload's `10.0.0.N` (the stack has both).
    pub(crate) v6: bool,
}

/// The IPv6 address the `tcp-lib-v6` contender gives the host `10.0.0.N`: `fd00::N`.
pub(crate) fn v6_of(ip: Ipv4Addr) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(ip.octets()[3]))
}

/// An application reading in place: its sink copies each payload, where it lies in the received
/// pool buffer, into the application's own 64 KiB buffer (cyclically), as `read(2)` would, and
/// counts it; `recv` then reports those bytes before reading what the stack buffered. The copy from
/// the frame into the stack's receive ring is what this saves.
pub(crate) struct InPlace {
    pub(crate) app: Vec<u8>,
    pub(crate) at: usize,
    pub(crate) placed: usize,
}

impl InPlace {
    pub(crate) fn new() -> Self {
        Self { app: vec![0; CHUNK], at: 0, placed: 0 }
    }

    pub(crate) fn take(&mut self, mut data: &[u8]) -> usize {
        let n = data.len();
        while !data.is_empty() {
            let k = data.len().min(self.app.len() - self.at);
            copy_in_pieces(&mut self.app[self.at..self.at + k], &data[..k]);
            self.at = (self.at + k) % self.app.len();
            data = &data[k..];
        }
        self.placed += n;
        n
    }
}

/// The largest piece an in-place application copies or fills at once: below glibc's thresholds
/// for `rep movsb` / `rep stosb` (2 KiB and more), which callgrind counts as one instruction per
/// byte (a CPU moves tens of bytes per cycle with them), and above a 1448-byte payload. In pieces,
/// every in-place application, of either stack, runs the same vector loops however large the span
/// it is given, so their instruction counts compare.
const PIECE: usize = 1536;

/// Copies `src` into `dst` (of the same length) in pieces of at most [`PIECE`] bytes.
pub(crate) fn copy_in_pieces(dst: &mut [u8], src: &[u8]) {
    let mut at = 0;
    while at < src.len() {
        let k = (src.len() - at).min(PIECE);
        dst[at..at + k].copy_from_slice(&src[at..at + k]);
        at += k;
    }
}

/// What an application writing in place does with the free space it is offered for the next
/// `want` bytes of the bulk transfer: it produces them there (the same byte the copying writer's
/// 64 KiB source holds, written with a fill in pieces of [`PIECE`] bytes, as a serializer writes
/// its output) and returns how many. The copying writer made its source once and copies it on
/// every write; this one pays for producing every byte.
pub(crate) fn produce(free: &mut [u8], want: usize) -> usize {
    let n = free.len().min(want);
    let mut at = 0;
    while at < n {
        let k = (n - at).min(PIECE);
        free[at..at + k].fill(crate::workload::FILL);
        at += k;
    }
    n
}

pub(crate) fn lib_config(mac: [u8; 6], ip: Ipv4Addr, buf: usize, trust: bool) -> Config {
    let mut c = Config::new(EthernetAddress(mac), Ipv4Cidr::new(ip, 24).expect("a /24"));
    if trust {
        c.checksum = tcp_lib::wire::ChecksumPolicy::Trust;
        c.tx_checksum = false;
    }
    c.tcp.send_buffer = buf;
    c.tcp.recv_buffer = buf;
    c.tcp.nodelay = true;
    c.tcp.min_rto = Duration::from_millis(200);
    // Software GSO (off in `Config::default`): 64 KiB super-segments, the size that measured
    // fewest instructions per byte on the Pair (BENCHMARKS.md); `TCP_BENCH_GSO=0` turns it off.
    c.gso_max_size = std::env::var("TCP_BENCH_GSO").ok().and_then(|v| v.parse().ok()).unwrap_or(65535);
    c
}

impl<'c, D: Sleep> LibEndpoint<'c, D> {
    /// An endpoint with `config`, copying (the application modes are set after).
    fn with_config(dev: D, cache: &'c PoolCache, config: Config, v6: bool) -> Self {
        let stack = Stack::new(config, Instant::now());
        Self {
            stack,
            dev,
            cache,
            listener: None,
            in_place: None,
            write_in_place: false,
            by_reference: false,
            v6,
        }
    }

    pub(crate) fn new(dev: D, cache: &'c PoolCache, ip: Ipv4Addr, buf: usize) -> Self {
        let config = lib_config(dev.info().mac.0, ip, buf, trust_checksums::<D>());
        Self::with_config(dev, cache, config, false)
    }

    /// The same endpoint with the transmit offloads its device offers (a TAP opened with
    /// offloads: TSO super-segments and partial checksums).
    pub(crate) fn with_offloads(dev: D, cache: &'c PoolCache, ip: Ipv4Addr, buf: usize) -> Self {
        let offloads = dev.info().offloads;
        let config =
            lib_config(dev.info().mac.0, ip, buf, trust_checksums::<D>()).with_device_offloads(offloads);
        Self::with_config(dev, cache, config, false)
    }

    /// The same endpoint with IPv6 on (`fd00::N/64` besides `10.0.0.N/24`), connecting over
    /// IPv6: the IPv4 endpoint's twin, for what IPv6 costs in the same harness.
    pub(crate) fn new_v6(dev: D, cache: &'c PoolCache, ip: Ipv4Addr, buf: usize) -> Self {
        let config = lib_config(dev.info().mac.0, ip, buf, trust_checksums::<D>())
            .with_ipv6(Ipv6Cidr::new(v6_of(ip), 64).expect("a /64"));
        Self::with_config(dev, cache, config, true)
    }
}

impl<D> LibEndpoint<'_, D> {
    /// Queues up to `want` bytes on `s` in pool buffers of one segment each, as many as the send
    /// buffer takes (`Stack::send_pooled_with`): every buffer's payload produced in place
    /// ([`produce`], the same fill as the in-place writer's) and handed to the stack by
    /// reference, which sends it with only the headers written in front of it. A buffer is
    /// filled only when a whole segment fits.
    fn send_by_reference(&mut self, s: StreamId, mut want: usize) -> Result<usize, StackError> {
        let mss = self.stack.send_mss(s)?;
        let cache = self.cache;
        self.stack.send_pooled_with(s, |room| {
            let n = mss.min(want);
            if n == 0 || n > room {
                return None;
            }
            let mut p = cache.alloc()?;
            p.set_len(n).ok()?;
            produce(p.data_mut(), n);
            want -= n;
            p.into_shared().ok()
        })
    }
}

pub(crate) fn lib_err(e: StackError) -> String {
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
        let remote = if self.v6 {
            SocketAddr::from((v6_of(*remote.ip()), remote.port()))
        } else {
            SocketAddr::V4(remote)
        };
        self.stack.connect(remote).map_err(lib_err)
    }

    fn established(&self, s: StreamId) -> bool {
        self.stack.state(s).is_ok_and(|st| st == State::Established)
    }

    fn send(&mut self, s: StreamId, data: &[u8]) -> Result<usize, String> {
        let queued = if self.by_reference {
            self.send_by_reference(s, data.len())
        } else if self.write_in_place {
            let mut want = data.len();
            self.stack.send_with(s, want, |free| {
                let n = produce(free, want);
                want -= n;
                n
            })
        } else {
            self.stack.send(s, data)
        };
        match queued {
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
