//! The driver's data path against the 82599 model, with an in-memory [`Pair`] as the wire: every
//! frame arrives once and in order per queue, rings wrap and fill, Flow Director steers every flow
//! group to its queue and follows migrations, RSS spreads what no filter matches, a misbehaving
//! device is survived and counted, shared buffers go out by reference and come back on TX
//! completion, and no buffer leaks.

use std::time::Duration;

use ixgbe_vfio::driver::{Config, Ixgbe, IxgbeQueue};
use ixgbe_vfio::sim::{Model, SimConfig, SimFaults, Wire};
use netchannel::dev::{MacAddr, NetDevice, PacketBatch, Pair};
use netchannel::pool::{FrameError, HugePages, Pool, PoolCache, SharedPacket};
use netchannel::signature::FlowGroup;
use netchannel::steering::FlowSteering;

const MODEL_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
const TCP: u8 = 6;
const UDP: u8 = 17;

/// An Ethernet + IPv4 + TCP/UDP frame to the model's MAC whose payload is `seq` (big-endian u32).
fn frame(proto: u8, src_port: u16, dst_port: u16, seq: u32) -> Vec<u8> {
    let l4_len = if proto == TCP { 20 } else { 8 };
    let ip_len = 20 + l4_len + 4;
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&MODEL_MAC.0);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = u16::try_from(ip_len).expect("small");
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let sum = ip.chunks(2).fold(0u32, |s, w| s + u32::from(u16::from_be_bytes([w[0], w[1]])));
    let sum = (sum & 0xFFFF) + (sum >> 16);
    let sum = (sum & 0xFFFF) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!u16::try_from(sum).expect("folded")).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&src_port.to_be_bytes());
    f.extend_from_slice(&dst_port.to_be_bytes());
    if proto == TCP {
        f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xFF, 0xFF, 0, 0, 0, 0]);
    } else {
        f.extend_from_slice(&(8u16 + 4).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
    }
    f.extend_from_slice(&seq.to_be_bytes());
    f
}

/// The (source port, sequence number) of a frame made by [`frame`].
fn parse(data: &[u8]) -> (u16, u32) {
    let port = u16::from_be_bytes([data[34], data[35]]);
    // Short frames arrive padded to 60 bytes: the payload sits right after the L4 header.
    let at = if data[23] == TCP { 54 } else { 42 };
    let seq = u32::from_be_bytes(data[at..at + 4].try_into().expect("4 bytes"));
    (port, seq)
}

/// A model wired to an in-memory pair, the driver initialized on it, and the peer end of the wire.
struct Rig {
    model: Model,
    nic: Ixgbe,
    queues: Vec<IxgbeQueue>,
    peer: Pair,
    wire_pool: Pool,
    pool: Pool,
}

fn make_rig(config: Config) -> Rig {
    rig_with(config, SimFaults::default())
}

/// One queue pair of 64-descriptor rings: small enough that a few hundred frames wrap them.
fn small_rig() -> Rig {
    make_rig(Config { queues: 1, rx_ring: 64, tx_ring: 64, ..Config::default() })
}

fn rig_with(config: Config, faults: SimFaults) -> Rig {
    let wire_pool = Pool::builder(16 * 1024).hugepages(HugePages::Never).build().expect("pool");
    let (model_end, peer) = Pair::builder(&wire_pool).capacity(8192).build().expect("pair");
    let model = Model::new(SimConfig {
        wire: Wire::Device(Box::new(model_end), wire_pool.clone()),
        faults,
        ..SimConfig::default()
    });
    let pool = Pool::builder(16 * 1024).hugepages(HugePages::Never).build().expect("pool");
    let config = Config { link_timeout: Duration::from_secs(1), ..config };
    let (nic, queues) = Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config).expect("init");
    Rig { model, nic, queues, peer, wire_pool, pool }
}

impl Rig {
    /// Sends `frames` from the peer, all of them (the wire is large enough).
    fn send(&mut self, cache: &PoolCache, frames: &[Vec<u8>]) {
        for chunk in frames.chunks(64) {
            let mut batch = PacketBatch::with_capacity(64);
            for f in chunk {
                let mut p = cache.alloc().expect("wire buffer");
                p.extend_from_slice(f).expect("fits");
                batch.push(p).expect("room");
            }
            let sent = self.peer.tx_burst(0, &mut batch).expect("peer tx");
            assert_eq!(sent, chunk.len(), "the wire took every frame");
        }
    }

