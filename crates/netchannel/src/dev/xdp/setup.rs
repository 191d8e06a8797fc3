//! Opening an AF_XDP device: the [`AfXdpBuilder`] and its options, the sockets, their rings and the
//! UMEM registration, the redirect program's attachment, and the ethtool and ioctl queries about the
//! interface ([`rx_queues`]).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use super::error::classify;
use super::ring::Ring;
use super::umem::{Held, Owned, Umem};
use super::{AfXdp, Queue, Shared, XdpError, Xsk, bpf};
use crate::dev::{DeviceStats, MacAddr, RxFrame};
use crate::pool::Pool;

/// How long `bind` retries `EBUSY` (a queue whose previous socket is still being released).
const BIND_BUSY_RETRY: Duration = Duration::from_millis(250);
/// The default size of every ring.
pub const DEFAULT_RING_SIZE: u32 = 1024;

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpMode {
    /// Generic ("SKB") XDP: in the stack, after the kernel built an skb; works on every interface,
    /// always copy mode.
    Generic,
    /// Native ("driver") XDP: in the driver's receive path, before any skb; needs driver support
    /// (veth, most 10G+ NICs). Zero-copy where the driver also supports AF_XDP zero-copy.
    Native,
    /// Native where the driver has it, generic otherwise.
    #[default]
    Auto,
}

/// Whether frames move between the NIC and the UMEM without a copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Zero-copy when the driver supports it, copy mode otherwise (bind with neither flag).
    #[default]
    Auto,
    /// Always copy mode (`XDP_COPY`).
    Never,
    /// Zero-copy or fail (`XDP_ZEROCOPY`); only with [`XdpMode::Native`].
    Require,
}

/// Busy polling on each socket (Linux 5.11+, `CONFIG_NET_RX_BUSY_POLL`; the kernel's
/// `Documentation/networking/napi.rst`, "Busy polling" and "Preferred busy polling").
///
/// `SO_PREFER_BUSY_POLL` asks the kernel to leave the queue's NAPI to the application (with the
/// interface's `napi_defer_hard_irqs` and `gro_flush_timeout`, interrupts stay off while it keeps
/// polling); `SO_BUSY_POLL` how many microseconds a `recvfrom`/`poll` on the socket may spin in the
/// driver's NAPI; `SO_BUSY_POLL_BUDGET` how many frames one such poll may take. With busy polling
/// on, an RX burst that finds its ring empty calls `recvfrom` to run the NAPI (counted in
/// [`XdpStats::busy_polls`](super::XdpStats::busy_polls)), as the kernel's `xdpsock` sample does.
/// Preferring busy polling, setting a budget, or busy polling longer than the sysctl
/// `net.core.busy_read` allows needs `CAP_NET_ADMIN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusyPoll {
    /// `SO_PREFER_BUSY_POLL`.
    pub prefer: bool,
    /// `SO_BUSY_POLL`: microseconds a receive may spin in the driver.
    pub usecs: u32,
    /// `SO_BUSY_POLL_BUDGET`: frames per busy poll (the kernel's default is 8; 64 is NAPI's weight).
    pub budget: u16,
}

impl Default for BusyPoll {
    /// Preferred, 20 us, a budget of 64: what the kernel's `xdpsock` sample sets with `--busy-poll`.
    fn default() -> Self {
        Self { prefer: true, usecs: 20, budget: 64 }
    }
}

/// A builder for [`AfXdp`]: interface, queues, mode, ring sizes.
#[derive(Clone, Debug)]
pub struct AfXdpBuilder {
    iface: String,
    first_queue: u32,
    queues: u16,
    mode: XdpMode,
    zero_copy: ZeroCopy,
    ring_size: u32,
    fill_size: u32,
    need_wakeup: bool,
    busy_poll: Option<BusyPoll>,
}

impl AfXdpBuilder {
    /// Interface `iface`, queue 0, [`XdpMode::Auto`], [`ZeroCopy::Auto`], rings of
    /// [`DEFAULT_RING_SIZE`], wakeups on demand.
    #[must_use]
    pub fn new(iface: &str) -> Self {
        Self {
            iface: iface.to_owned(),
            first_queue: 0,
            queues: 1,
            mode: XdpMode::Auto,
            zero_copy: ZeroCopy::Auto,
            ring_size: DEFAULT_RING_SIZE,
            fill_size: DEFAULT_RING_SIZE,
            need_wakeup: true,
            busy_poll: None,
        }
    }

