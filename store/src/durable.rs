//! The durable mark: the highest resourceVersion whose write was acknowledged, kept in a file
//! of its own beside sled's. sled recovers from a damaged log by cutting it back to the last
//! good record, silently; a write that was acknowledged (and maybe a DELETE a client saw
//! succeed) would come back undone and the resourceVersion would go backwards. With the mark,
//! the store sees on open that its data ends before what it promised, and refuses.
//!
//! The file is 16 bytes: the version (big-endian u64), then its CRC-32 and four zero bytes. It
//! is written in place and synced before a write returns.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Result, StoreError};

/// The mark's file name in the store directory.
pub const FILE: &str = "durable-rv";

/// The mark, open for updates.
pub struct DurableMark {
    path: PathBuf,
    file: Mutex<(File, u64)>,
}

fn encode(rv: u64) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&rv.to_be_bytes());
    bytes[8..12].copy_from_slice(&crc32fast::hash(&rv.to_be_bytes()).to_be_bytes());
    bytes
}

/// What the file holds: `Ok(None)` when there is none (a store from before the mark, or a new
/// one), an error when it is unreadable.
pub fn read(dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(FILE);
    let mut file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StoreError::Io { path, source }),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
    let damaged = |why: &str| StoreError::MarkDamaged {
        path: path.clone(),
        reason: why.to_string(),
    };
    if bytes.len() != 16 {
        return Err(damaged(&format!("{} bytes instead of 16", bytes.len())));
    }
    let rv = u64::from_be_bytes(bytes[..8].try_into().map_err(|_| damaged("short"))?);
    let crc = u32::from_be_bytes(bytes[8..12].try_into().map_err(|_| damaged("short"))?);
    if crc != crc32fast::hash(&bytes[..8]) {
        return Err(damaged("checksum mismatch"));
    }
    Ok(Some(rv))
}

impl DurableMark {
    /// Opens (or creates) the mark at `rv`.
    ///
    /// A new mark is written whole (crate::whole_file): a store whose creation failed (a
    /// full disk) leaves no mark, or all of it — never an empty file, which every later start
    /// would have to refuse as a damaged mark. Updates then rewrite its 16 bytes in place,
    /// which needs no new space.
    pub fn open(dir: &Path, rv: u64) -> Result<DurableMark> {
        let path = dir.join(FILE);
        if !path.exists() {
            crate::whole_file::write(&path, &encode(rv))?;
        }
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        let mark = DurableMark {
            path: path.clone(),
            file: Mutex::new((file, u64::MAX)),
        };
        mark.write(rv, true)?;
        Ok(mark)
    }

    /// Records that every write up to `rv` is durable (never moves back).
    pub fn advance(&self, rv: u64) -> Result<()> {
        self.write(rv, false)
    }

    /// Sets the mark to `rv`, lower or not (a follower that loaded its leader's snapshot).
    pub fn reset(&self, rv: u64) -> Result<()> {
        self.write(rv, true)
    }

    fn write(&self, rv: u64, force: bool) -> Result<()> {
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let (file, current) = &mut *guard;
        if !force && *current != u64::MAX && rv <= *current {
            return Ok(());
        }
        let io = |source| StoreError::Io {
            path: self.path.clone(),
            source,
        };
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&encode(rv)).map_err(io)?;
        file.set_len(16).map_err(io)?;
        file.sync_data().map_err(io)?;
        *current = rv;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{DurableMark, FILE, read};

    #[test]
    fn the_mark_only_moves_forward_and_detects_damage() {
        let dir = std::env::temp_dir().join(format!("kdoctor-durable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        assert_eq!(read(&dir).expect("none yet"), None);
        let mark = DurableMark::open(&dir, 7).expect("open");
        mark.advance(9).expect("advance");
        mark.advance(8).expect("no-op");
        assert_eq!(read(&dir).expect("read"), Some(9));
        let mut bytes = std::fs::read(dir.join(FILE)).expect("bytes");
        bytes[3] ^= 0xff;
        std::fs::write(dir.join(FILE), &bytes).expect("damage");
        let error = read(&dir).expect_err("damaged").to_string();
        assert!(error.contains("checksum mismatch"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
