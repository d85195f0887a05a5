//! One member of a replicated coordinator as a server: it runs the coordinator while its consensus member
//! (`crate::replica`) leads, and tells clients where the leader is otherwise.
//!
//! [`Leadership::run`] watches the member. When it becomes the leader it first commits an empty entry in its
//! own term (after which its store holds every entry any earlier leader committed), then opens a
//! [`Coordinator`] over that store, as a restart does, and starts its background tasks. When it stops leading
//! (another member won an election, or it lost touch with the majority and stepped down) the coordinator stops
//! and is dropped: whatever it had not committed is not acknowledged, and cannot be, since its proposals no
//! longer commit. The services ask [`Leadership::coordinator`] on every call.
//!
//! Invariant: at most one coordinator per process, and only while its member leads in the term it was opened
//! in; a term ends it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{info, warn};

use crate::coordinator::{Coordinator, CoordinatorConfig, Tasks};
use crate::metrics::Metrics;
use crate::replica::{Change, MemberHandle, ProposeError};
use crate::store::{encode_entry, Store};

/// A member's consensus log, as `open_log` gives it.
pub use sweep_replicate::LogStore;

/// How long a new leader waits before trying again when its first entry or its store did not work out.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// How long a leader that could not commit waits for another member to take over before it serves again
/// itself (as it must when no other member can: a group of one, or the others far behind).
const STEP_DOWN_WAIT: Duration = Duration::from_secs(5);

/// This member does not serve the call: it is not the leader, or not serving as one yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotServing {
    /// The client URL of the member this one believes leads, when it knows one other than itself.
    pub leader_url: Option<String>,
}

/// What one member knows of the group.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GroupView {
    pub id: u64,
    pub term: u64,
    /// The leader it knows of in its term (`None`: an election).
    pub leader: Option<u64>,
    /// The last entry applied to its store, and the last entry in its log.
    pub applied: u64,
    pub last_index: u64,
    /// It leads and its coordinator is open.
    pub serving: bool,
    pub members: Vec<MemberView>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct MemberView {
    pub id: u64,
    pub url: String,
    /// In the leader's view only: the last entry known to be in this member's log.
    pub matched: Option<u64>,
}

/// A member's place in the group as its services and operators see it.
pub struct Leadership {
    id: u64,
    member: MemberHandle,
    /// The members' client URLs this process was started with (this one's included), by id: the log's
    /// membership replaces them as soon as it names any.
    started_with: BTreeMap<u64, String>,
    /// The coordinator open now, with the term it serves in.
    current: watch::Sender<Option<(Arc<Coordinator>, u64)>>,
    /// Process-wide counters: coordinators come and go with terms, `/metrics` stays.
    metrics: Arc<Metrics>,
    /// The longest a follower waits without hearing from a leader before it campaigns.
    election_timeout: Duration,
}

