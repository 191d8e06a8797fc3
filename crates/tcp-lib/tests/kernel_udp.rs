//! UDP with the Linux kernel as the peer: our stack on a TAP in a private network namespace (see
//! `kernel_support`), the kernel's UDP behind `std::net::UdpSocket` on threads in the namespace.
//!
//! * a kernel socket sends datagrams of varied sizes (0 to 1472 bytes, the most a 1500-byte MTU
//!   carries) to our UDP echo, one at a time and then in bursts of 32, and checks every echo
//!   byte-exact and in order; then its connected socket, sending
//!   to a port of ours with no socket, sees `ECONNREFUSED` from our ICMP port unreachable;
//! * our socket sends datagrams of varied sizes to a kernel echo and checks every echo.
//!
//! Both tests run over IPv4 (the plain name) and IPv6 (`_ipv6`; datagrams up to 1452 bytes there,
//! and the port unreachable an ICMPv6 one). Addresses: the kernel 10.88.0.1/24 and fd00:88::1 on
//! `ktap0`, our stack 10.88.0.2 and fd00:88::2. Needs root and
//! `/dev/net/tun`; otherwise each test prints `skipped: <why>` (`netns_test::skip`).
#![cfg(not(loom))]

mod kernel_support;

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use kernel_support::{Family, Host, fill, in_private_namespace, open_tap, splitmix, stack_config};
use tcp_lib::stack::Error;

/// Datagrams each way, one at a time.
const DATAGRAMS: u64 = 400;
/// Then bursts of `BURST` datagrams in flight at once, from the kernel to our echo.
const BURSTS: u64 = 10;
const BURST: u64 = 32;
/// How long a kernel socket waits for one echo (the TAP loses nothing: this only bounds a hang).
const ECHO_TIMEOUT: Duration = Duration::from_secs(5);

/// The most payload a 1500-byte MTU carries in one datagram over `family`.
fn max_payload(family: Family) -> usize {
    match family {
        Family::V4 => 1472,
        Family::V6 => 1452,
    }
}

/// The `i`th datagram of a run: a size from 0 to the family's largest (both ends included now
/// and then) and bytes from the shared generator.
fn datagram(family: Family, i: u64) -> Vec<u8> {
    let max = max_payload(family);
    let len = match i % 50 {
        0 => 0,
        1 => max,
        _ => usize::try_from(splitmix(i) % (max as u64 + 1)).unwrap_or(0),
    };
    let mut out = vec![0u8; len];
    fill(i, 0, &mut out);
    out
}

fn kernel_socket(family: Family) -> Result<UdpSocket, String> {
    let s = UdpSocket::bind(family.kernel(0)).map_err(|e| format!("kernel bind: {e}"))?;
    s.set_read_timeout(Some(ECHO_TIMEOUT)).map_err(|e| e.to_string())?;
    Ok(s)
}

/// The kernel's side of the first test: echoes checked, then ECONNREFUSED.
fn kernel_client(family: Family) -> Result<(), String> {
    let s = kernel_socket(family)?;
    s.connect(family.stack(7)).map_err(|e| format!("kernel connect: {e}"))?;
    let mut buf = vec![0u8; 2048];
    for i in 0..DATAGRAMS {
        let sent = datagram(family, i);
        s.send(&sent).map_err(|e| format!("kernel send #{i}: {e}"))?;
        let n = s.recv(&mut buf).map_err(|e| format!("kernel recv #{i} ({} bytes): {e}", sent.len()))?;
        if buf[..n] != sent[..] {
            return Err(format!("echo #{i}: {n} bytes back for {}, or different bytes", sent.len()));
        }
    }
    // Bursts: 32 datagrams in flight at once, echoed in order (the TAP does not reorder).
    for round in 0..BURSTS {
        let first = DATAGRAMS + round * BURST;
        for i in first..first + BURST {
            s.send(&datagram(family, i)).map_err(|e| format!("kernel send #{i} (burst): {e}"))?;
        }
        for i in first..first + BURST {
            let n = s.recv(&mut buf).map_err(|e| format!("kernel recv #{i} (burst): {e}"))?;
            if buf[..n] != datagram(family, i)[..] {
                return Err(format!("burst echo #{i}: {n} bytes, or different bytes, or out of order"));
            }
        }
    }
    // A port of ours with no socket: our port unreachable reaches the connected socket.
    let closed = kernel_socket(family)?;
    closed.connect(family.stack(9)).map_err(|e| format!("kernel connect :9: {e}"))?;
    closed.send(b"anyone?").map_err(|e| format!("kernel send :9: {e}"))?;
    match closed.recv(&mut buf) {
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Ok(()),
        other => Err(format!("kernel recv from our closed port: {other:?}, not ECONNREFUSED")),
    }
}

