//! Fuzzing every parser of the built-in spaces that a user or a network peer can reach: each space's command-line
//! options, job parameters as arbitrary JSON (what the coordinator rebuilds from a Submit or from its store),
//! Brainball position strings and tables, Buzzled clue lists and puzzle files, peg holes, and the chunk outputs
//! and artifacts a worker reports (verify, merge, bind, result and its rendering).
//!
//! proptest, not cargo-fuzz: the project builds on stable. Every target runs `SWEEP_FUZZ_CASES` cases (default
//! [`DEFAULT_CASES`], so `cargo test` stays quick); the full run is
//! `SWEEP_FUZZ_CASES=100000 cargo test --release --test fuzz_spaces`.
//!
//! What each target asserts: no panic (proptest catches it and shrinks the input), no hang (a watchdog aborts the
//! run naming the input when one case runs past [`HANG_LIMIT`], and every case must finish within
//! [`CASE_LIMIT`]), and every error a clear message: non-empty, and naming the field or flag the input broke.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};
use sweep_brainball::{Move, Ring, Table};
use sweep_buzzled::geometry::Geometry;
use sweep_buzzled::puzzle::{check_clues, format_puzzle_file, parse_clue_list, parse_puzzle_file};
use sweep_peg::board::{Board, BoardKind};
use sweep_space::{Answer, ChunkId, ChunkOutput, Control, Registry, Space, SpaceError};

static REGISTRY: std::sync::LazyLock<Registry> = std::sync::LazyLock::new(sweep::builtin);

fn job_from_params(
    space: &str,
    params: &serde_json::Value,
) -> Result<sweep_space::SpaceJob, SpaceError> {
    REGISTRY.job_from_params(space, params)
}

fn lookup(space: &str) -> Result<&'static dyn Space, SpaceError> {
    REGISTRY.lookup(space)
}

/// Cases per target unless `SWEEP_FUZZ_CASES` says otherwise.
const DEFAULT_CASES: u32 = 1500;
/// The longest one case may take (parsing is microseconds; building the biggest allowed job, milliseconds).
const CASE_LIMIT: Duration = Duration::from_secs(5);
/// Past this the watchdog aborts the whole run: a case that never returns would otherwise hang the suite.
const HANG_LIMIT: Duration = Duration::from_secs(60);

/// Cases in flight, by a per-case id: (target, start, input). A thread checks them and aborts on a hang.
type Running = Mutex<HashMap<u64, (&'static str, Instant, String)>>;

fn running() -> &'static Running {
    static RUNNING: OnceLock<Running> = OnceLock::new();
    static WATCHDOG: OnceLock<()> = OnceLock::new();
    let map = RUNNING.get_or_init(Default::default);
    WATCHDOG.get_or_init(|| {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_millis(500));
            let map = running().lock().unwrap_or_else(|p| p.into_inner());
            if let Some((name, start, input)) =
                map.values().find(|(_, s, _)| s.elapsed() > HANG_LIMIT)
            {
                eprintln!(
                    "fuzz {name}: a case hangs ({:.1?} so far); input:\n{input}",
                    start.elapsed()
                );
                std::process::exit(101);
            }
        });
    });
    map
}

struct Watch(u64);

impl Watch {
    fn enter(name: &'static str, input: &dyn Debug) -> Watch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let text: String = format!("{input:?}").chars().take(4000).collect();
        running()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (name, Instant::now(), text));
        Watch(id)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        running()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.0);
    }
}

/// Runs `test` on `SWEEP_FUZZ_CASES` (default [`DEFAULT_CASES`]) inputs drawn from `strategy`, each bounded in time, and reports the wall time.
fn fuzz<S>(name: &'static str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    let cases = sweep_testkit::fuzz::cases(DEFAULT_CASES);
    sweep_testkit::fuzz::fuzz(name, cases, 4096, strategy, |input| {
        let watch = Watch::enter(name, &input);
        let t = Instant::now();
        let shown: String = format!("{input:?}").chars().take(300).collect();
        test(input)?;
        let took = t.elapsed();
        drop(watch);
        prop_assert!(
            took < CASE_LIMIT,
            "{name}: one case took {took:.1?}: {shown}"
        );
        Ok(())
    });
}

/// What `f`'s job makes of `checked`: accepted, the answer `answer` builds from it must give a result that
/// renders (that result); refused, the error must be one people can act on.
fn accepted<T>(
    f: &Fixture,
    checked: Result<T, SpaceError>,
    answer: impl FnOnce(T) -> Answer,
) -> Result<Option<Value>, TestCaseError> {
    match checked {
        Ok(t) => {
            let result = f.job.result(&answer(t));
            let _ = f.job.render_text(&result);
            Ok(Some(result))
        }
        Err(e) => {
            clear_error(&e)?;
            Ok(None)
        }
    }
}

/// An error people can act on: a non-empty message, and for a bad parameter one that names it.
fn clear_error(e: &SpaceError) -> Result<String, TestCaseError> {
    let msg = e.to_string();
    prop_assert!(!msg.trim().is_empty(), "empty message for {e:?}");
    match e {
        SpaceError::InvalidParam { name, reason } => {
            prop_assert!(!name.is_empty() && !reason.trim().is_empty(), "{e:?}");
            prop_assert!(msg.contains(name), "{msg}");
        }
        SpaceError::BadParams { reason, .. } | SpaceError::Verification(reason) => {
            prop_assert!(!reason.trim().is_empty(), "{e:?}");
        }
        _ => {}
    }
    Ok(msg)
}

