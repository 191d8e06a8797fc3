//! Receive-buffer autotuning ([`Config::recv_buffer_max`]) over the virtual-time link: the
//! buffer grows with a reader that keeps up and the transfer finishes sooner, stays put with one
//! that does not, and the window scale covers the maximum.

use std::time::Duration;

use super::pair::{Faults, Pair, Transfer, pair_config, pattern, run_transfer};
use crate::tcp::Config;

/// A sender with 8 MiB to send whose slow start grows by what each ACK acknowledges (the link
/// delivers a whole flight at one instant, so the receiver acknowledges a flight at once).
fn bulk_sender() -> Config {
    Config {
        send_buffer: 8 << 20,
        initial_window: Some(10),
        slow_start_segments_per_ack: 64,
        ..pair_config()
    }
}

/// 8 MiB over a 40 ms round trip, the receiver starting at 64 KiB: `(virtual time, the
/// receiver's buffer at the end, its raises)`.
fn long_path_transfer(recv_buffer_max: usize) -> (Duration, usize, u64) {
    let faults = Faults { delay: Duration::from_millis(20), ..Faults::default() };
    let sender = bulk_sender();
    let receiver = Config { recv_buffer: 64 * 1024, recv_buffer_max, ..pair_config() };
    let mut t = Transfer::new(8 << 20, 0, vec![1 << 20], 1 << 20);
    let p = run_transfer(sender, receiver, faults, 7, &mut t, Duration::from_secs(600));
    let s = p.b.stats();
    (p.done_at, s.recv_buffer, s.recv_buffer_raises)
}

#[test]
fn a_reader_that_keeps_up_grows_the_buffer_and_the_transfer_finishes_sooner() {
    let (fixed, fixed_buffer, fixed_raises) = long_path_transfer(0);
    assert_eq!((fixed_buffer, fixed_raises), (64 * 1024, 0), "off: the buffer stays");
    let (tuned, buffer, raises) = long_path_transfer(4 << 20);
    eprintln!(
        "8 MiB, 40 ms RTT: fixed 64 KiB {fixed:?}; tuned {tuned:?}, {buffer} bytes after {raises} raises"
    );
    assert!((1 << 20..=4 << 20).contains(&buffer), "grown within the maximum: {buffer}");
    assert!(raises >= 3, "{raises}");
    // 64 KiB a round trip is 1.6 MB/s: about 5 s; the tuned window follows slow start.
    assert!(tuned * 4 < fixed, "tuned {tuned:?} against fixed {fixed:?}");
}

#[test]
fn a_reader_that_does_not_keep_up_keeps_the_buffer() {
    let faults = Faults { delay: Duration::from_millis(20), ..Faults::default() };
    let receiver = Config { recv_buffer: 64 * 1024, recv_buffer_max: 4 << 20, ..pair_config() };
    let sender = bulk_sender();
    let mut p = Pair::connect(sender, receiver, faults, 3);
    let data = pattern(4 << 20, 3);
    let (mut written, mut got) = (0, Vec::new());
    let mut buf = [0u8; 1000];
    // The reader takes 1,000 bytes every 10 ms of virtual time (100 kB/s): the sender fills
    // the window and waits for the reader, whose reading never grows.
    let mut next_read = p.elapsed();
    assert!(!p.run_until(
        |p| {
            written += p.a.send(&data[written..]);
            if p.elapsed() >= next_read {
                let n = p.b.recv(&mut buf);
                got.extend_from_slice(&buf[..n]);
                next_read = p.elapsed() + Duration::from_millis(10);
            }
            false
        },
        Duration::from_secs(20)
    ));
    let s = p.b.stats();
    assert!(got.len() > 100_000 && got[..] == data[..got.len()], "read {} bytes", got.len());
    assert!(s.recv_buffer < 256 * 1024, "a slow reader's buffer grew to {}", s.recv_buffer);
    assert!(p.b.recv_queue() <= s.recv_buffer);
}

#[test]
fn the_window_scale_covers_the_maximum() {
    let receiver = Config { recv_buffer: 64 * 1024, recv_buffer_max: 6 << 20, ..pair_config() };
    let p = Pair::connect(pair_config(), receiver, Faults::clean(), 1);
    // 6 MiB needs a shift of 7 (65,535 << 7 is just under 8 MiB); 64 KiB alone would need 1.
    assert_eq!(p.b.window_scale().map(|(ours, _)| ours), Some(7));
    let fixed =
        Pair::connect(pair_config(), Config { recv_buffer: 64 * 1024, ..pair_config() }, Faults::clean(), 1);
    assert_eq!(fixed.b.window_scale().map(|(ours, _)| ours), Some(1));
}
