//! What a run of httpd did: each core's HTTP counters ([`CoreReport`]), how it sent ([`Served`]),
//! and the summary a person reads ([`Report`]'s `Display`).

use std::fmt;
use std::time::Duration;

use netchannel_runtime::Snapshot;
use netchannel_runtime::stats::CoreStats;

use super::client::ClientReport;
use super::content::InPool;
use crate::service::{ServiceReport, write_latency};
use crate::util::mib;

/// What one core's HTTP service did (the runtime's own counters for the core, its stack's
/// included, are in the snapshot: [`Report::core_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreReport {
    /// The core (and queue) number.
    pub core: usize,
    /// Connections this core served (its own, and those it stole).
    pub conns: u64,
    /// Responses queued, by status: 200, 400, 404, 405.
    pub responses: [u64; 4],
    /// Response bytes queued (headers and bodies).
    pub bytes: u64,
    /// Connections that failed (reset, timed out).
    pub failed: u64,
    /// Connections open when the server stopped.
    pub open_at_exit: u64,
    /// Connections cut off by `--header-timeout` (a 408 to those that sent part of a request).
    pub header_timeouts: u64,
    /// Kept-alive connections closed by `--idle-timeout`.
    pub idle_timeouts: u64,
    /// Connections refused over `--max-conns` (503).
    pub refused: u64,
    /// CPU time of the core's thread while it served (Linux schedstat), when known; with the
    /// `split` placement its channelizer's thread is not counted.
    pub cpu: Option<Duration>,
    /// What the core put into its pool of its copy of the responses (nothing with `--copy`).
    pub in_pool: InPool,
}

impl CoreReport {
    /// Responses of any status.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.responses.iter().sum()
    }
}

/// How httpd sent, and what it served: the `details` of its [`Report`].
#[derive(Clone, Debug)]
pub struct Served {
    /// Whether responses were copied (`--copy`) rather than sent by reference.
    pub copy: bool,
    /// Where the content came from, in words.
    pub source: String,
}

/// Everything a run did ([`ServiceReport`]'s `details`: [`Served`]); [`fmt::Display`] is the
/// summary a person reads.
pub type Report = ServiceReport<ClientReport, CoreReport, Served>;

impl Report {
    /// The runtime's final counters for core `core` (its stack's, handoffs, channels).
    #[must_use]
    pub fn core_stats(&self, core: usize) -> Option<&CoreStats> {
        self.snapshot().cores.iter().find(|c| c.core == core)
    }

    /// Requests the server answered.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.cores.iter().map(CoreReport::requests).sum()
    }

    /// Connections that failed while served.
    #[must_use]
    pub fn failed(&self) -> u64 {
        self.cores.iter().map(|c| c.failed).sum()
    }

    /// Connections cut off by the header timeout, closed by the idle timeout, and refused over the
    /// cap, over every core.
    #[must_use]
    pub fn cut_off(&self) -> (u64, u64, u64) {
        let sum = |f: fn(&CoreReport) -> u64| self.cores.iter().map(f).sum();
        (sum(|c| c.header_timeouts), sum(|c| c.idle_timeouts), sum(|c| c.refused))
    }

    /// Segments the server's stacks sent from prepared content, and how many of them had their
    /// checksum from the precomputed table, over every core.
    #[must_use]
    pub fn prepared_segments(&self) -> (u64, u64) {
        let cores = &self.snapshot().cores;
        (
            cores.iter().map(|c| c.stack.tx_prepared).sum(),
            cores.iter().map(|c| c.stack.tx_prepared_sums).sum(),
        )
    }

    /// Segments the server's stacks sent by reference (from the pool copies of the responses),
    /// and segments of those copies sent by copy because the buffer's frame was still in flight,
    /// over every core.
    #[must_use]
    pub fn by_reference(&self) -> (u64, u64) {
        let cores = &self.snapshot().cores;
        (
            cores.iter().map(|c| c.stack.tx_by_reference).sum(),
            cores.iter().map(|c| c.stack.tx_by_reference_copied).sum(),
        )
    }

    /// Resets the server's stacks sent, over every core.
    #[must_use]
    pub fn resets(&self) -> u64 {
        self.snapshot().cores.iter().map(|c| c.stack.rst_sent).sum()
    }

    /// The server cores' CPU time, when known.
    #[must_use]
    pub fn server_cpu(&self) -> Option<Duration> {
        self.cores.iter().map(|c| c.cpu).sum()
    }
}

