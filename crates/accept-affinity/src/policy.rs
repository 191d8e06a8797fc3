//! The decisions of Affinity-Accept, without the concurrency: deterministic, single-threaded types that
//! take explicit inputs (queue lengths, which core asks, the busy set, virtual time) and return decisions.
//!
//! [`AcceptQueue`](crate::AcceptQueue) drives these types under its locks with times it derives from an
//! [`Instant`](std::time::Instant); a discrete-event simulator can drive the very same types with virtual
//! time. Nothing here reads a clock, takes a lock or allocates after construction (except the
//! [`MigrationReport`] a round returns).
//!
//! The rules, after Pesterev, Strauss, Zeldovich and Morris, "Improving Network Connection Locality on
//! Multicore Systems", EuroSys 2012, §3.3, in our words:
//!
//! * **Busy tracking** ([`BusyTracker`]). A listener's backlog is split evenly over the cores; each core's
//!   share is its *maximum local accept-queue length*. A core becomes *busy* as soon as its local queue
//!   holds more than 75% of that maximum. Because connections arrive in bursts, it becomes *non-busy*
//!   again only when a running average of the queue length (an EWMA with weight 1/16, updated each time a
//!   connection is enqueued) falls below 10% of the maximum. The busy flags of all cores live in one
//!   cache-line bit vector ([`CoreSet`]), so a core reads everyone's state with one load.
//! * **Stealing** ([`StealPolicy`]). Busy cores never steal. A non-busy core accepts from its own queue
//!   first, but when busy cores have connections waiting it takes one remote connection for every five
//!   local ones (proportional share). Victims are only busy cores, visited round-robin starting one past
//!   the last victim, which spreads stealers over victims and avoids contention on one victim's lock.
//! * **Flow-group migration** ([`MigrationController`], [`StealLog`]). Stealing fixes short-term imbalance
//!   but leaves the victim processing the stolen connections' packets. Every 100 ms each non-busy core
//!   looks at the victim it stole the most connections from since the last round and moves one flow
//!   group from that victim to itself, through [`FlowSteering::migrate`] (the 82599 Flow Director, or a
//!   software table). Busy cores never take groups. The paper leaves open *which* group moves; we move
//!   the group this core stole most often from that victim (tracked with a small heavy-hitters summary
//!   per victim), because a group that produced the stolen connections is known to carry load. If none
//!   of those groups is still routed to the victim, any group the steering maps to the victim moves.
//!
//! The baselines ([`FineCursor`] for Fine-Accept's round-robin dequeue) live here too, so every policy
//! decides through the same kind of [`AcceptOrder`].

use std::fmt;
use std::time::Duration;

use netchannel::signature::FlowGroup;
use netchannel::steering::{FlowSteering, SteeringError};

/// The most cores one listener spreads over: the busy bit vector is one 64-byte cache line.
pub const MAX_CORES: usize = 512;

/// The tuning knobs of Affinity-Accept. [`Default`] gives the paper's values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AffinityConfig {
    /// A core becomes busy when its queue length exceeds this percentage of the per-core maximum
    /// (paper: 75).
    pub busy_high_percent: u32,
    /// A busy core becomes non-busy when the running average of its queue length falls below this
    /// percentage of the per-core maximum (paper: 10).
    pub busy_low_percent: u32,
    /// The running average moves `1 / ewma_weight` of the way to each new sample (paper: 16, alpha =
    /// 1/16).
    pub ewma_weight: u32,
    /// How many local accepts a non-busy core makes for each stolen one when both are available
    /// (paper: 5, for 5:1). Zero means steal whenever a busy core has a connection.
    pub local_per_steal: u32,
    /// Time between flow-group migration rounds (paper: 100 ms).
    pub migration_interval: Duration,
    /// How many flow groups each non-busy core takes per round (paper: one, "one or two suffice").
    pub groups_per_round: u32,
}

impl Default for AffinityConfig {
    fn default() -> Self {
        Self {
            busy_high_percent: 75,
            busy_low_percent: 10,
            ewma_weight: 16,
            local_per_steal: 5,
            migration_interval: Duration::from_millis(100),
            groups_per_round: 1,
        }
    }
}

impl AffinityConfig {
    /// Checks the thresholds: `busy_low_percent <= busy_high_percent <= 100` and `ewma_weight >= 1`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadThresholds`] or [`ConfigError::ZeroEwmaWeight`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.busy_low_percent > self.busy_high_percent || self.busy_high_percent > 100 {
            return Err(ConfigError::BadThresholds {
                high: self.busy_high_percent,
                low: self.busy_low_percent,
            });
        }
        if self.ewma_weight == 0 {
            return Err(ConfigError::ZeroEwmaWeight);
        }
        Ok(())
    }
}

