//! History and analytics: `dta-collector export` streams what a running collector holds into
//! ClickHouse.
//!
//! # Data flow
//! ```text
//!  collector ──control API (/tail, /query)──▶ Exporter (one thread) ──HTTP POST RowBinary──▶ ClickHouse
//!                                                  │
//!                                                  └── state_file (cursor), /metrics
//! ```
//! The exporter is a client of the collector's control API, in its own process: it reads the
//! memory the query engine reads, never touches the RNIC thread, and the RDMA datapath writes
//! without the collector's CPU anyway. It exports
//! - every entry of every sequenced Append list, once ([`Exporter::poll_append`]): it asks
//!   `GET /tail/{store}` for the lists' heads and tails only the lists that moved;
//! - every `snapshot_secs`, the active keys' Key-Increment estimates, Key-Write answers and
//!   sketch point estimates, each sketch store's newest epoch (completeness, HyperLogLog
//!   cardinality), and with a `[pull]` section the newest snapshot of every agent's blocks
//!   (ZERO mode, `GET /pull`) ([`Exporter::snapshot`]).
//!
//! # Exactly once
//! An Append row's identity is `(store, list, generation, seq, idx)`, its place in the
//! collector, so the same entry read twice is the same row. The exporter keeps, per list, the
//! position of the last row ClickHouse acknowledged ([`cursor::ListPos`]), in memory and in
//! the state file, written atomically after the acknowledgement. An INSERT carries at most
//! [`config::MAX_BATCH_ROWS`] rows into one unpartitioned table, which ClickHouse writes as one
//! part: all of it or none. So:
//! - at start, the cursor is the larger of the state file's and ClickHouse's own
//!   (`max(seq << 16 | idx)` per list and generation): an INSERT acknowledged just before a
//!   crash, whose cursor never reached the file, is not sent again;
//! - after a failed INSERT (refused, cut, timed out: it may have landed), the exporter asks
//!   ClickHouse the same question before sending it again and drops the rows already there;
//! - rows at or before the cursor are dropped when read.
//!
//! The ReplacingMergeTree tables (`collector/clickhouse/schema.sql`) are a second line of
//! defence: a duplicate that got past the above (two exporters on one state, a hand-edited
//! state file) collapses on merge and is invisible with `FINAL`.
//!
//! Entries the collector's ring overwrote before the exporter read them are lost, not
//! duplicated, and counted (`dta_export_lost_batches_total`); the ring is the only buffer, so
//! a long ClickHouse outage costs the oldest entries first.
//!
//! # Panic contract
//! Nothing the collector or ClickHouse answers can panic the exporter; every failure is a
//! logged, counted error followed by a retry with exponential back-off.

pub mod clickhouse;
pub mod config;
pub mod cursor;
pub mod metrics;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::client::Endpoint;
use crate::config::CollectorConfig;
use clickhouse::{ChError, ClickHouse, RowBinary};
use config::ClickHouseExport;
use cursor::{list_key, ListPos, State};
use dta_proto::meta::StoreKind;
use metrics::{ExportMetrics, Source};

/// The tables, as `collector/clickhouse/schema.sql` creates them.
pub const SCHEMA: &str = include_str!("../../clickhouse/schema.sql");

/// Columns of `append_entries`, in RowBinary order.
const APPEND_COLUMNS: &str = "store, list, generation, seq, idx, entry, exported_at";

/// The snapshot state's name for the `[pull]` agents.
const PULL_SNAPSHOT: &str = "/pull";

/// The first wait after an error; it doubles up to `max_backoff_ms`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Index of a table in [`metrics::TABLES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Append = 0,
    Counter = 1,
    KeyWrite = 2,
    SketchPoints = 3,
    SketchEpochs = 4,
    Pulled = 5,
}

impl Table {
    fn name(self) -> &'static str {
        metrics::TABLES[self as usize]
    }

    fn columns(self) -> &'static str {
        match self {
            Table::Append => APPEND_COLUMNS,
            Table::Counter => "snapshot_time, store, key, epoch, estimate",
            Table::KeyWrite => "snapshot_time, store, key, result, value, votes, matches",
            Table::SketchPoints => "snapshot_time, store, epoch, key, estimate",
            Table::SketchEpochs => {
                "snapshot_time, store, epoch, kind, cardinality, columns, written, complete, ratio"
            }
            Table::Pulled => "snapshot_time, agent, block, idx, seq, value",
        }
    }
}

