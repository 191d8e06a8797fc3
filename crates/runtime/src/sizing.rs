//! How large the buffer pool must be so that nothing can exhaust it: every place that can hold a
//! pool buffer, with its bound, summed ([`PoolDemand`]).
//!
//! # Where pool buffers are held, and for how long
//!
//! * **The device's rings**, for as long as the hardware (or the kernel) has them: the 82599's RX
//!   ring (one buffer per descriptor, always posted) and TX ring (until the device reports the
//!   frame sent), plus the driver's stash of fresh buffers (one pool batch); an AF_XDP queue's
//!   fill and RX rings (the kernel moves buffers from one to the other), TX and completion rings;
//!   a TAP holds none (the kernel copies).
//! * **The channels** between the channelizers and the cores: an N x N matrix of lanes, a default
//!   channel and a TX channel a core, [`CHANNEL`] frames each. A full channel refuses the frame
//!   (the channelizer counts it in `dropped_full` and frees the buffer at once), so a channel
//!   never holds more than its capacity, whatever the consumer does.
//! * **Per-thread caches**: every [`PoolCache`](netchannel::pool::PoolCache) keeps up to the
//!   pool's `cache_size` free buffers that other threads cannot take: a core's channelizer, its
//!   stack's interface, and its device queue (the driver's or the AF_XDP queue's own).
//! * **Bursts in flight**, within one call: the channelizer's receive and transmit batches, the
//!   core's batch of frames popped from its channels, and the stack's batch of frames to send.
//! * **Not the stacks.** A tcp-lib stack holds no pool buffer between calls: it reads a received
//!   frame where it lies and lends its payload to the application only during that call
//!   (zero-copy receive), copying what the application leaves into the connection's heap ring, and
//!   it hands every frame it builds to its batch at once (see tcp-lib's `stack` module, *Memory*).
//!   So connections that stop reading, or peers that stop acknowledging, hold heap memory (bounded
//!   by the stack's `buffer_memory`), never pool buffers. Frames forwarded behind a stolen
//!   connection are copies too.
//!
//! The pool is sized to the sum, plus a **reserve for the RX refill**: a burst and a pool batch per
//! queue, so that even with every ring, channel, cache and batch above full, the driver can replace
//! the buffers of the frames it receives (which the channelizer then drops into full channels, and
//! so back into the pool). `rx_no_buffer` in each queue's device counters counts receive paths that
//! found the pool empty; with this sizing it stays 0.
//!
//! ```text
//! pool = queues x (device rings + driver stash)          (82599: rx_ring + tx_ring + batch;
//!                                                         AF_XDP: fill + rx + tx + completion + batch; TAP: 0)
//!      + cores x (cores + 2) x CHANNEL                    (lanes, default and TX channels)
//!      + 3 x cores x cache_size                           (channelizer, interface and device caches)
//!      + 4 x cores x BURST                                (batches in flight)
//!      + queues x (BURST + batch)                         (the RX refill reserve)
//!      + cores x service buffers                          (what a service keeps in the pool)
//! ```
//!
//! **Service buffers** are what a service holds for as long as it runs, asked for with
//! [`Builder::service_buffers`](crate::Builder::service_buffers): httpd keeps its prepared
//! responses in pool buffers to send them by reference (0 unless asked).
//!
//! With the defaults (`CHANNEL` 1024, `BURST` 32, a batch of 64 and caches of 128, 512-descriptor
//! 82599 rings) that is 4,768 buffers for one core and 31,360 for four, about 2.2 KiB each. The
//! channel matrix dominates from two cores on: its cost grows with the square of the cores.

use netchannel::pool::{DEFAULT_BATCH, Pool};

use crate::core::BURST;
use crate::wiring::CHANNEL;

/// What a backend's device holds per queue, at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rings {
    /// An 82599 queue (or its model): descriptors in the RX and TX rings.
    Ixgbe { rx: usize, tx: usize },
    /// An AF_XDP queue: entries of the fill, RX, TX and completion rings.
    Xdp { fill: usize, ring: usize },
    /// A TAP: the kernel copies; nothing held.
    Tap,
}

impl Rings {
    /// Buffers one queue holds in its rings, at most.
    const fn held(self) -> usize {
        match self {
            Self::Ixgbe { rx, tx } => rx + tx,
            Self::Xdp { fill, ring } => fill + 3 * ring,
            Self::Tap => 0,
        }
    }

    /// Whether the driver keeps a stash of fresh buffers (one pool batch) to refill its rings.
    const fn stash(self) -> bool {
        !matches!(self, Self::Tap)
    }
}

