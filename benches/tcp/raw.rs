//! The in-memory link's own ceiling for bulk: `--child bulk pair-raw BYTES`.
//!
//! No TCP at all. One thread builds frames as the in-place TCP writers do (a pool buffer per
//! 1448-byte payload, produced in place with the same fill, behind 66 bytes of headers: Ethernet,
//! IPv4, TCP with timestamps) and hands them to its end of a `Pair` in bursts of 32; the other
//! takes them off the other end and copies each payload into the application's buffer as the
//! in-place readers do, then frees the buffer. Nothing is acknowledged and nothing is kept for a
//! retransmission. What this moves per second is what any stack on this link can at most move with
//! the same application work: the bytes still cross from one core to the other and are read
//! there. Both threads spin (there is nothing to sleep on: no ACK comes back), so compare its wall
//! rate with the TCP contenders' under `TCP_BENCH_POLL=busy`, where they spin too.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

use netchannel::dev::{NetDevice, PacketBatch, Pair};

use crate::DEADLINE;
use crate::endpoint::{InPlace, produce};
use crate::measure::{Clock, Sample, Side, two_threads};
use crate::stacks::{HasPool, new_pool};

/// Ethernet, IPv4 and TCP with the timestamps option: what a data segment of either stack carries.
const HEADERS: usize = 14 + 20 + 32;
/// A data segment's payload at MTU 1500 with timestamps.
const PAYLOAD: usize = 1448;
/// Frames handed to the device at once.
const BURST: usize = 32;

/// Moves `bytes` from one end of a `Pair` to the other as frames, without a protocol.
pub(crate) fn bulk_raw(bytes: u64) -> Result<Sample, String> {
    let pool = new_pool()?;
    let (dev_a, dev_b) = Pair::builder(&pool).capacity(4096).build().map_err(|e| e.to_string())?;
    let done = AtomicBool::new(false);
    let (a, b) = two_threads(
        |barrier| sender(dev_a, bytes, barrier, &done),
        |barrier| receiver(dev_b, bytes, barrier, &done),
    )?;
    Ok(Sample { units: bytes, wall: b.end - b.start, cpu: [a.cpu, b.cpu] })
}

/// Sends `total` bytes in frames; what the ring refuses is retried. Spins while the ring is full
/// (there is nothing to wait on: no ACK comes back).
fn sender(mut dev: Pair, total: u64, barrier: &Barrier, done: &AtomicBool) -> Result<Side, String> {
    let cache = dev.pool_cache();
    let mut batch = PacketBatch::with_capacity(BURST);
    let header = [0u8; HEADERS];
    barrier.wait();
    let clock = Clock::start();
    let mut sent = 0u64;
    while !done.load(Ordering::Acquire) {
        while sent < total && !batch.is_full() {
            let Some(mut packet) = cache.alloc() else { break };
            let payload = usize::try_from(total - sent).map_or(PAYLOAD, |left| left.min(PAYLOAD));
            packet.set_len(HEADERS + payload).map_err(|e| e.to_string())?;
            let data = packet.data_mut();
            data[..HEADERS].copy_from_slice(&header);
            produce(&mut data[HEADERS..], payload);
            batch.push(packet).map_err(|_| "batch full".to_owned())?;
            sent += payload as u64;
        }
        if batch.is_empty() {
            std::hint::spin_loop();
        } else {
            dev.tx_burst(0, &mut batch).map_err(|e| e.to_string())?;
        }
        if clock.start.elapsed() > DEADLINE {
            return Err(format!("pair-raw send: not done after {DEADLINE:?}"));
        }
    }
    Ok(clock.stop())
}

/// Receives until `total` payload bytes arrived, copying each payload out, then sets `done`.
fn receiver(mut dev: Pair, total: u64, barrier: &Barrier, done: &AtomicBool) -> Result<Side, String> {
    let cache = dev.pool_cache();
    let mut batch = PacketBatch::with_capacity(BURST);
    let mut app = InPlace::new();
    barrier.wait();
    let clock = Clock::start();
    let mut got = 0u64;
    let r = loop {
        if got >= total {
            break Ok(());
        }
        match dev.rx_burst(0, &cache, &mut batch) {
            Ok(0) => {
                if clock.start.elapsed() > DEADLINE {
                    break Err(format!("pair-raw receive: {got} of {total} bytes after {DEADLINE:?}"));
                }
                std::hint::spin_loop();
            }
            Ok(_) => {
                for packet in batch.drain() {
                    got += app.take(packet.data().get(HEADERS..).unwrap_or_default()) as u64;
                }
            }
            Err(e) => break Err(e.to_string()),
        }
    };
    let side = clock.stop();
    done.store(true, Ordering::Release);
    r?;
    if app.placed as u64 != got {
        return Err(format!("pair-raw: {} bytes placed, {got} counted", app.placed));
    }
    Ok(side)
}