/// A job that parsed must behave: canonical parameters rebuild an equal job (the coordinator stores them and
/// rebuilds the job on restart), it plans, its input job (if any) parses, and an answer with nothing in it yet
/// (what `Results` shows of a job just started) has a result and a rendering.
fn check_job(job: &sweep_space::SpaceJob, chunks: Option<u64>) -> Result<(), TestCaseError> {
    let params = job.params();
    prop_assert!(params.is_object(), "params {params}");
    let again = job_from_params(job.space(), params).map_err(|e| {
        TestCaseError::fail(format!("canonical params {params} do not rebuild: {e}"))
    })?;
    prop_assert_eq!(again.params(), params);
    let plan = job
        .plan(None)
        .map_err(|e| TestCaseError::fail(format!("default plan of {params}: {e}")))?;
    prop_assert!(plan.n_chunks >= 1);
    if let Some(k) = chunks {
        match job.plan(Some(k)) {
            Ok(p) => prop_assert_eq!(p.n_chunks, k),
            Err(e) => {
                let msg = clear_error(&e)?;
                prop_assert!(msg.contains("chunks"), "{msg}");
            }
        }
    }
    for input in job.inputs() {
        job_from_params(&input.space, &input.params)
            .map_err(|e| TestCaseError::fail(format!("input job of {params}: {e}")))?;
    }
    let result = job.result(&Answer::default());
    let _ = job.render_text(&result);
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Command-line options
// ---------------------------------------------------------------------------------------------------------------

/// Every space with a command line that makes a valid (cheap to build) job, and the flags it takes, read from its
/// own clap definition so that new options are fuzzed too.
fn spaces() -> Vec<(&'static str, Vec<&'static str>, Vec<String>)> {
    use clap::Args;
    fn flags<P: Args>(name: &'static str) -> Vec<String> {
        let cmd = P::augment_args(clap::Command::new(name));
        let mut out: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        // Enum values (methods, boards, modes) and positional words.
        for a in cmd.get_arguments() {
            for v in a.get_possible_values() {
                out.push(v.get_name().to_string());
            }
        }
        out.push("--help".into());
        out
    }
    use {
        sweep_billiard as billiard, sweep_brainball as brainball, sweep_buzzled as buzzled,
        sweep_peg as peg, sweep_star as star,
    };
    vec![
        ("star", vec![], flags::<star::StarParams>("star")),
        (
            "billiard",
            vec![],
            flags::<billiard::BilliardParams>("billiard"),
        ),
        (
            "brainball",
            vec![],
            flags::<brainball::BrainballParams>("brainball"),
        ),
        (
            "buzzled",
            vec!["--clues", P52],
            flags::<buzzled::BuzzledParams>("buzzled"),
        ),
        ("peg", vec![], flags::<peg::PegParams>("peg")),
    ]
}

const P52: &str = "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3";
const SOLVED: &str = "1 2 3 4 5 6 7 8 9 10 11 12 13";

/// Values a user might type, right or wrong: numbers at every boundary, enum words, holes, positions, clues.
fn value() -> impl Strategy<Value = String> {
    let fixed = select(vec![
        "",
        " ",
        "0",
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
        "7",
        "8",
        "9",
        "10",
        "11",
        "12",
        "13",
        "32",
        "33",
        "40",
        "41",
        "255",
        "256",
        "-1",
        "-0",
        "+5",
        "1e3",
        "0x10",
        "4294967295",
        "4294967296",
        "18446744073709551615",
        "18446744073709551616",
        "340282366920938463463374607431768211456",
        "1000000",
        "1000001",
        "٣",
        "NaN",
        "brute",
        "backtrack",
        "strategy",
        "propagate",
        "table",
        "solve",
        "count",
        "positions",
        "english",
        "european",
        "wiegleb",
        "diamond",
        "triangle",
        "centre",
        "center",
        "any",
        "ANY",
        "1,1",
        "4,4",
        "5,5",
        "0,0",
        "9,9",
        "7,1",
        "1,",
        ",1",
        "1,1,1",
        "4 , 4",
        "99999999999999999999,1",
        "0..1",
        "0..100",
        "5..5",
        "10..2",
        "0..1307674368000",
        "0..1307674368001",
        "1_000..2_000",
        "..",
        "a..b",
        SOLVED,
        "13 12 11 10 9 8 7 6 5 4 3 2 1",
        "1 -2 3 -4 5 -6 7 -8 9 -10 11 -12 13",
        "1 2 3",
        "1 2 3 4 5 6 7 8 9 10 11 12 12",
        "1 2 3 4 5 6 7 8 9 10 11 12 14",
        "1; 2",
        ";",
        "; ;",
        P52,
        "1,1,1",
        "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4",
        "side: 4\nclues: 5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3\n",
        "side: 3\nclues: 1\n",
        "side 4",
        "--",
        "-",
        "--points",
        "=",
        "--chunks",
    ])
    .prop_map(str::to_string);
    prop_oneof![
        4 => fixed,
        1 => any::<String>(),
        1 => "[0-9 ,;.\\-+_]{0,40}",
        1 => (any::<i64>(), any::<i64>()).prop_map(|(a, b)| format!("{a},{b}")),
        1 => any::<u64>().prop_map(|v| v.to_string()),
        1 => ring_text(),
    ]
}

fn args_for(flags: Vec<String>) -> impl Strategy<Value = Vec<String>> {
    let token = prop_oneof![
        3 => select(flags.clone()),
        3 => value(),
        1 => (select(flags), value()).prop_map(|(f, v)| format!("{f}={v}")),
    ];
    proptest::collection::vec(token, 0..8)
}

#[test]
fn fuzz_space_options() {
    for (space, _, flags) in spaces() {
        let s = lookup(space).unwrap();
        fuzz(space_target(space, "options"), args_for(flags), |args| {
            match s.parse_args(&args) {
                Ok(job) => check_job(&job, None)?,
                Err(SpaceError::Help(text)) => prop_assert!(!text.is_empty()),
                Err(e) => {
                    clear_error(&e)?;
                }
            }
            Ok(())
        });
    }
}

/// One flag of an otherwise valid command line set to any value: if it fails, the message names the flag.
#[test]
fn fuzz_one_bad_option_is_named() {
    for (space, base, flags) in spaces() {
        let s = lookup(space).unwrap();
        let flags: Vec<String> = flags
            .into_iter()
            .filter(|f| f.starts_with("--") && f != "--help")
            .collect();
        let base: Vec<String> = base.iter().map(|a| a.to_string()).collect();
        fuzz(
            space_target(space, "one bad option"),
            (select(flags), value(), any::<bool>(), 0u64..300),
            |(flag, value, inline, chunks)| {
                let mut args = base.clone();
                if inline {
                    args.push(format!("{flag}={value}"));
                } else {
                    args.push(flag.clone());
                    args.push(value.clone());
                }
                match s.parse_args(&args) {
                    Ok(job) => check_job(&job, Some(chunks))?,
                    Err(e) => {
                        let msg = clear_error(&e)?;
                        let name = flag.trim_start_matches('-');
                        prop_assert!(
                            names(&msg, name)
                                || related(&msg, name)
                                || hyphen_value(&msg, &value, inline),
                            "{space} {args:?}: the error does not name `{name}`: {msg}"
                        );
                    }
                }
                Ok(())
            },
        );
    }
}

/// clap reads a separate value that starts with `-` (and is not a number) as a flag of its own; its message names
/// that value, which is what the user typed wrong.
fn hyphen_value(msg: &str, value: &str, inline: bool) -> bool {
    !inline && value.starts_with('-') && msg.contains("unexpected argument")
}

/// Does `msg` name the option or field `name` (as `--the-flag`, `the_field` or `the-flag`)?
fn names(msg: &str, name: &str) -> bool {
    let lower = msg.to_lowercase();
    let dashed = name.replace('_', "-");
    let under = name.replace('-', "_");
    lower.contains(&dashed) || lower.contains(&under)
}

fn space_target(space: &str, what: &str) -> &'static str {
    Box::leak(format!("{space} {what}").into_boxed_str())
}

