//! [`AfXdp`]: any Linux interface as a [`NetDevice`] through AF_XDP sockets, the channelized stack's
//! carrier on NICs we have no userspace driver for (Linux `Documentation/networking/af_xdp.rst`).
//!
//! # What it sets up
//!
//! * **One XSK per queue.** An AF_XDP socket is bound to each NIC receive queue this value serves,
//!   with its own fill, completion, RX and TX rings (`xdp/ring.rs`), driven in bursts with cached indices.
//! * **UMEM = the pool's region.** The first socket registers the whole [`Pool::region`] as its UMEM
//!   (`XDP_UMEM_REG`); the others share it (`XDP_SHARED_UMEM`, each with its own fill and completion
//!   rings). A received frame lands directly in a pool buffer, at the pool's headroom, so the packet
//!   the caller gets *is* the UMEM frame: no copy between the kernel's rings and our channels. In
//!   zero-copy mode the NIC DMAs there; in copy mode (generic XDP, or a driver without AF_XDP
//!   zero-copy, such as veth) the kernel copies the frame into it, once, as it would into any socket.
//!   Transmit hands the packet's own buffer to the TX ring; it comes back on the completion ring.
//! * **The redirect program** (`xdp/bpf.rs`): an `XSKMAP` and a five-instruction XDP program that
//!   redirects every frame of a queue to that queue's socket (queues without a socket pass frames to
//!   the kernel's stack), loaded with raw `bpf(2)` and attached with a BPF link in generic (SKB) or
//!   native (driver) mode. The descriptors are held by this value; dropping it detaches the program.
//! * **One device per core** ([`AfXdp::into_queues`]): a multi-queue value splits into one
//!   [`XdpQueue`] per queue, each `Send` and polled by its own thread. Each keeps its socket, rings,
//!   pool cache, counters and ownership bitmap; the interface, the program and its map, and the UMEM
//!   registration are shared in an `Arc`, so the program is detached when the last queue drops.
//! * **Wakeups** (`XDP_USE_NEED_WAKEUP`): the kernel is only woken (`recvfrom`/`sendto` with
//!   `MSG_DONTWAIT`) when the fill or TX ring's flag asks for it; in copy mode a TX ring always asks,
//!   since the copy happens inside `sendto`.
//!
//! # Why raw `bpf(2)` and not `xsk-rs`/libxdp
//!
//! The BPF part is five instructions and three system calls; libxdp would bring a C build (vendored
//! libbpf and libxdp, clang, libelf, zlib), an ELF object, and its multi-program dispatcher, which
//! wants bpffs. Holding the map, program and link as file descriptors needs no bpffs at all (so
//! "bpffs is not mounted" cannot happen), and a crash detaches the program with the link. The socket
//! side is a handful of `setsockopt`/`mmap`/`bind` calls with structures `libc` already has. What
//! libxdp would add (multi-program chaining with other XDP users of the interface) is not needed for
//! an interface dedicated to our stack: one `AfXdp` owns the interface's XDP hook.
//!
//! # UMEM layout
//!
//! The pool's slots are `stride` bytes apart, which is not a power of two (2240 by default), so the
//! UMEM uses unaligned chunks (`XDP_UMEM_UNALIGNED_CHUNK_FLAG`, Linux 5.4+): a fill-ring address may be
//! any offset. The kernel puts a received frame `XDP_PACKET_HEADROOM` (256) bytes after the address
//! it takes from the fill ring, so buffer `i`'s fill address is its data start minus 256:
//!
//! ```text
//!   fill address = Pool::buffer_offset(i) + Pool::headroom() - 256
//!   chunk size   = 256 + data room (clamped to the kernel's limits: 2048..=page size)
//!   frame room   = chunk size - 256 (<= the pool's data room)
//! ```
//!
//! The chunk ends at (or before) the buffer's end, so no frame can spill into the next buffer. Its first
//! 256 bytes overlap this buffer's header and headroom and the tail of the previous slot; the kernel
//! writes there only if an XDP program moves the data start or writes metadata, which ours never does.
//! With a headroom below 192 bytes buffer 0's fill address would fall before the region: the device
//! then keeps buffer 0 out of the fill ring (it still transmits from it; the one buffer is counted in
//! [`XdpStats::parked`] and returned on drop).
//!
//! Every buffer a queue hands to the kernel (fill or TX ring) is marked in that queue's ownership
//! bitmap and unmarked when it comes back (RX or completion ring). Each queue's socket has fill and
//! completion rings of its own (the UMEM is shared, the rings are not): the kernel receives a queue's
//! frames into buffers from that queue's fill ring and returns the buffers that queue transmitted on
//! its completion ring, so a buffer always comes back to the queue that marked it, and a buffer is
//! marked in at most one bitmap (it is marked only while no packet exists for it, and a packet
//! received on one queue may be transmitted on another: it is then marked there). A descriptor that
//! names a buffer the queue does not hold, or a data start other than the pool's headroom, is counted
//! in `rx_errors` and never turned into a packet, so even a scribbled ring cannot make two packets
//! alias one buffer. On drop the program is detached (with the last queue, when split), each socket
//! is closed, and then every buffer its queue still holds is freed to the pool (in copy mode; in zero-copy mode the driver releases the UMEM only in the kernel's deferred cleanup, so those
//! buffers are leaked rather than handed out while a NIC might still write them).
//!
//! # Errors
//!
//! [`XdpError`] says what is missing and how to fix it: no privilege (`CAP_NET_ADMIN` + `CAP_BPF`, or
//! root), no AF_XDP in the kernel, an interface without native XDP (use [`XdpMode::Generic`]), no
//! zero-copy support, another XDP program already attached, a queue the interface does not have, a pool
//! whose buffers cannot be UMEM chunks, too few buffers to fill the rings.
//!
//! # Example
//!
//! ```no_run
//! use netchannel::dev::{AfXdp, NetDevice, PacketBatch, XdpMode};
//! use netchannel::pool::Pool;
//!
//! let pool = Pool::new(8192)?;
//! let mut dev = AfXdp::builder("veth0").queue(0).mode(XdpMode::Generic).open(&pool)?;
//! let cache = pool.cache();
//! let mut batch = PacketBatch::with_capacity(32);
//! loop {
//!     dev.wait_readable(0, None)?;
//!     dev.rx_burst(0, &cache, &mut batch)?;
//!     // ... swap addresses, then send the frames back out:
//!     dev.tx_burst(0, &mut batch)?;
//!     batch.clear();
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bpf;
mod ring;

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::Duration;

