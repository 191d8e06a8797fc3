//! HTTP/1.1 requests: [`parse`] finds one complete request at the start of a connection's input.
//!
//! GET and HEAD; any other method (a valid token) parses as [`Method::Other`] (answered 405). A
//! request (line, headers and any `Content-Length` body) is at most `max` bytes ([`MAX_REQUEST`]
//! for the server); longer, or malformed (a bad request line, a header line without a colon,
//! `Transfer-Encoding`, a bad `Content-Length`, a version other than HTTP/1.0 or 1.1), it is
//! [`Parsed::Bad`] (answered 400, then the connection closes).
//!
//! Lines end in CRLF or, as RFC 9112 §2.2 allows a recipient to accept, a lone LF (a CR before it
//! is ignored); a bare CR anywhere else is malformed (RFC 9112 §2.2: the recipient must treat it
//! as invalid or replace it). Persistence (RFC 9112 §9.3): an HTTP/1.1 request keeps the
//! connection unless it says `Connection: close`; an HTTP/1.0 request closes it unless it says
//! `Connection: keep-alive` (and not `close`), and its response then says `Connection:
//! keep-alive` ([`Request::keep_alive_header`]).

/// The most bytes of one request (line, headers, body).
pub const MAX_REQUEST: usize = 8 * 1024;

/// A request method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD.
    Head,
    /// Any other (valid token): 405.
    Other,
}

/// A parsed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// The method.
    pub method: Method,
    /// The request target as sent.
    pub path: &'a str,
    /// The connection closes after the response (`Connection: close`, or HTTP/1.0 without
    /// `Connection: keep-alive`).
    pub close: bool,
    /// The response must say `Connection: keep-alive` (an HTTP/1.0 request that asked for it: an
    /// HTTP/1.0 client takes a response without it as closing, RFC 9112 §C.2.2).
    pub keep_alive_header: bool,
    /// Bytes of the buffer the request took (line, headers, body).
    pub len: usize,
}

/// What [`parse`] found at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// Not a whole request yet (and not over the limit).
    Incomplete,
    /// A request.
    Request(Request<'a>),
    /// Malformed, or over `max` bytes: 400, then close.
    Bad,
}

fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

/// Where the head at the start of `buf` ends: the length of the head, its empty line included, or
/// `None` while no empty line has come. A line ends in LF, with or without a CR before it.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = buf[from..].iter().position(|&c| c == b'\n') {
        let lf = from + at;
        match buf.get(lf + 1..) {
            Some([b'\n', ..]) => return Some(lf + 2),
            Some([b'\r', b'\n', ..]) => return Some(lf + 3),
            _ => from = lf + 1,
        }
    }
    None
}

