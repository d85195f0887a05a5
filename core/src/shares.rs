//! Who gets how much of the cluster: identities' shares (set by an admin), their decayed use (written to the
//! store every few seconds, so a restart resumes it), and the priority ceiling above which a submit needs an
//! admin token. The decisions themselves are the scheduler's fair-share queue.

use crate::error::CoreError;
use crate::records::{IdentityRecord, Op};
use crate::scheduler::{IdentityUse, Millis};
use crate::state::Core;
use crate::submit::check_share;

/// How often an identity's decayed use is written while the coordinator is busy: a crash loses at most this
/// much of it, which only makes the next few leases a little less fair.
pub const IDENTITY_SAVE_INTERVAL_MS: Millis = 10_000;

/// Whether a submit may ask for `priority`: above `ceiling` (`--max-user-priority`) only with an admin token,
/// so nobody jumps the queue by typing a bigger number.
pub fn check_priority(priority: i32, ceiling: Option<i32>, admin: bool) -> Result<(), CoreError> {
    match ceiling {
        Some(max) if priority > max && !admin => Err(CoreError::NotAllowed(format!(
            "priority {priority} is above this coordinator's --max-user-priority {max}: only an admin token may \
             submit above it"
        ))),
        _ => Ok(()),
    }
}

/// Whether the caller may submit `space` at all: an `exec` job runs a program on every worker that takes it,
/// so only an admin token may submit one.
pub fn check_space_right(space: &str, admin: bool) -> Result<(), CoreError> {
    if space == "exec" && !admin {
        return Err(CoreError::NotAllowed(
            "an exec job runs a program on the workers: only an admin token may submit one".into(),
        ));
    }
    Ok(())
}

impl Core {
    /// An admin sets `identity`'s share: its jobs together get threads in proportion to it from now on.
    pub fn set_identity_share(
        &mut self,
        identity: &str,
        share: f64,
        now: Millis,
    ) -> Result<IdentityUse, CoreError> {
        self.check_writable()?;
        if identity.is_empty()
            || identity.len() > 256
            || !identity.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(CoreError::Invalid(format!(
                "an identity is a token's public name as `sweep status` shows it (printable ASCII, no spaces, \
                 at most 256 bytes), got `{}`",
                identity.chars().take(64).collect::<String>()
            )));
        }
        let share = check_share(share)?;
        self.sched.set_identity_share(identity, share);
        self.stage_identities(now);
        Ok(self
            .sched
            .identity_uses(now)
            .into_iter()
            .find(|u| u.identity == identity)
            .unwrap_or(IdentityUse {
                identity: identity.to_string(),
                share,
                running_threads: 0,
                decayed_thread_secs: 0.0,
            }))
    }

    /// Every identity's share, running threads and decayed use.
    pub fn identity_views(&self, now: Millis) -> Vec<IdentityUse> {
        self.sched.identity_uses(now)
    }

    /// Stages every identity's share and decayed use if the last write is older than
    /// [`IDENTITY_SAVE_INTERVAL_MS`].
    pub(crate) fn maybe_stage_identities(&mut self, now: Millis) {
        if now
            >= self
                .identities_saved_ms
                .saturating_add(IDENTITY_SAVE_INTERVAL_MS)
        {
            self.stage_identities(now);
        }
    }

    fn stage_identities(&mut self, now: Millis) {
        self.identities_saved_ms = now;
        // Jobs' own use, where it moved: what orders one person's jobs after a restart.
        for e in self.jobs.values_mut() {
            if e.record.state.is_finished() {
                continue;
            }
            let Some(used) = self.sched.job_use_per_share(e.record.id) else {
                continue;
            };
            if used != e.record.use_per_share_ms {
                e.record.use_per_share_ms = used;
                self.pending.push(Op::job(e.record.clone()));
            }
        }
        for u in self.sched.identity_uses(now) {
            let share = (self.sched.has_identity_share(&u.identity)).then_some(u.share);
            self.pending.push(Op::Identity(IdentityRecord {
                identity: u.identity,
                share,
                decayed_thread_ms: u.decayed_thread_secs * 1000.0,
                at_ms: now,
            }));
        }
    }
}
