//! Fuzzing the parsers that live only in the `sweep` binary: the split of engine flags from a space's options
//! (`src/args.rs`), `--file F` for brainball (`src/brainball_cmd.rs`) and `--puzzle FILE` for buzzled
//! (`src/buzzled_cmd.rs`), with files of fuzzed content, missing files and directories.
//!
//! Each case runs `sweep submit SPACE ... --coordinator http://127.0.0.1:1`: everything is parsed and planned, and
//! a command line that parses then fails to connect (exit 3), so no job runs. A process per case is slow, so the
//! default is [`DEFAULT_CASES`]; the full run is `SWEEP_FUZZ_CASES=2000 cargo test --release --test e2e fuzz_cli`
//! (the pure parsers behind these are fuzzed 10^5 times in `tests/fuzz_spaces.rs`).
//!
//! Asserted: no panic (exit 101), no hang (each run is killed after [`RUN_LIMIT`]), exit 0 (help), 2 (bad input,
//! with one clear `sweep: ...` line naming the bad flag or file) or 3 (parsed, coordinator unreachable).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;

const DEFAULT_CASES: u32 = 60;
const RUN_LIMIT: Duration = Duration::from_secs(30);

fn cases() -> u32 {
    // A process per case: the parser targets' counts would take hours here.
    sweep_testkit::fuzz::cases(DEFAULT_CASES).min(2000)
}

/// What a case puts in the file it names.
#[derive(Debug, Clone)]
enum File {
    Text(String),
    Missing,
    Directory,
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(vec![
            "", "0", "1", "4", "6", "7", "-1", "99999999999999999999", "brute", "backtrack", "strategy", "propagate",
            "table", "solve", "count", "positions", "english", "triangle", "centre", "any", "1,1", "0..10",
            "1 2 3 4 5 6 7 8 9 10 11 12 13", "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3", "--", "=", "--json",
        ])
        .prop_map(str::to_string),
        1 => any::<String>().prop_map(|s| s.replace('\0', "")),
    ]
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(vec![
            "--points", "--method", "--rows", "--ranks", "--depth", "--position", "--positions", "--random",
            "--seed", "--clues", "--side", "--name", "--puzzle-text", "--board", "--start", "--goal", "--mode",
            "--threads", "--chunks", "--priority", "--json", "--no-progress", "--help", "-h", "table", "solve",
        ])
        .prop_map(str::to_string),
        3 => value(),
    ]
}

fn file_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        Just("1 2 3 4 5 6 7 8 9 10 11 12 13".to_string()),
        Just("# comment".to_string()),
        Just(String::new()),
        Just("side: 4".to_string()),
        Just("clues: 5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3".to_string()),
        "[0-9 ,;:a-z\\-#]{0,40}",
        any::<String>().prop_map(|s| s.replace('\0', "")),
    ];
    proptest::collection::vec(line, 0..6).prop_map(|l| l.join("\n"))
}

fn file() -> impl Strategy<Value = File> {
    prop_oneof![
        6 => file_text().prop_map(File::Text),
        1 => Just(File::Missing),
        1 => Just(File::Directory),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    space: String,
    args: Vec<String>,
    /// Where among the args the file flag goes, and how it is written.
    file: Option<(usize, bool, File)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            6 => select(vec!["star", "billiard", "brainball", "buzzled", "peg"]).prop_map(str::to_string),
            1 => value()
        ],
        proptest::collection::vec(token(), 0..6),
        proptest::option::weighted(0.7, (any::<usize>(), any::<bool>(), file())),
    )
        .prop_map(|(space, args, file)| Case { space, args, file })
}

fn run(case: &Case, dir: &std::path::Path) -> Result<(), TestCaseError> {
    let mut args = case.args.clone();
    let mut path_text = None;
    if let Some((at, inline, f)) = &case.file {
        let path = dir.join("input.txt");
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir(&path);
        match f {
            File::Text(t) => std::fs::write(&path, t).unwrap(),
            File::Missing => {}
            File::Directory => std::fs::create_dir(&path).unwrap(),
        }
        let flag = if case.space == "buzzled" {
            "--puzzle"
        } else {
            "--file"
        };
        let p = path.display().to_string();
        let at = at % (args.len() + 1);
        if *inline {
            args.insert(at, format!("{flag}={p}"));
        } else {
            args.insert(at, p.clone());
            args.insert(at, flag.to_string());
        }
        path_text = Some((flag, p));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_sweep"))
        .arg("submit")
        .arg(&case.space)
        .arg("--coordinator")
        .arg("http://127.0.0.1:1")
        .args(&args)
        .env_remove("SWEEP_COORDINATOR")
        .env_remove("SWEEP_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(TestCaseError::fail(format!("sweep hangs on {args:?}")));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let code = status.code().unwrap_or(-1);
    prop_assert!(
        [0, 2, 3].contains(&code),
        "exit {code} for {} {args:?}: {stderr}",
        case.space
    );
    if code != 0 {
        let line = stderr.trim_end();
        prop_assert!(
            line.starts_with("sweep: ") && line.len() > "sweep: ".len(),
            "unclear error for {args:?}: {stderr}"
        );
        prop_assert!(
            !line.contains('\n'),
            "more than one line for {args:?}: {stderr}"
        );
    }
    // A file the binary cannot use is named in the error, with the flag that named it.
    if let (Some((flag, p)), Some((_, _, File::Missing | File::Directory))) =
        (&path_text, &case.file)
    {
        let applies = case.space == "brainball" || case.space == "buzzled";
        if applies && code == 2 && stderr.contains("cannot read") {
            prop_assert!(
                stderr.contains(flag) && stderr.contains(p.as_str()),
                "{stderr}"
            );
        }
    }
    Ok(())
}

#[test]
fn fuzz_cli_job_arguments_and_files() {
    let dir = tempfile::tempdir().unwrap();
    sweep_testkit::fuzz::fuzz("sweep CLI", cases(), 200, case(), |c| run(&c, dir.path()));
}
