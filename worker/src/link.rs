//! Which member of the coordinator the worker calls, and its clients of that member.
//!
//! A worker is given one coordinator URL, or the URLs of a replicated coordinator's members (see
//! `sweep_client::Members`), of which only the leader serves. Every task calls through the [`Link`] and tells
//! it when a call failed: a not-leader answer moves the worker to the leader it names, and, when several
//! members were given, a member that cannot be reached moves it to the next one. The first call to a member
//! moved to registers this worker there, under the name it already has. Tasks keep retrying as they always did;
//! what was not acknowledged is simply sent again to the new member (a result sent twice is acknowledged as a
//! duplicate and counted once, since the coordinator keys results by job and chunk).
//!
//! With one URL and a coordinator that never answers "not the leader", nothing here ever moves: the one lazily
//! connected channel reconnects by itself, as before there were members.
//!
//! Every call goes through [`Link::call`], which gives it the deadline of what it does: a member that stopped
//! (SIGSTOP, a hung machine) or sits behind a link that drops packets still accepts connections in its
//! kernel, so without one a call waits forever. A call that runs out of time counts as a lost connection, and
//! a call still waiting on a member the worker has moved away from is given up at once, to be sent again to
//! the member moved to.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use sweep_client::{
    ClientSecurity, ConnectError, Members, ReportClient, TokenInterceptor, WorkClient,
};
use sweep_proto::deadline::{within, CallKind};
use tokio::sync::watch;
use tonic::Status;
use tracing::{debug, info, warn};

use crate::config::{register_request, WorkerConfig};

/// The clients of the member called now, and which move they were made after.
#[derive(Clone)]
pub(crate) struct Clients {
    /// Counts the moves to another member: a failure is reported with the generation whose call failed, so
    /// tasks that fail together on one member move the worker once.
    pub(crate) generation: u64,
    pub(crate) work: WorkClient,
    pub(crate) reports: ReportClient,
}

pub(crate) struct Link {
    /// How to reach a member; `None` for a coordinator in this process, the only one there is.
    route: Option<Route>,
    now: Mutex<Now>,
    /// Held while registering with a member moved to, so the tasks that find it new register once.
    registering: tokio::sync::Mutex<()>,
    /// The highest leader term seen in a lease: sent with heartbeats, results and failures, so that a leader
    /// deposed by a newer one refuses them instead of taking them (see `sweep_proto::TERM_METADATA`).
    term: AtomicU64,
    /// The generation of the clients now: calls made with older clients are given up when it changes.
    moved: watch::Sender<u64>,
}

struct Route {
    security: ClientSecurity,
    token: TokenInterceptor,
}

struct Now {
    /// `None` in process.
    members: Option<Members>,
    clients: Clients,
    /// Whether this worker registered with the member called now.
    registered: bool,
}

impl Link {
    /// The link `cfg` describes: a coordinator in this process, or the members in `cfg.connect`, the first one
    /// called first. Bad URLs, token or TLS files are reported here.
    pub(crate) fn new(cfg: &WorkerConfig) -> Result<Link, ConnectError> {
        let (route, members, (work, reports)) = match &cfg.in_process {
            Some(transport) => (
                None,
                None,
                sweep_client::work_client_in_process(transport.clone()),
            ),
            None => {
                let members = Members::parse(&cfg.connect, &cfg.security)?;
                let token = sweep_client::token_interceptor(&cfg.security)?;
                let clients = sweep_client::work_client_with(
                    members.current(),
                    &cfg.security,
                    token.clone(),
                )?;
                let route = Route {
                    security: cfg.security.clone(),
                    token,
                };
                (Some(route), Some(members), clients)
            }
        };
        Ok(Link {
            route,
            now: Mutex::new(Now {
                members,
                clients: Clients {
                    generation: 0,
                    work,
                    reports,
                },
                registered: false,
            }),
            registering: tokio::sync::Mutex::new(()),
            term: AtomicU64::new(0),
            moved: watch::channel(0).0,
        })
    }

