//! How keys are spelled: a one-byte tag, `/`, then big-endian ids, so that a prefix scan returns a job's
//! records in order; and how a key is named in an error, so that a damage report points at the record
//! (`sweep store check` and fsck quote these names).

use super::error::StoreError;
use crate::scheduler::JobId;

pub(crate) fn job_key(tag: u8, job: JobId) -> Vec<u8> {
    let mut k = vec![tag, b'/'];
    k.extend_from_slice(&job.to_be_bytes());
    k
}

pub(crate) fn chunk_key(tag: u8, job: JobId, chunk: u64) -> Vec<u8> {
    let mut k = job_key(tag, job);
    k.extend_from_slice(&chunk.to_be_bytes());
    k
}

/// An identity's share and use (`i/` then the identity's name, which is printable ASCII).
pub(crate) fn identity_key(identity: &str) -> Vec<u8> {
    let mut k = b"i/".to_vec();
    k.extend_from_slice(identity.as_bytes());
    k
}

pub(crate) fn key_text(key: &[u8]) -> String {
    String::from_utf8_lossy(key)
        .chars()
        .map(|c| if c.is_control() { '.' } else { c })
        .collect()
}

pub(crate) fn be_u64(key: &[u8], bytes: &[u8]) -> Result<u64, StoreError> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| StoreError::Damaged {
        key: key_text(key),
        why: format!("{} bytes, expected 8", bytes.len()),
    })?;
    Ok(u64::from_be_bytes(arr))
}
