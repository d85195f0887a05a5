//! The store as the state machine of a replicated coordinator: a group commit's parts encoded as one consensus
//! entry ([`encode_entry`]), and [`StoreMachine`], which applies committed entries to a member's own store.
//!
//! Every member applies the same entries in the same order, so every member's store passes through the same
//! states; the leader's core decides, and its outbox becomes the entries. An entry is applied exactly as a
//! single coordinator writes a group commit (each part one atomic batch), with the index of the entry
//! written in the batch of its last part (`m/applied`): after a crash part-way the index is the previous
//! entry's, and the entry is applied again. That is safe because every op writes a whole value (a record, a
//! tally, a block as it is after the op), never an increment; the one append (a list of solutions added to
//! its job's segment file) leaves unreferenced bytes behind, not a wrong answer.
//!
//! Applying does not wait for sled's flush: the entry is durable in the member's consensus log already. After a
//! crash the store holds a prefix of what was applied (sled keeps batches whole and in order) with the index
//! of its last entry, and the log gives the rest again; the log is compacted only up to a snapshot, which a
//! store behind it is restored from.
//!
//! A snapshot is a file in the member's snapshot directory (`snapshot_file`), written by reading the store
//! one key and one piece of a blob at a time; the log keeps its descriptor (length and digest). Installing
//! one empties the store and writes the file's contents in bounded batches, under a mark (`m/restoring`): a
//! store that holds the mark is half-installed, says it applied nothing, and is installed again from the same
//! file. No step holds the store whole in memory, whatever its size.

use sweep_replicate::StateMachine;

use super::snapshot_file::{Descriptor, SnapshotFiles};

use super::error::StoreError;
use super::framing::{take, take_u32, take_u64};
use super::handle::Store;
use super::keys::be_u64;

/// Where a member keeps the index of the last entry applied to its store.
const APPLIED_KEY: &[u8] = b"m/applied";
/// Set while a snapshot is being installed, to the descriptor of its file.
const RESTORING_KEY: &[u8] = b"m/restoring";
/// The store's format marker, which installing a snapshot leaves in place.
const FORMAT_KEY: &[u8] = b"m/format";

const SNAPSHOT_VERSION: u8 = 1;

fn damaged(why: impl Into<String>) -> StoreError {
    StoreError::Damaged {
        key: "a replicated snapshot".into(),
        why: why.into(),
    }
}

/// A member's store, applying committed entries. A store that cannot apply an entry (damaged, or its disk
/// failed) must not apply later ones over the gap: it keeps the failure, applies nothing more, and says so
/// ([`StoreMachine::failure`]); the member should stop and be replaced.
pub struct StoreMachine {
    store: std::sync::Arc<Store>,
    files: SnapshotFiles,
    applied: u64,
    failure: Option<String>,
}

impl StoreMachine {
    /// The state machine over `store`, resuming after the last entry it applied, with its snapshots in
    /// `files`.
    pub fn open(
        store: std::sync::Arc<Store>,
        files: SnapshotFiles,
    ) -> Result<StoreMachine, StoreError> {
        let applied = read_applied(&store)?;
        Ok(StoreMachine {
            store,
            files,
            applied,
            failure: None,
        })
    }

    pub fn store(&self) -> &std::sync::Arc<Store> {
        &self.store
    }

    pub fn files(&self) -> &SnapshotFiles {
        &self.files
    }

