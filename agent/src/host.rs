//! Host counters: `/proc/net/dev` and `/proc/stat`, parsed from their text and published as
//! blocks.
//!
//! The parsers are pure functions of the file's text and never panic: a line that does not
//! have the expected shape is skipped and counted, a number that does not parse makes its line
//! (or its field) count as missing. [`HostSampler`] re-reads the files every interval into a
//! buffer it keeps and publishes:
//! - `net/<ifname>`: the 16 counters of the interface's line, in file order (receive bytes,
//!   packets, errs, drop, fifo, frame, compressed, multicast; transmit bytes, packets, errs,
//!   drop, fifo, colls, carrier, compressed); one block per interface, added when the interface
//!   first appears (at most `max_interfaces`), names cut to 40 bytes by
//!   [`crate::region::truncate_name`];
//! - `cpu`: the aggregate `cpu` line's 10 fields (user, nice, system, idle, iowait, irq,
//!   softirq, steal, guest, guest_nice) in USER_HZ ticks; fields an older kernel does not
//!   print are 0;
//! - `stat`: ctxt, processes, procs_running, procs_blocked, the `intr` total, btime (a field
//!   missing from the file is 0). A gauge block: procs_running and procs_blocked go up and
//!   down; ctxt, processes and intr are monotonic.

use std::collections::{HashMap, HashSet};
use std::io::Read as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dta_proto::zero::MetricKind;

use crate::region::{truncate_name, AgentRegion, ArrayWriter, RegionError};

/// Counters per interface in `/proc/net/dev`.
pub const NET_DEV_FIELDS: usize = 16;
/// Fields of the aggregate `cpu` line.
pub const CPU_FIELDS: usize = 10;
/// Values of the `stat` block.
pub const STAT_FIELDS: usize = 6;
/// Interfaces that get a block unless told otherwise.
pub const DEFAULT_MAX_INTERFACES: usize = 64;
/// Refused interface names remembered (so each is logged once).
const REFUSED_REMEMBERED: usize = 1024;

/// Calls `f(name, counters)` for every well-formed interface line of `/proc/net/dev` text and
/// returns how many other lines (besides the two header lines) were skipped.
///
/// A line is well formed when it is `name: n1 … n16`: a non-empty name without whitespace or
/// `|`, and exactly 16 unsigned decimal numbers.
pub fn parse_net_dev(text: &str, mut f: impl FnMut(&str, &[u64; NET_DEV_FIELDS])) -> usize {
    let mut skipped = 0;
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            // The two header lines have no colon; so has nothing else worth counting.
            if !line.trim().is_empty() && !line.contains('|') {
                skipped += 1;
            }
            continue;
        };
        let name = name.trim();
        if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '|') {
            skipped += 1;
            continue;
        }
        let mut v = [0u64; NET_DEV_FIELDS];
        let mut n = 0;
        let mut ok = true;
        for tok in rest.split_ascii_whitespace() {
            match (v.get_mut(n), tok.parse::<u64>()) {
                (Some(slot), Ok(x)) => *slot = x,
                _ => {
                    ok = false;
                    break;
                }
            }
            n += 1;
        }
        if !ok || n != NET_DEV_FIELDS {
            skipped += 1;
            continue;
        }
        f(name, &v);
    }
    skipped
}

/// What `/proc/stat` says (each `None` when its line is missing or malformed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// The aggregate `cpu` line (USER_HZ ticks); fields the line lacks are 0.
    pub cpu: Option<[u64; CPU_FIELDS]>,
    /// Context switches since boot.
    pub ctxt: Option<u64>,
    /// Processes and threads created since boot.
    pub processes: Option<u64>,
    /// Runnable threads.
    pub procs_running: Option<u64>,
    /// Threads blocked on I/O.
    pub procs_blocked: Option<u64>,
    /// Interrupts serviced since boot (the `intr` line's total).
    pub intr: Option<u64>,
    /// Boot time, seconds since the epoch.
    pub btime: Option<u64>,
}

impl ProcStat {
    /// The `stat` block's values: ctxt, processes, procs_running, procs_blocked, intr, btime
    /// (missing ones 0).
    pub fn stat_values(&self) -> [u64; STAT_FIELDS] {
        [
            self.ctxt,
            self.processes,
            self.procs_running,
            self.procs_blocked,
            self.intr,
            self.btime,
        ]
        .map(|v| v.unwrap_or(0))
    }
}

