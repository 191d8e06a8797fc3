//! Two connections joined by an in-memory link with virtual time and seeded faults.
//!
//! Every segment crossing the link is emitted with [`TcpRepr::emit`] (checksum filled for the
//! IPv4 pseudo-header) and parsed back with [`TcpRepr::parse`] verifying the checksum, so the wire
//! format is exercised and corrupted segments are dropped as a stack would drop them.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::{LOCAL, REMOTE};
use crate::tcp::buffer::RETAINED_STORAGE;
use crate::tcp::{Config, CongestionAlgorithm, Connection, State};
use crate::wire::{ChecksumPolicy, SeqNumber, TcpPacket, TcpRepr};

/// SplitMix64: a small seeded generator, so that every fault pattern replays from its seed.
#[derive(Debug, Clone)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `per_mille / 1000`.
    pub(super) fn chance(&mut self, per_mille: u32) -> bool {
        self.next_u64() % 1000 < u64::from(per_mille)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// What the link does to each segment, in per-mille probabilities.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Faults {
    pub(super) drop: u32,
    pub(super) duplicate: u32,
    /// Delayed by an extra random amount up to `reorder_spread`, so later segments overtake.
    pub(super) reorder: u32,
    /// One byte flipped: the checksum must catch it.
    pub(super) corrupt: u32,
    pub(super) delay: Duration,
    pub(super) reorder_spread: Duration,
}

impl Faults {
    pub(super) fn clean() -> Self {
        Self { delay: Duration::from_millis(5), ..Self::default() }
    }

    pub(super) fn lossy() -> Self {
        Self {
            drop: 30,
            duplicate: 10,
            reorder: 20,
            corrupt: 5,
            delay: Duration::from_millis(5),
            reorder_spread: Duration::from_millis(8),
        }
    }
}

#[derive(Debug)]
struct InFlight {
    at: Instant,
    order: u64,
    bytes: Vec<u8>,
}

/// One direction of the link.
#[derive(Debug)]
struct Link {
    src: SocketAddrV4,
    dst: SocketAddrV4,
    queue: Vec<InFlight>,
    faults: Faults,
    rng: Rng,
    order: u64,
    sent: u64,
    dropped: u64,
}

impl Link {
    fn new(src: SocketAddrV4, dst: SocketAddrV4, faults: Faults, seed: u64) -> Self {
        Self { src, dst, queue: Vec::new(), faults, rng: Rng::new(seed), order: 0, sent: 0, dropped: 0 }
    }

    /// `repr` as it goes on the wire, checksum filled.
    fn emit(&self, repr: &TcpRepr<'_>) -> Vec<u8> {
        let mut bytes = vec![0u8; repr.buffer_len()];
        repr.emit(&mut TcpPacket::new_unchecked(&mut bytes[..]), *self.src.ip(), *self.dst.ip());
        bytes
    }

    /// Sends the segment `bytes` (as [`emit`](Self::emit) wrote it) through the faults.
    fn push(&mut self, now: Instant, bytes: Vec<u8>) {
        self.sent += 1;
        let f = self.faults;
        if self.rng.chance(f.drop) {
            self.dropped += 1;
            return;
        }
        let copies = if self.rng.chance(f.duplicate) { 2 } else { 1 };
        for _ in 0..copies {
            let mut bytes = bytes.clone();
            if self.rng.chance(f.corrupt) {
                let i = usize::try_from(self.rng.below(bytes.len() as u64)).unwrap_or(0);
                bytes[i] ^= 1 << self.rng.below(8);
            }
            let mut at = now + f.delay;
            if self.rng.chance(f.reorder) && !f.reorder_spread.is_zero() {
                let spread = u64::try_from(f.reorder_spread.as_micros()).unwrap_or(u64::MAX);
                at += Duration::from_micros(self.rng.below(spread));
            }
            self.order += 1;
            self.queue.push(InFlight { at, order: self.order, bytes });
        }
    }

    fn next_at(&self) -> Option<Instant> {
        self.queue.iter().map(|p| p.at).min()
    }