impl Leadership {
    pub fn new(
        id: u64,
        member: MemberHandle,
        started_with: BTreeMap<u64, String>,
        election_timeout: Duration,
    ) -> Arc<Leadership> {
        Arc::new(Leadership {
            id,
            member,
            started_with,
            current: watch::channel(None).0,
            metrics: Arc::default(),
            election_timeout,
        })
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Every member's client URL by id, as of the membership this member applied (the URLs it was started
    /// with until its log names members; a member recorded without a URL keeps the one it was started with).
    pub fn urls(&self) -> BTreeMap<u64, String> {
        urls_of(&self.member.status().members, &self.started_with)
    }

    /// The coordinator to call, if this member serves as the leader now.
    pub fn coordinator(&self) -> Result<Arc<Coordinator>, NotServing> {
        self.coordinator_in_term().map(|(c, _)| c)
    }

    /// The coordinator to call, with the term it leads in, if this member serves as the leader now.
    pub fn coordinator_in_term(&self) -> Result<(Arc<Coordinator>, u64), NotServing> {
        if let Some((c, term)) = self.current.borrow().as_ref() {
            return Ok((c.clone(), *term));
        }
        Err(self.not_serving())
    }

    fn not_serving(&self) -> NotServing {
        let leader_url = self
            .member
            .status()
            .leader
            .filter(|&l| l != self.id)
            .and_then(|l| self.urls().get(&l).cloned());
        NotServing { leader_url }
    }

    /// Adds a new empty member at `url` (or finds the member already there) once the change is applied here;
    /// its id and every member's URL then. Only the leader changes the membership. A URL of the other scheme
    /// than this member's (`http://` in a group at `https://` URLs, or the other way round) is refused: every
    /// member calls the others with one TLS setting, so such a member could neither be reached nor reach them.
    pub async fn add_member(
        &self,
        url: String,
    ) -> Result<(u64, BTreeMap<u64, String>), ChangeError> {
        if let Some(own) = self.urls().get(&self.id).filter(|u| !u.is_empty()) {
            if serves_tls(own) != serves_tls(&url) {
                return Err(ChangeError::Refused(format!(
                    "`{url}` is not an {}:// URL like this group's members' ({own}): the members of a group all \
                     serve TLS (https://, with --tls-cert) or none does",
                    scheme(own)
                )));
            }
        }
        let id = self.change(Change::Add(url)).await?;
        Ok((id, self.urls()))
    }

    /// Removes member `id` once the change is applied here; every member's URL then.
    pub async fn remove_member(&self, id: u64) -> Result<BTreeMap<u64, String>, ChangeError> {
        self.change(Change::Remove(id)).await?;
        Ok(self.urls())
    }

    async fn change(&self, change: Change) -> Result<u64, ChangeError> {
        match self.member.change(change).await {
            Ok(id) => Ok(id),
            Err(ProposeError::NotLeader { .. } | ProposeError::Superseded { .. }) => {
                Err(ChangeError::NotLeader(self.not_serving()))
            }
            Err(ProposeError::ChangePending) => Err(ChangeError::Pending),
            Err(ProposeError::BadMembership(why)) => Err(ChangeError::Refused(why)),
            Err(e) => Err(ChangeError::Failed(e.to_string())),
        }
    }

    /// The group as this member sees it now (`sweep coordinator members`, `/metrics`).
    pub fn view(&self) -> GroupView {
        let s = self.member.status();
        let urls = urls_of(&s.members, &self.started_with);
        let matched: std::collections::HashMap<u64, u64> = s.matched.iter().copied().collect();
        GroupView {
            id: self.id,
            term: s.term,
            leader: s.leader,
            applied: s.applied,
            last_index: s.last_index,
            serving: self.current.borrow().is_some(),
            members: urls
                .iter()
                .map(|(&id, url)| MemberView {
                    id,
                    url: url.clone(),
                    // Known on the leader only; its own log is its last index.
                    matched: if !s.is_leader {
                        None
                    } else if id == self.id {
                        Some(s.last_index)
                    } else {
                        matched.get(&id).copied()
                    },
                })
                .collect(),
        }
    }

    /// Opens a coordinator whenever the member leads and closes it when it stops leading, until `stop` turns
    /// true; then closes the one open and returns.
    pub async fn run(
        self: Arc<Self>,
        store: Arc<Store>,
        cfg: CoordinatorConfig,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut status = self.member.watch();
        // When this member stopped knowing another member as the leader: leases that leader granted could not
        // be renewed from a little before then (an election timeout) until this one serves.
        let mut lost_leader: Option<Instant> = None;
        // Whether a leader (this member included) served since this process started: if not, the group is
        // starting together and, as after a single coordinator's restart, leases are not extended.
        let mut knew_leader = false;
        loop {
            let term = loop {
                let s = status.borrow_and_update().clone();
                if s.is_leader {
                    if knew_leader && lost_leader.is_none() {
                        lost_leader = Some(Instant::now());
                    }
                    break s.term;
                }
                if s.leader.is_some_and(|l| l != self.id) {
                    knew_leader = true;
                    lost_leader = None;
                } else if knew_leader && lost_leader.is_none() {
                    lost_leader = Some(Instant::now());
                }
                tokio::select! {
                    r = status.changed() => if r.is_err() { return },
                    _ = stop.wait_for(|s| *s) => return,
                }
            };
            let Some(coord) = self.open(&store, &cfg, term, lost_leader).await else {
                tokio::select! {
                    _ = tokio::time::sleep(RETRY_AFTER) => continue,
                    _ = stop.wait_for(|s| *s) => return,
                }
            };
            let tasks = Tasks::start(&coord);
            self.current.send_replace(Some((coord.clone(), term)));
            info!(member = self.id, term, "leading: serving clients");
            let (stopping, store_failed) = tokio::select! {
                r = status.wait_for(|s| !(s.is_leader && s.term == term)) => (r.is_err(), None),
                _ = stop.wait_for(|s| *s) => (true, None),
                why = coord.store_failed() => (false, Some(why)),
            };
            self.current.send_replace(None);
            coord.begin_stopping();
            tasks.stop().await;
            drop(coord);
            if stopping {
                return;
            }
            if let Some(why) = store_failed {
                // A leader that cannot commit would hold the group: it stops serving, hands the leadership to
                // the member furthest along, and opens a coordinator afresh from its store if it leads again.
                warn!(member = self.id, term, error = %why, "cannot commit as the leader: stepping down");
                self.member.step_down().await;
                let ended = status.wait_for(|s| !(s.is_leader && s.term == term));
                tokio::select! {
                    _ = tokio::time::timeout(STEP_DOWN_WAIT, ended) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
            let now = self.member.status();
            warn!(member = self.id, term, new_term = now.term, leader = ?now.leader, "no longer leading: stopped serving clients");
            knew_leader = true;
            lost_leader = Some(Instant::now());
        }
    }

    /// Brings the store up to date with everything committed before `term` and opens the coordinator over it;
    /// `None` (logged) when the member stopped leading meanwhile or the store cannot be loaded.
    async fn open(
        &self,
        store: &Arc<Store>,
        cfg: &CoordinatorConfig,
        term: u64,
        lost_leader: Option<Instant>,
    ) -> Option<Arc<Coordinator>> {
        let barrier = match encode_entry(&[]) {
            Ok(e) => e,
            Err(e) => {
                warn!(error = %e, "cannot encode an empty entry");
                return None;
            }
        };
        if let Err(e) = self.member.propose(barrier).await {
            info!(member = self.id, term, error = %e, "not leading after all");
            return None;
        }
        let (store, cfg, member, metrics) = (
            store.clone(),
            cfg.clone(),
            self.member.clone(),
            self.metrics.clone(),
        );
        let opened = tokio::task::spawn_blocking(move || {
            Coordinator::open_member(store, cfg, member, metrics)
        })
        .await;
        let coord = match opened {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                warn!(member = self.id, error = %e, "the store does not load; not serving");
                return None;
            }
            Err(e) => {
                warn!(member = self.id, error = %e, "loading the store crashed; not serving");
                return None;
            }
        };
        let s = self.member.status();
        if !(s.is_leader && s.term == term) {
            return None;
        }
        if let Some(lost) = lost_leader {
            let gap = lost.elapsed() + self.election_timeout;
            coord.extend_leases(u64::try_from(gap.as_millis()).unwrap_or(u64::MAX));
        }
        Some(coord)
    }
}

/// The scheme of a member's URL (`http`, `https`).
fn scheme(url: &str) -> &str {
    url.split_once("://").map_or("", |(s, _)| s)
}

/// Whether the member at `url` serves TLS: the one rule for a group's URLs. A member serves what it is called
/// with, TLS only at `https://` and plain gRPC at `http://`, and every member calls the others with one TLS
/// setting, so a group's members are all at `https://` URLs (each with a certificate) or all at `http://`.
pub fn serves_tls(url: &str) -> bool {
    scheme(url) == "https"
}

/// The members' URLs: the applied membership's, else the ones started with.
fn urls_of(
    members: &BTreeMap<u64, String>,
    started_with: &BTreeMap<u64, String>,
) -> BTreeMap<u64, String> {
    if members.is_empty() {
        return started_with.clone();
    }
    members
        .iter()
        .map(|(&id, url)| {
            let url = match url.is_empty() {
                true => started_with.get(&id).cloned().unwrap_or_default(),
                false => url.clone(),
            };
            (id, url)
        })
        .collect()
}

/// Why a membership change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("this member does not lead")]
    NotLeader(NotServing),
    #[error("another membership change is under way; try again once it is applied")]
    Pending,
    #[error("{0}")]
    Refused(String),
    #[error("the change was not made: {0}")]
    Failed(String),
}

/// Why a member cannot start.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("cannot open the consensus log in {}: {source}", path.display())]
    Open {
        path: std::path::PathBuf,
        source: sled::Error,
    },
    #[error(
        "{} holds a single coordinator's store with {jobs} job(s): a replicated group starts from empty stores \
         (keep running it without --peers, or start the group in new directories)",
        path.display()
    )]
    NotEmpty {
        path: std::path::PathBuf,
        jobs: usize,
    },
    #[error(
        "{} is the directory of member {stored}, not {given}: a member keeps its id for life (give --id {stored}, \
         or start member {given} in its own directory)",
        path.display()
    )]
    OtherMember {
        path: std::path::PathBuf,
        stored: u64,
        given: u64,
    },
    #[error("the consensus log: {0}")]
    Replicate(#[from] sweep_replicate::ReplicateError),
    #[error("the consensus log: {0}")]
    Sled(#[from] sled::Error),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// Where a member keeps its consensus log, inside its data directory beside the store's files.
pub const LOG_DIR: &str = "consensus";

/// The snapshot files of the member whose data directory is `data` (beside its consensus log).
pub fn snapshot_files(data: &std::path::Path) -> Result<crate::store::SnapshotFiles, MemberError> {
    Ok(crate::store::SnapshotFiles::open(
        data.join(LOG_DIR).join("snapshots"),
    )?)
}

/// The id of the member whose data directory `data` is, if it is one (a single coordinator refuses such a
/// directory: writing to it outside consensus would make that member's store differ from the others').
pub fn member_of(data: &std::path::Path) -> Option<u64> {
    let text = std::fs::read_to_string(data.join(LOG_DIR).join("member")).ok()?;
    text.trim().parse().ok()
}

/// Opens member `id`'s consensus log in `data` (beside its store). A new log founds the group of `founders`
/// (id to URL), or, for a member being added (`None`), stays empty until the leader sends a snapshot. Refuses
/// a directory of another member, and a new log beside a store that already holds jobs: every founding
/// member starts from the same (empty) state, and an added member's store is replaced by the snapshot.
pub fn open_log(
    data: &std::path::Path,
    id: u64,
    founders: Option<&BTreeMap<u64, String>>,
    store: &Store,
) -> Result<LogStore, MemberError> {
    let dir = data.join(LOG_DIR);
    let known = member_of(data);
    if let Some(stored) = known {
        if stored != id {
            return Err(MemberError::OtherMember {
                path: data.into(),
                stored,
                given: id,
            });
        }
    }
    let db = sled::Config::new()
        .path(&dir)
        .open()
        .map_err(|source| MemberError::Open {
            path: dir.clone(),
            source,
        })?;
    let mut log = sweep_replicate::LogStore::open(db.open_tree("raft")?)?;
    if !log.is_initialized() {
        let jobs = store.load()?.jobs.len();
        if jobs > 0 {
            return Err(MemberError::NotEmpty {
                path: data.into(),
                jobs,
            });
        }
        // A member directory with an empty log is an added member still waiting for its first snapshot
        // (founders write their id only after bootstrapping): it never founds a group of its own.
        if let (Some(founders), None) = (founders, known) {
            let members = sweep_replicate::Members::new(founders.clone());
            log.bootstrap_members(&members, Vec::new())?;
        }
    }
    let marker = dir.join("member");
    if !marker.exists() {
        std::fs::write(&marker, format!("{id}\n")).map_err(|e| MemberError::Open {
            path: marker.clone(),
            source: sled::Error::Io(e),
        })?;
    }
    Ok(log)
}
