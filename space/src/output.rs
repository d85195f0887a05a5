//! What chunks report and how reports add up to a job's answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::SpaceError;

/// How many solutions a merged answer shows: the smallest ones, sorted. Counts stay exact beyond it, the answer
/// says the list was cut, and the whole list (when the job keeps one) is streamed from the store instead
/// (`sweep results JOB --solutions FILE`), never held whole in memory: an answer's size must not grow with the
/// number of solutions. Spaces render each shown solution as a JSON object (a star's is 26 numbers in two
/// forms, over a KB as a `serde_json::Value`), and an answer is built, sent and parsed again: at 100,000 the
/// answer alone held `sweep run star --points 13` at 640 MB; at 10,000 it is a few tens of MB.
pub const MAX_SHOWN_SOLUTIONS: usize = 10_000;

/// The most solutions one chunk's report may list (the coordinator's default `--max-report-solutions`): one
/// report is held whole in memory on its way, so a chunk with more must be split finer or run `--count-only`.
pub const MAX_REPORT_SOLUTIONS: usize = 1_000_000;

/// What one chunk reports. The merge of outputs is a plain sum (nodes, counters) and concatenation (solutions),
/// so spaces must report each solution in exactly one chunk (e.g. only the canonical member of a symmetry
/// class), which keeps counts exact however the space is split.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkOutput {
    /// Work done: permutations tested, positions visited, ... as the space defines it.
    pub nodes: u64,
    /// Solutions found in the space's canonical text form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub solutions: Vec<String>,
    /// Exact named counters (u128: some counts exceed 64 bits).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counters: BTreeMap<String, u128>,
    /// An optional binary artifact (a piece of a table), merged by [`Job::merge_artifacts`].
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "hex_bytes")]
    pub artifact: Vec<u8>,
}

impl ChunkOutput {
    /// Refuses an output with a counter its space never reports: a made-up counter would be summed into the
    /// answer like a real one.
    pub fn check_counters(&self, known: &[&str]) -> Result<(), SpaceError> {
        match self.counters.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(SpaceError::Verification(format!("unknown counter `{k}`"))),
            None => Ok(()),
        }
    }

    /// A digest over every field, in a fixed binary layout: two workers that computed the same chunk produce the
    /// same digest, and a duplicate completion can be compared with the stored one without keeping both.
    pub fn digest(&self) -> [u8; 32] {
        // The same bytes as one `update` per field, fed in pieces of up to 64 KiB: blake3 hashes a long input
        // several blocks at a time (SIMD), but one short solution per call block by block, which made the
        // coordinator's digest of a 400,000-star list cost as much as writing the list's file.
        const PIECE: usize = 64 << 10;
        let mut h = blake3::Hasher::new();
        let mut buf = Vec::with_capacity(PIECE);
        let mut feed = |bytes: &[u8]| {
            if buf.len() + bytes.len() > PIECE {
                h.update(&buf);
                buf.clear();
            }
            if bytes.len() > PIECE {
                h.update(bytes);
            } else {
                buf.extend_from_slice(bytes);
            }
        };
        feed(b"sweep-chunk-output-v1");
        feed(&self.nodes.to_le_bytes());
        feed(&(self.solutions.len() as u64).to_le_bytes());
        for s in &self.solutions {
            feed(&(s.len() as u64).to_le_bytes());
            feed(s.as_bytes());
        }
        feed(&(self.counters.len() as u64).to_le_bytes());
        for (k, v) in &self.counters {
            feed(&(k.len() as u64).to_le_bytes());
            feed(k.as_bytes());
            feed(&v.to_le_bytes());
        }
        feed(&(self.artifact.len() as u64).to_le_bytes());
        feed(&self.artifact);
        h.update(&buf);
        *h.finalize().as_bytes()
    }

    /// The checks shared by spaces whose chunks report `solutions` and `unique` counters, list each unique
    /// solution they own, and carry no artifact: no other counter, one listed solution per unique count, and
    /// no fewer solutions than unique ones (a chunk may own solutions whose canonical form another chunk lists).
    pub fn check_unique_counters(&self, space: &str) -> Result<(), SpaceError> {
        self.check_unique_counts_only(space)?;
        let unique = self.counters.get("unique").copied().unwrap_or(0);
        if unique != self.solutions.len() as u128 {
            return Err(SpaceError::Verification(format!(
                "{unique} unique counted but {} reported",
                self.solutions.len()
            )));
        }
        Ok(())
    }

    /// A chunk that must have examined exactly `expected` nodes (a brute-force range, a range of integers) says
    /// so; `what` names them in the error ("permutations tested").
    pub fn check_nodes(&self, expected: u128, what: &str) -> Result<(), SpaceError> {
        if u128::from(self.nodes) != expected {
            return Err(SpaceError::Verification(format!(
                "{} {what}, the chunk holds {expected}",
                self.nodes
            )));
        }
        Ok(())
    }

    /// An output of a job that keeps counts only lists nothing: the engine drops lists before they are
    /// checked, so one left is a lie. `what` names the solutions in the error ("stars").
    pub fn check_unlisted(&self, what: &str) -> Result<(), SpaceError> {
        if self.solutions.is_empty() {
            return Ok(());
        }
        Err(SpaceError::Verification(format!(
            "{} {what} listed by a chunk of a job that keeps counts only",
            self.solutions.len()
        )))
    }

    /// What [`ChunkOutput::check_unique_counters`] can check of an output without its list (a job that keeps
    /// counts only): no other counter, no fewer solutions than unique ones, no artifact.
    pub fn check_unique_counts_only(&self, space: &str) -> Result<(), SpaceError> {
        self.check_counters(&["solutions", "unique"])?;
        let unique = self.counters.get("unique").copied().unwrap_or(0);
        let solutions = self.counters.get("solutions").copied().unwrap_or(0);
        if solutions < unique {
            return Err(SpaceError::Verification(format!(
                "{solutions} solutions < {unique} unique"
            )));
        }
        if !self.artifact.is_empty() {
            return Err(SpaceError::Verification(format!(
                "the {space} space has no artifacts"
            )));
        }
        Ok(())
    }

    pub fn count(&mut self, counter: &str, n: u128) {
        *self.counters.entry(counter.to_string()).or_default() += n;
    }
}

