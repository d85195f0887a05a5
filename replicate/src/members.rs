//! `Members`: who is in the group and how each member is reached. raft's `ConfState` holds ids only; the
//! addresses travel in the context of each membership entry, are kept beside the `ConfState` in the log
//! store, and go inside every snapshot, so that a member that catches up by snapshot learns how to reach the
//! others even when the entries that added them were compacted away.
//!
//! A snapshot's bytes are framed as `MAGIC`, the length of the members record (4 bytes, big-endian), the
//! record, then the state machine's bytes. Bytes without the magic are a bare state machine snapshot (no
//! addresses).

use std::collections::BTreeMap;

use crate::error::ReplicateError;

/// Starts every framed snapshot.
const MAGIC: &[u8; 8] = b"swpsnap1";
/// The first line of a members record.
const HEADER: &str = "sweep members 1";

/// The group's members as of some applied index, with the highest id ever given (ids are never reused: a
/// member that comes back empty under its old id would contradict the log the others kept for it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members {
    /// Every voter's address (how the others send it messages), by id.
    pub addresses: BTreeMap<u64, String>,
    /// The highest id that was ever a member.
    pub highest_id: u64,
}

impl Members {
    /// The founding members.
    pub fn new(addresses: BTreeMap<u64, String>) -> Members {
        let highest_id = addresses.keys().next_back().copied().unwrap_or(0);
        Members {
            addresses,
            highest_id,
        }
    }

    /// The id the next member added gets.
    pub fn next_id(&self) -> u64 {
        self.highest_id + 1
    }

    /// The voter at `address`, if any.
    pub fn id_at(&self, address: &str) -> Option<u64> {
        self.addresses
            .iter()
            .find(|(_, a)| a.as_str() == address)
            .map(|(&id, _)| id)
    }

    pub(crate) fn add(&mut self, id: u64, address: String) {
        self.addresses.insert(id, address);
        self.highest_id = self.highest_id.max(id);
    }

    pub(crate) fn remove(&mut self, id: u64) {
        self.addresses.remove(&id);
    }

    /// A readable record: the header, `highest N`, then `ID ADDRESS` per member.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut text = format!("{HEADER}\nhighest {}\n", self.highest_id);
        for (id, address) in &self.addresses {
            text.push_str(&format!("{id} {address}\n"));
        }
        text.into_bytes()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Members, ReplicateError> {
        let bad = |why: String| ReplicateError::Inconsistent(format!("members record: {why}"));
        let text = std::str::from_utf8(bytes).map_err(|e| bad(e.to_string()))?;
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(bad("no header".into()));
        }
        let highest_id = lines
            .next()
            .and_then(|l| l.strip_prefix("highest "))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| bad("no highest id".into()))?;
        let mut members = Members {
            addresses: BTreeMap::new(),
            highest_id,
        };
        for line in lines {
            let (id, address) = line
                .split_once(' ')
                .ok_or_else(|| bad(format!("line `{line}`")))?;
            let id: u64 = id.parse().map_err(|_| bad(format!("id in `{line}`")))?;
            members.addresses.insert(id, address.to_string());
        }
        Ok(members)
    }
}

/// Checks an address given for a new member: it goes into a line-based record, and into every member's
/// configuration for good.
pub(crate) fn check_address(address: &str) -> Result<(), ReplicateError> {
    if address.is_empty()
        || address.len() > 1024
        || address.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ReplicateError::BadMembership(format!(
            "`{address}` is not an address (1 to 1024 characters, no spaces)"
        )));
    }
    Ok(())
}

/// A snapshot's bytes: the members record, then the state machine's bytes.
pub(crate) fn frame(members: &Members, state: &[u8]) -> Vec<u8> {
    let record = members.encode();
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + record.len() + state.len());
    out.extend_from_slice(MAGIC);
    // A members record is a few lines per member, far below 4 GiB.
    out.extend_from_slice(
        &u32::try_from(record.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(&record);
    out.extend_from_slice(state);
    out
}

/// The members record and the state machine's bytes of a snapshot (`None`: a bare state snapshot).
pub(crate) fn unframe(data: &[u8]) -> Result<(Option<Members>, &[u8]), ReplicateError> {
    let Some(rest) = data.strip_prefix(MAGIC.as_slice()) else {
        return Ok((None, data));
    };
    if rest.len() < 4 {
        return Err(ReplicateError::Inconsistent(
            "snapshot cut inside its members record".into(),
        ));
    }
    let (len, rest) = rest.split_at(4);
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if rest.len() < len {
        return Err(ReplicateError::Inconsistent(
            "snapshot cut inside its members record".into(),
        ));
    }
    let (record, state) = rest.split_at(len);
    Ok((Some(Members::decode(record)?), state))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Members {
        Members::new(
            [(1, "http://a:1"), (2, "http://b:2"), (3, "http://c:3")]
                .into_iter()
                .map(|(id, a)| (id, a.to_string()))
                .collect(),
        )
    }

    #[test]
    fn a_framed_snapshot_gives_back_its_members_and_state() {
        let mut m = three();
        m.remove(2);
        m.add(4, "http://d:4".into());
        assert_eq!(m.next_id(), 5);
        let framed = frame(&m, b"state bytes");
        let (members, state) = unframe(&framed).expect("unframe");
        assert_eq!(members, Some(m));
        assert_eq!(state, b"state bytes");
    }

    #[test]
    fn bare_state_bytes_have_no_members() {
        assert_eq!(unframe(b"raw").expect("raw"), (None, &b"raw"[..]));
    }

    #[test]
    fn cut_or_garbled_records_are_errors() {
        let framed = frame(&three(), b"s");
        for cut in MAGIC.len()..framed.len() - 1 {
            let r = unframe(&framed[..cut]);
            assert!(r.is_err() || r.expect("ok").1.is_empty(), "cut at {cut}");
        }
        let mut garbled = framed.clone();
        garbled[MAGIC.len() + 4] = b'X';
        assert!(unframe(&garbled).is_err());
    }

    #[test]
    fn addresses_with_spaces_are_refused() {
        assert!(check_address("http://a:1").is_ok());
        for bad in ["", "http://a :1", "a\nb"] {
            assert!(check_address(bad).is_err(), "{bad:?}");
        }
    }
}
