//! The bounded table of datagrams in reassembly that the IPv4 and IPv6 reassemblers share
//! ([`ipv4::reassembly`](super::ipv4::reassembly), [`ipv6::reassembly`](super::ipv6::reassembly)):
//! byte runs, overlap and consistency checks, the datagram and byte budgets with oldest-first
//! eviction, and the timeout. Each reassembler's module documentation states the policy; what
//! differs between the two (the key, the header kept, what counts as a duplicate) is a parameter
//! here.

use std::time::{Duration, Instant};

use super::Error;

/// The bounds of a fragment reassembler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The most datagrams in flight at once.
    pub max_datagrams: usize,
    /// The most bytes of payload buffers all datagrams in flight hold together.
    pub max_bytes: usize,
    /// The most disjoint runs of received bytes one datagram may have.
    pub max_runs: usize,
    /// How long after its first fragment a datagram is dropped.
    pub timeout: Duration,
}

impl Default for Config {
    /// 16 datagrams, 256 KiB, 64 runs, 30 seconds (IPv4's default; the IPv6 reassembler's
    /// default uses RFC 8200's 60 seconds).
    fn default() -> Self {
        Self { max_datagrams: 16, max_bytes: 256 * 1024, max_runs: 64, timeout: Duration::from_secs(30) }
    }
}

/// Why a reassembler refused a packet or dropped its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FragmentError {
    /// The packet itself is invalid (as its `Repr::parse` sees it); nothing changed.
    Packet(Error),
    /// A fragment with more to follow whose payload is empty or not a multiple of 8 bytes; dropped.
    BadLength,
    /// The fragment reaches past 65535 bytes; dropped.
    TooLong,
    /// The fragment overlaps received data other than as a duplicate; its datagram was discarded.
    Overlap,
    /// The fragment disagrees with the known end of its datagram; the datagram was discarded.
    Inconsistent,
    /// The datagram cannot fit in the budget even alone; it was discarded.
    NoRoom,
    /// IPv6: the first fragment does not hold the whole extension-header chain (RFC 7112 §5;
    /// RFC 8200 §4.5 asks for a parameter problem, code 3); dropped.
    IncompleteChain,
}

impl From<Error> for FragmentError {
    fn from(e: Error) -> Self {
        Self::Packet(e)
    }
}

/// Which overlapping fragments are harmless duplicates (dropped) rather than overlaps (which
/// discard the datagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Duplicates {
    /// A fragment inside data already received with the same bytes (IPv4, as Linux does).
    Contained,
    /// Only a fragment with exactly the range and bytes of one received (RFC 8200 §4.5's "exact
    /// duplicate fragments"). Runs are then not merged: each is one fragment received, so
    /// [`Config::max_runs`] bounds the fragments a packet may have.
    Exact,
}

/// One fragment as the table sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Piece<'p, H> {
    /// The offset of its data in the datagram.
    pub(crate) offset: usize,
    /// Its data.
    pub(crate) data: &'p [u8],
    /// Whether more fragments follow.
    pub(crate) more: bool,
    /// The header the datagram will get, for the first fragment (offset zero).
    pub(crate) header: Option<H>,
}

#[derive(Debug)]
struct Entry<K, H> {
    key: K,
    created: Instant,
    deadline: Instant,
    /// The first fragment's header, once it arrived.
    header: Option<H>,
    /// Payload bytes, as long as the furthest end seen.
    data: Vec<u8>,
    /// Received byte ranges: sorted and disjoint; adjacent ones are merged unless duplicates
    /// must be exact.
    runs: Vec<(usize, usize)>,
    /// The payload length, once the last fragment arrived.
    total: Option<usize>,
}

impl<K, H> Entry<K, H> {
    fn is_complete(&self) -> bool {
        let (Some(total), Some(_)) = (self.total, &self.header) else { return false };
        // The runs, sorted and disjoint, must tile 0..total.
        let mut at = 0;
        for &(s, e) in &self.runs {
            if s != at {
                return false;
            }
            at = e;
        }
        at == total
    }

