//! Proportional Rate Reduction (RFC 6937, "Proportional Rate Reduction for TCP", 2013; RFC 9937,
//! "Proportional Rate Reduction (PRR)", 2025): what each ACK in fast recovery lets the sender
//! send, after the examples of RFC 6937 §5: 20 segments in flight, cwnd = 20, one or more of
//! them lost, bulk data queued behind them.
//!
//! Segments are 100 bytes, S0..S19 sent first. As in those examples, the first two ACKs after
//! the loss each send one new segment (S20, S21: with SACK, SACKed segments leave the flight;
//! without, limited transmit), and the third starts recovery with the fast retransmission. The
//! flight is then 22 segments, so NewReno's ssthresh is 11 (RFC 6937's figures, which count 20,
//! have 10). Every expected list below was computed by an independent model of RFC 6675's
//! scoreboard and RFC 9937's PRR, and checked by hand where the comments say why; the RFC 6675
//! rule PRR replaced (send while cwnd - pipe >= 1 SMSS, with cwnd = ssthresh) gives other lists
//! for each of them: nothing for the first nine ACKs of a single loss, then one per ACK; seven
//! retransmissions at once after the burst of 15 losses.

use super::scripted::established_with;
use super::*;
use crate::tcp::CongestionAlgorithm;
use crate::wire::tcp::{SackBlock, SackBlocks};

const SEG: usize = 100;

/// Our sequence number `n` bytes after our SYN.
fn ours(n: usize) -> SeqNumber {
    LOCAL_SEQ + 1 + n
}

/// The peer's ACK of our segments below `acked`, SACKing segments `l..r` of each block.
fn acking(acked: usize, blocks: &[(usize, usize)]) -> TcpRepr<'static> {
    let v: Vec<_> =
        blocks.iter().map(|&(l, r)| SackBlock { left: ours(SEG * l), right: ours(SEG * r) }).collect();
    TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(ours(SEG * acked)),
        window_len: 60_000,
        sack_blocks: SackBlocks::from_slice(&v).expect("at most four"),
        ..SEND_TEMPL
    }
}

/// The segments (by number) the connection sends now; each must be a whole segment.
fn sent(s: &mut Script) -> Vec<usize> {
    s.drain()
        .iter()
        .map(|t| {
            assert_eq!(t.payload.len(), SEG);
            usize::try_from(t.repr.seq_number - ours(0)).expect("our data") / SEG
        })
        .collect()
}

/// Established with NewReno, MSS 100 and a 20-segment initial window, S0..S19 sent, 60 more
/// segments queued.
fn twenty_in_flight(sack: bool) -> Script {
    let config = Config {
        send_buffer: 8000,
        sack,
        congestion: CongestionAlgorithm::NewReno,
        initial_window: Some(20),
        ..script_config()
    };
    let syn =
        TcpRepr { max_seg_size: Some(100), window_len: 60_000, sack_permitted: sack, ..syn_from_peer() };
    let mut s = established_with(config, syn, TcpRepr { window_len: 60_000, ..acking(0, &[]) });
    assert_eq!(s.conn.stats().cwnd, 20 * SEG);
    assert_eq!(s.conn.send(&[7; 8000]), 8000);
    assert_eq!(sent(&mut s), (0..20).collect::<Vec<_>>());
    s
}

/// Delivers one ACK and returns what it made the connection send.
fn on_ack(s: &mut Script, ack: &TcpRepr<'_>) -> Vec<usize> {
    s.send(ack);
    sent(s)
}

