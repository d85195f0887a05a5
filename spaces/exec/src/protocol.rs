//! The line protocol of a chunk's program: one JSON object per line on its stdout.
//!
//! - `{"progress": NODES}`: nodes so far in this chunk;
//! - `{"checkpoint": "TEXT"}`: where the chunk is, for a later attempt to resume from;
//! - `{"nodes": N, "counters": {...}, "solutions": [...]}`: the chunk's result, exactly once;
//! - `{"split": {"kept": "K", "given": "G"}}` or `{"split": null}`: the answer to a split request (jobs run with
//!   `--splits` only; see [`crate::supervise`] for when one may come).
//!
//! Blank lines are skipped. Parsing lives apart from the process, so that every kind of line, and every way a
//! line can be wrong, is tested on plain text; the errors name what is wrong and quote the line, because they end
//! up in front of the person who wrote the program.

use std::collections::BTreeMap;

use serde::Deserialize;
use sweep_space::ChunkOutput;

/// A line longer than this on stdout is a malformed result: the program is stopped and the attempt fails.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// How much of an offending line an error quotes: enough to recognise it, not a 16 MiB error message.
const QUOTED_BYTES: usize = 200;

/// One line of the program's stdout, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// Nodes so far in this chunk (a running total, not an increment).
    Progress(u64),
    /// Where the chunk is, handed to a later attempt as `SWEEP_RESUME`.
    Checkpoint(String),
    /// The chunk's result.
    Final(ChunkOutput),
    /// The answer to a split request: the two parts, or `None` for "not now".
    Split(Option<SplitAnswer>),
}

/// A split a program made when asked: it goes on with `kept` only, and a new run of the same chunk started with
/// `SWEEP_RESUME` set to `given` does the rest (the rule of [`sweep_space::split`]).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitAnswer {
    pub kept: String,
    pub given: String,
}

/// What is wrong with the program's output. `line` is the offending line, clipped.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("stdout line is not JSON ({error}): {line}")]
    NotJson {
        error: serde_json::Error,
        line: String,
    },
    #[error("stdout line is not a JSON object: {line}")]
    NotObject { line: String },
    #[error("progress must be a node count: {line}")]
    Progress { line: String },
    #[error("checkpoint must be a string: {line}")]
    Checkpoint { line: String },
    #[error("split must be null or {{\"kept\": \"TEXT\", \"given\": \"TEXT\"}} ({error}): {line}")]
    Split {
        error: serde_json::Error,
        line: String,
    },
    #[error("bad final line ({error}): {line}")]
    Final {
        error: serde_json::Error,
        line: String,
    },
    #[error("counter `{name}` must be a non-negative integer or its decimal string, not {value}")]
    Counter {
        name: String,
        value: serde_json::Value,
    },
    #[error("a stdout line is longer than {limit} bytes")]
    TooLong { limit: usize },
    #[error("a stdout line is not UTF-8")]
    NotUtf8,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinalLine {
    nodes: u64,
    #[serde(default)]
    counters: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    solutions: Vec<String>,
}

/// Parses one line (without its newline). A one-key object `progress`, `checkpoint` or `split` is that event;
/// any other object must be a complete final line.
pub fn parse_line(line: &str) -> Result<Line, ProtocolError> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|error| ProtocolError::NotJson {
            error,
            line: clip(line),
        })?;
    let Some(obj) = value.as_object() else {
        return Err(ProtocolError::NotObject { line: clip(line) });
    };
    if obj.len() == 1 {
        if let Some(p) = obj.get("progress") {
            return p
                .as_u64()
                .map(Line::Progress)
                .ok_or_else(|| ProtocolError::Progress { line: clip(line) });
        }
        if let Some(c) = obj.get("checkpoint") {
            return c
                .as_str()
                .map(|t| Line::Checkpoint(t.to_string()))
                .ok_or_else(|| ProtocolError::Checkpoint { line: clip(line) });
        }
        if let Some(answer) = obj.get("split") {
            return serde_json::from_value::<Option<SplitAnswer>>(answer.clone())
                .map(Line::Split)
                .map_err(|error| ProtocolError::Split {
                    error,
                    line: clip(line),
                });
        }
    }
    let fin: FinalLine = serde_json::from_value(value).map_err(|error| ProtocolError::Final {
        error,
        line: clip(line),
    })?;
    let mut out = ChunkOutput {
        nodes: fin.nodes,
        solutions: fin.solutions,
        ..Default::default()
    };
    for (name, value) in fin.counters {
        // Counters go past 2^64 (sums of cubes, say), and JSON numbers that large lose digits in most
        // languages' encoders: a decimal string carries them exactly.
        let n = match &value {
            serde_json::Value::Number(n) => n.as_u64().map(u128::from),
            serde_json::Value::String(s) => s.parse::<u128>().ok(),
            _ => None,
        };
        match n {
            Some(n) => {
                out.counters.insert(name, n);
            }
            None => return Err(ProtocolError::Counter { name, value }),
        }
    }
    Ok(Line::Final(out))
}

