//! A star as text, `a,b,c,...` (its labels by cell: outer, then inner), written and read back. Listing jobs write
//! one string per unique star and the coordinator reads every one of them back, so both ways are tuned and kept
//! together: what one writes, the other must read.

use sweep_space::SpaceError;

use crate::masks::label_bits;

/// A star as text: its labels by cell (outer, then inner), comma-separated.
///
/// One allocation per star, digits written by hand: a listing search makes a string for every unique star
/// (396,930 for n = 12), and formatting each label into a `String` of its own and joining them was a tenth of
/// `solve star --points 12`'s CPU.
pub(crate) fn encode(labels: &[u8]) -> String {
    let mut s = String::with_capacity(labels.len() * 3);
    write_labels(&mut s, labels, ",");
    s
}

/// Appends `labels` in decimal, `sep` between them.
pub(crate) fn write_labels(s: &mut String, labels: &[u8], sep: &str) {
    for (i, &l) in labels.iter().enumerate() {
        if i > 0 {
            s.push_str(sep);
        }
        if l >= 100 {
            s.push(char::from(b'0' + l / 100));
        }
        if l >= 10 {
            s.push(char::from(b'0' + l / 10 % 10));
        }
        s.push(char::from(b'0' + l % 10));
    }
}

/// Labels written as `a,b,c,...` (1 or 2 digits each, as every star's are: 2n <= 62; nothing else), into
/// `buf`: the coordinator reads every listed star, so the common case is read without allocating and
/// without a branch per label; anything else (three digits, more labels than `buf` holds, a stray byte)
/// takes [`parse_labels_slowly`], which reads any `u8` and names what is wrong.
pub(crate) fn parse_plain(s: &str, buf: &mut [u8; 64]) -> Option<usize> {
    // Whether a label has one digit or two is a coin toss from label to label, and a branch on it was
    // mispredicted about every other label: the width is computed, not branched on. The text is copied
    // behind zeros so that looking one or two bytes ahead never leaves it.
    const MAX: usize = 64 * 3 - 1;
    let bytes = s.as_bytes();
    let end = bytes.len();
    if end == 0 || end > MAX || bytes[end - 1] == b',' {
        return None;
    }
    let mut text = [0u8; MAX + 3];
    text[..end].copy_from_slice(bytes);
    let (mut i, mut len, mut ok) = (0, 0, true);
    while i < end {
        let d0 = text[i].wrapping_sub(b'0');
        let d1 = text[i + 1].wrapping_sub(b'0');
        let two = d1 <= 9;
        let next = i + 1 + usize::from(two);
        ok &= d0 <= 9 && (text[next] == b',' || next == end);
        // A select (cmov), not a branch: both values are computed.
        let both = d0.wrapping_mul(10).wrapping_add(d1);
        *buf.get_mut(len)? = if two { both } else { d0 };
        len += 1;
        i = next + 1;
    }
    ok.then_some(len)
}

/// A star's labels by cell, checked to be `cells` labels that are a permutation of 1..=`cells`.
pub(crate) fn parse_solution_into<'a>(
    s: &str,
    cells: usize,
    buf: &'a mut [u8; 64],
) -> Result<&'a [u8], SpaceError> {
    let bad = |why: String| SpaceError::Verification(format!("solution `{s}`: {why}"));
    let len = match parse_plain(s, buf) {
        Some(len) => len,
        None => {
            let labels = parse_labels_slowly(s)?;
            if labels.len() == cells {
                buf[..cells].copy_from_slice(&labels);
            }
            labels.len()
        }
    };
    if len != cells {
        return Err(bad(format!("{len} labels, expected {cells}")));
    }
    let labels = &buf[..cells];
    // `cells` labels, each one of the `cells` bits 1..=2n: all of those bits set means no label repeats.
    let (mut seen, mut small) = (0u64, true);
    for &l in labels {
        small &= l < 64;
        seen |= 1 << (l & 63);
    }
    if !small || seen != label_bits(cells) {
        return Err(bad("not a permutation of 1..2n".into()));
    }
    Ok(labels)
}

pub(crate) fn parse_labels_slowly(s: &str) -> Result<Vec<u8>, SpaceError> {
    let bad = |why: String| SpaceError::Verification(format!("solution `{s}`: {why}"));
    s.split(',')
        .map(|t| t.parse::<u8>().map_err(|e| bad(format!("`{t}`: {e}"))))
        .collect()
}
