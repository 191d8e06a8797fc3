//! Device addresses of pool buffers: how the driver turns a buffer index or a packet's data offset
//! into the IOVA that goes into a descriptor.

use std::sync::Arc;

use netchannel::pool::Pool;

use crate::hw::{DmaMapping, Translation};

/// The pool region's DMA mapping and the buffer geometry, shared by every queue of a device.
#[derive(Clone, Debug)]
pub(crate) struct BufferDma {
    mapping: Arc<DmaMapping>,
    /// The IOVA of the region's first byte when the mapping is linear (VFIO, the model).
    linear: Option<u64>,
    /// The IOVA of buffer 0's receive data and the stride as a `u32` (a buffer's size: it always
    /// fits) when the mapping is linear and every buffer's receive area lies inside it: the data
    /// path's receive address is then one multiply-add.
    linear_rx: Option<(u64, u32)>,
    /// The IOVA of the region's first byte when the mapping is linear and reaches every buffer of the
    /// pool: a packet's data (inside its buffer) is then at `base + dma_offset` with no check.
    linear_all: Option<u64>,
    /// Buffers in the pool.
    buffers: u32,
    /// Bytes from one slot to the next.
    stride: usize,
    /// Offset of buffer 0's first data byte (slot header + headroom) in the region.
    rx_data_off: usize,
    /// Bytes the device may write into a receive buffer (SRRCTL.BSIZEPKT × 1 KiB).
    rx_buf_len: usize,
}

impl BufferDma {
    /// The geometry of `pool` over `mapping`; `rx_buf_len` is the receive buffer size the device is
    /// told (at most the pool's data room).
    pub(crate) fn new(pool: &Pool, mapping: Arc<DmaMapping>, rx_buf_len: usize) -> Option<Self> {
        let linear = match mapping.translation() {
            Translation::Linear { base } => Some(base.0),
            Translation::Pages { .. } => None,
        };
        let rx_data_off = pool.buffer_offset(0)? + pool.headroom();
        let stride = pool.stride();
        let buffers = pool.buffers();
        // The last buffer's receive area ends inside the mapping, so every buffer's does.
        let last_end = (buffers.checked_sub(1)? as usize)
            .checked_mul(stride)
            .and_then(|o| o.checked_add(rx_data_off))
            .and_then(|o| o.checked_add(rx_buf_len));
        let linear_rx = match (linear, last_end, u32::try_from(stride)) {
            (Some(base), Some(end), Ok(stride)) if end <= mapping.len() => {
                Some((base.wrapping_add(rx_data_off as u64), stride))
            }
            _ => None,
        };
        let all_end = (buffers as usize).checked_mul(stride);
        let linear_all = linear.filter(|_| all_end.is_some_and(|end| end <= mapping.len()));
        Some(Self { mapping, linear, linear_rx, linear_all, buffers, stride, rx_data_off, rx_buf_len })
    }

    /// Receive buffer length.
    #[inline]
    pub(crate) fn rx_buf_len(&self) -> usize {
        self.rx_buf_len
    }

    /// The device address of `len` bytes at `offset` into the region, if the device can reach all of
    /// them contiguously.
    #[inline]
    pub(crate) fn addr(&self, offset: usize, len: usize) -> Option<u64> {
        let end = offset.checked_add(len)?;
        if end > self.mapping.len() {
            return None;
        }
        if let Some(base) = self.linear {
            return Some(base.wrapping_add(offset as u64));
        }
        self.paged(offset, len)
    }

    /// [`BufferDma::addr`] for a page-wise translation: both ends must be on one page.
    #[cold]
    fn paged(&self, offset: usize, len: usize) -> Option<u64> {
        let Translation::Pages { page_shift, .. } = self.mapping.translation() else {
            return None;
        };
        let last = offset + len.max(1) - 1;
        if offset >> page_shift != last >> page_shift {
            return None;
        }
        self.mapping.iova(offset).map(|iova| iova.0)
    }

    /// With a linear translation that reaches every buffer of the pool: the address of the region's
    /// first byte, so that a packet of the pool transmits from `base + dma_offset`.
    #[inline]
    pub(crate) fn tx_linear(&self) -> Option<u64> {
        self.linear_all
    }

    /// With a linear translation that reaches every buffer's receive area: the address of buffer 0's
    /// receive data and the stride, so that buffer `i` (any buffer of the pool, `i < buffers`: every
    /// index a cache of the pool hands out) receives at `base + i * stride`. The stride as a `u32`
    /// makes that a 32 × 32-bit multiply, which vector units do in one instruction.
    #[inline]
    pub(crate) fn rx_linear(&self) -> Option<(u64, u32)> {
        self.linear_rx
    }

    /// The device address of fresh receive buffer `index` (its data starts at the pool's headroom).
    #[inline]
    pub(crate) fn rx_addr(&self, index: u32) -> Option<u64> {
        match self.linear_rx {
            // In range by the check in `new`: at most `(buffers - 1) * stride` past buffer 0.
            Some((base, stride)) if index < self.buffers => {
                Some(base.wrapping_add(u64::from(index).wrapping_mul(u64::from(stride))))
            }
            Some(_) => None,
            None => self.rx_addr_checked(index),
        }
    }

    /// [`BufferDma::rx_addr`] with every step checked (page-wise translations).
    #[cold]
    fn rx_addr_checked(&self, index: u32) -> Option<u64> {
        let offset = (index as usize).checked_mul(self.stride)?.checked_add(self.rx_data_off)?;
        self.addr(offset, self.rx_buf_len)
    }
}

#[cfg(test)]
mod tests {
    use netchannel::pool::HugePages;

    use super::*;
    use crate::hw::{DmaGuard, Iova};

    #[derive(Debug)]
    struct NoGuard;
    impl DmaGuard for NoGuard {}

    #[test]
    fn page_wise_translations_refuse_buffers_that_straddle_pages() {
        let pool = Pool::builder(8).hugepages(HugePages::Never).build().expect("pool");
        let len = pool.region().len();
        let pages: Box<[Iova]> = (0..len.div_ceil(4096)).map(|i| Iova(0x10_0000 * (i as u64 + 1))).collect();
        let mapping =
            DmaMapping::new(0, len, Translation::Pages { page_shift: 12, pages }, Box::new(NoGuard));
        let dma = BufferDma::new(&pool, Arc::new(mapping), 2048).expect("geometry");
        let data0 = pool.buffer_offset(0).expect("buffer 0") + pool.headroom();
        // Buffer 0's data room lies inside page 0; buffer 1's crosses into page 1.
        assert_eq!(dma.rx_addr(0), Some(0x10_0000 + data0 as u64));
        assert_eq!(dma.rx_addr(1), None);
        // Packets: only the bytes in use must be contiguous.
        let data1 = pool.buffer_offset(1).expect("buffer 1") + pool.headroom();
        assert_eq!(dma.addr(data1, 64), Some(0x10_0000 + data1 as u64));
        assert_eq!(dma.addr(4096 - 10, 20), None);
        assert_eq!(dma.addr(len - 10, 20), None, "past the mapping");

        let linear =
            DmaMapping::new(0, len, Translation::Linear { base: Iova(0x4000_0000) }, Box::new(NoGuard));
        let dma = BufferDma::new(&pool, Arc::new(linear), 2048).expect("geometry");
        assert_eq!(dma.rx_addr(1), Some(0x4000_0000 + data1 as u64));
        assert_eq!(dma.rx_addr(u32::MAX), None);
    }
}
