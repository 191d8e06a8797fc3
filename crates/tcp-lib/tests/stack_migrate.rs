//! Connection stealing across per-core stacks: [`Stack::detach`] on one core's stack,
//! [`Stack::adopt`] on another's, with no data lost.
//!
//! Two server stacks (core 0 and core 1) share one MAC and IP address behind one wire, as the
//! per-core stacks of a multi-queue NIC do; a client stack is on the other end. A small frame
//! router stands in for the NIC and the signature registry: a TCP frame from the client goes to
//! the core whose stack holds its 4-tuple (the registry's exact-signature redirect), anything else
//! (ARP, SYNs for the listener) to core 0 (the queue's default channel). Both cores' output is
//! merged onto the wire. Core 1 never sees an ARP frame: it learns the client's MAC from the
//! detached connection.

mod common;

use std::net::SocketAddrV4;
use std::time::Instant;

use common::{A_IP, B_IP, Rng, TICK, config, tcp_in};
use netchannel::dev::{NetDevice, PacketBatch, Pair};
use netchannel::pool::{HugePages, Pool, PoolCache};
use tcp_lib::stack::{Detached, Error, ListenerId, Stack, StreamId};
use tcp_lib::tcp::{self, State};

const PORT: u16 = 80;

/// The server-side `(local, remote)` of a TCP frame from the client, if it is one.
fn tcp_tuple(frame: &[u8]) -> Option<(SocketAddrV4, SocketAddrV4)> {
    let (src, dst, tcp) = tcp_in(frame)?;
    Some((SocketAddrV4::new(dst, tcp.dst_port()), SocketAddrV4::new(src, tcp.src_port())))
}

struct Net {
    _pool: Pool,
    cache: PoolCache,
    dev_client: Pair,
    dev_server: Pair,
    client: Stack,
    cores: [Stack; 2],
    /// Core 0's listener (core 1's is there to reset strays).
    listener: ListenerId,
    now: Instant,
    rng: Rng,
    /// Drop this many per mille of the client's TCP frames in the router.
    drop_permille: u64,
    dropped: u64,
    /// Frames routed to each core.
    routed: [u64; 2],
}

impl Net {
    fn new(drop_permille: u64) -> Self {
        Self::with_tcp(drop_permille, |_| {})
    }

    /// [`new`](Self::new) with `tcp` applied to every stack's TCP configuration.
    fn with_tcp(drop_permille: u64, tcp: impl Fn(&mut tcp::Config)) -> Self {
        let pool = Pool::builder(16 * 1024).hugepages(HugePages::Never).build().unwrap();
        let (dev_client, dev_server) = Pair::builder(&pool).capacity(4096).build().unwrap();
        let cache = pool.cache();
        let now = Instant::now();
        let mut cc = config(&dev_client, A_IP, 1);
        cc.tcp.send_buffer = 64 * 1024;
        tcp(&mut cc.tcp);
        let client = Stack::new(cc, now);
        let core = |seed| {
            let mut c = config(&dev_server, B_IP, seed);
            c.gratuitous_arp = false;
            c.tcp.send_buffer = 64 * 1024;
            tcp(&mut c.tcp);
            let mut s = Stack::new(c, now);
            // Both cores listen, as per-core stacks do: a stray segment would draw a reset.
            let l = s.listen(PORT).unwrap();
            (s, l)
        };
        let ((core0, listener), (core1, _)) = (core(2), core(3));
        let cores = [core0, core1];
        Self {
            _pool: pool,
            cache,
            dev_client,
            dev_server,
            client,
            cores,
            listener,
            now,
            rng: Rng(drop_permille + 5),
            drop_permille,
            dropped: 0,
            routed: [0; 2],
        }
    }

    fn owner(&self, tuple: (SocketAddrV4, SocketAddrV4)) -> Option<usize> {
        self.cores.iter().position(|s| s.contains(tuple.0.into(), tuple.1.into()))
    }

