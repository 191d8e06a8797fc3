//! Driving a stack against a [`NetDevice`]: [`Stack::poll`] receives bursts, runs the timers and
//! transmits what is ready; [`Stack::poll_with`] and [`Stack::poll_deliver`] add in-place delivery of
//! received payload.

use std::time::Instant;

use netchannel::dev::{DevError, NetDevice, PacketBatch};
use netchannel::pool::PoolCache;

use super::{Deliver, PollStats, Stack, StreamId};

/// Frames received per `rx_burst` in [`Stack::poll`].
pub(super) const BURST: usize = 32;
/// Most receive bursts per [`Stack::poll`].
const MAX_RX_BURSTS: usize = 8;

impl Stack {
    /// Receives a burst from `device`, processes each frame, runs the timers, transmits what is
    /// ready, in as many bursts as it takes. Frames the device refuses are dropped (TCP
    /// retransmits them).
    ///
    /// # Errors
    /// The device's errors.
    pub fn poll<D: NetDevice + ?Sized>(
        &mut self,
        now: Instant,
        device: &mut D,
        cache: &PoolCache,
    ) -> Result<PollStats, DevError> {
        self.poll_with(now, device, cache, |_, _| 0)
    }

    /// [`poll`](Self::poll) with in-place delivery ([`receive_with`](Self::receive_with)):
    /// `deliver` reads TCP payload where it lies in the received pool buffers, before they go
    /// back to the pool, and returns how much it consumed. It runs inside the poll, so it cannot
    /// call the stack; what it does not consume is read later with [`recv`](Self::recv).
    ///
    /// ```
    /// # use std::net::{Ipv4Addr, SocketAddrV4};
    /// # use std::time::{Duration, Instant};
    /// # use netchannel::dev::{NetDevice, Pair};
    /// # use netchannel::pool::{HugePages, Pool};
    /// # use tcp_lib::stack::{Config, Stack};
    /// # use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
    /// # let pool = Pool::builder(1024).hugepages(HugePages::Never).build()?;
    /// # let (mut dev_a, mut dev_b) = Pair::builder(&pool).build()?;
    /// # let cache = pool.cache();
    /// # let mut now = Instant::now();
    /// # let config = |dev: &Pair, host: u8| {
    /// #     let mac = EthernetAddress(dev.info().mac.0);
    /// #     Config::new(mac, Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, host), 24).expect("a /24"))
    /// # };
    /// # let mut a = Stack::new(config(&dev_a, 1), now);
    /// # let mut b = Stack::new(config(&dev_b, 2), now);
    /// let listener = b.listen(80)?;
    /// let client = a.connect(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80))?;
    /// let mut server = None;
    /// while server.is_none() {
    ///     a.poll(now, &mut dev_a, &cache)?;
    ///     b.poll(now, &mut dev_b, &cache)?;
    ///     server = b.accept(listener);
    ///     now += Duration::from_millis(1);
    /// }
    /// a.send(client, b"GET / HTTP/1.0\r\n\r\n")?;
    /// let mut lines = 0; // parsed where it lies in the pool buffer: never copied
    /// for _ in 0..10 {
    ///     a.poll(now, &mut dev_a, &cache)?;
    ///     b.poll_with(now, &mut dev_b, &cache, |_stream, payload| {
    ///         lines += payload.windows(2).filter(|w| w == b"\r\n").count();
    ///         payload.len()
    ///     })?;
    ///     now += Duration::from_millis(1);
    /// }
    /// assert_eq!(lines, 2);
    /// let (buffered, _) = b.queues(server.expect("accepted"))?;
    /// assert_eq!(buffered, 0, "nothing went through the receive buffer");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The device's errors.
    pub fn poll_with<D: NetDevice + ?Sized, F: FnMut(StreamId, &[u8]) -> usize>(
        &mut self,
        now: Instant,
        device: &mut D,
        cache: &PoolCache,
        mut deliver: F,
    ) -> Result<PollStats, DevError> {
        self.poll_deliver(now, device, cache, &mut deliver)
    }

    /// [`poll_with`](Self::poll_with) for any [`Deliver`]: TCP payload as there, and UDP
    /// datagrams offered in place too ([`Deliver::udp`]; see its example).
    ///
    /// # Errors
    /// The device's errors.
    pub fn poll_deliver<D: NetDevice + ?Sized, R: Deliver + ?Sized>(
        &mut self,
        now: Instant,
        device: &mut D,
        cache: &PoolCache,
        deliver: &mut R,
    ) -> Result<PollStats, DevError> {
        // The batch lives in the stack's storage between polls: no allocation per poll.
        let mut batch = PacketBatch::from_storage(std::mem::take(&mut self.batch));
        if batch.capacity() < BURST {
            batch = PacketBatch::with_capacity(BURST);
        }
        let polled = self.poll_batch(now, device, cache, deliver, &mut batch);
        self.batch = batch.into_storage();
        polled
    }

    /// [`poll_deliver`](Self::poll_deliver)'s receive and transmit bursts through `batch`.
    fn poll_batch<'c, D: NetDevice + ?Sized, R: Deliver + ?Sized>(
        &mut self,
        now: Instant,
        device: &mut D,
        cache: &'c PoolCache,
        deliver: &mut R,
        batch: &mut PacketBatch<'c>,
    ) -> Result<PollStats, DevError> {
        let mut stats = PollStats::default();
        // The frame before, while it is a segment its connection predicted (`rx_cache`): what
        // an earlier loop left is not for this one.
        self.rx_memory.forget();
        for burst in 1..=MAX_RX_BURSTS {
            let n = device.rx_burst(0, cache, batch)?;
            // Most polls of a request-response exchange find nothing: no drain to build and
            // drop then (about 30 instructions).
            if !batch.is_empty() {
                for packet in batch.drain() {
                    self.receive_frame(now, packet.data(), packet.offload(), deliver);
                }
            }
            stats.received += n;
            if n < BURST || burst == MAX_RX_BURSTS {
                break;
            }
            // More frames wait: what this burst made due (its ACKs above all) leaves before the
            // next burst is taken, as Linux acknowledges each GRO packet of a NAPI poll as it
            // goes. Held to the end of the poll, the ACK of a window taken in one poll would
            // come only once all of it was in, and the sender, its window full, would wait
            // that long with nothing to send.
            if self.has_output() {
                self.flush(now, device, cache, batch, &mut stats)?;
                // The connection's ACK state moved: the next frame takes the whole path.
                self.rx_memory.forget();
            }
        }
        self.handle_timeout(now);
        self.flush(now, device, cache, batch, &mut stats)?;
        Ok(stats)
    }

    /// Transmits everything due through `batch` (see [`transmit`](Self::transmit)) until nothing
    /// is left or the device refuses frames (counted as dropped).
    fn flush<'c, D: NetDevice + ?Sized>(
        &mut self,
        now: Instant,
        device: &mut D,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
        stats: &mut PollStats,
    ) -> Result<(), DevError> {
        loop {
            // Nothing queued and no connection ready: no call to build nothing (the poll has
            // moved the stack's clock to `now` already). Most polls, and every flush after the
            // burst that emptied the output, end here.
            if !self.has_output() {
                return Ok(());
            }
            let n = self.transmit(now, cache, batch);
            if n == 0 {
                return Ok(());
            }
            stats.transmitted += device.tx_burst(0, batch)?;
            if !batch.is_empty() {
                stats.dropped += batch.len();
                self.stats.tx_dropped += u64::try_from(batch.len()).unwrap_or(u64::MAX);
                batch.clear();
                return Ok(());
            }
        }
    }
}
