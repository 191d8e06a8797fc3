//! What every example built on [`netchannel_runtime`] shares on its command line: the backend, the
//! cores, the address and the rest of the runtime's settings ([`ServeArgs`], flattened into each
//! example's clap options), the checks clap cannot make ([`Validate`]), logging to stderr
//! ([`init_logging`]), the signals a long run answers ([`Signals`]: Ctrl-C stops it, `SIGUSR1`
//! prints every counter) and an example's whole `main` ([`main`]).
//!
//! ```
//! use clap::Parser;
//! use netchannels::cli::ServeArgs;
//!
//! /// A service on the runtime.
//! #[derive(Parser)]
//! struct Options {
//!     #[command(flatten)]
//!     serve: ServeArgs,
//!     /// The port.
//!     #[arg(long, default_value_t = 7)]
//!     port: u16,
//! }
//!
//! let o = Options::try_parse_from(["svc", "--tap", "tap0", "--ip=10.1.0.2/16", "--port", "8"])?;
//! o.serve.validate()?;
//! assert_eq!((o.serve.tap.as_deref(), o.serve.ip().prefix_len(), o.port), (Some("tap0"), 16, 8));
//! let runtime = o.serve.builder(); // .build()? opens the TAP
//! # drop(runtime);
//! # Ok::<(), clap::Error>(())
//! ```

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::error::ErrorKind;
use netchannel::dev::XdpMode;
use netchannel::dev::xdp::BusyPoll;
use netchannel_runtime::{Backend, Builder, DEFAULT_BACKLOG, Placement, Runtime};
use tcp_lib::wire::{Ipv4Cidr, Ipv6Cidr};

use crate::util::tcp_tuning;

/// The runtime's options: which backend (the 82599 model with its in-process peer when none of
/// `--tap`, `--xdp` and `--pci` is given), how many cores, the address, the placement, a pcap
/// file, the accept backlog and how long to run.
///
/// Flatten it into an example's options with `#[command(flatten)]`; call
/// [`validate`](Self::validate) after parsing (for what clap cannot say: `--cores` against
/// `--queues`), and [`builder`](Self::builder) for the runtime.
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct ServeArgs {
    /// Serve the Linux kernel through the TAP interface NAME (created if missing; needs
    /// CAP_NET_ADMIN); one core
    #[arg(long, value_name = "NAME", conflicts_with_all = ["xdp", "pci"], help_heading = "Backend (default: the 82599 model with an in-process client)")]
    pub tap: Option<String>,

    /// Open the TAP without offloads: one Ethernet frame per read and write, every checksum
    /// computed (by default the TAP sends TSO super-segments with partial checksums and takes the
    /// kernel's coalesced segments)
    #[arg(
        long,
        requires = "tap",
        help_heading = "Backend (default: the 82599 model with an in-process client)"
    )]
    pub tap_no_offloads: bool,

    /// Serve the Linux interface IFACE through AF_XDP: all its RX queues, one core each, unless
    /// --queues N (needs root, or CAP_NET_ADMIN + CAP_NET_RAW + CAP_BPF)
    #[arg(long, value_name = "IFACE", value_parser = interface, conflicts_with_all = ["tap", "pci"], help_heading = "Backend (default: the 82599 model with an in-process client)")]
    pub xdp: Option<String>,

    /// Where --xdp's program runs: generic, native, or auto (native where the driver has it)
    #[arg(
        long,
        value_name = "MODE",
        requires = "xdp",
        value_parser = PossibleValuesParser::new(["generic", "native", "auto"]).map(|m| xdp_mode(&m)),
        help_heading = "Backend (default: the 82599 model with an in-process client)"
    )]
    pub xdp_mode: Option<XdpMode>,

    /// Busy-poll --xdp's sockets: SO_PREFER_BUSY_POLL, SO_BUSY_POLL=USECS, SO_BUSY_POLL_BUDGET=64
    /// (Linux 5.11+; needs CAP_NET_ADMIN)
    #[arg(
        long,
        value_name = "USECS",
        requires = "xdp",
        help_heading = "Backend (default: the 82599 model with an in-process client)"
    )]
    pub xdp_busy_poll: Option<u32>,

    /// Serve --xdp's queues 0..N only (one core each)
    #[arg(long, value_name = "N", requires = "xdp", value_parser = clap::value_parser!(u16).range(1..), help_heading = "Backend (default: the 82599 model with an in-process client)")]
    pub queues: Option<u16>,

    /// Serve a real 82599 bound to vfio-pci at PCI address ADDR (0000:03:00.0)
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["tap", "xdp"], help_heading = "Backend (default: the 82599 model with an in-process client)")]
    pub pci: Option<String>,

    /// The server's address and prefix, IPv4 or IPv6, at most once per family (on the model, the
    /// client takes another host of the IPv4 prefix). An IPv6 address turns IPv6 on beside IPv4
    #[arg(long = "ip", value_name = "A/N", default_value = "10.0.0.2/24", value_parser = ip_cidr, action = clap::ArgAction::Append)]
    pub ips: Vec<IpCidr>,

    /// Cores, one queue each (default: 1; with --xdp, one per queue served). A TAP has one queue
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64).map(usize::from))]
    pub cores: Option<usize>,

    /// same: each core's channelizer on the core's thread; split: on a thread of its own
    #[arg(long, value_name = "P", default_value = "same", value_parser = PossibleValuesParser::new(["same", "split"]).try_map(|p| p.parse::<Placement>()))]
    pub placement: Placement,

    /// Record the traffic to FILE (pcap): the model's wire, or each queue (FILE.qN when several)
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,

    /// Each port's accept backlog over all cores (split evenly; a core is busy, and the others
    /// steal from it, when its share is 75% full)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_BACKLOG, value_parser = backlog)]
    pub backlog: usize,

    /// Run this long (seconds, a fraction allowed) instead of until done or Ctrl-C
    #[arg(long, value_name = "S", value_parser = seconds, allow_negative_numbers = true)]
    pub duration: Option<Duration>,
}

