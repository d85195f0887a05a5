//! Artifacts (tables of hundreds of MB) and shipped files, kept as files under `artifacts/` beside sled's own
//! files, not in sled: sled keeps every large value in its log until it rewrites a whole segment, so a 169 MB
//! table written as chunks and then once merged left 755 MB on disk.
//!
//! A file is written and synced (to a temporary name, then renamed) *before* the batch that records its hash,
//! so a recorded hash always has its file; a crash in between leaves an unreferenced file that the next write
//! of the same chunk replaces or that start-up removes. Reading checks the hash, so a damaged or missing file
//! is reported, never served.
//!
//! Lists of solutions are appended to one segment file per job (`ls-<job>`), each recorded with its offset,
//! length and hash: a listing job reports a list with every chunk, and a file created, synced and renamed per
//! chunk (inode allocation, one fsync each) was 3% of a listing `sweep run star --points 12`'s CPU samples. A
//! group commit appends all of a job's new lists at once and syncs the segment once. The same order holds:
//! bytes are synced before the batch that records them, and bytes no batch recorded (a crash in between, a
//! commit that failed) are never read. Older stores' per-chunk list files (`l-<job>-<chunk>`, recorded by their
//! hash alone) are still read.

use super::blobs::TMP_PREFIX;
use super::digest::{digest_hex, hash, is_digest};
use super::error::StoreError;
use super::framing::{take, take_u32};
use super::handle::Store;
use super::keys::{chunk_key, job_key, key_text};
use crate::scheduler::JobId;

pub(super) fn chunk_blob(job: JobId, chunk: u64) -> String {
    format!("a-{job}-{chunk}")
}

/// The file that held a chunk's list of solutions (see [`encode_list_into`]) before lists went to segments,
/// referenced by `l/<job><chunk>` with its hash alone; still read.
pub(super) fn list_blob(job: JobId, chunk: u64) -> String {
    format!("l-{job}-{chunk}")
}

/// The file a job's lists of solutions are appended to, each referenced by a [`ListRef`].
pub(super) fn segment_blob(job: JobId) -> String {
    format!("ls-{job}")
}

/// What `l/<job><chunk>` records of a list in the job's segment: where it is and its hash. Spelled as
/// [`SEGMENT_REF`], then offset and length (big-endian u64), then the 32-byte blake3 hash: 49 bytes, where an
/// older store's reference to a per-chunk file is the 32-byte hash alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ListRef {
    pub offset: u64,
    pub len: u64,
    pub hash: [u8; 32],
}

const SEGMENT_REF: u8 = 1;
const SEGMENT_REF_LEN: usize = 1 + 8 + 8 + 32;

