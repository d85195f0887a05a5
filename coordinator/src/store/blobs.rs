//! Where artifacts, lists of solutions and shipped files are kept: named blobs, as files in one directory beside
//! sled's own (production) or in memory (tests). What the names mean, and the hashes that check them, are
//! `artifacts`' business; this layer only stores bytes durably and atomically.
//!
//! A file is written to a temporary name, synced, then renamed, so readers see the old blob or the new one;
//! several files of one commit share one sync of their directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::error::StoreError;

/// Where artifacts live: named, write-once-then-replace blobs.
pub trait Blobs: Send + Sync {
    /// Stores `bytes` under `name` durably and atomically (readers see the old blob or the new one).
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError>;
    /// [`Blobs::put`] for several blobs, all durable when it returns: a commit's lists and artifacts together,
    /// so a store of files syncs their directory once, not once per file.
    fn put_all(&self, blobs: &[(String, Vec<u8>)]) -> Result<(), StoreError> {
        for (name, bytes) in blobs {
            self.put(name, bytes)?;
        }
        Ok(())
    }
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Appends `bytes` to `name` (created when missing) durably, and returns the offset they start at.
    fn append(&self, name: &str, bytes: &[u8]) -> Result<u64, StoreError>;
    /// `len` bytes of `name` from `offset`; `None` when the blob is missing or ends before them.
    fn get_range(&self, name: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>, StoreError>;
    fn remove(&self, name: &str) -> Result<(), StoreError>;
    fn list(&self) -> Result<Vec<String>, StoreError>;
    /// The length of `name`, `None` when it is missing: with [`Blobs::get_range`], a blob read in pieces.
    fn size(&self, name: &str) -> Result<Option<u64>, StoreError>;
    /// [`Blobs::put`] with the bytes read from `reader` to its end, so a blob of any size is written without
    /// holding it whole.
    fn put_from(&self, name: &str, reader: &mut dyn std::io::Read) -> Result<(), StoreError>;
}

/// Blobs as files in one directory.
pub struct FileBlobs {
    dir: PathBuf,
}

/// Files being written before they are renamed into place: never a blob, removed at start-up.
pub(super) const TMP_PREFIX: &str = ".tmp-";

impl FileBlobs {
    pub fn open(dir: PathBuf) -> Result<FileBlobs, StoreError> {
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::File {
            path: dir.clone(),
            source,
        })?;
        Ok(FileBlobs { dir })
    }

    fn io<T>(&self, path: &Path, r: std::io::Result<T>) -> Result<T, StoreError> {
        r.map_err(|source| StoreError::File {
            path: path.to_path_buf(),
            source,
        })
    }
}

impl FileBlobs {
    /// Writes and syncs `bytes` under a temporary name and renames it to `name`; the rename is durable only
    /// once the directory is synced ([`FileBlobs::sync_dir`]).
    fn write_renamed(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.copy_renamed(name, &mut { bytes })
    }

    /// [`FileBlobs::write_renamed`] with the bytes of `reader`.
    fn copy_renamed(&self, name: &str, reader: &mut dyn std::io::Read) -> Result<(), StoreError> {
        let tmp = self.dir.join(format!("{TMP_PREFIX}{name}"));
        let path = self.dir.join(name);
        let written = std::fs::File::create(&tmp).and_then(|mut f| {
            std::io::copy(reader, &mut f)?;
            f.sync_all()
        });
        if let Err(e) = written {
            // Do not leave half a table behind on a full disk.
            let _ = std::fs::remove_file(&tmp);
            return self.io(&tmp, Err(e));
        }
        self.io(&path, std::fs::rename(&tmp, &path))
    }

    fn sync_dir(&self) -> Result<(), StoreError> {
        self.io(
            &self.dir,
            std::fs::File::open(&self.dir).and_then(|d| d.sync_all()),
        )
    }
}

