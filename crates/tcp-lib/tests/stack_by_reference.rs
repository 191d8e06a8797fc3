//! Prepared content sent by reference ([`PreparedSegments::in_pool`]): the stack writes the
//! headers into the headroom of the pool buffer holding a segment and hands that buffer to a
//! `Pair`, which delivers the frame itself. Two connections send the same content through loss,
//! delay, reordering and duplication, over IPv4 and IPv6: the receiver gets every byte in order,
//! most segments go by reference, retransmissions of by-reference segments happen, and a segment
//! whose buffer is still in flight (the other connection's frame, or a held one) is copied. The
//! pool has no leak at the end.

mod common;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use common::{A_IP, B_IP, Rng, TICK, config, lossy};
use netchannel::dev::{FaultConfig, FaultInjector, Pair, VirtualClock};
use netchannel::pool::{HugePages, Pool, SharedPacket};
use tcp_lib::stack::{Error, InPoolError, PreparedSegments, PreparedSlice, Stack, StackStats, StreamId};
use tcp_lib::wire::Ipv6Cidr;

const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 2);

/// The payload of a full segment with timestamps on a 1500-byte MTU.
fn mss_of(v6: bool) -> usize {
    if v6 { 1500 - 40 - 32 } else { 1500 - 20 - 32 }
}

/// `partial`: the sender leaves the TCP checksum to the device (`Config::tx_partial_checksum`);
/// the `Pair` passes the frame's offload metadata on and the receiver trusts it.
/// `copies`: pool buffers per segment.
fn by_reference_through_faults(v6: bool, partial: bool, copies: usize) -> StackStats {
    by_reference_with(v6, partial, copies, 0)
}

