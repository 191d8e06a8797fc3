//! Random sequences of pool operations across three caches, checked against a model of the pool: how
//! many free buffers each cache and the depot hold (the refill/spill policy), which buffers are live,
//! and what data each live buffer carries. Every buffer is accounted for after every step, no index is
//! handed out while live, metadata travels with the index, and the leak check passes at the end.

use std::collections::{HashSet, VecDeque};

use netchannel::channel::{Channel, Consumer, Producer};
use netchannel::pool::{HugePages, Packet, PacketPushError, PacketRx, PacketTx, Pool, PoolCache};
use proptest::prelude::*;

const OWNERS: usize = 3;
const HEADROOM: usize = 16;
const DATA_ROOM: usize = 48;

#[derive(Clone, Debug)]
enum Op {
    /// `alloc` on owner's cache, then fill with `len` bytes of `seed`.
    Alloc { owner: usize, len: usize, seed: u8 },
    /// `alloc_burst` of `n` raw indices.
    AllocBurst { owner: usize, n: usize },
    /// Rebuild the `pick`-th held buffer, check it, and drop the packet.
    Free { owner: usize, pick: usize },
    /// `free_burst` of up to `n` held buffers.
    FreeBurst { owner: usize, n: usize },
    /// Prepend `n` bytes to a held buffer (may fail: no headroom), or strip them (may fail).
    Edit { owner: usize, pick: usize, n: usize, prepend: bool },
    /// Push a held buffer into the packet channel.
    Send { owner: usize, pick: usize },
    /// Pop one packet from the packet channel into owner's cache.
    Recv { owner: usize },
    /// Push a held buffer's raw index into the return channel.
    Return { owner: usize, pick: usize },
    /// Drain the return channel into owner's cache.
    Reclaim { owner: usize },
    /// Flush owner's cache to the depot.
    Flush { owner: usize },
    /// Drop owner's cache (it is recreated, empty, when next needed).
    DropCache { owner: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS;
    prop_oneof![
        6 => (owner.clone(), 0..=DATA_ROOM, any::<u8>())
            .prop_map(|(owner, len, seed)| Op::Alloc { owner, len, seed }),
        2 => (owner.clone(), 0usize..12).prop_map(|(owner, n)| Op::AllocBurst { owner, n }),
        5 => (owner.clone(), any::<usize>()).prop_map(|(owner, pick)| Op::Free { owner, pick }),
        2 => (owner.clone(), 0usize..12).prop_map(|(owner, n)| Op::FreeBurst { owner, n }),
        2 => (owner.clone(), any::<usize>(), 0usize..24, any::<bool>())
            .prop_map(|(owner, pick, n, prepend)| Op::Edit { owner, pick, n, prepend }),
        3 => (owner.clone(), any::<usize>()).prop_map(|(owner, pick)| Op::Send { owner, pick }),
        3 => owner.clone().prop_map(|owner| Op::Recv { owner }),
        2 => (owner.clone(), any::<usize>()).prop_map(|(owner, pick)| Op::Return { owner, pick }),
        1 => owner.clone().prop_map(|owner| Op::Reclaim { owner }),
        1 => owner.clone().prop_map(|owner| Op::Flush { owner }),
        1 => owner.prop_map(|owner| Op::DropCache { owner }),
    ]
}

/// A buffer owned by the test: its index and the packet it must still hold.
#[derive(Clone, Debug)]
struct Held {
    index: u32,
    headroom: usize,
    data: Vec<u8>,
}

/// The pool as the model sees it: free counts per cache and in the depot.
struct Model {
    batch: usize,
    cache_size: usize,
    depot: usize,
    cached: [usize; OWNERS],
}

impl Model {
    /// One allocation; `false` when the pool has nothing for this cache.
    fn alloc(&mut self, c: usize) -> bool {
        if self.cached[c] == 0 {
            let n = self.batch.min(self.depot);
            self.depot -= n;
            self.cached[c] += n;
        }
        if self.cached[c] == 0 {
            return false;
        }
        self.cached[c] -= 1;
        true
    }