impl Default for ServeArgs {
    /// What no option gives: the model, 10.0.0.2/24, the `same` placement, the default backlog.
    fn default() -> Self {
        Self {
            tap: None,
            tap_no_offloads: false,
            xdp: None,
            xdp_mode: None,
            xdp_busy_poll: None,
            queues: None,
            pci: None,
            ips: vec![IpCidr::V4(netchannel_runtime::DEFAULT_IP)],
            cores: None,
            placement: Placement::Same,
            pcap: None,
            backlog: DEFAULT_BACKLOG,
            duration: None,
        }
    }
}

fn xdp_mode(name: &str) -> XdpMode {
    match name {
        "generic" => XdpMode::Generic,
        "native" => XdpMode::Native,
        _ => XdpMode::Auto,
    }
}

/// A Linux interface name (1 to 15 bytes, no `/`, `:` or white space); `IFACE:QUEUE`, the old
/// one-queue form, says what to give instead.
fn interface(text: &str) -> Result<String, String> {
    if let Some((iface, _queue)) = text.split_once(':') {
        return Err(format!(
            "{text:?}: AF_XDP serves an interface's queues from queue 0, one core each: give `--xdp {iface}` \
             (every queue) or `--xdp {iface} --queues N` (queues 0..N; `--queues 1` for queue 0 alone)"
        ));
    }
    if text.is_empty() || text.len() > 15 || text.contains('/') || text.contains(char::is_whitespace) {
        return Err(format!("{text:?} is not an interface name (1 to 15 bytes, no '/' or spaces)"));
    }
    Ok(text.to_owned())
}

/// A backlog in `1..=1 << 20`.
/// An address and prefix of either family (`--ip`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpCidr {
    /// An IPv4 address and prefix.
    V4(Ipv4Cidr),
    /// An IPv6 address and prefix.
    V6(Ipv6Cidr),
}

