//! Reading what the tools print: redis-benchmark's report, `/proc/stat`, Prometheus' text
//! format and query answers. Pure functions of their input; no process is started here.

use serde::Serialize;

/// One redis-benchmark test's results, from its default (neither `-q` nor `--csv`) output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RedisBench {
    /// The test (`GET`).
    pub test: String,
    /// Requests completed.
    pub requests: u64,
    /// Seconds the test took.
    pub secs: f64,
    /// Parallel clients.
    pub clients: u32,
    /// Throughput (requests per second, the summary's).
    pub rps: f64,
    /// Mean latency (ms).
    pub avg_ms: f64,
    /// Minimum latency (ms).
    pub min_ms: f64,
    /// Median latency (ms; redis-benchmark's hdr_value_at_percentile).
    pub p50_ms: f64,
    /// 95th percentile (ms).
    pub p95_ms: f64,
    /// 99th percentile (ms).
    pub p99_ms: f64,
    /// p99.9 (ms): the smallest latency printed (in the percentile or the cumulative
    /// distribution) with at least 99.9 % of the requests at or below it: an upper bound,
    /// exact when redis-benchmark printed that point. The summary has no p99.9.
    pub p999_ms: f64,
    /// The largest latency printed with fewer than 99.9 % of the requests at or below it: p99.9
    /// lies in (`p999_lower_ms`, `p999_ms`].
    pub p999_lower_ms: f64,
    /// Maximum latency (ms).
    pub max_ms: f64,
}

/// A latency and the requests at or below it, as redis-benchmark prints them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Point {
    pub(super) ms: f64,
    pub(super) count: u64,
}

/// `"99.902% <= 92.223 milliseconds (cumulative count 99907)"` → (92.223, 99907).
pub(super) fn parse_point(line: &str) -> Option<Point> {
    let (_, rest) = line.split_once("% <= ")?;
    let (ms, rest) = rest.split_once(" milliseconds (cumulative count ")?;
    let count = rest.strip_suffix(')')?;
    Some(Point {
        ms: ms.trim().parse().ok()?,
        count: count.trim().parse().ok()?,
    })
}

/// The bracket (lower, upper] of quantile `q` from cumulative points: the smallest latency with
/// at least ⌈q · total⌉ requests at or below it, and the largest with fewer.
pub(super) fn quantile_bracket(points: &[Point], total: u64, q: f64) -> Option<(f64, f64)> {
    let target = ((q * total as f64).ceil() as u64).max(1);
    let upper = points
        .iter()
        .filter(|p| p.count >= target)
        .map(|p| p.ms)
        .min_by(f64::total_cmp)?;
    let lower = points
        .iter()
        .filter(|p| p.count < target)
        .map(|p| p.ms)
        .max_by(f64::total_cmp)
        .unwrap_or(0.0);
    Some((lower, upper))
}

