//! The 82599's registers and descriptor formats that the driver and the model use.
//!
//! Offsets and bits are the Intel 82599 10 GbE Controller Datasheet's (revision 3.x); each group names
//! its section. The same names appear in Linux's and DPDK's `ixgbe_type.h`, prefixed `IXGBE_`.
//! Per-queue registers are functions of the queue index (queues 0..64 for RX, 0..128 for TX; the
//! driver uses at most [`MAX_QUEUES`]).

/// The most RX/TX queue pairs the driver sets up (one per core; RSS reaches at most 16 through RETA).
pub const MAX_QUEUES: u16 = 64;

/// BAR0 length of the 82599 (128 KiB of registers, §8.1).
pub const BAR0_LEN: usize = 0x2_0000;

// --- General control (§8.2.3.1) ---------------------------------------------------------------------

/// Device Control Register.
pub const CTRL: u32 = 0x0_0000;
/// CTRL: Link Reset (self-clearing).
pub const CTRL_LNK_RST: u32 = 1 << 3;
/// CTRL: Device Reset (self-clearing, §4.2.1.6.1).
pub const CTRL_RST: u32 = 1 << 26;
/// CTRL: both resets the init sequence issues.
pub const CTRL_RST_MASK: u32 = CTRL_LNK_RST | CTRL_RST;
/// Device Status Register.
pub const STATUS: u32 = 0x0_0008;
/// Extended Device Control Register.
pub const CTRL_EXT: u32 = 0x0_0018;
/// CTRL_EXT: No Snoop Disable (§8.2.3.1.3).
pub const CTRL_EXT_NS_DIS: u32 = 1 << 16;
/// CTRL_EXT: Driver loaded.
pub const CTRL_EXT_DRV_LOAD: u32 = 1 << 28;

// --- Interrupts (§8.2.3.5) ---------------------------------------------------------------------------

/// Extended Interrupt Cause Register.
pub const EICR: u32 = 0x0_0800;
/// Extended Interrupt Mask Set/Read.
pub const EIMS: u32 = 0x0_0880;
/// Extended Interrupt Mask Clear.
pub const EIMC: u32 = 0x0_0888;
/// EIMC: every interrupt cause.
pub const EIMC_ALL: u32 = 0x7FFF_FFFF;

// --- EEPROM (§8.2.3.2) -------------------------------------------------------------------------------

/// EEPROM/Flash Control Register.
pub const EEC: u32 = 0x1_0010;
/// EEC: EEPROM auto-read done.
pub const EEC_ARD: u32 = 1 << 9;
/// EEC: EEPROM present (§8.2.3.2.1).
pub const EEC_PRES: u32 = 1 << 8;

// --- Receive (§8.2.3.8) ------------------------------------------------------------------------------

