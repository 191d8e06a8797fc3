//! RACK time-based loss detection ([`Config::rack`], RFC 8985 §6) on one connection: a segment
//! sent before one the peer SACKed is lost an RTT plus the reordering window after it left, by
//! the reordering timer when no ACK comes; the same loss waits for the RTO without RACK.

use std::time::Duration;

use super::{LOCAL_SEQ, REMOTE_SEQ, SEND_TEMPL, Script, script_config};
use crate::tcp::{Config, State, TcpControl};
use crate::wire::tcp::{SackBlock, SackBlocks};
use crate::wire::{SeqNumber, TcpRepr};

const MS: Duration = Duration::from_millis(1);
const MSS: usize = 1000;

/// Established with SACK, an MSS of 1000 and a 100 ms RTT measured in the handshake, ten
/// segments sent at once; returns the script and whether RACK is on.
fn ten_in_flight(rack: bool) -> Script {
    ten_in_flight_with(Config { rack, ..script_config() })
}

/// [`ten_in_flight`] with the rest of `config` as given.
pub(super) fn ten_in_flight_with(config: Config) -> Script {
    in_flight(config, 10)
}

/// Established as [`ten_in_flight`] says, with `segments` sent at once.
fn in_flight(config: Config, segments: usize) -> Script {
    let config = Config {
        sack: true,
        mss: 1000,
        send_buffer: 100_000,
        initial_window: Some(10),
        min_rto: Duration::from_millis(200),
        ..config
    };
    let syn = TcpRepr {
        control: TcpControl::Syn,
        seq_number: REMOTE_SEQ,
        ack_number: None,
        max_seg_size: Some(1000),
        sack_permitted: true,
        window_len: 60_000,
        ..SEND_TEMPL
    };
    let mut s = Script::accept_with(config, syn);
    assert_eq!(s.drain().len(), 1, "the SYN-ACK");
    s.advance(100 * MS);
    s.send(&TcpRepr { ack_number: Some(LOCAL_SEQ + 1), window_len: 60_000, ..SEND_TEMPL });
    assert_eq!(s.conn.state(), State::Established);
    assert_eq!(s.conn.stats().srtt, Some(100 * MS));
    assert_eq!(s.conn.send(&vec![3; segments * MSS]), segments * MSS);
    let flight = s.drain();
    assert_eq!(flight.iter().filter(|o| !o.payload.is_empty()).count(), segments);
    s
}

fn ours(n: usize) -> SeqNumber {
    LOCAL_SEQ + 1 + n
}

/// An ACK of nothing new SACKing `blocks` (offsets from our first data byte).
fn sack(blocks: &[(usize, usize)]) -> TcpRepr<'static> {
    let v: Vec<_> = blocks.iter().map(|&(l, r)| SackBlock { left: ours(l), right: ours(r) }).collect();
    TcpRepr {
        ack_number: Some(ours(0)),
        window_len: 60_000,
        sack_blocks: SackBlocks::from_slice(&v).expect("at most four"),
        ..SEND_TEMPL
    }
}

/// The eighth segment SACKed an RTT after the flight left: the seven before it are lost a quarter
/// of the minimum RTT later (the reordering window, RFC 8985 §6.2), by the reordering timer, and
/// the first of them goes again in fast recovery.
#[test]
fn the_reordering_timer_marks_what_was_sent_before_a_sacked_segment() {
    let mut s = ten_in_flight(true);
    s.advance(100 * MS);
    s.send(&sack(&[(7 * MSS, 8 * MSS)]));
    assert!(s.drain().iter().all(|o| o.payload.is_empty()), "one SACK is not enough yet");
    assert_eq!(s.conn.stats().lost_bytes, 0);
    s.advance(24 * MS);
    assert!(s.drain().iter().all(|o| o.payload.is_empty()), "still inside the reordering window");
    s.advance(2 * MS);
    let out = s.drain();
    let rexmit: Vec<_> = out.iter().filter(|o| !o.payload.is_empty()).collect();
    assert_eq!(rexmit.len(), 1, "{out:?}");
    assert_eq!(rexmit[0].repr.seq_number, ours(0), "the first lost segment again");
    let st = s.conn.stats();
    assert!(st.in_recovery && st.timeouts == 0, "{st:?}");
    assert_eq!(st.lost_bytes, 7 * MSS, "1..7 lost; 9 and 10 left after 8");
    // A later SACK below the eighth is reordering: that segment is no longer lost, and the
    // degree is how far below the highest SACKed byte it began.
    s.send(&sack(&[(4 * MSS, 5 * MSS), (7 * MSS, 8 * MSS)]));
    let st = s.conn.stats();
    assert_eq!(st.lost_bytes, 6 * MSS);
    assert_eq!(st.reordering, 4);
}