use self::ring::Ring;
use super::{DevError, DeviceInfo, DeviceStats, Link, MacAddr, NetDevice, PacketBatch, RxFrame, wrong_pool};
use crate::pool::{Pool, PoolCache};

/// `XDP_PACKET_HEADROOM`: where the kernel puts a frame after a chunk's start (include/uapi/linux/bpf.h).
pub const XDP_PACKET_HEADROOM: usize = 256;
/// `XDP_UMEM_MIN_CHUNK_SIZE` (net/xdp/xdp_umem.h).
const MIN_CHUNK_SIZE: usize = 2048;
/// The UMEM address bits of an unaligned-mode descriptor; the offset is in the top 16
/// (`XSK_UNALIGNED_BUF_ADDR_MASK`, `XSK_UNALIGNED_BUF_OFFSET_SHIFT`).
const UNALIGNED_ADDR_MASK: u64 = (1 << 48) - 1;
const UNALIGNED_OFFSET_SHIFT: u32 = 48;
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

/// Why an [`AfXdp`] device could not be opened; the message says what to do about it.
#[derive(Debug)]
pub enum XdpError {
    /// Interface names are 1 to 15 bytes without NUL, `/` or whitespace.
    InvalidName {
        /// The name asked for.
        name: String,
    },
    /// No interface of that name in this network namespace.
    NoSuchInterface {
        /// The name asked for.
        name: String,
    },
    /// A builder setting is out of range (ring sizes, queue count).
    InvalidConfig(String),
    /// The pool's buffers cannot be UMEM chunks (data room too small or too large).
    PoolGeometry(String),
    /// The pool could not supply the buffers the fill rings start with.
    PoolExhausted {
        /// Buffers needed (fill ring size × queues).
        needed: usize,
        /// Buffers obtained.
        got: usize,
    },
    /// The caller may not create XDP sockets or load BPF programs.
    PermissionDenied {
        /// The operation refused.
        op: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
    /// The kernel has no AF_XDP sockets, no `bpf(2)` or no XDP links.
    Unsupported {
        /// The operation refused.
        op: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
    /// The locked-memory limit is too low to pin the UMEM.
    MemlockLimit(io::Error),
    /// The interface's driver has no native XDP.
    NativeUnsupported {
        /// The interface.
        name: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// Zero-copy was required and the driver (or generic mode) cannot do it.
    ZeroCopyUnsupported {
        /// The interface.
        name: String,
        /// What the kernel said, if it was asked.
        source: Option<io::Error>,
    },
    /// Another XDP program is attached to the interface (or another `AfXdp` owns it).
    AlreadyAttached {
        /// The interface.
        name: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// The interface has no such queue.
    NoSuchQueue {
        /// The interface.
        name: String,
        /// The NIC queue asked for.
        queue: u32,
        /// What the kernel said.
        source: io::Error,
    },
    /// Another AF_XDP socket is bound to that queue.
    QueueBusy {
        /// The interface.
        name: String,
        /// The NIC queue.
        queue: u32,
        /// What the kernel said.
        source: io::Error,
    },
    /// The verifier rejected the redirect program.
    ProgramRejected {
        /// What the kernel said.
        source: io::Error,
        /// The verifier's log.
        log: String,
    },
    /// Another system call failed.
    Io {
        /// The call.
        op: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
}

impl fmt::Display for XdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidName { name } => {
                write!(f, "{name:?} is not a valid interface name (1 to 15 bytes, no NUL, '/' or whitespace)")
            }
            Self::NoSuchInterface { name } => write!(
                f,
                "no interface {name:?} in this network namespace (`ip link` lists them; create one, e.g. `ip link add {name} type veth peer name {name}p`)"
            ),
            Self::InvalidConfig(why) => write!(f, "invalid AF_XDP configuration: {why}"),
            Self::PoolGeometry(why) => write!(f, "the pool's buffers cannot be UMEM chunks: {why}"),
            Self::PoolExhausted { needed, got } => write!(
                f,
                "the pool supplied {got} of the {needed} buffers the fill rings start with; build a larger pool (fill ring size × queues + buffers in flight) or a smaller fill ring"
            ),
            Self::PermissionDenied { op, source } => write!(
                f,
                "{op} was refused ({source}): AF_XDP needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (or root); run as root or `setcap cap_net_admin,cap_net_raw,cap_bpf+ep <binary>`"
            ),
            Self::Unsupported { op, source } => write!(
                f,
                "{op} failed ({source}): this kernel lacks AF_XDP or BPF (needs Linux 5.9+ with CONFIG_XDP_SOCKETS and CONFIG_BPF_SYSCALL); use the TAP device instead"
            ),
            Self::MemlockLimit(e) => write!(
                f,
                "cannot pin the pool's region as UMEM ({e}): raise the locked-memory limit (`ulimit -l unlimited`, LimitMEMLOCK= in systemd) or grant CAP_IPC_LOCK"
            ),
            Self::NativeUnsupported { name, source } => write!(
                f,
                "the driver of {name:?} has no native XDP ({source}); use XdpMode::Generic (or XdpMode::Auto)"
            ),
            Self::ZeroCopyUnsupported { name, source: Some(e) } => write!(
                f,
                "{name:?} cannot do AF_XDP zero-copy ({e}); use ZeroCopy::Auto or ZeroCopy::Never for copy mode"
            ),
            Self::ZeroCopyUnsupported { name, source: None } => write!(
                f,
                "zero-copy on {name:?} needs native XDP; generic XDP is always copy mode: use XdpMode::Native or ZeroCopy::Auto"
            ),
            Self::AlreadyAttached { name, source } => write!(
                f,
                "another XDP program is attached to {name:?} ({source}); detach it (`ip link set dev {name} xdp off`, `xdpgeneric off`, or close the other AfXdp) and retry"
            ),
            Self::NoSuchQueue { name, queue, source } => write!(
                f,
                "cannot bind to queue {queue} of {name:?} ({source}): the interface has fewer queues (`ethtool -l {name}`; veth: `numrxqueues`/`numtxqueues` at creation)"
            ),
            Self::QueueBusy { name, queue, source } => write!(
                f,
                "queue {queue} of {name:?} already has an AF_XDP socket ({source}); close the other user or pick another queue"
            ),
            Self::ProgramRejected { source, log } => {
                write!(f, "the kernel rejected the XDP redirect program ({source}); verifier log: {log}")
            }
            Self::Io { op, source } => write!(f, "AF_XDP setup failed in {op}: {source}"),
        }
    }
}

impl std::error::Error for XdpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::PermissionDenied { source, .. }
            | Self::Unsupported { source, .. }
            | Self::NativeUnsupported { source, .. }
            | Self::AlreadyAttached { source, .. }
            | Self::NoSuchQueue { source, .. }
            | Self::QueueBusy { source, .. }
            | Self::ProgramRejected { source, .. }
            | Self::Io { source, .. }
            | Self::MemlockLimit(source) => Some(source),
            Self::ZeroCopyUnsupported { source, .. } => source.as_ref().map(|e| e as _),
            Self::InvalidName { .. }
            | Self::NoSuchInterface { .. }
            | Self::InvalidConfig(_)
            | Self::PoolGeometry(_)
            | Self::PoolExhausted { .. } => None,
        }
    }
}

