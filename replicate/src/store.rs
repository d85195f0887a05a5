//! `LogStore`: raft's log, hard state, membership and latest snapshot in one sled tree.
//!
//! Keys (one tree per member, nothing else in it):
//! - `e` + index (8 bytes big-endian, so that sled's order is the log's order) → an `Entry`;
//! - `hs` → `HardState` (term, vote, commit); `cs` → `ConfState` (the membership as of the applied index);
//! - `mb` → the members' addresses as of the applied index (`Members`), written with `cs`;
//! - `sm` → the latest snapshot's `SnapshotMetadata`, `sd` → that snapshot's bytes (framed: the members
//!   record, then the state machine's bytes; see `members`);
//! - `tr` → index and term of the last entry no longer in the log (compacted or covered by an installed
//!   snapshot): raft needs that term to match the entry before the first one it sends.
//!
//! Invariants: the log is `tr.index + 1 ..= last_index` without gaps; the stored snapshot's index is at least
//! `tr.index` (compaction never passes it, so a follower that needs a compacted entry can always be sent the
//! snapshot instead); every write that raft relies on is one atomic sled batch, and `flush` makes it durable.

use std::ops::Range;

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

use crate::error::ReplicateError;
use crate::members::{frame, unframe, Members};

const HARD_STATE: &[u8] = b"hs";
const CONF_STATE: &[u8] = b"cs";
const MEMBERS: &[u8] = b"mb";
const SNAPSHOT_META: &[u8] = b"sm";
const SNAPSHOT_DATA: &[u8] = b"sd";
const TRUNCATED: &[u8] = b"tr";
const ENTRY_PREFIX: u8 = b'e';

fn entry_key(index: u64) -> [u8; 9] {
    let mut key = [0u8; 9];
    key[0] = ENTRY_PREFIX;
    key[1..].copy_from_slice(&index.to_be_bytes());
    key
}

fn entry_keys(indices: Range<u64>) -> Range<[u8; 9]> {
    entry_key(indices.start)..entry_key(indices.end)
}

fn decode<M: protobuf::Message>(what: &str, bytes: &[u8]) -> Result<M, ReplicateError> {
    M::parse_from_bytes(bytes).map_err(|e| ReplicateError::Inconsistent(format!("{what}: {e}")))
}

fn encode(m: &impl protobuf::Message) -> Result<Vec<u8>, ReplicateError> {
    m.write_to_bytes().map_err(ReplicateError::Encode)
}

/// A sled error or a corrupt record, as raft's storage error (raft then stops taking part until reopened).
fn to_raft(e: impl std::fmt::Display) -> raft::Error {
    raft::Error::Store(StorageError::Other(e.to_string().into()))
}

/// raft's `Storage` over a sled tree; see the module documentation for its layout and invariants.
///
/// Reads of the small records are served from copies kept here (the tree is only ever written through this
/// value); entries are read from the tree.
pub struct LogStore {
    tree: sled::Tree,
    hard_state: HardState,
    conf_state: ConfState,
    members: Members,
    snapshot_meta: SnapshotMetadata,
    /// Index and term of the last entry that is no longer in the log.
    truncated: (u64, u64),
    last_index: u64,
}

