//! Configuration sections of the raw-frame backends and their constructors, shared by every
//! program that lets its users choose a backend (the translator's `[translator] backend`, the
//! collector's `[rnic] backend`), so `[af_xdp]` and `[dpdk]` mean the same thing everywhere.
//!
//! ```toml
//! [af_xdp]
//! interface = "eth1"
//! queue = 0            # first RX queue (the translator's worker w serves queue + w)
//! mode = "native"      # or "skb"
//! zero_copy = false
//! frame_count = 8192   # UMEM frames, half receive, half transmit
//! rx_batch = 64
//!
//! [dpdk]
//! eal_args = ["-l", "0", "--no-pci", "--no-huge", "-m", "512", "--file-prefix=dta",
//!             "--vdev=net_af_packet0,iface=eth1,framecnt=16384"]
//! ports = ["net_af_packet0"]
//! burst = 0            # 0: the backend's default
//! ```
//!
//! A backend whose cargo feature is not compiled into `dta-io` is refused by
//! [`open_af_xdp`] / [`open_dpdk`] with an error naming the feature.

use serde::{Deserialize, Serialize};

use crate::backend::Backend;

/// AF_XDP attach mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum XdpAttach {
    /// Driver (native) XDP.
    #[default]
    Native,
    /// Generic (SKB) XDP: works on every interface, slower.
    Skb,
}

/// `[af_xdp]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AfXdpSection {
    /// The interface to attach to.
    pub interface: String,
    /// First RX queue: the translator's worker w serves queue `queue + w`.
    pub queue: u32,
    /// "native" or "skb".
    pub mode: XdpAttach,
    /// Ask for zero-copy (native mode and a driver that supports it).
    pub zero_copy: bool,
    /// UMEM frames per socket (half receive, half transmit; a power of two).
    pub frame_count: u32,
    /// Most frames received per burst.
    pub rx_batch: usize,
}

impl Default for AfXdpSection {
    fn default() -> Self {
        AfXdpSection {
            interface: String::new(),
            queue: 0,
            mode: XdpAttach::Native,
            zero_copy: false,
            frame_count: 8192,
            rx_batch: 64,
        }
    }
}

/// `[dpdk]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DpdkSection {
    /// EAL arguments (without a program name), e.g. `["-l", "0", "--no-pci", "--no-huge",
    /// "-m", "512", "--file-prefix=dta", "--vdev=net_af_packet0,iface=eth1"]`.
    pub eal_args: Vec<String>,
    /// DPDK port names, one per worker (worker w uses `ports[w]`); empty: port 0, one worker.
    pub ports: Vec<String>,
    /// Most frames received per burst (0: the backend's default).
    pub burst: usize,
}

/// `Err` naming the cargo feature `feature` when `compiled` is false. `key` is the setting
/// that asked for it (e.g. `translator.backend`), `krate` the package to rebuild.
pub fn require_feature(
    key: &str,
    feature: &str,
    compiled: bool,
    krate: &str,
) -> Result<(), String> {
    if compiled {
        Ok(())
    } else {
        Err(format!(
            "{key} = {feature:?} is not compiled in: rebuild with the cargo feature \
             `{feature}` (cargo build --release -p {krate} --features {feature})"
        ))
    }
}

/// Whether `dta-io` was built with AF_XDP support.
pub const AF_XDP_COMPILED: bool = cfg!(feature = "af_xdp");
/// Whether `dta-io` was built with DPDK support.
pub const DPDK_COMPILED: bool = cfg!(feature = "dpdk");