/// Parses `/proc/stat` text. The first well-formed line of each kind counts; per-CPU lines
/// (`cpu0` …) and unknown lines are ignored.
pub fn parse_proc_stat(text: &str) -> ProcStat {
    let mut s = ProcStat::default();
    for line in text.lines() {
        let mut toks = line.split_ascii_whitespace();
        let Some(key) = toks.next() else {
            continue;
        };
        let first = |t: &mut std::str::SplitAsciiWhitespace<'_>| t.next()?.parse::<u64>().ok();
        let slot = match key {
            "cpu" => {
                if s.cpu.is_none() {
                    s.cpu = parse_cpu(toks);
                }
                continue;
            }
            "ctxt" => &mut s.ctxt,
            "processes" => &mut s.processes,
            "procs_running" => &mut s.procs_running,
            "procs_blocked" => &mut s.procs_blocked,
            "intr" => &mut s.intr,
            "btime" => &mut s.btime,
            _ => continue,
        };
        if slot.is_none() {
            *slot = first(&mut toks);
        }
    }
    s
}

/// The `cpu` line's fields: at least user, nice, system and idle, at most 10, all numbers.
fn parse_cpu<'a>(toks: impl Iterator<Item = &'a str>) -> Option<[u64; CPU_FIELDS]> {
    let mut v = [0u64; CPU_FIELDS];
    let mut n = 0;
    for tok in toks {
        *v.get_mut(n)? = tok.parse().ok()?;
        n += 1;
    }
    (n >= 4).then_some(v)
}

dta_proto::define_counters!(
    /// What the host sampler did.
    pub struct SamplerCounters {
        /// Sampling rounds.
        samples,
        /// Reads of a /proc file that failed.
        read_errors,
        /// Lines of /proc/net/dev that were skipped as malformed.
        malformed_lines,
        /// Interfaces that got no block (the bound was reached, the region was full, or the
        /// truncated name was taken).
        interfaces_refused,
        /// Blocks published.
        publishes,
    }
);

/// What the host sampler reads.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// `/proc/net/dev` (or a file like it); `None`: no interface blocks.
    pub net_dev: Option<PathBuf>,
    /// `/proc/stat` (or a file like it); `None`: no `cpu` and `stat` blocks.
    pub proc_stat: Option<PathBuf>,
    /// How often the files are re-read (ms; also the blocks' advertised interval).
    pub interval_ms: u32,
    /// Most interfaces that get a block.
    pub max_interfaces: usize,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            net_dev: Some("/proc/net/dev".into()),
            proc_stat: Some("/proc/stat".into()),
            interval_ms: 1000,
            max_interfaces: DEFAULT_MAX_INTERFACES,
        }
    }
}

/// Re-reads the host's counter files and publishes them (see the module documentation).
pub struct HostSampler {
    region: AgentRegion,
    config: SamplerConfig,
    ifaces: HashMap<String, ArrayWriter>,
    refused: HashSet<String>,
    cpu: Option<ArrayWriter>,
    stat: Option<ArrayWriter>,
    buf: Vec<u8>,
    counters: SamplerCounters,
}

impl HostSampler {
    /// A sampler publishing into `region`; registers `cpu` and `stat` now if `/proc/stat` is
    /// read (interfaces get their blocks as they are seen).
    pub fn new(region: &AgentRegion, config: SamplerConfig) -> Result<HostSampler, RegionError> {
        let (cpu, stat) = if config.proc_stat.is_some() {
            let i = config.interval_ms;
            (
                Some(region.register_array("cpu", CPU_FIELDS as u32, MetricKind::Counter, i)?),
                Some(region.register_array("stat", STAT_FIELDS as u32, MetricKind::Gauge, i)?),
            )
        } else {
            (None, None)
        };
        Ok(HostSampler {
            region: region.clone(),
            config,
            ifaces: HashMap::new(),
            refused: HashSet::new(),
            cpu,
            stat,
            buf: Vec::with_capacity(16 << 10),
            counters: SamplerCounters::default(),
        })
    }

    /// What it did so far.
    pub fn counters(&self) -> SamplerCounters {
        self.counters
    }

    /// Interfaces with a block.
    pub fn interfaces(&self) -> usize {
        self.ifaces.len()
    }

