//! One process per store: an exclusive lock on `<dir>/LOCK`, which also records the holder so
//! that a second opener can say who it is.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;

use crate::error::{Result, StoreError};

/// Holds the lock until dropped.
#[derive(Debug)]
pub struct LockFile {
    _file: File,
}

impl LockFile {
    /// Takes the lock of `dir`, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<LockFile> {
        let io = |source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let path = dir.join("LOCK");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(StoreError::Locked {
                    path: dir.to_path_buf(),
                    holder: if holder.is_empty() {
                        "another process".to_string()
                    } else {
                        holder.to_string()
                    },
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let holder = format!("pid {} on {}", std::process::id(), host.trim());
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        file.write_all(holder.as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(LockFile { _file: file })
    }
}
