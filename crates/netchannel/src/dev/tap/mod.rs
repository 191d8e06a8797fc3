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
//!
//! # Offloads
//!
//! [`Tap::open_with`] and [`TapOptions::offloads`] open the TAP with `IFF_VNET_HDR`, so every frame
//! travels behind a virtio-net header (OASIS "Virtual I/O Device (VIRTIO) Version 1.2", §5.1.6; the
//! TAP side is in Linux's `Documentation/networking/tuntap.rst`), and enable checksum and TCP
//! segmentation offload (`TUNSETOFFLOAD` with `TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 |
//! TUN_F_TSO_ECN`). Then, as [`DeviceInfo::offloads`] says:
//!
//! * a frame sent with a partial checksum ([`Offload::with_partial_checksum`]) leaves it to the
//!   kernel, and a TCP super-segment of up to 64 KiB ([`Offload::with_segmentation`]) is cut into
//!   MSS-sized segments by the kernel: one `writev(2)` of header and frame moves what would have
//!   been up to 45 frames;
//! * the kernel hands up its own TCP super-segments (its sockets' TSO/GSO output, up to 64 KiB),
//!   which arrive with their segmentation metadata and a partial or verified checksum
//!   ([`Offload::checksum_trusted`]). Every header is checked first; one that does not hold (an
//!   offload we never enabled, a checksum field outside the frame, a super-segment that is not TCP)
//!   drops its frame and counts it ([`TapStats::rx_bad_vnet_header`], and `rx_errors`).
//!
//! Receiving needs buffers that hold the largest frame the kernel may send,
//! [`OFFLOAD_DATA_ROOM`] bytes: `rx_burst` refuses a cache of a smaller pool with an error that says
//! so (build it with `Pool::builder(n).data_room(OFFLOAD_DATA_ROOM)`) rather than truncating
//! frames. The header is 12 bytes (`struct virtio_net_hdr_mrg_rxbuf`, set with `TUNSETVNETHDRSZ`),
//! not the legacy 10: that is the header every virtio 1.x device uses, so the same translation
//! serves a vhost or virtio backend later; the TAP ignores the last two bytes (`num_buffers`).
//!
//! Without offloads ([`Tap::open`]) nothing changes: no header, one `read`/`write` per frame, and a
//! frame asking for a partial checksum or segmentation is refused, dropped and counted
//! ([`TapStats::tx_offload_refused`], and `tx_dropped`) rather than sent unfinished.
//!
//! ```no_run
//! use netchannel::dev::{NetDevice, OFFLOAD_DATA_ROOM, Tap, TapOptions};
//! use netchannel::pool::{HugePages, Pool};
//!
//! let tap = Tap::open_with("tap0", TapOptions { offloads: true })?;
//! assert!(tap.info().offloads.tx_tso_max > 0);
//! // 64 KiB super-segments in and out: buffers that hold them.
//! let pool = Pool::builder(256).data_room(OFFLOAD_DATA_ROOM).hugepages(HugePages::Never).build()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use rustix::event::PollFlags;

use super::{DevError, DeviceInfo, DeviceOffloads, DeviceStats, Link, MacAddr, NetDevice, PacketBatch};
use crate::pool::{Offload, Packet, PoolCache};

mod error;
mod vnet;

pub use error::TapError;

/// The data room a pool needs to receive from a TAP with offloads: the largest frame the kernel
/// hands up, a 64 KiB super-segment (65 535 IP bytes, the kernel's default `gso_max_size` for a
/// TAP) behind an Ethernet header and one 802.1Q tag (14 + 4 bytes).
pub const OFFLOAD_DATA_ROOM: usize = 65_535 + 14 + 4;

/// The largest TCP super-segment, in IP packet bytes, a TAP with offloads accepts to cut.
const TSO_MAX: u32 = 65_535;

