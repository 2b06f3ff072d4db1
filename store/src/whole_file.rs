//! A small file written whole or not at all: written beside its place, synced, renamed there,
//! and the rename made durable. A crash or a full disk leaves the old file (or none), never an
//! empty or half-written one.

use std::io::Write;
use std::path::Path;

use crate::error::{Result, StoreError};

/// Writes `bytes` as the file `path` (through `<path>.tmp`).
pub(crate) fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp).map_err(StoreError::io_at(&tmp))?;
    file.write_all(bytes).map_err(StoreError::io_at(&tmp))?;
    file.sync_all().map_err(StoreError::io_at(&tmp))?;
    std::fs::rename(&tmp, path).map_err(StoreError::io_at(path))?;
    match path.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

/// Makes the changes to `dir`'s entries (a rename, a removal) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::io_at(dir))
}
