//! The socket API (`tcp_lib::socket`) over two stacks joined by a `Pair`: blocking echo across two
//! threads, many connections, a non-blocking event loop, refusal, timeouts, half-close, linger,
//! background close, and re-entrancy. Every blocking call has a timeout, so a bug fails a test
//! instead of hanging it.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use netchannel::dev::{NetDevice, Pair};
use netchannel::pool::{HugePages, Pool};
use tcp_lib::socket::{Interface, Listener, Stream};
use tcp_lib::stack::{Config, Stack};
use tcp_lib::tcp::State;
use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The bound on every blocking call.
const T: Duration = Duration::from_secs(20);

fn pair() -> (Pool, Pair, Pair) {
    let pool = Pool::builder(4096).hugepages(HugePages::Never).build().expect("pool");
    let (a, b) = Pair::new(&pool).expect("pair");
    (pool, a, b)
}

fn interface(dev: Pair, ip: Ipv4Addr) -> Interface<Pair> {
    let mac = EthernetAddress(dev.info().mac.0);
    let cidr = Ipv4Cidr::new(ip, 24).expect("a /24");
    let cache = dev.pool().cache();
    Interface::new(Stack::new(Config::new(mac, cidr), Instant::now()), dev, cache)
}

fn timeouts(s: &Stream<Pair>) {
    s.set_read_timeout(Some(T)).unwrap();
    s.set_write_timeout(Some(T)).unwrap();
}

/// Runs `body` on a thread with its own interface on `dev` (address B) and a listener on `port`;
/// returns once the listener is bound. `body` gets a receiver that the test signals when it is
/// done, to keep the wire up until then (see [`keep_polling`]).
fn server<R: Send + 'static>(
    dev: Pair,
    port: u16,
    body: impl FnOnce(&Interface<Pair>, Listener<Pair>, Receiver<()>) -> io::Result<R> + Send + 'static,
) -> (JoinHandle<io::Result<R>>, Sender<()>) {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let b = interface(dev, B_IP);
        let listener = Listener::bind(&b, port)?;
        listener.set_accept_timeout(Some(T))?;
        ready_tx.send(()).expect("the test waits");
        body(&b, listener, done_rx)
    });
    ready_rx.recv_timeout(T).expect("the server binds");
    (handle, done_tx)
}

/// Drives `iface` until the test says it is done (or `T` passes).
fn keep_polling(iface: &Interface<Pair>, done: &Receiver<()>) -> io::Result<()> {
    let start = Instant::now();
    while done.try_recv().is_err() && start.elapsed() < T {
        iface.poll_wait(Some(Duration::from_millis(5)))?;
    }
    Ok(())
}

fn join<R>(handle: JoinHandle<io::Result<R>>) -> R {
    handle.join().expect("the server thread does not panic").expect("the server succeeds")
}

/// A xorshift generator: reproducible sizes and bytes without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).expect("fits")
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next().to_le_bytes()[3]).collect()
    }
}

#[test]
fn blocking_echo_across_two_threads_is_byte_exact() {
    const TOTAL: usize = 4 << 20;
    let (_pool, dev_a, dev_b) = pair();
    let (handle, done) = server(dev_b, 7, |b, listener, done| {
        let (mut s, peer) = listener.accept()?;
        assert_eq!(peer.ip(), A_IP);
        assert_eq!(s.peer_addr(), peer);
        assert_eq!(s.local_addr(), SocketAddrV4::new(B_IP, 7).into());
        timeouts(&s);
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; 32 * 1024];
        let mut echoed = 0;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n])?;
            echoed += n;
        }
        s.flush()?;
        drop(s);
        keep_polling(b, &done)?;
        Ok(echoed)
    });

    let a = interface(dev_a, A_IP);
    let mut s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 7), T).unwrap();
    timeouts(&s);
    s.set_nodelay(true).unwrap();
    assert!(s.nodelay().unwrap());
    assert_eq!(s.state().unwrap(), State::Established);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut back = vec![0u8; 64 * 1024];
    let mut sent = 0;
    while sent < TOTAL {
        // Below the buffers' room, so that writing a chunk before reading it back never deadlocks.
        let len = (1 + rng.below(48 * 1024)).min(TOTAL - sent);
        let chunk = rng.bytes(len);
        s.write_all(&chunk).unwrap();
        s.read_exact(&mut back[..len]).unwrap();
        assert!(back[..len] == chunk[..], "the echo of bytes {sent}.. differs");
        sent += len;
    }
    let stats = s.stats().unwrap();
    assert!(stats.bytes_out >= TOTAL as u64 && stats.bytes_in >= TOTAL as u64, "{stats:?}");
    assert!(stats.srtt.is_some() && stats.cwnd > 0, "{stats:?}");
    let stack = a.stack_stats().unwrap();
    assert!(stack.tcp_segments_in > 0 && stack.tx_frames > 0, "{stack:?}");
    assert_eq!(stack.connections_opened, 1);
    s.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    done.send(()).unwrap();
    assert_eq!(join(handle), TOTAL);
}

