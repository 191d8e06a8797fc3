//! The channelizer on the in-memory `Pair`: demultiplexing by signature (exact, then listener, then
//! default), drops on full channels with every buffer accounted for, re-pointing a flow, transmission,
//! and a two-thread run where the consumer sleeps and is woken per VJ.

#![cfg(not(loom))]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use netchannel::channel::{Channel, WakeMode};
use netchannel::channelizer::{Channelizer, ChannelizerError, ConsumerId, MAX_CONSUMERS, SignatureRegistry};
use netchannel::dev::{NetDevice, PacketBatch, Pair};
use netchannel::pool::{HugePages, PacketRx, Pool, PoolCache};
use netchannel::rcu::Qsbr;
use netchannel::signature::{Proto, Signature};

const TCP: u8 = 6;
const UDP: u8 = 17;

/// An Ethernet frame carrying a TCP or UDP segment from `src` to `dst` with `payload`.
fn frame(proto: u8, src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
    let src: SocketAddr = src.parse().unwrap();
    let dst: SocketAddr = dst.parse().unwrap();
    let mut l4 = Vec::new();
    l4.extend_from_slice(&src.port().to_be_bytes());
    l4.extend_from_slice(&dst.port().to_be_bytes());
    if proto == TCP {
        l4.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    } else {
        l4.extend_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
        l4.extend_from_slice(&[0, 0]);
    }
    l4.extend_from_slice(payload);
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
            f.extend_from_slice(&u16::try_from(20 + l4.len()).unwrap().to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&u16::try_from(l4.len()).unwrap().to_be_bytes());
            f.extend_from_slice(&[proto, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => panic!("mixed families"),
    }
    f.extend_from_slice(&l4);
    f
}

fn arp_request() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x08, 0x06]);
    f.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1, 0x02, 0, 0, 0, 0, 2, 10, 0, 0, 2]);
    f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 10, 0, 0, 1]);
    f
}

/// Sends `frames` into the wire from the peer end.
fn inject(wire: &mut Pair, cache: &PoolCache, frames: &[Vec<u8>]) {
    let mut batch = PacketBatch::with_capacity(frames.len());
    for f in frames {
        let mut p = cache.alloc().expect("free buffer");
        p.extend_from_slice(f).unwrap();
        batch.push(p).unwrap();
    }
    assert_eq!(wire.tx_burst(0, &mut batch).unwrap(), frames.len());
}

fn drain(rx: &mut PacketRx, cache: &PoolCache) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| rx.pop(cache).map(|p| p.data().to_vec())).collect()
}

fn sig(proto: Proto, local: &str, remote: &str) -> Signature {
    Signature::new(proto, local.parse().unwrap(), remote.parse().unwrap()).unwrap()
}

fn listener(proto: Proto, local: &str) -> Signature {
    Signature::listener(proto, local.parse().unwrap())
}

fn pool(buffers: u32) -> Pool {
    Pool::builder(buffers).hugepages(HugePages::Never).build().unwrap()
}