/// Why an accept queue or a policy could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A listener needs at least one core.
    NoCores,
    /// More cores than the busy bit vector holds.
    TooManyCores {
        /// The cores asked for.
        cores: usize,
        /// [`MAX_CORES`].
        max: usize,
    },
    /// The backlog must hold at least one connection.
    ZeroBacklog,
    /// The busy thresholds must satisfy `low <= high <= 100`.
    BadThresholds {
        /// [`AffinityConfig::busy_high_percent`].
        high: u32,
        /// [`AffinityConfig::busy_low_percent`].
        low: u32,
    },
    /// [`AffinityConfig::ewma_weight`] must be at least 1.
    ZeroEwmaWeight,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoCores => write!(f, "an accept queue needs at least one core"),
            Self::TooManyCores { cores, max } => write!(f, "{cores} cores asked for, at most {max}"),
            Self::ZeroBacklog => write!(f, "the backlog must be at least 1"),
            Self::BadThresholds { high, low } => {
                write!(f, "busy thresholds need low <= high <= 100 (got low {low}%, high {high}%)")
            }
            Self::ZeroEwmaWeight => write!(f, "the EWMA weight must be at least 1"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A set of cores (`0..MAX_CORES`) as a bit vector of one cache line: the busy flags, the cores with
/// sleeping acceptors.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CoreSet {
    words: [u64; MAX_CORES / 64],
}

impl CoreSet {
    /// The empty set.
    #[must_use]
    pub const fn new() -> Self {
        Self { words: [0; MAX_CORES / 64] }
    }

    /// The set with these words (bit `i % 64` of word `i / 64` is core `i`).
    #[must_use]
    pub const fn from_words(words: [u64; MAX_CORES / 64]) -> Self {
        Self { words }
    }

    /// Adds `core` (ignored when `core >= MAX_CORES`).
    pub fn insert(&mut self, core: usize) {
        if core < MAX_CORES {
            self.words[core / 64] |= 1 << (core % 64);
        }
    }

    /// Removes `core`.
    pub fn remove(&mut self, core: usize) {
        if core < MAX_CORES {
            self.words[core / 64] &= !(1 << (core % 64));
        }
    }

    /// Whether `core` is in the set.
    #[must_use]
    pub fn contains(&self, core: usize) -> bool {
        core < MAX_CORES && self.words[core / 64] & (1 << (core % 64)) != 0
    }

    /// How many cores are in the set.
    #[must_use]
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The cores in the set, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_CORES).filter(|&c| self.contains(c))
    }
}

impl fmt::Debug for CoreSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// What an enqueue did to a core's busy state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusyChange {
    /// No change.
    Unchanged,
    /// The queue length crossed the high-water mark: the core is busy now.
    BecameBusy,
    /// The running average fell below the low-water mark: the core is non-busy now.
    BecameNonBusy,
}

/// Fixed-point fraction bits of the running average.
const EWMA_FRAC: u32 = 16;

/// One core's busy state: the high-water mark on the instantaneous queue length, the low-water mark on
/// an EWMA of it (Affinity-Accept §3.3.1, "Tracking busy cores").
#[derive(Clone, Debug)]
pub struct BusyTracker {
    max_local: u128,
    high_percent: u128,
    low_percent: u128,
    weight: u128,
    /// The running average, fixed point with [`EWMA_FRAC`] fraction bits.
    avg: u128,
    busy: bool,
}

impl BusyTracker {
    /// A non-busy tracker for a core whose queue holds at most `max_local` connections.
    #[must_use]
    pub fn new(max_local: usize, config: &AffinityConfig) -> Self {
        Self {
            max_local: max_local as u128,
            high_percent: u128::from(config.busy_high_percent),
            low_percent: u128::from(config.busy_low_percent),
            weight: u128::from(config.ewma_weight.max(1)),
            avg: 0,
            busy: false,
        }
    }

    /// Records an enqueue that left `len` connections in the local queue: updates the running average
    /// and the busy flag.
    ///
    /// The core becomes busy when `len > high% * max`; a busy core becomes non-busy when the average
    /// falls below `low% * max` while `len` itself is not above the high-water mark.
    ///
    /// The average samples the length the new connection *found* (`len - 1`): an arrival at an empty
    /// queue counts as 0. Sampling `len` instead would keep every sample at 1 or more, so with a
    /// per-core share of 10 or less (low-water mark 1) a busy core could never become non-busy again
    /// (found by the simulator with Apache's 511-connection backlog on 48 cores).
    pub fn on_enqueue(&mut self, len: usize) -> BusyChange {
        let sample = (len.saturating_sub(1) as u128) << EWMA_FRAC;
        if sample >= self.avg {
            self.avg += (sample - self.avg) / self.weight;
        } else {
            self.avg -= (self.avg - sample) / self.weight;
        }
        let above_high = (len as u128) * 100 > self.high_percent * self.max_local;
        let below_low = self.avg * 100 < (self.low_percent * self.max_local) << EWMA_FRAC;
        if !self.busy && above_high {
            self.busy = true;
            BusyChange::BecameBusy
        } else if self.busy && !above_high && below_low {
            self.busy = false;
            BusyChange::BecameNonBusy
        } else {
            BusyChange::Unchanged
        }
    }

