//! The Linux sysctls a script sets in its network namespace, read as the configuration of the
//! sockets it opens next.
//!
//! packetdrill scripts configure the stack under test the way they configure Linux: their init
//! command (`defaults.sh`) and lines such as `` `sysctl -q net.ipv4.tcp_timestamps=0` `` write
//! `/proc/sys/net/ipv4/*` of the namespace the script runs in. Under the `linux` profile the shim
//! reads the ones tcp-lib has an equivalent for each time a socket is configured (`listen`,
//! `connect`), so a script's settings reach the library as they reach the kernel. A file that is
//! missing or unreadable leaves the setting as it was (outside a namespace of its own, these are
//! the host's values).

use std::path::Path;
use std::time::Duration;

use tcp_lib::tcp;

/// Where the sysctls live.
const ROOT: &str = "/proc/sys/net/ipv4";

/// The numbers in one sysctl file (`tcp_rmem` holds three), or `None`.
fn read(root: &Path, name: &str) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(root.join(name)).ok()?;
    text.split_whitespace().map(|w| w.parse().ok()).collect()
}

/// Linux's window scale for a receive space (`tcp_select_initial_window`: log2 of the space, less
/// 15 for the 16-bit window field, at most 14).
fn wscale_for(space: u64) -> u8 {
    let log2 = u8::try_from(63 - space.max(1).leading_zeros()).unwrap_or(0);
    log2.saturating_sub(15).min(14)
}

/// Applies the namespace's sysctls to `c`.
pub fn apply(c: &mut tcp::Config) {
    apply_from(Path::new(ROOT), c);
}

/// [`apply`] from another directory (tests).
pub fn apply_from(root: &Path, c: &mut tcp::Config) {
    let flag = |name| read(root, name).and_then(|v| v.first().copied()).map(|v| v != 0);
    let value = |name| read(root, name).and_then(|v| v.first().copied());
    if let Some(on) = flag("tcp_timestamps") {
        c.timestamps = on;
    }
    if let Some(on) = flag("tcp_sack") {
        c.sack = on;
    }
    if let Some(on) = flag("tcp_window_scaling") {
        c.window_scaling = on;
    }
    if let Some(on) = flag("tcp_slow_start_after_idle") {
        c.restart_after_idle = on;
    }
    if let Some(v) = read(root, "tcp_rmem").filter(|v| v.len() == 3) {
        c.recv_buffer = usize::try_from(v[1]).unwrap_or(usize::MAX);
        c.rcv_wscale = Some(wscale_for(v[2].max(v[1])));
    }
    if let Some(v) = read(root, "tcp_wmem").filter(|v| v.len() == 3) {
        c.send_buffer = usize::try_from(v[1]).unwrap_or(usize::MAX);
    }
    if let Some(n) = value("tcp_syn_retries") {
        c.syn_retries = u32::try_from(n).unwrap_or(u32::MAX);
    }
    if let Some(n) = value("tcp_retries2") {
        c.max_retransmits = u32::try_from(n).unwrap_or(u32::MAX);
    }
    if let Some(ms) = value("tcp_rto_min_us").map(|us| us / 1000).filter(|&ms| ms > 0) {
        c.min_rto = Duration::from_millis(ms);
    }
    if let (Some(n), tcp::Push::Linux { min_tso_segs }) = (value("tcp_min_tso_segs"), &mut c.push) {
        *min_tso_segs = u16::try_from(n).unwrap_or(u16::MAX).max(1);
    }
    if let Some(p) = c.pacing.as_mut() {
        if let Some(n) = value("tcp_pacing_ss_ratio") {
            p.ss_ratio = u16::try_from(n).unwrap_or(u16::MAX);
        }
        if let Some(n) = value("tcp_pacing_ca_ratio") {
            p.ca_ratio = u16::try_from(n).unwrap_or(u16::MAX);
        }
    }
    // 0: off, 1: ask and accept, 2 (Linux's default): accept only; Linux's other values (3 and
    // up: AccECN) are not RFC 3168 and leave it alone.
    match value("tcp_ecn") {
        Some(0) => c.ecn = tcp::Ecn::Off,
        Some(1) => c.ecn = tcp::Ecn::On,
        Some(2) => c.ecn = tcp::Ecn::Passive,
        _ => {}
    }
}

/// Keepalive timing from the namespace (`tcp_keepalive_time`, `_intvl`, `_probes`), Linux's
/// defaults where unreadable: 7200 s, 75 s, 9.
#[must_use]
pub fn keepalive() -> (u64, u64, u32) {
    let root = Path::new(ROOT);
    let value = |name, default| read(root, name).and_then(|v| v.first().copied()).unwrap_or(default);
    (
        value("tcp_keepalive_time", 7200),
        value("tcp_keepalive_intvl", 75),
        u32::try_from(value("tcp_keepalive_probes", 9)).unwrap_or(9),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_settings_reach_the_configuration() {
        let dir = std::env::temp_dir().join(format!("pd-sysctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tcp_timestamps"), "0\n").unwrap();
        std::fs::write(dir.join("tcp_sack"), "1\n").unwrap();
        std::fs::write(dir.join("tcp_rmem"), "4096\t540000\t15728640\n").unwrap();
        std::fs::write(dir.join("tcp_wmem"), "4096 262144 4194304\n").unwrap();
        std::fs::write(dir.join("tcp_syn_retries"), "5\n").unwrap();
        std::fs::write(dir.join("tcp_window_scaling"), "garbage\n").unwrap();
        std::fs::write(dir.join("tcp_ecn"), "1\n").unwrap();
        std::fs::write(dir.join("tcp_min_tso_segs"), "10\n").unwrap();
        std::fs::write(dir.join("tcp_slow_start_after_idle"), "1\n").unwrap();
        std::fs::write(dir.join("tcp_pacing_ss_ratio"), "150\n").unwrap();
        let mut c = tcp::Config {
            sack: false,
            push: tcp::Push::Linux { min_tso_segs: 2 },
            pacing: Some(tcp::Pacing::LINUX),
            ..tcp::Config::default()
        };
        apply_from(&dir, &mut c);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!c.timestamps && c.sack && c.window_scaling, "garbage leaves the setting alone");
        assert_eq!(c.ecn, tcp::Ecn::On);
        assert_eq!(c.push, tcp::Push::Linux { min_tso_segs: 10 });
        assert!(c.restart_after_idle);
        assert_eq!(c.pacing, Some(tcp::Pacing { ss_ratio: 150, ..tcp::Pacing::LINUX }));
        assert_eq!(
            (c.recv_buffer, c.rcv_wscale, c.send_buffer, c.syn_retries),
            (540_000, Some(8), 262_144, 5)
        );
    }

    #[test]
    fn window_scale_as_linux_computes_it() {
        assert_eq!(wscale_for(15 * 1024 * 1024), 8);
        assert_eq!(wscale_for(6 * 1024 * 1024), 7);
        assert_eq!(wscale_for(65_535), 0);
        assert_eq!(wscale_for(1 << 40), 14);
    }
}