impl LogStore {
    /// Opens the log kept in `tree` (empty for a new member).
    pub fn open(tree: sled::Tree) -> Result<Self, ReplicateError> {
        let hard_state = match tree.get(HARD_STATE)? {
            Some(v) => decode("hard state", &v)?,
            None => HardState::default(),
        };
        let conf_state = match tree.get(CONF_STATE)? {
            Some(v) => decode("conf state", &v)?,
            None => ConfState::default(),
        };
        let members = match tree.get(MEMBERS)? {
            Some(v) => Members::decode(&v)?,
            None => Members::default(),
        };
        let snapshot_meta = match tree.get(SNAPSHOT_META)? {
            Some(v) => decode("snapshot metadata", &v)?,
            None => SnapshotMetadata::default(),
        };
        let truncated = match tree.get(TRUNCATED)? {
            Some(v) if v.len() == 16 => {
                let (i, t) = v.split_at(8);
                (be_u64(i), be_u64(t))
            }
            Some(v) => {
                return Err(ReplicateError::Inconsistent(format!(
                    "truncation record of {} bytes",
                    v.len()
                )))
            }
            None => (0, 0),
        };
        let last_index = match tree.range(entry_keys(0..u64::MAX)).next_back() {
            Some(kv) => be_u64(&kv?.0[1..]),
            None => truncated.0,
        };
        if last_index < truncated.0 {
            return Err(ReplicateError::Inconsistent(format!(
                "last entry {last_index} before the truncation point {}",
                truncated.0
            )));
        }
        Ok(LogStore {
            tree,
            hard_state,
            conf_state,
            members,
            snapshot_meta,
            truncated,
            last_index,
        })
    }

    /// Makes an empty store the first state of a founding member: a snapshot at index 1 holding `voters` and
    /// the state machine's initial bytes. Every founding member starts from this same snapshot, and a member
    /// added later starts empty, so it always catches up by a snapshot first (raft's rule for new members).
    /// Returns false, changing nothing, if the store is already initialized (a restart). The members have no
    /// addresses: for a group whose transport needs none (see `bootstrap_members`).
    pub fn bootstrap(&mut self, voters: &[u64], state: Vec<u8>) -> Result<bool, ReplicateError> {
        let members = Members::new(voters.iter().map(|&id| (id, String::new())).collect());
        self.bootstrap_members(&members, state)
    }

