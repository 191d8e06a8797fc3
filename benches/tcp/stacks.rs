//! Contenders on the in-memory link.

use netchannel::dev::Pair;
use netchannel::pool::{HugePages, Pool, PoolCache};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Barrier;
use std::sync::atomic::AtomicBool;

use crate::device::Sleep;
use crate::endpoint::{Endpoint, InPlace, LibEndpoint};
use crate::measure::{Sample, Side, two_threads};
use crate::settings::Settings;
use crate::smol::SmolEndpoint;
use crate::workload::{bulk_lockstep, bulk_receiver, bulk_sender, txn_client, txn_lockstep, txn_server};
use crate::{A_IP, B_IP, POOL_BUFFERS, PORT};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    TcpLib,
    /// tcp-lib, the receiving application reading in place ([`InPlace`]).
    TcpLibInPlace,
    /// tcp-lib, the sending application writing in place (`Stack::send_with`, see
    /// [`produce`](crate::endpoint::produce)) and the receiving one reading in place.
    TcpLibInPlaceRw,
    /// tcp-lib, the sending application producing each segment's payload in a pool buffer of its
    /// own and handing it over by reference (`Stack::send_pooled_with`, see
    /// [`LibEndpoint::send_by_reference`](crate::endpoint::LibEndpoint)), the receiving one reading
    /// in place: no copy of the payload on the send side.
    TcpLibByRef,
    /// smoltcp with the application writing and reading in place (`Socket::send` and
    /// `Socket::recv` with a closure): the anchor for [`Kind::TcpLibInPlaceRw`].
    SmoltcpInPlace,
    /// tcp-lib over IPv6 (both ends dual-stack, connecting to the IPv6 address).
    TcpLibV6,
    /// tcp-lib on a TAP opened with offloads (virtio-net header): TSO super-segments and partial
    /// checksums out, the kernel's coalesced segments with trusted checksums in. TAP only.
    TcpLibTso,
    Smoltcp,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::TcpLib => "tcp-lib",
            Kind::TcpLibInPlace => "tcp-lib-inplace",
            Kind::TcpLibInPlaceRw => "tcp-lib-inplace-rw",
            Kind::TcpLibByRef => "tcp-lib-byref",
            Kind::SmoltcpInPlace => "smoltcp-inplace",
            Kind::TcpLibV6 => "tcp-lib-v6",
            Kind::TcpLibTso => "tcp-lib-tso",
            Kind::Smoltcp => "smoltcp",
        }
    }

    /// Whether this contender is smoltcp (the others are tcp-lib).
    pub(crate) fn is_smoltcp(self) -> bool {
        matches!(self, Kind::Smoltcp | Kind::SmoltcpInPlace)
    }
}

pub(crate) fn new_pool() -> Result<Pool, String> {
    Pool::builder(POOL_BUFFERS).hugepages(HugePages::Never).build().map_err(|e| e.to_string())
}

/// A pool whose buffers hold a TAP's largest super-segment (fewer of them: a TAP has no ring, and
/// a 256 KiB window is four super-segments).
pub(crate) fn new_offload_pool() -> Result<Pool, String> {
    Pool::builder(POOL_BUFFERS / 8)
        .data_room(netchannel::dev::OFFLOAD_DATA_ROOM)
        .hugepages(HugePages::Never)
        .build()
        .map_err(|e| e.to_string())
}

/// Runs `a` (on one end, IP `A_IP`) and `b` (the other end, `B_IP`) of a `Pair`, each with an
/// endpoint of `kind`.
pub(crate) fn on_pair<FA, FB>(kind: Kind, s: &Settings, a: FA, b: FB) -> Result<(Side, Side), String>
where
    FA: FnOnce(&mut dyn AnyEndpoint, &Barrier) -> Result<Side, String> + Send,
    FB: FnOnce(&mut dyn AnyEndpoint, &Barrier) -> Result<Side, String> + Send,
{
    let pool = new_pool()?;
    let (dev_a, dev_b) = Pair::builder(&pool).capacity(4096).build().map_err(|e| e.to_string())?;
    let buf = s.buf;
    two_threads(
        move |barrier| with_endpoint(kind, dev_a, A_IP, buf, |ep| a(ep, barrier)),
        move |barrier| with_endpoint(kind, dev_b, B_IP, buf, |ep| b(ep, barrier)),
    )
}

