//! Instructions per echo transaction (a 64-byte message in, its echo out) on the server's side of
//! an established connection, through tcp-lib's socket layer (`tcp_lib::socket::Interface`,
//! `Stream`), counted by gungraun (callgrind). `cargo bench -p netchannels-benches --bench icount_echo`;
//! `scripts/icount.sh` divides each count by the `_n<N>` suffix of the benchmark id.
//!
//! What the echo service runs per message on a core is: its event loop polls the core's
//! `tcp_lib::socket::Interface` (device RX burst, `Stack::receive`, timers, `Stack::transmit`,
//! device TX burst), reads the stream (non-blocking `Stream::read`, `Stack::recv`) and writes the
//! bytes back (non-blocking `Stream::write`, `Stack::send`); the next poll sends them. The runtime
//! itself (`netchannel_runtime::Runtime::run`) cannot be driven from one thread: it spawns a thread
//! per core and the model's service thread, and its device is the channelizer's net channel fed by
//! another thread, so its counts would not be deterministic. This bench therefore measures the same
//! socket-layer calls on one `Interface` over the in-memory `netchannel::dev::Pair`, in one thread:
//!
//! * In `setup` (not measured): two stacks (fixed secret seeds, default TCP settings: delayed ACK
//!   40 ms, Nagle on, as the service runs) on the two ends of a `Pair`, the server's behind an
//!   `Interface` with a virtual clock (a fixed base, advanced 10 µs per poll); the client (a bare
//!   tcp-lib `Stack`) connects, the server accepts and sets the stream non-blocking, and one echo
//!   round trip warms both up.
//! * Measured (`server_echo_n256`), per transaction: the client sends 64 bytes and polls (the
//!   segment lies in the server's RX queue), the server polls (receives it; its ACK is delayed),
//!   reads 64 bytes, writes them, polls again (the echo leaves, carrying the ACK); the client polls
//!   (takes the echo; its ACK rides on the next message) and reads it. The client's work is in
//!   [`icount_client_send`] and [`icount_client_recv`], and the callgrind option
//!   `--toggle-collect=*icount_client_*` keeps it out of the counts (they are only called in the
//!   measured function, where collection is on), so the count is the server's path alone: two polls,
//!   one read, one write.
//!
//! `teardown` asserts that every message came back whole and that the server sent exactly one frame
//! per transaction. No anchor: there is no other stack's echo path to hold this against here (see
//! `icount_tcp` for tcp-lib beside smoltcp on one segment and its ACK).

#![allow(missing_docs, reason = "gungraun's macros generate undocumented modules, constants and functions")]

use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::time::{Duration, Instant};

use gungraun::{Callgrind, LibraryBenchmarkConfig, library_benchmark, library_benchmark_group, main};
use netchannel::dev::{NetDevice, Pair};
use netchannel::pool::{HugePages, Pool, PoolCache};
use tcp_lib::socket::{Interface, Listener, Stream};
use tcp_lib::stack::{Config, Stack, StreamId};
use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};

/// Transactions per measured pass.
const N: usize = 256;
/// Bytes per message.
const MESSAGE: usize = 64;
/// Virtual time per poll.
const STEP: Duration = Duration::from_micros(10);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PORT: u16 = 7;

/// The callgrind option that keeps the client's work out of the counts.
const TOGGLE_CLIENT: &str = "--toggle-collect=*icount_client_*";

/// The client: a bare tcp-lib stack on its end of the `Pair`.
struct Client {
    stack: Stack,
    dev: Pair,
    cache: PoolCache,
    stream: StreamId,
    message: [u8; MESSAGE],
    buf: [u8; 2 * MESSAGE],
    /// Bytes of echo received that matched what was sent.
    echoed: usize,
}

/// Both ends of the connection and the virtual clock.
struct Echo {
    clock: Rc<Cell<Instant>>,
    client: Client,
    server: Interface<Pair>,
    stream: Stream<Pair>,
    buf: [u8; 2 * MESSAGE],
    /// Frames the server transmitted while measured.
    sent: usize,
    _listener: Listener<Pair>,
    _pool: Pool,
}

fn config(dev: &Pair, ip: Ipv4Addr, seed: u64) -> Config {
    let mut c = Config::new(EthernetAddress(dev.info().mac.0), Ipv4Cidr::new(ip, 24).expect("a /24"));
    c.secret_seed = Some(seed);
    c
}

impl Echo {
    fn tick(&self) -> Instant {
        let now = self.clock.get() + STEP;
        self.clock.set(now);
        now
    }

