use super::strategy::{digest, Saves};
use super::triangle::{encode, index};
use super::*;
use proptest::prelude::*;
use sweep_space::perm::unrank;
/// Every chunk run, verified and merged, as the engine would.
use sweep_space::testkit::run_all as solve;

fn job(rows: u32, method: Method, ranks: Option<&str>) -> BilliardJob {
    BilliardJob::new(BilliardParams {
        rows,
        method,
        ranks: ranks.map(str::to_string),
    })
    .unwrap()
}

/// The original program's two solutions as index vectors, in the order it prints them.
const SEED_FIRST: [u8; 15] = [5, 4, 9, 7, 11, 2, 8, 1, 12, 10, 6, 14, 15, 3, 13];
const SEED_SECOND: [u8; 15] = [5, 9, 4, 2, 11, 7, 10, 12, 1, 8, 13, 3, 15, 14, 6];

/// An independent check of a triangle given as rows (top first), not using [`Geometry`].
fn rows_hold(rows: &[Vec<u8>]) -> bool {
    rows.windows(2).all(|w| {
        w[1].iter()
            .enumerate()
            .all(|(k, &b)| b == w[0][k].abs_diff(w[0][k + 1]))
    })
}

/// Independent exhaustive count for tiny triangles: every permutation of 1..n laid out row by row from the top
/// (Heap's algorithm, a different order and layout from the kernels). Returns (solutions, unique, sorted
/// canonical rows), where the canonical member of a class is the lexicographically smaller of the rows and their
/// reversal... compared in top-first row layout.
fn exhaustive(rows: usize) -> (u128, u128, Vec<Vec<Vec<u8>>>) {
    let n = rows * (rows + 1) / 2;
    let mut a: Vec<u8> = (1..=n as u8).collect();
    let mut found = Vec::new();
    let layout = |a: &[u8]| -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = 0;
        for len in (1..=rows).rev() {
            out.push(a[at..at + len].to_vec());
            at += len;
        }
        out
    };
    let mut c = vec![0usize; n];
    let mut visit = |a: &[u8]| {
        let t = layout(a);
        if rows_hold(&t) {
            found.push(t);
        }
    };
    visit(&a);
    let mut i = 1;
    while i < n {
        if c[i] < i {
            if i % 2 == 0 {
                a.swap(0, i);
            } else {
                a.swap(c[i], i);
            }
            visit(&a);
            c[i] += 1;
            i = 1;
        } else {
            c[i] = 0;
            i += 1;
        }
    }
    let solutions = found.len() as u128;
    let mut classes: Vec<Vec<Vec<u8>>> = found.into_iter().map(mirror_min).collect();
    classes.sort();
    classes.dedup();
    (solutions, classes.len() as u128, classes)
}

/// Independent count for five rows: every top row of 5 distinct numbers, lower rows derived, numbers distinct.
fn five_rows_by_top_row() -> u128 {
    let mut count = 0;
    let mut top = [0u8; 5];
    fn rec(top: &mut [u8; 5], k: usize, count: &mut u128) {
        if k == 5 {
            let mut rows = vec![top.to_vec()];
            while rows.last().map_or(0, Vec::len) > 1 {
                let prev = rows.last().cloned().unwrap_or_default();
                rows.push(prev.windows(2).map(|w| w[0].abs_diff(w[1])).collect());
            }
            let mut all: Vec<u8> = rows.concat();
            all.sort();
            if all == (1..=15).collect::<Vec<u8>>() {
                *count += 1;
            }
            return;
        }
        for v in 1..=15u8 {
            if !top[..k].contains(&v) {
                top[k] = v;
                rec(top, k + 1, count);
            }
        }
    }
    rec(&mut top, 0, &mut count);
    count
}

/// The smaller of a triangle's rows and their mirror image: its class, computed without [`Geometry`].
fn mirror_min(rows: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mirrored: Vec<Vec<u8>> = rows
        .iter()
        .map(|r| r.iter().rev().copied().collect())
        .collect();
    rows.min(mirrored)
}

