//! Bringing a backend up: [`Backend`] says which, `open` turns it into one [`Port`] per core, one
//! buffer pool every port uses, the MAC address, Flow Director steering where the NIC has it, and
//! (for the model) the in-process [`Peer`]; `Opened::finish` takes it down again and audits every
//! buffer.
//!
//! | backend | ports (one per core) | pool | steering | peer |
//! |---|---|---|---|---|
//! | [`Backend::Model`] | the 82599 model's queues, `cores` of them (1 by default) | sized, hugepages preferred | Flow Director | the other end of the model's wire |
//! | [`Backend::Tap`] | the TAP interface (exactly one core), with offloads by default | sized, no hugepages; with offloads 64 KiB buffers made resident as used | - | - |
//! | [`Backend::Xdp`] | one AF_XDP queue each ([`AfXdp::into_queues`]) | sized, no hugepages | - | - |
//! | [`Backend::Pci`] | the card's queues, `cores` of them (1 by default) | sized, hugepages preferred | Flow Director | - |
//!
//! "Sized": every pool is as large as its device's rings, the runtime's channels, the per-thread
//! caches and the bursts in flight can hold at once, plus a reserve for the driver's RX refill
//! (`sizing.rs` has the audit and the formula: 4,768 buffers for one core of the model, 31,360 for
//! four), so that no peer and no service can run it dry; a pool below that is refused with
//! [`OpenError::PoolTooSmall`]. The model's wire pool (8192: its two directions of 2048 frames,
//! the peer's stack and caches) is the peer's, not the server's.
//!
//! With a pcap file, the model's peer end is recorded (the server's side of the wire is the same
//! traffic); TAP and AF_XDP record their port (several ports: one file each, `PATH.qN`), and the PCI
//! backend records each queue into `PATH.qN`.
//!
//! A TAP opened with offloads ([`Backend::tap`]; [`Backend::tap_without_offloads`] for plain frames)
//! carries the virtio-net header: each core's stack is configured from the device's
//! `DeviceOffloads` (`tcp_lib::stack::Config::with_device_offloads`), so it hands the kernel TSO
//! super-segments of up to 64 KiB with partial checksums, and takes the kernel's coalesced
//! segments, whose checksums the kernel vouches for, whole.
//!
//! Every [`OpenError`] says what failed and how to fix it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use ixgbe_vfio::driver::{Config as NicConfig, InitError, Ixgbe};
use ixgbe_vfio::platform::{self, Backend as PlatformBackend};
use ixgbe_vfio::regs::MAX_QUEUES;
use ixgbe_vfio::sim::{Model, SimConfig, SimStats, SimThread, Wire};
use netchannel::channel::BuildError;
use netchannel::dev::xdp::{self, AfXdp, BusyPoll, XdpError, XdpMode};
use netchannel::dev::{NetDevice, OFFLOAD_DATA_ROOM, Pair, PcapWriter, Tap, TapError, TapOptions};
use netchannel::pool::{Audit, HugePages, LeakError, Pool, PoolError};
use tcp_lib::wire::EthernetAddress;

use crate::device::Port;
use crate::peer::Peer;
use crate::sizing::{PoolDemand, Rings};

/// Which network the runtime serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// The 82599 model ([`ixgbe_vfio::sim::Model`]) on its own thread, the real driver on it, and an
    /// in-process peer on the model's wire. No NIC, no root.
    #[default]
    Model,
    /// A Linux TAP interface (created if it does not exist): the kernel is the peer. One queue.
    Tap {
        /// The interface's name, e.g. `tap0`.
        name: String,
        /// Open it with offloads (the virtio-net header: TSO super-segments and partial
        /// checksums out, the kernel's coalesced segments in, [`netchannel::dev::TapOptions`]);
        /// the stack is configured from what the TAP offers. On by default.
        offloads: bool,
    },
    /// AF_XDP on `iface`: queues 0..n (n = `queues`, or all of the interface's RX queues), one core
    /// each.
    Xdp {
        /// The interface, e.g. `veth0` or `eth1`.
        iface: String,
        /// How many queues, from queue 0; `None`: all of them.
        queues: Option<u16>,
        /// Where the XDP program runs.
        mode: XdpMode,
        /// Busy polling on each queue's socket (`None`: off).
        busy_poll: Option<BusyPoll>,
    },
    /// An 82599 bound to `vfio-pci` (see `scripts/vfio-bind.sh`).
    Pci {
        /// Its PCI address, e.g. `0000:03:00.0`.
        addr: String,
    },
}

impl Backend {
    /// The TAP interface `name`.
    #[must_use]
    pub fn tap(name: impl Into<String>) -> Self {
        Self::Tap { name: name.into(), offloads: true }
    }

    /// The TAP interface `name`, opened without offloads: one Ethernet frame per read and write,
    /// every checksum computed by the stack.
    #[must_use]
    pub fn tap_without_offloads(name: impl Into<String>) -> Self {
        Self::Tap { name: name.into(), offloads: false }
    }

    /// AF_XDP on every RX queue of `iface`, native XDP where the driver has it
    /// ([`XdpMode::Auto`]).
    #[must_use]
    pub fn xdp(iface: impl Into<String>) -> Self {
        Self::Xdp { iface: iface.into(), queues: None, mode: XdpMode::Auto, busy_poll: None }
    }

    /// The 82599 at PCI address `addr`.
    #[must_use]
    pub fn pci(addr: impl Into<String>) -> Self {
        Self::Pci { addr: addr.into() }
    }
}

