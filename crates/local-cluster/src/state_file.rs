//! The `state.json` in which the cluster, the real node and the OpenStack test bed each record
//! what they started, so that `down` stops exactly that, from any process and after a crash.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// A record of type `T` kept as pretty JSON at one path.
#[derive(Clone, Debug)]
pub struct StateFile<T> {
    path: PathBuf,
    /// What it records, for the error when it cannot be encoded.
    what: &'static str,
    record: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> StateFile<T> {
    /// `state.json` in `dir`.
    pub fn in_dir(dir: &Path, what: &'static str) -> Self {
        Self {
            path: dir.join("state.json"),
            what,
            record: PhantomData,
        }
    }

    /// The record; `None` when there is none or it cannot be read (as if nothing had started).
    pub fn load(&self) -> Option<T> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        serde_json::from_str(&text).ok()
    }

    pub fn save(&self, record: &T) -> Result<()> {
        let text = serde_json::to_string_pretty(record).map_err(|e| Error::Encode {
            what: self.what.into(),
            message: e.to_string(),
        })?;
        std::fs::write(&self.path, text).map_err(|e| Error::io(&self.path, e))
    }

    /// Forgets the record; one already gone is no error.
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_record_loads_and_a_missing_one_is_none() {
        let dir = std::env::temp_dir().join(format!("state-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = StateFile::<Vec<u16>>::in_dir(&dir, "numbers");
        assert_eq!(file.load(), None);
        file.save(&vec![1, 2]).unwrap();
        assert_eq!(file.load(), Some(vec![1, 2]));
        file.remove();
        assert_eq!(file.load(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
