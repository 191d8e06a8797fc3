//! The model client's protocol for the hyper service ([`crate::client`] drives it): each
//! connection asks, one request at a time, for `/` or `/bytes/N` (`N` one of a ladder of sizes up
//! to `--max-body`, `--max-body` itself included); the first request of every fourth connection is
//! for a missing page (404). Status, `Content-Length` and every body byte are checked.

use std::net::Ipv4Addr;

use tcp_lib::stack::Stack;

use super::{INDEX, NOT_FOUND, pattern};
use crate::client::{Advanced, Conn, Protocol, Summary};
use crate::httpd::{send_request, take_response};

/// Body sizes the client asks for (those up to `--max-body`, and `--max-body`).
const SIZES: [usize; 9] = [1, 100, 1000, 1448, 4096, 16_384, 65_536, 262_144, 1 << 20];

/// What a response should be.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// 200 and [`INDEX`].
    Index,
    /// 200 and this many bytes of the pattern.
    Bytes(usize),
    /// 404 and [`NOT_FOUND`].
    NotFound,
}

impl Expect {
    fn status(self) -> u16 {
        if self == Self::NotFound { 404 } else { 200 }
    }

    fn len(self) -> usize {
        match self {
            Self::Index => INDEX.len(),
            Self::Bytes(n) => n,
            Self::NotFound => NOT_FOUND.len(),
        }
    }

    /// The first byte of `body` that differs from what is expected.
    fn differs(self, body: &[u8]) -> Option<usize> {
        match self {
            Self::Index => first_difference(INDEX.as_bytes(), body),
            Self::NotFound => first_difference(NOT_FOUND.as_bytes(), body),
            Self::Bytes(_) => body.iter().enumerate().position(|(i, &b)| b != pattern(i)),
        }
    }
}

fn first_difference(want: &[u8], got: &[u8]) -> Option<usize> {
    want.iter().zip(got).position(|(a, b)| a != b)
}

/// A connection's side of HTTP: the response it expects, and what it received of it.
#[derive(Default)]
pub(super) struct Exchange {
    expect: Option<Expect>,
    input: Vec<u8>,
}

/// The client's protocol: `/`, `/bytes/N` and a missing page.
pub(super) struct HyperProtocol {
    /// The server's address, for the `Host` header.
    host: Ipv4Addr,
    /// The body sizes to ask for.
    sizes: Vec<usize>,
}

impl HyperProtocol {
    /// Asks `host` for bodies up to `max_body` bytes.
    pub(super) fn new(host: Ipv4Addr, max_body: usize) -> Self {
        let mut sizes: Vec<usize> = SIZES.iter().copied().filter(|&n| n < max_body).collect();
        sizes.push(max_body);
        Self { host, sizes }
    }
}

impl Protocol for HyperProtocol {
    type State = Exchange;
    const EXCHANGE: &'static str = "request";
    const REPLY: &'static str = "response";

    /// Sends the next request.
    fn begin(&mut self, stack: &mut Stack, c: &mut Conn<Exchange>) -> Result<(), String> {
        let pick = c.rng.u64(..);
        let expect = if c.done == 0 && c.index.is_multiple_of(4) {
            Expect::NotFound
        } else if pick.is_multiple_of(8) {
            Expect::Index
        } else {
            let i = usize::try_from((pick >> 8) % self.sizes.len() as u64).unwrap_or(0);
            Expect::Bytes(self.sizes[i])
        };
        let path = match expect {
            Expect::Index => "/".to_owned(),
            Expect::Bytes(n) => format!("/bytes/{n}"),
            Expect::NotFound => "/no/such/page".to_owned(),
        };
        send_request(stack, c.id, "GET", &path, self.host)?;
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
        if status != expect.status() || length != expect.len() {
            return Err(format!(
                "status {status} with Content-Length {length}, expected {} with {}",
                expect.status(),
                expect.len()
            ));
        }
        if x.input.len() < head_len + length {
            return waiting;
        }
        if x.input.len() > head_len + length {
            return Err(format!("{} bytes beyond the response", x.input.len() - head_len - length));
        }
        if let Some(at) = expect.differs(&x.input[head_len..]) {
            return Err(format!("body byte {at} of {length} differs"));
        }
        x.input.clear();
        x.expect = None;
        Ok(Advanced { moved: true, completed: Some(length as u64) })
    }

    fn progress(&self, totals: &Summary, secs: f64) -> String {
        format!("{} responses, {:.0} requests/s", totals.exchanges, totals.exchanges as f64 / secs)
    }

    fn tally(&self, exchanges: u64) -> String {
        format!("{exchanges} responses")
    }
}
