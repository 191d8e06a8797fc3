//! The socket table: file descriptors over the stack's listeners and streams, and the POSIX
//! socket calls packetdrill's scripts make, with Linux's errno for each failure.
//!
//! Every call returns an [`Outcome`]: done (a value or an [`Errno`]), or [`Outcome::Blocked`] when a
//! blocking socket must wait (the actor parks the call and retries it whenever the stack moved).
//! Calls the stack has no equivalent for fail with an errno (`ENOPROTOOPT`, `EOPNOTSUPP`,
//! `EAFNOSUPPORT`, ...), never a panic.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tcp_lib::stack::{Error, ListenerConfig, StreamId};
use tcp_lib::tcp::{self, ConnectionError, Keepalive, State};

use crate::fds::{Errno, Kind, Options, Socket};
use crate::host::Host;
use crate::profile::Defaults;
use crate::{qdisc, sysctl};

/// What a socket call came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// Finished, with its result.
    Done(Result<T, Errno>),
    /// A blocking socket must wait; call again once the stack moved.
    Blocked,
}

impl<T> Outcome<T> {
    fn err(errno: i32) -> Self {
        Self::Done(Err(Errno(errno)))
    }
}

impl<T> From<Result<T, Errno>> for Outcome<T> {
    fn from(r: Result<T, Errno>) -> Self {
        Self::Done(r)
    }
}

/// The most one read returns: more than any receive buffer holds, far less than a script's
/// `read(fd, ..., SIZE)` could ask to allocate.
const MAX_READ: usize = 1 << 24;

/// Readiness bits of `poll` (`libc::POLL*`), as `i16`.
const POLLIN: i16 = libc::POLLIN;
const POLLOUT: i16 = libc::POLLOUT;
const POLLERR: i16 = libc::POLLERR;
const POLLHUP: i16 = libc::POLLHUP;
const POLLNVAL: i16 = libc::POLLNVAL;
const POLLRDHUP: i16 = libc::POLLRDHUP;

fn connection_errno(e: ConnectionError) -> i32 {
    match e {
        ConnectionError::Refused => libc::ECONNREFUSED,
        ConnectionError::Reset => libc::ECONNRESET,
        ConnectionError::TimedOut => libc::ETIMEDOUT,
        ConnectionError::Aborted => libc::ECONNABORTED,
    }
}

fn stack_errno(e: Error) -> i32 {
    match e {
        Error::InvalidHandle => libc::EBADF,
        Error::InvalidPort => libc::EINVAL,
        Error::AddrInUse => libc::EADDRINUSE,
        Error::NoPorts => libc::EADDRNOTAVAIL,
        Error::TooManyConnections => libc::ENOBUFS,
        Error::Unreachable => libc::ENETUNREACH,
        Error::WouldBlock => libc::EAGAIN,
        Error::WriteClosed => libc::EPIPE,
        Error::Connection(c) => connection_errno(c),
        Error::NotLocal => libc::EADDRNOTAVAIL,
        Error::TooManyRoutes => libc::ENOBUFS,
        Error::MessageTooLong { .. } => libc::EMSGSIZE,
        Error::NotConnected => libc::EDESTADDRREQ,
    }
}

/// An integer option value as `setsockopt` passes it (`int`, native endian, at least 4 bytes).
fn int_value(optval: &[u8]) -> Result<i32, Errno> {
    let bytes: [u8; 4] = optval.get(..4).and_then(|b| b.try_into().ok()).ok_or(Errno(libc::EINVAL))?;
    Ok(i32::from_ne_bytes(bytes))
}

fn positive(v: i32) -> Result<u32, Errno> {
    u32::try_from(v).ok().filter(|&v| v > 0).ok_or(Errno(libc::EINVAL))
}

