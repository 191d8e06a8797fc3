//! The restart window after idle ([`Config::restart_after_idle`]; RFC 5681 §4.1, Linux's
//! `tcp_slow_start_after_idle` and `tcp_cwnd_restart`), after packetdrill's
//! `slow_start/slow-start-after-idle.pkt` and `slow-start-after-win-update.pkt`: new data written
//! after more than an RTO without sending goes out under at most the initial window, and a zero
//! window holds the restart until the peer opens it.

use super::*;

const SEG: usize = 1000;

fn ack(bytes: usize, window: u16) -> TcpRepr<'static> {
    TcpRepr {
        seq_number: REMOTE_SEQ + 1,
        ack_number: Some(LOCAL_SEQ + 1 + bytes),
        window_len: window,
        ..SEND_TEMPL
    }
}

/// A connection whose window grew to 40 segments (ten sent and acknowledged, then twenty, each
/// ACK 100 ms later, slow start growing by all it covers), all acknowledged: nothing in flight.
fn grown(restart_after_idle: bool) -> Script {
    let config = Config {
        send_buffer: 300_000,
        initial_window: Some(10),
        slow_start_segments_per_ack: 64,
        restart_after_idle,
        ..script_config()
    };
    let mut s = Script::accept_with(config, TcpRepr { max_seg_size: Some(1000), ..syn_from_peer() });
    assert_eq!(s.drain().len(), 1);
    s.advance(Duration::from_millis(100));
    send!(s, ack(0, 60_000));
    let mut acked = 0;
    for burst in [10, 20] {
        s.conn.send(&vec![7; burst * SEG]);
        let sent: usize = s.drain().iter().map(|t| t.payload.len()).sum();
        assert_eq!(sent, burst * SEG, "the window lets the whole burst go");
        s.advance(Duration::from_millis(100));
        acked += burst * SEG;
        send!(s, ack(acked, 60_000));
    }
    assert_eq!(s.conn.stats().cwnd, 40 * SEG);
    s
}

/// Bytes that leave at once when thirty segments are written.
fn burst_after(s: &mut Script) -> usize {
    s.conn.send(&[8; 30 * SEG]);
    s.drain().iter().map(|t| t.payload.len()).sum()
}

#[test]
fn after_an_idle_rto_new_data_goes_under_the_initial_window() {
    let mut s = grown(true);
    s.advance(Duration::from_secs(2));
    assert_eq!(burst_after(&mut s), 10 * SEG, "the restart window: the initial ten segments");
    let st = s.conn.stats();
    // ssthresh: the larger of the old one (none yet: no loss) and 3/4 of the old window, as
    // Linux's `tcp_current_ssthresh`; slow start climbs back.
    assert_eq!((st.cwnd, st.ssthresh, st.idle_restarts), (10 * SEG, usize::MAX, 1));

    // Without the knob the stale window lets all thirty go.
    let mut s = grown(false);
    s.advance(Duration::from_secs(2));
    assert_eq!(burst_after(&mut s), 30 * SEG);
    assert_eq!(s.conn.stats().idle_restarts, 0);
}

#[test]
fn a_pause_shorter_than_the_rto_keeps_the_window() {
    let mut s = grown(true);
    s.advance(Duration::from_millis(150));
    assert_eq!(burst_after(&mut s), 30 * SEG);
    assert_eq!((s.conn.stats().cwnd, s.conn.stats().idle_restarts), (40 * SEG, 0));
}

#[test]
fn a_zero_window_holds_the_restart_until_the_peer_opens_it() {
    let mut s = grown(true);
    send!(s, ack(30 * SEG, 0));
    s.conn.send(&[8; 30 * SEG]);
    assert!(s.drain().iter().all(|t| t.payload.is_empty()), "nothing goes into a zero window");
    // Probes go while the window stays shut; the window is left alone meanwhile.
    for _ in 0..20 {
        s.advance(Duration::from_millis(100));
        s.drain();
    }
    assert_eq!((s.conn.stats().cwnd, s.conn.stats().idle_restarts), (40 * SEG, 0));
    send!(s, ack(30 * SEG, 60_000));
    let sent: usize = s.drain().iter().map(|t| t.payload.len()).sum();
    assert_eq!(sent, 10 * SEG, "the window opened after 2 s without data: the restart window");
    assert_eq!(s.conn.stats().idle_restarts, 1);
}
