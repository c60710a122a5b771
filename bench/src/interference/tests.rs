use super::host::{url_encode, ProcCpu};
use super::monitors::prometheus_config;
use super::parse::{
    core_ticks, parse_redis_benchmark, prom_query_value, prom_sum, quantile_bracket, spread,
    stat_cpu_ticks, CoreTicks, Point,
};

/// redis-benchmark 7.0.15's output for `-t get -n 100000 -c 50 --precision 3` on this
/// machine (two progress lines kept, the middle of both distributions cut).
const OUT: &str = "GET: rps=0.0 (overall: 0.0) avg_msec=-nan (overall: -nan)\r\
GET: rps=11631.4 (overall: 11585.9) avg_msec=3.792 (overall: 3.792)\r====== GET ======
  100000 requests completed in 9.62 seconds
  50 parallel clients
  64 bytes payload
  keep alive: 1
  host configuration \"save\": 
  host configuration \"appendonly\": no
  multi-thread: no

Latency by percentile distribution:
0.000% <= 0.119 milliseconds (cumulative count 1)
50.000% <= 0.455 milliseconds (cumulative count 50046)
75.000% <= 6.863 milliseconds (cumulative count 75004)
99.219% <= 24.911 milliseconds (cumulative count 99221)
99.609% <= 36.159 milliseconds (cumulative count 99610)
99.805% <= 69.823 milliseconds (cumulative count 99805)
99.902% <= 92.223 milliseconds (cumulative count 99907)
99.951% <= 225.023 milliseconds (cumulative count 99956)
100.000% <= 225.663 milliseconds (cumulative count 100000)

Cumulative distribution of latencies:
0.000% <= 0.103 milliseconds (cumulative count 0)
0.454% <= 0.207 milliseconds (cumulative count 454)
99.609% <= 36.127 milliseconds (cumulative count 99609)
99.900% <= 80.127 milliseconds (cumulative count 99900)
99.901% <= 92.159 milliseconds (cumulative count 99901)
100.000% <= 226.175 milliseconds (cumulative count 100000)

Summary:
  throughput summary: 10399.33 requests per second
  latency summary (msec):
      avg       min       p50       p95       p99       max
    4.126     0.112     0.455    14.159    24.303   225.663
";

#[test]
fn parses_redis_benchmark_output() {
    let b = parse_redis_benchmark(OUT).unwrap();
    assert_eq!(b.test, "GET");
    assert_eq!((b.requests, b.clients), (100_000, 50));
    assert_eq!(b.secs, 9.62);
    assert_eq!(b.rps, 10399.33);
    assert_eq!(
        (b.avg_ms, b.min_ms, b.p50_ms, b.p95_ms, b.p99_ms, b.max_ms),
        (4.126, 0.112, 0.455, 14.159, 24.303, 225.663)
    );
    // 99,900 requests at or below 80.127 ms (the cumulative distribution) is the exact
    // p99.9; the percentile distribution alone would have said 92.223.
    assert_eq!(b.p999_ms, 80.127);
    assert_eq!(b.p999_lower_ms, 69.823);
}

#[test]
fn refuses_what_is_not_a_report() {
    assert!(
        parse_redis_benchmark("GET: 10399.33 requests per second, p50=0.455 msec\n")
            .unwrap_err()
            .contains("-q")
    );
    // The summary cut off: no throughput.
    let cut = &OUT[..OUT.find("Summary:").unwrap()];
    assert!(parse_redis_benchmark(cut).is_err());
    // A distribution that does not add up to the requests completed.
    let short = OUT.replace("(cumulative count 100000)", "(cumulative count 99999)");
    assert!(parse_redis_benchmark(&short)
        .unwrap_err()
        .contains("does not reach"));
}

#[test]
fn quantile_brackets() {
    let p = |ms, count| Point { ms, count };
    let pts = [p(1.0, 10), p(2.0, 50), p(3.0, 99), p(4.0, 100)];
    assert_eq!(quantile_bracket(&pts, 100, 0.5), Some((1.0, 2.0)));
    assert_eq!(quantile_bracket(&pts, 100, 0.99), Some((2.0, 3.0)));
    assert_eq!(quantile_bracket(&pts, 100, 0.999), Some((3.0, 4.0)));
    assert_eq!(quantile_bracket(&pts, 100, 0.01), Some((0.0, 1.0)));
    assert_eq!(quantile_bracket(&[], 100, 0.5), None);
}

