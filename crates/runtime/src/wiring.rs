//! The channels between queues and cores: every queue's channelizer has one channel to every core
//! (an N x N matrix of single-producer channels, so a connection registered to any core is reachable
//! from any queue), plus a default channel to its own core and a TX channel back from it.

use netchannel::channel::{Channel, WakeMode};
use netchannel::pool::{PacketRx, PacketTx, Pool};

/// Capacity of every channel.
pub(crate) const CHANNEL: usize = 1024;

/// One queue's and one core's ends of the matrix (queue `i` and core `i` go together).
#[derive(Debug)]
pub(crate) struct Ends {
    /// `lanes[c]`: what this queue's channelizer delivers to core `c`.
    pub(crate) lanes: Vec<PacketTx>,
    /// `inputs[q]`: what queue `q`'s channelizer delivers to this core.
    pub(crate) inputs: Vec<PacketRx>,
    /// Frames no one registered, from this queue to this core.
    pub(crate) default: (PacketTx, PacketRx),
    /// The core's transmissions, to this queue.
    pub(crate) tx: (PacketTx, PacketRx),
}

/// The matrix for `cores` queues and cores.
///
/// A core's input channels (the matrix and its default channel) signal an eventfd when the core
/// asked for a wakeup, so that an idle core sleeps on all of them at once (`poll(2)`, with its
/// wakeup); the TX channels are drained by a channelizer that polls.
pub(crate) fn wire(pool: &Pool, cores: usize) -> Result<Vec<Ends>, String> {
    let input = || {
        pool.packet_channel_with(Channel::builder(CHANNEL).wake(WakeMode::EventFd))
            .map_err(|e| format!("cannot make a channel: {e}"))
    };
    let channel = || pool.packet_channel(CHANNEL).map_err(|e| format!("cannot make a channel: {e}"));
    let mut lanes: Vec<Vec<PacketTx>> = (0..cores).map(|_| Vec::with_capacity(cores)).collect();
    let mut inputs: Vec<Vec<PacketRx>> = (0..cores).map(|_| Vec::with_capacity(cores)).collect();
    for lanes_of_q in &mut lanes {
        for inputs_of_c in &mut inputs {
            let (tx, rx) = input()?;
            lanes_of_q.push(tx);
            inputs_of_c.push(rx);
        }
    }
    lanes
        .into_iter()
        .zip(inputs)
        .map(|(lanes, inputs)| Ok(Ends { lanes, inputs, default: input()?, tx: channel()? }))
        .collect()
}
