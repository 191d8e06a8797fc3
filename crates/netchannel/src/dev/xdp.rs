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
//!   A frame of a shared buffer (a send by reference) is copied into a plain buffer first
//!   ([`XdpStats::tx_frames_copied`]): completions name buffers by address, not frames.
//! * **The redirect program** (`xdp/bpf.rs`): an `XSKMAP` and a five-instruction XDP program that
//!   redirects every frame of a queue to that queue's socket (queues without a socket pass frames to
//!   the kernel's stack), loaded with raw `bpf(2)` and attached with a BPF link in generic (SKB) or
//!   native (driver) mode. The descriptors are held by this value; dropping it detaches the program.
//! * **One device per core** ([`AfXdp::into_queues`]): a multi-queue value splits into one
//!   [`XdpQueue`] per queue, each `Send` and polled by its own thread. Each keeps its socket, rings,
//!   pool cache, counters and ownership bitmap; the interface, the program and its map, and the UMEM
//!   registration are shared in an `Arc`, so the program is detached when the last queue drops.
//! * **Wakeups** (`XDP_USE_NEED_WAKEUP`): the kernel is only woken (`recvfrom`/`sendto` with
//!   `MSG_DONTWAIT`) when the fill or TX ring's flag asks for it, checked once per burst after the
//!   burst's producer store; in copy mode a TX ring always asks, since the copy happens inside
//!   `sendto` (one per TX burst, [`XdpStats::tx_wakeups`]), and a fill ring never does
//!   ([`XdpStats::rx_wakeups`] stays 0). Completions are reaped and the fill ring refilled a burst
//!   at a time (one index load and one index store per ring per burst).
//! * **Busy polling** ([`BusyPoll`], off by default): `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` and
//!   `SO_BUSY_POLL_BUDGET` on each socket; an RX burst that finds its ring empty then calls
//!   `recvfrom` to run the driver's NAPI in the caller's thread ([`XdpStats::busy_polls`]).
//! * **Sleeping**: [`AfXdp::wait_readable`] sleeps in `ppoll(2)` on the socket (microsecond
//!   timeouts) until the RX ring has a frame; the runtime's cores sleep there when idle.
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
mod error;
mod ring;
mod setup;
mod umem;

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::Duration;

use self::ring::Ring;
use self::setup::{getsockopt, ifreq};
use self::umem::{Held, Owned, Umem};
use super::{
    DevError, DeviceInfo, DeviceOffloads, DeviceStats, Link, MacAddr, NetDevice, PacketBatch, RxFrame,
    wrong_pool,
};
use crate::pool::{Packet, Pool, PoolCache};

pub use self::error::XdpError;
pub use self::setup::{AfXdpBuilder, BusyPoll, DEFAULT_RING_SIZE, XdpMode, ZeroCopy, rx_queues};

/// `XDP_PACKET_HEADROOM`: where the kernel puts a frame after a chunk's start (include/uapi/linux/bpf.h).
pub const XDP_PACKET_HEADROOM: usize = 256;

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
    /// `recvfrom` calls made to run the driver's NAPI after an empty RX burst ([`BusyPoll`] only).
    pub busy_polls: u64,
    /// Buffers held out of the fill ring because their chunk would start before the region.
    pub parked: u64,
    /// Frames of shared buffers (sends by reference) copied into a plain buffer to be sent: the
    /// completion ring gives back only a buffer's address, which cannot say which frame of a
    /// shared buffer completed, so frames never go to the TX ring as they are.
    pub tx_frames_copied: u64,
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
    /// Whether the socket busy-polls ([`BusyPoll`]): an empty RX burst then runs the NAPI.
    busy_poll: bool,
    busy_polls: u64,
    rx_wakeups: u64,
    tx_wakeups: u64,
    parked: u64,
    tx_frames_copied: u64,
    /// Declared last: the rings (mappings of this socket) are unmapped before it closes, so the close
    /// releases the socket at once.
    fd: OwnedFd,
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
        wake_rx(&xsk.fd);
    }
    posted
}

/// A zero-length, non-blocking `recvfrom` on the socket: wakes the driver to take fill-ring buffers
/// (`XDP_RING_NEED_WAKEUP`), or runs its NAPI in this thread (busy polling). Errors are the next
/// burst's business: the socket's only failure that matters shows up in `sendto` and `poll`.
fn wake_rx(fd: &OwnedFd) {
    // SAFETY: a zero-length receive with no buffer and no address: the kernel writes nothing.
    let _ = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
}

/// Takes completed TX buffers off the completion ring and frees them into `cache`; returns how many.
/// A plain buffer of `cache` holding a copy of `frame`'s bytes (headers and shared payload), with
/// its offload metadata; `None` when the pool has no free buffer or the bytes do not fit.
#[cold]
#[inline(never)]
fn copy_frame<'a>(cache: &'a PoolCache, frame: &Packet<'_>) -> Option<Packet<'a>> {
    let mut copy = cache.alloc()?;
    copy.extend_from_slice(frame.data()).ok()?;
    copy.set_offload(frame.offload());
    Some(copy)
}

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
        if n == 0 && want > 0 && xsk.busy_poll {
            // Busy polling: nothing arrived, so run the driver's NAPI here (the frames it takes
            // show up in the next burst).
            xsk.busy_polls += 1;
            wake_rx(&xsk.fd);
        }
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
            let packet = if packet.is_frame() {
                let Some(copy) = copy_frame(own, &packet) else {
                    stats.tx_dropped += 1;
                    continue; // no buffer for the copy: dropping the frame releases it
                };
                xsk.tx_frames_copied += 1;
                copy
            } else {
                packet
            };
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
        // To the nanosecond: a core that sleeps here between bursts asks for microseconds.
        let revents = super::wait_readable(self.xsk.fd.as_fd(), timeout).map_err(DevError::Failed)?;
        Ok(revents.contains(rustix::event::PollFlags::IN))
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
            busy_polls: xsk.busy_polls,
            parked: xsk.parked,
            tx_frames_copied: xsk.tx_frames_copied,
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
            offloads: DeviceOffloads::NONE,
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
            t.rx_no_buffer += s.rx_no_buffer;
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

    /// Whether frames wait on the TX ring for the kernel to take them (in copy mode, for the next
    /// `sendto` or `poll`: one takes at most 32): a caller that would sleep in
    /// [`wait_readable`](Self::wait_readable) should kick them out first.
    #[must_use]
    pub fn tx_pending(&self) -> bool {
        self.queue.xsk.tx.unconsumed() > 0
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
            offloads: DeviceOffloads::NONE,
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
    use crate::pool::{HugePages, Pool};

    /// A pool for the tests of the xdp modules: 256 buffers, normal pages.
    pub(super) fn pool(data_room: usize, headroom: usize) -> Pool {
        Pool::builder(256)
            .data_room(data_room)
            .headroom(headroom)
            .hugepages(HugePages::Never)
            .build()
            .unwrap()
    }
}
