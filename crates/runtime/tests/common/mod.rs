//! What the runtime's model tests share: the in-process client that opens many connections and
//! checks every echoed byte, and timers for a lossy link.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use netchannel::dev::NetDevice;
use tcp_lib::socket::{Interface, Stream as ClientStream};
use tcp_lib::stack::Config as StackConfig;

/// The bound on every run.
pub(crate) const T: Duration = Duration::from_secs(60);

/// The bytes connection `i` sends.
pub(crate) fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (j.wrapping_mul(31) ^ i.wrapping_mul(131)).to_le_bytes()[0]).collect()
}

/// One client connection.
struct Conn<D: NetDevice> {
    stream: ClientStream<D>,
    data: Vec<u8>,
    sent: usize,
    back: Vec<u8>,
}

/// `conns` connections to `server`, at most `at_once` open at a time, each sending `size` bytes
/// and reading them back, non-blocking, on `iface`; returns the bytes echoed.
pub(crate) fn clients<D: NetDevice>(
    iface: &Interface<D>,
    server: SocketAddr,
    conns: usize,
    at_once: usize,
    size: usize,
) -> usize {
    let connect = |i: usize| Conn {
        stream: ClientStream::connect_nonblocking(iface, server).expect("a port"),
        data: pattern(i, size),
        sent: 0,
        back: Vec::with_capacity(size),
    };
    let mut opened = at_once.min(conns);
    let mut open: Vec<Conn<D>> = (0..opened).map(connect).collect();
    let start = Instant::now();
    let mut echoed = 0;
    let mut buf = vec![0u8; 16 * 1024];
    while !open.is_empty() || opened < conns {
        assert!(start.elapsed() < T, "stuck: {} connections open, {echoed} bytes back", open.len());
        while open.len() < at_once && opened < conns {
            open.push(connect(opened));
            opened += 1;
        }
        iface.poll_wait(Some(Duration::from_millis(1))).expect("the peer's device");
        open.retain_mut(|c| {
            let r = c.stream.readiness().expect("a stream");
            assert!(!r.error, "a client connection failed: {:?}", c.stream.take_error());
            if r.writable && c.sent < c.data.len() {
                match (&c.stream).write(&c.data[c.sent..]) {
                    Ok(n) => c.sent += n,
                    Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
                }
            }
            loop {
                match (&c.stream).read(&mut buf) {
                    Ok(0) => panic!("the server closed early ({} of {} back)", c.back.len(), c.data.len()),
                    Ok(n) => c.back.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("read: {e}"),
                }
            }
            if c.back.len() == c.data.len() {
                assert!(c.back == c.data, "the echo is byte-exact");
                echoed += c.back.len();
                return false; // dropped: a graceful close
            }
            true
        });
    }
    // Let the closes finish.
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        iface.poll_wait(Some(Duration::from_millis(1))).expect("the peer's device");
    }
    echoed
}

/// Timers for a lossy model link: retransmissions within a few hundred milliseconds, but no
/// spurious ones on a slow machine (or under ThreadSanitizer): a segment retransmitted after its
/// connection closed is rightly answered with a reset, which the tests count as a failure.
pub(crate) fn quick_timers(config: &mut StackConfig) {
    config.tcp.initial_rto = Duration::from_millis(200);
    config.tcp.min_rto = Duration::from_millis(200);
    config.tcp.nodelay = true;
}