/// The running, mergeable part of a job's answer: small enough to rewrite on every completion.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub chunks: u64,
    pub nodes: u128,
    #[serde(default)]
    pub counters: BTreeMap<String, u128>,
}

impl Tally {
    pub fn add(&mut self, out: &ChunkOutput) {
        self.chunks += 1;
        self.nodes += u128::from(out.nodes);
        self.add_counters(&out.counters);
    }

    fn add_counters(&mut self, counters: &BTreeMap<String, u128>) {
        for (k, v) in counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
    }

    pub fn counter(&self, name: &str) -> u128 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    /// Adds another tally, as if its outputs had been added here.
    pub fn add_tally(&mut self, other: &Tally) {
        self.chunks += other.chunks;
        self.nodes += other.nodes;
        self.add_counters(&other.counters);
    }
}

/// A job's merged answer: the tally plus the smallest solutions, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub tally: Tally,
    /// The [`MAX_SHOWN_SOLUTIONS`] smallest listed solutions (all of them when there are fewer), sorted.
    pub solutions: Vec<String>,
    /// True when more than [`MAX_SHOWN_SOLUTIONS`] solutions were listed and the list was cut.
    pub solutions_truncated: bool,
    /// How many solutions the merged outputs listed in all (0 for a job that keeps counts only).
    #[serde(default)]
    pub solutions_listed: u64,
    /// The merged artifact, if the space produces one.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "hex_bytes")]
    pub artifact: Vec<u8>,
}

impl Answer {
    /// Merges chunk outputs in any order into the same answer (solutions are sorted at the end).
    pub fn from_outputs<'a>(outputs: impl IntoIterator<Item = &'a ChunkOutput>) -> Answer {
        let mut merge = AnswerMerge::default();
        for out in outputs {
            merge.add(out);
        }
        merge.finish()
    }
}

