//! [`Port`]: one RX/TX queue pair of whatever backend was opened, as one type.
//!
//! The runtime gives every core one port and drives it through [`NetDevice`], without knowing which
//! backend it came from: a queue of the 82599 (the model or a card), a TAP interface, one queue of an
//! AF_XDP socket set, one end of an in-memory [`Pair`] (the model's peer, tests), or any of them
//! recorded into a pcap file. `Port` is an enum rather than a `Box<dyn NetDevice>` so that a call is
//! one `match` on a value the core owns, which the compiler can inline into the burst loop: the
//! runtime adds no per-packet cost (the match is per burst, and each arm is the backend's own
//! method).
//!
//! Every port is `Send`: it is opened on the caller's thread and moved to its core.

use std::time::Duration;

use ixgbe_vfio::driver::IxgbeQueue;
use netchannel::dev::xdp::XdpQueue;
use netchannel::dev::{
    DevError, DeviceInfo, DeviceStats, Link, NetDevice, PacketBatch, Pair, PcapWriter, RawBatch, RawReceived,
    Tap,
};
use netchannel::pool::PoolCache;

/// One RX/TX queue pair of an opened backend: its `queue` 0 is the queue it serves.
///
/// It implements [`NetDevice`] by delegating every method to the backend's device.
#[derive(Debug)]
#[non_exhaustive]
pub enum Port {
    /// A queue of the 82599 driver, on the model or on a card.
    Ixgbe(IxgbeQueue),
    /// A Linux TAP interface (one queue).
    Tap(Tap),
    /// One queue of an AF_XDP device ([`netchannel::dev::AfXdp::into_queues`]).
    Xdp(XdpQueue),
    /// One end of an in-memory pair: the model's peer on its wire, and tests.
    Pair(Pair),
    /// Another port whose traffic is recorded into a pcap file.
    Pcap(Box<PcapWriter<Port>>),
}

impl Port {
    /// What the port is, for logs: `"82599 queue"`, `"TAP"`, `"AF_XDP"`, `"pair"` or `"pcap"`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Ixgbe(_) => "82599 queue",
            Self::Tap(_) => "TAP",
            Self::Xdp(_) => "AF_XDP",
            Self::Pair(_) => "pair",
            Self::Pcap(_) => "pcap",
        }
    }
}

impl From<IxgbeQueue> for Port {
    fn from(dev: IxgbeQueue) -> Self {
        Self::Ixgbe(dev)
    }
}

impl From<Tap> for Port {
    fn from(dev: Tap) -> Self {
        Self::Tap(dev)
    }
}

impl From<XdpQueue> for Port {
    fn from(dev: XdpQueue) -> Self {
        Self::Xdp(dev)
    }
}

impl From<Pair> for Port {
    fn from(dev: Pair) -> Self {
        Self::Pair(dev)
    }
}

impl From<PcapWriter<Port>> for Port {
    fn from(dev: PcapWriter<Port>) -> Self {
        Self::Pcap(Box::new(dev))
    }
}

/// Calls `$method` on the backend device inside `$port`.
macro_rules! delegate {
    ($port:expr, $dev:ident => $call:expr) => {
        match $port {
            Port::Ixgbe($dev) => $call,
            Port::Tap($dev) => $call,
            Port::Xdp($dev) => $call,
            Port::Pair($dev) => $call,
            Port::Pcap($dev) => $call,
        }
    };
}

impl NetDevice for Port {
    #[inline]
    fn info(&self) -> DeviceInfo {
        delegate!(self, dev => dev.info())
    }

    #[inline]
    fn link(&self) -> Link {
        delegate!(self, dev => dev.link())
    }

    #[inline]
    fn stats(&self) -> DeviceStats {
        delegate!(self, dev => dev.stats())
    }

