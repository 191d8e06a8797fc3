//! Why an AF_XDP device could not be opened ([`XdpError`]), and how a failed system call's errno becomes
//! one: each variant's message says what is missing and how to fix it.

use std::io;

/// Why an [`AfXdp`](super::AfXdp) device could not be opened; the message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// Interface names are 1 to 15 bytes without NUL, `/` or whitespace.
    #[error("{name:?} is not a valid interface name (1 to 15 bytes, no NUL, '/' or whitespace)")]
    InvalidName {
        /// The name asked for.
        name: String,
    },
    /// No interface of that name in this network namespace.
    #[error(
        "no interface {name:?} in this network namespace (`ip link` lists them; create one, e.g. `ip link add {name} type veth peer name {name}p`)"
    )]
    NoSuchInterface {
        /// The name asked for.
        name: String,
    },
    /// A builder setting is out of range (ring sizes, queue count).
    #[error("invalid AF_XDP configuration: {0}")]
    InvalidConfig(String),
    /// The pool's buffers cannot be UMEM chunks (data room too small or too large).
    #[error("the pool's buffers cannot be UMEM chunks: {0}")]
    PoolGeometry(String),
    /// The pool could not supply the buffers the fill rings start with.
    #[error(
        "the pool supplied {got} of the {needed} buffers the fill rings start with; build a larger pool (fill ring size × queues + buffers in flight) or a smaller fill ring"
    )]
    PoolExhausted {
        /// Buffers needed (fill ring size × queues).
        needed: usize,
        /// Buffers obtained.
        got: usize,
    },
    /// The caller may not create XDP sockets or load BPF programs.
    #[error(
        "{op} was refused ({source}): AF_XDP needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (or root); run as root or `setcap cap_net_admin,cap_net_raw,cap_bpf+ep <binary>`"
    )]
    PermissionDenied {
        /// The operation refused.
        op: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
    /// The kernel has no AF_XDP sockets, no `bpf(2)` or no XDP links.
    #[error(
        "{op} failed ({source}): this kernel lacks AF_XDP or BPF (needs Linux 5.9+ with CONFIG_XDP_SOCKETS and CONFIG_BPF_SYSCALL); use the TAP device instead"
    )]
    Unsupported {
        /// The operation refused.
        op: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
    /// The locked-memory limit is too low to pin the UMEM.
    #[error(
        "cannot pin the pool's region as UMEM ({0}): raise the locked-memory limit (`ulimit -l unlimited`, LimitMEMLOCK= in systemd) or grant CAP_IPC_LOCK"
    )]
    MemlockLimit(#[source] io::Error),
    /// The interface's driver has no native XDP.
    #[error("the driver of {name:?} has no native XDP ({source}); use XdpMode::Generic (or XdpMode::Auto)")]
    NativeUnsupported {
        /// The interface.
        name: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// Zero-copy was required and the driver (or generic mode) cannot do it.
    #[error("{}", zero_copy_message(.name, .source.as_ref()))]
    ZeroCopyUnsupported {
        /// The interface.
        name: String,
        /// What the kernel said, if it was asked.
        source: Option<io::Error>,
    },
    /// Another XDP program is attached to the interface (or another `AfXdp` owns it).
    #[error(
        "another XDP program is attached to {name:?} ({source}); detach it (`ip link set dev {name} xdp off`, `xdpgeneric off`, or close the other AfXdp) and retry"
    )]
    AlreadyAttached {
        /// The interface.
        name: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// The interface has no such queue.
    #[error(
        "cannot bind to queue {queue} of {name:?} ({source}): the interface has fewer queues (`ethtool -l {name}`; veth: `numrxqueues`/`numtxqueues` at creation)"
    )]
    NoSuchQueue {
        /// The interface.
        name: String,
        /// The NIC queue asked for.
        queue: u32,
        /// What the kernel said.
        source: io::Error,
    },
    /// Another AF_XDP socket is bound to that queue.
    #[error(
        "queue {queue} of {name:?} already has an AF_XDP socket ({source}); close the other user or pick another queue"
    )]
    QueueBusy {
        /// The interface.
        name: String,
        /// The NIC queue.
        queue: u32,
        /// What the kernel said.
        source: io::Error,
    },
    /// The verifier rejected the redirect program.
    #[error("the kernel rejected the XDP redirect program ({source}); verifier log: {log}")]
    ProgramRejected {
        /// What the kernel said.
        source: io::Error,
        /// The verifier's log.
        log: String,
    },
    /// The kernel refused a busy-polling socket option ([`BusyPoll`](super::BusyPoll)).
    #[error("{}", busy_poll_message(.option, .source))]
    BusyPoll {
        /// The option: `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` or `SO_BUSY_POLL_BUDGET`.
        option: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
    /// Another system call failed.
    #[error("AF_XDP setup failed in {op}: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
}

