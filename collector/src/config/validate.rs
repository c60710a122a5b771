//! The rules a collector configuration must satisfy that TOML types cannot express, each error
//! naming the section or store and the key at fault, and the host checks (memory, persist
//! directory). Checks only: nothing here fills in a default.

use dta_proto::hash::{HashProfile, MAX_REDUNDANCY};
use dta_proto::meta::StoreKind;

use super::store::check_store_name;
use super::*;

impl CollectorConfig {
    /// Checks every rule the types do not, naming the section or store and the key; this
    /// includes the host ([`CollectorConfig::check_host`]).
    pub fn validate(&self) -> Result<(), String> {
        if self.stores.len() > crate::rnic::responder::MAX_MRS {
            return Err(format!(
                "at most {} stores (one registered region each)",
                crate::rnic::responder::MAX_MRS
            ));
        }
        self.validate_device()?;
        if let Some(p) = &self.pull {
            p.validate()?;
        }
        self.validate_stores()?;
        crate::export::config::validate(self)?;
        self.check_host(mem_total())
    }

    fn validate_device(&self) -> Result<(), String> {
        let d = &self.collector;
        if d.max_redundancy == 0 || d.max_redundancy as usize > MAX_REDUNDANCY {
            return Err(format!(
                "[collector] max_redundancy: must be 1..={MAX_REDUNDANCY}, not {}",
                d.max_redundancy
            ));
        }
        if !(256..=4096).contains(&d.pmtu) || !d.pmtu.is_power_of_two() {
            return Err(format!(
                "[collector] pmtu: must be 256, 512, 1024, 2048 or 4096, not {}",
                d.pmtu
            ));
        }
        d.mac
            .parse::<dta_proto::wire::ethernet::MacAddr>()
            .map_err(|_| {
                format!(
                    "[collector] mac: {:?} is not a MAC (six hex bytes, e.g. 02:00:00:00:00:51)",
                    d.mac
                )
            })?;
        if d.recv_credits == 0 {
            return Err(
                "[collector] recv_credits: must be at least 1 (receive buffers per QP; WRITE \
                 with Immediate and SEND each need one)"
                    .into(),
            );
        }
        if !(1..=MAX_TAIL_CONSUMER_IDLE_SECS).contains(&d.tail_consumer_idle_secs) {
            return Err(format!(
                "[collector] tail_consumer_idle_secs: {} must be 1..={MAX_TAIL_CONSUMER_IDLE_SECS} \
                 (seconds a named /tail consumer may stay unused before it is forgotten)",
                d.tail_consumer_idle_secs
            ));
        }
        if d.rnic.rx_coalesce_us > MAX_RX_COALESCE_US {
            return Err(format!(
                "[rnic] rx_coalesce_us: {} is above the limit of {MAX_RX_COALESCE_US} (10 ms): \
                 every wait delays ACKs, and the translator times out after 20 ms",
                d.rnic.rx_coalesce_us
            ));
        }
        if let Some(dir) = &d.persist_dir {
            if !dir.is_dir() {
                return Err(format!(
                    "[collector] persist_dir: {} {} (create it first, e.g. a hugetlbfs or tmpfs \
                     mount; the collector does not create it)",
                    dir.display(),
                    if dir.exists() {
                        "is not a directory"
                    } else {
                        "does not exist"
                    }
                ));
            }
        }
        for (i, p) in self.static_peers.iter().enumerate() {
            let at = format!("[[static_peer]] {} ({})", i + 1, p.roce);
            if p.workers == 0 {
                return Err(format!("{at}: workers: must be at least 1"));
            }
            p.mac
                .parse::<dta_proto::wire::ethernet::MacAddr>()
                .map_err(|_| format!("{at}: mac: {:?} is not a MAC", p.mac))?;
        }
        let io = &d.rnic;
        let b = io.backend;
        if b != RnicBackend::Udp && d.backend == Backend::Software {
            let compiled = match b {
                RnicBackend::AfXdp => dta_io::config::AF_XDP_COMPILED,
                _ => dta_io::config::DPDK_COMPILED,
            };
            dta_io::config::require_feature("rnic.backend", b.name(), compiled, "dta-collector")?;
            let roce = d.roce;
            if roce.ip().is_unspecified() || roce.port() == 0 {
                return Err(format!(
                    "rnic.backend = {:?}: [collector] roce needs a concrete IP and port (no \
                     kernel picks them for a raw-frame backend; the IP is covered by the ICRC)",
                    b.name()
                ));
            }
            if b == RnicBackend::AfXdp && io.af_xdp.interface.is_empty() {
                return Err("rnic.backend = \"af_xdp\" needs [af_xdp] interface".into());
            }
            if b == RnicBackend::Dpdk && io.dpdk.eal_args.is_empty() {
                return Err("rnic.backend = \"dpdk\" needs [dpdk] eal_args".into());
            }
        }
        Ok(())
    }

