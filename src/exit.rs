//! Exit codes, and the error that carries one: what every command returns when it fails on purpose. Which
//! code an error gets is decided in one place, `exit_code` in `lib.rs`; how it prints, in [`one_line`].

pub const FAILURE: u8 = 1;
/// Bad input: an unknown space, a bad option value, a data dir that is not a store.
pub const USAGE: u8 = 2;
/// The coordinator could not be reached.
pub const UNAVAILABLE: u8 = 3;
/// The job finished but some chunks were poisoned: the answer is incomplete.
pub const POISONED: u8 = 4;
/// The coordinator refused the token (missing, unknown, or a worker token on an admin command).
pub const AUTH: u8 = 5;
/// Interrupted by Ctrl-C or SIGTERM; stored progress is kept.
pub const INTERRUPTED: u8 = 130;

/// An error that carries its exit code.
#[derive(Debug)]
pub struct Exit {
    pub code: u8,
    pub message: String,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

pub fn usage(message: impl Into<String>) -> anyhow::Error {
    Exit {
        code: USAGE,
        message: message.into(),
    }
    .into()
}

/// Errors print as one line: context first, then causes; tonic statuses as their message only.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut push = |text: String| {
        let text = text.trim().replace('\n', " ");
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    };
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<sweep_client::ClientError>() {
            // The client's error says what a status means; the transport's causes below it say why.
            push(c.to_string());
            let mut below = c.status().and_then(std::error::Error::source);
            while let Some(s) = below {
                push(s.to_string());
                below = s.source();
            }
            continue;
        }
        let text = match cause.downcast_ref::<tonic::Status>() {
            Some(s)
                if s.code() == tonic::Code::Unavailable && s.message().contains("transport") =>
            {
                "the coordinator is unreachable".to_string()
            }
            Some(s)
                if matches!(
                    s.code(),
                    tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
                ) =>
            {
                format!("refused by the coordinator: {}", s.message())
            }
            Some(s) => s.message().to_string(),
            None => cause.to_string(),
        };
        push(text);
    }
    parts.join(": ")
}

/// Writes one line of a command's output (the `outln!` macro). A reader that went away (`sweep status | head`)
/// ends the command quietly with the shell's code for a broken pipe (141), where `println!` would panic; any
/// other failure to write is said on stderr (exit code 1). SIGPIPE itself stays ignored, as Rust sets it: a
/// client's socket writes (`writev` has no `MSG_NOSIGNAL`) would otherwise kill it when a server hangs up.
pub fn print_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        let _ = writeln!(std::io::stderr(), "cannot write the output: {e}");
        std::process::exit(i32::from(FAILURE));
    }
}
