//! [`AsyncListener`] and [`AsyncStream`]: the core's listener and connections as futures and as
//! `futures-io` (and, with feature `tokio`, tokio) I/O objects.
//!
//! Each operation is the non-blocking one of the blocking handles ([`crate::Listener`],
//! [`crate::Stream`]); when it would block, the task's waker is registered where the readiness
//! will come from (the stack's wakers for a connection, the core's loop for an accept queue) and
//! the operation returns `Pending`. The stack changes only inside the core's poll, on this thread,
//! so nothing can happen between the operation finding nothing and the registration.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use tcp_lib::stack::Interest;
use tcp_lib::tcp::State;

use super::handle::AsyncCore;
use crate::core::{Listener, Stream};

/// A listening port of one core ([`AsyncCore::listen`]): [`accept`](Self::accept) as a future.
pub struct AsyncListener<'c> {
    core: AsyncCore<'c>,
    listener: Listener<'c>,
}

impl fmt::Debug for AsyncListener<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncListener").field("listener", &self.listener).finish()
    }
}

impl<'c> AsyncListener<'c> {
    pub(super) fn new(core: AsyncCore<'c>, listener: Listener<'c>) -> Self {
        Self { core, listener }
    }

    /// The next connection for this core (one that arrived here, else one stolen from a busy
    /// core), with its peer's address.
    ///
    /// # Errors
    ///
    /// [`Stopping`](crate::Stopping) once the runtime stops; the device's errors.
    pub async fn accept(&self) -> io::Result<(AsyncStream<'c>, SocketAddr)> {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls for the next connection ([`accept`](Self::accept) as a poll function).
    ///
    /// # Errors
    ///
    /// As [`accept`](Self::accept).
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(AsyncStream<'c>, SocketAddr)>> {
        if let Err(e) = self.core.check_stopping() {
            return Poll::Ready(Err(e));
        }
        match self.listener.accept() {
            Ok((stream, peer)) => Poll::Ready(AsyncStream::new(self.core.clone(), stream).map(|s| (s, peer))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.core.inner.acceptors.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// The listening address.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }
}

/// A TCP connection of a core as an async I/O object: `futures_io::AsyncRead`/`AsyncWrite` on
/// `AsyncStream` and on `&AsyncStream` (so one task can read while another writes), and with
/// feature `tokio`, `tokio::io::AsyncRead`/`AsyncWrite` (what `hyper-util`'s `TokioIo` takes).
///
/// Writes complete once the bytes are in the stack's send buffer; they leave at the core's next
/// poll, which comes as soon as the task yields, so `flush` has nothing to wait for. Dropping it
/// closes the connection (a FIN after what was written).
pub struct AsyncStream<'c> {
    core: AsyncCore<'c>,
    stream: Stream<'c>,
}

impl fmt::Debug for AsyncStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncStream").field("stream", &self.stream).finish()
    }
}

impl<'c> AsyncStream<'c> {
    pub(super) fn new(core: AsyncCore<'c>, stream: Stream<'c>) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        Ok(Self { core, stream })
    }

