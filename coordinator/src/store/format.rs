//! Which format a store directory holds: the marker `m/format`, read (and written into an empty database) when
//! sled is opened. A leaf, so that the key-value layer can check the marker without importing the upgrades
//! (`upgrade`), which work on the whole store.
//!
//! The marker is what lets a release refuse a store it cannot read instead of misreading it, so it changes
//! whenever a release writes something an older one would miss.

use std::path::Path;

use super::error::StoreError;

/// What this release writes; a store is brought to it when opened.
pub(super) const FORMAT: &[u8] = b"sweep-store/5";
/// Blocks without segment summaries (`d/`), which start-up now reads instead of blocks: summaries are built
/// from the blocks once, on open.
pub(super) const FORMAT_4: &[u8] = b"sweep-store/4";
/// Lists of solutions in one file per chunk, recorded by their hash alone; still read, marked format 4 on
/// open (format 4 appends lists to a segment per job, which format 3 would take for missing files).
pub(super) const FORMAT_3: &[u8] = b"sweep-store/3";
/// One key per chunk record (`c/`) and output (`o/`); read beside the blocks, marked format 3 on open.
pub(super) const FORMAT_2: &[u8] = b"sweep-store/2";
/// Artifacts inside sled, as the first releases wrote them; migrated on open.
pub(super) const FORMAT_1: &[u8] = b"sweep-store/1";

/// The format of the sled database `db` opened at `path` (1 to 5), marking an empty one as the current
/// format; a database with another marker, or none, is refused rather than misread.
pub(super) fn sled_marker(db: &sled::Db, path: &Path) -> Result<u8, StoreError> {
    Ok(match db.get(b"m/format")? {
        Some(v) if v.as_ref() == FORMAT => 5,
        Some(v) if v.as_ref() == FORMAT_4 => 4,
        Some(v) if v.as_ref() == FORMAT_3 => 3,
        Some(v) if v.as_ref() == FORMAT_2 => 2,
        Some(v) if v.as_ref() == FORMAT_1 => 1,
        Some(v) => {
            return Err(StoreError::NotAStore {
                path: path.into(),
                why: format!("unknown format `{}`", String::from_utf8_lossy(&v)),
            })
        }
        None if db.is_empty() => {
            db.insert(b"m/format", FORMAT)?;
            db.flush()?;
            5
        }
        None => {
            return Err(StoreError::NotAStore {
                path: path.into(),
                why: "a sled database without sweep's marker".into(),
            })
        }
    })
}