impl Host {
    /// The configuration of a connection opened or accepted through a socket with `opts`: the
    /// profile's, then (profile `linux`) the namespace's sysctls and pacing when the script put
    /// `fq` on `tun0` ([`qdisc`]), then the socket's options.
    fn tcp_config(&self, opts: &Options) -> tcp::Config {
        let mut c = self.profile.tcp();
        let linux = self.profile.defaults == Defaults::Linux;
        let sysctls = linux && self.profile.sysctls;
        if sysctls {
            if qdisc::script_installs_fq() {
                c.pacing = Some(tcp::Pacing::LINUX);
            }
            sysctl::apply(&mut c);
        }
        if let Some(mss) = opts.maxseg {
            c.mss = c.mss.min(mss);
        }
        // Linux doubles SO_RCVBUF/SO_SNDBUF for its bookkeeping and sizes the window scale for the
        // locked buffer.
        if let Some(b) = opts.rcvbuf {
            c.recv_buffer = 2 * b;
            c.rcv_wscale = None;
        }
        if let Some(b) = opts.sndbuf {
            c.send_buffer = 2 * b;
        }
        c.nodelay = opts.nodelay;
        if opts.keepalive {
            let (idle, interval, probes) = if sysctls { sysctl::keepalive() } else { (7200, 75, 9) };
            c.keepalive = Some(Keepalive {
                idle: Duration::from_secs(opts.keepidle.map_or(idle, u64::from)),
                interval: Duration::from_secs(opts.keepintvl.map_or(interval, u64::from)),
                probes: opts.keepcnt.unwrap_or(probes),
            });
        }
        c
    }

    fn socket_ref(&self, fd: i32) -> Result<&Socket, Errno> {
        self.sockets.fds.get(&fd).ok_or(Errno(libc::EBADF))
    }

    fn socket_mut(&mut self, fd: i32) -> Result<&mut Socket, Errno> {
        self.sockets.fds.get_mut(&fd).ok_or(Errno(libc::EBADF))
    }

    fn stream(&self, fd: i32) -> Result<StreamId, Errno> {
        match self.socket_ref(fd)?.kind {
            Kind::Stream { id, .. } => Ok(id),
            _ => Err(Errno(libc::ENOTCONN)),
        }
    }

    /// `socket(domain, type, protocol)`: TCP over IPv4 or IPv6 (`SOCK_NONBLOCK` honoured).
    pub fn socket(&mut self, domain: i32, ty: i32, protocol: i32) -> Result<i32, Errno> {
        if domain != libc::AF_INET && domain != libc::AF_INET6 {
            return Err(Errno(libc::EAFNOSUPPORT));
        }
        let base = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
        if base != libc::SOCK_STREAM {
            return Err(Errno(libc::EPROTONOSUPPORT));
        }
        if protocol != 0 && protocol != libc::IPPROTO_TCP {
            return Err(Errno(libc::EPROTONOSUPPORT));
        }
        let nonblocking = ty & libc::SOCK_NONBLOCK != 0;
        self.sockets.insert(Socket {
            kind: Kind::Fresh { bound: None },
            nonblocking,
            opts: Options::default(),
        })
    }

    /// `bind(fd, addr)`: the local address must be the stack's or the wildcard.
    pub fn bind(&mut self, fd: i32, addr: SocketAddr) -> Result<(), Errno> {
        let local = self.profile.local_ip;
        if !addr.ip().is_unspecified() && addr.ip() != local {
            return Err(Errno(libc::EADDRNOTAVAIL));
        }
        let in_use = self.sockets.fds.values().any(|s| match s.kind {
            Kind::Fresh { bound: Some(b) } => b.port() == addr.port() && addr.port() != 0,
            Kind::Listener { addr: a, .. } => a.port() == addr.port(),
            _ => false,
        });
        let socket = self.socket_mut(fd)?;
        match socket.kind {
            Kind::Fresh { bound: None } if in_use && !socket.opts.reuseaddr => Err(Errno(libc::EADDRINUSE)),
            Kind::Fresh { bound: None } => {
                socket.kind = Kind::Fresh { bound: Some(SocketAddr::new(local, addr.port())) };
                Ok(())
            }
            _ => Err(Errno(libc::EINVAL)),
        }
    }