    /// Whether the core is busy.
    #[must_use]
    pub fn is_busy(&self) -> bool {
        self.busy
    }

    /// The running average of the queue length, in connections.
    #[must_use]
    pub fn average(&self) -> f64 {
        // Precision loss is fine: this is for reports.
        self.avg as f64 / f64::from(1u32 << EWMA_FRAC)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Only the local queue (a busy core; Affinity never lets it steal).
    LocalOnly,
    /// Local, then busy victims round-robin.
    LocalThenVictims,
    /// Busy victims round-robin, then local (the 1 of 5:1).
    VictimsThenLocal,
    /// Every core round-robin from `start` (Fine-Accept, and any policy while draining).
    RoundRobin,
}

/// The queues an `accept()` should try, in order: an iterator of core numbers. The caller dequeues from
/// the first one that has a connection, then tells the policy where it got it
/// ([`StealPolicy::record`], [`FineCursor::record`]).
#[derive(Clone, Debug)]
pub struct AcceptOrder {
    me: usize,
    cores: usize,
    busy: CoreSet,
    start: usize,
    mode: Mode,
    /// Position: 0 is the first part (local or the victim scan), then the scan index.
    step: usize,
}

impl AcceptOrder {
    /// Every core, starting at `start` and wrapping (Fine-Accept, draining).
    #[must_use]
    pub fn round_robin(me: usize, start: usize, cores: usize) -> Self {
        Self { me, cores, busy: CoreSet::new(), start: start % cores.max(1), mode: Mode::RoundRobin, step: 0 }
    }

    /// The next victim at or after scan position `self.step - offset`, if any.
    fn next_victim(&mut self, offset: usize) -> Option<usize> {
        while self.step - offset < self.cores {
            let c = (self.start + self.step - offset) % self.cores;
            self.step += 1;
            if c != self.me && self.busy.contains(c) {
                return Some(c);
            }
        }
        None
    }
}

impl Iterator for AcceptOrder {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        match self.mode {
            Mode::LocalOnly => {
                self.step += 1;
                (self.step == 1).then_some(self.me)
            }
            Mode::LocalThenVictims => {
                if self.step == 0 {
                    self.step = 1;
                    return Some(self.me);
                }
                self.next_victim(1)
            }
            Mode::VictimsThenLocal => {
                if let Some(v) = self.next_victim(0) {
                    return Some(v);
                }
                if self.step == self.cores {
                    self.step += 1;
                    return Some(self.me);
                }
                None
            }
            Mode::RoundRobin => {
                if self.step >= self.cores {
                    return None;
                }
                let c = (self.start + self.step) % self.cores;
                self.step += 1;
                Some(c)
            }
        }
    }
}

/// One core's stealing state under Affinity-Accept: the local streak for the local:remote proportion
/// and the last victim for the round-robin victim scan.
#[derive(Clone, Debug)]
pub struct StealPolicy {
    me: usize,
    cores: usize,
    local_per_steal: u32,
    /// Local accepts since the last steal (saturating).
    streak: u32,
    /// The last core stolen from; `me` before the first steal, so the first scan starts at `me + 1`.
    last_victim: usize,
}

impl StealPolicy {
    /// The policy of core `me` out of `cores`.
    #[must_use]
    pub fn new(me: usize, cores: usize, config: &AffinityConfig) -> Self {
        Self { me, cores: cores.max(1), local_per_steal: config.local_per_steal, streak: 0, last_victim: me }
    }

    /// Where an accept on this core should look, given whether this core is busy and the busy set.
    ///
    /// * A busy core looks only at its own queue.
    /// * A non-busy core that has made `local_per_steal` local accepts since its last steal looks at the
    ///   busy victims first (round-robin from one past the last victim), then at its own queue.
    /// * Otherwise it looks at its own queue first, then at the busy victims.
    #[must_use]
    pub fn order(&self, me_busy: bool, busy: &CoreSet) -> AcceptOrder {
        let mode = if me_busy {
            Mode::LocalOnly
        } else if self.streak >= self.local_per_steal {
            Mode::VictimsThenLocal
        } else {
            Mode::LocalThenVictims
        };
        AcceptOrder {
            me: self.me,
            cores: self.cores,
            busy: *busy,
            start: (self.last_victim + 1) % self.cores,
            mode,
            step: 0,
        }
    }

