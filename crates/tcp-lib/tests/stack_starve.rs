//! Nobody can starve the stack of memory: 2,000 connections that write to a server whose reader
//! never reads, and 300 peers that stop acknowledging what the server sends them, while other
//! clients must still be served byte-exact. The server's connection buffers stay under its
//! budget ([`Config::buffer_memory`] plus the guaranteed storage of each ring), the counters say
//! what the budget refused, and the packet pool never runs short (between polls, pool buffers
//! are only on the wire).

mod common;

use std::collections::HashSet;

use common::{Net, Rng, TICK, tcp_in};
use netchannel::dev::{NetDevice, PacketBatch};
use tcp_lib::stack::{Config, Error, ListenerConfig, StreamId};
use tcp_lib::tcp::BufferBudget;

/// Clients that write `WRITE` bytes each to a server that never reads them.
const SILENT: usize = 2000;
/// Clients whose ACKs never reach the server, which sends them `WRITE` bytes each.
const MUTE: usize = 300;
/// Clients that must be served: echo, byte-exact.
const GOOD: usize = 16;
const WRITE: usize = 32 * 1024;
const GOOD_MESSAGE: usize = 20_000;
/// The server's budget.
const BUDGET: usize = 8 << 20;
const PAIR_CAPACITY: usize = 4096;
const POOL: u32 = 16 * 1024;

/// The client's port of a TCP frame from the client, if it is one.
fn client_port(frame: &[u8]) -> Option<u16> {
    Some(tcp_in(frame)?.2.src_port())
}

struct Good {
    id: StreamId,
    msg: Vec<u8>,
    sent: usize,
    got: Vec<u8>,
}

struct Run {
    net: Net,
    /// Client ports whose frames the server never gets (once muted).
    muted: HashSet<u16>,
    /// Frames from muted clients dropped.
    dropped: usize,
    /// The most pool buffers outstanding after a step.
    max_outstanding: usize,
}

impl Run {
    /// Polls the client, gives the server every frame but the muted ones, polls the server, and
    /// advances time.
    fn step(&mut self) {
        let net = &mut self.net;
        net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
        let mut rx = PacketBatch::with_capacity(32);
        loop {
            let n = net.dev_b.rx_burst(0, &net.cache, &mut rx).unwrap();
            for packet in rx.drain() {
                if client_port(packet.data()).is_some_and(|p| self.muted.contains(&p)) {
                    self.dropped += 1;
                } else {
                    net.b.receive(net.now, packet.data());
                }
            }
            if n == 0 {
                break;
            }
        }
        net.b.poll(net.now, &mut net.dev_b, &net.cache).unwrap();
        net.now += TICK;
        self.max_outstanding = self.max_outstanding.max(net.pool.audit().outstanding);
    }
}

/// Writes as much of `data[*sent..]` as the stack takes.
fn write(stack: &mut tcp_lib::stack::Stack, id: StreamId, data: &[u8], sent: &mut usize) {
    while *sent < data.len() {
        match stack.send(id, &data[*sent..]) {
            Ok(n) => *sent += n,
            Err(Error::WouldBlock) => break,
            Err(e) => panic!("send: {e}"),
        }
    }
}