/// `--ip`: `A.B.C.D/N` or an IPv6 `ADDR/N`.
fn ip_cidr(text: &str) -> Result<IpCidr, String> {
    if text.contains(':') {
        text.parse::<Ipv6Cidr>().map(IpCidr::V6).map_err(|e| e.to_string())
    } else {
        text.parse::<Ipv4Cidr>().map(IpCidr::V4).map_err(|e| e.to_string())
    }
}

fn backlog(text: &str) -> Result<usize, String> {
    text.parse::<usize>()
        .ok()
        .filter(|n| (1..=1 << 20).contains(n))
        .ok_or_else(|| format!("{text:?} is not a number in 1..={}", 1 << 20))
}

/// A positive number of seconds, fractions allowed.
pub(crate) fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{text:?} is not a positive number of seconds"))
}

impl ServeArgs {
    /// The backend the options name: `--tap`, `--xdp` (with `--xdp-mode` and `--queues`),
    /// `--pci`, else the model.
    #[must_use]
    pub fn backend(&self) -> Backend {
        if let Some(name) = &self.tap {
            if self.tap_no_offloads {
                Backend::tap_without_offloads(name.clone())
            } else {
                Backend::tap(name.clone())
            }
        } else if let Some(iface) = &self.xdp {
            Backend::Xdp {
                iface: iface.clone(),
                queues: self.queues,
                mode: self.xdp_mode.unwrap_or_default(),
                busy_poll: self.xdp_busy_poll.map(|usecs| BusyPoll { usecs, ..BusyPoll::default() }),
            }
        } else if let Some(addr) = &self.pci {
            Backend::pci(addr.clone())
        } else {
            Backend::Model
        }
    }

    /// Whether the backend is the model (none of `--tap`, `--xdp`, `--pci`).
    #[must_use]
    pub fn is_model(&self) -> bool {
        self.tap.is_none() && self.xdp.is_none() && self.pci.is_none()
    }

    /// Checks what clap's own rules cannot: the backends exclude each other, `--xdp-mode` and
    /// `--queues` are for `--xdp`, and with `--xdp` a `--cores` count must equal `--queues` (one
    /// core per queue). Options built in code go through the same check.
    ///
    /// # Errors
    ///
    /// A clap error naming the options that contradict each other.
    pub fn validate(&self) -> Result<(), clap::Error> {
        let conflict = |msg: String| Err(clap::Error::raw(ErrorKind::ArgumentConflict, format!("{msg}\n")));
        let backends: Vec<&str> =
            [("--tap", self.tap.is_some()), ("--xdp", self.xdp.is_some()), ("--pci", self.pci.is_some())]
                .into_iter()
                .filter_map(|(name, given)| given.then_some(name))
                .collect();
        if backends.len() > 1 {
            return conflict(format!("{} exclude each other: pick one backend", backends.join(" and ")));
        }
        for (family, v6) in [("IPv4", false), ("IPv6", true)] {
            let given = self.ips.iter().filter(|a| matches!(a, IpCidr::V6(_)) == v6).count();
            if given > 1 {
                return conflict(format!("--ip given {given} times for {family}: one address per family"));
            }
        }
        if self.xdp.is_none() {
            if self.xdp_mode.is_some() {
                return conflict("--xdp-mode is for --xdp".into());
            }
            if self.xdp_busy_poll.is_some() {
                return conflict("--xdp-busy-poll is for --xdp".into());
            }
            if self.queues.is_some() {
                return conflict(
                    "--queues is for --xdp (--cores N gives the other backends N queues)".into(),
                );
            }
        }
        if let (Some(_), Some(cores), Some(queues)) = (&self.xdp, self.cores, self.queues)
            && cores != usize::from(queues)
        {
            return conflict(format!(
                "--cores {cores} with --xdp --queues {queues}: AF_XDP serves one queue per core; give --queues {cores} (or leave --cores out)"
            ));
        }
        if self.cores.is_some_and(|c| c > 1) && self.tap.is_some() {
            let cores = self.cores.unwrap_or(1);
            return conflict(format!("--cores {cores} with --tap: a TAP has one queue, served by one core"));
        }
        Ok(())
    }