    /// Reads the files once and publishes what they say.
    pub fn sample(&mut self) {
        self.counters.samples += 1;
        if let Some(p) = &self.config.net_dev {
            if read_into(p, &mut self.buf) {
                // The counters are as of the read: stamp them with its time.
                let at = self.region.clock().now_ns();
                self.publish_net_dev(at);
            } else {
                self.counters.read_errors += 1;
            }
        }
        if let Some(p) = &self.config.proc_stat {
            if read_into(p, &mut self.buf) {
                let at = self.region.clock().now_ns();
                let s = parse_proc_stat(&String::from_utf8_lossy(&self.buf));
                if let (Some(w), Some(cpu)) = (self.cpu.as_mut(), s.cpu) {
                    w.publish_at(&cpu, at);
                    self.counters.publishes += 1;
                }
                if let Some(w) = self.stat.as_mut() {
                    w.publish_at(&s.stat_values(), at);
                    self.counters.publishes += 1;
                }
            } else {
                self.counters.read_errors += 1;
            }
        }
    }

    fn publish_net_dev(&mut self, at: u64) {
        let HostSampler {
            region,
            config,
            ifaces,
            refused,
            buf,
            counters,
            ..
        } = self;
        let text = String::from_utf8_lossy(buf);
        let skipped = parse_net_dev(&text, |name, v| {
            if let Some(w) = ifaces.get_mut(name) {
                w.publish_at(v, at);
                counters.publishes += 1;
                return;
            }
            if refused.contains(name) {
                return;
            }
            let block = format!("net/{name}");
            let r = if ifaces.len() >= config.max_interfaces {
                Err(format!("{} interfaces have blocks", ifaces.len()))
            } else {
                region
                    .register_array(
                        truncate_name(&block),
                        NET_DEV_FIELDS as u32,
                        MetricKind::Counter,
                        config.interval_ms,
                    )
                    .map_err(|e| e.to_string())
            };
            match r {
                Ok(mut w) => {
                    log::info!("interface {name}: block {:?}", truncate_name(&block));
                    w.publish_at(v, at);
                    counters.publishes += 1;
                    ifaces.insert(name.to_string(), w);
                }
                Err(e) => {
                    counters.interfaces_refused += 1;
                    if refused.len() < REFUSED_REMEMBERED {
                        log::warn!("interface {name:?} gets no block: {e}");
                        refused.insert(name.to_string());
                    }
                }
            }
        });
        counters.malformed_lines += skipped as u64;
    }

    /// Samples every interval until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) {
        let every = Duration::from_millis(self.config.interval_ms.max(1) as u64);
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            self.sample();
            next += every;
            let now = Instant::now();
            if next < now {
                next = now;
            }
            // Sleep in short steps so a stop is seen promptly.
            while !stop.load(Ordering::Relaxed) {
                let left = next.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(Duration::from_millis(100)));
            }
        }
    }
}

