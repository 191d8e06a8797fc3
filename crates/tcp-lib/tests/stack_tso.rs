//! TCP segmentation offload between two stacks on a `Pair` whose buffers hold 64 KiB: the sender
//! hands the device super-segments ([`Config::tso_max_size`]) with partial checksums; a test
//! device in between either cuts them in software ([`gso::segment`], so the receiver verifies
//! real checksums on wire segments) or passes them on whole (the receiver trusts the partial
//! checksum, as from a TAP on the same machine, and takes the 64 KiB segment whole).

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use common::{A_IP, B_IP, Rng, TICK, config};
use netchannel::dev::{DevError, DeviceInfo, DeviceStats, Link, NetDevice, PacketBatch, Pair};
use netchannel::pool::{HugePages, Offload, Pool, PoolCache};
use tcp_lib::stack::{Config, Error, PreparedSegments, Stack, StreamId};
use tcp_lib::tcp::State;
use tcp_lib::wire::{EtherType, EthernetFrame, Ipv4Packet, Ipv6Cidr, Ipv6Packet, TcpPacket, gso};

const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 2);
const DATA_ROOM: usize = 65_536 + 256;

/// What the test device does with a frame that carries offload metadata.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Cut super-segments and finish partial checksums in software.
    Segment,
    /// Pass the frame on as it is, metadata and all (the peer trusts its checksum).
    Pass,
    /// Pass the frame on without its metadata (the peer verifies a checksum never finished).
    Strip,
}

/// One TCP segment as it went on the wire: sequence number, payload length, and whether it was
/// cut from a super-segment.
#[derive(Clone, Copy, Debug)]
struct Seen {
    seq: u32,
    len: usize,
    from_super: bool,
}

/// A's device: a `Pair` end behind a software segmenter.
struct Tso {
    inner: Pair,
    mode: Mode,
    /// Drop the cut with this index of the super-segment with this index (counted from 0).
    drop: Option<(usize, usize)>,
    dropped: Option<Seen>,
    supers: usize,
    partial_only: usize,
    plain: usize,
    plain_data: usize,
    largest_super: usize,
    wire: Vec<Seen>,
}

impl Tso {
    fn new(inner: Pair, mode: Mode) -> Self {
        Self {
            inner,
            mode,
            drop: None,
            dropped: None,
            supers: 0,
            partial_only: 0,
            plain: 0,
            plain_data: 0,
            largest_super: 0,
            wire: Vec::new(),
        }
    }
}

/// The sequence number and payload length of an Ethernet/IP/TCP frame carrying payload.
fn tcp_data(frame: &[u8]) -> Option<(u32, usize)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let tcp = match eth.ethertype() {
        EtherType::Ipv4 => Ipv4Packet::new_checked(eth.payload()).ok()?.payload().to_vec(),
        EtherType::Ipv6 => Ipv6Packet::new_checked(eth.payload()).ok()?.payload().to_vec(),
        _ => return None,
    };
    let tcp = TcpPacket::new_checked(&tcp[..]).ok()?;
    let len = tcp.payload().len();
    (len > 0).then(|| (tcp.seq_number().get(), len))
}

impl NetDevice for Tso {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn link(&self) -> Link {
        self.inner.link()
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }

    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        self.inner.rx_burst(queue, cache, batch)
    }

    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        let taken = batch.len();
        let mut out = PacketBatch::with_capacity(256);
        for mut packet in batch.drain() {
            let offload = packet.offload();
            let gso = offload.segmentation();
            match gso {
                Some(_) => {
                    self.largest_super = self.largest_super.max(packet.len());
                    self.supers += 1;
                }
                None if offload.partial_checksum().is_some() => self.partial_only += 1,
                None => {
                    self.plain += 1;
                    self.plain_data += usize::from(tcp_data(packet.data()).is_some());
                }
            }
            if self.mode != Mode::Segment {
                if self.mode == Mode::Strip {
                    packet.set_offload(Offload::NONE);
                }
                if let Some((seq, len)) = tcp_data(packet.data()) {
                    self.wire.push(Seen { seq, len, from_super: gso.is_some() });
                }
                out.push(packet).expect("room in the batch");
                continue;
            }
            let cache = packet.cache();
            let super_index = self.supers.wrapping_sub(1);
            let mut cut = 0;
            gso::segment(packet.data(), offload, |frame| {
                let this = cut;
                cut += 1;
                let seen = tcp_data(frame).map(|(seq, len)| Seen { seq, len, from_super: gso.is_some() });
                if gso.is_some() && self.drop == Some((super_index, this)) && self.dropped.is_none() {
                    self.dropped = seen;
                    return;
                }
                if let Some(seen) = seen {
                    self.wire.push(seen);
                }
                let mut p = cache.alloc().expect("a free buffer for a cut segment");
                p.extend_from_slice(frame).expect("a cut fits a buffer");
                out.push(p).expect("room in the batch");
            })
            .expect("the stack's super-segments are well-formed");
        }
        self.inner.tx_burst(queue, &mut out)?;
        assert!(out.is_empty(), "the pair took every cut segment");
        Ok(taken)
    }
}

