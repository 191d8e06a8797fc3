//! [`PcapWriter`]: a middleware that records every frame a device receives and transmits in a pcap
//! file (link type Ethernet, nanosecond timestamps), readable by tcpdump and Wireshark.
//!
//! Records are serialised by the [`pcap_file`] crate into a staging buffer and then copied to the
//! (buffered) output: received frames once `rx_burst` returns them, transmitted frames only once the
//! wrapped device has accepted them (a frame left in the batch for a retry is recorded when it is
//! finally sent, once). All frames of one burst share one timestamp, read once per burst from the
//! system clock.
//!
//! Recording never disturbs the data path: a write error is counted in [`PcapStats::write_errors`] and
//! logged once (`tracing::warn!`), and the device keeps working; the file may then miss records.
//! The output is flushed when the writer is dropped (errors counted and logged the same way) or by
//! [`PcapWriter::flush`].

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket};

use super::{DevError, DeviceInfo, DeviceStats, Link, NetDevice, PacketBatch};
use crate::pool::{Packet, PoolCache};

/// The longest frame recorded in full (pcap's `snaplen`); longer ones are cut to this length, with
/// their original length in the record.
const SNAPLEN: u32 = 65_535;

/// What a [`PcapWriter`] recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcapStats {
    /// Received frames recorded.
    pub rx_frames: u64,
    /// Transmitted frames recorded.
    pub tx_frames: u64,
    /// Bytes written to the output, headers included.
    pub bytes_written: u64,
    /// Records or flushes that failed (the first is logged); the file may miss those records.
    pub write_errors: u64,
}

/// A byte buffer that the `pcap_file` writer serialises into and we copy from.
#[derive(Clone, Debug, Default)]
struct Staging(Arc<Mutex<Vec<u8>>>);

impl Staging {
    fn with<R>(&self, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Write for Staging {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.with(|v| v.extend_from_slice(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Wraps a device and records its traffic in a pcap file (see the [module documentation](self)).
///
/// ```no_run
/// use netchannel::dev::{Pair, PcapWriter};
/// use netchannel::pool::Pool;
///
/// let pool = Pool::new(1024)?;
/// let (a, _b) = Pair::new(&pool)?;
/// let a = PcapWriter::create(a, "/tmp/a.pcap")?; // use `a` as any NetDevice
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PcapWriter<D, W: Write = BufWriter<File>> {
    inner: D,
    recorder: pcap_file::pcap::PcapWriter<Staging>,
    staging: Staging,
    /// Where each staged record ends (for transmit bursts, whose accepted prefix is committed).
    ends: Vec<usize>,
    out: W,
    stats: PcapStats,
    warned: bool,
}

impl<D: std::fmt::Debug, W: Write> std::fmt::Debug for PcapWriter<D, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapWriter")
            .field("inner", &self.inner)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<D> PcapWriter<D, BufWriter<File>> {
    /// Wraps `inner`, recording into a new file at `path` (truncated if it exists), buffered.
    ///
    /// # Errors
    ///
    /// The file cannot be created or its header written.
    pub fn create(inner: D, path: impl AsRef<Path>) -> io::Result<Self> {
        Self::new(inner, BufWriter::with_capacity(1 << 16, File::create(path)?))
    }
}

impl<D, W: Write> PcapWriter<D, W> {
    /// Wraps `inner`, recording into `out` (buffer it yourself: each record is one `write_all`).
    ///
    /// # Errors
    ///
    /// The pcap header cannot be written to `out`.
    pub fn new(inner: D, mut out: W) -> io::Result<Self> {
        let staging = Staging::default();
        let header = PcapHeader {
            snaplen: SNAPLEN,
            datalink: DataLink::ETHERNET,
            ts_resolution: pcap_file::TsResolution::NanoSecond,
            endianness: pcap_file::Endianness::native(),
            ..PcapHeader::default()
        };
        let recorder =
            pcap_file::pcap::PcapWriter::with_header(staging.clone(), header).map_err(io::Error::other)?;
        let header_bytes = staging.with(std::mem::take);
        out.write_all(&header_bytes)?;
        let stats = PcapStats { bytes_written: header_bytes.len() as u64, ..PcapStats::default() };
        Ok(Self { inner, recorder, staging, ends: Vec::new(), out, stats, warned: false })
    }

    /// The wrapped device.
    #[must_use]
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, mutably (frames moved through it directly are not recorded).
    #[must_use]
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// What was recorded.
    #[must_use]
    pub fn pcap_stats(&self) -> PcapStats {
        self.stats
    }

    /// Writes buffered records to the output.
    ///
    /// # Errors
    ///
    /// What the output's `flush` reports (also counted in [`PcapStats::write_errors`]).
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush().inspect_err(|e| self.write_failed(e))
    }

    fn write_failed(&mut self, e: &dyn std::fmt::Display) {
        self.stats.write_errors += 1;
        if !self.warned {
            self.warned = true;
            tracing::warn!(error = %e, "pcap recording failed; the capture will miss frames (further errors are only counted)");
        }
    }

    /// Stages one record for `packet`.
    fn stage(&mut self, timestamp: Duration, packet: &Packet<'_>) {
        let data = packet.data();
        let orig_len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let captured = &data[..data.len().min(SNAPLEN as usize)];
        match self.recorder.write_packet(&PcapPacket::new(timestamp, orig_len, captured)) {
            Ok(_) => self.ends.push(self.staging.with(|v| v.len())),
            Err(e) => {
                // Nothing (or a partial record) was staged: cut back to the last good record.
                let end = self.ends.last().copied().unwrap_or(0);
                self.staging.with(|v| v.truncate(end));
                self.write_failed(&e);
            }
        }
    }

    /// Writes the first `records` staged records to the output and discards the rest.
    fn commit(&mut self, records: usize) {
        let end = match records.checked_sub(1) {
            Some(last) => self.ends.get(last).copied().unwrap_or(0),
            None => 0,
        };
        self.ends.clear();
        let result = self.staging.with(|v| {
            let end = end.min(v.len());
            let r = self.out.write_all(&v[..end]).map(|()| end);
            v.clear();
            r
        });
        match result {
            Ok(n) => self.stats.bytes_written += n as u64,
            Err(e) => self.write_failed(&e),
        }
    }
}

fn now() -> Duration {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default()
}

impl<D: NetDevice, W: Write> NetDevice for PcapWriter<D, W> {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn link(&self) -> Link {
        self.inner.link()
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }

    fn rx_burst<'c>(
        &mut self,
        queue: u16,
        cache: &'c PoolCache,
        batch: &mut PacketBatch<'c>,
    ) -> Result<usize, DevError> {
        let start = batch.len();
        let n = self.inner.rx_burst(queue, cache, batch)?;
        if n > 0 {
            let ts = now();
            let end = batch.len();
            for packet in &batch.as_slice()[start.min(end)..] {
                self.stage(ts, packet);
            }
            let staged = self.ends.len();
            self.commit(staged);
            self.stats.rx_frames += staged as u64;
        }
        Ok(n)
    }

    fn tx_burst(&mut self, queue: u16, batch: &mut PacketBatch<'_>) -> Result<usize, DevError> {
        if batch.is_empty() {
            return self.inner.tx_burst(queue, batch);
        }
        let ts = now();
        for packet in batch.as_slice() {
            let before = self.ends.len();
            self.stage(ts, packet);
            if self.ends.len() == before {
                // Staging failed (counted): the records after it would no longer line up with the
                // packets, so only the prefix before it is recorded.
                break;
            }
        }
        let result = self.inner.tx_burst(queue, batch);
        let accepted = *result.as_ref().unwrap_or(&0);
        let recorded = accepted.min(self.ends.len());
        self.commit(recorded);
        self.stats.tx_frames += recorded as u64;
        result
    }

    fn wait_rx(&mut self, queue: u16, timeout: Option<std::time::Duration>) -> Result<(), DevError> {
        self.inner.wait_rx(queue, timeout)
    }
}

impl<D, W: Write> Drop for PcapWriter<D, W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::Pair;
    use crate::pool::{HugePages, Pool};

    /// An output that accepts `left` bytes, then fails every write and flush.
    struct FailAfter {
        left: usize,
    }

    impl Write for FailAfter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if buf.len() > self.left {
                return Err(io::Error::other("disk on fire"));
            }
            self.left -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            if self.left == 0 { Err(io::Error::other("disk on fire")) } else { Ok(()) }
        }
    }

