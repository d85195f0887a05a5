//! A replicated coordinator (three `sweep coordinator --peers` processes on loopback) under SIGKILLs of its
//! leader: the members elect another within seconds, workers and clients follow it, nothing acknowledged is
//! lost, nothing is counted twice, and the answer is the one an uninterrupted in-process run gives. The job is
//! `primes` (the engine's test space): pi(2 * 10^9) in 256 chunks, `nodes == N` showing every integer examined
//! exactly once.
//!
//! The same group over TLS: members serve https://, require client certificates and call each other with
//! their own; a worker and the commands connect with `--tls-ca` and a client certificate.
//!
//! Partitions of the leader, paused members and the longer nemesis run are in `netns.rs`.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::group::Group;
use crate::support::{chunks_done, field, scratch, solve_result, Opts};

const LONG: Duration = Duration::from_secs(300);
const JOB: [&str; 5] = ["primes", "--below", "2000000000", "--chunks", "256"];
const PI_2E9: u64 = 98_222_287;
const N: u64 = 2_000_000_000;

fn expected() -> Value {
    let r = solve_result(&JOB, LONG);
    assert_eq!(r["primes"], PI_2E9, "{r}");
    r
}

/// Three members, two workers; the leader SIGKILLed three times during the job (each time restarted on its
/// directory once another leads). Every kill: a new leader within seconds (printed), and every chunk the
/// leader had reported done (a durable read: committed by a majority) still done under the new one.
#[test]
fn sigkilled_leaders_lose_nothing_acknowledged_and_the_answer_is_exact() {
    let expected = expected();
    let opts = Opts::sized(2, 1, 3_000);
    let mut g = Group::start_with_http(3, opts);
    let first = g.wait_leader(None, Duration::from_secs(30));
    let job = g.submit(&JOB);
    let mut elections = Vec::new();
    let mut acknowledged = 0;
    for target in [20, 80, 150] {
        let before = g.wait_until(job, LONG, |s| chunks_done(s) >= target);
        let leader = g.wait_leader(None, Duration::from_secs(30));
        g.kill(leader);
        let killed = Instant::now();
        let next = g.wait_leader(Some(leader), Duration::from_secs(30));
        elections.push(killed.elapsed());
        let after = g.wait_until(job, LONG, |_| true);
        acknowledged += chunks_done(&before);
        assert!(
            chunks_done(&after) >= chunks_done(&before),
            "member {} took over and lost acknowledged results: {before} then {after}",
            next + 1
        );
        g.start_member(leader);
    }
    // A client that knows only one member is sent on to the leader by it.
    let leader = g.wait_leader(None, Duration::from_secs(30));
    let follower = (leader + 1) % 3;
    let only_follower = {
        let mut cmd = std::process::Command::new(&g.opts.bin);
        cmd.args(["status", &job.to_string(), "--json"])
            .env("SWEEP_COORDINATOR", &g.urls[follower]);
        crate::support::run_bounded(cmd, Duration::from_secs(60))
    };
    assert!(
        only_follower.status.success(),
        "status through follower {}: {}",
        follower + 1,
        String::from_utf8_lossy(&only_follower.stderr)
    );
    let done = g.wait_until(job, LONG, |s| s["state"] != "running");
    let res = g.results(job);
    assert_eq!(res["result"], expected, "{res}");
    assert_eq!(res["nodes"], N, "every integer examined once: {res}");
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["chunks_poisoned"], 0, "{done}");
    assert_eq!(
        field(&done, "completions"),
        field(&done, "chunks_total"),
        "every chunk counted once: {done}"
    );
    let members = g.members_view();
    assert_eq!(
        members.iter().filter(|m| m["state"] == "leader").count(),
        1,
        "{members:?}"
    );
    // Every member's /metrics has its own series; the job's series and the page's state only the leader's.
    let leader = g.wait_leader(None, Duration::from_secs(30));
    for i in 0..3 {
        let (code, text) = g.http_get(i, "/metrics");
        assert_eq!(code, 200, "member {}: {text}", i + 1);
        assert!(
            text.contains("sweep_member_term"),
            "member {}: {text}",
            i + 1
        );
        assert_eq!(
            text.contains("sweep_job_chunks"),
            i == leader,
            "member {} (leader {}): {text}",
            i + 1,
            leader + 1
        );
        let (code, body) = g.http_get(i, "/api/state");
        assert_eq!(
            code,
            if i == leader { 200 } else { 503 },
            "member {}: {body}",
            i + 1
        );
        let (code, body) = g.http_get(i, "/api/members");
        assert_eq!(code, 200, "{body}");
        assert!(body.contains(&format!("\"id\":{}", i + 1)), "{body}");
    }
    eprintln!(
        "first leader {}; leader changes after SIGKILL took {:?}; {acknowledged} acknowledged chunks at the kills, none lost",
        first + 1,
        elections
    );
    for e in &elections {
        assert!(*e < Duration::from_secs(15), "a leader change took {e:?}");
    }
}