    fn validate_stores(&self) -> Result<(), String> {
        if self.stores.is_empty() && self.pull.is_none() {
            return Err(
                "no [[store]]: a collector needs at least one store, or a [pull] section (see \
                 collector/collector.example.toml)"
                    .into(),
            );
        }
        let mut names: std::collections::HashMap<&str, usize> = Default::default();
        let mut ports: std::collections::HashMap<u16, &str> = Default::default();
        let mut lists: Vec<(u64, u64, &str)> = Vec::new();
        for (i, s) in self.stores.iter().enumerate() {
            check_store_name(&s.name)?;
            let at = format!("store {:?}", s.name);
            if let Some(j) = names.insert(&s.name, i) {
                return Err(format!(
                    "{at}: name: used by [[store]] {} and {} (names must be unique)",
                    j + 1,
                    i + 1
                ));
            }
            let port = s.cm_port(i).ok_or_else(|| {
                format!("{at}: port: 1337 + its index overflows; give it a `port`")
            })?;
            if port == 0 {
                return Err(format!(
                    "{at}: port: 0 is not an RDMA_CM port (1..=65535; default 1337 + the \
                     store's index)"
                ));
            }
            if let Some(other) = ports.insert(port, &s.name) {
                return Err(format!(
                    "{at}: port: {port} is already the port of store {other:?} (each store \
                     is its own RDMA_CM service; default ports are 1337 + the store's index)"
                ));
            }
            self.check_store_kind(s, &at)?;
            if let StoreKind::Append {
                lists: n,
                first_list,
                ..
            } = *s.kind.layout()
            {
                let (lo, hi) = (first_list as u64, first_list as u64 + n as u64);
                if let Some((l2, h2, other)) = lists.iter().find(|(l2, h2, _)| lo < *h2 && *l2 < hi)
                {
                    return Err(format!(
                        "{at}: first_list: lists {lo}..{hi} overlap store {other:?}'s lists \
                         {l2}..{h2} (a list ID must name one ring)"
                    ));
                }
                lists.push((lo, hi, &s.name));
            }
            // Anything the key checks above did not catch, with the geometry's own words.
            crate::store::layout_of(s)?;
        }
        Ok(())
    }

