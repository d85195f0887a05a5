//! How the core's records ([`JobRecord`](crate::core::JobRecord), tallies, chunk records, votes, usage) are kept:
//! as JSON, read back with a damaged one named by its key.
//!
//! JSON because records outlive the release that wrote them (the field defaults and aliases are on the types,
//! in `core::records`), and because fsck can show a damaged record as text.

use serde::Serialize;

use super::error::StoreError;
use super::keys::key_text;

pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    key: &[u8],
    value: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Damaged {
        key: key_text(key),
        why: e.to_string(),
    })
}

pub(super) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing plain data structs with string keys cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use crate::core::Op;
    use crate::store::keys::job_key;
    use crate::store::test_support::record;
    use crate::store::{MemKv, Store};

    #[test]
    fn damaged_records_are_named() {
        let store = Store::new(Box::new(MemKv::default()));
        store
            .kv
            .apply(vec![(job_key(b'j', 5), Some(b"{not json".to_vec()))])
            .unwrap();
        let err = store.load().unwrap_err();
        assert!(err.to_string().contains("damaged record"), "{err}");
    }

    /// A record as releases before multi-input jobs wrote it (one `input_job` number) loads as a one-element
    /// input list and is written back in the new form; a list of several inputs survives a round trip.
    #[test]
    fn single_input_records_migrate_to_an_input_list() {
        let store = Store::new(Box::new(MemKv::default()));
        let old = br#"{"id":2,"space":"brainball","params":{"depth":7},"n_chunks":3,"priority":0,"state":"running","created_ms":1,"input_job":1,"replicate":1}"#;
        let null = br#"{"id":3,"space":"star","params":{"points":6},"n_chunks":3,"priority":0,"state":"done","created_ms":1,"input_job":null}"#;
        let mut many = record(4);
        many.input_jobs = vec![1, 3, 2];
        many.max_attempts = Some(1);
        many.chunk_memory = Some(8 << 30);
        store
            .kv
            .apply(vec![
                (job_key(b'j', 2), Some(old.to_vec())),
                (job_key(b'j', 3), Some(null.to_vec())),
            ])
            .unwrap();
        store.write(vec![Op::job(many.clone())]).unwrap();
        let jobs = store.load().unwrap().jobs;
        assert_eq!(jobs[0].input_jobs, vec![1]);
        // Fields added since read as absent: the coordinator's limits apply.
        assert_eq!((jobs[0].max_attempts, jobs[0].chunk_memory), (None, None));
        assert!(jobs[1].input_jobs.is_empty());
        assert_eq!(jobs[2], many);
        store.write(vec![Op::job(jobs[0].clone())]).unwrap();
        let text = store.kv.get(&job_key(b'j', 2)).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(v["input_jobs"], serde_json::json!([1]));
        assert!(v.get("input_job").is_none(), "{v}");
        assert_eq!(store.load().unwrap().jobs[0].input_jobs, vec![1]);
    }
}