impl ListRef {
    pub fn of(offset: u64, list: &[u8]) -> ListRef {
        ListRef {
            offset,
            len: list.len() as u64,
            hash: *blake3::hash(list).as_bytes(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(SEGMENT_REF_LEN);
        v.push(SEGMENT_REF);
        v.extend_from_slice(&self.offset.to_be_bytes());
        v.extend_from_slice(&self.len.to_be_bytes());
        v.extend_from_slice(&self.hash);
        v
    }

    /// `None` for anything but a segment reference (an older store's bare hash, say).
    pub fn decode(v: &[u8]) -> Option<ListRef> {
        if v.len() != SEGMENT_REF_LEN || v[0] != SEGMENT_REF {
            return None;
        }
        Some(ListRef {
            offset: u64::from_be_bytes(v[1..9].try_into().ok()?),
            len: u64::from_be_bytes(v[9..17].try_into().ok()?),
            hash: v[17..].try_into().ok()?,
        })
    }
}

/// The first byte of a list file in the framed format. Lists used to be JSON arrays (first byte `[`), which
/// are still read: a store keeps the files its older versions wrote.
const LIST_FRAMED: u8 = 2;

/// [`encode_list_into`] in a buffer of its own, as a per-chunk list file of format 3 held it.
#[cfg(test)]
pub(super) fn encode_list(solutions: &[String]) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::new();
    encode_list_into(solutions, &mut out)?;
    Ok(out)
}

/// A chunk's list of solutions as stored, appended to `out` (the bytes a commit adds to a segment):
/// [`LIST_FRAMED`], then each solution as its length (`u32`, little endian) and its UTF-8 bytes. Framed rather
/// than JSON: no solution's text is escaped or scanned for quotes on the way in or out, and a listing star job
/// of 400,000 stars spent as long encoding its lists as JSON as writing their files.
pub(super) fn encode_list_into(solutions: &[String], out: &mut Vec<u8>) -> Result<(), StoreError> {
    out.reserve(1 + solutions.iter().map(|s| 4 + s.len()).sum::<usize>());
    out.push(LIST_FRAMED);
    for s in solutions {
        let len = u32::try_from(s.len()).map_err(|_| StoreError::TooLarge {
            what: "a solution".into(),
            bytes: s.len() as u64,
        })?;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    Ok(())
}

/// Reads a list file of either format; the error says what is wrong with it.
pub(super) fn decode_list(bytes: &[u8]) -> Result<Vec<String>, String> {
    match bytes.split_first() {
        Some((&LIST_FRAMED, mut rest)) => {
            let mut solutions = Vec::new();
            while !rest.is_empty() {
                let i = solutions.len();
                let len = take_u32(&mut rest)
                    .ok_or_else(|| format!("it ends inside the length of solution {i}"))?;
                let text = take(&mut rest, len as usize)
                    .ok_or_else(|| format!("it ends inside solution {i}"))?;
                let text = std::str::from_utf8(text)
                    .map_err(|e| format!("solution {i} is not UTF-8: {e}"))?;
                solutions.push(text.to_owned());
            }
            Ok(solutions)
        }
        _ => serde_json::from_slice(bytes).map_err(|e| format!("it does not parse: {e}")),
    }
}

pub(super) fn shipped_blob(digest: &str) -> String {
    format!("s-{digest}")
}

pub(super) fn shipped_key(digest: &str) -> Vec<u8> {
    format!("s/{digest}").into_bytes()
}

pub(super) fn job_blob(job: JobId) -> String {
    format!("r-{job}")
}

impl Store {
    /// Removes temporary files and artifacts whose hash was never recorded (a crash between the file and the
    /// batch) or has been dropped (chunk artifacts after their merge).
    pub(super) fn remove_unreferenced_blobs(&self) -> Result<(), StoreError> {
        for name in self.blobs.list()? {
            let per_chunk = |tag: u8, rest: &str| {
                rest.split_once('-')
                    .and_then(|(j, c)| Some(chunk_key(tag, j.parse().ok()?, c.parse().ok()?)))
            };
            if let Some(job) = name.strip_prefix("ls-") {
                // A segment is kept while any list of its job is recorded (some may be in older per-chunk
                // files; keeping a segment a little longer loses nothing).
                let referenced = match job.parse() {
                    Ok(job) => self.kv.any_under(&job_key(b'l', job))?,
                    Err(_) => true,
                };
                if !referenced {
                    self.blobs.remove(&name)?;
                }
                continue;
            }
            let key = if let Some(rest) = name.strip_prefix("a-") {
                per_chunk(b'a', rest)
            } else if let Some(rest) = name.strip_prefix("l-") {
                per_chunk(b'l', rest)
            } else if let Some(rest) = name.strip_prefix("r-") {
                rest.parse().ok().map(|j| job_key(b'r', j))
            } else {
                name.strip_prefix("s-").map(shipped_key)
            };
            let referenced = match key {
                Some(k) => self.kv.get(&k)?.is_some(),
                // Temporary files of an interrupted write; foreign files are left alone.
                None => !name.starts_with(TMP_PREFIX),
            };
            if !referenced {
                self.blobs.remove(&name)?;
            }
        }
        Ok(())
    }

    /// Puts chunk `chunk`'s stored list of solutions back into `out`, checked against its recorded hash
    /// (nothing to do for a chunk that listed none).
    pub(super) fn attach_list(
        &self,
        job: JobId,
        chunk: u64,
        out: &mut sweep_space::ChunkOutput,
    ) -> Result<(), StoreError> {
        let key = chunk_key(b'l', job, chunk);
        if let Some(want) = self.kv.get(&key)? {
            let bytes = match ListRef::decode(&want) {
                Some(at) => self.checked_range(&segment_blob(job), &key, at)?,
                None => self.checked_blob(&list_blob(job, chunk), &key, &want)?,
            };
            out.solutions = decode_list(&bytes).map_err(|e| StoreError::Damaged {
                key: key_text(&key),
                why: format!("its list of solutions is damaged: {e}"),
            })?;
        }
        Ok(())
    }

    /// An artifact's bytes, checked against the hash recorded under `key`.
    pub(super) fn checked_blob(
        &self,
        name: &str,
        key: &[u8],
        want: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        let damaged = |why: String| StoreError::Damaged {
            key: key_text(key),
            why,
        };
        let bytes = self
            .blobs
            .get(name)?
            .ok_or_else(|| damaged(format!("its artifact file `{name}` is missing")))?;
        if hash(&bytes) != want {
            return Err(damaged(format!(
                "its artifact file `{name}` does not match the recorded hash"
            )));
        }
        Ok(bytes)
    }

    /// A list's bytes in its job's segment, checked against the hash recorded with it.
    fn checked_range(&self, name: &str, key: &[u8], at: ListRef) -> Result<Vec<u8>, StoreError> {
        let damaged = |why: String| StoreError::Damaged {
            key: key_text(key),
            why,
        };
        let bytes = self
            .blobs
            .get_range(name, at.offset, at.len)?
            .ok_or_else(|| {
                damaged(format!(
                    "its list file `{name}` is missing or ends before bytes {}..{}",
                    at.offset,
                    at.offset.saturating_add(at.len)
                ))
            })?;
        if blake3::hash(&bytes).as_bytes() != &at.hash {
            return Err(damaged(format!(
                "its list in file `{name}` (bytes {}..{}) does not match the recorded hash",
                at.offset,
                at.offset + at.len
            )));
        }
        Ok(bytes)
    }

    /// Whether any chunk of `job` stored an artifact (only those jobs need a merge).
    pub fn has_chunk_artifacts(&self, job: JobId) -> Result<bool, StoreError> {
        self.kv.any_under(&job_key(b'a', job))
    }

    /// A finished job's merged artifact, if it has been stored.
    pub fn artifact(&self, job: JobId) -> Result<Option<Vec<u8>>, StoreError> {
        let key = job_key(b'r', job);
        match self.kv.get(&key)? {
            Some(want) => self.checked_blob(&job_blob(job), &key, &want).map(Some),
            None => Ok(None),
        }
    }

    /// The merged artifacts of this store's finished jobs, found by (space, canonical parameters): what a job
    /// run outside the coordinator (`sweep solve`) reads instead of building an input again. The job records
    /// are read once, here; the store is closed when the result is dropped.
    pub fn finished_artifacts(self) -> Result<FinishedArtifacts, StoreError> {
        let jobs = self
            .load()?
            .jobs
            .into_iter()
            .filter(|j| j.artifact_digest.is_some())
            .collect();
        Ok(FinishedArtifacts { store: self, jobs })
    }

    /// Stores a shipped file under its digest, durably: the file first, then its record. Storing it again
    /// is a no-op.
    pub fn put_shipped(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let key = shipped_key(digest);
        if !is_digest(digest) || digest_hex(bytes) != digest {
            return Err(StoreError::Damaged {
                key: key_text(&key),
                why: "the file does not match its digest".into(),
            });
        }
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        self.blobs.put(&shipped_blob(digest), bytes)?;
        self.kv.apply(vec![(key, Some(hash(bytes)))])
    }

    /// Whether a shipped file with this digest is stored.
    pub fn has_shipped(&self, digest: &str) -> Result<bool, StoreError> {
        Ok(is_digest(digest) && self.kv.get(&shipped_key(digest))?.is_some())
    }

    /// A shipped file's bytes, checked against its digest.
    pub fn shipped(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if !is_digest(digest) {
            return Ok(None);
        }
        let key = shipped_key(digest);
        match self.kv.get(&key)? {
            Some(want) => self
                .checked_blob(&shipped_blob(digest), &key, &want)
                .map(Some),
            None => Ok(None),
        }
    }
}

/// See [`Store::finished_artifacts`].
pub struct FinishedArtifacts {
    store: Store,
    jobs: Vec<crate::core::JobRecord>,
}

impl FinishedArtifacts {
    /// The merged artifact of the finished job of `space` with `params`, if stored and its digest checks; a
    /// store that cannot read it answers `None`, and the caller builds the artifact itself.
    pub fn get(&self, space: &str, params: &serde_json::Value) -> Option<Vec<u8>> {
        let rec = self
            .jobs
            .iter()
            .find(|j| j.space == space && &j.params == params)?;
        let bytes = self.store.artifact(rec.id).ok()??;
        (Some(digest_hex(&bytes)) == rec.artifact_digest).then_some(bytes)
    }
}

#[cfg(test)]
mod tests {
    use sweep_space::ChunkOutput;

    use super::*;
    use crate::core::Op;
    use crate::store::blobs::{Blobs, FileBlobs};
    use crate::store::test_support::{reopen, streamed_outputs, temp_store_dir};

    fn artifacts_are_raw_and_stored_once(store: &Store) {
        let with = |a: Vec<u8>| ChunkOutput {
            nodes: 1,
            artifact: a,
            ..Default::default()
        };
        store
            .write(vec![
                Op::Output(4, 0, with(vec![1, 2, 3])),
                Op::Output(4, 1, with(vec![4])),
            ])
            .unwrap();
        let outs = store.outputs(4).unwrap();
        assert_eq!(outs, vec![(0, with(vec![1, 2, 3])), (1, with(vec![4]))]);
        assert_eq!(store.artifact(4).unwrap(), None);
        store
            .write(vec![Op::Artifact(4, std::sync::Arc::new(vec![9, 9]))])
            .unwrap();
        assert_eq!(store.artifact(4).unwrap(), Some(vec![9, 9]));
        // The chunk artifacts are gone; the outputs (nodes, counters) stay.
        assert_eq!(
            store.outputs(4).unwrap(),
            vec![(0, with(vec![])), (1, with(vec![]))]
        );
    }

    #[test]
    fn artifacts_in_memory_and_in_sled() {
        artifacts_are_raw_and_stored_once(&Store::in_memory());
        let dir = std::env::temp_dir().join(format!("sweep-store-art-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        artifacts_are_raw_and_stored_once(&reopen(&dir));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn artifacts_live_in_files_and_damage_is_named() {
        let dir = temp_store_dir("files");
        let with = |a: Vec<u8>| ChunkOutput {
            nodes: 1,
            artifact: a,
            ..Default::default()
        };
        {
            let store = reopen(&dir);
            store
                .write(vec![Op::Output(7, 0, with(vec![5; 1000]))])
                .unwrap();
        }
        let file = dir.join("artifacts").join("a-7-0");
        assert_eq!(std::fs::read(&file).unwrap(), vec![5; 1000]);
        // An unreferenced file (a crash between file and batch) and a temporary file go at start-up.
        std::fs::write(dir.join("artifacts").join("a-7-1"), b"orphan").unwrap();
        std::fs::write(dir.join("artifacts").join(".tmp-r-7"), b"half").unwrap();
        {
            let store = reopen(&dir);
            assert!(!dir.join("artifacts").join("a-7-1").exists());
            assert!(!dir.join("artifacts").join(".tmp-r-7").exists());
            assert_eq!(store.outputs(7).unwrap(), vec![(0, with(vec![5; 1000]))]);
        }
        std::fs::write(&file, vec![6; 1000]).unwrap();
        let err = reopen(&dir).outputs(7).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
        std::fs::remove_file(&file).unwrap();
        let err = reopen(&dir).outputs(7).unwrap_err();
        assert!(err.to_string().contains("`a-7-0` is missing"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A job's lists of solutions are appended to its segment file, never in sled, read back with their
    /// outputs; bytes no batch recorded (an interrupted append) are skipped, segments and list files no
    /// batch refers to are removed at start-up, and a damaged, cut or missing segment is named.
    #[test]
    fn lists_of_solutions_live_in_a_segment_per_job_and_damage_is_named() {
        let dir = temp_store_dir("lists");
        let listed = |n: u64| ChunkOutput {
            nodes: n,
            solutions: vec![format!("a{n}"), "b\tc".into()],
            ..Default::default()
        };
        reopen(&dir)
            .write(vec![Op::Output(8, 2, listed(2))])
            .unwrap();
        let artifacts = dir.join("artifacts");
        let segment = artifacts.join(segment_blob(8));
        assert!(segment.exists());
        assert!(!artifacts.join(list_blob(8, 2)).exists());
        // What a crash leaves: the start of an append no batch recorded, an old-style list file and another
        // job's segment that nothing refers to.
        let mut torn = std::fs::read(&segment).unwrap();
        torn.extend_from_slice(&[LIST_FRAMED, 9, 0]);
        std::fs::write(&segment, &torn).unwrap();
        std::fs::write(artifacts.join(list_blob(8, 3)), b"[\"orphan\"]").unwrap();
        std::fs::write(artifacts.join(segment_blob(5)), b"orphan").unwrap();
        let store = reopen(&dir);
        assert!(!artifacts.join(list_blob(8, 3)).exists());
        assert!(!artifacts.join(segment_blob(5)).exists());
        assert!(segment.exists());
        store.write(vec![Op::Output(8, 3, listed(3))]).unwrap();
        let both = vec![(2, listed(2)), (3, listed(3))];
        assert_eq!(store.outputs(8).unwrap(), both);
        assert_eq!(streamed_outputs(&store, 8, 4), both);
        drop(store);
        let whole = std::fs::read(&segment).unwrap();
        let mut flipped = whole.clone();
        flipped[6] ^= 1;
        std::fs::write(&segment, &flipped).unwrap();
        let err = reopen(&dir).outputs(8).unwrap_err();
        assert!(
            err.to_string().contains("list in file `ls-8` (bytes 0..")
                && err.to_string().contains("does not match"),
            "{err}"
        );
        std::fs::write(&segment, &whole[..whole.len() - 1]).unwrap();
        let err = reopen(&dir).outputs(8).unwrap_err();
        assert!(
            err.to_string().contains("`ls-8` is missing or ends before"),
            "{err}"
        );
        std::fs::remove_file(&segment).unwrap();
        let err = reopen(&dir)
            .for_each_output(8, 4, &mut |_, _| Ok::<(), StoreError>(()))
            .unwrap_err();
        assert!(err.to_string().contains("`ls-8` is missing"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn list_references_round_trip_and_older_ones_are_told_apart() {
        let r = ListRef::of(7, b"some list");
        assert_eq!(ListRef::decode(&r.encode()), Some(r));
        assert_eq!(r.len, 9);
        // An older store's reference is the bare 32-byte hash of a per-chunk file.
        assert_eq!(ListRef::decode(&hash(b"some list")), None);
        let mut other = r.encode();
        other[0] = 2;
        assert_eq!(ListRef::decode(&other), None);
        assert_eq!(ListRef::decode(&r.encode()[..48]), None);
    }

    #[test]
    fn list_files_read_back_in_either_format_and_damage_is_described() {
        let solutions: Vec<String> = vec!["1,2,3".into(), String::new(), "é \"q\"\n,".into()];
        let framed = encode_list(&solutions).unwrap();
        assert_eq!(framed[0], LIST_FRAMED);
        assert_eq!(decode_list(&framed).unwrap(), solutions);
        assert_eq!(decode_list(&[LIST_FRAMED]).unwrap(), Vec::<String>::new());
        // What sweep wrote before lists were framed.
        let json = serde_json::to_vec(&solutions).unwrap();
        assert_eq!(decode_list(&json).unwrap(), solutions);
        let cut = decode_list(&framed[..framed.len() - 1]).unwrap_err();
        assert!(cut.contains("ends inside solution 2"), "{cut}");
        let cut = decode_list(&framed[..3]).unwrap_err();
        assert!(
            cut.contains("ends inside the length of solution 0"),
            "{cut}"
        );
        let mut garbled = encode_list(&["ab".into()]).unwrap();
        garbled[5] = 0xff;
        let err = decode_list(&garbled).unwrap_err();
        assert!(err.contains("solution 0 is not UTF-8"), "{err}");
        assert!(decode_list(b"{}").unwrap_err().contains("does not parse"));
    }

    /// A store written by an older sweep keeps its JSON list files: they are read as they are.
    #[test]
    fn a_list_file_written_as_json_by_an_older_version_is_read() {
        let dir = temp_store_dir("json-list");
        let listed = ChunkOutput {
            nodes: 2,
            solutions: vec!["x,y".into(), "z".into()],
            ..Default::default()
        };
        let store = reopen(&dir);
        store.write(vec![Op::Output(4, 1, listed.clone())]).unwrap();
        let json = serde_json::to_vec(&listed.solutions).unwrap();
        std::fs::write(dir.join("artifacts").join(list_blob(4, 1)), &json).unwrap();
        store
            .kv
            .apply(vec![(chunk_key(b'l', 4, 1), Some(hash(&json)))])
            .unwrap();
        drop(store);
        assert_eq!(reopen(&dir).outputs(4).unwrap(), vec![(1, listed)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_commit_writes_every_list_and_artifact_of_its_part_and_each_reads_back() {
        let dir = temp_store_dir("put-all");
        let listed = |chunk: u64| ChunkOutput {
            nodes: chunk,
            solutions: vec![format!("s{chunk}"), format!("t{chunk}")],
            artifact: vec![chunk as u8; 3],
            ..Default::default()
        };
        reopen(&dir)
            .write((0..5).map(|c| Op::Output(9, c, listed(c))).collect())
            .unwrap();
        let names = FileBlobs::open(dir.join("artifacts"))
            .unwrap()
            .list()
            .unwrap();
        // The five lists in one segment, each artifact a file of its own.
        assert!(names.contains(&segment_blob(9)), "{names:?}");
        for c in 0..5 {
            assert!(!names.contains(&list_blob(9, c)), "{names:?}");
            assert!(names.contains(&chunk_blob(9, c)), "{names:?}");
        }
        assert!(
            !names.iter().any(|n| n.starts_with(TMP_PREFIX)),
            "{names:?}"
        );
        let store = reopen(&dir);
        let read: Vec<(u64, Vec<String>)> = store
            .outputs(9)
            .unwrap()
            .into_iter()
            .map(|(c, o)| (c, o.solutions))
            .collect();
        let want: Vec<(u64, Vec<String>)> = (0..5).map(|c| (c, listed(c).solutions)).collect();
        assert_eq!(read, want);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