#[test]
fn proc_parsing() {
    // The command name may hold spaces and parentheses.
    let stat = "4242 (redis-server (x) 1) S 1 4242 4242 0 -1 4194560 300 0 0 0 \
                1234 56 0 0 20 0 5 0 100 0 0";
    assert_eq!(stat_cpu_ticks(stat), Some(1290));
    assert_eq!(stat_cpu_ticks("4242 (x) S 1"), None);
    let ps = "cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n\
              cpu1 100 1 50 1000 3 2 4 9 0 0\nintr 1 2\n";
    assert_eq!(
        core_ticks(ps, 1),
        Some(CoreTicks {
            busy: 100 + 1 + 50 + 2 + 4,
            idle: 1003,
            steal: 9
        })
    );
    assert_eq!(core_ticks(ps, 2), None);
}

#[test]
fn prometheus_text_and_queries() {
    let page = "# HELP dta_pull_rounds_done_total Rounds.\n\
                # TYPE dta_pull_rounds_done_total counter\n\
                dta_pull_rounds_done_total{thread=\"0\"} 7\n\
                dta_pull_rounds_done_total{thread=\"1\"} 5\n\
                dta_pull_rounds_done_total_extra 100\n\
                dta_agent_rnic_reads_total 42\n";
    assert_eq!(prom_sum(page, "dta_pull_rounds_done_total"), Some(12.0));
    assert_eq!(prom_sum(page, "dta_agent_rnic_reads_total"), Some(42.0));
    assert_eq!(prom_sum(page, "dta_agent_rnic"), None);
    let q = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"61"]}]}}"#;
    assert_eq!(prom_query_value(q), Some(61.0));
    assert_eq!(
        prom_query_value(r#"{"status":"success","data":{"result":[]}}"#),
        None
    );
    assert_eq!(
        url_encode("up{job=\"node\"}[1h]"),
        "up%7Bjob%3D%22node%22%7D%5B1h%5D"
    );
}

#[test]
fn process_cpu_from_ticks_and_threads() {
    let t = |tid: u64, ns: u64| (tid, format!("t{tid}"), ns);
    let before = ProcCpu {
        ns: 10_000_000,
        threads: vec![t(1, 4_000_000), t(2, 6_000_000)],
    };
    // Same threads: their nanoseconds (ticks floored to 0 more here).
    let after = ProcCpu {
        ns: 10_000_000,
        threads: vec![t(1, 7_500_000), t(2, 6_100_000), t(3, 200_000)],
    };
    assert_eq!(after.exited(&before), 0);
    assert_eq!(after.since(&before), 3_500_000 + 100_000 + 200_000);
    assert_eq!(after.threads_since(&before, |tid, _| tid == 1), 3_500_000);
    // Thread 2 exited after working: utime + stime kept its time.
    let after = ProcCpu {
        ns: 40_000_000,
        threads: vec![t(1, 7_500_000)],
    };
    assert_eq!(after.exited(&before), 1);
    assert_eq!(after.since(&before), 30_000_000);
    // An idle thread exited: the threads' finer sum.
    let after = ProcCpu {
        ns: 10_000_000,
        threads: vec![t(1, 7_500_000)],
    };
    assert_eq!(after.since(&before), 3_500_000);
}

#[test]
fn prometheus_scrapes_at_the_interval() {
    let c = prometheus_config(100, 9100);
    assert!(
        c.contains("  scrape_interval: 100ms\n  scrape_timeout: 100ms\n"),
        "{c}"
    );
    assert!(c.contains("      - targets: [\"127.0.0.1:9100\"]\n"), "{c}");
    assert!(prometheus_config(1000, 1).contains("scrape_interval: 1000ms"));
}

#[test]
fn spreads() {
    assert_eq!(spread(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
    assert_eq!(spread(&[4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    assert!(spread(&[f64::NAN]).0.is_nan());
}
