//! The standard Prometheus `process_*` metrics of this process, read from `/proc` (Linux).
//!
//! Both `/metrics` pages (translator and collector) end with these, named and measured like
//! the official client libraries' process collectors, so dashboards built for any exporter work.
//! Read by the metrics thread per scrape; nothing here runs on a datapath.

use dta_proto::stats::{PromKind, PromWriter};

/// What `/proc` says about this process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time (seconds).
    pub cpu_seconds: f64,
    /// Resident set size (bytes).
    pub resident_bytes: u64,
    /// Virtual memory size (bytes).
    pub virtual_bytes: u64,
    /// Start time since the Unix epoch (seconds).
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors (`None`: unlimited).
    pub max_fds: Option<u64>,
}

impl ProcessStats {
    /// Reads `/proc/self/stat`, `/proc/stat` (boot time), `/proc/self/limits` and
    /// `/proc/self/fd`.
    pub fn read() -> Result<ProcessStats, String> {
        let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .map_err(|e| format!("/proc/self/fd: {e}"))?
            .count() as u64;
        // SAFETY: sysconf only reads a system constant.
        let (tick, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if tick <= 0 || page <= 0 {
            return Err("sysconf: no clock tick or page size".into());
        }
        ProcessStats::parse(
            &read("/proc/self/stat")?,
            &read("/proc/stat")?,
            &read("/proc/self/limits")?,
            open_fds,
            (tick as u64, page as u64),
        )
    }

    /// Builds the figures from the text of `/proc/self/stat`, `/proc/stat` and
    /// `/proc/self/limits`, the number of open descriptors, the clock ticks per second and the
    /// page size.
    pub fn parse(
        self_stat: &str,
        stat: &str,
        limits: &str,
        open_fds: u64,
        (ticks_per_second, page_size): (u64, u64),
    ) -> Result<ProcessStats, String> {
        // Fields after "pid (comm) ", which may itself hold spaces and parentheses: the third
        // field of proc(5) (state) is index 0 here.
        let rest = self_stat
            .rsplit_once(") ")
            .map(|(_, r)| r)
            .ok_or("/proc/self/stat: no command")?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| -> Result<u64, String> {
            f.get(n - 3)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("/proc/self/stat: no field {n}"))
        };
        let tick = ticks_per_second.max(1) as f64;
        let btime: u64 = stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse().ok())
            .ok_or("/proc/stat: no btime")?;
        let max_fds = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|v| v.split_whitespace().next())
            .ok_or("/proc/self/limits: no open files limit")?;
        Ok(ProcessStats {
            cpu_seconds: (field(14)? + field(15)?) as f64 / tick,
            start_time_seconds: btime as f64 + field(22)? as f64 / tick,
            virtual_bytes: field(23)?,
            resident_bytes: field(24)? * page_size,
            open_fds,
            max_fds: max_fds.parse().ok(),
        })
    }

    /// Writes the `process_*` families.
    pub fn write_prom(&self, w: &mut PromWriter) {
        w.single(
            PromKind::Counter,
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            self.cpu_seconds,
        );
        w.single(
            PromKind::Gauge,
            "process_open_fds",
            "Number of open file descriptors.",
            self.open_fds as f64,
        );
        w.single(
            PromKind::Gauge,
            "process_max_fds",
            "Maximum number of open file descriptors (soft limit; +Inf: unlimited).",
            self.max_fds.map_or(f64::INFINITY, |m| m as f64),
        );
        w.single(
            PromKind::Gauge,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            self.virtual_bytes as f64,
        );
        w.single(
            PromKind::Gauge,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            self.resident_bytes as f64,
        );
        w.single(
            PromKind::Gauge,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            self.start_time_seconds,
        );
    }
}

/// The effective user ID of this process (the owner a private file or directory must have).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Runs `promtool check metrics` on a Prometheus text page: `None` when promtool is not
/// installed (`scripts/prepare-tools.sh` installs Debian's), `Some(Err(what it said))` when it
/// exits non-zero or prints anything (a lint warning), `Some(Ok(()))` otherwise. For tests and
/// checks of the exporters' pages.
pub fn promtool_check_metrics(doc: &str) -> Option<Result<(), String>> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let wrote = child
        .stdin
        .take()
        .map(|mut i| i.write_all(doc.as_bytes()))
        .unwrap_or(Ok(()));
    let out = match child.wait_with_output() {
        Ok(o) => o,
        Err(e) => return Some(Err(format!("promtool: {e}"))),
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(match wrote {
        Err(e) => Err(format!("promtool: writing the page: {e}\n{said}")),
        Ok(()) if out.status.success() && said.trim().is_empty() => Ok(()),
        Ok(()) => Err(format!("promtool check metrics: {}\n{said}", out.status)),
    })
}

/// CPU time (user + system) consumed by the calling thread so far, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively borrowed `ts`.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promtool_tells_a_good_page_from_a_bad_one() {
        let good = "# HELP dta_x_total Things.\n# TYPE dta_x_total counter\ndta_x_total 1\n";
        // No HELP, and a counter without _total: lint warnings, so an error.
        let bad = "# TYPE dta_x counter\ndta_x 1\n";
        match promtool_check_metrics(good) {
            None => eprintln!("SKIP: promtool not found"),
            Some(r) => {
                assert_eq!(r, Ok(()));
                assert!(promtool_check_metrics(bad).unwrap().is_err());
                assert!(promtool_check_metrics("dta_x{ 1\n").unwrap().is_err());
            }
        }
    }

    const STAT: &str = "4242 (dta worker) x) S 1 4242 4242 0 -1 4194560 1021 0 0 0 \
        250 130 0 0 20 0 3 0 5000 104857600 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 \
        17 1 0 0 0 0 0\n";
    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units\n\
        Max cpu time              unlimited            unlimited            seconds\n\
        Max open files            1024                 524288               files\n";

    #[test]
    fn parses_proc() {
        let p = ProcessStats::parse(
            STAT,
            "cpu 1 2 3\nbtime 1700000000\n",
            LIMITS,
            9,
            (100, 4096),
        )
        .unwrap();
        assert_eq!(
            p,
            ProcessStats {
                cpu_seconds: 3.8,
                resident_bytes: 2048 * 4096,
                virtual_bytes: 104_857_600,
                start_time_seconds: 1_700_000_050.0,
                open_fds: 9,
                max_fds: Some(1024),
            }
        );
        let unlimited = LIMITS.replace("1024 ", "unlimited ");
        let p = ProcessStats::parse(STAT, "btime 1\n", &unlimited, 9, (100, 4096)).unwrap();
        assert_eq!(p.max_fds, None);
        assert!(ProcessStats::parse("4242 (x) S 1", "btime 1\n", LIMITS, 0, (100, 4096)).is_err());
        assert!(ProcessStats::parse(STAT, "cpu 1\n", LIMITS, 0, (100, 4096)).is_err());
    }

    #[test]
    fn reads_this_process() {
        let p = ProcessStats::read().unwrap();
        assert!(
            p.resident_bytes > 0 && p.virtual_bytes >= p.resident_bytes,
            "{p:?}"
        );
        assert!(p.open_fds >= 3, "{p:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            p.start_time_seconds > 1e9 && p.start_time_seconds <= now + 1.0,
            "{p:?}"
        );
        let mut w = PromWriter::new();
        p.write_prom(&mut w);
        let s = w.finish();
        for name in [
            "process_cpu_seconds_total ",
            "process_open_fds ",
            "process_max_fds ",
            "process_virtual_memory_bytes ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
        ] {
            assert!(s.contains(&format!("\n{name}")), "{name} in\n{s}");
        }
    }
}
