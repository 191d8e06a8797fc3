//! The async layer (`Runtime::run_async`, feature `async`) on the 82599 model, with the model's
//! in-process peer as the client: an async echo serving many concurrent connections on 2 cores,
//! byte-exact, also under loss and reordering both ways; a task woken from another thread runs at
//! once (the core sleeps on its wakeup word, not in naps it cannot cut short); timers fire in
//! deadline order; `connect` to a closed port is refused and `connect_timeout` to an address that
//! never answers times out; and when `main` returns, a service waiting in `accept` and a task
//! waiting in `read` both end.

#![cfg(feature = "async")]

use std::cell::RefCell;
use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use futures_io::{AsyncRead, AsyncWrite};
use netchannel::dev::{DirectionConfig, FaultConfig, FaultInjector};
use netchannel_runtime::{
    AsyncCore, AsyncStream, Control, DEFAULT_IP, Peer, Port, Report, Runtime, Stopping,
};
use tcp_lib::socket::{Interface, Listener as ClientListener, Stream as ClientStream};
use tcp_lib::stack::Stack;
use tcp_lib::wire::Ipv4Cidr;

mod common;

use common::{T, clients, quick_timers};

const PORT: u16 = 7;

/// Runs `service` on `cores` cores of the model (quick timers both ends), `main` with the model's
/// peer: the runtime's run, bounded by [`T`] (a run that does not stop fails the test).
fn run<S, R>(
    cores: usize,
    service: S,
    main: impl FnOnce(&Control<'_>, Peer, Ipv4Addr) -> R + Send + 'static,
) -> (R, Report)
where
    S: for<'c> AsyncFn(AsyncCore<'c>) -> io::Result<()> + Sync + Send + 'static,
    R: Send + 'static,
{
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let mut runtime = Runtime::builder()
            .cores(cores)
            .configure(|_, c| quick_timers(c))
            .build()
            .expect("the model opens");
        let server = runtime.ip().address();
        let peer = runtime.take_peer().expect("the model's peer");
        let _ = done.send(runtime.run_async(service, move |control| main(control, peer, server)));
    });
    let (out, report) = result.recv_timeout(T).expect("the run ended in time").expect("the runtime runs");
    assert!(report.errors.is_empty(), "{report}");
    for (name, audit) in &report.buffers {
        assert_eq!(audit.outstanding, 0, "{name}: {audit:?}");
    }
    (out, report)
}

/// The peer's interface, its stack tuned as the cores' are.
fn peer_interface(peer: Peer, server: Ipv4Addr) -> Interface<Port> {
    let mut config = peer.stack_config(server_cidr(server));
    quick_timers(&mut config);
    let (device, pool) = peer.into_parts();
    Interface::new(Stack::new(config, Instant::now()), device, pool.cache())
}

/// The server's address with the runtime's default prefix.
fn server_cidr(server: Ipv4Addr) -> Ipv4Cidr {
    Ipv4Cidr::new(server, DEFAULT_IP.prefix_len()).expect("a prefix")
}

/// Reads into `buf` through `futures_io::AsyncRead`.
async fn read(mut stream: &AsyncStream<'_>, buf: &mut [u8]) -> io::Result<usize> {
    poll_fn(|cx| Pin::new(&mut stream).poll_read(cx, buf)).await
}

/// Writes all of `buf` through `futures_io::AsyncWrite`.
async fn write_all(mut stream: &AsyncStream<'_>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut stream).poll_write(cx, buf)).await?;
        buf = &buf[n..];
    }
    Ok(())
}

/// The async echo: accept, a task per connection echoing until the peer's end of stream.
async fn echo_service(core: AsyncCore<'_>) -> io::Result<()> {
    let listener = core.listen(PORT)?;
    loop {
        let (stream, _) = match listener.accept().await {
            Err(e) if Stopping::is(&e) => return Ok(()),
            accepted => accepted?,
        };
        core.spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match read(&stream, &mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if write_all(&stream, &buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
        })
        .detach();
    }
}

