//! The Linux kernel is our peer: our [`Stack`] on a TAP device in a private network namespace, the
//! kernel's TCP behind `std::net` sockets on threads in the same namespace (see `kernel_support`).
//!
//! * bulk transfers both ways at once, kernel client -> our server and our client -> kernel server,
//!   every byte checked against the sender's generator (`TCP_KERNEL_BYTES` each way, 64 MiB by
//!   default);
//! * the same through loss, reordering and duplication (our `FaultInjector`, both ways) plus
//!   `iptables -m statistic` drops on the kernel side (`TCP_KERNEL_LOSSY_BYTES`, 2 MiB by default:
//!   about 10% loss each way; SACK recovery (RFC 6675) repairs most losses, ~0.25 MiB/s, where
//!   NewReno alone managed ~0.1 MiB/s; the RTOs left are mostly tail losses and lost
//!   retransmissions in windows of two or three segments; `TCP_KERNEL_RECV_MAX` autotunes our
//!   receive buffer up to that many bytes);
//! * the same lossy transfers with a second kernel in our stack's place (`kernel_support::peer`:
//!   its own namespace and TAP, joined to ours by a relay under the same injector), the anchor
//!   the lossy tests' times compare against: with CUBIC, as ours, and with BBR
//!   (`scripts/lossy-rounds.sh` gathers them; `TCP_KERNEL_PEER_RMEM` sets that kernel's
//!   `tcp_rmem`);
//! * 1,000 concurrent kernel connections to our echo server, random-sized messages;
//! * half-close, RST on abort (and refusal), zero windows (slow readers), keepalive, both ways;
//! * window scaling, SACK-permitted and timestamps negotiated, as a pcap shows.
//!
//! Every test runs over IPv4 (its plain name) and over IPv6 (`_ipv6`): the same code, the family
//! picking the addresses. Addresses: the kernel 10.88.0.1/24 and fd00:88::1/64 on `ktap0`, our
//! stack 10.88.0.2 and fd00:88::2 with the TAP's MAC (over IPv6, our stack and the kernel find
//! each other by Neighbor Discovery; the kernel's neighbour cache is checked). Needs root
//! and `/dev/net/tun`; otherwise each test prints `skipped: <why>` (`netns_test::skip`).
//! The test command counts that as a skip (under `CI=true` a failure unless allowed); an error once
//! those preconditions hold fails the test.
#![cfg(not(loom))]

mod kernel_support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kernel_support::{
    Family, Host, KernelTcpInfo, Observer, OnTap, Sink, Source, congestion_control, env_bytes,
    in_private_namespace, kernel_accept, kernel_connect, kernel_connect_to, kernel_read_all,
    kernel_write_all, new_pool, open_tap, our_drain, our_feed, parse_tcp_any, splitmix, stack_config,
    thread_netns,
};
use netchannel::dev::{DirectionConfig, FaultConfig, FaultInjector, FaultStats, PcapWriter, RateLimit, Tap};
use netchannel::pool::Pool;
use tcp_lib::stack::{Error, ListenerConfig, StreamId};
use tcp_lib::tcp::{self, ConnectionError, Keepalive, State, Stats};
use tcp_lib::wire::TcpControl;

const MIB: u64 = 1 << 20;

fn kernel_listen(family: Family, port: u16) -> Result<TcpListener, String> {
    TcpListener::bind(family.kernel(port)).map_err(|e| format!("kernel bind :{port}: {e}"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The kernel connects to our listener.
    KernelClient,
    /// We connect to the kernel's listener.
    OurClient,
}

/// What the kernel's half of a bulk transfer got: the bytes (checked against the sender's
/// stream), what the kernel says of its socket once it had read everything, and when it had:
/// the moment the other side's whole stream, FIN included, had arrived; and when its connection
/// was established (`connect` or `accept` returned).
struct KernelBulk {
    got: Sink,
    info: KernelTcpInfo,
    read_done: Instant,
    established: Instant,
}

/// The kernel's half of [`bulk`]: connect to `to` (or accept on `listener`), write `bytes` from a
/// second thread and half-close, read to the end (checking it against the stream of `expect`).
fn kernel_bulk(
    listener: Option<&TcpListener>,
    to: SocketAddr,
    (seed, expect): (u64, u64),
    bytes: u64,
) -> Result<KernelBulk, String> {
    let stream = match listener {
        Some(l) => kernel_accept(l)?,
        None => kernel_connect_to(to)?,
    };
    let established = Instant::now();
    let mut w = stream.try_clone().map_err(|e| e.to_string())?;
    let writer = std::thread::spawn(move || -> Result<(), String> {
        kernel_write_all(&mut w, &mut Source::new(seed, bytes))?;
        w.shutdown(Shutdown::Write).map_err(|e| e.to_string())
    });
    let mut r = stream;
    let got = kernel_read_all(&mut r, expect)?;
    let read_done = Instant::now();
    writer.join().map_err(|_| "kernel writer panicked".to_owned())??;
    Ok(KernelBulk { got, info: kernel_info_once_delivered(&r, bytes)?, read_done, established })
}

/// What the kernel says of `stream` once the peer has acknowledged the `bytes` it wrote (for at
/// most 10 s): its retransmissions then are all of them. When the reading ends, the writer has
/// only handed its data to the send buffer (up to megabytes of it), and a count taken there left
/// out the retransmissions of the transfer's last round trips: the kernel in our place's
/// direction often ends after the other, and through the bottleneck such a count was a fifth
/// lower than the frames its data lost.
fn kernel_info_once_delivered(stream: &TcpStream, bytes: u64) -> Result<KernelTcpInfo, String> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let info = kernel_support::kernel_tcp_info(stream)?;
        if info.bytes_acked >= bytes || Instant::now() >= until {
            return Ok(info);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The seeds of the kernel's stream and of ours in [`bulk`] on `port`.
fn bulk_seeds(port: u16) -> (u64, u64) {
    (0x6b65_726e ^ u64::from(port), 0x6f75_7273 ^ u64::from(port))
}

/// What [`bulk`] measured.
struct Bulk {
    /// Until both directions were done.
    elapsed: Duration,
    /// Until the kernel had read all we sent (our direction alone: the kernel's own sending, and
    /// so its congestion control, does not set it).
    ours_delivered: Duration,
    /// Until we had read all the kernel sent (its direction alone).
    theirs_delivered: Duration,
    /// The same from the moment our connection was established: the handshake's retransmission
    /// timeouts (1 s each, the same for any TCP) left out.
    ours_data: Duration,
    stats: Stats,
    kernel: KernelTcpInfo,
}

/// `bytes` each way at once on one connection, each side sending then half-closing and reading
/// to the end; checks every byte both ways (against the senders' generator) and that our
/// connection's counters say so. Returns the times, our connection's statistics, and what the
/// kernel says of its socket once it had read everything.
fn bulk<D: OnTap>(
    family: Family,
    host: &mut Host<D>,
    role: Role,
    port: u16,
    bytes: u64,
    limit: Duration,
) -> Result<Bulk, String> {
    let (kernel_seed, our_seed) = bulk_seeds(port);
    let listener = match role {
        Role::KernelClient => Some(host.stack.listen(port).map_err(|e| e.to_string())?),
        Role::OurClient => None,
    };
    let kl = match role {
        Role::OurClient => Some(kernel_listen(family, port)?),
        Role::KernelClient => None,
    };
    let start = Instant::now();
    let kernel_failed = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let kernel_failed = &kernel_failed;
        let kernel = scope.spawn(move || -> Result<KernelBulk, String> {
            let r = kernel_bulk(kl.as_ref(), family.stack(port), (kernel_seed, our_seed), bytes);
            kernel_failed.store(r.is_err(), Ordering::SeqCst);
            r
        });

        let mut stream = match role {
            Role::OurClient => Some(host.stack.connect(family.kernel(port)).map_err(|e| e.to_string())?),
            Role::KernelClient => None,
        };
        let mut src = Source::new(our_seed, bytes);
        let mut sink = Sink::new(kernel_seed);
        let (mut shut, mut eof) = (false, false);
        let (mut established, mut theirs_done) = (None, None);
        let mut buf = vec![0u8; 64 * 1024];
        let result = host.run(limit, "bulk transfer", |stack| {
            if stream.is_none()
                && let Some(l) = listener
            {
                stream = stack.accept(l);
            }
            let Some(s) = stream else { return Ok(kernel.is_finished()) };
            if established.is_none() && stack.state(s).is_ok_and(|st| st != State::SynSent) {
                established = Some(Instant::now());
            }
            our_feed(stack, s, &mut src, &mut shut)?;
            eof = eof || our_drain(stack, s, &mut sink, &mut buf)?;
            if eof && theirs_done.is_none() {
                theirs_done = Some(Instant::now());
            }
            // A kernel thread that ended early has failed: stop and report its error below.
            Ok(kernel.is_finished() && ((eof && shut) || kernel_failed.load(Ordering::SeqCst)))
        });
        let kernel = kernel.join().map_err(|_| "kernel thread panicked".to_owned())?;
        result?;
        let KernelBulk { got: kernel_got, info: kernel_info, read_done, .. } = kernel?;
        let s = stream.ok_or("no connection")?;
        let stats = host.stack.connection_stats(s).map_err(|e| e.to_string())?;
        sink.check(bytes, "kernel -> us")?;
        kernel_got.check(bytes, "us -> kernel")?;
        if (stats.bytes_out, stats.bytes_in) != (bytes, bytes) {
            return Err(format!(
                "our counters say {} bytes sent and {} received of {bytes}",
                stats.bytes_out, stats.bytes_in
            ));
        }
        let elapsed = start.elapsed();
        println!(
            "{role:?} port {port}: {bytes} bytes each way, byte-exact, in {elapsed:.2?} ({:.1} MiB/s each way); the kernel's {kernel_info:?}; our connection {stats:?}",
            bytes as f64 / MIB as f64 / elapsed.as_secs_f64(),
        );
        host.stack.close(s).map_err(|e| e.to_string())?;
        if let Some(l) = listener {
            host.stack.unlisten(l).map_err(|e| e.to_string())?;
        }
        Ok(Bulk {
            elapsed,
            ours_delivered: read_done.saturating_duration_since(start),
            theirs_delivered: theirs_done.unwrap_or_else(Instant::now).saturating_duration_since(start),
            ours_data: read_done.saturating_duration_since(established.unwrap_or(start)),
            stats,
            kernel: kernel_info,
        })
    })
}

/// Bulk transfers use bigger buffers than the default 64 KiB so the window is not the bottleneck.
fn bulk_config(dev: &impl netchannel::dev::NetDevice) -> tcp_lib::stack::Config {
    let mut c = stack_config(dev);
    c.tcp.send_buffer = 512 * 1024;
    c.tcp.recv_buffer = 512 * 1024;
    c
}

#[test]
fn threads_spawned_after_unshare_share_the_namespace() {
    let outside = thread_netns().unwrap();
    in_private_namespace(move || {
        let inside = thread_netns()?;
        if inside == outside {
            return Err(format!("unshare left the thread in {outside}"));
        }
        let child = std::thread::spawn(thread_netns).join().map_err(|_| "child panicked")??;
        if child != inside {
            return Err(format!("a thread spawned after unshare is in {child}, its creator in {inside}"));
        }
        // And it sees the namespace's interfaces: binding the TAP's address works there.
        let _tap = open_tap()?;
        std::thread::spawn(|| kernel_listen(Family::V4, 7).map(drop))
            .join()
            .map_err(|_| "child panicked")??;
        println!("namespace thread and its child: {inside}; the test harness: {outside}");
        Ok(())
    });
}

fn bulk_kernel_client_to_our_server_byte_exact_both_ways_over(family: Family) {
    in_private_namespace(move || {
        let tap = open_tap()?;
        let config = bulk_config(&tap);
        let mut host = Host::new(tap, config)?;
        let bytes = env_bytes("TCP_KERNEL_BYTES", 64 * MIB);
        bulk(family, &mut host, Role::KernelClient, 5001, bytes, Duration::from_secs(90))?;
        host.check_leaks()
    });
}

#[test]
fn bulk_kernel_client_to_our_server_byte_exact_both_ways() {
    bulk_kernel_client_to_our_server_byte_exact_both_ways_over(Family::V4);
}

#[test]
fn bulk_kernel_client_to_our_server_byte_exact_both_ways_ipv6() {
    bulk_kernel_client_to_our_server_byte_exact_both_ways_over(Family::V6);
}

fn bulk_our_client_to_kernel_server_byte_exact_both_ways_over(family: Family) {
    in_private_namespace(move || {
        let tap = open_tap()?;
        let config = bulk_config(&tap);
        let mut host = Host::new(tap, config)?;
        let bytes = env_bytes("TCP_KERNEL_BYTES", 64 * MIB);
        bulk(family, &mut host, Role::OurClient, 5002, bytes, Duration::from_secs(90))?;
        Ok(())
    });
}

#[test]
fn bulk_our_client_to_kernel_server_byte_exact_both_ways() {
    bulk_our_client_to_kernel_server_byte_exact_both_ways_over(Family::V4);
}

#[test]
fn bulk_our_client_to_kernel_server_byte_exact_both_ways_ipv6() {
    bulk_our_client_to_kernel_server_byte_exact_both_ways_over(Family::V6);
}

/// The TCP configuration of our side in a lossy test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tcp {
    /// The library's defaults (with `stack_config`'s 200 ms minimum RTO).
    Defaults,
    /// [`tcp::Config::linux`]: RACK, tail loss probes, Linux's CUBIC, RTO estimator and slow start.
    Linux,
    /// [`tcp::Config::bbr`]: the Linux profile with BBR and pacing.
    Bbr,
}

