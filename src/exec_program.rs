//! An `exec` job's program, looked up before the job is submitted. A command that cannot start (a typo, a
//! script without its executable bit) would otherwise fail every attempt of every chunk before the job ends:
//! three thousand failed attempts for `--chunks 1000`.
//!
//! The program is looked up as `execvp` will look it up in the chunk's process (`sweep_exec`'s
//! `ExecJob::command` sets its directory and PATH): a name with a `/` from the chunk's working directory, which
//! is `--workdir` or else a private directory holding links to the shipped files; a bare name in the shipped
//! directory first, then on PATH. `run` and `solve` start the program on this machine, so what is found here
//! is what their chunks get, and a program that cannot start is refused. `submit` starts it on workers, whose
//! files and PATH may differ: it refuses only what holds wherever the job runs (a shipped file that cannot run,
//! a relative path with no directory to be relative to) and warns about the rest.

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use sweep_exec::{Exec, ExecParams};
use sweep_space::{SearchSpace, SpaceJob};

use crate::exit::usage;

/// The PATH a chunk's program gets when its worker has none (as `sweep_exec` gives it).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Where the job's program will run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunsOn {
    /// `run` and `solve`: this machine, with this process's PATH.
    ThisMachine,
    /// `submit`: the coordinator's workers, with theirs.
    Workers,
}

/// Whether what a lookup found holds on every machine, or only on this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    /// Decided by the shipped files, which every worker gets, or by a working directory that is empty
    /// everywhere.
    Everywhere,
    /// Decided by this machine's files and PATH.
    ThisMachine,
}

/// Why a program cannot be started.
#[derive(Debug, PartialEq, Eq)]
pub struct Unstartable {
    why: String,
    reach: Reach,
}

impl fmt::Display for Unstartable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

/// What a chunk's process looks its program up with.
pub struct Lookup<'a> {
    pub program: &'a str,
    /// `--workdir`: the chunk's working directory (absolute).
    pub workdir: Option<&'a Path>,
    /// `--ship PATH`, on this machine: a directory whose entries, or a single file, the chunk finds first on
    /// PATH and linked into its private working directory.
    pub shipped: Option<&'a Path>,
    pub path_var: &'a OsStr,
}

/// What one candidate file is to `execvp`.
enum Candidate {
    Runnable,
    /// Nothing there: `execvp` tries the next directory.
    Missing,
    /// Something that cannot be run (a directory, no executable bit): `execvp` tries the next directory too,
    /// and fails with this if no later one has the program.
    Refused(String),
}

fn candidate(path: &Path) -> Candidate {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Candidate::Missing,
        Err(e) => return Candidate::Refused(format!("{}: {e}", path.display())),
    };
    if meta.is_dir() {
        return Candidate::Refused(format!("{} is a directory", path.display()));
    }
    if !meta.is_file() {
        return Candidate::Refused(format!("{} is not a regular file", path.display()));
    }
    // Any executable bit, not access(2) for this user: what the mode says is what travels with a shipped file,
    // and a file executable by someone but not by this user is rare enough to leave to the attempt itself.
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        return Candidate::Refused(format!(
            "{} is not executable (mode {:o}; chmod +x it)",
            path.display(),
            mode & 0o7777
        ));
    }
    Candidate::Runnable
}

/// `rel` among the shipped files at `shipped`: inside it when it is a directory; the file itself when `rel`
/// names it (`prog.sh` or `./prog.sh` for `--ship dir/prog.sh`).
fn in_shipped(shipped: &Path, rel: &Path) -> Option<PathBuf> {
    if shipped.is_dir() {
        return Some(shipped.join(rel));
    }
    let mut parts = rel.components().filter(|c| *c != Component::CurDir);
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(name)), None) if Some(name) == shipped.file_name() => {
            Some(shipped.to_path_buf())
        }
        _ => None,
    }
}

