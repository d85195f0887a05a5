//! Clients follow the leader of a replicated coordinator, against fake members served in this process on
//! loopback: a leader that answers, followers that answer "not the leader" (naming the leader or not), a member
//! lost mid-call, and URLs where nothing listens. Every call is bounded, so every test ends.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sweep_client::{Client, ClientError, ClientSecurity};
use sweep_proto::v1::{self, jobs_server};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

/// What a fake member does with every call.
#[derive(Clone)]
enum Role {
    /// Answers: `ListJobs` with this many live workers (to tell leaders apart), a submit with job 1, a watch
    /// with one snapshot.
    Leader(u32),
    /// Not the leader: names this one, or none (an election).
    Follower(Option<String>),
    /// Loses every call on the way, as a member that went away mid-call does.
    Lost,
}

#[derive(Clone)]
struct Member {
    role: Role,
    /// The methods called, in order.
    calls: Arc<Mutex<Vec<&'static str>>>,
}

type Answer<T> = Result<Response<T>, Status>;

impl Member {
    /// Records the call and answers it unless this member is the leader.
    fn enter(&self, method: &'static str) -> Result<u32, Status> {
        self.calls.lock().unwrap().push(method);
        match &self.role {
            Role::Leader(n) => Ok(*n),
            Role::Follower(leader) => Err(sweep_proto::not_leader(leader.as_deref())),
            Role::Lost => Err(Status::unavailable(
                "error trying to connect: connection reset",
            )),
        }
    }

    fn unimplemented<T>(&self, method: &'static str) -> Answer<T> {
        self.enter(method)?;
        Err(Status::unimplemented(method))
    }
}

type Events<T> = tokio_stream::Iter<std::vec::IntoIter<Result<T, Status>>>;

