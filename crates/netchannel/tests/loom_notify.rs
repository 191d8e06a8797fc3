//! loom models of [`netchannel::wake::Notify`]: a wakeup sent while the sleeper looks for work, or
//! between its finding none and its going to sleep, is never lost.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p netchannel --test loom_notify`. A lost
//! wakeup shows up as a loom deadlock: the sleeper blocked forever (`sleep(None)`) with the notifier
//! finished. The model is known to bite: replacing the compare-and-exchange from idle to
//! sleeping (the re-check) with a plain store makes `no_lost_wakeup` deadlock.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use netchannel::wake::Notify;

/// The sleeper's loop: take the wakeup, look for work, sleep; `notifiers` threads each queue one
/// item of work and notify. The sleeper must see every item. (Two notifiers multiply the
/// schedules past what CI can wait for, and add no interleaving of the word that one lacks: each
/// notifier's swap meets the sleeper's take or compare-and-exchange the same way.)
fn sleeper_sees_all(notifiers: usize) {
    loom::model(move || {
        let notify = Arc::new(Notify::new());
        let queued = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..notifiers)
            .map(|_| {
                let (notify, queued) = (Arc::clone(&notify), Arc::clone(&queued));
                thread::spawn(move || {
                    // Release: pairs with the sleeper's Acquire load (the work, then the wakeup).
                    queued.fetch_add(1, Ordering::Release);
                    notify.notify();
                })
            })
            .collect();
        let mut seen = 0;
        while seen < notifiers {
            notify.take();
            // Acquire: pairs with the notifiers' Release.
            seen = queued.load(Ordering::Acquire);
            if seen < notifiers {
                notify.sleep(None);
            }
        }
        for t in threads {
            t.join().unwrap();
        }
    });
}

#[test]
fn no_lost_wakeup() {
    sleeper_sees_all(1);
}
