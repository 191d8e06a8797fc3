//! `hping3 --flood` of fourteen kinds, one after another, while legitimate kernel clients open
//! connection after connection and echo random data, every byte checked. Every client session
//! must finish byte-exact (TCP's retransmissions carry them through the frames the flood makes
//! the TAP drop), the server must close exactly those sessions cleanly, connections no client ran
//! stay few (see the comment in `run`), and afterwards it must still serve.
//!
//! The rate printed per kind is what reached the TAP's queue (the kernel end's `tx_packets`) and
//! what the queue dropped (`tx_dropped`, the server being slower than the flood), per second.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Net, echo_client, need, serve};

const NET: Net = Net { iface: "ncadv1", net: 211, plain_frames: false };
const HPING3: &str = "/usr/sbin/hping3";
/// Kernel clients, each running sessions one after another while the floods last.
const CLIENTS: u64 = 20;
/// How long each kind floods.
const EACH: Duration = Duration::from_secs(1);

/// The kinds: a name and hping3's arguments (the target is appended).
const KINDS: [(&str, &[&str]); 14] = [
    ("SYN", &["-S", "-p", "7"]),
    ("ACK", &["-A", "-p", "7"]),
    ("FIN", &["-F", "-p", "7"]),
    ("RST", &["-R", "-p", "7"]),
    ("XMAS (FIN+PSH+URG)", &["-F", "-P", "-U", "-p", "7"]),
    ("NULL", &["-p", "7"]),
    ("SYN+FIN", &["-S", "-F", "-p", "7"]),
    ("PSH+ACK with 512 bytes", &["-P", "-A", "-d", "512", "-p", "7"]),
    ("UDP", &["--udp", "-p", "7"]),
    ("ICMP echo", &["--icmp"]),
    ("fragmented SYN with 64 bytes", &["-S", "-f", "-d", "64", "-p", "7"]),
    ("SYN from random sources", &["-S", "--rand-source", "-p", "7"]),
    ("SYN with bad checksums", &["-S", "-b", "-p", "7"]),
    ("SYN to every port", &["-S", "-p", "++1"]),
];

/// The kernel end's transmit counters (frames into the TAP's queue, frames it dropped), from
/// `/proc/thread-self/net/dev`: this thread's namespace (sysfs shows the namespace it was mounted in).
fn tx_counters(iface: &str) -> Result<(u64, u64), String> {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev")
        .map_err(|e| format!("/proc/thread-self/net/dev: {e}"))?;
    let line = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(iface).and_then(|rest| rest.strip_prefix(':')))
        .ok_or_else(|| format!("{iface} is not in /proc/thread-self/net/dev"))?;
    // Receive: bytes packets errs drop fifo frame compressed multicast; transmit: bytes packets errs drop ...
    let fields: Vec<u64> = line.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    match (fields.get(9), fields.get(11)) {
        (Some(&packets), Some(&dropped)) => Ok((packets, dropped)),
        _ => Err(format!("cannot read {iface}'s counters from {line:?}")),
    }
}