/// A member whose data directory was lost cannot come back under its old id (the group's log says it has
/// entries it no longer has): it stops and says why instead of running as a member that never catches up, and
/// the other two go on. It is then removed, and a new member joins in its place with `--join`.
#[test]
fn a_member_that_lost_its_directory_stops_says_why_and_a_new_one_joins_in_its_place() {
    let opts = Opts {
        workers: 1,
        threads: 1,
        ..Opts::default()
    };
    let mut g = Group::start(3, opts);
    let leader = g.wait_leader(None, Duration::from_secs(30));
    let job = g.submit(&["primes", "--below", "1000000", "--chunks", "16"]);
    g.wait_until(job, LONG, |s| s["state"] == "done");
    let victim = (leader + 1) % 3;
    g.kill(victim);
    std::fs::remove_dir_all(g.data_dir(victim)).expect("remove the member's directory");
    g.start_member(victim);
    let exited = g.members[victim]
        .as_mut()
        .expect("started")
        .wait_exit(Duration::from_secs(60));
    let log = g.member_log(victim);
    assert!(
        exited.is_some_and(|s| !s.success()),
        "the member with an empty directory kept running ({exited:?}); its log:\n{log}"
    );
    assert!(log.contains("cannot come back under the same id"), "{log}");
    assert!(log.contains("remove-member"), "the way out is named: {log}");
    let second = g.submit(&["primes", "--below", "1000000", "--chunks", "16"]);
    let done = g.wait_until(second, LONG, |s| s["state"] != "running");
    assert_eq!(done["state"], "done", "the other two go on: {done}");

    // The leader cannot remove itself, and says so.
    let leader = g.wait_leader(None, Duration::from_secs(30));
    let own = g.sweep(&["coordinator", "remove-member", &g.ids[leader].to_string()]);
    let err = String::from_utf8_lossy(&own.stderr);
    assert!(!own.status.success() && err.contains("leads"), "{err}");

    // The lost member is removed and a new one joins in its place, empty, under a new id; it catches up by
    // snapshot and counts in the majority: with the old leader killed, it and the remaining old member elect
    // a leader and finish a job exactly.
    let new_id = g.replace(victim);
    assert_eq!(new_id, 4, "ids are never reused");
    let ids: Vec<u64> = g
        .members_view()
        .iter()
        .filter_map(|m| m["id"].as_u64())
        .collect();
    assert_eq!(ids.len(), 3, "{:?}", g.members_view());
    assert!(
        ids.contains(&4) && !ids.contains(&(victim as u64 + 1)),
        "{ids:?}"
    );
    g.kill(leader);
    let next = g.wait_leader(Some(leader), Duration::from_secs(30));
    assert_ne!(next, leader);
    let third = g.submit(&["primes", "--below", "1000000", "--chunks", "16"]);
    let done = g.wait_until(third, LONG, |s| s["state"] != "running");
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["completions"], done["chunks_total"], "{done}");
    assert_eq!(g.results(third)["result"]["primes"], 78_498);
    // Restarted with the same flags, the new member goes on as member 4.
    g.kill(victim);
    g.start_member(victim);
    g.start_member(leader);
    let fourth = g.submit(&["primes", "--below", "1000000", "--chunks", "16"]);
    let done = g.wait_until(fourth, LONG, |s| s["state"] != "running");
    assert_eq!(done["state"], "done", "{done}");
    let view = g.members_view();
    assert_eq!(
        view.iter()
            .filter(|m| m["url"] == g.urls[victim].as_str())
            .filter_map(|m| m["id"].as_u64())
            .collect::<Vec<_>>(),
        vec![4],
        "{view:?}"
    );
}

