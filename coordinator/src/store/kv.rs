//! The raw key-value layer: ordered byte keys, atomic and durable batches, prefix scans. It knows nothing of
//! what its keys mean, so everything above it can be tested on the in-memory twin, and the sled-specific
//! tuning (cache size, batch flushing, streaming scans) stays in one place behind a small trait.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use super::error::StoreError;
use super::format;

/// Key-value pairs as a prefix scan returns them, in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// One atomic batch of writes (`None` = remove the key).
pub type Writes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// The raw key-value layer the two backends implement.
pub trait Kv: Send + Sync {
    /// Applies every write (`None` = remove the key) atomically and makes it durable before returning.
    fn apply(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError>;
    /// Applies each part atomically, in order, and makes all durable before returning. A crash part-way
    /// leaves a prefix of the parts. The default applies them one by one; sled flushes once at the end.
    fn apply_parts(&self, parts: Vec<Writes>) -> Result<(), StoreError> {
        parts.into_iter().try_for_each(|p| self.apply(p))
    }
    /// As [`Kv::apply_parts`], without waiting until the parts are durable: for a store whose every write can
    /// be made again from elsewhere (a replicated member's, from its consensus log). A crash keeps a prefix.
    fn apply_parts_lazily(&self, parts: Vec<Writes>) -> Result<(), StoreError> {
        self.apply_parts(parts)
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    fn scan(&self, prefix: &[u8]) -> Result<Pairs, StoreError>;
    /// Calls `f` with each pair under `prefix`, in key order. sled's override does not collect them first,
    /// which keeps a start-up over a million chunks from holding all their blocks at once.
    fn for_each(&self, prefix: &[u8], f: &mut ScanFn<'_>) -> Result<(), StoreError> {
        self.scan(prefix)?.iter().try_for_each(|(k, v)| f(k, v))
    }
    /// Whether any key starts with `prefix`. sled's override reads the first key only: a job's keys of one
    /// kind can be one per chunk, and asking whether there are any should not copy them all.
    fn any_under(&self, prefix: &[u8]) -> Result<bool, StoreError> {
        Ok(!self.scan(prefix)?.is_empty())
    }
}

/// What [`Kv::for_each`] calls with each key and value.
pub type ScanFn<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), StoreError> + 'a;

pub struct SledKv {
    db: sled::Db,
    /// The format the store had when opened (1 to 5); [`Store::open`](super::Store::open) brings older
    /// ones to 5.
    pub(super) format: u8,
}

impl SledKv {
    /// Opens (or creates) a store directory, refusing directories that hold something else.
    pub fn open(path: &Path) -> Result<SledKv, StoreError> {
        if path.exists() {
            if !path.is_dir() {
                return Err(StoreError::NotAStore {
                    path: path.into(),
                    why: "it is not a directory".into(),
                });
            }
            let has_files = std::fs::read_dir(path)
                .map(|mut d| d.next().is_some())
                .unwrap_or(false);
            if has_files && !path.join("conf").exists() && !path.join("db").exists() {
                return Err(StoreError::NotAStore {
                    path: path.into(),
                    why: "the directory holds other files and no sled database".into(),
                });
            }
        }
        let db = sled::Config::new()
            .path(path)
            .mode(sled::Mode::HighThroughput)
            // sled's default page cache is 1 GiB; the coordinator reads little back (outputs on `results`,
            // everything at start-up), so a small cache keeps its memory flat under heavy write load.
            .cache_capacity(64 << 20)
            .open()
            .map_err(|source| StoreError::Open {
                path: path.into(),
                source,
            })?;
        let format = format::sled_marker(&db, path)?;
        Ok(SledKv { db, format })
    }
}

impl Kv for SledKv {
    fn apply(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError> {
        self.apply_parts(vec![writes])
    }

    fn apply_parts(&self, parts: Vec<Writes>) -> Result<(), StoreError> {
        self.apply_parts_lazily(parts)?;
        self.db.flush()?;
        Ok(())
    }

    fn apply_parts_lazily(&self, parts: Vec<Writes>) -> Result<(), StoreError> {
        for writes in parts {
            let mut batch = sled::Batch::default();
            for (k, v) in writes {
                match v {
                    Some(v) => batch.insert(k, v),
                    None => batch.remove(k),
                }
            }
            self.db.apply_batch(batch)?;
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.db.get(key)?.map(|v| v.to_vec()))
    }

    fn scan(&self, prefix: &[u8]) -> Result<Pairs, StoreError> {
        self.db
            .scan_prefix(prefix)
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).map_err(Into::into))
            .collect()
    }

    fn for_each(&self, prefix: &[u8], f: &mut ScanFn<'_>) -> Result<(), StoreError> {
        for r in self.db.scan_prefix(prefix) {
            let (k, v) = r?;
            f(&k, &v)?;
        }
        Ok(())
    }

    fn any_under(&self, prefix: &[u8]) -> Result<bool, StoreError> {
        Ok(self.db.scan_prefix(prefix).next().transpose()?.is_some())
    }
}

/// The in-memory twin, for tests of everything above the key-value layer.
#[derive(Default)]
pub struct MemKv {
    map: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl Kv for MemKv {
    fn apply(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        for (k, v) in writes {
            match v {
                Some(v) => map.insert(k, v),
                None => map.remove(&k),
            };
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned())
    }

    fn scan(&self, prefix: &[u8]) -> Result<Pairs, StoreError> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        Ok(map
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store_dir;

    /// Both backends say whether a prefix has keys the same way: on the key's bytes, not just its first.
    #[test]
    fn any_under_finds_keys_by_their_prefix() {
        let dir = temp_store_dir("any-under");
        let sled: Box<dyn Kv> = Box::new(SledKv::open(&dir).unwrap());
        for kv in [sled, Box::new(MemKv::default()) as Box<dyn Kv>] {
            assert!(!kv.any_under(b"l/").unwrap());
            kv.apply(vec![(b"l/\x00\x07".to_vec(), Some(b"x".to_vec()))])
                .unwrap();
            assert!(kv.any_under(b"l/").unwrap());
            assert!(kv.any_under(b"l/\x00").unwrap());
            assert!(!kv.any_under(b"l/\x01").unwrap());
            assert!(!kv.any_under(b"a/").unwrap());
            kv.apply(vec![(b"l/\x00\x07".to_vec(), None)]).unwrap();
            assert!(!kv.any_under(b"l/").unwrap());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
