//! `Node`: one member, driving raft-rs's `RawNode` over a `LogStore` and a `StateMachine`, with no clock and no
//! network of its own. The caller ticks it, hands it the bytes that arrived, and after every such call takes
//! `ready()`: the messages to send and what was applied.
//!
//! The Ready protocol, in the order raft requires: install a received snapshot; append the new entries and the
//! hard state in one batch and flush; only then send the messages that promise persistence (votes, append
//! responses) and apply committed entries; then `advance`, and handle its light ready the same way. A leader's
//! own appends go out before its flush (raft allows that: it counts its own vote for an entry only once
//! persisted).

use std::panic::{catch_unwind, AssertUnwindSafe};

use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, Message, MessageType,
};
use raft::{RawNode, SnapshotStatus, StateRole, Storage};

use crate::error::ReplicateError;
use crate::members::{check_address, unframe, Members};
use crate::state_machine::StateMachine;
use crate::store::LogStore;

mod snapshots;

use snapshots::Snapshotting;

/// A member's settings. Ticks are the caller's unit of time (the coordinator's would be some 100 ms).
#[derive(Clone, Debug)]
pub struct Config {
    /// This member's id (non-zero, unique in the group, never reused for a new empty store).
    pub id: u64,
    /// Ticks without a leader before a follower campaigns (randomized by raft in [n, 2n)).
    pub election_tick: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_tick: usize,
    /// A snapshot is taken (and the log compacted up to the previous one) every this many applied entries.
    pub snapshot_every: u64,
    /// Bytes of entries in one append message.
    pub max_size_per_msg: u64,
    /// Append messages in flight to one follower.
    pub max_inflight_msgs: usize,
    /// The largest snapshot message sent to a member (the state machine's snapshot bytes travel in it, and the
    /// transport frames a message with a 32-bit length; a state machine whose snapshot is a file puts only a
    /// descriptor there). A larger one is not sent: the member stays behind, and the sender says why, rather
    /// than failing on it.
    pub max_snapshot_bytes: usize,
}

impl Config {
    pub fn new(id: u64) -> Self {
        Config {
            id,
            election_tick: 10,
            heartbeat_tick: 2,
            snapshot_every: 10_000,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            max_snapshot_bytes: (1 << 31) - (64 << 20),
        }
    }
}

/// A membership change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Membership {
    /// A new member, empty, at `address` (how the others reach it); `id` was never used in the group.
    AddVoter {
        id: u64,
        address: String,
    },
    RemoveVoter(u64),
}

/// A message for another member.
#[derive(Clone, Debug)]
pub struct Outgoing {
    pub to: u64,
    /// The encoded raft message, for `Node::step` on `to`.
    pub bytes: Vec<u8>,
    /// It carries a snapshot, whose state machine bytes these are (what the transport may have to send beside
    /// it): the transport reports its fate with `Node::report_snapshot`, since the leader sends nothing more to
    /// that member until it knows.
    pub snapshot: Option<Vec<u8>>,
}

/// An entry the state machine has just applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub index: u64,
    /// The term it was proposed in: a proposal returned `index` in term `t` committed if and only if the entry
    /// applied at `index` has term `t` (otherwise another leader's entry replaced it).
    pub term: u64,
    pub data: Vec<u8>,
}

/// What one `ready` produced.
#[derive(Clone, Debug, Default)]
pub struct Output {
    pub messages: Vec<Outgoing>,
    /// Entries applied to the state machine in this call, in log order (empty and membership entries are not
    /// listed: the node applies membership itself).
    pub applied: Vec<Applied>,
    /// The index of a snapshot the state machine was restored from in this call.
    pub restored: Option<u64>,
    pub leader: Option<u64>,
    pub term: u64,
    pub is_leader: bool,
}

/// One member of a replicated group; see the module documentation.
pub struct Node<S: StateMachine> {
    raw: RawNode<LogStore>,
    sm: S,
    id: u64,
    /// Last entry applied (or covered by a restored snapshot).
    applied: u64,
    /// The membership as of `applied`, saved with each snapshot.
    conf_state: ConfState,
    snapshot_every: u64,
    /// A snapshot is taken at the next `ready` whatever `snapshot_every` says: a member was added, and raft
    /// installs only a snapshot whose membership names the installing member, so the one it catches up from
    /// must be taken after its addition.
    snapshot_due: bool,
    max_snapshot_bytes: usize,
    /// Snapshots not sent because they were too large, counted to say so without repeating it every time.
    oversized: u64,
    /// Set when raft panicked: its state is then unknown, and every later call refuses.
    poisoned: bool,
    /// A snapshot being written off this thread; while it is, committed entries wait in `deferred`.
    snapshotting: Option<Snapshotting>,
    deferred: std::collections::VecDeque<Entry>,
    /// After a snapshot job failed, no other starts before this applied index.
    retry_from: u64,
}

