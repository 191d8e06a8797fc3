//! The calls on one connection through its [`StreamId`]: [`Stack::connect`], [`Stack::send`],
//! [`Stack::recv`], [`Stack::close`] and the rest of the socket-like API.

use std::net::SocketAddr;
use std::sync::Arc;

use netchannel::pool::SharedPacket;

use super::connections::SharedTcp;
use super::flows::FlowKey;
use super::hash;
use super::{Error, PreparedSegments, Stack, StreamId};
use crate::tcp::{self, ConnectionError, State, Stats};

impl Stack {
    /// Opens a connection to `remote` (IPv4 or IPv6) from an ephemeral port (RFC 6056 algorithm
    /// 3, through the [port filter](Self::set_port_filter)) and our address for it (for IPv6,
    /// link-local toward a link-local peer, else the global address). The SYN leaves at the next
    /// [`transmit`](Self::transmit); data sent before the handshake completes follows it.
    ///
    /// # Errors
    /// [`Error::Unreachable`] (no route, or the family is off), [`Error::NoPorts`],
    /// [`Error::TooManyConnections`].
    pub fn connect(&mut self, remote: impl Into<SocketAddr>) -> Result<StreamId, Error> {
        let remote = remote.into();
        let tcp = Arc::clone(self.tcp.for_remote(remote.ip()));
        self.open_stream(remote, tcp)
    }

    /// [`connect`](Self::connect) with a configuration of its own instead of the stack's
    /// [`Config::tcp`](super::Config::tcp) (socket options set before `connect`: buffer sizes,
    /// the MSS, clamped to the MTU's, Nagle, keepalive).
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub fn connect_with(
        &mut self,
        remote: impl Into<SocketAddr>,
        tcp: tcp::Config,
    ) -> Result<StreamId, Error> {
        let remote = remote.into();
        let tcp = Arc::new(SharedTcp::clamp(tcp, self.mtu_mss(), remote.is_ipv6()));
        self.open_stream(remote, tcp)
    }

    /// [`connect_with`](Self::connect_with) `tcp`, its MSS clamped for `remote`.
    fn open_stream(&mut self, remote: SocketAddr, tcp: Arc<tcp::Config>) -> Result<StreamId, Error> {
        if remote.port() == 0 {
            return Err(Error::InvalidPort);
        }
        self.next_hop(remote.ip()).ok_or(Error::Unreachable)?;
        if self.connection_count() >= self.config.max_connections {
            return Err(Error::TooManyConnections);
        }
        let ip = self.source_for(remote.ip()).ok_or(Error::Unreachable)?;
        let demux = &self.demux;
        let time_wait = &self.time_wait;
        let listeners = &self.listener_ports;
        let port = self
            .ports
            .pick(ip, remote, self.port_filter.as_deref(), |p| {
                let key = FlowKey::new(SocketAddr::new(ip, p), remote);
                !listeners.contains_key(&p) && !demux.contains_key(&key) && !time_wait.contains(&key)
            })
            .ok_or(Error::NoPorts)?;
        let local = SocketAddr::new(ip, port);
        let iss = hash::isn(&self.key, local, remote, self.now - self.epoch);
        let index = self.insert_new(tcp, (local, remote), iss, None);
        self.stats.connections_opened += 1;
        Ok(self.stream_id(index))
    }

    /// Queues bytes on `stream`; returns how many fit in the send buffer.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when the buffer is full, [`Error::WriteClosed`] after
    /// [`shutdown_write`](Self::shutdown_write) or once the connection is closing,
    /// [`Error::Connection`] once it failed, [`Error::InvalidHandle`].
    pub fn send(&mut self, stream: StreamId, data: &[u8]) -> Result<usize, Error> {
        let e = self.writable_entry(stream)?;
        if data.is_empty() {
            return Ok(0);
        }
        let n = e.conn.send(data);
        if n == 0 {
            return Err(Error::WouldBlock);
        }
        self.mark_ready(stream.index);
        Ok(n)
    }

