//! The configuration files the harness writes for the daemons it starts: one TOML file per daemon,
//! passed with `--config` (keys are the daemons' flag names; see `daemon_runtime::config_file`). The tier
//! secret never goes in them: it travels in `MESH_TIER_SECRET`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// One daemon's settings, written as its configuration file.
#[derive(Debug, Default, Clone)]
pub struct DaemonConfig {
    table: toml::Table,
}

impl DaemonConfig {
    /// No settings yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`.
    pub fn set(mut self, key: &str, value: impl Into<toml::Value>) -> Self {
        self.table.insert(key.to_owned(), value.into());
        self
    }

    /// Sets `key` to a path.
    pub fn path(self, key: &str, path: &Path) -> Self {
        self.set(key, path.display().to_string())
    }

    /// Writes the file at `path` (creating its directory) and returns the path.
    pub fn write(&self, path: &Path) -> anyhow::Result<PathBuf> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(path, self.table.to_string())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_toml_the_daemons_read() {
        let path = std::env::temp_dir().join(format!("daemon-config-{}/core.toml", std::process::id()));
        let config = DaemonConfig::new()
            .set("id", 1)
            .set("peers", vec!["1=127.0.0.1:7100".to_owned(), "2=127.0.0.1:7101".to_owned()])
            .set("bootstrap", true)
            .path("data_dir", Path::new("/tmp/a \"quoted\" dir"));
        config.write(&path).expect("written");
        let text = std::fs::read_to_string(&path).expect("read");
        let table: toml::Table = text.parse().expect("toml");
        assert_eq!(table["id"].as_integer(), Some(1));
        assert_eq!(table["peers"].as_array().map(Vec::len), Some(2));
        assert_eq!(table["data_dir"].as_str(), Some("/tmp/a \"quoted\" dir"));
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }
}
