//! The shim without packetdrill: a host driven the way packetdrill drives it (socket calls,
//! injected packets, sniffed packets, virtual time), through the actor as packetdrill's two
//! threads use it.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use packetdrill_shim::{Actor, Errno, Profile};
use tcp_lib::wire::{
    ChecksumPolicy, Ipv4Packet, Ipv4Repr, Protocol, SeqNumber, TcpControl, TcpPacket, TcpRepr,
};

const LOCAL: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 1);
const REMOTE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const PORT: u16 = 8080;
const PEER_PORT: u16 = 40_000;

/// A segment from the peer to the stack's port.
fn from_peer(control: TcpControl, seq: u32, ack: Option<u32>, payload: &'static [u8]) -> TcpRepr<'static> {
    TcpRepr {
        src_port: PEER_PORT,
        dst_port: PORT,
        control,
        push: false,
        seq_number: SeqNumber::new(seq),
        ack_number: ack.map(SeqNumber::new),
        window_len: 32_792,
        ece: false,
        cwr: false,
        urgent_pointer: None,
        max_seg_size: (control == TcpControl::Syn).then_some(1000),
        window_scale: (control == TcpControl::Syn).then_some(7),
        sack_permitted: false,
        sack_blocks: tcp_lib::wire::tcp::SackBlocks::new(),
        timestamp: None,
        payload,
    }
}

/// The IPv4 packet packetdrill would inject for `tcp`.
fn packet(tcp: &TcpRepr<'_>) -> Vec<u8> {
    let ip = Ipv4Repr {
        src_addr: REMOTE,
        dst_addr: LOCAL,
        protocol: Protocol::Tcp,
        payload_len: tcp.buffer_len(),
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 1,
        dont_frag: true,
    };
    let mut buf = vec![0u8; 20 + tcp.buffer_len()];
    let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
    ip.emit(&mut p);
    tcp.emit(&mut TcpPacket::new_unchecked(p.payload_mut()), REMOTE, LOCAL);
    buf
}

/// The TCP segment in a packet the stack sent (checksums verified).
fn segment(ip: &[u8]) -> TcpRepr<'_> {
    let p = Ipv4Packet::new_checked(ip).expect("an IPv4 packet");
    let repr = Ipv4Repr::parse(&p, ChecksumPolicy::Verify).expect("a valid IPv4 header");
    assert_eq!((repr.src_addr, repr.dst_addr, repr.protocol), (LOCAL, REMOTE, Protocol::Tcp));
    let payload = &ip[20..20 + repr.payload_len];
    TcpRepr::parse(
        &TcpPacket::new_checked(payload).expect("a TCP header"),
        LOCAL,
        REMOTE,
        ChecksumPolicy::Verify,
    )
    .expect("a valid TCP segment")
}

/// The Linux profile without the host's sysctls (the test does not run in a namespace of its own).
fn profile() -> Profile {
    Profile { sysctls: false, ..Profile::default() }
}

fn sniff(actor: &Actor) -> (Vec<u8>, i64) {
    let sent = actor
        .step(|h, parked| h.next_packet(&mut |h| parked.retry(h)))
        .expect("the host runs")
        .expect("the stack sends");
    (sent.packet, sent.time_usecs)
}

fn usleep(actor: &Actor, us: u64) {
    actor
        .step(move |h, parked| {
            let target = h.now() + Duration::from_micros(us);
            h.advance_to(target, &mut |h| parked.retry(h));
        })
        .expect("the host runs");
}

fn now_usecs(actor: &Actor) -> i64 {
    actor.step(|h, _| h.now_usecs()).expect("the host runs")
}

/// A listener on PORT, a handshake from the peer, and the accepted socket.
fn accepted(actor: &Actor) -> (i32, SeqNumber) {
    let fd = actor.call(|h| h.socket(libc::AF_INET, libc::SOCK_STREAM, 0).into()).unwrap();
    actor.call(move |h| h.bind(fd, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, PORT).into()).into()).unwrap();
    actor.call(move |h| h.listen(fd, 1).into()).unwrap();
    actor.step(|h, _| h.inject(&packet(&from_peer(TcpControl::Syn, 0, None, b"")))).unwrap();
    let (synack, _) = sniff(actor);
    let synack = segment(&synack);
    assert_eq!(synack.control, TcpControl::Syn);
    assert_eq!(synack.ack_number, Some(SeqNumber::new(1)));
    assert_eq!(synack.window_scale, Some(8), "the Linux profile's shift");
    let iss = synack.seq_number;
    actor
        .step(move |h, _| h.inject(&packet(&from_peer(TcpControl::None, 1, Some((iss + 1).get()), b""))))
        .unwrap();
    let (conn, peer) = actor.call(move |h| h.accept(fd)).unwrap();
    assert_eq!(peer, SocketAddrV4::new(REMOTE, PEER_PORT).into());
    (conn, iss)
}

