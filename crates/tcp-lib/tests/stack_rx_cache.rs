//! The receive loop's memory of the frame before (`Stack::poll` takes a flow's next segment
//! without parsing it: `StackStats::rx_continued`) changes nothing but that count. Two servers
//! built alike receive the same frames, one through `poll` (which remembers) and one frame by
//! frame through `receive_with` (which never does); after every step they must have sent the same
//! frames, counted the same, and handed the application the same bytes. The frames are a client's
//! bulk transfers over IPv4 and IPv6 at once, with faults (drops, duplicates, swaps, corrupted
//! bytes, segments re-emitted with another window or PSH, frames of no connection and ARP
//! requests between them) and an application that reads a varying amount in place.

mod common;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::{A_IP, B_IP, Rng, config, tcp_frame};
use netchannel::dev::{NetDevice, PacketBatch, Pair};
use netchannel::pool::{HugePages, Pool, PoolCache};
use tcp_lib::stack::{Config, Stack, StackStats, StreamId};
use tcp_lib::tcp::{Ecn, State};
use tcp_lib::wire::{
    ArpOperation, ArpPacket, ArpRepr, ChecksumPolicy, EtherType, EthernetAddress, EthernetFrame,
    EthernetRepr, Ipv4Packet, Ipv6Cidr, Ipv6Packet, Protocol, TcpPacket, TcpRepr,
};

const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 2);
/// The frames `Stack::poll` takes per receive burst (it sends what is due after each full one).
const POLL_BURST: usize = 32;
/// At most this many frames go to the servers per step: fewer than one `poll` takes in its
/// receive bursts (8 of 32), so that the polled server sees every frame in the step it came.
const FRAMES_PER_STEP: usize = 200;

/// How often each fault strikes a frame, in 1/1000.
#[derive(Clone, Copy, Debug)]
struct Faults {
    drop: usize,
    duplicate: usize,
    swap: usize,
    corrupt: usize,
    rewrite: usize,
    foreign: usize,
    /// Congestion Experienced on a frame, and (a tenth as often) on every frame of a step (the
    /// client asks for ECN).
    ce: usize,
    /// A frame from the servers to the client lost (the client then sends SACK blocks).
    drop_reply: usize,
    /// Bytes after the IP packet (Ethernet padding), which are not payload.
    pad: usize,
    /// The last frame of a step re-emitted as `rewrite` does (its window, say, is then the one
    /// the servers send by).
    rewrite_last: usize,
}

const CLEAN: Faults = Faults {
    drop: 0,
    duplicate: 0,
    swap: 0,
    corrupt: 0,
    rewrite: 0,
    foreign: 0,
    ce: 0,
    drop_reply: 0,
    pad: 0,
    rewrite_last: 0,
};

/// One end of a `Pair` that a stack polls, and the other, where the test reads what the stack
/// sent and writes what it is to receive.
struct Link {
    dev: Pair,
    wire: Pair,
}

impl Link {
    fn new(pool: &Pool) -> Self {
        let (dev, wire) = Pair::builder(pool).capacity(4096).build().unwrap();
        Self { dev, wire }
    }

    fn take(&mut self, cache: &PoolCache) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut batch = PacketBatch::with_capacity(64);
        while self.wire.rx_burst(0, cache, &mut batch).unwrap() > 0 {
            out.extend(batch.drain().map(|p| p.data().to_vec()));
        }
        out
    }

    fn put(&mut self, cache: &PoolCache, frames: &[Vec<u8>]) {
        for chunk in frames.chunks(32) {
            let mut batch = PacketBatch::with_capacity(32);
            for f in chunk {
                let mut p = cache.alloc().unwrap();
                p.extend_from_slice(f).unwrap();
                batch.push(p).unwrap();
            }
            assert_eq!(self.wire.tx_burst(0, &mut batch).unwrap(), chunk.len());
        }
    }
}

