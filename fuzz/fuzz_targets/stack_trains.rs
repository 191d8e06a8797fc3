//! The receive loop's memory of the frame before (`stack::rx_cache`: a flow's next segment taken
//! without parsing, and entered into its connection by the short path) against arbitrary trains.
//! A tcp-lib client sends bulk data to two servers built alike; its frames, with fuzzed faults
//! (drops, duplicates, swaps, flipped bits anywhere, truncation, padding, raw frames between
//! them), go to one server through `poll` (bursts from a device: the memory is used) and to the
//! other frame by frame through `receive_with` (never used). After every step the two must have
//! sent the same frames, counted the same (but `rx_continued`), kept the same connection
//! statistics and handed their applications the same bytes; nothing may panic (debug
//! assertions on: the short path asserts the whole of header prediction). Checksums are trusted,
//! so that flipped bits reach the code behind them. The client's data goes through its send ring
//! or by reference in pool buffers, which its software GSO sends in trains of whole buffers,
//! each a frame of its own.
#![no_main]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use netchannel::dev::{NetDevice, PacketBatch, Pair};
use netchannel::pool::{HugePages, Pool, PoolCache};
use tcp_lib::stack::{Config, Stack, StackStats, StreamId};
use tcp_lib::wire::{ChecksumPolicy, EthernetAddress, Ipv4Cidr};

const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The most frames one step hands the servers: fewer than one `poll` takes in its bursts.
const MAX_FRAMES: usize = 200;
/// The frames `Stack::poll` takes per receive burst (it sends what is due after each full one).
const POLL_BURST: usize = 32;

/// What the client sends (made once per process).
static DATA: OnceLock<Vec<u8>> = OnceLock::new();

#[derive(Arbitrary, Debug)]
enum Fault {
    Drop(u8),
    Duplicate(u8),
    Swap(u8),
    Flip { frame: u8, at: u16, bit: u8 },
    Truncate { frame: u8, len: u16 },
    Pad { frame: u8, bytes: u8 },
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// The client writes this many bytes (times 16).
    Send(u16),
    /// The client polls; its frames, with the faults, go to both servers; the servers' replies
    /// go back unless dropped. The applications take `take`/255 of what is offered in place.
    Step { faults: Vec<Fault>, take: u8, drop_replies: bool },
    /// Both servers' applications read up to this many bytes.
    Read(u16),
    /// Time moves on.
    Tick(u8),
    /// The client queues this many bytes (times 16) by reference, in pool buffers of one
    /// segment each, which its software GSO sends in trains, each buffer a frame of its own.
    SendPooled(u16),
}

/// One end of a `Pair` a stack polls, and the other, where the target reads what the stack sent
/// and writes what it is to receive.
struct Link {
    dev: Pair,
    wire: Pair,
}

impl Link {
    fn new(pool: &Pool) -> Option<Self> {
        let (dev, wire) = Pair::builder(pool).capacity(512).build().ok()?;
        Some(Self { dev, wire })
    }

    fn take(&mut self, cache: &PoolCache) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut batch = PacketBatch::with_capacity(64);
        while self.wire.rx_burst(0, cache, &mut batch).is_ok_and(|n| n > 0) {
            out.extend(batch.drain().map(|p| p.data().to_vec()));
        }
        out
    }

    fn put(&mut self, cache: &PoolCache, frames: &[Vec<u8>]) {
        for chunk in frames.chunks(32) {
            let mut batch = PacketBatch::with_capacity(32);
            for f in chunk {
                let Some(mut p) = cache.alloc() else { return };
                if p.extend_from_slice(f).is_ok() {
                    let _ = batch.push(p);
                }
            }
            let _ = self.wire.tx_burst(0, &mut batch);
        }
    }
}

fn without_continued(stats: &StackStats) -> StackStats {
    StackStats { rx_continued: 0, ..*stats }
}

