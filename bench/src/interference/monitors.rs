//! One monitoring configuration running: its servers started (node_exporter and Prometheus,
//! or dta-agent and dta-collector), checked to be working, and its progress read.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::host::{free_tcp_port, http_get, log_tail, url_encode, Server, Tools};
use super::parse::{prom_query_value, prom_sum};
use super::*;
use crate::sender::free_udp_port;

/// The monitor of one run, started and answering.
pub(super) struct Running {
    /// On the monitored core: node_exporter or dta-agent.
    pub(super) host: Option<Server>,
    /// On the other core: Prometheus or dta-collector.
    pub(super) collector: Option<Server>,
    /// Prometheus' web port, or the collector's control port.
    pub(super) collector_port: u16,
    /// dta-agent's metrics port.
    pub(super) agent_port: u16,
}

/// What proves the monitor worked, read before and after the load.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Collected {
    /// Scrapes that succeeded (Prometheus `up`) or pull rounds done.
    pub(super) done: f64,
    /// Scrapes attempted; READs the agent served.
    pub(super) tried: f64,
    /// Software-RNIC CPU the agent counts (s).
    pub(super) rnic_cpu_s: f64,
    /// Samples per scrape (Prometheus) or blocks in the agent's region.
    pub(super) size: f64,
}

/// Prometheus' configuration: one job, `node`, scraping 127.0.0.1:`port` every `interval_ms`
/// (in ms: Prometheus durations take whole units only), time-out the same.
pub(super) fn prometheus_config(interval_ms: u32, port: u16) -> String {
    format!(
        "global:\n  scrape_interval: {interval_ms}ms\n  scrape_timeout: {interval_ms}ms\n  \
         evaluation_interval: 1h\nscrape_configs:\n  - job_name: node\n    \
         static_configs:\n      - targets: [\"127.0.0.1:{port}\"]\n"
    )
}

pub(super) fn prometheus_query(port: u16, q: &str) -> Option<f64> {
    let body = http_get(port, &format!("/api/v1/query?query={}", url_encode(q))).ok()?;
    prom_query_value(&body)
}

impl Running {
    pub(super) fn start(
        m: Monitor,
        o: &InterferenceOptions,
        tools: &Tools,
        dir: &Path,
    ) -> Result<Running, String> {
        let (mc, oc) = (o.monitored_core, o.other_core);
        match m {
            Monitor::None => Ok(Running {
                host: None,
                collector: None,
                collector_port: 0,
                agent_port: 0,
            }),
            Monitor::NodeExporter | Monitor::NodeExporterMatched => {
                let ne_port = free_tcp_port()?;
                let mut args = vec![format!("--web.listen-address=127.0.0.1:{ne_port}")];
                if m == Monitor::NodeExporterMatched {
                    args.extend(
                        [
                            "--collector.disable-defaults",
                            "--collector.cpu",
                            "--collector.netdev",
                            "--collector.stat",
                        ]
                        .map(String::from),
                    );
                }
                let host = Server::start("node_exporter", mc, &tools.node_exporter, &args, dir)?;
                let prom_port = free_tcp_port()?;
                let cfg = dir.join("prometheus.yml");
                std::fs::write(&cfg, prometheus_config(o.interval_ms, ne_port))
                    .map_err(|e| format!("{}: {e}", cfg.display()))?;
                let args = vec![
                    format!("--config.file={}", cfg.display()),
                    format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
                    "--storage.tsdb.retention.time=1h".to_string(),
                    format!("--web.listen-address=127.0.0.1:{prom_port}"),
                    "--log.level=warn".to_string(),
                ];
                let collector = Server::start("prometheus", oc, &tools.prometheus, &args, dir)?;
                Ok(Running {
                    host: Some(host),
                    collector: Some(collector),
                    collector_port: prom_port,
                    agent_port: 0,
                })
            }
            Monitor::DtaAgent => {
                let roce = free_udp_port(Ipv4Addr::LOCALHOST)?;
                let agent_port = free_tcp_port()?;
                let args = vec![
                    "--listen".to_string(),
                    format!("127.0.0.1:{roce}"),
                    "--interval-ms".to_string(),
                    o.interval_ms.to_string(),
                    "--allow".to_string(),
                    "127.0.0.0/8".to_string(),
                    "--metrics-listen".to_string(),
                    format!("127.0.0.1:{agent_port}"),
                ];
                let host = Server::start("dta-agent", mc, &tools.agent, &args, dir)?;
                let control = free_tcp_port()?;
                let (rnic, pull) = (
                    free_udp_port(Ipv4Addr::LOCALHOST)?,
                    free_udp_port(Ipv4Addr::LOCALHOST)?,
                );
                let cfg = dir.join("collector.toml");
                std::fs::write(
                    &cfg,
                    format!(
                        "[collector]\nroce = \"127.0.0.1:{rnic}\"\ncontrol = \"127.0.0.1:{control}\"\n\
                         hugepages = false\n\n[pull]\nlisten = \"127.0.0.1:{pull}\"\n\
                         interval_ms = {}\n\n[[pull.agent]]\nname = \"redis-host\"\n\
                         roce = \"127.0.0.1:{roce}\"\ncm_port = 7700\n",
                        o.interval_ms
                    ),
                )
                .map_err(|e| format!("{}: {e}", cfg.display()))?;
                let args = vec![
                    "run".to_string(),
                    "-c".to_string(),
                    cfg.display().to_string(),
                ];
                let collector = Server::start("dta-collector", oc, &tools.collector, &args, dir)?;
                Ok(Running {
                    host: Some(host),
                    collector: Some(collector),
                    collector_port: control,
                    agent_port,
                })
            }
        }
    }

