//! Boxes started on two threads at once, against the same program started plainly:
//! `cargo run --release -p sweep-contain --example spawn_rate -- 2000`, with `LAUNCHER=1` to fork the boxes from
//! a launcher and `SWEEP_CONTAINMENT=namespace|subreaper` to compare the kinds of containment.

use std::io::Read;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

const THREADS: u32 = 2;

fn main() {
    sweep_contain::serve_if_asked();
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    if std::env::var_os("LAUNCHER").is_some() {
        let exe = std::env::current_exe().expect("own path");
        sweep_contain::launcher::start_global(&exe).expect("launcher");
    }
    let program = "/bin/echo";
    let spec = sweep_contain::Spec {
        program: program.into(),
        args: vec![r#"{"nodes": 1}"#.into()],
        env: vec![],
        cwd: "/".into(),
        limits: Default::default(),
        private_dir: None,
        sandbox: None,
    };
    println!("{}", sweep_contain::Facilities::get().summary());
    let boxed = on_threads(n, || {
        let mut b = sweep_contain::spawn(&spec).expect("spawn");
        let mut out = b.take_stdout().expect("stdout");
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        b.wait().expect("wait");
    });
    let plain = on_threads(n, || {
        std::process::Command::new(program)
            .arg(r#"{"nodes": 1}"#)
            .output()
            .expect("run");
    });
    println!(
        "{n} programs on {THREADS} threads: boxed {boxed:.2} s, plain {plain:.2} s, boxed/plain rate {:.2}",
        plain / boxed
    );
}

fn on_threads(n: u32, one: impl Fn() + Sync) -> f64 {
    let next = AtomicU32::new(0);
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    one();
                }
            });
        }
    });
    t.elapsed().as_secs_f64()
}