    /// The runtime these options describe (its [`build`](Builder::build) opens the backend).
    /// With `--xdp`, `--queues N` also sets N cores.
    pub fn builder(&self) -> Builder {
        let mut builder = Runtime::builder()
            .backend(self.backend())
            .ip(self.ip())
            .placement(self.placement)
            .backlog(self.backlog);
        let cores = match (&self.xdp, self.cores, self.queues) {
            (Some(_), None, Some(queues)) => Some(usize::from(queues)),
            (_, cores, _) => cores,
        };
        if let Some(cores) = cores {
            builder = builder.cores(cores);
        }
        if let Some(path) = &self.pcap {
            builder = builder.pcap(path);
        }
        if let Some(v6) = self.ipv6() {
            builder = builder.ipv6(v6);
        }
        builder
    }

    /// The IPv4 address given (10.0.0.2/24 when only an IPv6 one is).
    #[must_use]
    pub fn ip(&self) -> Ipv4Cidr {
        self.ips
            .iter()
            .find_map(|a| match a {
                IpCidr::V4(c) => Some(*c),
                IpCidr::V6(_) => None,
            })
            .unwrap_or(netchannel_runtime::DEFAULT_IP)
    }

    /// The IPv6 address given, if any.
    #[must_use]
    pub fn ipv6(&self) -> Option<Ipv6Cidr> {
        self.ips.iter().find_map(|a| match a {
            IpCidr::V6(c) => Some(*c),
            IpCidr::V4(_) => None,
        })
    }
}

/// Logs to stderr with `tracing-subscriber`: `RUST_LOG` when set, as `tracing-subscriber`'s
/// `Targets` reads it (a default level and `target=level` pairs: `RUST_LOG=debug`,
/// `RUST_LOG=warn,tcp_lib=trace`; no span filters or regexes, which would cost the first build a
/// regex engine), otherwise `info` for this workspace's crates and `warn` for the rest, so the
/// runtime's messages (what it opened, its warnings) show. A `RUST_LOG` it cannot read is reported
/// and the default used. A second call does nothing.
pub fn init_logging() {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    const DEFAULT: &str = "warn,netchannels=info,netchannel_runtime=info,netchannel=info,ixgbe_vfio=info,\
                           tcp_lib=info,accept_affinity=info";
    let from_env = std::env::var("RUST_LOG").ok().and_then(|v| match v.parse::<Targets>() {
        Ok(targets) => Some(targets),
        Err(e) => {
            eprintln!("RUST_LOG={v:?} is not a list of LEVEL and TARGET=LEVEL ({e}); using the default");
            None
        }
    });
    let filter = from_env.unwrap_or_else(|| DEFAULT.parse().unwrap_or_default());
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(io::stderr))
        .with(filter)
        .try_init();
}

/// The flags the process's signal handlers set (see [`Signals::install`]).
#[derive(Clone, Copy, Debug)]
pub struct Signals {
    /// Set by SIGINT and SIGTERM: stop, print the summary, check the buffers. A second Ctrl-C (or
    /// SIGTERM) while it is set exits the process at once (status 1).
    pub stop: &'static AtomicBool,
    counters: &'static AtomicBool,
}

/// What SIGINT and SIGTERM set.
static STOP: AtomicBool = AtomicBool::new(false);
/// What SIGUSR1 sets.
static COUNTERS: AtomicBool = AtomicBool::new(false);
/// Whether the handlers are installed in this process, for [`counters_requested`].
static INSTALLED: OnceLock<Signals> = OnceLock::new();

/// SIGINT's and SIGTERM's handler: only an atomic swap and `_exit`, both async-signal-safe.
extern "C" fn on_stop(_signal: libc::c_int) {
    // Relaxed: a plain flag; the loops that poll it need nothing else from the handler.
    if STOP.swap(true, Ordering::Relaxed) {
        // SAFETY: `_exit` is async-signal-safe and ends the process at once (the second Ctrl-C).
        unsafe { libc::_exit(1) };
    }
}

