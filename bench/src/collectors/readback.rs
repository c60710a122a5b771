//! What a database holds after a run, read back and compared with the ground truth: keys and
//! entries counted, every lookup's answer, a sample of counters and the Append lists.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dta_proto::Key;

use super::http::HttpConn;
use super::ingest::Db;
use super::lineproto::hex;
use super::*;

/// Counts what the database (as `dta ingest` wrote it into `database`) holds and reads
/// `keys` and `ctr_keys` back: (what it holds against `truth`, the lookups' latency, the
/// server's name and version).
pub fn read_back(
    db: Db,
    addr: &str,
    database: &str,
    truth: &Truth,
    keys: &[Key],
    ctr_keys: &[Key],
) -> Result<(Holds, LookupLatency, String), String> {
    let mut h = Holds {
        keywrite_expected: truth.paths.len() as u64,
        counter_expected: truth.counters.len() as u64,
        append_expected: truth.appends,
        lookups: keys.len() as u64,
        counters_checked: ctr_keys.len() as u64,
        ..Holds::default()
    };
    let t = Duration::from_secs(60);
    let mut lat = Vec::with_capacity(keys.len());
    let mut hx = [0u8; 128];
    let name;
    match db {
        Db::Redis => {
            let mut c = resp::Connection::connect(addr, t)?;
            let info = c.call(&[b"INFO", b"server"])?.unwrap_or_default();
            let version = std::str::from_utf8(&info)
                .ok()
                .and_then(|s| s.lines().find_map(|l| l.strip_prefix("redis_version:")))
                .unwrap_or("?")
                .trim()
                .to_string();
            name = format!("Redis {version}");
            h.keywrite_keys = Some(redis_scan_count(&mut c, b"kw:*")?);
            h.counter_keys = Some(redis_scan_count(&mut c, b"ctr:*")?);
            let mut k = Vec::new();
            for (&list, &n) in &truth.lists {
                ingest::redis_keys::list(list, &mut k);
                let got = c.call_int(&[b"LLEN", &k])? as u64;
                h.append_entries += got;
                h.lists_off += u64::from(got != n);
            }
            h.rows_held = Some(c.call_int(&[b"DBSIZE"])? as u64);
            for key in keys {
                ingest::redis_keys::keywrite(key.as_bytes(), &mut k);
                let t0 = Instant::now();
                let v = c.call(&[b"GET", &k])?;
                lat.push(t0.elapsed().as_nanos() as u64);
                h.lookups_ok +=
                    u64::from(v.as_deref() == truth.paths.get(key).map(|v| v.as_bytes()));
            }
            for key in ctr_keys {
                ingest::redis_keys::counter(key.as_bytes(), &mut k);
                let v = c.call(&[b"GET", &k])?;
                let n = v.and_then(|v| std::str::from_utf8(&v).ok()?.parse::<u64>().ok());
                h.counters_ok += u64::from(n == truth.counters.get(key).copied());
            }
        }
        Db::ClickHouse => {
            let mut c = HttpConn::new(addr, t)?;
            let mut q = |sql: &str| ingest::clickhouse_query(&mut c, database, sql);
            name = format!("ClickHouse {}", q("SELECT version()")?.trim());
            let num = |s: String| s.trim().parse::<u64>().map_err(|e| format!("{s:?}: {e}"));
            h.keywrite_keys = Some(num(q("SELECT uniqExact(flow) FROM paths")?)?);
            h.counter_keys = Some(num(q("SELECT uniqExact(host) FROM counters")?)?);
            let rows = num(q("SELECT count() FROM paths")?)?
                + num(q("SELECT count() FROM counters")?)?
                + num(q("SELECT count() FROM events")?)?;
            h.rows_held = Some(rows);
            let per_list = q("SELECT list, count() FROM events GROUP BY list ORDER BY list")?;
            let mut got: BTreeMap<u32, u64> = BTreeMap::new();
            for l in per_list.lines() {
                let mut f = l.split('\t');
                if let (Some(a), Some(b)) = (f.next(), f.next()) {
                    got.insert(
                        a.parse().map_err(|_| format!("{l:?}"))?,
                        b.parse().map_err(|_| format!("{l:?}"))?,
                    );
                }
            }
            h.append_entries = got.values().sum();
            h.lists_off = lists_off(&truth.lists, &got);
            for key in keys {
                let sql = format!(
                    "SELECT hex(argMax(path, at)) FROM paths WHERE flow = unhex('{}')",
                    hex(key.as_bytes(), &mut hx)
                );
                let t0 = Instant::now();
                let v = q(&sql)?;
                lat.push(t0.elapsed().as_nanos() as u64);
                let want = truth
                    .paths
                    .get(key)
                    .map(|v| hex(v.as_bytes(), &mut hx).to_ascii_uppercase());
                h.lookups_ok += u64::from(Some(v.trim().to_string()) == want);
            }
            for key in ctr_keys {
                let sql = format!(
                    "SELECT sum(bytes) FROM counters WHERE host = unhex('{}')",
                    hex(key.as_bytes(), &mut hx)
                );
                let v = q(&sql)?;
                h.counters_ok +=
                    u64::from(v.trim().parse::<u64>().ok() == truth.counters.get(key).copied());
            }
        }
        Db::InfluxDb => {
            let mut c = HttpConn::new(addr, t)?;
            let mut body = Vec::new();
            c.request("GET", "/ping", "", b"", &mut body)?;
            let mut q = |s: &str| ingest::influx_query(&mut c, database, s, false);
            let version = q("SHOW DIAGNOSTICS")
                .ok()
                .and_then(|v| influx_diag(&v, "build", "Version"))
                .unwrap_or_else(|| "?".into());
            name = format!("InfluxDB {version}");
            let card = |v: serde_json::Value| -> Option<u64> {
                v["results"][0]["series"][0]["values"][0][0].as_u64()
            };
            h.keywrite_keys = card(q("SHOW SERIES EXACT CARDINALITY FROM path")?);
            h.counter_keys = card(q("SHOW SERIES EXACT CARDINALITY FROM hostbytes")?);
            let count = |v: &serde_json::Value| -> u64 {
                v["results"][0]["series"][0]["values"][0][1]
                    .as_u64()
                    .unwrap_or(0)
            };
            let rows = count(&q("SELECT count(hops) FROM path")?)
                + count(&q("SELECT count(bytes) FROM hostbytes")?)
                + count(&q("SELECT count(entry) FROM event")?);
            h.rows_held = Some(rows);
            let per_list = q("SELECT count(entry) FROM event GROUP BY list")?;
            let mut got: BTreeMap<u32, u64> = BTreeMap::new();
            for s in per_list["results"][0]["series"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let list = s["tags"]["list"].as_str().and_then(|l| l.parse().ok());
                let n = s["values"][0][1].as_u64();
                if let (Some(l), Some(n)) = (list, n) {
                    got.insert(l, n);
                }
            }
            h.append_entries = got.values().sum();
            h.lists_off = lists_off(&truth.lists, &got);
            for key in keys {
                let s = format!(
                    "SELECT last(hops) FROM path WHERE flow = '{}'",
                    hex(key.as_bytes(), &mut hx)
                );
                let t0 = Instant::now();
                let v = q(&s)?;
                lat.push(t0.elapsed().as_nanos() as u64);
                let want = truth
                    .paths
                    .get(key)
                    .map(|v| hex(v.as_bytes(), &mut hx).to_string());
                let got = v["results"][0]["series"][0]["values"][0][1]
                    .as_str()
                    .map(str::to_string);
                h.lookups_ok += u64::from(got.is_some() && got == want);
            }
            for key in ctr_keys {
                let s = format!(
                    "SELECT sum(bytes) FROM hostbytes WHERE host = '{}'",
                    hex(key.as_bytes(), &mut hx)
                );
                let v = q(&s)?;
                let got = v["results"][0]["series"][0]["values"][0][1].as_u64();
                h.counters_ok +=
                    u64::from(got.is_some() && got == truth.counters.get(key).copied());
            }
        }
    }
    Ok((h, LookupLatency::of(lat), name))
}

