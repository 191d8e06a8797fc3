//! Prepared (pre-segmented) content for the Sandstorm-style send path.
//!
//! A [`PreparedSegments`] is an immutable byte string (an HTTP response, say) cut ahead of time
//! into TCP payload segments of one or more sizes, with the one's-complement sum of every segment
//! precomputed. [`Stack::send_prepared`](crate::stack::Stack::send_prepared) queues it on a connection
//! *by reference* (an [`Arc`] clone): its bytes are not copied into the connection's send ring.
//! When the connection emits a segment whose payload lies inside the prepared bytes, the stack
//! copies the payload straight from them into the frame's pool buffer (the only copy) and, when the
//! segment is exactly one of the prepared cuts, takes its checksum from the table instead of
//! summing the payload.
//!
//! Retransmission is unaffected: the connection keeps the `Arc` until the bytes are acknowledged
//! and reads any range of it again.
//!
//! # By reference (zero-copy)
//!
//! [`PreparedSegments::in_pool`] also copies each segment of one cut size into one or more pool
//! buffers (at the pool's default headroom) and keeps them as [`SharedPacket`]s. A segment that is
//! exactly one of those buffers then goes to the device without a copy: the stack writes the Ethernet, IP and TCP
//! headers into the buffer's headroom ([`SharedPacket::frame`]) and hands the frame over, as
//! Sandstorm does with its pre-segmented content (Marinos, Watson, Handley, "Network stack
//! specialization for performance", SIGCOMM 2014). One frame of a buffer is in flight at a time: a
//! segment whose buffers are all still at the device (other connections sending the same content,
//! an earlier send of it that the device has not let go of: drivers reclaim sent descriptors in
//! batches) is copied as above, and counted
//! ([`StackStats::tx_by_reference_copied`](crate::stack::StackStats::tx_by_reference_copied)).
//! The content is shared by every core through its `Arc`, and the buffers with it; a core sends
//! from another core's pool buffers only when both use the same pool (a frame must come from the
//! cache of the buffer's pool), otherwise it copies. A super-segment
//! ([`Config::tso_max_size`](crate::stack::Config::tso_max_size)) spans several buffers and is always copied.
//!
//! ```
//! use std::sync::Arc;
//! use tcp_lib::tcp::PreparedSegments;
//! use tcp_lib::wire::checksum;
//!
//! let body: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
//! let prepared = Arc::new(PreparedSegments::new(body.clone(), &[1448, 1460]));
//! assert_eq!(prepared.len(), 5000);
//! // The second 1448-byte segment, and the short last one.
//! assert_eq!(prepared.sum(1448, 1448), Some(checksum::data(&body[1448..2896])));
//! assert_eq!(prepared.sum(4344, 656), Some(checksum::data(&body[4344..])));
//! // Not a prepared cut: the caller sums it.
//! assert_eq!(prepared.sum(100, 1448), None);
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use netchannel::pool::{PoolCache, SharedPacket};

use crate::wire::checksum;

/// Immutable content cut into TCP payload segments with precomputed payload sums, sent with
/// [`Stack::send_prepared`](crate::stack::Stack::send_prepared).
#[derive(Clone, Debug)]
pub struct PreparedSegments {
    data: Box<[u8]>,
    /// Per segment size: the size and the unfinished sum of each segment of that size, in order
    /// (the last one may be short).
    cuts: Vec<(usize, Box<[u16]>)>,
    /// The segments of one cut size in pool buffers, for sending by reference ([`Self::in_pool`]).
    buffers: Option<PoolSegments>,
}

/// The segments of cut size `cut`, each in `copies` shared pool buffers of its own, in order
/// (segment `i`'s copies at `i * copies ..`).
#[derive(Clone, Debug)]
struct PoolSegments {
    cut: usize,
    copies: usize,
    shared: Box<[SharedPacket]>,
    /// Per segment, the copy a send tries first ([`PreparedSlice::copies`]): round robin, so the
    /// first tried is the one sent longest ago, the likeliest to be back from the device.
    turn: Arc<[AtomicU32]>,
}

impl PartialEq for PreparedSegments {
    /// Same bytes, same cuts, and pool copies of the same cut size (or none on either).
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
            && self.cuts == other.cuts
            && self.buffers.as_ref().map(|b| b.cut) == other.buffers.as_ref().map(|b| b.cut)
    }
}

impl Eq for PreparedSegments {}

