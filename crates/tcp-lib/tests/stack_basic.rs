//! Two stacks on a `Pair`: ARP, ICMP echo, handshake, byte-exact transfers, refusal, half-close,
//! blind injection, garbage input.

mod common;

use std::net::SocketAddrV4;
use std::time::Duration;

use common::{A_IP, B_IP, Net, Rng, tcp_frame};
use tcp_lib::stack::{Error, StreamId};
use tcp_lib::tcp::{ConnectionError, State};
use tcp_lib::wire::{SeqNumber, TcpControl, TcpRepr};

#[test]
fn arp_resolves_both_ways_and_ping_is_answered() {
    let mut net = Net::new();
    // Gratuitous ARP on start from both; they are requests for the sender's own address.
    assert_eq!(net.a.stats().arp_requests, 1);
    net.a.ping(B_IP, 7, 1, b"abcdefgh").unwrap();
    assert!(net.run_until(50, |n| n.a.stats().icmp_echo_replies + n.b.stats().icmp_echo_replies > 0
        && n.a.arp_pending() == 0));
    assert!(net.run_until(50, |n| n.a.stats().arp_requests >= 2));
    let reply = {
        let mut r = None;
        assert!(net.run_until(50, |n| {
            r = r.or_else(|| n.a.take_ping_reply());
            r.is_some()
        }));
        r.unwrap()
    };
    assert_eq!((reply.from, reply.ident, reply.seq_no, reply.len), (B_IP.into(), 7, 1, 8));
    assert_eq!(net.b.stats().icmp_echo_replies, 1);
    assert_eq!(net.b.stats().arp_replies, 1);
    // Both learned each other: A from the reply, B from A's request.
    let (mac_a, mac_b) = (net.mac_a(), net.mac_b());
    assert_eq!(net.a.arp_lookup(B_IP), Some(mac_b));
    assert_eq!(net.b.arp_lookup(A_IP), Some(mac_a));
    // B pings A without asking again.
    let b_requests = net.b.stats().arp_requests;
    net.b.ping(A_IP, 9, 2, &[1; 100]).unwrap();
    let mut r = None;
    assert!(net.run_until(50, |n| {
        r = r.or_else(|| n.b.take_ping_reply());
        r.is_some()
    }));
    assert_eq!(r.unwrap().len, 100);
    assert_eq!(net.b.stats().arp_requests, b_requests);
}

#[test]
fn unresolved_next_hop_is_retried_then_given_up() {
    let mut net = Net::new();
    let ghost = std::net::Ipv4Addr::new(10, 0, 0, 99);
    for i in 0..40 {
        net.a.ping(ghost, 1, i, b"x").unwrap();
    }
    assert!(net.a.arp_pending() <= 16, "bounded per next hop");
    assert!(net.a.stats().arp_dropped >= 24);
    // Three requests a second apart, then the queue is dropped.
    for _ in 0..5000 {
        net.step();
    }
    assert_eq!(net.a.arp_pending(), 0);
    assert_eq!(net.a.stats().arp_requests, 1 + 3);
    assert_eq!(net.a.stats().arp_dropped, 40);
    assert_eq!(net.a.ping(std::net::Ipv4Addr::new(192, 168, 1, 1), 1, 1, b""), Err(Error::Unreachable));
}

/// Moves `data` from `from` to `to` on the given side, interleaved with the other direction.
fn pump(net: &mut Net, ab: (StreamId, StreamId), data_ab: &[u8], data_ba: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (c, s) = ab;
    let (mut sent_ab, mut sent_ba) = (0, 0);
    let (mut got_ab, mut got_ba) = (Vec::new(), Vec::new());
    let mut buf = vec![0u8; 32 * 1024];
    for _ in 0..200_000 {
        if sent_ab < data_ab.len()
            && let Ok(n) = net.a.send(c, &data_ab[sent_ab..])
        {
            sent_ab += n;
        }
        if sent_ba < data_ba.len()
            && let Ok(n) = net.b.send(s, &data_ba[sent_ba..])
        {
            sent_ba += n;
        }
        net.step();
        while let Ok(n) = net.b.recv(s, &mut buf) {
            if n == 0 {
                break;
            }
            got_ab.extend_from_slice(&buf[..n]);
        }
        while let Ok(n) = net.a.recv(c, &mut buf) {
            if n == 0 {
                break;
            }
            got_ba.extend_from_slice(&buf[..n]);
        }
        if got_ab.len() == data_ab.len() && got_ba.len() == data_ba.len() {
            break;
        }
    }
    (got_ab, got_ba)
}

