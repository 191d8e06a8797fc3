//! Where a core's channelizer runs: [`Placement`], a leaf both the runtime's builder and the cores
//! read.

use std::fmt;

/// Where a core's channelizer runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Placement {
    /// On the core's own thread, polled in turn with its stack: one thread per core.
    #[default]
    Same,
    /// On a thread of its own, joined to the core's stack by the channels: two threads per core.
    Split,
}

impl std::str::FromStr for Placement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "same" => Ok(Self::Same),
            "split" => Ok(Self::Split),
            _ => Err(format!("{s:?} is not a placement (same or split)")),
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Same => "same",
            Self::Split => "split",
        })
    }
}
