//! The register file: reads and writes of the shared atomic register array ([`get`], [`set`]), which
//! offsets have side effects ([`has_read_effect`], [`has_write_effect`]), and those side effects
//! ([`Device::read`], [`Device::write`]): reset and link handshakes, write-1-to-clear interrupt causes,
//! the queue enable handshake, the receive address filters and Flow Director commands.

use std::sync::atomic::{AtomicU32, Ordering};

use super::stats::counter_slot;
use super::{Device, LinkState, Queue, WireState};
use crate::regs;
use crate::sim::fdir::{self, Masks, Tuple};

/// The queue of a per-queue control register `reg(q)` at `off`, for queues the model serves.
fn queue_of(off: u32, reg: fn(u32) -> u32) -> Option<usize> {
    let base = reg(0);
    let last = reg(regs::MAX_QUEUES.into());
    ((base..last).contains(&off) && (off - base).is_multiple_of(0x40)).then(|| ((off - base) / 0x40) as usize)
}

/// Whether reading `off` has a side effect (or a value computed by the model).
pub(in crate::sim) fn has_read_effect(off: u32) -> bool {
    matches!(
        off,
        regs::CTRL
            | regs::EICR
            | regs::LINKS
            | regs::FDIRFREE
            | regs::FDIRUSTAT
            | regs::FDIRFSTAT
            | regs::GORCL
            | regs::GORCH
            | regs::GOTCL
            | regs::GOTCH
    ) || queue_of(off, regs::rxdctl).is_some()
        || queue_of(off, regs::txdctl).is_some()
        || counter_slot(off).is_some()
}

/// Whether writing `off` has a side effect (or is ignored).
pub(in crate::sim) fn has_write_effect(off: u32) -> bool {
    matches!(
        off,
        regs::CTRL
            | regs::EICR
            | regs::EIMS
            | regs::EIMC
            | regs::EEC
            | regs::RDRXCTL
            | regs::AUTOC
            | regs::LINKS
            | regs::STATUS
            | regs::FDIRCTRL
            | regs::FDIRCMD
            | regs::FDIRFREE
            | regs::FDIRUSTAT
            | regs::FDIRFSTAT
            | regs::GORCL
            | regs::GORCH
            | regs::GOTCL
            | regs::GOTCH
    ) || (regs::ral(0)..regs::ral(128)).contains(&off)
        || queue_of(off, regs::rxdctl).is_some()
        || queue_of(off, regs::txdctl).is_some()
        || counter_slot(off).is_some()
}

/// Reads a register from the array.
#[inline]
pub(super) fn get(regs: &[AtomicU32], off: u32) -> u32 {
    // Acquire: pairs with the Release store of the driver's `write32` (and our own `set`), so that what
    // the driver wrote before a tail write (descriptors, behind its Release fence) is visible.
    regs.get(off as usize / 4).map_or(0, |r| r.load(Ordering::Acquire))
}

/// Writes a register in the array.
#[inline]
pub(super) fn set(regs: &[AtomicU32], off: u32, value: u32) {
    if let Some(r) = regs.get(off as usize / 4) {
        // Release: pairs with the Acquire load of the driver's `read32` (RDH/TDH after write-back).
        r.store(value, Ordering::Release);
    }
}

/// Saturates a counter to a 32-bit register.
fn sat32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A queue index as a register argument (queues are below [`regs::MAX_QUEUES`]).
pub(super) fn qreg(q: usize) -> u32 {
    u32::try_from(q).unwrap_or(u32::MAX)
}

/// Truncates to the low 16 bits (a register field).
#[expect(clippy::cast_possible_truncation, reason = "a 16-bit register field")]
fn low16(v: u32) -> u16 {
    v as u16
}

impl Device {
    /// A read with a side effect ([`has_read_effect`]).
    /// The statistics counter index of RX queue `q` (RQSMR) or TX queue `q` (TQSM).
    pub(super) fn stat_index(regs: &[AtomicU32], map: fn(u32) -> u32, q: usize) -> usize {
        let q = qreg(q);
        ((get(regs, map(q / 4)) >> (8 * (q % 4))) & 0xF) as usize
    }