    /// Sends one flow's frames with sequence numbers `seqs` (source port 40000 to port 80).
    fn send_flow(&mut self, cache: &PoolCache, seqs: std::ops::Range<u32>) {
        let frames: Vec<Vec<u8>> = seqs.map(|i| frame(TCP, 40000, 80, i)).collect();
        self.send(cache, &frames);
    }

    /// Runs the model and drains every queue until `expected` frames arrived or nothing moves;
    /// returns, per queue, the (source port, sequence) of each frame in arrival order.
    fn receive(&mut self, cache: &PoolCache, expected: usize) -> Vec<Vec<(u16, u32)>> {
        let mut got = vec![Vec::new(); self.queues.len()];
        let mut total = 0;
        let mut idle = 0;
        while total < expected && idle < 50 {
            let moved = self.model.service();
            let mut n = 0;
            for (q, queue) in self.queues.iter_mut().enumerate() {
                let mut batch = PacketBatch::with_capacity(256);
                n += queue.rx_burst(0, cache, &mut batch).expect("rx");
                got[q].extend(batch.as_slice().iter().map(|p| parse(p.data())));
            }
            total += n;
            idle = if n == 0 && moved.is_idle() { idle + 1 } else { 0 };
        }
        got
    }

    fn finish(self) {
        let Rig { model, nic, queues, peer, wire_pool, pool } = self;
        drop(queues);
        drop(nic);
        assert_eq!(model.dma_ranges(), 0, "rings and the pool mapping are released");
        drop(model);
        drop(peer);
        pool.check_leaks().expect("no driver buffer leaked");
        wire_pool.check_leaks().expect("no wire buffer leaked");
    }
}

#[test]
fn every_frame_arrives_once_in_order_through_wrapping_rings() {
    let mut rig = small_rig();
    let wire_cache = rig.wire_pool.cache();
    let cache = rig.pool.cache();
    let frames: Vec<Vec<u8>> = (0..1000).map(|i| frame(TCP, 40000, 80, i)).collect();
    // In rounds smaller than the ring, so that nothing is dropped; 1000 frames wrap a ring of 64 often.
    for round in frames.chunks(48) {
        rig.send(&wire_cache, round);
        let got = rig.receive(&cache, round.len());
        let want: Vec<(u16, u32)> = round.iter().map(|f| parse(f)).collect();
        assert_eq!(got[0], want);
    }
    let s = rig.queues[0].stats();
    assert_eq!((s.rx_packets, s.rx_errors, s.rx_dropped), (1000, 0, 0));
    assert_eq!(s.rx_bytes, 1000 * 60);
    let nic = rig.nic.stats();
    assert_eq!(nic.rx_good_packets, 1000, "{nic:?}");
    assert_eq!(nic.queue_rx_packets[0], 1000);

    // Transmit: every frame reaches the peer intact and in order, through a wrapping TX ring.
    let mut sent = 0u32;
    let mut peer_got = Vec::new();
    let mut idle = 0;
    while peer_got.len() < 1000 && idle < 50 {
        let mut batch = PacketBatch::with_capacity(32);
        while sent < 1000 && !batch.is_full() {
            let mut p = cache.alloc().expect("buffer");
            p.extend_from_slice(&frame(TCP, 80, 40000, sent)).expect("fits");
            batch.push(p).expect("room");
            sent += 1;
        }
        rig.queues[0].tx_burst(0, &mut batch).expect("tx");
        // Whatever the ring could not take goes back to the count to send again.
        sent -= u32::try_from(batch.len()).expect("small");
        batch.clear();
        let moved = rig.model.service();
        let mut rx = PacketBatch::with_capacity(64);
        let n = rig.peer.rx_burst(0, &wire_cache, &mut rx).expect("peer rx");
        peer_got.extend(rx.as_slice().iter().map(|p| parse(p.data()).1));
        idle = if n == 0 && moved.is_idle() { idle + 1 } else { 0 };
    }
    assert_eq!(peer_got, (0..1000).collect::<Vec<u32>>());
    let s = rig.queues[0].stats();
    assert_eq!((s.tx_packets, s.tx_dropped), (1000, 0));
    assert!(rig.queues[0].queue_stats().tx_cleaned >= 1000 - 64);
    assert_eq!(rig.model.stats().tx_sent, 1000);
    drop(cache);
    drop(wire_cache);
    rig.finish();
}