    /// The segments due at `now`, in arrival order.
    fn due(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let mut due: Vec<InFlight> = Vec::new();
        let mut i = 0;
        while i < self.queue.len() {
            if self.queue[i].at <= now {
                due.push(self.queue.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|p| (p.at, p.order));
        due.into_iter().map(|p| p.bytes).collect()
    }
}

/// Two connections, `a` at [`LOCAL`] and `b` at [`REMOTE`], in virtual time.
#[derive(Debug)]
pub(super) struct Pair {
    pub(super) a: Connection,
    pub(super) b: Connection,
    pub(super) base: Instant,
    pub(super) now: Instant,
    ab: Link,
    ba: Link,
    /// Segments that failed to parse (corrupted on the link).
    pub(super) rejected: u64,
    steps: u64,
    /// When a transfer completed (before TIME-WAIT ran out).
    pub(super) done_at: Duration,
    /// With it, segments are delivered through `handle_segment_with`, the sink consuming a
    /// random prefix of what it is offered into `placed_*`.
    pub(super) in_place: Option<Rng>,
    /// Bytes `a` consumed in place (b -> a).
    pub(super) placed_a: Vec<u8>,
    /// Bytes `b` consumed in place (a -> b).
    pub(super) placed_b: Vec<u8>,
    /// Bytes consumed in place by both, in all.
    pub(super) placed_total: usize,
    /// The in-place sink always consumes everything.
    pub(super) take_all: bool,
    /// When set, what both ends did, step by step.
    pub(super) trace: Option<Trace>,
}

/// What both ends of a [`Pair`] did ([`Pair::trace`]).
#[derive(Debug, Default)]
pub(super) struct Trace {
    /// Every segment either end sent, as it left: virtual time, whether `a` sent it, and its
    /// bytes (before the link's faults).
    pub(super) segments: Vec<(Duration, bool, Vec<u8>)>,
    /// Both connections' [`digest`](Connection::digest)s after each step.
    pub(super) states: Vec<String>,
}

fn deliver(
    conn: &mut Connection,
    now: Instant,
    link: &Link,
    bytes: &[u8],
    in_place: Option<(&mut Rng, &mut Vec<u8>, &mut usize)>,
    take_all: bool,
) -> bool {
    let Ok(packet) = TcpPacket::new_checked(bytes) else { return false };
    match TcpRepr::parse(&packet, *link.src.ip(), *link.dst.ip(), ChecksumPolicy::Verify) {
        Ok(repr) => {
            match in_place {
                Some((rng, placed, total)) => conn.handle_segment_with(now, &repr, |data| {
                    assert!(!data.is_empty(), "offered an empty payload");
                    // All, nothing, or a random prefix; claiming more than offered is clamped.
                    let n = match rng.below(4) {
                        _ if take_all => data.len(),
                        0 => data.len() + 10,
                        1 => 0,
                        _ => usize::try_from(rng.below(data.len() as u64 + 1)).unwrap_or(0),
                    };
                    placed.extend_from_slice(&data[..n.min(data.len())]);
                    *total += n.min(data.len());
                    n
                }),
                None => conn.handle_segment(now, &repr),
            }
            true
        }
        Err(_) => false,
    }
}

impl Pair {
    /// `a` connects to `b`, which a listener accepts when the SYN arrives.
    pub(super) fn connect(config_a: Config, config_b: Config, faults: Faults, seed: u64) -> Self {
        Self::connect_at(Instant::now(), config_a, config_b, faults, seed)
    }

    /// [`connect`](Self::connect) at `base`.
    pub(super) fn connect_at(
        base: Instant,
        config_a: Config,
        config_b: Config,
        faults: Faults,
        seed: u64,
    ) -> Self {
        let a = Connection::connect(config_a, LOCAL, REMOTE, SeqNumber::new(0xffff_f000), base);
        let mut ab = Link::new(LOCAL, REMOTE, faults, seed);
        let ba = Link::new(REMOTE, LOCAL, faults, seed ^ 0x5555_5555);
        // Stand in for the listener: hand-deliver the first SYN (the link may drop later ones;
        // the SYN retry path is covered by the scripted tests).
        let mut a = a;
        let mut buf = vec![0u8; 2048];
        let t = a.poll_transmit(base, &mut buf).expect("SYN");
        let syn = t.segment(&buf);
        let b = Connection::accept(config_b, REMOTE, LOCAL, &syn, SeqNumber::new(0x7fff_fff0), base)
            .expect("accept");
        ab.sent += 1;
        Self {
            a,
            b,
            base,
            now: base,
            ab,
            ba,
            rejected: 0,
            steps: 0,
            done_at: Duration::ZERO,
            in_place: None,
            placed_a: Vec::new(),
            placed_b: Vec::new(),
            placed_total: 0,
            take_all: false,
            trace: None,
        }
    }

    /// Virtual time elapsed.
    pub(super) fn elapsed(&self) -> Duration {
        self.now - self.base
    }

    /// Drains both connections' transmits onto the link.
    fn transmit(&mut self) {
        let mut buf = vec![0u8; 65536];
        let (now, at) = (self.now, self.elapsed());
        for (from_a, conn, link) in [(true, &mut self.a, &mut self.ab), (false, &mut self.b, &mut self.ba)] {
            while let Some(t) = conn.poll_transmit(now, &mut buf) {
                let bytes = link.emit(&t.segment(&buf));
                if let Some(trace) = &mut self.trace {
                    trace.segments.push((at, from_a, bytes.clone()));
                }
                link.push(now, bytes);
            }
        }
    }

    /// Delivers in place from now on ([`in_place`](Self::in_place)), the sink's choices seeded
    /// from `seed`.
    pub(super) fn deliver_in_place(&mut self, seed: u64) {
        self.in_place = Some(Rng::new(seed ^ 0x1234_5678));
    }

    /// Transmits, then advances to the next event (a delivery or a timer) and runs it. Returns
    /// false when nothing is left to happen.
    fn step(&mut self) -> bool {
        self.steps += 1;
        assert!(self.steps < 5_000_000, "the pair does not converge");
        self.transmit();
        let next = [self.ab.next_at(), self.ba.next_at(), self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else { return false };
        self.now = self.now.max(next);
        for bytes in self.ab.due(self.now) {
            let sink = self.in_place.as_mut().map(|rng| (rng, &mut self.placed_b, &mut self.placed_total));
            if !deliver(&mut self.b, self.now, &self.ab, &bytes, sink, self.take_all) {
                self.rejected += 1;
            }
        }
        for bytes in self.ba.due(self.now) {
            let sink = self.in_place.as_mut().map(|rng| (rng, &mut self.placed_a, &mut self.placed_total));
            if !deliver(&mut self.a, self.now, &self.ba, &bytes, sink, self.take_all) {
                self.rejected += 1;
            }
        }
        if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
            self.a.handle_timeout(self.now);
        }
        if self.b.poll_timeout().is_some_and(|t| t <= self.now) {
            self.b.handle_timeout(self.now);
        }
        if let Some(trace) = &mut self.trace {
            trace.states.push(format!("a {}\nb {}", self.a.digest(), self.b.digest()));
        }
        true
    }

    /// Runs until `done` (called before every step; it may also act as the application) holds,
    /// or until `deadline` of virtual time passes or nothing is left to happen. Returns whether
    /// `done` held.
    pub(super) fn run_until(&mut self, mut done: impl FnMut(&mut Self) -> bool, deadline: Duration) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.elapsed() > deadline || !self.step() {
                return done(self);
            }
        }
    }
}

