//! [`Deliver`]: what [`Stack::receive_deliver`] and [`Stack::poll_deliver`] offer the
//! application in place, where the payload lies in the received pool buffer, before the stack
//! copies it into a connection's receive ring or a UDP socket's queue.

use std::net::SocketAddr;

use super::UdpId;
use crate::stack::StreamId;
#[cfg(doc)]
use crate::stack::{Stack, StackStats};

/// In-place delivery of received payload (zero-copy receive).
///
/// [`tcp`](Self::tcp) is offered in-order TCP payload of a connection the application holds,
/// with nothing buffered ahead of it, and returns how many bytes it consumed (the rest goes to
/// the receive ring, for [`Stack::recv`]). [`udp`](Self::udp) is offered each datagram a UDP
/// socket accepts while the socket's queue is empty (so datagrams are seen in the order they
/// came) and returns whether it consumed it; if not (the default), the datagram is queued for
/// [`Stack::udp_recv_from`]. Both run inside the stack's call, so they cannot call the stack.
///
/// Every `FnMut(StreamId, &[u8]) -> usize` closure is a `Deliver` for TCP alone (what
/// [`Stack::receive_with`] and [`Stack::poll_with`] take); a type of the application's
/// implements both:
///
/// ```
/// use std::net::{Ipv4Addr, SocketAddr};
/// use std::time::{Duration, Instant};
/// use netchannel::dev::{NetDevice, Pair};
/// use netchannel::pool::{HugePages, Pool};
/// use tcp_lib::stack::{Config, Deliver, Stack, StreamId, UdpId};
/// use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
///
/// /// Counts the lines of every datagram where it lies in the pool buffer.
/// #[derive(Default)]
/// struct Lines(usize);
///
/// impl Deliver for Lines {
///     fn tcp(&mut self, _: StreamId, _: &[u8]) -> usize {
///         0 // TCP payload goes to the receive rings
///     }
///
///     fn udp(&mut self, _: UdpId, _from: SocketAddr, datagram: &[u8]) -> bool {
///         self.0 += datagram.iter().filter(|&&b| b == b'\n').count();
///         true // consumed: never copied into the socket's queue
///     }
/// }
///
/// let pool = Pool::builder(1024).hugepages(HugePages::Never).build()?;
/// let (mut dev_a, mut dev_b) = Pair::builder(&pool).build()?;
/// let cache = pool.cache();
/// let mut now = Instant::now();
/// let config = |dev: &Pair, host: u8| {
///     let mac = EthernetAddress(dev.info().mac.0);
///     Config::new(mac, Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, host), 24).expect("a /24"))
/// };
/// let mut a = Stack::new(config(&dev_a, 1), now);
/// let mut b = Stack::new(config(&dev_b, 2), now);
///
/// let server = b.udp_bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 5140)))?;
/// let client = a.udp_bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))?;
/// let to = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), 5140));
/// for _ in 0..3 {
///     a.udp_send_to(client, b"cpu=3\nmem=9\n", to)?;
/// }
/// let mut lines = Lines::default();
/// for _ in 0..10 {
///     a.poll(now, &mut dev_a, &cache)?;
///     b.poll_deliver(now, &mut dev_b, &cache, &mut lines)?;
///     now += Duration::from_millis(1);
/// }
/// assert_eq!(lines.0, 6);
/// assert_eq!(b.udp_queued(server)?, (0, 0), "nothing was copied into the queue");
/// assert_eq!(b.stats().udp_delivered_in_place, 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Deliver {
    /// In-order payload of `stream`; returns how many of its bytes were consumed.
    fn tcp(&mut self, stream: StreamId, payload: &[u8]) -> usize;

    /// A datagram from `from` that `socket` accepted; returns whether it was consumed (counted
    /// in [`StackStats::udp_delivered_in_place`]); if not, it is queued.
    fn udp(&mut self, socket: UdpId, from: SocketAddr, datagram: &[u8]) -> bool {
        let _ = (socket, from, datagram);
        false
    }
}

impl<F: FnMut(StreamId, &[u8]) -> usize> Deliver for F {
    fn tcp(&mut self, stream: StreamId, payload: &[u8]) -> usize {
        self(stream, payload)
    }
}