/// Why [`PreparedSegments::in_pool`] could not copy the content into pool buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InPoolError {
    /// The pool ran out of free buffers after `allocated` of the `needed` segments.
    #[error(
        "prepared content needs {needed} pool buffers and the pool had {allocated} free: build the pool with \
         at least {} more buffers (Pool::builder), or send this content by copy",
        .needed - .allocated
    )]
    NoBuffer {
        /// Buffers the content needs.
        needed: usize,
        /// Buffers taken before the pool ran dry (given back).
        allocated: usize,
    },
    /// A segment of `cut` bytes does not fit in a buffer behind the default headroom.
    #[error(
        "a {cut}-byte segment does not fit behind the headroom of a pool buffer ({room} bytes): use a \
         pool with larger buffers or a smaller cut"
    )]
    TooLarge {
        /// The cut size asked for.
        cut: usize,
        /// The bytes a buffer holds behind its headroom.
        room: usize,
    },
}

impl PreparedSegments {
    /// Prepares `data` for each payload segment size in `mss` (sizes of 0 are ignored; give the
    /// sizes the connections will use: with timestamps on, the MSS less 12).
    #[must_use]
    pub fn new(data: impl Into<Box<[u8]>>, mss: &[usize]) -> Self {
        let data = data.into();
        let mut cuts: Vec<(usize, Box<[u16]>)> = Vec::new();
        for &m in mss {
            if m == 0 || cuts.iter().any(|&(c, _)| c == m) {
                continue;
            }
            cuts.push((m, data.chunks(m).map(checksum::data).collect()));
        }
        Self { data, cuts, buffers: None }
    }

    /// [`new`](Self::new), and each segment of `cut` bytes (added to `mss` if missing) also
    /// copied into `copies` buffers of `cache`'s pool at the default headroom and shared, so that
    /// a connection emitting exactly that segment sends it by reference from whichever copy has no
    /// frame in flight (see the module docs). The buffers stay taken while the content lives:
    /// `copies` times `len / cut` rounded up.
    ///
    /// # Errors
    ///
    /// [`InPoolError`] when the pool has too few free buffers or a segment does not fit in one
    /// (nothing is kept: the buffers taken go back).
    pub fn in_pool(
        data: impl Into<Box<[u8]>>,
        mss: &[usize],
        (cut, copies): (usize, usize),
        cache: &PoolCache,
    ) -> Result<Self, InPoolError> {
        let mut sizes = mss.to_vec();
        sizes.push(cut);
        let mut this = Self::new(data, &sizes);
        if cut == 0 || copies == 0 {
            return Ok(this);
        }
        let needed = this.data.len().div_ceil(cut).saturating_mul(copies);
        let mut shared = Vec::with_capacity(needed);
        for chunk in this.data.chunks(cut) {
            for _ in 0..copies {
                let Some(mut packet) = cache.alloc() else {
                    return Err(InPoolError::NoBuffer { needed, allocated: shared.len() });
                };
                if packet.extend_from_slice(chunk).is_err() {
                    let room = packet.tailroom();
                    return Err(InPoolError::TooLarge { cut, room });
                }
                // A fresh buffer is never a frame, so this error is unreachable; if it were not,
                // the content would stay whole without its pool copies.
                let Ok(s) = packet.into_shared() else {
                    return Err(InPoolError::NoBuffer { needed, allocated: shared.len() });
                };
                shared.push(s);
            }
        }
        let turn = (0..this.data.len().div_ceil(cut)).map(|_| AtomicU32::new(0)).collect();
        this.buffers = Some(PoolSegments { cut, copies, shared: shared.into_boxed_slice(), turn });
        Ok(this)
    }

    /// The cut size whose segments are in pool buffers ([`Self::in_pool`]), if any.
    #[must_use]
    pub fn pool_cut(&self) -> Option<usize> {
        self.buffers.as_ref().map(|b| b.cut)
    }

    /// The bytes.
    #[must_use]
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Bytes in all.
    #[must_use]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// No bytes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The segment sizes it was cut for.
    pub fn segment_sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.cuts.iter().map(|&(m, _)| m)
    }

    /// Whether it was cut for segments of `mss` bytes.
    #[must_use]
    pub fn is_cut_for(&self, mss: usize) -> bool {
        self.cuts.iter().any(|&(m, _)| m == mss)
    }

    /// The precomputed unfinished one's-complement sum of `data()[offset..offset + len]`, if that
    /// range is exactly one prepared segment (of any of the sizes); `None` otherwise.
    #[must_use]
    pub fn sum(&self, offset: usize, len: usize) -> Option<u16> {
        let end = offset.checked_add(len)?;
        if len == 0 || end > self.data.len() {
            return None;
        }
        self.cuts.iter().find_map(|(m, sums)| {
            (offset.is_multiple_of(*m) && len == (*m).min(self.data.len() - offset)).then(|| sums[offset / m])
        })
    }

    /// The prepared segment boundary of size `mss` at or after `offset` (the end when not cut for
    /// `mss`), at most the length.
    #[must_use]
    pub fn next_boundary(&self, offset: usize, mss: usize) -> usize {
        if !self.is_cut_for(mss) {
            return self.data.len();
        }
        (offset / mss + 1).saturating_mul(mss).min(self.data.len())
    }
}

