//! TCP end to end: tcp-lib against smoltcp and the kernel, **in the same run**.
//!
//! * **bulk**: one connection moves `TCP_BENCH_BYTES` one way between two endpoints, one thread each.
//!   tcp-lib and smoltcp each run two stacks on the two ends of a `netchannel::dev::Pair` (the same
//!   link model for both: frames cross as pool buffers, MTU 1500; smoltcp's device hands it the
//!   received pool buffer in place and lets it write each outgoing frame straight into a fresh pool
//!   buffer, so neither stack pays a device copy). On the Pair **both** stacks skip checksums, as the
//!   kernel does on loopback (a memory link cannot corrupt a frame): tcp-lib with
//!   `Config::checksum = Trust` and `tx_checksum = false`, smoltcp with `ChecksumCapabilities` of
//!   `Checksum::None` for IPv4, TCP and ICMP; `TCP_BENCH_CSUM=verify` makes both compute and verify
//!   them instead (the TAP runs always do). The kernel runs `std::net` over loopback
//!   (`kernel-lo`: lo's MTU 65536, TSO/GSO, so a 64 KiB super-packet is one trip through the stack),
//!   and, as root, also over a loopback in a private namespace set to MTU 1500 (`kernel-lo-1500`;
//!   still TSO/GSO, so the kernel still moves ~64 KiB per trip; `gso_max_segs 1` would force one
//!   segment per packet but throttles the kernel ~15x here, far more than per-packet cost explains,
//!   so it is no fair anchor and is not run).
//!   Besides the copying applications (`send_slice`/`recv_slice`, `Stack::send`/`Stack::recv`),
//!   applications that work in place: `tcp-lib-inplace` reads each payload where it lies in the
//!   received frame (`Stack::poll_with`) and copies it into its own buffer, as `read(2)` would;
//!   `tcp-lib-inplace-rw` also writes in place (`Stack::send_with`: it produces its bytes straight
//!   into the send ring, which is also the retransmit queue, with a fill); `smoltcp-inplace` is the
//!   matching anchor, smoltcp's closure calls `Socket::send(|buf| ..)` (the same fill) and
//!   `Socket::recv(|buf| ..)` (a copy into the application's buffer). Compare copying with copying
//!   (`tcp-lib` / `smoltcp`) and in place with in place (`tcp-lib-inplace-rw` / `smoltcp-inplace`).
//!   `tcp-lib-byref` produces each segment's payload in a pool buffer of its own (the same fill)
//!   and hands the buffer to the stack by reference (`Stack::send_pooled_with`), which writes only the
//!   headers into its headroom and sends the buffer itself, holding it until acknowledged: no copy
//!   on the send side; it reads in place.
//!   `--child bulk` (below) takes every contender's name: also `tcp-lib-inplace`,
//!   `tcp-lib-inplace-rw`, `tcp-lib-byref`, `tcp-lib-v6`, `tcp-lib-tso` and `smoltcp-inplace`;
//!   and `pair-raw`, which is no stack: the link's own ceiling, frames of the same payload moved
//!   from one thread to the other and copied out, nothing acknowledged (`raw.rs`).
//! * **txn**: transactions, one after another: connect, 64-byte request, 64-byte response, the server
//!   closes, the client reads the end of stream and closes (`TCP_BENCH_TXNS` of them). Nagle off
//!   everywhere. Run once per stack buffer size of `TCP_BENCH_TXN_BUFS` (tcp-lib allocates each
//!   connection, its buffers growing on demand up to that size; smoltcp keeps a few sockets, their
//!   buffers allocated in full, and reuses them).
//! * **tap** (root only; skipped with the reason otherwise): the stack on a TAP in a private namespace,
//!   the kernel as the peer over `std::net`, in the two modes of smoltcp's `examples/benchmark.rs`:
//!   `reader` (the kernel reads what the stack sends) and `writer` (the kernel writes, the stack
//!   receives).
//!
//! Every thread's CPU time is read with `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` (user + system,
//! so a kernel thread is charged the protocol work done in its system calls); the tables report
//! wall-clock rates and rates **per CPU-second** (units / the sum of the participating threads' CPU
//! time). The sides are pinned to CPU 0 and CPU 1. By default an endpoint that found nothing to do
//! sleeps until a frame arrives or its next timer (`Pair::wait` / `Tap::wait_readable`, at most
//! 1 ms), as the kernel's blocking sockets do; `TCP_BENCH_POLL=busy` makes them spin instead.
//! Each round runs every contender once (in a rotated order); the summary gives medians over the
//! rounds and the median of the per-round ratios (paired: samples of the same round; a round in
//! which either side failed gives no ratio).
//!
//! Buffers: 256 KiB send and receive buffers for tcp-lib and smoltcp (`TCP_BENCH_BUF`; window
//! scaling on for both); the kernel keeps its defaults (autotuning). Applications write and read in
//! 64 KiB chunks everywhere.
//!
//! Environment: `TCP_BENCH_ROUNDS` (5), `TCP_BENCH_BYTES` (64M), `TCP_BENCH_TXNS` (5000),
//! `TCP_BENCH_TXN_BUFS` (`256K,16K`),
//! `TCP_BENCH_TAP_BYTES` (32M), `TCP_BENCH_BUF` (256K), `TCP_BENCH_POLL` (`wait` | `busy`),
//! `TCP_BENCH_CSUM` (`trust` | `verify`: checksums on the in-memory Pair, for both stacks),
//! `TCP_BENCH_GSO` (tcp-lib's `Config::gso_max_size`, 65535 by default; 0: off),
//! `TCP_BENCH_SMOLTCP_CC` (`cubic` | `none`: smoltcp's congestion control; tcp-lib runs CUBIC),
//! `TCP_BENCH_ONLY` (comma list of `bulk`, `txn`, `tap`), `TCP_BENCH_ICOUNT=1` (also count
//! instructions per byte of the in-memory bulk transfer under callgrind, both threads together).
//!
//! `tcp --child bulk|txn <tcp-lib|smoltcp|kernel-lo> <bytes|txns>` runs one case alone and prints
//! its sample (for `valgrind`/`perf`). `--child txn-lockstep <tcp-lib|smoltcp> N` runs the
//! transactions with both ends on one thread in lock step (no waiting, one CPU time): under
//! callgrind its count is the same from run to run, the stacks' and the workload's alone.
//! `--child bulk-lockstep <contender> BYTES` does the same for a bulk transfer (any in-memory
//! contender: `tcp-lib-inplace-rw` against `smoltcp-inplace`, ...).