#[tonic::async_trait]
impl jobs_server::Jobs for Member {
    async fn submit(&self, _: Request<v1::SubmitRequest>) -> Answer<v1::SubmitResponse> {
        self.enter("submit")?;
        Ok(Response::new(v1::SubmitResponse {
            job: Some(v1::JobInfo {
                id: 1,
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn list_jobs(&self, _: Request<v1::ListJobsRequest>) -> Answer<v1::ListJobsResponse> {
        let n = self.enter("list_jobs")?;
        Ok(Response::new(v1::ListJobsResponse {
            workers: n,
            ..Default::default()
        }))
    }

    async fn job_status(&self, _: Request<v1::JobRequest>) -> Answer<v1::JobInfo> {
        self.unimplemented("job_status")
    }

    type WatchStream = Events<v1::WatchEvent>;

    async fn watch(&self, _: Request<v1::WatchRequest>) -> Answer<Self::WatchStream> {
        let n = self.enter("watch")?;
        let event = v1::WatchEvent {
            workers: n,
            ..Default::default()
        };
        Ok(Response::new(tokio_stream::iter(vec![Ok(event)])))
    }

    async fn results(&self, _: Request<v1::ResultsRequest>) -> Answer<v1::ResultsResponse> {
        self.unimplemented("results")
    }

    async fn cancel(&self, _: Request<v1::JobRequest>) -> Answer<v1::JobInfo> {
        self.unimplemented("cancel")
    }

    async fn pause(&self, _: Request<v1::JobRequest>) -> Answer<v1::JobInfo> {
        self.unimplemented("pause")
    }

    async fn resume(&self, _: Request<v1::JobRequest>) -> Answer<v1::JobInfo> {
        self.unimplemented("resume")
    }

    async fn list_workers(
        &self,
        _: Request<v1::ListWorkersRequest>,
    ) -> Answer<v1::ListWorkersResponse> {
        self.unimplemented("list_workers")
    }

    async fn drain(&self, _: Request<v1::DrainRequest>) -> Answer<v1::WorkerStatus> {
        self.unimplemented("drain")
    }

    async fn ship(
        &self,
        _: Request<tonic::Streaming<v1::ArtifactPiece>>,
    ) -> Answer<v1::ShipResponse> {
        self.unimplemented("ship")
    }

    type SolutionsStream = Events<v1::SolutionsPiece>;

    async fn solutions(&self, _: Request<v1::JobRequest>) -> Answer<Self::SolutionsStream> {
        self.unimplemented("solutions")
    }

    async fn set_share(&self, _: Request<v1::SetShareRequest>) -> Answer<v1::IdentityInfo> {
        self.unimplemented("set_share")
    }
    async fn members(&self, _: Request<v1::MembersRequest>) -> Answer<v1::MembersReply> {
        self.unimplemented("members")
    }
    async fn add_member(&self, _: Request<v1::AddMemberRequest>) -> Answer<v1::AddMemberReply> {
        self.unimplemented("add_member")
    }
    async fn remove_member(&self, _: Request<v1::RemoveMemberRequest>) -> Answer<v1::MembersReply> {
        self.unimplemented("remove_member")
    }
}

/// A loopback listener and its URL, bound before any member is made, so members can name each other.
async fn bind() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// Serves `role` on `listener` until the test's runtime ends; returns the calls it gets.
fn serve(listener: tokio::net::TcpListener, role: Role) -> Arc<Mutex<Vec<&'static str>>> {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let member = Member {
        role,
        calls: calls.clone(),
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(jobs_server::JobsServer::new(member))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    calls
}

/// A URL where nothing listens: a port bound, then let go.
fn dead() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    format!("http://127.0.0.1:{port}")
}

fn count(calls: &Arc<Mutex<Vec<&'static str>>>, method: &str) -> usize {
    calls
        .lock()
        .unwrap()
        .iter()
        .filter(|m| **m == method)
        .count()
}

async fn connect(list: &str) -> Result<Client, ClientError> {
    Client::connect(list, &ClientSecurity::default()).await
}

/// Long enough for any bounded call in these tests (at most 8 attempts, 4.5 s of pauses), short enough that a
/// loop that is not bounded fails the test rather than hangs it.
const BOUND: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_dead_member_is_passed_over_and_a_follower_leads_to_the_leader() {
    let (leader_l, leader) = bind().await;
    let (follower_l, follower) = bind().await;
    let on_leader = serve(leader_l, Role::Leader(7));
    let on_follower = serve(follower_l, Role::Follower(Some(leader.clone())));
    let mut c = connect(&format!("{}, {follower}", dead())).await.unwrap();
    let answer = tokio::time::timeout(BOUND, c.list_jobs())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.workers, 7, "answered by the leader");
    assert_eq!(count(&on_follower, "list_jobs"), 1);
    assert_eq!(count(&on_leader, "list_jobs"), 1);
    assert_eq!(c.members().unwrap().current(), leader);
    // The next call goes to the leader straight away.
    c.list_jobs().await.unwrap();
    assert_eq!(count(&on_follower, "list_jobs"), 1);
    assert_eq!(count(&on_leader, "list_jobs"), 2);
}

#[tokio::test]
async fn a_follower_alone_names_the_leader_which_joins_the_members() {
    let (leader_l, leader) = bind().await;
    let (follower_l, follower) = bind().await;
    serve(leader_l, Role::Leader(3));
    serve(follower_l, Role::Follower(Some(leader.clone())));
    let mut c = connect(&follower).await.unwrap();
    let answer = tokio::time::timeout(BOUND, c.list_jobs())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.workers, 3);
    assert_eq!(c.members().unwrap().urls(), [follower, leader]);
    // A stream is started on the leader too.
    let mut c = connect(&c.members().unwrap().urls()[0]).await.unwrap();
    let mut stream = c.watch(0, 100).await.unwrap();
    let event = stream.next().await.unwrap().unwrap();
    assert_eq!(event.workers, 3);
}

#[tokio::test]
async fn members_that_cannot_be_reached_are_each_named() {
    let (a, b) = (dead(), dead());
    let e = connect(&format!("{a},{b}")).await.err().unwrap();
    assert!(e.is_unreachable(), "{e}");
    let ClientError::Unreachable { tried } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(tried.len(), 2, "{e}");
    let text = e.to_string();
    assert!(text.starts_with("cannot reach the coordinator"), "{text}");
    assert!(text.contains(&a) && text.contains(&b), "{text}");
}

#[tokio::test]
async fn members_that_name_each_other_forever_are_given_up_after_the_bound() {
    // One member that names itself as the leader, and two that name each other.
    let (liar_l, liar) = bind().await;
    let on_liar = serve(liar_l, Role::Follower(Some(liar.clone())));
    let (ping_l, ping) = bind().await;
    let (pong_l, pong) = bind().await;
    let on_ping = serve(ping_l, Role::Follower(Some(pong.clone())));
    let on_pong = serve(pong_l, Role::Follower(Some(ping.clone())));
    for (start, calls) in [
        (liar.as_str(), vec![&on_liar]),
        (ping.as_str(), vec![&on_ping, &on_pong]),
    ] {
        let mut c = connect(start).await.unwrap();
        let started = Instant::now();
        let e = tokio::time::timeout(BOUND, c.list_jobs())
            .await
            .expect("a call that is never answered ends")
            .unwrap_err();
        let sent: usize = calls.iter().map(|c| count(c, "list_jobs")).sum();
        // One member given: 2 x 1 + 2 attempts.
        assert_eq!(sent, 4, "{start}");
        let status = e.status().expect("the last answer");
        assert!(sweep_proto::is_not_leader(status), "{e}");
        assert!(e.is_unreachable(), "{e}");
        assert!(e.to_string().contains("not the leader"), "{e}");
        // Paused between attempts: 100 + 200 + 400 ms.
        assert!(
            started.elapsed() >= Duration::from_millis(700),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn a_submit_follows_a_not_leader_answer_but_is_not_sent_twice_after_a_lost_call() {
    let (leader_l, leader) = bind().await;
    let (electing_l, electing) = bind().await;
    let (lost_l, lost) = bind().await;
    let on_leader = serve(leader_l, Role::Leader(1));
    // During an election a member names no leader: the next member is tried.
    let on_electing = serve(electing_l, Role::Follower(None));
    let on_lost = serve(lost_l, Role::Lost);
    let submit = || v1::SubmitRequest {
        space: "star".into(),
        ..Default::default()
    };
    let mut c = connect(&format!("{electing},{leader}")).await.unwrap();
    let resp = tokio::time::timeout(BOUND, c.submit(submit()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.job.unwrap().id, 1);
    assert_eq!(count(&on_electing, "submit"), 1);
    assert_eq!(count(&on_leader, "submit"), 1);
    // A member lost mid-call may have made the job: the submit is not sent again...
    let mut c = connect(&format!("{lost},{leader}")).await.unwrap();
    let e = c.submit(submit()).await.unwrap_err();
    assert!(e.is_unreachable(), "{e}");
    assert_eq!(count(&on_lost, "submit"), 1);
    assert_eq!(count(&on_leader, "submit"), 1, "not sent twice");
    // ... but the client moved on, and a read is sent again at once.
    let mut c = connect(&format!("{lost},{leader}")).await.unwrap();
    assert_eq!(c.list_jobs().await.unwrap().workers, 1);
    assert_eq!(count(&on_lost, "list_jobs"), 1);
    assert_eq!(count(&on_leader, "list_jobs"), 1);
}
