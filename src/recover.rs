//! A coordinator whose disk filled up restarts itself from its store once space returns.
//!
//! Why a restart, and why `exec`: after a failed write the coordinator's memory may be ahead of its store, so
//! the only consistent state to resume from is the store's. sled keeps the I/O error once it has hit one, its
//! flusher thread may hang on the full device, and its file lock lives as long as that thread: the store cannot
//! be reopened inside the same process. Replacing the process image (same pid, same arguments) drops all of that
//! at once, and the new image loads the store exactly as a restart by an operator would. It listens on the
//! address the old one had bound (a `--listen` with port 0 would move it), so workers and clients, which retry,
//! reconnect by themselves.
//!
//! Only a full disk is recovered this way: any other store failure keeps refusing changes until an operator
//! looks, since restarting on a failing device could loop.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sweep_coordinator::Coordinator;

/// How often a failed coordinator checks for space.
const POLL: Duration = Duration::from_secs(1);
/// Bytes the probe writes and syncs: free space for this much makes the restart and its first commits safe.
const PROBE_BYTES: usize = 8 << 20;

/// Whether a store failure is a full disk (`ENOSPC`), as sled reports it.
pub fn is_disk_full(why: &str) -> bool {
    why.contains("os error 28") || why.to_ascii_lowercase().contains("no space left")
}

/// The arguments of this process with `--listen` and `--http` pinned to the addresses bound now.
pub fn restart_args(
    args: impl IntoIterator<Item = OsString>,
    listen: SocketAddr,
    http: Option<SocketAddr>,
) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for arg in args {
        if skip_value {
            skip_value = false;
            continue;
        }
        let text = arg.to_string_lossy();
        if text == "--listen" || text == "--http" {
            skip_value = true;
            continue;
        }
        if text.starts_with("--listen=") || text.starts_with("--http=") {
            continue;
        }
        out.push(arg);
    }
    out.push("--listen".into());
    out.push(listen.to_string().into());
    if let Some(h) = http {
        out.push("--http".into());
        out.push(h.to_string().into());
    }
    out
}

/// Writes and syncs a probe file beside the store, then removes it: whether a commit could succeed now.
fn space_returned(dir: &Path) -> bool {
    use std::io::Write;
    let path = dir.join(".sweep-space-probe");
    let ok = std::fs::File::create(&path)
        .and_then(|mut f| {
            f.write_all(&vec![0u8; PROBE_BYTES])?;
            f.sync_all()
        })
        .is_ok();
    let _ = std::fs::remove_file(&path);
    ok
}

/// Watches `coord`; after a disk-full failure, waits for space and replaces this process with a fresh start on
/// the same store and addresses. Returns only if the restart itself could not happen (the error says why).
pub async fn restart_when_space_returns(
    coord: Arc<Coordinator>,
    data: PathBuf,
    listen: SocketAddr,
    http: Option<SocketAddr>,
) -> std::io::Error {
    let mut warned = false;
    loop {
        tokio::time::sleep(POLL).await;
        let Some(why) = coord.store_failure() else {
            continue;
        };
        if !is_disk_full(&why) {
            continue;
        }
        if !warned {
            tracing::warn!(store = %data.display(), "the store's disk is full; will restart from the store once space returns");
            warned = true;
        }
        let dir = data.clone();
        if !tokio::task::spawn_blocking(move || space_returned(&dir))
            .await
            .unwrap_or(false)
        {
            continue;
        }
        tracing::warn!(%listen, "space returned: restarting from the store");
        return exec_self(listen, http);
    }
}

#[cfg(unix)]
fn exec_self(listen: SocketAddr, http: Option<SocketAddr>) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return e,
    };
    let args = restart_args(std::env::args_os().skip(1), listen, http);
    std::process::Command::new(exe).args(args).exec()
}

#[cfg(not(unix))]
fn exec_self(_listen: SocketAddr, _http: Option<SocketAddr>) -> std::io::Error {
    std::io::Error::other("restarting in place needs exec, which this platform lacks")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: Vec<OsString>) -> Vec<String> {
        v.into_iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn restart_pins_the_bound_addresses_and_keeps_everything_else() {
        let args = [
            "coordinator",
            "--data",
            "d",
            "--listen",
            "127.0.0.1:0",
            "--http=127.0.0.1:0",
            "--worker-token-file",
            "t",
        ]
        .map(OsString::from);
        let listen: SocketAddr = "127.0.0.1:4242".parse().expect("addr");
        let http: SocketAddr = "127.0.0.1:4343".parse().expect("addr");
        // The flags not about addresses stay as given; the pinned addresses follow them.
        let kept = ["coordinator", "--data", "d", "--worker-token-file", "t"];
        let pinned = ["--listen", "127.0.0.1:4242"];
        assert_eq!(
            strings(restart_args(args.clone(), listen, Some(http))),
            [&kept[..], &pinned, &["--http", "127.0.0.1:4343"]].concat()
        );
        assert_eq!(
            strings(restart_args(args, listen, None)),
            [&kept[..], &pinned].concat()
        );
    }

    #[test]
    fn only_a_full_disk_is_recovered_by_restarting() {
        assert!(is_disk_full(
            "store I/O failed: No space left on device (os error 28)"
        ));
        assert!(!is_disk_full(
            "store I/O failed: Input/output error (os error 5)"
        ));
        assert!(!is_disk_full(
            "damaged record `c/1/2`: bad chunk key length"
        ));
    }
}
