//! The 82599 model's registers: reset values and self-clearing bits, the link and queue-enable
//! handshakes, failure modes, clear-on-read statistics.
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values (queue and ring indices, ports, tags) are small"
)]

mod sim_support;

use ixgbe_vfio::regs;
use ixgbe_vfio::sim::{Model, SimConfig, SimFaults, Wire};
use netchannel::dev::Pair;
use sim_support::*;

fn model(config: SimConfig) -> (Model, std::sync::Arc<dyn ixgbe_vfio::hw::Mmio>) {
    let m = Model::new(config);
    let bar = m.mmio();
    (m, bar)
}

#[test]
fn power_on_values() {
    let (_m, bar) = model(SimConfig::default());
    assert_eq!(bar.bar_len(), regs::BAR0_LEN);
    assert_ne!(bar.read32(regs::EEC) & regs::EEC_ARD, 0);
    assert_ne!(bar.read32(regs::RDRXCTL) & regs::RDRXCTL_DMAIDONE, 0);
    assert_eq!(bar.read32(regs::CTRL), 0);
    assert_eq!(bar.read32(regs::LINKS) & regs::LINKS_UP, 0, "link is down until auto-negotiation");
    assert_eq!(bar.read32(regs::srrctl(5)), 0x402, "SRRCTL: 2 KiB buffers, legacy descriptors");
    assert_eq!(bar.read32(regs::ral(0)), u32::from_le_bytes([0x02, 0, 0, 0]));
    assert_eq!(bar.read32(regs::rah(0)), u32::from_le_bytes([0, 0x01, 0, 0]) | regs::RAH_AV);
    assert_eq!(bar.read32(regs::rxdctl(0)) & regs::DCTL_ENABLE, 0);
    assert_eq!(bar.read32(regs::FDIRCTRL) & regs::FDIRCTRL_INIT_DONE, 0);
}

#[test]
fn reset_self_clears_after_configured_reads() {
    let (m, bar) = model(SimConfig { reset_reads: 3, ..SimConfig::default() });
    bar.write32(regs::rdlen(2), 4096);
    bar.write32(regs::MRQC, regs::MRQC_RSSEN);
    bar.write32(regs::CTRL, regs::CTRL_RST_MASK);
    // While the reset runs, the EEPROM auto-read and DMA init are not done.
    assert_eq!(bar.read32(regs::EEC) & regs::EEC_ARD, 0);
    assert_eq!(bar.read32(regs::RDRXCTL) & regs::RDRXCTL_DMAIDONE, 0);
    for i in 0..3 {
        assert_eq!(bar.read32(regs::CTRL) & regs::CTRL_RST_MASK, regs::CTRL_RST_MASK, "read {i}");
    }
    assert_eq!(bar.read32(regs::CTRL) & regs::CTRL_RST_MASK, 0);
    assert_ne!(bar.read32(regs::EEC) & regs::EEC_ARD, 0);
    assert_ne!(bar.read32(regs::RDRXCTL) & regs::RDRXCTL_DMAIDONE, 0);
    // Registers are back at their reset values.
    assert_eq!(bar.read32(regs::rdlen(2)), 0);
    assert_eq!(bar.read32(regs::MRQC), 0);
    assert_eq!(m.stats().resets, 1);
}

#[test]
fn reset_never_clears_fault() {
    let faults = SimFaults { reset_never_clears: true, ..SimFaults::default() };
    let (m, bar) = model(SimConfig { faults, ..SimConfig::default() });
    bar.write32(regs::CTRL, regs::CTRL_RST_MASK);
    for _ in 0..10_000 {
        assert_ne!(bar.read32(regs::CTRL) & regs::CTRL_RST, 0);
    }
    assert_eq!(bar.read32(regs::EEC) & regs::EEC_ARD, 0);
    assert_eq!(bar.read32(regs::RDRXCTL) & regs::RDRXCTL_DMAIDONE, 0);
    // The device does nothing while it is in reset.
    assert!(m.service().is_idle());
}

