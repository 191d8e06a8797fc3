//! Undoing a window reduction that D-SACKs prove spurious ([`Config::dsack_undo`]).
//!
//! A fast recovery reduces the window because a segment seemed lost; when every segment it
//! retransmitted comes back named in a D-SACK (RFC 2883: the peer received it twice), none was
//! lost: the originals were only late (reordered), and the reduction was spurious. Blanton and
//! Allman, "Using TCP Duplicate Selective Acknowledgement (DSACKs) and Stream Control
//! Transmission Protocol (SCTP) Duplicate Transmission Sequence Numbers (TSNs) to Detect
//! Spurious Retransmissions" (RFC 3708, 2004) detect it so; the response here restores the
//! window and the slow-start threshold from before the reduction, as Linux's
//! `tcp_undo_cwnd_reduction` does (its `TCPDSACKUndo`), the window never lowered by it.
//!
//! [`Undo`] keeps what one reduction needs for that: where it began, the window before it, and
//! the ranges retransmitted since that no D-SACK has named yet. It is a plain value, decided
//! without the connection, so its rules are tested on their own.
//!
//! [`Config::dsack_undo`]: super::Config::dsack_undo

use crate::wire::SeqNumber;

/// The most distinct retransmitted ranges one reduction tracks; past them it can no longer be
/// undone (a recovery that resent that many holes had real losses among them, most likely).
const MAX_RANGES: usize = 8;

/// One window reduction that may still prove spurious.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Undo {
    /// SND.UNA when the reduction began: D-SACKs below it are of older episodes.
    marker: SeqNumber,
    /// cwnd and ssthresh before the reduction.
    prior: (usize, usize),
    /// The ranges retransmitted since, not yet named by a D-SACK.
    ranges: [(SeqNumber, SeqNumber); MAX_RANGES],
    len: u8,
    /// Anything was retransmitted since the reduction.
    resent: bool,
}

impl Undo {
    /// A reduction beginning with SND.UNA at `marker`, from a window of `cwnd` and a slow-start
    /// threshold of `ssthresh`.
    pub(crate) fn new(marker: SeqNumber, cwnd: usize, ssthresh: usize) -> Self {
        let zero = SeqNumber::default();
        Self { marker, prior: (cwnd, ssthresh), ranges: [(zero, zero); MAX_RANGES], len: 0, resent: false }
    }

    /// cwnd and ssthresh from before the reduction.
    pub(crate) fn prior(&self) -> (usize, usize) {
        self.prior
    }

    /// `start..end` was retransmitted. Returns `false` when the reduction can no longer be
    /// undone: more distinct ranges than it tracks.
    pub(crate) fn retransmitted(&mut self, start: SeqNumber, end: SeqNumber) -> bool {
        self.resent = true;
        let len = usize::from(self.len);
        // A retransmission that continues or overlaps the last range joins it.
        if let Some(last) = self.ranges[..len].last_mut()
            && start <= last.1
            && last.0 <= end
        {
            *last = (last.0.min(start), last.1.max(end));
            return true;
        }
        if len == MAX_RANGES {
            return false;
        }
        self.ranges[len] = (start, end);
        self.len += 1;
        true
    }

    /// A D-SACK named `left..right`: the retransmitted bytes it covers are proven duplicates
    /// (a range it covers only in its middle stays whole: conservative). Returns whether every
    /// retransmission of the reduction is now proven spurious, so that it may be undone.
    pub(crate) fn dsacked(&mut self, left: SeqNumber, right: SeqNumber) -> bool {
        if right <= self.marker {
            return false;
        }
        let mut kept = 0;
        for i in 0..usize::from(self.len) {
            let (s, e) = self.ranges[i];
            let rest = if left <= s && e <= right {
                None
            } else if left <= s && s < right {
                Some((right, e))
            } else if left < e && e <= right {
                Some((s, left))
            } else {
                Some((s, e))
            };
            if let Some(r) = rest {
                self.ranges[kept] = r;
                kept += 1;
            }
        }
        #[expect(clippy::cast_possible_truncation, reason = "at most MAX_RANGES")]
        {
            self.len = kept as u8;
        }
        self.proven()
    }

    /// Whether every retransmission of the reduction was named by a D-SACK (and there was one).
    pub(crate) fn proven(&self) -> bool {
        self.resent && self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u32) -> SeqNumber {
        // Near the wrap, so that every comparison crosses 2^32.
        SeqNumber::new(u32::MAX - 5000) + n as usize
    }

    #[test]
    fn every_retransmission_dsacked_undoes() {
        let mut u = Undo::new(s(0), 20_000, 30_000);
        assert!(!u.dsacked(s(0), s(100)), "nothing retransmitted yet: nothing to undo");
        assert!(u.retransmitted(s(0), s(1000)));
        assert!(u.retransmitted(s(1000), s(2000)), "joins the range before");
        assert!(u.retransmitted(s(5000), s(6000)));
        assert!(!u.dsacked(s(0), s(1000)));
        assert!(!u.dsacked(s(1000), s(2000)));
        assert!(!u.dsacked(s(5200), s(5800)), "inside a range only: it stays whole");
        assert!(u.dsacked(s(5000), s(6000)));
        assert_eq!(u.prior(), (20_000, 30_000));
    }

    #[test]
    fn dsacks_of_older_data_or_other_ranges_do_not_undo() {
        let mut u = Undo::new(s(10_000), 20_000, 30_000);
        assert!(u.retransmitted(s(10_000), s(11_000)));
        assert!(!u.dsacked(s(9000), s(10_000)), "before the reduction began");
        assert!(!u.dsacked(s(12_000), s(13_000)), "data never retransmitted (a network duplicate)");
        assert!(!u.dsacked(s(10_000), s(10_500)));
        assert!(u.dsacked(s(10_500), s(11_000)), "the two halves");
    }

    #[test]
    fn too_many_ranges_cannot_be_undone() {
        let mut u = Undo::new(s(0), 1, 1);
        for i in (0..).step_by(2000).take(MAX_RANGES) {
            assert!(u.retransmitted(s(i), s(i + 1000)));
        }
        assert!(!u.retransmitted(s(50_000), s(51_000)));
    }
}
