//! Workloads, written once against `Endpoint`.

use std::net::SocketAddrV4;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::endpoint::Endpoint;
use crate::measure::{Clock, Side};
use crate::{CHUNK, DEADLINE, MSG};

/// The byte every bulk transfer carries.
pub(crate) const FILL: u8 = 0x5a;

/// Waits (polling) until `done`, failing after [`DEADLINE`].
pub(crate) fn drive<E: Endpoint>(
    ep: &mut E,
    busy: bool,
    what: &str,
    mut step: impl FnMut(&mut E) -> Result<(bool, bool), String>,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let moved = ep.poll();
        let (done, progressed) = step(ep)?;
        if done {
            return Ok(());
        }
        if !moved && !progressed {
            if start.elapsed() > DEADLINE {
                return Err(format!("{what}: not done after {DEADLINE:?}"));
            }
            ep.idle(busy);
        }
    }
}

/// Sends `CHUNK`-sized writes of `data` on `s` until `total` bytes went (counted in `sent`) or
/// the stack takes no more; returns whether any went.
pub(crate) fn send_some<E: Endpoint>(
    ep: &mut E,
    s: E::Sock,
    data: &[u8],
    sent: &mut u64,
    total: u64,
) -> Result<bool, String> {
    let mut progressed = false;
    while *sent < total {
        let want = usize::try_from((total - *sent).min(CHUNK as u64)).unwrap_or(CHUNK);
        let n = ep.send(s, &data[..want])?;
        if n == 0 {
            break;
        }
        *sent += n as u64;
        progressed = true;
    }
    Ok(progressed)
}

/// Reads from `s` into `buf` until `total` bytes arrived (counted in `got`) or none is ready;
/// returns whether any arrived. An end of stream before `total` is an error.
pub(crate) fn recv_some<E: Endpoint>(
    ep: &mut E,
    s: E::Sock,
    buf: &mut [u8],
    got: &mut u64,
    total: u64,
) -> Result<bool, String> {
    let mut progressed = false;
    while *got < total
        && let Some(n) = ep.recv(s, buf)?
    {
        if n == 0 {
            return Err(format!("end of stream after {got} of {total} bytes"));
        }
        *got += n as u64;
        progressed = true;
    }
    Ok(progressed)
}

/// The sending side of a bulk transfer: connects to `remote`, waits at `barrier`, sends `total` bytes
/// and keeps the connection going until `done`.
pub(crate) fn bulk_sender<E: Endpoint>(
    ep: &mut E,
    remote: SocketAddrV4,
    total: u64,
    busy: bool,
    barrier: &Barrier,
    done: &AtomicBool,
) -> Result<Side, String> {
    let s = ep.connect(remote)?;
    drive(ep, busy, "bulk connect", |ep| Ok((ep.established(s), false)))?;
    barrier.wait();
    let clock = Clock::start();
    let data = vec![FILL; CHUNK];
    let mut sent = 0u64;
    drive(ep, busy, "bulk send", |ep| {
        let progressed = send_some(ep, s, &data, &mut sent, total)?;
        Ok((done.load(Ordering::Acquire), progressed))
    })?;
    Ok(clock.stop())
}

/// The receiving side of a bulk transfer: accepts on `port`, waits at `barrier`, reads `total` bytes,
/// then sets `done`.
pub(crate) fn bulk_receiver<E: Endpoint>(
    ep: &mut E,
    port: u16,
    total: u64,
    busy: bool,
    barrier: &Barrier,
    done: &AtomicBool,
) -> Result<Side, String> {
    ep.listen(port)?;
    let mut conn = None;
    drive(ep, busy, "bulk accept", |ep| {
        conn = conn.or_else(|| ep.accept());
        Ok((conn.is_some_and(|s| ep.established(s)), false))
    })?;
    let s = conn.ok_or("no connection")?;
    barrier.wait();
    let clock = Clock::start();
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    let r = drive(ep, busy, "bulk receive", |ep| {
        let progressed = recv_some(ep, s, &mut buf, &mut got, total)?;
        Ok((got >= total, progressed))
    });
    let side = clock.stop();
    done.store(true, Ordering::Release);
    r?;
    Ok(side)
}