    /// `bootstrap` with each founding member's address.
    pub fn bootstrap_members(
        &mut self,
        members: &Members,
        state: Vec<u8>,
    ) -> Result<bool, ReplicateError> {
        if self.is_initialized() {
            return Ok(false);
        }
        if members.addresses.is_empty() {
            return Err(ReplicateError::Inconsistent(
                "bootstrap without voters".into(),
            ));
        }
        let mut snapshot = Snapshot {
            data: frame(members, &state).into(),
            ..Default::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = 1;
        meta.term = 1;
        meta.mut_conf_state().voters = members.addresses.keys().copied().collect();
        self.apply_snapshot(&snapshot)?;
        Ok(true)
    }

    /// Whether this store holds a membership (founding members after `bootstrap`, others after their first
    /// snapshot).
    pub fn is_initialized(&self) -> bool {
        self.conf_state != ConfState::default() || self.snapshot_meta.index > 0
    }

    /// Appends `entries` (consecutive, starting at most one past the last index and not before the first),
    /// replacing any entries from the first new index on, and stores `hard_state` if given; one atomic batch,
    /// not yet flushed.
    pub fn append(
        &mut self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
    ) -> Result<(), ReplicateError> {
        let mut batch = sled::Batch::default();
        let mut last_index = self.last_index;
        if let Some(first) = entries.first() {
            if first.index <= self.truncated.0 || first.index > self.last_index + 1 {
                return Err(ReplicateError::Inconsistent(format!(
                    "append at {} to a log of {}..={}",
                    first.index,
                    self.truncated.0 + 1,
                    self.last_index
                )));
            }
            for (i, e) in entries.iter().enumerate() {
                if e.index != first.index + i as u64 {
                    return Err(ReplicateError::Inconsistent(format!(
                        "entries not consecutive at {}",
                        e.index
                    )));
                }
                batch.insert(&entry_key(e.index), encode(e)?);
            }
            last_index = first.index + entries.len() as u64 - 1;
            // A leader's log overrides ours from the first new index on: what followed is discarded.
            for index in last_index + 1..=self.last_index {
                batch.remove(&entry_key(index));
            }
        }
        if let Some(hs) = hard_state {
            batch.insert(HARD_STATE, encode(hs)?);
        }
        self.tree.apply_batch(batch)?;
        self.last_index = last_index;
        if let Some(hs) = hard_state {
            self.hard_state = hs.clone();
        }
        Ok(())
    }

    /// Records a new commit index (not flushed: a lost commit index is learned again from the leader).
    pub fn set_commit(&mut self, commit: u64) -> Result<(), ReplicateError> {
        let mut hs = self.hard_state.clone();
        hs.commit = commit;
        self.tree.insert(HARD_STATE, encode(&hs)?)?;
        self.hard_state = hs;
        Ok(())
    }

    /// Records the membership as of the applied index (not flushed).
    pub fn set_conf_state(&mut self, cs: &ConfState) -> Result<(), ReplicateError> {
        self.tree.insert(CONF_STATE, encode(cs)?)?;
        self.conf_state = cs.clone();
        Ok(())
    }

    /// Records the membership and the members' addresses as of the applied index, in one batch (not flushed).
    pub fn set_membership(
        &mut self,
        cs: &ConfState,
        members: &Members,
    ) -> Result<(), ReplicateError> {
        let mut batch = sled::Batch::default();
        batch.insert(CONF_STATE, encode(cs)?);
        batch.insert(MEMBERS, members.encode());
        self.tree.apply_batch(batch)?;
        self.conf_state = cs.clone();
        self.members = members.clone();
        Ok(())
    }

    /// Installs a snapshot received from the leader (or the bootstrap one): it replaces the whole log, the
    /// membership and the stored snapshot, and commits up to its index; flushed before it returns.
    pub fn apply_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), ReplicateError> {
        let meta = snapshot.get_metadata();
        if meta.index < self.hard_state.commit {
            return Err(ReplicateError::Inconsistent(format!(
                "snapshot at {} is behind the commit index {}",
                meta.index, self.hard_state.commit
            )));
        }
        // Bare state bytes (a group bootstrapped without addresses) have no members record: the ids are kept,
        // without addresses.
        let members = match unframe(&snapshot.data)?.0 {
            Some(m) => m,
            None => Members::new(
                meta.get_conf_state()
                    .voters
                    .iter()
                    .map(|&id| (id, String::new()))
                    .collect(),
            ),
        };
        let mut hs = self.hard_state.clone();
        hs.term = hs.term.max(meta.term);
        hs.commit = meta.index;
        let mut batch = sled::Batch::default();
        for key in self.tree.range(entry_keys(0..u64::MAX)).keys() {
            batch.remove(key?);
        }
        batch.insert(HARD_STATE, encode(&hs)?);
        batch.insert(CONF_STATE, encode(meta.get_conf_state())?);
        batch.insert(MEMBERS, members.encode());
        batch.insert(SNAPSHOT_META, encode(meta)?);
        batch.insert(SNAPSHOT_DATA, &snapshot.data[..]);
        batch.insert(
            TRUNCATED,
            truncation_record(meta.index, meta.term).as_slice(),
        );
        self.tree.apply_batch(batch)?;
        self.flush()?;
        self.hard_state = hs;
        self.conf_state = meta.get_conf_state().clone();
        self.members = members;
        self.snapshot_meta = meta.clone();
        self.truncated = (meta.index, meta.term);
        self.last_index = meta.index;
        Ok(())
    }

    /// Stores a snapshot this member took of its own state machine at `index` (applied, so in the log), with
    /// the membership as of that index (the members recorded now: the caller snapshots at its applied index).
    /// The log is left as it is; `compact` trims it.
    pub fn save_snapshot(
        &mut self,
        index: u64,
        conf_state: &ConfState,
        data: Vec<u8>,
    ) -> Result<(), ReplicateError> {
        let data = frame(&self.members, &data);
        if index < self.snapshot_meta.index || index > self.hard_state.commit {
            return Err(ReplicateError::Inconsistent(format!(
                "snapshot at {index}: stored snapshot at {}, commit {}",
                self.snapshot_meta.index, self.hard_state.commit
            )));
        }
        let term = self.term(index)?;
        let mut meta = SnapshotMetadata {
            index,
            term,
            ..Default::default()
        };
        meta.set_conf_state(conf_state.clone());
        let mut batch = sled::Batch::default();
        batch.insert(SNAPSHOT_META, encode(&meta)?);
        batch.insert(SNAPSHOT_DATA, data);
        self.tree.apply_batch(batch)?;
        self.flush()?;
        self.snapshot_meta = meta;
        Ok(())
    }

