//! Instructions per transaction (connect, a 64-byte request, a 64-byte response, the server
//! closes, the client reads the end and closes) on the in-memory link, both ends together:
//! tcp-lib beside smoltcp (the anchor), counted by gungraun (callgrind).
//! `cargo bench -p netchannels-benches --bench icount_txn`; `scripts/icount.sh` divides each count
//! by the `_n<N>` suffix of the benchmark id (transactions).
//!
//! `icount_tcp` counts a segment and its ACK on a connection that lives on, `icount_bulk` a long
//! transfer: neither runs a connection's life. This bench keeps that path's count in CI: the
//! opens (the port and the initial sequence number drawn, the connection built in its table
//! slot), the handshake, the close, the TIME-WAIT record kept in its bounded table (and the
//! oldest evicted), the slot reclaimed.
//!
//! The harness is the timed bench's (`benches/tcp/`, the same endpoints, link, settings and
//! workload code as `tcp --child txn-lockstep`): two stacks on the two ends of a
//! `netchannel::dev::Pair`, 256 KiB buffers, checksums skipped on the memory link by both, both
//! ends on one thread in lock step (the client polls and steps, the server polls and steps,
//! again). In `setup` (not measured) the server listens and the two run [`WARM`] transactions,
//! more than tcp-lib's TIME-WAIT table holds (4,096 records), so that the measured [`TXNS`] run
//! where the timed bench's long runs do: every closed connection evicts the oldest record.
//! The endpoints read the real clock on every poll (as the timed bench does); no timer comes due
//! in a lock-step run. `teardown` checks that every transaction completed.

#![allow(missing_docs, reason = "gungraun's macros generate undocumented modules, constants and functions")]

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Duration;

use gungraun::{library_benchmark, library_benchmark_group, main};
use netchannel::dev::Pair;
use netchannel::pool::PoolCache;

// The timed bench's harness, shared rather than copied (each module uses what it needs of it).
#[path = "common/mod.rs"]
mod common;
#[path = "tcp/device.rs"]
mod device;
#[path = "tcp/endpoint.rs"]
#[expect(dead_code, reason = "the harness's helpers for other workloads")]
mod endpoint;
#[path = "tcp/measure.rs"]
#[expect(dead_code, reason = "the harness's helpers for other workloads")]
mod measure;
#[path = "tcp/pair_ends.rs"]
mod pair_ends;
#[path = "tcp/smol.rs"]
mod smol;
#[path = "tcp/workload.rs"]
#[expect(dead_code, reason = "the harness's helpers for other workloads")]
mod workload;

use endpoint::{Endpoint, LibEndpoint};
use pair_ends::{BUF, PORT, REMOTE, pair_ends};
use smol::SmolEndpoint;
use workload::{TxnServer, lockstep_transactions};

// The constants the harness's modules take from their crate root (as `benches/tcp/main.rs`
// defines them).
const CHUNK: usize = 64 * 1024;
const MSG: usize = 64;
const MAX_SLEEP: Duration = Duration::from_millis(1);
const DEADLINE: Duration = Duration::from_secs(120);

/// Transactions measured.
const TXNS: u64 = 1000;
/// Transactions run in `setup`, before: past tcp-lib's default bound of 4,096 TIME-WAIT records.
const WARM: u64 = 4500;

/// Both ends, the server listening, with the server workload's state.
struct Txns<E: Endpoint> {
    client: E,
    server: E,
    serving: TxnServer<E::Sock>,
}

/// Two endpoints made by `make` on the two ends of a fresh `Pair`, the server listening, [`WARM`]
/// transactions run.
fn setup<E: Endpoint>(make: impl Fn(Pair, &'static PoolCache, Ipv4Addr) -> E) -> Txns<E> {
    let (client, server) = pair_ends(make);
    let mut t = Txns { client, server, serving: TxnServer::new() };
    t.server.listen(PORT).expect("listen");
    lockstep_transactions(&mut t.client, &mut t.server, &mut t.serving, REMOTE, WARM)
        .expect("warm-up transactions");
    t
}

fn setup_tcplib() -> Txns<LibEndpoint<'static, Pair>> {
    setup(|dev, cache, ip| LibEndpoint::new(dev, cache, ip, BUF))
}

fn setup_smoltcp() -> Txns<SmolEndpoint<'static, Pair>> {
    setup(|dev, cache, ip| SmolEndpoint::new(dev, cache, ip, BUF))
}

fn run<E: Endpoint>(mut t: Txns<E>) -> Result<Txns<E>, String> {
    lockstep_transactions(&mut t.client, &mut t.server, &mut t.serving, REMOTE, TXNS)?;
    Ok(t)
}

fn teardown<E: Endpoint>(r: Result<Txns<E>, String>) {
    if let Err(e) = r {
        panic!("the measured transactions failed: {e}");
    }
}

#[library_benchmark]
#[bench::lockstep_n1000(setup = setup_tcplib, teardown = teardown)]
fn tcplib_txn(t: Txns<LibEndpoint<'static, Pair>>) -> Result<Txns<LibEndpoint<'static, Pair>>, String> {
    black_box(run(t))
}

#[library_benchmark]
#[bench::lockstep_n1000(setup = setup_smoltcp, teardown = teardown)]
fn smoltcp_txn(t: Txns<SmolEndpoint<'static, Pair>>) -> Result<Txns<SmolEndpoint<'static, Pair>>, String> {
    black_box(run(t))
}

library_benchmark_group!(name = txn, benchmarks = [tcplib_txn, smoltcp_txn]);

main!(library_benchmark_groups = [txn]);
