//! Process and thread resource measurements for the benchmarks: thread CPU time, process CPU
//! time, peak resident memory and another thread's on-CPU time.
//!
//! These are control-plane calls made at the start and end of a measurement, never per packet.

pub use dta_io::process::thread_cpu_ns;

/// CPU time (user + system) consumed by the whole process so far, in seconds (`getrusage`).
pub fn process_cpu_secs() -> f64 {
    // SAFETY: rusage is a plain C struct; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the valid, exclusively borrowed `ru`.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if r != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Peak resident set size of this process in KiB (`VmHWM` in `/proc/self/status`).
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The thread IDs of this process whose name (`comm`) is `name`, waiting up to a second for
/// a just-spawned thread to name itself.
pub fn threads_named(name: &str) -> Vec<u64> {
    let t = std::time::Instant::now();
    loop {
        let v = threads_named_now(name);
        if !v.is_empty() || t.elapsed() > std::time::Duration::from_secs(1) {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The threads named `name` that are not in `before` (the ones a call just spawned), waiting up
/// to a second for them to appear.
pub fn new_threads_named(name: &str, before: &[u64]) -> Vec<u64> {
    let t = std::time::Instant::now();
    loop {
        let v: Vec<u64> = threads_named_now(name)
            .into_iter()
            .filter(|t| !before.contains(t))
            .collect();
        if !v.is_empty() || t.elapsed() > std::time::Duration::from_secs(1) {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The thread IDs named `name` right now.
pub fn threads_named_now(name: &str) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let tid: u64 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            (comm.trim_end() == name).then_some(tid)
        })
        .collect()
}

/// On-CPU time of thread `tid` of this process in nanoseconds: `/proc/self/task/TID/schedstat`
/// (nanosecond resolution), falling back to `utime + stime` from `stat` (clock ticks).
pub fn task_cpu_ns(tid: u64) -> Option<u64> {
    let base = format!("/proc/self/task/{tid}");
    if let Ok(s) = std::fs::read_to_string(format!("{base}/schedstat")) {
        if let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse().ok()) {
            return Some(ns);
        }
    }
    let stat = std::fs::read_to_string(format!("{base}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 1_000_000_000 / clock_ticks_per_sec())
}

/// Clock ticks per second (`USER_HZ`, the unit of `/proc` CPU times).
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64
}

/// CPU time of process `pid`, from `/proc/PID/stat` (all its threads, live and exited), in
/// nanoseconds at clock-tick resolution: (its own user + system, its reaped children's user +
/// system: `cutime + cstime`, e.g. a Redis snapshot child).
pub fn pid_cpu_ns(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    stat_cpu_ns(&stat, hz)
}

/// `(utime + stime, cutime + cstime)` of a `/proc/PID/stat` line (fields 14-17 of proc(5)), in
/// nanoseconds.
pub fn stat_cpu_ns(stat: &str, hz: u64) -> Option<(u64, u64)> {
    // The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .take(15)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // `rest` starts at field 3 (state, which parses as 0 here): field n is f[n - 3].
    let at = |n: usize| f.get(n - 3).copied();
    let ns = |t: u64| t * 1_000_000_000 / hz.max(1);
    Some((ns(at(14)? + at(15)?), ns(at(16)? + at(17)?)))
}

/// Resident set size of process `pid` in bytes (`VmRSS` in `/proc/PID/status`).
pub fn pid_rss_bytes(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// The calling thread's kernel thread ID (for `/proc/self/task/TID` and the cgroup freezer).
pub fn gettid() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u64 }
}

/// Pins the calling thread to core `i` (modulo the cores available); false if it could not.
pub fn pin_to(i: usize) -> bool {
    match core_affinity::get_core_ids() {
        Some(ids) if !ids.is_empty() => core_affinity::set_for_current(ids[i % ids.len()]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurements_move() {
        let t0 = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns() > t0);
        assert!(process_cpu_secs() > 0.0);
        assert!(peak_rss_kib() > 0);
        let me = std::thread::current().name().unwrap_or("").to_string();
        let _ = me;
        // This thread's own task is found under its kernel TID.
        let tid = gettid();
        assert!(task_cpu_ns(tid).is_some());
        // Process CPU time counts in clock ticks (10 ms): spin until the first one.
        let me = std::process::id();
        let t = std::time::Instant::now();
        while pid_cpu_ns(me).is_some_and(|(own, _)| own == 0)
            && t.elapsed() < std::time::Duration::from_secs(5)
        {
            for i in 0..1_000_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
        }
        assert!(pid_cpu_ns(me).is_some_and(|(own, _)| own > 0));
        assert!(pid_rss_bytes(me).is_some_and(|b| b > 0));
    }

    /// A proc(5) stat line written by hand: a command name with a space and a parenthesis,
    /// utime 250, stime 50, cutime 7, cstime 3 ticks at 100 Hz.
    #[test]
    fn stat_lines_parse() {
        let line = "4242 (redis (srv) x) S 1 4242 4242 0 -1 4194560 9000 0 0 0 250 50 7 3 20 0 \
                    5 0 12345 100000000 2000 18446744073709551615";
        assert_eq!(stat_cpu_ns(line, 100), Some((3_000_000_000, 100_000_000)));
        assert_eq!(stat_cpu_ns("4242 (x) S 1 2", 100), None);
    }
}
