//! loom models of the registry's publish/reclaim protocol under the pure-Rust QSBR domain.
//!
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=3 cargo test
//! --release -p netchannel --test loom_registry`. Node entries live in loom-tracked cells and a node's
//! destruction writes its cell, so a lookup that reads a node freed without a grace period is reported
//! as a causality violation (`broken_reclamation_is_caught` shows the model bites). Readers register
//! inside their thread (readers are `!Send`).
#![cfg(loom)]

use std::sync::Arc;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use netchannel::rcu::{Qsbr, ReadSide, Reclaim};
use netchannel::registry::{HashKey, Registry, RegistryKey};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key(u32);

impl RegistryKey for Key {
    fn hash64(&self, _key: &HashKey) -> u64 {
        u64::from(self.0)
    }
}

type Reg = Registry<Key, u32, Qsbr>;

/// A reader looks up twice around a quiescent state while the writer re-points the entry and waits
/// for the old node to be freed: every lookup sees the old or the new value, and no node is read after
/// it was freed.
fn repoint_model(broken: bool) {
    loom::model(move || {
        let q = Qsbr::new();
        let reg = Arc::new(Reg::with_capacity_and_seed(q.clone(), 1, 0));
        if broken {
            reg.loom_break_reclamation();
        }
        let mut conn = reg.register(Key(1), 10).unwrap();
        let (q2, reg2) = (q.clone(), Arc::clone(&reg));
        let reader = thread::spawn(move || {
            let mut r = q2.register();
            let a = reg2.lookup(&mut r, &Key(1));
            assert!(matches!(a, Some(10 | 20)), "{a:?}");
            r.quiescent();
            let b = reg2.lookup(&mut r, &Key(1));
            assert!(matches!(b, Some(10 | 20)), "{b:?}");
        });
        conn.repoint(20);
        q.barrier();
        reader.join().unwrap();
        assert_eq!(q.pending(), 0);
    });
}

#[test]
fn repoint_then_reclaim() {
    repoint_model(false);
}

/// The deliberately broken variant (nodes destroyed at retirement, without a grace period) must be
/// reported by loom.
#[test]
#[should_panic(expected = "Causality violation")]
fn broken_reclamation_is_caught() {
    repoint_model(true);
}

/// Unregistering while a reader looks up: the reader sees the entry or nothing, never a freed node.
#[test]
fn unregister_then_reclaim() {
    loom::model(|| {
        let q = Qsbr::new();
        let reg = Arc::new(Reg::with_capacity_and_seed(q.clone(), 1, 0));
        let conn = reg.register(Key(1), 10).unwrap();
        let (q2, reg2) = (q.clone(), Arc::clone(&reg));
        let reader = thread::spawn(move || {
            let mut r = q2.register();
            let a = reg2.lookup(&mut r, &Key(1));
            assert!(matches!(a, Some(10) | None), "{a:?}");
        });
        drop(conn);
        q.barrier();
        reader.join().unwrap();
    });
}

/// Growing the table (a second registration in a table with room for one entry: two buckets) while a
/// reader looks the first key up: the reader never misses it, and the old table and its nodes are
/// reclaimed safely.
#[test]
fn grow_then_reclaim() {
    loom::model(|| {
        let q = Qsbr::new();
        let reg = Arc::new(Reg::with_capacity_and_seed(q.clone(), 1, 0));
        let _a = reg.register(Key(1), 10).unwrap();
        let (q2, reg2) = (q.clone(), Arc::clone(&reg));
        let reader = thread::spawn(move || {
            let mut r = q2.register();
            assert_eq!(reg2.lookup(&mut r, &Key(1)), Some(10));
        });
        let _b = reg.register(Key(2), 20).unwrap();
        assert_eq!(reg.buckets(), 4);
        q.barrier();
        reader.join().unwrap();
    });
}

/// After `repoint` and `synchronize` return, no lookup returns the old value: the reader counts the
/// old values it sees (before each quiescent state); the count the writer reads right after the grace
/// period is final.
#[test]
fn no_old_value_after_synchronize() {
    loom::model(|| {
        let q = Qsbr::new();
        let reg = Arc::new(Reg::with_capacity_and_seed(q.clone(), 1, 0));
        let mut conn = reg.register(Key(1), 10).unwrap();
        let old_seen = Arc::new(AtomicUsize::new(0));
        let (q2, reg2, seen2) = (q.clone(), Arc::clone(&reg), Arc::clone(&old_seen));
        let reader = thread::spawn(move || {
            let mut r = q2.register();
            for _ in 0..2 {
                if reg2.lookup(&mut r, &Key(1)) == Some(10) {
                    // Relaxed: ordered before the writer's read by our quiescent state.
                    seen2.fetch_add(1, Ordering::Relaxed);
                }
                r.quiescent();
            }
        });
        conn.repoint(20);
        q.synchronize();
        // Relaxed: the grace period orders the reader's increments before this load.
        let at_grace = old_seen.load(Ordering::Relaxed);
        reader.join().unwrap();
        assert_eq!(old_seen.load(Ordering::Relaxed), at_grace);
    });
}