    /// Lets the application write up to `max` bytes for `stream` straight into its send buffer,
    /// instead of copying them in from a buffer of its own as [`send`](Self::send) does: the copy
    /// into the send buffer is skipped, and each segment reads its payload from the buffer (which
    /// is also the retransmit queue) on its way out. `write` gets the free space as a slice, writes its bytes
    /// at the front and returns how many; when the free space wraps around the ring and the first
    /// slice was filled, `write` is called once more with the rest (see
    /// [`Connection::send_with`](tcp::Connection::send_with)). Returns the bytes queued (`Ok(0)`
    /// when `write` wrote none, or `max` is 0).
    ///
    /// ```
    /// # use std::time::Instant;
    /// # use tcp_lib::stack::{Config, Error, Stack};
    /// # use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
    /// let cidr = Ipv4Cidr::new([10, 0, 0, 1].into(), 24).expect("a /24");
    /// let mut config = Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]), cidr);
    /// config.tcp.send_buffer = 4096;
    /// let mut stack = Stack::new(config, Instant::now());
    /// let stream = stack.connect(([10, 0, 0, 2], 80))?; // data queued now follows the SYN
    /// // Serialize a response header right into the send buffer.
    /// let n = stack.send_with(stream, 1024, |free| {
    ///     let line = b"HTTP/1.1 200 OK\r\n";
    ///     free[..line.len()].copy_from_slice(line);
    ///     line.len()
    /// })?;
    /// assert_eq!(n, 17);
    /// // Fill the rest of the buffer with a pattern, generated in place.
    /// let n = stack.send_with(stream, usize::MAX, |free| {
    ///     free.fill(b'x');
    ///     free.len()
    /// })?;
    /// assert_eq!(n, 4096 - 17);
    /// assert_eq!(stack.send_with(stream, 1, |_| 1), Err(Error::WouldBlock), "full");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when the buffer is full (`write` is not called), and the others as for
    /// [`send`](Self::send).
    pub fn send_with(
        &mut self,
        stream: StreamId,
        max: usize,
        write: impl FnMut(&mut [u8]) -> usize,
    ) -> Result<usize, Error> {
        let e = self.writable_entry(stream)?;
        if max == 0 {
            return Ok(0);
        }
        let n = e.conn.send_with(max, write).ok_or(Error::WouldBlock)?;
        if n > 0 {
            self.mark_ready(stream.index);
        }
        Ok(n)
    }

    /// The entry of `stream`, if the application may still queue bytes on it.
    fn writable_entry(&mut self, stream: StreamId) -> Result<&mut super::Entry, Error> {
        let e = self.entry_mut(stream)?;
        if let Some(err) = e.conn.error() {
            return Err(Error::Connection(err));
        }
        if e.write_shut
            || !matches!(
                e.conn.state(),
                State::SynSent | State::SynReceived | State::Established | State::CloseWait
            )
        {
            return Err(Error::WriteClosed);
        }
        Ok(e)
    }

    /// Queues prepared content on `stream` after what is queued, by reference (no copy of its
    /// bytes; see [Prepared content](crate::stack#prepared-content-the-sandstorm-send-path)). All or
    /// nothing: the send ring's room does not limit it (the content is shared, not buffered per
    /// connection), but at most 64 runs of content wait per connection.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when 64 runs are queued, [`Error::WriteClosed`],
    /// [`Error::Connection`], [`Error::InvalidHandle`] as for [`send`](Self::send).
    pub fn send_prepared(&mut self, stream: StreamId, segments: &Arc<PreparedSegments>) -> Result<(), Error> {
        let e = self.writable_entry(stream)?;
        if !e.conn.send_prepared(segments) {
            return Err(Error::WouldBlock);
        }
        self.mark_ready(stream.index);
        Ok(())
    }

