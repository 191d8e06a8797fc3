//! Where a sender sets PSH ([`Config::push`](super::Config::push)).
//!
//! RFC 9293 §3.9.1 and RFC 1122 §4.2.2.2 leave the PSH bit to the sender: it must be set where
//! the data the application handed over so far ends, and may be set elsewhere. tcp-lib's default,
//! [`Push::Burst`], sets it on the segment that empties the send buffer and, outside loss
//! recovery, on the last segment of a burst.
//!
//! [`Push::Linux`] marks what Linux's output marks on the wire. Linux sends new data in "TSO
//! packets" (one `sk_buff` handed to the device, cut into MSS-sized segments by TSO or GSO,
//! `tcp_gso_segment`, which keeps PSH on the last cut segment only). `__tcp_transmit_skb` sets
//! PSH on every packet of more than one segment ("Force a PSH flag on all (GSO) packets to
//! expedite GRO flush at receiver"; not on single segments, "sent under high congestion
//! events"), on the copy it transmits: a resent segment does not inherit it. Besides, `tcp_push`
//! marks the queued `sk_buff` that ends each write, so the segment that ends the written data
//! carries PSH. How many segments a TSO packet holds is `tcp_write_xmit`'s choice:
//!
//! * at most `tcp_tso_autosize`'s count: about a millisecond of the pacing rate (Linux's
//!   `sk_pacing_rate >> sk_pacing_shift`, the rate being 200 % of cwnd per smoothed RTT in slow
//!   start and 120 % after it), plus `gso_max_size >> (min RTT in µs >> 9)`, at least
//!   `tcp_min_tso_segs`, at most 64 KiB;
//! * at most half the congestion window (`tcp_cwnd_test`: "ensure we have at least 2 GSO packets
//!   in flight"), and what the congestion and receive windows leave;
//! * cut at the last whole segment when Nagle holds back a short rest (`tcp_mss_split_point`).
//!
//! Seen on Linux 6.18 with packetdrill and tcpdump: a write of 8000 bytes with an MSS of 974
//! leaves as segments with PSH on every second one (TSO packets of two, the `tcp_min_tso_segs`
//! default), the 208-byte rest with PSH; in fast recovery, new data sent one segment at a time
//! carries no PSH, two at a time it does.

use std::time::{Duration, Instant};

use super::pacing::{self, Pacing};
use crate::wire::SeqNumber;

/// Where PSH goes on the data segments a connection sends ([`Config::push`](super::Config::push)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Push {
    /// On the segment that empties the send buffer and, outside loss recovery, on the last one of
    /// a burst: the windows leave less than a segment after it, or Nagle holds back the short
    /// rest. Resent segments carry it where they end the data written so far.
    #[default]
    Burst,
    /// As Linux (module docs): on the last segment of each multi-segment TSO packet, and on the
    /// segment that ends the written data.
    Linux {
        /// Linux's `tcp_min_tso_segs` sysctl (2 by default): the fewest segments a TSO packet
        /// may be sized to before the windows cut it.
        min_tso_segs: u16,
    },
}

/// The largest TSO packet Linux builds (`GSO_LEGACY_MAX_SIZE`), in payload bytes.
const GSO_MAX: usize = 65_536;

/// What [`Packet::plan`] needs to size the next TSO packet, in bytes where not said otherwise.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizing {
    /// The payload of one segment.
    pub mss: usize,
    /// The congestion window.
    pub cwnd: usize,
    /// The slow-start threshold.
    pub ssthresh: usize,
    /// The smoothed RTT, when one was measured.
    pub srtt: Option<Duration>,
    /// The pacing rate's ratios (Linux's `tcp_pacing_ss_ratio` and `_ca_ratio`, which size TSO
    /// packets whether or not the connection paces).
    pub pacing: Pacing,
    /// What the congestion and receive windows let go now.
    pub room: usize,
    /// Queued data not yet sent (from the packet's first byte on).
    pub unsent: usize,
    /// Nagle lets a short last segment go now (it ends the data, and Nagle is off or nothing is
    /// in flight).
    pub tail_ok: bool,
}

/// Linux's `tcp_tso_autosize` (the segments of a TSO packet before the windows cut it):
/// `min_tso_segs` at least, else what the pacing rate sends in about a millisecond.
pub(crate) fn tso_segs(min_tso_segs: u16, s: &Sizing) -> usize {
    let mss = s.mss.max(1);
    let bytes = match s.srtt.filter(|r| !r.is_zero()) {
        // Linux's `tcp_update_pacing_rate` (`pacing::rate`): cwnd per srtt, at 200 % in slow start
        // (cwnd below half ssthresh), 120 % after; `>> 10` bytes per "millisecond".
        Some(srtt) => {
            let rate = pacing::rate(&s.pacing, s.cwnd, s.cwnd, s.ssthresh, Some(srtt)).unwrap_or(u64::MAX);
            let per_ms = usize::try_from(rate >> 10).unwrap_or(usize::MAX);
            // Linux 5.19's `tcp_tso_rtt_log` (9): bigger packets on short paths.
            let shift = srtt.as_micros() >> 9;
            let short = if shift < 64 { GSO_MAX >> shift.min(63) } else { 0 };
            per_ms.saturating_add(short)
        }
        // No RTT yet: Linux divides by nothing and the rate is its largest.
        None => GSO_MAX,
    };
    (bytes.min(GSO_MAX) / mss).max(usize::from(min_tso_segs)).clamp(1, GSO_MAX / mss)
}

