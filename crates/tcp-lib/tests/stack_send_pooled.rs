//! Application data sent by reference from pool buffers (`Stack::send_pooled`): the application
//! fills pool buffers with payload, shares them and queues them; the stack writes only the headers
//! into each buffer's headroom and hands the buffer itself to a `Pair`, which delivers the frame.
//! Through loss, delay, reordering and duplication, over IPv4 and IPv6: the receiver gets every
//! byte in order, most segments go by reference, retransmissions happen (from the same buffers,
//! held until acknowledged), a buffer that must be split is copied and counted, and the pool has
//! no leak at the end.

mod common;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::{A_IP, B_IP, Rng, TICK, config};
use netchannel::dev::{DirectionConfig, FaultConfig, FaultInjector, Pair, VirtualClock};
use netchannel::pool::{HugePages, Pool, PoolCache, SharedPacket};
use tcp_lib::stack::{Error, Stack, StackStats, StreamId};
use tcp_lib::wire::Ipv6Cidr;

const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 2);

/// `reorder`: a share of frames held back until `reorder_by` (3) more have passed.
fn lossy(reorder: f64) -> DirectionConfig {
    DirectionConfig {
        drop: 0.03,
        corrupt: 0.0,
        duplicate: 0.01,
        reorder,
        reorder_by: 3,
        reorder_timeout: None,
        delay: Duration::from_millis(2),
        rate: None,
    }
}

/// `data` in a fresh pool buffer of `cache`, written in place, shared.
fn buffer(cache: &PoolCache, data: &[u8]) -> SharedPacket {
    let mut packet = cache.alloc().expect("a free buffer");
    packet.set_len(data.len()).expect("room behind the headroom");
    packet.data_mut().copy_from_slice(data);
    packet.into_shared().expect("a plain packet")
}

struct Run {
    /// Segment payloads of the buffers: `None` for the connection's MSS.
    size: Option<usize>,
    v6: bool,
    /// The sender leaves the TCP checksum to the device.
    partial: bool,
    /// The receiver's buffer (its window).
    recv_buffer: usize,
    /// The share of frames reordered.
    reorder: f64,
    /// Queue with `send_pooled_with` (buffers filled only when there is room) instead of
    /// `send_pooled`.
    with: bool,
    /// The sender cuts super-segments in software (`Config::gso_max_size` 65535): trains of
    /// whole buffers, each a frame of its own.
    gso: bool,
    total: usize,
}

