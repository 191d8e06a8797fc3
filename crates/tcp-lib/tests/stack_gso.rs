//! Software GSO ([`Config::gso_max_size`]): a connection decides once for up to 64 KiB and the
//! stack cuts the super-segment into ordinary frames before a device without TSO. The wire must
//! carry what it carries without it: frames within the MTU, each with its own sequence number,
//! IP identification and valid checksums, PSH and FIN only where a plain sender puts them; and a
//! transfer through loss, reordering and duplication must arrive byte-exact.

mod common;

use std::time::Duration;

use common::{LossyRun, Net, Rng, TICK, lossy, lossy_transfer, tcp_in};
use netchannel::dev::{NetDevice, PacketBatch};
use tcp_lib::stack::Error;
use tcp_lib::tcp::State;
use tcp_lib::wire::{EthernetFrame, Ipv4Packet};

/// What the test saw of one data frame from A.
struct Frame {
    seq: u32,
    len: usize,
    ident: u16,
    psh: bool,
}

#[test]
fn cut_frames_are_wire_segments_with_valid_checksums() {
    cut_frames_with(None, 400_000);
}

/// The same with the smallest MSS a stack accepts (64) announced by the receiver: frames barely
/// longer than the longest headers, which the cut copies from the frame before at a fixed length.
#[test]
fn cut_frames_of_the_smallest_segments_are_wire_segments_too() {
    cut_frames_with(Some(64), 40_000);
}

/// A transfer of `bytes` from A, which cuts super-segments in software, to B (announcing `mss`
/// when given), every frame checked on the wire.
fn cut_frames_with(mss: Option<u16>, bytes: usize) {
    let mut net = Net::with(
        |a| a.gso_max_size = 65_535,
        |b| {
            if let Some(mss) = mss {
                b.tcp.mss = mss;
            }
        },
    );
    let (c, s) = net.open(80);
    let data = Rng(5).bytes(bytes);
    let mut sent = 0;
    let mut got = Vec::new();
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut batch = PacketBatch::with_capacity(256);
    for _ in 0..20_000 {
        if sent < data.len()
            && let Ok(n) = net.a.send(c, &data[sent..])
        {
            sent += n;
        }
        net.a.poll(net.now, &mut net.dev_a, &net.cache).unwrap();
        // Every frame A sent, inspected, then handed to B.
        net.dev_b.rx_burst(0, &net.cache, &mut batch).unwrap();
        for p in batch.drain() {
            let frame = p.data();
            assert!(frame.len() <= 1514, "a frame of {} bytes: longer than the MTU allows", frame.len());
            let eth = EthernetFrame::new_checked(frame).unwrap();
            let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
            assert!(ip.verify_checksum(), "IPv4 header checksum");
            let (src, dst, tcp) = tcp_in(frame).unwrap();
            assert!(tcp.verify_checksum(src, dst), "TCP checksum of the frame at {}", tcp.seq_number());
            if !tcp.payload().is_empty() {
                let seq = tcp.seq_number().get();
                frames.push(Frame { seq, len: tcp.payload().len(), ident: ip.ident(), psh: tcp.psh() });
            }
            net.b.receive(net.now, frame);
        }
        net.b.poll(net.now, &mut net.dev_b, &net.cache).unwrap();
        net.now += TICK;
        loop {
            match net.b.recv(s, &mut buf) {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                Ok(_) | Err(Error::WouldBlock) => break,
                Err(e) => panic!("{e}"),
            }
        }
        if got.len() == data.len() {
            break;
        }
    }
    assert!(got == data, "{} of {} bytes, or different bytes", got.len(), data.len());
    let st = net.a.stats();
    assert!(st.tx_gso_super_segments > 10, "{st:?}");
    assert_eq!(st.tx_gso_dropped, 0, "{st:?}");
    // The data segments tile the stream: each starts where the one before it ended.
    for w in frames.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq.wrapping_add(u32::try_from(w[0].len).unwrap()),
            "a gap or an overlap: no loss here"
        );
        assert_eq!(w[1].ident, w[0].ident.wrapping_add(1), "IP identifications count up frame by frame");
    }
    let full = frames.iter().filter(|f| f.len == frames[0].len).count();
    assert!(full * 10 > frames.len() * 9, "nearly all full-sized: {full} of {}", frames.len());
    // PSH only where a burst ends: far fewer than the frames.
    let pushed = frames.iter().filter(|f| f.psh).count();
    assert!(pushed > 0 && pushed * 4 < frames.len(), "{pushed} of {} frames with PSH", frames.len());
    assert_eq!(net.a.state(c), Ok(State::Established));
}

