//! Transmit through the 82599 model: descriptor processing, DD write-back only where RS is set, TDH,
//! frames arriving on the other end of a `Pair`, gathers, padding, statistics.
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values (queue and ring indices, ports, tags) are small"
)]

mod sim_support;

use ixgbe_vfio::regs::{self, tx};
use ixgbe_vfio::sim::Wire;
use netchannel::dev::{NetDevice, PacketBatch, Pair};
use netchannel::pool::Pool;
use sim_support::*;

fn setup() -> (Driver, Pair, Pool) {
    let pool = pool(4096);
    let (ours, peer) = Pair::new(&pool).expect("pair");
    let d = Driver::new(config(Wire::Device(Box::new(ours), pool.clone())));
    (d, peer, pool)
}

/// Everything waiting at the peer.
fn receive_all(peer: &mut Pair, pool: &Pool) -> Vec<Vec<u8>> {
    let cache = pool.cache();
    let mut out = Vec::new();
    loop {
        let mut batch = PacketBatch::with_capacity(32);
        let n = peer.rx_burst(0, &cache, &mut batch).expect("rx");
        out.extend(batch.drain().map(|p| p.data().to_vec()));
        if n == 0 {
            return out;
        }
    }
}

#[test]
fn frames_go_out_in_order_with_dd_where_rs_is_set() {
    let (d, mut peer, pool) = setup();
    d.map_queue_stats();
    let mut txq = TxQueue::new(&d, 3, 16);
    let frames: Vec<Vec<u8>> =
        (0..10).map(|i| frame(PEER_MAC, ([10, 0, 0, 1], 80), ([10, 0, 0, 2], 999), false, 100, i)).collect();
    let mut idx = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        // RS only on every other frame, as a driver batching completions would.
        let rs = if i % 2 == 1 { tx::DCMD_RS } else { 0 };
        idx.push(txq.put(f, tx::DCMD_EOP | rs));
    }
    txq.kick(&d);
    let moved = d.model.service();
    assert_eq!(moved.tx, 10);
    for (i, &di) in idx.iter().enumerate() {
        assert_eq!(txq.dd(di), i % 2 == 1, "descriptor {di}: DD only where RS was set");
    }
    assert_eq!(d.bar.read32(regs::tdh(3)), 10);
    assert_eq!(receive_all(&mut peer, &pool), frames);
    assert_eq!(d.bar.read32(regs::GPTC), 10);
    assert_eq!(d.bar.read32(regs::qptc(3)), 10);
    assert_eq!(d.bar.read32(regs::GOTCL), 10 * 104);
    assert_eq!(d.bar.read32(regs::GOTCH), 0);
    assert_eq!(d.model.stats().tx_sent, 10);
}

#[test]
fn the_ring_wraps_and_the_model_stops_at_the_tail() {
    let (d, mut peer, pool) = setup();
    let mut txq = TxQueue::new(&d, 0, 8);
    let mut got = Vec::new();
    for round in 0..5u32 {
        for i in 0..5 {
            txq.send(&tcp_to_model(1, round * 5 + i));
        }
        txq.kick(&d);
        d.model.service();
        assert_eq!(d.bar.read32(regs::tdh(0)) as usize, txq.tail, "head caught up with the tail");
        got.extend(receive_all(&mut peer, &pool).iter().map(|f| tag_of(f)));
    }
    assert_eq!(got, (0..25).collect::<Vec<_>>());
    // Nothing new: an idle pass.
    assert!(d.model.service().is_idle());
}

#[test]
fn a_frame_gathered_from_several_descriptors() {
    let (d, mut peer, pool) = setup();
    let mut txq = TxQueue::new(&d, 0, 8);
    let f = frame(PEER_MAC, ([10, 0, 0, 1], 80), ([10, 0, 0, 2], 999), false, 300, 42);
    let a = txq.put(&f[..14], 0);
    let b = txq.put(&f[14..100], 0);
    let c = txq.put(&f[100..], tx::DCMD_EOP | tx::DCMD_RS);
    txq.kick(&d);
    d.model.service();
    assert!(!txq.dd(a) && !txq.dd(b) && txq.dd(c));
    assert_eq!(receive_all(&mut peer, &pool), vec![f]);
}

#[test]
fn context_descriptors_carry_no_data() {
    let (d, mut peer, pool) = setup();
    let mut txq = TxQueue::new(&d, 0, 8);
    let i = txq.tail;
    txq.ring.store_u64(i * regs::DESC_LEN, 0, std::sync::atomic::Ordering::Relaxed);
    txq.ring.store_u64(
        i * regs::DESC_LEN + 8,
        tx::DTYP_CONTEXT | tx::DCMD_DEXT,
        std::sync::atomic::Ordering::Relaxed,
    );
    txq.tail += 1;
    let f = tcp_to_model(5, 5);
    txq.send(&f);
    txq.kick(&d);
    d.model.service();
    assert_eq!(receive_all(&mut peer, &pool), vec![f]);
    assert_eq!(d.bar.read32(regs::tdh(0)), 2);
}

#[test]
fn short_frames_are_padded() {
    let (d, mut peer, pool) = setup();
    let mut txq = TxQueue::new(&d, 0, 8);
    let short = vec![0xAB; 42];
    txq.send(&short);
    txq.kick(&d);
    d.model.service();
    let got = receive_all(&mut peer, &pool);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].len(), 60);
    assert_eq!(&got[0][..42], &short[..]);
    assert!(got[0][42..].iter().all(|&b| b == 0));
    // Without TXPADEN the frame goes out as it is.
    d.bar.clear_bits(regs::HLREG0, regs::HLREG0_TXPADEN);
    txq.send(&short);
    txq.kick(&d);
    d.model.service();
    assert_eq!(receive_all(&mut peer, &pool), vec![short]);
}

#[test]
fn nothing_moves_without_te_or_enable() {
    let (d, mut peer, pool) = setup();
    let mut txq = TxQueue::new(&d, 0, 8);
    d.bar.write32(regs::DMATXCTL, 0);
    txq.send(&tcp_to_model(1, 1));
    txq.kick(&d);
    assert!(d.model.service().is_idle());
    d.bar.write32(regs::DMATXCTL, regs::DMATXCTL_TE);
    d.bar.clear_bits(regs::txdctl(0), regs::DCTL_ENABLE);
    assert!(d.model.service().is_idle());
    assert!(receive_all(&mut peer, &pool).is_empty());
    d.enable(regs::txdctl(0));
    assert_eq!(d.model.service().tx, 1);
    assert_eq!(receive_all(&mut peer, &pool).len(), 1);
}

#[test]
fn loop_through_the_model_and_back() {
    // The peer sends to the model, the test (as the driver) echoes every frame back out.
    let (d, mut peer, pool) = setup();
    let mut rxq = RxQueue::new(&d, 0, 32, 2, true);
    let mut txq = TxQueue::new(&d, 0, 32);
    let frames: Vec<Vec<u8>> = (0..20).map(|i| tcp_to_model(77, i)).collect();
    {
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(32);
        for f in &frames {
            let mut p = cache.alloc().expect("buffer");
            p.extend_from_slice(f).expect("fits");
            batch.push(p).expect("room");
        }
        assert_eq!(peer.tx_burst(0, &mut batch).expect("tx"), 20);
    }
    d.model.service();
    for r in rxq.drain(&d) {
        txq.send(&r.data);
    }
    txq.kick(&d);
    d.model.service();
    assert_eq!(receive_all(&mut peer, &pool), frames);
}