/// Builds an [`Answer`] from outputs seen one at a time, in memory bounded by [`MAX_SHOWN_SOLUTIONS`] whatever
/// the number of solutions: the tally is a sum, and of the list only the smallest solutions are kept (a
/// max-heap of that size), so the answer is the same in any order of outputs and equals the head of the
/// whole sorted list.
#[derive(Debug)]
pub struct AnswerMerge {
    tally: Tally,
    smallest: std::collections::BinaryHeap<String>,
    listed: u64,
    keep: usize,
}

impl Default for AnswerMerge {
    fn default() -> Self {
        AnswerMerge::keeping(MAX_SHOWN_SOLUTIONS)
    }
}

impl AnswerMerge {
    /// A merge that shows at most `keep` solutions (tests use small values; the engine uses the default).
    pub fn keeping(keep: usize) -> Self {
        AnswerMerge {
            tally: Tally::default(),
            smallest: std::collections::BinaryHeap::new(),
            listed: 0,
            keep,
        }
    }

    /// Adds one output's counts and solutions.
    pub fn add(&mut self, out: &ChunkOutput) {
        self.tally.add(out);
        self.add_solutions(out.solutions.iter().map(String::as_str));
    }

    /// Adds listed solutions only (their chunk's counts are added apart, e.g. by [`Tally::add`]).
    pub fn add_solutions<'a>(&mut self, solutions: impl IntoIterator<Item = &'a str>) {
        for s in solutions {
            self.listed += 1;
            if self.smallest.len() < self.keep {
                self.smallest.push(s.to_string());
            } else if self.smallest.peek().is_some_and(|top| s < top.as_str()) {
                // Replace the largest kept one: the heap never holds more than `keep`.
                if let Some(mut top) = self.smallest.peek_mut() {
                    s.clone_into(&mut top);
                }
            }
        }
    }

    /// Adds counts only (an output whose solutions were taken apart, or that keeps none).
    pub fn add_tally(&mut self, out: &ChunkOutput) {
        self.tally.add(out);
    }

    /// Folds another merge into this one, as if its outputs had been added here: threads merge apart, without
    /// a shared lock, and are combined once at the end.
    pub fn absorb(&mut self, other: AnswerMerge) {
        self.tally.add_tally(&other.tally);
        let listed = self.listed + other.listed;
        self.add_solutions(other.smallest.iter().map(String::as_str));
        self.listed = listed;
    }

    pub fn finish(self) -> Answer {
        let listed = self.listed;
        Answer {
            tally: self.tally,
            solutions: self.smallest.into_sorted_vec(),
            solutions_truncated: listed > self.keep as u64,
            solutions_listed: listed,
            artifact: Vec::new(),
        }
    }
}