    /// Inserts `start..end` into the runs, merging with neighbours it touches if `merge`. The
    /// caller has checked that it overlaps none.
    fn insert_run(&mut self, start: usize, end: usize, merge: bool) {
        if !merge {
            let at = self.runs.partition_point(|&(s, _)| s < start);
            self.runs.insert(at, (start, end));
            return;
        }
        let at = self.runs.partition_point(|&(_, e)| e < start);
        let mut new = (start, end);
        let mut last = at;
        while last < self.runs.len() && self.runs[last].0 <= end {
            new.0 = new.0.min(self.runs[last].0);
            new.1 = new.1.max(self.runs[last].1);
            last += 1;
        }
        self.runs.splice(at..last, [new]);
    }

    /// The number of runs after inserting `start..end` (which overlaps none).
    fn runs_after(&self, start: usize, end: usize, merge: bool) -> usize {
        if !merge {
            return self.runs.len() + 1;
        }
        let touches_left = self.runs.iter().any(|&(_, e)| e == start);
        let touches_right = self.runs.iter().any(|&(s, _)| s == end);
        self.runs.len() + 1 - usize::from(touches_left) - usize::from(touches_right)
    }
}

/// The datagrams in flight, within a [`Config`]'s bounds.
#[derive(Debug)]
pub(crate) struct Table<K, H> {
    config: Config,
    entries: Vec<Entry<K, H>>,
    bytes: usize,
    duplicates: Duplicates,
}

impl<K: Copy + Eq, H: Copy> Table<K, H> {
    pub(crate) const fn new(config: Config, duplicates: Duplicates) -> Self {
        Self { config, entries: Vec::new(), bytes: 0, duplicates }
    }

    pub(crate) const fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) const fn buffered_bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.entries.iter().map(|e| e.deadline).min()
    }

    pub(crate) fn expire(&mut self, now: Instant) -> usize {
        let before = self.entries.len();
        let mut freed = 0;
        self.entries.retain(|e| {
            let keep = e.deadline > now;
            if !keep {
                freed += e.data.len();
            }
            keep
        });
        self.bytes -= freed;
        before - self.entries.len()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn merges(&self) -> bool {
        self.duplicates == Duplicates::Contained
    }

    fn remove(&mut self, index: usize) -> Entry<K, H> {
        let entry = self.entries.swap_remove(index);
        self.bytes -= entry.data.len();
        entry
    }

    /// Evicts the oldest entry other than `keep`; false if there is none.
    fn evict_oldest(&mut self, keep: Option<K>) -> bool {
        let oldest = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| Some(e.key) != keep)
            .min_by_key(|(_, e)| e.created)
            .map(|(i, _)| i);
        match oldest {
            Some(i) => {
                self.remove(i);
                true
            }
            None => false,
        }
    }

    fn discard(&mut self, key: K, why: FragmentError) -> FragmentError {
        if let Some(i) = self.entries.iter().position(|e| e.key == key) {
            self.remove(i);
        }
        why
    }

    /// Adds a fragment of datagram `key` at `now` (the caller expired what is due and checked the
    /// fragment's own lengths). Returns the header and payload when it completes the datagram.
    pub(crate) fn add(
        &mut self,
        key: K,
        now: Instant,
        piece: Piece<'_, H>,
    ) -> Result<Option<(H, Vec<u8>)>, FragmentError> {
        let Piece { offset, data: payload, more, header } = piece;
        let end = offset + payload.len();
        let index = match self.entries.iter().position(|e| e.key == key) {
            Some(i) => i,
            None => {
                while self.entries.len() >= self.config.max_datagrams {
                    if !self.evict_oldest(None) {
                        // max_datagrams is 0: nothing can be kept.
                        return Err(FragmentError::NoRoom);
                    }
                }
                self.entries.push(Entry {
                    key,
                    created: now,
                    deadline: now + self.config.timeout,
                    header: None,
                    data: Vec::new(),
                    runs: Vec::new(),
                    total: None,
                });
                self.entries.len() - 1
            }
        };
        let entry = &self.entries[index];

        // The end of the datagram.
        let known_end = entry.runs.last().map_or(0, |&(_, e)| e);
        if more {
            if entry.total.is_some_and(|total| end > total) {
                return Err(self.discard(key, FragmentError::Inconsistent));
            }
        } else if entry.total.is_some_and(|total| total != end) || known_end > end {
            return Err(self.discard(key, FragmentError::Inconsistent));
        }

        // Overlaps: a duplicate is ignored; anything else discards.
        if offset < end {
            let overlapping = entry.runs.iter().filter(|&&(s, e)| s < end && offset < e).count();
            if overlapping > 0 {
                let duplicate = match self.duplicates {
                    Duplicates::Contained => entry.runs.iter().any(|&(s, e)| s <= offset && end <= e),
                    Duplicates::Exact => entry.runs.contains(&(offset, end)),
                };
                if duplicate && entry.data[offset..end] == *payload {
                    return Ok(None);
                }
                return Err(self.discard(key, FragmentError::Overlap));
            }
            if entry.runs_after(offset, end, self.merges()) > self.config.max_runs {
                return Err(self.discard(key, FragmentError::NoRoom));
            }
        }

        // Buffer space.
        let growth = end.saturating_sub(entry.data.len());
        if growth > 0 {
            let own = entry.data.len();
            if own + growth > self.config.max_bytes {
                return Err(self.discard(key, FragmentError::NoRoom));
            }
            while self.bytes + growth > self.config.max_bytes {
                if !self.evict_oldest(Some(key)) {
                    return Err(self.discard(key, FragmentError::NoRoom));
                }
            }
        }
        // Evictions may have moved the entry.
        let Some(index) = self.entries.iter().position(|e| e.key == key) else {
            return Err(FragmentError::NoRoom);
        };
        let merge = self.merges();
        let entry = &mut self.entries[index];
        if growth > 0 {
            entry.data.reserve_exact(growth);
            entry.data.resize(end, 0);
            self.bytes += growth;
        }
        entry.data[offset..end].copy_from_slice(payload);
        if offset < end {
            entry.insert_run(offset, end, merge);
        }
        if !more {
            entry.total = Some(end);
        }
        if let Some(header) = header {
            entry.header = Some(header);
        }
        if !entry.is_complete() {
            return Ok(None);
        }
        let entry = self.remove(index);
        let (Some(total), Some(header)) = (entry.total, entry.header) else {
            // is_complete saw both.
            return Ok(None);
        };
        let mut payload = entry.data;
        payload.truncate(total);
        Ok(Some((header, payload)))
    }
}

