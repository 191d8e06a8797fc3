//! The knobs a Linux-like configuration sets, each against the default that leaves it off:
//! the announced window scale ([`Config::rcv_wscale`]), the initial window
//! ([`Config::initial_window`], RFC 6928), quick ACKs at the start of a connection
//! ([`Config::quick_acks`]), and PSH on resent segments.

use std::time::Duration;

use super::{LOCAL_SEQ, REMOTE_SEQ, SEND_TEMPL, Script, script_config, syn_from_peer};
use crate::tcp::{Config, State};
use crate::wire::{SeqNumber, TcpRepr};

/// A passive open under `config`, completed: the SYN-ACK and the handshake's ACK consumed.
fn established(config: Config) -> Script {
    let mut s = Script::accept_with(config, syn_from_peer());
    let synack = s.drain();
    assert_eq!(synack.len(), 1);
    s.send(&TcpRepr { ack_number: Some(LOCAL_SEQ + 1), window_len: 60_000, ..SEND_TEMPL });
    assert_eq!(s.conn.state(), State::Established);
    s.drain();
    s
}

#[test]
fn rcv_wscale_sets_the_announced_shift() {
    let syn = TcpRepr { window_scale: Some(7), ..syn_from_peer() };
    let config = Config { window_scaling: true, recv_buffer: 540_000, ..script_config() };
    let mut s = Script::accept_with(config, syn);
    assert_eq!(s.drain()[0].repr.window_scale, Some(4), "the smallest shift for 540 000 bytes");
    let mut s = Script::accept_with(Config { rcv_wscale: Some(8), ..config }, syn);
    assert_eq!(s.drain()[0].repr.window_scale, Some(8), "the configured shift");
    let mut s = Script::accept_with(Config { rcv_wscale: Some(20), ..config }, syn);
    assert_eq!(s.drain()[0].repr.window_scale, Some(14), "clamped to RFC 7323's 14");
}

/// Segments of new data the connection sends at once after the application queues plenty.
fn first_flight(config: Config) -> usize {
    let mut s = established(Config { send_buffer: 100_000, ..config });
    assert_eq!(s.conn.send(&[7; 50_000]), 50_000);
    s.drain().iter().filter(|t| !t.payload.is_empty()).count()
}

#[test]
fn initial_window_sets_the_first_flight() {
    // The peer's MSS is 1460: RFC 5681 allows three segments, RFC 6928 ten.
    assert_eq!(first_flight(script_config()), 3);
    assert_eq!(first_flight(Config { initial_window: Some(10), ..script_config() }), 10);
    // A window of none would never send (the fuzzer found a FIN-WAIT-1 that never ended): one.
    assert_eq!(first_flight(Config { initial_window: Some(0), ..script_config() }), 1);
}

/// How many of `n` one-byte data segments, 1 ms apart, were acknowledged at once.
fn acked_at_once(config: Config, n: usize) -> usize {
    let mut s =
        established(Config { delayed_ack: Some(Duration::from_millis(40)), recv_buffer: 64_000, ..config });
    let mut at_once = 0;
    for i in 0..n {
        let seq = REMOTE_SEQ + 1 + i;
        s.send(&TcpRepr { seq_number: seq, ack_number: Some(LOCAL_SEQ + 1), payload: b"x", ..SEND_TEMPL });
        if !s.drain().is_empty() {
            at_once += 1;
        }
        s.advance(Duration::from_millis(1));
        // Whatever the delayed-ACK timer sends is not "at once".
        s.drain();
    }
    at_once
}

#[test]
fn quick_acks_acknowledge_the_first_segments_at_once() {
    // Delayed ACKs alone: one-byte segments never add up to the two full segments that force an
    // ACK, so each waits for the timer.
    assert_eq!(acked_at_once(script_config(), 20), 0);
    // Quick ACKs: the first 16, then delayed again.
    assert_eq!(acked_at_once(Config { quick_acks: 16, ..script_config() }, 20), 16);
    assert_eq!(acked_at_once(Config { quick_acks: 4, ..script_config() }, 20), 4);
}