    #[inline]
    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        delegate!(self, dev => dev.rx_burst(queue, cache, batch))
    }

    /// The port's own: indices from the 82599 queue and the pair, packets from the others.
    #[inline]
    fn rx_burst_raw<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        raw: &mut RawBatch,
        batch: &mut PacketBatch<'c>,
    ) -> Result<RawReceived, DevError> {
        delegate!(self, dev => dev.rx_burst_raw(queue, cache, raw, batch))
    }

    /// Forwarded with `rx_burst_raw`: the pair counts its received bytes here.
    #[inline]
    fn count_raw_rx_bytes(&mut self, queue: u16, bytes: u64) {
        delegate!(self, dev => dev.count_raw_rx_bytes(queue, bytes));
    }

    #[inline]
    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        delegate!(self, dev => dev.tx_burst(queue, batch))
    }

    #[inline]
    fn wait_rx(&mut self, queue: u16, timeout: Option<Duration>) -> Result<(), DevError> {
        delegate!(self, dev => dev.wait_rx(queue, timeout))
    }
}

impl Port {
    /// Sleeps until the port has a frame or `timeout` passes, for a port the kernel wakes (an
    /// AF_XDP queue: `ppoll(2)` on its socket) with nothing waiting on its TX ring; `None` for the
    /// others, which are polled (a frame arriving is all that ends the sleep, and TX frames still
    /// waiting for the kernel go out in the polls' kicks).
    /// The descriptor that becomes readable when the port has a frame, for a sleep that polls it
    /// with others: a TAP (its writes are synchronous, so nothing waits to be sent), an AF_XDP
    /// queue with nothing waiting on its TX ring (see `sleep_rx`); `None` for the polled ports.
    pub(crate) fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match self {
            Self::Tap(dev) => Some(std::os::fd::AsFd::as_fd(dev)),
            Self::Xdp(dev) if !dev.tx_pending() => Some(dev.fd()),
            _ => None,
        }
    }

    pub(crate) fn sleep_rx(&self, timeout: Duration) -> Option<Result<bool, DevError>> {
        match self {
            Self::Xdp(dev) if !dev.tx_pending() => Some(dev.wait_readable(Some(timeout))),
            _ => None,
        }
    }
}

/// Every port can be moved to its core's thread.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Port>();
};

#[cfg(test)]
mod tests {
    use netchannel::pool::{HugePages, Pool};

    use super::*;

