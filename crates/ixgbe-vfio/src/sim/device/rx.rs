//! The receive path (§7.1): a frame from the wire through the destination address filter, steering
//! (Flow Director, then RSS through the redirection table, then queue 0; [`Parsed`] is what steering
//! reads of a frame), and the write-back into the queue's descriptor ring.

use std::sync::atomic::{AtomicU32, Ordering};

use netchannel::classify::{Classified, classify};
use netchannel::dev::MacAddr;
use netchannel::signature::Proto;

use super::regfile::{get, qreg, set};
use super::{Device, FCS_LEN, MIN_FRAME, Outcome, Pass, Ring, Rss, slot};
use crate::regs::{self, rx};
use crate::sim::fdir::{self, Masks, Tuple};
use crate::sim::hash::{ToeplitzTable, ethernet_fcs};

/// The RSS redirection table's size (§7.1.2.8.3).
const RETA_ENTRIES: u32 = 128;

/// Where a frame goes.
struct Steer {
    /// The RX queue, `None` for a Flow Director drop filter.
    queue: Option<usize>,
    /// Write-back word 0.
    wb0: u64,
    /// Write-back word 1 status bits besides DD/EOP (FLM).
    status: u64,
    /// Flow Director looked the packet up: whether it matched.
    fdir: Option<bool>,
}

impl Device {
    /// Receives one frame from the wire (without FCS).
    pub(super) fn receive(
        &mut self,
        regs: &[AtomicU32],
        pass: &Pass,
        frame: &[u8],
        drop_when_full: bool,
    ) -> Outcome {
        if frame.len() >= MIN_FRAME && pass.crc_strip {
            return self.receive_frame(regs, pass, frame, frame.len() + FCS_LEN, drop_when_full);
        }
        // Pad as the sending MAC would have; keep the FCS when CRC stripping is off (HLREG0.RXCRCSTRP).
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend_from_slice(frame);
        if buf.len() < MIN_FRAME {
            buf.resize(MIN_FRAME, 0);
        }
        let wire_len = buf.len() + FCS_LEN;
        if !pass.crc_strip {
            let fcs = ethernet_fcs(&buf);
            buf.extend_from_slice(&fcs);
        }
        let out = self.receive_frame(regs, pass, &buf, wire_len, drop_when_full);
        self.scratch = buf;
        out
    }

    /// The destination address filter (§7.1.1.1).
    fn accepts(&self, regs: &[AtomicU32], pass: &Pass, frame: &[u8]) -> (bool, bool, bool) {
        let dst: [u8; 6] = frame.get(..6).and_then(|d| d.try_into().ok()).unwrap_or([0; 6]);
        let mac = MacAddr(dst);
        if mac == MacAddr::BROADCAST {
            (pass.fctrl & regs::FCTRL_BAM != 0 || pass.fctrl & regs::FCTRL_MPE != 0, true, false)
        } else if mac.is_multicast() {
            // Multicast promiscuous, or the multicast table array's bit for the address
            // (§7.1.1.1.2, MCSTCTRL.MO = 00).
            let bit = regs::mta_bit(dst);
            let in_table = pass.mta_filter && get(regs, regs::mta(bit >> 5)) & (1 << (bit & 31)) != 0;
            (pass.fctrl & regs::FCTRL_MPE != 0 || in_table, false, true)
        } else {
            (pass.fctrl & regs::FCTRL_UPE != 0 || self.unicast.contains(&dst), false, false)
        }
    }

