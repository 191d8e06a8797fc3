//! Steering in the 82599 model: RSS (Toeplitz against Microsoft's verification vectors, RETA
//! spreading) and Flow Director perfect-match filters (4096 flow groups by the low 12 bits of the
//! source port, FILTER_UPDATE, remove, query, failed adds).
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values (queue and ring indices, ports, tags) are small"
)]

mod sim_support;

use ixgbe_vfio::regs::{self, rx};
use ixgbe_vfio::sim::Wire;
use sim_support::*;

/// Microsoft's IPv4 vectors: (destination, source, destination port, source port, IPv4 hash,
/// TCP/IPv4 hash).
type Vector = ([u8; 4], [u8; 4], u16, u16, u32, u32);
const MS_V4: [Vector; 5] = [
    ([161, 142, 100, 80], [66, 9, 149, 187], 1766, 2794, 0x323e_8fc2, 0x51cc_c178),
    ([65, 69, 140, 83], [199, 92, 111, 2], 4739, 14230, 0xd718_262a, 0xc626_b0ea),
    ([12, 22, 207, 184], [24, 19, 198, 95], 38024, 12898, 0xd2d0_a5de, 0x5c2b_394a),
    ([209, 142, 163, 6], [38, 27, 205, 30], 2217, 48228, 0x8298_9176, 0xafc7_327f),
    ([202, 188, 127, 2], [153, 39, 163, 191], 1303, 44251, 0x5d18_09c5, 0x10e8_28a2),
];

fn rss_queues(d: &Driver, n: u32, kib: u32) -> Vec<RxQueue> {
    (0..n).map(|q| RxQueue::new(d, q, 64, kib, true)).collect()
}

#[test]
fn rss_hash_matches_the_microsoft_vectors() {
    let frames: Vec<Vec<u8>> = MS_V4
        .iter()
        .map(|&(dst, src, dport, sport, ..)| frame(MODEL_MAC, (src, sport), (dst, dport), false, 64, 0))
        .collect();
    let d = Driver::new(config(Wire::Generator(frames)));
    // RETA entry i -> queue i % 4.
    d.set_rss(&MS_KEY, |i| (i % 4) as u8, regs::MRQC_RSS_FIELD_IPV4 | regs::MRQC_RSS_FIELD_IPV4_TCP);
    let mut queues = rss_queues(&d, 4, 2);
    // Five frames only: give each queue room, service once, and stop the generator after one round.
    d.model.service();
    let mut seen = 0;
    for (q, rxq) in queues.iter_mut().enumerate() {
        while let Some(r) = rxq.poll_one(&d, false) {
            let (dst, src, dport, sport, _, tcp_hash) = *MS_V4
                .iter()
                .find(|v| r.data[26..30] == v.1 && r.data[34..36] == v.3.to_be_bytes())
                .expect("a vector");
            let _ = (dst, src, dport, sport);
            assert_eq!(r.rss_hash(), tcp_hash);
            assert_eq!(r.wb0 & rx::RSS_TYPE_MASK, rx::RSS_TYPE_TCP_IPV4);
            assert_eq!(r.wb0 & rx::PKT_TYPE_IPV4, rx::PKT_TYPE_IPV4);
            assert_eq!(r.wb0 & rx::PKT_TYPE_TCP, rx::PKT_TYPE_TCP);
            assert_eq!((tcp_hash % 128 % 4) as usize, q, "RETA[hash & 0x7F] picked the queue");
            seen += 1;
        }
    }
    assert!(seen >= 5);
}

#[test]
fn rss_ipv4_only_hash_without_port_fields() {
    let frames: Vec<Vec<u8>> = MS_V4
        .iter()
        .map(|&(dst, src, dport, sport, ..)| frame(MODEL_MAC, (src, sport), (dst, dport), true, 64, 0))
        .collect();
    let d = Driver::new(config(Wire::Generator(frames)));
    // UDP with only the IPv4 field: the hash covers the addresses.
    d.set_rss(&MS_KEY, |_| 0, regs::MRQC_RSS_FIELD_IPV4 | regs::MRQC_RSS_FIELD_IPV4_TCP);
    let mut rxq = RxQueue::new(&d, 0, 8, 2, true);
    d.model.service();
    for r in rxq.drain(&d) {
        let v = MS_V4.iter().find(|v| r.data[26..30] == v.1).expect("a vector");
        assert_eq!(r.rss_hash(), v.4);
        assert_eq!(r.wb0 & rx::RSS_TYPE_MASK, rx::RSS_TYPE_IPV4);
    }
}

