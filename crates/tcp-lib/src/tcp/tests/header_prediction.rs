//! Header prediction ([`Config::header_prediction`]) changes nothing but the speed: the same
//! transfer, over the same seeded faults, sends the same segments at the same (virtual) times
//! and ends in the same state with the fast path on and off.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::pair::{Faults, Pair, Trace, Transfer, any_config, any_faults, pair_config, pattern, run_pair};
use crate::tcp::{Config, Keepalive};

/// Asserts that both ends of two runs of the same events were in the same state after every
/// step (their [`digest`](crate::tcp::Connection::digest)s) and sent the same segments at the
/// same times, and that the second run predicted nothing.
fn assert_same(fast: &Pair, general: &Pair) {
    let (Some(a), Some(b)) = (&fast.trace, &general.trace) else { panic!("traced runs") };
    if let Some(i) = a.states.iter().zip(&b.states).position(|(x, y)| x != y) {
        panic!(
            "the ends differ after step {i}:\nfast path:\n{}\ngeneral:\n{}\nbefore it:\n{}",
            a.states[i],
            b.states[i],
            i.checked_sub(1).map_or("", |j| &a.states[j])
        );
    }
    assert_eq!(a.states.len(), b.states.len(), "steps");
    if let Some(i) = a.segments.iter().zip(&b.segments).position(|(x, y)| x != y) {
        panic!("segment {i} differs:\n  fast path: {:?}\n  general:   {:?}", a.segments[i], b.segments[i]);
    }
    assert_eq!(a.segments.len(), b.segments.len(), "segments sent");
    assert_eq!((general.a.stats().predicted, general.b.stats().predicted), (0, 0), "off means off");
}

/// `config` with header prediction on and off.
fn on_off(config: Config) -> [Config; 2] {
    [true, false].map(|header_prediction| Config { header_prediction, ..config })
}

/// Runs `t`'s transfer with header prediction on (as configured) and off at both ends, from
/// the same instant, and asserts that the two runs were the same ([`assert_same`]). Returns
/// the run with the fast path on.
fn both_ways(config: Config, faults: Faults, seed: u64, in_place: bool, t: impl Fn() -> Transfer) -> Pair {
    let deadline = Duration::from_secs(1200);
    let base = Instant::now();
    let [fast, general] = on_off(config).map(|c| {
        let mut p = Pair::connect_at(base, c, c, faults, seed);
        if in_place {
            p.deliver_in_place(seed);
        }
        p.trace = Some(Trace::default());
        run_pair(p, c.msl, &mut t(), deadline)
    });
    assert_same(&fast, &general);
    fast
}

/// A traced pair over a clean link, connected at `base`.
fn traced(base: Instant, config_a: Config, config_b: Config) -> Pair {
    let mut p = Pair::connect_at(base, config_a, config_b, Faults::clean(), 5);
    p.trace = Some(Trace::default());
    p
}

/// A bulk transfer over a clean link: the receiver takes nearly every data segment by the
/// fast path (all but those that carry the ACK of its own data, the FIN, and the first, which
/// arrives before the handshake's ACK moved the connection to ESTABLISHED on some runs).
#[test]
fn a_clean_bulk_transfer_is_predicted() {
    let p = both_ways(pair_config(), Faults::clean(), 3, false, || {
        Transfer::new(2_000_000, 0, vec![65536], 65536)
    });
    let b = p.b.stats();
    let data_segments = b.bytes_in.div_ceil(b.recv_mss as u64);
    assert!(
        b.predicted * 10 >= data_segments * 9,
        "{} of about {data_segments} data segments predicted",
        b.predicted
    );
    // Its ACKs carry no data, so the sender's segments are never predicted.
    assert_eq!(p.a.stats().predicted, 0);
}

