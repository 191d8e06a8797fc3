//! Interrupts through VFIO: what an interrupt index offers ([`VfioDevice::irq_info`]), enabling vectors
//! that each signal an eventfd ([`VfioDevice::enable_irqs`], [`IrqEventFd`]), unmasking INTx, and
//! turning them off again on drop.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_AUTOMASKED, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_MASKABLE, VFIO_IRQ_SET_ACTION_TRIGGER,
    VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_INTX_IRQ_INDEX,
    VFIO_PCI_MSI_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, vfio_irq_info, vfio_irq_set,
};

use super::{VfioDevice, argsz, check, request};
use crate::platform::error::OpenError;

impl VfioDevice {
    /// What VFIO offers for interrupt index `kind`: how many vectors, and whether they can be signalled
    /// through an eventfd. A device without MSI-X (or with MSI-X disabled) reports 0 vectors for it.
    ///
    /// # Errors
    ///
    /// [`OpenError::Vfio`] when `VFIO_DEVICE_GET_IRQ_INFO` fails.
    pub fn irq_info(&self, kind: IrqKind) -> Result<IrqInfo, OpenError> {
        let mut info =
            vfio_irq_info { argsz: argsz::<vfio_irq_info>(), index: kind.index(), ..Default::default() };
        // SAFETY: VFIO_DEVICE_GET_IRQ_INFO writes at most `argsz` bytes into `info`, which outlives the call.
        let r = unsafe { libc::ioctl(self.file.as_raw_fd(), request::DEVICE_GET_IRQ_INFO, &raw mut info) };
        check(r, "VFIO_DEVICE_GET_IRQ_INFO", &self.path, "")?;
        Ok(IrqInfo {
            count: info.count,
            eventfd: info.flags & VFIO_IRQ_INFO_EVENTFD != 0,
            maskable: info.flags & VFIO_IRQ_INFO_MASKABLE != 0,
            automasked: info.flags & VFIO_IRQ_INFO_AUTOMASKED != 0,
        })
    }