#[test]
fn one_burst_takes_frames_across_the_ring_end() {
    let mut rig = small_rig();
    let wire_cache = rig.wire_pool.cache();
    let cache = rig.pool.cache();
    // The cursor to slot 40, then 48 frames in slots 40..63 and 0..23.
    rig.send_flow(&wire_cache, 0..40);
    assert_eq!(rig.receive(&cache, 40)[0].len(), 40);
    rig.send_flow(&wire_cache, 40..88);
    while !rig.model.service().is_idle() {}
    let mut batch = PacketBatch::with_capacity(64);
    // The fast path's run stops at the ring's end; the same call goes on from slot 0.
    assert_eq!(rig.queues[0].rx_burst(0, &cache, &mut batch).expect("rx"), 48);
    let got: Vec<u32> = batch.as_slice().iter().map(|p| parse(p.data()).1).collect();
    assert_eq!(got, (40..88).collect::<Vec<u32>>());
    drop(batch);
    drop((cache, wire_cache));
    rig.finish();
}

/// Zero-copy send: four prepared segments (everything after the Ethernet header) are shared, and
/// each send takes a frame of one with its Ethernet header written into the headroom; the driver
/// puts the frame's token in the TX ring like any index and frees it by token on TX completion,
/// which releases the frame (a send finding its segment's frame still in flight copies instead).
/// The peer receives every frame intact and in order, and every buffer comes back once.
#[test]
fn shared_segments_go_out_by_reference_and_come_back_on_tx_completion() {
    const SENDS: u32 = 400;
    let mut rig = small_rig();
    let wire_cache = rig.wire_pool.cache();
    let cache = rig.pool.cache();
    let full = |k: u32| frame(TCP, 80, 40000, k);
    let segments: Vec<SharedPacket> = (0..4)
        .map(|k| {
            let mut p = cache.alloc().expect("buffer");
            p.extend_from_slice(&full(k)[14..]).expect("fits");
            p.into_shared().expect("a plain packet")
        })
        .collect();
    let (mut sent, mut by_reference) = (0u32, 0u32);
    let mut peer_got = Vec::new();
    let mut idle = 0;
    while peer_got.len() < SENDS as usize && idle < 50 {
        let mut batch = PacketBatch::with_capacity(16);
        let mut queued = Vec::new();
        while sent + u32::try_from(queued.len()).expect("small") < SENDS && !batch.is_full() {
            let k = (sent + u32::try_from(queued.len()).expect("small")) % 4;
            let packet = match segments[k as usize].frame(&cache, 14) {
                Ok(mut frame) => {
                    frame.data_mut().copy_from_slice(&full(k)[..14]);
                    by_reference += 1;
                    frame
                }
                Err(FrameError::InFlight) => {
                    let mut copy = cache.alloc().expect("buffer");
                    copy.extend_from_slice(&full(k)).expect("fits");
                    copy
                }
                Err(e) => panic!("{e}"),
            };
            batch.push(packet).expect("room");
            queued.push(k);
        }
        let taken = rig.queues[0].tx_burst(0, &mut batch).expect("tx");
        sent += u32::try_from(taken).expect("small");
        batch.clear(); // what the ring did not take: frames released, copies freed, sent again
        let moved = rig.model.service();
        let mut rx = PacketBatch::with_capacity(64);
        let n = rig.peer.rx_burst(0, &wire_cache, &mut rx).expect("peer rx");
        peer_got.extend(rx.as_slice().iter().map(|p| (p.data().to_vec(), parse(p.data()).1)));
        idle = if n == 0 && moved.is_idle() { idle + 1 } else { 0 };
    }
    assert_eq!(peer_got.len(), SENDS as usize);
    for (i, (data, seq)) in peer_got.iter().enumerate() {
        let k = u32::try_from(i).expect("small") % 4;
        // Short frames arrive padded to 60 bytes.
        let want = full(k);
        assert_eq!((data.get(..want.len()), *seq), (Some(&want[..]), k), "send {i}");
    }
    assert!(by_reference >= 4, "{by_reference} of {SENDS} sends went by reference");
    assert_eq!(rig.queues[0].stats().tx_dropped, 0);
    assert!(rig.pool.audit().shared <= 4);
    drop(segments);
    drop(cache);
    drop(wire_cache);
    // The ring still holds frames not yet cleaned: dropping the queue frees their tokens, which
    // releases the last references.
    rig.finish();
}