#[test]
fn many_sequential_connections() {
    const CONNECTIONS: usize = 40;
    let (_pool, dev_a, dev_b) = pair();
    let (handle, done) = server(dev_b, 80, |b, listener, done| {
        for i in 0..CONNECTIONS {
            let (mut s, _) = listener.accept()?;
            timeouts(&s);
            let mut request = Vec::new();
            s.read_to_end(&mut request)?;
            assert_eq!(request, format!("request {i}").as_bytes());
            s.write_all(format!("reply {i}").as_bytes())?;
        }
        keep_polling(b, &done)?;
        Ok(())
    });
    let a = interface(dev_a, A_IP);
    let mut ports = std::collections::HashSet::new();
    for i in 0..CONNECTIONS {
        let mut s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 80), T).unwrap();
        timeouts(&s);
        assert!(ports.insert(s.local_addr().port()), "a fresh ephemeral port each time");
        s.write_all(format!("request {i}").as_bytes()).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert_eq!(reply, format!("reply {i}"));
    }
    assert_eq!(a.stack_stats().unwrap().connections_opened, CONNECTIONS as u64);
    done.send(()).unwrap();
    join(handle);
}

#[test]
fn non_blocking_event_loop_on_one_thread() {
    const TOTAL: usize = 1 << 20;
    let (_pool, dev_a, dev_b) = pair();
    let a = interface(dev_a, A_IP);
    let b = interface(dev_b, B_IP);
    let listener = Listener::bind(&b, 9000).unwrap();
    listener.set_nonblocking(true).unwrap();
    assert_eq!(listener.local_addr(), SocketAddrV4::new(B_IP, 9000).into());
    assert_eq!(listener.accept().unwrap_err().kind(), io::ErrorKind::WouldBlock);

    let client = Stream::connect_nonblocking(&a, SocketAddrV4::new(B_IP, 9000)).unwrap();
    let r = client.readiness().unwrap();
    assert!(!r.writable && !r.readable && !r.error, "connecting: {r:?}");
    let mut buf = [0u8; 16];
    assert_eq!((&client).read(&mut buf).unwrap_err().kind(), io::ErrorKind::WouldBlock);

    let data = Rng(7).bytes(TOTAL);
    let mut server: Option<Stream<Pair>> = None;
    let (mut written, mut echoed, mut pending) = (0, 0, Vec::new());
    let mut received = Vec::with_capacity(TOTAL);
    let mut scratch = vec![0u8; 16 * 1024];
    let start = Instant::now();
    while received.len() < TOTAL {
        assert!(start.elapsed() < T, "stuck: {written} written, {} back", received.len());
        a.poll().unwrap();
        b.poll().unwrap();
        if server.is_none() && listener.is_acceptable().unwrap() {
            let (s, peer) = listener.accept().unwrap();
            assert_eq!(peer, client.local_addr());
            s.set_nonblocking(true).unwrap();
            server = Some(s);
        }
        let rc = client.readiness().unwrap();
        assert!(!rc.error);
        if rc.writable && written < TOTAL {
            match (&client).write(&data[written..]) {
                Ok(n) => written += n,
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
            }
        }
        if let Some(s) = &server {
            let rs = s.readiness().unwrap();
            // Echo: what was read and not yet written back goes first.
            if rs.writable && !pending.is_empty() {
                let n = (&*s).write(&pending).unwrap();
                pending.drain(..n);
                echoed += n;
            }
            if rs.readable && pending.is_empty() {
                let n = (&*s).read(&mut scratch).unwrap();
                pending.extend_from_slice(&scratch[..n]);
            }
        }
        if rc.readable {
            let n = (&client).read(&mut scratch).unwrap();
            received.extend_from_slice(&scratch[..n]);
        }
    }
    assert_eq!(echoed, TOTAL);
    assert!(received == data, "the echo is byte-exact");

    // Half-close through readiness: the server sees EOF as read_closed.
    client.shutdown(Shutdown::Write).unwrap();
    let server = server.unwrap();
    let start = Instant::now();
    while !server.readiness().unwrap().read_closed {
        assert!(start.elapsed() < T);
        a.poll().unwrap();
        b.poll().unwrap();
    }
    assert_eq!((&server).read(&mut scratch).unwrap(), 0);
    assert!(server.stats().unwrap().bytes_in >= TOTAL as u64);
}

