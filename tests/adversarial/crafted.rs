//! Crafted frames from `scripts/adversarial/cases.py` and the answer each must draw.
//!
//! The script speaks as 10.210.0.3 (not the kernel's address, so the kernel never resets the
//! server's segments) and prints one `CASE <name> key=value...` line per case: `replies`, the
//! server's TCP segments in the case as `FLAGS/SEQ/ACK/LEN` (SEQ relative to the server's initial
//! sequence number, ACK to ours; `-` for none); `echo`, the data echoed; `after`, what a probe
//! `ok` sent after the crafted frames brought back (the connection still works, and nothing the
//! case sent slipped into the stream); `closed`, whether the FIN exchange that ends the case
//! completed. The table below says, for each case, what those must be and which rule says so.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use super::{Net, PORT, need, run_bounded, serve};

// Plain frames: the cases measure segment sizes with a raw socket on the TAP.
const NET: Net = Net { iface: "ncadv0", net: 210, plain_frames: true };
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/adversarial/cases.py");
const PYTHON: &str = netns_test::SCAPY_PYTHON;
/// The script takes about 30 s; this bounds a hang.
const LIMIT: Duration = Duration::from_secs(150);

/// What a case's key must be.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// Exactly this.
    Is(&'static str),
    /// A comma-separated list, at least one element, every one this.
    Each(&'static str),
    /// A comma-separated list whose last element is the first of these, and every other one of
    /// these: data echoed, perhaps after a bare ACK of it (whether the ACK rides on the echo is a
    /// matter of timing).
    Ends(&'static [&'static str]),
}

use Want::{Each, Ends, Is};

/// A connection case that ends well: the probe echoed alone, no byte echoed twice differently, the
/// FIN exchange done.
const SURVIVES: [(&str, Want); 3] = [("after", Is("ok")), ("conflict", Is("0")), ("closed", Is("1"))];