    /// One tick: the client polls its end; the router delivers the server end's frames to the
    /// cores; both cores run timers and transmit onto the wire.
    fn step(&mut self) {
        self.client.poll(self.now, &mut self.dev_client, &self.cache).unwrap();
        let mut batch = PacketBatch::with_capacity(64);
        loop {
            let n = self.dev_server.rx_burst(0, &self.cache, &mut batch).unwrap();
            for packet in batch.drain() {
                let frame = packet.data();
                let core = match tcp_tuple(frame) {
                    Some(tuple) => {
                        if self.drop_permille > 0 && self.rng.next_u64() % 1000 < self.drop_permille {
                            self.dropped += 1;
                            continue;
                        }
                        self.owner(tuple).unwrap_or(0)
                    }
                    None => 0,
                };
                self.routed[core] += 1;
                self.cores[core].receive(self.now, frame);
            }
            if n < 64 {
                break;
            }
        }
        for core in &mut self.cores {
            core.handle_timeout(self.now);
            loop {
                if core.transmit(self.now, &self.cache, &mut batch) == 0 {
                    break;
                }
                self.dev_server.tx_burst(0, &mut batch).unwrap();
                assert!(batch.is_empty(), "the wire refused frames");
            }
        }
        self.now += TICK;
    }

    /// Moves `stream` from core `from` to the other core; returns its new handle there and the
    /// queues (unread, unacknowledged) it carried.
    fn migrate(&mut self, from: usize, stream: StreamId) -> (StreamId, (usize, usize)) {
        let before = self.cores[from].connection_stats(stream).unwrap();
        let detached = self.cores[from].detach(stream).unwrap();
        assert_eq!(self.cores[from].send(stream, b"x"), Err(Error::InvalidHandle), "the old handle is stale");
        assert!(!self.cores[from].contains(detached.local(), detached.remote()));
        let queues = detached.queues();
        // Across a thread, as between cores.
        let detached = std::thread::spawn(move || detached).join().unwrap();
        let to = 1 - from;
        let id = self.cores[to].adopt(detached, self.now).unwrap();
        // The congestion and loss-detection state moves with it, untouched.
        let after = self.cores[to].connection_stats(id).unwrap();
        let state = |s: &tcp::Stats| (s.cwnd, s.ssthresh, s.pacing_rate, s.srtt, s.reordering, s.in_recovery);
        assert_eq!(state(&after), state(&before), "the connection's state after the move");
        (id, queues)
    }
}

/// What [`transfer`] saw.
#[derive(Debug)]
struct Outcome {
    /// At each migration, the connection's (unread, unacknowledged) bytes on the server and the
    /// client's unacknowledged bytes.
    carried: Vec<((usize, usize), usize)>,
    /// Bytes each core read from the client.
    read_by_core: [usize; 2],
}

