//! The security flags of the `sweep` commands: client side (token, TLS trust and client certificate), shared by
//! every command that talks to a coordinator, and the coordinator's own (token files, server certificate).

use std::path::PathBuf;

use clap::Args;
use sweep_client::ClientSecurity;

/// How a client authenticates and what it trusts.
#[derive(Args, Debug, Default, Clone)]
pub struct ClientArgs {
    /// File with this client's token (first line that is not a `#` comment). Default: the SWEEP_TOKEN variable.
    #[arg(long, value_name = "FILE", env = "SWEEP_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// CA certificate (PEM) that signed the coordinator's certificate; needed for an https:// URL.
    #[arg(long, value_name = "FILE", env = "SWEEP_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for a coordinator that requires one (with --tls-key).
    #[arg(long, value_name = "FILE", env = "SWEEP_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// Key (PEM) of the client certificate.
    #[arg(long, value_name = "FILE", env = "SWEEP_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
}

impl ClientArgs {
    /// The settings for `sweep_client`; the token comes from the file, else from SWEEP_TOKEN.
    pub fn security(&self) -> ClientSecurity {
        ClientSecurity {
            token_file: self.token_file.clone(),
            // Read here rather than as a clap `env` flag: clap would show the value in `--help`.
            token: std::env::var("SWEEP_TOKEN")
                .ok()
                .filter(|t| !t.trim().is_empty()),
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
        }
    }
}

/// The coordinator's security flags. With none given it serves plain gRPC to anyone who can reach it.
#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// Tokens (one per line, `#` comments) that may run chunks and read jobs. Re-read when the file changes and
    /// on SIGHUP. Needs --admin-token-file.
    #[arg(long, value_name = "FILE")]
    pub worker_token_file: Option<PathBuf>,
    /// Tokens of people who may also submit jobs (not `exec`, not above --max-user-priority) and cancel, pause
    /// and resume the jobs they submitted. Each token is its own identity for fair share. Needs
    /// --admin-token-file.
    #[arg(long, value_name = "FILE")]
    pub user_token_file: Option<PathBuf>,
    /// Tokens that may also submit any job, cancel, pause and resume anyone's jobs, set shares (and do
    /// everything a worker or user token may).
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Server certificate chain (PEM): serve TLS only (clients use https:// and --tls-ca). A member of a
    /// replicated coordinator also presents it to the other members as its client certificate.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Key (PEM) of the server certificate.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM). For a member of a replicated coordinator, also the
    /// CA of the other members' certificates unless --peer-tls-ca is given.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
}

impl ServeArgs {
    /// The files as the coordinator takes them; it reads and checks them when it starts.
    pub fn files(&self) -> sweep_coordinator::start::Security {
        sweep_coordinator::start::Security {
            worker_token_file: self.worker_token_file.clone(),
            user_token_file: self.user_token_file.clone(),
            admin_token_file: self.admin_token_file.clone(),
            tls: match (&self.tls_cert, &self.tls_key) {
                (Some(cert), Some(key)) => Some(sweep_coordinator::start::TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: self.tls_client_ca.clone(),
                }),
                _ => None,
            },
        }
    }
}

/// Limits on what one client may make the coordinator hold or store (see `sweep_coordinator::limits`).
#[derive(Args, Debug)]
pub struct LimitArgs {
    /// Solutions one chunk report may carry; a report with more is refused and the chunk retried.
    #[arg(long, default_value_t = sweep_coordinator::limits::Limits::default().max_report_solutions)]
    pub max_report_solutions: usize,
    /// Solutions stored for one job over all its chunks.
    #[arg(long, default_value_t = sweep_coordinator::limits::Limits::default().max_job_solutions)]
    pub max_job_solutions: u64,
    /// MiB of solutions and artifacts stored for one job.
    #[arg(long, default_value_t = sweep_coordinator::limits::Limits::default().max_job_output_bytes >> 20)]
    pub max_job_output_mb: u64,
    /// Watch streams open at once (progress bars of `sweep watch`).
    #[arg(long, default_value_t = sweep_coordinator::limits::Limits::default().max_watch_streams)]
    pub max_watch_streams: usize,
    /// Bytes of a job's parameters (JSON) at submit.
    #[arg(long, default_value_t = sweep_coordinator::limits::Limits::default().max_params_bytes)]
    pub max_params_bytes: usize,
}

impl LimitArgs {
    pub fn limits(&self) -> sweep_coordinator::limits::Limits {
        sweep_coordinator::limits::Limits {
            max_report_solutions: self.max_report_solutions,
            max_job_solutions: self.max_job_solutions,
            max_job_output_bytes: self.max_job_output_mb.saturating_mul(1 << 20),
            max_watch_streams: self.max_watch_streams,
            max_params_bytes: self.max_params_bytes,
        }
    }
}
