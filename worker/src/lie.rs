//! Results falsified on purpose, for tests that prove the coordinator catches workers that lie. Compiled only
//! with the `lie` feature, which only test builds turn on: a release worker has no way to lie.

use std::env::VarError;

/// The environment variable that makes a test worker lie: `drop-solution`, `inflate-count` or `bogus-solution`.
/// Read by [`crate::run`] because the e2e tests start the real `sweep worker` binary, whose command line has no
/// way to ask for a lie.
pub const LIE_ENV: &str = "SWEEP_TEST_LIE";

/// How a test worker falsifies its results (see [`crate::WorkerConfig::lie`]). Each is a lie a real fault could
/// produce: a solution lost, a count off, garbage in a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lie {
    /// Drops the last solution of every chunk that has one (counters left as they were).
    DropSolution,
    /// Adds one to the chunk's node count: a count no verifier can check (each space's counters are tied to its
    /// listed solutions, so inflating those is caught as a failed verification), but a quorum can.
    InflateCount,
    /// Appends a solution that is not one.
    BogusSolution,
}

impl std::str::FromStr for Lie {
    type Err = String;
    fn from_str(s: &str) -> Result<Lie, String> {
        match s {
            "drop-solution" => Ok(Lie::DropSolution),
            "inflate-count" => Ok(Lie::InflateCount),
            "bogus-solution" => Ok(Lie::BogusSolution),
            _ => Err(format!(
                "unknown lie `{s}`: one of drop-solution, inflate-count, bogus-solution"
            )),
        }
    }
}

impl Lie {
    /// The lie [`LIE_ENV`] asks for: none when it is unset or empty, an error naming the variable when it is
    /// not one of the lies, so a misspelt test fails instead of passing honestly.
    pub fn from_env() -> Result<Option<Lie>, String> {
        Lie::from_env_value(std::env::var(LIE_ENV))
    }

    fn from_env_value(value: Result<String, VarError>) -> Result<Option<Lie>, String> {
        match value {
            Err(VarError::NotPresent) => Ok(None),
            Err(VarError::NotUnicode(v)) => Err(format!("{LIE_ENV}={v:?}: not UTF-8")),
            Ok(v) if v.is_empty() => Ok(None),
            Ok(v) => v.parse().map(Some).map_err(|e| format!("{LIE_ENV}: {e}")),
        }
    }

    pub(crate) fn apply(self, out: &mut sweep_space::ChunkOutput) {
        match self {
            Lie::DropSolution => {
                out.solutions.pop();
            }
            Lie::InflateCount => out.nodes += 1,
            Lie::BogusSolution => out.solutions.push("not a solution".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_names_a_lie_or_none_and_anything_else_is_an_error() {
        assert_eq!(Lie::from_env_value(Err(VarError::NotPresent)), Ok(None));
        assert_eq!(Lie::from_env_value(Ok(String::new())), Ok(None));
        assert_eq!(
            Lie::from_env_value(Ok("inflate-count".into())),
            Ok(Some(Lie::InflateCount))
        );
        let e = Lie::from_env_value(Ok("inflate".into())).unwrap_err();
        assert!(
            e.contains(LIE_ENV) && e.contains("unknown lie `inflate`"),
            "{e}"
        );
        assert!(Lie::from_env_value(Err(VarError::NotUnicode("\u{0}".into()))).is_err());
    }

    #[test]
    fn each_lie_changes_the_output_as_documented() {
        let honest = sweep_space::ChunkOutput {
            nodes: 5,
            solutions: vec!["a".into(), "b".into()],
            ..Default::default()
        };
        let told = |lie: Lie| {
            let mut out = honest.clone();
            lie.apply(&mut out);
            out
        };
        assert_eq!(told(Lie::DropSolution).solutions, ["a"]);
        assert_eq!(told(Lie::InflateCount).nodes, 6);
        assert_eq!(told(Lie::InflateCount).solutions, honest.solutions);
        assert_eq!(
            told(Lie::BogusSolution).solutions,
            ["a", "b", "not a solution"]
        );
    }
}