/// A bulk transfer both ways (`up` bytes client to server, `down` bytes back), with the server's
/// connection moved to the other core at handshake completion (if `at_handshake`) and whenever
/// the server has read past each of `at_read` bytes. Asserts byte-exactness, a clean close and no
/// reset anywhere.
fn transfer(net: &mut Net, up: usize, down: usize, at_handshake: bool, at_read: &[usize]) -> Outcome {
    let mut rng = Rng(up as u64 ^ 0xabcd);
    let ab = rng.bytes(up);
    let ba = rng.bytes(down);
    let client = net.client.connect(SocketAddrV4::new(B_IP, PORT)).unwrap();
    // Data queued before the handshake completes follows the handshake-completing ACK.
    let mut sent_ab = net.client.send(client, &ab).unwrap();
    let (mut sent_ba, mut got_ab, mut got_ba) = (0, Vec::new(), Vec::new());
    let mut server: Option<(usize, StreamId)> = None;
    let mut outcome = Outcome { carried: Vec::new(), read_by_core: [0; 2] };
    let mut next_move = 0;
    let (mut client_shut, mut server_closed, mut client_done) = (false, false, false);
    let mut buf = vec![0u8; 16 * 1024];
    for _ in 0..200_000 {
        net.step();
        if server.is_none()
            && let Some(s) = net.cores[0].accept(net.listener)
        {
            assert_eq!(net.cores[0].state(s).unwrap(), State::Established);
            server = Some((0, s));
            if at_handshake {
                let client_unacked = net.client.queues(client).unwrap().1;
                let (id, queues) = net.migrate(0, s);
                outcome.carried.push((queues, client_unacked));
                server = Some((1, id));
            }
        }
        let Some((core, s)) = server else { continue };
        // Server: read what came, send its part, close after the client's FIN.
        let stack = &mut net.cores[core];
        while !server_closed {
            match stack.recv(s, &mut buf) {
                Ok(0) => {
                    assert_eq!(sent_ba, ba.len());
                    stack.close(s).unwrap();
                    server_closed = true;
                    break;
                }
                Ok(n) if n > 0 => {
                    got_ab.extend_from_slice(&buf[..n]);
                    outcome.read_by_core[core] += n;
                }
                Ok(_) | Err(Error::WouldBlock) => break,
                Err(e) => panic!("server recv: {e}"),
            }
        }
        if !server_closed
            && sent_ba < ba.len()
            && let Ok(n) = stack.send(s, &ba[sent_ba..])
        {
            sent_ba += n;
        }
        // Client: send its part, read, half-close when done, close after the server's FIN.
        if sent_ab < ab.len()
            && let Ok(n) = net.client.send(client, &ab[sent_ab..])
        {
            sent_ab += n;
        }
        if sent_ab == ab.len() && got_ba.len() == ba.len() && !client_shut {
            net.client.shutdown_write(client).unwrap();
            client_shut = true;
        }
        if !client_done {
            loop {
                match net.client.recv(client, &mut buf) {
                    Ok(0) => {
                        net.client.close(client).unwrap();
                        client_done = true;
                        break;
                    }
                    Ok(n) => got_ba.extend_from_slice(&buf[..n]),
                    Err(Error::WouldBlock) => break,
                    Err(e) => panic!("client recv: {e}"),
                }
            }
        }
        // Migrations mid-transfer, with data in flight both ways.
        if !server_closed && next_move < at_read.len() && got_ab.len() >= at_read[next_move] {
            next_move += 1;
            let client_unacked = net.client.queues(client).unwrap().1;
            let (id, queues) = net.migrate(core, s);
            outcome.carried.push((queues, client_unacked));
            server = Some((1 - core, id));
        }
        if client_done && server_closed && net.client.connection_count() == 0 {
            break;
        }
    }
    assert!(
        client_done && server_closed,
        "the transfer did not finish: {} of {up} up, {} of {down} down",
        got_ab.len(),
        got_ba.len()
    );
    assert_eq!(next_move, at_read.len(), "every migration ran");
    assert!(got_ab == ab, "client to server bytes differ");
    assert!(got_ba == ba, "server to client bytes differ");
    for (i, s) in [&net.client, &net.cores[0], &net.cores[1]].into_iter().enumerate() {
        assert_eq!(s.stats().rst_sent, 0, "stack {i} sent a reset: {:?}", s.stats());
    }
    // Run out LAST-ACK/TIME-WAIT: the server side is reclaimed wherever it ended.
    for _ in 0..3000 {
        net.step();
    }
    assert_eq!(net.cores[0].connection_count() + net.cores[1].connection_count(), 0);
    outcome
}

fn assert_send<T: Send>() {}

#[test]
fn detached_is_send() {
    assert_send::<Detached>();
}

#[test]
fn stolen_right_after_the_handshake_carries_on() {
    let mut net = Net::new(0);
    let out = transfer(&mut net, 200_000, 100_000, true, &[]);
    let ((unread, _), client_unacked) = out.carried[0];
    assert!(unread > 0, "the data that came with the handshake moved unread: {out:?}");
    assert!(client_unacked > 0, "the client had data in flight: {out:?}");
    assert_eq!(out.read_by_core, [0, 200_000], "core 1 served it all");
    assert!(net.routed[1] > 0 && net.cores[1].stats().connections_adopted == 1);
    assert_eq!(net.cores[1].stats().arp_requests, 0, "core 1 learned the client's MAC from the move");
}