    /// Enables vectors `0..vectors` of interrupt index `kind`, each signalling an eventfd of its own:
    /// the kernel's handler for the vector increments the eventfd, so a driver can sleep in `poll`/`epoll`
    /// (or [`IrqEventFd::wait`]) instead of polling registers. For MSI and MSI-X this also programs and
    /// enables the capability in the device. Dropping the [`IrqEventFd`] disables the vectors again.
    ///
    /// Only one set of vectors per device can be enabled at a time (MSI, MSI-X and INTx exclude each
    /// other); INTx is level-triggered and masked by the kernel on each interrupt, so a driver must
    /// call [`IrqEventFd::unmask`] after handling it.
    ///
    /// # Errors
    ///
    /// [`OpenError::VfioUnsupported`] when the device has fewer vectors or no eventfd signalling for
    /// `kind`; [`OpenError::Vfio`] when an eventfd cannot be made or `VFIO_DEVICE_SET_IRQS` fails.
    pub fn enable_irqs(&self, kind: IrqKind, vectors: u32) -> Result<IrqEventFd, OpenError> {
        let info = self.irq_info(kind)?;
        if vectors == 0 || vectors > info.count || !info.eventfd {
            return Err(OpenError::VfioUnsupported {
                why: format!(
                    "{} offers {} {kind:?} vector(s){}; asked for {vectors}",
                    self.address,
                    info.count,
                    if info.eventfd { "" } else { " without eventfd signalling" }
                ),
            });
        }
        let mut eventfds = Vec::new();
        for _ in 0..vectors {
            // SAFETY: eventfd(2) takes its arguments by value and touches no memory of ours; failure is -1.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            let fd = check(fd, "eventfd", &self.path, "")?;
            // SAFETY: eventfd succeeded, so `fd` is a new file descriptor that nothing else owns.
            eventfds.push(File::from(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        let fds: Vec<u32> =
            eventfds.iter().map(|f| u32::from_ne_bytes(f.as_raw_fd().to_ne_bytes())).collect();
        set_irqs(
            &self.file,
            &self.path,
            kind,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            &fds,
        )?;
        tracing::debug!(pci = %self.address, ?kind, vectors, "interrupts enabled via VFIO");
        Ok(IrqEventFd { device: self.file.clone(), path: self.path.clone(), kind, eventfds })
    }
}

/// A VFIO interrupt index of a PCI device (`VFIO_PCI_*_IRQ_INDEX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqKind {
    /// The legacy level-triggered interrupt pin (one vector, masked by the kernel when it fires).
    Intx,
    /// Message Signalled Interrupts (up to 32 vectors).
    Msi,
    /// MSI-X (up to 2048 vectors; what the 82599 uses per queue).
    Msix,
}

impl IrqKind {
    fn index(self) -> u32 {
        match self {
            Self::Intx => VFIO_PCI_INTX_IRQ_INDEX,
            Self::Msi => VFIO_PCI_MSI_IRQ_INDEX,
            Self::Msix => VFIO_PCI_MSIX_IRQ_INDEX,
        }
    }
}

/// What `VFIO_DEVICE_GET_IRQ_INFO` reports for an interrupt index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqInfo {
    /// How many vectors the index has (0: the device lacks that kind of interrupt).
    pub count: u32,
    /// Whether the vectors can signal eventfds (`VFIO_IRQ_INFO_EVENTFD`).
    pub eventfd: bool,
    /// Whether they can be masked (`VFIO_IRQ_INFO_MASKABLE`).
    pub maskable: bool,
    /// Whether the kernel masks them when they fire (`VFIO_IRQ_INFO_AUTOMASKED`: INTx).
    pub automasked: bool,
}

/// `VFIO_DEVICE_SET_IRQS` on vectors `0..data.len()` of `kind` (or all of them, with an empty `data`
/// and `DATA_NONE`), with `data` the per-vector payload (eventfds).
fn set_irqs(device: &File, path: &Path, kind: IrqKind, flags: u32, data: &[u32]) -> Result<(), OpenError> {
    // The header (argsz, flags, index, start, count: five u32) followed by the payload.
    let header = size_of::<vfio_irq_set>() / size_of::<u32>();
    let count = u32::try_from(data.len())
        .map_err(|_| OpenError::VfioUnsupported { why: format!("{} interrupt vectors", data.len()) })?;
    let mut buf = vec![0u32; header + data.len()];
    buf[0] = u32::try_from(buf.len() * size_of::<u32>())
        .map_err(|_| OpenError::VfioUnsupported { why: format!("{} interrupt vectors", data.len()) })?;
    buf[1] = flags;
    buf[2] = kind.index();
    buf[3] = 0; // start
    buf[4] = count;
    buf[header..].copy_from_slice(data);
    // SAFETY: VFIO_DEVICE_SET_IRQS reads a `vfio_irq_set` (five u32, laid out as `buf[..5]`) and then
    // `argsz - 20` bytes of payload, all inside `buf`, which outlives the call and is 4-aligned as the
    // struct requires; the kernel takes its own references to the eventfds.
    let r = unsafe { libc::ioctl(device.as_raw_fd(), request::DEVICE_SET_IRQS, buf.as_ptr()) };
    check(r, "VFIO_DEVICE_SET_IRQS", path, "")?;
    Ok(())
}

/// Interrupt vectors enabled by [`VfioDevice::enable_irqs`], each with the eventfd the kernel signals
/// when it fires. Dropping it disables the vectors (`VFIO_DEVICE_SET_IRQS` with `DATA_NONE` and count
/// 0), then closes the eventfds.
pub struct IrqEventFd {
    device: Arc<File>,
    path: PathBuf,
    kind: IrqKind,
    eventfds: Vec<File>,
}

impl fmt::Debug for IrqEventFd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IrqEventFd")
            .field("device", &self.path)
            .field("kind", &self.kind)
            .field("eventfds", &self.eventfds.iter().map(AsRawFd::as_raw_fd).collect::<Vec<_>>())
            .finish()
    }
}