/// SIGUSR1's handler: an atomic store.
extern "C" fn on_counters(_signal: libc::c_int) {
    // Relaxed: as in `on_stop`.
    COUNTERS.store(true, Ordering::Relaxed);
}

/// Installs `handler` for `signal` (system calls it interrupts are restarted).
fn handle(signal: libc::c_int, handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    // SAFETY: `sigaction` is plain data; all zeroes is an empty mask, no flags, no handler.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action` is initialised and outlives the call; the handler is an `extern "C" fn`
    // that lives as long as the process and does only async-signal-safe work; the old action is
    // not asked for (null).
    if unsafe { libc::sigaction(signal, &raw const action, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Signals {
    /// Installs the handlers (once per process; later calls return the same flags): SIGINT and
    /// SIGTERM set [`stop`](Self::stop), SIGUSR1 asks for the counters ([`counters_requested`]).
    /// Two atomic flags and `sigaction(2)`, written here rather than pulled in (signal-hook and
    /// its two dependencies were three of the crates every example's first build compiled).
    ///
    /// # Errors
    ///
    /// When a handler cannot be installed.
    pub fn install() -> io::Result<Self> {
        if let Some(s) = INSTALLED.get() {
            return Ok(*s);
        }
        for signal in [libc::SIGINT, libc::SIGTERM] {
            handle(signal, on_stop)?;
        }
        handle(libc::SIGUSR1, on_counters)?;
        Ok(*INSTALLED.get_or_init(|| Self { stop: &STOP, counters: &COUNTERS }))
    }

    /// Whether SIGUSR1 came since the last call (and clears it).
    #[must_use]
    pub fn counters_requested(&self) -> bool {
        // Relaxed: a plain flag.
        self.counters.swap(false, Ordering::Relaxed)
    }
}

/// Whether SIGUSR1 came since the last call, when [`Signals::install`] installed the handlers in
/// this process (always `false` otherwise): a wait loop that has a
/// [`Control`](netchannel_runtime::Control) then prints its `snapshot()`.
#[must_use]
pub fn counters_requested() -> bool {
    INSTALLED.get().is_some_and(Signals::counters_requested)
}

/// An example's options: clap's parser (with [`ServeArgs`] flattened in) and the checks clap's
/// rules cannot make.
pub trait Validate: clap::Parser {
    /// Checks what clap's rules cannot (at least [`ServeArgs::validate`]). Options built in code go
    /// through the same check when they run.
    ///
    /// # Errors
    ///
    /// A clap error naming the options that contradict each other.
    fn validate(&self) -> Result<(), clap::Error>;

    /// Parses command-line arguments (the program name first) and [validates](Self::validate)
    /// them.
    ///
    /// # Errors
    ///
    /// clap's error (print it with `exit()`, which also answers `--help`), naming the option.
    fn try_parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let options = Self::try_parse_from(args)?;
        options.validate()?;
        Ok(options)
    }
}

/// An example's `main`: parses and validates the command line (clap's message and exit on an
/// error, `--help` included), logs to stderr ([`init_logging`]), installs the [`Signals`], calls
/// `run` with the options and the stop flag, and prints its summary; an error goes to stderr after
/// the program's name (`echo: ...`) and exits with status 1.
pub fn main<O: Validate, R: fmt::Display>(run: impl FnOnce(&O, &AtomicBool) -> Result<R, String>) {
    let name = O::command().get_name().to_owned();
    let options = O::parse();
    if let Err(e) = options.validate() {
        e.exit();
    }
    init_logging();
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{name}: cannot install the signal handlers: {e}");
            std::process::exit(1);
        }
    };
    match run(&options, signals.stop) {
        Ok(report) => print!("{report}"),
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(1);
        }
    }
}

/// `options` [validated](Validate::validate), the error as a message (clap's text without its
/// `error: `).
pub(crate) fn check(options: &impl Validate) -> Result<(), String> {
    options.validate().map_err(|e| e.to_string().trim_end().trim_start_matches("error: ").to_owned())
}

