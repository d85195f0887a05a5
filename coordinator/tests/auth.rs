//! Tokens, TLS and limits of a real coordinator on loopback: every refusal has the right status and reaches no
//! handler, tokens rotate without losing a job, TLS refuses plain clients and (when asked) clients without a
//! certificate, and one client cannot make the coordinator hold or store unbounded data.
//!
//! Calls whose refusal is checked as the status on the wire go through raw tonic clients over `sweep-client`'s
//! token channel (what is sent, and how, is exactly what a client sends); the job controls of user tokens go
//! through `sweep-client` itself, as `sweep cancel` and the others do.

use sweep_testkit as common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::pki::{pki, Pki};
use common::FakeWorker;
use sweep_client::{ClientSecurity, SecureChannel, WorkClient as Work};
use sweep_coordinator::auth::Auth;
use sweep_coordinator::limits::Limits;
use sweep_coordinator::store::Store;
use sweep_coordinator::{CoordinatorConfig, ServeSecurity};
use sweep_proto::v1::{self, jobs_client::JobsClient};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

const WORKER: &str = "worker-token-aaaaaaaaaaaaaaaa";
const ADMIN: &str = "admin-token-bbbbbbbbbbbbbbbbbb";
const NEW_WORKER: &str = "worker-token-rotated-cccccccccc";

/// The common in-process server with a fresh store in its own directory, where the token files go too.
struct Server {
    server: common::Server,
    dir: tempfile::TempDir,
}

impl std::ops::Deref for Server {
    type Target = common::Server;
    fn deref(&self) -> &common::Server {
        &self.server
    }
}

impl Server {
    /// A coordinator on 127.0.0.1:0 with a fresh store, secured by `security(dir)` (token files go in `dir`).
    async fn start(limits: Limits, security: impl FnOnce(&Path) -> ServeSecurity) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let security = security(dir.path());
        let store = Store::open(&dir.path().join("store")).unwrap();
        let cfg = CoordinatorConfig {
            limits,
            registry: common::spaces(),
            ..CoordinatorConfig::default()
        };
        let server = common::Server::start_with(store, cfg, security, false).await;
        Server { server, dir }
    }

    /// A coordinator serving TLS only (and, with `require_client_cert`, only to clients with a certificate
    /// of the test CA), with the worker and admin tokens: it and the certificates its clients use.
    async fn start_tls(require_client_cert: bool) -> (Server, Pki) {
        let mut files = None;
        let server = Server::start(Limits::default(), |d| {
            let (sec, p) = tls_security(d, require_client_cert);
            files = Some(p);
            sec
        })
        .await;
        (server, files.expect("the security was made"))
    }

    async fn clients(&self, token: Option<&str>) -> (Work, JobsClient<SecureChannel>) {
        clients_as(&self.server, token).await
    }

    async fn stop(self) {
        self.server.stop().await
    }
}

/// Clients of both services on one connection to `server`, sending `token` (if any) with every call.
async fn clients_as(
    server: &common::Server,
    token: Option<&str>,
) -> (Work, JobsClient<SecureChannel>) {
    let ch = with_token(server.channel().await, token);
    (Work::new(ch.clone()), JobsClient::new(ch))
}

/// `channel` sending `token` (if any) as every `sweep-client` connection does.
fn with_token(channel: tonic::transport::Channel, token: Option<&str>) -> SecureChannel {
    let security = ClientSecurity {
        token: token.map(String::from),
        ..ClientSecurity::default()
    };
    let interceptor =
        sweep_client::token_interceptor(&security).expect("a token a client may send");
    sweep_client::secure(channel, interceptor)
}

/// Token files `worker.tokens` and `admin.tokens` in `dir`, and the auth that reads them.
fn token_files(dir: &Path, worker: &str, admin: &str) -> ServeSecurity {
    let (w, a) = (dir.join("worker.tokens"), dir.join("admin.tokens"));
    std::fs::write(&w, format!("# worker tokens\n{worker}\n")).unwrap();
    std::fs::write(&a, format!("{admin}\n")).unwrap();
    ServeSecurity {
        auth: Auth::from_files(Some(w), Some(a)).unwrap(),
        tls: None,
    }
}

