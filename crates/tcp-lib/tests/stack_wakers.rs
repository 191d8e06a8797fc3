//! Socket wakers: each event that can make a stream or listener ready wakes the waker registered
//! for it, once; nothing else does; release and detach wake every waker left.

mod common;

use std::net::{Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};
use std::time::Duration;

use common::Net;
use tcp_lib::stack::{Error, Interest, StreamId};
use tcp_lib::tcp::{ConnectionError, Keepalive, State};
use tcp_lib::wire::Ipv6Cidr;

/// A waker that counts its wakes.
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A counting waker and its count.
fn counter() -> (Waker, Arc<Count>) {
    let count = Arc::new(Count(AtomicUsize::new(0)));
    (Waker::from(Arc::clone(&count)), count)
}

fn wakes(count: &Count) -> usize {
    count.0.load(Ordering::SeqCst)
}

/// Fills `stream`'s send buffer on A (nothing leaves before the next poll) until `send` would
/// block.
fn fill(net: &mut Net, stream: StreamId) {
    let chunk = [7u8; 4096];
    loop {
        match net.a.send(stream, &chunk) {
            Ok(_) => {}
            Err(Error::WouldBlock) => return,
            Err(e) => panic!("send: {e}"),
        }
    }
}

#[test]
fn read_waker_is_woken_once_by_data() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    let mut buf = [0u8; 64];
    assert_eq!(net.b.recv(s, &mut buf), Err(Error::WouldBlock));
    let (waker, count) = counter();
    net.b.register_waker(s, Interest::Read, &waker).unwrap();
    assert_eq!(wakes(&count), 0, "not ready: not woken at registration");
    net.a.send(c, b"hello").unwrap();
    assert!(net.run_until(50, |_| wakes(&count) > 0), "data wakes the reader");
    assert_eq!(net.b.recv(s, &mut buf), Ok(5));
    net.a.send(c, b"again").unwrap();
    net.run_until(50, |_| false);
    assert_eq!(wakes(&count), 1, "woken once: the waker is forgotten when woken");
}

#[test]
fn read_waker_is_woken_by_fin() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    let (waker, count) = counter();
    net.b.register_waker(s, Interest::Read, &waker).unwrap();
    net.a.shutdown_write(c).unwrap();
    assert!(net.run_until(50, |_| wakes(&count) > 0), "the FIN wakes the reader");
    assert_eq!(net.b.recv(s, &mut [0u8; 8]), Ok(0), "end of stream");
}

#[test]
fn read_waker_is_woken_by_rst() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    let (waker, count) = counter();
    net.b.register_waker(s, Interest::Read, &waker).unwrap();
    net.a.abort(c).unwrap();
    assert!(net.run_until(50, |_| wakes(&count) > 0), "the RST wakes the reader");
    assert_eq!(net.b.recv(s, &mut [0u8; 8]), Err(Error::Connection(ConnectionError::Reset)));
}

#[test]
fn write_waker_is_woken_when_connect_completes() {
    let mut net = Net::new();
    net.b.listen(80).unwrap();
    let c = net.a.connect(Net::b_addr(80)).unwrap();
    let (waker, count) = counter();
    net.a.register_waker(c, Interest::Write, &waker).unwrap();
    assert_eq!(wakes(&count), 0, "SYN-SENT waits for the handshake, whatever room it has");
    assert!(net.run_until(50, |_| wakes(&count) > 0), "the handshake wakes the writer");
    assert_eq!(net.a.state(c), Ok(State::Established));
    assert_eq!(wakes(&count), 1);
}

#[test]
fn write_waker_is_woken_by_a_refused_connect() {
    let mut net = Net::new();
    let c = net.a.connect(Net::b_addr(81)).unwrap(); // no listener: B answers with RST
    let (waker, count) = counter();
    net.a.register_waker(c, Interest::Write, &waker).unwrap();
    assert!(net.run_until(50, |_| wakes(&count) > 0), "the RST wakes the writer");
    assert_eq!(net.a.send(c, b"x"), Err(Error::Connection(ConnectionError::Refused)));
}

#[test]
fn write_waker_is_woken_when_an_ack_frees_room() {
    let mut net = Net::new();
    let (c, _s) = net.open(80);
    fill(&mut net, c);
    let (waker, count) = counter();
    net.a.register_waker(c, Interest::Write, &waker).unwrap();
    assert_eq!(wakes(&count), 0, "a full send buffer is not ready");
    assert!(!net.a.is_writable(c));
    assert!(net.run_until(50, |_| wakes(&count) > 0), "an ACK frees room and wakes the writer");
    assert!(net.a.is_writable(c), "woken with room to send");
}