/// Maps a failed call's errno to an error: permission and missing-support errors get their own
/// variants, everything else is `Io { op }`.
fn classify(op: &'static str, e: io::Error) -> XdpError {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => XdpError::PermissionDenied { op, source: e },
        Some(libc::EAFNOSUPPORT | libc::ENOSYS | libc::EPROTONOSUPPORT) => {
            XdpError::Unsupported { op, source: e }
        }
        _ => XdpError::Io { op, source: e },
    }
}

/// Counters of one queue's socket: the kernel's (`XDP_STATISTICS`) and the device's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames the kernel dropped for reasons other than those below.
    pub rx_dropped: u64,
    /// Invalid fill-ring descriptors the kernel skipped.
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors the kernel skipped.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full (the caller polls too rarely).
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty (frames dropped for want of a buffer).
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty when woken.
    pub tx_ring_empty_descs: u64,
    /// Wakeups the device sent for the fill ring (`recvfrom`).
    pub rx_wakeups: u64,
    /// Wakeups the device sent for the TX ring (`sendto`).
    pub tx_wakeups: u64,
    /// Buffers held out of the fill ring because their chunk would start before the region.
    pub parked: u64,
}

/// The UMEM geometry derived from the pool (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Umem {
    stride: u64,
    /// `HEADER_SIZE + headroom`: a fresh buffer's data offset from its slot's start.
    data_off: u64,
    chunk_size: u32,
    /// The largest frame the kernel puts in a chunk.
    frame_room: u32,
    count: u32,
    len: u64,
}

impl Umem {
    fn new(pool: &Pool, page_size: usize) -> Result<Self, XdpError> {
        let chunk = (XDP_PACKET_HEADROOM + pool.data_room()).min(page_size);
        if chunk < MIN_CHUNK_SIZE {
            return Err(XdpError::PoolGeometry(format!(
                "a data room of {} bytes gives {chunk}-byte chunks, below the kernel's minimum of {MIN_CHUNK_SIZE}; build the pool with data_room >= {}",
                pool.data_room(),
                MIN_CHUNK_SIZE - XDP_PACKET_HEADROOM
            )));
        }
        let Some(first) = pool.buffer_offset(0) else {
            return Err(XdpError::PoolGeometry("the pool has no buffers".into()));
        };
        let bad = |_| XdpError::PoolGeometry("sizes overflow".into());
        Ok(Self {
            stride: pool.stride() as u64,
            data_off: (first + pool.headroom()) as u64,
            chunk_size: u32::try_from(chunk).map_err(bad)?,
            frame_room: u32::try_from(chunk - XDP_PACKET_HEADROOM).map_err(bad)?,
            count: pool.buffers(),
            len: pool.region().len() as u64,
        })
    }

    /// The fill-ring address of buffer `index`: its data start minus `XDP_PACKET_HEADROOM`, or `None`
    /// when that falls before the region.
    fn fill_addr(&self, index: u32) -> Option<u64> {
        (u64::from(index) * self.stride + self.data_off).checked_sub(XDP_PACKET_HEADROOM as u64)
    }

    /// The buffer a received frame's descriptor names, when the frame starts at that buffer's
    /// headroom: the frame's data offset is `addr`'s low 48 bits plus its top 16 (unaligned mode).
    fn rx_index(&self, addr: u64) -> Option<u32> {
        let data = (addr & UNALIGNED_ADDR_MASK) + (addr >> UNALIGNED_OFFSET_SHIFT);
        let index = data.checked_sub(self.data_off)? / self.stride;
        let index = u32::try_from(index).ok().filter(|&i| i < self.count)?;
        (u64::from(index) * self.stride + self.data_off == data).then_some(index)
    }

    /// The buffer a completed TX descriptor's address lies in.
    fn tx_index(&self, addr: u64) -> Option<u32> {
        let at = (addr & UNALIGNED_ADDR_MASK) + (addr >> UNALIGNED_OFFSET_SHIFT);
        u32::try_from(at / self.stride).ok().filter(|&i| i < self.count)
    }
}

/// Which buffers the kernel holds (fill ring, RX ring, TX ring, completion ring, or in between).
#[derive(Debug)]
struct Held {
    words: Vec<u64>,
    count: u32,
}

impl Held {
    fn new(count: u32) -> Self {
        Self { words: vec![0; (count as usize).div_ceil(64)], count }
    }

    /// Marks `index` held; `false` if it already was (or is out of range).
    fn hold(&mut self, index: u32) -> bool {
        if index >= self.count {
            return false;
        }
        let Some(w) = self.words.get_mut(index as usize / 64) else { return false };
        let bit = 1u64 << (index % 64);
        let was = *w & bit != 0;
        *w |= bit;
        !was
    }

    /// Unmarks `index`; `false` if it was not held (or is out of range).
    fn release(&mut self, index: u32) -> bool {
        if index >= self.count {
            return false;
        }
        let Some(w) = self.words.get_mut(index as usize / 64) else { return false };
        let bit = 1u64 << (index % 64);
        let was = *w & bit != 0;
        *w &= !bit;
        was
    }

    fn drain(&mut self) -> Vec<u32> {
        let mut out = Vec::new();
        for (i, w) in self.words.iter_mut().enumerate() {
            let mut bits = std::mem::take(w);
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                // `i * 64 + b` is a buffer index, below `count`, which is a `u32`.
                out.push(u32::try_from(i * 64).unwrap_or(u32::MAX).saturating_add(b));
            }
        }
        out
    }
}

