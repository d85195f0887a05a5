//! The web dashboard in a real browser: a real `sweep coordinator --http 127.0.0.1:0` process and a worker run
//! a job that takes minutes, after two small finished ones; headless Chromium loads the page, runs its script
//! against the live coordinator, and the test reads the DOM it rendered: the running job with its progress,
//! the worker, and the finished job's answer with its pictures. It also takes a screenshot; with
//! `SWEEP_DASHBOARD_SCREENSHOT=docs/dashboard.png` set it is kept there (that is how the README's picture is
//! made: `SWEEP_DASHBOARD_SCREENSHOT=docs/dashboard.png cargo test --release --test e2e dashboard`).
//!
//! A replicated coordinator's pages too: three members with `--http`, the leader's page and a follower's, each
//! listing the members with the leader marked; the follower's saying it is not the leader.
//!
//! Needs Chromium (Debian package `chromium`; `scripts/test` installs it). Without it the test fails and says so:
//! a dashboard that was never rendered has not been tested.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::group::Group;
use crate::support::{scratch, stdout_json, sweep, Opts, Proc, SWEEP};
use sweep_testkit::process::{run_ok, stdout_text, worker_command};

/// The Chromium binary on `PATH`, or a failed test naming what to install.
fn chromium() -> PathBuf {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            let out = Command::new("sh")
                .args(["-c", &format!("command -v {name}")])
                .output()
                .ok()?;
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
        })
        .unwrap_or_else(|| {
            panic!(
                "no Chromium on PATH (tried chromium, chromium-browser, google-chrome): \
                 run scripts/test or apt-get install chromium"
            )
        })
}

/// `sweep coordinator --http 127.0.0.1:0`: the process, its gRPC URL and its dashboard URL (printed on the line
/// after the gRPC address).
fn start_coordinator(store: &Path) -> (Proc, String, String) {
    let mut child = Command::new(SWEEP)
        .args([
            "coordinator",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ])
        .args(["--lease-ttl-ms", "2000", "--data"])
        .arg(store)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn coordinator");
    let stdout = child.stdout.take().expect("coordinator stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Read on until the process ends, so it never writes into a closed pipe.
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let proc = Proc {
        child,
        name: "coordinator".into(),
    };
    let next = || {
        rx.recv_timeout(Duration::from_secs(20))
            .expect("a line from the coordinator within 20 s")
    };
    let grpc = next();
    let grpc = grpc
        .strip_prefix("sweep coordinator listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {grpc:?}"))
        .to_string();
    let http = next();
    let http = http
        .strip_prefix("sweep dashboard on ")
        .unwrap_or_else(|| panic!("unexpected second line {http:?}"))
        .to_string();
    (proc, format!("http://{grpc}"), http)
}

fn status(url: &str, job: u64) -> serde_json::Value {
    let out = sweep(
        &["status", &job.to_string(), "--json", "--coordinator", url],
        &[],
        Duration::from_secs(30),
    );
    stdout_json(&out)["jobs"][0].clone()
}

fn wait_for(url: &str, job: u64, what: &str, pred: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = status(url, job);
        if pred(&s) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "job {job}: not {what} within 120 s: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn submit(url: &str, args: &[&str]) -> u64 {
    let mut all = vec!["submit"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", "--coordinator", url]);
    let v = stdout_json(&sweep(&all, &[], Duration::from_secs(30)));
    v["job"]
        .as_u64()
        .unwrap_or_else(|| panic!("no job id in {v}"))
}

/// Runs headless Chromium on `url` with `extra` arguments (bounded): its stdout.
fn browse(chromium: &Path, profile: &Path, url: &str, extra: &[&str]) -> String {
    let mut cmd = Command::new("timeout");
    cmd.arg("120")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null());
    stdout_text(&run_ok(&mut cmd))
}