/// Opens the runtime `builder` describes, both ends' stacks tuned for request/response
/// ([`tcp_tuning`]).
pub(crate) fn build(builder: Builder) -> Result<Runtime, String> {
    builder.configure(|_, c| tcp_tuning(c)).build().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// An example's options, as the examples flatten them.
    #[derive(Parser, Debug)]
    struct Test {
        #[command(flatten)]
        serve: ServeArgs,
        #[arg(long, default_value_t = 7)]
        port: u16,
    }

    fn parse(args: &[&str]) -> Result<Test, clap::Error> {
        let t = Test::try_parse_from(std::iter::once("test").chain(args.iter().copied()))?;
        t.serve.validate()?;
        Ok(t)
    }

    fn error(args: &[&str]) -> String {
        parse(args).expect_err("an error").to_string()
    }

    #[test]
    fn ip_takes_one_address_per_family() {
        let t = parse(&["--tap=t", "--ip=fd00:1::2/64"]).unwrap();
        assert_eq!(t.serve.ip(), netchannel_runtime::DEFAULT_IP, "IPv4 keeps its default");
        assert_eq!(t.serve.ipv6(), Some("fd00:1::2/64".parse().unwrap()));
        let t = parse(&["--ip", "10.7.0.2/16", "--ip", "fd00:1::2/64"]).unwrap();
        assert_eq!(
            (t.serve.ip(), t.serve.ipv6()),
            ("10.7.0.2/16".parse().unwrap(), Some("fd00:1::2/64".parse().unwrap()))
        );
        let e = error(&["--ip", "10.7.0.2/16", "--ip", "10.8.0.2/16"]);
        assert!(e.contains("--ip given 2 times for IPv4"), "{e}");
        let e = error(&["--ip", "fd00::2/64", "--ip", "fd00::3/64"]);
        assert!(e.contains("for IPv6"), "{e}");
    }

    #[test]
    fn defaults_are_the_model() {
        let t = parse(&[]).unwrap();
        assert_eq!(t.serve, ServeArgs::default());
        assert!(t.serve.is_model());
        assert_eq!(t.serve.backend(), Backend::Model);
        assert_eq!(t.serve.ip(), "10.0.0.2/24".parse().unwrap());
        assert_eq!(t.serve.ipv6(), None);
        assert_eq!(
            (t.serve.cores, t.serve.placement, t.serve.backlog),
            (None, Placement::Same, DEFAULT_BACKLOG)
        );
        assert_eq!((t.serve.duration, t.port), (None, 7));
    }

    #[test]
    fn values_parse_with_or_without_equals() {
        let t =
            parse(&["--tap=tap1", "--ip=10.1.0.2/16", "--port=8", "--placement", "split", "--duration=1.5"])
                .unwrap();
        assert_eq!(t.serve.backend(), Backend::tap("tap1"));
        let plain = parse(&["--tap=tap1", "--tap-no-offloads"]).unwrap();
        assert_eq!(plain.serve.backend(), Backend::tap_without_offloads("tap1"));
        assert!(parse(&["--tap-no-offloads"]).is_err(), "only with --tap");
        assert_eq!(t.serve.ip(), "10.1.0.2/16".parse().unwrap());
        assert_eq!((t.port, t.serve.placement), (8, Placement::Split));
        assert_eq!(t.serve.duration, Some(Duration::from_millis(1500)));
        let t =
            parse(&["--xdp", "veth0", "--xdp-mode", "native", "--queues", "2", "--pcap", "x.pcap"]).unwrap();
        let xdp =
            Backend::Xdp { iface: "veth0".into(), queues: Some(2), mode: XdpMode::Native, busy_poll: None };
        assert_eq!(t.serve.backend(), xdp);
        assert_eq!(t.serve.pcap, Some(PathBuf::from("x.pcap")));
        assert_eq!(parse(&["--xdp", "veth0"]).unwrap().serve.backend(), Backend::xdp("veth0"));
        let busy = BusyPoll { prefer: true, usecs: 50, budget: 64 };
        assert_eq!(
            parse(&["--xdp", "veth0", "--xdp-busy-poll", "50"]).unwrap().serve.backend(),
            Backend::Xdp { iface: "veth0".into(), queues: None, mode: XdpMode::Auto, busy_poll: Some(busy) }
        );
        assert!(parse(&["--tap", "tap0", "--xdp-busy-poll", "50"]).is_err(), "busy polling is for --xdp");
        let t = parse(&["--pci", "0000:03:00.0", "--cores", "4", "--backlog", "64"]).unwrap();
        assert_eq!(
            (t.serve.backend(), t.serve.cores, t.serve.backlog),
            (Backend::pci("0000:03:00.0"), Some(4), 64)
        );
        // --xdp --queues N means N cores, and --cores N agrees.
        let t = parse(&["--xdp", "veth0", "--queues", "2", "--cores", "2"]).unwrap();
        assert_eq!(t.serve.cores, Some(2));
    }

    #[test]
    fn backends_exclude_each_other() {
        for args in [
            &["--tap", "a", "--pci", "0000:01:00.0"][..],
            &["--xdp", "a", "--tap", "b"],
            &["--pci", "p", "--xdp", "x"],
        ] {
            let e = error(args);
            assert!(e.contains("cannot be used with"), "{args:?}: {e}");
            assert!(e.contains(args[0]) && e.contains(args[2]), "{args:?} names both: {e}");
        }
    }

    #[test]
    fn xdp_options_need_xdp() {
        for args in [&["--xdp-mode", "generic"][..], &["--queues", "2"], &["--tap", "t", "--queues", "2"]] {
            let e = error(args);
            assert!(e.contains("--xdp"), "{args:?}: {e}");
        }
        let e = error(&["--xdp", "veth0", "--queues", "2", "--cores", "3"]);
        assert!(e.contains("--cores 3") && e.contains("--queues 2"), "{e}");
        let e = error(&["--tap", "t", "--cores", "2"]);
        assert!(e.contains("--cores 2") && e.contains("--tap"), "{e}");
        // Options built in code go through the same checks.
        let built = ServeArgs { tap: Some("t".into()), pci: Some("p".into()), ..ServeArgs::default() };
        assert!(built.validate().unwrap_err().to_string().contains("--tap and --pci"));
        let built = ServeArgs { queues: Some(2), ..ServeArgs::default() };
        assert!(built.validate().unwrap_err().to_string().contains("--queues is for --xdp"));
    }

    #[test]
    fn bad_values_name_their_option() {
        for (args, option) in [
            (&["--ip", "10.0.0.2"][..], "--ip"),
            (&["--ip=10.0.0.300/24"], "--ip"),
            (&["--ip=fd00::2"], "--ip"),
            (&["--xdp", "v", "--xdp-mode", "fast"], "--xdp-mode"),
            (&["--xdp", "veth0:0"], "--xdp veth0 --queues N"),
            (&["--xdp="], "--xdp"),
            (&["--placement", "far"], "--placement"),
            (&["--cores", "0"], "--cores"),
            (&["--cores", "x"], "--cores"),
            (&["--xdp", "v", "--queues", "0"], "--queues"),
            (&["--duration", "-1"], "--duration"),
            (&["--duration=soon"], "--duration"),
            (&["--backlog", "0"], "--backlog"),
            (&["--port", "70000"], "--port"),
            (&["--bogus"], "--bogus"),
        ] {
            let e = error(args);
            assert!(e.contains(option), "{args:?}: {e}");
        }
    }

    #[test]
    fn the_builder_carries_the_options() {
        let t = parse(&["--cores", "3", "--ip", "10.9.0.2/16", "--placement", "split", "--backlog", "96"])
            .unwrap();
        let b = format!("{:?}", t.serve.builder());
        for part in ["Model", "cores: Some(3)", "10.9.0.2", "Split", "backlog: 96"] {
            assert!(b.contains(part), "{part} in {b}");
        }
        let t = parse(&["--xdp", "veth0", "--queues", "2"]).unwrap();
        assert!(format!("{:?}", t.serve.builder()).contains("cores: Some(2)"));
    }
}
