//! Selective acknowledgment: the sender's scoreboard of SACKed ranges and the RFC 6675
//! conservative loss recovery queries over it (IsLost, pipe, NextSeg), and the receiver's
//! SACK blocks for the out-of-order data it received most recently (RFC 2018 §4).
//!
//! Both are bounded: the scoreboard holds at most [`MAX_SACK_RANGES`] coalesced ranges (when full,
//! the highest range is forgotten, which only makes the sender retransmit more than needed), the
//! receiver remembers [`SackBlocks::MAX`] blocks.

use crate::wire::SeqNumber;
use crate::wire::tcp::{SackBlock, SackBlocks};

/// The most SACKed ranges the sender remembers.
pub(crate) const MAX_SACK_RANGES: usize = 32;

/// RFC 6675 §2 DupThresh: the number of duplicate ACKs (or SACKed segments above a hole) that
/// declares it lost.
pub(crate) const DUP_THRESH: usize = 3;

/// The data sender's scoreboard (RFC 6675 §3): the ranges the receiver SACKed, sorted, disjoint
/// and non-adjacent, all inside `SND.UNA..SND.MAX` (ranges are pruned as the cumulative ACK
/// moves, so comparisons between them never wrap ambiguously).
#[derive(Debug, Clone, Default)]
pub(crate) struct Scoreboard {
    ranges: Vec<(SeqNumber, SeqNumber)>,
    /// Every unSACKed byte below this was deemed lost by RACK (RFC 8985, `rack.rs`), whatever
    /// IsLost says.
    lost_below: Option<SeqNumber>,
}

/// A hole of the scoreboard: unSACKed bytes `start..end` and what lies above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hole {
    pub(crate) start: SeqNumber,
    pub(crate) end: SeqNumber,
    /// RFC 6675 IsLost for every byte of the hole: the SACKed data above it is at least
    /// DupThresh discontiguous ranges or more than (DupThresh - 1) · SMSS bytes. (Every byte of a
    /// hole has the same SACKed data above it, so the answer is the same for all of them.)
    pub(crate) lost: bool,
    /// Whether SACKed data lies above the hole (it is below HighSACK).
    pub(crate) below_high_sack: bool,
}

