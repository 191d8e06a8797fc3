//! Receive-buffer autotuning (`tcp::Config::recv_buffer_max`) with the kernel as the sender:
//! our stack on a TAP in a private namespace receives from a kernel socket through a path of
//! 5 ms each way and 20 MB/s (our `FaultInjector`, no loss), a bandwidth-delay product of about
//! 200 KB. A 64 KiB receive buffer holds the kernel to 64 KiB a round trip (about 6.5 MB/s);
//! the same buffer with autotuning grows as we read and lets the path's rate through. Both run
//! in the same namespace one after the other, the kernel's data checked byte for byte, and then
//! the anchor: a second kernel in our place (its own namespace behind a relay, through the same
//! path) receiving with Linux's own autotuning. Over IPv6 too (`_ipv6`: ours fixed and
//! autotuned).
//!
//! `TCP_KERNEL_AUTOTUNE_BYTES` sets the transfer (8 MiB by default). Needs root and
//! `/dev/net/tun`; otherwise the test prints `skipped: <why>`.
#![cfg(not(loom))]

mod kernel_support;

use std::net::{Shutdown, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kernel_support::{
    Family, Host, Sink, Source, env_bytes, in_private_namespace, kernel_accept, kernel_connect,
    kernel_read_all, kernel_write_all, new_pool, open_tap, our_drain, stack_config,
};
use netchannel::dev::{DirectionConfig, FaultConfig, FaultInjector, RateLimit};
use tcp_lib::tcp::Stats;

/// One way of the path: 5 ms and 20 MB/s, frames beyond the rate queued (up to the injector's
/// bound), nothing lost by the injector itself.
fn bottleneck() -> DirectionConfig {
    DirectionConfig {
        delay: Duration::from_millis(5),
        rate: Some(RateLimit { bytes_per_sec: 20_000_000, burst_bytes: 64 * 1024 }),
        ..DirectionConfig::default()
    }
}

/// The path both ways, its injector seeded by `port`.
fn path(port: u16) -> FaultConfig {
    FaultConfig { seed: u64::from(port), rx: bottleneck(), tx: bottleneck(), max_held: 4096 }
}

/// The kernel sends `bytes` to our listener on `port`, our side starting with a 64 KiB receive
/// buffer that may grow to `recv_buffer_max`: the time from our accept to the end of the
/// stream, and our connection's statistics.
fn receive(
    family: Family,
    port: u16,
    bytes: u64,
    recv_buffer_max: usize,
) -> Result<(Duration, Stats), String> {
    let tap = open_tap()?;
    let pool = new_pool()?;
    let mut config = stack_config(&tap);
    config.tcp.recv_buffer = 64 * 1024;
    config.tcp.recv_buffer_max = recv_buffer_max;
    let dev = FaultInjector::new(tap, &pool, path(port));
    let mut host = Host::with_pool(pool, dev, config);
    let listener = host.stack.listen(port).map_err(|e| e.to_string())?;
    let seed = 0x6175_746f ^ u64::from(port);
    let sender = std::thread::spawn(move || -> Result<(), String> {
        let mut s = kernel_connect(family, port)?;
        kernel_write_all(&mut s, &mut Source::new(seed, bytes))?;
        s.shutdown(Shutdown::Write).map_err(|e| e.to_string())
    });
    let (mut stream, mut accepted) = (None, None);
    let mut sink = Sink::new(seed);
    let mut buf = vec![0u8; 64 * 1024];
    let mut done = None;
    host.run(Duration::from_secs(60), "the kernel's transfer", |stack| {
        if stream.is_none() {
            stream = stack.accept(listener);
            accepted = stream.map(|_| Instant::now());
        }
        let Some(s) = stream else { return Ok(false) };
        if our_drain(stack, s, &mut sink, &mut buf)? && done.is_none() {
            done = Some(Instant::now());
        }
        Ok(done.is_some() && sender.is_finished())
    })?;
    sender.join().map_err(|_| "the kernel's sender panicked".to_owned())??;
    sink.check(bytes, "kernel -> us")?;
    let s = stream.ok_or("no connection")?;
    let stats = host.stack.connection_stats(s).map_err(|e| e.to_string())?;
    let took = done.zip(accepted).map(|(d, a)| d.duration_since(a)).ok_or("no end")?;
    host.stack.close(s).map_err(|e| e.to_string())?;
    host.idle(Duration::from_millis(50))?;
    host.stack.unlisten(listener).map_err(|e| e.to_string())?;
    host.check_leaks()?;
    Ok((took, stats))
}

/// The anchor: a second kernel in our stack's place (`kernel_support::peer`) receives the same
/// transfer through the same path, with its own receive autotuning (`tcp_rmem` as the host
/// has it): the time from its accept to the end of the stream.
fn kernel_receives(port: u16, bytes: u64) -> Result<Duration, String> {
    let tap = open_tap()?;
    let pool = new_pool()?;
    let cache = pool.cache();
    let mut near = FaultInjector::new(tap, &pool, path(port));
    let seed = 0x6175_746f ^ u64::from(port);
    let failed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let failed = &failed;
        let (tap_tx, tap_rx) = std::sync::mpsc::channel();
        let peer = scope.spawn(move || -> Result<Duration, String> {
            let r = (|| {
                let tap = kernel_support::peer::enter_peer_namespace()?;
                let listener =
                    TcpListener::bind(Family::V4.stack(port)).map_err(|e| format!("peer bind: {e}"))?;
                tap_tx.send(tap).map_err(|_| "the relay is gone".to_owned())?;
                let mut s = kernel_accept(&listener)?;
                let accepted = Instant::now();
                kernel_read_all(&mut s, seed)?.check(bytes, "kernel -> kernel in our place")?;
                Ok(accepted.elapsed())
            })();
            failed.fetch_or(r.is_err(), Ordering::SeqCst);
            r
        });
        let Ok(mut far) = tap_rx.recv() else {
            return Err(peer.join().map_err(|_| "peer panicked".to_owned())?.err().unwrap_or_default());
        };
        let sender = scope.spawn(move || -> Result<(), String> {
            let r = (|| {
                let mut s = kernel_connect(Family::V4, port)?;
                kernel_write_all(&mut s, &mut Source::new(seed, bytes))?;
                s.shutdown(Shutdown::Write).map_err(|e| e.to_string())
            })();
            failed.fetch_or(r.is_err(), Ordering::SeqCst);
            r
        });
        kernel_support::peer::relay(
            &mut near,
            &mut far,
            &cache,
            || (peer.is_finished() && sender.is_finished()) || failed.load(Ordering::SeqCst),
            Duration::from_secs(60),
        )?;
        sender.join().map_err(|_| "the kernel's sender panicked".to_owned())??;
        peer.join().map_err(|_| "peer panicked".to_owned())?
    })
}

