//! The content served, prepared at start ([`Content`]): every file's whole response (status line,
//! headers, body), for GET and for HEAD, in three variants (persistent without a `Connection`
//! header, for HTTP/1.1; `Connection: close`; `Connection: keep-alive`, for an HTTP/1.0 request
//! that asked for it), built once and cut into TCP payload segments for [`SEGMENT_SIZES`] with the
//! one's-complement sum of every segment precomputed ([`PreparedSegments`]); the error responses
//! (400, 404, 405, and the closing 408 and 503) the same way. Serving a request is picking one
//! ([`Content::respond`]) and queueing it by reference. The three variants hold a file's body three
//! times: a `--dir` of 1 GiB (the most [`Content::load`] takes) prepares about 3 GiB.
//!
//! By default each core also keeps copies of the responses in pool buffers of its runtime's pool
//! ([`Content::in_pool`]: each 1448-byte segment, [`POOL_CUT`], in `--pool-copies` buffers of its
//! own), so that the stack sends a segment by reference: only its headers are written, into the
//! headroom of a copy with no frame in flight. The pool is made larger by what that takes
//! ([`Content::pool_buffers`], at most [`MAX_POOL_BUFFERS`] a core); responses beyond it are sent by
//! copy, and the summary says how many.
//!
//! The generated demo set is written, for other servers to serve the same files, to a directory
//! the caller names or to a fresh temporary one that is removed when the [`Content`] is dropped
//! ([`Content::demo_written`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use netchannel::pool::PoolCache;
use tcp_lib::stack::{InPoolError, PreparedSegments};

use super::http::{Method, Request};

/// The payload segment sizes responses are cut for: an MSS of 1460 with and without the
/// timestamps option.
pub const SEGMENT_SIZES: [usize; 2] = [1448, 1460];
/// The segment size of the responses' pool buffers ([`Content::in_pool`]): the first of
/// [`SEGMENT_SIZES`], an MSS of 1460 with timestamps.
pub const POOL_CUT: usize = SEGMENT_SIZES[0];
/// The most pool buffers one core's copy of the responses takes (about 140 MiB); responses beyond
/// it are sent by copy.
pub const MAX_POOL_BUFFERS: usize = 1 << 16;
/// The demo set's file sizes (when no `--dir` is given): powers of two, and the 24 KiB object of
/// Sandstorm's zero-copy experiment (Marinos, Watson, Handley, SIGCOMM 2014).
pub const DEMO_SIZES: [usize; 10] =
    [1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 24 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10];
/// The most bytes loaded from a directory.
const MAX_CONTENT: u64 = 1 << 30;

/// How a response says the connection goes on: [`Responses`]' variants, in their order.
const PERSISTENCE: [&str; 3] = ["", "Connection: close\r\n", "Connection: keep-alive\r\n"];

/// One resource's responses, prepared for GET and for HEAD, each in the variants of
/// [`PERSISTENCE`]: persistent (HTTP/1.1, no header), closing, persistent saying `keep-alive`
/// (HTTP/1.0).
#[derive(Debug)]
struct Responses {
    get: [Arc<PreparedSegments>; 3],
    head: [Arc<PreparedSegments>; 3],
}

impl Responses {
    fn new(status: &str, content_type: &str, body: &[u8], extra: &str) -> Self {
        let make = |with_body: bool, persistence: &str| {
            let mut r = format!(
                "HTTP/1.1 {status}\r\nServer: netchannels-httpd\r\nContent-Type: {content_type}\r\nContent-Length: \
                 {}\r\n{extra}{persistence}\r\n",
                body.len(),
            )
            .into_bytes();
            if with_body {
                r.extend_from_slice(body);
            }
            Arc::new(PreparedSegments::new(r, &SEGMENT_SIZES))
        };
        Self { get: PERSISTENCE.map(|p| make(true, p)), head: PERSISTENCE.map(|p| make(false, p)) }
    }

    /// The closing GET response (the errors that end a connection: 400, 408, 503).
    fn closing(status: &str, body: &[u8], extra: &str) -> Arc<PreparedSegments> {
        Self::new(status, "text/plain", body, extra).get[1].clone()
    }

    /// Every prepared response.
    fn all(&self) -> impl Iterator<Item = &Arc<PreparedSegments>> {
        self.get.iter().chain(&self.head)
    }

    /// The same responses, each through `f`.
    fn map(&self, f: &mut impl FnMut(&Arc<PreparedSegments>) -> Arc<PreparedSegments>) -> Self {
        Self { get: self.get.each_ref().map(&mut *f), head: self.head.each_ref().map(&mut *f) }
    }

    fn pick(&self, method: Method, request: &Request<'_>) -> &Arc<PreparedSegments> {
        let i = if request.close {
            1
        } else if request.keep_alive_header {
            2
        } else {
            0
        };
        if method == Method::Head { &self.head[i] } else { &self.get[i] }
    }
}