// ---------------------------------------------------------------------------------------------------------------
// Job parameters as JSON (Submit's params_json, stored job records)
// ---------------------------------------------------------------------------------------------------------------

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|v| json!(v)),
        any::<u64>().prop_map(|v| json!(v)),
        any::<f64>().prop_map(|v| json!(v)),
        select(vec![
            0u64,
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            10,
            12,
            13,
            33,
            40,
            41,
            255,
            256,
            65536,
            u32::MAX as u64 + 1
        ])
        .prop_map(|v| json!(v)),
        value().prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(field_name(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Field names of every space's parameters, and some that exist nowhere.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(vec![
            "points", "method", "rows", "ranks", "mode", "depth", "position", "positions", "random", "seed",
            "clues", "side", "name", "puzzle", "puzzle_text", "board", "start", "goal", "chunks", "",
        ])
        .prop_map(str::to_string),
        1 => "[a-z_]{1,12}",
    ]
}

/// Canonical parameters of a default job of each space.
fn base_params() -> Vec<(&'static str, Value)> {
    spaces()
        .into_iter()
        .map(|(space, base, _)| {
            let args: Vec<String> = base.iter().map(|a| a.to_string()).collect();
            (
                space,
                lookup(space)
                    .unwrap()
                    .parse_args(&args)
                    .unwrap()
                    .params()
                    .clone(),
            )
        })
        .collect()
}

#[test]
fn fuzz_params_arbitrary_json() {
    let names: Vec<&str> = spaces().iter().map(|s| s.0).collect();
    fuzz(
        "params: arbitrary JSON",
        (select(names), json_value(), 0u64..1000),
        |(space, params, chunks)| {
            match job_from_params(space, &params) {
                Ok(job) => check_job(&job, Some(chunks))?,
                Err(e) => {
                    clear_error(&e)?;
                }
            }
            Ok(())
        },
    );
}

