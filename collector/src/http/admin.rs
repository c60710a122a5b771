//! `/stores`, `/stats` and `POST /epoch/{store}`, and the admin-token gate the admin
//! endpoints pass. Reads the stores and the RNIC thread's published snapshot (under its lock,
//! never the RNIC thread itself); resets a Key-Increment store's epoch. No routing here.

use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use super::{find_store, ControlState, Reply, ESTIMATE_SAMPLES};
use crate::rnic::counters::RnicCounters;
use dta_http::Access;

/// Admits the admin token only: 401 without credentials, 403 for a basic-auth user or when
/// no admin token is configured.
pub(super) fn admin(state: &ControlState, access: &Access) -> Result<(), Reply> {
    match access {
        Access::Admin => Ok(()),
        _ if !state.admin_enabled => Err(Reply::error(
            403,
            "admin endpoints are disabled: configure [collector] admin_token_file",
        )),
        Access::User(u) => Err(Reply::error(
            403,
            format!("user {u:?} may read but not administer: send the admin bearer token"),
        )),
        Access::Anonymous => {
            let mut r = Reply::error(401, "this endpoint needs the admin bearer token");
            r.headers
                .push(("WWW-Authenticate", "Bearer realm=\"dta\"".to_string()));
            Err(r)
        }
    }
}

pub(super) fn epoch(state: &ControlState, store: &str) -> Result<Reply, Reply> {
    let s = find_store(state, store)?;
    if s.counter().is_none() {
        return Err(Reply::error(
            400,
            format!("store {:?} is not a Key-Increment store", s.name()),
        ));
    }
    let e = s.epochs.reset(&s.region);
    log::info!("store {:?}: epoch {} started on demand", s.name(), e.epoch);
    Ok(Reply::json(200, json!({ "store": s.name(), "epoch": e })))
}

/// The stores. The RDMA coordinates (address, R_Key, QPNs and PSNs) let anyone on the fabric
/// write into a store, so only `admin` sees them.
pub(super) fn stores_json(state: &ControlState, admin: bool) -> Value {
    let n = state.config.collector.max_redundancy;
    Value::Array(
        state
            .stores
            .iter()
            .map(|s| {
                let mut v = json!({
                    "name": s.name(),
                    "kind": s.meta.kind.name(),
                    "port": s.port,
                    "region_bytes": s.meta.len,
                    "memory_bytes": s.memory_bytes(),
                    "backing": s.region.backing().to_string(),
                    "meta": s.meta,
                    "estimate": s.estimate(ESTIMATE_SAMPLES, n),
                });
                if !admin {
                    if let Some(m) = v["meta"].as_object_mut() {
                        for secret in ["addr", "rkey", "qps"] {
                            m.remove(secret);
                        }
                    }
                }
                if s.counter().is_some() {
                    v["epoch"] = json!(s.epochs.info());
                }
                if let Some(n) = s.redundancy() {
                    v["redundancy"] = json!(n.get());
                }
                if s.postcard().is_some() {
                    v["values"] = json!(s.values.ranges());
                }
                v
            })
            .collect(),
    )
}

fn counters_json(c: &RnicCounters) -> Value {
    Value::Object(
        c.iter()
            .map(|(i, v)| (i.name.to_string(), v.into()))
            .collect(),
    )
}

/// Counters and connections; QPNs only for `admin` (with the R_Key they are what a forged
/// write needs).
pub(super) fn stats_json(state: &ControlState, admin: bool) -> Value {
    let p = state.published.lock().expect("publisher lock");
    let qpn = |q: u32| if admin { json!(q) } else { Value::Null };
    json!({
        "roce": state.roce.to_string(),
        "uptime_seconds": state.started.elapsed().as_secs_f64(),
        "http_requests": state.requests.load(Ordering::Relaxed),
        "immediate_events": p.immediate_events,
        "rx_bursts": p.rx_bursts,
        "rx_coalesce_waits": p.rx_coalesce_waits,
        "recent_immediate": p.recent_events.iter().rev().filter_map(|c| match c {
            crate::rnic::responder::Completion::WriteWithImm { qpn, imm, len } => {
                Some(json!({ "qpn": qpn.value(), "imm": imm, "len": len }))
            }
            _ => None,
        }).take(16).collect::<Vec<_>>(),
        "rnic": counters_json(&p.counters),
        "cm": p.cm.iter().map(|(i, v)| (i.name.to_string(), Value::from(v))).collect::<serde_json::Map<String, Value>>(),
        "connections": p.connections.iter().map(|(port, peer, q, up)| json!({ "port": port, "peer": peer.to_string(), "qpn": qpn(*q), "established": up })).collect::<Vec<_>>(),
        "qps": p.per_qp.iter().map(|(q, c)| json!({ "qpn": qpn(*q), "counters": counters_json(c) })).collect::<Vec<_>>(),
        "stores": state.stores.iter().map(|s| json!({
            "name": s.name(), "kind": s.meta.kind.name(), "memory_bytes": s.memory_bytes(),
        })).collect::<Vec<_>>(),
    })
}
