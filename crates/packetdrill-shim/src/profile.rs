//! What the shim is told through `packetdrill --so_flags`: the addresses of the stack under test
//! and the configuration profile its connections use.
//!
//! The flags are space- or comma-separated `key=value` pairs:
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `local_ip` | `192.168.0.1` | the stack's address, IPv4 or IPv6 (packetdrill's `--local_ip`; an IPv6 one for `--ip_version=ipv6`) |
//! | `prefix` | `16` | its IPv4 prefix length (packetdrill's `--netmask_ip=255.255.0.0`; over IPv6 every destination is on-link) |
//! | `gateway_ip` | `192.168.0.1` | packetdrill's `--gateway_ip`; see [`Profile::gateway`] |
//! | `mtu` | `1500` | the IP MTU |
//! | `profile` | `linux` | `linux` ([`Defaults::Linux`], see [`Profile::tcp`]) or `tcp-lib` (the library's own defaults) |
//! | `horizon` | `600` | seconds of virtual time `netdev_receive` waits for the stack to send |
//! | `sysctls` | `on` | under `linux`, read the namespace's sysctls ([`crate::sysctl`]) and pace when the script puts `fq` on `tun0` ([`crate::qdisc`]); `off`: the profile alone |
//!
//! An unknown key or a malformed value is an error that names the key: a misspelt flag must not
//! silently test another configuration.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use tcp_lib::stack::Config;
use tcp_lib::tcp;
use tcp_lib::wire::{EthernetAddress, Ipv4Cidr, Ipv6Cidr};

/// The MAC address the stack under test uses. Locally administered; packetdrill never sees it
/// (it works at the IP layer), so any unicast address does.
pub const STACK_MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, 0x01]);
/// The MAC address the shim answers ARP with, for every address the stack asks for.
pub const PEER_MAC: EthernetAddress = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, 0x02]);

/// Which defaults the stack's connections start from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defaults {
    /// What packetdrill's scripts assume of a Linux host configured by their `defaults.sh`.
    Linux,
    /// tcp-lib's own [`tcp::Config::default`].
    TcpLib,
}

/// The parsed `--so_flags`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    /// The stack's address.
    pub local_ip: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
    /// packetdrill's gateway, used as the stack's gateway unless it is the stack's own address
    /// (packetdrill's default): then every destination is on-link, which is the same on the wire
    /// because the shim answers ARP for every address.
    pub gateway: IpAddr,
    /// The IP MTU.
    pub mtu: usize,
    /// Which defaults connections start from.
    pub defaults: Defaults,
    /// How far `netdev_receive` advances virtual time looking for a packet before it reports
    /// that the stack sent nothing.
    pub horizon: Duration,
    /// Under [`Defaults::Linux`], read the namespace's sysctls as sockets are configured.
    pub sysctls: bool,
}

impl Default for Profile {
    fn default() -> Self {
        Self {
            local_ip: IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
            prefix: 16,
            gateway: IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
            mtu: 1500,
            defaults: Defaults::Linux,
            horizon: Duration::from_secs(600),
            sysctls: true,
        }
    }
}

/// A flag the shim cannot use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagError {
    /// The offending `key=value` text.
    pub flag: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--so_flags: `{}`: {} (keys: local_ip, prefix, gateway_ip, mtu, profile=linux|tcp-lib, horizon, sysctls=on|off)",
            self.flag, self.why
        )
    }
}

impl std::error::Error for FlagError {}

