//! The registry's read side against the usual ways of sharing a read-mostly map, in one run: the
//! signature registry with the pure-Rust QSBR reclaimer and (with `--features liburcu`) with liburcu,
//! `arc_swap::ArcSwap<HashMap>` and `RwLock<HashMap>`. Every contender hashes with the same keyed
//! `Signature::hash64`, so the comparison is of the synchronisation, not of hash functions.
//!
//! `registry_read/<contender>/<entries>`: one lookup of a present signature per iteration, one thread,
//! 1, 10k and 100k entries (the registry announces a quiescent state every 32 lookups, as a
//! channelizer does once per burst). `registry_read_with_writer/<contender>`: the same at 10k entries
//! while another thread (pinned to the other CPU) re-points one registered signature back and forth
//! 100,000 times a second: the steal/migrate pattern, at the same write rate for every contender.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

mod common;
use common::pin_to_cpu;

use arc_swap::ArcSwap;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use netchannel::channelizer::{ConsumerId, SignatureRegistry};
use netchannel::rcu::{Qsbr, ReadSide, Reclaim};
use netchannel::registry::HashKey;
use netchannel::signature::{Proto, Signature};

const SIZES: [u32; 3] = [1, 10_000, 100_000];
const SEED: u64 = 0x5eed_1234_abcd_9876;

fn sig(i: u32) -> Signature {
    let [_, _, a, b] = i.to_be_bytes();
    let port = u16::try_from(1024 + i % 50_000).expect("fits");
    Signature::new(
        Proto::Tcp,
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, a, b), 80)),
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 1, a, b), port)),
    )
    .expect("one family")
}

/// 1024 present keys spread over the table.
fn probe_keys(entries: u32) -> Vec<Signature> {
    (0..1024u32).map(|i| sig(i.wrapping_mul(2_654_435_761) % entries)).collect()
}

/// A `HashMap` key that hashes with `Signature::hash64`, so the anchors use the registry's hash.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Key(Signature);

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash64(&HashKey::from_seed(SEED)));
    }
}

/// Passes the one `u64` a `Key` writes straight through.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("Key only writes a u64");
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Clone, Copy, Default)]
struct Build;

impl BuildHasher for Build {
    type Hasher = PassThrough;
    fn build_hasher(&self) -> PassThrough {
        PassThrough::default()
    }
}

type Map = HashMap<Key, ConsumerId, Build>;

fn map(entries: u32) -> Map {
    (0..entries).map(|i| (Key(sig(i)), ConsumerId(i % 4))).collect()
}

/// Writes per second of every contender's writer: the same rate for all, so readers see the same
/// disturbance (a flat-out writer would run at each structure's own write speed instead). 100k/s is far
/// above what connection stealing and flow-group migration need.
const WRITES_PER_SEC: u32 = 100_000;

/// Runs `writer` `WRITES_PER_SEC` times a second on another thread (pinned to CPU 1) until the returned
/// guard is dropped.
struct Background(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Background {
    fn start(mut writer: impl FnMut() + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            pin_to_cpu(1);
            let period = Duration::from_secs(1) / WRITES_PER_SEC;
            let mut next = std::time::Instant::now();
            // Relaxed: a stop flag; the join orders everything else.
            while !flag.load(Ordering::Relaxed) {
                writer();
                next += period;
                while std::time::Instant::now() < next {
                    std::hint::spin_loop();
                }
            }
        });
        Self(stop, Some(handle))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // Relaxed: see `start`.
        self.0.store(true, Ordering::Relaxed);
        if let Some(h) = self.1.take() {
            h.join().expect("writer thread");
        }
    }
}

/// Times one lookup per iteration in `group`, cycling through `keys`; `lookup(key, i)` is the
/// contender's lookup of `key` in iteration `i`.
fn time_lookups(
    c: &mut Criterion,
    group: &str,
    id: BenchmarkId,
    keys: &[Signature],
    mut lookup: impl FnMut(&Signature, usize) -> Option<ConsumerId>,
) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    g.bench_function(id, |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = i.wrapping_add(1);
            lookup(black_box(&keys[i & 1023]), i)
        });
    });
    g.finish();
}

