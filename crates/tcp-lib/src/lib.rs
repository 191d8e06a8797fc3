//! A TCP/IP stack in the library that processes packets on the core that consumes them.
//!
//! So far: [`wire`], the wire formats (Ethernet, ARP, IPv4 with fragment reassembly, ICMPv4, IPv6
//! with its extension headers and fragment reassembly, ICMPv6 with Neighbor Discovery, UDP and TCP
//! over either) as zero-copy views and parse/emit representations; and [`tcp`], the sans-IO TCP
//! connection core (one TCB's state machine, timers, options and congestion control, driven by
//! segments and time from the caller); and [`stack`], the per-core dual-stack endpoint (IPv4 with
//! ARP and ICMP, IPv6 with Neighbor Discovery and ICMPv6, static routes, fragment reassembly, TCP
//! listeners with SYN queue, SYN cookies and accept backlog, socket handles, UDP sockets) driven
//! over a `netchannel` device; and [`socket`], the socket API over a stack and its device
//! (`Listener::bind`/`accept`, `Stream::connect`, `std::io::Read`/`Write`, blocking or non-blocking
//! with readiness, half-close, linger, per-connection and per-stack statistics), all on the calling
//! thread.
#![forbid(unsafe_code)]

pub mod socket;
pub mod stack;
pub mod tcp;
pub mod wire;