/// Receive DMA Control Register.
pub const RDRXCTL: u32 = 0x0_2F00;
/// RDRXCTL: Rx CRC strip (must match HLREG0.RXCRCSTRP).
pub const RDRXCTL_CRCSTRIP: u32 = 1 << 1;
/// RDRXCTL: DMA init done (read-only, set by the device after reset).
pub const RDRXCTL_DMAIDONE: u32 = 1 << 3;
/// Receive Control Register.
pub const RXCTRL: u32 = 0x0_3000;
/// RXCTRL: receive enable.
pub const RXCTRL_RXEN: u32 = 1 << 0;
/// Receive Packet Buffer Size of packet buffer `i` (0..8).
#[must_use]
pub const fn rxpbsize(i: u32) -> u32 {
    0x0_3C00 + 4 * i
}
/// RXPBSIZE value for 128 KiB (size in KiB at bit 10).
pub const RXPBSIZE_128KB: u32 = 128 << 10;
/// Filter Control Register.
pub const FCTRL: u32 = 0x0_5080;
/// FCTRL: multicast promiscuous.
pub const FCTRL_MPE: u32 = 1 << 8;
/// FCTRL: unicast promiscuous.
pub const FCTRL_UPE: u32 = 1 << 9;
/// FCTRL: accept broadcast.
pub const FCTRL_BAM: u32 = 1 << 10;
/// MCSTCTRL: multicast control (§8.2.3.7.2); MO (bits 1:0) picks the address bits the multicast
/// table array is indexed by, 00 (the reset value) bits 47:36.
pub const MCSTCTRL: u32 = 0x0_5090;
/// MCSTCTRL: the multicast table array filters multicast frames (MFE).
pub const MCSTCTRL_MFE: u32 = 1 << 2;
/// Registers of the multicast table array: 4096 bits.
pub const MTA_REGS: u32 = 128;
/// MTA\[n\]: the multicast table array (§8.2.3.7.3), `n` < [`MTA_REGS`].
#[must_use]
pub const fn mta(n: u32) -> u32 {
    0x0_5200 + 4 * n
}
/// The multicast table array bit of a destination MAC with MCSTCTRL.MO = 00: bits 47:36 of the
/// address (§7.1.1.1.2), the high nibble of byte 4 and byte 5; register `bit >> 5`, bit `bit & 31`.
#[must_use]
pub const fn mta_bit(mac: [u8; 6]) -> u32 {
    ((mac[4] as u32) >> 4) | ((mac[5] as u32) << 4)
}
/// Receive Checksum Control.
pub const RXCSUM: u32 = 0x0_5000;
/// RXCSUM: packet checksum disable: the write-back descriptor carries the RSS hash / Flow Director
/// filter id instead of the fragment checksum (§8.2.3.7.5; Linux sets it whenever RSS is on).
pub const RXCSUM_PCSD: u32 = 1 << 13;

/// Receive Descriptor Base Address Low of queue `q`.
#[must_use]
pub const fn rdbal(q: u32) -> u32 {
    0x0_1000 + 0x40 * q
}
/// Receive Descriptor Base Address High of queue `q`.
#[must_use]
pub const fn rdbah(q: u32) -> u32 {
    0x0_1004 + 0x40 * q
}
/// Receive Descriptor Length (bytes, multiple of 128) of queue `q`.
#[must_use]
pub const fn rdlen(q: u32) -> u32 {
    0x0_1008 + 0x40 * q
}
/// Receive Descriptor Head of queue `q` (written by the device).
#[must_use]
pub const fn rdh(q: u32) -> u32 {
    0x0_1010 + 0x40 * q
}
/// Split Receive Control of queue `q`.
#[must_use]
pub const fn srrctl(q: u32) -> u32 {
    0x0_1014 + 0x40 * q
}
/// Receive Descriptor Tail of queue `q` (written by the driver).
#[must_use]
pub const fn rdt(q: u32) -> u32 {
    0x0_1018 + 0x40 * q
}
/// Receive Descriptor Control of queue `q`.
#[must_use]
pub const fn rxdctl(q: u32) -> u32 {
    0x0_1028 + 0x40 * q
}
/// SRRCTL: packet buffer size in KiB, bits 4:0.
pub const SRRCTL_BSIZEPKT_MASK: u32 = 0x1F;
/// SRRCTL: descriptor type field.
pub const SRRCTL_DESCTYPE_MASK: u32 = 0x7 << 25;
/// SRRCTL: advanced descriptors, one buffer.
pub const SRRCTL_DESCTYPE_ADV_ONEBUF: u32 = 1 << 25;
/// SRRCTL: drop packets when the queue has no free descriptor (instead of stalling the packet buffer).
pub const SRRCTL_DROP_EN: u32 = 1 << 28;
/// RXDCTL / TXDCTL: queue enable (reads back as set once the device has enabled the queue).
pub const DCTL_ENABLE: u32 = 1 << 25;

// --- MAC (§8.2.3.22) ---------------------------------------------------------------------------------

