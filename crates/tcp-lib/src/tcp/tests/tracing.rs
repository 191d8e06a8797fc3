//! The `tracing` events of loss recovery (level DEBUG, this crate's targets): an RTO, a fast
//! recovery's start and end and a tail loss probe each say so, with the connection's addresses
//! and the sequence numbers and windows that explain them.

use std::cell::RefCell;
use std::io::Write;
use std::sync::Once;
use std::time::Duration;

use super::{LOCAL_SEQ, REMOTE_SEQ, SEND_TEMPL, Script, script_config, syn_from_peer};
use crate::tcp::{Config, State};
use crate::wire::TcpRepr;

thread_local! {
    /// The events of the calling thread while it runs [`traced`]; `None` outside it.
    static CAPTURED: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// The subscriber's writer: into the calling thread's [`CAPTURED`], if it is capturing.
struct ThreadCapture;

impl Write for ThreadCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURED.with_borrow_mut(|c| c.as_mut().map(|v| v.extend_from_slice(buf)));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `body` logged at DEBUG and above on this thread, one line per event.
///
/// One global subscriber for the test binary, writing each thread's events where that thread
/// captures them: a subscriber scoped to one thread (`tracing::subscriber::with_default`) lost
/// events now and then while other test threads ran the same callsites, which cache whether any
/// subscriber wants them.
pub(crate) fn traced(body: impl FnOnce()) -> String {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .without_time()
            .with_writer(|| ThreadCapture)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("nothing else in this binary sets one");
    });
    CAPTURED.with_borrow_mut(|c| *c = Some(Vec::new()));
    body();
    let bytes = CAPTURED.with_borrow_mut(Option::take).unwrap_or_default();
    String::from_utf8(bytes).expect("the formatter writes UTF-8")
}

/// A passive open under `config` with four full segments sent.
fn four_in_flight(config: Config) -> Script {
    let mut s = Script::accept_with(
        Config { send_buffer: 100_000, initial_window: Some(10), ..config },
        syn_from_peer(),
    );
    s.drain();
    s.send(&TcpRepr { ack_number: Some(LOCAL_SEQ + 1), window_len: 60_000, ..SEND_TEMPL });
    assert_eq!(s.conn.state(), State::Established);
    assert_eq!(s.conn.send(&[7; 4 * 1460]), 4 * 1460);
    assert_eq!(s.drain().into_iter().filter(|t| !t.payload.is_empty()).count(), 4);
    s
}

#[test]
fn a_timeout_is_traced_with_what_was_in_flight() {
    let log = traced(|| {
        let mut s = four_in_flight(script_config());
        s.advance(Duration::from_secs(2));
        s.drain();
        assert_eq!(s.conn.stats().timeouts, 1);
    });
    let line = log.lines().find(|l| l.contains("retransmission timeout")).unwrap_or_else(|| panic!("{log}"));
    let una = (LOCAL_SEQ + 1).get();
    for field in [
        format!("una={una}"),
        format!("max={}", una.wrapping_add(4 * 1460)),
        "remote=10.0.0.2:49500".to_owned(),
        "retries=1".to_owned(),
    ] {
        assert!(line.contains(&field), "{field} missing from {line}");
    }
}

#[test]
fn a_fast_recovery_is_traced_from_start_to_end() {
    let log = traced(|| {
        let mut s = four_in_flight(script_config());
        let ack = |s: &mut Script, n: usize| {
            s.send(&TcpRepr {
                seq_number: REMOTE_SEQ + 1,
                ack_number: Some(LOCAL_SEQ + 1 + n),
                window_len: 60_000,
                ..SEND_TEMPL
            });
        };
        for _ in 0..3 {
            ack(&mut s, 0);
        }
        s.drain();
        ack(&mut s, 4 * 1460);
        assert_eq!(s.conn.stats().recoveries, 1);
    });
    let begins = log.find("fast recovery begins").unwrap_or_else(|| panic!("{log}"));
    let ends = log.find("fast recovery ends").unwrap_or_else(|| panic!("{log}"));
    assert!(begins < ends, "{log}");
}

#[test]
fn a_tail_loss_probe_is_traced_before_any_timeout() {
    let log = traced(|| {
        let mut s = four_in_flight(Config { tail_loss_probe: true, ..script_config() });
        s.advance(Duration::from_millis(100));
        s.drain();
        assert_eq!(s.conn.stats().tail_loss_probes, 1);
    });
    assert!(log.contains("tail loss probe"), "{log}");
    assert!(!log.contains("retransmission timeout"), "{log}");
}