    fn frames<'c>(cache: &'c PoolCache, batch: &mut PacketBatch<'c>, n: usize, len: usize) {
        for _ in 0..n {
            let mut p = cache.alloc().unwrap();
            p.extend_from_slice(&vec![0x42; len]).unwrap();
            batch.push(p).unwrap();
        }
    }

    #[test]
    fn records_only_what_was_sent_and_counts_write_errors() {
        let pool = Pool::builder(64).hugepages(HugePages::Never).build().unwrap();
        assert!(PcapWriter::new(Pair::new(&pool).unwrap().0, FailAfter { left: 0 }).is_err());

        let (a, mut b) = Pair::builder(&pool).capacity(2).build().unwrap();
        let mut in_memory = PcapWriter::new(a, Vec::new()).unwrap();
        let cache = pool.cache();
        let mut batch = PacketBatch::with_capacity(4);
        frames(&cache, &mut batch, 3, 60);
        assert_eq!(in_memory.tx_burst(0, &mut batch).unwrap(), 2, "the wire holds 2");
        assert_eq!(in_memory.pcap_stats().tx_frames, 2, "the one left in the batch is not recorded");
        assert_eq!(in_memory.out.len(), 24 + 2 * (16 + 60));
        let mut rx = PacketBatch::with_capacity(4);
        assert_eq!(b.rx_burst(0, &cache, &mut rx).unwrap(), 2);
        rx.clear();
        assert_eq!(in_memory.tx_burst(0, &mut batch).unwrap(), 1);
        assert_eq!(in_memory.pcap_stats().tx_frames, 3);
        assert_eq!(in_memory.pcap_stats().bytes_written, 24 + 3 * (16 + 60));
        assert_eq!(b.rx_burst(0, &cache, &mut rx).unwrap(), 1);
        rx.clear();

        let (c, mut d) = Pair::new(&pool).unwrap();
        let mut broken = PcapWriter::new(c, FailAfter { left: 24 }).unwrap();
        frames(&cache, &mut batch, 2, 70);
        assert_eq!(d.tx_burst(0, &mut batch).unwrap(), 2);
        assert_eq!(broken.rx_burst(0, &cache, &mut rx).unwrap(), 2, "the data path is unharmed");
        assert_eq!(rx.as_slice()[1].len(), 70);
        assert_eq!(broken.pcap_stats().write_errors, 1);
        frames(&cache, &mut batch, 1, 70);
        assert_eq!(broken.tx_burst(0, &mut batch).unwrap(), 1);
        assert_eq!(broken.pcap_stats().write_errors, 2);
        assert!(broken.flush().is_err());
        assert_eq!(broken.pcap_stats().write_errors, 3);
        drop((rx, batch));
        drop((in_memory, broken, b, d, cache));
        pool.check_leaks().unwrap();
    }
}
