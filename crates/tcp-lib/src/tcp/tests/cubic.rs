//! A retransmission timeout under Linux's RTO estimator ([`Config::linux_rto`]) and CUBIC
//! counted as Linux counts it ([`CongestionAlgorithm::LinuxCubic`]), after packetdrill's
//! `cubic/cubic-rto-ss-ca-cwnd-bump.pkt`: the timer fires at SRTT + 200 ms, ssthresh is 717/1024
//! of the window, slow start climbs back to it, and congestion avoidance then grows by one
//! segment per twenty acknowledged (the timeout made CUBIC forget `W_max`). And, after
//! `cubic/cubic-rack-reo-timeout-retrans-failed-incoming-data.pkt`, growth for SACKed data once
//! reordering is seen ([`Config::grow_on_reordered_sacks`]).

use super::*;
use crate::tcp::CongestionAlgorithm;

const SEG: usize = 1000;

fn ack(bytes: usize) -> TcpRepr<'static> {
    TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + bytes),
        window_len: 60_000,
        ..SEND_TEMPL
    }
}

fn established(linux_rto: bool) -> Script {
    let config = Config {
        send_buffer: 300_000,
        initial_window: Some(10),
        slow_start_segments_per_ack: 64,
        congestion: CongestionAlgorithm::LinuxCubic,
        min_rto: Duration::from_millis(200),
        linux_rto,
        ..script_config()
    };
    // The handshake's ACK 100 ms after the SYN-ACK: the first RTT sample.
    let mut s = Script::accept_with(config, TcpRepr { max_seg_size: Some(1000), ..syn_from_peer() });
    assert_eq!(s.drain().len(), 1);
    s.advance(Duration::from_millis(100));
    send!(s, ack(0));
    assert_eq!(s.conn.state(), State::Established);
    s
}

/// One segment sent and acknowledged after 100 ms (the second RTT sample), a second one sent:
/// how long until the timer resends it.
fn timeout_after_one_sample(linux_rto: bool) -> (Script, Duration) {
    let mut s = established(linux_rto);
    s.conn.send(&[1; SEG]);
    assert_eq!(s.drain().len(), 1);
    s.advance(Duration::from_millis(100));
    send!(s, ack(SEG));
    s.conn.send(&[2; SEG]);
    assert_eq!(s.drain().len(), 1);
    let start = s.now;
    for _ in 0..400 {
        s.advance(Duration::from_millis(1));
        if !s.drain().is_empty() {
            break;
        }
    }
    let waited = s.now - start;
    (s, waited)
}

#[test]
fn linux_rto_adds_the_minimum_to_srtt() {
    // Two 100 ms samples (the handshake's and the data's): RFC 6298 waits SRTT + 4 · 37.5 ms,
    // Linux SRTT + the 200 ms minimum.
    assert_eq!(timeout_after_one_sample(false).1, Duration::from_millis(250));
    assert_eq!(timeout_after_one_sample(true).1, Duration::from_millis(300));
}

#[test]
fn after_a_timeout_linux_cubic_climbs_back_and_grows_one_segment_per_twenty() {
    let (mut s, _) = timeout_after_one_sample(true);
    s.advance(Duration::from_millis(100));
    send!(s, ack(2 * SEG));
    let st = s.conn.stats();
    assert_eq!((st.cwnd / SEG, st.ssthresh / SEG), (2, 7), "717/1024 of ten segments");
    s.conn.send(&[3; 200 * SEG]);
    s.drain();
    // The script's ACKs (milliseconds after the previous one, data acknowledged) and the
    // window after each.
    let steps: [(u64, usize, usize); 7] =
        [(100, 3, 3), (2, 4, 4), (98, 5, 5), (2, 6, 6), (2, 7, 7), (2, 8, 7), (98, 9, 7)];
    for (ms, acked, cwnd) in steps {
        s.advance(Duration::from_millis(ms));
        send!(s, ack(acked * SEG));
        s.drain();
        assert_eq!(s.conn.stats().cwnd / SEG, cwnd, "after the ACK of {acked} segments");
    }
    let mut acked = 9;
    for ms in [2, 2, 2, 2, 2, 2, 98, 3, 2, 2, 2, 2, 2] {
        s.advance(Duration::from_millis(ms));
        acked += 1;
        send!(s, ack(acked * SEG));
        s.drain();
        assert_eq!(s.conn.stats().cwnd / SEG, 7, "after the ACK of {acked} segments");
    }
    s.advance(Duration::from_millis(98));
    send!(s, ack(23 * SEG));
    assert_eq!(s.conn.stats().cwnd / SEG, 8);
}

/// The peer's ACK of `acked` segments SACKing the segment ranges `blocks`.
fn sack(acked: usize, blocks: &[(usize, usize)]) -> TcpRepr<'static> {
    use crate::wire::tcp::{SackBlock, SackBlocks};
    let v: Vec<_> = blocks
        .iter()
        .map(|&(l, r)| SackBlock { left: LOCAL_SEQ + 1 + l * SEG, right: LOCAL_SEQ + 1 + r * SEG })
        .collect();
    TcpRepr { sack_blocks: SackBlocks::from_slice(&v).expect("at most four"), ..ack(acked * SEG) }
}

/// cubic-rack-reo-timeout-retrans-failed-incoming-data.pkt's start: ten segments out, the
/// tenth SACKed, then the fourth (reordering: seven segments below the highest SACKed), then
/// all ACKed. The window after that.
fn window_after_reordering(grow_on_reordered_sacks: bool) -> usize {
    let config = Config {
        send_buffer: 20_000,
        initial_window: Some(10),
        slow_start_segments_per_ack: 64,
        congestion: CongestionAlgorithm::LinuxCubic,
        sack: true,
        rack: true,
        grow_on_reordered_sacks,
        ..script_config()
    };
    let syn = TcpRepr { max_seg_size: Some(1000), sack_permitted: true, ..syn_from_peer() };
    let mut s = Script::accept_with(config, syn);
    s.drain();
    s.advance(Duration::from_millis(20));
    send!(s, ack(0));
    s.conn.send(&[1; 10 * SEG]);
    assert_eq!(s.drain().len(), 10);
    s.advance(Duration::from_millis(20));
    send!(s, sack(0, &[(9, 10)]));
    assert_eq!(s.conn.stats().cwnd / SEG, 10, "reordering not seen yet: no growth");
    send!(s, sack(0, &[(3, 4), (9, 10)]));
    send!(s, ack(10 * SEG));
    s.conn.stats().cwnd / SEG
}

#[test]
fn under_reordering_sacked_data_grows_the_window() {
    // Linux: the SACK of the fourth segment (reordering 7 > DupThresh) grows the window by one,
    // the cumulative ACK by the eight segments not SACKed before: 10 + 1 + 8.
    assert_eq!(window_after_reordering(true), 19);
    assert_eq!(window_after_reordering(false), 18, "RFC 5681: cumulative ACKs only");
}
