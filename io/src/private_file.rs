//! Files that hold secrets (R_Keys, region addresses, PSNs: all a forged RDMA WRITE needs):
//! packet captures of the translator and the I/O backends, `--emit-connections` output. They
//! are created readable and writable by their owner only (mode 0600, whatever the umask), as
//! the collector's metadata file is.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

/// Creates `path` anew with mode 0600 for writing.
///
/// A regular file or a symbolic link already at `path` is removed first and a new file made
/// with `O_CREAT | O_EXCL` (which never follows a link): a reader that opened the old file
/// keeps the old inode and never sees what is written now, and a file someone else put there
/// meanwhile makes this fail instead of being written into. A FIFO or a character device
/// (`/dev/stdout`, `/dev/null`) is opened as it is: the operator chose where the bytes go.
pub fn create(path: &Path) -> io::Result<File> {
    if let Ok(md) = std::fs::symlink_metadata(path) {
        let t = md.file_type();
        if t.is_fifo() || t.is_char_device() {
            return OpenOptions::new().write(true).open(path);
        }
        if t.is_file() || t.is_symlink() {
            std::fs::remove_file(path)?;
        }
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn new_and_existing_paths_become_private_files() {
        let dir = std::env::temp_dir().join(format!("dta-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let p = dir.join("secret");
        create(&p).unwrap().write_all(b"one").unwrap();
        assert_eq!(mode(&p), 0o600);
        // An existing world-readable file: a reader holding it open keeps the old contents.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let old_reader = File::open(&p).unwrap();
        create(&p).unwrap().write_all(b"two").unwrap();
        assert_eq!(
            (mode(&p), std::fs::read(&p).unwrap()),
            (0o600, b"two".to_vec())
        );
        assert_eq!(std::io::read_to_string(old_reader).unwrap(), "one");
        // A link to elsewhere: the link is replaced, its target left alone.
        let target = dir.join("target");
        std::fs::write(&target, "target").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        create(&link).unwrap().write_all(b"x").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "target");
        assert_eq!(mode(&link), 0o600);
        // A character device is written as it is.
        create(Path::new("/dev/null"))
            .unwrap()
            .write_all(b"x")
            .unwrap();
        // A directory is not a file.
        assert!(create(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
