//! Shared helpers of the `sim_*` tests: the test plays the driver against the 82599 model with
//! hand-built rings, and builds frames by hand.
#![allow(dead_code, unreachable_pub, missing_docs, reason = "each test uses its own subset of the helpers")]

use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};

use ixgbe_vfio::hw::{DmaMemory, DmaSpace, Mmio};
use ixgbe_vfio::regs::{self, rx, tx};
use ixgbe_vfio::sim::{Model, SimConfig};
use netchannel::dev::MacAddr;
use netchannel::pool::{HugePages, Pool};

/// The model's default MAC address.
pub const MODEL_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// A peer's MAC address.
pub const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// The key of Microsoft's RSS verification suite.
pub const MS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0,
    0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42,
    0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

pub fn pool(buffers: u32) -> Pool {
    Pool::builder(buffers).hugepages(HugePages::Never).build().expect("pool")
}

/// The test in the driver's seat.
pub struct Driver {
    pub model: Model,
    pub bar: Arc<dyn Mmio>,
    pub dma: Arc<dyn DmaSpace>,
}

impl Driver {
    /// A model, reset and with the link up, receive and transmit enabled (queues still off), CRC
    /// stripping on, broadcast accepted, RSS hash / FDir id in the descriptors.
    pub fn new(config: SimConfig) -> Self {
        let model = Model::new(config);
        let d = Self { bar: model.mmio(), dma: model.dma(), model };
        d.reset();
        d.link_up();
        d.bar.write32(regs::FCTRL, regs::FCTRL_BAM);
        d.bar.set_bits(regs::HLREG0, regs::HLREG0_RXCRCSTRP | regs::HLREG0_TXCRCEN | regs::HLREG0_TXPADEN);
        d.bar.write32(regs::RXCSUM, regs::RXCSUM_PCSD);
        d.bar.write32(regs::DMATXCTL, regs::DMATXCTL_TE);
        d.bar.write32(regs::RXCTRL, regs::RXCTRL_RXEN);
        d
    }

    pub fn reset(&self) {
        self.bar.write32(regs::CTRL, regs::CTRL_RST_MASK);
        for _ in 0..1000 {
            if self.bar.read32(regs::CTRL) & regs::CTRL_RST_MASK == 0 {
                return;
            }
        }
        panic!("reset did not complete");
    }

    pub fn link_up(&self) {
        self.bar.write32(regs::AUTOC, regs::AUTOC_LMS_10G_SERIAL | regs::AUTOC_AN_RESTART);
        for _ in 0..1000 {
            if self.bar.read32(regs::LINKS) & regs::LINKS_UP != 0 {
                return;
            }
        }
        panic!("link did not come up");
    }

    /// Sets an RX/TX DCTL enable bit and polls until it reads back.
    pub fn enable(&self, reg: u32) {
        self.bar.set_bits(reg, regs::DCTL_ENABLE);
        for _ in 0..1000 {
            if self.bar.read32(reg) & regs::DCTL_ENABLE != 0 {
                return;
            }
        }
        panic!("queue enable did not read back");
    }

    /// Maps RX and TX queue `q` to statistics counter `q` (RQSMR/TQSM), for q < 16.
    pub fn map_queue_stats(&self) {
        for i in 0..4 {
            let v = u32::from_le_bytes([4 * i as u8, 4 * i as u8 + 1, 4 * i as u8 + 2, 4 * i as u8 + 3]);
            self.bar.write32(regs::rqsmr(i), v);
            self.bar.write32(regs::tqsm(i), v);
        }
    }

    pub fn set_rss(&self, key: &[u8; 40], reta: impl Fn(u32) -> u8, fields: u32) {
        for (i, c) in (0..).zip(key.chunks_exact(4)) {
            self.bar.write32(regs::rssrk(i), u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        }
        for i in 0..32 {
            let e = |j: u32| reta(4 * i + j);
            self.bar.write32(regs::reta(i), u32::from_le_bytes([e(0), e(1), e(2), e(3)]));
        }
        self.bar.write32(regs::MRQC, regs::MRQC_RSSEN | fields);
    }
}

/// Reads `len` bytes at `off` of DMA memory (8-byte aligned `off`).
pub fn read_mem(mem: &DmaMemory, off: usize, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut o = off;
    while out.len() < len {
        out.extend_from_slice(&mem.load_u64(o, Ordering::Relaxed).to_le_bytes());
        o += 8;
    }
    out.truncate(len);
    out
}

/// Writes `data` at `off` of DMA memory (8-byte aligned `off`).
pub fn write_mem(mem: &DmaMemory, off: usize, data: &[u8]) {
    for (i, chunk) in data.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        mem.store_u64(off + 8 * i, u64::from_le_bytes(w), Ordering::Relaxed);
    }
}

