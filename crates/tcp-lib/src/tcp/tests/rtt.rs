//! RTT samples around retransmission timeouts: an echoed timestamp from before the last
//! timeout measured the timer's wait, not the path (see `Connection::sample_rtt`).

use std::time::Duration;

use super::pair::{Faults, Transfer, pair_config, run_transfer};
use super::*;
use crate::tcp::CongestionAlgorithm;
use crate::wire::tcp::Timestamp;

const MS: Duration = Duration::from_millis(1);

/// Established with timestamps after a 50 ms handshake (the one RTT sample so far), with
/// 100 bytes sent and unacknowledged at TSval `t1`, then resent by the first retransmission
/// timeout at TSval `t2`. Returns the script, `t1`, `t2` and the RTO before the timeout.
fn timed_out_once() -> (Script, u32, u32, Duration) {
    let syn = TcpRepr { timestamp: Some(Timestamp { tsval: 100, tsecr: 0 }), ..syn_from_peer() };
    let config = Config { timestamps: true, send_buffer: 1000, ..script_config() };
    let mut s = Script::accept_with(config, syn);
    let synack = s.drain();
    let t0 = synack[0].repr.timestamp.expect("timestamps negotiated").tsval;
    s.advance(50 * MS);
    let ack = |tsecr| TcpRepr {
        ack_number: Some(LOCAL_SEQ + 1),
        timestamp: Some(Timestamp { tsval: 200, tsecr }),
        ..SEND_TEMPL
    };
    send!(s, ack(t0));
    assert_eq!(s.conn.state(), State::Established);
    assert_eq!(s.conn.stats().srtt, Some(50 * MS));
    assert_eq!(s.conn.send(&[7; 100]), 100);
    let first = s.drain();
    assert_eq!(first.len(), 1);
    let t1 = first[0].repr.timestamp.expect("timestamps").tsval;
    let rto = s.conn.stats().rto;
    let mut resent = Vec::new();
    while resent.is_empty() {
        s.advance(MS);
        resent = s.drain();
    }
    assert_eq!((resent.len(), resent[0].payload.len()), (1, 100), "the retransmission");
    assert_eq!(s.conn.stats().timeouts, 1);
    assert_eq!(s.conn.stats().rto, 2 * rto, "backed off");
    let t2 = resent[0].repr.timestamp.expect("timestamps").tsval;
    assert!(t2 > t1);
    (s, t1, t2, rto)
}

/// The peer's ACK of the 100 bytes, echoing `tsecr`, 10 ms after the retransmission.
fn ack_all(s: &mut Script, tsecr: u32) {
    s.advance(10 * MS);
    send!(
        s,
        TcpRepr {
            ack_number: Some(LOCAL_SEQ + 101),
            timestamp: Some(Timestamp { tsval: 300, tsecr }),
            ..SEND_TEMPL
        }
    );
    assert_eq!(s.conn.stats().unacked_bytes, 0);
}

/// Our ACK of the original was lost; the peer answers the retransmission (a duplicate to it)
/// with the TSval of the original (RFC 7323 §4.3). That echo spans the timer's wait: no sample,
/// and the RTO stays backed off (Karn; RFC 6298 §5.7).
#[test]
fn an_echo_from_before_the_timeout_is_no_sample() {
    let (mut s, t1, _, rto) = timed_out_once();
    ack_all(&mut s, t1);
    let st = s.conn.stats();
    assert_eq!(st.srtt, Some(50 * MS), "SRTT unchanged");
    assert_eq!(st.rto, 2 * rto, "the backoff stays");
}

/// The retransmission's own echo is a sample of the path (10 ms), and clears the backoff.
#[test]
fn the_retransmissions_echo_is_a_sample() {
    let (mut s, _, t2, _) = timed_out_once();
    ack_all(&mut s, t2);
    let st = s.conn.stats();
    assert!(st.srtt < Some(50 * MS), "SRTT moves toward 10 ms: {:?}", st.srtt);
    assert!(st.rto < 2 * script_config().initial_rto, "backoff cleared: {:?}", st.rto);
}

/// Found by `header_prediction`'s proptest (its regression file keeps the case): 3,000-byte
/// buffers (two segments in flight, so every loss waits for the timer), 12% loss each way and
/// timestamps. When an ACK was lost, the ACK the retransmission drew echoed the original; each
/// such "RTT" was as long as the timer's wait and made the next RTO longer still (SRTT 3.8 s
/// on a 70 ms path, RTOs of 30–60 s), and the transfer took 1,251 s of virtual time. Without
/// those samples it takes about 42 s.
#[test]
fn lost_acks_do_not_stretch_the_rto() {
    let config = Config {
        send_buffer: 3000,
        recv_buffer: 3000,
        window_scaling: false,
        timestamps: true,
        sack: false,
        max_retransmits: 40,
        delayed_ack: None,
        max_ooo_ranges: 256,
        congestion: CongestionAlgorithm::NewReno,
        ..pair_config()
    };
    let faults = Faults {
        drop: 122,
        duplicate: 0,
        reorder: 77,
        corrupt: 27,
        delay: Duration::from_millis(34),
        reorder_spread: Duration::from_millis(68),
    };
    let mut t = Transfer::new(127_528, 11_585, vec![1], 1);
    let p =
        run_transfer(config, config, faults, 16_930_734_991_412_720_380, &mut t, Duration::from_secs(1200));
    let srtt = p.a.stats().srtt.expect("sampled");
    assert!(p.done_at < Duration::from_secs(120), "done after {:?}", p.done_at);
    assert!(srtt < Duration::from_millis(500), "SRTT {srtt:?} on a 70 ms path");
}