#[test]
fn exact_then_listener_then_default() {
    let pool = pool(512);
    let (nic, mut wire) = Pair::new(&pool).unwrap();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let cache = pool.cache();
    let peer = pool.cache();
    let (default_tx, mut default_rx) = pool.packet_channel(64).unwrap();
    let mut ch =
        Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx).build().expect("same pool");
    let mut rx: Vec<PacketRx> = (0..4)
        .map(|i| {
            let (tx, rx) = pool.packet_channel(64).unwrap();
            assert!(ch.attach(ConsumerId(i), tx).expect("same pool").is_none());
            rx
        })
        .collect();
    let _r0 = registry.register(sig(Proto::Tcp, "10.0.0.1:80", "10.0.0.2:1000"), ConsumerId(0)).unwrap();
    let _r1 = registry.register(listener(Proto::Tcp, "10.0.0.1:80"), ConsumerId(1)).unwrap();
    let _r2 = registry.register(listener(Proto::Udp, "10.0.0.1:53"), ConsumerId(2)).unwrap();
    let _r3 = registry.register(listener(Proto::Tcp, "[fd00::1]:443"), ConsumerId(3)).unwrap();

    let exact = frame(TCP, "10.0.0.2:1000", "10.0.0.1:80", b"exact");
    let other_client = frame(TCP, "10.0.0.3:2000", "10.0.0.1:80", b"listener");
    let dns = frame(UDP, "10.0.0.9:5353", "10.0.0.1:53", b"dns");
    let v6 = frame(TCP, "[fd00::2]:40000", "[fd00::1]:443", b"v6");
    let unclaimed_port = frame(UDP, "10.0.0.9:5353", "10.0.0.1:54", b"nobody");
    let udp_not_tcp = frame(UDP, "10.0.0.2:1000", "10.0.0.1:80", b"wrong proto");
    let arp = arp_request();
    let malformed = exact[..30].to_vec();
    inject(
        &mut wire,
        &peer,
        &[
            exact.clone(),
            other_client.clone(),
            dns.clone(),
            v6.clone(),
            unclaimed_port.clone(),
            udp_not_tcp.clone(),
            arp.clone(),
            malformed.clone(),
        ],
    );
    assert_eq!(ch.poll().unwrap().rx, 8);
    // The pair's wire carries bare indices: the channelizer hands it the bytes it read, malformed
    // frames included, so its counters see every byte the peer sent.
    let bytes = [&exact, &other_client, &dns, &v6, &unclaimed_port, &udp_not_tcp, &arp, &malformed]
        .iter()
        .map(|f| f.len() as u64)
        .sum::<u64>();
    let dev = ch.device().stats();
    assert_eq!((dev.rx_packets, dev.rx_bytes), (8, bytes));
    assert_eq!(dev.rx_bytes, wire.stats().tx_bytes);

    assert_eq!(drain(&mut rx[0], &cache), [exact]);
    assert_eq!(drain(&mut rx[1], &cache), [other_client]);
    assert_eq!(drain(&mut rx[2], &cache), [dns]);
    assert_eq!(drain(&mut rx[3], &cache), [v6]);
    assert_eq!(drain(&mut default_rx, &cache), [unclaimed_port, udp_not_tcp, arp]);
    let s = ch.stats();
    assert_eq!((s.rx, s.delivered, s.to_default, s.dropped_malformed, s.dropped_full), (8, 4, 3, 1, 0));
    assert_eq!((s.classify.malformed(), s.classify.total()), (1, 8));
}

#[test]
fn full_channels_drop_and_every_buffer_comes_back() {
    let pool = pool(256);
    {
        let (nic, mut wire) = Pair::new(&pool).unwrap();
        let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
        let cache = pool.cache();
        let peer = pool.cache();
        let (default_tx, mut default_rx) = pool.packet_channel(2).unwrap();
        let mut ch =
            Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx).build().expect("same pool");
        let (tx, mut rx) = pool.packet_channel(4).unwrap();
        ch.attach(ConsumerId(0), tx).expect("same pool");
        let _r = registry.register(listener(Proto::Udp, "10.0.0.1:9"), ConsumerId(0)).unwrap();
        let mine: Vec<Vec<u8>> = (0..10u8).map(|i| frame(UDP, "10.0.0.2:7", "10.0.0.1:9", &[i])).collect();
        let strays: Vec<Vec<u8>> = (0..5u8).map(|i| frame(UDP, "10.0.0.2:7", "10.0.0.1:10", &[i])).collect();
        inject(&mut wire, &peer, &mine);
        inject(&mut wire, &peer, &strays);
        assert_eq!(ch.poll().unwrap().rx, 15);
        let s = ch.stats();
        assert_eq!((s.delivered, s.to_default, s.dropped_full), (4, 2, 9));
        // The oldest frames were kept, in order.
        assert_eq!(drain(&mut rx, &cache), mine[..4]);
        assert_eq!(drain(&mut default_rx, &cache), strays[..2]);
    }
    pool.check_leaks().unwrap();
}