    /// Queues the data of a pool buffer on `stream` after what is queued, by reference: the
    /// application fills a buffer of the device's pool with one segment's payload (at most
    /// [`send_mss`](Self::send_mss) bytes, behind the pool's headroom), shares it
    /// ([`Packet::into_shared`](netchannel::pool::Packet::into_shared)) and hands it over. The
    /// connection holds the buffer until its bytes are acknowledged (retransmissions send it
    /// again) and sends it as a segment of its own with only the headers written, into the
    /// buffer's headroom (see [`crate::tcp::PooledSlice`] for when it copies instead, and
    /// [`StackStats::tx_pool_by_reference`](super::StackStats::tx_pool_by_reference)). The buffer
    /// goes back to its pool when it is acknowledged and the device is done with it.
    ///
    /// ```
    /// # use std::time::Instant;
    /// # use netchannel::pool::{HugePages, Pool};
    /// # use tcp_lib::stack::{Config, Error, Stack};
    /// # use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
    /// let pool = Pool::builder(64).hugepages(HugePages::Never).build()?;
    /// let cache = pool.cache();
    /// let cidr = Ipv4Cidr::new([10, 0, 0, 1].into(), 24).expect("a /24");
    /// let mut config = Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]), cidr);
    /// config.tcp.send_buffer = 4096;
    /// let mut stack = Stack::new(config, Instant::now());
    /// let stream = stack.connect(([10, 0, 0, 2], 80))?; // data queued now follows the SYN
    /// let mss = stack.send_mss(stream)?;
    /// let mut queued = 0;
    /// loop {
    ///     // Serialize one segment's payload straight into a pool buffer.
    ///     let mut packet = cache.alloc().expect("a free buffer");
    ///     packet.set_len(mss)?;
    ///     packet.data_mut().fill(b'x');
    ///     let buffer = packet.into_shared().expect("a plain packet");
    ///     match stack.send_pooled(stream, buffer) {
    ///         Ok(()) => queued += mss,
    ///         // The send buffer's size is reached: the buffer comes back, to send later.
    ///         Err((Error::WouldBlock, buffer)) => break drop(buffer),
    ///         Err((e, _)) => return Err(e.into()),
    ///     }
    /// }
    /// assert_eq!(queued, 4096 / mss * mss);
    /// drop(stack); // its buffers go back to the pool
    /// drop(cache);
    /// pool.check_leaks()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The buffer comes back with [`Error::WouldBlock`] when the send buffer's size would be
    /// passed (an empty send buffer takes any one buffer) or 4096 buffers are queued, and with
    /// the others as for [`send`](Self::send).
    #[allow(clippy::result_large_err, reason = "the buffer comes back, to be sent again")]
    pub fn send_pooled(
        &mut self,
        stream: StreamId,
        buffer: SharedPacket,
    ) -> Result<(), (Error, SharedPacket)> {
        let e = match self.writable_entry(stream) {
            Ok(e) => e,
            Err(err) => return Err((err, buffer)),
        };
        e.conn.send_pooled(buffer).map_err(|b| (Error::WouldBlock, b))?;
        self.mark_ready(stream.index);
        Ok(())
    }

    /// [`send_pooled`](Self::send_pooled) for as many buffers as `stream`'s send buffer takes, in
    /// one call: `fill` gets the room left in bytes and returns a pool buffer it filled with at most
    /// that many (one segment's payload, as for `send_pooled`), or `None` to stop; it is called
    /// again until it returns `None` or the room is gone (see
    /// [`Connection::send_pooled_with`](tcp::Connection::send_pooled_with)). No buffer comes
    /// back: the application fills one only when there is room for it. Returns the bytes queued.
    ///
    /// ```
    /// # use std::time::Instant;
    /// # use netchannel::pool::{HugePages, Pool};
    /// # use tcp_lib::stack::{Config, Error, Stack};
    /// # use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
    /// let pool = Pool::builder(64).hugepages(HugePages::Never).build()?;
    /// let cache = pool.cache();
    /// let cidr = Ipv4Cidr::new([10, 0, 0, 1].into(), 24).expect("a /24");
    /// let mut config = Config::new(EthernetAddress([2, 0, 0, 0, 0, 1]), cidr);
    /// config.tcp.send_buffer = 4096;
    /// let mut stack = Stack::new(config, Instant::now());
    /// let stream = stack.connect(([10, 0, 0, 2], 80))?;
    /// let mss = stack.send_mss(stream)?;
    /// let queued = stack.send_pooled_with(stream, |room| {
    ///     let n = mss.min(room);
    ///     let mut packet = cache.alloc()?;
    ///     packet.set_len(n).ok()?;
    ///     packet.data_mut().fill(b'x'); // one segment's payload, produced in place
    ///     packet.into_shared().ok()
    /// })?;
    /// assert_eq!(queued, 4096);
    /// assert_eq!(stack.send_pooled_with(stream, |_| unreachable!()), Err(Error::WouldBlock));
    /// drop(stack);
    /// drop(cache);
    /// pool.check_leaks()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when the send buffer is full (`fill` is not called), and the others
    /// as for [`send`](Self::send).
    pub fn send_pooled_with(
        &mut self,
        stream: StreamId,
        fill: impl FnMut(usize) -> Option<SharedPacket>,
    ) -> Result<usize, Error> {
        let e = self.writable_entry(stream)?;
        let n = e.conn.send_pooled_with(fill).ok_or(Error::WouldBlock)?;
        if n > 0 {
            self.mark_ready(stream.index);
        }
        Ok(n)
    }