    pub(in crate::sim) fn read(&mut self, regs: &[AtomicU32], wire: &WireState, off: u32) -> u32 {
        match off {
            regs::CTRL => {
                let v = get(regs, regs::CTRL);
                let Some(left) = self.reset_left else { return v };
                if self.faults.reset_never_clears {
                    return v;
                }
                if left > 0 {
                    self.reset_left = Some(left - 1);
                    return v;
                }
                // The reset is done (§4.6.3.2): RST self-clears, the EEPROM auto-read and the DMA init
                // complete.
                self.reset_left = None;
                let v = v & !regs::CTRL_RST_MASK;
                set(regs, regs::CTRL, v);
                set(regs, regs::EEC, get(regs, regs::EEC) | regs::EEC_ARD);
                set(regs, regs::RDRXCTL, get(regs, regs::RDRXCTL) | regs::RDRXCTL_DMAIDONE);
                v
            }
            regs::EICR => {
                let v = get(regs, regs::EICR);
                set(regs, regs::EICR, 0);
                v
            }
            regs::LINKS => {
                if let Some(left) = self.link.pending {
                    if left > 0 {
                        self.link.pending = Some(left - 1);
                    } else {
                        self.link.pending = None;
                        self.link.up = !self.faults.link_never_up;
                    }
                }
                if self.link.up && wire.carrier() { regs::LINKS_UP | regs::LINKS_SPEED_10G } else { 0 }
            }
            regs::FDIRFREE => u32::try_from(self.fdir.free()).unwrap_or(u32::MAX) & regs::FDIRFREE_FREE_MASK,
            regs::FDIRUSTAT => {
                let v = self.ustat_add.min(regs::FDIRUSTAT_ADD_MASK)
                    | self.ustat_remove.min(0xFFFF) << regs::FDIRUSTAT_REMOVE_SHIFT;
                self.ustat_add = 0;
                self.ustat_remove = 0;
                v
            }
            regs::FDIRFSTAT => {
                let v = self.fstat_add.min(regs::FDIRFSTAT_FADD_MASK)
                    | self.fstat_remove.min(regs::FDIRFSTAT_FIELD_MASK) << regs::FDIRFSTAT_FREMOVE_SHIFT;
                self.fstat_add = 0;
                self.fstat_remove = 0;
                v
            }
            // 36-bit octet counters: the low register reads bits 31:0, the high one bits 35:32 and
            // clears the counter (§8.2.3.23).
            regs::GORCL => sat32(self.gorc & 0xFFFF_FFFF),
            regs::GORCH => {
                let v = sat32((self.gorc >> 32) & 0xF);
                self.gorc = 0;
                v
            }
            regs::GOTCL => sat32(self.gotc & 0xFFFF_FFFF),
            regs::GOTCH => {
                let v = sat32((self.gotc >> 32) & 0xF);
                self.gotc = 0;
                v
            }
            _ => {
                if let Some(q) = queue_of(off, regs::rxdctl) {
                    return Self::read_dctl(regs, off, &mut self.rxq[q]);
                }
                if let Some(q) = queue_of(off, regs::txdctl) {
                    return Self::read_dctl(regs, off, &mut self.txq[q]);
                }
                if let Some(s) = counter_slot(off) {
                    let v = sat32(self.counters[s]);
                    self.counters[s] = 0;
                    return v;
                }
                get(regs, off)
            }
        }
    }

    fn read_dctl(regs: &[AtomicU32], off: u32, q: &mut Queue) -> u32 {
        if q.reads_left > 0 {
            q.reads_left -= 1;
        } else {
            q.shown = q.on;
        }
        let v = get(regs, off) & !regs::DCTL_ENABLE;
        if q.shown { v | regs::DCTL_ENABLE } else { v }
    }

    /// A write with a side effect ([`has_write_effect`]).
    pub(in crate::sim) fn write(&mut self, regs: &[AtomicU32], off: u32, value: u32) {
        match off {
            regs::CTRL => {
                if value & regs::CTRL_RST != 0 {
                    self.reset(regs);
                    self.stats.resets += 1;
                    set(regs, regs::CTRL, value & regs::CTRL_RST_MASK);
                    set(regs, regs::EEC, get(regs, regs::EEC) & !regs::EEC_ARD);
                    set(regs, regs::RDRXCTL, get(regs, regs::RDRXCTL) & !regs::RDRXCTL_DMAIDONE);
                    self.reset_left = Some(self.reset_reads);
                } else if value & regs::CTRL_LNK_RST != 0 {
                    self.link = LinkState::default();
                    set(regs, regs::CTRL, value);
                    self.reset_left = Some(self.reset_reads);
                } else {
                    set(regs, regs::CTRL, value);
                }
            }
            // Write 1 to clear.
            regs::EICR => set(regs, regs::EICR, get(regs, regs::EICR) & !value),
            regs::EIMS => set(regs, regs::EIMS, get(regs, regs::EIMS) | value),
            regs::EIMC => set(regs, regs::EIMS, get(regs, regs::EIMS) & !value),
            // Read-only status bits keep their value.
            regs::EEC => {
                set(regs, regs::EEC, (value & !regs::EEC_ARD) | (get(regs, regs::EEC) & regs::EEC_ARD));
            }
            regs::RDRXCTL => {
                let done = get(regs, regs::RDRXCTL) & regs::RDRXCTL_DMAIDONE;
                set(regs, regs::RDRXCTL, (value & !regs::RDRXCTL_DMAIDONE) | done);
            }
            regs::AUTOC => {
                if value & regs::AUTOC_AN_RESTART != 0 {
                    // AN_RESTART self-clears; the link trains (§4.6.4).
                    self.link.up = false;
                    self.link.pending = Some(self.link_reads);
                }
                set(regs, regs::AUTOC, value & !regs::AUTOC_AN_RESTART);
            }
            regs::FDIRCTRL => {
                // Writing PBALLOC initializes the filter table (§7.1.2.7.x); INIT_DONE is read-only.
                let pballoc = value & 0x3;
                self.fdir.init(pballoc);
                let v = if pballoc != 0 {
                    value | regs::FDIRCTRL_INIT_DONE
                } else {
                    value & !regs::FDIRCTRL_INIT_DONE
                };
                set(regs, regs::FDIRCTRL, v);
            }
            regs::FDIRCMD => self.fdir_command(regs, value),
            o if (regs::ral(0)..regs::ral(128)).contains(&o) => {
                set(regs, o, value);
                self.update_unicast(regs);
            }
            _ => {
                if let Some(q) = queue_of(off, regs::rxdctl) {
                    Self::write_dctl(regs, off, value, &mut self.rxq[q], self.enable_reads);
                } else if let Some(q) = queue_of(off, regs::txdctl) {
                    Self::write_dctl(regs, off, value, &mut self.txq[q], self.enable_reads);
                } else {
                    // LINKS, STATUS, statistics: read-only.
                    self.stats.ignored_writes += 1;
                }
            }
        }
    }

