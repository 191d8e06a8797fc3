//! `cargo run --release --example echo [-- OPTIONS]` (`--help` lists them)
//!
//! A TCP echo service on the whole data path of the design: by default the 82599 model, the
//! userspace driver with one queue pair per core, Flow Director steering flow groups to the queues,
//! one channelizer and one tcp-lib stack per core, Affinity-Accept across the cores, and an
//! in-process client stack on the other end of the wire that checks every echoed byte. No NIC and
//! no root needed. `--tap NAME` serves the Linux kernel through a TAP device instead; `--xdp
//! IFACE[:QUEUE]` (with `--xdp-mode generic|native|auto`) one queue of any Linux interface through
//! AF_XDP; `--pci ADDR` a real 82599 over VFIO. The service itself is [`netchannels::echo`].

use std::sync::atomic::{AtomicBool, Ordering};

use netchannels::echo::{Options, USAGE, run};

/// Set by SIGINT: the run stops, prints its summary and checks its buffers.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    // Relaxed: a plain flag, and an atomic store is async-signal-safe.
    STOP.store(true, Ordering::Relaxed);
}

fn main() {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("echo: {e}");
            std::process::exit(1);
        }
    };
    let handler = on_sigint as extern "C" fn(libc::c_int);
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, handler as libc::sighandler_t) };
    match run(&options, &STOP) {
        Ok(report) => print!("{report}"),
        Err(e) => {
            eprintln!("echo: {e}");
            std::process::exit(1);
        }
    }
}
