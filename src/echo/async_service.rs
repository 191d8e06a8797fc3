//! The echo service written with async/await (feature `async`): `cargo run --release --features
//! async --example async_echo`. Same options, counters, client and summary as the blocking echo
//! ([`super::run`]); what differs is what each core runs: [`Runtime::run_async`] gives every core
//! an executor, and the service is an accept loop spawning one task per connection that reads and
//! writes through `futures_io::AsyncRead`/`AsyncWrite`.
//!
//! Like the blocking echo, a core reads into one 64 KiB buffer it shares among its connections,
//! writes what it read straight back, and keeps only what the send buffer did not take (that
//! connection then waits until it is writable before reading more): memory per connection is what
//! its peer has not acknowledged, not a buffer per task. `--slow-core N` slows core `N` the same
//! way (one accept per 5 ms, 1 ms per chunk read, blocking the core's thread).
//!
//! TCP only: `--udp` is refused (tcp-lib has no wakers for UDP sockets, and a task polling the
//! socket every round is the blocking echo's loop again; `--example echo --udp` serves UDP).
//!
//! [`Runtime::run_async`]: netchannel_runtime::Runtime::run_async

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::task::{Context, Poll, ready};

use futures_io::{AsyncRead, AsyncWrite};
use netchannel_runtime::{AsyncCore, AsyncStream, Stopping};

use super::{CHUNK, Counts, Echo, Live, Options, Report, SLOW_ACCEPT, SLOW_DELAY, run_in};
use crate::service::{self, AsyncService};
use crate::util::{add, thread_cpu};

/// Runs the async echo as `options` say, until it is done (the model's client finished), `stop`
/// is set (Ctrl-C), or its duration is up; returns the same summary as [`super::run`].
///
/// # Errors
///
/// As [`super::run`]; and `--udp`, which the async echo does not serve.
pub fn run_async(options: &Options, stop: &AtomicBool) -> Result<Report, String> {
    if options.udp {
        return Err(
            "--udp: the async echo serves TCP only (tcp-lib has no UDP wakers); run the blocking echo \
                    (`--example echo --udp`) for UDP"
                .into(),
        );
    }
    run_in(options, stop, true, |echo, port, plan, runtime, stop| {
        service::serve_async(echo, port, plan, runtime, stop)
    })
}

impl AsyncService for Echo<'_> {
    /// Echo on one core: the accept loop, one task per connection, until the runtime stops.
    async fn serve(&self, core: AsyncCore<'_>, live: &Live) -> io::Result<()> {
        let start = thread_cpu();
        let shared = Rc::new(Shared {
            counts: Arc::clone(&live.counts),
            buf: RefCell::new(vec![0; CHUNK]),
            slow: self.options.slow_core == Some(core.id()),
        });
        let result = accept_loop(&core, self.options.port, shared).await;
        live.cpu_since(start);
        result
    }
}

/// What a core's connection tasks share: the counters, the read buffer, whether this is the
/// `--slow-core`.
struct Shared {
    counts: Arc<Counts>,
    buf: RefCell<Vec<u8>>,
    slow: bool,
}

/// Accepts connections on `port` and spawns a task for each, until the runtime stops.
async fn accept_loop(core: &AsyncCore<'_>, port: u16, shared: Rc<Shared>) -> io::Result<()> {
    let listener = core.listen(port)?;
    loop {
        let (stream, _peer) = match listener.accept().await {
            Err(e) if Stopping::is(&e) => return Ok(()),
            accepted => accepted?,
        };
        stream.set_nodelay(true)?;
        add(&shared.counts.served, 1);
        core.spawn(connection(stream, Rc::clone(&shared))).detach();
        if shared.slow {
            // A worker that is behind takes at most one per `SLOW_ACCEPT`.
            core.sleep(SLOW_ACCEPT).await;
        }
    }
}

/// One connection's task: echoes until the peer's end of stream (closed: our FIN follows), an
/// error (failed: aborted), or the runtime stopping (the task is dropped: open at exit).
async fn connection(stream: AsyncStream<'_>, shared: Rc<Shared>) {
    let counts = &shared.counts;
    let open = OpenAtExit(&counts.open_at_exit);
    match echo(&stream, &shared).await {
        Ok(()) => add(&counts.closed, 1),
        Err(e) if Stopping::is(&e) => return,
        Err(_) => {
            add(&counts.failed, 1);
            let _ = stream.abort();
        }
    }
    std::mem::forget(open);
}

/// Counts a connection task dropped before it finished (the runtime stopped) as open at exit.
struct OpenAtExit<'a>(&'a AtomicU64);

impl Drop for OpenAtExit<'_> {
    fn drop(&mut self) {
        add(self.0, 1);
    }
}

/// Echoes what `stream` receives until its end of stream: whatever the send buffer takes at once,
/// the rest (kept in `out`) before reading more.
async fn echo(stream: &AsyncStream<'_>, shared: &Shared) -> io::Result<()> {
    let mut out: Vec<u8> = Vec::new();
    loop {
        while !out.is_empty() {
            let n = poll_fn(|cx| Pin::new(&mut &*stream).poll_write(cx, &out)).await?;
            out.drain(..n);
            add(&shared.counts.bytes, n as u64);
        }
        if poll_fn(|cx| read_and_echo(cx, stream, shared, &mut out)).await? == 0 {
            return Ok(());
        }
        if shared.slow {
            std::thread::sleep(SLOW_DELAY);
        }
    }
}

/// Reads into the core's buffer and writes it back at once, keeping in `out` what the send buffer
/// did not take: the bytes read (0: end of stream).
fn read_and_echo(
    cx: &mut Context<'_>,
    mut stream: &AsyncStream<'_>,
    shared: &Shared,
    out: &mut Vec<u8>,
) -> Poll<io::Result<usize>> {
    let mut buf = shared.buf.borrow_mut();
    let n = ready!(Pin::new(&mut stream).poll_read(cx, &mut buf))?;
    if n > 0 {
        let sent = match Pin::new(&mut stream).poll_write(cx, &buf[..n]) {
            Poll::Ready(written) => written?,
            Poll::Pending => 0,
        };
        add(&shared.counts.bytes, sent as u64);
        out.extend_from_slice(&buf[sent..n]);
    }
    Poll::Ready(Ok(n))
}