/// MAC Core Control 0.
pub const HLREG0: u32 = 0x0_4240;
/// HLREG0: append CRC on transmit.
pub const HLREG0_TXCRCEN: u32 = 1 << 0;
/// HLREG0: strip CRC on receive.
pub const HLREG0_RXCRCSTRP: u32 = 1 << 1;
/// HLREG0: jumbo frame enable: frames up to MAXFRS.MFS are accepted (§8.2.3.22.8).
pub const HLREG0_JUMBOEN: u32 = 1 << 2;
/// HLREG0: pad short frames on transmit.
pub const HLREG0_TXPADEN: u32 = 1 << 10;
/// Max Frame Size (§8.2.3.22.13): MFS in bits 31:16, 1518 after reset.
pub const MAXFRS: u32 = 0x0_4268;
/// MAXFRS: shift of the maximum frame size field (bytes, FCS included).
pub const MAXFRS_MFS_SHIFT: u32 = 16;
/// HLREG0: MAC loopback.
pub const HLREG0_LPBK: u32 = 1 << 15;
/// Auto-Negotiation Control.
pub const AUTOC: u32 = 0x0_42A0;
/// AUTOC: restart auto-negotiation (self-clearing).
pub const AUTOC_AN_RESTART: u32 = 1 << 12;
/// AUTOC: link mode select field.
pub const AUTOC_LMS_MASK: u32 = 0x7 << 13;
/// AUTOC: link mode 10G serial (SFP+).
pub const AUTOC_LMS_10G_SERIAL: u32 = 0x3 << 13;
/// AUTOC: 10G PMA/PMD field.
pub const AUTOC_10G_PMA_PMD_MASK: u32 = 0x3 << 7;
/// AUTOC: 10G PMA/PMD XAUI.
pub const AUTOC_10G_XAUI: u32 = 0;
/// Link Status Register.
pub const LINKS: u32 = 0x0_42A4;
/// LINKS: link up.
pub const LINKS_UP: u32 = 1 << 30;
/// LINKS: speed field.
pub const LINKS_SPEED_MASK: u32 = 0x3 << 28;
/// LINKS speed: 10 Gb/s.
pub const LINKS_SPEED_10G: u32 = 0x3 << 28;
/// LINKS speed: 1 Gb/s.
pub const LINKS_SPEED_1G: u32 = 0x2 << 28;
/// LINKS speed: 100 Mb/s.
pub const LINKS_SPEED_100M: u32 = 0x1 << 28;
/// Receive Address Low of entry `i` (entry 0: the MAC address from the EEPROM).
#[must_use]
pub const fn ral(i: u32) -> u32 {
    0x0_A200 + 8 * i
}
/// Receive Address High of entry `i`.
#[must_use]
pub const fn rah(i: u32) -> u32 {
    0x0_A204 + 8 * i
}
/// RAH: address valid.
pub const RAH_AV: u32 = 1 << 31;

// --- Transmit (§8.2.3.9) -----------------------------------------------------------------------------

/// DCB Transmit Descriptor Plane Control and Status.
pub const RTTDCS: u32 = 0x0_4900;
/// RTTDCS: DCB arbiter disable (set while configuring; cleared to run).
pub const RTTDCS_ARBDIS: u32 = 1 << 6;
/// DMA Tx Control.
pub const DMATXCTL: u32 = 0x0_4A80;
/// DMATXCTL: transmit enable.
pub const DMATXCTL_TE: u32 = 1 << 0;
/// DMA Tx TCP Max Allow Size Requests.
pub const DTXMXSZRQ: u32 = 0x0_8100;
/// DTXMXSZRQ: the value DPDK and ixy write when DCB and virtualization are off (no limit).
pub const DTXMXSZRQ_NO_LIMIT: u32 = 0xFFFF;
/// TXDCTL: prefetch threshold field shift (bits 6:0).
pub const TXDCTL_PTHRESH_SHIFT: u32 = 0;
/// TXDCTL: host threshold field shift (bits 14:8).
pub const TXDCTL_HTHRESH_SHIFT: u32 = 8;
/// TXDCTL: write-back threshold field shift (bits 22:16).
pub const TXDCTL_WTHRESH_SHIFT: u32 = 16;
/// TXDCTL: the mask of each threshold field (before shifting).
pub const TXDCTL_THRESH_MASK: u32 = 0x7F;
/// Transmit Packet Buffer Size of packet buffer `i` (0..8).
#[must_use]
pub const fn txpbsize(i: u32) -> u32 {
    0x0_CC00 + 4 * i
}
/// TXPBSIZE value for 40 KiB.
pub const TXPBSIZE_40KB: u32 = 40 << 10;
/// Transmit Descriptor Base Address Low of queue `q`.
#[must_use]
pub const fn tdbal(q: u32) -> u32 {
    0x0_6000 + 0x40 * q
}
/// Transmit Descriptor Base Address High of queue `q`.
#[must_use]
pub const fn tdbah(q: u32) -> u32 {
    0x0_6004 + 0x40 * q
}
/// Transmit Descriptor Length of queue `q`.
#[must_use]
pub const fn tdlen(q: u32) -> u32 {
    0x0_6008 + 0x40 * q
}
/// Transmit Descriptor Head of queue `q` (written by the device).
#[must_use]
pub const fn tdh(q: u32) -> u32 {
    0x0_6010 + 0x40 * q
}
/// Transmit Descriptor Tail of queue `q` (written by the driver).
#[must_use]
pub const fn tdt(q: u32) -> u32 {
    0x0_6018 + 0x40 * q
}
/// Transmit Descriptor Control of queue `q`.
#[must_use]
pub const fn txdctl(q: u32) -> u32 {
    0x0_6028 + 0x40 * q
}

