//! The runtime serving an echo on the 82599 model, with its in-process peer as the client: every
//! byte checked, on 1..3 cores, in both placements, with a slow core that the others steal from
//! (the handoff: detach, forward, adopt, re-point), with flow groups migrating while traffic
//! flows, and under loss and reordering both ways. Every run ends with every buffer back.

use std::io::{self, Read, Write};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use netchannel::dev::{DirectionConfig, FaultConfig, FaultInjector};
use netchannel_runtime::{Core, Placement, Report, Runtime, Stopping, Stream};
use tcp_lib::socket::Interface;
use tcp_lib::stack::Stack;
use tcp_lib::wire::Ipv6Cidr;

mod common;

use common::{T, clients, quick_timers};

const PORT: u16 = 7;

/// Echoes every connection of this core, many at once, non-blocking; a core listed in `slow`
/// takes at most one connection per 20 ms (a worker that is behind), so its accept queue fills
/// and the other cores steal from it.
fn echo(core: &mut Core<'_>, slow: Option<usize>) -> io::Result<()> {
    let listener = core.listen(PORT)?;
    listener.set_nonblocking(true);
    let slow = slow == Some(core.id());
    let mut last_accept = Instant::now();
    let mut conns: Vec<(Stream<'_>, Vec<u8>)> = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    while !core.is_stopping() {
        match core.poll_wait(Some(Duration::from_millis(1))) {
            Err(e) if Stopping::is(&e) => break,
            r => r?,
        }
        while !slow || last_accept.elapsed() >= Duration::from_millis(20) {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(true)?;
                    conns.push((s, Vec::new()));
                    last_accept = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if Stopping::is(&e) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        conns.retain_mut(|(s, pending)| step(s, pending, &mut buf));
    }
    Ok(())
}

/// Moves one connection's echo along; false once it is finished (dropping it closes it).
fn step(s: &Stream<'_>, pending: &mut Vec<u8>, buf: &mut [u8]) -> bool {
    loop {
        if !pending.is_empty() {
            match (&*s).write(pending) {
                Ok(n) => {
                    pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
            if !pending.is_empty() {
                return true;
            }
        }
        match (&*s).read(buf) {
            Ok(0) => return false,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

struct Run {
    cores: usize,
    placement: Placement,
    conns: usize,
    size: usize,
    slow: Option<usize>,
    faults: Option<FaultConfig>,
    backlog: usize,
    /// Client connections open at once.
    at_once: usize,
    /// Serve and connect over IPv6 (both ends dual-stack).
    ipv6: bool,
}

impl Default for Run {
    fn default() -> Self {
        Self {
            cores: 2,
            placement: Placement::Same,
            conns: 16,
            size: 20_000,
            slow: None,
            faults: None,
            backlog: 4096,
            at_once: usize::MAX,
            ipv6: false,
        }
    }
}

const SERVER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const PEER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);

fn run(r: Run) -> Report {
    let mut builder = Runtime::builder()
        .cores(r.cores)
        .placement(r.placement)
        .backlog(r.backlog)
        .configure(|_, c| quick_timers(c));
    if r.ipv6 {
        builder = builder.ipv6(Ipv6Cidr::new(SERVER6, 64).expect("a /64"));
    }
    let mut runtime = builder.build().expect("the model opens");
    let server = if r.ipv6 {
        SocketAddr::from((SERVER6, PORT))
    } else {
        SocketAddr::V4(SocketAddrV4::new(runtime.ip().address(), PORT))
    };
    let peer = runtime.take_peer().expect("the model's peer");
    let mut config = peer.stack_config(runtime.ip());
    if r.ipv6 {
        config = config.with_ipv6(Ipv6Cidr::new(PEER6, 64).expect("a /64"));
    }
    quick_timers(&mut config);
    let slow = r.slow;
    let (echoed, report) = runtime
        .run(
            |core| echo(core, slow),
            move |_| {
                let (device, pool) = peer.into_parts();
                let stack = Stack::new(config, Instant::now());
                match r.faults {
                    Some(faults) => {
                        let device = FaultInjector::new(device, &pool, faults);
                        let iface = Interface::new(stack, device, pool.cache());
                        clients(&iface, server, r.conns, r.at_once, r.size)
                    }
                    None => {
                        let iface = Interface::new(stack, device, pool.cache());
                        clients(&iface, server, r.conns, r.at_once, r.size)
                    }
                }
            },
        )
        .expect("the runtime runs");
    assert_eq!(echoed, r.conns * r.size);
    assert!(report.errors.is_empty(), "{report}");
    assert_eq!(report.snapshot.accepted(), r.conns as u64, "{}", report.snapshot);
    for (name, audit) in &report.buffers {
        assert_eq!(audit.outstanding, 0, "{name}: {audit:?}");
    }
    report
}

#[test]
fn one_core_echoes_byte_exact() {
    let report = run(Run { cores: 1, ..Run::default() });
    let s = &report.snapshot;
    assert_eq!(s.cores.len(), 1);
    assert_eq!(s.queues.len(), 1);
    assert_eq!(s.rx_malformed(), 0);
    assert_eq!(s.dropped(), 0, "{s}");
}

#[test]
fn connections_spread_over_three_cores_and_reach_them_from_any_queue() {
    let report = run(Run { cores: 3, conns: 48, ..Run::default() });
    let s = &report.snapshot;
    let served: Vec<u64> =
        s.cores.iter().map(|c| c.handoff.accepted_local + c.handoff.accepted_stolen).collect();
    assert!(served.iter().filter(|&&n| n > 0).count() >= 2, "flow groups spread the connections: {served:?}");
    // Every core's stack got frames, and the default channels carried ARP and SYNs.
    assert!(s.cores.iter().all(|c| c.stack.rx_frames > 0), "{s}");
    assert!(s.queues.iter().map(|q| q.channelizer.delivered).sum::<u64>() > 0, "{s}");
    assert_eq!(s.dropped(), 0, "{s}");
}

/// IPv6 on the 82599 model: the peer's neighbour solicitations reach the server's stacks only
/// through the multicast table array the runtime programs (the model filters multicast as the
/// 82599 does), the answers are shared between the cores, and RSS spreads the IPv6 flows over
/// the queues.
#[test]
fn ipv6_over_the_model_on_three_cores() {
    let report = run(Run { cores: 3, conns: 48, ipv6: true, ..Run::default() });
    let s = &report.snapshot;
    let served: Vec<u64> =
        s.cores.iter().map(|c| c.handoff.accepted_local + c.handoff.accepted_stolen).collect();
    assert!(served.iter().filter(|&&n| n > 0).count() >= 2, "RSS spreads the IPv6 flows: {served:?}");
    assert!(s.cores.iter().map(|c| c.stack.ndp_adverts).sum::<u64>() > 0, "{s}");
    assert_eq!(s.dropped(), 0, "{s}");
}

#[test]
fn split_placement_echoes_byte_exact() {
    let report = run(Run { cores: 2, placement: Placement::Split, conns: 24, ..Run::default() });
    assert_eq!(report.snapshot.queues.len(), 2);
}

/// Core 1 takes one connection per 20 ms: its accept queue fills, core 0 steals, and each stolen
/// connection moves to core 0's stack (its frames forwarded meanwhile, its registration
/// re-pointed). Every byte still comes back and no stack sends a reset.
#[test]
fn stolen_connections_move_to_the_stealer() {
    let report = run(Run {
        cores: 2,
        conns: 160,
        at_once: 24,
        size: 2_000,
        slow: Some(1),
        backlog: 16,
        ..Run::default()
    });
    let s = &report.snapshot;
    let stolen: u64 = s.cores.iter().map(|c| c.handoff.accepted_stolen).sum();
    let given: u64 = s.cores.iter().map(|c| c.handoff.given).sum();
    let requested: u64 = s.cores.iter().map(|c| c.handoff.steals_requested).sum();
    assert!(stolen > 0, "the slow core was stolen from: {s}");
    assert_eq!(stolen, given, "every given connection was adopted: {s}");
    assert_eq!(requested, given, "every request was served: {s}");
    assert!(s.cores.iter().all(|c| c.handoff.failed == 0 && c.stack.rst_sent == 0), "{s}");
    let accept = &s.accept[0];
    assert_eq!(accept.stolen, stolen, "{s}");
}

/// The same under 3% loss and 2% reordering both ways on the peer's link: handoffs complete, every
/// byte comes back.
///
/// Whether the fast core steals at all depends on how fast lossy handshakes arrive against the
/// slow core's 20 ms per accept, and under ThreadSanitizer, with the other tests of this file on
/// the same two CPUs, a run sometimes completes without a steal (one in six full runs of the
/// file, once). So the run is repeated, up to three times, until one has stolen: every run must
/// be byte-exact without a failed handoff, and one of them must have handed connections over.
#[test]
fn handoff_under_loss_and_reordering() {
    let lossy = DirectionConfig { drop: 0.03, reorder: 0.02, reorder_by: 3, ..DirectionConfig::default() };
    let mut snapshots = Vec::new();
    for seed in [7, 8, 9] {
        let faults = FaultConfig { seed, rx: lossy, tx: lossy, ..FaultConfig::default() };
        let report = run(Run {
            cores: 2,
            conns: 120,
            at_once: 24,
            size: 4_000,
            slow: Some(1),
            backlog: 16,
            faults: Some(faults),
            ..Run::default()
        });
        let s = report.snapshot;
        assert!(s.cores.iter().all(|c| c.handoff.failed == 0), "{s}");
        let stolen: u64 = s.cores.iter().map(|c| c.handoff.accepted_stolen).sum();
        if stolen > 0 {
            return;
        }
        snapshots.push(s.to_string());
    }
    panic!("no connection was stolen in three runs:\n{}", snapshots.join("\n"));
}

/// With a slow core under a steady arrival of connections, the balancer moves flow groups toward
/// the stealer while connections flow (and they keep flowing: every byte comes back).
#[test]
fn flow_groups_migrate_while_traffic_flows() {
    let report = run(Run {
        cores: 2,
        conns: 480,
        at_once: 24,
        size: 1_000,
        slow: Some(1),
        backlog: 16,
        ..Run::default()
    });
    let s = &report.snapshot;
    assert!(s.accept[0].migrated > 0, "the balancer migrated groups: {s}");
}

/// A `main` that panics (a client that gave up, say) stops the cores and lets the panic through,
/// instead of leaving the runtime waiting for cores that were never told to stop.
#[test]
fn a_panicking_main_stops_the_cores() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = Runtime::builder().cores(2).build().expect("the model opens");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.run(|core| echo(core, None), |_| -> usize { panic!("the client gave up") })
        }));
        let _ = done.send(outcome.is_err());
    });
    let panicked = finished.recv_timeout(T).expect("run returned: the cores stopped");
    assert!(panicked, "the panic of main reaches the caller");
}
