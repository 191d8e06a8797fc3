//! Per-socket configuration: [`Stack::connect_with`] and [`Stack::set_listener_tcp`] give one
//! connection, or a listener's connections, a configuration of their own, as socket options set
//! before `connect` or on a listening socket do.

mod common;

use common::Net;
use tcp_lib::stack::{Error, ListenerId, Stack, StreamId};
use tcp_lib::tcp::{self, State};

/// Opens a connection from A (with `client`) to B's listener on `port`.
fn open(net: &mut Net, l: ListenerId, port: u16, client: Option<tcp::Config>) -> (StreamId, StreamId) {
    let remote = Net::b_addr(port);
    let c = match client {
        Some(config) => net.a.connect_with(remote, config).unwrap(),
        None => net.a.connect(remote).unwrap(),
    };
    let mut s = None;
    assert!(net.run_until(100, |n| {
        s = s.or_else(|| n.b.accept(l));
        s.is_some() && n.a.state(c) == Ok(State::Established)
    }));
    (c, s.unwrap())
}

fn mss(stack: &Stack, s: StreamId) -> usize {
    stack.send_mss(s).unwrap()
}

#[test]
fn a_listeners_configuration_reaches_its_connections_only() {
    let mut net = Net::new();
    let small = net.b.listen(80).unwrap();
    let default = net.b.listen(81).unwrap();
    let config = tcp::Config { mss: 1100, ..tcp::Config::default() };
    net.b.set_listener_tcp(small, config).unwrap();
    // B announces 1100 on port 80 and sends no more than that itself (as Linux's TCP_MAXSEG);
    // the timestamps option takes 12 bytes of each segment. Port 81 keeps the MTU's 1460.
    let (c, s) = open(&mut net, small, 80, None);
    assert_eq!((mss(&net.a, c), mss(&net.b, s)), (1100 - 12, 1100 - 12));
    let (c, s) = open(&mut net, default, 81, None);
    assert_eq!((mss(&net.a, c), mss(&net.b, s)), (1460 - 12, 1460 - 12));
    // A stale handle is refused.
    net.b.unlisten(small).unwrap();
    assert_eq!(net.b.set_listener_tcp(small, config), Err(Error::InvalidHandle));
}

#[test]
fn connect_with_sets_one_connections_configuration_clamped_to_the_mtu() {
    // B's MTU is 9000: what limits B's segments to A is what A announces.
    let mut net = Net::with(
        |_| {},
        |b| {
            b.mtu = 9000;
            b.tcp.mss = 8960;
        },
    );
    let l = net.b.listen(80).unwrap();
    let (c, s) = open(&mut net, l, 80, Some(tcp::Config { mss: 900, ..tcp::Config::default() }));
    assert_eq!((mss(&net.a, c), mss(&net.b, s)), (900 - 12, 900 - 12));
    // More than A's MTU allows is clamped to it (1500 - 40) before A announces it.
    let (c, s) = open(&mut net, l, 80, Some(tcp::Config { mss: 9000, ..tcp::Config::default() }));
    assert_eq!((mss(&net.a, c), mss(&net.b, s)), (1460 - 12, 1460 - 12));
}