#[test]
fn connecting_to_a_closed_port_is_refused_and_to_nobody_times_out() {
    let (_pool, dev_a, dev_b) = pair();
    let (handle, done) = server(dev_b, 1, |b, _listener, done| keep_polling(b, &done));
    let a = interface(dev_a, A_IP);
    let e = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 9), T).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    assert!(e.get_ref().is_some(), "the stack's error is kept");
    // Nobody answers ARP for .99.
    let start = Instant::now();
    let e = Stream::connect_timeout(
        &a,
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 99), 9),
        Duration::from_millis(300),
    )
    .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    assert!(start.elapsed() >= Duration::from_millis(300));
    // Off the prefix, without a gateway.
    let e = Stream::connect(&a, SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 9)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NetworkUnreachable, "{e}");
    // The non-blocking connect reports refusal through readiness and take_error.
    let s = Stream::connect_nonblocking(&a, SocketAddrV4::new(B_IP, 9)).unwrap();
    let start = Instant::now();
    while !s.readiness().unwrap().error {
        assert!(start.elapsed() < T);
        a.poll_wait(Some(Duration::from_millis(5))).unwrap();
    }
    assert_eq!(s.take_error().unwrap().unwrap().kind(), io::ErrorKind::ConnectionRefused);
    assert!(s.take_error().unwrap().is_none(), "reported once");
    assert_eq!((&s).write(b"x").unwrap_err().kind(), io::ErrorKind::ConnectionRefused);
    drop(s);
    done.send(()).unwrap();
    join(handle);
}

#[test]
fn read_timeout_expires_with_would_block() {
    let (_pool, dev_a, dev_b) = pair();
    let (handle, done) = server(dev_b, 7, |b, listener, done| {
        let (s, _) = listener.accept()?;
        keep_polling(b, &done)?;
        drop(s);
        Ok(())
    });
    let a = interface(dev_a, A_IP);
    let mut s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 7), T).unwrap();
    assert_eq!(s.set_read_timeout(Some(Duration::ZERO)).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    s.set_read_timeout(Some(Duration::from_millis(150))).unwrap();
    assert_eq!(s.read_timeout().unwrap(), Some(Duration::from_millis(150)));
    let start = Instant::now();
    let mut buf = [0u8; 8];
    assert_eq!(s.read(&mut buf).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(150) && took < T, "{took:?}");
    // Non-blocking: at once.
    s.set_nonblocking(true).unwrap();
    let start = Instant::now();
    assert_eq!(s.read(&mut buf).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    assert!(start.elapsed() < Duration::from_millis(100));
    done.send(()).unwrap();
    join(handle);
}

#[test]
fn half_close_then_reply() {
    let (_pool, dev_a, dev_b) = pair();
    let (handle, done) = server(dev_b, 7, |b, listener, done| {
        let (mut s, _) = listener.accept()?;
        timeouts(&s);
        let mut request = Vec::new();
        s.read_to_end(&mut request)?; // ends at the client's FIN
        assert!(s.readiness()?.read_closed);
        assert_eq!(s.state()?, State::CloseWait);
        let reply: Vec<u8> = request.iter().rev().copied().collect();
        s.write_all(&reply)?;
        s.flush()?;
        drop(s);
        keep_polling(b, &done)
    });
    let a = interface(dev_a, A_IP);
    let mut s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 7), T).unwrap();
    timeouts(&s);
    let request = Rng(99).bytes(100_000);
    s.write_all(&request).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let e = s.write(b"more").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    assert_eq!(reply.len(), request.len());
    assert!(reply.iter().rev().eq(request.iter()));
    assert!(s.readiness().unwrap().read_closed);
    done.send(()).unwrap();
    join(handle);
}