/// Canonical rows of an answer, sorted the same way as [`exhaustive`]'s.
fn canonical_rows(geo: &Geometry, ans: &Answer) -> Vec<Vec<Vec<u8>>> {
    let mut out: Vec<Vec<Vec<u8>>> = ans
        .solutions
        .iter()
        .map(|s| mirror_min(geo.to_rows(&geo.parse_solution(s).unwrap())))
        .collect();
    out.sort();
    out
}

#[test]
fn seed_groups_and_numbering() {
    let geo = Geometry::new(5);
    assert_eq!(geo.groups, crate::triangle::ORIGINAL_GROUPS);
    assert_eq!(geo.n, 15);
    assert_eq!(index(4, 0), 10);
    // In the original program's order every group completes at its upper right ball and no ball completes two groups.
    let check = brute::completing_groups(&geo);
    assert_eq!(check.iter().filter(|c| c.is_some()).count(), 10);
}

#[test]
fn triangle_rule_accepts_the_seed_solutions_and_rejects_breaks() {
    let geo = Geometry::new(5);
    assert!(geo.is_solution(&SEED_FIRST));
    assert!(geo.is_solution(&SEED_SECOND));
    assert_eq!(
        geo.to_rows(&SEED_FIRST),
        vec![
            vec![6, 14, 15, 3, 13],
            vec![8, 1, 12, 10],
            vec![7, 11, 2],
            vec![4, 9],
            vec![5]
        ]
    );
    // Swapping two balls breaks a group; a repeated number is not a permutation.
    let mut swapped = SEED_FIRST;
    swapped.swap(1, 2);
    assert!(!geo.is_solution(&swapped));
    let mut repeated = SEED_FIRST;
    repeated[0] = 4;
    assert!(!geo.is_solution(&repeated));
    assert!(!geo.is_solution(&SEED_FIRST[..14]));
    // The smallest triangles.
    assert!(Geometry::new(2).is_solution(&[1, 2, 3]));
    assert!(!Geometry::new(2).is_solution(&[3, 1, 2]));
}

#[test]
fn mirror_canonical_form_is_the_seed_first_solution() {
    let geo = Geometry::new(5);
    assert_eq!(geo.mirrored(&SEED_FIRST), SEED_SECOND.to_vec());
    assert_eq!(geo.mirrored(&SEED_SECOND), SEED_FIRST.to_vec());
    assert_eq!(geo.canonical(&SEED_SECOND), SEED_FIRST.to_vec());
    assert_eq!(geo.canonical(&SEED_FIRST), SEED_FIRST.to_vec());
    // One ball is its own mirror.
    assert_eq!(Geometry::new(1).canonical(&[1]), vec![1]);
}

#[test]
fn five_rows_give_the_seed_answer_with_both_methods() {
    let strategy = solve(&job(5, Method::Strategy, None), None);
    assert_eq!(strategy.tally.counter("solutions"), 2);
    assert_eq!(strategy.tally.counter("unique"), 1);
    assert_eq!(strategy.solutions, vec![encode(&SEED_FIRST)]);
    let brute = solve(&job(5, Method::Brute, None), Some(97));
    assert_eq!(brute.tally.nodes, 1_307_674_368_000);
    assert_eq!(brute.solutions, strategy.solutions);
    assert_eq!(brute.tally.counters, strategy.tally.counters);
    assert_eq!(five_rows_by_top_row(), 2);
    let j = job(5, Method::Strategy, None);
    let result = j.result(&strategy);
    assert_eq!(result["canonical"][0][0], json!([6, 14, 15, 3, 13]));
    let text = j.render_text(&result);
    assert!(text.contains("2 solutions, 1 unique"), "{text}");
    assert!(
        text.contains("level  4 |  6    14    15     3    13\n"),
        "{text}"
    );
    assert!(text.contains("level  0 |              5\n"), "{text}");
    assert!(
        text.contains("level  4 | 13     3    15    14     6\n"),
        "{text}"
    );
}