/// The registry's lookup, announcing a quiescent state every 32 lookups as a channelizer does once per
/// burst.
fn registry_lookup<'a, R: Reclaim>(
    registry: &'a SignatureRegistry<R>,
    reader: &'a mut R::Reader,
) -> impl FnMut(&Signature, usize) -> Option<ConsumerId> + 'a {
    move |key, i| {
        let hit = registry.lookup(reader, key);
        if i & 31 == 0 {
            reader.quiescent();
        }
        hit
    }
}

fn bench_registry<R: Reclaim>(c: &mut Criterion, name: &str, domain: &R) {
    for entries in SIZES {
        let registry =
            Arc::new(SignatureRegistry::with_capacity_and_seed(domain.clone(), entries as usize, SEED));
        let regs: Vec<_> =
            (0..entries).map(|i| registry.register(sig(i), ConsumerId(i % 4)).expect("new")).collect();
        let mut reader = domain.register();
        let id = BenchmarkId::new(name, entries);
        time_lookups(c, "registry_read", id, &probe_keys(entries), registry_lookup(&registry, &mut reader));
        reader.offline();
        drop(regs);
    }
}

fn bench_registry_with_writer<R: Reclaim>(c: &mut Criterion, name: &str, domain: &R) {
    let registry = Arc::new(SignatureRegistry::with_capacity_and_seed(domain.clone(), 10_000, SEED));
    let regs: Vec<_> =
        (1..10_000).map(|i| registry.register(sig(i), ConsumerId(i % 4)).expect("new")).collect();
    let stolen = registry.register(sig(0), ConsumerId(0)).expect("new");
    let _writer = Background::start({
        let mut stolen = stolen;
        let mut to = 0u32;
        move || {
            to ^= 1;
            let _ = stolen.repoint(ConsumerId(to));
        }
    });
    let mut reader = domain.register();
    let id = BenchmarkId::from_parameter(name);
    let lookup = registry_lookup(&registry, &mut reader);
    time_lookups(c, "registry_read_with_writer", id, &probe_keys(10_000), lookup);
    reader.offline();
    drop(regs);
}

fn registry_read(c: &mut Criterion) {
    pin_to_cpu(0);
    bench_registry(c, "qsbr", &Qsbr::new());
    #[cfg(feature = "liburcu")]
    bench_registry(c, "liburcu", &netchannel::urcu::Urcu::new());
    for entries in SIZES {
        let keys = probe_keys(entries);
        let shared = ArcSwap::from_pointee(map(entries));
        time_lookups(c, "registry_read", BenchmarkId::new("arc-swap", entries), &keys, |k, _| {
            shared.load().get(&Key(*k)).copied()
        });
        let locked = RwLock::new(map(entries));
        time_lookups(c, "registry_read", BenchmarkId::new("rwlock", entries), &keys, |k, _| {
            locked.read().expect("not poisoned").get(&Key(*k)).copied()
        });
    }
}

fn registry_read_with_writer(c: &mut Criterion) {
    pin_to_cpu(0);
    bench_registry_with_writer(c, "qsbr", &Qsbr::new());
    #[cfg(feature = "liburcu")]
    bench_registry_with_writer(c, "liburcu", &netchannel::urcu::Urcu::new());
    let keys = probe_keys(10_000);
    {
        let shared = Arc::new(ArcSwap::from_pointee(map(10_000)));
        let _writer = Background::start({
            let shared = Arc::clone(&shared);
            let mut to = 0u32;
            // arc-swap's write side: copy the map, change one entry, publish.
            move || {
                to ^= 1;
                shared.rcu(|m| {
                    let mut m = Map::clone(m);
                    m.insert(Key(sig(0)), ConsumerId(to));
                    m
                });
            }
        });
        let id = BenchmarkId::from_parameter("arc-swap");
        time_lookups(c, "registry_read_with_writer", id, &keys, |k, _| shared.load().get(&Key(*k)).copied());
    }
    {
        let locked = Arc::new(RwLock::new(map(10_000)));
        let _writer = Background::start({
            let locked = Arc::clone(&locked);
            let mut to = 0u32;
            move || {
                to ^= 1;
                locked.write().expect("not poisoned").insert(Key(sig(0)), ConsumerId(to));
            }
        });
        let id = BenchmarkId::from_parameter("rwlock");
        time_lookups(c, "registry_read_with_writer", id, &keys, |k, _| {
            locked.read().expect("not poisoned").get(&Key(*k)).copied()
        });
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = registry_read, registry_read_with_writer
}
criterion_main!(benches);