/// Canonical parameters with one field set to anything (or removed): if the job is refused, the message names the
/// field, so whoever wrote the record or the Submit knows what to fix.
#[test]
fn fuzz_params_one_bad_field_is_named() {
    fuzz(
        "params: one bad field",
        (
            select(base_params()),
            field_name(),
            prop::option::weighted(0.9, json_value()),
            0u64..1000,
        ),
        |((space, base), field, v, chunks)| {
            let mut params = base.clone();
            let obj = params.as_object_mut().expect("params are an object");
            match &v {
                Some(v) => {
                    obj.insert(field.clone(), v.clone());
                }
                None => {
                    obj.remove(&field);
                }
            }
            match job_from_params(space, &params) {
                Ok(job) => check_job(&job, Some(chunks))?,
                Err(e) => {
                    let msg = clear_error(&e)?;
                    prop_assert!(
                        field.is_empty() || names(&msg, &field) || related(&msg, &field),
                        "{space} {params}: the error does not name `{field}`: {msg}"
                    );
                }
            }
            Ok(())
        },
    );
    fuzz(
        "params: not an object",
        (
            select(vec![
                "star",
                "billiard",
                "brainball",
                "buzzled",
                "peg",
                "nope",
                "",
            ]),
            json_leaf(),
        ),
        |(space, params)| {
            match job_from_params(space, &params) {
                Ok(job) => check_job(&job, None)?,
                Err(e) => {
                    clear_error(&e)?;
                }
            }
            Ok(())
        },
    );
}

/// Fields whose errors are reported under the name the user knows: the CLI's `--puzzle FILE` becomes
/// `puzzle_text`, and a position list is checked position by position.
fn related(msg: &str, field: &str) -> bool {
    match field.replace('-', "_").as_str() {
        "puzzle_text" => names(msg, "puzzle"),
        "positions" => names(msg, "position"),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Brainball positions, moves, tables
// ---------------------------------------------------------------------------------------------------------------

/// Position text: a signed permutation of 1..13, possibly broken (tile dropped, repeated, replaced, out of range),
/// with any separators.
fn ring_text() -> impl Strategy<Value = String> {
    (
        Just((1..=13i64).collect::<Vec<_>>()).prop_shuffle(),
        any::<u16>(),
        0usize..6,
        any::<i64>(),
        0usize..13,
        select(vec![" ", ",", ", ", "\t", "  ", "\u{a0}", "\n", ";"]),
    )
        .prop_map(|(mut tiles, signs, how, wild, at, sep)| {
            for (i, t) in tiles.iter_mut().enumerate() {
                if signs >> i & 1 == 1 {
                    *t = -*t;
                }
            }
            let mut words: Vec<String> = tiles.iter().map(|t| t.to_string()).collect();
            match how {
                0 => {}
                1 => {
                    words.remove(at);
                }
                2 => words[at] = words[(at + 1) % 13].clone(),
                3 => words[at] = wild.to_string(),
                4 => words.push(wild.to_string()),
                _ => words[at] = format!("{}x", words[at]),
            }
            words.join(sep)
        })
}

#[test]
fn fuzz_brainball_positions() {
    fuzz(
        "brainball position",
        prop_oneof![3 => ring_text(), 1 => any::<String>(), 1 => value()],
        |text| {
            match Ring::parse(&text) {
                Ok(ring) => {
                    let mut abs: Vec<u8> = ring.0.iter().map(|t| t.unsigned_abs()).collect();
                    abs.sort_unstable();
                    prop_assert_eq!(abs, (1..=13).collect::<Vec<u8>>());
                    prop_assert_eq!(Ring::parse(&ring.to_string()).ok(), Some(ring));
                }
                Err(e) => {
                    let msg = clear_error(&e)?;
                    prop_assert!(msg.contains("position"), "{msg}");
                }
            }
            Ok(())
        },
    );
    fuzz(
        "brainball move",
        prop_oneof![any::<String>(), "[+-]?[0-9]{1,4}/?", value()],
        |text| {
            if let Some(m) = Move::parse(&text) {
                prop_assert_eq!(Move::parse(&m.to_string()), Some(m));
                let _ = m.apply(Ring::parse(SOLVED).unwrap());
            }
            Ok(())
        },
    );
}

/// What `--file F` makes of a file: its lines, trimmed, without blanks and `#` comments, joined into
/// `--positions` (the CLI's expand_file; the file reading itself is fuzzed in the root crate's fuzz_cli).
#[test]
fn fuzz_brainball_position_files() {
    let line = prop_oneof![4 => ring_text(), 1 => any::<String>(), 1 => Just("# comment".to_string()), 1 => Just(String::new())];
    fuzz(
        "brainball position file",
        (
            proptest::collection::vec(line, 0..8),
            0u8..14,
            select(vec!["solve", "table", ""]),
        ),
        |(lines, depth, mode)| {
            let kept: Vec<&str> = lines
                .iter()
                .map(|l| l.trim())
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .collect();
            let mut args = vec![
                "--depth".to_string(),
                depth.to_string(),
                "--positions".into(),
                kept.join("; "),
            ];
            if !mode.is_empty() {
                args.insert(0, mode.into());
            }
            match lookup("brainball").unwrap().parse_args(&args) {
                Ok(job) => check_job(&job, None)?,
                Err(e) => {
                    let msg = clear_error(&e)?;
                    prop_assert!(
                        ["position", "depth", "mode"]
                            .iter()
                            .any(|n| msg.contains(n)),
                        "{msg}"
                    );
                }
            }
            Ok(())
        },
    );
}

/// A real depth-2 table, built once.
fn table2() -> &'static Vec<u8> {
    static T: OnceLock<Vec<u8>> = OnceLock::new();
    T.get_or_init(|| Table::build(2, &Control::new()).unwrap().to_bytes())
}

/// Bytes: random, or a real artifact with bytes flipped, cut off or appended.
fn mutated_bytes(real: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..200),
        3 => (select(real), proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4), any::<usize>(), 0usize..4)
            .prop_map(|(mut b, flips, cut, how)| {
                if !b.is_empty() {
                    for (at, x) in flips {
                        let i = at % b.len();
                        b[i] ^= x;
                    }
                }
                match how {
                    1 => b.truncate(cut % (b.len() + 1)),
                    2 => b.extend_from_slice(&cut.to_le_bytes()),
                    _ => {}
                }
                b
            }),
    ]
}

