//! The UMEM side of an AF_XDP device: the geometry that maps the pool's buffers to UMEM chunk addresses
//! and back ([`Umem`]), the bitmap of buffers the kernel holds ([`Held`]), and the per-queue owner that
//! hands them back to the pool when the queue goes away ([`Owned`]).

use std::fmt;

use super::{XDP_PACKET_HEADROOM, XdpError};
use crate::pool::{Pool, PoolCache};

/// `XDP_UMEM_MIN_CHUNK_SIZE` (net/xdp/xdp_umem.h).
const MIN_CHUNK_SIZE: usize = 2048;
/// The UMEM address bits of an unaligned-mode descriptor; the offset is in the top 16
/// (`XSK_UNALIGNED_BUF_ADDR_MASK`, `XSK_UNALIGNED_BUF_OFFSET_SHIFT`).
const UNALIGNED_ADDR_MASK: u64 = (1 << 48) - 1;
const UNALIGNED_OFFSET_SHIFT: u32 = 48;

/// The UMEM geometry derived from the pool (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Umem {
    pub(super) stride: u64,
    /// `HEADER_SIZE + headroom`: a fresh buffer's data offset from its slot's start.
    pub(super) data_off: u64,
    pub(super) chunk_size: u32,
    /// The largest frame the kernel puts in a chunk.
    pub(super) frame_room: u32,
    pub(super) count: u32,
    pub(super) len: u64,
}

impl Umem {
    pub(super) fn new(pool: &Pool, page_size: usize) -> Result<Self, XdpError> {
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
    pub(super) fn fill_addr(&self, index: u32) -> Option<u64> {
        (u64::from(index) * self.stride + self.data_off).checked_sub(XDP_PACKET_HEADROOM as u64)
    }

    /// The buffer a received frame's descriptor names, when the frame starts at that buffer's
    /// headroom: the frame's data offset is `addr`'s low 48 bits plus its top 16 (unaligned mode).
    pub(super) fn rx_index(&self, addr: u64) -> Option<u32> {
        let data = (addr & UNALIGNED_ADDR_MASK) + (addr >> UNALIGNED_OFFSET_SHIFT);
        let index = data.checked_sub(self.data_off)? / self.stride;
        let index = u32::try_from(index).ok().filter(|&i| i < self.count)?;
        (u64::from(index) * self.stride + self.data_off == data).then_some(index)
    }

    /// The buffer a completed TX descriptor's address lies in.
    pub(super) fn tx_index(&self, addr: u64) -> Option<u32> {
        let at = (addr & UNALIGNED_ADDR_MASK) + (addr >> UNALIGNED_OFFSET_SHIFT);
        u32::try_from(at / self.stride).ok().filter(|&i| i < self.count)
    }
}

/// Which buffers the kernel holds (fill ring, RX ring, TX ring, completion ring, or in between).
#[derive(Debug)]
pub(super) struct Held {
    words: Vec<u64>,
    count: u32,
}

impl Held {
    pub(super) fn new(count: u32) -> Self {
        Self { words: vec![0; (count as usize).div_ceil(64)], count }
    }

    /// Marks `index` held; `false` if it already was (or is out of range).
    pub(super) fn hold(&mut self, index: u32) -> bool {
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
    pub(super) fn release(&mut self, index: u32) -> bool {
        if index >= self.count {
            return false;
        }
        let Some(w) = self.words.get_mut(index as usize / 64) else { return false };
        let bit = 1u64 << (index % 64);
        let was = *w & bit != 0;
        *w &= !bit;
        was
    }

    pub(super) fn drain(&mut self) -> Vec<u32> {
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

/// The buffers one queue's socket holds, and the cache they go back to. Dropped after the socket is
/// closed (it is declared after the [`Xsk`](super::Xsk) in [`Queue`](super::Queue)), when the kernel no longer writes into them.
pub(super) struct Owned {
    /// Which buffers this queue handed to its socket (fill or TX ring) and has not had back (RX or
    /// completion ring). A socket sharing the UMEM has fill and completion rings of its own, and the
    /// kernel takes a queue's receive buffers from that queue's fill ring and returns a queue's
    /// transmitted buffers on that queue's completion ring, so each buffer comes back to the queue
    /// that marked it; one that shows up anywhere else is refused (`rx_errors`) and stays marked.
    pub(super) held: Held,
    /// The queue's own cache: fills the fill ring, takes TX completions, and takes every held buffer
    /// back on drop.
    pub(super) cache: PoolCache,
    /// Whether the socket is in zero-copy mode (its held buffers are leaked on drop, not freed).
    pub(super) zero_copy: bool,
    /// For the drop-time warning.
    pub(super) nic_queue: u32,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::xdp::tests::pool;

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
    fn held_marks_each_buffer_once() {
        let mut h = Held::new(130);
        assert!(h.hold(0) && h.hold(129) && h.hold(64));
        assert!(!h.hold(64));
        assert!(!h.hold(130), "out of range");
        assert!(h.release(64) && !h.release(64));
        assert_eq!(h.drain(), [0, 129]);
        assert_eq!(h.drain(), [] as [u32; 0]);
    }
}
