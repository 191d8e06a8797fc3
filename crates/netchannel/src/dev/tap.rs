//! [`Tap`]: a Linux TAP interface as a [`NetDevice`], so the kernel's own stack can be the peer of
//! ours in tests and benchmarks.
//!
//! Opening a TAP attaches to `/dev/net/tun` with `TUNSETIFF` (`IFF_TAP | IFF_NO_PI`: plain Ethernet
//! frames, no packet-information prefix), non-blocking, one queue. Every frame crosses the user/kernel
//! boundary with one `read(2)`/`write(2)` and one copy into or out of a pool buffer; this device is for
//! tests and for running anywhere, not for speed (see Linux's `Documentation/networking/tuntap.rst`).
//!
//! Two MAC addresses are involved. The kernel's side of the TAP (what `ip link show` prints) has its
//! own address; *our* side, [`DeviceInfo::mac`], is a random locally administered address chosen at
//! open. The kernel learns ours like any neighbour's (ARP, or a static `ip neigh` entry).
//!
//! The interface is left as it is found: bringing it up, addressing and routing are the
//! administrator's (or the test's) business, with `ip` or netlink.

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::{DevError, DeviceInfo, DeviceOffloads, DeviceStats, Link, MacAddr, NetDevice, PacketBatch};
use crate::pool::PoolCache;

/// Why a TAP device could not be opened; the message says what to do about it.
#[derive(Debug)]
pub enum TapError {
    /// `/dev/net/tun` does not exist or has no driver behind it.
    NoTunDevice(io::Error),
    /// The caller lacks `CAP_NET_ADMIN` (or may not open `/dev/net/tun`).
    PermissionDenied(io::Error),
    /// Interface names are at most 15 bytes (`IFNAMSIZ - 1`).
    NameTooLong {
        /// The name asked for.
        name: String,
    },
    /// The name contains a NUL byte, a `/`, whitespace, or is `.` or `..`.
    InvalidName {
        /// The name asked for.
        name: String,
    },
    /// An interface of that name exists and is not a TAP this process may attach to (`EBUSY`,
    /// `EINVAL` from `TUNSETIFF`).
    Busy {
        /// The name asked for.
        name: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// Another system call failed.
    Io {
        /// The call, e.g. `"ioctl(SIOCGIFFLAGS)"`.
        op: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
}

impl fmt::Display for TapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoTunDevice(e) => {
                write!(
                    f,
                    "cannot open /dev/net/tun ({e}): load the tun module (`modprobe tun`), or in a container pass the device (`--device /dev/net/tun`)"
                )
            }
            Self::PermissionDenied(e) => write!(
                f,
                "creating a TAP interface needs CAP_NET_ADMIN ({e}): run as root or grant the capability (`setcap cap_net_admin+ep <binary>`)"
            ),
            Self::NameTooLong { name } => {
                write!(f, "interface name {name:?} is {} bytes; the limit is 15", name.len())
            }
            Self::InvalidName { name } => {
                write!(f, "{name:?} is not a valid interface name (no NUL, '/', whitespace, '.' or '..')")
            }
            Self::Busy { name, source } => write!(
                f,
                "cannot attach to interface {name:?} ({source}): it exists and is not a free TAP owned by this user; pick another name or delete it (`ip link del {name}`)"
            ),
            Self::Io { op, source } => write!(f, "TAP setup failed in {op}: {source}"),
        }
    }
}

impl std::error::Error for TapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NoTunDevice(e) | Self::PermissionDenied(e) => Some(e),
            Self::Busy { source, .. } | Self::Io { source, .. } => Some(source),
            Self::NameTooLong { .. } | Self::InvalidName { .. } => None,
        }
    }
}