#[test]
fn quick_acks_return_after_an_idle_period() {
    let config = Config { quick_acks: 2, delayed_ack: Some(Duration::from_millis(40)), ..script_config() };
    let mut s = established(config);
    let mut at_once = Vec::new();
    for (i, gap) in [0, 1, 1, 1, 5000, 1, 1].into_iter().enumerate() {
        s.advance(Duration::from_millis(gap));
        s.drain();
        let seq = REMOTE_SEQ + 1 + i;
        s.send(&TcpRepr { seq_number: seq, ack_number: Some(LOCAL_SEQ + 1), payload: b"x", ..SEND_TEMPL });
        at_once.push(!s.drain().is_empty());
        s.advance(Duration::from_millis(50));
        s.drain();
    }
    // Two quick ACKs, delayed ones, then after 5 s of silence (more than the RTO) two more.
    assert_eq!(at_once, [true, true, false, false, true, true, false]);
}

#[test]
fn a_resent_segment_carries_psh_only_when_it_ends_the_written_data() {
    let mut s = established(Config { send_buffer: 10_000, initial_window: Some(10), ..script_config() });
    assert_eq!(s.conn.send(&[1; 3 * 1460]), 3 * 1460);
    let first: Vec<_> = s.drain().into_iter().filter(|t| !t.payload.is_empty()).collect();
    assert_eq!(first.iter().map(|t| t.repr.push).collect::<Vec<_>>(), [false, false, true]);
    // The retransmission timer resends the first segment (not the end of the data): no PSH.
    s.advance(Duration::from_millis(1100));
    let resent: Vec<_> = s.drain().into_iter().filter(|t| !t.payload.is_empty()).collect();
    assert_eq!(resent[0].repr.seq_number, LOCAL_SEQ + 1);
    assert!(!resent[0].repr.push, "{:?}", resent[0].repr);
    // The peer acknowledges the first two segments; the third, resent, ends the data: PSH.
    let acked = LOCAL_SEQ + 1 + 2 * first[0].payload.len();
    s.send(&TcpRepr { ack_number: Some(acked), window_len: 60_000, ..SEND_TEMPL });
    s.drain();
    s.advance(Duration::from_secs(3));
    let resent: Vec<_> = s.drain().into_iter().filter(|t| !t.payload.is_empty()).collect();
    assert_eq!(resent[0].repr.seq_number, acked);
    assert!(resent[0].repr.push, "{:?}", resent[0].repr);
}

#[test]
fn the_last_segment_of_a_burst_carries_psh() {
    // Ten segments' worth of window for far more data: only the tenth, where the burst ends,
    // carries PSH (the receiver delivers there), though it does not empty the send buffer.
    let mut s = established(Config { send_buffer: 100_000, initial_window: Some(10), ..script_config() });
    assert_eq!(s.conn.send(&[3; 50_000]), 50_000);
    let flight: Vec<_> = s.drain().into_iter().filter(|t| !t.payload.is_empty()).collect();
    assert_eq!(flight.len(), 10);
    let push: Vec<bool> = flight.iter().map(|t| t.repr.push).collect();
    assert_eq!(push, [false, false, false, false, false, false, false, false, false, true]);
}

/// The congestion window after the peer acknowledges the first two segments of a ten-segment
/// flight with one ACK.
fn cwnd_after_one_ack_of_two(config: Config) -> usize {
    let mut s = established(Config { send_buffer: 100_000, initial_window: Some(10), ..config });
    assert_eq!(s.conn.send(&[3; 50_000]), 50_000);
    let flight: Vec<_> = s.drain().into_iter().filter(|t| !t.payload.is_empty()).collect();
    let before = s.conn.stats().cwnd;
    let acked = LOCAL_SEQ + 1 + 2 * flight[0].payload.len();
    s.send(&TcpRepr { ack_number: Some(acked), window_len: 60_000, ..SEND_TEMPL });
    s.conn.stats().cwnd - before
}