    /// `call`, made with the clients of `generation`, given the deadline of `kind`, and given up as soon as
    /// the worker moves to another member meanwhile (another task found this one unreachable or deposed):
    /// both end in a status that [`Link::failed`] takes for a lost member. In process there is no network to
    /// go silent, and the call is awaited as it is.
    pub(crate) async fn call<T>(
        &self,
        generation: u64,
        kind: CallKind,
        call: impl Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> Result<T, Status> {
        if self.route.is_none() {
            return call.await.map(tonic::Response::into_inner);
        }
        let mut moved = self.moved.subscribe();
        tokio::select! {
            answer = within(kind.deadline(), call) => answer.map(tonic::Response::into_inner),
            _ = moved.wait_for(|now| *now != generation) => Err(Status::unavailable(
                "given up: the worker moved to another member of the coordinator",
            )),
        }
    }

    /// A lease granted in `term` arrived.
    pub(crate) fn saw_term(&self, term: u64) {
        self.term.fetch_max(term, Ordering::Relaxed);
    }

    /// The coordinator called does not know this worker (a restart of a single coordinator, or a new group on
    /// the same addresses, whose terms start again): terms seen before mean nothing to it. A member that took
    /// over from a leader knows the workers from the replicated store, so a leader change keeps the term.
    pub(crate) fn forget_term(&self) {
        self.term.store(0, Ordering::Relaxed);
    }

    /// `message` as a request carrying the highest term seen (nothing while none was: a single coordinator).
    pub(crate) fn stamped<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        let term = self.term.load(Ordering::Relaxed);
        if term > 0 {
            request.metadata_mut().insert(
                sweep_proto::TERM_METADATA,
                tonic::metadata::AsciiMetadataValue::from(term),
            );
        }
        request
    }

    fn lock(&self) -> MutexGuard<'_, Now> {
        self.now.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The clients of the member called now, registered with or not (the first registration uses this).
    pub(crate) fn clients(&self) -> Clients {
        self.lock().clients.clone()
    }

    /// The member called now (`None` in process).
    pub(crate) fn member(&self) -> Option<String> {
        self.lock()
            .members
            .as_ref()
            .map(|m| m.current().to_string())
    }

    /// Notes that this worker registered with the member of `generation`.
    pub(crate) fn registered(&self, generation: u64) {
        let mut now = self.lock();
        if now.clients.generation == generation {
            now.registered = true;
        }
    }

    /// The clients of the member called now, after registering this worker there as `worker_id` if the worker
    /// just moved to it. A failed registration is reported (and may move the worker on) and returned, to be
    /// retried as the call it came before.
    pub(crate) async fn ready(
        &self,
        cfg: &WorkerConfig,
        worker_id: &str,
    ) -> Result<Clients, Status> {
        {
            let now = self.lock();
            if now.registered {
                return Ok(now.clients.clone());
            }
        }
        let _one = self.registering.lock().await;
        let mut clients = {
            let now = self.lock();
            if now.registered {
                return Ok(now.clients.clone());
            }
            now.clients.clone()
        };
        let register = clients.work.register(register_request(cfg, worker_id));
        match self
            .call(clients.generation, CallKind::Quick, register)
            .await
        {
            Ok(answer) => {
                if answer.worker_id != worker_id {
                    warn!(worker = %worker_id, named = %answer.worker_id, "the member registered this worker under another name");
                }
                info!(member = ?self.member(), "registered with the coordinator's member");
                self.registered(clients.generation);
                Ok(clients)
            }
            Err(e) => {
                debug!(error = %e, "registering with the member failed");
                self.failed(clients.generation, &e);
                Err(e)
            }
        }
    }

