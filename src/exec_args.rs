//! `exec` arguments rewritten for the person who typed them, before the space parses them: the command runs in
//! the directory they typed it in, and `--ship PATH` names files on their machine that the job carries as a
//! digest. Both are about the command line, not the space, so they live here and call into `sweep_exec` only to
//! pack.

use std::path::PathBuf;

use anyhow::Context;
use sweep_exec::ship::Shipped;
use sweep_exec::Exec;
use sweep_space::SearchSpace;

/// For `sweep run` and `sweep solve`: the command runs where the person typed it (`--workdir` set to the
/// current directory), unless they chose a directory or ship the files. Other spaces' arguments pass through,
/// and so do arguments without a command after `--`: the space refuses those, and its usage line would show
/// the added `--workdir` as if it had to be given.
pub fn in_current_dir(space: &str, mut args: Vec<String>) -> anyhow::Result<Vec<String>> {
    if space != Exec::NAME {
        return Ok(args);
    }
    let Some(dashes) = args.iter().position(|a| a == "--") else {
        return Ok(args);
    };
    if dashes + 1 == args.len() {
        return Ok(args);
    }
    let options = &args[..dashes];
    let chosen = |flag: &str| {
        options
            .iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
    };
    if chosen("--workdir") || chosen("--ship") || chosen("--ship-digest") {
        return Ok(args);
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let at = options.len();
    args.splice(at..at, ["--workdir".to_string(), cwd.display().to_string()]);
    Ok(args)
}

/// The files of `--ship PATH`: where they are on this machine (the program is looked up among them before the
/// job is submitted) and packed, to be sent to the coordinator.
pub struct ShipArg {
    pub path: PathBuf,
    pub files: Shipped,
}

/// Replaces `--ship PATH` in an `exec` job's arguments by the digest of the packed files, and returns the
/// packed files: the job then names only the digest, and the files are sent to the coordinator before the
/// job is submitted. Arguments of other spaces and the command after `--` are left alone.
pub fn take_ship(space: &str, args: Vec<String>) -> anyhow::Result<(Vec<String>, Option<ShipArg>)> {
    if space != Exec::NAME {
        return Ok((args, None));
    }
    let mut out = Vec::with_capacity(args.len());
    let mut path = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        if arg == "--" {
            out.push(arg);
            out.extend(it.by_ref());
            break;
        }
        let given = if arg == "--ship" {
            Some(it.next().context("--ship needs a file or a directory")?)
        } else {
            arg.strip_prefix("--ship=").map(str::to_string)
        };
        match given {
            Some(_) if path.is_some() => {
                anyhow::bail!("give --ship once (ship a directory to send several files)")
            }
            Some(p) => path = Some(PathBuf::from(p)),
            None => out.push(arg),
        }
    }
    let Some(path) = path else {
        return Ok((out, None));
    };
    let files =
        Shipped::pack(&path).with_context(|| format!("cannot pack --ship {}", path.display()))?;
    // Before `--`, so the digest stays an option of the space, not an argument of the command.
    let at = out.iter().position(|a| a == "--").unwrap_or(out.len());
    out.splice(at..at, ["--ship-digest".to_string(), files.digest.clone()]);
    Ok((out, Some(ShipArg { path, files })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_command_runs_where_it_was_typed_unless_a_directory_is_chosen() {
        let cwd = std::env::current_dir().unwrap().display().to_string();
        assert_eq!(
            in_current_dir(
                "exec",
                strings(&["--chunks", "2", "--", "prog", "--workdir", "x"])
            )
            .unwrap(),
            strings(&[
                "--chunks",
                "2",
                "--workdir",
                &cwd,
                "--",
                "prog",
                "--workdir",
                "x"
            ])
        );
        for chosen in [
            strings(&["--workdir", "/tmp", "--", "prog"]),
            strings(&["--workdir=/tmp", "--", "prog"]),
            strings(&["--ship", "prog", "--", "prog"]),
            strings(&["--ship-digest", "d", "--", "prog"]),
        ] {
            assert_eq!(in_current_dir("exec", chosen.clone()).unwrap(), chosen);
        }
        let other = strings(&["--points", "7"]);
        assert_eq!(in_current_dir("star", other.clone()).unwrap(), other);
        for no_command in [
            strings(&["--chunks", "2", "--"]),
            strings(&["--chunks", "2"]),
        ] {
            assert_eq!(
                in_current_dir("exec", no_command.clone()).unwrap(),
                no_command
            );
        }
    }

    #[test]
    fn the_space_takes_the_digests_the_coordinator_stores() {
        let real = sweep_exec::ship::digest(b"archive");
        for d in [
            real.as_str(),
            &real.to_uppercase(),
            &real[1..],
            "",
            "not hex",
        ] {
            assert_eq!(
                sweep_exec::ship::is_digest(d),
                sweep_coordinator::store::is_digest(d),
                "{d}"
            );
        }
    }
}