/// With loss, the fast path stops while a hole is open (data is out of order, SACK blocks go
/// back) and resumes after; the sender, in recovery, never takes it.
#[test]
fn lossy_transfers_with_rack_agree() {
    let config = Config { rack: true, tail_loss_probe: true, ..pair_config() };
    for seed in 0..4 {
        let p = both_ways(config, Faults::lossy(), seed, seed % 2 == 0, || {
            Transfer::new(400_000, 30_000, vec![1000, 20_000, 7], 4000)
        });
        assert!(p.b.stats().predicted > 0, "seed {seed}: nothing predicted");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random faults, options and write sizes: the fast path and the general processing send
    /// the same segments.
    #[test]
    fn the_fast_path_sends_what_the_general_path_sends(
        seed in any::<u64>(),
        faults in any_faults(),
        ab in 0usize..150_000,
        ba in 0usize..40_000,
        chunks in proptest::collection::vec(1usize..20_000, 1..5),
        read in 1usize..20_000,
        base in any_config(),
        rack in any::<bool>(),
        delayed_ack in any::<bool>(),
        quick_acks in 0usize..20,
        keepalive in any::<bool>(),
        in_place in any::<bool>(),
    ) {
        let config = Config {
            rack,
            tail_loss_probe: rack,
            delayed_ack: delayed_ack.then_some(Duration::from_millis(40)),
            quick_acks,
            keepalive: keepalive.then_some(Keepalive {
                idle: Duration::from_millis(300),
                interval: Duration::from_millis(100),
                probes: 100,
            }),
            ..base
        };
        both_ways(config, faults, seed, in_place, || Transfer::new(ab, ba, chunks.clone(), read));
    }
}

/// A reader that stops: `b`'s window closes, `a` probes it, and the data that follows each
/// window update is predicted while the window it offers moves (the fast path takes the
/// window each segment carries, and never more data than the window: a probe byte past it
/// goes the general way). Meanwhile `b` writes a little now and then: `a` takes it by the fast
/// path between its probes, and that answers them as the general path's ACK processing does.
#[test]
fn a_slow_reader_agrees() {
    let base = Instant::now();
    let data = pattern(60_000, 1);
    let [fast, general] = on_off(pair_config()).map(|config| {
        let mut p = traced(base, config, Config { recv_buffer: 4096, ..config });
        let mut written = 0;
        let mut next = Duration::from_secs(2);
        let mut buf = [0u8; 700];
        assert!(!p.run_until(
            |p| {
                written += p.a.send(&data[written..]);
                if p.elapsed() >= next {
                    assert_eq!(p.b.send(&[7; 200]), 200);
                    next += Duration::from_millis(2500);
                }
                while p.a.recv(&mut buf) > 0 {}
                false
            },
            Duration::from_secs(20)
        ));
        if config.header_prediction {
            assert!(p.a.stats().predicted > 0, "a took nothing by the fast path");
        }
        let mut got = Vec::new();
        assert!(p.run_until(
            |p| {
                written += p.a.send(&data[written..]);
                let n = p.b.recv(&mut buf);
                got.extend_from_slice(&buf[..n]);
                got.len() == data.len()
            },
            Duration::from_secs(600)
        ));
        assert!(got == data);
        p
    });
    assert_same(&fast, &general);
    let b = fast.b.stats();
    assert!(b.predicted > 10, "{} predicted", b.predicted);
}

/// A short message, then bulk: the first full-sized segment the receiver sees is predicted, and
/// its estimate of the peer's MSS ([`Stats::recv_mss`](crate::tcp::Stats::recv_mss)) grows all
/// the same.
#[test]
fn a_short_message_then_bulk_agrees() {
    let base = Instant::now();
    let data = pattern(30_000, 2);
    let [fast, general] = on_off(pair_config()).map(|config| {
        let mut p = traced(base, config, config);
        assert_eq!(p.a.send(&data[..100]), 100);
        assert!(p.run_until(
            |p| p.a.stats().unacked_bytes == 0 && p.b.recv_queue() == 100,
            Duration::from_secs(5)
        ));
        let mut written = 100;
        let mut buf = [0u8; 4096];
        let mut got = 0;
        assert!(p.run_until(
            |p| {
                written += p.a.send(&data[written..]);
                got += p.b.recv(&mut buf);
                got == data.len()
            },
            Duration::from_secs(60)
        ));
        p
    });
    assert_same(&fast, &general);
    assert_eq!(fast.b.stats().recv_mss, fast.a.stats().send_mss);
}

/// Found by the proptest above (its regression file keeps the case): a tail loss probe that
/// found only data Nagle holds back resent the last segment with that unsent byte in it, without
/// moving SND.MAX; the peer's ACK of the byte was then refused as acknowledging what was never
/// sent, and with it every later segment of the peer's: the transfer stalled for good.
#[test]
fn a_tail_loss_probe_resends_nothing_past_snd_max() {
    let config = Config {
        window_scaling: false,
        timestamps: false,
        sack: true,
        delayed_ack: None,
        nodelay: false,
        congestion: crate::tcp::CongestionAlgorithm::NewReno,
        rack: true,
        tail_loss_probe: true,
        ..pair_config()
    };
    let faults = Faults {
        drop: 78,
        duplicate: 14,
        reorder: 20,
        corrupt: 0,
        delay: Duration::from_millis(1),
        reorder_spread: Duration::from_millis(2),
    };
    // One-byte writes and reads, as the proptest shrank it; `both_ways` runs the transfer to
    // its end (it stalled at 5840 of 7301 bytes) and compares the fast path with the general.
    both_ways(config, faults, 9_167_111_344_973_521_846, false, || Transfer::new(7301, 10105, vec![1], 1));
}
