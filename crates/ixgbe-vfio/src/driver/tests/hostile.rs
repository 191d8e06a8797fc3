//! A device that writes whatever it likes: property tests of the data path against it.
//!
//! RX: descriptors completed in any slot (the device's own, the one at the tail, re-armed ones
//! waiting to be handed back, ones already completed), with any status and length, between bursts
//! of any size, with the caller's cache sometimes dry. Nothing it writes may panic the driver,
//! deliver a frame from a slot the device did not own, skip or repeat a slot, or lose a buffer.
//!
//! TX: DD written into any descriptor at any time (in flight or not, the last of a batch or
//! not), between bursts of any size, with packets the device cannot address and of another pool
//! among them. Nothing may panic the driver, free a buffer twice or lose one, or break the
//! accounting of the frames sent, dropped and in flight.

use proptest::prelude::*;

use super::*;

/// The test's ring: `config`'s 64 slots.
const RING: usize = 64;
/// The status bits a completion may carry besides DD.
const STATUS_BITS: [u64; 4] = [rx::STAT_EOP, rx::ERR_RXE, rx::STAT_FLM, rx::STAT_EOP];

#[derive(Clone, Debug)]
enum Op {
    /// The device completes slot `cursor + offset` (any slot, owned or not) with these status bits
    /// (indices into [`STATUS_BITS`]) and length.
    Complete { offset: usize, bits: Vec<usize>, len: u64 },
    /// The device completes every slot it owns with a good 60-byte frame.
    Fill,
    /// The device writes on past the tail, in ring order: good frames into the tail's slot and the
    /// next `n - 1` (at most up to the cursor), none of which it owns.
    Overrun { n: usize },
    /// `rx_burst` into a batch of this capacity.
    Receive { burst: usize },
    /// The caller's cache is emptied into a held vector (true) or given everything back (false).
    Starve(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..RING, proptest::collection::vec(0..STATUS_BITS.len(), 0..3), len())
            .prop_map(|(offset, bits, len)| Op::Complete { offset, bits, len }),
        1 => Just(Op::Fill),
        1 => (1..=RING).prop_map(|n| Op::Overrun { n }),
        4 => (1..=RING).prop_map(|burst| Op::Receive { burst }),
        1 => any::<bool>().prop_map(Op::Starve),
    ]
}

/// Descriptor lengths: around zero, a minimal frame, the buffer's size (2 KiB), anything.
fn len() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..=8, 56u64..=64, 2040u64..=2100, 0u64..=u64::from(u16::MAX)]
}

/// What the test knows of the ring, as the device.
struct Device {
    /// The slot the driver reads next: advanced by every descriptor it consumed (a frame or a
    /// drop; a slot scrubbed past the tail is not consumed).
    cursor: usize,
    /// Per completion that wrote a frame (its number is the frame's tag): whether its descriptor
    /// was last written past the tail in ring order (an overrun, which the driver must scrub,
    /// never deliver).
    overrun: Vec<bool>,
    /// The tag in each slot's buffer, since the slot was last armed.
    tags: [Option<usize>; RING],
    /// The driver is inside a chain it drops (a descriptor without EOP was consumed last).
    discard: bool,
}

