//! Validation of the Affinity-Accept simulator (`accept_affinity::sim`): conservation at every step,
//! M/G/1 queueing delays with stealing off and no hog, determinism, and the direction of the paper's
//! result (Affinity beats static hashing under a CPU hog). Sized (`SimConfig::quick`) to run in a few
//! seconds in debug builds.

use std::time::Duration;

use accept_affinity::sim::{self, SimConfig, Variant, pollaczek_khinchine};

/// Every policy, with the hog: the simulator checks `arrived = accepted + dropped + queued` after every
/// event (and panics on a violation); every connection ends, each within the give-up time.
#[test]
fn conservation_at_every_step_for_all_policies() {
    let cfg = SimConfig { verify: true, ..SimConfig::quick() };
    for v in Variant::ALL {
        let r = sim::run(&cfg, v);
        assert_eq!(r.conservation_checks, r.events, "{v}: a check after every event");
        assert!(r.events > 50_000, "{v}: {} events", r.events);
        let binned: u64 = r.series.iter().map(|b| b.connections).sum();
        assert_eq!(binned, r.connections, "{v}: every connection finished and was counted");
        assert!(r.series.iter().all(|b| b.p90 <= 10.0 + 1e-9), "{v}: no latency above the give-up time");
        assert!(r.hog_completion.is_some(), "{v}: the hog finished");
    }
}

/// Stealing off, no hog, one request per connection and no RX cost: each core's accept queue is an
/// M/G/1 queue (Poisson arrivals thinned by the NIC's static table, service = accept + one request,
/// FIFO, one server). Its mean queueing delay must match Pollaczek-Khinchine for the arrival rate and
/// service-time moments the run produced.
#[test]
fn per_core_queues_match_pollaczek_khinchine() {
    let mut cfg = SimConfig {
        cores: 8,
        backlog: 8 * 4096,
        batches: vec![1],
        hog: None,
        duration: Duration::from_secs(30),
        verify: false,
        ..SimConfig::quick()
    };
    cfg.costs.rx_handshake_us = 0.0;
    cfg.costs.rx_request_us = 0.0;
    let r = sim::run(&cfg, Variant::AffinityNoStealing);
    assert_eq!(r.dropped, 0);
    assert!((r.local_fraction - 1.0).abs() < 1e-12, "no stealing: every accept is local");
    let duration = cfg.duration.as_secs_f64();
    let (mut sim_total, mut pk_total, mut n_total) = (0.0, 0.0, 0.0);
    for (c, core) in r.cores.iter().enumerate() {
        assert_eq!(core.enqueued, core.accepted);
        assert_eq!(core.local_waits, core.accepted);
        let n = core.accept_jobs as f64;
        let lambda = core.enqueued as f64 / duration;
        let es = core.accept_work_sum / n;
        let es2 = core.accept_work_sq_sum / n;
        let rho = lambda * es;
        assert!((0.4..0.6).contains(&rho), "core {c}: utilisation {rho}");
        let pk = pollaczek_khinchine(lambda, es, es2);
        let measured = core.local_wait_sum / core.local_waits as f64;
        let err = (measured - pk) / pk;
        println!(
            "core {c}: lambda {lambda:.1}/s rho {rho:.3} wait {:.1} us, P-K {:.1} us ({:+.1}%)",
            measured * 1e6,
            pk * 1e6,
            err * 100.0
        );
        assert!(err.abs() < 0.15, "core {c}: mean wait {measured} vs P-K {pk}");
        sim_total += core.local_wait_sum;
        pk_total += pk * core.local_waits as f64;
        n_total += core.local_waits as f64;
    }
    let err = (sim_total - pk_total) / pk_total;
    println!(
        "all cores: wait {:.1} us, P-K {:.1} us ({:+.1}%)",
        sim_total / n_total * 1e6,
        pk_total / n_total * 1e6,
        err * 100.0
    );
    assert!(err.abs() < 0.05, "mean wait over all cores off by {:.1}%", err * 100.0);
}

/// The same configuration and seed give identical results; another seed gives different ones.
#[test]
fn same_seed_same_results() {
    let cfg = SimConfig { verify: false, ..SimConfig::quick() };
    let a = sim::run(&cfg, Variant::Affinity);
    let b = sim::run(&cfg, Variant::Affinity);
    assert_eq!(a, b);
    let c = sim::run(&SimConfig { seed: cfg.seed + 1, ..cfg }, Variant::Affinity);
    assert_ne!(a.connections, c.connections);
}

/// The paper's result in direction, with margins: under the hog, Affinity-Accept keeps the median near
/// the balanced one, has a much lower 90th percentile and fewer timeouts than static hashing, and the
/// hog finishes sooner; Affinity keeps almost every accept local when balanced.
#[test]
fn affinity_beats_static_hashing_under_the_hog() {
    let cfg = SimConfig { verify: false, ..SimConfig::quick() };
    let balanced = sim::run(&cfg.balanced(), Variant::Affinity);
    let affinity = sim::run(&cfg, Variant::Affinity);
    let hashed = sim::run(&cfg, Variant::StaticHash);
    println!("balanced {balanced:?}");
    println!(
        "affinity p50 {} p90 {} timeouts {} hog {:?}",
        affinity.p50, affinity.p90, affinity.timeouts, affinity.hog_completion
    );
    println!(
        "hashed   p50 {} p90 {} timeouts {} hog {:?}",
        hashed.p50, hashed.p90, hashed.timeouts, hashed.hog_completion
    );
    assert!(balanced.local_fraction >= 0.95, "balanced local fraction {}", balanced.local_fraction);
    assert!(
        affinity.p50 <= 1.15 * balanced.p50,
        "Affinity median {} vs balanced {}",
        affinity.p50,
        balanced.p50
    );
    assert!(hashed.p90 >= 2.0 * affinity.p90, "p90: static {} vs Affinity {}", hashed.p90, affinity.p90);
    assert!(
        hashed.timeouts >= 10 && hashed.timeouts >= 4 * affinity.timeouts.max(1),
        "timeouts: static {} vs Affinity {}",
        hashed.timeouts,
        affinity.timeouts
    );
    assert!(affinity.hog_completion < hashed.hog_completion);
    assert!(affinity.steals_per_s.is_some_and(|s| s > 0.0) && affinity.migrations_per_s > 0.0);
    assert_eq!(hashed.steals_per_s, Some(0.0));
}

/// With (almost) no web load the hog runs alone and finishes in its solo time; with the web server at
/// 50% load and no balancer it takes longer.
#[test]
fn hog_alone_takes_its_solo_time() {
    let cfg = SimConfig { load: 1e-4, verify: true, ..SimConfig::quick() };
    let r = sim::run(&cfg, Variant::Affinity);
    let solo = r.hog_solo.expect("a hog");
    let took = r.hog_completion.expect("it finished");
    assert!((took - solo).abs() < 0.01, "alone: {took} s vs solo {solo} s");
    let loaded = sim::run(&SimConfig { verify: false, ..SimConfig::quick() }, Variant::AffinityNoStealing);
    assert!(loaded.hog_completion.expect("it finished") > 1.2 * solo);
}