/// What a server's application does with the bytes offered in place: takes all, none or some,
/// as its own generator says (both servers' generators start alike, and are asked alike while
/// the servers behave alike).
struct App {
    rng: Rng,
    bytes: Vec<Vec<u8>>,
}

impl App {
    fn take(&mut self, slot: usize, data: &[u8]) -> usize {
        let n = match self.rng.below(4) {
            0 => 0,
            1 => self.rng.below(data.len() + 1),
            _ => data.len(),
        };
        self.bytes[slot].extend_from_slice(&data[..n]);
        n
    }
}

struct Twins {
    /// The pool the links' buffers come from (kept while they are in use).
    _pool: Pool,
    cache: PoolCache,
    client: Stack,
    client_link: Link,
    /// The server that receives through `poll` (remembers the frame before).
    polled: Stack,
    polled_link: Link,
    /// Its twin, which receives frame by frame through `receive_with` (never remembers).
    framed: Stack,
    framed_link: Link,
    apps: [App; 2],
    now: Instant,
    /// Frames from the client not yet given to the servers.
    backlog: Vec<Vec<u8>>,
    rng: Rng,
    faults: Faults,
    mac_client: EthernetAddress,
    mac_server: EthernetAddress,
}

fn with_v6(c: Config, ip: Ipv6Addr) -> Config {
    c.with_ipv6(Ipv6Cidr::new(ip, 64).unwrap())
}

impl Twins {
    fn new(seed: u64, faults: Faults, tweak: impl Fn(&mut Config)) -> Self {
        let pool = Pool::builder(32 * 1024).hugepages(HugePages::Never).build().unwrap();
        let cache = pool.cache();
        let (client_link, polled_link, framed_link) = (Link::new(&pool), Link::new(&pool), Link::new(&pool));
        let now = Instant::now();
        let mut cc = with_v6(config(&client_link.dev, A_IP, 1), A6);
        cc.tcp.ecn = Ecn::On;
        // Both servers take the polled one's MAC (and the same seed): built alike.
        let mut cs = with_v6(config(&polled_link.dev, B_IP, 2), B6);
        tweak(&mut cc);
        tweak(&mut cs);
        let (mac_client, mac_server) = (cc.mac, cs.mac);
        let app = || App { rng: Rng(seed ^ 0xa5a5), bytes: vec![Vec::new(), Vec::new()] };
        Self {
            client: Stack::new(cc, now),
            polled: Stack::new(cs, now),
            framed: Stack::new(cs, now),
            _pool: pool,
            cache,
            client_link,
            polled_link,
            framed_link,
            apps: [app(), app()],
            now,
            backlog: Vec::new(),
            rng: Rng(seed),
            faults,
            mac_client,
            mac_server,
        }
    }

