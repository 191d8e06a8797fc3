//! A pcap written through a wrapped `Pair` reads back, frame for frame, with pcap-file's reader, and
//! with `tcpdump -r` when tcpdump is installed.
#![cfg(not(loom))]

use std::process::Command;

use netchannel::dev::{NetDevice, PacketBatch, Pair, PcapWriter};
use netchannel::pool::{HugePages, Pool};
use pcap_file::DataLink;
use pcap_file::pcap::PcapReader;

fn frame(i: u8) -> Vec<u8> {
    // dst, src, an experimental EtherType, then a payload of varying length.
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x88, 0xb5];
    f.extend((0..40 + u16::from(i) * 7).map(|k| i ^ k.to_le_bytes()[0]));
    f
}

#[test]
fn a_wrapped_pair_records_every_frame_both_ways() {
    let dir = std::env::temp_dir().join(format!("netchannel-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pair.pcap");

    let pool = Pool::builder(256).hugepages(HugePages::Never).build().unwrap();
    let (a, mut b) = Pair::builder(&pool).capacity(4).build().unwrap();
    let mut a = PcapWriter::create(a, &path).unwrap();
    let cache = pool.cache();
    let mut batch = PacketBatch::with_capacity(8);

    // 6 frames out through `a` (the wire holds 4: two calls), 3 frames in from `b`.
    for i in 0..6 {
        let mut p = cache.alloc().unwrap();
        p.extend_from_slice(&frame(i)).unwrap();
        batch.push(p).unwrap();
    }
    assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 4);
    let mut rx = PacketBatch::with_capacity(8);
    assert_eq!(b.rx_burst(0, &cache, &mut rx).unwrap(), 4);
    rx.clear();
    assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 2);
    assert_eq!(b.rx_burst(0, &cache, &mut rx).unwrap(), 2);
    rx.clear();
    for i in 100..103 {
        let mut p = cache.alloc().unwrap();
        p.extend_from_slice(&frame(i)).unwrap();
        batch.push(p).unwrap();
    }
    assert_eq!(b.tx_burst(0, &mut batch).unwrap(), 3);
    assert_eq!(a.rx_burst(0, &cache, &mut rx).unwrap(), 3);
    let stats = a.pcap_stats();
    assert_eq!((stats.tx_frames, stats.rx_frames, stats.write_errors), (6, 3, 0));
    drop((rx, batch));
    drop(a); // flushes
    drop((b, cache));
    pool.check_leaks().unwrap();

    let expected: Vec<Vec<u8>> = (0..6).chain(100..103).map(frame).collect();
    let mut reader = PcapReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(reader.header().datalink, DataLink::ETHERNET);
    let mut got = Vec::new();
    let mut last_ts = std::time::Duration::ZERO;
    while let Some(packet) = reader.next_packet() {
        let packet = packet.unwrap();
        assert_eq!(packet.orig_len as usize, packet.data.len());
        assert!(packet.timestamp >= last_ts && !packet.timestamp.is_zero());
        last_ts = packet.timestamp;
        got.push(packet.data.into_owned());
    }
    assert_eq!(got, expected);

    match Command::new("tcpdump").args(["-nn", "-e", "-r"]).arg(&path).output() {
        Ok(out) => {
            assert!(out.status.success(), "tcpdump -r failed: {}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8_lossy(&out.stdout);
            // One summary line per frame (unknown EtherTypes add indented hex-dump lines).
            let summaries = text.lines().filter(|l| !l.starts_with(char::is_whitespace)).count();
            assert_eq!(summaries, expected.len(), "tcpdump printed:\n{text}");
            assert!(text.contains("02:00:00:00:00:02 > 02:00:00:00:00:01"), "{text}");
        }
        Err(e) => println!("tcpdump not run ({e}): install it to cross-check the file"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
