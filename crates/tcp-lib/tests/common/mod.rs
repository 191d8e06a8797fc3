//! Two stacks on the two ends of a `netchannel::dev::Pair`, with virtual time.
#![allow(dead_code, unreachable_pub, missing_docs, reason = "each test uses its own subset of the helpers")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use netchannel::dev::{
    DirectionConfig, FaultConfig, FaultInjector, FaultStats, NetDevice, PacketBatch, Pair, VirtualClock,
};
use netchannel::pool::{HugePages, Pool, PoolCache};
use tcp_lib::stack::{Config, Error, Stack, StreamId};
use tcp_lib::tcp::State;
use tcp_lib::wire::{
    EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Ipv4Cidr, Ipv4Packet, Ipv4Repr, Ipv6Packet,
    Ipv6Repr, Protocol, TcpPacket, TcpRepr,
};

pub const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const TICK: Duration = Duration::from_millis(1);

/// SplitMix64.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next_u64() % u64::try_from(n).unwrap()).unwrap()
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64().to_le_bytes()[0]).collect()
    }
}

pub struct Net {
    pub pool: Pool,
    pub cache: PoolCache,
    pub dev_a: Pair,
    pub dev_b: Pair,
    pub a: Stack,
    pub b: Stack,
    pub now: Instant,
}

pub fn config(dev: &Pair, ip: Ipv4Addr, seed: u64) -> Config {
    let mut c = Config::new(EthernetAddress(dev.info().mac.0), Ipv4Cidr::new(ip, 24).unwrap());
    c.secret_seed = Some(seed);
    c.tcp.msl = Duration::from_secs(1);
    c.tcp.min_rto = Duration::from_millis(200);
    c.tcp.initial_rto = Duration::from_millis(200);
    c
}

impl Net {
    pub fn new() -> Self {
        Self::with(|_| {}, |_| {})
    }

    pub fn with(fa: impl FnOnce(&mut Config), fb: impl FnOnce(&mut Config)) -> Self {
        let pool = Pool::builder(16 * 1024).hugepages(HugePages::Never).build().unwrap();
        let (dev_a, dev_b) = Pair::builder(&pool).capacity(4096).build().unwrap();
        let cache = pool.cache();
        let now = Instant::now();
        let mut ca = config(&dev_a, A_IP, 1);
        let mut cb = config(&dev_b, B_IP, 2);
        fa(&mut ca);
        fb(&mut cb);
        let a = Stack::new(ca, now);
        let b = Stack::new(cb, now);
        Self { pool, cache, dev_a, dev_b, a, b, now }
    }

    pub fn b_addr(port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(B_IP, port)
    }

    /// Polls both stacks once and advances time by one tick.
    pub fn step(&mut self) {
        self.a.poll(self.now, &mut self.dev_a, &self.cache).unwrap();
        self.b.poll(self.now, &mut self.dev_b, &self.cache).unwrap();
        self.now += TICK;
    }

    /// Steps until `done` or `max` steps; returns whether `done` held.
    pub fn run_until(&mut self, max: usize, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        for _ in 0..max {
            if done(self) {
                return true;
            }
            self.step();
        }
        done(self)
    }

    /// Connects A to B's listener on `port` and returns (client, server) once both are
    /// established.
    pub fn open(&mut self, port: u16) -> (StreamId, StreamId) {
        let l = self.b.listen(port).unwrap();
        let c = self.a.connect(Self::b_addr(port)).unwrap();
        let mut s = None;
        assert!(self.run_until(100, |n| {
            s = s.or_else(|| n.b.accept(l));
            s.is_some() && n.a.state(c) == Ok(State::Established)
        }));
        (c, s.unwrap())
    }

    /// Polls A once and takes the frames it sent off the wire before B sees them.
    pub fn frames_from_a(&mut self) -> Vec<Vec<u8>> {
        self.a.poll(self.now, &mut self.dev_a, &self.cache).unwrap();
        let mut batch = PacketBatch::with_capacity(64);
        self.dev_b.rx_burst(0, &self.cache, &mut batch).unwrap();
        batch.drain().map(|p| p.data().to_vec()).collect()
    }

    pub fn mac_a(&self) -> EthernetAddress {
        EthernetAddress(self.dev_a.info().mac.0)
    }

    pub fn mac_b(&self) -> EthernetAddress {
        EthernetAddress(self.dev_b.info().mac.0)
    }
}

/// The source and destination addresses and the TCP segment of an Ethernet/IPv4/TCP frame, if it
/// is one (checksums not verified).
pub fn tcp_in(frame: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr, TcpPacket<&[u8]>)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.protocol() != Protocol::Tcp {
        return None;
    }
    let (src, dst, payload) = (ip.src_addr(), ip.dst_addr(), ip.payload());
    // The same bytes, borrowed from `frame` rather than from the views.
    let start = payload.as_ptr().addr() - frame.as_ptr().addr();
    Some((src, dst, TcpPacket::new_checked(&frame[start..start + payload.len()]).ok()?))
}

