//! Instructions per byte of a bulk transfer on the in-memory link, both ends together: tcp-lib
//! beside smoltcp (the anchor), counted by gungraun (callgrind). `cargo bench -p netchannels-benches --bench icount_bulk`;
//! `scripts/icount.sh` divides each count by the `_n<N>` suffix of the benchmark id (bytes).
//!
//! `icount_tcp` counts one segment and its ACK; what a bulk transfer does per segment is another
//! path: a sender cutting a window into a train (software GSO, headers copied from the frame
//! before), a receiver taking the train in bursts (the receive memory of the frame before and the
//! short entry of a continued segment), delayed and coalesced ACKs. This bench keeps that path's
//! count in CI.
//!
//! The harness is the timed bench's (`benches/tcp/`, the same endpoints, link, settings and
//! workload code): two stacks on the two ends of a `netchannel::dev::Pair`, 256 KiB buffers,
//! checksums skipped on the memory link by both, tcp-lib with 64 KiB software GSO, both ends on one
//! thread in lock step (`tcp --child bulk-lockstep`): the client writes what its send buffer
//! takes and polls, the server polls and reads, again. In `setup` (not measured) the two connect
//! and move [`WARM`] bytes (slow start is over, every ring and pool cache is warm); measured, they
//! move [`BYTES`] more. The two application modes each stack offers:
//!
//! * **in place** (`inplace_n…`): tcp-lib's writer produces its bytes straight into the send ring
//!   (`Stack::send_with`) and its reader takes each payload where it lies in the frame
//!   (`Stack::poll_with`); smoltcp's do the same through `Socket::send` / `Socket::recv` with a
//!   closure (the same fill, the same copy into the application's buffer);
//! * **copying** (`copying_n…`): `Stack::send` / `Stack::recv` against `send_slice` /
//!   `recv_slice`;
//! * **by reference** (`byref_n…`, tcp-lib only: smoltcp has no such path): the writer produces
//!   each segment's payload in a pool buffer of its own and hands it over
//!   (`Stack::send_pooled_with`), which software GSO sends in trains of whole buffers, each a
//!   frame by reference; the reader reads in place.
//!
//! The endpoints read the real clock on every poll (as the timed bench does): no timer comes due
//! in a lock-step run, so the count repeats to within a few hundred instructions in millions.
//! `teardown` checks that every byte arrived.

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

use endpoint::{Endpoint, InPlace, LibEndpoint};
use pair_ends::{BUF, REMOTE, pair_ends};
use smol::SmolEndpoint;
use workload::{lockstep_connect, lockstep_transfer};

// The constants the harness's modules take from their crate root (as `benches/tcp/main.rs`
// defines them).
const CHUNK: usize = 64 * 1024;
const MSG: usize = 64;
const MAX_SLEEP: Duration = Duration::from_millis(1);
const DEADLINE: Duration = Duration::from_secs(120);

/// Bytes moved while measured.
const BYTES: u64 = 4 << 20;
/// Bytes moved in `setup`, before.
const WARM: u64 = 1 << 20;

/// Both ends of a connection that has moved [`WARM`] bytes.
struct Bulk<E: Endpoint> {
    client: E,
    server: E,
    c: E::Sock,
    s: E::Sock,
}

/// Two endpoints made by `make` on the two ends of a fresh `Pair`, connected, [`WARM`] bytes moved.
fn setup<E: Endpoint>(make: impl Fn(Pair, &'static PoolCache, Ipv4Addr) -> E) -> Bulk<E> {
    let (mut client, mut server) = pair_ends(make);
    let (c, s) = lockstep_connect(&mut client, &mut server, REMOTE).expect("connect");
    lockstep_transfer(&mut client, &mut server, c, s, WARM).expect("warm-up transfer");
    Bulk { client, server, c, s }
}

/// tcp-lib's endpoints: copying, or reading in place and writing in place (`by_reference`:
/// false) or into pool buffers it hands over by reference (true).
fn tcplib(in_place: bool, by_reference: bool) -> Bulk<LibEndpoint<'static, Pair>> {
    setup(|dev, cache, ip| {
        let mut ep = LibEndpoint::new(dev, cache, ip, BUF);
        if in_place {
            ep.in_place = Some(InPlace::new());
            ep.write_in_place = !by_reference;
            ep.by_reference = by_reference;
        }
        ep
    })
}

fn smoltcp(in_place: bool) -> Bulk<SmolEndpoint<'static, Pair>> {
    setup(|dev, cache, ip| {
        let mut ep = SmolEndpoint::new(dev, cache, ip, BUF);
        ep.in_place = in_place;
        ep
    })
}

fn setup_tcplib_inplace() -> Bulk<LibEndpoint<'static, Pair>> {
    tcplib(true, false)
}

fn setup_tcplib_byref() -> Bulk<LibEndpoint<'static, Pair>> {
    tcplib(true, true)
}

fn setup_tcplib_copying() -> Bulk<LibEndpoint<'static, Pair>> {
    tcplib(false, false)
}

fn setup_smoltcp_inplace() -> Bulk<SmolEndpoint<'static, Pair>> {
    smoltcp(true)
}

fn setup_smoltcp_copying() -> Bulk<SmolEndpoint<'static, Pair>> {
    smoltcp(false)
}

fn transfer<E: Endpoint>(mut b: Bulk<E>) -> Result<Bulk<E>, String> {
    lockstep_transfer(&mut b.client, &mut b.server, b.c, b.s, BYTES)?;
    Ok(b)
}

fn teardown<E: Endpoint>(r: Result<Bulk<E>, String>) {
    if let Err(e) = r {
        panic!("the measured transfer failed: {e}");
    }
}

#[library_benchmark]
#[bench::inplace_n4194304(setup = setup_tcplib_inplace, teardown = teardown)]
#[bench::byref_n4194304(setup = setup_tcplib_byref, teardown = teardown)]
#[bench::copying_n4194304(setup = setup_tcplib_copying, teardown = teardown)]
fn tcplib_bulk(b: Bulk<LibEndpoint<'static, Pair>>) -> Result<Bulk<LibEndpoint<'static, Pair>>, String> {
    black_box(transfer(b))
}

#[library_benchmark]
#[bench::inplace_n4194304(setup = setup_smoltcp_inplace, teardown = teardown)]
#[bench::copying_n4194304(setup = setup_smoltcp_copying, teardown = teardown)]
fn smoltcp_bulk(b: Bulk<SmolEndpoint<'static, Pair>>) -> Result<Bulk<SmolEndpoint<'static, Pair>>, String> {
    black_box(transfer(b))
}

library_benchmark_group!(name = bulk, benchmarks = [tcplib_bulk, smoltcp_bulk]);

main!(library_benchmark_groups = [bulk]);