#[test]
fn fuzz_brainball_tables() {
    let solve = job_from_params(
        "brainball",
        &json!({"mode": "solve", "depth": 2, "positions": SOLVED}),
    )
    .unwrap();
    fuzz(
        "brainball table bytes",
        mutated_bytes(vec![table2().clone()]),
        |bytes| {
            match Table::from_bytes(&bytes) {
                Ok(t) => prop_assert!(t.depth() <= 12),
                Err(e) => {
                    clear_error(&e)?;
                }
            }
            match solve.bind_inputs(&[&bytes]) {
                Ok(bound) => {
                    // A table that loads is one the job may run against: it must not panic on it.
                    let out = bound.run_chunk(ChunkId::new(1, 0), &Control::new());
                    if let Err(e) = out {
                        clear_error(&e)?;
                    }
                }
                Err(e) => {
                    clear_error(&e)?;
                }
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Buzzled clue lists and puzzle files
// ---------------------------------------------------------------------------------------------------------------

fn clue_list() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => (proptest::collection::vec(0u32..8, 0..40), select(vec![",", ", ", " ", "\t", ",,"]))
            .prop_map(|(c, sep)| c.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(sep)),
        1 => "[0-9 ,x\\-]{0,60}",
        1 => any::<String>(),
        1 => Just(P52.to_string()),
    ]
}

fn puzzle_file() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        (0usize..60).prop_map(|s| format!("side: {s}")),
        clue_list().prop_map(|c| format!("clues: {c}")),
        "[a-zA-Z #]{0,20}".prop_map(|n| format!("name = {n}")),
        Just("# a comment".to_string()),
        Just(String::new()),
        Just("side: 4".to_string()),
        Just(format!("clues: {P52}")),
        any::<String>(),
        "[a-z]{0,8}[:=]?[ -~]{0,20}",
    ];
    (
        proptest::collection::vec(line, 0..8),
        select(vec!["\n", "\r\n"]),
    )
        .prop_map(|(l, nl)| l.join(nl))
}

