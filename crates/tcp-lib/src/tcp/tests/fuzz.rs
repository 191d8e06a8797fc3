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

fn op() -> impl Strategy<Value = Op> {
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
    prop_oneof![
        12 => segment,
        2 => prop_oneof![0u64..100, 0u64..70_000].prop_map(Op::Advance),
        1 => (0usize..100).prop_map(Op::Send),
        1 => (0usize..100).prop_map(Op::Recv),
        1 => Just(Op::Shutdown),
        1 => Just(Op::Close),
        1 => Just(Op::Abort).prop_filter("rare", |_| true),
    ]
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
