//! loom models of shared (reference-counted) pool buffers: the last of several references frees the
//! buffer exactly once, whichever thread drops it; a frame of a shared buffer is refused while
//! another is in flight; and a frame's headers, written on one core, are read by the device core
//! before the next frame's headers overwrite them.
//!
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p netchannel
//! --test loom_shared`. Under loom every access to a buffer's data and to its headroom touches a
//! loom-tracked cell (`Shared::track`, `Shared::track_read` in `src/pool/mod.rs`): the shared data is
//! read by every handle at once, the headroom written by one frame at a time, and the final free is an
//! exclusive access, so a missing happens-before edge (the Acquire after the last decrement, the
//! Acquire of taking the frame bit, the Release of giving it back, the Acquire of taking a buffer
//! back for writing) or a missing in-flight check is reported by loom as a concurrent access. Each
//! model ends with the leak check.
#![cfg(loom)]

use loom::thread;
use netchannel::channel::{Channel, Consumer, WakeMode};
use netchannel::pool::{FrameError, HugePages, Pool, SharedPacket};

fn tiny_pool(buffers: u32) -> Pool {
    Pool::builder(buffers)
        .hugepages(HugePages::Never)
        .headroom(4)
        .data_room(4)
        .batch(1)
        .cache_size(1)
        .build()
        .unwrap()
}

/// A shared buffer holding `b"data"` (and the cache that made it, dropped).
fn shared_data(pool: &Pool) -> SharedPacket {
    let cache = pool.cache();
    let mut packet = cache.alloc().unwrap();
    packet.extend_from_slice(b"data").unwrap();
    packet.into_shared().unwrap()
}

/// Two threads read the data and drop their references at once: exactly one frees the buffer, and
/// only after the other's read (the Acquire load after the last decrement; without it loom reports
/// the free racing with the other thread's read).
#[test]
fn the_last_of_two_references_frees_once() {
    loom::model(|| {
        let pool = tiny_pool(1);
        let a = shared_data(&pool);
        let b = a.clone();
        let other = thread::spawn(move || {
            assert_eq!(b.data(), b"data");
            drop(b);
        });
        assert_eq!(a.data(), b"data");
        drop(a);
        other.join().unwrap();
        assert_eq!(pool.audit().shared, 0);
        pool.check_leaks().unwrap();
    });
}

/// The device core: takes one frame's token from `rx`, reads the frame (headers `h1`) and releases
/// it on its own cache.
fn device(pool: &Pool, mut rx: Consumer) -> thread::JoinHandle<()> {
    let pool = pool.clone();
    thread::spawn(move || {
        let cache = pool.cache();
        let token = loop {
            match rx.pop() {
                Some(token) => break token,
                None => thread::yield_now(),
            }
        };
        // SAFETY: the sender gave the token up (`into_raw`) and sent it once.
        let frame = unsafe { cache.frame_from_raw(token) };
        assert_eq!(frame.data(), b"h1data");
        drop(frame);
    })
}

/// Writes `tag` into a frame's two header bytes through its own cache, reads the frame back (the
/// device's read) and drops it; `None` when another frame was in flight.
fn send_once(shared: &SharedPacket, tag: u8) -> Option<()> {
    let cache = shared.pool().cache();
    let mut frame = match shared.frame(&cache, 2) {
        Ok(frame) => frame,
        Err(FrameError::InFlight) => return None,
        Err(e) => panic!("{e}"),
    };
    frame.data_mut().copy_from_slice(&[tag, tag]);
    assert_eq!(frame.data(), [tag, tag, b'd', b'a', b't', b'a'], "the headers are this frame's");
    drop(frame);
    Some(())
}

/// Two cores send the same shared buffer at once: a frame is refused while the other is in flight
/// (without the in-flight check both write the headroom at once), and a frame taken after another
/// was given back sees the device's reads of it done (the Acquire/Release pair on the frame bit).
#[test]
fn one_frame_in_flight_at_a_time() {
    loom::model(|| {
        let pool = tiny_pool(1);
        let a = shared_data(&pool);
        let b = a.clone();
        let other = thread::spawn(move || send_once(&b, 1).is_some());
        let here = send_once(&a, 2).is_some();
        let there = other.join().unwrap();
        assert!(here || there, "the first to try always gets the frame");
        assert_eq!(a.data(), b"data");
        drop(a);
        pool.check_leaks().unwrap();
    });
}

/// The 82599 way: the sending core writes a frame's headers and hands its token to the device core
/// through a net channel; the device reads the frame and releases it there. The sending core, which
/// also drops its reference meanwhile, retries its next frame until the first is back, so the
/// device's reads happen before the next headers are written; whoever lets go last frees the buffer.
#[test]
fn a_frame_released_on_the_device_core() {
    loom::model(|| {
        let pool = tiny_pool(1);
        let shared = shared_data(&pool);
        let (mut tx, rx) = Channel::builder(1).wake(WakeMode::Poll).build().unwrap();
        let device = device(&pool, rx);
        let cache = pool.cache();
        let mut frame = shared.frame(&cache, 2).unwrap();
        frame.data_mut().copy_from_slice(b"h1");
        tx.push(frame.into_raw()).unwrap();
        let mut second = loop {
            match shared.frame(&cache, 2) {
                Ok(frame) => break frame,
                Err(FrameError::InFlight) => thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        second.data_mut().copy_from_slice(b"h2");
        drop(shared);
        assert_eq!(second.data(), b"h2data");
        drop(second);
        device.join().unwrap();
        drop(cache);
        pool.check_leaks().unwrap();
    });
}

/// Zero-copy sending's cycle: the sending core frames its only handle of a buffer, hands the
/// token to the device core, which reads the frame and releases it there, and takes the buffer
/// back for writing (`try_into_packet`) as soon as the frame is released. The Acquire of the
/// exchange that sees the release orders the device's reads before the sender's writes: made
/// Relaxed, loom reports the device's read of the frame racing with the write.
#[test]
fn a_buffer_taken_back_after_its_frame_was_released() {
    loom::model(|| {
        let pool = tiny_pool(1);
        let (mut tx, rx) = Channel::builder(1).wake(WakeMode::Poll).build().unwrap();
        let device = device(&pool, rx);
        let cache = pool.cache();
        let mut shared = shared_data(&pool);
        let mut frame = shared.frame(&cache, 2).unwrap();
        frame.data_mut().copy_from_slice(b"h1");
        tx.push(frame.into_raw()).unwrap();
        let mut packet = loop {
            match shared.try_into_packet(&cache) {
                Ok(packet) => break packet,
                Err(back) => {
                    shared = back;
                    thread::yield_now();
                }
            }
        };
        assert_eq!(packet.data(), b"data");
        packet.data_mut().copy_from_slice(b"next");
        assert_eq!(pool.audit().shared, 0);
        drop(packet);
        device.join().unwrap();
        drop(cache);
        pool.check_leaks().unwrap();
    });
}
