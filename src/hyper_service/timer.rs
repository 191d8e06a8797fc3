//! A [`hyper::rt::Timer`] on the core's clock, for hyper's `header_read_timeout`.
//!
//! hyper asks for `Timer + Send + Sync + 'static` and sleeps that are `Send + Sync`; the core's
//! own [`Sleep`](netchannel_runtime::Sleep) is neither (it holds the core's `Rc` handle and lives
//! `'c`). So a [`CoreSleep`] holds only its deadline and its key: it registers its waker in a
//! table of the thread that polls it (a thread-local: hyper's connection futures never leave their
//! core's thread, the executor being a `LocalExecutor`), and one task per core, [`drive`], sleeps
//! on the core's clock ([`AsyncCore::sleep_until`]) until the table's earliest deadline, waking the
//! sleeps that are due. A sleep leaves the table when it fires or is dropped, so the table holds
//! only the sleeps alive (one per connection reading a request head).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use netchannel_runtime::AsyncCore;

/// A core's pending hyper sleeps, and its driver.
#[derive(Default)]
struct Table {
    /// Waker by (deadline, id).
    pending: BTreeMap<(Instant, u64), Waker>,
    next_id: u64,
    /// The driver's waker, and the deadline it sleeps until.
    driver: Option<Waker>,
    target: Option<Instant>,
    /// An earlier deadline came since the driver last looked.
    poked: bool,
}

thread_local! {
    static TABLE: RefCell<Table> = RefCell::default();
}

/// hyper's timer on the core's clock (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct CoreTimer;

impl hyper::rt::Timer for CoreTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(CoreSleep { deadline, key: None })
    }
}

/// A sleep of [`CoreTimer`]: `Send + Sync`, its waker in its thread's table.
#[derive(Debug)]
pub(super) struct CoreSleep {
    deadline: Instant,
    /// Its key in the table while registered.
    key: Option<(Instant, u64)>,
}

impl Future for CoreSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            self.unregister();
            return Poll::Ready(());
        }
        let deadline = self.deadline;
        let key = self.key;
        let registered = TABLE.with(|t| {
            let mut t = t.borrow_mut();
            if let Some(w) = key.and_then(|k| t.pending.get_mut(&k)) {
                w.clone_from(cx.waker());
                return key;
            }
            let k = (deadline, t.next_id);
            t.next_id = t.next_id.wrapping_add(1);
            t.pending.insert(k, cx.waker().clone());
            if t.target.is_none_or(|target| deadline < target) {
                t.poked = true;
                if let Some(driver) = &t.driver {
                    driver.wake_by_ref();
                }
            }
            Some(k)
        });
        self.key = registered;
        Poll::Pending
    }
}

impl CoreSleep {
    fn unregister(&mut self) {
        if let Some(key) = self.key.take() {
            // At thread exit the table may be gone already: nothing to remove then.
            let _ = TABLE.try_with(|t| t.borrow_mut().pending.remove(&key));
        }
    }
}

impl Drop for CoreSleep {
    fn drop(&mut self) {
        self.unregister();
    }
}

impl hyper::rt::Sleep for CoreSleep {}

/// Wakes the due sleeps of this thread's table; returns the next deadline.
fn fire(now: Instant) -> Option<Instant> {
    let due: Vec<Waker> = TABLE.with(|t| {
        let mut t = t.borrow_mut();
        let later = t.pending.split_off(&(now, u64::MAX));
        let due = std::mem::replace(&mut t.pending, later);
        due.into_values().collect()
    });
    for waker in due {
        waker.wake();
    }
    TABLE.with(|t| t.borrow().pending.first_key_value().map(|(&(at, _), _)| at))
}

/// The core's timer task: wakes [`CoreSleep`]s when they are due, sleeping on the core's clock
/// until the earliest (or until an earlier one is registered). Runs until the core drops it.
pub(super) async fn drive(core: AsyncCore<'_>) {
    loop {
        let next = fire(Instant::now());
        let mut sleep = next.map(|at| core.sleep_until(at));
        std::future::poll_fn(|cx| {
            let poked = TABLE.with(|t| {
                let mut t = t.borrow_mut();
                t.driver = Some(cx.waker().clone());
                t.target = next;
                std::mem::take(&mut t.poked)
            });
            if poked {
                return Poll::Ready(());
            }
            match sleep.as_mut() {
                Some(s) => Pin::new(s).poll(cx),
                None => Poll::Pending,
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn pending() -> usize {
        TABLE.with(|t| t.borrow().pending.len())
    }

    /// Sleeps enter their thread's table once however often polled, the due ones are woken and
    /// leave it, a dropped one leaves it, and an earlier deadline pokes the driver.
    #[test]
    fn sleeps_register_fire_and_leave() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let now = Instant::now();
        let mut a = Box::pin(CoreSleep { deadline: now + Duration::from_secs(60), key: None });
        let mut b = Box::pin(CoreSleep { deadline: now + Duration::from_secs(120), key: None });
        assert!(a.as_mut().poll(&mut cx).is_pending());
        assert!(TABLE.with(|t| std::mem::take(&mut t.borrow_mut().poked)), "the first deadline pokes");
        assert!(b.as_mut().poll(&mut cx).is_pending());
        assert!(a.as_mut().poll(&mut cx).is_pending());
        assert_eq!(pending(), 2);
        assert_eq!(fire(now + Duration::from_secs(90)), Some(now + Duration::from_secs(120)));
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "only the due one woken");
        assert_eq!(pending(), 1);
        drop(b);
        assert_eq!(pending(), 0, "a dropped sleep leaves the table");
        drop(a);
        let mut done = Box::pin(CoreSleep { deadline: now, key: None });
        assert!(done.as_mut().poll(&mut cx).is_ready());
        assert_eq!(pending(), 0);
    }
}