#[test]
fn repointing_a_flow_moves_its_packets() {
    let pool = pool(256);
    let (nic, mut wire) = Pair::new(&pool).unwrap();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let cache = pool.cache();
    let peer = pool.cache();
    let (default_tx, _default_rx) = pool.packet_channel(8).unwrap();
    let mut ch =
        Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx).build().expect("same pool");
    let (tx0, mut rx0) = pool.packet_channel(8).unwrap();
    let (tx1, mut rx1) = pool.packet_channel(8).unwrap();
    ch.attach(ConsumerId(0), tx0).expect("same pool");
    ch.attach(ConsumerId(1), tx1).expect("same pool");
    let flow = sig(Proto::Tcp, "10.0.0.1:80", "10.0.0.2:1234");
    let mut registration = registry.register(flow, ConsumerId(0)).unwrap();
    let f = frame(TCP, "10.0.0.2:1234", "10.0.0.1:80", b"x");

    inject(&mut wire, &peer, std::slice::from_ref(&f));
    let _ = ch.poll().unwrap();
    assert_eq!(drain(&mut rx0, &cache).len(), 1);

    // Stolen by consumer 1: the registry is the steering mechanism.
    assert_eq!(registration.repoint(ConsumerId(1)), ConsumerId(0));
    inject(&mut wire, &peer, &[f.clone(), f.clone()]);
    let _ = ch.poll().unwrap();
    assert!(drain(&mut rx0, &cache).is_empty());
    assert_eq!(drain(&mut rx1, &cache).len(), 2);

    // Unregistered: back to the default channel.
    drop(registration);
    inject(&mut wire, &peer, std::slice::from_ref(&f));
    let _ = ch.poll().unwrap();
    assert_eq!(ch.stats().to_default, 1);
}

#[test]
fn a_consumer_without_a_channel_here_gets_nothing_and_nothing_is_lost() {
    let pool = pool(128);
    let (nic, mut wire) = Pair::new(&pool).unwrap();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let cache = pool.cache();
    let peer = pool.cache();
    let (default_tx, mut default_rx) = pool.packet_channel(8).unwrap();
    let mut ch =
        Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx).build().expect("same pool");
    let (tx, _rx) = pool.packet_channel(8).unwrap();
    ch.attach(ConsumerId(3), tx).expect("same pool");
    assert!(ch.detach(ConsumerId(3)).is_some());
    let _r = registry.register(listener(Proto::Udp, "10.0.0.1:9"), ConsumerId(3)).unwrap();
    let f = frame(UDP, "10.0.0.2:7", "10.0.0.1:9", b"orphan");
    inject(&mut wire, &peer, std::slice::from_ref(&f));
    let _ = ch.poll().unwrap();
    assert_eq!(drain(&mut default_rx, &cache), [f]);
    let s = ch.stats();
    assert_eq!((s.unattached, s.to_default, s.delivered), (1, 1, 0));
}

#[test]
fn ids_index_the_lanes_up_to_max_consumers_and_unattached_ones_reach_the_default_channel() {
    let pool = pool(128);
    let (nic, mut wire) = Pair::new(&pool).unwrap();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let (cache, peer) = (pool.cache(), pool.cache());
    let (default_tx, mut default_rx) = pool.packet_channel(16).unwrap();
    let mut ch =
        Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx).build().expect("same pool");
    let (tx, _) = pool.packet_channel(8).unwrap();
    assert!(ch.attach(ConsumerId(MAX_CONSUMERS), tx).is_err(), "past the table's bound");
    let (tx, mut rx) = pool.packet_channel(8).unwrap();
    assert!(ch.attach(ConsumerId(MAX_CONSUMERS - 1), tx).expect("the last id").is_none());
    let (tx, _) = pool.packet_channel(8).unwrap();
    ch.attach(ConsumerId(5), tx).expect("same pool");
    assert!(ch.detach(ConsumerId(5)).is_some());
    // Port 1: the last id; port 2: a detached id inside the table; port 3: an id past every
    // attached one; port 4: nobody.
    let _r = [(1, MAX_CONSUMERS - 1), (2, 5), (3, MAX_CONSUMERS - 2)].map(|(port, id)| {
        registry.register(listener(Proto::Udp, &format!("10.0.0.1:{port}")), ConsumerId(id)).unwrap()
    });
    let frames: Vec<Vec<u8>> =
        (1..=4).map(|port| frame(UDP, "10.0.0.2:7", &format!("10.0.0.1:{port}"), b"x")).collect();
    inject(&mut wire, &peer, &frames);
    let _ = ch.poll().unwrap();
    assert_eq!(drain(&mut rx, &cache), [frames[0].clone()]);
    let mut to_default = drain(&mut default_rx, &cache);
    to_default.sort();
    let mut expected = frames[1..].to_vec();
    expected.sort();
    assert_eq!(to_default, expected);
    let s = ch.stats();
    assert_eq!((s.delivered, s.to_default, s.unattached), (1, 3, 2));
}

