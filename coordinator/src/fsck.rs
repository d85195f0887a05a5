//! Checking and repairing a store: what to do when sled (or a disk) damaged it.
//!
//! The chunk records are the source of truth. A job's answer is the sum of the outputs of its `Done` chunks, so
//! everything else can be rebuilt from them: the tally is their sum, a `Done` record without its output is a
//! chunk that must run again, an output without a `Done` record is not part of the answer, and a damaged merged
//! artifact whose chunk artifacts are gone means the job's chunks run again. Repair therefore only ever moves
//! chunks back to pending (work is repeated, never invented), which keeps the final answer exact.
//!
//! Chunk records and outputs are read through `Store::scan_chunks`, which shows those held in blocks (format 3)
//! under their per-chunk keys like format 2's own keys; a block that does not decode is named and its chunks run
//! again, and repair writes chunk keys through `Store::apply_chunk_writes`, which reaches a chunk wherever it
//! lives.
//!
//! The coordinator runs the cheap part of [`check`] at start-up (every record decodes, tallies agree with the
//! done chunks) and refuses to start on a damaged store, naming the problem and `sweep store repair`.

use std::collections::{BTreeMap, BTreeSet};

use sweep_space::{ChunkOutput, Tally};

use crate::core::JobRecord;
use crate::scheduler::{ChunkRecord, JobId, JobState};
use crate::store::{be_u64, chunk_key, decode, job_key, key_text, Store, StoreError, BLOCK};

