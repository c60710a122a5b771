//! The operator-facing files in `packaging/` are valid and speak of metrics that exist:
//! `promtool check rules` accepts the alerting rules (where promtool is installed), the Grafana
//! dashboard is well-formed JSON with a query per panel, and every `dta_*` metric either names
//! is documented in the metrics table of its component's README.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `dta_translator_*` / `dta_collector_*` name in `text`.
fn metric_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for prefix in ["dta_translator_", "dta_collector_"] {
        let mut rest = text;
        while let Some(i) = rest.find(prefix) {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    out.sort();
    out.dedup();
    out
}

fn documented(name: &str) -> bool {
    let (readme, short) = if let Some(s) = name.strip_prefix("dta_translator_") {
        ("translator/README.md", s)
    } else {
        (
            "collector/README.md",
            name.strip_prefix("dta_collector_").unwrap(),
        )
    };
    let text = std::fs::read_to_string(root().join(readme)).unwrap();
    text.contains(&format!("`{short}`"))
}

#[test]
fn alerting_rules_pass_promtool_and_name_real_metrics() {
    let rules = root().join("packaging/prometheus/dta-alerts.yml");
    let text = std::fs::read_to_string(&rules).unwrap();
    let names = metric_names(&text);
    assert!(names.len() >= 6, "{names:?}");
    for n in &names {
        assert!(documented(n), "{n} is not in its README's metrics table");
    }
    match Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
    {
        Ok(o) => assert!(
            o.status.success(),
            "promtool check rules: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) => {
            let _ = writeln!(std::io::stderr(), "SKIP: promtool not found");
        }
    }
}

#[test]
fn grafana_dashboard_is_valid_and_names_real_metrics() {
    let text = std::fs::read_to_string(root().join("packaging/grafana/dta-overview.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = v["panels"].as_array().unwrap();
    assert!(panels.len() >= 8);
    for p in panels {
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            assert!(t["expr"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }
    for n in metric_names(&text) {
        assert!(documented(&n), "{n} is not in its README's metrics table");
    }
}

#[test]
fn clickhouse_dashboard_reads_real_tables_and_metrics() {
    let text =
        std::fs::read_to_string(root().join("packaging/grafana/dta-clickhouse.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let schema = std::fs::read_to_string(root().join("collector/clickhouse/schema.sql")).unwrap();
    let readme = std::fs::read_to_string(root().join("collector/README.md")).unwrap();
    let panels = v["panels"].as_array().unwrap();
    assert!(panels.len() >= 8);
    let (mut sql, mut prom) = (0, 0);
    for p in panels {
        let t = &p["targets"][0];
        match p["datasource"]["type"].as_str() {
            Some("grafana-clickhouse-datasource") => {
                let q = t["rawSql"].as_str().expect("a ClickHouse panel has rawSql");
                let table = q
                    .split_whitespace()
                    .skip_while(|w| *w != "FROM")
                    .nth(1)
                    .expect("FROM a table");
                assert!(
                    schema.contains(&format!("CREATE TABLE IF NOT EXISTS {table} (")),
                    "{table} is no table of schema.sql"
                );
                sql += 1;
            }
            Some("prometheus") => {
                let e = t["expr"].as_str().unwrap();
                let mut rest = e;
                while let Some(i) = rest.find("dta_export_") {
                    let tail = &rest[i..];
                    let end = tail
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(tail.len());
                    assert!(
                        readme.contains(&format!("`{}`", &tail[..end])),
                        "{} is not in collector/README.md",
                        &tail[..end]
                    );
                    rest = &tail[end..];
                }
                prom += 1;
            }
            other => panic!("panel {} has datasource {other:?}", p["title"]),
        }
    }
    assert!(
        sql >= 6 && prom >= 2,
        "{sql} SQL panels, {prom} Prometheus panels"
    );
}