    fn receive_frame(
        &mut self,
        regs: &[AtomicU32],
        pass: &Pass,
        frame: &[u8],
        wire_len: usize,
        drop_when_full: bool,
    ) -> Outcome {
        let (accept, broadcast, multicast) = self.accepts(regs, pass, frame);
        if !accept {
            self.stats.rx_wire += 1;
            self.stats.rx_dropped_filtered += 1;
            return Outcome::Dropped;
        }
        if wire_len > pass.max_frame {
            self.stats.rx_wire += 1;
            self.count(slot::TPR);
            self.count(slot::ROC);
            self.stats.rx_dropped_oversize += 1;
            return Outcome::Dropped;
        }
        let steer = self.steer(regs, pass, frame);
        let ring = match steer.queue {
            Some(q) if pass.rxen && self.rxq.get(q).is_some_and(|s| s.on) => self.rx_ring(regs, q),
            _ => None,
        };
        let bsize = steer.queue.map_or(0, |q| {
            let srrctl = get(regs, regs::srrctl(qreg(q)));
            if srrctl & regs::SRRCTL_DESCTYPE_MASK == regs::SRRCTL_DESCTYPE_ADV_ONEBUF {
                (srrctl & regs::SRRCTL_BSIZEPKT_MASK) as usize * 1024
            } else {
                0 // only advanced one-buffer descriptors are modelled
            }
        });
        let needed = frame.len().div_ceil(bsize.max(1)).max(1);
        if let (Some(r), Some(_)) = (ring, steer.queue)
            && bsize > 0
        {
            let free = (r.tail + r.n - r.head) % r.n;
            if (free as usize) < needed && !drop_when_full {
                return Outcome::NoDescriptor;
            }
        }
        // From here on the frame counts as received.
        self.stats.rx_wire += 1;
        self.count(slot::TPR);
        match steer.fdir {
            Some(true) => {
                self.count(slot::FDIRMATCH);
                self.stats.fdir_matches += 1;
            }
            Some(false) => {
                self.count(slot::FDIRMISS);
                self.stats.fdir_misses += 1;
            }
            None => {}
        }
        let Some(q) = steer.queue else {
            self.stats.rx_dropped_fdir += 1;
            return Outcome::Dropped;
        };
        let Some(ring) = ring.filter(|_| bsize > 0) else {
            if pass.rxen && self.rxq.get(q).is_some_and(|s| s.on) {
                self.rx_ring_fault(q);
            }
            self.count(slot::MPC);
            self.stats.rx_dropped_disabled += 1;
            return Outcome::Dropped;
        };
        let free = (ring.tail + ring.n - ring.head) % ring.n;
        if (free as usize) < needed {
            self.no_descriptor(regs, q, ring, frame.len());
            return Outcome::Dropped;
        }
        // Write the frame, one buffer per descriptor (§7.1.6), the status word last.
        let mut head = ring.head;
        let mut faulted = false;
        let chunks = frame.chunks(bsize);
        let last = needed - 1;
        for (i, chunk) in chunks.enumerate() {
            let desc = ring.base + u64::from(head) * regs::DESC_LEN as u64;
            // Relaxed: the Acquire load of RDT in `rx_ring` ordered the driver's descriptor writes.
            let Some(buf) = self.iommu.load(desc, Ordering::Relaxed) else {
                self.stats.dma_faults += 1;
                faulted = true;
                break;
            };
            head = (head + 1) % ring.n;
            if !self.iommu.write_bytes(buf, chunk) {
                // IOMMU fault: nothing written; the descriptor completes with an error (RXE).
                self.stats.dma_faults += 1;
                let wb1 = rx::STAT_DD | rx::STAT_EOP | rx::ERR_RXE;
                // Release: publishes the write-back; pairs with the driver's Acquire load of word 1.
                self.iommu.store(desc + 8, wb1, Ordering::Release);
                faulted = true;
                break;
            }
            let mut len = chunk.len() as u64;
            let mut status = rx::STAT_DD | steer.status;
            if i == last {
                status |= rx::STAT_EOP;
                self.seq += 1;
                self.inject(&mut status, &mut len, bsize);
            }
            // Relaxed: ordered before the Release store of word 1 below.
            self.iommu.store(desc, steer.wb0, Ordering::Relaxed);
            // Release: publishes the buffer and word 0; pairs with the driver's Acquire load of word 1.
            self.iommu.store(desc + 8, status | len << rx::LEN_SHIFT, Ordering::Release);
        }
        set(regs, regs::rdh(qreg(q)), head);
        if faulted {
            return Outcome::Dropped;
        }
        self.count(slot::GPRC);
        if broadcast {
            self.count(slot::BPRC);
        } else if multicast {
            self.count(slot::MPRC);
        }
        self.gorc = self.gorc.wrapping_add(wire_len as u64) & 0xF_FFFF_FFFF;
        let stat = Self::stat_index(regs, regs::rqsmr, q);
        self.count(slot::QPRC + stat);
        self.stats.rx_delivered += 1;
        self.stats.rx_bytes += frame.len() as u64;
        Outcome::Delivered
    }

    /// Counts an unusable RX ring, once per enable of its queue.
    pub(super) fn rx_ring_fault(&mut self, q: usize) {
        if let Some(queue) = self.rxq.get_mut(q)
            && !queue.ring_fault
        {
            queue.ring_fault = true;
            self.stats.ring_faults += 1;
        }
    }