#[test]
fn rows_one_to_four_match_an_independent_exhaustive_count() {
    for rows in 1..=4u32 {
        let (solutions, unique, classes) = exhaustive(rows as usize);
        let geo = Geometry::new(rows as usize);
        for method in [Method::Brute, Method::Strategy] {
            for chunks in [Some(1), None] {
                let ans = solve(&job(rows, method, None), chunks);
                assert_eq!(
                    ans.tally.counter("solutions"),
                    solutions,
                    "rows={rows} {method:?}"
                );
                assert_eq!(
                    ans.tally.counter("unique"),
                    unique,
                    "rows={rows} {method:?}"
                );
                assert_eq!(
                    canonical_rows(&geo, &ans),
                    classes,
                    "rows={rows} {method:?}"
                );
                if method == Method::Brute {
                    assert_eq!(ans.tally.nodes, u128::from(FACTORIALS[geo.n]));
                }
            }
        }
    }
    // Known small counts: 1, 4, 8, 8 triangles (up to mirror 1, 2, 4, 4).
    assert_eq!(exhaustive(3).0, 8);
    assert_eq!(exhaustive(4).0, 8);
}

#[test]
fn six_rows_have_no_triangle() {
    let j = job(6, Method::Strategy, None);
    let ans = solve(&j, None);
    assert_eq!(ans.tally.counter("solutions"), 0);
    assert!(ans.tally.nodes > 0);
    let one = solve(&j, Some(1));
    assert_eq!(
        one.tally.nodes, ans.tally.nodes,
        "nodes do not depend on chunking"
    );
    let text = j.render_text(&j.result(&ans));
    assert!(
        text.contains("No difference triangle with 6 rows"),
        "{text}"
    );
}

#[test]
fn seven_rows_have_no_triangle() {
    let ans = solve(&job(7, Method::Strategy, None), None);
    assert_eq!(ans.tally.counter("solutions"), 0);
    assert_eq!(ans.tally.nodes, 1_313_060);
}

/// Long (seconds in release, minutes in debug): `cargo test -p sweep-billiard --release -- --ignored`.
#[test]
#[ignore]
fn eight_and_nine_rows_have_no_triangle() {
    for rows in [8, 9] {
        let ans = solve(&job(rows, Method::Strategy, None), None);
        assert_eq!(ans.tally.counter("solutions"), 0, "rows={rows}");
    }
}

#[test]
fn rank_slices_add_up_and_find_the_seed_solution() {
    let geo = Geometry::new(5);
    let to_perm: Vec<u8> = SEED_FIRST.iter().map(|b| b - 1).collect();
    let r = sweep_space::perm::rank(&to_perm).unwrap();
    let slice = format!("{}..{}", r - 1000, r + 1000);
    let ans = solve(&job(5, Method::Brute, Some(&slice)), Some(7));
    assert_eq!(ans.tally.nodes, 2000);
    assert_eq!(ans.solutions, vec![encode(&SEED_FIRST)]);
    // The mirror's rank is elsewhere: a slice holding only it reports the solution but no unique class.
    let m: Vec<u8> = geo.mirrored(&SEED_FIRST).iter().map(|b| b - 1).collect();
    let rm = sweep_space::perm::rank(&m).unwrap();
    let only_mirror = solve(
        &job(5, Method::Brute, Some(&format!("{rm}..{}", rm + 1))),
        None,
    );
    assert_eq!(only_mirror.tally.counter("solutions"), 1);
    assert_eq!(only_mirror.tally.counter("unique"), 0);
}