impl IrqEventFd {
    /// The interrupt index.
    #[must_use]
    pub fn kind(&self) -> IrqKind {
        self.kind
    }

    /// How many vectors are enabled.
    #[must_use]
    pub fn vectors(&self) -> usize {
        self.eventfds.len()
    }

    /// The eventfd of `vector`, to add to an `epoll` set (it is non-blocking); `None` past the last.
    #[must_use]
    pub fn eventfd(&self, vector: usize) -> Option<BorrowedFd<'_>> {
        self.eventfds.get(vector).map(AsFd::as_fd)
    }

    /// How many times `vector` fired since the last call (0: not at all); does not block.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a vector past the last, or the `read(2)` error.
    pub fn take(&self, vector: usize) -> io::Result<u64> {
        let mut file = self.eventfds.get(vector).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("vector {vector} of {} is not enabled", self.eventfds.len()),
            )
        })?;
        let mut buf = [0u8; 8];
        match file.read(&mut buf) {
            Ok(8) => Ok(u64::from_ne_bytes(buf)),
            Ok(n) => Err(io::Error::other(format!("short eventfd read of {n} bytes"))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Sleeps until `vector` fires or `timeout` passes; returns how many times it fired (0: timeout).
    ///
    /// # Errors
    ///
    /// As [`IrqEventFd::take`], or the `ppoll(2)` error.
    pub fn wait(&self, vector: usize, timeout: Duration) -> io::Result<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            let n = self.take(vector)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if n > 0 || left.is_zero() {
                return Ok(n);
            }
            let fd = self.eventfds.get(vector).map_or(-1, AsRawFd::as_raw_fd);
            let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // To the nanosecond: `poll`'s milliseconds would sleep a whole one past a deadline
            // a fraction of a millisecond ahead.
            let ts = libc::timespec {
                tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: libc::c_long::from(left.subsec_nanos().cast_signed()),
            };
            // SAFETY: ppoll(2) reads and updates the one `pollfd` it is given and reads the
            // timespec, both live locals; a null signal mask leaves the thread's alone.
            let r = unsafe { libc::ppoll(&raw mut pfd, 1, &raw const ts, std::ptr::null()) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }

    /// Unmasks the INTx vector after the interrupt was handled (the kernel masks INTx each time it
    /// fires). MSI and MSI-X are edge-triggered and never need it (VFIO refuses to unmask them).
    ///
    /// # Errors
    ///
    /// [`OpenError::Vfio`] when `VFIO_DEVICE_SET_IRQS` fails.
    pub fn unmask(&self) -> Result<(), OpenError> {
        let header = size_of::<vfio_irq_set>() / size_of::<u32>();
        let mut buf = vec![0u32; header];
        buf[0] = argsz::<vfio_irq_set>();
        buf[1] = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_UNMASK;
        buf[2] = self.kind.index();
        buf[4] = 1;
        // SAFETY: VFIO_DEVICE_SET_IRQS reads a `vfio_irq_set` without payload (DATA_NONE), laid out as
        // `buf`, which outlives the call and is 4-aligned.
        let r = unsafe { libc::ioctl(self.device.as_raw_fd(), request::DEVICE_SET_IRQS, buf.as_ptr()) };
        check(r, "VFIO_DEVICE_SET_IRQS", &self.path, "")?;
        Ok(())
    }
}

impl Drop for IrqEventFd {
    fn drop(&mut self) {
        // DATA_NONE | ACTION_TRIGGER with count 0 disables every vector of the index.
        if let Err(e) = set_irqs(
            &self.device,
            &self.path,
            self.kind,
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            &[],
        ) {
            tracing::error!(error = %e, kind = ?self.kind, "disabling VFIO interrupts failed");
        }
    }
}