/// A range of a [`PreparedSegments`] that a connection emits as one segment's payload (from
/// [`Connection::poll_transmit_prepared`](crate::tcp::Connection::poll_transmit_prepared)).
#[derive(Clone, Debug)]
pub struct PreparedSlice {
    /// The content.
    pub segments: Arc<PreparedSegments>,
    /// The first byte, an offset into [`PreparedSegments::data`].
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

impl PreparedSlice {
    /// The payload bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.segments.data()[self.offset..self.offset + self.len]
    }

    /// The precomputed payload sum, when the range is a prepared cut.
    #[must_use]
    pub fn sum(&self) -> Option<u16> {
        self.segments.sum(self.offset, self.len)
    }

    /// The pool buffers holding exactly this range (its copies), when the content is in a pool
    /// ([`PreparedSegments::in_pool`]) and the range is one of its segments; empty otherwise.
    #[must_use]
    #[inline]
    pub fn buffers(&self) -> &[SharedPacket] {
        self.place().map_or(&[], |(b, at)| &b.shared[at * b.copies..(at + 1) * b.copies])
    }

    /// [`buffers`](Self::buffers) in the order a send tries them, or `None` when there are none
    /// (the range is not one of the pool's segments): from the copy after the one the previous
    /// send of this segment started at (round robin), so that the first tried is the one sent
    /// longest ago. Each call moves the turn on.
    #[inline]
    pub fn copies(&self) -> Option<impl Iterator<Item = &SharedPacket>> {
        let (b, at) = self.place()?;
        // Relaxed, and a load and a store rather than an atomic add: the turn is a hint for
        // where to start (`frame` decides), so two sends racing may start at the same copy.
        let t = b.turn[at].load(Ordering::Relaxed);
        b.turn[at].store(t.wrapping_add(1), Ordering::Relaxed);
        let copies = &b.shared[at * b.copies..(at + 1) * b.copies];
        let start = t as usize % b.copies;
        Some(copies[start..].iter().chain(&copies[..start]))
    }