impl Device {
    /// Completes `slot` with `status` (DD added) and `len`: a frame (the slot and the completion's
    /// number) goes into the slot's buffer when the slot is armed (its address word is a
    /// buffer's), and the status word is written in any case. `owned`: the slot is between the
    /// cursor and the tail; `overrun`: the device is writing on from the tail in ring order.
    fn complete(
        &mut self,
        q: &IxgbeQueue,
        slot: usize,
        (status, len): (u64, u64),
        owned: bool,
        overrun: bool,
    ) {
        let ring = q.rx_ring();
        let addr = ring.load_u64(slot * DESC_LEN, Ordering::Relaxed);
        if addr == 0xdead_beef {
            // Completed before and not taken since: only the status changes.
            if let Some(tag) = self.tags[slot] {
                self.overrun[tag] = !owned && (self.overrun[tag] || overrun);
            }
        } else {
            let mut tag = [0u8; 8];
            tag[..4].copy_from_slice(&u32::try_from(slot).expect("small").to_le_bytes());
            tag[4..].copy_from_slice(&u32::try_from(self.overrun.len()).expect("small").to_le_bytes());
            self.tags[slot] = Some(self.overrun.len());
            self.overrun.push(overrun);
            // SAFETY: IOVA = virtual address here, and an armed slot's buffer is the queue's (no
            // packet exists for it), at least 2 KiB.
            unsafe { std::ptr::copy_nonoverlapping(tag.as_ptr(), addr as *mut u8, tag.len()) };
            ring.store_u64(slot * DESC_LEN, 0xdead_beef, Ordering::Relaxed);
        }
        ring.store_u64(slot * DESC_LEN + 8, rx::STAT_DD | status | len << rx::LEN_SHIFT, Ordering::Release);
    }
}

/// How many slots the device owns: from the cursor up to, not including, the tail (RDT).
fn owned(bar: &FakeBar, cursor: usize) -> usize {
    (bar.get(regs::rdt(0)) as usize + RING - cursor) % RING
}

