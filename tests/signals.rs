//! The examples' signal handlers (`netchannels::cli::Signals`), in a process of their own: SIGUSR1
//! asks for the counters once, SIGTERM sets the stop flag. (A second SIGINT or SIGTERM would end
//! the process with status 1, by design, so it is raised only once here.)

use std::sync::atomic::Ordering;

use netchannels::cli::{self, Signals};

fn raise(signal: libc::c_int) {
    // SAFETY: raise(3) delivers `signal` to this thread; the handlers installed below only store
    // to atomics, and this test is the only code in its process.
    assert_eq!(unsafe { libc::raise(signal) }, 0, "raise({signal})");
}

#[test]
fn the_handlers_set_their_flags() {
    assert!(!cli::counters_requested(), "no handlers yet: never");
    let signals = Signals::install().expect("installs");
    assert!(!signals.counters_requested() && !signals.stop.load(Ordering::Relaxed));
    raise(libc::SIGUSR1);
    assert!(cli::counters_requested(), "SIGUSR1 asks for the counters");
    assert!(!cli::counters_requested(), "once");
    raise(libc::SIGTERM);
    assert!(signals.stop.load(Ordering::Relaxed), "SIGTERM stops");
    let again = Signals::install().expect("installed");
    assert!(std::ptr::eq(again.stop, signals.stop), "one set of flags per process");
}