#[test]
fn kernel_udp_client_to_our_echo_byte_exact_then_port_unreachable() {
    kernel_udp_client_to_our_echo(Family::V4);
}

#[test]
fn kernel_udp_client_to_our_echo_byte_exact_then_port_unreachable_ipv6() {
    kernel_udp_client_to_our_echo(Family::V6);
}

fn kernel_udp_client_to_our_echo(family: Family) {
    in_private_namespace(move || {
        let tap = open_tap()?;
        let config = stack_config(&tap);
        let mut host = Host::new(tap, config)?;
        let server =
            host.stack.udp_bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 7))).map_err(|e| e.to_string())?;
        let kernel = std::thread::spawn(move || kernel_client(family));
        let mut buf = vec![0u8; 2048];
        host.run(Duration::from_secs(60), "UDP echo for the kernel", |stack| {
            loop {
                match stack.udp_recv_from(server, &mut buf) {
                    Ok(r) => {
                        stack
                            .udp_send_to(server, &buf[..r.len], r.from)
                            .map_err(|e| format!("our send: {e}"))?;
                    }
                    Err(Error::WouldBlock) => break,
                    Err(e) => return Err(format!("our recv: {e}")),
                }
            }
            Ok(kernel.is_finished())
        })?;
        kernel.join().map_err(|_| "kernel thread panicked")??;
        let s = host.stack.stats();
        let want = DATAGRAMS + BURSTS * BURST;
        if s.udp_datagrams_in != want || s.udp_datagrams_out != want {
            return Err(format!(
                "{} in, {} out: {want} expected each way",
                s.udp_datagrams_in, s.udp_datagrams_out
            ));
        }
        if (s.udp_no_socket, s.icmp_port_unreachable) != (1, 1) {
            return Err(format!(
                "no socket {}, port unreachable sent {}",
                s.udp_no_socket, s.icmp_port_unreachable
            ));
        }
        println!(
            "{want} datagrams echoed byte-exact for the kernel (one at a time, then in bursts of {BURST}); ECONNREFUSED after our port unreachable"
        );
        host.check_leaks()
    });
}

#[test]
fn our_udp_client_to_kernel_echo_byte_exact() {
    our_udp_client_to_kernel_echo(Family::V4);
}

#[test]
fn our_udp_client_to_kernel_echo_byte_exact_ipv6() {
    our_udp_client_to_kernel_echo(Family::V6);
}

fn our_udp_client_to_kernel_echo(family: Family) {
    in_private_namespace(move || {
        let tap = open_tap()?;
        let config = stack_config(&tap);
        let mut host = Host::new(tap, config)?;
        let echo = kernel_socket(family)?;
        let echo_addr = echo.local_addr().map_err(|e| e.to_string())?;
        let kernel = std::thread::spawn(move || -> Result<(), String> {
            let mut buf = vec![0u8; 2048];
            for i in 0..DATAGRAMS {
                let (n, from) =
                    echo.recv_from(&mut buf).map_err(|e| format!("kernel recv_from #{i}: {e}"))?;
                echo.send_to(&buf[..n], from).map_err(|e| format!("kernel send_to #{i}: {e}"))?;
            }
            Ok(())
        });
        let client = host.stack.udp_bind(family.stack(0)).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 2048];
        let (mut next, mut outstanding) = (0u64, false);
        host.run(Duration::from_secs(60), "UDP to the kernel's echo", |stack| {
            if outstanding {
                match stack.udp_recv_from(client, &mut buf) {
                    Ok(r) => {
                        let want = datagram(family, next - 1);
                        if r.from != echo_addr || buf[..r.len] != want[..] {
                            return Err(format!(
                                "echo #{}: {} bytes from {} for {}",
                                next - 1,
                                r.len,
                                r.from,
                                want.len()
                            ));
                        }
                        outstanding = false;
                    }
                    Err(Error::WouldBlock) => return Ok(false),
                    Err(e) => return Err(format!("our recv: {e}")),
                }
            }
            if next == DATAGRAMS {
                return Ok(true);
            }
            stack
                .udp_send_to(client, &datagram(family, next), echo_addr)
                .map_err(|e| format!("our send #{next}: {e}"))?;
            (next, outstanding) = (next + 1, true);
            Ok(false)
        })?;
        kernel.join().map_err(|_| "kernel thread panicked")??;
        println!("{DATAGRAMS} datagrams echoed byte-exact by the kernel");
        host.check_leaks()
    });
}