    /// Records that the accept got a connection from `source`'s queue.
    pub fn record(&mut self, source: usize) {
        if source == self.me {
            self.streak = self.streak.saturating_add(1);
        } else {
            self.streak = 0;
            self.last_victim = source;
        }
    }

    /// The last core stolen from, if any.
    #[must_use]
    pub fn last_victim(&self) -> Option<usize> {
        (self.last_victim != self.me).then_some(self.last_victim)
    }

    /// Local accepts since the last steal.
    #[must_use]
    pub fn local_streak(&self) -> u32 {
        self.streak
    }
}

/// One core's round-robin cursor under Fine-Accept: every accept scans all queues starting one past the
/// queue it last took from.
#[derive(Clone, Debug)]
pub struct FineCursor {
    me: usize,
    cores: usize,
    next: usize,
}

impl FineCursor {
    /// The cursor of core `me` out of `cores`, starting at `me`'s own queue.
    #[must_use]
    pub fn new(me: usize, cores: usize) -> Self {
        Self { me, cores: cores.max(1), next: me % cores.max(1) }
    }

    /// Where the next accept looks.
    #[must_use]
    pub fn order(&self) -> AcceptOrder {
        AcceptOrder::round_robin(self.me, self.next, self.cores)
    }

    /// Records that the accept got a connection from `source`'s queue.
    pub fn record(&mut self, source: usize) {
        self.next = (source + 1) % self.cores;
    }
}

/// Groups remembered per victim for choosing which group to migrate (a Misra-Gries summary: any group
/// making up more than 1/(K+1) of the steals from a victim is in it).
const HEAVY: usize = 4;

#[derive(Clone, Debug, Default)]
struct VictimLog {
    steals: u32,
    /// `(group, count)`; a count of 0 is an empty slot.
    heavy: [(u16, u32); HEAVY],
}

/// What one core stole since the last migration round: how many connections from each victim, and
/// which flow groups they were in (bounded: a few counters per victim).
#[derive(Clone, Debug)]
pub struct StealLog {
    victims: Vec<VictimLog>,
}

impl StealLog {
    /// An empty log for a listener over `cores` cores.
    #[must_use]
    pub fn new(cores: usize) -> Self {
        Self { victims: vec![VictimLog::default(); cores] }
    }

    /// Records one connection of `group` stolen from `victim`.
    pub fn record(&mut self, victim: usize, group: FlowGroup) {
        let Some(log) = self.victims.get_mut(victim) else { return };
        log.steals = log.steals.saturating_add(1);
        let g = group.0 & FlowGroup::MASK;
        if let Some(slot) = log.heavy.iter_mut().find(|(sg, n)| *n > 0 && *sg == g) {
            slot.1 += 1;
        } else if let Some(slot) = log.heavy.iter_mut().find(|(_, n)| *n == 0) {
            *slot = (g, 1);
        } else {
            for slot in &mut log.heavy {
                slot.1 -= 1;
            }
        }
    }

    /// Connections stolen from `victim` since the last [`clear`](Self::clear).
    #[must_use]
    pub fn steals_from(&self, victim: usize) -> u32 {
        self.victims.get(victim).map_or(0, |v| v.steals)
    }

    /// The victim stolen from the most (ties: the lowest core number), if anything was stolen.
    #[must_use]
    pub fn top_victim(&self) -> Option<usize> {
        let mut best: Option<(usize, u32)> = None;
        for (c, v) in self.victims.iter().enumerate() {
            if v.steals > 0 && best.is_none_or(|(_, n)| v.steals > n) {
                best = Some((c, v.steals));
            }
        }
        best.map(|(c, _)| c)
    }

    /// The groups most often stolen from `victim`, most frequent first (ties: lower group first).
    #[must_use]
    pub fn top_groups(&self, victim: usize) -> Vec<FlowGroup> {
        let Some(v) = self.victims.get(victim) else { return Vec::new() };
        let mut heavy: Vec<(u16, u32)> = v.heavy.iter().copied().filter(|&(_, n)| n > 0).collect();
        heavy.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        heavy.into_iter().map(|(g, _)| FlowGroup(g)).collect()
    }

    /// Forgets everything (the start of a new round).
    pub fn clear(&mut self) {
        self.victims.iter_mut().for_each(|v| *v = VictimLog::default());
    }
}

/// One flow group moved by the balancer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// The group moved.
    pub group: FlowGroup,
    /// The core (RX queue) it was routed to: the victim.
    pub from: usize,
    /// The core (RX queue) it is routed to now: the stealer.
    pub to: usize,
}

/// What one migration round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrationReport {
    /// The time of the round.
    pub now: Duration,
    /// The groups moved.
    pub migrations: Vec<Migration>,
    /// Moves the steering refused; the group stays where it was.
    pub failed: Vec<(Migration, SteeringError)>,
}

