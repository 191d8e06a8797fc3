//! Over TAP, the kernel as the peer (run inside a private namespace).

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Instant;

use netchannel::dev::TapOptions;

use crate::endpoint::{Endpoint, InPlace, LibEndpoint};
use crate::kernel::io_err;
use crate::measure::{Clock, Sample, Side};
use crate::settings::Settings;
use crate::smol::SmolEndpoint;
use crate::stacks::{Kind, new_offload_pool, new_pool};
use crate::workload::{drive, recv_some, send_some};
use crate::{CHUNK, DEADLINE, PORT, TAP_KERNEL_IP, TAP_NAME, TAP_STACK_IP, common, netns};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TapMode {
    /// The kernel reads what the stack sends.
    Reader,
    /// The kernel writes, the stack receives.
    Writer,
}

/// One transfer of `bytes` between the stack of `kind` on a fresh TAP and a kernel socket; the stack
/// listens, the kernel connects (as in smoltcp's benchmark). Wall time runs from the kernel's
/// `connect` to the last byte read by the receiving application.
pub(crate) fn tap_run(kind: Kind, mode: TapMode, s: &Settings) -> Result<Sample, String> {
    let offloads = kind == Kind::TcpLibTso;
    let tap = netns::open_tap_with(TAP_NAME, TAP_KERNEL_IP, TapOptions { offloads })?;
    let pool = if offloads { new_offload_pool()? } else { new_pool()? };
    let cache = pool.cache();
    let bytes = s.tap_bytes;
    let busy = s.busy;
    let done = Arc::new(AtomicBool::new(false));
    let kernel = {
        let done = Arc::clone(&done);
        thread::spawn(move || -> Result<(Side, Instant), String> {
            common::pin_to_cpu(0);
            let start = Instant::now();
            let clock = Clock::start();
            let mut sock =
                TcpStream::connect_timeout(&SocketAddrV4::new(TAP_STACK_IP, PORT).into(), DEADLINE)
                    .map_err(io_err("kernel connect"))?;
            sock.set_read_timeout(Some(DEADLINE)).map_err(io_err("timeout"))?;
            sock.set_write_timeout(Some(DEADLINE)).map_err(io_err("timeout"))?;
            let mut buf = vec![0x5a_u8; CHUNK];
            let mut moved = 0u64;
            let r = match mode {
                TapMode::Reader => loop {
                    if moved >= bytes {
                        break Ok(());
                    }
                    match sock.read(&mut buf) {
                        Ok(0) => break Err(format!("kernel: end of stream after {moved} bytes")),
                        Ok(n) => moved += n as u64,
                        Err(e) => break Err(format!("kernel read: {e}")),
                    }
                },
                TapMode::Writer => loop {
                    if moved >= bytes {
                        break Ok(());
                    }
                    let want = usize::try_from((bytes - moved).min(CHUNK as u64)).unwrap_or(CHUNK);
                    if let Err(e) = sock.write_all(&buf[..want]) {
                        break Err(format!("kernel write: {e}"));
                    }
                    moved += want as u64;
                },
            };
            let side = clock.stop();
            if mode == TapMode::Reader {
                done.store(true, Ordering::Release);
            }
            r.map(|()| (side, start))
        })
    };
    common::pin_to_cpu(1);
    let ours = match kind {
        Kind::TcpLib => {
            tap_stack(&mut LibEndpoint::new(tap, &cache, TAP_STACK_IP, s.buf), mode, bytes, busy, &done)
        }
        Kind::TcpLibInPlace => {
            let mut ep = LibEndpoint::new(tap, &cache, TAP_STACK_IP, s.buf);
            ep.in_place = Some(InPlace::new());
            tap_stack(&mut ep, mode, bytes, busy, &done)
        }
        Kind::TcpLibTso => {
            let mut ep = LibEndpoint::with_offloads(tap, &cache, TAP_STACK_IP, s.buf);
            let side = tap_stack(&mut ep, mode, bytes, busy, &done);
            let t = ep.dev.tap_stats();
            eprintln!(
                "  tcp-lib-tso {mode:?}: {} super-segments out, {} coalesced frames in, {} checksums trusted",
                t.tx_super_segments,
                t.rx_coalesced,
                ep.stack.stats().rx_checksum_trusted
            );
            side
        }
        Kind::Smoltcp => {
            tap_stack(&mut SmolEndpoint::new(tap, &cache, TAP_STACK_IP, s.buf), mode, bytes, busy, &done)
        }
        // The TAP runs compare the stacks against the kernel over IPv4; the IPv6 twin runs on the
        // in-memory link.
        Kind::TcpLibV6 => Err("tcp-lib-v6 runs on the in-memory link only".to_owned()),
        Kind::TcpLibInPlaceRw | Kind::TcpLibByRef | Kind::SmoltcpInPlace => {
            Err(format!("{} runs on the in-memory link only", kind.name()))
        }
    };
    done.store(true, Ordering::Release);
    let (k, kstart) = kernel.join().map_err(|_| "the kernel thread panicked".to_owned())??;
    let ours = ours?;
    let end = if mode == TapMode::Reader { k.end } else { ours.end };
    Ok(Sample { units: bytes, wall: end - kstart, cpu: [ours.cpu, k.cpu] })
}

/// Our side over TAP: listen, accept, then send or receive `bytes`.
pub(crate) fn tap_stack<E: Endpoint>(
    ep: &mut E,
    mode: TapMode,
    bytes: u64,
    busy: bool,
    done: &AtomicBool,
) -> Result<Side, String> {
    let clock = Clock::start();
    ep.listen(PORT)?;
    let mut conn = None;
    drive(ep, busy, "tap accept", |ep| {
        conn = conn.or_else(|| ep.accept());
        Ok((conn.is_some_and(|s| ep.established(s)), false))
    })?;
    let s = conn.ok_or("no connection")?;
    let mut buf = vec![0x5a_u8; CHUNK];
    let mut moved = 0u64;
    match mode {
        TapMode::Reader => drive(ep, busy, "tap send", |ep| {
            let progressed = send_some(ep, s, &buf, &mut moved, bytes)?;
            Ok((done.load(Ordering::Acquire) && ep.all_acked(s), progressed))
        })?,
        TapMode::Writer => drive(ep, busy, "tap receive", |ep| {
            let progressed = recv_some(ep, s, &mut buf, &mut moved, bytes)?;
            Ok((moved >= bytes, progressed))
        })?,
    }
    let side = clock.stop();
    ep.close(s);
    // Let the close go out so the kernel's side ends cleanly.
    for _ in 0..10 {
        ep.poll();
    }
    Ok(side)
}