fn apply(frames: &mut Vec<Vec<u8>>, fault: Fault) {
    let pick = |n: u8, len: usize| usize::from(n) % len.max(1);
    let len = frames.len();
    match fault {
        Fault::Raw(bytes) => frames.push(bytes),
        _ if frames.is_empty() => {}
        Fault::Drop(i) => {
            frames.remove(pick(i, len));
        }
        Fault::Duplicate(i) => {
            let f = frames[pick(i, len)].clone();
            frames.insert(pick(i, len), f);
        }
        Fault::Swap(i) => frames.swap(pick(i, len), pick(i.wrapping_add(1), len)),
        Fault::Flip { frame, at, bit } => {
            let f = &mut frames[pick(frame, len)];
            if !f.is_empty() {
                let at = usize::from(at) % f.len();
                f[at] ^= 1 << (bit % 8);
            }
        }
        Fault::Truncate { frame, len: to } => {
            let f = &mut frames[pick(frame, len)];
            f.truncate(usize::from(to) % (f.len() + 1));
        }
        Fault::Pad { frame, bytes } => {
            frames[pick(frame, len)].extend(std::iter::repeat_n(0xee, usize::from(bytes)))
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let Ok(pool) = Pool::builder(1024).hugepages(HugePages::Never).build() else { return };
    let cache = pool.cache();
    let (Some(mut client_link), Some(mut polled_link), Some(mut framed_link)) =
        (Link::new(&pool), Link::new(&pool), Link::new(&pool))
    else {
        return;
    };
    let config = |dev: &Pair, ip: Ipv4Addr| {
        let mut c = Config::new(EthernetAddress(dev.info().mac.0), Ipv4Cidr::new(ip, 24).expect("a /24"));
        c.secret_seed = Some(11);
        c.checksum = ChecksumPolicy::Trust;
        c.tcp.min_rto = Duration::from_millis(200);
        c.tcp.initial_rto = Duration::from_millis(200);
        c
    };
    let mut now = Instant::now();
    let mut client_config = config(&client_link.dev, CLIENT_IP);
    client_config.gso_max_size = 65535;
    let mut client = Stack::new(client_config, now);
    // Both servers take the polled one's MAC and the same seed: built alike.
    let server_config = config(&polled_link.dev, SERVER_IP);
    let mut polled = Stack::new(server_config, now);
    let mut framed = Stack::new(server_config, now);
    let (Ok(lp), Ok(lf)) = (polled.listen(80), framed.listen(80)) else { return };
    let Ok(c) = client.connect(SocketAddr::from((SERVER_IP, 80))) else { return };
    let mut server: Option<StreamId> = None;
    let data = DATA.get_or_init(|| {
        (0..16 * usize::from(u16::MAX)).map(|i| (i * 7 + i / 251).to_le_bytes()[0]).collect()
    });
    let mut sent = 0;
    let mut got = [Vec::new(), Vec::new()];
    // The handshake (three steps when nothing is lost), then the fuzzed steps.
    let handshake = (0..4).map(|_| Op::Step { faults: Vec::new(), take: 255, drop_replies: false });
    for op in handshake.chain(ops.into_iter().take(64)) {
        match op {
            Op::Send(n) => {
                let end = (sent + 16 * usize::from(n)).min(data.len());
                sent += client.send(c, &data[sent..end]).unwrap_or(0);
            }
            Op::SendPooled(n) => {
                let end = (sent + 16 * usize::from(n)).min(data.len());
                let Ok(mss) = client.send_mss(c) else { continue };
                let _ = client.send_pooled_with(c, |room| {
                    let n = mss.min(end - sent).min(room);
                    let mut p = cache.alloc().filter(|_| n > 0)?;
                    p.extend_from_slice(&data[sent..sent + n]).ok()?;
                    let shared = p.into_shared().ok()?;
                    sent += n;
                    Some(shared)
                });
            }
            Op::Read(n) => {
                if let Some(s) = server {
                    let mut a = vec![0u8; usize::from(n)];
                    let mut b = vec![0u8; usize::from(n)];
                    let ra = polled.recv(s, &mut a).unwrap_or(0);
                    let rb = framed.recv(s, &mut b).unwrap_or(0);
                    assert_eq!(
                        (ra, &a[..ra]),
                        (rb, &b[..rb]),
                        "the two servers' applications read other bytes"
                    );
                    got[0].extend_from_slice(&a[..ra]);
                    got[1].extend_from_slice(&b[..rb]);
                }
            }
            Op::Tick(ms) => now += Duration::from_millis(u64::from(ms)),
            Op::Step { faults, take, drop_replies } => {
                let _ = client.poll(now, &mut client_link.dev, &cache);
                let mut frames = client_link.take(&cache);
                for f in faults.into_iter().take(32) {
                    apply(&mut frames, f);
                }
                frames.truncate(MAX_FRAMES);
                frames.retain(|f| f.len() <= 2048);
                polled_link.put(&cache, &frames);
                let share = |data: &[u8]| data.len() * usize::from(take) / 255;
                let [got_p, got_f] = &mut got;
                let _ = polled.poll_with(now, &mut polled_link.dev, &cache, |_, d| {
                    let n = share(d);
                    got_p.extend_from_slice(&d[..n]);
                    n
                });
                // As `poll` takes them: bursts of 32, and after a full one (more may wait) what
                // is due goes out before the next.
                let bursts = frames.len().div_ceil(POLL_BURST);
                for (i, burst) in frames.chunks(POLL_BURST).enumerate() {
                    for f in burst {
                        framed.receive_with(now, f, &mut |_, d| {
                            let n = share(d);
                            got_f.extend_from_slice(&d[..n]);
                            n
                        });
                    }
                    if burst.len() == POLL_BURST
                        && (i + 1 < bursts || frames.len().is_multiple_of(POLL_BURST))
                    {
                        let mut batch = PacketBatch::with_capacity(POLL_BURST);
                        while framed.transmit(now, &cache, &mut batch) > 0 {
                            let _ = framed_link.dev.tx_burst(0, &mut batch);
                            batch.clear();
                        }
                    }
                }
                let _ = framed.poll(now, &mut framed_link.dev, &cache);
                let replies = polled_link.take(&cache);
                assert_eq!(replies, framed_link.take(&cache), "the two servers sent other frames");
                assert_eq!(without_continued(&polled.stats()), without_continued(&framed.stats()));
                assert_eq!(framed.stats().rx_continued, 0);
                if server.is_none() {
                    server = polled.accept(lp);
                    assert_eq!(server, framed.accept(lf), "both servers accept alike");
                }
                if let Some(s) = server {
                    assert_eq!(polled.connection_stats(s).ok(), framed.connection_stats(s).ok());
                }
                assert_eq!(got[0], got[1], "the two servers' applications were handed other bytes");
                if !drop_replies {
                    client_link.put(&cache, &replies);
                }
                now += Duration::from_micros(500);
            }
        }
    }
});
