//! Many connections on one core (100k connections per core must be practical).
//!
//! Two tcp-lib stacks on the ends of an in-memory `Pair`, driven by one thread in turn. For each
//! count N of `TCP_MANY_CONNS` (default `1000,10000,100000`), the client stack opens N connections
//! to the server stack (spread over listener ports, 10,000 per port, so that ephemeral ports never
//! run short), both sides send a 64-byte hello on each so that every connection has allocated its
//! buffers, and then `TCP_MANY_ROUNDS` (20,000) echo rounds run on connections picked at random:
//! 64 bytes out, echoed, read back. Reported per N:
//!
//! * the time to open the N connections and exchange the hellos, per connection;
//! * the resident memory the process grew by, per connection (both stacks' ends together: two TCBs,
//!   their slots and table entries, and their first ring allocations);
//! * the wall time per echo round (about 8 segments through both stacks, ACKs included): flat in N
//!   when the per-segment lookup is O(1) and no per-packet work scans the connections.
//!
//! Run: `cargo bench -p netchannels-benches --bench tcp_many`.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use netchannel::dev::{NetDevice, Pair};
use netchannel::pool::{HugePages, Pool, PoolCache};
use tcp_lib::stack::{Config, Error, ListenerConfig, Stack, StreamId};
use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PER_PORT: usize = 10_000;
const FIRST_PORT: u16 = 7000;
const MSG: usize = 64;
/// Connections opened per batch (the rest wait for the batch's handshakes).
const OPEN_BATCH: usize = 1000;

fn env_list(var: &str, default: &str) -> Vec<usize> {
    std::env::var(var)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter_map(|v| v.trim().replace('_', "").parse().ok())
        .collect()
}

/// Resident set size of the process, bytes (from /proc/self/statm).
fn rss() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .unwrap_or(0);
    pages * 4096
}

struct Net {
    a: Stack,
    b: Stack,
    dev_a: Pair,
    dev_b: Pair,
    cache: PoolCache,
}

impl Net {
    fn new(n: usize) -> Result<(Self, Pool), String> {
        let pool = Pool::builder(16 * 1024).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
        let (dev_a, dev_b) = Pair::builder(&pool).capacity(8192).build().map_err(|e| e.to_string())?;
        let cache = pool.cache();
        let config = |dev: &Pair, ip: Ipv4Addr, seed: u64| {
            let mut c = Config::new(EthernetAddress(dev.info().mac.0), Ipv4Cidr::new(ip, 24).expect("a /24"));
            c.max_connections = n + 1024;
            c.secret_seed = Some(seed);
            c.tcp.nodelay = true;
            c.tcp.send_buffer = 16 * 1024;
            c.tcp.recv_buffer = 16 * 1024;
            c
        };
        let now = Instant::now();
        let a = Stack::new(config(&dev_a, A_IP, 1), now);
        let b = Stack::new(config(&dev_b, B_IP, 2), now);
        Ok((Self { a, b, dev_a, dev_b, cache }, pool))
    }