/// Application behaviour on both ends: `a` writes `ab` then closes; `b` writes `ba`, reads
/// everything and closes after `a`'s FIN.
#[derive(Debug)]
pub(super) struct Transfer {
    ab: Vec<u8>,
    ba: Vec<u8>,
    written_ab: usize,
    written_ba: usize,
    pub(super) got_ab: Vec<u8>,
    pub(super) got_ba: Vec<u8>,
    /// Write sizes, cycled.
    chunks: Vec<usize>,
    chunk_i: usize,
    /// Read buffer size.
    read: usize,
}

/// Deterministic data that shows misplaced bytes.
pub(super) fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| u8::try_from((i * 7 + i / 251) % 251).unwrap_or(0) ^ salt).collect()
}

impl Transfer {
    pub(super) fn new(ab: usize, ba: usize, chunks: Vec<usize>, read: usize) -> Self {
        Self {
            ab: pattern(ab, 0x5a),
            ba: pattern(ba, 0xa5),
            written_ab: 0,
            written_ba: 0,
            got_ab: Vec::new(),
            got_ba: Vec::new(),
            chunks: if chunks.is_empty() { vec![4096] } else { chunks },
            chunk_i: 0,
            read: read.max(1),
        }
    }

    fn next_chunk(&mut self) -> usize {
        self.chunk_i = (self.chunk_i + 1) % self.chunks.len();
        self.chunks[self.chunk_i].max(1)
    }

