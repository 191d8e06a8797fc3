//! A byte-exact transfer both ways through a `FaultInjector` (drop, duplicate, reorder, corrupt,
//! delay) on virtual time.

mod common;

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use common::{A_IP, B_IP, Rng, TICK, config};
use netchannel::dev::{DirectionConfig, FaultConfig, FaultInjector, Pair, VirtualClock};
use netchannel::pool::{HugePages, Pool};
use tcp_lib::stack::{Error, Stack};
use tcp_lib::tcp::State;

fn lossy() -> DirectionConfig {
    DirectionConfig {
        drop: 0.03,
        corrupt: 0.005,
        duplicate: 0.01,
        reorder: 0.02,
        reorder_by: 3,
        delay: Duration::from_millis(2),
        rate: None,
    }
}

#[test]
fn transfer_survives_loss_reordering_duplication_and_corruption() {
    let pool = Pool::builder(16 * 1024).hugepages(HugePages::Never).build().unwrap();
    let (pa, pb) = Pair::builder(&pool).capacity(4096).build().unwrap();
    let cache = pool.cache();
    let clock = VirtualClock::new();
    let faults = FaultConfig { seed: 11, rx: lossy(), tx: lossy(), max_held: 4096 };
    let mut ca = config(&pa, A_IP, 1);
    ca.tcp.send_buffer = 128 * 1024;
    let cb = config(&pb, B_IP, 2);
    let mut dev_a = FaultInjector::with_clock(pa, &pool, faults, clock.clone());
    let mut dev_b = pb;
    let start = Instant::now();
    let mut now = start;
    let mut a = Stack::new(ca, now);
    let mut b = Stack::new(cb, now);
    let l = b.listen(80).unwrap();
    let c = a.connect(SocketAddrV4::new(B_IP, 80)).unwrap();
    let mut rng = Rng(77);
    let ab = rng.bytes(1 << 20);
    let ba = rng.bytes(512 << 10);
    let (mut sent_ab, mut sent_ba) = (0, 0);
    let (mut got_ab, mut got_ba) = (Vec::new(), Vec::new());
    let mut s = None;
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..400_000 {
        a.poll(now, &mut dev_a, &cache).unwrap();
        b.poll(now, &mut dev_b, &cache).unwrap();
        now += TICK;
        clock.advance(TICK);
        s = s.or_else(|| b.accept(l));
        if sent_ab < ab.len()
            && let Ok(n) = a.send(c, &ab[sent_ab..])
        {
            sent_ab += n;
        }
        if let Some(s) = s {
            if sent_ba < ba.len()
                && let Ok(n) = b.send(s, &ba[sent_ba..])
            {
                sent_ba += n;
            }
            loop {
                match b.recv(s, &mut buf) {
                    Ok(n) if n > 0 => got_ab.extend_from_slice(&buf[..n]),
                    Ok(_) | Err(Error::WouldBlock) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        loop {
            match a.recv(c, &mut buf) {
                Ok(n) if n > 0 => got_ba.extend_from_slice(&buf[..n]),
                Ok(_) | Err(Error::WouldBlock) => break,
                Err(e) => panic!("{e}"),
            }
        }
        if got_ab.len() == ab.len() && got_ba.len() == ba.len() {
            break;
        }
    }
    let fs = dev_a.fault_stats();
    eprintln!("virtual time {:?}, faults {fs:?}, A {:?}", now - start, a.connection_stats(c));
    assert!(fs.tx.dropped > 10 && fs.rx.dropped > 10, "{fs:?}");
    assert!(fs.tx.corrupted + fs.rx.corrupted > 0, "{fs:?}");
    assert_eq!(got_ab.len(), ab.len(), "{fs:?} {:?}", a.connection_stats(c));
    assert!(got_ab == ab, "A->B bytes differ");
    assert!(got_ba == ba, "B->A bytes differ");
    assert!(a.connection_stats(c).unwrap().retransmits > 0);
    assert!(a.stats().rx_malformed + b.stats().rx_malformed > 0, "corrupted frames were caught");
    assert_eq!(a.state(c), Ok(State::Established));
    assert!(now - start < Duration::from_secs(400), "{:?}", now - start);
}