/// Opens an AF_XDP socket on `s.interface`, RX queue `s.queue + queue_offset`, steering the
/// UDP destination `ports` to it. Errors are strings for the operator (they name the queue and
/// the privileges needed, or the missing cargo feature).
pub fn open_af_xdp(
    s: &AfXdpSection,
    queue_offset: u32,
    ports: &[u16],
) -> Result<Box<dyn Backend>, String> {
    #[cfg(feature = "af_xdp")]
    {
        use crate::af_xdp::{AfXdpBackend, AfXdpConfig, XdpMode};
        let mut c = AfXdpConfig::new(&s.interface, ports);
        c.queue = s.queue + queue_offset;
        c.mode = match s.mode {
            XdpAttach::Native => XdpMode::Native,
            XdpAttach::Skb => XdpMode::Skb,
        };
        c.zero_copy = s.zero_copy;
        c.frame_count = s.frame_count;
        c.ring_size = (s.frame_count / 2).max(1);
        c.rx_batch = s.rx_batch;
        let b = AfXdpBackend::open(c).map_err(|e| {
            format!(
                "AF_XDP on {} queue {}: {e} (needs root: CAP_NET_ADMIN and CAP_BPF)",
                s.interface,
                s.queue + queue_offset
            )
        })?;
        Ok(Box::new(b))
    }
    #[cfg(not(feature = "af_xdp"))]
    {
        let _ = (s, queue_offset, ports);
        Err("AF_XDP is not compiled in: rebuild with the cargo feature `af_xdp`".into())
    }
}

/// Opens DPDK port `s.ports[index]` (port 0 when none is named), starting the EAL with
/// `s.eal_args` on first use, delivering only the UDP destination `ports`.
pub fn open_dpdk(s: &DpdkSection, index: usize, ports: &[u16]) -> Result<Box<dyn Backend>, String> {
    #[cfg(feature = "dpdk")]
    {
        use crate::dpdk::{DpdkBackend, DpdkConfig};
        let args: Vec<&str> = s.eal_args.iter().map(String::as_str).collect();
        let mut c = DpdkConfig::new(&args, s.ports.get(index).map(String::as_str));
        c.filter = crate::frame::FrameFilter::ports(ports).ok_or("too many ports")?;
        if s.burst > 0 {
            c.burst = s.burst;
        }
        let b =
            DpdkBackend::open(c).map_err(|e| format!("DPDK port {:?}: {e}", s.ports.get(index)))?;
        Ok(Box::new(b))
    }
    #[cfg(not(feature = "dpdk"))]
    {
        let _ = (s, index, ports);
        Err("DPDK is not compiled in: rebuild with the cargo feature `dpdk`".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_parse_with_defaults_and_refuse_typos() {
        #[derive(Deserialize)]
        struct F {
            #[serde(default)]
            af_xdp: AfXdpSection,
            #[serde(default)]
            dpdk: DpdkSection,
        }
        let f: F = toml::from_str(
            "[af_xdp]\ninterface = \"veth1\"\nmode = \"skb\"\n[dpdk]\nports = [\"p0\"]\n",
        )
        .unwrap();
        assert_eq!(f.af_xdp.interface, "veth1");
        assert_eq!(f.af_xdp.mode, XdpAttach::Skb);
        assert_eq!(f.af_xdp.frame_count, 8192);
        assert_eq!(f.dpdk.ports, vec!["p0".to_string()]);
        assert!(toml::from_str::<F>("[af_xdp]\ninterfac = \"x\"\n").is_err());
        assert!(toml::from_str::<F>("[af_xdp]\nmode = \"fast\"\n").is_err());
    }

    #[test]
    fn missing_features_are_named() {
        let e = require_feature("rnic.backend", "af_xdp", false, "dta-collector").unwrap_err();
        assert!(
            e.contains("feature `af_xdp`") && e.contains("-p dta-collector"),
            "{e}"
        );
        assert!(require_feature("k", "dpdk", true, "x").is_ok());
        if !AF_XDP_COMPILED {
            let e = open_af_xdp(&AfXdpSection::default(), 0, &[4791])
                .err()
                .unwrap();
            assert!(e.contains("`af_xdp`"), "{e}");
        }
        if !DPDK_COMPILED {
            let e = open_dpdk(&DpdkSection::default(), 0, &[4791])
                .err()
                .unwrap();
            assert!(e.contains("`dpdk`"), "{e}");
        }
    }
}