use std::net::Ipv4Addr;
use std::time::Duration;

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/netns.rs"]
mod netns;

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const TAP_KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 89, 0, 1);
const TAP_STACK_IP: Ipv4Addr = Ipv4Addr::new(10, 89, 0, 2);
const TAP_NAME: &str = "tcpbench0";
const PORT: u16 = 5001;
const CHUNK: usize = 64 * 1024;
const MSG: usize = 64;
/// The longest an idle endpoint sleeps before it looks again.
const MAX_SLEEP: Duration = Duration::from_millis(1);
/// A run that has not finished by then failed.
const DEADLINE: Duration = Duration::from_secs(120);
/// Pool buffers per link (2 KiB each).
const POOL_BUFFERS: u32 = 16 * 1024;

mod device;
mod endpoint;
mod kernel;
mod measure;
mod raw;
mod report;
mod settings;
mod smol;
mod stacks;
mod tap;
mod workload;

use crate::kernel::{bulk_kernel, txn_kernel};
use crate::report::{Series, loadavg, record, rotated, series, table};
use crate::settings::Settings;
use crate::stacks::{Kind, Lockstep, bulk_stack, lockstep_stack, txn_stack};
use crate::tap::{TapMode, tap_run};

/// Instructions per byte of the in-memory bulk transfer of `kind` (both threads), from two callgrind
/// runs of different sizes (so set-up cancels out).
fn icount_per_byte(kind: Kind) -> Result<f64, String> {
    let (small, large) = (4u64 << 20, 12u64 << 20);
    let run = |bytes: u64| {
        common::callgrind_instructions(&[], &["bulk".to_owned(), kind.name().to_owned(), bytes.to_string()])
    };
    let (a, b) = (run(small)?, run(large)?);
    Ok((b.saturating_sub(a)) as f64 / (large - small) as f64)
}