    /// Drops the entries before `upto`. Never past the stored snapshot: whoever needs a dropped entry gets the
    /// snapshot instead, so it must cover it.
    pub fn compact(&mut self, upto: u64) -> Result<(), ReplicateError> {
        if upto <= self.truncated.0 + 1 {
            return Ok(());
        }
        if upto > self.snapshot_meta.index + 1 || upto > self.last_index + 1 {
            return Err(ReplicateError::Inconsistent(format!(
                "compact to {upto}: snapshot at {}, last index {}",
                self.snapshot_meta.index, self.last_index
            )));
        }
        let term = self.term(upto - 1)?;
        let mut batch = sled::Batch::default();
        for index in self.truncated.0 + 1..upto {
            batch.remove(&entry_key(index));
        }
        batch.insert(TRUNCATED, truncation_record(upto - 1, term).as_slice());
        self.tree.apply_batch(batch)?;
        self.truncated = (upto - 1, term);
        Ok(())
    }

    /// Makes every write so far durable.
    pub fn flush(&self) -> Result<(), ReplicateError> {
        self.tree.flush()?;
        Ok(())
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// The members' addresses as of the applied index.
    pub fn members(&self) -> &Members {
        &self.members
    }

    /// The stored snapshot's metadata (index 0: none).
    pub fn snapshot_metadata(&self) -> &SnapshotMetadata {
        &self.snapshot_meta
    }

    /// The state machine's bytes in the stored snapshot.
    pub fn snapshot_data(&self) -> Result<Vec<u8>, ReplicateError> {
        let Some(v) = self.tree.get(SNAPSHOT_DATA)? else {
            return Ok(Vec::new());
        };
        Ok(unframe(&v)?.1.to_vec())
    }

    /// The members recorded in the stored snapshot (as of its index).
    pub fn snapshot_members(&self) -> Result<Members, ReplicateError> {
        let Some(v) = self.tree.get(SNAPSHOT_DATA)? else {
            return Ok(Members::default());
        };
        Ok(unframe(&v)?.0.unwrap_or_else(|| {
            Members::new(
                self.snapshot_meta
                    .get_conf_state()
                    .voters
                    .iter()
                    .map(|&id| (id, String::new()))
                    .collect(),
            )
        }))
    }

    fn read_entry(&self, index: u64) -> raft::Result<Entry> {
        match self.tree.get(entry_key(index)).map_err(to_raft)? {
            Some(v) => Entry::parse_from_bytes(&v).map_err(to_raft),
            None => Err(to_raft(format!("entry {index} missing inside the log"))),
        }
    }
}

fn be_u64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(b)
}

