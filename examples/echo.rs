//! `cargo run --release --example echo [-- OPTIONS]` (`--help` lists them)
//!
//! A TCP echo service on [`netchannels::netchannel_runtime`]: by default the 82599 model, the
//! userspace driver with one queue pair per core (every CPU, at most 16), Flow Director steering
//! flow groups to the queues, one channelizer and one tcp-lib stack per core, Affinity-Accept
//! across the cores, and an in-process client stack on the other end of the model's wire that
//! checks every echoed byte; a progress line each second, then a summary (throughput, latency
//! percentiles, local-accept fraction, steals, migrations, drops, every buffer back). No NIC and
//! no root needed. `--tap NAME` serves the Linux kernel through a TAP device instead; `--xdp
//! IFACE` (with `--xdp-mode generic|native|auto`, `--queues N`) the RX queues of any Linux
//! interface through AF_XDP, one core each; `--pci ADDR` a real 82599 over VFIO. The options every
//! example on the runtime shares are [`netchannels::cli::ServeArgs`]; the service is
//! [`netchannels::echo`].
//!
//! Ctrl-C (or SIGTERM) stops the run, prints the summary and checks the buffers (a second one
//! exits at once); `kill -USR1 <pid>` prints every counter, `ethtool -S` style. `RUST_LOG` sets
//! what is logged to stderr (default: `info` for the workspace's crates).

use netchannels::cli;
use netchannels::echo::{Options, run};

fn main() {
    cli::main(|options: &Options, stop| run(options, stop));
}