/// One thing wrong with a store, and what repair does about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub job: Option<JobId>,
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.job {
            Some(j) => write!(f, "job {j}: {}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

/// What [`check`] found.
#[derive(Debug, Default)]
pub struct Report {
    pub jobs: usize,
    pub chunk_records: usize,
    pub outputs: usize,
    pub problems: Vec<Problem>,
    /// Per job: chunks whose state must go back to pending, and whether its tally or artifact must be rebuilt.
    fixes: BTreeMap<JobId, Fix>,
    /// Keys to delete (undecodable records of unknown jobs, orphan outputs).
    drop_keys: Vec<Vec<u8>>,
}

#[derive(Debug, Default)]
struct Fix {
    rerun: BTreeSet<u64>,
    rerun_all: bool,
    drop_outputs: BTreeSet<u64>,
    tally: Option<Tally>,
    /// Inputs the job names that are not stored jobs (or not older than it, which only damage can do: an input
    /// is always created before the jobs that read it): dropped from its record.
    dangling_inputs: BTreeSet<JobId>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Reads every record and artifact of the store and lists what is inconsistent. `deep` also re-hashes every
/// artifact file (slow for large tables).
pub fn check(store: &Store, deep: bool) -> Result<Report, StoreError> {
    let mut r = Report::default();
    let mut jobs: BTreeMap<JobId, JobRecord> = BTreeMap::new();
    for (k, v) in store.kv().scan(b"j/")? {
        match decode::<JobRecord>(&k, &v) {
            Ok(rec) => {
                jobs.insert(rec.id, rec);
            }
            Err(e) => {
                r.problems.push(Problem {
                    job: None,
                    what: format!("{e}; the job cannot be rebuilt and is removed"),
                });
                r.drop_keys.push(k);
            }
        }
    }
    r.jobs = jobs.len();
    let mut done: BTreeMap<JobId, BTreeSet<u64>> = BTreeMap::new();
    // Chunk records wherever they live: in blocks (format 3) or in keys of their own (format 2), each under
    // its per-chunk key. A block that does not decode loses all its chunks: they run again.
    let (records, damaged_blocks) = store.scan_chunks(b'c', None)?;
    let mut damaged_jobs = BTreeSet::new();
    for (bkey, e) in damaged_blocks {
        let job = bkey
            .get(2..10)
            .and_then(|b| Some(JobId::from_be_bytes(b.try_into().ok()?)));
        let first = bkey
            .get(10..)
            .and_then(|b| u64::from_be_bytes(b.try_into().ok()?).checked_mul(BLOCK));
        let known = job.and_then(|j| Some((j, jobs.get(&j)?.slots())));
        r.problems.push(Problem {
            job,
            what: match known {
                Some(_) => format!("{e}; its chunks run again"),
                None => format!("{e}; removed"),
            },
        });
        // Dropped; chunks of a stored job are written back as pending (the rewrite replaces the block).
        r.drop_keys.push(bkey);
        if let (Some((job, n)), Some(first)) = (known, first) {
            damaged_jobs.insert(job);
            let fix = r.fixes.entry(job).or_default();
            fix.rerun.extend(first..first.saturating_add(BLOCK).min(n));
        }
    }
    for found in records {
        let k = found.key.clone();
        r.chunk_records += 1;
        let (Ok(job), Ok(chunk)) = (
            be_u64(&k, k.get(2..10).unwrap_or(&[])),
            be_u64(&k, k.get(10..).unwrap_or(&[])),
        ) else {
            r.problems.push(Problem {
                job: None,
                what: format!("malformed chunk key `{}`; removed", key_text(&k)),
            });
            r.drop_keys.push(k);
            continue;
        };
        let Some(rec) = jobs.get(&job) else {
            r.problems.push(Problem {
                job: Some(job),
                what: format!("chunk {chunk} belongs to no stored job; removed"),
            });
            r.drop_keys.push(k);
            continue;
        };
        if chunk >= rec.slots() {
            r.problems.push(Problem {
                job: Some(job),
                what: format!(
                    "chunk {chunk} is beyond the job's {} chunks and pieces; removed",
                    rec.slots()
                ),
            });
            r.drop_keys.push(k);
            continue;
        }
        match found.decode::<ChunkRecord>() {
            Ok(ChunkRecord::Done { .. }) => {
                done.entry(job).or_default().insert(chunk);
            }
            Ok(_) => {}
            Err(e) => {
                r.problems.push(Problem {
                    job: Some(job),
                    what: format!("{e}; chunk {chunk} runs again"),
                });
                r.fixes.entry(job).or_default().rerun.insert(chunk);
            }
        }
    }
    for (&id, rec) in &jobs {
        let done = done.remove(&id).unwrap_or_default();
        let undecodable: BTreeSet<u64> = r
            .fixes
            .get(&id)
            .map(|f| f.rerun.clone())
            .unwrap_or_default();
        // Each done chunk's contribution, so the expected tally is their sum over the chunks that stay done.
        let mut contributions: BTreeMap<u64, ChunkOutput> = BTreeMap::new();
        // Damaged blocks were reported with the records above.
        for found in store.scan_chunks(b'o', Some(id))?.0 {
            let k = found.key.clone();
            r.outputs += 1;
            let Ok(chunk) = be_u64(&k, k.get(10..).unwrap_or(&[])) else {
                r.problems.push(Problem {
                    job: Some(id),
                    what: format!("malformed output key `{}`; removed", key_text(&k)),
                });
                r.drop_keys.push(k);
                continue;
            };
            if undecodable.contains(&chunk) {
                continue;
            }
            if !done.contains(&chunk) {
                r.problems.push(Problem {
                    job: Some(id),
                    what: format!(
                        "chunk {chunk} has an output but is not done; the output is dropped"
                    ),
                });
                r.fixes.entry(id).or_default().drop_outputs.insert(chunk);
                continue;
            }
            match found.decode::<ChunkOutput>() {
                Ok(mut out) => {
                    // Only the counting fields matter here; solutions can be many.
                    out.solutions = Vec::new();
                    contributions.insert(chunk, out);
                }
                Err(e) => {
                    r.problems.push(Problem {
                        job: Some(id),
                        what: format!("{e}; chunk {chunk} runs again"),
                    });
                    r.fixes.entry(id).or_default().rerun.insert(chunk);
                }
            }
        }
        for &chunk in &done {
            if !contributions.contains_key(&chunk)
                && !r.fixes.get(&id).is_some_and(|f| f.rerun.contains(&chunk))
            {
                r.problems.push(Problem {
                    job: Some(id),
                    what: format!("chunk {chunk} is done but its output is missing; it runs again"),
                });
                r.fixes.entry(id).or_default().rerun.insert(chunk);
            }
        }
        let mut expected = Tally::default();
        for out in contributions.values() {
            expected.add(out);
        }
        let tkey = job_key(b't', id);
        let stored = match store.kv().get(&tkey)? {
            Some(v) => decode::<Tally>(&tkey, &v).ok(),
            None => None,
        };
        let agrees = match &stored {
            Some(t) => *t == expected,
            None => expected == Tally::default(),
        };
        if !agrees {
            r.problems.push(Problem {
                job: Some(id),
                what: format!(
                    "the stored tally ({}) disagrees with its done chunks ({} chunks, {} nodes); rebuilt from them",
                    stored
                        .as_ref()
                        .map(|t| format!("{} chunks, {} nodes", t.chunks, t.nodes))
                        .unwrap_or_else(|| "missing or unreadable".into()),
                    expected.chunks,
                    expected.nodes
                ),
            });
            r.fixes.entry(id).or_default().tally = Some(expected);
        } else if r.fixes.get(&id).is_some_and(|f| !f.rerun.is_empty()) {
            // Chunks that run again leave the tally: it must equal the sum of the chunks that stay done.
            r.fixes.entry(id).or_default().tally = Some(expected);
        }
        // Reading the outputs of a job with a damaged block fails on that block, already dealt with above.
        let deep_outputs = deep && !damaged_jobs.contains(&id);
        check_artifacts(store, id, rec, deep, deep_outputs, &mut r)?;
        check_inputs(id, rec, &jobs, &mut r);
    }
    // Start-up reads the summaries, not the blocks: one that disagrees with its blocks would lose or invent
    // done chunks. Repair rewrites every summary from the blocks as they are after it.
    let stale = store.stale_summaries()?;
    if stale > 0 {
        r.problems.push(Problem {
            job: None,
            what: format!(
                "{stale} segment summaries disagree with their blocks; rewritten from the blocks"
            ),
        });
    }
    Ok(r)
}

/// A job's inputs must be stored jobs created before it. One that is gone (its record was undecodable and
/// dropped, say) can never be bound again: a finished job keeps its answer, one that still has chunks to run
/// is cancelled, since it would wait for that input for ever.
fn check_inputs(id: JobId, rec: &JobRecord, jobs: &BTreeMap<JobId, JobRecord>, r: &mut Report) {
    let dangling: BTreeSet<JobId> = rec
        .input_jobs
        .iter()
        .copied()
        .filter(|i| *i >= id || !jobs.contains_key(i))
        .collect();
    if dangling.is_empty() {
        return;
    }
    let list = dangling
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let reruns = r
        .fixes
        .get(&id)
        .is_some_and(|f| f.rerun_all || !f.rerun.is_empty());
    let action = if rec.state.is_finished() && !reruns {
        "its answer is complete; the references are dropped"
    } else {
        "it can never run and is cancelled (submit it again)"
    };
    r.problems.push(Problem {
        job: Some(id),
        what: format!("its input jobs {list} are not in the store or not older than it; {action}"),
    });
    r.fixes.entry(id).or_default().dangling_inputs = dangling;
}

fn check_artifacts(
    store: &Store,
    id: JobId,
    rec: &JobRecord,
    deep: bool,
    deep_outputs: bool,
    r: &mut Report,
) -> Result<(), StoreError> {
    if let Some(digest) = &rec.artifact_digest {
        let bad = match store.kv().get(&job_key(b'r', id))? {
            None => Some("its merged artifact is missing".to_string()),
            Some(_) if !deep => None,
            Some(_) => match store.artifact(id) {
                Ok(Some(bytes)) if blake3::hash(&bytes).to_hex().as_str() == digest => None,
                Ok(_) => Some("its merged artifact does not match the job's digest".into()),
                Err(e) => Some(e.to_string()),
            },
        };
        if let Some(why) = bad {
            r.problems.push(Problem {
                job: Some(id),
                what: format!("{why}; the job runs again"),
            });
            r.fixes.entry(id).or_default().rerun_all = true;
        }
    } else if deep_outputs {
        // Outputs with their lists of solutions are read one at a time (a job's lists can be any size); only
        // chunk artifacts, which a merge needs together, are read all at once.
        let read = if store.has_chunk_artifacts(id)? {
            store.outputs(id).map(drop)
        } else {
            store.for_each_output(id, rec.slots(), &mut |_, _| Ok::<(), StoreError>(()))
        };
        if let Err(e) = read {
            r.problems.push(Problem {
                job: Some(id),
                what: format!("{e}; the job runs again"),
            });
            r.fixes.entry(id).or_default().rerun_all = true;
        }
    }
    Ok(())
}

/// Applies what [`check`] found, in one batch: chunks go back to pending, tallies are rebuilt, finished jobs
/// with chunks to re-run are running again. Returns the number of problems fixed.
pub fn repair(store: &Store, report: &Report) -> Result<usize, StoreError> {
    let mut writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for k in &report.drop_keys {
        writes.push((k.clone(), None));
    }
    for (&id, fix) in &report.fixes {
        let Some(v) = store.kv().get(&job_key(b'j', id))? else {
            continue;
        };
        let Ok(mut rec) = decode::<JobRecord>(&job_key(b'j', id), &v) else {
            continue;
        };
        let pending = serde_json::to_vec(&ChunkRecord::Pending { attempts: 0 }).unwrap_or_default();
        let rerun: Vec<u64> = if fix.rerun_all {
            (0..rec.slots()).collect()
        } else {
            fix.rerun.iter().copied().collect()
        };
        for &chunk in fix.drop_outputs.iter() {
            writes.push((chunk_key(b'o', id, chunk), None));
            writes.push((chunk_key(b'a', id, chunk), None));
            writes.push((chunk_key(b'l', id, chunk), None));
        }
        for &chunk in &rerun {
            writes.push((chunk_key(b'c', id, chunk), Some(pending.clone())));
            writes.push((chunk_key(b'o', id, chunk), None));
            writes.push((chunk_key(b'a', id, chunk), None));
            writes.push((chunk_key(b'l', id, chunk), None));
        }
        let tally = if fix.rerun_all {
            Some(Tally::default())
        } else {
            fix.tally.clone()
        };
        if let Some(t) = tally {
            writes.push((
                job_key(b't', id),
                Some(serde_json::to_vec(&t).unwrap_or_default()),
            ));
        }
        if fix.rerun_all {
            writes.push((job_key(b'r', id), None));
            rec.artifact_digest = None;
        }
        if !fix.dangling_inputs.is_empty() {
            rec.input_jobs.retain(|i| !fix.dangling_inputs.contains(i));
            if !rec.state.is_finished() || !rerun.is_empty() {
                rec.state = JobState::Cancelled;
                rec.finished_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_millis() as u64);
            }
        }
        if !rerun.is_empty() && rec.state.is_finished() && rec.state != JobState::Cancelled {
            rec.state = JobState::Running;
            rec.finished_ms = 0;
        }
        writes.push((
            job_key(b'j', id),
            Some(serde_json::to_vec(&rec).unwrap_or_default()),
        ));
    }
    // Chunk keys reach the chunk wherever it lives (a block or a key of its own).
    store.apply_chunk_writes(writes)?;
    // Dropped blocks took no summary with them; rewritten blocks did, but all are checked once more.
    store.write_summaries()?;
    Ok(report.problems.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Op;

    fn job(id: JobId, n: u64) -> JobRecord {
        JobRecord {
            state: JobState::Done,
            finished_ms: 2,
            ..JobRecord::new(id, "star", serde_json::json!({"points": 6}), n, 1)
        }
    }

    fn done() -> ChunkRecord {
        ChunkRecord::Done {
            digest: "d".into(),
            worker: "w".into(),
        }
    }

    fn out(nodes: u64) -> ChunkOutput {
        ChunkOutput {
            nodes,
            ..Default::default()
        }
    }

    /// What `check` finds in `store`: the report and each problem as it is printed.
    fn checked(store: &Store, deep: bool) -> (Report, Vec<String>) {
        let r = check(store, deep).unwrap();
        let text = r.problems.iter().map(|p| p.to_string()).collect();
        (r, text)
    }

    /// One of the problems `text` lists is one that `says` holds for.
    fn assert_one_says(text: &[String], says: impl Fn(&str) -> bool) {
        assert!(text.iter().any(|t| says(t)), "{text:?}");
    }

    /// A finished three-chunk job, stored as the coordinator stores it.
    fn healthy() -> Store {
        let store = Store::in_memory();
        let mut tally = Tally::default();
        let mut ops = vec![Op::job(job(1, 3))];
        for c in 0..3 {
            tally.add(&out(10 + c));
            ops.push(Op::Chunk(1, c, done()));
            ops.push(Op::Output(1, c, out(10 + c)));
        }
        ops.push(Op::Tally(1, tally));
        store.write(ops).unwrap();
        store
    }

    #[test]
    fn a_healthy_store_is_clean() {
        let r = check(&healthy(), true).unwrap();
        assert!(r.is_clean(), "{:?}", r.problems);
        assert_eq!((r.jobs, r.chunk_records, r.outputs), (1, 3, 3));
    }

    #[test]
    fn a_lost_output_reruns_its_chunk_and_fixes_the_tally() {
        let store = healthy();
        store
            .apply_chunk_writes(vec![(chunk_key(b'o', 1, 1), None)])
            .unwrap();
        let r = check(&store, false).unwrap();
        assert!(
            r.problems
                .iter()
                .any(|p| p.what.contains("chunk 1 is done but its output is missing")),
            "{:?}",
            r.problems
        );
        repair(&store, &r).unwrap();
        assert!(check(&store, false).unwrap().is_clean());
        let snap = store.load().unwrap();
        assert_eq!(
            snap.jobs[0].state,
            JobState::Running,
            "the job runs its lost chunk again"
        );
        assert_eq!(snap.tallies[&1].chunks, 2);
        assert_eq!(snap.tallies[&1].nodes, 10 + 12);
        assert!(snap
            .chunks
            .contains(&(1, 1, ChunkRecord::Pending { attempts: 0 })));
    }

    #[test]
    fn garbage_records_and_a_wrong_tally_are_named_and_repaired() {
        let store = healthy();
        let c2 = chunk_key(b'c', 1, 2);
        let inflated = Tally {
            chunks: 3,
            nodes: 999,
            ..Default::default()
        };
        // Through the chunk view: the garbage lands in chunk 2's entry of its block; the short `c/` key is raw.
        store
            .apply_chunk_writes(vec![
                (c2, Some(b"\xff garbage".to_vec())),
                (
                    job_key(b't', 1),
                    Some(serde_json::to_vec(&inflated).unwrap()),
                ),
                (job_key(b'c', 9), Some(b"{}".to_vec())),
            ])
            .unwrap();
        let (r, text) = checked(&store, false);
        assert_one_says(&text, |t| {
            t.contains("damaged record") && t.contains("chunk 2 runs again")
        });
        assert_one_says(&text, |t| t.contains("malformed chunk key"));
        repair(&store, &r).unwrap();
        assert!(check(&store, false).unwrap().is_clean());
        let snap = store.load().unwrap();
        assert_eq!(snap.tallies[&1].nodes, 10 + 11);
    }

    /// Start-up trusts the summaries: one that disagrees with its blocks (here: says nothing is done) is named
    /// and rewritten from the blocks, and start-up then finds the done chunks again.
    #[test]
    fn a_summary_that_disagrees_with_its_blocks_is_rewritten() {
        let store = healthy();
        let want = store.load().unwrap().done;
        let (key, bytes) = store.kv().scan(b"d/").unwrap().remove(0);
        let mut blank = bytes.clone();
        blank[1..9].fill(0);
        store.kv().apply(vec![(key, Some(blank))]).unwrap();
        assert!(store.load().unwrap().done_list().is_empty());
        let (r, text) = checked(&store, false);
        assert_eq!(
            text,
            vec!["1 segment summaries disagree with their blocks; rewritten from the blocks"]
        );
        repair(&store, &r).unwrap();
        assert!(check(&store, true).unwrap().is_clean());
        assert_eq!(store.load().unwrap().done, want);
    }

    /// A block that does not decode loses its chunks: named, dropped and its chunks written back as pending, the
    /// tally rebuilt from the chunks that stay done (none here), the job running again.
    #[test]
    fn a_damaged_block_is_named_and_its_chunks_run_again() {
        let store = healthy();
        store
            .kv()
            .apply(vec![(
                chunk_key(b'b', 1, 0),
                Some(b"\x01\x00\x00".to_vec()),
            )])
            .unwrap();
        // Start-up reads the summaries, which still say the chunks are done; reading their results names the
        // block, and so does fsck.
        store.load().unwrap();
        let err = store.outputs(1).unwrap_err().to_string();
        assert!(err.contains("damaged record `b/"), "{err}");
        for deep in [false, true] {
            let (_, text) = checked(&store, deep);
            assert_one_says(&text, |t| {
                t.starts_with("job 1: damaged record `b/")
                    && t.contains("truncated")
                    && t.ends_with("its chunks run again")
            });
        }
        let r = check(&store, true).unwrap();
        repair(&store, &r).unwrap();
        assert!(check(&store, true).unwrap().is_clean());
        let snap = store.load().unwrap();
        assert_eq!(snap.jobs[0].state, JobState::Running);
        assert_eq!(snap.tallies[&1], Tally::default());
        assert!(snap.done_list().is_empty());
        assert_eq!(
            snap.chunks,
            (0..3)
                .map(|c| (1, c, ChunkRecord::Pending { attempts: 0 }))
                .collect::<Vec<_>>()
        );
        // A damaged block of a job that is not stored is just removed.
        store
            .kv()
            .apply(vec![(chunk_key(b'b', 7, 2), Some(vec![0]))])
            .unwrap();
        let r = check(&store, false).unwrap();
        assert!(
            r.problems
                .iter()
                .any(|p| p.job == Some(7) && p.what.ends_with("removed")),
            "{:?}",
            r.problems
        );
        repair(&store, &r).unwrap();
        assert!(check(&store, true).unwrap().is_clean());
        assert!(store.kv().get(&chunk_key(b'b', 7, 2)).unwrap().is_none());
    }

    #[test]
    fn a_damaged_merged_artifact_reruns_the_whole_job() {
        let store = healthy();
        let mut rec = job(1, 3);
        rec.artifact_digest = Some(blake3::hash(b"table").to_hex().to_string());
        store
            .write(vec![
                Op::job(rec),
                Op::Artifact(1, std::sync::Arc::new(b"tablX".to_vec())),
            ])
            .unwrap();
        assert!(
            check(&store, false).unwrap().is_clean(),
            "shallow checks do not hash"
        );
        let r = check(&store, true).unwrap();
        assert!(
            r.problems.iter().any(|p| p.what.contains("does not match")),
            "{:?}",
            r.problems
        );
        repair(&store, &r).unwrap();
        let snap = store.load().unwrap();
        assert_eq!(snap.jobs[0].artifact_digest, None);
        assert_eq!(snap.jobs[0].state, JobState::Running);
        assert!(snap
            .chunks
            .iter()
            .all(|(_, _, c)| *c == ChunkRecord::Pending { attempts: 0 }));
        assert!(check(&store, true).unwrap().is_clean());
    }

    /// Jobs 2 and 3 read job 1; job 1's record is damaged and dropped. The finished reader keeps its answer and
    /// loses the reference; the unfinished one can never run and is cancelled. A healthy list is left alone.
    #[test]
    fn inputs_that_are_gone_are_named_and_their_readers_settled() {
        let store = healthy();
        let mut done_reader = job(2, 0);
        done_reader.input_jobs = vec![1];
        let mut waiting = job(3, 2);
        waiting.state = JobState::Running;
        waiting.finished_ms = 0;
        waiting.input_jobs = vec![2, 1];
        let mut fine = job(4, 0);
        fine.input_jobs = vec![2, 3];
        store
            .write(vec![
                Op::job(done_reader),
                Op::job(waiting),
                Op::job(fine.clone()),
            ])
            .unwrap();
        assert!(check(&store, false).unwrap().is_clean());
        store
            .kv()
            .apply(vec![(job_key(b'j', 1), Some(b"{damaged".to_vec()))])
            .unwrap();
        let (r, text) = checked(&store, false);
        assert_one_says(&text, |t| {
            t.starts_with("job 2: its input jobs 1 are not") && t.contains("complete")
        });
        assert_one_says(&text, |t| {
            t.starts_with("job 3: its input jobs 1 are not") && t.contains("cancelled")
        });
        assert!(!text.iter().any(|t| t.starts_with("job 4")), "{text:?}");
        repair(&store, &r).unwrap();
        let snap = store.load().unwrap();
        let by_id = |id| snap.jobs.iter().find(|j| j.id == id).unwrap().clone();
        assert_eq!(by_id(2).input_jobs, Vec::<JobId>::new());
        assert_eq!(by_id(2).state, JobState::Done);
        assert_eq!(by_id(3).input_jobs, vec![2]);
        assert_eq!(by_id(3).state, JobState::Cancelled);
        assert_eq!(by_id(4), fine);
        assert!(check(&store, false).unwrap().is_clean());
    }

    #[test]
    fn the_coordinator_refuses_a_store_whose_tally_disagrees() {
        let store = healthy();
        let inflated = Tally {
            chunks: 4,
            nodes: 1,
            ..Default::default()
        };
        store
            .kv()
            .apply(vec![(
                job_key(b't', 1),
                Some(serde_json::to_vec(&inflated).unwrap()),
            )])
            .unwrap();
        let err = crate::coordinator::Coordinator::open(store, Default::default())
            .err()
            .expect("a damaged store is refused");
        let text = err.to_string();
        assert!(
            text.contains("3 done chunks but its tally counts 4"),
            "{text}"
        );
        assert!(text.contains("sweep store repair"), "{text}");
    }
}
