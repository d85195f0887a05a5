//! Fuzzing every RPC of a real coordinator on loopback (sled store in a temp dir): raw bytes sent as the body of
//! every method, and well-formed messages whose fields lie (unknown jobs, leases and chunks, wrong outputs, huge or
//! empty strings, hostile numbers). After the storm the coordinator must answer, its store must reopen, the stored
//! progress of a real job must be intact, and the job must finish with exactly the answer of the in-process run.
//!
//! `SWEEP_FUZZ_CASES` cases per target (default [`DEFAULT_CASES`]); the full run is
//! `SWEEP_FUZZ_CASES=100000 cargo test --release -p sweep-coordinator --test fuzz_rpc`.
//! Every call is bounded ([`CALL_LIMIT`]): a handler that never answers fails the run.
//!
//! The calls here are raw tonic, not `sweep-client`: the point is to send what no client would.
use sweep_space::ChunkId;
use sweep_testkit as common;

use std::time::{Duration, Instant};

use common::{FakeWorker, Server};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;
use prost::bytes::{Buf, BufMut};
use prost::Message;
use sweep_coordinator::store::Store;
use sweep_proto::v1::{self, jobs_client::JobsClient, work_client::WorkClient};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};

const DEFAULT_CASES: u32 = 400;
/// The longest one RPC may take, group commit included. Generous: on a machine loaded far past its cores one
/// `Pause` once took over 20 s (the coordinator answered `ListJobs` right after; see the fuzzing report).
const CALL_LIMIT: Duration = Duration::from_secs(60);

/// A coordinator on `store` with this file's configuration: fuzzed leases that nobody completes come back
/// quickly (1 s), three attempts per chunk.
async fn start(store: Store) -> Server {
    Server::start(store, common::config(1_000, 3)).await
}

/// The honest worker of these tests, on its own connection to `ch`.
async fn honest_worker(ch: Channel, name: &str) -> FakeWorker {
    let token = sweep_client::token_interceptor(&Default::default()).expect("no token to read");
    let work = WorkClient::new(sweep_client::secure(ch, token));
    FakeWorker::register(work, name, &common::spaces())
        .await
        .unwrap()
}

/// Sends bytes as they are: the body of a gRPC call that the server decodes itself.
#[derive(Clone, Copy, Default)]
struct RawCodec;
struct RawEncoder;
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

const UNARY: &[&str] = &[
    "/sweep.v1.Work/Register",
    "/sweep.v1.Work/Lease",
    "/sweep.v1.Work/Heartbeat",
    "/sweep.v1.Work/Complete",
    "/sweep.v1.Work/Fail",
    "/sweep.v1.Work/Split",
    "/sweep.v1.Jobs/Submit",
    "/sweep.v1.Jobs/ListJobs",
    "/sweep.v1.Jobs/JobStatus",
    "/sweep.v1.Jobs/Results",
    "/sweep.v1.Jobs/Cancel",
    "/sweep.v1.Jobs/Pause",
    "/sweep.v1.Jobs/Resume",
    "/sweep.v1.Jobs/NoSuchMethod",
];
const STREAMING: &[&str] = &["/sweep.v1.Work/FetchArtifact", "/sweep.v1.Jobs/Watch"];

/// A status people can act on: a known code and a message (tonic's own decode errors included).
fn clear_status(s: &Status) -> Result<(), TestCaseError> {
    prop_assert!(s.code() != Code::Ok, "{s:?}");
    prop_assert!(!s.message().trim().is_empty(), "empty message: {s:?}");
    prop_assert!(
        s.code() != Code::Internal || !s.message().contains("panic"),
        "{s:?}"
    );
    Ok(())
}

/// Runs `test` on `SWEEP_FUZZ_CASES` (default [`DEFAULT_CASES`]) inputs from `strategy` and reports the wall time.
fn fuzz<S>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    common::fuzz::fuzz(
        name,
        common::fuzz::cases(DEFAULT_CASES),
        512,
        strategy,
        test,
    );
}