/// Parses the request at the start of `buf`; at most `max` bytes make one request.
#[must_use]
pub fn parse(buf: &[u8], max: usize) -> Parsed<'_> {
    let Some(head_len) = head_end(buf) else {
        return if buf.len() >= max { Parsed::Bad } else { Parsed::Incomplete };
    };
    if head_len > max {
        return Parsed::Bad;
    }
    // The head without its empty line, as lines without their terminators.
    let Ok(head) = std::str::from_utf8(&buf[..head_len]) else { return Parsed::Bad };
    let mut lines = head.split_terminator('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Parsed::Bad;
    };
    if !is_token(method.as_bytes())
        || !(path.starts_with('/') || path == "*")
        || path.bytes().any(|c| c <= b' ' || c == 0x7f)
    {
        return Parsed::Bad;
    }
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Parsed::Bad,
    };
    let (mut close, mut keep_alive) = (false, false);
    let mut body = 0usize;
    for header in lines.take_while(|l| !l.is_empty()) {
        let Some((name, value)) = header.split_once(':') else { return Parsed::Bad };
        if !is_token(name.as_bytes()) || value.contains('\r') {
            return Parsed::Bad;
        }
        let value = value.trim_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("connection") {
            for option in value.split(',').map(str::trim) {
                close |= option.eq_ignore_ascii_case("close");
                keep_alive |= option.eq_ignore_ascii_case("keep-alive");
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            match value.parse::<usize>() {
                Ok(n) if n <= max => body = n,
                _ => return Parsed::Bad,
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Bad;
        }
    }
    let len = head_len + body;
    if len > max {
        return Parsed::Bad;
    }
    if buf.len() < len {
        return Parsed::Incomplete;
    }
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        _ => Method::Other,
    };
    let close = close || (http10 && !keep_alive);
    Parsed::Request(Request { method, path, close, keep_alive_header: http10 && !close, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> Parsed<'_> {
        parse(text.as_bytes(), MAX_REQUEST)
    }

    #[test]
    fn parses_requests() {
        let Parsed::Request(r) = req("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET") else { panic!() };
        assert_eq!((r.method, r.path, r.close, r.len), (Method::Get, "/a", false, 28));
        let Parsed::Request(r) = req("HEAD /b?x=1 HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n") else {
            panic!()
        };
        assert_eq!((r.method, r.path, r.close), (Method::Head, "/b?x=1", true));
        let Parsed::Request(r) = req("GET / HTTP/1.0\r\n\r\n") else { panic!() };
        assert!(r.close && !r.keep_alive_header);
        let Parsed::Request(r) = req("POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc") else { panic!() };
        assert_eq!((r.method, r.len), (Method::Other, 42));
        assert_eq!(req("POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nab"), Parsed::Incomplete);
        assert_eq!(req("GET /a HTTP/1.1\r\nHost: x\r\n"), Parsed::Incomplete);
        for bad in [
            "GET /a\r\n\r\n",
            "GET  /a HTTP/1.1\r\n\r\n",
            "GET a HTTP/1.1\r\n\r\n",
            "GET /a HTTP/2.0\r\n\r\n",
            "G(T /a HTTP/1.1\r\n\r\n",
            "GET /a HTTP/1.1\r\nno colon\r\n\r\n",
            "GET /a HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "GET /a HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            "GET /a HTTP/1.1\r\nContent-Length: 999999\r\n\r\n",
            "GET /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert_eq!(req(bad), Parsed::Bad, "{bad:?}");
        }
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_REQUEST));
        assert_eq!(req(&long), Parsed::Bad);
    }

    #[test]
    fn a_lone_lf_ends_a_line() {
        // RFC 9112 §2.2: a recipient may take LF alone as a line terminator (and ignore a CR before it).
        let Parsed::Request(r) = req("GET /a HTTP/1.1\nHost: x\n\nGET") else { panic!() };
        assert_eq!((r.method, r.path, r.close, r.len), (Method::Get, "/a", false, 25));
        let Parsed::Request(r) = req("GET /a HTTP/1.1\r\nHost: x\n\r\n") else { panic!() };
        assert_eq!(r.len, 27);
        let Parsed::Request(r) = req("HEAD /b HTTP/1.1\nConnection: close\r\n\n") else { panic!() };
        assert_eq!((r.method, r.close, r.len), (Method::Head, true, 37));
        assert_eq!(req("GET /a HTTP/1.1\nHost: x\n"), Parsed::Incomplete);
        assert_eq!(req("GET /a HTTP/1.1\nHost: x\n\r"), Parsed::Incomplete);
        // A bare CR is not a line terminator, nor allowed inside a line.
        for bad in [
            "GET /a HTTP/1.1\rHost: x\n\n",
            "GET /a HTTP/1.1\nHost: x\ry\n\n",
            "GET /a HTTP/1.1\r\r\n\r\n",
            "\n\n",
        ] {
            assert_eq!(req(bad), Parsed::Bad, "{bad:?}");
        }
    }

    #[test]
    fn http_1_0_keep_alive() {
        let Parsed::Request(r) = req("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n") else { panic!() };
        assert!(!r.close && r.keep_alive_header);
        let Parsed::Request(r) = req("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n") else {
            panic!()
        };
        assert!(r.close && !r.keep_alive_header);
        // HTTP/1.1 is persistent without saying so; the response need not say it either.
        let Parsed::Request(r) = req("GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n") else { panic!() };
        assert!(!r.close && !r.keep_alive_header);
    }
}