/// Artifacts are binary; in JSON (job records, `--json`) they travel as hex so the text stays readable.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        hex::decode(&text).map_err(|e| serde::de::Error::custom(format!("artifact hex: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_changes_with_every_field() {
        let base = ChunkOutput {
            nodes: 5,
            solutions: vec!["a".into()],
            ..Default::default()
        };
        let mut counted = base.clone();
        counted.count("solutions", 1);
        let mut more_nodes = base.clone();
        more_nodes.nodes += 1;
        let mut with_artifact = base.clone();
        with_artifact.artifact = vec![1];
        let digests = [
            base.digest(),
            counted.digest(),
            more_nodes.digest(),
            with_artifact.digest(),
        ];
        for i in 0..digests.len() {
            for j in i + 1..digests.len() {
                assert_ne!(digests[i], digests[j], "{i} vs {j}");
            }
        }
        assert_eq!(base.digest(), base.clone().digest());
    }

    /// The digest as first written, one `update` per field: digests are stored and compared with those of
    /// later reports (a duplicate, a replica, another version's worker), so the value may never change.
    fn digest_field_by_field(out: &ChunkOutput) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(b"sweep-chunk-output-v1");
        h.update(&out.nodes.to_le_bytes());
        h.update(&(out.solutions.len() as u64).to_le_bytes());
        for s in &out.solutions {
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        h.update(&(out.counters.len() as u64).to_le_bytes());
        for (k, v) in &out.counters {
            h.update(&(k.len() as u64).to_le_bytes());
            h.update(k.as_bytes());
            h.update(&v.to_le_bytes());
        }
        h.update(&(out.artifact.len() as u64).to_le_bytes());
        h.update(&out.artifact);
        *h.finalize().as_bytes()
    }

    #[test]
    fn digest_is_the_field_by_field_hash_whatever_the_sizes() {
        let mut outputs = vec![ChunkOutput::default()];
        // Solutions that fill many pieces, one longer than a piece, and artifacts on both sides of a piece.
        for (n, long, artifact) in [
            (3, 0, 0),
            (100_000, 0, 10),
            (10, 200_000, 70_000),
            (0, 0, 1 << 20),
        ] {
            let mut out = ChunkOutput {
                nodes: n as u64 * 7 + 1,
                solutions: (0..n).map(|i| format!("{i},{}", i * 31 % 97)).collect(),
                artifact: (0..artifact).map(|i| (i * 13 % 251) as u8).collect(),
                ..Default::default()
            };
            if long > 0 {
                out.solutions.push("x".repeat(long));
            }
            out.count("solutions", n as u128 * 3);
            out.count("unique", n as u128);
            outputs.push(out);
        }
        for out in &outputs {
            assert_eq!(out.digest(), digest_field_by_field(out));
        }
    }

    #[test]
    fn answer_is_independent_of_merge_order() {
        let a = ChunkOutput {
            nodes: 3,
            solutions: vec!["b".into()],
            ..Default::default()
        };
        let mut b = ChunkOutput {
            nodes: 4,
            solutions: vec!["a".into()],
            ..Default::default()
        };
        b.count("x", u128::from(u64::MAX) + 7);
        let ab = Answer::from_outputs([&a, &b]);
        let ba = Answer::from_outputs([&b, &a]);
        assert_eq!(ab, ba);
        assert_eq!(ab.tally.nodes, 7);
        assert_eq!(ab.tally.counter("x"), u128::from(u64::MAX) + 7);
        assert_eq!(ab.solutions, vec!["a".to_string(), "b".to_string()]);
    }

    #[test]
    fn an_answer_keeps_the_smallest_solutions_in_any_order() {
        let outputs: Vec<ChunkOutput> = (0..7u64)
            .map(|c| ChunkOutput {
                nodes: c,
                // Interleaved across chunks, so no chunk holds a contiguous run of the smallest.
                solutions: (0..9).map(|i| format!("s{:03}", i * 7 + c)).collect(),
                ..Default::default()
            })
            .collect();
        let mut all: Vec<String> = outputs.iter().flat_map(|o| o.solutions.clone()).collect();
        all.sort();
        for keep in [0, 1, 5, 62, 63, 100] {
            let merge = |order: &mut dyn Iterator<Item = &ChunkOutput>| {
                let mut m = AnswerMerge::keeping(keep);
                order.for_each(|o| m.add(o));
                m.finish()
            };
            let forward = merge(&mut outputs.iter());
            let backward = merge(&mut outputs.iter().rev());
            assert_eq!(forward, backward, "keep {keep}");
            // Merged apart (as threads do) and absorbed: the same answer.
            let (mut odd, mut even) = (AnswerMerge::keeping(keep), AnswerMerge::keeping(keep));
            for (i, o) in outputs.iter().enumerate() {
                if i % 2 == 1 {
                    odd.add(o)
                } else {
                    even.add(o)
                }
            }
            even.absorb(odd);
            assert_eq!(even.finish(), forward, "keep {keep}");
            assert_eq!(forward.solutions, all[..keep.min(63)], "keep {keep}");
            assert_eq!(forward.solutions_listed, 63);
            assert_eq!(forward.solutions_truncated, keep < 63, "keep {keep}");
            assert_eq!(forward.tally.nodes, 21);
        }
    }

    #[test]
    fn artifact_survives_json() {
        let out = ChunkOutput {
            artifact: vec![0, 1, 254, 255],
            ..Default::default()
        };
        let text = serde_json::to_string(&out).unwrap();
        assert!(text.contains("0001feff"), "{text}");
        assert_eq!(serde_json::from_str::<ChunkOutput>(&text).unwrap(), out);
        assert!(serde_json::from_str::<ChunkOutput>(r#"{"nodes":1,"artifact":"0g"}"#).is_err());
    }
}