#[test]
fn reta_spreads_flows_over_queues() {
    let frames: Vec<Vec<u8>> = (0..512u16).map(|p| tcp_to_model(1024 + p * 7, u32::from(p))).collect();
    let d = Driver::new(config(Wire::Generator(frames)));
    d.map_queue_stats();
    d.set_rss(&MS_KEY, |i| (i % 8) as u8, regs::MRQC_RSS_FIELD_IPV4 | regs::MRQC_RSS_FIELD_IPV4_TCP);
    let mut queues: Vec<RxQueue> = (0..8).map(|q| RxQueue::new(&d, q, 512, 2, true)).collect();
    d.model.service();
    let mut counts = Vec::new();
    for (q, rxq) in queues.iter_mut().enumerate() {
        let got = rxq.drain(&d);
        for r in &got {
            assert_eq!((r.rss_hash() % 128 % 8) as usize, q);
        }
        assert_eq!(d.bar.read32(regs::qprc(q as u32)) as usize, got.len());
        counts.push(got.len());
    }
    let total: usize = counts.iter().sum();
    assert!(total > 2000, "the generator filled the rings: {counts:?}");
    for (q, &c) in counts.iter().enumerate() {
        assert!(c > total / 16, "queue {q} got {c} of {total}: {counts:?}");
    }
}

/// Programs Affinity-Accept's 4096 flow groups: mask "low 12 bits of the source port", one perfect filter
/// per group `g` to queue `queue(g)` with soft id `g`.
fn program_flow_groups(d: &Driver, queue: impl Fn(u16) -> u32) {
    d.bar.write32(regs::FDIRHKEY, regs::ATR_BUCKET_HASH_KEY);
    d.bar.write32(regs::FDIRSKEY, regs::ATR_SIGNATURE_HASH_KEY);
    d.bar.write32(
        regs::FDIRM,
        regs::FDIRM_VLANID | regs::FDIRM_VLANP | regs::FDIRM_POOL | regs::FDIRM_FLEX | regs::FDIRM_DIPV6,
    );
    d.bar.write32(regs::FDIRTCPM, 0xFFFF_000F);
    d.bar.write32(regs::FDIRUDPM, 0xFFFF_000F);
    d.bar.write32(regs::FDIRSIP4M, u32::MAX);
    d.bar.write32(regs::FDIRDIP4M, u32::MAX);
    d.bar.write32(
        regs::FDIRCTRL,
        regs::FDIRCTRL_PBALLOC_256K | regs::FDIRCTRL_PERFECT_MATCH | regs::FDIRCTRL_REPORT_STATUS,
    );
    for g in 0..4096u16 {
        add_filter(d, g, queue(g), false);
    }
}

fn add_filter(d: &Driver, group: u16, queue: u32, update: bool) {
    let hash =
        fdir_bucket_hash(regs::ATR_BUCKET_HASH_KEY, regs::FDIR_FLOW_TYPE_TCPV4, [0; 4], [0; 4], group, 0);
    d.bar.write32(regs::FDIRIPSA, 0);
    d.bar.write32(regs::FDIRIPDA, 0);
    d.bar.write32(regs::FDIRPORT, u32::from(group));
    d.bar.write32(regs::FDIRHASH, hash | u32::from(group) << regs::FDIRHASH_SOFT_ID_SHIFT);
    let upd = if update { regs::FDIRCMD_FILTER_UPDATE } else { 0 };
    d.bar.write32(
        regs::FDIRCMD,
        regs::FDIRCMD_ADD_FLOW
            | upd
            | regs::FDIRCMD_LAST
            | regs::FDIRCMD_QUEUE_EN
            | regs::FDIR_FLOW_TYPE_TCPV4 << regs::FDIRCMD_L4TYPE_SHIFT
            | queue << regs::FDIRCMD_RX_QUEUE_SHIFT,
    );
    assert_eq!(d.bar.read32(regs::FDIRCMD) & regs::FDIRCMD_CMD_MASK, 0, "the command self-clears");
}

fn group_hash_reg(group: u16) -> u32 {
    fdir_bucket_hash(regs::ATR_BUCKET_HASH_KEY, regs::FDIR_FLOW_TYPE_TCPV4, [0; 4], [0; 4], group, 0)
        | u32::from(group) << regs::FDIRHASH_SOFT_ID_SHIFT
}

