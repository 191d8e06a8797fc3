//! `TCP_INFO` for packetdrill's Python assertions (`%{ assert tcpi_snd_cwnd == 10 }%`).
//!
//! packetdrill reads `TCP_INFO` (and `TCP_CC_INFO`, `SO_MEMINFO`) with the system's `getsockopt`
//! on the live descriptor, not through its shared-object interface, so a library under test
//! cannot answer through that interface. `scripts/packetdrill.sh` loads the shim with
//! `LD_PRELOAD` as well: [`getsockopt`] below then stands in for the C library's in the whole
//! process. For a descriptor of the shim's socket table it answers from tcp-lib's connection
//! statistics, laid out as Linux's `struct tcp_info`; for every other descriptor (and in the child
//! processes that inherit `LD_PRELOAD`, where no shim runs) it calls the C library's.
//!
//! What tcp-lib has is reported in Linux's units: the state, the congestion state (Open,
//! Disorder, CWR, Recovery; Loss is not tracked and reads as Open), the RTO and RTT estimates in µs,
//! the MSS both ways (`tcpi_rcv_mss` as Linux estimates it: the largest segment received) and
//! the one announced, the window scales, unacknowledged and SACKed segments, the congestion
//! window and slow-start threshold in segments (`0x7fffffff` before the first loss, as Linux; the
//! window is PRR's pipe + sndcnt while PRR paces sending, as Linux's is then),
//! total retransmissions, lost segments (RFC 6675's IsLost, and RACK's marks when it is on), the
//! reordering degree (`tcpi_reordering`: at least 3, more once RACK saw a segment delivered that
//! far below the highest one), bytes and segments in and out. The rest (the negotiated options
//! and window scales, retransmitted segments in flight, pacing, delivery rate, ECN counters) reads
//! as zero: a script asserting one of those fails, as it should.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

use libc::socklen_t;
use tcp_lib::tcp::{State, Stats};

use crate::actor::Actor;
use crate::fds::Errno;
use crate::socket::Outcome;

/// What `TCP_INFO` reports for one connection, gathered on the host's thread.
#[derive(Clone, Copy, Debug)]
pub struct Info {
    /// The RFC 9293 state.
    pub state: State,
    /// The connection's statistics.
    pub stats: Stats,
}

/// `TCP_CC_INFO` (Linux's `include/uapi/linux/tcp.h`; the libc crate does not define it here).
const TCP_CC_INFO: c_int = 26;

/// Linux's `struct tcp_info` as packetdrill declares it (through the Accurate ECN byte counters):
/// 280 bytes; packetdrill insists on all of them.
pub const TCP_INFO_LEN: usize = 280;

fn linux_state(s: State) -> u8 {
    match s {
        State::Established => 1,
        State::SynSent => 2,
        State::SynReceived => 3,
        State::FinWait1 => 4,
        State::FinWait2 => 5,
        State::TimeWait => 6,
        State::Closed => 7,
        State::CloseWait => 8,
        State::LastAck => 9,
        State::Listen => 10,
        State::Closing => 11,
    }
}

