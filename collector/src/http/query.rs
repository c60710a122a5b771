//! `/query/{keywrite,counter,path}/{store}/...`: one key (GET) or the keys of the body (POST,
//! [`bulk_keys`]) against a Key-Write, Key-Increment or Postcarding store, with the store's
//! own N (`n=` only repeats it unless `force=1`), the vote (`threshold`) or the copies rule.
//! The answers come from the query engine ([`crate::query`]); no routing here.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::{find_store, num, ControlState, Reply, MAX_BODY, MAX_BULK_KEYS};
use crate::query::keys::{parse_key, to_hex};
use crate::query::keywrite::{KeyWriteAnswer, Vote};
use crate::query::postcard::PathAnswer;
use crate::store::Store;
use dta_proto::hash::MAX_REDUNDANCY;
use dta_proto::Key;

/// How a query reads a store: N, whether N was forced, and the vote or copies rule.
#[derive(Debug, Clone, Copy)]
struct QueryRule {
    /// Replicas read.
    n: usize,
    /// The store's own N, if it records one.
    store_n: Option<u8>,
    /// `n` differs from the store's N (only with `force`).
    forced: bool,
    /// Key-Write: plurality or consensus.
    vote: Vote,
    /// Postcarding: agreeing valid chunks needed.
    copies: u8,
}

/// Parameters each query kind takes.
fn known_params(kind: &str) -> &'static [&'static str] {
    match kind {
        "keywrite" => &["n", "threshold", "force"],
        "counter" => &["n", "force"],
        _ => &["n", "copies", "force"],
    }
}

/// A `1..=max` parameter; `None` if absent.
fn small_param(
    p: &HashMap<String, String>,
    k: &str,
    max: usize,
    why: &str,
) -> Result<Option<u8>, Reply> {
    match num::<u64>(p, k)? {
        None => Ok(None),
        Some(v) if (1..=max as u64).contains(&v) => Ok(Some(v as u8)),
        Some(v) => Err(Reply::error(
            400,
            format!("parameter {k}={v} is out of range: {k} must be 1..={max}{why}"),
        )),
    }
}

/// The store (of the right kind for `kind`) and how to read it, from the request's parameters.
fn query_rule<'a>(
    state: &'a ControlState,
    kind: &str,
    store: &str,
    p: &HashMap<String, String>,
) -> Result<(&'a Store, QueryRule), Reply> {
    let want = match kind {
        "keywrite" => "keywrite",
        "counter" => "keyincrement",
        "path" => "postcard",
        k => {
            return Err(Reply::error(
                404,
                format!("no query kind {k:?} (keywrite, counter, path)"),
            ))
        }
    };
    let s = find_store(state, store)?;
    if s.meta.kind.name() != want {
        return Err(Reply::error(
            400,
            format!(
                "store {:?} is a {} store; a {kind} query needs a {want} store",
                s.name(),
                s.meta.kind.name()
            ),
        ));
    }
    let known = known_params(kind);
    if let Some(k) = p.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(Reply::error(
            400,
            format!(
                "unknown parameter {k:?} for a {kind} query (known: {})",
                known.join(", ")
            ),
        ));
    }
    let force = match p.get("force").map(String::as_str) {
        None | Some("0" | "false" | "no") => false,
        Some("" | "1" | "true" | "yes") => true,
        Some(v) => return Err(Reply::error(400, format!("force={v:?}: use 1 or 0"))),
    };
    let store_n = s.redundancy().map(|r| r.get());
    let default_n = store_n.unwrap_or(state.config.collector.max_redundancy);
    let n = small_param(p, "n", MAX_REDUNDANCY, "")?.unwrap_or(default_n);
    let forced = store_n.is_some_and(|sn| sn != n);
    if forced && !force {
        let sn = store_n.unwrap_or_default();
        return Err(Reply::error(
            400,
            format!(
                "store {:?} is written with N={sn}; n={n} would read {} (leave n out to read \
                 the store's N, or add force=1 to read {n} anyway)",
                s.name(),
                if n > sn {
                    "slots no report wrote: a count-min of 0, a vote or path among empty slots"
                } else {
                    "fewer copies than were written"
                }
            ),
        ));
    }
    let at_most_n = format!(" (at most n={n}: only n slots are read)");
    let vote = match small_param(p, "threshold", n as usize, &at_most_n)? {
        Some(t) => Vote::Consensus(t),
        None => Vote::Plurality,
    };
    let copies = small_param(p, "copies", n as usize, &at_most_n)?.unwrap_or(1);
    if want == "postcard" && s.postcard().is_some_and(|v| v.values.is_empty()) {
        return Err(Reply::error(
            409,
            format!(
                "store {:?} has no value set: configure values = [[lo, hi], ...]",
                s.name()
            ),
        ));
    }
    Ok((
        s,
        QueryRule {
            n: n as usize,
            store_n,
            forced,
            vote,
            copies,
        },
    ))
}