    /// Parses `IFACE[:QUEUE]` (the command-line form): the interface and one queue (0 if omitted).
    ///
    /// # Errors
    ///
    /// [`XdpError::InvalidConfig`] when the queue is not a number.
    pub fn parse(spec: &str) -> Result<Self, XdpError> {
        match spec.rsplit_once(':') {
            Some((iface, q)) => {
                let q = q.parse().map_err(|_| {
                    XdpError::InvalidConfig(format!("{spec:?}: the queue after ':' is not a number"))
                })?;
                Ok(Self::new(iface).queue(q))
            }
            None => Ok(Self::new(spec)),
        }
    }

    /// Serve NIC queue `queue` only (the value's queue 0).
    #[must_use]
    pub fn queue(self, queue: u32) -> Self {
        self.queues(queue, 1)
    }

    /// Serve NIC queues `first..first + count`, as the value's queues `0..count`.
    #[must_use]
    pub fn queues(mut self, first: u32, count: u16) -> Self {
        self.first_queue = first;
        self.queues = count;
        self
    }

    /// Where the XDP program runs.
    #[must_use]
    pub fn mode(mut self, mode: XdpMode) -> Self {
        self.mode = mode;
        self
    }

    /// Zero-copy policy.
    #[must_use]
    pub fn zero_copy(mut self, zero_copy: ZeroCopy) -> Self {
        self.zero_copy = zero_copy;
        self
    }

    /// Entries of the RX, TX and completion rings (a power of two).
    #[must_use]
    pub fn ring_size(mut self, entries: u32) -> Self {
        self.ring_size = entries;
        self
    }

    /// Entries of the fill ring (a power of two): the buffers each queue keeps posted for reception.
    #[must_use]
    pub fn fill_size(mut self, entries: u32) -> Self {
        self.fill_size = entries;
        self
    }

    /// Whether to bind with `XDP_USE_NEED_WAKEUP` (on by default): the kernel is only woken when it
    /// asks. Off, every TX burst and every empty-handed RX burst makes a system call.
    #[must_use]
    pub fn need_wakeup(mut self, on: bool) -> Self {
        self.need_wakeup = on;
        self
    }

    /// Busy polling on every socket (off by default); see [`BusyPoll`].
    #[must_use]
    pub fn busy_poll(mut self, busy_poll: Option<BusyPoll>) -> Self {
        self.busy_poll = busy_poll;
        self
    }

    fn validate(&self) -> Result<(), XdpError> {
        let name = &self.iface;
        if !valid_name(name) {
            return Err(XdpError::InvalidName { name: name.clone() });
        }
        for (what, n) in [("ring_size", self.ring_size), ("fill_size", self.fill_size)] {
            if !n.is_power_of_two() || !(64..=1 << 16).contains(&n) {
                return Err(XdpError::InvalidConfig(format!(
                    "{what} is {n}; it must be a power of two from 64 to 65536"
                )));
            }
        }
        if self.queues == 0 || self.first_queue.checked_add(u32::from(self.queues)).is_none() {
            return Err(XdpError::InvalidConfig(format!(
                "queues {}..+{}: at least one queue, within u32",
                self.first_queue, self.queues
            )));
        }
        if self.zero_copy == ZeroCopy::Require && self.mode == XdpMode::Generic {
            return Err(XdpError::ZeroCopyUnsupported { name: name.clone(), source: None });
        }
        Ok(())
    }