    /// One step: the client polls; up to [`FRAMES_PER_STEP`] of its frames, with faults, go to
    /// both servers; the servers' replies must match, and go back to the client.
    fn step(&mut self, streams: &[(StreamId, StreamId)]) {
        self.client.poll(self.now, &mut self.client_link.dev, &self.cache).unwrap();
        let mut frames = self.client_link.take(&self.cache);
        frames = std::mem::take(&mut self.backlog).into_iter().chain(frames).collect();
        if frames.len() > FRAMES_PER_STEP {
            self.backlog = frames.split_off(FRAMES_PER_STEP);
        }
        let frames = self.with_faults(frames);

        self.polled_link.put(&self.cache, &frames);
        let [app_p, app_f] = &mut self.apps;
        let slot = |id: StreamId| streams.iter().position(|s| s.1 == id).expect("a known stream");
        self.polled
            .poll_with(self.now, &mut self.polled_link.dev, &self.cache, |id, data| {
                app_p.take(slot(id), data)
            })
            .unwrap();
        // As `poll` takes them: bursts of 32, and after a full one (more may wait) what is due
        // goes out before the next.
        let bursts = frames.len().div_ceil(POLL_BURST);
        for (i, burst) in frames.chunks(POLL_BURST).enumerate() {
            for f in burst {
                self.framed.receive_with(self.now, f, &mut |id, data| app_f.take(slot(id), data));
            }
            if burst.len() == POLL_BURST && (i + 1 < bursts || frames.len().is_multiple_of(POLL_BURST)) {
                let mut batch = PacketBatch::with_capacity(POLL_BURST);
                while self.framed.transmit(self.now, &self.cache, &mut batch) > 0 {
                    self.framed_link.dev.tx_burst(0, &mut batch).unwrap();
                }
            }
        }
        self.framed.poll(self.now, &mut self.framed_link.dev, &self.cache).unwrap();

        let replies = self.polled_link.take(&self.cache);
        assert_eq!(replies, self.framed_link.take(&self.cache), "the two servers sent other frames");
        assert_eq!(without_continued(&self.polled.stats()), without_continued(&self.framed.stats()));
        assert_eq!(self.framed.stats().rx_continued, 0);
        for &(_, server) in streams {
            assert_eq!(self.polled.connection_stats(server).ok(), self.framed.connection_stats(server).ok());
        }
        // The applications read what was left in the buffers, as much as their generators say.
        for (i, &(_, server)) in streams.iter().enumerate() {
            let want = self.apps[0].rng.below(64 * 1024);
            assert_eq!(want, self.apps[1].rng.below(64 * 1024));
            let mut buf = vec![0; want];
            let n = self.polled.recv(server, &mut buf).unwrap_or(0);
            assert_eq!(n, self.framed.recv(server, &mut vec![0; want]).unwrap_or(0));
            self.apps[0].bytes[i].extend_from_slice(&buf[..n]);
            self.apps[1].bytes[i].extend_from_slice(&buf[..n]);
        }
        let replies: Vec<_> =
            replies.into_iter().filter(|_| self.rng.below(1000) >= self.faults.drop_reply).collect();
        self.client_link.put(&self.cache, &replies);
        self.now += Duration::from_micros(500);
    }

    fn with_faults(&mut self, frames: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let f = self.faults;
        let roll = |rng: &mut Rng, per_mille: usize| rng.below(1000) < per_mille;
        let ce_step = roll(&mut self.rng, f.ce / 10);
        let mut out = Vec::with_capacity(frames.len());
        let last = frames.len().saturating_sub(1);
        for (i, frame) in frames.into_iter().enumerate() {
            if roll(&mut self.rng, f.foreign) {
                out.push(self.foreign_frame());
            }
            if roll(&mut self.rng, f.drop) {
                continue;
            }
            let mut frame = frame;
            if roll(&mut self.rng, f.corrupt / 4) && frame.get(12..14) == Some(&[0x08, 0]) {
                // The IPv4 header checksum alone (the TCP checksum does not cover it).
                frame[24 + self.rng.below(2)] ^= 1 << self.rng.below(8);
            } else if roll(&mut self.rng, f.corrupt) {
                // Half the time in the headers.
                let span = if self.rng.below(2) == 0 { 80 } else { frame.len() };
                let at = self.rng.below(span.min(frame.len()));
                frame[at] ^= 1 << self.rng.below(8);
            } else if roll(&mut self.rng, f.rewrite) || (i == last && roll(&mut self.rng, f.rewrite_last)) {
                frame = self.rewritten(frame);
            }
            if ce_step || roll(&mut self.rng, f.ce) {
                mark_ce(&mut frame);
            }
            if roll(&mut self.rng, f.pad) {
                let n = 1 + self.rng.below(16);
                frame.extend(std::iter::repeat_n(0xee, n));
            }
            if roll(&mut self.rng, f.duplicate) {
                out.push(frame.clone());
            }
            out.push(frame);
            if out.len() >= 2 && roll(&mut self.rng, f.swap) {
                let n = out.len();
                out.swap(n - 1, n - 2);
            }
        }
        out
    }