    fn write_dctl(regs: &[AtomicU32], off: u32, value: u32, q: &mut Queue, reads: u32) {
        let want = value & regs::DCTL_ENABLE != 0;
        if want != q.on {
            q.on = want;
            q.reads_left = reads;
            q.ring_fault = false;
            q.frame.clear();
            q.frame_bad = false;
        }
        set(regs, off, value);
    }

    fn update_unicast(&mut self, regs: &[AtomicU32]) {
        self.unicast.clear();
        for i in 0..128 {
            let high = get(regs, regs::rah(i));
            if high & regs::RAH_AV != 0 {
                let [a, b, c, d] = get(regs, regs::ral(i)).to_le_bytes();
                let [e, f, _, _] = high.to_le_bytes();
                self.unicast.push([a, b, c, d, e, f]);
            }
        }
    }

    /// Executes an FDIRCMD command (§7.1.2.7.10); the command field self-clears.
    fn fdir_command(&mut self, regs: &[AtomicU32], value: u32) {
        if value & regs::FDIRCMD_CLEARHT != 0 {
            self.fdir.clear();
        }
        let mut done = value & !regs::FDIRCMD_CMD_MASK & !regs::FDIRCMD_FILTER_VALID;
        match value & regs::FDIRCMD_CMD_MASK {
            regs::FDIRCMD_ADD_FLOW => {
                let masks = Masks::from_regs(|r| get(regs, r));
                let port = get(regs, regs::FDIRPORT);
                let vlan = get(regs, regs::FDIRVLAN);
                let raw = Tuple {
                    src_ip: get(regs, regs::FDIRIPSA),
                    dst_ip: get(regs, regs::FDIRIPDA),
                    src_port: low16(port),
                    dst_port: low16(port >> 16),
                    flow_type: ((value >> regs::FDIRCMD_L4TYPE_SHIFT) & 0x7) as u8,
                    vlan: low16(vlan),
                    flex: low16(vlan >> 16),
                };
                let tuple = masks.apply(raw);
                let pool = masks.pool(((value >> regs::FDIRCMD_VT_POOL_SHIFT) & 0x3F) as u8);
                let queue = (value & regs::FDIRCMD_QUEUE_EN != 0)
                    .then_some(low16((value >> regs::FDIRCMD_RX_QUEUE_SHIFT) & 0x7F));
                let drop = value & regs::FDIRCMD_DROP != 0;
                let update = value & regs::FDIRCMD_FILTER_UPDATE != 0;
                let hash = get(regs, regs::FDIRHASH);
                let key = get(regs, regs::FDIRHKEY);
                match self.fdir.add(tuple, pool, hash, key, (queue, drop), update) {
                    Ok(fdir::Added::New) => {
                        self.ustat_add = self.ustat_add.saturating_add(1);
                        self.stats.fdir_adds += 1;
                    }
                    Ok(fdir::Added::Updated) => {
                        self.ustat_add = self.ustat_add.saturating_add(1);
                        self.stats.fdir_updates += 1;
                    }
                    Err(e) => {
                        self.fstat_add = self.fstat_add.saturating_add(1);
                        self.stats.fdir_failed_adds += 1;
                        if e == fdir::AddError::HashMismatch {
                            self.stats.fdir_hash_mismatches += 1;
                        }
                    }
                }
            }
            regs::FDIRCMD_REMOVE_FLOW => {
                if self.fdir.remove(get(regs, regs::FDIRHASH)) {
                    self.ustat_remove = self.ustat_remove.saturating_add(1);
                    self.stats.fdir_removes += 1;
                } else {
                    self.fstat_remove = self.fstat_remove.saturating_add(1);
                    self.stats.fdir_failed_removes += 1;
                }
            }
            regs::FDIRCMD_QUERY if self.fdir.query(get(regs, regs::FDIRHASH)).is_some() => {
                done |= regs::FDIRCMD_FILTER_VALID;
            }
            _ => {}
        }
        set(regs, regs::FDIRCMD, done);
    }
}