#[test]
fn bad_parameters_are_named() {
    let build = |rows, method, ranks: Option<&str>| {
        Billiard::build(BilliardParams {
            rows,
            method,
            ranks: ranks.map(str::to_string),
        })
        .unwrap_err()
        .to_string()
    };
    for (rows, method, ranks, needle) in [
        (0, Method::Strategy, None, "rows must be 1..=12"),
        (13, Method::Strategy, None, "rows must be 1..=12"),
        (6, Method::Brute, None, "rows <= 5"),
        (
            5,
            Method::Strategy,
            Some("0..10"),
            "only apply to --method brute",
        ),
        (5, Method::Brute, Some("10"), "START..END"),
        (5, Method::Brute, Some("a..10"), "`a`"),
        (5, Method::Brute, Some("10..10"), "empty"),
        (4, Method::Brute, Some("0..3628801"), "3628800 permutations"),
    ] {
        let err = build(rows, method, ranks);
        assert!(err.contains(needle), "{err}");
    }
    assert!(Billiard::build(BilliardParams {
        rows: 4,
        method: Method::Brute,
        ranks: Some("1_000..3_628_800".into()),
    })
    .is_ok());
    let j = job(4, Method::Strategy, None);
    sweep_space::testkit::out_of_plan_refused(&j, 1 << 40);
}

#[test]
fn params_roundtrip_through_json() {
    let j = job(5, Method::Brute, Some("5..1_000"));
    let again = sweep_space::testkit::registry::<crate::Billiard>()
        .job_from_params("billiard", &j.params())
        .unwrap();
    assert_eq!(again.params(), &j.params());
    let rebuilt: BilliardParams = serde_json::from_value(j.params()).unwrap();
    assert_eq!(rebuilt.ranks.as_deref(), Some("5..1000"));
    let parsed = sweep_space::testkit::registry::<crate::Billiard>()
        .lookup("billiard")
        .unwrap()
        .parse_args(&[
            "--rows".into(),
            "5".into(),
            "--method".into(),
            "brute".into(),
            "--ranks".into(),
            "5..1000".into(),
        ])
        .unwrap();
    assert_eq!(parsed.params(), &j.params());
    let strategy = sweep_space::testkit::registry::<crate::Billiard>()
        .job_from_params("billiard", &json!({"rows": 7, "method": "strategy"}))
        .unwrap();
    assert_eq!(strategy.params(), &json!({"rows": 7, "method": "strategy"}));
    assert!(serde_json::from_value::<BilliardParams>(
        json!({"rows": 5, "method": "brute", "x": 1})
    )
    .is_err());
}

#[test]
fn verify_rejects_lies() {
    let j = job(4, Method::Strategy, None);
    let plan = j.plan(Some(3)).unwrap();
    let (idx, good) = sweep_space::testkit::first_chunk_with_solutions(&j, plan.n_chunks);
    // A dropped solution, a made-up one and one more unique solution than listed.
    assert_eq!(
        sweep_space::testkit::lies_refused(&j, plan.n_chunks, idx, &["unique"]),
        3
    );
    let mut broken = good.clone();
    broken.solutions[0] = "1,2,3,4,5,6,7,8,9,10".into();
    assert!(j.verify(ChunkId::new(3, idx), &broken).is_err());
    let mut mirrored = good;
    let geo = Geometry::new(4);
    let balls = geo.parse_solution(&mirrored.solutions[0]).unwrap();
    mirrored.solutions[0] = encode(&geo.mirrored(&balls));
    assert!(j.verify(ChunkId::new(3, idx), &mirrored).is_err());
    let b = job(4, Method::Brute, None);
    let mut out = b.run_chunk(ChunkId::new(2, 0), &Control::new()).unwrap();
    b.verify(ChunkId::new(2, 0), &out).unwrap();
    out.nodes -= 1;
    assert!(b.verify(ChunkId::new(2, 0), &out).is_err());
}

