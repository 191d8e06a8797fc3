//! 1,000 concurrent connections between two stacks, each echoing a random-sized message: the
//! demultiplexer keeps every byte on its own connection.

mod common;

use common::{Net, Rng};
use tcp_lib::stack::{Error, ListenerConfig, StreamId};

const CONNS: usize = 1000;

struct Client {
    id: StreamId,
    msg: Vec<u8>,
    sent: usize,
    got: Vec<u8>,
    closed: bool,
}

#[test]
fn a_thousand_concurrent_echo_connections() {
    let mut net = Net::new();
    let l = net
        .b
        .listen_with(7, ListenerConfig { syn_queue: 2 * CONNS, backlog: 2 * CONNS, syn_cookies: true })
        .unwrap();
    let mut rng = Rng(1000);
    let mut clients: Vec<Client> = (0..CONNS)
        .map(|_| {
            let len = 1 + rng.below(20_000);
            Client {
                id: net.a.connect(Net::b_addr(7)).unwrap(),
                msg: rng.bytes(len),
                sent: 0,
                got: Vec::new(),
                closed: false,
            }
        })
        .collect();
    let ports: std::collections::HashSet<u16> =
        clients.iter().map(|c| net.a.addrs(c.id).unwrap().0.port()).collect();
    assert_eq!(ports.len(), CONNS, "distinct ephemeral ports");
    // Server side: (stream, bytes pending echo, peer finished).
    let mut servers: Vec<(StreamId, Vec<u8>, bool)> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut done = 0;
    for _ in 0..20_000 {
        while let Some(s) = net.b.accept(l) {
            servers.push((s, Vec::new(), false));
        }
        for (s, pending, fin) in &mut servers {
            if *fin && pending.is_empty() {
                continue;
            }
            loop {
                match net.b.recv(*s, &mut buf) {
                    Ok(0) => {
                        *fin = true;
                        break;
                    }
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                    Err(Error::WouldBlock) => break,
                    Err(e) => panic!("server recv: {e}"),
                }
            }
            if !pending.is_empty()
                && let Ok(n) = net.b.send(*s, pending)
            {
                pending.drain(..n);
            }
            if *fin && pending.is_empty() {
                net.b.close(*s).unwrap();
            }
        }
        for c in &mut clients {
            if c.closed {
                continue;
            }
            if c.sent < c.msg.len()
                && let Ok(n) = net.a.send(c.id, &c.msg[c.sent..])
            {
                c.sent += n;
            }
            loop {
                match net.a.recv(c.id, &mut buf) {
                    Ok(0) => panic!("server closed early"),
                    Ok(n) => c.got.extend_from_slice(&buf[..n]),
                    Err(Error::WouldBlock) => break,
                    Err(e) => panic!("client recv: {e}"),
                }
            }
            if c.got.len() >= c.msg.len() {
                assert!(c.got == c.msg, "echo mismatch");
                net.a.close(c.id).unwrap();
                c.closed = true;
                done += 1;
            }
        }
        if done == CONNS && servers.len() == CONNS && servers.iter().all(|(_, p, fin)| *fin && p.is_empty()) {
            break;
        }
        net.step();
    }
    assert_eq!(done, CONNS);
    assert_eq!(servers.len(), CONNS);
    assert_eq!(net.b.stats().syn_cookies_sent, 0);
    // Everything winds down: B reclaims at once, A after TIME-WAIT.
    assert!(net.run_until(5000, |n| n.a.connection_count() == 0 && n.b.connection_count() == 0));
    assert_eq!(net.a.stats().connections_reclaimed, u64::try_from(CONNS).unwrap());
    assert_eq!(net.b.stats().connections_reclaimed, u64::try_from(CONNS).unwrap());
    assert_eq!(net.a.stats().rst_sent + net.b.stats().rst_sent, 0);
}
