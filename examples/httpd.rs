//! `cargo run --release --example httpd [-- OPTIONS]` (`--help` lists them)
//!
//! A Sandstorm-style static HTTP/1.1 server on [`netchannels::netchannel_runtime`]: every response
//! pre-segmented at start with its payload checksums precomputed, sent by reference through
//! tcp-lib's prepared send path (or copied, with `--copy`). By default on the 82599 model with an
//! in-process client that fetches random files and checks every byte; `--tap NAME` serves the
//! kernel's clients (curl, wrk); `--xdp IFACE` an interface's queues through AF_XDP; `--pci ADDR`
//! a real 82599. `--cores N` and `--placement same|split` as for every example on the runtime
//! ([`netchannels::cli::ServeArgs`]); the server itself is [`netchannels::httpd`].
//!
//! Ctrl-C (or SIGTERM) stops the run, prints the summary and checks the buffers (a second one
//! exits at once); `kill -USR1 <pid>` prints every counter, `ethtool -S` style. `RUST_LOG` sets
//! what is logged to stderr (default: `info` for the workspace's crates).

use std::sync::Arc;

use netchannels::cli;
use netchannels::httpd::{Options, content, run};

fn main() {
    cli::main(|options: &Options, stop| content(options).and_then(|c| run(options, Arc::new(c), stop)));
}
