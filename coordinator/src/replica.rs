//! A member of a replicated coordinator: the consensus node (`sweep-replicate`) driven by one task, ticked by
//! a tokio interval. The network side (the `Replication` service and a sender per peer) is in
//! `grpc::replication`; this module sees no generated types.
//!
//! The task owns the node (synchronous, never shared); everything else reaches it through one channel: the
//! [`Inbox`] passes arriving messages in, [`MemberHandle::propose`] passes a proposal in and waits until the
//! entry is applied, and each [`PeerLink`] takes the messages for one peer out, in order, and reports an
//! unreachable peer and the fate of snapshots back through its [`Feedback`]. A message that cannot be queued or
//! sent is dropped: the consensus protocol resends what matters.
//!
//! The peers are whoever the applied membership names (a member added or removed gets or loses its link as
//! the change is applied); a new member that has not caught up yet knows no membership and uses the peers it
//! was started with.
//!
//! Invariant: a proposal is answered `Ok(index)` only once the entry at `index` with the proposal's term has
//! been applied on this member, which means a majority has it durably.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use sweep_replicate::{Config, LogStore, Membership, Node, Outgoing, ReplicateError, StateMachine};
use tokio::sync::{mpsc, oneshot, watch};

/// The failure of a member that the group removed.
pub const REMOVED: &str = "this member was removed from the group";

/// Messages queued for one peer before newer ones are dropped (a peer that is down for long).
const PEER_QUEUE: usize = 4096;

/// One member's place in the group.
#[derive(Clone, Debug)]
pub struct MemberConfig {
    /// The consensus settings, with this member's id.
    pub raft: Config,
    /// The other members: id to the URL of their `Replication` service, until the log's membership says
    /// otherwise (a new member's first peers; the founding ones).
    pub peers: BTreeMap<u64, String>,
    /// The length of one tick (elections take `raft.election_tick` to twice that many).
    pub tick: Duration,
}

impl MemberConfig {
    /// Member `id` with the consensus defaults (elections after 10 to 20 silent ticks, heartbeats every 2).
    pub fn new(id: u64, peers: BTreeMap<u64, String>, tick: Duration) -> MemberConfig {
        MemberConfig {
            raft: Config::new(id),
            peers,
            tick,
        }
    }

    /// The longest a follower waits without hearing from a leader before it campaigns.
    pub fn election_timeout(&self) -> Duration {
        self.tick * 2 * u32::try_from(self.raft.election_tick).unwrap_or(u32::MAX)
    }
}

/// Why a proposal was not committed.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error("this member is not the leader (the leader is {leader:?})")]
    NotLeader { leader: Option<u64> },
    #[error(
        "the proposal was replaced by another leader's entry at index {index} before it committed"
    )]
    Superseded { index: u64 },
    #[error("the member has stopped")]
    Stopped,
    #[error("another membership change is under way; try again once it is applied")]
    ChangePending,
    #[error("{0}")]
    BadMembership(String),
    #[error(transparent)]
    Replicate(ReplicateError),
}

impl From<ReplicateError> for ProposeError {
    fn from(e: ReplicateError) -> Self {
        match e {
            ReplicateError::NotLeader { leader } => ProposeError::NotLeader { leader },
            ReplicateError::ConfChangePending => ProposeError::ChangePending,
            ReplicateError::BadMembership(why) => ProposeError::BadMembership(why),
            e => ProposeError::Replicate(e),
        }
    }
}

/// What a member knows of the group, as it changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberStatus {
    pub term: u64,
    pub leader: Option<u64>,
    pub is_leader: bool,
    pub applied: u64,
    /// The last index in this member's log.
    pub last_index: u64,
    /// On the leader: for each other member, the last index known to be in its log.
    pub matched: Vec<(u64, u64)>,
    /// Every member's address (this one's included) as of the applied index; empty on a new member that has
    /// not caught up yet.
    pub members: Arc<BTreeMap<u64, String>>,
    /// Why the member stopped taking part, once it has (it is not used again in this process).
    pub failure: Option<String>,
}

/// A membership change asked of the leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new empty member at this address, under the next free id.
    Add(String),
    Remove(u64),
}