    /// Opens the device on `pool`: the pool's region becomes the UMEM, and the fill rings are filled
    /// from a cache of it.
    ///
    /// # Errors
    ///
    /// [`XdpError`], whose message says what is missing and how to fix it.
    pub fn open(self, pool: &Pool) -> Result<AfXdp, XdpError> {
        self.validate()?;
        // SAFETY: sysconf takes an integer and reads no memory.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = usize::try_from(page).ok().filter(|p| p.is_power_of_two()).unwrap_or(4096);
        let umem = Umem::new(pool, page)?;
        let needed = self.fill_size as usize * usize::from(self.queues);
        if (pool.buffers() as usize) < needed {
            return Err(XdpError::PoolExhausted { needed, got: pool.buffers() as usize });
        }
        let name = self.iface.clone();
        let cname = CString::new(name.clone()).map_err(|_| XdpError::InvalidName { name: name.clone() })?;
        // SAFETY: `cname` is NUL-terminated; the call reads nothing else.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(XdpError::NoSuchInterface { name });
        }
        // SAFETY: plain socket creation; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(classify("socket(AF_INET, SOCK_DGRAM)", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a descriptor `socket` just returned, owned by nobody else.
        let ctl = unsafe { OwnedFd::from_raw_fd(raw) };
        let mac = hwaddr(&ctl, &name).map_err(|e| classify("ioctl(SIOCGIFHWADDR)", e))?;