/// Megabytes a second.
fn rate(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

/// Checks that the fixed buffer stayed, the tuned one grew within its maximum, and the tuned
/// receiver took at most two thirds of the fixed one's time; says both.
fn fixed_against_tuned(
    bytes: u64,
    (fixed, fixed_stats): (Duration, &Stats),
    (tuned, tuned_stats): (Duration, &Stats),
) -> Result<String, String> {
    if (fixed_stats.recv_buffer, fixed_stats.recv_buffer_raises) != (64 * 1024, 0) {
        return Err(format!("the fixed buffer moved: {fixed_stats:?}"));
    }
    if tuned_stats.recv_buffer_raises == 0 || tuned_stats.recv_buffer > 6 << 20 {
        return Err(format!("the tuned buffer did not grow, or past its maximum: {tuned_stats:?}"));
    }
    // 64 KiB a round trip of at least 10 ms is at most 6.6 MB/s; the path allows 20.
    if tuned.as_secs_f64() * 1.5 > fixed.as_secs_f64() {
        return Err(format!("autotuned {tuned:?} is not 1.5 times faster than fixed {fixed:?}"));
    }
    Ok(format!(
        "{bytes} bytes from the kernel through 10 ms and 20 MB/s: a fixed 64 KiB buffer {fixed:.2?} ({:.1} MB/s); \
         autotuned to at most 6 MiB {tuned:.2?} ({:.1} MB/s), the buffer {} bytes after {} raises",
        rate(bytes, fixed),
        rate(bytes, tuned),
        tuned_stats.recv_buffer,
        tuned_stats.recv_buffer_raises,
    ))
}

/// With autotuning our receiver lets the kernel send at the path's rate where a fixed 64 KiB
/// buffer holds it to a window a round trip, the buffer it grows stays within its maximum, and
/// it takes no more than twice what a kernel in our place takes (about the same, measured).
#[test]
fn autotuning_lets_the_kernel_fill_the_path() {
    in_private_namespace(|| {
        let bytes = env_bytes("TCP_KERNEL_AUTOTUNE_BYTES", 8 << 20);
        let (fixed, fixed_stats) = receive(Family::V4, 5301, bytes, 0)?;
        let (tuned, tuned_stats) = receive(Family::V4, 5302, bytes, 6 << 20)?;
        let kernel = kernel_receives(5303, bytes)?;
        println!(
            "{}; a kernel in our place {kernel:.2?} ({:.1} MB/s)",
            fixed_against_tuned(bytes, (fixed, &fixed_stats), (tuned, &tuned_stats))?,
            rate(bytes, kernel),
        );
        // Linux's own autotuning through the same path: ours should not be far behind it.
        if tuned.as_secs_f64() > 2.0 * kernel.as_secs_f64() {
            return Err(format!("autotuned {tuned:?} against the kernel in our place's {kernel:?}"));
        }
        Ok(())
    });
}

/// The same over IPv6, our receiver fixed and autotuned (the kernel in our place has only an
/// IPv4 address in its namespace: no anchor here).
#[test]
fn autotuning_lets_the_kernel_fill_the_path_ipv6() {
    in_private_namespace(|| {
        let bytes = env_bytes("TCP_KERNEL_AUTOTUNE_BYTES", 8 << 20);
        let fixed = receive(Family::V6, 5311, bytes, 0)?;
        let tuned = receive(Family::V6, 5312, bytes, 6 << 20)?;
        println!("IPv6: {}", fixed_against_tuned(bytes, (fixed.0, &fixed.1), (tuned.0, &tuned.1))?);
        Ok(())
    });
}
