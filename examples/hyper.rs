//! `cargo run --release --features async --example hyper [-- OPTIONS]` (`--help` lists them)
//!
//! HTTP/1.1 with hyper 1.x on [`netchannels::netchannel_runtime`]'s async cores: each core runs
//! an executor beside its tcp-lib stack, accepts with Affinity-Accept and serves every connection
//! on a task of its own with hyper's `http1::Builder::serve_connection` over `hyper_util`'s
//! `TokioIo` around the core's `AsyncStream`. `GET /` answers a short HTML page, `GET /bytes/N`
//! `N` bytes of a fixed pattern (`N` up to 1 MiB), anything else 404; connections are kept alive.
//! By default on the 82599 model with an in-process client that makes requests over several
//! connections and checks every byte, then prints the summary; `--tap NAME` serves the kernel's
//! clients (curl, wrk, python), `--xdp IFACE` an interface's queues through AF_XDP, `--pci ADDR` a
//! real 82599, with `--cores N` and the other options every example on the runtime shares
//! ([`netchannels::cli::ServeArgs`]). The service is [`netchannels::hyper_service`].
//!
//! Ctrl-C (or SIGTERM) stops the run and prints the summary (a second one exits at once);
//! `kill -USR1 <pid>` prints every counter.

use netchannels::cli;
use netchannels::hyper_service::{Options, run};

fn main() {
    cli::main(|options: &Options, stop| run(options, stop));
}
