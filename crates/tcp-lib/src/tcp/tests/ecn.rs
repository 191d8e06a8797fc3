//! Explicit Congestion Notification (RFC 3168): the handshake that agrees on it, ECT(0) on new
//! data only, the receiver's ECE until CWR, and the sender's reduction once per window with CWR on
//! its next new data, at once or by PRR ([`Config::ecn_prr`]).

use super::*;
use crate::tcp::{CongestionAlgorithm, Ecn};

/// The peer's ECN-setup SYN (ECE and CWR).
fn ecn_syn() -> TcpRepr<'static> {
    TcpRepr { ece: true, cwr: true, ..syn_from_peer() }
}

/// Established from the peer's SYN under `ecn`, with room for several segments; returns the
/// script and whether our SYN-ACK accepted ECN (carried ECE).
fn passive(ecn: Ecn, syn: TcpRepr<'static>) -> (Script, bool) {
    let config =
        Config { ecn, send_buffer: 8192, recv_buffer: 8192, mss: 100, nodelay: true, ..script_config() };
    let mut s = Script::accept_with(config, TcpRepr { window_len: 8192, ..syn });
    let out = s.drain();
    assert_eq!(out.len(), 1);
    let synack = out[0].repr;
    assert_eq!(synack.control, TcpControl::Syn);
    assert!(!synack.cwr, "a SYN-ACK never carries CWR");
    assert!(!out[0].ect, "a SYN-ACK is Not-ECT");
    send!(s, TcpRepr { ack_number: Some(LOCAL_SEQ + 1), window_len: 8192, ..SEND_TEMPL });
    assert_eq!(s.conn.state(), State::Established);
    (s, synack.ece)
}

#[test]
fn passive_open_accepts_ecn_only_when_asked_and_allowed() {
    for (ecn, syn, agreed) in [
        (Ecn::Passive, ecn_syn(), true),
        (Ecn::On, ecn_syn(), true),
        (Ecn::Off, ecn_syn(), false),
        (Ecn::Passive, syn_from_peer(), false),
        // ECE alone is not a request (RFC 3168 §6.1.1).
        (Ecn::On, TcpRepr { ece: true, ..syn_from_peer() }, false),
    ] {
        let (s, echoed) = passive(ecn, syn);
        assert_eq!((echoed, s.conn.stats().ecn), (agreed, agreed), "{ecn:?} {syn:?}");
    }
}

#[test]
fn active_open_asks_and_takes_only_an_ece_syn_ack() {
    for (ecn, synack_ece, synack_cwr, agreed) in [
        (Ecn::On, true, false, true),
        (Ecn::On, false, false, false),
        (Ecn::On, true, true, false),
        (Ecn::Passive, true, false, false),
    ] {
        let base = Instant::now();
        let config = Config { ecn, ..script_config() };
        let mut s = Script::new(Connection::connect(config, LOCAL, REMOTE, LOCAL_SEQ, base), base);
        let syn = s.drain()[0].repr;
        assert_eq!((syn.ece, syn.cwr), (ecn == Ecn::On, ecn == Ecn::On), "an ECN-setup SYN has both");
        send!(
            s,
            TcpRepr {
                control: TcpControl::Syn,
                seq_number: REMOTE_SEQ,
                ece: synack_ece,
                cwr: synack_cwr,
                max_seg_size: Some(1460),
                ..SEND_TEMPL
            }
        );
        assert_eq!(s.conn.state(), State::Established);
        assert_eq!(s.conn.stats().ecn, agreed, "{ecn:?} ece {synack_ece} cwr {synack_cwr}");
    }
}

#[test]
fn new_data_is_ect_and_retransmissions_and_acks_are_not() {
    let (mut s, _) = passive(Ecn::Passive, ecn_syn());
    assert_eq!(s.conn.send(&[7; 150]), 150);
    let out = s.drain();
    assert_eq!(out.iter().map(|o| (o.payload.len(), o.ect)).collect::<Vec<_>>(), [(100, true), (50, true)]);
    // The RTO resends the first segment Not-ECT (RFC 3168 §6.1.5).
    s.advance(Duration::from_secs(1));
    let out = s.drain();
    assert!(!out.is_empty() && out.iter().all(|o| !o.ect && o.repr.seq_number == LOCAL_SEQ + 1), "{out:?}");
    // A pure ACK is Not-ECT (§6.1.4).
    send!(s, TcpRepr { payload: b"hi", ack_number: Some(LOCAL_SEQ + 1), window_len: 8192, ..SEND_TEMPL });
    let out = s.drain();
    assert!(out.iter().all(|o| !o.ect), "{out:?}");
}