/// `conns` connections, `at_once` at a time, `size` bytes each, against the async echo on 2
/// cores, through `faults` when given.
fn echo_run(conns: usize, at_once: usize, size: usize, faults: Option<FaultConfig>) -> Report {
    let (echoed, report) = run(2, echo_service, move |_, peer, server| {
        let to = SocketAddr::V4(SocketAddrV4::new(server, PORT));
        let mut config = peer.stack_config(server_cidr(server));
        quick_timers(&mut config);
        let (device, pool) = peer.into_parts();
        let stack = Stack::new(config, Instant::now());
        match faults {
            Some(faults) => {
                let iface = Interface::new(stack, FaultInjector::new(device, &pool, faults), pool.cache());
                clients(&iface, to, conns, at_once, size)
            }
            None => clients(&Interface::new(stack, device, pool.cache()), to, conns, at_once, size),
        }
    });
    assert_eq!(echoed, conns * size, "{report}");
    assert_eq!(report.snapshot.accepted(), conns as u64, "{}", report.snapshot);
    report
}

#[test]
fn many_concurrent_connections_on_two_cores_byte_exact() {
    let report = echo_run(200, usize::MAX, 20_000, None);
    let served: Vec<u64> =
        report.snapshot.cores.iter().map(|c| c.handoff.accepted_local + c.handoff.accepted_stolen).collect();
    assert!(served.iter().all(|&n| n > 0), "both cores served: {served:?}");
}

#[test]
fn concurrent_connections_under_loss_and_reordering_both_ways() {
    let lossy = DirectionConfig { drop: 0.03, reorder: 0.02, reorder_by: 3, ..DirectionConfig::default() };
    let faults = FaultConfig { seed: 11, rx: lossy, tx: lossy, ..FaultConfig::default() };
    echo_run(60, 20, 4_000, Some(faults));
}

/// A one-shot signal from another thread: the value and the waker of the task awaiting it.
#[derive(Default)]
struct Signal {
    state: Mutex<(Option<Instant>, Option<Waker>)>,
}

