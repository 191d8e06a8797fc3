//! A TCP/IP stack in the library that processes packets on the core that consumes them. Not written
//! yet: this crate is an empty placeholder until the TCP issue lands.
#![forbid(unsafe_code)]