/// The message of [`XdpError::ZeroCopyUnsupported`]: the kernel refused, or generic XDP cannot.
fn zero_copy_message(name: &str, source: Option<&io::Error>) -> String {
    match source {
        Some(e) => format!(
            "{name:?} cannot do AF_XDP zero-copy ({e}); use ZeroCopy::Auto or ZeroCopy::Never for copy mode"
        ),
        None => format!(
            "zero-copy on {name:?} needs native XDP; generic XDP is always copy mode: use XdpMode::Native or ZeroCopy::Auto"
        ),
    }
}

/// The message of [`XdpError::BusyPoll`]: a missing capability, or a kernel without the option.
fn busy_poll_message(option: &str, source: &io::Error) -> String {
    match source.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => format!(
            "setsockopt({option}) was refused ({source}): preferring busy polling, setting a busy-poll budget, or busy polling longer than the sysctl net.core.busy_read allows needs CAP_NET_ADMIN; run as root (or grant CAP_NET_ADMIN), or open without busy polling"
        ),
        _ => format!(
            "setsockopt({option}) failed ({source}): this kernel lacks it (SO_PREFER_BUSY_POLL and SO_BUSY_POLL_BUDGET need Linux 5.11+, all three CONFIG_NET_RX_BUSY_POLL); open without busy polling"
        ),
    }
}

/// Maps a failed call's errno to an error: permission and missing-support errors get their own
/// variants, everything else is `Io { op }`.
pub(super) fn classify(op: &'static str, e: io::Error) -> XdpError {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => XdpError::PermissionDenied { op, source: e },
        Some(libc::EAFNOSUPPORT | libc::ENOSYS | libc::EPROTONOSUPPORT) => {
            XdpError::Unsupported { op, source: e }
        }
        _ => XdpError::Io { op, source: e },
    }
}

/// Whether the running kernel has XDP links (`BPF_LINK_CREATE` with `BPF_XDP`, Linux 5.9 and
/// later), from `/proc/sys/kernel/osrelease`; `true` when that cannot be read or parsed, so that
/// an `EINVAL` from the attach is reported as the error it most likely is.
pub(super) fn running_kernel_has_xdp_links() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map_or(true, |r| has_xdp_links(r.trim()))
}

/// Whether a kernel of this release (`uname -r`: `6.1.0-18-amd64`) has XDP links (5.9 and later);
/// `true` for a release that does not parse.
fn has_xdp_links(release: &str) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    match (major, minor) {
        (Some(major), Some(minor)) => (major, minor) >= (5, 9),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdp_links_arrived_in_5_9() {
        assert!(!has_xdp_links("5.8.18-100.fc31.x86_64"));
        assert!(!has_xdp_links("4.19.0-21-amd64"));
        assert!(has_xdp_links("5.9.0"));
        assert!(has_xdp_links("5.10.0-28-amd64"));
        assert!(has_xdp_links("6.18.44-fc-v657"));
        // A release we cannot read: an EINVAL is then reported as the error it most likely is.
        assert!(has_xdp_links("weird"));
    }

    #[test]
    fn errors_say_how_to_fix_them() {
        let e = classify("socket(AF_XDP)", io::Error::from_raw_os_error(libc::EPERM));
        assert!(e.to_string().contains("CAP_NET_ADMIN"), "{e}");
        let e = classify("socket(AF_XDP)", io::Error::from_raw_os_error(libc::EAFNOSUPPORT));
        assert!(e.to_string().contains("CONFIG_XDP_SOCKETS"), "{e}");
        let e = XdpError::NativeUnsupported {
            name: "lo".into(),
            source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        };
        assert!(e.to_string().contains("XdpMode::Generic"), "{e}");
        let e = XdpError::AlreadyAttached {
            name: "eth0".into(),
            source: io::Error::from_raw_os_error(libc::EBUSY),
        };
        assert!(e.to_string().contains("xdp off"), "{e}");
        let e = XdpError::BusyPoll {
            option: "SO_PREFER_BUSY_POLL",
            source: io::Error::from_raw_os_error(libc::EPERM),
        };
        assert!(
            e.to_string().contains("CAP_NET_ADMIN") && e.to_string().contains("without busy polling"),
            "{e}"
        );
        let e = XdpError::BusyPoll {
            option: "SO_BUSY_POLL_BUDGET",
            source: io::Error::from_raw_os_error(libc::ENOPROTOOPT),
        };
        assert!(e.to_string().contains("Linux 5.11+"), "{e}");
    }
}