impl Scoreboard {
    pub(crate) fn new() -> Self {
        // Nothing allocated until a SACK arrives (most connections see none).
        Self { ranges: Vec::new(), lost_below: None }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The number of ranges held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    pub(crate) fn clear(&mut self) {
        self.ranges.clear();
        self.lost_below = None;
    }

    /// RACK deemed every unSACKed byte below `seq` lost.
    pub(crate) fn mark_lost_below(&mut self, seq: SeqNumber) {
        if self.lost_below.is_none_or(|l| seq > l) {
            self.lost_below = Some(seq);
        }
    }

    /// Where RACK's lost prefix ends, if it marked one.
    pub(crate) fn lost_below(&self) -> Option<SeqNumber> {
        self.lost_below
    }

    /// Total SACKed bytes.
    pub(crate) fn sacked_bytes(&self) -> usize {
        self.ranges.iter().map(|&(l, r)| len(l, r)).sum()
    }

    /// The highest SACKed sequence number plus one (RFC 6675 HighSACK + 1), if any.
    pub(crate) fn high_sack(&self) -> Option<SeqNumber> {
        self.ranges.last().map(|&(_, r)| r)
    }

    /// Records the SACK blocks of an ACK. Blocks not strictly inside `una..max` (D-SACKs, blocks
    /// below the cumulative ACK, blocks of data never sent, empty or inverted blocks) are
    /// ignored. Returns whether any byte was newly SACKed.
    ///
    /// The test measures each edge as an offset from `una` modulo 2^32 instead of chaining
    /// serial-number comparisons: those are not transitive, so a block whose edges lie more than
    /// 2^31 apart could pass `una < left < right <= max` with `right` nowhere near `una..max`
    /// (a fuzzed peer SACKed `una + 2^31 - 1 .. una + 2^31 + 65535` with nothing in flight, and
    /// the phantom range stalled the sender for good).
    pub(crate) fn update(&mut self, blocks: &SackBlocks, una: SeqNumber, max: SeqNumber) -> bool {
        let before = self.sacked_bytes();
        let offset = |s: SeqNumber| s.get().wrapping_sub(una.get());
        let span = offset(max);
        for b in blocks.as_slice() {
            let (left, right) = (offset(b.left), offset(b.right));
            if !(0 < left && left < right && right <= span) {
                continue;
            }
            self.insert(b.left, b.right);
        }
        self.sacked_bytes() != before
    }

    fn insert(&mut self, left: SeqNumber, right: SeqNumber) {
        // The ranges that touch or overlap left..right merge with it.
        let first = self.ranges.partition_point(|&(_, r)| r < left);
        let last = self.ranges.partition_point(|&(l, _)| l <= right);
        if first == last {
            self.ranges.insert(first, (left, right));
            // Bounded: forget the highest range (its data may be retransmitted needlessly, never
            // lost).
            self.ranges.truncate(MAX_SACK_RANGES);
            return;
        }
        let merged = (left.min(self.ranges[first].0), right.max(self.ranges[last - 1].1));
        self.ranges[first] = merged;
        self.ranges.drain(first + 1..last);
    }

    /// Forgets everything the cumulative ACK `una` covers; returns how many SACKed bytes that
    /// was (delivered before the cumulative ACK reached them).
    pub(crate) fn prune(&mut self, una: SeqNumber) -> usize {
        if self.lost_below.is_some_and(|l| l <= una) {
            self.lost_below = None;
        }
        let gone = self.ranges.iter().take_while(|&&(_, r)| r <= una).count();
        let mut forgotten: usize = self.ranges.drain(..gone).map(|(l, r)| len(l, r)).sum();
        if let Some(first) = self.ranges.first_mut()
            && first.0 < una
        {
            forgotten += len(first.0, una);
            first.0 = una;
        }
        forgotten
    }

    /// The SACKed ranges and bytes at or above `seq`.
    pub(crate) fn sacked_above(&self, seq: SeqNumber) -> (usize, usize) {
        self.ranges
            .iter()
            .filter(|&&(_, r)| r > seq)
            .fold((0, 0), |(n, b), &(l, r)| (n + 1, b + len(l.max(seq), r)))
    }

    /// Whether `mss`-sized segments SACKed at or above `seq` are enough to declare data
    /// sent before `seq` lost (the IsLost threshold of RFC 6675).
    pub(crate) fn enough_above(&self, seq: SeqNumber, mss: usize) -> bool {
        let (ranges, bytes) = self.sacked_above(seq);
        ranges >= DUP_THRESH || bytes > (DUP_THRESH - 1) * mss
    }

    /// The end of the SACKed range containing `seq`, if any.
    pub(crate) fn sacked_end(&self, seq: SeqNumber) -> Option<SeqNumber> {
        self.ranges.iter().find(|&&(l, r)| l <= seq && seq < r).map(|&(_, r)| r)
    }

    /// The start of the first SACKed range after `seq`, if any.
    pub(crate) fn next_sacked(&self, seq: SeqNumber) -> Option<SeqNumber> {
        self.ranges.iter().map(|&(l, _)| l).find(|&l| l > seq)
    }

    /// The holes of `una..max`, lowest first, with RFC 6675 IsLost for each (`mss` is SMSS),
    /// or RACK's mark: a hole that straddles the end of RACK's lost prefix comes as two, the part
    /// below it lost.
    pub(crate) fn holes(
        &self,
        una: SeqNumber,
        max: SeqNumber,
        mss: usize,
    ) -> impl Iterator<Item = Hole> + '_ {
        let mut cursor = una;
        let mut above_bytes = self.sacked_bytes();
        let n = self.ranges.len();
        (0..=n).flat_map(move |i| {
            let end = self.ranges.get(i).map_or(max, |&(l, _)| l);
            let above_ranges = n - i;
            let hole = Hole {
                start: cursor,
                end,
                lost: above_ranges >= DUP_THRESH || above_bytes > (DUP_THRESH - 1) * mss,
                below_high_sack: above_ranges > 0,
            };
            if let Some(&(l, r)) = self.ranges.get(i) {
                above_bytes -= len(l, r);
                cursor = r;
            }
            let (first, second) = match self.lost_below {
                Some(mark) if !hole.lost && hole.start < mark && hole.start < hole.end => {
                    let mid = if mark < hole.end { mark } else { hole.end };
                    (Hole { end: mid, lost: true, ..hole }, Hole { start: mid, ..hole })
                }
                _ => (hole, Hole { start: hole.end, ..hole }),
            };
            [first, second].into_iter().filter(|h| h.start < h.end)
        })
    }

