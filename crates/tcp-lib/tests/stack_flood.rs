//! A SYN flood against a listener with a small SYN queue: legitimate clients still get in through
//! SYN cookies, and the listener's state stays bounded.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::{Net, Rng, tcp_frame};
use tcp_lib::stack::{Error, ListenerConfig, StreamId};
use tcp_lib::tcp::State;
use tcp_lib::wire::{EthernetAddress, SeqNumber, TcpControl, TcpRepr};

const SYN_QUEUE: usize = 16;
const LEGIT: usize = 150;

fn flood_syn(net: &mut Net, rng: &mut Rng, mac: EthernetAddress) {
    let src =
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 99), 1024 + u16::try_from(rng.below(60_000)).unwrap());
    let seg = TcpRepr {
        src_port: src.port(),
        dst_port: 80,
        control: TcpControl::Syn,
        seq_number: SeqNumber::new(u32::try_from(rng.next_u64() >> 32).unwrap()),
        window_len: 65535,
        max_seg_size: Some(1460),
        ..TcpRepr::default()
    };
    let frame = tcp_frame(EthernetAddress([2, 0, 0, 0, 0, 99]), mac, src, Net::b_addr(80), &seg);
    let now = net.now;
    net.b.receive(now, &frame);
}

#[test]
fn syn_flood_legitimate_clients_complete_via_cookies() {
    let mut net = Net::new();
    let l = net
        .b
        .listen_with(80, ListenerConfig { syn_queue: SYN_QUEUE, backlog: 1024, syn_cookies: true })
        .unwrap();
    let mac_b = net.mac_b();
    let mut rng = Rng(99);
    // Fill the SYN queue first.
    for _ in 0..1000 {
        flood_syn(&mut net, &mut rng, mac_b);
        assert!(net.b.syn_queue_len(l).unwrap() <= SYN_QUEUE);
    }
    assert_eq!(net.b.syn_queue_len(l), Some(SYN_QUEUE));
    let clients: Vec<StreamId> = (0..LEGIT).map(|_| net.a.connect(Net::b_addr(80)).unwrap()).collect();
    let mut accepted = Vec::new();
    let mut max_conns = 0;
    for _ in 0..3000 {
        for _ in 0..5 {
            flood_syn(&mut net, &mut rng, mac_b);
            assert!(net.b.syn_queue_len(l).unwrap() <= SYN_QUEUE);
        }
        net.step();
        while let Some(s) = net.b.accept(l) {
            accepted.push(s);
        }
        max_conns = max_conns.max(net.b.connection_count());
        if accepted.len() == LEGIT && clients.iter().all(|&c| net.a.state(c) == Ok(State::Established)) {
            break;
        }
    }
    assert_eq!(accepted.len(), LEGIT, "{:?}", net.b.stats());
    let st = *net.b.stats();
    assert!(st.syn_cookies_sent >= 1000, "{st:?}");
    assert_eq!(st.syn_cookies_accepted, u64::try_from(LEGIT).unwrap(), "{st:?}");
    // Memory: the half-open connections never exceed the SYN queue.
    assert!(max_conns <= SYN_QUEUE + LEGIT, "{max_conns}");
    // Cookie connections carry data both ways.
    for (i, &c) in clients.iter().enumerate() {
        net.a.send(c, format!("hello {i}").as_bytes()).unwrap();
    }
    let mut buf = [0u8; 64];
    let mut echoed = 0;
    for _ in 0..500 {
        net.step();
        for &s in &accepted {
            if let Ok(n) = net.b.recv(s, &mut buf)
                && n > 0
            {
                net.b.send(s, &buf[..n]).unwrap();
            }
        }
        for (i, &c) in clients.iter().enumerate() {
            match net.a.recv(c, &mut buf) {
                Ok(n) if n > 0 => {
                    assert_eq!(&buf[..n], format!("hello {i}").as_bytes());
                    echoed += 1;
                }
                Ok(_) | Err(Error::WouldBlock) => {}
                Err(e) => panic!("{e}"),
            }
        }
        if echoed == LEGIT {
            break;
        }
    }
    assert_eq!(echoed, LEGIT);
}