#[test]
fn cancellation_stops_a_chunk() {
    let ctl = sweep_space::ChunkControl::default();
    ctl.cancel();
    assert_eq!(
        job(6, Method::Strategy, None).run_chunk(ChunkId::new(1, 0), ctl.control()),
        Err(SpaceError::Cancelled)
    );
    assert_eq!(
        job(5, Method::Brute, None).run_chunk(ChunkId::new(1, 0), ctl.control()),
        Err(SpaceError::Cancelled)
    );
}

/// Runs strategy chunk `chunk` of `n_chunks` saving a cursor every `every` placements, from `resume`: its
/// output, every state it saved, and the nodes it reported (the work this attempt did).
fn run_saving(
    j: &BilliardJob,
    at: ChunkId,
    every: u64,
    resume: Option<&str>,
) -> (ChunkOutput, Vec<String>, u64) {
    let ctl = Control::new();
    let mut states = Vec::new();
    let mut sink = |state: String| {
        states.push(state);
        Ok(())
    };
    let saves = Saves {
        every,
        sink: &mut sink,
    };
    let out = strategy::run_chunk(&j.geo, &j.prefixes, at, &ctl, resume, saves).unwrap();
    (out, states, ctl.nodes())
}

/// The output of a chunk run through the engine's path from `resume`, and the nodes that attempt reported.
fn resumed(j: &BilliardJob, at: ChunkId, resume: &str) -> (ChunkOutput, u64) {
    let ctl = sweep_space::ChunkControl::new(Some(resume.to_string()));
    let out = j.run_chunk(at, ctl.control()).unwrap();
    (out, ctl.nodes())
}

/// The same state with one field replaced and its digest recomputed: a well-formed lie.
fn forged(state: &str, key: &str, value: &str) -> String {
    let body = state.rsplit_once(" check=").unwrap().0;
    let body: Vec<String> = body
        .split(' ')
        .map(|w| match w.split_once('=') {
            Some((k, _)) if k == key => format!("{k}={value}"),
            _ => w.to_string(),
        })
        .collect();
    let body = body.join(" ");
    let check = digest(&body);
    format!("{body} check={check}")
}

#[test]
fn strategy_resumes_from_every_saved_cursor() {
    for (rows, n_chunks, every) in [
        (3, 1, 1),
        (4, 2, 1),
        (5, 1, 64),
        (5, 3, 16),
        (6, 4, 512),
        (7, 3, 16384),
    ] {
        let j = job(rows, Method::Strategy, None);
        let mut carried_a_solution = false;
        for at in ChunkId::all(n_chunks) {
            let whole = j.run_chunk(at, &Control::new()).unwrap();
            let (out, states, reported) = run_saving(&j, at, every, None);
            assert_eq!(out, whole, "saving does not change the output");
            assert_eq!(reported, whole.nodes);
            assert!(
                rows < 5 || states.len() > 10,
                "rows={rows} {at}: {} states",
                states.len()
            );
            for (i, state) in states.iter().enumerate() {
                let what = format!("rows={rows} {at} state {i}: {state}");
                assert!(state.len() < 1000, "{what}");
                carried_a_solution |= !state.contains("found= ");
                let (again, did) = resumed(&j, at, state);
                assert_eq!(again, whole, "{what}");
                assert!(did < whole.nodes, "{what}: it started over");
                // A resumed attempt saves cursors too, and they resume as well.
                let (again, later, _) = run_saving(&j, at, every, Some(state));
                assert_eq!(again, whole, "{what}");
                if let Some(last) = later.last() {
                    assert_eq!(resumed(&j, at, last).0, whole, "{what}");
                }
            }
        }
        assert!(rows != 5 || carried_a_solution, "no state held a solution");
    }
}

