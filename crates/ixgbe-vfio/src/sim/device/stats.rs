//! The clear-on-read statistics registers (§8.2.3.23): which counter slot of [`Device::counters`] a
//! register offset reads, and counting into a slot. Which per-queue counter a queue's frames go to
//! (RQSMR/TQSM) is a register read, in `regfile.rs`.

use super::Device;
use super::slot;
use crate::regs;

/// The counter slot of a clear-on-read statistics register.
pub(super) fn counter_slot(off: u32) -> Option<usize> {
    let idx = |base: u32, stride: u32| ((off - base) / stride) as usize;
    Some(match off {
        regs::CRCERRS => slot::CRCERRS,
        regs::ILLERRC => slot::ILLERRC,
        regs::ERRBC => slot::ERRBC,
        regs::RLEC => slot::RLEC,
        regs::GPRC => slot::GPRC,
        regs::BPRC => slot::BPRC,
        regs::MPRC => slot::MPRC,
        regs::GPTC => slot::GPTC,
        regs::RUC => slot::RUC,
        regs::ROC => slot::ROC,
        regs::TPR => slot::TPR,
        regs::TPT => slot::TPT,
        regs::FDIRMATCH => slot::FDIRMATCH,
        regs::FDIRMISS => slot::FDIRMISS,
        o if (regs::mpc(0)..regs::mpc(8)).contains(&o) && o % 4 == 0 => slot::MPC + idx(regs::mpc(0), 4),
        o if (regs::rnbc(0)..regs::rnbc(8)).contains(&o) && o % 4 == 0 => slot::RNBC + idx(regs::rnbc(0), 4),
        o if (regs::qprc(0)..regs::qprc(16)).contains(&o) && o % 0x40 == regs::qprc(0) % 0x40 => {
            slot::QPRC + idx(regs::qprc(0), 0x40)
        }
        o if (regs::qprdc(0)..regs::qprdc(16)).contains(&o) && o % 0x40 == regs::qprdc(0) % 0x40 => {
            slot::QPRDC + idx(regs::qprdc(0), 0x40)
        }
        o if (regs::qptc(0)..regs::qptc(16)).contains(&o) && o % 0x40 == regs::qptc(0) % 0x40 => {
            slot::QPTC + idx(regs::qptc(0), 0x40)
        }
        _ => return None,
    })
}

impl Device {
    pub(super) fn count(&mut self, slot: usize) {
        if let Some(c) = self.counters.get_mut(slot) {
            *c = c.saturating_add(1);
        }
    }
}
