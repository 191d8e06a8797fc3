//! Van Jacobson's net channels: the data path of a channelized network stack.
//!
//! A packet is a `u32` index into a [`pool`] of packet buffers; indices, not pointers, cross cores. The
//! driver side pushes each received buffer's index into the [`channel`] of whoever consumes that
//! packet's flow, and the consumer processes it on its own core (Van Jacobson & Felderman, "Speeding up
//! Networking", LCA 2006).
//!
//! * [`channel`]: the cache-aware single-producer/single-consumer ring of indices, with VJ's wakeup
//!   protocol (busy poll, futex, or eventfd); [`wake`]: the same register/re-check protocol as a
//!   wakeup any thread sends to one sleeping thread (a core whose tasks another thread woke).
//! * [`pool`]: the packet buffers: one (hugepage) region, per-core caches, packets that carry their
//!   metadata in the buffer, and a safe packet channel between cores.
//! * [`dev`]: the [`NetDevice`](dev::NetDevice) trait every backend implements, the
//!   [`PacketBatch`](dev::PacketBatch) that bursts travel in, and the software devices: the in-memory
//!   [`Pair`](dev::Pair), Linux [`Tap`](dev::Tap), and the [`PcapWriter`](dev::PcapWriter) and
//!   [`FaultInjector`](dev::FaultInjector) middlewares.
//! * [`signature`]: transport signatures, and [`classify`]: the frame classifier that computes them.
//! * [`rcu`] and [`registry`]: the read-mostly map from transport signatures to consumers, read once
//!   per packet without locks or atomic read-modify-writes (quiescent-state-based reclamation; the
//!   `liburcu` feature adds the system liburcu as a second reclaimer).
//!
//! * [`channelizer`]: the driver loop of one RX queue: receive a burst, classify, look up, push into
//!   the consumer's channel (or the queue's default channel), announce a quiescent state; and drain
//!   the consumers' TX channels into the device.
//! * [`steering`]: the flow-group to RX-queue map ([`FlowSteering`](steering::FlowSteering)) that
//!   NIC flow steering and the Affinity-Accept balancer share.
#![cfg_attr(
    loom,
    allow(dead_code, unused_imports, reason = "the loom build compiles only the models' code paths")
)]

pub mod channel;
#[cfg(not(loom))]
pub mod channelizer;
pub mod classify;
pub mod dev;
pub mod pool;
pub mod rcu;
pub mod registry;
pub mod signature;
pub mod steering;
mod sync;
mod sys;
#[cfg(feature = "liburcu")]
pub mod urcu;
pub mod wake;

pub use channel::{Channel, Consumer, Producer};
pub use pool::{Packet, PacketRx, PacketTx, Pool, PoolCache};
