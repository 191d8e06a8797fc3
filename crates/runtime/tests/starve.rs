//! Nobody starves the runtime: on the 82599 model with two cores, 1,000 connections write to a
//! port whose service never reads, while 8 clients of an echo port must be served byte-exact. The
//! pool, sized for everything that can hold its buffers, never runs dry (`rx_no_buffer` stays 0),
//! the stacks' connection memory stays under their budget, the counters say what the budget
//! refused, and every buffer comes back.

use std::io::{self, Read, Write};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use netchannel::dev::NetDevice;
use netchannel_runtime::{Core, Runtime, Stopping, Stream};
use tcp_lib::socket::{Interface, Stream as ClientStream};
use tcp_lib::stack::Stack;
use tcp_lib::tcp::BufferBudget;

const ECHO: u16 = 7;
/// Connections here are accepted and never read.
const SINK: u16 = 9;
const SILENT: usize = 1000;
const GOOD: usize = 8;
const WRITE: usize = 64 * 1024;
const MESSAGE: usize = 30_000;
/// Each server stack's budget.
const BUDGET: usize = 2 << 20;
const T: Duration = Duration::from_secs(60);

/// Accepts on both ports: echoes the echo port's connections, holds the sink's unread.
fn serve(core: &mut Core<'_>) -> io::Result<()> {
    let echo = core.listen(ECHO)?;
    let sink = core.listen(SINK)?;
    echo.set_nonblocking(true);
    sink.set_nonblocking(true);
    let mut held: Vec<Stream<'_>> = Vec::new();
    let mut echoing: Vec<(Stream<'_>, Vec<u8>)> = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    while !core.is_stopping() {
        match core.poll_wait(Some(Duration::from_millis(1))) {
            Err(e) if Stopping::is(&e) => break,
            r => r?,
        }
        for (listener, holds) in [(&sink, true), (&echo, false)] {
            loop {
                match listener.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(true)?;
                        if holds {
                            held.push(s);
                        } else {
                            echoing.push((s, Vec::new()));
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock || Stopping::is(&e) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        // Echo: what was read goes back before more is read.
        echoing.retain_mut(|(s, pending)| {
            let s = &*s;
            if !pending.is_empty() {
                match (&*s).write(pending) {
                    Ok(n) => drop(pending.drain(..n)),
                    Err(e) => return e.kind() == io::ErrorKind::WouldBlock,
                }
            }
            if pending.is_empty() {
                match (&*s).read(&mut buf) {
                    Ok(0) => return false,
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                    Err(e) => return e.kind() == io::ErrorKind::WouldBlock,
                }
            }
            true
        });
    }
    Ok(())
}

/// The peer: the silent writers and the echo clients; returns the echo clients' bytes back.
fn clients<D: NetDevice>(iface: &Interface<D>, server: std::net::Ipv4Addr) -> Vec<Vec<u8>> {
    let connect =
        |port| ClientStream::connect_nonblocking(iface, SocketAddrV4::new(server, port)).expect("a port");
    let silent: Vec<ClientStream<D>> = (0..SILENT).map(|_| connect(SINK)).collect();
    let payload = vec![0x5a; WRITE];
    let mut silent_sent = vec![0; SILENT];
    let start = Instant::now();
    // The attack first: every silent connection writes until the server's budget holds it.
    while start.elapsed() < Duration::from_secs(2) {
        iface.poll_wait(Some(Duration::from_millis(1))).expect("the peer's device");
        for (s, sent) in silent.iter().zip(&mut silent_sent) {
            if let Ok(n) = (&*s).write(&payload[*sent..]) {
                *sent += n;
            }
        }
    }
    let good: Vec<(ClientStream<D>, Vec<u8>)> = (0..GOOD)
        .map(|i| (connect(ECHO), (0..MESSAGE).map(|j| (i * 7 + j * 13).to_le_bytes()[0]).collect()))
        .collect();
    let mut sent = [0; GOOD];
    let mut back = vec![Vec::new(); GOOD];
    let mut buf = vec![0u8; 16 * 1024];
    while back.iter().map(Vec::len).sum::<usize>() < GOOD * MESSAGE {
        assert!(
            start.elapsed() < T,
            "stuck: {:?} of {MESSAGE} bytes back each",
            back.iter().map(Vec::len).collect::<Vec<_>>()
        );
        iface.poll_wait(Some(Duration::from_millis(1))).expect("the peer's device");
        for (i, (s, msg)) in good.iter().enumerate() {
            if let Ok(n) = (&*s).write(&msg[sent[i]..]) {
                sent[i] += n;
            }
            while let Ok(n) = (&*s).read(&mut buf) {
                if n == 0 {
                    break;
                }
                back[i].extend_from_slice(&buf[..n]);
            }
        }
        // The attack goes on.
        for (s, sent) in silent.iter().zip(&mut silent_sent) {
            if *sent < WRITE
                && let Ok(n) = (&*s).write(&payload[*sent..])
            {
                *sent += n;
            }
        }
    }
    for (i, (_, msg)) in good.iter().enumerate() {
        assert!(
            &back[i] == msg,
            "echo client {i}: {} of {MESSAGE} bytes back, or other bytes",
            back[i].len()
        );
    }
    back
}

#[test]
fn silent_connections_do_not_starve_the_pool_or_the_heap() {
    let mut runtime = Runtime::builder()
        .cores(2)
        .configure(|_, c| {
            c.buffer_memory = BUDGET;
            c.tcp.initial_rto = Duration::from_millis(200);
            c.tcp.min_rto = Duration::from_millis(200);
        })
        .build()
        .expect("the model opens");
    let ip = runtime.ip().address();
    let peer = runtime.take_peer().expect("the model's peer");
    let mut config = peer.stack_config(runtime.ip());
    config.buffer_memory = usize::MAX / 2;
    let (_, report) = runtime
        .run(serve, move |_| {
            let (device, pool) = peer.into_parts();
            let iface = Interface::new(Stack::new(config, Instant::now()), device, pool.cache());
            clients(&iface, ip)
        })
        .expect("the runtime runs");
    let s = &report.snapshot;
    eprintln!("{s}");
    assert!(report.errors.is_empty(), "{report}");
    assert_eq!(s.rx_no_buffer(), 0, "the pool never ran dry: {s}");
    for (name, audit) in &report.buffers {
        assert_eq!(audit.outstanding, 0, "{name}: {audit:?}");
    }
    let bound = (BUDGET + 2 * BufferBudget::GUARANTEED * (SILENT + GOOD)) as u64;
    for c in &s.cores {
        assert!(
            c.stack.buffer_memory_peak <= bound,
            "core {}: {} over {bound}",
            c.core,
            c.stack.buffer_memory_peak
        );
    }
    assert!(s.cores.iter().map(|c| c.stack.rx_buffer_clamps).sum::<u64>() > 0, "the budget held: {s}");
    let peak: u64 = s.cores.iter().map(|c| c.stack.buffer_memory_peak).sum();
    eprintln!(
        "peak connection memory {peak} over {} cores (bound {bound} each); frames dropped at full channels {}",
        s.cores.len(),
        s.dropped_channel_full()
    );
}
