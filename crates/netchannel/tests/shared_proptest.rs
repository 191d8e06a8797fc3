//! Random sequences of share / clone / drop / frame / release / unshare operations on shared pool
//! buffers across two caches, checked against a model: which buffers are shared, how many handles
//! each has, whether a frame of it is in flight (a second frame is refused exactly then), what data
//! every handle and frame reads, and where frames are released (dropped, rebuilt from their token on
//! another cache, or freed by token through `free_burst` or a return channel's `reclaim`). After
//! every step the pool's audit matches the model; at the end everything is dropped and the leak
//! check passes: no shared buffer is lost or freed twice.

use std::collections::BTreeMap;

use netchannel::channel::Channel;
use netchannel::pool::{FrameError, HugePages, Pool, PoolCache, SharedPacket};
use proptest::prelude::*;

const CACHES: usize = 2;
const HEADROOM: usize = 16;
/// Each cache's size, and the batch it spills to the depot when full.
const CACHE_SIZE: usize = 4;
const BATCH: usize = 2;

#[derive(Clone, Debug)]
enum Op {
    /// Allocate on `cache`, fill with `len` bytes of `seed`, share.
    Share { cache: usize, len: usize, seed: u8 },
    /// Clone the `pick`-th handle.
    Clone { pick: usize },
    /// Drop the `pick`-th handle.
    Drop { pick: usize },
    /// Take a frame of the `pick`-th handle's buffer on `cache` with `headers` header bytes.
    Frame { pick: usize, cache: usize, headers: usize },
    /// Release the `pick`-th frame in flight: 0 drop it, 1 `free_burst` its token, 2 send its
    /// token through a return channel and `reclaim` it.
    Release { pick: usize, cache: usize, how: u8 },
    /// Try to take the `pick`-th handle's buffer back as a writable packet.
    Unshare { pick: usize, cache: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..CACHES, 0usize..40, any::<u8>()).prop_map(|(cache, len, seed)| Op::Share { cache, len, seed }),
        4 => any::<usize>().prop_map(|pick| Op::Clone { pick }),
        4 => any::<usize>().prop_map(|pick| Op::Drop { pick }),
        5 => (any::<usize>(), 0..CACHES, 0usize..=HEADROOM + 2)
            .prop_map(|(pick, cache, headers)| Op::Frame { pick, cache, headers }),
        4 => (any::<usize>(), 0..CACHES, 0u8..3).prop_map(|(pick, cache, how)| Op::Release { pick, cache, how }),
        1 => (any::<usize>(), 0..CACHES).prop_map(|(pick, cache)| Op::Unshare { pick, cache }),
    ]
}

/// The model of one shared buffer.
#[derive(Debug)]
struct Buffer {
    handles: usize,
    frame: bool,
    data: Vec<u8>,
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let pool = Pool::builder(16)
        .hugepages(HugePages::Never)
        .headroom(HEADROOM)
        .data_room(48)
        .batch(BATCH)
        .cache_size(CACHE_SIZE)
        .build()
        .unwrap();
    let caches: Vec<PoolCache> = (0..CACHES).map(|_| pool.cache()).collect();
    let (mut ret_tx, mut ret_rx) = Channel::builder(4).build().unwrap();
    let mut handles: Vec<SharedPacket> = Vec::new();
    // Frames in flight, as (token, headers written).
    let mut frames: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut model: BTreeMap<u32, Buffer> = BTreeMap::new();