/// A Linux TAP interface (see the [module documentation](self)).
///
/// `rx_burst` reads frames, one `read(2)` each, until the kernel has none (`EAGAIN`), the batch is
/// full or the cache has no buffer (frames then wait in the kernel's queue). A frame longer than the
/// pool's data room is dropped and counted in [`DeviceStats::rx_dropped`], never truncated; a frame
/// shorter than an Ethernet header counts in `rx_errors`. `tx_burst` writes frames, one `write(2)`
/// each, until the kernel refuses with `EAGAIN` (the rest stay in the batch); a frame the kernel
/// rejects (too long, malformed) is dropped and counted in `tx_dropped`.
#[derive(Debug)]
pub struct Tap {
    fd: OwnedFd,
    /// An `AF_INET` datagram socket for the interface ioctls (MTU, flags).
    ctl: OwnedFd,
    name: String,
    mac: MacAddr,
    stats: DeviceStats,
}

/// `ifreq` with the name filled in and the union zeroed.
fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: `ifreq` is plain old data (a name array and a union of integers, sockaddrs and a
    // pointer); all zeroes is a valid value of each.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(name.as_bytes()).take(libc::IFNAMSIZ - 1) {
        *dst = src.cast_signed();
    }
    req
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// A random locally administered unicast MAC address.
fn random_mac() -> MacAddr {
    let mut b = [0u8; 6];
    // SAFETY: `getrandom` writes at most `b.len()` bytes into `b`, which we own.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), libc::GRND_NONBLOCK) };
    if usize::try_from(n).ok() != Some(b.len()) {
        // No entropy yet (early boot): the pid and the clock are distinct enough for a test MAC.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let x = u64::from(std::process::id()) << 32 ^ u64::from(t.subsec_nanos()) ^ t.as_secs();
        b.copy_from_slice(&x.to_le_bytes()[..6]);
    }
    b[0] = (b[0] | 0x02) & !0x01;
    MacAddr(b)
}

