//! Which sled tree holds the store's data. A replica that installs another's snapshot fills a
//! fresh tree, makes it durable, and only then points the store at it: a crash at any moment
//! leaves either the old data or the new, whole, never a mix (sled has no way to clear and
//! refill one tree atomically). Trees of an interrupted install are dropped at the next open.

use crate::error::Result;

/// The tree that records which tree is current.
const META_TREE: &[u8] = b"kdoctor-meta";
/// Its key naming the current tree.
const CURRENT: &[u8] = b"state-tree";
/// Names of data trees other than sled's default one.
const PREFIX: &[u8] = b"state-";
/// sled's default tree: the data tree of every store that never installed a snapshot.
const DEFAULT: &[u8] = b"__sled__default";

/// The current data tree and its name; leftovers of an interrupted install are dropped.
pub(crate) fn open_current(db: &sled::Db) -> Result<(sled::Tree, Vec<u8>)> {
    let meta = db.open_tree(META_TREE)?;
    let name = meta
        .get(CURRENT)?
        .map(|v| v.to_vec())
        .unwrap_or_else(|| DEFAULT.to_vec());
    for other in db.tree_names() {
        if other.starts_with(PREFIX) && other.as_ref() != name.as_slice() {
            tracing::info!(tree = %String::from_utf8_lossy(&other), "dropping the data of an interrupted snapshot install");
            db.drop_tree(&other)?;
        }
    }
    let tree = if name == DEFAULT {
        (**db).clone()
    } else {
        // The default tree's data was replaced by an install that died before freeing it.
        if !db.is_empty() {
            db.clear()?;
        }
        db.open_tree(&name)?
    };
    Ok((tree, name))
}

/// A new, empty data tree to fill beside `current`.
pub(crate) fn create_next(db: &sled::Db, current: &[u8]) -> Result<(sled::Tree, Vec<u8>)> {
    let number = current
        .strip_prefix(PREFIX)
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    let mut name = PREFIX.to_vec();
    name.extend_from_slice((number + 1).to_string().as_bytes());
    // Left by an install that failed in this process: start it afresh.
    db.drop_tree(&name)?;
    Ok((db.open_tree(&name)?, name))
}

/// Makes `name` the current data tree, durably (the caller flushed its content first).
pub(crate) fn switch(db: &sled::Db, name: &[u8]) -> Result<()> {
    db.open_tree(META_TREE)?.insert(CURRENT, name)?;
    db.flush()?;
    Ok(())
}

/// Frees a data tree that is no longer current.
pub(crate) fn discard(db: &sled::Db, name: &[u8]) -> Result<()> {
    if name == DEFAULT {
        db.clear()?;
    } else {
        db.drop_tree(name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (tempdir::Dir, sled::Db) {
        let dir = tempdir::Dir::new();
        let db = sled::Config::new()
            .path(dir.0.join("db"))
            .open()
            .expect("sled");
        (dir, db)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let path = std::env::temp_dir().join(format!(
                    "kdoctor-state-tree-{}-{}",
                    std::process::id(),
                    jiff::Timestamp::now().as_nanosecond()
                ));
                std::fs::create_dir_all(&path).expect("dir");
                Dir(path)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn a_switch_is_all_or_nothing_and_leftovers_are_dropped() {
        let (_dir, db) = db();
        db.insert(b"k", b"old").expect("insert");
        let (tree, name) = open_current(&db).expect("current");
        assert_eq!(name, DEFAULT);
        assert_eq!(tree.get(b"k").expect("get").as_deref(), Some(&b"old"[..]));

        // An install that never switched: the old data stays, the new tree goes.
        let (next, next_name) = create_next(&db, &name).expect("next");
        next.insert(b"k", b"new").expect("insert");
        let (tree, name) = open_current(&db).expect("current");
        assert_eq!(name, DEFAULT);
        assert_eq!(tree.get(b"k").expect("get").as_deref(), Some(&b"old"[..]));
        assert!(
            !db.tree_names()
                .iter()
                .any(|n| n.as_ref() == next_name.as_slice())
        );

        // One that switched: the new data from then on, the old freed.
        let (next, next_name) = create_next(&db, &name).expect("next");
        next.insert(b"k", b"new").expect("insert");
        switch(&db, &next_name).expect("switch");
        discard(&db, &name).expect("discard");
        let (tree, name) = open_current(&db).expect("current");
        assert_eq!(name, next_name);
        assert_eq!(tree.get(b"k").expect("get").as_deref(), Some(&b"new"[..]));
        assert!(db.get(b"k").expect("get").is_none());
        // And the one after it is numbered on.
        let (_, after) = create_next(&db, &name).expect("next");
        assert_eq!(after, b"state-2");
    }
}
