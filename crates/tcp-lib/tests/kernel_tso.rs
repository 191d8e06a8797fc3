//! TCP segmentation offload with the Linux kernel as peer: our [`Stack`] on a TAP opened with
//! offloads (`IFF_VNET_HDR`, checksum and TSO both ways), configured from the TAP's
//! `DeviceInfo::offloads` (`Config::with_device_offloads`), in a private network namespace. A
//! kernel client and our server exchange `TCP_KERNEL_TSO_BYTES` (16 MiB by default) each way at
//! once, every byte checked; our stack must have handed the kernel super-segments to cut, and
//! taken the kernel's coalesced segments (checksums trusted) whole. Over IPv4 and IPv6.
//! Addresses and the namespace as in `kernel_tap.rs`; needs root and `/dev/net/tun`, otherwise
//! each test prints `skipped: <why>`.
#![cfg(not(loom))]

mod kernel_support;

use std::net::Shutdown;
use std::time::{Duration, Instant};

use kernel_support::{
    Family, Host, Sink, Source, env_bytes, in_private_namespace, kernel_connect, kernel_read_all,
    kernel_write_all, open_tap_with, our_drain, our_feed, stack_config,
};
use netchannel::dev::{NetDevice, OFFLOAD_DATA_ROOM, TapOptions};
use netchannel::pool::{HugePages, Pool};
use tcp_lib::stack::Stack;

fn exchange_with_offloads(family: Family, port: u16) {
    in_private_namespace(move || {
        let tap = open_tap_with(TapOptions { offloads: true })?;
        let offloads = tap.info().offloads;
        if !offloads.tx_checksum || offloads.tx_tso_max == 0 {
            return Err(format!("a TAP with offloads reports {offloads:?}"));
        }
        let mut config = stack_config(&tap).with_device_offloads(offloads);
        config.tcp.send_buffer = 1 << 20;
        config.tcp.recv_buffer = 1 << 20;
        let pool = Pool::builder(2048)
            .data_room(OFFLOAD_DATA_ROOM)
            .hugepages(HugePages::Never)
            .build()
            .map_err(|e| e.to_string())?;
        config.check_offloads(pool.data_room()).map_err(|e| e.to_string())?;
        let mut host = Host::with_pool(pool, tap, config);
        let listener = host.stack.listen(port).map_err(|e| e.to_string())?;
        let bytes = env_bytes("TCP_KERNEL_TSO_BYTES", 16 << 20);
        let (kernel_seed, our_seed) = (0x6b74_736f ^ u64::from(port), 0x6f74_736f ^ u64::from(port));
        let start = Instant::now();
        std::thread::scope(|scope| -> Result<(), String> {
            let kernel = scope.spawn(move || -> Result<Sink, String> {
                let stream = kernel_connect(family, port)?;
                let mut w = stream.try_clone().map_err(|e| e.to_string())?;
                let writer = std::thread::spawn(move || -> Result<(), String> {
                    kernel_write_all(&mut w, &mut Source::new(kernel_seed, bytes))?;
                    w.shutdown(Shutdown::Write).map_err(|e| e.to_string())
                });
                let mut r = stream;
                let sink = kernel_read_all(&mut r, our_seed);
                writer.join().map_err(|_| "kernel writer panicked".to_owned())??;
                sink
            });
            let mut stream = None;
            let mut src = Source::new(our_seed, bytes);
            let mut sink = Sink::new(kernel_seed);
            let (mut shut, mut eof) = (false, false);
            let mut buf = vec![0u8; 256 * 1024];
            let result = host.run(Duration::from_secs(60), "exchange with offloads", |stack: &mut Stack| {
                stream = stream.or_else(|| stack.accept(listener));
                let Some(s) = stream else { return Ok(kernel.is_finished()) };
                our_feed(stack, s, &mut src, &mut shut)?;
                eof = eof || our_drain(stack, s, &mut sink, &mut buf)?;
                Ok(kernel.is_finished() && eof && shut)
            });
            let kernel_got = kernel.join().map_err(|_| "kernel thread panicked".to_owned())?;
            result?;
            sink.check(bytes, "kernel -> us")?;
            kernel_got?.check(bytes, "us -> kernel")?;
            let elapsed = start.elapsed();
            let (ours, tap) = (*host.stack.stats(), host.dev.tap_stats());
            println!(
                "{family:?}: {bytes} bytes each way with offloads, byte-exact, in {elapsed:.2?} ({:.1} MiB/s each way); \
                 we sent {} super-segments, took {} coalesced frames, {} checksums trusted",
                bytes as f64 / f64::from(1 << 20) / elapsed.as_secs_f64(),
                ours.tx_super_segments,
                tap.rx_coalesced,
                ours.rx_checksum_trusted,
            );
            if ours.tx_super_segments == 0 || tap.tx_super_segments != ours.tx_super_segments {
                return Err(format!("super-segments: ours {ours:?}, the TAP's {tap:?}"));
            }
            if tap.rx_coalesced == 0 || ours.rx_checksum_trusted == 0 || ours.rx_malformed != 0 {
                return Err(format!("the kernel's coalesced segments: ours {ours:?}, the TAP's {tap:?}"));
            }
            Ok(())
        })?;
        host.check_leaks()
    });
}

#[test]
fn bulk_both_ways_with_the_kernel_over_tap_offloads() {
    exchange_with_offloads(Family::V4, 5101);
}

#[test]
fn bulk_both_ways_with_the_kernel_over_tap_offloads_ipv6() {
    exchange_with_offloads(Family::V6, 5102);
}