#[test]
fn linger_zero_resets_the_peer() {
    let (_pool, dev_a, dev_b) = pair();
    let (handle, done) = server(dev_b, 7, |b, listener, done| {
        let (s, _) = listener.accept()?;
        timeouts(&s);
        let mut one = [0u8; 1];
        (&s).read_exact(&mut one)?; // the client is connected and waiting
        s.set_linger(Some(Duration::ZERO))?;
        assert_eq!(s.linger()?, Some(Duration::ZERO));
        drop(s); // RST
        keep_polling(b, &done)
    });
    let a = interface(dev_a, A_IP);
    let mut s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 7), T).unwrap();
    timeouts(&s);
    s.write_all(b"!").unwrap();
    let mut buf = [0u8; 64];
    let e = s.read(&mut buf).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
    assert!(s.readiness().unwrap().error);
    assert_eq!(s.write(b"x").unwrap_err().kind(), io::ErrorKind::ConnectionReset);
    done.send(()).unwrap();
    join(handle);
}

#[test]
fn abort_resets_the_peer() {
    let (_pool, dev_a, dev_b) = pair();
    let (handle, done) = server(dev_b, 7, |b, listener, done| {
        let (mut s, _) = listener.accept()?;
        timeouts(&s);
        let mut buf = [0u8; 16];
        let e = s.read(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
        keep_polling(b, &done)
    });
    let a = interface(dev_a, A_IP);
    let s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 7), T).unwrap();
    s.abort().unwrap(); // the server's read returns the reset
    done.send(()).unwrap();
    join(handle);
}

#[test]
fn blocking_write_with_writes_in_place_until_all_is_queued() {
    const TOTAL: usize = 1 << 20;
    let (_pool, dev_a, dev_b) = pair();
    let data = Rng(5).bytes(TOTAL);
    let expected = data.clone();
    let (handle, done) = server(dev_b, 7, move |b, listener, done| {
        let (s, _) = listener.accept()?;
        timeouts(&s);
        // More than the send buffer: each call blocks until the client has read some of it, and
        // the free space wraps around the ring.
        let (mut sent, mut calls, mut wrapped) = (0, 0, 0);
        while sent < TOTAL {
            let (mut slices, mut at) = (0, sent);
            let n = s.write_with(TOTAL - sent, |free| {
                slices += 1;
                let k = free.len().min(TOTAL - at);
                free[..k].copy_from_slice(&data[at..at + k]);
                at += k;
                k
            })?;
            assert_eq!(sent + n, at, "what was written is what was queued");
            sent = at;
            calls += 1;
            wrapped += usize::from(slices == 2);
        }
        s.shutdown(Shutdown::Write)?;
        // The closed side refuses, and names why.
        let err = s.write_with(1, |_| 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        keep_polling(b, &done)?;
        Ok((calls, wrapped))
    });
    let a = interface(dev_a, A_IP);
    let mut s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 7), T).unwrap();
    timeouts(&s);
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    done.send(()).unwrap();
    let (calls, wrapped) = join(handle);
    assert_eq!(got.len(), TOTAL);
    assert!(got == expected, "byte-exact");
    assert!(calls > 4 && wrapped > 0, "{calls} calls, {wrapped} wrapped");
}