#[test]
fn accept_waker_is_woken_by_an_established_connection() {
    let mut net = Net::new();
    let l = net.b.listen(80).unwrap();
    let (waker, count) = counter();
    net.b.register_accept_waker(l, &waker).unwrap();
    net.run_until(20, |_| false);
    assert_eq!(wakes(&count), 0, "nothing to accept, no wake");
    net.a.connect(Net::b_addr(80)).unwrap();
    assert!(net.run_until(50, |_| wakes(&count) > 0), "the accept queue gained a connection");
    assert!(net.b.accept(l).is_some());
    assert_eq!(wakes(&count), 1);
}

#[test]
fn accept_waker_is_woken_when_the_listener_goes() {
    let mut net = Net::new();
    let l = net.b.listen(80).unwrap();
    let (waker, count) = counter();
    net.b.register_accept_waker(l, &waker).unwrap();
    net.b.unlisten(l).unwrap();
    assert_eq!(wakes(&count), 1);
    assert_eq!(net.b.register_accept_waker(l, &waker), Err(Error::InvalidHandle));
}

#[test]
fn a_side_ready_at_registration_is_woken_at_once() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    net.a.send(c, b"waiting").unwrap();
    assert!(net.run_until(50, |n| n.b.is_readable(s)));
    let (waker, count) = counter();
    net.b.register_waker(s, Interest::Read, &waker).unwrap();
    assert_eq!(wakes(&count), 1, "data already there: no event would come to wake it");
    let l = net.b.listen(81).unwrap();
    net.a.connect(Net::b_addr(81)).unwrap();
    assert!(net.run_until(50, |n| n.b.accept_queue_len(l) == Some(1)));
    let (waker, count) = counter();
    net.b.register_accept_waker(l, &waker).unwrap();
    assert_eq!(wakes(&count), 1, "a connection waits already");
}

#[test]
fn abort_and_close_wake_every_waker_of_the_stream() {
    let mut net = Net::new();
    let (_c, s) = net.open(80);
    // Abort on B: its reader is woken, and the handle is gone.
    let (waker, count) = counter();
    net.b.register_waker(s, Interest::Read, &waker).unwrap();
    net.b.abort(s).unwrap();
    assert_eq!(wakes(&count), 1, "abort wakes the reader");
    assert_eq!(net.b.register_waker(s, Interest::Read, &waker), Err(Error::InvalidHandle));
    // Close on A with both sides waiting (a full send buffer, nothing to read).
    let (c2, _s2) = net.open(81);
    fill(&mut net, c2);
    let (reader, reads) = counter();
    let (writer, writes) = counter();
    net.a.register_waker(c2, Interest::Read, &reader).unwrap();
    net.a.register_waker(c2, Interest::Write, &writer).unwrap();
    assert_eq!((wakes(&reads), wakes(&writes)), (0, 0));
    net.a.close(c2).unwrap();
    assert_eq!((wakes(&reads), wakes(&writes)), (1, 1), "close wakes both sides");
}

#[test]
fn detach_wakes_the_streams_wakers() {
    let mut net = Net::new();
    let (_c, s) = net.open(80);
    let (waker, count) = counter();
    net.b.register_waker(s, Interest::Read, &waker).unwrap();
    let detached = net.b.detach(s).unwrap();
    assert_eq!(wakes(&count), 1, "the handle went stale: its task must not wait on it");
    drop(detached);
}

#[test]
fn re_registering_replaces_the_waker() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    let (first, first_count) = counter();
    let (second, second_count) = counter();
    net.b.register_waker(s, Interest::Read, &first).unwrap();
    net.b.register_waker(s, Interest::Read, &second).unwrap();
    net.b.register_waker(s, Interest::Read, &second).unwrap(); // the same task again
    net.a.send(c, b"x").unwrap();
    assert!(net.run_until(50, |_| wakes(&second_count) > 0));
    net.run_until(10, |_| false);
    assert_eq!((wakes(&first_count), wakes(&second_count)), (0, 1), "only the last waker");
}