// --- RSS (§8.2.3.7.x, §7.1.2.8) ----------------------------------------------------------------------

/// Multiple Receive Queues Command.
pub const MRQC: u32 = 0x0_5818;
/// MRQC: RSS enabled (MRQE = 0001b).
pub const MRQC_RSSEN: u32 = 0x1;
/// MRQC: hash TCP over IPv4.
pub const MRQC_RSS_FIELD_IPV4_TCP: u32 = 1 << 16;
/// MRQC: hash IPv4 addresses.
pub const MRQC_RSS_FIELD_IPV4: u32 = 1 << 17;
/// MRQC: hash IPv6 addresses.
pub const MRQC_RSS_FIELD_IPV6: u32 = 1 << 20;
/// MRQC: hash TCP over IPv6.
pub const MRQC_RSS_FIELD_IPV6_TCP: u32 = 1 << 21;
/// MRQC: hash UDP over IPv4.
pub const MRQC_RSS_FIELD_IPV4_UDP: u32 = 1 << 22;
/// MRQC: hash UDP over IPv6.
pub const MRQC_RSS_FIELD_IPV6_UDP: u32 = 1 << 23;
/// Redirection Table register `i` (0..32), four 8-bit entries each (the 82599 uses the low 4 bits).
#[must_use]
pub const fn reta(i: u32) -> u32 {
    0x0_5C00 + 4 * i
}
/// RSS Random Key register `i` (0..10): the 40-byte Toeplitz key.
#[must_use]
pub const fn rssrk(i: u32) -> u32 {
    0x0_5C80 + 4 * i
}

// --- Flow Director (§7.1.2.7, §8.2.3.21) -------------------------------------------------------------