#[test]
fn flow_groups_land_on_their_queues() {
    // One frame per group, from different source ports with the same low 12 bits in half of them.
    let frames: Vec<Vec<u8>> = (0..4096u16)
        .map(|g| {
            let port = if g % 2 == 0 { g } else { g | 0x5000 };
            frame(
                MODEL_MAC,
                ([192, 168, 1, (g % 200) as u8], port),
                ([10, 0, 0, 1], 8080),
                false,
                64,
                u32::from(g),
            )
        })
        .collect();
    let d = Driver::new(config(Wire::Generator(frames)));
    program_flow_groups(&d, |g| u32::from(g % 4));
    assert_eq!(d.model.fdir_filters(), 4096);
    assert_eq!(d.model.stats().fdir_adds, 4096);
    assert_eq!(d.model.stats().fdir_failed_adds, 0, "the model's bucket hash agrees with the test's");
    assert_eq!(d.bar.read32(regs::FDIRFREE) & regs::FDIRFREE_FREE_MASK, 8192 - 4096);
    assert_eq!(d.bar.read32(regs::FDIRUSTAT) & regs::FDIRUSTAT_ADD_MASK, 4096);
    assert_eq!(d.bar.read32(regs::FDIRUSTAT), 0, "clear on read");
    let mut queues: Vec<RxQueue> = (0..4).map(|q| RxQueue::new(&d, q, 1024, 2, true)).collect();
    // The generator stops at the first queue with no room: keep draining until every group came.
    let mut seen = vec![false; 4096];
    for _ in 0..64 {
        d.model.service();
        for (q, rxq) in queues.iter_mut().enumerate() {
            for r in rxq.drain(&d) {
                let g = tag_of(&r.data) as u16;
                assert_eq!(usize::from(g % 4), q, "group {g}");
                assert_ne!(r.wb1 & rx::STAT_FLM, 0);
                assert_eq!(r.soft_id(), g);
                seen[usize::from(g)] = true;
            }
        }
        if seen.iter().all(|&s| s) {
            break;
        }
    }
    assert!(seen.iter().all(|&s| s));
    assert!(d.bar.read32(regs::FDIRMATCH) >= 4096);
    assert_eq!(d.bar.read32(regs::FDIRMISS), 0);
}

#[test]
fn filter_update_migrates_a_group_and_remove_drops_it() {
    let frames = vec![tcp_to_model(0x1ABC, 1), tcp_to_model(0x0ABC, 2), tcp_to_model(0x0123, 3)];
    let d = Driver::new(config(Wire::Generator(frames)));
    program_flow_groups(&d, |_| 1);
    let mut queues: Vec<RxQueue> = (0..3).map(|q| RxQueue::new(&d, q, 8, 2, true)).collect();
    let take = |queues: &mut Vec<RxQueue>| -> Vec<Vec<u32>> {
        queues.iter_mut().map(|q| q.drain(&d).iter().map(|r| tag_of(&r.data)).collect()).collect()
    };
    // Limit the generator to one round: stop the queues from taking more than 3 frames by servicing
    // once and reading what came (the generator cycles, so count by tag).
    d.model.service();
    let first = take(&mut queues);
    assert!(first[0].is_empty() && first[2].is_empty());
    assert!(first[1].contains(&1) && first[1].contains(&2) && first[1].contains(&3));
    // Migrate group 0xABC to queue 2.
    add_filter(&d, 0xABC, 2, true);
    assert_eq!(d.model.stats().fdir_updates, 1);
    assert_eq!(d.model.fdir_filters(), 4096);
    d.model.service();
    let second = take(&mut queues);
    assert!(second[2].contains(&1) && second[2].contains(&2));
    assert!(!second[2].contains(&3));
    assert!(second[1].contains(&3) && !second[1].contains(&1));
    // Without FILTER_UPDATE, adding an existing filter fails.
    add_filter(&d, 0xABC, 0, false);
    assert_eq!(d.bar.read32(regs::FDIRFSTAT) & regs::FDIRFSTAT_FADD_MASK, 1);
    // Query, then remove: the group falls back to queue 0 (no RSS) and misses.
    d.bar.write32(regs::FDIRHASH, group_hash_reg(0xABC));
    d.bar.write32(regs::FDIRCMD, regs::FDIRCMD_QUERY);
    assert_ne!(d.bar.read32(regs::FDIRCMD) & regs::FDIRCMD_FILTER_VALID, 0);
    d.bar.write32(regs::FDIRCMD, regs::FDIRCMD_REMOVE_FLOW);
    assert_eq!(d.bar.read32(regs::FDIRCMD) & regs::FDIRCMD_CMD_MASK, 0);
    d.bar.write32(regs::FDIRCMD, regs::FDIRCMD_QUERY);
    assert_eq!(d.bar.read32(regs::FDIRCMD) & regs::FDIRCMD_FILTER_VALID, 0);
    assert_eq!(d.model.fdir_filters(), 4095);
    assert_eq!(d.bar.read32(regs::FDIRUSTAT) >> regs::FDIRUSTAT_REMOVE_SHIFT, 1);
    let _ = d.bar.read32(regs::FDIRMISS);
    d.model.service();
    let third = take(&mut queues);
    assert!(third[0].contains(&1) && third[0].contains(&2));
    assert!(d.bar.read32(regs::FDIRMISS) >= 2);
    // Removing it again fails.
    d.bar.write32(regs::FDIRCMD, regs::FDIRCMD_REMOVE_FLOW);
    assert_eq!(d.bar.read32(regs::FDIRFSTAT) >> regs::FDIRFSTAT_FREMOVE_SHIFT & 0xFF, 1);
}

