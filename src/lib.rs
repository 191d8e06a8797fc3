//! Van Jacobson's net channels end to end.
//!
//! This umbrella package re-exports the workspace's crates and owns the examples and benchmarks:
//!
//! * [`netchannel`]: cache-aware single-producer channels of packet-buffer indices and the buffer pool;
//! * [`ixgbe_vfio`]: the userspace Intel 82599 driver, its behavioural model and the VFIO/sysfs
//!   platform layers;
//! * [`tcp_lib`]: the TCP/IP stack in the library: wire formats, the sans-IO connection, the per-core
//!   stack;
//! * [`accept_affinity`]: Affinity-Accept: per-core accept queues, stealing, flow-group migration, and
//!   the simulator of the paper's experiment;
//! * [`netchannel_runtime`]: the per-core runtime the examples' services run on;
//! * [`cli`]: the command-line options, logging, signals and `main` every example on the runtime
//!   shares;
//! * [`service`]: what echo and httpd share as services on the runtime: how a run goes, the
//!   per-core event loop, the summary every service has;
//! * [`echo`]: the TCP echo service of `cargo run --release --example echo`, on the runtime;
//! * [`httpd`]: the Sandstorm-style static HTTP server of `cargo run --release --example httpd`, on
//!   the runtime;
//! * `hyper_service` (feature `async`): HTTP/1.1 with hyper 1.x on the runtime's async cores, of
//!   `cargo run --release --features async --example hyper`.

pub use accept_affinity;
pub use ixgbe_vfio;
pub use netchannel;
pub use netchannel_runtime;
pub use tcp_lib;

pub mod cli;
mod client;
pub mod echo;
pub mod httpd;
#[cfg(feature = "async")]
pub mod hyper_service;
pub mod service;
mod util;

/// The README's code samples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The API tour's code samples (`docs/TOUR.md`), compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../docs/TOUR.md")]
pub struct TourDoctests;
