//! Wall clocks a test can step. A daemon started under libfaketime (the Debian package `libfaketime`,
//! loaded with `LD_PRELOAD`) reads its wall clock moved by the offset written in a file of its own, which
//! the test rewrites while the daemon runs; its monotonic clock is left alone, as a real NTP step leaves
//! it. This is how the tests meet a host whose clock is wrong or jumps, without touching the machine's.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian installs the library.
pub const LIBRARY: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Whether libfaketime is installed (`.ci/setup.sh` installs it).
pub fn available() -> bool {
    Path::new(LIBRARY).exists()
}

/// One process's steppable wall clock: the file its offset is read from.
#[derive(Clone, Debug)]
pub struct FakeClock {
    file: PathBuf,
}

impl FakeClock {
    /// The clock whose offset lives in `file`; the file is created at offset 0 unless it exists, so a
    /// restarted process keeps its clock.
    pub fn at(file: impl Into<PathBuf>) -> anyhow::Result<Self> {
        let clock = Self { file: file.into() };
        if !clock.file.exists() {
            clock.set_offset_s(0)?;
        }
        Ok(clock)
    }

    /// Moves the clock to `seconds` away from the host's (negative: behind). A running process sees the
    /// step within a second (libfaketime re-reads the file that often).
    pub fn set_offset_s(&self, seconds: i64) -> anyhow::Result<()> {
        if let Some(dir) = self.file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Written whole, then renamed: the reader never sees half a value.
        let staged = self.file.with_extension("next");
        std::fs::write(&staged, format!("{seconds:+}s\n"))?;
        std::fs::rename(&staged, &self.file)?;
        Ok(())
    }

    /// Makes `command` run on this clock.
    pub fn apply(&self, command: &mut Command) -> anyhow::Result<()> {
        anyhow::ensure!(available(), "{LIBRARY} is missing (install the Debian package libfaketime)");
        command
            .env("LD_PRELOAD", LIBRARY)
            .env("FAKETIME_TIMESTAMP_FILE", &self.file)
            .env("FAKETIME_CACHE_DURATION", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            // The daemons fork nothing that should inherit the clock.
            .env("FAKETIME_DONT_RESET", "1");
        Ok(())
    }
}
