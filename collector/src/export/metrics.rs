//! The exporter's `/metrics` page (Prometheus text format 0.0.4), `dta_export_*`.
//!
//! The exporter thread bumps atomics; a scrape renders them. Counters end in `_total`; the
//! ClickHouse table is the `table` label, where an error came from the `source` label.

use std::sync::atomic::{AtomicU64, Ordering};

use dta_proto::stats::{PromKind, PromWriter};

/// The tables the exporter writes, in [`ExportMetrics`] index order.
pub const TABLES: [&str; 6] = [
    "append_entries",
    "counter_snapshots",
    "keywrite_snapshots",
    "sketch_points",
    "sketch_epochs",
    "pulled_metrics",
];

/// Where an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// ClickHouse refused or did not answer.
    ClickHouse,
    /// The collector's control API refused or did not answer.
    Collector,
    /// The state file could not be written.
    StateFile,
}

const SOURCES: [&str; 3] = ["clickhouse", "collector", "state_file"];

/// Counters and gauges shared by the exporter thread and the `/metrics` handler.
#[derive(Debug, Default)]
pub struct ExportMetrics {
    rows: [AtomicU64; TABLES.len()],
    inserts: [AtomicU64; TABLES.len()],
    bytes: [AtomicU64; TABLES.len()],
    errors: [AtomicU64; 3],
    /// Requests retried after an error (ClickHouse inserts and queries).
    pub retries: AtomicU64,
    /// Append batches the collector overwrote before the exporter read them.
    pub lost_batches: AtomicU64,
    /// Append lists whose ring started again at batch 1 (a new generation).
    pub generations: AtomicU64,
    /// Snapshots taken (every store of one snapshot time counts once).
    pub snapshots: AtomicU64,
    /// Batches written to the collector but not yet in ClickHouse, at the last poll.
    pub lag_batches: AtomicU64,
    /// Rows read from the collector and waiting for their INSERT.
    pub pending_rows: AtomicU64,
    /// Unix milliseconds of the last acknowledged INSERT (0: none yet).
    pub last_success_ms: AtomicU64,
}

impl ExportMetrics {
    /// Counts an acknowledged INSERT of `rows` rows (`bytes` of RowBinary) into table `t`.
    pub fn inserted(&self, t: usize, rows: u64, bytes: u64) {
        self.rows[t].fetch_add(rows, Ordering::Relaxed);
        self.inserts[t].fetch_add(1, Ordering::Relaxed);
        self.bytes[t].fetch_add(bytes, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.last_success_ms.store(now, Ordering::Relaxed);
    }

    /// Counts an error.
    pub fn error(&self, s: Source) {
        self.errors[s as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Rows exported into table `t` so far.
    pub fn rows(&self, t: usize) -> u64 {
        self.rows[t].load(Ordering::Relaxed)
    }

    /// Errors from `s` so far.
    pub fn errors(&self, s: Source) -> u64 {
        self.errors[s as usize].load(Ordering::Relaxed)
    }

    /// The `/metrics` page, with this process's `process_*` figures when `/proc` is readable.
    pub fn render(&self) -> String {
        let mut w = PromWriter::new();
        let per_table =
            |w: &mut PromWriter, name: &str, help: &str, v: &[AtomicU64; TABLES.len()]| {
                w.family(PromKind::Counter, name, help);
                for (t, x) in TABLES.iter().zip(v) {
                    w.sample(&[("table", t)], x.load(Ordering::Relaxed) as f64);
                }
            };
        per_table(
            &mut w,
            "dta_export_rows",
            "Rows ClickHouse acknowledged, by table.",
            &self.rows,
        );
        per_table(
            &mut w,
            "dta_export_inserts",
            "INSERT statements (batches) ClickHouse acknowledged, by table.",
            &self.inserts,
        );
        per_table(
            &mut w,
            "dta_export_bytes",
            "RowBinary bytes ClickHouse acknowledged, by table.",
            &self.bytes,
        );
        w.family(
            PromKind::Counter,
            "dta_export_errors",
            "Failed requests, by source (clickhouse, collector, state_file).",
        );
        for (s, x) in SOURCES.iter().zip(&self.errors) {
            w.sample(&[("source", s)], x.load(Ordering::Relaxed) as f64);
        }
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        w.single(
            PromKind::Counter,
            "dta_export_retries",
            "Requests to ClickHouse retried after an error (with exponential back-off).",
            get(&self.retries),
        );
        w.single(
            PromKind::Counter,
            "dta_export_lost_batches",
            "Append batches the collector's ring overwrote before the exporter read them.",
            get(&self.lost_batches),
        );
        w.single(
            PromKind::Counter,
            "dta_export_generations",
            "Append lists whose ring restarted at batch 1 (a collector restart without \
             persist_dir); their rows continue under a new generation number.",
            get(&self.generations),
        );
        w.single(
            PromKind::Counter,
            "dta_export_snapshots",
            "Snapshots of counters, Key-Write answers and sketches taken.",
            get(&self.snapshots),
        );
        w.single(
            PromKind::Gauge,
            "dta_export_lag_batches",
            "Append batches in the collector not yet in ClickHouse, at the last poll.",
            get(&self.lag_batches),
        );
        w.single(
            PromKind::Gauge,
            "dta_export_pending_rows",
            "Rows read from the collector waiting for their INSERT.",
            get(&self.pending_rows),
        );
        w.single(
            PromKind::Gauge,
            "dta_export_last_success_timestamp_seconds",
            "Unix time of the last INSERT ClickHouse acknowledged (0: none yet).",
            get(&self.last_success_ms) / 1000.0,
        );
        if let Ok(p) = dta_io::process::ProcessStats::read() {
            p.write_prom(&mut w);
        }
        w.build_info(env!("CARGO_PKG_VERSION"), &[]);
        w.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_counts_by_table_and_passes_promtool() {
        let m = ExportMetrics::default();
        m.inserted(0, 1000, 40_000);
        m.inserted(0, 24, 960);
        m.error(Source::ClickHouse);
        m.retries.fetch_add(3, Ordering::Relaxed);
        let page = m.render();
        assert!(
            page.contains("dta_export_rows_total{table=\"append_entries\"} 1024\n"),
            "{page}"
        );
        assert!(page.contains("dta_export_inserts_total{table=\"append_entries\"} 2\n"));
        assert!(page.contains("dta_export_errors_total{source=\"clickhouse\"} 1\n"));
        assert!(page.contains("dta_export_retries_total 3\n"));
        assert!(!page.contains("dta_export_last_success_timestamp_seconds 0\n"));
        let readme = include_str!("../../README.md");
        for line in page
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE dta_export_"))
        {
            let name = line.split(' ').next().unwrap();
            assert!(
                readme.contains(&format!("`dta_export_{name}`")),
                "{name} undocumented"
            );
        }
        match dta_io::process::promtool_check_metrics(&page) {
            None => eprintln!("SKIP: promtool not found"),
            Some(Ok(())) => {}
            Some(Err(e)) => panic!("{e}\n{page}"),
        }
    }
}