/// Builds an endpoint of `kind` on `dev` (with its own pool cache) and runs `f` with it.
pub(crate) fn with_endpoint<D: Sleep + HasPool, R>(
    kind: Kind,
    dev: D,
    ip: Ipv4Addr,
    buf: usize,
    f: impl FnOnce(&mut dyn AnyEndpoint) -> R,
) -> R {
    let cache = dev.pool_cache();
    if kind.is_smoltcp() {
        f(&mut smol_endpoint(kind, dev, &cache, ip, buf))
    } else {
        f(&mut lib_endpoint(kind, dev, &cache, ip, buf))
    }
}

/// tcp-lib's endpoint for `kind` (one of tcp-lib's contenders), its application mode set.
fn lib_endpoint<D: Sleep>(
    kind: Kind,
    dev: D,
    cache: &PoolCache,
    ip: Ipv4Addr,
    buf: usize,
) -> LibEndpoint<'_, D> {
    let mut ep = match kind {
        Kind::TcpLibV6 => LibEndpoint::new_v6(dev, cache, ip, buf),
        // A Pair offers no offloads: the same stack as tcp-lib (the TAP runs are what it is for).
        Kind::TcpLibTso => LibEndpoint::with_offloads(dev, cache, ip, buf),
        _ => LibEndpoint::new(dev, cache, ip, buf),
    };
    if matches!(kind, Kind::TcpLibInPlace | Kind::TcpLibInPlaceRw | Kind::TcpLibByRef) {
        ep.in_place = Some(InPlace::new());
    }
    ep.write_in_place = kind == Kind::TcpLibInPlaceRw;
    ep.by_reference = kind == Kind::TcpLibByRef;
    ep
}

/// smoltcp's endpoint for `kind` (one of smoltcp's contenders).
fn smol_endpoint<D: Sleep>(
    kind: Kind,
    dev: D,
    cache: &PoolCache,
    ip: Ipv4Addr,
    buf: usize,
) -> SmolEndpoint<'_, D> {
    let mut ep = SmolEndpoint::new(dev, cache, ip, buf);
    ep.in_place = kind == Kind::SmoltcpInPlace;
    ep
}

/// A device that knows its pool.
pub(crate) trait HasPool {
    fn pool_cache(&self) -> PoolCache;
}

impl HasPool for Pair {
    fn pool_cache(&self) -> PoolCache {
        self.pool().cache()
    }
}

/// Object-safe access to the workloads for either stack.
pub(crate) trait AnyEndpoint {
    fn bulk_sender(
        &mut self,
        total: u64,
        busy: bool,
        barrier: &Barrier,
        done: &AtomicBool,
    ) -> Result<Side, String>;
    fn bulk_receiver(
        &mut self,
        total: u64,
        busy: bool,
        barrier: &Barrier,
        done: &AtomicBool,
    ) -> Result<Side, String>;
    fn txn_client(
        &mut self,
        n: u64,
        busy: bool,
        barrier: &Barrier,
        stop: &AtomicBool,
    ) -> Result<Side, String>;
    fn txn_server(&mut self, busy: bool, barrier: &Barrier, stop: &AtomicBool) -> Result<Side, String>;
}

impl<E: Endpoint> AnyEndpoint for E {
    fn bulk_sender(
        &mut self,
        total: u64,
        busy: bool,
        barrier: &Barrier,
        done: &AtomicBool,
    ) -> Result<Side, String> {
        bulk_sender(self, SocketAddrV4::new(B_IP, PORT), total, busy, barrier, done)
    }