/// One RPC, bounded in time.
fn bounded<T>(
    rt: &tokio::runtime::Runtime,
    what: &str,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, TestCaseError> {
    rt.block_on(async { tokio::time::timeout(CALL_LIMIT, fut).await })
        .map_err(|_| TestCaseError::fail(format!("{what}: no answer within {CALL_LIMIT:?}")))
}

/// The real job and what the test knows about it.
struct Real {
    id: u64,
    params: serde_json::Value,
    n_chunks: u64,
    /// Chunks completed before the fuzzing, with their honest outputs.
    done: Vec<(u64, sweep_space::ChunkOutput)>,
}

const REAL_SPACE: &str = "star";
const REAL_CHUNKS: u64 = 4;

fn real_job() -> sweep_space::SpaceJob {
    common::spaces()
        .job_from_params(
            REAL_SPACE,
            &serde_json::json!({"points": 7, "method": "backtrack"}),
        )
        .unwrap()
}

/// The answer of the in-process run: every chunk run here, merged.
fn reference_result() -> serde_json::Value {
    let job = real_job();
    let outs: Vec<_> = (0..REAL_CHUNKS)
        .map(|c| {
            job.run_chunk(ChunkId::new(REAL_CHUNKS, c), &sweep_space::Control::new())
                .unwrap()
        })
        .collect();
    job.result(&sweep_space::Answer::from_outputs(outs.iter()))
}

/// Submits the real job and completes half of its chunks honestly, then pauses it so that fuzzed workers never
/// hold its leases (a worker that takes leases and lets them lapse can poison chunks: that is the design, and
/// not what this test is about).
async fn prepare(ch: Channel) -> Real {
    let mut jobs = JobsClient::new(ch.clone());
    let job = jobs
        .submit(v1::SubmitRequest {
            space: REAL_SPACE.into(),
            params_json: r#"{"points": 7, "method": "backtrack"}"#.into(),
            chunks: REAL_CHUNKS,
            priority: 0,
            reuse_existing: false,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    let mut worker = honest_worker(ch, "honest").await;
    let leases = worker.lease(2).await.unwrap();
    assert_eq!(leases.len(), 2);
    let kernel = real_job();
    let mut done = Vec::new();
    let mut reports = Vec::new();
    for l in &leases {
        let out = kernel
            .run_chunk(
                ChunkId::new(l.n_chunks, l.chunk),
                &sweep_space::Control::new(),
            )
            .unwrap();
        reports.push(common::report(l, v1::ChunkOutput::from(&out)));
        done.push((l.chunk, out));
    }
    let acks = worker.complete(reports).await.unwrap();
    assert!(acks
        .iter()
        .all(|a| a.status == v1::AckStatus::Accepted as i32));
    jobs.pause(v1::JobRequest { job_id: job.id }).await.unwrap();
    // A decoy job for fuzzed workers to lease, fail and complete.
    jobs.submit(v1::SubmitRequest {
        priority: 1,
        ..common::submit_req("star", r#"{"points": 6, "method": "brute"}"#, 16)
    })
    .await
    .unwrap();
    Real {
        id: job.id,
        params: kernel.params().clone(),
        n_chunks: REAL_CHUNKS,
        done,
    }
}

/// After the fuzzing: the coordinator answers, and after a restart on the same store the real job has exactly its
/// stored progress, and then finishes with the reference answer.
async fn finish(path: &std::path::Path, server: Server, real: &Real) {
    let ch = server.channel().await;
    let mut jobs = JobsClient::new(ch);
    let list = tokio::time::timeout(CALL_LIMIT, jobs.list_jobs(v1::ListJobsRequest {}))
        .await
        .expect("ListJobs answers after the fuzzing")
        .expect("ListJobs succeeds after the fuzzing")
        .into_inner();
    assert!(list.jobs.iter().any(|j| j.id == real.id));
    server.stop().await;

    let server = start(Store::open(path).expect("the store reopens after the fuzzing")).await;
    let ch = server.channel().await;
    let mut jobs = JobsClient::new(ch.clone());
    let info = jobs
        .job_status(v1::JobRequest { job_id: real.id })
        .await
        .unwrap()
        .into_inner();
    let nodes: u64 = real.done.iter().map(|(_, o)| o.nodes).sum();
    assert_eq!(
        (info.chunks_done, info.completions, info.nodes.clone()),
        (
            real.done.len() as u64,
            real.done.len() as u64,
            nodes.to_string()
        ),
        "stored progress of the real job after the fuzzing: {info:?}"
    );
    assert_eq!(info.chunks_poisoned, 0, "{info:?}");
    // Everything else out of the way, then the rest of the real job, honestly.
    let all = jobs
        .list_jobs(v1::ListJobsRequest {})
        .await
        .unwrap()
        .into_inner();
    for j in all.jobs.iter().filter(|j| j.id != real.id) {
        let _ = jobs.cancel(v1::JobRequest { job_id: j.id }).await;
    }
    jobs.resume(v1::JobRequest { job_id: real.id })
        .await
        .unwrap();
    let mut worker = honest_worker(ch, "").await;
    let kernel = common::spaces()
        .job_from_params(REAL_SPACE, &real.params)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = jobs
            .job_status(v1::JobRequest { job_id: real.id })
            .await
            .unwrap()
            .into_inner();
        if info.state().label() == "done" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the real job does not finish: {info:?}"
        );
        let leases = worker.lease(8).await.unwrap();
        if leases.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let reports = leases
            .iter()
            .map(|l| {
                assert_eq!(l.job_id, real.id, "only the real job is left: {l:?}");
                let out = kernel
                    .run_chunk(
                        ChunkId::new(real.n_chunks, l.chunk),
                        &sweep_space::Control::new(),
                    )
                    .unwrap();
                common::report(l, v1::ChunkOutput::from(&out))
            })
            .collect();
        worker.complete(reports).await.unwrap();
    }
    let res = jobs
        .results(v1::ResultsRequest {
            job_id: real.id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let got: serde_json::Value = serde_json::from_str(&res.result_json).unwrap();
    assert_eq!(
        got,
        reference_result(),
        "the real job's answer after the fuzzing"
    );
    let info = res.job.unwrap();
    assert_eq!(
        (info.chunks_done, info.completions),
        (real.n_chunks, real.n_chunks)
    );
    server.stop().await;
}

/// A coordinator on a sled store in a scratch directory (held so the store outlives the test), with a real job
/// in it to aim lies at: runtime, directory, store path, server, channel, job.
type Fuzzed = (
    tokio::runtime::Runtime,
    tempfile::TempDir,
    std::path::PathBuf,
    Server,
    Channel,
    Real,
);

fn fuzzed() -> Fuzzed {
    let rt = runtime();
    let (dir, path, store) = common::fresh_store();
    let server = rt.block_on(start(store));
    let ch = rt.block_on(server.channel());
    let real = rt.block_on(prepare(ch.clone()));
    (rt, dir, path, server, ch, real)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Raw bytes: garbage, truncated or bit-flipped encodings of real messages, sent to every method.
#[test]
fn fuzz_raw_bytes_to_every_method() {
    let (rt, _dir, path, server, ch, real) = fuzzed();
    let samples: Vec<Vec<u8>> = vec![
        v1::SubmitRequest {
            reuse_existing: true,
            ..common::submit_req("star", r#"{"points": 6, "method": "brute"}"#, 3)
        }
        .encode_to_vec(),
        v1::LeaseRequest {
            worker_id: "w".into(),
            max_chunks: 2,
            request_id: 0,
        }
        .encode_to_vec(),
        v1::CompleteRequest {
            worker_id: "w".into(),
            reports: vec![v1::ChunkReport {
                lease_id: 1,
                job_id: 2,
                chunk: 0,
                output: Some(v1::ChunkOutput::from(&real.done[0].1)),
                elapsed_s: 1.0,
                generation: 0,
            }],
        }
        .encode_to_vec(),
        v1::HeartbeatRequest {
            worker_id: "w".into(),
            progress: vec![v1::LeaseProgress {
                lease_id: 3,
                nodes: 7,
                checkpoint: Some("cursor 9".into()),
                generation: 1,
            }],
        }
        .encode_to_vec(),
        v1::SplitRequest {
            worker_id: "w".into(),
            lease_id: 1,
            generation: 0,
            kept: "span 0 5".into(),
            given: "span 5 10".into(),
            take: true,
        }
        .encode_to_vec(),
        v1::JobRequest { job_id: 2 }.encode_to_vec(),
    ];
    let body = prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => proptest::collection::vec(select(vec![0x08u8, 0x0a, 0x10, 0x12, 0x1a, 0x22, 0xff, 0x80, 0x01, 0x00]), 0..32),
        2 => (select(samples), proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4), any::<usize>(), any::<bool>())
            .prop_map(|(mut b, flips, cut, truncate)| {
                for (at, x) in flips {
                    let n = b.len();
                    b[at % n] ^= x;
                }
                if truncate {
                    b.truncate(cut % (b.len() + 1));
                }
                b
            }),
    ];
    let methods: Vec<&'static str> = UNARY.iter().chain(STREAMING).copied().collect();
    fuzz(
        "rpc raw bytes",
        (select(methods), body),
        |(method, body)| {
            // A body that decodes to a request about the real job could cancel it, which is allowed: skip those.
            if method.starts_with("/sweep.v1.Jobs/")
                && v1::JobRequest::decode(body.as_slice()).is_ok_and(|r| r.job_id == real.id)
            {
                return Ok(());
            }
            if method == "/sweep.v1.Work/Complete"
                && v1::CompleteRequest::decode(body.as_slice())
                    .is_ok_and(|r| r.reports.iter().any(|x| x.job_id == real.id))
            {
                return Ok(());
            }
            let ch = ch.clone();
            let out = bounded(&rt, method, async move {
                let mut g = tonic::client::Grpc::new(ch);
                g.ready()
                    .await
                    .map_err(|e| Status::unavailable(e.to_string()))?;
                let path = PathAndQuery::from_static(method);
                if STREAMING.contains(&method) {
                    let mut stream = g
                        .server_streaming(tonic::Request::new(body), path, RawCodec)
                        .await?
                        .into_inner();
                    // The first piece or event, then hang up.
                    let first =
                        tokio::time::timeout(Duration::from_secs(2), stream.message()).await;
                    match first {
                        Ok(r) => r.map(|m| m.unwrap_or_default()),
                        Err(_) => Ok(Vec::new()),
                    }
                } else {
                    g.unary(tonic::Request::new(body), path, RawCodec)
                        .await
                        .map(|r| r.into_inner())
                }
            })?;
            if let Err(s) = out {
                prop_assert!(
                    s.code() != Code::Unavailable || !s.message().contains("transport"),
                    "{method}: {s:?}"
                );
                // tonic answers a method it does not know with a bare UNIMPLEMENTED: the code says it all.
                if !(method.ends_with("NoSuchMethod") && s.code() == Code::Unimplemented) {
                    clear_status(&s)?;
                }
            }
            Ok(())
        },
    );
    rt.block_on(finish(&path, server, &real));
}

/// Split states: spans in and around a small star job's chunks, some overlapping, some inverted.
fn span() -> impl Strategy<Value = String> {
    (0u64..200, 0u64..200).prop_map(|(lo, hi)| format!("span {lo} {hi}"))
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(vec!["", "w", "honest", "worker-1", " ", "\u{0}", "star", "billiard", "brainball", "buzzled", "peg", "nope"])
            .prop_map(str::to_string),
        1 => any::<String>(),
        1 => (1usize..200_000).prop_map(|n| "x".repeat(n)),
    ]
}

fn id() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0u64..40, 1 => any::<u64>(), 1 => Just(u64::MAX)]
}

fn wire_output() -> impl Strategy<Value = v1::ChunkOutput> {
    let counter = prop_oneof![
        select(vec!["solutions", "unique", "entries", "count", "x", ""]).prop_map(str::to_string),
        any::<String>(),
    ];
    let value = prop_oneof![
        select(vec![
            "0",
            "1",
            "80",
            "-1",
            "lots",
            "",
            "340282366920938463463374607431768211455",
            "340282366920938463463374607431768211456",
            " 1",
            "1e3"
        ])
        .prop_map(str::to_string),
        any::<u128>().prop_map(|v| v.to_string()),
        any::<String>(),
    ];
    (
        any::<u64>(),
        proptest::collection::vec(prop_oneof!["[0-9,]{0,40}", any::<String>()], 0..4),
        proptest::collection::btree_map(counter, value, 0..4),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(nodes, solutions, counters, artifact)| v1::ChunkOutput {
            nodes,
            solutions,
            counters: counters.into_iter().collect(),
            artifact,
        })
}

#[derive(Debug, Clone)]
enum Call {
    Register(v1::RegisterRequest),
    Lease(v1::LeaseRequest),
    Heartbeat(v1::HeartbeatRequest),
    Complete(v1::CompleteRequest),
    Fail(v1::FailRequest),
    Split(v1::SplitRequest),
    Fetch(v1::FetchArtifactRequest),
    Submit(v1::SubmitRequest),
    List,
    Status(u64),
    Results(u64),
    Cancel(u64),
    Pause(u64),
    Resume(u64),
    Watch(v1::WatchRequest),
}

fn submit() -> impl Strategy<Value = v1::SubmitRequest> {
    let params = prop_oneof![
        select(vec![
            r#"{"points": 6, "method": "brute"}"#,
            r#"{"points": 7, "method": "backtrack"}"#,
            r#"{"rows": 4, "method": "strategy"}"#,
            r#"{"mode": "table", "depth": 1}"#,
            r#"{"mode": "solve", "depth": 1, "positions": "1 2 3 4 5 6 7 8 9 10 11 12 13"}"#,
            r#"{"side": 3, "clues": "1,1,1", "method": "propagate"}"#,
            r#"{"board": "triangle", "mode": "solve", "seed": 0}"#,
            r#"{"points": 3, "method": "brute"}"#,
            r#"{"points": "x"}"#,
            "{",
            "",
            "null",
            "[]",
        ])
        .prop_map(str::to_string),
        any::<String>(),
        (1usize..400_000).prop_map(|n| format!("{{\"name\": \"{}\"}}", "y".repeat(n))),
    ];
    (
        text(),
        params,
        prop_oneof![4 => 0u64..64, 1 => Just(u64::MAX), 1 => Just(1_000_000_001u64)],
        any::<i32>(),
        any::<bool>(),
        prop_oneof![3 => 0u32..4, 1 => any::<u32>()],
        proptest::option::of(prop_oneof![3 => 0u32..4, 1 => any::<u32>()]),
    )
        .prop_map(
            |(space, params_json, chunks, priority, reuse_existing, replicate, max_attempts)| {
                v1::SubmitRequest {
                    space,
                    params_json,
                    chunks,
                    priority,
                    reuse_existing,
                    replicate,
                    count_only: false,
                    max_attempts,
                    share: None,
                    chunk_time_hint_ms: None,
                }
            },
        )
}

fn call() -> impl Strategy<Value = Call> {
    let report = (
        id(),
        id(),
        id(),
        proptest::option::weighted(0.9, wire_output()),
        any::<f64>(),
        prop_oneof![0u32..3, any::<u32>()],
    )
        .prop_map(
            |(lease_id, job_id, chunk, output, elapsed_s, generation)| v1::ChunkReport {
                lease_id,
                job_id,
                chunk,
                output,
                elapsed_s,
                generation,
            },
        );
    prop_oneof![
        (
            text(),
            any::<u32>(),
            text(),
            proptest::collection::vec(text(), 0..3),
            any::<u64>(),
            text()
        )
            .prop_map(
                |(name, threads, version, spaces, memory_bytes, containment)| Call::Register(
                    v1::RegisterRequest {
                        name,
                        threads,
                        version,
                        spaces,
                        memory_bytes,
                        containment,
                    }
                )
            ),
        (
            text(),
            prop_oneof![0u32..8, any::<u32>()],
            prop_oneof![0u64..3, any::<u64>()]
        )
            .prop_map(|(worker_id, max_chunks, request_id)| {
                Call::Lease(v1::LeaseRequest {
                    worker_id,
                    max_chunks,
                    request_id,
                })
            }),
        (
            text(),
            proptest::collection::vec(
                (id(), any::<u64>(), proptest::option::of(text()), 0u32..3),
                0..8
            )
        )
            .prop_map(|(worker_id, p)| {
                Call::Heartbeat(v1::HeartbeatRequest {
                    worker_id,
                    progress: p
                        .into_iter()
                        .map(
                            |(lease_id, nodes, checkpoint, generation)| v1::LeaseProgress {
                                lease_id,
                                nodes,
                                checkpoint,
                                generation,
                            },
                        )
                        .collect(),
                })
            }),
        (text(), proptest::collection::vec(report, 0..6)).prop_map(|(worker_id, reports)| {
            Call::Complete(v1::CompleteRequest { worker_id, reports })
        }),
        (
            text(),
            id(),
            text(),
            any::<bool>(),
            proptest::option::of(text())
        )
            .prop_map(|(worker_id, lease_id, error, release, checkpoint)| {
                Call::Fail(v1::FailRequest {
                    worker_id,
                    lease_id,
                    error,
                    release,
                    checkpoint,
                    generation: 0,
                })
            }),
        (
            text(),
            id(),
            prop_oneof![0u32..3, any::<u32>()],
            prop_oneof![text(), span()],
            prop_oneof![text(), span()],
            any::<bool>()
        )
            .prop_map(|(worker_id, lease_id, generation, kept, given, take)| {
                Call::Split(v1::SplitRequest {
                    worker_id,
                    lease_id,
                    generation,
                    kept,
                    given,
                    take,
                })
            }),
        (text(), id(), text()).prop_map(|(worker_id, job_id, digest)| Call::Fetch(
            v1::FetchArtifactRequest {
                worker_id,
                job_id,
                digest,
            }
        )),
        submit().prop_map(Call::Submit),
        Just(Call::List),
        id().prop_map(Call::Status),
        id().prop_map(Call::Results),
        id().prop_map(Call::Cancel),
        id().prop_map(Call::Pause),
        id().prop_map(Call::Resume),
        (id(), any::<u64>()).prop_map(|(job_id, interval_ms)| Call::Watch(v1::WatchRequest {
            job_id,
            interval_ms
        })),
    ]
}

/// Well-formed messages with lying fields, to every method.
#[test]
fn fuzz_messages_with_lying_fields() {
    let (rt, _dir, path, server, ch, real) = fuzzed();
    let work = WorkClient::new(ch.clone())
        .max_decoding_message_size(sweep_proto::MAX_RESULT_BYTES)
        .max_encoding_message_size(sweep_proto::MAX_REPORT_BYTES);
    let jobs = JobsClient::new(ch.clone())
        .max_decoding_message_size(sweep_proto::MAX_RESULT_BYTES)
        .max_encoding_message_size(sweep_proto::MAX_REPORT_BYTES);
    let done_chunks: Vec<u64> = real.done.iter().map(|(c, _)| *c).collect();
    fuzz("rpc messages", call(), |mut call| {
        // The real job may only be lied to about its done chunks (a plausible output for an open chunk would be
        // accepted by design: completion is keyed by chunk, and only replication catches such a lie), and must
        // not be cancelled, paused or resumed by the fuzzer.
        let other = |id: &mut u64| {
            if *id == real.id {
                *id = real.id + 1;
            }
        };
        match &mut call {
            Call::Complete(c) => {
                for r in &mut c.reports {
                    if r.job_id == real.id && !done_chunks.contains(&r.chunk) {
                        r.chunk = done_chunks[(r.chunk % done_chunks.len() as u64) as usize];
                    }
                }
            }
            Call::Cancel(id) | Call::Pause(id) | Call::Resume(id) => other(id),
            Call::Submit(s) if s.priority > 1_000_000 => s.priority = 0,
            _ => {}
        }
        let (mut work, mut jobs) = (work.clone(), jobs.clone());
        let mut probe = jobs.clone();
        let what = format!("{call:?}").chars().take(200).collect::<String>();
        let out: Result<(), Status> = bounded(&rt, &what, async move {
            match call {
                Call::Register(r) => {
                    let id = work.register(r).await?.into_inner().worker_id;
                    if id.trim().is_empty() {
                        return Err(Status::internal("empty worker id"));
                    }
                }
                Call::Lease(r) => {
                    work.lease(r).await?;
                }
                Call::Heartbeat(r) => {
                    work.heartbeat(r).await?;
                }
                Call::Complete(r) => {
                    let n = r.reports.len();
                    let acks = work.complete(r).await?.into_inner().acks;
                    if acks.len() != n {
                        return Err(Status::internal(format!(
                            "{} acks for {n} reports",
                            acks.len()
                        )));
                    }
                    for a in acks {
                        if a.status == v1::AckStatus::Rejected as i32 && a.message.trim().is_empty()
                        {
                            return Err(Status::internal(format!(
                                "rejected without a reason: {a:?}"
                            )));
                        }
                    }
                }
                Call::Fail(r) => {
                    work.fail(r).await?;
                }
                Call::Split(r) => {
                    work.split(r).await?;
                }
                Call::Fetch(r) => {
                    let mut s = work.fetch_artifact(r).await?.into_inner();
                    let _ = tokio::time::timeout(Duration::from_secs(2), s.message()).await;
                }
                Call::Submit(r) => {
                    jobs.submit(r).await?;
                }
                Call::List => {
                    jobs.list_jobs(v1::ListJobsRequest {}).await?;
                }
                Call::Status(job_id) => {
                    jobs.job_status(v1::JobRequest { job_id }).await?;
                }
                Call::Results(job_id) => {
                    let r = jobs
                        .results(v1::ResultsRequest {
                            job_id,
                            ..Default::default()
                        })
                        .await?
                        .into_inner();
                    serde_json::from_str::<serde_json::Value>(&r.result_json)
                        .map_err(|e| Status::internal(format!("result is not JSON: {e}")))?;
                }
                Call::Cancel(job_id) => {
                    jobs.cancel(v1::JobRequest { job_id }).await?;
                }
                Call::Pause(job_id) => {
                    jobs.pause(v1::JobRequest { job_id }).await?;
                }
                Call::Resume(job_id) => {
                    jobs.resume(v1::JobRequest { job_id }).await?;
                }
                Call::Watch(r) => {
                    let mut s = jobs.watch(r).await?.into_inner();
                    let _ = tokio::time::timeout(Duration::from_secs(2), s.message()).await;
                }
            }
            Ok(())
        })
        .map_err(|e| {
            // Is the whole coordinator stuck, or only this call?
            let list = rt.block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(5),
                    probe.list_jobs(v1::ListJobsRequest {}),
                )
                .await
            });
            let state = match list {
                Ok(Ok(l)) => format!(
                    "ListJobs answers: {:?}",
                    l.into_inner()
                        .jobs
                        .iter()
                        .map(|j| (
                            j.id,
                            j.space.clone(),
                            j.state().label(),
                            j.chunks_total,
                            j.chunks_done
                        ))
                        .collect::<Vec<_>>()
                ),
                Ok(Err(s)) => format!("ListJobs fails: {s:?}"),
                Err(_) => "ListJobs hangs too".to_string(),
            };
            TestCaseError::fail(format!("{e}; {state}"))
        })?;
        if let Err(s) = out {
            prop_assert!(s.code() != Code::Internal, "{what}: {s:?}");
            prop_assert!(
                s.code() != Code::Unavailable,
                "{what}: the coordinator is unavailable: {s:?}"
            );
            clear_status(&s)?;
        }
        Ok(())
    });
    rt.block_on(finish(&path, server, &real));
}

/// Regression: a Submit naming a 200 kB space (or parameters quoting a long value) was refused with a message
/// that quoted it whole; gRPC carries the message in a header, past the client's header limit, so the client saw
/// "h2 protocol error" instead of INVALID_ARGUMENT.
#[test]
fn regression_long_input_is_refused_with_a_clipped_message() {
    let rt = runtime();
    let (_dir, _, store) = common::fresh_store();
    let server = rt.block_on(start(store));
    let ch = rt.block_on(server.channel());
    let mut jobs = JobsClient::new(ch);
    for (space, params) in [
        ("x".repeat(200_000), "{}".to_string()),
        (
            "star".to_string(),
            format!(
                "{{\"points\": \"{}\", \"method\": \"brute\"}}",
                "7".repeat(200_000)
            ),
        ),
    ] {
        let err = rt
            .block_on(jobs.submit(v1::SubmitRequest {
                space,
                params_json: params,
                ..Default::default()
            }))
            .unwrap_err();
        assert_eq!(
            err.code(),
            Code::InvalidArgument,
            "{:?}",
            err.message().get(..200)
        );
        assert!(err.message().len() < 4000, "{}", err.message().len());
    }
    rt.block_on(server.stop());
}
