//! A file layer for tests that loses power on demand (the idea of LazyFS): every byte not covered by a
//! completed `sync_data`, every removal not covered by a directory sync, is forgotten at a crash.
//!
//! A crash may also tear: each 512-byte sector written since the last sync survives or not at random,
//! in any order, as a disk that writes back pages out of order would leave it. Handles from before a
//! crash belong to a dead machine: everything they try afterwards fails.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::fs::{WalDir, WalFile};
use super::record::SECTOR;

/// One file's bytes as the program sees them and as the disk holds them.
#[derive(Default)]
struct Node {
    current: Option<Vec<u8>>,
    durable: Option<Vec<u8>>,
}

struct Disk {
    generation: u64,
    nodes: BTreeMap<String, Node>,
    /// Files whose next sync fails (an EIO: nothing becomes durable, and the bytes stay readable).
    failing: std::collections::BTreeSet<String>,
}

/// A directory on a disk that can lose power.
#[derive(Clone)]
pub struct CrashFs {
    disk: Arc<Mutex<Disk>>,
    generation: u64,
}

struct SimFile {
    fs: CrashFs,
    name: String,
}

/// A small deterministic generator (splitmix64), enough for choosing crash points and torn sectors.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn dead() -> io::Error {
    io::Error::other("the machine lost power")
}

impl CrashFs {
    /// An empty disk.
    pub fn new() -> Self {
        Self {
            disk: Arc::new(Mutex::new(Disk {
                generation: 0,
                nodes: BTreeMap::new(),
                failing: Default::default(),
            })),
            generation: 0,
        }
    }

    fn live(&self) -> io::Result<MutexGuard<'_, Disk>> {
        let disk = self.disk.lock().expect("never poisoned");
        if disk.generation == self.generation {
            Ok(disk)
        } else {
            Err(dead())
        }
    }

    /// Cuts the power: what was not synced is lost (or, when `tear`, partly kept sector by sector).
    /// Returns the directory of the machine after the restart.
    pub fn crash(&self, tear: bool, rng: &mut Rng) -> CrashFs {
        let mut disk = self.disk.lock().expect("never poisoned");
        disk.generation += 1;
        disk.nodes.retain(|_, node| node.durable.is_some());
        for node in disk.nodes.values_mut() {
            let mut kept = node.durable.clone().expect("retained above");
            if let (true, Some(current)) = (tear, &node.current) {
                for (sector, bytes) in current.chunks(SECTOR).enumerate() {
                    let at = sector * SECTOR;
                    if at + bytes.len() <= kept.len()
                        && kept[at..at + bytes.len()] != *bytes
                        && rng.below(2) == 0
                    {
                        kept[at..at + bytes.len()].copy_from_slice(bytes);
                    }
                }
            }
            node.current = Some(kept);
        }
        CrashFs { disk: Arc::clone(&self.disk), generation: disk.generation }
    }

    /// Kills the process but not the machine: every byte written stays (the page cache survives).
    /// Returns the directory the restarted process sees.
    pub fn kill(&self) -> CrashFs {
        let mut disk = self.disk.lock().expect("never poisoned");
        disk.generation += 1;
        CrashFs { disk: Arc::clone(&self.disk), generation: disk.generation }
    }

    /// Flips one bit of a file as the disk holds it (damage no crash explains).
    /// Makes the next sync of `name` fail.
    pub fn fail_next_sync_of(&self, name: &str) {
        self.disk.lock().expect("never poisoned").failing.insert(name.to_owned());
    }

    pub fn flip_bit(&self, name: &str, offset: usize) {
        let mut disk = self.disk.lock().expect("never poisoned");
        let node = disk.nodes.get_mut(name).expect("the file exists");
        for bytes in [&mut node.current, &mut node.durable].into_iter().flatten() {
            bytes[offset] ^= 0x04;
        }
    }
}

impl WalFile for SimFile {
    fn size(&self) -> io::Result<u64> {
        let disk = self.fs.live()?;
        Ok(disk.nodes.get(&self.name).and_then(|n| n.current.as_ref()).map_or(0, |b| b.len() as u64))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let disk = self.fs.live()?;
        let bytes = disk.nodes.get(&self.name).and_then(|n| n.current.as_ref()).ok_or_else(dead)?;
        let at = offset as usize;
        let source =
            bytes.get(at..at + buf.len()).ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(source);
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut disk = self.fs.live()?;
        let bytes = disk.nodes.get_mut(&self.name).and_then(|n| n.current.as_mut()).ok_or_else(dead)?;
        let at = offset as usize;
        if bytes.len() < at + buf.len() {
            bytes.resize(at + buf.len(), 0);
        }
        bytes[at..at + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut disk = self.fs.live()?;
        if disk.failing.remove(&self.name) {
            return Err(io::Error::other("input/output error (injected)"));
        }
        if let Some(node) = disk.nodes.get_mut(&self.name) {
            if let Some(current) = &node.current {
                node.durable = Some(current.clone());
            }
        }
        Ok(())
    }
}

impl WalDir for CrashFs {
    fn list(&self) -> io::Result<Vec<String>> {
        let disk = self.live()?;
        Ok(disk.nodes.iter().filter(|(_, n)| n.current.is_some()).map(|(name, _)| name.clone()).collect())
    }

    fn create(&self, name: &str, len: u64) -> io::Result<Arc<dyn WalFile>> {
        let mut disk = self.live()?;
        let zeros = vec![0u8; len as usize];
        disk.nodes.insert(name.to_owned(), Node { current: Some(zeros.clone()), durable: Some(zeros) });
        Ok(Arc::new(SimFile { fs: self.clone(), name: name.to_owned() }))
    }

    fn write_now(&self, name: &str, bytes: &[u8]) -> io::Result<Arc<dyn WalFile>> {
        let mut disk = self.live()?;
        let durable = disk.nodes.get(name).and_then(|node| node.durable.clone());
        disk.nodes.insert(name.to_owned(), Node { current: Some(bytes.to_vec()), durable });
        Ok(Arc::new(SimFile { fs: self.clone(), name: name.to_owned() }))
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn WalFile>> {
        let disk = self.live()?;
        match disk.nodes.get(name) {
            Some(Node { current: Some(_), .. }) => {
                Ok(Arc::new(SimFile { fs: self.clone(), name: name.to_owned() }))
            }
            _ => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut disk = self.live()?;
        let node = disk.nodes.get_mut(name).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        node.current = None;
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut disk = self.live()?;
        disk.nodes.retain(|_, node| node.current.is_some());
        Ok(())
    }
}