/// The most pool buffers each holder can have at once (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolDemand {
    /// Device rings and driver stashes, all queues.
    pub(crate) device: usize,
    /// Every channel full.
    pub(crate) channels: usize,
    /// Every cache full.
    pub(crate) caches: usize,
    /// Every batch full.
    pub(crate) bursts: usize,
    /// The RX refill reserve.
    pub(crate) reserve: usize,
    /// What the services hold for as long as they run, all cores
    /// ([`Builder::service_buffers`](crate::Builder::service_buffers): httpd's content in the pool,
    /// sent by reference).
    pub(crate) services: usize,
}

impl PoolDemand {
    /// The demand of `cores` cores, one queue each, with `rings` per queue, for a pool of the
    /// default batch and cache size.
    pub(crate) fn new(cores: usize, rings: Rings) -> Self {
        Self::with_batch(cores, rings, DEFAULT_BATCH, 2 * DEFAULT_BATCH)
    }

    fn with_batch(cores: usize, rings: Rings, batch: usize, cache_size: usize) -> Self {
        let stash = if rings.stash() { batch } else { 0 };
        Self {
            device: cores * (rings.held() + stash),
            channels: cores * (cores + 2) * CHANNEL,
            caches: 3 * cores * cache_size,
            bursts: 4 * cores * BURST,
            reserve: cores * (BURST + batch),
            services: 0,
        }
    }

    /// The demand with `per_core` buffers held by each core's service.
    pub(crate) const fn with_services(mut self, cores: usize, per_core: usize) -> Self {
        self.services = cores.saturating_mul(per_core);
        self
    }

    /// The pool size that nothing can exhaust.
    pub(crate) const fn total(&self) -> usize {
        self.device + self.channels + self.caches + self.bursts + self.reserve + self.services
    }

    /// Checks a built pool against the demand recomputed with its own batch and cache sizes.
    ///
    /// # Errors
    /// The demand, when the pool has fewer buffers (the backend's `OpenError::PoolTooSmall` says
    /// how many each holder needs).
    pub(crate) fn check(cores: usize, rings: Rings, per_core: usize, pool: &Pool) -> Result<(), Self> {
        let demand =
            Self::with_batch(cores, rings, pool.batch(), pool.cache_size()).with_services(cores, per_core);
        if pool.buffers() as usize >= demand.total() { Ok(()) } else { Err(demand) }
    }
}

impl std::fmt::Display for PoolDemand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} in device rings, {} in channels, {} in caches, {} in bursts, {} reserved for the RX refill",
            self.device, self.channels, self.caches, self.bursts, self.reserve
        )?;
        if self.services > 0 {
            write!(f, ", {} held by the services", self.services)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use netchannel::pool::HugePages;

    use super::*;

    const MODEL: Rings = Rings::Ixgbe { rx: 512, tx: 512 };

    #[test]
    fn the_formula_in_the_documentation() {
        assert_eq!(PoolDemand::new(1, MODEL).total(), 4768);
        assert_eq!(PoolDemand::new(4, MODEL).total(), 31_360);
        // The sizes the backends used before: four cores' channels alone outgrew 4096 x 5.
        assert!(PoolDemand::new(4, MODEL).channels > 4096 * 5);
        let xdp = PoolDemand::new(2, Rings::Xdp { fill: 1024, ring: 1024 });
        assert_eq!(xdp.device, 2 * (4096 + 64));
        assert_eq!(PoolDemand::new(1, Rings::Tap).device, 0);
        // httpd's responses in the pool: 1146 buffers a core (the demo set), on two cores.
        let served = PoolDemand::new(2, MODEL).with_services(2, 1146);
        assert_eq!(served.total(), PoolDemand::new(2, MODEL).total() + 2292);
        assert!(served.to_string().ends_with(", 2292 held by the services"), "{served}");
    }

    #[test]
    fn a_pool_below_the_demand_is_refused_with_each_share() {
        let pool = Pool::builder(4000).hugepages(HugePages::Never).build().unwrap();
        let demand = PoolDemand::check(1, MODEL, 0, &pool).unwrap_err();
        assert_eq!(demand.total(), 4768);
        let err = demand.to_string();
        assert!(err.contains("1088 in device rings") && err.contains("3072 in channels"), "{err}");
        let pool = Pool::builder(4768).hugepages(HugePages::Never).build().unwrap();
        PoolDemand::check(1, MODEL, 0, &pool).unwrap();
    }
}