    for op in ops {
        match *op {
            Op::Share { cache, len, seed } => {
                let Some(mut packet) = caches[cache].alloc() else { continue };
                let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i.to_le_bytes()[0])).collect();
                packet.extend_from_slice(&data).unwrap();
                let shared = packet.into_shared().unwrap();
                prop_assert!(!model.contains_key(&shared.index()), "a shared buffer handed out again");
                model.insert(shared.index(), Buffer { handles: 1, frame: false, data });
                handles.push(shared);
            }
            Op::Clone { pick } => {
                if handles.is_empty() {
                    continue;
                }
                let h = handles[pick % handles.len()].clone();
                model.get_mut(&h.index()).unwrap().handles += 1;
                handles.push(h);
            }
            Op::Drop { pick } => {
                if handles.is_empty() {
                    continue;
                }
                let h = handles.swap_remove(pick % handles.len());
                let index = h.index();
                drop(h);
                let b = model.get_mut(&index).unwrap();
                b.handles -= 1;
                if b.handles == 0 && !b.frame {
                    model.remove(&index);
                }
            }
            Op::Frame { pick, cache, headers } => {
                if handles.is_empty() {
                    continue;
                }
                let h = &handles[pick % handles.len()];
                let b = model.get_mut(&h.index()).unwrap();
                prop_assert_eq!(h.data(), &b.data[..]);
                match h.frame(&caches[cache], headers) {
                    Ok(mut frame) => {
                        prop_assert!(!b.frame, "a second frame in flight");
                        prop_assert!(headers <= HEADROOM);
                        let head: Vec<u8> = (0..headers).map(|i| i.to_le_bytes()[0] ^ 0xA5).collect();
                        prop_assert_eq!(frame.data_mut().len(), headers);
                        frame.data_mut().copy_from_slice(&head);
                        prop_assert_eq!(&frame.data()[..headers], &head[..]);
                        prop_assert_eq!(&frame.data()[headers..], &b.data[..]);
                        b.frame = true;
                        frames.push((frame.into_raw(), head));
                    }
                    Err(FrameError::InFlight) => prop_assert!(b.frame && headers <= HEADROOM),
                    // Checked first: whether or not a frame is in flight.
                    Err(FrameError::NoHeadroom { requested, available }) => {
                        prop_assert_eq!((requested, available), (headers, HEADROOM));
                        prop_assert!(headers > HEADROOM);
                    }
                    Err(e) => prop_assert!(false, "{}", e),
                }
            }
            Op::Release { pick, cache, how } => {
                if frames.is_empty() {
                    continue;
                }
                let (token, head) = frames.swap_remove(pick % frames.len());
                let index = token & !netchannel::pool::FRAME_TAG;
                let b = model.get_mut(&index).unwrap();
                let last = b.handles == 0;
                let before = caches[cache].len();
                match how {
                    0 => {
                        // SAFETY: a token this test took with `into_raw` and kept once.
                        let frame = unsafe { caches[cache].frame_from_raw(token) };
                        prop_assert_eq!(&frame.data()[..head.len()], &head[..]);
                        prop_assert_eq!(&frame.data()[head.len()..], &b.data[..]);
                        drop(frame);
                    }
                    // SAFETY: as above.
                    1 => unsafe { caches[cache].free_burst(&[token]) },
                    _ => {
                        ret_tx.push(token).unwrap();
                        // SAFETY: the channel carries only tokens this test gave up, each once.
                        let taken = unsafe { caches[cache].reclaim(&mut ret_rx) };
                        prop_assert_eq!(taken, usize::from(last));
                    }
                }
                // `free_burst` and `reclaim` free the buffer of a last reference into this cache
                // (spilling a batch first when full); a dropped frame frees into the frames cache.
                // `reclaim` makes that room before it pops what the channel holds, so a full cache
                // spills a batch for a token whether or not it is the last reference.
                let spilled = if how == 2 && before >= CACHE_SIZE { BATCH } else { 0 };
                if how != 0 && last {
                    prop_assert_ne!(caches[cache].len(), before);
                } else {
                    prop_assert_eq!(caches[cache].len(), before - spilled);
                }
                b.frame = false;
                if last {
                    model.remove(&index);
                }
            }
            Op::Unshare { pick, cache } => {
                if handles.is_empty() {
                    continue;
                }
                let h = handles.swap_remove(pick % handles.len());
                let index = h.index();
                let sole = {
                    let b = &model[&index];
                    b.handles == 1 && !b.frame
                };
                match h.try_into_packet(&caches[cache]) {
                    Ok(mut packet) => {
                        prop_assert!(sole);
                        let b = model.remove(&index).unwrap();
                        prop_assert_eq!(packet.data(), &b.data[..]);
                        packet.extend_from_slice(b"w").unwrap(); // writable again
                    }
                    Err(h) => {
                        prop_assert!(!sole);
                        handles.push(h);
                    }
                }
            }
        }
        for c in &caches {
            prop_assert_eq!(c.stats().rejected, 0);
        }
        let audit = pool.audit();
        prop_assert_eq!(audit.shared, model.len());
        prop_assert_eq!(audit.outstanding, model.len());
    }
    drop(handles);
    for (token, _) in frames {
        // SAFETY: as in `Release`.
        unsafe { caches[0].free_burst(&[token]) };
    }
    prop_assert_eq!(pool.audit().shared, 0);
    drop(caches);
    prop_assert_eq!(pool.check_leaks(), Ok(()));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn shared_buffers_follow_the_model(ops in proptest::collection::vec(op(), 0..80)) {
        run(&ops)?;
    }
}