/// A received descriptor: the frame bytes (as long as the write-back length says, capped at the
/// buffer), and the two write-back words.
#[derive(Debug)]
pub struct Received {
    pub data: Vec<u8>,
    pub wb0: u64,
    pub wb1: u64,
}

impl Received {
    pub fn len(&self) -> usize {
        (self.wb1 >> rx::LEN_SHIFT & 0xFFFF) as usize
    }
    pub fn eop(&self) -> bool {
        self.wb1 & rx::STAT_EOP != 0
    }
    pub fn rss_hash(&self) -> u32 {
        (self.wb0 >> rx::HASH_SHIFT) as u32
    }
    pub fn soft_id(&self) -> u16 {
        (self.wb0 >> rx::FDIR_ID_SHIFT) as u16
    }
}

/// An RX queue with its ring and buffers.
pub struct RxQueue {
    pub q: u32,
    pub n: usize,
    pub buf_size: usize,
    pub ring: DmaMemory,
    pub bufs: DmaMemory,
    /// The next descriptor to look at.
    pub next: usize,
}

impl RxQueue {
    /// Sets up queue `q` with `n` descriptors and `kib` KiB buffers, enables it and gives the device
    /// `n - 1` descriptors.
    pub fn new(d: &Driver, q: u32, n: usize, kib: u32, drop_en: bool) -> Self {
        let buf_size = kib as usize * 1024;
        let ring = d.dma.alloc(n * regs::DESC_LEN).expect("ring");
        let bufs = d.dma.alloc(n * buf_size).expect("buffers");
        let me = Self { q, n, buf_size, ring, bufs, next: 0 };
        for i in 0..n {
            me.refill(i);
        }
        let base = me.ring.iova(0).expect("iova");
        d.bar.write32(regs::rdbal(q), base.low());
        d.bar.write32(regs::rdbah(q), base.high());
        d.bar.write32(regs::rdlen(q), (n * regs::DESC_LEN) as u32);
        let drop = if drop_en { regs::SRRCTL_DROP_EN } else { 0 };
        d.bar.write32(regs::srrctl(q), regs::SRRCTL_DESCTYPE_ADV_ONEBUF | drop | kib);
        d.bar.write32(regs::rdh(q), 0);
        d.bar.write32(regs::rdt(q), 0);
        d.enable(regs::rxdctl(q));
        fence(Ordering::Release);
        d.bar.write32(regs::rdt(q), (n - 1) as u32);
        me
    }

    pub fn buf_iova(&self, i: usize) -> u64 {
        self.bufs.iova(i * self.buf_size).expect("iova").0
    }

    /// Writes the read-format descriptor `i` (buffer `i`).
    pub fn refill(&self, i: usize) {
        self.ring.store_u64(i * regs::DESC_LEN, self.buf_iova(i), Ordering::Relaxed);
        self.ring.store_u64(i * regs::DESC_LEN + 8, 0, Ordering::Relaxed);
    }

    /// The next completed descriptor, if any; refills it and gives it back (RDT) when `give_back`.
    pub fn poll_one(&mut self, d: &Driver, give_back: bool) -> Option<Received> {
        let i = self.next;
        let wb1 = self.ring.load_u64(i * regs::DESC_LEN + 8, Ordering::Acquire);
        if wb1 & rx::STAT_DD == 0 {
            return None;
        }
        let wb0 = self.ring.load_u64(i * regs::DESC_LEN, Ordering::Relaxed);
        let len = ((wb1 >> rx::LEN_SHIFT & 0xFFFF) as usize).min(self.buf_size);
        let data = read_mem(&self.bufs, i * self.buf_size, len);
        self.next = (i + 1) % self.n;
        if give_back {
            self.refill(i);
            fence(Ordering::Release);
            d.bar.write32(regs::rdt(self.q), i as u32);
        }
        Some(Received { data, wb0, wb1 })
    }

    /// Every completed descriptor, giving each back.
    pub fn drain(&mut self, d: &Driver) -> Vec<Received> {
        let mut out = Vec::new();
        while let Some(r) = self.poll_one(d, true) {
            out.push(r);
        }
        out
    }
}

/// A TX queue with its ring and buffers.
pub struct TxQueue {
    pub q: u32,
    pub n: usize,
    pub ring: DmaMemory,
    pub bufs: DmaMemory,
    pub tail: usize,
}

pub const TX_BUF: usize = 2048;

impl TxQueue {
    pub fn new(d: &Driver, q: u32, n: usize) -> Self {
        let ring = d.dma.alloc(n * regs::DESC_LEN).expect("ring");
        let bufs = d.dma.alloc(n * TX_BUF).expect("buffers");
        let base = ring.iova(0).expect("iova");
        d.bar.write32(regs::tdbal(q), base.low());
        d.bar.write32(regs::tdbah(q), base.high());
        d.bar.write32(regs::tdlen(q), (n * regs::DESC_LEN) as u32);
        d.bar.write32(regs::tdh(q), 0);
        d.bar.write32(regs::tdt(q), 0);
        d.enable(regs::txdctl(q));
        Self { q, n, ring, bufs, tail: 0 }
    }