/// One Append entry read from the collector, waiting for its INSERT.
#[derive(Clone, Copy)]
struct AppendRow {
    store: u16,
    list: u32,
    at: ListPos,
    len: u8,
    entry: [u8; 32],
}

/// How far one list is.
#[derive(Debug, Clone, Copy, Default)]
struct ListCursor {
    /// The last row ClickHouse acknowledged.
    committed: ListPos,
    /// The generation being read.
    generation: u32,
    /// The next batch to ask the collector for.
    read_seq: u64,
    /// The newest batch at the last look.
    head: u64,
}

/// A sequenced Append store the exporter follows.
#[derive(Debug, Clone)]
struct AppendStore {
    name: String,
    first_list: u32,
    /// Entries per batch.
    batch: u32,
    lists: Vec<ListCursor>,
}

/// What a snapshot reads from a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SnapshotKind {
    Counter,
    KeyWrite,
    /// `true`: HyperLogLog (cardinality, no point queries).
    Sketch(bool),
    /// The `[pull]` section's agents (`GET /pull`).
    Pull,
}

#[derive(Debug, Clone)]
struct SnapshotStore {
    name: String,
    kind: SnapshotKind,
    keys: Option<std::path::PathBuf>,
}

/// Whether to go on: `Err` ends the exporter with a message.
type Step<T> = Result<T, String>;

/// The exporter: one collector, one ClickHouse database.
pub struct Exporter {
    cfg: ClickHouseExport,
    collector: Endpoint,
    ch: ClickHouse,
    appends: Vec<AppendStore>,
    snaps: Vec<SnapshotStore>,
    state: State,
    pending: Vec<AppendRow>,
    rows: RowBinary,
    metrics: Arc<ExportMetrics>,
    backoff: Duration,
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// SQL string literal (the names are checked store names, but quote them anyway).
fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

impl Exporter {
    /// An exporter for `cfg`'s `[export.clickhouse]`, reading the collector through
    /// `collector`. Fails (with the reason) when the section is missing or the password file
    /// cannot be read.
    pub fn new(
        cfg: &CollectorConfig,
        collector: Endpoint,
        metrics: Arc<ExportMetrics>,
    ) -> Result<Exporter, String> {
        let ch_cfg = cfg.export.clickhouse.clone().ok_or(
            "no [export.clickhouse] section in the configuration (see \
             collector/collector.example.toml)",
        )?;
        let ch = ClickHouse::from_config(&ch_cfg)?;
        let mut appends = Vec::new();
        let mut snaps = Vec::new();
        for s in &cfg.stores {
            let keys = ch_cfg
                .keys
                .iter()
                .find(|k| k.store == s.name)
                .map(|k| k.file.clone());
            match s.kind.layout() {
                StoreKind::Append {
                    lists,
                    first_list,
                    batch,
                    format,
                    ..
                } => {
                    let chosen = ch_cfg
                        .append_stores
                        .as_ref()
                        .is_none_or(|a| a.contains(&s.name));
                    if *format != dta_proto::layout::AppendFormat::Sequenced {
                        if chosen {
                            log::warn!(
                                "store {:?}: reference-format Append lists carry no sequence \
                                 numbers and are not exported",
                                s.name
                            );
                        }
                        continue;
                    }
                    if chosen {
                        appends.push(AppendStore {
                            name: s.name.clone(),
                            first_list: *first_list,
                            batch: *batch,
                            lists: vec![ListCursor::default(); *lists as usize],
                        });
                    }
                }
                StoreKind::KeyIncrement { .. } => snaps.push(SnapshotStore {
                    name: s.name.clone(),
                    kind: SnapshotKind::Counter,
                    keys,
                }),
                StoreKind::KeyWrite { .. } => snaps.push(SnapshotStore {
                    name: s.name.clone(),
                    kind: SnapshotKind::KeyWrite,
                    keys,
                }),
                StoreKind::Sketch { sketch, .. } => snaps.push(SnapshotStore {
                    name: s.name.clone(),
                    kind: SnapshotKind::Sketch(
                        *sketch == dta_proto::sketch::SketchKind::HyperLogLog,
                    ),
                    keys,
                }),
                StoreKind::Postcard { .. } => {}
            }
        }
        // Only stores with something to snapshot: keys, or a sketch's epoch summary.
        snaps.retain(|s| s.keys.is_some() || matches!(s.kind, SnapshotKind::Sketch(_)));
        if cfg.pull.is_some() {
            // The agents' newest values, under a name no store can have (store names are
            // identifiers without a leading slash).
            snaps.push(SnapshotStore {
                name: PULL_SNAPSHOT.into(),
                kind: SnapshotKind::Pull,
                keys: None,
            });
        }
        Ok(Exporter {
            state: State::load(&ch_cfg.state_file)?,
            cfg: ch_cfg,
            collector,
            ch,
            appends,
            snaps,
            pending: Vec::new(),
            rows: RowBinary::default(),
            metrics,
            backoff: FIRST_BACKOFF,
        })
    }