type Reply = oneshot::Sender<Result<u64, ProposeError>>;

enum Cmd {
    Step(Vec<u8>),
    Propose(Vec<u8>, Reply),
    /// The reply carries the member's id once the change is applied.
    Change(Change, Reply),
    Unreachable(u64),
    /// Hand the leadership to another member (see `Node::transfer_leadership`).
    StepDown,
    Snapshot {
        to: u64,
        delivered: bool,
    },
    Stop,
}

/// The handle of a running member.
#[derive(Clone)]
pub struct MemberHandle {
    cmd: mpsc::Sender<Cmd>,
    status: watch::Receiver<MemberStatus>,
}

impl MemberHandle {
    /// Proposes `data` and waits until it is committed and applied here (its index), or why not.
    pub async fn propose(&self, data: Vec<u8>) -> Result<u64, ProposeError> {
        self.ask(|tx| Cmd::Propose(data, tx)).await
    }

    /// Changes the membership and waits until the change is applied here; returns the id of the member added
    /// or removed. Adding the address of a member returns its id, changing nothing.
    pub async fn change(&self, change: Change) -> Result<u64, ProposeError> {
        self.ask(|tx| Cmd::Change(change, tx)).await
    }

    /// Sends the command `make` builds around a reply and waits for that reply. A member whose loop has
    /// ended takes no command and sends no reply: either way, it stopped.
    async fn ask(&self, make: impl FnOnce(Reply) -> Cmd) -> Result<u64, ProposeError> {
        let (tx, rx) = oneshot::channel();
        self.cmd
            .send(make(tx))
            .await
            .map_err(|_| ProposeError::Stopped)?;
        rx.await.map_err(|_| ProposeError::Stopped)?
    }

    /// The member's view of the group now.
    pub fn status(&self) -> MemberStatus {
        self.status.borrow().clone()
    }

    /// A receiver that sees every change of the member's view.
    pub fn watch(&self) -> watch::Receiver<MemberStatus> {
        self.status.clone()
    }

    /// Resolves with why the member stopped taking part, if it stops by itself (not by [`MemberHandle::stop`]).
    pub async fn failed(&self) -> String {
        let mut rx = self.status.clone();
        loop {
            if let Some(why) = rx.borrow_and_update().failure.clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                // Stopped on request: never resolves, as nothing failed.
                return std::future::pending().await;
            }
        }
    }

    /// Asks the member, if it leads, to hand the leadership to the member whose log is furthest along.
    pub async fn step_down(&self) {
        let _ = self.cmd.send(Cmd::StepDown).await;
    }

    /// Stops the member's task (its store stays as it is, to be reopened).
    pub async fn stop(&self) {
        let _ = self.cmd.send(Cmd::Stop).await;
    }
}

/// Where a member's arriving messages go in.
#[derive(Clone)]
pub struct Inbox {
    id: u64,
    cmd: mpsc::Sender<Cmd>,
}

/// The member's task has stopped.
#[derive(Debug, thiserror::Error)]
#[error("the member has stopped")]
pub struct Stopped;

impl Inbox {
    /// The member's id: messages for another are not for this inbox.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Passes encoded consensus messages to the member, in order.
    pub async fn deliver(&self, messages: Vec<Vec<u8>>) -> Result<(), Stopped> {
        for m in messages {
            self.cmd.send(Cmd::Step(m)).await.map_err(|_| Stopped)?;
        }
        Ok(())
    }
}

/// What a peer's sender tells the member about its messages.
#[derive(Clone)]
pub struct Feedback {
    cmd: mpsc::Sender<Cmd>,
}

impl Feedback {
    /// The peer could not be reached; `Err` once the member has stopped (the sender ends too).
    pub async fn unreachable(&self, peer: u64) -> Result<(), Stopped> {
        self.cmd
            .send(Cmd::Unreachable(peer))
            .await
            .map_err(|_| Stopped)
    }

    /// Whether a snapshot message reached `to` (the leader sends it nothing more until it knows).
    pub async fn snapshot(&self, to: u64, delivered: bool) -> Result<(), Stopped> {
        self.cmd
            .send(Cmd::Snapshot { to, delivered })
            .await
            .map_err(|_| Stopped)
    }
}