    /// Why this member stopped applying entries, once it has.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    fn try_apply(&self, index: u64, data: &[u8]) -> Result<(), StoreError> {
        // An entry with no data is raft's own (the empty entry a new leader commits): only the index moves.
        let parts = if data.is_empty() {
            Vec::new()
        } else {
            self.store.proposed().decode(data)?
        };
        let applied = (APPLIED_KEY.to_vec(), Some(index.to_be_bytes().to_vec()));
        self.store
            .write_parts_then(parts, vec![applied], super::batches::Durability::Lazy)
    }

    /// Makes the store exactly the snapshot file's, under the restoring mark.
    fn try_restore_file(&mut self, d: &Descriptor) -> Result<(), StoreError> {
        let _writer = self.store.writer.lock().unwrap_or_else(|p| p.into_inner());
        self.store.kv.apply(vec![
            (RESTORING_KEY.to_vec(), Some(d.encode())),
            (APPLIED_KEY.to_vec(), None),
        ])?;
        self.applied = 0;
        self.files
            .load_into(d, &self.store, &[FORMAT_KEY, RESTORING_KEY])?;
        // Durable with everything before it.
        self.store.kv.apply(vec![(RESTORING_KEY.to_vec(), None)])?;
        self.applied = read_applied(&self.store)?;
        Ok(())
    }

    /// Makes the store exactly a snapshot carried whole (the format before snapshot files): its keys and
    /// files written, every other key and file removed.
    fn try_restore(&mut self, data: &[u8]) -> Result<(), StoreError> {
        let mut rest = data;
        match take(&mut rest, 1) {
            Some([SNAPSHOT_VERSION]) => {}
            Some([v]) => return Err(damaged(format!("unknown snapshot version {v}"))),
            // The bytes a group is bootstrapped with when it starts empty.
            _ => return self.try_clear(),
        }
        let n = take_u64(&mut rest).ok_or_else(|| damaged("truncated snapshot"))?;
        let mut pairs = std::collections::BTreeMap::new();
        for _ in 0..n {
            let mut field = || -> Result<Vec<u8>, StoreError> {
                let len = take_u32(&mut rest).ok_or_else(|| damaged("truncated snapshot key"))?;
                Ok(take(&mut rest, len as usize)
                    .ok_or_else(|| damaged("truncated snapshot value"))?
                    .to_vec())
            };
            let k = field()?;
            let v = field()?;
            pairs.insert(k, v);
        }
        let files = take_u64(&mut rest).ok_or_else(|| damaged("truncated snapshot files"))?;
        let mut blobs = std::collections::BTreeMap::new();
        for _ in 0..files {
            let len = take_u32(&mut rest).ok_or_else(|| damaged("truncated file name"))?;
            let name =
                take(&mut rest, len as usize).ok_or_else(|| damaged("truncated file name"))?;
            let name =
                String::from_utf8(name.to_vec()).map_err(|_| damaged("a file name not UTF-8"))?;
            let len = take_u64(&mut rest).ok_or_else(|| damaged("truncated file length"))?;
            let bytes = take(&mut rest, len as usize).ok_or_else(|| damaged("truncated file"))?;
            blobs.insert(name, bytes.to_vec());
        }
        let _writer = self.store.writer.lock().unwrap_or_else(|p| p.into_inner());
        // Files first: a key that names one (by its hash) never lands before the file.
        for (name, bytes) in &blobs {
            self.store.blobs.put(name, bytes)?;
        }
        let mut writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for (k, _) in self.store.kv.scan(b"")? {
            if !pairs.contains_key(&k) {
                writes.push((k, None));
            }
        }
        writes.extend(pairs.into_iter().map(|(k, v)| (k, Some(v))));
        // One batch: a crash part-way leaves the old store, and the snapshot is installed again.
        self.store.kv.apply(writes)?;
        for name in self.store.blobs.list()? {
            if !blobs.contains_key(&name) {
                self.store.blobs.remove(&name)?;
            }
        }
        self.applied = read_applied(&self.store)?;
        Ok(())
    }

    fn try_clear(&mut self) -> Result<(), StoreError> {
        let _writer = self.store.writer.lock().unwrap_or_else(|p| p.into_inner());
        let writes = self
            .store
            .kv
            .scan(b"")?
            .into_iter()
            .filter(|(k, _)| k.as_slice() != b"m/format")
            .map(|(k, _)| (k, None))
            .collect();
        self.store.kv.apply(writes)?;
        for name in self.store.blobs.list()? {
            self.store.blobs.remove(&name)?;
        }
        self.applied = 0;
        Ok(())
    }

    fn fail(&mut self, what: &str, e: StoreError) {
        if self.failure.is_none() {
            tracing::error!(error = %e, "{what}; this member applies nothing more");
            self.failure = Some(format!("{what}: {e}"));
        }
    }
}

/// What the store has applied: nothing while it is half-way through installing a snapshot.
/// `store` written to a snapshot file in `files`; its descriptor, or `None` (said why) when that failed.
fn write_snapshot(store: &Store, files: &SnapshotFiles) -> Option<Vec<u8>> {
    let _writer = store.writer.lock().unwrap_or_else(|p| p.into_inner());
    match files.write(store) {
        Ok(d) => Some(d.encode()),
        Err(e) => {
            tracing::error!(error = %e, "writing a snapshot of the store failed");
            None
        }
    }
}