/// Reads the file at `p` into `buf` (cleared first; its capacity is kept).
fn read_into(p: &std::path::Path, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    match std::fs::File::open(p).and_then(|mut f| f.read_to_end(buf)) {
        Ok(_) => true,
        Err(e) => {
            log::debug!("{}: {e}", p.display());
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const NET_DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 123456     789    0    0    0     0          0         0   123456     789    0    0    0     0       0          0
  eth0: 9876543210 12345678 1 2 3 4 5 6 1234567 7654 7 8 9 10 11 12
";

    fn net(text: &str) -> (Vec<(String, [u64; 16])>, usize) {
        let mut got = Vec::new();
        let skipped = parse_net_dev(text, |n, v| got.push((n.to_string(), *v)));
        (got, skipped)
    }

    #[test]
    fn net_dev_lines_are_read_in_file_order() {
        let (got, skipped) = net(NET_DEV);
        assert_eq!(skipped, 0);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, "lo");
        assert_eq!(got[0].1[0], 123456);
        assert_eq!(got[0].1[9], 789);
        assert_eq!(got[1].0, "eth0");
        assert_eq!(
            got[1].1,
            [9876543210, 12345678, 1, 2, 3, 4, 5, 6, 1234567, 7654, 7, 8, 9, 10, 11, 12]
        );
    }

    #[test]
    fn hostile_net_dev_text_is_skipped_not_trusted() {
        let text = "\
garbage without colon
: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
a b: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
short: 1 2 3
long: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17
neg: -1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
huge: 99999999999999999999 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
hex: 0x1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
ok:1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
\u{0}\u{7f}: \u{feff}
";
        let (got, skipped) = net(text);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "ok");
        assert_eq!(skipped, 9);
        // Nothing at all, only newlines, binary junk: no panic, nothing parsed.
        for t in ["", "\n\n\n", "::::", "\u{fffd}\u{fffd}:\u{fffd}", "x:"] {
            assert!(net(t).0.is_empty(), "{t:?}");
        }
        let junk: String = (0u8..=255).map(|b| b as char).cycle().take(5000).collect();
        net(&junk);
    }

    pub(crate) const STAT: &str = "\
cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0
intr 199292 0 9 0 0 0 0 3 0 1 0 0 0 0 0 0 0
ctxt 5567098
btime 1767225600
processes 26442
procs_running 3
procs_blocked 1
softirq 1069185 0 2 0
";

    #[test]
    fn proc_stat_gives_the_cpu_line_and_the_stat_block() {
        let s = parse_proc_stat(STAT);
        assert_eq!(
            s.cpu,
            Some([10132153, 290696, 3084719, 46828483, 16683, 0, 25195, 0, 175628, 0])
        );
        assert_eq!(s.stat_values(), [5567098, 26442, 3, 1, 199292, 1767225600]);
    }

    #[test]
    fn hostile_proc_stat_text_gives_what_is_sound() {
        // An old kernel's 7-field cpu line: the rest is 0.
        let s = parse_proc_stat("cpu 1 2 3 4 5 6 7\nctxt x\nbtime\nprocesses 5 6\n");
        assert_eq!(s.cpu, Some([1, 2, 3, 4, 5, 6, 7, 0, 0, 0]));
        assert_eq!((s.ctxt, s.btime, s.processes), (None, None, Some(5)));
        for bad in [
            "cpu 1 2 3",
            "cpu 1 2 3 4 5 6 7 8 9 10 11",
            "cpu 1 2 x 4",
            "cpu -1 2 3 4",
        ] {
            assert_eq!(parse_proc_stat(bad).cpu, None, "{bad:?}");
        }
        // The first cpu line counts, even if a later one differs; a per-CPU line is not it.
        let s = parse_proc_stat("cpu0 9 9 9 9\ncpu 1 1 1 1\ncpu 2 2 2 2\n");
        assert_eq!(s.cpu, Some([1, 1, 1, 1, 0, 0, 0, 0, 0, 0]));
        assert_eq!(parse_proc_stat(""), ProcStat::default());
        let junk: String = (0u8..=255).map(|b| b as char).cycle().take(5000).collect();
        parse_proc_stat(&junk);
        parse_proc_stat("intr\nctxt 99999999999999999999999\n\u{0}cpu 1 2 3 4");
    }

    #[test]
    fn the_sampler_adds_interfaces_as_they_appear_within_its_bound() {
        let dir = std::env::temp_dir().join(format!("dta-agent-sampler-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (nd, st) = (dir.join("net_dev"), dir.join("stat"));
        std::fs::write(&nd, NET_DEV).unwrap();
        std::fs::write(&st, STAT).unwrap();
        let region = AgentRegion::new(1 << 20, 16).unwrap();
        let mut s = HostSampler::new(
            &region,
            SamplerConfig {
                net_dev: Some(nd.clone()),
                proc_stat: Some(st.clone()),
                interval_ms: 10,
                max_interfaces: 3,
            },
        )
        .unwrap();
        s.sample();
        let names: Vec<String> = region.blocks().into_iter().map(|b| b.name).collect();
        assert_eq!(names, ["cpu", "stat", "net/lo", "net/eth0"]);
        let long = "x".repeat(60);
        let more = format!(
            "{NET_DEV}{long}: {z}\nveth1: {z}\nveth2: {z}\n",
            z = "1 ".repeat(16)
        );
        std::fs::write(&nd, more).unwrap();
        s.sample();
        s.sample();
        let names: Vec<String> = region.blocks().into_iter().map(|b| b.name).collect();
        assert_eq!(names.len(), 5, "{names:?}");
        assert_eq!(names[4], format!("net/{}", &long[..36]));
        let c = s.counters();
        assert_eq!(
            c.interfaces_refused, 2,
            "veth1 and veth2: 3 interfaces at most"
        );
        assert_eq!((c.samples, c.read_errors, c.malformed_lines), (3, 0, 0));
        std::fs::remove_file(&nd).unwrap();
        s.sample();
        assert_eq!(s.counters().read_errors, 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
