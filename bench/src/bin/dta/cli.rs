//! The command line of `dta`: the clap argument structs and value enums (what `dta --help`
//! shows). No command runs here; `main.rs` dispatches each parsed command to its runner.

use std::net::SocketAddrV4;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use dta_bench::gen::{Mix, Scenario};
use dta_proto::wire::report::ReportFormat;

/// DTA (Direct Telemetry Access) workbench: run the whole system end to end on loopback,
/// generate telemetry workloads, and measure.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Drive a running collector cluster (scripts/cluster-demo): send the papers' mix to its
    /// translators, then query everything back through the cluster client and check that
    /// every Key-Write key comes from its owner with its value, every counter adds up and
    /// every Append entry is recovered. Exits 1 on any mismatch.
    ClusterDemo {
        /// Cluster file.
        #[arg(long, value_name = "FILE")]
        cluster: PathBuf,
        /// The translators' report addresses (comma-separated).
        #[arg(long, value_delimiter = ',', required = true)]
        translators: Vec<SocketAddrV4>,
        /// Reports to send.
        #[arg(long, default_value_t = 20_000)]
        count: u64,
        /// Reports per second over all translators.
        #[arg(long, default_value_t = 20_000)]
        rate: u64,
        /// Append lists per event type (loss events on 0..L, congestion on L..2L).
        #[arg(long, default_value_t = 8)]
        lists: u32,
        /// Workload seed.
        #[arg(long, default_value_t = 2023)]
        seed: u64,
        /// Seconds to wait for the last frames before calling a difference a mismatch.
        #[arg(long, default_value_t = 10)]
        settle_secs: u64,
    },
    /// Run collector (software RNIC) + translator + report generator on loopback and check
    /// every answer against what was sent.
    Demo {
        /// Key-Write INT path reports (one per flow, 20-byte paths, keyed by 5-tuple).
        #[arg(long, default_value_t = 1_000_000)]
        keywrite: u64,
        /// Append loss events (18 bytes each).
        #[arg(long, default_value_t = 1_000_000)]
        append: u64,
        /// Append lists.
        #[arg(long, default_value_t = 8)]
        lists: u32,
        /// Ring capacity per list, in entries.
        #[arg(long, default_value_t = 65536)]
        capacity: u32,
        /// Key-Write slots, as a power of two.
        #[arg(long, default_value_t = 23)]
        slots_log2: u32,
        /// Key-Write redundancy N.
        #[arg(long, default_value_t = 2)]
        redundancy: u8,
        /// Append batch size (1..=16).
        #[arg(long, default_value_t = 16)]
        batch: u32,
        /// Reports per second (0 = as fast as the translator takes them).
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Workload seed.
        #[arg(long, default_value_t = 2023)]
        seed: u64,
    },
    /// Check a capture (e.g. `translator.capture`): parse every RoCEv2 frame (UDP 4791) with
    /// the project's parser and verify its ICRC. Prints the counts (ok / bad ICRC / malformed
    /// / not RoCE); exits 1 if any RoCEv2 frame is bad, 2 if the file cannot be read.
    PcapCheck {
        /// The pcap file (Ethernet link type).
        file: PathBuf,
        /// UDP destination ports carrying RoCEv2 (repeat or comma-separate; a software RNIC
        /// may listen on another port than 4791).
        #[arg(long, value_delimiter = ',', default_value = "4791")]
        roce_port: Vec<u16>,
        /// Print the counts as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// (Internal: the bare DPDK receive loop of `dta replay --backend dpdk`, run as a child.)
    #[command(hide = true)]
    BareRxDpdk {
        #[arg(long)]
        ns: String,
        #[arg(long)]
        iface: String,
        #[arg(long, default_value_t = 1000)]
        idle_ms: u64,
    },
    /// Print the P4 include file of constants generated from `dta_proto`
    /// (`p4/include/dta_constants.p4`).
    P4Constants,
    /// Regenerate the shared conformance corpus (reports, expected RoCEv2 frames, expected
    /// collector memory) from the independent model.
    Corpus {
        /// Output folder.
        #[arg(long, default_value = "tests/corpus")]
        out: std::path::PathBuf,
    },
    /// Generate the papers' telemetry workloads: to a UDP target at a rate, or to a pcap file.
    /// With --traffic: the reports the switches of a topology would send for a packet capture
    /// of your own traffic (see bench/README.md, "Bring your own traffic").
    Gen {
        #[command(flatten)]
        scenario: ScenarioArgs,
        #[command(flatten)]
        traffic: TrafficArgs,
        /// Reports to generate.
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        /// Write Ethernet/IPv4/UDP frames to this pcap file (plus FILE.json with the scenario).
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// Send to this UDP address (a translator's report port).
        #[arg(long)]
        target: Option<SocketAddrV4>,
        /// Reports per second (0 = as fast as possible); for pcap, sets the capture timestamps.
        #[arg(long, default_value_t = 0)]
        rate: u64,
    },
    /// Write Sketch-Merge reports: every switch of a fat tree summarises each epoch's flows in a
    /// Count-Min sketch (sketch ID 1, packets per 5-tuple) and a HyperLogLog (ID 2, distinct
    /// 5-tuples) and sends them column by column, in order (Ethernet/IPv4/UDP to a pcap, with
    /// FILE.json holding the sketch shapes and each epoch's ground truth; or live to --target).
    GenSketch {
        /// Write the reports to this pcap file (plus FILE.json).
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// The translator's report address (the reports' destination; with no --pcap they
        /// are sent there).
        #[arg(long, default_value = "10.0.0.101:40040")]
        target: SocketAddrV4,
        /// Epochs to generate (each with its own flows).
        #[arg(long, default_value_t = 4)]
        epochs: u32,
        /// Fat-tree arity k (k*k + k*k/4 switches: k = 8 is 80 switches).
        #[arg(long, default_value_t = 8)]
        k: u32,
        /// Flows per epoch.
        #[arg(long, default_value_t = 20_000)]
        flows: u64,
        /// Count-Min rows (1..=8).
        #[arg(long, default_value_t = 4)]
        cm_rows: u8,
        /// Count-Min columns (a power of two).
        #[arg(long, default_value_t = 2048)]
        cm_columns: u32,
        /// HyperLogLog registers (a power of two, 2^4..2^16).
        #[arg(long, default_value_t = 1024)]
        hll_registers: u32,
        /// Columns per report.
        #[arg(long, default_value_t = 16)]
        columns_per_report: u32,
        /// The switches' sketch hashes: `independent` (software reporters) or `tofino` (what
        /// p4/reporter/dta_sketch_reporter.p4 computes); the collector's stores must say the
        /// same (`hash = "tofino"`).
        #[arg(long, value_enum, default_value_t = SketchHashArg::Independent)]
        hash: SketchHashArg,
        /// Flow-population seed.
        #[arg(long, default_value_t = 2023)]
        seed: u64,
        /// Live sending: reports per second (0 = as fast as possible).
        #[arg(long, default_value_t = 0)]
        rate: u64,
    },
    /// Replay a pcap of reports through the translator (in memory on 1..k workers, and/or
    /// over kernel UDP through a translator and collector this command starts on loopback) and
    /// measure.
    Replay {
        /// The pcap file (a `FILE.json` scenario next to it is used when present).
        pcap: PathBuf,
        #[command(flatten)]
        scenario: ScenarioArgs,
        /// Which path.
        #[arg(long, value_enum, default_value = "both")]
        path: ReplayPath,
        /// Worker counts for the in-memory path (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        workers: Vec<usize>,
        /// Times the trace is replayed.
        #[arg(long, default_value_t = 1)]
        loops: u32,
        /// Discard frames instead of executing them in the software RNIC (pipeline only).
        #[arg(long)]
        no_rnic: bool,
        /// Keep only datagrams to this UDP port (0 = every UDP datagram of the capture).
        #[arg(long, default_value_t = dta_proto::consts::DTA_PORT)]
        port: u16,
        /// UDP path: reports per second (0 = as fast as the translator takes them).
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Write the results as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Instead of --path: drive the translator through these backends (comma-separated),
        /// each next to a bare receive loop of the same kind fed the same trace in the same run,
        /// and compare packets per receiver CPU-second (see bench/README.md).
        #[arg(long, value_enum, value_delimiter = ',')]
        backend: Vec<BackendArg>,
        /// With --backend: measure capacity with full bursts instead: freeze each receiver
        /// (cgroup v1 freezer; root), queue this many reports (capped by the backend's queue:
        /// 31,744 for AF_XDP and DPDK), thaw it and time the drain. 0: a flow-controlled sender
        /// feeds a running receiver.
        #[arg(long, default_value_t = 0)]
        prefill: u64,
        /// With --prefill: freeze-fill-drain rounds per side (figures are summed over them).
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// Where the collector's side of the veth pair receives the translator's frames.
        /// `thread`: in its own NAPI kernel thread, as a collector on another host would; with
        /// --prefill the kernel UDP comparison then also runs on the veth pair. `inline`: in the
        /// sending thread (veth's default), so the translator's worker is also charged for the
        /// collector's receive; kernel UDP runs on loopback.
        #[arg(long, value_enum, default_value = "thread")]
        collector_rx: CollectorRx,
    },
    /// Receive telemetry reports on a UDP socket, parse them and store them in Redis,
    /// ClickHouse or InfluxDB with the database's batched native protocol: the ingest process
    /// of `dta bench collectors`. Prints `LISTEN <addr>`, then `RECEIVED <n>` as reports arrive
    /// and `DONE <json>` at the end; stops after `FINISH <n>` on standard input once n reports
    /// arrived, or when standard input closes and no report came for 2 s.
    Ingest {
        /// The database.
        #[arg(long, value_enum)]
        db: DbArg,
        /// Its address: Redis's port, or the HTTP port of ClickHouse or InfluxDB.
        #[arg(long, value_name = "HOST:PORT")]
        server: String,
        /// Where to receive reports (port 0: a free one, printed).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddrV4,
        /// The ClickHouse or InfluxDB database (created if missing).
        #[arg(long, default_value = "dta")]
        database: String,
        /// Reports per batch (default: Redis 1000, ClickHouse 100000, InfluxDB 5000).
        #[arg(long)]
        batch: Option<usize>,
        /// Longest a report waits in a batch, ms (default: Redis 10, the others 1000).
        #[arg(long)]
        flush_ms: Option<u64>,
        /// Report profile.
        #[arg(long, default_value = "extended")]
        profile: ReportFormat,
    },
    /// Run a benchmark sweep and write FIGURE.json and FIGURE.svg.
    Bench {
        /// Which figure.
        #[arg(value_enum)]
        figure: Figure,
        /// Reports per generated trace.
        #[arg(long, default_value_t = 1_000_000)]
        reports: usize,
        /// Times each trace is replayed.
        #[arg(long, default_value_t = 3)]
        loops: u32,
        /// Output directory.
        #[arg(long, default_value = "bench/results")]
        out: PathBuf,
        /// Do not pin workers to cores.
        #[arg(long)]
        no_pin: bool,
        /// Report profile for the baselines run.
        #[arg(long, default_value = "extended")]
        profile: ReportFormat,
        /// `dart`: the reporter QP counts to measure (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000,10000")]
        qps: Vec<u32>,
        /// `zero`: the agent counts of the capacity measurement (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
        agents: Vec<usize>,
        #[command(flatten)]
        zi: ZeroInterferenceArgs,
        #[command(flatten)]
        servers: ServerArgs,
    },
}

