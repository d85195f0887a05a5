//! Sizes on the command line: a worker's `--memory`, a job's `--chunk-memory` and `--chunk-disk`.

/// Why a size given on the command line (`--memory`, `--chunk-memory`, `--chunk-disk`) is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BytesError {
    #[error(
        "`{0}` is not a size: give bytes, or a number with K, M, G or T (binary units: 2G is 2 GiB)"
    )]
    NotASize(String),
    #[error("`{0}` is more bytes than fit in 64 bits")]
    TooLarge(String),
    #[error("`{0}` is no size at all: give more than 0")]
    Zero(String),
}

/// A size in bytes: `1073741824`, `512M`, `2G`, `1.5GiB`, `64k` (K, M, G and T are powers of 1024, with or
/// without `B` or `iB`, in any case). Zero is refused: a worker reports 0 when it does not know.
pub fn parse_bytes(text: &str) -> Result<u64, BytesError> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(BytesError::NotASize(text.to_string())),
    };
    let bytes = if let Ok(n) = number.parse::<u64>() {
        n.checked_mul(1 << shift)
            .ok_or_else(|| BytesError::TooLarge(text.to_string()))?
    } else {
        // A fraction of a unit (`1.5G`); plain digits stay exact above.
        let n: f64 = number
            .parse()
            .map_err(|_| BytesError::NotASize(text.to_string()))?;
        let bytes = n * (1u64 << shift) as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(BytesError::TooLarge(text.to_string()));
        }
        bytes as u64
    };
    if bytes == 0 {
        return Err(BytesError::Zero(text.to_string()));
    }
    Ok(bytes)
}

/// `2 GiB`, `1.5 KiB`, `10 bytes`: a size as a person reads it.
pub fn bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if b >= size {
            return if b.is_multiple_of(size) {
                format!("{} {unit}", b / size)
            } else {
                format!("{:.1} {unit}", b as f64 / size as f64)
            };
        }
    }
    format!("{b} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn sizes_take_binary_units_and_refuse_nonsense() {
        assert_eq!(parse_bytes("1073741824"), Ok(GIB));
        assert_eq!(parse_bytes("2G"), Ok(2 * GIB));
        assert_eq!(parse_bytes("2g"), Ok(2 * GIB));
        assert_eq!(parse_bytes("2GiB"), Ok(2 * GIB));
        assert_eq!(parse_bytes(" 512M "), Ok(512 << 20));
        assert_eq!(parse_bytes("512 MB"), Ok(512 << 20));
        assert_eq!(parse_bytes("64k"), Ok(64 << 10));
        assert_eq!(parse_bytes("1T"), Ok(1 << 40));
        assert_eq!(parse_bytes("1.5G"), Ok(3 * GIB / 2));
        assert_eq!(parse_bytes("100b"), Ok(100));
        for bad in ["", "G", "two gigs", "2X", "-1G", "1.2.3M", "0x10"] {
            assert_eq!(
                parse_bytes(bad),
                Err(BytesError::NotASize(bad.to_string())),
                "{bad:?}"
            );
        }
        assert_eq!(parse_bytes("0"), Err(BytesError::Zero("0".into())));
        assert_eq!(
            parse_bytes("0.0001k"),
            Err(BytesError::Zero("0.0001k".into()))
        );
        assert!(matches!(
            parse_bytes("99999999999T"),
            Err(BytesError::TooLarge(_))
        ));
        assert!(matches!(parse_bytes("1e300"), Err(BytesError::NotASize(_))));
        let err = parse_bytes("lots").unwrap_err().to_string();
        assert!(err.contains("`lots` is not a size"), "{err}");
    }

    #[test]
    fn sizes_read_back_as_a_person_writes_them() {
        assert_eq!(bytes(2 << 30), "2 GiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(10), "10 bytes");
    }
}