#[test]
fn a_stopping_worker_gets_the_chunk_back_with_its_cursor() {
    let j = job(7, Method::Strategy, None);
    let whole = j.run_chunk(ChunkId::new(2, 1), &Control::new()).unwrap();
    let mut state = None;
    let mut attempts = 0;
    let out = loop {
        attempts += 1;
        let ctl = sweep_space::ChunkControl::new(state.take());
        ctl.request_stop();
        match j.run_chunk(ChunkId::new(2, 1), ctl.control()) {
            Ok(out) => break out,
            Err(e) => {
                assert_eq!(e, SpaceError::Cancelled);
                state = ctl.take_resume_state();
                assert!(state.is_some(), "stopped without a cursor");
            }
        }
        assert!(attempts < 1000, "no progress");
    };
    assert_eq!(out, whole);
    assert!(attempts > 3, "{attempts} attempts");
}

#[test]
fn foreign_and_garbled_states_are_ignored() {
    let j = job(7, Method::Strategy, None);
    let at = ChunkId::new(4, 1);
    let whole = j.run_chunk(at, &Control::new()).unwrap();
    let (_, states, _) = run_saving(&j, at, 4096, None);
    let good = &states[states.len() / 2];
    assert!(resumed(&j, at, good).1 < whole.nodes);
    let other_chunk = run_saving(&j, ChunkId { chunk: 2, ..at }, 4096, None).1;
    let other_split = run_saving(&j, ChunkId { n_chunks: 5, ..at }, 4096, None).1;
    let other_rows = run_saving(&job(6, Method::Strategy, None), at, 256, None).1;
    let mut bad = vec![
        String::new(),
        "garbage".into(),
        "1 2 3".into(),
        good.replace("billiard-strategy/1", "billiard-strategy/2"),
        good.replace("nodes=", "nodes=1"),
        good.replacen(' ', "  ", 1),
        format!("{good} "),
        good[..good.len() - 1].to_string(),
        other_chunk[other_chunk.len() / 2].clone(),
        other_split[other_split.len() / 2].clone(),
        other_rows[other_rows.len() / 2].clone(),
    ];
    // Well-formed lies: the digest matches but the cursor is not one of this chunk's.
    let prefix: usize = good
        .split(' ')
        .find_map(|w| w.strip_prefix("prefix="))
        .unwrap()
        .parse()
        .unwrap();
    for (key, value) in [
        ("rows", "6".to_string()),
        ("chunk", format!("{}/5", at.chunk)),
        ("prefix", (prefix + 1).to_string()),
        ("prefix", "99999999999".into()),
        ("path", "1".into()),
        ("path", "1,2,3".into()),
        ("path", "28,1,2,3,4,5,6".into()),
        ("path", "200,300".into()),
        ("path", String::new()),
        ("unique", "1".into()),
        ("solutions", "x".into()),
        ("found", "1,2,3".into()),
    ] {
        bad.push(forged(good, key, value.as_str()));
    }
    for state in &bad {
        let (out, did) = resumed(&j, at, state);
        assert_eq!(out, whole, "{state}");
        assert_eq!(did, whole.nodes, "trusted: {state}");
    }
    // Re-signing true fields keeps a state valid: the lies above were refused for what they say, not their digest.
    let (out, did) = resumed(&j, at, &forged(good, "rows", "7"));
    assert_eq!(out, whole);
    assert!(did < whole.nodes);
}

