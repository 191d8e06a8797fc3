//! A second Linux kernel in our stack's place: a namespace of its own behind the TAP `ptap0`,
//! addressed as our stack is (`10.88.0.2/24`), joined to the test's TAP by a [`relay`] that moves
//! frames between the two devices as our stack's poll loop would. With a [`FaultInjector`] on the
//! test's side of the relay, the kernel's TCP meets the faults our stack meets in the lossy tests,
//! in the same place: the anchor those tests compare against.

use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use netchannel::dev::{NetDevice, PacketBatch, Tap};
use netchannel::pool::PoolCache;

use super::{OnTap, STACK_IP, ip};

/// The peer's TAP, in its own namespace.
pub const PEER_IFACE: &str = "ptap0";

/// Moves the calling thread into a new network namespace (threads it spawns from then on start
/// there too) and opens [`PEER_IFACE`] in it: `10.88.0.2/24`, up, with `lo`. The returned TAP's
/// descriptor works from any thread.
pub fn enter_peer_namespace() -> Result<Tap, String> {
    // SAFETY: unshare only changes this thread's namespace membership.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!("unshare(CLONE_NEWNET) for the peer: {}", std::io::Error::last_os_error()));
    }
    let tap = Tap::open(PEER_IFACE).map_err(|e| format!("Tap::open({PEER_IFACE}): {e}"))?;
    ip(&["link", "set", "lo", "up"])?;
    ip(&["addr", "add", &format!("{STACK_IP}/24"), "dev", PEER_IFACE])?;
    ip(&["link", "set", PEER_IFACE, "up"])?;
    Ok(tap)
}

/// Frames each way and the frames a full device refused (dropped, as a busy host would).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayStats {
    pub near_to_far: u64,
    pub far_to_near: u64,
    pub refused: u64,
}

/// Moves frames between `near` (the test's TAP, under whatever middleware wraps it) and `far`
/// until `done` says so, failing after `limit`. Each pass receives a burst from each side and
/// transmits it on the other; with nothing received it sleeps on both descriptors for at most a
/// millisecond, so that a middleware's held frames (a reordered one waits at most 10 ms) leave
/// on time.
pub fn relay<D: OnTap>(
    near: &mut D,
    far: &mut Tap,
    cache: &PoolCache,
    done: impl Fn() -> bool,
    limit: Duration,
) -> Result<RelayStats, String> {
    let start = Instant::now();
    let mut stats = RelayStats::default();
    let mut batch = PacketBatch::with_capacity(32);
    while !done() {
        if start.elapsed() > limit {
            return Err(format!("relay: not done after {limit:?} ({stats:?})"));
        }
        let got_near = near.rx_burst(0, cache, &mut batch).map_err(|e| format!("near rx: {e}"))?;
        stats.near_to_far += forward(far, &mut batch, &mut stats.refused)?;
        let got_far = far.rx_burst(0, cache, &mut batch).map_err(|e| format!("far rx: {e}"))?;
        stats.far_to_near += forward(near, &mut batch, &mut stats.refused)?;
        if got_near + got_far == 0 {
            wait_either(near.tap(), far, Duration::from_millis(1))?;
        }
    }
    Ok(stats)
}

/// Transmits `batch` on `dev`; what it refuses is freed and counted in `refused`.
fn forward(dev: &mut impl NetDevice, batch: &mut PacketBatch<'_>, refused: &mut u64) -> Result<u64, String> {
    // An empty batch too: a middleware releases its held frames when called.
    let sent = dev.tx_burst(0, batch).map_err(|e| format!("tx: {e}"))?;
    *refused += batch.len() as u64;
    batch.clear();
    Ok(sent as u64)
}

/// Sleeps until either TAP is readable or `timeout` passes.
fn wait_either(a: &Tap, b: &Tap, timeout: Duration) -> Result<(), String> {
    let mut fds = [a.as_fd(), b.as_fd()].map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fds` is a live array of two `pollfd`s for the duration of the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("poll: {e}"));
        }
    }
    Ok(())
}