/// The answer for one key: `{"store", "key", "n", ["redundancy"], ["forced"], "result", ...}`.
fn answer(s: &Store, rule: &QueryRule, key: &Key) -> Value {
    let mut out = json!({ "store": s.name(), "key": to_hex(key.as_bytes()), "n": rule.n });
    let o = out.as_object_mut().expect("object");
    if let Some(sn) = rule.store_n {
        o.insert("redundancy".into(), sn.into());
    }
    if rule.forced {
        o.insert("forced".into(), true.into());
    }
    if let Some(v) = s.keywrite() {
        match v.query(key, rule.n, rule.vote) {
            KeyWriteAnswer::Value {
                value,
                votes,
                matches,
            } => {
                o.insert("result".into(), "value".into());
                o.insert("value".into(), to_hex(value.as_bytes()).into());
                o.insert("votes".into(), votes.into());
                o.insert("matches".into(), matches.into());
            }
            KeyWriteAnswer::Empty => {
                o.insert("result".into(), "empty".into());
                o.insert("matches".into(), 0.into());
            }
            KeyWriteAnswer::Conflict {
                matches,
                best_votes,
            } => {
                o.insert("result".into(), "conflict".into());
                o.insert("matches".into(), matches.into());
                o.insert("votes".into(), best_votes.into());
            }
        }
    } else if let Some(v) = s.counter() {
        let a = v.query(key, rule.n);
        o.insert("estimate".into(), a.estimate.into());
        o.insert("counters".into(), json!(a.counters()));
        o.insert("epoch".into(), json!(s.epochs.info()));
    } else if let Some(v) = s.postcard() {
        match v.query(key, rule.n, rule.copies) {
            PathAnswer::Path { path, copies } => {
                o.insert("result".into(), "path".into());
                o.insert("path".into(), json!(path.hops()));
                o.insert("copies".into(), copies.into());
            }
            PathAnswer::Empty => {
                o.insert("result".into(), "empty".into());
            }
            PathAnswer::Conflict { valid } => {
                o.insert("result".into(), "conflict".into());
                o.insert("valid".into(), valid.into());
            }
        }
    }
    out
}

pub(super) fn query(
    state: &ControlState,
    kind: &str,
    store: &str,
    key: &str,
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    let (s, rule) = query_rule(state, kind, store, p)?;
    let key = parse_key(key).map_err(|e| Reply::error(400, e))?;
    Ok(Reply::json(200, answer(s, &rule, &key)))
}

/// The keys of a bulk query's body: a JSON array of strings, or one key per line (or the
/// answer refusing them).
pub fn bulk_keys(body: &[u8]) -> Result<Vec<String>, Reply> {
    if body.len() > MAX_BODY {
        return Err(Reply::error(
            413,
            format!(
                "the body is longer than {MAX_BODY} bytes: split the keys over several requests"
            ),
        ));
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| Reply::error(400, format!("the body is not UTF-8: {e}")))?;
    let keys: Vec<String> = if text.trim_start().starts_with('[') {
        serde_json::from_str(text).map_err(|e| {
            Reply::error(
                400,
                format!("the body is not a JSON array of key strings: {e}"),
            )
        })?
    } else {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect()
    };
    if keys.len() > MAX_BULK_KEYS {
        return Err(Reply::error(
            413,
            format!(
                "{} keys, at most {MAX_BULK_KEYS} per request: split them over several requests",
                keys.len()
            ),
        ));
    }
    if keys.is_empty() {
        return Err(Reply::error(
            400,
            "no keys: POST a JSON array of keys or one key per line",
        ));
    }
    Ok(keys)
}

/// `POST /query/{kind}/{store}`: one JSON line per key of the body, in order.
pub(super) fn query_bulk(
    state: &ControlState,
    kind: &str,
    store: &str,
    body: &[u8],
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    let (s, rule) = query_rule(state, kind, store, p)?;
    let keys = bulk_keys(body)?;
    let mut out = String::with_capacity(keys.len() * 128);
    for k in &keys {
        let line = match parse_key(k) {
            Ok(key) => answer(s, &rule, &key),
            Err(e) => json!({ "input": k, "error": e }),
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
