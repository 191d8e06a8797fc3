//! A server under test on a thread of its own while kernel clients run on the caller's.

use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::SKIP;

/// How long [`serve_while`] waits for the server to become ready before it runs the clients
/// anyway (they then fail with what they meet, which says more than a timeout here would).
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// What a server's start-up error says when the kernel lacks what it needs: the runtime's AF_XDP
/// open reports `lacks AF_XDP`, and a refused bind or attach `was refused`. Such an error is a
/// missing precondition (a [`SKIP`]), not a failure.
const UNSUPPORTED: [&str; 2] = ["lacks AF_XDP", "was refused"];

/// Runs `server` on a scoped thread, waits until `ready` says it serves (polled every 10 ms, at
/// most [`READY_TIMEOUT`]), runs `clients` on this thread, then sets the server's stop flag and
/// joins it. Returns the server's result and what the clients returned.
///
/// `server` gets the stop flag it must watch. The clients run whether or not they succeed, so the
/// server is always stopped and joined before this returns.
///
/// # Errors
///
/// The server's error. A server that ends before `ready` holds fails with its own error (or says
/// it stopped at once); an error that says the kernel lacks support becomes a [`SKIP`] error.
pub fn serve_while<R: Display + Send, T>(
    server: impl FnOnce(&AtomicBool) -> Result<R, String> + Send,
    ready: impl Fn() -> bool,
    clients: impl FnOnce() -> T,
) -> Result<(R, T), String> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let running = s.spawn(|| server(&stop));
        let start = Instant::now();
        while !running.is_finished() && start.elapsed() < READY_TIMEOUT && !ready() {
            std::thread::sleep(Duration::from_millis(10));
        }
        if running.is_finished() {
            let e = match running.join() {
                Ok(Err(e)) => e,
                Ok(Ok(r)) => format!("the server stopped at once: {r}"),
                Err(_) => "the server panicked".into(),
            };
            let skip = if UNSUPPORTED.iter().any(|u| e.contains(u)) { SKIP } else { "" };
            return Err(format!("{skip}{e}"));
        }
        let out = clients();
        // Relaxed: a plain flag; the join orders everything else.
        stop.store(true, Ordering::Relaxed);
        let report = running.join().map_err(|_| "the server panicked".to_owned())??;
        Ok((report, out))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_run_once_ready_and_the_server_is_stopped() {
        let up = AtomicBool::new(false);
        let (report, out) = serve_while(
            |stop: &AtomicBool| {
                up.store(true, Ordering::Relaxed);
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok("served")
            },
            || up.load(Ordering::Relaxed),
            || {
                assert!(up.load(Ordering::Relaxed), "the clients ran before the server was ready");
                7
            },
        )
        .unwrap();
        assert_eq!((report, out), ("served", 7));
    }

    #[test]
    fn a_server_that_fails_at_start_is_an_error_or_a_skip() {
        let fail = |e: &'static str| {
            serve_while(|_: &AtomicBool| Err::<&str, _>(e.to_owned()), || false, || ()).map(|_| ())
        };
        assert_eq!(fail("bind failed"), Err("bind failed".to_owned()));
        assert_eq!(fail("the kernel lacks AF_XDP"), Err(format!("{SKIP}the kernel lacks AF_XDP")));
        let early = serve_while(|_: &AtomicBool| Ok("done"), || false, || ()).map(|_| ());
        assert_eq!(early, Err("the server stopped at once: done".to_owned()));
    }
}
