//! An advisory lock on a file, held across processes: tests of several binaries and a developer's
//! `cargo xtask` may all try to build or start the cluster at once.

use std::fs::{File, OpenOptions};
use std::path::Path;

use crate::error::{Error, Result};

/// Released when dropped (closing the file releases the lock).
pub struct FileLock {
    _file: File,
}

impl FileLock {
    pub fn acquire(path: &Path) -> Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        file.lock().map_err(|e| Error::io(path, e))?;
        Ok(Self { _file: file })
    }
}