#[test]
fn full_rings_drop_in_the_device_and_hold_back_in_the_driver() {
    let mut rig = small_rig();
    let wire_cache = rig.wire_pool.cache();
    let cache = rig.pool.cache();
    // 200 frames at once: the ring has 63 free descriptors; the model drops the rest (DROP_EN).
    let frames: Vec<Vec<u8>> = (0..200).map(|i| frame(TCP, 40000, 80, i)).collect();
    rig.send(&wire_cache, &frames);
    for _ in 0..10 {
        rig.model.service();
    }
    let mut rx_batch = PacketBatch::with_capacity(512);
    let n = rig.queues[0].rx_burst(0, &cache, &mut rx_batch).expect("rx");
    assert_eq!(n, 63);
    let seqs: Vec<u32> = rx_batch.as_slice().iter().map(|p| parse(p.data()).1).collect();
    assert_eq!(seqs, (0..63).collect::<Vec<u32>>());
    drop(rx_batch);
    assert_eq!(rig.model.stats().rx_dropped_no_desc, 137);
    let nic = rig.nic.stats();
    assert_eq!(nic.queue_rx_dropped[0], 137, "{nic:?}");

    // A full TX ring: 63 of 100 accepted, the rest stay in the batch until the device sends.
    let mut batch = PacketBatch::with_capacity(100);
    for i in 0..100 {
        let mut p = cache.alloc().expect("buffer");
        p.extend_from_slice(&frame(TCP, 80, 1, i)).expect("fits");
        batch.push(p).expect("room");
    }
    assert_eq!(rig.queues[0].tx_burst(0, &mut batch).expect("tx"), 63);
    assert_eq!(batch.len(), 37);
    assert_eq!(rig.queues[0].tx_burst(0, &mut batch).expect("tx"), 0);
    assert!(rig.queues[0].queue_stats().tx_ring_full >= 2);
    rig.model.service();
    assert_eq!(rig.queues[0].tx_burst(0, &mut batch).expect("tx"), 37);
    batch.clear();
    drop(batch);
    drop(cache);
    drop(wire_cache);
    rig.finish();
}

#[test]
fn flow_director_steers_all_4096_groups_and_follows_migration() {
    let queues = 4u16;
    let mut rig = make_rig(Config { queues, rx_ring: 512, tx_ring: 64, ..Config::default() });
    let wire_cache = rig.wire_pool.cache();
    let cache = rig.pool.cache();
    // One frame per flow group, with source ports that differ above the low 12 bits too.
    let frames: Vec<Vec<u8>> =
        (0..4096u16).map(|g| frame(TCP, g | (g % 13) << 12, 80, u32::from(g))).collect();
    let mut got = vec![Vec::new(); usize::from(queues)];
    for round in frames.chunks(1024) {
        rig.send(&wire_cache, round);
        for (q, frames) in rig.receive(&cache, round.len()).into_iter().enumerate() {
            got[q].extend(frames);
        }
    }
    assert_eq!(got.iter().map(Vec::len).sum::<usize>(), 4096);
    for (q, frames) in got.iter().enumerate() {
        assert_eq!(frames.len(), 1024, "queue {q}");
        for &(port, seq) in frames {
            let group = FlowGroup::of_port(port);
            assert_eq!(usize::from(rig.nic.queue_of(group)), q, "group {} on queue {q}", group.0);
            assert_eq!(u32::from(group.0), seq);
        }
        // In order per queue.
        assert!(frames.windows(2).all(|w| w[0].1 < w[1].1), "queue {q} in order");
        assert_eq!(rig.queues[q].queue_stats().rx_fdir_matches, 1024);
    }
    assert_eq!(rig.model.stats().fdir_matches, 4096);

    // Move group 5 (on queue 1) and group 4095 (on queue 3) to queue 0.
    rig.nic.migrate(FlowGroup(5), 0).expect("migrate");
    rig.nic.migrate(FlowGroup(4095), 0).expect("migrate");
    assert_eq!(rig.nic.queue_of(FlowGroup(5)), 0);
    let frames = vec![
        frame(TCP, 5, 80, 1),
        frame(TCP, 0x7005, 443, 2),
        frame(TCP, 6, 80, 3),
        frame(TCP, 0xFFFF, 80, 4),
    ];
    rig.send(&wire_cache, &frames);
    let got = rig.receive(&cache, 4);
    assert_eq!(got[0], vec![(5, 1), (0x7005, 2), (0xFFFF, 4)]);
    assert_eq!(got[2], vec![(6, 3)]);
    let stats = rig.nic.stats();
    assert_eq!((stats.migrations, stats.fdir_cmd_timeouts, stats.fdir_failed_adds), (2, 0, 0));
    assert_eq!(rig.model.stats().fdir_updates, 2);
    assert_eq!(rig.model.fdir_filters(), 4096, "migration re-points, it does not add");
    drop(cache);
    drop(wire_cache);
    rig.finish();
}