impl Lookup<'_> {
    /// The file `execvp` would run, or why there is none.
    pub fn locate(&self) -> Result<PathBuf, Unstartable> {
        if self.program.contains('/') {
            return self.locate_path();
        }
        let mut tried = Vec::new();
        if let Some(shipped) = self.shipped {
            if let Some(path) = in_shipped(shipped, Path::new(self.program)) {
                tried.push((path, Reach::Everywhere));
            }
        }
        for dir in std::env::split_paths(self.path_var) {
            // An empty PATH entry is the working directory.
            let found = if dir.as_os_str().is_empty() {
                self.in_working_dir(Path::new(self.program))
            } else {
                Some((dir.join(self.program), Reach::ThisMachine))
            };
            tried.extend(found);
        }
        let mut refused = None;
        for (path, reach) in tried {
            match candidate(&path) {
                Candidate::Runnable => return Ok(path),
                Candidate::Missing => {}
                Candidate::Refused(why) => {
                    refused.get_or_insert(Unstartable { why, reach });
                }
            }
        }
        Err(refused.unwrap_or_else(|| {
            let path = self.path_var.to_string_lossy();
            Unstartable {
                why: match self.shipped {
                    Some(s) => format!(
                        "not found among the shipped files ({}) or on PATH ({path})",
                        s.display()
                    ),
                    None => format!("not found on PATH ({path})"),
                },
                reach: Reach::ThisMachine,
            }
        }))
    }

    /// A program named by a path: absolute, or from the chunk's working directory.
    fn locate_path(&self) -> Result<PathBuf, Unstartable> {
        let program = Path::new(self.program);
        let (path, reach) = if program.is_absolute() {
            (program.to_path_buf(), Reach::ThisMachine)
        } else {
            self.in_working_dir(program).ok_or_else(|| Unstartable {
                why: match self.shipped {
                    Some(s) => format!("it is not among the shipped files ({})", s.display()),
                    None => "a relative path starts from the chunk's working directory, which without \
                             --workdir or --ship is a new, empty one: give an absolute path or --workdir"
                        .to_string(),
                },
                reach: Reach::Everywhere,
            })?
        };
        match candidate(&path) {
            Candidate::Runnable => Ok(path),
            Candidate::Missing => Err(Unstartable {
                why: format!("{} does not exist", path.display()),
                reach,
            }),
            Candidate::Refused(why) => Err(Unstartable { why, reach }),
        }
    }

    /// Where `rel` is from the chunk's working directory: `--workdir`, or else the private directory the
    /// shipped files are linked into (nothing else is in it).
    fn in_working_dir(&self, rel: &Path) -> Option<(PathBuf, Reach)> {
        match (self.workdir, self.shipped) {
            (Some(dir), _) => Some((dir.join(rel), Reach::ThisMachine)),
            (None, Some(shipped)) => in_shipped(shipped, rel).map(|p| (p, Reach::Everywhere)),
            (None, None) => None,
        }
    }
}

