//! Which streams had an event since the application last asked ([`Stack::take_events`]): an
//! event loop over many connections steps the few that moved instead of asking every one
//! whether it is readable (a question that touches each connection's state, a cache miss
//! apiece once there are hundreds of them).
//!
//! [`Stack::settle`], the one place every event on a connection passes (a segment processed,
//! its timers run; a continued segment of the receive loop skips it, but only after a segment
//! of the same connection in the same loop passed it), marks the connection's slot in a bit
//! set; [`Stack::take_events`] hands the marked streams over and clears the set. One bit per
//! slot of the connection table: the set is bounded by the table, whether or not anybody takes
//! the events, and a stream marked twice is reported once.

use super::{Stack, StreamId};

/// One bit per connection slot: set when the slot's connection had an event.
#[derive(Debug, Default)]
pub(super) struct EventSet {
    words: Vec<u64>,
}

impl EventSet {
    /// Marks slot `index`.
    #[inline]
    pub(super) fn mark(&mut self, index: u32) {
        match self.words.get_mut((index / 64) as usize) {
            Some(word) => *word |= 1 << (index % 64),
            None => self.mark_beyond(index),
        }
    }

    /// [`mark`](Self::mark) of a slot past the words the set has: once per 64 slots the table
    /// grows to.
    #[cold]
    #[inline(never)]
    fn mark_beyond(&mut self, index: u32) {
        self.words.resize((index / 64) as usize + 1, 0);
        self.mark(index);
    }
}

impl Stack {
    /// Moves into `out` (appending) the streams that had an event since the last call: a
    /// segment processed or a timer run on them, whatever it changed. A stream that became
    /// readable (data, the peer's FIN, an error or a reset) or writable through the stack's
    /// work is among them; what the application's own calls change is not reported (it made
    /// them). A stream established and waiting in a listener's accept queue is reported under
    /// the id [`accept`](Self::accept) will return (an event loop that does not know it yet
    /// should read a stream once when it accepts it); streams still in the SYN queue, and
    /// streams released since their event, are left out.
    ///
    /// Each stream is reported once however many events it had, and the record is one bit per
    /// connection slot, so a stack whose events nobody takes holds no more.
    ///
    /// ```
    /// # use std::net::{Ipv4Addr, SocketAddrV4};
    /// # use std::time::Instant;
    /// # use netchannel::dev::{NetDevice, Pair};
    /// # use netchannel::pool::{HugePages, Pool};
    /// # use tcp_lib::stack::{Config, Stack, StreamId};
    /// # use tcp_lib::wire::{EthernetAddress, Ipv4Cidr};
    /// # let pool = Pool::builder(1024).hugepages(HugePages::Never).build()?;
    /// # let (mut dev_a, mut dev_b) = Pair::builder(&pool).build()?;
    /// # let cache = pool.cache();
    /// # let now = Instant::now();
    /// # let config = |dev: &Pair, host: u8| {
    /// #     let mac = EthernetAddress(dev.info().mac.0);
    /// #     Config::new(mac, Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, host), 24).expect("a /24"))
    /// # };
    /// # let mut a = Stack::new(config(&dev_a, 1), now);
    /// # let mut b = Stack::new(config(&dev_b, 2), now);
    /// let listener = b.listen(80)?;
    /// let client = a.connect(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80))?;
    /// let mut server = None;
    /// while server.is_none() {
    ///     a.poll(now, &mut dev_a, &cache)?;
    ///     b.poll(now, &mut dev_b, &cache)?;
    ///     server = b.accept(listener);
    /// }
    /// let server = server.expect("accepted");
    /// let mut moved: Vec<StreamId> = Vec::new();
    /// b.take_events(&mut moved);
    /// moved.clear();
    /// a.send(client, b"ping")?;
    /// a.poll(now, &mut dev_a, &cache)?;
    /// b.poll(now, &mut dev_b, &cache)?;
    /// b.take_events(&mut moved);
    /// assert_eq!(moved, [server], "the data's stream, and only it");
    /// assert!(b.is_readable(server));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_events(&mut self, out: &mut Vec<StreamId>) {
        // Word `w` holds slots `64 * w ..`: `base` (slot indices are `u32`, so it fits).
        let mut base = 0u32;
        for w in 0..self.events.words.len() {
            let mut bits = std::mem::take(&mut self.events.words[w]);
            while bits != 0 {
                let index = base + bits.trailing_zeros();
                bits &= bits - 1;
                // A stream the application holds (or will get from `accept`), as a handle would
                // find it.
                let id = self.stream_id(index);
                if self.entry(id).is_ok() {
                    out.push(id);
                }
            }
            base = base.wrapping_add(64);
        }
    }
}