impl Tcp {
    fn name(self) -> &'static str {
        match self {
            Self::Defaults => "defaults",
            Self::Linux => "linux",
            Self::Bbr => "bbr",
        }
    }

    /// Its congestion control, by the name Linux gives it.
    fn cc(self) -> &'static str {
        match self {
            Self::Defaults | Self::Linux => "cubic",
            Self::Bbr => "bbr",
        }
    }
}

/// What the kernel of the calling thread's namespace counted of its loss recovery (`TcpExt`,
/// as `nstat` shows it): the counters to set beside ours.
struct KernelRecovery([u64; 10]);

impl KernelRecovery {
    const NAMES: [&str; 10] = [
        "TCPTimeouts",
        "TCPLossProbes",
        "TCPLossProbeRecovery",
        "TCPSackRecovery",
        "TCPFastRetrans",
        "TCPLostRetransmit",
        "TCPDSACKUndo",
        "TCPDSACKRecv",
        "TCPDSACKOldSent",
        "TCPDSACKOfoSent",
    ];

    fn read() -> Result<Self, String> {
        let values = kernel_support::kernel_tcp_ext(&Self::NAMES)?;
        let mut out = [0; 10];
        out.copy_from_slice(&values);
        Ok(Self(out))
    }

    fn timeouts(&self) -> u64 {
        self.0[0]
    }

    fn recoveries(&self) -> u64 {
        self.0[3]
    }
}

impl std::fmt::Display for KernelRecovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (n, v)) in Self::NAMES.iter().zip(self.0).enumerate() {
            write!(f, "{}{n} {v}", if i == 0 { "" } else { ", " })?;
        }
        Ok(())
    }
}

/// One lossy transfer, as `scripts/lossy-rounds.sh` gathers it.
struct LossyResult<'a> {
    path: Path,
    /// Who stood in our place: `defaults`, `linux` (our stack so configured), `kernel` (a second
    /// kernel).
    side: &'a str,
    /// Its congestion control.
    cc: &'a str,
    /// The congestion control of the kernel at the other end.
    peer_cc: &'a str,
    family: Family,
    role: Role,
    /// Until the other end had read all that the side in our place sent: its direction alone.
    delivered: Duration,
    /// The same from the moment the side in our place was established: without the handshake,
    /// whose lost SYN or SYN-ACK costs any TCP a 1 s timeout and falls on one side more than
    /// the other (the injector's decisions follow the order of frames, and a kernel in our
    /// place sends frames of its own before its SYN).
    data: Duration,
    /// Until both directions were done.
    both: Duration,
    /// Until the side in our place had read all the other end sent (that end's direction).
    theirs: Duration,
    retransmits: u64,
    timeouts: u64,
    recoveries: u64,
    kernel_retransmits: u32,
}

impl LossyResult<'_> {
    fn print(&self) {
        println!(
            "lossy result: path={} side={} cc={} peer_cc={} family={:?} role={:?} secs={:.3} data_secs={:.3} both_secs={:.3} theirs_secs={:.3} retransmits={} timeouts={} recoveries={} kernel_retransmits={}",
            self.path.name(),
            self.side,
            self.cc,
            self.peer_cc,
            self.family,
            self.role,
            self.delivered.as_secs_f64(),
            self.data.as_secs_f64(),
            self.both.as_secs_f64(),
            self.theirs.as_secs_f64(),
            self.retransmits,
            self.timeouts,
            self.recoveries,
            self.kernel_retransmits,
        );
    }
}

/// The injector's faults each way. A frame held back for reordering leaves after 10 ms at the
/// latest: held until three later frames pass, it waited out whole retransmission timeouts when
/// the kernel's sender went quiet, and the kernel took that wait for a round trip (the RTT sample
/// of the SACK that first covered the frame: seconds to minutes), so its RTO grew to the 120 s
/// maximum and the test stalled to its bound about one run in twenty.
fn lossy_direction() -> DirectionConfig {
    DirectionConfig {
        drop: 0.05,
        duplicate: 0.01,
        reorder: 0.02,
        reorder_by: 3,
        reorder_timeout: Some(Duration::from_millis(10)),
        ..DirectionConfig::default()
    }
}

