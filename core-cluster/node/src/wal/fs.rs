//! The few file operations the write-ahead log needs, behind a trait so that a test can put a file layer
//! under the log that forgets everything not covered by a completed sync (a power loss).
//!
//! [`OsDir`] is the real one: positional reads and writes, `fdatasync`, segments created zero-filled and
//! synced under a temporary name, then renamed and the directory synced.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One open segment file.
pub trait WalFile: Send + Sync {
    /// The file's length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every write that returned before this call durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
}

/// The directory of a write-ahead log.
pub trait WalDir: Send + Sync {
    /// The names of the files in the directory.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Creates `name` holding `len` zero bytes; it returns once the file, its content and its directory
    /// entry are durable. The blocks are written, not only reserved, so later writes inside the file
    /// change no metadata and `fdatasync` needs no journal commit.
    fn create(&self, name: &str, len: u64) -> io::Result<Arc<dyn WalFile>>;
    /// Creates (or replaces) `name` holding `bytes`, readable at once in this boot and durable only once
    /// it and the directory are synced, which a failing disk may refuse.
    fn write_now(&self, name: &str, bytes: &[u8]) -> io::Result<Arc<dyn WalFile>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, name: &str) -> io::Result<Arc<dyn WalFile>>;
    /// Removes `name`; the removal is durable after [`WalDir::sync`].
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes the directory's entries durable.
    fn sync(&self) -> io::Result<()>;
}

/// A write-ahead log directory on the real file system, locked against a second writer.
#[derive(Debug)]
pub struct OsDir {
    path: PathBuf,
    /// Holds the exclusive lock on `LOCK` for as long as the directory is open.
    _lock: File,
}

/// The lock file's name.
const LOCK: &str = "LOCK";

/// Creates `path` and any missing directories above it, each one durably and readable by its owner only:
/// a directory created here has its parent synced, so a power loss cannot drop its entry after files
/// inside it were synced. An existing `path` is left as it is.
pub fn create_dir_synced(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_synced(parent)?;
    }
    // Owner-only: the node's data (answers, tenants' prompts) is nobody else's to read.
    match std::os::unix::fs::DirBuilderExt::mode(&mut fs::DirBuilder::new(), 0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => return Ok(()),
        Err(e) => return Err(e),
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(parent)?.sync_all()
}

impl OsDir {
    /// Opens `path`, creating it (and syncing its parent) if it does not exist, and takes its lock. A
    /// lock held elsewhere (a previous instance still exiting) is waited for up to `lock_wait`.
    pub fn open(path: &Path, lock_wait: Duration) -> io::Result<Self> {
        create_dir_synced(path)?;
        let lock =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path.join(LOCK))?;
        let deadline = Instant::now() + lock_wait;
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(Self { path: path.to_owned(), _lock: lock }),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!("{} is locked by another process", path.display()),
                    ))
                }
                Err(TryLockError::Error(e)) => return Err(e),
            }
        }
    }
}

impl WalFile for File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(self, buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }
}

impl WalDir for OsDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for item in fs::read_dir(&self.path)? {
            if let Some(name) = item?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    fn create(&self, name: &str, len: u64) -> io::Result<Arc<dyn WalFile>> {
        const CHUNK: usize = 1 << 20;
        let temporary = self.path.join(format!("{name}.tmp"));
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&temporary)?;
        let zeros = vec![0u8; CHUNK];
        let mut written = 0u64;
        while written < len {
            let n = (len - written).min(CHUNK as u64) as usize;
            FileExt::write_all_at(&file, &zeros[..n], written)?;
            written += n as u64;
        }
        file.sync_all()?;
        fs::rename(&temporary, self.path.join(name))?;
        self.sync()?;
        Ok(Arc::new(file))
    }

    fn write_now(&self, name: &str, bytes: &[u8]) -> io::Result<Arc<dyn WalFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.path.join(name))?;
        FileExt::write_all_at(&file, bytes, 0)?;
        Ok(Arc::new(file))
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn WalFile>> {
        Ok(Arc::new(OpenOptions::new().read(true).write(true).open(self.path.join(name))?))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.path.join(name))
    }

    fn sync(&self) -> io::Result<()> {
        File::open(&self.path)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creating_a_directory_synced_makes_its_missing_parents_and_keeps_an_existing_one() {
        let root = std::env::temp_dir().join(format!("create-dir-synced-{}", std::process::id()));
        let deep = root.join("data").join("snapshots");
        create_dir_synced(&deep).expect("create");
        assert!(deep.is_dir());
        fs::write(deep.join("kept"), b"x").expect("write");
        create_dir_synced(&deep).expect("again");
        assert!(deep.join("kept").exists(), "an existing directory is left as it is");
        fs::write(root.join("file"), b"x").expect("write");
        assert!(create_dir_synced(&root.join("file")).is_err(), "a file in the way is an error");
        fs::remove_dir_all(&root).expect("cleanup");
    }
}