/// A piece's cursor that cannot be read must not run the whole chunk: that would count the chunk's other pieces
/// twice. It is refused, so the run fails and the chunk is retried from its recorded part.
#[test]
fn a_pieces_garbled_cursor_is_refused_not_run_as_the_whole_chunk() {
    let j = job(7, Method::Strategy, None);
    let at = ChunkId::new(2, 1);
    let (lo, hi) = at.split(j.prefixes.len() as u128);
    let piece_state = format!("span {} {}", lo + 1, hi - 1);
    let piece = resumed(&j, at, &piece_state).0;
    let (_, states, _) = run_saving(&j, at, 1024, Some(&piece_state));
    let good = &states[states.len() / 2];
    assert!(good.contains(" span="), "{good}");
    assert_eq!(resumed(&j, at, good).0, piece);
    let unreadable = [
        good.replace("nodes=", "nodes=1"),
        good[..good.len() - 1].to_string(),
        good.replacen(' ', "  ", 1),
        forged(good, "span", "9..3"),
        forged(good, "span", "0..99999999"),
        forged(good, "span", "x"),
        forged(good, "chunk", &format!("{}/5", at.chunk)),
        forged(good, "rows", "6"),
        format!("1 2 3 span {} {hi}", lo + 1),
    ];
    for state in &unreadable {
        let ctl = sweep_space::ChunkControl::new(Some(state.clone()));
        let err = j.run_chunk(at, ctl.control());
        assert!(
            matches!(&err, Err(SpaceError::InvalidParam { name: "state", .. })),
            "{state}: {err:?}"
        );
    }
    // A legible span whose cursor is a lie starts that span over: the piece still counts only itself.
    for (key, value) in [("path", "1,2,3"), ("unique", "1"), ("prefix", "0")] {
        let state = forged(good, key, value);
        let (out, did) = resumed(&j, at, &state);
        assert_eq!(out, piece, "{state}");
        assert_eq!(did, piece.nodes, "trusted: {state}");
    }
}