/// Parses redis-benchmark's output for one test (progress lines, separated by `\r`, are
/// skipped): requests, time, clients, both latency distributions and the summary.
pub fn parse_redis_benchmark(out: &str) -> Result<RedisBench, String> {
    let text = out.replace('\r', "\n");
    let mut lines = text.lines().map(str::trim);
    let test = lines
        .by_ref()
        .find_map(|l| {
            l.strip_prefix("====== ")
                .and_then(|r| r.strip_suffix(" ======"))
                .map(str::to_string)
        })
        .ok_or("redis-benchmark printed no \"====== TEST ======\" report (was it run with -q or --csv?)")?;
    let (mut requests, mut secs, mut clients, mut rps) = (None, None, None, None);
    let mut points = Vec::new();
    let mut summary: Option<Vec<(String, f64)>> = None;
    let mut header: Option<Vec<String>> = None;
    for l in lines {
        if l.starts_with("====== ") {
            break;
        }
        if let Some(r) = l.strip_suffix(" seconds") {
            if let Some((n, s)) = r.split_once(" requests completed in ") {
                requests = n.trim().parse::<u64>().ok();
                secs = s.trim().parse::<f64>().ok();
            }
        } else if let Some(n) = l.strip_suffix(" parallel clients") {
            clients = n.trim().parse::<u32>().ok();
        } else if let Some(p) = parse_point(l) {
            points.push(p);
        } else if let Some(r) = l.strip_prefix("throughput summary: ") {
            rps = r
                .strip_suffix(" requests per second")
                .and_then(|v| v.trim().parse::<f64>().ok());
        } else if l.starts_with("avg") && l.contains("p50") {
            header = Some(l.split_whitespace().map(str::to_string).collect());
        } else if let (Some(h), None) = (&header, &summary) {
            let vals: Vec<f64> = l
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            if vals.len() == h.len() && !vals.is_empty() {
                summary = Some(h.iter().cloned().zip(vals).collect());
            }
        }
    }
    let requests = requests.ok_or("no \"N requests completed in S seconds\" line")?;
    if requests == 0 {
        return Err("redis-benchmark completed 0 requests".into());
    }
    let summary = summary.ok_or("no latency summary (avg min p50 p95 p99 max)")?;
    let get = |k: &str| {
        summary
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| *v)
            .ok_or(format!("the latency summary has no {k}"))
    };
    if points.last().map(|p| p.count) != Some(requests)
        && !points.iter().any(|p| p.count == requests)
    {
        return Err(format!(
            "the latency distribution does not reach the {requests} requests completed"
        ));
    }
    let (p999_lower_ms, p999_ms) =
        quantile_bracket(&points, requests, 0.999).ok_or("no latency distribution")?;
    Ok(RedisBench {
        test,
        requests,
        secs: secs.ok_or("no test duration")?,
        clients: clients.ok_or("no \"N parallel clients\" line")?,
        rps: rps.ok_or("no throughput summary")?,
        avg_ms: get("avg")?,
        min_ms: get("min")?,
        p50_ms: get("p50")?,
        p95_ms: get("p95")?,
        p99_ms: get("p99")?,
        p999_ms,
        p999_lower_ms,
        max_ms: get("max")?,
    })
}

/// utime + stime (clock ticks) of a `/proc/PID/stat` line: fields 14 and 15, counted after the
/// parenthesised command name (which may hold spaces and parentheses).
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// One core's time from `/proc/stat` (USER_HZ ticks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreTicks {
    /// user + nice + system + irq + softirq (guest time is inside user and nice).
    pub busy: u64,
    /// idle + iowait.
    pub idle: u64,
    /// Time the hypervisor ran something else.
    pub steal: u64,
}

/// The `cpuN` line of `/proc/stat` for `core`.
pub fn core_ticks(proc_stat: &str, core: usize) -> Option<CoreTicks> {
    let name = format!("cpu{core}");
    let line = proc_stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Some(CoreTicks {
        busy: at(0) + at(1) + at(2) + at(5) + at(6),
        idle: at(3) + at(4),
        steal: at(7),
    })
}

/// The sum of every series of metric `name` (with or without labels) in a Prometheus text
/// page; `None` when the page has none.
pub fn prom_sum(page: &str, name: &str) -> Option<f64> {
    let mut sum = None;
    for l in page.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = l.strip_prefix(name) else {
            continue;
        };
        let value = if rest.starts_with('{') {
            rest.rfind('}').map(|i| &rest[i + 1..])
        } else if rest.starts_with(' ') {
            Some(rest)
        } else {
            None
        };
        if let Some(v) = value
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
        {
            *sum.get_or_insert(0.0) += v;
        }
    }
    sum
}

/// The value of a Prometheus instant-query answer with one series (`/api/v1/query`).
pub fn prom_query_value(answer: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(answer).ok()?;
    if v["status"] != "success" {
        return None;
    }
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Median, minimum and maximum of `v` (NaN for none).
pub fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (median, s[0], s[n - 1])
}