    /// A frame for queue `q` found no free descriptor (§7.1.5: dropped and counted in QPRDC with
    /// SRRCTL.DROP_EN; otherwise the packet buffer overflows: RNBC and MPC).
    fn no_descriptor(&mut self, regs: &[AtomicU32], q: usize, ring: Ring, len: usize) {
        self.stats.rx_dropped_no_desc += 1;
        if get(regs, regs::srrctl(qreg(q))) & regs::SRRCTL_DROP_EN != 0 {
            let stat = Self::stat_index(regs, regs::rqsmr, q);
            self.count(slot::QPRDC + stat);
        } else {
            self.count(slot::RNBC);
            self.count(slot::MPC);
        }
        if self.faults.write_past_tail {
            // Fault: complete the descriptor at the tail, which the device does not own.
            let desc = ring.base + u64::from(ring.tail) * regs::DESC_LEN as u64;
            let wb1 = rx::STAT_DD | rx::STAT_EOP | (len as u64) << rx::LEN_SHIFT;
            self.iommu.store(desc, 0, Ordering::Relaxed);
            // Release: as a normal write-back.
            self.iommu.store(desc + 8, wb1, Ordering::Release);
            self.stats.faults_injected += 1;
        }
    }

    /// RX queue `q`'s ring, when its registers describe a usable one.
    pub(super) fn rx_ring(&self, regs: &[AtomicU32], q: usize) -> Option<Ring> {
        let q = qreg(q);
        let ring =
            Self::ring(regs, regs::rdbal(q), regs::rdbah(q), regs::rdlen(q), regs::rdh(q), regs::rdt(q))?;
        self.iommu.check(ring.base, u64::from(ring.n) * regs::DESC_LEN as u64).then_some(ring)
    }

    /// Flow Director, then RSS, then queue 0 (§7.1.2).
    fn steer(&self, regs: &[AtomicU32], pass: &Pass, frame: &[u8]) -> Steer {
        let parsed = Parsed::of(frame);
        let mut steer = Steer { queue: Some(0), wb0: parsed.pkt_type(), status: 0, fdir: None };
        if let Some(rss) = &pass.rss
            && let Some(table) = &self.rss_table
            && let Some((hash, ty)) = parsed.rss(rss, table)
        {
            let index = hash % RETA_ENTRIES;
            let entry = (get(regs, regs::reta(index / 4)) >> (8 * (index % 4))) & 0xF;
            steer.queue = Some(entry as usize);
            steer.wb0 |= ty;
            if pass.pcsd {
                steer.wb0 |= u64::from(hash) << rx::HASH_SHIFT;
            }
        }
        if let Some(masks) = &pass.fdir
            && let Some(tuple) = parsed.fdir_tuple(frame, masks)
        {
            match self.fdir.lookup(&masks.apply(tuple)) {
                Some(action) => {
                    steer.fdir = Some(true);
                    steer.status |= rx::STAT_FLM;
                    if pass.pcsd {
                        steer.wb0 = (steer.wb0 & 0xFFFF_FFFF)
                            | u64::from(action.bucket & 0x7FFF) << rx::HASH_SHIFT
                            | u64::from(action.soft_id) << rx::FDIR_ID_SHIFT;
                    }
                    if action.drop {
                        steer.queue = None;
                    } else if let Some(q) = action.queue {
                        steer.queue = Some(usize::from(q));
                    }
                }
                None => steer.fdir = Some(false),
            }
        }
        steer
    }
}

/// What the model parses of a received frame for steering.
struct Parsed {
    /// Source and destination addresses (IPv4 in the first 4 bytes), when the frame is IP.
    ip: Option<(bool, [u8; 16], [u8; 16])>,
    /// Transport protocol and ports of a TCP/UDP flow (not a fragment).
    l4: Option<(Proto, u16, u16)>,
    /// The 802.1Q tag control information.
    vlan: u16,
}

