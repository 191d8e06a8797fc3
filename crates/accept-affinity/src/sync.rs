//! The synchronisation primitives the accept queue is built on, switched to loom's model-checked versions
//! under `--cfg loom` so the same waiting protocol runs in the model checker and in production.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

pub(crate) use std::sync::atomic::Ordering;

/// Locks `m`, ignoring poisoning: every critical section in this crate leaves its data consistent
/// before it can panic (they only push, pop and count), so a panic elsewhere must not wedge the queue.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
