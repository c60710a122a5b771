//! `dta bench FIGURE`: runs the chosen sweeps (or redraws them, `plot`).

use std::time::Duration;

use crate::cli::{Figure, ServerArgs};
use dta_bench::figures::{self, FigOptions};
use dta_proto::wire::report::ReportFormat;

pub(crate) fn bench_cmd(
    fig: Figure,
    o: &FigOptions,
    profile: ReportFormat,
    qps: &[u32],
    agents: &[usize],
    zi: &dta_bench::interference::InterferenceOptions,
    servers: &ServerArgs,
) -> Result<(), String> {
    if fig == Figure::ZeroInterference {
        eprintln!("== zero-interference (Redis on a monitored core: no monitor, node_exporter, dta-agent)");
        return dta_bench::interference::zero_interference(zi);
    }
    if fig == Figure::Collectors {
        use dta_bench::collectors::{self as cb, CollectorsOptions};
        let server = |a: &Option<String>, p: Option<u32>| {
            a.as_ref().map(|addr| cb::Server {
                addr: addr.clone(),
                pid: p.unwrap_or(0),
            })
        };
        eprintln!("== collectors (dta vs Redis, ClickHouse, InfluxDB)");
        cb::collectors(&CollectorsOptions {
            reports: o.reports,
            redis: server(&servers.redis, servers.redis_pid),
            clickhouse: server(&servers.clickhouse, servers.clickhouse_pid),
            influxdb: server(&servers.influxdb, servers.influxdb_pid),
            exe: std::env::current_exe().map_err(|e| e.to_string())?,
            lookups: servers.lookups,
            counter_checks: 200,
            settle: Duration::from_secs(servers.settle_secs),
            window: 16384,
            out: o.out.clone(),
            verbose: o.verbose,
        })?;
        eprintln!("results in {}", o.out.display());
        return Ok(());
    }
    if fig == Figure::Plot {
        let n = figures::plot(&o.out)?;
        eprintln!("redrew {n} figure(s) in {}", o.out.display());
        return Ok(());
    }
    let all = fig == Figure::All;
    if all || fig == Figure::Micro {
        eprintln!("== micro (one core, in memory)");
        figures::micro(o)?;
    }
    if all || fig == Figure::Append {
        eprintln!("== append (Fig. 10)");
        figures::append(o)?;
    }
    if all || fig == Figure::Keywrite {
        eprintln!("== keywrite (Fig. 12)");
        figures::keywrite(o)?;
    }
    if all || fig == Figure::Postcard {
        eprintln!("== postcard (Fig. 14)");
        figures::postcard(o)?;
    }
    if all || fig == Figure::Query {
        eprintln!("== query (Fig. 15)");
        figures::query(o)?;
    }
    if all || fig == Figure::Baselines {
        eprintln!("== baselines (collector CPU per report)");
        figures::baselines(o, profile)?;
    }
    if all || fig == Figure::Sketch {
        eprintln!("== sketch (Sketch-Merge, one core, in memory)");
        dta_bench::sketchbench::sketch(o)?;
    }
    if all || fig == Figure::Dart {
        eprintln!("== dart (DART reporter QPs vs one translator, software RNIC)");
        dta_bench::dartbench::dart(o, qps)?;
    }
    if all || fig == Figure::Zero {
        eprintln!("== zero (pull with RDMA READ from dta-agents, software RNIC)");
        dta_bench::zerobench::zero(o, agents)?;
    }
    eprintln!("results in {}", o.out.display());
    Ok(())
}
