//! httpd's `--tap` mode against clients that are slow, idle, too many or speak loosely, each test
//! in a private network namespace with the kernel as the client: a request with bare-LF line
//! endings is served (RFC 9112 §2.2); an HTTP/1.0 `Connection: keep-alive` keeps the connection
//! (two requests on one) and the response says so; `--header-timeout` cuts off a partial request
//! with 408 and a silent connection without a response, `--idle-timeout` closes a kept-alive one,
//! each within its bound; over `--max-conns` a connection gets 503 with `Retry-After` and
//! `Connection: close`, and the server's counters say so. Short timeouts through the options keep
//! it to a few seconds. (The slowloris of 10,000 connections is `httpd_slowloris.rs`.)
//!
//! Without root or `/dev/net/tun` it prints `skipped: <why>` (`netns_test::skip`).

mod httpd_common;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use httpd_common::{connect, header, read_response, read_to_eof, serve};
use netchannels::httpd::{Content, Options};

/// How long a client waits for a response that should come.
const PATIENCE: Duration = Duration::from_secs(5);

fn demo() -> Arc<Content> {
    Arc::new(Content::demo(None))
}

/// Sends `request` on `w` and reads one response from `r`.
fn exchange(
    w: &mut TcpStream,
    r: &mut BufReader<TcpStream>,
    request: &str,
) -> Result<httpd_common::Response, String> {
    w.write_all(request.as_bytes()).map_err(|e| format!("sending {request:?}: {e}"))?;
    read_response(r, false).map_err(|e| format!("the response to {request:?}: {e}"))
}

fn client() -> Result<(TcpStream, BufReader<TcpStream>), String> {
    let s = connect(PATIENCE)?;
    let w = s.try_clone().map_err(|e| e.to_string())?;
    Ok((w, BufReader::new(s)))
}

#[test]
fn bare_lf_request_is_served() {
    netns_test::in_private_namespace(|| {
        let content = demo();
        let ((), report) = serve("nchost0", Options::default(), &content, || {
            let (mut w, mut r) = client()?;
            for request in ["GET /1k.bin HTTP/1.1\nHost: t\n\n", "GET /2k.bin HTTP/1.1\r\nHost: t\n\n"] {
                let (status, _, body) = exchange(&mut w, &mut r, request)?;
                let path = request.split(' ').nth(1).unwrap_or("");
                if status != 200 || body != content.get(path).ok_or("no file")? {
                    return Err(format!("{request:?}: status {status}, {} bytes", body.len()));
                }
            }
            Ok(())
        })?;
        if report.requests() != 2 {
            return Err(format!("2 requests expected: {report}"));
        }
        Ok(())
    });
}

