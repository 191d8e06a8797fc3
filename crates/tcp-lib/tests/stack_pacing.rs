//! Pacing (`tcp::Config::pacing`) through the stack: a paced sender capped at a rate spreads a
//! bulk transfer over the time that rate takes instead of sending bursts, the stack's
//! `poll_timeout` wakes it for each departure, and every byte arrives.

mod common;

use std::time::Duration;

use common::{Net, Rng};
use netchannel::dev::NetDevice;
use tcp_lib::stack::Error;
use tcp_lib::tcp::Pacing;

const LEN: usize = 60_000;
/// 200 kB/s: the 60 000 bytes take about 250 ms after the ten unpaced segments.
const RATE: u64 = 200_000;

/// Sends `LEN` bytes from A to B on virtual time driven by the stacks alone: at each instant both
/// are polled until no frame moves, then the clock jumps to the earlier of their `poll_timeout`s
/// (a pacing deadline the stack did not report would stall the transfer until an RTO). Returns
/// how long the transfer took (to the last byte's arrival), A's paced transmissions, and the most
/// frames A sent at one instant. `gso`: A cuts super-segments in software.
fn transfer(pacing: Option<Pacing>, gso: bool) -> (Duration, u64, u64) {
    let mut net = Net::with(
        |a| {
            a.tcp.pacing = pacing;
            a.gso_max_size = if gso { 65_535 } else { 0 };
        },
        |_| {},
    );
    let (c, s) = net.open(80);
    let data = Rng(7).bytes(LEN);
    let start = net.now;
    let (mut sent, mut got, mut burst) = (0, Vec::new(), 0);
    let mut buf = vec![0u8; 65_536];
    while got.len() < LEN {
        assert!(net.now - start < Duration::from_secs(10), "the transfer stalled at {} bytes", got.len());
        let at_start = net.dev_a.stats().tx_packets;
        loop {
            let moved = (net.dev_a.stats().tx_packets, net.dev_b.stats().tx_packets);
            sent += would_block_is_zero(net.a.send(c, &data[sent..]));
            net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
            net.b.poll(net.now, &mut net.dev_b, &net.cache).unwrap();
            let n = would_block_is_zero(net.b.recv(s, &mut buf));
            got.extend_from_slice(&buf[..n]);
            if n == 0 && moved == (net.dev_a.stats().tx_packets, net.dev_b.stats().tx_packets) {
                break;
            }
        }
        burst = burst.max(net.dev_a.stats().tx_packets - at_start);
        if got.len() == LEN {
            break; // the time of the last byte's arrival, not of the next timer after it
        }
        let next = [net.a.poll_timeout(), net.b.poll_timeout()].into_iter().flatten().min();
        net.now = next.expect("a timer while data is outstanding").max(net.now + Duration::from_micros(1));
    }
    assert_eq!(got, data, "every byte arrives, in order");
    let took = net.now.saturating_duration_since(start);
    (took, net.a.connection_stats(c).unwrap().paced, burst)
}

fn would_block_is_zero(r: Result<usize, Error>) -> usize {
    match r {
        Ok(n) => n,
        Err(Error::WouldBlock) => 0,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_paced_sender_spreads_a_transfer_at_its_rate() {
    // Segment by segment (software GSO off): each segment waits for its own departure time.
    let (took, paced, paced_burst) = transfer(Some(Pacing { max_rate: Some(RATE), ..Pacing::LINUX }), false);
    // The ten unpaced segments, then (60 000 - 14 600) bytes at 200 kB/s: 227 ms at least.
    assert!(took >= Duration::from_millis(220), "{took:?}");
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert!(paced > 20, "{paced} transmissions waited for their departure time");
    assert!(paced_burst <= 10, "at most the ten unpaced segments at one instant, not {paced_burst}");

    // Unpaced, the windows alone: bursts of what each ACK opens.
    let (_, paced, burst) = transfer(None, false);
    assert_eq!(paced, 0);
    assert!(burst > 2 * paced_burst, "{burst} frames at one instant unpaced, {paced_burst} paced");
}

#[test]
fn a_paced_sender_with_software_gso_paces_its_super_segments() {
    // As Linux paces a GSO packet: the super-segment leaves whole at its departure time and the
    // next one's departure is set by its length, so the last one's bytes are not waited for.
    // At least the 60 000 bytes less the ten unpaced segments and one initial window's worth
    // (14 600) that may leave whole at the end, at 200 kB/s: 154 ms.
    let (took, paced, paced_burst) = transfer(Some(Pacing { max_rate: Some(RATE), ..Pacing::LINUX }), true);
    assert!(took >= Duration::from_millis(150), "{took:?}");
    assert!(took < Duration::from_millis(500), "{took:?}");
    // Whole windows per super-segment on this link without delay (as Linux's
    // `tcp_tso_autosize` allows below 512 µs of RTT): 188 ms in 4 paced departures when written
    // (264 ms in 32 segment by segment).
    assert!(paced >= 3, "{paced} transmissions waited for their departure time");
    let (unpaced_took, _, burst) = transfer(None, true);
    assert!(unpaced_took < took / 4, "unpaced {unpaced_took:?}, paced {took:?}");
    assert!(burst > paced_burst, "{burst} frames at one instant unpaced, {paced_burst} paced");
}
