//! A misbehaving 82599 model and a misbehaving driver: IOMMU faults, unusable rings, and the fault
//! modes that write bad descriptors (lengths larger than the buffer, missing EOP, bogus status,
//! write-back past the tail). Also the generator wire that fills every free descriptor.
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values (queue and ring indices, ports, tags) are small"
)]

mod sim_support;

use std::sync::atomic::Ordering;

use ixgbe_vfio::regs::{self, rx, tx};
use ixgbe_vfio::sim::{SimFaults, Wire};
use sim_support::*;

fn generator(n: u32) -> Wire {
    Wire::Generator((0..n).map(|i| tcp_to_model(4000, i)).collect())
}

#[test]
fn rx_buffer_outside_every_mapping_is_an_iommu_fault() {
    let d = Driver::new(config(generator(1)));
    let mut rxq = RxQueue::new(&d, 0, 8, 2, true);
    // Descriptor 0 points past the end of the buffer allocation; descriptor 1 at the ring itself is
    // fine for the IOMMU (mapped), descriptor 2 at address 0.
    let bad = rxq.bufs.iova(0).expect("iova").0 + (rxq.bufs.len() as u64).next_multiple_of(4096);
    rxq.ring.store_u64(0, bad, Ordering::Relaxed);
    rxq.ring.store_u64(2 * regs::DESC_LEN, 0, Ordering::Relaxed);
    d.bar.write32(regs::rdt(0), 3);
    let moved = d.model.service();
    assert_eq!(moved.rx, 1, "only the good descriptor delivered a frame");
    let s = d.model.stats();
    assert_eq!(s.dma_faults, 2);
    let r0 = rxq.poll_one(&d, false).expect("descriptor 0 completed");
    assert_ne!(r0.wb1 & rx::ERR_RXE, 0, "with an error");
    assert_eq!(r0.len(), 0);
    let r1 = rxq.poll_one(&d, false).expect("descriptor 1");
    assert_eq!(r1.wb1 & rx::ERR_RXE, 0);
    let r2 = rxq.poll_one(&d, false).expect("descriptor 2 completed");
    assert_ne!(r2.wb1 & rx::ERR_RXE, 0);
}

#[test]
fn tx_buffer_outside_every_mapping_is_an_iommu_fault() {
    let d = Driver::new(config(Wire::None));
    let mut txq = TxQueue::new(&d, 0, 8);
    let i = txq.send(&tcp_to_model(1, 1));
    txq.ring.store_u64(i * regs::DESC_LEN, 0xdead_0000, Ordering::Relaxed);
    txq.send(&tcp_to_model(1, 2));
    txq.kick(&d);
    let moved = d.model.service();
    assert_eq!(moved.tx, 1);
    let s = d.model.stats();
    assert_eq!((s.dma_faults, s.tx_dropped, s.tx_sent), (1, 1, 1));
    assert!(txq.dd(i), "the descriptor still completes");
}

#[test]
fn a_freed_ring_is_unmapped() {
    let d = Driver::new(config(generator(1)));
    let before = d.model.dma_ranges();
    let rxq = RxQueue::new(&d, 0, 8, 2, true);
    assert_eq!(d.model.dma_ranges(), before + 2);
    drop(rxq);
    assert_eq!(d.model.dma_ranges(), before);
    // The registers still point at the freed ring: the model refuses it.
    assert_eq!(d.model.service().rx, 0);
    assert!(d.model.stats().ring_faults > 0);
}

#[test]
fn unusable_ring_registers_are_counted() {
    let d = Driver::new(config(Wire::None));
    let txq = TxQueue::new(&d, 0, 8);
    // A length that is not a multiple of 128, then a tail past the end.
    d.bar.write32(regs::tdlen(0), 100);
    d.bar.write32(regs::tdt(0), 3);
    assert!(d.model.service().is_idle());
    assert!(d.model.service().is_idle());
    assert_eq!(d.model.stats().ring_faults, 1, "counted once per enable");
    d.bar.write32(regs::tdlen(0), 8 * regs::DESC_LEN as u32);
    d.bar.write32(regs::tdt(0), 9);
    assert!(d.model.service().is_idle());
    drop(txq);
}

#[test]
fn bad_length_fault() {
    let faults = SimFaults { bad_length_every: Some(3), ..SimFaults::default() };
    let d = Driver::new(ixgbe_vfio::sim::SimConfig { faults, ..config(generator(4)) });
    let mut rxq = RxQueue::new(&d, 0, 16, 2, true);
    d.model.service();
    let got = rxq.drain(&d);
    assert_eq!(got.len(), 15);
    for (i, r) in got.iter().enumerate() {
        if (i + 1) % 3 == 0 {
            assert!(r.len() > rxq.buf_size, "frame {i}: length {} beyond the 2 KiB buffer", r.len());
        } else {
            assert_eq!(r.len(), 64);
        }
    }
    assert_eq!(d.model.stats().faults_injected, 5);
}