struct Rig {
    a: Stack,
    b: Stack,
    dev_a: Tso,
    dev_b: Pair,
    now: Instant,
}

/// Two stacks on a pair of 64 KiB buffers: A sends super-segments of up to `tso` bytes with
/// partial checksums (`partial`), B verifies checksums; both with 1 MiB buffers.
fn rig(pool: &Pool, v6: bool, mode: Mode, partial: bool, tso: usize) -> Rig {
    let (pa, pb) = Pair::builder(pool).capacity(1024).build().unwrap();
    let now = Instant::now();
    let setup = |c: &mut Config, ip6: Ipv6Addr| {
        c.tcp.send_buffer = 1 << 20;
        c.tcp.recv_buffer = 1 << 20;
        if v6 {
            *c = c.with_ipv6(Ipv6Cidr::new(ip6, 64).unwrap());
        }
    };
    let mut ca = config(&pa, A_IP, 1);
    setup(&mut ca, A6);
    ca.tx_partial_checksum = partial;
    ca.tso_max_size = tso;
    ca.check_offloads(DATA_ROOM).expect("offloads fit the pool");
    let mut cb = config(&pb, B_IP, 2);
    setup(&mut cb, B6);
    Rig { a: Stack::new(ca, now), b: Stack::new(cb, now), dev_a: Tso::new(pa, mode), dev_b: pb, now }
}

fn pool() -> Pool {
    Pool::builder(1024).data_room(DATA_ROOM).hugepages(HugePages::Never).build().unwrap()
}

impl Rig {
    fn step(&mut self, cache: &PoolCache, deliver: &mut impl FnMut(StreamId, &[u8]) -> usize) {
        self.a.poll(self.now, &mut self.dev_a, cache).unwrap();
        self.b.poll_with(self.now, &mut self.dev_b, cache, &mut *deliver).unwrap();
        self.now += TICK;
    }

    fn open(&mut self, cache: &PoolCache, v6: bool) -> (StreamId, StreamId) {
        let l = self.b.listen(80).unwrap();
        let to = if v6 { IpAddr::V6(B6) } else { IpAddr::V4(B_IP) };
        let c = self.a.connect(SocketAddr::new(to, 80)).unwrap();
        let mut s = None;
        for _ in 0..100 {
            s = s.or_else(|| self.b.accept(l));
            if let Some(s) = s
                && self.a.state(c) == Ok(State::Established)
            {
                return (c, s);
            }
            self.step(cache, &mut |_, _| 0);
        }
        panic!("no connection");
    }

