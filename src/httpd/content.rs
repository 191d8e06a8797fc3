//! The content served, prepared at start ([`Content`]): every file's whole response (status line,
//! headers, body), for GET and for HEAD, with and without `Connection: close`, built once and cut
//! into TCP payload segments for [`SEGMENT_SIZES`] with the one's-complement sum of every segment
//! precomputed ([`PreparedSegments`]); the error responses (400, 404, 405) the same way. Serving a
//! request is picking one ([`Content::respond`]) and queueing it by reference.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use tcp_lib::stack::PreparedSegments;

use super::http::{Method, Request};
use crate::util::Rng;

/// The payload segment sizes responses are cut for: an MSS of 1460 with and without the
/// timestamps option.
pub const SEGMENT_SIZES: [usize; 2] = [1448, 1460];
/// The demo set's file sizes (when no `--dir` is given).
pub const DEMO_SIZES: [usize; 9] =
    [1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10];
/// The most bytes loaded from a directory.
const MAX_CONTENT: u64 = 1 << 30;

/// One resource's responses, prepared: `[keep-alive, close]` for GET and for HEAD.
#[derive(Debug)]
struct Responses {
    get: [Arc<PreparedSegments>; 2],
    head: [Arc<PreparedSegments>; 2],
}

impl Responses {
    fn new(status: &str, content_type: &str, body: &[u8], extra: &str) -> Self {
        let make = |with_body: bool, close: bool| {
            let mut r = format!(
                "HTTP/1.1 {status}\r\nServer: netchannels-httpd\r\nContent-Type: {content_type}\r\nContent-Length: \
                 {}\r\n{extra}{}\r\n",
                body.len(),
                if close { "Connection: close\r\n" } else { "" }
            )
            .into_bytes();
            if with_body {
                r.extend_from_slice(body);
            }
            Arc::new(PreparedSegments::new(r, &SEGMENT_SIZES))
        };
        Self { get: [make(true, false), make(true, true)], head: [make(false, false), make(false, true)] }
    }

    fn pick(&self, method: Method, close: bool) -> &Arc<PreparedSegments> {
        let i = usize::from(close);
        if method == Method::Head { &self.head[i] } else { &self.get[i] }
    }
}

