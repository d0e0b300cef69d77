//! The registered models, held decoded in memory and written to their tree only at snapshots and at a
//! clean stop.
//!
//! Every proposal of puts changes its model's hottest-keys summary (64 keys), so writing the model's row
//! each time rewrote about 5 KB of sled per proposal: at one client, more than the entry itself. The trees
//! are trusted only after a clean stop (`clean_stop.rs`), and after any other stop the state is rebuilt
//! from the snapshot and the log, so the row needs to be in sled only when a snapshot is written from the
//! trees and when the node stops cleanly. Reads get a model from memory too, without decoding its summary.

use std::collections::BTreeMap;
use std::io;
use std::sync::RwLock;

use super::super::records::ModelState;
use super::rows::Row;

/// Every model by name, as applied.
#[derive(Debug, Default)]
pub struct Models(RwLock<BTreeMap<String, ModelState>>);

fn sled_err(e: sled::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl Models {
    /// The models stored in `tree`.
    pub fn load(tree: &sled::Tree) -> io::Result<Self> {
        let models = Self::default();
        models.reload(tree)?;
        Ok(models)
    }

    /// Replaces every model with those stored in `tree` (after a snapshot replaced the trees).
    pub fn reload(&self, tree: &sled::Tree) -> io::Result<()> {
        let mut loaded = BTreeMap::new();
        for item in tree.iter() {
            let (name, row) = item.map_err(sled_err)?;
            loaded.insert(String::from_utf8_lossy(&name).into_owned(), ModelState::from_row(&row)?);
        }
        *self.write() = loaded;
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, ModelState>> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, ModelState>> {
        self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The model `name`, if registered.
    pub fn get(&self, name: &str) -> Option<ModelState> {
        self.read().get(name).cloned()
    }

    /// What `look` makes of the model `name` (`None`: not registered), without copying its summary.
    pub fn with<R>(&self, name: &str, look: impl FnOnce(Option<&ModelState>) -> R) -> R {
        look(self.read().get(name))
    }

    /// Every model, by name.
    pub fn all(&self) -> BTreeMap<String, ModelState> {
        self.read().clone()
    }

    /// Every model's current version, by name.
    pub fn versions(&self) -> Vec<(String, u64)> {
        self.read().iter().map(|(name, model)| (name.clone(), model.version)).collect()
    }

    /// Number of registered models.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Stores what a batch applied (models are never removed).
    pub fn set(&self, written: BTreeMap<String, ModelState>) {
        if !written.is_empty() {
            self.write().extend(written);
        }
    }

    /// Writes every model whose row in `tree` differs, so that the tree holds them all.
    pub fn write_back(&self, tree: &sled::Tree) -> io::Result<()> {
        for (name, model) in self.read().iter() {
            let row = model.to_row()?;
            if tree.get(name.as_bytes()).map_err(sled_err)?.as_deref() != Some(row.as_slice()) {
                tree.insert(name.as_bytes(), row).map_err(sled_err)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_live_in_memory_until_written_back_and_load_again_as_written() {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let tree = db.open_tree("models").expect("tree");
        let models = Models::load(&tree).expect("load");
        let mut m = ModelState { version: 3, ..Default::default() };
        m.hot.record("k", 2);
        models.set(BTreeMap::from([("m".to_owned(), m.clone())]));
        assert_eq!(models.get("m"), Some(m.clone()));
        assert_eq!(models.versions(), vec![("m".to_owned(), 3)]);
        assert!(tree.is_empty(), "nothing written before a write-back");
        models.write_back(&tree).expect("write back");
        assert_eq!(Models::load(&tree).expect("load").all(), models.all());
        models.set(BTreeMap::from([("m".to_owned(), ModelState { version: 4, ..Default::default() })]));
        models.reload(&tree).expect("reload");
        assert_eq!(models.get("m"), Some(m), "a reload takes the tree's");
    }
}