fn put32(b: &mut [u8], at: usize, v: usize) {
    b[at..at + 4].copy_from_slice(&u32::try_from(v).unwrap_or(u32::MAX).to_ne_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// Encodes `info` as Linux's `struct tcp_info` (field offsets from Linux's UAPI header).
#[must_use]
pub fn encode(info: &Info) -> [u8; TCP_INFO_LEN] {
    let s = &info.stats;
    let mss = s.send_mss.max(1);
    let segments = |bytes: usize| bytes.div_ceil(mss);
    let mut b = [0u8; TCP_INFO_LEN];
    b[0] = linux_state(info.state);
    b[1] = if s.in_recovery {
        3
    } else if s.cwr {
        2
    } else if s.dup_acks_now > 0 || s.sacked_bytes > 0 {
        1
    } else {
        0
    };
    let usecs = |d: std::time::Duration| usize::try_from(d.as_micros()).unwrap_or(usize::MAX);
    put32(&mut b, 8, usecs(s.rto));
    put32(&mut b, 16, s.send_mss);
    put32(&mut b, 20, s.recv_mss);
    put32(&mut b, 24, segments(s.unacked_bytes));
    put32(&mut b, 28, segments(s.sacked_bytes));
    put32(&mut b, 32, segments(s.lost_bytes));
    put32(&mut b, 68, s.srtt.map_or(0, usecs));
    put32(&mut b, 72, usecs(s.rttvar));
    put32(&mut b, 76, if s.ssthresh >= 0x7fff_ffff { 0x7fff_ffff } else { s.ssthresh / mss });
    put32(&mut b, 80, s.prr_window.unwrap_or(s.cwnd) / mss);
    put32(&mut b, 84, s.announced_mss);
    put32(&mut b, 88, s.reordering);
    put32(&mut b, 100, usize::try_from(s.retransmits).unwrap_or(usize::MAX));
    put64(&mut b, 120, s.bytes_out.saturating_sub(s.unacked_bytes as u64));
    put64(&mut b, 128, s.bytes_in);
    put32(&mut b, 136, usize::try_from(s.segments_out).unwrap_or(usize::MAX));
    put32(&mut b, 140, usize::try_from(s.segments_in).unwrap_or(usize::MAX));
    put64(&mut b, 200, s.bytes_out);
    put32(&mut b, 220, usize::try_from(s.reordering_events).unwrap_or(usize::MAX));
    b
}

/// The host whose sockets [`getsockopt`] answers for: set by `packetdrill_interface_init`,
/// cleared by the interface's `free` before the actor is dropped. Release stores there pair with
/// the Acquire load in [`getsockopt`], so a reader that sees the pointer sees the actor built.
pub static ACTOR: AtomicPtr<Actor> = AtomicPtr::new(std::ptr::null_mut());

type GetsockoptFn = unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;

/// The C library's `getsockopt` (the next definition after ours).
fn libc_getsockopt() -> Option<GetsockoptFn> {
    static NEXT: OnceLock<usize> = OnceLock::new();
    let addr = *NEXT.get_or_init(|| {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no other precondition.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"getsockopt".as_ptr()) };
        p as usize
    });
    if addr == 0 {
        return None;
    }
    // SAFETY: `addr` is the address of the C library's `getsockopt`, whose C signature this is.
    Some(unsafe { std::mem::transmute::<usize, GetsockoptFn>(addr) })
}

/// Copies `data` into the caller's buffer, truncated to `*optlen`, and sets `*optlen`.
///
/// # Safety
/// `optval` is writable for `*optlen` bytes; `optlen` is valid.
unsafe fn answer(optval: *mut c_void, optlen: *mut socklen_t, data: &[u8]) -> c_int {
    // SAFETY: the caller guarantees `optlen` is valid.
    let room = unsafe { optlen.read() } as usize;
    let n = room.min(data.len());
    if n > 0 {
        // SAFETY: the caller guarantees `optval` has room for `*optlen >= n` bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), optval.cast::<u8>(), n) };
    }
    // SAFETY: as above.
    unsafe { optlen.write(socklen_t::try_from(n).unwrap_or(0)) };
    0
}