    /// One round of application calls; true when both sides are done.
    pub(super) fn act(&mut self, p: &mut Pair) -> bool {
        let mut buf = vec![0u8; self.read];
        // a writes, then half-closes.
        while self.written_ab < self.ab.len() {
            let end = (self.written_ab + self.next_chunk()).min(self.ab.len());
            let n = p.a.send(&self.ab[self.written_ab..end]);
            if n == 0 {
                break;
            }
            self.written_ab += n;
        }
        if self.written_ab == self.ab.len() && p.a.is_writable() {
            p.a.shutdown_write();
        }
        while self.written_ba < self.ba.len() {
            let end = (self.written_ba + self.next_chunk()).min(self.ba.len());
            let n = p.b.send(&self.ba[self.written_ba..end]);
            if n == 0 {
                break;
            }
            self.written_ba += n;
        }
        // Bytes consumed in place come before what is buffered now: they were offered only while
        // the receive buffer was empty, and nothing is offered while it holds bytes.
        self.got_ab.append(&mut p.placed_b);
        loop {
            let n = p.b.recv(&mut buf);
            if n == 0 {
                break;
            }
            self.got_ab.extend_from_slice(&buf[..n]);
        }
        self.got_ba.append(&mut p.placed_a);
        loop {
            let n = p.a.recv(&mut buf);
            if n == 0 {
                break;
            }
            self.got_ba.extend_from_slice(&buf[..n]);
        }
        if p.b.recv_finished() && self.written_ba == self.ba.len() && p.b.state() == State::CloseWait {
            p.b.shutdown_write();
        }
        p.b.state() == State::Closed
            && matches!(p.a.state(), State::TimeWait | State::Closed)
            && p.a.recv_finished()
    }

    pub(super) fn check(&self) {
        assert_eq!(self.got_ab.len(), self.ab.len(), "a -> b length");
        assert!(self.got_ab == self.ab, "a -> b bytes differ");
        assert_eq!(self.got_ba.len(), self.ba.len(), "b -> a length");
        assert!(self.got_ba == self.ba, "b -> a bytes differ");
    }
}

pub(super) fn pair_config() -> Config {
    Config {
        send_buffer: 128 * 1024,
        recv_buffer: 128 * 1024,
        min_rto: Duration::from_millis(200),
        initial_rto: Duration::from_millis(500),
        max_retransmits: 30,
        ..Config::default()
    }
}

/// Runs a transfer; returns the pair after both ends closed.
pub(super) fn run_transfer(
    config_a: Config,
    config_b: Config,
    faults: Faults,
    seed: u64,
    t: &mut Transfer,
    deadline: Duration,
) -> Pair {
    run_transfer_with(config_a, config_b, faults, seed, false, t, deadline)
}

/// [`run_transfer`], both ends consuming random prefixes of in-order data in place when
/// `in_place`.
pub(super) fn run_transfer_with(
    config_a: Config,
    config_b: Config,
    faults: Faults,
    seed: u64,
    in_place: bool,
    t: &mut Transfer,
    deadline: Duration,
) -> Pair {
    let mut p = Pair::connect(config_a, config_b, faults, seed);
    if in_place {
        p.deliver_in_place(seed);
    }
    run_pair(p, config_a.msl, t, deadline)
}

/// Runs `t`'s transfer over `p` until both ends closed, checks what arrived, and waits for `a`
/// to leave TIME-WAIT (after 2 `msl`).
pub(super) fn run_pair(mut p: Pair, msl: Duration, t: &mut Transfer, deadline: Duration) -> Pair {
    let done = p.run_until(|p| t.act(p), deadline);
    assert!(
        done,
        "not done after {:?}: a {:?} {:?}, b {:?} {:?}; {} of {} bytes a -> b, {} of {} b -> a",
        p.elapsed(),
        p.a.state(),
        p.a.error(),
        p.b.state(),
        p.b.error(),
        t.got_ab.len(),
        t.ab.len(),
        t.got_ba.len(),
        t.ba.len()
    );
    t.check();
    assert_eq!((p.a.error(), p.b.error()), (None, None));
    p.done_at = p.elapsed();
    // a leaves TIME-WAIT after 2 MSL.
    assert!(p.run_until(|p| p.a.state() == State::Closed, p.elapsed() + 2 * msl + Duration::from_secs(1)));
    assert_eq!(p.a.poll_timeout(), None);
    assert_eq!(p.b.poll_timeout(), None);
    p
}

