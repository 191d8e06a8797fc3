//! HTTP/1.1 requests: [`parse`] finds one complete request at the start of a connection's input.
//!
//! GET and HEAD; any other method (a valid token) parses as [`Method::Other`] (answered 405). A
//! request (line, headers and any `Content-Length` body) is at most `max` bytes ([`MAX_REQUEST`]
//! for the server); longer, or malformed (a bad request line, a header line without a colon,
//! `Transfer-Encoding`, a bad `Content-Length`, a version other than HTTP/1.0 or 1.1), it is
//! [`Parsed::Bad`] (answered 400, then the connection closes). `Connection: close` and HTTP/1.0
//! close the connection after the response.

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
    /// The connection closes after the response (`Connection: close`, or HTTP/1.0).
    pub close: bool,
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

/// Parses the request at the start of `buf`; at most `max` bytes make one request.
#[must_use]
pub fn parse(buf: &[u8], max: usize) -> Parsed<'_> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() >= max { Parsed::Bad } else { Parsed::Incomplete };
    };
    let head_len = end + 4;
    if head_len > max {
        return Parsed::Bad;
    }
    let Ok(head) = std::str::from_utf8(&buf[..end]) else { return Parsed::Bad };
    let mut lines = head.split("\r\n");
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
    let mut close = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Parsed::Bad,
    };
    let mut body = 0usize;
    for header in lines {
        let Some((name, value)) = header.split_once(':') else { return Parsed::Bad };
        if !is_token(name.as_bytes()) {
            return Parsed::Bad;
        }
        let value = value.trim_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("connection") {
            if value.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")) {
                close = true;
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
    Parsed::Request(Request { method, path, close, len })
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
        assert!(r.close);
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
}