#[test]
fn slow_start_grows_by_one_smss_per_ack_unless_configured() {
    let mss = 1460;
    assert_eq!(cwnd_after_one_ack_of_two(script_config()), mss, "RFC 5681 §3.1");
    let linux = Config { slow_start_segments_per_ack: 64, ..script_config() };
    assert_eq!(cwnd_after_one_ack_of_two(linux), 2 * mss, "every segment the ACK covers");
}

#[test]
fn segments_sacked_before_the_cumulative_ack_do_not_grow_the_window_twice() {
    let config = Config {
        sack: true,
        send_buffer: 100_000,
        initial_window: Some(10),
        slow_start_segments_per_ack: 64,
        ..script_config()
    };
    let mut s = established_with_sack(config);
    assert_eq!(s.conn.send(&[3; 50_000]), 50_000);
    let flight: Vec<_> = s.drain().into_iter().filter(|t| !t.payload.is_empty()).collect();
    let seg = flight[0].payload.len();
    let start = LOCAL_SEQ + 1;
    // The first segment is late: two duplicate ACKs SACK the second and third (limited transmit,
    // no growth), then the first arrives and one ACK covers all three.
    let mut blocks = crate::wire::tcp::SackBlocks::new();
    blocks.push(crate::wire::tcp::SackBlock { left: start + seg, right: start + 2 * seg });
    s.send(&TcpRepr { sack_blocks: blocks, window_len: 60_000, ..SEND_TEMPL });
    let mut blocks = crate::wire::tcp::SackBlocks::new();
    blocks.push(crate::wire::tcp::SackBlock { left: start + seg, right: start + 3 * seg });
    s.send(&TcpRepr { sack_blocks: blocks, window_len: 60_000, ..SEND_TEMPL });
    s.drain();
    let before = s.conn.stats().cwnd;
    s.send(&TcpRepr { ack_number: Some(start + 3 * seg), window_len: 60_000, ..SEND_TEMPL });
    // Only the first segment is newly delivered: one segment of growth, not three.
    assert_eq!(s.conn.stats().cwnd - before, s.conn.send_mss());
}

/// A passive open with SACK permitted on both sides.
fn established_with_sack(config: Config) -> Script {
    let syn = TcpRepr { sack_permitted: true, ..syn_from_peer() };
    let mut s = Script::accept_with(config, syn);
    assert_eq!(s.drain().len(), 1);
    s.send(&TcpRepr { ack_number: Some(LOCAL_SEQ + 1), window_len: 60_000, ..SEND_TEMPL });
    assert_eq!(s.conn.state(), State::Established);
    s.drain();
    s
}

/// The congestion window after the application sends `segments` full segments (all that it
/// has) and the peer acknowledges two of them.
fn cwnd_growth_when_sending(segments: usize, validation: bool) -> usize {
    let config = Config {
        send_buffer: 100_000,
        initial_window: Some(10),
        slow_start_segments_per_ack: 64,
        cwnd_validation: validation,
        ..script_config()
    };
    let mut s = established(config);
    assert_eq!(s.conn.send(&vec![3; segments * 1460]), segments * 1460);
    let flight: Vec<_> = s.drain().into_iter().filter(|t| !t.payload.is_empty()).collect();
    assert_eq!(flight.len(), segments);
    let before = s.conn.stats().cwnd;
    let acked = LOCAL_SEQ + 1 + 2 * flight[0].payload.len();
    s.send(&TcpRepr { ack_number: Some(acked), window_len: 60_000, ..SEND_TEMPL });
    (s.conn.stats().cwnd - before) / s.conn.send_mss().max(1)
}

#[test]
fn cwnd_validation_keeps_an_application_limited_window_from_growing() {
    // Without validation every ACK in slow start grows the window.
    assert_eq!(cwnd_growth_when_sending(5, false), 2);
    // With it (RFC 7661 §4.3, as Linux): four segments in a window of ten is not using it in
    // slow start (the flight must reach half of it), six is.
    assert_eq!(cwnd_growth_when_sending(4, true), 0);
    assert_eq!(cwnd_growth_when_sending(6, true), 2);
}