impl Profile {
    /// Parses `--so_flags` (empty: every default).
    ///
    /// # Errors
    /// A [`FlagError`] naming the first flag that is unknown or malformed.
    pub fn parse(flags: &str) -> Result<Self, FlagError> {
        let mut p = Self::default();
        for flag in flags.split([' ', ',']).filter(|f| !f.is_empty()) {
            let err = |why| FlagError { flag: flag.to_owned(), why };
            let (key, value) = flag.split_once('=').ok_or_else(|| err("expected key=value"))?;
            match key {
                "local_ip" => p.local_ip = value.parse().map_err(|_| err("not an IP address"))?,
                "prefix" => {
                    p.prefix = value
                        .parse()
                        .ok()
                        .filter(|&n| n <= 32)
                        .ok_or_else(|| err("not a prefix length 0..=32"))?;
                }
                "gateway_ip" => p.gateway = value.parse().map_err(|_| err("not an IP address"))?,
                "mtu" => {
                    p.mtu = value
                        .parse()
                        .ok()
                        .filter(|&m| (576..=9000).contains(&m))
                        .ok_or_else(|| err("not an MTU 576..=9000"))?
                }
                "profile" => {
                    p.defaults = match value {
                        "linux" => Defaults::Linux,
                        "tcp-lib" => Defaults::TcpLib,
                        _ => return Err(err("profiles: linux, tcp-lib")),
                    };
                }
                "sysctls" => {
                    p.sysctls = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(err("sysctls: on, off")),
                    };
                }
                "horizon" => {
                    p.horizon =
                        value.parse().map(Duration::from_secs).map_err(|_| err("not a number of seconds"))?;
                }
                _ => return Err(err("unknown key")),
            }
        }
        Ok(p)
    }

    /// The stack configuration: addresses, MTU, a fixed secret (reproducible ISNs and ports), no
    /// gratuitous ARP, no software GSO, and the TCP defaults of [`Self::tcp`].
    #[must_use]
    pub fn stack_config(&self) -> Config {
        let mut config = match self.local_ip {
            IpAddr::V4(local) => {
                let cidr = Ipv4Cidr::new(local, self.prefix).unwrap_or_else(|| {
                    Ipv4Cidr::new(local, 32).unwrap_or_else(|| unreachable!("a /32 is always valid"))
                });
                let mut config = Config::new(STACK_MAC, cidr);
                config.gateway = match self.gateway {
                    IpAddr::V4(g) if g != local => Some(g),
                    _ => None,
                };
                if config.gateway.is_none() {
                    // Every destination on-link: the shim answers ARP for all of them.
                    config.ip = Ipv4Cidr::new(local, 0).unwrap_or(cidr);
                }
                config
            }
            IpAddr::V6(local) => {
                // IPv4 off (the unspecified address); every IPv6 destination on-link (a /0): the
                // shim answers Neighbor Discovery for all of them, as it answers ARP.
                let unspecified = Ipv4Cidr::new(Ipv4Addr::UNSPECIFIED, 32)
                    .unwrap_or_else(|| unreachable!("a /32 is always valid"));
                let mut config = Config::new(STACK_MAC, unspecified).with_ipv6(
                    Ipv6Cidr::new(local, 0).unwrap_or_else(|| unreachable!("a /0 is always valid")),
                );
                if let Some(v6) = config.ipv6.as_mut() {
                    v6.accept_ra = false;
                }
                config
            }
        };
        config.mtu = self.mtu;
        config.gratuitous_arp = false;
        // Segment by segment: the Linux profile plans Linux's TSO packets itself (`Push::Linux`,
        // the segments a packet of `tcp_tso_autosize` holds and where PSH goes), which a
        // super-segment decided at once in software would override.
        config.gso_max_size = 0;
        config.secret_seed = Some(0x7061_636b_6574_6472);
        config.tcp = self.tcp();
        config
    }

    /// The TCP defaults. [`Defaults::Linux`] is [`tcp::Config::linux`] as packetdrill's
    /// `defaults.sh` leaves a Linux host: receive and send buffers of the sizes
    /// `tcp_rmem`/`tcp_wmem` give a socket (and the window scale its largest receive buffer
    /// gets), five SYN retries, and no restart window after idle (`tcp_slow_start_after_idle` 0);
    /// the namespace's sysctls may change these ([`crate::sysctl`]).
    #[must_use]
    pub fn tcp(&self) -> tcp::Config {
        let base = match self.defaults {
            Defaults::Linux => tcp::Config {
                recv_buffer: 540_000,
                send_buffer: 256 * 1024,
                // The shift Linux announces for tcp_rmem[2] = 15 MiB.
                rcv_wscale: Some(8),
                syn_retries: 5,
                restart_after_idle: false,
                ..tcp::Config::linux()
            },
            Defaults::TcpLib => tcp::Config::default(),
        };
        tcp::Config { mss: u16::try_from(self.mtu - 40).unwrap_or(u16::MAX), ..base }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_name_what_is_wrong() {
        let p = Profile::parse("local_ip=10.0.0.1 prefix=24,mtu=9000 profile=tcp-lib").unwrap();
        assert_eq!(p.local_ip, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!((p.prefix, p.mtu, p.defaults), (24, 9000, Defaults::TcpLib));
        assert_eq!(Profile::parse("").unwrap(), Profile::default());
        let p = Profile::parse("local_ip=fd3d:a0b:17d6::1,mtu=1520").unwrap();
        let c = p.stack_config();
        assert!(c.ip.address().is_unspecified(), "IPv4 off for an IPv6 run");
        let v6 = c.ipv6.expect("IPv6 on");
        assert_eq!(
            v6.address.map(|a| (a.address(), a.prefix_len())),
            Some(("fd3d:a0b:17d6::1".parse().unwrap(), 0))
        );
        assert!(!v6.accept_ra);
        let e = Profile::parse("mtu=1500 locl_ip=1.2.3.4").unwrap_err();

        assert_eq!(e.flag, "locl_ip=1.2.3.4");
        assert!(e.to_string().contains("unknown key"), "{e}");
        assert!(Profile::parse("prefix=33").is_err());
        assert!(Profile::parse("profile=bsd").is_err());
    }

    #[test]
    fn packetdrills_default_gateway_makes_every_destination_on_link() {
        let c = Profile::default().stack_config();
        assert_eq!(c.gateway, None);
        assert!(c.ip.contains_addr(Ipv4Addr::new(192, 0, 2, 1)));
        let c = Profile::parse("gateway_ip=192.168.0.2").unwrap().stack_config();
        assert_eq!(c.gateway, Some(Ipv4Addr::new(192, 168, 0, 2)));
    }
}
