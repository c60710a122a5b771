//! The agent's Prometheus page: what its RNIC served (READs, bytes, RDMA_CM, the CPU it took),
//! what the host sampler did, the region's shape, and the standard `process_*` metrics.
//! Rendered by the HTTP thread from counters the serving and sampling threads publish.

use dta_proto::stats::{PromKind, PromWriter};

use crate::host::SamplerCounters;
use crate::region::AgentRegion;
use crate::server::AgentCounters;

/// What the page shows besides the region (published by the threads that own the counters).
#[derive(Debug, Clone, Copy, Default)]
pub struct Published {
    /// The RNIC's counters.
    pub agent: AgentCounters,
    /// The sampler's counters.
    pub sampler: SamplerCounters,
    /// The HTTP server's own counters (filled in by the server as it renders the page).
    pub http: dta_http::ServerStats,
}

/// The `/metrics` page.
pub fn render(region: &AgentRegion, p: &Published) -> String {
    let mut w = PromWriter::new();
    w.build_info(env!("CARGO_PKG_VERSION"), &[]);
    w.single(
        PromKind::Gauge,
        "dta_agent_region_bytes",
        "Bytes of the metric region the RNIC serves.",
        region.len() as f64,
    );
    w.single(
        PromKind::Gauge,
        "dta_agent_region_blocks",
        "Metric blocks the region describes.",
        region.blocks().len() as f64,
    );
    w.single(
        PromKind::Gauge,
        "dta_agent_region_generation",
        "The control header's generation (changes when a block is added).",
        region.generation() as f64,
    );
    let a = &p.agent;
    w.single(
        PromKind::Counter,
        "dta_agent_rnic_cpu_seconds",
        "CPU time the software RNIC spent serving (receive, RDMA_CM, READ responses, send).",
        a.cpu_ns as f64 / 1e9,
    );
    for (name, help, v) in [
        (
            "dta_agent_rx_datagrams",
            "UDP datagrams the RNIC received.",
            a.rx_datagrams,
        ),
        (
            "dta_agent_rx_bytes",
            "UDP payload bytes the RNIC received.",
            a.rx_bytes,
        ),
        (
            "dta_agent_tx_datagrams",
            "UDP datagrams the RNIC sent.",
            a.tx_datagrams,
        ),
        (
            "dta_agent_tx_bytes",
            "UDP payload bytes the RNIC sent (mostly READ responses).",
            a.tx_bytes,
        ),
        (
            "dta_agent_rnic_polls",
            "Wakes of the RNIC that found work.",
            a.polls,
        ),
    ] {
        w.single(PromKind::Counter, name, help, v as f64);
    }
    let row = |v: Vec<u64>| vec![(Vec::new(), v)];
    w.counter_families(
        "dta_agent_rnic",
        dta_rnic::counters::RnicCounters::INFO,
        &[],
        &row(a.rnic.values()),
    );
    w.counter_families(
        "dta_agent",
        dta_rnic::cm::CmCounters::INFO,
        &[],
        &row(a.cm.values()),
    );
    w.counter_families(
        "dta_agent_sampler",
        SamplerCounters::INFO,
        &[],
        &row(p.sampler.values()),
    );
    for (name, counter, help, v) in p.http.families() {
        let kind = if counter {
            PromKind::Counter
        } else {
            PromKind::Gauge
        };
        w.single(kind, &format!("dta_agent_{name}"), help, v as f64);
    }
    if let Ok(ps) = dta_io::process::ProcessStats::read() {
        ps.write_prom(&mut w);
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_passes_promtool() {
        let region = AgentRegion::new(1 << 16, 4).unwrap();
        let mut p = Published::default();
        p.agent.rnic.reads = 3;
        p.agent.cpu_ns = 1_500;
        let page = render(&region, &p);
        assert!(page.contains("# TYPE dta_agent_rnic_reads_total counter\n"));
        assert!(page.contains("dta_agent_rnic_reads_total 3\n"));
        assert!(page.contains("dta_agent_cm_req_total 0\n"));
        assert!(page.contains("dta_agent_region_bytes 65536\n"));
        assert!(page.contains("# TYPE dta_agent_http_auth_throttled_total counter\n"));
        match dta_io::process::promtool_check_metrics(&page) {
            None => eprintln!("SKIP: promtool not found"),
            Some(r) => assert_eq!(r, Ok(()), "{page}"),
        }
    }
}