/// The long-term balancer: decides when a migration round is due and, per core, which flow group moves.
///
/// Core `c` is RX queue `c` of the [`FlowSteering`] (one RX queue per core, as the paper configures the
/// NIC).
#[derive(Clone, Debug)]
pub struct MigrationController {
    interval: Duration,
    groups_per_round: u32,
    next_round: Duration,
    /// Where the fallback scan for "any group routed to the victim" starts next.
    scan: usize,
    rounds: u64,
}

impl MigrationController {
    /// A controller whose first round is due one interval after time zero.
    #[must_use]
    pub fn new(config: &AffinityConfig) -> Self {
        Self {
            interval: config.migration_interval,
            groups_per_round: config.groups_per_round,
            next_round: config.migration_interval,
            scan: 0,
            rounds: 0,
        }
    }

    /// Whether a round is due at `now` (time since the listener started).
    #[must_use]
    pub fn due(&self, now: Duration) -> bool {
        now >= self.next_round
    }

    /// When the next round is due.
    #[must_use]
    pub fn next_round(&self) -> Duration {
        self.next_round
    }

    /// How many rounds have started.
    #[must_use]
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Starts a round if one is due at `now`: schedules the next one an interval later and returns
    /// `true`. The caller then runs [`migrate_core`](Self::migrate_core) for every core.
    pub fn start_round(&mut self, now: Duration) -> bool {
        if !self.due(now) {
            return false;
        }
        self.next_round = now.saturating_add(self.interval);
        self.rounds += 1;
        true
    }

    /// The groups `core` should take this round: up to `groups_per_round` groups of the victim it stole
    /// the most from, each still routed to that victim. Nothing for a busy core or a core that stole
    /// nothing. Groups most stolen from the victim come first; if none of them is routed to the victim
    /// any more, the first groups routed to the victim in a rotating scan of all 4096.
    #[must_use]
    pub fn plan(
        &mut self,
        core: usize,
        core_busy: bool,
        log: &StealLog,
        steering: &dyn FlowSteering,
    ) -> Vec<Migration> {
        let mut out = Vec::new();
        if core_busy {
            return out;
        }
        let Some(victim) = log.top_victim() else { return out };
        let Ok(victim_queue) = u16::try_from(victim) else { return out };
        let want = usize::try_from(self.groups_per_round).unwrap_or(usize::MAX);
        for group in log.top_groups(victim) {
            if out.len() >= want {
                return out;
            }
            if steering.queue_of(group) == victim_queue {
                out.push(Migration { group, from: victim, to: core });
            }
        }
        let mut k = 0;
        while out.len() < want && k < FlowGroup::COUNT {
            let g = (self.scan + k) % FlowGroup::COUNT;
            k += 1;
            let group = FlowGroup(u16::try_from(g).unwrap_or(0));
            if steering.queue_of(group) == victim_queue && !out.iter().any(|m| m.group == group) {
                out.push(Migration { group, from: victim, to: core });
                self.scan = (g + 1) % FlowGroup::COUNT;
            }
        }
        out
    }

    /// Runs `core`'s part of a round: plans (see [`plan`](Self::plan)), calls
    /// [`FlowSteering::migrate`] for each planned group, records the outcome in `report`, and clears
    /// `log` for the next round. Returns how many groups moved.
    pub fn migrate_core(
        &mut self,
        core: usize,
        core_busy: bool,
        log: &mut StealLog,
        steering: &mut dyn FlowSteering,
        report: &mut MigrationReport,
    ) -> usize {
        let plan = self.plan(core, core_busy, log, steering);
        log.clear();
        let mut moved = 0;
        for m in plan {
            let result = match u16::try_from(m.to) {
                Ok(queue) => steering.migrate(m.group, queue),
                Err(_) => Err(SteeringError::NoSuchQueue { queue: u16::MAX, queues: steering.queues() }),
            };
            match result {
                Ok(()) => {
                    moved += 1;
                    report.migrations.push(m);
                }
                Err(e) => report.failed.push((m, e)),
            }
        }
        moved
    }

    /// A whole round for a single-threaded caller (the simulator): if one is due at `now`, runs
    /// [`migrate_core`](Self::migrate_core) for every core in order, skipping the cores in `skip`
    /// (retired cores; their logs are still cleared). `logs[c]` is core `c`'s log.
    pub fn round(
        &mut self,
        now: Duration,
        busy: &CoreSet,
        skip: &CoreSet,
        logs: &mut [StealLog],
        steering: &mut dyn FlowSteering,
    ) -> Option<MigrationReport> {
        if !self.start_round(now) {
            return None;
        }
        let mut report = MigrationReport { now, ..MigrationReport::default() };
        for (core, log) in logs.iter_mut().enumerate() {
            if skip.contains(core) {
                log.clear();
            } else {
                self.migrate_core(core, busy.contains(core), log, steering, &mut report);
            }
        }
        Some(report)
    }
}

