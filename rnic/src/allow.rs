//! Who may open an RDMA_CM connection to a store: IPv4 CIDR allowlists.
//!
//! RoCEv2 has no authentication of its own: whoever completes the REQ/REP/RTU exchange is
//! sent the store's address and R_Key and may write. The listener therefore answers a REQ only
//! from a source address in the store's allowlist (`[[store]] cm_allow`, else
//! `[collector] cm_allow`, else [`PeerAllowlist::default_for`]: the configured static peers and
//! the loopback network) and refuses everyone else with a CM REJ. Source addresses can be
//! forged on a fabric that does not filter them; the allowlist assumes an isolated fabric
//! where they cannot, which is what RoCE assumes anyway (README, "Security").

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An IPv4 network, `a.b.c.d/len` (a bare address is a /32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    net: Ipv4Addr,
    len: u8,
}

impl Cidr {
    /// The network of `addr` with a `len`-bit prefix (host bits cleared); `None` if `len > 32`.
    pub fn new(addr: Ipv4Addr, len: u8) -> Option<Cidr> {
        (len <= 32).then(|| Cidr {
            net: Ipv4Addr::from(u32::from(addr) & Self::mask(len)),
            len,
        })
    }

    /// One address.
    pub fn host(addr: Ipv4Addr) -> Cidr {
        Cidr { net: addr, len: 32 }
    }

    fn mask(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - len as u32)
        }
    }

    /// Whether `ip` lies in the network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & Self::mask(self.len) == u32::from(self.net)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Cidr, String> {
        let bad = || format!("{s:?} is not an IPv4 address or network (a.b.c.d or a.b.c.d/len)");
        let (a, len) = match s.trim().split_once('/') {
            Some((a, l)) => (a, l.parse::<u8>().map_err(|_| bad())?),
            None => (s.trim(), 32),
        };
        let addr: Ipv4Addr = a.parse().map_err(|_| bad())?;
        let c = Cidr::new(addr, len).ok_or_else(bad)?;
        if c.net != addr {
            return Err(format!(
                "{s:?} has host bits set: the network is {c} (write that, so the list says \
                 what it allows)"
            ));
        }
        Ok(c)
    }
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Cidr, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The peers one store accepts RDMA_CM connections from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PeerAllowlist {
    nets: Vec<Cidr>,
}

impl PeerAllowlist {
    /// The loopback network, 127.0.0.0/8.
    pub const LOOPBACK: Cidr = Cidr {
        net: Ipv4Addr::new(127, 0, 0, 0),
        len: 8,
    };

    /// A list of networks (empty: nobody).
    pub fn new(nets: Vec<Cidr>) -> PeerAllowlist {
        PeerAllowlist { nets }
    }

    /// Everybody (0.0.0.0/0).
    pub fn any() -> PeerAllowlist {
        PeerAllowlist {
            nets: vec![Cidr {
                net: Ipv4Addr::UNSPECIFIED,
                len: 0,
            }],
        }
    }

    /// The default when the configuration names no list: the given peers (the static peers'
    /// addresses) and the loopback network.
    pub fn default_for(peers: impl IntoIterator<Item = Ipv4Addr>) -> PeerAllowlist {
        let mut nets: Vec<Cidr> = peers.into_iter().map(Cidr::host).collect();
        nets.push(Self::LOOPBACK);
        nets.dedup();
        PeerAllowlist { nets }
    }

    /// Whether `ip` may connect.
    pub fn allows(&self, ip: Ipv4Addr) -> bool {
        self.nets.iter().any(|n| n.contains(ip))
    }

    /// The networks.
    pub fn nets(&self) -> &[Cidr] {
        &self.nets
    }
}

impl fmt::Display for PeerAllowlist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nets.is_empty() {
            return f.write_str("nobody");
        }
        for (i, n) in self.nets.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_matches_networks() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains(Ipv4Addr::new(10, 1, 200, 3)));
        assert!(!c.contains(Ipv4Addr::new(10, 2, 0, 1)));
        let h: Cidr = "192.0.2.7".parse().unwrap();
        assert_eq!(h.to_string(), "192.0.2.7/32");
        assert!(h.contains(Ipv4Addr::new(192, 0, 2, 7)));
        assert!(!h.contains(Ipv4Addr::new(192, 0, 2, 8)));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(Ipv4Addr::new(203, 0, 113, 9)));
        for bad in [
            "10.0.0.0/33",
            "10.0.0/8",
            "x",
            "10.0.0.1/24",
            "10.0.0.0/",
            "::1/128",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn default_admits_the_static_peers_and_loopback_only() {
        let a = PeerAllowlist::default_for([Ipv4Addr::new(10, 0, 0, 9)]);
        assert!(a.allows(Ipv4Addr::new(10, 0, 0, 9)));
        assert!(a.allows(Ipv4Addr::new(127, 0, 0, 2)));
        assert!(!a.allows(Ipv4Addr::new(10, 0, 0, 10)));
        assert!(!PeerAllowlist::new(vec![]).allows(Ipv4Addr::LOCALHOST));
        assert!(PeerAllowlist::any().allows(Ipv4Addr::new(8, 8, 8, 8)));
        let t: Vec<Cidr> = toml::from_str::<std::collections::HashMap<String, Vec<Cidr>>>(
            "a = [\"10.0.0.0/8\", \"127.0.0.1\"]",
        )
        .unwrap()
        .remove("a")
        .unwrap();
        assert_eq!(
            PeerAllowlist::new(t).to_string(),
            "10.0.0.0/8, 127.0.0.1/32"
        );
    }
}