/// Runs one flood for [`EACH`]; returns (frames into the TAP's queue, frames it dropped) per second.
fn flood(kind: &str, args: &[&str], target: &str) -> Result<(f64, f64), String> {
    let (tx0, drop0) = tx_counters(NET.iface)?;
    let started = Instant::now();
    let mut child = Command::new(HPING3)
        .args(args)
        .args(["--flood", "-q", target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run hping3 ({kind}): {e}"))?;
    std::thread::sleep(EACH);
    if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        return Err(format!("hping3 {} ({kind}) stopped early ({status}): {err}", args.join(" ")));
    }
    let _ = child.kill();
    let _ = child.wait();
    let secs = started.elapsed().as_secs_f64();
    let (tx1, drop1) = tx_counters(NET.iface)?;
    Ok(((tx1 - tx0) as f64 / secs, (drop1 - drop0) as f64 / secs))
}

pub(crate) fn run() -> Result<(), String> {
    need(HPING3, "hping3")?;
    let done = AtomicBool::new(false);
    let sessions = AtomicU64::new(0);
    let bytes = AtomicU64::new(0);
    let target = NET.server().to_string();
    let (rates, report) = serve(NET, || {
        std::thread::scope(|s| {
            let clients: Vec<_> = (0..CLIENTS)
                .map(|i| {
                    let (done, sessions, bytes) = (&done, &sessions, &bytes);
                    s.spawn(move || -> Result<(), String> {
                        let mut n = 0;
                        // Relaxed: a plain flag.
                        while n < 2 || !done.load(Ordering::Relaxed) {
                            let seed = i * 1000 + n;
                            bytes.fetch_add(echo_client(NET.server(), seed, 4, 4096)?, Ordering::Relaxed);
                            sessions.fetch_add(1, Ordering::Relaxed);
                            n += 1;
                        }
                        Ok(())
                    })
                })
                .collect();
            let mut rates = Vec::new();
            let mut result = Ok(());
            // NC_ADV_FLOODS=1,4: only those kinds (numbered from 1), to look into one.
            let only: Vec<usize> = std::env::var("NC_ADV_FLOODS")
                .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
                .unwrap_or_default();
            for (i, (kind, args)) in KINDS.into_iter().enumerate() {
                if !only.is_empty() && !only.contains(&(i + 1)) {
                    continue;
                }
                match flood(kind, args, &target) {
                    Ok(rate) => rates.push((kind, rate)),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            done.store(true, Ordering::Relaxed);
            for c in clients {
                c.join().map_err(|_| "a client panicked".to_owned())??;
            }
            result.map(|()| rates)
        })
    })?;
    for (kind, (rate, dropped)) in &rates {
        println!(
            "flood {kind:<30} {:>9.0} frames/s into the TAP, {:>9.0}/s dropped at its queue",
            rate, dropped
        );
    }
    let sessions = sessions.load(Ordering::Relaxed);
    println!(
        "{sessions} client sessions, {} bytes echoed byte-exact beside the floods",
        bytes.load(Ordering::Relaxed)
    );
    let core = &report.cores[0];
    // Every client session (and serve's two, before and after) closed cleanly on the server too,
    // and nothing else did: a flood segment that completed a handshake and then closed, or that
    // broke a legitimate connection the client then survived, would show here.
    if core.closed != sessions + 2 {
        return Err(format!(
            "the server closed {} connections cleanly; the clients ran {sessions} sessions (+2)\n{report}\nstack counters: {:?}",
            core.closed, report.runtime.snapshot.cores[0].stack
        ));
    }
    // Connections no client ran. The mechanism seen: after a SYN flood a client connection born
    // from a SYN cookie ends; the kernel's TIME-WAIT socket for it answers a flood segment's
    // reply with its last ACK, and since an echo connection advances both sequence numbers by the
    // same count, that ACK re-validates the old cookie (RFC 4987 §3.6 cookies encode only the
    // ISNs) while it is within its two periods: an established connection the peer does not know,
    // which the echo service holds until it stops. Printed below, and bounded: at most 64, or 1%
    // of the sessions when more ran (how many arise depends on how the floods and the sessions
    // interleave: 2, 7, 33 and 118 in four runs of 17.5k to 20.4k sessions each).
    let ghosts = core.served - core.closed;
    println!(
        "{ghosts} connection(s) no client ran ({} failed, {} open at exit); stack: {} cookies sent, {} accepted, {} rejected",
        core.failed,
        core.open_at_exit,
        report.runtime.snapshot.cores[0].stack.syn_cookies_sent,
        report.runtime.snapshot.cores[0].stack.syn_cookies_accepted,
        report.runtime.snapshot.cores[0].stack.syn_cookies_rejected,
    );
    if ghosts > 64.max(sessions / 100) {
        return Err(format!("{ghosts} connections established that no client ran\n{report}"));
    }
    let stats = &report.runtime.snapshot.cores[0];
    if stats.connections > 1024 {
        return Err(format!("{} connections still held after the floods:\n{report}", stats.connections));
    }
    Ok(())
}