/// `dta gen --traffic`: a capture of ordinary traffic instead of the papers' mix.
#[derive(Args, Debug, Clone)]
pub(crate) struct TrafficArgs {
    /// A pcap or pcapng capture of ordinary traffic to convert into the reports the switches of
    /// --topology would send for it (--mix and --count do not apply).
    #[arg(long, value_name = "CAPTURE")]
    pub(crate) traffic: Option<PathBuf>,
    /// With --traffic: `fat-tree:k=K` (switch IDs from --id-base / --switch-ids) or a topology
    /// file (bench/README.md has the format). Default: the fat tree of --k.
    #[arg(long, value_name = "fat-tree:k=K|FILE", requires = "traffic")]
    pub(crate) topology: Option<String>,
    /// With --traffic: the epoch of flow counters and sketches (`100ms`, `1s`, ...).
    #[arg(long, default_value = "1s", requires = "traffic")]
    pub(crate) epoch: String,
    /// With --traffic: report times run this many times faster than the capture.
    #[arg(long, default_value_t = 1.0, requires = "traffic")]
    pub(crate) speed: f64,
    /// With --traffic: postcards for every N-th packet of each flow (1: every packet).
    #[arg(long, default_value_t = 1, requires = "traffic")]
    pub(crate) postcard_every: u32,
    /// With --traffic: the rate every modelled egress queue drains at (Gbit/s).
    #[arg(long, default_value_t = 10.0, requires = "traffic")]
    pub(crate) link_gbps: f64,
    /// With --traffic: queue depth (bytes) above which a switch reports congestion.
    #[arg(long, default_value_t = 30_000, requires = "traffic")]
    pub(crate) queue_threshold: u32,
    /// With --traffic: rows of each switch's Count-Min of flow sizes.
    #[arg(long, default_value_t = 4, requires = "traffic")]
    pub(crate) cm_rows: u8,
    /// With --traffic: columns of that Count-Min (a power of two).
    #[arg(long, default_value_t = 512, requires = "traffic")]
    pub(crate) cm_columns: u32,
    /// With --traffic: registers of each switch's HyperLogLog of flows (a power of two).
    #[arg(long, default_value_t = 512, requires = "traffic")]
    pub(crate) hll_registers: u32,
}

