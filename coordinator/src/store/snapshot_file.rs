//! A replicated member's snapshots as files, so that a store of any size is snapshotted, sent and installed
//! without ever being held in memory whole.
//!
//! The consensus log keeps only a [`Descriptor`] (length and blake3 digest of the file, 41 bytes); the file
//! sits in the member's snapshot directory, named by its digest, and travels beside the snapshot message
//! (the transport pushes it first; a member refuses a snapshot message whose file it does not have whole).
//!
//! A file is `MAGIC`, then every blob (`b`, u32 name length, name, u64 length, bytes), then every key-value
//! pair (`k`, u32 key length, key, u32 value length, value), then `e` with the counts of pairs and blobs (u64
//! each); lengths little-endian. Blobs come first so that a store restored from it never has a key naming a
//! blob that is not there yet.
//!
//! Names in the directory: `DIGEST.snap` (taken here, or received and installed), `DIGEST.recv` (received
//! whole and checked, not yet installed), and temporary files starting with `.` (being written or received),
//! removed when the directory is opened.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::blobs::TMP_PREFIX;
use super::error::StoreError;
use super::handle::Store;

const MAGIC: &[u8; 8] = b"swpsnap2";
/// The first byte of a descriptor: 1 was a snapshot carried whole in the log.
pub const DESCRIPTOR_VERSION: u8 = 2;
const DESCRIPTOR_LEN: usize = 1 + 8 + 32;
/// How much of a blob is read or written at once, and the most a batch of restored pairs holds.
const PIECE: u64 = 1 << 20;
/// Bytes of pairs installed between two flushes of the store.
const FLUSH_EVERY: u64 = 32 << 20;
/// Keys removed in one batch while a store is emptied for a snapshot.
const REMOVE_BATCH: usize = 4096;
/// A received file that was never installed (its message was lost, or a newer snapshot came) is kept this
/// long, then removed.
const RECEIVED_KEPT: std::time::Duration = std::time::Duration::from_secs(3600);

/// What the consensus log holds of a snapshot: which file, and how to check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub len: u64,
    pub digest: [u8; 32],
}

impl Descriptor {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DESCRIPTOR_LEN);
        out.push(DESCRIPTOR_VERSION);
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.digest);
        out
    }

    /// The descriptor in a snapshot's bytes; `None` when they are a snapshot of another kind (the empty
    /// state a group starts from, or a whole store inline).
    pub fn decode(data: &[u8]) -> Option<Descriptor> {
        if data.len() != DESCRIPTOR_LEN || data[0] != DESCRIPTOR_VERSION {
            return None;
        }
        let mut len = [0u8; 8];
        len.copy_from_slice(&data[1..9]);
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&data[9..]);
        Some(Descriptor {
            len: u64::from_le_bytes(len),
            digest,
        })
    }

    fn name(&self) -> String {
        hex::encode(self.digest)
    }
}

fn damaged(why: impl Into<String>) -> StoreError {
    StoreError::Damaged {
        key: "a snapshot file".into(),
        why: why.into(),
    }
}

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::File {
        path: path.to_path_buf(),
        source,
    }
}