#[test]
fn transfer_both_ways_is_byte_exact_and_connections_are_reclaimed() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    let mut rng = Rng(42);
    let ab = rng.bytes(3 << 20);
    let ba = rng.bytes(2 << 20);
    let (got_ab, got_ba) = pump(&mut net, (c, s), &ab, &ba);
    assert_eq!(got_ab.len(), ab.len());
    assert!(got_ab == ab, "A->B bytes differ");
    assert!(got_ba == ba, "B->A bytes differ");
    let stats = net.a.connection_stats(c).unwrap();
    assert_eq!(stats.bytes_out, u64::try_from(ab.len()).unwrap());
    assert_eq!(stats.bytes_in, u64::try_from(ba.len()).unwrap());
    // Close: A first (so A goes through TIME-WAIT), then B.
    net.a.close(c).unwrap();
    assert_eq!(net.a.state(c), Err(Error::InvalidHandle), "the handle is released");
    let mut buf = [0u8; 16];
    assert!(net.run_until(100, |n| n.b.recv(s, &mut buf) == Ok(0)));
    net.b.close(s).unwrap();
    assert!(net.run_until(100, |n| n.b.connection_count() == 0));
    assert!(net.run_until(100, |n| n.a.time_wait_count() == 1));
    // 2 MSL later the TIME-WAIT connection is gone too.
    assert!(net.run_until(3000, |n| n.a.connection_count() == 0));
    assert_eq!(net.a.time_wait_count(), 0);
    assert_eq!(net.a.stats().connections_reclaimed, 1);
}

#[test]
fn connect_to_a_closed_port_is_refused() {
    let mut net = Net::new();
    let c = net.a.connect(Net::b_addr(81)).unwrap();
    assert_eq!(net.a.recv(c, &mut [0; 8]), Err(Error::WouldBlock));
    assert!(net.run_until(100, |n| n.a.state(c) == Ok(State::Closed)));
    assert_eq!(net.a.error(c), Ok(Some(ConnectionError::Refused)));
    assert_eq!(net.a.recv(c, &mut [0; 8]), Err(Error::Connection(ConnectionError::Refused)));
    assert_eq!(net.a.send(c, b"x"), Err(Error::Connection(ConnectionError::Refused)));
    assert_eq!(net.b.stats().tcp_no_socket, 1);
    assert_eq!(net.b.stats().rst_sent, 1);
    net.a.close(c).unwrap();
    assert!(net.run_until(10, |n| n.a.connection_count() == 0));
}

#[test]
fn half_close() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    net.a.send(c, b"request").unwrap();
    net.a.shutdown_write(c).unwrap();
    assert_eq!(net.a.send(c, b"more"), Err(Error::WriteClosed));
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    assert!(net.run_until(200, |n| match n.b.recv(s, &mut buf) {
        Ok(0) => true,
        Ok(k) => {
            got.extend_from_slice(&buf[..k]);
            false
        }
        Err(_) => false,
    }));
    assert_eq!(got, b"request");
    assert_eq!(net.b.state(s), Ok(State::CloseWait));
    // B still sends after A's FIN.
    assert_eq!(net.b.send(s, b"response"), Ok(8));
    net.b.close(s).unwrap();
    let mut got = Vec::new();
    assert!(net.run_until(200, |n| match n.a.recv(c, &mut buf) {
        Ok(0) => true,
        Ok(k) => {
            got.extend_from_slice(&buf[..k]);
            false
        }
        Err(_) => false,
    }));
    assert_eq!(got, b"response");
    assert!(net.run_until(100, |n| n.a.state(c) == Ok(State::TimeWait)));
    assert!(net.run_until(3000, |n| n.a.state(c) == Ok(State::Closed)));
    assert_eq!(net.a.error(c), Ok(None));
}

#[test]
fn blind_rst_and_syn_kill_nothing() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    let (local, remote) = net.a.addrs(c).unwrap();
    let (mac_a, mac_b) = (net.mac_a(), net.mac_b());
    let mut rng = Rng(7);
    for i in 0..2000 {
        let control = if i % 2 == 0 { TcpControl::Rst } else { TcpControl::Syn };
        let seg = TcpRepr {
            src_port: local.port(),
            dst_port: remote.port(),
            control,
            seq_number: SeqNumber::new(u32::try_from(rng.next_u64() >> 32).unwrap()),
            ack_number: (i % 4 == 1).then(|| SeqNumber::new(7)),
            window_len: 1000,
            ..TcpRepr::default()
        };
        let frame = tcp_frame(mac_a, mac_b, local, remote, &seg);
        let now = net.now;
        net.b.receive(now, &frame);
        if i % 100 == 0 {
            net.step();
        }
    }
    for _ in 0..50 {
        net.step();
    }
    assert_eq!(net.b.state(s), Ok(State::Established));
    assert_eq!(net.a.state(c), Ok(State::Established));
    let (ab, ba) = pump(&mut net, (c, s), b"still alive", b"yes");
    assert_eq!((ab.as_slice(), ba.as_slice()), (&b"still alive"[..], &b"yes"[..]));
}

