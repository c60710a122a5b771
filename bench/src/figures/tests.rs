use super::charts::{caption, utc_date};
use super::*;

/// `bench plot` redraws the SVGs and leaves the measurements byte for byte as they were.
#[test]
fn plot_never_rewrites_its_input() {
    let dir = std::env::temp_dir().join(format!("dta-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Compact JSON: a rewrite would pretty-print it.
    let input = r#"{"rows":[{"batch":1,"pipeline":{"reports_per_sec":1e6,"reports_per_cpu_sec":2e6},"with_rnic":{"reports_per_cpu_sec":1e6}}]}"#;
    std::fs::write(dir.join("append.json"), input).unwrap();
    assert_eq!(plot(&dir).unwrap(), 1);
    assert_eq!(
        std::fs::read_to_string(dir.join("append.json")).unwrap(),
        input
    );
    assert!(dir.join("append.svg").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn captions_say_runs_machine_and_date() {
    assert_eq!(utc_date(0), "1970-01-01 00:00 UTC");
    assert_eq!(utc_date(1_795_666_370), "2026-11-26 04:12 UTC");
    assert_eq!(utc_date(951_782_400), "2000-02-29 00:00 UTC");
    let v = json!({"loops": 3, "reports_per_trace": 1000,
                   "machine": {"cpu": "AMD EPYC", "cores": 2, "unix_time": 0}, "rows": []});
    assert_eq!(
        caption(&v),
        "1000 reports per trace; 3 runs each; AMD EPYC, 2 cores; 1970-01-01 00:00 UTC"
    );
    let c = charts("micro", &v);
    assert_eq!(c[0].categories.len(), 4, "categories as bars");
}

#[test]
fn charts_redraw_from_json() {
    let v = json!({"rows": [
        {"batch": 1, "pipeline": {"reports_per_sec": 1e6, "reports_per_cpu_sec": 2e6}, "with_rnic": {"reports_per_cpu_sec": 1e6}},
        {"batch": 16, "pipeline": {"reports_per_sec": 4e6, "reports_per_cpu_sec": 9e6}, "with_rnic": {"reports_per_cpu_sec": 7e6}},
    ]});
    let c = charts("append", &v);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].series.len(), 3);
    assert_eq!(c[0].series[0].points, vec![(1.0, 2.0), (16.0, 9.0)]);
    assert!(charts("nothing", &v).is_empty());
}

/// The collectors figure: four log-scale panels in one document; the real RNIC's 0 is
/// written, not drawn; dta's lookups appear twice (HTTP, in process), the real RNIC's not.
#[test]
fn collectors_panels_redraw_from_json() {
    let row = |id: &str, name: &str, server: f64, ingest: f64, mem: f64| {
        json!({"id": id, "name": name, "server_ns_per_report": server,
               "ingest_ns_per_report": ingest, "total_ns_per_report": server + ingest,
               "memory": {"bytes_per_million_entries": mem},
               "lookup": {"p50_us": 20.0, "p99_us": 30.0},
               "lookup_in_process": if id.starts_with("dta") {
                   json!({"p50_us": 0.2, "p99_us": 0.4}) } else { json!(null) }})
    };
    let v = json!({"rows": [
        row("redis", "Redis 7.0.15", 1000.0, 1050.0, 61e6),
        row("dta-sw-rnic", "dta, software RNIC", 2400.0, 0.0, 44e6),
        row("dta-real-rnic", "dta, real RNIC", 0.0, 0.0, 44e6),
    ], "dta_per_primitive": [
        {"primitive": "Append, batch 16 (events)", "ns_per_report": 62.0, "ns_per_frame": 990.0},
    ]});
    let c = charts("collectors", &v);
    assert_eq!(c.len(), 4);
    assert!(c.iter().all(|c| c.log_y && c.value_labels));
    assert_eq!(
        c[0].categories,
        vec!["Redis 7.0", "dta, software RNIC", "dta, real RNIC"]
    );
    assert_eq!(c[0].series[2].points[2], (3.0, 0.0));
    assert_eq!(
        c[2].categories,
        vec!["Redis 7.0", "dta, HTTP API", "dta, in process"]
    );
    assert_eq!(c[3].categories, vec!["Append, batch 16"]);
    let dir = std::env::temp_dir().join(format!("dta-coll-fig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    draw(&dir, "collectors", &v).unwrap();
    let svg = std::fs::read_to_string(dir.join("collectors.svg")).unwrap();
    assert_eq!(
        svg.matches("<svg").count(),
        5,
        "one document of four panels"
    );
    assert!(svg.contains(">2.4k</text>") && svg.contains(">0</text>"));
    assert!(!dir.join("collectors-2.svg").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn query_success_tracks_the_formula() {
    let p = query_point(2, 12, 410, 5).unwrap();
    assert_eq!(p.wrong, 0.0);
    assert!(p.success > 0.9, "{p:?}");
    assert!((p.success - p.formula_success).abs() < 0.05, "{p:?}");
    let heavy = query_point(1, 10, 1024, 5).unwrap();
    assert!(heavy.success < p.success);
    assert!(
        (heavy.success - heavy.formula_success).abs() < 0.06,
        "{heavy:?}"
    );
}