    fn alloc_burst(&mut self, c: usize, want: usize) -> usize {
        let mut got = 0;
        while got < want {
            if self.cached[c] == 0 {
                let n = self.batch.min(self.depot);
                if n == 0 {
                    break;
                }
                self.depot -= n;
                self.cached[c] += n;
            }
            let take = (want - got).min(self.cached[c]);
            self.cached[c] -= take;
            got += take;
        }
        got
    }

    fn free(&mut self, c: usize) {
        if self.cached[c] >= self.cache_size {
            let n = self.batch.min(self.cached[c]);
            self.cached[c] -= n;
            self.depot += n;
        }
        self.cached[c] += 1;
    }

    fn flush(&mut self, c: usize) {
        self.depot += self.cached[c];
        self.cached[c] = 0;
    }
}

struct Harness {
    pool: Pool,
    caches: [Option<PoolCache>; OWNERS],
    held: [Vec<Held>; OWNERS],
    /// Every buffer the test owns or has in flight.
    live: HashSet<u32>,
    tx: PacketTx,
    rx: Option<PacketRx>,
    in_flight: VecDeque<Held>,
    channel_capacity: usize,
    ret_tx: Producer,
    ret_rx: Consumer,
    /// Indices in the return channel, in order.
    returning: Vec<u32>,
    model: Model,
}

fn fill(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i.to_le_bytes()[0])).collect()
}

impl Harness {
    fn cache(&mut self, owner: usize) -> &PoolCache {
        self.caches[owner].get_or_insert_with(|| self.pool.cache())
    }

    fn take_held(&mut self, owner: usize, pick: usize) -> Option<Held> {
        let held = &mut self.held[owner];
        if held.is_empty() { None } else { Some(held.swap_remove(pick % held.len())) }
    }

    fn check_packet(packet: &Packet<'_>, held: &Held) -> Result<(), TestCaseError> {
        prop_assert_eq!(packet.index(), held.index);
        prop_assert_eq!(packet.headroom(), held.headroom);
        prop_assert_eq!(packet.data(), &held.data[..]);
        prop_assert_eq!(packet.tailroom(), HEADROOM + DATA_ROOM - held.headroom - held.data.len());
        Ok(())
    }