/// The TSO packet being sent under [`Push::Linux`]: where its next segment starts and where it
/// ends, whether it has more than one segment, and the instant it was planned (Linux builds one
/// in one pass of `tcp_write_xmit`: a segment sent at another instant starts a new one).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packet {
    at: Instant,
    start: SeqNumber,
    next: SeqNumber,
    end: SeqNumber,
    multi: bool,
}

impl Packet {
    /// The bytes of a TSO packet that starts now (at least one).
    pub(crate) fn plan(min_tso_segs: u16, s: &Sizing) -> usize {
        let mss = s.mss.max(1);
        let half = (s.cwnd / mss / 2).max(1) * mss;
        let mut len = (tso_segs(min_tso_segs, s) * mss).min(half).min(s.room).min(s.unsent);
        let partial = len % mss;
        if len > mss && partial != 0 && (len < s.unsent || !s.tail_ok) {
            // `tcp_mss_split_point`: whole segments, the short rest only where the data ends and
            // Nagle lets it go.
            len -= partial;
        }
        len.max(1)
    }

    /// Where the TSO packet of a segment starting at `seq`, sent at `now`, ends: the packet in
    /// `slot` when the segment follows its last one at the same instant, else a new one of
    /// `plan(mss)` bytes.
    pub(crate) fn end(
        slot: &mut Option<Packet>,
        now: Instant,
        seq: SeqNumber,
        mss: usize,
        plan: impl FnOnce() -> usize,
    ) -> SeqNumber {
        match slot {
            Some(p) if p.at == now && p.next == seq && seq < p.end => p.end,
            _ => {
                let len = plan();
                let p = Packet { at: now, start: seq, next: seq, end: seq + len, multi: len > mss };
                *slot = Some(p);
                p.end
            }
        }
    }

    /// Whether the segment at `seq`, sent at `now`, continues the packet in `slot`: it leaves
    /// with the packet's first segment, whatever the pacing says (Linux paces whole packets).
    pub(crate) fn continues(slot: &Option<Packet>, now: Instant, seq: SeqNumber) -> bool {
        slot.is_some_and(|p| p.at == now && p.next == seq && p.start < seq && seq < p.end)
    }

    /// What the pacing charges for `len` bytes sent at `seq` at `now`: the whole packet on its
    /// first segment, nothing on the others of the packet in `slot`, `len` outside it.
    pub(crate) fn paced_len(slot: &Option<Packet>, now: Instant, seq: SeqNumber, len: usize) -> usize {
        match slot {
            Some(p) if p.at == now && p.start <= seq && seq < p.end => {
                if seq == p.start {
                    usize::try_from(p.end - p.start).unwrap_or(len)
                } else {
                    0
                }
            }
            _ => len,
        }
    }

    /// Records that `seq .. seq + len` went as part of the packet in `slot`; whether it carries
    /// the packet's PSH (it ends a packet of more than one segment).
    pub(crate) fn sent(slot: &mut Option<Packet>, seq: SeqNumber, len: usize) -> bool {
        match slot {
            Some(p) if p.next == seq && seq + len <= p.end => {
                p.next = seq + len;
                p.multi && p.next == p.end
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizing(srtt: Option<Duration>) -> Sizing {
        Sizing {
            mss: 1460,
            cwnd: 10 * 1460,
            ssthresh: usize::MAX,
            srtt,
            pacing: Pacing::LINUX,
            room: usize::MAX,
            unsent: usize::MAX,
            tail_ok: true,
        }
    }

    #[test]
    fn tso_packets_grow_with_the_pacing_rate() {
        // 100 ms: 292 kB/s in slow start, 285 bytes a "millisecond": the floor.
        assert_eq!(tso_segs(2, &sizing(Some(Duration::from_millis(100)))), 2);
        assert_eq!(tso_segs(10, &sizing(Some(Duration::from_millis(100)))), 10);
        // 5 ms: 5.84 MB/s, 5703 bytes a "millisecond", and 64 KiB >> (5000 >> 9): 3 segments.
        assert_eq!(tso_segs(2, &sizing(Some(Duration::from_millis(5)))), 3);
        // 1 ms: 28 515 bytes and 32 KiB: 41 segments.
        assert_eq!(tso_segs(2, &sizing(Some(Duration::from_millis(1)))), 41);
        // 100 µs, or no RTT yet: 64 KiB.
        assert_eq!(tso_segs(2, &sizing(Some(Duration::from_micros(100)))), 44);
        assert_eq!(tso_segs(2, &sizing(None)), 44);
    }

    #[test]
    fn a_packet_is_cut_to_half_the_window_and_whole_segments() {
        let s = sizing(Some(Duration::from_micros(100)));
        assert_eq!(Packet::plan(2, &s), 5 * 1460, "half of ten segments");
        assert_eq!(Packet::plan(2, &Sizing { room: 3 * 1460 + 10, ..s }), 3 * 1460, "the window");
        assert_eq!(Packet::plan(2, &Sizing { unsent: 2 * 1460 + 10, ..s }), 2 * 1460 + 10, "the data's end");
        let held = Sizing { unsent: 2 * 1460 + 10, tail_ok: false, ..s };
        assert_eq!(Packet::plan(2, &held), 2 * 1460, "Nagle holds the short rest");
        assert_eq!(Packet::plan(2, &Sizing { cwnd: 1460, ..s }), 1460, "one segment at least");
    }
}
