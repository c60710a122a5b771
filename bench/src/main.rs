//! `dta`: the DTA workbench. `dta demo` runs the whole system on loopback; `dta gen` writes
//! telemetry workloads to a UDP target or a pcap file; `dta replay` replays a pcap through the
//! translator; `dta bench` runs the sweeps behind the figures in `bench/README.md`.

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand, ValueEnum};

use dta_bench::demo::{self, DemoOptions};
use dta_bench::figures::{self, FigOptions};
use dta_bench::gen::{Generator, Mix, Scenario};
use dta_bench::progress::Progress;
use dta_bench::replay::{replay_memory, replay_udp, MemOptions, RnicMode, UdpReplayOptions};
use dta_bench::sender::PacedSender;
use dta_bench::trace::Trace;
use dta_proto::wire::report::ReportFormat;

/// DTA (Direct Telemetry Access) workbench: run the whole system end to end on loopback,
/// generate telemetry workloads, and measure.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
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
struct TrafficArgs {
    /// A pcap or pcapng capture of ordinary traffic to convert into the reports the switches of
    /// --topology would send for it (--mix and --count do not apply).
    #[arg(long, value_name = "CAPTURE")]
    traffic: Option<PathBuf>,
    /// With --traffic: `fat-tree:k=K` (switch IDs from --id-base / --switch-ids) or a topology
    /// file (bench/README.md has the format). Default: the fat tree of --k.
    #[arg(long, value_name = "fat-tree:k=K|FILE", requires = "traffic")]
    topology: Option<String>,
    /// With --traffic: the epoch of flow counters and sketches (`100ms`, `1s`, ...).
    #[arg(long, default_value = "1s", requires = "traffic")]
    epoch: String,
    /// With --traffic: report times run this many times faster than the capture.
    #[arg(long, default_value_t = 1.0, requires = "traffic")]
    speed: f64,
    /// With --traffic: postcards for every N-th packet of each flow (1: every packet).
    #[arg(long, default_value_t = 1, requires = "traffic")]
    postcard_every: u32,
    /// With --traffic: the rate every modelled egress queue drains at (Gbit/s).
    #[arg(long, default_value_t = 10.0, requires = "traffic")]
    link_gbps: f64,
    /// With --traffic: queue depth (bytes) above which a switch reports congestion.
    #[arg(long, default_value_t = 30_000, requires = "traffic")]
    queue_threshold: u32,
    /// With --traffic: rows of each switch's Count-Min of flow sizes.
    #[arg(long, default_value_t = 4, requires = "traffic")]
    cm_rows: u8,
    /// With --traffic: columns of that Count-Min (a power of two).
    #[arg(long, default_value_t = 512, requires = "traffic")]
    cm_columns: u32,
    /// With --traffic: registers of each switch's HyperLogLog of flows (a power of two).
    #[arg(long, default_value_t = 512, requires = "traffic")]
    hll_registers: u32,
}

/// The settings of `dta bench zero-interference` (bench/README.md "ZERO interference").
#[derive(Args, Debug, Clone)]
struct ZeroInterferenceArgs {
    /// `zero-interference`: seconds of Redis load per run (with --requests 0: the requests per
    /// run are this times the throughput of an unmonitored calibration run).
    #[arg(long, default_value_t = 60.0)]
    secs: f64,
    /// `zero-interference`: rounds; each runs every monitor once, in a rotated order.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// `zero-interference`: the monitoring configurations (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "none,node-exporter,node-exporter-matched,dta-agent"
    )]
    monitors: Vec<dta_bench::interference::Monitor>,
    /// `zero-interference`: redis-benchmark parallel clients.
    #[arg(long, default_value_t = 50)]
    clients: u32,
    /// `zero-interference`: redis-benchmark pipeline depth.
    #[arg(long, default_value_t = 1)]
    pipeline: u32,
    /// `zero-interference`: GET requests per run (0: from --secs and a calibration run).
    #[arg(long, default_value_t = 0)]
    requests: u64,
    /// `zero-interference`: the monitored host's core (Redis, node_exporter, dta-agent).
    #[arg(long, default_value_t = 1)]
    monitored_core: usize,
    /// `zero-interference`: the other core (redis-benchmark, Prometheus, dta-collector).
    #[arg(long, default_value_t = 0)]
    other_core: usize,
    /// `zero-interference`: monitoring interval (scrape, pull, agent sampling) in ms.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u32,
    /// `zero-interference`: run in a cgroup v1 `cpu` group of this many shares (root; 0: no
    /// group). On a machine shared with other sessions (each an autogroup of 1024) a large
    /// value makes the two cores behave more like a dedicated host; inside the group Redis and
    /// the monitor compete as equals.
    #[arg(long, default_value_t = 0)]
    cpu_shares: u64,
    /// `zero-interference`: the servers' data and logs go here (default: a new directory in
    /// the system's temporary one, removed at the end).
    #[arg(long, value_name = "DIR")]
    work: Option<PathBuf>,
    /// `zero-interference`: keep the work directory.
    #[arg(long)]
    keep_work: bool,
    /// `zero-interference`: where dta-agent and dta-collector are (default: next to `dta`).
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
}