    fn newly_live(&mut self, index: u32) -> Result<(), TestCaseError> {
        prop_assert!(index < self.pool.buffers());
        prop_assert!(self.live.insert(index), "index {} handed out while live", index);
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Alloc { owner, len, seed } => {
                let expected = self.model.alloc(owner);
                let cache = self.cache(owner);
                let Some(mut packet) = cache.alloc() else {
                    prop_assert!(!expected, "alloc failed with buffers available");
                    return Ok(());
                };
                prop_assert!(expected, "alloc succeeded with nothing available");
                prop_assert_eq!((packet.len(), packet.headroom()), (0, HEADROOM));
                let data = fill(seed, len);
                packet.extend_from_slice(&data).unwrap();
                let index = packet.into_raw();
                self.newly_live(index)?;
                self.held[owner].push(Held { index, headroom: HEADROOM, data });
            }
            Op::AllocBurst { owner, n } => {
                let expected = self.model.alloc_burst(owner, n);
                let mut out = vec![u32::MAX; n];
                let got = self.cache(owner).alloc_burst(&mut out);
                prop_assert_eq!(got, expected);
                for &index in &out[..got] {
                    self.newly_live(index)?;
                    self.held[owner].push(Held { index, headroom: HEADROOM, data: Vec::new() });
                }
            }
            Op::Free { owner, pick } => {
                let Some(held) = self.take_held(owner, pick) else {
                    return Ok(());
                };
                self.model.free(owner);
                self.live.remove(&held.index);
                let cache = self.cache(owner);
                // SAFETY: the test owns `held.index` (it was in `held`) and no packet for it exists.
                let packet = unsafe { cache.packet_from_raw(held.index) };
                Self::check_packet(&packet, &held)?;
            }
            Op::FreeBurst { owner, n } => {
                let n = n.min(self.held[owner].len());
                let batch: Vec<Held> = self.held[owner].drain(..n).collect();
                let indices: Vec<u32> = batch.iter().map(|h| h.index).collect();
                for h in &batch {
                    self.model.free(owner);
                    self.live.remove(&h.index);
                }
                // SAFETY: the test owns these distinct indices and gives them up.
                unsafe { self.cache(owner).free_burst(&indices) };
            }
            Op::Edit { owner, pick, n, prepend } => {
                let Some(mut held) = self.take_held(owner, pick) else {
                    return Ok(());
                };
                let cache = self.cache(owner);
                // SAFETY: owned by the test, no other packet; turned back into an index below.
                let mut packet = unsafe { cache.packet_from_raw(held.index) };
                if prepend {
                    match packet.prepend(n) {
                        Ok(front) => {
                            prop_assert!(n <= held.headroom);
                            front.fill(0xEE);
                            held.headroom -= n;
                            held.data.splice(0..0, std::iter::repeat_n(0xEE, n));
                        }
                        Err(_) => prop_assert!(n > held.headroom),
                    }
                } else {
                    match packet.strip_front(n) {
                        Ok(()) => {
                            prop_assert!(n <= held.data.len());
                            held.headroom += n;
                            held.data.drain(..n);
                        }
                        Err(_) => prop_assert!(n > held.data.len()),
                    }
                }
                Self::check_packet(&packet, &held)?;
                let _ = packet.into_raw();
                self.held[owner].push(held);
            }
            Op::Send { owner, pick } => {
                let Some(held) = self.take_held(owner, pick) else {
                    return Ok(());
                };
                let cache = self.caches[owner].get_or_insert_with(|| self.pool.cache());
                // SAFETY: owned by the test, no other packet.
                let packet = unsafe { cache.packet_from_raw(held.index) };
                match self.tx.push(packet) {
                    Ok(()) => {
                        prop_assert!(self.in_flight.len() < self.channel_capacity);
                        self.in_flight.push_back(held);
                    }
                    Err(PacketPushError::Full(packet)) => {
                        prop_assert_eq!(self.in_flight.len(), self.channel_capacity);
                        let _ = packet.into_raw();
                        self.held[owner].push(held);
                    }
                    Err(e) => prop_assert!(false, "unexpected push error {}", e),
                }
            }
            Op::Recv { owner } => {
                let cache = self.caches[owner].get_or_insert_with(|| self.pool.cache());
                let rx = self.rx.as_mut().unwrap();
                match rx.pop(cache) {
                    None => prop_assert!(self.in_flight.is_empty()),
                    Some(packet) => {
                        let held = self.in_flight.pop_front().expect("model has the packet");
                        Self::check_packet(&packet, &held)?;
                        let _ = packet.into_raw();
                        self.held[owner].push(held);
                    }
                }
            }
            Op::Return { owner, pick } => {
                let Some(held) = self.take_held(owner, pick) else {
                    return Ok(());
                };
                if self.ret_tx.push(held.index).is_ok() {
                    self.returning.push(held.index);
                } else {
                    self.held[owner].push(held);
                }
            }
            Op::Reclaim { owner } => {
                let cache = self.caches[owner].get_or_insert_with(|| self.pool.cache());
                // SAFETY: the return channel carries only indices the test gave up (`Return`).
                let n = unsafe { cache.reclaim(&mut self.ret_rx) };
                prop_assert_eq!(n, self.returning.len());
                for index in self.returning.drain(..) {
                    self.live.remove(&index);
                    self.model.free(owner);
                }
            }
            Op::Flush { owner } => {
                if let Some(cache) = &self.caches[owner] {
                    cache.flush();
                }
                self.model.flush(owner);
            }
            Op::DropCache { owner } => {
                self.caches[owner] = None;
                self.model.flush(owner);
            }
        }
        Ok(())
    }

    /// Every buffer is accounted for, exactly where the model says.
    fn check_accounting(&self) -> Result<(), TestCaseError> {
        let audit = self.pool.audit();
        let live_caches = self.caches.iter().flatten().count();
        let owned =
            self.held.iter().map(Vec::len).sum::<usize>() + self.in_flight.len() + self.returning.len();
        prop_assert_eq!(self.live.len(), owned);
        prop_assert_eq!(audit.total, self.pool.buffers() as usize);
        prop_assert_eq!(audit.in_depot, self.model.depot);
        prop_assert_eq!(audit.in_caches, self.model.cached.iter().sum::<usize>());
        prop_assert_eq!(audit.outstanding, owned);
        prop_assert_eq!(audit.live_caches, live_caches);
        prop_assert_eq!(audit.in_depot + audit.in_caches + audit.outstanding, audit.total);
        for (c, cache) in self.caches.iter().enumerate() {
            match cache {
                Some(cache) => prop_assert_eq!(cache.len(), self.model.cached[c]),
                None => prop_assert_eq!(self.model.cached[c], 0),
            }
        }
        Ok(())
    }

    /// Gives everything back and runs the leak check.
    fn finish(mut self) -> Result<(), TestCaseError> {
        for owner in 0..OWNERS {
            let held = std::mem::take(&mut self.held[owner]);
            let cache = self.caches[owner].get_or_insert_with(|| self.pool.cache());
            for h in held {
                // SAFETY: owned by the test, no other packet.
                let packet = unsafe { cache.packet_from_raw(h.index) };
                Self::check_packet(&packet, &h)?;
            }
        }
        // Packets still in the packet channel go back to the depot with its receiver.
        drop(self.rx.take());
        let cache = self.caches[0].get_or_insert_with(|| self.pool.cache());
        // SAFETY: only indices the test gave up.
        let reclaimed = unsafe { cache.reclaim(&mut self.ret_rx) };
        prop_assert_eq!(reclaimed, self.returning.len());
        prop_assert_eq!(
            self.pool.check_leaks(),
            Err(netchannel::pool::LeakError::LiveCaches(self.caches.iter().flatten().count()))
        );
        self.caches = [None, None, None];
        let audit = self.pool.audit();
        prop_assert_eq!((audit.in_depot, audit.live_caches), (self.pool.buffers() as usize, 0));
        prop_assert_eq!(self.pool.check_leaks(), Ok(()));
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pool_matches_model(
        buffers in 1u32..40,
        batch in 1usize..6,
        extra in 0usize..6,
        channel_capacity in prop_oneof![Just(1usize), Just(2), Just(4), Just(8)],
        ops in proptest::collection::vec(op(), 0..250),
    ) {
        let pool = Pool::builder(buffers)
            .hugepages(HugePages::Never)
            .headroom(HEADROOM)
            .data_room(DATA_ROOM)
            .batch(batch)
            .cache_size(batch + extra)
            .build()
            .unwrap();
        let (tx, rx) = pool.packet_channel(channel_capacity).unwrap();
        let (ret_tx, ret_rx) = Channel::with_capacity(8);
        let model = Model {
            batch: pool.batch(),
            cache_size: pool.cache_size(),
            depot: buffers as usize,
            cached: [0; OWNERS],
        };
        let mut h = Harness {
            pool,
            caches: [None, None, None],
            held: [Vec::new(), Vec::new(), Vec::new()],
            live: HashSet::new(),
            tx,
            rx: Some(rx),
            in_flight: VecDeque::new(),
            channel_capacity,
            ret_tx,
            ret_rx,
            returning: Vec::new(),
            model,
        };
        for op in &ops {
            h.apply(op)?;
            h.check_accounting()?;
        }
        h.finish()?;
    }
}