#[test]
fn read_only_bits_survive_writes() {
    let (m, bar) = model(SimConfig::default());
    bar.write32(regs::EEC, 0);
    assert_ne!(bar.read32(regs::EEC) & regs::EEC_ARD, 0);
    bar.write32(regs::RDRXCTL, regs::RDRXCTL_CRCSTRIP);
    assert_eq!(bar.read32(regs::RDRXCTL), regs::RDRXCTL_CRCSTRIP | regs::RDRXCTL_DMAIDONE);
    bar.write32(regs::LINKS, regs::LINKS_UP);
    assert_eq!(bar.read32(regs::LINKS) & regs::LINKS_UP, 0);
    bar.write32(regs::GPRC, 55);
    assert_eq!(bar.read32(regs::GPRC), 0);
    assert_eq!(m.stats().ignored_writes, 2);
}

#[test]
fn link_comes_up_after_an_restart() {
    let (m, bar) = model(SimConfig { link_reads: 4, ..SimConfig::default() });
    // No auto-negotiation yet: the link stays down however long one polls.
    for _ in 0..100 {
        assert_eq!(bar.read32(regs::LINKS) & regs::LINKS_UP, 0);
    }
    bar.write32(regs::AUTOC, regs::AUTOC_LMS_10G_SERIAL | regs::AUTOC_AN_RESTART);
    assert_eq!(bar.read32(regs::AUTOC), regs::AUTOC_LMS_10G_SERIAL, "AN_RESTART self-clears");
    for i in 0..4 {
        assert_eq!(bar.read32(regs::LINKS) & regs::LINKS_UP, 0, "read {i}");
    }
    let links = bar.read32(regs::LINKS);
    assert_ne!(links & regs::LINKS_UP, 0);
    assert_eq!(links & regs::LINKS_SPEED_MASK, regs::LINKS_SPEED_10G);
    // A link reset takes it down again.
    bar.write32(regs::CTRL, regs::CTRL_LNK_RST);
    while bar.read32(regs::CTRL) & regs::CTRL_LNK_RST != 0 {}
    assert_eq!(bar.read32(regs::LINKS) & regs::LINKS_UP, 0);
    assert_eq!(m.stats().resets, 0, "a link reset is not a device reset");
}

#[test]
fn link_never_up_fault() {
    let faults = SimFaults { link_never_up: true, ..SimFaults::default() };
    let (_m, bar) = model(SimConfig { faults, ..SimConfig::default() });
    bar.write32(regs::AUTOC, regs::AUTOC_AN_RESTART);
    for _ in 0..10_000 {
        assert_eq!(bar.read32(regs::LINKS) & regs::LINKS_UP, 0);
    }
}

#[test]
fn link_follows_the_wire_device() {
    let pool = pool(256);
    let (ours, peer) = Pair::new(&pool).expect("pair");
    let (_m, bar) =
        model(SimConfig { wire: Wire::Device(Box::new(ours), pool.clone()), ..SimConfig::default() });
    bar.write32(regs::AUTOC, regs::AUTOC_AN_RESTART);
    let mut up = false;
    for _ in 0..100 {
        up |= bar.read32(regs::LINKS) & regs::LINKS_UP != 0;
    }
    assert!(up);
    drop(peer);
    assert_eq!(bar.read32(regs::LINKS) & regs::LINKS_UP, 0, "the peer hung up");
}

#[test]
fn queue_enable_handshakes() {
    let (_m, bar) = model(SimConfig { enable_reads: 3, ..SimConfig::default() });
    for reg in [regs::rxdctl(7), regs::txdctl(63)] {
        bar.write32(reg, regs::DCTL_ENABLE | 0x0808);
        for i in 0..3 {
            assert_eq!(bar.read32(reg), 0x0808, "read {i} still shows the queue off");
        }
        assert_eq!(bar.read32(reg), regs::DCTL_ENABLE | 0x0808);
        assert_eq!(bar.read32(reg), regs::DCTL_ENABLE | 0x0808);
        bar.clear_bits(reg, regs::DCTL_ENABLE); // one read inside clear_bits
        for i in 0..3 {
            assert_ne!(bar.read32(reg) & regs::DCTL_ENABLE, 0, "read {i} still shows the queue on");
        }
        assert_eq!(bar.read32(reg), 0x0808);
    }
}

