//! Boxes started one after another: `cargo run --release -p sweep-contain --example spawn_rate -- 500`, with
//! `SWEEP_CONTAINMENT=namespace|subreaper` to compare the kinds of containment.

use std::io::Read;
use std::time::Instant;

fn main() {
    if std::env::args().nth(1).as_deref() == Some(sweep_contain::launcher::ARG) {
        sweep_contain::launcher::serve();
    }
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500);
    if std::env::var_os("LAUNCHER").is_some() {
        let exe = std::env::current_exe().expect("own path");
        sweep_contain::launcher::start_global(&exe).expect("launcher");
    }
    let spec = sweep_contain::Spec {
        program: "/bin/true".into(),
        args: vec![],
        env: vec![],
        cwd: "/".into(),
        limits: Default::default(),
        private_dir: None,
        sandbox: None,
    };
    println!("{}", sweep_contain::Facilities::get().summary());
    let t = Instant::now();
    for _ in 0..n {
        let mut b = sweep_contain::spawn(&spec).expect("spawn");
        let mut out = b.take_stdout().expect("stdout");
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        b.wait().expect("wait");
    }
    let per = t.elapsed().as_secs_f64() / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        std::process::Command::new("/bin/true")
            .output()
            .expect("true");
    }
    let plain = t.elapsed().as_secs_f64() / n as f64;
    println!(
        "boxed {:.0} us per program; std::process {:.0} us",
        per * 1e6,
        plain * 1e6
    );
}