#[test]
fn without_ecn_nothing_is_marked_and_ce_is_ignored() {
    let (mut s, _) = passive(Ecn::Passive, syn_from_peer());
    assert_eq!(s.conn.send(&[7; 50]), 50);
    assert!(s.drain().iter().all(|o| !o.ect && !o.repr.ece && !o.repr.cwr));
    s.send_ce(&TcpRepr { payload: b"hi", ack_number: Some(LOCAL_SEQ + 1), window_len: 8192, ..SEND_TEMPL });
    let out = s.drain();
    assert!(out.iter().all(|o| !o.repr.ece), "{out:?}");
    assert_eq!(s.conn.stats().ce_received, 0);
}

#[test]
fn ce_is_echoed_with_ece_until_the_peer_says_cwr() {
    let (mut s, _) = passive(Ecn::Passive, ecn_syn());
    let data = |at: usize, cwr: bool| TcpRepr {
        payload: b"abcd",
        seq_number: REMOTE_SEQ + 1 + at,
        ack_number: Some(LOCAL_SEQ + 1),
        window_len: 8192,
        cwr,
        ..SEND_TEMPL
    };
    send!(s, data(0, false));
    assert!(s.drain().iter().all(|o| !o.repr.ece), "no congestion, no echo");
    // A CE mark: acknowledged at once, with ECE, and every ACK after it too.
    s.send_ce(&data(4, false));
    let out = s.drain();
    assert_eq!(out.len(), 1);
    assert!(out[0].repr.ece && out[0].repr.ack_number == Some(REMOTE_SEQ + 1 + 8));
    send!(s, data(8, false));
    assert!(s.drain().iter().all(|o| o.repr.ece), "still echoing");
    assert_eq!(s.conn.send(b"x"), 1);
    assert!(s.drain().iter().all(|o| o.repr.ece), "data carries the echo too");
    // The peer's CWR ends it.
    send!(s, TcpRepr { ack_number: Some(LOCAL_SEQ + 2), ..data(12, true) });
    let out = s.drain();
    assert!(!out.is_empty() && out.iter().all(|o| !o.repr.ece), "{out:?}");
    // A segment with CWR and CE both keeps it going.
    s.send_ce(&TcpRepr { ack_number: Some(LOCAL_SEQ + 2), ..data(16, true) });
    assert!(s.drain().iter().all(|o| o.repr.ece));
    assert_eq!(s.conn.stats().ce_received, 2);
}

#[test]
fn ece_reduces_once_per_window_and_the_next_new_data_carries_cwr() {
    let (mut s, _) = passive(Ecn::Passive, ecn_syn());
    let cwnd0 = s.conn.stats().cwnd;
    assert_eq!(s.conn.send(&[1; 2000]), 2000);
    let flight = |out: &[Sent]| out.iter().map(|o| o.payload.len()).sum::<usize>();
    let first = s.drain();
    let sent = flight(&first);
    assert!(sent >= 200 && first.iter().all(|o| o.ect && !o.repr.cwr), "{first:?}");
    let ack = |acked: usize, ece: bool| TcpRepr {
        ack_number: Some(LOCAL_SEQ + 1 + acked),
        window_len: 8192,
        ece,
        ..SEND_TEMPL
    };
    // The first ECE reduces the window as a loss would, without a retransmission.
    send!(s, ack(100, true));
    let st = s.conn.stats();
    assert_eq!(st.ecn_reductions, 1);
    assert!(st.cwnd < cwnd0 && st.ssthresh == st.cwnd, "{st:?}");
    assert!(s.drain().iter().all(|o| o.repr.seq_number >= LOCAL_SEQ + 1 + sent), "nothing resent");
    assert_eq!(s.conn.stats().retransmits, 0);
    // More ECEs for the same window of data reduce nothing more.
    let cwnd1 = s.conn.stats().cwnd;
    send!(s, ack(sent, true));
    assert_eq!(s.conn.stats().ecn_reductions, 1, "same window");
    assert!(s.conn.stats().cwnd >= cwnd1);
    // The first new data after the reduction carries CWR, and only it.
    let second = s.drain();
    assert!(!second.is_empty(), "the window opened");
    assert!(second[0].repr.cwr && second[0].ect, "{:?}", second[0]);
    assert!(second[1..].iter().all(|o| !o.repr.cwr));
    // An ECE acknowledging data sent after the reduction is a new congestion event.
    send!(s, ack(sent + flight(&second), true));
    assert_eq!(s.conn.stats().ecn_reductions, 2);
    assert!(s.drain()[0].repr.cwr);
}