/// A writer that hashes and counts what goes through it.
struct Hashing<W> {
    inner: W,
    hasher: blake3::Hasher,
    len: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A member's snapshot directory.
#[derive(Clone, Debug)]
pub struct SnapshotFiles {
    dir: PathBuf,
}

/// Temporary names never collide, even between two receptions of one file.
fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl SnapshotFiles {
    /// Opens (creating) the directory, removing what an interrupted write or reception left.
    pub fn open(dir: PathBuf) -> Result<SnapshotFiles, StoreError> {
        std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        for entry in std::fs::read_dir(&dir).map_err(io_at(&dir))? {
            let entry = entry.map_err(io_at(&dir))?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                let path = entry.path();
                std::fs::remove_file(&path).map_err(io_at(&path))?;
            }
        }
        Ok(SnapshotFiles { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, d: &Descriptor, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", d.name()))
    }

    /// The file of `d`, if this member has it whole.
    pub fn find(&self, d: &Descriptor) -> Option<PathBuf> {
        ["snap", "recv"]
            .into_iter()
            .map(|ext| self.path(d, ext))
            .find(|p| p.is_file())
    }

    /// Writes every blob and key of `store` to a new file, reading them one at a time; returns its
    /// descriptor. The caller keeps writers out meanwhile (a member snapshots between two entries).
    pub fn write(&self, store: &Store) -> Result<Descriptor, StoreError> {
        let tmp = self.dir.join(format!(".writing-{}", unique()));
        let written = self.write_to(store, &tmp);
        let d = match written {
            Ok(d) => d,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        let path = self.path(&d, "snap");
        std::fs::rename(&tmp, &path).map_err(io_at(&path))?;
        self.sync_dir()?;
        Ok(d)
    }

    fn write_to(&self, store: &Store, tmp: &Path) -> Result<Descriptor, StoreError> {
        let io = io_at(tmp);
        let file = std::fs::File::create(tmp).map_err(&io)?;
        let mut w = Hashing {
            inner: BufWriter::with_capacity(PIECE as usize, file),
            hasher: blake3::Hasher::new(),
            len: 0,
        };
        w.write_all(MAGIC).map_err(&io)?;
        let mut blobs = 0u64;
        for name in store.blobs.list()? {
            // A blob being written under its temporary name is not one yet.
            if name.starts_with(TMP_PREFIX) {
                continue;
            }
            let Some(size) = store.blobs.size(&name)? else {
                continue;
            };
            let name_len =
                u32::try_from(name.len()).map_err(|_| damaged("a blob name over 4 GB"))?;
            w.write_all(b"b").map_err(&io)?;
            w.write_all(&name_len.to_le_bytes()).map_err(&io)?;
            w.write_all(name.as_bytes()).map_err(&io)?;
            w.write_all(&size.to_le_bytes()).map_err(&io)?;
            let mut at = 0;
            while at < size {
                let n = PIECE.min(size - at);
                let piece = store
                    .blobs
                    .get_range(&name, at, n)?
                    .ok_or_else(|| damaged(format!("blob {name} shrank while it was read")))?;
                w.write_all(&piece).map_err(&io)?;
                at += n;
            }
            blobs += 1;
        }
        let mut pairs = 0u64;
        store.kv.for_each(b"", &mut |k, v| {
            w.write_all(b"k").map_err(&io)?;
            for field in [k, v] {
                let len = u32::try_from(field.len()).map_err(|_| damaged("a value over 4 GB"))?;
                w.write_all(&len.to_le_bytes()).map_err(&io)?;
                w.write_all(field).map_err(&io)?;
            }
            pairs += 1;
            Ok(())
        })?;
        w.write_all(b"e").map_err(&io)?;
        w.write_all(&pairs.to_le_bytes()).map_err(&io)?;
        w.write_all(&blobs.to_le_bytes()).map_err(&io)?;
        w.flush().map_err(&io)?;
        let Hashing { inner, hasher, len } = w;
        let file = inner.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(&io)?;
        Ok(Descriptor {
            len,
            digest: *hasher.finalize().as_bytes(),
        })
    }

    fn sync_dir(&self) -> Result<(), StoreError> {
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_at(&self.dir))
    }

    /// Starts receiving the file of `d` from another member.
    pub fn receive(&self, d: Descriptor) -> Result<Incoming, StoreError> {
        let part = self.dir.join(format!(".{}-{}.part", d.name(), unique()));
        let file = std::fs::File::create(&part).map_err(io_at(&part))?;
        Ok(Incoming {
            file: Some(BufWriter::with_capacity(PIECE as usize, file)),
            hasher: blake3::Hasher::new(),
            len: 0,
            expected: d,
            part,
            done: self.path(&d, "recv"),
            dir: self.clone(),
        })
    }

    /// Checks that the file of `d` is whole (its length and digest); returns where it is.
    pub fn verify(&self, d: &Descriptor) -> Result<PathBuf, StoreError> {
        let path = self.find(d).ok_or_else(|| {
            damaged(format!(
                "snapshot {} is not in {}",
                d.name(),
                self.dir.display()
            ))
        })?;
        let mut file = std::fs::File::open(&path).map_err(io_at(&path))?;
        let mut hasher = blake3::Hasher::new();
        let len = std::io::copy(&mut file, &mut hasher).map_err(io_at(&path))?;
        if len != d.len || *hasher.finalize().as_bytes() != d.digest {
            return Err(damaged(format!(
                "{} does not match its digest: the disk changed it",
                path.display()
            )));
        }
        Ok(path)
    }

    /// Makes `store` hold exactly what the file of `d` holds: every other key (but those in `keep`) and every
    /// other blob removed, the file's written, in batches of bounded size. Not atomic: the caller marks the
    /// store as being restored first and clears the mark after (a crash part-way leaves the mark, and the
    /// snapshot is installed again).
    pub fn load_into(
        &self,
        d: &Descriptor,
        store: &Store,
        keep: &[&[u8]],
    ) -> Result<(), StoreError> {
        self.installed(d)?;
        let path = self.verify(d)?;
        let kv = &store.kv;
        let mut batch: super::kv::Writes = Vec::new();
        kv.for_each(b"", &mut |k, _| {
            if !keep.contains(&k) {
                batch.push((k.to_vec(), None));
                if batch.len() >= REMOVE_BATCH {
                    kv.apply_parts_lazily(vec![std::mem::take(&mut batch)])?;
                }
            }
            Ok(())
        })?;
        kv.apply_parts_lazily(vec![std::mem::take(&mut batch)])?;
        for name in store.blobs.list()? {
            store.blobs.remove(&name)?;
        }
        // sled holds written pages in memory until it flushes them: flushing every so often keeps an install
        // of any size from growing the member's memory with the store.
        let (mut bytes, mut unflushed) = (0u64, 0u64);
        SnapshotFiles::read(
            &path,
            &mut |name, r| store.blobs.put_from(name, r),
            &mut |k, v| {
                if keep.contains(&k.as_slice()) {
                    return Ok(());
                }
                bytes += (k.len() + v.len()) as u64;
                batch.push((k, Some(v)));
                if bytes >= PIECE || batch.len() >= REMOVE_BATCH {
                    unflushed += bytes;
                    let batch = vec![std::mem::take(&mut batch)];
                    if unflushed >= FLUSH_EVERY {
                        kv.apply_parts(batch)?;
                        unflushed = 0;
                    } else {
                        kv.apply_parts_lazily(batch)?;
                    }
                    bytes = 0;
                }
                Ok(())
            },
        )?;
        kv.apply_parts_lazily(vec![batch])
    }

    /// Marks the file of `d` installed, so that it is kept as the stored snapshot (a received file becomes
    /// `.snap`).
    pub fn installed(&self, d: &Descriptor) -> Result<(), StoreError> {
        let recv = self.path(d, "recv");
        if recv.is_file() {
            let snap = self.path(d, "snap");
            std::fs::rename(&recv, &snap).map_err(io_at(&snap))?;
            self.sync_dir()?;
        }
        Ok(())
    }

    /// Removes every snapshot file but `d`'s (the stored one) and received files that waited too long to be
    /// installed. A file still being sent stays readable to its sender until it is closed.
    pub fn keep_only(&self, d: &Descriptor) -> Result<(), StoreError> {
        let keep = format!("{}.snap", d.name());
        for entry in std::fs::read_dir(&self.dir).map_err(io_at(&self.dir))? {
            let entry = entry.map_err(io_at(&self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let stale = if name.ends_with(".snap") {
                name != keep
            } else if name.ends_with(".recv") {
                entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > RECEIVED_KEPT)
            } else {
                false
            };
            if stale {
                let path = entry.path();
                std::fs::remove_file(&path).map_err(io_at(&path))?;
            }
        }
        Ok(())
    }

    /// Reads the file at `path` (checked by [`SnapshotFiles::verify`]), handing each blob and each pair, in
    /// the file's order, to `blob` and `pair`.
    pub fn read(
        path: &Path,
        blob: &mut dyn FnMut(&str, &mut dyn Read) -> Result<(), StoreError>,
        pair: &mut dyn FnMut(Vec<u8>, Vec<u8>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let io = io_at(path);
        let file = std::fs::File::open(path).map_err(&io)?;
        let mut r = BufReader::with_capacity(PIECE as usize, file);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).map_err(&io)?;
        if &magic != MAGIC {
            return Err(damaged(format!(
                "{} is not a snapshot file",
                path.display()
            )));
        }
        let (mut blobs, mut pairs) = (0u64, 0u64);
        loop {
            let mut tag = [0u8; 1];
            r.read_exact(&mut tag).map_err(&io)?;
            match &tag {
                b"b" => {
                    let name = read_field(&mut r, &io)?;
                    let name =
                        String::from_utf8(name).map_err(|_| damaged("a blob name not UTF-8"))?;
                    let len = read_u64(&mut r, &io)?;
                    let mut bytes = (&mut r).take(len);
                    blob(&name, &mut bytes)?;
                    if bytes.limit() != 0 {
                        return Err(damaged(format!("blob {name} cut short")));
                    }
                    blobs += 1;
                }
                b"k" => {
                    let k = read_field(&mut r, &io)?;
                    let v = read_field(&mut r, &io)?;
                    pair(k, v)?;
                    pairs += 1;
                }
                b"e" => {
                    let (want_pairs, want_blobs) = (read_u64(&mut r, &io)?, read_u64(&mut r, &io)?);
                    if (want_pairs, want_blobs) != (pairs, blobs) {
                        return Err(damaged(format!(
                            "{pairs} keys and {blobs} blobs read, {want_pairs} and {want_blobs} written"
                        )));
                    }
                    return Ok(());
                }
                [t] => return Err(damaged(format!("unknown record tag {t}"))),
            }
        }
    }
}

fn read_u64(
    r: &mut impl Read,
    io: &impl Fn(std::io::Error) -> StoreError,
) -> Result<u64, StoreError> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b).map_err(io)?;
    Ok(u64::from_le_bytes(b))
}

fn read_field(
    r: &mut impl Read,
    io: &impl Fn(std::io::Error) -> StoreError,
) -> Result<Vec<u8>, StoreError> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b).map_err(io)?;
    let mut field = Vec::new();
    let len = u64::from(u32::from_le_bytes(b));
    r.take(len).read_to_end(&mut field).map_err(io)?;
    if field.len() as u64 != len {
        return Err(damaged("a record cut short"));
    }
    Ok(field)
}

