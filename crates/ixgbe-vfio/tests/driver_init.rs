//! The driver's init sequence against the 82599 model: success, and the failure paths a real device
//! can show (reset never completing, no link), with errors that say what to check.

use std::time::Duration;

use ixgbe_vfio::driver::{Config, InitError, Ixgbe};
use ixgbe_vfio::sim::{Model, SimConfig, SimFaults};
use netchannel::dev::{Link, MacAddr, NetDevice};
use netchannel::pool::{HugePages, Pool};
use netchannel::signature::FlowGroup;
use netchannel::steering::FlowSteering;

fn pool() -> Pool {
    Pool::builder(8192).hugepages(HugePages::Never).build().expect("pool")
}

fn config(queues: u16) -> Config {
    Config {
        queues,
        rx_ring: 128,
        tx_ring: 128,
        link_timeout: Duration::from_millis(200),
        register_timeout: Duration::from_millis(200),
        ..Config::default()
    }
}

#[test]
fn init_brings_the_model_up_with_every_flow_group_filter() {
    let mac = MacAddr([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
    let model = Model::new(SimConfig { mac, ..SimConfig::default() });
    let pool = pool();
    let (mut nic, queues) = Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config(4)).expect("init");
    assert_eq!(nic.mac(), mac);
    assert!(matches!(nic.link(), Link::Up { .. }), "{:?}", nic.link());
    assert_eq!(queues.len(), 4);
    for (i, q) in queues.iter().enumerate() {
        assert_eq!(usize::from(q.index()), i);
        let info = q.info();
        assert_eq!((info.queues, info.mac, info.name.as_str()), (1, mac, format!("sim0/q{i}").as_str()));
        assert!(matches!(q.link(), Link::Up { .. }));
    }
    // The model checked every FDIRHASH against its own bucket hash: none differed, none failed.
    let sim = model.stats();
    assert_eq!(sim.fdir_hash_mismatches, 0, "{sim:?}");
    assert_eq!(sim.fdir_failed_adds, 0, "{sim:?}");
    assert_eq!(model.fdir_filters(), 4096);
    let stats = nic.stats();
    assert_eq!(stats.fdir_failed_adds, 0);
    assert_eq!(stats.fdir_adds, 4096, "{stats:?}");
    assert_eq!(nic.queues(), 4);
    assert_eq!(nic.queue_of(FlowGroup(4094)), 2);
    drop(queues);
    drop(nic);
    // Rings and the pool mapping are released with the driver.
    assert_eq!(model.dma_ranges(), 0);
    pool.check_leaks().expect("every buffer back");
}

#[test]
fn a_reset_that_never_completes_is_a_clear_error() {
    let faults = SimFaults { reset_never_clears: true, ..SimFaults::default() };
    let model = Model::new(SimConfig { faults, ..SimConfig::default() });
    let pool = pool();
    let err = Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config(2)).expect_err("no reset");
    assert!(matches!(err, InitError::ResetTimeout { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("CTRL.RST") && msg.contains("vfio-pci"), "{msg}");
    pool.check_leaks().expect("nothing allocated");
    assert_eq!(model.dma_ranges(), 0);
}

#[test]
fn no_link_is_a_clear_error_and_leaks_nothing() {
    let faults = SimFaults { link_never_up: true, ..SimFaults::default() };
    let model = Model::new(SimConfig { faults, ..SimConfig::default() });
    let pool = pool();
    let err = Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config(2)).expect_err("no link");
    assert!(matches!(err, InitError::LinkTimeout { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("cable") && msg.contains("link_timeout"), "{msg}");
    // The rings were built and filled before the wait: all of it came back.
    pool.check_leaks().expect("every buffer back after a failed init");
    assert_eq!(model.dma_ranges(), 0);

    // Without waiting for the link, the same device initializes and reports the link down.
    let config = Config { link_timeout: Duration::ZERO, ..config(2) };
    let (nic, queues) = Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config).expect("init");
    assert_eq!(nic.link(), Link::Down);
    assert!(!nic.wait_for_link(Duration::from_millis(20)));
    drop(queues);
    pool.check_leaks().expect("every buffer back");
}

#[test]
fn slow_handshakes_are_waited_for() {
    let model =
        Model::new(SimConfig { reset_reads: 50, link_reads: 50, enable_reads: 20, ..SimConfig::default() });
    let pool = pool();
    let (nic, queues) = Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config(2)).expect("init");
    assert!(matches!(nic.link(), Link::Up { .. }));
    drop(queues);
    pool.check_leaks().expect("every buffer back");
}

#[test]
fn bad_configurations_are_refused_before_touching_the_device() {
    let model = Model::new(SimConfig::default());
    let pool = pool();
    let small = Pool::builder(256).hugepages(HugePages::Never).build().expect("pool");
    for (pool, config) in [
        (&pool, Config { queues: 0, ..config(1) }),
        (&pool, Config { queues: 65, ..config(1) }),
        (&pool, Config { rx_ring: 100, ..config(1) }),
        (&pool, Config { tx_ring: 16, ..config(1) }),
        (&small, config(4)),
    ] {
        let err = Ixgbe::init("sim0", model.mmio(), model.dma(), pool, config.clone()).expect_err("bad");
        assert!(matches!(err, InitError::BadConfig(_)), "{config:?}: {err:?}");
    }
    assert_eq!(model.stats().resets, 0);
}
