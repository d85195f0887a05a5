//! Files shipped with a job (`--ship`): packed once by the command line into a tar archive named by its blake3
//! digest, stored by the coordinator like any artifact, and unpacked once per machine by the workers, whose
//! chunks find the files on PATH, in `SWEEP_SHIP` and linked into their working directory.

use std::path::{Path, PathBuf};

/// Files packed for `--ship`, with their digest (computed once: the archive may be large).
pub struct Shipped {
    pub digest: String,
    pub packed: Vec<u8>,
}

impl Shipped {
    /// Packs a file or a directory and names the archive.
    pub fn pack(path: &Path) -> std::io::Result<Shipped> {
        let packed = pack(path)?;
        Ok(Shipped {
            digest: digest(&packed),
            packed,
        })
    }
}

/// Packs a file or a directory: a tar archive with fixed times and owners, so the same files give the same
/// digest (and are stored once) however often they are shipped.
pub fn pack(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Deterministic);
    builder.follow_symlinks(true);
    let meta = std::fs::metadata(path)?;
    if meta.is_dir() {
        builder.append_dir_all(".", path)?;
    } else {
        let name = path.file_name().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
        })?;
        builder.append_path_with_name(path, name)?;
    }
    builder.into_inner()
}

/// The name of an archive: its blake3 digest in lower-case hex, the form the coordinator stores artifacts by.
pub fn digest(archive: &[u8]) -> String {
    blake3::hash(archive).to_hex().to_string()
}

/// Whether `text` has the form of a [`digest`]: a job naming anything else could never fetch its files, so it
/// is refused when built rather than failing on every worker.
pub fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Unpacks a shipped archive once per process and machine: into a directory named by its digest, renamed into
/// place only when complete, so concurrent chunks and later runs reuse it.
pub fn unpack_once(digest: &str, archive: &[u8]) -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    // The user's id in the name, and the owner checked: on a shared machine another user could otherwise plant
    // a directory under the expected name and have their files run as ours.
    let uid = nix::unistd::getuid().as_raw();
    let dir = base.join(format!("sweep-ship-{uid}-{digest}"));
    if let Ok(meta) = std::fs::symlink_metadata(&dir) {
        use std::os::unix::fs::MetadataExt;
        if meta.is_dir() && meta.uid() == uid && meta.mode() & 0o022 == 0 {
            return Ok(dir);
        }
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} exists but is not a private directory of this user",
                dir.display()
            ),
        ));
    }
    let tmp = base.join(format!(
        "sweep-ship-{uid}-{digest}.{}.tmp",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
    }
    let mut ar = tar::Archive::new(archive);
    ar.set_preserve_permissions(true);
    if let Err(e) = ar.unpack(&tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another process unpacked the same archive first: use its copy.
        Err(_) if dir.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(e),
    }
}

/// Links the shipped files into a chunk's working directory, so `./program` works as well as `program`.
pub fn link_into(shipped: &Path, dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(shipped)? {
        let entry = entry?;
        std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_is_deterministic_and_named_by_a_digest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "one").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), "two").unwrap();
        let first = Shipped::pack(dir.path()).unwrap();
        let again = Shipped::pack(dir.path()).unwrap();
        assert_eq!(first.packed, again.packed);
        assert_eq!(first.digest, again.digest);
        assert_eq!(first.digest, digest(&first.packed));
        assert!(is_digest(&first.digest));
        std::fs::write(dir.path().join("a"), "changed").unwrap();
        assert_ne!(Shipped::pack(dir.path()).unwrap().digest, first.digest);
        assert!(Shipped::pack(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn only_lower_case_hex_of_the_right_length_is_a_digest() {
        assert!(is_digest(&"0a".repeat(32)));
        assert!(!is_digest(&"0A".repeat(32)));
        assert!(!is_digest(&"0a".repeat(31)));
        assert!(!is_digest(&"0g".repeat(32)));
        assert!(!is_digest(""));
    }

    #[test]
    fn an_archive_unpacks_once_into_its_digest_and_links_into_a_directory() {
        let src = tempfile::tempdir().unwrap();
        // A file name no other test ships: the unpacked directory is shared by every run on this machine.
        let name = format!("unpack-test-{}", std::process::id());
        std::fs::write(src.path().join(&name), "payload").unwrap();
        let shipped = Shipped::pack(src.path()).unwrap();
        let dir = unpack_once(&shipped.digest, &shipped.packed).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join(&name)).unwrap(), "payload");
        // A second unpack reuses the directory, even given other bytes: the digest names the contents.
        assert_eq!(unpack_once(&shipped.digest, b"not a tar").unwrap(), dir);
        let work = tempfile::tempdir().unwrap();
        link_into(&dir, work.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(work.path().join(&name)).unwrap(),
            "payload"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