/// The files served, by path, with their prepared responses, and the error responses.
#[derive(Debug)]
pub struct Content {
    files: HashMap<String, (Arc<[u8]>, Responses)>,
    not_found: Responses,
    not_allowed: Responses,
    bad_request: Arc<PreparedSegments>,
    /// Where the files came from, in words.
    pub source: String,
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).as_deref() {
        Some("html" | "htm") => "text/html",
        Some("txt") => "text/plain",
        Some("css") => "text/css",
        Some("js") => "text/javascript",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

/// The demo file name for a size: `1k.bin` .. `256k.bin`.
#[must_use]
pub fn demo_name(size: usize) -> String {
    format!("{}k.bin", size >> 10)
}

/// The deterministic contents of a demo file.
#[must_use]
pub fn demo_bytes(size: usize) -> Vec<u8> {
    let mut rng = Rng::new(size as u64);
    (0..size).map(|_| rng.next().to_le_bytes()[5]).collect()
}

impl Content {
    /// The content from `files` (path, bytes); paths start with `/`.
    #[must_use]
    pub fn new(files: Vec<(String, Vec<u8>)>, source: String) -> Self {
        let files = files
            .into_iter()
            .map(|(path, bytes)| {
                let responses = Responses::new("200 OK", content_type(&path), &bytes, "");
                (path, (Arc::from(bytes), responses))
            })
            .collect();
        Self {
            files,
            not_found: Responses::new("404 Not Found", "text/plain", b"404 not found\n", ""),
            not_allowed: Responses::new(
                "405 Method Not Allowed",
                "text/plain",
                b"405 method not allowed\n",
                "Allow: GET, HEAD\r\n",
            ),
            bad_request: Responses::new("400 Bad Request", "text/plain", b"400 bad request\n", "").get[1]
                .clone(),
            source,
        }
    }

    /// The demo set: [`DEMO_SIZES`] as `/1k.bin` .. `/256k.bin` and an `/index.html` listing them.
    /// Also written to `dir` (when given and writable) so that another server can serve the same
    /// files.
    #[must_use]
    pub fn demo(dir: Option<&Path>) -> Self {
        let mut files: Vec<(String, Vec<u8>)> =
            DEMO_SIZES.iter().map(|&s| (format!("/{}", demo_name(s)), demo_bytes(s))).collect();
        let mut index = String::from("<html><body><h1>netchannels httpd</h1><ul>\n");
        for &s in &DEMO_SIZES {
            index.push_str(&format!("<li><a href=\"/{0}\">{0}</a></li>\n", demo_name(s)));
        }
        index.push_str("</ul></body></html>\n");
        files.push(("/index.html".into(), index.into_bytes()));
        let mut source = String::from("a generated demo set (1 KiB .. 256 KiB)");
        if let Some(dir) = dir
            && std::fs::create_dir_all(dir).is_ok()
            && files.iter().all(|(p, b)| std::fs::write(dir.join(&p[1..]), b).is_ok())
        {
            source.push_str(&format!(", also written to {}", dir.display()));
        }
        Self::new(files, source)
    }

    /// Every regular file under `dir` (recursively; symbolic links are not followed).
    ///
    /// # Errors
    /// A message when the directory cannot be read, or holds more than 1 GiB.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let mut files = Vec::new();
        let mut total = 0u64;
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            let entries = std::fs::read_dir(&d).map_err(|e| format!("cannot read {}: {e}", d.display()))?;
            for entry in entries {
                let entry = entry.map_err(|e| format!("cannot read {}: {e}", d.display()))?;
                let kind = entry.file_type().map_err(|e| e.to_string())?;
                let path = entry.path();
                if kind.is_dir() {
                    todo.push(path);
                } else if kind.is_file() {
                    let bytes =
                        std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    total += bytes.len() as u64;
                    if total > MAX_CONTENT {
                        return Err(format!("{} holds more than 1 GiB", dir.display()));
                    }
                    let rel = path.strip_prefix(dir).map_err(|e| e.to_string())?;
                    let name: Vec<String> =
                        rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                    files.push((format!("/{}", name.join("/")), bytes));
                }
            }
        }
        let n = files.len();
        Ok(Self::new(
            files,
            format!("{n} files from {} ({:.1} MiB)", dir.display(), total as f64 / 1048576.0),
        ))
    }

    /// The prepared 400 response (it closes the connection), for a malformed request.
    #[must_use]
    pub fn bad_request(&self) -> &Arc<PreparedSegments> {
        &self.bad_request
    }

    /// The files' paths.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    /// A file's bytes.
    #[must_use]
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(|(b, _)| &b[..])
    }

    /// Files.
    #[must_use]
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// No files.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The prepared response to a parsed request: the file's (`/` is `/index.html`; a query or
    /// fragment is ignored), 404, or 405 for a method other than GET and HEAD.
    #[must_use]
    pub fn respond(&self, request: &Request<'_>) -> &Arc<PreparedSegments> {
        match request.method {
            Method::Get | Method::Head => {
                let path = request.path.split(['?', '#']).next().unwrap_or("");
                let path = if path == "/" { "/index.html" } else { path };
                self.files.get(path).map_or(&self.not_found, |(_, r)| r).pick(request.method, request.close)
            }
            Method::Other => self.not_allowed.pick(Method::Get, request.close),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_prepared_per_file() {
        let content = Content::new(vec![("/a.txt".into(), b"hello".to_vec())], "test".into());
        let get = Request { method: Method::Get, path: "/a.txt", close: false, len: 0 };
        let r = content.respond(&get);
        let text = String::from_utf8_lossy(r.data()).into_owned();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n") && text.ends_with("\r\n\r\nhello"), "{text}");
        assert!(text.contains("Content-Type: text/plain\r\nContent-Length: 5\r\n"), "{text}");
        let head = content.respond(&Request { method: Method::Head, close: true, ..get });
        let text = String::from_utf8_lossy(head.data()).into_owned();
        assert!(text.ends_with("Connection: close\r\n\r\n"), "{text}");
        let missing = content.respond(&Request { path: "/b", ..get });
        assert!(missing.data().starts_with(b"HTTP/1.1 404 "));
        let post = content.respond(&Request { method: Method::Other, ..get });
        assert!(post.data().starts_with(b"HTTP/1.1 405 "));
        assert!(SEGMENT_SIZES.iter().all(|&m| r.is_cut_for(m)));
    }
}
