//! `/query/sketch/{store}/...`: point estimates, HyperLogLog cardinality, completeness and
//! epochs of a Sketch store (GET), point estimates of the body's keys and heavy hitters among
//! them (POST). The answers come from [`crate::query::sketch`]; no routing here.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::{bulk_keys, find_store, num, percent_decode, ControlState, Reply};
use crate::query::keys::{parse_key, to_hex};

/// The Sketch store `store`, the epoch a request asks for (`epoch=`, else the newest) and its
/// view.
fn sketch_target<'a>(
    state: &'a ControlState,
    store: &str,
    p: &HashMap<String, String>,
    known: &[&str],
) -> Result<(crate::query::sketch::SketchView<'a>, u32), Reply> {
    let s = find_store(state, store)?;
    let v = s.sketch().ok_or_else(|| {
        Reply::error(
            400,
            format!(
                "store {:?} is a {} store; a sketch query needs a sketch store",
                s.name(),
                s.meta.kind.name()
            ),
        )
    })?;
    if let Some(k) = p.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(Reply::error(
            400,
            format!(
                "unknown parameter {k:?} for this sketch query (known: {})",
                known.join(", ")
            ),
        ));
    }
    let epoch = match num::<u32>(p, "epoch")? {
        Some(e) => e,
        None => v.latest_epoch().ok_or_else(|| {
            Reply::error(404, format!("store {:?}: no epoch written yet", s.name()))
        })?,
    };
    Ok((v, epoch))
}

fn completeness_json(c: &crate::query::sketch::Completeness) -> Value {
    json!({
        "epoch": c.epoch,
        "columns": c.columns,
        "written": c.written,
        "complete": c.complete,
        "min_merged": c.min_merged,
        "max_merged": c.max_merged,
        "expected_switches": c.expected,
        "ratio": c.ratio(),
        "in_transition": c.in_transition,
    })
}

/// `GET /query/sketch/{store}/...`.
pub(super) fn sketch_query(
    state: &ControlState,
    store: &str,
    rest: &[&str],
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    use dta_proto::sketch::SketchKind;
    match rest {
        ["epochs"] => {
            let (v, _) = sketch_target(state, store, &HashMap::new(), &[])?;
            Ok(Reply::json(200, json!({ "epochs": v.epochs() })))
        }
        ["completeness"] => {
            let (v, e) = sketch_target(state, store, p, &["epoch"])?;
            Ok(Reply::json(
                200,
                completeness_json(&v.read_epoch(e).completeness()),
            ))
        }
        ["cardinality"] => {
            let (v, e) = sketch_target(state, store, p, &["epoch"])?;
            if v.kind() != SketchKind::HyperLogLog {
                return Err(Reply::error(
                    400,
                    format!("a {} sketch has no cardinality estimate", v.kind().name()),
                ));
            }
            let es = v.read_epoch(e);
            Ok(Reply::json(
                200,
                json!({
                    "epoch": e,
                    "estimate": es.cardinality(),
                    "registers": v.layout.shape().columns,
                    "completeness": completeness_json(&es.completeness()),
                }),
            ))
        }
        ["point", key @ ..] if !key.is_empty() => {
            let (v, e) = sketch_target(state, store, p, &["epoch"])?;
            if v.kind() == SketchKind::HyperLogLog {
                return Err(Reply::error(
                    400,
                    "a hyperloglog sketch has no point query (ask for /cardinality)",
                ));
            }
            let key =
                parse_key(&percent_decode(&key.join("/"))).map_err(|e| Reply::error(400, e))?;
            let (est, torn) = v.point_read(&key, e);
            Ok(Reply::json(
                200,
                json!({ "key": to_hex(key.as_bytes()), "epoch": e, "estimate": est,
                        "in_transition": torn }),
            ))
        }
        _ => Err(Reply::error(
            400,
            "sketch queries: GET /query/sketch/{store}/point/{key}, /cardinality, \
             /completeness or /epochs; POST keys to /query/sketch/{store} or \
             /query/sketch/{store}/heavy",
        )),
    }
}

/// `POST /query/sketch/{store}` (point estimates, JSON Lines) and `.../heavy` (the
/// candidates of the body whose estimate reaches `threshold`, largest first).
pub(super) fn sketch_bulk(
    state: &ControlState,
    store: &str,
    heavy: bool,
    body: &[u8],
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    let known: &[&str] = if heavy {
        &["epoch", "threshold"]
    } else {
        &["epoch"]
    };
    let (v, e) = sketch_target(state, store, p, known)?;
    if v.kind() == dta_proto::sketch::SketchKind::HyperLogLog {
        return Err(Reply::error(
            400,
            "a hyperloglog sketch has no point query (ask for /cardinality)",
        ));
    }
    let keys = bulk_keys(body)?;
    let es = v.read_epoch(e);
    if heavy {
        let threshold = num::<i64>(p, "threshold")?
            .ok_or_else(|| Reply::error(400, "heavy hitters need threshold="))?;
        let mut parsed = Vec::with_capacity(keys.len());
        for k in &keys {
            parsed.push(parse_key(k).map_err(|err| Reply::error(400, format!("{k:?}: {err}")))?);
        }
        let hh: Vec<Value> = es
            .heavy_hitters(&parsed, threshold)
            .into_iter()
            .map(|(k, est)| json!({ "key": to_hex(k.as_bytes()), "estimate": est }))
            .collect();
        return Ok(Reply::json(
            200,
            json!({ "epoch": e, "threshold": threshold, "candidates": keys.len(), "heavy": hh,
                    "columns_in_transition": es.in_transition }),
        ));
    }
    let mut out = String::with_capacity(keys.len() * 64);
    for k in &keys {
        let line = match parse_key(k) {
            Ok(key) => json!({ "key": to_hex(key.as_bytes()), "epoch": e,
                               "estimate": es.point(&key),
                               "in_transition": es.touches_transition(&key) }),
            Err(err) => json!({ "input": k, "error": err }),
        };
        let _ = writeln!(out, "{line}");
    }
    Ok(Reply {
        status: 200,
        content_type: "application/x-ndjson",
        headers: vec![("X-Dta-Keys", keys.len().to_string())],
        body: out,
    })
}