    /// A segment to a port nobody listens on (each server answers with a reset), or an ARP
    /// request for the servers' address.
    fn foreign_frame(&mut self) -> Vec<u8> {
        if self.rng.below(2) == 0 {
            let seg = TcpRepr {
                src_port: 999,
                dst_port: 7,
                seq_number: tcp_lib::wire::SeqNumber::new(1),
                ack_number: Some(tcp_lib::wire::SeqNumber::new(2)),
                window_len: 100,
                payload: b"stray",
                ..TcpRepr::default()
            };
            let (src, dst) = (SocketAddr::from((A_IP, 999)), SocketAddr::from((B_IP, 7)));
            return tcp_frame(self.mac_client, self.mac_server, src, dst, &seg);
        }
        let arp = ArpRepr {
            operation: ArpOperation::Request,
            source_hardware_addr: self.mac_client,
            source_protocol_addr: A_IP,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: B_IP,
        };
        let eth = EthernetRepr {
            src_addr: self.mac_client,
            dst_addr: EthernetAddress::BROADCAST,
            vlan: None,
            ethertype: EtherType::Arp,
        };
        let mut buf = vec![0u8; eth.buffer_len(arp.buffer_len())];
        let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.emit(&mut frame);
        arp.emit(&mut ArpPacket::new_unchecked(frame.payload_mut()));
        buf
    }

    /// `frame` re-emitted (valid checksums) with another window, PSH, or timestamp value, if it
    /// is a TCP segment.
    fn rewritten(&mut self, frame: Vec<u8>) -> Vec<u8> {
        let Some((src, dst, mut seg)) = parse_tcp(&frame) else { return frame };
        match self.rng.below(6) {
            // A window that grows, or one that shrinks to a few segments (the servers' sending
            // then waits on it).
            0 => {
                seg.window_len = seg.window_len.wrapping_add(1 + u16::try_from(self.rng.below(100)).unwrap())
            }
            5 => seg.window_len = u16::try_from(self.rng.below(64)).unwrap(),
            1 => seg.push = !seg.push,
            2 => seg.ack_number = seg.ack_number.map(|a| a - 1 - self.rng.below(2000)),
            3 => {
                // Older than TS.Recent: PAWS drops it.
                if let Some(ts) = &mut seg.timestamp {
                    ts.tsval = ts.tsval.wrapping_sub(1000);
                }
            }
            _ => {
                if let Some(ts) = &mut seg.timestamp {
                    ts.tsval = ts.tsval.wrapping_add(1);
                }
            }
        }
        tcp_frame(self.mac_client, self.mac_server, src, dst, &seg)
    }
}

/// Sets an IP frame's ECN bits to Congestion Experienced (and mends the IPv4 header checksum).
fn mark_ce(frame: &mut [u8]) {
    match EthernetFrame::new_checked(&frame[..]).map(|e| e.ethertype()) {
        Ok(EtherType::Ipv4) => {
            frame[15] |= 3;
            Ipv4Packet::new_unchecked(&mut frame[14..]).fill_checksum();
        }
        Ok(EtherType::Ipv6) => frame[15] |= 0x30,
        _ => {}
    }
}

/// The ends and segment of an Ethernet/IP/TCP frame (either family), if it is one.
fn parse_tcp(frame: &[u8]) -> Option<(SocketAddr, SocketAddr, TcpRepr<'_>)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let (src, dst, at, len): (IpAddr, IpAddr, usize, usize) = match eth.ethertype() {
        EtherType::Ipv4 => {
            let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
            if ip.protocol() != Protocol::Tcp {
                return None;
            }
            (ip.src_addr().into(), ip.dst_addr().into(), 14 + ip.header_len(), ip.payload().len())
        }
        EtherType::Ipv6 => {
            let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
            if ip.next_header() != Protocol::Tcp {
                return None;
            }
            (ip.src_addr().into(), ip.dst_addr().into(), 54, ip.payload().len())
        }
        _ => return None,
    };
    let packet = TcpPacket::new_checked(&frame[at..at + len]).ok()?;
    let seg = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => TcpRepr::parse(&packet, s, d, ChecksumPolicy::Trust),
        (IpAddr::V6(s), IpAddr::V6(d)) => TcpRepr::parse_v6(&packet, s, d, ChecksumPolicy::Trust),
        _ => return None,
    }
    .ok()?;
    Some((SocketAddr::new(src, seg.src_port), SocketAddr::new(dst, seg.dst_port), seg))
}