    /// Reads received bytes of `stream` in order; `Ok(0)` at the end of the stream (the peer's FIN,
    /// or a connection closed normally).
    ///
    /// # Errors
    /// [`Error::WouldBlock`] when nothing is buffered yet, [`Error::Connection`] once it failed
    /// (after the buffered bytes are read), [`Error::InvalidHandle`].
    pub fn recv(&mut self, stream: StreamId, buf: &mut [u8]) -> Result<usize, Error> {
        let e = self.entry_mut(stream)?;
        let n = e.conn.recv(buf);
        if n > 0 {
            self.mark_ready(stream.index);
            return Ok(n);
        }
        if let Some(err) = e.conn.error() {
            return Err(Error::Connection(err));
        }
        if e.conn.recv_finished() || e.conn.is_closed() || buf.is_empty() {
            return Ok(0);
        }
        Err(Error::WouldBlock)
    }

    /// Half-close: a FIN follows the data already queued.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn shutdown_write(&mut self, stream: StreamId) -> Result<(), Error> {
        let e = self.entry_mut(stream)?;
        e.write_shut = true;
        e.conn.shutdown_write();
        e.wake_ready();
        self.mark_ready(stream.index);
        Ok(())
    }

    /// Releases the handle and closes the connection gracefully (an abort if received data was
    /// left unread, see [`Connection::close`](tcp::Connection::close)); the stack finishes it and
    /// reclaims it. Wakes every waker registered on it ([`register_waker`](Self::register_waker)).
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn close(&mut self, stream: StreamId) -> Result<(), Error> {
        let e = self.entry_mut(stream)?;
        e.conn.close();
        e.app_owned = false;
        e.wake_all();
        self.mark_ready(stream.index);
        Ok(())
    }

    /// Releases the handle and aborts the connection (an RST if it was synchronized). Wakes every
    /// waker registered on it.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn abort(&mut self, stream: StreamId) -> Result<(), Error> {
        let e = self.entry_mut(stream)?;
        e.conn.abort();
        e.app_owned = false;
        e.wake_all();
        self.mark_ready(stream.index);
        Ok(())
    }

    /// Resizes `stream`'s send buffer to `bytes` (never below what it holds now), as `SO_SNDBUF`
    /// on an open socket.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn set_send_buffer(&mut self, stream: StreamId, bytes: usize) -> Result<(), Error> {
        let e = self.entry_mut(stream)?;
        e.conn.set_send_buffer(bytes);
        e.wake_ready();
        Ok(())
    }

    /// Disables (`true`) or enables Nagle's algorithm.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn set_nodelay(&mut self, stream: StreamId, nodelay: bool) -> Result<(), Error> {
        self.entry_mut(stream)?.conn.set_nodelay(nodelay);
        Ok(())
    }

    /// The RFC 9293 state.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn state(&self, stream: StreamId) -> Result<State, Error> {
        Ok(self.entry(stream)?.conn.state())
    }

    /// Why the connection failed, once it has.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn error(&self, stream: StreamId) -> Result<Option<ConnectionError>, Error> {
        Ok(self.entry(stream)?.conn.error())
    }

    /// The local and remote addresses.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn addrs(&self, stream: StreamId) -> Result<(SocketAddr, SocketAddr), Error> {
        let e = self.entry(stream)?;
        Ok((e.conn.local(), e.conn.remote()))
    }

    /// Whether [`recv`](Self::recv) returns something other than [`Error::WouldBlock`] (false for
    /// an invalid handle).
    #[must_use]
    pub fn is_readable(&self, stream: StreamId) -> bool {
        self.entry(stream).is_ok_and(|e| e.conn.is_readable() || e.conn.error().is_some())
    }

    /// Whether [`send`](Self::send) accepts a byte now.
    #[must_use]
    pub fn is_writable(&self, stream: StreamId) -> bool {
        self.entry(stream).is_ok_and(|e| !e.write_shut && e.conn.is_writable())
    }

    /// Counters and estimates of the connection (RTT, cwnd, retransmits, bytes).
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn connection_stats(&self, stream: StreamId) -> Result<Stats, Error> {
        Ok(self.entry(stream)?.conn.stats())
    }

    /// The most payload bytes `stream` puts in one segment: the peer's MSS, lowered by PMTU
    /// discovery (ICMP fragmentation needed, RFC 1191).
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn send_mss(&self, stream: StreamId) -> Result<usize, Error> {
        Ok(self.entry(stream)?.conn.send_mss())
    }

    /// Bytes waiting to be read, and bytes in the send buffer.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`].
    pub fn queues(&self, stream: StreamId) -> Result<(usize, usize), Error> {
        let e = self.entry(stream)?;
        Ok((e.conn.recv_queue(), e.conn.send_queue()))
    }
}
