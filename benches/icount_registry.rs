//! Instruction counts of a registry lookup with 1, 10k and 100k entries registered.
//!
//! Run with `cargo bench -p netchannels-benches --bench icount_registry` (gungraun under callgrind; `scripts/icount.sh` runs
//! it and checks the counts against `benches/icount/baseline.tsv`). Each benchmark,
//! `lookup/qsbr/entries<E>_n4096`, does [`LOOKUPS`] lookups of present keys through a QSBR reader,
//! announcing a quiescent state once every 32 lookups as a channelizer does once per burst; the
//! instructions per lookup are the count divided by [`LOOKUPS`] (the id's `_n4096` suffix). A flat
//! count across the sizes says the table keeps its chains short.
//!
//! Building the table (a fixed hash seed: the chain lengths, and so the counts, depend on it), the
//! keys and the reader happens in gungraun's `setup`, which is not counted; the state is returned, so
//! its teardown is not counted either. The liburcu reclaimer (feature `liburcu`) is not measured here:
//! the old hand-written harness measured it beside QSBR, and `benches/registry.rs` still times it.
#![allow(missing_docs, reason = "gungraun's macros generate undocumented public modules and functions")]

use std::hint::black_box;
use std::sync::Arc;

use gungraun::{library_benchmark, library_benchmark_group, main};
use netchannel::rcu::{Qsbr, QsbrReader, ReadSide, Reclaim};
use netchannel::registry::{HashKey, Registration, Registry, RegistryKey};

/// Lookups per benchmark run.
const LOOKUPS: usize = 4096;

/// A registry key: a `u32` hashed with the registry's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key(u32);

impl RegistryKey for Key {
    fn hash64(&self, key: &HashKey) -> u64 {
        let x = (u64::from(self.0) ^ key.words()[0]).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ (x >> 31)
    }
}

/// A populated registry, the keys to look up and the reader that looks them up.
struct Table {
    registry: Arc<Registry<Key, u64, Qsbr>>,
    registrations: Vec<Registration<Key, u64, Qsbr>>,
    keys: Vec<Key>,
    reader: QsbrReader,
}

impl Drop for Table {
    fn drop(&mut self) {
        self.reader.offline();
        // The process ends right after the benchmark: skip unregistering 100k entries one by one.
        std::mem::forget(std::mem::take(&mut self.registrations));
    }
}

/// A registry of `entries` keys and [`LOOKUPS`] present keys spread over them.
fn table(entries: u32) -> Table {
    let domain = Qsbr::new();
    let registry = Arc::new(Registry::with_capacity_and_seed(domain.clone(), 0, 0x5eed));
    let registrations =
        (0..entries).map(|k| registry.register(Key(k), u64::from(k)).expect("distinct keys")).collect();
    let keys = (0u32..).take(LOOKUPS).map(|i| Key(i.wrapping_mul(2_654_435_761) % entries)).collect();
    Table { registry, registrations, keys, reader: domain.register() }
}

#[library_benchmark]
#[bench::entries1_n4096(args = (1), setup = table)]
#[bench::entries10k_n4096(args = (10_000), setup = table)]
#[bench::entries100k_n4096(args = (100_000), setup = table)]
fn qsbr(mut t: Table) -> (Table, u64) {
    let mut sum = 0u64;
    for (i, key) in t.keys.iter().enumerate() {
        sum = sum.wrapping_add(t.registry.lookup(&mut t.reader, black_box(key)).unwrap_or(0));
        if i % 32 == 31 {
            t.reader.quiescent();
        }
    }
    (t, sum)
}

library_benchmark_group!(name = lookup; benchmarks = qsbr);

main!(library_benchmark_groups = lookup);
