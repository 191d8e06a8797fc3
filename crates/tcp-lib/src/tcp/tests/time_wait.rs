//! The compact TIME-WAIT record against the connection it was built from: the same random
//! segments and time steps to both, the same answers (every field of every segment), the same
//! 2·MSL deadline, the same end.

use std::time::Duration;

use proptest::prelude::*;

use super::scripted::{closing, established_with, time_wait};
use super::*;
use crate::tcp::{TimeWait, TimeWaitAction};
use crate::wire::tcp::{SackBlock, SackBlocks, Timestamp};

#[derive(Debug, Clone)]
enum Op {
    Segment {
        seq: u32,
        ack: Option<u32>,
        control: u8,
        window: u16,
        payload: usize,
        ts: Option<(u32, u32)>,
        sack: bool,
    },
    /// Microseconds.
    Advance(u64),
}

/// Before the record is built, the connection alone also sees reads by the application.
#[derive(Debug, Clone)]
enum Pre {
    Op(Op),
    Recv(usize),
}

fn near(base: SeqNumber) -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => (-40i64..140).prop_map(move |d| (base + usize::try_from(d + 1000).unwrap() - 1000usize).get()),
        1 => (-70_000i64..70_000).prop_map(move |d| (base + usize::try_from(d + 100_000).unwrap() - 100_000usize).get()),
        1 => any::<u32>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let segment = (
        near(REMOTE_SEQ),
        proptest::option::weighted(0.9, near(LOCAL_SEQ)),
        0u8..6,
        prop_oneof![Just(0u16), Just(64), any::<u16>()],
        prop_oneof![3 => Just(0usize), 1 => 1usize..100],
        proptest::option::weighted(0.5, (prop_oneof![3 => 0u32..40, 1 => any::<u32>()], any::<u32>())),
        proptest::bool::weighted(0.2),
    )
        .prop_map(|(seq, ack, control, window, payload, ts, sack)| Op::Segment {
            seq,
            ack,
            control,
            window,
            payload,
            ts,
            sack,
        });
    prop_oneof![
        8 => segment,
        3 => prop_oneof![0u64..5_000, 0u64..700_000, 0u64..70_000_000].prop_map(Op::Advance),
    ]
}

fn pre() -> impl Strategy<Value = Pre> {
    prop_oneof![4 => op().prop_map(Pre::Op), 1 => (0usize..64).prop_map(Pre::Recv)]
}

fn segment<'a>(op: &Op, data: &'a [u8]) -> Option<TcpRepr<'a>> {
    let Op::Segment { seq, ack, control, window, payload, ts, sack } = *op else { return None };
    let mut sack_blocks = SackBlocks::new();
    if sack {
        let left = LOCAL_SEQ + usize::try_from(seq % 8).unwrap_or(0);
        sack_blocks.push(SackBlock { left, right: left + 10 });
    }
    Some(TcpRepr {
        control: [
            TcpControl::None,
            TcpControl::None,
            TcpControl::None,
            TcpControl::Syn,
            TcpControl::Fin,
            TcpControl::Rst,
        ][usize::from(control)],
        seq_number: SeqNumber::new(seq),
        ack_number: ack.map(SeqNumber::new),
        window_len: window,
        timestamp: ts.map(|(tsval, tsecr)| Timestamp { tsval, tsecr }),
        payload: &data[..payload],
        sack_blocks,
        ..SEND_TEMPL
    })
}