    /// Checks one store's kind-specific keys.
    fn check_store_kind(&self, s: &StoreConfig, at: &str) -> Result<(), String> {
        let pow2 = |key: &str, v: u32| {
            if v >= 2 && v.is_power_of_two() {
                Ok(())
            } else {
                Err(format!(
                    "{at}: {key}: must be a power of two from 2 to 2^31, not {v}"
                ))
            }
        };
        let max_n = self.collector.max_redundancy;
        let redundancy = |n: u8| {
            if n >= 1 && n <= max_n {
                Ok(())
            } else {
                Err(format!(
                    "{at}: redundancy: must be 1..={max_n} ([collector] max_redundancy), not {n}"
                ))
            }
        };
        let n = s.kind.redundancy().unwrap_or(0);
        match s.kind.layout() {
            StoreKind::KeyWrite {
                slots, slot_size, ..
            } => {
                pow2("slots", *slots)?;
                if ![8, 16, 32, 64].contains(slot_size) {
                    return Err(format!(
                        "{at}: slot_size: must be 8, 16, 32 or 64, not {slot_size}"
                    ));
                }
                redundancy(n)?;
            }
            StoreKind::KeyIncrement { slots, .. } => {
                pow2("slots", *slots)?;
                if s.kind.epoch_secs() > u32::MAX as u64 {
                    return Err(format!(
                        "{at}: epoch_secs: at most {} (0: reset only on demand)",
                        u32::MAX
                    ));
                }
                redundancy(n)?;
            }
            StoreKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                ..
            } => {
                if *lists == 0 {
                    return Err(format!("{at}: lists: must be at least 1"));
                }
                if first_list.checked_add(lists - 1).is_none() {
                    return Err(format!(
                        "{at}: first_list: lists {first_list}..{first_list}+{lists} go past \
                         2^32"
                    ));
                }
                if !(1..=32).contains(entry_size) {
                    return Err(format!(
                        "{at}: entry_size: must be 1..=32 bytes, not {entry_size}"
                    ));
                }
                if !(1..=16).contains(batch) {
                    return Err(format!("{at}: batch: must be 1..=16, not {batch}"));
                }
                if *capacity == 0 || capacity % batch != 0 {
                    return Err(format!(
                        "{at}: capacity: must be a positive multiple of batch ({batch}), not \
                         {capacity}"
                    ));
                }
            }
            StoreKind::Postcard { chunks, hops, hash } => {
                pow2("chunks", *chunks)?;
                if !(1..=dta_proto::hash::MAX_HOPS).contains(&(*hops as usize)) {
                    return Err(format!("{at}: hops: must be 1..=16, not {hops}"));
                }
                if *hash == HashProfile::Reference && *hops != 5 {
                    return Err(format!(
                        "{at}: hops: the reference hash profile needs 5, not {hops}"
                    ));
                }
                redundancy(n)?;
                crate::query::postcard::ValueSet::new(s.kind.values(), *hash)
                    .map_err(|e| format!("{at}: values: {e}"))?;
            }
            StoreKind::Sketch {
                sketch_id,
                sketch,
                epochs,
                ..
            } => {
                if let Some(other) = self.stores.iter().find(|o| {
                    o.name != s.name
                        && matches!(*o.kind.layout(), StoreKind::Sketch { sketch_id: id, .. } if id == *sketch_id)
                }) {
                    return Err(format!(
                        "{at}: sketch_id: {sketch_id} is already served by store {:?}",
                        other.name
                    ));
                }
                if !(1..=dta_proto::sketch::MAX_EPOCHS).contains(epochs) {
                    return Err(format!("{at}: epochs: must be 1..=16, not {epochs}"));
                }
                crate::store::sketch_shape(s.kind.layout())
                    .map_err(|e| format!("{at}: {e} ({} sketch)", sketch.name()))?;
            }
        }
        Ok(())
    }

    /// Bytes of memory the stores map: each region rounded up to 4 KiB pages.
    pub fn memory_needed(&self) -> Result<u64, String> {
        self.stores.iter().try_fold(0u64, |sum, s| {
            let (_, len) = crate::store::layout_of(s)?;
            Ok(sum.saturating_add(len.div_ceil(4096) * 4096))
        })
    }

    /// Checks what depends on the host: the stores' memory against `mem_total` (the host's
    /// RAM in bytes, `MemTotal` of `/proc/meminfo`; `None`: unknown, not checked). Regions are
    /// populated when the collector starts, so stores larger than the RAM can never run.
    pub fn check_host(&self, mem_total: Option<u64>) -> Result<(), String> {
        let Some(total) = mem_total else {
            return Ok(());
        };
        let need = self.memory_needed()?;
        if need > total {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            return Err(format!(
                "the stores need {need} bytes ({:.1} GiB) of memory, more than this host's \
                 {total} bytes ({:.1} GiB, MemTotal in /proc/meminfo): make slots, chunks, \
                 lists or capacity smaller (`dta-collector check` lists each store's share)",
                gib(need),
                gib(total)
            ));
        }
        Ok(())
    }
}

/// The host's RAM in bytes (`MemTotal` of `/proc/meminfo`), if it can be read.
pub fn mem_total() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_total(&s)
}

pub(super) fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut it = line["MemTotal:".len()..].split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    match it.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}
