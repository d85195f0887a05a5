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
//! Invariant: a proposal is answered `Ok(index)` only once the entry at `index` with the proposal's term has
//! been applied on this member, which means a majority has it durably.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use sweep_replicate::{Config, LogStore, Node, Outgoing, ReplicateError, StateMachine};
use tokio::sync::{mpsc, oneshot, watch};

/// Messages queued for one peer before newer ones are dropped (a peer that is down for long).
const PEER_QUEUE: usize = 4096;

/// One member's place in the group.
#[derive(Clone, Debug)]
pub struct MemberConfig {
    /// The consensus settings, with this member's id.
    pub raft: Config,
    /// The other members: id to the URL of their `Replication` service.
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
    #[error(transparent)]
    Replicate(#[from] ReplicateError),
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
    /// Why the member stopped taking part, once it has (it is not used again in this process).
    pub failure: Option<String>,
}

enum Cmd {
    Step(Vec<u8>),
    Propose(Vec<u8>, oneshot::Sender<Result<u64, ProposeError>>),
    Unreachable(u64),
    Snapshot { to: u64, delivered: bool },
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
        let (tx, rx) = oneshot::channel();
        self.cmd
            .send(Cmd::Propose(data, tx))
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

/// The messages for one peer, for a sender to carry.
pub struct PeerLink {
    pub from: u64,
    pub to: u64,
    /// The URL of the peer's `Replication` service.
    pub url: String,
    pub queue: mpsc::Receiver<Outgoing>,
    pub feedback: Feedback,
}

/// Opens the node over `store` and starts its task; returns the handle, the inbox for arriving messages, and a
/// link per peer for senders to carry (`grpc::replication::spawn_senders`). Must be called within a tokio
/// runtime.
pub fn start<S: StateMachine + Send + 'static>(
    config: MemberConfig,
    store: LogStore,
    sm: S,
) -> Result<(MemberHandle, Inbox, Vec<PeerLink>), ReplicateError> {
    let node = Node::new(&config.raft, store, sm)?;
    let id = config.raft.id;
    let (cmd_tx, cmd_rx) = mpsc::channel(PEER_QUEUE);
    let (status_tx, status_rx) = watch::channel(MemberStatus::default());
    let mut peers: HashMap<u64, mpsc::Sender<Outgoing>> = HashMap::new();
    let mut links = Vec::new();
    for (&peer, url) in &config.peers {
        let (tx, rx) = mpsc::channel(PEER_QUEUE);
        peers.insert(peer, tx);
        links.push(PeerLink {
            from: id,
            to: peer,
            url: url.clone(),
            queue: rx,
            feedback: Feedback {
                cmd: cmd_tx.clone(),
            },
        });
    }
    tokio::spawn(run(node, config.tick, cmd_rx, peers, status_tx));
    Ok((
        MemberHandle {
            cmd: cmd_tx.clone(),
            status: status_rx,
        },
        Inbox { id, cmd: cmd_tx },
        links,
    ))
}

type Waiting = BTreeMap<u64, (u64, oneshot::Sender<Result<u64, ProposeError>>)>;

async fn run<S: StateMachine>(
    mut node: Node<S>,
    tick: Duration,
    mut cmds: mpsc::Receiver<Cmd>,
    peers: HashMap<u64, mpsc::Sender<Outgoing>>,
    status: watch::Sender<MemberStatus>,
) {
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut waiting: Waiting = BTreeMap::new();
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
                            waiting.insert(index, (node.term(), reply));
                        }
                        Err(ReplicateError::NotLeader { leader }) => {
                            let _ = reply.send(Err(ProposeError::NotLeader { leader }));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e.into()));
                        }
                    }
                    Ok(())
                }
                Some(Cmd::Unreachable(peer)) => node.report_unreachable(peer),
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
        for m in out.messages {
            let Some(queue) = peers.get(&m.to) else {
                continue;
            };
            let (to, snapshot) = (m.to, m.snapshot);
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
                let Some((term, reply)) = waiting.remove(&index) else {
                    continue;
                };
                let committed = applied_terms
                    .get(&index)
                    .copied()
                    .or_else(|| node.entry_term(index))
                    == Some(term);
                let _ = reply.send(if committed {
                    Ok(index)
                } else {
                    Err(ProposeError::Superseded { index })
                });
            }
        }
    }
    for (_, (_, reply)) in waiting {
        let _ = reply.send(Err(ProposeError::Stopped));
    }
}