/// A connection in TIME-WAIT, by one of several paths and option sets.
fn start(which: u8, unread: usize) -> (Script, Config) {
    let peer = |n: usize| REMOTE_SEQ + 1 + n;
    let ours = |n: usize| LOCAL_SEQ + 1 + n;
    match which {
        0 => (time_wait(), script_config()),
        1 => {
            let mut s = closing();
            send!(s, TcpRepr { seq_number: peer(1), ack_number: Some(ours(1)), ..SEND_TEMPL });
            s.drain();
            (s, script_config())
        }
        _ => {
            // Timestamps, SACK, window scaling (a large buffer, scale 5) or not; data from the
            // peer left unread with the FIN.
            let recv_buffer = if which == 2 { 64 } else { 1 << 20 };
            // A low challenge-ACK limit, so that it is reached.
            let config = Config {
                timestamps: true,
                window_scaling: true,
                sack: true,
                recv_buffer,
                challenge_ack_limit: 3,
                ..script_config()
            };
            let ts = |tsval| Some(Timestamp { tsval, tsecr: 0 });
            let syn =
                TcpRepr { timestamp: ts(5), window_scale: Some(2), sack_permitted: true, ..syn_from_peer() };
            let mut s = established_with(config, syn, TcpRepr { timestamp: ts(6), ..SEND_TEMPL });
            s.conn.shutdown_write();
            s.drain();
            s.advance(Duration::from_millis(3));
            let data = [7u8; 64];
            let fin = TcpRepr {
                control: TcpControl::Fin,
                ack_number: Some(ours(1)),
                timestamp: ts(9),
                payload: &data[..unread],
                ..SEND_TEMPL
            };
            send!(s, fin);
            s.drain();
            (s, config)
        }
    }
}

/// What the connection sends now.
fn answers(s: &mut Script) -> Vec<TcpRepr<'static>> {
    s.drain()
        .into_iter()
        .map(|sent| {
            assert!(sent.payload.is_empty());
            sent.repr
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn record_answers_as_the_connection(
        which in 0u8..4,
        unread in prop_oneof![0usize..40, Just(64)],
        base_offset in 0u64..5_000_000,
        pre_ops in proptest::collection::vec(pre(), 0..8),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let data: Vec<u8> = (0..=255).collect();
        let (mut s, config) = start(which, unread);
        prop_assert_eq!(s.conn.state(), State::TimeWait);
        // Whatever the connection saw first (its rate limits, TS.Recent, reads that move the
        // window it will advertise), as long as it is still in TIME-WAIT.
        for p in &pre_ops {
            match p {
                Pre::Op(Op::Advance(us)) => s.advance(Duration::from_micros(*us)),
                Pre::Op(op) => {
                    if let Some(seg) = segment(op, &data) {
                        s.send(&seg);
                    }
                }
                Pre::Recv(n) => {
                    let mut buf = vec![0; *n];
                    let _ = s.conn.recv(&mut buf);
                }
            }
            s.drain();
        }
        if s.conn.state() != State::TimeWait {
            return Ok(());
        }
        // The record keeps instants relative to its own base, not the connection's epoch.
        let base = s.base + Duration::from_nanos(base_offset * 997);
        let mut record: TimeWait = s.conn.time_wait_record(base).expect("drained TIME-WAIT has a record");
        prop_assert_eq!(s.conn.poll_timeout(), Some(record.expires(base)));
        for op in &ops {
            match op {
                Op::Advance(us) => {
                    s.advance(Duration::from_micros(*us));
                    prop_assert!(answers(&mut s).is_empty());
                    let expired = record.expires(base) <= s.now;
                    prop_assert_eq!(s.conn.state() == State::Closed, expired);
                    if expired {
                        return Ok(());
                    }
                }
                Op::Segment { .. } => {
                    let seg = segment(op, &data).expect("a segment");
                    s.send(&seg);
                    let got = answers(&mut s);
                    match record.handle_segment(&config, base, s.now, &seg) {
                        TimeWaitAction::Ignore => prop_assert_eq!(got, vec![], "{:?}", seg),
                        TimeWaitAction::Reply(ack) => prop_assert_eq!(got, vec![ack], "{:?}", seg),
                        TimeWaitAction::Close => {
                            prop_assert!(got.is_empty());
                            prop_assert_eq!(s.conn.state(), State::Closed);
                            return Ok(());
                        }
                    }
                    prop_assert_eq!(s.conn.state(), State::TimeWait);
                }
            }
            prop_assert_eq!(s.conn.poll_timeout(), Some(record.expires(base)));
        }
    }
}

/// The record's size: the point of it (a connection is ~1100 bytes).
#[test]
fn record_is_compact() {
    assert!(size_of::<TimeWait>() <= 72, "{}", size_of::<TimeWait>());
}