fn logger() -> slog::Logger {
    // raft logs through slog; its messages are for raft's developers, and sweep reports what matters itself.
    slog::Logger::root(slog::Discard, slog::o!())
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

impl<S: StateMachine> Node<S> {
    /// Starts a member over its store (reopened after a crash, bootstrapped for a founding member, or empty for
    /// one being added). A state machine behind the stored snapshot is restored from it first; entries after
    /// what it has applied are applied again as `ready` delivers them.
    pub fn new(config: &Config, mut store: LogStore, mut sm: S) -> Result<Self, ReplicateError> {
        let snap_index = store.snapshot_metadata().index;
        if sm.applied() < snap_index {
            sm.restore(&store.snapshot_data()?);
            // The membership then starts from the snapshot's and is rebuilt by the entries applied again.
            let cs = store.snapshot_metadata().get_conf_state().clone();
            let members = store.snapshot_members()?;
            store.set_membership(&cs, &members)?;
        }
        let applied = sm.applied().max(snap_index);
        let commit = store.hard_state().commit;
        if applied > commit {
            // Only committed entries are applied, so they are committed even if the commit index written
            // after them did not reach the disk; raft refuses to start with applied > commit.
            if applied > store.last_index()? {
                return Err(ReplicateError::Inconsistent(format!(
                    "state machine applied {applied}, beyond the log's last index {}",
                    store.last_index()?
                )));
            }
            store.set_commit(applied)?;
        }
        let conf_state = store.conf_state().clone();
        let raft_config = raft::Config {
            id: config.id,
            election_tick: config.election_tick,
            heartbeat_tick: config.heartbeat_tick,
            applied,
            max_size_per_msg: config.max_size_per_msg,
            max_inflight_msgs: config.max_inflight_msgs,
            // A leader that cannot reach a majority steps down after an election timeout, so a partitioned
            // leader stops being asked to decide; pre-vote keeps a rejoining member from deposing a working
            // leader with a higher term.
            check_quorum: true,
            pre_vote: true,
            // Proposals made between two `ready`s go to each follower as one append, so one flush there.
            batch_append: true,
            ..Default::default()
        };
        // raft panics on a store that contradicts itself (a commit index past the log, say): an error here.
        let raw = catch_unwind(AssertUnwindSafe(|| {
            RawNode::new(&raft_config, store, &logger())
        }))
        .map_err(|p| ReplicateError::Panicked(panic_text(p)))??;
        Ok(Node {
            raw,
            sm,
            id: config.id,
            applied,
            conf_state,
            snapshot_every: config.snapshot_every.max(1),
            snapshot_due: false,
            max_snapshot_bytes: config.max_snapshot_bytes,
            oversized: 0,
            poisoned: false,
            snapshotting: None,
            deferred: std::collections::VecDeque::new(),
            retry_from: 0,
        })
    }

    /// Runs `f` on raft, turning a panic inside raft into an error and poisoning the node.
    fn guarded<T>(
        &mut self,
        f: impl FnOnce(&mut RawNode<LogStore>) -> Result<T, ReplicateError>,
    ) -> Result<T, ReplicateError> {
        if self.poisoned {
            return Err(ReplicateError::Poisoned);
        }
        match catch_unwind(AssertUnwindSafe(|| f(&mut self.raw))) {
            Ok(r) => r,
            Err(p) => {
                self.poisoned = true;
                Err(ReplicateError::Panicked(panic_text(p)))
            }
        }
    }

    /// One unit of time passed.
    pub fn tick(&mut self) -> Result<(), ReplicateError> {
        self.guarded(|raw| {
            raw.tick();
            Ok(())
        })
    }

    /// Starts an election now (a founding member may, to skip the first timeout).
    pub fn campaign(&mut self) -> Result<(), ReplicateError> {
        self.guarded(|raw| Ok(raw.campaign()?))
    }

    /// Hands the leadership to the voter whose log is furthest along (raft's leader transfer: it is brought up
    /// to date, then told to campaign at once); returns it, or `None` when this member does not lead or has no
    /// other voter. A leader that cannot serve (its store refuses writes) steps aside this way rather than
    /// hold the group.
    pub fn transfer_leadership(&mut self) -> Result<Option<u64>, ReplicateError> {
        if !self.is_leader() {
            return Ok(None);
        }
        let Some((to, _)) = self
            .progress()
            .into_iter()
            .filter(|(id, _)| self.conf_state.voters.contains(id))
            .max_by_key(|&(id, matched)| (matched, std::cmp::Reverse(id)))
        else {
            return Ok(None);
        };
        self.guarded(|raw| {
            raw.transfer_leader(to);
            Ok(())
        })?;
        Ok(Some(to))
    }

    /// Handles bytes another member sent. Anything that is not a raft message from a peer to us is an error,
    /// never a panic; raft assumes peers that follow the protocol, so what a faithful peer could send is all
    /// that is checked here.
    pub fn step(&mut self, bytes: &[u8]) -> Result<(), ReplicateError> {
        let msg = Message::parse_from_bytes(bytes).map_err(ReplicateError::Decode)?;
        if msg.to != self.id {
            return Err(ReplicateError::BadMessage(format!(
                "addressed to {}, this is {}",
                msg.to, self.id
            )));
        }
        if msg.from == 0 || msg.from == self.id {
            return Err(ReplicateError::BadMessage(format!("from {}", msg.from)));
        }
        if !from_peer(msg.get_msg_type()) {
            return Err(ReplicateError::BadMessage(format!(
                "{:?} is not sent between members",
                msg.get_msg_type()
            )));
        }
        if msg.get_msg_type() == MessageType::MsgSnapshot {
            let state = unframe(&msg.get_snapshot().data)?.1;
            if !self.sm.has_snapshot(state) {
                return Err(ReplicateError::SnapshotNotHere {
                    index: msg.get_snapshot().get_metadata().index,
                });
            }
        }
        self.guarded(|raw| Ok(raw.step(msg)?))
    }

    /// Appends `data` to the log if this member is the leader; returns its index. It is committed once the
    /// state machine applies an entry at that index with the term this proposal was made in (`term()` now).
    pub fn propose(&mut self, data: Vec<u8>) -> Result<u64, ReplicateError> {
        self.ensure_leader()?;
        let leader = self.leader();
        self.guarded(|raw| {
            proposed(raw.propose(Vec::new(), data), leader)?;
            Ok(raw.raft.raft_log.last_index())
        })
    }

    /// Proposes a membership change (one at a time); returns its index. A member is added empty and catches up
    /// by snapshot; a removed member's id is never used again.
    pub fn propose_conf_change(&mut self, change: Membership) -> Result<u64, ReplicateError> {
        self.ensure_leader()?;
        // While entries wait for a snapshot to be written, the applied membership may not be the latest.
        if self.raw.raft.has_pending_conf() || !self.deferred.is_empty() {
            // raft would silently turn the proposal into an empty entry.
            return Err(ReplicateError::ConfChangePending);
        }
        // With no change pending, the applied membership is the latest.
        let members = self.members();
        let (change_type, node_id, context) = match change {
            Membership::AddVoter { id, address } => {
                check_address(&address)?;
                if id <= members.highest_id {
                    return Err(ReplicateError::BadMembership(format!(
                        "member id {id} is or was in use (the next free one is {})",
                        members.next_id()
                    )));
                }
                if let Some(other) = members.id_at(&address) {
                    return Err(ReplicateError::BadMembership(format!(
                        "member {other} is at {address}"
                    )));
                }
                (ConfChangeType::AddNode, id, address.into_bytes())
            }
            Membership::RemoveVoter(id) => {
                if !members.addresses.contains_key(&id) && !self.conf_state.voters.contains(&id) {
                    return Err(ReplicateError::BadMembership(format!(
                        "there is no member {id}"
                    )));
                }
                if self.conf_state.voters.len() <= 1 {
                    return Err(ReplicateError::BadMembership(
                        "the last member cannot be removed".into(),
                    ));
                }
                if id == self.id {
                    return Err(ReplicateError::BadMembership(format!(
                        "member {id} leads: stop it, and remove it from the leader the others elect"
                    )));
                }
                (ConfChangeType::RemoveNode, id, Vec::new())
            }
        };
        let cc = ConfChange {
            change_type,
            node_id,
            context: context.into(),
            ..Default::default()
        };
        let leader = self.leader();
        self.guarded(|raw| {
            proposed(raw.propose_conf_change(Vec::new(), cc), leader)?;
            Ok(raw.raft.raft_log.last_index())
        })
    }

    /// Adds a new empty member at `address` under the next free id; returns the id and the index of the
    /// membership entry. A member already at `address` is not added twice: its id is returned, with no entry
    /// (so a joining member that asks again after a lost answer gets the same id).
    pub fn propose_add(&mut self, address: String) -> Result<(u64, Option<u64>), ReplicateError> {
        self.ensure_leader()?;
        if let Some(id) = self.members().id_at(&address) {
            if !self.raw.raft.has_pending_conf() {
                return Ok((id, None));
            }
        }
        let id = self.members().next_id();
        let index = self.propose_conf_change(Membership::AddVoter { id, address })?;
        Ok((id, Some(index)))
    }

    /// The transport's report on a message that carried a snapshot (see `Outgoing::snapshot`).
    pub fn report_snapshot(&mut self, to: u64, delivered: bool) -> Result<(), ReplicateError> {
        let status = if delivered {
            SnapshotStatus::Finish
        } else {
            SnapshotStatus::Failure
        };
        self.guarded(|raw| {
            raw.report_snapshot(to, status);
            Ok(())
        })
    }

    /// The transport could not reach `to`: the leader probes it again instead of streaming to it.
    pub fn report_unreachable(&mut self, to: u64) -> Result<(), ReplicateError> {
        self.guarded(|raw| {
            raw.report_unreachable(to);
            Ok(())
        })
    }

    fn ensure_leader(&self) -> Result<(), ReplicateError> {
        if self.poisoned {
            return Err(ReplicateError::Poisoned);
        }
        if self.is_leader() {
            Ok(())
        } else {
            Err(ReplicateError::NotLeader {
                leader: self.leader(),
            })
        }
    }

    /// Does everything raft has made ready (persist, apply, snapshot) and returns what the caller must send,
    /// with what was applied. Call it after every `tick`, `step`, `propose` or report.
    pub fn ready(&mut self) -> Result<Output, ReplicateError> {
        if self.poisoned {
            return Err(ReplicateError::Poisoned);
        }
        let mut out = Output::default();
        let result = catch_unwind(AssertUnwindSafe(|| self.handle_ready(&mut out)));
        match result {
            Ok(Ok(())) => {}
            // A ready taken but not advanced (the store failed halfway) leaves raft unsure of what is
            // durable: the node is reopened from its store rather than trusted further.
            Ok(Err(e)) => {
                self.poisoned = true;
                return Err(e);
            }
            Err(p) => {
                self.poisoned = true;
                return Err(ReplicateError::Panicked(panic_text(p)));
            }
        }
        out.leader = self.leader();
        out.term = self.term();
        out.is_leader = self.is_leader();
        Ok(out)
    }

    fn handle_ready(&mut self, out: &mut Output) -> Result<(), ReplicateError> {
        self.poll_snapshot(false, out)?;
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut rd = self.raw.ready();
        // A leader may send its appends before persisting them (raft thesis 10.2.1).
        let mut unsent = Vec::new();
        self.encode_into(&mut out.messages, rd.take_messages(), &mut unsent)?;
        if !rd.snapshot().is_empty() {
            // The state machine is not restored under a snapshot being written from it.
            self.poll_snapshot(true, out)?;
            let snapshot = rd.snapshot().clone();
            self.raw.mut_store().apply_snapshot(&snapshot)?;
            let state = unframe(&snapshot.data)?.1;
            self.sm.restore(state);
            self.check_state_machine()?;
            self.sm.snapshot_stored(state);
            self.applied = snapshot.get_metadata().index;
            self.conf_state = snapshot.get_metadata().get_conf_state().clone();
            out.restored = Some(self.applied);
        }
        // Entries and hard state in one batch, durable before any vote or acknowledgement that rests on them.
        let store = self.raw.mut_store();
        store.append(rd.entries(), rd.hs())?;
        // raft says when the disk must be synced: a new term or vote, new entries, a snapshot. A commit index
        // alone need not be (a lost one is learned again from the leader).
        if rd.must_sync() {
            store.flush()?;
        }
        self.apply(rd.take_committed_entries(), out)?;
        self.check_state_machine()?;
        self.encode_into(&mut out.messages, rd.take_persisted_messages(), &mut unsent)?;
        let mut light = self.raw.advance_append(rd);
        if let Some(commit) = light.commit_index() {
            self.raw.mut_store().set_commit(commit)?;
        }
        self.encode_into(&mut out.messages, light.take_messages(), &mut unsent)?;
        self.apply(light.take_committed_entries(), out)?;
        self.check_state_machine()?;
        // raft learns what is really applied (entries deferred behind a snapshot are not), so that it refuses a
        // second membership change until the first is applied.
        if self.applied > self.raw.raft.raft_log.applied {
            self.raw.advance_apply_to(self.applied);
        }
        for to in unsent {
            // raft sends that member nothing more until it hears the snapshot's fate; it tries again later.
            self.raw.report_snapshot(to, SnapshotStatus::Failure);
        }
        self.maybe_snapshot()
    }

    /// Encodes `msgs` for the transport, leaving out snapshots over `max_snapshot_bytes` (their members are
    /// pushed to `unsent`).
    fn encode_into(
        &mut self,
        out: &mut Vec<Outgoing>,
        msgs: Vec<Message>,
        unsent: &mut Vec<u64>,
    ) -> Result<(), ReplicateError> {
        for m in msgs {
            let snapshot = m.get_msg_type() == MessageType::MsgSnapshot;
            if snapshot && m.get_snapshot().data.len() > self.max_snapshot_bytes {
                if self.oversized.is_multiple_of(100) {
                    tracing::error!(
                        member = m.to,
                        bytes = m.get_snapshot().data.len(),
                        limit = self.max_snapshot_bytes,
                        "a snapshot is too large to send in one message: that member cannot catch up"
                    );
                }
                self.oversized += 1;
                unsent.push(m.to);
                continue;
            }
            let state = match snapshot {
                true => Some(unframe(&m.get_snapshot().data)?.1.to_vec()),
                false => None,
            };
            out.push(Outgoing {
                to: m.to,
                snapshot: state,
                bytes: m.write_to_bytes().map_err(ReplicateError::Encode)?,
            });
        }
        Ok(())
    }

    /// Snapshots left unsent because they were over `Config::max_snapshot_bytes`.
    pub fn oversized_snapshots(&self) -> u64 {
        self.oversized
    }

    fn apply(&mut self, entries: Vec<Entry>, out: &mut Output) -> Result<(), ReplicateError> {
        if self.snapshotting.is_some() {
            self.deferred.extend(entries);
            return Ok(());
        }
        for entry in entries {
            if entry.index <= self.applied {
                // Already in the state machine (it kept them durably, or a snapshot covered them).
                continue;
            }
            match entry.get_entry_type() {
                EntryType::EntryNormal => {
                    // Empty entries are the ones each new leader appends to commit its term.
                    if !entry.data.is_empty() {
                        self.sm.apply(entry.index, &entry.data);
                        out.applied.push(Applied {
                            index: entry.index,
                            term: entry.term,
                            data: entry.data.to_vec(),
                        });
                    }
                }
                EntryType::EntryConfChange => {
                    let cc: ConfChange = membership_entry(&entry)?;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    let mut members = self.members().clone();
                    match cc.get_change_type() {
                        ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                            let address = String::from_utf8_lossy(&cc.context).into_owned();
                            members.add(cc.node_id, address);
                            self.snapshot_due = true;
                        }
                        ConfChangeType::RemoveNode => members.remove(cc.node_id),
                    }
                    self.record_membership(cs, members)?;
                }
                EntryType::EntryConfChangeV2 => {
                    let cc: ConfChangeV2 = membership_entry(&entry)?;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    // Never proposed by this crate; the ids follow raft, without addresses for new ones.
                    let mut members = self.members().clone();
                    members.addresses.retain(|id, _| cs.voters.contains(id));
                    for &id in &cs.voters {
                        if !members.addresses.contains_key(&id) {
                            members.add(id, String::new());
                        }
                    }
                    self.record_membership(cs, members)?;
                }
            }
            self.applied = entry.index;
        }
        Ok(())
    }

    fn check_state_machine(&self) -> Result<(), ReplicateError> {
        match self.sm.failure() {
            Some(why) => Err(ReplicateError::StateMachine(why)),
            None => Ok(()),
        }
    }

    fn record_membership(&mut self, cs: ConfState, members: Members) -> Result<(), ReplicateError> {
        let store = self.raw.mut_store();
        store.set_membership(&cs, &members)?;
        // Durable before the state machine applies anything after it: a durable state machine past this entry
        // is never given it again, so a membership lost in a crash would stay lost.
        store.flush()?;
        self.conf_state = cs;
        Ok(())
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The leader this member knows of in its current term.
    pub fn leader(&self) -> Option<u64> {
        match self.raw.raft.leader_id {
            0 => None,
            id => Some(id),
        }
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// The last entry applied to the state machine (or covered by a restored snapshot).
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The highest index known committed.
    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    /// The last index in this member's log.
    pub fn last_index(&self) -> u64 {
        self.raw.raft.raft_log.last_index()
    }

    /// The voters as of the applied index.
    pub fn voters(&self) -> Vec<u64> {
        self.conf_state.voters.clone()
    }

    /// The members' addresses as of the applied index (none on a new member before its first snapshot).
    pub fn members(&self) -> &Members {
        self.raw.store().members()
    }

    /// For each other voter, how far its log matches the leader's (only on the leader).
    pub fn progress(&self) -> Vec<(u64, u64)> {
        if !self.is_leader() {
            return Vec::new();
        }
        let mut v: Vec<(u64, u64)> = self
            .raw
            .raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != self.id)
            .map(|(id, pr)| (*id, pr.matched))
            .collect();
        v.sort_unstable();
        v
    }

    pub fn state_machine(&self) -> &S {
        &self.sm
    }

    pub fn store(&self) -> &LogStore {
        self.raw.store()
    }

    /// The term of the entry at `index` in this member's log, if it still holds it.
    pub fn entry_term(&self, index: u64) -> Option<u64> {
        self.raw.store().term(index).ok()
    }
}

/// The membership change a committed entry carries. Raft committed it, so one that does not decode means the
/// log is not what this member wrote or received.
fn membership_entry<M: protobuf::Message>(entry: &Entry) -> Result<M, ReplicateError> {
    M::parse_from_bytes(&entry.data)
        .map_err(|e| ReplicateError::Inconsistent(format!("membership entry {}: {e}", entry.index)))
}

/// Message types members send each other; the rest are generated locally (`MsgHup`, `MsgBeat`, ...) or are
/// proposals, which this layer never forwards between members.
fn from_peer(t: MessageType) -> bool {
    use MessageType::*;
    matches!(
        t,
        MsgAppend
            | MsgAppendResponse
            | MsgRequestVote
            | MsgRequestVoteResponse
            | MsgSnapshot
            | MsgHeartbeat
            | MsgHeartbeatResponse
            | MsgTransferLeader
            | MsgTimeoutNow
            | MsgReadIndex
            | MsgReadIndexResp
            | MsgRequestPreVote
            | MsgRequestPreVoteResponse
    )
}

/// What raft's answer to a proposal means to the caller: a proposal dropped while a leadership transfer is under
/// way is the caller's to send to the leader, not an error of this member.
fn proposed(result: Result<(), raft::Error>, leader: Option<u64>) -> Result<(), ReplicateError> {
    match result {
        Ok(()) => Ok(()),
        Err(raft::Error::ProposalDropped) => Err(ReplicateError::NotLeader { leader }),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log {
        entries: Vec<(u64, Vec<u8>)>,
    }

    impl StateMachine for Log {
        fn apply(&mut self, index: u64, data: &[u8]) {
            self.entries.push((index, data.to_vec()));
        }
        fn snapshot(&self) -> Vec<u8> {
            Vec::new()
        }
        fn restore(&mut self, _data: &[u8]) {}
        fn applied(&self) -> u64 {
            self.entries.last().map_or(0, |e| e.0)
        }
    }

    fn store() -> (sled::Db, LogStore) {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let mut store = LogStore::open(db.open_tree("raft").expect("tree")).expect("store");
        store.bootstrap(&[1], Vec::new()).expect("bootstrap");
        (db, store)
    }

    #[test]
    fn a_single_member_group_commits_alone() {
        let (_db, store) = store();
        let mut node = Node::new(&Config::new(1), store, Log::default()).expect("node");
        node.campaign().expect("campaign");
        let out = node.ready().expect("ready");
        assert!(out.is_leader && out.leader == Some(1) && out.messages.is_empty());
        let index = node.propose(b"one".to_vec()).expect("propose");
        let out = node.ready().expect("ready");
        assert_eq!(
            out.applied,
            vec![Applied {
                index,
                term: node.term(),
                data: b"one".to_vec()
            }]
        );
        assert_eq!(node.state_machine().entries, vec![(index, b"one".to_vec())]);
    }

    #[test]
    fn a_store_that_contradicts_itself_is_an_error_not_a_panic() {
        let (_db, mut store) = store();
        // A commit index past the end of the log: raft's constructor panics on it.
        store.set_commit(50).expect("commit");
        assert!(matches!(
            Node::new(&Config::new(1), store, Log::default()),
            Err(ReplicateError::Panicked(_))
        ));
    }
}
