//! Whether the script puts the `fq` qdisc on `tun0`: Linux paces its TCP flows there, so the
//! shim's connections pace ([`tcp::Config::pacing`](tcp_lib::tcp::Config::pacing)).
//!
//! Under `fq` (and under Linux's internal pacing) every TCP packet leaves at its earliest
//! departure time, and a script's timing and windows follow from that (`slow_start/
//! slow-start-fq-ack-per-2pkt.pkt` expects the paced departures to the millisecond). A script
//! asks for it in its init command, after `defaults.sh` installed `pfifo`:
//! `` `tc qdisc replace dev tun0 root fq` ``. The kernel may not have `fq` (then `tc` fails with
//! "Specified qdisc kind is unknown" and the namespace keeps `pfifo`), and the qdisc on the shim's
//! `tun0` carries no packet anyway, so the shim reads what the script asks for, not what the
//! kernel made of it: the script is packetdrill's last argument (read from `/proc/self/cmdline`),
//! and of its `tc qdisc add|replace|change dev tun0 root KIND` commands the last one decides
//! (`tc qdisc del dev tun0 root` puts the default back). A qdisc command in a script's later
//! shell lines counts from the start: the shim reads the script once.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The device packetdrill's scripts configure.
const DEVICE: &str = "tun0";

/// Whether the script packetdrill runs installs `fq` on `tun0` (read once).
#[must_use]
pub fn script_installs_fq() -> bool {
    static FQ: OnceLock<bool> = OnceLock::new();
    *FQ.get_or_init(|| {
        script().and_then(|p| std::fs::read_to_string(p).ok()).is_some_and(|s| installs_fq(&s))
    })
}

/// packetdrill's script: its last command-line argument (the scripts follow the options).
fn script() -> Option<PathBuf> {
    let cmdline = std::fs::read("/proc/self/cmdline").ok()?;
    let last = cmdline.split(|&b| b == 0).rfind(|a| !a.is_empty())?;
    let path = PathBuf::from(String::from_utf8_lossy(last).into_owned());
    path.is_file().then_some(path)
}

/// Whether the last `tc qdisc` command on `tun0`'s root in `script` installs `fq`.
#[must_use]
pub fn installs_fq(script: &str) -> bool {
    let mut fq = false;
    for line in script.lines() {
        let words: Vec<&str> =
            line.split(|c: char| c.is_whitespace() || c == '`').filter(|w| !w.is_empty()).collect();
        let Some(at) = words.windows(2).position(|w| w == ["tc", "qdisc"]) else { continue };
        let args = &words[at + 2..];
        let on_root = args.windows(2).any(|w| w == ["dev", DEVICE]) && args.contains(&"root");
        if !on_root {
            continue;
        }
        match args.first() {
            Some(&("add" | "replace" | "change")) => {
                let kind = args.iter().skip_while(|&&w| w != "root").nth(1);
                fq = kind == Some(&"fq");
            }
            Some(&("del" | "delete")) => fq = false,
            _ => {}
        }
    }
    fq
}

#[cfg(test)]
mod tests {
    use super::installs_fq;

    #[test]
    fn the_last_qdisc_command_on_tun0_decides() {
        let script = "`../common/defaults.sh\ntc qdisc replace dev tun0 root fq\nsysctl -q x=1`\n";
        assert!(installs_fq(script));
        assert!(!installs_fq("`tc qdisc replace dev tun0 root fq_codel`"), "another qdisc");
        assert!(!installs_fq("`tc qdisc add dev tun0 root fq\ntc qdisc del dev tun0 root`"));
        assert!(!installs_fq("`tc qdisc replace dev tun1 root fq`"), "another device");
        assert!(!installs_fq("0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n"));
        assert!(installs_fq("+0 `tc qdisc add dev tun0 root pfifo`\n+1 `tc qdisc change dev tun0 root fq`"));
    }
}
