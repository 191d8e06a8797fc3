//! The ACK of a FIN that moves a connection to CLOSE-WAIT is delayed, as Linux's `tcp_fin` does
//! (ping-pong mode): when the application closes in time it rides on our own FIN, so a
//! request/response connection the server closes costs one segment less; when it does not, the
//! delayed-ACK timer sends it alone. A FIN before any data, and a FIN in FIN-WAIT-2, are
//! acknowledged at once, as Linux does.

mod common;

use std::time::Duration;

use common::{Net, tcp_in};
use netchannel::dev::{NetDevice, PacketBatch};
use tcp_lib::stack::{ListenerId, StreamId};
use tcp_lib::tcp::State;

/// One TCP segment seen on the wire: who sent it (`true`: A, the client) and its flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    from_a: bool,
    syn: bool,
    fin: bool,
    len: usize,
}

/// Polls A, then B, each time moving the frames one sent to the other and noting them.
fn pump(net: &mut Net, seen: &mut Vec<Seen>) {
    for from_a in [true, false] {
        let (stack, dev, peer) = if from_a {
            (&mut net.a, &mut net.dev_a, &mut net.dev_b)
        } else {
            (&mut net.b, &mut net.dev_b, &mut net.dev_a)
        };
        stack.poll(net.now, dev, &net.cache).unwrap();
        let mut batch = PacketBatch::with_capacity(64);
        peer.rx_burst(0, &net.cache, &mut batch).unwrap();
        let frames: Vec<Vec<u8>> = batch.drain().map(|p| p.data().to_vec()).collect();
        let mut out = PacketBatch::with_capacity(64);
        for f in frames {
            if let Some((_, _, t)) = tcp_in(&f) {
                seen.push(Seen { from_a, syn: t.syn(), fin: t.fin(), len: t.payload().len() });
            }
            let mut p = net.cache.alloc().unwrap();
            p.extend_from_slice(&f).unwrap();
            out.push(p).unwrap();
        }
        dev.tx_burst(0, &mut out).unwrap();
    }
    net.now += Duration::from_micros(100);
}

/// A connection from A to B's listener, established and accepted, its segments noted.
fn open(net: &mut Net, listener: ListenerId, seen: &mut Vec<Seen>) -> (StreamId, StreamId) {
    let client = net.a.connect(Net::b_addr(80)).unwrap();
    for _ in 0..20 {
        pump(net, seen);
        if let Some(server) = net.b.accept(listener)
            && net.a.state(client) == Ok(State::Established)
        {
            return (client, server);
        }
    }
    panic!("the connection did not open");
}

/// The server answers a 64-byte request and closes; the client reads the end of stream and
/// closes when `client_closes`. Returns the client's handle.
fn transaction(net: &mut Net, listener: ListenerId, seen: &mut Vec<Seen>, client_closes: bool) -> StreamId {
    let (client, server) = open(net, listener, seen);
    assert_eq!(net.a.send(client, &[1; 64]), Ok(64));
    let mut buf = [0u8; 128];
    let mut answered = false;
    for _ in 0..20 {
        pump(net, seen);
        if !answered && net.b.recv(server, &mut buf) == Ok(64) {
            assert_eq!(net.b.send(server, &[2; 64]), Ok(64));
            net.b.close(server).unwrap();
            answered = true;
        }
        if answered && net.a.state(client) == Ok(State::CloseWait) {
            assert_eq!(net.a.recv(client, &mut buf), Ok(64));
            assert_eq!(net.a.recv(client, &mut buf), Ok(0), "the end of the stream");
            if client_closes {
                net.a.close(client).unwrap();
            }
            return client;
        }
    }
    panic!("the transaction did not finish");
}

