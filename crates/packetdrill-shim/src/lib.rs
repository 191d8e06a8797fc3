//! tcp-lib behind packetdrill's shared-object interface.
//!
//! packetdrill (Cardwell et al., "packetdrill: Scriptable Network Stack Testing, from Sockets to
//! Packets", USENIX ATC 2013) is the tool the Linux TCP developers test their stack with: a script
//! makes socket calls, injects packets and states, to the microsecond, which packets the stack
//! must send back. Run with `--so_filename=libpacketdrill_shim.so`, packetdrill loads this
//! library instead of using the kernel, and every script runs against tcp-lib:
//!
//! ```text
//! packetdrill --so_filename=target/release/libpacketdrill_shim.so \
//!     --so_flags="profile=linux" --local_ip=192.168.0.1 --remote_ip=192.0.2.1 script.pkt
//! ```
//!
//! `scripts/packetdrill.sh` builds packetdrill and runs the whole suite this way (and against
//! the kernel, for comparison); `packetdrill/expectations.txt` says which scripts do not apply.
//!
//! * [`ffi`]: `packetdrill_interface_init` and the C functions it hands out;
//! * [`actor`]: the thread that owns the stack, and how blocking calls wait on it;
//! * [`host`]: the stack on virtual time, and the link below it (Ethernet added and stripped, ARP
//!   answered by the shim);
//! * [`socket`]: the socket calls, with Linux's errno values, over the descriptor table in [`fds`];
//! * [`profile`]: `--so_flags`, and the Linux-compatible configuration profile;
//! * [`sysctl`]: the namespace's `net.ipv4` sysctls, read as a script sets them;
//! * [`qdisc`]: whether the script puts `fq` on `tun0`, under which Linux paces (and so does the
//!   shim's stack);
//! * [`tcp_info`]: `TCP_INFO` for the scripts' Python assertions, through an interposed
//!   `getsockopt` (the shim is also `LD_PRELOAD`ed).
//!
//! The shim implements IPv4 TCP sockets: `socket`, `bind`, `listen`, `accept`, `connect`, the
//! read and write families (vectors and messages included), `close`, `shutdown`, `fcntl`
//! (`O_NONBLOCK`), `ioctl` (`FIONREAD`, `SIOCOUTQ`, `FIONBIO`), `poll`, and the socket options
//! tcp-lib has. Everything else (`epoll`, pipes, `splice`, UDP, IPv6, `TCP_INFO`, zero-copy
//! and Fast Open options) fails with an errno, as an unsupported call does on any system.

pub mod actor;
pub mod fds;
pub mod ffi;
pub mod host;
pub mod profile;
pub mod qdisc;
pub mod socket;
pub mod sysctl;
pub mod tcp_info;

pub use actor::Actor;
pub use fds::Errno;
pub use host::{Host, Sent};
pub use profile::Profile;
pub use socket::Outcome;
