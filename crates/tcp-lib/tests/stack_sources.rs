//! RFC 1122 §4.2.3.10 (with §3.2.1.3's list): TCP ignores a segment whose source address no peer
//! can have. A SYN from the unspecified address, loopback, a multicast address, the limited or the
//! subnet's broadcast, or our own address (the land attack) opens nothing, draws nothing (no
//! SYN-ACK, no reset, no ARP request for the address) and is counted in `tcp_bad_source`; the same
//! SYN from a real neighbour opens a connection.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::{A_IP, B_IP, Net, tcp_frame};
use tcp_lib::wire::{SeqNumber, TcpControl, TcpRepr};

fn syn(src_port: u16) -> TcpRepr<'static> {
    TcpRepr {
        src_port,
        dst_port: 80,
        control: TcpControl::Syn,
        seq_number: SeqNumber::new(7),
        window_len: 65535,
        max_seg_size: Some(1460),
        ..TcpRepr::default()
    }
}

#[test]
fn syns_from_addresses_no_peer_can_have_are_dropped_unanswered() {
    let mut net = Net::new();
    net.b.listen(80).unwrap();
    // Whatever the stacks send on their own at start (an ARP announcement) goes out first.
    net.step();
    let bad = [
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::LOCALHOST,
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(10, 0, 0, 255),
        B_IP,
    ];
    let before = *net.b.stats();
    for src in bad {
        // The land attack comes from our own port too.
        let port = if src == B_IP { 80 } else { 4000 };
        let frame =
            tcp_frame(net.mac_a(), net.mac_b(), SocketAddrV4::new(src, port), Net::b_addr(80), &syn(port));
        let now = net.now;
        net.b.receive(now, &frame);
    }
    net.step();
    let after = *net.b.stats();
    assert_eq!(after.tcp_bad_source, before.tcp_bad_source + bad.len() as u64, "{after:?}");
    assert_eq!(after.connections_opened, before.connections_opened, "{after:?}");
    assert_eq!(after.rst_sent, before.rst_sent, "{after:?}");
    assert_eq!(after.arp_requests, before.arp_requests, "no ARP request for a broadcast or our own address");
    assert_eq!(after.tx_frames, before.tx_frames, "nothing sent: {after:?}");

    // The same SYN from a neighbour's address is a connection request.
    let frame =
        tcp_frame(net.mac_a(), net.mac_b(), SocketAddrV4::new(A_IP, 4000), Net::b_addr(80), &syn(4000));
    let now = net.now;
    net.b.receive(now, &frame);
    assert_eq!(net.b.stats().connections_opened, before.connections_opened + 1);
    assert_eq!(net.b.stats().tcp_bad_source, after.tcp_bad_source);
}