    /// A call made with the clients of `generation` failed with `status`: moves to the leader a not-leader answer
    /// names, or to the next member after a not-leader answer that names none or a member that could not be
    /// reached. Nothing moves when another task moved already, in process, or when the move would land on the
    /// same member (one URL given).
    pub(crate) fn failed(&self, generation: u64, status: &Status) {
        let Some(route) = &self.route else {
            return;
        };
        let mut now = self.lock();
        let now = &mut *now;
        if now.clients.generation != generation {
            return;
        }
        let Some(members) = now.members.as_mut() else {
            return;
        };
        let from = members.current().to_string();
        let failover = members.failover(status, &route.security);
        let to = members.current().to_string();
        if to == from {
            return;
        }
        match sweep_client::work_client_with(&to, &route.security, route.token.clone()) {
            Ok((work, reports)) => {
                info!(%from, %to, ?failover, error = %status.message(), "moving to another member of the coordinator");
                now.clients = Clients {
                    generation: generation + 1,
                    work,
                    reports,
                };
                now.registered = false;
                self.moved.send_replace(generation + 1);
            }
            Err(e) => warn!(member = %to, error = %e, "cannot use this member of the coordinator"),
        }
    }
}

#[cfg(test)]
mod tests {
    use sweep_space::Registry;

    use super::*;

    fn link(connect: &str) -> Link {
        Link::new(&WorkerConfig::new(connect, 1, Registry::new())).unwrap()
    }

    /// The worker's moves between members, without a network: lazily connected clients make no connection.
    #[tokio::test]
    async fn a_worker_moves_to_the_named_leader_or_the_next_member_once_per_failure() {
        let l = link("http://a:1, http://b:2");
        assert_eq!(l.member().as_deref(), Some("http://a:1"));
        let first = l.clients().generation;
        l.registered(first);
        // Answers that are not about members move nothing.
        l.failed(first, &Status::not_found("no job 7"));
        l.failed(first, &Status::permission_denied("a user token"));
        assert_eq!(l.clients().generation, first);
        // Lost: the next member, which the worker must register with.
        l.failed(first, &Status::unavailable("transport error"));
        let second = l.clients().generation;
        assert_eq!(second, first + 1);
        assert_eq!(l.member().as_deref(), Some("http://b:2"));
        assert!(!l.lock().registered);
        // Other tasks whose calls failed on the old member do not move the worker again.
        l.failed(first, &Status::unavailable("transport error"));
        assert_eq!(
            (l.clients().generation, l.member().as_deref()),
            (second, Some("http://b:2"))
        );
        // Named leaders, new ones joining the members.
        l.failed(second, &sweep_proto::not_leader(Some("http://c:3")));
        assert_eq!(l.member().as_deref(), Some("http://c:3"));
        let third = l.clients().generation;
        l.failed(third, &sweep_proto::not_leader(Some("http://c:3")));
        assert_eq!(l.clients().generation, third, "already there");
    }

    /// One URL: a lost coordinator is called again on the same channel, which reconnects by itself, as before
    /// there were members; only a named leader moves the worker.
    #[tokio::test]
    async fn a_worker_given_one_url_stays_unless_a_leader_is_named() {
        let l = link("http://a:1");
        let first = l.clients().generation;
        l.registered(first);
        for s in [
            Status::unavailable("transport error"),
            Status::deadline_exceeded("slow"),
            sweep_proto::not_leader(None),
        ] {
            l.failed(first, &s);
            assert_eq!(l.clients().generation, first, "{s:?}");
            assert!(l.lock().registered);
        }
        l.failed(first, &sweep_proto::not_leader(Some("http://b:2")));
        assert_eq!(l.member().as_deref(), Some("http://b:2"));
    }

    #[test]
    fn bad_member_lists_are_refused_when_the_worker_starts() {
        let cfg = WorkerConfig::new("http://a:1,,http://b:2", 1, Registry::new());
        let e = Link::new(&cfg).err().unwrap();
        assert!(matches!(e, ConnectError::BadUrlList { .. }), "{e}");
    }
}