#[test]
fn the_ack_of_the_servers_fin_rides_on_the_clients_fin() {
    let mut net = Net::with(|c| c.tcp.nodelay = true, |c| c.tcp.nodelay = true);
    let listener = net.b.listen(80).unwrap();
    let mut seen = Vec::new();
    transaction(&mut net, listener, &mut seen, true);
    for _ in 0..10 {
        pump(&mut net, &mut seen);
    }
    let bare_acks_from_a_after_fin = seen
        .iter()
        .skip_while(|s| !s.fin || s.from_a)
        .filter(|s| s.from_a && !s.fin && !s.syn && s.len == 0)
        .count();
    assert_eq!(bare_acks_from_a_after_fin, 0, "{seen:?}");
    // SYN, SYN-ACK, ACK, request, response + FIN, FIN (+ ACK), ACK.
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert_eq!(net.b.time_wait_count(), 1, "the server's FIN was acknowledged");
    assert_eq!(net.b.connection_count(), 1, "only the TIME-WAIT record is left");
}

#[test]
fn the_delayed_ack_of_a_fin_leaves_alone_when_the_application_does_not_close() {
    let mut net = Net::with(|c| c.tcp.nodelay = true, |c| c.tcp.nodelay = true);
    let delay = net.a.config().tcp.delayed_ack.expect("delayed ACKs are on by default");
    let listener = net.b.listen(80).unwrap();
    let mut seen = Vec::new();
    let client = transaction(&mut net, listener, &mut seen, false);
    let fin_at = net.now;
    let after_fin = seen.len();
    // Nothing from A before the delay has passed ...
    while net.now + Duration::from_millis(1) < fin_at + delay {
        pump(&mut net, &mut seen);
    }
    assert_eq!(seen.len(), after_fin, "no ACK before the delay: {:?}", &seen[after_fin..]);
    // ... then the ACK, alone; the server's FIN is acknowledged, so it is not retransmitted
    // (its RTO is 200 ms).
    for _ in 0..4000 {
        pump(&mut net, &mut seen);
    }
    let acks: Vec<_> = seen[after_fin..].iter().filter(|s| s.from_a).collect();
    assert_eq!(acks.len(), 1, "{:?}", &seen[after_fin..]);
    assert!(!acks[0].fin && acks[0].len == 0);
    assert!(seen[after_fin..].iter().all(|s| s.from_a), "no retransmission: {:?}", &seen[after_fin..]);
    assert_eq!(net.a.state(client), Ok(State::CloseWait));
}

#[test]
fn without_delayed_acks_the_fin_is_acknowledged_at_once() {
    let mut net = Net::with(
        |c| {
            c.tcp.nodelay = true;
            c.tcp.delayed_ack = None;
        },
        |c| c.tcp.nodelay = true,
    );
    let listener = net.b.listen(80).unwrap();
    let mut seen = Vec::new();
    transaction(&mut net, listener, &mut seen, true);
    for _ in 0..10 {
        pump(&mut net, &mut seen);
    }
    // The ACK of the server's FIN went out alone, before the client's FIN.
    assert_eq!(seen.len(), 8, "{seen:?}");
    let after = seen.iter().skip_while(|s| !s.fin || s.from_a).nth(1).copied();
    assert_eq!(after, Some(Seen { from_a: true, syn: false, fin: false, len: 0 }), "{seen:?}");
}

#[test]
fn a_fin_before_any_data_is_acknowledged_at_once() {
    // As Linux does (packetdrill's close/close-remote-fin-then-close.pkt): its ACK timeout
    // estimate is 0 until data has arrived.
    let mut net = Net::with(|c| c.tcp.nodelay = true, |c| c.tcp.nodelay = true);
    let listener = net.b.listen(80).unwrap();
    let mut seen = Vec::new();
    let (client, server) = open(&mut net, listener, &mut seen);
    net.b.close(server).unwrap();
    let before = seen.len();
    pump(&mut net, &mut seen);
    pump(&mut net, &mut seen);
    assert_eq!(net.a.state(client), Ok(State::CloseWait));
    let after: Vec<_> = seen[before..].to_vec();
    assert_eq!(
        after,
        [
            Seen { from_a: false, syn: false, fin: true, len: 0 },
            Seen { from_a: true, syn: false, fin: false, len: 0 }
        ],
        "the FIN and its ACK, in the next poll"
    );
}