/// The process's peak resident set, KiB.
fn max_rss_kib() -> i64 {
    // SAFETY: all-zero is a valid `rusage`.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a live, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) };
    if rc == 0 { ru.ru_maxrss } else { -1 }
}

fn child(args: &[String]) -> Result<(), String> {
    let s = Settings::from_env();
    let what = args.first().map(String::as_str).unwrap_or_default();
    let who = args.get(1).map(String::as_str).unwrap_or_default();
    let n: u64 = args
        .get(2)
        .and_then(|v| v.parse().ok())
        .ok_or("usage: --child bulk|txn|txn-lockstep|bulk-lockstep WHO N")?;
    let kind = match who {
        "tcp-lib" => Some(Kind::TcpLib),
        "tcp-lib-inplace" => Some(Kind::TcpLibInPlace),
        "tcp-lib-inplace-rw" => Some(Kind::TcpLibInPlaceRw),
        "tcp-lib-byref" => Some(Kind::TcpLibByRef),
        "smoltcp-inplace" => Some(Kind::SmoltcpInPlace),
        "tcp-lib-v6" => Some(Kind::TcpLibV6),
        "smoltcp" => Some(Kind::Smoltcp),
        "tcp-lib-tso" => Some(Kind::TcpLibTso),
        "kernel-lo" | "pair-raw" => None,
        _ => return Err(format!("unknown contender {who}")),
    };
    let sample = match (what, kind) {
        ("bulk", None) if who == "pair-raw" => raw::bulk_raw(n)?,
        ("bulk", Some(k)) => bulk_stack(k, &s, n)?,
        ("bulk", None) => bulk_kernel(n, Ipv4Addr::LOCALHOST)?,
        ("txn", Some(k)) => txn_stack(k, &s, n)?,
        ("txn", None) => txn_kernel(n)?,
        ("txn-lockstep", Some(k)) => lockstep_stack(k, &s, Lockstep::Txn(n))?,
        ("bulk-lockstep", Some(k)) => lockstep_stack(k, &s, Lockstep::Bulk(n))?,
        _ => return Err(format!("unknown workload {what}")),
    };
    println!(
        "{sample:?} per_sec={:.1} per_cpu_sec={:.1} max_rss_mib={}",
        sample.per_sec(),
        sample.per_cpu_sec(),
        max_rss_kib() >> 10
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    if args.first().map(String::as_str) == Some("--child") {
        if let Err(e) = child(&args[1..]) {
            eprintln!("{e}");
            std::process::exit(1);
        }
        return;
    }
    let s = Settings::from_env();
    let only = std::env::var("TCP_BENCH_ONLY").unwrap_or_else(|_| "bulk,txn,tap".to_owned());
    let want = |g: &str| only.split(',').any(|x| x.trim() == g);
    println!("# tcp-lib vs smoltcp vs the kernel");
    println!(
        "settings: {} rounds, bulk {} MiB, {} transactions (stack buffers {:?} KiB), TAP {} MiB, stack buffers {} KiB, {} polling; load average at start: {}",
        s.rounds,
        s.bytes >> 20,
        s.txns,
        s.txn_bufs.iter().map(|b| b >> 10).collect::<Vec<_>>(),
        s.tap_bytes >> 20,
        s.buf >> 10,
        if s.busy { "busy" } else { "sleep-when-idle" },
        loadavg()
    );
    let ns_missing = netns::namespace_unavailable();

    if want("bulk") {
        let mut ser = series(&[
            "tcp-lib",
            "smoltcp",
            "tcp-lib-inplace",
            "tcp-lib-v6",
            "kernel-lo",
            "tcp-lib-inplace-rw",
            "smoltcp-inplace",
            "tcp-lib-byref",
            "kernel-lo-1500",
        ]);
        let contenders = if ns_missing.is_some() { 8 } else { 9 };
        for round in 0..s.rounds {
            eprintln!("bulk round {round}:");
            rotated(round, contenders, |i| {
                let r = match i {
                    0 => bulk_stack(Kind::TcpLib, &s, s.bytes),
                    1 => bulk_stack(Kind::Smoltcp, &s, s.bytes),
                    2 => bulk_stack(Kind::TcpLibInPlace, &s, s.bytes),
                    3 => bulk_stack(Kind::TcpLibV6, &s, s.bytes),
                    4 => bulk_kernel(s.bytes, Ipv4Addr::LOCALHOST),
                    5 => bulk_stack(Kind::TcpLibInPlaceRw, &s, s.bytes),
                    6 => bulk_stack(Kind::SmoltcpInPlace, &s, s.bytes),
                    7 => bulk_stack(Kind::TcpLibByRef, &s, s.bytes),
                    _ => {
                        let bytes = s.bytes;
                        netns::in_private_namespace(move || {
                            netns::ip(&["link", "set", "lo", "mtu", "1500"])?;
                            bulk_kernel(bytes, Ipv4Addr::LOCALHOST)
                        })
                    }
                };
                record(&mut ser[i], round, r);
            });
        }
        if let Some(why) = ns_missing {
            println!("(kernel-lo-1500 skipped: {why})");
            ser.truncate(8);
        }
        table(&format!("Bulk, one connection, {} MiB, in-memory link", s.bytes >> 20), "MB", 1e6, &ser);
        // The same samples with the in-place reader as the reference.
        let mut reader = ser.clone();
        reader.swap(0, 2);
        table(
            &format!("Bulk, one connection, {} MiB, in-memory link, tcp-lib reading in place", s.bytes >> 20),
            "MB",
            1e6,
            &reader,
        );
        // Writing and reading in place on both stacks: the matching pair first.
        let both: Vec<Series> = [5, 6, 1, 0, 2].iter().map(|&i| ser[i].clone()).collect();
        table(
            &format!(
                "Bulk, one connection, {} MiB, in-memory link, both stacks writing and reading in place",
                s.bytes >> 20
            ),
            "MB",
            1e6,
            &both,
        );
        // Sending by reference from pool buffers against both smoltcp applications.
        let by_ref: Vec<Series> = [7, 6, 1, 5].iter().map(|&i| ser[i].clone()).collect();
        table(
            &format!(
                "Bulk, one connection, {} MiB, in-memory link, tcp-lib sending by reference from pool buffers",
                s.bytes >> 20
            ),
            "MB",
            1e6,
            &by_ref,
        );
        if std::env::var("TCP_BENCH_ICOUNT").is_ok_and(|v| v == "1") {
            if common::have_valgrind() {
                for kind in [
                    Kind::TcpLib,
                    Kind::TcpLibInPlace,
                    Kind::Smoltcp,
                    Kind::TcpLibInPlaceRw,
                    Kind::SmoltcpInPlace,
                    Kind::TcpLibByRef,
                ] {
                    match icount_per_byte(kind) {
                        Ok(x) => println!(
                            "{}: {x:.2} instructions per byte (callgrind, both threads)",
                            kind.name()
                        ),
                        Err(e) => println!("{}: callgrind failed: {e}", kind.name()),
                    }
                }
            } else {
                println!("(instruction counts skipped: valgrind is not installed)");
            }
        }
    }

    if want("txn") {
        for &buf in &s.txn_bufs {
            let st = Settings { buf, ..s.clone() };
            let mut ser = series(&["tcp-lib", "smoltcp", "tcp-lib-v6", "kernel-lo"]);
            for round in 0..s.rounds {
                eprintln!("txn round {round}, stack buffers {} KiB:", buf >> 10);
                rotated(round, 4, |i| {
                    let r = match i {
                        0 => txn_stack(Kind::TcpLib, &st, s.txns),
                        1 => txn_stack(Kind::Smoltcp, &st, s.txns),
                        2 => txn_stack(Kind::TcpLibV6, &st, s.txns),
                        _ => txn_kernel(s.txns),
                    };
                    record(&mut ser[i], round, r);
                });
            }
            table(
                &format!(
                    "Transactions (connect + 64 B request + 64 B response + close), one at a time, {} in a row, stack buffers {} KiB",
                    s.txns,
                    buf >> 10
                ),
                "txn",
                1.0,
                &ser,
            );
        }
    }

    if want("tap") {
        if let Some(why) = ns_missing {
            println!("\n### Over TAP against the kernel\n\nskipped: {why}");
        } else {
            let settings = s.clone();
            let r = netns::in_private_namespace(move || {
                let mut ser = series(&[
                    "tcp-lib reader",
                    "smoltcp reader",
                    "tcp-lib writer",
                    "smoltcp writer",
                    "tcp-lib-inplace writer",
                    "tcp-lib-tso reader",
                    "tcp-lib-tso writer",
                ]);
                for round in 0..settings.rounds {
                    eprintln!("tap round {round}:");
                    rotated(round, 7, |i| {
                        let (kind, mode) = match i {
                            0 => (Kind::TcpLib, TapMode::Reader),
                            1 => (Kind::Smoltcp, TapMode::Reader),
                            2 => (Kind::TcpLib, TapMode::Writer),
                            3 => (Kind::Smoltcp, TapMode::Writer),
                            4 => (Kind::TcpLibInPlace, TapMode::Writer),
                            5 => (Kind::TcpLibTso, TapMode::Reader),
                            _ => (Kind::TcpLibTso, TapMode::Writer),
                        };
                        record(&mut ser[i], round, tap_run(kind, mode, &settings));
                    });
                }
                Ok(ser)
            });
            match r {
                Ok(mut ser) => {
                    let tso = ser.split_off(5);
                    let writer = ser.split_off(2);
                    // With offloads: tcp-lib-tso first, then smoltcp (no offloads: it has none) and
                    // tcp-lib without them, same rounds.
                    for (mode, at) in [("reader", 0), ("writer", 1)] {
                        let plain = if at == 0 { &ser } else { &writer };
                        let rows = [tso[at].clone(), plain[1].clone(), plain[0].clone()];
                        table(
                            &format!(
                                "Over TAP with offloads (TSO, partial checksums, coalesced receive), {mode} mode, {} MiB",
                                s.tap_bytes >> 20
                            ),
                            "MB",
                            1e6,
                            &rows,
                        );
                    }
                    table(
                        &format!(
                            "Over TAP, reader mode (the stack sends, the kernel reads), {} MiB",
                            s.tap_bytes >> 20
                        ),
                        "MB",
                        1e6,
                        &ser,
                    );
                    table(
                        &format!(
                            "Over TAP, writer mode (the kernel writes, the stack receives), {} MiB",
                            s.tap_bytes >> 20
                        ),
                        "MB",
                        1e6,
                        &writer,
                    );
                    let mut in_place: Vec<Series> = writer.into_iter().rev().collect();
                    in_place.truncate(2); // the in-place reader first, then smoltcp
                    table(
                        &format!(
                            "Over TAP, writer mode, tcp-lib reading in place, {} MiB",
                            s.tap_bytes >> 20
                        ),
                        "MB",
                        1e6,
                        &in_place,
                    );
                }
                Err(e) => println!("\n### Over TAP against the kernel\n\nskipped: {e}"),
            }
        }
    }
    println!("\nload average at the end: {}", loadavg());
}
