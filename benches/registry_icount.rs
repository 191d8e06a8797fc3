//! Instructions per registry lookup at 1, 10k and 100k entries, counted by `valgrind --tool=callgrind`.
//!
//! `cargo bench --bench registry_icount` (add `--features liburcu` for the liburcu reclaimer) runs this
//! binary under callgrind once with a million lookups of present keys and once with none, for each
//! reclaimer and table size, and reports `(I(N) - I(0)) / N`: the read side's code path, flat in the
//! number of entries if the table is doing its job. Without valgrind it says so and exits.

use std::hint::black_box;
use std::sync::Arc;

mod common;

use netchannel::rcu::{Qsbr, ReadSide, Reclaim};
use netchannel::registry::{HashKey, Registry, RegistryKey};

const LOOKUPS: u32 = 1_000_000;
const SIZES: [u32; 3] = [1, 10_000, 100_000];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key(u32);

impl RegistryKey for Key {
    fn hash64(&self, key: &HashKey) -> u64 {
        let x = (u64::from(self.0) ^ key.words()[0]).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ (x >> 31)
    }
}

#[inline(never)]
fn lookups<R: Reclaim>(domain: &R, entries: u32, count: u32) -> u64 {
    // A fixed seed: the counts depend on chain lengths, which depend on the seed.
    let reg = Arc::new(Registry::<Key, u64, R>::with_capacity_and_seed(domain.clone(), 0, 0x5eed));
    let regs: Vec<_> =
        (0..entries).map(|k| reg.register(Key(k), u64::from(k)).expect("distinct keys")).collect();
    let keys: Vec<Key> = (0..1024u32).map(|i| Key(i.wrapping_mul(2_654_435_761) % entries)).collect();
    let mut reader = domain.register();
    let mut sum = 0u64;
    for i in 0..count {
        let key = &keys[(i & 1023) as usize];
        sum = sum.wrapping_add(reg.lookup(&mut reader, black_box(key)).unwrap_or(0));
        if i & 31 == 31 {
            reader.quiescent(); // once per burst, as a channelizer does
        }
    }
    reader.offline();
    drop(regs);
    sum
}

fn child(reclaim: &str, entries: u32, count: u32) {
    let sum = match reclaim {
        "qsbr" => lookups(&Qsbr::new(), entries, count),
        #[cfg(feature = "liburcu")]
        "liburcu" => lookups(&netchannel::urcu::Urcu::new(), entries, count),
        other => panic!("unknown reclaimer {other}"),
    };
    println!("{sum}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let parse = |i: usize| args.get(i).and_then(|s| s.parse().ok()).expect("entries and lookups");
        child(&args[2], parse(3), parse(4));
        return;
    }
    if !common::have_valgrind() {
        println!("registry_icount: valgrind is not installed; skipping the instruction counts");
        return;
    }
    let reclaimers: &[&str] = if cfg!(feature = "liburcu") { &["qsbr", "liburcu"] } else { &["qsbr"] };
    println!("instructions per lookup (present keys, quiescent state every 32 lookups), {LOOKUPS} lookups");
    println!("| entries | {} |", reclaimers.join(" | "));
    println!("|---:|{}", "---:|".repeat(reclaimers.len()));
    for entries in SIZES {
        let cells: Vec<String> = reclaimers
            .iter()
            .map(|r| {
                let run = |n: u32| {
                    let args = [(*r).to_owned(), entries.to_string(), n.to_string()];
                    common::callgrind_instructions(&[], &args).unwrap_or_else(|e| panic!("{e}"))
                };
                let (full, empty) = (run(LOOKUPS), run(0));
                format!("{:.1}", (full - empty) as f64 / f64::from(LOOKUPS))
            })
            .collect();
        println!("| {entries} | {} |", cells.join(" | "));
    }
}
