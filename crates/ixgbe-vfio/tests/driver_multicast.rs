//! The multicast table array (§7.1.1.1.2) on the 82599 model with the real driver: after init no
//! multicast frame passes (the table is cleared and off), after [`Ixgbe::join_multicast`] exactly
//! the joined groups' frames pass (and a group whose table bit differs is still dropped), while
//! unicast to our MAC and broadcast pass throughout. What IPv6's Neighbor Discovery needs.

use std::time::Duration;

use ixgbe_vfio::driver::{Config, Ixgbe};
use ixgbe_vfio::regs;
use ixgbe_vfio::sim::{Model, SimConfig, Wire};
use netchannel::dev::{MacAddr, NetDevice, PacketBatch, Pair};
use netchannel::pool::{HugePages, Pool};

const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

fn frame(dst: [u8; 6]) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&PEER);
    f.extend_from_slice(&[0x86, 0xdd]);
    f.resize(60, 0);
    f
}

#[test]
fn only_the_joined_multicast_groups_pass_the_filter() {
    let wire_pool = Pool::builder(1024).hugepages(HugePages::Never).build().expect("pool");
    let (model_end, mut peer) = Pair::builder(&wire_pool).capacity(256).build().expect("pair");
    let model = Model::new(SimConfig {
        wire: Wire::Device(Box::new(model_end), wire_pool.clone()),
        ..SimConfig::default()
    });
    let pool = Pool::builder(4096).hugepages(HugePages::Never).build().expect("pool");
    let config = Config { link_timeout: Duration::from_secs(1), ..Config::default() };
    let (mut nic, mut queues) = Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config).expect("init");
    let ours = nic.mac().0;
    let solicited = [0x33, 0x33, 0xff, 0xaa, 0xbb, 0xcc];
    let all_nodes = [0x33, 0x33, 0, 0, 0, 1];
    let other = [0x33, 0x33, 0xff, 0x11, 0x22, 0x33];
    assert_ne!(regs::mta_bit(other), regs::mta_bit(solicited), "a group with a bit of its own");
    assert_ne!(regs::mta_bit(other), regs::mta_bit(all_nodes));
    let dsts = [ours, [0xff; 6], solicited, all_nodes, other];
    let wire_cache = wire_pool.cache();
    let cache = pool.cache();
    // Sends one frame to each destination; returns the destinations that came through.
    let mut exchange = |peer: &mut Pair| -> Vec<[u8; 6]> {
        let mut batch = PacketBatch::with_capacity(8);
        for d in dsts {
            let mut p = wire_cache.alloc().expect("wire buffer");
            p.extend_from_slice(&frame(d)).expect("fits");
            batch.push(p).expect("room");
        }
        assert_eq!(peer.tx_burst(0, &mut batch).expect("peer tx"), dsts.len());
        let mut got = Vec::new();
        for _ in 0..20 {
            model.service();
            let mut rx = PacketBatch::with_capacity(16);
            queues[0].rx_burst(0, &cache, &mut rx).expect("rx");
            got.extend(rx.as_slice().iter().map(|p| <[u8; 6]>::try_from(&p.data()[..6]).expect("6 bytes")));
        }
        got
    };
    assert_eq!(exchange(&mut peer), vec![ours, [0xff; 6]], "no multicast before a join");
    nic.join_multicast(&[MacAddr(solicited), MacAddr(all_nodes), MacAddr(ours)]);
    assert_eq!(
        exchange(&mut peer),
        vec![ours, [0xff; 6], solicited, all_nodes],
        "the joined groups, not the other"
    );
    assert_eq!(model.stats().rx_dropped_filtered, 3 + 1);
    drop((cache, wire_cache));
    drop(queues);
    drop(nic);
    drop(model);
    drop(peer);
    pool.check_leaks().expect("no driver buffer leaked");
}
