//! `cargo run --release --example httpd [-- OPTIONS]` (`--help` lists them)
//!
//! A Sandstorm-style static HTTP/1.1 server: every response pre-segmented at start with its
//! payload checksums precomputed, sent by reference through tcp-lib's prepared send path (or
//! copied, with `--copy`). By default on the 82599 model with an in-process client that fetches
//! random files and checks every byte; `--tap NAME` serves the kernel's clients (curl, wrk);
//! `--pci ADDR` a real 82599. The server itself is [`netchannels::httpd`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use netchannels::httpd::{Options, USAGE, content, run};

/// Set by SIGINT: the run stops and prints its summary.
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
            eprintln!("httpd: {e}");
            std::process::exit(1);
        }
    };
    let handler = on_sigint as extern "C" fn(libc::c_int);
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, handler as libc::sighandler_t) };
    let result = content(&options).and_then(|c| run(&options, Arc::new(c), &STOP));
    match result {
        Ok(report) => print!("{report}"),
        Err(e) => {
            eprintln!("httpd: {e}");
            std::process::exit(1);
        }
    }
}
