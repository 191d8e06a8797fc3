//! Slowloris against httpd's `--tap` mode: in a private network namespace, 10,000 kernel
//! connections each send part of a request head and wait. While they are held a new client is
//! served at once (three in a row, each measured under 1 s), the process's resident memory grows
//! by less than a stated bound, and every one of them is cut off by `--header-timeout` (408, then
//! the server's FIN) no earlier than the timeout after its connect began and no later than the
//! timeout plus one second after the server acknowledged its partial head (`SIOCOUTQ` at 0: the
//! server's stack has the connection, and the service accepts it in the next rounds; a debug build
//! takes a moment to catch up with the burst of handshakes, so the connect's end would understate
//! when its timer started). The server counts 10,000 header timeouts.
//!
//! A test binary of its own: the memory it measures is this process's, with no other test's
//! server beside it. It raises `RLIMIT_NOFILE` to hold the connections and the TAP's transmit
//! queue to take the burst. Without root or `/dev/net/tun` it prints `skipped: <why>`.

mod httpd_common;

use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use httpd_common::{PORT, SERVER, connect, read_response, serve, vm_rss};
use netchannels::httpd::{Content, Options};
use netns_test::ip;

/// The slow clients.
const CONNS: usize = 10_000;
/// Threads that open them.
const THREADS: usize = 50;
/// The server's `--header-timeout`: long enough that every slow client is connected before the
/// first is cut off.
const HEADER: Duration = Duration::from_secs(6);
/// How late past the header timeout, counted from the server's acknowledgment of the partial head,
/// a connection may be cut off: the server's own bound is its accept plus the timeout plus one
/// sweep (100 ms); the client sees the accept only through the acknowledgment, which the accept
/// follows within a few rounds since the event loop accepts in batches (before, one a round, it
/// lagged 1 to 2 s behind after the burst), and the client polls its sockets every 20 ms.
const LATE: Duration = Duration::from_secs(1);
/// New clients measured while the slow ones are held, one after another.
const NEW_CLIENTS: usize = 3;
/// How long each of them may wait for its response ("at once"; measured 2 to 8 ms in a debug build).
const FRESH: Duration = Duration::from_secs(1);
/// How much the process's resident memory may grow while the slow clients are held: 4 KiB per
/// connection (the server's stack connection, its read-ahead and the event loop's entry; the
/// clients' `TcpStream`s are file descriptors).
const RSS_BOUND: u64 = (CONNS as u64) * 4096;
/// What each slow client sends: a request head without its end.
const PARTIAL: &[u8] = b"GET /1k.bin HTTP/1.1\r\nHost: slow\r\n";

/// Raises this process's open-file limit to at least `n` (the hard limit too, which needs root).
fn raise_nofile(n: u64) -> Result<(), String> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the limit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    if limit.rlim_cur >= n {
        return Ok(());
    }
    limit.rlim_cur = n;
    limit.rlim_max = limit.rlim_max.max(n);
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(format!(
            "raising RLIMIT_NOFILE to {n} for {CONNS} connections: {} (ulimit -n {n})",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// A slow client: its socket, when its connect began, when the server had acknowledged its
/// partial head (it had accepted the connection by then), what it has received and when the server
/// closed it.
struct Slow {
    socket: TcpStream,
    began: Instant,
    acked: Option<Instant>,
    got: Vec<u8>,
    closed: Option<Instant>,
}

/// Bytes sent on `socket` that its peer has not acknowledged yet (`SIOCOUTQ`).
fn unacked(socket: &TcpStream) -> Result<i32, String> {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int, into `n`, for the descriptor `socket` owns.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::TIOCOUTQ, &mut n) } != 0 {
        return Err(format!("SIOCOUTQ: {}", std::io::Error::last_os_error()));
    }
    Ok(n)
}

