//! `sweep coordinator members`: every member of a replicated coordinator as it sees itself, and how far each
//! lags behind the leader (from the leader's answer).

use std::collections::BTreeMap;
use std::process::ExitCode;

use sweep_client::Client;
use sweep_proto::v1;

use crate::exit::{self, Exit};
use crate::remote::Remote;
use crate::runtime::runtime;

/// One row: a member's URL and its answer, or why it gave none.
struct Row {
    url: String,
    answer: Result<v1::MembersReply, String>,
}

pub fn members(remote: &Remote, json: bool) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let security = remote.security.security();
        let mut asked: Vec<String> = remote
            .coordinator
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect();
        let mut rows: Vec<Row> = Vec::new();
        let mut i = 0;
        // Members named by an answer but not in the list are asked too (bounded: the group has at most 64).
        while i < asked.len() && i < 64 {
            let url = asked[i].clone();
            i += 1;
            let answer = match Client::connect(&url, &security).await {
                Ok(mut c) => c.group().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Ok(a) = &answer {
                for m in &a.members {
                    let u = m.url.trim_end_matches('/').to_string();
                    if !asked.contains(&u) {
                        asked.push(u);
                    }
                }
            }
            rows.push(Row { url, answer });
        }
        if rows.iter().all(|r| r.answer.is_err()) {
            let why: Vec<String> = rows
                .iter()
                .map(|r| format!("{}: {}", r.url, r.answer.as_ref().err().map_or("", |e| e)))
                .collect();
            return Err(Exit {
                code: exit::UNAVAILABLE,
                message: format!("no member answered ({})", why.join("; ")),
            }
            .into());
        }
        let leader = rows
            .iter()
            .filter_map(|r| r.answer.as_ref().ok())
            .filter(|a| a.id != 0 && a.leader == a.id)
            .max_by_key(|a| a.term);
        // The leader's view of each member's log, by URL.
        let matched: BTreeMap<String, u64> = leader
            .map(|l| {
                l.members
                    .iter()
                    .map(|m| (m.url.trim_end_matches('/').to_string(), m.matched))
                    .collect()
            })
            .unwrap_or_default();
        let lag = |url: &str| -> Option<u64> {
            let l = leader?;
            Some(l.last_index.saturating_sub(*matched.get(url)?))
        };
        if json {
            let list: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| match &r.answer {
                    Ok(a) => serde_json::json!({
                        "url": r.url,
                        "id": a.id,
                        "state": state(a),
                        "term": a.term,
                        "leader": a.leader,
                        "applied": a.applied,
                        "last_index": a.last_index,
                        "lag": lag(&r.url),
                    }),
                    Err(e) => serde_json::json!({"url": r.url, "state": "unreachable", "error": e}),
                })
                .collect();
            println!("{}", serde_json::Value::Array(list));
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "{:<6} {:<32} {:<12} {:>6} {:>10} {:>8}",
            "member", "url", "state", "term", "applied", "lag"
        );
        for r in &rows {
            match &r.answer {
                Ok(a) => println!(
                    "{:<6} {:<32} {:<12} {:>6} {:>10} {:>8}",
                    if a.id == 0 {
                        "-".to_string()
                    } else {
                        a.id.to_string()
                    },
                    r.url,
                    state(a),
                    a.term,
                    a.applied,
                    lag(&r.url).map_or("-".to_string(), |l| l.to_string())
                ),
                Err(e) => println!("{:<6} {:<32} unreachable: {e}", "?", r.url),
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn state(a: &v1::MembersReply) -> &'static str {
    match (a.id, a.leader == a.id, a.serving) {
        (0, _, _) => "single",
        (_, true, true) => "leader",
        (_, true, false) => "elected",
        (_, false, _) if a.leader == 0 => "candidate",
        _ => "follower",
    }
}