fn clip(text: &str) -> String {
    if text.len() <= QUOTED_BYTES {
        return text.to_string();
    }
    let mut cut = QUOTED_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &text[..cut])
}

/// The lines of a program's stdout, parsed. A line that parses badly is an error and the lines after it are still
/// read; a line too long, not UTF-8 or unreadable is an error that ends the stream, since there is no reliable
/// place after it to find the next line at.
/// Lines cut from stdout as it arrives in pieces (a line may span pieces, a piece may hold many lines): blank
/// lines skipped, the last line kept even without its newline. A line that does not parse is an error and the
/// stream goes on; a line over the limit or not UTF-8 ends it (nothing after it can be trusted to be framed).
pub struct Splitter {
    pending: Vec<u8>,
    max_line_bytes: usize,
    failed: bool,
}

impl Default for Splitter {
    fn default() -> Self {
        Splitter {
            pending: Vec::new(),
            max_line_bytes: MAX_LINE_BYTES,
            failed: false,
        }
    }
}

impl Splitter {
    /// Takes the next piece of output; each complete line goes to `out`.
    pub fn push(&mut self, piece: &[u8], mut out: impl FnMut(Result<Line, ProtocolError>)) {
        if self.failed {
            return;
        }
        let mut rest = piece;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            self.pending.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let line = std::mem::take(&mut self.pending);
            if let Some(r) = self.line(&line) {
                self.failed |= matches!(
                    r,
                    Err(ProtocolError::TooLong { .. } | ProtocolError::NotUtf8)
                );
                out(r);
                if self.failed {
                    return;
                }
            }
        }
        self.pending.extend_from_slice(rest);
        if self.pending.len() > self.max_line_bytes {
            self.failed = true;
            out(Err(ProtocolError::TooLong {
                limit: self.max_line_bytes,
            }));
        }
    }

    /// The output has ended: its last line, if it had no newline.
    pub fn finish(&mut self) -> Option<Result<Line, ProtocolError>> {
        if self.failed {
            return None;
        }
        let line = std::mem::take(&mut self.pending);
        self.line(&line)
    }

    fn line(&self, bytes: &[u8]) -> Option<Result<Line, ProtocolError>> {
        if bytes.len() > self.max_line_bytes {
            return Some(Err(ProtocolError::TooLong {
                limit: self.max_line_bytes,
            }));
        }
        match std::str::from_utf8(bytes) {
            Ok(text) if text.trim().is_empty() => None,
            Ok(text) => Some(parse_line(text.trim())),
            Err(_) => Some(Err(ProtocolError::NotUtf8)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(line: &str) -> String {
        match parse_line(line) {
            Err(e) => e.to_string(),
            Ok(parsed) => panic!("{line} accepted as {parsed:?}"),
        }
    }

    #[test]
    fn progress_lines_are_node_counts() {
        assert_eq!(parse_line(r#"{"progress": 5}"#).unwrap(), Line::Progress(5));
        assert_eq!(
            parse_line(r#"{"progress": 18446744073709551615}"#).unwrap(),
            Line::Progress(u64::MAX)
        );
        for line in [
            r#"{"progress": -1}"#,
            r#"{"progress": 1.5}"#,
            r#"{"progress": "5"}"#,
            r#"{"progress": null}"#,
        ] {
            let why = bad(line);
            assert!(why.starts_with("progress must be a node count"), "{why}");
            assert!(why.ends_with(line), "the line is quoted: {why}");
        }
    }

    #[test]
    fn checkpoint_lines_are_text() {
        assert_eq!(
            parse_line(r#"{"checkpoint": "a"}"#).unwrap(),
            Line::Checkpoint("a".into())
        );
        assert_eq!(
            parse_line(r#"{"checkpoint": ""}"#).unwrap(),
            Line::Checkpoint(String::new())
        );
        for line in [r#"{"checkpoint": 3}"#, r#"{"checkpoint": ["a"]}"#] {
            assert!(
                bad(line).starts_with("checkpoint must be a string"),
                "{line}"
            );
        }
    }

    #[test]
    fn split_lines_are_two_states_or_a_decline() {
        assert_eq!(
            parse_line(r#"{"split": {"kept": "0 5", "given": "5 9"}}"#).unwrap(),
            Line::Split(Some(SplitAnswer {
                kept: "0 5".into(),
                given: "5 9".into()
            }))
        );
        assert_eq!(parse_line(r#"{"split": null}"#).unwrap(), Line::Split(None));
        for line in [
            r#"{"split": {"kept": "a"}}"#,
            r#"{"split": {"kept": "a", "given": 3}}"#,
            r#"{"split": {"kept": "a", "given": "b", "more": "c"}}"#,
            r#"{"split": "a b"}"#,
            r#"{"split": false}"#,
            r#"{"split": []}"#,
        ] {
            let why = bad(line);
            assert!(why.starts_with("split must be null or"), "{why}");
            assert!(why.ends_with(line), "the line is quoted: {why}");
        }
        // With another key it is not an answer but a final line, and not a valid one.
        assert!(bad(r#"{"split": null, "nodes": 1}"#).starts_with("bad final line"));
    }

    #[test]
    fn final_lines_carry_nodes_counters_past_64_bits_and_solutions() {
        let Line::Final(out) = parse_line(
            r#"{"nodes": 3, "counters": {"a": 1, "b": "340282366920938463463374607431768211455"}, "solutions": ["x"]}"#,
        )
        .unwrap() else {
            panic!("not a final line");
        };
        assert_eq!(out.nodes, 3);
        assert_eq!(out.counters["a"], 1);
        assert_eq!(out.counters["b"], u128::MAX);
        assert_eq!(out.solutions, ["x"]);
        assert!(out.artifact.is_empty());
        // Counters and solutions may be left out; nodes alone is a final line.
        assert_eq!(
            parse_line(r#"{"nodes": 0}"#).unwrap(),
            Line::Final(ChunkOutput::default())
        );
    }

    #[test]
    fn a_final_line_with_progress_in_it_is_a_final_line_not_progress() {
        // Only a one-key object is an event: with more keys it must be a valid final line.
        let why = bad(r#"{"progress": 1, "nodes": 2}"#);
        assert!(why.starts_with("bad final line"), "{why}");
    }

    #[test]
    fn malformed_final_lines_say_what_is_wrong() {
        for (line, why) in [
            (r#"{"nodes": 1, "extra": 2}"#, "unknown field `extra`"),
            (r#"{"counters": {}}"#, "missing field `nodes`"),
            (r#"{"nodes": -1}"#, "bad final line"),
            (r#"{"nodes": 1, "solutions": [1]}"#, "bad final line"),
            (r#"{}"#, "missing field `nodes`"),
        ] {
            let got = bad(line);
            assert!(got.starts_with("bad final line"), "{line}: {got}");
            assert!(got.contains(why), "{line}: {got}");
        }
        for (line, name) in [
            (r#"{"nodes": 1, "counters": {"a": -2}}"#, "a"),
            (r#"{"nodes": 1, "counters": {"b": 1.5}}"#, "b"),
            (r#"{"nodes": 1, "counters": {"c": "12x"}}"#, "c"),
            (
                r#"{"nodes": 1, "counters": {"d": "340282366920938463463374607431768211456"}}"#,
                "d",
            ),
            (r#"{"nodes": 1, "counters": {"e": null}}"#, "e"),
        ] {
            let got = bad(line);
            assert!(
                got.starts_with(&format!("counter `{name}` must be a non-negative integer")),
                "{line}: {got}"
            );
        }
    }

    #[test]
    fn lines_that_are_not_json_objects_are_named_and_clipped() {
        assert!(bad("nope").starts_with("stdout line is not JSON"));
        assert!(bad(r#"{"nodes": 1"#).starts_with("stdout line is not JSON"));
        for line in ["[1]", "3", r#""text""#, "null"] {
            assert_eq!(
                bad(line),
                format!("stdout line is not a JSON object: {line}")
            );
        }
        let long = format!("x{}", "é".repeat(300));
        let why = bad(&long);
        assert!(why.ends_with("..."), "{why}");
        assert!(
            why.len() < 300,
            "a long line is clipped: {} bytes",
            why.len()
        );
    }

    /// The lines of `stdout` given in pieces of `piece` bytes.
    fn lines_in_pieces(
        stdout: &[u8],
        max_line_bytes: usize,
        piece: usize,
    ) -> Vec<Result<Line, String>> {
        let mut splitter = Splitter {
            max_line_bytes,
            ..Splitter::default()
        };
        let mut got = Vec::new();
        for part in stdout.chunks(piece.max(1)) {
            splitter.push(part, |l| got.push(l.map_err(|e| e.to_string())));
        }
        got.extend(splitter.finish().map(|l| l.map_err(|e| e.to_string())));
        got
    }

    fn lines(stdout: &[u8], max_line_bytes: usize) -> Vec<Result<Line, String>> {
        lines_in_pieces(stdout, max_line_bytes, stdout.len())
    }

    #[test]
    fn output_cut_anywhere_gives_the_same_lines() {
        let out = b"{\"progress\": 1}\n\n{\"checkpoint\": \"c\"}\r\nnope\n{\"nodes\": 2}";
        let whole = lines(out, MAX_LINE_BYTES);
        assert_eq!(whole.len(), 4, "{whole:?}");
        for piece in 1..out.len() {
            assert_eq!(
                lines_in_pieces(out, MAX_LINE_BYTES, piece),
                whole,
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn a_stream_skips_blank_lines_and_goes_on_after_a_bad_line() {
        let got = lines(
            b"\n  {\"progress\": 1}  \r\n\nnope\n{\"checkpoint\": \"c\"}\n{\"nodes\": 2}",
            MAX_LINE_BYTES,
        );
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0], Ok(Line::Progress(1)));
        assert!(matches!(&got[1], Err(e) if e.starts_with("stdout line is not JSON")));
        assert_eq!(got[2], Ok(Line::Checkpoint("c".into())));
        assert!(matches!(&got[3], Ok(Line::Final(out)) if out.nodes == 2));
        assert!(lines(b"", MAX_LINE_BYTES).is_empty());
    }

    #[test]
    fn a_line_too_long_or_not_utf8_ends_the_stream() {
        // The first line is 16 bytes with its newline.
        let got = lines(b"{\"progress\": 1}\n{\"nodes\": 1}\n", 10);
        assert_eq!(
            got,
            [Err("a stdout line is longer than 10 bytes".to_string())]
        );
        // A line within the limit is read whole; the one after it is over: the stream ends there, and the
        // final line after it is never taken for the chunk's result.
        let got = lines(
            b"{\"progress\": 1}\n0123456789abcdefgh\n{\"nodes\": 1}\n",
            16,
        );
        assert_eq!(
            got,
            [
                Ok(Line::Progress(1)),
                Err("a stdout line is longer than 16 bytes".to_string())
            ]
        );
        let got = lines(
            b"{\"progress\": 1}\n\xff\xfe\n{\"nodes\": 1}\n",
            MAX_LINE_BYTES,
        );
        assert_eq!(
            got,
            [
                Ok(Line::Progress(1)),
                Err("a stdout line is not UTF-8".to_string())
            ]
        );
    }
}