/// An Ethernet/IPv4/TCP (or IPv6/TCP) frame carrying `seg` from `src` to `dst`.
pub fn tcp_frame(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: impl Into<SocketAddr>,
    dst: impl Into<SocketAddr>,
    seg: &TcpRepr<'_>,
) -> Vec<u8> {
    let (src, dst) = (src.into(), dst.into());
    match (src.ip(), dst.ip()) {
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = Ipv6Repr {
                src_addr: s,
                dst_addr: d,
                next_header: Protocol::Tcp,
                payload_len: seg.buffer_len(),
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            };
            let eth =
                EthernetRepr { src_addr: src_mac, dst_addr: dst_mac, vlan: None, ethertype: EtherType::Ipv6 };
            let mut buf = vec![0u8; eth.buffer_len(ip.buffer_len())];
            let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
            eth.emit(&mut frame);
            let mut packet = Ipv6Packet::new_unchecked(frame.payload_mut());
            ip.emit(&mut packet);
            seg.emit_v6(&mut TcpPacket::new_unchecked(packet.payload_mut()), s, d);
            buf
        }
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            ipv4_frame(src_mac, dst_mac, s, d, Protocol::Tcp, seg.buffer_len(), |b| {
                seg.emit(&mut TcpPacket::new_unchecked(b), s, d);
            })
        }
        _ => panic!("a frame's ends are of one family"),
    }
}

/// An Ethernet/IPv4 frame from `src` to `dst` whose `len` payload bytes `write` fills.
pub fn ipv4_frame(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: Protocol,
    len: usize,
    write: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        protocol,
        payload_len: len,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 1,
        dont_frag: true,
    };
    let eth = EthernetRepr { src_addr: src_mac, dst_addr: dst_mac, vlan: None, ethertype: EtherType::Ipv4 };
    let mut buf = vec![0u8; eth.buffer_len(ip.buffer_len())];
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut packet);
    write(packet.payload_mut());
    buf
}

/// The faults of one direction of [`lossy_transfer`]: 3% dropped, 1% duplicated, 2% reordered
/// by up to 3 frames, 2 ms of delay, and `corrupt` of the frames with a byte flipped.
pub fn lossy(corrupt: f64) -> DirectionConfig {
    DirectionConfig {
        drop: 0.03,
        corrupt,
        duplicate: 0.01,
        reorder: 0.02,
        reorder_by: 3,
        reorder_timeout: None,
        delay: Duration::from_millis(2),
        rate: None,
    }
}

/// What [`lossy_transfer`] ended with.
pub struct LossyRun {
    pub a: Stack,
    pub b: Stack,
    /// A's connection.
    pub client: StreamId,
    pub got_ab: Vec<u8>,
    pub got_ba: Vec<u8>,
    /// The faults A's device injected, both ways.
    pub faults: FaultStats,
    /// Virtual time the transfer took.
    pub elapsed: Duration,
}

/// `ab` from A to B and `ba` back at once, byte for byte, through a `FaultInjector` on A's
/// device (`faults` each way, seeded with `seed`) on virtual time, until both arrived or 400,000
/// ticks passed; `tweak` adjusts A's and B's configurations. Every receive error but
/// `WouldBlock` panics.
pub fn lossy_transfer(
    seed: u64,
    faults: DirectionConfig,
    ab: &[u8],
    ba: &[u8],
    tweak: impl Fn(&mut Config, &mut Config),
) -> LossyRun {
    let pool = Pool::builder(16 * 1024).hugepages(HugePages::Never).build().unwrap();
    let (pa, pb) = Pair::builder(&pool).capacity(4096).build().unwrap();
    let cache = pool.cache();
    let clock = VirtualClock::new();
    let fault_config = FaultConfig { seed, rx: faults, tx: faults, max_held: 4096 };
    let (mut ca, mut cb) = (config(&pa, A_IP, 1), config(&pb, B_IP, 2));
    tweak(&mut ca, &mut cb);
    let mut dev_a = FaultInjector::with_clock(pa, &pool, fault_config, clock.clone());
    let mut dev_b = pb;
    let start = Instant::now();
    let mut now = start;
    let mut a = Stack::new(ca, now);
    let mut b = Stack::new(cb, now);
    let l = b.listen(80).unwrap();
    let c = a.connect(SocketAddrV4::new(B_IP, 80)).unwrap();
    let (mut sent_ab, mut sent_ba) = (0, 0);
    let (mut got_ab, mut got_ba) = (Vec::new(), Vec::new());
    let mut s = None;
    let mut buf = vec![0u8; 64 * 1024];
    let mut read_all = |stack: &mut Stack, id: StreamId, into: &mut Vec<u8>| loop {
        match stack.recv(id, &mut buf) {
            Ok(n) if n > 0 => into.extend_from_slice(&buf[..n]),
            Ok(_) | Err(Error::WouldBlock) => break,
            Err(e) => panic!("{e}"),
        }
    };
    for _ in 0..400_000 {
        a.poll(now, &mut dev_a, &cache).unwrap();
        b.poll(now, &mut dev_b, &cache).unwrap();
        now += TICK;
        clock.advance(TICK);
        s = s.or_else(|| b.accept(l));
        if sent_ab < ab.len()
            && let Ok(n) = a.send(c, &ab[sent_ab..])
        {
            sent_ab += n;
        }
        if let Some(s) = s {
            if sent_ba < ba.len()
                && let Ok(n) = b.send(s, &ba[sent_ba..])
            {
                sent_ba += n;
            }
            read_all(&mut b, s, &mut got_ab);
        }
        read_all(&mut a, c, &mut got_ba);
        if got_ab.len() == ab.len() && got_ba.len() == ba.len() {
            break;
        }
    }
    LossyRun { a, b, client: c, got_ab, got_ba, faults: dev_a.fault_stats(), elapsed: now - start }
}
