//! What every command that talks to a standalone coordinator shares: its URL and security flags, and the
//! connection made from them.

use clap::Args;
use sweep_client::{Client, ClientError};

#[derive(Args)]
pub struct Remote {
    /// Coordinator URL; for a replicated coordinator, its members' URLs separated by commas (calls follow
    /// the leader).
    #[arg(
        long,
        env = "SWEEP_COORDINATOR",
        default_value = "http://127.0.0.1:7878"
    )]
    pub coordinator: String,
    #[command(flatten)]
    pub security: crate::security::ClientArgs,
}

/// Connects to the coordinator at `list`: one URL, or its members' URLs separated by commas.
pub async fn connect(list: &str, security: &crate::security::ClientArgs) -> anyhow::Result<Client> {
    Ok(Client::connect(list, &security.security()).await?)
}

/// Streams every solution job `job` stored into the file at `path`, one per line (`--solutions FILE`), and says
/// on stderr how many, so `--json` output stays one object.
pub async fn write_solutions(
    c: &mut Client,
    job: u64,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let file = std::fs::File::create(path)
        .with_context(|| format!("cannot create the --solutions file {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let n = c
        .write_solutions(job, &mut out)
        .await
        .with_context(|| format!("writing the solutions into {}", path.display()))?;
    eprintln!("{n} solutions written to {}", path.display());
    Ok(())
}

/// Sends the files a job ships (`exec --ship`) to the coordinator.
pub async fn ship(
    c: &mut Client,
    sweep_exec::ship::Shipped { digest, packed }: sweep_exec::ship::Shipped,
) -> anyhow::Result<()> {
    match c.ship(&digest, &packed).await {
        Ok(()) => Ok(()),
        // The coordinator's reply names what went wrong itself.
        Err(e @ ClientError::Reply(_)) => Err(e.into()),
        Err(e) => Err(anyhow::Error::new(e).context("cannot ship the files to the coordinator")),
    }
}
