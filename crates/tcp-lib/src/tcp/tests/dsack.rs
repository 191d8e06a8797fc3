//! D-SACK (RFC 2883) on one connection: as the receiver, the ACK that answers data received
//! before names it once in its first SACK block ([`Config::dsack`]); as the sender, a D-SACK is
//! counted, is not a duplicate ACK, and widens RACK's reordering window (RFC 8985 §6.2 step 4).

use std::time::Duration;

use super::{LOCAL_SEQ, REMOTE_SEQ, SEND_TEMPL, Script, script_config};
use crate::tcp::{Config, State, TcpControl};
use crate::wire::tcp::{SackBlock, SackBlocks};
use crate::wire::{SeqNumber, TcpRepr};

const MS: Duration = Duration::from_millis(1);
const MSS: usize = 1000;

fn peer(n: usize) -> SeqNumber {
    REMOTE_SEQ + 1 + n
}

fn ours(n: usize) -> SeqNumber {
    LOCAL_SEQ + 1 + n
}

fn blocks(b: &[(SeqNumber, SeqNumber)]) -> SackBlocks {
    let v: Vec<_> = b.iter().map(|&(left, right)| SackBlock { left, right }).collect();
    SackBlocks::from_slice(&v).expect("at most four")
}

/// Established as a receiver with SACK (and `dsack` as given), 4 KiB of receive buffer,
/// immediate ACKs.
fn receiver(dsack: bool) -> Script {
    let config = Config { sack: true, dsack, recv_buffer: 4096, ..script_config() };
    let syn = TcpRepr {
        control: TcpControl::Syn,
        seq_number: REMOTE_SEQ,
        ack_number: None,
        max_seg_size: Some(1460),
        sack_permitted: true,
        ..SEND_TEMPL
    };
    let mut s = Script::accept_with(config, syn);
    assert_eq!(s.drain().len(), 1, "the SYN-ACK");
    s.send(&SEND_TEMPL);
    assert_eq!(s.conn.state(), State::Established);
    s
}

/// `len` bytes from the peer at offset `at` of its data.
fn data(at: usize, len: usize) -> TcpRepr<'static> {
    static BYTES: [u8; 256] = [5; 256];
    TcpRepr { seq_number: peer(at), payload: &BYTES[..len], ..SEND_TEMPL }
}

/// The one ACK the connection sends now: its acknowledgment number and SACK blocks.
fn one_ack(s: &mut Script) -> (SeqNumber, SackBlocks) {
    let out = s.drain();
    assert_eq!(out.len(), 1, "{out:?}");
    (out[0].repr.ack_number.expect("an ACK"), out[0].repr.sack_blocks)
}

/// Data received in order, then again: the ACK names it below the cumulative ACK, once; a
/// segment whose head was received names the head.
#[test]
fn data_received_before_is_named_once() {
    let mut s = receiver(true);
    s.send(&data(0, 100));
    assert_eq!(one_ack(&mut s), (peer(100), SackBlocks::new()));
    s.send(&data(0, 100));
    assert_eq!(one_ack(&mut s), (peer(100), blocks(&[(peer(0), peer(100))])), "all of it again");
    assert_eq!(s.conn.stats().dsacks_sent, 1);
    s.send(&data(100, 50));
    assert_eq!(one_ack(&mut s), (peer(150), SackBlocks::new()), "named once");
    s.send(&data(120, 80));
    assert_eq!(one_ack(&mut s), (peer(200), blocks(&[(peer(120), peer(150))])), "its first 30 bytes again");
    assert_eq!(s.conn.stats().dsacks_sent, 2);
    assert_eq!(s.conn.recv_queue(), 200, "the new bytes are taken, each once");
}

/// A SYN carrying data, received again once the connection is established: the D-SACK names
/// its data, which follows the SYN's sequence number, and not the SYN (the fuzz target
/// `tcp_segments` found the first version naming the SYN's number as data).
#[test]
fn a_duplicate_syns_data_is_named_without_the_syn() {
    let mut s = receiver(true);
    s.send(&data(0, 100));
    s.drain();
    let syn = TcpRepr { control: TcpControl::Syn, seq_number: REMOTE_SEQ, ..data(0, 10) };
    s.send(&syn);
    assert_eq!(one_ack(&mut s), (peer(100), blocks(&[(peer(0), peer(10))])));
}