fn read_applied(store: &Store) -> Result<u64, StoreError> {
    if store.kv.get(RESTORING_KEY)?.is_some() {
        return Ok(0);
    }
    match store.kv.get(APPLIED_KEY)? {
        Some(v) => be_u64(APPLIED_KEY, &v),
        None => Ok(0),
    }
}

impl StateMachine for StoreMachine {
    fn apply(&mut self, index: u64, data: &[u8]) {
        if self.failure.is_some() || index <= self.applied {
            return;
        }
        match self.try_apply(index, data) {
            Ok(()) => self.applied = index,
            Err(e) => self.fail(&format!("applying entry {index} failed"), e),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        // A snapshot that cannot be written is an empty one, which no member installs over a store (see
        // `restore`), rather than a half one. The node takes `snapshot_job` instead, which can say it failed.
        write_snapshot(&self.store, &self.files).unwrap_or_default()
    }

    fn snapshot_job(&self) -> Option<sweep_replicate::SnapshotJob> {
        // Writing a large store takes seconds: off the node's thread, the member keeps its leadership
        // (heartbeats, votes) meanwhile, and only applying waits.
        let (store, files) = (self.store.clone(), self.files.clone());
        Some(Box::new(move || write_snapshot(&store, &files)))
    }

    fn restore(&mut self, data: &[u8]) {
        if data.is_empty() && self.applied > 0 {
            return;
        }
        let restored = match Descriptor::decode(data) {
            Some(d) => self.try_restore_file(&d),
            None => self.try_restore(data),
        };
        if let Err(e) = restored {
            self.fail("installing a snapshot failed", e);
        }
    }

    fn has_snapshot(&self, data: &[u8]) -> bool {
        Descriptor::decode(data).is_none_or(|d| self.files.find(&d).is_some())
    }

    fn snapshot_stored(&mut self, data: &[u8]) {
        if let Some(d) = Descriptor::decode(data) {
            if let Err(e) = self.files.keep_only(&d) {
                tracing::warn!(error = %e, "removing older snapshot files failed");
            }
        }
    }

    fn applied(&self) -> u64 {
        self.applied
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::core::{IdentityRecord, JobRecord, Op};
    use crate::limits::Usage;
    use crate::scheduler::{ChunkRecord, Vote};
    use crate::store::test_support::{done_record, record};
    use crate::store::{decode_entry, encode_entry};
    use sweep_space::{ChunkOutput, Tally};

    /// A group commit with every kind of op, artifacts included, split in two parts.
    fn commit(first: u64) -> Vec<Vec<Op>> {
        let output = |chunk: u64| ChunkOutput {
            nodes: chunk + 1,
            solutions: vec![format!("{chunk},1")],
            artifact: vec![7; 3],
            ..Default::default()
        };
        let out = output(first);
        // The tally of every commit so far (chunks 0, 10, ..., `first`), as the core would write it.
        let mut tally = Tally::default();
        for chunk in (0..=first).step_by(10) {
            tally.add(&output(chunk));
        }
        vec![
            vec![
                Op::job(JobRecord {
                    n_chunks: 100,
                    ..record(1)
                }),
                Op::Chunk(1, first + 1, ChunkRecord::Pending { attempts: 1 }),
                Op::Meta("next_lease", first + 9),
                Op::Checkpoint(1, first + 2, Some("state".into())),
                Op::Votes(
                    1,
                    first + 3,
                    vec![Vote {
                        worker: "w".into(),
                        digest: "d".into(),
                    }],
                ),
            ],
            vec![
                Op::Chunk(1, first, done_record(first)),
                Op::Output(1, first, out),
                Op::Tally(1, tally),
                Op::Usage(1, Usage::default()),
                Op::Identity(IdentityRecord {
                    identity: "alice".into(),
                    share: Some(2.0),
                    decayed_thread_ms: 5.0,
                    at_ms: 9,
                }),
                Op::Artifact(2, std::sync::Arc::new(vec![1, 2, 3, 4])),
            ],
        ]
    }

    /// A state machine over `store`, with a snapshot directory of its own under `dir`.
    /// A machine over a new in-memory store that has applied `commit(c)` for each of `commits`, as entries 1,
    /// 2, ...: the store and the machine.
    fn with_commits(
        dir: &tempfile::TempDir,
        commits: &[u64],
    ) -> (std::sync::Arc<Store>, StoreMachine) {
        let store = std::sync::Arc::new(Store::in_memory());
        let mut m = machine(&store, dir);
        for (index, &c) in (1..).zip(commits) {
            m.apply(index, &encode_entry(&commit(c)).unwrap());
        }
        (store, m)
    }

    fn machine(store: &std::sync::Arc<Store>, dir: &tempfile::TempDir) -> StoreMachine {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let files = SnapshotFiles::open(dir.path().join(format!("snapshots-{n}"))).unwrap();
        StoreMachine::open(store.clone(), files).unwrap()
    }

    /// Every key-value pair and every file (name, bytes) of a store, for comparing two.
    type Contents = (crate::store::Pairs, Vec<(String, Vec<u8>)>);

    fn contents(store: &Store) -> Contents {
        let pairs = store.kv.scan(b"").unwrap();
        let mut names = store.blobs.list().unwrap();
        names.sort();
        let files = names
            .into_iter()
            .map(|n| {
                let b = store.blobs.get(&n).unwrap().unwrap();
                (n, b)
            })
            .collect();
        (pairs, files)
    }

    #[test]
    fn an_entry_carries_every_op_and_damage_is_named() {
        let parts = commit(0);
        let bytes = encode_entry(&parts).unwrap();
        let back = decode_entry(&bytes).unwrap();
        assert_eq!(format!("{back:?}"), format!("{parts:?}"));
        for bad in [
            vec![],
            vec![9],
            bytes[..bytes.len() - 1].to_vec(),
            bytes[..20].to_vec(),
        ] {
            let e = decode_entry(&bad).unwrap_err().to_string();
            assert!(e.contains("a replicated entry"), "{e}");
        }
        let mut forged = encode_entry(&[vec![Op::Meta("next_job", 1)]]).unwrap();
        let at = forged.windows(8).position(|w| w == b"next_job").unwrap();
        forged[at + 7] = b'c';
        let e = decode_entry(&forged).unwrap_err().to_string();
        assert!(e.contains("unknown counter `next_joc`"), "{e}");
    }

    /// Members applying the same entries end with the same store, whatever they replay: an entry applied
    /// again (a crash before its index was written) or a second time (a restart replaying the log) changes
    /// nothing, and the store opens as a coordinator's.
    #[test]
    fn members_applying_the_same_entries_hold_the_same_store() {
        let dir = tempfile::tempdir().unwrap();
        let entries: Vec<Vec<u8>> = (0..4)
            .map(|i| encode_entry(&commit(i * 10)).unwrap())
            .collect();
        let stores: Vec<std::sync::Arc<Store>> = (0..3)
            .map(|_| std::sync::Arc::new(Store::in_memory()))
            .collect();
        let mut machines: Vec<StoreMachine> = stores.iter().map(|s| machine(s, &dir)).collect();
        for (i, e) in entries.iter().enumerate() {
            let index = i as u64 + 2;
            machines[0].apply(index, e);
            machines[1].apply(index, e);
            // The third replays each entry (and an empty one of raft's) as a restart would.
            machines[2].apply(index, e);
            machines[2].apply(index, e);
        }
        machines[2].apply(6, &[]);
        machines[0].apply(6, &[]);
        machines[1].apply(6, &[]);
        // A crash after an entry's parts but before its index: the index is rewound, the entry applied again.
        stores[1]
            .kv
            .apply(vec![(
                APPLIED_KEY.to_vec(),
                Some(3u64.to_be_bytes().to_vec()),
            )])
            .unwrap();
        let mut again = machine(&stores[1], &dir);
        assert_eq!(again.applied(), 3);
        for (i, e) in entries.iter().enumerate().skip(2) {
            again.apply(i as u64 + 2, e);
        }
        again.apply(6, &[]);
        assert!(machines
            .iter()
            .all(|m| m.failure().is_none() && m.applied() == 6));
        let want = contents(&stores[0]);
        assert_eq!(contents(&stores[2]), want);
        // Entries applied again appended their lists again: the same answers, other offsets in the segment
        // file (`l/` keys), every other key the same.
        let not_lists = |pairs: Vec<(Vec<u8>, Vec<u8>)>| -> Vec<(Vec<u8>, Vec<u8>)> {
            pairs
                .into_iter()
                .filter(|(k, _)| !k.starts_with(b"l/"))
                .collect()
        };
        assert_eq!(not_lists(contents(&stores[1]).0), not_lists(want.0.clone()));
        assert_eq!(stores[1].outputs(1).unwrap(), stores[0].outputs(1).unwrap());
        let snap = stores[1].load().unwrap();
        assert_eq!(snap.done_list(), vec![(1, 0), (1, 10), (1, 20), (1, 30)]);
        assert_eq!(snap.tallies[&1].chunks, 4);
        let report = crate::fsck::check(&stores[2], true).unwrap();
        assert!(report.is_clean(), "{:?}", report.problems);
    }

    /// The leader applies the entries it proposed from the parts it kept, not by decoding them, and ends with
    /// the store a follower decoding the same bytes ends with; entries kept past the bound, or never kept,
    /// are decoded.
    #[test]
    fn a_leader_applies_its_own_entries_from_the_parts_it_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (leader, follower) = (
            std::sync::Arc::new(Store::in_memory()),
            std::sync::Arc::new(Store::in_memory()),
        );
        let mut machines = [machine(&leader, &dir), machine(&follower, &dir)];
        // More proposals than are kept: the first ones are decoded when they are applied.
        let entries: Vec<Vec<u8>> = (0..70)
            .map(|i| leader.proposed().encode(commit(i)).unwrap())
            .collect();
        for (i, e) in entries.iter().enumerate() {
            for m in &mut machines {
                m.apply(i as u64 + 2, e);
            }
        }
        assert!(machines
            .iter()
            .all(|m| m.failure().is_none() && m.applied() == 71));
        assert_eq!(contents(&leader), contents(&follower));
        // A damaged entry is refused even with parts kept for other bytes.
        let kept = leader.proposed().encode(commit(80)).unwrap();
        assert!(leader.proposed().decode(&kept[..kept.len() - 1]).is_err());
        assert!(leader.proposed().decode(&kept).is_ok());
    }

    /// An entry leaves out ops a later op of the same part overwrites, and applying it gives exactly the store
    /// that writing the parts directly (as a single coordinator does) gives.
    #[test]
    fn an_entry_keeps_only_the_last_write_of_a_key_and_the_same_store_results() {
        let dir = tempfile::tempdir().unwrap();
        let mut tally = Tally::default();
        let mut part = vec![Op::job(JobRecord {
            n_chunks: 100,
            ..record(1)
        })];
        for chunk in 0..20u64 {
            part.push(Op::Chunk(
                1,
                chunk,
                ChunkRecord::Leased {
                    lease: chunk + 1,
                    worker: "w".into(),
                    deadline: 9,
                    attempts: 0,
                },
            ));
            part.push(Op::Meta("next_lease", chunk + 2));
        }
        for chunk in 0..15u64 {
            let out = ChunkOutput {
                nodes: chunk,
                solutions: vec![format!("{chunk}")],
                ..Default::default()
            };
            tally.add(&out);
            part.push(Op::Chunk(1, chunk, done_record(chunk)));
            part.push(Op::Output(1, chunk, out));
            part.push(Op::Tally(1, tally.clone()));
        }
        let parts = vec![part.clone(), vec![Op::Tally(1, tally.clone())]];
        let decoded = decode_entry(&encode_entry(&parts).unwrap()).unwrap();
        let count = |ops: &[Op], f: fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
        // 15 done and 5 still leased chunks, one counter, one tally, every output.
        assert_eq!(count(&decoded[0], |o| matches!(o, Op::Chunk(..))), 20);
        assert_eq!(count(&decoded[0], |o| matches!(o, Op::Meta(..))), 1);
        assert_eq!(count(&decoded[0], |o| matches!(o, Op::Tally(..))), 1);
        assert_eq!(count(&decoded[0], |o| matches!(o, Op::Output(..))), 15);
        assert_eq!(decoded[1].len(), 1, "another part keeps its own last write");
        let direct = Store::in_memory();
        direct.write_parts(parts.clone()).unwrap();
        let via_entry = std::sync::Arc::new(Store::in_memory());
        let mut m = machine(&via_entry, &dir);
        m.apply(1, &encode_entry(&parts).unwrap());
        let without_index = |store: &Store| -> Contents {
            let (pairs, files) = contents(store);
            let pairs = pairs
                .into_iter()
                .filter(|(k, _)| k != APPLIED_KEY)
                .collect();
            (pairs, files)
        };
        assert_eq!(without_index(&via_entry), without_index(&direct));
    }

    /// Every prefix of an entry, and the entry with any one byte changed, decodes to an error or to ops, never
    /// a panic (an entry comes from the network); a version 1 entry (JSON only) still reads.
    #[test]
    fn damaged_entries_are_errors_and_version_1_still_reads() {
        let bytes = encode_entry(&commit(0)).unwrap();
        for end in 0..bytes.len() {
            assert!(
                decode_entry(&bytes[..end]).is_err(),
                "prefix of {end} bytes"
            );
        }
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[at] ^= flip;
                let _ = decode_entry(&b);
            }
        }
        let v1 = br#""#;
        assert!(decode_entry(v1).is_err());
        let json =
            br#"[[{"Meta":["next_job",7]},{"Chunk":[1,2,{"state":"pending","attempts":1}]}]]"#;
        let mut v1 = vec![1u8];
        v1.extend_from_slice(&(json.len() as u32).to_le_bytes());
        v1.extend_from_slice(json);
        let parts = decode_entry(&v1).unwrap();
        assert_eq!(
            format!("{parts:?}"),
            format!(
                "{:?}",
                vec![vec![
                    Op::Meta("next_job", 7),
                    Op::Chunk(1, 2, ChunkRecord::Pending { attempts: 1 })
                ]]
            )
        );
    }

    #[test]
    fn a_damaged_entry_stops_the_member_before_any_gap() {
        let dir = tempfile::tempdir().unwrap();
        let (store, mut m) = with_commits(&dir, &[0]);
        m.apply(2, b"\x01garbage");
        assert!(m.failure().unwrap().contains("applying entry 2 failed"));
        m.apply(3, &encode_entry(&commit(10)).unwrap());
        assert_eq!(m.applied(), 1);
        assert_eq!(store.load().unwrap().done_list(), vec![(1, 0)]);
    }

    /// A snapshot is a file: installed on another member (once its file arrived), it makes that store the
    /// source's, whatever it held before; older snapshot files go once a newer one is stored.
    #[test]
    fn a_snapshot_file_makes_a_store_the_same_as_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let (source, mut m) = with_commits(&dir, &[0, 10, 20]);
        let first = m.snapshot();
        m.apply(4, &encode_entry(&commit(30)).unwrap());
        let snap = m.snapshot();
        let d = Descriptor::decode(&snap).expect("a file descriptor");
        assert_ne!(Descriptor::decode(&first), Some(d));
        m.snapshot_stored(&snap);
        let names: Vec<_> = std::fs::read_dir(m.files().dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![format!("{}.snap", hex::encode(d.digest))]);

        let (target, mut t) = with_commits(&dir, &[50]);
        assert!(!t.has_snapshot(&snap), "its file has not arrived");
        assert!(t.has_snapshot(&[]), "a snapshot that is no file needs none");
        receive(&t, &m, &d);
        assert!(t.has_snapshot(&snap));
        t.restore(&snap);
        assert!(t.failure().is_none(), "{:?}", t.failure());
        assert_eq!(t.applied(), 4);
        assert_eq!(contents(&target), contents(&source));
        assert!(
            t.files().find(&d).unwrap().extension().unwrap() == "snap",
            "an installed file is kept as the stored snapshot"
        );

        // A crash half-way through installing leaves the mark: the store says it applied nothing, and the
        // snapshot is installed again from the same file.
        target
            .kv
            .apply(vec![
                (RESTORING_KEY.to_vec(), Some(snap.clone())),
                (b"j/stray".to_vec(), Some(b"x".to_vec())),
            ])
            .unwrap();
        let mut again = StoreMachine::open(target.clone(), t.files().clone()).unwrap();
        assert_eq!(again.applied(), 0);
        again.restore(&snap);
        assert_eq!(again.applied(), 4);
        assert_eq!(contents(&target), contents(&source));

        // A file the disk changed is refused, naming why, and nothing more is applied.
        let path = t.files().find(&d).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        again.restore(&snap);
        let why = again.failure().unwrap();
        assert!(why.contains("does not match its digest"), "{why}");
    }

    /// The transport's side: what arrives is kept only whole and matching its digest, and leaves nothing
    /// behind otherwise.
    #[test]
    fn a_received_file_is_kept_only_whole_and_matching() {
        let dir = tempfile::tempdir().unwrap();
        let (_source, m) = with_commits(&dir, &[0]);
        let d = Descriptor::decode(&m.snapshot()).unwrap();
        let bytes = std::fs::read(m.files().find(&d).unwrap()).unwrap();
        let files = SnapshotFiles::open(dir.path().join("receiver")).unwrap();
        let short = files.receive(d).unwrap();
        drop(short);
        let mut cut = files.receive(d).unwrap();
        cut.write(&bytes[..bytes.len() - 1]).unwrap();
        assert!(cut
            .finish()
            .unwrap_err()
            .to_string()
            .contains("do not match"));
        let mut long = files.receive(d).unwrap();
        long.write(&bytes).unwrap();
        assert!(long.write(b"x").is_err(), "more than the descriptor says");
        drop(long);
        let mut changed = files.receive(d).unwrap();
        let mut other = bytes.clone();
        other[10] ^= 1;
        changed.write(&other).unwrap();
        assert!(changed.finish().is_err());
        assert_eq!(
            std::fs::read_dir(files.dir()).unwrap().count(),
            0,
            "nothing left behind"
        );
        assert!(files.find(&d).is_none());
        let mut whole = files.receive(d).unwrap();
        for piece in bytes.chunks(7) {
            whole.write(piece).unwrap();
        }
        whole.finish().unwrap();
        assert_eq!(files.verify(&d).unwrap(), files.find(&d).unwrap());
        assert!(Descriptor::decode(b"\x02short").is_none());
        assert!(Descriptor::decode(&[1; 41]).is_none());
    }

    /// Copies the file of `d` from `from`'s snapshot directory into `to`'s, as a push between members does.
    fn receive(to: &StoreMachine, from: &StoreMachine, d: &Descriptor) {
        let bytes = std::fs::read(from.files().find(d).unwrap()).unwrap();
        let mut incoming = to.files().receive(*d).unwrap();
        incoming.write(&bytes).unwrap();
        incoming.finish().unwrap();
    }

    /// A snapshot carried whole (the format before snapshot files) still installs, and an empty one (a
    /// group's start) empties a store that applied nothing but is ignored by one that did.
    #[test]
    fn a_snapshot_carried_whole_still_installs() {
        let dir = tempfile::tempdir().unwrap();
        let (source, _m) = with_commits(&dir, &[0, 10, 20]);
        let (pairs, files) = contents(&source);
        let mut inline = vec![SNAPSHOT_VERSION];
        inline.extend_from_slice(&(pairs.len() as u64).to_le_bytes());
        for (k, v) in &pairs {
            for field in [k, v] {
                inline.extend_from_slice(&(field.len() as u32).to_le_bytes());
                inline.extend_from_slice(field);
            }
        }
        inline.extend_from_slice(&(files.len() as u64).to_le_bytes());
        for (name, bytes) in &files {
            inline.extend_from_slice(&(name.len() as u32).to_le_bytes());
            inline.extend_from_slice(name.as_bytes());
            inline.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            inline.extend_from_slice(bytes);
        }
        let (target, mut t) = with_commits(&dir, &[50]);
        t.restore(&inline);
        assert!(t.failure().is_none());
        assert_eq!(t.applied(), 3);
        assert_eq!(contents(&target), contents(&source));
        t.restore(b"\x07");
        assert!(t.failure().unwrap().contains("unknown snapshot version 7"));
        let (_fresh, mut f) = with_commits(&dir, &[0]);
        // A member that applied entries ignores the empty bootstrap snapshot.
        f.restore(&[]);
        assert_eq!(f.applied(), 1);
    }
}