fn star7(chunks: u64) -> v1::SubmitRequest {
    v1::SubmitRequest {
        space: "star".into(),
        params_json: r#"{"points": 7, "method": "backtrack"}"#.into(),
        chunks,
        ..Default::default()
    }
}

/// A watch of every job, updated every 50 ms.
fn every_job_often() -> v1::WatchRequest {
    v1::WatchRequest {
        job_id: 0,
        interval_ms: 50,
    }
}

/// Submits `req` through `jobs`, whose token must be allowed to: the job.
async fn submitted(jobs: &mut JobsClient<SecureChannel>, req: v1::SubmitRequest) -> v1::JobInfo {
    jobs.submit(req).await.unwrap().into_inner().job.unwrap()
}

/// The result of job `job`, read through `jobs`, as JSON.
async fn result_json(jobs: &mut JobsClient<SecureChannel>, job: u64) -> serde_json::Value {
    let r = jobs
        .results(v1::ResultsRequest {
            job_id: job,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    serde_json::from_str(&r.result_json).unwrap()
}

/// A worker registered as `name` for every built-in space, through `work`.
async fn register(work: &Work, name: &str) -> Result<FakeWorker, Status> {
    FakeWorker::register(work.clone(), name, &common::spaces()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_per_method() {
    let server = Server::start(Limits::default(), |d| token_files(d, WORKER, ADMIN)).await;

    for token in [
        None,
        Some("not-a-token-at-all-xxxxxxxx"),
        Some(&WORKER[..20]),
    ] {
        let (work, mut jobs) = server.clients(token).await;
        let e = jobs.list_jobs(v1::ListJobsRequest {}).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{token:?}: {e:?}");
        let e = register(&work, "w").await.err().expect("refused");
        assert_eq!(e.code(), Code::Unauthenticated, "{token:?}: {e:?}");
        let e = jobs.submit(star7(4)).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{token:?}: {e:?}");
        assert!(!e.message().contains(WORKER), "{e:?}");
    }
    let e = server
        .clients(None)
        .await
        .1
        .list_jobs(v1::ListJobsRequest {})
        .await
        .unwrap_err();
    assert!(e.message().contains("--token-file"), "{e:?}");

    // A worker token runs chunks and reads jobs, but may not change them.
    let (work, mut jobs) = server.clients(Some(WORKER)).await;
    let e = jobs.submit(star7(4)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().contains("Submit") && e.message().contains("admin"),
        "{e:?}"
    );
    let (_, mut admin) = server.clients(Some(ADMIN)).await;
    let job = submitted(&mut admin, star7(4)).await;
    for e in [
        jobs.cancel(v1::JobRequest { job_id: job.id })
            .await
            .unwrap_err(),
        jobs.pause(v1::JobRequest { job_id: job.id })
            .await
            .unwrap_err(),
        jobs.resume(v1::JobRequest { job_id: job.id })
            .await
            .unwrap_err(),
    ] {
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    }
    assert_eq!(
        jobs.list_jobs(v1::ListJobsRequest {})
            .await
            .unwrap()
            .into_inner()
            .jobs
            .len(),
        1
    );
    jobs.job_status(v1::JobRequest { job_id: job.id })
        .await
        .unwrap();
    let mut worker = register(&work, "w1").await.unwrap();
    assert_eq!(worker.run_chunks(4).await.unwrap(), 4);
    let v = result_json(&mut jobs, job.id).await;
    assert_eq!(v["solutions"], 1008, "{v}");
    // The admin token may do what a worker token may.
    let admin_work = server.clients(Some(ADMIN)).await.0;
    register(&admin_work, "w2").await.unwrap();
    // A done job cannot be paused, but the admin token is not what stops it.
    let e = admin
        .pause(v1::JobRequest { job_id: job.id })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    server.stop().await;
}

/// Polls until `f` gives a result whose `Ok`-ness is `want` (the file watcher reloads once a second).
async fn eventually<F, Fut, T>(want: bool, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Status>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if f().await.is_ok() == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "token reload not seen within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_worker_token_loses_no_job() {
    let server = Server::start(Limits::default(), |d| token_files(d, WORKER, ADMIN)).await;
    let worker_file: PathBuf = server.dir.path().join("worker.tokens");
    let (_, mut admin) = server.clients(Some(ADMIN)).await;
    let job = submitted(&mut admin, star7(12)).await;

    // The old token runs part of the job.
    let (old_work, _) = server.clients(Some(WORKER)).await;
    let mut old = register(&old_work, "old").await.unwrap();
    assert_eq!(old.run_chunks(4).await.unwrap(), 4);

    // Step 1: add the new token; both work while clients move over.
    std::fs::write(&worker_file, format!("{WORKER}\n{NEW_WORKER}\n")).unwrap();
    let (new_work, mut new_jobs) = server.clients(Some(NEW_WORKER)).await;
    eventually(true, || {
        let mut c = new_jobs.clone();
        async move { c.list_jobs(v1::ListJobsRequest {}).await }
    })
    .await;
    let mut new = register(&new_work, "new").await.unwrap();
    assert_eq!(new.run_chunks(4).await.unwrap(), 4);
    assert_eq!(old.run_chunks(2).await.unwrap(), 2);

    // Step 2: remove the old token; it is refused from then on, and the new one finishes the job.
    std::fs::write(&worker_file, format!("# rotated\n{NEW_WORKER}\n")).unwrap();
    eventually(false, || {
        let mut c = old_work.clone();
        let id = old.id.clone();
        // A heartbeat without leases changes nothing: probing must not lease chunks it will not run.
        async move {
            let req = v1::HeartbeatRequest {
                worker_id: id,
                progress: vec![],
            };
            c.heartbeat(req).await
        }
    })
    .await;
    let e = old.register_again().await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert_eq!(new.run_chunks(20).await.unwrap(), 2);

    let status = new_jobs
        .job_status(v1::JobRequest { job_id: job.id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.state(), v1::JobState::Done, "{status:?}");
    assert_eq!(
        status.completions, 12,
        "every chunk counted exactly once: {status:?}"
    );
    let v = result_json(&mut new_jobs, job.id).await;
    assert_eq!(
        (v["solutions"].as_u64(), v["unique"].as_u64()),
        (Some(1008), Some(72)),
        "{v}"
    );

    // A broken file (a half-written rotation) keeps the tokens in force.
    std::fs::write(&worker_file, "short\n").unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    new_jobs.list_jobs(v1::ListJobsRequest {}).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_coordinator_needs_no_token() {
    let server = Server::start(Limits::default(), |_| ServeSecurity::default()).await;
    let (_, mut jobs) = server.clients(None).await;
    jobs.submit(star7(2)).await.unwrap();
    server.stop().await;
}

fn tls_security(dir: &Path, require_client_cert: bool) -> (ServeSecurity, Pki) {
    let p = pki(dir);
    let client_ca = require_client_cert.then_some(p.ca.as_path());
    let tls = ServeSecurity::tls_from_files(&p.server_cert, &p.server_key, client_ca).unwrap();
    let mut sec = token_files(dir, WORKER, ADMIN);
    sec.tls = Some(tls);
    (sec, p)
}

async fn tls_jobs_as(
    url: &str,
    pki: &Pki,
    with_cert: bool,
    token: &str,
) -> Result<JobsClient<SecureChannel>, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(&pki.ca).unwrap()));
    if with_cert {
        tls = tls.identity(Identity::from_pem(
            std::fs::read(&pki.client_cert).unwrap(),
            std::fs::read(&pki.client_key).unwrap(),
        ));
    }
    let ch = Endpoint::from_shared(url.to_string())
        .unwrap()
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(JobsClient::new(with_token(ch, Some(token))))
}

async fn tls_jobs(
    url: &str,
    pki: &Pki,
    with_cert: bool,
) -> Result<JobsClient<SecureChannel>, String> {
    tls_jobs_as(url, pki, with_cert, ADMIN).await
}

/// Lists the jobs as the admin over TLS: whether the connection and the call were both accepted.
async fn list_over_tls(url: &str, pki: &Pki, with_cert: bool) -> Result<(), String> {
    tls_jobs(url, pki, with_cert)
        .await?
        .list_jobs(v1::ListJobsRequest {})
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_trusting_clients_and_refuses_plain_ones() {
    let pki_dir = tempfile::tempdir().unwrap();
    let (server, files) = Server::start_tls(false).await;
    assert!(server.url.starts_with("https://"));
    let mut jobs = tls_jobs(&server.url, &files, false).await.unwrap();
    jobs.submit(star7(2)).await.unwrap();
    // Tokens still apply inside TLS.
    let e = tls_jobs_as(&server.url, &files, false, WORKER)
        .await
        .unwrap()
        .submit(star7(2))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);

    // Plain HTTP/2 to a TLS port gets no answer.
    let plain = server.url.replace("https://", "http://");
    let plain_result = async {
        let ch = Endpoint::from_shared(plain)
            .unwrap()
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(3))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        JobsClient::new(with_token(ch, Some(ADMIN)))
            .list_jobs(v1::ListJobsRequest {})
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    assert!(plain_result.is_err(), "a plain client was served over TLS");

    // A client that trusts another CA refuses the server.
    let other = pki(pki_dir.path());
    let untrusting = list_over_tls(&server.url, &other, false).await;
    assert!(
        untrusting.is_err(),
        "a certificate from an unknown CA was accepted"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_when_a_client_ca_is_set() {
    let (server, files) = Server::start_tls(true).await;
    let without = list_over_tls(&server.url, &files, false).await;
    assert!(
        without.is_err(),
        "a client without a certificate was served"
    );
    let mut with = tls_jobs(&server.url, &files, true).await.unwrap();
    with.list_jobs(v1::ListJobsRequest {}).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_refuse_oversized_work_with_the_limit_named() {
    let limits = Limits {
        max_report_solutions: 2,
        max_watch_streams: 1,
        max_params_bytes: 100,
        ..Limits::default()
    };
    let server = Server::start(limits, |_| ServeSecurity::default()).await;
    let (work, mut jobs) = server.clients(None).await;

    let mut big = star7(2);
    big.params_json = format!(r#"{{"points": 7, "pad": "{}"}}"#, "x".repeat(200));
    let e = jobs.submit(big).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("--max-params-bytes"), "{e:?}");

    // One Watch stream at a time; the slot frees when the client goes away.
    let first = jobs.watch(every_job_often()).await.unwrap();
    let e = jobs.watch(every_job_often()).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("--max-watch-streams"), "{e:?}");
    drop(first);
    eventually(true, || {
        let mut c = jobs.clone();
        async move { c.watch(every_job_often()).await }
    })
    .await;

    // A report with more solutions than allowed is refused, the attempt counts, and the chunk is re-issued.
    let job = submitted(&mut jobs, star7(2)).await;
    let mut worker = register(&work, "flood").await.unwrap();
    let lease = worker.lease(1).await.unwrap().remove(0);
    let flood = v1::ChunkOutput {
        solutions: vec!["a".into(), "b".into(), "c".into()],
        ..Default::default()
    };
    let acks = worker
        .complete(vec![common::report(&lease, flood)])
        .await
        .unwrap();
    assert_eq!(acks[0].status, v1::AckStatus::Rejected as i32, "{acks:?}");
    assert!(
        acks[0].message.contains("--max-report-solutions"),
        "{acks:?}"
    );
    let status = jobs
        .job_status(v1::JobRequest { job_id: job.id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.chunks_done, 0, "{status:?}");
    assert_eq!(
        status.chunks_leased, 0,
        "the refused chunk went back: {status:?}"
    );
    server.stop().await;
}

/// Side by side, same process and workload: new connections (TCP + TLS handshake + one call) and calls on one
/// open connection, for an open plain coordinator and for one with TLS and tokens. Prints the figures.
/// Run: `cargo test --release -p sweep-coordinator --test auth -- --ignored --nocapture overhead`.
#[ignore = "a measurement, not a check; run it by name"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overhead_of_tls_and_tokens() {
    const CONNECTS: usize = 200;
    const CALLS: usize = 5000;
    let plain = Server::start(Limits::default(), |_| ServeSecurity::default()).await;
    let (secure, files) = Server::start_tls(false).await;
    // A new connection: TCP, and with `tls` the handshake and the worker token.
    let connect_to = |tls: bool| {
        let (plain, secure, files) = (&plain, &secure, &files);
        async move {
            if tls {
                tls_jobs_as(&secure.url, files, false, WORKER)
                    .await
                    .unwrap()
            } else {
                plain.clients(None).await.1
            }
        }
    };
    let mut rows = Vec::new();
    for tls in [false, true] {
        let t0 = Instant::now();
        for _ in 0..CONNECTS {
            let mut c = connect_to(tls).await;
            c.list_jobs(v1::ListJobsRequest {}).await.unwrap();
        }
        let connect = t0.elapsed().as_secs_f64() / CONNECTS as f64;
        let mut c = connect_to(tls).await;
        let t0 = Instant::now();
        for _ in 0..CALLS {
            c.list_jobs(v1::ListJobsRequest {}).await.unwrap();
        }
        let call = t0.elapsed().as_secs_f64() / CALLS as f64;
        rows.push((connect, call));
        println!(
            "{:<22} connect+call {:>8.1} us   call on open connection {:>6.1} us",
            if tls {
                "TLS + worker token"
            } else {
                "plain, no token"
            },
            connect * 1e6,
            call * 1e6
        );
    }
    println!(
        "ratio TLS+token / plain: connect {:.2}x, call {:.2}x",
        rows[1].0 / rows[0].0,
        rows[1].1 / rows[0].1
    );
    plain.stop().await;
    secure.stop().await;
}

/// Pauses job `job` and resumes it through `c`, whose token may: each answer is the job in its new state.
async fn pause_and_resume(c: &mut sweep_client::Client, job: u64) {
    let paused = c.pause(job).await.unwrap();
    assert_eq!(paused.state(), v1::JobState::Paused);
    let resumed = c.resume(job).await.unwrap();
    assert_eq!(resumed.state(), v1::JobState::Running);
}

/// A coordinator with a store in `dir` that takes `WORKER`, the `users` tokens and `ADMIN`, each in its role's
/// file, and refuses user submits above `max_user_priority`.
async fn start_with_user_tokens(
    dir: &std::path::Path,
    users: &[&str],
    max_user_priority: Option<i32>,
) -> common::Server {
    let (w, u, a) = (
        dir.join("worker.tokens"),
        dir.join("user.tokens"),
        dir.join("admin.tokens"),
    );
    std::fs::write(&w, format!("{WORKER}\n")).unwrap();
    std::fs::write(
        &u,
        users.iter().map(|t| format!("{t}\n")).collect::<String>(),
    )
    .unwrap();
    std::fs::write(&a, format!("{ADMIN}\n")).unwrap();
    let security = ServeSecurity {
        auth: Auth::from_role_files(Some(w), Some(u), Some(a)).unwrap(),
        tls: None,
    };
    let store = Store::open(&dir.join("store")).unwrap();
    let cfg = CoordinatorConfig {
        registry: common::spaces(),
        max_user_priority,
        ..CoordinatorConfig::default()
    };
    common::Server::start_with(store, cfg, security, false).await
}

/// People's tokens: a user token submits jobs under its own identity, up to `--max-user-priority`, never an
/// `exec` job and never a share; an admin token goes above the ceiling and sets shares; `ListJobs` shows each
/// identity's share and running threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_tokens_submit_below_the_ceiling_and_admins_set_shares() {
    const USER: &str = "user-token-dddddddddddddddddd";
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_user_tokens(dir.path(), &[USER], Some(5)).await;
    let (work, mut user) = clients_as(&server, Some(USER)).await;
    let (_, mut admin) = clients_as(&server, Some(ADMIN)).await;
    let user_id = sweep_coordinator::auth::identity_of(USER);

    let job = user
        .submit(v1::SubmitRequest {
            priority: 5,
            share: Some(2.0),
            ..star7(4)
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!((job.owner.as_str(), job.share), (user_id.as_str(), 2.0));

    let e = user
        .submit(v1::SubmitRequest {
            priority: 6,
            ..star7(4)
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("--max-user-priority 5"), "{e:?}");
    let e = user
        .submit(v1::SubmitRequest {
            space: "exec".into(),
            params_json: r#"{"chunks": 2, "command": ["true"]}"#.into(),
            ..star7(2)
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    for share in [0.0, -1.0, f64::NAN] {
        let e = user
            .submit(v1::SubmitRequest {
                share: Some(share),
                ..star7(4)
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{share}: {e:?}");
    }
    assert!(admin
        .submit(v1::SubmitRequest {
            priority: 9,
            ..star7(4)
        })
        .await
        .is_ok());

    let e = user
        .set_share(v1::SetShareRequest {
            identity: user_id.clone(),
            share: 3.0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let set = admin
        .set_share(v1::SetShareRequest {
            identity: user_id.clone(),
            share: 3.0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((set.identity.as_str(), set.share), (user_id.as_str(), 3.0));

    // The admin's priority-9 job goes first; the user's job has the threads once it is done.
    let mut fake = register(&work, "w").await.unwrap();
    let leases = fake.lease(4).await.unwrap();
    assert!(!leases.is_empty());
    let list = admin
        .list_jobs(v1::ListJobsRequest {})
        .await
        .unwrap()
        .into_inner();
    let admin_id = sweep_coordinator::auth::identity_of(ADMIN);
    let of = |id: &str| list.identities.iter().find(|i| i.identity == id).cloned();
    assert_eq!(of(&user_id).map(|i| i.share), Some(3.0));
    assert_eq!(
        of(&admin_id).map(|i| i.running_threads),
        Some(leases.len() as u64)
    );
    server.stop().await;
}

/// A user token cancels, pauses and resumes its own jobs without an admin; another identity's job it may not
/// touch, and the refusal says whose job it is and who asked; an admin token changes anyone's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_tokens_control_their_own_jobs_and_admins_anyones() {
    const ALICE: &str = "user-token-alice-eeeeeeeeeeee";
    const BOB: &str = "user-token-bob-ffffffffffffff";
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_user_tokens(dir.path(), &[ALICE, BOB], None).await;
    // Through `sweep-client`, as `sweep cancel` and the others call: the refusals are its errors.
    let mut alice = server.client_as(Some(ALICE)).await;
    let mut bob = server.client_as(Some(BOB)).await;
    let mut admin = server.client_as(Some(ADMIN)).await;
    let (alice_id, bob_id) = (
        sweep_coordinator::auth::identity_of(ALICE),
        sweep_coordinator::auth::identity_of(BOB),
    );
    let state = |j: &v1::JobInfo| v1::JobState::try_from(j.state).unwrap();

    let hers = alice.submit(star7(4)).await.unwrap().job.unwrap();
    let his = bob.submit(star7(5)).await.unwrap().job.unwrap();
    let his_too = bob.submit(star7(6)).await.unwrap().job.unwrap();
    assert_eq!(hers.owner, alice_id);
    assert_eq!(his.owner, bob_id);

    pause_and_resume(&mut alice, hers.id).await;
    let cancelled = alice.cancel(hers.id).await.unwrap();
    assert_eq!(state(&cancelled), v1::JobState::Cancelled);

    let refusals = [
        ("cancel", alice.cancel(his.id).await.unwrap_err()),
        ("pause", alice.pause(his.id).await.unwrap_err()),
        ("resume", alice.resume(his.id).await.unwrap_err()),
    ];
    for (verb, e) in refusals {
        let status = e.status().expect("the coordinator's answer");
        assert_eq!(status.code(), Code::PermissionDenied, "{verb}: {e:?}");
        let m = status.message();
        assert!(
            m.contains(&format!("job {} belongs to {bob_id}", his.id))
                && m.contains(&format!("this user token is {alice_id}"))
                && m.contains(&format!("a user token may {verb} only its own jobs"))
                && !m.contains(ALICE),
            "{verb}: {e:?}"
        );
    }
    let untouched = admin.job_status(his.id).await.unwrap();
    assert_eq!(state(&untouched), v1::JobState::Running);
    // A job nobody has is unknown whoever asks.
    let e = alice.cancel(9999).await.unwrap_err();
    assert_eq!(e.status().map(|s| s.code()), Some(Code::NotFound), "{e:?}");

    pause_and_resume(&mut admin, his_too.id).await;
    let cancelled = admin.cancel(his.id).await.unwrap();
    assert_eq!(state(&cancelled), v1::JobState::Cancelled);
    // Bob still manages his other job himself.
    let cancelled = bob.cancel(his_too.id).await.unwrap();
    assert_eq!(state(&cancelled), v1::JobState::Cancelled);
    server.stop().await;
}