/// One queue's socket and rings.
#[derive(Debug)]
struct Xsk {
    nic_queue: u32,
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    /// Buffers taken back from the RX ring unused (a runt frame), to go back into the fill ring.
    recycle: Vec<u32>,
    /// Scratch for a burst of indices (completions, fresh buffers) and of received frames.
    scratch: Vec<u32>,
    frames: Vec<RxFrame>,
    fill_size: u32,
    tx_outstanding: u32,
    rx_wakeups: u64,
    tx_wakeups: u64,
    parked: u64,
    /// Declared last: the rings (mappings of this socket) are unmapped before it closes, so the close
    /// releases the socket at once.
    fd: OwnedFd,
}

/// The buffers one queue's socket holds, and the cache they go back to. Dropped after the socket is
/// closed (it is declared after the [`Xsk`] in [`Queue`]), when the kernel no longer writes into them.
struct Owned {
    /// Which buffers this queue handed to its socket (fill or TX ring) and has not had back (RX or
    /// completion ring). A socket sharing the UMEM has fill and completion rings of its own, and the
    /// kernel takes a queue's receive buffers from that queue's fill ring and returns a queue's
    /// transmitted buffers on that queue's completion ring, so each buffer comes back to the queue
    /// that marked it; one that shows up anywhere else is refused (`rx_errors`) and stays marked.
    held: Held,
    /// The queue's own cache: fills the fill ring, takes TX completions, and takes every held buffer
    /// back on drop.
    cache: PoolCache,
    /// Whether the socket is in zero-copy mode (its held buffers are leaked on drop, not freed).
    zero_copy: bool,
    /// For the drop-time warning.
    nic_queue: u32,
}

impl fmt::Debug for Owned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owned").field("zero_copy", &self.zero_copy).finish_non_exhaustive()
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let held = self.held.drain();
        if self.zero_copy {
            // In zero-copy mode the driver lets go of the UMEM in the kernel's deferred release of the
            // socket, after `close` returned: it could still DMA into posted buffers for a moment.
            // Leaking them is safe; handing them out again might not be.
            tracing::warn!(
                queue = self.nic_queue,
                buffers = held.len(),
                "AF_XDP zero-copy: buffers held by the driver at close are not returned to the pool"
            );
            return;
        }
        // SAFETY: every marked buffer is one of this pool's that the queue took from its cache (fill
        // ring) or from a packet (TX ring) and has not handed back: no packet exists for it, and each
        // index appears once (one bitmap per queue, and a buffer is marked in one bitmap at a time: it
        // is marked only while no packet exists for it). The socket that could still touch them was
        // closed before this runs (`Queue`'s field order), and a closed copy-mode socket is unbound
        // (`xsk_release` waits for in-flight receives with `synchronize_net`) before `close` returns.
        unsafe { self.cache.free_burst(&held) };
    }
}

/// One queue: its socket and rings, its counters, and the buffers it holds.
#[derive(Debug)]
struct Queue {
    /// Declared first: the rings are unmapped and the socket closed before `owned` frees the
    /// buffers the kernel held.
    xsk: Xsk,
    umem: Umem,
    pool_id: u64,
    stats: DeviceStats,
    owned: Owned,
}