#[test]
fn a_handshake_then_data_out_then_a_retransmission_on_virtual_time() {
    let actor = Actor::spawn(profile()).unwrap();
    let (conn, iss) = accepted(&actor);
    let n = actor.call(move |h| h.write(conn, &[5; 1000], &mut 0, false)).unwrap();
    assert_eq!(n, 1000);
    let (data, sent_at) = sniff(&actor);
    let seg = segment(&data);
    assert_eq!((seg.seq_number, seg.payload.len(), seg.push), (iss + 1, 1000, true));
    // Unacknowledged, it is resent after the RTO: sniffed at once, stamped later.
    let real = std::time::Instant::now();
    let (again, resent_at) = sniff(&actor);
    assert_eq!(segment(&again).seq_number, iss + 1);
    let rto = Duration::from_micros(u64::try_from(resent_at - sent_at).unwrap());
    assert!(rto >= Duration::from_millis(200) && rto <= Duration::from_secs(1), "{rto:?}");
    assert!(real.elapsed() < Duration::from_secs(5), "virtual time, not real time");
}

#[test]
fn a_blocking_read_finishes_at_the_instant_its_data_arrives() {
    let actor = std::sync::Arc::new(Actor::spawn(profile()).unwrap());
    let (conn, iss) = accepted(&actor);
    let reader = {
        let actor = std::sync::Arc::clone(&actor);
        std::thread::spawn(move || {
            let data = actor.call(move |h| h.read(conn, 100, false)).unwrap();
            (data, now_usecs(&actor))
        })
    };
    // The reader is parked; time moves 50 ms; then the data arrives.
    std::thread::sleep(Duration::from_millis(50));
    usleep(&actor, 50_000);
    let arrival = now_usecs(&actor);
    let ack = Some((iss + 1).get());
    actor.step(move |h, _| h.inject(&packet(&from_peer(TcpControl::None, 1, ack, b"hello")))).unwrap();
    let (data, read_at) = reader.join().unwrap();
    assert_eq!(data, b"hello");
    // Within a few clock readings of the arrival, not whenever the thread got to run.
    assert!((0..100).contains(&(read_at - arrival)), "{read_at} vs {arrival}");
}

#[test]
fn a_non_blocking_socket_says_eagain_and_unknown_calls_say_why() {
    let actor = Actor::spawn(profile()).unwrap();
    let fd =
        actor.call(|h| h.socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0).into()).unwrap();
    actor.call(move |h| h.bind(fd, SocketAddrV4::new(LOCAL, PORT).into()).into()).unwrap();
    actor.call(move |h| h.listen(fd, 4).into()).unwrap();
    assert_eq!(actor.call(move |h| h.accept(fd)), Err(Errno(libc::EAGAIN)));
    assert_eq!(
        actor.call(|h| h.socket(libc::AF_UNIX, libc::SOCK_STREAM, 0).into()),
        Err(Errno(libc::EAFNOSUPPORT))
    );
    assert_eq!(
        actor.call(|h| h.socket(libc::AF_INET, libc::SOCK_DGRAM, 0).into()),
        Err(Errno(libc::EPROTONOSUPPORT))
    );
    let opt = actor
        .call(move |h| h.setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN, &5i32.to_ne_bytes()).into());
    assert_eq!(opt, Err(Errno(libc::ENOPROTOOPT)));
    assert_eq!(actor.call(|h| h.close(9999).into()), Err(Errno(libc::EBADF)));
    // poll with a timeout: nothing ready, so it returns when virtual time reaches the timeout.
    let start = now_usecs(&actor);
    let polled = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let mut deadline = None;
            actor.call(move |h| {
                let d = *deadline.get_or_insert_with(|| {
                    let d = h.now() + Duration::from_millis(100);
                    h.wake_at(d);
                    d
                });
                h.poll(&[(fd, libc::POLLIN)], Some(d))
            })
        });
        std::thread::sleep(Duration::from_millis(20));
        usleep(&actor, 500_000);
        waiter.join().unwrap()
    });
    assert_eq!(polled, Ok(vec![0]));
    assert!(now_usecs(&actor) - start >= 500_000);
}

#[test]
fn a_blocking_call_that_cannot_finish_fails_instead_of_hanging() {
    let actor = Actor::spawn(profile()).unwrap();
    let (conn, _) = accepted(&actor);
    // Nobody will send data or move time: the read would block for ever.
    let started = std::time::Instant::now();
    assert_eq!(actor.call(move |h| h.read(conn, 10, false)), Err(Errno(libc::EDEADLK)));
    let waited = started.elapsed();
    assert!(
        waited >= packetdrill_shim::actor::STALL && waited < 3 * packetdrill_shim::actor::STALL,
        "{waited:?}"
    );
}

#[test]
fn a_huge_read_returns_what_there_is_without_allocating_what_was_asked() {
    let actor = Actor::spawn(profile()).unwrap();
    let (conn, iss) = accepted(&actor);
    let ack = Some((iss + 1).get());
    actor.step(move |h, _| h.inject(&packet(&from_peer(TcpControl::None, 1, ack, b"tiny")))).unwrap();
    let data = actor.call(move |h| h.read(conn, usize::MAX / 2, false)).unwrap();
    assert_eq!(data, b"tiny");
}
