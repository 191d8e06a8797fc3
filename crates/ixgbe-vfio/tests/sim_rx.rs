//! Receive through the 82599 model from an in-memory `Pair` wire into rings the test builds and
//! serves like a driver: order, wrap-around, drops when the ring is full, frames spread over
//! descriptors, padding, CRC, the address filter.
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values (queue and ring indices, ports, tags) are small"
)]

mod sim_support;

use ixgbe_vfio::regs::{self, rx};
use ixgbe_vfio::sim::Wire;
use netchannel::dev::{NetDevice, PacketBatch, Pair};
use netchannel::pool::Pool;
use sim_support::*;

/// Sends `frames` from the peer end.
fn send(peer: &mut Pair, pool: &Pool, frames: &[Vec<u8>]) {
    let cache = pool.cache();
    for chunk in frames.chunks(32) {
        let mut batch = PacketBatch::with_capacity(32);
        for f in chunk {
            let mut p = cache.alloc().expect("buffer");
            p.extend_from_slice(f).expect("fits");
            batch.push(p).expect("room");
        }
        let n = peer.tx_burst(0, &mut batch).expect("tx");
        assert_eq!(n, chunk.len(), "the wire took the burst");
    }
}

fn setup() -> (Driver, Pair, Pool) {
    let pool = pool(4096);
    let (ours, peer) = Pair::new(&pool).expect("pair");
    let d = Driver::new(config(Wire::Device(Box::new(ours), pool.clone())));
    (d, peer, pool)
}

#[test]
fn every_frame_arrives_once_in_order_with_wrap_around() {
    let (d, mut peer, pool) = setup();
    let mut rxq = RxQueue::new(&d, 0, 32, 2, true);
    let mut seen = Vec::new();
    for round in 0..10u32 {
        let frames: Vec<Vec<u8>> = (0..20).map(|i| tcp_to_model(5000, round * 20 + i)).collect();
        send(&mut peer, &pool, &frames);
        d.model.service();
        for r in rxq.drain(&d) {
            assert!(r.eop());
            assert_eq!(r.len(), 64);
            assert_eq!(r.data.len(), 64);
            assert_eq!(r.wb1 & rx::ERR_FRAME_MASK, 0);
            seen.push(tag_of(&r.data));
        }
    }
    assert_eq!(seen, (0..200).collect::<Vec<_>>(), "200 frames through a 32-entry ring, once each, in order");
    let s = d.model.stats();
    assert_eq!(s.rx_delivered, 200);
    assert_eq!(s.rx_dropped_no_desc, 0);
    assert_eq!(d.bar.read32(regs::GPRC), 200);
    // RDH went round the ring: 200 mod 32.
    assert_eq!(d.bar.read32(regs::rdh(0)), 200 % 32);
}

#[test]
fn full_ring_drops_count_in_qprdc_with_drop_en() {
    let (d, mut peer, pool) = setup();
    d.map_queue_stats();
    let mut rxq = RxQueue::new(&d, 0, 16, 2, true);
    let frames: Vec<Vec<u8>> = (0..40).map(|i| tcp_to_model(5000, i)).collect();
    send(&mut peer, &pool, &frames);
    d.model.service();
    // 15 descriptors were free (the tail is one behind the head): the model never passes the tail.
    assert_eq!(d.bar.read32(regs::rdh(0)), 15);
    assert_eq!(d.bar.read32(regs::qprdc(0)), 25);
    assert_eq!(d.bar.read32(regs::qprdc(0)), 0, "clear on read");
    assert_eq!(d.bar.read32(regs::mpc(0)), 0);
    assert_eq!(d.bar.read32(regs::rnbc(0)), 0);
    let s = d.model.stats();
    assert_eq!((s.rx_delivered, s.rx_dropped_no_desc), (15, 25));
    let got: Vec<u32> = rxq.drain(&d).iter().map(|r| tag_of(&r.data)).collect();
    assert_eq!(got, (0..15).collect::<Vec<_>>());
    // The descriptor at the tail was never written.
    assert_eq!(rxq.ring.load_u64(15 * regs::DESC_LEN + 8, std::sync::atomic::Ordering::Acquire), 0);
}