#[test]
fn rss_spreads_what_flow_director_misses() {
    let queues = 4u16;
    let mut rig = make_rig(Config { queues, rx_ring: 512, tx_ring: 64, ..Config::default() });
    let wire_cache = rig.wire_pool.cache();
    let cache = rig.pool.cache();
    // UDP: no flow-group filter matches (they are TCP filters), so every frame misses Flow Director
    // and is still delivered, by RSS (which hashes only the addresses of UDP: MRQC has no UDP field).
    let udp: Vec<Vec<u8>> = (0..256u16).map(|i| frame(UDP, 1000 + i, 53, u32::from(i))).collect();
    rig.send(&wire_cache, &udp);
    let got = rig.receive(&cache, udp.len());
    assert_eq!(got.iter().map(Vec::len).sum::<usize>(), 256);
    assert_eq!(rig.queues.iter().map(|q| q.queue_stats().rx_fdir_matches).sum::<u64>(), 0);
    assert!(rig.nic.stats().fdir_misses >= 256);
    drop(cache);
    drop(wire_cache);
    rig.finish();

    // Flow Director off: TCP flows spread over every queue by RSS, each flow on one queue.
    let mut rig = make_rig(Config { queues, rx_ring: 512, tx_ring: 64, fdir: false, ..Config::default() });
    let wire_cache = rig.wire_pool.cache();
    let cache = rig.pool.cache();
    let flows = 512u16;
    let tcp: Vec<Vec<u8>> = (0..2 * u32::from(flows))
        .map(|i| frame(TCP, 20000 + u16::try_from(i % u32::from(flows)).expect("small"), 80, i))
        .collect();
    rig.send(&wire_cache, &tcp);
    let got = rig.receive(&cache, tcp.len());
    assert_eq!(got.iter().map(Vec::len).sum::<usize>(), tcp.len());
    for (q, frames) in got.iter().enumerate() {
        assert!(frames.len() > tcp.len() / 16, "queue {q} got {} of {}", frames.len(), tcp.len());
        for &(port, _) in frames {
            let other = got.iter().enumerate().any(|(o, f)| o != q && f.iter().any(|&(p, _)| p == port));
            assert!(!other, "flow {port} seen on two queues");
        }
    }
    drop(cache);
    drop(wire_cache);
    rig.finish();
}

