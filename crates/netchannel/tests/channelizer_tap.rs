//! The kernel sends TCP and UDP to several of our addresses and ports through a TAP in a private
//! namespace; the channelizer demultiplexes them into the registered consumers' channels, verified by
//! signature and by payload (each datagram's bytes, in order; the TCP frames are SYNs), and what
//! nobody registered reaches the default channel. The TAP is wrapped in a `PcapWriter` whose file is
//! read back at the end.
//!
//! Only addresses inside the test's own namespace (10.201.0.0/24) are used. Without root or
//! `/dev/net/tun` it skips (`netns_test::skip`); once those hold, any error fails it.
#![cfg(not(loom))]

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netchannel::channelizer::{Channelizer, ConsumerId, SignatureRegistry};
use netchannel::classify::{Classified, classify};
use netchannel::dev::{NetDevice, PcapWriter, Tap};
use netchannel::pool::{HugePages, PacketRx, Pool, PoolCache};
use netchannel::rcu::Qsbr;
use netchannel::signature::{Proto, Signature};

use netns_test::ip;

const IFACE: &str = "ncch0";
const KERNEL: &str = "10.201.0.1";
const US_A: &str = "10.201.0.2";
const US_B: &str = "10.201.0.3";

fn addr(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

/// A frame a consumer received: its signature (`None` for a non-flow) and its bytes.
type Got = (Option<Signature>, Vec<u8>);

/// The IPv4 transport header's offset in an untagged Ethernet frame, and the protocol number.
fn l4(frame: &[u8]) -> Option<(usize, u8)> {
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ihl = usize::from(frame.get(14)? & 0x0f) * 4;
    Some((14 + ihl, *frame.get(23)?))
}

/// The payload of an IPv4 UDP frame, as long as the UDP header says.
fn udp_payload(frame: &[u8]) -> Option<&[u8]> {
    let (at, proto) = l4(frame)?;
    if proto != 17 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([*frame.get(at + 4)?, *frame.get(at + 5)?]));
    frame.get(at + 8..at + len.checked_sub(8)?.checked_add(8)?)
}

/// Whether an IPv4 frame is a TCP SYN (without ACK).
fn is_syn(frame: &[u8]) -> bool {
    l4(frame).is_some_and(|(at, proto)| proto == 6 && frame.get(at + 13).is_some_and(|f| f & 0x12 == 0x02))
}

/// The UDP payloads of `got`, as strings (a non-UDP frame shows as `<not UDP>`).
fn payloads(got: &[Got]) -> Vec<String> {
    got.iter()
        .map(|(_, f)| {
            udp_payload(f).map_or_else(|| "<not UDP>".into(), |p| String::from_utf8_lossy(p).into_owned())
        })
        .collect()
}

/// The signatures and bytes of the frames in `rx` (non-flows have no signature).
fn drain_signatures(rx: &mut PacketRx, cache: &PoolCache, into: &mut Vec<Got>) {
    while let Some(p) = rx.pop(cache) {
        into.push(match classify(p.data()) {
            Classified::Flow { sig, .. } => (Some(sig), p.data().to_vec()),
            _ => (None, p.data().to_vec()),
        });
    }
}