fn truncation_record(index: u64, term: u64) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&index.to_be_bytes());
    v[8..].copy_from_slice(&term.to_be_bytes());
    v
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.truncated.0 {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        // raft never asks past the end (MemStorage panics); an error keeps a bad caller from crashing us.
        if high > self.last_index + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let mut entries = Vec::with_capacity((high - low) as usize);
        for kv in self.tree.range(entry_keys(low..high)) {
            let (_, v) = kv.map_err(to_raft)?;
            entries.push(Entry::parse_from_bytes(&v).map_err(to_raft)?);
        }
        if entries.len() as u64 != high - low {
            return Err(to_raft(format!("entries {low}..{high} have gaps")));
        }
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index == self.truncated.0 {
            return Ok(self.truncated.1);
        }
        if index < self.truncated.0 {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if index > self.last_index {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.read_entry(index)?.term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.truncated.0 + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_index)
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        // Only a snapshot taken of the state machine is ever sent; a store without one (a member that never
        // joined) has nothing to send, and raft retries later. Nor is one sent to a member its membership does
        // not name (one added since): raft there would refuse to install it, after its file had been pushed
        // whole; every member takes a snapshot as one is added, and that one is sent.
        let cs = self.snapshot_meta.get_conf_state();
        let names = cs.voters.contains(&to) || cs.learners.contains(&to);
        if self.snapshot_meta.index == 0 || self.snapshot_meta.index < request_index || !names {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let mut snapshot = Snapshot::default();
        snapshot.set_metadata(self.snapshot_meta.clone());
        snapshot.data = self
            .tree
            .get(SNAPSHOT_DATA)
            .map_err(to_raft)?
            .map(|v| v.to_vec())
            .unwrap_or_default()
            .into();
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::storage::MemStorage;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: format!("data {index}").into_bytes().into(),
            ..Default::default()
        }
    }

    fn temp_tree() -> (sled::Db, sled::Tree) {
        let db = sled::Config::new()
            .temporary(true)
            .open()
            .expect("temp sled");
        let tree = db.open_tree("raft").expect("tree");
        (db, tree)
    }

    /// A `LogStore` and a `MemStorage` given the same snapshot at 3 (term 3) and entries 4..=6.
    fn both() -> (sled::Db, LogStore, MemStorage) {
        let (db, tree) = temp_tree();
        let mut store = LogStore::open(tree).expect("open");
        let mem = MemStorage::new();
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 3;
        snap.mut_metadata().term = 3;
        snap.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
        store.apply_snapshot(&snap).expect("snapshot");
        mem.wl().apply_snapshot(snap).expect("snapshot");
        let ents = vec![entry(4, 4), entry(5, 5), entry(6, 5)];
        store.append(&ents, None).expect("append");
        mem.wl().append(&ents).expect("append");
        (db, store, mem)
    }

    fn ctx() -> GetEntriesContext {
        GetEntriesContext::empty(false)
    }

    #[test]
    fn reads_agree_with_raft_mem_storage() {
        let (_db, store, mem) = both();
        assert_eq!(store.first_index().ok(), mem.first_index().ok());
        assert_eq!(store.last_index().ok(), mem.last_index().ok());
        for i in 0..=8 {
            assert_eq!(store.term(i), mem.term(i), "term({i})");
        }
        for (lo, hi) in [(4, 7), (4, 5), (5, 7), (6, 7)] {
            assert_eq!(
                store.entries(lo, hi, None, ctx()),
                mem.entries(lo, hi, None, ctx()),
                "entries({lo}, {hi})"
            );
        }
        assert_eq!(
            store.entries(3, 5, None, ctx()),
            Err(raft::Error::Store(StorageError::Compacted))
        );
        assert!(
            store.entries(4, 9, None, ctx()).is_err(),
            "past the end is an error, not a panic"
        );
        // max_size: at least one entry, then as many as fit.
        let one = entry(4, 4).compute_size() as u64;
        assert_eq!(
            store.entries(4, 7, one, ctx()),
            mem.entries(4, 7, one, ctx())
        );
        assert_eq!(store.entries(4, 7, 0, ctx()).map(|v| v.len()), Ok(1));
        let (hs, cs) = (
            store.initial_state().expect("state"),
            mem.initial_state().expect("state"),
        );
        assert_eq!(hs.hard_state, cs.hard_state);
        assert_eq!(hs.conf_state, cs.conf_state);
    }

    #[test]
    fn append_replaces_a_conflicting_suffix_as_mem_storage_does() {
        let (_db, mut store, mem) = both();
        let ents = vec![entry(5, 6)];
        store.append(&ents, None).expect("append");
        mem.wl().append(&ents).expect("append");
        assert_eq!(store.last_index().ok(), Some(5));
        assert_eq!(store.last_index().ok(), mem.last_index().ok());
        assert_eq!(store.term(5), mem.term(5));
        assert_eq!(store.term(6), mem.term(6));
        // A gap or a write into the compacted part is refused, not a panic.
        assert!(store.append(&[entry(8, 6)], None).is_err());
        assert!(store.append(&[entry(3, 6)], None).is_err());
    }

    #[test]
    fn compact_keeps_the_term_of_the_entry_before_the_log() {
        let (_db, mut store, mem) = both();
        // Compaction stops at the stored snapshot: take one at 5 first.
        store.hard_state.commit = 6;
        store
            .save_snapshot(5, &ConfState::from((vec![1, 2, 3], vec![])), b"sm".to_vec())
            .expect("snapshot");
        assert!(store.compact(7).is_err(), "past the snapshot");
        store.compact(5).expect("compact");
        mem.wl().compact(5).expect("compact");
        assert_eq!(store.first_index().ok(), mem.first_index().ok());
        assert_eq!(store.first_index().ok(), Some(5));
        assert_eq!(
            store.term(4).ok(),
            Some(4),
            "the term before the log stays known"
        );
        assert_eq!(
            store.term(3),
            Err(raft::Error::Store(StorageError::Compacted))
        );
        assert_eq!(
            store.entries(5, 7, None, ctx()),
            mem.entries(5, 7, None, ctx())
        );
        store.compact(4).expect("compacting less is a no-op");
        assert_eq!(store.first_index().ok(), Some(5));
        let snap = store.snapshot(0, 2).expect("snapshot");
        assert_eq!(snap.get_metadata().index, 5);
        assert_eq!(snap.get_metadata().term, 5);
        // What is sent carries the members with the state machine's bytes.
        assert_eq!(unframe(&snap.data).expect("framed").1, b"sm");
        assert_eq!(
            store.snapshot(0, 4),
            Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable
            )),
            "not to a member the snapshot's membership does not name"
        );
        assert_eq!(
            store.snapshot(6, 2),
            Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable
            ))
        );
    }

    #[test]
    fn an_installed_snapshot_replaces_the_log() {
        let (_db, mut store, mem) = both();
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 10;
        snap.mut_metadata().term = 7;
        snap.mut_metadata().mut_conf_state().voters = vec![1, 2, 4];
        snap.data = b"state".to_vec().into();
        store.apply_snapshot(&snap).expect("install");
        mem.wl().apply_snapshot(snap.clone()).expect("install");
        assert_eq!(store.first_index().ok(), mem.first_index().ok());
        assert_eq!(store.last_index().ok(), mem.last_index().ok());
        assert_eq!(store.term(10), mem.term(10));
        assert_eq!(
            store.initial_state().expect("state").hard_state,
            mem.initial_state().expect("state").hard_state
        );
        assert_eq!(store.conf_state().voters, vec![1, 2, 4]);
        assert_eq!(store.snapshot(0, 1).expect("snapshot"), snap);
    }

    #[test]
    fn a_reopened_tree_gives_back_the_same_log_and_state() {
        let dir = tempfile::tempdir().expect("dir");
        let expected = {
            let db = sled::open(dir.path()).expect("open");
            let mut store = LogStore::open(db.open_tree("raft").expect("tree")).expect("store");
            assert!(store
                .bootstrap(&[1, 2, 3], b"init".to_vec())
                .expect("bootstrap"));
            let hs = HardState {
                term: 2,
                vote: 3,
                commit: 3,
                ..Default::default()
            };
            store
                .append(&[entry(2, 2), entry(3, 2), entry(4, 2)], Some(&hs))
                .expect("append");
            store.flush().expect("flush");
            (
                store.initial_state().expect("state"),
                store.entries(2, 5, None, ctx()).expect("entries"),
            )
        };
        let db = sled::open(dir.path()).expect("reopen");
        let mut store = LogStore::open(db.open_tree("raft").expect("tree")).expect("store");
        let state = store.initial_state().expect("state");
        assert_eq!(state.hard_state, expected.0.hard_state);
        assert_eq!(state.conf_state, expected.0.conf_state);
        assert_eq!(
            store.entries(2, 5, None, ctx()).expect("entries"),
            expected.1
        );
        assert_eq!(store.first_index().ok(), Some(2));
        assert_eq!(store.snapshot_data().expect("data"), b"init");
        assert!(
            !store.bootstrap(&[9], Vec::new()).expect("no-op"),
            "a restart keeps its state"
        );
    }
}
