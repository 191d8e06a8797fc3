//! What a run of the hyper service did: each core's HTTP counters ([`CoreReport`]) and the summary
//! a person reads ([`Report`]'s `Display`).

use std::fmt;
use std::time::Duration;

use crate::httpd::{ClientReport, write_client_and_cpu};
use crate::service::ServiceReport;
use crate::util::mib;

/// What one core's hyper service did (the runtime's own counters for the core, its stack's
/// included, are in the snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreReport {
    /// The core (and queue) number.
    pub core: usize,
    /// Connections this core served (its own, and those it stole).
    pub conns: u64,
    /// 200 responses.
    pub ok: u64,
    /// 404 responses.
    pub not_found: u64,
    /// Body bytes of the responses.
    pub bytes: u64,
    /// Connections hyper ended with an error (a malformed request, a reset), not counting header
    /// timeouts nor those the runtime's stop cut off.
    pub errors: u64,
    /// The first of those errors, in hyper's words.
    pub first_error: Option<String>,
    /// Connections closed by `--idle-timeout`.
    pub idle_timeouts: u64,
    /// Connections hyper closed for `--header-timeout` (a request head not complete in time).
    pub header_timeouts: u64,
    /// CPU time of the core's thread while it served (Linux schedstat), when known; with the
    /// `split` placement its channelizer's thread is not counted.
    pub cpu: Option<Duration>,
}

/// Everything a run did ([`ServiceReport`] with no details of its own); [`fmt::Display`] is the
/// summary a person reads.
pub type Report = ServiceReport<ClientReport, CoreReport, ()>;

impl Report {
    /// Requests the server answered (200 and 404).
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.cores.iter().map(|c| c.ok + c.not_found).sum()
    }

    /// Connections that ended with an error, over every core.
    #[must_use]
    pub fn errors(&self) -> u64 {
        self.cores.iter().map(|c| c.errors).sum()
    }

    /// The server cores' CPU time, when known.
    #[must_use]
    pub fn server_cpu(&self) -> Option<Duration> {
        self.cores.iter().map(|c| c.cpu).sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "summary: hyper 1.x HTTP/1.1 on {}, port {}", self.runtime.setup, self.port)?;
        write_client_and_cpu(f, self.client.as_ref(), self.server_cpu(), self.requests(), self.snapshot())?;
        self.write_accept(f, "steals")?;
        for c in &self.cores {
            writeln!(
                f,
                "  core {}: {} conns, {} requests (200 {} / 404 {}), {:.1} MiB of bodies; {} errors, {} header \
                 timeouts, {} idle timeouts",
                c.core,
                c.conns,
                c.ok + c.not_found,
                c.ok,
                c.not_found,
                mib(c.bytes),
                c.errors,
                c.header_timeouts,
                c.idle_timeouts
            )?;
            if let Some(e) = &c.first_error {
                writeln!(f, "    first error: {e}")?;
            }
        }
        self.write_runtime(f)
    }
}