    #[test]
    fn a_port_delegates_to_its_device() {
        let pool = Pool::builder(256).hugepages(HugePages::Never).build().unwrap();
        let (a, b) = Pair::builder(&pool).capacity(64).build().unwrap();
        let (a_info, b_info, a_link) = (a.info(), b.info(), a.link());
        let (mut a, mut b) = (Port::from(a), Port::Pair(b));
        assert_eq!((a.kind(), a.info()), ("pair", a_info));
        assert_eq!(b.info(), b_info);
        assert_eq!(a.link(), a_link);
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(8);
        let mut p = cache.alloc().unwrap();
        p.extend_from_slice(&[0xab; 60]).unwrap();
        batch.push(p).unwrap();
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 1);
        b.wait_rx(0, Some(Duration::from_secs(1))).unwrap();
        assert_eq!(b.rx_burst(0, &cache, &mut batch).unwrap(), 1);
        assert_eq!(batch.as_slice()[0].data(), &[0xab; 60]);
        assert_eq!((a.stats().tx_packets, b.stats().rx_packets), (1, 1));
        // A channelizer hands the pair the bytes of the indices it received raw, through the port.
        let bytes = b.stats().rx_bytes;
        b.count_raw_rx_bytes(0, 100);
        assert_eq!(b.stats().rx_bytes, bytes + 100);
        assert!(matches!(a.tx_burst(1, &mut batch), Err(DevError::NoSuchQueue { .. })));
        drop(batch);
        drop((a, b));
        drop(cache);
        pool.check_leaks().unwrap();
    }

    #[cfg(feature = "netns-tests")]
    /// An idle core sleeps on an AF_XDP port only while nothing waits on its TX ring: a copy-mode
    /// `sendto` takes at most 32 frames, so after a burst of 200 the rest wait for the next kick,
    /// which a sleep would hold back until a frame arrived.
    #[test]
    fn an_xdp_port_is_slept_on_only_with_its_tx_ring_drained() {
        use netchannel::dev::xdp::{AfXdp, XdpError, XdpMode};
        netns_test::in_private_namespace(|| {
            let ip = netns_test::ip;
            ip(&["link", "add", "ncrpx0", "type", "veth", "peer", "name", "ncrpx1"])?;
            ip(&["link", "set", "ncrpx0", "up"])?;
            ip(&["link", "set", "ncrpx1", "up"])?;
            let pool = Pool::builder(2048).hugepages(HugePages::Never).build().map_err(|e| e.to_string())?;
            let dev = AfXdp::builder("ncrpx0").queue(0).mode(XdpMode::Generic).ring_size(512).fill_size(512);
            let dev = dev.open(&pool).map_err(|e| match e {
                XdpError::Unsupported { .. } | XdpError::PermissionDenied { .. } => {
                    format!("{}{e}", netns_test::SKIP)
                }
                e => e.to_string(),
            })?;
            let mut port = Port::Xdp(dev.into_queues().remove(0));
            let nap = Duration::from_micros(100);
            assert!(port.sleep_rx(nap).is_some(), "nothing to send: the port can be slept on");
            let cache = pool.cache();
            let mut batch = PacketBatch::with_capacity(256);
            let mut frame = vec![0xff; 6];
            frame.extend_from_slice(&port.info().mac.0);
            frame.extend_from_slice(&[0x88, 0xb5]); // local experimental EtherType
            frame.resize(60, 0);
            for _ in 0..200 {
                let mut p = cache.alloc().ok_or("pool empty")?;
                p.extend_from_slice(&frame).map_err(|e| format!("{e:?}"))?;
                batch.push(p).map_err(|_| "batch full")?;
            }
            assert_eq!(port.tx_burst(0, &mut batch).map_err(|e| e.to_string())?, 200);
            assert!(port.sleep_rx(nap).is_none(), "frames wait on the TX ring: no sleep");
            // Each poll kicks the ring again; once it is drained the port can be slept on again.
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            let mut rx = PacketBatch::with_capacity(64);
            while port.sleep_rx(Duration::ZERO).is_none() {
                assert!(std::time::Instant::now() < deadline, "the TX ring never drained");
                port.rx_burst(0, &cache, &mut rx).map_err(|e| e.to_string())?;
                rx.clear();
            }
            assert_eq!(port.stats().tx_packets, 200);
            Ok(())
        });
    }

    #[test]
    fn a_pcap_port_records_the_port_it_wraps() {
        let dir = std::env::temp_dir().join(format!("netchannel-runtime-port-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.pcap");
        let pool = Pool::builder(256).hugepages(HugePages::Never).build().unwrap();
        let (a, b) = Pair::builder(&pool).capacity(64).build().unwrap();
        let mut a = Port::from(PcapWriter::create(Port::Pair(a), &path).unwrap());
        let mut b = Port::from(b);
        assert_eq!(a.kind(), "pcap");
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(8);
        let mut p = cache.alloc().unwrap();
        p.extend_from_slice(&[1; 60]).unwrap();
        batch.push(p).unwrap();
        assert_eq!(a.tx_burst(0, &mut batch).unwrap(), 1);
        assert_eq!(b.rx_burst(0, &cache, &mut batch).unwrap(), 1);
        let Port::Pcap(w) = &mut a else { unreachable!() };
        assert_eq!(w.pcap_stats().tx_frames, 1);
        w.flush().unwrap();
        drop(batch);
        drop((a, b));
        drop(cache);
        pool.check_leaks().unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 24 + 16 + 60 - 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