/// Established with ECN, an MSS of 100 and ten segments of initial window (CUBIC), S0..S3 sent
/// and 2000 bytes more queued behind the application; `prr` is [`Config::ecn_prr`].
fn four_in_flight(prr: bool) -> Script {
    let config = Config {
        ecn_prr: prr,
        send_buffer: 8192,
        mss: 100,
        nodelay: true,
        initial_window: Some(10),
        ..script_config()
    };
    let syn = TcpRepr { window_len: 8192, max_seg_size: Some(100), ..ecn_syn() };
    let mut s = Script::accept_with(config, syn);
    assert!(s.drain()[0].repr.ece, "ECN agreed");
    send!(s, TcpRepr { ack_number: Some(LOCAL_SEQ + 1), window_len: 8192, ..SEND_TEMPL });
    assert_eq!(s.conn.send(&[1; 400]), 400);
    assert_eq!(s.drain().len(), 4);
    assert_eq!(s.conn.stats().cwnd, 1000);
    s
}

/// The ACK of our data below `acked` (bytes), with ECE or not.
fn ece_ack(acked: usize, ece: bool) -> TcpRepr<'static> {
    TcpRepr { ack_number: Some(LOCAL_SEQ + 1 + acked), window_len: 8192, ece, ..SEND_TEMPL }
}

/// The bytes of data the connection sends now.
fn sent_bytes(s: &mut Script) -> usize {
    s.drain().iter().map(|o| o.payload.len()).sum()
}

/// Linux's cwnd-moderation-ecn-enter-cwr-no-moderation-700.pkt: four segments out of a window of
/// ten, the ACK of the first echoes congestion. At once (RFC 3168 §6.1.2, the default), cwnd =
/// ssthresh = 70% of the three still in flight, and with three out nothing more may go. By PRR
/// (Linux's CWR state), ssthresh is 70% of cwnd (7 segments) and the flight comes down to it
/// over the round trip: this ACK delivered one segment and advanced SND.UNA with no loss, so
/// PRR-SSRB lets two out (cwnd = pipe + sndcnt = 5, as Linux 6.18 reports); the window does not
/// grow meanwhile, and the reduction ends with cwnd = ssthresh once data sent after it is
/// acknowledged.
#[test]
fn an_ecn_echo_reduces_by_prr_in_linux_cwr_state() {
    let mut s = four_in_flight(false);
    assert_eq!(s.conn.send(&[2; 2000]), 2000);
    send!(s, ece_ack(100, true));
    let st = s.conn.stats();
    assert_eq!((st.ecn_reductions, st.cwnd, st.ssthresh, st.cwr, st.prr_window), (1, 210, 210, false, None));
    assert_eq!(sent_bytes(&mut s), 0, "three in flight, cwnd 2.1 segments");

    let mut s = four_in_flight(true);
    assert_eq!(s.conn.send(&[2; 2000]), 2000);
    send!(s, ece_ack(100, true));
    let st = s.conn.stats();
    assert_eq!((st.ecn_reductions, st.ssthresh, st.cwr, st.prr_window), (1, 700, true, Some(500)), "{st:?}");
    assert!(!st.in_recovery && st.retransmits == 0, "{st:?}");
    let first = s.drain();
    assert_eq!(
        first.iter().map(|o| o.payload.len()).sum::<usize>(),
        200,
        "PRR-SSRB: one delivered, plus one"
    );
    assert!(first[0].repr.cwr, "the first new data says CWR");
    // Each ACK of one segment: packet conservation plus one (PRR-SSRB) until the pipe reaches
    // ssthresh, then one for one; the window never grows inside the reduction.
    send!(s, ece_ack(200, false));
    assert_eq!(sent_bytes(&mut s), 200);
    send!(s, ece_ack(300, false));
    assert_eq!(sent_bytes(&mut s), 200);
    send!(s, ece_ack(400, false));
    assert_eq!(sent_bytes(&mut s), 100, "the pipe is at ssthresh (7): one for one");
    let st = s.conn.stats();
    assert_eq!((st.cwr, st.cwnd, st.prr_window), (true, 700, Some(700)), "{st:?}");
    // The ACK of S4, sent after the reduction began, ends it: cwnd = ssthresh, and it grows again.
    send!(s, ece_ack(500, false));
    let st = s.conn.stats();
    assert!(!st.cwr && st.prr_window.is_none() && st.cwnd >= 700, "{st:?}");
}