#[test]
fn forged_cookie_acks_are_rejected() {
    let mut net = Net::new();
    let l = net.b.listen_with(80, ListenerConfig { syn_queue: 1, backlog: 16, syn_cookies: true }).unwrap();
    let mac_b = net.mac_b();
    let mut rng = Rng(5);
    for _ in 0..10 {
        flood_syn(&mut net, &mut rng, mac_b);
    }
    assert!(net.b.stats().syn_cookies_sent >= 9);
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 99), 5555);
    for _ in 0..5000 {
        let seg = TcpRepr {
            src_port: src.port(),
            dst_port: 80,
            seq_number: SeqNumber::new(u32::try_from(rng.next_u64() >> 32).unwrap()),
            ack_number: Some(SeqNumber::new(u32::try_from(rng.next_u64() >> 32).unwrap())),
            window_len: 1000,
            ..TcpRepr::default()
        };
        let frame = tcp_frame(EthernetAddress([2, 0, 0, 0, 0, 99]), mac_b, src, Net::b_addr(80), &seg);
        let now = net.now;
        net.b.receive(now, &frame);
    }
    assert_eq!(net.b.stats().syn_cookies_accepted, 0);
    assert_eq!(net.b.stats().syn_cookies_rejected, 5000);
    assert_eq!(net.b.accept(l), None);
    assert_eq!(net.b.connection_count(), 1, "only the one half-open connection");
}

#[test]
fn without_cookies_a_full_syn_queue_drops() {
    let mut net = Net::new();
    let l = net.b.listen_with(80, ListenerConfig { syn_queue: 4, backlog: 16, syn_cookies: false }).unwrap();
    let mac_b = net.mac_b();
    let mut rng = Rng(6);
    for _ in 0..100 {
        flood_syn(&mut net, &mut rng, mac_b);
    }
    assert_eq!(net.b.syn_queue_len(l), Some(4));
    assert_eq!(net.b.stats().listen_drops, 96);
    assert_eq!(net.b.stats().syn_cookies_sent, 0);
    // The half-open connections time out (SYN-ACK retries) and the queue empties.
    assert!(net.run_until(200_000, |n| n.b.syn_queue_len(l) == Some(0)));
    assert_eq!(net.b.connection_count(), 0);
}

/// The reset probing found under a SYN flood spoofed from the client's own address: the client's
/// handshake ACK and first data are lost, a spoofed SYN on its four-tuple draws a new cookie
/// SYN-ACK, and the client's answer (an ACK past its data) fails the cookie check. The listener
/// must not reset the client for it (its reset would be exactly in the client's window): the
/// client's retransmission checks and establishes the connection, and its data arrives.
#[test]
fn a_spoofed_syn_does_not_get_a_client_with_a_lost_handshake_ack_reset() {
    let mut net = Net::new();
    let l = net.b.listen_with(80, ListenerConfig { syn_queue: 1, backlog: 16, syn_cookies: true }).unwrap();
    let (mac_a, mac_b) = (net.mac_a(), net.mac_b());
    let mut rng = Rng(9);
    for _ in 0..4 {
        flood_syn(&mut net, &mut rng, mac_b);
    }
    let c = net.a.connect(Net::b_addr(80)).unwrap();
    // The SYN reaches B (cookie SYN-ACK); the handshake ACK and the data are lost.
    for _ in 0..100 {
        let frames = net.frames_from_a();
        if net.a.state(c) == Ok(State::Established) {
            break;
        }
        for f in frames {
            let now = net.now;
            net.b.receive(now, &f);
        }
        net.b.poll(net.now, &mut net.dev_b, &net.cache).unwrap();
        net.now += common::TICK;
    }
    assert_eq!(net.a.state(c), Ok(State::Established));
    assert_eq!(net.a.send(c, b"hello"), Ok(5));
    let lost = net.frames_from_a();
    assert!(!lost.is_empty(), "A sent its data");
    assert_eq!(net.b.stats().syn_cookies_sent, 4, "3 flood SYNs and A's got cookies");
    let (local, remote) = net.a.addrs(c).unwrap();
    let spoofed = TcpRepr {
        src_port: local.port(),
        dst_port: remote.port(),
        control: TcpControl::Syn,
        seq_number: SeqNumber::new(0x5eed_0000),
        window_len: 65535,
        ..TcpRepr::default()
    };
    let now = net.now;
    net.b.receive(now, &tcp_frame(mac_a, mac_b, local, remote, &spoofed));
    let rst_before = net.b.stats().rst_sent;
    let mut got = Vec::new();
    let mut s = None;
    assert!(net.run_until(2000, |n| {
        s = s.or_else(|| n.b.accept(l));
        if let Some(s) = s {
            let mut buf = [0; 16];
            if let Ok(k) = n.b.recv(s, &mut buf) {
                got.extend_from_slice(&buf[..k]);
            }
        }
        got.len() == 5 || n.a.state(c) != Ok(State::Established)
    }));
    assert_eq!(net.a.state(c), Ok(State::Established), "the client was not reset");
    assert_eq!(got, b"hello");
    assert_eq!(net.b.stats().rst_sent, rst_before);
    assert!(net.b.stats().syn_cookies_rejected >= 1, "{:?}", net.b.stats());
    assert_eq!(net.b.stats().syn_cookies_accepted, 1);
}