/// The lossy tests' paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// The faults alone: a round trip of a millisecond or less, as fast as the TAP and the two
    /// ends' loops go.
    Lossy,
    /// The faults behind a bottleneck: each way 5 ms of delay and 20 MB/s (frames beyond it wait
    /// in the injector's queue), a bandwidth-delay product of about 200 KB (140 full segments).
    /// Where the round trip is real, our stack and a kernel in its place each see it the same
    /// way, whatever their loops' sleeps add to the path of [`Path::Lossy`].
    Bottleneck,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Self::Lossy => "lossy",
            Self::Bottleneck => "bottleneck",
        }
    }

    /// One direction's faults on this path.
    fn direction(self) -> DirectionConfig {
        match self {
            Self::Lossy => lossy_direction(),
            Self::Bottleneck => DirectionConfig {
                delay: Duration::from_millis(5),
                rate: Some(RateLimit { bytes_per_sec: 20_000_000, burst_bytes: 64 * 1024 }),
                ..lossy_direction()
            },
        }
    }
}

/// The lossy tests' path on `tap`: `iptables` drops of 5% each way on the kernel's side (only
/// the injector's faults where iptables cannot, said with a skip line) and the injector's
/// faults of `path`, seeded by `seed`, around the TAP. Returns the device and the iptables
/// command used.
fn lossy_path(
    family: Family,
    tap: Tap,
    pool: &Pool,
    seed: u64,
    path: Path,
) -> (FaultInjector<Tap>, Option<&'static str>) {
    let iptables = match kernel_support::iptables_random_drop(family, 0.05) {
        Ok(cmd) => Some(cmd),
        Err(why) => {
            kernel_support::skip(&format!("the iptables part only (FaultInjector still runs): {why}"));
            None
        }
    };
    let faults = FaultConfig { seed, rx: path.direction(), tx: path.direction(), max_held: 4096 };
    (FaultInjector::new(tap, pool, faults), iptables)
}

/// Checks that a lossy transfer met the faults it was meant to (drops, reordering and
/// duplication by the injector, drops by both iptables rules when they were installed); returns
/// them said in a line.
fn lossy_faults_met(fs: &FaultStats, iptables: Option<&str>) -> Result<String, String> {
    let (input, output) = iptables.map_or((0, 0), |cmd| {
        (kernel_support::iptables_dropped(cmd, "INPUT"), kernel_support::iptables_dropped(cmd, "OUTPUT"))
    });
    let said = format!("faults {fs:?}, iptables drops in {input} out {output}");
    if fs.rx.dropped < 10 || fs.tx.dropped < 10 || fs.rx.reordered == 0 || fs.tx.duplicated == 0 {
        return Err(format!("too few faults to mean anything: {said}"));
    }
    if iptables.is_some() && (input == 0 || output == 0) {
        return Err(format!("iptables dropped nothing: {said}"));
    }
    Ok(said)
}

fn lossy(family: Family, role: Role, port: u16, seed: u64, tcp: Tcp) {
    lossy_on(Path::Lossy, family, role, port, seed, tcp);
}

fn lossy_on(path: Path, family: Family, role: Role, port: u16, seed: u64, tcp: Tcp) {
    // `TCP_LIB_TRACE=1`: our connection's loss recovery events on stderr (tcp-lib's `tracing`
    // events at DEBUG).
    if std::env::var_os("TCP_LIB_TRACE").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .try_init();
    }
    in_private_namespace(move || {
        let tap = open_tap()?;
        let mut config = bulk_config(&tap);
        if tcp != Tcp::Defaults {
            // The bulk transfers' buffers and TIME-WAIT; the rest Linux's.
            let bulk = config.tcp;
            let profile = if tcp == Tcp::Bbr { tcp::Config::bbr() } else { tcp::Config::linux() };
            config.tcp = tcp::Config {
                send_buffer: bulk.send_buffer,
                recv_buffer: bulk.recv_buffer,
                msl: bulk.msl,
                ..profile
            };
        }
        // `TCP_KERNEL_RECV_MAX=<bytes>`: our receive buffer autotuned from its 512 KiB up to that
        // (`tcp::Config::recv_buffer_max`), with out-of-order ranges for every other segment of
        // it (the check on `ooo_dropped` below holds then too), to set beside the fixed buffer.
        let recv_max = usize::try_from(env_bytes("TCP_KERNEL_RECV_MAX", 0)).unwrap_or(usize::MAX);
        if recv_max > config.tcp.recv_buffer {
            config.tcp.recv_buffer_max = recv_max;
            config.tcp.max_ooo_ranges = config.tcp.max_ooo_ranges.max(recv_max / 2896 + 1);
        }
        let pool = new_pool()?;
        let (dev, iptables) = lossy_path(family, tap, &pool, seed, path);
        let mut host = Host::with_pool(pool, dev, config);
        let bytes = env_bytes("TCP_KERNEL_LOSSY_BYTES", 2 * MIB);
        // A bound for a stall, not a speed target: through about 10% loss each way (the injector's
        // 5% and iptables' 5%) our side falls back to its RTO 9 to 54 times per run; 3.4 to 24 s
        // (median 8.7 s) for the IPv4 kernel client, 47 runs on a 2-core machine. (Before SACK
        // blocks were kept as Linux keeps them and reordering was bounded in time, the kernel's
        // RTO grew to seconds and minutes: 7 to 62 s, and about one run in twenty stalled to this
        // bound.)
        let peer_cc = congestion_control()?;
        let Bulk { elapsed, ours_delivered, theirs_delivered, ours_data, stats: ours, kernel } =
            bulk(family, &mut host, role, port, bytes, Duration::from_secs(300))?;
        let faults = lossy_faults_met(&host.dev.fault_stats(), iptables)?;
        println!(
            "{role:?}: {elapsed:.2?} ({ours_delivered:.2?} for ours to arrive), our retransmits {}, the kernel's {}, {faults}",
            ours.retransmits, kernel.retransmits
        );
        LossyResult {
            path,
            side: tcp.name(),
            cc: tcp.cc(),
            peer_cc: &peer_cc,
            family,
            role,
            delivered: ours_delivered,
            theirs: theirs_delivered,
            data: ours_data,
            both: elapsed,
            retransmits: ours.retransmits,
            timeouts: ours.timeouts,
            recoveries: ours.recoveries,
            kernel_retransmits: kernel.retransmits,
        }
        .print();
        println!("our receive buffer: {} bytes after {} raises", ours.recv_buffer, ours.recv_buffer_raises);
        println!(
            "our recovery: {} timeouts, {} tail loss probes ({} repaired a loss), {} recoveries, {} fast retransmissions, {} D-SACKs received ({} reductions undone), {} sent; the kernel's {}",
            ours.timeouts,
            ours.tail_loss_probes,
            ours.tlp_recoveries,
            ours.recoveries,
            ours.fast_retransmits,
            ours.dsacks_received,
            ours.dsack_undos,
            ours.dsacks_sent,
            KernelRecovery::read()?
        );
        if ours.retransmits == 0 {
            return Err("we never retransmitted through 5% loss".into());
        }
        if (tcp == Tcp::Bbr) != (ours.ssthresh == usize::MAX) {
            return Err(format!("{tcp:?} on our side, yet ssthresh {} (BBR has none)", ours.ssthresh));
        }
        // A 512 KiB window of full-sized segments has at most 181 holes, under the 256 ranges our
        // receiver holds: out-of-order data is never dropped for want of one (at 8 ranges, 500 to
        // 1,000 segments were, and the kernel sent 2.8 times as many segments again).
        if ours.ooo_dropped > 0 {
            return Err(format!("we dropped {} out-of-order segments for want of a range", ours.ooo_dropped));
        }
        // The path's round trip is a millisecond or less (the kernel's smoothed RTT ends under one
        // here). Hundreds of milliseconds are the kernel timing our ACKs: a SACK block first
        // reported long after its data arrived reads to it as a round trip that long, and its RTO
        // grows with it, to a stall (SACK blocks taken from all the data held out of order ended
        // this test with 25-409 ms and RTOs of up to 17 s).
        // Through the bottleneck, 10 ms of delay and a queue that holds up to 300 ms.
        let srtt_bound = Duration::from_millis(if path == Path::Bottleneck { 500 } else { 100 });
        if kernel.srtt > srtt_bound {
            return Err(format!("the kernel's smoothed RTT grew to {:?}: late SACK blocks?", kernel.srtt));
        }
        Ok(())
    });
}