#[test]
fn a_channel_of_another_pool_is_refused() {
    let other = pool(64);
    let pool = pool(64);
    let (nic, _wire) = Pair::new(&pool).unwrap();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let cache = pool.cache();
    // As the default channel: the builder refuses it.
    let (foreign_default, _foreign_rx) = other.packet_channel(8).unwrap();
    let err = Channelizer::builder(nic, &cache, Arc::clone(&registry), foreign_default)
        .queue(0)
        .burst(8)
        .build()
        .unwrap_err();
    assert_eq!(err, ChannelizerError::WrongPool { default: other.id(), cache: pool.id() });
    assert!(err.to_string().contains("another pool"), "{err}");
    // As a consumer's channel: `attach` hands it back.
    let (nic, _wire) = Pair::new(&pool).unwrap();
    let (default_tx, _default_rx) = pool.packet_channel(8).unwrap();
    let mut ch = Channelizer::builder(nic, &cache, registry, default_tx).build().expect("same pool");
    let (foreign, _rx) = other.packet_channel(8).unwrap();
    assert!(ch.attach(ConsumerId(0), foreign).is_err());
}

#[test]
fn consumers_tx_channels_drain_into_the_device_in_order() {
    let pool = pool(256);
    let (nic, mut wire) = Pair::builder(&pool).capacity(4).build().unwrap();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let cache = pool.cache();
    let peer = pool.cache();
    let (default_tx, _default_rx) = pool.packet_channel(8).unwrap();
    let mut ch =
        Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx).build().expect("same pool");
    let (mut app_tx, app_rx) = pool.packet_channel(64).unwrap();
    ch.add_tx(app_rx);
    let frames: Vec<Vec<u8>> = (0..10u8).map(|i| frame(UDP, "10.0.0.1:9", "10.0.0.2:7", &[i; 3])).collect();
    for f in &frames {
        let mut p = cache.alloc().unwrap();
        p.extend_from_slice(f).unwrap();
        assert!(app_tx.push(p).is_ok());
    }
    // The wire holds 4 frames: the channelizer sends what fits and keeps the rest for later polls.
    let mut got = Vec::new();
    let mut batch = PacketBatch::with_capacity(16);
    for _ in 0..10 {
        let _ = ch.poll().unwrap();
        let _ = wire.rx_burst(0, &peer, &mut batch).unwrap();
        got.extend(batch.drain().map(|p| p.data().to_vec()));
    }
    assert_eq!(got, frames);
    assert_eq!(ch.stats().tx, 10);
}