/// The accessors both reassemblers have, over their `table` field: `config`, `len`, `is_empty`,
/// `buffered_bytes`, `next_deadline`, `expire` and `clear`. `$what` names what is in flight
/// ("datagrams", "packets") in their documentation.
macro_rules! table_accessors {
    ($what:literal) => {
        /// The bounds.
        #[must_use]
        pub const fn config(&self) -> &Config {
            self.table.config()
        }

        #[doc = concat!("The number of ", $what, " in flight.")]
        #[must_use]
        pub fn len(&self) -> usize {
            self.table.len()
        }

        #[doc = concat!("Whether no ", $what, " are in flight.")]
        #[must_use]
        pub fn is_empty(&self) -> bool {
            self.table.len() == 0
        }

        #[doc = concat!("The bytes the buffers of the ", $what, " in flight hold.")]
        #[must_use]
        pub const fn buffered_bytes(&self) -> usize {
            self.table.buffered_bytes()
        }

        #[doc = concat!("When the next of the ", $what, " in flight times out.")]
        #[must_use]
        pub fn next_deadline(&self) -> Option<Instant> {
            self.table.next_deadline()
        }

        #[doc = concat!("Drops the ", $what, " whose deadline is at or before `now`; returns how many.")]
        pub fn expire(&mut self, now: Instant) -> usize {
            self.table.expire(now)
        }

        #[doc = concat!("Drops all ", $what, " in flight.")]
        pub fn clear(&mut self) {
            self.table.clear();
        }
    };
}
pub(crate) use table_accessors;

/// A seeded shuffle (Fisher-Yates with an LCG) for the reassemblers' any-order tests.
#[cfg(test)]
pub(crate) fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut s = seed;
    for i in (1..items.len()).rev() {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let j = usize::try_from(s >> 33).unwrap_or(0) % (i + 1);
        items.swap(i, j);
    }
}