/// The settings of `dta bench zero-interference` (bench/README.md "ZERO interference").
#[derive(Args, Debug, Clone)]
pub(crate) struct ZeroInterferenceArgs {
    /// `zero-interference`: seconds of Redis load per run (with --requests 0: the requests per
    /// run are this times the throughput of an unmonitored calibration run).
    #[arg(long, default_value_t = 60.0)]
    pub(crate) secs: f64,
    /// `zero-interference`: rounds; each runs every monitor once, in a rotated order.
    #[arg(long, default_value_t = 3)]
    pub(crate) rounds: u32,
    /// `zero-interference`: the monitoring configurations (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "none,node-exporter,node-exporter-matched,dta-agent"
    )]
    pub(crate) monitors: Vec<dta_bench::interference::Monitor>,
    /// `zero-interference`: redis-benchmark parallel clients.
    #[arg(long, default_value_t = 50)]
    pub(crate) clients: u32,
    /// `zero-interference`: redis-benchmark pipeline depth.
    #[arg(long, default_value_t = 1)]
    pub(crate) pipeline: u32,
    /// `zero-interference`: GET requests per run (0: from --secs and a calibration run).
    #[arg(long, default_value_t = 0)]
    pub(crate) requests: u64,
    /// `zero-interference`: the monitored host's core (Redis, node_exporter, dta-agent).
    #[arg(long, default_value_t = 1)]
    pub(crate) monitored_core: usize,
    /// `zero-interference`: the other core (redis-benchmark, Prometheus, dta-collector).
    #[arg(long, default_value_t = 0)]
    pub(crate) other_core: usize,
    /// `zero-interference`: monitoring interval (scrape, pull, agent sampling) in ms.
    #[arg(long, default_value_t = 1000)]
    pub(crate) interval_ms: u32,
    /// `zero-interference`: run in a cgroup v1 `cpu` group of this many shares (root; 0: no
    /// group). On a machine shared with other sessions (each an autogroup of 1024) a large
    /// value makes the two cores behave more like a dedicated host; inside the group Redis and
    /// the monitor compete as equals.
    #[arg(long, default_value_t = 0)]
    pub(crate) cpu_shares: u64,
    /// `zero-interference`: the servers' data and logs go here (default: a new directory in
    /// the system's temporary one, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub(crate) work: Option<PathBuf>,
    /// `zero-interference`: keep the work directory.
    #[arg(long)]
    pub(crate) keep_work: bool,
    /// `zero-interference`: where dta-agent and dta-collector are (default: next to `dta`).
    #[arg(long, value_name = "DIR")]
    pub(crate) bin_dir: Option<PathBuf>,
}