/// Starts whatever carries a peer link's messages (a sender task); called again for each member added.
pub type Carrier = Arc<dyn Fn(PeerLink) + Send + Sync>;

/// The messages for one peer, for a sender to carry. Dropping the member's end (the peer was removed) ends
/// the queue.
pub struct PeerLink {
    pub from: u64,
    pub to: u64,
    /// The URL of the peer's `Replication` service.
    pub url: String,
    pub queue: mpsc::Receiver<Outgoing>,
    pub feedback: Feedback,
}

/// Opens the node over `store` and starts its task; returns the handle and the inbox for arriving messages.
/// `carrier` is given a link per peer, now and whenever a member is added (`grpc::replication::carrier`).
/// Must be called within a tokio runtime.
pub fn start<S: StateMachine + Send + 'static>(
    config: MemberConfig,
    store: LogStore,
    sm: S,
    carrier: Carrier,
) -> Result<(MemberHandle, Inbox), ReplicateError> {
    let node = Node::new(&config.raft, store, sm)?;
    let id = config.raft.id;
    let (cmd_tx, cmd_rx) = mpsc::channel(PEER_QUEUE);
    let (status_tx, status_rx) = watch::channel(MemberStatus::default());
    let peers = Peers {
        from: id,
        started_with: config.peers,
        links: HashMap::new(),
        carrier,
        feedback: Feedback {
            cmd: cmd_tx.clone(),
        },
    };
    tokio::spawn(run(node, config.tick, cmd_rx, peers, status_tx));
    Ok((
        MemberHandle {
            cmd: cmd_tx.clone(),
            status: status_rx,
        },
        Inbox { id, cmd: cmd_tx },
    ))
}

/// The member's links to its peers, following the membership.
struct Peers {
    from: u64,
    /// The peers to use while the log names no members (a new member before its first snapshot).
    started_with: BTreeMap<u64, String>,
    /// Each peer's address and the queue its sender reads.
    links: HashMap<u64, (String, mpsc::Sender<Outgoing>)>,
    carrier: Carrier,
    feedback: Feedback,
}

impl Peers {
    /// Opens a link to every peer of `members` (or of the peers started with, while it is empty) and closes
    /// the links to anyone else.
    fn follow(&mut self, members: &BTreeMap<u64, String>) {
        // A member the log names without an address (its group was bootstrapped without addresses) is
        // reached at the URL it was started with.
        let wanted: BTreeMap<u64, String> = if members.is_empty() {
            self.started_with.clone()
        } else {
            members
                .iter()
                .filter_map(|(&id, url)| match url.is_empty() {
                    false => Some((id, url.clone())),
                    true => self.started_with.get(&id).map(|u| (id, u.clone())),
                })
                .collect()
        };
        self.links
            .retain(|id, (url, _)| wanted.get(id) == Some(url));
        for (&to, url) in &wanted {
            if to == self.from || self.links.contains_key(&to) {
                continue;
            }
            let (tx, rx) = mpsc::channel(PEER_QUEUE);
            self.links.insert(to, (url.clone(), tx));
            (self.carrier)(PeerLink {
                from: self.from,
                to,
                url: url.clone(),
                queue: rx,
                feedback: self.feedback.clone(),
            });
        }
    }

    fn queue(&self, to: u64) -> Option<&mpsc::Sender<Outgoing>> {
        self.links.get(&to).map(|(_, q)| q)
    }
}

/// Proposals waiting for their entry to be applied: index to (term, reply, the member id a change names).
type Waiting = BTreeMap<u64, (u64, Reply, Option<u64>)>;