/// Data held out of order, received again: the D-SACK block names the bytes received twice,
/// the block that holds them follows, then the other blocks (RFC 2883 §4.1.3).
#[test]
fn data_held_out_of_order_is_named_before_its_block() {
    let mut s = receiver(true);
    s.send(&data(100, 100));
    assert_eq!(one_ack(&mut s), (peer(0), blocks(&[(peer(100), peer(200))])));
    s.send(&data(300, 100));
    assert_eq!(one_ack(&mut s), (peer(0), blocks(&[(peer(300), peer(400)), (peer(100), peer(200))])));
    // 50..150: the first 50 bytes are new, the last 50 were held.
    s.send(&data(50, 100));
    let held = blocks(&[(peer(100), peer(150)), (peer(50), peer(200)), (peer(300), peer(400))]);
    assert_eq!(one_ack(&mut s), (peer(0), held));
    s.send(&data(0, 50));
    assert_eq!(one_ack(&mut s), (peer(200), blocks(&[(peer(300), peer(400))])), "the hole filled");
    assert_eq!(s.conn.stats().dsacks_sent, 1);
}

/// With [`Config::dsack`] off, or without SACK, a duplicate draws a plain ACK.
#[test]
fn no_dsack_when_off_or_without_sack() {
    let mut s = receiver(false);
    s.send(&data(0, 100));
    s.drain();
    s.send(&data(0, 100));
    assert_eq!(one_ack(&mut s), (peer(100), SackBlocks::new()));
    let mut s = Script::established();
    assert!(!s.conn.sack_permitted());
    s.send(&data(0, 10));
    s.drain();
    s.send(&data(0, 10));
    assert_eq!(one_ack(&mut s), (peer(10), SackBlocks::new()));
    assert_eq!(s.conn.stats().dsacks_sent, 0);
}

/// Established as a sender with SACK and RACK, an MSS of 1000 and a 100 ms RTT measured in
/// the handshake, ten segments sent at once (`rack.rs`'s).
fn ten_in_flight() -> Script {
    super::rack::ten_in_flight_with(Config { rack: true, ..script_config() })
}

/// An ACK of `acked` bytes SACKing `b`.
fn ack_with(acked: usize, b: &[(usize, usize)]) -> TcpRepr<'static> {
    let v: Vec<_> = b.iter().map(|&(l, r)| (ours(l), ours(r))).collect();
    TcpRepr { ack_number: Some(ours(acked)), window_len: 60_000, sack_blocks: blocks(&v), ..SEND_TEMPL }
}

/// The flight's first two segments are acknowledged an RTT after it left and the eighth is
/// SACKed, with a D-SACK of the first (`dsack`) or without; returns when RACK deems the five
/// between lost (the reordering timer's first retransmission), after the SACK.
fn loss_after_sack(dsack: bool) -> Duration {
    let mut s = ten_in_flight();
    s.advance(100 * MS);
    s.send(&ack_with(2 * MSS, &[]));
    s.drain();
    let b: &[(usize, usize)] = if dsack { &[(0, MSS), (7 * MSS, 8 * MSS)] } else { &[(7 * MSS, 8 * MSS)] };
    s.send(&ack_with(2 * MSS, b));
    assert_eq!(s.conn.stats().dsacks_received, u64::from(dsack));
    let start = s.now;
    for _ in 0..100 {
        s.advance(MS);
        if s.drain().iter().any(|o| !o.payload.is_empty()) {
            return s.now - start;
        }
    }
    panic!("nothing resent in 100 ms");
}

/// A D-SACK says a retransmission was spurious, so RACK waits longer before it deems a
/// segment lost: a quarter of the minimum RTT more (25 → 50 ms here), for the next 16
/// recoveries (RFC 8985 §6.2 step 4).
#[test]
fn a_dsack_widens_racks_reordering_window() {
    assert_eq!(loss_after_sack(false), 25 * MS);
    assert_eq!(loss_after_sack(true), 50 * MS);
}

/// An ACK whose only SACK news is a D-SACK is not a duplicate ACK (RFC 6675 §2): three of them
/// (a path that duplicates segments) start no recovery, where three plain duplicate ACKs do.
#[test]
fn dsacks_alone_are_not_duplicate_acks() {
    for dsack in [false, true] {
        let mut s = ten_in_flight();
        s.advance(100 * MS);
        s.send(&ack_with(2 * MSS, &[]));
        s.drain();
        let b: &[(usize, usize)] = if dsack { &[(MSS, 2 * MSS)] } else { &[] };
        for _ in 0..3 {
            s.send(&ack_with(2 * MSS, b));
        }
        let st = s.conn.stats();
        assert_eq!((st.dup_acks, st.in_recovery), if dsack { (0, false) } else { (3, true) }, "{st:?}");
        assert_eq!(st.dsacks_received, if dsack { 3 } else { 0 });
    }
}

