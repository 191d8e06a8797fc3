//! Why a pool could not be built, why a packet length change failed, and what
//! [`Pool::check_leaks`](super::Pool::check_leaks) found wrong.

use std::fmt;
use std::io;

use super::HEADER_SIZE;

/// Why a pool could not be built.
#[derive(Debug)]
pub enum PoolError {
    /// The pool must hold at least one buffer.
    ZeroBuffers,
    /// The data room must be at least one byte.
    ZeroDataRoom,
    /// The batch size must be at least one buffer.
    ZeroBatch,
    /// A cache must be able to hold at least one batch.
    CacheSmallerThanBatch {
        /// The requested cache size.
        cache_size: usize,
        /// The requested batch size.
        batch: usize,
    },
    /// Header, headroom and data room, rounded up to [`SLOT_ALIGN`](super::SLOT_ALIGN), do not fit the `u32` offsets
    /// that buffer metadata is stored in.
    SlotTooLarge {
        /// The requested headroom.
        headroom: usize,
        /// The requested data room.
        data_room: usize,
    },
    /// `buffers × stride` does not fit the address space.
    RegionTooLarge {
        /// The requested number of buffers.
        buffers: u32,
        /// The stride those buffers would have.
        stride: usize,
    },
    /// [`HugePages::Require`](super::HugePages::Require) was set and the hugepage mapping failed (typically no free 2 MiB pages:
    /// see `/proc/sys/vm/nr_hugepages`).
    HugePagesUnavailable(io::Error),
    /// The region could not be mapped.
    Map(io::Error),
    /// The depot's index stack could not be allocated.
    OutOfMemory,
    /// More buffers than [`MAX_BUFFERS`](super::MAX_BUFFERS): indices must stay below
    /// [`FRAME_TAG`](super::FRAME_TAG).
    TooManyBuffers {
        /// The requested number of buffers.
        buffers: u32,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroBuffers => f.write_str("a buffer pool needs at least one buffer"),
            Self::ZeroDataRoom => f.write_str("a buffer pool needs a data room of at least one byte"),
            Self::ZeroBatch => f.write_str("a buffer pool's batch size must be at least 1"),
            Self::CacheSmallerThanBatch { cache_size, batch } => {
                write!(f, "cache size {cache_size} is smaller than the batch size {batch}")
            }
            Self::SlotTooLarge { headroom, data_room } => {
                write!(f, "a slot of {HEADER_SIZE} + {headroom} + {data_room} bytes does not fit u32 offsets")
            }
            Self::RegionTooLarge { buffers, stride } => {
                write!(f, "{buffers} buffers of {stride} bytes do not fit the address space")
            }
            Self::HugePagesUnavailable(e) => {
                write!(f, "cannot map the pool on 2 MiB hugepages: {e}")
            }
            Self::Map(e) => write!(f, "cannot map the pool's region: {e}"),
            Self::OutOfMemory => f.write_str("cannot allocate the pool's free-index stack"),
            Self::TooManyBuffers { buffers } => write!(
                f,
                "{buffers} buffers is more than a pool holds ({}): use several pools",
                super::MAX_BUFFERS
            ),
        }
    }
}

impl std::error::Error for PoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::HugePagesUnavailable(e) | Self::Map(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a [`Packet`](super::Packet) length operation was refused; the packet is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketError {
    /// The data would run past the end of the buffer.
    TooLong {
        /// The length asked for.
        requested: usize,
        /// The longest the data can be at its current start.
        max: usize,
    },
    /// Not enough headroom in front of the data.
    NoHeadroom {
        /// The bytes asked for.
        requested: usize,
        /// The headroom there is.
        available: usize,
    },
    /// The data is shorter than the bytes asked to strip.
    TooShort {
        /// The bytes asked for.
        requested: usize,
        /// The data's length.
        len: usize,
    },
    /// The packet is a frame of a shared buffer, and the change would write the shared data, which
    /// other handles read.
    SharedPayload,
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { requested, max } => {
                write!(f, "packet length {requested} exceeds the {max} bytes left in the buffer")
            }
            Self::NoHeadroom { requested, available } => {
                write!(f, "cannot prepend {requested} bytes with {available} bytes of headroom")
            }
            Self::TooShort { requested, len } => {
                write!(f, "cannot strip {requested} bytes from a {len}-byte packet")
            }
            Self::SharedPayload => f.write_str(
                "a frame of a shared buffer cannot write the shared data (other handles read it): copy it into a fresh packet to change it",
            ),
        }
    }
}

impl std::error::Error for PacketError {}

/// Why [`SharedPacket::frame`](super::SharedPacket::frame) refused; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Another frame of the buffer is in flight: its headers occupy the headroom until the device is
    /// done with it.
    InFlight,
    /// The headers do not fit in front of the shared data.
    NoHeadroom {
        /// The header bytes asked for.
        requested: usize,
        /// The headroom in front of the shared data.
        available: usize,
    },
    /// The cache is of another pool than the buffer.
    WrongPool,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InFlight => f.write_str(
                "a frame of this shared buffer is still in flight: copy the data into a fresh packet for this send",
            ),
            Self::NoHeadroom { requested, available } => write!(
                f,
                "{requested} header bytes do not fit the {available} bytes in front of the shared data: share it with more headroom, or copy it"
            ),
            Self::WrongPool => f.write_str("the cache is of another pool than the shared buffer"),
        }
    }
}

impl std::error::Error for FrameError {}

/// What [`Pool::check_leaks`](super::Pool::check_leaks) found wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeakError {
    /// Caches are still alive, so their buffers cannot be inspected; drop them first.
    LiveCaches(usize),
    /// Not every buffer is back exactly once.
    Leaked {
        /// Buffers in the pool.
        total: usize,
        /// Buffers that are not back (allocated and never freed, or lost in a channel).
        missing: usize,
        /// Extra copies of buffers that were freed more than once.
        duplicated: usize,
        /// The lowest missing index, if any.
        first_missing: Option<u32>,
        /// The lowest index freed more than once, if any.
        first_duplicated: Option<u32>,
    },
}

impl fmt::Display for LeakError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::LiveCaches(n) => write!(f, "cannot check for leaks while {n} caches are alive"),
            Self::Leaked { total, missing, duplicated, first_missing, first_duplicated } => {
                write!(f, "{missing} of {total} buffers missing, {duplicated} freed twice")?;
                if let Some(i) = first_missing {
                    write!(f, "; first missing: {i}")?;
                }
                if let Some(i) = first_duplicated {
                    write!(f, "; first freed twice: {i}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LeakError {}