    pub(super) fn progress(&self, m: Monitor) -> Option<Collected> {
        match m {
            Monitor::None => Some(Collected::default()),
            Monitor::NodeExporter | Monitor::NodeExporterMatched => {
                let p = self.collector_port;
                Some(Collected {
                    done: prometheus_query(p, "sum_over_time(up{job=\"node\"}[1h])")?,
                    tried: prometheus_query(p, "count_over_time(up{job=\"node\"}[1h])")?,
                    rnic_cpu_s: 0.0,
                    size: prometheus_query(p, "scrape_samples_scraped{job=\"node\"}")?,
                })
            }
            Monitor::DtaAgent => {
                let c = http_get(self.collector_port, "/metrics").ok()?;
                let a = http_get(self.agent_port, "/metrics").ok()?;
                Some(Collected {
                    done: prom_sum(&c, "dta_pull_rounds_done_total")?,
                    tried: prom_sum(&a, "dta_agent_rnic_reads_total")?,
                    rnic_cpu_s: prom_sum(&a, "dta_agent_rnic_cpu_seconds_total")?,
                    size: prom_sum(&a, "dta_agent_region_blocks")?,
                })
            }
        }
    }

    /// Waits until the monitor has collected at least twice.
    pub(super) fn wait_working(&mut self, m: Monitor) -> Result<(), String> {
        if m == Monitor::None {
            return Ok(());
        }
        let t0 = Instant::now();
        loop {
            for s in [&mut self.host, &mut self.collector].into_iter().flatten() {
                s.check()?;
            }
            if self.progress(m).is_some_and(|p| p.done >= 2.0) {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let logs: Vec<String> = [&self.host, &self.collector]
                    .into_iter()
                    .flatten()
                    .map(|s| format!("{}: {}", s.name, log_tail(&s.log)))
                    .collect();
                return Err(format!(
                    "{} did not collect twice within 60 s ({})",
                    m.label(),
                    logs.join("; ")
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub(super) fn check(&mut self) -> Result<(), String> {
        for s in [&mut self.host, &mut self.collector].into_iter().flatten() {
            s.check()?;
        }
        Ok(())
    }
}