/// RFC 6937 §5 Figure 1, one loss: S0. RecoverFS is the pipe at the start, S4..S21 (18
/// segments), so while the pipe is above ssthresh each ACK (one segment delivered) lets 11/18 of
/// a segment go: a new segment on about every other ACK, until the pipe is down to ssthresh
/// after the SACK of S19; from then on one per ACK (packet conservation). Recovery sends 11
/// segments (the retransmission and S22..S31) for the 19 delivered, and ends with cwnd =
/// ssthresh.
#[test]
fn one_loss_sends_in_proportion_to_what_is_delivered() {
    let mut s = twenty_in_flight(true);
    let expected: [&[usize]; 21] = [
        &[20],
        &[21],
        &[0],
        &[],
        &[],
        &[22],
        &[23],
        &[],
        &[24],
        &[],
        &[25],
        &[26],
        &[],
        &[27],
        &[],
        &[28],
        &[29],
        &[],
        &[],
        &[30],
        &[31],
    ];
    for (i, want) in expected.iter().enumerate() {
        let got = on_ack(&mut s, &acking(0, &[(1, i + 2)]));
        assert_eq!(got, *want, "the ACK that SACKs S{}", i + 1);
        if i == 2 {
            let st = s.conn.stats();
            assert_eq!((st.ssthresh, st.fast_retransmits), (11 * SEG, 1));
        }
    }
    // S0 arrives: the cumulative ACK covers the recovery point (S22). cwnd = ssthresh (RFC 9937
    // §4), with S22..S31 in flight: one more segment.
    assert_eq!(on_ack(&mut s, &acking(22, &[])), [32]);
    let st = s.conn.stats();
    assert_eq!((st.cwnd, st.retransmits, st.timeouts), (11 * SEG, 1, 0));
}

/// Four losses, S0..S3: the retransmissions go first (NextSeg rule 1), under the same
/// proportion (RecoverFS: S7..S21, 15 segments, so 11/15 of a segment per ACK), then new data;
/// the pipe reaches ssthresh at the SACK of S18. The retransmissions arriving advance SND.UNA
/// with nothing newly lost (PRR-SSRB may add a segment) but the pipe is at ssthresh: one segment
/// each.
#[test]
fn four_losses_retransmit_in_proportion_then_conserve() {
    let mut s = twenty_in_flight(true);
    let expected: [&[usize]; 18] = [
        &[20],
        &[21],
        &[0],
        &[],
        &[1],
        &[],
        &[2],
        &[3],
        &[22],
        &[],
        &[23],
        &[24],
        &[25],
        &[],
        &[],
        &[26],
        &[27],
        &[28],
    ];
    for (i, want) in expected.iter().enumerate() {
        let got = on_ack(&mut s, &acking(0, &[(4, i + 5)]));
        assert_eq!(got, *want, "the ACK that SACKs S{}", i + 4);
    }
    for (acked, want) in [(1, 29), (2, 30), (3, 31)] {
        assert_eq!(on_ack(&mut s, &acking(acked, &[(4, 22)])), [want], "the ACK of S{}", acked - 1);
    }
    assert_eq!(on_ack(&mut s, &acking(22, &[])), [32]);
    assert_eq!(s.conn.stats().cwnd, 11 * SEG);
}

/// RFC 6937 §5's second example, a burst of 15 losses (S0..S14): the pipe is far below ssthresh
/// from the start (S18..S21). While SND.UNA does not move, PRR sends what was delivered, one
/// segment per ACK (PRR-CRB), not the whole gap to ssthresh at once. Each retransmission that
/// arrives advances SND.UNA without a new loss: PRR-SSRB adds one segment, two per ACK, a slow
/// start back up to ssthresh; at ssthresh, one per ACK again.
#[test]
fn burst_loss_slow_starts_back_to_ssthresh() {
    let mut s = twenty_in_flight(true);
    let expected: [&[usize]; 7] = [&[20], &[21], &[0], &[1], &[2], &[3], &[4]];
    for (i, want) in expected.iter().enumerate() {
        let got = on_ack(&mut s, &acking(0, &[(15, i + 16)]));
        assert_eq!(got, *want, "the ACK that SACKs S{}", i + 15);
    }
    let expected: [&[usize]; 7] = [&[5, 6], &[7, 8], &[9, 10], &[11, 12], &[13, 14], &[22, 23], &[24]];
    for (i, want) in expected.iter().enumerate() {
        let got = on_ack(&mut s, &acking(i + 1, &[(15, 22)]));
        assert_eq!(got, *want, "the ACK of S{i}");
    }
    let st = s.conn.stats();
    assert_eq!((st.ssthresh, st.retransmits, st.timeouts), (11 * SEG, 15, 0));
}