        let mut shared = Shared {
            xdp: None,
            name,
            ifindex,
            mac,
            mode: XdpMode::Generic,
            zero_copy: false,
            ctl,
            umem,
            _pool: pool.clone(),
        };
        let mut queues = Vec::with_capacity(usize::from(self.queues));
        // From here on, dropping `queues` closes the sockets opened so far and frees the buffers they
        // hold; dropping `shared` detaches the program, if it was attached.
        self.setup(&mut shared, &mut queues, pool)?;
        Ok(AfXdp { shared: Arc::new(shared), queues })
    }

    fn setup(&self, shared: &mut Shared, queues: &mut Vec<Queue>, pool: &Pool) -> Result<(), XdpError> {
        let mut bind_flags = match (self.mode, self.zero_copy) {
            (XdpMode::Generic, _) | (_, ZeroCopy::Never) => libc::XDP_COPY,
            (_, ZeroCopy::Require) => libc::XDP_ZEROCOPY,
            (_, ZeroCopy::Auto) => 0,
        };
        if self.need_wakeup {
            bind_flags |= libc::XDP_USE_NEED_WAKEUP;
        }
        for q in 0..u32::from(self.queues) {
            let nic_queue = self.first_queue + q;
            let first = queues.first().map(|x| x.xsk.fd.as_raw_fd());
            let queue = self.socket(shared, pool, nic_queue, first, bind_flags)?;
            queues.push(queue);
        }
        // Post the fill rings before the program redirects anything.
        for (qi, queue) in queues.iter_mut().enumerate() {
            let posted = queue.refill();
            if posted < self.fill_size {
                let got = posted as usize + qi * self.fill_size as usize;
                return Err(XdpError::PoolExhausted {
                    needed: self.fill_size as usize * usize::from(self.queues),
                    got,
                });
            }
        }
        shared.zero_copy = queues.iter().all(|x| x.owned.zero_copy);
        self.attach(shared, queues)?;
        let mtu = shared.mtu().unwrap_or(0);
        if mtu + 14 > shared.umem.frame_room as usize {
            tracing::warn!(
                iface = %shared.name, mtu, frame_room = shared.umem.frame_room,
                "the interface's MTU exceeds the UMEM frame room: larger frames will be dropped"
            );
        }
        tracing::debug!(
            iface = %shared.name, mode = ?shared.mode, zero_copy = shared.zero_copy, queues = queues.len(),
            "AF_XDP device opened"
        );
        Ok(())
    }

    /// Creates, configures and binds the socket of `nic_queue`; `shared` is the first socket, whose
    /// UMEM the others share.
    fn socket(
        &self,
        dev: &Shared,
        pool: &Pool,
        nic_queue: u32,
        shared: Option<std::os::fd::RawFd>,
        bind_flags: u16,
    ) -> Result<Queue, XdpError> {
        // SAFETY: plain socket creation; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(classify("socket(AF_XDP)", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a descriptor `socket` just returned, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        if shared.is_none() {
            let reg = libc::xdp_umem_reg {
                addr: pool.region().as_ptr() as u64,
                len: dev.umem.len,
                chunk_size: dev.umem.chunk_size,
                headroom: 0,
                flags: libc::XDP_UMEM_UNALIGNED_CHUNK_FLAG,
                tx_metadata_len: 0,
            };
            setsockopt(&fd, libc::XDP_UMEM_REG, &reg).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOMEM | libc::ENOBUFS | libc::EAGAIN) => XdpError::MemlockLimit(e),
                Some(libc::EINVAL) => XdpError::PoolGeometry(format!(
                    "the kernel refused the UMEM ({e}): {} bytes, {}-byte unaligned chunks (needs Linux 5.4+)",
                    dev.umem.len, dev.umem.chunk_size
                )),
                _ => classify("setsockopt(XDP_UMEM_REG)", e),
            })?;
        }
        let rings = [
            (libc::XDP_UMEM_FILL_RING, self.fill_size, "setsockopt(XDP_UMEM_FILL_RING)"),
            (libc::XDP_UMEM_COMPLETION_RING, self.ring_size, "setsockopt(XDP_UMEM_COMPLETION_RING)"),
            (libc::XDP_RX_RING, self.ring_size, "setsockopt(XDP_RX_RING)"),
            (libc::XDP_TX_RING, self.ring_size, "setsockopt(XDP_TX_RING)"),
        ];
        for (opt, size, op) in rings {
            setsockopt(&fd, opt, &size).map_err(|e| classify(op, e))?;
        }
        if let Some(busy) = self.busy_poll {
            set_busy_poll(&fd, busy)?;
        }
        let off = mmap_offsets(&fd).map_err(|e| classify("getsockopt(XDP_MMAP_OFFSETS)", e))?;
        let pgoff = |o: u64| libc::off_t::try_from(o).unwrap_or(libc::off_t::MAX);
        let map_err = |op| move |e| classify(op, e);
        let fill = Ring::map(&fd, &off.fr, self.fill_size, pgoff(libc::XDP_UMEM_PGOFF_FILL_RING), true)
            .map_err(map_err("mmap(fill ring)"))?;
        let comp =
            Ring::map(&fd, &off.cr, self.ring_size, pgoff(libc::XDP_UMEM_PGOFF_COMPLETION_RING), false)
                .map_err(map_err("mmap(completion ring)"))?;
        let rx = Ring::map(&fd, &off.rx, self.ring_size, libc::XDP_PGOFF_RX_RING, false)
            .map_err(map_err("mmap(RX ring)"))?;
        let tx = Ring::map(&fd, &off.tx, self.ring_size, libc::XDP_PGOFF_TX_RING, true)
            .map_err(map_err("mmap(TX ring)"))?;

        let mut sa = libc::sockaddr_xdp {
            sxdp_family: u16::try_from(libc::AF_XDP).unwrap_or(44),
            sxdp_flags: bind_flags,
            sxdp_ifindex: dev.ifindex,
            sxdp_queue_id: nic_queue,
            sxdp_shared_umem_fd: 0,
        };
        if let Some(first) = shared {
            // A socket sharing the UMEM inherits its flags; the kernel refuses others.
            sa.sxdp_flags = libc::XDP_SHARED_UMEM;
            sa.sxdp_shared_umem_fd = u32::try_from(first).unwrap_or(u32::MAX);
        }
        let len = libc::socklen_t::try_from(size_of::<libc::sockaddr_xdp>()).unwrap_or(16);
        // The kernel releases a closed socket's hold on its queue from a work item, a moment after
        // `close` returns: `EBUSY` right after another socket of this process closed is retried for
        // up to BIND_BUSY_RETRY.
        let busy_until = std::time::Instant::now() + BIND_BUSY_RETRY;
        let bound = loop {
            // SAFETY: `sa` is a `sockaddr_xdp` of `len` bytes, read by the kernel during the call.
            if unsafe { libc::bind(fd.as_raw_fd(), std::ptr::from_ref(&sa).cast(), len) } == 0 {
                break Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) || std::time::Instant::now() >= busy_until {
                break Err(e);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if let Err(e) = bound {
            let name = dev.name.clone();
            return Err(match e.raw_os_error() {
                Some(libc::EBUSY) => XdpError::QueueBusy { name, queue: nic_queue, source: e },
                Some(libc::EOPNOTSUPP | libc::EPROTONOSUPPORT) if bind_flags & libc::XDP_ZEROCOPY != 0 => {
                    XdpError::ZeroCopyUnsupported { name, source: Some(e) }
                }
                Some(libc::EINVAL) => XdpError::NoSuchQueue { name, queue: nic_queue, source: e },
                _ => classify("bind(AF_XDP)", e),
            });
        }
        let burst = self.ring_size.max(self.fill_size) as usize;
        let xsk = Xsk {
            nic_queue,
            fill,
            comp,
            rx,
            tx,
            recycle: Vec::with_capacity(self.ring_size as usize),
            scratch: vec![0; burst],
            frames: vec![RxFrame::default(); self.ring_size as usize],
            fill_size: self.fill_size,
            tx_outstanding: 0,
            busy_poll: self.busy_poll.is_some(),
            busy_polls: 0,
            rx_wakeups: 0,
            tx_wakeups: 0,
            parked: 0,
            tx_frames_copied: 0,
            fd,
        };
        let zero_copy = is_zero_copy(&xsk.fd);
        Ok(Queue {
            xsk,
            umem: dev.umem,
            pool_id: pool.id(),
            stats: DeviceStats::default(),
            owned: Owned { held: Held::new(dev.umem.count), cache: pool.cache(), zero_copy, nic_queue },
        })
    }

    /// Creates the map, loads the program, attaches it in the requested mode.
    fn attach(&self, dev: &mut Shared, queues: &[Queue]) -> Result<(), XdpError> {
        let entries = self.first_queue + u32::from(self.queues);
        let map = bpf::create_xskmap(entries).map_err(|e| classify("bpf(BPF_MAP_CREATE, XSKMAP)", e))?;
        for Queue { xsk, .. } in queues {
            bpf::set_xsk(&map, xsk.nic_queue, &xsk.fd)
                .map_err(|e| classify("bpf(BPF_MAP_UPDATE_ELEM, XSKMAP)", e))?;
        }
        let prog = bpf::load_redirect_program(&map).map_err(|bpf::LoadError { error, log }| {
            match error.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) if log.is_empty() => classify("bpf(BPF_PROG_LOAD)", error),
                _ => XdpError::ProgramRejected { source: error, log },
            }
        })?;
        let try_mode = |flags| bpf::attach_xdp(&prog, dev.ifindex, flags);
        let name = dev.name.clone();
        let attach_err = |e: io::Error| match e.raw_os_error() {
            Some(libc::EBUSY | libc::EEXIST) => XdpError::AlreadyAttached { name: name.clone(), source: e },
            // Before Linux 5.9 the kernel knows no XDP links and answers EINVAL; on a kernel
            // that has them, EINVAL means our attributes are wrong: a bug, not missing support.
            Some(libc::EINVAL) if !super::error::running_kernel_has_xdp_links() => {
                XdpError::Unsupported { op: "bpf(BPF_LINK_CREATE, BPF_XDP)", source: e }
            }
            _ => classify("bpf(BPF_LINK_CREATE, BPF_XDP)", e),
        };
        let native_unsupported = |e: &io::Error| e.raw_os_error() == Some(libc::EOPNOTSUPP);
        let (link, mode) = match self.mode {
            XdpMode::Generic => (try_mode(bpf::XDP_FLAGS_SKB_MODE).map_err(attach_err)?, XdpMode::Generic),
            XdpMode::Native => match try_mode(bpf::XDP_FLAGS_DRV_MODE) {
                Ok(link) => (link, XdpMode::Native),
                Err(e) if native_unsupported(&e) => {
                    return Err(XdpError::NativeUnsupported { name: name.clone(), source: e });
                }
                Err(e) => return Err(attach_err(e)),
            },
            XdpMode::Auto => match try_mode(bpf::XDP_FLAGS_DRV_MODE) {
                Ok(link) => (link, XdpMode::Native),
                Err(e) if native_unsupported(&e) => {
                    (try_mode(bpf::XDP_FLAGS_SKB_MODE).map_err(attach_err)?, XdpMode::Generic)
                }
                Err(e) => return Err(attach_err(e)),
            },
        };
        dev.mode = mode;
        dev.xdp = Some(bpf::Redirect { _link: link, _prog: prog, _map: map });
        Ok(())
    }
}

