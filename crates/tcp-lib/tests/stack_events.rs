//! `Stack::take_events`: the streams that had an event since the last call, each once; a stream
//! nothing happened to is not among them; data, a FIN, a reset and a timer's failure are events;
//! a stream waiting in the accept queue is reported under the id `accept` will return.

mod common;

use std::time::Duration;

use common::Net;
use tcp_lib::stack::{Error, StreamId};
use tcp_lib::tcp::ConnectionError;

/// B's events now, sorted.
fn events_b(net: &mut Net) -> Vec<StreamId> {
    let mut out = Vec::new();
    net.b.take_events(&mut out);
    out.sort();
    out
}

#[test]
fn only_the_streams_that_moved_are_reported_and_each_once() {
    let mut net = Net::new();
    let (c1, s1) = net.open(81);
    let (c2, s2) = net.open(82);
    let (c3, s3) = net.open(83);
    net.run_until(10, |_| false);
    let _ = events_b(&mut net);
    assert_eq!(events_b(&mut net), vec![], "taken: nothing left");
    net.a.send(c2, b"only two").unwrap();
    net.run_until(10, |_| false);
    assert_eq!(events_b(&mut net), vec![s2]);
    assert_eq!(events_b(&mut net), vec![], "reported once");
    // Several segments on two streams between two calls: each stream once.
    for _ in 0..5 {
        net.a.send(c1, &[1; 3000]).unwrap();
        net.a.send(c3, &[3; 3000]).unwrap();
        net.step();
    }
    net.run_until(10, |_| false);
    let mut both = vec![s1, s3];
    both.sort();
    assert_eq!(events_b(&mut net), both);
    let mut buf = vec![0u8; 20_000];
    assert_eq!(net.b.recv(s2, &mut buf), Ok(8));
    assert!(net.b.recv(s1, &mut buf).is_ok() && net.b.recv(s3, &mut buf).is_ok());
}

#[test]
fn a_fin_and_a_reset_are_events() {
    let mut net = Net::new();
    let (c1, s1) = net.open(81);
    let (c2, s2) = net.open(82);
    net.run_until(10, |_| false);
    let _ = events_b(&mut net);
    net.a.shutdown_write(c1).unwrap();
    net.run_until(10, |_| false);
    assert_eq!(events_b(&mut net), vec![s1], "the FIN");
    assert_eq!(net.b.recv(s1, &mut [0u8; 8]), Ok(0));
    net.a.abort(c2).unwrap();
    net.run_until(10, |_| false);
    assert_eq!(events_b(&mut net), vec![s2], "the reset");
    assert_eq!(net.b.recv(s2, &mut [0u8; 8]), Err(Error::Connection(ConnectionError::Reset)));
}

#[test]
fn a_timer_giving_up_is_an_event() {
    let mut net = Net::with(|c| c.tcp.max_retransmits = 3, |_| {});
    let (c, _s) = net.open(80);
    let mut out = Vec::new();
    net.a.take_events(&mut out);
    net.a.send(c, b"into the void").unwrap();
    // A alone: what it sends is lost; its retransmission timer gives up.
    let mut failed = false;
    for _ in 0..200 {
        net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
        net.now += Duration::from_millis(500);
        if net.a.recv(c, &mut [0u8; 8]) == Err(Error::Connection(ConnectionError::TimedOut)) {
            failed = true;
            break;
        }
    }
    assert!(failed, "the connection timed out");
    out.clear();
    net.a.take_events(&mut out);
    assert_eq!(out, vec![c], "its timers' events reported it");
}

#[test]
fn a_stream_in_the_accept_queue_is_reported_with_the_id_accept_returns() {
    let mut net = Net::new();
    let l = net.b.listen(80).unwrap();
    let c = net.a.connect(Net::b_addr(80)).unwrap();
    net.run_until(20, |_| false);
    net.a.send(c, b"before accept").unwrap();
    net.run_until(10, |_| false);
    let before = events_b(&mut net);
    let s = net.b.accept(l).unwrap();
    assert_eq!(before, vec![s], "established and queued: its id is the one accept returns");
    assert_eq!(events_b(&mut net), vec![], "accepting is the application's own call");
    assert_eq!(net.b.recv(s, &mut [0u8; 32]), Ok(13));
}
