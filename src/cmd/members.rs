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

pub fn members(remote: &Remote, json: bool, listed_only: bool) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let security = remote.security.security();
        let listed: Vec<String> = remote
            .coordinator
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect();
        let mut rows = ask_all(listed, &security).await;
        // Members named by an answer but not listed are asked too, in a second round.
        let mut named: Vec<String> = Vec::new();
        for r in &rows {
            for m in r.answer.iter().flat_map(|a| &a.members) {
                let u = m.url.trim_end_matches('/').to_string();
                if !rows.iter().any(|r| r.url == u) && !named.contains(&u) {
                    named.push(u);
                }
            }
        }
        if !listed_only {
            rows.extend(ask_all(named, &security).await);
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
            outln!("{}", serde_json::Value::Array(list));
            return Ok(ExitCode::SUCCESS);
        }
        outln!(
            "{:<6} {:<32} {:<12} {:>6} {:>10} {:>8}",
            "member",
            "url",
            "state",
            "term",
            "applied",
            "lag"
        );
        for r in &rows {
            match &r.answer {
                Ok(a) => outln!(
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
                Err(e) => outln!("{:<6} {:<32} unreachable: {e}", "?", r.url),
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Asks every URL at once (a member cut off costs one connect timeout, not one per member), in their order.
async fn ask_all(urls: Vec<String>, security: &sweep_client::ClientSecurity) -> Vec<Row> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, url) in urls.iter().enumerate() {
        let (url, security) = (url.clone(), security.clone());
        tasks.spawn(async move {
            let answer = match Client::connect(&url, &security).await {
                Ok(mut c) => c.group().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            (i, answer)
        });
    }
    let mut answers: Vec<Option<Result<v1::MembersReply, String>>> = vec![None; urls.len()];
    while let Some(done) = tasks.join_next().await {
        if let Ok((i, answer)) = done {
            answers[i] = Some(answer);
        }
    }
    urls.into_iter()
        .zip(answers)
        .map(|(url, answer)| Row {
            url,
            answer: answer.unwrap_or_else(|| Err("the call crashed".into())),
        })
        .collect()
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

/// `sweep coordinator remove-member ID`: asks the leader to remove member `id`, and prints the members left.
pub fn remove(remote: &Remote, id: u64, json: bool) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = crate::remote::connect(&remote.coordinator, &remote.security).await?;
        let group = c.remove_member(id).await?;
        if json {
            let members: Vec<serde_json::Value> = group
                .members
                .iter()
                .map(|m| serde_json::json!({"id": m.id, "url": m.url}))
                .collect();
            outln!(
                "{}",
                serde_json::json!({"removed": id, "term": group.term, "members": members})
            );
        } else {
            outln!("member {id} removed; the members now:");
            for m in &group.members {
                outln!("  {} {}", m.id, m.url);
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