/// `rx_burst` into a batch of `burst`, checked against what the device wrote: the driver consumed
/// only slots the device owned, and delivered exactly the good frames among them, in ring order,
/// none written past the tail. Returns the frames delivered.
fn receive(
    q: &mut IxgbeQueue,
    cache: &PoolCache,
    bar: &FakeBar,
    dev: &mut Device,
    burst: usize,
) -> Result<usize, TestCaseError> {
    let owned = owned(bar, dev.cursor);
    let (before, past_before) = (q.stats(), q.queue_stats().rx_past_tail);
    // The status words from the cursor on, as the driver will find them.
    let statuses: Vec<u64> = (0..RING)
        .map(|i| (dev.cursor + i) % RING * DESC_LEN + 8)
        .map(|word| q.rx_ring().load_u64(word, Ordering::Relaxed))
        .collect();
    let mut batch = PacketBatch::with_capacity(burst);
    let n = q.rx_burst(0, cache, &mut batch).expect("rx_burst");
    let (after, past_after) = (q.stats(), q.queue_stats().rx_past_tail);
    prop_assert_eq!(n, batch.len());
    prop_assert!(n <= burst);
    prop_assert_eq!(after.rx_packets - before.rx_packets, n as u64);
    let dropped = (after.rx_errors - before.rx_errors) - (past_after - past_before);
    let consumed = n + usize::try_from(dropped).expect("small");
    prop_assert!(consumed <= owned, "consumed {} of the {} owned", consumed, owned);
    // The frames are exactly those the consumed descriptors say, in ring order: good (EOP, no
    // error, a length of 1 to 2 KiB) and not inside a chain (a descriptor without EOP and the rest
    // of its frame are dropped), each the frame last written into its slot (checked by its tag
    // when it is long enough to hold it).
    let mut expected = Vec::new();
    let slots = (0..consumed).map(|i| (dev.cursor + i) % RING);
    for (slot, status) in slots.zip(&statuses) {
        let len = (status >> rx::LEN_SHIFT) & 0xFFFF;
        let good = status & (rx::STAT_EOP | rx::ERR_FRAME_MASK) == rx::STAT_EOP && (1..=2048).contains(&len);
        if good && !dev.discard {
            expected.push((slot, len));
        } else {
            dev.discard = status & rx::STAT_EOP == 0;
        }
    }
    prop_assert_eq!(batch.len(), expected.len(), "the consumed slots' frames {:?}", expected);
    for (p, &(slot, len)) in batch.as_slice().iter().zip(&expected) {
        prop_assert_eq!(p.len() as u64, len, "the length of slot {}", slot);
        let Some(tag) = p.data().first_chunk::<8>() else { continue };
        let tagged = u32::from_le_bytes(tag[..4].try_into().expect("4 bytes")) as usize;
        let write = u32::from_le_bytes(tag[4..].try_into().expect("4 bytes")) as usize;
        prop_assert_eq!(tagged, slot, "the frame of slot {}", slot);
        prop_assert_eq!(Some(write), dev.tags[slot], "the last frame written to slot {}", slot);
        prop_assert!(!dev.overrun[write], "frame {} was written past the tail, to slot {}", write, slot);
    }
    for i in 0..consumed {
        dev.tags[(dev.cursor + i) % RING] = None;
    }
    dev.cursor = (dev.cursor + consumed) % RING;
    Ok(n)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_device_write_breaks_the_rx_path(
        paged in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let bar = FakeBar::new(Script::default());
        let pool = pool();
        // Under a page-wise translation (no IOMMU) the fresh buffers come from the queue's stash.
        let dma: Arc<dyn DmaSpace> = if paged { Arc::new(PagedHeapDma) } else { Arc::new(HeapDma) };
        let (_nic, mut queues) =
            Ixgbe::init("hostile", Arc::clone(&bar) as Arc<dyn Mmio>, dma, &pool, config(1)).expect("init");
        let q = &mut queues[0];
        let cache = pool.cache();
        let mut held: Vec<Packet<'_>> = Vec::new();
        let mut dev = Device { cursor: 0, overrun: Vec::new(), tags: [None; RING], discard: false };
        let owns = |cursor: usize, slot: usize| (slot + RING - cursor) % RING < owned(&bar, cursor);
        let mut delivered = 0u64;
        for op in ops {
            match op {
                Op::Complete { offset, bits, len } => {
                    let status = bits.iter().fold(0, |s, &b| s | STATUS_BITS[b]);
                    let slot = (dev.cursor + offset) % RING;
                    dev.complete(q, slot, (status, len), owns(dev.cursor, slot), false);
                }
                Op::Fill => {
                    let mut slot = dev.cursor;
                    while slot != bar.get(regs::rdt(0)) as usize {
                        dev.complete(q, slot, (rx::STAT_EOP, 60), true, false);
                        slot = (slot + 1) % RING;
                    }
                }
                Op::Overrun { n } => {
                    let tail = bar.get(regs::rdt(0)) as usize;
                    let not_owned = (RING - owned(&bar, dev.cursor)) % RING;
                    for i in 0..n.min(not_owned) {
                        dev.complete(q, (tail + i) % RING, (rx::STAT_EOP, 60), false, true);
                    }
                }
                Op::Starve(true) => held.extend(std::iter::from_fn(|| cache.alloc())),
                Op::Starve(false) => held.clear(),
                Op::Receive { burst } => delivered += receive(q, &cache, &bar, &mut dev, burst)? as u64,
            }
        }
        prop_assert_eq!(q.stats().rx_packets, delivered);
        drop(held);
        drop(queues);
        drop(cache);
        prop_assert!(pool.check_leaks().is_ok(), "{:?}", pool.check_leaks());
    }
}

/// A TX step of the device or the caller.
#[derive(Clone, Debug)]
enum TxOp {
    /// `tx_burst` of packets of these kinds (0: empty, which the device cannot address; 1: 60
    /// bytes; 2: 1514 bytes), one of another pool at `foreign` if it is inside the batch.
    Send { kinds: Vec<u8>, foreign: usize },
    /// The device writes DD into slot `slot`, whatever it holds.
    Done { slot: usize },
    /// The device finishes the oldest `n` frames in flight, in order.
    DoneInOrder { n: usize },
}

fn tx_op() -> impl Strategy<Value = TxOp> {
    prop_oneof![
        3 => (proptest::collection::vec(0u8..3, 1..80), prop_oneof![Just(0), 0..100usize])
            .prop_map(|(kinds, foreign)| TxOp::Send { kinds, foreign }),
        2 => (0..RING).prop_map(|slot| TxOp::Done { slot }),
        2 => (1..=RING).prop_map(|n| TxOp::DoneInOrder { n }),
    ]
}

