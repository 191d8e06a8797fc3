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
        state.write_u64(self.0.hash64(SEED));
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

fn bench_registry<R: Reclaim>(c: &mut Criterion, name: &str, domain: &R) {
    for entries in SIZES {
        let registry =
            Arc::new(SignatureRegistry::with_capacity_and_seed(domain.clone(), entries as usize, SEED));
        let regs: Vec<_> =
            (0..entries).map(|i| registry.register(sig(i), ConsumerId(i % 4)).expect("new")).collect();
        let keys = probe_keys(entries);
        let mut reader = domain.register();
        let mut group = c.benchmark_group("registry_read");
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new(name, entries), |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = i.wrapping_add(1);
                let hit = registry.lookup(&mut reader, black_box(&keys[i & 1023]));
                if i & 31 == 0 {
                    reader.quiescent();
                }
                hit
            });
        });
        group.finish();
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
    let keys = probe_keys(10_000);
    let mut reader = domain.register();
    let mut group = c.benchmark_group("registry_read_with_writer");
    group.throughput(Throughput::Elements(1));
    group.bench_function(name, |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = i.wrapping_add(1);
            let hit = registry.lookup(&mut reader, black_box(&keys[i & 1023]));
            if i & 31 == 0 {
                reader.quiescent();
            }
            hit
        });
    });
    group.finish();
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
        let locked = RwLock::new(map(entries));
        let mut group = c.benchmark_group("registry_read");
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new("arc-swap", entries), |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = i.wrapping_add(1);
                shared.load().get(&Key(*black_box(&keys[i & 1023]))).copied()
            });
        });
        group.bench_function(BenchmarkId::new("rwlock", entries), |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = i.wrapping_add(1);
                locked.read().expect("not poisoned").get(&Key(*black_box(&keys[i & 1023]))).copied()
            });
        });
        group.finish();
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
        let mut group = c.benchmark_group("registry_read_with_writer");
        group.throughput(Throughput::Elements(1));
        group.bench_function("arc-swap", |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = i.wrapping_add(1);
                shared.load().get(&Key(*black_box(&keys[i & 1023]))).copied()
            });
        });
        group.finish();
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
        let mut group = c.benchmark_group("registry_read_with_writer");
        group.throughput(Throughput::Elements(1));
        group.bench_function("rwlock", |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = i.wrapping_add(1);
                locked.read().expect("not poisoned").get(&Key(*black_box(&keys[i & 1023]))).copied()
            });
        });
        group.finish();
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