/// Leases carry the term of the leader that granted them, and a worker sends the highest term it has seen with
/// its heartbeats, results and failures: a member leading in a lower term (deposed, whether it knows yet or
/// not) answers not-leader instead of taking them. Driven here as a worker would, over gRPC.
#[test]
fn leases_carry_the_term_and_a_higher_term_fences_the_leader_off() {
    use sweep_proto::v1::{self, work_client::WorkClient};

    let mut g = Group::start(
        3,
        Opts {
            workers: 0,
            ..Opts::default()
        },
    );
    let leader = g.wait_leader(None, Duration::from_secs(30));
    let job = g.submit(&["primes", "--below", "1000000", "--chunks", "16"]);
    let term = g
        .members_view()
        .iter()
        .find(|m| m["state"] == "leader")
        .and_then(|m| m["term"].as_u64())
        .expect("the leader's term");
    let url = g.urls[leader].clone();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async move {
        let mut w = WorkClient::connect(url).await.expect("connect");
        let id = w
            .register(v1::RegisterRequest {
                name: "fencing-probe".into(),
                threads: 1,
                version: env!("CARGO_PKG_VERSION").into(),
                spaces: vec!["primes".into()],
                memory_bytes: 1 << 30,
                ..Default::default()
            })
            .await
            .expect("register")
            .into_inner()
            .worker_id;
        let leases = w
            .lease(v1::LeaseRequest {
                worker_id: id.clone(),
                max_chunks: 1,
                request_id: 0,
            })
            .await
            .expect("lease")
            .into_inner()
            .leases;
        assert_eq!(leases.len(), 1, "job {job} has chunks to lease");
        assert_eq!(leases[0].term, term, "the lease names the leader's term");
        let beat = |seen: u64| {
            let mut req = tonic::Request::new(v1::HeartbeatRequest {
                worker_id: id.clone(),
                progress: vec![v1::LeaseProgress {
                    lease_id: leases[0].lease_id,
                    nodes: 1,
                    checkpoint: None,
                    generation: 0,
                }],
            });
            req.metadata_mut()
                .insert(sweep_proto::TERM_METADATA, seen.into());
            req
        };
        w.heartbeat(beat(term))
            .await
            .expect("the leader's own term is served");
        let refused = w
            .heartbeat(beat(term + 1))
            .await
            .expect_err("a worker that saw a newer leader is not served by this one");
        assert!(sweep_proto::is_not_leader(&refused), "{refused:?}");
        let refused = w
            .complete(tonic::Request::new(v1::CompleteRequest {
                worker_id: id.clone(),
                reports: Vec::new(),
            }))
            .await;
        assert!(
            refused.is_ok(),
            "no term sent: served as before ({refused:?})"
        );
        let mut late = tonic::Request::new(v1::FailRequest {
            worker_id: id.clone(),
            lease_id: leases[0].lease_id,
            release: true,
            ..Default::default()
        });
        late.metadata_mut()
            .insert(sweep_proto::TERM_METADATA, (term + 1).into());
        let refused = w.fail(late).await.expect_err("fenced off");
        assert!(sweep_proto::is_not_leader(&refused), "{refused:?}");
    });
    g.kill(leader);
}

/// Three members over mutual TLS (each serves https:// with `--tls-cert`, requires client certificates with
/// `--tls-client-ca`, and presents its own certificate to the others, trusting that CA as `--peer-tls-ca`'s
/// default), and a worker connecting with `--tls-ca` and a client certificate. The leader refuses a member at an
/// http:// URL. It is SIGKILLed during the job: the two others elect a new leader over TLS, the lost member is
/// removed and a new one joins in its place over TLS (`--join https://...`, caught up by a snapshot sent over
/// TLS), and the answer is exact.
#[test]
fn a_group_over_tls_elects_a_new_leader_takes_a_new_member_and_answers_exactly() {
    let pki_dir = scratch();
    let opts = Opts {
        tls: Some(crate::support::pki::pki(pki_dir.path())),
        ..Opts::sized(1, 2, 2_000)
    };
    let mut g = Group::start(3, opts);
    assert!(
        g.urls.iter().all(|u| u.starts_with("https://")),
        "{:?}",
        g.urls
    );
    let first = g.wait_leader(None, Duration::from_secs(30));
    let job = g.submit(&["primes", "--below", "2000000000", "--chunks", "64"]);
    // A member at an http:// URL could not be called by these members, nor call them: the leader refuses it.
    let tls = g.opts.tls.clone().expect("TLS files");
    let security = sweep_client::ClientSecurity {
        tls_ca: Some(tls.ca),
        tls_cert: Some(tls.client_cert),
        tls_key: Some(tls.client_key),
        ..Default::default()
    };
    let list = g.list.clone();
    let refused = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async move {
            let mut c = sweep_client::Client::connect(&list, &security).await?;
            c.add_member("http://127.0.0.1:1").await
        })
        .expect_err("an http:// member added to a group at https:// URLs");
    assert!(
        refused
            .to_string()
            .contains("is not an https:// URL like this group's members'"),
        "{refused}"
    );
    let before = g.wait_until(job, LONG, |s| chunks_done(s) >= 8);
    g.kill(first);
    let killed = Instant::now();
    let next = g.wait_leader(Some(first), Duration::from_secs(30));
    let election = killed.elapsed();
    assert_ne!(next, first);
    let new_id = g.replace(first);
    assert_eq!(new_id, 4, "a new member, under a new id");
    let done = g.wait_until(job, LONG, |s| s["state"] != "running");
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["chunks_poisoned"], 0, "{done}");
    assert!(
        chunks_done(&done) >= chunks_done(&before),
        "{before} then {done}"
    );
    let res = g.results(job);
    assert_eq!(res["result"]["primes"], PI_2E9, "{res}");
    assert_eq!(res["nodes"], N, "every integer examined once: {res}");
    let view = g.members_view();
    let states: Vec<(u64, String)> = view
        .iter()
        .filter_map(|m| Some((m["id"].as_u64()?, m["state"].as_str()?.to_string())))
        .collect();
    assert_eq!(
        states.iter().filter(|(_, s)| s == "leader").count(),
        1,
        "{view:?}"
    );
    assert!(
        states.iter().any(|(id, _)| *id == 4)
            && !states.iter().any(|(id, _)| *id == 1 + first as u64),
        "{view:?}"
    );
    eprintln!(
        "over TLS: member {} led, member {} took over {election:?} after the SIGKILL; member 4 joined",
        first + 1,
        next + 1
    );
    assert!(election < Duration::from_secs(15), "{election:?}");
}