/// D-SACK (RFC 2883) both ways with the kernel, on a path that duplicates a fifth of the frames
/// each way and drops none: our ACKs name the duplicates we receive and the kernel reads them
/// as D-SACKs (its `tcpi_dsack_dups`), and the kernel's D-SACKs reach our counter
/// (`Stats::dsacks_received`) while the kernel counts what it sent (`TCPDSACKOldSent`,
/// `TCPDSACKOfoSent`). Without D-SACK blocks the kernel's count stays 0 (measured with
/// `tcp::Config::dsack` off).
#[test]
fn dsack_both_ways_with_the_kernel() {
    in_private_namespace(move || {
        let tap = open_tap()?;
        let mut config = bulk_config(&tap);
        config.tcp.dsack = true;
        let pool = new_pool()?;
        let twice = DirectionConfig { duplicate: 0.2, ..DirectionConfig::default() };
        let faults = FaultConfig { seed: 29, rx: twice, tx: twice, max_held: 4096 };
        let dev = FaultInjector::new(tap, &pool, faults);
        let mut host = Host::with_pool(pool, dev, config);
        let Bulk { stats: ours, kernel, .. } =
            bulk(Family::V4, &mut host, Role::KernelClient, 5031, 512 * 1024, Duration::from_secs(60))?;
        let fs = host.dev.fault_stats();
        let [old, ofo] = kernel_support::kernel_tcp_ext(&["TCPDSACKOldSent", "TCPDSACKOfoSent"])?[..] else {
            return Err("two counters asked for".into());
        };
        println!(
            "D-SACKs: we sent {} (the kernel read {} duplicate segments in them), the kernel sent {} \
             (old {old}, out of order {ofo}) and we received {}; frames duplicated: to us {}, to the kernel {}",
            ours.dsacks_sent,
            kernel.dsack_dups,
            old + ofo,
            ours.dsacks_received,
            fs.rx.duplicated,
            fs.tx.duplicated,
        );
        if ours.dsacks_sent == 0 || kernel.dsack_dups == 0 {
            return Err(format!("no D-SACK from us reached the kernel ({} sent)", ours.dsacks_sent));
        }
        if old + ofo == 0 || ours.dsacks_received == 0 {
            return Err(format!("no D-SACK from the kernel reached us ({} sent)", old + ofo));
        }
        host.check_leaks()
    });
}

fn lossy_kernel_client_to_our_server_over(family: Family) {
    lossy(family, Role::KernelClient, 5011, 21, Tcp::Defaults);
}

#[test]
fn lossy_kernel_client_to_our_server() {
    lossy_kernel_client_to_our_server_over(Family::V4);
}

#[test]
fn lossy_kernel_client_to_our_server_ipv6() {
    lossy_kernel_client_to_our_server_over(Family::V6);
}

fn lossy_our_client_to_kernel_server_over(family: Family) {
    lossy(family, Role::OurClient, 5012, 22, Tcp::Defaults);
}

#[test]
fn lossy_our_client_to_kernel_server() {
    lossy_our_client_to_kernel_server_over(Family::V4);
}

#[test]
fn lossy_our_client_to_kernel_server_ipv6() {
    lossy_our_client_to_kernel_server_over(Family::V6);
}

/// The lossy transfers with [`tcp::Config::linux`] on our side (IPv4): RACK and tail loss probes
/// recover more losses without waiting for the RTO: 16 runs of the two here, 2.2 to 9.2 s, median
/// 5.6 s, against 6.3 to 15.4 s, median 8.6 s, with the defaults.
#[test]
fn lossy_kernel_client_to_our_linux_profile_server() {
    lossy(Family::V4, Role::KernelClient, 5013, 23, Tcp::Linux);
}

#[test]
fn lossy_our_linux_profile_client_to_kernel_server() {
    lossy(Family::V4, Role::OurClient, 5014, 24, Tcp::Linux);
}

/// The lossy transfers with [`tcp::Config::bbr`] on our side (IPv4), against the kernel's BBR in
/// our place (`lossy_kernel_client_to_a_kernel_in_our_place_bbr` and its pair below).
#[test]
fn lossy_kernel_client_to_our_bbr_server() {
    lossy(Family::V4, Role::KernelClient, 5019, 23, Tcp::Bbr);
}

#[test]
fn lossy_our_bbr_client_to_kernel_server() {
    lossy(Family::V4, Role::OurClient, 5020, 24, Tcp::Bbr);
}

/// The lossy transfers with a second kernel in our stack's place (`kernel_support::peer`): the
/// same faults in the same place (the injector on the test's TAP, `iptables` on the kernel's
/// side), the frames moved between the two TAPs by a relay instead of our stack. The anchor of
/// the tests above: how fast the kernel's own TCP gets through what ours gets through, with the
/// congestion control `cc` (the kernel at the other end keeps the host's).
fn lossy_with_kernel_peer(role: Role, port: u16, seed: u64, cc: &'static str) {
    lossy_with_kernel_peer_on(Path::Lossy, role, port, seed, cc);
}

fn lossy_with_kernel_peer_on(path: Path, role: Role, port: u16, seed: u64, cc: &'static str) {
    in_private_namespace(move || {
        let tap = open_tap()?;
        let pool = new_pool()?;
        let cache = pool.cache();
        let peer_cc = congestion_control()?;
        let (mut near, iptables) = lossy_path(Family::V4, tap, &pool, seed, path);
        let bytes = env_bytes("TCP_KERNEL_LOSSY_BYTES", 2 * MIB);
        // The peer sends what our stack would.
        let (kernel_seed, peer_seed) = bulk_seeds(port);
        let here_listener = match role {
            Role::OurClient => Some(kernel_listen(Family::V4, port)?),
            Role::KernelClient => None,
        };
        let failed = std::sync::atomic::AtomicBool::new(false);
        let start = Instant::now();
        let (relayed, here, (there, recovery)) = std::thread::scope(|scope| -> Result<_, String> {
            let failed = &failed;
            let (tap_tx, tap_rx) = std::sync::mpsc::channel();
            let peer = scope.spawn(move || -> Result<(KernelBulk, KernelRecovery), String> {
                let r = (|| {
                    let tap = kernel_support::peer::enter_peer_namespace()?;
                    // A kernel without the algorithm cannot be this anchor: a skip, not a failure.
                    kernel_support::set_congestion_control(cc)
                        .map_err(|e| format!("{}{e}", netns_test::SKIP))?;
                    // `TCP_KERNEL_PEER_RMEM="MIN DEFAULT MAX"`: the kernel in our place's
                    // `tcp_rmem` (its namespace's own), e.g. to offer its largest window at once
                    // as our autotuned receiver comes to (`TCP_KERNEL_RECV_MAX`).
                    if let Ok(rmem) = std::env::var("TCP_KERNEL_PEER_RMEM") {
                        std::fs::write("/proc/sys/net/ipv4/tcp_rmem", &rmem)
                            .map_err(|e| format!("the peer's tcp_rmem = {rmem}: {e}"))?;
                    }
                    let listener = match role {
                        Role::KernelClient => Some(
                            TcpListener::bind(Family::V4.stack(port))
                                .map_err(|e| format!("peer bind :{port}: {e}"))?,
                        ),
                        Role::OurClient => None,
                    };
                    tap_tx.send(tap).map_err(|_| "the relay is gone".to_owned())?;
                    let r = kernel_bulk(
                        listener.as_ref(),
                        Family::V4.kernel(port),
                        (peer_seed, kernel_seed),
                        bytes,
                    )?;
                    let recovery = KernelRecovery::read()?;
                    println!("the recovery of the kernel in our place ({cc}): {recovery}");
                    Ok((r, recovery))
                })();
                failed.fetch_or(r.is_err(), Ordering::SeqCst);
                r
            });
            // The peer's TAP, once its listener (if any) is bound; none: the peer failed first.
            let Ok(mut far) = tap_rx.recv() else {
                return Err(peer
                    .join()
                    .map_err(|_| "peer thread panicked".to_owned())?
                    .err()
                    .unwrap_or_default());
            };
            let here_listener = here_listener.as_ref();
            let kernel = scope.spawn(move || {
                let r = kernel_bulk(here_listener, Family::V4.stack(port), (kernel_seed, peer_seed), bytes);
                failed.fetch_or(r.is_err(), Ordering::SeqCst);
                r
            });
            let relayed = kernel_support::peer::relay(
                &mut near,
                &mut far,
                &cache,
                || (peer.is_finished() && kernel.is_finished()) || failed.load(Ordering::SeqCst),
                Duration::from_secs(300),
            );
            let there = peer.join().map_err(|_| "peer thread panicked".to_owned())?;
            let here = kernel.join().map_err(|_| "kernel thread panicked".to_owned())?;
            Ok((relayed?, here?, there?))
        })?;
        let elapsed = start.elapsed();
        let delivered = here.read_done.saturating_duration_since(start);
        here.got.check(bytes, "peer -> kernel")?;
        there.got.check(bytes, "kernel -> peer")?;
        let faults = lossy_faults_met(&near.fault_stats(), iptables)?;
        println!(
            "{role:?}, a kernel in our place ({cc}): {elapsed:.2?} ({delivered:.2?} for its data to arrive), its retransmits {}, the kernel's {}, {faults}, relayed {relayed:?}",
            there.info.retransmits, here.info.retransmits
        );
        println!("the far kernel's recovery, with a kernel in our place ({cc}): {}", KernelRecovery::read()?);
        LossyResult {
            path,
            side: "kernel",
            cc,
            peer_cc: &peer_cc,
            family: Family::V4,
            role,
            delivered,
            data: here.read_done.saturating_duration_since(there.established),
            both: elapsed,
            theirs: there.read_done.saturating_duration_since(start),
            retransmits: u64::from(there.info.retransmits),
            timeouts: recovery.timeouts(),
            recoveries: recovery.recoveries(),
            kernel_retransmits: here.info.retransmits,
        }
        .print();
        if there.info.retransmits == 0 || here.info.retransmits == 0 {
            return Err(format!(
                "a kernel never retransmitted through 5% loss: {:?}, {:?}",
                there.info, here.info
            ));
        }
        drop((near, cache));
        pool.check_leaks().map_err(|e| e.to_string())
    });
}