impl Tap {
    /// Creates (or attaches to) the TAP interface `name`; an empty name lets the kernel pick one
    /// (`tap0`, `tap1`, ...), which [`Tap::name`] then reports.
    ///
    /// # Errors
    ///
    /// [`TapError`], whose message says what is missing and how to fix it: no `/dev/net/tun`, no
    /// `CAP_NET_ADMIN`, a bad or taken name.
    pub fn open(name: &str) -> Result<Self, TapError> {
        if name.len() >= libc::IFNAMSIZ {
            return Err(TapError::NameTooLong { name: name.to_owned() });
        }
        if name.bytes().any(|b| b == 0 || b == b'/' || b.is_ascii_whitespace()) || name == "." || name == ".."
        {
            return Err(TapError::InvalidName { name: name.to_owned() });
        }
        let path = c"/dev/net/tun";
        // SAFETY: `path` is a NUL-terminated string; `open` reads nothing else.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if raw < 0 {
            let e = last_error();
            return Err(match e.raw_os_error() {
                Some(libc::EACCES | libc::EPERM) => TapError::PermissionDenied(e),
                Some(libc::ENOENT | libc::ENODEV | libc::ENXIO) => TapError::NoTunDevice(e),
                _ => TapError::Io { op: "open(/dev/net/tun)", source: e },
            });
        }
        // SAFETY: `raw` is a file descriptor `open` just returned, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let mut req = ifreq(name);
        // IFF_TAP | IFF_NO_PI = 0x1002 fits `c_short`.
        req.ifr_ifru.ifru_flags = i16::try_from(libc::IFF_TAP | libc::IFF_NO_PI).unwrap_or(0x1002);
        // SAFETY: TUNSETIFF reads and writes one `ifreq`, which `req` is, for the duration of the call.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &raw mut req) } < 0 {
            let e = last_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => TapError::PermissionDenied(e),
                Some(libc::EBUSY | libc::EINVAL) => TapError::Busy { name: name.to_owned(), source: e },
                _ => TapError::Io { op: "ioctl(TUNSETIFF)", source: e },
            });
        }
        // SAFETY: the kernel NUL-terminates `ifr_name`; the array is IFNAMSIZ bytes, and we read
        // inside it only up to the first NUL (its last byte is NUL, zeroed by `ifreq` and never
        // overwritten with anything but a terminated name).
        let actual = unsafe { CStr::from_ptr(req.ifr_name.as_ptr()) }.to_string_lossy().into_owned();

        // SAFETY: plain socket creation; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(TapError::Io { op: "socket(AF_INET, SOCK_DGRAM)", source: last_error() });
        }
        // SAFETY: `raw` is a descriptor `socket` just returned, owned by nobody else.
        let ctl = unsafe { OwnedFd::from_raw_fd(raw) };
        let tap = Self { fd, ctl, name: actual, mac: random_mac(), stats: DeviceStats::default() };
        tap.flags().map_err(|source| TapError::Io { op: "ioctl(SIOCGIFFLAGS)", source })?;
        tracing::debug!(name = %tap.name, mac = %tap.mac, "TAP interface opened");
        Ok(tap)
    }

    /// The interface's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits until a frame can be read or `timeout` passes (`None`: no limit); returns whether one
    /// can. Interrupted waits (`EINTR`) count as "not yet".
    ///
    /// # Errors
    ///
    /// What `poll(2)` reports, or an error condition on the descriptor.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let ms = timeout
            .map_or(-1, |t| i32::try_from(t.as_millis().max(u128::from(!t.is_zero()))).unwrap_or(i32::MAX));
        let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid `pollfd`, owned here for the duration of the call.
        let r = unsafe { libc::poll(&raw mut pfd, 1, ms) };
        if r < 0 {
            let e = last_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
        }
        if pfd.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
            return Err(io::Error::other(format!("{}: error condition on the TAP descriptor", self.name)));
        }
        Ok(pfd.revents & libc::POLLIN != 0)
    }

    /// The interface flags (`IFF_UP`, `IFF_RUNNING`, ...).
    fn flags(&self) -> io::Result<libc::c_int> {
        let mut req = ifreq(&self.name);
        // SAFETY: SIOCGIFFLAGS reads and writes one `ifreq`, which `req` is.
        if unsafe { libc::ioctl(self.ctl.as_raw_fd(), libc::SIOCGIFFLAGS, &raw mut req) } < 0 {
            return Err(last_error());
        }
        // SAFETY: SIOCGIFFLAGS filled `ifru_flags` (an integer: every bit pattern is valid).
        let flags = unsafe { req.ifr_ifru.ifru_flags };
        // The kernel's flags are an unsigned short in a `short`: read them back as such.
        Ok(libc::c_int::from(flags.cast_unsigned()))
    }

    /// The interface's MTU, from `SIOCGIFMTU`.
    ///
    /// # Errors
    ///
    /// What the ioctl reports (the interface was deleted, say).
    pub fn mtu(&self) -> io::Result<usize> {
        let mut req = ifreq(&self.name);
        // SAFETY: SIOCGIFMTU reads and writes one `ifreq`, which `req` is.
        if unsafe { libc::ioctl(self.ctl.as_raw_fd(), libc::SIOCGIFMTU, &raw mut req) } < 0 {
            return Err(last_error());
        }
        // SAFETY: SIOCGIFMTU filled `ifru_mtu` (an integer).
        let mtu = unsafe { req.ifr_ifru.ifru_mtu };
        Ok(usize::try_from(mtu).unwrap_or(0))
    }

    fn failed(&self, op: &str, e: &io::Error) -> DevError {
        DevError::Failed(io::Error::new(e.kind(), format!("{}: {op} failed: {e}", self.name)))
    }
}