#[test]
fn an_abort_resets_with_the_ack_and_our_timestamps() {
    use crate::wire::TcpControl;
    use crate::wire::tcp::Timestamp;
    let syn = TcpRepr { timestamp: Some(Timestamp { tsval: 100, tsecr: 0 }), ..syn_from_peer() };
    let mut s = Script::accept_with(Config { timestamps: true, ..script_config() }, syn);
    let synack = s.drain();
    let ours = synack[0].repr.timestamp.expect("timestamps negotiated").tsval;
    let ack = TcpRepr {
        ack_number: Some(LOCAL_SEQ + 1),
        timestamp: Some(Timestamp { tsval: 200, tsecr: ours }),
        ..SEND_TEMPL
    };
    s.send(&ack);
    assert_eq!(s.conn.state(), State::Established);
    s.drain();
    s.conn.abort();
    let rst = s.drain();
    assert_eq!(rst.len(), 1);
    let r = rst[0].repr;
    assert_eq!(
        (r.control, r.seq_number, r.ack_number),
        (TcpControl::Rst, LOCAL_SEQ + 1, Some(REMOTE_SEQ + 1))
    );
    let ts = r.timestamp.expect("RFC 7323 §3.2: a reset SHOULD carry timestamps");
    assert_eq!(ts.tsecr, 200, "echoes TS.Recent");
}

#[test]
fn a_tail_loss_probe_resends_the_last_segment_before_the_rto() {
    let probe = |tlp: bool| {
        let config = Config {
            send_buffer: 100_000,
            initial_window: Some(10),
            tail_loss_probe: tlp,
            ..script_config()
        };
        let mut s = established(config);
        assert_eq!(s.conn.send(&[5; 4 * 1460]), 4 * 1460);
        let flight: Vec<_> = s.drain().into_iter().filter(|t| !t.payload.is_empty()).collect();
        assert_eq!(flight.len(), 4);
        // No ACK comes. The handshake measured an RTT of about nothing: the probe is due after
        // 2 ms (two SRTTs and the timer slack), the RTO after 1 s.
        s.advance(Duration::from_millis(100));
        let sent: Vec<_> = s.drain().into_iter().filter(|t| !t.payload.is_empty()).collect();
        (flight[3].repr.seq_number, sent, s.conn.stats())
    };
    let (last, sent, stats) = probe(true);
    assert_eq!(sent.len(), 1, "one probe");
    assert_eq!(sent[0].repr.seq_number, last, "the last segment again");
    assert!(sent[0].repr.push, "it ends the written data");
    assert_eq!((stats.tail_loss_probes, stats.timeouts), (1, 0));
    let (_, sent, stats) = probe(false);
    assert!(sent.is_empty(), "without probes only the RTO resends");
    assert_eq!(stats.tail_loss_probes, 0);
}

/// A connection with tail loss probes and ten segments of initial window, `n` full segments
/// (1460 bytes) written and the first flight sent: its data segments.
fn probing(n: usize) -> (Script, Vec<SeqNumber>) {
    let config =
        Config { send_buffer: 100_000, initial_window: Some(10), tail_loss_probe: true, ..script_config() };
    let mut s = established(config);
    assert_eq!(s.conn.send(&vec![5; n * 1460]), n * 1460);
    let sent = s.drain().into_iter().filter(|t| !t.payload.is_empty()).map(|t| t.repr.seq_number).collect();
    (s, sent)
}

/// ACKs up to `ack` bytes of our data.
fn ack(s: &mut Script, ack: usize) {
    s.send(&TcpRepr { ack_number: Some(LOCAL_SEQ + 1 + ack), window_len: 60_000, ..SEND_TEMPL });
}

/// The data segments due after `d`.
fn after(s: &mut Script, d: Duration) -> Vec<SeqNumber> {
    s.advance(d);
    s.drain().into_iter().filter(|t| !t.payload.is_empty()).map(|t| t.repr.seq_number).collect()
}