// The seeds of the Linux-profile tests above: the injector draws the same decisions for the n-th
// frame each way, whoever sends it. Not always for the same frames: the kernel in our place sends
// frames of its own before its SYN, so a lost handshake (1 s for any TCP) can fall on one side
// and not the other; `data_secs` leaves it out. The kernel in our place runs CUBIC, as
// `tcp::Config::linux()` does: the like-for-like anchor.
#[test]
fn lossy_kernel_client_to_a_kernel_in_our_place() {
    lossy_with_kernel_peer(Role::KernelClient, 5015, 23, "cubic");
}

#[test]
fn lossy_kernel_in_our_place_client_to_kernel_server() {
    lossy_with_kernel_peer(Role::OurClient, 5016, 24, "cubic");
}

// The same with BBR in our place (the default of some hosts, this project's CI machine among
// them): a congestion control that does not take random loss for congestion, which our stack
// does not offer. Where the kernel has no BBR, the test says so and passes.
#[test]
fn lossy_kernel_client_to_a_kernel_in_our_place_bbr() {
    lossy_with_kernel_peer(Role::KernelClient, 5017, 23, "bbr");
}

#[test]
fn lossy_kernel_in_our_place_client_to_kernel_server_bbr() {
    lossy_with_kernel_peer(Role::OurClient, 5018, 24, "bbr");
}

// BBR through a bottleneck (`Path::Bottleneck`: a 10 ms round trip and 20 MB/s each way, with
// the faults), our stack and the kernel in its place, each way: a path whose round trip and
// rate are the injector's, the same for both, not what the two ends' loops make of a TAP.
#[test]
fn lossy_bottleneck_kernel_client_to_our_bbr_server() {
    lossy_on(Path::Bottleneck, Family::V4, Role::KernelClient, 5021, 23, Tcp::Bbr);
}

#[test]
fn lossy_bottleneck_our_bbr_client_to_kernel_server() {
    lossy_on(Path::Bottleneck, Family::V4, Role::OurClient, 5022, 24, Tcp::Bbr);
}

#[test]
fn lossy_bottleneck_kernel_client_to_a_kernel_in_our_place_bbr() {
    lossy_with_kernel_peer_on(Path::Bottleneck, Role::KernelClient, 5023, 23, "bbr");
}

#[test]
fn lossy_bottleneck_kernel_in_our_place_client_to_kernel_server_bbr() {
    lossy_with_kernel_peer_on(Path::Bottleneck, Role::OurClient, 5024, 24, "bbr");
}