#[test]
fn drop_without_linger_delivers_all_data_and_the_fin() {
    const TOTAL: usize = 1 << 20;
    let (_pool, dev_a, dev_b) = pair();
    let data = Rng(3).bytes(TOTAL);
    let expected = data.clone();
    let (handle, done) = server(dev_b, 7, move |b, listener, done| {
        let (s, _) = listener.accept()?;
        timeouts(&s);
        // More than the send buffer: write_all blocks until the client has read some of it.
        (&s).write_all(&data)?;
        drop(s); // no flush, no linger: the rest and the FIN leave in the background
        keep_polling(b, &done)
    });
    let a = interface(dev_a, A_IP);
    let mut s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 7), T).unwrap();
    timeouts(&s);
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), TOTAL);
    assert!(got == expected);
    assert!(matches!(s.state().unwrap(), State::CloseWait), "{:?}", s.state());
    drop(s);
    done.send(()).unwrap();
    join(handle);
}

#[test]
fn linger_blocks_until_everything_is_acknowledged() {
    const TOTAL: usize = 300_000;
    let (_pool, dev_a, dev_b) = pair();
    let data = Rng(5).bytes(TOTAL);
    let expected = data.clone();
    let (handle, _done) = server(dev_b, 7, move |b, listener, _done| {
        let (s, _) = listener.accept()?;
        timeouts(&s);
        (&s).write_all(&data)?;
        s.set_linger(Some(T))?;
        let start = Instant::now();
        drop(s); // blocks until the data and the FIN are acknowledged
        let took = start.elapsed();
        assert!(took < T, "{took:?}");
        // Nothing is left to send: no more polling needed.
        let sent = b.stack_stats()?;
        Ok(sent.tx_frames)
    });
    let a = interface(dev_a, A_IP);
    let mut s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 7), T).unwrap();
    timeouts(&s);
    let mut got = Vec::new();
    // The server thread ends (and its end of the pair goes) right after its linger: everything has
    // arrived by then, so reading to the end needs nothing more from it.
    s.read_to_end(&mut got).unwrap();
    assert!(got == expected);
    // The ACK of the server's FIN is delayed (it would ride on our own FIN or response, as in
    // Linux's CLOSE-WAIT): the interface runs that timer only while it is polled. (A poll fails
    // once the server's end of the pair is gone, i.e. once it is done.)
    let start = Instant::now();
    while !handle.is_finished() && start.elapsed() < T {
        if a.poll_wait(Some(Duration::from_millis(5))).is_err() {
            break;
        }
    }
    assert!(join(handle) > 0);
}

#[test]
fn shutdown_read_discards_what_arrives() {
    const TOTAL: usize = 512 * 1024;
    let (_pool, dev_a, dev_b) = pair();
    let (handle, done) = server(dev_b, 7, |b, listener, done| {
        let (mut s, _) = listener.accept()?;
        timeouts(&s);
        s.shutdown(Shutdown::Read)?;
        let mut buf = [0u8; 16];
        assert_eq!(s.read(&mut buf)?, 0);
        assert!(s.readiness()?.read_closed);
        keep_polling(b, &done)?;
        assert_eq!(s.read(&mut buf)?, 0);
        assert!(s.stats()?.bytes_in >= TOTAL as u64);
        Ok(())
    });
    let a = interface(dev_a, A_IP);
    let mut s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 7), T).unwrap();
    timeouts(&s);
    // Far more than the peer's receive buffer: only discarding keeps its window open.
    s.write_all(&Rng(11).bytes(TOTAL)).unwrap();
    s.flush().unwrap();
    // Wait until everything is acknowledged.
    let start = Instant::now();
    while s.queues().unwrap().1 > 0 {
        assert!(start.elapsed() < T);
        a.poll_wait(Some(Duration::from_millis(5))).unwrap();
    }
    done.send(()).unwrap();
    join(handle);
}

