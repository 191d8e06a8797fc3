//! async/await on the cores (feature `async`): each core runs a single-threaded executor
//! interleaved with its stack's poll loop, so services written with `async fn` (and crates built
//! on the `futures-io` or, with feature `tokio`, the tokio I/O traits: hyper, tonic, ...) serve on
//! every core.
//!
//! # The shape
//!
//! [`Runtime::run_async`] runs the service, an async closure, once per core, as the core's main
//! future; it gets an [`AsyncCore`], the core's handle: [`listen`](AsyncCore::listen) with
//! Affinity-Accept, [`connect`](AsyncCore::connect), [`spawn`](AsyncCore::spawn) (tasks on this
//! core: no `Send` needed, nothing migrates), [`sleep`](AsyncCore::sleep) (timers on the stack's
//! clock). A core's loop, in [`block_on`](AsyncCore::block_on):
//!
//! ```text
//!  poll the main future, then run the tasks that are runnable (up to a batch of 200)
//!    -> poll the stack: frames in, timers, frames out; a connection that became readable or
//!       writable wakes the task that waits on it (tcp-lib's wakers), a due timer its sleeper
//!    -> nothing runnable and nothing arrived: sleep on the device until a frame may have
//!       arrived, the next stack or task timer, or a wakeup (`netchannel::wake::Notify`): a task
//!       woken from any thread notifies the core, which wakes at once
//! ```
//!
//! # Why this executor
//!
//! `async-executor`'s [`LocalExecutor`](async_executor::LocalExecutor): it runs `!Send` tasks
//! that borrow the core (`'c`), it is small, and the core can drive it one task at a time
//! (`try_tick`) and sleep where the core sleeps: on its device and its wakeup word, not on an
//! epoll a runtime owns. (The core runs tasks with `try_tick` straight off the executor's queue
//! and keeps one `tick` future pending, polled with its own waker before it waits, for the
//! wakeups; `run` would put a per-runner local queue and the stealing into it on every task,
//! about 200 instructions per echoed message on the async echo.) tokio's current-thread runtime
//! with a `LocalSet` parks in its own I/O driver and wants its own timers and sockets; a core
//! here has neither (its "I/O driver" is the stack it polls).
//!
//! # Wakeups
//!
//! Every wakeup ends in the core's [`Notify`](netchannel::wake::Notify): the waker of the
//! executor's pending tick (polled by the core's loop) is the notify, so a task woken on this core during a stack poll,
//! by a timer, or from another thread makes the next round poll the executor. The register /
//! re-check protocol lives in `Notify` (loom-checked, `netchannel/tests/loom_notify.rs`); a
//! socket registers its task's waker with the stack only after its operation found nothing, and
//! the stack changes only inside the core's poll on this thread, so there is no window between
//! the two.
//!
//! # Stopping
//!
//! When the runtime stops, every accept and connect of the core, and every read or write that
//! would wait, fails with [`Stopping`](crate::Stopping) at its next poll; the tasks waiting in an
//! accept or a timer are woken, and so is the main future. When the main future returns, the tasks
//! still alive are dropped (cancelled) on the core's thread and the core flushes as the blocking
//! runtime does.

mod core;
mod handle;
mod stream;
mod timer;
mod timers;

pub use handle::AsyncCore;
pub use stream::{AsyncListener, AsyncStream};
pub use timer::Sleep;

/// A task spawned on a core ([`AsyncCore::spawn`]): await it for its output, `detach` it to let
/// it run on its own, drop it to cancel it.
pub type Task<T> = async_executor::Task<T>;

use std::io;

use crate::runtime::{Control, Error, Report, Runtime};

impl Runtime {
    /// As [`run`](Self::run), with an async service: `service` runs on every core as the core's
    /// main future, with the core's [`AsyncCore`]. When it returns, the core's other tasks are
    /// dropped and the core stops serving; when `main` returns, the runtime stops (every
    /// pending accept, read, write or connect fails with [`Stopping`](crate::Stopping)).
    ///
    /// ```
    /// use netchannel_runtime::{AsyncCore, Runtime, Stopping};
    /// use futures_io::{AsyncRead, AsyncWrite};
    /// use std::io::{Read, Write};
    /// use std::net::SocketAddrV4;
    /// use tcp_lib::socket::{Interface, Stream};
    /// use tcp_lib::stack::Stack;
    ///
    /// // An async echo on 2 cores of the 82599 model, its peer a blocking client.
    /// let mut runtime = Runtime::builder().cores(2).build()?;
    /// let server = SocketAddrV4::new(runtime.ip().address(), 7);
    /// let peer = runtime.take_peer().expect("the model has a peer");
    /// let ((), report) = runtime.run_async(
    ///     async |core: AsyncCore<'_>| {
    ///         let listener = core.listen(7)?;
    ///         loop {
    ///             let (stream, _) = match listener.accept().await {
    ///                 Err(e) if Stopping::is(&e) => return Ok(()),
    ///                 accepted => accepted?,
    ///             };
    ///             core.spawn(async move {
    ///                 let (mut reader, mut writer) = (&stream, &stream);
    ///                 let _ = echo(&mut reader, &mut writer).await;
    ///             })
    ///             .detach();
    ///         }
    ///     },
    ///     |_control| {
    ///         let config = peer.stack_config(netchannel_runtime::DEFAULT_IP);
    ///         let (device, pool) = peer.into_parts();
    ///         let client = Interface::new(Stack::new(config, std::time::Instant::now()), device, pool.cache());
    ///         let mut stream = Stream::connect(&client, server).expect("connects");
    ///         stream.write_all(b"hello, async cores").expect("writes");
    ///         let mut echo = [0u8; 18];
    ///         stream.read_exact(&mut echo).expect("reads");
    ///         assert_eq!(&echo, b"hello, async cores");
    ///     },
    /// )?;
    /// assert_eq!(report.snapshot.accepted(), 1);
    ///
    /// async fn echo(
    ///     reader: &mut (impl AsyncRead + Unpin),
    ///     writer: &mut (impl AsyncWrite + Unpin),
    /// ) -> std::io::Result<()> {
    ///     let mut buf = [0u8; 4096];
    ///     loop {
    ///         let n = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *reader).poll_read(cx, &mut buf)).await?;
    ///         if n == 0 {
    ///             return Ok(());
    ///         }
    ///         let mut done = 0;
    ///         while done < n {
    ///             done += std::future::poll_fn(|cx| std::pin::Pin::new(&mut *writer).poll_write(cx, &buf[done..n])).await?;
    ///         }
    ///     }
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    pub fn run_async<S, T>(
        self,
        service: S,
        main: impl FnOnce(&Control<'_>) -> T,
    ) -> Result<(T, Report), Error>
    where
        S: for<'c> AsyncFn(AsyncCore<'c>) -> io::Result<()> + Sync,
    {
        self.run(
            |core| {
                let handle = AsyncCore::new(core);
                let result = handle.block_on(service(handle.clone()));
                handle.shut_down();
                result.and_then(|r| r)
            },
            main,
        )
    }
}
