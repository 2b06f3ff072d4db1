//! One process per store: an exclusive lock on `<dir>/LOCK`, which also records the holder so
//! that a second opener can say who it is.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Result, StoreError};

/// How long a lock that this process's own record holds is waited for.
const OWN_HOLDER_WAIT: Duration = Duration::from_secs(2);

/// How this process names itself in the lock file, up to the host name.
fn own_prefix() -> String {
    format!("pid {} on ", std::process::id())
}

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
        // A holder that is this very process is the copy of a closed descriptor that a child
        // being spawned by another thread inherited between fork and exec: it goes within
        // milliseconds, so it is waited for (briefly) instead of refused.
        let started = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let mut holder = String::new();
                    let _ = file.rewind();
                    let _ = file.read_to_string(&mut holder);
                    let holder = holder.trim().to_string();
                    if holder.starts_with(&own_prefix()) && started.elapsed() < OWN_HOLDER_WAIT {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    return Err(StoreError::Locked {
                        path: dir.to_path_buf(),
                        holder: if holder.is_empty() {
                            "another process".to_string()
                        } else {
                            holder
                        },
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let holder = format!("{}{}", own_prefix(), host.trim());
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        file.write_all(holder.as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(LockFile { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("kdoctor-lock-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Another descriptor of the lock file in this process, locked: what a child that is being
    /// spawned holds between fork and exec.
    fn held_copy(dir: &Path) -> File {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join("LOCK"))
            .expect("lock file");
        file.try_lock().expect("locked");
        file
    }

    #[test]
    fn a_copy_held_briefly_by_this_process_is_waited_for_and_a_held_lock_is_refused() {
        let dir = scratch("copy");
        drop(LockFile::acquire(&dir).expect("first"));
        let copy = held_copy(&dir);
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(copy);
        });
        let started = Instant::now();
        let lock = LockFile::acquire(&dir).expect("taken once the copy is closed");
        assert!(started.elapsed() >= Duration::from_millis(150));
        released.join().expect("thread");
        // Held for good: refused after the wait, naming the holder.
        let refused = LockFile::acquire(&dir).expect_err("held");
        assert!(
            matches!(&refused, StoreError::Locked { holder, .. } if holder.starts_with(&own_prefix())),
            "{refused:?}"
        );
        drop(lock);
        // Another process's record is refused at once.
        std::fs::write(dir.join("LOCK"), "pid 1 on elsewhere").expect("record");
        let _copy = held_copy(&dir);
        let started = Instant::now();
        let refused = LockFile::acquire(&dir).expect_err("held by another");
        assert!(started.elapsed() < Duration::from_millis(500));
        assert!(
            matches!(&refused, StoreError::Locked { holder, .. } if holder == "pid 1 on elsewhere")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
