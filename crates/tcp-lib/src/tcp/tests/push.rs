//! Where PSH goes ([`Config::push`]): tcp-lib's [`Push::Burst`] against Linux's TSO packets
//! ([`Push::Linux`]), on the first flight of a bulk write.

use std::time::Duration;

use super::*;
use crate::tcp::Push;

/// A passive open under `config` whose handshake took 100 ms (the smoothed RTT Linux sizes its
/// TSO packets by), then `len` bytes written: which of the data segments sent at once carry PSH
/// (1 for PSH), and their sizes.
fn first_flight(config: Config, len: usize) -> (Vec<u8>, Vec<usize>) {
    let config = Config { send_buffer: 100_000, nodelay: true, ..config };
    let mut s = Script::accept_with(config, syn_from_peer());
    assert_eq!(s.drain().len(), 1, "the SYN-ACK");
    s.advance(Duration::from_millis(100));
    send!(s, TcpRepr { ack_number: Some(LOCAL_SEQ + 1), window_len: 60_000, ..SEND_TEMPL });
    assert_eq!(s.conn.state(), State::Established);
    assert_eq!(s.conn.send(&vec![7; len]), len);
    let data: Vec<_> = s.drain().into_iter().filter(|t| !t.payload.is_empty()).collect();
    (data.iter().map(|t| u8::from(t.repr.push)).collect(), data.iter().map(|t| t.payload.len()).collect())
}

const LINUX: Push = Push::Linux { min_tso_segs: 2 };

#[test]
fn linux_marks_the_last_segment_of_each_tso_packet() {
    // Ten segments of cwnd, Linux's `tcp_min_tso_segs` of two: packets of two segments, each with
    // PSH on its second; the short rest ends the data. (Linux 6.18 sends a write of 8000 bytes
    // with an MSS of 974 so.)
    let config = Config { initial_window: Some(10), ..script_config() };
    let (push, sizes) = first_flight(Config { push: LINUX, ..config }, 8 * 1460 + 300);
    assert_eq!(sizes, [1460, 1460, 1460, 1460, 1460, 1460, 1460, 1460, 300]);
    assert_eq!(push, [0, 1, 0, 1, 0, 1, 0, 1, 1]);
    // tcp-lib's own rule: only the segment that empties the buffer.
    let (push, _) = first_flight(config, 8 * 1460 + 300);
    assert_eq!(push, [0, 0, 0, 0, 0, 0, 0, 0, 1]);
    // Five segments a packet (`tcp_min_tso_segs` = 10, cut to half the congestion window).
    let (push, _) = first_flight(Config { push: Push::Linux { min_tso_segs: 10 }, ..config }, 20_000);
    assert_eq!(push, [0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
}

#[test]
fn linux_leaves_a_single_segment_packet_unmarked() {
    // Three segments of cwnd: half of it is one segment a packet, and a packet of one segment
    // carries no PSH unless it ends the data; tcp-lib's rule marks the end of the burst.
    let config = Config { initial_window: Some(3), ..script_config() };
    let (push, sizes) = first_flight(Config { push: LINUX, ..config }, 10_000);
    assert_eq!(sizes, [1460; 3]);
    assert_eq!(push, [0, 0, 0]);
    let (push, _) = first_flight(config, 10_000);
    assert_eq!(push, [0, 0, 1]);
    // Seven segments of cwnd: packets of two, two, two, and one that the window cuts short.
    let config = Config { initial_window: Some(7), push: LINUX, ..script_config() };
    assert_eq!(first_flight(config, 20_000).0, [0, 1, 0, 1, 0, 1, 0]);
}
