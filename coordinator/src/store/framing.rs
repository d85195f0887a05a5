//! Reading the store's framed values (blocks, lists of solutions): length-prefixed fields taken off the front of
//! a byte slice, where running out of bytes is a damaged value, never a panic. A leaf, so that both codecs use it
//! without importing each other.

/// The next `n` bytes of `rest`, or `None` if it ends first (the store's framed values: blocks, list files).
pub(super) fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if rest.len() < n {
        return None;
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Some(head)
}

pub(super) fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let b: [u8; 4] = take(rest, 4)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

pub(super) fn take_u64(rest: &mut &[u8]) -> Option<u64> {
    let b: [u8; 8] = take(rest, 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}