/// Ten in flight without RACK, undo on; the first segment acknowledged, then the second
/// deemed lost by three SACKs (of the third to fifth) and resent in fast recovery. Returns the
/// script and the window before the reduction.
fn spurious_recovery() -> (Script, usize) {
    let mut s = super::rack::ten_in_flight_with(Config { dsack_undo: true, ..script_config() });
    s.advance(100 * MS);
    s.send(&ack_with(MSS, &[]));
    s.drain();
    let before = s.conn.stats().cwnd;
    for sacked in [3, 4, 5] {
        s.send(&ack_with(MSS, &[(2 * MSS, sacked * MSS)]));
    }
    let resent: Vec<_> = s.drain().into_iter().filter(|o| !o.payload.is_empty()).collect();
    assert_eq!(resent.len(), 1, "{resent:?}");
    assert_eq!(resent[0].repr.seq_number, ours(MSS), "the second segment again");
    let st = s.conn.stats();
    assert!(st.in_recovery && st.cwnd < before, "{st:?}");
    (s, before)
}

/// The original of the resent segment was only late: everything is acknowledged, then the
/// peer's D-SACK names the retransmission. The reduction is undone: the window and the
/// slow-start threshold are back (RFC 3708's detection, Linux's `TCPDSACKUndo`).
#[test]
fn a_reduction_whose_retransmissions_were_all_duplicates_is_undone() {
    let (mut s, before) = spurious_recovery();
    s.send(&ack_with(10 * MSS, &[]));
    let st = s.conn.stats();
    assert!(!st.in_recovery && st.cwnd < before, "the recovery ends, the window reduced: {st:?}");
    s.send(&ack_with(10 * MSS, &[(MSS, 2 * MSS)]));
    let st = s.conn.stats();
    assert_eq!(st.dsack_undos, 1);
    assert_eq!((st.cwnd, st.ssthresh), (before, usize::MAX), "back in slow start, as before the loss");
}

/// A D-SACK that arrives while the recovery is under way (a partial ACK) proves it spurious, and
/// the undo comes when the recovery ends: PRR had brought the flight down meanwhile.
#[test]
fn a_reduction_proven_spurious_in_recovery_is_undone_at_its_end() {
    let (mut s, before) = spurious_recovery();
    s.send(&ack_with(5 * MSS, &[(MSS, 2 * MSS)]));
    let st = s.conn.stats();
    assert!(st.in_recovery && st.dsack_undos == 0, "{st:?}");
    s.send(&ack_with(10 * MSS, &[]));
    let st = s.conn.stats();
    assert_eq!((st.dsack_undos, st.cwnd, st.in_recovery), (1, before, false), "{st:?}");
}

/// A D-SACK of data that was never retransmitted (the network duplicated it) proves nothing;
/// nor does any D-SACK without [`Config::dsack_undo`].
#[test]
fn a_dsack_of_other_data_or_without_the_knob_undoes_nothing() {
    let (mut s, _) = spurious_recovery();
    s.send(&ack_with(10 * MSS, &[]));
    let reduced = s.conn.stats().cwnd;
    s.send(&ack_with(10 * MSS, &[(3 * MSS, 4 * MSS)]));
    let st = s.conn.stats();
    assert_eq!((st.dsacks_received, st.dsack_undos, st.cwnd), (1, 0, reduced));

    let mut s = super::rack::ten_in_flight_with(script_config());
    s.advance(100 * MS);
    s.send(&ack_with(MSS, &[]));
    for sacked in [3, 4, 5] {
        s.send(&ack_with(MSS, &[(2 * MSS, sacked * MSS)]));
    }
    s.drain();
    s.send(&ack_with(10 * MSS, &[]));
    let reduced = s.conn.stats().cwnd;
    s.send(&ack_with(10 * MSS, &[(MSS, 2 * MSS)]));
    let st = s.conn.stats();
    assert_eq!((st.dsacks_received, st.dsack_undos, st.cwnd), (1, 0, reduced));
}
