//! `cargo run --release --example echo`
//!
//! For now a minimal net channel demo, not yet the echo server: the end-to-end echo over the 82599
//! model, TAP and bare metal is a later issue. A "driver" thread pushes buffer indices into one channel,
//! an "application" thread pops them in bursts, sleeping on a futex when the channel runs dry, and
//! echoes every index back through a second channel; the driver checks that every index comes back
//! exactly once and in order, then prints what happened.

use std::time::{Duration, Instant};

use netchannel::channel::{Channel, ChannelStats, WakeMode};

const ITEMS: u32 = 10_000_000;
const BURST: usize = 32;

fn main() {
    println!("netchannels echo: minimal net channel demo (the 82599-model echo server is not built yet)");
    let (mut to_app, mut app_rx) = Channel::builder(4096).wake(WakeMode::Park).build().expect("channel");
    let (mut app_tx, mut from_app) = Channel::builder(4096).wake(WakeMode::Park).build().expect("channel");

    let app = std::thread::spawn(move || {
        let mut buf = [0u32; BURST];
        loop {
            // Backpressure instead of drops: take only what the return channel has room for.
            let room = app_tx.free_space().min(BURST);
            let n = app_rx.pop_burst(&mut buf[..room]);
            if n == 0 {
                if room > 0 && app_rx.wait(None).is_closed() {
                    return app_rx.stats();
                }
                std::hint::spin_loop();
                continue;
            }
            let sent = app_tx.push_burst(&buf[..n]);
            debug_assert_eq!(sent, n, "room was reserved");
        }
    });

    let start = Instant::now();
    let mut next = 0u32;
    let mut expect = 0u32;
    let mut burst = [0u32; BURST];
    let mut back = [0u32; BURST];
    let mut last_report = Instant::now();
    while expect < ITEMS {
        let room = to_app.free_space();
        if next < ITEMS && room > 0 {
            let len = BURST.min((ITEMS - next) as usize).min(room);
            for (slot, index) in burst[..len].iter_mut().zip(next..) {
                *slot = index;
            }
            next += u32::try_from(to_app.push_burst(&burst[..len])).expect("burst fits in u32");
        }
        let n = from_app.pop_burst(&mut back);
        for &v in &back[..n] {
            assert_eq!(v, expect, "echoed index out of order or lost");
            expect += 1;
        }
        if last_report.elapsed() > Duration::from_millis(500) {
            last_report = Instant::now();
            eprintln!("  progress: {expect}/{ITEMS} indices echoed");
        }
    }
    let elapsed = start.elapsed();
    let driver_side = to_app.stats();
    drop(to_app);
    let app_side = app.join().expect("application thread");
    let echo_side = from_app.stats();

    let report = |name: &str, s: &ChannelStats| {
        println!(
            "  {name:<18} pushed {:>10}  popped {:>10}  refused (full) {:>8}  wakeups {:>6} of {:>6} requested",
            s.pushed, s.popped, s.refused_full, s.wakeups, s.wakeup_requests
        );
    };
    println!("echoed {ITEMS} buffer indices through two net channels in {elapsed:.2?}, all in order");
    println!(
        "  {:.1} M indices/s round trip ({:.1} ns per index)",
        f64::from(ITEMS) / elapsed.as_secs_f64() / 1e6,
        elapsed.as_nanos() as f64 / f64::from(ITEMS)
    );
    report("driver -> app", &driver_side);
    report("app -> driver", &echo_side);
    assert_eq!(app_side.popped, u64::from(ITEMS));
}