impl Signal {
    /// Sets the value (the time it was set) and wakes the task.
    fn set(&self) {
        let waker = {
            let mut state = self.state.lock().expect("not poisoned");
            state.0 = Some(Instant::now());
            state.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Whether a task waits on it.
    fn awaited(&self) -> bool {
        self.state.lock().expect("not poisoned").1.is_some()
    }

    /// Completes with the time it was set.
    async fn wait(&self) -> Instant {
        poll_fn(|cx| {
            let mut state = self.state.lock().expect("not poisoned");
            match state.0 {
                Some(at) => Poll::Ready(at),
                None => {
                    state.1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
}

/// A spawned task awaiting a signal that the `main` thread sets runs at once: the core sleeps on
/// its wakeup word, which the task's waker notifies from the other thread (through the executor's
/// queue and its sleeping ticker). Over 31 rounds (each after
/// the core has been idle for 20 ms, long past its spin), the median from `set` to the task
/// running is under 1 ms, and every round completes within a second.
#[test]
fn a_task_woken_from_another_thread_runs_at_once() {
    const ROUNDS: usize = 31;
    let signals: Arc<Vec<Signal>> = Arc::new((0..ROUNDS).map(|_| Signal::default()).collect());
    let (latency_tx, latency_rx) = mpsc::channel::<Duration>();
    let latency_tx = Mutex::new(latency_tx);
    let for_core = Arc::clone(&signals);
    let (latencies, _report) = run(
        1,
        async move |core: AsyncCore<'_>| {
            // A spawned task (scheduled through the executor's queue), not the main future
            // (whose waker is the core's own).
            let (signals, latency_tx) = (Arc::clone(&for_core), &latency_tx);
            let latency_tx = latency_tx.lock().expect("not poisoned").clone();
            core.spawn(async move {
                for signal in signals.iter() {
                    let set_at = signal.wait().await;
                    let _ = latency_tx.send(set_at.elapsed());
                }
            })
            .await;
            Ok(())
        },
        move |_, _peer, _| {
            let mut latencies = Vec::new();
            for signal in signals.iter() {
                let start = Instant::now();
                while !signal.awaited() {
                    assert!(start.elapsed() < Duration::from_secs(5), "the task never waited");
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Long enough for the core to go from spinning to sleeping.
                std::thread::sleep(Duration::from_millis(20));
                signal.set();
                match latency_rx.recv_timeout(Duration::from_secs(1)) {
                    Ok(latency) => latencies.push(latency),
                    Err(_) => {
                        // Let the service finish (it awaits every signal) once the core wakes.
                        signals.iter().for_each(Signal::set);
                        return Err(format!(
                            "round {}: the woken task did not run within a second",
                            latencies.len()
                        ));
                    }
                }
            }
            Ok(latencies)
        },
    );
    let mut latencies = latencies.expect("every round woke the task");
    latencies.sort();
    let median = latencies[ROUNDS / 2];
    println!("wake from another thread: median {median:?}, max {:?}", latencies[ROUNDS - 1]);
    assert!(median < Duration::from_millis(1), "median wake latency {median:?}: {latencies:?}");
}

/// Tasks sleeping for different durations finish in deadline order, none early.
#[test]
fn timers_fire_in_deadline_order() {
    let order: Arc<Mutex<Vec<(usize, Duration)>>> = Arc::default();
    let for_core = Arc::clone(&order);
    let (_, _report) = run(
        1,
        async move |core: AsyncCore<'_>| {
            let start = Instant::now();
            let done: Rc<RefCell<Vec<(usize, Duration)>>> = Rc::default();
            let delays = [40u64, 10, 30, 0, 20, 10];
            let tasks: Vec<_> = delays
                .iter()
                .enumerate()
                .map(|(i, &ms)| {
                    let (core2, done) = (core.clone(), Rc::clone(&done));
                    core.spawn(async move {
                        core2.sleep(Duration::from_millis(ms)).await;
                        done.borrow_mut().push((i, start.elapsed()));
                    })
                })
                .collect();
            for task in tasks {
                task.await;
            }
            for_core.lock().expect("not poisoned").extend(done.borrow().iter().copied());
            Ok(())
        },
        |_, _peer, _| {},
    );
    let order = order.lock().expect("not poisoned").clone();
    let ids: Vec<usize> = order.iter().map(|&(i, _)| i).collect();
    // Equal deadlines (tasks 1 and 5) fire in the order they were set.
    assert_eq!(ids, [3, 1, 5, 4, 2, 0], "{order:?}");
    let delays = [40u64, 10, 30, 0, 20, 10];
    for &(i, at) in &order {
        assert!(at >= Duration::from_millis(delays[i]), "task {i} woke early: {at:?}");
    }
}

/// `connect` to a port nobody listens on is refused; `connect_timeout` to an address that never
/// answers (no host answers its ARP) times out after the timeout; `connect` to the peer's listener
/// is established and carries data both ways.
#[test]
fn connect_refused_timed_out_and_established() {
    const OPEN: u16 = 9000;
    let outcome: Arc<Mutex<Vec<String>>> = Arc::default();
    let for_core = Arc::clone(&outcome);
    let finished = Arc::new(AtomicBool::new(false));
    let for_main = Arc::clone(&finished);
    let peer_ip = Arc::new(Mutex::new(None::<Ipv4Addr>));
    let (peer_ip_core, peer_ip_main) = (Arc::clone(&peer_ip), peer_ip);
    let (_, _report) = run(
        1,
        async move |core: AsyncCore<'_>| {
            let mut log = Vec::new();
            let peer = loop {
                if let Some(ip) = *peer_ip_core.lock().expect("not poisoned") {
                    break ip;
                }
                core.sleep(Duration::from_millis(1)).await;
            };
            match core.connect(SocketAddrV4::new(peer, 9)).await {
                Err(e) => log.push(format!("closed port: {:?}", e.kind())),
                Ok(_) => log.push("closed port: connected".into()),
            }
            let nobody = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 77), 9);
            let start = Instant::now();
            match core.connect_timeout(nobody, Duration::from_millis(300)).await {
                Err(e) => {
                    log.push(format!("nobody: {:?} after {} ms", e.kind(), start.elapsed().as_millis()))
                }
                Ok(_) => log.push("nobody: connected".into()),
            }
            match core.connect_timeout(SocketAddrV4::new(peer, OPEN), Duration::from_secs(5)).await {
                Ok(stream) => {
                    write_all(&stream, b"ping").await?;
                    let mut buf = [0u8; 4];
                    let n = read(&stream, &mut buf).await?;
                    log.push(format!("open port: {:?}", String::from_utf8_lossy(&buf[..n])));
                }
                Err(e) => log.push(format!("open port: {e}")),
            }
            for_core.lock().expect("not poisoned").extend(log);
            for_main.store(true, Ordering::Release);
            Ok(())
        },
        move |_, peer, server| {
            let iface = peer_interface(peer, server);
            let ip = Peer::address(server_cidr(server)).address();
            let listener = ClientListener::bind(&iface, OPEN).expect("the peer listens");
            listener.set_nonblocking(true).expect("non-blocking");
            *peer_ip_main.lock().expect("not poisoned") = Some(ip);
            let mut accepted: Option<ClientStream<_>> = None;
            let start = Instant::now();
            while !finished.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(10) {
                iface.poll_wait(Some(Duration::from_millis(1))).expect("the peer's device");
                if accepted.is_none()
                    && let Ok((s, _)) = listener.accept()
                {
                    s.set_nonblocking(true).expect("non-blocking");
                    accepted = Some(s);
                }
                if let Some(s) = &accepted {
                    let mut buf = [0u8; 4];
                    if let Ok(4) = (&*s).read(&mut buf) {
                        assert_eq!(&buf, b"ping");
                        (&*s).write_all(b"pong").expect("the send buffer takes 4 bytes");
                    }
                }
            }
        },
    );
    let outcome = outcome.lock().expect("not poisoned").clone();
    assert_eq!(outcome.len(), 3, "{outcome:?}");
    assert_eq!(outcome[0], "closed port: ConnectionRefused", "{outcome:?}");
    let ms: u64 = outcome[1]
        .strip_prefix("nobody: TimedOut after ")
        .and_then(|r| r.strip_suffix(" ms"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{outcome:?}"));
    assert!((300..3000).contains(&ms), "timed out after {ms} ms, for a 300 ms timeout");
    assert_eq!(outcome[2], "open port: \"pong\"", "{outcome:?}");
}

/// When `main` returns, the service waiting in `accept` ends (its accept fails with `Stopping`)
/// and a task waiting in `read` on a quiet connection ends too (dropped, or failing with
/// `Stopping`), before `run_async` returns.
#[test]
fn stopping_ends_a_waiting_accept_and_a_waiting_read() {
    #[derive(Default)]
    struct Seen {
        reading: AtomicBool,
        read_ended: AtomicBool,
        accept_stopped: AtomicBool,
    }
    /// Marks the reading task ended when it is dropped (or returns).
    struct Ended(Arc<Seen>);
    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.read_ended.store(true, Ordering::Release);
        }
    }
    let seen: Arc<Seen> = Arc::default();
    let (for_core, for_main) = (Arc::clone(&seen), Arc::clone(&seen));
    let ((), _report) = run(
        1,
        async move |core: AsyncCore<'_>| {
            let listener = core.listen(PORT)?;
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let seen = Arc::clone(&for_core);
                        core.spawn(async move {
                            let _ended = Ended(Arc::clone(&seen));
                            seen.reading.store(true, Ordering::Release);
                            let mut buf = [0u8; 16];
                            let _ = read(&stream, &mut buf).await;
                        })
                        .detach();
                    }
                    Err(e) if Stopping::is(&e) => {
                        for_core.accept_stopped.store(true, Ordering::Release);
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                }
            }
        },
        move |_, peer, server| {
            let iface = peer_interface(peer, server);
            let mut stream =
                ClientStream::connect_nonblocking(&iface, SocketAddrV4::new(server, PORT)).expect("a port");
            let start = Instant::now();
            while !for_main.reading.load(Ordering::Acquire) {
                assert!(start.elapsed() < Duration::from_secs(10), "the connection never reached its task");
                iface.poll_wait(Some(Duration::from_millis(1))).expect("the peer's device");
            }
            // Quiet: the task waits in `read`, the service in `accept`.
            let until = Instant::now() + Duration::from_millis(50);
            while Instant::now() < until {
                iface.poll_wait(Some(Duration::from_millis(1))).expect("the peer's device");
            }
            assert!(!for_main.read_ended.load(Ordering::Acquire), "the read waits");
            let _ = stream.flush();
        },
    );
    assert!(seen.accept_stopped.load(Ordering::Acquire), "the accept failed with Stopping");
    assert!(seen.read_ended.load(Ordering::Acquire), "the reading task ended");
}