/// A case: its name, what its keys must be (plus [`SURVIVES`] when the flag says so), and the rule
/// behind it.
type Case = (&'static str, &'static [(&'static str, Want)], bool, &'static str);

/// Every case the script runs.
#[rustfmt::skip]
const CASES: &[Case] = &[
    ("handshake", &[("replies", Is("SA/0/1/0")), ("synack_opts", Is("MSS;SAckOK;Timestamp;NOP;WScale"))], true,
     "RFC 9293 §3.10.7.2: a SYN draws a SYN-ACK acknowledging it; RFC 7323 §2.2/§3.2, RFC 2018 §2: the options \
      offered are answered"),
    ("syn_fin", &[("replies", Is("-"))], false,
     "SYN+FIN is contradictory: dropped as malformed, no answer (as Linux's tcp_rcv_state_process in LISTEN)"),
    ("syn_rst", &[("replies", Is("-"))], false, "RFC 9293 §3.10.7.2: an RST to a listener is ignored"),
    ("fin_listener", &[("replies", Is("-"))], false,
     "RFC 9293 §3.10.7.2: a segment with neither SYN, ACK nor RST to a listener is dropped"),
    ("null_listener", &[("replies", Is("-"))], false, "RFC 9293 §3.10.7.2 (no flags): dropped"),
    ("xmas_listener", &[("replies", Is("-"))], false, "RFC 9293 §3.10.7.2 (FIN+PSH+URG, no ACK): dropped"),
    ("ack_listener", &[("replies", Is("R/12345/0/0"))], false,
     "RFC 9293 §3.10.7.2: an ACK to a listener draws <SEQ=SEG.ACK><CTL=RST>"),
    ("syn_closed_port", &[("replies", Is("RA/0/1/0"))], false,
     "RFC 9293 §3.10.7.1: no listener: <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>"),
    ("rst_closed_port", &[("replies", Is("-"))], false, "RFC 9293 §3.10.7.1: an RST is never answered"),
    ("opt_len0", &[("replies", Is("-"))], false,
     "RFC 9293 §3.1: an option length below 2 is malformed (and would never advance): dropped"),
    ("opt_truncated", &[("replies", Is("-"))], false,
     "RFC 9293 §3.1: an option running past the header is malformed: dropped"),
    ("syn_data", &[("replies", Is("SA/0/1/0")), ("echo", Is("-"))], true,
     "RFC 9293 §3.10.7.2: data on a SYN may be queued or not; tcp-lib (like Linux without TFO) acknowledges only \
      the SYN, so the data must never be echoed"),
    ("mss_0", &[("replies", Is("SA/0/1/0")), ("intact", Is("1")), ("max_seg", Is("64"))], false,
     "an MSS of 0 is clamped up to tcp-lib's floor of 64 (Linux: tcp_min_snd_mss, 48), never a 0-byte segment"),
    ("mss_1", &[("replies", Is("SA/0/1/0")), ("intact", Is("1")), ("max_seg", Is("64"))], false,
     "an MSS of 1 is clamped up to 64 as well (CVE-2019-11479's lesson)"),
    ("mss_none", &[("replies", Is("SA/0/1/0")), ("intact", Is("1")), ("max_seg", Is("536"))], false,
     "RFC 9293 §3.7.1 / RFC 1122 §4.2.2.6: no MSS option means 536"),
    ("wscale_15", &[("replies", Is("SA/0/1/0")), ("intact", Is("1"))], false,
     "RFC 7323 §2.3: a shift above 14 is used as 14; the connection works"),
    ("urg", &[("replies", Ends(&["PA/1/7/6", "A/1/7/0"])), ("echo", Is("urgent"))], true,
     "RFC 6093 §5: urgent data is delivered in line, every byte in order"),
    ("overlap_inorder", &[("echo", Is("helloXXXX"))], true,
     "RFC 9293 §3.10.7.4: bytes already received are trimmed off a segment; only the new ones are taken"),
    ("overlap_ooo", &[("echo", Is("xyzAAAACC")), ("first", Is("A/1/1/0"))], true,
     "RFC 5681 §4.2: out-of-order data draws an immediate duplicate ACK; of two out-of-order copies of the same \
      bytes the first one received is kept (RFC 9293 §3.10.7.4 keeps received data; Linux's tcp_data_queue_ofo \
      drops the later overlap), so a later copy cannot rewrite what was acknowledged by SACK"),
    ("bogus_sack", &[("replies", Each("PA/1/9/8")), ("echo", Is("abcdefgh"))], true,
     "RFC 2018 §4 / RFC 6675: SACK blocks outside SND.UNA..SND.MAX or inverted are ignored: the server only ever \
      retransmits what it sent, byte for byte"),
    ("paws", &[("replies", Is("A/1/1/0")), ("echo", Is("-"))], true,
     "RFC 7323 §5.3 R1: a timestamp older than TS.Recent: the segment is dropped and an ACK sent"),
    ("rst_in_window", &[("replies", Is("A/1/1/0"))], true,
     "RFC 5961 §3.2: an RST in the window but not at RCV.NXT draws a challenge ACK and resets nothing"),
    ("rst_exact", &[("replies", Is("R/1/0/0"))], false,
     "RFC 5961 §3.2: an RST at RCV.NXT resets; the next segment then draws <SEQ=SEG.ACK><CTL=RST> (RFC 9293 \
      §3.10.7.1)"),
    ("syn_established", &[("replies", Is("A/1/1/0"))], true,
     "RFC 5961 §4.2: a SYN on a synchronized connection draws a challenge ACK"),
    ("ack_unsent", &[("replies", Is("A/1/1/0")), ("echo", Is("-"))], true,
     "RFC 9293 §3.10.7.4 fifth check, RFC 5961 §5.2: an ACK of data not yet sent: ACK and drop the segment"),
    ("beyond_window", &[("replies", Is("A/1/1/0")), ("echo", Is("-"))], true,
     "RFC 9293 §3.10.7.4 first check: an unacceptable segment draws an ACK and is dropped"),
    ("bad_checksum", &[("replies", Is("-"))], true, "RFC 9293 §3.1: a bad checksum: silently dropped"),
    ("dataofs_small", &[("replies", Is("-"))], true, "RFC 9293 §3.1: a data offset below 5: dropped"),
    ("dataofs_large", &[("replies", Is("-"))], true, "RFC 9293 §3.1: a data offset past the segment: dropped"),
    ("ip_len_long", &[("replies", Is("-"))], true,
     "RFC 1122 §3.2.1.1-2 (RFC 791): a total length beyond the frame: the datagram is truncated, dropped"),
    ("ip_ihl_small", &[("replies", Is("-"))], true, "RFC 791: an IHL below 5: dropped"),
    ("ip_len_short", &[("replies", Ends(&["PA/1/4/3", "A/1/4/0"])), ("echo", Is("abc"))], true,
     "RFC 791 / RFC 894: the IP total length bounds the datagram; bytes past it are link padding, not data"),
    ("ip_options", &[("replies", Ends(&["PA/1/3/2", "A/1/3/0"])), ("echo", Is("op"))], true,
     "RFC 1122 §3.2.1.8: IP options are processed or ignored, the datagram is delivered"),
    ("ip_dst_broadcast", &[("replies", Is("-"))], true,
     "RFC 1122 §4.2.3.10: TCP does not accept segments to a broadcast address"),
    ("mac_broadcast_syn", &[("replies", Is("-"))], false,
     "RFC 1122 §3.3.6: a datagram to our unicast address in a link-layer broadcast is discarded"),
    ("mac_multicast_syn", &[("replies", Is("-"))], false, "RFC 1122 §3.3.6 (a multicast MAC): discarded"),
    ("mac_broadcast_data", &[("replies", Is("-"))], true,
     "RFC 1122 §3.3.6: data in a link-layer broadcast is discarded: not acknowledged, not echoed"),
    ("mac_multicast_data", &[("replies", Is("-"))], true, "RFC 1122 §3.3.6 (a multicast MAC): discarded"),
    ("frag_ok", &[("replies", Ends(&["PA/1/17/16", "A/1/17/0"])), ("echo", Is("fragmented-data!"))], true,
     "RFC 791 §3.2: fragments are reassembled"),
    ("frag_dup", &[("replies", Ends(&["PA/1/17/16", "A/1/17/0"])), ("echo", Is("fragmented-data!"))], true,
     "RFC 791 §3.2: a duplicate fragment changes nothing"),
    ("frag_overlap", &[("replies", Is("-"))], true,
     "RFC 5722 (which Linux applies to IPv4), RFC 1858: overlapping fragments with different bytes discard the \
      datagram"),
    ("frag_too_long", &[("replies", Is("-"))], true,
     "RFC 791: a fragment reaching past 65535 bytes is dropped (the ping of death)"),
    ("land", &[("replies", Is("-")), ("arp", Is("-"))], false,
     "RFC 1122 §4.2.3.10: a SYN from our own address and port (the land attack) is ignored: no segment, and no \
      ARP request for our own address to send one"),
    ("src_broadcast", &[("replies", Is("-")), ("arp", Is("-"))], false,
     "RFC 1122 §4.2.3.10 and §3.2.1.3: a SYN from the subnet's broadcast address is ignored: no answer, no ARP \
      request for the broadcast address"),
    ("src_multicast", &[("replies", Is("-")), ("arp", Is("-"))], false,
     "RFC 1122 §4.2.3.10 and §3.2.1.3: a SYN from a multicast address is ignored"),
];

/// Parses `CASE name key=value ...` lines.
fn parse(stdout: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut cases = BTreeMap::new();
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("CASE") {
            continue;
        }
        let Some(name) = words.next() else { continue };
        let keys =
            words.filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        cases.insert(name.to_owned(), keys);
    }
    cases
}

/// Every way `got` differs from the table.
fn check(cases: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<String> {
    let mut failures: Vec<String> = cases
        .keys()
        .filter(|name| !CASES.iter().any(|c| c.0 == name.as_str()))
        .map(|name| format!("{name}: the script ran it but the table says nothing about it"))
        .collect();
    for &(name, wants, survives, rule) in CASES {
        let Some(got) = cases.get(name) else {
            failures.push(format!("{name}: no result from the script"));
            continue;
        };
        if let Some(e) = got.get("error") {
            failures.push(format!("{name}: the case could not run: {e}"));
            continue;
        }
        let extra = if survives { &SURVIVES[..] } else { &[] };
        for &(key, want) in wants.iter().chain(extra) {
            let value = got.get(key).map_or("<missing>", String::as_str);
            let ok = match want {
                Is(v) => value == v,
                Each(v) => value != "-" && value.split(',').all(|r| r == v),
                Ends(set) => {
                    value.rsplit(',').next() == set.first().copied()
                        && value.split(',').all(|r| set.contains(&r))
                }
            };
            if !ok {
                failures.push(format!(
                    "{name}: {key} is {value:?}, expected {want:?}: {rule}; the whole case: {got:?}"
                ));
            }
        }
    }
    failures
}

pub(crate) fn run() -> Result<(), String> {
    need(PYTHON, "python3")?;
    netns_test::need_scapy()?;
    let (cases, report) = serve(NET, || {
        let out = run_bounded(
            Command::new(PYTHON)
                .arg(SCRIPT)
                .args(["--iface", NET.iface, "--server"])
                .arg(NET.server().to_string())
                .args(["--us", "10.210.0.3", "--port", &PORT.to_string()]),
            LIMIT,
        )?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        print!("{stdout}");
        if !out.status.success() {
            return Err(format!(
                "{SCRIPT} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(parse(&stdout))
    })?;
    let failures = check(&cases);
    if !failures.is_empty() {
        return Err(format!(
            "{} crafted case(s) got the wrong answer:\n  {}",
            failures.len(),
            failures.join("\n  ")
        ));
    }
    // The nine malformed cases (bad checksum, two data offsets, two IP lengths, two option
    // lengths, SYN+FIN, SYN+RST) were counted as malformed, by the channelizer or the stack, not
    // lost somewhere else.
    let snapshot = &report.runtime.snapshot;
    let malformed = snapshot.rx_malformed()
        + snapshot.queues.iter().map(|q| q.channelizer.dropped_malformed).sum::<u64>();
    if malformed < 9 {
        return Err(format!("only {malformed} frames counted as malformed, 9 expected:\n{report}"));
    }
    // And the three SYNs from impossible sources (land, broadcast, multicast) as such.
    let bad_source = snapshot.cores[0].stack.tcp_bad_source;
    if bad_source != 3 {
        return Err(format!("{bad_source} segments counted as from a bad source, 3 expected:\n{report}"));
    }
    Ok(())
}