/// Without RACK the same single SACK leaves RFC 6675's IsLost unmet: nothing is resent before
/// the RTO.
#[test]
fn without_rack_one_sack_waits_for_the_rto() {
    let mut s = ten_in_flight(false);
    s.advance(100 * MS);
    s.send(&sack(&[(7 * MSS, 8 * MSS)]));
    s.advance(150 * MS);
    assert!(s.drain().iter().all(|o| o.payload.is_empty()), "no retransmission before the RTO");
    assert_eq!(s.conn.stats().lost_bytes, 0);
    assert_eq!(s.conn.stats().reordering, 3);
}

/// The retransmission of the segment at SND.UNA is lost too: once a retransmission sent after it
/// is SACKed and RACK.rtt has passed since it left, it goes again (RFC 8985 §6.2 checks
/// retransmissions like originals), where before it waited for the RTO (no new data was sent
/// after it, so no SACK of later data could show the loss).
#[test]
fn a_lost_retransmission_at_snd_una_goes_again_before_the_rto() {
    let mut s = ten_in_flight(true);
    s.advance(100 * MS);
    s.send(&sack(&[(7 * MSS, 8 * MSS)]));
    s.advance(26 * MS);
    let first: Vec<_> = s.drain().into_iter().filter(|o| !o.payload.is_empty()).collect();
    assert_eq!(first.iter().map(|o| o.repr.seq_number).collect::<Vec<_>>(), [ours(0)], "S0 resent");
    // The rest of the flight's tail arrives; PRR lets the next lost segment go.
    s.advance(10 * MS);
    s.send(&sack(&[(7 * MSS, 10 * MSS)]));
    let next: Vec<_> =
        s.drain().into_iter().filter(|o| !o.payload.is_empty()).map(|o| o.repr.seq_number).collect();
    assert_eq!(next.first(), Some(&ours(MSS)), "S1 resent: {next:?}");
    // S1's retransmission arrives an RTT later; S0's (sent before it) does not.
    s.advance(100 * MS);
    s.send(&sack(&[(MSS, 2 * MSS), (7 * MSS, 10 * MSS)]));
    let again: Vec<_> =
        s.drain().into_iter().filter(|o| !o.payload.is_empty()).map(|o| o.repr.seq_number).collect();
    assert_eq!(again.first(), Some(&ours(0)), "S0 again, its retransmission lost: {again:?}");
    let st = s.conn.stats();
    assert_eq!(st.timeouts, 0, "{st:?}");
}

/// One ACK delivers the retransmission of S0 (sent 100 ms after the flight) and S3 (sent with
/// the flight, and deemed lost by RACK before), while S9 is outstanding and S8 was SACKed: the
/// reordering (S3 delivered below S8) keeps the window open. Which RTT RACK takes decides S9:
/// by the time they left (RFC 8985 §6.2) the retransmission's 110 ms, so S9, sent 210 ms ago, is
/// lost at once; in Linux's order ([`Config::rack_rtt_sequence_order`]) S3's 210 ms, so S9 waits
/// for the reordering window and the timer, as Linux's PRR-slow-start script
/// (prr-ss-ack-below-snd_una-cubic.pkt) expects.
#[test]
fn linux_takes_rack_rtt_from_the_highest_segment_acknowledged() {
    for linux in [false, true] {
        let mut s =
            ten_in_flight_with(Config { rack: true, rack_rtt_sequence_order: linux, ..script_config() });
        s.advance(100 * MS);
        s.send(&sack(&[(MSS, 2 * MSS)]));
        s.send(&sack(&[(MSS, 3 * MSS)]));
        s.send(&sack(&[(MSS, 3 * MSS), (8 * MSS, 9 * MSS)]));
        let first: Vec<_> =
            s.drain().into_iter().filter(|o| !o.payload.is_empty()).map(|o| o.repr.seq_number).collect();
        assert_eq!(first, [ours(0)], "S0 resent in recovery, alone (PRR: one segment delivered)");
        assert_eq!(s.conn.stats().lost_bytes, 6 * MSS, "S0 and S3..S7: sent before S8");
        s.advance(110 * MS);
        s.send(&TcpRepr { ack_number: Some(ours(4 * MSS)), ..sack(&[(8 * MSS, 9 * MSS)]) });
        let st = s.conn.stats();
        if linux {
            assert_eq!(st.lost_bytes, 4 * MSS, "S4..S7; S9 waits: {st:?}");
            // Its deadline: sent at 0, RACK.rtt 210 ms plus a quarter of the minimum RTT.
            s.advance(24 * MS);
            assert_eq!(s.conn.stats().lost_bytes, 4 * MSS);
            s.advance(2 * MS);
            assert_eq!(s.conn.stats().lost_bytes, 5 * MSS, "the reordering timer marks S9");
        } else {
            assert_eq!(st.lost_bytes, 5 * MSS, "S4..S7 and S9: {st:?}");
        }
    }
}