#[test]
fn dashboard_shows_the_running_job_in_a_real_browser() {
    let chromium = chromium();
    let dir = scratch();
    let (_coordinator, url, http) = start_coordinator(&dir.path().join("store"));
    let _worker = Proc {
        child: worker_command(SWEEP, &url, 1, "node-a")
            .args(["--grace-secs", "1"])
            .spawn()
            .expect("spawn worker"),
        name: "worker".into(),
    };

    // Two small finished jobs (the buzzled one last, so its answer with pictures comes first on the page),
    // then one that runs for minutes on one thread: the page is loaded while it runs.
    let star = submit(&url, &["star", "--points", "7"]);
    wait_for(&url, star, "done", |s| s["state"] == "done");
    let clues = "5,2,2,2,2,3,1,6,4,2,2,2,2,4,3,3,3,3,2,4,3";
    let buzzled = submit(&url, &["buzzled", "--clues", clues]);
    wait_for(&url, buzzled, "done", |s| s["state"] == "done");
    let billiard = submit(&url, &["billiard", "--rows", "10"]);
    wait_for(&url, billiard, "a few chunks in", |s| {
        s["chunks_done"].as_u64().unwrap_or(0) >= 4
    });

    let profile = dir.path().join("chromium-profile");
    let dom = browse(&chromium, &profile, &http, &["--dump-dom"]);
    let now = status(&url, billiard);
    assert_eq!(
        now["state"], "running",
        "the long job is still running: {now}"
    );

    // The script ran and talked to the coordinator.
    assert!(dom.contains(r#"class="conn ok""#), "page not live: {dom}");
    // The running job: its row, state and progress.
    let row_start = dom
        .find(&format!(r#"data-job="{billiard}" data-state="running""#))
        .unwrap_or_else(|| panic!("no running row for job {billiard}: {dom}"));
    let row = &dom[row_start..];
    let row = &row[..row.find("</tr>").expect("row ends")];
    assert!(row.contains("billiard") && row.contains("rows=10"), "{row}");
    // The bar counts the plan's chunks covered (a fraction once a running chunk has split into pieces).
    let progress = row
        .split("bar-text\">")
        .nth(1)
        .and_then(|t| t.split(" / ").next())
        .and_then(|n| n.replace(',', "").parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no progress text in {row}"));
    let plan = now["plan_chunks"].as_u64().expect("plan_chunks");
    assert!(
        progress >= 1.0 && progress <= now["chunks_covered"].as_f64().unwrap_or(0.0) + 1e-9,
        "page shows {progress} chunks done; the coordinator says {now}"
    );
    assert!(row.contains(&format!(" / {plan} chunks")), "{row}");
    assert!(row.contains(r#"role="progressbar""#), "{row}");
    // The finished jobs.
    assert!(dom.contains(&format!(r#"data-job="{star}" data-state="done""#)));
    assert!(dom.contains(&format!(r#"data-job="{buzzled}" data-state="done""#)));
    // The worker row.
    let w = dom
        .find(r#"data-worker="node-a" data-live="true""#)
        .unwrap_or_else(|| panic!("no live worker row: {dom}"));
    assert!(dom[w..].contains("ago"), "no heartbeat age");
    // The buzzled answer, with its pictures served by the coordinator.
    let card = dom
        .find(&format!(r#"data-result="{buzzled}""#))
        .unwrap_or_else(|| panic!("no result card for job {buzzled}: {dom}"));
    assert!(dom[card..].contains("58 solutions"), "answer text missing");
    assert!(
        dom[card..].contains(&format!(r#"src="api/jobs/{buzzled}/pictures/0""#)),
        "pictures missing"
    );
    // The throughput plot was drawn.
    assert!(dom.contains(r#"aria-label="throughput over time""#));
    // A single coordinator has no members: their panel stays hidden.
    assert!(
        dom.contains(r#"id="members-panel" hidden"#),
        "members panel shown on a single coordinator: {dom}"
    );

    // A screenshot: always taken (a blank or broken page would still be a PNG, but a failing render is not),
    // kept where SWEEP_DASHBOARD_SCREENSHOT says.
    let shot = dir.path().join("dashboard.png");
    browse(
        &chromium,
        &profile,
        &http,
        &[
            "--window-size=1280,1300",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
    if let Ok(keep) = std::env::var("SWEEP_DASHBOARD_SCREENSHOT") {
        if let Some(parent) = Path::new(&keep).parent() {
            std::fs::create_dir_all(parent).expect("screenshot directory");
        }
        std::fs::copy(&shot, &keep).expect("keep the screenshot");
        println!("screenshot written to {keep}");
    }
}

/// Waits (at most `within`) until `pred` holds of member `i`'s `/api/members`; its last answer.
fn wait_members(
    g: &Group,
    i: usize,
    within: Duration,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let (code, body) = g.http_get(i, "/api/members");
        let view: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if code == 200 && pred(&view) {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "member {}: /api/members not as wanted within {within:?}: {code} {body}",
            i + 1
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The row of member `id` in a dumped page's members table.
fn member_row(dom: &str, id: usize) -> &str {
    let start = dom
        .find(&format!(r#"data-member="{id}""#))
        .unwrap_or_else(|| panic!("no row for member {id}: {dom}"));
    let row = &dom[start..];
    &row[..row.find("</tr>").expect("row ends")]
}

/// Three members with `--http` on loopback and a pending job. The leader's page: the members table with its
/// three members, the leader marked as such and as the member that served the page (its lag 0), its term, and
/// the job; no not-leader line. A follower's page: the same three members with the leader marked, itself marked,
/// the line saying it is not the leader naming the leader's id and gRPC URL (no dashboard address is known for
/// it), and no job panels.
#[test]
fn a_replicated_coordinators_pages_show_its_members() {
    let chromium = chromium();
    let g = Group::start_with_http(
        3,
        Opts {
            workers: 0,
            ..Opts::default()
        },
    );
    let job = g.submit(&["star", "--points", "7"]);
    let profile = g.dir.path().join("chromium-profile");
    // The leader is asked again if leadership moved while the browser ran (a loaded machine can miss a
    // heartbeat): at most three tries.
    let mut tries = 0;
    let (leader, dom) = loop {
        tries += 1;
        let leader = g.wait_leader(None, Duration::from_secs(30));
        let id = leader + 1;
        wait_members(&g, leader, Duration::from_secs(30), |v| {
            v["serving"] == true
        });
        let http = format!("http://{}/", g.http[leader].as_ref().expect("--http"));
        let dom = browse(&chromium, &profile, &http, &["--dump-dom"]);
        let marked = format!(r#"data-member="{id}" data-role="leader" data-self="true""#);
        if dom.contains(&marked) || tries == 3 {
            break (leader, dom);
        }
        eprintln!("member {id} no longer led when its page was read; asking again");
    };
    let id = leader + 1;
    assert!(dom.contains(r#"class="conn ok""#), "page not live: {dom}");
    assert!(
        dom.contains(r#"id="members-panel">"#),
        "members panel hidden: {dom}"
    );
    let own = member_row(&dom, id);
    assert!(
        own.contains(r#"data-role="leader" data-self="true""#) && own.contains("this member"),
        "the leader's own row: {own}"
    );
    assert!(own.contains(&g.urls[leader]), "{own}");
    assert!(
        own.ends_with(r#"<td class="num">0</td>"#),
        "the leader lags itself by 0 entries: {own}"
    );
    for other in (1..=3).filter(|&m| m != id) {
        let row = member_row(&dom, other);
        assert!(
            row.contains(r#"data-role="follower" data-self="false""#),
            "member {other} on the leader's page: {row}"
        );
        assert!(row.contains(&g.urls[other - 1]), "{row}");
    }
    assert!(
        dom.contains(&format!("this member ({id}): term ")),
        "no term line: {dom}"
    );
    assert!(
        dom.contains(r#"id="not-leader" hidden"#),
        "the leader's page says it is not the leader: {dom}"
    );
    assert!(
        dom.contains(&format!(r#"data-job="{job}""#)),
        "the leader's page lacks job {job}: {dom}"
    );

    // A follower that knows the leader.
    let follower = (leader + 1) % 3;
    wait_members(&g, follower, Duration::from_secs(30), |v| {
        v["leader"] == id as u64
    });
    let http = format!("http://{}/", g.http[follower].as_ref().expect("--http"));
    let dom = browse(&chromium, &profile, &http, &["--dump-dom"]);
    assert!(dom.contains(r#"class="conn ok""#), "page not live: {dom}");
    assert!(
        dom.contains(r#"id="members-panel">"#),
        "members panel hidden: {dom}"
    );
    let line = format!(
        "This member is not the leader: member {id} (gRPC {}) leads.",
        g.urls[leader]
    );
    assert!(
        dom.contains(&line),
        "no {line:?} on the follower's page: {dom}"
    );
    let own = member_row(&dom, follower + 1);
    assert!(
        own.contains(r#"data-role="follower" data-self="true""#) && own.contains("this member"),
        "the follower's own row: {own}"
    );
    let lead = member_row(&dom, id);
    assert!(
        lead.contains(r#"data-role="leader" data-self="false""#),
        "the leader's row on the follower's page: {lead}"
    );
    let third = member_row(&dom, (leader + 2) % 3 + 1);
    assert!(third.contains(r#"data-role="follower""#), "{third}");
    assert!(
        dom.contains(r#"<body class="standby">"#),
        "the follower's page shows the job panels: {dom}"
    );
}
