//! [`TapError`]: why a TAP could not be opened, with what to do about it.

use std::fmt;
use std::io;

/// Why a TAP device could not be opened; the message says what to do about it.
#[derive(Debug)]
pub enum TapError {
    /// `/dev/net/tun` does not exist or has no driver behind it.
    NoTunDevice(io::Error),
    /// The caller lacks `CAP_NET_ADMIN` (or may not open `/dev/net/tun`).
    PermissionDenied(io::Error),
    /// Interface names are at most 15 bytes (`IFNAMSIZ - 1`).
    NameTooLong {
        /// The name asked for.
        name: String,
    },
    /// The name contains a NUL byte, a `/`, whitespace, or is `.` or `..`.
    InvalidName {
        /// The name asked for.
        name: String,
    },
    /// An interface of that name exists and is not a TAP this process may attach to (`EBUSY`,
    /// `EINVAL` from `TUNSETIFF`).
    Busy {
        /// The name asked for.
        name: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// Another system call failed.
    Io {
        /// The call, e.g. `"ioctl(SIOCGIFFLAGS)"`.
        op: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
}

impl fmt::Display for TapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoTunDevice(e) => {
                write!(
                    f,
                    "cannot open /dev/net/tun ({e}): load the tun module (`modprobe tun`), or in a container pass the device (`--device /dev/net/tun`)"
                )
            }
            Self::PermissionDenied(e) => write!(
                f,
                "creating a TAP interface needs CAP_NET_ADMIN ({e}): run as root or grant the capability (`setcap cap_net_admin+ep <binary>`)"
            ),
            Self::NameTooLong { name } => {
                write!(f, "interface name {name:?} is {} bytes; the limit is 15", name.len())
            }
            Self::InvalidName { name } => {
                write!(f, "{name:?} is not a valid interface name (no NUL, '/', whitespace, '.' or '..')")
            }
            Self::Busy { name, source } => write!(
                f,
                "cannot attach to interface {name:?} ({source}): it exists and is not a free TAP owned by this user; pick another name or delete it (`ip link del {name}`)"
            ),
            Self::Io { op, source } => write!(f, "TAP setup failed in {op}: {source}"),
        }
    }
}

impl std::error::Error for TapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NoTunDevice(e) | Self::PermissionDenied(e) => Some(e),
            Self::Busy { source, .. } | Self::Io { source, .. } => Some(source),
            Self::NameTooLong { .. } | Self::InvalidName { .. } => None,
        }
    }
}
