//! `cargo run --release --example echo [-- --queues N --packets P --clients C]`
//!
//! A UDP echo service on the 82599 model, with the whole receive path of the design in between: no NIC
//! and no root needed.
//!
//! * The wire: an in-memory [`Pair`]. One end is the model's port; on the other end an in-process
//!   client (this thread) plays `C` hosts (10.0.1.x), each sending datagrams to 10.0.0.2:7 and checking
//!   every echo.
//! * The NIC: [`ixgbe_vfio::sim::Model`] on its own thread, a behavioural model of the 82599 that DMAs
//!   frames into the driver's rings; RSS spreads the clients over the RX queues.
//! * The driver: [`ixgbe_vfio::driver::Ixgbe`] with `N` queue pairs, one per worker thread ("core").
//! * On each core: a [`Channelizer`] polls the core's queue, classifies each frame, looks its signature
//!   up in the shared registry (the echo service registered the listener `udp 10.0.0.2:7`) and pushes
//!   the buffer's index into the channel of the service's instance on this core; the service swaps the
//!   addresses in place (the checksums stay valid) and hands the same buffer back through its TX
//!   channel, which the channelizer drains into the queue. No copy, no allocation per packet.
//!
//! At the end it prints what each part did and checks that every buffer is back in the pool.
//! On real hardware the model is replaced by `ixgbe_vfio::platform::open("0000:03:00.0")`; the TCP
//! stack (and so a TCP echo) is a later issue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ixgbe_vfio::driver::{Config, Ixgbe, IxgbeQueue};
use ixgbe_vfio::sim::{Model, SimConfig, Wire};
use netchannel::channelizer::{Channelizer, ChannelizerStats, ConsumerId, SignatureRegistry};
use netchannel::dev::{MacAddr, NetDevice, PacketBatch, Pair};
use netchannel::pool::{HugePages, Pool};
use netchannel::rcu::Qsbr;
use netchannel::signature::{Proto, Signature};

/// The echo service's address.
const SERVER: [u8; 4] = [10, 0, 0, 2];
/// The echo port.
const PORT: u16 = 7;
/// The clients' MAC address (they all sit behind one router, as far as the NIC can tell).
const CLIENT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x99]);
/// Payload bytes per datagram.
const PAYLOAD: usize = 64;
/// Datagrams the client keeps in flight at most (below every ring's size, so nothing overflows).
const IN_FLIGHT: u64 = 256;
/// The echo service's consumer id: on every core, its channel there.
const ECHO: ConsumerId = ConsumerId(0);

/// Command-line options.
struct Options {
    queues: u16,
    packets: u64,
    clients: u16,
}

impl Options {
    fn parse() -> Result<Self, String> {
        let mut options = Self { queues: 2, packets: 200_000, clients: 64 };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--queues" => options.queues = number(&value("--queues")?, 1, 16)?,
                "--packets" => options.packets = number(&value("--packets")?, 1, u64::MAX)?,
                "--clients" => options.clients = number(&value("--clients")?, 1, 250)?,
                "-h" | "--help" => {
                    println!("usage: echo [--queues 1..16] [--packets N] [--clients 1..250]");
                    std::process::exit(0);
                }
                other => return Err(format!("unknown argument {other:?} (try --help)")),
            }
        }
        Ok(options)
    }
}

/// `text` as a number in `min..=max`.
fn number<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    text: &str,
    min: T,
    max: T,
) -> Result<T, String> {
    match text.parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(format!("{text:?} is not a number in {min}..={max}")),
    }
}

/// The Ethernet/IPv4/UDP datagram number `seq` from client `client` (10.0.1.client:40000) to the
/// server's MAC `server_mac`, with a valid IPv4 header checksum and UDP checksum 0.
fn datagram(server_mac: MacAddr, client: u16, seq: u64) -> Vec<u8> {
    let [_, low] = client.to_be_bytes();
    let total = u16::try_from(20 + 8 + PAYLOAD).expect("small");
    let mut f = Vec::with_capacity(14 + usize::from(total));
    f.extend_from_slice(&server_mac.0);
    f.extend_from_slice(&CLIENT_MAC.0);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, low, 0, 0, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[16..20].copy_from_slice(&SERVER);
    let sum = ip.chunks(2).fold(0u32, |s, w| s + u32::from(u16::from_be_bytes([w[0], w[1]])));
    let folded = (sum & 0xffff) + (sum >> 16);
    let folded = (folded & 0xffff) + (folded >> 16);
    ip[10..12].copy_from_slice(&(!u16::try_from(folded).expect("folded")).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&PORT.to_be_bytes());
    f.extend_from_slice(&u16::try_from(8 + PAYLOAD).expect("small").to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&seq.to_le_bytes());
    f.extend((8..PAYLOAD).map(|i| u8::try_from(i).expect("small") ^ low));
    f
}

