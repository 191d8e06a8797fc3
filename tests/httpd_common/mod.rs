//! What the httpd tests over TAP share: the server on a TAP in the test's private namespace
//! ([`serve`]), the kernel's clients ([`connect`], [`read_response`], [`header`]) and the
//! process's resident memory ([`vm_rss`]).
#![allow(dead_code, reason = "each test binary uses a part of it")]

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use netchannels::cli::ServeArgs;
use netchannels::httpd::{Content, Options, Report, run};
use netchannels::tcp_lib::wire::{Ipv4Cidr, Ipv6Cidr};
use netns_test::ip;

/// The kernel's end of the TAP.
pub(crate) const KERNEL: &str = "10.202.0.1/24";
/// The server's address.
pub(crate) const SERVER: Ipv4Addr = Ipv4Addr::new(10, 202, 0, 2);
/// The kernel's IPv6 address on the TAP (no duplicate address detection: usable at once).
pub(crate) const KERNEL6: &str = "fd00:202::1/64";
/// The server's IPv6 address (httpd serves both families).
pub(crate) const SERVER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x202, 0, 0, 0, 0, 0, 2);
/// The server's port.
pub(crate) const PORT: u16 = 80;

/// A connection to the server (10 s to connect), reads timing out after `read_timeout`.
pub(crate) fn connect(read_timeout: Duration) -> Result<TcpStream, String> {
    connect_to(SocketAddrV4::new(SERVER, PORT).into(), read_timeout)
}

/// [`connect`] over IPv6, to [`SERVER6`].
pub(crate) fn connect6(read_timeout: Duration) -> Result<TcpStream, String> {
    connect_to(SocketAddr::from((SERVER6, PORT)), read_timeout)
}

fn connect_to(to: SocketAddr, read_timeout: Duration) -> Result<TcpStream, String> {
    let s =
        TcpStream::connect_timeout(&to, Duration::from_secs(10)).map_err(|e| format!("connect {to}: {e}"))?;
    s.set_read_timeout(Some(read_timeout)).map_err(|e| e.to_string())?;
    Ok(s)
}

/// A response: status, headers (lower-case names), body.
pub(crate) type Response = (u16, Vec<(String, String)>, Vec<u8>);

/// One response: status, headers (lower-case names), body (none for HEAD).
pub(crate) fn read_response(r: &mut BufReader<TcpStream>, head: bool) -> Result<Response, String> {
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| format!("status line: {e}"))?;
    let status = line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|l| l.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {line:?}"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).map_err(|e| format!("header: {e}"))?;
        let l = line.trim_end_matches("\r\n");
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').ok_or_else(|| format!("bad header {l:?}"))?;
        headers.push((n.to_ascii_lowercase(), v.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .ok_or("no Content-Length")?;
    let mut body = vec![0; if head { 0 } else { length }];
    r.read_exact(&mut body).map_err(|e| format!("body of {length}: {e}"))?;
    Ok((status, headers, body))
}

/// A header's value.
pub(crate) fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// Reads to the end of the stream: what came before the server's FIN.
pub(crate) fn read_to_eof(r: &mut impl Read) -> Result<Vec<u8>, String> {
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).map_err(|e| format!("waiting for the server's FIN: {e}"))?;
    Ok(rest)
}

/// This process's resident memory (`VmRSS` of `/proc/self/status`), bytes.
pub(crate) fn vm_rss() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| "no VmRSS in /proc/self/status".into())
}

/// In the calling thread's namespace (a private one): a TAP `iface` with the kernel on
/// [`KERNEL`] and [`KERNEL6`], httpd on it with `options` (the backend, address and port filled in) serving
/// `content`, and `clients` run against it; then the server stops. Returns the clients' result
/// and the server's report.
pub(crate) fn serve<T>(
    iface: &str,
    options: Options,
    content: &Arc<Content>,
    clients: impl FnOnce() -> Result<T, String>,
) -> Result<(T, Report), String> {
    ip(&["tuntap", "add", "dev", iface, "mode", "tap"])?;
    ip(&["addr", "add", KERNEL, "dev", iface])?;
    ip(&["-6", "addr", "add", KERNEL6, "dev", iface, "nodad"])?;
    ip(&["link", "set", iface, "up"])?;
    let options = Options {
        serve: ServeArgs {
            tap: Some(iface.into()),
            ips: vec![
                netchannels::cli::IpCidr::V4(Ipv4Cidr::new(SERVER, 24).expect("a /24")),
                netchannels::cli::IpCidr::V6(Ipv6Cidr::new(SERVER6, 64).expect("a /64")),
            ],
            ..options.serve
        },
        progress: false,
        port: PORT,
        ..options
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let server = s.spawn(|| run(&options, Arc::clone(content), &stop));
        let result = clients();
        // Relaxed: a plain flag; the join orders the rest.
        stop.store(true, Ordering::Relaxed);
        let report = server.join().map_err(|_| "the server panicked".to_owned())??;
        println!("{report}");
        Ok((result?, report))
    })
}