#[test]
fn full_ring_without_drop_en_counts_rnbc_and_mpc() {
    let (d, mut peer, pool) = setup();
    let _rxq = RxQueue::new(&d, 0, 8, 2, false);
    let frames: Vec<Vec<u8>> = (0..10).map(|i| tcp_to_model(5000, i)).collect();
    send(&mut peer, &pool, &frames);
    d.model.service();
    assert_eq!(d.bar.read32(regs::rnbc(0)), 3);
    assert_eq!(d.bar.read32(regs::mpc(0)), 3);
    assert_eq!(d.bar.read32(regs::qprdc(0)), 0);
}

#[test]
fn disabled_queue_or_receiver_drops() {
    let (d, mut peer, pool) = setup();
    let mut rxq = RxQueue::new(&d, 0, 8, 2, true);
    d.bar.write32(regs::RXCTRL, 0);
    send(&mut peer, &pool, &[tcp_to_model(1, 1)]);
    d.model.service();
    assert!(rxq.drain(&d).is_empty());
    d.bar.write32(regs::RXCTRL, regs::RXCTRL_RXEN);
    d.bar.clear_bits(regs::rxdctl(0), regs::DCTL_ENABLE);
    send(&mut peer, &pool, &[tcp_to_model(1, 2)]);
    d.model.service();
    assert!(rxq.drain(&d).is_empty());
    assert_eq!(d.model.stats().rx_dropped_disabled, 2);
    assert_eq!(d.bar.read32(regs::mpc(0)), 2);
    d.enable(regs::rxdctl(0));
    send(&mut peer, &pool, &[tcp_to_model(1, 3)]);
    d.model.service();
    let got = rxq.drain(&d);
    assert_eq!(got.len(), 1);
    assert_eq!(tag_of(&got[0].data), 3);
}

#[test]
fn a_frame_larger_than_the_buffer_spans_descriptors() {
    let (d, mut peer, pool) = setup();
    let mut rxq = RxQueue::new(&d, 0, 8, 1, true);
    let big = frame(MODEL_MAC, ([10, 0, 0, 2], 9), ([10, 0, 0, 1], 80), false, 1514, 77);
    send(&mut peer, &pool, std::slice::from_ref(&big));
    d.model.service();
    let got = rxq.drain(&d);
    assert_eq!(got.len(), 2);
    assert!(!got[0].eop());
    assert_eq!(got[0].len(), 1024);
    assert!(got[1].eop());
    assert_eq!(got[1].len(), 1514 - 1024);
    let joined: Vec<u8> = got.iter().flat_map(|r| r.data.clone()).collect();
    assert_eq!(joined, big);
    assert_eq!(d.bar.read32(regs::GPRC), 1);
}

#[test]
fn oversize_frames_are_dropped_and_counted() {
    let (d, mut peer, pool) = setup();
    let mut rxq = RxQueue::new(&d, 0, 8, 4, true);
    // 1515 bytes + FCS exceeds 1518 without jumbo frames.
    let long = frame(MODEL_MAC, ([10, 0, 0, 2], 9), ([10, 0, 0, 1], 80), false, 1515, 1);
    send(&mut peer, &pool, std::slice::from_ref(&long));
    d.model.service();
    assert!(rxq.drain(&d).is_empty());
    assert_eq!(d.bar.read32(regs::ROC), 1);
    assert_eq!(d.model.stats().rx_dropped_oversize, 1);
    // With jumbo frames on and MAXFRS large enough it is received.
    d.bar.set_bits(regs::HLREG0, regs::HLREG0_JUMBOEN);
    d.bar.write32(regs::MAXFRS, 9018 << regs::MAXFRS_MFS_SHIFT);
    send(&mut peer, &pool, &[long]);
    d.model.service();
    assert_eq!(rxq.drain(&d).len(), 1);
}

