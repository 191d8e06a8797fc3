//! Affinity-Accept: per-core accept queues, connection stealing and flow-group migration.
//!
//! After Pesterev, Strauss, Zeldovich and Morris, "Improving Network Connection Locality on Multicore
//! Systems", EuroSys 2012. The NIC routes each of 4096 flow groups (the low 12
//! bits of the client's port) to one core's RX queue; a connection is handled start to finish on the
//! core its packets arrive on, as long as the load stays balanced. This crate is the listen-socket side
//! of that design, independent of packet formats: it moves connection handles (any `C`) and talks to
//! the NIC only through [`FlowSteering`](netchannel::steering::FlowSteering).
//!
//! * One listener's accept queue is split into per-core bounded queues, each with its own lock, the
//!   backlog divided evenly ([`AcceptQueue`]).
//! * `accept()` on a core takes a connection that arrived on that core if there is one (*connection
//!   affinity*).
//! * Short-term imbalance: a core whose queue grows past 75% of its share is *busy* until a running
//!   average of its queue length falls below 10%; non-busy cores *steal* from busy ones, one remote
//!   accept per five local ones, visiting victims round-robin. Busy cores never steal.
//! * Long-term imbalance: every 100 ms each non-busy core moves one flow group from the core it stole
//!   the most from to itself, in the NIC ([`AcceptQueue::balance`]).
//! * Waiting: an acceptor checks its local queue, then the queues it may steal from, then sleeps; a new
//!   connection wakes an acceptor on its own core first, else one on a non-busy core. An acceptor blocks
//!   ([`AcceptQueue::accept`]), gets [`AcceptError::WouldBlock`] ([`AcceptQueue::try_accept`]) or
//!   registers a waker for readiness ([`AcceptQueue::poll_accept`]). The protocol loses no wakeup
//!   (loom-checked, `tests/loom_accept.rs`).
//! * The paper's baselines, [`Policy::Stock`] (one queue, one lock) and [`Policy::Fine`] (per-core
//!   queues, round-robin accepts), are real implementations behind the same interface.
//!
//! The decisions live in [`policy`], deterministic and single-threaded with explicit inputs and
//! virtual time, so a simulator can drive exactly the code the concurrent [`AcceptQueue`] runs; [`sim`]
//! is that simulator: the paper's load-balancer experiment (48 cores, a CPU hog on half of them) run on
//! a real `AcceptQueue` with virtual time (`cargo run --release -p netchannels-benches --example accept_sim`).
//!
//! # Example
//!
//! Two cores, a backlog of 8 (4 per core): core 1 gets a burst and becomes busy, and an accept on idle
//! core 0 steals from it; the next migration round moves the stolen connection's flow group to core 0.
//!
//! ```
//! use std::time::Duration;
//!
//! use accept_affinity::{AcceptError, AcceptQueue, Policy};
//! use netchannel::signature::FlowGroup;
//! use netchannel::steering::{FlowSteering, SoftwareSteering};
//!
//! let queue: AcceptQueue<u32> = AcceptQueue::new(2, 8, Policy::affinity())?;
//! let mut steering = SoftwareSteering::new(2); // group g on RX queue g % 2
//! let group = FlowGroup::of_port(40_001); // an odd group: routed to core 1
//! assert_eq!(steering.queue_of(group), 1);
//!
//! // Core 0 has nothing of its own and core 1 is not busy: nothing to take.
//! queue.enqueue(1, group, 100).unwrap();
//! assert_eq!(queue.try_accept(0), Err(AcceptError::WouldBlock));
//!
//! // A burst on core 1: 4 > 75% of 4, so core 1 is busy and core 0 may steal.
//! for conn in 101..104 {
//!     queue.enqueue(1, group, conn).unwrap();
//! }
//! assert!(queue.is_busy(1));
//! let got = queue.try_accept(0)?;
//! assert_eq!((got.conn, got.arrived_on, got.remote), (100, 1, true));
//!
//! // Core 1 still accepts its own connections, in order.
//! assert_eq!(queue.try_accept(1)?.conn, 101);
//!
//! // 100 ms later core 0 takes the group it stole from, and new connections of it arrive on core 0.
//! let report = queue.balance_at(Duration::from_millis(100), &mut steering).unwrap();
//! assert_eq!(report.migrations.len(), 1);
//! assert_eq!(steering.queue_of(group), 0);
//! assert_eq!(queue.stats().cores[0].remote_accepts, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

pub mod policy;
mod queue;
pub mod sim;
mod sync;

pub use policy::{AffinityConfig, ConfigError, CoreSet, MAX_CORES, Migration, MigrationReport};
pub use queue::{AcceptError, AcceptQueue, Accepted, CoreStats, EnqueueError, Policy, Retirement, Stats};