#[test]
fn missing_eop_fault() {
    let faults = SimFaults { missing_eop_every: Some(2), ..SimFaults::default() };
    let d = Driver::new(ixgbe_vfio::sim::SimConfig { faults, ..config(generator(4)) });
    let mut rxq = RxQueue::new(&d, 0, 8, 2, true);
    d.model.service();
    let eops: Vec<bool> = rxq.drain(&d).iter().map(Received::eop).collect();
    assert_eq!(eops, [true, false, true, false, true, false, true]);
}

#[test]
fn bogus_status_and_zero_length_faults() {
    let faults =
        SimFaults { bogus_status_every: Some(2), zero_length_every: Some(3), ..SimFaults::default() };
    let d = Driver::new(ixgbe_vfio::sim::SimConfig { faults, ..config(generator(4)) });
    let mut rxq = RxQueue::new(&d, 0, 8, 2, true);
    d.model.service();
    let got = rxq.drain(&d);
    assert_eq!(got.len(), 7);
    for (i, r) in got.iter().enumerate() {
        let n = i + 1;
        assert_eq!(r.wb1 & rx::ERR_FRAME_MASK != 0, n % 2 == 0, "frame {n}");
        assert_eq!(r.len() == 0, n % 3 == 0, "frame {n}");
    }
}

#[test]
fn write_past_tail_fault() {
    let faults = SimFaults { write_past_tail: true, ..SimFaults::default() };
    let d = Driver::new(ixgbe_vfio::sim::SimConfig { faults, ..config(Wire::None) });
    let pool = pool(256);
    let (ours, mut peer) = netchannel::dev::Pair::new(&pool).expect("pair");
    drop(d);
    let d = Driver::new(ixgbe_vfio::sim::SimConfig {
        faults,
        ..config(Wire::Device(Box::new(ours), pool.clone()))
    });
    let rxq = RxQueue::new(&d, 0, 8, 2, true);
    {
        use netchannel::dev::{NetDevice, PacketBatch};
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(16);
        for i in 0..8 {
            let mut p = cache.alloc().expect("buffer");
            p.extend_from_slice(&tcp_to_model(1, i)).expect("fits");
            batch.push(p).expect("room");
        }
        assert_eq!(peer.tx_burst(0, &mut batch).expect("tx"), 8);
    }
    d.model.service();
    // Seven frames filled the ring up to the tail (descriptor 7); the eighth was written at the tail,
    // which the device does not own.
    assert_eq!(d.bar.read32(regs::rdh(0)), 7);
    let tail_status = rxq.ring.load_u64(7 * regs::DESC_LEN + 8, Ordering::Acquire);
    assert_ne!(tail_status & rx::STAT_DD, 0);
    assert_eq!(d.model.stats().faults_injected, 1);
    assert_eq!(d.model.stats().rx_dropped_no_desc, 1);
}

#[test]
fn generator_fills_every_free_descriptor() {
    let d = Driver::new(config(generator(3)));
    let mut rxq = RxQueue::new(&d, 0, 256, 2, true);
    let moved = d.model.service();
    assert_eq!(moved.rx, 255);
    assert_eq!(d.model.stats().rx_dropped_no_desc, 0, "the generator never drops for lack of room");
    assert_eq!(d.bar.read32(regs::rdh(0)), 255);
    let tags: Vec<u32> = rxq.drain(&d).iter().map(|r| tag_of(&r.data)).collect();
    assert_eq!(tags.len(), 255);
    assert!(tags.iter().enumerate().all(|(i, &t)| t == (i % 3) as u32), "replayed cyclically");
    // Given back, the descriptors fill again, continuing the cycle.
    assert_eq!(d.model.service().rx, 255);
    assert_eq!(tag_of(&rxq.poll_one(&d, true).expect("frame").data), 0);
}

#[test]
fn generator_counts_and_discards_transmitted_frames() {
    let d = Driver::new(config(generator(1)));
    let mut txq = TxQueue::new(&d, 0, 64);
    for i in 0..40 {
        txq.put(&tcp_to_model(1, i), tx::DCMD_EOP | if i == 39 { tx::DCMD_RS } else { 0 });
    }
    txq.kick(&d);
    assert_eq!(d.model.service().tx, 40);
    assert!(txq.dd(39));
    assert_eq!(d.model.stats().tx_sent, 40);
    assert_eq!(d.bar.read32(regs::GPTC), 40);
}