/// Flow Director Control.
pub const FDIRCTRL: u32 = 0x0_EE00;
/// FDIRCTRL: packet buffer allocation for filters: 64 KiB.
pub const FDIRCTRL_PBALLOC_64K: u32 = 0x1;
/// FDIRCTRL: 128 KiB (4096 perfect filters; the driver takes 256 KiB for bucket headroom).
pub const FDIRCTRL_PBALLOC_128K: u32 = 0x2;
/// FDIRCTRL: 256 KiB.
pub const FDIRCTRL_PBALLOC_256K: u32 = 0x3;
/// FDIRCTRL: initialization done (read-only).
pub const FDIRCTRL_INIT_DONE: u32 = 1 << 3;
/// FDIRCTRL: perfect-match filters.
pub const FDIRCTRL_PERFECT_MATCH: u32 = 1 << 4;
/// FDIRCTRL: report the filter match in the RX descriptor.
pub const FDIRCTRL_REPORT_STATUS: u32 = 1 << 5;
/// FDIRCTRL: queue for packets matching a drop filter, bits 14:8.
pub const FDIRCTRL_DROP_Q_SHIFT: u32 = 8;
/// FDIRCTRL: flex word offset, bits 20:16.
pub const FDIRCTRL_FLEX_SHIFT: u32 = 16;
/// FDIRCTRL: maximum linked-list length, bits 27:24.
pub const FDIRCTRL_MAX_LENGTH_SHIFT: u32 = 24;
/// FDIRCTRL: full threshold, bits 31:28.
pub const FDIRCTRL_FULL_THRESH_SHIFT: u32 = 28;
/// Flow Director filters IPv4 destination address mask (inverted: 1 = ignore).
pub const FDIRDIP4M: u32 = 0x0_EE3C;
/// Flow Director filters IPv4 source address mask.
pub const FDIRSIP4M: u32 = 0x0_EE40;
/// Flow Director TCP port masks: source in bits 15:0, destination in 31:16, each bit-reversed and
/// inverted (1 = ignore).
pub const FDIRTCPM: u32 = 0x0_EE44;
/// Flow Director UDP port masks (as FDIRTCPM).
pub const FDIRUDPM: u32 = 0x0_EE48;
/// Flow Director other masks.
pub const FDIRM: u32 = 0x0_EE70;
/// FDIRM: ignore the VLAN id.
pub const FDIRM_VLANID: u32 = 1 << 0;
/// FDIRM: ignore the VLAN priority.
pub const FDIRM_VLANP: u32 = 1 << 1;
/// FDIRM: ignore the pool.
pub const FDIRM_POOL: u32 = 1 << 2;
/// FDIRM: ignore the L4 protocol type.
pub const FDIRM_L4P: u32 = 1 << 3;
/// FDIRM: ignore the flex bytes.
pub const FDIRM_FLEX: u32 = 1 << 4;
/// FDIRM: ignore the IPv6 destination.
pub const FDIRM_DIPV6: u32 = 1 << 5;
/// Flow Director hash key (bucket hash).
pub const FDIRHKEY: u32 = 0x0_EE68;
/// Flow Director signature key.
pub const FDIRSKEY: u32 = 0x0_EE6C;
/// Flow Director filter IPv4 source address (for FDIRCMD).
pub const FDIRIPSA: u32 = 0x0_EE18;
/// Flow Director filter IPv4 destination address.
pub const FDIRIPDA: u32 = 0x0_EE1C;
/// Flow Director filter ports: source in 15:0, destination in 31:16.
pub const FDIRPORT: u32 = 0x0_EE20;
/// Flow Director filter VLAN and flex bytes.
pub const FDIRVLAN: u32 = 0x0_EE24;
/// Flow Director filter hash: bucket hash in 14:0, valid in 15, soft id in 31:16 (perfect match).
pub const FDIRHASH: u32 = 0x0_EE28;
/// FDIRHASH: bucket valid.
pub const FDIRHASH_BUCKET_VALID: u32 = 1 << 15;
/// FDIRHASH: soft id shift.
pub const FDIRHASH_SOFT_ID_SHIFT: u32 = 16;
/// Flow Director filter command.
pub const FDIRCMD: u32 = 0x0_EE2C;
/// FDIRCMD: command field (self-clearing when the device has executed it).
pub const FDIRCMD_CMD_MASK: u32 = 0x3;
/// FDIRCMD: add a filter.
pub const FDIRCMD_ADD_FLOW: u32 = 0x1;
/// FDIRCMD: remove a filter.
pub const FDIRCMD_REMOVE_FLOW: u32 = 0x2;
/// FDIRCMD: query a filter.
pub const FDIRCMD_QUERY: u32 = 0x3;
/// FDIRCMD: the filter is valid.
pub const FDIRCMD_FILTER_VALID: u32 = 1 << 2;
/// FDIRCMD: update an existing filter in place (an add that may overwrite).
pub const FDIRCMD_FILTER_UPDATE: u32 = 1 << 3;
/// FDIRCMD: last filter in the linked list of its bucket (Linux and DPDK set it on every add).
pub const FDIRCMD_LAST: u32 = 1 << 11;
/// FDIRCMD: clear the whole filter table (Linux's `ixgbe_reinit_fdir_tables_82599` sets and clears it).
pub const FDIRCMD_CLEARHT: u32 = 1 << 8;
/// FDIRCMD: VM pool field shift (bits 29:24).
pub const FDIRCMD_VT_POOL_SHIFT: u32 = 24;
/// FDIRCMD: L4 type field, bits 6:5.
pub const FDIRCMD_L4TYPE_SHIFT: u32 = 5;
/// FDIRCMD: L4 type UDP.
pub const FDIRCMD_L4TYPE_UDP: u32 = 0x1 << 5;
/// FDIRCMD: L4 type TCP.
pub const FDIRCMD_L4TYPE_TCP: u32 = 0x2 << 5;
/// FDIRCMD: IPv6 filter.
pub const FDIRCMD_IPV6: u32 = 1 << 7;
/// FDIRCMD: drop matching packets.
pub const FDIRCMD_DROP: u32 = 1 << 9;
/// FDIRCMD: route matching packets to the queue in bits 22:16.
pub const FDIRCMD_QUEUE_EN: u32 = 1 << 15;
/// FDIRCMD: RX queue field shift.
pub const FDIRCMD_RX_QUEUE_SHIFT: u32 = 16;
/// Flow Director free filter counts.
pub const FDIRFREE: u32 = 0x0_EE38;
/// FDIRFREE: free filters, bits 15:0.
pub const FDIRFREE_FREE_MASK: u32 = 0xFFFF;
/// Flow Director add/remove statistics.
pub const FDIRUSTAT: u32 = 0x0_EE50;
/// FDIRUSTAT: filters added, bits 15:0.
pub const FDIRUSTAT_ADD_MASK: u32 = 0xFFFF;
/// FDIRUSTAT: filters removed, bits 31:16.
pub const FDIRUSTAT_REMOVE_SHIFT: u32 = 16;
/// Flow Director failed add/remove statistics.
pub const FDIRFSTAT: u32 = 0x0_EE54;
/// FDIRFSTAT: failed adds, bits 7:0.
pub const FDIRFSTAT_FADD_MASK: u32 = 0xFF;
/// FDIRFSTAT: failed removes, bits 15:8.
pub const FDIRFSTAT_FREMOVE_SHIFT: u32 = 8;
/// FDIRFSTAT: the mask of each field (after shifting).
pub const FDIRFSTAT_FIELD_MASK: u32 = 0xFF;
/// The bucket hash key Linux and DPDK write to [`FDIRHKEY`] (`IXGBE_ATR_BUCKET_HASH_KEY`).
pub const ATR_BUCKET_HASH_KEY: u32 = 0x3DAD_14E2;
/// The signature hash key Linux and DPDK write to [`FDIRSKEY`] (`IXGBE_ATR_SIGNATURE_HASH_KEY`).
pub const ATR_SIGNATURE_HASH_KEY: u32 = 0x174D_3614;
/// FDIRHASH: the bits of the bucket hash a perfect-match filter uses with PBALLOC 64 KiB (11 bits).
pub const FDIR_PERFECT_BUCKET_MASK_64K: u32 = 0x07FF;
/// FDIRHASH: as above with PBALLOC 128 KiB (12 bits).
pub const FDIR_PERFECT_BUCKET_MASK_128K: u32 = 0x0FFF;
/// FDIRHASH: as above with PBALLOC 256 KiB (13 bits: 8K buckets).
pub const FDIR_PERFECT_BUCKET_MASK_256K: u32 = 0x1FFF;
/// The Flow Director flow type of TCP over IPv4 (`IXGBE_ATR_FLOW_TYPE_TCPV4`): byte 1 of the hash
/// input, and the L4 type / IPv6 bits of FDIRCMD (shifted by [`FDIRCMD_L4TYPE_SHIFT`]).
pub const FDIR_FLOW_TYPE_TCPV4: u32 = 0x2;
/// Flow Director matched packets (clear on read).
pub const FDIRMATCH: u32 = 0x0_EE58;
/// Flow Director missed packets (clear on read).
pub const FDIRMISS: u32 = 0x0_EE5C;