    /// The client's send and poll (set-up's own copy: the measured one is toggled off).
    fn client_send(&mut self) {
        let now = self.tick();
        client_send(&mut self.client, now);
    }

    fn client_recv(&mut self) {
        let now = self.tick();
        client_recv(&mut self.client, now);
    }

    /// One transaction on the server: poll, read, write, poll; returns the frames it sent.
    fn server_echo(&mut self) -> usize {
        self.tick();
        let mut sent = self.server.poll().expect("poll").transmitted;
        let n = self.stream.read(&mut self.buf).expect("a message");
        let w = self.stream.write(&self.buf[..n]).expect("room");
        debug_assert_eq!(w, n);
        self.tick();
        sent += self.server.poll().expect("poll").transmitted;
        sent
    }
}

fn client_send(c: &mut Client, now: Instant) {
    assert_eq!(c.stack.send(c.stream, &c.message).expect("send"), MESSAGE);
    c.stack.poll(now, &mut c.dev, &c.cache).expect("poll");
}

fn client_recv(c: &mut Client, now: Instant) {
    c.stack.poll(now, &mut c.dev, &c.cache).expect("poll");
    let n = c.stack.recv(c.stream, &mut c.buf).expect("the echo");
    if c.buf[..n] == c.message[..n] {
        c.echoed += n;
    }
    c.message[0] = c.message[0].wrapping_add(1);
}

/// The client's half of a measured transaction, kept out of the counts.
#[inline(never)]
fn icount_client_send(e: &mut Echo) {
    e.client_send();
}

/// As [`icount_client_send`].
#[inline(never)]
fn icount_client_recv(e: &mut Echo) {
    e.client_recv();
}

fn setup_echo() -> Echo {
    let pool = Pool::builder(4096).hugepages(HugePages::Never).build().expect("pool");
    let (dev_a, dev_b) = Pair::builder(&pool).capacity(1024).build().expect("pair");
    // A fixed base; only differences from it matter to the stacks.
    let base = Instant::now();
    let clock = Rc::new(Cell::new(base));
    let mut client_stack = Stack::new(config(&dev_a, CLIENT_IP, 1), base);
    let client_stream = client_stack.connect(SocketAddrV4::new(SERVER_IP, PORT)).expect("connect");
    let server_stack = Stack::new(config(&dev_b, SERVER_IP, 2), base);
    let server_clock = Rc::clone(&clock);
    let server = Interface::with_clock(server_stack, dev_b, pool.cache(), move || server_clock.get());
    let listener = Listener::bind(&server, PORT).expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let mut client = Client {
        stack: client_stack,
        cache: pool.cache(),
        dev: dev_a,
        stream: client_stream,
        message: [0x5a; MESSAGE],
        buf: [0; 2 * MESSAGE],
        echoed: 0,
    };
    let mut accepted = None;
    for _ in 0..100 {
        let now = clock.get() + STEP;
        clock.set(now);
        client.stack.poll(now, &mut client.dev, &client.cache).expect("poll");
        server.poll().expect("poll");
        if let Ok((stream, _)) = listener.accept() {
            accepted = Some(stream);
            break;
        }
    }
    let stream = accepted.expect("the server accepted");
    stream.set_nonblocking(true).expect("non-blocking");
    let mut e = Echo {
        clock,
        client,
        server,
        stream,
        buf: [0; 2 * MESSAGE],
        sent: 0,
        _listener: listener,
        _pool: pool,
    };
    // Let the handshake's last frames settle, then one echo to warm both ends up.
    for _ in 0..4 {
        let now = e.tick();
        e.client.stack.poll(now, &mut e.client.dev, &e.client.cache).expect("poll");
        e.server.poll().expect("poll");
    }
    e.client_send();
    e.server_echo();
    e.client_recv();
    assert_eq!(e.client.echoed, MESSAGE, "the warm-up echo came back");
    e.client.echoed = 0;
    e
}

#[library_benchmark]
#[bench::server_echo_n256(setup = setup_echo, teardown = teardown_echo)]
fn echo(mut e: Echo) -> Echo {
    for _ in 0..N {
        icount_client_send(&mut e);
        e.sent += e.server_echo();
        icount_client_recv(&mut e);
    }
    e
}

fn teardown_echo(e: Echo) {
    assert_eq!(e.client.echoed, N * MESSAGE, "every message came back whole");
    assert_eq!(e.sent, N, "one frame (the echo, carrying the ACK) per transaction");
}

library_benchmark_group!(name = echo_group, benchmarks = [echo]);

main!(
    config = LibraryBenchmarkConfig::default().tool(Callgrind::with_args([TOGGLE_CLIENT])),
    library_benchmark_groups = [echo_group]
);
