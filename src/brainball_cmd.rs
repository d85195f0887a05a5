//! `--file F` for `brainball`: the CLI reads the file (the puzzles crate never does I/O) and hands its positions on
//! as `--positions`, so they travel in the job's parameters exactly like inline ones and every worker sees them.

use anyhow::Context;

use crate::usage;

/// Replaces each `--file F` (or `--file=F`) among a brainball job's options by the positions in F, one per line
/// (blank lines and lines starting with `#` are skipped). Other spaces' options pass through untouched.
pub fn expand_file(space: &str, args: Vec<String>) -> anyhow::Result<Vec<String>> {
    if space != "brainball" {
        return Ok(args);
    }
    let mut out = Vec::with_capacity(args.len());
    let mut from_files = Vec::new();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let path = if arg == "--file" {
            it.next().ok_or_else(|| usage("--file needs a value"))?
        } else if let Some(p) = arg.strip_prefix("--file=") {
            p.to_string()
        } else {
            out.push(arg);
            continue;
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read --file {path}"))
            .map_err(|e| usage(format!("{e:#}")))?;
        let before = from_files.len();
        from_files.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string),
        );
        if from_files.len() == before {
            return Err(usage(format!("--file {path} holds no positions")));
        }
    }
    if from_files.is_empty() {
        return Ok(out);
    }
    let joined = from_files.join("; ");
    // Inline --positions and files add up to one list.
    match out.iter().position(|a| a == "--positions") {
        Some(i) if i + 1 < out.len() => out[i + 1] = format!("{}; {joined}", out[i + 1]),
        _ => {
            if let Some(a) = out.iter_mut().find(|a| a.starts_with("--positions=")) {
                *a = format!("{a}; {joined}");
            } else {
                out.push("--positions".into());
                out.push(joined);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn file_lines_become_positions() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("balls.txt");
        std::fs::write(
            &f,
            "# two balls\n1 2 3 4 5 6 7 8 9 10 11 12 13\n\n2 3 4 5 6 7 8 9 10 11 12 13 1\n",
        )
        .unwrap();
        let path = f.display().to_string();
        let out = expand_file(
            "brainball",
            strings(&["solve", "--file", &path, "--depth", "3"]),
        )
        .unwrap();
        assert_eq!(
            out,
            strings(&[
                "solve",
                "--depth",
                "3",
                "--positions",
                "1 2 3 4 5 6 7 8 9 10 11 12 13; 2 3 4 5 6 7 8 9 10 11 12 13 1"
            ])
        );
        let out = expand_file(
            "brainball",
            strings(&["--positions", "a", &format!("--file={path}")]),
        )
        .unwrap();
        assert_eq!(
            out[1],
            "a; 1 2 3 4 5 6 7 8 9 10 11 12 13; 2 3 4 5 6 7 8 9 10 11 12 13 1"
        );
        assert_eq!(
            expand_file("star", strings(&["--file", "x"])).unwrap(),
            strings(&["--file", "x"])
        );
        let err = expand_file("brainball", strings(&["--file", "/nonexistent/x"])).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/x"), "{err}");
    }
}
