//! The model client's protocol ([`crate::client`] drives it): each connection asks for random
//! files, one request at a time: the first request of every fourth connection is for a missing
//! file (404), every 16th request is a HEAD (its `Content-Length` checked), the rest are GETs whose
//! bodies are checked byte for byte. The latency of a request is from its `send` to the last byte
//! of its response.

use std::net::Ipv4Addr;

use tcp_lib::stack::{Stack, StreamId};

use super::{Content, Options};
use crate::client::{self, Advanced, Conn, Protocol, Summary, client_report};

client_report! {
    /// What the model's client did.
    pub struct ClientReport {
        /// Responses received and checked (200s byte for byte, HEADs and 404s by their headers).
        responses,
        /// Body bytes received and checked.
        bytes,
        /// Request latency (request sent to the response's last byte): p50, p90, p99, max.
        latency,
    }
}

/// What a client connection expects of the response in flight.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// 200 and this file's bytes.
    File(usize),
    /// 200 with this file's length, no body.
    Head(usize),
    /// 404.
    NotFound,
}

/// A connection's side of HTTP: the response it expects, and what it received of it.
#[derive(Default)]
pub(super) struct Exchange {
    expect: Option<Expect>,
    input: Vec<u8>,
}

/// Parses a response head: (status, Content-Length, head length); `None` while incomplete.
fn response_head(buf: &[u8]) -> Option<Result<Head, String>> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.strip_prefix("HTTP/1.1 "))
        .and_then(|l| l.get(..3))
        .and_then(|s| s.parse().ok());
    let Some(status) = status else { return Some(Err(format!("bad status line in {head:?}"))) };
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok());
    let Some(length) = length else { return Some(Err(format!("no Content-Length in {head:?}"))) };
    Some(Ok((status, length, end + 4)))
}

/// Sends `method path` to `host` on stream `id`.
///
/// # Errors
///
/// When the request did not all fit in the send buffer (a connection has one request in flight:
/// its buffer is empty) or the connection failed.
pub(crate) fn send_request(
    stack: &mut Stack,
    id: StreamId,
    method: &str,
    path: &str,
    host: Ipv4Addr,
) -> Result<(), String> {
    let req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: netchannels\r\n\r\n");
    match stack.send(id, req.as_bytes()) {
        Ok(n) if n == req.len() => Ok(()),
        other => Err(format!("sending a request: {other:?}")),
    }
}

/// A response head: status, `Content-Length`, the head's length.
pub(crate) type Head = (u16, usize, usize);

/// Receives what came for stream `id` into `input`; returns whether anything came and, when a response
/// is `expected` and its head is all there, its status, `Content-Length` and head length.
///
/// # Errors
///
/// The connection's (the server closed early), or a malformed head.
pub(crate) fn take_response(
    stack: &mut Stack,
    id: StreamId,
    buf: &mut [u8],
    input: &mut Vec<u8>,
    expected: bool,
) -> Result<(bool, Option<Head>), String> {
    let moved = client::receive(stack, id, buf, |got| {
        input.extend_from_slice(got);
        Ok(())
    })?;
    let head = if expected { response_head(input).transpose()? } else { None };
    Ok((moved, head))
}

/// httpd's client protocol: random files of the content, by path.
pub(super) struct HttpProtocol<'a> {
    /// The server's address, for the `Host` header.
    host: Ipv4Addr,
    /// The files to fetch (those of `--size`), by path.
    files: Vec<(&'a str, &'a [u8])>,
}

impl<'a> HttpProtocol<'a> {
    /// Fetches from `host` the files of `content` that `options` ask for.
    ///
    /// # Errors
    ///
    /// When no file is of `--size`.
    pub(super) fn new(host: Ipv4Addr, content: &'a Content, options: &Options) -> Result<Self, String> {
        let mut files: Vec<(&str, &[u8])> = content
            .paths()
            .filter_map(|p| content.get(p).map(|b| (p, b)))
            .filter(|(_, b)| options.size.is_none_or(|s| s == b.len()))
            .collect();
        files.sort_unstable();
        if files.is_empty() {
            return Err("no file to fetch (--size matches none)".into());
        }
        Ok(Self { host, files })
    }
}

impl Protocol for HttpProtocol<'_> {
    type State = Exchange;
    const EXCHANGE: &'static str = "request";
    const REPLY: &'static str = "response";

    /// Sends the next request.
    fn begin(&mut self, stack: &mut Stack, c: &mut Conn<Exchange>) -> Result<(), String> {
        // The first request of a connection is for a missing file; then every 16th is a HEAD.
        let pick = c.rng.usize(..self.files.len());
        let (expect, method, path) = if c.done == 0 && c.index.is_multiple_of(4) {
            (Expect::NotFound, "GET", "/no/such/file")
        } else if c.done % 16 == 15 {
            (Expect::Head(pick), "HEAD", self.files[pick].0)
        } else {
            (Expect::File(pick), "GET", self.files[pick].0)
        };
        send_request(stack, c.id, method, path, self.host)?;
        c.state.expect = Some(expect);
        Ok(())
    }

    /// Reads what came, and checks the response once it is all there.
    fn advance(
        &mut self,
        stack: &mut Stack,
        c: &mut Conn<Exchange>,
        buf: &mut [u8],
    ) -> Result<Advanced, String> {
        let x = &mut c.state;
        let (moved, head) = take_response(stack, c.id, buf, &mut x.input, x.expect.is_some())?;
        let waiting = Ok(Advanced { moved, completed: None });
        let (Some(expect), Some((status, length, head_len))) = (x.expect, head) else { return waiting };
        let (want_status, body): (u16, Option<&[u8]>) = match expect {
            Expect::File(i) => (200, Some(self.files[i].1)),
            Expect::Head(i) => {
                if length != self.files[i].1.len() {
                    return Err(format!("HEAD {}: Content-Length {length}", self.files[i].0));
                }
                (200, None)
            }
            Expect::NotFound => (404, None),
        };
        if status != want_status {
            return Err(format!("status {status}, expected {want_status}"));
        }
        let body_len = if matches!(expect, Expect::Head(_)) { 0 } else { length };
        if x.input.len() < head_len + body_len {
            return waiting;
        }
        if x.input.len() > head_len + body_len {
            return Err(format!("{} bytes beyond the response", x.input.len() - head_len - body_len));
        }
        let mut bytes = 0;
        if let Some(body) = body {
            let got = &x.input[head_len..];
            if let Some(at) =
                body.iter().zip(got).position(|(a, b)| a != b).or((body.len() != got.len()).then_some(0))
            {
                return Err(format!("body byte {at} differs"));
            }
            bytes = body.len() as u64;
        }
        x.input.clear();
        x.expect = None;
        Ok(Advanced { moved: true, completed: Some(bytes) })
    }

    fn progress(&self, totals: &Summary, secs: f64) -> String {
        format!("{} responses, {:.0} requests/s", totals.exchanges, totals.exchanges as f64 / secs)
    }

    fn tally(&self, exchanges: u64) -> String {
        format!("{exchanges} responses")
    }
}
