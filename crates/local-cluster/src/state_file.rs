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
        // Written beside it and renamed over it, so that another process reading meanwhile (a
        // test asking whether the cluster is healthy) finds the old record or the new one,
        // never an empty file that would read as "nothing started".
        let partial = self
            .path
            .with_extension(format!("json.{}.partial", std::process::id()));
        std::fs::write(&partial, text).map_err(|e| Error::io(&partial, e))?;
        std::fs::rename(&partial, &self.path).map_err(|e| Error::io(&self.path, e))
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

    /// A process that reads the record while another saves it finds a whole record each time.
    #[test]
    fn a_record_being_saved_again_always_loads_whole() {
        let dir = std::env::temp_dir().join(format!("state-file-race-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = StateFile::<Vec<u64>>::in_dir(&dir, "numbers");
        let record: Vec<u64> = (0..20_000).collect();
        file.save(&record).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (file, record, stop) = (file.clone(), record.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    file.save(&record).unwrap();
                }
            })
        };
        let mut missing = 0;
        for _ in 0..300 {
            if file.load().as_ref() != Some(&record) {
                missing += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(missing, 0, "loads that found no whole record");
    }
}