#[test]
fn a_refused_state_stops_the_saving_not_the_search() {
    let j = job(6, Method::Strategy, None);
    let whole = j.run_chunk(ChunkId::new(1, 0), &Control::new()).unwrap();
    let ctl = Control::new();
    let mut offered = 0;
    let mut sink = |_: String| {
        offered += 1;
        Err(SpaceError::Cancelled)
    };
    let saves = Saves {
        every: 64,
        sink: &mut sink,
    };
    let out =
        strategy::run_chunk(&j.geo, &j.prefixes, ChunkId::new(1, 0), &ctl, None, saves).unwrap();
    assert_eq!(out, whole);
    assert_eq!(offered, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every brute verdict equals a one-by-one test of the permutation at that rank.
    #[test]
    fn brute_single_rank_matches_direct_test(rows in 1u32..=4, seed in any::<u64>()) {
        let geo = Geometry::new(rows as usize);
        let r = seed % FACTORIALS[geo.n];
        let balls: Vec<u8> = unrank(geo.n, r).unwrap().iter().map(|v| v + 1).collect();
        let ans = solve(&job(rows, Method::Brute, Some(&format!("{r}..{}", r + 1))), None);
        prop_assert_eq!(ans.tally.nodes, 1);
        prop_assert_eq!(ans.tally.counter("solutions"), u128::from(geo.groups_hold(&balls)));
    }

    /// Every reported triangle, from any chunk of any split, is a real canonical triangle.
    #[test]
    fn every_reported_triangle_verifies(rows in 1u32..=5, chunks in 1u64..40, pick in any::<u64>()) {
        let j = job(rows, Method::Strategy, None);
        let plan = j.plan(None).unwrap();
        let n_chunks = chunks.min(plan.n_chunks);
        let chunk = pick % n_chunks;
        let out = j.run_chunk(ChunkId::new(n_chunks, chunk), &Control::new()).unwrap();
        let geo = Geometry::new(rows as usize);
        for s in &out.solutions {
            let balls = geo.parse_solution(s).unwrap();
            prop_assert!(geo.is_solution(&balls));
            prop_assert!(rows_hold(&geo.to_rows(&balls)));
            prop_assert_eq!(geo.canonical(&balls), balls);
        }
    }

    /// A chunk interrupted at any saved cursor, of any split, resumes to the uninterrupted output; a state with
    /// one byte changed is either ignored or still gives that output.
    #[test]
    fn resuming_anywhere_gives_the_uninterrupted_output(
        rows in 3u32..=6,
        chunks in 1u64..12,
        pick in any::<u64>(),
        every in 1u64..2000,
        which in any::<usize>(),
        cut in any::<usize>(),
        byte in 32u8..127,
    ) {
        let j = job(rows, Method::Strategy, None);
        let n_chunks = chunks.min(j.plan(None).unwrap().n_chunks);
        let at = ChunkId::new(n_chunks, pick % n_chunks);
        let whole = j.run_chunk(at, &Control::new()).unwrap();
        let (out, states, _) = run_saving(&j, at, every, None);
        prop_assert_eq!(&out, &whole);
        if !states.is_empty() {
            let state = &states[which % states.len()];
            prop_assert_eq!(&resumed(&j, at, state).0, &whole);
            let mut bytes = state.clone().into_bytes();
            let cut = cut % bytes.len();
            bytes[cut] = byte;
            let changed = String::from_utf8(bytes).unwrap();
            let (out, did) = resumed(&j, at, &changed);
            prop_assert_eq!(&out, &whole);
            prop_assert!(changed == *state || did == whole.nodes, "trusted {}", changed);
        }
    }

    /// Canonical form is shared by a triangle and its mirror and is idempotent, for any arrangement.
    #[test]
    fn canonical_form_is_mirror_invariant(rows in 1usize..=12, seed in any::<u64>()) {
        let geo = Geometry::new(rows);
        let mut balls: Vec<u8> = (1..=geo.n as u8).collect();
        let mut s = seed;
        for i in (1..balls.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            balls.swap(i, (s >> 33) as usize % (i + 1));
        }
        let m = geo.mirrored(&balls);
        // No triangle of 6 rows or more exists, and the rule check must not overflow on the large ones.
        prop_assert!(rows <= 5 || !geo.is_solution(&balls));
        prop_assert_eq!(geo.mirrored(&m), balls.clone());
        prop_assert_eq!(geo.canonical(&balls), geo.canonical(&m));
        let c = geo.canonical(&balls);
        prop_assert!(c <= balls);
        prop_assert_eq!(geo.canonical(&c), c.clone());
        // The mirror reverses every row.
        let rows_m: Vec<Vec<u8>> = geo.to_rows(&balls).iter().map(|r| r.iter().rev().copied().collect()).collect();
        prop_assert_eq!(geo.to_rows(&m), rows_m);
    }
}

/// A piece's cursor carries its span under the digest: re-signed with a span that is not inside the chunk, it
/// is refused; with one inside the chunk that does not hold the cursor's prefix, the cursor is not trusted and
/// that span starts over; honest, it resumes the piece.
#[test]
fn a_piece_cursor_with_a_forged_span_is_refused_or_starts_its_span_over() {
    let j = job(7, Method::Strategy, None);
    let at = ChunkId::new(2, 1);
    let (lo, hi) = (j.prefixes.len() / 2, j.prefixes.len());
    let part = format!("span {} {}", lo + 2, hi - 1);
    let ctl = sweep_space::ChunkControl::new(Some(part.clone()));
    ctl.request_stop();
    assert_eq!(j.run_chunk(at, ctl.control()), Err(SpaceError::Cancelled));
    let cursor = ctl.take_resume_state().unwrap();
    let piece = resumed(&j, at, &part).0;
    assert_eq!(resumed(&j, at, &cursor).0, piece);
    for span in [
        format!("{}..{hi}", lo - 1),
        format!("{lo}..{}", hi + 1),
        format!("{}..{}", hi - 1, hi - 1),
        "x..y".to_string(),
    ] {
        let lie = forged(&cursor, "span", &span);
        let ctl = sweep_space::ChunkControl::new(Some(lie.clone()));
        assert!(j.run_chunk(at, ctl.control()).is_err(), "{lie}");
    }
    let elsewhere = format!("span {} {}", lo + 2, lo + 3);
    let lie = forged(&cursor, "span", &format!("{}..{}", lo + 2, lo + 3));
    let (out, did) = resumed(&j, at, &lie);
    assert_eq!(out, resumed(&j, at, &elsewhere).0, "{lie}");
    assert_eq!(did, out.nodes, "trusted: {lie}");
}