/// Polls the slow clients until the server acknowledged every partial head (or `until`).
fn wait_acked(slow: &mut [Slow], until: Instant) -> Result<(), String> {
    let mut left = slow.len();
    while left > 0 {
        if Instant::now() >= until {
            return Err(format!("{left} partial heads not acknowledged by the server"));
        }
        for s in slow.iter_mut().filter(|s| s.acked.is_none()) {
            if unacked(&s.socket)? == 0 {
                s.acked = Some(Instant::now());
                left -= 1;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Opens `n` slow clients.
fn open_slow(n: usize) -> Result<Vec<Slow>, String> {
    let addr = SocketAddrV4::new(SERVER, PORT);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let began = Instant::now();
        let mut socket = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(10))
            .map_err(|e| format!("slow client {}: connect: {e}", out.len()))?;
        socket.write_all(PARTIAL).map_err(|e| format!("slow client: {e}"))?;
        out.push(Slow { socket, began, acked: None, got: Vec::new(), closed: None });
    }
    Ok(out)
}

/// Polls every slow client until the server closed it (or `until`): what it got, and when.
fn wait_closed(slow: &mut [Slow], until: Instant) -> Result<(), String> {
    for s in slow.iter() {
        s.socket.set_nonblocking(true).map_err(|e| e.to_string())?;
    }
    let mut buf = [0u8; 512];
    let mut open = slow.len();
    while open > 0 && Instant::now() < until {
        for s in slow.iter_mut().filter(|s| s.closed.is_none()) {
            loop {
                match s.socket.read(&mut buf) {
                    Ok(0) => {
                        s.closed = Some(Instant::now());
                        open -= 1;
                        break;
                    }
                    Ok(n) if s.got.len() < 4096 => s.got.extend_from_slice(&buf[..n]),
                    Ok(_) => return Err("a slow client got more than 4 KiB".into()),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(format!("a slow client: {e}")),
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// What the run measured.
struct Measured {
    connect: Duration,
    fresh: Vec<Duration>,
    rss_growth: u64,
    earliest: Duration,
    latest: Duration,
}

fn slowloris() -> Result<(), String> {
    raise_nofile(CONNS as u64 + 1024)?;
    let content = Arc::new(Content::demo(None));
    let options = Options { header_timeout: HEADER, max_conns: 2 * CONNS, ..Options::default() };
    let iface = "ncslow0";
    let (m, report) = serve(iface, options, &content, || {
        ip(&["link", "set", "dev", iface, "txqueuelen", "20000"])?;
        let get = |what: &str| -> Result<Duration, String> {
            let start = Instant::now();
            let s = connect(Duration::from_secs(10))?;
            let mut w = s.try_clone().map_err(|e| e.to_string())?;
            w.write_all(b"GET /1k.bin HTTP/1.1\r\n\r\n").map_err(|e| e.to_string())?;
            let (status, _, body) = read_response(&mut BufReader::new(s), false)?;
            if status != 200 || body != content.get("/1k.bin").ok_or("no file")? {
                return Err(format!("{what}: status {status}"));
            }
            Ok(start.elapsed())
        };
        get("a first client")?;
        let rss0 = vm_rss()?;
        let start = Instant::now();
        let mut slow: Vec<Slow> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..THREADS).map(|_| sc.spawn(|| open_slow(CONNS / THREADS))).collect();
            let mut all = Vec::with_capacity(CONNS);
            for h in hs {
                all.extend(h.join().map_err(|_| "a slow client thread panicked".to_owned())??);
            }
            Ok::<_, String>(all)
        })?;
        let first_cut = slow.iter().map(|s| s.began).min().ok_or("no slow client")? + HEADER;
        wait_acked(&mut slow, first_cut)?;
        let connect = start.elapsed();
        // All held now (the first is cut off only HEADER after it began).
        let fresh: Vec<Duration> = (0..NEW_CLIENTS)
            .map(|_| get("a new client while the slow ones are held"))
            .collect::<Result<_, _>>()?;

        let rss_growth = vm_rss()?.saturating_sub(rss0);
        if Instant::now() >= first_cut {
            return Err(format!(
                "opening {CONNS} connections took {connect:?} and {NEW_CLIENTS} new clients {fresh:?}: past the \
                 header timeout, some may have been cut off already"
            ));
        }
        let last = slow.iter().filter_map(|s| s.acked).max().ok_or("no slow client")?;
        wait_closed(&mut slow, last + HEADER + LATE + Duration::from_secs(2))?;
        let mut earliest = Duration::MAX;
        let mut latest = Duration::ZERO;
        for (i, s) in slow.iter().enumerate() {
            let Some(closed) = s.closed else {
                return Err(format!(
                    "slow client {i} was not cut off {:?} after its partial head was acknowledged",
                    HEADER + LATE
                ));
            };
            let text = String::from_utf8_lossy(&s.got);
            if !text.starts_with("HTTP/1.1 408 Request Timeout\r\n") {
                return Err(format!("slow client {i} got {text:?}"));
            }
            earliest = earliest.min(closed - s.began);
            latest = latest.max(closed - s.acked.unwrap_or(s.began));
        }
        Ok(Measured { connect, fresh, rss_growth, earliest, latest })
    })?;
    println!(
        "{CONNS} slow clients connected and acknowledged in {:?}; new clients served in {:?} while they were held; resident \
         memory grew {:.1} MiB ({} bytes per connection); cut off {:?} .. {:?} after their connect began / \
         partial head was acknowledged (header timeout {HEADER:?})",
        m.connect,
        m.fresh,
        m.rss_growth as f64 / 1048576.0,
        m.rss_growth / CONNS as u64,
        m.earliest,
        m.latest
    );
    if m.fresh.iter().any(|&f| f > FRESH) {
        return Err(format!(
            "new clients waited {:?} while the slow ones were held (each may take {FRESH:?})",
            m.fresh
        ));
    }
    if m.rss_growth > RSS_BOUND {
        return Err(format!(
            "resident memory grew {} bytes for {CONNS} connections (bound {RSS_BOUND})",
            m.rss_growth
        ));
    }
    if m.earliest < HEADER || m.latest > HEADER + LATE {
        return Err(format!(
            "cut off {:?} after a connect began (at least {HEADER:?}) to {:?} after a partial head was acknowledged (at most {:?})",
            m.earliest,
            m.latest,
            HEADER + LATE
        ));
    }
    let core = &report.cores[0];
    if (core.header_timeouts, core.refused, core.failed) != (CONNS as u64, 0, 0) {
        return Err(format!("{CONNS} header timeouts, no refusal and no failure expected: {report}"));
    }
    Ok(())
}

#[test]
fn slowloris_is_cut_off_by_the_header_timeout() {
    netns_test::in_private_namespace(slowloris);
}