/// What [`Content::in_pool`] put into the pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InPool {
    /// Responses in pool buffers (sent by reference).
    pub pooled: usize,
    /// Responses in all.
    pub responses: usize,
    /// Pool buffers they take.
    pub buffers: usize,
    /// Why the first response left out was (the pool ran short), if one was for that reason
    /// rather than the budget.
    pub error: Option<InPoolError>,
}

/// A directory removed (with what is in it) when dropped: the demo set's temporary one.
#[derive(Debug)]
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The files served, by path, with their prepared responses, and the error responses.
#[derive(Debug)]
pub struct Content {
    files: HashMap<String, (Arc<[u8]>, Responses)>,
    not_found: Responses,
    not_allowed: Responses,
    bad_request: Arc<PreparedSegments>,
    request_timeout: Arc<PreparedSegments>,
    unavailable: Arc<PreparedSegments>,
    /// The demo set's temporary directory, removed with the content.
    temporary: Option<RemovedOnDrop>,
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
    let mut bytes = vec![0; size];
    fastrand::Rng::with_seed(size as u64).fill(&mut bytes);
    bytes
}

/// What the demo set is, in words.
const DEMO_SOURCE: &str = "a generated demo set (1 KiB .. 256 KiB)";

/// The demo set's files: [`DEMO_SIZES`] as `/1k.bin` .. `/256k.bin` and an `/index.html`.
fn demo_files() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> =
        DEMO_SIZES.iter().map(|&s| (format!("/{}", demo_name(s)), demo_bytes(s))).collect();
    let mut index = String::from("<html><body><h1>netchannels httpd</h1><ul>\n");
    for &s in &DEMO_SIZES {
        index.push_str(&format!("<li><a href=\"/{0}\">{0}</a></li>\n", demo_name(s)));
    }
    index.push_str("</ul></body></html>\n");
    files.push(("/index.html".into(), index.into_bytes()));
    files
}

