//! Results falsified on purpose, for tests that prove the coordinator catches workers that lie.

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