#[test]
fn a_misbehaving_device_is_survived_and_counted() {
    let faults = SimFaults {
        bad_length_every: Some(7),
        missing_eop_every: Some(11),
        bogus_status_every: Some(13),
        zero_length_every: Some(17),
        write_past_tail: true,
        ..SimFaults::default()
    };
    let mut rig = rig_with(Config { queues: 1, rx_ring: 64, tx_ring: 64, ..Config::default() }, faults);
    let wire_cache = rig.wire_pool.cache();
    let cache = rig.pool.cache();
    let frames: Vec<Vec<u8>> = (0..3000).map(|i| frame(TCP, 40000, 80, i)).collect();
    let mut delivered = Vec::new();
    // Bursts larger than the ring, so that the ring fills and the model writes past the tail.
    for round in frames.chunks(100) {
        rig.send(&wire_cache, round);
        for _ in 0..3 {
            rig.model.service();
        }
        for _ in 0..3 {
            let mut batch = PacketBatch::with_capacity(32);
            rig.queues[0].rx_burst(0, &cache, &mut batch).expect("rx");
            for p in batch.as_slice() {
                // 58 bytes of frame, padded to the 60-byte minimum on the wire.
                assert_eq!(p.len(), 60, "only well-formed frames are delivered");
                delivered.push(parse(p.data()).1);
            }
        }
    }
    let s = rig.queues[0].stats();
    let e = rig.queues[0].queue_stats();
    let sim = rig.model.stats();
    assert!(sim.faults_injected > 100, "{sim:?}");
    assert!(e.rx_bad_length > 0 && e.rx_missing_eop > 0 && e.rx_chained > 0, "{e:?}");
    assert!(e.rx_error_bits > 0 && e.rx_past_tail > 0, "{e:?}");
    // Every descriptor the model completed in its own ring was either delivered or counted.
    assert_eq!(s.rx_packets + s.rx_errors - e.rx_past_tail, sim.rx_delivered, "{s:?} {e:?} {sim:?}");
    assert_eq!(s.rx_packets, delivered.len() as u64);
    // Delivered frames are distinct and in order.
    assert!(delivered.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(sim.dma_faults, 0, "the driver never gave the device a bad address");
    drop(cache);
    drop(wire_cache);
    rig.finish();
}

#[test]
fn queues_run_on_their_own_threads_beside_a_running_device() {
    let queues = 2u16;
    let Rig { model, nic, queues: qs, mut peer, wire_pool, pool } =
        make_rig(Config { queues, rx_ring: 256, tx_ring: 256, ..Config::default() });
    let device = model.spawn();
    const FRAMES: u32 = 2000;
    // Each core echoes what its queue receives, until it has seen its share.
    let workers: Vec<_> = qs
        .into_iter()
        .map(|mut queue| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let cache = pool.cache();
                let mut seen = Vec::new();
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                while seen.len() < (FRAMES / 2) as usize && std::time::Instant::now() < deadline {
                    let mut batch = PacketBatch::with_capacity(32);
                    queue.rx_burst(0, &cache, &mut batch).expect("rx");
                    seen.extend(batch.as_slice().iter().map(|p| parse(p.data())));
                    while !batch.is_empty() && std::time::Instant::now() < deadline {
                        queue.tx_burst(0, &mut batch).expect("tx");
                    }
                }
                (queue, seen)
            })
        })
        .collect();
    let wire_cache = wire_pool.cache();
    let frames: Vec<Vec<u8>> =
        (0..FRAMES).map(|i| frame(TCP, 30000 + u16::try_from(i % 64).expect("small"), 80, i)).collect();
    let mut echoed = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut next = 0;
    while echoed.len() < FRAMES as usize && std::time::Instant::now() < deadline {
        // Pace the sender: at most 128 frames in flight, so that no ring (256 per queue) or wire can
        // overflow however the four threads are scheduled on two cores.
        if next < frames.len() && next - echoed.len() <= 128 - 16 {
            let mut batch = PacketBatch::with_capacity(16);
            for f in &frames[next..(next + 16).min(frames.len())] {
                let mut p = wire_cache.alloc().expect("wire buffer");
                p.extend_from_slice(f).expect("fits");
                batch.push(p).expect("room");
            }
            next += peer.tx_burst(0, &mut batch).expect("peer tx");
        }
        let mut rx = PacketBatch::with_capacity(64);
        peer.rx_burst(0, &wire_cache, &mut rx).expect("peer rx");
        echoed.extend(rx.as_slice().iter().map(|p| parse(p.data()).1));
        if next - echoed.len() > 128 - 16 {
            std::thread::yield_now();
        }
    }
    let mut queues = Vec::new();
    for (q, worker) in workers.into_iter().enumerate() {
        let (queue, seen) = worker.join().expect("worker");
        assert_eq!(seen.len(), (FRAMES / 2) as usize, "queue {q}");
        for &(port, _) in &seen {
            assert_eq!(usize::from(nic.queue_of(FlowGroup::of_port(port))), q);
        }
        assert!(seen.windows(2).all(|w| w[0].1 < w[1].1), "queue {q} in order");
        queues.push(queue);
    }
    echoed.sort_unstable();
    assert_eq!(echoed, (0..FRAMES).collect::<Vec<u32>>(), "every frame echoed once");
    device.stop();
    drop(wire_cache);
    Rig { model, nic, queues, peer, wire_pool, pool }.finish();
}
