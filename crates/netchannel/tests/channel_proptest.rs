//! Any sequence of channel operations behaves like a bounded `VecDeque` (the model), except that the
//! producer may see up to a return batch of popped slots as still in use (the consumer hands slots back
//! in batches: "Returning slots" in `netchannel::channel`).

use std::collections::VecDeque;

use netchannel::channel::{Channel, EMPTY, PushError, RETURN_SLOTS, WakeMode};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Push(u32),
    PushBurst(Vec<u32>),
    Pop,
    PopBurst(usize),
    Len,
    RequestWakeup,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..EMPTY).prop_map(Op::Push),
        3 => proptest::collection::vec(0..EMPTY, 0..80).prop_map(Op::PushBurst),
        4 => Just(Op::Pop),
        3 => (0usize..80).prop_map(Op::PopBurst),
        1 => Just(Op::Len),
        1 => Just(Op::RequestWakeup),
    ]
}

fn mode() -> impl Strategy<Value = WakeMode> {
    prop_oneof![Just(WakeMode::Poll), Just(WakeMode::Park), Just(WakeMode::EventFd)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matches_vecdeque_model(requested in prop_oneof![1usize..70, 200usize..600], mode in mode(), ops in proptest::collection::vec(op(), 0..200)) {
        let (mut tx, mut rx) = Channel::builder(requested).wake(mode).build().unwrap();
        let capacity = requested.next_power_of_two();
        prop_assert_eq!(tx.capacity(), capacity);
        // The most popped slots the consumer may hold back (documented at `RETURN_SLOTS`).
        let batch = (capacity / 8).clamp(1, RETURN_SLOTS);
        let mut model: VecDeque<u32> = VecDeque::new();
        // Whether the consumer holds no popped slot back: a `pop_burst` took the last item, or it
        // armed a wakeup, and it has popped nothing since (`pop` hands slots back at line-pair
        // boundaries only: it does not read `tail`, so it does not know that it has caught up).
        let mut holds_nothing = true;
        let mut refused = 0u64;
        let mut pushed = 0u64;
        // What the producer last saw as free; nothing changes it until the consumer returns slots.
        let mut free = capacity;
        for op in ops {
            match op {
                Op::Push(v) => {
                    let r = tx.push(v);
                    if free > 0 {
                        prop_assert_eq!(r, Ok(()));
                        model.push_back(v);
                        pushed += 1;
                    } else {
                        prop_assert_eq!(r, Err(PushError::Full(v)));
                        refused += 1;
                    }
                }
                Op::PushBurst(items) => {
                    let n = tx.push_burst(&items);
                    let fit = items.len().min(free);
                    prop_assert_eq!(n, fit);
                    model.extend(&items[..n]);
                    pushed += n as u64;
                    refused += (items.len() - n) as u64;
                }
                Op::Pop => {
                    let got = rx.pop();
                    prop_assert_eq!(got, model.pop_front());
                    holds_nothing &= got.is_none();
                }
                Op::PopBurst(k) => {
                    let mut out = vec![0u32; k];
                    let n = rx.pop_burst(&mut out);
                    prop_assert_eq!(n, k.min(model.len()));
                    for got in &out[..n] {
                        prop_assert_eq!(Some(*got), model.pop_front());
                    }
                    if n > 0 {
                        holds_nothing = model.is_empty();
                    }
                }
                Op::Len => prop_assert_eq!(rx.len(), model.len()),
                Op::RequestWakeup => {
                    // May sleep only when empty and never in Poll mode.
                    let may_sleep = rx.request_wakeup();
                    prop_assert_eq!(may_sleep, model.is_empty() && mode != WakeMode::Poll);
                    holds_nothing |= mode != WakeMode::Poll;
                }
            }
            free = tx.free_space();
            prop_assert!(free <= capacity - model.len(), "{free} free with {} queued", model.len());
            prop_assert!(free + batch > capacity - model.len(), "{free} free: more than a batch held back");
            if holds_nothing {
                prop_assert_eq!(free, capacity - model.len(), "a consumer that has caught up holds nothing back");
            }
        }
        let stats = tx.stats();
        prop_assert_eq!(stats.pushed, pushed);
        prop_assert_eq!(stats.refused_full, refused);
        prop_assert_eq!(stats.pushed - rx.stats().popped, model.len() as u64);
        prop_assert!(stats.popped <= rx.stats().popped);
    }
}