/// The client of the transaction workload, one step at a time: `n` times connect, send a 64-byte
/// request, read the 64-byte response and the end of stream, close.
pub(crate) struct TxnClient<S> {
    remote: SocketAddrV4,
    n: u64,
    done: u64,
    /// The connection in progress: its handle, whether the request went out, response bytes.
    cur: Option<(S, bool, usize)>,
    buf: [u8; CHUNK / 64],
}

impl<S: Copy> TxnClient<S> {
    pub(crate) fn new(remote: SocketAddrV4, n: u64) -> Self {
        Self { remote, n, done: 0, cur: None, buf: [0; CHUNK / 64] }
    }

    /// One step after a poll: `(all done, progressed)`.
    pub(crate) fn step<E: Endpoint<Sock = S>>(&mut self, ep: &mut E) -> Result<(bool, bool), String> {
        let mut progressed = false;
        if self.cur.is_none() {
            if self.done == self.n {
                return Ok((true, false));
            }
            self.cur = Some((ep.connect(self.remote)?, false, 0));
            progressed = true;
        }
        if let Some((s, sent, got)) = self.cur.as_mut() {
            if !*sent && ep.established(*s) {
                if ep.send(*s, &[0x71_u8; MSG])? != MSG {
                    return Err("the request did not fit".to_owned());
                }
                *sent = true;
                progressed = true;
            }
            while let Some(k) = ep.recv(*s, &mut self.buf)? {
                progressed = true;
                if k == 0 {
                    if *got != MSG {
                        return Err(format!("response of {got} bytes"));
                    }
                    ep.close(*s);
                    self.done += 1;
                    self.cur = None;
                    break;
                }
                *got += k;
            }
        }
        Ok((false, progressed))
    }
}

/// The server of the transaction workload, one step at a time: accepts, reads the 64-byte
/// request, sends the 64-byte response and closes.
pub(crate) struct TxnServer<S> {
    conns: Vec<(S, usize)>,
    buf: [u8; MSG],
}

impl<S: Copy> TxnServer<S> {
    pub(crate) const fn new() -> Self {
        Self { conns: Vec::new(), buf: [0; MSG] }
    }

    /// One step after a poll: whether it progressed.
    pub(crate) fn step<E: Endpoint<Sock = S>>(&mut self, ep: &mut E) -> Result<bool, String> {
        let mut progressed = false;
        while let Some(s) = ep.accept() {
            self.conns.push((s, 0));
            progressed = true;
        }
        let mut i = 0;
        while i < self.conns.len() {
            let (s, got) = &mut self.conns[i];
            let s = *s;
            while *got < MSG {
                match ep.recv(s, &mut self.buf[..MSG - *got])? {
                    Some(0) => return Err("the client closed before its request".to_owned()),
                    Some(k) => {
                        *got += k;
                        progressed = true;
                    }
                    None => break,
                }
            }
            if *got == MSG {
                if ep.send(s, &[0x72_u8; MSG])? != MSG {
                    return Err("the response did not fit".to_owned());
                }
                ep.close(s);
                self.conns.swap_remove(i);
                progressed = true;
            } else {
                i += 1;
            }
        }
        Ok(progressed)
    }
}

/// The client of the transaction workload ([`TxnClient`]), on its own thread.
pub(crate) fn txn_client<E: Endpoint>(
    ep: &mut E,
    remote: SocketAddrV4,
    n: u64,
    busy: bool,
    barrier: &Barrier,
    stop: &AtomicBool,
) -> Result<Side, String> {
    barrier.wait();
    let clock = Clock::start();
    let mut client = TxnClient::new(remote, n);
    let r = drive(ep, busy, "transactions", |ep| client.step(ep));
    let side = clock.stop();
    stop.store(true, Ordering::Release);
    r?;
    Ok(side)
}

/// The server of the transaction workload ([`TxnServer`]), on its own thread, until `stop`.
pub(crate) fn txn_server<E: Endpoint>(
    ep: &mut E,
    port: u16,
    busy: bool,
    barrier: &Barrier,
    stop: &AtomicBool,
) -> Result<Side, String> {
    ep.listen(port)?;
    barrier.wait();
    let clock = Clock::start();
    let mut server = TxnServer::new();
    drive(ep, busy, "transaction server", |ep| {
        let progressed = server.step(ep)?;
        Ok((stop.load(Ordering::Acquire), progressed))
    })?;
    Ok(clock.stop())
}

