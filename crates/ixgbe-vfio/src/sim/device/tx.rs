//! The transmit path (§7.2): descriptors from TDH up to TDT gathered into frames, counted, and handed to
//! the wire in bursts ([`Sink`]).

use std::sync::atomic::{AtomicU32, Ordering};

use netchannel::dev::{NetDevice, PacketBatch};
use netchannel::pool::PoolCache;

use super::regfile::{get, qreg, set};
use super::{Device, FCS_LEN, MAX_TX_FRAME, MIN_FRAME, Pass, WireState, slot};
use crate::regs::{self, tx};
use crate::sim::SimStats;

/// TX descriptors per queue per pass (a frame in progress is always finished).
const TX_BUDGET: usize = 512;
/// Frames per wire transmit burst.
const TX_BURST: usize = 64;

impl Device {
    /// Transmits from TX queue `q` (§7.2.2): descriptors from TDH up to TDT.
    pub(super) fn transmit(
        &mut self,
        regs: &[AtomicU32],
        pass: &Pass,
        q: usize,
        sink: &mut Sink<'_>,
    ) -> usize {
        let qr = qreg(q);
        let ring =
            Self::ring(regs, regs::tdbal(qr), regs::tdbah(qr), regs::tdlen(qr), regs::tdh(qr), regs::tdt(qr))
                .filter(|r| self.iommu.check(r.base, u64::from(r.n) * regs::DESC_LEN as u64));
        let Some(ring) = ring else {
            let queue = &mut self.txq[q];
            // Count a bad ring once per enable, and only when the driver gave it work.
            if !queue.ring_fault && get(regs, regs::tdt(qr)) != get(regs, regs::tdh(qr)) {
                queue.ring_fault = true;
                self.stats.ring_faults += 1;
            }
            return 0;
        };
        let mut head = ring.head;
        let mut sent = 0;
        let mut budget = TX_BUDGET;
        while head != ring.tail && (budget > 0 || !self.txq[q].frame.is_empty()) {
            budget = budget.saturating_sub(1);
            let desc = ring.base + u64::from(head) * regs::DESC_LEN as u64;
            // Relaxed: the Acquire load of TDT ordered the driver's descriptor writes.
            let (Some(addr), Some(cmd)) =
                (self.iommu.load(desc, Ordering::Relaxed), self.iommu.load(desc + 8, Ordering::Relaxed))
            else {
                self.stats.dma_faults += 1;
                break;
            };
            head = (head + 1) % ring.n;
            let context = cmd & tx::DCMD_DEXT != 0 && cmd & tx::DTYP_MASK == tx::DTYP_CONTEXT;
            if !context {
                let len = (cmd & tx::DTALEN_MASK) as usize;
                let queue = &mut self.txq[q];
                if !queue.frame_bad {
                    if queue.frame.len() + len > MAX_TX_FRAME {
                        queue.frame_bad = true;
                    } else if !self.iommu.read_bytes(addr, len, &mut queue.frame) {
                        queue.frame_bad = true;
                        self.stats.dma_faults += 1;
                    }
                }
                if cmd & tx::DCMD_EOP != 0 {
                    let mut frame = std::mem::take(&mut self.txq[q].frame);
                    if self.txq[q].frame_bad || frame.is_empty() {
                        self.stats.tx_dropped += 1;
                    } else {
                        if pass.tx_pad && frame.len() < MIN_FRAME {
                            frame.resize(MIN_FRAME, 0);
                        }
                        self.count(slot::GPTC);
                        self.count(slot::TPT);
                        self.gotc = self.gotc.wrapping_add((frame.len() + FCS_LEN) as u64) & 0xF_FFFF_FFFF;
                        let stat = Self::stat_index(regs, regs::tqsm, q);
                        self.count(slot::QPTC + stat);
                        self.stats.tx_sent += 1;
                        self.stats.tx_bytes += frame.len() as u64;
                        sink.send(&frame, &mut self.stats);
                        sent += 1;
                    }
                    frame.clear();
                    self.txq[q].frame = frame;
                    self.txq[q].frame_bad = false;
                }
            }
            if cmd & tx::DCMD_RS != 0 {
                // Release: the write-back (§7.2.3.2.4); pairs with the driver's Acquire load of word 1.
                self.iommu.store(desc + 8, tx::STAT_DD, Ordering::Release);
            }
        }
        set(regs, regs::tdh(qr), head);
        sent
    }
}

/// Where transmitted frames go.
pub(super) enum Sink<'w> {
    Discard,
    Device { dev: &'w mut (dyn NetDevice + Send), cache: &'w PoolCache, batch: Option<PacketBatch<'w>> },
}

impl<'w> Sink<'w> {
    pub(super) fn new(wire: &'w mut WireState) -> Self {
        match wire {
            WireState::Device { dev, cache } => Self::Device { dev: dev.as_mut(), cache, batch: None },
            WireState::None | WireState::Generator { .. } => Self::Discard,
        }
    }

    fn send(&mut self, frame: &[u8], stats: &mut SimStats) {
        let Self::Device { cache, batch, .. } = self else { return };
        let Some(mut packet) = cache.alloc() else {
            stats.tx_dropped += 1;
            return;
        };
        if packet.extend_from_slice(frame).is_err() {
            stats.tx_dropped += 1;
            return;
        }
        let full = {
            let b = batch.get_or_insert_with(|| PacketBatch::with_capacity(TX_BURST));
            if let Err(p) = b.push(packet) {
                drop(p);
                stats.tx_dropped += 1;
            }
            b.is_full()
        };
        if full {
            self.flush(stats);
        }
    }

    pub(super) fn flush(&mut self, stats: &mut SimStats) {
        let Self::Device { dev, batch: Some(batch), .. } = self else { return };
        if batch.is_empty() {
            return;
        }
        let _ = dev.tx_burst(0, batch);
        // A full wire loses what it did not take, like a cable with no room.
        stats.tx_dropped += batch.len() as u64;
        batch.clear();
    }
}