#[test]
fn reentrant_calls_from_with_stack_fail_without_panicking() {
    let (_pool, dev_a, dev_b) = pair();
    let (handle, done) = server(dev_b, 7, |b, listener, done| {
        let (mut s, _) = listener.accept()?;
        timeouts(&s);
        let mut all = Vec::new();
        s.read_to_end(&mut all)?; // ends with the FIN of the stream dropped inside with_stack
        keep_polling(b, &done)?;
        Ok(all)
    });
    let a = interface(dev_a, A_IP);
    let s = Stream::connect_timeout(&a, SocketAddrV4::new(B_IP, 7), T).unwrap();
    timeouts(&s);
    (&s).write_all(b"before").unwrap();
    let listener = Listener::bind(&a, 5555).unwrap();
    let inner = a
        .with_stack(|stack| {
            assert!(stack.connection_count() >= 1);
            let mut buf = [0u8; 4];
            let read = (&s).read(&mut buf).unwrap_err();
            let write = (&s).write(b"x").unwrap_err();
            let accept = listener.accept().unwrap_err();
            let poll = a.poll().unwrap_err();
            let nested = a.with_stack(|_| ()).unwrap_err();
            let stats = a.stack_stats().unwrap_err();
            assert!(a.poll_timeout().is_some());
            for e in [&read, &write, &accept, &poll, &nested, &stats] {
                assert_eq!(e.kind(), io::ErrorKind::Other, "{e}");
                assert!(e.to_string().contains("already in use"), "{e}");
            }
            assert!(format!("{a:?}").contains("in use"));
            // Dropped inside: the close is deferred to the next use of the interface.
            drop(s);
            drop(listener);
            stack.connection_count()
        })
        .unwrap();
    assert!(inner >= 1);
    // The next use applies the deferred close and unlisten: the server reads EOF, the port is free.
    let again = Listener::bind(&a, 5555).unwrap();
    drop(again);
    // Drive our side a while (the FIN leaves); the server's read_to_end ends with it.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        a.poll_wait(Some(Duration::from_millis(5))).unwrap();
    }
    done.send(()).unwrap();
    assert_eq!(join(handle), b"before");
}