/// Client `a` sends `total` random bytes in pool buffers through a lossy link to server `b`, which
/// reads them; returns the sender's stack stats and its connection's retransmissions.
fn send_pooled_through_faults(r: &Run) -> (StackStats, u64) {
    let pool = Pool::builder(4 * 1024).hugepages(HugePages::Never).build().unwrap();
    let (pa, pb) = Pair::builder(&pool).capacity(1024).build().unwrap();
    let cache = pool.cache();
    let clock = VirtualClock::new();
    let (mut ca, mut cb) = (config(&pa, A_IP, 1), config(&pb, B_IP, 2));
    if r.v6 {
        ca = ca.with_ipv6(Ipv6Cidr::new(A6, 64).unwrap());
        cb = cb.with_ipv6(Ipv6Cidr::new(B6, 64).unwrap());
    }
    ca.tx_partial_checksum = r.partial;
    ca.tcp.send_buffer = 64 * 1024;
    ca.gso_max_size = if r.gso { 65535 } else { 0 };
    cb.tcp.recv_buffer = r.recv_buffer;
    let faults = FaultConfig {
        seed: 11 + u64::from(r.v6),
        rx: lossy(r.reorder),
        tx: lossy(r.reorder),
        max_held: 1024,
    };
    let mut dev_a = FaultInjector::with_clock(pa, &pool, faults, clock.clone());
    let mut dev_b = pb;
    let mut now = Instant::now();
    let mut a = Stack::new(ca, now);
    let mut b = Stack::new(cb, now);
    let mut rng = Rng(0x9001 + u64::from(r.v6));
    let expected = rng.bytes(r.total);
    let l = b.listen(80).unwrap();
    let to = if r.v6 { IpAddr::V6(B6) } else { IpAddr::V4(B_IP) };
    let c = a.connect(SocketAddr::new(to, 80)).unwrap();
    let mut server: Option<StreamId> = None;
    let (mut sent, mut got) = (0, Vec::new());
    let mut held: Option<SharedPacket> = None;
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..200_000 {
        // The poll's receive releases the frames the injector delayed, so a connection with little
        // to send still sees them go.
        a.poll(now, &mut dev_a, &cache).unwrap();
        b.poll(now, &mut dev_b, &cache).unwrap();
        now += TICK;
        clock.advance(TICK);
        if let Some(s) = b.accept(l) {
            server = Some(s);
        }
        let size = r.size.unwrap_or_else(|| a.send_mss(c).unwrap());
        if r.with && sent < expected.len() {
            let n = a
                .send_pooled_with(c, |room| {
                    // Whole segments only: a buffer cut to the room left would be a short segment.
                    let n = size.min(expected.len() - sent);
                    if n == 0 || n > room {
                        return None;
                    }
                    let p = buffer(&cache, &expected[sent..sent + n]);
                    sent += n;
                    Some(p)
                })
                .or_else(|e| if e == Error::WouldBlock { Ok(0) } else { Err(e) })
                .unwrap();
            assert!(n <= expected.len());
        }
        while !r.with && sent < expected.len() {
            let p = held.take().unwrap_or_else(|| {
                let n = size.min(expected.len() - sent);
                buffer(&cache, &expected[sent..sent + n])
            });
            let n = p.len();
            match a.send_pooled(c, p) {
                Ok(()) => sent += n,
                Err((Error::WouldBlock, p)) => {
                    held = Some(p);
                    break;
                }
                Err((e, _)) => panic!("{e}"),
            }
        }
        if let Some(s) = server {
            loop {
                match b.recv(s, &mut buf) {
                    Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                    Ok(_) | Err(Error::WouldBlock) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        if got.len() >= expected.len() && a.queues(c).unwrap().1 == 0 {
            break;
        }
    }
    let fs = dev_a.fault_stats();
    assert_eq!(got.len(), expected.len(), "{fs:?}, {:?}", a.stats());
    assert!(got == expected, "bytes differ");
    assert_eq!(a.queues(c).unwrap().1, 0, "all acknowledged");
    assert!(fs.tx.dropped + fs.rx.dropped > 10, "{fs:?}");
    assert_eq!(b.stats().rx_malformed, 0, "the headers' checksums hold");
    // One is: the sender announces itself at start with a gratuitous ARP request (for its own address).
    assert!(b.stats().rx_not_for_us <= 1, "every frame is addressed to the receiver: {:?}", b.stats());
    let st = *a.stats();
    let retransmits = a.connection_stats(c).unwrap().retransmits;
    // Everything goes: the frames held by the injector, the buffers, the stacks.
    drop((a, b, dev_a, dev_b, held));
    drop(cache);
    pool.check_leaks().unwrap();
    (st, retransmits)
}

/// Whole buffers of one segment each through the faults. With software GSO (`gso`), a window's
/// worth of them goes as one decision, a train: each buffer a frame of its own, by reference, its
/// headers copied from the frame before but for what differs (the receiver checks every
/// checksum and counts frames not addressed to it, so each frame's headers, written whole or
/// completed from the one before, are right).
fn whole_buffers(v6: bool, partial: bool, gso: bool) {
    let run = Run {
        size: None,
        v6,
        partial,
        recv_buffer: 256 * 1024,
        reorder: 0.02,
        with: v6 != gso,
        gso,
        total: 3 << 20,
    };
    let (st, retransmits) = send_pooled_through_faults(&run);
    assert!(retransmits > 20, "retransmissions happened: {retransmits}");
    if gso {
        assert!(st.tx_gso_super_segments > 100, "trains were cut: {st:?}");
        assert_eq!(st.tx_gso_dropped, 0, "{st:?}");
    } else {
        assert_eq!(st.tx_gso_super_segments, 0, "{st:?}");
    }
    let all = st.tx_pool_by_reference + st.tx_pool_split + st.tx_pool_busy;
    assert!(all >= (3 << 20) / 1448, "every data segment came from a pool buffer: {st:?}");
    assert!(st.tx_pool_by_reference * 10 > all * 9, "most segments by reference: {st:?}");
    // Retransmissions are sent from the same buffers (by reference where the first frame is back).
    assert!(st.tx_pool_by_reference > (3 << 20) / 1448, "{st:?}");
    assert_eq!(st.tx_prepared, 0, "{st:?}");
}

#[test]
fn pooled_by_reference_ipv4() {
    whole_buffers(false, false, false);
}

#[test]
fn pooled_by_reference_ipv6() {
    whole_buffers(true, false, false);
}

#[test]
fn pooled_by_reference_partial_checksums() {
    whole_buffers(false, true, false);
}

#[test]
fn pooled_trains_ipv4() {
    whole_buffers(false, false, true);
}

#[test]
fn pooled_trains_ipv6() {
    whole_buffers(true, false, true);
}

#[test]
fn pooled_trains_partial_checksums() {
    whole_buffers(false, true, true);
}

/// Buffers of more than one segment are split: the segments are copied out of them and counted;
/// the bytes arrive all the same and every buffer goes back.
#[test]
fn buffers_larger_than_the_mss_are_copied() {
    let run = Run {
        size: Some(1448 + 500),
        v6: false,
        partial: false,
        recv_buffer: 256 * 1024,
        reorder: 0.02,
        with: false,
        gso: false,
        total: 1 << 20,
    };
    let (st, _) = send_pooled_through_faults(&run);
    assert!(st.tx_pool_split > (1 << 20) / 1948, "each buffer is split in two: {st:?}");
    assert!(st.tx_pool_by_reference < st.tx_pool_split / 10, "{st:?}");
}

/// A receiver window smaller than a buffer cuts segments short of it (RFC 9293's sender SWS
/// avoidance lets a segment of half the largest window go): those are copied, counted as split. (No reordering: the injector
/// holds a reordered frame until three more pass, which a window this small may not let happen.)
#[test]
fn a_small_window_cuts_buffers() {
    let run = Run {
        size: None,
        v6: false,
        partial: false,
        recv_buffer: 1000,
        reorder: 0.0,
        with: true,
        gso: false,
        total: 128 * 1024,
    };
    let (st, _) = send_pooled_through_faults(&run);
    assert!(st.tx_pool_split > 0, "{st:?}");
    assert!(st.tx_pool_by_reference > st.tx_pool_split, "{st:?}");
}

/// Queued buffers are bounded by the send buffer's size: the one that does not fit comes back.
#[test]
fn the_send_buffer_bounds_what_is_queued() {
    let pool = Pool::builder(256).hugepages(HugePages::Never).build().unwrap();
    let (pa, _pb) = Pair::builder(&pool).capacity(64).build().unwrap();
    let cache = pool.cache();
    let mut ca = config(&pa, A_IP, 1);
    ca.tcp.send_buffer = 10_000;
    let mut a = Stack::new(ca, Instant::now());
    let c = a.connect(SocketAddr::new(IpAddr::V4(B_IP), 80)).unwrap();
    let one = vec![7u8; 1448];
    for _ in 0..6 {
        a.send_pooled(c, buffer(&cache, &one)).unwrap();
    }
    let (err, back) = a.send_pooled(c, buffer(&cache, &one)).unwrap_err();
    assert_eq!(err, Error::WouldBlock);
    assert_eq!(back.data(), &one[..], "the buffer comes back");
    assert_eq!(a.queues(c).unwrap().1, 6 * 1448);
    a.shutdown_write(c).unwrap();
    let (err, back) = a.send_pooled(c, back).unwrap_err();
    assert_eq!(err, Error::WriteClosed);
    drop((a, back, pa, _pb, cache));
    pool.check_leaks().unwrap();
}

/// A retransmission while the first frame of its buffer is still at the device (here: in the
/// `Pair`, not yet received) cannot write its headers into the same headroom: it is copied and
/// counted. The buffer stays held until acknowledged and the device done with both frames, and
/// then goes back to the pool.
#[test]
fn a_retransmission_while_the_frame_is_in_flight_is_copied() {
    let mut net = common::Net::new();
    let (c, s) = net.open(80);
    let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let sent = buffer(&net.cache, &data);
    let watch = sent.clone();
    net.a.send_pooled(c, sent).unwrap();
    net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
    assert_eq!(net.a.stats().tx_pool_by_reference, 1);
    assert!(watch.frame_in_flight(), "the first frame waits in the Pair");
    // Past the RTO, with B not polled: the retransmission finds the frame still in flight.
    net.now += Duration::from_secs(2);
    net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
    assert_eq!(net.a.connection_stats(c).unwrap().retransmits, 1);
    assert_eq!(net.a.stats().tx_pool_busy, 1, "{:?}", net.a.stats());
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    assert!(net.run_until(1000, |n| {
        while let Ok(k) = n.b.recv(s, &mut buf) {
            if k == 0 {
                break;
            }
            got.extend_from_slice(&buf[..k]);
        }
        n.a.queues(c).unwrap().1 == 0
    }));
    assert_eq!(got, data);
    assert_eq!(watch.ref_count(), 1, "acknowledged, the connection let it go; the frames are done");
    drop(watch);
    drop(net.a);
    drop(net.b);
    drop((net.dev_a, net.dev_b, net.cache));
    net.pool.check_leaks().unwrap();
}