#[test]
fn migrated_back_and_forth_mid_bulk_transfer() {
    let mut net = Net::new(0);
    let out = transfer(&mut net, 1 << 20, 1 << 20, true, &[256 << 10, 512 << 10, 768 << 10]);
    assert_eq!(out.carried.len(), 4);
    for &((_, unacked), client_unacked) in &out.carried[1..] {
        assert!(unacked > 0 && client_unacked > 0, "data in flight both ways at each move: {out:?}");
    }
    assert!(out.read_by_core[0] > 0 && out.read_by_core[1] > 0, "{out:?}");
    assert_eq!(net.cores[0].stats().connections_detached, 2);
    assert_eq!(net.cores[1].stats().connections_detached, 2);
}

/// A BBR connection moves with its model and its transmission log (the delivery rate samples'
/// and RACK's): adopting it builds no fresh BBR (`Net::migrate` compares the state).
#[test]
fn migrated_bbr_connection_keeps_its_model() {
    let mut net = Net::with_tcp(0, |t| {
        *t = tcp::Config {
            send_buffer: t.send_buffer,
            recv_buffer: t.recv_buffer,
            msl: t.msl,
            min_rto: t.min_rto,
            initial_rto: t.initial_rto,
            ..tcp::Config::bbr()
        };
    });
    let out = transfer(&mut net, 1 << 20, 1 << 20, true, &[256 << 10, 512 << 10]);
    assert_eq!(out.carried.len(), 3);
}

#[test]
fn migrated_with_loss_moves_out_of_order_data() {
    // 5% of the client's frames dropped: holes, out-of-order data and retransmissions around
    // the moves.
    let mut net = Net::new(50);
    let moves: Vec<usize> = (1..8).map(|i| i * (64 << 10)).collect();
    let out = transfer(&mut net, 512 << 10, 512 << 10, false, &moves);
    assert_eq!(out.carried.len(), moves.len());
    assert!(net.dropped > 10, "{}", net.dropped);
    assert!(out.carried.iter().filter(|c| c.0.1 > 0 && c.1 > 0).count() >= 2, "in flight both ways: {out:?}");
}

#[test]
fn adopt_refuses_foreign_and_duplicate_connections() {
    let mut net = Net::new(0);
    let c = net.client.connect(SocketAddrV4::new(B_IP, PORT)).unwrap();
    let mut server = None;
    for _ in 0..100 {
        net.step();
        server = server.or_else(|| net.cores[0].accept(net.listener));
    }
    let s = server.expect("established");
    let d = net.cores[0].detach(s).unwrap();
    assert_eq!(net.cores[0].detach(s).unwrap_err(), Error::InvalidHandle);
    // Not the client's address.
    let e = net.client.adopt(d, net.now).unwrap_err();
    assert_eq!(e.error(), Error::NotLocal);
    let d = e.into_inner();
    // Core 1 takes it; core 0 again refuses nothing, but core 1 refuses a second copy of the
    // 4-tuple: make one with a client stack twin (same seed: same ephemeral port).
    let s1 = net.cores[1].adopt(d, net.now).unwrap();
    let mut twin = Stack::new(config(&net.dev_client, A_IP, 1), net.now);
    let twin_c = twin.connect(SocketAddrV4::new(B_IP, PORT)).unwrap();
    assert_eq!(twin.addrs(twin_c).unwrap(), net.client.addrs(c).unwrap());
    let dc = net.client.detach(c).unwrap();
    let e = twin.adopt(dc, net.now).unwrap_err();
    assert_eq!(e.error(), Error::AddrInUse);
    // Back where it came from, and it still works.
    let c = net.client.adopt(e.into_inner(), net.now).unwrap();
    assert_eq!(net.client.send(c, b"ping").unwrap(), 4);
    let mut buf = [0u8; 8];
    let mut got = None;
    for _ in 0..100 {
        net.step();
        if let Ok(n) = net.cores[1].recv(s1, &mut buf) {
            got = Some(n);
            break;
        }
    }
    assert_eq!(got.map(|n| &buf[..n]), Some(&b"ping"[..]));
    for s in [&net.client, &net.cores[0], &net.cores[1]] {
        assert_eq!(s.stats().rst_sent, 0);
    }
}