#[test]
fn a_wrong_bucket_hash_is_a_failed_add() {
    let d = Driver::new(config(Wire::None));
    program_flow_groups(&d, |_| 0);
    let _ = d.bar.read32(regs::FDIRFSTAT);
    d.bar.write32(regs::FDIRCMD, regs::FDIRCMD_CLEARHT);
    assert_eq!(d.model.fdir_filters(), 0);
    let good = group_hash_reg(5);
    d.bar.write32(regs::FDIRPORT, 5);
    d.bar.write32(regs::FDIRHASH, good ^ 0x1);
    let cmd = regs::FDIRCMD_ADD_FLOW
        | regs::FDIRCMD_FILTER_UPDATE
        | regs::FDIRCMD_QUEUE_EN
        | regs::FDIR_FLOW_TYPE_TCPV4 << regs::FDIRCMD_L4TYPE_SHIFT;
    d.bar.write32(regs::FDIRCMD, cmd);
    assert_eq!(d.bar.read32(regs::FDIRFSTAT) & regs::FDIRFSTAT_FADD_MASK, 1);
    assert_eq!(d.model.stats().fdir_hash_mismatches, 1);
    assert_eq!(d.model.fdir_filters(), 0);
    d.bar.write32(regs::FDIRHASH, good);
    d.bar.write32(regs::FDIRCMD, cmd);
    assert_eq!(d.model.fdir_filters(), 1);
}

#[test]
fn the_table_is_sized_by_pballoc() {
    let d = Driver::new(config(Wire::None));
    d.bar.write32(regs::FDIRHKEY, regs::ATR_BUCKET_HASH_KEY);
    d.bar.write32(regs::FDIRTCPM, 0);
    d.bar.write32(regs::FDIRSIP4M, u32::MAX);
    d.bar.write32(regs::FDIRDIP4M, u32::MAX);
    d.bar.write32(regs::FDIRM, regs::FDIRM_VLANID | regs::FDIRM_VLANP | regs::FDIRM_POOL | regs::FDIRM_FLEX);
    d.bar.write32(regs::FDIRCTRL, regs::FDIRCTRL_PBALLOC_64K | regs::FDIRCTRL_PERFECT_MATCH);
    for port in 0..2049u16 {
        let hash =
            fdir_bucket_hash(regs::ATR_BUCKET_HASH_KEY, regs::FDIR_FLOW_TYPE_TCPV4, [0; 4], [0; 4], port, 0);
        d.bar.write32(regs::FDIRPORT, u32::from(port));
        d.bar.write32(regs::FDIRHASH, hash | u32::from(port) << 16);
        d.bar.write32(
            regs::FDIRCMD,
            regs::FDIRCMD_ADD_FLOW | regs::FDIR_FLOW_TYPE_TCPV4 << regs::FDIRCMD_L4TYPE_SHIFT,
        );
    }
    assert_eq!(d.model.fdir_filters(), 2048);
    assert_eq!(d.bar.read32(regs::FDIRFREE) & regs::FDIRFREE_FREE_MASK, 0);
    assert_eq!(d.bar.read32(regs::FDIRFSTAT) & regs::FDIRFSTAT_FADD_MASK, 1, "the 2049th add failed");
}