// --- Statistics (§8.2.3.23; clear on read unless noted) ----------------------------------------------

/// CRC error count.
pub const CRCERRS: u32 = 0x0_4000;
/// Illegal byte error count.
pub const ILLERRC: u32 = 0x0_4004;
/// Error byte count.
pub const ERRBC: u32 = 0x0_4008;
/// Missed packets count of packet buffer `i` (0..8).
#[must_use]
pub const fn mpc(i: u32) -> u32 {
    0x0_3FA0 + 4 * i
}
/// Receive no buffers count of packet buffer `i` (0..8).
#[must_use]
pub const fn rnbc(i: u32) -> u32 {
    0x0_3FC0 + 4 * i
}
/// Receive length error count.
pub const RLEC: u32 = 0x0_4040;
/// Good packets received count.
pub const GPRC: u32 = 0x0_4074;
/// Broadcast packets received count.
pub const BPRC: u32 = 0x0_4078;
/// Multicast packets received count.
pub const MPRC: u32 = 0x0_407C;
/// Good packets transmitted count.
pub const GPTC: u32 = 0x0_4080;
/// Good octets received count, low 32 bits.
pub const GORCL: u32 = 0x0_4088;
/// Good octets received count, high bits (reading it clears the pair).
pub const GORCH: u32 = 0x0_408C;
/// Good octets transmitted count, low 32 bits.
pub const GOTCL: u32 = 0x0_4090;
/// Good octets transmitted count, high bits.
pub const GOTCH: u32 = 0x0_4094;
/// Receive undersize count.
pub const RUC: u32 = 0x0_40A4;
/// Receive oversize count.
pub const ROC: u32 = 0x0_40AC;
/// Total packets received.
pub const TPR: u32 = 0x0_40D0;
/// Total packets transmitted.
pub const TPT: u32 = 0x0_40D4;
/// Receive Queue Statistic Mapping register `i` (0..32, §8.2.3.23): four 8-bit entries, the low 4
/// bits of entry `j` name the statistics counter (QPRC/QPRDC index) of RX queue `4i + j`. All zero after
/// reset: every queue counts in counter 0.
#[must_use]
pub const fn rqsmr(i: u32) -> u32 {
    0x0_2300 + 4 * i
}
/// Transmit Queue Statistic Mapping register `i` (0..32, §8.2.3.23), as [`rqsmr`] for QPTC.
#[must_use]
pub const fn tqsm(i: u32) -> u32 {
    0x0_8600 + 4 * i
}
/// Queue packets received count of queue `q` (0..16).
#[must_use]
pub const fn qprc(q: u32) -> u32 {
    0x0_1030 + 0x40 * q
}
/// Queue packets received drop count of queue `q` (0..16): packets dropped for lack of descriptors
/// with SRRCTL.DROP_EN set.
#[must_use]
pub const fn qprdc(q: u32) -> u32 {
    0x0_1430 + 0x40 * q
}
/// Queue packets transmitted count of queue `q` (0..16).
#[must_use]
pub const fn qptc(q: u32) -> u32 {
    0x0_6030 + 0x40 * q
}

