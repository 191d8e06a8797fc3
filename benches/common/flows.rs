//! The TCP flows the data-path benches register and the frames they replay: flow `i` is
//! 10.0.x.y:80 <- 10.1.x.y:(1024 + i % 50000), its frames go to the 82599 model's default MAC.
//! Included by path (`#[path = "common/flows.rs"] mod flows;`) by the benches that use it.
#![allow(dead_code, reason = "each bench uses its own subset")]

use std::net::{Ipv4Addr, SocketAddrV4};

/// The flow `i`: (local, remote) = (10.0.x.y:80, 10.1.x.y:(1024 + i % 50000)), x.y the low 16
/// bits of `i`.
pub(crate) fn flow(i: u32) -> (SocketAddrV4, SocketAddrV4) {
    let [_, _, a, b] = i.to_be_bytes();
    let port = u16::try_from(1024 + i % 50_000).expect("fits");
    (SocketAddrV4::new(Ipv4Addr::new(10, 0, a, b), 80), SocketAddrV4::new(Ipv4Addr::new(10, 1, a, b), port))
}

/// An Ethernet/IPv4/TCP frame of flow `i`, remote to local, with `payload` bytes of 0xab
/// (6 makes the 60-byte minimum frame, 64 bytes on the wire).
pub(crate) fn tcp_frame(i: u32, payload: u16) -> Vec<u8> {
    let (local, remote) = flow(i);
    let [len_hi, len_lo] = (40 + payload).to_be_bytes();
    let mut f = vec![
        0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02, 0x08, 0x00, 0x45, 0, len_hi, len_lo, 0, 0, 0x40, 0,
        64, 6, 0, 0,
    ];
    f.extend_from_slice(&remote.ip().octets());
    f.extend_from_slice(&local.ip().octets());
    f.extend_from_slice(&remote.port().to_be_bytes());
    f.extend_from_slice(&local.port().to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    f.resize(f.len() + usize::from(payload), 0xab);
    assert_eq!(f.len(), 54 + usize::from(payload));
    f
}