#[cfg(test)]
mod tests {
    use netchannel::steering::SoftwareSteering;

    use super::*;

    fn cfg() -> AffinityConfig {
        AffinityConfig::default()
    }

    #[test]
    fn defaults_are_the_papers() {
        let c = cfg();
        assert_eq!((c.busy_high_percent, c.busy_low_percent, c.ewma_weight), (75, 10, 16));
        assert_eq!(c.local_per_steal, 5);
        assert_eq!(c.migration_interval, Duration::from_millis(100));
        assert_eq!(c.groups_per_round, 1);
        assert_eq!(c.validate(), Ok(()));
        let bad = AffinityConfig { busy_low_percent: 80, ..cfg() };
        assert_eq!(bad.validate(), Err(ConfigError::BadThresholds { high: 75, low: 80 }));
        let bad = AffinityConfig { busy_high_percent: 101, ..cfg() };
        assert!(bad.validate().is_err());
        assert_eq!(AffinityConfig { ewma_weight: 0, ..cfg() }.validate(), Err(ConfigError::ZeroEwmaWeight));
    }

    #[test]
    fn core_set_bits() {
        let mut s = CoreSet::new();
        assert!(s.is_empty());
        s.insert(0);
        s.insert(63);
        s.insert(64);
        s.insert(511);
        s.insert(512); // ignored
        assert_eq!(s.len(), 4);
        assert!(s.contains(63) && s.contains(64) && !s.contains(65) && !s.contains(512));
        assert_eq!(s.iter().collect::<Vec<_>>(), [0, 63, 64, 511]);
        s.remove(63);
        assert_eq!(format!("{s:?}"), "{0, 64, 511}");
        assert_eq!(std::mem::size_of::<CoreSet>(), 64);
    }

    /// Busy exactly when the length exceeds 75% of the max (strictly), not at 75%.
    #[test]
    fn busy_threshold_crossing() {
        let mut t = BusyTracker::new(100, &cfg());
        for len in 1..=75 {
            assert_eq!(t.on_enqueue(len), BusyChange::Unchanged, "len {len}");
        }
        assert!(!t.is_busy());
        assert_eq!(t.on_enqueue(76), BusyChange::BecameBusy);
        assert!(t.is_busy());
        assert_eq!(t.on_enqueue(77), BusyChange::Unchanged);
    }

    /// Once busy, a short queue does not clear the flag: the EWMA (alpha 1/16) must fall below 10%.
    #[test]
    fn ewma_recovery_below_low_water_mark() {
        let mut t = BusyTracker::new(100, &cfg());
        for len in 1..=80 {
            t.on_enqueue(len);
        }
        assert!(t.is_busy());
        let start = t.average();
        // The queue drains; every new connection now finds it empty (length 1 after enqueue).
        let mut steps = 0;
        while t.is_busy() {
            let before = t.average();
            let change = t.on_enqueue(1);
            steps += 1;
            let after = t.average();
            // avg' = avg + (0 - avg) / 16: the sample is the length the arrival found.
            let expect = before - before / 16.0;
            assert!((after - expect).abs() < 1e-3, "EWMA step: {before} -> {after}, want {expect}");
            if change == BusyChange::BecameNonBusy {
                assert!(after < 10.0 && before >= 10.0, "cleared at {after}");
            } else {
                assert!(after >= 10.0);
            }
            assert!(steps < 1000);
        }
        // From ~start down to below 10 at 15/16 per step: ln(10 / start) / ln(15/16) steps.
        let predicted = (10.0f64 / start).ln() / (15.0f64 / 16.0).ln();
        assert!((f64::from(steps) - predicted).abs() <= 1.5, "{steps} steps, predicted {predicted}");
        assert!(steps > 10, "a short queue alone must not clear busy");
    }

    /// With a share of 10 (low-water mark 1 connection), a busy core whose arrivals find an empty
    /// queue recovers: the average decays towards 0, not towards the 1 the queue holds after each
    /// enqueue.
    #[test]
    fn small_shares_recover() {
        let mut t = BusyTracker::new(10, &cfg());
        for len in 1..=10 {
            t.on_enqueue(len);
        }
        assert!(t.is_busy());
        let steps = (0..1000).take_while(|_| t.on_enqueue(1) != BusyChange::BecameNonBusy).count();
        assert!(steps < 1000, "a busy core with a share of 10 never recovered");
        assert!(!t.is_busy());
    }

