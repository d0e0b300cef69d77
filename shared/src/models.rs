//! The served models and their current versions.
//!
//! Every tier is configured with the same table, written `name@version` separated by commas
//! (`smollm2-135m-instruct@1`). The version is part of every cache key, so bumping it makes every older
//! entry unreachable at once. The core's registry adds each model's [`ModelSpec`] (context length,
//! price, APIs, backend pool), which the tiers learn from it and list in `/v1/models`.

use std::collections::BTreeMap;

use crate::auto_model::{auto_version, AUTO_MODEL};
use crate::model_spec::{ModelApi, ModelSpec};
use crate::RequestError;

/// A model name and its current version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRef {
    /// Canonical (lowercase) name.
    pub name: String,
    /// Current version.
    pub version: u64,
}

/// The table of served models.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelTable {
    models: Vec<ModelRef>,
    /// The registry's metadata, by model name (a model the registry has not described has none).
    specs: BTreeMap<String, ModelSpec>,
    /// `auto`, at the version [`auto_version`] gives these models.
    auto: ModelRef,
}

/// The model table a local mesh serves by default.
pub const DEFAULT_MODELS: &str = "smollm2-135m-instruct@1";

impl ModelTable {
    /// Parses `name@version,name@version`.
    pub fn parse(table: &str) -> Result<Self, String> {
        let mut models = Vec::new();
        for item in table.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, version) =
                item.split_once('@').ok_or_else(|| format!("model {item:?} has no @version"))?;
            let version =
                version.trim().parse().map_err(|_| format!("model {item:?}: version is not an integer"))?;
            let name = name.trim().to_ascii_lowercase();
            if name.is_empty() {
                return Err(format!("model {item:?} has an empty name"));
            }
            models.push(ModelRef { name, version });
        }
        if models.is_empty() {
            return Err("the model table is empty".into());
        }
        Ok(Self::of(models, BTreeMap::new()))
    }

    /// A table of `models` (names lowercased); `None` when there are none.
    pub fn from_models(models: impl IntoIterator<Item = ModelRef>) -> Option<Self> {
        let models: Vec<ModelRef> = models
            .into_iter()
            .map(|m| ModelRef { name: m.name.trim().to_ascii_lowercase(), version: m.version })
            .filter(|m| !m.name.is_empty())
            .collect();
        (!models.is_empty()).then_some(Self::of(models, BTreeMap::new()))
    }

    fn of(models: Vec<ModelRef>, specs: BTreeMap<String, ModelSpec>) -> Self {
        let auto = ModelRef { name: AUTO_MODEL.to_owned(), version: auto_version(&models) };
        Self { models, specs, auto }
    }

    /// This table with `spec` as `name`'s metadata (a name it does not serve is ignored).
    pub fn with_spec(mut self, name: &str, spec: ModelSpec) -> Self {
        let name = name.trim().to_ascii_lowercase();
        if self.models.iter().any(|m| m.name == name) {
            self.specs.insert(name, spec);
        }
        self
    }

    /// `name`'s metadata from the registry, if it has any.
    pub fn spec(&self, name: &str) -> Option<&ModelSpec> {
        self.specs.get(name)
    }

    /// Whether `name` answers `api`: what its registry entry lists, chat alone when it has none; `auto`
    /// answers what any model answers.
    pub fn serves(&self, name: &str, api: ModelApi) -> bool {
        if name == AUTO_MODEL {
            return self.models.iter().any(|m| self.serves(&m.name, api));
        }
        self.spec(name).map_or(api == ModelApi::Chat, |spec| spec.serves(api))
    }

    /// This table with the versions of `newer` (a registry that knows better), and the models only
    /// `newer` has added. Versions only move forward: a source that is behind (an older view of the
    /// registry) never takes a model back to a version it has left.
    pub fn updated(&self, newer: &ModelTable) -> ModelTable {
        let mut models = self.models.clone();
        for model in &newer.models {
            match models.iter_mut().find(|m| m.name == model.name) {
                Some(known) => known.version = known.version.max(model.version),
                None => models.push(model.clone()),
            }
        }
        let mut specs = self.specs.clone();
        specs.extend(newer.specs.iter().map(|(name, spec)| (name.clone(), spec.clone())));
        Self::of(models, specs)
    }

    /// Resolves a requested model name (case-insensitive) to the served model (`auto` to itself, at
    /// the table's [`auto_version`]), or a 404.
    pub fn resolve(&self, requested: &str) -> Result<&ModelRef, RequestError> {
        let wanted = requested.trim();
        if wanted.eq_ignore_ascii_case(AUTO_MODEL) {
            return Ok(&self.auto);
        }
        self.models
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(wanted))
            .ok_or_else(|| RequestError::model_not_found(wanted))
    }

    /// All served models.
    pub fn models(&self) -> &[ModelRef] {
        &self.models
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_resolves_case_insensitively() {
        let table = ModelTable::parse("SmolLM2-135M-Instruct@3, other@1").expect("valid");
        assert_eq!(table.resolve("smollm2-135m-instruct").map(|m| m.version), Ok(3));
        assert_eq!(table.resolve("OTHER").map(|m| m.name.as_str()), Ok("other"));
        assert_eq!(table.resolve("gpt-4").map_err(|e| e.status), Err(404));
        assert_eq!(table.resolve("Auto").map(|m| (m.name.as_str(), m.version)), Ok(("auto", 4)));
        assert!(ModelTable::parse("x").is_err());
        assert!(ModelTable::parse("x@y").is_err());
        assert!(ModelTable::parse("").is_err());
    }

    #[test]
    fn a_registry_updates_versions_and_adds_models() {
        let flags = ModelTable::parse("a@1,b@4").expect("valid");
        let core = ModelTable::from_models([
            ModelRef { name: "A".into(), version: 2 },
            ModelRef { name: "c".into(), version: 1 },
        ])
        .expect("non-empty");
        let table = flags.updated(&core);
        let versions: Vec<(&str, u64)> =
            table.models().iter().map(|m| (m.name.as_str(), m.version)).collect();
        assert_eq!(versions, [("a", 2), ("b", 4), ("c", 1)]);
        assert!(ModelTable::from_models([]).is_none());
        // A source behind (a lagging core node, an older regional view) takes no model back.
        let behind = ModelTable::from_models([ModelRef { name: "a".into(), version: 1 }]).expect("non-empty");
        assert_eq!(table.updated(&behind).resolve("a").map(|m| m.version), Ok(2));
    }

    #[test]
    fn a_registry_brings_its_specs() {
        let spec = ModelSpec { context_length: 4096, ..Default::default() };
        let flags = ModelTable::parse("a@1").expect("valid");
        let core = ModelTable::parse("a@1,b@1")
            .expect("valid")
            .with_spec("B", spec.clone())
            .with_spec("x", spec.clone());
        let table = flags.updated(&core);
        assert_eq!(table.spec("b"), Some(&spec));
        assert_eq!(table.spec("a"), None);
        assert_eq!(table.spec("x"), None, "a model the table does not serve gets no spec");
    }
}