/// Writes `files` (paths start with `/`) into `dir`, creating it if missing.
fn write_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (p, b) in files {
        let path = dir.join(&p[1..]);
        std::fs::write(&path, b).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
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
            bad_request: Responses::closing("400 Bad Request", b"400 bad request\n", ""),
            request_timeout: Responses::closing("408 Request Timeout", b"408 request timeout\n", ""),
            unavailable: Responses::closing(
                "503 Service Unavailable",
                b"503 service unavailable: too many connections\n",
                "Retry-After: 1\r\n",
            ),
            temporary: None,
            source,
        }
    }

    /// The demo set: [`DEMO_SIZES`] as `/1k.bin` .. `/256k.bin` and an `/index.html` listing them.
    /// Also written to `dir` (when given and writable) so that another server can serve the same
    /// files.
    #[must_use]
    pub fn demo(dir: Option<&Path>) -> Self {
        let files = demo_files();
        let mut source = String::from(DEMO_SOURCE);
        if let Some(dir) = dir
            && write_files(dir, &files).is_ok()
        {
            source.push_str(&format!(", also written to {}", dir.display()));
        }
        Self::new(files, source)
    }

    /// The demo set ([`demo`](Self::demo)), written to `dir` (created if missing, kept), or with
    /// `None` to a new directory under [`std::env::temp_dir`] that is removed when the content is
    /// dropped. Returns the content and the directory.
    ///
    /// # Errors
    ///
    /// A message naming the directory when it cannot be created or a file cannot be written.
    pub fn demo_written(dir: Option<&Path>) -> Result<(Self, PathBuf), String> {
        let files = demo_files();
        let (path, temporary) = match dir {
            Some(dir) => (dir.to_path_buf(), None),
            None => {
                let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
                let path =
                    std::env::temp_dir().join(format!("netchannels-httpd-{}-{nanos}", std::process::id()));
                // create_dir, not create_dir_all: a directory already there is not ours to remove.
                std::fs::create_dir(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
                (path.clone(), Some(RemovedOnDrop(path)))
            }
        };
        // On an error the temporary directory (if any) is removed as `temporary` drops.
        write_files(&path, &files)?;
        let kept = if temporary.is_some() { "removed at exit" } else { "kept" };
        let mut content = Self::new(files, format!("{DEMO_SOURCE}, written to {} ({kept})", path.display()));
        content.temporary = temporary;
        Ok((content, path))
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

    /// Every prepared response.
    fn responses(&self) -> impl Iterator<Item = &Arc<PreparedSegments>> {
        let files = self.files.values().flat_map(|(_, r)| r.all());
        let errors = [&self.bad_request, &self.request_timeout, &self.unavailable];
        files.chain(self.not_found.all()).chain(self.not_allowed.all()).chain(errors)
    }

    /// Pool buffers `copies` copies of every response in the pool take ([`in_pool`](Self::in_pool)).
    #[must_use]
    pub fn pool_buffers(&self, copies: usize) -> usize {
        self.responses().map(|r| r.len().div_ceil(POOL_CUT)).sum::<usize>().saturating_mul(copies)
    }

    /// A copy of the content whose responses are also in buffers of `cache`'s pool, cut at
    /// [`POOL_CUT`], `copies` buffers a segment (sent by reference from whichever has no frame in
    /// flight), as many as `budget` buffers hold; the others are as they
    /// are (sent by copy), and so are all after the pool ran out of free buffers. The bytes are
    /// copied once more (into the copy's own prepared responses); the files are shared.
    #[must_use]
    pub fn in_pool(&self, cache: &PoolCache, budget: usize, copies: usize) -> (Self, InPool) {
        let mut done = InPool::default();
        let mut pool = |r: &Arc<PreparedSegments>| {
            done.responses += 1;
            let need = r.len().div_ceil(POOL_CUT).saturating_mul(copies);
            if done.error.is_some() || done.buffers + need > budget {
                return Arc::clone(r);
            }
            match PreparedSegments::in_pool(r.data(), &SEGMENT_SIZES, (POOL_CUT, copies), cache) {
                Ok(p) => {
                    done.pooled += 1;
                    done.buffers += need;
                    Arc::new(p)
                }
                Err(e) => {
                    done.error = Some(e);
                    Arc::clone(r)
                }
            }
        };
        let files =
            self.files.iter().map(|(k, (b, r))| (k.clone(), (Arc::clone(b), r.map(&mut pool)))).collect();
        let content = Self {
            files,
            not_found: self.not_found.map(&mut pool),
            not_allowed: self.not_allowed.map(&mut pool),
            bad_request: pool(&self.bad_request),
            request_timeout: pool(&self.request_timeout),
            unavailable: pool(&self.unavailable),
            temporary: None,
            source: self.source.clone(),
        };
        (content, done)
    }

    /// The prepared 400 response (it closes the connection), for a malformed request.
    #[must_use]
    pub fn bad_request(&self) -> &Arc<PreparedSegments> {
        &self.bad_request
    }

    /// The prepared 408 response (it closes the connection), for a request head not complete in
    /// time.
    #[must_use]
    pub fn request_timeout(&self) -> &Arc<PreparedSegments> {
        &self.request_timeout
    }

    /// The prepared 503 response (`Retry-After: 1`; it closes the connection), for a connection
    /// over the cap.
    #[must_use]
    pub fn unavailable(&self) -> &Arc<PreparedSegments> {
        &self.unavailable
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
                self.files.get(path).map_or(&self.not_found, |(_, r)| r).pick(request.method, request)
            }
            Method::Other => self.not_allowed.pick(Method::Get, request),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_prepared_per_file() {
        let content = Content::new(vec![("/a.txt".into(), b"hello".to_vec())], "test".into());
        let get =
            Request { method: Method::Get, path: "/a.txt", close: false, keep_alive_header: false, len: 0 };
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
        // HTTP/1.0 keep-alive: the response says so.
        let kept = content.respond(&Request { keep_alive_header: true, ..get });
        let text = String::from_utf8_lossy(kept.data()).into_owned();
        assert!(text.ends_with("Connection: keep-alive\r\n\r\nhello"), "{text}");
        assert!(!String::from_utf8_lossy(r.data()).contains("Connection:"));
        for (r, status) in [(content.request_timeout(), "408"), (content.unavailable(), "503")] {
            let text = String::from_utf8_lossy(r.data()).into_owned();
            assert!(
                text.starts_with(&format!("HTTP/1.1 {status} ")) && text.contains("Connection: close\r\n")
            );
        }
        assert!(String::from_utf8_lossy(content.unavailable().data()).contains("Retry-After: 1\r\n"));
    }

    #[test]
    fn demo_files_go_to_a_temporary_directory_removed_with_the_content() {
        let (content, dir) = Content::demo_written(None).unwrap();
        assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
        assert_eq!(std::fs::read(dir.join("1k.bin")).unwrap(), content.get("/1k.bin").unwrap());
        assert!(content.source.contains(&dir.display().to_string()), "{}", content.source);
        drop(content);
        assert!(!dir.exists(), "{} is still there", dir.display());
        // A directory given is kept.
        let given = std::env::temp_dir().join(format!("netchannels-httpd-test-{}", std::process::id()));
        let (content, dir) = Content::demo_written(Some(&given)).unwrap();
        drop(content);
        assert!(dir.join("index.html").exists());
        std::fs::remove_dir_all(&given).unwrap();
        let e = Content::demo_written(Some(Path::new("/proc/no/such/dir"))).unwrap_err();
        assert!(e.contains("/proc/no/such/dir"), "{e}");
    }
}
