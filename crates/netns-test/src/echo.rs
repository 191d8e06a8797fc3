//! A kernel `std::net` client of a TCP echo service that checks every echoed byte: the peer the
//! echo tests over a TAP (`tests/echo_tap.rs`, `tests/adversarial`) run many of at once.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

/// How long a connect, a read or a write may take before the client gives up.
const TIMEOUT: Duration = Duration::from_secs(30);

/// One connection to the echo service at `server`: `messages` messages of random size in
/// `1..=max_size` and random bytes (seeded by `seed`, so each client sends its own), each written
/// whole, read back whole and compared; then a half-close, and the server's FIN with nothing
/// before it. Returns the bytes echoed.
///
/// # Errors
///
/// The step that failed (connect, write, read, a changed byte, extra bytes), naming the client by
/// its seed.
pub fn echo_client(
    server: impl Into<SocketAddr>,
    seed: u64,
    messages: usize,
    max_size: usize,
) -> Result<u64, String> {
    let server: SocketAddr = server.into();
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("client {seed}: {what}: {e}");
    let mut s = TcpStream::connect_timeout(&server, TIMEOUT).map_err(|e| fail("connect", &e))?;
    s.set_read_timeout(Some(TIMEOUT)).map_err(|e| fail("timeout", &e))?;
    s.set_write_timeout(Some(TIMEOUT)).map_err(|e| fail("timeout", &e))?;
    s.set_nodelay(true).map_err(|e| fail("nodelay", &e))?;
    let mut state = seed.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let max = max_size.max(1);
    let mut total = 0;
    let mut back = vec![0u8; max];
    for m in 0..messages {
        let len = 1 + usize::try_from(next() % max as u64).unwrap_or(0);
        let msg: Vec<u8> = (0..len).map(|_| next().to_le_bytes()[3]).collect();
        s.write_all(&msg).map_err(|e| fail(&format!("write message {m}"), &e))?;
        s.read_exact(&mut back[..len]).map_err(|e| fail(&format!("read message {m} ({len} bytes)"), &e))?;
        if let Some(at) = msg.iter().zip(&back[..len]).position(|(a, b)| a != b) {
            return Err(format!("client {seed}: message {m}: byte {at} of {len} came back changed"));
        }
        total += len as u64;
    }
    s.shutdown(Shutdown::Write).map_err(|e| fail("shutdown", &e))?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).map_err(|e| fail("waiting for the server's FIN", &e))?;
    if !rest.is_empty() {
        return Err(format!("client {seed}: {} unexpected bytes after the last echo", rest.len()));
    }
    Ok(total)
}
