//! Random segments and application calls against a connection in every state: nothing panics,
//! `poll_transmit` always stops, every segment it produces can be emitted and parsed back, and
//! the buffers stay within their bounds.

use std::time::Duration;

use proptest::prelude::*;

use super::scripted::{close_wait, closing, established_with, fin_wait_1, fin_wait_2, last_ack, time_wait};
use super::*;
use crate::wire::tcp::{SackBlock, SackBlocks, Timestamp};
use crate::wire::{ChecksumPolicy, TcpPacket};

#[derive(Debug, Clone)]
enum Op {
    Segment {
        seq: u32,
        ack: Option<u32>,
        control: u8,
        push: bool,
        window: u16,
        payload: usize,
        mss: Option<u16>,
        ws: Option<u8>,
        ts: Option<(u32, u32)>,
        sack: bool,
    },
    /// The segment header prediction expects: at RCV.NXT, acknowledging SND.UNA (or this far
    /// from it), with this much data, window and flags, and a timestamp this far from TS.Recent
    /// (when there is one).
    Expected {
        ack_delta: Option<i32>,
        payload: usize,
        window: u16,
        control: u8,
        ts_delta: Option<i16>,
        sack: bool,
    },
    Advance(u64),
    Send(usize),
    Recv(usize),
    Shutdown,
    Close,
    Abort,
}

/// Sequence numbers near the interesting points (the peer's and our ISS, where every state
/// built here keeps RCV.NXT and SND.UNA within a few bytes) or anywhere.
fn near(base: SeqNumber) -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => (-100i64..200).prop_map(move |d| (base + 1 + usize::try_from(d + 1000).unwrap() - 1000usize).get()),
        1 => (-70_000i64..70_000).prop_map(move |d| (base + usize::try_from(d + 100_000).unwrap() - 100_000usize).get()),
        1 => any::<u32>(),
    ]
}

/// Random operations; `expected` weighs the segment header prediction expects (against 12 for
/// segments anywhere) and `reads` the application's reads.
fn op_with(expected: u32, reads: u32) -> impl Strategy<Value = Op> {
    let segment = (
        near(REMOTE_SEQ),
        proptest::option::weighted(0.9, near(LOCAL_SEQ)),
        0u8..6,
        any::<bool>(),
        prop_oneof![Just(0u16), Just(1), Just(64), Just(256), any::<u16>()],
        prop_oneof![3 => Just(0usize), 1 => 1usize..100],
        proptest::option::weighted(0.1, any::<u16>()),
        proptest::option::weighted(0.1, any::<u8>()),
        proptest::option::weighted(0.3, any::<(u32, u32)>()),
        any::<bool>(),
    )
        .prop_map(|(seq, ack, control, push, window, payload, mss, ws, ts, sack)| Op::Segment {
            seq,
            ack,
            control,
            push,
            window,
            payload,
            mss,
            ws,
            ts,
            sack,
        });
    let predicted = (
        proptest::option::weighted(0.2, prop_oneof![-3i32..4, any::<i32>()]),
        1usize..40,
        prop_oneof![Just(0u16), Just(64), any::<u16>()],
        prop_oneof![6 => Just(0u8), 1 => 3u8..6],
        proptest::option::weighted(0.9, prop_oneof![4 => 0i16..1000, 1 => any::<i16>()]),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(ack_delta, payload, window, control, ts_delta, sack)| Op::Expected {
            ack_delta,
            payload,
            window,
            control,
            ts_delta,
            sack,
        });
    prop_oneof![
        12 => segment,
        expected => predicted,
        2 => prop_oneof![0u64..100, 0u64..70_000].prop_map(Op::Advance),
        1 => (0usize..100).prop_map(Op::Send),
        reads => (0usize..100).prop_map(Op::Recv),
        3 => prop_oneof![Just(Op::Shutdown), Just(Op::Close), Just(Op::Abort)],
    ]
}

fn op() -> impl Strategy<Value = Op> {
    op_with(6, 1)
}

fn start(which: u8) -> Script {
    let ts_config = Config { timestamps: true, window_scaling: true, sack: true, ..script_config() };
    let ts_syn = TcpRepr {
        timestamp: Some(Timestamp { tsval: 5, tsecr: 0 }),
        window_scale: Some(2),
        sack_permitted: true,
        ..syn_from_peer()
    };
    match which {
        0 => Script::syn_sent(),
        1 => Script::syn_received(),
        2 => Script::established(),
        3 => fin_wait_1(),
        4 => fin_wait_2(),
        5 => close_wait(),
        6 => last_ack(),
        7 => closing(),
        8 => time_wait(),
        9 => {
            let mut s = Script::established();
            s.conn.abort();
            s.drain();
            s
        }
        _ => established_with(
            ts_config,
            ts_syn,
            TcpRepr { timestamp: Some(Timestamp { tsval: 6, tsecr: 0 }), ..SEND_TEMPL },
        ),
    }
}