    /// The end of the highest hole of `una..max` that RFC 6675 IsLost deems lost (every hole
    /// below it is lost too: it has more SACKed data above it), if any.
    pub(crate) fn lost_end(&self, una: SeqNumber, max: SeqNumber, mss: usize) -> Option<SeqNumber> {
        self.holes(una, max, mss).filter(|h| h.lost).last().map(|h| h.end)
    }

    /// Bytes of `una..max` that RFC 6675's IsLost() deems lost (the unSACKed holes with enough
    /// SACKed above them).
    pub(crate) fn lost_bytes(&self, una: SeqNumber, max: SeqNumber, mss: usize) -> usize {
        self.holes(una, max, mss).filter(|h| h.lost).map(|h| len(h.start, h.end)).sum()
    }

    /// RFC 6675 IsLost(`seq`).
    #[cfg(test)]
    pub(crate) fn is_lost(&self, seq: SeqNumber, una: SeqNumber, max: SeqNumber, mss: usize) -> bool {
        self.holes(una, max, mss).any(|h| h.start <= seq && seq < h.end && h.lost)
    }

    /// RFC 6675 SetPipe(): the bytes presumed in the network. Every unSACKed byte of
    /// `una..max` counts once if it is not lost, and once more if it was retransmitted (it lies
    /// below `high_rxt`, the end of the highest retransmission of this recovery).
    pub(crate) fn pipe(&self, una: SeqNumber, max: SeqNumber, high_rxt: SeqNumber, mss: usize) -> usize {
        self.holes(una, max, mss)
            .map(|h| {
                let original = if h.lost { 0 } else { len(h.start, h.end) };
                let rxt_end = if high_rxt < h.end { high_rxt } else { h.end };
                original + len(h.start, rxt_end)
            })
            .sum()
    }

    /// RFC 6675 NextSeg() rules 1 and 3 (rule 2, new data, is the caller's): the first lost
    /// unSACKed byte at or above `high_rxt`, else the first unSACKed byte at or above `high_rxt`
    /// below HighSACK. Returns the segment's start and length (at most `mss`).
    pub(crate) fn next_seg(
        &self,
        una: SeqNumber,
        max: SeqNumber,
        high_rxt: SeqNumber,
        mss: usize,
    ) -> Option<(SeqNumber, usize, bool)> {
        let pick = |h: Hole| {
            let start = if high_rxt > h.start { high_rxt } else { h.start };
            (start < h.end).then(|| (start, len(start, h.end).min(mss)))
        };
        if let Some((s, l)) = self.holes(una, max, mss).filter(|h| h.lost).find_map(pick) {
            return Some((s, l, true));
        }
        self.holes(una, max, mss).filter(|h| h.below_high_sack).find_map(pick).map(|(s, l)| (s, l, false))
    }
}

/// Bytes from `from` to `to`, 0 when `to` is not after `from`.
fn len(from: SeqNumber, to: SeqNumber) -> usize {
    usize::try_from(to - from).unwrap_or(0)
}

/// The data receiver's SACK blocks (RFC 2018 §4), kept as Linux keeps them: at most
/// [`SackBlocks::MAX`], the one holding the newest out-of-order segment first, then the others by
/// how recently a segment joined them. A block holds only segments it recorded: out-of-order
/// data whose block dropped off the end (a fifth hole) is not reported again, however long it
/// stays held, until the cumulative ACK covers it.
///
/// Reporting it later, as RFC 2018 permits (blocks from the whole out-of-order queue), misleads
/// a sender that times SACKs: Linux takes the RTT sample of an ACK that SACKs data for the first
/// time from when that data was sent, so a block first reported seconds after its data arrived
/// reads as a round trip of seconds, and the sender's RTO grows to its 120 s maximum (a stall
/// seen against the kernel through 10% loss, where 8 holes were held and 3 blocks fit).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RecentBlocks {
    blocks: [SackBlock; SackBlocks::MAX],
    len: usize,
}

