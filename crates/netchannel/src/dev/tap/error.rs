//! [`TapError`]: why a TAP could not be opened, with what to do about it.

use std::io;

/// Why a TAP device could not be opened; the message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// `/dev/net/tun` does not exist or has no driver behind it.
    #[error(
        "cannot open /dev/net/tun ({0}): load the tun module (`modprobe tun`), or in a container pass the device (`--device /dev/net/tun`)"
    )]
    NoTunDevice(#[source] io::Error),
    /// The caller lacks `CAP_NET_ADMIN` (or may not open `/dev/net/tun`).
    #[error(
        "creating a TAP interface needs CAP_NET_ADMIN ({0}): run as root or grant the capability (`setcap cap_net_admin+ep <binary>`)"
    )]
    PermissionDenied(#[source] io::Error),
    /// Interface names are at most 15 bytes (`IFNAMSIZ - 1`).
    #[error("interface name {name:?} is {} bytes; the limit is 15", .name.len())]
    NameTooLong {
        /// The name asked for.
        name: String,
    },
    /// The name contains a NUL byte, a `/`, whitespace, or is `.` or `..`.
    #[error("{name:?} is not a valid interface name (no NUL, '/', whitespace, '.' or '..')")]
    InvalidName {
        /// The name asked for.
        name: String,
    },
    /// An interface of that name exists and is not a TAP this process may attach to (`EBUSY`,
    /// `EINVAL` from `TUNSETIFF`).
    #[error(
        "cannot attach to interface {name:?} ({source}): it exists and is not a free TAP owned by this user; pick another name or delete it (`ip link del {name}`)"
    )]
    Busy {
        /// The name asked for.
        name: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// Another system call failed.
    #[error("TAP setup failed in {op}: {source}")]
    Io {
        /// The call, e.g. `"ioctl(SIOCGIFFLAGS)"`.
        op: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
}
