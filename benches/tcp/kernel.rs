//! The kernel over loopback.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};

use crate::measure::{Clock, Sample, two_threads};
use crate::{CHUNK, MSG};

pub(crate) fn io_err(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

pub(crate) fn bulk_kernel(bytes: u64, ip: Ipv4Addr) -> Result<Sample, String> {
    let listener = TcpListener::bind((ip, 0)).map_err(io_err("bind"))?;
    let addr = listener.local_addr().map_err(io_err("local_addr"))?;
    let (a, b) = two_threads(
        |barrier| {
            let mut s = TcpStream::connect(addr).map_err(io_err("connect"))?;
            barrier.wait();
            let clock = Clock::start();
            let data = vec![0x5a_u8; CHUNK];
            let mut sent = 0u64;
            while sent < bytes {
                let want = usize::try_from((bytes - sent).min(CHUNK as u64)).unwrap_or(CHUNK);
                s.write_all(&data[..want]).map_err(io_err("write"))?;
                sent += want as u64;
            }
            Ok(clock.stop())
        },
        |barrier| {
            let (mut s, _) = listener.accept().map_err(io_err("accept"))?;
            barrier.wait();
            let clock = Clock::start();
            let mut buf = vec![0u8; CHUNK];
            let mut got = 0u64;
            while got < bytes {
                match s.read(&mut buf).map_err(io_err("read"))? {
                    0 => return Err(format!("end of stream after {got} bytes")),
                    n => got += n as u64,
                }
            }
            Ok(clock.stop())
        },
    )?;
    Ok(Sample { units: bytes, wall: b.end - b.start, cpu: [a.cpu, b.cpu] })
}

pub(crate) fn txn_kernel(n: u64) -> Result<Sample, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io_err("bind"))?;
    let addr = listener.local_addr().map_err(io_err("local_addr"))?;
    let (a, b) = two_threads(
        |barrier| {
            barrier.wait();
            let clock = Clock::start();
            let req = [0x71_u8; MSG];
            let mut buf = [0u8; MSG];
            for _ in 0..n {
                let mut s = TcpStream::connect(addr).map_err(io_err("connect"))?;
                s.set_nodelay(true).map_err(io_err("nodelay"))?;
                s.write_all(&req).map_err(io_err("write"))?;
                s.read_exact(&mut buf).map_err(io_err("read"))?;
                if s.read(&mut buf).map_err(io_err("read"))? != 0 {
                    return Err("more than the response".to_owned());
                }
            }
            Ok(clock.stop())
        },
        |barrier| {
            barrier.wait();
            let clock = Clock::start();
            let resp = [0x72_u8; MSG];
            let mut buf = [0u8; MSG];
            for _ in 0..n {
                let (mut s, _) = listener.accept().map_err(io_err("accept"))?;
                s.set_nodelay(true).map_err(io_err("nodelay"))?;
                s.read_exact(&mut buf).map_err(io_err("read"))?;
                s.write_all(&resp).map_err(io_err("write"))?;
            }
            Ok(clock.stop())
        },
    )?;
    Ok(Sample { units: n, wall: a.end - a.start, cpu: [a.cpu, b.cpu] })
}