    /// The blocking-style handle underneath (non-blocking now): options, counters, state.
    #[must_use]
    pub fn get_ref(&self) -> &Stream<'c> {
        &self.stream
    }

    /// The local address.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.stream.local_addr()
    }

    /// The peer's address.
    #[must_use]
    pub fn peer_addr(&self) -> SocketAddr {
        self.stream.peer_addr()
    }

    /// Turns Nagle's algorithm off (`true`) or on.
    ///
    /// # Errors
    ///
    /// When the connection is gone.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.stream.set_nodelay(nodelay)
    }

    /// Shuts down reading, writing or both (as [`Stream::shutdown`](tcp_lib::socket::Stream::shutdown)).
    ///
    /// # Errors
    ///
    /// When the connection is gone.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.stream.shutdown(how)
    }

    /// Aborts the connection: a reset to the peer, nothing more sent (as
    /// [`Stream::abort`](tcp_lib::socket::Stream::abort)).
    ///
    /// # Errors
    ///
    /// When the connection is gone.
    pub fn abort(self) -> io::Result<()> {
        self.stream.abort()
    }

    /// Reads into `buf`, or registers the task for the connection's next readable moment.
    ///
    /// # Errors
    ///
    /// The connection's errors; [`Stopping`](crate::Stopping) instead of waiting once the runtime
    /// stops.
    pub fn poll_read_buf(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self.stream.read_or_register(buf, cx.waker()) {
            Ok(Some(n)) => Poll::Ready(Ok(n)),
            // Only an operation that would wait fails once the runtime stops (what is there is
            // still read or queued): the stop wakes no connection's waker.
            Ok(None) => match self.core.check_stopping() {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Writes from `buf` into the send buffer, or registers the task for the connection's next
    /// writable moment.
    ///
    /// # Errors
    ///
    /// The connection's errors; [`Stopping`](crate::Stopping) instead of waiting once the runtime
    /// stops.
    pub fn poll_write_buf(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.stream.write_or_register(buf, cx.waker()) {
            Ok(Some(n)) => Poll::Ready(Ok(n)),
            // Only an operation that would wait fails once the runtime stops (what is there is
            // still read or queued): the stop wakes no connection's waker.
            Ok(None) => match self.core.check_stopping() {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Half-closes: the FIN follows what was written.
    fn poll_close_write(&self) -> Poll<io::Result<()>> {
        match self.stream.shutdown(Shutdown::Write) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
            done => Poll::Ready(done),
        }
    }

    fn register<T>(&self, cx: &mut Context<'_>, interest: Interest) -> Poll<io::Result<T>> {
        let id = self.stream.id();
        match self.core.interface().with_stack(|s| s.register_waker(id, interest, cx.waker())) {
            Ok(Ok(())) => Poll::Pending,
            Ok(Err(e)) => Poll::Ready(Err(io::Error::new(io::ErrorKind::NotConnected, e))),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// An outgoing connection until its handshake completes ([`AsyncCore::connect`]).
pub(super) struct Connect<'c> {
    stream: Option<AsyncStream<'c>>,
}

impl<'c> Connect<'c> {
    pub(super) fn new(core: AsyncCore<'c>, addr: SocketAddr) -> io::Result<Self> {
        core.check_stopping()?;
        let stream = tcp_lib::socket::Stream::connect_nonblocking(core.interface(), addr)?;
        Ok(Self { stream: Some(AsyncStream::new(core, stream)?) })
    }
}

impl<'c> Future for Connect<'c> {
    type Output = io::Result<AsyncStream<'c>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(stream) = self.stream.as_ref() else {
            return Poll::Ready(Err(io::Error::other("polled after completion")));
        };
        if let Err(e) = stream.core.check_stopping() {
            return Poll::Ready(Err(e));
        }
        if let Some(e) = stream.stream.take_error()? {
            return Poll::Ready(Err(e));
        }
        match stream.stream.state()? {
            State::SynSent | State::SynReceived => stream.register(cx, Interest::Write),
            _ => Poll::Ready(self.stream.take().ok_or_else(|| io::Error::other("polled after completion"))),
        }
    }
}

macro_rules! futures_io_impls {
    ($ty:ty) => {
        impl futures_io::AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut [u8],
            ) -> Poll<io::Result<usize>> {
                self.poll_read_buf(cx, buf)
            }
        }

        impl futures_io::AsyncWrite for $ty {
            fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                self.poll_write_buf(cx, buf)
            }

            fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.poll_close_write()
            }
        }

        #[cfg(feature = "tokio")]
        impl tokio::io::AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                let dst = buf.initialize_unfilled();
                match self.poll_read_buf(cx, dst) {
                    Poll::Ready(Ok(n)) => {
                        buf.advance(n);
                        Poll::Ready(Ok(()))
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            }
        }

        #[cfg(feature = "tokio")]
        impl tokio::io::AsyncWrite for $ty {
            fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                self.poll_write_buf(cx, buf)
            }

            fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.poll_close_write()
            }
        }
    };
}

futures_io_impls!(AsyncStream<'_>);
futures_io_impls!(&AsyncStream<'_>);
