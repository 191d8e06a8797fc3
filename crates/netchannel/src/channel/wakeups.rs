//! Wakeup requests on several channels with one StoreLoad barrier.
//!
//! A consumer that sleeps on many channels at once (a core polling every input channel's eventfd
//! in one `poll(2)`) must ask each producer for a wakeup and re-check each ring after a StoreLoad
//! barrier (VJ's protocol; the store-buffering argument in the parent module's docs). The barrier
//! is `membarrier(2)` where the process has it, which interrupts every CPU running one of the
//! process's threads: paying it once per channel made a core's sleep entry cost N+1 of them. The
//! barrier orders *all* of this thread's earlier stores before *all* of its later loads, so one
//! suffices for the whole set: arm every channel, fence once, then re-check every channel.
//!
//! ```
//! use netchannel::channel::{Channel, WakeMode, WakeupBatch};
//!
//! let (mut tx_a, mut rx_a) = Channel::builder(8).wake(WakeMode::EventFd).build()?;
//! let (_tx_b, mut rx_b) = Channel::builder(8).wake(WakeMode::EventFd).build()?;
//! tx_a.push(7).unwrap();
//!
//! let mut batch = WakeupBatch::new();
//! assert!(batch.arm(&mut rx_a) && batch.arm(&mut rx_b));
//! let armed = batch.fence();
//! // `rx_a` has an item: do not sleep. Had both been idle, the caller would now poll both
//! // eventfds; the next push on either writes its eventfd.
//! assert!(!armed.idle(&mut rx_a));
//! assert!(armed.idle(&mut rx_b));
//! # Ok::<(), netchannel::channel::BuildError>(())
//! ```

use super::Consumer;
use crate::sys::Barrier;

/// The first step of a batched wakeup request: [`arm`](Self::arm) each consumer, then
/// [`fence`](Self::fence) once. [`Consumer::request_wakeup`] is a batch of one.
#[derive(Debug)]
#[must_use = "an armed wakeup needs the fence and the re-check before the caller may sleep"]
pub struct WakeupBatch {
    barrier: Barrier,
}

/// The second step: after the barrier, [`idle`](Self::idle) re-checks each consumer armed in the
/// batch. The caller may sleep only when every one of them is idle.
#[derive(Debug)]
pub struct ArmedWakeups {
    _fenced: (),
}

impl WakeupBatch {
    /// A batch using this process's barrier (`membarrier(2)` or the `SeqCst` fallback).
    pub fn new() -> Self {
        Self { barrier: Barrier::get() }
    }

    /// Asks `rx`'s producer for a wakeup on its next push and hands every popped slot back. Returns
    /// `false` in [`WakeMode::Poll`](super::WakeMode::Poll), where no wakeup will ever come (the
    /// caller must not sleep on this channel).
    pub fn arm(&mut self, rx: &mut Consumer) -> bool {
        rx.arm_wakeup()
    }

    /// The one StoreLoad barrier between every request [`arm`](Self::arm) stored and every re-check
    /// [`ArmedWakeups::idle`] loads; pairs with `Barrier::light` in each producer's wakeup check
    /// (store-buffering: either the consumer's re-check sees the push, or the producer sees the
    /// request and wakes it).
    pub fn fence(self) -> ArmedWakeups {
        self.barrier.heavy();
        ArmedWakeups { _fenced: () }
    }
}

impl Default for WakeupBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl ArmedWakeups {
    /// Whether `rx`, armed in the batch this came from, is still empty and its producer alive. A
    /// `false` means items are ready or the producer is gone: the caller must not sleep. (Called on
    /// a consumer that was not armed, the answer says nothing about a wakeup to come.)
    pub fn idle(&self, rx: &mut Consumer) -> bool {
        rx.idle_after_arming()
    }
}