    /// Queues one descriptor: `data` in buffer `tail`, with `cmd` bits; returns its index.
    pub fn put(&mut self, data: &[u8], cmd: u64) -> usize {
        let i = self.tail;
        write_mem(&self.bufs, i * TX_BUF, data);
        let addr = self.bufs.iova(i * TX_BUF).expect("iova").0;
        self.ring.store_u64(i * regs::DESC_LEN, addr, Ordering::Relaxed);
        let w1 = data.len() as u64 | cmd | tx::DTYP_DATA | tx::DCMD_DEXT | tx::DCMD_IFCS;
        self.ring.store_u64(i * regs::DESC_LEN + 8, w1, Ordering::Relaxed);
        self.tail = (i + 1) % self.n;
        i
    }

    /// Queues a whole frame in one descriptor with EOP|RS.
    pub fn send(&mut self, data: &[u8]) -> usize {
        self.put(data, tx::DCMD_EOP | tx::DCMD_RS | (data.len() as u64) << tx::PAYLEN_SHIFT)
    }

    /// Writes TDT.
    pub fn kick(&self, d: &Driver) {
        fence(Ordering::Release);
        d.bar.write32(regs::tdt(self.q), self.tail as u32);
    }

    pub fn dd(&self, i: usize) -> bool {
        self.ring.load_u64(i * regs::DESC_LEN + 8, Ordering::Acquire) & tx::STAT_DD != 0
    }
}

/// An Ethernet + IPv4 + TCP (or UDP) frame of `len` bytes at least 54, with `tag` in the first
/// payload bytes (if there is room).
pub fn frame(
    dst_mac: [u8; 6],
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    udp: bool,
    len: usize,
    tag: u32,
) -> Vec<u8> {
    let l4 = if udp { 8 } else { 20 };
    let len = len.max(14 + 20 + l4 + 4);
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&PEER_MAC);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = if udp { 17 } else { 6 };
    f[26..30].copy_from_slice(&src.0);
    f[30..34].copy_from_slice(&dst.0);
    f[34..36].copy_from_slice(&src.1.to_be_bytes());
    f[36..38].copy_from_slice(&dst.1.to_be_bytes());
    if udp {
        f[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes());
    } else {
        f[46] = 5 << 4;
    }
    let at = 14 + 20 + l4;
    f[at..at + 4].copy_from_slice(&tag.to_be_bytes());
    f
}

/// A TCP frame to the model from 10.0.0.2:`sport` to 10.0.0.1:80, tagged.
pub fn tcp_to_model(sport: u16, tag: u32) -> Vec<u8> {
    frame(MODEL_MAC, ([10, 0, 0, 2], sport), ([10, 0, 0, 1], 80), false, 64, tag)
}

/// The tag of a frame built by [`frame`].
pub fn tag_of(f: &[u8]) -> u32 {
    let at = if f[23] == 17 { 42 } else { 54 };
    u32::from_be_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]])
}

/// An independent Flow Director perfect-match bucket hash, written from the datasheet's description
/// (§7.1.2.7.15) as the test's oracle: the input is the 11-word big-endian stream, folded and keyed.
pub fn fdir_bucket_hash(
    key: u32,
    flow_type: u32,
    src_ip: [u8; 4],
    dst_ip: [u8; 4],
    sport: u16,
    dport: u16,
) -> u32 {
    let mut stream = [0u32; 11];
    stream[0] = flow_type << 16;
    stream[1] = u32::from_be_bytes(dst_ip);
    stream[5] = u32::from_be_bytes(src_ip);
    stream[9] = u32::from(sport) << 16 | u32::from(dport);
    let vm = stream[0];
    let mut hi = stream[1..].iter().fold(0, |a, w| a ^ w);
    let lo = hi.rotate_right(16);
    hi ^= vm ^ (vm >> 16);
    let mut h = 0u32;
    for bit in 0..32 {
        if key >> bit & 1 == 0 {
            continue;
        }
        let n = bit % 16;
        if bit < 16 {
            let l = if n == 0 { lo } else { lo ^ vm ^ (vm << 16) };
            h ^= l >> n;
        } else {
            h ^= hi >> n;
        }
    }
    h & 0x1FFF
}

/// A config with the given wire and default everything else.
pub fn config(wire: ixgbe_vfio::sim::Wire) -> SimConfig {
    SimConfig { wire, mac: MacAddr(MODEL_MAC), ..SimConfig::default() }
}
