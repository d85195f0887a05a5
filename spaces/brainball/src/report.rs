//! A solution as a chunk reports it (one line of text), read back and replayed by the checks: the solve and
//! census modes both list solutions, so the format and its check are theirs alike.

use serde_json::{json, Value};

use sweep_space::SpaceError;

use crate::ball::{Ball, Ring};
use crate::solve::{self, Move, Solution};

/// A solution as one line: the zero-padded index (so sorted lines are in input order), a tab, and JSON.
pub(crate) fn encode_solution(index: usize, sol: &Solution) -> String {
    let v = json!({
        "position": sol.start.to_string(),
        "moves": sol.moves.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
        "twists": sol.twists,
        "optimal": true,
        "proof": sol.proof.to_string(),
        "balls": sol.balls.iter().map(|b| b.to_string()).collect::<Vec<_>>(),
    });
    format!("{index:09}\t{v}")
}

/// A line of [`encode_solution`] read back: the index and the JSON.
pub(crate) fn decode_solution(line: &str) -> Result<(usize, Value), SpaceError> {
    let bad = |why: String| SpaceError::Verification(format!("solution `{line}`: {why}"));
    let (idx, body) = line
        .split_once('\t')
        .ok_or_else(|| bad("no index".into()))?;
    let idx: usize = idx.parse().map_err(|_| bad(format!("bad index `{idx}`")))?;
    let v: Value = serde_json::from_str(body).map_err(|e| bad(e.to_string()))?;
    Ok((idx, v))
}

/// Replays a reported solution from `start` and checks that it ends solved with the claimed twist count.
pub(crate) fn check_solution(start: Ring, v: &Value) -> Result<(), SpaceError> {
    let bad = |why: String| SpaceError::Verification(format!("solution for `{start}`: {why}"));
    let moves = v["moves"]
        .as_array()
        .ok_or_else(|| bad("no moves".into()))?
        .iter()
        .map(|m| {
            m.as_str()
                .and_then(Move::parse)
                .ok_or_else(|| bad(format!("unreadable move {m}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if v["position"].as_str() != Some(start.to_string().as_str()) {
        return Err(bad(format!("reported for position {}", v["position"])));
    }
    let (end, twists) = solve::replay(start, &moves);
    if end.canonical() != Ball::SOLVED {
        return Err(bad(format!(
            "the moves end at {}, not solved",
            end.canonical()
        )));
    }
    if v["twists"].as_u64() != Some(twists as u64) {
        return Err(bad(format!(
            "claims {} twists, the moves have {twists}",
            v["twists"]
        )));
    }
    Ok(())
}

/// The twists of a result's `"moves"` list (the text answers print and number them).
pub(crate) fn move_names(moves: &serde_json::Value) -> Vec<&str> {
    let names = moves.as_array().map(Vec::as_slice).unwrap_or_default();
    names.iter().filter_map(|m| m.as_str()).collect()
}