fn thousand_concurrent_kernel_connections_echo_random_messages_over(family: Family) {
    const THREADS: usize = 10;
    const PER_THREAD: usize = 100;
    const ROUNDS: usize = 3;
    const PORT: u16 = 7000;
    in_private_namespace(move || {
        let tap = open_tap()?;
        let mut config = stack_config(&tap);
        config.tcp.send_buffer = 16 * 1024;
        config.tcp.recv_buffer = 16 * 1024;
        let mut host = Host::new(tap, config)?;
        let l = host
            .stack
            .listen_with(PORT, ListenerConfig { syn_queue: 1024, backlog: 1024, syn_cookies: true })
            .map_err(|e| e.to_string())?;
        let connected = AtomicUsize::new(0);
        let start = Instant::now();
        std::thread::scope(|scope| {
            let kernels: Vec<_> = (0..THREADS)
                .map(|t| {
                    let connected = &connected;
                    scope.spawn(move || -> Result<u64, String> {
                        let mut conns = Vec::with_capacity(PER_THREAD);
                        for _ in 0..PER_THREAD {
                            conns.push(kernel_connect(family, PORT)?);
                        }
                        connected.fetch_add(PER_THREAD, Ordering::SeqCst);
                        // Every connection is open before any message flows.
                        let deadline = Instant::now() + Duration::from_secs(30);
                        while connected.load(Ordering::SeqCst) < THREADS * PER_THREAD {
                            if Instant::now() > deadline {
                                return Err("the other kernel threads never connected".into());
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        let mut echoed = 0u64;
                        let mut x = 0x1000 * t as u64;
                        for round in 0..ROUNDS {
                            let mut sent = Vec::with_capacity(PER_THREAD);
                            for c in &mut conns {
                                x = splitmix(x);
                                let len = 1 + usize::try_from(x % 6000).unwrap_or(0);
                                let msg: Vec<u8> =
                                    (0..len).map(|i| splitmix(x ^ i as u64).to_le_bytes()[1]).collect();
                                c.write_all(&msg)
                                    .map_err(|e| format!("kernel write (round {round}): {e}"))?;
                                sent.push(msg);
                            }
                            for (c, msg) in conns.iter_mut().zip(&sent) {
                                let mut back = vec![0u8; msg.len()];
                                c.read_exact(&mut back)
                                    .map_err(|e| format!("kernel read echo (round {round}): {e}"))?;
                                if &back != msg {
                                    return Err(format!("echo differs (round {round}, {} bytes)", msg.len()));
                                }
                                echoed += msg.len() as u64;
                            }
                        }
                        drop(conns);
                        Ok(echoed)
                    })
                })
                .collect();

            struct Echo {
                s: StreamId,
                pending: Vec<u8>,
            }
            let mut streams: Vec<Echo> = Vec::new();
            let (mut accepted, mut closed, mut peak) = (0usize, 0usize, 0usize);
            let mut buf = vec![0u8; 16 * 1024];
            let result = host.run(Duration::from_secs(60), "1000 connections", |stack| {
                while let Some(s) = stack.accept(l) {
                    accepted += 1;
                    streams.push(Echo { s, pending: Vec::new() });
                }
                peak = peak.max(streams.len());
                let mut i = 0;
                while i < streams.len() {
                    let e = &mut streams[i];
                    let mut eof = false;
                    if e.pending.len() < 64 * 1024 {
                        match stack.recv(e.s, &mut buf) {
                            Ok(0) => eof = true,
                            Ok(n) => e.pending.extend_from_slice(&buf[..n]),
                            Err(Error::WouldBlock) => {}
                            Err(err) => return Err(format!("echo recv: {err}")),
                        }
                    }
                    if !e.pending.is_empty() {
                        match stack.send(e.s, &e.pending) {
                            Ok(n) => drop(e.pending.drain(..n)),
                            Err(Error::WouldBlock) => {}
                            Err(err) => return Err(format!("echo send: {err}")),
                        }
                    }
                    if eof && e.pending.is_empty() {
                        stack.close(e.s).map_err(|e| e.to_string())?;
                        closed += 1;
                        streams.swap_remove(i);
                    } else {
                        i += 1;
                    }
                }
                Ok(kernels.iter().all(|k| k.is_finished()) && streams.is_empty()
                    || kernels.iter().any(|k| k.is_finished()) && start.elapsed() > Duration::from_secs(55))
            });
            let mut echoed = 0;
            for k in kernels {
                echoed += k.join().map_err(|_| "kernel thread panicked".to_owned())??;
            }
            result?;
            // Our side finishes its half of each close (LAST-ACK -> CLOSED) and frees every slot.
            host.run(Duration::from_secs(10), "reclaim", |stack| Ok(stack.connection_count() == 0))?;
            let st = *host.stack.stats();
            println!(
                "{accepted} connections (peak {peak} open at once), {echoed} bytes echoed in {:.2?}, {} closed; stack {st:?}",
                start.elapsed(),
                closed
            );
            if accepted != THREADS * PER_THREAD || peak != THREADS * PER_THREAD || closed != accepted {
                return Err(format!("accepted {accepted}, peak {peak}, closed {closed}"));
            }
            if st.connections_reclaimed != accepted as u64 {
                return Err(format!("reclaimed {} of {accepted}", st.connections_reclaimed));
            }
            Ok(())
        })
    });
}

#[test]
fn thousand_concurrent_kernel_connections_echo_random_messages() {
    thousand_concurrent_kernel_connections_echo_random_messages_over(Family::V4);
}

#[test]
fn thousand_concurrent_kernel_connections_echo_random_messages_ipv6() {
    thousand_concurrent_kernel_connections_echo_random_messages_over(Family::V6);
}

fn half_close_both_ways_over(family: Family) {
    in_private_namespace(move || {
        let tap = open_tap()?;
        let config = stack_config(&tap);
        let mut host = Host::new(tap, config)?;
        const N: u64 = 300 * 1024;

        // The kernel sends a request and shuts down its sending side; we read to its FIN (CLOSE-WAIT)
        // and only then answer, on the half-open connection.
        let l = host.stack.listen(6001).map_err(|e| e.to_string())?;
        std::thread::scope(|scope| -> Result<(), String> {
            let kernel = scope.spawn(|| -> Result<Sink, String> {
                let mut s = kernel_connect(family, 6001)?;
                kernel_write_all(&mut s, &mut Source::new(1, N))?;
                s.shutdown(Shutdown::Write).map_err(|e| e.to_string())?;
                kernel_read_all(&mut s, 2)
            });
            let (mut stream, mut sink, mut eof, mut src, mut shut) =
                (None, Sink::new(1), false, Source::new(2, N), false);
            let mut state_at_eof = None;
            let mut buf = vec![0u8; 64 * 1024];
            host.run(Duration::from_secs(20), "half-close (kernel first)", |stack| {
                stream = stream.or_else(|| stack.accept(l));
                let Some(s) = stream else { return Ok(false) };
                if !eof {
                    eof = our_drain(stack, s, &mut sink, &mut buf)?;
                    if eof {
                        state_at_eof = Some(stack.state(s).map_err(|e| e.to_string())?);
                    }
                    return Ok(false);
                }
                our_feed(stack, s, &mut src, &mut shut)?;
                Ok(shut && kernel.is_finished())
            })?;
            let got = kernel.join().map_err(|_| "kernel panicked")??;
            if state_at_eof != Some(State::CloseWait) {
                return Err(format!("at the kernel's FIN we were {state_at_eof:?}, not CLOSE-WAIT"));
            }
            sink.check(N, "kernel -> us")?;
            got.check(N, "us -> kernel")?;
            let s = stream.ok_or("no stream")?;
            host.stack.close(s).map_err(|e| e.to_string())?;
            host.run(
                Duration::from_secs(5),
                "LAST-ACK -> CLOSED",
                |stack| Ok(stack.connection_count() == 0),
            )?;
            Ok(())
        })?;

        // We send a request and shut down; the kernel reads to our FIN, answers, and closes; we end
        // in TIME-WAIT (the active closer).
        let kl = kernel_listen(family, 6002)?;
        std::thread::scope(|scope| -> Result<(), String> {
            let kernel = scope.spawn(|| -> Result<Sink, String> {
                let mut s = kernel_accept(&kl)?;
                let got = kernel_read_all(&mut s, 3)?;
                kernel_write_all(&mut s, &mut Source::new(4, N))?;
                Ok(got)
            });
            let s = host.stack.connect(family.kernel(6002)).map_err(|e| e.to_string())?;
            let (mut sink, mut eof, mut src, mut shut) = (Sink::new(4), false, Source::new(3, N), false);
            let mut buf = vec![0u8; 64 * 1024];
            let mut fin_wait_2 = false;
            host.run(Duration::from_secs(20), "half-close (us first)", |stack| {
                our_feed(stack, s, &mut src, &mut shut)?;
                fin_wait_2 |= stack.state(s) == Ok(State::FinWait2);
                eof = eof || our_drain(stack, s, &mut sink, &mut buf)?;
                Ok(eof && kernel.is_finished())
            })?;
            let got = kernel.join().map_err(|_| "kernel panicked")??;
            got.check(N, "us -> kernel")?;
            sink.check(N, "kernel -> us")?;
            let state = host.stack.state(s).map_err(|e| e.to_string())?;
            if !fin_wait_2 || state != State::TimeWait {
                return Err(format!("FIN-WAIT-2 seen: {fin_wait_2}; now {state}, not TIME-WAIT"));
            }
            host.stack.close(s).map_err(|e| e.to_string())?;
            // TIME-WAIT is 2 MSL = 2 s here.
            host.run(Duration::from_secs(5), "TIME-WAIT -> CLOSED", |stack| {
                Ok(stack.connection_count() == 0)
            })?;
            Ok(())
        })
    });
}

#[test]
fn half_close_both_ways() {
    half_close_both_ways_over(Family::V4);
}

#[test]
fn half_close_both_ways_ipv6() {
    half_close_both_ways_over(Family::V6);
}

fn rst_on_abort_and_refusal_both_ways_over(family: Family) {
    in_private_namespace(move || {
        let tap = open_tap()?;
        let config = stack_config(&tap);
        let mut host = Host::new(Observer::new(tap), config)?;

        // Refusals: nothing listens.
        let c = host.stack.connect(family.kernel(6100)).map_err(|e| e.to_string())?;
        host.run(Duration::from_secs(5), "refused by the kernel", |stack| Ok(stack.error(c) != Ok(None)))?;
        if host.stack.error(c) != Ok(Some(ConnectionError::Refused)) {
            return Err(format!("connect to a closed kernel port: {:?}", host.stack.error(c)));
        }
        host.stack.close(c).map_err(|e| e.to_string())?;
        std::thread::scope(|scope| -> Result<(), String> {
            let k = scope.spawn(|| TcpStream::connect_timeout(&family.stack(6101), Duration::from_secs(5)));
            host.run(Duration::from_secs(6), "refused by us", |_| Ok(k.is_finished()))?;
            match k.join().map_err(|_| "kernel panicked")? {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
                other => Err(format!("kernel connect to our closed port: {other:?}")),
            }
        })?;

        // We abort: the kernel's blocked read fails with ECONNRESET.
        let l = host.stack.listen(6102).map_err(|e| e.to_string())?;
        std::thread::scope(|scope| -> Result<(), String> {
            let k = scope.spawn(|| -> Result<std::io::Error, String> {
                let mut s = kernel_connect(family, 6102)?;
                s.write_all(b"hello").map_err(|e| e.to_string())?;
                let mut b = [0u8; 16];
                match s.read(&mut b) {
                    Ok(n) => Err(format!("read {n} bytes instead of a reset")),
                    Err(e) => Ok(e),
                }
            });
            let mut stream = None;
            let rst_before = host.dev.tx.rst;
            host.run(Duration::from_secs(10), "our abort", |stack| {
                stream = stream.or_else(|| stack.accept(l));
                if let Some(s) = stream
                    && stack.is_readable(s)
                    && stack.state(s) == Ok(State::Established)
                {
                    stack.abort(s).map_err(|e| e.to_string())?;
                }
                Ok(k.is_finished())
            })?;
            let e = k.join().map_err(|_| "kernel panicked")??;
            if e.kind() != std::io::ErrorKind::ConnectionReset {
                return Err(format!("kernel read after our abort: {e}"));
            }
            if host.dev.tx.rst <= rst_before {
                return Err("no RST left our stack".into());
            }
            Ok(())
        })?;

        // We close with unread data: an abort too (RFC 2525 §2.17), the kernel sees the reset.
        std::thread::scope(|scope| -> Result<(), String> {
            let k = scope.spawn(|| -> Result<std::io::Error, String> {
                let mut s = kernel_connect(family, 6102)?;
                s.write_all(&[7u8; 3000]).map_err(|e| e.to_string())?;
                let mut b = [0u8; 16];
                match s.read(&mut b) {
                    Ok(n) => Err(format!("read {n} bytes (EOF?) instead of a reset")),
                    Err(e) => Ok(e),
                }
            });
            let mut stream = None;
            host.run(Duration::from_secs(10), "our close with unread data", |stack| {
                stream = stream.or_else(|| stack.accept(l));
                if let Some(s) = stream
                    && stack.queues(s).is_ok_and(|(r, _)| r >= 3000)
                {
                    stack.close(s).map_err(|e| e.to_string())?;
                }
                Ok(k.is_finished())
            })?;
            let e = k.join().map_err(|_| "kernel panicked")??;
            if e.kind() != std::io::ErrorKind::ConnectionReset {
                return Err(format!("kernel read after our close with unread data: {e}"));
            }
            Ok(())
        })?;

        // The kernel aborts (SO_LINGER 0): we see Reset, after reading what came before it.
        let kl = kernel_listen(family, 6103)?;
        std::thread::scope(|scope| -> Result<(), String> {
            let k = scope.spawn(|| -> Result<(), String> {
                let mut s = kernel_accept(&kl)?;
                s.write_all(b"last words").map_err(|e| e.to_string())?;
                std::thread::sleep(Duration::from_millis(100));
                kernel_support::set_linger_zero(&s)?;
                drop(s);
                Ok(())
            });
            let c = host.stack.connect(family.kernel(6103)).map_err(|e| e.to_string())?;
            let mut got = Vec::new();
            let mut err = None;
            let rst_before = host.dev.rx.rst;
            let mut buf = [0u8; 64];
            host.run(Duration::from_secs(10), "kernel abort", |stack| {
                match stack.recv(c, &mut buf) {
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(Error::WouldBlock) => {}
                    Err(e) => err = Some(e),
                }
                Ok(err.is_some() && k.is_finished())
            })?;
            k.join().map_err(|_| "kernel panicked")??;
            if got != b"last words" || err != Some(Error::Connection(ConnectionError::Reset)) {
                return Err(format!("got {:?} then {err:?}", String::from_utf8_lossy(&got)));
            }
            if host.dev.rx.rst <= rst_before {
                return Err("no RST came from the kernel".into());
            }
            host.stack.close(c).map_err(|e| e.to_string())?;
            Ok(())
        })?;
        host.run(Duration::from_secs(5), "reclaim", |stack| Ok(stack.connection_count() == 0))?;
        Ok(())
    });
}

#[test]
fn rst_on_abort_and_refusal_both_ways() {
    rst_on_abort_and_refusal_both_ways_over(Family::V4);
}

#[test]
fn rst_on_abort_and_refusal_both_ways_ipv6() {
    rst_on_abort_and_refusal_both_ways_over(Family::V6);
}

fn zero_window_slow_readers_both_ways_over(family: Family) {
    const N: u64 = 2 * MIB;
    const STALL: Duration = Duration::from_millis(1500);
    in_private_namespace(move || {
        let tap = open_tap()?;
        let mut config = stack_config(&tap);
        config.tcp.recv_buffer = 16 * 1024;
        let mut host = Host::new(Observer::new(tap), config)?;

        // The kernel reads nothing for a while: its 8 KiB-ish receive buffer fills, it advertises a
        // zero window, our persist timer probes it, and the transfer resumes when it reads.
        let kl = kernel_listen(family, 6200)?;
        kernel_support::set_rcvbuf(&kl, 4096)?;
        std::thread::scope(|scope| -> Result<(), String> {
            let k = scope.spawn(|| -> Result<Sink, String> {
                let mut s = kernel_accept(&kl)?;
                std::thread::sleep(STALL);
                kernel_read_all(&mut s, 5)
            });
            let c = host.stack.connect(family.kernel(6200)).map_err(|e| e.to_string())?;
            let (mut src, mut shut) = (Source::new(5, N), false);
            let (mut sink, mut buf) = (Sink::new(0), [0u8; 1024]);
            let t = host.run(Duration::from_secs(30), "kernel slow reader", |stack| {
                our_feed(stack, c, &mut src, &mut shut)?;
                let eof = our_drain(stack, c, &mut sink, &mut buf)?;
                Ok(eof && k.is_finished())
            })?;
            let got = k.join().map_err(|_| "kernel panicked")??;
            let (rx, tx) = (host.dev.rx, host.dev.tx);
            println!("kernel slow reader: {t:.2?}; from the kernel {rx:?}; from us {tx:?}");
            got.check(N, "us -> kernel")?;
            if rx.zero_window == 0 {
                return Err("the kernel never advertised a zero window".into());
            }
            if t < STALL {
                return Err(format!("done in {t:?}, before the reader woke"));
            }
            host.stack.close(c).map_err(|e| e.to_string())?;
            Ok(())
        })?;

        // We read nothing for a while: our 16 KiB receive buffer fills, we advertise a zero window,
        // the kernel probes, and our window update reopens it.
        let l = host.stack.listen(6201).map_err(|e| e.to_string())?;
        let (rx0, tx0) = (host.dev.rx, host.dev.tx);
        std::thread::scope(|scope| -> Result<(), String> {
            let k = scope.spawn(|| -> Result<(), String> {
                let mut s = kernel_connect(family, 6201)?;
                kernel_write_all(&mut s, &mut Source::new(6, N))?;
                s.shutdown(Shutdown::Write).map_err(|e| e.to_string())
            });
            let mut stream = None;
            let mut accepted_at = None;
            let mut zero_at_wake = 0;
            let (mut sink, mut buf) = (Sink::new(6), vec![0u8; 64 * 1024]);
            let mut eof = false;
            let t = host.run(Duration::from_secs(30), "our slow reader", |stack| {
                if stream.is_none() {
                    stream = stack.accept(l);
                    accepted_at = stream.map(|_| Instant::now());
                }
                let (Some(s), Some(at)) = (stream, accepted_at) else { return Ok(false) };
                if at.elapsed() < STALL {
                    return Ok(false);
                }
                if zero_at_wake == 0 {
                    zero_at_wake = 1 + stack.queues(s).map_err(|e| e.to_string())?.0;
                }
                eof = eof || our_drain(stack, s, &mut sink, &mut buf)?;
                Ok(eof && k.is_finished())
            })?;
            k.join().map_err(|_| "kernel panicked")??;
            let (rx, tx) = (host.dev.rx, host.dev.tx);
            println!(
                "our slow reader: {t:.2?}, {} bytes buffered when we woke; zero-window ACKs from us {}, segments from the kernel {}",
                zero_at_wake - 1,
                tx.zero_window - tx0.zero_window,
                rx.segments - rx0.segments
            );
            sink.check(N, "kernel -> us")?;
            if tx.zero_window == tx0.zero_window {
                return Err("we never advertised a zero window".into());
            }
            if zero_at_wake - 1 != 16 * 1024 {
                return Err(format!("{} bytes buffered at wake, not the full 16 KiB", zero_at_wake - 1));
            }
            host.stack.close(stream.ok_or("no stream")?).map_err(|e| e.to_string())?;
            Ok(())
        })
    });
}

#[test]
fn zero_window_slow_readers_both_ways() {
    zero_window_slow_readers_both_ways_over(Family::V4);
}

#[test]
fn zero_window_slow_readers_both_ways_ipv6() {
    zero_window_slow_readers_both_ways_over(Family::V6);
}

fn keepalive_both_ways_over(family: Family) {
    in_private_namespace(move || {
        let tap = open_tap()?;
        let mut config = stack_config(&tap);
        config.tcp.keepalive = Some(Keepalive {
            idle: Duration::from_millis(600),
            interval: Duration::from_millis(600),
            probes: 3,
        });
        let mut host = Host::new(Observer::new(tap), config)?;

        // Our probes on an idle connection: the kernel answers each (in the kernel: no thread needs
        // to read); then it goes silent (both directions black-holed) and the connection times out
        // after idle + 3 intervals.
        let kl = kernel_listen(family, 6300)?;
        let c = host.stack.connect(family.kernel(6300)).map_err(|e| e.to_string())?;
        host.run(Duration::from_secs(5), "connect", |stack| Ok(stack.state(c) == Ok(State::Established)))?;
        let _kernel_end = kernel_accept(&kl)?;
        let (rx0, tx0) = (host.dev.rx, host.dev.tx);
        host.idle(Duration::from_millis(3000))?;
        let (rx1, tx1) = (host.dev.rx, host.dev.tx);
        let (probes, answers) = (tx1.segments - tx0.segments, rx1.segments - rx0.segments);
        println!("3 s idle: we sent {probes} keepalive probes, the kernel answered {answers}");
        if host.stack.error(c) != Ok(None) || host.stack.state(c) != Ok(State::Established) {
            return Err(format!("an answered keepalive failed: {:?}", host.stack.error(c)));
        }
        // 600 ms idle, then a probe; each answer restarts the idle time: about 4 in 3 s, fewer when
        // the machine is loaded. What matters is that answered probes keep the connection (checked
        // above) and that several were sent and answered. (Probes closer than 500 ms go partly
        // unanswered: Linux rate-limits its ACKs to out-of-window segments,
        // net.ipv4.tcp_invalid_ratelimit.)
        if probes < 2 || answers < 2 {
            return Err(format!("{probes} probes, {answers} answers in 3 s"));
        }
        host.dev.blackhole_rx = true;
        host.dev.blackhole_tx = true;
        let t =
            host.run(Duration::from_secs(5), "keepalive timeout", |stack| Ok(stack.error(c) != Ok(None)))?;
        host.dev.blackhole_rx = false;
        host.dev.blackhole_tx = false;
        println!("unanswered: timed out after {t:.2?}");
        if host.stack.error(c) != Ok(Some(ConnectionError::TimedOut)) {
            return Err(format!("unanswered keepalives: {:?}", host.stack.error(c)));
        }
        if t > Duration::from_millis(3500) {
            return Err(format!("timed out after {t:?}, expected at most 2.4 s"));
        }
        host.stack.close(c).map_err(|e| e.to_string())?;

        // The kernel's probes (TCP_KEEPIDLE 1 s, TCP_KEEPINTVL 1 s, TCP_KEEPCNT 2): we answer them
        // and the connection survives 3.5 s of idleness; then we go silent and the kernel's read
        // fails with ETIMEDOUT.
        let l = host.stack.listen(6301).map_err(|e| e.to_string())?;
        std::thread::scope(|scope| -> Result<(), String> {
            let k = scope.spawn(|| -> Result<std::io::Error, String> {
                let mut s = kernel_connect(family, 6301)?;
                kernel_support::set_keepalive(&s, 1, 1, 2)?;
                std::thread::sleep(Duration::from_millis(3500));
                s.write_all(b"ping").map_err(|e| format!("after 3.5 s idle: {e}"))?;
                let mut b = [0u8; 4];
                s.read_exact(&mut b).map_err(|e| format!("echo after 3.5 s idle: {e}"))?;
                if &b != b"ping" {
                    return Err("bad echo".into());
                }
                s.set_read_timeout(Some(Duration::from_secs(15))).map_err(|e| e.to_string())?;
                match s.read(&mut b) {
                    Ok(n) => Err(format!("read {n} from a silent peer")),
                    Err(e) => Ok(e),
                }
            });
            let mut stream = None;
            host.run(Duration::from_secs(5), "kernel connect", |stack| {
                stream = stream.or_else(|| stack.accept(l));
                Ok(stream.is_some() || k.is_finished())
            })?;
            let s = stream.ok_or("the kernel never connected")?;
            let rx0 = host.dev.rx;
            let mut buf = [0u8; 16];
            let mut echoed = false;
            host.run(Duration::from_secs(8), "kernel keepalive", |stack| {
                if let Ok(n) = stack.recv(s, &mut buf)
                    && n > 0
                {
                    stack.send(s, &buf[..n]).map_err(|e| e.to_string())?;
                    echoed = true;
                }
                Ok(echoed || k.is_finished())
            })?;
            // Between the handshake and the ping the connection was idle: what the kernel sent
            // then were its keepalive probes (at 1, 2 and 3 s), each answered by us.
            let probes = (host.dev.rx.segments - rx0.segments).saturating_sub(1);
            println!("the kernel sent {probes} keepalive probes in 3.5 s idle, and the connection lived");
            if !echoed || probes < 2 {
                return Err(format!("echoed {echoed}, {probes} kernel probes"));
            }
            host.idle(Duration::from_millis(200))?;
            host.dev.blackhole_rx = true;
            host.dev.blackhole_tx = true;
            let t = host.run(Duration::from_secs(12), "kernel keepalive timeout", |_| Ok(k.is_finished()))?;
            let e = k.join().map_err(|_| "kernel panicked")??;
            println!("kernel gave up after {t:.2?}: {e}");
            if e.raw_os_error() != Some(libc::ETIMEDOUT) {
                return Err(format!("kernel read from a silent peer: {e}, not ETIMEDOUT"));
            }
            host.stack.abort(s).map_err(|e| e.to_string())?;
            Ok(())
        })
    });
}

#[test]
fn keepalive_both_ways() {
    keepalive_both_ways_over(Family::V4);
}

#[test]
fn keepalive_both_ways_ipv6() {
    keepalive_both_ways_over(Family::V6);
}

fn window_scaling_sack_and_timestamps_negotiated_in_a_pcap_over(family: Family) {
    in_private_namespace(move || {
        let tap = open_tap()?;
        let mut config = stack_config(&tap);
        config.tcp.recv_buffer = 1 << 20;
        config.tcp.send_buffer = 1 << 20;
        let path = std::env::temp_dir().join(format!(
            "tcp-lib-kernel-{}-{:?}.pcap",
            std::process::id(),
            std::thread::current().id()
        ));
        // Our transmissions lose 1% after the recording, so the kernel receives out of order data
        // and its ACKs carry SACK blocks.
        let faults = FaultConfig {
            seed: 5,
            tx: DirectionConfig { drop: 0.01, ..DirectionConfig::default() },
            ..FaultConfig::default()
        };
        let pool = new_pool()?;
        let dev =
            PcapWriter::create(FaultInjector::new(tap, &pool, faults), &path).map_err(|e| e.to_string())?;
        let mut host = Host::with_pool(pool, dev, config);
        bulk(family, &mut host, Role::KernelClient, 6400, MIB, Duration::from_secs(30))?;
        bulk(family, &mut host, Role::OurClient, 6401, MIB, Duration::from_secs(30))?;
        host.dev.flush().map_err(|e| e.to_string())?;
        let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
        let _ = std::fs::remove_file(&path);
        check_negotiation(family, &bytes, config.tcp.recv_buffer)
    });
}

#[test]
fn window_scaling_sack_and_timestamps_negotiated_in_a_pcap() {
    window_scaling_sack_and_timestamps_negotiated_in_a_pcap_over(Family::V4);
}

#[test]
fn window_scaling_sack_and_timestamps_negotiated_in_a_pcap_ipv6() {
    window_scaling_sack_and_timestamps_negotiated_in_a_pcap_over(Family::V6);
}

/// The pcap records (little- or big-endian, micro- or nanosecond magic).
fn pcap_records(bytes: &[u8]) -> Result<Vec<&[u8]>, String> {
    let magic = bytes.get(..4).ok_or("no pcap header")?;
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return Err(format!("not a pcap file: magic {magic:02x?}")),
    };
    let u32_at = |o: usize| -> Option<u32> {
        let b: [u8; 4] = bytes.get(o..o + 4)?.try_into().ok()?;
        Some(if le { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) })
    };
    if u32_at(20) != Some(1) {
        return Err("link type is not Ethernet".into());
    }
    let mut out = Vec::new();
    let mut off = 24;
    while off < bytes.len() {
        let incl = usize::try_from(u32_at(off + 8).ok_or("truncated record header")?).unwrap_or(usize::MAX);
        out.push(bytes.get(off + 16..off + 16 + incl).ok_or("truncated record")?);
        off += 16 + incl;
    }
    Ok(out)
}