/// A value of `SHOW DIAGNOSTICS`: series `series`, column `column`.
pub(super) fn influx_diag(v: &serde_json::Value, series: &str, column: &str) -> Option<String> {
    let s = v["results"][0]["series"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == series)?;
    let i = s["columns"].as_array()?.iter().position(|c| c == column)?;
    s["values"][0][i].as_str().map(str::to_string)
}

pub(super) fn lists_off(want: &BTreeMap<u32, u64>, got: &BTreeMap<u32, u64>) -> u64 {
    let mut off = want.iter().filter(|(l, n)| got.get(l) != Some(n)).count() as u64;
    off += got.keys().filter(|l| !want.contains_key(l)).count() as u64;
    off
}

/// Counts the distinct keys matching `pattern` with `SCAN` (never `KEYS`, which blocks the
/// server). `SCAN` may return a key twice (while the server rehashes): they are counted once.
pub(super) fn redis_scan_count(c: &mut resp::Connection, pattern: &[u8]) -> Result<u64, String> {
    let mut cursor = b"0".to_vec();
    let mut seen: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    loop {
        let mut cmd = Vec::new();
        resp::encode(
            &mut cmd,
            &[b"SCAN", &cursor, b"MATCH", pattern, b"COUNT", b"10000"],
        );
        c.send(&cmd)?;
        let bad = || "Redis: SCAN did not answer [cursor, [keys]]".to_string();
        if c.read_reply(|r| r == resp::Reply::Array(Some(2)))? {
            cursor = c
                .read_reply(|r| match r {
                    resp::Reply::Bulk(Some(b)) => Some(b.to_vec()),
                    _ => None,
                })?
                .ok_or_else(bad)?;
            let k = c
                .read_reply(|r| match r {
                    resp::Reply::Array(Some(k)) => Some(k),
                    _ => None,
                })?
                .ok_or_else(bad)?;
            for _ in 0..k {
                if let Some(key) = c.read_reply(|r| match r {
                    resp::Reply::Bulk(Some(b)) => Some(b.to_vec()),
                    _ => None,
                })? {
                    seen.insert(key);
                }
            }
        } else {
            return Err(bad());
        }
        if cursor == b"0" {
            return Ok(seen.len() as u64);
        }
    }
}