/// The database servers of `dta bench collectors` (`scripts/bench-collectors.sh` starts them
/// and passes these).
#[derive(Args, Debug, Clone)]
pub(crate) struct ServerArgs {
    /// `collectors`: Redis's address.
    #[arg(long, value_name = "HOST:PORT", requires = "redis_pid")]
    pub(crate) redis: Option<String>,
    /// `collectors`: the Redis server's process ID.
    #[arg(long, value_name = "PID")]
    pub(crate) redis_pid: Option<u32>,
    /// `collectors`: ClickHouse's HTTP address.
    #[arg(long, value_name = "HOST:PORT", requires = "clickhouse_pid")]
    pub(crate) clickhouse: Option<String>,
    /// `collectors`: the ClickHouse server's process ID.
    #[arg(long, value_name = "PID")]
    pub(crate) clickhouse_pid: Option<u32>,
    /// `collectors`: InfluxDB's HTTP address.
    #[arg(long, value_name = "HOST:PORT", requires = "influxdb_pid")]
    pub(crate) influxdb: Option<String>,
    /// `collectors`: the InfluxDB server's process ID.
    #[arg(long, value_name = "PID")]
    pub(crate) influxdb_pid: Option<u32>,
    /// `collectors`: Key-Write point lookups per contender.
    #[arg(long, default_value_t = 1000)]
    pub(crate) lookups: usize,
    /// `collectors`: seconds after the last acknowledged report during which the servers'
    /// CPU above their idle rate still counts (background merges, snapshots).
    #[arg(long, default_value_t = 3)]
    pub(crate) settle_secs: u64,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DbArg {
    Redis,
    Clickhouse,
    Influxdb,
}

/// Workload parameters shared by `gen` and `replay` (a pcap written by `gen` records them in
/// `FILE.json` next to it, which `replay` reads back).
#[derive(Args, Debug, Clone)]
pub(crate) struct ScenarioArgs {
    /// Report mix: weights such as `kw=4,pc=5,loss=2,cong=1,ctr=2`, or one of `keywrite`,
    /// `postcard`, `loss`, `congestion`, `counter`, `all`.
    #[arg(long, default_value = "kw=4,pc=5,loss=2,cong=1,ctr=2")]
    pub(crate) mix: String,
    /// Wire profile: `extended`, `reference-b` (3-byte header) or `reference-a` (2-byte).
    #[arg(long, default_value = "extended")]
    pub(crate) profile: ReportFormat,
    /// Fat-tree arity k (even).
    #[arg(long, default_value_t = 8)]
    pub(crate) k: u32,
    /// Switch IDs to use instead of `id-base + index`: comma-separated values and ranges
    /// (`100-179,300`), assigned to ToRs and Aggs pod by pod, then cores.
    #[arg(long)]
    pub(crate) switch_ids: Option<String>,
    /// First switch ID (when --switch-ids is not given).
    #[arg(long, default_value_t = 1)]
    pub(crate) id_base: u32,
    /// Flows active at once.
    #[arg(long, default_value_t = 1024)]
    pub(crate) concurrent: u32,
    /// Pareto shape of packets per flow (smaller = heavier tail).
    #[arg(long, default_value_t = 1.3)]
    pub(crate) shape: f64,
    /// Key-Write / Key-Increment redundancy N.
    #[arg(long, default_value_t = 2)]
    pub(crate) redundancy: u8,
    /// Append lists per event type.
    #[arg(long, default_value_t = 8)]
    pub(crate) lists: u32,
    /// Append batch size (1..=16), for the collector stores of `replay`.
    #[arg(long, default_value_t = 16)]
    pub(crate) batch: u32,
    /// Translator postcard cache slots.
    #[arg(long, default_value_t = 4096)]
    pub(crate) cache_slots: u32,
    /// Key-Write and Key-Increment slots, log2.
    #[arg(long, default_value_t = 20)]
    slots_log2: u32,
    /// Seed.
    #[arg(long, default_value_t = 2023)]
    pub(crate) seed: u64,
    /// Write P4.org Telemetry Reports of this version (1 or 2) instead of DTA reports: INT-MD
    /// sink reports (paths), INT-XD postcards, drop and congestion reports, inner-only reports
    /// (counters), by the same mix weights (`kw`, `pc`, `loss`, `cong`, `ctr`). 0: DTA reports.
    #[arg(long, default_value_t = 0)]
    pub(crate) telemetry: u8,
    /// UDP port of Telemetry Reports (the translator's `[int] port`); `replay` hands datagrams
    /// to this port to the INT ingest.
    #[arg(long, default_value_t = dta_bench::gen::INT_PORT)]
    pub(crate) int_port: u16,
}

pub(crate) fn parse_ids(s: &str) -> Result<Vec<u32>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (
                    a.parse().map_err(|e| format!("{part}: {e}"))?,
                    b.parse().map_err(|e| format!("{part}: {e}"))?,
                );
                if b < a || b - a > 1 << 20 {
                    return Err(format!("bad range {part}"));
                }
                v.extend(a..=b);
            }
            None => v.push(part.parse().map_err(|e| format!("{part}: {e}"))?),
        }
    }
    Ok(v)
}