fn run() -> Result<(), String> {
    let tap = Tap::open(IFACE).map_err(|e| format!("Tap::open({IFACE}): {e}"))?;
    let mac = tap.info().mac.to_string();
    ip(&["addr", "add", &format!("{KERNEL}/24"), "dev", IFACE])?;
    ip(&["link", "set", IFACE, "up"])?;
    for us in [US_A, US_B] {
        ip(&["neigh", "add", us, "lladdr", &mac, "dev", IFACE, "nud", "permanent"])?;
    }
    let pcap_path = std::env::temp_dir().join(format!("channelizer-tap-{}.pcap", std::process::id()));
    let dev = PcapWriter::create(tap, &pcap_path).map_err(|e| e.to_string())?;

    let pool = Pool::builder(1024).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
    let cache = pool.cache();
    let registry = Arc::new(SignatureRegistry::new(Qsbr::new()));
    let (default_tx, mut default_rx) = pool.packet_channel(256).map_err(|e| e.to_string())?;
    let mut ch = Channelizer::builder(dev, &cache, Arc::clone(&registry), default_tx)
        .build()
        .map_err(|e| e.to_string())?;
    let mut rx: Vec<PacketRx> = Vec::new();
    for id in 0..4 {
        let (tx, r) = pool.packet_channel(64).map_err(|e| e.to_string())?;
        ch.attach(ConsumerId(id), tx).expect("same pool");
        rx.push(r);
    }

    // Two kernel sockets; the second one's exact 5-tuple is registered to consumer 3.
    let sock = UdpSocket::bind(addr(KERNEL, 0)).map_err(|e| e.to_string())?;
    let exact_sock = UdpSocket::bind(addr(KERNEL, 0)).map_err(|e| e.to_string())?;
    let exact_remote = exact_sock.local_addr().unwrap();
    let listen_a = Signature::listener(Proto::Udp, addr(US_A, 7000));
    let listen_b = Signature::listener(Proto::Udp, addr(US_B, 7000));
    let listen_tcp = Signature::listener(Proto::Tcp, addr(US_A, 8080));
    let exact = Signature::new(Proto::Udp, addr(US_A, 7001), exact_remote).unwrap();
    let _regs = [
        registry.register(listen_a, ConsumerId(0)).unwrap(),
        registry.register(listen_b, ConsumerId(1)).unwrap(),
        registry.register(listen_tcp, ConsumerId(2)).unwrap(),
        registry.register(exact, ConsumerId(3)).unwrap(),
    ];

    let send = |s: &UdpSocket, to: SocketAddr, n: usize| -> Result<(), String> {
        for i in 0..n {
            s.send_to(format!("datagram {i}").as_bytes(), to).map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    send(&sock, addr(US_A, 7000), 3)?; // consumer 0
    send(&sock, addr(US_B, 7000), 2)?; // consumer 1: same port, other address
    send(&exact_sock, addr(US_A, 7001), 2)?; // consumer 3: exact 5-tuple
    send(&sock, addr(US_A, 7001), 1)?; // same port, other remote, no listener: default
    send(&sock, addr(US_A, 9999), 1)?; // nobody: default
    // The kernel's TCP connect sends SYNs to our TCP listener (nobody answers; it times out).
    let connector =
        std::thread::spawn(|| TcpStream::connect_timeout(&addr(US_A, 8080), Duration::from_millis(1500)));

    let mut got: Vec<Vec<Got>> = vec![Vec::new(); 4];
    let mut default_got: Vec<Got> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let done = |got: &[Vec<Got>], default_got: &[Got]| {
        got[0].len() >= 3
            && got[1].len() >= 2
            && !got[2].is_empty()
            && got[3].len() >= 2
            && default_got.iter().filter_map(|g| g.0).filter(|s| s.proto() == Proto::Udp).count() >= 2
    };
    while !done(&got, &default_got) {
        if Instant::now() > deadline {
            return Err(format!("timed out; consumers got {got:?}, default got {default_got:?}"));
        }
        let _ = ch.device().inner().wait_readable(Some(Duration::from_millis(50)));
        let _ = ch.poll().map_err(|e| e.to_string())?;
        for (r, g) in rx.iter_mut().zip(got.iter_mut()) {
            drain_signatures(r, &cache, g);
        }
        drain_signatures(&mut default_rx, &cache, &mut default_got);
    }
    let _ = connector.join();

    // Verify by signature: each consumer got exactly its flows.
    let remote = sock.local_addr().unwrap();
    assert!(
        got[0].iter().all(|g| g.0 == Some(Signature::new(Proto::Udp, addr(US_A, 7000), remote).unwrap()))
    );
    assert!(
        got[1].iter().all(|g| g.0 == Some(Signature::new(Proto::Udp, addr(US_B, 7000), remote).unwrap()))
    );
    assert!(got[2].iter().all(|g| g.0.is_some_and(|s| s.to_listener() == listen_tcp)), "{:?}", got[2]);
    assert!(got[3].iter().all(|g| g.0 == Some(exact)));
    assert_eq!((got[0].len(), got[1].len(), got[3].len()), (3, 2, 2));
    // ... and by payload: each consumer got the bytes the kernel sent it, whole and in order.
    assert_eq!(payloads(&got[0]), ["datagram 0", "datagram 1", "datagram 2"]);
    assert_eq!(payloads(&got[1]), ["datagram 0", "datagram 1"]);
    assert_eq!(payloads(&got[3]), ["datagram 0", "datagram 1"]);
    assert!(got[2].iter().all(|(_, f)| is_syn(f)), "consumer 2 got a frame that is not a SYN");
    let default_udp: Vec<Got> =
        default_got.iter().filter(|g| g.0.is_some_and(|s| s.proto() == Proto::Udp)).cloned().collect();
    assert_eq!(
        default_udp.iter().map(|g| g.0.unwrap()).collect::<Vec<_>>(),
        [
            Signature::new(Proto::Udp, addr(US_A, 7001), remote).unwrap(),
            Signature::new(Proto::Udp, addr(US_A, 9999), remote).unwrap()
        ]
    );
    assert_eq!(payloads(&default_udp), ["datagram 0", "datagram 0"]);
    let stats = ch.stats();
    assert_eq!(stats.dropped_full + stats.dropped_malformed, 0, "{stats:?}");
    let received = stats.rx;

    // The pcap holds every frame the channelizer received.
    drop(ch); // flushes the pcap
    let file = std::fs::File::open(&pcap_path).map_err(|e| e.to_string())?;
    let mut reader = pcap_file::pcap::PcapReader::new(file).map_err(|e| e.to_string())?;
    let mut frames = 0u64;
    let mut syns = 0;
    while let Some(packet) = reader.next_packet() {
        let packet = packet.map_err(|e| e.to_string())?;
        frames += 1;
        if let Classified::Flow { sig, .. } = classify(&packet.data) {
            syns += usize::from(sig.to_listener() == listen_tcp);
        }
    }
    let _ = std::fs::remove_file(&pcap_path);
    assert!(frames >= received, "pcap has {frames} frames, the channelizer received {received}");
    assert!(syns >= 1);
    drop(rx);
    drop(default_rx);
    drop(cache);
    pool.check_leaks().map_err(|e| e.to_string())
}

#[test]
fn kernel_traffic_is_channelized_by_signature() {
    netns_test::in_private_namespace(run);
}