/// RFC 8985 §7.4: a probe's episode ends with the ACK that covers it, and the next tail loss
/// gets a probe of its own. (Found against the kernel under loss: the episode never ended, so
/// after its first probe a connection waited for the RTO at every tail loss.)
#[test]
fn a_tail_loss_probe_episode_ends_with_the_ack_that_covers_it() {
    // Eleven segments under a window of ten: the probe is the eleventh, new data.
    let (mut s, flight) = probing(11);
    assert_eq!(flight.len(), 10);
    assert_eq!(after(&mut s, Duration::from_millis(100)), [LOCAL_SEQ + 1 + 10 * 1460], "new data");
    ack(&mut s, 11 * 1460);
    // Two more segments, neither acknowledged: a second probe, the last segment again.
    assert_eq!(s.conn.send(&[6; 2 * 1460]), 2 * 1460);
    assert_eq!(s.drain().len(), 2);
    assert_eq!(after(&mut s, Duration::from_millis(100)), [LOCAL_SEQ + 1 + 12 * 1460], "a second probe");
    let stats = s.conn.stats();
    assert_eq!((stats.tail_loss_probes, stats.tlp_recoveries, stats.timeouts), (2, 0, 0));
}

/// A probe that resent the last segment (RFC 8985 §7.4, Linux's `tcp_process_tlp_ack`): an ACK
/// past it says the probe repaired a loss, which reduces the window; a pure duplicate ACK at its
/// end says both copies arrived, which ends the episode without one.
#[test]
fn a_resent_probe_that_repaired_a_loss_reduces_the_window() {
    for both_arrived in [false, true] {
        let (mut s, flight) = probing(4);
        assert_eq!(after(&mut s, Duration::from_millis(100)), [flight[3]], "the last segment again");
        ack(&mut s, 4 * 1460);
        if both_arrived {
            ack(&mut s, 4 * 1460);
        }
        let cwnd = s.conn.stats().cwnd;
        assert_eq!(s.conn.send(&[6; 1460]), 1460);
        assert_eq!(s.drain().len(), 1);
        ack(&mut s, 5 * 1460);
        let stats = s.conn.stats();
        if both_arrived {
            assert_eq!(stats.tlp_recoveries, 0);
            assert!(stats.cwnd >= cwnd, "no reduction: {} -> {}", cwnd, stats.cwnd);
        } else {
            assert_eq!(stats.tlp_recoveries, 1);
            assert!(stats.cwnd < cwnd, "a reduction: {} -> {}", cwnd, stats.cwnd);
        }
        // Either way the episode is over: the next tail gets a probe.
        assert_eq!(s.conn.send(&[7; 1460]), 1460);
        assert_eq!(s.drain().len(), 1);
        assert_eq!(after(&mut s, Duration::from_millis(300)).len(), 1, "the next probe");
        assert_eq!(s.conn.stats().tail_loss_probes, 2);
    }
}

/// The first zero-window probe under `config`: 100 bytes sent and acknowledged with a zero
/// window, 100 more queued: its sequence number and payload length.
fn first_window_probe(config: Config) -> (SeqNumber, usize) {
    let mut s = established(Config { send_buffer: 1000, ..config });
    assert_eq!(s.conn.send(&[5; 100]), 100);
    assert_eq!(s.drain().len(), 1);
    s.send(&TcpRepr { ack_number: Some(LOCAL_SEQ + 101), window_len: 0, ..SEND_TEMPL });
    assert_eq!(s.conn.send(&[6; 100]), 100);
    assert!(s.drain().is_empty(), "the window is closed");
    s.advance(Duration::from_secs(2));
    let probes = s.drain();
    assert_eq!(probes.len(), 1, "{probes:?}");
    (probes[0].repr.seq_number, probes[0].payload.len())
}

#[test]
fn an_empty_window_probe_is_an_old_ack() {
    use crate::tcp::WindowProbe;
    // RFC 9293 §3.8.6.1: one byte past the window.
    assert_eq!(first_window_probe(script_config()), (LOCAL_SEQ + 101, 1));
    let byte = Config { window_probe: WindowProbe::Byte, ..script_config() };
    assert_eq!(first_window_probe(byte), (LOCAL_SEQ + 101, 1));
    // Linux: no data, at SND.UNA - 1.
    let empty = Config { window_probe: WindowProbe::Empty, ..script_config() };
    assert_eq!(first_window_probe(empty), (LOCAL_SEQ + 100, 0));
}