/// Without SACK, PRR estimates DeliveredData from the duplicate ACKs, one segment each (RFC 6937
/// §3): the pipe is the flight less what they delivered. One loss, S0: the pattern is Figure 1's
/// (RecoverFS 19 segments, so 11/19 of a segment per duplicate ACK), where NewReno's inflation
/// sent nothing for nine duplicate ACKs and then one segment per duplicate ACK. Recovery ends
/// with cwnd = ssthresh.
#[test]
fn without_sack_duplicate_acks_drive_prr() {
    let mut s = twenty_in_flight(false);
    let expected: [&[usize]; 21] = [
        &[20],
        &[21],
        &[0],
        &[],
        &[],
        &[22],
        &[],
        &[23],
        &[24],
        &[],
        &[25],
        &[],
        &[26],
        &[],
        &[27],
        &[28],
        &[],
        &[],
        &[29],
        &[30],
        &[31],
    ];
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(on_ack(&mut s, &acking(0, &[])), *want, "duplicate ACK {}", i + 1);
    }
    let st = s.conn.stats();
    assert_eq!((st.dup_acks, st.fast_retransmits, st.cwnd), (21, 1, 11 * SEG), "cwnd is not inflated");
    assert_eq!(on_ack(&mut s, &acking(22, &[])), [32]);
    assert_eq!(s.conn.stats().cwnd, 11 * SEG);
}

/// A NewReno partial ACK (without SACK) retransmits the next hole at once and counts it against
/// what PRR allows: two losses, S0 and S10.
#[test]
fn without_sack_a_partial_ack_retransmits_the_next_hole() {
    let mut s = twenty_in_flight(false);
    for _ in 0..3 {
        on_ack(&mut s, &acking(0, &[]));
    }
    // S0 retransmitted on the third duplicate ACK; 15 more duplicate ACKs send S22..S28.
    let mut new = Vec::new();
    for _ in 3..18 {
        new.extend(on_ack(&mut s, &acking(0, &[])));
    }
    assert_eq!(new, (22..29).collect::<Vec<_>>());
    // S0 arrives: the partial ACK up to S10, the next hole.
    // It says S10 was lost too (not a safe ACK): PRR-CRB, and the pipe (S10..S28 less the
    // nine segments the duplicate ACKs above S10 delivered) is one segment below ssthresh, which
    // the retransmission takes.
    assert_eq!(on_ack(&mut s, &acking(10, &[])), [10]);
    let st = s.conn.stats();
    assert_eq!((st.fast_retransmits, st.recoveries), (2, 1), "one episode, two retransmits");
}

/// An ACK below SND.UNA (reordered) whose SACK blocks report new data delivered counts in
/// DeliveredData (packetdrill's prr-ss-ack-below-snd_una).
#[test]
fn sacks_on_an_old_ack_count_as_delivered() {
    let mut s = twenty_in_flight(true);
    // S0..S14 lost, S15..S17 SACKed: recovery, S0 retransmitted (and S20, S21 on the way).
    for (r, want) in [(16, 20), (17, 21), (18, 0)] {
        assert_eq!(on_ack(&mut s, &acking(0, &[(15, r)])), [want]);
    }
    // The retransmitted S0 arrives, SND.UNA moves to S1; then an ACK reordered behind it (its
    // cumulative ACK still S0) SACKs S18 and S19: two segments delivered, two retransmissions.
    assert_eq!(on_ack(&mut s, &acking(1, &[(15, 18)])), [1, 2], "PRR-SSRB");
    assert_eq!(on_ack(&mut s, &acking(0, &[(15, 20)])), [3, 4]);
}