/// A SACK of part of a segment: with [`Config::sack_in_segments`] (Linux's whole-segment SACK
/// tagging) it SACKs nothing, and a block that ends inside a segment SACKs only the whole ones
/// before; without it every byte counts (RFC 6675's scoreboard), so the segment's resending
/// would stop short of the SACKed byte (fr-4pkt-fack-last-byte.pkt resends all of it).
#[test]
fn linux_takes_sack_blocks_in_whole_segments() {
    for linux in [false, true] {
        let mut s = ten_in_flight_with(Config { rack: true, sack_in_segments: linux, ..script_config() });
        s.advance(100 * MS);
        // The last byte of S9.
        s.send(&sack(&[(10 * MSS - 1, 10 * MSS)]));
        assert_eq!(s.conn.stats().sacked_bytes, if linux { 0 } else { 1 });
        // S7 whole and half of S8: S7 alone, or S7 and the half.
        s.send(&sack(&[(7 * MSS, 8 * MSS + MSS / 2)]));
        let want = if linux { MSS } else { MSS + MSS / 2 + 1 };
        assert_eq!(s.conn.stats().sacked_bytes, want);
        // A block from inside S5 to the end of S6: S6 alone.
        s.send(&sack(&[(5 * MSS + 10, 7 * MSS)]));
        let want = if linux { 2 * MSS } else { want + 2 * MSS - 10 };
        assert_eq!(s.conn.stats().sacked_bytes, want);
    }
}

/// Two segments out, the second SACKed: RFC 5827's early retransmit resends the first at once
/// (fewer than four segments in flight, all but one SACKed). With RACK the reordering window
/// covers that case instead (as Linux, which removed early retransmit for RACK): nothing goes at
/// once, and the reordering timer resends the first segment a quarter of the minimum RTT later
/// (packetdrill's `cubic/cubic-rack-reo-timeout-retrans-failed-incoming-data.pkt`).
#[test]
fn rack_waits_out_the_reordering_window_where_early_retransmit_would_not() {
    let resent_at_once = |rack: bool| {
        let mut s = in_flight(Config { rack, ..script_config() }, 2);
        s.advance(100 * MS);
        s.send(&sack(&[(MSS, 2 * MSS)]));
        let out = s.drain();
        (s, out.iter().filter(|o| !o.payload.is_empty()).map(|o| o.repr.seq_number).collect::<Vec<_>>())
    };
    assert_eq!(resent_at_once(false).1, [ours(0)], "early retransmit");
    let (mut s, at_once) = resent_at_once(true);
    assert!(at_once.is_empty(), "RACK waits for the reordering window: {at_once:?}");
    s.advance(26 * MS);
    let out = s.drain();
    let rexmit: Vec<_> = out.iter().filter(|o| !o.payload.is_empty()).map(|o| o.repr.seq_number).collect();
    assert_eq!(rexmit, [ours(0)], "the reordering timer resends it");
}

/// An ACK of everything below `acked` (an offset from our first data byte) SACKing `blocks`.
fn ack_sack(acked: usize, blocks: &[(usize, usize)]) -> TcpRepr<'static> {
    TcpRepr { ack_number: Some(ours(acked)), ..sack(blocks) }
}