/// `getsockopt(2)`, interposed with `LD_PRELOAD`: `TCP_INFO`, `TCP_CC_INFO` (empty, as for a
/// congestion control without extra information) and `SO_MEMINFO` (zeros) for the shim's
/// sockets; the C library's for everything else.
///
/// # Safety
/// As `getsockopt(2)`: `optval` writable for `*optlen` bytes, `optlen` valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    optval: *mut c_void,
    optlen: *mut socklen_t,
) -> c_int {
    let ours = matches!(
        (level, name),
        (libc::SOL_TCP, libc::TCP_INFO | TCP_CC_INFO) | (libc::SOL_SOCKET, libc::SO_MEMINFO)
    );
    let actor = ACTOR.load(Ordering::Acquire);
    if ours && !actor.is_null() && !optval.is_null() && !optlen.is_null() {
        // SAFETY: a non-null ACTOR points to the live actor (cleared before it is dropped).
        let actor = unsafe { &*actor };
        if let Ok(Some((state, stats))) = actor.call(move |h| Outcome::Done(Ok(h.connection_info(fd)))) {
            let info = Info { state, stats };
            let data: Vec<u8> = match name {
                libc::TCP_INFO => encode(&info).to_vec(),
                TCP_CC_INFO => Vec::new(),
                _ => vec![0; 4 * 9],
            };
            // SAFETY: the caller's buffer and length, as getsockopt(2) requires.
            return unsafe { answer(optval, optlen, &data) };
        }
    }
    match libc_getsockopt() {
        // SAFETY: the C library's getsockopt with the caller's arguments.
        Some(next) => unsafe { next(fd, level, name, optval, optlen) },
        None => {
            Errno(libc::ENOSYS).set();
            -1
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn other_descriptors_go_to_the_c_library() {
        // SAFETY: socket takes no pointers.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        assert!(fd >= 0, "a UDP socket");
        let mut ty: c_int = 0;
        let mut len = socklen_t::try_from(size_of::<c_int>()).unwrap();
        // SAFETY: `ty` and `len` are a valid buffer and its length.
        let r =
            unsafe { getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&raw mut ty).cast(), &raw mut len) };
        assert_eq!((r, ty), (0, libc::SOCK_DGRAM), "forwarded: the kernel's answer");
        // TCP_INFO on a descriptor that is not the shim's (none is registered in this test)
        // is the kernel's too: a UDP socket has none.
        let mut info = [0u8; TCP_INFO_LEN];
        let mut len = socklen_t::try_from(TCP_INFO_LEN).unwrap();
        // SAFETY: `info` and `len` are a valid buffer and its length.
        let r =
            unsafe { getsockopt(fd, libc::SOL_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &raw mut len) };
        assert_eq!(r, -1, "the kernel refuses TCP_INFO on UDP");
        // SAFETY: `fd` is ours.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn fields_land_where_linux_puts_them_in_its_units() {
        let stats = Stats {
            srtt: Some(Duration::from_millis(100)),
            rttvar: Duration::from_millis(50),
            rto: Duration::from_millis(300),
            cwnd: 10_000,
            ssthresh: usize::MAX,
            retransmits: 2,
            send_mss: 1000,
            recv_mss: 1460,
            announced_mss: 1100,
            unacked_bytes: 4500,
            sacked_bytes: 2000,
            in_recovery: true,
            reordering: 5,
            reordering_events: 2,
            ..Stats::default()
        };
        let b = encode(&Info { state: State::Established, stats });
        assert_eq!((b[0], b[1]), (1, 3), "ESTABLISHED, TCP_CA_Recovery");
        assert_eq!(u32_at(&b, 8), 300_000, "tcpi_rto in µs");
        assert_eq!((u32_at(&b, 16), u32_at(&b, 20)), (1000, 1460), "snd_mss, rcv_mss");
        assert_eq!((u32_at(&b, 24), u32_at(&b, 28)), (5, 2), "unacked, sacked in segments");
        assert_eq!((u32_at(&b, 68), u32_at(&b, 72)), (100_000, 50_000), "rtt, rttvar in µs");
        assert_eq!((u32_at(&b, 76), u32_at(&b, 80)), (0x7fff_ffff, 10), "ssthresh unset, cwnd in segments");
        assert_eq!(
            (u32_at(&b, 84), u32_at(&b, 88), u32_at(&b, 100)),
            (1100, 5, 2),
            "advmss, reordering, total_retrans"
        );
        assert_eq!(u32_at(&b, 220), 2, "reord_seen");
        let cwr = encode(&Info {
            state: State::Established,
            stats: Stats {
                cwr: true,
                prr_window: Some(5000),
                cwnd: 7000,
                send_mss: 1000,
                ..Stats::default()
            },
        });
        assert_eq!((cwr[1], u32_at(&cwr, 80)), (2, 5), "TCP_CA_CWR, cwnd = pipe + sndcnt");
        let open = encode(&Info {
            state: State::SynSent,
            stats: Stats { ssthresh: 5000, send_mss: 1000, ..Stats::default() },
        });
        assert_eq!((open[0], open[1], u32_at(&open, 76)), (2, 0, 5));
    }
}
