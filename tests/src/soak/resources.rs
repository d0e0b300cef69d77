//! What a process group holds, read from `/proc` and the disk: resident memory and open files summed over
//! the group (the edge is `wrangler` and its `workerd` child), and the bytes under a data directory.

use std::fs;
use std::path::Path;

/// One process group's resources at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Resources {
    /// Resident memory of every process in the group, in bytes.
    pub rss_bytes: u64,
    /// Open file descriptors of every process in the group.
    pub open_files: u64,
    /// Bytes of the files under the data directory (0 when it does not exist).
    pub data_bytes: u64,
}

/// The resources of process group `pgid` and of `data_dir`.
pub fn of_group(pgid: u32, data_dir: &Path) -> Resources {
    let mut resources = Resources { data_bytes: dir_bytes(data_dir), ..Resources::default() };
    let Ok(proc_dir) = fs::read_dir("/proc") else { return resources };
    for item in proc_dir.flatten() {
        let Some(pid) = item.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if process_group(pid) != Some(pgid) {
            continue;
        }
        resources.rss_bytes += rss_bytes(pid).unwrap_or(0);
        resources.open_files += fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |fds| fds.count() as u64);
    }
    resources
}

/// The process group of `pid`, from `/proc/<pid>/stat` (the fifth field, after the command's parentheses).
fn process_group(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_command = &stat[stat.rfind(')')? + 1..];
    after_command.split_whitespace().nth(2)?.parse().ok()
}

/// `VmRSS` of `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes of every file under `dir`, following no links (0 when it does not exist; files that vanish
/// while it is walked count as 0).
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(items) = fs::read_dir(dir) else { return 0 };
    items
        .flatten()
        .map(|item| match item.file_type() {
            Ok(kind) if kind.is_dir() => dir_bytes(&item.path()),
            Ok(kind) if kind.is_file() => item.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_files_and_a_directory_counts_its_bytes() {
        let dir = std::env::temp_dir().join(format!("soak-resources-{}", std::process::id()));
        fs::create_dir_all(dir.join("inner")).expect("dir");
        fs::write(dir.join("a"), [0u8; 100]).expect("a");
        fs::write(dir.join("inner/b"), [0u8; 23]).expect("b");
        let me = std::process::id();
        let group = process_group(me).expect("own group");
        let resources = of_group(group, &dir);
        assert_eq!(resources.data_bytes, 123);
        assert!(resources.rss_bytes > 1 << 20, "{resources:?}");
        assert!(resources.open_files >= 3, "{resources:?}");
        assert_eq!(dir_bytes(&dir.join("missing")), 0);
        fs::remove_dir_all(&dir).expect("clean up");
    }
}
