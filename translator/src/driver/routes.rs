//! What the workers' pipelines are built from: the collectors' published metadata
//! ([`load_collectors`]), the `[routing]` rules resolved against their stores
//! ([`resolve_routes`]), the start-up checks (postcard redundancy, Sketch-Merge's single
//! worker, report kinds no store serves) and each worker's [`PipelineConfig`] and collector
//! targets ([`pipeline_for`]). Pure functions of the configuration: no sockets, no threads.

use std::net::{Ipv4Addr, SocketAddrV4};

use dta_proto::meta::{CollectorMeta, StoreKind, StoreMeta};
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{Psn, Qpn};
use dta_proto::wire::report::ParseConfig;

use crate::config::TranslatorConfig;
use crate::datapath::pipeline::{CollectorTarget, PipelineConfig, QpBinding, RateLimit, Route};
use crate::datapath::qp::QpTuning;

/// Loads every collector's published metadata.
pub fn load_collectors(cfg: &TranslatorConfig) -> Result<Vec<(String, CollectorMeta)>, String> {
    let mut out = Vec::new();
    for c in cfg.collectors.iter().filter(|c| c.endpoint.cm.is_none()) {
        let Some(path) = &c.endpoint.metadata else {
            return Err(format!(
                "collector {:?}: no `metadata` file given (RDMA_CM set-up is configured with `cm`)",
                c.endpoint.name
            ));
        };
        let s = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "collector {:?}: cannot read {}: {e} (is the collector running?)",
                c.endpoint.name,
                path.display()
            )
        })?;
        let m: CollectorMeta = serde_json::from_str(&s)
            .map_err(|e| format!("collector {:?}: {}: {e}", c.endpoint.name, path.display()))?;
        out.push((c.endpoint.name.clone(), m));
    }
    Ok(out)
}

/// Resolves the `[routing]` rules against the flattened store list (collector order, then
/// store order).
pub fn resolve_routes(
    cfg: &TranslatorConfig,
    collectors: &[(String, CollectorMeta)],
) -> Result<(Route, Route, Route), String> {
    let flat: Vec<(String, String, &StoreKind, Ipv4Addr)> = collectors
        .iter()
        .flat_map(|(cn, m)| {
            m.stores
                .iter()
                .map(move |s| (cn.clone(), s.name.clone(), &s.kind, *m.roce.ip()))
        })
        .collect();
    let resolve =
        |what: &str, rule: &str| -> Result<Route, String> {
            let of_kind: Vec<usize> = flat
                .iter()
                .enumerate()
                .filter(|(_, (_, _, k, _))| k.name() == what)
                .map(|(i, _)| i)
                .collect();
            let find = |name: &str| -> Option<usize> {
                flat.iter().position(|(cn, sn, k, _)| {
                    k.name() == what && (sn == name || format!("{cn}/{sn}") == name)
                })
            };
            Ok(match rule {
                "none" => Route::None,
                "single" => of_kind.first().map_or(Route::None, |&i| Route::Single(i)),
                "key-hash" if of_kind.is_empty() => Route::None,
                "key-hash" => Route::ByKeyHash(of_kind),
                "destination" => {
                    let mut v = Vec::new();
                    for (ip, target) in &cfg.routing.destinations {
                        let ip: Ipv4Addr = ip
                            .parse()
                            .map_err(|_| format!("routing.destinations: bad IP {ip:?}"))?;
                        if let Some(i) = find(target) {
                            v.push((ip, i));
                        }
                    }
                    // Reports addressed to a collector's own IP go to that collector's store.
                    for &i in &of_kind {
                        if !v.iter().any(|(ip, _)| *ip == flat[i].3) {
                            v.push((flat[i].3, i));
                        }
                    }
                    Route::ByDestination(v)
                }
                r => {
                    let name = r.strip_prefix("single:").unwrap_or(r);
                    Route::Single(find(name).ok_or_else(|| {
                        format!("routing.{what}: no {what} store called {name:?}")
                    })?)
                }
            })
        };
    Ok((
        resolve("keywrite", &cfg.routing.keywrite)?,
        resolve("keyincrement", &cfg.routing.keyincrement)?,
        resolve("postcard", &cfg.routing.postcard)?,
    ))
}