/// One `tx_burst` of `kinds` (see [`TxOp::Send`]), checked: packets taken from the front, each
/// written to a descriptor or dropped and counted, the in-flight count moved by exactly what was
/// sent and cleaned, a packet of another pool refused only at the front.
fn send(
    q: &mut IxgbeQueue,
    cache: &PoolCache,
    other: &PoolCache,
    kinds: &[u8],
    foreign: usize,
) -> Result<(), TestCaseError> {
    let mut batch = PacketBatch::with_capacity(kinds.len());
    for (i, &kind) in kinds.iter().enumerate() {
        let Some(mut p) = (if i == foreign { other.alloc() } else { cache.alloc() }) else { break };
        let len = [0, 60, 1514][usize::from(kind)];
        p.extend_from_slice(&vec![kind; len]).expect("fits");
        batch.push(p).expect("room");
    }
    let (before, extra, in_flight) = (q.stats(), q.queue_stats(), q.tx_in_flight());
    let len = batch.len();
    let result = q.tx_burst(0, &mut batch);
    let (after, extra_after) = (q.stats(), q.queue_stats());
    let cleaned = usize::try_from(extra_after.tx_cleaned - extra.tx_cleaned).expect("small");
    let sent = usize::try_from(after.tx_packets - before.tx_packets).expect("small");
    let dropped = usize::try_from(after.tx_dropped - before.tx_dropped).expect("small");
    prop_assert!(cleaned <= in_flight, "cleaned {} of {} in flight", cleaned, in_flight);
    prop_assert_eq!(q.tx_in_flight(), in_flight - cleaned + sent);
    prop_assert!(q.tx_in_flight() < RING);
    match result {
        Ok(taken) => {
            prop_assert_eq!(taken, sent + dropped);
            prop_assert_eq!(batch.len(), len - taken);
            if let Some(p) = batch.as_slice().first() {
                // Left for want of room (as many taken as descriptors were free after the
                // cleaning), or a packet of another pool after others (first, it is an error).
                let free = RING - 1 - (in_flight - cleaned);
                let foreign = p.pool_id() != cache.pool().id();
                prop_assert!(taken == free || foreign, "{} taken, {} free", taken, free);
                prop_assert!(!foreign || taken > 0 || free == 0, "another pool's packet first, and Ok");
            }
        }
        Err(e) => {
            prop_assert!(matches!(e, DevError::WrongPool { .. }), "{}", e);
            prop_assert_eq!((sent, dropped, batch.len()), (0, 0, len), "nothing taken");
            prop_assert_eq!(foreign, 0);
        }
    }
    Ok(())
}

/// The device writes DD into TX slot `slot`.
fn complete_tx(q: &IxgbeQueue, slot: usize) {
    q.tx_ring().store_u64(slot * DESC_LEN + 8, tx::STAT_DD, Ordering::Release);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_device_write_breaks_the_tx_path(ops in proptest::collection::vec(tx_op(), 1..80)) {
        let bar = FakeBar::new(Script::default());
        let pool = pool();
        let other_pool = Pool::builder(64).hugepages(HugePages::Never).build().expect("pool");
        let (_nic, mut queues) = init(&bar, &pool, config(1)).expect("init");
        let q = &mut queues[0];
        let (cache, other) = (pool.cache(), other_pool.cache());
        for op in ops {
            match op {
                TxOp::Send { kinds, foreign } => send(q, &cache, &other, &kinds, foreign)?,
                TxOp::Done { slot } => complete_tx(q, slot),
                TxOp::DoneInOrder { n } => {
                    // The oldest frame in flight is at the slot after the ones cleaned so far.
                    let clean = usize::try_from(q.queue_stats().tx_cleaned).expect("small") % RING;
                    for i in 0..n.min(q.tx_in_flight()) {
                        complete_tx(q, (clean + i) % RING);
                    }
                }
            }
        }
        drop(queues);
        drop((cache, other));
        prop_assert!(pool.check_leaks().is_ok(), "{:?}", pool.check_leaks());
        prop_assert!(other_pool.check_leaks().is_ok(), "{:?}", other_pool.check_leaks());
    }
}
