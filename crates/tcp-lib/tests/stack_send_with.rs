//! `Stack::send_with`: the application writes its bytes straight into the send buffer (the ring
//! that is also the retransmit queue). Byte-exact across the ring's wrap-around, with partial and
//! empty writes, through a loss; the errors of a full, shut-down, closed and reset stream.

mod common;

use common::{Net, Rng};
use tcp_lib::stack::{Error, StreamId};
use tcp_lib::tcp::ConnectionError;

/// Reads everything `b` has for `s` into `out`.
fn drain(net: &mut Net, s: StreamId, out: &mut Vec<u8>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = net.b.recv(s, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn bytes_written_in_place_arrive_byte_exact_across_the_wrap() {
    // A 3000-byte send ring: 200 kB go round it about 70 times.
    let mut net = Net::with(|c| c.tcp.send_buffer = 3000, |_| {});
    let (c, s) = net.open(80);
    let mut rng = Rng(7);
    let data = rng.bytes(200_000);
    let (mut sent, mut got) = (0, Vec::new());
    let (mut calls, mut wrapped, mut partial) = (0, 0, 0);
    for _ in 0..20_000 {
        if sent < data.len() {
            // Offer up to `max`, write a random part of each slice (a short write ends the call).
            let max = 1 + rng.below(2500);
            let mut in_call = 0;
            let r = net.a.send_with(c, max, |free| {
                in_call += 1;
                assert!(!free.is_empty() && free.len() <= max, "a slice of at most max bytes");
                let want = if rng.below(4) == 0 { rng.below(free.len() + 1) } else { free.len() };
                let k = want.min(data.len() - sent);
                free[..k].copy_from_slice(&data[sent..sent + k]);
                sent += k;
                k
            });
            match r {
                Ok(n) => {
                    calls += 1;
                    wrapped += usize::from(in_call == 2);
                    partial += usize::from(n < max);
                    assert!(n <= max);
                }
                Err(Error::WouldBlock) => assert_eq!(in_call, 0, "write is not called on a full buffer"),
                Err(e) => panic!("send_with: {e}"),
            }
        }
        net.step();
        drain(&mut net, s, &mut got);
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got.len(), data.len());
    assert!(got == data, "byte-exact");
    assert!(wrapped > 10, "the free space wrapped ({wrapped} of {calls} calls)");
    assert!(partial > 10, "partial writes were committed ({partial})");
    assert!(net.run_until(100, |n| n.a.queues(c).unwrap().1 == 0), "everything acknowledged");
}

#[test]
fn written_in_place_bytes_are_retransmitted_from_the_ring() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    let data = Rng(3).bytes(5000);
    let n = net
        .a
        .send_with(c, usize::MAX, |free| {
            free[..data.len()].copy_from_slice(&data);
            data.len()
        })
        .unwrap();
    assert_eq!(n, data.len());
    // The first flight is lost: what arrives later was read from the ring again.
    let lost = net.frames_from_a();
    assert!(lost.len() >= 2, "the first flight left in {} frames", lost.len());
    let mut got = Vec::new();
    assert!(net.run_until(5000, |n| {
        drain(n, s, &mut got);
        got.len() == data.len()
    }));
    assert!(got == data);
    assert!(net.a.connection_stats(c).unwrap().retransmits > 0);
}

#[test]
fn empty_writes_queue_nothing() {
    let mut net = Net::new();
    let (c, _s) = net.open(80);
    assert_eq!(net.a.send_with(c, 0, |_| panic!("not called for max 0")), Ok(0));
    let mut offered = 0;
    let r = net.a.send_with(c, 100, |free| {
        offered = free.len();
        0
    });
    assert_eq!((r, offered), (Ok(0), 100));
    // A write that claims more than its slice counts as the slice.
    assert_eq!(net.a.send_with(c, 10, |_| 1000), Ok(10));
    assert_eq!(net.a.queues(c).unwrap().1, 10);
}

#[test]
fn full_shut_closed_and_reset_streams_refuse_in_place_writes() {
    let mut net = Net::with(|c| c.tcp.send_buffer = 1000, |_| {});
    let (c, s) = net.open(80);
    assert_eq!(
        net.a.send_with(c, usize::MAX, |free| {
            free.fill(1);
            free.len()
        }),
        Ok(1000)
    );
    assert_eq!(net.a.send_with(c, 1, |_| panic!("full")), Err(Error::WouldBlock));
    net.a.shutdown_write(c).unwrap();
    assert_eq!(net.a.send_with(c, 1, |_| panic!("shut")), Err(Error::WriteClosed));
    // The other way: B's stream, reset by A's abort.
    assert_eq!(net.b.send_with(s, 4, |_| 4), Ok(4));
    net.a.abort(c).unwrap();
    assert_eq!(net.a.send_with(c, 1, |_| panic!("released")), Err(Error::InvalidHandle));
    assert!(net.run_until(100, |n| n.b.error(s).unwrap().is_some()));
    assert_eq!(net.b.send_with(s, 1, |_| panic!("reset")), Err(Error::Connection(ConnectionError::Reset)));
}
