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

use clap::Parser;
use netchannels::cli::{self, Signals};
use netchannels::httpd::{Options, content, run};

fn main() {
    let options = Options::parse();
    if let Err(e) = options.validate() {
        e.exit();
    }
    cli::init_logging();
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("httpd: cannot install the signal handlers: {e}");
            std::process::exit(1);
        }
    };
    match content(&options).and_then(|c| run(&options, Arc::new(c), &signals.stop)) {
        Ok(report) => print!("{report}"),
        Err(e) => {
            eprintln!("httpd: {e}");
            std::process::exit(1);
        }
    }
}