// --- Descriptors (§7.1.6 receive, §7.2.3 transmit) ---------------------------------------------------

/// Bytes per descriptor (both directions).
pub const DESC_LEN: usize = 16;

/// Advanced RX descriptor, read format (§7.1.6.1): word 0 = packet buffer address, word 1 = header
/// buffer address (0: one buffer).
///
/// Write-back format (§7.1.6.2), word 0: bits 3:0 RSS type, 16:4 packet type, 31:17 header info;
/// bits 63:32 the RSS hash, or for a Flow Director perfect-match filter hit the bucket hash in 46:32
/// and the filter's soft id in 63:48. Word 1: bits 19:0 extended status, 31:20 extended errors,
/// 47:32 packet length, 63:48 VLAN tag.
pub mod rx {
    /// Word 1: descriptor done.
    pub const STAT_DD: u64 = 1 << 0;
    /// Word 1: end of packet.
    pub const STAT_EOP: u64 = 1 << 1;
    /// Word 1: a Flow Director filter matched (§7.1.6.2, "FLM").
    pub const STAT_FLM: u64 = 1 << 2;
    /// Word 1: VLAN packet.
    pub const STAT_VP: u64 = 1 << 3;
    /// Word 1: an RX data error (bad CRC, symbol, ...): bit 29 ("RXE").
    pub const ERR_RXE: u64 = 1 << 29;
    /// Word 1: the extended error bits that mean the frame itself is bad and must not be delivered:
    /// header buffer overflow (23) and the frame errors CE/LE/PE/OSE/USE/RXE (29:24). The L3/L4
    /// checksum errors (IPE 30, TCPE 31) and the Flow Director error field (21:20) are not frame
    /// errors: the stack checks checksums itself.
    pub const ERR_FRAME_MASK: u64 = 0x3F80_0000;
    /// Word 1: shift of the packet length.
    pub const LEN_SHIFT: u32 = 32;
    /// Word 0: mask of the RSS type.
    pub const RSS_TYPE_MASK: u64 = 0xF;
    /// Word 0: RSS type TCP/IPv4.
    pub const RSS_TYPE_TCP_IPV4: u64 = 0x1;
    /// Word 0: RSS type IPv4.
    pub const RSS_TYPE_IPV4: u64 = 0x2;
    /// Word 0: RSS type TCP/IPv6.
    pub const RSS_TYPE_TCP_IPV6: u64 = 0x3;
    /// Word 0: RSS type IPv6.
    pub const RSS_TYPE_IPV6: u64 = 0x5;
    /// Word 0: RSS type UDP/IPv4.
    pub const RSS_TYPE_UDP_IPV4: u64 = 0x7;
    /// Word 0: RSS type UDP/IPv6.
    pub const RSS_TYPE_UDP_IPV6: u64 = 0x8;
    /// Word 0: packet type IPv4 (bit 4 of the word: bit 0 of the packet type field, §7.1.6.2).
    pub const PKT_TYPE_IPV4: u64 = 1 << 4;
    /// Word 0: packet type IPv6.
    pub const PKT_TYPE_IPV6: u64 = 1 << 6;
    /// Word 0: packet type TCP.
    pub const PKT_TYPE_TCP: u64 = 1 << 8;
    /// Word 0: packet type UDP.
    pub const PKT_TYPE_UDP: u64 = 1 << 9;
    /// Word 0: shift of the RSS hash / Flow Director id field.
    pub const HASH_SHIFT: u32 = 32;
    /// Word 0: shift of the Flow Director soft id (perfect match).
    pub const FDIR_ID_SHIFT: u32 = 48;
}

