//! Arbitrary sequences of net-channel operations, checked against a `VecDeque` model, except that
//! the producer may see up to a return batch of popped slots as still in use (the consumer hands
//! slots back in batches: "Returning slots" in `netchannel::channel`).
#![no_main]

use std::collections::VecDeque;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use netchannel::channel::{Channel, EMPTY, PushError, RETURN_SLOTS, WakeMode};

#[derive(Arbitrary, Debug)]
enum Op {
    Push(u32),
    PushBurst(Vec<u32>),
    Pop,
    PopBurst(u8),
    Len,
    RequestWakeup,
}

#[derive(Arbitrary, Debug)]
struct Input {
    capacity: u8,
    mode: u8,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let mode = match input.mode % 3 {
        0 => WakeMode::Poll,
        1 => WakeMode::Park,
        _ => WakeMode::EventFd,
    };
    let requested = usize::from(input.capacity);
    let Ok((mut tx, mut rx)) = Channel::builder(requested).wake(mode).build() else {
        assert_eq!(requested, 0, "only a zero capacity is refused here");
        return;
    };
    let capacity = requested.next_power_of_two();
    assert_eq!(tx.capacity(), capacity);
    // The most popped slots the consumer may hold back (documented at `RETURN_SLOTS`).
    let batch = (capacity / 8).clamp(1, RETURN_SLOTS);
    // What the producer last saw as free; nothing changes it until the consumer returns slots.
    let mut free = capacity;
    let mut model = VecDeque::new();
    // Whether the consumer holds no popped slot back: a `pop_burst` took the last item, or it armed a
    // wakeup, and it has popped nothing since (`pop` hands slots back at line-pair boundaries only).
    let mut holds_nothing = true;
    let mut out = vec![0u32; 256];
    for op in input.ops {
        match op {
            Op::Push(v) => {
                // `EMPTY` is the one value a channel cannot carry (pushing it panics).
                let v = v.min(EMPTY - 1);
                let r = tx.push(v);
                if free > 0 {
                    assert_eq!(r, Ok(()));
                    model.push_back(v);
                } else {
                    assert_eq!(r, Err(PushError::Full(v)));
                }
            }
            Op::PushBurst(mut items) => {
                for item in &mut items {
                    *item = (*item).min(EMPTY - 1);
                }
                let n = tx.push_burst(&items);
                assert_eq!(n, items.len().min(free));
                model.extend(&items[..n]);
            }
            Op::Pop => {
                let got = rx.pop();
                assert_eq!(got, model.pop_front());
                holds_nothing &= got.is_none();
            }
            Op::PopBurst(k) => {
                let k = usize::from(k);
                let n = rx.pop_burst(&mut out[..k]);
                assert_eq!(n, k.min(model.len()));
                for got in &out[..n] {
                    assert_eq!(Some(*got), model.pop_front());
                }
                if n > 0 {
                    holds_nothing = model.is_empty();
                }
            }
            Op::Len => assert_eq!(rx.len(), model.len()),
            Op::RequestWakeup => {
                assert_eq!(rx.request_wakeup(), model.is_empty() && mode != WakeMode::Poll);
                holds_nothing |= mode != WakeMode::Poll;
            }
        }
        free = tx.free_space();
        assert!(free <= capacity - model.len(), "{free} free with {} queued", model.len());
        assert!(free + batch > capacity - model.len(), "{free} free: more than a batch held back");
        if holds_nothing {
            assert_eq!(free, capacity - model.len(), "a consumer that has caught up holds nothing back");
        }
    }
    let stats = tx.stats();
    assert_eq!(stats.pushed - rx.stats().popped, model.len() as u64);
    assert!(stats.popped <= rx.stats().popped);
    assert!(stats.wakeups <= stats.wakeup_requests);
});
