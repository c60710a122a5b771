//! A test's own directory under the system's temp dir, removed when the test is done with it
//! (the end-to-end systems keep their collector's metadata file there).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory `<temp>/<prefix>-<pid>-<n>`, deleted with everything in it on drop.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Creates the directory (panics if it cannot: a test without it cannot run).
    pub fn new(prefix: &str) -> ScratchDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
        // A directory left by a killed run with the same pid is stale.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        ScratchDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::ScratchDir;

    #[test]
    fn a_scratch_dir_is_gone_with_its_files_once_dropped() {
        let (a, b) = (
            ScratchDir::new("dta-scratch"),
            ScratchDir::new("dta-scratch"),
        );
        assert_ne!(a.path(), b.path());
        std::fs::write(a.path().join("f"), b"x").unwrap();
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists());
        assert!(b.path().is_dir());
    }
}