/// How to open a [`Tap`]; `TapOptions::default()` is what [`Tap::open`] does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapOptions {
    /// Checksum and TCP segmentation offload both ways, behind a virtio-net header (see the
    /// [module documentation](self#offloads)); receiving then needs a pool data room of
    /// [`OFFLOAD_DATA_ROOM`].
    pub offloads: bool,
}

/// The TAP's own counters, beside the [`DeviceStats`] every device keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapStats {
    /// Frames received as TCP super-segments (with segmentation metadata), also in `rx_packets`.
    pub rx_coalesced: u64,
    /// Frames dropped because their virtio-net header did not hold (a short read, an offload never
    /// enabled, a checksum field outside the frame, a super-segment that is not TCP); also in
    /// `rx_errors`.
    pub rx_bad_vnet_header: u64,
    /// Super-segments handed to the kernel to cut, also in `tx_packets`.
    pub tx_super_segments: u64,
    /// Frames asking for a partial checksum or segmentation handed to a TAP opened without
    /// offloads: dropped, also in `tx_dropped`.
    pub tx_offload_refused: u64,
}

/// Whether `offload` asks the device to finish something on transmit.
fn asks_device(offload: Offload) -> bool {
    offload.partial_checksum().is_some() || offload.segmentation().is_some()
}

/// A Linux TAP interface (see the [module documentation](self)).
///
/// `rx_burst` reads frames, one `read(2)` each, until the kernel has none (`EAGAIN`), the batch is
/// full or the cache has no buffer (frames then wait in the kernel's queue). A frame longer than the
/// pool's data room is dropped and counted in [`DeviceStats::rx_dropped`], never truncated; a frame
/// shorter than an Ethernet header counts in `rx_errors`. `tx_burst` writes frames, one `write(2)`
/// each, until the kernel refuses with `EAGAIN` (the rest stay in the batch); a frame the kernel
/// rejects (too long, malformed) is dropped and counted in `tx_dropped`. With
/// [offloads](self#offloads), each read and write is one `readv(2)`/`writev(2)` of a virtio-net
/// header and the frame.
#[derive(Debug)]
pub struct Tap {
    fd: OwnedFd,
    /// An `AF_INET` datagram socket for the interface ioctls (MTU, flags).
    ctl: OwnedFd,
    name: String,
    mac: MacAddr,
    /// Opened with `IFF_VNET_HDR` and the offloads on.
    offloads: bool,
    stats: DeviceStats,
    tap_stats: TapStats,
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

/// Sets the virtio-net header size (12 bytes) and turns checksum and TCP segmentation offload on,
/// on a TAP opened with `IFF_VNET_HDR`.
fn enable_offloads(fd: &OwnedFd) -> Result<(), TapError> {
    let size = libc::c_int::try_from(vnet::LEN).unwrap_or(12);
    // SAFETY: TUNSETVNETHDRSZ reads one `int` through the pointer, which `size` is.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &raw const size) } < 0 {
        return Err(TapError::Io { op: "ioctl(TUNSETVNETHDRSZ)", source: last_error() });
    }
    let features = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;
    // SAFETY: TUNSETOFFLOAD takes the feature bits as the argument's value and dereferences nothing.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, libc::c_ulong::from(features)) } < 0 {
        return Err(TapError::Io { op: "ioctl(TUNSETOFFLOAD)", source: last_error() });
    }
    Ok(())
}

