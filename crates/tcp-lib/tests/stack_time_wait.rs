//! Released connections in TIME-WAIT become compact records: their slots are reclaimed, the
//! TIME-WAIT table answers a retransmitted FIN with an ACK and restarts 2·MSL, and the records
//! leave after 2·MSL of virtual time.

mod common;

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::time::Duration;

use common::{Net, TICK, tcp_in};
use netchannel::dev::{NetDevice, PacketBatch};
use tcp_lib::stack::StreamId;
use tcp_lib::tcp::State;
use tcp_lib::wire::{ChecksumPolicy, SeqNumber, TcpControl, TcpRepr};

const N: usize = 8;

/// A TCP frame's `(src, dst, control, seq, ack, payload length)`.
type Seg = (SocketAddrV4, SocketAddrV4, TcpControl, SeqNumber, Option<SeqNumber>, usize);

fn parse(frame: &[u8]) -> Option<Seg> {
    let (src, dst, tcp) = tcp_in(frame)?;
    let repr = TcpRepr::parse(&tcp, src, dst, ChecksumPolicy::Verify).ok()?;
    Some((
        SocketAddrV4::new(src, repr.src_port),
        SocketAddrV4::new(dst, repr.dst_port),
        repr.control,
        repr.seq_number,
        repr.ack_number,
        repr.payload.len(),
    ))
}

/// One step with A driven by hand: A receives what B sent, runs its timers and transmits; B
/// polls as usual. Returns A's TCP segments, which reach B only when `forward`. FINs from B are
/// noted in `fins` as the ACK number that acknowledges them, by A's `(local, remote)`.
fn step(
    net: &mut Net,
    forward: bool,
    fins: &mut HashMap<(SocketAddrV4, SocketAddrV4), SeqNumber>,
) -> Vec<Seg> {
    let now = net.now;
    let mut batch = PacketBatch::with_capacity(64);
    net.dev_a.rx_burst(0, &net.cache, &mut batch).unwrap();
    for packet in batch.drain() {
        if let Some((src, dst, TcpControl::Fin, seq, _, len)) = parse(packet.data()) {
            fins.insert((dst, src), seq + len + 1);
        }
        net.a.receive(now, packet.data());
    }
    net.a.handle_timeout(now);
    let mut sent = Vec::new();
    while net.a.transmit(now, &net.cache, &mut batch) > 0 {
        sent.extend(batch.as_slice().iter().filter_map(|p| parse(p.data())));
        if forward {
            net.dev_a.tx_burst(0, &mut batch).unwrap();
        }
        batch.clear();
    }
    net.b.poll(now, &mut net.dev_b, &net.cache).unwrap();
    net.now += TICK;
    sent
}

fn bare_acks(segs: &[Seg]) -> Vec<Seg> {
    segs.iter().filter(|s| s.2 == TcpControl::None && s.4.is_some() && s.5 == 0).copied().collect()
}

#[test]
fn released_time_wait_connections_become_records() {
    // MSL 1 s (common::config): 2·MSL is 2000 steps.
    let mut net = Net::new();
    let l = net.b.listen(80).unwrap();
    let cs: Vec<StreamId> = (0..N).map(|_| net.a.connect(Net::b_addr(80)).unwrap()).collect();
    let tuples: Vec<(std::net::SocketAddr, std::net::SocketAddr)> =
        cs.iter().map(|&c| net.a.addrs(c).unwrap()).collect();
    let mut ss = Vec::new();
    assert!(net.run_until(500, |n| {
        while let Some(s) = n.b.accept(l) {
            ss.push(s);
        }
        ss.len() == N && cs.iter().all(|&c| n.a.state(c) == Ok(State::Established))
    }));

    // A closes first and releases its handles: FIN-WAIT-2 once B acknowledges.
    for &c in &cs {
        net.a.close(c).unwrap();
    }
    assert!(net.run_until(100, |n| ss.iter().all(|&s| n.b.state(s) == Ok(State::CloseWait))));
    assert_eq!(net.a.time_wait_count(), 0);

    // B closes; its FINs take A to TIME-WAIT, and A's ACKs of them are lost.
    for &s in &ss {
        net.b.close(s).unwrap();
    }
    let mut fins = HashMap::new();
    let mut lost = Vec::new();
    for _ in 0..20 {
        lost.extend(bare_acks(&step(&mut net, false, &mut fins)));
        if net.a.time_wait_count() == N {
            break;
        }
    }
    assert_eq!(net.a.time_wait_count(), N);
    assert_eq!(lost.len(), N, "one ACK per FIN");
    for &(src, dst, _, _, ack, _) in &lost {
        assert_eq!(Some(fins[&(src, dst)]), ack);
    }
    // Every slot went back: the connections are records now. A new connection reuses a slot (its
    // handle's generation has moved on; handles show no more than their `Debug`), and its port is
    // none of the TIME-WAIT tuples'.
    assert_eq!(net.a.connection_count(), N, "the records are still connections");
    assert_eq!(net.a.stats().connections_reclaimed, u64::try_from(N).unwrap());
    for &(local, remote) in &tuples {
        assert!(net.a.contains(local, remote), "TIME-WAIT tuples keep their steering");
    }
    let probe = net.a.connect(Net::b_addr(80)).unwrap();
    let shown = format!("{probe:?}");
    assert!(shown.contains("generation: 1"), "a reclaimed slot is reused: {shown}");
    assert!(!tuples.contains(&net.a.addrs(probe).unwrap()));
    net.a.abort(probe).unwrap();
    assert!(net.a.poll_timeout().is_some());

    // B retransmits its FINs (RTO 200 ms); the records answer each with an ACK, which B now gets.
    let mut answered = Vec::new();
    let mut steps = 0;
    while answered.len() < N && steps < 1000 {
        answered.extend(bare_acks(&step(&mut net, true, &mut fins)));
        steps += 1;
    }
    assert_eq!(answered.len(), N, "every retransmitted FIN is acknowledged");
    for &(src, dst, _, _, ack, _) in &answered {
        assert_eq!(Some(fins[&(src, dst)]), ack);
    }
    let restarted = net.now;
    assert!(net.run_until(50, |n| n.b.connection_count() == 0), "B's LAST-ACKs are done");
    assert_eq!(net.a.time_wait_count(), N);
    assert_eq!(net.a.connection_count(), N);

    // 2·MSL from the retransmitted FINs (not from the first ones), the table is empty.
    let two_msl = Duration::from_secs(2);
    while net.now + Duration::from_millis(20) < restarted + two_msl {
        net.step();
    }
    assert_eq!(net.a.time_wait_count(), N, "2·MSL restarted with the retransmitted FIN");
    assert!(net.run_until(100, |n| n.a.time_wait_count() == 0));
    assert_eq!(net.a.connection_count(), 0);
    assert_eq!(net.a.stats().time_wait_evicted, 0);
    for &(local, remote) in &tuples {
        assert!(!net.a.contains(local, remote));
    }
}