/// Turns a received datagram into its echo in place: swaps the MAC addresses, the IP addresses and
/// the ports. One's-complement sums do not depend on order, so both checksums stay valid.
fn reflect(frame: &mut [u8]) -> bool {
    if frame.len() < 42 {
        return false;
    }
    for (a, b) in [(0, 6), (26, 30), (34, 36)] {
        let width = if a == 0 {
            6
        } else if a == 26 {
            4
        } else {
            2
        };
        for i in 0..width {
            frame.swap(a + i, b + i);
        }
    }
    true
}

/// What one core did.
struct CoreReport {
    queue: u16,
    channelizer: ChannelizerStats,
    echoed: u64,
    queue_stats: String,
}

/// One core: the channelizer of `queue` and the echo service's instance here, until `stop`. Dropping
/// the channelizer at the end drops the queue, which disables it and returns its buffers.
fn core(
    queue: IxgbeQueue,
    pool: &Pool,
    registry: Arc<SignatureRegistry>,
    stop: &AtomicBool,
) -> Result<CoreReport, String> {
    let index = queue.index();
    let cache = pool.cache();
    let channel = |capacity| pool.packet_channel(capacity).map_err(|e| e.to_string());
    let (default_tx, mut default_rx) = channel(1024)?;
    let (echo_tx, mut echo_rx) = channel(1024)?;
    let (mut reply_tx, reply_rx) = channel(1024)?;
    let mut ch = Channelizer::new(queue, 0, &cache, registry, default_tx, 32);
    ch.attach(ECHO, echo_tx).map_err(|_| "the echo channel is of another pool".to_owned())?;
    ch.add_tx(reply_rx);
    let mut echoed = 0u64;
    // Relaxed: a plain flag; the join that follows orders everything else.
    while !stop.load(Ordering::Relaxed) {
        let polled = ch.poll().map_err(|e| format!("queue {index}: {e}"))?;
        let mut served = 0;
        while let Some(mut packet) = echo_rx.pop(&cache) {
            served += 1;
            // A frame too short to be an echo request, or a full reply channel: the packet is
            // dropped here and its buffer freed.
            if reflect(packet.data_mut()) && reply_tx.push(packet).is_ok() {
                echoed += 1;
            }
        }
        // Nothing else is expected (no ARP: the client knows the MAC); drop what comes.
        while default_rx.pop(&cache).is_some() {}
        if polled.rx == 0 && polled.tx == 0 && served == 0 {
            std::thread::yield_now();
        }
    }
    let queue_stats = format!("{:?}", ch.device().queue_stats());
    Ok(CoreReport { queue: index, channelizer: ch.stats(), echoed, queue_stats })
}

/// The client's side of the run: what it sent and got back.
#[derive(Default)]
struct ClientReport {
    sent: u64,
    echoed: u64,
    per_client: Vec<u64>,
    elapsed: Duration,
}