/// Sets the busy-polling options in the order the kernel's `xdpsock` sample does (prefer,
/// microseconds, budget).
fn set_busy_poll(fd: &OwnedFd, busy: BusyPoll) -> Result<(), XdpError> {
    let usecs = libc::c_int::try_from(busy.usecs).unwrap_or(libc::c_int::MAX);
    let options = [
        (libc::SO_PREFER_BUSY_POLL, libc::c_int::from(busy.prefer), "SO_PREFER_BUSY_POLL"),
        (libc::SO_BUSY_POLL, usecs, "SO_BUSY_POLL"),
        (libc::SO_BUSY_POLL_BUDGET, libc::c_int::from(busy.budget), "SO_BUSY_POLL_BUDGET"),
    ];
    for (opt, value, option) in options {
        setsockopt_at(fd, libc::SOL_SOCKET, opt, &value)
            .map_err(|source| XdpError::BusyPoll { option, source })?;
    }
    Ok(())
}

fn setsockopt<T>(fd: &OwnedFd, opt: libc::c_int, value: &T) -> io::Result<()> {
    setsockopt_at(fd, libc::SOL_XDP, opt, value)
}

fn setsockopt_at<T>(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, value: &T) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<T>()).unwrap_or(0);
    // SAFETY: `value` is a live `T` of `len` bytes, only read by the kernel during the call.
    let r = unsafe { libc::setsockopt(fd.as_raw_fd(), level, opt, std::ptr::from_ref(value).cast(), len) };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// `getsockopt(SOL_XDP, opt)` into a zeroed `T`; returns it and the length the kernel wrote.