fn without_continued(stats: &StackStats) -> StackStats {
    StackStats { rx_continued: 0, ..*stats }
}

/// Runs a transfer of `bytes` on each of an IPv4 and an IPv6 connection from the client to both
/// servers for `steps` steps, comparing the servers after each; returns the polled server's
/// `rx_continued`, how many bytes arrived and how many segments arrived marked CE.
fn transfer(
    seed: u64,
    faults: Faults,
    bytes: usize,
    steps: usize,
    tweak: impl Fn(&mut Config),
) -> (u64, usize, u64) {
    let mut t = Twins::new(seed, faults, tweak);
    let (lp, lf) = (t.polled.listen(80).unwrap(), t.framed.listen(80).unwrap());
    let clients = [
        t.client.connect(SocketAddr::from((B_IP, 80))).unwrap(),
        t.client.connect(SocketAddr::from((B6, 80))).unwrap(),
    ];
    let mut streams = Vec::new();
    for _ in 0..4000 {
        if streams.len() == 2 {
            break;
        }
        // Handshakes: the same steps, without the application's reads.
        t.step(&streams);
        while let Some(s) = t.polled.accept(lp) {
            assert_eq!(t.framed.accept(lf), Some(s), "both servers accept alike");
            let client = clients
                .iter()
                .copied()
                .find(|&c| t.client.addrs(c).ok().map(|a| a.0) == t.polled.addrs(s).ok().map(|a| a.1))
                .expect("a client of ours");
            streams.push((client, s));
        }
    }
    assert_eq!(streams.len(), 2, "both connections established");
    let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + i / 1000).to_le_bytes()[0]).collect();
    // The servers send back half as much, so that what the client's segments acknowledge and
    // advertise matters to them; the client ends its stream with a FIN.
    let back: Vec<u8> = data[..bytes / 2].iter().map(|b| b ^ 0x5a).collect();
    let (mut sent, mut sent_back) = ([0usize; 2], [0usize; 2]);
    let mut got_back = [Vec::new(), Vec::new()];
    let mut buf = vec![0; 64 * 1024];
    for _ in 0..steps {
        for (i, &(client, server)) in streams.iter().enumerate() {
            if sent[i] < bytes {
                sent[i] += t.client.send(client, &data[sent[i]..]).unwrap_or(0);
                if sent[i] == bytes {
                    t.client.shutdown_write(client).unwrap();
                }
            }
            // A little at a time: the servers send all through the transfer, by the window the
            // client's segments advertise.
            let chunk = &back[sent_back[i]..back.len().min(sent_back[i] + t.rng.below(4000))];
            let n = t.polled.send(server, chunk).unwrap_or(0);
            assert_eq!(n, t.framed.send(server, chunk).unwrap_or(0));
            sent_back[i] += n;
            let n = t.client.recv(client, &mut buf).unwrap_or(0);
            got_back[i].extend_from_slice(&buf[..n]);
        }
        t.step(&streams);
        let done = |i: usize| t.apps[0].bytes[i].len() == bytes && got_back[i].len() == back.len();
        if done(0) && done(1) {
            break;
        }
    }
    for (i, &(_, server)) in streams.iter().enumerate() {
        let got = &t.apps[0].bytes[i];
        assert_eq!(got, &t.apps[1].bytes[i]);
        assert!(data.starts_with(got), "stream {i}: the bytes in order, none lost or doubled");
        assert!(back.starts_with(&got_back[i]), "stream {i}: the servers' bytes in order");
        if got.len() == bytes {
            assert_eq!(t.polled.state(server), Ok(State::CloseWait), "stream {i}: the client's FIN arrived");
        }
    }
    let arrived = t.apps[0].bytes.iter().map(Vec::len).sum();
    eprintln!("seed {seed}: {} segments continued, {arrived} bytes arrived", t.polled.stats().rx_continued);
    let ce = streams.iter().map(|&(_, s)| t.polled.connection_stats(s).unwrap().ce_received).sum();
    (t.polled.stats().rx_continued, arrived, ce)
}

