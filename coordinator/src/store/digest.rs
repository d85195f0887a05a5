//! blake3 digests as the store and the wire spell them: lower-case hex for names and records, raw bytes for
//! the hashes the store keeps beside what it writes. Apart from the artifacts so that the consensus entry's
//! codec, which checks a shipped file against its digest, does not depend on the files' layer.

/// Whether `digest` is a blake3 digest in lower-case hex: the only names a shipped file may have (they become
/// file names).
pub fn is_digest(digest: &str) -> bool {
    digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// blake3 of `bytes` in hex: the digest job records and workers use for artifacts.
pub fn digest_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// blake3 of `bytes` as the 32 bytes a key's value records.
pub(super) fn hash(bytes: &[u8]) -> Vec<u8> {
    blake3::hash(bytes).as_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_64_lower_case_hex_digits() {
        let d = digest_hex(b"shipped");
        assert!(is_digest(&d), "{d}");
        assert_eq!(hex::encode(hash(b"shipped")), d);
        assert!(!is_digest(&d.to_uppercase()));
        assert!(!is_digest(&d[1..]));
        assert!(!is_digest("../etc/passwd"));
    }
}