/// The channelizer on one thread, a consumer that sleeps whenever its channel runs dry on another:
/// every frame arrives, in order, and the consumer was really woken (VJ's protocol end to end).
#[test]
fn consumer_on_another_thread_is_woken() {
    let pool = pool(1024);
    let (nic, mut wire) = Pair::new(&pool).unwrap();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let (default_tx, _default_rx) = pool.packet_channel(16).unwrap();
    let (tx, mut rx) =
        pool.packet_channel_with(Channel::builder(256).wake(WakeMode::Park).spin(Duration::ZERO)).unwrap();
    let _r = registry.register(listener(Proto::Udp, "10.0.0.1:9"), ConsumerId(0)).unwrap();
    const N: u32 = 5_000;
    let consumed = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let consumer = {
        let pool = pool.clone();
        let consumed = Arc::clone(&consumed);
        std::thread::spawn(move || {
            let cache = pool.cache();
            let mut next = 0u32;
            while next < N {
                match rx.pop(&cache) {
                    Some(p) => {
                        let payload = &p.data()[p.len() - 4..];
                        assert_eq!(payload, next.to_be_bytes(), "lost or reordered");
                        next += 1;
                        // Relaxed: a progress count for the sender's flow control only.
                        consumed.store(next, std::sync::atomic::Ordering::Relaxed);
                    }
                    None => assert!(!rx.wait(Some(Duration::from_secs(10))).is_closed()),
                }
            }
            rx.stats()
        })
    };
    let cache = pool.cache();
    let peer = pool.cache();
    let mut ch =
        Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx).build().expect("same pool");
    ch.attach(ConsumerId(0), tx).expect("same pool");
    let mut sent = 0u32;
    while sent < N {
        // Flow control: keep fewer frames in flight than the consumer's channel holds, so nothing
        // is dropped and every frame must be delivered.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while sent - consumed.load(std::sync::atomic::Ordering::Relaxed) > 200 {
            assert!(std::time::Instant::now() < deadline, "the consumer stopped receiving at {sent}");
            std::hint::spin_loop();
        }
        let burst: Vec<Vec<u8>> = (sent..(sent + 7).min(N))
            .map(|i| frame(UDP, "10.0.0.2:7", "10.0.0.1:9", &i.to_be_bytes()))
            .collect();
        inject(&mut wire, &peer, &burst);
        sent += u32::try_from(burst.len()).unwrap();
        while ch.device().stats().rx_packets < u64::from(sent) {
            let _ = ch.poll().unwrap();
        }
        if sent.is_multiple_of(70) {
            std::thread::sleep(Duration::from_micros(200)); // let the consumer fall asleep
        }
    }
    let stats = consumer.join().unwrap();
    assert_eq!(stats.popped, u64::from(N));
    assert_eq!(ch.stats().dropped_full, 0);
    assert!(stats.wakeups > 0, "the consumer never slept: {stats:?}");
    assert!(stats.wakeups <= stats.wakeup_requests);
}

/// Lanes are kept dense: detaching a consumer in the middle moves the last one into its place, and
/// every remaining consumer still gets exactly its own packets; replacing and re-attaching work too.
#[test]
fn detach_replace_and_reattach_keep_every_consumer_on_its_own_channel() {
    let pool = pool(512);
    let (nic, mut wire) = Pair::new(&pool).unwrap();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let cache = pool.cache();
    let peer = pool.cache();
    let (default_tx, mut default_rx) = pool.packet_channel(64).unwrap();
    let mut ch =
        Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx).build().expect("same pool");
    let mut rx: Vec<Option<PacketRx>> = (0..4)
        .map(|i| {
            let (tx, rx) = pool.packet_channel(64).unwrap();
            assert!(ch.attach(ConsumerId(i), tx).expect("same pool").is_none());
            Some(rx)
        })
        .collect();
    let regs: Vec<_> = (0..4u32)
        .map(|i| {
            let local = format!("10.0.0.1:{}", 100 + i);
            registry.register(listener(Proto::Udp, &local), ConsumerId(i)).unwrap()
        })
        .collect();
    let frames: Vec<Vec<u8>> = (0..4u32)
        .map(|i| {
            frame(
                UDP,
                "10.0.0.2:7",
                &format!("10.0.0.1:{}", 100 + i),
                &[b'a' + u8::try_from(i).expect("small")],
            )
        })
        .collect();

    // Detach consumer 1 (a middle lane): its packet goes to the default channel, the others stay put.
    assert!(ch.detach(ConsumerId(1)).is_some());
    assert!(ch.detach(ConsumerId(1)).is_none(), "already detached");
    assert!(ch.detach(ConsumerId(9)).is_none(), "never attached");
    inject(&mut wire, &peer, &frames);
    let _ = ch.poll().unwrap();
    assert_eq!(drain(&mut default_rx, &cache), [frames[1].clone()]);
    for i in [0usize, 2, 3] {
        assert_eq!(drain(rx[i].as_mut().unwrap(), &cache), [frames[i].clone()], "consumer {i}");
    }
    rx[1] = None;

    // Replace consumer 3's channel: the old one comes back, the new one receives.
    let (tx3, rx3) = pool.packet_channel(64).unwrap();
    assert!(ch.attach(ConsumerId(3), tx3).expect("same pool").is_some());
    rx[3] = Some(rx3);
    // Re-attach consumer 1.
    let (tx1, rx1) = pool.packet_channel(64).unwrap();
    assert!(ch.attach(ConsumerId(1), tx1).expect("same pool").is_none());
    rx[1] = Some(rx1);
    inject(&mut wire, &peer, &frames);
    let _ = ch.poll().unwrap();
    for (i, rx) in rx.iter_mut().enumerate() {
        assert_eq!(drain(rx.as_mut().unwrap(), &cache), [frames[i].clone()], "consumer {i}");
    }
    assert!(drain(&mut default_rx, &cache).is_empty());
    let s = ch.stats();
    assert_eq!((s.delivered, s.to_default, s.unattached), (7, 1, 1));
    drop(regs);
}