impl fmt::Display for Backend {
    /// `the 82599 model`, `TAP tap0`, `AF_XDP on veth0`, `the 82599 at 0000:03:00.0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Model => f.write_str("the 82599 model"),
            Self::Tap { name, offloads: true } => write!(f, "TAP {name}"),
            Self::Tap { name, offloads: false } => write!(f, "TAP {name} (no offloads)"),
            Self::Xdp { iface, .. } => write!(f, "AF_XDP on {iface}"),
            Self::Pci { addr } => write!(f, "the 82599 at {addr}"),
        }
    }
}

fn mode_name(mode: XdpMode) -> &'static str {
    match mode {
        XdpMode::Generic => "generic",
        XdpMode::Native => "native",
        XdpMode::Auto => "auto",
    }
}

/// What to add to an AF_XDP error for the command line.
fn xdp_hint(e: &XdpError) -> &'static str {
    match e {
        XdpError::NativeUnsupported { .. } => "; on the command line: --xdp-mode generic (or auto)",
        _ => "",
    }
}

/// What to add to a TAP error.
fn tap_hint(e: &TapError, name: &str) -> String {
    match e {
        TapError::PermissionDenied(_) => {
            format!("; or have root create it once for your user: `ip tuntap add {name} mode tap user $USER`")
        }
        _ => String::new(),
    }
}

/// Why a backend could not be brought up (or audited at the end). Every message says what failed
/// and how to fix it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The number of cores asked for contradicts the backend.
    #[error("{backend} {why}")]
    Cores {
        /// The backend, as [`Backend`] displays it.
        backend: String,
        /// What is wrong and what to ask for instead.
        why: String,
    },
    /// A buffer pool could not be built.
    #[error(
        "cannot allocate the {what} ({buffers} buffers): {source}; free memory or serve fewer cores (--cores)"
    )]
    Pool {
        /// Which pool.
        what: &'static str,
        /// How many buffers it was to have.
        buffers: u32,
        /// What the pool said.
        #[source]
        source: PoolError,
    },
    /// A pool is smaller than what can hold its buffers at once (see the runtime's pool sizing):
    /// it could run dry and the driver could not refill its RX ring.
    #[error(
        "the {what} has {buffers} buffers, but its rings, channels, caches and bursts can hold {needed} at once \
         ({breakdown}): build it with at least {needed} buffers, or serve fewer cores (--cores)"
    )]
    PoolTooSmall {
        /// Which pool.
        what: &'static str,
        /// Its buffers.
        buffers: usize,
        /// The buffers its holders can have at once, with the RX refill reserve.
        needed: usize,
        /// Each holder's share.
        breakdown: String,
    },
    /// The model's wire could not be built.
    #[error(
        "cannot build the 82599 model's wire: {source}; the process may be out of file descriptors (`ulimit -n`)"
    )]
    Wire {
        /// What the pair said.
        #[source]
        source: BuildError,
    },
    /// The model's thread could not be started.
    #[error("cannot start the 82599 model's thread: the process is out of threads (raise `ulimit -u`)")]
    ModelThread,
    /// The TAP interface could not be opened.
    #[error("cannot open the TAP interface {name}: {source}{hint}", hint = tap_hint(source, name))]
    Tap {
        /// The interface.
        name: String,
        /// What the TAP device said (it names the fix).
        #[source]
        source: TapError,
    },
    /// AF_XDP could not be set up.
    #[error("cannot serve {iface} through AF_XDP ({mode} mode{queues}): {source}{hint}",
        mode = mode_name(*mode), hint = xdp_hint(source))]
    Xdp {
        /// The interface.
        iface: String,
        /// `, queues 0..4`, or nothing when the error came before the queues were known.
        queues: String,
        /// The mode asked for.
        mode: XdpMode,
        /// What AF_XDP said (it names the fix).
        #[source]
        source: XdpError,
    },
    /// The 82599 could not be opened (the platform layer's message names the fix).
    #[error("cannot open the 82599 at {addr}: {source}")]
    Pci {
        /// The PCI address.
        addr: String,
        /// What the platform layer said.
        #[source]
        source: platform::OpenError,
    },
    /// The driver could not bring the NIC (or the model) up.
    #[error("cannot bring up {device}: {source}")]
    Init {
        /// The NIC: `the 82599 model (sim0)`, `the 82599 at 0000:03:00.0`.
        device: String,
        /// What the driver said (it names what to check).
        #[source]
        source: InitError,
    },
    /// A pcap file could not be created.
    #[error("cannot create the pcap file {}: {source}; check that its directory exists and is writable", path.display())]
    Pcap {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// At the end, a pool's buffers were not all back.
    #[error(
        "the {pool} did not get every buffer back: {source}; drop every Port, the peer and every packet and cache \
         before finishing (if they were dropped, this is a bug: please report it with the run's setup)"
    )]
    Leak {
        /// Which pool.
        pool: &'static str,
        /// What the audit found.
        #[source]
        source: LeakError,
    },
}

/// What the caller asks of `open` beside the backend.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OpenOptions<'a> {
    /// How many cores (ports); `None`: the backend's natural count (see the module documentation).
    pub(crate) cores: Option<usize>,
    /// Record traffic into this pcap file (see the module documentation for which side).
    pub(crate) pcap: Option<&'a Path>,
    /// Pool buffers each core's service holds while it runs (`Builder::service_buffers`).
    pub(crate) service_buffers: usize,
}