impl RecentBlocks {
    /// The out-of-order segment `left..right` is held (`rcv_nxt` is RCV.NXT): its block, with
    /// every block it overlaps or touches, goes first; blocks the cumulative ACK reached go, and
    /// the oldest block is forgotten when the list is full.
    pub(crate) fn record(&mut self, rcv_nxt: SeqNumber, left: SeqNumber, right: SeqNumber) {
        let mut merged = SackBlock { left, right };
        let mut kept = 0;
        for i in 0..self.len {
            let b = self.blocks[i];
            if b.left <= rcv_nxt {
                continue;
            }
            if b.left <= merged.right && merged.left <= b.right {
                merged = SackBlock { left: b.left.min(merged.left), right: b.right.max(merged.right) };
            } else {
                self.blocks[kept] = b;
                kept += 1;
            }
        }
        let kept = kept.min(SackBlocks::MAX - 1);
        self.blocks.copy_within(..kept, 1);
        self.blocks[0] = merged;
        self.len = kept + 1;
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    /// Up to `max` SACK blocks: `dsack` first (a D-SACK block, RFC 2883 §4), then the blocks
    /// newest first, above `rcv_nxt` (a block the cumulative ACK reached is in order now).
    pub(crate) fn blocks(&self, dsack: Option<SackBlock>, rcv_nxt: SeqNumber, max: usize) -> SackBlocks {
        let mut out = SackBlocks::new();
        if let Some(d) = dsack {
            out.push(d);
        }
        let rest = max - out.len();
        for &b in self.blocks[..self.len].iter().filter(|b| b.left > rcv_nxt).take(rest) {
            out.push(b);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u32) -> SeqNumber {
        // Near the wrap, so that every comparison crosses 2^32.
        SeqNumber::new(u32::MAX - 5000) + n as usize
    }

    fn blocks(b: &[(u32, u32)]) -> SackBlocks {
        let v: Vec<_> = b.iter().map(|&(l, r)| SackBlock { left: s(l), right: s(r) }).collect();
        SackBlocks::from_slice(&v).unwrap()
    }

    /// Blocks whose edges lie 2^31 or more apart pass a chain of serial-number comparisons
    /// (`una < left < right <= max` holds for `left = una + 2^31 - 1`, `right = una + 2^31 + k`,
    /// whatever `max` is) but lie outside `una..max`: they are ignored (the tcp_segments fuzz
    /// target's timer-every-64-ms finding).
    #[test]
    fn blocks_across_half_the_space_are_ignored() {
        let mut sb = Scoreboard::new();
        let half = 1u32 << 31;
        for (una, max) in [(s(0), s(0)), (s(0), s(1000)), (s(700), s(1000))] {
            let far = [(half - 1, half + 65_535), (half - 1, half), (half + 1, 100), (1, half + 10)];
            for (l, r) in far {
                let b =
                    SackBlocks::from_slice(&[SackBlock { left: una + l as usize, right: una + r as usize }]);
                assert!(!sb.update(&b.unwrap(), una, max), "block {l}..{r} above {una:?}..{max:?}");
            }
        }
        assert!(sb.is_empty());
    }

    #[test]
    fn scoreboard_merges_validates_and_prunes() {
        let mut sb = Scoreboard::new();
        let (una, max) = (s(0), s(1000));
        assert!(sb.update(&blocks(&[(100, 200), (300, 400)]), una, max));
        assert!(!sb.update(&blocks(&[(100, 200)]), una, max), "nothing new");
        assert!(!sb.update(&blocks(&[(0, 50), (900, 1100), (50, 40)]), una, max), "invalid blocks ignored");
        assert!(sb.update(&blocks(&[(200, 300)]), una, max));
        assert_eq!(sb.len(), 1);
        assert_eq!(sb.sacked_bytes(), 300);
        assert_eq!(sb.high_sack(), Some(s(400)));
        assert_eq!(sb.prune(s(150)), 50, "the part of the range the ACK covers");
        assert_eq!(sb.sacked_bytes(), 250);
        assert_eq!(sb.prune(s(400)), 250);
        assert!(sb.is_empty());
        assert_eq!(sb.prune(s(500)), 0);
    }

    #[test]
    fn scoreboard_is_bounded() {
        let mut sb = Scoreboard::new();
        for i in 0..100u32 {
            sb.update(&blocks(&[(10 * i + 1, 10 * i + 5)]), s(0), s(10_000));
        }
        assert_eq!(sb.len(), MAX_SACK_RANGES);
        assert_eq!(
            sb.high_sack(),
            Some(s(10 * (u32::try_from(MAX_SACK_RANGES).unwrap() - 1) + 5)),
            "the lowest are kept"
        );
    }

    #[test]
    fn is_lost_pipe_and_next_seg_follow_rfc_6675() {
        let mss = 100;
        let (una, max) = (s(0), s(1000));
        let mut sb = Scoreboard::new();
        // Segments of 100: 0 lost, 1 and 2 SACKed.
        sb.update(&blocks(&[(100, 300)]), una, max);
        assert_eq!(sb.lost_bytes(una, max, mss), 0);
        assert!(!sb.is_lost(s(0), una, max, mss), "200 bytes above: not more than 2 SMSS");
        assert_eq!(sb.pipe(una, max, una, mss), 100 + 700, "everything unSACKed, nothing lost");
        assert_eq!(sb.next_seg(una, max, una, mss), Some((s(0), 100, false)), "rule 3: below HighSACK");
        // Segment 4 SACKed too: three segments above segment 0 -> lost.
        sb.update(&blocks(&[(400, 500)]), una, max);
        assert!(sb.is_lost(s(0), una, max, mss));
        assert!(!sb.is_lost(s(300), una, max, mss), "one SACKed segment above");
        assert_eq!(sb.lost_bytes(una, max, mss), 100, "only segment 0");
        assert_eq!(sb.pipe(una, max, una, mss), 100 + 500, "the lost segment leaves the pipe");
        assert_eq!(sb.next_seg(una, max, una, mss), Some((s(0), 100, true)), "rule 1");
        // Retransmitted: it counts again, and the next lost byte is searched above HighRxt.
        assert_eq!(sb.pipe(una, max, s(100), mss), 100 + 500 + 100);
        assert_eq!(sb.next_seg(una, max, s(100), mss), Some((s(300), 100, false)));
        assert_eq!(sb.next_seg(una, max, s(400), mss), None, "nothing below HighSACK left");
        // Three discontiguous SACKed ranges above a hole make it lost whatever their size.
        let mut sb = Scoreboard::new();
        sb.update(&blocks(&[(10, 11), (20, 21), (30, 31)]), una, max);
        assert!(sb.is_lost(s(5), una, max, mss));
        assert!(!sb.is_lost(s(15), una, max, mss));
    }

    #[test]
    fn recent_blocks_order_merge_and_limit() {
        let listed = |r: &RecentBlocks, nxt: u32, max: usize| -> Vec<_> {
            r.blocks(None, s(nxt), max).as_slice().iter().map(|b| (b.left, b.right)).collect()
        };
        let mut r = RecentBlocks::default();
        r.record(s(0), s(300), s(400));
        r.record(s(0), s(700), s(800));
        r.record(s(0), s(100), s(200));
        assert_eq!(listed(&r, 0, 4), [(s(100), s(200)), (s(700), s(800)), (s(300), s(400))], "newest first");
        assert_eq!(listed(&r, 0, 2).len(), 2);
        // A segment touching one block and overlapping another joins them, first.
        r.record(s(0), s(200), s(310));
        assert_eq!(listed(&r, 0, 4), [(s(100), s(400)), (s(700), s(800))]);
        // Four more holes: the oldest block is forgotten, and not reported again.
        for i in 0..3 {
            r.record(s(0), s(900 + 100 * i), s(950 + 100 * i));
        }
        assert_eq!(r.len, SackBlocks::MAX);
        r.record(s(0), s(1500), s(1550));
        assert!(!listed(&r, 0, 4).contains(&(s(100), s(400))), "forgotten");
        assert_eq!(listed(&r, 0, 4)[0], (s(1500), s(1550)));
        // The cumulative ACK passes two blocks: they are no longer reported, and go at the next record.
        assert_eq!(listed(&r, 1050, 4), [(s(1500), s(1550)), (s(1100), s(1150))]);
        r.record(s(1050), s(1300), s(1400));
        assert_eq!(r.len, 3);
        assert_eq!(listed(&r, 1050, 4), [(s(1300), s(1400)), (s(1500), s(1550)), (s(1100), s(1150))]);
    }
}
