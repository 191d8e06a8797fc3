//! The fault modes of [`SimFaults`] that corrupt a frame's last receive write-back (bad length, missing
//! EOP, bogus status, zero length). The other fault modes act where the behaviour they break lives: a
//! reset that never clears and a link that never comes up in [`Device::read`], a write past the tail in
//! the receive path.
//!
//! [`SimFaults`]: crate::sim::SimFaults

use super::Device;
use crate::regs::rx;

impl Device {
    /// The faults of [`SimFaults`](crate::sim::SimFaults) that change a frame's last write-back.
    pub(super) fn inject(&mut self, status: &mut u64, len: &mut u64, bsize: usize) {
        let seq = self.seq;
        let hit = |every: Option<u32>| every.is_some_and(|e| e != 0 && seq.is_multiple_of(u64::from(e)));
        let f = self.faults;
        if hit(f.bad_length_every) {
            *len = (bsize as u64 + 1024).min(0xFFFF);
            self.stats.faults_injected += 1;
        }
        if hit(f.missing_eop_every) {
            *status &= !rx::STAT_EOP;
            self.stats.faults_injected += 1;
        }
        if hit(f.bogus_status_every) {
            *status |= 0x000F_FFF0 | 0xFFF << 20;
            self.stats.faults_injected += 1;
        }
        if hit(f.zero_length_every) {
            *len = 0;
            self.stats.faults_injected += 1;
        }
    }
}
