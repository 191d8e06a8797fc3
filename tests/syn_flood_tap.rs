//! The reset that probing found under a SYN flood spoofed from a client's own address,
//! reproduced over TAP, packet by packet (scapy, `tests/scapy/syn_flood_reset.py`): the echo
//! server's listener is pushed into SYN-cookie mode by a spoofed flood (SYNs from an address
//! nobody answers for), and a client whose handshake ACK and first data were lost sees a SYN
//! spoofed on its own four-tuple draw a new cookie SYN-ACK. The client answers that with an ACK
//! at its `SND.NXT`, past its lost data, which fails the cookie check. Linux's listener (and ours
//! before) answers it with a reset exactly at the client's `RCV.NXT`: the live connection dies.
//! Ours now drops it (tcp-lib's listener module, "Cookies and resets"), and the client's
//! retransmitted data checks and is echoed.
//!
//! (A kernel socket cannot play the client: a segment dropped on its way out by netfilter counts
//! as not sent, so the kernel's answer never runs past the cookie; and this kernel has no tc
//! actions or netem to lose it later.)
//!
//! Without root, /dev/net/tun or scapy (`netns_test::need_scapy`, Debian
//! `python3-scapy`) it is skipped (`netns_test::skip`).

use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use netchannels::echo::{Options, run};
use netchannels::tcp_lib::wire::Ipv4Cidr;
use netns_test::ip;

const IFACE: &str = "ncsyn0";
const KERNEL_IP: &str = "10.204.0.1";
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 204, 0, 2);
const PORT: u16 = 7;
/// More spoofed SYNs than the listener's SYN queue (256) holds.
const FLOOD: usize = 400;
const PYTHON: &str = netns_test::SCAPY_PYTHON;

/// Runs the scapy script; returns its JSON line.
fn scapy_case() -> Result<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scapy/syn_flood_reset.py");
    // IFACE SERVER_IP CLIENT_IP PORT SPORT FLOOD
    let out = Command::new(PYTHON)
        .arg(script)
        .args([IFACE, &SERVER.to_string(), KERNEL_IP, &PORT.to_string(), "40000", &FLOOD.to_string()])
        .output()
        .map_err(|e| format!("cannot run {PYTHON} {script}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{script} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn in_namespace() -> Result<(), String> {
    netns_test::need_scapy()?;
    ip(&["tuntap", "add", "dev", IFACE, "mode", "tap"])?;
    ip(&["addr", "add", &format!("{KERNEL_IP}/24"), "dev", IFACE])?;
    ip(&["link", "set", IFACE, "up"])?;
    let options = Options::tap(IFACE, Ipv4Cidr::new(SERVER, 24).expect("a /24"), PORT);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let server = scope.spawn(|| run(&options, &stop));
        // The server is up once it answers a kernel connection.
        let up = TcpStream::connect_timeout(&SocketAddrV4::new(SERVER, PORT).into(), Duration::from_secs(10));
        let case = up.map_err(|e| format!("the server did not answer: {e}")).and_then(|_| scapy_case());
        // Relaxed: a plain flag; the join orders the rest.
        stop.store(true, Ordering::Relaxed);
        let report = server.join().map_err(|_| "the server panicked".to_owned())??;
        println!("{report}");
        let case = case?;
        println!("{case}");
        let has = |field: &str| case.contains(&format!("\"{field}\": true"));
        assert!(
            has("synack") && has("spoofed_synack"),
            "the listener answered both SYNs with cookies: {case}"
        );
        assert!(case.contains("\"reset\": null"), "no reset for the client's ACK: {case}");
        assert!(has("echoed"), "the retransmitted data established the connection and came back: {case}");
        let snapshot = report.snapshot();
        let stack = &snapshot.cores.first().ok_or("no core in the report")?.stack;
        assert!(stack.syn_cookies_rejected >= 1, "the client's ACK failed the cookie check: {stack:?}");
        assert!(stack.syn_cookies_accepted >= 1, "the retransmitted data checked: {stack:?}");
        Ok(())
    })
}

#[test]
fn a_spoofed_syn_flood_does_not_reset_a_client_that_lost_its_handshake_ack() {
    netns_test::in_private_namespace(in_namespace);
}