/// A recovery ends when the cumulative ACK passes its recovery point, and the same ACK begins
/// another (the hole now at SND.UNA was marked lost in the first): the hole was already resent
/// in the first recovery, and that retransmission is on its way. It is not sent again. (The new
/// recovery started over from SND.UNA and resent it at once, a round trip early: through random
/// loss a tenth of all retransmissions, and their deliveries, a moment after they left, ended
/// BBR's rounds early.)
#[test]
fn a_recovery_begun_again_does_not_resend_what_the_one_before_resent() {
    let mut s = ten_in_flight(true);
    // Ten more segments wait for the window.
    assert_eq!(s.conn.send(&vec![4; 10 * MSS]), 10 * MSS);
    assert!(s.drain().iter().all(|o| o.payload.is_empty()));
    let mut sent = Vec::new();
    let step = |s: &mut Script, sent: &mut Vec<SeqNumber>, wait: Duration, ack: &TcpRepr<'_>| {
        s.advance(wait);
        s.send(ack);
        let out: Vec<_> =
            s.drain().into_iter().filter(|o| !o.payload.is_empty()).map(|o| o.repr.seq_number).collect();
        sent.extend(out.iter().copied());
        out
    };
    // S5 lost: recovery (its point is S10); S5 resent and new data after it.
    let out = step(&mut s, &mut sent, 100 * MS, &ack_sack(5 * MSS, &[(6 * MSS, 10 * MSS)]));
    assert_eq!(out.first(), Some(&ours(5 * MSS)), "{out:?}");
    assert!(out.contains(&ours(11 * MSS)), "new data S10 and S11 went too: {out:?}");
    // An RTT later: S10 lost (S11 SACKed), and S5's retransmission too. Both go again in this
    // recovery.
    let out =
        step(&mut s, &mut sent, 100 * MS, &ack_sack(5 * MSS, &[(6 * MSS, 10 * MSS), (11 * MSS, 12 * MSS)]));
    assert!(out.contains(&ours(10 * MSS)) && out.contains(&ours(5 * MSS)), "{out:?}");
    let recoveries = s.conn.stats().recoveries;
    // S5's second retransmission arrives: the ACK passes the recovery point, and S10, still
    // below RACK's lost mark, begins a new recovery at once.
    let out = step(&mut s, &mut sent, 100 * MS, &ack_sack(10 * MSS, &[(11 * MSS, 12 * MSS)]));
    assert_eq!(s.conn.stats().recoveries, recoveries + 1, "a new recovery began");
    assert!(!out.contains(&ours(10 * MSS)), "S10's retransmission is on its way: {out:?}");
    assert_eq!(sent.iter().filter(|&&q| q == ours(10 * MSS)).count(), 2, "sent and resent once: {sent:?}");
    // Its retransmission arrives: nothing was lost for good, and no timer had to fire.
    step(&mut s, &mut sent, 100 * MS, &ack_sack(12 * MSS, &[]));
    let st = s.conn.stats();
    assert_eq!(st.timeouts, 0, "{st:?}");
}

/// A retransmission above SND.UNA is lost too, while the one at SND.UNA is still on its way:
/// RACK finds it (a retransmission sent after it was SACKed) and it goes again at once, below
/// HighRxt, where NextSeg does not look. (It waited until the cumulative ACK reached it, a round
/// trip later, or for the RTO at the tail of a transfer.)
#[test]
fn a_lost_retransmission_above_snd_una_goes_again_before_snd_una_reaches_it() {
    let mut s = ten_in_flight(true);
    let resent = |s: &mut Script| -> Vec<SeqNumber> {
        s.drain().into_iter().filter(|o| !o.payload.is_empty()).map(|o| o.repr.seq_number).collect()
    };
    // S6 SACKed an RTT after the flight: S0..S5 are lost a reordering window later, and go
    // again one an ACK as PRR allows, each ACK SACKing one more of S7..S9.
    s.advance(100 * MS);
    s.send(&sack(&[(6 * MSS, 7 * MSS)]));
    s.advance(26 * MS);
    let mut out = resent(&mut s);
    for n in 8..=10 {
        s.advance(10 * MS);
        s.send(&sack(&[(6 * MSS, n * MSS)]));
        out.extend(resent(&mut s));
    }
    assert_eq!(out, [ours(0), ours(MSS), ours(2 * MSS), ours(3 * MSS)], "S0..S3 resent, 10 ms apart");
    // An RTT after S3's retransmission, it and S1's are SACKed; S0's and S2's are late. S0's is
    // lost (a fast retransmission at SND.UNA), and so is S2's, above SND.UNA.
    s.advance(100 * MS);
    s.send(&sack(&[(MSS, 2 * MSS), (3 * MSS, 4 * MSS), (6 * MSS, 10 * MSS)]));
    let out = resent(&mut s);
    assert_eq!(s.conn.stats().unacked_bytes, 10 * MSS, "SND.UNA is still S0");
    assert_eq!(out, [ours(0), ours(2 * MSS)], "S0 and S2 again, before S4's first retransmission");
    assert_eq!(s.conn.stats().timeouts, 0);
}
