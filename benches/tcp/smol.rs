//! smoltcp's endpoint: an `Interface` and a few reusable sockets on a netchannel device.

use netchannel::pool::PoolCache;
use smoltcp::iface::{Config as SmolConfig, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::socket::tcp as stcp;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use crate::device::{Sleep, SmolDev, trust_checksums};
use crate::endpoint::{Endpoint, copy_in_pieces, produce, sleep_on};

pub(crate) struct SmolEndpoint<'c, D> {
    pub(crate) iface: Interface,
    pub(crate) dev: SmolDev<'c, D>,
    pub(crate) sockets: SocketSet<'static>,
    pub(crate) buf: usize,
    /// Listening sockets (re-armed once they finish) and accepted ones not yet handed out.
    pub(crate) listeners: Vec<SocketHandle>,
    pub(crate) handed: Vec<bool>,
    pub(crate) port: u16,
    /// Sockets for `connect`, reused once closed, and the next local port.
    pub(crate) clients: Vec<SocketHandle>,
    pub(crate) next_port: u16,
    /// The application writes and reads in place (`Socket::send` and `Socket::recv` with a
    /// closure) instead of `send_slice` and `recv_slice`.
    pub(crate) in_place: bool,
}

impl<'c, D: Sleep> SmolEndpoint<'c, D> {
    pub(crate) fn new(dev: D, cache: &'c PoolCache, ip: Ipv4Addr, buf: usize) -> Self {
        let mac = dev.info().mac.0;
        let mut dev = SmolDev::new(dev, cache);
        dev.trust = trust_checksums::<D>();
        let mut config =
            SmolConfig::new(smoltcp::wire::HardwareAddress::Ethernet(smoltcp::wire::EthernetAddress(mac)));
        config.random_seed = u64::from(ip.to_bits()) ^ 0x5eed;
        let mut iface = Interface::new(config, &mut dev, smoltcp::time::Instant::now());
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(smoltcp::wire::IpCidr::new(smoltcp::wire::IpAddress::Ipv4(ip), 24));
        });
        Self {
            iface,
            dev,
            sockets: SocketSet::new(Vec::new()),
            buf,
            listeners: Vec::new(),
            handed: Vec::new(),
            port: 0,
            clients: Vec::new(),
            next_port: 49_152,
            in_place: false,
        }
    }

    pub(crate) fn socket(&self) -> stcp::Socket<'static> {
        let mut s = stcp::Socket::new(
            stcp::SocketBuffer::new(vec![0; self.buf]),
            stcp::SocketBuffer::new(vec![0; self.buf]),
        );
        s.set_nagle_enabled(false);
        s.set_congestion_control(congestion_control());
        s
    }

    pub(crate) fn tcp(&self, h: SocketHandle) -> &stcp::Socket<'static> {
        self.sockets.get::<stcp::Socket<'static>>(h)
    }

    pub(crate) fn tcp_mut(&mut self, h: SocketHandle) -> &mut stcp::Socket<'static> {
        self.sockets.get_mut::<stcp::Socket<'static>>(h)
    }
}

/// Listening sockets a smoltcp server keeps (smoltcp has no accept queue: a socket listens, becomes
/// the connection, and listens again once it is closed).
pub(crate) const SMOL_LISTENERS: usize = 8;
/// Client sockets a smoltcp client rotates through.
pub(crate) const SMOL_CLIENTS: usize = 8;

