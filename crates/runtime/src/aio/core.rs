//! The loop that drives a core's executor and stack together ([`AsyncCore::block_on`]), and the
//! [`AsyncCore`] methods that make listeners, connections and timers.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use netchannel::wake::Notify;

use super::handle::AsyncCore;
use super::stream::{AsyncListener, AsyncStream, Connect};
use super::timer::Sleep;
use crate::core::{Core, Stopping};
use crate::idle::NAP;

/// How long a core with a task waiting in `accept` sleeps at most before it looks at the accept
/// queue again (other cores queue connections there, and a steal completes through the handoff
/// channel), as the blocking `accept` does.
const ACCEPT_RECHECK: Duration = Duration::from_millis(1);

/// Most tasks a core runs before it polls its stack again.
const TASK_BATCH: usize = 200;

/// The executor's waker: the core's wakeup word.
struct CoreWake(Arc<Notify>);

impl Wake for CoreWake {
    fn wake(self: Arc<Self>) {
        self.0.notify();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.notify();
    }
}

impl<'c> AsyncCore<'c> {
    /// Listens on `port` of this core's stack with Affinity-Accept across the cores (as
    /// [`Core::listen`](crate::Core::listen)).
    ///
    /// # Errors
    ///
    /// As [`Core::listen`](crate::Core::listen).
    pub fn listen(&self, port: u16) -> io::Result<AsyncListener<'c>> {
        let listener = Core::listen_with(&self.inner.local, &self.inner.iface, port)?;
        listener.set_nonblocking(true);
        Ok(AsyncListener::new(self.clone(), listener))
    }

    /// Opens a connection to `addr` from this core's stack; completes once it is established.
    ///
    /// # Errors
    ///
    /// What fails at once (no route, no free port), the handshake's failure (refused, timed out
    /// by the stack's SYN retries), [`Stopping`].
    pub async fn connect(&self, addr: impl Into<SocketAddr>) -> io::Result<AsyncStream<'c>> {
        Connect::new(self.clone(), addr.into())?.await
    }

    /// As [`connect`](Self::connect), failing with [`io::ErrorKind::TimedOut`] when the handshake
    /// has not completed within `timeout` (the half-open connection is aborted).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect), and the timeout.
    pub async fn connect_timeout(
        &self,
        addr: impl Into<SocketAddr>,
        timeout: Duration,
    ) -> io::Result<AsyncStream<'c>> {
        let mut connect = pin!(Connect::new(self.clone(), addr.into())?);
        let mut sleep = pin!(self.sleep(timeout));
        std::future::poll_fn(|cx| {
            if let Poll::Ready(done) = connect.as_mut().poll(cx) {
                return Poll::Ready(done);
            }
            match sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "connection timed out")))
                }
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// A future that completes `duration` from now, on the stack's clock.
    pub fn sleep(&self, duration: Duration) -> Sleep<'c> {
        self.sleep_until(Instant::now() + duration)
    }

    /// A future that completes at `deadline`.
    pub fn sleep_until(&self, deadline: Instant) -> Sleep<'c> {
        Sleep::new(self.clone(), deadline)
    }

    /// Drives the core until `future` completes: the executor's runnable tasks, the stack, the
    /// timers, and sleeping on the device and the core's wakeup when nothing is to be done (see
    /// the `aio` module's documentation in the source).
    ///
    /// # Errors
    ///
    /// The device's errors (a failing device ends the core).
    pub fn block_on<F: Future>(&self, future: F) -> io::Result<F::Output> {
        let inner = &*self.inner;
        let wake = Arc::clone(&inner.local.wake);
        let waker = Waker::from(Arc::new(CoreWake(Arc::clone(&wake))));
        let mut cx = Context::from_waker(&waker);
        let executor = inner.executor.borrow();
        let executor =
            executor.as_ref().ok_or_else(|| io::Error::other("the core's executor is shut down"))?;
        let mut main = pin!(future);
        // A tick of the executor, polled only before the core waits: when no task is runnable its
        // ticker sleeps with the core's waker, so that a task scheduled from anywhere (this
        // thread's stack wakers, a timer, another thread) notifies the core. While tasks run, the
        // loop takes them straight off the executor's queue (`try_tick`), without `run`'s
        // per-runner local queue and the stealing into it.
        let mut ticker = Box::pin(executor.tick());
        let mut poll_tasks = true;
        let mut seen_ready = inner.local.ready_events.get();
        let mut accept_recheck = Instant::now() + ACCEPT_RECHECK;
        loop {
            if poll_tasks {
                wake.take();
                if let Poll::Ready(out) = main.as_mut().poll(&mut cx) {
                    return Ok(out);
                }
                let mut ran = 0;
                while ran < TASK_BATCH && executor.try_tick() {
                    ran += 1;
                }
                if ran == TASK_BATCH {
                    // More may be runnable: let the stack move, then come back to them.
                    wake.notify();
                }
            }
            let now = Instant::now();
            inner.timers.fire(now);
            if wake.is_notified() {
                // A task became runnable (a timer, or a task that woke another): run it before
                // looking at the stack again.
                poll_tasks = true;
                continue;
            }
            if self.is_stopping() {
                self.stop_seen();
                // Keep the stack going (what the tasks still send leaves) while the service ends.
                inner.iface.poll()?;
                if !wake.is_notified() {
                    wake.sleep(Some(NAP));
                }
                poll_tasks = true;
                continue;
            }
            // The ticker sleeps with the core's waker, or runs a task that became runnable since.
            if ticker.as_mut().poll(&mut cx).is_ready() {
                ticker.set(executor.tick());
                poll_tasks = true;
                continue;
            }
            let mut until = inner.timers.next();
            if !inner.acceptors.borrow().is_empty() {
                until = Some(until.map_or(accept_recheck, |t| t.min(accept_recheck)));
            }
            match inner.iface.poll_wait(until.map(|t| t.saturating_duration_since(now))) {
                Ok(()) => {}
                Err(e) if Stopping::is(&e) => self.stop_seen(),
                Err(e) => return Err(e),
            }
            // Tasks waiting in `accept` are woken when a connection was made ready for this core,
            // and every ACCEPT_RECHECK (a connection queued on another core may be stolen), not
            // on every round: each wake would poll them (and the main future) for nothing.
            let now = Instant::now();
            let ready = inner.local.ready_events.get();
            if ready != seen_ready || now >= accept_recheck {
                seen_ready = ready;
                accept_recheck = now + ACCEPT_RECHECK;
                for waker in inner.acceptors.borrow_mut().drain(..) {
                    waker.wake();
                }
            }
            inner.timers.fire(now);
            poll_tasks = wake.is_notified();
        }
    }

    /// Once, when the stop is first seen: every task waiting in an accept or a timer is woken
    /// (their next poll fails with `Stopping`); tasks waiting on a connection are woken by the
    /// stack's wakers as the connection closes, and are dropped when the main future returns.
    fn stop_seen(&self) {
        if self.inner.stopping.replace(true) {
            return;
        }
        for waker in self.inner.acceptors.borrow_mut().drain(..) {
            waker.wake();
        }
        self.inner.timers.wake_all();
        self.inner.local.wake.notify();
    }

    /// Drops the core's tasks (on this thread), after the main future returned.
    pub(super) fn shut_down(&self) {
        let executor = self.inner.executor.borrow_mut().take();
        drop(executor);
    }
}
