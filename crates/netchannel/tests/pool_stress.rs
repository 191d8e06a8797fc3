//! Two threads move a few hundred thousand packets between their caches: the driver thread allocates,
//! writes a sequence header and a payload, and sends each packet through a packet channel; the consumer
//! thread checks every byte and the metadata, then frees half of the packets into its own cache (they
//! come back through the depot) and sends the other half's indices back through a raw return channel
//! that the driver reclaims. A per-buffer ownership flag catches any buffer handed out while live.
//! The packet count scales with `NETCHANNEL_STRESS_ITEMS` (default 300,000).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use netchannel::channel::{Channel, WakeMode};
use netchannel::pool::{HugePages, Packet, Pool};

fn packets() -> u64 {
    std::env::var("NETCHANNEL_STRESS_ITEMS").ok().and_then(|s| s.parse().ok()).unwrap_or(300_000)
}
const SEQ_HEADER: usize = 8;

fn payload_len(seq: u64) -> usize {
    16 + (seq % 200) as usize
}

fn payload_byte(seq: u64, index: u32, i: usize) -> u8 {
    // The low byte of each.
    seq.to_le_bytes()[0].wrapping_mul(31) ^ index.to_le_bytes()[0] ^ i.to_le_bytes()[0]
}

fn fill(packet: &mut Packet<'_>, seq: u64) {
    let index = packet.index();
    packet.set_len(payload_len(seq)).unwrap();
    for (i, b) in packet.data_mut().iter_mut().enumerate() {
        *b = payload_byte(seq, index, i);
    }
    packet.prepend(SEQ_HEADER).unwrap().copy_from_slice(&seq.to_le_bytes());
}

fn check(packet: &Packet<'_>, expected_seq: u64, headroom: usize) {
    let data = packet.data();
    let seq = u64::from_le_bytes(data[..SEQ_HEADER].try_into().unwrap());
    assert_eq!(seq, expected_seq, "packets arrive in order");
    assert_eq!(packet.headroom(), headroom - SEQ_HEADER, "metadata travels with the buffer");
    assert_eq!(data.len(), SEQ_HEADER + payload_len(seq));
    let index = packet.index();
    for (i, &b) in data[SEQ_HEADER..].iter().enumerate() {
        assert_eq!(b, payload_byte(seq, index, i), "seq {seq} buffer {index} byte {i}");
    }
}

#[test]
fn two_threads_move_packets_through_channels() {
    let started = Instant::now();
    let packets = packets();
    let pool = Pool::builder(1024).hugepages(HugePages::Never).batch(32).build().unwrap();
    let headroom = pool.headroom();
    let owned: std::sync::Arc<Vec<AtomicBool>> =
        std::sync::Arc::new((0..pool.buffers()).map(|_| AtomicBool::new(false)).collect());
    let (mut tx, mut rx) = pool.packet_channel(256).unwrap();
    let (mut ret_tx, mut ret_rx) = Channel::builder(128).wake(WakeMode::Poll).build().unwrap();

    let consumer = {
        let pool = pool.clone();
        let owned = std::sync::Arc::clone(&owned);
        std::thread::spawn(move || {
            let cache = pool.cache();
            let mut next = 0u64;
            let mut returned = 0u64;
            loop {
                let Some(packet) = rx.pop(&cache) else {
                    if rx.wait(Some(Duration::from_secs(10))).is_closed() {
                        break;
                    }
                    continue;
                };
                check(&packet, next, headroom);
                // This thread gives the buffer up now: clear the flag before anyone can reuse it.
                assert!(owned[packet.index() as usize].swap(false, Ordering::AcqRel));
                if next % 2 == 1 {
                    let index = packet.into_raw();
                    if ret_tx.push(index).is_ok() {
                        returned += 1;
                    } else {
                        // SAFETY: `index` came from `into_raw` above and was not sent.
                        drop(unsafe { cache.packet_from_raw(index) });
                    }
                } else {
                    drop(packet); // into this thread's cache; spilled to the depot in batches
                }
                next += 1;
            }
            let stats = cache.stats();
            (next, returned, stats)
        })
    };

    let cache = pool.cache();
    let mut reclaimed = 0;
    for seq in 0..packets {
        let mut packet = loop {
            if let Some(p) = cache.alloc() {
                break p;
            }
            // Everything is in flight or in the consumer's cache: take returns, let it run.
            // SAFETY: the return channel only carries indices the consumer gave up.
            reclaimed += unsafe { cache.reclaim(&mut ret_rx) };
            std::thread::yield_now();
        };
        assert!(!owned[packet.index() as usize].swap(true, Ordering::AcqRel), "buffer live twice");
        fill(&mut packet, seq);
        while let Err(full) = tx.push(packet) {
            packet = full.into_inner();
            std::thread::yield_now();
        }
        if seq % 64 == 0 {
            // SAFETY: as above.
            reclaimed += unsafe { cache.reclaim(&mut ret_rx) };
        }
    }
    drop(tx);
    let (received, returned, consumer_stats) = consumer.join().unwrap();
    // SAFETY: as above; the consumer is gone, so this drains the last returns.
    reclaimed += unsafe { cache.reclaim(&mut ret_rx) };
    assert_eq!(received, packets);
    assert_eq!(reclaimed as u64, returned);
    assert!(returned > 0, "the return path was exercised");
    assert!(consumer_stats.spills > 0, "the depot path was exercised");
    let stats = cache.stats();
    assert_eq!(stats.allocs, packets);
    assert!(stats.refills > 0);
    assert!(owned.iter().all(|f| !f.load(Ordering::Relaxed)));
    drop(cache);
    let audit = pool.audit();
    assert_eq!((audit.in_depot, audit.outstanding, audit.live_caches), (1024, 0, 0));
    pool.check_leaks().unwrap();
    eprintln!("{packets} packets in {:?}", started.elapsed());
}
