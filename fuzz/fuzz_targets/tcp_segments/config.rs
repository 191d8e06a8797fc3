//! The fuzzed configuration of the `tcp_segments` target: buffer sizes and every
//! `tcp_lib::tcp::Config` field, most from spare bits of a few bytes so that older inputs keep
//! their configuration.

use std::sync::Arc;
use std::time::Duration;

use arbitrary::Arbitrary;
use tcp_lib::tcp::{
    BufferBudget, Config, CongestionAlgorithm, Ecn, HyStart, Keepalive, Pacing, Push, WindowProbe,
};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum BufSize {
    Tiny,
    Small,
    Medium,
    Max16,
    Scaled,
    Custom(u16),
}

impl BufSize {
    fn bytes(self) -> usize {
        match self {
            Self::Tiny => 64,
            Self::Small => 1024,
            Self::Medium => 8192,
            Self::Max16 => 65_535,
            Self::Scaled => 300_000,
            Self::Custom(n) => usize::from(n).max(1),
        }
    }
}

#[derive(Arbitrary, Debug)]
pub(super) struct ConfigIn {
    send_buffer: BufSize,
    recv_buffer: BufSize,
    mss: u16,
    window_scaling: bool,
    timestamps: bool,
    sack: bool,
    msl: u8,
    initial_rto: u8,
    min_rto: u8,
    max_retransmits: u8,
    syn_retries: u8,
    delayed_ack: Option<u16>,
    keepalive: Option<(u16, u8, u8)>,
    nodelay: bool,
    max_ooo_ranges: u8,
    newreno: bool,
    challenge_ack_limit: u8,
    rcv_wscale: Option<u8>,
    initial_window: Option<u8>,
    quick_acks: u8,
    slow_start_per_ack: u8,
}

impl ConfigIn {
    /// A buffer budget of 0, 2, 8 or 32 KiB for the connection (bit 7 on; the size from bits 2
    /// and 3), from bits of `challenge_ack_limit` nothing else reads (its value takes bits 0 and
    /// 1, ECN bits 4 and 5, RACK bit 6), so that older inputs keep their configuration.
    pub(super) fn budget(&self) -> Option<Arc<BufferBudget>> {
        let size = [0, 2048, 8192, 32_768][usize::from((self.challenge_ack_limit >> 2) & 3)];
        (self.challenge_ack_limit & 0x80 != 0).then(|| Arc::new(BufferBudget::new(size)))
    }