#[test]
fn clean_transfer_both_ways() {
    let mut t = Transfer::new(300_000, 100_000, vec![1000, 5000, 17], 3000);
    let p = run_transfer(pair_config(), pair_config(), Faults::clean(), 1, &mut t, Duration::from_secs(30));
    let (sa, sb) = (p.a.stats(), p.b.stats());
    assert_eq!((sa.retransmits, sb.retransmits), (0, 0), "no loss, no retransmission");
    assert_eq!((sa.bytes_out, sb.bytes_in), (300_000, 300_000));
    assert!(p.a.window_scale().is_some() && p.a.timestamps() && p.a.sack_permitted());
    let srtt = sa.srtt.expect("sampled");
    assert!(srtt >= Duration::from_millis(5) && srtt < Duration::from_millis(60), "{srtt:?}");
    assert!(p.done_at < Duration::from_secs(5), "{:?}", p.done_at);
}

#[test]
fn simultaneous_close_over_the_link() {
    let mut p = Pair::connect(pair_config(), pair_config(), Faults::clean(), 2);
    assert!(p.run_until(|p| p.a.is_established() && p.b.is_established(), Duration::from_secs(5)));
    p.a.shutdown_write();
    p.b.shutdown_write();
    assert!(p.run_until(
        |p| p.a.state() == State::TimeWait && p.b.state() == State::TimeWait,
        Duration::from_secs(5)
    ));
    assert!(p.run_until(|p| p.a.is_closed() && p.b.is_closed(), Duration::from_secs(70)));
    assert_eq!((p.a.error(), p.b.error()), (None, None));
}

#[test]
fn time_wait_releases_the_buffers() {
    let mut p = Pair::connect(pair_config(), pair_config(), Faults::clean(), 5);
    assert!(p.run_until(|p| p.a.is_established() && p.b.is_established(), Duration::from_secs(5)));
    assert_eq!(p.a.buffers_allocated(), (0, 0), "nothing allocated before data moves");
    assert_eq!(p.a.send(&[1; 5000]), 5000);
    assert_eq!(p.b.send(&[2; 3000]), 3000);
    assert!(p.a.buffers_allocated().0 >= 5000);
    assert!(p.a.buffers_allocated().0 < pair_config().send_buffer, "allocated as written");
    p.a.shutdown_write();
    p.b.shutdown_write();
    assert!(p.run_until(
        |p| p.a.state() == State::TimeWait && p.b.state() == State::TimeWait,
        Duration::from_secs(5)
    ));
    // The send rings are gone; the receive rings keep the unread data until it is read.
    assert_eq!(p.a.buffers_allocated().0, 0);
    assert!(p.a.buffers_allocated().1 >= 3000);
    let mut buf = vec![0; 8000];
    assert_eq!(p.a.recv(&mut buf), 3000);
    assert!(buf[..3000].iter().all(|&b| b == 2));
    // Storage beyond what is kept for the next connection is freed (a small ring's is kept).
    let (send, recv) = p.a.buffers_allocated();
    assert!(send == 0 && recv <= RETAINED_STORAGE, "{send}, {recv}");
    assert_eq!(p.b.recv(&mut buf), 5000);
    assert_eq!(p.b.buffers_allocated().1, 0, "5000 bytes of storage are more than is kept");
    assert!(p.a.recv_finished() && p.b.recv_finished());
    assert!(p.run_until(|p| p.a.is_closed() && p.b.is_closed(), Duration::from_secs(70)));
}