    fn poll(&mut self) -> Result<(), String> {
        let now = Instant::now();
        self.a.poll(now, &mut self.dev_a, &self.cache).map_err(|e| e.to_string())?;
        self.b.poll(now, &mut self.dev_b, &self.cache).map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Reads exactly `want` bytes from `s` on `stack`, polling `net` between tries.
fn read_exact(net: &mut Net, server: bool, s: StreamId, want: usize) -> Result<(), String> {
    let mut buf = [0u8; MSG];
    let mut got = 0;
    for _ in 0..100_000 {
        let stack = if server { &mut net.b } else { &mut net.a };
        match stack.recv(s, &mut buf[..want - got]) {
            Ok(n) => got += n,
            Err(Error::WouldBlock) => {}
            Err(e) => return Err(format!("recv: {e}")),
        }
        if got == want {
            return Ok(());
        }
        net.poll()?;
    }
    Err(format!("{got} of {want} bytes after 100000 polls"))
}

struct Row {
    n: usize,
    open_per_conn: Duration,
    bytes_per_conn: f64,
    round: Duration,
}

fn run(n: usize, rounds: usize) -> Result<Row, String> {
    let (mut net, _pool) = Net::new(n)?;
    let ports = n.div_ceil(PER_PORT);
    let listeners: Vec<_> = (0..ports)
        .map(|i| {
            let port = FIRST_PORT + u16::try_from(i).unwrap_or(0);
            net.b.listen_with(
                port,
                ListenerConfig { syn_queue: 2 * OPEN_BATCH, backlog: 2 * OPEN_BATCH, syn_cookies: true },
            )
        })
        .collect::<Result<_, _>>()
        .map_err(|e| format!("listen: {e}"))?;
    // Resolve each other's MAC first: SYNs queued behind an ARP request are few (bounded).
    net.a.ping(B_IP, 1, 1, b"arp").map_err(|e| format!("ping: {e}"))?;
    for _ in 0..1000 {
        net.poll()?;
        if net.a.take_ping_reply().is_some() {
            break;
        }
    }
    if net.a.arp_lookup(B_IP).is_none() || net.b.arp_lookup(A_IP).is_none() {
        return Err("ARP did not resolve".to_owned());
    }
    let rss_before = rss();
    let start = Instant::now();
    let mut clients = Vec::with_capacity(n);
    let mut servers = Vec::with_capacity(n);
    let hello = [0x68u8; MSG];
    while clients.len() < n {
        let batch = OPEN_BATCH.min(n - clients.len());
        let first = clients.len();
        for i in first..first + batch {
            let port = FIRST_PORT + u16::try_from(i / PER_PORT).unwrap_or(0);
            let s = net.a.connect(SocketAddrV4::new(B_IP, port)).map_err(|e| format!("connect {i}: {e}"))?;
            net.a.send(s, &hello).map_err(|e| format!("send: {e}"))?;
            clients.push(s);
        }
        let want = first + batch;
        for _ in 0..10_000 {
            net.poll()?;
            for &l in &listeners {
                while let Some(s) = net.b.accept(l) {
                    net.b.send(s, &hello).map_err(|e| format!("send: {e}"))?;
                    servers.push(s);
                }
            }
            if servers.len() >= want {
                break;
            }
        }
        if servers.len() < want {
            return Err(format!("{} of {want} connections accepted", servers.len()));
        }
    }
    // Every hello read on both sides: buffers allocated, connections quiet.
    for i in 0..n {
        read_exact(&mut net, true, servers[i], MSG)?;
        read_exact(&mut net, false, clients[i], MSG)?;
    }
    for _ in 0..10 {
        net.poll()?;
    }
    let open = start.elapsed();
    let grown = rss().saturating_sub(rss_before);
    // Servers were accepted in an order that need not match the clients': pair them by address.
    let mut by_addr: std::collections::HashMap<(SocketAddr, SocketAddr), StreamId> =
        std::collections::HashMap::with_capacity(n);
    for &s in &servers {
        let (local, remote) = net.b.addrs(s).map_err(|e| e.to_string())?;
        by_addr.insert((remote, local), s);
    }
    let pairs: Vec<(StreamId, StreamId)> = clients
        .iter()
        .map(|&c| {
            let addrs = net.a.addrs(c).map_err(|e| e.to_string())?;
            by_addr.get(&addrs).map(|&s| (c, s)).ok_or_else(|| "unpaired client".to_owned())
        })
        .collect::<Result<_, _>>()?;
    drop(by_addr);
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let req = [0x71u8; MSG];
    let start = Instant::now();
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (c, s) = pairs[usize::try_from(x % n as u64).unwrap_or(0)];
        net.a.send(c, &req).map_err(|e| format!("send: {e}"))?;
        net.poll()?;
        read_exact(&mut net, true, s, MSG)?;
        net.b.send(s, &req).map_err(|e| format!("send: {e}"))?;
        net.poll()?;
        read_exact(&mut net, false, c, MSG)?;
    }
    let round = start.elapsed() / u32::try_from(rounds.max(1)).unwrap_or(u32::MAX);
    let a = net.a.stats();
    if a.connections_opened < n as u64 {
        return Err(format!("only {} connections opened", a.connections_opened));
    }
    Ok(Row {
        n,
        open_per_conn: open / u32::try_from(n.max(1)).unwrap_or(u32::MAX),
        bytes_per_conn: grown as f64 / n as f64,
        round,
    })
}

fn main() {
    let counts = env_list("TCP_MANY_CONNS", "1000,10000,100000");
    let rounds = env_list("TCP_MANY_ROUNDS", "20000").first().copied().unwrap_or(20_000);
    println!("# tcp-lib: many connections on one core (two stacks, one thread, in-memory Pair)\n");
    println!(
        "| connections | open + hello, per connection | resident memory grown, per connection (both ends) | echo round (64 B each way), median of 3 |"
    );
    println!("|---:|---:|---:|---:|");
    for &n in &counts {
        let mut samples = Vec::new();
        let mut row = None;
        for _ in 0..3 {
            match run(n, rounds) {
                Ok(r) => {
                    samples.push(r.round);
                    row.get_or_insert(r);
                }
                Err(e) => {
                    println!("| {n} | failed: {e} | | |");
                    break;
                }
            }
        }
        if let Some(r) = row {
            samples.sort();
            let median = samples[samples.len() / 2];
            println!(
                "| {} | {:.2} us | {:.0} B | {:.2} us |",
                r.n,
                r.open_per_conn.as_secs_f64() * 1e6,
                r.bytes_per_conn,
                median.as_secs_f64() * 1e6
            );
        }
    }
}