#[test]
fn silent_readers_and_mute_peers_do_not_starve_other_clients() {
    let client_config = |c: &mut Config| c.buffer_memory = usize::MAX / 2;
    let server_config = |c: &mut Config| c.buffer_memory = BUDGET;
    let net = Net::with(client_config, server_config);
    assert_eq!(net.pool.buffers(), POOL, "the sizing below assumes the common pool");
    let mut run = Run { net, muted: HashSet::new(), dropped: 0, max_outstanding: 0 };
    let net = &mut run.net;
    let backlog = 2 * (SILENT + MUTE + GOOD);
    let l = net.b.listen_with(7, ListenerConfig { syn_queue: backlog, backlog, syn_cookies: true }).unwrap();
    let mut rng = Rng(21);

    // The attack: every client connects; the silent ones write, the mute ones will read nothing
    // the server gets to hear about.
    let silent: Vec<StreamId> = (0..SILENT).map(|_| net.a.connect(Net::b_addr(7)).unwrap()).collect();
    let mute: Vec<StreamId> = (0..MUTE).map(|_| net.a.connect(Net::b_addr(7)).unwrap()).collect();
    let mute_ports: HashSet<u16> = mute.iter().map(|&id| net.a.addrs(id).unwrap().0.port()).collect();
    let payload = rng.bytes(WRITE);
    let mut silent_sent = vec![0; SILENT];
    let mut accepted: Vec<(StreamId, std::net::SocketAddr)> = Vec::new();
    for _ in 0..3000 {
        let net = &mut run.net;
        while let Some(s) = net.b.accept(l) {
            accepted.push((s, net.b.addrs(s).unwrap().1));
        }
        for (i, &id) in silent.iter().enumerate() {
            write(&mut net.a, id, &payload, &mut silent_sent[i]);
        }
        if accepted.len() == SILENT + MUTE {
            break;
        }
        run.step();
    }
    assert_eq!(accepted.len(), SILENT + MUTE, "every attacking connection was accepted");
    // From now on the mute clients' ACKs are lost; the server writes to them.
    run.muted.clone_from(&mute_ports);
    let mut to_mute: Vec<(StreamId, usize)> = accepted
        .iter()
        .filter(|(_, remote)| mute_ports.contains(&remote.port()))
        .map(|&(s, _)| (s, 0))
        .collect();
    assert_eq!(to_mute.len(), MUTE);
    for _ in 0..2000 {
        let net = &mut run.net;
        for (i, &id) in silent.iter().enumerate() {
            write(&mut net.a, id, &payload, &mut silent_sent[i]);
        }
        for (id, sent) in &mut to_mute {
            write(&mut net.b, *id, &payload, sent);
        }
        run.step();
    }
    let attacked = run.net.b.stats();
    let budget_bound = (BUDGET + 2 * BufferBudget::GUARANTEED * (SILENT + MUTE + GOOD)) as u64;
    eprintln!(
        "under attack: buffer memory {} (peak {}, bound {budget_bound}), rx clamps {}, tx clamps {}, \
         rx segments dropped {}, sends refused {}, muted frames dropped {}",
        attacked.buffer_memory,
        attacked.buffer_memory_peak,
        attacked.rx_buffer_clamps,
        attacked.tx_buffer_clamps,
        attacked.rx_memory_dropped,
        attacked.tx_memory_refused,
        run.dropped
    );

    // Now the clients that must be served, while the attack goes on.
    let net = &mut run.net;
    let mut good: Vec<Good> = (0..GOOD)
        .map(|_| Good {
            id: net.a.connect(Net::b_addr(7)).unwrap(),
            msg: rng.bytes(GOOD_MESSAGE),
            sent: 0,
            got: Vec::new(),
        })
        .collect();
    let good_ports: HashSet<u16> = good.iter().map(|g| net.a.addrs(g.id).unwrap().0.port()).collect();
    // Server side of the good clients: (stream, bytes to echo).
    let mut servers: Vec<(StreamId, Vec<u8>)> = Vec::new();
    let mut buf = vec![0; 64 * 1024];
    let mut steps = 0;
    while good.iter().any(|g| g.got.len() < GOOD_MESSAGE) && steps < 20_000 {
        let net = &mut run.net;
        while let Some(s) = net.b.accept(l) {
            let remote = net.b.addrs(s).unwrap().1;
            assert!(good_ports.contains(&remote.port()), "only good clients connect now");
            servers.push((s, Vec::new()));
        }
        for (s, pending) in &mut servers {
            loop {
                match net.b.recv(*s, &mut buf) {
                    Ok(0) | Err(Error::WouldBlock) => break,
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                    Err(e) => panic!("server recv: {e}"),
                }
            }
            let mut sent = 0;
            write(&mut net.b, *s, pending, &mut sent);
            pending.drain(..sent);
        }
        for g in &mut good {
            let msg = std::mem::take(&mut g.msg);
            write(&mut net.a, g.id, &msg, &mut g.sent);
            g.msg = msg;
            loop {
                match net.a.recv(g.id, &mut buf) {
                    Ok(0) | Err(Error::WouldBlock) => break,
                    Ok(n) => g.got.extend_from_slice(&buf[..n]),
                    Err(e) => panic!("client recv: {e}"),
                }
            }
        }
        for (i, &id) in silent.iter().enumerate() {
            write(&mut net.a, id, &payload, &mut silent_sent[i]);
        }
        for (id, sent) in &mut to_mute {
            if *sent < WRITE {
                write(&mut net.b, *id, &payload, sent);
            }
        }
        run.step();
        steps += 1;
    }
    for (i, g) in good.iter().enumerate() {
        assert!(
            g.got == g.msg,
            "good client {i} got {} of {} bytes back, or other bytes",
            g.got.len(),
            g.msg.len()
        );
    }
    let st = run.net.b.stats();
    eprintln!(
        "good clients served in {steps} steps; buffer memory peak {} (bound {budget_bound}); rx clamps {}, \
         tx clamps {}, rx segments dropped {}, sends refused {}; most pool buffers outstanding {} of {POOL}",
        st.buffer_memory_peak,
        st.rx_buffer_clamps,
        st.tx_buffer_clamps,
        st.rx_memory_dropped,
        st.tx_memory_refused,
        run.max_outstanding
    );
    // Memory stayed bounded, far below what the buffers would hold without the budget
    // (2,000 × 32 KiB received plus 300 × 32 KiB unacknowledged).
    assert!(
        st.buffer_memory_peak <= budget_bound,
        "peak {} over the bound {budget_bound}",
        st.buffer_memory_peak
    );
    // The budget refused, and said so.
    assert!(st.rx_buffer_clamps > 0 && st.tx_buffer_clamps > 0, "{st:?}");
    assert!(st.tx_memory_refused > 0, "{st:?}");
    // Under pressure a window offers only what its ring can take (a SYN-ACK included): what the
    // attack's first windows promised was dropped then, and nothing since.
    assert!(attacked.rx_memory_dropped > 0, "{attacked:?}");
    assert_eq!(st.rx_memory_dropped, attacked.rx_memory_dropped, "the good clients were promised too much");
    assert!(run.dropped > 0, "the mute peers' frames were dropped");
    // The pool never ran short: between polls only the two wires hold buffers.
    assert!(run.max_outstanding <= 2 * PAIR_CAPACITY, "{} outstanding", run.max_outstanding);
}
