//! ECN through the stack (RFC 3168): the IP header's ECN field goes out as ECT(0) on new data of
//! a connection that negotiated it, and a CE mark on a received datagram reaches the connection,
//! whose ECE makes the sender reduce its window and set CWR.

mod common;

use common::Net;
use tcp_lib::tcp::Ecn;
use tcp_lib::wire::ipv4::{ECN_CE, ECN_ECT0};
use tcp_lib::wire::{EtherType, EthernetFrame, Ipv4Packet, Protocol, TcpPacket};

const ETH_LEN: usize = 14;

/// The IP ECN field and TCP payload length of a frame (TCP over IPv4 only).
fn ecn_and_len(frame: &[u8]) -> Option<(u8, usize)> {
    let eth = EthernetFrame::new_checked(frame).ok().filter(|e| e.ethertype() == EtherType::Ipv4)?;
    let ip = Ipv4Packet::new_checked(eth.payload()).ok().filter(|p| p.protocol() == Protocol::Tcp)?;
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    Some((ip.ecn(), ip.payload().len() - tcp.header_len()))
}

#[test]
fn data_goes_out_ect0_and_a_ce_mark_comes_back_as_a_window_reduction() {
    let mut net = Net::with(|a| a.tcp.ecn = Ecn::On, |_| {});
    let (c, s) = net.open(80);
    assert!(net.a.connection_stats(c).unwrap().ecn && net.b.connection_stats(s).unwrap().ecn);
    assert_eq!(net.a.send(c, &[5; 3000]), Ok(3000));
    let frames = net.frames_from_a();
    let marks: Vec<_> = frames.iter().filter_map(|f| ecn_and_len(f)).collect();
    assert!(marks.iter().any(|&(_, len)| len > 0), "{marks:?}");
    assert!(marks.iter().all(|&(ecn, len)| (ecn == ECN_ECT0) == (len > 0)), "ECT(0) on data only: {marks:?}");
    // A router on the way marks the first data segment CE; the rest arrive as sent.
    let before = net.a.connection_stats(c).unwrap();
    for (i, mut f) in frames.into_iter().enumerate() {
        if i == 0 {
            let mut ip = Ipv4Packet::new_unchecked(&mut f[ETH_LEN..]);
            ip.set_dscp_ecn(0, ECN_CE);
            ip.fill_checksum();
        }
        let now = net.now;
        net.b.receive(now, &f);
    }
    assert_eq!(net.b.connection_stats(s).unwrap().ce_received, 1);
    let mut buf = [0u8; 4096];
    let mut got = 0;
    // Until the data is read and its ACKs (the ECE among them) are back at the sender: with
    // software GSO the 3000 bytes leave at once, and the reader has them all before the
    // sender has heard of the mark.
    assert!(net.run_until(200, |n| {
        got += n.b.recv(s, &mut buf).unwrap_or(0);
        got == 3000 && n.a.connection_stats(c).is_ok_and(|st| st.unacked_bytes == 0)
    }));
    let after = net.a.connection_stats(c).unwrap();
    assert_eq!(after.ecn_reductions, 1, "{after:?}");
    assert!(after.ssthresh < before.cwnd.max(before.ssthresh), "{before:?} -> {after:?}");
    assert_eq!(after.retransmits, 0, "a mark is not a loss");
}

#[test]
fn without_ecn_no_datagram_is_ect() {
    let mut net = Net::new();
    let (c, s) = net.open(80);
    assert!(!net.a.connection_stats(c).unwrap().ecn && !net.b.connection_stats(s).unwrap().ecn);
    assert_eq!(net.a.send(c, &[5; 3000]), Ok(3000));
    let frames = net.frames_from_a();
    assert!(!frames.is_empty());
    assert!(frames.iter().filter_map(|f| ecn_and_len(f)).all(|(ecn, _)| ecn == 0));
}