    /// A spike above the high mark while busy keeps the core busy even if the average is low.
    #[test]
    fn busy_stays_while_above_high() {
        let c = AffinityConfig { ewma_weight: 1_000_000, ..cfg() };
        let mut t = BusyTracker::new(4, &c);
        assert_eq!(t.on_enqueue(4), BusyChange::BecameBusy); // 4 > 3
        assert!(t.average() < 0.4);
        assert_eq!(t.on_enqueue(4), BusyChange::Unchanged);
        assert_eq!(t.on_enqueue(0), BusyChange::BecameNonBusy);
    }

    fn busy_of(cores: &[usize]) -> CoreSet {
        let mut s = CoreSet::new();
        cores.iter().for_each(|&c| s.insert(c));
        s
    }

    /// With local and remote connections always available, a non-busy core takes 5 local, 1 remote.
    #[test]
    fn five_local_to_one_remote() {
        let mut p = StealPolicy::new(0, 4, &cfg());
        let busy = busy_of(&[2]);
        let mut got = String::new();
        for _ in 0..24 {
            let src = p.order(false, &busy).next().unwrap();
            got.push(if src == 0 { 'L' } else { 'R' });
            p.record(src);
        }
        assert_eq!(got, "LLLLLRLLLLLRLLLLLRLLLLLR");
        let c = AffinityConfig { local_per_steal: 2, ..cfg() };
        let mut p = StealPolicy::new(0, 4, &c);
        let mut got = String::new();
        for _ in 0..6 {
            let src = p.order(false, &busy).next().unwrap();
            got.push(if src == 0 { 'L' } else { 'R' });
            p.record(src);
        }
        assert_eq!(got, "LLRLLR");
    }

    /// The full orders: local first, then victims; after 5 local, victims first, then local.
    #[test]
    fn order_shapes() {
        let mut p = StealPolicy::new(1, 5, &cfg());
        let busy = busy_of(&[0, 1, 3, 4]);
        assert_eq!(p.order(false, &busy).collect::<Vec<_>>(), [1, 3, 4, 0]);
        for _ in 0..5 {
            p.record(1);
        }
        assert_eq!(p.order(false, &busy).collect::<Vec<_>>(), [3, 4, 0, 1]);
        p.record(4);
        assert_eq!(p.last_victim(), Some(4));
        assert_eq!(p.local_streak(), 0);
        assert_eq!(p.order(false, &busy).collect::<Vec<_>>(), [1, 0, 3, 4]);
    }

    /// Victims are visited round-robin, starting one past the last victim.
    #[test]
    fn round_robin_victims_from_one_past_last() {
        let c = AffinityConfig { local_per_steal: 0, ..cfg() };
        let mut p = StealPolicy::new(2, 6, &c);
        assert_eq!(p.last_victim(), None);
        let busy = busy_of(&[0, 1, 4, 5]);
        let mut victims = Vec::new();
        for _ in 0..8 {
            let v = p.order(false, &busy).next().unwrap();
            victims.push(v);
            p.record(v);
        }
        // First scan starts one past itself (3), the first busy core there is 4.
        assert_eq!(victims, [4, 5, 0, 1, 4, 5, 0, 1]);
        // After stealing from 5, a scan starts at 0 even if 5 is still the only one with connections.
        p.record(5);
        assert_eq!(p.order(false, &busy).collect::<Vec<_>>(), [0, 1, 4, 5, 2]);
    }