/// The database servers of `dta bench collectors` (`scripts/bench-collectors.sh` starts them
/// and passes these).
#[derive(Args, Debug, Clone)]
struct ServerArgs {
    /// `collectors`: Redis's address.
    #[arg(long, value_name = "HOST:PORT", requires = "redis_pid")]
    redis: Option<String>,
    /// `collectors`: the Redis server's process ID.
    #[arg(long, value_name = "PID")]
    redis_pid: Option<u32>,
    /// `collectors`: ClickHouse's HTTP address.
    #[arg(long, value_name = "HOST:PORT", requires = "clickhouse_pid")]
    clickhouse: Option<String>,
    /// `collectors`: the ClickHouse server's process ID.
    #[arg(long, value_name = "PID")]
    clickhouse_pid: Option<u32>,
    /// `collectors`: InfluxDB's HTTP address.
    #[arg(long, value_name = "HOST:PORT", requires = "influxdb_pid")]
    influxdb: Option<String>,
    /// `collectors`: the InfluxDB server's process ID.
    #[arg(long, value_name = "PID")]
    influxdb_pid: Option<u32>,
    /// `collectors`: Key-Write point lookups per contender.
    #[arg(long, default_value_t = 1000)]
    lookups: usize,
    /// `collectors`: seconds after the last acknowledged report during which the servers'
    /// CPU above their idle rate still counts (background merges, snapshots).
    #[arg(long, default_value_t = 3)]
    settle_secs: u64,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum DbArg {
    Redis,
    Clickhouse,
    Influxdb,
}

/// Workload parameters shared by `gen` and `replay` (a pcap written by `gen` records them in
/// `FILE.json` next to it, which `replay` reads back).
#[derive(Args, Debug, Clone)]
struct ScenarioArgs {
    /// Report mix: weights such as `kw=4,pc=5,loss=2,cong=1,ctr=2`, or one of `keywrite`,
    /// `postcard`, `loss`, `congestion`, `counter`, `all`.
    #[arg(long, default_value = "kw=4,pc=5,loss=2,cong=1,ctr=2")]
    mix: String,
    /// Wire profile: `extended`, `reference-b` (3-byte header) or `reference-a` (2-byte).
    #[arg(long, default_value = "extended")]
    profile: ReportFormat,
    /// Fat-tree arity k (even).
    #[arg(long, default_value_t = 8)]
    k: u32,
    /// Switch IDs to use instead of `id-base + index`: comma-separated values and ranges
    /// (`100-179,300`), assigned to ToRs and Aggs pod by pod, then cores.
    #[arg(long)]
    switch_ids: Option<String>,
    /// First switch ID (when --switch-ids is not given).
    #[arg(long, default_value_t = 1)]
    id_base: u32,
    /// Flows active at once.
    #[arg(long, default_value_t = 1024)]
    concurrent: u32,
    /// Pareto shape of packets per flow (smaller = heavier tail).
    #[arg(long, default_value_t = 1.3)]
    shape: f64,
    /// Key-Write / Key-Increment redundancy N.
    #[arg(long, default_value_t = 2)]
    redundancy: u8,
    /// Append lists per event type.
    #[arg(long, default_value_t = 8)]
    lists: u32,
    /// Append batch size (1..=16), for the collector stores of `replay`.
    #[arg(long, default_value_t = 16)]
    batch: u32,
    /// Translator postcard cache slots.
    #[arg(long, default_value_t = 4096)]
    cache_slots: u32,
    /// Key-Write and Key-Increment slots, log2.
    #[arg(long, default_value_t = 20)]
    slots_log2: u32,
    /// Seed.
    #[arg(long, default_value_t = 2023)]
    seed: u64,
    /// Write P4.org Telemetry Reports of this version (1 or 2) instead of DTA reports: INT-MD
    /// sink reports (paths), INT-XD postcards, drop and congestion reports, inner-only reports
    /// (counters), by the same mix weights (`kw`, `pc`, `loss`, `cong`, `ctr`). 0: DTA reports.
    #[arg(long, default_value_t = 0)]
    telemetry: u8,
    /// UDP port of Telemetry Reports (the translator's `[int] port`); `replay` hands datagrams
    /// to this port to the INT ingest.
    #[arg(long, default_value_t = dta_bench::gen::INT_PORT)]
    int_port: u16,
}

fn parse_ids(s: &str) -> Result<Vec<u32>, String> {
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
    fn scenario(&self) -> Result<Scenario, String> {
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
enum ReplayPath {
    /// In memory: pipeline + software RNIC per worker thread.
    Memory,
    /// Kernel UDP sockets on loopback, through a translator and a collector (software RNIC)
    /// that this command starts and stops itself.
    Udp,
    /// Both.
    Both,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum CollectorRx {
    /// veth A's receive in a NAPI kernel thread.
    Thread,
    /// veth A's receive in the sender's context.
    Inline,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum BackendArg {
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
enum Figure {
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

/// Writes `t` to the pcap `path` (capture timestamps `1 / rate` apart, 1 µs for rate 0) and
/// `about` as JSON next to it (`path.json`, returned): what `dta gen` and `dta gen-sketch`
/// leave for `dta replay` and for the user.
fn write_trace(
    t: &Trace,
    path: &std::path::Path,
    rate: u64,
    about: &impl serde::Serialize,
) -> Result<PathBuf, String> {
    let gap = if rate > 0 {
        Duration::from_secs_f64(1.0 / rate as f64)
    } else {
        Duration::from_micros(1)
    };
    t.write_pcap(path, gap)?;
    let side = PathBuf::from(format!("{}.json", path.display()));
    let js = serde_json::to_string_pretty(about).map_err(|e| e.to_string())?;
    std::fs::write(&side, js).map_err(|e| format!("{}: {e}", side.display()))?;
    Ok(side)
}

/// `--hash` of `dta gen-sketch`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum SketchHashArg {
    Independent,
    Tofino,
}

fn gen_sketch_cmd(
    pcap: Option<PathBuf>,
    target: SocketAddrV4,
    epochs: u32,
    (k, flows, seed): (u32, u64, u64),
    (cm_rows, cm_columns, hll_registers, hash): (u8, u32, u32, SketchHashArg),
    per: u32,
    rate: u64,
) -> Result<(), String> {
    use dta_bench::workload::{FatTree, Flows, SketchWorkload};
    use dta_proto::sketch::{SketchHash, SketchKind, SketchShape};
    let hash = match hash {
        SketchHashArg::Independent => SketchHash::Independent,
        SketchHashArg::Tofino => SketchHash::Tofino,
    };
    if k < 2 || k % 2 != 0 || k > 64 {
        return Err(format!("--k {k}: the fat-tree arity must be even, 2..=64"));
    }
    let cm = SketchShape::new(SketchKind::CountMin, cm_rows, cm_columns, 4)
        .map_err(|e| format!("Count-Min {cm_rows} x {cm_columns}: {e}"))?
        .with_hash(hash);
    let hll = SketchShape::new(SketchKind::HyperLogLog, 1, hll_registers, 1)
        .map_err(|e| format!("HyperLogLog with {hll_registers} registers: {e}"))?
        .with_hash(hash);
    let wl = SketchWorkload {
        tree: FatTree { k, id_base: 1 },
        flows: Flows { seed, shape: 1.2 },
        flows_per_epoch: flows,
        cm,
        hll,
    };
    let (t, truth) = dta_bench::sketchbench::sketch_trace(&wl, epochs, per, target)?;
    if let Some(path) = pcap {
        let side = write_trace(&t, &path, rate, &truth)?;
        eprintln!(
            "dta gen-sketch: wrote {} reports ({} payload bytes) from {} switches x {epochs} \
             epochs to {} (shapes and ground truth in {})",
            t.len(),
            t.payload_bytes(),
            wl.tree.switches(),
            path.display(),
            side.display()
        );
        return Ok(());
    }
    let mut s = PacedSender::new(target, rate)?;
    s.set_window(u64::MAX / 2);
    let done = || 0u64;
    let t0 = Instant::now();
    for i in 0..t.len() {
        s.push(t.get(i).payload, done)?;
    }
    s.flush(done)?;
    eprintln!(
        "dta gen-sketch: sent {} reports to {target} in {:.2} s",
        s.sent,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn gen_cmd(
    sc: &Scenario,
    count: u64,
    pcap: Option<PathBuf>,
    target: Option<SocketAddrV4>,
    rate: u64,
) -> Result<(), String> {
    let mut g = Generator::new(sc);
    if let Some(path) = pcap {
        let t = Trace::generate(&mut g, count as usize)?;
        let side = write_trace(&t, &path, rate, sc)?;
        eprintln!(
            "dta gen: wrote {} reports ({} payload bytes) to {} (scenario in {})",
            t.len(),
            t.payload_bytes(),
            path.display(),
            side.display()
        );
        eprintln!("  {}", per_kind(&g.per_kind));
        return Ok(());
    }
    let target = target.ok_or("give --pcap FILE or --target IP:PORT")?;
    let mut s = PacedSender::new(target, rate)?;
    // No receiver feedback towards a remote target: the window is unbounded.
    s.set_window(u64::MAX / 2);
    let profile = sc.wire_profile();
    let mut buf = [0u8; dta_bench::trace::MAX_INT_LEN];
    let t0 = Instant::now();
    let mut progress = Progress::new(count, "reports", Duration::from_secs(2));
    let done = || 0u64;
    for i in 0..count {
        let n = if sc.telemetry != 0 {
            g.next_int_report(&mut buf).1
        } else {
            g.next_report()
                .emit(profile, &mut buf)
                .map_err(|e| format!("emit: {e}"))?
        };
        s.push(&buf[..n], done)?;
        if i % 1024 == 0 && progress.due() {
            progress.set(i + 1, "sent");
        }
    }
    s.flush(done)?;
    progress.finish();
    eprintln!(
        "dta gen: sent {} reports to {target} in {:.2} s; {}",
        s.sent,
        t0.elapsed().as_secs_f64(),
        per_kind(&g.per_kind)
    );
    Ok(())
}

/// `dta gen --traffic CAPTURE`: the capture's reports to a pcap (with FILE.json: the
/// scenario and the ground truth) or live to a UDP target, following the capture's timestamps
/// (divided by --speed), or at --rate.
fn gen_traffic_cmd(
    sc: &Scenario,
    capture: &std::path::Path,
    a: &TrafficArgs,
    pcap: Option<PathBuf>,
    target: Option<SocketAddrV4>,
    rate: u64,
) -> Result<(), String> {
    use dta_bench::gen::SketchStores;
    use dta_bench::traffic::{from_capture, parse_duration_ns, TrafficOptions};
    let o = TrafficOptions {
        epoch_ns: parse_duration_ns(&a.epoch).map_err(|e| format!("--epoch {e}"))?,
        speed: a.speed,
        postcard_every: a.postcard_every,
        link_bps: a.link_gbps * 1e9,
        queue_threshold: a.queue_threshold,
    };
    let topology = a
        .topology
        .clone()
        .unwrap_or_else(|| format!("fat-tree:k={}", sc.k));
    let sketch = SketchStores {
        cm_rows: a.cm_rows,
        cm_columns: a.cm_columns,
        hll_registers: a.hll_registers,
        epochs: dta_proto::sketch::MAX_EPOCHS,
        switches: 1,
    };
    let t = from_capture(capture, &topology, sc, sketch, &o)?;
    let truth = &t.file.traffic;
    let st = &truth.capture_stats;
    eprintln!(
        "dta gen --traffic: {} ({}, {}): {} records, {} IP packets used; skipped: {} not IP, {} \
         fragments, {} truncated, {} malformed, {} same-host, {} unsupported link type{}",
        capture.display(),
        st.format,
        st.link_types.join("+"),
        st.records,
        st.packets,
        st.not_ip,
        st.fragments,
        st.truncated,
        st.malformed,
        st.same_host,
        st.unsupported_link,
        if st.cut_short {
            "; the file ends inside a record"
        } else {
            ""
        }
    );
    eprintln!(
        "  {} flows over {} ({} switches), {} epochs ({} with traffic), {} retransmissions",
        truth.flows.len(),
        truth.topology,
        truth.switch_ids.len(),
        truth.epochs.len(),
        truth.epochs.iter().filter(|e| !e.flows.is_empty()).count(),
        truth.losses.len()
    );
    eprintln!("  {} reports: {}", truth.reports.total(), truth.reports);
    if let Some(path) = pcap {
        t.trace.write_pcap_at(&path, &t.times_ns)?;
        let side = PathBuf::from(format!("{}.json", path.display()));
        let js = serde_json::to_string_pretty(&t.file).map_err(|e| e.to_string())?;
        std::fs::write(&side, js).map_err(|e| format!("{}: {e}", side.display()))?;
        eprintln!(
            "  wrote {} ({} payload bytes; scenario and ground truth in {})",
            path.display(),
            t.trace.payload_bytes(),
            side.display()
        );
        return Ok(());
    }
    let target = target.ok_or("give --pcap FILE or --target IP:PORT")?;
    let mut s = PacedSender::new(target, rate)?;
    s.set_window(u64::MAX / 2);
    let done = || 0u64;
    let t0 = Instant::now();
    let first = t.times_ns.first().copied().unwrap_or(0);
    for i in 0..t.trace.len() {
        if rate == 0 {
            // Follow the capture: wait for the report's time (bursts within 1 ms go together).
            let due = Duration::from_nanos(t.times_ns[i] - first);
            let el = t0.elapsed();
            if due > el + Duration::from_millis(1) {
                s.flush(done)?;
                std::thread::sleep(due - t0.elapsed().min(due));
            }
        }
        s.push(t.trace.payload(i), done)?;
    }
    s.flush(done)?;
    eprintln!(
        "  sent {} reports to {target} in {:.2} s",
        s.sent,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The generator's per-kind counts, named.
fn per_kind(k: &[u64; 5]) -> String {
    format!(
        "Key-Write paths {}, postcards {}, loss events {}, congestion events {}, counters {}",
        k[0], k[1], k[2], k[3], k[4]
    )
}

#[allow(clippy::too_many_arguments)]
fn replay_cmd(
    args: &ScenarioArgs,
    pcap: &PathBuf,
    path: ReplayPath,
    workers: Vec<usize>,
    loops: u32,
    no_rnic: bool,
    port: Option<u16>,
    rate: u64,
    out: Option<PathBuf>,
) -> Result<(), String> {
    let side = PathBuf::from(format!("{}.json", pcap.display()));
    let side_text = std::fs::read_to_string(&side).ok();
    let sc: Scenario = match &side_text {
        Some(s) => serde_json::from_str(s).map_err(|e| format!("{}: {e}", side.display()))?,
        None => args.scenario()?,
    };
    // `dta gen --traffic` leaves the ground truth beside the scenario.
    let traffic = match &side_text {
        Some(s)
            if serde_json::from_str::<serde_json::Value>(s)
                .is_ok_and(|v| v.get("traffic").is_some()) =>
        {
            Some(
                serde_json::from_str::<dta_bench::traffic::TrafficFile>(s)
                    .map_err(|e| format!("{}: traffic: {e}", side.display()))?,
            )
        }
        _ => None,
    };
    // A Telemetry Report capture: keep the datagrams to the INT port (unless --port says).
    let port = match port {
        Some(dta_proto::consts::DTA_PORT) if sc.telemetry != 0 => Some(sc.int_port),
        p => p,
    };
    let t = Trace::read_pcap_to(pcap, port)?;
    eprintln!(
        "dta replay: {} reports from {} ({} frames skipped), profile {}",
        t.len(),
        pcap.display(),
        t.skipped,
        sc.profile
    );
    let workers = if sc.sketch.is_some() && workers.iter().any(|&w| w != 1) {
        eprintln!("  (Sketch-Merge stores are merged by one translator worker: --workers 1)");
        vec![1]
    } else {
        workers
    };
    let mut results = Vec::new();
    if path != ReplayPath::Udp {
        for &w in &workers {
            let r = replay_memory(
                &sc,
                &t,
                &MemOptions {
                    workers: w,
                    loops,
                    rnic: if no_rnic {
                        RnicMode::Off
                    } else {
                        RnicMode::Inline
                    },
                    ..MemOptions::default()
                },
            )?;
            print_result(&r);
            results.push(r);
        }
    }
    if path != ReplayPath::Memory {
        let r = replay_udp(
            &sc,
            &t,
            &UdpReplayOptions {
                loops,
                rate,
                ..UdpReplayOptions::default()
            },
        )?;
        print_result(&r);
        results.push(r);
    }
    let check = match &traffic {
        Some(f) => {
            let c = dta_bench::traffic::check::check(f, &t)?;
            eprintln!(
                "  ground truth (in memory, 1 worker): Key-Write paths {}, flow counters exact \
                 {}, postcard paths {}, loss events {}, congestion events {}, sketch epochs \
                 {}; {} reports dropped, {} unexpected Append entries",
                c.paths,
                c.counters,
                c.postcards,
                c.losses,
                c.congestion,
                c.sketch_epochs,
                c.dropped,
                c.unexpected_entries
            );
            for (e, flows, est) in &c.distinct_flows {
                eprintln!("    epoch {e}: {flows} flows, merged HyperLogLog estimate {est:.1}");
            }
            Some(c)
        }
        None => None,
    };
    if let Some(o) = out {
        let v = serde_json::json!({"pcap": pcap, "scenario": sc, "machine": figures::machine(), "results": results, "check": check});
        std::fs::write(
            &o,
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("{}: {e}", o.display()))?;
    }
    if let Some(c) = check.filter(|c| !c.passed()) {
        return Err(format!(
            "the stores differ from the ground truth: {}; translator drops {:?}",
            c.mismatches.join("; "),
            c.drop_reasons
        ));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn backend_cmd(
    args: &ScenarioArgs,
    pcap: &PathBuf,
    backends: &[BackendArg],
    loops: u32,
    port: Option<u16>,
    rate: u64,
    (prefill, rounds): (u64, u32),
    collector_rx: CollectorRx,
    out: Option<&std::path::Path>,
) -> Result<(), String> {
    use dta_bench::backend_replay::{self as br, CompareOptions};
    let prefilled = if prefill > 0 {
        Some((
            br::Freezer::new("replay")?,
            br::Prefill {
                packets: prefill,
                warmup: 2000,
                rounds,
            },
        ))
    } else {
        None
    };
    let side = PathBuf::from(format!("{}.json", pcap.display()));
    let sc: Scenario = match std::fs::read_to_string(&side) {
        Ok(s) => serde_json::from_str(&s).map_err(|e| format!("{}: {e}", side.display()))?,
        Err(_) => args.scenario()?,
    };
    let t = Trace::read_pcap_to(pcap, port)?;
    eprintln!("dta replay: {} reports from {}", t.len(), pcap.display());
    let o = CompareOptions {
        loops,
        rate,
        ..CompareOptions::default()
    };
    let mut results = Vec::new();
    let mut memory = Vec::new();
    #[allow(unused_mut, unused_variables)]
    let mut net: Option<dta_io::netns::Netns> = None;
    let rx_thread = collector_rx == CollectorRx::Thread;
    #[allow(dead_code)]
    fn netns(
        net: &mut Option<dta_io::netns::Netns>,
        rx_thread: bool,
    ) -> Result<&dta_io::netns::Netns, String> {
        if net.is_none() {
            *net = Some(dta_io::netns::Netns::up("dtr", rx_thread)?);
        }
        Ok(net.as_ref().expect("just set"))
    }
    // DPDK before AF_XDP: a net_af_packet port opened after an AF_XDP socket was attached to
    // and removed from the same veth received nothing here.
    let mut order = backends.to_vec();
    order.sort_by_key(|b| match b {
        BackendArg::Memory => 0,
        BackendArg::Pcap => 1,
        BackendArg::Udp => 2,
        BackendArg::Dpdk => 3,
        BackendArg::AfXdp => 4,
    });
    order.dedup();
    for b in &order {
        let r = match b {
            BackendArg::Memory => {
                let r = replay_memory(
                    &sc,
                    &t,
                    &MemOptions {
                        workers: 1,
                        loops,
                        ..MemOptions::default()
                    },
                )?;
                print_result(&r);
                memory.push(r);
                continue;
            }
            BackendArg::Udp => match &prefilled {
                Some((f, p)) if rx_thread => {
                    br::compare_udp_netns_prefilled(netns(&mut net, rx_thread)?, &sc, &t, *p, f)
                }
                Some((f, p)) => br::compare_udp_prefilled(&sc, &t, *p, f),
                None => br::compare_udp(&sc, &t, &o),
            },
            BackendArg::Pcap => br::compare_pcap(&sc, &t, &o),
            BackendArg::AfXdp => {
                #[cfg(feature = "af_xdp")]
                match &prefilled {
                    Some((f, p)) => {
                        br::compare_af_xdp_prefilled(netns(&mut net, rx_thread)?, &sc, &t, *p, f)
                    }
                    None => br::compare_af_xdp(netns(&mut net, rx_thread)?, &sc, &t, &o),
                }
                #[cfg(not(feature = "af_xdp"))]
                Err("af_xdp is not compiled in: build dta with --features af_xdp".to_string())
            }
            BackendArg::Dpdk => {
                #[cfg(feature = "dpdk")]
                {
                    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                    match &prefilled {
                        Some((f, p)) => br::compare_dpdk_prefilled(
                            &exe,
                            netns(&mut net, rx_thread)?,
                            &sc,
                            &t,
                            *p,
                            f,
                        ),
                        None => br::compare_dpdk(&exe, netns(&mut net, rx_thread)?, &sc, &t, &o),
                    }
                }
                #[cfg(not(feature = "dpdk"))]
                Err("dpdk is not compiled in: build dta with --features dpdk".to_string())
            }
        };
        match r {
            Ok(c) => {
                println!("{}", c.line());
                results.push(c);
            }
            Err(e) => eprintln!("dta replay --backend {b:?}: {e}"),
        }
    }
    if let Some(o) = out {
        let v = serde_json::json!({"pcap": pcap, "scenario": sc, "machine": figures::machine(),
            "comparisons": results, "memory": memory});
        std::fs::write(
            o,
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("{}: {e}", o.display()))?;
    }
    Ok(())
}

fn print_result(r: &dta_bench::replay::ReplayResult) {
    println!(
        "{:>6} x{}: {:>10} reports in {:.3} s = {:>6.2} M reports/s, {:>6.2} M frames/s, {:.3} frames/report, {:.1} B/report, dropped {}, RNIC errors {}, socket drops {}",
        r.path, r.workers, r.reports, r.secs, r.reports_per_sec / 1e6, r.frames_per_sec / 1e6,
        r.frames_per_report, r.bytes_per_report, r.dropped, r.rnic_errors, r.socket_drops
    );
    if !r.drop_reasons.is_empty() {
        println!("         drops: {:?}", r.drop_reasons);
    }
    if r.int_datagrams > 0 {
        println!(
            "         INT: {} datagrams, {} reports (v1 {}, v2 {}), {} DTA reports derived, {} not read {:?}, sequence gaps {} ({} missing)",
            r.int_datagrams, r.int_reports_v1 + r.int_reports_v2, r.int_reports_v1,
            r.int_reports_v2, r.int_derived, r.int_dropped, r.int_drop_reasons, r.int_seq_gaps,
            r.int_seq_missing
        );
    }
    if let Some(l) = r.latency {
        println!(
            "         latency ns: p50 {} p90 {} p99 {} p99.9 {} max {}",
            l.p50_ns, l.p90_ns, l.p99_ns, l.p999_ns, l.max_ns
        );
    }
    println!(
        "         CPU {:.3} s (workers {:.3} s{}), peak RSS {} KiB",
        r.cpu_secs,
        r.worker_cpu_secs,
        r.rnic_cpu_secs
            .map(|s| format!(", software RNIC {s:.3} s"))
            .unwrap_or_default(),
        r.peak_rss_kib
    );
}

fn bench_cmd(
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

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match Cli::parse().cmd {
        Cmd::P4Constants => print!("{}", dta_p4_constants::render()),
        #[allow(unused_variables)]
        Cmd::BareRxDpdk { ns, iface, idle_ms } => {
            #[cfg(feature = "dpdk")]
            match dta_bench::backend_replay::bare_rx_dpdk_child(
                &ns,
                &iface,
                Duration::from_millis(idle_ms),
            ) {
                Ok(s) => println!("{s}"),
                Err(e) => {
                    println!("ERROR {e}");
                    std::process::exit(1);
                }
            }
            #[cfg(not(feature = "dpdk"))]
            {
                println!("ERROR dpdk is not compiled in");
                std::process::exit(1);
            }
        }
        Cmd::PcapCheck {
            file,
            roce_port,
            json,
        } => match dta_bench::pcapcheck::check_file(&file, &roce_port) {
            Ok(c) => {
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&c).expect("JSON serialises")
                    );
                } else {
                    print!("{}: {}", file.display(), c.summary());
                }
                if !c.passed() {
                    std::process::exit(1);
                }
            }
            Err(e) => {
                eprintln!("dta pcap-check: {e}");
                std::process::exit(2);
            }
        },
        Cmd::Corpus { out } => match dta_conformance::write_corpus(&out) {
            Ok(n) => println!("wrote {n} cases to {}", out.display()),
            Err(e) => {
                eprintln!("dta corpus: {e}");
                std::process::exit(1);
            }
        },
        Cmd::ClusterDemo {
            cluster,
            translators,
            count,
            rate,
            lists,
            seed,
            settle_secs,
        } => {
            use dta_bench::cluster as cd;
            let r = dta_collector::cluster::load_cluster(&cluster).and_then(|c| {
                let client = dta_collector::cluster::ClusterClient::new(c);
                let truth = cd::drive(&cd::scenario(seed, lists), &translators, count, rate)?;
                let v = cd::verify_settled(
                    &client,
                    &truth,
                    None,
                    std::time::Duration::from_secs(settle_secs),
                )?;
                cd::print(&v, &truth);
                Ok(v.mismatches.is_empty())
            });
            match r {
                Ok(true) => println!("cluster-demo: every answer matches"),
                Ok(false) => {
                    eprintln!("dta cluster-demo: mismatches (above)");
                    std::process::exit(1);
                }
                Err(e) => {
                    eprintln!("dta cluster-demo: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Demo {
            keywrite,
            append,
            lists,
            capacity,
            slots_log2,
            redundancy,
            batch,
            rate,
            seed,
        } => {
            let opts = DemoOptions {
                keywrite,
                append,
                lists,
                capacity,
                slots_log2,
                redundancy,
                batch,
                rate,
                seed,
                progress: true,
            };
            match demo::run(&opts) {
                Ok(r) => {
                    demo::print(&opts, &r);
                    if !demo::checks(&opts, &r).is_empty() {
                        std::process::exit(1);
                    }
                }
                Err(e) => {
                    eprintln!("dta demo: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Gen {
            scenario,
            traffic,
            count,
            pcap,
            target,
            rate,
        } => {
            let r = scenario.scenario().and_then(|sc| match &traffic.traffic {
                Some(capture) => gen_traffic_cmd(&sc, capture, &traffic, pcap, target, rate),
                None => gen_cmd(&sc, count, pcap, target, rate),
            });
            if let Err(e) = r {
                eprintln!("dta gen: {e}");
                std::process::exit(1);
            }
        }
        Cmd::GenSketch {
            pcap,
            target,
            epochs,
            k,
            flows,
            cm_rows,
            cm_columns,
            hll_registers,
            columns_per_report,
            hash,
            seed,
            rate,
        } => {
            let r = gen_sketch_cmd(
                pcap,
                target,
                epochs,
                (k, flows, seed),
                (cm_rows, cm_columns, hll_registers, hash),
                columns_per_report,
                rate,
            );
            if let Err(e) = r {
                eprintln!("dta gen-sketch: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Replay {
            pcap,
            scenario,
            path,
            workers,
            loops,
            no_rnic,
            port,
            rate,
            json,
            backend,
            prefill,
            rounds,
            collector_rx,
        } => {
            let port = (port != 0).then_some(port);
            if !backend.is_empty() {
                if let Err(e) = backend_cmd(
                    &scenario,
                    &pcap,
                    &backend,
                    loops,
                    port,
                    rate,
                    (prefill, rounds),
                    collector_rx,
                    json.as_deref(),
                ) {
                    eprintln!("dta replay: {e}");
                    std::process::exit(1);
                }
                return;
            }
            if let Err(e) = replay_cmd(
                &scenario, &pcap, path, workers, loops, no_rnic, port, rate, json,
            ) {
                eprintln!("dta replay: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Ingest {
            db,
            server,
            listen,
            database,
            batch,
            flush_ms,
            profile,
        } => {
            use dta_bench::collectors::ingest::{self, Db, IngestOptions};
            let db = match db {
                DbArg::Redis => Db::Redis,
                DbArg::Clickhouse => Db::ClickHouse,
                DbArg::Influxdb => Db::InfluxDb,
            };
            let mut o = IngestOptions::new(db, &server, &database);
            if let Some(b) = batch {
                o.batch = b.max(1);
            }
            if let Some(ms) = flush_ms {
                o.flush = Duration::from_millis(ms);
            }
            o.parse = dta_bench::gen::Scenario {
                profile,
                ..Default::default()
            }
            .parse_config();
            match ingest::command(&o, listen) {
                Ok(st) => println!(
                    "DONE {}",
                    serde_json::to_string(&st).expect("stats serialise")
                ),
                Err(e) => {
                    println!("ERROR {e}");
                    eprintln!("dta ingest: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Bench {
            figure,
            reports,
            loops,
            out,
            no_pin,
            profile,
            qps,
            agents,
            zi,
            servers,
        } => {
            let zi = dta_bench::interference::InterferenceOptions {
                secs: zi.secs,
                rounds: zi.rounds,
                monitors: zi.monitors,
                clients: zi.clients,
                pipeline: zi.pipeline,
                requests: zi.requests,
                monitored_core: zi.monitored_core,
                other_core: zi.other_core,
                interval_ms: zi.interval_ms,
                cpu_shares: zi.cpu_shares,
                work: zi.work,
                keep_work: zi.keep_work,
                bin_dir: zi.bin_dir,
                out: out.clone(),
                ..Default::default()
            };
            let o = FigOptions {
                reports,
                loops,
                out,
                pin: !no_pin,
                verbose: true,
            };
            if let Err(e) = bench_cmd(figure, &o, profile, &qps, &agents, &zi, &servers) {
                eprintln!("dta bench: {e}");
                std::process::exit(1);
            }
        }
    }
}