/// What the queues of one interface share: the interface, the redirect program and the UMEM
/// geometry. [`AfXdp`] and every [`XdpQueue`] split from it hold it in an `Arc`: the program is
/// detached when the last of them is dropped.
#[derive(Debug)]
struct Shared {
    /// Dropped first: detaching the program stops redirection.
    xdp: Option<bpf::Redirect>,
    name: String,
    ifindex: u32,
    mac: MacAddr,
    mode: XdpMode,
    zero_copy: bool,
    ctl: OwnedFd,
    umem: Umem,
    /// Keeps the UMEM's memory mapped for as long as any socket may use it (each queue's cache keeps
    /// the pool alive too, and is dropped after the queue's socket is closed).
    _pool: Pool,
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
            rx_wakeups: 0,
            tx_wakeups: 0,
            parked: 0,
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
            Some(libc::EINVAL) => XdpError::Unsupported { op: "bpf(BPF_LINK_CREATE, BPF_XDP)", source: e },
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

fn setsockopt<T>(fd: &OwnedFd, opt: libc::c_int, value: &T) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<T>()).unwrap_or(0);
    // SAFETY: `value` is a live `T` of `len` bytes, only read by the kernel during the call.
    let r = unsafe {
        libc::setsockopt(fd.as_raw_fd(), libc::SOL_XDP, opt, std::ptr::from_ref(value).cast(), len)
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// `getsockopt(SOL_XDP, opt)` into a zeroed `T`; returns it and the length the kernel wrote.
fn getsockopt<T: Copy>(fd: &impl AsRawFd, opt: libc::c_int, zero: T) -> io::Result<(T, usize)> {
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

/// `SIOCETHTOOL` (linux/sockios.h).
const SIOCETHTOOL: libc::Ioctl = 0x8946;
/// `ETHTOOL_GCHANNELS` (linux/ethtool.h).
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
    let r = unsafe { libc::ioctl(ctl.as_raw_fd(), SIOCETHTOOL, &raw mut req) };
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
fn ifreq(name: &str) -> libc::ifreq {
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

/// Posts as many buffers as the fill ring has room for: recycled ones first, then fresh ones from
/// `cache`. Returns how many it posted; wakes the kernel if the ring asks for it.
fn refill(xsk: &mut Xsk, cache: &PoolCache, umem: &Umem, held: &mut Held) -> u32 {
    let room = xsk.fill.free(xsk.fill_size);
    if room == 0 {
        return 0;
    }
    let mut posted = 0u32;
    while posted < room
        && let Some(index) = xsk.recycle.pop()
    {
        // Recycled buffers are still marked held and have a fill address (they came from the ring).
        if let Some(addr) = umem.fill_addr(index) {
            xsk.fill.write(posted, addr);
            posted += 1;
        }
    }
    // Usually one round; a second when a parked buffer left a slot empty.
    while posted < room {
        let want = ((room - posted) as usize).min(xsk.scratch.len());
        let got = cache.alloc_burst(&mut xsk.scratch[..want]);
        if got == 0 {
            break;
        }
        for &index in &xsk.scratch[..got] {
            // Fresh from the pool: nobody else holds it, so the mark is new.
            held.hold(index);
            match umem.fill_addr(index) {
                Some(addr) => {
                    xsk.fill.write(posted, addr);
                    posted += 1;
                }
                // Buffer 0 with a headroom below 192 bytes: held out of the ring until drop.
                None => xsk.parked += 1,
            }
        }
    }
    if posted > 0 {
        xsk.fill.submit(posted);
        // SeqCst fence: our producer store before the flag load (StoreLoad), pairing with the
        // kernel's barrier between setting the flag and re-checking the ring; once per burst.
        fence(Ordering::SeqCst);
    }
    if xsk.fill.needs_wakeup() {
        xsk.rx_wakeups += 1;
        // SAFETY: a zero-length receive with no buffer and no address: the kernel writes nothing.
        let _ = unsafe {
            libc::recvfrom(
                xsk.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }
    posted
}

/// Takes completed TX buffers off the completion ring and frees them into `cache`; returns how many.
fn reap(xsk: &mut Xsk, cache: &PoolCache, umem: &Umem, held: &mut Held) -> u32 {
    let n = xsk.comp.available(xsk.scratch.len().try_into().unwrap_or(u32::MAX));
    let mut freed = 0;
    for i in 0..n {
        let addr = xsk.comp.read(i);
        // Only a buffer the device handed to the TX ring (and still holds) is freed, once.
        if let Some(index) = umem.tx_index(addr)
            && held.release(index)
        {
            xsk.scratch[freed] = index;
            freed += 1;
        }
    }
    if n > 0 {
        xsk.comp.release(n);
        xsk.tx_outstanding = xsk.tx_outstanding.saturating_sub(n);
        // SAFETY: each index was a buffer of the cache's pool that the device held (its mark was just
        // cleared, so each appears once) and no packet exists for it: the kernel has finished with it.
        unsafe { cache.free_burst(&xsk.scratch[..freed]) };
    }
    n
}

/// Wakes the kernel to transmit if the TX ring asks for it (always, in copy mode). Returns an error
/// only when the socket is gone.
fn kick_tx(xsk: &mut Xsk, need_wakeup_only: bool) -> io::Result<()> {
    if need_wakeup_only && !xsk.tx.needs_wakeup() {
        return Ok(());
    }
    xsk.tx_wakeups += 1;
    // SAFETY: a zero-length send with no buffer and no address: the kernel reads nothing.
    let r = unsafe {
        libc::sendto(xsk.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0)
    };
    if r >= 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // Transient: the kernel is busy, out of skbs, or the link is down; the next burst retries.
        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN | libc::EINTR) => Ok(()),
        _ => Err(e),
    }
}

impl Queue {
    /// [`refill`] with this queue's ring, cache and bitmap.
    fn refill(&mut self) -> u32 {
        refill(&mut self.xsk, &self.owned.cache, &self.umem, &mut self.owned.held)
    }

    fn rx_burst<'c>(
        &mut self,
        name: &str,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        if cache.pool().id() != self.pool_id {
            return Err(wrong_pool("the cache passed to rx_burst", self.pool_id));
        }
        let Self { xsk, umem, stats, owned: Owned { held, cache: own, .. }, .. } = self;
        if xsk.tx_outstanding > 0 {
            reap(xsk, own, umem, held);
            if xsk.tx.pending() > 0 {
                kick_tx(xsk, true).map_err(|e| failed(name, "sendto", &e))?;
            }
        }
        let want = batch.remaining().min(xsk.frames.len());
        let n = xsk.rx.available(u32::try_from(want).unwrap_or(u32::MAX));
        let mut frames = 0;
        for i in 0..n {
            let desc = xsk.rx.read(i);
            let Some(index) = umem.rx_index(desc.addr) else {
                // Not a frame at a buffer's headroom: nothing we can turn into a packet. If it names
                // a held buffer, that buffer stays held (returned on drop).
                stats.rx_errors += 1;
                continue;
            };
            if desc.len < 14 || desc.len > umem.frame_room {
                stats.rx_errors += 1;
                // Still held: back into the fill ring.
                if held.release(index) {
                    held.hold(index);
                    xsk.recycle.push(index);
                }
                continue;
            }
            // Only a buffer this queue handed to the kernel becomes a packet, and only once.
            if !held.release(index) {
                stats.rx_errors += 1;
                continue;
            }
            xsk.frames[frames] = RxFrame { index, len: desc.len };
            frames += 1;
        }
        if n > 0 {
            xsk.rx.release(n);
        }
        let received = &xsk.frames[..frames];
        // SAFETY: each frame's buffer is one of `cache`'s pool (checked above: the device's pool) that
        // the queue held until its mark was cleared just now, so the caller now owns it, no packet
        // exists for it, and it appears once; its data starts at the pool's headroom (`rx_index`).
        let (delivered, bytes) = unsafe { batch.extend_received(cache, received) };
        if delivered < frames {
            // Unreachable (`frames <= batch.remaining()`), but the buffers must not leak.
            stats.rx_dropped += (frames - delivered) as u64;
            for frame in &received[delivered..] {
                // SAFETY: as above; the packet is dropped at once, freeing the buffer.
                drop(unsafe { cache.packet_from_raw(frame.index) });
            }
        }
        stats.rx_packets += delivered as u64;
        stats.rx_bytes += bytes;
        refill(xsk, own, umem, held);
        Ok(delivered)
    }

    fn tx_burst(&mut self, name: &str, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        if batch.as_slice().iter().any(|p| p.pool_id() != self.pool_id) {
            return Err(wrong_pool("a packet handed to tx_burst", self.pool_id));
        }
        let Self { xsk, umem, stats, owned: Owned { held, cache: own, .. }, .. } = self;
        reap(xsk, own, umem, held);
        let want = u32::try_from(batch.len()).unwrap_or(u32::MAX);
        let room = xsk.tx.free(want);
        let mut posted = 0u32;
        for packet in batch.drain_front(room as usize) {
            let len = u32::try_from(packet.len()).unwrap_or(u32::MAX);
            if len == 0 || len > umem.frame_room {
                stats.tx_dropped += 1;
                continue; // dropped here: the buffer goes back to its cache
            }
            let addr = packet.dma_offset() as u64;
            let index = packet.into_raw();
            // The packet was the only handle on its buffer, so the queue now owns it.
            held.hold(index);
            xsk.tx.write(posted, libc::xdp_desc { addr, len, options: 0 });
            posted += 1;
            stats.tx_packets += 1;
            stats.tx_bytes += u64::from(len);
        }
        if posted > 0 {
            xsk.tx.submit(posted);
            xsk.tx_outstanding += posted;
            // SeqCst fence: the producer store before the flag load, as in `refill`.
            fence(Ordering::SeqCst);
            kick_tx(xsk, true).map_err(|e| failed(name, "sendto", &e))?;
        }
        Ok(room as usize)
    }

    fn wait_readable(&self, timeout: Option<Duration>) -> Result<bool, DevError> {
        let ms = timeout
            .map_or(-1, |t| i32::try_from(t.as_millis().max(u128::from(!t.is_zero()))).unwrap_or(i32::MAX));
        let mut pfd = libc::pollfd { fd: self.xsk.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid `pollfd`, owned here for the duration of the call.
        let r = unsafe { libc::poll(&raw mut pfd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(DevError::Failed(e)) };
        }
        Ok(pfd.revents & libc::POLLIN != 0)
    }

    fn xdp_stats(&self) -> Result<XdpStats, DevError> {
        let xsk = &self.xsk;
        let zero = libc::xdp_statistics {
            rx_dropped: 0,
            rx_invalid_descs: 0,
            tx_invalid_descs: 0,
            rx_ring_full: 0,
            rx_fill_ring_empty_descs: 0,
            tx_ring_empty_descs: 0,
        };
        let (k, _) = getsockopt(&xsk.fd, libc::XDP_STATISTICS, zero).map_err(DevError::Failed)?;
        Ok(XdpStats {
            rx_dropped: k.rx_dropped,
            rx_invalid_descs: k.rx_invalid_descs,
            tx_invalid_descs: k.tx_invalid_descs,
            rx_ring_full: k.rx_ring_full,
            rx_fill_ring_empty_descs: k.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: k.tx_ring_empty_descs,
            rx_wakeups: xsk.rx_wakeups,
            tx_wakeups: xsk.tx_wakeups,
            parked: xsk.parked,
        })
    }

    fn flush_tx(&mut self, name: &str) -> Result<(), DevError> {
        if self.xsk.tx.pending() > 0 {
            kick_tx(&mut self.xsk, true).map_err(|e| failed(name, "sendto", &e))?;
        }
        Ok(())
    }
}

impl Shared {
    fn ifreq_ioctl(&self, request: libc::Ioctl) -> io::Result<libc::ifreq> {
        let mut req = ifreq(&self.name);
        // SAFETY: the SIOCGIF* requests used here read and write one `ifreq`, which `req` is.
        if unsafe { libc::ioctl(self.ctl.as_raw_fd(), request, &raw mut req) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(req)
    }

    fn mtu(&self) -> io::Result<usize> {
        let req = self.ifreq_ioctl(libc::SIOCGIFMTU)?;
        // SAFETY: SIOCGIFMTU filled `ifru_mtu` (an integer).
        let mtu = unsafe { req.ifr_ifru.ifru_mtu };
        Ok(usize::try_from(mtu).unwrap_or(0))
    }

    fn link(&self) -> Link {
        let Ok(req) = self.ifreq_ioctl(libc::SIOCGIFFLAGS) else { return Link::Down };
        // SAFETY: SIOCGIFFLAGS filled `ifru_flags` (an integer).
        let flags = libc::c_int::from(unsafe { req.ifr_ifru.ifru_flags }.cast_unsigned());
        if flags & libc::IFF_UP != 0 && flags & libc::IFF_RUNNING != 0 {
            Link::Up { speed_mbps: None }
        } else {
            Link::Down
        }
    }
}

/// A Linux interface's queues as a [`NetDevice`] through AF_XDP (see the [module documentation](self)).
///
/// `rx_burst` takes up to a batch of frames off the queue's RX ring (they are already in pool
/// buffers), reaps TX completions, and refills the fill ring; `tx_burst` puts the packets' own
/// buffers on the TX ring (as many as it has room for; the rest stay in the batch) and wakes the
/// kernel if it asks. Frames of zero length or longer than the frame room are dropped and counted in
/// `tx_dropped`.
///
/// One value is driven by one thread. To serve its queues from several threads, split it with
/// [`AfXdp::into_queues`].
pub struct AfXdp {
    /// Dropped first: when no [`XdpQueue`] shares it, detaching the program stops redirection before
    /// the sockets close.
    shared: Arc<Shared>,
    queues: Vec<Queue>,
}

impl fmt::Debug for AfXdp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AfXdp")
            .field("name", &self.shared.name)
            .field("ifindex", &self.shared.ifindex)
            .field("mode", &self.shared.mode)
            .field("zero_copy", &self.shared.zero_copy)
            .field("queues", &self.queues.iter().map(|q| q.xsk.nic_queue).collect::<Vec<_>>())
            .field("chunk_size", &self.shared.umem.chunk_size)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl AfXdp {
    /// A builder for interface `iface`.
    #[must_use]
    pub fn builder(iface: &str) -> AfXdpBuilder {
        AfXdpBuilder::new(iface)
    }

    /// The interface's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The interface's index.
    #[must_use]
    pub fn ifindex(&self) -> u32 {
        self.shared.ifindex
    }

    /// Where the program runs: [`XdpMode::Generic`] or [`XdpMode::Native`] (what `Auto` chose).
    #[must_use]
    pub fn mode(&self) -> XdpMode {
        self.shared.mode
    }

    /// Whether every socket is in zero-copy mode (`XDP_OPTIONS_ZEROCOPY`).
    #[must_use]
    pub fn is_zero_copy(&self) -> bool {
        self.shared.zero_copy
    }

    /// The NIC queue behind this value's `queue`.
    #[must_use]
    pub fn nic_queue(&self, queue: u16) -> Option<u32> {
        self.queues.get(usize::from(queue)).map(|x| x.xsk.nic_queue)
    }

    /// The largest frame the kernel puts in a buffer (chunk size - 256).
    #[must_use]
    pub fn frame_room(&self) -> usize {
        self.shared.umem.frame_room as usize
    }

    /// The socket of `queue`, to register with epoll (readable when frames wait in its RX ring).
    #[must_use]
    pub fn queue_fd(&self, queue: u16) -> Option<BorrowedFd<'_>> {
        self.queues.get(usize::from(queue)).map(|x| x.xsk.fd.as_fd())
    }

    fn queue(&self, queue: u16) -> Result<&Queue, DevError> {
        let queues = self.queue_count();
        self.queues.get(usize::from(queue)).ok_or(DevError::NoSuchQueue { queue, queues })
    }

    fn queue_mut(&mut self, queue: u16) -> Result<&mut Queue, DevError> {
        let queues = self.queue_count();
        self.queues.get_mut(usize::from(queue)).ok_or(DevError::NoSuchQueue { queue, queues })
    }

    /// Waits until `queue`'s RX ring has a frame or `timeout` passes (`None`: no limit); returns
    /// whether it has one. Interrupted waits count as "not yet".
    ///
    /// # Errors
    ///
    /// [`DevError::NoSuchQueue`], or what `poll(2)` reports.
    pub fn wait_readable(&self, queue: u16, timeout: Option<Duration>) -> Result<bool, DevError> {
        self.queue(queue)?.wait_readable(timeout)
    }

    /// The kernel's and the device's counters for `queue`.
    ///
    /// # Errors
    ///
    /// [`DevError::NoSuchQueue`], or the `getsockopt(XDP_STATISTICS)` failure.
    pub fn xdp_stats(&self, queue: u16) -> Result<XdpStats, DevError> {
        self.queue(queue)?.xdp_stats()
    }

    fn queue_count(&self) -> u16 {
        u16::try_from(self.queues.len()).unwrap_or(u16::MAX)
    }

    /// The interface's MTU (`SIOCGIFMTU`).
    ///
    /// # Errors
    ///
    /// What the ioctl reports (the interface was deleted, say).
    pub fn mtu(&self) -> io::Result<usize> {
        self.shared.mtu()
    }

    /// Wakes the kernel to send what is still on `queue`'s TX ring (copy mode sends at most a few
    /// dozen frames per wakeup); `rx_burst` and `tx_burst` do this themselves.
    ///
    /// # Errors
    ///
    /// [`DevError::NoSuchQueue`], or [`DevError::Failed`] when the socket is gone.
    pub fn flush_tx(&mut self, queue: u16) -> Result<(), DevError> {
        let shared = Arc::clone(&self.shared);
        self.queue_mut(queue)?.flush_tx(&shared.name)
    }

    /// Splits the device into one [`XdpQueue`] per queue, in queue order (`result[i]` serves this
    /// value's queue `i`, NIC queue [`nic_queue(i)`](Self::nic_queue)), each `Send` and driven by
    /// its own thread.
    ///
    /// Each queue keeps its own socket, rings, cache, counters and ownership bitmap (a buffer goes
    /// back to the queue whose fill or TX ring it was posted to: see the [module documentation](self));
    /// the interface, the
    /// XDP program and its map, and the UMEM registration are shared: the program is detached when
    /// the last queue is dropped, and a queue dropped before the others closes its socket (its NIC
    /// queue's frames then pass to the kernel's stack) and returns the buffers it held.
    ///
    /// The counters of the device so far stay with the queues that counted them.
    #[must_use]
    pub fn into_queues(self) -> Vec<XdpQueue> {
        let Self { shared, queues } = self;
        queues.into_iter().map(|queue| XdpQueue { shared: Arc::clone(&shared), queue }).collect()
    }
}

fn failed(name: &str, op: &str, e: &io::Error) -> DevError {
    DevError::Failed(io::Error::new(e.kind(), format!("{name}: AF_XDP {op} failed: {e}")))
}

impl NetDevice for AfXdp {
    /// The interface's name, MAC address and MTU (read from the kernel on each call; 1500 if that
    /// fails), and the number of queues this value serves.
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: self.shared.name.clone(),
            mac: self.shared.mac,
            mtu: self.shared.mtu().unwrap_or(1500),
            queues: self.queue_count(),
        }
    }

    /// Up when the interface is administratively up and has carrier (`IFF_UP | IFF_RUNNING`).
    fn link(&self) -> Link {
        self.shared.link()
    }

    /// The sum of every queue's counters.
    fn stats(&self) -> DeviceStats {
        self.queues.iter().fold(DeviceStats::default(), |mut t, q| {
            let s = q.stats;
            t.rx_packets += s.rx_packets;
            t.rx_bytes += s.rx_bytes;
            t.rx_dropped += s.rx_dropped;
            t.rx_errors += s.rx_errors;
            t.tx_packets += s.tx_packets;
            t.tx_bytes += s.tx_bytes;
            t.tx_dropped += s.tx_dropped;
            t
        })
    }

    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        let Self { shared, queues } = self;
        let count = u16::try_from(queues.len()).unwrap_or(u16::MAX);
        let Some(q) = queues.get_mut(usize::from(queue)) else {
            return Err(DevError::NoSuchQueue { queue, queues: count });
        };
        q.rx_burst(&shared.name, cache, batch)
    }

    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        let Self { shared, queues } = self;
        let count = u16::try_from(queues.len()).unwrap_or(u16::MAX);
        let Some(q) = queues.get_mut(usize::from(queue)) else {
            return Err(DevError::NoSuchQueue { queue, queues: count });
        };
        q.tx_burst(&shared.name, batch)
    }

    /// [`AfXdp::wait_readable`]: sleeps in `poll(2)` on `queue`'s socket until its RX ring has a
    /// frame or `timeout` passes.
    fn wait_rx(&mut self, queue: u16, timeout: Option<Duration>) -> Result<(), DevError> {
        self.wait_readable(queue, timeout).map(drop)
    }
}