#[test]
fn garbage_and_foreign_frames_are_counted_not_fatal() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    let mut rng = Rng(3);
    let good = {
        let (local, remote) = net.a.addrs(c).unwrap();
        tcp_frame(
            net.mac_a(),
            net.mac_b(),
            local,
            remote,
            &TcpRepr {
                src_port: local.port(),
                dst_port: remote.port(),
                seq_number: SeqNumber::new(1),
                ack_number: Some(SeqNumber::new(1)),
                payload: b"zzzz",
                ..TcpRepr::default()
            },
        )
    };
    let now = net.now;
    for i in 0..20_000 {
        let len = rng.below(200);
        let mut f = if i % 2 == 0 { rng.bytes(len) } else { good.clone() };
        if i % 2 == 1 {
            let k = rng.below(f.len());
            f[k] = u8::try_from(rng.below(256)).unwrap();
            f.truncate(rng.below(f.len() + 1).max(1));
        }
        net.b.receive(now, &f);
    }
    // Not for us: another MAC, another IP.
    let mut other = good.clone();
    other[0..6].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
    let before = net.b.stats().rx_not_for_us;
    net.b.receive(now, &other);
    assert_eq!(net.b.stats().rx_not_for_us, before + 1);
    let st = net.b.stats();
    assert!(st.rx_malformed > 1000, "{st:?}");
    let (ab, _) = pump(&mut net, (c, s), b"ok", b"");
    assert_eq!(ab, b"ok");
    assert_eq!(net.b.state(s), Ok(State::Established));
}

#[test]
fn listen_errors_and_stale_handles() {
    let mut net = Net::new();
    let l = net.b.listen(80).unwrap();
    assert_eq!(net.b.listen(80), Err(Error::AddrInUse));
    assert_eq!(net.b.listen(0), Err(Error::InvalidPort));
    assert_eq!(net.a.connect(SocketAddrV4::new(B_IP, 0)), Err(Error::InvalidPort));
    net.b.unlisten(l).unwrap();
    assert_eq!(net.b.unlisten(l), Err(Error::InvalidHandle));
    assert_eq!(net.b.accept(l), None);
    let l2 = net.b.listen(80).unwrap();
    assert_ne!(l, l2);
    let (c, _s) = {
        let c = net.a.connect(Net::b_addr(80)).unwrap();
        let mut s = None;
        assert!(net.run_until(100, |n| {
            s = s.or_else(|| n.b.accept(l2));
            s.is_some()
        }));
        (c, s.unwrap())
    };
    net.a.abort(c).unwrap();
    assert_eq!(net.a.send(c, b"x"), Err(Error::InvalidHandle));
    let _ = Duration::ZERO;
}

/// Opens `n` connections to B's port 80 and returns their client handles and server handles.
fn open_many(net: &mut Net, l: tcp_lib::stack::ListenerId, n: usize) -> (Vec<StreamId>, Vec<StreamId>) {
    let cs: Vec<StreamId> = (0..n).map(|_| net.a.connect(Net::b_addr(80)).unwrap()).collect();
    let mut ss = Vec::new();
    // SYNs beyond the ARP queue (16 by default) wait for their retransmission (200 ms here).
    assert!(net.run_until(2000, |net| {
        while let Some(s) = net.b.accept(l) {
            ss.push(s);
        }
        ss.len() == n
    }));
    (cs, ss)
}

#[test]
fn time_wait_table_is_bounded() {
    let mut net = Net::with(|a| a.max_time_wait = 5, |_| {});
    let l = net.b.listen(80).unwrap();
    let (cs, ss) = open_many(&mut net, l, 20);
    for c in cs {
        net.a.close(c).unwrap();
    }
    for _ in 0..20 {
        net.step();
    }
    for s in ss {
        net.b.close(s).unwrap();
    }
    assert!(net.run_until(200, |n| n.b.connection_count() == 0));
    assert!(net.a.time_wait_count() <= 5);
    assert_eq!(net.a.time_wait_count(), 5);
    assert_eq!(net.a.connection_count(), 5);
    assert_eq!(net.a.stats().time_wait_evicted, 15);
    assert!(net.run_until(3000, |n| n.a.connection_count() == 0));
}