/// Advanced TX data descriptor (§7.2.3.2.4): word 0 = buffer address; word 1: bits 15:0 data length,
/// 23:20 descriptor type, 31:24 command, 63:46 payload length; on write-back (§7.2.3.2.4, when RS is
/// set) bit 32 of word 1 is DD.
pub mod tx {
    /// Word 1: descriptor type "advanced data".
    pub const DTYP_DATA: u64 = 0x3 << 20;
    /// Word 1: descriptor type "advanced context" (§7.2.3.2.3).
    pub const DTYP_CONTEXT: u64 = 0x2 << 20;
    /// Word 1: mask of the descriptor type.
    pub const DTYP_MASK: u64 = 0xF << 20;
    /// Word 1: command end of packet.
    pub const DCMD_EOP: u64 = 1 << 24;
    /// Word 1: command insert FCS.
    pub const DCMD_IFCS: u64 = 1 << 25;
    /// Word 1: command report status (write back DD).
    pub const DCMD_RS: u64 = 1 << 27;
    /// Word 1: command descriptor extension (advanced format).
    pub const DCMD_DEXT: u64 = 1 << 29;
    /// Word 1: shift of the payload length.
    pub const PAYLEN_SHIFT: u32 = 46;
    /// Word 1: mask of the data length.
    pub const DTALEN_MASK: u64 = 0xFFFF;
    /// Word 1 on write-back: descriptor done.
    pub const STAT_DD: u64 = 1 << 32;
}
