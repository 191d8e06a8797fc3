//! Why a pool could not be built, why a packet length change failed, and what
//! [`Pool::check_leaks`](super::Pool::check_leaks) found wrong.

use std::io;

use super::HEADER_SIZE;

/// Why a pool could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The pool must hold at least one buffer.
    #[error("a buffer pool needs at least one buffer")]
    ZeroBuffers,
    /// The data room must be at least one byte.
    #[error("a buffer pool needs a data room of at least one byte")]
    ZeroDataRoom,
    /// The batch size must be at least one buffer.
    #[error("a buffer pool's batch size must be at least 1")]
    ZeroBatch,
    /// A cache must be able to hold at least one batch.
    #[error("cache size {cache_size} is smaller than the batch size {batch}")]
    CacheSmallerThanBatch {
        /// The requested cache size.
        cache_size: usize,
        /// The requested batch size.
        batch: usize,
    },
    /// Header, headroom and data room, rounded up to [`SLOT_ALIGN`](super::SLOT_ALIGN), do not fit the `u32` offsets
    /// that buffer metadata is stored in.
    #[error("a slot of {HEADER_SIZE} + {headroom} + {data_room} bytes does not fit u32 offsets")]
    SlotTooLarge {
        /// The requested headroom.
        headroom: usize,
        /// The requested data room.
        data_room: usize,
    },
    /// `buffers × stride` does not fit the address space.
    #[error("{buffers} buffers of {stride} bytes do not fit the address space")]
    RegionTooLarge {
        /// The requested number of buffers.
        buffers: u32,
        /// The stride those buffers would have.
        stride: usize,
    },
    /// [`HugePages::Require`](super::HugePages::Require) was set and the hugepage mapping failed (typically no free 2 MiB pages:
    /// see `/proc/sys/vm/nr_hugepages`).
    #[error("cannot map the pool on 2 MiB hugepages: {0}")]
    HugePagesUnavailable(#[source] io::Error),
    /// The region could not be mapped.
    #[error("cannot map the pool's region: {0}")]
    Map(#[source] io::Error),
    /// The depot's index stack could not be allocated.
    #[error("cannot allocate the pool's free-index stack")]
    OutOfMemory,
    /// More buffers than [`MAX_BUFFERS`](super::MAX_BUFFERS): indices must stay below
    /// [`FRAME_TAG`](super::FRAME_TAG).
    #[error("{buffers} buffers is more than a pool holds ({}): use several pools", super::MAX_BUFFERS)]
    TooManyBuffers {
        /// The requested number of buffers.
        buffers: u32,
    },
}

/// Why a [`Packet`](super::Packet) length operation was refused; the packet is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// The data would run past the end of the buffer.
    #[error("packet length {requested} exceeds the {max} bytes left in the buffer")]
    TooLong {
        /// The length asked for.
        requested: usize,
        /// The longest the data can be at its current start.
        max: usize,
    },
    /// Not enough headroom in front of the data.
    #[error("cannot prepend {requested} bytes with {available} bytes of headroom")]
    NoHeadroom {
        /// The bytes asked for.
        requested: usize,
        /// The headroom there is.
        available: usize,
    },
    /// The data is shorter than the bytes asked to strip.
    #[error("cannot strip {requested} bytes from a {len}-byte packet")]
    TooShort {
        /// The bytes asked for.
        requested: usize,
        /// The data's length.
        len: usize,
    },
    /// The packet is a frame of a shared buffer, and the change would write the shared data, which
    /// other handles read.
    #[error(
        "a frame of a shared buffer cannot write the shared data (other handles read it): copy it into a fresh packet to change it"
    )]
    SharedPayload,
}

/// Why [`SharedPacket::frame`](super::SharedPacket::frame) refused; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Another frame of the buffer is in flight: its headers occupy the headroom until the device is
    /// done with it.
    #[error(
        "a frame of this shared buffer is still in flight: copy the data into a fresh packet for this send"
    )]
    InFlight,
    /// The headers do not fit in front of the shared data.
    #[error(
        "{requested} header bytes do not fit the {available} bytes in front of the shared data: share it with more headroom, or copy it"
    )]
    NoHeadroom {
        /// The header bytes asked for.
        requested: usize,
        /// The headroom in front of the shared data.
        available: usize,
    },
    /// The cache is of another pool than the buffer.
    #[error("the cache is of another pool than the shared buffer")]
    WrongPool,
}

/// What [`Pool::check_leaks`](super::Pool::check_leaks) found wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeakError {
    /// Caches are still alive, so their buffers cannot be inspected; drop them first.
    #[error("cannot check for leaks while {0} caches are alive")]
    LiveCaches(usize),
    /// Not every buffer is back exactly once.
    #[error(
        "{missing} of {total} buffers missing, {duplicated} freed twice{}{}",
        .first_missing.map(|i| format!("; first missing: {i}")).unwrap_or_default(),
        .first_duplicated.map(|i| format!("; first freed twice: {i}")).unwrap_or_default()
    )]
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