fn apply(s: &mut Script, op: &Op, data: &[u8]) {
    match *op {
        Op::Segment { seq, ack, control, push, window, payload, mss, ws, ts, sack } => {
            let mut blocks = SackBlocks::new();
            if sack {
                blocks.push(SackBlock {
                    left: SeqNumber::new(seq),
                    right: SeqNumber::new(seq.wrapping_add(10)),
                });
            }
            let repr = TcpRepr {
                control: [
                    TcpControl::None,
                    TcpControl::None,
                    TcpControl::None,
                    TcpControl::Syn,
                    TcpControl::Fin,
                    TcpControl::Rst,
                ][usize::from(control)],
                push,
                seq_number: SeqNumber::new(seq),
                ack_number: ack.map(SeqNumber::new),
                window_len: window,
                max_seg_size: mss,
                window_scale: ws,
                timestamp: ts.map(|(tsval, tsecr)| Timestamp { tsval, tsecr }),
                sack_blocks: blocks,
                payload: &data[..payload],
                ..SEND_TEMPL
            };
            s.send(&repr);
        }
        Op::Expected { ack_delta, payload, window, control, ts_delta, sack } => {
            let (nxt, una, recent) = s.conn.expected_segment();
            let una = una.get().wrapping_add_signed(ack_delta.unwrap_or(0));
            let ts = ts_delta.map(|d| (recent.wrapping_add_signed(i32::from(d)), 0));
            let op = Op::Segment {
                seq: nxt.get(),
                ack: Some(una),
                control,
                push: false,
                window,
                payload,
                mss: None,
                ws: None,
                ts,
                sack,
            };
            apply(s, &op, data);
        }
        Op::Advance(ms) => s.advance(Duration::from_millis(ms)),
        Op::Send(n) => {
            let _ = s.conn.send(&data[..n]);
        }
        Op::Recv(n) => {
            let mut buf = vec![0; n];
            let _ = s.conn.recv(&mut buf);
        }
        Op::Shutdown => s.conn.shutdown_write(),
        Op::Close => s.conn.close(),
        Op::Abort => s.conn.abort(),
    }
}

/// Drains the transmits, checking each one.
fn check_output(s: &mut Script) {
    for sent in s.drain() {
        assert!(sent.payload.len() <= s.conn.send_mss().max(1));
        let repr = sent.repr();
        let mut bytes = vec![0u8; repr.buffer_len()];
        repr.emit(&mut TcpPacket::new_unchecked(&mut bytes[..]), *LOCAL.ip(), *REMOTE.ip());
        let packet = TcpPacket::new_checked(&bytes[..]).expect("valid header");
        let parsed = TcpRepr::parse(&packet, *LOCAL.ip(), *REMOTE.ip(), ChecksumPolicy::Verify);
        assert!(parsed.is_ok(), "{repr:?}");
    }
    assert!(s.conn.recv_queue() <= 64);
    assert!(s.conn.send_queue() <= 64);
    let (ranges, bytes) = s.conn.ooo_held();
    assert!(ranges <= Config::default().max_ooo_ranges && bytes <= 64);
    if let Some(t) = s.conn.poll_timeout() {
        assert!(t >= s.base);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_segments_never_panic(which in 0u8..11, ops in proptest::collection::vec(op(), 1..40)) {
        let data: Vec<u8> = (0..=255).collect();
        let mut s = start(which);
        for op in &ops {
            apply(&mut s, op, &data);
            check_output(&mut s);
        }
        // Whatever happened, time alone ends every connection that is not established and
        // idle: closing states time out or finish.
        s.advance(Duration::from_secs(4 * 3600));
        check_output(&mut s);
        if !matches!(s.conn.state(), State::Established | State::CloseWait | State::FinWait2) {
            prop_assert_eq!(s.conn.state(), State::Closed);
        }
    }
}

/// The same random segments and calls against two copies of a connection, header prediction on
/// in one and off in the other ([`Config::header_prediction`]): after every step both are in
/// the same state and have sent the same segments. A third of the segments are the one the
/// prediction expects next (with random data, window, flags, SACK blocks and timestamps), the
/// rest anywhere; across the cases, the fast path must have been taken.
#[test]
fn random_segments_take_either_path_alike() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let predicted = std::cell::Cell::new(0);
    let data: Vec<u8> = (0..=255).collect();
    // Mostly the established states (2 without options, 10 with timestamps, SACK and window
    // scaling), where the prediction can hold.
    let which = prop_oneof![2 => Just(2u8), 2 => Just(10u8), 1 => 0u8..11];
    let cases = (which, proptest::collection::vec(op_with(12, 4), 1..40));
    let result = runner.run(&cases, |(which, ops)| {
        let (mut on, mut off) = (start(which), start(which));
        off.conn.set_header_prediction(false);
        for op in &ops {
            apply(&mut on, op, &data);
            apply(&mut off, op, &data);
            prop_assert_eq!(on.drain(), off.drain(), "after {:?}", op);
            prop_assert_eq!(on.conn.digest(), off.conn.digest(), "after {:?}", op);
        }
        prop_assert_eq!(off.conn.stats().predicted, 0);
        predicted.set(predicted.get() + on.conn.stats().predicted);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(predicted.get() >= 100, "only {} segments predicted in all", predicted.get());
}
