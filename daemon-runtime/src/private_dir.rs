//! Data directories only their owner can open: cached answers, tenants' prompts and replication state
//! live in them.

use std::io;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::Path;

/// Creates `path` (and any missing parents) readable by its owner only; an existing directory is kept as
/// it is, with a warning when others may read it.
pub fn create(path: &Path) -> io::Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    path = %path.display(),
                    mode = format!("{:o}", meta.permissions().mode() & 0o777),
                    "the data directory is open to other users; chmod 700 it"
                );
            }
            Ok(())
        }
        _ => std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_data_directory_is_its_owners_alone() {
        let root = std::env::temp_dir().join(format!("private-dir-{}", std::process::id()));
        let dir = root.join("data").join("regional");
        create(&dir).expect("create");
        for made in [&dir, &root.join("data")] {
            let mode = std::fs::metadata(made).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", made.display());
        }
        create(&dir).expect("an existing one is kept");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }
}
