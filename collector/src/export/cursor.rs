//! The exporter's durable cursor: how far every Append list and every snapshotted store got
//! into ClickHouse.
//!
//! Written after ClickHouse acknowledged an INSERT, never before: to a new file in the same
//! directory, fsynced, then renamed over the old one (and the directory fsynced), so a crash
//! leaves either the old cursor or the new one, never a torn file. A cursor that is behind
//! (the crash came between the acknowledgement and the rename) is corrected at start from
//! ClickHouse itself ([`super::Exporter`]).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// A position in an Append list: the last entry in ClickHouse, `(generation, seq << 16 | idx)`.
/// Generations count restarts of the list's ring at batch 1; `seq` is the batch sequence
/// number (48 bits), `idx` the entry's index in its batch. `(0, 0)`: nothing yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ListPos {
    /// The ring's generation.
    pub generation: u32,
    /// `seq << 16 | idx` of the last entry exported.
    pub pos: u64,
}

impl ListPos {
    /// The position of entry `idx` of batch `seq`.
    pub fn of(generation: u32, seq: u64, idx: u16) -> ListPos {
        ListPos {
            generation,
            pos: seq << 16 | idx as u64,
        }
    }

    /// The batch holding the position (0: none).
    pub fn seq(&self) -> u64 {
        self.pos >> 16
    }
}

/// The whole state file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Append lists, by `store/list` (the global list ID).
    #[serde(default)]
    pub lists: BTreeMap<String, ListPos>,
    /// The last snapshot time (Unix seconds) exported, by store.
    #[serde(default)]
    pub snapshots: BTreeMap<String, u32>,
}

/// The key of a list in [`State::lists`].
pub fn list_key(store: &str, list: u32) -> String {
    format!("{store}/{list}")
}

impl State {
    /// Reads `path`; a missing file is an empty state.
    pub fn load(path: &Path) -> Result<State, String> {
        match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                format!(
                    "state_file {}: not an exporter state ({e}); move it away to start from \
                     what ClickHouse holds",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
            Err(e) => Err(format!("state_file {}: {e}", path.display())),
        }
    }

    /// Writes the state to `path` atomically (new file, fsync, rename, fsync the directory).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let what = |e: &dyn std::fmt::Display| format!("state_file {}: {e}", path.display());
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        let name = path
            .file_name()
            .ok_or_else(|| what(&"names no file"))?
            .to_string_lossy()
            .into_owned();
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let body = serde_json::to_vec_pretty(self).expect("state serialises");
        let r = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&body).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = r {
            let _ = std::fs::remove_file(&tmp);
            return Err(what(&e));
        }
        // The rename is durable once the directory is.
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_order_by_generation_then_batch_then_entry() {
        assert!(ListPos::of(0, 5, 15) < ListPos::of(0, 6, 0));
        assert!(ListPos::of(0, 1 << 40, 0) < ListPos::of(1, 1, 0));
        assert_eq!(ListPos::of(2, 7, 3).seq(), 7);
        assert_eq!(ListPos::default().seq(), 0);
    }

    #[test]
    fn save_and_load_round_trip_and_replace_atomically() {
        let dir = std::env::temp_dir().join(format!("dta-cursor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("state.json");
        assert_eq!(State::load(&p).unwrap(), State::default());
        let mut s = State::default();
        s.lists.insert(list_key("ap", 3), ListPos::of(1, 9, 2));
        s.snapshots.insert("ki".into(), 1_700_000_000);
        s.save(&p).unwrap();
        assert_eq!(State::load(&p).unwrap(), s);
        s.lists.insert(list_key("ap", 3), ListPos::of(1, 10, 0));
        s.save(&p).unwrap();
        assert_eq!(State::load(&p).unwrap(), s);
        // No temporary file stays behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::write(&p, "{not json").unwrap();
        assert!(State::load(&p)
            .unwrap_err()
            .contains("not an exporter state"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