    /// The counters this exporter bumps.
    pub fn metrics(&self) -> &Arc<ExportMetrics> {
        &self.metrics
    }

    /// Waits `d`, or less if `stop` is set meanwhile; false if stopped.
    fn sleep(stop: &AtomicBool, d: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < d {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep((d - t0.elapsed()).min(Duration::from_millis(20)));
        }
        !stop.load(Ordering::Relaxed)
    }

    /// After an error: waits the current back-off (doubling it), false if stopped.
    fn back_off(&mut self, stop: &AtomicBool) -> bool {
        let d = self.backoff;
        self.backoff = (d * 2).min(Duration::from_millis(self.cfg.max_backoff_ms));
        Self::sleep(stop, d)
    }

    /// Runs `f` against ClickHouse until it succeeds (retrying with back-off, counted), or
    /// until `stop`. A permanent error (credentials, missing table) is retried too while
    /// running, but ends the exporter when `fatal` is set (start-up: the configuration is
    /// wrong, and saying so beats retrying forever).
    fn with_retry<T>(
        &mut self,
        stop: &AtomicBool,
        what: &str,
        fatal: bool,
        mut f: impl FnMut(&mut Self) -> Result<T, ChError>,
    ) -> Step<Option<T>> {
        loop {
            match f(self) {
                Ok(v) => {
                    self.backoff = FIRST_BACKOFF;
                    return Ok(Some(v));
                }
                Err(e) => {
                    self.metrics.error(Source::ClickHouse);
                    if fatal && e.is_permanent() {
                        return Err(format!("{what}: {e}"));
                    }
                    log::warn!("{what}: {e}; retrying in {:?}", self.backoff);
                    if !self.back_off(stop) {
                        return Ok(None);
                    }
                    self.metrics.retries.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Connects (retrying while ClickHouse is down), creates the tables if configured, and
    /// sets every cursor from the state file and from ClickHouse. `Ok(false)`: stopped.
    pub fn start(&mut self, stop: &AtomicBool) -> Step<bool> {
        let db = self.cfg.database.clone();
        let create = self.cfg.create_tables;
        let ok = self.with_retry(stop, "connecting to ClickHouse", true, |me| {
            if create {
                me.ch
                    .query_server(&format!("CREATE DATABASE IF NOT EXISTS {db}"))?;
                for s in clickhouse::statements(SCHEMA) {
                    me.ch.query(&s)?;
                }
            }
            me.ch.query("SELECT count() FROM append_entries WHERE 0")
        })?;
        if ok.is_none() {
            return Ok(false);
        }
        for (si, st) in self.appends.clone().iter().enumerate() {
            for l in 0..st.lists.len() {
                let saved = self
                    .state
                    .lists
                    .get(&list_key(&st.name, st.first_list + l as u32))
                    .copied()
                    .unwrap_or_default();
                let c = &mut self.appends[si].lists[l];
                c.committed = saved;
                c.generation = saved.generation;
            }
        }
        if !self.reconcile(stop, None)? {
            return Ok(false);
        }
        for st in &mut self.appends {
            for c in &mut st.lists {
                c.read_seq = c.committed.seq().max(1);
            }
        }
        let names: Vec<String> = self.snaps.iter().map(|s| s.name.clone()).collect();
        if !names.is_empty() {
            let q = format!(
                "SELECT store, toUInt32(max(snapshot_time)) FROM (SELECT store, snapshot_time \
                 FROM counter_snapshots UNION ALL SELECT store, snapshot_time FROM \
                 keywrite_snapshots UNION ALL SELECT store, snapshot_time FROM sketch_epochs) \
                 WHERE store IN ({}) GROUP BY store FORMAT TabSeparated",
                names
                    .iter()
                    .map(|n| sql_str(n))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let Some(out) = self.with_retry(stop, "reading the last snapshots", true, |me| {
                me.ch.query(&q)
            })?
            else {
                return Ok(false);
            };
            for line in out.lines() {
                if let Some((s, t)) = line.split_once('\t') {
                    if let Ok(t) = t.parse::<u32>() {
                        let e = self.state.snapshots.entry(s.to_string()).or_insert(0);
                        *e = (*e).max(t);
                    }
                }
            }
        }
        log::info!(
            "exporting {} Append store(s) and {} snapshot store(s) to ClickHouse at {} \
             (database {})",
            self.appends.len(),
            self.snaps.len(),
            self.ch.addr,
            self.ch.database
        );
        Ok(true)
    }

    /// Raises every list's committed position to what ClickHouse holds (only the stores in
    /// `only`, if given), and drops pending rows at or before it. `Ok(false)`: stopped.
    fn reconcile(&mut self, stop: &AtomicBool, only: Option<&[u16]>) -> Step<bool> {
        let stores: Vec<usize> = match only {
            Some(o) => o.iter().map(|&s| s as usize).collect(),
            None => (0..self.appends.len()).collect(),
        };
        if stores.is_empty() {
            return Ok(true);
        }
        let names: Vec<String> = stores
            .iter()
            .map(|&s| sql_str(&self.appends[s].name))
            .collect();
        let q = format!(
            "SELECT store, list, generation, max(seq * 65536 + idx) FROM append_entries WHERE \
             store IN ({}) GROUP BY store, list, generation FORMAT TabSeparated",
            names.join(", ")
        );
        let Some(out) = self.with_retry(
            stop,
            "reading what ClickHouse holds",
            only.is_none(),
            |me| me.ch.query(&q),
        )?
        else {
            return Ok(false);
        };
        let index: HashMap<String, usize> = self
            .appends
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        let mut raised = Vec::new();
        for line in out.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let [store, list, generation, pos] = f[..] else {
                continue;
            };
            let (Some(&si), Ok(list), Ok(generation), Ok(pos)) = (
                index.get(store),
                list.parse::<u32>(),
                generation.parse::<u32>(),
                pos.parse::<u64>(),
            ) else {
                continue;
            };
            let st = &mut self.appends[si];
            let Some(c) = list
                .checked_sub(st.first_list)
                .and_then(|l| st.lists.get_mut(l as usize))
            else {
                continue;
            };
            let there = ListPos { generation, pos };
            if there > c.committed {
                c.committed = there;
                c.generation = c.generation.max(generation);
                raised.push(si);
            }
        }
        if !raised.is_empty() {
            let appends = &self.appends;
            self.pending.retain(|r| {
                let st = &appends[r.store as usize];
                r.at > st.lists[(r.list - st.first_list) as usize].committed
            });
            self.metrics
                .pending_rows
                .store(self.pending.len() as u64, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// Follows every list until `stop`, snapshotting on schedule.
    pub fn run(&mut self, stop: &AtomicBool) -> Step<()> {
        if !self.start(stop)? {
            return Ok(());
        }
        let interval = Duration::from_millis(self.cfg.interval_ms);
        while !stop.load(Ordering::Relaxed) {
            let t0 = Instant::now();
            let busy = match self.poll_append(stop) {
                Ok(b) => b,
                Err(e) => {
                    log::warn!("{e}");
                    self.metrics.error(Source::Collector);
                    if !self.back_off(stop) {
                        break;
                    }
                    continue;
                }
            };
            if !self.flush(stop)? {
                break;
            }
            if let Err(e) = self.snapshot(stop) {
                log::warn!("{e}");
                self.metrics.error(Source::Collector);
            }
            if !busy && !Self::sleep(stop, interval.saturating_sub(t0.elapsed())) {
                break;
            }
        }
        Ok(())
    }

    /// GETs a JSON document from the collector.
    fn get_json(&self, path: &str) -> Result<Value, String> {
        let r = self.collector.request("GET", path)?;
        if r.status != 200 {
            return Err(format!(
                "collector: GET {path}: {} {}",
                r.status,
                r.body.trim()
            ));
        }
        serde_json::from_str(&r.body).map_err(|e| format!("collector: GET {path}: {e}"))
    }

    /// Reads every list that moved into the pending rows, inserting whenever `batch_rows` are
    /// waiting. `Ok(true)`: a list had more than one read returns (poll again at once).
    /// An `Err` is the collector's (unreachable, refused); ClickHouse's errors are retried
    /// inside.
    pub fn poll_append(&mut self, stop: &AtomicBool) -> Result<bool, String> {
        let mut busy = false;
        let mut lag = 0u64;
        for si in 0..self.appends.len() {
            let name = self.appends[si].name.clone();
            let v = self.get_json(&format!("/tail/{}", enc(&name)))?;
            let heads: Vec<u64> = v["heads"]
                .as_array()
                .ok_or_else(|| format!("collector: GET /tail/{name}: no heads"))?
                .iter()
                .map(|h| h.as_u64().unwrap_or(0))
                .collect();
            let per_batch = self.appends[si].batch.max(1);
            let max_batches = (self.cfg.batch_rows / per_batch).clamp(1, 4096);
            let first_list = self.appends[si].first_list;
            for (l, &head) in heads.iter().enumerate().take(self.appends[si].lists.len()) {
                let c = &mut self.appends[si].lists[l];
                c.head = head;
                if head + 1 < c.read_seq {
                    // The ring holds fewer batches than were read from it: the collector
                    // started again with fresh memory. Its batches are new entries.
                    log::info!(
                        "store {name:?} list {}: the ring restarted (head {head}, read up to {}); \
                         generation {}",
                        first_list + l as u32,
                        c.read_seq - 1,
                        c.generation + 1
                    );
                    c.generation += 1;
                    c.read_seq = 1;
                    self.metrics.generations.fetch_add(1, Ordering::Relaxed);
                }
                let list = self.appends[si].first_list + l as u32;
                let mut reads = 0;
                while self.appends[si].lists[l].read_seq <= head {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(false);
                    }
                    if self.pending.len() + (max_batches * per_batch) as usize
                        > self.cfg.batch_rows as usize
                        && !self.flush(stop).map_err(|e| e.to_string())?
                    {
                        return Ok(false);
                    }
                    let c = self.appends[si].lists[l];
                    let path = format!(
                        "/tail/{}/{list}?from={}&max={max_batches}",
                        enc(&name),
                        c.read_seq
                    );
                    let r = self.collector.request("GET", &path)?;
                    if r.status != 200 {
                        return Err(format!(
                            "collector: GET {path}: {} {}",
                            r.status,
                            r.body.trim()
                        ));
                    }
                    let next: u64 = r
                        .header("x-dta-next-seq")
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| format!("collector: GET {path}: no X-Dta-Next-Seq"))?;
                    let lost: u64 = r
                        .header("x-dta-lost-batches")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    if lost > 0 {
                        log::warn!(
                            "store {name:?} list {list}: {lost} batches overwritten before \
                             they were exported"
                        );
                        self.metrics.lost_batches.fetch_add(lost, Ordering::Relaxed);
                    }
                    let (mut last_seq, mut idx) = (0u64, 0u16);
                    for line in r.body.lines() {
                        let Ok(e) = serde_json::from_str::<Value>(line) else {
                            continue;
                        };
                        let (Some(seq), Some(bytes)) =
                            (e["seq"].as_u64(), e["entry"].as_str().and_then(unhex))
                        else {
                            continue;
                        };
                        idx = if seq == last_seq { idx + 1 } else { 0 };
                        last_seq = seq;
                        let at = ListPos::of(c.generation, seq, idx);
                        if at <= c.committed || bytes.len() > 32 {
                            continue;
                        }
                        let mut entry = [0u8; 32];
                        entry[..bytes.len()].copy_from_slice(&bytes);
                        self.pending.push(AppendRow {
                            store: si as u16,
                            list,
                            at,
                            len: bytes.len() as u8,
                            entry,
                        });
                    }
                    self.metrics
                        .pending_rows
                        .store(self.pending.len() as u64, Ordering::Relaxed);
                    let c = &mut self.appends[si].lists[l];
                    if next <= c.read_seq {
                        break;
                    }
                    c.read_seq = next;
                    reads += 1;
                }
                busy |= reads > 1;
                let c = &self.appends[si].lists[l];
                lag += head.saturating_sub(c.committed.seq());
            }
        }
        self.metrics.lag_batches.store(lag, Ordering::Relaxed);
        Ok(busy)
    }

    /// Inserts the pending rows, retrying until ClickHouse has them (checking what landed
    /// before every retry), then moves the cursors and saves the state. `Ok(false)`: stopped
    /// before they were in.
    pub fn flush(&mut self, stop: &AtomicBool) -> Step<bool> {
        let mut checked = true;
        while !self.pending.is_empty() {
            if !checked {
                // The last INSERT failed and may have landed anyway: ask before resending.
                let mut stores: Vec<u16> = self.pending.iter().map(|r| r.store).collect();
                stores.sort_unstable();
                stores.dedup();
                if !self.reconcile(stop, Some(&stores))? {
                    return Ok(false);
                }
                checked = true;
                continue;
            }
            let now = unix_secs() as u32;
            self.rows.clear();
            for r in &self.pending {
                let st = &self.appends[r.store as usize];
                self.rows
                    .bytes(st.name.as_bytes())
                    .u32(r.list)
                    .u32(r.at.generation)
                    .u64(r.at.seq())
                    .u16((r.at.pos & 0xffff) as u16)
                    .bytes(&r.entry[..r.len as usize])
                    .u32(now)
                    .end_row();
            }
            match self
                .ch
                .insert(Table::Append.name(), APPEND_COLUMNS, &self.rows.buf)
            {
                Ok(()) => {
                    self.metrics.inserted(
                        Table::Append as usize,
                        self.rows.rows,
                        self.rows.buf.len() as u64,
                    );
                    self.backoff = FIRST_BACKOFF;
                    break;
                }
                Err(e) => {
                    self.metrics.error(Source::ClickHouse);
                    log::warn!(
                        "INSERT of {} Append rows: {e}; retrying in {:?}",
                        self.pending.len(),
                        self.backoff
                    );
                    if !self.back_off(stop) {
                        return Ok(false);
                    }
                    self.metrics.retries.fetch_add(1, Ordering::Relaxed);
                    checked = false;
                }
            }
        }
        // In ClickHouse now (inserted, or found there by the reconciliation).
        for r in self.pending.drain(..) {
            let st = &mut self.appends[r.store as usize];
            let c = &mut st.lists[(r.list - st.first_list) as usize];
            c.committed = c.committed.max(r.at);
        }
        self.metrics.pending_rows.store(0, Ordering::Relaxed);
        self.save_state();
        Ok(true)
    }

    fn save_state(&mut self) {
        for st in &self.appends {
            for (l, c) in st.lists.iter().enumerate() {
                if c.committed != ListPos::default() {
                    self.state
                        .lists
                        .insert(list_key(&st.name, st.first_list + l as u32), c.committed);
                }
            }
        }
        if let Err(e) = self.state.save(&self.cfg.state_file) {
            // ClickHouse has the rows; a restart recovers the cursor from it.
            log::warn!("{e}");
            self.metrics.error(Source::StateFile);
        }
    }

    /// The keys of a key set's file (re-read each snapshot).
    fn keys_of(path: &std::path::Path) -> Result<String, String> {
        std::fs::read_to_string(path)
            .map_err(|e| format!("[export.clickhouse] keys file {}: {e}", path.display()))
    }

    /// POSTs `keys` to `path` in pieces the control API accepts; the answer lines.
    fn bulk(&self, path: &str, keys: &str) -> Result<Vec<Value>, String> {
        let keys: Vec<&str> = keys
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(crate::http::MAX_BULK_KEYS / 2) {
            let body = chunk.join("\n");
            let r = self
                .collector
                .request_with_body("POST", path, body.as_bytes())?;
            if r.status != 200 {
                return Err(format!(
                    "collector: POST {path}: {} {}",
                    r.status,
                    r.body.trim()
                ));
            }
            out.extend(
                r.body
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .filter(|v| v.get("error").is_none()),
            );
        }
        Ok(out)
    }

    /// Takes the snapshot of the current `snapshot_secs` slot for every store that has not
    /// got it yet. An `Err` is the collector's (the stores after it wait for the next call).
    pub fn snapshot(&mut self, stop: &AtomicBool) -> Result<(), String> {
        let period = self.cfg.snapshot_secs;
        if period == 0 || self.snaps.is_empty() {
            return Ok(());
        }
        let t = (unix_secs() / period * period) as u32;
        for i in 0..self.snaps.len() {
            let s = self.snaps[i].clone();
            if self
                .state
                .snapshots
                .get(&s.name)
                .is_some_and(|&last| last >= t)
            {
                continue;
            }
            let store = enc(&s.name);
            let mut tables: Vec<(Table, RowBinary)> = Vec::new();
            match s.kind {
                SnapshotKind::Counter | SnapshotKind::KeyWrite => {
                    let Some(f) = &s.keys else { continue };
                    let keys = Self::keys_of(f)?;
                    let (path, table) = if s.kind == SnapshotKind::Counter {
                        (format!("/query/counter/{store}"), Table::Counter)
                    } else {
                        (format!("/query/keywrite/{store}"), Table::KeyWrite)
                    };
                    let mut rb = RowBinary::default();
                    for v in self.bulk(&path, &keys)? {
                        let key = unhex(v["key"].as_str().unwrap_or("")).unwrap_or_default();
                        rb.u32(t).bytes(s.name.as_bytes()).bytes(&key);
                        if table == Table::Counter {
                            rb.u64(v["epoch"]["epoch"].as_u64().unwrap_or(0))
                                .u64(v["estimate"].as_u64().unwrap_or(0));
                        } else {
                            let value = v["value"].as_str().and_then(unhex).unwrap_or_default();
                            rb.bytes(v["result"].as_str().unwrap_or("").as_bytes())
                                .bytes(&value)
                                .u8(v["votes"].as_u64().unwrap_or(0) as u8)
                                .u8(v["matches"].as_u64().unwrap_or(0) as u8);
                        }
                        rb.end_row();
                    }
                    tables.push((table, rb));
                }
                SnapshotKind::Pull => {
                    // One row per value of every block's newest snapshot.
                    let v = self.get_json("/pull")?;
                    let mut rb = RowBinary::default();
                    for a in v["agents"].as_array().into_iter().flatten() {
                        let agent = a["name"].as_str().unwrap_or("");
                        for b in a["blocks"].as_array().into_iter().flatten() {
                            let (Some(seq), Some(values)) =
                                (b["seq"].as_u64(), b["values"].as_array())
                            else {
                                continue;
                            };
                            let block = b["name"].as_str().unwrap_or("");
                            for (i, x) in values.iter().enumerate() {
                                rb.u32(t)
                                    .bytes(agent.as_bytes())
                                    .bytes(block.as_bytes())
                                    .u16(i as u16)
                                    .u64(seq)
                                    .u64(x.as_u64().unwrap_or(0))
                                    .end_row();
                            }
                        }
                    }
                    tables.push((Table::Pulled, rb));
                }
                SnapshotKind::Sketch(hll) => {
                    let epochs = self.get_json(&format!("/query/sketch/{store}/epochs"))?;
                    let Some(e) = epochs["epochs"]
                        .as_array()
                        .and_then(|a| a.first()?.as_u64())
                    else {
                        // Nothing merged yet: nothing to record for this slot.
                        self.state.snapshots.insert(s.name.clone(), t);
                        continue;
                    };
                    let c =
                        self.get_json(&format!("/query/sketch/{store}/completeness?epoch={e}"))?;
                    let card = if hll {
                        self.get_json(&format!("/query/sketch/{store}/cardinality?epoch={e}"))?
                            ["estimate"]
                            .as_f64()
                            .unwrap_or(0.0)
                    } else {
                        0.0
                    };
                    let mut rb = RowBinary::default();
                    rb.u32(t)
                        .bytes(s.name.as_bytes())
                        .u32(e as u32)
                        .bytes(if hll { b"hyperloglog" } else { b"point" })
                        .f64(card)
                        .u32(c["columns"].as_u64().unwrap_or(0) as u32)
                        .u32(c["written"].as_u64().unwrap_or(0) as u32)
                        .u32(c["complete"].as_u64().unwrap_or(0) as u32)
                        .f64(c["ratio"].as_f64().unwrap_or(0.0))
                        .end_row();
                    tables.push((Table::SketchEpochs, rb));
                    if let (false, Some(f)) = (hll, &s.keys) {
                        let keys = Self::keys_of(f)?;
                        let mut rb = RowBinary::default();
                        for v in self.bulk(&format!("/query/sketch/{store}?epoch={e}"), &keys)? {
                            let key = unhex(v["key"].as_str().unwrap_or("")).unwrap_or_default();
                            rb.u32(t)
                                .bytes(s.name.as_bytes())
                                .u32(e as u32)
                                .bytes(&key)
                                .i64(v["estimate"].as_i64().unwrap_or(0))
                                .end_row();
                        }
                        tables.push((Table::SketchPoints, rb));
                    }
                }
            }
            for (table, rb) in &tables {
                if rb.rows == 0 {
                    continue;
                }
                let what = format!("INSERT into {}", table.name());
                let done = self
                    .with_retry(stop, &what, false, |me| {
                        me.ch.insert(table.name(), table.columns(), &rb.buf)
                    })
                    .map_err(|e| e.to_string())?;
                if done.is_none() {
                    return Ok(());
                }
                self.metrics
                    .inserted(*table as usize, rb.rows, rb.buf.len() as u64);
            }
            self.metrics.snapshots.fetch_add(1, Ordering::Relaxed);
            self.state.snapshots.insert(s.name.clone(), t);
            self.save_state();
        }
        Ok(())
    }
}

/// Percent-encodes a path segment.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_splits_into_six_tables() {
        let s = clickhouse::statements(SCHEMA);
        assert_eq!(s.len(), 6);
        for (t, stmt) in metrics::TABLES.iter().zip(&s) {
            assert!(
                stmt.starts_with(&format!("CREATE TABLE IF NOT EXISTS {t} (")),
                "{stmt}"
            );
        }
        // Every column the exporter writes exists, in the schema's order.
        for (t, cols) in [
            (Table::Append, APPEND_COLUMNS),
            (Table::Counter, Table::Counter.columns()),
            (Table::KeyWrite, Table::KeyWrite.columns()),
            (Table::SketchPoints, Table::SketchPoints.columns()),
            (Table::SketchEpochs, Table::SketchEpochs.columns()),
            (Table::Pulled, Table::Pulled.columns()),
        ] {
            let stmt = &s[t as usize];
            let declared: Vec<&str> = stmt
                .lines()
                .skip(1)
                .take_while(|l| !l.starts_with(')'))
                .map(|l| l.split_whitespace().next().unwrap())
                .collect();
            let want: Vec<&str> = cols.split(", ").collect();
            assert_eq!(declared, want, "{}", t.name());
        }
    }

    #[test]
    fn helpers() {
        assert_eq!(unhex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(sql_str("a'b"), "'a\\'b'");
        assert_eq!(enc("a/b c"), "a%2Fb%20c");
    }
}