impl Blobs for FileBlobs {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_renamed(name, bytes)?;
        self.sync_dir()
    }

    fn put_all(&self, blobs: &[(String, Vec<u8>)]) -> Result<(), StoreError> {
        if blobs.is_empty() {
            return Ok(());
        }
        for (name, bytes) in blobs {
            self.write_renamed(name, bytes)?;
        }
        self.sync_dir()
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.dir.join(name);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => self.io(&path, Err(e)),
        }
    }

    fn append(&self, name: &str, bytes: &[u8]) -> Result<u64, StoreError> {
        use std::io::Write;
        let path = self.dir.join(name);
        let created = !path.exists();
        let mut f = self.io(
            &path,
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path),
        )?;
        // Whatever an interrupted append left at the end stays there, unrecorded: the new bytes start after it.
        let offset = self.io(&path, f.metadata())?.len();
        self.io(&path, f.write_all(bytes).and_then(|()| f.sync_data()))?;
        if created {
            self.sync_dir()?;
        }
        Ok(offset)
    }

    fn get_range(&self, name: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>, StoreError> {
        use std::io::{Read, Seek, SeekFrom};
        let path = self.dir.join(name);
        let mut f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return self.io(&path, Err(e)),
        };
        let size = self.io(&path, f.metadata())?.len();
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Ok(None);
        }
        let mut buf = vec![0; len as usize];
        self.io(
            &path,
            f.seek(SeekFrom::Start(offset))
                .and_then(|_| f.read_exact(&mut buf)),
        )?;
        Ok(Some(buf))
    }

    fn remove(&self, name: &str) -> Result<(), StoreError> {
        let path = self.dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => self.io(&path, Err(e)),
            _ => Ok(()),
        }
    }

    fn size(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let path = self.dir.join(name);
        match std::fs::metadata(&path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => self.io(&path, Err(e)),
        }
    }

    fn put_from(&self, name: &str, reader: &mut dyn std::io::Read) -> Result<(), StoreError> {
        self.copy_renamed(name, reader)?;
        self.sync_dir()
    }

    fn list(&self) -> Result<Vec<String>, StoreError> {
        let entries = self.io(&self.dir, std::fs::read_dir(&self.dir))?;
        let mut names = Vec::new();
        for e in entries {
            let e = self.io(&self.dir, e)?;
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }
}

/// The in-memory twin of [`FileBlobs`].
#[derive(Default)]
pub struct MemBlobs {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemBlobs {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Blobs for MemBlobs {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.map().insert(name.to_string(), bytes.to_vec());
        Ok(())
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.map().get(name).cloned())
    }

    fn append(&self, name: &str, bytes: &[u8]) -> Result<u64, StoreError> {
        let mut map = self.map();
        let blob = map.entry(name.to_string()).or_default();
        let offset = blob.len() as u64;
        blob.extend_from_slice(bytes);
        Ok(offset)
    }

    fn get_range(&self, name: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let map = self.map();
        let range = usize::try_from(offset).ok().and_then(|start| {
            let end = start.checked_add(usize::try_from(len).ok()?)?;
            map.get(name)?.get(start..end)
        });
        Ok(range.map(<[u8]>::to_vec))
    }

    fn remove(&self, name: &str) -> Result<(), StoreError> {
        self.map().remove(name);
        Ok(())
    }

    fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.map().keys().cloned().collect())
    }

    fn size(&self, name: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.map().get(name).map(|b| b.len() as u64))
    }

    fn put_from(&self, name: &str, reader: &mut dyn std::io::Read) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        reader
            .read_to_end(&mut bytes)
            .map_err(|source| StoreError::File {
                path: name.into(),
                source,
            })?;
        self.put(name, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store_dir;

    #[test]
    fn blobs_append_and_read_ranges_in_files_and_in_memory() {
        let dir = temp_store_dir("append");
        let files = FileBlobs::open(dir.join("artifacts")).unwrap();
        let mem = MemBlobs::default();
        for blobs in [&files as &dyn Blobs, &mem] {
            assert_eq!(blobs.get_range("x", 0, 0).unwrap(), None);
            assert_eq!(blobs.append("x", b"abc").unwrap(), 0);
            assert_eq!(blobs.append("x", b"defg").unwrap(), 3);
            assert_eq!(blobs.get_range("x", 2, 3).unwrap(), Some(b"cde".to_vec()));
            assert_eq!(blobs.get_range("x", 7, 0).unwrap(), Some(Vec::new()));
            assert_eq!(blobs.get_range("x", 5, 3).unwrap(), None);
            assert_eq!(blobs.get_range("x", u64::MAX, 2).unwrap(), None);
            assert_eq!(blobs.get("x").unwrap(), Some(b"abcdefg".to_vec()));
            assert_eq!(blobs.size("x").unwrap(), Some(7));
            assert_eq!(blobs.size("y").unwrap(), None);
            blobs.put_from("y", &mut &b"streamed"[..]).unwrap();
            assert_eq!(blobs.get("y").unwrap(), Some(b"streamed".to_vec()));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