    /// Busy cores never steal; non-busy cores only consider busy cores as victims.
    #[test]
    fn busy_never_steals_and_only_busy_are_victims() {
        let mut p = StealPolicy::new(0, 4, &cfg());
        let all_busy = busy_of(&[0, 1, 2, 3]);
        for _ in 0..10 {
            assert_eq!(p.order(true, &all_busy).collect::<Vec<_>>(), [0]);
            p.record(0);
        }
        assert_eq!(p.order(false, &busy_of(&[])).collect::<Vec<_>>(), [0]);
        assert_eq!(p.order(false, &busy_of(&[3])).collect::<Vec<_>>(), [3, 0]);
        // Its own busy bit never makes it its own victim.
        assert_eq!(p.order(false, &busy_of(&[0])).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn fine_round_robin() {
        let mut f = FineCursor::new(1, 3);
        assert_eq!(f.order().collect::<Vec<_>>(), [1, 2, 0]);
        f.record(2);
        assert_eq!(f.order().collect::<Vec<_>>(), [0, 1, 2]);
        f.record(0);
        assert_eq!(f.order().collect::<Vec<_>>(), [1, 2, 0]);
    }

    #[test]
    fn steal_log_top_victim_and_groups() {
        let mut log = StealLog::new(4);
        assert_eq!(log.top_victim(), None);
        for g in [7, 7, 9, 7, 9, 11] {
            log.record(2, FlowGroup(g));
        }
        log.record(3, FlowGroup(1));
        log.record(3, FlowGroup(1));
        assert_eq!(log.top_victim(), Some(2));
        assert_eq!(log.steals_from(2), 6);
        assert_eq!(log.top_groups(2), [FlowGroup(7), FlowGroup(9), FlowGroup(11)]);
        // Ties go to the lower core.
        for _ in 0..4 {
            log.record(1, FlowGroup(5));
        }
        log.record(1, FlowGroup(5));
        log.record(1, FlowGroup(5));
        assert_eq!(log.top_victim(), Some(1));
        log.clear();
        assert_eq!(log.top_victim(), None);
        assert!(log.top_groups(2).is_empty());
    }

    /// Heavy hitters survive a flood of distinct groups (Misra-Gries).
    #[test]
    fn steal_log_heavy_hitter_survives() {
        let mut log = StealLog::new(2);
        for i in 0..100u16 {
            log.record(1, FlowGroup(42));
            log.record(1, FlowGroup(1000 + i));
        }
        assert_eq!(log.top_groups(1)[0], FlowGroup(42));
    }

    /// The controller moves the group most stolen from the top victim to the stealer, every interval,
    /// only for non-busy cores, and clears the logs.
    #[test]
    fn migration_round_picks_victim_and_group() {
        let mut steering = SoftwareSteering::new(4);
        let mut mc = MigrationController::new(&cfg());
        let mut logs = vec![StealLog::new(4); 4];
        // Core 0 stole from 2 (groups 6 and 10 are on queue 2) more than from 3.
        for g in [6, 10, 10] {
            logs[0].record(2, FlowGroup(g));
        }
        logs[0].record(3, FlowGroup(3));
        // Core 1 stole from 3 but is busy.
        logs[1].record(3, FlowGroup(7));
        let busy = busy_of(&[1, 2, 3]);
        assert!(
            mc.round(Duration::from_millis(99), &busy, &CoreSet::new(), &mut logs, &mut steering).is_none()
        );
        let r =
            mc.round(Duration::from_millis(100), &busy, &CoreSet::new(), &mut logs, &mut steering).unwrap();
        assert_eq!(r.migrations, [Migration { group: FlowGroup(10), from: 2, to: 0 }]);
        assert!(r.failed.is_empty());
        assert_eq!(steering.queue_of(FlowGroup(10)), 0);
        assert_eq!(steering.queue_of(FlowGroup(7)), 3);
        assert_eq!(steering.migrations(), 1);
        assert!(logs.iter().all(|l| l.top_victim().is_none()));
        assert_eq!(mc.next_round(), Duration::from_millis(200));
        assert_eq!(mc.rounds(), 1);
        // Nothing stolen: nothing moves.
        let r =
            mc.round(Duration::from_millis(250), &busy, &CoreSet::new(), &mut logs, &mut steering).unwrap();
        assert!(r.migrations.is_empty());
    }

    /// When the stolen groups already left the victim, any group still routed to the victim moves.
    #[test]
    fn migration_falls_back_to_any_group_of_the_victim() {
        let mut steering = SoftwareSteering::new(4);
        steering.migrate(FlowGroup(6), 1).unwrap();
        let mut mc = MigrationController::new(&AffinityConfig { groups_per_round: 2, ..cfg() });
        let mut logs = vec![StealLog::new(4); 4];
        logs[0].record(2, FlowGroup(6));
        let r = mc.round(Duration::from_secs(1), &CoreSet::new(), &CoreSet::new(), &mut logs, &mut steering);
        let r = r.unwrap();
        assert_eq!(
            r.migrations,
            [
                Migration { group: FlowGroup(2), from: 2, to: 0 },
                Migration { group: FlowGroup(10), from: 2, to: 0 }
            ]
        );
        assert_eq!(steering.queue_of(FlowGroup(2)), 0);
        assert_eq!(steering.queue_of(FlowGroup(6)), 1);
    }

    /// Steering errors are reported, not fatal.
    #[test]
    fn migration_reports_steering_errors() {
        // The steering has 2 queues, the listener 4 cores: core 3 has no RX queue to move groups to.
        let mut steering = SoftwareSteering::new(2);
        let mut mc = MigrationController::new(&cfg());
        let mut logs = vec![StealLog::new(4); 4];
        logs[3].record(1, FlowGroup(1));
        let r = mc.round(Duration::from_secs(1), &CoreSet::new(), &CoreSet::new(), &mut logs, &mut steering);
        let r = r.unwrap();
        assert!(r.migrations.is_empty());
        assert_eq!(
            r.failed,
            [(
                Migration { group: FlowGroup(1), from: 1, to: 3 },
                SteeringError::NoSuchQueue { queue: 3, queues: 2 }
            )]
        );
    }
}