/// A `[postcard] redundancy` that differs from the N a postcard store records is an error:
/// the store's queries read its own N, so writing another would only waste copies or leave
/// queries reading chunks nobody wrote.
fn check_postcard_redundancy(
    cfg: &TranslatorConfig,
    collectors: &[(String, CollectorMeta)],
) -> Result<(), String> {
    let Some(want) = cfg.postcard.redundancy else {
        return Ok(());
    };
    for (cn, m) in collectors {
        for s in &m.stores {
            if let (StoreKind::Postcard { .. }, Some(n)) = (&s.kind, s.redundancy) {
                if n.get() != want {
                    return Err(format!(
                        "collector {cn:?} store {:?} is written with redundancy {n}, but \
                         [postcard] redundancy = {want}: remove the setting (a store's own N \
                         applies) or make them agree",
                        s.name
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Sketch-Merge needs one worker: every worker merges the switches whose reports reach it
/// into its own copy of a sketch and writes it to the same collector memory, so with several
/// workers each column in memory would hold only one worker's switches (the last writer's).
/// Refused at start, naming the store, instead of writing wrong sketches.
pub(super) fn check_sketch_workers(
    collectors: &[(String, CollectorMeta)],
    workers: usize,
) -> Result<(), String> {
    if workers <= 1 {
        return Ok(());
    }
    for (cn, m) in collectors {
        if let Some(s) = m
            .stores
            .iter()
            .find(|s| matches!(s.kind, StoreKind::Sketch { .. }))
        {
            return Err(format!(
                "collector {cn:?} store {:?} is a Sketch-Merge store, which one translator worker \
                 merges (with {workers} workers each would write its own partial sketch over the \
                 others'): set [translator] workers = 1, or give the sketches a translator of \
                 their own",
                s.name
            ));
        }
    }
    Ok(())
}

/// What the translator will drop for want of a store, one sentence per report kind that no
/// store serves (a kind routed `"none"` on purpose is not named). Logged as warnings at start
/// (every such report is counted as `drop_no_store` or `drop_unknown_list`).
pub fn unserved_report_kinds(
    cfg: &TranslatorConfig,
    collectors: &[(String, CollectorMeta)],
) -> Vec<String> {
    let stores: Vec<&StoreMeta> = collectors.iter().flat_map(|(_, m)| &m.stores).collect();
    let mut out = Vec::new();
    for (what, rule, report) in [
        ("keywrite", &cfg.routing.keywrite, "Key-Write"),
        ("keyincrement", &cfg.routing.keyincrement, "Key-Increment"),
        ("postcard", &cfg.routing.postcard, "Postcarding"),
    ] {
        if rule != "none" && !stores.iter().any(|s| s.kind.name() == what) {
            out.push(format!(
                "no {what} store among the collectors' stores: every {report} report will be \
                 dropped (drop_no_store); connect its store's port, or set routing.{what} = \
                 \"none\" if none is meant to be served"
            ));
        }
    }
    if !stores
        .iter()
        .any(|s| matches!(s.kind, StoreKind::Append { .. }))
    {
        out.push(
            "no append store among the collectors' stores: every Append report will be \
             dropped (drop_unknown_list); connect its store's port"
                .into(),
        );
    }
    out
}

/// Builds worker `w`'s pipeline configuration and collector targets.
pub fn pipeline_for(
    cfg: &TranslatorConfig,
    w: usize,
    local: SocketAddrV4,
    collectors: &[(String, CollectorMeta)],
) -> Result<(PipelineConfig, Vec<CollectorTarget>), String> {
    let t = &cfg.translator;
    let (route_keywrite, route_keyincrement, route_postcard) = resolve_routes(cfg, collectors)?;
    let workers = t.workers;
    let rate = RateLimit {
        messages_per_sec: cfg.overload.messages_per_sec.div_ceil(workers as u64),
        burst: cfg.overload.burst.div_ceil(workers as u64).max(1),
        low_reserve: cfg.overload.low_reserve,
        medium_reserve: cfg.overload.medium_reserve,
    };
    let pc = PipelineConfig {
        worker: w,
        workers,
        parse: ParseConfig {
            reference_variant: cfg.reports.reference_variant,
            accept_reference: cfg.reports.accept_reference,
            accept_extended: cfg.reports.accept_extended,
            reference_priority: cfg.reports.reference_priority,
        },
        max_redundancy: t.max_redundancy,
        l2_frames: false,
        local,
        local_mac: t
            .mac
            .parse()
            .map_err(|_| format!("translator.mac: bad MAC {:?}", t.mac))?,
        nack_port: t.nack_port,
        append_flush_ns: cfg.append.flush_delay_us * 1000,
        postcard_flush_ns: cfg.postcard.flush_delay_us * 1000,
        postcard_cache_slots: cfg.postcard.cache_slots,
        postcard_redundancy: cfg.postcard.redundancy.unwrap_or(1),
        qp: QpTuning {
            ack_every: cfg.reliability.ack_every,
            ack_timeout_ns: cfg.reliability.ack_timeout_us * 1000,
            rto_min_ns: cfg.reliability.rto_min_us * 1000,
            rto_max_ns: cfg.reliability.rto_max_us * 1000,
            broken_after_ns: cfg.reliability.broken_after_ms * 1_000_000,
            retransmit_window: t.retransmit_window,
            max_outstanding: cfg.reliability.max_outstanding_psns,
        },
        rate,
        backlog: cfg.overload.backlog,
        max_reporters: t.max_reporters,
        route_keywrite,
        route_keyincrement,
        route_postcard,
        sketch: crate::datapath::primitive::SketchSettings {
            expected_switches: cfg.sketch.expected_switches,
            max_switches: cfg.sketch.max_switches,
            flush_ns: cfg.sketch.flush_delay_ms * 1_000_000,
            epoch_quorum: cfg.sketch.epoch_quorum.unwrap_or(0),
            idle_epochs: cfg.sketch.idle_epochs,
            late_epochs: cfg.sketch.late_epochs,
            switches: cfg
                .sketch
                .switch
                .iter()
                .map(|w| crate::datapath::primitive::SketchSwitch {
                    id: w.id,
                    addr: w.address,
                })
                .collect(),
        },
    };
    check_postcard_redundancy(cfg, collectors)?;
    let mut targets = Vec::new();
    for (cn, m) in collectors {
        let mac: MacAddr = m
            .mac
            .parse()
            .map_err(|_| format!("collector {cn:?}: bad MAC {:?}", m.mac))?;
        let mut stores = Vec::new();
        for s in &m.stores {
            let q = s.qps.get(w).ok_or_else(|| {
                format!("collector {cn:?} store {:?} prepared {} QP(s), but the translator runs {workers} workers: set `workers = {workers}` in the collector's [[static_peer]]", s.name, s.qps.len())
            })?;
            stores.push((
                s.clone(),
                QpBinding {
                    local_qpn: Qpn::new(q.peer_qpn),
                    remote_qpn: Qpn::new(q.qpn),
                    start_psn: Psn::new(q.psn),
                },
            ));
        }
        targets.push(CollectorTarget {
            roce: m.roce,
            mac,
            stores,
        });
    }
    Ok((pc, targets))
}
