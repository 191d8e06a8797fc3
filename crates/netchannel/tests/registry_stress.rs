//! Stress test of the signature registry: reader threads look keys up and announce quiescent states
//! (going offline now and then) while a writer registers, re-points and unregisters concurrently.
//!
//! Every value encodes `(key, generation)`; a reader checks that each value it sees belongs to the key
//! it looked up and was published for it (its generation is at most the key's last published one). At
//! the end, a barrier must leave nothing pending. Run for both reclaimers (the liburcu one with
//! `--features liburcu`). The operation count scales with `NETCHANNEL_STRESS_ITEMS` (default 1,000,000;
//! TSan runs use fewer):
//! `RUSTFLAGS="-Zsanitizer=thread" CARGO_TARGET_DIR=target/tsan TSAN_OPTIONS="halt_on_error=1"
//! cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu -p netchannel --test registry_stress`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use netchannel::rcu::{Qsbr, ReadSide, Reclaim};
use netchannel::registry::{HashKey, Registration, Registry, RegistryKey};

const KEYS: u32 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key(u32);

impl RegistryKey for Key {
    fn hash64(&self, key: &HashKey) -> u64 {
        let x = (u64::from(self.0) ^ key.words()[0]).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ (x >> 31)
    }
}

fn items() -> u64 {
    std::env::var("NETCHANNEL_STRESS_ITEMS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000)
}

fn value(key: u32, generation: u32) -> u64 {
    (u64::from(key) << 32) | u64::from(generation)
}

fn run<R: Reclaim>(domain: R, pending: impl Fn(&R) -> usize) {
    let n = items();
    let reg = Arc::new(Registry::<Key, u64, R>::with_capacity(domain.clone(), 1));
    let published: Arc<Vec<AtomicU32>> = Arc::new((0..KEYS).map(|_| AtomicU32::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (domain, reg, published, stop, lookups) = (
                domain.clone(),
                Arc::clone(&reg),
                Arc::clone(&published),
                Arc::clone(&stop),
                Arc::clone(&lookups),
            );
            std::thread::spawn(move || {
                let mut r = domain.register();
                let mut i = 0u64;
                let mut k = t * 17;
                // Relaxed: a stop flag.
                while !stop.load(Ordering::Relaxed) {
                    k = (k + 7) % KEYS;
                    if let Some(v) = reg.lookup(&mut r, &Key(k)) {
                        assert_eq!((v >> 32) as u32, k, "value of another key");
                        // Acquire: the writer stores the generation before publishing the node; we
                        // saw the node, so we see at least that generation. Pairs with the Release
                        // store in the writer.
                        let latest = published[k as usize].load(Ordering::Acquire);
                        assert!(
                            v & 0xFFFF_FFFF <= u64::from(latest),
                            "value never published: {v:#x} > {latest}"
                        );
                    }
                    i += 1;
                    if i.is_multiple_of(32) {
                        r.quiescent();
                    }
                    if i.is_multiple_of(4096) {
                        r.offline();
                        std::thread::yield_now();
                        r.online();
                    }
                }
                r.offline();
                // Relaxed: read after join.
                lookups.fetch_add(i, Ordering::Relaxed);
            })
        })
        .collect();

    let mut slots: Vec<Option<Registration<Key, u64, R>>> = (0..KEYS).map(|_| None).collect();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let k = u32::try_from(rng % u64::from(KEYS)).unwrap();
        let slot = &mut slots[k as usize];
        // Relaxed: only the writer stores.
        let generation = published[k as usize].load(Ordering::Relaxed) + 1;
        match slot {
            None => {
                // Release: before the node is published; pairs with the readers' Acquire load.
                published[k as usize].store(generation, Ordering::Release);
                *slot = Some(reg.register(Key(k), value(k, generation)).expect("not registered"));
            }
            Some(reg) if rng & 0x300 != 0 => {
                // Release: as above.
                published[k as usize].store(generation, Ordering::Release);
                reg.repoint(value(k, generation));
            }
            Some(_) => *slot = None,
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in readers {
        t.join().unwrap();
    }
    let live = slots.iter().filter(|s| s.is_some()).count();
    assert_eq!(reg.len(), live);
    drop(slots);
    assert!(reg.is_empty());
    domain.barrier();
    assert_eq!(pending(&domain), 0, "retired objects left after a barrier");
    eprintln!("{n} writer ops, {} lookups, {} buckets", lookups.load(Ordering::Relaxed), reg.buckets());
}

#[test]
fn qsbr_stress() {
    run(Qsbr::new(), Qsbr::pending);
}

#[cfg(feature = "liburcu")]
#[test]
fn liburcu_stress() {
    run(netchannel::urcu::Urcu::new(), netchannel::urcu::Urcu::pending);
}