    /// `listen(fd, backlog)`: Linux queues up to `backlog + 1` established connections.
    pub fn listen(&mut self, fd: i32, backlog: i32) -> Result<(), Errno> {
        let socket = *self.socket_ref(fd)?;
        match socket.kind {
            Kind::Listener { .. } => Ok(()),
            Kind::Fresh { bound: Some(addr) } if addr.port() != 0 => {
                let backlog = usize::try_from(backlog.max(0)).unwrap_or(0) + 1;
                let config = ListenerConfig { backlog, ..ListenerConfig::default() };
                let id = self.stack.listen_with(addr.port(), config).map_err(|e| Errno(stack_errno(e)))?;
                let tcp = self.tcp_config(&socket.opts);
                self.stack.set_listener_tcp(id, tcp).map_err(|e| Errno(stack_errno(e)))?;
                self.socket_mut(fd)?.kind = Kind::Listener { id, addr };
                Ok(())
            }
            Kind::Fresh { .. } => Err(Errno(libc::EDESTADDRREQ)),
            Kind::Stream { .. } => Err(Errno(libc::EINVAL)),
        }
    }

    /// `accept(fd)`: the next established connection and its peer's address.
    pub fn accept(&mut self, fd: i32) -> Outcome<(i32, SocketAddr)> {
        let socket = match self.socket_ref(fd) {
            Ok(s) => *s,
            Err(e) => return Outcome::Done(Err(e)),
        };
        let Kind::Listener { id, .. } = socket.kind else { return Outcome::err(libc::EINVAL) };
        let Some(stream) = self.stack.accept(id) else {
            return if socket.nonblocking { Outcome::err(libc::EAGAIN) } else { Outcome::Blocked };
        };
        let peer = self.stack.addrs(stream).map_or(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)), |(_, r)| r);
        // Options set on the listener carry over to the connection, as on Linux.
        let opts = socket.opts;
        if opts.nodelay {
            let _ = self.stack.set_nodelay(stream, true);
        }
        let kind = Kind::Stream { id: stream, connecting: false, read_shut: false, error_reported: false };
        Outcome::Done(self.sockets.insert(Socket { kind, nonblocking: false, opts }).map(|fd| (fd, peer)))
    }

    /// `connect(fd, addr)`: `EINPROGRESS` on a non-blocking socket, which a later `connect` (or
    /// `poll` for `POLLOUT`) completes; a blocking one waits for the handshake.
    pub fn connect(&mut self, fd: i32, remote: SocketAddr) -> Outcome<()> {
        let socket = match self.socket_ref(fd) {
            Ok(s) => *s,
            Err(e) => return Outcome::Done(Err(e)),
        };
        match socket.kind {
            Kind::Listener { .. } => Outcome::err(libc::EISCONN),
            Kind::Fresh { .. } => {
                let id = match self.stack.connect_with(remote, self.tcp_config(&socket.opts)) {
                    Ok(id) => id,
                    Err(e) => return Outcome::err(stack_errno(e)),
                };
                if socket.opts.nodelay {
                    let _ = self.stack.set_nodelay(id, true);
                }
                if let Ok(s) = self.socket_mut(fd) {
                    s.kind = Kind::Stream { id, connecting: true, read_shut: false, error_reported: false };
                }
                if socket.nonblocking { Outcome::err(libc::EINPROGRESS) } else { Outcome::Blocked }
            }
            Kind::Stream { id, connecting, .. } => {
                let state = self.stack.state(id).unwrap_or(State::Closed);
                if let Ok(Some(e)) = self.stack.error(id) {
                    self.mark_error_reported(fd);
                    return Outcome::err(connection_errno(e));
                }
                if matches!(state, State::SynSent | State::SynReceived) {
                    return if socket.nonblocking { Outcome::err(libc::EALREADY) } else { Outcome::Blocked };
                }
                if connecting {
                    if let Ok(Socket { kind: Kind::Stream { connecting, .. }, .. }) = self.socket_mut(fd) {
                        *connecting = false;
                    }
                    Outcome::Done(Ok(()))
                } else {
                    Outcome::err(libc::EISCONN)
                }
            }
        }
    }

    fn mark_error_reported(&mut self, fd: i32) {
        if let Ok(Socket { kind: Kind::Stream { error_reported, .. }, .. }) = self.socket_mut(fd) {
            *error_reported = true;
        }
    }

    /// `read`/`recv`: up to `len` bytes; 0 at the end of the stream (`dontwait`: this call does
    /// not block).
    pub fn read(&mut self, fd: i32, len: usize, dontwait: bool) -> Outcome<Vec<u8>> {
        let mut socket = match self.socket_ref(fd) {
            Ok(s) => *s,
            Err(e) => return Outcome::Done(Err(e)),
        };
        socket.nonblocking |= dontwait;
        let Kind::Stream { id, read_shut, .. } = socket.kind else { return Outcome::err(libc::ENOTCONN) };
        // A read may return less than asked (POSIX): never allocate more than the stack can hold.
        let mut buf = vec![0u8; len.min(MAX_READ)];
        match self.stack.recv(id, &mut buf) {
            Ok(n) => {
                buf.truncate(n);
                Outcome::Done(Ok(buf))
            }
            // After shutdown(SHUT_RD), what was received is still read; then end of stream.
            Err(Error::WouldBlock) if read_shut => Outcome::Done(Ok(Vec::new())),
            Err(Error::WouldBlock) if socket.nonblocking => Outcome::err(libc::EAGAIN),
            Err(Error::WouldBlock) => Outcome::Blocked,
            Err(e) => {
                self.mark_error_reported(fd);
                Outcome::err(stack_errno(e))
            }
        }
    }

    /// `write`/`send`: a blocking socket takes every byte (waiting for room), a non-blocking one
    /// what fits (`dontwait`: this call only). `written` carries progress across the retries of
    /// one blocked call.
    pub fn write(&mut self, fd: i32, data: &[u8], written: &mut usize, dontwait: bool) -> Outcome<usize> {
        let mut socket = match self.socket_ref(fd) {
            Ok(s) => *s,
            Err(e) => return Outcome::Done(Err(e)),
        };
        socket.nonblocking |= dontwait;
        let Kind::Stream { id, .. } = socket.kind else { return Outcome::err(libc::EPIPE) };
        while *written < data.len() {
            match self.stack.send(id, &data[*written..]) {
                Ok(n) => *written += n,
                Err(Error::WouldBlock) if *written > 0 && socket.nonblocking => break,
                Err(Error::WouldBlock) if socket.nonblocking => return Outcome::err(libc::EAGAIN),
                Err(Error::WouldBlock) => return Outcome::Blocked,
                Err(_) if *written > 0 => break,
                Err(e) => {
                    self.mark_error_reported(fd);
                    return Outcome::err(stack_errno(e));
                }
            }
        }
        Outcome::Done(Ok(*written))
    }

    /// `close(fd)`: a stream closes gracefully (with `SO_LINGER` 0: aborts with an RST), a
    /// listener stops listening.
    pub fn close(&mut self, fd: i32) -> Result<(), Errno> {
        let socket = self.sockets.remove(fd).ok_or(Errno(libc::EBADF))?;
        match socket.kind {
            Kind::Fresh { .. } => {}
            Kind::Listener { id, .. } => {
                let _ = self.stack.unlisten(id);
            }
            Kind::Stream { id, .. } if socket.opts.linger == Some(Duration::ZERO) => {
                let _ = self.stack.abort(id);
            }
            Kind::Stream { id, .. } => {
                let _ = self.stack.close(id);
            }
        }
        Ok(())
    }

    /// `shutdown(fd, how)`.
    pub fn shutdown(&mut self, fd: i32, how: i32) -> Result<(), Errno> {
        let socket = self.socket_mut(fd)?;
        let Kind::Stream { id, read_shut, .. } = &mut socket.kind else { return Err(Errno(libc::ENOTCONN)) };
        let id = *id;
        match how {
            libc::SHUT_RD => *read_shut = true,
            libc::SHUT_WR => {}
            libc::SHUT_RDWR => *read_shut = true,
            _ => return Err(Errno(libc::EINVAL)),
        }
        if how != libc::SHUT_RD {
            self.stack.shutdown_write(id).map_err(|e| Errno(stack_errno(e)))?;
        }
        Ok(())
    }

    /// `fcntl(fd, F_GETFL)` / `fcntl(fd, F_SETFL, flags)`: `O_NONBLOCK` only.
    pub fn fcntl(&mut self, fd: i32, cmd: i32, arg: i64) -> Result<i32, Errno> {
        let socket = self.socket_mut(fd)?;
        match cmd {
            libc::F_GETFL => Ok(libc::O_RDWR | if socket.nonblocking { libc::O_NONBLOCK } else { 0 }),
            libc::F_SETFL => {
                socket.nonblocking = arg & i64::from(libc::O_NONBLOCK) != 0;
                Ok(0)
            }
            libc::F_GETFD | libc::F_SETFD => Ok(0),
            _ => Err(Errno(libc::EINVAL)),
        }
    }

    /// `ioctl(fd, FIONREAD | SIOCOUTQ | FIONBIO)`: bytes to read, bytes unacknowledged or unsent,
    /// or set non-blocking from `value`.
    pub fn ioctl(&mut self, fd: i32, request: libc::c_ulong, value: i32) -> Result<i32, Errno> {
        match request {
            r if r == libc::FIONBIO => {
                self.socket_mut(fd)?.nonblocking = value != 0;
                Ok(0)
            }
            r if r == libc::FIONREAD || r == libc::TIOCOUTQ => {
                let id = self.stream(fd)?;
                let (inq, outq) = self.stack.queues(id).map_err(|e| Errno(stack_errno(e)))?;
                let n = if r == libc::FIONREAD { inq } else { outq };
                Ok(i32::try_from(n).unwrap_or(i32::MAX))
            }
            _ => Err(Errno(libc::ENOTTY)),
        }
    }

    /// `setsockopt`: the options tcp-lib has; others fail with `ENOPROTOOPT`.
    pub fn setsockopt(&mut self, fd: i32, level: i32, name: i32, optval: &[u8]) -> Result<(), Errno> {
        let socket = *self.socket_ref(fd)?;
        let mut opts = socket.opts;
        let stream = match socket.kind {
            Kind::Stream { id, .. } => Some(id),
            _ => None,
        };
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => opts.reuseaddr = int_value(optval)? != 0,
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => opts.keepalive = int_value(optval)? != 0,
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
                let b = positive(int_value(optval)?)? as usize;
                opts.sndbuf = Some(b);
                if let Some(id) = stream {
                    // Linux doubles it for its bookkeeping, as at connect or listen.
                    self.stack.set_send_buffer(id, 2 * b).map_err(|e| Errno(stack_errno(e)))?;
                }
            }
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => opts.rcvbuf = Some(positive(int_value(optval)?)? as usize),
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                let onoff = int_value(optval)?;
                let secs = int_value(optval.get(4..).unwrap_or(&[]))?;
                opts.linger =
                    (onoff != 0).then(|| Duration::from_secs(u64::try_from(secs.max(0)).unwrap_or(0)));
            }
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
                opts.nodelay = int_value(optval)? != 0;
                if let Some(id) = stream {
                    self.stack.set_nodelay(id, opts.nodelay).map_err(|e| Errno(stack_errno(e)))?;
                }
            }
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
                let v = positive(int_value(optval)?)?;
                opts.maxseg = Some(u16::try_from(v.clamp(88, 65_535)).unwrap_or(u16::MAX));
            }
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => opts.keepidle = Some(positive(int_value(optval)?)?),
            (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => opts.keepintvl = Some(positive(int_value(optval)?)?),
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => opts.keepcnt = Some(positive(int_value(optval)?)?),
            _ => return Err(Errno(libc::ENOPROTOOPT)),
        }
        self.socket_mut(fd)?.opts = opts;
        // A listener's options reach the connections it accepts from now on.
        if let Kind::Listener { id, .. } = socket.kind {
            let tcp = self.tcp_config(&opts);
            self.stack.set_listener_tcp(id, tcp).map_err(|e| Errno(stack_errno(e)))?;
        }
        Ok(())
    }

    /// `getsockopt`: the value as an `int` (or a `struct linger`), in native byte order.
    pub fn getsockopt(&mut self, fd: i32, level: i32, name: i32) -> Result<Vec<u8>, Errno> {
        let socket = *self.socket_ref(fd)?;
        let opts = socket.opts;
        let stream = match socket.kind {
            Kind::Stream { id, .. } => Some(id),
            _ => None,
        };
        let int = |v: usize| Ok(i32::try_from(v).unwrap_or(i32::MAX).to_ne_bytes().to_vec());
        let tcp = self.profile.tcp();
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => int(usize::from(opts.reuseaddr)),
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => int(usize::from(opts.keepalive)),
            (libc::SOL_SOCKET, libc::SO_TYPE) => int(libc::SOCK_STREAM as usize),
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => int(opts.sndbuf.map_or(tcp.send_buffer, |b| 2 * b)),
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => int(opts.rcvbuf.map_or(tcp.recv_buffer, |b| 2 * b)),
            (libc::SOL_SOCKET, libc::SO_ERROR) => {
                let Some(id) = stream else { return int(0) };
                match self.stack.error(id) {
                    Ok(Some(e)) if !matches!(socket.kind, Kind::Stream { error_reported: true, .. }) => {
                        self.mark_error_reported(fd);
                        int(usize::try_from(connection_errno(e)).unwrap_or(0))
                    }
                    _ => int(0),
                }
            }
            (libc::SOL_SOCKET, libc::SO_LINGER) => {
                let mut v = i32::from(opts.linger.is_some()).to_ne_bytes().to_vec();
                let secs = opts.linger.map_or(0, |d| i32::try_from(d.as_secs()).unwrap_or(i32::MAX));
                v.extend_from_slice(&secs.to_ne_bytes());
                Ok(v)
            }
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => int(usize::from(opts.nodelay)),
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => match stream {
                Some(id) => int(self.stack.send_mss(id).map_err(|e| Errno(stack_errno(e)))?),
                None => int(usize::from(opts.maxseg.unwrap_or(536))),
            },
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => int(opts.keepidle.unwrap_or(7200) as usize),
            (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => int(opts.keepintvl.unwrap_or(75) as usize),
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => int(opts.keepcnt.unwrap_or(9) as usize),
            _ => Err(Errno(libc::ENOPROTOOPT)),
        }
    }

    /// The `poll` readiness of `fd` for `events`.
    fn revents(&mut self, fd: i32, events: i16) -> i16 {
        let Ok(socket) = self.socket_ref(fd).copied() else { return POLLNVAL };
        let mut r = 0;
        match socket.kind {
            Kind::Fresh { .. } => r |= POLLOUT | POLLHUP,
            Kind::Listener { id, .. } => {
                if self.stack.accept_queue_len(id).unwrap_or(0) > 0 {
                    r |= POLLIN;
                }
            }
            Kind::Stream { id, read_shut, .. } => {
                let state = self.stack.state(id).unwrap_or(State::Closed);
                let error = self.stack.error(id).ok().flatten();
                let (inq, _) = self.stack.queues(id).unwrap_or((0, 0));
                let peer_done = matches!(
                    state,
                    State::CloseWait | State::LastAck | State::Closing | State::TimeWait | State::Closed
                );
                if inq > 0 || peer_done || read_shut || error.is_some() {
                    r |= POLLIN;
                }
                if peer_done || read_shut {
                    r |= POLLRDHUP;
                }
                if self.stack.is_writable(id) && !matches!(state, State::SynSent | State::SynReceived) {
                    r |= POLLOUT;
                }
                if error.is_some() {
                    r |= POLLERR;
                }
                if state == State::Closed || error.is_some() {
                    r |= POLLHUP;
                }
            }
        }
        r & (events | POLLERR | POLLHUP | POLLNVAL)
    }

    /// `poll(fds, timeout_ms)`: `fds` is `(fd, events)`; fills the `revents` of each and returns
    /// how many are ready. `deadline` is the virtual instant the timeout ends (`None`: never).
    pub fn poll(&mut self, fds: &[(i32, i16)], deadline: Option<Instant>) -> Outcome<Vec<i16>> {
        let revents: Vec<i16> = fds.iter().map(|&(fd, ev)| self.revents(fd, ev)).collect();
        if revents.iter().any(|&r| r != 0) || deadline.is_some_and(|d| self.now() >= d) {
            return Outcome::Done(Ok(revents));
        }
        Outcome::Blocked
    }

    /// The state and statistics of `fd`'s connection, when it is a connected socket of this host
    /// (what `TCP_INFO` reports).
    pub fn connection_info(&self, fd: i32) -> Option<(State, tcp::Stats)> {
        let id = self.stream(fd).ok()?;
        Some((self.stack.state(id).ok()?, self.stack.connection_stats(id).ok()?))
    }

    /// The peer's address of a connected socket (for `accept`'s and `recvfrom`'s address).
    pub fn peer(&self, fd: i32) -> Option<SocketAddr> {
        self.stream(fd).ok().and_then(|id| self.stack.addrs(id).ok()).map(|(_, r)| r)
    }
}
