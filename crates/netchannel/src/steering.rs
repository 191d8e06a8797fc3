//! Flow steering: which RX queue (and so which core) receives each [`FlowGroup`].
//!
//! Affinity-Accept (Pesterev et al., EuroSys 2012) splits TCP traffic into 4096 flow groups by the low
//! 12 bits of the remote port and has the NIC route each group to one RX queue. A core that keeps
//! stealing connections from a busy core moves one of the victim's flow groups to itself, so that
//! future connections of that group arrive where they will be served.
//!
//! [`FlowSteering`] is that routing table as the balancer sees it. The 82599 driver implements it with
//! Flow Director perfect filters (`ixgbe_vfio`); [`SoftwareSteering`] implements it as a plain table
//! for software devices and tests. The accept-affinity crate drives any of them without knowing which.

use crate::signature::FlowGroup;

/// Why a steering change was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SteeringError {
    /// `queue` is not one of the device's `queues` RX queues.
    #[error("RX queue {queue} does not exist (the device has {queues})")]
    NoSuchQueue {
        /// The queue asked for.
        queue: u16,
        /// How many RX queues there are.
        queues: u16,
    },
    /// The device did not confirm the change in time (for the 82599: FDIRCMD never cleared its
    /// command field). The group may still be routed to its old queue.
    #[error("the device did not confirm moving flow group {} in time", .group.0)]
    Timeout {
        /// The group being moved.
        group: FlowGroup,
    },
    /// The device failed in a way that retrying will not fix.
    #[error("flow steering failed: {0}")]
    Failed(String),
}

/// The flow-group to RX-queue map of a device.
pub trait FlowSteering {
    /// How many RX queues groups can be routed to: valid queues are `0..queues()`.
    fn queues(&self) -> u16;

    /// The RX queue `group` is routed to now.
    fn queue_of(&self, group: FlowGroup) -> u16;

    /// Routes `group` to `queue` from now on. Packets of the group already received stay where they
    /// are; when this returns `Ok`, new packets of the group arrive on `queue`.
    ///
    /// # Errors
    ///
    /// [`SteeringError::NoSuchQueue`] for a bad queue (nothing changes), [`SteeringError::Timeout`] or
    /// [`SteeringError::Failed`] when the device did not take the change.
    fn migrate(&mut self, group: FlowGroup, queue: u16) -> Result<(), SteeringError>;
}

/// A [`FlowSteering`] table in software: the initial assignment is round-robin (group `g` on queue
/// `g % queues`), as the 82599 driver programs its filters.
///
/// ```
/// use netchannel::signature::FlowGroup;
/// use netchannel::steering::{FlowSteering, SoftwareSteering};
///
/// let mut steering = SoftwareSteering::new(4);
/// assert_eq!(steering.queue_of(FlowGroup(6)), 2);
/// steering.migrate(FlowGroup(6), 0)?;
/// assert_eq!(steering.queue_of(FlowGroup(6)), 0);
/// assert_eq!(steering.migrations(), 1);
/// # Ok::<(), netchannel::steering::SteeringError>(())
/// ```
#[derive(Clone, Debug)]
pub struct SoftwareSteering {
    table: Box<[u16]>,
    queues: u16,
    migrations: u64,
}

impl SoftwareSteering {
    /// A table over `queues` RX queues (at least one), groups assigned round-robin.
    #[must_use]
    pub fn new(queues: u16) -> Self {
        let queues = queues.max(1);
        let table = (0..FlowGroup::COUNT)
            .map(|g| u16::try_from(g % usize::from(queues)).unwrap_or(0))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Self { table, queues, migrations: 0 }
    }

    /// How many times a group was moved.
    #[must_use]
    pub fn migrations(&self) -> u64 {
        self.migrations
    }
}

impl FlowSteering for SoftwareSteering {
    fn queues(&self) -> u16 {
        self.queues
    }

    fn queue_of(&self, group: FlowGroup) -> u16 {
        self.table[group.index()]
    }

    fn migrate(&mut self, group: FlowGroup, queue: u16) -> Result<(), SteeringError> {
        if queue >= self.queues {
            return Err(SteeringError::NoSuchQueue { queue, queues: self.queues });
        }
        self.table[group.index()] = queue;
        self.migrations += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_then_migrate() {
        let mut s = SoftwareSteering::new(3);
        assert_eq!(s.queues(), 3);
        let counts = (0..FlowGroup::COUNT).fold([0usize; 3], |mut c, g| {
            c[usize::from(s.queue_of(FlowGroup(u16::try_from(g).unwrap())))] += 1;
            c
        });
        assert_eq!(counts, [1366, 1365, 1365]);
        assert_eq!(s.migrate(FlowGroup(5), 3), Err(SteeringError::NoSuchQueue { queue: 3, queues: 3 }));
        assert_eq!(s.queue_of(FlowGroup(5)), 2);
        s.migrate(FlowGroup(5), 0).unwrap();
        assert_eq!(s.queue_of(FlowGroup(5)), 0);
        assert_eq!(s.migrations(), 1);
    }
}