/// [`by_reference_through_faults`] with the server's software GSO at `gso` bytes (0: off).
fn by_reference_with(v6: bool, partial: bool, copies: usize, gso: usize) -> StackStats {
    let pool = Pool::builder(16 * 1024).hugepages(HugePages::Never).build().unwrap();
    let (pa, pb) = Pair::builder(&pool).capacity(4096).build().unwrap();
    let cache = pool.cache();
    let clock = VirtualClock::new();
    let (mut ca, mut cb) = (config(&pa, A_IP, 1), config(&pb, B_IP, 2));
    if v6 {
        ca = ca.with_ipv6(Ipv6Cidr::new(A6, 64).unwrap());
        cb = cb.with_ipv6(Ipv6Cidr::new(B6, 64).unwrap());
    }
    cb.tx_partial_checksum = partial;
    cb.gso_max_size = gso;
    let faults = FaultConfig { seed: 5 + u64::from(v6), rx: lossy(0.0), tx: lossy(0.0), max_held: 4096 };
    let mut dev_a = FaultInjector::with_clock(pa, &pool, faults, clock.clone());
    let mut dev_b = pb;
    let mut now = Instant::now();
    let mut a = Stack::new(ca, now);
    let mut b = Stack::new(cb, now);
    let mss = mss_of(v6);
    let mut rng = Rng(0x5eed + u64::from(v6));
    let plan: Vec<Arc<PreparedSegments>> = [1, 3 * mss, 5000, 65_536, 200_000, 30_000]
        .into_iter()
        .map(|n| {
            Arc::new(PreparedSegments::in_pool(rng.bytes(n), &[1448, 1460], (mss, copies), &cache).unwrap())
        })
        .collect();
    let expected: Vec<u8> = plan.iter().flat_map(|p| p.data().to_vec()).collect();
    let l = b.listen(80).unwrap();
    let to = if v6 { IpAddr::V6(B6) } else { IpAddr::V4(B_IP) };
    let clients = [a.connect(SocketAddr::new(to, 80)).unwrap(), a.connect(SocketAddr::new(to, 80)).unwrap()];
    let mut servers: Vec<(StreamId, usize)> = Vec::new();
    let mut got = [Vec::new(), Vec::new()];
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..400_000 {
        a.poll(now, &mut dev_a, &cache).unwrap();
        b.poll(now, &mut dev_b, &cache).unwrap();
        now += TICK;
        clock.advance(TICK);
        while let Some(s) = b.accept(l) {
            servers.push((s, 0));
        }
        // Both servers start in the same tick, so that they send the same segments side by side
        // (a lost handshake segment would otherwise start one a retransmission timeout later, and
        // its frames would rarely meet the other's in flight).
        let started = servers.len() == clients.len();
        for (s, next) in servers.iter_mut().filter(|_| started) {
            while let Some(p) = plan.get(*next) {
                match b.send_prepared(*s, p) {
                    Ok(()) => *next += 1,
                    Err(Error::WouldBlock) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        for (c, got) in clients.iter().zip(&mut got) {
            loop {
                match a.recv(*c, &mut buf) {
                    Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                    Ok(_) | Err(Error::WouldBlock) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        if got.iter().all(|g| g.len() >= expected.len()) {
            break;
        }
    }
    let fs = dev_a.fault_stats();
    for g in &got {
        assert_eq!(g.len(), expected.len(), "v6: {v6}, {fs:?}");
        assert!(*g == expected, "bytes differ (v6: {v6})");
    }
    assert!(fs.tx.dropped + fs.rx.dropped > 10, "{fs:?}");
    let st = b.stats();
    let retransmits: u64 = servers.iter().map(|&(s, _)| b.connection_stats(s).unwrap().retransmits).sum();
    assert!(retransmits > 0, "v6: {v6}");
    assert!(st.tx_by_reference * 10 > st.tx_prepared * 6, "most segments by reference (v6: {v6}): {st:?}");
    if copies == 1 {
        assert!(st.tx_by_reference_copied > 0, "in-flight buffers were copied (v6: {v6}): {st:?}");
    }
    if partial {
        assert!(a.stats().rx_checksum_trusted > 100, "{:?}", a.stats());
    } else {
        assert_eq!(a.stats().rx_malformed, 0, "the headers' checksums hold (v6: {v6})");
    }
    // Everything goes: the frames held by the injector, the content's buffers, the stacks.
    drop((a, b, dev_a, dev_b, plan));
    drop(cache);
    pool.check_leaks().unwrap();
    *st
}

#[test]
fn prepared_content_by_reference_ipv4() {
    by_reference_through_faults(false, false, 1);
}

#[test]
fn prepared_content_by_reference_ipv6() {
    by_reference_through_faults(true, false, 1);
}

#[test]
fn prepared_content_by_reference_partial_checksums() {
    by_reference_through_faults(false, true, 1);
    by_reference_through_faults(true, true, 1);
}

/// Software GSO on the server cuts no super-segment of prepared content, which would copy it:
/// the content still goes by reference a segment at a time.
#[test]
fn prepared_content_by_reference_with_software_gso() {
    for v6 in [false, true] {
        let st = by_reference_with(v6, false, 1, 65_535);
        assert_eq!(st.tx_gso_super_segments, 0, "v6: {v6}: {st:?}");
    }
}

/// With more copies of each segment, fewer sends find every copy in flight and fall back to
/// copying.
#[test]
fn more_copies_fewer_fallbacks() {
    let one = by_reference_through_faults(false, false, 1);
    let three = by_reference_through_faults(false, false, 3);
    assert!(three.tx_by_reference_copied * 2 < one.tx_by_reference_copied, "{one:?} vs {three:?}");
    assert!(three.tx_by_reference > one.tx_by_reference, "{one:?} vs {three:?}");
}

/// Content that does not fit the pool is refused with an error naming the fix, and the buffers
/// taken go back.
#[test]
fn in_pool_needs_free_buffers() {
    let pool = Pool::builder(64).hugepages(HugePages::Never).build().unwrap();
    let cache = pool.cache();
    let err = PreparedSegments::in_pool(vec![1u8; 100 * 1448], &[1448], (1448, 2), &cache).unwrap_err();
    assert!(matches!(err, InPoolError::NoBuffer { needed: 200, .. }), "{err:?}");
    assert!(err.to_string().contains("more buffers"), "{err}");
    let err = PreparedSegments::in_pool(vec![1u8; 100_000], &[1448], (65_536, 1), &cache).unwrap_err();
    assert!(matches!(err, InPoolError::TooLarge { cut: 65_536, .. }), "{err:?}");
    let ok = PreparedSegments::in_pool(vec![1u8; 10 * 1448 + 1], &[1460], (1448, 3), &cache).unwrap();
    assert_eq!(ok.pool_cut(), Some(1448));
    assert!(ok.is_cut_for(1448) && ok.is_cut_for(1460));
    // A segment's three copies, tried round robin: each send starts one copy further on.
    let ok = Arc::new(ok);
    let slice = PreparedSlice { segments: Arc::clone(&ok), offset: 1448, len: 1448 };
    let firsts: Vec<u32> = (0..4).map(|_| slice.copies().unwrap().next().unwrap().index()).collect();
    let copies: Vec<u32> = slice.buffers().iter().map(SharedPacket::index).collect();
    assert_eq!(firsts, [copies[0], copies[1], copies[2], copies[0]]);
    assert_eq!(slice.copies().unwrap().count(), 3);
    let short = PreparedSlice { segments: Arc::clone(&ok), offset: 1448, len: 1000 };
    assert!(short.buffers().is_empty() && short.copies().is_none(), "not a whole segment");
    drop((ok, slice, short, cache));
    pool.check_leaks().unwrap();
}