#[test]
fn clean_trains_are_taken_unparsed_and_change_nothing_else() {
    let (continued, arrived, _) = transfer(1, CLEAN, 2_000_000, 2000, |_| {});
    assert_eq!(arrived, 4_000_000, "both transfers complete");
    // ~2760 data segments; all but the first of each train of a flow (a poll brings up to
    // 200 frames, a train at most what the window lets the client send at once).
    assert!(continued > 1500, "only {continued} segments continued a train");
}

#[test]
fn faults_between_and_inside_trains_change_nothing_else() {
    let faults = Faults {
        drop: 20,
        duplicate: 20,
        swap: 20,
        corrupt: 20,
        rewrite: 30,
        foreign: 20,
        ce: 20,
        drop_reply: 20,
        pad: 30,
        rewrite_last: 300,
    };
    for seed in 2..6 {
        let (continued, arrived, ce) = transfer(seed, faults, 600_000, 3000, |_| {});
        assert!(arrived > 0, "seed {seed}: nothing arrived");
        assert!(ce > 0, "seed {seed}: no segment arrived marked CE");
        assert!(continued > 100, "seed {seed}: only {continued} segments continued a train");
    }
}

#[test]
fn checksums_are_verified_on_the_continued_path_too() {
    // Every corrupted byte (payload or header) must be refused exactly as the twin refuses it:
    // the comparison in `step` fails if a continued segment with a bad checksum were taken.
    let faults = Faults { corrupt: 100, ..CLEAN };
    let (continued, _, _) = transfer(9, faults, 400_000, 3000, |_| {});
    assert!(continued > 50, "only {continued} segments continued a train");
}

#[test]
fn without_header_prediction_nothing_is_remembered() {
    let (continued, arrived, _) = transfer(10, CLEAN, 300_000, 2000, |c| c.tcp.header_prediction = false);
    assert_eq!(arrived, 600_000);
    assert_eq!(continued, 0);
}

#[test]
fn faults_change_nothing_else_with_checksums_trusted() {
    // Nothing verifies a checksum here, so nothing but the IP length tells the payload from
    // Ethernet padding (no corrupted bytes: neither server could tell them).
    let faults = Faults {
        drop: 20,
        duplicate: 20,
        swap: 20,
        corrupt: 0,
        rewrite: 30,
        foreign: 20,
        ce: 20,
        drop_reply: 20,
        pad: 50,
        rewrite_last: 300,
    };
    for seed in 20..23 {
        let (continued, arrived, _) =
            transfer(seed, faults, 600_000, 3000, |c| c.checksum = ChecksumPolicy::Trust);
        assert_eq!(arrived, 1_200_000, "seed {seed}: both transfers complete");
        assert!(continued > 100, "seed {seed}: only {continued} segments continued a train");
    }
}

#[test]
fn short_segments_are_not_remembered() {
    // A client whose segments carry at most 400 bytes: below the memory's threshold, so every
    // segment takes the general path, and the servers still agree.
    let (continued, arrived, _) = transfer(30, CLEAN, 200_000, 3000, |c| c.tcp.mss = 400);
    assert_eq!(arrived, 400_000);
    assert_eq!(continued, 0);
}