#[test]
fn no_wake_without_an_event() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    fill(&mut net, c);
    let mut buf = vec![0u8; 64 * 1024];
    let drained = net.run_until(500, |n| {
        while n.b.recv(s, &mut buf).is_ok_and(|k| k > 0) {}
        n.a.queues(c).map(|q| q.1) == Ok(0) && n.b.queues(s).map(|q| q.0) == Ok(0)
    });
    assert!(drained, "everything sent, acknowledged and read");
    let (client_reader, a_reads) = counter();
    let (server_reader, b_reads) = counter();
    net.a.register_waker(c, Interest::Read, &client_reader).unwrap();
    net.b.register_waker(s, Interest::Read, &server_reader).unwrap();
    let l = net.b.listen(81).unwrap();
    let (acceptor, accepts) = counter();
    net.b.register_accept_waker(l, &acceptor).unwrap();
    // Another connection's traffic is no event for these.
    let (c2, s2) = net.open(82);
    for i in 0..500 {
        if i % 10 == 0 {
            net.a.send(c2, b"elsewhere").unwrap();
            net.b.send(s2, b"and back").unwrap();
        }
        let _ = net.a.recv(c2, &mut buf);
        let _ = net.b.recv(s2, &mut buf);
        net.step();
    }
    net.now += Duration::from_secs(10);
    net.step();
    assert_eq!((wakes(&a_reads), wakes(&b_reads), wakes(&accepts)), (0, 0, 0));
}

/// Registers a read waker on A's end of a connection, then polls A alone (B never again: what A
/// sends is lost) in steps of `tick` until it is woken; asserts it was woken once, by a timeout.
fn a_alone_until_woken(mut net: Net, tick: Duration, send: &[u8]) {
    let (c, _s) = net.open(80);
    let (waker, count) = counter();
    net.a.register_waker(c, Interest::Read, &waker).unwrap();
    if !send.is_empty() {
        net.a.send(c, send).unwrap();
    }
    for _ in 0..200 {
        net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
        net.now += tick;
        if wakes(&count) > 0 {
            break;
        }
    }
    assert_eq!(wakes(&count), 1, "the timer's failure wakes the reader");
    assert_eq!(net.a.recv(c, &mut [0u8; 8]), Err(Error::Connection(ConnectionError::TimedOut)));
}

#[test]
fn read_waker_is_woken_when_retransmission_gives_up() {
    let net = Net::with(|c| c.tcp.max_retransmits = 3, |_| {});
    a_alone_until_woken(net, Duration::from_millis(500), b"into the void");
}

#[test]
fn read_waker_is_woken_when_keepalive_fails() {
    let keepalive = Keepalive { idle: Duration::from_secs(1), interval: Duration::from_secs(1), probes: 2 };
    let net = Net::with(|c| c.tcp.keepalive = Some(keepalive), |_| {});
    a_alone_until_woken(net, Duration::from_millis(250), b"");
}

#[test]
fn read_waker_is_woken_by_data_over_ipv6() {
    const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 1);
    const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 2);
    let mut net = Net::with(
        |c| *c = c.with_ipv6(Ipv6Cidr::new(A6, 64).unwrap()),
        |c| *c = c.with_ipv6(Ipv6Cidr::new(B6, 64).unwrap()),
    );
    let l = net.b.listen(80).unwrap();
    let c = net.a.connect(SocketAddr::from((B6, 80))).unwrap();
    let (writer, writes) = counter();
    net.a.register_waker(c, Interest::Write, &writer).unwrap();
    let (acceptor, accepts) = counter();
    net.b.register_accept_waker(l, &acceptor).unwrap();
    assert!(net.run_until(100, |_| wakes(&writes) > 0 && wakes(&accepts) > 0));
    let s = net.b.accept(l).unwrap();
    assert!(net.b.addrs(s).unwrap().1.is_ipv6());
    let (reader, reads) = counter();
    net.b.register_waker(s, Interest::Read, &reader).unwrap();
    net.a.send(c, b"six").unwrap();
    assert!(net.run_until(50, |_| wakes(&reads) > 0));
    assert_eq!(net.b.recv(s, &mut [0u8; 8]), Ok(3));
}

#[test]
fn shutting_down_or_growing_the_send_buffer_wakes_a_blocked_writer() {
    let mut net = Net::new();
    let (c, _s) = net.open(80);
    fill(&mut net, c);
    let (waker, count) = counter();
    net.a.register_waker(c, Interest::Write, &waker).unwrap();
    net.a.shutdown_write(c).unwrap();
    assert_eq!(wakes(&count), 1, "send says WriteClosed now: the writer must see it");
    assert_eq!(net.a.send(c, b"x"), Err(Error::WriteClosed));
    let (c2, _s2) = net.open(81);
    fill(&mut net, c2);
    let (waker, count) = counter();
    net.a.register_waker(c2, Interest::Write, &waker).unwrap();
    let (_, queued) = net.a.queues(c2).unwrap();
    net.a.set_send_buffer(c2, queued + 4096).unwrap();
    assert_eq!(wakes(&count), 1, "room without an ACK");
    assert!(net.a.is_writable(c2));
}