#[test]
fn fuzz_buzzled_clues_and_files() {
    fuzz("buzzled clue list", clue_list(), |text| {
        match parse_clue_list(&text) {
            Ok(clues) => {
                for side in [3usize, 4] {
                    let geo = Geometry::new(side).unwrap();
                    if let Err(e) = check_clues(&geo, &clues) {
                        let msg = clear_error(&e)?;
                        prop_assert!(msg.contains("clues"), "{msg}");
                    }
                }
            }
            Err(msg) => prop_assert!(!msg.is_empty()),
        }
        Ok(())
    });
    fuzz("buzzled puzzle file", puzzle_file(), |text| {
        match parse_puzzle_file(&text) {
            Ok(p) => {
                // A parsed puzzle written back in the file format reads the same.
                // (The format groups clues by family, so only a puzzle with the right number of them.)
                let right_count =
                    Geometry::new(p.side).is_ok_and(|g| check_clues(&g, &p.clues).is_ok());
                if right_count
                    && p.name
                        .as_deref()
                        .is_none_or(|n| n == n.trim() && !n.contains('#'))
                {
                    prop_assert_eq!(parse_puzzle_file(&format_puzzle_file(&p)).ok(), Some(p));
                }
            }
            Err(e) => {
                let msg = clear_error(&e)?;
                prop_assert!(msg.contains("puzzle"), "{msg}");
            }
        }
        let args = vec!["--puzzle-text".to_string(), text];
        match lookup("buzzled").unwrap().parse_args(&args) {
            Ok(job) => check_job(&job, None)?,
            Err(e) => {
                let msg = clear_error(&e)?;
                prop_assert!(
                    ["puzzle", "clues", "side"].iter().any(|n| msg.contains(n))
                        || hyphen_value(&msg, &args[1], false),
                    "{msg}"
                );
            }
        }
        Ok(())
    });
    fuzz(
        "buzzled board string",
        (2usize..=6, "[01 x]{0,130}"),
        |(side, s)| {
            let geo = Geometry::new(side).unwrap();
            if let Ok(board) = geo.decode(&s) {
                prop_assert_eq!(geo.encode(&board), s);
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Peg holes
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn fuzz_peg_holes() {
    let kinds = vec![
        BoardKind::English,
        BoardKind::European,
        BoardKind::Wiegleb,
        BoardKind::Diamond,
        BoardKind::Triangle,
    ];
    fuzz(
        "peg hole",
        (
            select(kinds),
            prop_oneof![3 => (0usize..12, 0usize..12).prop_map(|(r, c)| format!("{r},{c}")), 2 => value()],
        ),
        |(kind, text)| {
            let board = Board::new(kind);
            match board.parse_hole(&text) {
                Ok(bit) => prop_assert_eq!(board.parse_hole(&board.name(bit)), Ok(bit)),
                Err(msg) => prop_assert!(!msg.is_empty()),
            }
            for flag in ["--start", "--goal"] {
                let args = vec![
                    "--board".into(),
                    format!("{kind:?}").to_lowercase(),
                    flag.into(),
                    text.clone(),
                ];
                match lookup("peg").unwrap().parse_args(&args) {
                    Ok(job) => check_job(&job, None)?,
                    Err(e) => {
                        let msg = clear_error(&e)?;
                        prop_assert!(
                            names(&msg, &flag[2..]) || hyphen_value(&msg, &text, false),
                            "{args:?}: {msg}"
                        );
                    }
                }
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------------------------
// What workers report: chunk outputs, artifacts, results
// ---------------------------------------------------------------------------------------------------------------

/// Small real jobs of every space and mode, with their honest outputs for a few chunks.
struct Fixture {
    job: sweep_space::SpaceJob,
    n_chunks: u64,
    honest: Vec<(u64, ChunkOutput)>,
}

fn fixtures() -> &'static Vec<Fixture> {
    static F: OnceLock<Vec<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        let jobs: Vec<(&str, Value, u64)> = vec![
            ("star", json!({"points": 6, "method": "brute"}), 8),
            ("star", json!({"points": 7, "method": "backtrack"}), 4),
            ("billiard", json!({"rows": 4, "method": "strategy"}), 4),
            ("billiard", json!({"rows": 3, "method": "brute"}), 3),
            ("brainball", json!({"mode": "table", "depth": 2}), 13),
            ("brainball", json!({"mode": "solve", "depth": 2, "positions": format!("{SOLVED}; {}", near_solved())}), 2),
            ("buzzled", json!({"side": 4, "clues": P52, "method": "propagate"}), 1),
            ("buzzled", json!({"side": 3, "clues": mini_clues(), "method": "brute"}), 4),
            ("peg", json!({"board": "triangle", "mode": "solve", "seed": 0}), 1),
            ("peg", json!({"board": "triangle", "mode": "count", "seed": 0}), 2),
            ("peg", json!({"board": "triangle", "mode": "positions", "seed": 0}), 3),
        ];
        jobs.into_iter()
            .filter_map(|(space, params, n_chunks)| {
                // A fixture whose parameters another helper's change made invalid is skipped, not a failure here.
                let mut job = match job_from_params(space, &params) {
                    Ok(j) => j,
                    Err(e) => {
                        eprintln!("fixture {space} {params} skipped: {e}");
                        return None;
                    }
                };
                if space == "brainball" && job.inputs().len() == 1 {
                    job = job.bind_inputs(&[table2()]).ok()?;
                } else if !job.inputs().is_empty() {
                    let Some(bound) = bind_in_process(job, &mut HashMap::new()) else {
                        eprintln!("fixture {space} {params} skipped: its inputs did not build");
                        return None;
                    };
                    job = bound;
                }
                let honest = (0..n_chunks)
                    .map(|c| (c, job.run_chunk(ChunkId::new(n_chunks, c), &Control::new()).unwrap()))
                    .collect();
                Some(Fixture { job, n_chunks, honest })
            })
            .collect()
    })
}

/// `job` with its input jobs (a DAG: peg count and positions) built here, each once, and bound in order.
fn bind_in_process(
    job: sweep_space::SpaceJob,
    built: &mut HashMap<String, Vec<u8>>,
) -> Option<sweep_space::SpaceJob> {
    let mut artifacts = Vec::new();
    for inp in job.inputs() {
        let key = format!("{} {}", inp.space, inp.params);
        if !built.contains_key(&key) {
            let input = bind_in_process(job_from_params(&inp.space, &inp.params).ok()?, built)?;
            let n = input.plan(None).ok()?.n_chunks;
            let outs: Vec<ChunkOutput> = (0..n)
                .map(|c| input.run_chunk(ChunkId::new(n, c), &Control::new()))
                .collect::<Result<_, _>>()
                .ok()?;
            let merged = input
                .merge_artifacts(&mut outs.iter().map(|o| o.artifact.as_slice()))
                .ok()?;
            built.insert(key.clone(), merged);
        }
        artifacts.push(built.get(&key)?.clone());
    }
    if artifacts.is_empty() {
        return Some(job);
    }
    let views: Vec<&[u8]> = artifacts.iter().map(Vec::as_slice).collect();
    job.bind_inputs(&views).ok()
}

/// The clues of a side-3 puzzle with one solution.
fn mini_clues() -> String {
    let (p, _) = sweep_buzzled::generate::generate(3, 7).unwrap();
    p.clues
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A position two twists from solved: a depth-2 table solves it outright.
fn near_solved() -> String {
    Ring::parse(SOLVED)
        .unwrap()
        .apply_move(0)
        .apply_move(3)
        .to_string()
}

fn counter_name() -> impl Strategy<Value = String> {
    prop_oneof![
        select(vec![
            "solutions",
            "unique",
            "entries",
            "solved",
            "optimal",
            "count",
            "classes",
            "impossible_class",
            "impossible_search",
            "p00_reachable",
            "p14_on_path",
            "p15_reachable_raw",
            ""
        ])
        .prop_map(str::to_string),
        "[a-z_0-9]{1,16}",
    ]
}

#[derive(Debug, Clone)]
enum Lie {
    Nodes(u64),
    Counter(String, u128),
    DropCounter(usize),
    AddSolution(String),
    DropSolution(usize),
    EditSolution(usize, usize, char),
    DuplicateSolution(usize),
    Artifact(Vec<u8>),
    FlipArtifact(usize, u8),
    CutArtifact(usize),
}

fn lie() -> impl Strategy<Value = Lie> {
    prop_oneof![
        any::<u64>().prop_map(Lie::Nodes),
        (
            counter_name(),
            prop_oneof![0u128..10, any::<u128>(), Just(u128::MAX)]
        )
            .prop_map(|(k, v)| Lie::Counter(k, v)),
        any::<usize>().prop_map(Lie::DropCounter),
        prop_oneof![
            any::<String>(),
            "[01]{0,40}",
            "[0-9]{9}\t\\{.{0,40}\\}",
            "[0-9,> ]{0,40}",
            value()
        ]
        .prop_map(Lie::AddSolution),
        any::<usize>().prop_map(Lie::DropSolution),
        (any::<usize>(), any::<usize>(), any::<char>())
            .prop_map(|(a, b, c)| Lie::EditSolution(a, b, c)),
        any::<usize>().prop_map(Lie::DuplicateSolution),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Lie::Artifact),
        (any::<usize>(), 1u8..=255).prop_map(|(a, x)| Lie::FlipArtifact(a, x)),
        any::<usize>().prop_map(Lie::CutArtifact),
    ]
}

fn tell(out: &mut ChunkOutput, lie: &Lie) {
    match lie {
        Lie::Nodes(n) => out.nodes = *n,
        Lie::Counter(k, v) => {
            out.counters.insert(k.clone(), *v);
        }
        Lie::DropCounter(i) => {
            if let Some(k) = out
                .counters
                .keys()
                .nth(i % out.counters.len().max(1))
                .cloned()
            {
                out.counters.remove(&k);
            }
        }
        Lie::AddSolution(s) => out.solutions.push(s.clone()),
        Lie::DropSolution(i) => {
            if !out.solutions.is_empty() {
                let i = i % out.solutions.len();
                out.solutions.remove(i);
            }
        }
        Lie::EditSolution(i, at, c) => {
            if !out.solutions.is_empty() {
                let n = out.solutions.len();
                let s = &mut out.solutions[i % n];
                let mut chars: Vec<char> = s.chars().collect();
                if chars.is_empty() {
                    chars.push(*c);
                } else {
                    let k = at % chars.len();
                    chars[k] = *c;
                }
                *s = chars.into_iter().collect();
            }
        }
        Lie::DuplicateSolution(i) => {
            if !out.solutions.is_empty() {
                let s = out.solutions[i % out.solutions.len()].clone();
                out.solutions.push(s);
            }
        }
        Lie::Artifact(b) => out.artifact = b.clone(),
        Lie::FlipArtifact(at, x) => {
            if !out.artifact.is_empty() {
                let n = out.artifact.len();
                out.artifact[at % n] ^= x;
            }
        }
        Lie::CutArtifact(at) => {
            let n = out.artifact.len();
            out.artifact.truncate(at % (n + 1));
        }
    }
}

#[derive(Debug, Clone)]
struct Report {
    fixture: usize,
    from_chunk: usize,
    /// The chunk the output is reported for: its own, another, or anything.
    chunk: u64,
    n_chunks: Option<u64>,
    lies: Vec<Lie>,
}

fn report() -> impl Strategy<Value = Report> {
    (
        any::<usize>(),
        any::<usize>(),
        prop_oneof![3 => Just(u64::MAX - 1), 1 => 0u64..16, 1 => any::<u64>()],
        prop_oneof![3 => Just(None), 1 => any::<u64>().prop_map(Some), 1 => (0u64..20).prop_map(Some)],
        proptest::collection::vec(lie(), 0..4),
    )
        .prop_map(|(fixture, from_chunk, chunk, n_chunks, lies)| Report { fixture, from_chunk, chunk, n_chunks, lies })
}

#[test]
fn fuzz_verify_reports() {
    let fx = fixtures();
    assert!(fx.len() >= 8, "most fixtures build: {}", fx.len());
    for f in fx {
        for (c, out) in &f.honest {
            f.job
                .verify(ChunkId::new(f.n_chunks, *c), out)
                .unwrap_or_else(|e| panic!("{:?} chunk {c}: {e}", f.job));
        }
    }
    fuzz("verify chunk outputs", report(), |r| {
        let f = &fx[r.fixture % fx.len()];
        let (own, honest) = &f.honest[r.from_chunk % f.honest.len()];
        // u64::MAX - 1 stands for "the chunk the output came from".
        let chunk = if r.chunk == u64::MAX - 1 {
            *own
        } else {
            r.chunk
        };
        let n_chunks = r.n_chunks.unwrap_or(f.n_chunks);
        let mut out = honest.clone();
        for l in &r.lies {
            tell(&mut out, l);
        }
        // An output that passes is stored and merged: the answer and its rendering must hold up.
        let result = accepted(f, f.job.verify(ChunkId::new(n_chunks, chunk), &out), |()| {
            Answer::from_outputs([&out])
        })?;
        if let Some(result) = result {
            let _ = f.job.pictures(&result);
        }
        Ok(())
    });
}

#[test]
fn fuzz_merge_artifacts() {
    let fx = fixtures();
    let real: Vec<Vec<u8>> = fx
        .iter()
        .flat_map(|f| f.honest.iter().map(|(_, o)| o.artifact.clone()))
        .filter(|a| !a.is_empty())
        .collect();
    fuzz(
        "merge artifacts",
        (
            any::<usize>(),
            proptest::collection::vec(mutated_bytes(real), 0..6),
        ),
        |(i, pieces)| {
            let f = &fx[i % fx.len()];
            let mut it = pieces.iter().map(|p| p.as_slice());
            accepted(f, f.job.merge_artifacts(&mut it), |artifact| Answer {
                artifact,
                ..Default::default()
            })?;
            Ok(())
        },
    );
}

/// `sweep results` renders whatever result JSON the coordinator sends: a wrong or hostile one must not crash it.
#[test]
fn fuzz_render_foreign_results() {
    let fx = fixtures();
    let real: Vec<Value> = fx
        .iter()
        .map(|f| {
            f.job
                .result(&Answer::from_outputs(f.honest.iter().map(|(_, o)| o)))
        })
        .collect();
    let mutated = (
        select(real),
        proptest::collection::vec((field_name_result(), json_value()), 0..4),
    )
        .prop_map(|(mut v, edits)| {
            if let Some(obj) = v.as_object_mut() {
                for (k, x) in edits {
                    obj.insert(k, x);
                }
            }
            v
        });
    fuzz(
        "render foreign results",
        (any::<usize>(), prop_oneof![3 => mutated, 1 => json_value()]),
        |(i, result)| {
            let f = &fx[i % fx.len()];
            let _ = f.job.render_text(&result);
            let _ = f.job.pictures(&result);
            Ok(())
        },
    );
}

fn field_name_result() -> impl Strategy<Value = String> {
    prop_oneof![
        select(vec![
            "solutions",
            "boards",
            "unique",
            "mode",
            "depth",
            "histogram",
            "count",
            "moves",
            "position",
            "twists",
            "optimal",
            "balls",
            "side",
            "clues",
            "error",
            "digest",
            "layers",
            "pegs",
            "impossible",
            "solved",
            "seed",
            "board",
            "holes",
            "start",
            "goal",
            "triangles",
            "stars",
            "points",
            "rows"
        ])
        .prop_map(str::to_string),
        "[a-z_]{1,10}",
    ]
}

// ---------------------------------------------------------------------------------------------------------------
// Regressions for what the fuzzers found
// ---------------------------------------------------------------------------------------------------------------

/// A worker may report a counter above `u64::MAX` (star's `solutions` passes verification at any value above
/// `unique`); `result` built JSON with `json!` on the bare u128, which panics there, so the job's answer could
/// never be read again.
#[test]
fn regression_huge_counters_give_a_result() {
    for (space, params, counter) in [
        (
            "star",
            json!({"points": 7, "method": "backtrack"}),
            "solutions",
        ),
        (
            "billiard",
            json!({"rows": 4, "method": "strategy"}),
            "solutions",
        ),
        (
            "buzzled",
            json!({"side": 4, "clues": P52, "method": "propagate"}),
            "solutions",
        ),
        (
            "peg",
            json!({"board": "triangle", "mode": "positions", "seed": 0}),
            "p14_reachable",
        ),
    ] {
        let job = job_from_params(space, &params).unwrap();
        let mut out = ChunkOutput {
            nodes: u64::MAX,
            ..Default::default()
        };
        out.count(counter, u128::MAX / 2);
        let ans = Answer::from_outputs([&out, &out]);
        let result = job.result(&ans);
        let text = result.to_string();
        assert!(
            text.contains(&(u128::MAX / 2 * 2).to_string()),
            "{space}: {text}"
        );
        let _ = job.render_text(&result);
    }
}

/// A stored job record or a Submit with a field of the wrong type said only `invalid type: string "x", expected
/// u32`, not which field.
#[test]
fn regression_ill_typed_params_name_the_field() {
    for (space, params, field) in [
        ("star", json!({"points": "x", "method": "brute"}), "points"),
        ("billiard", json!({"rows": 5, "method": 3}), "method"),
        (
            "brainball",
            json!({"mode": "solve", "depth": [7], "random": 1}),
            "depth",
        ),
        (
            "buzzled",
            json!({"clues": [], "method": "propagate"}),
            "clues",
        ),
        (
            "peg",
            json!({"board": "english", "mode": "solve", "seed": -1}),
            "seed",
        ),
    ] {
        let err = job_from_params(space, &params).unwrap_err().to_string();
        assert!(err.contains(field), "{space}: {err}");
    }
}

/// `--points -1` was "unexpected argument '-1' found" with a tip to write `-- -1`, which does not work either.
#[test]
fn regression_negative_numbers_are_bad_values() {
    let err = lookup("star")
        .unwrap()
        .parse_args(&["--points".to_string(), "-1".to_string()])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("--points") && err.contains("-1"), "{err}");
}

/// A table job with `random: 0` was refused as "invalid value for `position`", though no position was given.
#[test]
fn regression_random_on_a_table_job_is_named() {
    let err = job_from_params(
        "brainball",
        &json!({"mode": "table", "depth": 7, "random": 0}),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("random"), "{err}");
}