/// Refuses an `exec` job whose program cannot start where it will run (exit code 2, naming the program and
/// why), before anything is sent or run; for `submit`, only warns (stderr) when just the workers can tell.
/// Jobs of other spaces, and programs whose name depends on the chunk, pass unchecked.
pub fn check(job: &SpaceJob, shipped: Option<&Path>, runs_on: RunsOn) -> anyhow::Result<()> {
    if job.space() != Exec::NAME {
        return Ok(());
    }
    // The space built these parameters itself a moment ago; anything else is not this check's to report.
    let Ok(params) = serde_json::from_value::<ExecParams>(job.params().clone()) else {
        return Ok(());
    };
    let Some(program) = params.command.first() else {
        return Ok(());
    };
    if ["{chunk}", "{chunks}", "{job}"]
        .iter()
        .any(|p| program.contains(p))
    {
        return Ok(());
    }
    let path_var = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    let lookup = Lookup {
        program,
        workdir: params.workdir.as_deref(),
        shipped,
        path_var: &path_var,
    };
    match lookup.locate() {
        Ok(_) => Ok(()),
        Err(e) if runs_on == RunsOn::ThisMachine || e.reach == Reach::Everywhere => {
            Err(usage(format!("cannot start the program `{program}`: {e}")))
        }
        Err(e) => {
            eprintln!(
                "warning: the program `{program}` cannot start on this machine: {e}; submitting anyway, \
                 but its chunks fail unless the workers have it"
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, mode: u32) {
        std::fs::write(path, "#!/bin/sh\necho '{\"nodes\": 1}'\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn locate(
        program: &str,
        workdir: Option<&Path>,
        shipped: Option<&Path>,
        path: &Path,
    ) -> Result<PathBuf, Unstartable> {
        Lookup {
            program,
            workdir,
            shipped,
            path_var: path.as_os_str(),
        }
        .locate()
    }

    #[test]
    fn a_bare_name_is_found_on_path_passing_over_what_cannot_run() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(a.join("prog")).unwrap();
        std::fs::create_dir(&b).unwrap();
        write(&b.join("prog"), 0o755);
        write(&b.join("data"), 0o644);
        let path = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(
            locate("prog", None, None, Path::new(&path)),
            Ok(b.join("prog"))
        );
        let err = locate("data", None, None, Path::new(&path)).unwrap_err();
        assert!(err.why.contains("is not executable (mode 644"), "{err}");
        let err = locate("nope", None, None, Path::new(&path)).unwrap_err();
        assert!(err.why.starts_with("not found on PATH ("), "{err}");
        assert_eq!(err.reach, Reach::ThisMachine);
        // Only a directory of that name: execvp's refusal, named.
        let err = locate("prog", None, None, &a).unwrap_err();
        assert!(err.why.ends_with("prog is a directory"), "{err}");
    }

    #[test]
    fn a_path_is_absolute_or_from_the_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("prog"), 0o700);
        let none = Path::new("");
        assert_eq!(
            locate("./prog", Some(dir.path()), None, none),
            Ok(dir.path().join("./prog"))
        );
        let abs = dir.path().join("prog").display().to_string();
        assert!(locate(&abs, None, None, none).is_ok());
        let err = locate("/no/such/program", None, None, none).unwrap_err();
        assert_eq!(err.why, "/no/such/program does not exist");
        assert_eq!(err.reach, Reach::ThisMachine);
        // Without --workdir or --ship, a chunk's directory is empty on every worker.
        let err = locate("./prog", None, None, none).unwrap_err();
        assert!(err.why.contains("without --workdir or --ship"), "{err}");
        assert_eq!(err.reach, Reach::Everywhere);
    }

    #[test]
    fn shipped_files_are_found_first_and_decide_everywhere() {
        let dir = tempfile::tempdir().unwrap();
        let ship = dir.path().join("bin");
        let other = dir.path().join("other");
        std::fs::create_dir(&ship).unwrap();
        std::fs::create_dir(&other).unwrap();
        write(&ship.join("prog"), 0o755);
        write(&other.join("prog"), 0o755);
        write(&ship.join("notes"), 0o644);
        assert_eq!(
            locate("prog", None, Some(&ship), &other),
            Ok(ship.join("prog"))
        );
        assert_eq!(
            locate("./prog", None, Some(&ship), &other),
            Ok(ship.join("./prog"))
        );
        let err = locate("./notes", None, Some(&ship), &other).unwrap_err();
        assert!(err.why.contains("is not executable"), "{err}");
        assert_eq!(err.reach, Reach::Everywhere);
        let err = locate("./missing", None, Some(&ship), &other).unwrap_err();
        assert_eq!(err.reach, Reach::Everywhere, "{err}");
        // One shipped file is found by its name, and nothing else is shipped.
        let one = ship.join("prog");
        assert_eq!(locate("./prog", None, Some(&one), &other), Ok(one.clone()));
        assert_eq!(locate("prog", None, Some(&one), &other), Ok(one.clone()));
        let err = locate("./other", None, Some(&one), &other).unwrap_err();
        assert!(err.why.contains("not among the shipped files"), "{err}");
        // A shipped file that cannot run is passed over for one on PATH, as execvp does; with none there, the
        // shipped file's refusal is the answer.
        assert_eq!(
            locate("notes", None, Some(&ship), &ship),
            Err(Unstartable {
                why: format!(
                    "{} is not executable (mode 644; chmod +x it)",
                    ship.join("notes").display()
                ),
                reach: Reach::Everywhere
            })
        );
        write(&other.join("notes"), 0o755);
        assert_eq!(
            locate("notes", None, Some(&ship), &other),
            Ok(other.join("notes"))
        );
    }

    fn exec_job(command: &[&str]) -> sweep_space::SpaceJob {
        let params = serde_json::json!({ "command": command });
        crate::builtin().job_from_params("exec", &params).unwrap()
    }

    #[test]
    fn run_refuses_what_cannot_start_and_submit_only_warns_unless_it_is_certain() {
        let missing = exec_job(&["/no/such/program"]);
        let err = check(&missing, None, RunsOn::ThisMachine).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("`/no/such/program`") && text.contains("does not exist"),
            "{text}"
        );
        assert_eq!(
            err.downcast_ref::<crate::Exit>().map(|e| e.code),
            Some(crate::exit::USAGE)
        );
        assert!(check(&missing, None, RunsOn::Workers).is_ok());
        let relative = exec_job(&["./prog"]);
        assert!(check(&relative, None, RunsOn::Workers).is_err());
        // A name made per chunk, and other spaces, are not looked up.
        let per_chunk = exec_job(&["/no/such/prog-{chunk}"]);
        assert!(check(&per_chunk, None, RunsOn::ThisMachine).is_ok());
        let star = crate::builtin()
            .job_from_params("star", &serde_json::json!({"points": 6, "method": "brute"}))
            .unwrap();
        assert!(check(&star, None, RunsOn::ThisMachine).is_ok());
    }
}