#[test]
fn small_messages_keep_the_rings_at_the_front_of_their_storage() {
    // A long connection of small request/response pairs: each ring drains after every message,
    // so its next one goes to the front of the storage again instead of sweeping the ring's
    // 128 KiB index space (which grows the storage toward it, a new cache line a message).
    let mut p = Pair::connect(pair_config(), pair_config(), Faults::clean(), 7);
    assert!(p.run_until(|p| p.a.is_established() && p.b.is_established(), Duration::from_secs(5)));
    let mut buf = [0u8; 200];
    for round in 0..400u32 {
        let msg = [u8::try_from(round % 251).unwrap_or(0); 100];
        assert_eq!(p.a.send(&msg), 100);
        assert!(p.run_until(|p| p.b.recv_queue() >= 100, Duration::from_secs(5)), "round {round}");
        assert_eq!(p.b.recv(&mut buf), 100);
        assert_eq!(p.b.send(&buf[..100]), 100);
        assert!(p.run_until(|p| p.a.recv_queue() >= 100, Duration::from_secs(5)), "round {round}");
        assert_eq!(p.a.recv(&mut buf), 100);
        assert_eq!(buf[..100], msg, "round {round}");
    }
    // 40,000 bytes went each way; the rings held 100 at a time.
    for (end, conn) in [("a", &p.a), ("b", &p.b)] {
        let (send, recv) = conn.buffers_allocated();
        assert!(send <= 1024 && recv <= 1024, "{end}: send ring {send} bytes, receive ring {recv}");
    }
}

#[test]
fn simultaneous_open_over_the_link() {
    let base = Instant::now();
    let config = pair_config();
    let a = Connection::connect(config, LOCAL, REMOTE, SeqNumber::new(1), base);
    let b = Connection::connect(config, REMOTE, LOCAL, SeqNumber::new(2), base);
    let faults = Faults::clean();
    let mut p = Pair {
        a,
        b,
        base,
        now: base,
        ab: Link::new(LOCAL, REMOTE, faults, 3),
        ba: Link::new(REMOTE, LOCAL, faults, 4),
        rejected: 0,
        steps: 0,
        done_at: Duration::ZERO,
        in_place: None,
        placed_a: Vec::new(),
        placed_b: Vec::new(),
        placed_total: 0,
        take_all: false,
        trace: None,
    };
    assert!(p.run_until(
        |p| p.a.state() == State::Established && p.b.state() == State::Established,
        Duration::from_secs(5)
    ));
    let mut t = Transfer::new(20_000, 20_000, vec![999], 512);
    assert!(p.run_until(|p| t.act(p), Duration::from_secs(30)));
    t.check();
}

#[test]
fn lossy_multi_mebibyte_transfer() {
    let size = 4 << 20;
    for congestion in [CongestionAlgorithm::NewReno, CongestionAlgorithm::Cubic] {
        for sack in [true, false] {
            let config = Config { congestion, sack, ..pair_config() };
            let mut t = Transfer::new(size, 64 * 1024, vec![65536, 1, 3000], 16 * 1024);
            let p = run_transfer(config, config, Faults::lossy(), 42, &mut t, Duration::from_secs(600));
            let s = p.a.stats();
            assert!(s.retransmits > 0 && s.fast_retransmits > 0, "{s:?}");
            assert!(p.rejected > 0, "corrupted segments were rejected by the checksum");
            assert!(p.ab.dropped > 0 && p.ba.dropped > 0);
            assert!(p.done_at < Duration::from_secs(300), "{:?}", p.done_at);
            eprintln!(
                "4 MiB over the lossy link, {congestion:?}, SACK {sack}: {:?} virtual, a: {s:?}",
                p.done_at
            );
        }
    }
}

/// Long transfers over a path with a 200 ms RTT, big buffers and 0.1% loss: CUBIC's window
/// regrows faster after each loss than NewReno's (one segment per RTT), so it finishes sooner.
#[test]
fn cubic_outpaces_newreno_on_a_long_fat_path() {
    let faults = Faults { drop: 1, delay: Duration::from_millis(100), ..Faults::default() };
    let mut times = Vec::new();
    for congestion in [CongestionAlgorithm::NewReno, CongestionAlgorithm::Cubic] {
        let config = Config {
            congestion,
            send_buffer: 8 << 20,
            recv_buffer: 8 << 20,
            min_rto: Duration::from_secs(1),
            ..pair_config()
        };
        let mut total = Duration::ZERO;
        for seed in 0..2 {
            let mut t = Transfer::new(32 << 20, 0, vec![1 << 20], 1 << 20);
            let p = run_transfer(config, config, faults, seed, &mut t, Duration::from_secs(3600));
            let s = p.a.stats();
            assert!(s.fast_retransmits > 0, "{s:?}");
            eprintln!("32 MiB, 200 ms RTT, 0.1% loss, {congestion:?}: {:?}, a: {s:?}", p.done_at);
            total += p.done_at;
        }
        times.push(total);
    }
    assert!(
        times[1] * 20 < times[0] * 19,
        "CUBIC {:?} is not 5% faster than NewReno {:?}",
        times[1],
        times[0]
    );
}