/// One queue of an [`AfXdp`] device, split off by [`AfXdp::into_queues`]: a [`NetDevice`] with one
/// queue (its `queue` 0 is NIC queue [`nic_queue`](Self::nic_queue)), `Send`, driven by one thread.
///
/// It owns its socket and rings, its pool cache, its counters and the buffers it posted; it shares
/// the interface, the XDP program and the UMEM with its siblings. Dropping it closes its socket and
/// returns its buffers (in copy mode); dropping the last sibling detaches the program.
pub struct XdpQueue {
    /// Dropped first: when this is the last queue, the program is detached before its socket closes.
    shared: Arc<Shared>,
    queue: Queue,
}

impl fmt::Debug for XdpQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpQueue")
            .field("name", &self.shared.name)
            .field("nic_queue", &self.queue.xsk.nic_queue)
            .field("mode", &self.shared.mode)
            .field("zero_copy", &self.queue.owned.zero_copy)
            .field("stats", &self.queue.stats)
            .finish_non_exhaustive()
    }
}

impl XdpQueue {
    /// The interface's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The interface's index.
    #[must_use]
    pub fn ifindex(&self) -> u32 {
        self.shared.ifindex
    }

    /// The NIC queue this value serves.
    #[must_use]
    pub fn nic_queue(&self) -> u32 {
        self.queue.xsk.nic_queue
    }

