//! A TCP/IP stack in the library that processes packets on the core that consumes them.
//!
//! So far: [`wire`], the wire formats (Ethernet, ARP, IPv4 with fragment reassembly, ICMPv4, TCP)
//! as zero-copy views and parse/emit representations. The connection state machine and the socket
//! API build on it.
#![forbid(unsafe_code)]

pub mod wire;