#[test]
fn statistics_clear_on_read() {
    let d = Driver::new(config(Wire::Generator(vec![tcp_to_model(1000, 0)])));
    let mut rxq = RxQueue::new(&d, 0, 16, 2, true);
    let moved = d.model.service();
    assert_eq!(moved.rx, 15);
    assert_eq!(d.bar.read32(regs::GPRC), 15);
    assert_eq!(d.bar.read32(regs::GPRC), 0);
    assert_eq!(d.bar.read32(regs::TPR), 15);
    // 64-byte frames plus FCS.
    assert_eq!(d.bar.read32(regs::GORCL), 15 * 68);
    assert_eq!(d.bar.read32(regs::GORCH), 0);
    assert_eq!(d.bar.read32(regs::GORCL), 0, "reading GORCH cleared the pair");
    assert_eq!(d.bar.read32(regs::qprc(0)), 15);
    assert_eq!(d.bar.read32(regs::qprc(0)), 0);
    let got = rxq.drain(&d);
    assert_eq!(got.len(), 15);
    d.model.service();
    assert_eq!(d.bar.read32(regs::GPRC), 15);
}

#[test]
fn fdir_init_and_free_count() {
    let (_m, bar) = model(SimConfig::default());
    assert_eq!(bar.read32(regs::FDIRFREE), 0);
    bar.write32(regs::FDIRCTRL, regs::FDIRCTRL_PBALLOC_128K | regs::FDIRCTRL_PERFECT_MATCH);
    assert_ne!(bar.read32(regs::FDIRCTRL) & regs::FDIRCTRL_INIT_DONE, 0);
    assert_eq!(bar.read32(regs::FDIRFREE) & regs::FDIRFREE_FREE_MASK, 4096);
    bar.write32(regs::FDIRCTRL, regs::FDIRCTRL_PBALLOC_64K | regs::FDIRCTRL_PERFECT_MATCH);
    assert_eq!(bar.read32(regs::FDIRFREE) & regs::FDIRFREE_FREE_MASK, 2048);
    bar.write32(regs::FDIRCTRL, regs::FDIRCTRL_PBALLOC_256K | regs::FDIRCTRL_PERFECT_MATCH);
    assert_eq!(bar.read32(regs::FDIRFREE) & regs::FDIRFREE_FREE_MASK, 8192);
}

#[test]
fn interrupt_masks() {
    let (_m, bar) = model(SimConfig::default());
    bar.write32(regs::EIMS, 0xF0);
    bar.write32(regs::EIMC, 0x30);
    assert_eq!(bar.read32(regs::EIMS), 0xC0);
    bar.write32(regs::EIMC, regs::EIMC_ALL);
    assert_eq!(bar.read32(regs::EIMS), 0);
    assert_eq!(bar.read32(regs::EICR), 0);
}

#[test]
#[should_panic(expected = "outside a BAR")]
fn out_of_bar_access_is_a_driver_bug() {
    let (_m, bar) = model(SimConfig::default());
    let _ = bar.read32(regs::BAR0_LEN as u32);
}

/// Whatever the driver writes, the model neither panics nor touches memory outside mapped ranges.
#[test]
fn garbage_register_writes_never_panic() {
    let d = Driver::new(config(Wire::Generator(vec![tcp_to_model(7, 1), vec![0xFF; 3], vec![0; 9000]])));
    let _rxq = RxQueue::new(&d, 0, 64, 2, true);
    let _txq = TxQueue::new(&d, 0, 64);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let interesting: Vec<u32> = (0..64)
        .flat_map(|q| {
            [regs::rdbal(q), regs::rdlen(q), regs::rdh(q), regs::rdt(q), regs::srrctl(q), regs::rxdctl(q)]
                .into_iter()
                .chain([regs::tdbal(q), regs::tdlen(q), regs::tdh(q), regs::tdt(q), regs::txdctl(q)])
        })
        .chain([
            regs::FDIRCTRL,
            regs::FDIRCMD,
            regs::FDIRHASH,
            regs::FDIRTCPM,
            regs::MRQC,
            regs::reta(3),
            regs::RXCTRL,
            regs::DMATXCTL,
            regs::HLREG0,
            regs::MAXFRS,
            regs::FCTRL,
            regs::rqsmr(0),
            regs::AUTOC,
        ])
        .collect();
    for _ in 0..5_000 {
        let r = next();
        let off = interesting[(r % interesting.len() as u64) as usize];
        let value = (r >> 32) as u32;
        d.bar.write32(off, value);
        let _ = d.bar.read32(off);
        if r & 0xF == 0 {
            let _ = d.model.service();
        }
    }
    // Keep the link and RX on so that the service loop actually runs the data path.
    d.link_up();
    d.bar.write32(regs::RXCTRL, regs::RXCTRL_RXEN);
    for _ in 0..100 {
        let _ = d.model.service();
    }
}