impl AsFd for Tap {
    /// The TAP's file descriptor, to register with epoll or mio (readable when a frame is waiting).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl NetDevice for Tap {
    /// The MTU is read from the kernel on each call (1500 if that fails).
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: self.name.clone(),
            mac: self.mac,
            mtu: self.mtu().unwrap_or(1500),
            queues: 1,
            offloads: DeviceOffloads::NONE,
        }
    }

    /// Up when the interface is administratively up and has carrier (`IFF_UP | IFF_RUNNING`).
    fn link(&self) -> Link {
        match self.flags() {
            Ok(f) if f & libc::IFF_UP != 0 && f & libc::IFF_RUNNING != 0 => Link::Up { speed_mbps: None },
            _ => Link::Down,
        }
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }

    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        DevError::check_queue(queue, 1)?;
        let mut received = 0;
        let mut overflow = [0u8; 1];
        while !batch.is_full() {
            let Some(mut packet) = cache.alloc() else {
                self.stats.rx_no_buffer += 1;
                break;
            };
            let room = packet.tailroom();
            if packet.set_len(room).is_err() {
                break; // unreachable: the tailroom always fits
            }
            let data = packet.data_mut();
            // One byte past the data room tells a frame that fits from one that would be truncated.
            let mut iov = [
                libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() },
                libc::iovec { iov_base: overflow.as_mut_ptr().cast(), iov_len: overflow.len() },
            ];
            // SAFETY: both iovecs describe memory we own exclusively for the call (the packet's data
            // and a local byte); `readv` writes at most their lengths.
            let n = unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_mut_ptr(), 2) };
            let Ok(n) = usize::try_from(n) else {
                let e = last_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(self.failed("read", &e)),
                }
            };
            if n == 0 {
                break;
            }
            if n > room {
                self.stats.rx_dropped += 1;
                tracing::debug!(tap = %self.name, room, "dropped a frame longer than the pool's data room");
                continue;
            }
            if n < 14 {
                self.stats.rx_errors += 1;
                continue;
            }
            packet.truncate(n);
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += n as u64;
            if batch.push(packet).is_err() {
                break; // unreachable: checked `is_full`
            }
            received += 1;
        }
        Ok(received)
    }

    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        DevError::check_queue(queue, 1)?;
        let mut done = 0;
        let mut failure = None;
        while let Some(packet) = batch.as_slice().get(done) {
            let data = packet.data();
            let n = loop {
                // SAFETY: `data` is a live slice of `data.len()` bytes; `write` only reads it.
                let n = unsafe { libc::write(self.fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                if n >= 0 || last_error().kind() != io::ErrorKind::Interrupted {
                    break n;
                }
            };
            match usize::try_from(n) {
                Ok(n) if n == data.len() => {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += n as u64;
                }
                Ok(_) => self.stats.tx_dropped += 1,
                Err(_) => {
                    let e = last_error();
                    match e.raw_os_error() {
                        Some(libc::EAGAIN) => break,
                        Some(libc::EBADF | libc::EBADFD | libc::ENODEV | libc::ENXIO) => {
                            failure = Some(e);
                            break;
                        }
                        _ => {
                            tracing::debug!(tap = %self.name, error = %e, "the kernel refused a frame");
                            self.stats.tx_dropped += 1;
                        }
                    }
                }
            }
            done += 1;
        }
        batch.drain_front(done);
        if let Some(e) = failure {
            return Err(self.failed("write", &e));
        }
        Ok(done)
    }

    /// [`Tap::wait_readable`]: sleeps in `poll(2)` until a frame can be read or `timeout` passes.
    fn wait_rx(&mut self, queue: u16, timeout: Option<Duration>) -> Result<(), DevError> {
        DevError::check_queue(queue, 1)?;
        self.wait_readable(timeout).map(drop).map_err(|e| self.failed("poll", &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused_before_any_syscall() {
        let e = Tap::open("a-very-long-interface-name").unwrap_err();
        assert!(matches!(e, TapError::NameTooLong { .. }));
        assert!(e.to_string().contains("limit is 15"), "{e}");
        assert!(matches!(Tap::open("a/b"), Err(TapError::InvalidName { .. })));
        assert!(matches!(Tap::open(".."), Err(TapError::InvalidName { .. })));
    }

    #[test]
    fn random_macs_are_local_unicast() {
        let (a, b) = (random_mac(), random_mac());
        assert!(a.is_local() && !a.is_multicast());
        assert_ne!(a, b);
    }

    #[test]
    fn errors_say_how_to_fix_them() {
        let e = TapError::NoTunDevice(io::Error::from_raw_os_error(libc::ENOENT));
        assert!(e.to_string().contains("modprobe tun"));
        let e = TapError::PermissionDenied(io::Error::from_raw_os_error(libc::EPERM));
        assert!(e.to_string().contains("CAP_NET_ADMIN"));
    }
}