    fn bulk_receiver(
        &mut self,
        total: u64,
        busy: bool,
        barrier: &Barrier,
        done: &AtomicBool,
    ) -> Result<Side, String> {
        bulk_receiver(self, PORT, total, busy, barrier, done)
    }

    fn txn_client(
        &mut self,
        n: u64,
        busy: bool,
        barrier: &Barrier,
        stop: &AtomicBool,
    ) -> Result<Side, String> {
        txn_client(self, SocketAddrV4::new(B_IP, PORT), n, busy, barrier, stop)
    }

    fn txn_server(&mut self, busy: bool, barrier: &Barrier, stop: &AtomicBool) -> Result<Side, String> {
        txn_server(self, PORT, busy, barrier, stop)
    }
}

pub(crate) fn bulk_stack(kind: Kind, s: &Settings, bytes: u64) -> Result<Sample, String> {
    let done = AtomicBool::new(false);
    let busy = s.busy;
    let (a, b) = on_pair(
        kind,
        s,
        |ep, barrier| ep.bulk_sender(bytes, busy, barrier, &done),
        |ep, barrier| ep.bulk_receiver(bytes, busy, barrier, &done),
    )?;
    Ok(Sample { units: bytes, wall: b.end - b.start, cpu: [a.cpu, b.cpu] })
}

pub(crate) fn txn_stack(kind: Kind, s: &Settings, n: u64) -> Result<Sample, String> {
    let stop = AtomicBool::new(false);
    let busy = s.busy;
    let (a, b) = on_pair(
        kind,
        s,
        |ep, barrier| ep.txn_client(n, busy, barrier, &stop),
        |ep, barrier| ep.txn_server(busy, barrier, &stop),
    )?;
    Ok(Sample { units: n, wall: a.end - a.start, cpu: [a.cpu, b.cpu] })
}

/// What [`lockstep_stack`] runs with both ends on one thread.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lockstep {
    /// `n` transactions ([`txn_lockstep`]).
    Txn(u64),
    /// A bulk transfer of that many bytes ([`bulk_lockstep`]).
    Bulk(u64),
}

/// A workload with both ends on one thread, in lock step ([`txn_lockstep`], [`bulk_lockstep`]):
/// for instruction counts of the stacks without the waiting of two threads.
pub(crate) fn lockstep_stack(kind: Kind, s: &Settings, work: Lockstep) -> Result<Sample, String> {
    let pool = new_pool()?;
    let (dev_a, dev_b) = Pair::builder(&pool).capacity(4096).build().map_err(|e| e.to_string())?;
    let (cache_a, cache_b) = (dev_a.pool_cache(), dev_b.pool_cache());
    let side = if kind.is_smoltcp() {
        lockstep(
            &mut smol_endpoint(kind, dev_a, &cache_a, A_IP, s.buf),
            &mut smol_endpoint(kind, dev_b, &cache_b, B_IP, s.buf),
            work,
        )?
    } else {
        lockstep(
            &mut lib_endpoint(kind, dev_a, &cache_a, A_IP, s.buf),
            &mut lib_endpoint(kind, dev_b, &cache_b, B_IP, s.buf),
            work,
        )?
    };
    let units = match work {
        Lockstep::Txn(n) | Lockstep::Bulk(n) => n,
    };
    Ok(Sample { units, wall: side.end - side.start, cpu: [side.cpu, std::time::Duration::ZERO] })
}

fn lockstep<E: Endpoint>(client: &mut E, server: &mut E, work: Lockstep) -> Result<Side, String> {
    let remote = SocketAddrV4::new(B_IP, PORT);
    match work {
        Lockstep::Txn(n) => txn_lockstep(client, server, remote, n),
        Lockstep::Bulk(bytes) => bulk_lockstep(client, server, remote, bytes),
    }
}