#[test]
fn transfer_through_loss_and_reordering_arrives_byte_exact() {
    let mut rng = Rng(78);
    let ab = rng.bytes(3 << 20);
    let ba = rng.bytes(1 << 20);
    let LossyRun { a, b, client: c, got_ab, got_ba, faults: fs, elapsed } =
        lossy_transfer(23, lossy(0.0), &ab, &ba, |ca, cb| {
            ca.tcp.send_buffer = 256 * 1024;
            ca.gso_max_size = 65_535;
            cb.gso_max_size = 65_535;
        });
    let (sa, sb) = (a.stats(), b.stats());
    assert!(fs.tx.dropped > 30 && fs.rx.dropped > 10, "{fs:?}");
    assert!(got_ab == ab, "A->B: {} of {} bytes, or different bytes; {fs:?}", got_ab.len(), ab.len());
    assert!(got_ba == ba, "B->A: {} of {} bytes, or different bytes", got_ba.len(), ba.len());
    assert!(a.connection_stats(c).unwrap().retransmits > 0);
    assert!(sa.tx_gso_super_segments > 0 && sb.tx_gso_super_segments > 0, "{sa:?} {sb:?}");
    assert!(elapsed < Duration::from_secs(400), "{elapsed:?}");
}

#[test]
fn a_super_segment_never_outgrows_the_batch() {
    let mut net = Net::with(|a| a.gso_max_size = 65_535, |b| b.tcp.recv_buffer = 1 << 20);
    let (c, s) = net.open(80);
    let data = Rng(9).bytes(1 << 20);
    let mut buf = vec![0u8; 64 * 1024];
    // Half a megabyte through first, B reading, so that the windows open wide.
    let (mut sent, mut got) = (0, 0);
    while got < data.len() / 2 {
        if let Ok(n) = net.a.send(c, &data[sent..]) {
            sent += n;
        }
        net.step();
        while let Ok(n) = net.b.recv(s, &mut buf) {
            if n == 0 {
                break;
            }
            got += n;
        }
    }
    // Let the last ACKs in, fill the send buffer, then ask through batches of four frames:
    // each super-segment is cut to what the batch holds, none dropped, and the next call goes
    // on from there.
    for _ in 0..5 {
        net.step();
        while let Ok(n) = net.b.recv(s, &mut buf) {
            if n == 0 {
                break;
            }
        }
    }
    while let Ok(n) = net.a.send(c, &data[sent..]) {
        if n == 0 {
            break;
        }
        sent += n;
    }
    let before = net.a.stats();
    let mut seqs = Vec::new();
    for _ in 0..8 {
        let mut batch = PacketBatch::with_capacity(4);
        let n = net.a.transmit(net.now, &net.cache, &mut batch);
        assert!(n <= 4, "{n}");
        for p in batch.drain() {
            let (_, _, tcp) = tcp_in(p.data()).unwrap();
            seqs.push((tcp.seq_number().get(), tcp.payload().len()));
        }
    }
    let st = net.a.stats();
    assert_eq!(st.tx_gso_dropped, 0, "{st:?}");
    // Most batches are one super-segment of four (a window or the buffer's end may cut one short).
    assert!(st.tx_gso_super_segments >= before.tx_gso_super_segments + 5, "{seqs:?} {st:?}");
    assert!(seqs.len() >= 20, "the windows allow most of eight batches: {seqs:?}");
    for w in seqs.windows(2) {
        assert_eq!(w[1].0, w[0].0.wrapping_add(u32::try_from(w[0].1).unwrap()), "{seqs:?}");
    }
}