#[test]
fn zero_window_slow_reader() {
    // b reads nothing for a while: a must stop at b's window, probe, and resume.
    let config_b = Config { recv_buffer: 4096, ..pair_config() };
    let mut p = Pair::connect(pair_config(), config_b, Faults::clean(), 5);
    let data = pattern(50_000, 1);
    let mut written = 0;
    assert!(!p.run_until(
        |p| {
            written += p.a.send(&data[written..]);
            false
        },
        Duration::from_secs(20)
    ));
    assert_eq!(p.b.recv_queue(), 4096, "b's buffer is full");
    assert_eq!(p.a.send_window(), 0);
    let mut got = Vec::new();
    let mut buf = [0u8; 700];
    assert!(p.run_until(
        |p| {
            written += p.a.send(&data[written..]);
            let n = p.b.recv(&mut buf);
            got.extend_from_slice(&buf[..n]);
            got.len() == data.len()
        },
        Duration::from_secs(600)
    ));
    assert!(got == data);
}

/// Random faults for the proptests: drop, duplication, reordering and corruption at up to 15%,
/// 10%, 20% and 3%, a one-way delay of 1 to 49 ms, reordered segments spread over twice it.
pub(super) fn any_faults() -> impl Strategy<Value = Faults> {
    (0u32..150, 0u32..100, 0u32..200, 0u32..30, 1u64..50).prop_map(
        |(drop, duplicate, reorder, corrupt, ms)| Faults {
            drop,
            duplicate,
            reorder,
            corrupt,
            delay: Duration::from_millis(ms),
            reorder_spread: Duration::from_millis(2 * ms),
        },
    )
}

