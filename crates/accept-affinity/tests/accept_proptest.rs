//! proptest: random enqueue / accept / retire / balance / close / take-all sequences under every policy
//! conserve connections (enqueued = accepted + rejected + queued + taken), never duplicate one, report
//! where each arrived, and keep the connections of each arrival core in order.
#![cfg(not(loom))]

use std::collections::HashMap;
use std::time::Duration;

use accept_affinity::{AcceptError, AcceptQueue, AffinityConfig, EnqueueError, Policy};
use netchannel::signature::FlowGroup;
use netchannel::steering::SoftwareSteering;
use proptest::prelude::*;

const CORES: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    Enqueue { core: usize, group: u16 },
    Accept { core: usize },
    Retire { core: usize },
    Balance { advance_ms: u64 },
    Close,
    TakeAll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..CORES, 0..8u16).prop_map(|(core, group)| Op::Enqueue { core, group }),
        6 => (0..CORES).prop_map(|core| Op::Accept { core }),
        1 => (0..CORES).prop_map(|core| Op::Retire { core }),
        1 => (0..150u64).prop_map(|advance_ms| Op::Balance { advance_ms }),
        1 => Just(Op::Close),
        1 => Just(Op::TakeAll),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just(Policy::Stock),
        Just(Policy::Fine),
        Just(Policy::affinity()),
        (0..=100u32, 0..=100u32, 1..20u32, 0..6u32).prop_map(|(a, b, w, l)| Policy::Affinity(
            AffinityConfig {
                busy_high_percent: a.max(b),
                busy_low_percent: a.min(b),
                ewma_weight: w,
                local_per_steal: l,
                ..AffinityConfig::default()
            }
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn conserves_connections(policy in policy(), backlog in 1..12usize, ops in proptest::collection::vec(op(), 0..120)) {
        let q = AcceptQueue::<u64>::new(CORES, backlog, policy).unwrap();
        let mut steering = SoftwareSteering::new(u16::try_from(CORES).unwrap());
        let mut now = Duration::ZERO;
        // id -> arrival core, for connections queued now.
        let mut queued: HashMap<u64, usize> = HashMap::new();
        let (mut offered, mut accepted, mut rejected, mut taken) = (0u64, 0u64, 0u64, 0u64);
        let mut last_per_arrival: [Option<u64>; CORES] = [None; CORES];
        let mut next_id = 0u64;
        for op in ops {
            match op {
                Op::Enqueue { core, group } => {
                    let id = next_id;
                    next_id += 1;
                    match q.enqueue(core, FlowGroup(group), id) {
                        Ok(_) => {
                            offered += 1;
                            queued.insert(id, core);
                        }
                        Err(EnqueueError::Full(c)) => {
                            prop_assert_eq!(c, id);
                            offered += 1;
                            rejected += 1;
                        }
                        Err(EnqueueError::Closed(c)) => prop_assert_eq!(c, id),
                        Err(EnqueueError::NoSuchCore(_)) => prop_assert!(false, "core in range"),
                    }
                }
                Op::Accept { core } => match q.try_accept(core) {
                    Ok(a) => {
                        let arrived = queued.remove(&a.conn);
                        prop_assert_eq!(arrived, Some(a.arrived_on), "unknown or duplicate {}", a.conn);
                        prop_assert_eq!(a.remote, a.arrived_on != core);
                        if let Some(prev) = last_per_arrival[a.arrived_on] {
                            prop_assert!(prev < a.conn, "arrival core {} out of order", a.arrived_on);
                        }
                        last_per_arrival[a.arrived_on] = Some(a.conn);
                        accepted += 1;
                    }
                    Err(AcceptError::WouldBlock | AcceptError::Retired | AcceptError::Closed) => {}
                    Err(AcceptError::NoSuchCore) => prop_assert!(false, "core in range"),
                },
                Op::Retire { core } => {
                    if let Ok(r) = q.retire(core) {
                        for (arrived_on, _, id) in r.orphans {
                            prop_assert_eq!(queued.remove(&id), Some(arrived_on));
                            taken += 1;
                        }
                    }
                }
                Op::Balance { advance_ms } => {
                    now += Duration::from_millis(advance_ms);
                    let _ = q.balance_at(now, &mut steering);
                }
                Op::Close => q.close(),
                Op::TakeAll => {
                    for (arrived_on, _, id) in q.take_all() {
                        prop_assert_eq!(queued.remove(&id), Some(arrived_on));
                        taken += 1;
                    }
                }
            }
            let s = q.stats();
            prop_assert_eq!(offered, accepted + rejected + queued.len() as u64 + taken);
            prop_assert_eq!(s.enqueued() + s.rejected(), offered);
            prop_assert_eq!(s.accepted(), accepted);
            prop_assert_eq!(s.rejected(), rejected);
            prop_assert_eq!(s.queued(), queued.len() as u64);
            prop_assert_eq!(s.taken, taken);
            // Bounded: a retirement may push a heir past its share, never the listener past its total.
            prop_assert!(s.queued() <= u64::try_from(backlog.max(CORES * q.per_core_max())).unwrap(), "bounded: {:?}", s);
        }
        // Draining after close returns exactly what is queued.
        q.close();
        for core in 0..CORES {
            while let Ok(a) = q.try_accept(core) {
                prop_assert_eq!(queued.remove(&a.conn), Some(a.arrived_on));
            }
        }
        for (arrived_on, _, id) in q.take_all() {
            prop_assert_eq!(queued.remove(&id), Some(arrived_on));
        }
        prop_assert!(queued.is_empty());
    }
}