fn check_negotiation(family: Family, pcap: &[u8], our_recv_buffer: usize) -> Result<(), String> {
    let records = pcap_records(pcap)?;
    let segs: Vec<_> = records.iter().filter_map(|r| parse_tcp_any(r).map(|(src, _, t)| (src, t))).collect();
    let from_kernel = |src: &std::net::IpAddr| *src == family.kernel_ip();
    let syn = |t: &tcp_lib::wire::TcpRepr<'_>| t.control == TcpControl::Syn;
    let mut report = Vec::new();
    for (port, kernel_opens) in [(6400u16, true), (6401, false)] {
        // One connection per listening port (both sides' ephemeral ports are far above it).
        let conn: Vec<_> = segs.iter().filter(|(_, t)| t.dst_port == port || t.src_port == port).collect();
        let open =
            conn.iter().find(|(ip, t)| syn(t) && t.ack_number.is_none() && from_kernel(ip) == kernel_opens);
        let answer =
            conn.iter().find(|(ip, t)| syn(t) && t.ack_number.is_some() && from_kernel(ip) != kernel_opens);
        let (Some((_, open)), Some((_, answer))) = (open, answer) else {
            return Err(format!("port {port}: no SYN / SYN-ACK in the pcap ({} segments)", conn.len()));
        };
        let (kernel_syn, our_syn) = if kernel_opens { (open, answer) } else { (answer, open) };
        for (who, s) in [("kernel", kernel_syn), ("ours", our_syn)] {
            report.push(format!(
                "port {port} {who} {}: mss {:?} wscale {:?} sack_permitted {} ts {}",
                if s.ack_number.is_some() { "SYN-ACK" } else { "SYN" },
                s.max_seg_size,
                s.window_scale,
                s.sack_permitted,
                s.timestamp.is_some()
            ));
            if s.window_scale.is_none()
                || !s.sack_permitted
                || s.timestamp.is_none()
                || s.max_seg_size.is_none()
            {
                return Err(format!("port {port}: the {who} SYN lacks an option: {s:?}"));
            }
        }
        let (kshift, oshift) = (kernel_syn.window_scale.unwrap_or(0), our_syn.window_scale.unwrap_or(0));
        // Data phase: the windows are scaled. Ours: the field shifted by our scale is our free
        // receive buffer, more than 64 KiB (which only scaling can express) and at most the buffer.
        let ours: Vec<usize> = conn
            .iter()
            .filter(|(ip, t)| !from_kernel(ip) && !syn(t) && t.control != TcpControl::Rst)
            .map(|(_, t)| usize::from(t.window_len) << oshift)
            .collect();
        let kernels: Vec<usize> = conn
            .iter()
            .filter(|(ip, t)| from_kernel(ip) && !syn(t) && t.control != TcpControl::Rst)
            .map(|(_, t)| usize::from(t.window_len) << kshift)
            .collect();
        let (our_max, kernel_max) =
            (ours.iter().max().copied().unwrap_or(0), kernels.iter().max().copied().unwrap_or(0));
        report.push(format!(
            "port {port}: scaled windows: ours up to {our_max}, the kernel's up to {kernel_max}"
        ));
        if our_max <= 65_535 || our_max > our_recv_buffer {
            return Err(format!("port {port}: our scaled window {our_max} (shift {oshift})"));
        }
        if kernel_max <= 65_535 {
            return Err(format!("port {port}: the kernel's scaled window {kernel_max} (shift {kshift})"));
        }
        let kernel_sacks =
            conn.iter().filter(|(ip, t)| from_kernel(ip) && !t.sack_blocks.as_slice().is_empty()).count();
        let our_sacks =
            conn.iter().filter(|(ip, t)| !from_kernel(ip) && !t.sack_blocks.as_slice().is_empty()).count();
        report.push(format!(
            "port {port}: segments with SACK blocks: the kernel's {kernel_sacks}, ours {our_sacks}"
        ));
        if !kernel_opens && kernel_sacks == 0 {
            // We sent data through 1% loss: the kernel, having SACK-permitted, reports its holes.
            return Err(format!("port {port}: the kernel never sent a SACK block"));
        }
    }
    for line in report {
        println!("{line}");
    }
    Ok(())
}