pub(super) fn getsockopt<T: Copy>(fd: &impl AsRawFd, opt: libc::c_int, zero: T) -> io::Result<(T, usize)> {
    let mut value = zero;
    let mut len = libc::socklen_t::try_from(size_of::<T>()).unwrap_or(0);
    // SAFETY: `value` is a live `T` of `len` bytes that the kernel writes at most `len` bytes of.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            std::ptr::from_mut(&mut value).cast(),
            &raw mut len,
        )
    };
    if r == 0 { Ok((value, len as usize)) } else { Err(io::Error::last_os_error()) }
}

fn mmap_offsets(fd: &OwnedFd) -> io::Result<libc::xdp_mmap_offsets> {
    let zero_ring = libc::xdp_ring_offset { producer: 0, consumer: 0, desc: 0, flags: 0 };
    let zero = libc::xdp_mmap_offsets { rx: zero_ring, tx: zero_ring, fr: zero_ring, cr: zero_ring };
    let (off, len) = getsockopt(fd, libc::XDP_MMAP_OFFSETS, zero)?;
    if len != size_of::<libc::xdp_mmap_offsets>() {
        return Err(io::Error::other(
            "the kernel's ring layout has no flags word (Linux < 5.4); AF_XDP needs Linux 5.9+",
        ));
    }
    Ok(off)
}

fn is_zero_copy(fd: &OwnedFd) -> bool {
    getsockopt(fd, libc::XDP_OPTIONS, libc::xdp_options { flags: 0 })
        .is_ok_and(|(o, _)| o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
}

/// `ETHTOOL_GCHANNELS` (linux/ethtool.h; ours because `libc` has `SIOCETHTOOL` but none of the
/// ethtool commands or structures).
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// `struct ethtool_channels` (linux/ethtool.h).
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// How many receive queues interface `iface` has: an AF_XDP socket can bind to queues `0..n`.
///
/// Asks the driver first (`ETHTOOL_GCHANNELS`: its RX plus combined channels, as `ethtool -l`
/// shows them), in the calling thread's network namespace; then counts
/// `/sys/class/net/IFACE/queues/rx-*` (which shows the namespace sysfs was mounted in, so it is
/// only consulted when the driver cannot say); every interface has at least one.
///
/// # Errors
///
/// [`XdpError::InvalidName`], [`XdpError::NoSuchInterface`], or the failure to create the socket the
/// ioctl goes through.
pub fn rx_queues(iface: &str) -> Result<u32, XdpError> {
    if !valid_name(iface) {
        return Err(XdpError::InvalidName { name: iface.to_owned() });
    }
    let cname = CString::new(iface).map_err(|_| XdpError::InvalidName { name: iface.to_owned() })?;
    // SAFETY: `cname` is NUL-terminated; the call reads nothing else.
    if unsafe { libc::if_nametoindex(cname.as_ptr()) } == 0 {
        return Err(XdpError::NoSuchInterface { name: iface.to_owned() });
    }
    // SAFETY: plain socket creation; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(classify("socket(AF_INET, SOCK_DGRAM)", io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a descriptor `socket` just returned, owned by nobody else.
    let ctl = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut channels = EthtoolChannels { cmd: ETHTOOL_GCHANNELS, ..EthtoolChannels::default() };
    let mut req = ifreq(iface);
    req.ifr_ifru.ifru_data = (&raw mut channels).cast();
    // SAFETY: SIOCETHTOOL reads `req` and the command structure its data pointer names, which is a
    // live `ethtool_channels` the kernel writes at most `size_of::<EthtoolChannels>()` bytes of
    // (ETHTOOL_GCHANNELS), for the duration of the call.
    let r = unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCETHTOOL, &raw mut req) };
    if r == 0 {
        let n = channels.rx_count.saturating_add(channels.combined_count);
        if n > 0 {
            return Ok(n);
        }
    }
    let from_sysfs = std::fs::read_dir(format!("/sys/class/net/{iface}/queues")).map(|dir| {
        dir.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count()
    });
    Ok(from_sysfs.ok().and_then(|n| u32::try_from(n).ok()).filter(|&n| n > 0).unwrap_or(1))
}

