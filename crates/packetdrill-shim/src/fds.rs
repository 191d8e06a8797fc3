//! The file-descriptor table: what each socket descriptor is (fresh, a listener, a stream), its
//! blocking mode and its options. A leaf: the socket calls in [`crate::socket`] read and change
//! it; the [`Host`](crate::host::Host) owns it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tcp_lib::stack::{ListenerId, StreamId};

/// An errno value (`libc::E*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// Sets the calling thread's `errno` to this value (what a failing C call leaves).
    pub fn set(self) {
        // SAFETY: `__errno_location` has no preconditions.
        let errno = unsafe { libc::__errno_location() };
        // SAFETY: it points to the calling thread's errno, valid and writable for the thread's life.
        unsafe { *errno = self.0 };
    }
}

/// Socket options as set by `setsockopt`, kept to answer `getsockopt` and applied where the
/// stack has them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Options {
    pub(crate) reuseaddr: bool,
    pub(crate) nodelay: bool,
    pub(crate) keepalive: bool,
    /// As set; Linux reports twice the value set (its bookkeeping overhead), and so do we.
    pub(crate) sndbuf: Option<usize>,
    pub(crate) rcvbuf: Option<usize>,
    pub(crate) maxseg: Option<u16>,
    pub(crate) linger: Option<Duration>,
    pub(crate) keepidle: Option<u32>,
    pub(crate) keepintvl: Option<u32>,
    pub(crate) keepcnt: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Fresh { bound: Option<SocketAddr> },
    Listener { id: ListenerId, addr: SocketAddr },
    Stream { id: StreamId, connecting: bool, read_shut: bool, error_reported: bool },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Socket {
    pub(crate) kind: Kind,
    pub(crate) nonblocking: bool,
    pub(crate) opts: Options,
}

/// The file descriptors. Each number is a real descriptor of the process (an `eventfd` held
/// open as a placeholder): packetdrill opens files of its own beside our sockets, and at the end
/// of a script closes every socket still open with the system's `close`, so our numbers must be
/// the kernel's.
#[derive(Debug, Default)]
pub struct Sockets {
    pub(crate) fds: BTreeMap<i32, Socket>,
}

impl Sockets {
    pub(crate) fn insert(&mut self, socket: Socket) -> Result<i32, Errno> {
        // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE)));
        }
        self.fds.insert(fd, socket);
        Ok(fd)
    }

    pub(crate) fn remove(&mut self, fd: i32) -> Option<Socket> {
        let socket = self.fds.remove(&fd)?;
        // SAFETY: `fd` is the placeholder `insert` opened; closing it frees the number.
        unsafe { libc::close(fd) };
        Some(socket)
    }
}
