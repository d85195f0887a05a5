//! `sweep share set IDENTITY W`: an admin gives an identity (a token, as `sweep status` names it) its share of
//! the cluster among the identities with jobs of the same priority.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::remote::{connect, Remote};
use crate::render::identity_json;
use crate::runtime::runtime;

#[derive(Args)]
pub struct ShareArgs {
    #[command(subcommand)]
    action: ShareAction,
}

#[derive(Subcommand)]
enum ShareAction {
    /// Give IDENTITY the weight W (default of every identity: 1). Needs an admin token.
    Set {
        /// A token's public name as `sweep status` lists it (token-0123456789ab).
        identity: String,
        /// A number above 0, at most 1,000,000: an identity with 2 gets twice the threads of one with 1 while
        /// both have work.
        #[arg(value_parser = crate::args::share)]
        share: f64,
        #[command(flatten)]
        remote: Remote,
        #[arg(long)]
        json: bool,
    },
}

pub fn share(a: ShareArgs) -> anyhow::Result<ExitCode> {
    let ShareAction::Set {
        identity,
        share,
        remote,
        json,
    } = a.action;
    let rt = runtime()?;
    rt.block_on(async move {
        let mut c = connect(&remote.coordinator, &remote.security).await?;
        let u = c.set_share(&identity, share).await?;
        if json {
            println!("{}", identity_json(&u));
        } else {
            println!(
                "{} now has share {} ({} threads running, {:.2} thread-hours of decayed use)",
                u.identity,
                u.share,
                u.running_threads,
                u.decayed_thread_seconds / 3600.0
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}
