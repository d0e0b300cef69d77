//! A file system that loses, at a power cut, everything that was not synced: every file's writes since
//! its last `fsync`/`fdatasync` and every directory change since its directory's last `fsync`, as a disk
//! with a volatile cache behind a strict POSIX file system would. It runs in the test process over FUSE
//! (the test runs as root and mounts `/dev/fuse` itself) and keeps everything in memory; daemons under
//! test keep their data directories in it. [`LazyFs::power_cut`] unmounts it (the daemons must be dead
//! by then), drops whatever was not synced, and mounts it again; [`LazyFs::fail_syncs`] makes it a disk
//! whose syncs fail.
//!
//! Support for the cross-process tests, not a test itself.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use fuser::{
    BackgroundSession, FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};

/// Attributes and names are never cached by the kernel: every call reaches the state.
const NO_CACHE: Duration = Duration::ZERO;
const ROOT: u64 = 1;
const BLOCK: u32 = 4096;

/// One file or directory.
#[derive(Clone, Debug)]
struct Node {
    kind: FileType,
    perm: u16,
    /// A file's bytes as written.
    data: Vec<u8>,
    /// A file's bytes as of its last sync.
    synced: Vec<u8>,
    /// Byte ranges written since the last sync (`start..end`); a size change marks its tail.
    dirty: Vec<(usize, usize)>,
    /// A directory's entries as they are.
    entries: BTreeMap<OsString, u64>,
    /// A directory's entries as of its last sync.
    synced_entries: BTreeMap<OsString, u64>,
    mtime: SystemTime,
}

impl Node {
    fn new(kind: FileType, perm: u16) -> Self {
        Self {
            kind,
            perm,
            data: Vec::new(),
            synced: Vec::new(),
            dirty: Vec::new(),
            entries: BTreeMap::new(),
            synced_entries: BTreeMap::new(),
            mtime: SystemTime::now(),
        }
    }

    /// Makes what was written durable: only the dirty ranges are copied (a log segment is 64 MiB).
    fn sync(&mut self) {
        self.synced.resize(self.data.len(), 0);
        for (start, end) in self.dirty.drain(..) {
            let end = end.min(self.data.len());
            if start < end {
                self.synced[start..end].copy_from_slice(&self.data[start..end]);
            }
        }
        self.synced_entries.clone_from(&self.entries);
    }

    fn attr(&self, ino: u64) -> FileAttr {
        let size = self.data.len() as u64;
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.mtime,
            mtime: self.mtime,
            ctime: self.mtime,
            crtime: self.mtime,
            kind: self.kind,
            perm: self.perm,
            nlink: if self.kind == FileType::Directory { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: BLOCK,
            flags: 0,
        }
    }
}

/// Every node by inode number.
#[derive(Debug)]
struct State {
    nodes: BTreeMap<u64, Node>,
    next_ino: u64,
    /// Syncs so far, for the report.
    syncs: u64,
    /// Whether every sync fails with `EIO` (a failing disk) and makes nothing durable.
    failing_syncs: bool,
}

impl State {
    fn new() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert(ROOT, Node::new(FileType::Directory, 0o755));
        Self { nodes, next_ino: ROOT + 1, syncs: 0, failing_syncs: false }
    }

    /// Drops everything not synced; nodes no synced entry reaches are gone.
    fn power_cut(&mut self) {
        for node in self.nodes.values_mut() {
            node.data.clone_from(&node.synced);
            node.dirty.clear();
            node.entries.clone_from(&node.synced_entries);
        }
        let mut reachable = vec![ROOT];
        let mut seen = std::collections::BTreeSet::new();
        while let Some(ino) = reachable.pop() {
            if seen.insert(ino) {
                if let Some(node) = self.nodes.get(&ino) {
                    reachable.extend(node.entries.values().copied());
                }
            }
        }
        self.nodes.retain(|ino, _| seen.contains(ino));
        // A synced entry may name a node that was never created durably: it reads as an empty file.
        for ino in seen {
            self.nodes.entry(ino).or_insert_with(|| Node::new(FileType::RegularFile, 0o644));
        }
    }

    fn child(&self, parent: u64, name: &OsStr) -> Option<u64> {
        self.nodes.get(&parent)?.entries.get(name).copied()
    }

    fn add(&mut self, parent: u64, name: &OsStr, node: Node) -> Result<(u64, FileAttr), i32> {
        let dir = self.nodes.get(&parent).ok_or(libc::ENOENT)?;
        if dir.kind != FileType::Directory {
            return Err(libc::ENOTDIR);
        }
        if dir.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let attr = node.attr(ino);
        self.nodes.insert(ino, node);
        let dir = self.nodes.get_mut(&parent).ok_or(libc::ENOENT)?;
        dir.entries.insert(name.to_owned(), ino);
        dir.mtime = SystemTime::now();
        Ok((ino, attr))
    }
}

