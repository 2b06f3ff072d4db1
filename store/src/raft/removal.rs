//! A replica that the cluster took out ([`super::Replica::removed`]) comes back as a new node:
//! its process marks its data directory and exits; the next start discards the store (the
//! database and the snapshots) before opening it, and the replica joins with a fresh node id.
//!
//! Two steps, because the store is open in the process that learns it was removed, and a
//! crash between them must not leave half a store: the mark is written durably first, and
//! removed last, after everything it names is gone — a start that finds it discards again.
//! Nothing else in the directory (the certificates kept beside the store) is touched.

use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};
use crate::lock::LockFile;
use crate::whole_file::{self, sync_dir};

/// The mark, in the store's directory.
const MARK: &str = "REMOVED";
/// What a store keeps in its directory, all of it discarded: the database, the snapshots and
/// the durable mark (which would otherwise make the empty store refuse to open).
const STORE_PARTS: [&str; 3] = ["db", "raft-snapshots", crate::durable::FILE];

/// Marks the store in `dir` to be discarded at the next start; `why` is kept in the mark.
pub fn mark(dir: &Path, why: &str) -> Result<()> {
    whole_file::write(&dir.join(MARK), why.as_bytes())
}

/// Before the store in `dir` is opened: discards it if it was marked. Returns why it was
/// marked (`None`: not marked, nothing done). Fails while another process holds the store.
pub fn discard_if_marked(dir: &Path) -> Result<Option<String>> {
    let path = dir.join(MARK);
    let why = match std::fs::read(&path) {
        Ok(why) => String::from_utf8_lossy(&why).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io_at(&path)(e)),
    };
    let _lock = LockFile::acquire(dir)?;
    for part in STORE_PARTS {
        let part: PathBuf = dir.join(part);
        let removed = if part.is_dir() {
            std::fs::remove_dir_all(&part)
        } else {
            std::fs::remove_file(&part)
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io_at(&part)(e)),
        }
    }
    sync_dir(dir)?;
    std::fs::remove_file(&path).map_err(StoreError::io_at(&path))?;
    sync_dir(dir)?;
    Ok(Some(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kdoctor-removal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("db")).expect("dir");
        std::fs::create_dir_all(dir.join("raft-snapshots")).expect("dir");
        std::fs::write(dir.join("db/conf"), b"x").expect("file");
        std::fs::write(dir.join(crate::durable::FILE), b"rv").expect("file");
        std::fs::write(dir.join("tls.crt"), b"certificate").expect("file");
        dir
    }

    #[test]
    fn a_marked_store_is_discarded_once_and_nothing_else() {
        let dir = scratch("marked");
        assert_eq!(discard_if_marked(&dir).expect("checked"), None);
        assert!(dir.join("db/conf").exists(), "an unmarked store is kept");
        mark(&dir, "taken out by c-0").expect("marked");
        assert!(dir.join("db").exists(), "marking discards nothing yet");
        assert_eq!(
            discard_if_marked(&dir).expect("discarded").as_deref(),
            Some("taken out by c-0")
        );
        assert!(!dir.join("db").exists());
        assert!(!dir.join("raft-snapshots").exists());
        assert!(!dir.join(crate::durable::FILE).exists());
        assert!(!dir.join(MARK).exists());
        assert_eq!(
            std::fs::read(dir.join("tls.crt")).expect("kept"),
            b"certificate"
        );
        assert_eq!(discard_if_marked(&dir).expect("checked"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_discard_broken_off_is_finished_at_the_next_start() {
        let dir = scratch("broken");
        mark(&dir, "taken out").expect("marked");
        // Crashed after the database went, before the snapshots and the mark did.
        std::fs::remove_dir_all(dir.join("db")).expect("removed");
        assert!(discard_if_marked(&dir).expect("discarded").is_some());
        assert!(!dir.join("raft-snapshots").exists());
        assert!(!dir.join(MARK).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