/// A snapshot file being received: bytes in order, then [`Incoming::finish`]. Dropped unfinished, it leaves
/// nothing behind.
pub struct Incoming {
    file: Option<BufWriter<std::fs::File>>,
    hasher: blake3::Hasher,
    len: u64,
    expected: Descriptor,
    part: PathBuf,
    done: PathBuf,
    dir: SnapshotFiles,
}

impl Incoming {
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        let len = self.len + bytes.len() as u64;
        if len > self.expected.len {
            return Err(damaged(format!(
                "more bytes than the {} the snapshot has",
                self.expected.len
            )));
        }
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| damaged("written after it finished"))?;
        file.write_all(bytes).map_err(io_at(&self.part))?;
        self.hasher.update(bytes);
        self.len = len;
        Ok(())
    }

    /// Checks the whole file against its descriptor and puts it in place.
    pub fn finish(mut self) -> Result<(), StoreError> {
        if self.len != self.expected.len
            || *self.hasher.finalize().as_bytes() != self.expected.digest
        {
            return Err(damaged(format!(
                "{} bytes received do not match the snapshot's length ({}) and digest",
                self.len, self.expected.len
            )));
        }
        let file = self.file.take().ok_or_else(|| damaged("finished twice"))?;
        let io = io_at(&self.part);
        let file = file.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(&io)?;
        std::fs::rename(&self.part, &self.done).map_err(io_at(&self.done))?;
        self.dir.sync_dir()
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        // Whatever happened, the temporary name goes: a finished file was renamed away from it already.
        let _ = std::fs::remove_file(&self.part);
    }
}