impl<D: Sleep> Endpoint for SmolEndpoint<'_, D> {
    type Sock = SocketHandle;

    fn poll(&mut self) -> bool {
        let before = self.dev.moved;
        let r = self.iface.poll(smoltcp::time::Instant::now(), &mut self.dev, &mut self.sockets);
        self.dev.flush();
        // Re-arm listeners that finished (closed, or in TIME-WAIT, which smoltcp gives up on reuse).
        for i in 0..self.listeners.len() {
            let h = self.listeners[i];
            let port = self.port;
            let s = self.tcp_mut(h);
            if !s.is_open() {
                let _ = s.listen(port);
                self.handed[i] = false;
            }
        }
        self.dev.moved != before || r == PollResult::SocketStateChanged
    }

    fn idle(&mut self, busy: bool) {
        if busy {
            return;
        }
        let now = smoltcp::time::Instant::now();
        let timer =
            self.iface.poll_delay(now, &self.sockets).map(|d| Duration::from_micros(d.total_micros()));
        sleep_on(&mut self.dev.dev, timer);
    }

    fn listen(&mut self, port: u16) -> Result<(), String> {
        self.port = port;
        for _ in 0..SMOL_LISTENERS {
            let mut s = self.socket();
            s.listen(port).map_err(|e| format!("smoltcp listen: {e}"))?;
            self.listeners.push(self.sockets.add(s));
            self.handed.push(false);
        }
        Ok(())
    }

    fn accept(&mut self) -> Option<SocketHandle> {
        for i in 0..self.listeners.len() {
            let h = self.listeners[i];
            if !self.handed[i] && self.tcp(h).may_send() {
                self.handed[i] = true;
                return Some(h);
            }
        }
        None
    }

    fn connect(&mut self, remote: SocketAddrV4) -> Result<SocketHandle, String> {
        let h = if let Some(&h) = self.clients.iter().find(|&&h| !self.tcp(h).is_open()) {
            h
        } else if self.clients.len() < SMOL_CLIENTS {
            let s = self.socket();
            let h = self.sockets.add(s);
            self.clients.push(h);
            h
        } else {
            return Err("smoltcp: every client socket is still open".to_owned());
        };
        let port = self.next_port;
        self.next_port = if port == u16::MAX { 49_152 } else { port + 1 };
        let remote =
            smoltcp::wire::IpEndpoint::new(smoltcp::wire::IpAddress::Ipv4(*remote.ip()), remote.port());
        let cx = self.iface.context();
        let s = self.sockets.get_mut::<stcp::Socket<'static>>(h);
        s.connect(cx, remote, port).map_err(|e| format!("smoltcp connect: {e}"))?;
        Ok(h)
    }

    fn established(&self, s: SocketHandle) -> bool {
        self.tcp(s).state() == stcp::State::Established
    }

    fn send(&mut self, s: SocketHandle, data: &[u8]) -> Result<usize, String> {
        let in_place = self.in_place;
        let s = self.tcp_mut(s);
        if !s.may_send() {
            return Ok(0);
        }
        if in_place {
            // The free space up to the end of smoltcp's ring (the caller calls again for the rest).
            let want = data.len();
            return s
                .send(|free| {
                    let n = produce(free, want);
                    (n, n)
                })
                .map_err(|e| format!("smoltcp send: {e}"));
        }
        s.send_slice(data).map_err(|e| format!("smoltcp send: {e}"))
    }

    fn recv(&mut self, s: SocketHandle, buf: &mut [u8]) -> Result<Option<usize>, String> {
        let in_place = self.in_place;
        let s = self.tcp_mut(s);
        let r = if in_place {
            // The bytes where they lie in smoltcp's ring, copied into the application's buffer as
            // tcp-lib's in-place reader copies them from the frame (in the same pieces).
            s.recv(|ring| {
                let n = ring.len().min(buf.len());
                copy_in_pieces(&mut buf[..n], &ring[..n]);
                (n, n)
            })
        } else {
            s.recv_slice(buf)
        };
        match r {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(n)),
            Err(stcp::RecvError::Finished) => Ok(Some(0)),
            // Not synchronized yet: nothing to read now.
            Err(stcp::RecvError::InvalidState)
                if matches!(
                    s.state(),
                    stcp::State::Listen | stcp::State::SynSent | stcp::State::SynReceived
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(format!("smoltcp recv: {e} in {}", s.state())),
        }
    }

    fn close(&mut self, s: SocketHandle) {
        self.tcp_mut(s).close();
    }

    fn all_acked(&self, s: SocketHandle) -> bool {
        self.tcp(s).send_queue() == 0
    }
}

/// smoltcp's congestion control: CUBIC (the `socket-tcp-cubic` feature, what its users enable and
/// what tcp-lib runs), or none with `TCP_BENCH_SMOLTCP_CC=none` (how this bench ran before: the
/// feature was off, so smoltcp sent as fast as the window allowed).
fn congestion_control() -> stcp::CongestionControl {
    match std::env::var("TCP_BENCH_SMOLTCP_CC").as_deref() {
        Ok("none") => stcp::CongestionControl::None,
        _ => stcp::CongestionControl::Cubic,
    }
}