async fn run<S: StateMachine>(
    mut node: Node<S>,
    tick: Duration,
    mut cmds: mpsc::Receiver<Cmd>,
    mut peers: Peers,
    status: watch::Sender<MemberStatus>,
) {
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut waiting: Waiting = BTreeMap::new();
    let mut members = Arc::new(node.members().addresses.clone());
    peers.follow(&members);
    // Whether the applied membership ever named this member: once it did, a membership without it means
    // the member was removed.
    let mut was_member = node.members().addresses.contains_key(&node.id());
    loop {
        let step = tokio::select! {
            _ = ticker.tick() => node.tick(),
            cmd = cmds.recv() => match cmd {
                None | Some(Cmd::Stop) => break,
                Some(Cmd::Step(bytes)) => {
                    // A message the node refuses (garbled, from an unknown member) is the sender's problem.
                    if let Err(e) = node.step(&bytes) {
                        tracing::debug!(member = node.id(), "a consensus message was refused: {e}");
                    }
                    Ok(())
                }
                Some(Cmd::Propose(data, reply)) => {
                    match node.propose(data) {
                        Ok(index) => {
                            waiting.insert(index, (node.term(), reply, None));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e.into()));
                        }
                    }
                    Ok(())
                }
                Some(Cmd::Change(change, reply)) => {
                    let proposed = match change {
                        Change::Add(address) => node.propose_add(address),
                        Change::Remove(id) => node
                            .propose_conf_change(Membership::RemoveVoter(id))
                            .map(|index| (id, Some(index))),
                    };
                    match proposed {
                        Ok((id, Some(index))) => {
                            waiting.insert(index, (node.term(), reply, Some(id)));
                        }
                        Ok((id, None)) => {
                            let _ = reply.send(Ok(id));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e.into()));
                        }
                    }
                    Ok(())
                }
                Some(Cmd::Unreachable(peer)) => node.report_unreachable(peer),
                Some(Cmd::StepDown) => node.transfer_leadership().map(|to| {
                    tracing::warn!(member = node.id(), ?to, "handing the leadership over");
                }),
                Some(Cmd::Snapshot { to, delivered }) => node.report_snapshot(to, delivered),
            },
        };
        let out = step.and_then(|()| node.ready());
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                // A poisoned node is not trusted again in this process: it is reopened from its store.
                tracing::error!(member = node.id(), "the consensus node stopped: {e}");
                status.send_modify(|s| {
                    s.is_leader = false;
                    s.leader = None;
                    s.failure = Some(e.to_string());
                });
                break;
            }
        };
        // The membership changes rarely, and this runs for every message: compare before copying.
        if *members != node.members().addresses {
            members = Arc::new(node.members().addresses.clone());
            peers.follow(&members);
        }
        let removed = if members.contains_key(&node.id()) {
            was_member = true;
            false
        } else {
            was_member
        };
        for m in out.messages {
            let Some(queue) = peers.queue(m.to) else {
                continue;
            };
            let (to, snapshot) = (m.to, m.snapshot.is_some());
            if queue.try_send(m).is_err() && snapshot {
                let _ = node.report_snapshot(to, false);
            }
        }
        // Published before proposals are answered: whoever got `Ok(index)` sees `applied >= index`.
        status.send_if_modified(|s| {
            let now = MemberStatus {
                term: out.term,
                leader: out.leader,
                is_leader: out.is_leader,
                applied: node.applied(),
                last_index: node.last_index(),
                matched: node.progress(),
                members: members.clone(),
                failure: None,
            };
            let changed = *s != now;
            *s = now;
            changed
        });
        if !waiting.is_empty() {
            let applied_terms: HashMap<u64, u64> =
                out.applied.iter().map(|a| (a.index, a.term)).collect();
            let done: Vec<u64> = waiting
                .range(..=node.applied())
                .map(|(&index, _)| index)
                .collect();
            for index in done {
                let Some((term, reply, member)) = waiting.remove(&index) else {
                    continue;
                };
                let committed = applied_terms
                    .get(&index)
                    .copied()
                    .or_else(|| node.entry_term(index))
                    == Some(term);
                let _ = reply.send(if committed {
                    Ok(member.unwrap_or(index))
                } else {
                    Err(ProposeError::Superseded { index })
                });
            }
        }
        if removed {
            // A removed member is sent nothing more; its log would only mislead if it went on.
            let why = REMOVED.to_string();
            tracing::warn!(member = node.id(), "{why}");
            status.send_modify(|s| {
                s.is_leader = false;
                s.leader = None;
                s.failure = Some(why);
            });
            break;
        }
    }
    for (_, (_, reply, _)) in waiting {
        let _ = reply.send(Err(ProposeError::Stopped));
    }
}