/// Sends `packets` datagrams from `clients` hosts through `wire`, at most [`IN_FLIGHT`] outstanding,
/// and checks that each comes back once, from the server, to the host that sent it, intact.
fn client(wire: &mut Pair, server_mac: MacAddr, packets: u64, clients: u16) -> Result<ClientReport, String> {
    let cache = wire.pool().cache();
    let mut report = ClientReport { per_client: vec![0; usize::from(clients)], ..ClientReport::default() };
    let mut seen = vec![false; usize::try_from(packets).map_err(|_| "too many packets")?];
    let mut out = PacketBatch::with_capacity(32);
    let mut back = PacketBatch::with_capacity(64);
    let start = Instant::now();
    let mut last_progress = Instant::now();
    while report.echoed < packets {
        // Keep the pipe full.
        while report.sent < packets && report.sent - report.echoed < IN_FLIGHT && !out.is_full() {
            let seq = report.sent;
            let host = u16::try_from(seq % u64::from(clients)).expect("below clients");
            let mut p = cache.alloc().ok_or("the client's wire pool ran dry")?;
            p.extend_from_slice(&datagram(server_mac, host, seq)).map_err(|e| e.to_string())?;
            out.push(p).map_err(|_| "batch full")?;
            report.sent += 1;
        }
        wire.tx_burst(0, &mut out).map_err(|e| e.to_string())?;
        report.sent -= out.len() as u64; // what the wire did not take is sent again next round
        out.clear();
        wire.rx_burst(0, &cache, &mut back).map_err(|e| e.to_string())?;
        for p in back.drain() {
            let f = p.data();
            let ok = f.len() == 14 + 28 + PAYLOAD
                && f[..6] == CLIENT_MAC.0
                && f[26..30] == SERVER
                && f[34..36] == PORT.to_be_bytes()
                && f[36..38] == 40000u16.to_be_bytes();
            let seq = f.get(42..50).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            let Some(seq) = seq.filter(|_| ok) else { return Err(format!("a malformed echo: {f:02x?}")) };
            let host = usize::from(f[33]);
            let expected = datagram(server_mac, u16::try_from(host).map_err(|e| e.to_string())?, seq);
            if f[42..] != expected[42..] || host >= usize::from(clients) {
                return Err(format!("echo {seq} came back changed or to the wrong host ({host})"));
            }
            let slot =
                seen.get_mut(usize::try_from(seq).unwrap_or(usize::MAX)).ok_or("an unknown sequence")?;
            if std::mem::replace(slot, true) {
                return Err(format!("echo {seq} came back twice"));
            }
            report.echoed += 1;
            report.per_client[host] += 1;
            last_progress = Instant::now();
        }
        if last_progress.elapsed() > Duration::from_secs(5) {
            return Err(format!(
                "no echo for 5 s: {} of {} sent, {} echoed",
                report.sent, packets, report.echoed
            ));
        }
    }
    report.elapsed = start.elapsed();
    Ok(report)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("echo: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let options = Options::parse()?;
    println!(
        "netchannels echo: UDP echo on the 82599 model, {} queue(s), {} datagrams from {} clients",
        options.queues, options.packets, options.clients
    );
    let err = |e: &dyn std::fmt::Display| e.to_string();

    // The wire and the NIC.
    let wire_pool = Pool::builder(4096).hugepages(HugePages::Never).build().map_err(|e| err(&e))?;
    let (port, mut wire) = Pair::builder(&wire_pool).capacity(1024).build().map_err(|e| err(&e))?;
    let model = Model::new(SimConfig {
        wire: Wire::Device(Box::new(port), wire_pool.clone()),
        ..SimConfig::default()
    });
    let device = model.spawn();

    // The driver, its buffers in their own pool (mapped for the device's DMA), and the registry.
    let pool = Pool::builder(16_384).hugepages(HugePages::Prefer).build().map_err(|e| err(&e))?;
    let config = Config { queues: options.queues, rx_ring: 512, tx_ring: 512, ..Config::default() };
    let (mut nic, queues) =
        Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config).map_err(|e| err(&e))?;
    println!("driver: {} up, MAC {}, {:?}", nic.name(), nic.mac(), nic.link());
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let local = std::net::SocketAddr::from((SERVER, PORT));
    let _service =
        registry.register(Signature::listener(Proto::Udp, local), ECHO).map_err(|e| format!("{e:?}"))?;
    println!("registry: udp {local} -> the echo service on every core");

    // One thread per queue, the client on this one.
    let stop = AtomicBool::new(false);
    let (client_report, cores) = std::thread::scope(|s| {
        let workers: Vec<_> = queues
            .into_iter()
            .map(|queue| {
                let (pool, registry, stop) = (&pool, Arc::clone(&registry), &stop);
                s.spawn(move || core(queue, pool, registry, stop))
            })
            .collect();
        let client_report = client(&mut wire, nic.mac(), options.packets, options.clients);
        // Relaxed: the joins below order the workers' last writes before our reads.
        stop.store(true, Ordering::Relaxed);
        let cores: Vec<_> =
            workers.into_iter().map(|w| w.join().map_err(|_| "a core panicked".to_owned())).collect();
        (client_report, cores)
    });
    let client_report = client_report?;
    device.stop();

    let seconds = client_report.elapsed.as_secs_f64();
    println!(
        "client: {} datagrams sent, {} echoed intact and exactly once, in {:.2} s ({:.0} echoes/s)",
        client_report.sent,
        client_report.echoed,
        seconds,
        client_report.echoed as f64 / seconds
    );
    let busiest = client_report.per_client.iter().max().copied().unwrap_or(0);
    let idlest = client_report.per_client.iter().min().copied().unwrap_or(0);
    println!("client: per host {idlest}..{busiest} echoes");
    for core in cores {
        let core = core??;
        let c = core.channelizer;
        println!(
            "core {}: {} frames received, {} to the echo service ({} echoed), {} to the default channel, \
             {} dropped (channel full), {} sent",
            core.queue, c.rx, c.delivered, core.echoed, c.to_default, c.dropped_full, c.tx
        );
        println!("core {}: queue {}", core.queue, core.queue_stats);
    }
    let nic_stats = nic.stats();
    println!(
        "nic: {} good frames received, {} sent, {} missed, RSS/FDir: {} FDir matches, {} misses",
        nic_stats.rx_good_packets,
        nic_stats.tx_good_packets,
        nic_stats.missed_packets,
        nic_stats.fdir_matches,
        nic_stats.fdir_misses
    );
    let per_queue: Vec<String> = (0..usize::from(options.queues).min(nic_stats.queue_rx_packets.len()))
        .map(|q| format!("q{q} {}", nic_stats.queue_rx_packets[q]))
        .collect();
    println!("nic: received per queue: {}", per_queue.join(", "));
    let m = model.stats();
    println!(
        "model: {} frames from the wire, {} into rings, {} dropped for lack of descriptors, {} sent, \
         {} DMA faults",
        m.rx_wire, m.rx_delivered, m.rx_dropped_no_desc, m.tx_sent, m.dma_faults
    );
    drop(nic);
    drop(wire);
    drop(model);
    pool.check_leaks().map_err(|e| format!("driver pool: {e}"))?;
    wire_pool.check_leaks().map_err(|e| format!("wire pool: {e}"))?;
    println!("buffers: every buffer of both pools is back");
    Ok(())
}