    /// The pool copies and the segment's number, when the range is one of their segments.
    #[inline]
    fn place(&self) -> Option<(&PoolSegments, usize)> {
        let b = self.segments.buffers.as_ref()?;
        if !self.offset.is_multiple_of(b.cut) {
            return None;
        }
        let at = self.offset / b.cut;
        let first = b.shared.get(at * b.copies)?;
        (first.len() == self.len).then_some((b, at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derived messages (thiserror) say what the hand-written ones said, computed parts included.
    #[test]
    fn error_messages_name_the_fix() {
        let e = InPoolError::NoBuffer { needed: 10, allocated: 7 };
        assert_eq!(
            e.to_string(),
            "prepared content needs 10 pool buffers and the pool had 7 free: build the pool with at least 3 more \
             buffers (Pool::builder), or send this content by copy"
        );
        let e = InPoolError::TooLarge { cut: 9000, room: 1920 };
        assert!(e.to_string().starts_with(
            "a 9000-byte segment does not fit behind the headroom of a pool buffer (1920 bytes)"
        ));
        let e = crate::stack::Error::Connection(super::super::ConnectionError::Reset);
        assert_eq!(e.to_string(), "connection reset by peer");
        assert!(std::error::Error::source(&e).is_none());
    }

    #[test]
    fn sums_match_the_bytes() {
        let body: Vec<u8> = (0..10_001u32).map(|i| (i.wrapping_mul(7919) >> 3).to_le_bytes()[0]).collect();
        let p = PreparedSegments::new(body.clone(), &[1448, 1460, 0, 1448]);
        assert_eq!(p.segment_sizes().collect::<Vec<_>>(), [1448, 1460]);
        for m in [1448, 1460] {
            let mut off = 0;
            while off < body.len() {
                let len = m.min(body.len() - off);
                assert_eq!(p.sum(off, len), Some(checksum::data(&body[off..off + len])));
                assert_eq!(p.next_boundary(off, m), off + len);
                off += len;
            }
        }
        assert_eq!(p.sum(1, 1448), None);
        assert_eq!(p.sum(0, 1000), None);
        assert_eq!(p.sum(0, 0), None);
        assert_eq!(p.sum(10_000, 2), None);
        assert_eq!(p.sum(1448, 1449), None, "longer than the 1448-byte cut");
        assert_eq!(p.next_boundary(5, 1000), body.len());
    }

    /// Prepared contents and plain sends interleaved on one connection, through loss,
    /// reordering, duplication and corruption: the peer gets every byte in order, and most
    /// segments came from prepared content with precomputed sums.
    #[test]
    fn prepared_and_plain_sends_arrive_byte_exact_through_faults() {
        use std::net::{Ipv4Addr, SocketAddrV4};
        use std::time::{Duration, Instant};

        use netchannel::dev::{DirectionConfig, FaultConfig, FaultInjector, NetDevice, Pair, VirtualClock};
        use netchannel::pool::{HugePages, Pool};

        use crate::stack::{Config, Error, Stack};
        use crate::wire::{EthernetAddress, Ipv4Cidr};

        let lossy = DirectionConfig {
            drop: 0.03,
            corrupt: 0.005,
            duplicate: 0.01,
            reorder: 0.02,
            reorder_by: 3,
            reorder_timeout: None,
            delay: Duration::from_millis(2),
            rate: None,
        };
        let pool = Pool::builder(16 * 1024).hugepages(HugePages::Never).build().unwrap();
        let (pa, pb) = Pair::builder(&pool).capacity(4096).build().unwrap();
        let cache = pool.cache();
        let clock = VirtualClock::new();
        let config = |dev: &Pair, host: u8| {
            let ip = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, host), 24).unwrap();
            let mut c = Config::new(EthernetAddress(dev.info().mac.0), ip);
            c.secret_seed = Some(u64::from(host));
            c.tcp.min_rto = Duration::from_millis(200);
            c.tcp.initial_rto = Duration::from_millis(200);
            c
        };
        let (ca, cb) = (config(&pa, 1), config(&pb, 2));
        let faults = FaultConfig { seed: 5, rx: lossy, tx: lossy, max_held: 4096 };
        let mut dev_a = FaultInjector::with_clock(pa, &pool, faults, clock.clone());
        let mut dev_b = pb;
        let tick = Duration::from_millis(1);
        let mut now = Instant::now();
        let mut a = Stack::new(ca, now);
        let mut b = Stack::new(cb, now);
        let l = b.listen(80).unwrap();
        let c = a.connect(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80)).unwrap();
        // What B sends, in order: prepared contents of assorted sizes, with plain sends between.
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut bytes = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng.to_le_bytes()[0]
                })
                .collect()
        };
        enum Out {
            Prepared(Arc<PreparedSegments>),
            Plain(Vec<u8>),
        }
        let mut plan = Vec::new();
        for (i, size) in [1, 100, 1448, 1449, 5000, 65_536, 200_000, 3, 30_000].into_iter().enumerate() {
            plan.push(Out::Prepared(Arc::new(PreparedSegments::new(bytes(size), &[1448, 1460]))));
            if i % 3 == 1 {
                plan.push(Out::Plain(bytes(777 * (i + 1))));
            }
        }
        let expected: Vec<u8> = plan
            .iter()
            .flat_map(|o| match o {
                Out::Prepared(p) => p.data().to_vec(),
                Out::Plain(v) => v.clone(),
            })
            .collect();
        let (mut next, mut plain_sent) = (0, 0);
        let mut got = Vec::new();
        let mut s = None;
        let mut buf = vec![0u8; 64 * 1024];
        for _ in 0..400_000 {
            a.poll(now, &mut dev_a, &cache).unwrap();
            b.poll(now, &mut dev_b, &cache).unwrap();
            now += tick;
            clock.advance(tick);
            s = s.or_else(|| b.accept(l));
            if let Some(s) = s {
                while let Some(out) = plan.get(next) {
                    match out {
                        Out::Prepared(p) => match b.send_prepared(s, p) {
                            Ok(()) => next += 1,
                            Err(Error::WouldBlock) => break,
                            Err(e) => panic!("{e}"),
                        },
                        Out::Plain(v) => match b.send(s, &v[plain_sent..]) {
                            Ok(n) => {
                                plain_sent += n;
                                if plain_sent == v.len() {
                                    plain_sent = 0;
                                    next += 1;
                                }
                            }
                            Err(Error::WouldBlock) => break,
                            Err(e) => panic!("{e}"),
                        },
                    }
                }
            }
            loop {
                match a.recv(c, &mut buf) {
                    Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                    Ok(_) | Err(Error::WouldBlock) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            if got.len() >= expected.len() {
                break;
            }
        }
        let fs = dev_a.fault_stats();
        assert_eq!(got.len(), expected.len(), "{fs:?}");
        assert!(got == expected, "bytes differ");
        assert!(fs.tx.dropped + fs.rx.dropped > 10, "{fs:?}");
        let st = b.stats();
        let conn = b.connection_stats(s.unwrap()).unwrap();
        assert!(conn.retransmits > 0, "{conn:?}");
        assert!(st.tx_prepared > 200, "{st:?}");
        assert!(st.tx_prepared_sums * 10 > st.tx_prepared * 8, "most on the cuts: {st:?}");
        let _ = dev_b.info();
    }
}