/// `call` again while it fails with `EINTR`.
fn retry(mut call: impl FnMut() -> isize) -> isize {
    loop {
        let n = call();
        if n >= 0 || last_error().kind() != io::ErrorKind::Interrupted {
            return n;
        }
    }
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
        Self::open_with(name, TapOptions::default())
    }

    /// [`Tap::open`], with `options`: with [`TapOptions::offloads`], the TAP speaks virtio-net
    /// headers and has checksum and TCP segmentation offload on (see the
    /// [module documentation](self#offloads)).
    ///
    /// # Errors
    ///
    /// Those of [`Tap::open`]; [`TapError::Io`] naming `TUNSETVNETHDRSZ` or `TUNSETOFFLOAD` where
    /// the kernel refuses the offloads.
    pub fn open_with(name: &str, options: TapOptions) -> Result<Self, TapError> {
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
        let vnet = if options.offloads { libc::IFF_VNET_HDR } else { 0 };
        // IFF_TAP | IFF_NO_PI | IFF_VNET_HDR = 0x5002 fits `c_short`.
        req.ifr_ifru.ifru_flags = i16::try_from(libc::IFF_TAP | libc::IFF_NO_PI | vnet).unwrap_or(0x1002);
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
        if options.offloads {
            enable_offloads(&fd)?;
        }

        // SAFETY: plain socket creation; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(TapError::Io { op: "socket(AF_INET, SOCK_DGRAM)", source: last_error() });
        }
        // SAFETY: `raw` is a descriptor `socket` just returned, owned by nobody else.
        let ctl = unsafe { OwnedFd::from_raw_fd(raw) };
        let tap = Self {
            fd,
            ctl,
            name: actual,
            mac: random_mac(),
            offloads: options.offloads,
            stats: DeviceStats::default(),
            tap_stats: TapStats::default(),
        };
        tap.flags().map_err(|source| TapError::Io { op: "ioctl(SIOCGIFFLAGS)", source })?;
        tracing::debug!(name = %tap.name, mac = %tap.mac, offloads = tap.offloads, "TAP interface opened");
        Ok(tap)
    }

    /// The interface's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The TAP's own counters (offloads), beside [`NetDevice::stats`].
    #[must_use]
    pub fn tap_stats(&self) -> TapStats {
        self.tap_stats
    }

    /// Waits until a frame can be read or `timeout` passes (`None`: no limit); returns whether one
    /// can. Interrupted waits (`EINTR`) count as "not yet".
    ///
    /// The timeout is kept to the nanosecond (`ppoll(2)`, not `poll(2)`'s milliseconds): a paced
    /// connection's next departure is often a fraction of a millisecond ahead, and a wait rounded
    /// up to a whole millisecond would cap its rate at one packet a millisecond.
    ///
    /// # Errors
    ///
    /// What `ppoll(2)` reports, or an error condition on the descriptor.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let revents = super::wait_readable(self.fd.as_fd(), timeout)?;
        if revents.intersects(PollFlags::ERR | PollFlags::NVAL) {
            return Err(io::Error::other(format!("{}: error condition on the TAP descriptor", self.name)));
        }
        Ok(revents.contains(PollFlags::IN))
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

    /// Writes `packet` behind the virtio-net header `offload` translates to, with one `writev(2)`:
    /// what it returned, and the count that means all of it.
    fn write_vnet(&self, packet: &Packet<'_>, offload: Offload) -> (isize, usize) {
        let header = vnet::encode(offload);
        let data = packet.data();
        let iov = [
            libc::iovec { iov_base: header.as_ptr().cast_mut().cast(), iov_len: header.len() },
            libc::iovec { iov_base: data.as_ptr().cast_mut().cast(), iov_len: data.len() },
        ];
        // SAFETY: both iovecs describe live memory (a local header, the packet's data) of their
        // lengths; `writev` only reads them, whatever the `*mut` in `iovec` says.
        let n = retry(|| unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) });
        (n, header.len() + data.len())
    }

    /// The error of `rx_burst` with offloads on a cache whose buffers hold `room` bytes.
    fn data_room_too_small(&self, room: usize) -> DevError {
        DevError::Failed(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: a TAP with offloads hands up frames of up to {OFFLOAD_DATA_ROOM} bytes and this pool's buffers \
                 hold {room}: build the pool with `Pool::builder(n).data_room(netchannel::dev::OFFLOAD_DATA_ROOM)`",
                self.name
            ),
        ))
    }

    /// Drops a received frame whose virtio-net header did not hold, and counts it.
    fn bad_header(&mut self, e: &vnet::VnetError) {
        self.stats.rx_errors += 1;
        self.tap_stats.rx_bad_vnet_header += 1;
        tracing::debug!(tap = %self.name, error = %e, "dropped a frame with a bad virtio-net header");
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
        let offloads = if self.offloads {
            DeviceOffloads { tx_checksum: true, tx_tso_max: TSO_MAX, rx_coalesced: true, rx_checksum: true }
        } else {
            DeviceOffloads::NONE
        };
        DeviceInfo {
            name: self.name.clone(),
            mac: self.mac,
            mtu: self.mtu().unwrap_or(1500),
            queues: 1,
            offloads,
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
        // With offloads each read is [virtio-net header, frame, 1 byte]; without, [frame, 1 byte]:
        // the same `readv` as ever, from the second iovec on.
        let (skip, count, header_len): (usize, libc::c_int, usize) =
            if self.offloads { (0, 3, vnet::LEN) } else { (1, 2, 0) };
        let mut header = [0u8; vnet::LEN];
        let mut overflow = [0u8; 1];
        while !batch.is_full() {
            let Some(mut packet) = cache.alloc() else {
                self.stats.rx_no_buffer += 1;
                break;
            };
            let room = packet.tailroom();
            if self.offloads && room < OFFLOAD_DATA_ROOM {
                return Err(self.data_room_too_small(room));
            }
            if packet.set_len(room).is_err() {
                break; // unreachable: the tailroom always fits
            }
            let data = packet.data_mut();
            // One byte past the data room tells a frame that fits from one that would be truncated.
            let mut iov = [
                libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: header.len() },
                libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() },
                libc::iovec { iov_base: overflow.as_mut_ptr().cast(), iov_len: overflow.len() },
            ];
            let iov = &mut iov[skip..];
            // SAFETY: the iovecs describe memory we own exclusively for the call (a local header, the
            // packet's data, a local byte); `readv` writes at most their lengths. `count` is `iov.len()`.
            let n = unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_mut_ptr(), count) };
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
            let Some(len) = n.checked_sub(header_len) else {
                self.bad_header(&vnet::VnetError::Short { len: n });
                continue;
            };
            if len > room {
                self.stats.rx_dropped += 1;
                tracing::debug!(tap = %self.name, room, "dropped a frame longer than the pool's data room");
                continue;
            }
            if len < 14 {
                self.stats.rx_errors += 1;
                continue;
            }
            packet.truncate(len);
            if self.offloads {
                match vnet::decode(&header, packet.data()) {
                    Ok(offload) if offload.is_none() => {}
                    Ok(offload) => {
                        if offload.segmentation().is_some() {
                            self.tap_stats.rx_coalesced += 1;
                        }
                        packet.set_offload(offload);
                    }
                    Err(e) => {
                        self.bad_header(&e);
                        continue;
                    }
                }
            }
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += len as u64;
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
            let offload = packet.offload();
            let (n, expected) = if self.offloads {
                self.write_vnet(packet, offload)
            } else if asks_device(offload) {
                tracing::debug!(tap = %self.name, ?offload, "refused a frame asking for an offload this TAP lacks");
                self.tap_stats.tx_offload_refused += 1;
                self.stats.tx_dropped += 1;
                done += 1;
                continue;
            } else {
                let data = packet.data();
                // SAFETY: `data` is a live slice of `data.len()` bytes; `write` only reads it.
                let n =
                    retry(|| unsafe { libc::write(self.fd.as_raw_fd(), data.as_ptr().cast(), data.len()) });
                (n, data.len())
            };
            match usize::try_from(n) {
                Ok(n) if n == expected => {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += packet.len() as u64;
                    if offload.segmentation().is_some() {
                        self.tap_stats.tx_super_segments += 1;
                    }
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

    /// [`Tap::wait_readable`]: sleeps in `ppoll(2)` until a frame can be read or `timeout` passes.
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