impl ScenarioArgs {
    pub(crate) fn scenario(&self) -> Result<Scenario, String> {
        let sc = Scenario {
            profile: self.profile,
            mix: Mix::parse(&self.mix)?,
            k: self.k,
            switch_ids: match &self.switch_ids {
                Some(s) => parse_ids(s)?,
                None => Vec::new(),
            },
            id_base: self.id_base,
            concurrent: self.concurrent,
            shape: self.shape,
            redundancy: self.redundancy,
            lists: self.lists,
            batch: self.batch,
            cache_slots: self.cache_slots,
            slots_log2: self.slots_log2,
            seed: self.seed,
            telemetry: self.telemetry,
            int_port: self.int_port,
            ..Scenario::default()
        };
        sc.validate()?;
        Ok(sc)
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplayPath {
    /// In memory: pipeline + software RNIC per worker thread.
    Memory,
    /// Kernel UDP sockets on loopback, through a translator and a collector (software RNIC)
    /// that this command starts and stops itself.
    Udp,
    /// Both.
    Both,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CollectorRx {
    /// veth A's receive in a NAPI kernel thread.
    Thread,
    /// veth A's receive in the sender's context.
    Inline,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackendArg {
    /// In memory (same as --path memory).
    Memory,
    /// Kernel UDP on loopback vs a bare recvmmsg loop.
    Udp,
    /// The pcap backend (trace pre-filled in memory) vs a bare PcapBackend loop.
    Pcap,
    /// AF_XDP on a veth pair (root; build with --features af_xdp) vs a bare AF_XDP rx loop.
    AfXdp,
    /// DPDK net_af_packet on a veth pair (root; --features dpdk) vs a bare DPDK rx loop.
    Dpdk,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Figure {
    /// One core, in memory: the issue-4 targets and the 2-worker ratio.
    Micro,
    /// Fig. 10: Append throughput vs batch size.
    Append,
    /// Fig. 12: Key-Write throughput vs N.
    Keywrite,
    /// Fig. 14: Postcarding vs cache size and concurrent flows.
    Postcard,
    /// Fig. 15: Key-Write query success vs load factor, with the formula.
    Query,
    /// Collector CPU per report: cuckoo, MultiLog, dta software RNIC.
    Baselines,
    /// Sketch-Merge on one core: merge kernel (vs memcpy and a scalar loop), the translator
    /// pipeline, and merged vs central vs true sketches (sketch.svg).
    Sketch,
    /// DART (every reporter its own QP, no translator) vs one translator: collector CPU per
    /// report and lost/late writes as reporter QPs grow (--qps), same reports, same store.
    Dart,
    /// ZERO (the collector pulls with RDMA READ from dta-agents): collecting-thread CPU per
    /// agent round as agents grow (--agents), READ latency under incast with and without
    /// Credit-FC.
    Zero,
    /// dta against Redis, ClickHouse and InfluxDB storing the same telemetry through an ingest
    /// process: collector-host CPU per report, memory per million entries, point-lookup
    /// latency (servers from --redis, --clickhouse, --influxdb; one command that installs and
    /// starts them: scripts/bench-collectors.sh). Not part of `all`.
    Collectors,
    /// Every figure above but `collectors`.
    All,
    /// ZERO interference (not part of `all`: needs Debian's redis-server, redis-tools,
    /// prometheus and prometheus-node-exporter; scripts/bench-zero-interference.sh installs
    /// them): Redis latency and throughput on core 1 unmonitored, monitored by node_exporter
    /// scraped by Prometheus, and by dta-agent pulled with RDMA READ, with the monitored
    /// core's CPU spent on monitoring.
    ZeroInterference,
    /// Redraw the SVGs from the JSON results in --out (no measurement).
    Plot,
}

/// `--hash` of `dta gen-sketch`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum SketchHashArg {
    Independent,
    Tofino,
}