/// The FUSE side: every call works on the shared state.
struct Fuse {
    state: Arc<Mutex<State>>,
}

impl Fuse {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Filesystem for Fuse {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let state = self.state();
        match state.child(parent, name).and_then(|ino| state.nodes.get(&ino).map(|n| n.attr(ino))) {
            Some(attr) => reply.entry(&NO_CACHE, &attr, 0),
            None => reply.error(libc::ENOENT),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.state().nodes.get(&ino) {
            Some(node) => reply.attr(&NO_CACHE, &node.attr(ino)),
            None => reply.error(libc::ENOENT),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut state = self.state();
        let Some(node) = state.nodes.get_mut(&ino) else { return reply.error(libc::ENOENT) };
        if let Some(mode) = mode {
            node.perm = (mode & 0o7777) as u16;
        }
        if let Some(size) = size {
            let size = size as usize;
            let old = node.data.len();
            node.data.resize(size, 0);
            node.dirty.push((old.min(size), old.max(size)));
            node.mtime = SystemTime::now();
        }
        reply.attr(&NO_CACHE, &node.attr(ino));
    }

    fn mkdir(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        match self.state().add(parent, name, Node::new(FileType::Directory, (mode & 0o7777) as u16)) {
            Ok((_, attr)) => reply.entry(&NO_CACHE, &attr, 0),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.state().add(parent, name, Node::new(FileType::RegularFile, (mode & 0o7777) as u16)) {
            Ok((_, attr)) => reply.created(&NO_CACHE, &attr, 0, 0, 0),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut state = self.state();
        let Some(dir) = state.nodes.get_mut(&parent) else { return reply.error(libc::ENOENT) };
        match dir.entries.remove(name) {
            Some(_) => reply.ok(),
            None => reply.error(libc::ENOENT),
        }
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut state = self.state();
        let Some(ino) = state.child(parent, name) else { return reply.error(libc::ENOENT) };
        if state.nodes.get(&ino).is_some_and(|n| !n.entries.is_empty()) {
            return reply.error(libc::ENOTEMPTY);
        }
        if let Some(dir) = state.nodes.get_mut(&parent) {
            dir.entries.remove(name);
        }
        reply.ok();
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let mut state = self.state();
        let Some(ino) = state.child(parent, name) else { return reply.error(libc::ENOENT) };
        if flags & libc::RENAME_EXCHANGE != 0 {
            return reply.error(libc::EINVAL);
        }
        if flags & libc::RENAME_NOREPLACE != 0 && state.child(newparent, newname).is_some() {
            return reply.error(libc::EEXIST);
        }
        if !state.nodes.contains_key(&newparent) {
            return reply.error(libc::ENOENT);
        }
        if let Some(dir) = state.nodes.get_mut(&parent) {
            dir.entries.remove(name);
        }
        if let Some(dir) = state.nodes.get_mut(&newparent) {
            dir.entries.insert(newname.to_owned(), ino);
        }
        reply.ok();
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.state().nodes.contains_key(&ino) {
            true => reply.opened(0, 0),
            false => reply.error(libc::ENOENT),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let state = self.state();
        let Some(node) = state.nodes.get(&ino) else { return reply.error(libc::ENOENT) };
        let start = (offset.max(0) as usize).min(node.data.len());
        let end = start.saturating_add(size as usize).min(node.data.len());
        reply.data(&node.data[start..end]);
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let mut state = self.state();
        let Some(node) = state.nodes.get_mut(&ino) else { return reply.error(libc::ENOENT) };
        let start = offset.max(0) as usize;
        let end = start + data.len();
        if node.data.len() < end {
            node.data.resize(end, 0);
        }
        node.data[start..end].copy_from_slice(data);
        match node.dirty.last_mut() {
            // Appends and rewrites of the same stretch stay one range.
            Some(last) if last.0 <= start && start <= last.1 => last.1 = last.1.max(end),
            _ => node.dirty.push((start, end)),
        }
        node.mtime = SystemTime::now();
        reply.written(data.len() as u32);
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        let mut state = self.state();
        state.syncs += 1;
        if state.failing_syncs {
            return reply.error(libc::EIO);
        }
        match state.nodes.get_mut(&ino) {
            Some(node) => {
                node.sync();
                reply.ok();
            }
            None => reply.error(libc::ENOENT),
        }
    }

    fn fsyncdir(&mut self, req: &Request<'_>, ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty) {
        self.fsync(req, ino, fh, datasync, reply);
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let state = self.state();
        let Some(dir) = state.nodes.get(&ino) else { return reply.error(libc::ENOENT) };
        let dots = [(ino, FileType::Directory, OsString::from(".")), (ino, FileType::Directory, "..".into())];
        let children = dir.entries.iter().map(|(name, child)| {
            let kind = state.nodes.get(child).map_or(FileType::RegularFile, |n| n.kind);
            (*child, kind, name.clone())
        });
        for (i, (child, kind, name)) in
            dots.into_iter().chain(children).enumerate().skip(offset.max(0) as usize)
        {
            if reply.add(child, (i + 1) as i64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, BLOCK, 255, BLOCK);
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut state = self.state();
        let Some(node) = state.nodes.get_mut(&ino) else { return reply.error(libc::ENOENT) };
        let end = (offset.max(0) + length.max(0)) as usize;
        if node.data.len() < end {
            let old = node.data.len();
            node.data.resize(end, 0);
            node.dirty.push((old, end));
        }
        reply.ok();
    }
}

/// A mounted lazy file system.
pub struct LazyFs {
    mountpoint: PathBuf,
    state: Arc<Mutex<State>>,
    session: Option<BackgroundSession>,
}

impl LazyFs {
    /// Mounts an empty one at `mountpoint` (created if missing).
    pub fn mount(mountpoint: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(mountpoint)?;
        let mut fs = Self {
            mountpoint: mountpoint.to_owned(),
            state: Arc::new(Mutex::new(State::new())),
            session: None,
        };
        fs.attach()?;
        Ok(fs)
    }

    fn attach(&mut self) -> anyhow::Result<()> {
        let fuse = Fuse { state: Arc::clone(&self.state) };
        let options = [MountOption::FSName("lazy-fs".into()), MountOption::RW, MountOption::Dev];
        let session = fuser::spawn_mount2(fuse, &self.mountpoint, &options).with_context(|| {
            format!("mounting a FUSE file system at {} (needs root and /dev/fuse)", self.mountpoint.display())
        })?;
        self.session = Some(session);
        Ok(())
    }

    /// Makes every sync from now on fail with `EIO` and make nothing durable (`true`), or work again.
    pub fn fail_syncs(&self, failing: bool) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).failing_syncs = failing;
    }

    /// Cuts the power: unmounts (every process using it must be dead), drops whatever was not synced,
    /// and mounts what is left again. Returns how many syncs the file system had seen.
    pub fn power_cut(&mut self) -> anyhow::Result<u64> {
        if let Some(session) = self.session.take() {
            session.join();
        }
        let syncs = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.power_cut();
            state.syncs
        };
        self.attach()?;
        Ok(syncs)
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            session.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_cut_keeps_synced_bytes_and_entries_and_drops_the_rest() {
        let mut state = State::new();
        let (dir, _) = state.add(ROOT, OsStr::new("d"), Node::new(FileType::Directory, 0o755)).expect("dir");
        let (file, _) =
            state.add(dir, OsStr::new("f"), Node::new(FileType::RegularFile, 0o644)).expect("file");
        let node = state.nodes.get_mut(&file).expect("node");
        node.data = b"synced".to_vec();
        node.dirty.push((0, 6));
        node.sync();
        node.data.extend_from_slice(b" and not");
        node.dirty.push((6, 14));
        state.nodes.get_mut(&ROOT).expect("root").sync();
        state.nodes.get_mut(&dir).expect("dir").sync();
        state.add(dir, OsStr::new("new"), Node::new(FileType::RegularFile, 0o644)).expect("unsynced entry");
        state.power_cut();
        assert_eq!(state.nodes[&file].data, b"synced");
        assert_eq!(state.child(dir, OsStr::new("new")), None, "its directory was not synced after it");
        assert_eq!(state.child(dir, OsStr::new("f")), Some(file));
    }
}