/// Random options for the proptests, on [`pair_config`]: 3000-byte or 64 KiB buffers, Nagle,
/// timestamps, window scaling, SACK, CUBIC or NewReno, receive-buffer autotuning up to eight
/// times the buffer, and up to 40 retransmissions.
pub(super) fn any_config() -> impl Strategy<Value = Config> {
    any::<[bool; 7]>().prop_map(|[small_buffers, nodelay, timestamps, window_scaling, sack, cubic, tune]| {
        let buffer = if small_buffers { 3000 } else { 64 * 1024 };
        Config {
            send_buffer: buffer,
            recv_buffer: buffer,
            recv_buffer_max: if tune { 8 * buffer } else { 0 },
            nodelay,
            timestamps,
            window_scaling,
            sack,
            congestion: if cubic { CongestionAlgorithm::Cubic } else { CongestionAlgorithm::NewReno },
            max_retransmits: 40,
            ..pair_config()
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random faults and write sizes: the bytes arrive exactly, in order, within bounded
    /// virtual time, and both ends close cleanly.
    #[test]
    fn random_faults_never_corrupt_or_lose_data(
        seed in any::<u64>(),
        faults in any_faults(),
        ab in 0usize..60_000,
        ba in 0usize..20_000,
        chunks in proptest::collection::vec(1usize..5000, 1..6),
        read in 1usize..5000,
        config in any_config(),
        in_place in any::<bool>(),
    ) {
        let mut t = Transfer::new(ab, ba, chunks, read);
        run_transfer_with(config, config, faults, seed, in_place, &mut t, Duration::from_secs(1200));
    }
}

/// Runs a bidirectional transfer through `drop` per-mille random loss (no other faults) for each
/// seed; returns the retransmission timeouts of both ends, summed, and the virtual time taken.
fn timeouts_under_loss(config: Config, drop: u32, seeds: std::ops::Range<u64>) -> (u64, Duration) {
    let faults = Faults { drop, ..Faults::clean() };
    let mut timeouts = 0;
    let mut time = Duration::ZERO;
    for seed in seeds {
        let mut t = Transfer::new(1 << 20, 1 << 20, vec![65536], 16 * 1024);
        let p = run_transfer(config, config, faults, seed, &mut t, Duration::from_secs(600));
        assert_eq!(p.a.sack_permitted(), config.sack);
        timeouts += p.a.stats().timeouts + p.b.stats().timeouts;
        time += p.done_at;
    }
    (timeouts, time)
}

/// RFC 6675 recovery repairs most losses without a retransmission timeout, with data flowing
/// both ways (so that many ACKs carry data and are not duplicate ACKs: only their SACK blocks
/// tell the sender about holes), where NewReno-style recovery without SACK ends in timeouts.
#[test]
fn sack_recovery_avoids_timeouts_under_random_loss() {
    for congestion in [CongestionAlgorithm::NewReno, CongestionAlgorithm::Cubic] {
        let with = Config { sack: true, congestion, ..pair_config() };
        let without = Config { sack: false, ..with };
        let (sack_timeouts, sack_time) = timeouts_under_loss(with, 30, 0..4);
        let (plain_timeouts, plain_time) = timeouts_under_loss(without, 30, 0..4);
        eprintln!(
            "{congestion:?}, 3% loss, 4 x 1 MiB each way: SACK {sack_timeouts} timeouts in {sack_time:?}, \
             without {plain_timeouts} timeouts in {plain_time:?}"
        );
        assert!(
            sack_timeouts * 4 <= plain_timeouts,
            "{congestion:?}: with SACK {sack_timeouts} timeouts, without {plain_timeouts}"
        );
        assert!(sack_time < plain_time);
    }
}

/// BBR takes random loss for what it is: through 5% loss each way, a bidirectional transfer
/// with [`Config::bbr`] gets done in well under half the time [`Config::linux`]'s CUBIC takes,
/// whose window every loss reduces. (It meets more timeouts, 5 against 1 here: its window
/// fills the peer's 128 KiB, so a lost retransmission at SND.UNA has nothing sent after it to
/// reveal it, and waits for the RTO, as it would in Linux.)
#[test]
fn bbr_keeps_its_pace_through_random_loss() {
    let sized = |c: Config| Config {
        send_buffer: 128 * 1024,
        recv_buffer: 128 * 1024,
        min_rto: Duration::from_millis(200),
        max_retransmits: 30,
        ..c
    };
    let cubic = sized(Config::linux());
    let bbr = sized(Config::bbr());
    let (cubic_timeouts, cubic_time) = timeouts_under_loss(cubic, 50, 0..4);
    let (bbr_timeouts, bbr_time) = timeouts_under_loss(bbr, 50, 0..4);
    eprintln!(
        "5% loss, 4 x 1 MiB each way: CUBIC {cubic_timeouts} timeouts in {cubic_time:?}, BBR {bbr_timeouts} in {bbr_time:?}"
    );
    assert!(bbr_time * 2 < cubic_time, "BBR {bbr_time:?}, CUBIC {cubic_time:?}");
}

#[test]
fn in_place_delivery_keeps_the_window_open_and_the_order() {
    // Clean link, the sink taking all, nothing or part of each payload at random: the stream is
    // byte-exact, and what was consumed in place never entered the receive ring.
    let mut t = Transfer::new(400_000, 150_000, vec![1000, 5000, 17], 3000);
    let p = run_transfer_with(
        pair_config(),
        pair_config(),
        Faults::clean(),
        7,
        true,
        &mut t,
        Duration::from_secs(30),
    );
    assert_eq!(p.b.stats().bytes_in, 400_000);
    assert!(p.placed_total > 0);
    // A sink that takes everything: no byte goes through the rings.
    let mut t = Transfer::new(400_000, 150_000, vec![1000, 5000, 17], 3000);
    let mut p = Pair::connect(pair_config(), pair_config(), Faults::clean(), 8);
    p.in_place = Some(Rng::new(8));
    p.take_all = true;
    assert!(p.run_until(|p| t.act(p), Duration::from_secs(30)));
    t.check();
    assert_eq!(p.placed_total, 550_000);
    assert_eq!(p.a.stats().bytes_in + p.b.stats().bytes_in, 550_000);
    // Under loss: out-of-order data waits in the ring, and in-order data behind it is copied.
    for seed in 0..4 {
        let mut t = Transfer::new(200_000, 50_000, vec![1460, 3000], 1000);
        let p = run_transfer_with(
            pair_config(),
            pair_config(),
            Faults::lossy(),
            seed,
            true,
            &mut t,
            Duration::from_secs(600),
        );
        assert!(p.placed_total > 0);
    }
}