    /// Sends `data` from A to B, B reading as it arrives (in place through `poll_with`, the rest
    /// with `recv`); returns what B read and the longest payload offered in place at once.
    fn transfer(&mut self, cache: &PoolCache, v6: bool, data: &[u8]) -> (Vec<u8>, usize) {
        let (c, s) = self.open(cache, v6);
        let mut got = Vec::with_capacity(data.len());
        let mut longest = 0;
        let mut sent = 0;
        let mut buf = vec![0u8; 256 * 1024];
        for _ in 0..20_000 {
            if sent < data.len()
                && let Ok(n) = self.a.send(c, &data[sent..])
            {
                sent += n;
            }
            let mut in_place = |_: StreamId, payload: &[u8]| {
                longest = longest.max(payload.len());
                got.extend_from_slice(payload);
                payload.len()
            };
            self.step(cache, &mut in_place);
            loop {
                match self.b.recv(s, &mut buf) {
                    Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                    Ok(_) | Err(Error::WouldBlock) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            if got.len() == data.len() {
                break;
            }
        }
        (got, longest)
    }

    /// Closes both stacks' devices and checks that every buffer went back to the pool.
    /// Steps (each step after `feed` queued what it can on A) until B got `want` bytes on `s`,
    /// delivered in place or read, or 5000 steps went; returns them.
    fn collect(
        &mut self,
        cache: &PoolCache,
        s: StreamId,
        want: usize,
        mut feed: impl FnMut(&mut Stack),
    ) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 256 * 1024];
        for _ in 0..5_000 {
            feed(&mut self.a);
            self.step(cache, &mut |_, p| {
                got.extend_from_slice(p);
                p.len()
            });
            while let Ok(n) = self.b.recv(s, &mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            if got.len() == want {
                break;
            }
        }
        got
    }

    fn finish(self, cache: PoolCache, pool: &Pool) {
        drop(self);
        drop(cache);
        pool.check_leaks().expect("no buffer leaked");
    }
}

fn mss_of(v6: bool) -> usize {
    // 1500 less the IP header, 20 bytes of TCP header and 12 of timestamps.
    if v6 { 1500 - 40 - 32 } else { 1500 - 20 - 32 }
}

#[test]
fn bulk_transfer_in_super_segments_cut_in_software_is_byte_exact() {
    for v6 in [false, true] {
        let pool = pool();
        let cache = pool.cache();
        let mut rig = rig(&pool, v6, Mode::Segment, true, 65_535);
        let data = Rng(7).bytes(4 << 20);
        let (got, _) = rig.transfer(&cache, v6, &data);
        assert!(got == data, "4 MiB arrive byte-exact (v6: {v6}): {} of {} bytes", got.len(), data.len());
        let (sa, sb) = (*rig.a.stats(), *rig.b.stats());
        let mss = mss_of(v6);
        // Super-segments carried most of the data, each a whole number of segments.
        assert!(sa.tx_super_segments > 0 && u64::try_from(rig.dev_a.supers).unwrap() == sa.tx_super_segments);
        let from_super: usize = rig.dev_a.wire.iter().filter(|s| s.from_super).map(|s| s.len).sum();
        assert!(from_super > data.len() / 2, "{from_super} bytes came in super-segments (v6: {v6})");
        assert!(rig.dev_a.largest_super > 30 * mss, "super-segments up to {} bytes", rig.dev_a.largest_super);
        assert!(rig.dev_a.largest_super <= 14 + 65_535);
        assert!(rig.dev_a.wire.iter().all(|s| s.len <= mss), "no wire segment above the MSS");
        // Data and ACKs left A with partial checksums only (never summed in software).
        assert_eq!(rig.dev_a.plain_data, 0, "no data segment summed in software");
        // B verified every checksum (no trust asked), and none failed.
        assert_eq!((sb.rx_checksum_trusted, sb.rx_malformed), (0, 0));
        rig.finish(cache, &pool);
    }
}

#[test]
fn a_lost_cut_segment_is_repaired_by_one_segment() {
    for (v6, rack) in [(false, false), (true, false), (false, true), (true, true)] {
        let pool = pool();
        let cache = pool.cache();
        let mut rig = rig(&pool, v6, Mode::Segment, true, 65_535);
        if rack {
            // RACK (RFC 8985) logs each cut as a transmission of its own.
            let mut c = *rig.a.config();
            c.tcp.rack = true;
            rig.a = Stack::new(c, rig.now);
        }
        // The third cut of the 20th super-segment is lost.
        rig.dev_a.drop = Some((20, 2));
        let data = Rng(9).bytes(4 << 20);
        let (got, _) = rig.transfer(&cache, v6, &data);
        assert!(got == data, "byte-exact after the loss (v6: {v6}, RACK: {rack})");
        let lost = rig.dev_a.dropped.expect("a cut segment was dropped");
        let mss = mss_of(v6);
        assert_eq!(lost.len, mss, "a whole cut segment was lost");
        // Everything sent again (below the highest sequence number sent before it).
        let mut high = 0u32;
        let mut resent = Vec::new();
        for s in &rig.dev_a.wire {
            let end = s.seq.wrapping_add(u32::try_from(s.len).unwrap());
            if high != 0 && i32::from_ne_bytes(end.wrapping_sub(high).to_ne_bytes()) <= 0 {
                resent.push(*s);
            } else {
                high = end;
            }
        }
        assert!(
            resent.iter().any(|s| s.seq == lost.seq && s.len == lost.len),
            "the lost segment was resent alone: {resent:?} (lost {lost:?})"
        );
        assert!(resent.iter().all(|s| s.len <= mss && !s.from_super), "resent MSS-sized: {resent:?}");
        let resent_bytes: usize = resent.iter().map(|s| s.len).sum();
        assert!(resent_bytes <= 2 * mss, "only the hole resent, not the super-segment: {resent_bytes} bytes");
        rig.finish(cache, &pool);
    }
}

#[test]
fn a_receiver_takes_trusted_super_segments_whole() {
    for v6 in [false, true] {
        let pool = pool();
        let cache = pool.cache();
        let mut rig = rig(&pool, v6, Mode::Pass, true, 65_535);
        let data = Rng(11).bytes(4 << 20);
        let (got, longest) = rig.transfer(&cache, v6, &data);
        assert!(got == data, "byte-exact (v6: {v6})");
        let sb = *rig.b.stats();
        assert!(sb.rx_checksum_trusted > 0, "B skipped the checksums of frames with partial ones");
        assert_eq!(sb.rx_malformed, 0);
        assert!(longest > 30 * mss_of(v6), "a super-segment offered whole in place: {longest} bytes");
        rig.finish(cache, &pool);
    }
}

#[test]
fn a_receiver_that_verifies_drops_partial_checksums_without_their_metadata() {
    let pool = pool();
    let cache = pool.cache();
    let mut rig = rig(&pool, false, Mode::Strip, true, 0);
    let (c, _) = {
        // The handshake's SYN is summed in full; everything after carries a partial checksum.
        let l = rig.b.listen(80).unwrap();
        let c = rig.a.connect(SocketAddr::new(IpAddr::V4(B_IP), 80)).unwrap();
        for _ in 0..10 {
            rig.step(&cache, &mut |_, _| 0);
        }
        (c, l)
    };
    assert_eq!(rig.a.state(c), Ok(State::Established));
    rig.a.send(c, &[1; 5000]).unwrap();
    for _ in 0..10 {
        rig.step(&cache, &mut |_, _| 0);
    }
    let sb = *rig.b.stats();
    assert!(sb.rx_malformed > 0, "a partial checksum fails verification without its metadata");
    assert_eq!(sb.rx_checksum_trusted, 0);
    assert!(rig.dev_a.partial_only > 0 && rig.dev_a.supers == 0, "partial checksums, no super-segments");
    rig.finish(cache, &pool);
}

#[test]
fn partial_checksums_without_segmentation_send_ordinary_segments() {
    let pool = pool();
    let cache = pool.cache();
    let mut rig = rig(&pool, false, Mode::Segment, true, 0);
    let data = Rng(3).bytes(1 << 20);
    let (got, _) = rig.transfer(&cache, false, &data);
    assert!(got == data);
    assert_eq!((rig.dev_a.supers, rig.a.stats().tx_super_segments), (0, 0));
    assert!(rig.dev_a.partial_only > 600, "data went with partial checksums: {}", rig.dev_a.partial_only);
    assert!(rig.dev_a.wire.iter().all(|s| s.len <= mss_of(false)));
    rig.finish(cache, &pool);
}

#[test]
fn without_offloads_nothing_changes() {
    let pool = pool();
    let cache = pool.cache();
    let mut rig = rig(&pool, false, Mode::Segment, false, 0);
    let data = Rng(5).bytes(1 << 20);
    let (got, _) = rig.transfer(&cache, false, &data);
    assert!(got == data);
    assert_eq!((rig.dev_a.supers, rig.dev_a.partial_only), (0, 0), "no offload metadata at all");
    rig.finish(cache, &pool);
}

#[test]
fn offload_settings_are_checked_and_clamped() {
    let pool = pool();
    let (pa, _pb) = Pair::builder(&pool).build().unwrap();
    let mut c = config(&pa, Ipv4Addr::new(10, 0, 0, 9), 1);
    assert!(c.check_offloads(2048).is_ok(), "off by default");
    c.tso_max_size = 65_535;
    let e = c.check_offloads(DATA_ROOM).unwrap_err().to_string();
    assert!(e.contains("tx_partial_checksum"), "{e}");
    c.tx_partial_checksum = true;
    assert!(c.check_offloads(DATA_ROOM).is_ok());
    let e = c.check_offloads(9000).unwrap_err().to_string();
    assert!(e.contains("data_room"), "{e}");
    c.tso_max_size = 100_000;
    let e = c.check_offloads(1 << 20).unwrap_err().to_string();
    assert!(e.contains("65535"), "{e}");
}

/// The TCP data frames A sends on its next poll, taken off the wire before B sees them: payload
/// length, PSH, and the segment size of a super-segment.
fn data_frames(rig: &mut Rig, cache: &PoolCache) -> Vec<(usize, bool, Option<u16>)> {
    rig.a.poll(rig.now, &mut rig.dev_a, cache).unwrap();
    let mut batch = PacketBatch::with_capacity(64);
    rig.dev_b.rx_burst(0, cache, &mut batch).unwrap();
    let mut frames = Vec::new();
    for packet in batch.drain() {
        let Some((_, len)) = tcp_data(packet.data()) else { continue };
        let tcp = &packet.data()[14 + 20..];
        let psh = TcpPacket::new_checked(tcp).is_ok_and(|t| t.psh());
        frames.push((len, psh, packet.offload().segmentation().map(|(_, mss, _)| mss)));
    }
    frames
}

#[test]
fn a_short_tail_goes_along_only_where_nagle_lets_it() {
    let pool = pool();
    let cache = pool.cache();
    let mut rig = rig(&pool, false, Mode::Pass, true, 65_535);
    let (c, _) = rig.open(&cache, false);
    let mss = mss_of(false);
    let seg = u16::try_from(mss).unwrap();
    // Past the initial window (RFC 3390: 4380 bytes here), all acknowledged.
    rig.a.send(c, &[0; 64 * 1024]).unwrap();
    for _ in 0..300 {
        rig.step(&cache, &mut |_, p| p.len());
    }
    assert!(rig.a.connection_stats(c).unwrap().cwnd > 8 * mss);
    // Nothing in flight: three segments and the short rest in one super-segment, PSH at its end.
    rig.a.send(c, &vec![1; 3 * mss + 100]).unwrap();
    assert_eq!(data_frames(&mut rig, &cache), [(3 * mss + 100, true, Some(seg))]);
    // With that unacknowledged, Nagle holds the short rest of the next write back.
    rig.a.send(c, &vec![2; 3 * mss + 100]).unwrap();
    let frames = data_frames(&mut rig, &cache);
    assert_eq!(frames.iter().map(|f| (f.0, f.2)).collect::<Vec<_>>(), [(3 * mss, Some(seg))]);
    // A single segment's worth is an ordinary segment.
    rig.a.set_nodelay(c, true).unwrap();
    rig.a.send(c, &vec![3; 500]).unwrap();
    assert_eq!(data_frames(&mut rig, &cache), [(600, true, None)]);
    rig.finish(cache, &pool);
}

#[test]
fn a_connection_adopted_by_a_stack_without_tso_sends_ordinary_segments() {
    let pool = pool();
    let cache = pool.cache();
    let mut rig = rig(&pool, false, Mode::Segment, true, 65_535);
    let (c, s) = rig.open(&cache, false);
    rig.a.send(c, &[5; 256 * 1024]).unwrap();
    let mut got = 0;
    for _ in 0..20 {
        rig.step(&cache, &mut |_, p| {
            got += p.len();
            p.len()
        });
    }
    assert!(rig.dev_a.supers > 0, "super-segments before the move");
    // The same address on a stack without offloads takes the connection over.
    let detached = rig.a.detach(c).unwrap();
    let mut plain = *rig.a.config();
    plain.tx_partial_checksum = false;
    plain.tso_max_size = 0;
    plain.gratuitous_arp = false;
    rig.a = Stack::new(plain, rig.now);
    rig.a.learn_neighbor(B_IP, rig.b.config().mac);
    let c = rig.a.adopt(detached, rig.now).unwrap();
    let (supers, partial) = (rig.dev_a.supers, rig.dev_a.partial_only);
    let data = Rng(13).bytes(1 << 20);
    let mut sent = 0;
    for _ in 0..5_000 {
        if sent < data.len()
            && let Ok(n) = rig.a.send(c, &data[sent..])
        {
            sent += n;
        }
        rig.step(&cache, &mut |_, p| {
            got += p.len();
            p.len()
        });
        if got == 256 * 1024 + data.len() {
            break;
        }
    }
    assert_eq!(got, 256 * 1024 + data.len(), "everything arrived");
    assert_eq!(
        (rig.dev_a.supers, rig.dev_a.partial_only),
        (supers, partial),
        "no offload asked after the move"
    );
    assert!(rig.dev_a.wire.iter().all(|w| w.len <= mss_of(false)));
    let _ = s;
    rig.finish(cache, &pool);
}

#[test]
fn prepared_content_goes_in_super_segments_too() {
    for v6 in [false, true] {
        let pool = pool();
        let cache = pool.cache();
        let mut rig = rig(&pool, v6, Mode::Segment, true, 65_535);
        let (c, s) = rig.open(&cache, v6);
        // A header from the ring, then a 1 MiB body by reference (as httpd sends a file).
        let head = Rng(17).bytes(300);
        let body = Rng(19).bytes(1 << 20);
        let prepared = Arc::new(PreparedSegments::new(body.clone(), &[mss_of(v6)]));
        rig.a.send(c, &head).unwrap();
        rig.a.send_prepared(c, &prepared).unwrap();
        let got = rig.collect(&cache, s, head.len() + body.len(), |_| {});
        assert!(got[..head.len()] == head[..] && got[head.len()..] == body[..], "byte-exact (v6: {v6})");
        let sa = *rig.a.stats();
        assert!(sa.tx_prepared > 0 && sa.tx_super_segments > 0, "{sa:?}");
        assert!(rig.dev_a.largest_super > 30 * mss_of(v6), "prepared content in 64 KiB super-segments");
        assert_eq!(rig.b.stats().rx_malformed, 0, "every cut's checksum verified");
        rig.finish(cache, &pool);
    }
}

/// Application data in pool buffers of several segments each (`Stack::send_pooled`) with TSO on:
/// a buffer goes out by reference as one super-segment (its headers in the headroom, the offload
/// metadata on the frame), which the device cuts; buffers of one segment go by reference as
/// plain frames; a large buffer the windows cut is copied in parts. Byte-exact, every cut's
/// checksum verified, no leak.
#[test]
fn pooled_buffers_go_by_reference_in_super_segments() {
    for v6 in [false, true] {
        let pool = pool();
        let cache = pool.cache();
        let mut rig = rig(&pool, v6, Mode::Segment, true, 65_535);
        let (c, s) = rig.open(&cache, v6);
        let mss = mss_of(v6);
        let body = Rng(23).bytes(1 << 20);
        // Eight segments a buffer, then one segment a buffer, then a short last one.
        let mut sizes = Vec::new();
        let mut left = body.len();
        while left > 0 {
            let n = left.min(if sizes.len() < 40 { 8 * mss } else { mss });
            sizes.push(n);
            left -= n;
        }
        let (mut queued, mut next) = (0, 0);
        let got = rig.collect(&cache, s, body.len(), |a| {
            while let Some(&n) = sizes.get(next) {
                let mut p = cache.alloc().expect("a free buffer");
                p.extend_from_slice(&body[queued..queued + n]).unwrap();
                match a.send_pooled(c, p.into_shared().unwrap()) {
                    Ok(()) => (queued, next) = (queued + n, next + 1),
                    Err((Error::WouldBlock, _)) => break,
                    Err((e, _)) => panic!("{e}"),
                }
            }
        });
        assert!(got == body, "byte-exact (v6: {v6}): {} of {}", got.len(), body.len());
        let sa = *rig.a.stats();
        // A large buffer that the congestion window (slow start) or the peer's window cuts is
        // copied in parts: counted as split.
        assert!(sa.tx_pool_by_reference + sa.tx_pool_split >= sizes.len() as u64, "{sa:?}");
        assert!(sa.tx_pool_by_reference > 5 * sa.tx_pool_split, "{sa:?}");
        assert_eq!(sa.tx_pool_busy, 0, "{sa:?}");
        assert!(sa.tx_super_segments >= 40, "the large buffers went as super-segments: {sa:?}");
        assert!(rig.dev_a.largest_super > 8 * mss, "a whole buffer in one super-segment");
        assert!(rig.dev_a.wire.iter().all(|w| w.len <= mss));
        assert_eq!(rig.b.stats().rx_malformed, 0, "every cut's checksum verified");
        rig.finish(cache, &pool);
    }
}
