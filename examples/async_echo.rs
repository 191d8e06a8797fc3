//! `cargo run --release --features async --example async_echo [-- OPTIONS]` (`--help` lists them)
//!
//! The echo service of `--example echo`, written with async/await: every core runs an executor
//! beside its stack ([`netchannels::netchannel_runtime::Runtime::run_async`]), an accept loop
//! spawns one task per connection, and the tasks read and write through `futures_io::AsyncRead`
//! and `AsyncWrite`. Same options, backends, model client and summary as `--example echo`
//! ([`netchannels::echo::run_async`]); TCP only (`--udp` is refused).

use netchannels::cli;
use netchannels::echo::{Options, run_async};

fn main() {
    cli::main(|options: &Options, stop| run_async(options, stop));
}