/// What an open backend hands the runtime.
#[derive(Debug)]
pub(crate) struct Opened {
    /// One per core, queue i for core i.
    pub(crate) ports: Vec<Port>,
    /// The pool every port's buffers come from (one pool: the runtime's channels between ports and
    /// cores are channels of this pool, so every port must use it).
    pub(crate) pool: Pool,
    /// The server's MAC address.
    pub(crate) mac: EthernetAddress,
    /// Flow Director (model and PCI), for flow-group migration. Borrow it; `finish` reads the NIC's
    /// counters from it.
    pub(crate) steering: Option<Mutex<Ixgbe>>,
    /// The model's in-process peer (model only).
    pub(crate) peer: Option<Peer>,
    /// One line for the run's setup, e.g. `the 82599 model (sim0), 2 queues`.
    pub(crate) description: String,
    /// The model's service thread: stopped first at the end.
    sim: Option<SimThread>,
    /// The model: its counters are read at the end, then it is dropped (with the wire's end it holds).
    model: Option<Model>,
    /// The opened 82599 (PCI): closed after the driver.
    device: Option<platform::Device>,
    /// The pool of the model's wire (the peer's buffers).
    wire_pool: Option<Pool>,
    /// What was recorded where, for the end.
    pcap: Vec<String>,
    /// The name `finish` audits `pool` under.
    pool_name: &'static str,
}

/// What `Opened::finish` reports.
#[derive(Debug, Default)]
pub(crate) struct Finished {
    /// Device-level counters, one line each (the NIC's, the model's, where pcap files went).
    pub(crate) devices: Vec<String>,
    /// Every pool's audit, by name: all clean (otherwise `finish` fails).
    pub(crate) buffers: Vec<(String, Audit)>,
}

/// Opens `backend` as `options` say.
pub(crate) fn open(backend: &Backend, options: &OpenOptions<'_>) -> Result<Opened, OpenError> {
    match backend {
        Backend::Model => open_model(options),
        Backend::Tap { name, offloads } => open_tap(backend, name, *offloads, options),
        Backend::Xdp { iface, queues, mode, busy_poll } => {
            open_xdp(backend, iface, *queues, (*mode, *busy_poll), options)
        }
        Backend::Pci { addr } => open_pci(backend, addr, options),
    }
}

/// The NIC's queue count for `cores` (1 by default), within the 82599's limits.
fn nic_queues(backend: &Backend, cores: Option<usize>) -> Result<u16, OpenError> {
    let cores = cores.unwrap_or(1);
    let err = |why: String| OpenError::Cores { backend: backend.to_string(), why };
    if cores == 0 {
        return Err(err("needs at least 1 core (--cores 1), not 0".into()));
    }
    u16::try_from(cores).ok().filter(|&n| n <= MAX_QUEUES).ok_or_else(|| {
        err(format!("has at most {MAX_QUEUES} queues, one per core: serve it with --cores {MAX_QUEUES} or fewer, not {cores}"))
    })
}

/// How a pool's buffers are laid out and mapped.
#[derive(Clone, Copy, Debug)]
enum Buffers {
    /// The default data room (one frame), mapped resident at build, on pages as `HugePages` says.
    Frames(HugePages),
    /// Room for a 64 KiB super-segment (a TAP with offloads), on normal pages made resident as
    /// buffers are first used: a TAP holds none in rings, so the few in use at a time (and the
    /// about one page per buffer of a service's content) are what the process touches.
    SuperSegments,
}

fn pool(what: &'static str, buffers: usize, layout: Buffers) -> Result<Pool, OpenError> {
    let n = u32::try_from(buffers).unwrap_or(u32::MAX);
    let builder = match layout {
        Buffers::Frames(hugepages) => Pool::builder(n).hugepages(hugepages),
        Buffers::SuperSegments => {
            Pool::builder(n).data_room(OFFLOAD_DATA_ROOM).populate(false).hugepages(HugePages::Never)
        }
    };
    builder.build().map_err(|source| OpenError::Pool { what, buffers: n, source })
}

/// The pool of `cores` queues with `rings` each: as large as everything that can hold its buffers
/// at once ([`PoolDemand`]), checked once built.
fn sized_pool(
    what: &'static str,
    (cores, service): (usize, usize),
    rings: Rings,
    layout: Buffers,
) -> Result<Pool, OpenError> {
    let total = PoolDemand::new(cores, rings).with_services(cores, service).total();
    checked(pool(what, total, layout)?, what, (cores, service), rings)
}

/// `pool`, if nothing that can hold its buffers at once can exhaust it.
fn checked(
    pool: Pool,
    what: &'static str,
    (cores, service): (usize, usize),
    rings: Rings,
) -> Result<Pool, OpenError> {
    match PoolDemand::check(cores, rings, service, &pool) {
        Ok(()) => Ok(pool),
        Err(demand) => Err(OpenError::PoolTooSmall {
            what,
            buffers: pool.buffers() as usize,
            needed: demand.total(),
            breakdown: demand.to_string(),
        }),
    }
}

fn pcap_port(port: Port, path: &Path) -> Result<Port, OpenError> {
    let w =
        PcapWriter::create(port, path).map_err(|source| OpenError::Pcap { path: path.to_owned(), source })?;
    Ok(Port::Pcap(Box::new(w)))
}

/// The pcap file of port `i` of `n`: `PATH` for a single port, `PATH.qI` for several.
fn pcap_path(path: &Path, i: usize, n: usize) -> PathBuf {
    if n == 1 {
        return path.to_owned();
    }
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".q{i}"));
    PathBuf::from(p)
}

/// Wraps each port in a pcap writer when `pcap` is given; returns the ports and a line saying where.
fn record(ports: Vec<Port>, pcap: Option<&Path>) -> Result<(Vec<Port>, Vec<String>), OpenError> {
    let Some(path) = pcap else {
        return Ok((ports, Vec::new()));
    };
    let n = ports.len();
    let ports = ports
        .into_iter()
        .enumerate()
        .map(|(i, port)| pcap_port(port, &pcap_path(path, i, n)))
        .collect::<Result<Vec<_>, _>>()?;
    let line = if n == 1 {
        format!("pcap: recorded to {}", path.display())
    } else {
        format!("pcap: queue i recorded to {}.qI", path.display())
    };
    Ok((ports, vec![line]))
}

