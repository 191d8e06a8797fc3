//! [`AsyncCore`]: a core's handle for async services, what its handles share, and what the
//! listener, streams and timers need of it (the loop that drives the core is in `core`).

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::io;
use std::rc::Rc;
use std::task::Waker;

use async_executor::LocalExecutor;

use super::Task;
use super::timers::Timers;
use crate::core::local::Local;
use crate::core::{Core, Interface, Stopping};

/// What the handles of one core share.
pub(super) struct Inner<'c> {
    pub(super) local: Rc<Local>,
    pub(super) iface: Interface<'c>,
    /// `None` once the core shut down (its tasks dropped).
    pub(super) executor: RefCell<Option<LocalExecutor<'c>>>,
    pub(super) timers: Timers,
    /// Tasks waiting in `accept`: woken after every round of the core's loop.
    pub(super) acceptors: RefCell<Vec<Waker>>,
    /// The runtime's stop was seen (and every waiting task woken once for it).
    pub(super) stopping: Cell<bool>,
}

/// The async service's handle to the core it runs on: listen, connect, spawn tasks, sleep.
///
/// A cheap-to-clone handle (an `Rc`: tasks keep their own), valid on the core's thread for as
/// long as the service runs (`'c`). Made by [`Runtime::run_async`](crate::Runtime::run_async).
#[derive(Clone)]
pub struct AsyncCore<'c> {
    pub(super) inner: Rc<Inner<'c>>,
}

impl fmt::Debug for AsyncCore<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCore").field("id", &self.id()).field("cores", &self.cores()).finish()
    }
}

impl<'c> AsyncCore<'c> {
    pub(super) fn new(core: &Core<'c>) -> Self {
        core.local.runs_tasks.set(true);
        Self {
            inner: Rc::new(Inner {
                local: Rc::clone(&core.local),
                iface: core.iface.clone(),
                executor: RefCell::new(Some(LocalExecutor::new())),
                timers: Timers::default(),
                acceptors: RefCell::default(),
                stopping: Cell::new(false),
            }),
        }
    }

    /// This core's number, `0..cores()`.
    #[must_use]
    pub fn id(&self) -> usize {
        self.inner.local.core
    }

    /// How many cores the runtime runs.
    #[must_use]
    pub fn cores(&self) -> usize {
        self.inner.local.shared.cores
    }

    /// Whether the runtime is stopping.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.get() || self.inner.local.shared.stopping()
    }

    /// The core's tcp-lib interface (the stack's escape hatch: `with_stack`, counters).
    #[must_use]
    pub fn interface(&self) -> &Interface<'c> {
        &self.inner.iface
    }

    /// Runs `future` as a task of this core, beside the service's main future and the other
    /// tasks; it may borrow what lives as long as the core (`'c`) and need not be `Send`.
    ///
    /// # Panics
    ///
    /// When called after the service's main future returned (the core's tasks are gone then).
    pub fn spawn<T: 'c>(&self, future: impl Future<Output = T> + 'c) -> Task<T> {
        let executor = self.inner.executor.borrow();
        executor.as_ref().expect("spawn after the core's service returned").spawn(future)
    }

    /// Fails with [`Stopping`] once the runtime stops.
    pub(super) fn check_stopping(&self) -> io::Result<()> {
        if self.is_stopping() { Err(Stopping::error()) } else { Ok(()) }
    }
}
