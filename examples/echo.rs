//! `cargo run --release --example echo`
//!
//! For now a minimal net channel demo, not yet the echo server: the end-to-end echo over the 82599
//! model, TAP and bare metal is a later issue. What it does run is the data path's skeleton: a "driver"
//! thread allocates packet buffers from the pool, writes a payload into each and sends it through a net
//! channel; an "application" thread receives each packet on its own core (sleeping on a futex when the
//! channel runs dry), checks the payload, rewrites it in place and sends the same buffer back through a
//! second channel; the driver checks every echoed byte and frees the buffer into its own cache. At the
//! end it prints what happened and accounts for every buffer.

use std::time::{Duration, Instant};

use netchannel::channel::{ChannelStats, WakeMode};
use netchannel::pool::{CacheStats, Pool};

/// Packets to echo.
const PACKETS: u64 = 2_000_000;
/// Payload bytes per packet (a small TCP segment's worth).
const PAYLOAD: usize = 64;
/// Packets the driver keeps in flight at most.
const IN_FLIGHT: u64 = 1024;

/// The payload of packet `seq`: its sequence number, then a pattern derived from it.
fn fill(seq: u64, buf: &mut [u8]) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    let [low, ..] = seq.to_le_bytes();
    for (b, i) in buf[8..].iter_mut().zip(0u8..) {
        *b = low.wrapping_add(i);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("netchannels echo: minimal net channel demo (the 82599-model echo server is not built yet)");
    let pool = Pool::new(4096)?;
    let region = pool.region();
    println!(
        "pool: {} buffers of {} bytes in one {} KiB region ({})",
        pool.buffers(),
        pool.data_room(),
        region.len() / 1024,
        if region.is_hugepage() { "2 MiB hugepages" } else { "normal pages: no hugepages reserved" }
    );
    let (mut to_app, mut app_rx) =
        pool.packet_channel_with(netchannel::channel::Channel::builder(2048).wake(WakeMode::Park))?;
    let (mut app_tx, mut from_app) = pool.packet_channel(2048)?;

    let app = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            let cache = pool.cache();
            let mut echoed = 0u64;
            loop {
                let Some(mut packet) = app_rx.pop(&cache) else {
                    if app_rx.wait(None).is_closed() {
                        let stats = cache.stats();
                        return (echoed, stats);
                    }
                    continue;
                };
                let data = packet.data_mut();
                let seq = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
                let mut expect = [0u8; PAYLOAD];
                fill(seq, &mut expect);
                assert_eq!(data, &expect[..], "payload of packet {seq} damaged on the way in");
                // Echo in place: flip every payload byte after the sequence number.
                for b in &mut data[8..] {
                    *b = !*b;
                }
                let mut packet = packet;
                while let Err(full) = app_tx.push(packet) {
                    packet = full.into_inner();
                    std::hint::spin_loop();
                }
                echoed += 1;
            }
        })
    };

    let cache = pool.cache();
    let start = Instant::now();
    let (mut sent, mut received) = (0u64, 0u64);
    let mut last_report = Instant::now();
    while received < PACKETS {
        while sent < PACKETS && sent - received < IN_FLIGHT {
            let Some(mut packet) = cache.alloc() else { break };
            let mut payload = [0u8; PAYLOAD];
            fill(sent, &mut payload);
            packet.extend_from_slice(&payload)?;
            if let Err(full) = to_app.push(packet) {
                drop(full.into_inner()); // back to the cache; retried on the next round
                break;
            }
            sent += 1;
        }
        while let Some(packet) = from_app.pop(&cache) {
            let mut expect = [0u8; PAYLOAD];
            fill(received, &mut expect);
            for b in &mut expect[8..] {
                *b = !*b;
            }
            assert_eq!(packet.data(), &expect[..], "echo of packet {received} wrong or out of order");
            received += 1;
        }
        if last_report.elapsed() > Duration::from_millis(500) {
            last_report = Instant::now();
            eprintln!("  progress: {received}/{PACKETS} packets echoed");
        }
    }
    let elapsed = start.elapsed();
    let driver_side = to_app.stats();
    drop(to_app);
    let (echoed, app_cache) = app.join().map_err(|_| "application thread panicked")?;
    let echo_side = from_app.stats();
    let driver_cache = cache.stats();
    drop(cache);
    drop(from_app);

    println!(
        "echoed {PACKETS} packets of {PAYLOAD} bytes through two net channels in {elapsed:.2?}: every byte checked, all in order"
    );
    println!(
        "  {:.2} M packets/s round trip, {:.0} ns per packet",
        PACKETS as f64 / elapsed.as_secs_f64() / 1e6,
        elapsed.as_nanos() as f64 / PACKETS as f64
    );
    let channel = |name: &str, s: &ChannelStats| {
        println!(
            "  channel {name:<14} pushed {:>9}  popped {:>9}  refused (full) {:>7}  wakeups {:>6} of {:>6} requested",
            s.pushed, s.popped, s.refused_full, s.wakeups, s.wakeup_requests
        );
    };
    channel("driver -> app", &driver_side);
    channel("app -> driver", &echo_side);
    let cache_line = |name: &str, s: &CacheStats| {
        println!(
            "  cache   {name:<14} allocs {:>9}  frees {:>9}  depot refills {:>6}  spills {:>6}",
            s.allocs, s.frees, s.refills, s.spills
        );
    };
    cache_line("driver", &driver_cache);
    cache_line("application", &app_cache);
    assert_eq!(echoed, PACKETS);
    pool.check_leaks()?;
    let audit = pool.audit();
    println!("buffers: all {} back in the pool, none leaked, none freed twice", audit.in_depot);
    Ok(())
}
