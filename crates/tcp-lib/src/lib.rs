//! A TCP/IP stack in the library that processes packets on the core that consumes them.
//!
//! So far: [`wire`], the wire formats (Ethernet, ARP, IPv4 with fragment reassembly, ICMPv4, TCP)
//! as zero-copy views and parse/emit representations; and [`tcp`], the sans-IO TCP connection core
//! (one TCB's state machine, timers, options and congestion control, driven by segments and time
//! from the caller). The listener and the per-core socket API build on them.
#![forbid(unsafe_code)]

pub mod tcp;
pub mod wire;
