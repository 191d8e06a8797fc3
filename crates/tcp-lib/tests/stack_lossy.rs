//! A byte-exact transfer both ways through a `FaultInjector` (drop, duplicate, reorder, corrupt,
//! delay) on virtual time.

mod common;

use std::time::Duration;

use common::{LossyRun, Rng, lossy, lossy_transfer};
use tcp_lib::tcp::State;

#[test]
fn transfer_survives_loss_reordering_duplication_and_corruption() {
    let mut rng = Rng(77);
    let ab = rng.bytes(1 << 20);
    let ba = rng.bytes(512 << 10);
    let LossyRun { a, b, client: c, got_ab, got_ba, faults: fs, elapsed } =
        lossy_transfer(11, lossy(0.005), &ab, &ba, |ca, _| ca.tcp.send_buffer = 128 * 1024);
    eprintln!("virtual time {elapsed:?}, faults {fs:?}, A {:?}", a.connection_stats(c));
    assert!(fs.tx.dropped > 10 && fs.rx.dropped > 10, "{fs:?}");
    assert!(fs.tx.corrupted + fs.rx.corrupted > 0, "{fs:?}");
    assert_eq!(got_ab.len(), ab.len(), "{fs:?} {:?}", a.connection_stats(c));
    assert!(got_ab == ab, "A->B bytes differ");
    assert!(got_ba == ba, "B->A bytes differ");
    let stats = a.connection_stats(c).unwrap();
    assert!(stats.retransmits > 0);
    // Each byte counted once as sent for the first time and once as received in order, however
    // often it went out.
    assert_eq!((stats.bytes_out, stats.bytes_in), (ab.len() as u64, ba.len() as u64));
    assert!(a.stats().rx_malformed + b.stats().rx_malformed > 0, "corrupted frames were caught");
    assert_eq!(a.state(c), Ok(State::Established));
    assert!(elapsed < Duration::from_secs(400), "{elapsed:?}");
}