#[test]
fn http_1_0_keep_alive_reuses_the_connection() {
    netns_test::in_private_namespace(|| {
        let content = demo();
        let ((), report) = serve("nchost1", Options::default(), &content, || {
            let (mut w, mut r) = client()?;
            // Two requests on one connection, each response saying keep-alive.
            for path in ["/1k.bin", "/4k.bin"] {
                let request = format!("GET {path} HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
                let (status, h, body) = exchange(&mut w, &mut r, &request)?;
                if status != 200
                    || header(&h, "connection") != Some("keep-alive")
                    || body != content.get(path).ok_or("no file")?
                {
                    return Err(format!("{request:?}: status {status}, {h:?}"));
                }
            }
            // Without it, HTTP/1.0 closes: the response says so, then the server's FIN.
            let (status, h, _) = exchange(&mut w, &mut r, "GET /1k.bin HTTP/1.0\r\n\r\n")?;
            if status != 200 || header(&h, "connection") != Some("close") {
                return Err(format!("plain HTTP/1.0: status {status}, {h:?}"));
            }
            let rest = read_to_eof(&mut r)?;
            if !rest.is_empty() {
                return Err(format!("{} bytes after the closing response", rest.len()));
            }
            Ok(())
        })?;
        let core = &report.cores[0];
        if (core.conns, report.requests()) != (1, 3) {
            return Err(format!("3 requests on 1 connection expected: {report}"));
        }
        Ok(())
    });
}

/// How long after `from` the server closed `s` (its FIN), and what it sent first.
fn until_closed(s: TcpStream, from: Instant) -> Result<(Duration, Vec<u8>), String> {
    let got = read_to_eof(&mut BufReader::new(s))?;
    Ok((from.elapsed(), got))
}

#[test]
fn header_and_idle_timeouts_close_connections() {
    const HEADER: Duration = Duration::from_millis(1000);
    const IDLE: Duration = Duration::from_millis(1500);
    // A deadline fires up to one sweep (100 ms) late; the rest is the round trip and scheduling.
    const SLACK: Duration = Duration::from_millis(700);
    // The idle timer starts when the server queues the response, a round trip before the client
    // has it: the close may come that much before the idle timeout counted from there.
    const EARLY: Duration = Duration::from_millis(50);
    netns_test::in_private_namespace(|| {
        let content = demo();
        let options = Options { header_timeout: HEADER, idle_timeout: IDLE, ..Options::default() };
        let (closed, report) = serve("nchost2", options, &content, || {
            std::thread::scope(|sc| {
                // A partial head: 408, then the FIN, a header timeout after the connection was set up.
                let partial = sc.spawn(|| {
                    let mut s = connect(PATIENCE)?;
                    let start = Instant::now();
                    s.write_all(b"GET /1k.bin HTTP/1.1\r\nHost: t\r\n").map_err(|e| e.to_string())?;
                    until_closed(s, start)
                });
                // Nothing sent at all: closed, no response, a header timeout after it was set up.
                let silent = sc.spawn(|| {
                    let s = connect(PATIENCE)?;
                    until_closed(s, Instant::now())
                });
                // A request answered, then nothing: closed an idle timeout after the response.
                let idle = sc.spawn(|| {
                    let (mut w, mut r) = client()?;
                    let (status, _, _) = exchange(&mut w, &mut r, "GET /1k.bin HTTP/1.1\r\n\r\n")?;
                    if status != 200 {
                        return Err(format!("status {status}"));
                    }
                    let start = Instant::now();
                    until_closed(r.into_inner(), start)
                });
                let join = |h: std::thread::ScopedJoinHandle<'_, Result<(Duration, Vec<u8>), String>>| {
                    h.join().unwrap_or_else(|_| Err("a client panicked".into()))
                };
                Ok([join(partial)?, join(silent)?, join(idle)?])
            })
        })?;
        let [(partial, got408), (silent, nothing), (idle, after_idle)] = closed;
        println!("closed after: partial head {partial:?}, silent {silent:?}, idle {idle:?}");
        let text = String::from_utf8_lossy(&got408);
        if !text.starts_with("HTTP/1.1 408 Request Timeout\r\n") || !text.contains("Connection: close\r\n") {
            return Err(format!("a partial head got {text:?}"));
        }
        if !nothing.is_empty() || !after_idle.is_empty() {
            return Err(format!("silent and idle connections got {nothing:?} and {after_idle:?}"));
        }
        for (what, took, bound) in
            [("partial", partial, HEADER), ("silent", silent, HEADER), ("idle", idle, IDLE)]
        {
            if took + EARLY < bound || took > bound + SLACK {
                return Err(format!(
                    "the {what} connection closed after {took:?}, not within {bound:?} - {EARLY:?} .. + {SLACK:?}"
                ));
            }
        }
        let core = &report.cores[0];
        if (core.header_timeouts, core.idle_timeouts, core.failed) != (2, 1, 0) {
            return Err(format!("2 header timeouts and 1 idle timeout expected: {report}"));
        }
        Ok(())
    });
}

#[test]
fn over_the_cap_gets_503_and_close() {
    netns_test::in_private_namespace(|| {
        let content = demo();
        let options = Options { max_conns: 2, ..Options::default() };
        let ((), report) = serve("nchost3", options, &content, || {
            // Two connections served and held.
            let mut held = Vec::new();
            for _ in 0..2 {
                let (mut w, mut r) = client()?;
                let (status, _, _) = exchange(&mut w, &mut r, "GET /1k.bin HTTP/1.1\r\n\r\n")?;
                if status != 200 {
                    return Err(format!("under the cap: status {status}"));
                }
                held.push((w, r));
            }
            // The third: 503, Retry-After, Connection: close, then the server's FIN.
            let (mut w, mut r) = client()?;
            let (status, h, _) = exchange(&mut w, &mut r, "GET /1k.bin HTTP/1.1\r\n\r\n")?;
            if status != 503
                || header(&h, "connection") != Some("close")
                || header(&h, "retry-after").is_none()
            {
                return Err(format!("over the cap: status {status}, {h:?}"));
            }
            let rest = read_to_eof(&mut r)?;
            if !rest.is_empty() {
                return Err(format!("{} bytes after the 503", rest.len()));
            }
            // The held ones are still served; once one goes, a new one is served.
            let (w0, r0) = &mut held[0];
            let (status, _, _) = exchange(w0, r0, "GET /2k.bin HTTP/1.1\r\n\r\n")?;
            if status != 200 {
                return Err(format!("a held connection: status {status}"));
            }
            let (w1, r1) = held.pop().ok_or("none held")?;
            w1.shutdown(std::net::Shutdown::Write).map_err(|e| e.to_string())?;
            read_to_eof(&mut { r1 })?;
            let (mut w, mut r) = client()?;
            let (status, _, _) = exchange(&mut w, &mut r, "GET /1k.bin HTTP/1.1\r\n\r\n")?;
            if status != 200 {
                return Err(format!("after one closed: status {status}"));
            }
            Ok(())
        })?;
        let core = &report.cores[0];
        if (core.refused, report.requests(), core.failed) != (1, 4, 0) {
            return Err(format!("1 refused and 4 requests expected: {report}"));
        }
        Ok(())
    });
}
