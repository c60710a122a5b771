//! The cgroup v1 freezer that stops a receiving thread while its queue is filled.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(super) const FREEZER_ROOT: &str = "/sys/fs/cgroup/freezer";

/// Pauses single threads with the cgroup v1 freezer (`/sys/fs/cgroup/freezer`, root): a
/// frozen thread takes nothing from its receive queue, so a sender can fill the queue to any
/// depth, and the receiver, once thawed, works through full bursts. The thread's CPU clock
/// stops while frozen. Dropping the freezer thaws and releases every thread it froze.
pub struct Freezer {
    dir: PathBuf,
}

impl Freezer {
    /// A new freezer cgroup for this process; Err(reason) without cgroup v1's freezer or
    /// without the rights to use it.
    pub fn new(tag: &str) -> Result<Freezer, String> {
        let root = Path::new(FREEZER_ROOT);
        if !root.join("tasks").exists() {
            return Err(format!("no cgroup v1 freezer at {FREEZER_ROOT}"));
        }
        let dir = root.join(format!("dta-bench-{}-{tag}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
        Ok(Freezer { dir })
    }

    fn write(&self, file: &str, v: &str) -> Result<(), String> {
        std::fs::write(self.dir.join(file), v)
            .map_err(|e| format!("{}/{file} <- {v}: {e}", self.dir.display()))
    }

    /// Freezes thread `tid` (of any process) and waits until it is frozen.
    pub fn freeze(&self, tid: u64) -> Result<(), String> {
        self.write("tasks", &tid.to_string())?;
        self.write("freezer.state", "FROZEN")?;
        let t0 = Instant::now();
        loop {
            let s = std::fs::read_to_string(self.dir.join("freezer.state")).unwrap_or_default();
            if s.trim() == "FROZEN" {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(5) {
                let _ = self.thaw();
                return Err(format!("thread {tid} did not freeze ({})", s.trim()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Thaws every thread it froze.
    pub fn thaw(&self) -> Result<(), String> {
        self.write("freezer.state", "THAWED")
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        let _ = self.thaw();
        let tasks = std::fs::read_to_string(self.dir.join("tasks")).unwrap_or_default();
        for t in tasks.lines() {
            let _ = std::fs::write(Path::new(FREEZER_ROOT).join("tasks"), t);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