/// An HTTP summary's client line and latency (model backend) and its server CPU line: `cpu`
/// over the run (`snapshot`'s elapsed time) and per request of `requests`.
pub(crate) fn write_client_and_cpu(
    f: &mut fmt::Formatter<'_>,
    client: Option<&ClientReport>,
    cpu: Option<Duration>,
    requests: u64,
    snapshot: &Snapshot,
) -> fmt::Result {
    if let Some(c) = client {
        let secs = c.elapsed.as_secs_f64().max(1e-9);
        writeln!(
            f,
            "  client: {} of {} connections completed, {} responses checked ({:.1} MiB of bodies byte for byte) in \
             {secs:.2} s: {:.0} requests/s, {:.1} MiB/s",
            c.completed,
            c.conns,
            c.responses,
            mib(c.bytes),
            c.responses as f64 / secs,
            mib(c.bytes) / secs
        )?;
        write_latency(f, "request to last byte", &c.latency)?;
    }
    if let Some(cpu) = cpu {
        writeln!(
            f,
            "  server CPU: {:.3} s over {:.2} s, {:.1} us per request",
            cpu.as_secs_f64(),
            snapshot.elapsed.as_secs_f64(),
            cpu.as_secs_f64() * 1e6 / requests.max(1) as f64
        )?;
    }
    Ok(())
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runtime = &self.runtime;
        let mode = if self.details.copy {
            "copy (Stack::send)"
        } else {
            "prepared, by reference (Stack::send_prepared of pool buffers)"
        };
        writeln!(
            f,
            "summary: HTTP on {}, port {}, {mode}; {}",
            runtime.setup, self.port, self.details.source
        )?;
        write_client_and_cpu(f, self.client.as_ref(), self.server_cpu(), self.requests(), self.snapshot())?;
        self.write_accept(f, "steals")?;
        let snapshot = self.snapshot();
        for c in &self.cores {
            let stats = self.core_stats(c.core);
            let queue = snapshot.queues.iter().find(|q| q.queue == c.core);
            let (stolen, prepared, sums, rx, tx, resets, malformed) =
                stats.map_or((0, 0, 0, 0, 0, 0, 0), |s| {
                    let st = &s.stack;
                    (
                        s.handoff.accepted_stolen,
                        st.tx_prepared,
                        st.tx_prepared_sums,
                        st.rx_frames,
                        st.tx_frames,
                        st.rst_sent,
                        st.rx_malformed,
                    )
                });
            let dropped = stats.map_or(0, |s| s.tx_channel.refused_full)
                + queue.map_or(0, |q| q.channelizer.dropped_full + q.device.rx_dropped);
            writeln!(
                f,
                "  core {}: {} conns ({} stolen, {} failed, {} open at exit), responses 200 {} / 400 {} / 404 {} / \
                 405 {}, {:.1} MiB; {} header timeouts (408), {} idle timeouts, {} refused over the cap (503); \
                 segments from prepared content {prepared} ({sums} with precomputed sums); {rx} frames in, {tx} out; \
                 {resets} resets, {dropped} drops, {malformed} malformed",
                c.core,
                c.conns,
                stolen,
                c.failed,
                c.open_at_exit,
                c.responses[0],
                c.responses[1],
                c.responses[2],
                c.responses[3],
                mib(c.bytes),
                c.header_timeouts,
                c.idle_timeouts,
                c.refused,
            )?;
            let p = &c.in_pool;
            if p.responses > 0 {
                let (by_ref, copied) =
                    stats.map_or((0, 0), |s| (s.stack.tx_by_reference, s.stack.tx_by_reference_copied));
                let why = p.error.map_or_else(String::new, |e| format!(" (the rest by copy: {e})"));
                writeln!(
                    f,
                    "    by reference: {} of {} responses in the pool ({} buffers){why}; {by_ref} segments sent by \
                     reference, {copied} copied (the buffer's frame still in flight)",
                    p.pooled, p.responses, p.buffers
                )?;
            }
        }
        self.write_runtime(f)
    }
}