/// A loss found during a reduction by PRR continues it in fast recovery (Linux's
/// tcp_enter_recovery from CWR): ssthresh is not reduced a second time for the same window.
#[test]
fn a_loss_during_the_ecn_reduction_does_not_reduce_again() {
    let mut s = four_in_flight(true);
    assert_eq!(s.conn.send(&[2; 2000]), 2000);
    send!(s, ece_ack(100, true));
    assert_eq!(s.conn.stats().ssthresh, 700);
    // S1 is lost: three duplicate ACKs.
    assert!(sent_bytes(&mut s) > 0);
    for _ in 0..3 {
        send!(s, ece_ack(100, false));
    }
    let st = s.conn.stats();
    assert!(st.in_recovery && !st.cwr && st.fast_retransmits == 1 && st.recoveries == 1, "{st:?}");
    assert_eq!(st.ssthresh, 700, "the ECN reduction's ssthresh stands");
}

/// An echo on an ACK that finds nothing in flight (a window update after all was acknowledged)
/// reduces at once: with no flight there is nothing for PRR to pace, and no ACK would come to
/// let new data out.
#[test]
fn an_ecn_echo_with_nothing_in_flight_reduces_at_once() {
    let mut s = four_in_flight(true);
    send!(s, ece_ack(400, false));
    send!(s, TcpRepr { window_len: 9000, ..ece_ack(400, true) });
    let st = s.conn.stats();
    assert_eq!((st.ecn_reductions, st.cwr, st.cwnd), (1, false, st.ssthresh), "{st:?}");
    assert_eq!(s.conn.send(&[2; 2000]), 2000);
    assert_eq!(sent_bytes(&mut s), st.cwnd / 100 * 100, "a window's worth of whole segments goes at once");
}

/// BBR (v1, as Linux's) does not respond to ECN: an echo of congestion is answered with CWR on
/// the next new data, but the window stays, where CUBIC's is reduced.
#[test]
fn bbr_answers_an_ecn_echo_with_cwr_and_keeps_its_window() {
    let syn = TcpRepr { window_len: 8192, max_seg_size: Some(100), ..ecn_syn() };
    let config = |congestion| Config {
        send_buffer: 8192,
        mss: 100,
        nodelay: true,
        initial_window: Some(10),
        congestion,
        rack: true,
        ..script_config()
    };
    for (congestion, reduced) in [(CongestionAlgorithm::Cubic, true), (CongestionAlgorithm::Bbr, false)] {
        let mut s = Script::accept_with(config(congestion), syn);
        assert!(s.drain()[0].repr.ece, "ECN agreed");
        send!(s, TcpRepr { ack_number: Some(LOCAL_SEQ + 1), window_len: 8192, ..SEND_TEMPL });
        assert_eq!(s.conn.send(&[1; 400]), 400);
        assert_eq!(s.drain().len(), 4);
        let cwnd0 = s.conn.stats().cwnd;
        assert_eq!(s.conn.send(&[2; 400]), 400);
        send!(s, ece_ack(100, true));
        let st = s.conn.stats();
        assert_eq!(st.ecn_reductions, 1, "{congestion:?}");
        assert_eq!(st.cwnd < cwnd0, reduced, "{congestion:?}: {st:?}");
        let next = s.drain();
        if reduced {
            assert!(next.is_empty(), "CUBIC: three in flight fill the reduced window");
        } else {
            assert!(next.first().is_some_and(|o| o.repr.cwr), "BBR: CWR on the next new data");
        }
    }
}