#[test]
fn accept_hook_receives_established_connections() {
    use std::cell::RefCell;
    use std::rc::Rc;
    use tcp_lib::stack::{AcceptHook, ListenerId};

    #[derive(Debug)]
    struct Hook(Rc<RefCell<Vec<(ListenerId, StreamId)>>>);
    impl AcceptHook for Hook {
        fn has_room(&mut self, _: ListenerId) -> bool {
            self.0.borrow().len() < 3
        }
        fn established(&mut self, l: ListenerId, s: StreamId) {
            self.0.borrow_mut().push((l, s));
        }
    }
    let mut net = Net::new();
    let got = Rc::new(RefCell::new(Vec::new()));
    net.b.set_accept_hook(Some(Box::new(Hook(Rc::clone(&got)))));
    let l = net.b.listen(80).unwrap();
    let cs: Vec<StreamId> = (0..5).map(|_| net.a.connect(Net::b_addr(80)).unwrap()).collect();
    for _ in 0..100 {
        net.step();
    }
    assert_eq!(got.borrow().len(), 3, "the hook's room bounds it");
    assert_eq!(net.b.accept(l), None, "the listener's own queue is bypassed");
    assert!(got.borrow().iter().all(|&(gl, _)| gl == l));
    let established = cs.iter().filter(|&&c| net.a.state(c) == Ok(State::Established)).count();
    assert!(established >= 3);
    let s = got.borrow()[0].1;
    assert_eq!(net.b.state(s), Ok(State::Established));
    assert!(net.b.stats().listen_drops > 0);
}

#[test]
fn port_filter_keeps_flow_groups_local() {
    use netchannel::signature::FlowGroup;
    let mut net = Net::new();
    net.a.set_port_filter(Some(Box::new(|g: FlowGroup| g.0 % 4 == 1)));
    let l = net.b.listen(80).unwrap();
    let (cs, _ss) = open_many(&mut net, l, 50);
    for c in cs {
        let port = net.a.addrs(c).unwrap().0.port();
        assert_eq!(FlowGroup::of_port(port).0 % 4, 1);
        assert!(port >= 49152);
    }
}

#[test]
fn trusted_checksums_on_an_in_memory_pair() {
    let trust = |c: &mut tcp_lib::stack::Config| {
        c.checksum = tcp_lib::wire::ChecksumPolicy::Trust;
        c.tx_checksum = false;
    };
    let mut net = Net::with(trust, trust);
    let (c, s) = net.open(80);
    let mut rng = Rng(7);
    let ab = rng.bytes(1 << 20);
    let ba = rng.bytes(300_000);
    let (got_ab, got_ba) = pump(&mut net, (c, s), &ab, &ba);
    assert!(got_ab == ab, "A->B bytes differ");
    assert!(got_ba == ba, "B->A bytes differ");
    assert_eq!(net.a.stats().rx_malformed, 0);
    assert_eq!(net.b.stats().rx_malformed, 0);

    // A receiver that verifies (the default) drops segments sent without checksums.
    let mut net = Net::with(trust, |_| {});
    let l = net.b.listen(80).unwrap();
    let c = net.a.connect(Net::b_addr(80)).unwrap();
    net.run_until(50, |_| false);
    assert_eq!(net.b.accept(l), None);
    assert_ne!(net.a.state(c), Ok(State::Established));
    assert!(net.b.stats().rx_malformed > 0);
}

/// RFC 1122 §3.3.6: a unicast datagram that arrives as a link-layer broadcast is discarded (and
/// one for a multicast MAC was never ours): the data in it is not delivered, nothing answers it,
/// and the same bytes sent unicast afterwards are.
#[test]
fn tcp_data_sent_to_the_broadcast_or_a_multicast_mac_is_discarded() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    net.a.send(c, b"not for everyone").unwrap();
    let frames = net.frames_from_a();
    assert_eq!(frames.len(), 1, "one data segment");
    let before = *net.b.stats();
    for dst in [[0xff; 6], [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01], [0x33, 0x33, 0, 0, 0, 1]] {
        let mut f = frames[0].clone();
        f[..6].copy_from_slice(&dst);
        let now = net.now;
        net.b.receive(now, &f);
    }
    let after = *net.b.stats();
    assert_eq!(after.rx_link_broadcast, before.rx_link_broadcast + 1, "{after:?}");
    assert_eq!(after.rx_not_for_us, before.rx_not_for_us + 2, "{after:?}");
    assert_eq!(after.tcp_segments_in, before.tcp_segments_in, "no segment reached TCP");
    let mut buf = [0u8; 64];
    assert_eq!(net.b.recv(s, &mut buf), Err(Error::WouldBlock));
    // The unicast original is delivered.
    let now = net.now;
    net.b.receive(now, &frames[0]);
    assert_eq!(net.b.recv(s, &mut buf), Ok(16));
    assert_eq!(&buf[..16], b"not for everyone");
}