    /// Where the program runs: [`XdpMode::Generic`] or [`XdpMode::Native`].
    #[must_use]
    pub fn mode(&self) -> XdpMode {
        self.shared.mode
    }

    /// Whether this queue's socket is in zero-copy mode.
    #[must_use]
    pub fn is_zero_copy(&self) -> bool {
        self.queue.owned.zero_copy
    }

    /// The largest frame the kernel puts in a buffer (chunk size - 256).
    #[must_use]
    pub fn frame_room(&self) -> usize {
        self.shared.umem.frame_room as usize
    }

    /// The queue's socket, to register with epoll (readable when frames wait in its RX ring).
    #[must_use]
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.queue.xsk.fd.as_fd()
    }

    /// The interface's MTU (`SIOCGIFMTU`).
    ///
    /// # Errors
    ///
    /// What the ioctl reports (the interface was deleted, say).
    pub fn mtu(&self) -> io::Result<usize> {
        self.shared.mtu()
    }

    /// Waits until the RX ring has a frame or `timeout` passes (`None`: no limit); returns whether it
    /// has one. Interrupted waits count as "not yet".
    ///
    /// # Errors
    ///
    /// What `poll(2)` reports.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> Result<bool, DevError> {
        self.queue.wait_readable(timeout)
    }

    /// The kernel's and the queue's counters.
    ///
    /// # Errors
    ///
    /// The `getsockopt(XDP_STATISTICS)` failure.
    pub fn xdp_stats(&self) -> Result<XdpStats, DevError> {
        self.queue.xdp_stats()
    }

    /// Wakes the kernel to send what is still on the TX ring; `rx_burst` and `tx_burst` do this
    /// themselves.
    ///
    /// # Errors
    ///
    /// [`DevError::Failed`] when the socket is gone.
    pub fn flush_tx(&mut self) -> Result<(), DevError> {
        self.queue.flush_tx(&self.shared.name)
    }
}