#[test]
fn indices_and_frames_of_shared_buffers_reach_their_consumer_in_order() {
    let pool = pool(256);
    let (nic, mut wire) = Pair::new(&pool).unwrap();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let cache = pool.cache();
    let peer = pool.cache();
    let (default_tx, mut default_rx) = pool.packet_channel(64).unwrap();
    let mut ch =
        Channelizer::builder(nic, &cache, Arc::clone(&registry), default_tx).build().expect("same pool");
    let (tx, mut rx) = pool.packet_channel(64).unwrap();
    ch.attach(ConsumerId(0), tx).expect("same pool");
    let _r = registry.register(listener(Proto::Tcp, "10.0.0.1:80"), ConsumerId(0)).unwrap();
    let seg = |n: u8| frame(TCP, "10.0.0.2:1000", "10.0.0.1:80", &[n; 10]);

    // Plain buffers: the pair hands them over as indices.
    inject(&mut wire, &peer, &[seg(1), seg(2)]);
    assert_eq!(ch.poll().unwrap().rx, 2);
    assert_eq!(drain(&mut rx, &cache), [seg(1), seg(2)]);

    // A burst with a frame of a shared buffer (headers written in front of a shared payload) arrives
    // as packets, in wire order, with the plain buffers around it.
    let by_reference = frame(TCP, "10.0.0.2:1000", "10.0.0.1:80", &[7; 300]);
    let mut payload = peer.alloc().unwrap();
    payload.extend_from_slice(&by_reference[54..]).unwrap();
    let shared = payload.into_shared().unwrap();
    let mut f = shared.frame(&peer, 54).unwrap();
    f.data_mut().copy_from_slice(&by_reference[..54]);
    let plain = |bytes: &[u8]| {
        let mut packet = peer.alloc().unwrap();
        packet.extend_from_slice(bytes).unwrap();
        packet
    };
    let mut batch = PacketBatch::with_capacity(4);
    batch.push(plain(&seg(3))).unwrap();
    batch.push(f).unwrap();
    batch.push(plain(&seg(4))).unwrap();
    assert_eq!(wire.tx_burst(0, &mut batch).unwrap(), 3);
    assert_eq!(ch.poll().unwrap().rx, 3);
    assert_eq!(drain(&mut rx, &cache), [seg(3), by_reference, seg(4)]);
    assert!(!shared.frame_in_flight(), "the consumer dropped the frame: released");
    let s = ch.stats();
    assert_eq!((s.rx, s.delivered, s.to_default, s.dropped_malformed), (5, 5, 0, 0));
    assert!(drain(&mut default_rx, &cache).is_empty());
}