/// The transaction workload with both ends on this thread, in lock step (client poll and step,
/// server poll and step, again): no waiting, no second thread, so that under callgrind the
/// instructions are the two stacks' and the workload's alone, the same from run to run.
pub(crate) fn txn_lockstep<E: Endpoint>(
    client_ep: &mut E,
    server_ep: &mut E,
    remote: SocketAddrV4,
    n: u64,
) -> Result<Side, String> {
    server_ep.listen(remote.port())?;
    let clock = Clock::start();
    lockstep_transactions(client_ep, server_ep, &mut TxnServer::new(), remote, n)?;
    Ok(clock.stop())
}

/// `n` transactions in lock step ([`txn_lockstep`]'s loop) against a server already listening
/// on `remote`'s port, whose workload state `server` carries over from one call to the next.
pub(crate) fn lockstep_transactions<E: Endpoint>(
    client_ep: &mut E,
    server_ep: &mut E,
    server: &mut TxnServer<E::Sock>,
    remote: SocketAddrV4,
    n: u64,
) -> Result<(), String> {
    let mut client = TxnClient::new(remote, n);
    let start = Instant::now();
    loop {
        client_ep.poll();
        if client.step(client_ep)?.0 {
            return Ok(());
        }
        server_ep.poll();
        server.step(server_ep)?;
        if start.elapsed() > DEADLINE {
            return Err(format!("transactions in lock step: not done after {DEADLINE:?}"));
        }
    }
}

/// A bulk transfer of `total` bytes with both ends on this thread, in lock step
/// ([`lockstep_connect`], then [`lockstep_transfer`]): as [`txn_lockstep`], for instruction counts
/// without a second thread's waiting.
pub(crate) fn bulk_lockstep<E: Endpoint>(
    client_ep: &mut E,
    server_ep: &mut E,
    remote: SocketAddrV4,
    total: u64,
) -> Result<Side, String> {
    let (c, s) = lockstep_connect(client_ep, server_ep, remote)?;
    let clock = Clock::start();
    lockstep_transfer(client_ep, server_ep, c, s, total)?;
    Ok(clock.stop())
}

/// Connects `client_ep` to `server_ep` (listening on `remote`'s port) with both on this thread,
/// polling one and the other until both ends are established: the client's and the server's
/// handles.
pub(crate) fn lockstep_connect<E: Endpoint>(
    client_ep: &mut E,
    server_ep: &mut E,
    remote: SocketAddrV4,
) -> Result<(E::Sock, E::Sock), String> {
    server_ep.listen(remote.port())?;
    let c = client_ep.connect(remote)?;
    let start = Instant::now();
    let mut conn = None;
    loop {
        client_ep.poll();
        server_ep.poll();
        conn = conn.or_else(|| server_ep.accept());
        if let Some(s) = conn.filter(|&s| server_ep.established(s) && client_ep.established(c)) {
            return Ok((c, s));
        }
        if start.elapsed() > DEADLINE {
            return Err(format!("connecting in lock step: not done after {DEADLINE:?}"));
        }
    }
}

/// Moves `total` bytes from `c` (on `client_ep`) to `s` (on `server_ep`) in lock step: the client
/// writes what its send buffer takes and polls (it sends what its window allows, a train), then
/// the server polls (it takes the train in bursts and acknowledges it) and reads, again.
pub(crate) fn lockstep_transfer<E: Endpoint>(
    client_ep: &mut E,
    server_ep: &mut E,
    c: E::Sock,
    s: E::Sock,
    total: u64,
) -> Result<(), String> {
    let start = Instant::now();
    let data = vec![FILL; CHUNK];
    let mut buf = vec![0u8; CHUNK];
    let (mut sent, mut got) = (0u64, 0u64);
    while got < total {
        send_some(client_ep, c, &data, &mut sent, total)?;
        client_ep.poll();
        server_ep.poll();
        recv_some(server_ep, s, &mut buf, &mut got, total)?;
        if start.elapsed() > DEADLINE {
            return Err(format!("bulk in lock step: {got} of {total} bytes after {DEADLINE:?}"));
        }
    }
    Ok(())
}
