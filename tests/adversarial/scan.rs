//! nmap's TCP scans over ports 1-1024: only the echo port may look open, and every other port
//! must answer as a closed port answers (RFC 9293 §3.10.7.1: a reset), so that nmap folds them
//! into one "closed" (or, for the ACK scan, "unfiltered") line.
//!
//! * `-sS` (SYN): 7 open (a SYN-ACK), the rest closed (RST).
//! * `-sF`, `-sX`, `-sN` (FIN; FIN+PSH+URG; no flags): 7 `open|filtered` (RFC 9293 §3.10.7.2: a
//!   listener drops them), the rest closed.
//! * `-sA` (ACK): every port unfiltered (a listener and a closed port both reset an ACK).
//! * `-sW` (window), `-sM` (Maimon, FIN+ACK): nothing open (our resets advertise no window, and a
//!   listener resets FIN+ACK).
//! * `-sV -p 7`: open, and nmap names it echo.
//! * `-O -p 7,9`: OS detection's odd probes; 7 still open, 9 closed.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use super::{Net, need, run_bounded, serve};

const NET: Net = Net { iface: "ncadv2", net: 212, plain_frames: false };
const NMAP: &str = "/usr/bin/nmap";
const LIMIT: Duration = Duration::from_secs(120);

/// What `-oG` says of the host: the ports it lists (port, state, service) and the state it folded
/// the rest into (`closed (1023)`).
#[derive(Debug, Default)]
struct Grepable {
    ports: BTreeMap<u16, (String, String)>,
    ignored: Option<String>,
}

fn grepable(text: &str) -> Grepable {
    let mut g = Grepable::default();
    for line in text.lines().filter(|l| l.starts_with("Host:")) {
        for field in line.split('\t') {
            if let Some(ports) = field.strip_prefix("Ports: ") {
                for entry in ports.split(", ") {
                    let parts: Vec<&str> = entry.split('/').collect();
                    if let (Some(port), Some(state)) =
                        (parts.first().and_then(|p| p.trim().parse().ok()), parts.get(1))
                    {
                        let service = parts.get(4).copied().unwrap_or("").to_owned();
                        g.ports.insert(port, ((*state).to_owned(), service));
                    }
                }
            } else if let Some(ignored) = field.strip_prefix("Ignored State: ") {
                g.ignored = Some(ignored.to_owned());
            }
        }
    }
    g
}

fn nmap(args: &[&str], target: &str) -> Result<Grepable, String> {
    let out = run_bounded(
        Command::new(NMAP)
            .args(["-n", "-Pn", "-T4", "--max-retries", "2", "-oG", "-"])
            .args(args)
            .arg(target),
        LIMIT,
    )?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "nmap {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(grepable(&text))
}

pub(crate) fn run() -> Result<(), String> {
    need(NMAP, "nmap")?;
    let target = NET.server().to_string();
    let ((), _report) = serve(NET, || {
        let mut failures = Vec::new();
        let ports = ["-p", "1-1024"];
        // (scan, the listed ports it must report, the state the other ports must fold into)
        type Scan = (&'static str, &'static [(u16, &'static str)], &'static str);
        let scans: [Scan; 7] = [
            ("-sS", &[(7, "open")], "closed (1023)"),
            ("-sF", &[(7, "open|filtered")], "closed (1023)"),
            ("-sX", &[(7, "open|filtered")], "closed (1023)"),
            ("-sN", &[(7, "open|filtered")], "closed (1023)"),
            ("-sA", &[], "unfiltered (1024)"),
            ("-sW", &[], "closed (1024)"),
            ("-sM", &[], "closed (1024)"),
        ];
        for (scan, listed, ignored) in scans {
            let g = nmap(&[scan, ports[0], ports[1]], &target)?;
            let got: Vec<(u16, &str)> = g.ports.iter().map(|(&p, (s, _))| (p, s.as_str())).collect();
            if got != listed || g.ignored.as_deref() != Some(ignored) {
                failures.push(format!(
                    "nmap {scan}: ports {got:?} and the rest {:?}; expected {listed:?} and {ignored:?}",
                    g.ignored
                ));
            }
        }
        let g = nmap(&["-sV", "--version-light", "-p", "7"], &target)?;
        match g.ports.get(&7) {
            Some((state, service)) if state == "open" && service.contains("echo") => {}
            other => failures.push(format!("nmap -sV -p 7: {other:?}, expected open echo")),
        }
        // OS detection's probes (SYN+FIN+URG+PSH, a null segment with options and an ACK to the open
        // port, odd flags to a closed one, an ECN SYN, UDP, ICMP with odd codes) must change nothing.
        let g = nmap(&["-O", "-p", "7,9"], &target)?;
        let got: Vec<(u16, &str)> = g.ports.iter().map(|(&p, (s, _))| (p, s.as_str())).collect();
        if got != [(7, "open"), (9, "closed")] {
            failures.push(format!("nmap -O -p 7,9: {got:?}, expected 7 open and 9 closed"));
        }
        if failures.is_empty() { Ok(()) } else { Err(failures.join("\n")) }
    })?;
    Ok(())
}