#[test]
fn interface_parts_come_back_when_the_last_handle_goes() {
    let (pool, dev_a, dev_b) = pair();
    let a = interface(dev_a, A_IP);
    let listener = Listener::bind(&a, 80).unwrap();
    assert_eq!(Listener::bind(&a, 80).unwrap_err().kind(), io::ErrorKind::AddrInUse);
    assert_eq!(Listener::bind(&a, 0).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    let a = a.into_parts().unwrap_err(); // the listener holds a handle
    drop(listener);
    let (stack, dev, cache) = a.into_parts().unwrap();
    assert_eq!(stack.ip(), A_IP);
    drop((stack, dev, cache));
    drop(dev_b);
    pool.check_leaks().unwrap();
}

#[test]
fn poll_with_reads_in_place_and_leaves_the_rest_to_read() {
    const TOTAL: usize = 1 << 20;
    let (_pool, dev_a, dev_b) = pair();
    let a = interface(dev_a, A_IP);
    let b = interface(dev_b, B_IP);
    let listener = Listener::bind(&b, 9100).unwrap();
    listener.set_nonblocking(true).unwrap();
    let client = Stream::connect_nonblocking(&a, SocketAddrV4::new(B_IP, 9100)).unwrap();
    let data = Rng(11).bytes(TOTAL);
    let mut server: Option<Stream<Pair>> = None;
    let (mut written, mut received, mut in_place, mut turn) = (0, Vec::with_capacity(TOTAL), 0usize, 0u32);
    let mut scratch = vec![0u8; 4096];
    let start = Instant::now();
    while received.len() < TOTAL {
        assert!(start.elapsed() < T, "stuck: {written} written, {} received", received.len());
        a.poll().unwrap();
        if client.readiness().unwrap().writable && written < TOTAL {
            match (&client).write(&data[written..]) {
                Ok(n) => written += n,
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
            }
        }
        let id = server.as_ref().map(Stream::id);
        b.poll_with(|stream, payload| {
            assert_eq!(Some(stream), id, "only the accepted stream is offered data");
            // Take everything, nothing, or half, in turn: what is left is read below, in order.
            turn += 1;
            let n = match turn % 3 {
                0 => payload.len(),
                1 => 0,
                _ => payload.len() / 2,
            };
            received.extend_from_slice(&payload[..n]);
            in_place += n;
            n
        })
        .unwrap();
        if server.is_none() && listener.is_acceptable().unwrap() {
            let (s, _) = listener.accept().unwrap();
            s.set_nonblocking(true).unwrap();
            server = Some(s);
        }
        // Drain what was buffered, so that the next segments can be offered in place.
        while let Some(s) = &server
            && s.readiness().unwrap().readable
        {
            let n = (&*s).read(&mut scratch).unwrap();
            assert!(n > 0, "no end of stream before the data");
            received.extend_from_slice(&scratch[..n]);
        }
    }
    assert!(received == data, "in-place and buffered reads make the stream, in order");
    // Once one segment is left (partly) buffered, the rest of that poll is buffered too.
    assert!(in_place > TOTAL / 64 && in_place < TOTAL, "{in_place} of {TOTAL} bytes in place");
}

/// A poll hook runs with the stack at the start of every poll, and a connection its accept hook
/// took becomes a `Stream` through `Stream::from_handle`: the shape of a runtime that feeds its
/// own accept queue.
#[test]
fn poll_hook_and_from_handle_serve_connections_an_accept_hook_took() {
    use std::cell::RefCell;
    use std::rc::Rc;
    use tcp_lib::socket::PollHook;
    use tcp_lib::stack::{AcceptHook, ListenerId, StreamId};

    struct Take(Rc<RefCell<Vec<StreamId>>>);
    impl AcceptHook for Take {
        fn established(&mut self, _: ListenerId, stream: StreamId) {
            self.0.borrow_mut().push(stream);
        }
    }
    struct Count(Rc<RefCell<u64>>);
    impl PollHook for Count {
        fn poll(&mut self, _stack: &mut Stack, _now: Instant) -> bool {
            *self.0.borrow_mut() += 1;
            false
        }
    }

    let (_pool, dev_a, dev_b) = pair();
    let a = interface(dev_a, A_IP);
    let b = interface(dev_b, B_IP);
    let taken = Rc::new(RefCell::new(Vec::new()));
    let polls = Rc::new(RefCell::new(0));
    b.with_stack(|s| {
        s.listen(7).unwrap();
        s.set_accept_hook(Some(Box::new(Take(Rc::clone(&taken)))));
    })
    .unwrap();
    assert!(b.set_poll_hook(Some(Box::new(Count(Rc::clone(&polls))))).unwrap().is_none());
    let client = Stream::connect_nonblocking(&a, SocketAddrV4::new(B_IP, 7)).unwrap();
    let start = Instant::now();
    while taken.borrow().is_empty() {
        assert!(start.elapsed() < T);
        a.poll().unwrap();
        b.poll().unwrap();
    }
    assert!(*polls.borrow() > 0, "the hook ran on every poll of b");
    let id = taken.borrow_mut().pop().unwrap();
    let server = Stream::from_handle(&b, id).unwrap();
    assert_eq!(
        (server.local_addr(), server.peer_addr()),
        (SocketAddrV4::new(B_IP, 7).into(), client.local_addr())
    );
    server.set_nonblocking(true).unwrap();
    (&client).write_all(b"handed over").unwrap();
    let mut buf = [0u8; 32];
    let start = Instant::now();
    let n = loop {
        assert!(start.elapsed() < T);
        a.poll().unwrap();
        b.poll().unwrap();
        match (&server).read(&mut buf) {
            Ok(n) => break n,
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
        }
    };
    assert_eq!(&buf[..n], b"handed over");
    server.abort().unwrap();
    let stale = Stream::from_handle(&b, id);
    assert_eq!(stale.unwrap_err().kind(), io::ErrorKind::NotConnected, "a released handle");
    let before = *polls.borrow();
    drop(b.set_poll_hook(None).unwrap());
    b.poll().unwrap();
    assert_eq!(*polls.borrow(), before, "removed");
}
