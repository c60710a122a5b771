//! The rules a translator configuration must satisfy that TOML types cannot express, each
//! error naming the section and key at fault. Checks only: nothing here fills in a default.

use super::*;

impl TranslatorConfig {
    /// Checks cross-field rules.
    pub fn validate(&self) -> Result<(), String> {
        let t = &self.translator;
        if self.int.port != 0
            && (self.int.port == t.listen.port() || self.int.port == t.roce.port())
        {
            return Err("int.port must differ from translator.listen's and roce's ports".into());
        }
        if self.int.drop.lists == 0 || self.int.congestion.lists == 0 {
            return Err("int.drop.lists and int.congestion.lists must be at least 1".into());
        }
        for (name, r) in [
            ("drop", &self.int.drop),
            ("congestion", &self.int.congestion),
        ] {
            let rule = crate::datapath::int_ingest::ListRule {
                first: r.first_list,
                lists: r.lists,
            };
            if !rule.fits() {
                return Err(format!(
                    "int.{name}.first_list + int.{name}.lists - 1 must be at most {} (list IDs \
                     are 32 bits): first_list = {}, lists = {}",
                    u32::MAX,
                    r.first_list,
                    r.lists
                ));
            }
        }
        if t.workers == 0 || t.workers > 64 {
            return Err("translator.workers must be 1..=64".into());
        }
        if t.metrics.is_none() && (t.web != dta_http::WebSettings::default()) {
            return Err(
                "translator.web_config_file, admin_token_file and control_hostnames configure \
                 the metrics server: set translator.metrics too (or remove them)"
                    .into(),
            );
        }
        if !(1..=1000).contains(&t.stats_interval_ms) {
            return Err("translator.stats_interval_ms must be 1..=1000".into());
        }
        if t.retransmit_window > crate::datapath::retx::MAX_WINDOW {
            return Err(format!(
                "translator.retransmit_window must be 0..={}",
                crate::datapath::retx::MAX_WINDOW
            ));
        }
        if t.max_reporters > crate::datapath::reporters::MAX_REPORTERS {
            return Err(format!(
                "translator.max_reporters must be 0..={} (each worker allocates 32 bytes per \
                 reporter at start): {}",
                crate::datapath::reporters::MAX_REPORTERS,
                t.max_reporters
            ));
        }
        if t.max_redundancy == 0 || t.max_redundancy as usize > dta_proto::hash::MAX_REDUNDANCY {
            return Err(format!(
                "translator.max_redundancy must be 1..={}",
                dta_proto::hash::MAX_REDUNDANCY
            ));
        }
        if t.roce.ip().is_unspecified() {
            return Err(
                "translator.roce must name a concrete local IP: it is covered by the ICRC".into(),
            );
        }
        match t.backend {
            BackendKind::Udp => {}
            BackendKind::AfXdp if self.af_xdp.interface.is_empty() => {
                return Err("translator.backend = \"af_xdp\" needs [af_xdp] interface".into())
            }
            BackendKind::AfXdp if t.workers > 1 => {
                return Err(
                    "translator.backend = \"af_xdp\": one worker per interface (the steering \
                     program is attached once per interface); set workers = 1"
                        .into(),
                )
            }
            BackendKind::AfXdp => {}
            BackendKind::Dpdk if self.dpdk.eal_args.is_empty() => {
                return Err("translator.backend = \"dpdk\" needs [dpdk] eal_args".into())
            }
            BackendKind::Dpdk if self.dpdk.ports.len().max(1) < t.workers => {
                return Err(format!(
                    "translator.backend = \"dpdk\": {} worker(s) need as many [dpdk] ports \
                     (one queue per port)",
                    t.workers
                ))
            }
            BackendKind::Dpdk => {}
            BackendKind::Pcap if self.pcap.input.is_empty() => {
                return Err("translator.backend = \"pcap\" needs [pcap] input files".into())
            }
            BackendKind::Pcap if !(self.pcap.rate >= 0.0 && self.pcap.rate.is_finite()) => {
                return Err("pcap.rate must be a finite number >= 0".into())
            }
            BackendKind::Pcap => {}
        }
        let compiled = match t.backend {
            BackendKind::AfXdp => cfg!(feature = "af_xdp"),
            BackendKind::Dpdk => cfg!(feature = "dpdk"),
            BackendKind::Udp | BackendKind::Pcap => true,
        };
        if !compiled {
            let name = t.backend.name();
            return Err(format!(
                "translator.backend = {name:?} is not compiled in: rebuild with the cargo \
                 feature `{name}` (cargo build --release -p dta-translator --features {name})"
            ));
        }
        if t.backend.raw() && (t.listen.port() == 0 || t.roce.port() == 0) {
            return Err(format!(
                "translator.backend = {:?}: listen and roce need fixed ports (no kernel \
                 picks an ephemeral port for a raw-frame backend)",
                t.backend.name()
            ));
        }
        let sk = &self.sketch;
        if sk.expected_switches == 0 {
            return Err("sketch.expected_switches must be at least 1".into());
        }
        if sk.max_switches < sk.expected_switches as u32 || sk.max_switches > 1 << 20 {
            return Err(format!(
                "sketch.max_switches must be sketch.expected_switches ({})..=1048576, not {}",
                sk.expected_switches, sk.max_switches
            ));
        }
        if !(1..=60_000).contains(&sk.flush_delay_ms) {
            return Err("sketch.flush_delay_ms must be 1..=60000".into());
        }
        if let Some(q) = sk.epoch_quorum {
            if q == 0 || q > sk.expected_switches {
                return Err(format!(
                    "sketch.epoch_quorum must be 1..=sketch.expected_switches ({}), not {q}",
                    sk.expected_switches
                ));
            }
        }
        if !(1..=1_000_000).contains(&sk.idle_epochs) {
            return Err(format!(
                "sketch.idle_epochs must be 1..=1000000, not {}",
                sk.idle_epochs
            ));
        }
        if !(1..=1000).contains(&sk.late_epochs) {
            return Err(format!(
                "sketch.late_epochs must be 1..=1000, not {}",
                sk.late_epochs
            ));
        }
        if sk.switch.len() > sk.max_switches as usize {
            return Err(format!(
                "sketch.switch: {} switches listed, above sketch.max_switches ({})",
                sk.switch.len(),
                sk.max_switches
            ));
        }
        let mut ids = std::collections::HashSet::new();
        for w in &sk.switch {
            if !ids.insert(w.id) {
                return Err(format!("sketch.switch: id {} is listed twice", w.id));
            }
            if w.address.is_unspecified() || w.address.is_broadcast() || w.address.is_multicast() {
                return Err(format!(
                    "sketch.switch: id {}: address {} is not a unicast address",
                    w.id, w.address
                ));
            }
        }
        if !self.postcard.cache_slots.is_power_of_two() {
            return Err("postcard.cache_slots must be a power of two".into());
        }
        if let Some(n) = self.postcard.redundancy {
            if n == 0 || n as usize > dta_proto::hash::MAX_REDUNDANCY {
                return Err(format!("postcard.redundancy must be 1..=8, not {n}"));
            }
        }
        if self.reliability.ack_every == 0 {
            return Err("reliability.ack_every must be at least 1".into());
        }
        let r = &self.reliability;
        if r.rto_min_us == 0 || r.rto_max_us < r.rto_min_us || r.ack_timeout_us == 0 {
            return Err(
                "reliability: need 0 < rto_min_us <= rto_max_us and ack_timeout_us > 0".into(),
            );
        }
        if r.broken_after_ms == 0 || r.broken_after_ms.saturating_mul(1000) < r.rto_max_us {
            return Err("reliability.broken_after_ms must be at least rto_max_us".into());
        }
        let max = crate::datapath::qp::MAX_OUTSTANDING;
        if !(MIN_OUTSTANDING_PSNS..=max).contains(&r.max_outstanding_psns) {
            return Err(format!(
                "reliability.max_outstanding_psns must be {MIN_OUTSTANDING_PSNS}..={max}, not {} \
                 (PSNs compare correctly only while fewer than 2^23 are outstanding)",
                r.max_outstanding_psns
            ));
        }
        if u64::from(r.max_outstanding_psns) < 2 * u64::from(r.ack_every) {
            return Err(format!(
                "reliability.max_outstanding_psns ({}) must be at least 2 × reliability.ack_every \
                 ({}): a QP at its cap must have a frame in flight that asks for an ACK",
                r.max_outstanding_psns, r.ack_every
            ));
        }
        let o = &self.overload;
        if !(0.0..1.0).contains(&o.low_reserve)
            || !(0.0..1.0).contains(&o.medium_reserve)
            || o.medium_reserve > o.low_reserve
        {
            return Err("overload: 0 <= medium_reserve <= low_reserve < 1".into());
        }
        if self.collectors.is_empty() && self.cluster.is_none() {
            return Err(
                "no [[collector]]: a translator needs at least one collector to write to \
                 (`cm` and `ports` for RDMA_CM, or `metadata`; see translator.example.toml)"
                    .into(),
            );
        }
        let mut names = std::collections::HashSet::new();
        for c in self.collectors.iter().map(|c| &c.endpoint) {
            if !names.insert(c.name.as_str()) {
                return Err(format!(
                    "collector {:?}: name: used twice (names must be unique)",
                    c.name
                ));
            }
            let mut ports = std::collections::HashSet::new();
            for &p in &c.ports {
                if p == 0 {
                    return Err(format!(
                        "collector {:?}: ports: 0 is not an RDMA_CM port",
                        c.name
                    ));
                }
                if !ports.insert(p) {
                    return Err(format!(
                        "collector {:?}: ports: {p} is listed twice",
                        c.name
                    ));
                }
            }
            if let Some(m) = &c.mac {
                m.parse::<dta_proto::wire::ethernet::MacAddr>()
                    .map_err(|_| format!("collector {:?}: mac: {m:?} is not a MAC", c.name))?;
            }
            match (&c.metadata, &c.cm) {
                (Some(_), None) => {}
                (None, Some(_)) if !c.ports.is_empty() => {}
                (None, Some(_)) => {
                    return Err(format!(
                        "collector {:?}: `cm` needs `ports` (the stores' rdma_cm ports)",
                        c.name
                    ))
                }
                _ => {
                    return Err(format!(
                        "collector {:?}: give exactly one of `metadata` (static) or `cm` (RDMA_CM)",
                        c.name
                    ))
                }
            }
        }
        for (what, r) in [
            ("keywrite", &self.routing.keywrite),
            ("keyincrement", &self.routing.keyincrement),
            ("postcard", &self.routing.postcard),
        ] {
            if !(r == "single"
                || r.starts_with("single:")
                || r == "key-hash"
                || r == "destination"
                || r == "none")
            {
                return Err(format!("routing.{what}: expected single, single:STORE, key-hash, destination or none, got {r:?}"));
            }
        }
        Ok(())
    }
}