impl Parsed {
    fn of(frame: &[u8]) -> Self {
        let be16 = |at: usize| frame.get(at..at + 2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        let tagged = be16(12) == netchannel::classify::ETHERTYPE_VLAN;
        let vlan = if tagged { be16(14) } else { 0 };
        let l3 = if tagged { 18 } else { 14 };
        if let Classified::Flow { sig, .. } = classify(frame) {
            let (remote, local) = (sig.remote(), sig.local());
            let (v6, src, dst) = match (remote.ip(), local.ip()) {
                (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                    (false, pad16(&s.octets()), pad16(&d.octets()))
                }
                (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => (true, s.octets(), d.octets()),
                _ => return Self { ip: None, l4: None, vlan },
            };
            return Self {
                ip: Some((v6, src, dst)),
                l4: Some((sig.proto(), remote.port(), local.port())),
                vlan,
            };
        }
        // Not a flow: the addresses still feed the IP-only RSS hash.
        let ip = match be16(l3 - 2) {
            netchannel::classify::ETHERTYPE_IPV4 if frame.get(l3).is_some_and(|b| b >> 4 == 4) => {
                match (frame.get(l3 + 12..l3 + 16), frame.get(l3 + 16..l3 + 20)) {
                    (Some(s), Some(d)) => Some((false, pad16(s), pad16(d))),
                    _ => None,
                }
            }
            netchannel::classify::ETHERTYPE_IPV6 if frame.get(l3).is_some_and(|b| b >> 4 == 6) => {
                match (frame.get(l3 + 8..l3 + 24), frame.get(l3 + 24..l3 + 40)) {
                    (Some(s), Some(d)) => Some((true, pad16(s), pad16(d))),
                    _ => None,
                }
            }
            _ => None,
        };
        Self { ip, l4: None, vlan }
    }

    /// Packet type bits of write-back word 0 (§7.1.6.2).
    fn pkt_type(&self) -> u64 {
        let mut t = match self.ip {
            Some((false, ..)) => rx::PKT_TYPE_IPV4,
            Some((true, ..)) => rx::PKT_TYPE_IPV6,
            None => 0,
        };
        match self.l4 {
            Some((Proto::Tcp, ..)) => t |= rx::PKT_TYPE_TCP,
            Some((Proto::Udp, ..)) => t |= rx::PKT_TYPE_UDP,
            None => {}
        }
        t
    }

    /// The RSS hash and type (§7.1.2.8.1: the fields MRQC enables for the packet's type).
    fn rss(&self, rss: &Rss, table: &ToeplitzTable) -> Option<(u32, u64)> {
        let (v6, src, dst) = self.ip?;
        let alen = if v6 { 16 } else { 4 };
        let mut input = [0u8; 36];
        input[..alen].copy_from_slice(&src[..alen]);
        input[alen..2 * alen].copy_from_slice(&dst[..alen]);
        let f = rss.fields;
        let (l4_type, with_ports) = match (self.l4, v6) {
            (Some((Proto::Tcp, ..)), false) if f & regs::MRQC_RSS_FIELD_IPV4_TCP != 0 => {
                (rx::RSS_TYPE_TCP_IPV4, true)
            }
            (Some((Proto::Udp, ..)), false) if f & regs::MRQC_RSS_FIELD_IPV4_UDP != 0 => {
                (rx::RSS_TYPE_UDP_IPV4, true)
            }
            (Some((Proto::Tcp, ..)), true) if f & regs::MRQC_RSS_FIELD_IPV6_TCP != 0 => {
                (rx::RSS_TYPE_TCP_IPV6, true)
            }
            (Some((Proto::Udp, ..)), true) if f & regs::MRQC_RSS_FIELD_IPV6_UDP != 0 => {
                (rx::RSS_TYPE_UDP_IPV6, true)
            }
            (_, false) if f & regs::MRQC_RSS_FIELD_IPV4 != 0 => (rx::RSS_TYPE_IPV4, false),
            (_, true) if f & regs::MRQC_RSS_FIELD_IPV6 != 0 => (rx::RSS_TYPE_IPV6, false),
            _ => return None,
        };
        let mut n = 2 * alen;
        if with_ports && let Some((_, sport, dport)) = self.l4 {
            input[n..n + 2].copy_from_slice(&sport.to_be_bytes());
            input[n + 2..n + 4].copy_from_slice(&dport.to_be_bytes());
            n += 4;
        }
        Some((table.hash(&input[..n]), l4_type))
    }

    /// The Flow Director input of an IPv4 TCP/UDP packet (IPv6 filters are not modelled).
    fn fdir_tuple(&self, frame: &[u8], masks: &Masks) -> Option<Tuple> {
        let (false, src, dst) = self.ip? else { return None };
        let (proto, sport, dport) = self.l4?;
        let flow_type = match proto {
            Proto::Tcp => fdir::L4_TCP,
            Proto::Udp => fdir::L4_UDP,
        };
        let flex = frame
            .get(masks.flex_offset..masks.flex_offset + 2)
            .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
        Some(Tuple {
            src_ip: u32::from_le_bytes([src[0], src[1], src[2], src[3]]),
            dst_ip: u32::from_le_bytes([dst[0], dst[1], dst[2], dst[3]]),
            src_port: sport,
            dst_port: dport,
            flow_type,
            vlan: self.vlan,
            flex,
        })
    }
}

/// An address in a 16-byte array (IPv4 in the first 4 bytes).
fn pad16(b: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    let n = b.len().min(16);
    out[..n].copy_from_slice(&b[..n]);
    out
}