impl NetDevice for XdpQueue {
    /// `IFACE:QUEUE` (the interface's name and the NIC queue), the interface's MAC address and MTU
    /// (1500 if the kernel cannot say), and one queue.
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: format!("{}:{}", self.shared.name, self.queue.xsk.nic_queue),
            mac: self.shared.mac,
            mtu: self.shared.mtu().unwrap_or(1500),
            queues: 1,
        }
    }

    /// Up when the interface is administratively up and has carrier (`IFF_UP | IFF_RUNNING`).
    fn link(&self) -> Link {
        self.shared.link()
    }

    fn stats(&self) -> DeviceStats {
        self.queue.stats
    }

    #[inline]
    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        DevError::check_queue(queue, 1)?;
        self.queue.rx_burst(&self.shared.name, cache, batch)
    }

    #[inline]
    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        DevError::check_queue(queue, 1)?;
        self.queue.tx_burst(&self.shared.name, batch)
    }

    /// [`XdpQueue::wait_readable`].
    fn wait_rx(&mut self, queue: u16, timeout: Option<Duration>) -> Result<(), DevError> {
        DevError::check_queue(queue, 1)?;
        self.wait_readable(timeout).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::HugePages;

    fn pool(data_room: usize, headroom: usize) -> Pool {
        Pool::builder(256)
            .data_room(data_room)
            .headroom(headroom)
            .hugepages(HugePages::Never)
            .build()
            .unwrap()
    }

    #[test]
    fn umem_geometry_maps_fill_addresses_to_buffer_headroom() {
        let p = pool(2048, 128);
        let u = Umem::new(&p, 4096).unwrap();
        assert_eq!(u.chunk_size, 2304);
        assert_eq!(u.frame_room, 2048);
        // Buffer 0's chunk would start 64 bytes before the region.
        assert_eq!(u.fill_addr(0), None);
        for i in 1..p.buffers() {
            let fill = u.fill_addr(i).unwrap();
            let data = (p.buffer_offset(i).unwrap() + p.headroom()) as u64;
            assert_eq!(fill + XDP_PACKET_HEADROOM as u64, data);
            // The chunk ends at or before the buffer's end.
            assert!(fill + u64::from(u.chunk_size) <= (p.buffer_offset(i).unwrap() + p.buffer_len()) as u64);
            // An RX descriptor as the kernel writes it (unaligned mode: offset in the top 16 bits).
            let desc = fill | ((XDP_PACKET_HEADROOM as u64) << 48);
            assert_eq!(u.rx_index(desc), Some(i));
            assert_eq!(u.rx_index(data), Some(i));
            assert_eq!(u.tx_index(data + 5), Some(i));
        }
        // A data start anywhere but at the headroom is refused.
        let off = (p.buffer_offset(3).unwrap() + p.headroom()) as u64;
        assert_eq!(u.rx_index(off + 1), None);
        assert_eq!(u.rx_index(off - 64), None);
        assert_eq!(u.rx_index(u64::from(p.buffers()) * p.stride() as u64 + 192), None);
        // With 192 bytes of headroom, buffer 0 fits too.
        let u = Umem::new(&pool(2048, 192), 4096).unwrap();
        assert_eq!(u.fill_addr(0), Some(0));
    }

    #[test]
    fn pools_that_cannot_be_umem_are_refused_with_a_fix() {
        let e = Umem::new(&pool(512, 128), 4096).unwrap_err();
        assert!(matches!(e, XdpError::PoolGeometry(_)));
        assert!(e.to_string().contains("data_room >= 1792"), "{e}");
        // A data room past the page is clamped: the kernel never writes past the chunk.
        let u = Umem::new(&pool(8192, 128), 4096).unwrap();
        assert_eq!((u.chunk_size, u.frame_room), (4096, 3840));
    }

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

    #[test]
    fn held_marks_each_buffer_once() {
        let mut h = Held::new(130);
        assert!(h.hold(0) && h.hold(129) && h.hold(64));
        assert!(!h.hold(64));
        assert!(!h.hold(130), "out of range");
        assert!(h.release(64) && !h.release(64));
        assert_eq!(h.drain(), [0, 129]);
        assert_eq!(h.drain(), [] as [u32; 0]);
    }

    #[test]
    fn errors_say_how_to_fix_them() {
        let e = classify("socket(AF_XDP)", io::Error::from_raw_os_error(libc::EPERM));
        assert!(e.to_string().contains("CAP_NET_ADMIN"), "{e}");
        let e = classify("socket(AF_XDP)", io::Error::from_raw_os_error(libc::EAFNOSUPPORT));
        assert!(e.to_string().contains("CONFIG_XDP_SOCKETS"), "{e}");
        let e = XdpError::NativeUnsupported {
            name: "lo".into(),
            source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        };
        assert!(e.to_string().contains("XdpMode::Generic"), "{e}");
        let e = XdpError::AlreadyAttached {
            name: "eth0".into(),
            source: io::Error::from_raw_os_error(libc::EBUSY),
        };
        assert!(e.to_string().contains("xdp off"), "{e}");
    }
}