#[test]
fn short_frames_are_padded_and_crc_kept_when_not_stripped() {
    let (d, mut peer, pool) = setup();
    let mut rxq = RxQueue::new(&d, 0, 8, 2, true);
    let mut arp = vec![0u8; 42];
    arp[..6].copy_from_slice(&[0xFF; 6]);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    send(&mut peer, &pool, std::slice::from_ref(&arp));
    d.model.service();
    let got = rxq.drain(&d);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].len(), 60);
    assert_eq!(&got[0].data[..42], &arp[..]);
    assert_eq!(d.bar.read32(regs::BPRC), 1);
    // CRC stripping off: the FCS stays in the buffer.
    d.bar.clear_bits(regs::HLREG0, regs::HLREG0_RXCRCSTRP);
    let f = tcp_to_model(3, 3);
    send(&mut peer, &pool, std::slice::from_ref(&f));
    d.model.service();
    let got = rxq.drain(&d);
    assert_eq!(got[0].len(), f.len() + 4);
    // The FCS of a frame followed by its FCS leaves the CRC-32 residue (IEEE 802.3).
    let crc = crc32(&got[0].data);
    assert_eq!(crc, 0x2144_DF1C);
}

/// Bitwise CRC-32 (reflected 0x04C11DB7), the test's own.
fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
    }
    !c
}

#[test]
fn destination_address_filter() {
    let (d, mut peer, pool) = setup();
    let mut rxq = RxQueue::new(&d, 0, 8, 2, true);
    let other = frame([0x02, 9, 9, 9, 9, 9], ([10, 0, 0, 2], 1), ([10, 0, 0, 1], 80), false, 64, 1);
    send(&mut peer, &pool, std::slice::from_ref(&other));
    d.model.service();
    assert!(rxq.drain(&d).is_empty());
    assert_eq!(d.model.stats().rx_dropped_filtered, 1);
    // A second receive address.
    d.bar.write32(regs::ral(1), u32::from_le_bytes([0x02, 9, 9, 9]));
    d.bar.write32(regs::rah(1), u32::from_le_bytes([9, 9, 0, 0]) | regs::RAH_AV);
    send(&mut peer, &pool, std::slice::from_ref(&other));
    d.model.service();
    assert_eq!(rxq.drain(&d).len(), 1);
    // Broadcast needs BAM.
    d.bar.write32(regs::FCTRL, 0);
    let bcast = frame([0xFF; 6], ([10, 0, 0, 2], 1), ([10, 0, 0, 1], 80), false, 64, 2);
    send(&mut peer, &pool, std::slice::from_ref(&bcast));
    d.model.service();
    assert!(rxq.drain(&d).is_empty());
    // Promiscuous takes everything.
    d.bar.write32(regs::FCTRL, regs::FCTRL_UPE | regs::FCTRL_MPE);
    let unknown = frame([0x02, 7, 7, 7, 7, 7], ([10, 0, 0, 2], 1), ([10, 0, 0, 1], 80), false, 64, 3);
    send(&mut peer, &pool, &[bcast, unknown]);
    d.model.service();
    assert_eq!(rxq.drain(&d).len(), 2);
}

#[test]
fn no_service_without_link() {
    let pool = pool(256);
    let (ours, mut peer) = Pair::new(&pool).expect("pair");
    let d = Driver::new(config(Wire::Device(Box::new(ours), pool.clone())));
    let mut rxq = RxQueue::new(&d, 0, 8, 2, true);
    d.bar.write32(regs::AUTOC, regs::AUTOC_AN_RESTART); // the link retrains: down until LINKS is polled
    send(&mut peer, &pool, &[tcp_to_model(1, 1)]);
    assert!(d.model.service().is_idle());
    d.link_up();
    d.model.service();
    assert_eq!(rxq.drain(&d).len(), 1, "the frame waited on the wire");
}

#[test]
fn service_thread_delivers() {
    let (d, mut peer, pool) = setup();
    let mut rxq = RxQueue::new(&d, 0, 64, 2, true);
    let thread = d.model.spawn();
    assert!(thread.is_running());
    let frames: Vec<Vec<u8>> = (0..50).map(|i| tcp_to_model(5000, i)).collect();
    send(&mut peer, &pool, &frames);
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while seen.len() < 50 && std::time::Instant::now() < deadline {
        if let Some(r) = rxq.poll_one(&d, true) {
            seen.push(tag_of(&r.data));
        } else {
            std::thread::yield_now();
        }
    }
    thread.stop();
    assert_eq!(seen, (0..50).collect::<Vec<_>>());
}
