//! [`BufferBudget`]: one bound on the heap memory the send and receive rings of many connections
//! hold together, so that connections whose applications never read, or whose peers never
//! acknowledge, cannot grow memory without bound even when each stays within its own buffer
//! sizes.
//!
//! The type's documentation says how.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A bound on the bytes of ring storage the connections attached to it hold together. Attach one
/// with [`Connection::set_budget`](super::Connection::set_budget) (a
/// [`Stack`](crate::stack::Stack) attaches its own to every connection it holds).
///
/// A ring's storage grows on demand (see `buffer.rs`); every growth is charged to the budget the
/// ring is attached to, and every release is refunded. Each ring may always grow to
/// [`BufferBudget::GUARANTEED`] bytes (so every connection can still take a segment and make
/// progress: Linux's `tcp_rmem[0]`/`tcp_wmem[0]`, "guaranteed to each socket even under memory
/// pressure"); growth beyond that is granted only while the charged total stays within the limit.
/// A ring refused growth is *clamped*: it keeps working as a ring of the storage it has (its
/// capacity, and so the window it advertises or the bytes `send` accepts, shrinks to that), until
/// it drains empty and takes its configured size back, once the budget has room for that. A
/// receive ring whose budget has no room left for it to grow to its capacity is clamped before
/// its window is advertised, so that the window offers what the ring can take. So the memory held
/// is at most
/// `limit + rings × GUARANTEED` (two rings a connection).
///
/// The budget is shared by reference ([`Arc`](std::sync::Arc)) and counted with atomics, so that
/// connections moved between the stacks of several cores may share one. The atomics are written
/// only when a ring's storage grows, is released, or is refused; the total is read when a receive
/// ring whose storage does not cover its capacity yet advertises a window.
#[derive(Debug, Default)]
pub struct BufferBudget {
    limit: usize,
    used: AtomicUsize,
    peak: AtomicUsize,
    rx_clamps: AtomicU64,
    tx_clamps: AtomicU64,
    rx_dropped: AtomicU64,
    tx_refused: AtomicU64,
}

/// What a [`BufferBudget`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetStats {
    /// Bytes of ring storage held now.
    pub used: usize,
    /// The most bytes held at once.
    pub peak: usize,
    /// Times a receive ring was refused growth and clamped to its storage.
    pub rx_clamps: u64,
    /// Times a send ring was refused growth and clamped to its storage.
    pub tx_clamps: u64,
    /// Received segments dropped, whole or in part, that the configured receive buffer would
    /// have taken but a clamped ring could not (the peer retransmits them).
    pub rx_dropped: u64,
    /// Sends cut short (a short write, or none) that the configured send buffer would have taken
    /// but a clamped ring could not.
    pub tx_refused: u64,
}

/// Which ring of a connection a charge is for (for the counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Rx,
    Tx,
}

impl BufferBudget {
    /// Bytes every ring may grow to whatever the budget says: a full-sized segment and then some.
    pub const GUARANTEED: usize = 4096;

    /// A budget of `limit` bytes beyond the guaranteed storage of each ring.
    #[must_use]
    pub fn new(limit: usize) -> Self {
        Self { limit, ..Self::default() }
    }

    /// The limit.
    #[must_use]
    pub const fn limit(&self) -> usize {
        self.limit
    }

    /// The counters now.
    #[must_use]
    pub fn stats(&self) -> BudgetStats {
        BudgetStats {
            used: self.used.load(Ordering::Relaxed),
            peak: self.peak.load(Ordering::Relaxed),
            rx_clamps: self.rx_clamps.load(Ordering::Relaxed),
            tx_clamps: self.tx_clamps.load(Ordering::Relaxed),
            rx_dropped: self.rx_dropped.load(Ordering::Relaxed),
            tx_refused: self.tx_refused.load(Ordering::Relaxed),
        }
    }

    /// Charges `bytes` whatever the limit (growth within the guaranteed storage, or storage a
    /// connection brings along when it moves in).
    pub(crate) fn charge(&self, bytes: usize) {
        let now = self.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.raise_peak(now);
    }

    /// Records `used` as the peak if it is one. The peak only grows, so a load that finds it at
    /// `used` or above settles it without the read-modify-write (a locked compare-exchange loop
    /// on x86, where most charges are below the peak a budget has already seen).
    fn raise_peak(&self, used: usize) {
        if used > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(used, Ordering::Relaxed);
        }
    }

    /// Charges `bytes` if the total stays within the limit; false (nothing charged) otherwise.
    pub(crate) fn try_charge(&self, bytes: usize) -> bool {
        let limit = self.limit;
        let granted = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= limit)
            })
            .is_ok();
        if granted {
            self.raise_peak(self.used.load(Ordering::Relaxed));
        }
        granted
    }

    /// Whether `bytes` more would be within the limit now.
    #[inline]
    pub(crate) fn has_room(&self, bytes: usize) -> bool {
        self.used.load(Ordering::Relaxed).saturating_add(bytes) <= self.limit
    }

    /// Gives back `bytes` charged before.
    pub(crate) fn refund(&self, bytes: usize) {
        // Nothing to give back is no write: a ring whose storage went elsewhere is dropped
        // with nothing charged (a locked subtraction of zero is still a full barrier on x86).
        if bytes != 0 {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Counts a ring of `side` clamped to its storage.
    pub(crate) fn clamped(&self, side: Side) {
        let counter = if side == Side::Rx { &self.rx_clamps } else { &self.tx_clamps };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a write a clamped ring of `side` cut short.
    pub(crate) fn refused(&self, side: Side) {
        let counter = if side == Side::Rx { &self.rx_dropped } else { &self.tx_refused };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_charge_stays_within_the_limit() {
        let b = BufferBudget::new(1000);
        assert!(b.try_charge(600));
        assert!(!b.try_charge(600), "1200 > 1000");
        b.charge(600);
        assert_eq!(b.stats().used, 1200, "a forced charge goes past the limit");
        b.refund(700);
        assert!(b.try_charge(500));
        assert_eq!((b.stats().used, b.stats().peak), (1000, 1200));
        assert!(!b.try_charge(usize::MAX), "no overflow");
    }
}