    pub(super) fn config(&self) -> Config {
        Config {
            send_buffer: self.send_buffer.bytes(),
            recv_buffer: self.recv_buffer.bytes(),
            mss: 64 + self.mss % 9000,
            window_scaling: self.window_scaling,
            timestamps: self.timestamps,
            sack: self.sack,
            msl: Duration::from_millis(100 * (1 + u64::from(self.msl % 100))),
            initial_rto: [Duration::from_millis(200), Duration::from_secs(1), Duration::from_secs(3)]
                [usize::from(self.initial_rto % 3)],
            min_rto: [Duration::from_millis(1), Duration::from_millis(200), Duration::from_secs(1)]
                [usize::from(self.min_rto % 3)],
            max_retransmits: u32::from(self.max_retransmits % 16),
            syn_retries: u32::from(self.syn_retries % 8),
            delayed_ack: self.delayed_ack.map(|ms| Duration::from_millis(u64::from(ms % 501))),
            keepalive: self.keepalive.map(|(idle, interval, probes)| Keepalive {
                idle: Duration::from_secs(1 + u64::from(idle % 600)),
                interval: Duration::from_secs(1 + u64::from(interval % 75)),
                probes: u32::from(probes % 10),
            }),
            nodelay: self.nodelay,
            max_ooo_ranges: usize::from(self.max_ooo_ranges % 17),
            // Bit 7 of the SYN-retries byte: Linux's CUBIC arithmetic instead of RFC 9438's, or
            // BBR instead of NewReno.
            congestion: match (self.newreno, self.syn_retries & 0x80 != 0) {
                (true, false) => CongestionAlgorithm::NewReno,
                (true, true) => CongestionAlgorithm::Bbr,
                (false, false) => CongestionAlgorithm::Cubic,
                (false, true) => CongestionAlgorithm::LinuxCubic,
            },
            // Bits 3 and 4 of the SYN-retries byte (bits 0 to 2 choose the retries), bits 5 and 6
            // Linux's RTO estimator and growth for SACKed data under reordering.
            hystart: [HyStart::Off, HyStart::Linux, HyStart::Rfc9406, HyStart::Off]
                [usize::from((self.syn_retries >> 3) & 3)],
            linux_rto: self.syn_retries & 0x20 != 0,
            grow_on_reordered_sacks: self.syn_retries & 0x40 != 0,
            challenge_ack_limit: [0, 1, 10, 1000][usize::from(self.challenge_ack_limit % 4)],
            rcv_wscale: self.rcv_wscale.map(|s| s % 16),
            initial_window: self.initial_window.map(|n| usize::from(n % 65)),
            // Bits 0 to 5 of the quick-ACK byte; bit 6 Linux's PSH placement, bit 7 its empty
            // zero-window probes.
            quick_acks: usize::from((self.quick_acks & 0x3f) % 33),
            slow_start_segments_per_ack: 1 + usize::from(self.slow_start_per_ack % 64),
            cwnd_validation: self.slow_start_per_ack & 0x80 != 0,
            tail_loss_probe: self.slow_start_per_ack & 0x40 != 0,
            // Bits 4 and 5 of the challenge-ACK byte (bits 0 and 1 choose the limit).
            ecn: [Ecn::Passive, Ecn::Off, Ecn::On, Ecn::Passive]
                [usize::from((self.challenge_ack_limit >> 4) & 3)],
            // Bit 6 of the same byte.
            rack: self.challenge_ack_limit & 0x40 != 0,
            // Bits 4 to 6 of the retransmission limit's byte (bits 0 to 3 choose the limit).
            rack_rtt_sequence_order: self.max_retransmits & 0x10 != 0,
            sack_in_segments: self.max_retransmits & 0x20 != 0,
            ecn_prr: self.max_retransmits & 0x40 != 0,
            // Bit 7 of the same byte.
            restart_after_idle: self.max_retransmits & 0x80 != 0,
            push: if self.quick_acks & 0x40 != 0 { Push::Linux { min_tso_segs: 2 } } else { Push::Burst },
            window_probe: if self.quick_acks & 0x80 != 0 { WindowProbe::Empty } else { WindowProbe::Byte },
            // Bits 6 and 7 of the initial-RTO byte (its value modulo 3 chooses the RTO as before):
            // pacing as Linux's, or capped at 10 kB/s so that departures wait long.
            pacing: [
                None,
                Some(Pacing::LINUX),
                Some(Pacing { max_rate: Some(10_000), ..Pacing::LINUX }),
                None,
            ][usize::from(self.initial_rto >> 6)],
            // Bit 7 of the window scale byte (bits 0 to 3 choose the shift): the fast path off.
            header_prediction: !self.rcv_wscale.is_some_and(|s| s & 0x80 != 0),
            // Bits 4 and 5 of the same byte: no D-SACKs sent (on by default, so that older
            // inputs send them), and undoing a reduction D-SACKs prove spurious.
            dsack: !self.rcv_wscale.is_some_and(|s| s & 0x10 != 0),
            dsack_undo: self.rcv_wscale.is_some_and(|s| s & 0x20 != 0),
            // Bit 6 of the same byte: receive-buffer autotuning up to eight times the buffer.
            recv_buffer_max: if self.rcv_wscale.is_some_and(|s| s & 0x40 != 0) {
                8 * self.recv_buffer.bytes()
            } else {
                0
            },
        }
    }
}
