//! The per-core runtime: a backend's queues, one core per queue, net channels between them, a
//! tcp-lib stack per core, Affinity-Accept across the cores, and your service on every core.
//!
//! # What runs
//!
//! ```text
//!  backend (82599 model | TAP | AF_XDP queues | 82599 over VFIO): queue q of N
//!    -> channelizer q: classify, look the signature up in the registry
//!         -> the channel to the core the registry names (an N x N matrix), or
//!         -> the default channel of core q (ARP, SYNs, strays)
//!    -> core c: its tcp-lib stack, driven through a tcp_lib::socket::Interface
//!         -> your service: Listener::accept, Stream (io::Read/Write), connect, poll
//!    -> the TX channel of core c -> channelizer c -> queue c
//! ```
//!
//! * **Steering.** A passive connection's exact signature is registered to the core whose stack
//!   creates it, before its SYN-ACK leaves, so its frames reach that core from whichever queue
//!   they arrive on. ARP lands on one queue; every core's stack learns the sender from it.
//! * **Affinity-Accept.** Established connections queue on the core they arrived on; an idle core
//!   steals from a busy one, and the connection moves: the victim detaches it from its stack and
//!   sends it over, forwarding its frames that still arrive until the stealer has re-pointed the
//!   registration (see the handoff protocol in `core/duties.rs`). On backends with Flow Director
//!   a balancer migrates flow groups toward the stealers.
//! * **Placement.** [`Placement::Same`] runs a core's channelizer on the core's thread, polled
//!   with its stack; [`Placement::Split`] gives it a thread of its own.
//! * **Stopping.** When the `main` given to [`Runtime::run`] returns, every core's blocking calls
//!   fail with [`Stopping`], the services return, the stacks flush, and every buffer of every pool
//!   is accounted for in the [`Report`].
//! * **async/await.** With feature `async`, `Runtime::run_async` runs an async service per core
//!   instead: an executor per core driven by the core's loop with its stack, `AsyncCore`,
//!   `AsyncListener` and `AsyncStream` (`futures-io` traits; tokio's with feature `tokio`).
//! * **Counters.** [`Control::snapshot`] while it runs, [`Report::snapshot`] after: every core's
//!   stack, handoffs and channels, every queue's device and channelizer, every port's accepts.
//! * **Nothing runs it dry.** Pool buffers are held only by the device's rings, the channels (a
//!   full one refuses and counts: `channelizer_dropped_full`), per-thread caches and the bursts in
//!   flight, all of fixed size: the stacks hold none between calls, whatever their peers or
//!   services do. So each backend's pool is sized to their sum plus a reserve for the driver's RX
//!   refill (`sizing.rs`: the audit and the formula), and a queue that finds the pool empty counts
//!   it in `rx_no_buffer` ([`Snapshot::rx_no_buffer`](stats::Snapshot::rx_no_buffer), 0 by
//!   construction). What peers and services *can* grow is heap: connection buffers, bounded per
//!   stack by tcp-lib's `Config::buffer_memory` (set it with [`Builder::configure`]; its refusals
//!   are in each core's stack counters). `tests/starve.rs` holds 1,000 connections that the
//!   service never reads while echo clients are served byte-exact.
//!
//! # Why a crate of its own
//!
//! The runtime is the layer users build on, so it is a library crate beside the four it joins
//! (`cargo add netchannel-runtime`), not the root package: the root package holds the services and
//! their examples, the benches/ package the benchmarks with their heavy dev-dependencies (smoltcp,
//! plotters, criterion), and neither publishes anything. The dependency arrows stay one-way: the
//! runtime depends on netchannel, ixgbe-vfio, tcp-lib and accept-affinity, and none of them knows
//! it exists.
//!
//! # A multi-core echo
//!
//! On the 82599 model with its in-process peer (no NIC, no root); the same service runs on any
//! backend ([`Backend::tap`], [`Backend::xdp`], [`Backend::pci`]).
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::SocketAddrV4;
//! use netchannel_runtime::{Runtime, Stopping};
//! use tcp_lib::socket::{Interface, Stream};
//! use tcp_lib::stack::Stack;
//!
//! let mut runtime = Runtime::builder().cores(2).build()?;
//! let server = SocketAddrV4::new(runtime.ip().address(), 7);
//! let peer = runtime.take_peer().expect("the model has a peer");
//! let ((), report) = runtime.run(
//!     |core| {
//!         let listener = core.listen(7)?;
//!         loop {
//!             let (mut stream, _) = match listener.accept() {
//!                 Err(e) if Stopping::is(&e) => return Ok(()),
//!                 accepted => accepted?,
//!             };
//!             let mut buf = [0u8; 4096];
//!             loop {
//!                 match stream.read(&mut buf) {
//!                     Ok(0) => break,
//!                     Ok(n) => stream.write_all(&buf[..n])?,
//!                     Err(e) if Stopping::is(&e) => return Ok(()),
//!                     Err(e) => return Err(e),
//!                 }
//!             }
//!         }
//!     },
//!     |_control| {
//!         // The peer: a client stack on the other end of the model's wire.
//!         let config = peer.stack_config(runtime_ip());
//!         let (device, pool) = peer.into_parts();
//!         let client = Interface::new(Stack::new(config, std::time::Instant::now()), device, pool.cache());
//!         let mut stream = Stream::connect(&client, server).expect("connects");
//!         stream.write_all(b"hello, cores").expect("writes");
//!         let mut echo = [0u8; 12];
//!         stream.read_exact(&mut echo).expect("reads");
//!         assert_eq!(&echo, b"hello, cores");
//!     },
//! )?;
//! assert_eq!(report.snapshot.accepted(), 1);
//! # fn runtime_ip() -> tcp_lib::wire::Ipv4Cidr { netchannel_runtime::DEFAULT_IP }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "async")]
mod aio;
mod backend;
mod core;
mod device;
mod idle;
mod peer;
mod placement;
mod runtime;
mod shared;
mod sizing; // how large the pool must be: every holder of pool buffers, bounded
pub mod stats;
mod wiring;

#[cfg(feature = "async")]
pub use aio::{AsyncCore, AsyncListener, AsyncStream, Sleep, Task};
pub use backend::{Backend, OpenError};
pub use core::{Core, CoreDevice, Interface, Listener, Stopping, Stream};
pub use device::Port;
pub use peer::Peer;
pub use placement::Placement;
pub use runtime::{Builder, Control, DEFAULT_BACKLOG, DEFAULT_IP, Error, Report, Runtime, WAIT_TICK};
pub use stats::Snapshot;