fn open_model(options: &OpenOptions<'_>) -> Result<Opened, OpenError> {
    let queues = nic_queues(&Backend::Model, options.cores)?;
    let wire_pool = pool("model's wire pool", 8192, Buffers::Frames(HugePages::Never))?;
    let (port, wire) =
        Pair::builder(&wire_pool).capacity(2048).build().map_err(|source| OpenError::Wire { source })?;
    let model = Model::new(SimConfig {
        wire: Wire::Device(Box::new(port), wire_pool.clone()),
        ..SimConfig::default()
    });
    let sim = model.spawn();
    if !sim.is_running() {
        return Err(OpenError::ModelThread);
    }
    let config = NicConfig { queues, rx_ring: 512, tx_ring: 512, ..NicConfig::default() };
    let rings = Rings::Ixgbe { rx: config.rx_ring.into(), tx: config.tx_ring.into() };
    let pool = sized_pool(
        "driver pool",
        (queues.into(), options.service_buffers),
        rings,
        Buffers::Frames(HugePages::Prefer),
    )?;
    let (nic, nic_queues) = Ixgbe::init("sim0", model.mmio(), model.dma(), &pool, config)
        .map_err(|source| OpenError::Init { device: "the 82599 model (sim0)".into(), source })?;
    let mut description = format!("the 82599 model (sim0), {queues} queue{}", plural(queues.into()));
    let mut pcap = Vec::new();
    let peer_port = match options.pcap {
        Some(path) => {
            description.push_str(&format!(", the peer's end recorded to {}", path.display()));
            pcap.push(format!("pcap: the peer's end of the wire recorded to {}", path.display()));
            pcap_port(Port::Pair(wire), path)?
        }
        None => Port::Pair(wire),
    };
    let mac = EthernetAddress(nic.mac().0);
    tracing::info!(queues, mac = %nic.mac(), peer = %peer_port.info().mac, "opened the 82599 model");
    Ok(Opened {
        ports: nic_queues.into_iter().map(Port::Ixgbe).collect(),
        pool,
        mac,
        steering: Some(Mutex::new(nic)),
        peer: Some(Peer::new(peer_port, wire_pool.clone())),
        description,
        sim: Some(sim),
        model: Some(model),
        device: None,
        wire_pool: Some(wire_pool),
        pcap,
        pool_name: "driver pool",
    })
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn open_tap(
    backend: &Backend,
    name: &str,
    offloads: bool,
    options: &OpenOptions<'_>,
) -> Result<Opened, OpenError> {
    if let Some(cores) = options.cores
        && cores != 1
    {
        return Err(OpenError::Cores {
            backend: backend.to_string(),
            why: format!("has one queue: serve it with 1 core (--cores 1), not {cores}"),
        });
    }
    let tap = Tap::open_with(name, TapOptions { offloads })
        .map_err(|source| OpenError::Tap { name: name.to_owned(), source })?;
    let mac = EthernetAddress(tap.info().mac.0);
    let mut description = format!("TAP {}", tap.name());
    if offloads {
        description.push_str(" with offloads (TSO, partial checksums, coalesced receive)");
    }
    tracing::info!(iface = tap.name(), mac = %tap.info().mac, link = ?tap.link(), offloads, "opened the TAP interface");
    let buffers = if offloads { Buffers::SuperSegments } else { Buffers::Frames(HugePages::Never) };
    let pool = sized_pool("pool", (1, options.service_buffers), Rings::Tap, buffers)?;
    let (ports, pcap) = record(vec![Port::Tap(tap)], options.pcap)?;
    if let Some(path) = options.pcap {
        description.push_str(&format!(", recorded to {}", path.display()));
    }
    Ok(Opened::kernel(ports, pool, mac, description, pcap))
}

fn open_xdp(
    backend: &Backend,
    iface: &str,
    queues: Option<u16>,
    (mode, busy_poll): (XdpMode, Option<BusyPoll>),
    options: &OpenOptions<'_>,
) -> Result<Opened, OpenError> {
    let xdp_err =
        |queues: String| move |source| OpenError::Xdp { iface: iface.to_owned(), queues, mode, source };
    let available = xdp::rx_queues(iface).map_err(xdp_err(String::new()))?;
    let cores_err = |why: String| OpenError::Cores { backend: backend.to_string(), why };
    let n = match queues {
        None => u16::try_from(available).unwrap_or(u16::MAX),
        Some(0) => {
            return Err(cores_err("cannot serve 0 queues: ask for at least 1 (--xdp-queues 1)".into()));
        }
        Some(q) if u32::from(q) > available => {
            return Err(cores_err(format!(
                "has {available} RX queue{}: serve --xdp-queues {available} or fewer, not {q} (`ethtool -L {iface} combined N` adds queues to a NIC)",
                plural(available as usize)
            )));
        }
        Some(q) => q,
    };
    if let Some(cores) = options.cores
        && cores != usize::from(n)
    {
        let asked = if queues.is_some() { "the" } else { "all its" };
        return Err(cores_err(format!(
            "serves {asked} {n} queue{} (0..{n}), one core each, but {cores} core{} were asked for: \
             ask for {n} cores (--cores {n}), or serve {cores} queues (--xdp-queues {cores}, `queues: Some({cores})`)",
            plural(n.into()),
            plural(cores)
        )));
    }
    let range = if n == 1 { ", queue 0".to_owned() } else { format!(", queues 0..{n}") };
    let ring = xdp::DEFAULT_RING_SIZE as usize;
    let pool = sized_pool(
        "pool",
        (n.into(), options.service_buffers),
        Rings::Xdp { fill: ring, ring },
        Buffers::Frames(HugePages::Never),
    )?;
    let dev = AfXdp::builder(iface)
        .queues(0, n)
        .mode(mode)
        .busy_poll(busy_poll)
        .open(&pool)
        .map_err(xdp_err(range.clone()))?;
    let mac = EthernetAddress(dev.info().mac.0);
    let copy = if dev.is_zero_copy() { "zero-copy" } else { "copy mode" };
    let mut description = format!("AF_XDP on {iface}{range} ({} XDP, {copy})", mode_name(dev.mode()));
    tracing::info!(
        iface, queues = n, mode = mode_name(dev.mode()), zero_copy = dev.is_zero_copy(), mac = %dev.info().mac,
        "opened AF_XDP"
    );
    let ports: Vec<Port> = dev.into_queues().into_iter().map(Port::Xdp).collect();
    let (ports, pcap) = record(ports, options.pcap)?;
    if let Some(line) = pcap.first() {
        description.push_str(&format!(", {}", line.trim_start_matches("pcap: ")));
    }
    Ok(Opened::kernel(ports, pool, mac, description, pcap))
}

fn open_pci(backend: &Backend, addr: &str, options: &OpenOptions<'_>) -> Result<Opened, OpenError> {
    let queues = nic_queues(backend, options.cores)?;
    let device = platform::open(addr).map_err(|source| OpenError::Pci { addr: addr.to_owned(), source })?;
    match device.backend() {
        PlatformBackend::Vfio => {}
        unsafe_backend => tracing::warn!(
            pci = addr, backend = ?unsafe_backend,
            "no IOMMU protects memory from this NIC: it can DMA anywhere (unsafe for production)"
        ),
    }
    let config = NicConfig { queues, ..NicConfig::default() };
    let rings = Rings::Ixgbe { rx: config.rx_ring.into(), tx: config.tx_ring.into() };
    let pool = sized_pool(
        "driver pool",
        (queues.into(), options.service_buffers),
        rings,
        Buffers::Frames(HugePages::Prefer),
    )?;
    let (nic, nic_queues) = Ixgbe::init(addr, device.bar0(), device.dma(), &pool, config)
        .map_err(|source| OpenError::Init { device: format!("the 82599 at {addr}"), source })?;
    let mac = EthernetAddress(nic.mac().0);
    let mut description =
        format!("the 82599 at {addr} ({}), {queues} queue{}", device.variant(), plural(queues.into()));
    tracing::info!(pci = addr, variant = device.variant(), queues, mac = %nic.mac(), link = ?nic.link(), "opened the 82599");
    let ports: Vec<Port> = nic_queues.into_iter().map(Port::Ixgbe).collect();
    // Each queue into PATH.qN, even with one queue (as the echo example always did).
    let (ports, pcap) = match options.pcap {
        Some(path) => {
            let ports = ports
                .into_iter()
                .enumerate()
                .map(|(i, p)| pcap_port(p, &pcap_path(path, i, usize::MAX)))
                .collect::<Result<Vec<_>, _>>()?;
            description.push_str(&format!(", queue i recorded to {}.qI", path.display()));
            (ports, vec![format!("pcap: queue i recorded to {}.qI", path.display())])
        }
        None => (ports, Vec::new()),
    };
    Ok(Opened {
        ports,
        pool,
        mac,
        steering: Some(Mutex::new(nic)),
        peer: None,
        description,
        sim: None,
        model: None,
        device: Some(device),
        wire_pool: None,
        pcap,
        pool_name: "driver pool",
    })
}

/// The NIC's counters, one line.
fn nic_line(nic: &mut Ixgbe) -> String {
    let s = nic.stats();
    let queues = usize::from(nic.config().queues).min(s.queue_rx_packets.len());
    let per_queue: Vec<String> = (0..queues).map(|q| format!("q{q} {}", s.queue_rx_packets[q])).collect();
    format!(
        "nic {}: {} frames in ({}), {} out, {} missed, Flow Director {} matches, {} misses",
        nic.name(),
        s.rx_good_packets,
        per_queue.join(", "),
        s.tx_good_packets,
        s.missed_packets,
        s.fdir_matches,
        s.fdir_misses
    )
}

/// The model's counters, one line.
fn model_line(m: &SimStats) -> String {
    format!(
        "model: {} frames from the wire, {} into rings, {} dropped for lack of descriptors, {} sent, {} DMA faults",
        m.rx_wire, m.rx_delivered, m.rx_dropped_no_desc, m.tx_sent, m.dma_faults
    )
}

fn audit(name: &'static str, pool: &Pool) -> Result<(String, Audit), OpenError> {
    pool.check_leaks().map_err(|source| OpenError::Leak { pool: name, source })?;
    Ok((name.to_owned(), pool.audit()))
}

impl Opened {
    /// A backend the Linux kernel drives (TAP, AF_XDP): its ports and their pool, nothing else to
    /// steer, run or close.
    fn kernel(
        ports: Vec<Port>,
        pool: Pool,
        mac: EthernetAddress,
        description: String,
        pcap: Vec<String>,
    ) -> Self {
        Self {
            ports,
            pool,
            mac,
            steering: None,
            peer: None,
            description,
            sim: None,
            model: None,
            device: None,
            wire_pool: None,
            pcap,
            pool_name: "pool",
        }
    }

    /// Takes the backend down and audits it; called after every [`Port`] (and the peer's device)
    /// has been dropped (any still here are dropped first). Stops the model, reads the device-level
    /// counters (the NIC's and the model's, one line each), releases the NIC, and checks that every
    /// pool has every buffer back exactly once.
    ///
    /// # Errors
    ///
    /// [`OpenError::Leak`], naming the pool and what is missing.
    pub(crate) fn finish(self) -> Result<Finished, OpenError> {
        let Self { ports, pool, steering, peer, sim, model, device, wire_pool, pcap, pool_name, .. } = self;
        drop(ports);
        drop(peer);
        if let Some(sim) = sim {
            sim.stop();
        }
        let mut finished = Finished::default();
        if let Some(nic) = steering {
            let mut nic = nic.into_inner().unwrap_or_else(PoisonError::into_inner);
            finished.devices.push(nic_line(&mut nic));
        }
        if let Some(model) = model {
            finished.devices.push(model_line(&model.stats()));
        }
        finished.devices.extend(pcap);
        drop(device);
        finished.buffers.push(audit(pool_name, &pool)?);
        if let Some(wire_pool) = wire_pool {
            finished.buffers.push(audit("wire pool", &wire_pool)?);
        }
        Ok(finished)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use netchannel::dev::PacketBatch;
    #[cfg(feature = "netns-tests")]
    use netns_test::ip;

    use super::*;

    fn options(cores: Option<usize>) -> OpenOptions<'static> {
        OpenOptions { cores, pcap: None, service_buffers: 0 }
    }

    fn temp_dir(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("netchannel-runtime-{what}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Everything but the ports, the peer and the pool's caches is dropped by `finish`; it must
    /// find every buffer back.
    fn finish_clean(opened: Opened, pools: usize) -> Finished {
        let finished = opened.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(finished.buffers.len(), pools, "{finished:?}");
        for (name, audit) in &finished.buffers {
            assert_eq!(audit.outstanding, 0, "{name}: {audit:?}");
        }
        finished
    }

    #[test]
    fn a_pool_too_small_for_its_holders_is_refused_with_the_fix() {
        let rings = Rings::Ixgbe { rx: 512, tx: 512 };
        let small = Pool::builder(20_480).hugepages(HugePages::Never).build().unwrap();
        let err = checked(small, "driver pool", (4, 0), rings).unwrap_err().to_string();
        assert!(err.starts_with("the driver pool has 20480 buffers"), "{err}");
        assert!(err.contains("24576 in channels"), "{err}");
        assert!(
            err.contains("build it with at least 31360 buffers, or serve fewer cores (--cores)"),
            "{err}"
        );
        assert!(sized_pool("driver pool", (4, 0), rings, Buffers::Frames(HugePages::Never)).is_ok());
    }

    #[test]
    fn backends_display_and_build() {
        assert_eq!(Backend::default(), Backend::Model);
        assert_eq!(Backend::Model.to_string(), "the 82599 model");
        assert_eq!(Backend::tap("tap0").to_string(), "TAP tap0");
        assert_eq!(Backend::xdp("veth0").to_string(), "AF_XDP on veth0");
        assert_eq!(
            Backend::xdp("veth0"),
            Backend::Xdp { iface: "veth0".into(), queues: None, mode: XdpMode::Auto, busy_poll: None }
        );
        assert_eq!(Backend::pci("0000:03:00.0").to_string(), "the 82599 at 0000:03:00.0");
        assert_eq!(pcap_path(Path::new("/x/a.pcap"), 0, 1), Path::new("/x/a.pcap"));
        assert_eq!(pcap_path(Path::new("/x/a.pcap"), 2, 4), Path::new("/x/a.pcap.q2"));
    }

    /// The model comes up with 1 and 3 queues; a frame the peer sends reaches a port; `finish`
    /// reads the NIC's and the model's counters and finds every buffer of both pools.
    #[test]
    fn the_model_opens_with_1_and_3_queues_and_audits_clean() {
        for cores in [1, 3] {
            let mut opened = open(&Backend::Model, &options(Some(cores))).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(opened.ports.len(), cores);
            assert!(opened.ports.iter().all(|p| p.kind() == "82599 queue"), "{:?}", opened.ports);
            let plural = if cores == 1 { "" } else { "s" };
            assert_eq!(opened.description, format!("the 82599 model (sim0), {cores} queue{plural}"));
            assert!(opened.steering.is_some());
            assert_eq!(opened.mac, EthernetAddress(SimConfig::default().mac.0));

            // The peer broadcasts one frame; it arrives on one of the ports.
            let mut peer = opened.peer.take().expect("the model has a peer");
            assert_eq!(peer.device().kind(), "pair");
            let peer_cache = peer.pool().cache();
            let mut batch = PacketBatch::with_capacity(32);
            let mut frame = peer_cache.alloc().unwrap();
            let mut bytes = vec![0xff; 6];
            bytes.extend_from_slice(&peer.mac().0);
            bytes.extend_from_slice(&[0x08, 0x06]);
            bytes.resize(60, 0);
            frame.extend_from_slice(&bytes).unwrap();
            batch.push(frame).unwrap();
            assert_eq!(peer.device_mut().tx_burst(0, &mut batch).unwrap(), 1);
            let cache = opened.pool.cache();
            let mut rx = PacketBatch::with_capacity(32);
            let deadline = Instant::now() + Duration::from_secs(10);
            let arrived = 'poll: loop {
                for port in &mut opened.ports {
                    if port.rx_burst(0, &cache, &mut rx).unwrap() > 0 {
                        break 'poll rx.as_slice()[0].data().to_vec();
                    }
                }
                assert!(Instant::now() < deadline, "the peer's frame never arrived");
                std::thread::sleep(Duration::from_millis(1));
            };
            assert_eq!(arrived, bytes);
            drop(rx);
            drop(batch);
            drop(cache);
            drop(peer_cache);
            drop(peer);
            opened.ports.clear();

            let finished = finish_clean(opened, 2);
            assert_eq!(finished.buffers[0].0, "driver pool");
            assert_eq!(finished.buffers[1].0, "wire pool");
            assert!(finished.devices[0].starts_with("nic sim0: 1 frames in"), "{:?}", finished.devices);
            assert!(
                finished.devices[1].starts_with("model: 1 frames from the wire"),
                "{:?}",
                finished.devices
            );
        }
    }

    #[test]
    fn the_models_peer_end_is_recorded_and_leaks_are_named() {
        let dir = temp_dir("model-pcap");
        let path = dir.join("wire.pcap");
        let opened =
            open(&Backend::Model, &OpenOptions { cores: Some(2), pcap: Some(&path), service_buffers: 0 })
                .unwrap();
        assert_eq!(opened.peer.as_ref().map(|p| p.device().kind()), Some("pcap"));
        assert!(opened.description.ends_with(&format!("recorded to {}", path.display())));
        assert!(path.exists());
        finish_clean(opened, 2);

        // A cache still alive at the end: the audit names the pool and says what to drop.
        let opened = open(&Backend::Model, &options(None)).unwrap();
        assert_eq!(opened.ports.len(), 1);
        let cache = opened.pool.cache();
        let e = opened.finish().unwrap_err();
        assert!(matches!(e, OpenError::Leak { pool: "driver pool", .. }), "{e}");
        assert!(e.to_string().contains("drop every Port"), "{e}");
        drop(cache);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn core_counts_the_nic_cannot_have_are_refused() {
        let e = open(&Backend::Model, &options(Some(0))).unwrap_err();
        assert_eq!(e.to_string(), "the 82599 model needs at least 1 core (--cores 1), not 0");
        let e = open(&Backend::pci("0000:03:00.0"), &options(Some(65))).unwrap_err();
        assert!(e.to_string().contains("--cores 64 or fewer, not 65"), "{e}");
    }

    #[test]
    fn a_bogus_pci_address_names_the_fix() {
        let e = open(&Backend::pci("0000:ff:1f.7"), &options(None)).unwrap_err();
        assert!(matches!(e, OpenError::Pci { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.starts_with("cannot open the 82599 at 0000:ff:1f.7: "), "{msg}");
        assert!(msg.contains("lspci"), "{msg}");
        let e = open(&Backend::pci("03:00"), &options(None)).unwrap_err();
        assert!(e.to_string().starts_with("cannot open the 82599 at 03:00: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
    }

    /// Opens a TAP backend, retrying for up to two seconds while the kernel says the interface is
    /// busy. Closing a TAP detaches it only when the last reference to its file goes, and a test
    /// running beside this one that starts `ip` holds a copy of every descriptor of the process from
    /// its fork until its exec (`O_CLOEXEC` closes it only then): a reopen that lands in that window
    /// gets `EBUSY` for an interface this test has just released.
    #[cfg(feature = "netns-tests")]
    fn open_retrying_busy(backend: &Backend, options: &OpenOptions<'_>) -> Result<Opened, OpenError> {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match open(backend, options) {
                Err(OpenError::Tap { source: TapError::Busy { source, .. }, .. })
                    if source.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                result => return result,
            }
        }
    }

    #[cfg(feature = "netns-tests")]
    #[test]
    fn tap_opens_existing_and_new_interfaces_and_refuses_what_it_cannot_serve() {
        netns_test::in_private_namespace(|| {
            ip(&["tuntap", "add", "ncrt0", "mode", "tap"])?;
            let opened =
                open_retrying_busy(&Backend::tap("ncrt0"), &options(None)).map_err(|e| e.to_string())?;
            assert_eq!(opened.ports.len(), 1);
            assert_eq!(opened.ports[0].kind(), "TAP");
            assert_eq!(
                opened.description,
                "TAP ncrt0 with offloads (TSO, partial checksums, coalesced receive)"
            );
            assert!(opened.ports[0].info().offloads.tx_tso_max > 0, "opened with offloads");
            assert_eq!(opened.pool.data_room(), OFFLOAD_DATA_ROOM, "buffers that hold a super-segment");
            finish_clean(opened, 1);
            // Without offloads: plain frames, the usual buffers.
            let opened = open_retrying_busy(&Backend::tap_without_offloads("ncrt0"), &options(None))
                .map_err(|e| e.to_string())?;
            assert_eq!(opened.description, "TAP ncrt0");
            assert_eq!(opened.ports[0].info().offloads, netchannel::dev::DeviceOffloads::NONE);
            assert!(opened.peer.is_none() && opened.steering.is_none());
            assert_eq!(opened.mac, EthernetAddress(opened.ports[0].info().mac.0));
            let finished = finish_clean(opened, 1);
            assert_eq!(finished.buffers[0].0, "pool");

            // A name no interface has yet: the TAP is created.
            let opened = open(&Backend::tap("ncrt1"), &options(Some(1))).map_err(|e| e.to_string())?;
            assert_eq!(opened.ports[0].info().name, "ncrt1");
            finish_clean(opened, 1);

            // Recorded.
            let dir = temp_dir("tap-pcap");
            let path = dir.join("tap.pcap");
            let opened = open_retrying_busy(
                &Backend::tap("ncrt0"),
                &OpenOptions { cores: None, pcap: Some(&path), service_buffers: 0 },
            )
            .map_err(|e| e.to_string())?;
            assert_eq!(opened.ports[0].kind(), "pcap");
            finish_clean(opened, 1);
            assert!(path.exists());
            std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;

            // One queue, one core.
            let e = open(&Backend::tap("ncrt0"), &options(Some(4))).unwrap_err();
            assert_eq!(e.to_string(), "TAP ncrt0 has one queue: serve it with 1 core (--cores 1), not 4");
            // An interface that is not a TAP.
            let e = open(&Backend::tap("lo"), &options(None)).unwrap_err();
            assert!(matches!(e, OpenError::Tap { .. }), "{e}");
            let msg = e.to_string();
            assert!(msg.starts_with("cannot open the TAP interface lo: "), "{msg}");
            assert!(msg.contains("ip link del lo"), "{msg}");
            Ok(())
        });
    }

    #[cfg(feature = "netns-tests")]
    /// Runs `body` in a private namespace holding a veth pair with 4 queues each way, the end we
    /// serve being `ncrtx0`.
    fn with_veth(body: impl FnOnce() -> Result<(), String> + Send + 'static) {
        netns_test::in_private_namespace(|| {
            ip(&[
                "link",
                "add",
                "ncrtx0",
                "numrxqueues",
                "4",
                "numtxqueues",
                "4",
                "type",
                "veth",
                "peer",
                "name",
                "ncrtx1",
                "numrxqueues",
                "4",
                "numtxqueues",
                "4",
            ])?;
            ip(&["link", "set", "ncrtx0", "up"])?;
            ip(&["link", "set", "ncrtx1", "up"])?;
            body()
        });
    }

    #[cfg(feature = "netns-tests")]
    /// Missing kernel support is a skip, anything else a failure.
    fn xdp_open(backend: &Backend, options: &OpenOptions<'_>) -> Result<Opened, String> {
        open(backend, options).map_err(|e| match &e {
            OpenError::Xdp {
                source: XdpError::Unsupported { .. } | XdpError::PermissionDenied { .. },
                ..
            } => format!("{}{e}", netns_test::SKIP),
            _ => e.to_string(),
        })
    }

    #[cfg(feature = "netns-tests")]
    #[test]
    fn xdp_opens_one_port_per_queue() {
        with_veth(|| {
            let opened = xdp_open(&Backend::xdp("ncrtx0"), &options(None))?;
            assert_eq!(opened.ports.len(), 4);
            for (i, port) in opened.ports.iter().enumerate() {
                assert_eq!(port.kind(), "AF_XDP");
                assert_eq!((port.info().name, port.info().queues), (format!("ncrtx0:{i}"), 1));
            }
            assert_eq!(opened.description, "AF_XDP on ncrtx0, queues 0..4 (native XDP, copy mode)");
            finish_clean(opened, 1);

            // The same, with the core count that matches.
            let opened = xdp_open(&Backend::xdp("ncrtx0"), &options(Some(4)))?;
            finish_clean(opened, 1);

            let two = Backend::Xdp {
                iface: "ncrtx0".into(),
                queues: Some(2),
                mode: XdpMode::Generic,
                busy_poll: None,
            };
            let opened = xdp_open(&two, &options(Some(2)))?;
            assert_eq!(opened.ports.len(), 2);
            assert_eq!(opened.description, "AF_XDP on ncrtx0, queues 0..2 (generic XDP, copy mode)");
            finish_clean(opened, 1);

            // Several ports, several files.
            let dir = temp_dir("xdp-pcap");
            let path = dir.join("x.pcap");
            let opened = xdp_open(&two, &OpenOptions { cores: None, pcap: Some(&path), service_buffers: 0 })?;
            assert!(opened.ports.iter().all(|p| p.kind() == "pcap"));
            finish_clean(opened, 1);
            assert!(dir.join("x.pcap.q0").exists() && dir.join("x.pcap.q1").exists());
            std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
            Ok(())
        });
    }

    #[cfg(feature = "netns-tests")]
    #[test]
    fn xdp_errors_name_the_interface_and_the_fix() {
        with_veth(|| {
            let e = open(&Backend::xdp("ncnope0"), &options(None)).unwrap_err();
            assert!(matches!(e, OpenError::Xdp { source: XdpError::NoSuchInterface { .. }, .. }), "{e}");
            assert!(e.to_string().contains("ncnope0"), "{e}");
            assert!(e.to_string().contains("ip link"), "{e}");

            let e = open(&Backend::xdp("ncrtx0"), &options(Some(2))).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.starts_with(
                    "AF_XDP on ncrtx0 serves all its 4 queues (0..4), one core each, but 2 cores"
                ),
                "{msg}"
            );
            assert!(msg.contains("--cores 4") && msg.contains("--xdp-queues 2"), "{msg}");

            let eight = Backend::Xdp {
                iface: "ncrtx0".into(),
                queues: Some(8),
                mode: XdpMode::Auto,
                busy_poll: None,
            };
            let e = open(&eight, &options(None)).unwrap_err();
            assert!(e.to_string().contains("has 4 RX queues: serve --xdp-queues 4 or fewer, not 8"), "{e}");

            // Loopback has no native XDP: the hint is the command-line option.
            let lo =
                Backend::Xdp { iface: "lo".into(), queues: Some(1), mode: XdpMode::Native, busy_poll: None };
            match open(&lo, &options(None)) {
                Err(e @ OpenError::Xdp { source: XdpError::NativeUnsupported { .. }, .. }) => {
                    assert!(e.to_string().contains("--xdp-mode generic (or auto)"), "{e}");
                    assert!(
                        e.to_string().starts_with("cannot serve lo through AF_XDP (native mode, queue 0): "),
                        "{e}"
                    );
                }
                Err(e @ OpenError::Xdp { source: XdpError::Unsupported { .. }, .. }) => {
                    return Err(format!("{}{e}", netns_test::SKIP));
                }
                other => return Err(format!("expected NativeUnsupported, got {other:?}")),
            }
            Ok(())
        });
    }
}