/// Interface names are 1 to 15 bytes without NUL, `/` or whitespace.
fn valid_name(name: &str) -> bool {
    !(name.is_empty()
        || name.len() >= libc::IFNAMSIZ
        || name.bytes().any(|b| b == 0 || b == b'/' || b.is_ascii_whitespace())
        || name == "."
        || name == "..")
}

/// `ifreq` with the name filled in and the union zeroed.
pub(super) fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: `ifreq` is plain old data; all zeroes is a valid value of each union member.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(name.as_bytes()).take(libc::IFNAMSIZ - 1) {
        *dst = src.cast_signed();
    }
    req
}

fn hwaddr(ctl: &OwnedFd, name: &str) -> io::Result<MacAddr> {
    let mut req = ifreq(name);
    // SAFETY: SIOCGIFHWADDR reads and writes one `ifreq`, which `req` is.
    if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCGIFHWADDR, &raw mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFHWADDR filled `ifru_hwaddr` (a sockaddr of integers: every bit pattern is valid).
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = s.cast_unsigned();
    }
    Ok(MacAddr(mac))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::xdp::tests::pool;

    #[test]
    fn builder_settings_are_checked_before_any_syscall() {
        let p = pool(2048, 128);
        let bad = |b: AfXdpBuilder| b.open(&p).unwrap_err();
        assert!(matches!(bad(AfXdp::builder("")), XdpError::InvalidName { .. }));
        assert!(matches!(bad(AfXdp::builder("a-very-long-interface")), XdpError::InvalidName { .. }));
        assert!(matches!(bad(AfXdp::builder("lo").ring_size(1000)), XdpError::InvalidConfig(_)));
        assert!(matches!(bad(AfXdp::builder("lo").queues(0, 0)), XdpError::InvalidConfig(_)));
        let e = bad(AfXdp::builder("lo").mode(XdpMode::Generic).zero_copy(ZeroCopy::Require));
        assert!(matches!(e, XdpError::ZeroCopyUnsupported { source: None, .. }), "{e}");
        // 256 buffers cannot fill a 1024-entry fill ring.
        let e = bad(AfXdp::builder("lo"));
        assert!(matches!(e, XdpError::PoolExhausted { needed: 1024, got: 256 }), "{e}");
        assert!(e.to_string().contains("larger pool"));
    }

    #[test]
    fn spec_parsing() {
        let b = AfXdpBuilder::parse("veth0:3").unwrap();
        assert_eq!((b.iface.as_str(), b.first_queue, b.queues), ("veth0", 3, 1));
        let b = AfXdpBuilder::parse("eth1").unwrap();
        assert_eq!((b.iface.as_str(), b.first_queue), ("eth1", 0));
        assert!(matches!(AfXdpBuilder::parse("eth1:x"), Err(XdpError::InvalidConfig(_))));
    }
}
