//! Devices: waiting, and smoltcp's `Device` over a netchannel device.

use netchannel::dev::{NetDevice, PacketBatch, Pair, Tap};
use netchannel::pool::{Packet, PoolCache};
use smoltcp::phy::{Checksum, Device, DeviceCapabilities, Medium};
use std::collections::VecDeque;
use std::time::Duration;

/// A device an idle endpoint can sleep on until a frame arrives.
pub(crate) trait Sleep: NetDevice {
    /// The link cannot corrupt a frame (it is memory), so both stacks may skip checksums on it.
    const IN_MEMORY: bool = false;
    fn sleep(&mut self, timeout: Duration);
}

/// Whether stacks on an in-memory link skip checksums (`TCP_BENCH_CSUM`, `trust` by default;
/// `verify` makes both stacks compute and verify them as on a real link).
pub(crate) fn trust_checksums<D: Sleep>() -> bool {
    D::IN_MEMORY && std::env::var("TCP_BENCH_CSUM").map_or(true, |v| v != "verify")
}

impl Sleep for Pair {
    const IN_MEMORY: bool = true;

    fn sleep(&mut self, timeout: Duration) {
        let _ = self.wait(Some(timeout));
    }
}

impl Sleep for Tap {
    fn sleep(&mut self, timeout: Duration) {
        let _ = self.wait_readable(Some(timeout));
    }
}

/// smoltcp's [`Device`] over a netchannel device: received frames are handed to smoltcp in their pool
/// buffers, and each frame smoltcp transmits is written into a fresh pool buffer and sent in bursts.
pub(crate) struct SmolDev<'c, D> {
    pub(crate) dev: D,
    pub(crate) cache: &'c PoolCache,
    pub(crate) rx: VecDeque<Packet<'c>>,
    pub(crate) scratch: PacketBatch<'c>,
    pub(crate) tx: PacketBatch<'c>,
    /// Frames moved, either way (progress).
    pub(crate) moved: u64,
    /// No checksums computed or verified ([`trust_checksums`]).
    pub(crate) trust: bool,
}

impl<'c, D: NetDevice> SmolDev<'c, D> {
    pub(crate) fn new(dev: D, cache: &'c PoolCache) -> Self {
        Self {
            dev,
            cache,
            rx: VecDeque::with_capacity(64),
            scratch: PacketBatch::with_capacity(32),
            tx: PacketBatch::with_capacity(32),
            moved: 0,
            trust: false,
        }
    }

    /// Sends what smoltcp queued; what the device refuses is dropped (TCP retransmits).
    pub(crate) fn flush(&mut self) {
        if !self.tx.is_empty() {
            let _ = self.dev.tx_burst(0, &mut self.tx);
            self.tx.clear();
        }
    }
}

pub(crate) struct SmolRx<'c>(Packet<'c>);

pub(crate) struct SmolTx<'a, 'c, D> {
    pub(crate) dev: &'a mut D,
    pub(crate) cache: &'c PoolCache,
    pub(crate) tx: &'a mut PacketBatch<'c>,
    pub(crate) moved: &'a mut u64,
}

impl smoltcp::phy::RxToken for SmolRx<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0.data())
    }
}

impl<D: NetDevice> smoltcp::phy::TxToken for SmolTx<'_, '_, D> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let Some(mut packet) = self.cache.alloc().filter(|p| p.tailroom() >= len) else {
            // No buffer: the frame is built and dropped, as a full ring would.
            return f(&mut vec![0; len]);
        };
        if packet.set_len(len).is_err() {
            return f(&mut vec![0; len]);
        }
        let r = f(packet.data_mut());
        *self.moved += 1;
        if self.tx.push(packet).is_ok() && self.tx.is_full() {
            let _ = self.dev.tx_burst(0, self.tx);
            self.tx.clear();
        }
        r
    }
}

impl<'c, D: NetDevice> Device for SmolDev<'c, D> {
    type RxToken<'a>
        = SmolRx<'c>
    where
        Self: 'a;
    type TxToken<'a>
        = SmolTx<'a, 'c, D>
    where
        Self: 'a;

    fn receive(&mut self, _: smoltcp::time::Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if self.rx.is_empty() {
            let _ = self.dev.rx_burst(0, self.cache, &mut self.scratch);
            self.rx.extend(self.scratch.drain());
        }
        let packet = self.rx.pop_front()?;
        self.moved += 1;
        Some((
            SmolRx(packet),
            SmolTx { dev: &mut self.dev, cache: self.cache, tx: &mut self.tx, moved: &mut self.moved },
        ))
    }

    fn transmit(&mut self, _: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(SmolTx { dev: &mut self.dev, cache: self.cache, tx: &mut self.tx, moved: &mut self.moved })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = 1514;
        if self.trust {
            // As tcp-lib's `checksum: Trust` and `tx_checksum: false`: neither filled nor checked.
            caps.checksum.ipv4 = Checksum::None;
            caps.checksum.tcp = Checksum::None;
            caps.checksum.icmpv4 = Checksum::None;
        }
        caps
    }
}
