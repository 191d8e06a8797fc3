//! Two endpoints of one kind on the two ends of a fresh `netchannel::dev::Pair`, both driven from
//! this thread: what the lock-step instruction-count benches (`icount_bulk`, `icount_txn`) run on.

use std::net::{Ipv4Addr, SocketAddrV4};

use netchannel::dev::Pair;
use netchannel::pool::{HugePages, Pool, PoolCache};

/// Send and receive buffers of both stacks (the timed bench's default).
pub(crate) const BUF: usize = 256 * 1024;
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The port the server listens on.
pub(crate) const PORT: u16 = 5001;
/// Where the client connects.
pub(crate) const REMOTE: SocketAddrV4 = SocketAddrV4::new(SERVER_IP, PORT);

/// The client's and the server's endpoint, made by `make` from a device, its pool cache and an
/// address.
pub(crate) fn pair_ends<E>(make: impl Fn(Pair, &'static PoolCache, Ipv4Addr) -> E) -> (E, E) {
    let pool = Pool::builder(16 * 1024).hugepages(HugePages::Never).build().expect("pool");
    let (dev_a, dev_b) = Pair::builder(&pool).capacity(4096).build().expect("pair");
    let (cache_a, cache_b) = (leaked_cache(&dev_a), leaked_cache(&dev_b));
    (make(dev_a, cache_a, CLIENT_IP), make(dev_b, cache_b, SERVER_IP))
}

/// The pool cache of one end, for the life of the process (an endpoint borrows it).
fn leaked_cache(dev: &Pair) -> &'static PoolCache {
    Box::leak(Box::new(dev.pool().cache()))
}
