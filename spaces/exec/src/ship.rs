//! Files shipped with a job (`--ship`): packed once by the command line into a tar archive named by its blake3
//! digest, stored by the coordinator like any artifact, and unpacked once per machine and user by the workers,
//! whose chunks find the files on PATH, in `SWEEP_SHIP` and linked into their working directory.

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

/// Unpacks a shipped archive once per user and machine, into `sweep-ship-UID/DIGEST` under the temporary
/// directory ([`unpack_once_in`]); concurrent chunks and later runs reuse it.
pub fn unpack_once(digest: &str, archive: &[u8]) -> std::io::Result<PathBuf> {
    unpack_once_in(&std::env::temp_dir(), digest, archive)
}

/// Unpacks a shipped archive into `base/sweep-ship-UID/DIGEST`, renamed into place only when complete.
///
/// `sweep-ship-UID` belongs to this user and nobody else may enter it (mode 0700, checked, not a link): on a
/// shared machine another user could otherwise read the files, or plant a directory under the expected name
/// and have their files run as ours. What it holds is readable by everyone and writable by no one
/// (directories 0755, files 0444, or 0555 where the archive made them executable): the sandbox shows a
/// program the digest's directory alone, read-only, and the program runs as `nobody` outside its user
/// namespace when the worker is root, so it reads the files as any other user would.
pub fn unpack_once_in(base: &Path, digest: &str, archive: &[u8]) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let cache = private_dir(&base.join(format!("sweep-ship-{uid}")), uid)?;
    let dir = cache.join(digest);
    if let Ok(meta) = std::fs::symlink_metadata(&dir) {
        if meta.is_dir() && meta.uid() == uid {
            return Ok(dir);
        }
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} exists but is not a directory of this user",
                dir.display()
            ),
        ));
    }
    let tmp = cache.join(format!("{digest}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
    }
    let mut ar = tar::Archive::new(archive);
    ar.set_preserve_permissions(true);
    if let Err(e) = ar.unpack(&tmp).and_then(|()| readable_by_all(&tmp)) {
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

/// `dir`, made if missing with mode 0700, after checking that it is a directory (not a link) of user `uid`
/// that no other user may enter.
fn private_dir(dir: &Path, uid: u32) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0 {
        return Ok(dir.to_path_buf());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!(
            "{} exists but is not a private directory of this user (mode 0700)",
            dir.display()
        ),
    ))
}

/// Sets the modes of everything under `root`, and of `root`: directories 0755, files 0555 where any execute
/// bit was set, else 0444. Links are left alone (a mode change would follow them).
fn readable_by_all(root: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    };
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                dirs.push(path);
            } else if meta.is_file() {
                mode(
                    &path,
                    if meta.mode() & 0o111 != 0 {
                        0o555
                    } else {
                        0o444
                    },
                )?;
            }
        }
        mode(&dir, 0o755)?;
    }
    Ok(())
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
        std::fs::write(src.path().join("data"), "payload").unwrap();
        let shipped = Shipped::pack(src.path()).unwrap();
        let base = tempfile::tempdir().unwrap();
        let dir = unpack_once_in(base.path(), &shipped.digest, &shipped.packed).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("data")).unwrap(),
            "payload"
        );
        // A second unpack reuses the directory, even given other bytes: the digest names the contents.
        assert_eq!(
            unpack_once_in(base.path(), &shipped.digest, b"not a tar").unwrap(),
            dir
        );
        let work = tempfile::tempdir().unwrap();
        link_into(&dir, work.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(work.path().join("data")).unwrap(),
            "payload"
        );
    }

    /// The cache directory keeps other users out; inside it a sandboxed program, whatever user it runs as,
    /// may read and run the files and change none.
    #[test]
    fn unpacked_files_are_readable_by_all_and_writable_by_none_in_a_directory_of_the_user_s_own() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let src = tempfile::tempdir().unwrap();
        let prog = src.path().join("prog.sh");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::create_dir(src.path().join("sub")).unwrap();
        std::fs::write(src.path().join("sub/table"), "t").unwrap();
        std::fs::set_permissions(
            src.path().join("sub/table"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let shipped = Shipped::pack(src.path()).unwrap();
        let base = tempfile::tempdir().unwrap();
        let dir = unpack_once_in(base.path(), &shipped.digest, &shipped.packed).unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
        let uid = nix::unistd::geteuid().as_raw();
        let cache = dir.parent().unwrap();
        assert_eq!(cache, base.path().join(format!("sweep-ship-{uid}")));
        assert_eq!(mode(cache), 0o700);
        assert_eq!(std::fs::metadata(cache).unwrap().uid(), uid);
        assert_eq!(mode(&dir), 0o755);
        assert_eq!(mode(&dir.join("prog.sh")), 0o555);
        assert_eq!(mode(&dir.join("sub")), 0o755);
        assert_eq!(mode(&dir.join("sub/table")), 0o444);
        // Shipped as a single file too.
        let one = Shipped::pack(&prog).unwrap();
        let dir = unpack_once_in(base.path(), &one.digest, &one.packed).unwrap();
        assert_eq!((mode(&dir), mode(&dir.join("prog.sh"))), (0o755, 0o555));
    }

    #[test]
    fn a_cache_directory_other_users_may_enter_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let shipped = Shipped::pack(Path::new("Cargo.toml")).unwrap();
        let base = tempfile::tempdir().unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        let cache = base.path().join(format!("sweep-ship-{uid}"));
        std::fs::create_dir(&cache).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = unpack_once_in(base.path(), &shipped.digest, &shipped.packed).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
        assert!(err.to_string().contains("not a private directory"), "{err}");
        // Nor is a link to a private directory elsewhere.
        std::fs::remove_dir(&cache).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::set_permissions(elsewhere.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &cache).unwrap();
        assert!(unpack_once_in(base.path(), &shipped.digest, &shipped.packed).is_err());
    }
}
